"""A client given several addresses follows the primary across a failover (decision 0031 §11),
in both shells, against real servers on a ``file://`` replica: a primary (``--replica-lease
4s --replicate-interval 100ms``) and an ``--auto-promote`` standby, the standby listed first.
The client connects to the primary; the primary is paused with an unkeyed append in flight,
then killed (SIGKILL): the unkeyed append raises ``OutcomeUnknown`` (never a silent retry);
keyed appends are sent again on the new primary and land exactly once (read back: each key
once, in order); a read after the kill is answered by the new primary. A list of servers none
of which takes writes raises ``NoPrimary`` within ``failover_timeout``; one address asks no
ROLE (a plain server, as before).

With ``idempotency="auto"``, against three servers (a primary and two ``--auto-promote``
standbys, one of which takes over, the other following it): appends without keys in flight
when the primary is killed (``append``, ``append_turns``, ``append_by_hash``) are given keys
of their own, sent again with them on the new primary and land exactly once; none raises
``OutcomeUnknown``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import ctxstore
from ctxstore.errors import NoPrimary, OutcomeUnknown
from ctxstore.types import Appended, TurnSpec, blob_hash

from conftest import ServerProcess, new_server

LEASE = ["--replicate-interval", "100ms", "--replica-lease", "4s"]


def _replicated(
    tmp_root: Path, name: str, standbys: int = 1
) -> tuple[ServerProcess, list[ServerProcess], int]:
    """A primary with a context holding one remote write, and ``standbys`` caught-up
    ``--auto-promote`` standbys; the context."""
    url = f"file://{tmp_root / f'replica-failover-{name}'}"
    primary = new_server(tmp_root, extra_args=["--replicate-to", url, *LEASE])
    with ctxstore.Client(primary.addr) as first:
        context = first.create_context().context_id
        head = first.append(context, b"before", key="key-000", durability="remote").turn_id
    started: list[ServerProcess] = []
    for _ in range(standbys):
        standby = new_server(tmp_root, extra_args=["--follow", url, "--auto-promote", *LEASE])
        started.append(standby)
        with ctxstore.Client(standby.addr) as follower:
            deadline = time.monotonic() + 30
            while follower.head(context).head_turn_id != head:
                assert time.monotonic() < deadline, standby.log_text()
                time.sleep(0.05)
    return primary, started, context


def _pair(tmp_root: Path, name: str) -> tuple[ServerProcess, ServerProcess, int]:
    """A primary with a context holding one remote write, and a caught-up standby; the
    context."""
    primary, standbys, context = _replicated(tmp_root, name)
    return primary, standbys[0], context


def _keys(client: ctxstore.Client, context: int) -> list[str]:
    turns = list(client.iter_turn_log(context))
    turns.reverse()
    return [turn.key.decode() for turn in turns if turn.key is not None]


def test_the_blocking_client_follows_the_primary_through_a_kill(tmp_root: Path) -> None:
    primary, standby, context = _pair(tmp_root, "sync")
    try:
        client = ctxstore.Client(f"{standby.addr},{primary.addr}", failover_timeout=30)
        assert client.follows_primary
        assert client.role().role == "primary"
        assert client.addr == primary.addr
        client.append(context, b"keyed 1", key="key-001", durability="remote")
        primary.pause()
        outcome: list[BaseException | None] = []

        def unkeyed() -> None:
            try:
                client.append(context, b"unkeyed in flight", durability="remote")
                outcome.append(None)
            except BaseException as error:  # noqa: BLE001 - what the thread saw
                outcome.append(error)

        thread = threading.Thread(target=unkeyed)
        thread.start()
        time.sleep(0.3)
        primary.kill()
        thread.join(timeout=60)
        assert outcome and isinstance(outcome[0], OutcomeUnknown), outcome
        # Keyed: sent again on the new primary, once.
        for i in range(2, 6):
            client.append(context, f"keyed {i}".encode(), key=f"key-{i:03}", durability="remote")
        again = client.append(context, b"keyed 5", key="key-005", durability="remote")
        assert again.existing
        assert client.addr == standby.addr
        assert client.role().role == "primary"
        assert _keys(client, context) == [f"key-{i:03}" for i in range(6)]
        client.close()
    finally:
        primary.kill()
        standby.stop()


async def test_the_async_client_follows_the_primary_through_a_kill(tmp_root: Path) -> None:
    primary, standby, context = _pair(tmp_root, "async")
    try:
        client = await ctxstore.AsyncClient.connect([standby.addr, primary.addr])
        assert (await client.role()).role == "primary"
        primary.pause()
        unkeyed = asyncio.ensure_future(
            client.append(context, b"unkeyed in flight", durability="remote")
        )
        keyed = asyncio.ensure_future(
            client.append_turns(context, [TurnSpec(b"keyed 1", key="key-001")], durability="remote")
        )
        await asyncio.sleep(0.3)
        primary.kill()
        with pytest.raises(OutcomeUnknown):
            await unkeyed
        await keyed
        head = await client.head(context)  # a read, answered by the new primary
        assert head.head_turn_id > 0
        assert client.addr == standby.addr
        await client.append(context, b"keyed 2", key="key-002", durability="remote")
        turns = [turn async for turn in client.iter_turn_log(context)]
        turns.reverse()
        keys = [turn.key.decode() for turn in turns if turn.key is not None]
        assert keys == [f"key-{i:03}" for i in range(3)]
        await client.close()
    finally:
        primary.kill()
        standby.stop()


def test_no_primary_in_the_list_and_one_address_as_before(server: ServerProcess) -> None:
    # A server without replication takes writes: one address, or the list of it twice.
    with ctxstore.Client(server.addr) as one:
        assert not one.follows_primary
        one.ping()
    with ctxstore.Client([server.addr, server.addr]) as two:
        assert two.follows_primary
        assert two.addrs == [server.addr, server.addr]
        two.ping()
    # Nothing listens on these: NoPrimary once the failover timeout passes.
    started = time.monotonic()
    with pytest.raises(NoPrimary):
        ctxstore.Client("127.0.0.1:1,127.0.0.1:2", failover_timeout=0.5)
    assert time.monotonic() - started < 10


def _landed_once(turns: list[ctxstore.TurnInfo], appended: list[Appended], count: int) -> None:
    """The context holds the turn before the kill and ``count`` turns more, each with a key
    of its own made by ``idempotency="auto"`` and each one an append answered: nothing lost,
    nothing twice."""
    assert [turn.key for turn in turns[:1]] == [b"key-000"]
    later = turns[1:]
    assert len(later) == count, [turn.key for turn in later]
    keys = [turn.key or b"" for turn in later]
    assert all(key.startswith(b"ctxstore-auto:") and len(key) == 14 + 32 for key in keys), keys
    assert len(set(keys)) == count
    assert sorted(turn.turn_id for turn in later) == sorted(a.turn_id for a in appended)


def test_auto_keys_land_exactly_once_across_a_kill(tmp_root: Path) -> None:
    primary, standbys, context = _replicated(tmp_root, "auto-sync", standbys=2)
    members = [*standbys, primary]
    try:
        with pytest.raises(ValueError, match="idempotency"):
            ctxstore.Client(primary.addr, idempotency="always", lazy=True)  # type: ignore[arg-type]
        client = ctxstore.Client(
            [member.addr for member in members], failover_timeout=30, idempotency="auto"
        )
        assert client.addr == primary.addr
        stored = blob_hash(b"by hash")
        client.append(client.create_context().context_id, b"by hash")  # the blob, stored
        before = client.append(context, b"auto 0", durability="remote")
        primary.pause()
        results: list[Appended] = []
        failures: list[BaseException] = []
        lock = threading.Lock()

        def write(index: int) -> None:
            try:
                if index % 3 == 0:
                    got = [client.append(context, f"auto {index}".encode(), durability="remote")]
                elif index % 3 == 1:
                    got = client.append_turns(
                        context,
                        [TurnSpec(f"auto {index}a".encode()), TurnSpec(f"auto {index}b".encode())],
                        durability="remote",
                    )
                else:
                    got = [client.append_by_hash(context, stored, durability="remote")]
                with lock:
                    results.extend(got)
            except BaseException as error:  # noqa: BLE001 - what the thread saw
                with lock:
                    failures.append(error)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(1, 7)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        primary.kill()
        for thread in threads:
            thread.join(timeout=90)
        assert not failures, failures
        assert not any(isinstance(error, OutcomeUnknown) for error in failures)
        assert client.addr in {standby.addr for standby in standbys}
        assert client.role().role == "primary"
        after = client.append(context, b"auto after", durability="remote")
        turns = list(client.iter_turn_log(context))
        turns.reverse()
        # "auto 0", then 2 appends, 2 batches of 2 and 2 by hash in flight, then "auto after".
        _landed_once(turns, [before, *results, after], 1 + 8 + 1)
        client.close()
    finally:
        primary.kill()
        for standby in standbys:
            standby.stop()


async def test_the_async_client_auto_keys_land_exactly_once_across_a_kill(
    tmp_root: Path,
) -> None:
    primary, standbys, context = _replicated(tmp_root, "auto-async", standbys=2)
    members = [*standbys, primary]
    try:
        client = await ctxstore.AsyncClient.connect(
            [member.addr for member in members], idempotency="auto"
        )
        assert client.addr == primary.addr
        primary.pause()
        writes = [
            asyncio.ensure_future(client.append(context, f"auto {i}".encode(), durability="remote"))
            for i in range(3)
        ]
        batch = asyncio.ensure_future(
            client.append_turns(
                context, [TurnSpec(b"auto batch a"), TurnSpec(b"auto batch b")], durability="remote"
            )
        )
        await asyncio.sleep(0.3)
        primary.kill()
        outcomes = await asyncio.gather(*writes, batch, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        assert not failures, failures
        appended: list[Appended] = []
        for outcome in outcomes:
            assert not isinstance(outcome, BaseException)
            appended.extend(outcome if isinstance(outcome, list) else [outcome])
        assert client.addr in {standby.addr for standby in standbys}
        turns = [turn async for turn in client.iter_turn_log(context)]
        turns.reverse()
        _landed_once(turns, appended, 3 + 2)
        await client.close()
    finally:
        primary.kill()
        for standby in standbys:
            standby.stop()
