"""replication_stats() against a real server (issue 31): a server shipping to a ``file://``
replica says what shipped (role, state, target, epoch, generation, records, lag, backlog,
failures by kind), in both clients; a server that does not replicate says ``off``; a waiting
standby's state (issue 44) reads as ``waiting``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctxstore
from ctxstore import _protocol as p
from ctxstore.aio import AsyncClient

from conftest import ServerProcess, new_server


@pytest.fixture()
def replicating(tmp_root: Path) -> Iterator[tuple[ServerProcess, str]]:
    replica = tmp_root / f"replica-{time.monotonic_ns()}"
    url = f"file://{replica}"
    process = new_server(
        tmp_root, extra_args=["--replicate-to", url, "--replicate-interval", "50ms"]
    )
    yield process, url
    process.stop()


def shipped(client: ctxstore.Client, records: int) -> ctxstore.ReplicationStats:
    """The figures once ``records`` records shipped and nothing waits."""
    deadline = time.monotonic() + 30
    while True:
        stats = client.replication_stats()
        if stats.records == records and stats.lag_bytes == 0:
            return stats
        assert time.monotonic() < deadline, f"never shipped: {stats}"
        time.sleep(0.05)


def test_a_replicating_server_says_what_shipped(replicating: tuple[ServerProcess, str]) -> None:
    process, url = replicating
    with ctxstore.Client(process.addr) as client:
        context = client.create_context().context_id
        client.append(context, b"a turn worth shipping")
        stats = shipped(client, 2)
    assert (stats.role, stats.state, stats.reason) == ("primary", "shipping", "")
    assert stats.target == url
    assert (stats.epoch, stats.generation) == (1, 1)
    assert stats.seq >= 1 and stats.objects_total >= stats.seq
    assert stats.bytes_total >= 2 * 128
    assert stats.records_unix_ms > 0 and stats.last_success_unix_ms > 0
    assert (stats.lag_ms, stats.backlog_objects) == (0, 0)
    assert stats.segment_bytes_max == 64 << 20
    assert not stats.promoting and stats.primary == ""
    assert stats.failures["store"] == 0 and stats.failures["fenced"] == 0
    assert len(stats.failures) >= 12


async def test_the_async_client_reads_the_same_figures(
    replicating: tuple[ServerProcess, str],
) -> None:
    process, url = replicating
    async with AsyncClient(process.addr) as client:
        context = (await client.create_context()).context_id
        await client.append(context, b"one")
        deadline = time.monotonic() + 30
        while True:
            stats = await client.replication_stats()
            if stats.records == 2 and stats.lag_bytes == 0:
                break
            assert time.monotonic() < deadline, f"never shipped: {stats}"
            await asyncio.sleep(0.05)
    assert (stats.role, stats.state, stats.target) == ("primary", "shipping", url)


def test_a_server_that_does_not_replicate_says_off(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr) as client:
        stats = client.replication_stats()
    assert (stats.role, stats.state, stats.target, stats.records) == ("off", "off", "", 0)
    assert stats.failures == {}


def test_a_waiting_standby_reads_as_waiting() -> None:
    """State 7 is a standby whose replica has no restore point yet (the server's test of it is
    server/tests/standby_waits.rs); 8 is no state."""
    waiting = p.ReplicationStatsResponse(
        role=2,
        state=7,
        promoting=False,
        generation=0,
        epoch=0,
        seq=0,
        records=0,
        records_unix_ms=0,
        lag_ms=0,
        lag_bytes=0,
        objects_total=0,
        bytes_total=0,
        last_success_unix_ms=0,
        backlog_objects=0,
        segment_bytes_max=0,
        target="s3://agents/ctx",
        primary="",
        reason="s3://agents/ctx holds no replica: waiting for the primary's first restore point",
        failures=(),
    )
    msg_type = p.MessageType.REPLICATION_STATS.response_type
    frame = p.encode_response(1, waiting)
    decoded = p.decode_response(msg_type, frame[16:])
    assert decoded == waiting
    assert p.REPLICATION_STATES[decoded.state] == "waiting"
    body = bytearray(frame[16:])
    body[1] = 8
    with pytest.raises(ctxstore.ProtocolError, match="0..=7"):
        p.decode_response(msg_type, bytes(body))
