"""ERRORs a real server sends to frames the client never sends (a raw socket speaks them here,
decoded with ctxstore._protocol), and CORRUPT driven by damaging a pack file on disk."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

import ctxstore
from ctxstore import _protocol as p
from ctxstore.errors import ServerError, error_for_code

from conftest import ServerProcess, new_server
from fakes import read_frame


def raw_connection(server: ServerProcess, hello: bool = True) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    if hello:
        sock.sendall(b"".join(p.encode_request(1, p.Hello(1, 1, b"", "raw"))))
        frame = read_frame(sock)
        assert frame is not None
        assert isinstance(p.decode_response(frame[0].msg_type, frame[1]), p.HelloResponse)
    return sock


def error_answer(sock: socket.socket) -> tuple[int, ServerError]:
    """The next frame, which must be an ERROR: its req_id and its exception."""
    frame = read_frame(sock)
    assert frame is not None, "the server closed without an ERROR"
    header, body = frame
    assert header.msg_type == p.ERROR_TYPE
    response = p.decode_response(header.msg_type, body)
    assert isinstance(response, p.ErrorResponse)
    return header.req_id, error_for_code(response.code, response.message, response.detail)


def assert_closed(sock: socket.socket) -> None:
    try:
        assert sock.recv(1) == b""
    except ConnectionResetError:
        pass


def test_request_before_hello_is_unauthorized(server: ServerProcess) -> None:
    with raw_connection(server, hello=False) as sock:
        sock.sendall(b"".join(p.encode_request(5, p.Ping(1))))
        req_id, error = error_answer(sock)
        assert req_id == 5 and isinstance(error, ctxstore.Unauthorized)
        assert_closed(sock)


def test_frame_with_flags_is_bad_frame(server: ServerProcess) -> None:
    with raw_connection(server) as sock:
        sock.sendall(p.encode_frame(p.MessageType.PING, 9, bytes(8), flags=1))
        req_id, error = error_answer(sock)
        assert req_id == 9 and isinstance(error, ctxstore.BadFrame)
        assert_closed(sock)


def test_frame_over_the_limit_is_too_large(server: ServerProcess) -> None:
    with raw_connection(server) as sock:
        sock.sendall(p.FrameHeader((16 << 20) + 1, p.MessageType.APPEND_TURN, 0, 4).encode())
        req_id, error = error_answer(sock)
        assert req_id == 4 and isinstance(error, ctxstore.TooLarge)
        assert_closed(sock)


def test_trailing_bytes_and_unknown_flags_are_bad_frame(server: ServerProcess) -> None:
    for body in (
        p.GetTurn(1).encode_body() + b"\x00",  # trailing byte
        p.GetLast(1, 1, 0).encode_body()[:12] + (4).to_bytes(4, "little"),  # unknown read flag
    ):
        msg_type = p.MessageType.GET_TURN if len(body) == 9 else p.MessageType.GET_LAST
        with raw_connection(server) as sock:
            sock.sendall(p.encode_frame(msg_type, 3, body))
            req_id, error = error_answer(sock)
            assert req_id == 3 and isinstance(error, ctxstore.BadFrame)
            assert_closed(sock)


def test_slow_frame_is_bad_frame_with_req_id_0(tmp_root: Path) -> None:
    process = new_server(tmp_root, extra_args=["--frame-timeout", "1s"])
    try:
        with raw_connection(process) as sock:
            sock.sendall(p.FrameHeader(8, p.MessageType.PING, 0, 7).encode())  # no body
            req_id, error = error_answer(sock)
            assert req_id == 0 and isinstance(error, ctxstore.BadFrame)
            assert_closed(sock)
    finally:
        process.stop()


def test_corrupt_pack_is_reported_as_corrupt(tmp_root: Path) -> None:
    process = new_server(tmp_root, extra_args=["--payload-cache-bytes", "0"])
    try:
        with ctxstore.Client(process.addr) as client:
            ctx = client.create_context()
            payload = os.urandom(50_000)  # incompressible: stored as it is
            appended = client.append(ctx.context_id, payload)
            damaged = False
            for pack in process.data_dir.rglob("*.pack"):
                data = pack.read_bytes()
                at = data.find(payload[:64])
                if at >= 0:
                    with open(pack, "r+b") as file:
                        file.seek(at + 1000)
                        file.write(bytes([data[at + 1000] ^ 0xFF]))
                    damaged = True
            assert damaged, "payload not found in any pack file"
            with pytest.raises(ctxstore.Corrupt) as info:
                client.get_blob(appended.payload_hash)
            assert info.value.code == 14 and "pack" in info.value.message
            with pytest.raises(ctxstore.Corrupt):
                client.last(ctx.context_id, 1, payloads=True)
            assert client.last(ctx.context_id, 1)[0].turn_id == appended.turn_id  # metadata
            client.ping()
    finally:
        process.kill()
