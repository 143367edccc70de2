"""Garbage collection (issue 15) through both clients: the GC and STATS_EX frames (golden
vectors, strict decoding), ``gc()`` against a real ctxstore-server (a deleted context's turns
are NotFound afterwards, a fork keeps what it reaches, ``stats()`` counts the collection),
a version-1 connection, and a version-2 server older than STATS_EX."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctxstore
from ctxstore import _protocol as p

from conftest import GOLDEN_V2, ServerProcess, new_server
from fakes import FakeServer, hello_then_answer


def golden(name: str) -> bytes:
    """A frame of golden-v2.txt by name."""
    for line in GOLDEN_V2.read_text().splitlines():
        if line.startswith(f"{name} |"):
            return bytes.fromhex(line.split("|")[1].strip())
    pytest.fail(f"no golden frame {name}")


STATS = p.StatsResponse(1000, 10, 800, 10 << 20, 8 << 20, 4 << 20, 200, 2, 5000, 1, 60_000, False)


def test_golden_gc_and_stats_ex_frames_decode_and_reencode() -> None:
    expected: dict[str, tuple[int, p.Message]] = {
        "gc": (23, p.Gc()),
        "gc_done_response": (
            23,
            p.GcDoneResponse(1500, 1200, 12 << 20, 3, 1 << 30, 2 << 20, 4321),
        ),
        "stats_ex": (24, p.StatsEx()),
        "stats_ex_response": (24, p.StatsExResponse(STATS, 3 << 20, 1 << 20, 2, 5 << 20)),
    }
    for name, (req_id, message) in expected.items():
        frame = golden(name)
        header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
        body = frame[p.HEADER_BYTES :]
        assert (header.req_id, header.flags, header.len) == (req_id, 0, len(body))
        if isinstance(message, p.Request):
            assert message.required_version == 2
            assert p.decode_request(header.msg_type, body) == message
            assert b"".join(p.encode_request(req_id, message)) == frame
        else:
            assert isinstance(message, p.Response)
            assert p.decode_response(header.msg_type, body) == message
            assert p.encode_response(req_id, message) == frame
    assert len(golden("gc_done_response")) == p.HEADER_BYTES + 56
    assert len(golden("stats_ex_response")) == p.HEADER_BYTES + 128


def test_gc_frames_refuse_what_their_layout_forbids() -> None:
    with pytest.raises(p.ProtocolError, match="gc_flags"):
        p.decode_request(p.MessageType.GC, (1).to_bytes(4, "little"))
    with pytest.raises(p.ProtocolError):
        p.decode_request(p.MessageType.GC, b"")
    with pytest.raises(p.ProtocolError):
        p.decode_request(p.MessageType.STATS_EX, b"\x00")
    for name, msg_type in (
        ("gc_done_response", p.MessageType.GC.response_type),
        ("stats_ex_response", p.MessageType.STATS_EX.response_type),
    ):
        body = golden(name)[p.HEADER_BYTES :]
        with pytest.raises(p.ProtocolError):
            p.decode_response(msg_type, body + b"\x00")
        with pytest.raises(p.ProtocolError):
            p.decode_response(msg_type, body[:-1])
    done = bytearray(golden("gc_done_response")[p.HEADER_BYTES :])
    done[28] = 1  # reserved after packs_compacted
    with pytest.raises(p.ProtocolError, match="reserved"):
        p.decode_response(p.MessageType.GC.response_type, bytes(done))
    stats_ex = bytearray(golden("stats_ex_response")[p.HEADER_BYTES :])
    stats_ex[88] = 2  # read_only of the STATS part
    with pytest.raises(p.ProtocolError, match="read_only"):
        p.decode_response(p.MessageType.STATS_EX.response_type, bytes(stats_ex))


@pytest.fixture()
def gc_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server of its own (a collection is store-wide): collections only on request, every
    pack with an unreachable record compacted, and every payload one blob (``--chunk-threshold
    off``: the counts below are of payloads, not of the chunks the server would cut them
    into, decision 0013)."""
    process = new_server(
        tmp_root,
        extra_args=["--gc-interval", "off", "--gc-pack-dead-percent", "1"]
        + ["--chunk-threshold", "off"],
    )
    yield process
    process.stop()


