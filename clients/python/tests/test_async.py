"""The asyncio client against a real ctxstore-server: round trips, pipelining, errors."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import ctxstore
from ctxstore import _protocol as p
from ctxstore.errors import ERROR_CLASSES

from conftest import ServerProcess, new_server
from fakes import FakeServer, hello_then_error


async def test_round_trips(server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        info = await client.server_info()
        assert info.version == 7 == ctxstore.PROTOCOL_VERSION
        await client.ping()
        ctx = await client.create_context()
        assert ctx.is_empty
        bodies = [b"turn %d " % i * (i + 1) for i in range(30)] + [os.urandom(100_000)]
        appended = []
        for i, body in enumerate(bodies):
            a = await client.append(ctx.context_id, body, type_tag=i, codec=7)
            assert a.depth == i and a.payload_hash == ctxstore.blob_hash(body)
            appended.append(a)
        ids = [a.turn_id for a in appended]
        assert (await client.head(ctx.context_id)).head_turn_id == ids[-1]
        assert await client.get_turn(ids[4]) == appended[4].turn
        assert await client.get_blob(appended[-1].payload_hash) == bodies[-1]

        page = await client.last(ctx.context_id, 10, payloads=True)
        assert [t.turn_id for t in page] == ids[-10:]
        assert [t.payload for t in page] == bodies[-10:]
        older = await client.before(ctx.context_id, page.next_before, 10, payloads=True)
        assert [t.turn_id for t in older] == ids[-20:-10]
        window = await client.range_by_depth(ctx.context_id, 5, 3)
        assert [t.depth for t in window] == [5, 6, 7]
        chain = await client.chain(ids[3], payloads=True)
        assert [t.payload for t in chain] == bodies[:4]
        replay = await client.replay(ids[-1], payloads=True, page_size=7)
        assert [t.payload for t in replay] == bodies

        fork = await client.fork(ids[2])
        assert fork.head_turn_id == ids[2]
        based = await client.create_context(ids[5])
        assert based.head_depth == 5
        by_hash = await client.append_by_hash(fork.context_id, appended[0].payload_hash)
        assert by_hash.deduped is False or by_hash.deduped is True
        assert by_hash.turn.parent_turn_id == ids[2]
        assert await client.has_blobs([appended[0].payload_hash, bytes(32)]) == [True, False]
        stats = await client.stats()
        assert stats.turns >= len(bodies) and stats.contexts >= 3


async def test_pipelining(server: ServerProcess) -> None:
    client = await ctxstore.AsyncClient.connect(server.addr, timeout=60)
    try:
        contexts = [(await client.create_context()).context_id for _ in range(20)]

        async def writer(ctx: int) -> list[int]:
            return [(await client.append(ctx, b"%d/%d" % (ctx, i))).turn_id for i in range(25)]

        results = await asyncio.gather(*(writer(ctx) for ctx in contexts))
        pages = await asyncio.gather(*(client.last(ctx, 25, payloads=True) for ctx in contexts))
        for ctx, ids, page in zip(contexts, results, pages, strict=True):
            assert [t.turn_id for t in page] == ids
            assert [t.payload for t in page] == [b"%d/%d" % (ctx, i) for i in range(25)]
        pings = await asyncio.gather(*(client.ping() for _ in range(500)))
        assert len(pings) == 500
        conn = client._conn
        assert conn is not None and conn.peak_in_flight >= 10
    finally:
        await client.close()


async def test_errors(server: ServerProcess, small_server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(server.addr) as client:
        with pytest.raises(ctxstore.NotFound):
            await client.head(1 << 60)
        with pytest.raises(ctxstore.InvalidArgument):
            await client.fork(0)
        ctx = await client.create_context()
        a = await client.append(ctx.context_id, b"a")
        await client.append(ctx.context_id, b"b")
        with pytest.raises(ctxstore.Conflict) as conflict:
            await client.append(ctx.context_id, b"c", expected_head=a.turn_id)
        assert conflict.value.actual_head == a.turn_id + 1 or conflict.value.actual_head > a.turn_id
        with pytest.raises(ctxstore.UnknownMessage):
            await client.request(p.RawRequest(0x00FD))
        conn = client._conn
        with pytest.raises(ctxstore.BadFrame):
            await client.request(p.RawRequest(p.MessageType.GET_TURN, b"\x00"))
        await client.ping()  # reconnects
        assert client._conn is not conn
    async with ctxstore.AsyncClient(small_server.addr) as client:
        ctx = await client.create_context()
        with pytest.raises(ctxstore.TooLarge):
            await client.last(ctx.context_id, 1000)
        with pytest.raises(ctxstore.TooLarge):
            await client.append(ctx.context_id, bytes(64 * 1024 + 1))
        await client.ping()


async def test_token_and_version(token_server: ServerProcess, server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(token_server.addr, token="s3cret-token") as client:
        await client.ping()
    with pytest.raises(ctxstore.Unauthorized):
        await ctxstore.AsyncClient.connect(token_server.addr, token="nope")

    class FutureClient(ctxstore.AsyncClient):
        PROTOCOL_VERSIONS = (8, 9)

    with pytest.raises(ctxstore.UnsupportedVersion) as info:
        await FutureClient.connect(server.addr)
    assert info.value.server_version == 7


async def test_the_async_client_defaults_to_the_environment_and_trims_its_token(
    token_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: as the blocking client (and the CLI)."""
    monkeypatch.setenv("CTXSTORE_ADDR", token_server.addr)
    monkeypatch.setenv("CTXSTORE_TOKEN", "s3cret-token")
    async with ctxstore.AsyncClient() as client:
        await client.ping()
    client = await ctxstore.AsyncClient.connect(token=" s3cret-token\n")
    await client.ping()
    await client.close()
    with pytest.raises(ctxstore.Unauthorized):
        await ctxstore.AsyncClient.connect(token="")


