"""ctxstore.langgraph.CtxstoreSaver against a real server: LangGraph's own conformance suite
(langgraph-checkpoint-conformance), the sync methods directly, and a real StateGraph."""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from conftest import ServerProcess, new_server
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from ctxstore.langgraph import CtxstoreSaver


@pytest.fixture(scope="module")
def lg_server(tmp_root: Path) -> Iterator[ServerProcess]:
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def saver(lg_server: ServerProcess) -> Iterator[CtxstoreSaver]:
    with CtxstoreSaver.from_addr(lg_server.addr) as made:
        yield made


async def test_langgraph_conformance_suite_passes(tmp_root: Path) -> None:
    """Every capability the suite knows, each on a fresh server; delete_for_runs is not
    implemented (it needs tombstones) and so not detected."""

    @checkpointer_test(name="CtxstoreSaver")
    async def ctxstore_checkpointer() -> AsyncIterator[CtxstoreSaver]:
        process = new_server(tmp_root)
        made = CtxstoreSaver.from_addr(process.addr)
        try:
            yield made
        finally:
            made.close()
            process.stop()

    report = await validate(ctxstore_checkpointer, progress=ProgressCallbacks.verbose())
    report.print_report()
    assert report.passed_all_base(), report.to_dict()
    for extended in ("copy_thread", "prune"):
        assert report.results[extended].passed, report.to_dict()
    assert not report.results["delete_for_runs"].detected


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
    with pytest.raises(NotImplementedError):
        saver.delete_for_runs(["run-a"])


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


def _plain(result: Any) -> Any:
    """A graph's result without its interrupts' ids (they derive from random checkpoint ids)."""
    if isinstance(result, dict) and "__interrupt__" in result:
        return {**result, "__interrupt__": [i.value for i in result["__interrupt__"]]}
    return result


def _graph_scenario(checkpointer: Any) -> list[Any]:
    """A graph with a subgraph and an interrupt, run on two threads: resume, time travel
    (invoke from an old checkpoint), update_state (a fork), history, delete_thread. Returns
    what was observed, to compare with InMemorySaver's."""
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

    seen: list[Any] = []
    one: Any = {"configurable": {"thread_id": f"one-{uuid4()}"}}
    two: Any = {"configurable": {"thread_id": f"two-{uuid4()}"}}
    graph.invoke({"log": ["start"]}, one)
    graph.invoke({"log": ["other"]}, two)
    seen.append(graph.get_state(one).next)
    seen.append([i.value for i in graph.get_state(one).interrupts])
    seen.append(_plain(graph.invoke(Command(resume="ada"), one)))
    seen.append(_plain(graph.invoke(Command(resume="bob"), two)))

    history = list(graph.get_state_history(one))
    seen.append([(s.next, s.values, s.metadata and s.metadata.get("step")) for s in history])
    before_ask = next(s for s in history if s.next == ("ask",))
    seen.append(_plain(graph.invoke(None, before_ask.config)))  # time travel: replay from there
    forked = graph.update_state(before_ask.config, {"log": ["edited"]}, as_node="ask")
    seen.append((graph.get_state(forked).values, graph.get_state(forked).next))
    seen.append(_plain(graph.invoke(None, forked)))
    seen.append(graph.get_state(one).values)
    seen.append(len(list(graph.get_state_history(one))))

    checkpointer.delete_thread(one["configurable"]["thread_id"])
    seen.append(graph.get_state(one).values)
    seen.append(graph.get_state(two).values)
    return seen


def test_a_state_graph_behaves_as_with_the_in_memory_saver(saver: CtxstoreSaver) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    observed = _graph_scenario(saver)
    assert observed == _graph_scenario(InMemorySaver())
    assert observed[2]["log"][-3:] == ["inner", "hello ada", "done"]
    assert observed[-2] == {}  # thread one deleted
    assert observed[-1]["log"][-3:] == ["inner", "hello bob", "done"]  # thread two kept
