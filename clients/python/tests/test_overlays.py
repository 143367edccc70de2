"""Overlays and redaction (issue 15, decision 0012) through both clients: the frames'
strictness (golden coverage is in test_golden.py), patch_turn / redact_turn / purge_blob
against a real ctxstore-server, reads in the overlay view (``as_of``) with ``redacted`` and
``overlay_seq``, a redacted turn's empty payload passing verification, bad input as typed
errors, and a version-1 connection that refuses it all before sending."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p

from conftest import ServerProcess, new_server
from test_golden import golden_frames

EMPTY_HASH = blake3.blake3(b"").digest()


def unique(prefix: str = "ov") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _body(name: str) -> bytes:
    return golden_frames()[name][p.HEADER_BYTES :]


def test_overlay_frames_refuse_what_their_layout_forbids() -> None:
    get_turn = p.MessageType.GET_TURN
    # OVERLAYS on a message that returns no turns; a read without its as_of.
    with pytest.raises(p.ProtocolError, match="OVERLAYS"):
        p.decode_request(p.MessageType.REDACT_TURN, _body("redact_turn") + bytes(8), p.OVERLAYS)
    with pytest.raises(p.ProtocolError, match="as_of"):
        p.decode_request(get_turn, _body("get_turn_as_of")[:-8], p.OVERLAYS)
    with pytest.raises(ValueError, match="no overlay view"):
        p.AsOf(p.Stats(), 0).body_chunks()
    with pytest.raises(ValueError, match="no overlay view"):
        p.AsOf(p.AsOf(p.GetTurn(1), 0), 0).body_chunks()
    # PATCH_TURN: reserved bytes after payload_len; a payload shorter than its length.
    patch = bytearray(_body("patch_turn"))
    patch[12] = 1
    with pytest.raises(p.ProtocolError, match="reserved"):
        p.decode_request(p.MessageType.PATCH_TURN, bytes(patch))
    with pytest.raises(p.ProtocolError):
        p.decode_request(p.MessageType.PATCH_TURN, _body("patch_turn")[:-1])
    # An overlaid answer: a count that is not one per TURN, unknown overlay flags, reserved
    # bytes, and the flag on an answer that carries no turns.
    answer = _body("turn_overlaid_response")
    response_type = get_turn.response_type
    turn_bytes = len(_body("turn_response"))
    wrong_count = bytearray(answer)
    wrong_count[turn_bytes] = 2
    with pytest.raises(p.ProtocolError, match="overlay count"):
        p.decode_response(response_type, bytes(wrong_count), p.OVERLAYS)
    bad_flags = bytearray(answer)
    bad_flags[turn_bytes + 4 + 8] = 2
    with pytest.raises(p.ProtocolError, match="overlay_flags"):
        p.decode_response(response_type, bytes(bad_flags), p.OVERLAYS)
    reserved = bytearray(answer)
    reserved[-1] = 1
    with pytest.raises(p.ProtocolError, match="reserved"):
        p.decode_response(response_type, bytes(reserved), p.OVERLAYS)
    with pytest.raises(p.ProtocolError, match="flags"):
        p.decode_response(p.MessageType.REDACT_TURN.response_type, answer, p.OVERLAYS)
    with pytest.raises(p.ProtocolError, match="flags"):
        p.decode_response(response_type, answer, p.CTX_BY_NAME)
    # Without the flag the same bytes are a TURN with a trailing overlay: refused.
    with pytest.raises(p.ProtocolError):
        p.decode_response(response_type, answer)
    with pytest.raises(ValueError, match="one OVERLAY per TURN"):
        p.OverlaidResponse(p.TurnResponse(_turn_record()), ()).encode_body()


def _turn_record() -> p.TurnRecord:
    response = p.decode_response(p.MessageType.GET_TURN.response_type, _body("turn_response"))
    assert isinstance(response, p.TurnResponse)
    return response.turn


@pytest.fixture()
def ov_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server of its own (purges and collections are store-wide)."""
    process = new_server(
        tmp_root, extra_args=["--gc-interval", "off", "--gc-pack-dead-percent", "1"]
    )
    yield process
    process.stop()


