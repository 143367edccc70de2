"""``durability="local"|"remote"`` (decision 0031 §11) in both clients: on the wire the frame
flag ACK_AFTER (bits 3-4: 1 local, 2 remote) on exactly the writes that take it (``append``,
``append_by_hash``, ``append_turns``, ``kv_put`` with and without a TTL, ``seal_stream``, an
``open_turn``'s seal) and on nothing else; refused before sending on a version-3 server and for
a value that is neither; :class:`ctxstore.errors.Unconfirmed` names the turn. Against a real
``ctxstore-server --replicate-to file://…``: every remote write is counted as a remote
acknowledgement and is in a restore of the replica taken right after a SIGKILL; without a
replica, remote is InvalidArgument and nothing is written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p
from ctxstore.aio import AsyncClient
from ctxstore.errors import InvalidArgument, NotSupported, Unconfirmed

from conftest import ServerProcess, new_server, server_binary
from fakes import FakeServer, hello_then_answer

WRITES = 7


def _recording(version: int, seen: list[p.FrameHeader]) -> FakeServer:
    """A fake of ``version`` that records each request's header and answers NOT_FOUND."""

    def answer(header: p.FrameHeader, body: bytes) -> bytes:
        seen.append(header)
        error = p.ErrorResponse(ctxstore.NotFound.code, 0, "fake")
        return p.encode_response(header.req_id, error)

    return FakeServer(hello_then_answer(answer, version=version))


def _every_write(client: ctxstore.Client, durability: ctxstore.Durability | None) -> None:
    """Each write that takes ``durability``, then a read and a delta that do not."""
    calls = [
        lambda: client.append(7, b"small", durability=durability),
        lambda: client.append(7, b"keyed", key="k", durability=durability),
        lambda: client.append_by_hash(7, ctxstore.blob_hash(b"x"), durability=durability),
        lambda: client.append_turns(7, [ctxstore.TurnSpec(b"t")], durability=durability),
        lambda: client.kv_put(7, {"k": b"v"}, durability=durability),
        lambda: client.kv_put(7, {"k": b"v"}, ttl_ms=1000, durability=durability),
        lambda: client.seal_stream(3, durability=durability),
        lambda: client.head(7),
        lambda: client.append_delta(3, b"d"),
    ]
    for call in calls:
        with pytest.raises(ctxstore.NotFound):
            call()


@pytest.mark.parametrize(("durability", "bits"), [("remote", 2), ("local", 1), (None, 0)])
def test_each_durability_is_its_frame_flag_on_the_writes_that_take_it(
    durability: ctxstore.Durability | None, bits: int
) -> None:
    seen: list[p.FrameHeader] = []
    with _recording(4, seen) as fake, ctxstore.Client(fake.addr) as client:
        _every_write(client, durability)
    assert len(seen) == WRITES + 2
    for header in seen[:WRITES]:
        assert header.msg_type in p.TAKES_ACK_AFTER
        assert (header.flags & p.ACK_AFTER_MASK) >> p.ACK_AFTER_SHIFT == bits, header
    for header in seen[WRITES:]:
        assert header.flags & p.ACK_AFTER_MASK == 0, header


def test_the_bits_of_a_durable_op() -> None:
    op = ops.durable_op(ops.head(7), "remote")
    assert not isinstance(op.request, p.AckAfter), "a read takes no ACK_AFTER"
    for durability, flag in (("local", 0b0_1000), ("remote", 0b1_0000)):
        acked = ops.durable_op(ops.raw(p.KvPut(7, False, ((b"k", b"v"),))), durability)
        header = p.FrameHeader.decode(
            b"".join(p.encode_request(1, acked.request))[: p.HEADER_BYTES]
        )
        assert header.flags == flag
    with pytest.raises(ValueError, match="durability"):
        ops.ack_after_of("everywhere")  # type: ignore[arg-type]


async def test_the_async_client_sends_the_same_flags() -> None:
    seen: list[p.FrameHeader] = []
    with _recording(4, seen) as fake:
        async with AsyncClient(fake.addr) as client:
            with pytest.raises(ctxstore.NotFound):
                await client.append(7, b"x", durability="remote")
            with pytest.raises(ctxstore.NotFound):
                await client.kv_put(7, {"k": b"v"}, durability="local")
            with pytest.raises(ctxstore.NotFound):
                await client.seal_stream(3, durability="remote")
    assert [h.flags >> p.ACK_AFTER_SHIFT for h in seen] == [2, 1, 2]