def unique(prefix: str = "gc") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_gc_collects_a_deleted_contexts_turns_and_stats_count_it(
    gc_server: ServerProcess,
) -> None:
    with ctxstore.Client(gc_server.addr, timeout=20) as client:
        before = client.stats()
        assert (before.live_bytes, before.dead_bytes) == (0, 0)
        assert (before.gc_runs, before.bytes_reclaimed_total) == (0, 0)

        doomed, kept = unique(), unique()
        client.open_context(doomed)
        client.open_context(kept)
        payload = {i: os.urandom(20_000) for i in range(5)}
        gone = [client.append(doomed, payload[i]).turn for i in range(3)]
        kept_turns = [client.append(kept, payload[i]).turn for i in (3, 4)]
        # A fork of the doomed context's first turn keeps that turn (and only that one).
        fork = client.fork(gone[0].turn_id)
        client.delete_context(doomed)

        report = client.gc()
        assert isinstance(report, ctxstore.GcReport)
        assert (report.turns_dead, report.blobs_dead) == (2, 2), report
        assert report.packs_compacted >= 1 and report.bytes_reclaimed >= 40_000, report
        assert report.live_bytes >= 60_000 and report.dead_bytes == 0, report
        assert report.duration_ms >= 0

        for turn in gone[1:]:
            with pytest.raises(ctxstore.NotFound):
                client.get_turn(turn.turn_id)
            assert client.has_blobs([turn.payload_hash]) == [False]
        survivor = client.get_turn(gone[0].turn_id)
        assert (survivor.turn_id, survivor.payload_hash) == (gone[0].turn_id, gone[0].payload_hash)
        assert [t.payload for t in client.last(fork.context_id, 10, payloads=True)] == [payload[0]]
        assert [t.turn_id for t in client.last(kept, 10)] == [t.turn_id for t in kept_turns]

        after = client.stats()
        assert after.gc_runs == 1
        assert after.bytes_reclaimed_total == report.bytes_reclaimed
        assert (after.live_bytes, after.dead_bytes) == (report.live_bytes, report.dead_bytes)

        again = client.gc()
        assert (again.turns_dead, again.blobs_dead) == (0, 0)
        assert client.stats().gc_runs == 2


async def test_the_async_client_collects_and_counts(gc_server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(gc_server.addr, timeout=20) as client:
        name = unique("a")
        await client.open_context(name)
        turns = [(await client.append(name, os.urandom(5_000))).turn for _ in range(3)]
        await client.delete_context(name)
        report = await client.gc()
        assert (report.turns_dead, report.blobs_dead) == (3, 3), report
        for turn in turns:
            with pytest.raises(ctxstore.NotFound):
                await client.get_turn(turn.turn_id)
        stats = await client.stats()
        assert stats.gc_runs == 1
        assert stats.bytes_reclaimed_total == report.bytes_reclaimed


def test_a_version_1_connection_refuses_gc_and_has_no_gc_stats(
    gc_server: ServerProcess,
) -> None:
    class V1Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 1)

    with V1Client(gc_server.addr) as old:
        assert old.server_info().version == 1
        with pytest.raises(ctxstore.NotSupported, match="version 2"):
            old.gc()
        stats = old.stats()
        assert stats.turns >= 0
        assert (stats.live_bytes, stats.dead_bytes) == (None, None)
        assert (stats.gc_runs, stats.bytes_reclaimed_total) == (None, None)
    with ctxstore.Client(gc_server.addr) as client:
        assert client.stats().gc_runs == 0  # nothing was sent


def _older_v2_server(header: p.FrameHeader, body: bytes) -> bytes:
    """A version-2 server that predates STATS_EX: UNKNOWN_MESSAGE for it, STATS answered."""
    if header.msg_type == p.MessageType.STATS_EX:
        unknown = p.ErrorResponse(2, 0, "unknown message type 0x0023")
        return p.encode_response(header.req_id, unknown)
    if header.msg_type == p.MessageType.STATS:
        return p.encode_response(header.req_id, STATS)
    return b""


def test_stats_falls_back_to_stats_on_a_server_without_stats_ex() -> None:
    with FakeServer(hello_then_answer(_older_v2_server, version=2)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            stats = client.stats()
            assert (stats.turns, stats.blobs) == (1000, 800)
            assert stats.gc_runs is None and stats.live_bytes is None


async def test_the_async_client_falls_back_too() -> None:
    with FakeServer(hello_then_answer(_older_v2_server, version=2)) as fake:
        async with ctxstore.AsyncClient(fake.addr, timeout=5) as client:
            stats = await client.stats()
            assert stats.turns == 1000
            assert stats.bytes_reclaimed_total is None
