"""Streams (protocol version 3, issue 32) through the blocking and the asyncio client against a
real ctxstore-server: ``open_turn`` (append, seal, abort, the context manager), ``streams``,
``read_stream`` (now and following, resumed exactly once across a server restart), ``watch``
(by context, name prefix and tag; resumed after a sequence number; lagged after a restart),
and the typed errors STREAM_ENDED, STREAM_NOT_OWNED, TOO_LARGE and CONFLICT."""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Iterator

import pytest

import ctxstore
from ctxstore import WatchEvent, WatchKind, WatchLagged

from conftest import ServerProcess


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(server.addr, timeout=20) as c:
        yield c


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex}"


def test_both_shells_have_the_stream_calls() -> None:
    names = ("open_turn", "resume_turn", "append_delta", "seal_stream", "abort_stream", "streams")
    for name in names + ("watch_position",):
        assert inspect.iscoroutinefunction(getattr(ctxstore.AsyncClient, name)), name
        assert not inspect.iscoroutinefunction(getattr(ctxstore.Client, name)), name
        assert getattr(ctxstore.Client, name).__doc__ == getattr(ctxstore.AsyncClient, name).__doc__
    for name in ("read_stream", "watch"):
        sync_sig = inspect.signature(getattr(ctxstore.Client, name))
        async_sig = inspect.signature(getattr(ctxstore.AsyncClient, name))
        assert str(sync_sig.return_annotation).startswith("Iterator[")
        assert str(async_sig.return_annotation).startswith("AsyncIterator[")
        assert sync_sig.parameters == async_sig.parameters
    assert inspect.signature(ctxstore.Client.open_turn).return_annotation == "TurnStream"


def test_a_stream_is_appended_listed_read_and_sealed_into_one_turn(
    client: ctxstore.Client,
) -> None:
    name = _name("stream")
    client.open_context(name)
    first = client.append(name, b"the question")
    stream = client.open_turn(
        name, type_tag=2, codec=1, key="a-1", labels={"role": "assistant"}, timeout=10
    )
    assert (stream.length, stream.status) == (0, "open")
    deltas = [b"Hel", b"lo", b", ", b"world", b"!" * 1000]
    lengths = [stream.append(delta) for delta in deltas]
    whole = b"".join(deltas)
    assert lengths == [3, 5, 7, 12, len(whole)] and stream.length == len(whole)

    [listed] = client.streams(name)
    assert (listed.stream_id, listed.length, listed.type_tag, listed.codec) == (
        stream.stream_id,
        len(whole),
        2,
        1,
    )
    assert listed.context_id == first.turn.context_id
    # Read now (not following): every acknowledged byte, then the end.
    assert b"".join(client.read_stream(stream.stream_id)) == whole
    assert b"".join(client.read_stream(stream.stream_id, 7, bytes_max=2)) == whole[7:]
    assert list(client.read_stream(stream.stream_id, len(whole))) == []
    # The head has not moved: a stream is no turn until its seal.
    assert client.head(name).head_turn_id == first.turn_id

    sealed = stream.seal()
    assert stream.status == "sealed" and stream.sealed == sealed
    assert sealed.turn.parent_turn_id == first.turn_id
    assert (sealed.turn.type_tag, sealed.turn.codec, sealed.turn.payload_len) == (2, 1, len(whole))
    assert sealed.payload_hash == ctxstore.blob_hash(whole)
    assert client.head(name).head_turn_id == sealed.turn_id
    assert client.get_blob(sealed.payload_hash) == whole
    info = client.turn_by_key(name, "a-1")
    assert info is not None and info.turn_id == sealed.turn_id
    assert info.labels == {"role": "assistant"}
    assert client.streams(name) == []
    # A sealed stream reads from its turn, from any offset, then ends.
    assert b"".join(client.read_stream(stream.stream_id)) == whole
    assert b"".join(client.read_stream(stream.stream_id, 5, follow=True)) == whole[5:]
    assert list(client.read_stream(stream.stream_id, len(whole), follow=True)) == []

    # STREAM_ENDED: the server's, with the turn in detail; the object's own before sending.
    with pytest.raises(ctxstore.StreamEnded) as ended:
        client.append_delta(stream.stream_id, b"late")
    assert ended.value.code == 17 and ended.value.detail == sealed.turn_id
    with pytest.raises(ctxstore.StreamEnded):
        client.seal_stream(stream.stream_id)
    with pytest.raises(ctxstore.StreamEnded, match="sealed"):
        stream.append(b"late")
    with pytest.raises(ctxstore.NotFound):
        client.append_delta(2**63, b"x")
    with pytest.raises(ctxstore.NotFound):
        list(client.read_stream(2**63))


