"""Quick ACKs while an answer arrives in pieces (decision 0016): both clients ask the kernel to
acknowledge at once (``TCP_QUICKACK``) before each wait for the rest of a frame part of which
is in, and never for a frame that arrived whole. Large answers from a real server read back
byte for byte; a stand-in server sends an answer in pieces, each only after the client acked
the one before, and cuts answers short (the connection's error names where)."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import ctxstore
from ctxstore import _net
from ctxstore import _protocol as p

from conftest import ServerProcess
from fakes import Behaviour, FakeServer, hello_then_bytes, read_frame, say_hello

QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
needs_quickack = pytest.mark.skipif(QUICKACK is None, reason="no TCP_QUICKACK on this platform")

TURNS = 40
TURN_BYTES = 64 * 1024


class Acks:
    """Counts the calls of ``_net.ack_now`` (which it still makes) and lets a thread wait for a
    count."""

    def __init__(self) -> None:
        self.socks: list[object] = []
        self._changed = threading.Condition()

    @property
    def count(self) -> int:
        with self._changed:
            return len(self.socks)

    def clear(self) -> None:
        with self._changed:
            self.socks.clear()

    def record(self, sock: Any) -> None:
        with self._changed:
            self.socks.append(sock)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.socks) >= count, timeout)


@pytest.fixture()
def acks(monkeypatch: pytest.MonkeyPatch) -> Acks:
    """``_net.ack_now`` replaced by a counting wrapper around it (both clients look it up on
    the module at each call)."""
    counter = Acks()
    real = _net.ack_now

    def counting(sock: Any) -> None:
        counter.record(sock)
        real(sock)

    monkeypatch.setattr(_net, "ack_now", counting)
    return counter


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair (client side, server side)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def quickack(sock: Any) -> int:
    assert QUICKACK is not None
    return int(sock.getsockopt(socket.IPPROTO_TCP, QUICKACK))


# --- the helper ---------------------------------------------------------------------------------


@needs_quickack
def test_ack_now_sets_tcp_quickack_on_a_connected_socket() -> None:
    assert QUICKACK is not None
    client, server = tcp_pair()
    with client, server:
        for sock in (client, server):
            # Delayed ACKs ("pingpong" mode) read 0; ack_now leaves that mode.
            sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 0)
            assert quickack(sock) == 0
            _net.ack_now(sock)
            assert quickack(sock) == 1
            # Not sticky on the kernel's side: so the readers call it before every wait.
            sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 0)
            assert quickack(sock) == 0
            _net.ack_now(sock)
            assert quickack(sock) == 1


@needs_quickack
async def test_ack_now_sets_tcp_quickack_on_the_async_clients_socket(
    server: ServerProcess,
) -> None:
    assert QUICKACK is not None
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        await client.ping()
        conn = client._conn
        assert conn is not None and conn._sock is not None  # a TransportSocket
        conn._sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 0)
        assert quickack(conn._sock) == 0
        _net.ack_now(conn._sock)
        assert quickack(conn._sock) == 1


def test_ack_now_ignores_failures() -> None:
    left, right = socket.socketpair()  # not TCP: TCP_QUICKACK fails there
    with left, right:
        _net.ack_now(left)
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.close()
    _net.ack_now(closed)  # EBADF: ignored


def test_ack_now_does_nothing_without_tcp_quickack(monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing:
        def setsockopt(self, *args: object) -> None:
            raise AssertionError("setsockopt called where the platform has no TCP_QUICKACK")

    monkeypatch.setattr(_net, "_QUICKACK", None)
    _net.ack_now(Refusing())  # type: ignore[arg-type]


# --- large answers from a real server, read back byte for byte ---------------------------------


@pytest.fixture(scope="module")
def big_context(server: ServerProcess) -> Iterator[tuple[int, list[bytes], bytes]]:
    """A context of TURNS turns of TURN_BYTES random bytes each, and a blob of a few MiB
    (not a multiple of any buffer size)."""
    payloads = [os.urandom(TURN_BYTES) for _ in range(TURNS)]
    blob = os.urandom((3 << 20) + 12_345)
    with ctxstore.Client(server.addr, timeout=60) as client:
        info = client.server_info()
        assert info.read_turns_max >= TURNS and info.blob_bytes_max >= len(blob)
        ctx = client.create_context()
        for payload in payloads:
            client.append(ctx.context_id, payload)
        client.append(client.create_context().context_id, blob)
        yield ctx.context_id, payloads, blob


def test_sync_reads_large_answers_in_pieces_and_acks(
    server: ServerProcess, big_context: tuple[int, list[bytes], bytes], acks: Acks
) -> None:
    ctx, payloads, blob = big_context
    with ctxstore.Client(server.addr, timeout=60) as client:
        conn = client._conn
        assert conn is not None
        acks.clear()
        page = client.last(ctx, TURNS, payloads=True)
        assert [t.payload for t in page] == payloads
        assert acks.count >= 1, "a 2.5 MiB answer arrives in pieces: the reader acks"
        assert all(sock is conn._sock for sock in acks.socks)
        acks.clear()
        assert client.get_blob(ctxstore.blob_hash(blob)) == blob
        assert acks.count >= 1
        # The connection goes on: small answers after large ones.
        client.ping()
        assert client.last(ctx, 1, payloads=True)[0].payload == payloads[-1]


async def test_async_reads_large_answers_in_pieces_and_acks(
    server: ServerProcess, big_context: tuple[int, list[bytes], bytes], acks: Acks
) -> None:
    ctx, payloads, blob = big_context
    async with ctxstore.AsyncClient(server.addr, timeout=60) as client:
        await client.ping()
        conn = client._conn
        assert conn is not None and conn._sock is not None
        acks.clear()
        page = await client.last(ctx, TURNS, payloads=True)
        assert [t.payload for t in page] == payloads
        assert acks.count >= 1, "a 2.5 MiB answer arrives in pieces: the reader acks"
        assert all(sock is conn._sock for sock in acks.socks)
        acks.clear()
        assert await client.get_blob(ctxstore.blob_hash(blob)) == blob
        assert acks.count >= 1
        await client.ping()
        assert (await client.last(ctx, 1, payloads=True))[0].payload == payloads[-1]


def test_sync_pipelined_large_and_small_answers(
    server: ServerProcess, big_context: tuple[int, list[bytes], bytes]
) -> None:
    ctx, payloads, blob = big_context
    with ctxstore.Client(server.addr, timeout=60) as client:

        def work(index: int) -> None:
            for i in range(4):
                if (index + i) % 3 == 0:
                    count = 1 + (index * 7 + i) % TURNS
                    page = client.last(ctx, count, payloads=True)
                    assert [t.payload for t in page] == payloads[-count:]
                elif (index + i) % 3 == 1:
                    assert client.get_blob(ctxstore.blob_hash(blob)) == blob
                else:
                    client.ping()
                    assert client.head(ctx).head_depth == TURNS - 1

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(8)))


async def test_async_pipelined_large_and_small_answers(
    server: ServerProcess, big_context: tuple[int, list[bytes], bytes]
) -> None:
    ctx, payloads, blob = big_context
    async with ctxstore.AsyncClient(server.addr, timeout=60) as client:

        async def work(index: int) -> None:
            for i in range(4):
                if (index + i) % 3 == 0:
                    count = 1 + (index * 7 + i) % TURNS
                    page = await client.last(ctx, count, payloads=True)
                    assert [t.payload for t in page] == payloads[-count:]
                elif (index + i) % 3 == 1:
                    assert await client.get_blob(ctxstore.blob_hash(blob)) == blob
                else:
                    await client.ping()
                    assert (await client.head(ctx)).head_depth == TURNS - 1

        await asyncio.gather(*(work(index) for index in range(8)))


# --- small answers: no system call --------------------------------------------------------------


def test_sync_small_answers_do_not_ack(
    server: ServerProcess, big_context: tuple[int, list[bytes], bytes], acks: Acks
) -> None:
    ctx, payloads, _ = big_context
    with ctxstore.Client(server.addr, timeout=20) as client:
        small = client.create_context()
        turn = client.append(small.context_id, b"a small turn")
        acks.clear()
        for _ in range(50):
            client.ping()
        assert client.head(ctx).head_depth == TURNS - 1
        assert client.head(small.context_id).head_turn_id == turn.turn_id
        assert client.get_turn(turn.turn_id).payload_hash == turn.payload_hash
        assert [t.payload for t in client.last(small.context_id, 1, payloads=True)] == [
            b"a small turn"
        ]
        assert acks.count == 0


async def test_async_small_answers_do_not_ack(
    server: ServerProcess, big_context: tuple[int, list[bytes], bytes], acks: Acks
) -> None:
    ctx, payloads, _ = big_context
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        small = await client.create_context()
        turn = await client.append(small.context_id, b"a small turn")
        acks.clear()
        for _ in range(50):
            await client.ping()
        await asyncio.gather(*(client.ping() for _ in range(50)))
        assert (await client.head(ctx)).head_depth == TURNS - 1
        assert (await client.head(small.context_id)).head_turn_id == turn.turn_id
        page = await client.last(small.context_id, 1, payloads=True)
        assert [t.payload for t in page] == [b"a small turn"]
        assert acks.count == 0


# --- a stand-in server that sends answers in pieces ---------------------------------------------

# A PONG is 16 + 8 bytes: the first 5 bytes of its header; the rest of the header and 3 bytes of
# the body; the rest of the body. Each piece after the first is sent only once the client acked
# (it waits for it: part of a frame is in), so a reader that did not ack stalls the test.
CUTS = (0, 5, 19, 24)


def pong_in_pieces(acks: Acks) -> Behaviour:
    def behaviour(conn: socket.socket) -> None:
        if not say_hello(conn, 2):
            return
        while (frame := read_frame(conn)) is not None:
            header, body = frame
            nonce = p.Ping.decode_body(p.Reader(body, "PING")).nonce
            answer = p.encode_response(header.req_id, p.Pong(nonce))
            assert len(answer) == CUTS[-1]
            base = acks.count
            for index, (start, end) in enumerate(itertools.pairwise(CUTS)):
                if index:
                    acks.wait_for(base + index)  # on a timeout, send anyway: the count fails
                conn.sendall(answer[start:end])

    return behaviour


def test_sync_acks_before_each_wait_inside_a_frame(acks: Acks) -> None:
    with FakeServer(pong_in_pieces(acks)) as fake:
        with ctxstore.Client(fake.addr, timeout=30) as client:
            acks.clear()
            for round_ in range(1, 4):
                client.ping()
                assert acks.count == 2 * round_
            assert client.connected


async def test_async_acks_before_each_wait_inside_a_frame(acks: Acks) -> None:
    with FakeServer(pong_in_pieces(acks)) as fake:
        async with ctxstore.AsyncClient(fake.addr, timeout=30) as client:
            await client.server_info()
            acks.clear()
            for round_ in range(1, 4):
                await client.ping()
                assert acks.count == 2 * round_
            assert client.connected


# Where a PONG is cut, and the end of the message of the ConnectionLost it makes.
CUT_SHORT = pytest.mark.parametrize(
    ("length", "where"),
    [
        (0, "the server closed the connection"),
        (5, "the connection closed inside a frame header"),
        (16, "the connection closed inside a frame"),
        (19, "the connection closed inside a frame"),
    ],
)


def cut_pong(length: int) -> Callable[[int], bytes]:
    """The first ``length`` bytes of a PONG (then the stand-in closes the connection)."""
    return lambda req_id: p.encode_response(req_id, p.Pong(7))[:length]


@CUT_SHORT
def test_sync_answer_cut_short(length: int, where: str) -> None:
    with FakeServer(hello_then_bytes(cut_pong(length), version=2)) as fake:
        with ctxstore.Client(fake.addr, timeout=10) as client:
            with pytest.raises(ctxstore.ConnectionLost) as info:
                client.ping(nonce=7)
            assert str(info.value).endswith(where), str(info.value)


@CUT_SHORT
async def test_async_answer_cut_short(length: int, where: str) -> None:
    with FakeServer(hello_then_bytes(cut_pong(length), version=2)) as fake:
        async with ctxstore.AsyncClient(fake.addr, timeout=10) as client:
            with pytest.raises(ctxstore.ConnectionLost) as info:
                await client.ping(nonce=7)
            assert str(info.value).endswith(where), str(info.value)
