"""``read_stream(..., follow=True)`` pushed by STREAM_FOLLOW (issue 32) against a real
ctxstore-server, in both shells: every byte exactly once and in order from one follow while a
writer appends; the sealed, aborted and idle ends (and the follow again after an idle one); a
server restart mid-follow resumed from the offset reached; a follow that holds its most frames
stops the connection's reading; a reader that leaves early keeps its follow in flight only
until its last frame; and the fallback to STREAM_READ long polls on UNKNOWN_MESSAGE. One thing
no real server does on demand, ``MORE`` on an answer that is not a follow's, is sent by the
plain-socket stand-in of ``fakes.py``: the client closes that connection.

What went on the wire is observed by recording each request the client encodes (its type and
offset), so a test can tell a follow from a long poll; the answers are the server's."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import ctxstore
from ctxstore import _connection
from ctxstore import _protocol as p
from ctxstore import _stream_protocol as s

from conftest import ServerProcess
from fakes import FakeServer, hello_then_answer

FOLLOW = s.StreamsMessageType.STREAM_FOLLOW
READ = s.StreamsMessageType.STREAM_READ


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex}"


@pytest.fixture()
def sent(monkeypatch: pytest.MonkeyPatch) -> list[p.Request]:
    """Every request the clients encode from now on, in order (the encoder is the real one)."""
    requests: list[p.Request] = []
    encode = p.encode_request

    def recording(req_id: int, request: p.Request) -> list[bytes]:
        requests.append(request)
        return encode(req_id, request)

    monkeypatch.setattr(p, "encode_request", recording)
    return requests


def _reads(sent: list[p.Request], msg_type: int) -> list[int]:
    """The offsets of the STREAM_FOLLOWs (or STREAM_READs) sent."""
    return [r.offset for r in sent if isinstance(r, s.StreamRead) and r.msg_type == msg_type]


@asynccontextmanager
async def _opened(
    addr: str,
    what: str,
    reader_class: type[ctxstore.AsyncClient] = ctxstore.AsyncClient,
    **reader_options: Any,
) -> AsyncIterator[tuple[ctxstore.AsyncClient, ctxstore.AsyncTurnStream]]:
    """A reader client and a stream just opened on a new context by a writer client."""
    name = _name(what)
    async with (
        ctxstore.AsyncClient(addr, timeout=20) as writer,
        reader_class(addr, timeout=20, **reader_options) as reader,
    ):
        await writer.open_context(name)
        yield reader, await writer.open_turn(name)


async def _follow_into(
    chunks: list[bytes], reader: ctxstore.AsyncClient, stream_id: int, **options: Any
) -> None:
    """Follows the stream to its end, each chunk into ``chunks`` as it comes."""
    async for chunk in reader.read_stream(stream_id, follow=True, **options):
        chunks.append(chunk)


async def test_one_follow_delivers_every_byte_once_in_order_while_a_writer_appends(
    server: ServerProcess, sent: list[p.Request]
) -> None:
    chunks: list[bytes] = []
    async with _opened(server.addr, "follow-one") as (reader, stream):
        task = asyncio.create_task(_follow_into(chunks, reader, stream.stream_id, wait_s=30))
        deltas = [f"token {i:03};".encode() for i in range(200)]
        for delta in deltas:
            await stream.append(delta)
        sealed = await stream.seal()
        await asyncio.wait_for(task, 20)
    assert b"".join(chunks) == b"".join(deltas)
    assert len(chunks) > 1  # pushed as the deltas came, not only at the seal
    # One STREAM_FOLLOW from 0 carried it all to the seal: no long poll, no follow again, and
    # no read of the sealed turn (the reader had every byte).
    assert _reads(sent, FOLLOW) == [0]
    assert _reads(sent, READ) == []
    assert sealed.turn.payload_len == len(b"".join(deltas))


def test_the_sealed_end_gives_the_rest_from_the_turn(server: ServerProcess) -> None:
    name = _name("follow-sealed")
    with ctxstore.Client(server.addr, timeout=20) as client:
        client.open_context(name)
        stream = client.open_turn(name)
        stream.append(b"Hello")
        stream.append(b", world")
        stream.seal()
        # A follow of a sealed stream: its first (and last) frame is the end; the bytes past
        # the offset are the sealed turn's payload.
        assert b"".join(client.read_stream(stream.stream_id, 3, follow=True)) == b"lo, world"
        assert list(client.read_stream(stream.stream_id, 12, follow=True)) == []


async def test_the_aborted_end_raises_after_the_bytes(server: ServerProcess) -> None:
    async with _opened(server.addr, "follow-aborted") as (reader, stream):
        await stream.append(b"partial answer")
        chunks: list[bytes] = []
        ended: list[ctxstore.StreamEnded] = []

        async def read() -> None:
            try:
                async for chunk in reader.read_stream(stream.stream_id, follow=True, wait_s=30):
                    chunks.append(chunk)
                    if b"".join(chunks) == b"partial answer":
                        await stream.abort()
            except ctxstore.StreamEnded as error:
                ended.append(error)

        await asyncio.wait_for(read(), 20)
    assert b"".join(chunks) == b"partial answer"
    assert len(ended) == 1 and ended[0].detail == 0


async def test_an_idle_end_follows_again_from_the_offset(
    server: ServerProcess, sent: list[p.Request]
) -> None:
    async with _opened(server.addr, "follow-idle") as (reader, stream):
        chunks: list[bytes] = []
        first = asyncio.Event()

        async def read() -> None:
            async for chunk in reader.read_stream(stream.stream_id, follow=True, wait_s=0.2):
                chunks.append(chunk)
                first.set()

        task = asyncio.create_task(read())
        await stream.append(b"first;")
        await asyncio.wait_for(first.wait(), 10)
        await asyncio.sleep(1.0)  # several idle ends (0.2 s without a delta each)
        await stream.append(b"second;")
        await stream.seal()
        await asyncio.wait_for(task, 20)
    assert b"".join(chunks) == b"first;second;"
    follows = _reads(sent, FOLLOW)
    # From 0, then again from 6 after each idle end: the offset moved only with a frame.
    assert follows[0] == 0 and len(follows) >= 3
    assert set(follows[1:]) == {len(b"first;")}
    assert _reads(sent, READ) == []


async def test_a_server_restart_mid_follow_resumes_from_the_offset(
    own_server: ServerProcess, sent: list[p.Request]
) -> None:
    async with _opened(own_server.addr, "follow-restart") as (reader, stream):
        before = [b"acknowledged %d;" % i for i in range(20)]
        for delta in before:
            await stream.append(delta)
        chunks = reader.read_stream(stream.stream_id, follow=True, wait_s=30, reconnect_s=30)
        got = [await anext(chunks)]
        assert got[0] == b"".join(before)  # everything since the offset, in one frame

        own_server.kill()  # kill -9 mid-follow: the acknowledged deltas are durable
        own_server.start()

        after = [b"after %d;" % i for i in range(20)]
        for delta in after:
            while True:
                try:
                    await stream.append(delta)  # at the stream's length: written once
                    break
                except ctxstore.ConnectionLost:
                    continue
        await stream.seal()
        got.extend([chunk async for chunk in chunks])
    assert b"".join(got) == b"".join(before + after)
    follows = _reads(sent, FOLLOW)
    # Followed again, on the new connection, from the offset the frames had reached.
    assert follows[0] == 0 and set(follows[1:]) == {len(b"".join(before))}


def test_a_follow_holding_its_most_frames_stops_reading_until_taken(
    server: ServerProcess,
) -> None:
    name = _name("follow-full")
    total = _connection.FOLLOW_FRAMES_MAX * 3
    with (
        ctxstore.Client(server.addr, timeout=20) as writer,
        ctxstore.Client(server.addr, timeout=20) as reader,
    ):
        writer.open_context(name)
        stream = writer.open_turn(name)
        stream.append(b"0")
        # One byte a frame: each delta is a frame of its own.
        chunks = reader.read_stream(stream.stream_id, follow=True, wait_s=30, bytes_max=1)
        got = [next(chunks)]
        for i in range(1, total):
            stream.append(b"%d" % (i % 10))
        conn = reader._conn
        assert conn is not None
        [follow] = [w for w in conn._pending.values() if isinstance(w, _connection.FollowFrames)]
        deadline = time.monotonic() + 10
        while len(follow._frames) < _connection.FOLLOW_FRAMES_MAX and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # time to read more, were the reader not stopped
        assert len(follow._frames) == _connection.FOLLOW_FRAMES_MAX
        stream.seal()
        got.extend(chunks)
    assert b"".join(got) == b"".join(b"%d" % (i % 10) for i in range(total))


async def test_a_reader_that_leaves_early_releases_its_follow(server: ServerProcess) -> None:
    # One in-flight slot: the follow's, while it lasts.
    async with _opened(server.addr, "follow-leave", max_in_flight=1) as (reader, stream):
        await stream.append(b"one;")
        chunks = reader.read_stream(stream.stream_id, follow=True, wait_s=30)
        assert await anext(chunks) == b"one;"
        await chunks.aclose()  # the reader leaves; the follow goes on at the server
        await stream.append(b"two;")  # a frame nobody takes: dropped
        # The follow holds the connection's one in-flight slot until its last frame...
        with pytest.raises(ctxstore.RequestTimeout, match="in-flight slot"):
            await reader.ping(timeout=0.5)
        await stream.seal()  # ...which the seal sends
        await reader.ping(timeout=5)
        assert reader.connected
        # The dropped frame went nowhere: a new read has everything, in order.
        assert b"".join([c async for c in reader.read_stream(stream.stream_id)]) == b"one;two;"


@dataclass(frozen=True, slots=True)
class _UnknownFollow(s.StreamFollow):
    """STREAM_FOLLOW's body under a message type the server does not know, as an older
    server would take STREAM_FOLLOW."""

    MSG_TYPE: ClassVar[int] = 0x00FE
    NAME: ClassVar[str] = "UNKNOWN_FOLLOW"


class _OlderServerClient(ctxstore.AsyncClient):
    _STREAM_FOLLOW_REQUEST = _UnknownFollow


class _OlderServerBlockingClient(ctxstore.Client):
    _STREAM_FOLLOW_REQUEST = _UnknownFollow


async def test_unknown_message_falls_back_to_long_polls(
    server: ServerProcess, sent: list[p.Request]
) -> None:
    chunks: list[bytes] = []
    async with _opened(server.addr, "follow-fallback", _OlderServerClient) as (reader, stream):
        await stream.append(b"before;")
        following = _follow_into(chunks, reader, stream.stream_id, offset=2, wait_s=5)
        task = asyncio.create_task(following)
        for i in range(10):
            await stream.append(b"delta %d;" % i)
            await asyncio.sleep(0.005)
        await stream.seal()
        await asyncio.wait_for(task, 20)
        assert reader.connected  # UNKNOWN_MESSAGE keeps the connection
    whole = b"before;" + b"".join(b"delta %d;" % i for i in range(10))
    assert b"".join(chunks) == whole[2:]
    unknown = [r for r in sent if isinstance(r, _UnknownFollow)]
    assert [r.offset for r in unknown] == [2]  # asked once; the server does not know it
    polls = _reads(sent, READ)
    assert polls[0] == 2 and polls == sorted(polls) and len(polls) > 1


def test_the_blocking_shell_falls_back_too(server: ServerProcess) -> None:
    name = _name("follow-fallback-sync")
    with (
        ctxstore.Client(server.addr, timeout=20) as writer,
        _OlderServerBlockingClient(server.addr, timeout=20) as reader,
    ):
        writer.open_context(name)
        stream = writer.open_turn(name)
        got: list[bytes] = []
        done = threading.Event()

        def read() -> None:
            got.extend(reader.read_stream(stream.stream_id, follow=True, wait_s=5))
            done.set()

        thread = threading.Thread(target=read)
        thread.start()
        for i in range(5):
            stream.append(b"d%d;" % i)
        stream.seal()
        assert done.wait(20)
        thread.join()
    assert b"".join(got) == b"d0;d1;d2;d3;d4;"


def _pong_with_more(header: p.FrameHeader, body: bytes) -> bytes:
    """A PONG sent with the frame flag MORE, which only a follow's frames may carry."""
    nonce = p.Ping.decode_body(p.Reader(body, "PING")).nonce
    frame = bytearray(p.encode_response(header.req_id, p.Pong(nonce)))
    frame[6:8] = p.MORE.to_bytes(2, "little")
    return bytes(frame)


def test_more_on_an_answer_that_is_not_a_follow_closes_the_connection() -> None:
    with FakeServer(hello_then_answer(_pong_with_more, version=3)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(ctxstore.ProtocolError, match="flags"):
                client.ping()
            assert not client.connected


async def test_more_on_an_answer_that_is_not_a_follow_closes_the_async_connection() -> None:
    with FakeServer(hello_then_answer(_pong_with_more, version=3)) as fake:
        async with ctxstore.AsyncClient(fake.addr, timeout=5) as client:
            with pytest.raises(ctxstore.ProtocolError, match="flags"):
                await client.ping()
            assert not client.connected