async def test_overloaded(tmp_root: Path) -> None:
    process = new_server(tmp_root, extra_args=["--connections-max", "1"])
    try:
        async with ctxstore.AsyncClient(process.addr) as first:
            await first.ping()
            with pytest.raises(ctxstore.Overloaded):
                await ctxstore.AsyncClient.connect(process.addr)
            await first.ping()
    finally:
        process.stop()


@pytest.mark.parametrize("code", sorted(ERROR_CLASSES) + [4242])
async def test_every_error_code_maps_to_its_exception(code: int) -> None:
    with FakeServer(hello_then_error(code, detail=5)) as fake:
        async with ctxstore.AsyncClient(fake.addr, timeout=5) as client:
            with pytest.raises(ctxstore.ServerError) as info:
                await client.ping()
    assert type(info.value) is ERROR_CLASSES.get(code, ctxstore.ServerError)
    assert info.value.code == code and info.value.detail == 5


async def test_closed_client(server: ServerProcess) -> None:
    client = await ctxstore.AsyncClient.connect(server.addr)
    await client.close()
    with pytest.raises(ctxstore.ClientClosed):
        await client.ping()


async def test_cancelled_call_leaves_the_connection_usable(server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(server.addr) as client:
        ctx = await client.create_context()
        task = asyncio.ensure_future(client.append(ctx.context_id, os.urandom(1 << 20)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.ping()
        assert (await client.head(ctx.context_id)).context_id == ctx.context_id


# --- protocol version 2 -----------------------------------------------------------------------


async def test_version_2_calls(server: ServerProcess) -> None:
    run = f"aio-{os.urandom(6).hex()}"
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        info, created = await client.open_context(f"{run}-a", {"run": run})
        assert created and info.name == f"{run}-a" and info.tags == {"run": run}
        again = await client.open_context(f"{run}-a", get_or_create=True)
        assert again == (info, False)
        with pytest.raises(ctxstore.AlreadyExists) as taken:
            await client.open_context(f"{run}-a")
        assert taken.value.context_id == info.context_id

        # Names in the version-1 calls, concurrently.
        appended = await asyncio.gather(*(client.append(f"{run}-a", b"%d" % i) for i in range(5)))
        head = await client.head(f"{run}-a")
        assert head.head_turn_id in {a.turn_id for a in appended} and head.head_depth == 4
        page = await client.last(f"{run}-a", 10, payloads=True)
        assert sorted(t.payload or b"" for t in page) == [b"%d" % i for i in range(5)]
        older = await client.before(f"{run}-a", head.head_turn_id, 10)
        assert [t.turn_id for t in older] == [t.turn_id for t in page.turns[:4]]
        assert len(await client.range_by_depth(f"{run}-a", 2, 10)) == 3

        tagged = await client.tag_context(f"{run}-a", {"s": "1"}, expected_head=head.head_turn_id)
        assert tagged.tags == {"run": run, "s": "1"}
        with pytest.raises(ctxstore.Conflict) as conflict:
            await client.tag_context(f"{run}-a", {"s": "2"}, expected_head=0)
        assert conflict.value.actual_head == head.head_turn_id

        await asyncio.gather(
            *(client.kv_put(f"{run}-a", {b"k%02d" % i: b"v%d" % i}) for i in range(12))
        )
        assert await client.kv_get(f"{run}-a", b"k07") == b"v7"
        assert await client.kv_get(f"{run}-a", b"nope") is None
        with pytest.raises(ctxstore.NotFound):
            await client.kv_get(f"{run}-nope", b"k07")
        await client.kv_delete(f"{run}-a", [b"k00", b"k01"])
        page_kv = await client.kv_list(f"{run}-a", b"k", limit=4)
        assert [i.key for i in page_kv] == [b"k02", b"k03", b"k04", b"k05"]
        keys = [item.key async for item in client.iter_kv(f"{run}-a", b"k", page_size=3)]
        assert keys == [b"k%02d" % i for i in range(2, 12)]

        clone = await client.clone_context(f"{run}-a", f"{run}-b")
        assert clone.head == ctxstore.ContextHead(clone.context_id, head.head_turn_id, 4)
        other = await client.create_context()
        named = await client.name_context(other.context_id, f"{run}-c")
        assert named.name == f"{run}-c"
        assert (await client.context_info(f"{run}-c")).context_id == other.context_id
        await client.tag_context(f"{run}-c", {"run": run})

        listed = [i.name async for i in client.iter_contexts({"run": run}, page_size=1)]
        assert listed == [f"{run}-a", f"{run}-b", f"{run}-c"]
        first = await client.list_contexts(name_prefix=run, limit=2)
        assert [i.name for i in first] == [f"{run}-a", f"{run}-b"]
        rest = await client.list_contexts(name_prefix=run, cursor=first.next_cursor, limit=2)
        assert [i.name for i in rest] == [f"{run}-c"] and rest.next_cursor is None


async def test_version_2_calls_on_a_version_1_connection(server: ServerProcess) -> None:
    class V1Client(ctxstore.AsyncClient):
        PROTOCOL_VERSIONS = (1, 1)

    async with V1Client(server.addr) as client:
        assert (await client.server_info()).version == 1
        with pytest.raises(ctxstore.NotSupported, match="by name needs protocol version 2"):
            await client.head("some-name")
        with pytest.raises(ctxstore.NotSupported, match="CTX_OPEN needs protocol version 2"):
            await client.open_context("x")
        with pytest.raises(ctxstore.NotSupported):
            await client.iter_kv(1).__anext__()
        ctx = await client.create_context()
        assert (await client.head(ctx.context_id)) == ctx


async def test_turns_for_agent_frameworks(server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        name = f"async-turns-{os.urandom(6).hex()}"
        await client.open_context(name)
        first = await client.append(name, b"system", key="sys", labels={"run_id": "r1"})
        retried = await client.append(name, b"system", key="sys")
        assert retried.existing and retried.turn == first.turn
        step = [
            ctxstore.TurnSpec(b"call", key="call", labels={"run_id": "r1"}),
            ctxstore.TurnSpec(b"result", summary=True, labels={"run_id": "r2"}),
            ctxstore.TurnSpec(b"message", links=[first.turn_id], labels={"run_id": "r1"}),
        ]
        written = await client.append_turns(name, step, expected_head=first.turn_id)
        assert [a.turn.parent_turn_id for a in written] == [
            first.turn_id,
            written[0].turn_id,
            written[1].turn_id,
        ]
        travelled = await client.append(name, b"again", parent=first.turn_id)
        assert (await client.head(name)).head_turn_id == travelled.turn_id

        found = await client.turn_by_key(name, "call")
        assert found is not None and found.turn_id == written[0].turn_id
        assert await client.turn_by_key(name, "nope") is None
        log = [t async for t in client.iter_turn_log(name, {"run_id": "r1"}, page_size=1)]
        assert [t.turn_id for t in log] == [written[2].turn_id, written[0].turn_id, first.turn_id]
        page = await client.turn_log(name, limit=2, payloads=True)
        assert [t.payload for t in page] == [b"again", b"message"] and page.next_cursor
        window = await client.window(name, payloads=True)
        assert [t.payload for t in window] == [b"system", b"again"]  # the summary is elsewhere
        old_branch = await client.read_page(name, 10, before=travelled.turn_id)
        assert [t.turn_id for t in old_branch] == [first.turn_id]
        by_depth = await client.read_page(name, 1, from_depth=1, payloads=True)
        assert [t.payload for t in by_depth] == [b"again"]
        # Pipelined keyed appends of one key from many tasks: one turn, the rest existing.
        ctx = (await client.create_context()).context_id
        answers = await asyncio.gather(*(client.append(ctx, b"once", key="k") for _ in range(8)))
        assert len({a.turn_id for a in answers}) == 1
        assert sum(not a.existing for a in answers) == 1
