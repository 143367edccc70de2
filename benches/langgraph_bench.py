#!/usr/bin/env python3
"""LangGraph checkpointers side by side: ctxstore (CtxstoreSaver) vs SqliteSaver vs
PostgresSaver on the same graph, on the same machine.

The graph is an agent loop: one node appends a ~1 KiB assistant message (chat-like text) to a
growing message list (LangGraph's ``MessagesState``) and loops back to itself for SUPERSTEPS
supersteps; every superstep is checkpointed before the next starts (``durability="sync"``).
Measured per backend, on a fresh store each run:

- time per superstep (p50 / p99): the gaps between the supersteps ``graph.stream`` yields;
- ``get_state`` latency (p50 / p99) of the finished thread, GETS calls;
- bytes on disk at the end: ctxstore's data directory, the SQLite file with its WAL, the
  PostgreSQL database (``pg_database_size``, and the saver's tables alone).

    benches/langgraph_bench.sh                     # installs what is missing, runs, prints
    python benches/langgraph_bench.py --server-bin target/release/ctxstore-server \\
        --pg-dsn postgresql://bench@127.0.0.1:55433/postgres [--runs 3] [--json out.json]

Needs: ``pip install ./clients/python[langgraph] langgraph langgraph-checkpoint-sqlite
langgraph-checkpoint-postgres 'psycopg[binary]'``; PostgreSQL is optional (``--pg-dsn``;
the wrapper starts one). Durability is alike: ctxstore fsyncs every acknowledged write,
SQLite runs WAL with ``synchronous=FULL``, PostgreSQL ``synchronous_commit=on``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

_WORDS = (
    "the a to of and in is that for it on with as was be this are by at from or an have "
    "not you can will which tool call result search query agent model context answer "
    "message user assistant function returns value list file data step plan next think "
    "error retry found page text summary request response token json field name id time "
    "first then after before when because however also more less each every other some "
    "weather report city temperature forecast price order customer account invoice "
    "document section paragraph code test build deploy server client database table row"
).split()


def chat_text(rng: random.Random, size: int) -> str:
    """About ``size`` bytes of chat-like text (words of a small vocabulary, sentences)."""
    out: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 18)))
        sentence = sentence.capitalize() + rng.choice([".", ".", ".", "?", "!"])
        out.append(sentence)
        length += len(sentence) + 1
    return " ".join(out)[:size]


def delta_state(snapshot_frequency: int) -> Any:
    """MessagesState with its messages in a DeltaChannel (LangGraph 1.2): a checkpoint stores
    the message list only every ``snapshot_frequency`` updates, and a state load replays the
    writes since the nearest one (``get_delta_channel_history``)."""
    from functools import reduce
    from typing import Annotated, TypedDict

    from langchain_core.messages import AnyMessage
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph.message import add_messages

    def append(state: list[Any], writes: Any) -> list[Any]:
        return reduce(add_messages, writes, state)  # type: ignore[arg-type]

    # The functional form: this module's annotations are strings, evaluated in its globals.
    channel = DeltaChannel(append, snapshot_frequency=snapshot_frequency)
    return TypedDict("DeltaMessagesState", {"messages": Annotated[list[AnyMessage], channel]})


def build_graph(
    checkpointer: Any,
    supersteps: int,
    message_bytes: int,
    seed: int,
    state: str = "messages",
    snapshot_frequency: int = 100,
) -> Any:
    rng = random.Random(seed)
    schema: Any = MessagesState if state == "messages" else delta_state(snapshot_frequency)

    def agent(state: Any) -> dict[str, list[AIMessage]]:
        text = chat_text(rng, message_bytes)
        return {"messages": [AIMessage(content=text, id=str(uuid.UUID(int=rng.getrandbits(128))))]}

    def route(state: Any) -> str:
        return END if len(state["messages"]) > supersteps else "agent"

    builder = StateGraph(schema)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["agent", END])
    return builder.compile(checkpointer=checkpointer)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


RESERVE = "RESERVE"
"""The file a data directory keeps as ballast (space given up so that a garbage collection can
run on a full disk): reserved, not data; left out of the bytes on disk, and reported apart."""


def dir_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under ``path`` but the ballast."""
    apparent = allocated = 0
    for root, _, files in os.walk(path):
        for name in files:
            if name == RESERVE and Path(root) == path:
                continue
            st = os.lstat(os.path.join(root, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def _graph_of(checkpointer: Any, args: argparse.Namespace, seed: int) -> Any:
    return build_graph(
        checkpointer,
        args.supersteps,
        args.message_bytes,
        seed,
        args.state,
        args.snapshot_frequency,
    )


def run_graph(checkpointer: Any, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    graph = _graph_of(checkpointer, args, seed)
    config = {"configurable": {"thread_id": f"bench-{seed}"}, "recursion_limit": 10_000}
    steps: list[float] = []
    start = last = time.perf_counter()
    for _ in graph.stream(
        {"messages": [HumanMessage(content="Plan the trip, step by step.")]},
        config,
        stream_mode="updates",
        durability="sync",
    ):
        now = time.perf_counter()
        steps.append(now - last)
        last = now
    total = time.perf_counter() - start
    state = graph.get_state(config)
    assert len(state.values["messages"]) == args.supersteps + 1, len(state.values["messages"])
    gets: list[float] = []
    for _ in range(args.gets):
        t0 = time.perf_counter()
        graph.get_state(config)
        gets.append(time.perf_counter() - t0)
    history = sum(1 for _ in graph.get_state_history(config))
    return {
        "supersteps": len(steps),
        "step_s": steps,
        "total_s": total,
        "get_state_s": gets,
        "checkpoints": history,
    }


async def arun_graph(checkpointer: Any, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """run_graph through the graph's async API (the savers' a* methods)."""
    graph = _graph_of(checkpointer, args, seed)
    config = {"configurable": {"thread_id": f"bench-{seed}"}, "recursion_limit": 10_000}
    steps: list[float] = []
    start = last = time.perf_counter()
    async for _ in graph.astream(
        {"messages": [HumanMessage(content="Plan the trip, step by step.")]},
        config,
        stream_mode="updates",
        durability="sync",
    ):
        now = time.perf_counter()
        steps.append(now - last)
        last = now
    total = time.perf_counter() - start
    state = await graph.aget_state(config)
    assert len(state.values["messages"]) == args.supersteps + 1, len(state.values["messages"])
    gets: list[float] = []
    for _ in range(args.gets):
        t0 = time.perf_counter()
        await graph.aget_state(config)
        gets.append(time.perf_counter() - t0)
    history = [s async for s in graph.aget_state_history(config)]
    return {
        "supersteps": len(steps),
        "step_s": steps,
        "total_s": total,
        "get_state_s": gets,
        "checkpoints": len(history),
    }


@asynccontextmanager
async def async_sqlite_saver(path: Path) -> AsyncIterator[Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()  # journal_mode=WAL
        await saver.conn.execute("PRAGMA synchronous=FULL")
        yield saver


@asynccontextmanager
async def async_postgres_saver(dsn: str) -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        yield saver


def run_backend(backend: str, args: argparse.Namespace, work: Path, seed: int) -> dict[str, Any]:
    """One run on a fresh store: the sync API on the backend's saver, or the async API on
    its async saver (ctxstore: the same saver's a* methods)."""
    with BACKENDS[backend](args, work) as (saver, size, target):
        if args.api == "sync":
            result = run_graph(saver, args, seed)
        elif backend == "memory":
            result = asyncio.run(arun_graph(saver, args, seed))
        elif backend.startswith("ctxstore"):

            async def go() -> dict[str, Any]:
                try:
                    return await arun_graph(saver, args, seed)
                finally:
                    await saver.aclose()

            result = asyncio.run(go())
        else:
            opener = async_sqlite_saver if backend == "sqlite" else async_postgres_saver

            async def go() -> dict[str, Any]:
                async with opener(target) as asaver:
                    return await arun_graph(asaver, args, seed)

            result = asyncio.run(go())
        result.update(size())
    return result


# -- backends -----------------------------------------------------------------------------------


@contextmanager
def ctxstore_backend(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], dict[str, int]], Any]]:
    from ctxstore.langgraph import CtxstoreSaver

    data = work / "ctxstore-data"
    ready = work / "ctxstore.ready"
    log = open(work / "ctxstore.log", "wb")
    process = subprocess.Popen(
        [
            args.server_bin,
            "--data",
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
            *args.server_arg,
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"ctxstore-server did not start: {(work / 'ctxstore.log').read_text()}"
                )
            time.sleep(0.02)
        addr = ready.read_text().strip()
        saver = CtxstoreSaver.from_addr(addr)

        def size() -> dict[str, int]:
            apparent, allocated = dir_bytes(data)
            reserve = data / RESERVE
            ballast = reserve.stat().st_size if reserve.exists() else 0
            return {"bytes": apparent, "allocated_bytes": allocated, "reserve_bytes": ballast}

        try:
            yield saver, size, addr
        finally:
            saver.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


@contextmanager
def ctxstore_walk_backend(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], dict[str, int]], Any]]:
    """ctxstore with LangGraph's default get_delta_channel_history (one get_tuple per
    ancestor): the saver before issue 34 item 1, for the state-load figure."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    with ctxstore_backend(args, work) as (saver, size, addr):
        saver.get_delta_channel_history = (  # type: ignore[method-assign]
            lambda **kw: BaseCheckpointSaver.get_delta_channel_history(saver, **kw)
        )
        saver.aget_delta_channel_history = (  # type: ignore[method-assign]
            lambda **kw: BaseCheckpointSaver.aget_delta_channel_history(saver, **kw)
        )
        yield saver, size, addr


@contextmanager
def sqlite_backend(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], dict[str, int]], Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = work / "checkpoints.sqlite"
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    saver = SqliteSaver(conn)
    saver.setup()  # journal_mode=WAL
    conn.execute("PRAGMA synchronous=FULL")

    def size() -> dict[str, int]:
        files = [p for p in work.iterdir() if p.name.startswith("checkpoints.sqlite")]
        return {
            "bytes": sum(p.stat().st_size for p in files),
            "allocated_bytes": sum(p.stat().st_blocks * 512 for p in files),
            "wal_bytes": sum(p.stat().st_size for p in files if p.name.endswith("-wal")),
        }

    try:
        yield saver, size, path
    finally:
        conn.close()


def pg_tables_bytes(conn: Any) -> int:
    """Bytes of the public schema's tables (their indexes and TOAST included)."""
    return int(
        conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public'"
        ).fetchone()[0]
    )


