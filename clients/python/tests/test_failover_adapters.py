"""The framework adapters ride through a failover with no code of their own (issue 47): the
LangGraph saver and store, the OpenAI Agents session and the ADK session service, each built
on all three addresses of a primary (``--replicate-to file://...``) and two ``--auto-promote``
standbys (the helpers of test_failover.py), with ``idempotency="auto"`` passed the way a user
would (``from_addr``, the constructor, a ``ctxstore://`` URI, or a client of their own).

Each test writes and reads back through one adapter object (its sync methods and its async ones
where it has both), makes sure the standbys hold those writes (a remote-durable append on the
primary: the replica is one log), pauses the primary with a write of the adapter in flight,
kills it (SIGKILL), and goes on writing and reading through the same object: everything written
before the kill is read back, the write in flight and the writes after it land, and nothing is
there twice."""

from __future__ import annotations

import asyncio
import operator
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

import ctxstore
from ctxstore.adk import CtxstoreSessionService
from ctxstore.agents import POP_TYPE, CtxstoreSession
from ctxstore.langgraph import CtxstoreSaver, CtxstoreStore, _context_name

from test_failover import _replicated

FAILOVER_TIMEOUT = 30.0


class Cluster:
    """A primary and two caught-up ``--auto-promote`` standbys on one ``file://`` replica."""

    def __init__(self, tmp_root: Path, name: str) -> None:
        self.primary, self.standbys, self.fence_context = _replicated(tmp_root, name, standbys=2)
        # The standbys first: the clients find the primary among them.
        self.members = [*self.standbys, self.primary]

    @property
    def addrs(self) -> str:
        return ",".join(member.addr for member in self.members)

    @property
    def addr_list(self) -> list[str]:
        return [member.addr for member in self.members]

    def fence(self) -> None:
        """A remote-durable append on the primary: every write acknowledged before it is in
        the replica, which a standby reads to its end before it takes over."""
        with ctxstore.Client(self.primary.addr) as client:
            client.append(self.fence_context, b"fence", durability="remote")

    def kill_with(self, in_flight: Callable[[], Any]) -> Any:
        """Pauses the primary, starts ``in_flight`` in a thread (its request stuck on the
        paused server), kills the primary and returns what ``in_flight`` returned (raises
        what it raised)."""
        self.fence()
        self.primary.pause()
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append(("ok", in_flight()))
            except BaseException as error:  # noqa: BLE001 - what the thread saw
                outcome.append(("error", error))

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.3)
        self.primary.kill()
        thread.join(timeout=90)
        assert outcome, "the write in flight did not finish"
        kind, value = outcome[0]
        if kind == "error":
            raise value
        return value

    async def akill_with(self, in_flight: Any) -> Any:
        """:meth:`kill_with` for a coroutine (run as a task on the running loop)."""
        await asyncio.to_thread(self.fence)
        self.primary.pause()
        task = asyncio.ensure_future(in_flight)
        await asyncio.sleep(0.3)
        self.primary.kill()
        return await asyncio.wait_for(task, timeout=90)

    def promoted(self, addr: str) -> None:
        assert addr in {standby.addr for standby in self.standbys}, addr

    def stop(self) -> None:
        self.primary.kill()
        for standby in self.standbys:
            standby.stop()