def test_the_context_manager_seals_at_a_clean_exit_and_aborts_on_an_exception(
    client: ctxstore.Client,
) -> None:
    name = _name("managed")
    client.open_context(name)
    with client.open_turn(name) as stream:
        stream.append(b"kept")
    assert stream.status == "sealed" and stream.sealed is not None
    assert client.head(name).head_turn_id == stream.sealed.turn_id

    with pytest.raises(RuntimeError, match="model failed"):
        with client.open_turn(name) as broken:
            broken.append(b"partial answer")
            raise RuntimeError("model failed")
    assert broken.status == "aborted"
    assert client.head(name).head_turn_id == stream.sealed.turn_id
    assert client.streams(name) == []
    with pytest.raises(ctxstore.StreamEnded) as aborted:
        list(client.read_stream(broken.stream_id))
    assert aborted.value.detail == 0
    with pytest.raises(ctxstore.StreamEnded) as ended:
        client.append_delta(broken.stream_id, b"x")
    assert ended.value.detail == 0


def test_deltas_at_an_offset_are_written_once(client: ctxstore.Client) -> None:
    name = _name("offsets")
    client.open_context(name)
    stream = client.open_turn(name)
    assert client.append_delta(stream.stream_id, b"abc", offset=0) == 3
    # A retry of the same delta at the same offset: answered again, written once.
    assert client.append_delta(stream.stream_id, b"abc", offset=0) == 3
    with pytest.raises(ctxstore.Conflict) as conflict:
        client.append_delta(stream.stream_id, b"x", offset=1)
    assert conflict.value.detail == 3
    assert client.append_delta(stream.stream_id, b"def") == 6
    assert b"".join(client.read_stream(stream.stream_id)) == b"abcdef"
    client.abort_stream(stream.stream_id)


def test_only_the_owner_writes_until_its_connection_closes(server: ServerProcess) -> None:
    name = _name("owned")
    with ctxstore.Client(server.addr, timeout=20) as owner, ctxstore.Client(server.addr) as other:
        owner.open_context(name)
        stream = owner.open_turn(name)
        stream.append(b"mine")
        for attempt in (
            lambda: other.append_delta(stream.stream_id, b"theirs"),
            lambda: other.seal_stream(stream.stream_id),
            lambda: other.abort_stream(stream.stream_id),
        ):
            with pytest.raises(ctxstore.StreamNotOwned) as refused:
                attempt()
            assert refused.value.code == 18
        # Anyone reads.
        assert b"".join(other.read_stream(stream.stream_id)) == b"mine"
        owner.close()
        # The owner's connection closed: the next writer takes the stream over.
        assert other.append_delta(stream.stream_id, b", now theirs", offset=4) == 16
        sealed = other.seal_stream(stream.stream_id)
        assert other.get_blob(sealed.payload_hash) == b"mine, now theirs"


def test_a_new_client_resumes_a_stream_another_one_opened(server: ServerProcess) -> None:
    name = _name("resumed")
    with ctxstore.Client(server.addr, timeout=20) as first:
        first.open_context(name)
        stream = first.open_turn(name, key="r-1")
        stream.append(b"begun by one process, ")
    with ctxstore.Client(server.addr, timeout=20) as second:
        resumed = second.resume_turn(name, stream.stream_id)
        assert (resumed.stream_id, resumed.length) == (stream.stream_id, 22)
        assert resumed.info.context_id == second.context_info(name).context_id
        resumed.append(b"ended by another")
        sealed = resumed.seal()
        assert second.get_blob(sealed.payload_hash) == b"begun by one process, ended by another"
        with pytest.raises(ctxstore.NotFound, match="not open"):
            second.resume_turn(name, stream.stream_id)