@contextmanager
def postgres_backend(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], dict[str, int]], Any]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    db = f"lgbench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {db}")
    dsn = args.pg_dsn.rsplit("/", 1)[0] + "/" + db
    try:
        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            with psycopg.connect(dsn, autocommit=True) as probe:
                empty = probe.execute("SELECT pg_database_size(current_database())").fetchone()[0]

                def size() -> dict[str, int]:
                    probe.execute("CHECKPOINT")
                    total = probe.execute("SELECT pg_database_size(current_database())").fetchone()[
                        0
                    ]
                    return {
                        "bytes": pg_tables_bytes(probe),
                        "database_bytes": int(total),
                        "database_growth_bytes": int(total - empty),
                    }

                yield saver, size, dsn
    finally:
        with psycopg.connect(args.pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db}")


@contextmanager
def memory_backend(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], dict[str, int]], Any]]:
    """InMemorySaver: no storage at all, the floor of LangGraph's own work per superstep."""
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver(), lambda: {"bytes": 0}, None


BACKENDS = {
    "memory": memory_backend,
    "ctxstore": ctxstore_backend,
    "ctxstore-walk": ctxstore_walk_backend,
    "sqlite": sqlite_backend,
    "postgres": postgres_backend,
}


# -- the long-term memory store: CtxstoreStore vs PostgresStore ------------------------------------


