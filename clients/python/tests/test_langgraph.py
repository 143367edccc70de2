"""ctxstore.langgraph.CtxstoreSaver against a real server: LangGraph's own conformance suite
(langgraph-checkpoint-conformance), the sync methods directly, and a real StateGraph."""

from __future__ import annotations

import asyncio
import json
import operator
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from ctxstore.langgraph import CtxstoreSaver

from conftest import PYTHON_CLIENT_DIR, ServerProcess, new_server


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
        n for n, i in names.items() if i.tags["lg.thread"] == thread and "lg.ns" not in i.tags
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
        for info in saver.client.iter_contexts({"lg.thread": thread})
        if info.tags.get("lg.ns", "") == ns
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


# --- the context format: plain tags (format 2), format 1 still read (issue 29) ----------------


def _cli(server: ServerProcess, *args: str) -> list[dict[str, Any]]:
    """The CLI beside the server binary (`ctxstore`), with --json: one object per line."""
    cli = server.binary.parent / "ctxstore"
    assert cli.is_file(), f"no ctxstore CLI beside {server.binary}"
    done = subprocess.run(
        [str(cli), "--addr", server.addr, "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _to_format_1(saver: CtxstoreSaver, thread: str) -> None:
    """Rewrites the tags of a thread's contexts as the saver before format 2 wrote them
    (``lg.thread`` and ``lg.ns`` prefixed with "=", ``lg.ns`` always, no ``lg.fmt``):
    everything else of the mapping is the same in both formats."""
    for info in list(saver.client.iter_contexts({"lg.thread": thread})):
        ns = info.tags.get("lg.ns", "")
        saver.client.tag_context(
            info.context_id, {"lg.thread": "=" + thread, "lg.ns": "=" + ns}, ["lg.fmt"]
        )


def test_a_thread_is_tagged_with_plain_values_and_found_from_the_cli(
    saver: CtxstoreSaver, lg_server: ServerProcess
) -> None:
    """Issue 29: `ctxstore ctx list --tag lg.thread=thread-1` found nothing (the stored value
    was "=thread-1")."""
    thread = f"thread-{uuid4()}"
    saver.put(_config(thread), _checkpoint({"n": 1}, {"n": 1}), {"step": 0}, {"n": 1})
    saver.put(_config(thread, "child:1"), _checkpoint({"n": 2}, {"n": 1}), {"step": 0}, {"n": 1})
    tags = sorted(
        (info.tags for info in saver.client.iter_contexts({"lg.thread": thread})),
        key=lambda t: t.get("lg.ns", ""),
    )
    assert tags == [
        {"lg.thread": thread, "lg.fmt": "2"},
        {"lg.thread": thread, "lg.fmt": "2", "lg.ns": "child:1"},
    ]
    listed = _cli(lg_server, "ctx", "list", "--tag", f"lg.thread={thread}")
    assert sorted(row["name"] for row in listed) == sorted(
        [f"lg:{len(thread)}:{thread}:", f"lg:{len(thread)}:{thread}:child:1"]
    )
    only_child = _cli(
        lg_server, "ctx", "list", "--tag", f"lg.thread={thread}", "--tag", "lg.ns=child:1"
    )
    assert [row["name"] for row in only_child] == [f"lg:{len(thread)}:{thread}:child:1"]


def test_contexts_of_format_1_are_still_read_listed_copied_and_deleted(
    saver: CtxstoreSaver,
) -> None:
    thread, copy = f"old-{uuid4()}", f"copy-{uuid4()}"
    first = saver.put(_config(thread), _checkpoint({"n": 1}, {"n": 1}), {"step": 0}, {"n": 1})
    second = saver.put(first, _checkpoint({"n": 2}, {"n": 2}), {"step": 1}, {"n": 2})
    saver.put_writes(second, [("n", 3)], "task-1")
    sub = saver.put(_config(thread, "child:1"), _checkpoint({"x": 1}, {"x": 1}), {}, {"x": 1})
    _to_format_1(saver, thread)
    assert list(saver.client.iter_contexts({"lg.thread": thread})) == []  # all format 1 now

    latest = saver.get_tuple(_config(thread))
    assert latest is not None and latest.config == second
    assert latest.pending_writes == [("task-1", "n", 3)]
    every = list(saver.list({"configurable": {"thread_id": thread}}))  # both namespaces
    assert sorted(_ids(every)) == sorted(
        _ids([latest, saver.get_tuple(first), saver.get_tuple(sub)])
    )
    assert {t.config["configurable"]["checkpoint_ns"] for t in every} == {"", "child:1"}
    # The thread goes on in its format-1 contexts.
    third = saver.put(second, _checkpoint({"n": 3}, {"n": 3}), {"step": 2}, {"n": 3})
    found = saver.get_tuple(_config(thread))
    assert found is not None and found.config == third

    # A copy is written in format 2, even of a format-1 source (its "=" namespace dropped).
    saver.copy_thread(thread, copy)
    copies = {
        i.tags.get("lg.ns", ""): i.tags for i in saver.client.iter_contexts({"lg.thread": copy})
    }
    assert set(copies) == {"", "child:1"}
    assert copies[""]["lg.fmt"] == "2" and "lg.ns" not in copies[""]
    copied = saver.get_tuple(_config(copy))
    assert copied is not None and copied.checkpoint["channel_values"] == {"n": 3}

    saver.prune([thread])
    assert _ids(saver.list(_config(thread))) == _ids([found])
    saver.delete_thread(thread)
    assert list(saver.list({"configurable": {"thread_id": thread}})) == []
    assert saver.get_tuple(_config(copy, "child:1")) is not None  # the copy is its own


def test_threads_whose_values_meet_across_formats_stay_apart(saver: CtxstoreSaver) -> None:
    """A format-2 thread "=x" and a format-1 thread "x" both carry lg.thread "=x"."""
    plain = f"x-{uuid4()}"
    saver.put(_config(plain), _checkpoint({"n": 1}, {"n": 1}), {}, {"n": 1})
    _to_format_1(saver, plain)  # lg.thread "=x-..."
    eq = "=" + plain
    saver.put(_config(eq), _checkpoint({"n": 2}, {"n": 1}), {}, {"n": 1})  # lg.thread "=x-..."
    assert [
        t.checkpoint["channel_values"] for t in saver.list({"configurable": {"thread_id": plain}})
    ] == [{"n": 1}]
    assert [
        t.checkpoint["channel_values"] for t in saver.list({"configurable": {"thread_id": eq}})
    ] == [{"n": 2}]
    saver.delete_thread(eq)
    assert saver.get_tuple(_config(plain)) is not None
    assert saver.get_tuple(_config(eq)) is None


@pytest.mark.parametrize("thread", ["", "t" * 1025, "é" * 513])
async def test_a_thread_id_that_cannot_be_a_tag_value_is_refused_before_writing(
    saver: CtxstoreSaver, thread: str
) -> None:
    before = len(list(saver.client.iter_contexts(name_prefix="lg:")))
    checkpoint = _checkpoint({"n": 1}, {"n": 1})
    with pytest.raises(ValueError, match="thread id"):
        saver.put(_config(thread), checkpoint, {}, {"n": 1})
    with pytest.raises(ValueError, match="thread id"):
        await saver.aput(_config(thread), checkpoint, {}, {"n": 1})
    with pytest.raises(ValueError, match="thread id"):
        saver.put_writes(_config(thread, "", "cp-1"), [("n", 1)], "task-1")
    source = f"src-{uuid4()}"
    saver.put(_config(source), checkpoint, {}, {"n": 1})
    with pytest.raises(ValueError, match="thread id"):
        saver.copy_thread(source, thread)
    assert len(list(saver.client.iter_contexts(name_prefix="lg:"))) == before + 1
    assert saver.get_tuple(_config(thread)) is None  # a read is no error: nothing is there
    saver.delete_thread(source)


def _readme_block(language: str, after: str) -> str:
    """The first ``language`` block of the README after the line containing ``after``."""
    text = (PYTHON_CLIENT_DIR / "README.md").read_text()
    start = text.index(after)
    match = re.search(rf"```{language}\n(.*?)```", text[start:], re.S)
    assert match is not None, f"no {language} block after {after!r}"
    return match.group(1)


def test_the_readme_example_runs_and_its_thread_is_found_from_the_cli(
    tmp_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's LangGraph example, as written (its address replaced), on a fresh server;
    then the README's CLI lines that find the thread."""
    process = new_server(tmp_root)
    try:
        example = _readme_block("python", "### LangGraph: `ctxstore.langgraph.CtxstoreSaver`")
        assert '"127.0.0.1:7411"' in example
        exec(compile(example.replace("127.0.0.1:7411", process.addr), "README.md", "exec"), {})
        printed = capsys.readouterr().out.splitlines()
        assert printed[0] == "3 messages so far"
        assert len(printed) == 1 + 6  # the state, then each checkpoint of the history
        lines = [
            line.split("#")[0].split()
            for line in _readme_block("sh", "Find a thread's contexts").splitlines()
            if line.startswith("ctxstore ")
        ]
        results = [_cli(process, *[a.strip("'") for a in line[1:]]) for line in lines]
        assert [row["name"] for row in results[0]] == ["lg:8:thread-1:"]
        assert results[1] == []  # the example has no subgraph
        assert len(results[2]) == 5 and all(row["key"].startswith("cp/") for row in results[2])
        assert results[3] == []  # no format-1 thread here
    finally:
        process.stop()


def test_list_with_a_limit_reads_about_limit_turns_not_the_thread(lg_server: ServerProcess) -> None:
    """Issue 34 item 2: list(limit=N) (get_state_history(limit=N)) read every page of the
    thread's turn log, with payloads, before applying the limit."""
    import ctxstore
    from ctxstore.types import LogPage

    class Counting(ctxstore.Client):
        turns_read = 0

        def _count(self, result: Any) -> Any:
            if isinstance(result, LogPage):
                Counting.turns_read += len(result.turns)
            return result

        def _run(self, op: Any, timeout: Any) -> Any:
            return self._count(super()._run(op, timeout))

        def _run_many(self, batch: Any, timeout: Any) -> Any:
            return [self._count(r) for r in super()._run_many(batch, timeout)]

    thread = f"long-{uuid4()}"
    with Counting(lg_server.addr) as client:
        saver = CtxstoreSaver(client)
        config = _config(thread)
        stored = []
        for step in range(120):
            source = "input" if step % 10 == 0 else "loop"
            config = saver.put(
                config,
                _checkpoint({"n": step}, {"n": step + 1}),
                {"source": source, "step": step},
                {"n": step + 1},
            )
            stored.append(config["configurable"]["checkpoint_id"])
        Counting.turns_read = 0
        assert _ids(saver.list(_config(thread), limit=5)) == stored[::-1][:5]
        assert Counting.turns_read <= 5 + 1
        Counting.turns_read = 0
        before = {"configurable": {**_config(thread)["configurable"], "checkpoint_id": stored[60]}}
        assert _ids(saver.list(_config(thread), before=before, limit=3)) == stored[59:56:-1]
        assert Counting.turns_read <= 60 + 3  # the newer ones are read and passed over
        Counting.turns_read = 0
        inputs = saver.list(_config(thread), filter={"source": "input"}, limit=2)
        assert _ids(inputs) == [stored[110], stored[100]]
        assert Counting.turns_read <= 2 + 8 + 40  # pages of 2, 8, 32... until two match
        Counting.turns_read = 0
        assert len(list(saver.list(_config(thread)))) == 120
        assert Counting.turns_read == 120
