"""ctxstore.langgraph.CtxstoreSaver against a real server: LangGraph's own conformance suite
(langgraph-checkpoint-conformance), the sync methods directly, and a real StateGraph."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from ctxstore.langgraph import CtxstoreSaver

from conftest import ServerProcess, new_server


@pytest.fixture(scope="module")
def lg_server(tmp_root: Path) -> Iterator[ServerProcess]:
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def saver(lg_server: ServerProcess) -> Iterator[CtxstoreSaver]:
    with CtxstoreSaver.from_addr(lg_server.addr) as made:
        yield made


class _SyncInThreads(CtxstoreSaver):
    """The saver whose a* methods run its sync methods in worker threads: the conformance
    suite calls only the async methods, so this runs it through the sync ones (on the
    blocking Client)."""

    async def aget_tuple(self, config: Any) -> Any:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(  # type: ignore[override]
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[Any]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    async def adelete_for_runs(self, run_ids: Any) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)


@pytest.mark.parametrize("through", ["async", "sync"])
async def test_langgraph_conformance_suite_passes(tmp_root: Path, through: str) -> None:
    """Every capability the suite knows, base and extended, each on a fresh server: through
    the async methods (on the AsyncClient), then through the sync ones (on the Client)."""
    saver_class = CtxstoreSaver if through == "async" else _SyncInThreads
    used: list[tuple[bool, bool]] = []  # (sync client connected, async client made)

    @checkpointer_test(name=f"CtxstoreSaver ({through})")
    async def ctxstore_checkpointer() -> AsyncIterator[CtxstoreSaver]:
        process = new_server(tmp_root)
        made = saver_class.from_addr(process.addr)
        try:
            yield made
        finally:
            used.append((made.client.connected, made._aclient is not None))
            await made.aclose()
            process.stop()

    report = await validate(ctxstore_checkpointer, progress=ProgressCallbacks.verbose())
    report.print_report()
    assert report.passed_all_base(), report.to_dict()
    for extended in ("copy_thread", "prune", "delete_for_runs"):
        assert report.results[extended].detected, extended
        assert report.results[extended].passed, report.to_dict()
    # Each run went through the client it was meant to, and only that one.
    assert used
    if through == "async":
        assert all(not sync and made_async for sync, made_async in used), used
    else:
        assert all(sync and not made_async for sync, made_async in used), used


def _config(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    configurable: dict[str, str] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = versions
    return checkpoint


def test_sync_put_get_list_writes_and_delete(saver: CtxstoreSaver) -> None:
    thread = f"t-{uuid4()}"
    first = saver.put(
        _config(thread),
        _checkpoint({"messages": ["hi"], "n": 1}, {"messages": 1, "n": 1}),
        {"source": "input", "step": -1, "run_id": "run-a"},
        {"messages": 1, "n": 1},
    )
    # A write may come before its checkpoint; a regular write is kept once stored.
    saver.put_writes(first, [("messages", ["hello"]), ("n", 2)], "task-1", "path-1")
    saver.put_writes(first, [("messages", ["changed"])], "task-1", "path-1")
    second = saver.put(
        first,
        _checkpoint({"messages": ["hi", "hello"], "n": 2}, {"messages": 2, "n": 2}),
        {"source": "loop", "step": 0, "run_id": "run-a"},
        {"messages": 2, "n": 2},
    )
    saver.put(
        _config(thread, "child:1"),
        _checkpoint({"x": "sub"}, {"x": 1}),
        {"source": "loop", "step": 0, "run_id": "run-b"},
        {"x": 1},
    )

    latest = saver.get_tuple(_config(thread))
    assert latest is not None
    assert latest.config == second
    assert latest.checkpoint["channel_values"] == {"messages": ["hi", "hello"], "n": 2}
    assert latest.parent_config == first
    assert latest.metadata["step"] == 0

    older = saver.get_tuple(first)
    assert older is not None
    assert older.checkpoint["channel_values"] == {"messages": ["hi"], "n": 1}
    assert older.pending_writes == [("task-1", "messages", ["hello"]), ("task-1", "n", 2)]

    every = list(saver.list(_config(thread, "")))
    assert [t.config["configurable"]["checkpoint_id"] for t in every] == [
        second["configurable"]["checkpoint_id"],
        first["configurable"]["checkpoint_id"],
    ]
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 3
    assert [t.config for t in saver.list(_config(thread), filter={"source": "input"})] == [first]
    assert [t.config for t in saver.list(_config(thread), before=second)] == [first]
    assert len(list(saver.list(_config(thread), limit=1))) == 1
    by_run = list(saver.list(None, filter={"run_id": "run-b"}))
    assert [t.config["configurable"]["checkpoint_ns"] for t in by_run] == ["child:1"]

    saver.delete_thread(thread)
    assert saver.get_tuple(_config(thread)) is None
    assert saver.get_tuple(_config(thread, "child:1")) is None
    assert list(saver.list({"configurable": {"thread_id": thread}})) == []


def test_sync_copy_thread_and_prune(saver: CtxstoreSaver) -> None:
    source, target = f"s-{uuid4()}", f"d-{uuid4()}"
    config = _config(source)
    for step in range(3):
        config = saver.put(
            config,
            _checkpoint({"n": step}, {"n": step + 1}),
            {"source": "loop", "step": step},
            {"n": step + 1},
        )
        saver.put_writes(config, [("n", step + 10)], f"task-{step}")
    saver.copy_thread(source, target)
    copied = list(saver.list(_config(target)))
    assert [t.checkpoint["channel_values"]["n"] for t in copied] == [2, 1, 0]
    assert all(t.config["configurable"]["thread_id"] == target for t in copied)

    saver.prune([source])
    kept = list(saver.list(_config(source)))
    assert len(kept) == 1
    assert kept[0].checkpoint["channel_values"] == {"n": 2}
    assert kept[0].pending_writes == [("task-2", "n", 12)]
    assert len(list(saver.list(_config(target)))) == 3  # the copy is untouched

    saver.prune([target], strategy="delete")
    assert saver.get_tuple(_config(target)) is None


def _ids(tuples: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


def _put_run(saver: CtxstoreSaver, config: Any, run_id: str, step: int) -> Any:
    stored = saver.put(
        config,
        _checkpoint({"n": step}, {"n": step + 1}),
        {"source": "loop", "step": step, "run_id": run_id},
        {"n": step + 1},
    )
    saver.put_writes(stored, [("n", step + 100)], f"task-{step}")
    return stored


def test_delete_for_runs_tombstones_checkpoints_and_drops_their_writes(
    saver: CtxstoreSaver, lg_server: ServerProcess
) -> None:
    thread, copy = f"r-{uuid4()}", f"rc-{uuid4()}"
    run_a, run_b = f"a-{uuid4()}", f"b-{uuid4()}"
    one = _put_run(saver, _config(thread), run_a, 0)
    two = _put_run(saver, one, run_b, 1)
    three = _put_run(saver, two, run_a, 2)
    child = _put_run(saver, _config(thread, "child:1"), run_a, 0)
    saver.copy_thread(thread, copy)
    # A context of someone else labelled with the same run: not the saver's, left alone.
    other = f"other-{uuid4()}"
    saver.client.open_context(other)
    saver.client.append(other, b"not a checkpoint", labels={"run_id": run_a})

    saver.delete_for_runs([run_a, "no-such-run", ""])
    assert saver.get_tuple(one) is None and saver.get_tuple(three) is None
    assert saver.get_tuple(child) is None
    latest = saver.get_tuple(_config(thread))
    assert latest is not None and latest.config == two  # the newest that is left
    assert latest.pending_writes == [("task-1", "n", 101)]
    assert _ids(saver.list(_config(thread))) == [two["configurable"]["checkpoint_id"]]
    assert list(saver.list(_config(thread, "child:1"))) == []
    assert list(saver.list(None, filter={"run_id": run_a})) == []
    # The copy made before the delete loses the run's checkpoints too.
    assert _ids(saver.list(_config(copy))) == [two["configurable"]["checkpoint_id"]]
    assert saver.get_tuple({"configurable": {**one["configurable"], "thread_id": copy}}) is None
    # Tombstones in the key-value map; the writes are gone; the turns are still there.
    client = saver.client
    names = {info.name: info for info in client.iter_contexts(name_prefix="lg:") if info.name}
    main = next(
        n
        for n, i in names.items()
        if i.tags["lg.thread"] == "=" + thread and i.tags["lg.ns"] == "="
    )
    dead = sorted(item.key for item in client.iter_kv(main, prefix=b"x/"))
    assert dead == sorted(f"x/{c['configurable']['checkpoint_id']}".encode() for c in (one, three))
    writes = [item.key for item in client.iter_kv(main, prefix=b"w/")]
    assert writes == [f"w/{two['configurable']['checkpoint_id']}/task-1/0".encode()]
    assert client.turn_by_key(main, f"cp/{one['configurable']['checkpoint_id']}") is not None
    assert [t.payload for t in client.last(other, payloads=True)] == [b"not a checkpoint"]
    assert list(client.iter_kv(other)) == []

    # A new checkpoint after a deleted one: its parent is gone, it is not.
    four = _put_run(saver, three, run_b, 3)
    found = saver.get_tuple(_config(thread))
    assert found is not None and found.config == four
    assert found.parent_config == three
    saver.delete_for_runs([run_a])  # again: nothing changes
    assert _ids(saver.list(_config(thread))) == _ids([found, latest])
    saver.delete_for_runs([])


def test_prune_keeps_the_newest_live_checkpoint(saver: CtxstoreSaver) -> None:
    thread = f"p-{uuid4()}"
    a = _put_run(saver, _config(thread), "r1", 0)
    b = _put_run(saver, a, "r1", 1)
    c = _put_run(saver, b, "r2", 2)
    # Time travel: a branch from the first checkpoint becomes the head.
    d = _put_run(saver, a, "r3", 1)
    e = _put_run(saver, d, "r4", 2)
    saver.delete_for_runs(["r4"])  # the newest checkpoint is deleted
    saver.prune([thread])
    assert _ids(saver.list(_config(thread))) == [d["configurable"]["checkpoint_id"]]
    kept = saver.get_tuple(_config(thread))
    assert kept is not None and kept.config == d
    assert kept.pending_writes == [("task-1", "n", 101)]
    for gone in (a, b, c, e):
        assert saver.get_tuple(gone) is None
    # The thread goes on from the kept checkpoint.
    f = _put_run(saver, d, "r5", 2)
    assert _ids(saver.list(_config(thread))) == _ids([saver.get_tuple(f), kept])


def _context_of(saver: CtxstoreSaver, thread: str, ns: str = "") -> str:
    found = [
        info.name
        for info in saver.client.iter_contexts({"lg.thread": "=" + thread, "lg.ns": "=" + ns})
    ]
    assert len(found) == 1 and found[0] is not None
    return found[0]


def test_new_channel_values_are_turns_of_the_checkpoint_batch(saver: CtxstoreSaver) -> None:
    """A checkpoint and its changed channel values are one APPEND_TURNS (one durable write);
    a value the parent has is not sent again; after prune the kept checkpoint's values are
    held by b/<hash> entries (their turns are below the floor)."""
    thread = f"v-{uuid4()}"
    first = saver.put(
        _config(thread),
        _checkpoint({"big": "x" * 5000, "small": 1}, {"big": 1, "small": 1}),
        {"source": "input", "step": -1},
        {"big": 1, "small": 1},
    )
    second = saver.put(
        first,
        _checkpoint({"big": "x" * 5000, "small": 2}, {"big": 1, "small": 2}),
        {"source": "loop", "step": 0},
        {"small": 2},
    )
    name = _context_of(saver, thread)
    chain = saver.client.read_page(name, 50)
    kinds = [(t.type_tag, t.key is not None) for t in chain]
    # big, small, checkpoint 1; small (big unchanged: not sent), checkpoint 2
    assert kinds == [(1, False), (1, False), (0, True), (1, False), (0, True)]
    assert list(saver.client.iter_kv(name, prefix=b"b/")) == []
    saver.prune([thread])
    kept = saver.get_tuple(_config(thread))
    assert kept is not None and kept.config == second
    assert kept.checkpoint["channel_values"] == {"big": "x" * 5000, "small": 2}
    held = {item.key for item in saver.client.iter_kv(name, prefix=b"b/")}
    assert len(held) == 2
    assert saver.client.context_info(name).head_depth == 4


async def test_async_methods_use_the_async_client(lg_server: ServerProcess) -> None:
    async with CtxstoreSaver.from_addr(lg_server.addr) as made:
        thread = f"as-{uuid4()}"
        first = await made.aput(
            _config(thread),
            _checkpoint({"m": ["x"]}, {"m": 1}),
            {"source": "input", "step": -1, "run_id": "ra"},
            {"m": 1},
        )
        await made.aput_writes(first, [("m", ["y"])], "t1")
        second = await made.aput(
            first,
            _checkpoint({"m": ["x", "y"]}, {"m": 2}),
            {"source": "loop", "step": 0, "run_id": "rb"},
            {"m": 2},
        )
        # Many calls at once share the one pipelined connection.
        got = await asyncio.gather(*(made.aget_tuple(first) for _ in range(20)))
        assert all(g is not None and g.pending_writes == [("t1", "m", ["y"])] for g in got)
        assert [t.config async for t in made.alist(_config(thread))] == [second, first]
        await made.adelete_for_runs(["ra"])
        assert [t.config async for t in made.alist(_config(thread))] == [second]
        await made.acopy_thread(thread, thread + "-copy")
        await made.aprune([thread])
        await made.adelete_thread(thread)
        assert await made.aget_tuple(_config(thread)) is None
        copied = await made.aget_tuple(_config(thread + "-copy"))
        assert (
            copied is not None
            and copied.config["configurable"]["checkpoint_id"]
            == (second["configurable"]["checkpoint_id"])
        )
        assert made.aclient.connected and not made.client.connected


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


def _plain(result: Any) -> Any:
    """A graph's result without its interrupts' ids (they derive from random checkpoint ids)."""
    if isinstance(result, dict) and "__interrupt__" in result:
        return {**result, "__interrupt__": [i.value for i in result["__interrupt__"]]}
    return result


async def _graph_scenario(checkpointer: Any, use_async: bool) -> list[Any]:
    """A graph with a subgraph and an interrupt, run on two threads: resume (Command), time
    travel (invoke from an old checkpoint), update_state (a fork), history, delete_thread.
    Through the graph's async API (the saver's a* methods) or its sync one (the sync methods,
    in a worker thread). Returns what was observed, to compare with InMemorySaver's."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    def inner(state: _State) -> dict[str, list[str]]:
        return {"log": ["inner"]}

    sub_builder = StateGraph(_State)
    sub_builder.add_node("inner", inner)
    sub_builder.add_edge(START, "inner")
    sub_builder.add_edge("inner", END)
    subgraph = sub_builder.compile()

    def ask(state: _State) -> dict[str, list[str]]:
        answer = interrupt("name?")
        return {"log": [f"hello {answer}"]}

    def done(state: _State) -> dict[str, list[str]]:
        return {"log": ["done"]}

    builder = StateGraph(_State)
    builder.add_node("sub", subgraph)
    builder.add_node("ask", ask)
    builder.add_node("done", done)
    builder.add_edge(START, "sub")
    builder.add_edge("sub", "ask")
    builder.add_edge("ask", "done")
    builder.add_edge("done", END)
    graph = builder.compile(checkpointer=checkpointer)

    async def call(method: str, *args: Any, **kwargs: Any) -> Any:
        if use_async:
            return await getattr(graph, "a" + method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(graph, method), *args, **kwargs)

    async def history(config: Any) -> list[Any]:
        if use_async:
            return [s async for s in graph.aget_state_history(config)]
        return await asyncio.to_thread(lambda: list(graph.get_state_history(config)))

    seen: list[Any] = []
    one: Any = {"configurable": {"thread_id": f"one-{uuid4()}"}}
    two: Any = {"configurable": {"thread_id": f"two-{uuid4()}"}}
    await call("invoke", {"log": ["start"]}, one)
    await call("invoke", {"log": ["other"]}, two)
    state = await call("get_state", one)
    seen.append(state.next)
    seen.append([i.value for i in state.interrupts])
    sub_state = await call("get_state", one, subgraphs=True)
    seen.append(sub_state.values)
    seen.append(_plain(await call("invoke", Command(resume="ada"), one)))
    seen.append(_plain(await call("invoke", Command(resume="bob"), two)))

    past = await history(one)
    seen.append([(s.next, s.values, s.metadata and s.metadata.get("step")) for s in past])
    before_ask = next(s for s in past if s.next == ("ask",))
    seen.append(_plain(await call("invoke", None, before_ask.config)))  # time travel
    forked = await call("update_state", before_ask.config, {"log": ["edited"]}, as_node="ask")
    forked_state = await call("get_state", forked)
    seen.append((forked_state.values, forked_state.next))
    seen.append(_plain(await call("invoke", None, forked)))
    seen.append((await call("get_state", one)).values)
    seen.append(len(await history(one)))

    thread_one = one["configurable"]["thread_id"]
    if use_async:
        await checkpointer.adelete_thread(thread_one)
    else:
        await asyncio.to_thread(checkpointer.delete_thread, thread_one)
    seen.append((await call("get_state", one)).values)
    seen.append((await call("get_state", two)).values)
    return seen


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_state_graph_behaves_as_with_the_in_memory_saver(
    lg_server: ServerProcess, use_async: bool
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    async with CtxstoreSaver.from_addr(lg_server.addr) as saver:
        observed = await _graph_scenario(saver, use_async)
    assert observed == await _graph_scenario(InMemorySaver(), use_async)
    assert observed[0] == ("ask",) and observed[1] == ["name?"]
    assert observed[3]["log"][-3:] == ["inner", "hello ada", "done"]
    assert observed[-2] == {}  # thread one deleted
    assert observed[-1]["log"][-3:] == ["inner", "hello bob", "done"]  # thread two kept


async def test_a_saver_makes_the_client_it_was_not_given(lg_server: ServerProcess) -> None:
    import ctxstore

    thread = f"mk-{uuid4()}"
    checkpoint = _checkpoint({"n": 1}, {"n": 1})
    with ctxstore.Client(lg_server.addr) as client:
        only_sync = CtxstoreSaver(client)
        stored = await only_sync.aput(_config(thread), checkpoint, {"step": 0}, {"n": 1})
        assert only_sync.aclient.addr == lg_server.addr
        await only_sync.aclose()  # closes the AsyncClient it made, not the caller's Client
        assert client.connected
    async with ctxstore.AsyncClient(lg_server.addr) as aclient:
        only_async = CtxstoreSaver(aclient=aclient)
        found = await asyncio.to_thread(only_async.get_tuple, stored)
        assert found is not None and found.checkpoint["channel_values"] == {"n": 1}
        await only_async.aclose()
        assert aclient.connected
    with pytest.raises(ValueError):
        CtxstoreSaver()