def store_workload(store: Any, args: argparse.Namespace, seed: int) -> dict[str, list[float]]:
    """The same operations on a store: ``--items`` puts of ~``--message-bytes`` memories
    spread over ``--namespaces`` users (a fifth of them the same text, as shared memories
    are), then as many gets of random items, then a search per user with a filter and a
    limit of 10. Each operation timed alone (sync API, one client)."""
    rng = random.Random(seed)
    users = [("memories", f"user-{u}") for u in range(args.namespaces)]
    shared = chat_text(rng, args.message_bytes)
    keys: list[tuple[tuple[str, str], str]] = []
    times: dict[str, list[float]] = {"put": [], "get": [], "search": []}
    for i in range(args.items):
        namespace = users[i % len(users)]
        key = f"mem-{i}"
        text = shared if i % 5 == 0 else chat_text(rng, args.message_bytes)
        value = {
            "text": text,
            "kind": "episodic" if i % 3 else "semantic",
            "score": i % 10,
        }
        t0 = time.perf_counter()
        store.put(namespace, key, value)
        times["put"].append(time.perf_counter() - t0)
        keys.append((namespace, key))
    for _ in range(args.items):
        namespace, key = rng.choice(keys)
        t0 = time.perf_counter()
        found = store.get(namespace, key)
        times["get"].append(time.perf_counter() - t0)
        assert found is not None
    for namespace in users:
        t0 = time.perf_counter()
        hits = store.search(namespace, filter={"kind": "semantic"}, limit=10)
        times["search"].append(time.perf_counter() - t0)
        assert all(h.value["kind"] == "semantic" for h in hits)
    return times


