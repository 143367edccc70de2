"""Payloads compressed where they are made (issue 38 item 1, decision 0029) by the Python
client: on a version-3 connection a payload zstd shrinks travels as its frame (TURN_SPEC flag
ZSTD) with the BLAKE3 of its bytes; the server checks it and stores a blob byte-identical to
the one a raw append stores; payloads that do not shrink, small ones and ``compress_level=None``
go raw. Bytes on the wire are counted by a forwarding proxy in front of a real server."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest
import zstandard

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p
from ctxstore.types import ServerInfo, TurnSpec

from conftest import REPO_ROOT, ServerProcess, new_server
from test_golden import decode_frame, encode_frame

GOLDEN_V3_ZSTD = REPO_ROOT / "protocol" / "tests" / "golden-v3-zstd.txt"


class CountingProxy:
    """Forwards one port to the server, counting the bytes clients send (a real TCP hop)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent_bytes = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, counted: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if counted:
                    with self._lock:
                        self.sent_bytes += len(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take(self) -> int:
        """The bytes sent since the last take."""
        with self._lock:
            sent, self.sent_bytes = self.sent_bytes, 0
        return sent

    def close(self) -> None:
        self.listener.close()


@pytest.fixture()
def proxy(server: ServerProcess) -> Iterator[CountingProxy]:
    counting = CountingProxy(server.addr)
    yield counting
    counting.close()


def _messages(count: int) -> bytes:
    return json.dumps(
        [{"role": "user", "content": f"message {i}: tell me about turn {i}"} for i in range(count)]
    ).encode()


def test_a_compressible_payload_travels_as_its_frame(proxy: CountingProxy) -> None:
    payload = _messages(2000)
    with ctxstore.Client(proxy.addr, timeout=20) as client:
        assert client.server_info().version == 7
        ctx = client.create_context()
        proxy.take()
        appended = client.append(ctx.context_id, payload, type_tag=4)
        sent = proxy.take()
        assert sent < len(payload) // 5, (sent, len(payload))
        assert appended.payload_hash == ctxstore.blob_hash(payload)
        assert (appended.turn.payload_len, appended.turn.type_tag) == (len(payload), 4)
        assert client.get_blob(appended.payload_hash) == payload
        # append_turns too, and a key's retry answers the first turn.
        other = _messages(1500)
        turns = client.append_turns(ctx.context_id, [TurnSpec(other, key="k")])
        assert proxy.take() < len(other) // 5
        again = client.append(ctx.context_id, other, key="k")
        assert again.existing and again.turn_id == turns[0].turn_id

    with ctxstore.Client(proxy.addr, timeout=20, compress_level=None) as raw:
        proxy.take()
        ctx = raw.create_context()
        same = raw.append(ctx.context_id, payload)
        assert proxy.take() > len(payload)
        # The blob a raw append names is the one the frame stored: the same hash, deduped.
        assert same.deduped and same.payload_hash == appended.payload_hash


def test_the_stored_blob_is_the_same_whether_sent_compressed_or_not(tmp_root: Path) -> None:
    payload = _messages(3000)
    stored = []
    for level in (3, None):
        process = new_server(tmp_root)
        try:
            with ctxstore.Client(process.addr, timeout=20, compress_level=level) as client:
                ctx = client.create_context()
                appended = client.append(ctx.context_id, payload)
                assert not appended.deduped
                # Raw on the wire (no ACCEPT_ZSTD): the stored bytes themselves.
                without_zstd = ctxstore.Client(process.addr, accept_zstd=False)
                with without_zstd:
                    stored.append(
                        (appended.payload_hash, without_zstd.get_blob(appended.payload_hash))
                    )
        finally:
            process.stop()
    assert stored[0] == stored[1] == (ctxstore.blob_hash(payload), payload)


def test_a_payload_that_does_not_shrink_goes_raw(proxy: CountingProxy) -> None:
    noise = os.urandom(100_000)
    compression = ops.Compression(1, 16 << 20)
    assert ops.compressed(noise, compression) is None
    assert ops.compressed(b"a" * (ops.COMPRESS_BYTES_MIN - 1), compression) is None
    assert ops.compressed(b"a" * ops.COMPRESS_BYTES_MIN, compression) is not None
    # Over the server's blob limit: raw, so that the refusal is the one it always was.
    assert ops.compressed(b"a" * 1000, ops.Compression(1, 999)) is None
    op = ops.append_turns(3, [TurnSpec(noise)], None, compression)
    assert isinstance(op.request, p.AppendTurns) and op.request.turns[0].zstd_hash is None
    with ctxstore.Client(proxy.addr, timeout=20) as client:
        ctx = client.create_context()
        proxy.take()
        appended = client.append(ctx.context_id, noise)
        assert proxy.take() > len(noise)
        assert client.get_blob(appended.payload_hash) == noise


def test_only_a_version_3_connection_compresses() -> None:
    info = ServerInfo(2, "old", 16 << 20, 64, 16 << 20, 1000, 4096)
    plan = ops.compression_for(1)
    assert plan.send(None) is ops.SERVER_INFO
    with pytest.raises(StopIteration) as done:
        plan.send(info)
    assert done.value.value is None
    plan = ops.compression_for(1)
    plan.send(None)
    with pytest.raises(StopIteration) as done:
        plan.send(dataclasses.replace(info, version=3))
    assert done.value.value == ops.Compression(1, 16 << 20)
    assert list(ops.compression_for(None)) == []
    for bad in ("fast", 1.5, True, 10**9):
        with pytest.raises(ValueError, match="compress_level"):
            ctxstore.Client("127.0.0.1:1", lazy=True, compress_level=bad)  # type: ignore[arg-type]


def test_the_server_checks_each_frame_and_writes_nothing_on_a_lie(server: ServerProcess) -> None:
    payload = b"hello, " * 200
    frame = zstandard.ZstdCompressor(level=1).compress(payload)
    with ctxstore.Client(server.addr, timeout=20) as client:
        ctx = client.create_context()

        def spec(claimed: bytes, raw_len: int) -> p.TurnSpecRecord:
            return p.TurnSpecRecord(
                p.ParentKind.HEAD, 0, 0, 0, False, p.ExtrasRecord(), frame, False, claimed, raw_len
            )

        lying_hash = spec(blake3.blake3(b"something else").digest(), len(payload))
        with pytest.raises(ctxstore.HashMismatch):
            client.request(p.AppendTurns(ctx.context_id, None, (lying_hash,)))
        lying_length = spec(blake3.blake3(payload).digest(), len(payload) + 1)
        with pytest.raises((ctxstore.InvalidArgument, ctxstore.HashMismatch)):
            client.request(p.AppendTurns(ctx.context_id, None, (lying_length,)))
        assert client.head(ctx.context_id).head_turn_id == 0
        honest = spec(blake3.blake3(payload).digest(), len(payload))
        answer = client.request(p.AppendTurns(ctx.context_id, None, (honest,)))
        assert isinstance(answer, p.AppendedTurnsResponse)
        assert answer.turns[0].turn.payload_hash == blake3.blake3(payload).digest()
        assert client.get_blob(answer.turns[0].turn.payload_hash) == payload


def test_golden_zstd_frame_decodes_and_reencodes() -> None:
    lines = [
        line
        for line in GOLDEN_V3_ZSTD.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(lines) == 1
    name, hex_frame, _ = (part.strip() for part in lines[0].split("|", 2))
    frame = bytes.fromhex(hex_frame)
    payload = b"hello, hello, hello, hello"
    expected = p.AppendTurns(
        3,
        None,
        (
            p.TurnSpecRecord(
                p.ParentKind.HEAD,
                0,
                1,
                1,
                False,
                p.ExtrasRecord(),
                bytes.fromhex("28b52ffd00486d00003868656c6c6f2c2001004a8a11"),
                False,
                blake3.blake3(payload).digest(),
                len(payload),
            ),
        ),
    )
    header, message = decode_frame(frame)
    assert (name, header.req_id, message) == ("append_turns_zstd", 16, expected)
    assert expected.required_version == 3
    assert encode_frame(16, expected) == frame
    spec = expected.turns[0]
    assert ops.inflate(spec.payload, len(payload)) == payload
    body = bytearray(frame[p.HEADER_BYTES :])
    flags_at = 10 + 4 + 8 + 2  # context ref, append_flags, expected_head, count: the spec
    assert body[flags_at + 21] == p.TURN_SPEC_ZSTD
    body[flags_at + 21] |= p.TURN_SPEC_BY_HASH
    with pytest.raises(p.ProtocolError, match="BY_HASH and ZSTD"):
        p.decode_request(p.MessageType.APPEND_TURNS, bytes(body))


@pytest.mark.parametrize("compress_level", [1, None])
def test_a_langgraph_checkpoint_travels_compressed(
    proxy: CountingProxy, compress_level: int | None
) -> None:
    """The LangGraph saver appends through the client's plans, so its checkpoints and channel
    values travel as zstd frames at the client's level too, and raw when it is None."""
    from langgraph.checkpoint.base import empty_checkpoint

    from ctxstore.langgraph import CtxstoreSaver

    messages = [f"message {i}: tell me about turn {i}" for i in range(3000)]
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": 1}
    client = ctxstore.Client(proxy.addr, timeout=20, compress_level=compress_level)
    with CtxstoreSaver(client, owns_client=True) as saver:
        value_bytes = len(saver.serde.dumps_typed(messages)[1])  # what the value's turn holds
        config = {"configurable": {"thread_id": f"t-{compress_level}", "checkpoint_ns": ""}}
        saver.get_tuple(config)  # connects, so the count below is the put's alone
        proxy.take()
        stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"messages": 1})
        sent = proxy.take()
        if compress_level is None:
            assert sent > value_bytes, (sent, value_bytes)
        else:
            assert sent < value_bytes // 4, (sent, value_bytes)
        got = saver.get_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"]["messages"] == messages
