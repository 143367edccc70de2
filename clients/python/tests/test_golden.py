"""The golden frames of protocol/tests/golden-v1.txt, golden-v2.txt, golden-v3.txt,
golden-v4.txt and golden-v5.txt decode to the documented values and re-encode to exactly their
bytes (header flags included); version 4's ACK_AFTER is refused where it cannot be; version 5's
QUOTA_EXCEEDED raises :class:`~ctxstore.errors.QuotaExceeded`, and its TENANT_LIST,
TENANT_DELETE and TENANT_ROTATE_KEY are refused where their layouts forbid."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import blake3
import pytest

from ctxstore import Tenant, TenantDeleted, TenantKeyRotated
from ctxstore import _ops as ops
from ctxstore import _protocol as p
from ctxstore import _stream_protocol as s
from ctxstore._connection import resends_safely
from ctxstore.errors import QuotaExceeded, error_for_code

from conftest import GOLDEN_V1, GOLDEN_V2, GOLDEN_V3, GOLDEN_V4, GOLDEN_V5


def golden_frames(
    paths: tuple[Path, ...] = (GOLDEN_V1, GOLDEN_V2, GOLDEN_V3, GOLDEN_V4, GOLDEN_V5),
) -> dict[str, bytes]:
    """name → frame bytes, from every golden file of ``paths`` (names are unique across
    them)."""
    frames: dict[str, bytes] = {}
    for path in paths:
        if not path.is_file():
            pytest.fail(f"golden vectors not found at {path}")
        for line in path.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            name, hex_frame, _meaning = (part.strip() for part in line.split("|", 2))
            assert name not in frames, f"golden frame {name} defined twice"
            frames[name] = bytes.fromhex(hex_frame)
    return frames


HASH_A0 = bytes((0xA0 + i) & 0xFF for i in range(32))
HASH_00 = bytes(range(32))
EMPTY_HASH = blake3.blake3(b"").digest()
TURN = p.TurnRecord(
    turn_id=42,
    parent_turn_id=41,
    context_id=3,
    depth=7,
    codec=1,
    type_tag=0x1122_3344_5566_7788,
    payload_hash=HASH_A0,
    payload_len=5,
    flags=0,
    created_at_unix_ms=1_767_225_600_000,
)
T = p.MessageType
INFO_T1 = p.ContextInfoRecord(
    p.ContextHeadRecord(3, 42, 7),
    1_767_225_600_000,
    1_767_225_601_000,
    "t-1",
    (("status", "idle"),),
)
INFO_3 = p.ContextInfoRecord(
    p.ContextHeadRecord(3, 42, 7), 1_767_225_600_000, 1_767_225_601_000, None, ()
)

EXPECTED: dict[str, tuple[int, p.Message]] = {
    "hello_request": (1, p.Hello(1, 1, b"secret", "cli")),
    "hello_response": (1, p.HelloResponse(1, 16 << 20, 1024, 16 << 20, 10_000, 4096, "ctxstore")),
    "ping_request": (2, p.Ping(0xDEADBEEF)),
    "pong_response": (2, p.Pong(0xDEADBEEF)),
    "ctx_create_empty": (3, p.CtxCreate(0)),
    "ctx_create_response": (
        3,
        p.ContextResponse(p.ContextHeadRecord(3, 0, 0), T.CTX_CREATE.response_type),
    ),
    "ctx_fork": (4, p.CtxFork(42)),
    "get_head": (5, p.GetHead(3)),
    "get_head_response": (
        5,
        p.ContextResponse(p.ContextHeadRecord(3, 42, 7), T.GET_HEAD.response_type),
    ),
    "append_turn": (6, p.AppendTurn(3, 41, 0x1122_3344_5566_7788, 1, b"hello")),
    "appended_response": (6, p.AppendedResponse(TURN, False, T.APPEND_TURN.response_type)),
    "append_turn_by_hash": (7, p.AppendTurnByHash(3, None, 9, 2, HASH_A0)),
    "get_turn": (8, p.GetTurn(42)),
    "turn_response": (8, p.TurnResponse(TURN)),
    "get_last_with_payloads": (
        9,
        p.GetLast(3, 64, p.READ_WITH_PAYLOADS | p.READ_ACCEPT_ZSTD),
    ),
    "turns_response": (
        9,
        p.TurnsResponse(
            42,
            7,
            (p.TurnEntry(TURN, p.PayloadRecord(p.PayloadEncoding.RAW, 5, b"hello")),),
            T.GET_LAST.response_type,
        ),
    ),
    "get_before": (10, p.GetBefore(3, 42, 10, 0)),
    "get_range_by_depth": (11, p.GetRangeByDepth(3, 2, 5, 0)),
    "get_chain": (12, p.GetChain(42, 0, 100, p.READ_WITH_PAYLOADS)),
    "get_blob": (13, p.GetBlob(HASH_A0, 0)),
    "blob_response": (13, p.BlobResponse(p.PayloadRecord(p.PayloadEncoding.RAW, 5, b"hello"))),
    "has_blobs": (14, p.HasBlobs((HASH_A0, HASH_00))),
    "has_blobs_response": (14, p.HasBlobsResponse((True, False))),
    "stats": (15, p.Stats()),
    "stats_response": (
        15,
        p.StatsResponse(10, 2, 8, 1000, 800, 500, 2, 1, 20, 1, 5000, False),
    ),
    "error_conflict": (6, p.ErrorResponse(6, 42, "head moved")),
    "error_bad_frame": (0, p.ErrorResponse(1, 0, "bad")),
    # Version 2 (golden-v2.txt).
    "hello_request_v2": (1, p.Hello(1, 2, b"", "py")),
    "get_head_by_name": (2, p.GetHead("t-1")),
    "append_turn_by_name": (3, p.AppendTurn("t-1", None, 1, 0, b"hi")),
    "ctx_open": (4, p.CtxOpen(0, True, None, "t-1", (("status", "idle"),))),
    "ctx_open_clone": (5, p.CtxOpen(0, False, 3, "t-2", ())),
    "opened_response": (4, p.OpenedResponse(INFO_T1, True)),
    "ctx_show": (6, p.CtxShow("t-1")),
    "context_info_response": (6, p.ContextInfoResponse(INFO_T1, T.CTX_SHOW.response_type)),
    "ctx_tag": (7, p.CtxTag(3, 42, (("status", "done"),), ("owner",))),
    "ctx_list": (
        8,
        p.CtxList((("status", "idle"),), "t-", 1_767_225_600_000, None, "t-1", 100),
    ),
    "context_list_response": (8, p.ContextListResponse(3, (INFO_3,))),
    "ctx_name": (9, p.CtxName(3, "t-3")),
    "kv_put": (10, p.KvPut("t-1", True, ((b"k", b"v1"),))),
    "kv_put_response": (10, p.DoneResponse(T.KV_PUT.response_type)),
    "kv_get": (11, p.KvGet(3, b"k", 0)),
    "kv_value_response": (
        11,
        p.KvValueResponse(HASH_A0, p.PayloadRecord(p.PayloadEncoding.RAW, 2, b"v1")),
    ),
    "kv_delete": (12, p.KvDelete(3, (b"k",))),
    "kv_list": (13, p.KvList(3, b"w:", b"", 1000)),
    "kv_list_response": (13, p.KvListResponse((p.KvItemRecord(b"w:1", HASH_A0, 2),))),
    # Version 3: key-value entries with a time to live (issue 34).
    "kv_put_ex": (20, p.KvPutEx("lgs:default", p.KV_PUT_IF_ABSENT, 30_000, ((b"k", b"v1"),))),
    "kv_put_ex_response": (20, p.DoneResponse(T.KV_PUT_EX.response_type)),
    "kv_get_ex": (21, p.KvGetEx(3, b"k", 0, p.KV_READ_REFRESH)),
    "kv_value_ex_response": (
        21,
        p.KvValueExResponse(
            HASH_A0, 30_000, 1_800_000_030_000, p.PayloadRecord(p.PayloadEncoding.RAW, 2, b"v1")
        ),
    ),
    "kv_list_ex": (22, p.KvListEx(3, b"w:", b"", 1000, 0)),
    "kv_list_ex_response": (
        22,
        p.KvItemsExResponse(
            (
                p.KvItemExRecord(b"w:1", HASH_A0, 2, 30_000, 1_800_000_030_000),
                p.KvItemExRecord(b"w:2", HASH_A0, 2, 0, 0),
            ),
            T.KV_LIST_EX.response_type,
        ),
    ),
    "kv_touch": (23, p.KvTouch(3, 0, (b"w:1", b"gone"))),
    "kv_touched_response": (
        23,
        p.KvItemsExResponse(
            (p.KvItemExRecord(b"w:1", HASH_A0, 2, 30_000, 1_800_000_045_000),),
            T.KV_TOUCH.response_type,
        ),
    ),
    "kv_get_many": (25, p.KvGetMany(3, 0, (b"k", b"gone"))),
    "kv_values_response": (
        25,
        p.KvValuesResponse(
            (
                p.KvValueExResponse(
                    HASH_A0,
                    30_000,
                    1_800_000_030_000,
                    p.PayloadRecord(p.PayloadEncoding.RAW, 2, b"v1"),
                ),
                None,
            )
        ),
    ),
    "error_already_exists": (4, p.ErrorResponse(15, 3, "name taken")),
    # Version 2, turns for agent frameworks (decision 0009).
    "append_turns": (
        14,
        p.AppendTurns(
            "t-1",
            42,
            (
                p.TurnSpecRecord(
                    p.ParentKind.HEAD,
                    0,
                    1,
                    0,
                    False,
                    p.ExtrasRecord(b"cp-1", (("step", "1"),)),
                    b"hi",
                ),
                p.TurnSpecRecord(
                    p.ParentKind.TURN,
                    41,
                    2,
                    0,
                    True,
                    p.ExtrasRecord(links=(7,)),
                    HASH_A0,
                    by_hash=True,
                ),
            ),
        ),
    ),
    "appended_turns_response": (
        14,
        p.AppendedTurnsResponse((p.AppendedTurnRecord(TURN, deduped=False, existing=True),)),
    ),
    "get_turn_by_key": (15, p.GetTurnByKey(3, b"cp-1")),
    "turn_info_response": (
        15,
        p.TurnInfoResponse(TURN, p.ExtrasRecord(b"cp-1", (("step", "1"),))),
    ),
    "turn_log": (
        16,
        p.TurnLog(3, (("run_id", "r1"),), p.LogCursor(0, 41), 100, p.READ_WITH_PAYLOADS),
    ),
    "turn_log_response": (
        16,
        p.TurnLogResponse(
            None,
            (
                p.TurnExtrasEntry(
                    TURN, p.ExtrasRecord(), p.PayloadRecord(p.PayloadEncoding.RAW, 5, b"hello")
                ),
            ),
        ),
    ),
    "read_page_window": (
        17,
        p.ReadPage("t-1", p.PageKind.WINDOW, 0, 0, 64, p.READ_WITH_PAYLOADS | p.READ_ACCEPT_ZSTD),
    ),
    "page_response": (
        17,
        p.PageResponse(
            0,
            7,
            (
                p.TurnExtrasEntry(
                    TURN, p.ExtrasRecord(), p.PayloadRecord(p.PayloadEncoding.ABSENT, 0, b"")
                ),
            ),
        ),
    ),
    "find_turns": (18, p.FindTurns("run_id", "r1", 0, 100)),
    "found_turns_response": (
        18,
        p.FoundTurnsResponse(42, ((TURN, p.ExtrasRecord(b"", (("run_id", "r1"),), ())),)),
    ),
    # Version 2, retention (issue 15) and backup (issue 18).
    "ctx_delete": (19, p.CtxDelete("thread-1")),
    "ctx_prune": (20, p.CtxPrune(3, 20)),
    "ctx_ttl": (21, p.CtxTtl(3, True, 7 * 24 * 3600 * 1000)),
    "ctx_prune_response": (
        20,
        p.RetentionResponse(
            p.ContextInfoRecord(
                p.ContextHeadRecord(3, 42, 7), 1_767_225_600_000, 1_767_225_601_000, "thread-1", ()
            ),
            7,
            604_800_000,
            T.CTX_PRUNE.response_type,
        ),
    ),
    "backup": (22, p.Backup("/var/backups/ctxstore-1")),
    "backup_response": (
        22,
        p.BackedUpResponse(1000, 800, 1 << 30, 1 << 29, 1234, "/var/backups/ctxstore-1"),
    ),
    # Version 2, garbage collection (issue 15); more in test_gc.py.
    "gc": (23, p.Gc()),
    "gc_done_response": (23, p.GcDoneResponse(1500, 1200, 12 << 20, 3, 1 << 30, 2 << 20, 4321)),
    "stats_ex": (24, p.StatsEx()),
    "stats_ex_response": (
        24,
        p.StatsExResponse(
            p.StatsResponse(
                1000, 10, 800, 10 << 20, 8 << 20, 4 << 20, 200, 2, 5000, 1, 60_000, False
            ),
            3 << 20,
            1 << 20,
            2,
            5 << 20,
        ),
    ),
    # Version 4 (decision 0031): ROLE, ACK_AFTER, NOT_PRIMARY and UNCONFIRMED.
    "hello_request_v4": (1, p.Hello(1, 4, b"", "py")),
    "role": (60, p.Role()),
    "role_primary_response": (
        60,
        p.RoleResponse(
            1,
            True,
            1,
            3,
            10_000,
            1_200,
            7_500,
            1,
            12_400,
            2,
            1_000,
            1,
            45_000,
            180_000,
            "10.0.0.5:7411",
            "a1:4242",
        ),
    ),  # fmt: skip
    "role_standby_response": (
        61,
        p.RoleResponse(2, False, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", ""),
    ),
    "append_turn_ack_remote": (
        62,
        p.AckAfter(p.AppendTurn(3, None, 1, 0, b"hello"), p.ACK_AFTER_REMOTE),
    ),
    "append_turn_by_name_ack_local": (
        63,
        p.AckAfter(p.AppendTurn("t-1", None, 1, 0, b"hi"), p.ACK_AFTER_LOCAL),
    ),
    "kv_put_ack_remote": (
        64,
        p.AckAfter(p.KvPut(3, False, ((b"k", b"v1"),)), p.ACK_AFTER_REMOTE),
    ),
    "stream_seal_ack_remote": (65, p.AckAfter(s.StreamSeal(57), p.ACK_AFTER_REMOTE)),
    "error_not_primary": (
        62,
        p.ErrorResponse(
            19, 3, "not the primary: this store is a standby; send writes to 10.0.0.5:7411"
        ),
    ),
    "error_unconfirmed": (
        62,
        p.ErrorResponse(
            20, 42, "turn 42 is durable here but the object store did not store it in time"
        ),
    ),
    # Version 5 (decision 0032 §3, §8): QUOTA_EXCEEDED, TENANT_LIST.
    "hello_request_v5": (1, p.Hello(1, 5, b"t0k", "ts")),
    "error_quota_exceeded": (
        70,
        p.ErrorResponse(21, 100, "tenant acme is at its quota_contexts: 100 of 100 contexts"),
    ),
    "tenant_list": (71, p.TenantList("acme", 100)),
    "tenants_listed": (
        71,
        p.TenantsListedResponse(
            (
                p.TenantRecord(
                    tenant_id=2,
                    flags=p.TENANT_IN_FILE | p.TENANT_REGISTERED,
                    rights=0b011,  # read, write
                    name="globex",
                    contexts=12,
                    streams_open=1,
                    stored_bytes=40960,
                    connections=3,
                    quota_bytes=1_000_000,
                    quota_contexts=100,
                    quota_appends_per_s=0,
                    quota_connections=8,
                    quota_streams=0,
                    refusals=5,
                ),
            ),
            "globex",
        ),
    ),
    # Version 5 (decision 0032 §6): TENANT_DELETE.
    "tenant_delete": (72, p.TenantDelete("acme")),
    "tenant_deleted": (
        72,
        p.TenantDeletedResponse(1, p.TENANT_KEYS_DESTROYED | p.TENANT_REPLICA_UPDATED),
    ),
    # Version 5 (decision 0032 §7): TENANT_ROTATE_KEY.
    "tenant_rotate_key": (73, p.TenantRotateKey("globex")),
    "tenant_key_rotated": (73, p.TenantKeyRotatedResponse(2, 3)),
    # Version 3, replication's figures (issue 31); a server's answers in test_replication.py.
    "replication_stats": (24, p.ReplicationStats()),
    "replication_stats_response": (
        24,
        p.ReplicationStatsResponse(
            role=2,
            state=5,
            promoting=False,
            generation=2,
            epoch=3,
            seq=41,
            records=1200,
            records_unix_ms=1_800_000_000_000,
            lag_ms=1500,
            lag_bytes=4096,
            objects_total=42,
            bytes_total=1 << 20,
            last_success_unix_ms=1_800_000_001_000,
            backlog_objects=1,
            segment_bytes_max=64 << 20,
            target="s3://agents/ctx",
            primary="the primary at 10.0.0.5:7411 (host a1)",
            reason="",
            failures=(("store", 2),),
        ),
    ),
    # Version 2, overlays and redaction (issue 15, decision 0012); more in test_overlays.py.
    "patch_turn": (23, p.PatchTurn(42, b"fixed")),
    "patch_turn_response": (23, p.PatchedResponse(42, 57, HASH_A0, 5)),
    "redact_turn": (24, p.RedactTurn(42)),
    "redact_turn_response": (24, p.RedactedResponse(42, 58)),
    "purge_blob": (25, p.PurgeBlob(HASH_A0)),
    "purge_blob_response": (25, p.PurgedResponse(HASH_A0, 3, 62)),
    "get_turn_as_of": (26, p.AsOf(p.GetTurn(42), 57)),
    "turn_overlaid_response": (
        26,
        p.OverlaidResponse(p.TurnResponse(TURN), (p.OverlayRecord(57, False),)),
    ),
    "read_page_as_of_latest": (
        27,
        p.AsOf(p.ReadPage("t-1", p.PageKind.LAST, 0, 0, 10, p.READ_WITH_PAYLOADS), 0),
    ),
    "page_overlaid_response": (
        27,
        p.OverlaidResponse(
            p.PageResponse(
                0,
                7,
                (
                    p.TurnExtrasEntry(
                        dataclasses.replace(TURN, payload_hash=EMPTY_HASH, payload_len=0),
                        p.ExtrasRecord(),
                        p.PayloadRecord(p.PayloadEncoding.RAW, 0, b""),
                    ),
                ),
            ),
            (p.OverlayRecord(58, True),),
        ),
    ),
    "get_last_by_name_as_of": (28, p.AsOf(p.GetLast("t-1", 1, 0), 57)),
    # Version 2, payloads as chunks the server may have already (issue 16); more in
    # test_chunks.py.
    "put_chunked": (
        29,
        p.PutChunked(
            HASH_A0,
            (
                p.ChunkRecord(bytes(range(0x10, 0x30)), 4),
                p.ChunkRecord(bytes(range(0x40, 0x60)), 3),
                p.ChunkRecord(bytes(range(0x70, 0x90)), 5),
            ),
            (p.SentChunkRecord(1, b"new"),),
        ),
    ),
    "put_chunked_with_base": (
        29,
        p.PutChunked(
            bytes(range(0xC0, 0xE0)),
            (p.ChunkRecord(bytes(range(0x90, 0xB0)), 6),),
            (p.SentChunkRecord(0, b"grown!"),),
            p.ChunkBase(HASH_A0, 2),
        ),
    ),
    "chunked_stored_response": (29, p.ChunkedStoredResponse(HASH_A0, 12, False)),
    "error_hash_mismatch": (
        29,
        p.ErrorResponse(16, 0, "chunk 1 does not hash to 404142\u2026"),
    ),
}


def decode_frame(frame: bytes) -> tuple[p.FrameHeader, p.Message]:
    header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
    header.check(p.FRAME_BYTES_LIMIT, p.FRAME_FLAGS_KNOWN)
    body = frame[p.HEADER_BYTES :]
    assert header.len == len(body)
    if header.msg_type & p.RESPONSE_BIT:
        header.check(p.FRAME_BYTES_LIMIT, p.OVERLAYS)  # a response's only flag
        return header, p.decode_response(header.msg_type, body, header.flags)
    return header, p.decode_request(header.msg_type, body, header.flags)


def encode_frame(req_id: int, message: p.Message) -> bytes:
    if isinstance(message, p.Request):
        return b"".join(p.encode_request(req_id, message))
    assert isinstance(message, p.Response)
    return p.encode_response(req_id, message)


def test_every_golden_frame_is_covered() -> None:
    assert set(golden_frames()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_frame_decodes_and_reencodes(name: str) -> None:
    req_id, expected = EXPECTED[name]
    check_golden_frame(golden_frames()[name], req_id, expected)


def check_golden_frame(frame: bytes, req_id: int, expected: p.Message) -> None:
    """``frame`` decodes to ``expected`` sent with ``req_id`` and re-encodes to its bytes."""
    header, message = decode_frame(frame)
    assert header.req_id == req_id
    assert header.flags == expected.frame_flags
    assert message == expected
    assert encode_frame(req_id, expected) == frame


def test_golden_large_payload_is_sent_as_separate_chunk() -> None:
    payload = bytes(range(256)) * 64
    chunks = p.encode_request(5, p.AppendTurn(3, None, 0, 0, payload))
    assert len(chunks) == 2 and chunks[1] is payload
    header, message = decode_frame(b"".join(chunks))
    assert message == p.AppendTurn(3, None, 0, 0, payload)
    assert header.len == 40 + len(payload)


def test_golden_v2_names_are_sent_with_the_frame_flag() -> None:
    frames = golden_frames()
    for name in ("get_head_by_name", "append_turn_by_name"):
        assert p.FrameHeader.decode(frames[name][:16]).flags == p.CTX_BY_NAME
    # The new messages carry an inline context ref and never the flag.
    assert p.FrameHeader.decode(frames["ctx_show"][:16]).flags == 0
    assert p.CtxShow("t-1").required_version == 2
    assert p.GetHead("t-1").required_version == 2 and p.GetHead(3).required_version == 1


def test_flag_on_a_message_without_a_leading_context_is_refused() -> None:
    frame = golden_frames()["ctx_show"]
    with pytest.raises(p.ProtocolError, match="CTX_BY_NAME"):
        p.decode_request(p.MessageType.CTX_SHOW, frame[16:], p.CTX_BY_NAME)
    with pytest.raises(p.ProtocolError, match="flag"):
        p.decode_request(p.MessageType.GET_HEAD, frame[16:], 2)
    with pytest.raises(p.ProtocolError, match="1 or more bytes"):
        p.decode_request(p.MessageType.GET_HEAD, b"\x00\x00", p.CTX_BY_NAME)


def test_golden_v2_turn_messages_carry_an_inline_context_ref_and_need_version_2() -> None:
    frames = golden_frames()
    for name in ("append_turns", "get_turn_by_key", "turn_log", "read_page_window"):
        header, message = decode_frame(frames[name])
        assert header.flags == 0
        assert isinstance(message, p.Request) and message.required_version == 2


def test_golden_append_turns_sends_large_payloads_as_separate_chunks() -> None:
    payload = bytes(range(256)) * 64
    specs = (
        p.TurnSpecRecord(p.ParentKind.ROOT, 0, 0, 0, False, p.ExtrasRecord(b"a"), b"small"),
        p.TurnSpecRecord(p.ParentKind.HEAD, 0, 0, 0, True, p.ExtrasRecord(), payload),
        p.TurnSpecRecord(p.ParentKind.TURN, 9, 0, 0, False, p.ExtrasRecord(), HASH_A0, True),
    )
    request = p.AppendTurns(3, None, specs)
    chunks = p.encode_request(5, request)
    assert any(chunk is payload for chunk in chunks)
    _, message = decode_frame(b"".join(chunks))
    assert message == request


def test_golden_large_kv_value_is_sent_as_separate_chunk() -> None:
    value = bytes(range(256)) * 64
    request = p.KvPut("t", False, ((b"a", b"small"), (b"b", value), (b"c", b"x")))
    chunks = p.encode_request(5, request)
    assert any(chunk is value for chunk in chunks)
    _, message = decode_frame(b"".join(chunks))
    assert message == request


def _body(name: str) -> bytes:
    return golden_frames()[name][p.HEADER_BYTES :]


def test_turn_messages_refuse_what_their_layout_forbids() -> None:
    # APPEND_TURNS "t-1": context ref is 2 + 3 bytes, flags 4, expected_head 8, count 2.
    body = bytearray(_body("append_turns"))
    spec = 5 + 4 + 8 + 2  # the first TURN_SPEC starts here
    cases = {
        "no turns": body[:17] + b"\x00\x00",
        "parent_turn_id": body[:spec] + b"\x00\x07" + body[spec + 2 :],  # HEAD with a turn id
        "parent_kind": body[:spec] + b"\x03" + body[spec + 1 :],
        "turn_flags": body[: spec + 29 - 8] + b"\x04" + body[spec + 29 - 7 :],
        "expected_head": b"\x03\x00t-1" + bytes(4) + body[9:],  # EXPECT_HEAD clear, head 42
    }
    for broken in cases.values():
        with pytest.raises(p.ProtocolError):
            p.decode_request(p.MessageType.APPEND_TURNS, bytes(broken))
    # A TURN with flag bits other than SUMMARY.
    turn = bytearray(_body("turn_response"))
    turn[76] = 2
    with pytest.raises(p.ProtocolError, match="turn flags"):
        p.decode_response(p.MessageType.GET_TURN.response_type, bytes(turn))
    turn[76] = p.TURN_SUMMARY
    summary = p.decode_response(p.MessageType.GET_TURN.response_type, bytes(turn))
    assert isinstance(summary, p.TurnResponse) and summary.turn.flags == p.TURN_SUMMARY
    # READ_PAGE: a WINDOW with a before_turn_id; an unknown kind.
    page = bytearray(_body("read_page_window"))
    page[6] = 9
    with pytest.raises(p.ProtocolError, match="does not use"):
        p.decode_request(p.MessageType.READ_PAGE, bytes(page))
    page = bytearray(_body("read_page_window"))
    page[5] = 4
    with pytest.raises(p.ProtocolError, match="kind"):
        p.decode_request(p.MessageType.READ_PAGE, bytes(page))


def test_turn_message_encoders_refuse_what_the_layout_cannot_carry() -> None:
    extras = p.ExtrasRecord()
    with pytest.raises(ValueError, match="at least one"):
        p.AppendTurns(3, None, ()).body_chunks()
    for kind, parent in ((p.ParentKind.HEAD, 5), (p.ParentKind.ROOT, 5), (p.ParentKind.TURN, 0)):
        spec = p.TurnSpecRecord(kind, parent, 0, 0, False, extras, b"x")
        with pytest.raises(ValueError, match="parent"):
            spec.encode()
    with pytest.raises(ValueError, match="key"):
        p.GetTurnByKey(3, b"k" * 256).body_chunks()
    with pytest.raises(ValueError, match="labels"):
        p.TurnLog(3, tuple(("k", "v") for _ in range(256)), None, 1, 0).body_chunks()
    with pytest.raises(ValueError, match="links"):
        p.ExtrasRecord(links=tuple(range(256))).encode()
    with pytest.raises(ValueError, match="BEFORE"):
        p.ReadPage(3, p.PageKind.LAST, 5, 0, 1, 0).body_chunks()
    with pytest.raises(ValueError, match="RANGE"):
        p.ReadPage(3, p.PageKind.WINDOW, 0, 5, 1, 0).body_chunks()
    # At the layout's limits exactly: encoded and decoded back.
    wide = p.ExtrasRecord(b"k" * 255, tuple((f"{i}", "v") for i in range(255)), (1,) * 255)
    response = p.TurnInfoResponse(TURN, wide)
    frame = p.encode_response(1, response)
    assert p.decode_response(p.MessageType.GET_TURN_BY_KEY.response_type, frame[16:]) == response


def test_retention_messages_refuse_what_their_layout_forbids() -> None:
    ttl = bytearray(_body("ctx_ttl"))  # context ref 2 + 8 bytes, ttl_flags, ttl_ms
    for flags in (0x02, 0x03, 0x80):
        ttl[10] = flags
        with pytest.raises(p.ProtocolError, match="ttl_flags"):
            p.decode_request(p.MessageType.CTX_TTL, bytes(ttl))
    ttl[10] = 0  # only a read, yet a ttl_ms
    with pytest.raises(p.ProtocolError, match="ttl_ms"):
        p.decode_request(p.MessageType.CTX_TTL, bytes(ttl))
    read = p.decode_request(p.MessageType.CTX_TTL, bytes(ttl[:11]) + bytes(8))
    assert read == p.CtxTtl(3, False, 0)
    with pytest.raises(ValueError, match="only reads"):
        p.CtxTtl(3, False, 5).body_chunks()
    for name, msg_type in (
        ("ctx_delete", p.MessageType.CTX_DELETE),
        ("ctx_prune", p.MessageType.CTX_PRUNE),
        ("ctx_ttl", p.MessageType.CTX_TTL),
    ):
        body = _body(name)
        with pytest.raises(p.ProtocolError):
            p.decode_request(msg_type, body + b"\x00")  # a trailing byte
        with pytest.raises(p.ProtocolError):
            p.decode_request(msg_type, body[:-1])  # cut short
    retention = _body("ctx_prune_response")
    for msg_type in (0x801E, 0x801F, 0x8020):
        answer = p.decode_response(msg_type, retention)
        assert isinstance(answer, p.RetentionResponse) and answer.msg_type == msg_type
        with pytest.raises(p.ProtocolError):
            p.decode_response(msg_type, retention + b"\x00")
        with pytest.raises(p.ProtocolError):
            p.decode_response(msg_type, retention[:-1])


def test_ack_after_is_refused_where_it_cannot_be() -> None:
    frames = golden_frames()
    header, message = decode_frame(frames["append_turn_ack_remote"])
    assert header.flags == 2 << p.ACK_AFTER_SHIFT
    assert isinstance(message, p.AckAfter) and message.required_version == 4
    body = frames["append_turn_ack_remote"][p.HEADER_BYTES :]
    with pytest.raises(p.ProtocolError, match="ACK_AFTER is 3"):
        p.decode_request(p.MessageType.APPEND_TURN, body, p.ACK_AFTER_MASK)
    get_head = frames["get_head"][p.HEADER_BYTES :]
    with pytest.raises(p.ProtocolError, match="ACK_AFTER"):
        p.decode_request(p.MessageType.GET_HEAD, get_head, 1 << p.ACK_AFTER_SHIFT)
    with pytest.raises(ValueError, match="ACK_AFTER"):
        p.encode_request(1, p.AckAfter(p.GetHead(3), p.ACK_AFTER_LOCAL))
    assert p.Role().required_version == 4


def test_golden_quota_exceeded_raises_quota_exceeded_with_its_limit() -> None:
    _, message = decode_frame(golden_frames()["error_quota_exceeded"])
    assert isinstance(message, p.ErrorResponse)
    error = error_for_code(message.code, message.message, message.detail)
    assert type(error) is QuotaExceeded and error.code == 21 and error.limit == 100
    assert str(error) == (
        "QUOTA_EXCEEDED (21): tenant acme is at its quota_contexts: 100 of 100 contexts"
    )


def test_golden_tenants_are_the_public_tenant() -> None:
    _, message = decode_frame(golden_frames()["tenants_listed"])
    page = ops.tenant_page("acme", 100).finish(message)
    assert page.next == "globex"
    assert [ops._tenant_of(record) for record in page.tenants] == [
        Tenant(
            name="globex",
            tenant_id=2,
            in_tenants_file=True,
            registered=True,
            deleted=False,
            rights=("read", "write"),
            contexts=12,
            streams_open=1,
            stored_bytes=40960,
            connections=3,
            quota_bytes=1_000_000,
            quota_contexts=100,
            quota_appends_per_s=None,
            quota_connections=8,
            quota_streams=None,
            quota_refusals=5,
        )
    ]
    assert p.TenantList() == p.TenantList("", 1000)
    assert p.TenantList().required_version == 5


def test_tenant_list_refuses_what_its_layout_forbids() -> None:
    # The request: after at most 64 bytes, limit 1..=1000; both ways.
    for request in (p.TenantList("x" * 65), p.TenantList("", 0), p.TenantList("", 1001)):
        with pytest.raises(ValueError):
            p.encode_request(1, request)
    assert len(b"".join(p.encode_request(1, p.TenantList("x" * 64, 1000)))) == 16 + 2 + 64 + 4
    body = _body("tenant_list")  # after "acme" (2 + 4 bytes), then limit 100
    requests = {
        "limit 0": body[:6] + bytes(4),
        "limit 1001": body[:6] + (1001).to_bytes(4, "little"),
        "after over 64": (65).to_bytes(2, "little") + b"a" * 65 + body[6:],
        "trailing byte": body + b"\x00",
    }
    for case, broken in requests.items():
        with pytest.raises(p.ProtocolError):
            p.decode_request(p.MessageType.TENANT_LIST, broken)
            pytest.fail(case)
    # The answer: count (4), then tenant_id (4), flags (1), rights (1), name_len (2) and
    # "globex", ten u64, next_len (2) and "globex".
    body = _body("tenants_listed")
    name_end = 4 + 4 + 1 + 1 + 2 + 6
    answers = {
        "flags bit 3": body[:8] + b"\x0b" + body[9:],
        "rights bit 3": body[:9] + b"\x0b" + body[10:],
        "empty name": body[:10] + bytes(2) + body[name_end:],
        "name over 64": body[:10] + (65).to_bytes(2, "little") + b"g" * 65 + body[name_end:],
        "count over 1000": (1001).to_bytes(4, "little") + body[4:],
        "next over 64": body[:-8] + (65).to_bytes(2, "little") + b"z" * 65,
        "trailing byte": body + b"\x00",
        "one byte short": body[:-1],
    }
    for case, broken in answers.items():
        with pytest.raises(p.ProtocolError):
            p.decode_response(p.MessageType.TENANT_LIST.response_type, broken)
            pytest.fail(case)
    # What a (test) server cannot answer: undefined flag and right bits, empty or long names.
    tenant = p.TenantRecord(1, 0, 0, "a")
    for broken_tenant in (
        dataclasses.replace(tenant, flags=8),
        dataclasses.replace(tenant, rights=8),
        dataclasses.replace(tenant, name=""),
        dataclasses.replace(tenant, name="a" * 65),
    ):
        with pytest.raises(ValueError):
            p.TenantsListedResponse((broken_tenant,)).encode_body()
    with pytest.raises(ValueError):
        p.TenantsListedResponse((tenant,) * 1001).encode_body()
    with pytest.raises(ValueError):
        p.TenantsListedResponse((), "z" * 65).encode_body()
    # Bit 2, DELETED (TENANT_DELETE), is known: decoded, re-encoded, the public tenant's.
    deleted = body[:8] + bytes([p.TENANT_REGISTERED | p.TENANT_DELETED]) + body[9:]
    page = p.decode_response(p.MessageType.TENANT_LIST.response_type, deleted)
    assert isinstance(page, p.TenantsListedResponse)
    assert page.tenants[0].flags == p.TENANT_REGISTERED | p.TENANT_DELETED == 0b110
    assert page.encode_body() == deleted
    listed = ops._tenant_of(page.tenants[0])
    assert (listed.in_tenants_file, listed.registered, listed.deleted) == (False, True, True)
    assert ops._tenant_of(p.TenantRecord(2, p.TENANT_IN_FILE, 0, "a")).deleted is False


def test_golden_tenant_deleted_is_the_public_tenant_deleted() -> None:
    _, message = decode_frame(golden_frames()["tenant_deleted"])
    deleted = ops.delete_tenant("acme").finish(message)
    assert deleted == TenantDeleted(tenant_id=1, keys_destroyed=True, replica_updated=True)
    assert ops.delete_tenant("acme").request == p.TenantDelete("acme")
    assert p.TenantDelete("acme").required_version == 5
    for flags, destroyed, updated in ((0, False, False), (1, True, False), (2, False, True)):
        answer = p.TenantDeletedResponse(7, flags)
        assert ops.delete_tenant("a").finish(answer) == TenantDeleted(7, destroyed, updated)


def test_tenant_delete_refuses_what_its_layout_forbids() -> None:
    # The request: a name of 1 to 64 bytes of UTF-8; both ways.
    for request in (p.TenantDelete(""), p.TenantDelete("x" * 65), p.TenantDelete("é" * 33)):
        with pytest.raises(ValueError):
            p.encode_request(1, request)
    for name in ("", "x" * 65, "é" * 33):
        with pytest.raises(ValueError):
            ops.delete_tenant(name)
    with pytest.raises(TypeError):
        ops.delete_tenant(b"acme")  # type: ignore[arg-type]
    assert len(b"".join(p.encode_request(1, p.TenantDelete("x" * 64)))) == 16 + 2 + 64
    assert len(b"".join(p.encode_request(1, p.TenantDelete("é" * 32)))) == 16 + 2 + 64
    body = _body("tenant_delete")  # name_len (2), "acme"
    requests = {
        "empty name": bytes(2),
        "name over 64": (65).to_bytes(2, "little") + b"a" * 65,
        "name not UTF-8": b"\x02\x00\xff\xfe",
        "trailing byte": body + b"\x00",
        "one byte short": body[:-1],
    }
    for case, broken in requests.items():
        with pytest.raises(p.ProtocolError):
            p.decode_request(p.MessageType.TENANT_DELETE, broken)
            pytest.fail(case)
    # The answer: tenant_id (4, never 0), flags (4: bits 0 and 1 only).
    body = _body("tenant_deleted")
    assert len(body) == p.TENANT_DELETED_BYTES
    answers = {
        "tenant_id 0": bytes(4) + body[4:],
        "flags bit 2": body[:4] + (0b111).to_bytes(4, "little"),
        "flags bit 31": body[:4] + (1 << 31 | 1).to_bytes(4, "little"),
        "trailing byte": body + b"\x00",
        "one byte short": body[:-1],
    }
    for case, broken in answers.items():
        with pytest.raises(p.ProtocolError):
            p.decode_response(p.MessageType.TENANT_DELETE.response_type, broken)
            pytest.fail(case)
    # What a (test) server cannot answer: tenant 0, undefined flag bits.
    for broken_answer in (p.TenantDeletedResponse(0, 0), p.TenantDeletedResponse(1, 4)):
        with pytest.raises(ValueError):
            broken_answer.encode_body()


def test_golden_tenant_key_rotated_is_the_public_tenant_key_rotated() -> None:
    _, message = decode_frame(golden_frames()["tenant_key_rotated"])
    rotated = ops.rotate_tenant_key("globex").finish(message)
    assert rotated == TenantKeyRotated(tenant_id=2, key_version=3)
    assert ops.rotate_tenant_key("globex").request == p.TenantRotateKey("globex")
    assert p.TenantRotateKey("globex").required_version == 5
    # The operator's own data key: tenant 0.
    answer = p.TenantKeyRotatedResponse(0, 1)
    assert ops.rotate_tenant_key("operator").finish(answer) == TenantKeyRotated(0, 1)
    assert p.decode_response(answer.MSG_TYPES[0], answer.encode_body()) == answer
    # Each call makes another version: never sent again by itself.
    assert not resends_safely(p.TenantRotateKey("globex"))
    assert resends_safely(p.TenantDelete("globex"))


def test_tenant_rotate_key_refuses_what_its_layout_forbids() -> None:
    # The request: TENANT_DELETE's body, a name of 1 to 64 bytes of UTF-8; both ways.
    for request in (
        p.TenantRotateKey(""),
        p.TenantRotateKey("x" * 65),
        p.TenantRotateKey("é" * 33),
    ):
        with pytest.raises(ValueError):
            p.encode_request(1, request)
    for name in ("", "x" * 65, "é" * 33):
        with pytest.raises(ValueError):
            ops.rotate_tenant_key(name)
    with pytest.raises(TypeError):
        ops.rotate_tenant_key(b"acme")  # type: ignore[arg-type]
    assert len(b"".join(p.encode_request(1, p.TenantRotateKey("x" * 64)))) == 16 + 2 + 64
    assert len(b"".join(p.encode_request(1, p.TenantRotateKey("é" * 32)))) == 16 + 2 + 64
    assert _body("tenant_rotate_key") == b"\x06\x00globex"
    body = _body("tenant_rotate_key")
    requests = {
        "empty name": bytes(2),
        "name over 64": (65).to_bytes(2, "little") + b"a" * 65,
        "name not UTF-8": b"\x02\x00\xff\xfe",
        "trailing byte": body + b"\x00",
        "one byte short": body[:-1],
    }
    for case, broken in requests.items():
        with pytest.raises(p.ProtocolError):
            p.decode_request(p.MessageType.TENANT_ROTATE_KEY, broken)
            pytest.fail(case)
    # The answer: tenant_id (4, 0 allowed), key_version (2, never 0), reserved (2, zero).
    body = _body("tenant_key_rotated")
    assert len(body) == p.TENANT_KEY_ROTATED_BYTES
    answers = {
        "key_version 0": body[:4] + bytes(2) + body[6:],
        "reserved 1": body[:6] + b"\x01\x00",
        "reserved bit 15": body[:6] + b"\x00\x80",
        "trailing byte": body + b"\x00",
        "one byte short": body[:-1],
        "no reserved": body[:6],
        "a TENANT_DELETED's 8 bytes and more": body + bytes(4),
    }
    for case, broken in answers.items():
        with pytest.raises(p.ProtocolError):
            p.decode_response(p.MessageType.TENANT_ROTATE_KEY.response_type, broken)
            pytest.fail(case)
    for tenant_id, version in ((0, 1), (7, 64), (0xFFFF_FFFF, 0xFFFF)):
        encoded = p.TenantKeyRotatedResponse(tenant_id, version).encode_body()
        assert len(encoded) == p.TENANT_KEY_ROTATED_BYTES
        decoded = p.decode_response(p.MessageType.TENANT_ROTATE_KEY.response_type, encoded)
        assert decoded == p.TenantKeyRotatedResponse(tenant_id, version)
    # What a (test) server cannot answer: version 0, a version over a u16.
    for broken_answer in (p.TenantKeyRotatedResponse(1, 0), p.TenantKeyRotatedResponse(1, 65536)):
        with pytest.raises(ValueError):
            broken_answer.encode_body()


def test_tenant_pages_must_ascend_and_advance() -> None:
    def page(*names: str, next_name: str = "") -> p.TenantsListedResponse:
        return p.TenantsListedResponse(
            tuple(p.TenantRecord(0, p.TENANT_IN_FILE, 1, name) for name in names), next_name
        )

    assert ops.tenant_page("", 2).finish(page("a", "b", next_name="b")).next == "b"
    for after, limit, answer in (
        ("", 1, page("a", "b")),  # more than asked
        ("", 2, page("b", "a")),  # out of order
        ("b", 2, page("a")),  # not after `after`
        ("", 2, page("a", "a")),  # twice
        ("", 2, page("a", "b", next_name="a")),  # next behind the page
        ("c", 2, page(next_name="c")),  # next that does not advance
    ):
        with pytest.raises(p.ProtocolError):
            ops.tenant_page(after, limit).finish(answer)