# The TTL variants (issue 34): every item put with a TTL of an hour (it outlives the run, so
# the operations are the same), every get and search refreshing it (LangGraph's default,
# refresh_on_read). What is measured is the cost of keeping and refreshing expiries.
STORE_TTL: dict[str, Any] = {"default_ttl": 60.0, "refresh_on_read": True}


@contextmanager
def ctxstore_store(
    args: argparse.Namespace, work: Path, ttl: dict[str, Any] | None = None
) -> Iterator[tuple[Any, Callable[[], int]]]:
    from ctxstore.langgraph import CtxstoreStore

    with ctxstore_backend(args, work) as (saver, _, addr):
        with CtxstoreStore.from_addr(addr, name="bench", ttl=ttl) as store:  # type: ignore[arg-type]
            yield store, lambda: dir_bytes(work / "ctxstore-data")[0]


@contextmanager
def ctxstore_ttl_store(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], int]]]:
    with ctxstore_store(args, work, STORE_TTL) as found:
        yield found


@contextmanager
def postgres_ttl_store(
    args: argparse.Namespace, work: Path
) -> Iterator[tuple[Any, Callable[[], int]]]:
    with postgres_store(args, work, STORE_TTL) as found:
        yield found


@contextmanager
def postgres_store(
    args: argparse.Namespace, work: Path, ttl: dict[str, Any] | None = None
) -> Iterator[tuple[Any, Callable[[], int]]]:
    import psycopg
    from langgraph.store.postgres import PostgresStore

    db = f"lgstore_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {db}")
    dsn = args.pg_dsn.rsplit("/", 1)[0] + "/" + db
    try:
        with PostgresStore.from_conn_string(dsn, ttl=ttl) as store:  # type: ignore[arg-type]
            store.setup()
            with psycopg.connect(dsn, autocommit=True) as probe:

                def size() -> int:
                    probe.execute("CHECKPOINT")
                    return pg_tables_bytes(probe)

                yield store, size
    finally:
        with psycopg.connect(args.pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db}")


