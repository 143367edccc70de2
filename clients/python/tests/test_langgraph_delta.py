"""LangGraph's DeltaChannel on CtxstoreSaver (issue 34 item 1): a real graph whose state is a
delta channel behaves as with InMemorySaver step by step (time travel and update_state
included), keeps doing so after prune, delete_for_runs and copy_thread, and its history is
read in a few round trips however far the snapshot is; plus the history contract case by case
(seed, order of parallel writes, the target's own writes, several channels)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph

import ctxstore
from ctxstore.langgraph import CtxstoreSaver

from conftest import ServerProcess, new_server


@pytest.fixture(scope="module")
def delta_server(tmp_root: Path) -> Iterator[ServerProcess]:
    process = new_server(tmp_root)
    yield process
    process.stop()


def _merge(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    """The delta channel's reducer: appends every write (a list is its items)."""
    merged = list(state)
    for write in writes:
        merged.extend(write if isinstance(write, list) else [write])
    return merged


class State(TypedDict):
    # 9 updates an invoke: the checkpoint pruned after the 4th (36 updates) is 4 past its
    # snapshot (at 32), so keep_latest must keep what replays those 4.
    log: Annotated[list[str], DeltaChannel(_merge, snapshot_frequency=8)]
    n: int


def _graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    """Two nodes in a loop, eight supersteps per invoke: each appends to the delta channel."""

    def work(state: State) -> dict[str, Any]:
        return {"log": [f"work {state['n']}"], "n": state["n"] + 1}

    def check(state: State) -> dict[str, Any]:
        return {"log": [f"check {state['n']}"]}

    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_node("check", check)
    builder.add_edge(START, "work")
    builder.add_edge("work", "check")
    builder.add_conditional_edges("check", lambda s: END if s["n"] % 5 == 0 else "work")
    return builder.compile(checkpointer=checkpointer)


