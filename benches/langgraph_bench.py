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


def build_graph(checkpointer: Any, supersteps: int, message_bytes: int, seed: int) -> Any:
    rng = random.Random(seed)

    def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
        text = chat_text(rng, message_bytes)
        return {"messages": [AIMessage(content=text, id=str(uuid.UUID(int=rng.getrandbits(128))))]}

    def route(state: MessagesState) -> str:
        return END if len(state["messages"]) > supersteps else "agent"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["agent", END])
    return builder.compile(checkpointer=checkpointer)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def dir_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under ``path``."""
    apparent = allocated = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def run_graph(checkpointer: Any, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    graph = build_graph(checkpointer, args.supersteps, args.message_bytes, seed)
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
    graph = build_graph(checkpointer, args.supersteps, args.message_bytes, seed)
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
        elif backend == "ctxstore":

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
            return {"bytes": apparent, "allocated_bytes": allocated}

        try:
            yield saver, size, addr
        finally:
            saver.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


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
                    tables = probe.execute(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.relkind = 'r' AND n.nspname = 'public'"
                    ).fetchone()[0]
                    return {
                        "bytes": int(tables),
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
    "sqlite": sqlite_backend,
    "postgres": postgres_backend,
}


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

    backends = [b for b in args.backends.split(",") if b]
    if "postgres" in backends and not args.pg_dsn:
        print("postgres: no --pg-dsn (or PG_DSN); skipped", file=sys.stderr)
        backends.remove("postgres")
    report: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(args),
        "api": args.api,
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
    print(
        f"\n{args.api} API, {args.supersteps} supersteps, ~{args.message_bytes} B message each, "
        f"median of {args.runs} runs (p50/p99 within a run)\n"
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