def test_a_version_3_server_is_sent_nothing() -> None:
    seen: list[p.FrameHeader] = []
    with _recording(3, seen) as fake, ctxstore.Client(fake.addr) as client:
        with pytest.raises(NotSupported, match="durability='remote'"):
            client.append(7, b"x", durability="remote")
        with pytest.raises(NotSupported):
            client.kv_put(7, {"k": b"v"}, durability="local")
        with pytest.raises(ValueError, match="durability"):
            client.append(7, b"x", durability="everywhere")  # type: ignore[arg-type]
        with pytest.raises(NotSupported, match="open_turn with durability='remote'"):
            client.open_turn(7, durability="remote")  # its seal could not carry it
        with pytest.raises(ValueError, match="durability"):
            client.open_turn(7, durability="everywhere")  # type: ignore[arg-type]
        assert seen == []
        with pytest.raises(ctxstore.NotFound):
            client.append(7, b"x")
    assert len(seen) == 1


def test_unconfirmed_names_its_turn() -> None:
    def answer(header: p.FrameHeader, body: bytes) -> bytes:
        error = p.ErrorResponse(Unconfirmed.code, 42, "not confirmed off-host")
        return p.encode_response(header.req_id, error)

    with FakeServer(hello_then_answer(answer, version=4)) as fake:
        with ctxstore.Client(fake.addr) as client:
            with pytest.raises(Unconfirmed) as raised:
                client.append(7, b"x", durability="remote")
    assert raised.value.turn_id == 42


def _restored(url: str, root: Path) -> ServerProcess:
    """The replica at ``url`` restored into a fresh directory, and a server on it."""
    to = root / f"restored-{id(url)}"
    subprocess.run(
        [str(server_binary()), "restore", "--from", url, "--to", str(to)],
        check=True,
        capture_output=True,
    )
    return ServerProcess(to).start()


async def test_remote_writes_are_in_a_restore_of_the_replica(tmp_root: Path) -> None:
    url = f"file://{tmp_root / f'replica-{id(tmp_root)}-durability'}"
    server = new_server(
        tmp_root,
        extra_args=["--replicate-to", url, "--replicate-interval", "1h", "--replica-lease", "off"],
    )
    try:
        with ctxstore.Client(server.addr) as client:
            context = client.create_context().context_id
            client.open_context("mem")
            first = client.append(context, b"remote one", key="k-1", durability="remote")
            by_hash = client.append_by_hash(context, first.payload_hash, durability="remote")
            batch = client.append_turns(
                context, [ctxstore.TurnSpec(b"a"), ctxstore.TurnSpec(b"b")], durability="remote"
            )
            client.kv_put("mem", {"fact": b"blue"}, durability="remote")
            with client.open_turn(context, durability="remote") as stream:
                stream.append(b"streamed")
            assert stream.sealed is not None
            async with AsyncClient(server.addr) as aclient:
                awaited = await aclient.append(context, b"async", durability="remote")
            role = client.role()
        assert role.ack_after == "local", "the server's default"
        assert role.remote_acks_total == 6, role
        assert role.remote_unconfirmed_total == 0, role
    finally:
        server.kill()
    restored = _restored(url, tmp_root)
    try:
        with ctxstore.Client(restored.addr) as client:
            for appended, payload in [
                (first, b"remote one"),
                (by_hash, b"remote one"),
                (batch[0], b"a"),
                (batch[1], b"b"),
                (stream.sealed, b"streamed"),
                (awaited, b"async"),
            ]:
                turn = client.get_turn(appended.turn_id)
                assert client.get_blob(turn.payload_hash) == payload
            assert client.kv_get("mem", "fact") == b"blue"
    finally:
        restored.stop()


def test_remote_without_a_replica_is_refused_and_writes_nothing(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr) as client:
        context = client.create_context().context_id
        with pytest.raises(InvalidArgument):
            client.append(context, b"nowhere", durability="remote")
        with pytest.raises(InvalidArgument):
            client.kv_put(context, {"k": b"v"}, durability="remote")
        assert client.head(context).head_turn_id == 0
        assert client.kv_get(context, "k") is None
        appended = client.append(context, b"here", durability="local")
        assert client.head(context).head_turn_id == appended.turn_id