def test_a_stream_past_the_blob_limit_is_too_large_and_nothing_is_written(
    small_server: ServerProcess,
) -> None:
    with ctxstore.Client(small_server.addr, timeout=20) as client:
        name = _name("large")
        client.open_context(name)
        stream = client.open_turn(name)
        stream.append(bytes(60 * 1024))
        with pytest.raises(ctxstore.TooLarge):
            stream.append(bytes(8 * 1024))
        assert stream.length == 60 * 1024
        assert sum(len(c) for c in client.read_stream(stream.stream_id)) == 60 * 1024
        assert stream.append(bytes(4 * 1024)) == 64 * 1024  # up to the limit exactly
        assert stream.seal().turn.payload_len == 64 * 1024
    with pytest.raises(ValueError, match="delta"):
        client.append_delta(1, b"")
    with pytest.raises(ValueError, match="1048576"):
        client.append_delta(1, bytes((1 << 20) + 1))


def test_a_seal_on_a_moved_head_is_a_conflict_and_the_stream_stays_open(
    client: ctxstore.Client,
) -> None:
    name = _name("cas")
    client.open_context(name)
    head = client.append(name, b"one").turn_id
    stream = client.open_turn(name, expected_head=head)
    stream.append(b"answer")
    moved = client.append(name, b"two").turn_id
    with pytest.raises(ctxstore.Conflict) as conflict:
        stream.seal()
    assert conflict.value.detail == moved
    assert stream.status == "open"
    assert [s.stream_id for s in client.streams(name)] == [stream.stream_id]
    stream.append(b" (more)")
    stream.abort()
    assert client.streams(name) == []


async def test_a_follower_gets_every_delta_as_it_is_acknowledged(server: ServerProcess) -> None:
    name = _name("follow")
    async with (
        ctxstore.AsyncClient(server.addr, timeout=20) as writer,
        ctxstore.AsyncClient(server.addr, timeout=20) as reader,
    ):
        await writer.open_context(name)
        stream = await writer.open_turn(name)
        chunks: list[bytes] = []

        async def read() -> None:
            async for chunk in reader.read_stream(stream.stream_id, follow=True, wait_s=5):
                chunks.append(chunk)

        task = asyncio.create_task(read())
        deltas = [f"token {i} ".encode() for i in range(50)]
        for delta in deltas:
            await stream.append(delta)
            await asyncio.sleep(0.002)
        await stream.seal()
        await asyncio.wait_for(task, 20)
        assert b"".join(chunks) == b"".join(deltas)
        assert len(chunks) > 1  # delivered as they came, not only at the seal
        assert [s.stream_id for s in await reader.streams(name)] == []


async def test_async_context_manager(server: ServerProcess) -> None:
    name = _name("amanaged")
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        await client.open_context(name)
        async with await client.open_turn(name) as stream:
            await stream.append(b"x")
        assert stream.sealed is not None
        with pytest.raises(KeyError):
            async with await client.open_turn(name) as broken:
                await broken.append(b"y")
                raise KeyError("stop")
        assert broken.status == "aborted"
        assert (await client.head(name)).head_turn_id == stream.sealed.turn_id


def test_a_reader_resumes_exactly_once_across_a_server_restart(own_server: ServerProcess) -> None:
    name = _name("restart")
    with (
        ctxstore.Client(own_server.addr, timeout=20) as writer,
        ctxstore.Client(own_server.addr, timeout=20) as reader,
    ):
        writer.open_context(name)
        stream = writer.open_turn(name)
        before = [b"acknowledged %d;" % i for i in range(20)]
        for delta in before:
            stream.append(delta)
        chunks = reader.read_stream(stream.stream_id, follow=True, wait_s=2, reconnect_s=30)
        got = [next(chunks)]
        assert got[0] == b"".join(before)  # all of it, in one answer
        watched = reader.watch(name, after_seq=0, wait_s=1)
        seen = [next(watched)]
        assert isinstance(seen[0], WatchEvent)

        own_server.kill()  # kill -9: the acknowledged deltas are durable
        own_server.start()

        after = [b"after %d;" % i for i in range(20)]
        for delta in after:
            while True:
                try:
                    stream.append(delta)  # at the stream's length: a retry writes it once
                    break
                except ctxstore.ConnectionLost:
                    continue
        [listed] = writer.streams(name)
        assert listed.length == len(b"".join(before + after))
        sealed = stream.seal()
        got.extend(chunks)  # resumed on a new connection from the offset it had
        assert b"".join(got) == b"".join(before + after)
        assert writer.get_blob(sealed.payload_hash) == b"".join(before + after)

        # The watcher: the server kept no event from before its restart.
        lagged = next(watched)
        assert isinstance(lagged, WatchLagged)
        assert lagged.after_seq == seen[0].seq < lagged.resume_after


