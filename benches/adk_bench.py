#!/usr/bin/env python3
"""Google ADK session services side by side: ctxstore (CtxstoreSessionService) vs ADK's
DatabaseSessionService on PostgreSQL and on SQLite, the same operations, in one run.

Per backend, on a fresh store:

- ``append_event``: APPENDS events (~300 bytes of text each; every 10th carries a session
  state delta, the rest none) appended one after the other to one session, each timed:
  p50 / p99 / mean. Those events make the long session of the next two figures.
- ``get_session`` of that session (APPENDS events): median of GETS_FULL calls;
- ``get_session(num_recent_events=20)`` of it: median of GETS_RECENT calls;
- ``list_sessions`` of one user with SESSIONS sessions (made beforehand, 16 at a time, not
  timed): median of LISTS calls.

    benches/adk_bench.sh                      # installs what is missing, runs, prints
    python benches/adk_bench.py --server-bin /work/bin/release/ctxstore-server \\
        --pg-url postgresql+asyncpg://bench@127.0.0.1:55434/postgres [--json out.json]

Durability is alike: ctxstore fsyncs every acknowledged write; PostgreSQL runs with
``synchronous_commit=on``; SQLite is what DatabaseSessionService makes of a
``sqlite+aiosqlite`` URL (SQLite's defaults: rollback journal, ``synchronous=FULL``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

from ctxstore.adk import CtxstoreSessionService

TEXT = (
    "The assistant looked the order up: three items shipped on Tuesday, one back-ordered "
    "until the 14th. It offered a partial refund or to wait; the user chose to wait and asked "
    "for a tracking link, which the tool returned. "
)


def event(n: int) -> Event:
    delta = {"step": n, "last_tool": "lookup_order"} if n % 10 == 0 else {}
    return Event(
        author="user" if n % 2 else "assistant",
        invocation_id=f"inv-{n // 4}",
        content=types.Content(role="model", parts=[types.Part(text=f"{n}: {TEXT}")]),
        actions=EventActions(state_delta=delta),
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(fn: Callable[[], Awaitable[Any]], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


async def bench(service: BaseSessionService, args: argparse.Namespace) -> dict[str, Any]:
    app = "bench"
    session = await service.create_session(app_name=app, user_id="long", session_id="long")
    appends = []
    for n in range(args.appends):
        e = event(n)
        start = time.perf_counter()
        await service.append_event(session, e)
        appends.append((time.perf_counter() - start) * 1000)

    async def get_full() -> None:
        got = await service.get_session(app_name=app, user_id="long", session_id="long")
        assert got is not None and len(got.events) == args.appends, len(got.events)  # type: ignore[union-attr]

    async def get_recent() -> None:
        got = await service.get_session(
            app_name=app, user_id="long", session_id="long",
            config=GetSessionConfig(num_recent_events=20),
        )
        assert got is not None and len(got.events) == 20

    full = await timed(get_full, args.gets_full)
    recent = await timed(get_recent, args.gets_recent)

    gate = asyncio.Semaphore(16)

    async def make(i: int) -> None:
        async with gate:
            await service.create_session(
                app_name=app, user_id="many", session_id=f"s-{i:05d}", state={"i": i}
            )

    start = time.perf_counter()
    await asyncio.gather(*(make(i) for i in range(args.sessions)))
    made_s = time.perf_counter() - start

    async def list_all() -> None:
        listed = await service.list_sessions(app_name=app, user_id="many")
        assert len(listed.sessions) == args.sessions, len(listed.sessions)

    lists = await timed(list_all, args.lists)
    return {
        "append_event_ms": {
            "p50": quantile(appends, 0.5),
            "p99": quantile(appends, 0.99),
            "mean": statistics.fmean(appends),
            "count": len(appends),
        },
        "get_session_all_ms": {"median": statistics.median(full), "runs": len(full)},
        "get_session_recent20_ms": {"median": statistics.median(recent), "runs": len(recent)},
        "list_sessions_ms": {"median": statistics.median(lists), "runs": len(lists)},
        "create_sessions_s": made_s,
    }


def start_ctxstore(binary: str, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = work / "ctxstore.ready"
    process = subprocess.Popen(
        [binary, "--data", str(work / "ctxstore"), "--listen", "127.0.0.1:0",
         "--ready-file", str(ready), "--no-preallocate"],
        stdout=subprocess.DEVNULL, stderr=open(work / "ctxstore.log", "wb"),
    )
    for _ in range(200):
        if ready.exists() and ready.read_text().strip():
            return process, ready.read_text().strip()
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"ctxstore-server did not start: {(work / 'ctxstore.log').read_text()}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="adk-bench-", dir=args.dir))
    results: dict[str, Any] = {}
    try:
        for backend in args.backends:
            print(f"== {backend}", file=sys.stderr)
            if backend == "ctxstore":
                process, addr = start_ctxstore(args.server_bin, work)
                try:
                    async with CtxstoreSessionService(addr) as service:
                        results[backend] = await bench(service, args)
                finally:
                    process.terminate()
                    process.wait(timeout=30)
            elif backend == "postgres":
                service = DatabaseSessionService(db_url=args.pg_url)
                try:
                    results[backend] = await bench(service, args)
                finally:
                    await service.close()
            elif backend == "sqlite":
                service = DatabaseSessionService(
                    db_url=f"sqlite+aiosqlite:///{work / 'adk.sqlite'}"
                )
                try:
                    results[backend] = await bench(service, args)
                finally:
                    await service.close()
            print(json.dumps(results[backend]), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def table(results: dict[str, Any]) -> str:
    rows = [
        ("append_event p50 (ms)", lambda r: r["append_event_ms"]["p50"]),
        ("append_event p99 (ms)", lambda r: r["append_event_ms"]["p99"]),
        ("get_session, all events (ms)", lambda r: r["get_session_all_ms"]["median"]),
        ("get_session, num_recent_events=20 (ms)", lambda r: r["get_session_recent20_ms"]["median"]),
        ("list_sessions (ms)", lambda r: r["list_sessions_ms"]["median"]),
    ]
    names = list(results)
    head = "| | " + " | ".join(names) + " | " + " | ".join(
        f"{n}/ctxstore" for n in names if n != "ctxstore"
    ) + " |"
    lines = [head, "|" + "---|" * (1 + len(names) + len(names) - 1)]
    for label, get in rows:
        values = {n: get(results[n]) for n in names}
        ratios = [
            f"{values[n] / values['ctxstore']:.1f}×" for n in names if n != "ctxstore"
        ] if "ctxstore" in values else []
        lines.append(
            f"| {label} | " + " | ".join(f"{values[n]:.2f}" for n in names) + " | "
            + " | ".join(ratios) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-bin", default=os.environ.get("CTXSTORE_SERVER_BIN", ""))
    parser.add_argument("--pg-url", default="")
    parser.add_argument("--backends", nargs="+", default=["ctxstore", "postgres", "sqlite"])
    parser.add_argument("--appends", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--gets-full", type=int, default=5)
    parser.add_argument("--gets-recent", type=int, default=50)
    parser.add_argument("--lists", type=int, default=5)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if "postgres" in args.backends and not args.pg_url:
        parser.error("--pg-url is needed for the postgres backend")
    results = asyncio.run(run(args))
    results["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_after": open("/proc/loadavg").read().split()[:3],
    }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(table({k: v for k, v in results.items() if k != "machine"}))


if __name__ == "__main__":
    main()