STORES = {
    "ctxstore": ctxstore_store,
    "postgres": postgres_store,
    "ctxstore-ttl": ctxstore_ttl_store,
    "postgres-ttl": postgres_ttl_store,
}


def store_main(args: argparse.Namespace) -> int:
    backends = [b for b in args.backends.split(",") if b in STORES]
    for backend in [b for b in backends if b.startswith("postgres")]:
        if not args.pg_dsn:
            print(f"{backend}: no --pg-dsn (or PG_DSN); skipped", file=sys.stderr)
            backends.remove(backend)
    report: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(args),
        "scenario": "store",
        "ttl": STORE_TTL,
        "items": args.items,
        "namespaces": args.namespaces,
        "message_bytes": args.message_bytes,
        "runs": args.runs,
        "results": {},
    }
    for run in range(args.runs):
        for backend in backends:
            work = Path(tempfile.mkdtemp(prefix=f"lgstore-{backend}-", dir=args.dir))
            try:
                with STORES[backend](args, work) as (store, size):
                    times = store_workload(store, args, seed=run)
                    times_bytes = size()
            finally:
                shutil.rmtree(work, ignore_errors=True)
            report["results"].setdefault(backend, []).append({**times, "bytes": times_bytes})
            print(
                f"run {run + 1}/{args.runs} {backend}: put p50 "
                f"{statistics.median(times['put']) * 1e3:.2f} ms, {times_bytes:,} bytes",
                file=sys.stderr,
            )
    print(
        f"\nstore: {args.items} puts (~{args.message_bytes} B, a fifth the same text), "
        f"{args.items} gets, {args.namespaces} searches; median of {args.runs} runs "
        "(p50/p99 within a run)\n"
    )
    print("| store | put p50 | put p99 | get p50 | get p99 | search p50 | search p99 | bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for backend, runs in report["results"].items():
        cells = []
        for op in ("put", "get", "search"):
            for q in (0.50, 0.99):
                cells.append(f"{statistics.median(pct(r[op], q) for r in runs) * 1e3:.2f} ms")
        size = int(statistics.median(r["bytes"] for r in runs))
        print(f"| {backend} | " + " | ".join(cells) + f" | {size:,} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(
        "\n" + json.dumps({"versions": report["versions"], "machine": report["machine"]}, indent=1)
    )
    return 0


def versions(args: argparse.Namespace) -> dict[str, str]:
    found = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for dist in (
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "psycopg",
        "ctxstore",
    ):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "-"
    try:
        found["ctxstore-server"] = subprocess.run(
            [args.server_bin, "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        found["ctxstore-server"] = "-"
    if args.pg_dsn:
        try:
            import psycopg

            with psycopg.connect(args.pg_dsn) as conn:
                found["postgres"] = str(conn.execute("SHOW server_version").fetchone()[0])
        except Exception as error:  # noqa: BLE001 - reported, not fatal
            found["postgres"] = f"- ({error})"
    return found


def machine() -> dict[str, str]:
    cpu = "-"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "kernel": platform.release(),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--server-bin",
        default=os.environ.get("CTXSTORE_SERVER_BIN", "target/release/ctxstore-server"),
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra ctxstore-server argument (repeatable)",
    )
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("PG_DSN"),
        help="an admin DSN of a PostgreSQL server (CREATE DATABASE)",
    )
    parser.add_argument("--backends", default="memory,ctxstore,sqlite,postgres")
    parser.add_argument("--supersteps", type=int, default=200)
    parser.add_argument(
        "--state",
        choices=["messages", "delta"],
        default="messages",
        help="the message list as LangGraph's MessagesState, or in a DeltaChannel",
    )
    parser.add_argument("--snapshot-frequency", type=int, default=100, help="with --state delta")
    parser.add_argument(
        "--scenario",
        choices=["graph", "store"],
        default="graph",
        help="graph: the agent loop on each checkpointer; store: CtxstoreStore vs PostgresStore",
    )
    parser.add_argument("--items", type=int, default=2000, help="store scenario: items put")
    parser.add_argument("--namespaces", type=int, default=200, help="store scenario")
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--gets", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=os.environ.get("CTXSTORE_BENCH_DIR", "/var/tmp"))
    parser.add_argument("--json", help="write every sample and figure here")
    parser.add_argument(
        "--api",
        choices=["sync", "async"],
        default="sync",
        help="graph.stream + SqliteSaver/PostgresSaver, or graph.astream + AsyncSqliteSaver/"
        "AsyncPostgresSaver (ctxstore: the same saver, its a* methods)",
    )
    args = parser.parse_args()

    if args.scenario == "store":
        return store_main(args)
    backends = [b for b in args.backends.split(",") if b]
    if "postgres" in backends and not args.pg_dsn:
        print("postgres: no --pg-dsn (or PG_DSN); skipped", file=sys.stderr)
        backends.remove("postgres")
    report: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(args),
        "api": args.api,
        "state": args.state,
        "snapshot_frequency": args.snapshot_frequency if args.state == "delta" else None,
        "supersteps": args.supersteps,
        "message_bytes": args.message_bytes,
        "runs": args.runs,
        "results": {},
    }
    for run in range(args.runs):
        for backend in backends:  # interleaved, so a noisy minute hits every backend alike
            work = Path(tempfile.mkdtemp(prefix=f"lgbench-{backend}-", dir=args.dir))
            try:
                load = os.getloadavg()[0]
                result = run_backend(backend, args, work, seed=run)
                result["load_1m"] = [load, os.getloadavg()[0]]
            finally:
                shutil.rmtree(work, ignore_errors=True)
            report["results"].setdefault(backend, []).append(result)
            print(
                f"run {run + 1}/{args.runs} {backend}: superstep p50 "
                f"{statistics.median(result['step_s']) * 1e3:.2f} ms, {result['bytes']:,} bytes "
                f"(load {result['load_1m'][0]:.2f} -> {result['load_1m'][1]:.2f})",
                file=sys.stderr,
            )

    rows = []
    for backend, runs in report["results"].items():
        step50 = statistics.median(pct(r["step_s"], 0.50) for r in runs)
        step99 = statistics.median(pct(r["step_s"], 0.99) for r in runs)
        get50 = statistics.median(pct(r["get_state_s"], 0.50) for r in runs)
        get99 = statistics.median(pct(r["get_state_s"], 0.99) for r in runs)
        total = statistics.median(r["total_s"] for r in runs)
        size = int(statistics.median(r["bytes"] for r in runs))
        rows.append((backend, step50, step99, get50, get99, total, size, runs[0]))
        report.setdefault("summary", {})[backend] = {
            "superstep_p50_ms": step50 * 1e3,
            "superstep_p99_ms": step99 * 1e3,
            "get_state_p50_ms": get50 * 1e3,
            "get_state_p99_ms": get99 * 1e3,
            "run_s": total,
            "bytes": size,
            **{k: v for k, v in runs[0].items() if k.endswith("bytes") and k != "bytes"},
        }
    state = (
        "MessagesState"
        if args.state == "messages"
        else (f"DeltaChannel messages, snapshot every {args.snapshot_frequency}")
    )
    print(
        f"\n{args.api} API, {args.supersteps} supersteps, ~{args.message_bytes} B message each, "
        f"{state}, median of {args.runs} runs (p50/p99 within a run)\n"
    )
    print(
        "| checkpointer | superstep p50 | superstep p99 | get_state p50 | get_state p99 | whole run | bytes on disk |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for backend, step50, step99, get50, get99, total, size, _ in rows:
        print(
            f"| {backend} | {step50 * 1e3:.2f} ms | {step99 * 1e3:.2f} ms | {get50 * 1e3:.2f} ms | "
            f"{get99 * 1e3:.2f} ms | {total:.2f} s | {size:,} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(
        "\n" + json.dumps({"versions": report["versions"], "machine": report["machine"]}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