async def test_watches_report_every_change_in_order_and_resume_after_a_seq(
    server: ServerProcess,
) -> None:
    prefix = _name("w")
    name = f"{prefix}-1"
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        await client.open_context(name, {"team": prefix})
        by_id: list[WatchEvent | WatchLagged] = []
        by_prefix: list[WatchEvent | WatchLagged] = []
        by_tag: list[WatchEvent | WatchLagged] = []
        # The position now, then the watches after it: nothing in between can be missed.
        position = await client.watch_position(context=name)
        assert position == await client.watch_position(name_prefix=prefix)

        async def collect(
            into: list[WatchEvent | WatchLagged], last: WatchKind, **target: object
        ) -> None:
            async for event in client.watch(after_seq=position, wait_s=5, **target):  # type: ignore[arg-type]
                into.append(event)
                if isinstance(event, WatchEvent) and event.kind == last:
                    return

        tasks = [
            asyncio.create_task(collect(by_id, WatchKind.DELETED, context=name)),
            # A deleted context has no name or tags: the last event these targets match is
            # the tag change.
            asyncio.create_task(collect(by_prefix, WatchKind.TAGS, name_prefix=prefix)),
            asyncio.create_task(collect(by_tag, WatchKind.TAGS, tag=("team", prefix))),
        ]
        first = await client.append(name, b"one")
        stream = await client.open_turn(name)
        await stream.append(b"two")
        sealed = await stream.seal()
        aborted = await client.open_turn(name)
        await aborted.abort()
        await client.tag_context(name, {"status": "done"})
        await client.delete_context(name)
        await asyncio.wait_for(asyncio.gather(*tasks), 20)

        kinds = [(e.kind, e.turn_id, e.stream_id) for e in by_id if isinstance(e, WatchEvent)]
        assert kinds == [
            (WatchKind.HEAD, first.turn_id, 0),
            (WatchKind.STREAM_OPENED, 0, stream.stream_id),
            (WatchKind.HEAD, sealed.turn_id, 0),
            (WatchKind.STREAM_SEALED, sealed.turn_id, stream.stream_id),
            (WatchKind.STREAM_OPENED, 0, aborted.stream_id),
            (WatchKind.STREAM_ABORTED, 0, aborted.stream_id),
            (WatchKind.TAGS, 0, 0),
            (WatchKind.DELETED, 0, 0),
        ]
        seqs = [e.seq for e in by_id if isinstance(e, WatchEvent)]
        assert seqs == sorted(set(seqs))
        assert all(
            e.context_id == first.turn.context_id for e in by_id if isinstance(e, WatchEvent)
        )
        assert by_prefix == by_tag == by_id[:-1]

        # Resumed after a sequence number: exactly the events after it.
        resumed = client.watch(context=first.turn.context_id, after_seq=seqs[2], wait_s=1)
        again = [await resumed.__anext__() for _ in range(len(seqs) - 3)]
        assert again == by_id[3:]


def test_the_blocking_watch_is_a_plain_iterator(client: ctxstore.Client) -> None:
    name = _name("bw")
    client.open_context(name)
    appended = [client.append(name, b"%d" % i) for i in range(3)]
    events = client.watch(name, after_seq=0, wait_s=1)
    assert iter(events) is events
    heads = [next(events) for _ in range(3)]
    assert [e.turn_id for e in heads if isinstance(e, WatchEvent)] == [a.turn_id for a in appended]
    # A watch from now waits: a writer on another thread is seen (it appends until then, as
    # the watch's position is taken when its first request is answered).
    later = client.watch(name, wait_s=5)
    seen = threading.Event()
    written: list[int] = []

    def write() -> None:
        while not seen.wait(0.2):
            written.append(client.append(name, b"later").turn_id)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        event = next(later)
    finally:
        seen.set()
        writer.join()
    assert isinstance(event, WatchEvent) and event.kind == WatchKind.HEAD
    assert event.turn_id in written
    assert client.watch_position(name) >= event.seq
    with pytest.raises(ValueError, match="exactly one"):
        client.watch(name, name_prefix="x")
    with pytest.raises(ValueError, match="exactly one"):
        client.watch()