def test_patch_redact_and_views(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr, timeout=20) as client:
        name = unique()
        client.open_context(name)
        first = client.append(name, b"original one").turn
        second = client.append(name, b"secret two").turn
        third = client.append(name, b"three").turn

        patched = client.patch_turn(first.turn_id, b"fixed one")
        assert isinstance(patched, ctxstore.Patched)
        assert patched.turn_id == first.turn_id and patched.overlay_seq > 0
        assert patched.payload_hash == blake3.blake3(b"fixed one").digest()
        assert patched.payload_len == len(b"fixed one")

        redacted = client.redact_turn(second.turn_id)
        assert isinstance(redacted, ctxstore.Redacted)
        assert redacted.turn_id == second.turn_id
        assert redacted.overlay_seq > patched.overlay_seq

        # The latest view: the patch, the redaction (an empty payload that verifies), the
        # untouched turn.
        page = client.last(name, 10, payloads=True, as_of=0)
        assert [t.payload for t in page] == [b"fixed one", b"", b"three"]
        assert [t.redacted for t in page] == [False, True, False]
        assert [t.overlay_seq for t in page] == [patched.overlay_seq, redacted.overlay_seq, 0]
        assert page[1].payload_hash == EMPTY_HASH and page[1].payload_len == 0
        # The view as of the patch: the redaction still holds (it holds in every view).
        old = client.read_page(name, 10, payloads=True, as_of=patched.overlay_seq)
        assert [t.payload for t in old] == [b"fixed one", b"", b"three"]
        assert [t.redacted for t in old] == [False, True, False]
        # Before the patch: the original payload.
        before = client.get_turn(first.turn_id, as_of=patched.overlay_seq - 1)
        assert (before.payload_hash, before.overlay_seq) == (first.payload_hash, 0)
        assert client.get_turn(first.turn_id, as_of=0).overlay_seq == patched.overlay_seq
        # Without as_of: the latest payloads, the overlay state unknown (False / 0).
        plain = client.last(name, 10, payloads=True)
        assert [t.payload for t in plain] == [b"fixed one", b"", b"three"]
        assert not any(t.redacted for t in plain)
        window = client.window(name, payloads=True, as_of=0)
        assert [t.redacted for t in window] == [False, True, False]
        log = client.turn_log(name, payloads=True, as_of=0)
        assert {t.turn_id: t.redacted for t in log.turns} == {
            first.turn_id: False,
            second.turn_id: True,
            third.turn_id: False,
        }
        chain = client.chain(third.turn_id, as_of=0)
        assert [t.overlay_seq for t in chain] == [patched.overlay_seq, redacted.overlay_seq, 0]

        # Bad input: an unknown turn; an overlay on a redacted turn (final, not idempotent).
        with pytest.raises(ctxstore.NotFound):
            client.redact_turn(9_999_999)
        with pytest.raises(ctxstore.NotFound):
            client.patch_turn(9_999_999, b"x")
        with pytest.raises(ctxstore.InvalidArgument):
            client.redact_turn(second.turn_id)
        with pytest.raises(ctxstore.InvalidArgument):
            client.patch_turn(second.turn_id, b"back")
        assert client.ping() is None  # the connection survives the errors


def test_purge_redacts_every_turn_and_hides_the_blob(ov_server: ServerProcess) -> None:
    with ctxstore.Client(ov_server.addr, timeout=20) as client:
        a, b = unique("a"), unique("b")
        client.open_context(a)
        client.open_context(b)
        shared = os.urandom(4_000)
        digest = blake3.blake3(shared).digest()
        one = client.append(a, shared).turn
        two = client.append(b, shared).turn
        keep = client.append(b, b"kept").turn

        purged = client.purge_blob(digest.hex())
        assert isinstance(purged, ctxstore.Purged)
        assert (purged.payload_hash, purged.turns_redacted) == (digest, 2)
        for turn in (one, two):
            seen = client.get_turn(turn.turn_id, as_of=0)
            assert seen.redacted and seen.payload_hash == EMPTY_HASH
        assert not client.get_turn(keep.turn_id, as_of=0).redacted
        with pytest.raises(ctxstore.NotFound):
            client.get_blob(digest)
        assert client.has_blobs([digest]) == [False]
        # Turns redacted before are not counted again.
        assert client.purge_blob(digest).turns_redacted == 0
        with pytest.raises(ctxstore.NotFound):
            client.purge_blob(bytes(32))
        client.gc()
        assert [t.payload for t in client.last(b, 10, payloads=True)] == [b"", b"kept"]


async def test_the_async_client_patches_redacts_and_purges(server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        name = unique("async")
        await client.open_context(name)
        turn = (await client.append(name, b"draft")).turn
        patched = await client.patch_turn(turn.turn_id, b"final")
        page = await client.read_page(name, payloads=True, as_of=0)
        assert [(t.payload, t.overlay_seq) for t in page] == [(b"final", patched.overlay_seq)]
        redacted = await client.redact_turn(turn.turn_id)
        seen = await client.get_turn(turn.turn_id, as_of=patched.overlay_seq)
        assert seen.redacted and seen.overlay_seq == redacted.overlay_seq
        with pytest.raises(ctxstore.InvalidArgument):
            await client.patch_turn(turn.turn_id, b"again")
        other = (await client.append(name, b"unique bytes " + os.urandom(8))).turn
        purged = await client.purge_blob(other.payload_hash)
        assert purged.turns_redacted == 1
        key_turn = await client.turn_by_key(name, "nokey", as_of=0)
        assert key_turn is None


def test_a_version_1_connection_refuses_overlays_before_sending(server: ServerProcess) -> None:
    class V1Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 1)

    with V1Client(server.addr) as old:
        assert old.server_info().version == 1
        with pytest.raises(ctxstore.NotSupported, match="version 2"):
            old.patch_turn(1, b"x")
        with pytest.raises(ctxstore.NotSupported, match="version 2"):
            old.redact_turn(1)
        with pytest.raises(ctxstore.NotSupported, match="version 2"):
            old.purge_blob(bytes(32))
        with pytest.raises(ctxstore.NotSupported, match="GET_TURN in an overlay view"):
            old.get_turn(1, as_of=0)
        assert old.ping() is None


def test_an_overlaid_answer_is_checked_against_the_turns() -> None:
    record = _turn_record()  # 5 bytes, hash a0a1…bf
    op = ops.overlaid(ops.get_turn(record.turn_id), 7)
    assert op.request == p.AsOf(p.GetTurn(record.turn_id), 7)
    patched = op.finish(p.OverlaidResponse(p.TurnResponse(record), (p.OverlayRecord(9, False),)))
    assert (patched.redacted, patched.overlay_seq) == (False, 9)
    # A redacted turn must name no bytes; an answer without the overlay states is refused.
    with pytest.raises(p.ProtocolError, match="redacted"):
        op.finish(p.OverlaidResponse(p.TurnResponse(record), (p.OverlayRecord(9, True),)))
    with pytest.raises(p.ProtocolError):
        op.finish(p.TurnResponse(record))