async def _scenario(saver: BaseCheckpointSaver[Any], use_async: bool, prune: bool) -> list[Any]:
    """What a user observes, step by step: states after each invoke, the history, time
    travel, update_state; with ``prune``, the thread pruned (keep_latest) half way and then
    continued (InMemorySaver has no prune: its unpruned thread must read the same)."""
    graph = _graph(saver)
    thread = f"d-{uuid4()}"
    config: Any = {"configurable": {"thread_id": thread}}
    seen: list[Any] = []

    async def call(method: str, *args: Any) -> Any:
        if use_async:
            return await getattr(graph, "a" + method)(*args)
        return await asyncio.to_thread(getattr(graph, method), *args)

    async def history() -> list[Any]:
        if use_async:
            return [s async for s in graph.aget_state_history(config)]
        return await asyncio.to_thread(lambda: list(graph.get_state_history(config)))

    for i in range(6):
        await call("invoke", {"log": [f"user {i}"], "n": 5 * i + 1}, config)
        seen.append((await call("get_state", config)).values)
        if prune and i == 3:
            if use_async:
                await saver.aprune([thread])
            else:
                await asyncio.to_thread(saver.prune, [thread])
            assert isinstance(saver, CtxstoreSaver)
            assert saver.client.gc().turns_dead > 0  # what the prune dropped is gone for good
            seen.append((await call("get_state", config)).values)
    if not prune:
        past = await history()
        seen.append([(s.values, s.next) for s in past])
        older = past[len(past) // 2]
        seen.append((await call("get_state", older.config)).values)
        seen.append(await call("invoke", None, older.config))  # time travel: resume there
        forked = await call("update_state", older.config, {"log": ["edited"], "n": 101})
        seen.append((await call("get_state", forked)).values)
        seen.append(await call("invoke", {"log": ["after edit"], "n": 106}, forked))
    seen.append((await call("get_state", config)).values)
    return seen


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("prune", [False, True], ids=["history", "pruned"])
async def test_a_delta_channel_graph_behaves_as_with_the_in_memory_saver(
    delta_server: ServerProcess, use_async: bool, prune: bool
) -> None:
    async with CtxstoreSaver.from_addr(delta_server.addr) as saver:
        observed = await _scenario(saver, use_async, prune)
    expected = await _scenario(InMemorySaver(), use_async, prune=False)
    if prune:
        # The pruned run observes the unpruned states, once more after the prune.
        expected = expected[:4] + [expected[3]] + expected[4:6] + [expected[5]]
    assert observed == expected
    assert len(observed[-1]["log"]) > 30  # many steps past several snapshots


async def test_the_history_of_a_long_thread_takes_a_few_round_trips(
    delta_server: ServerProcess,
) -> None:
    """91 checkpoints past the snapshot: the default walk would cost one get_tuple (several
    requests) per ancestor; this one costs a handful of round trips."""

    class Counting(ctxstore.AsyncClient):
        trips = 0

        async def _run(self, op: Any, timeout: Any) -> Any:
            Counting.trips += 1
            return await super()._run(op, timeout)

        async def _drive(self, plan: Any, timeout: Any) -> Any:
            # A Many step is one round trip (its requests pipelined): count it once.
            from ctxstore import _ops as ops

            driver = ops.Driver(plan)
            while (step := driver.step()) is not None:
                try:
                    if isinstance(step, ops.Many):
                        Counting.trips += 1
                        runs = [super(Counting, self)._run(op, timeout) for op in step.ops]
                        driver.answer(await asyncio.gather(*runs))
                    elif isinstance(step, ops.Op):
                        driver.answer(await self._run(step, timeout))
                    else:
                        driver.answer(await self.server_info(timeout=timeout))
                except ctxstore.CtxstoreError as error:
                    driver.fail(error)
            return driver.value

    async with Counting(delta_server.addr) as client:
        saver = CtxstoreSaver(aclient=client)
        configs = await _delta_chain(saver, f"long-{uuid4()}", "ch", snapshots=[0], steps=92)
        fresh = CtxstoreSaver(aclient=client)  # no cache: every document is fetched
        Counting.trips = 0
        history = await fresh.aget_delta_channel_history(config=configs[-1], channels=["ch"])
        assert [w[2] for w in history["ch"]["writes"]] == list(range(91))
        assert history["ch"]["seed"] == _DeltaSnapshot(0)
        assert Counting.trips <= 8, Counting.trips
        await saver.aclose()


# --- the history contract, case by case (after LangGraph's upstream conformance cases) --------


async def _delta_chain(
    saver: BaseCheckpointSaver[Any], thread: str, channel: str, snapshots: list[int], steps: int
) -> list[Any]:
    """A chain of ``steps`` checkpoints; step i holds the snapshot ``i`` when i is in
    ``snapshots`` and writes ``i`` to the channel."""
    configs: list[Any] = []
    parent: Any = None
    for step in range(steps):
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        values = {channel: _DeltaSnapshot(step)} if step in snapshots else {}
        versions = {channel: step + 1} if step in snapshots else {}
        checkpoint = _checkpoint(values, versions)
        parent = await saver.aput(config, checkpoint, {"step": step}, versions)
        configs.append(parent)
        await saver.aput_writes(parent, [(channel, step)], str(uuid4()))
    return configs


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = versions
    return checkpoint


@pytest.fixture(params=["ctxstore", "memory"])
async def any_saver(request: Any, delta_server: ServerProcess) -> Any:
    """Each case runs on CtxstoreSaver and on InMemorySaver (the reference)."""
    if request.param == "memory":
        yield InMemorySaver()
        return
    async with CtxstoreSaver.from_addr(delta_server.addr) as saver:
        yield saver


async def test_history_is_the_writes_since_the_nearest_snapshot_oldest_first(
    any_saver: Any,
) -> None:
    configs = await _delta_chain(any_saver, str(uuid4()), "ch", [0, 3], 6)
    history = await any_saver.aget_delta_channel_history(config=configs[-1], channels=["ch"])
    assert history["ch"]["seed"] == _DeltaSnapshot(3)
    assert [w[2] for w in history["ch"]["writes"]] == [3, 4]  # the seed's own write included
    early = await any_saver.aget_delta_channel_history(config=configs[2], channels=["ch"])
    assert early["ch"]["seed"] == _DeltaSnapshot(0)
    assert [w[2] for w in early["ch"]["writes"]] == [0, 1]
    assert await any_saver.aget_delta_channel_history(config=configs[-1], channels=[]) == {}


async def test_history_without_a_snapshot_has_no_seed_and_skips_the_targets_writes(
    any_saver: Any,
) -> None:
    configs = await _delta_chain(any_saver, str(uuid4()), "ch", [], 4)
    await any_saver.aput_writes(configs[-1], [("ch", "pending")], str(uuid4()))
    history = await any_saver.aget_delta_channel_history(config=configs[-1], channels=["ch"])
    assert "seed" not in history["ch"]
    assert [w[2] for w in history["ch"]["writes"]] == [0, 1, 2]
    missing: Any = {"configurable": {"thread_id": str(uuid4()), "checkpoint_ns": ""}}
    assert await any_saver.aget_delta_channel_history(config=missing, channels=["ch"]) == {
        "ch": {"writes": []}
    }


async def test_history_orders_a_steps_writes_as_live_execution_applied_them(
    any_saver: Any,
) -> None:
    configs = await _delta_chain(any_saver, str(uuid4()), "ch", [0], 3)
    step_1 = configs[1]
    last = "ffffffff-ffff-ffff-ffff-ffffffffffff"
    first = "00000000-0000-0000-0000-000000000000"
    await any_saver.aput_writes(step_1, [("ch", "second")], first, "~pull, 02")
    await any_saver.aput_writes(step_1, [("ch", "first")], last, "~pull, 01")
    # No task path (graph input): before the task writes, after the chain's own write of
    # step 1 (its task id is a uuid4, which sorts below this one).
    await any_saver.aput_writes(step_1, [("ch", "input")], "fffffffe-ffff-ffff-ffff-ffffffffffff")
    history = await any_saver.aget_delta_channel_history(config=configs[2], channels=["ch"])
    assert [w[2] for w in history["ch"]["writes"]] == [0, 1, "input", "first", "second"]


async def test_history_walks_each_channel_to_its_own_seed(any_saver: Any) -> None:
    thread = str(uuid4())
    parent: Any = None
    for step in range(5):
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        values: dict[str, Any] = {}
        if step == 1:
            values["a"] = _DeltaSnapshot("snap a")
        if step == 3:
            values["b"] = [10, 20]  # a plain value (a channel before it became a delta channel)
        versions = {ch: step + 1 for ch in values}
        parent = await any_saver.aput(config, _checkpoint(values, versions), {}, versions)
        await any_saver.aput_writes(parent, [("a", step), ("b", step)], str(uuid4()))
    history = await any_saver.aget_delta_channel_history(config=parent, channels=["a", "b"])
    assert history["a"]["seed"] == _DeltaSnapshot("snap a")
    assert [w[2] for w in history["a"]["writes"]] == [1, 2, 3]
    assert history["b"]["seed"] == [10, 20]
    assert [w[2] for w in history["b"]["writes"]] == [3]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_delete_for_runs_copy_and_prune_keep_what_delta_channels_replay(
    delta_server: ServerProcess, use_async: bool
) -> None:
    """A thread of two runs: deleting the first run's checkpoints, copying the thread and
    pruning it leave every state the second run reached as it was (its delta channel
    replays the deleted checkpoints' writes), and the thread goes on as InMemorySaver's."""

    async def run(saver: BaseCheckpointSaver[Any], thread: str, start: int, stop: int) -> Any:
        graph = _graph(saver)
        for i in range(start, stop):
            config: Any = {
                "configurable": {"thread_id": thread},
                "run_id": uuid4() if i >= 3 else RUN_ONE,
            }
            if use_async:
                await graph.ainvoke({"log": [f"user {i}"], "n": 5 * i + 1}, config)
            else:
                await asyncio.to_thread(
                    graph.invoke, {"log": [f"user {i}"], "n": 5 * i + 1}, config
                )
        state = graph.get_state({"configurable": {"thread_id": thread}})
        return state.values

    RUN_ONE = uuid4()
    thread, copy = f"runs-{uuid4()}", f"copy-{uuid4()}"
    async with CtxstoreSaver.from_addr(delta_server.addr) as saver:
        before = await run(saver, thread, 0, 5)
        assert before == await run(InMemorySaver(), thread, 0, 5)

        async def state_of(thread_id: str) -> Any:
            config = {"configurable": {"thread_id": thread_id}}
            return (await asyncio.to_thread(_graph(saver).get_state, config)).values

        def call(method: str, *args: Any) -> Any:
            if use_async:
                return getattr(saver, "a" + method)(*args)
            return asyncio.to_thread(getattr(saver, method), *args)

        await call("copy_thread", thread, copy)
        assert await state_of(copy) == before
        await call("delete_for_runs", [str(RUN_ONE)])
        listed = await asyncio.to_thread(
            lambda: list(saver.list({"configurable": {"thread_id": thread}}))
        )
        assert listed and all(t.metadata.get("run_id") != str(RUN_ONE) for t in listed)
        assert await state_of(thread) == before
        assert await state_of(copy) == before
        await call("prune", [thread])
        saver.client.gc()  # (the copy holds the pruned turns: nothing is collected yet)
        assert await state_of(thread) == before
        assert await state_of(copy) == before
        after = await run(saver, thread, 5, 6)
    assert after == await run(InMemorySaver(), thread, 0, 6)


async def test_history_past_a_busy_side_branch_keeps_only_its_own_writes(any_saver: Any) -> None:
    """Between each two checkpoints of the walked chain, a side branch stores a checkpoint
    with many writes: the range of ids the walk covers is mostly theirs (the ctxstore saver
    then lists each ancestor's writes alone), and none of them is replayed."""
    thread = str(uuid4())
    parent: Any = None
    for step in range(30):  # 29 ancestors walked, 1,160 side writes among theirs
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        values = {"ch": _DeltaSnapshot("seed")} if step == 0 else {}
        versions = {"ch": 1} if step == 0 else {}
        side = await any_saver.aput(config, _checkpoint({}, {}), {}, {})
        await any_saver.aput_writes(side, [("ch", f"side {step}.{i}") for i in range(40)], "s")
        parent = await any_saver.aput(config, _checkpoint(values, versions), {}, versions)
        await any_saver.aput_writes(parent, [("ch", step)], str(uuid4()))
    history = await any_saver.aget_delta_channel_history(config=parent, channels=["ch"])
    assert history["ch"]["seed"] == _DeltaSnapshot("seed")
    assert [w[2] for w in history["ch"]["writes"]] == list(range(29))