@pytest.fixture()
def cluster(tmp_root: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    made = Cluster(tmp_root, f"adapters-{request.node.name}-{uuid4().hex[:8]}")
    yield made
    made.stop()


def _no_key_twice(client: ctxstore.Client, context: str) -> list[bytes]:
    """The keys of a context's turns (every turn, every branch), each once."""
    keys = [turn.key for turn in client.iter_turn_log(context) if turn.key is not None]
    assert len(keys) == len(set(keys)), keys
    return keys


# --- LangGraph: the checkpoint saver -----------------------------------------------------------


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(saver: CtxstoreSaver) -> Any:
    def step(state: _State) -> dict[str, list[str]]:
        return {"log": [f"step {len(state['log'])}"]}

    builder = StateGraph(_State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _expected_log(runs: int) -> list[str]:
    log: list[str] = []
    for i in range(runs):
        log.append(f"in {i}")
        log.append(f"step {len(log)}")
    return log


def _direct_checkpoint(n: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"value": f"direct {n}", "big": b"x" * 1000 * (n + 1)}
    checkpoint["channel_versions"] = {"value": n + 1, "big": n + 1}
    return checkpoint


async def test_the_langgraph_saver_rides_through_a_kill(cluster: Cluster) -> None:
    saver = CtxstoreSaver.from_addr(
        cluster.addrs, idempotency="auto", failover_timeout=FAILOVER_TIMEOUT
    )
    try:
        graph = _graph(saver)
        thread: Any = {"configurable": {"thread_id": f"t-{uuid4()}"}}
        runs = 0
        # Before the kill: through the sync methods (in a worker thread) and the async ones.
        await asyncio.to_thread(graph.invoke, {"log": [f"in {runs}"]}, thread)
        runs += 1
        await graph.ainvoke({"log": [f"in {runs}"]}, thread)
        runs += 1
        assert graph.get_state(thread).values["log"] == _expected_log(runs)
        assert (await graph.aget_state(thread)).values["log"] == _expected_log(runs)
        per_run = len(list(saver.list(thread))) // runs
        assert per_run >= 2

        # A checkpoint of its own thread, with new channel values (turns of its batch that
        # carry no key of the saver's), in flight when the primary is killed.
        direct: Any = {"configurable": {"thread_id": f"d-{uuid4()}", "checkpoint_ns": ""}}
        first = saver.put(direct, _direct_checkpoint(0), {"source": "input", "step": 0}, {})
        second_cp = _direct_checkpoint(1)
        second = cluster.kill_with(
            lambda: saver.put(first, second_cp, {"source": "loop", "step": 1}, {})
        )
        cluster.promoted(saver.client.addr)

        # After the kill: the same saver, sync and async.
        await asyncio.to_thread(graph.invoke, {"log": [f"in {runs}"]}, thread)
        runs += 1
        await graph.ainvoke({"log": [f"in {runs}"]}, thread)
        runs += 1
        cluster.promoted(saver.aclient.addr)
        assert graph.get_state(thread).values["log"] == _expected_log(runs)
        assert (await graph.aget_state(thread)).values["log"] == _expected_log(runs)
        history = list(saver.list(thread))
        ids = [item.checkpoint["id"] for item in history]
        assert len(ids) == len(set(ids)) == per_run * runs
        assert [item.checkpoint["id"] async for item in saver.alist(thread)] == ids

        got = saver.get_tuple(second)
        assert got is not None and got.checkpoint["id"] == second_cp["id"]
        assert got.checkpoint["channel_values"]["value"] == "direct 1"
        assert got.checkpoint["channel_values"]["big"] == b"x" * 2000
        assert got.parent_config is not None
        assert (
            got.parent_config["configurable"]["checkpoint_id"]
            == first["configurable"]["checkpoint_id"]
        )
        assert len(list(saver.list(direct))) == 2
        # Nothing twice: every checkpoint's turn (cp/<id>) and every value turn (an automatic
        # key) once.
        keys = _no_key_twice(saver.client, _context_name(direct["configurable"]["thread_id"], ""))
        assert sum(key.startswith(b"cp/") for key in keys) == 2
        assert sum(key.startswith(b"ctxstore-auto:") for key in keys) == 4
        thread_keys = _no_key_twice(
            saver.client, _context_name(thread["configurable"]["thread_id"], "")
        )
        assert sum(key.startswith(b"cp/") for key in thread_keys) == per_run * runs
    finally:
        await saver.aclose()


# --- LangGraph: the store ----------------------------------------------------------------------


async def test_the_langgraph_store_rides_through_a_kill(cluster: Cluster) -> None:
    # A Client of the user's own, on every address: the store's AsyncClient (its a* methods)
    # is made from it, with its addresses and options.
    client = ctxstore.Client(
        cluster.addr_list, idempotency="auto", failover_timeout=FAILOVER_TIMEOUT, lazy=True
    )
    store = CtxstoreStore(client, name=f"s-{uuid4()}", owns_client=True)
    try:
        ns = ("users", "u1")
        store.put(ns, "k0", {"n": 0})
        await store.aput(ns, "k1", {"n": 1})
        assert store.get(ns, "k1") is not None
        item = await store.aget(ns, "k0")
        assert item is not None and item.value == {"n": 0}

        cluster.kill_with(lambda: store.put(ns, "k2", {"n": 2}))
        cluster.promoted(client.addr)
        store.put(ns, "k3", {"n": 3})
        await store.aput(ns, "k4", {"n": 4})
        store.put(ns, "k0", {"n": 10})  # an update after the kill
        cluster.promoted(store.aclient.addr)
        assert store.aclient.follows_primary

        expected = {"k0": {"n": 10}, "k1": {"n": 1}, "k2": {"n": 2}, "k3": {"n": 3}}
        expected["k4"] = {"n": 4}
        found = {item.key: item.value for item in store.search(ns, limit=100)}
        assert found == expected
        afound = {item.key: item.value for item in await store.asearch(ns, limit=100)}
        assert afound == expected
        for key, value in expected.items():
            got = await store.aget(ns, key)
            assert got is not None and got.value == value
        assert store.list_namespaces() == [ns]
    finally:
        await store.aclose()


# --- the OpenAI Agents session -----------------------------------------------------------------


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


async def test_the_agents_session_rides_through_a_kill(cluster: Cluster) -> None:
    session = CtxstoreSession(
        f"s-{uuid4()}",
        addr=cluster.addrs,
        idempotency="auto",
        failover_timeout=FAILOVER_TIMEOUT,
    )
    async with session:
        await session.add_items([_msg("m0"), _msg("m1")])
        await session.add_items([_msg("m2")])
        assert await session.get_items() == [_msg(f"m{i}") for i in range(3)]

        # Two items in flight (one batch, no key of the session's own) at the kill.
        await cluster.akill_with(session.add_items([_msg("m3"), _msg("m4")]))
        cluster.promoted(session.client.addr)
        await session.add_items([_msg("m5")])
        assert await session.pop_item() == _msg("m5")
        await session.add_items([_msg("m6")])

        expected = [_msg(f"m{i}") for i in (0, 1, 2, 3, 4, 6)]
        assert await session.get_items() == expected
        assert await session.get_items(limit=2) == expected[-2:]
        # Nothing twice: the context holds the seven items and one pop marker.
        turns = [turn async for turn in session.client.iter_turn_log(session.context_name)]
        assert sum(turn.type_tag == POP_TYPE for turn in turns) == 1
        assert len(turns) == 8, [turn.turn_id for turn in turns]
        keys = [turn.key for turn in turns if turn.key is not None]
        assert len(keys) == len(set(keys))


# --- the ADK session service -------------------------------------------------------------------


def _event(n: int) -> Event:
    return Event(
        author="user" if n % 2 else "agent",
        invocation_id=f"inv-{n}",
        content=types.Content(role="user", parts=[types.Part(text=f"event {n}")]),
        actions=EventActions(state_delta={"n": n, f"k{n}": n}),
    )


async def test_the_adk_session_service_rides_through_a_kill(cluster: Cluster) -> None:
    # A ctxstore:// URI naming every address and the options (what `adk web
    # --session_service_uri` passes).
    uri = f"ctxstore://{cluster.addrs}/ns?idempotency=auto&failover_timeout={FAILOVER_TIMEOUT}"
    service = CtxstoreSessionService(uri=uri)
    async with service:
        assert service.client.follows_primary and service.aclient.follows_primary
        session = service.create_session_sync(app_name="app", user_id="u", state={"n": 0})
        events = [_event(1), _event(2), _event(3)]
        service.append_event_sync(session, events[0])
        await service.append_event(session, events[1])
        await asyncio.to_thread(service.append_event_sync, session, events[2])
        again = await service.get_session(app_name="app", user_id="u", session_id=session.id)
        assert again is not None and [e.id for e in again.events] == [e.id for e in events]

        # An event with a state delta (a state turn without a key of the service's own, and
        # the event's turn) in flight at the kill.
        events.append(_event(4))
        await cluster.akill_with(service.append_event(session, events[-1]))
        cluster.promoted(service.aclient.addr)
        events.append(_event(5))
        service.append_event_sync(session, events[-1])
        cluster.promoted(service.client.addr)
        events.append(_event(6))
        await service.append_event(session, events[-1])
        other = await service.create_session(app_name="app", user_id="u", session_id="after")

        ids = [e.id for e in events]
        for read in (
            service.get_session_sync(app_name="app", user_id="u", session_id=session.id),
            await service.get_session(app_name="app", user_id="u", session_id=session.id),
        ):
            assert read is not None
            assert [e.id for e in read.events] == ids
            assert read.state["n"] == 6
            assert all(read.state[f"k{n}"] == n for n in range(1, 7))
        listed = await service.list_sessions(app_name="app", user_id="u")
        assert sorted(s.id for s in listed.sessions) == sorted([session.id, other.id])
        context = service.session_context("app", "u", session.id)
        turns = list(service.client.iter_turn_log(context))
        # The state turn of the creation, then a state turn and an event turn per event, each
        # with a key (the event's own, or an automatic one), each once.
        assert len(turns) == 1 + 2 * len(events), [t.turn_id for t in turns]
        keys = [turn.key for turn in turns if turn.key is not None]
        assert len(keys) == len(set(keys)) == len(turns)
