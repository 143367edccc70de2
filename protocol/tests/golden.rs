//! Golden vectors: `protocol/tests/golden-v1.txt`, `golden-v2.txt`, `golden-v3.txt` (and
//! `golden-v3-*.txt`), `golden-v4.txt`, `golden-v5.txt` and `golden-v6.txt` hold frames as hex with their meaning, for clients
//! in other languages to test against. Each must decode to the value below and
//! re-encode to exactly its bytes. To regenerate after a deliberate protocol change (which
//! needs a new protocol version): `CTXSTORE_WRITE_GOLDEN=1 cargo test -p ctxstore-protocol --test golden`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use ctxstore_protocol::*;
use ctxstore_protocol::{
    admin, appends, blobs, contexts, kv, overlays, reads, retention, streams, vectors,
};

enum Frame {
    Request(Request),
    Response(Response),
}

fn hash(seed: u8) -> BlobHash {
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = seed.wrapping_add(index as u8);
    }
    BlobHash(bytes)
}

fn turn() -> TurnWire {
    TurnWire {
        turn_id: 42,
        parent_turn_id: 41,
        context_id: 3,
        depth: 7,
        codec: 1,
        type_tag: 0x1122_3344_5566_7788,
        payload_hash: hash(0xa0),
        payload_len: 5,
        flags: 0,
        created_at_unix_ms: 1_767_225_600_000,
    }
}

/// Version 1: every layout as it was, byte for byte.
fn vectors() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    vec![
        (
            "hello_request",
            1,
            Q(Request::Admin(AdminRequest::Hello(admin::Hello {
                min_version: 1,
                max_version: 1,
                token: Bytes::from_static(b"secret"),
                client_name: "cli".into(),
            }))),
            "HELLO, req_id 1: protocol versions 1..=1, token \"secret\", client name \"cli\"",
        ),
        (
            "hello_response",
            1,
            R(Response::Admin(AdminResponse::Negotiated(
                admin::Negotiated {
                    version: 1,
                    limits: ServerLimits {
                        frame_bytes_max: 16 << 20,
                        requests_in_flight_max: 1024,
                        blob_bytes_max: 16 << 20,
                        read_turns_max: 10_000,
                        has_blobs_max: 4096,
                    },
                    server_name: "ctxstore".into(),
                },
            ))),
            "HELLO response: version 1, limits (frame 16 MiB, 1024 in flight, blob 16 MiB, 10000 turns per read, 4096 hashes per HAS_BLOBS), server \"ctxstore\"",
        ),
        (
            "ping_request",
            2,
            Q(Request::Admin(AdminRequest::Ping(admin::Ping {
                nonce: 0xdead_beef,
            }))),
            "PING, req_id 2, nonce 0xdeadbeef",
        ),
        (
            "pong_response",
            2,
            R(Response::Admin(AdminResponse::Pong(admin::Pong {
                nonce: 0xdead_beef,
            }))),
            "PING response echoing the nonce",
        ),
        (
            "ctx_create_empty",
            3,
            Q(Request::Contexts(ContextsRequest::CtxCreate(
                contexts::CtxCreate { base_turn_id: 0 },
            ))),
            "CTX_CREATE of an empty context",
        ),
        (
            "ctx_create_response",
            3,
            R(Response::Contexts(ContextsResponse::Context(
                contexts::Context {
                    message_type: MessageType::CtxCreate,
                    head: ContextHeadWire {
                        context_id: 3,
                        head_turn_id: 0,
                        head_depth: 0,
                    },
                },
            ))),
            "CTX_CREATE response: context 3, empty (head 0, depth 0)",
        ),
        (
            "ctx_fork",
            4,
            Q(Request::Contexts(ContextsRequest::CtxFork(
                contexts::CtxFork { turn_id: 42 },
            ))),
            "CTX_FORK at turn 42",
        ),
        (
            "get_head",
            5,
            Q(Request::Contexts(ContextsRequest::GetHead(
                contexts::GetHead {
                    context: ContextRef::Id(3),
                },
            ))),
            "GET_HEAD of context 3",
        ),
        (
            "get_head_response",
            5,
            R(Response::Contexts(ContextsResponse::Context(
                contexts::Context {
                    message_type: MessageType::GetHead,
                    head: ContextHeadWire {
                        context_id: 3,
                        head_turn_id: 42,
                        head_depth: 7,
                    },
                },
            ))),
            "GET_HEAD response: context 3 at turn 42, depth 7",
        ),
        (
            "append_turn",
            6,
            Q(Request::Appends(AppendsRequest::AppendTurn(
                appends::AppendTurn {
                    context: ContextRef::Id(3),
                    expected_head: Some(41),
                    type_tag: 0x1122_3344_5566_7788,
                    codec: 1,
                    payload: Bytes::from_static(b"hello"),
                },
            ))),
            "APPEND_TURN to context 3 if its head is turn 41; type tag 0x1122334455667788, codec 1, payload \"hello\"",
        ),
        (
            "appended_response",
            6,
            R(Response::Appends(AppendsResponse::Appended(
                appends::Appended {
                    message_type: MessageType::AppendTurn,
                    turn: turn(),
                    deduped: false,
                },
            ))),
            "APPEND_TURN response: turn 42 (parent 41, context 3, depth 7), not deduplicated",
        ),
        (
            "append_turn_by_hash",
            7,
            Q(Request::Appends(AppendsRequest::AppendTurnByHash(
                appends::AppendTurnByHash {
                    context: ContextRef::Id(3),
                    expected_head: None,
                    type_tag: 9,
                    codec: 2,
                    payload_hash: hash(0xa0),
                },
            ))),
            "APPEND_TURN_BY_HASH to context 3 (no expected head), payload hash a0a1a2…bf",
        ),
        (
            "get_turn",
            8,
            Q(Request::Reads(ReadsRequest::GetTurn(reads::GetTurn {
                turn_id: 42,
            }))),
            "GET_TURN 42",
        ),
        (
            "turn_response",
            8,
            R(Response::Reads(ReadsResponse::Turn(turn()))),
            "GET_TURN response: turn 42",
        ),
        (
            "get_last_with_payloads",
            9,
            Q(Request::Reads(ReadsRequest::GetLast(reads::GetLast {
                context: ContextRef::Id(3),
                limit: 64,
                read_flags: read_flags::WITH_PAYLOADS | read_flags::ACCEPT_ZSTD,
            }))),
            "GET_LAST 64 of context 3, with payloads, zstd accepted",
        ),
        (
            "turns_response",
            9,
            R(Response::Reads(ReadsResponse::Turns(reads::Turns {
                message_type: MessageType::GetLast,
                next_before: 42,
                tip_depth: 7,
                entries: vec![TurnEntry {
                    turn: turn(),
                    payload: PayloadWire {
                        encoding: PayloadEncoding::Raw,
                        raw_len: 5,
                        data: Bytes::from_static(b"hello"),
                    },
                }],
            }))),
            "GET_LAST response: one turn (42) with its raw payload \"hello\"; next page before turn 42; tip depth 7",
        ),
        (
            "get_before",
            10,
            Q(Request::Reads(ReadsRequest::GetBefore(reads::GetBefore {
                context: ContextRef::Id(3),
                before_turn_id: 42,
                limit: 10,
                read_flags: 0,
            }))),
            "GET_BEFORE turn 42 in context 3, 10 turns, no payloads",
        ),
        (
            "get_range_by_depth",
            11,
            Q(Request::Reads(ReadsRequest::GetRangeByDepth(
                reads::GetRangeByDepth {
                    context: ContextRef::Id(3),
                    from_depth: 2,
                    limit: 5,
                    read_flags: 0,
                },
            ))),
            "GET_RANGE_BY_DEPTH of context 3, depths 2..7",
        ),
        (
            "get_chain",
            12,
            Q(Request::Reads(ReadsRequest::GetChain(reads::GetChain {
                turn_id: 42,
                from_depth: 0,
                limit: 100,
                read_flags: read_flags::WITH_PAYLOADS,
            }))),
            "GET_CHAIN root → turn 42, first 100 turns, raw payloads",
        ),
        (
            "get_blob",
            13,
            Q(Request::Blobs(BlobsRequest::GetBlob(blobs::GetBlob {
                hash: hash(0xa0),
                read_flags: 0,
            }))),
            "GET_BLOB a0a1…bf, raw",
        ),
        (
            "blob_response",
            13,
            R(Response::Blobs(BlobsResponse::Blob(PayloadWire {
                encoding: PayloadEncoding::Raw,
                raw_len: 5,
                data: Bytes::from_static(b"hello"),
            }))),
            "GET_BLOB response: \"hello\"",
        ),
        (
            "has_blobs",
            14,
            Q(Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs {
                hashes: vec![hash(0xa0), hash(0x00)],
            }))),
            "HAS_BLOBS of two hashes",
        ),
        (
            "has_blobs_response",
            14,
            R(Response::Blobs(BlobsResponse::BlobsHeld(
                blobs::BlobsHeld {
                    present: vec![true, false],
                },
            ))),
            "HAS_BLOBS response: first present, second not",
        ),
        (
            "stats",
            15,
            Q(Request::Admin(AdminRequest::Stats(admin::Stats))),
            "STATS",
        ),
        (
            "stats_response",
            15,
            R(Response::Admin(AdminResponse::Stats(StatsWire {
                turns: 10,
                contexts: 2,
                blobs: 8,
                logical_bytes: 1000,
                unique_bytes: 800,
                stored_bytes: 500,
                dedup_hits: 2,
                read_only: false,
                connections: 1,
                requests_total: 20,
                errors_total: 1,
                uptime_ms: 5000,
            }))),
            "STATS response",
        ),
        (
            "error_conflict",
            6,
            R(Response::Error {
                code: ErrorCode::Conflict,
                detail: 42,
                message: "head moved".into(),
            }),
            "ERROR CONFLICT for req_id 6: actual head 42, message \"head moved\"",
        ),
        (
            "error_bad_frame",
            0,
            R(Response::Error {
                code: ErrorCode::BadFrame,
                detail: 0,
                message: "bad".into(),
            }),
            "ERROR BAD_FRAME, req_id 0 (framing lost)",
        ),
    ]
}

fn encode(req_id: u64, frame: &Frame) -> Vec<u8> {
    match frame {
        Frame::Request(request) => {
            let mut out = BytesMut::new();
            encode_request(req_id, request, &mut out).expect("golden requests are encodable");
            out.to_vec()
        }
        Frame::Response(response) => encode_response(req_id, response)
            .iter()
            .flat_map(|c| c.to_vec())
            .collect(),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn from_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

type Vector = (&'static str, u64, Frame, &'static str);

fn info(context_id: u64, name: Option<&str>, tags: &[(&str, &str)]) -> ContextInfoWire {
    ContextInfoWire {
        head: ContextHeadWire {
            context_id,
            head_turn_id: 42,
            head_depth: 7,
        },
        created_at_unix_ms: 1_767_225_600_000,
        updated_at_unix_ms: 1_767_225_601_000,
        name: name.map(str::to_string),
        tags: tags
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
    }
}

fn named(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

/// Version 2 (decision 0007): contexts by name, tags, listing, key-value, and every message
/// version 2 gained since (appended, never changed).
fn vectors_v2() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    vec![
        (
            "hello_request_v2",
            1,
            Q(Request::Admin(AdminRequest::Hello(admin::Hello {
                min_version: 1,
                max_version: 2,
                token: Bytes::new(),
                client_name: "py".into(),
            }))),
            "HELLO offering versions 1..=2, no token, client \"py\"",
        ),
        (
            "get_head_by_name",
            2,
            Q(Request::Contexts(ContextsRequest::GetHead(
                contexts::GetHead {
                    context: named("t-1"),
                },
            ))),
            "GET_HEAD of the context named \"t-1\" (frame flag CTX_BY_NAME: name instead of context_id)",
        ),
        (
            "append_turn_by_name",
            3,
            Q(Request::Appends(AppendsRequest::AppendTurn(
                appends::AppendTurn {
                    context: named("t-1"),
                    expected_head: None,
                    type_tag: 1,
                    codec: 0,
                    payload: Bytes::from_static(b"hi"),
                },
            ))),
            "APPEND_TURN to \"t-1\" (CTX_BY_NAME), type tag 1, payload \"hi\"",
        ),
        (
            "ctx_open",
            4,
            Q(Request::Contexts(ContextsRequest::CtxOpen(
                contexts::CtxOpen {
                    base_turn_id: 0,
                    get_or_create: true,
                    clone_from: None,
                    name: Some("t-1".into()),
                    tags: vec![("status".into(), "idle".into())],
                },
            ))),
            "CTX_OPEN get-or-create of an empty context named \"t-1\" tagged status=idle",
        ),
        (
            "ctx_open_clone",
            5,
            Q(Request::Contexts(ContextsRequest::CtxOpen(
                contexts::CtxOpen {
                    base_turn_id: 0,
                    get_or_create: false,
                    clone_from: Some(ContextRef::Id(3)),
                    name: Some("t-2".into()),
                    tags: vec![],
                },
            ))),
            "CTX_OPEN cloning context 3 as \"t-2\"",
        ),
        (
            "opened_response",
            4,
            R(Response::Contexts(ContextsResponse::Opened(
                contexts::Opened {
                    info: info(3, Some("t-1"), &[("status", "idle")]),
                    created: true,
                },
            ))),
            "CTX_OPEN response: context 3 at turn 42 (depth 7), named \"t-1\", status=idle, created",
        ),
        (
            "ctx_show",
            6,
            Q(Request::Contexts(ContextsRequest::CtxShow(
                contexts::CtxShow {
                    context: named("t-1"),
                },
            ))),
            "CTX_SHOW of \"t-1\"",
        ),
        (
            "context_info_response",
            6,
            R(Response::Contexts(ContextsResponse::ContextInfo(
                contexts::ContextInfo {
                    message_type: MessageType::CtxShow,
                    info: info(3, Some("t-1"), &[("status", "idle")]),
                },
            ))),
            "CTX_SHOW response: CONTEXT_INFO of context 3",
        ),
        (
            "ctx_tag",
            7,
            Q(Request::Contexts(ContextsRequest::CtxTag(
                contexts::CtxTag {
                    context: ContextRef::Id(3),
                    expected_head: Some(42),
                    set: vec![("status".into(), "done".into())],
                    remove: vec!["owner".into()],
                },
            ))),
            "CTX_TAG context 3 if its head is turn 42: set status=done, remove owner",
        ),
        (
            "ctx_list",
            8,
            Q(Request::Contexts(ContextsRequest::CtxList(
                contexts::CtxList {
                    tags: vec![("status".into(), "idle".into())],
                    name_prefix: Some("t-".into()),
                    updated_after_unix_ms: Some(1_767_225_600_000),
                    updated_before_unix_ms: None,
                    cursor: Some(ListCursorWire::Name("t-1".into())),
                    limit: 100,
                },
            ))),
            "CTX_LIST status=idle, names starting \"t-\", updated after 1767225600000, after \"t-1\", 100 per page",
        ),
        (
            "context_list_response",
            8,
            R(Response::Contexts(ContextsResponse::ContextList(
                contexts::ContextList {
                    next_cursor: Some(ListCursorWire::Id(3)),
                    contexts: vec![info(3, None, &[])],
                },
            ))),
            "CTX_LIST response: one context (3, no name, no tags); next page after context 3",
        ),
        (
            "ctx_name",
            9,
            Q(Request::Contexts(ContextsRequest::CtxName(
                contexts::CtxName {
                    context: ContextRef::Id(3),
                    name: "t-3".into(),
                },
            ))),
            "CTX_NAME: name context 3 \"t-3\"",
        ),
        (
            "kv_put",
            10,
            Q(Request::Kv(KvRequest::KvPut(kv::KvPut {
                context: named("t-1"),
                if_absent: true,
                entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v1"))],
            }))),
            "KV_PUT to \"t-1\" if absent: k = \"v1\"",
        ),
        (
            "kv_put_response",
            10,
            R(Response::Kv(KvResponse::Done(kv::Done {
                message_type: MessageType::KvPut,
            }))),
            "KV_PUT response (empty body)",
        ),
        (
            "kv_get",
            11,
            Q(Request::Kv(KvRequest::KvGet(kv::KvGet {
                context: ContextRef::Id(3),
                key: Bytes::from_static(b"k"),
                read_flags: 0,
            }))),
            "KV_GET k of context 3, raw",
        ),
        (
            "kv_value_response",
            11,
            R(Response::Kv(KvResponse::KvValue(kv::KvValue {
                value_hash: hash(0xa0),
                payload: PayloadWire::raw(Bytes::from_static(b"v1")),
            }))),
            "KV_GET response: value hash a0a1…bf, raw \"v1\"",
        ),
        (
            "kv_delete",
            12,
            Q(Request::Kv(KvRequest::KvDelete(kv::KvDelete {
                context: ContextRef::Id(3),
                keys: vec![Bytes::from_static(b"k")],
            }))),
            "KV_DELETE k of context 3",
        ),
        (
            "kv_list",
            13,
            Q(Request::Kv(KvRequest::KvList(kv::KvList {
                context: ContextRef::Id(3),
                prefix: Bytes::from_static(b"w:"),
                after: Bytes::new(),
                limit: 1000,
            }))),
            "KV_LIST of context 3, keys starting \"w:\", from the first, 1000 per page",
        ),
        (
            "kv_list_response",
            13,
            R(Response::Kv(KvResponse::KvListed(kv::KvListed {
                items: vec![KvItemWire {
                    key: Bytes::from_static(b"w:1"),
                    value_hash: hash(0xa0),
                    value_len: 2,
                }],
            }))),
            "KV_LIST response: w:1 (value hash a0a1…bf, 2 bytes)",
        ),
        (
            "append_turns",
            14,
            Q(Request::Appends(AppendsRequest::AppendTurns(
                appends::AppendTurns {
                    context: named("t-1"),
                    expected_head: Some(42),
                    turns: vec![
                        TurnSpec {
                            parent: ParentWire::Head,
                            type_tag: 1,
                            codec: 0,
                            summary: false,
                            extras: ExtrasWire {
                                key: Bytes::from_static(b"cp-1"),
                                labels: vec![("step".into(), "1".into())],
                                links: vec![],
                            },
                            payload: PayloadSpec::Bytes(Bytes::from_static(b"hi")),
                        },
                        TurnSpec {
                            parent: ParentWire::Turn(41),
                            type_tag: 2,
                            codec: 0,
                            summary: true,
                            extras: ExtrasWire {
                                key: Bytes::new(),
                                labels: vec![],
                                links: vec![7],
                            },
                            payload: PayloadSpec::Hash(hash(0xa0)),
                        },
                    ],
                },
            ))),
            "APPEND_TURNS to \"t-1\" if its head is turn 42: \"hi\" keyed cp-1 with step=1 after the head, then a summary after turn 41 linking turn 7, payload by hash a0a1…bf",
        ),
        (
            "appended_turns_response",
            14,
            R(Response::Appends(AppendsResponse::AppendedTurns(
                appends::AppendedTurns {
                    turns: vec![AppendedWire {
                        turn: turn(),
                        deduped: false,
                        existing: true,
                    }],
                },
            ))),
            "APPEND_TURNS response: turn 42, not deduplicated, its key existed already",
        ),
        (
            "get_turn_by_key",
            15,
            Q(Request::Reads(ReadsRequest::GetTurnByKey(
                reads::GetTurnByKey {
                    context: ContextRef::Id(3),
                    key: Bytes::from_static(b"cp-1"),
                },
            ))),
            "GET_TURN_BY_KEY cp-1 in context 3",
        ),
        (
            "turn_info_response",
            15,
            R(Response::Reads(ReadsResponse::TurnInfo(reads::TurnInfo {
                turn: Box::new(turn()),
                extras: ExtrasWire {
                    key: Bytes::from_static(b"cp-1"),
                    labels: vec![("step".into(), "1".into())],
                    links: vec![],
                },
            }))),
            "GET_TURN_BY_KEY response: turn 42 with key cp-1 and step=1",
        ),
        (
            "turn_log",
            16,
            Q(Request::Reads(ReadsRequest::TurnLog(reads::TurnLog {
                context: ContextRef::Id(3),
                labels: vec![("run_id".into(), "r1".into())],
                cursor: Some(LogCursorWire { phase: 0, next: 41 }),
                limit: 100,
                read_flags: read_flags::WITH_PAYLOADS,
            }))),
            "TURN_LOG of context 3 with run_id=r1, from turn 41 of phase 0, 100 turns, raw payloads",
        ),
        (
            "turn_log_response",
            16,
            R(Response::Reads(ReadsResponse::TurnLogPage(
                reads::TurnLogPage {
                    next_cursor: None,
                    entries: vec![TurnEntryV2 {
                        turn: turn(),
                        extras: ExtrasWire::default(),
                        payload: PayloadWire::raw(Bytes::from_static(b"hello")),
                    }],
                },
            ))),
            "TURN_LOG response: turn 42 (no extras) with its payload \"hello\"; the log is complete",
        ),
        (
            "read_page_window",
            17,
            Q(Request::Reads(ReadsRequest::ReadPage(reads::ReadPage {
                context: named("t-1"),
                kind: PageKind::Window,
                limit: 64,
                read_flags: read_flags::WITH_PAYLOADS | read_flags::ACCEPT_ZSTD,
            }))),
            "READ_PAGE of \"t-1\": its window (latest summary to head), 64 turns, payloads, zstd accepted",
        ),
        (
            "page_response",
            17,
            R(Response::Reads(ReadsResponse::Page(reads::Page {
                next_before: 0,
                tip_depth: 7,
                entries: vec![TurnEntryV2 {
                    turn: turn(),
                    extras: ExtrasWire::default(),
                    payload: PayloadWire::absent(),
                }],
            }))),
            "READ_PAGE response: turn 42 without payload; tip depth 7",
        ),
        (
            "find_turns",
            18,
            Q(Request::Reads(ReadsRequest::FindTurns(reads::FindTurns {
                key: "run_id".into(),
                value: "r1".into(),
                before_turn_id: 0,
                limit: 100,
            }))),
            "FIND_TURNS of every context's turns labelled run_id=r1, newest first, 100 per page",
        ),
        (
            "found_turns_response",
            18,
            R(Response::Reads(ReadsResponse::FoundTurns(
                reads::FoundTurns {
                    next_before: 42,
                    turns: vec![(
                        turn(),
                        ExtrasWire {
                            key: Bytes::new(),
                            labels: vec![("run_id".into(), "r1".into())],
                            links: vec![],
                        },
                    )],
                },
            ))),
            "FIND_TURNS response: turn 42 labelled run_id=r1; next page before turn 42",
        ),
        (
            "ctx_delete",
            19,
            Q(Request::Retention(RetentionRequest::CtxDelete(
                retention::CtxDelete {
                    context: ContextRef::Name("thread-1".into()),
                },
            ))),
            "CTX_DELETE of the context named \"thread-1\"",
        ),
        (
            "ctx_prune",
            20,
            Q(Request::Retention(RetentionRequest::CtxPrune(
                retention::CtxPrune {
                    context: ContextRef::Id(3),
                    keep: 20,
                },
            ))),
            "CTX_PRUNE of context 3: keep the newest 20 depths of its chain",
        ),
        (
            "ctx_ttl",
            21,
            Q(Request::Retention(RetentionRequest::CtxTtl(
                retention::CtxTtl {
                    context: ContextRef::Id(3),
                    set: true,
                    ttl_ms: 7 * 24 * 3600 * 1000,
                },
            ))),
            "CTX_TTL of context 3: set its time to live to 7 days",
        ),
        (
            "ctx_prune_response",
            20,
            R(Response::Retention(RetentionResponse::Retention(
                retention::Retention {
                    message_type: MessageType::CtxPrune,
                    info: info(3, Some("thread-1"), &[]),
                    floor_depth: 7,
                    ttl_ms: 604_800_000,
                },
            ))),
            "CTX_PRUNE response: context 3 (head 42 at depth 7) now floored at depth 7, TTL 7 days",
        ),
        (
            "backup",
            22,
            Q(Request::Admin(AdminRequest::Backup(admin::Backup {
                dir: "/var/backups/ctxstore-1".into(),
            }))),
            "BACKUP into /var/backups/ctxstore-1 on the server's host",
        ),
        (
            "backup_response",
            22,
            R(Response::Admin(AdminResponse::BackedUp(BackupWire {
                turns: 1000,
                blobs: 800,
                bytes: 1 << 30,
                linked_bytes: 1 << 29,
                duration_ms: 1234,
                dir: "/var/backups/ctxstore-1".into(),
            }))),
            "BACKUP response: 1000 turns, 800 blobs, 1 GiB of which 512 MiB hard-linked, 1.234 s",
        ),
        (
            "gc",
            23,
            Q(Request::Admin(AdminRequest::Gc(admin::Gc))),
            "GC: run a garbage collection now (gc_flags 0)",
        ),
        (
            "gc_done_response",
            23,
            R(Response::Admin(AdminResponse::GcDone(GcWire {
                turns_dead: 1500,
                blobs_dead: 1200,
                bytes_reclaimed: 12 << 20,
                packs_compacted: 3,
                live_bytes: 1 << 30,
                dead_bytes: 2 << 20,
                duration_ms: 4321,
            }))),
            "GC response: 1500 turns and 1200 blobs collected, 12 MiB reclaimed from 3 compacted packs, 1 GiB live, 2 MiB dead left, 4.321 s",
        ),
        (
            "stats_ex",
            24,
            Q(Request::Admin(AdminRequest::StatsEx(admin::StatsEx))),
            "STATS_EX: STATS with the garbage collector's fields",
        ),
        (
            "stats_ex_response",
            24,
            R(Response::Admin(AdminResponse::ExtendedStats(
                admin::ExtendedStats {
                    stats: Box::new(StatsWire {
                        turns: 1000,
                        contexts: 10,
                        blobs: 800,
                        logical_bytes: 10 << 20,
                        unique_bytes: 8 << 20,
                        stored_bytes: 4 << 20,
                        dedup_hits: 200,
                        connections: 2,
                        requests_total: 5000,
                        errors_total: 1,
                        uptime_ms: 60_000,
                        read_only: false,
                    }),
                    gc: GcStatsWire {
                        live_bytes: 3 << 20,
                        dead_bytes: 1 << 20,
                        gc_runs: 2,
                        bytes_reclaimed_total: 5 << 20,
                    },
                },
            ))),
            "STATS_EX response: STATS' 96 bytes (1000 turns, 10 contexts, 800 blobs, …, not read-only), then live 3 MiB, dead 1 MiB, 2 collections, 5 MiB reclaimed",
        ),
        (
            "error_already_exists",
            4,
            R(Response::Error {
                code: ErrorCode::AlreadyExists,
                detail: 3,
                message: "name taken".into(),
            }),
            "ERROR ALREADY_EXISTS: the name belongs to context 3",
        ),
        (
            "patch_turn",
            23,
            Q(Request::Overlays(OverlaysRequest::PatchTurn(
                overlays::PatchTurn {
                    turn_id: 42,
                    payload: Bytes::from_static(b"fixed"),
                },
            ))),
            "PATCH_TURN: turn 42 reads \"fixed\" from now on",
        ),
        (
            "patch_turn_response",
            23,
            R(Response::Overlays(OverlaysResponse::Patched(
                overlays::Patched {
                    turn_id: 42,
                    overlay_seq: 57,
                    payload_hash: hash(0xa0),
                    payload_len: 5,
                },
            ))),
            "PATCH_TURN response: turn 42, overlay 57, payload a0a1…bf of 5 bytes",
        ),
        (
            "redact_turn",
            24,
            Q(Request::Overlays(OverlaysRequest::RedactTurn(
                overlays::RedactTurn { turn_id: 42 },
            ))),
            "REDACT_TURN: turn 42 loses its payload",
        ),
        (
            "redact_turn_response",
            24,
            R(Response::Overlays(OverlaysResponse::Redacted(
                overlays::Redacted {
                    turn_id: 42,
                    overlay_seq: 58,
                },
            ))),
            "REDACT_TURN response: turn 42 redacted by overlay 58",
        ),
        (
            "purge_blob",
            25,
            Q(Request::Overlays(OverlaysRequest::PurgeBlob(
                overlays::PurgeBlob { hash: hash(0xa0) },
            ))),
            "PURGE_BLOB a0a1…bf: redact every turn naming it",
        ),
        (
            "purge_blob_response",
            25,
            R(Response::Overlays(OverlaysResponse::Purged(
                overlays::Purged {
                    payload_hash: hash(0xa0),
                    turns_redacted: 3,
                    overlay_seq: 62,
                },
            ))),
            "PURGE_BLOB response: 3 turns redacted, the purge record is 62",
        ),
        (
            "get_turn_as_of",
            26,
            Q(Request::AsOf {
                as_of: 57,
                read: ReadsRequest::GetTurn(reads::GetTurn { turn_id: 42 }),
            }),
            "GET_TURN 42 as of overlay 57 (frame flag OVERLAYS: u64 as_of after the body)",
        ),
        (
            "turn_overlaid_response",
            26,
            R(Response::Overlaid {
                response: Box::new(ReadsResponse::Turn(turn())),
                overlays: vec![OverlayWire {
                    overlay_seq: 57,
                    redacted: false,
                }],
            }),
            "GET_TURN response with OVERLAYS: turn 42 as patched by overlay 57",
        ),
        (
            "read_page_as_of_latest",
            27,
            Q(Request::AsOf {
                as_of: 0,
                read: ReadsRequest::ReadPage(reads::ReadPage {
                    context: named("t-1"),
                    kind: PageKind::Last,
                    limit: 10,
                    read_flags: read_flags::WITH_PAYLOADS,
                }),
            }),
            "READ_PAGE LAST 10 of \"t-1\" with payloads, the latest overlay view (as_of 0)",
        ),
        (
            "page_overlaid_response",
            27,
            R(Response::Overlaid {
                response: Box::new(ReadsResponse::Page(reads::Page {
                    next_before: 0,
                    tip_depth: 7,
                    entries: vec![TurnEntryV2 {
                        turn: TurnWire {
                            // BLAKE3 of no bytes: what a redacted turn reads with.
                            payload_hash: BlobHash(
                                from_hex(
                                    "af1349b9f5f9a1a6a0404dea36dcc949\
                                     9bcb25c9adc112b7cc9a93cae41f3262",
                                )
                                .try_into()
                                .unwrap(),
                            ),
                            payload_len: 0,
                            ..turn()
                        },
                        extras: ExtrasWire::default(),
                        payload: PayloadWire::raw(Bytes::new()),
                    }],
                })),
                overlays: vec![OverlayWire {
                    overlay_seq: 58,
                    redacted: true,
                }],
            }),
            "READ_PAGE response with OVERLAYS: turn 42 redacted by overlay 58 (empty payload)",
        ),
        (
            "get_last_by_name_as_of",
            28,
            Q(Request::AsOf {
                as_of: 57,
                read: ReadsRequest::GetLast(reads::GetLast {
                    context: named("t-1"),
                    limit: 1,
                    read_flags: 0,
                }),
            }),
            "GET_LAST 1 of \"t-1\" as of overlay 57 (flags CTX_BY_NAME | OVERLAYS)",
        ),
        (
            "put_chunked",
            29,
            Q(Request::Blobs(BlobsRequest::PutChunked(
                blobs::PutChunked {
                    payload_hash: hash(0xa0),
                    base: None,
                    chunks: vec![
                        ChunkWire {
                            hash: hash(0x10),
                            len: 4,
                        },
                        ChunkWire {
                            hash: hash(0x40),
                            len: 3,
                        },
                        ChunkWire {
                            hash: hash(0x70),
                            len: 5,
                        },
                    ],
                    sent: vec![SentChunkWire {
                        index: 1,
                        bytes: Bytes::from_static(b"new"),
                    }],
                },
            ))),
            "PUT_CHUNKED: payload a0a1…bf as 3 chunks (101112… 4 B, 404142… 3 B, 707172… 5 B); sends chunk 1 (\"new\"), the server has the others",
        ),
        (
            "put_chunked_with_base",
            29,
            Q(Request::Blobs(BlobsRequest::PutChunked(
                blobs::PutChunked {
                    payload_hash: hash(0xc0),
                    base: Some(ChunkBaseWire {
                        hash: hash(0xa0),
                        kept: 2,
                    }),
                    chunks: vec![ChunkWire {
                        hash: hash(0x90),
                        len: 6,
                    }],
                    sent: vec![SentChunkWire {
                        index: 0,
                        bytes: Bytes::from_static(b"grown!"),
                    }],
                },
            ))),
            "PUT_CHUNKED: payload c0c1…df = the first 2 chunks of a0a1…bf, then chunk 909192… (6 B, sent: \"grown!\")",
        ),
        (
            "chunked_stored_response",
            29,
            R(Response::Blobs(BlobsResponse::ChunkedStored(
                blobs::ChunkedStored {
                    payload_hash: hash(0xa0),
                    payload_len: 12,
                    already_stored: false,
                },
            ))),
            "PUT_CHUNKED response (CHUNKED_STORED): payload a0a1…bf of 12 bytes, stored by this request",
        ),
        (
            "error_hash_mismatch",
            29,
            R(Response::Error {
                code: ErrorCode::HashMismatch,
                detail: 0,
                message: "chunk 1 does not hash to 404142…".into(),
            }),
            "ERROR HASH_MISMATCH: a sent chunk's bytes do not hash to its entry",
        ),
    ]
}

/// The messages version 3 gained (appended, never changed): key-value TTL (issue 34).
fn vectors_v3() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    let item = |key: &'static [u8], ttl_ms: u64, expires_at_unix_ms: u64| KvItemExWire {
        key: Bytes::from_static(key),
        value_hash: hash(0xa0),
        value_len: 2,
        ttl_ms,
        expires_at_unix_ms,
    };
    vec![
        (
            "kv_put_ex",
            20,
            Q(Request::Kv(KvRequest::KvPutEx(kv::KvPutEx {
                context: named("lgs:default"),
                put_flags: kv_put_flags::IF_ABSENT,
                ttl_ms: 30_000,
                entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v1"))],
            }))),
            "KV_PUT_EX to \"lgs:default\" if absent, TTL 30 s: k = \"v1\"",
        ),
        (
            "kv_put_ex_response",
            20,
            R(Response::Kv(KvResponse::Done(kv::Done {
                message_type: MessageType::KvPutEx,
            }))),
            "KV_PUT_EX response (empty body)",
        ),
        (
            "kv_get_ex",
            21,
            Q(Request::Kv(KvRequest::KvGetEx(kv::KvGetEx {
                context: ContextRef::Id(3),
                key: Bytes::from_static(b"k"),
                read_flags: 0,
                kv_flags: kv_read_flags::REFRESH,
            }))),
            "KV_GET_EX k of context 3, raw, refreshing its TTL",
        ),
        (
            "kv_value_ex_response",
            21,
            R(Response::Kv(KvResponse::KvValueEx(kv::KvValueEx {
                value_hash: hash(0xa0),
                ttl_ms: 30_000,
                expires_at_unix_ms: 1_800_000_030_000,
                payload: PayloadWire::raw(Bytes::from_static(b"v1")),
            }))),
            "KV_GET_EX response: value hash a0a1…bf, TTL 30 s, expires at 1800000030000, raw \"v1\"",
        ),
        (
            "kv_list_ex",
            22,
            Q(Request::Kv(KvRequest::KvListEx(kv::KvListEx {
                context: ContextRef::Id(3),
                prefix: Bytes::from_static(b"w:"),
                after: Bytes::new(),
                limit: 1000,
                kv_flags: 0,
            }))),
            "KV_LIST_EX of context 3, keys starting \"w:\", from the first, 1000 per page",
        ),
        (
            "kv_list_ex_response",
            22,
            R(Response::Kv(KvResponse::KvListedEx(kv::KvListedEx {
                items: vec![item(b"w:1", 30_000, 1_800_000_030_000), item(b"w:2", 0, 0)],
            }))),
            "KV_LIST_EX response: w:1 (TTL 30 s, expires at 1800000030000), w:2 (no TTL)",
        ),
        (
            "kv_touch",
            23,
            Q(Request::Kv(KvRequest::KvTouch(kv::KvTouch {
                context: ContextRef::Id(3),
                ttl_ms: 0,
                keys: vec![Bytes::from_static(b"w:1"), Bytes::from_static(b"gone")],
            }))),
            "KV_TOUCH w:1 and gone of context 3, each with its own TTL",
        ),
        (
            "kv_touched_response",
            23,
            R(Response::Kv(KvResponse::KvTouched(kv::KvTouched {
                items: vec![item(b"w:1", 30_000, 1_800_000_045_000)],
            }))),
            "KV_TOUCH response: w:1 (TTL 30 s, expires at 1800000045000); gone is absent",
        ),
        (
            "replication_stats",
            24,
            Q(Request::Admin(AdminRequest::ReplicationStats(
                admin::ReplicationStats,
            ))),
            "REPLICATION_STATS (empty body)",
        ),
        (
            "replication_stats_response",
            24,
            R(Response::Admin(AdminResponse::ReplicationStats(Box::new(
                ReplicationStatsWire {
                    role: ReplicationRoleWire::Standby,
                    state: ReplicationStateWire::Following,
                    promoting: false,
                    generation: 2,
                    epoch: 3,
                    seq: 41,
                    records: 1200,
                    records_unix_ms: 1_800_000_000_000,
                    lag_ms: 1500,
                    lag_bytes: 4096,
                    objects_total: 42,
                    bytes_total: 1 << 20,
                    last_success_unix_ms: 1_800_000_001_000,
                    backlog_objects: 1,
                    segment_bytes_max: 64 << 20,
                    target: "s3://agents/ctx".into(),
                    primary: "the primary at 10.0.0.5:7411 (host a1)".into(),
                    reason: String::new(),
                    failures: vec![("store".into(), 2)],
                },
            )))),
            "REPLICATION_STATS response: a standby following s3://agents/ctx, generation 2, \
             epoch 3, segment 41 applied (records up to 1200, cut at 1800000000000), 1.5 s and \
             4096 bytes behind, 42 objects (1 MiB) fetched, last poll at 1800000001000, one \
             segment listed and not applied, segments of at most 64 MiB, naming the primary at \
             10.0.0.5:7411, no reason, 2 store failures",
        ),
        (
            "kv_get_many",
            25,
            Q(Request::Kv(KvRequest::KvGetMany(kv::KvGetMany {
                context: ContextRef::Id(3),
                read_flags: 0,
                keys: vec![Bytes::from_static(b"k"), Bytes::from_static(b"gone")],
            }))),
            "KV_GET_MANY k and gone of context 3, raw",
        ),
        (
            "kv_values_response",
            25,
            R(Response::Kv(KvResponse::KvValues(kv::KvValues {
                values: vec![
                    Some(kv::KvValueEx {
                        value_hash: hash(0xa0),
                        ttl_ms: 30_000,
                        expires_at_unix_ms: 1_800_000_030_000,
                        payload: PayloadWire::raw(Bytes::from_static(b"v1")),
                    }),
                    None,
                ],
            }))),
            "KV_GET_MANY response: k (value hash a0a1…bf, TTL 30 s, expires at 1800000030000, \
             raw \"v1\"); gone is absent",
        ),
    ]
}

/// Version 3's payloads compressed by the client (TURN_SPEC flag ZSTD, issue 38), in a file of
/// their own: a client that sends them tests against it (the Python client's
/// `tests/test_compression.py`; the TypeScript client, which does not send them yet, covers
/// every frame of golden-v1..3.txt).
fn vectors_v3_zstd() -> Vec<Vector> {
    use Frame::Request as Q;
    vec![(
        "append_turns_zstd",
        16,
        Q(Request::Appends(AppendsRequest::AppendTurns(
            appends::AppendTurns {
                context: ContextRef::Id(3),
                expected_head: None,
                turns: vec![TurnSpec {
                    parent: ParentWire::Head,
                    type_tag: 1,
                    codec: 1,
                    summary: false,
                    extras: ExtrasWire::default(),
                    // `printf 'hello, hello, hello, hello' | zstd -1 --no-check`: 22 bytes.
                    payload: PayloadSpec::Zstd {
                        hash: BlobHash::of(b"hello, hello, hello, hello"),
                        raw_len: 26,
                        frame: Bytes::from_static(&[
                            0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x48, 0x6d, 0x00, 0x00, 0x38, 0x68, 0x65,
                            0x6c, 0x6c, 0x6f, 0x2c, 0x20, 0x01, 0x00, 0x4a, 0x8a, 0x11,
                        ]),
                    },
                }],
            },
        ))),
        "APPEND_TURNS to context 3: one turn after the head whose payload the client compressed \
         (TURN_SPEC flag ZSTD): a zstd frame of 22 bytes that inflates to the 26 bytes \
         \"hello, hello, hello, hello\", with their BLAKE3",
    )]
}

/// Checks (or with CTXSTORE_WRITE_GOLDEN rewrites) one golden file; requests decode as a
/// connection of `version` would.
fn check_golden(file: &str, version: u16, vectors: Vec<Vector>) {
    if std::env::var("CTXSTORE_WRITE_GOLDEN").is_ok() {
        let mut text = format!(
            "# ctxstore protocol version {version}: golden frames (see docs/protocol.md).\n\
             # One frame per line: name | frame as hex (16-byte header, then body) | meaning.\n",
        );
        for (name, req_id, frame, meaning) in &vectors {
            text.push_str(&format!(
                "{name} | {} | {meaning}\n",
                to_hex(&encode(*req_id, frame))
            ));
        }
        std::fs::write(file, text).unwrap();
    }
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), vectors.len(), "one line per vector");
    for ((name, req_id, frame, _), line) in vectors.iter().zip(lines) {
        let mut fields = line.split(" | ");
        assert_eq!(fields.next(), Some(*name));
        let bytes = from_hex(fields.next().unwrap());
        assert_eq!(bytes, encode(*req_id, frame), "{name}: encoding changed");
        let mut header = [0u8; HEADER_BYTES];
        header.copy_from_slice(&bytes[..HEADER_BYTES]);
        let header = FrameHeader::decode(&header);
        assert_eq!(header.req_id, *req_id);
        assert_eq!(header.len as usize, bytes.len() - HEADER_BYTES);
        let body = Bytes::copy_from_slice(&bytes[HEADER_BYTES..]);
        match frame {
            Frame::Request(request) => {
                let decoded = decode_request_as(version, &header, body).unwrap();
                assert_eq!(&decoded, request, "{name}")
            }
            Frame::Response(response) => {
                assert_eq!(&decode_response(&header, body).unwrap(), response, "{name}")
            }
        }
    }
}

#[test]
fn golden_vectors_v1_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v1.txt"),
        1,
        vectors(),
    );
}

#[test]
fn golden_vectors_v3_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v3.txt"),
        3,
        vectors_v3(),
    );
}

#[test]
fn version_3_messages_are_unknown_to_older_connections() {
    for (name, _, frame, _) in vectors_v3() {
        let Frame::Request(request) = frame else {
            continue;
        };
        let bytes = encode(1, &Frame::Request(request));
        let mut header = [0u8; HEADER_BYTES];
        header.copy_from_slice(&bytes[..HEADER_BYTES]);
        let header = FrameHeader::decode(&header);
        let body = Bytes::copy_from_slice(&bytes[HEADER_BYTES..]);
        let error = decode_request_as(2, &header, body).unwrap_err();
        assert!(
            matches!(error, DecodeError::UnknownMessage(code) if code == header.msg_type),
            "{name}: {error:?}"
        );
    }
}

#[test]
fn golden_vectors_v2_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v2.txt"),
        2,
        vectors_v2(),
    );
}

/// Version 3's streams family (issue 32, decision 0027), in a file of its own: a client that
/// implements streams tests against it (the Python client's `tests/test_stream_golden.py`, the
/// TypeScript client's `test/streams.test.ts`).
fn vectors_v3_streams() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    let info = StreamInfoWire {
        stream_id: 57,
        context_id: 3,
        length: 11,
        type_tag: 2,
        codec: 1,
        opened_at_unix_ms: 1_767_225_600_000,
        updated_at_unix_ms: 1_767_225_601_000,
    };
    vec![
        (
            "hello_request_v3",
            1,
            Q(Request::Admin(AdminRequest::Hello(admin::Hello {
                min_version: 1,
                max_version: 3,
                token: Bytes::new(),
                client_name: "py".into(),
            }))),
            "HELLO offering versions 1..=3, no token, client \"py\"",
        ),
        (
            "stream_open",
            40,
            Q(Request::Streams(StreamsRequest::StreamOpen(
                streams::StreamOpen {
                    context: named("t-1"),
                    expected_head: Some(42),
                    parent: ParentWire::Head,
                    type_tag: 2,
                    codec: 1,
                    summary: false,
                    extras: ExtrasWire {
                        key: Bytes::from_static(b"a-1"),
                        labels: vec![("role".into(), "assistant".into())],
                        links: vec![],
                    },
                },
            ))),
            "STREAM_OPEN on \"t-1\", sealed only if the head is still turn 42, type 2, codec 1, key a-1, role=assistant",
        ),
        (
            "stream_opened_response",
            40,
            R(Response::Streams(StreamsResponse::Opened(
                streams::Opened { info },
            ))),
            "STREAM_OPEN response: stream 57 of context 3, 11 bytes so far",
        ),
        (
            "stream_append",
            41,
            Q(Request::Streams(StreamsRequest::StreamAppend(
                streams::StreamAppend {
                    stream_id: 57,
                    offset: None,
                    bytes: Bytes::from_static(b"Hello"),
                },
            ))),
            "STREAM_APPEND \"Hello\" at the end of stream 57",
        ),
        (
            "stream_append_at_offset",
            42,
            Q(Request::Streams(StreamsRequest::StreamAppend(
                streams::StreamAppend {
                    stream_id: 57,
                    offset: Some(5),
                    bytes: Bytes::from_static(b", world"),
                },
            ))),
            "STREAM_APPEND \", world\" to stream 57 only at offset 5 (AT_OFFSET)",
        ),
        (
            "stream_appended_response",
            42,
            R(Response::Streams(StreamsResponse::Appended(
                streams::Appended {
                    stream_id: 57,
                    length: 12,
                },
            ))),
            "STREAM_APPEND response: stream 57 holds 12 durable bytes",
        ),
        (
            "stream_seal",
            43,
            Q(Request::Streams(StreamsRequest::StreamSeal(
                streams::StreamSeal { stream_id: 57 },
            ))),
            "STREAM_SEAL of stream 57",
        ),
        (
            "stream_sealed_response",
            43,
            R(Response::Streams(StreamsResponse::Sealed(
                streams::Sealed {
                    turn: turn(),
                    deduped: false,
                },
            ))),
            "STREAM_SEAL response: turn 42, a new blob",
        ),
        (
            "stream_abort",
            44,
            Q(Request::Streams(StreamsRequest::StreamAbort(
                streams::StreamAbort { stream_id: 58 },
            ))),
            "STREAM_ABORT of stream 58",
        ),
        (
            "stream_aborted_response",
            44,
            R(Response::Streams(StreamsResponse::Aborted(
                streams::Aborted { stream_id: 58 },
            ))),
            "STREAM_ABORT response: stream 58",
        ),
        (
            "stream_list",
            45,
            Q(Request::Streams(StreamsRequest::StreamList(
                streams::StreamList {
                    context: ContextRef::Id(3),
                    after_stream_id: 0,
                    limit: 100,
                },
            ))),
            "STREAM_LIST of context 3, from the first, 100 at most",
        ),
        (
            "stream_listed_response",
            45,
            R(Response::Streams(StreamsResponse::Listed(
                streams::Listed {
                    streams: vec![info],
                },
            ))),
            "STREAM_LIST response: stream 57",
        ),
        (
            "stream_read_wait",
            46,
            Q(Request::Streams(StreamsRequest::StreamRead(
                streams::StreamRead {
                    stream_id: 57,
                    offset: 5,
                    bytes_max: 65_536,
                    wait_ms: 30_000,
                },
            ))),
            "STREAM_READ of stream 57 from offset 5, 64 KiB at most, waiting up to 30 s",
        ),
        (
            "stream_read_response",
            46,
            R(Response::Streams(StreamsResponse::Read(streams::Read {
                stream_id: 57,
                state: StreamStateWire::Open,
                offset: 5,
                length: 12,
                bytes: Bytes::from_static(b", world"),
            }))),
            "STREAM_READ response: open, bytes 5..12 of 12",
        ),
        (
            "stream_read_sealed_response",
            47,
            R(Response::Streams(StreamsResponse::Read(streams::Read {
                stream_id: 57,
                state: StreamStateWire::Sealed(42),
                offset: 12,
                length: 0,
                bytes: Bytes::new(),
            }))),
            "STREAM_READ response: sealed into turn 42 (read the turn)",
        ),
        (
            "watch_tag",
            48,
            Q(Request::Streams(StreamsRequest::Watch(streams::Watch {
                target: WatchTargetWire::Tag("team".into(), "a".into()),
                after_seq: 41,
                max_events: 100,
                wait_ms: 30_000,
            }))),
            "WATCH the contexts tagged team=a after event 41, 100 at most, waiting up to 30 s",
        ),
        (
            "watched_response",
            48,
            R(Response::Streams(StreamsResponse::Watched(
                streams::Watched {
                    lagged: false,
                    resume_after: 58,
                    events: vec![
                        WatchEventWire {
                            seq: 42,
                            kind: WatchKindWire::Head,
                            context_id: 3,
                            turn_id: 42,
                            stream_id: 0,
                        },
                        WatchEventWire {
                            seq: 58,
                            kind: WatchKindWire::StreamSealed,
                            context_id: 3,
                            turn_id: 42,
                            stream_id: 57,
                        },
                    ],
                },
            ))),
            "WATCH response: context 3's head moved to turn 42, stream 57 sealed into it; resume after 58",
        ),
        (
            "watch_lagged_response",
            49,
            R(Response::Streams(StreamsResponse::Watched(
                streams::Watched {
                    lagged: true,
                    resume_after: 90_000,
                    events: vec![],
                },
            ))),
            "WATCH response: lagged (events after the one asked are gone); re-read, then resume after 90000",
        ),
        (
            "error_stream_ended",
            41,
            R(Response::Error {
                code: ErrorCode::StreamEnded,
                detail: 42,
                message: "stream 57 was sealed into turn 42".into(),
            }),
            "ERROR STREAM_ENDED: stream 57 takes no deltas, sealed into turn 42 (detail)",
        ),
    ]
}

#[test]
fn golden_vectors_v3_streams_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v3-streams.txt"),
        3,
        vectors_v3_streams(),
    );
}

#[test]
fn a_version_2_connection_refuses_every_version_3_message() {
    for (name, req_id, frame, _) in vectors_v3_streams() {
        let Frame::Request(request) = frame else {
            continue;
        };
        if request.message_type().since_version() < 3 {
            continue;
        }
        let bytes = encode(req_id, &Frame::Request(request.clone()));
        let mut header = [0u8; HEADER_BYTES];
        header.copy_from_slice(&bytes[..HEADER_BYTES]);
        let header = FrameHeader::decode(&header);
        let body = Bytes::copy_from_slice(&bytes[HEADER_BYTES..]);
        assert_eq!(
            decode_request_as(2, &header, body),
            Err(DecodeError::UnknownMessage(header.msg_type)),
            "{name}"
        );
    }
}

#[test]
fn golden_vectors_v3_zstd_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v3-zstd.txt"),
        3,
        vectors_v3_zstd(),
    );
}

/// A ZSTD payload on a connection that negotiated version 2 is refused, as any newer layout.
#[test]
fn a_zstd_payload_needs_version_3() {
    let (_, req_id, frame, _) = &vectors_v3_zstd()[0];
    let bytes = encode(*req_id, frame);
    let mut header = [0u8; HEADER_BYTES];
    header.copy_from_slice(&bytes[..HEADER_BYTES]);
    let header = FrameHeader::decode(&header);
    let body = Bytes::copy_from_slice(&bytes[HEADER_BYTES..]);
    assert!(decode_request_as(2, &header, body.clone()).is_err());
    assert!(decode_request_as(3, &header, body).is_ok());
}

/// STREAM_FOLLOW (version 3, issue 32): a push read of a stream, in a file of its own (no
/// other language's client reads it yet; they pick their golden files by name).
fn vectors_v3_follow() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    vec![
        (
            "stream_follow",
            50,
            Q(Request::Streams(StreamsRequest::StreamFollow(
                streams::StreamFollow {
                    stream_id: 57,
                    offset: 5,
                    bytes_max: 64 * 1024,
                    wait_ms: 30_000,
                },
            ))),
            "STREAM_FOLLOW of stream 57 from offset 5, 64 KiB a frame at most, ending after 30 s without a delta",
        ),
        (
            "stream_pushed_more",
            50,
            R(Response::Streams(StreamsResponse::Pushed(
                streams::Pushed {
                    more: true,
                    stream_id: 57,
                    state: StreamStateWire::Open,
                    offset: 5,
                    length: 12,
                    bytes: Bytes::from_static(b", world"),
                },
            ))),
            "STREAM_FOLLOW frame with MORE (flags 0x0004): open, bytes 5..12 of 12; more frames follow from 12",
        ),
        (
            "stream_pushed_sealed",
            50,
            R(Response::Streams(StreamsResponse::Pushed(
                streams::Pushed {
                    more: false,
                    stream_id: 57,
                    state: StreamStateWire::Sealed(42),
                    offset: 12,
                    length: 0,
                    bytes: Bytes::new(),
                },
            ))),
            "STREAM_FOLLOW last frame (no MORE): sealed into turn 42 (read the turn)",
        ),
        (
            "stream_pushed_idle",
            51,
            R(Response::Streams(StreamsResponse::Pushed(
                streams::Pushed {
                    more: false,
                    stream_id: 58,
                    state: StreamStateWire::Open,
                    offset: 12,
                    length: 12,
                    bytes: Bytes::new(),
                },
            ))),
            "STREAM_FOLLOW last frame (no MORE): open, no delta for wait_ms; follow again from offset 12",
        ),
        (
            "error_follow_not_found",
            52,
            R(Response::Error {
                code: ErrorCode::NotFound,
                detail: 0,
                message: "stream 59 not found".into(),
            }),
            "ERROR NOT_FOUND: the last (and only) answer to a STREAM_FOLLOW of an unknown stream",
        ),
    ]
}

#[test]
fn golden_vectors_v3_follow_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v3-follow.txt"),
        3,
        vectors_v3_follow(),
    );
}

#[test]
fn stream_follow_is_unknown_to_a_version_2_connection() {
    let (_, req_id, frame, _) = &vectors_v3_follow()[0];
    let bytes = encode(*req_id, frame);
    let mut header = [0u8; HEADER_BYTES];
    header.copy_from_slice(&bytes[..HEADER_BYTES]);
    let header = FrameHeader::decode(&header);
    let body = Bytes::copy_from_slice(&bytes[HEADER_BYTES..]);
    assert_eq!(
        decode_request_as(2, &header, body.clone()),
        Err(DecodeError::UnknownMessage(0x0038))
    );
    assert!(decode_request_as(3, &header, body).is_ok());
}

/// MORE belongs to STREAM_FOLLOW's frames, and only to those that end nothing: on any other
/// answer, on an ended stream's frame or on an empty one it is refused, never taken.
#[test]
fn more_is_refused_where_it_cannot_be() {
    fn flagged(frame: &Frame, req_id: u64, flags: u16) -> Result<Response, DecodeError> {
        let bytes = encode(req_id, frame);
        let mut header = [0u8; HEADER_BYTES];
        header.copy_from_slice(&bytes[..HEADER_BYTES]);
        let mut header = FrameHeader::decode(&header);
        header.flags = flags;
        decode_response(&header, Bytes::copy_from_slice(&bytes[HEADER_BYTES..]))
    }
    let vectors = vectors_v3_follow();
    let (_, _, more, _) = &vectors[1];
    let Frame::Response(Response::Streams(StreamsResponse::Pushed(streams::Pushed {
        bytes, ..
    }))) = more
    else {
        panic!("the second vector is a frame with MORE");
    };
    assert_eq!(bytes.as_ref(), b", world");
    // The same body as a STREAM_READ answer: MORE is not its flag.
    let read = Frame::Response(Response::Streams(StreamsResponse::Read(streams::Read {
        stream_id: 57,
        state: StreamStateWire::Open,
        offset: 5,
        length: 12,
        bytes: bytes.clone(),
    })));
    assert!(flagged(&read, 1, 0).is_ok());
    assert!(flagged(&read, 1, frame_flags::MORE).is_err());
    for (name, req_id, frame, _) in &vectors[2..4] {
        assert!(flagged(frame, *req_id, 0).is_ok(), "{name}");
        assert!(
            flagged(frame, *req_id, frame_flags::MORE).is_err(),
            "{name}: a frame that ends the follow cannot say MORE"
        );
    }
}

/// Version 4 (decision 0031): ROLE, the frame flag ACK_AFTER on the writes that take it, and
/// the error codes NOT_PRIMARY and UNCONFIRMED. Every version-1..3 byte is unchanged.
fn vectors_v4() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    let acked = |request: Request, after: AckAfter| Request::AckAfter {
        request: Box::new(request),
        after,
    };
    vec![
        (
            "hello_request_v4",
            1,
            Q(Request::Admin(AdminRequest::Hello(admin::Hello {
                min_version: 1,
                max_version: 4,
                token: Bytes::new(),
                client_name: "py".into(),
            }))),
            "HELLO offering versions 1..=4, no token, client \"py\"",
        ),
        (
            "role",
            60,
            Q(Request::Admin(AdminRequest::Role(admin::Role))),
            "ROLE (empty body)",
        ),
        (
            "role_primary_response",
            60,
            R(Response::Admin(AdminResponse::RoleAnswer(Box::new(
                admin::RoleAnswer {
                    role: admin::ServerRole::Primary,
                    accepts_writes: true,
                    ack_after: AckAfter::Local,
                    epoch: 3,
                    lease_ms: 10_000,
                    lease_age_ms: 1_200,
                    ack_open_ms: 7_500,
                    failovers: 1,
                    last_failover_ms: 12_400,
                    remote_waiting: 2,
                    remote_acks_total: 1_000,
                    remote_unconfirmed_total: 1,
                    remote_ack_us_p50: 45_000,
                    remote_ack_us_p99: 180_000,
                    primary: "10.0.0.5:7411".into(),
                    holder: "a1:4242".into(),
                },
            )))),
            "ROLE response: a primary taking writes, acknowledging after local by default, epoch 3, \
             a 10 s lease renewed 1.2 s ago, 7.5 s of acknowledgements open, one failover that \
             closed writes for 12.4 s, 2 remote acknowledgements waiting, 1000 sent, 1 \
             unconfirmed, waits of 45 ms (median) and 180 ms (p99); itself at 10.0.0.5:7411, \
             holder a1:4242",
        ),
        (
            "role_standby_response",
            61,
            R(Response::Admin(AdminResponse::RoleAnswer(Box::new(
                admin::RoleAnswer {
                    role: admin::ServerRole::Standby,
                    accepts_writes: false,
                    ack_after: AckAfter::Local,
                    epoch: 3,
                    lease_ms: 0,
                    lease_age_ms: 0,
                    ack_open_ms: 0,
                    failovers: 0,
                    last_failover_ms: 0,
                    remote_waiting: 0,
                    remote_acks_total: 0,
                    remote_unconfirmed_total: 0,
                    remote_ack_us_p50: 0,
                    remote_ack_us_p99: 0,
                    primary: String::new(),
                    holder: String::new(),
                },
            )))),
            "ROLE response: a standby, no writes, epoch 3, no lease (its figures 0), the primary \
             and the holder unknown (empty)",
        ),
        (
            "append_turn_ack_remote",
            62,
            Q(acked(
                Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
                    context: ContextRef::Id(3),
                    expected_head: None,
                    type_tag: 1,
                    codec: 0,
                    payload: Bytes::from_static(b"hello"),
                })),
                AckAfter::Remote,
            )),
            "APPEND_TURN to context 3 with ACK_AFTER remote (flags 0x0010): acknowledged once \
             the object store holds it",
        ),
        (
            "append_turn_by_name_ack_local",
            63,
            Q(acked(
                Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
                    context: named("t-1"),
                    expected_head: None,
                    type_tag: 1,
                    codec: 0,
                    payload: Bytes::from_static(b"hi"),
                })),
                AckAfter::Local,
            )),
            "APPEND_TURN to \"t-1\" (CTX_BY_NAME) with ACK_AFTER local: flags 0x0009",
        ),
        (
            "kv_put_ack_remote",
            64,
            Q(acked(
                Request::Kv(KvRequest::KvPut(kv::KvPut {
                    context: ContextRef::Id(3),
                    if_absent: false,
                    entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v1"))],
                })),
                AckAfter::Remote,
            )),
            "KV_PUT to context 3 with ACK_AFTER remote (flags 0x0010): k = \"v1\"",
        ),
        (
            "stream_seal_ack_remote",
            65,
            Q(acked(
                Request::Streams(StreamsRequest::StreamSeal(streams::StreamSeal {
                    stream_id: 57,
                })),
                AckAfter::Remote,
            )),
            "STREAM_SEAL of stream 57 with ACK_AFTER remote (flags 0x0010)",
        ),
        (
            "error_not_primary",
            62,
            R(Response::Error {
                code: ErrorCode::NotPrimary,
                detail: 3,
                message: "not the primary: this store is a standby; send writes to 10.0.0.5:7411"
                    .into(),
            }),
            "ERROR NOT_PRIMARY (19): nothing was written; detail 3, the newest epoch it knows",
        ),
        (
            "error_unconfirmed",
            62,
            R(Response::Error {
                code: ErrorCode::Unconfirmed,
                detail: 42,
                message: "turn 42 is durable here but the object store did not store it in time"
                    .into(),
            }),
            "ERROR UNCONFIRMED (20): turn 42 is durable here, not confirmed remote; retry with \
             its key",
        ),
    ]
}

#[test]
fn golden_vectors_v4_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v4.txt"),
        4,
        vectors_v4(),
    );
}

/// Version 5 (decision 0032 §3, §8): HELLO may offer it, and QUOTA_EXCEEDED is a new ERROR
/// code; no message changes its layout.
fn vectors_v5() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    vec![
        (
            "hello_request_v5",
            1,
            Q(Request::Admin(AdminRequest::Hello(admin::Hello {
                min_version: 1,
                max_version: 5,
                token: Bytes::from_static(b"t0k"),
                client_name: "ts".into(),
            }))),
            "HELLO offering versions 1..=5, token \"t0k\", client \"ts\"",
        ),
        (
            "error_quota_exceeded",
            70,
            R(Response::Error {
                code: ErrorCode::QuotaExceeded,
                detail: 100,
                message: "tenant acme is at its quota_contexts: 100 of 100 contexts".into(),
            }),
            "ERROR QUOTA_EXCEEDED (21): nothing was written; detail 100, the quota's limit",
        ),
        (
            "tenant_list",
            71,
            Q(Request::Admin(AdminRequest::TenantList(
                admin::TenantList {
                    after: "acme".into(),
                    limit: 100,
                },
            ))),
            "TENANT_LIST: up to 100 tenants whose names sort after \"acme\"",
        ),
        (
            "tenants_listed",
            71,
            R(Response::Admin(AdminResponse::TenantsListed(
                admin::TenantsListed {
                    tenants: vec![admin::TenantWire {
                        tenant_id: 2,
                        flags: admin::tenant_flags::IN_FILE | admin::tenant_flags::REGISTERED,
                        rights: admin::tenant_rights::READ | admin::tenant_rights::WRITE,
                        name: "globex".into(),
                        contexts: 12,
                        streams_open: 1,
                        stored_bytes: 40_960,
                        connections: 3,
                        quotas: admin::QuotasWire {
                            bytes: 1_000_000,
                            contexts: 100,
                            appends_per_s: 0,
                            connections: 8,
                            streams: 0,
                        },
                        refusals: 5,
                    }],
                    next: "globex".into(),
                },
            ))),
            "TENANTS: globex (tenant 2, in the file and registered, read and write): 12 \
             contexts, 1 open stream, 40960 stored bytes, 3 connections; quotas 1000000 bytes, \
             100 contexts, 8 connections (0: none); 5 refusals; more after \"globex\"",
        ),
        (
            "tenant_delete",
            72,
            Q(Request::Admin(AdminRequest::TenantDelete(
                admin::TenantDelete {
                    name: "acme".into(),
                },
            ))),
            "TENANT_DELETE of tenant \"acme\"",
        ),
        (
            "tenant_deleted",
            72,
            R(Response::Admin(AdminResponse::TenantDeleted(
                admin::TenantDeleted {
                    tenant_id: 1,
                    flags: admin::tenant_deleted_flags::KEYS_DESTROYED
                        | admin::tenant_deleted_flags::REPLICA_UPDATED,
                },
            ))),
            "TENANT_DELETED: tenant 1, its keys destroyed (1) and the replica updated (2)",
        ),
        (
            "tenant_rotate_key",
            73,
            Q(Request::Admin(AdminRequest::TenantRotateKey(
                admin::TenantRotateKey {
                    name: "globex".into(),
                },
            ))),
            "TENANT_ROTATE_KEY of tenant \"globex\"",
        ),
        (
            "tenant_key_rotated",
            73,
            R(Response::Admin(AdminResponse::TenantKeyRotated(
                admin::TenantKeyRotated {
                    tenant_id: 2,
                    key_version: 3,
                },
            ))),
            "TENANT_KEY_ROTATED: tenant 2 seals its new payloads under data key version 3",
        ),
    ]
}

#[test]
fn golden_vectors_v5_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v5.txt"),
        5,
        vectors_v5(),
    );
}

/// Version 6: vector search (decision 0033).
fn vectors_v6() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    let index = vectors::VectorIndexWire {
        index_id: 1,
        dims: 3,
        metric: 1,
        ef_search: 128,
        vectors: 2,
        name: "memories".into(),
    };
    vec![
        (
            "vector_index_create",
            81,
            Q(Request::Vectors(VectorsRequest::VectorIndexCreate(
                vectors::VectorIndexCreate {
                    name: "memories".into(),
                    dims: 3,
                    metric: 1,
                    ef_search: 0,
                },
            ))),
            "VECTOR_INDEX_CREATE \"memories\": 3 dimensions, metric 1 (cosine), ef_search 0 \
             (the server's default)",
        ),
        (
            "vector_index",
            81,
            R(Response::Vectors(VectorsResponse::VectorIndex(
                index.clone(),
            ))),
            "VECTOR_INDEX: index 1 \"memories\", 3 dimensions, cosine, ef_search 128, 2 vectors",
        ),
        (
            "vector_index_drop",
            82,
            Q(Request::Vectors(VectorsRequest::VectorIndexDrop(
                vectors::VectorIndexDrop {
                    name: "memories".into(),
                },
            ))),
            "VECTOR_INDEX_DROP \"memories\"",
        ),
        (
            "vector_index_dropped",
            82,
            R(Response::Vectors(VectorsResponse::VectorIndexDropped(
                index.clone(),
            ))),
            "VECTOR_INDEX_DROPPED: the index as it was",
        ),
        (
            "vector_index_list",
            83,
            Q(Request::Vectors(VectorsRequest::VectorIndexList(
                vectors::VectorIndexList {},
            ))),
            "VECTOR_INDEX_LIST: the tenant's indexes",
        ),
        (
            "vector_indexes",
            83,
            R(Response::Vectors(VectorsResponse::VectorIndexes(
                vectors::VectorIndexes {
                    indexes: vec![index],
                },
            ))),
            "VECTOR_INDEXES: one index",
        ),
        (
            "kv_put_vectors",
            84,
            Q(Request::Vectors(VectorsRequest::KvPutVectors(
                vectors::KvPutVectors {
                    context: ContextRef::Name("lgs:main".into()),
                    put_flags: 0,
                    ttl_ms: 0,
                    index: "memories".into(),
                    dims: 3,
                    entries: vec![
                        vectors::VectorEntryWire {
                            key: Bytes::from_static(b"i/a"),
                            value: Bytes::from_static(b"{\"text\":\"hi\"}"),
                            vectors: vec![vec![1.0, 0.0, -0.5], vec![0.25, 0.5, 2.0]],
                        },
                        vectors::VectorEntryWire {
                            key: Bytes::from_static(b"i/b"),
                            value: Bytes::from_static(b"{}"),
                            vectors: vec![],
                        },
                    ],
                },
            ))),
            "KV_PUT_VECTORS to context \"lgs:main\", index \"memories\" of 3 dimensions: i/a \
             with two vectors, i/b with none",
        ),
        (
            "kv_put_vectors_stored",
            84,
            R(Response::Vectors(VectorsResponse::Stored(
                vectors::Stored {},
            ))),
            "KV_PUT_VECTORS' answer: empty",
        ),
        (
            "vector_search",
            85,
            Q(Request::Vectors(VectorsRequest::VectorSearch(
                vectors::VectorSearch {
                    context: ContextRef::Id(3),
                    index: "memories".into(),
                    vector: vec![1.0, 0.0, 0.0],
                    k: 2,
                    offset: 1,
                    search_flags: vectors::vector_search_flags::EXACT,
                    ef_search: 0,
                    prefix: Bytes::from_static(b"i/"),
                    filter: Bytes::from_static(b"{\"color\":{\"$ne\":\"red\"}}"),
                },
            ))),
            "VECTOR_SEARCH of context 3 in \"memories\" for (1, 0, 0): 2 hits after 1, exact, \
             under \"i/\", values whose color is not red",
        ),
        (
            "vector_hits",
            85,
            R(Response::Vectors(VectorsResponse::VectorHits(
                vectors::VectorHits {
                    method: vectors::vector_search_method::EXACT,
                    candidates: 4,
                    hits: vec![vectors::VectorHitWire {
                        key: Bytes::from_static(b"i/a"),
                        score: 0.875,
                        value_hash: hash(0x30),
                        value_len: 13,
                    }],
                },
            ))),
            "VECTOR_HITS: exact, 4 vectors compared, one hit i/a scoring 0.875",
        ),
    ]
}

#[test]
fn golden_vectors_v6_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v6.txt"),
        6,
        vectors_v6(),
    );
}

/// Version 7 (issue 49, decision 0033): vectors on turns and the search over them.
fn vectors_v7() -> Vec<Vector> {
    use Frame::{Request as Q, Response as R};
    vec![
        (
            "append_turns_vectors",
            86,
            Q(Request::Vectors(VectorsRequest::AppendTurnsVectors(
                vectors::AppendTurnsVectors {
                    context: ContextRef::Name("thread-1".into()),
                    expected_head: Some(42),
                    index: "recall".into(),
                    dims: 3,
                    turns: vec![
                        vectors::VectorTurnWire {
                            spec: TurnSpec {
                                parent: ParentWire::Head,
                                type_tag: 1,
                                codec: 0,
                                summary: false,
                                extras: ExtrasWire {
                                    key: Bytes::new(),
                                    labels: vec![("role".into(), "user".into())],
                                    links: vec![],
                                },
                                payload: PayloadSpec::Bytes(Bytes::from_static(b"hi")),
                            },
                            vectors: vec![vec![1.0, 0.0, -0.5]],
                        },
                        vectors::VectorTurnWire {
                            spec: TurnSpec {
                                parent: ParentWire::Head,
                                type_tag: 2,
                                codec: 0,
                                summary: false,
                                extras: ExtrasWire {
                                    key: Bytes::new(),
                                    labels: vec![],
                                    links: vec![],
                                },
                                payload: PayloadSpec::Bytes(Bytes::from_static(b"ok")),
                            },
                            vectors: vec![],
                        },
                    ],
                },
            ))),
            "APPEND_TURNS_VECTORS to \"thread-1\" if its head is turn 42, index \"recall\" of 3 \
             dimensions: \"hi\" (role=user) with one vector, then \"ok\" with none",
        ),
        (
            "turns_stored",
            86,
            R(Response::Vectors(VectorsResponse::TurnsStored(
                appends::AppendedTurns {
                    turns: vec![AppendedWire {
                        turn: turn(),
                        deduped: false,
                        existing: false,
                    }],
                },
            ))),
            "APPEND_TURNS_VECTORS' answer: APPENDED_TURNS, turn 42",
        ),
        (
            "vector_search_turns",
            87,
            Q(Request::Vectors(VectorsRequest::VectorSearchTurns(
                vectors::VectorSearchTurns {
                    index: "recall".into(),
                    vector: vec![1.0, 0.0, 0.0],
                    k: 5,
                    offset: 0,
                    search_flags: vectors::vector_search_flags::TYPE_TAG,
                    ef_search: 0,
                    context: ContextRef::Id(0),
                    name_prefix: "user-42/".into(),
                    tags: vec![("project".into(), "x".into())],
                    labels: vec![("role".into(), "user".into())],
                    type_tag: 1,
                },
            ))),
            "VECTOR_SEARCH_TURNS in \"recall\" for (1, 0, 0): 5 turns of the contexts named \
             user-42/… tagged project=x, labelled role=user, of type 1",
        ),
        (
            "turn_hits",
            87,
            R(Response::Vectors(VectorsResponse::TurnHits(
                vectors::TurnHits {
                    method: vectors::vector_search_method::GRAPH,
                    candidates: 300,
                    hits: vec![vectors::TurnHitWire {
                        turn: turn(),
                        score: 0.75,
                    }],
                },
            ))),
            "TURN_HITS: the graph walked, 300 vectors compared, turn 42 scoring 0.75",
        ),
    ]
}

#[test]
fn golden_vectors_v7_decode_and_reencode_byte_exactly() {
    check_golden(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v7.txt"),
        7,
        vectors_v7(),
    );
}

/// A connection of version 1 to 6 gets UNKNOWN_MESSAGE for every message of version 7.
#[test]
fn a_version_6_connection_refuses_the_turn_vector_messages() {
    for (name, req_id, frame, _) in vectors_v7() {
        let Frame::Request(request) = frame else {
            continue;
        };
        let code = request.message_type().code();
        let (header, body) = split(&encode(req_id, &Frame::Request(request)));
        for version in 1..7 {
            let refused = decode_request_as(version, &header, body.clone());
            assert_eq!(refused, Err(DecodeError::UnknownMessage(code)), "{name}");
        }
    }
}

/// A connection of version 1 to 5 gets UNKNOWN_MESSAGE for every message of version 6.
#[test]
fn a_version_5_connection_refuses_the_vector_messages() {
    for (name, req_id, frame, _) in vectors_v6() {
        let Frame::Request(request) = frame else {
            continue;
        };
        let code = request.message_type().code();
        let (header, body) = split(&encode(req_id, &Frame::Request(request)));
        for version in 1..6 {
            let refused = decode_request_as(version, &header, body.clone());
            assert_eq!(refused, Err(DecodeError::UnknownMessage(code)), "{name}");
        }
    }
}

/// What version 4 adds reaches no older connection: ROLE is UNKNOWN_MESSAGE there, a frame
/// with ACK_AFTER a bad frame; the same write without the flag decodes as before.
#[test]
fn a_version_3_connection_refuses_role_and_ack_after() {
    for (name, req_id, frame, _) in vectors_v4() {
        let Frame::Request(request) = frame else {
            continue;
        };
        let (header, body) = split(&encode(req_id, &Frame::Request(request.clone())));
        for version in 1..4 {
            let refused = decode_request_as(version, &header, body.clone());
            match &request {
                Request::Admin(AdminRequest::Role(_)) => {
                    assert_eq!(refused, Err(DecodeError::UnknownMessage(0x0039)), "{name}")
                }
                Request::AckAfter { request: inner, .. } => {
                    let error = refused.unwrap_err();
                    let expected = if inner.message_type().since_version() > version {
                        ErrorCode::UnknownMessage
                    } else {
                        ErrorCode::BadFrame
                    };
                    assert_eq!(error.code(), expected, "{name}: {error}");
                    if version == 3 {
                        let (header, body) =
                            split(&encode(req_id, &Frame::Request(*inner.clone())));
                        assert_eq!(
                            decode_request_as(version, &header, body).as_ref(),
                            Ok(&**inner),
                            "{name} without the flag"
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

/// ACK_AFTER only on the writes that take it, and never 3: anything else is a bad frame,
/// never a request taken without its flag.
#[test]
fn ack_after_is_refused_where_it_cannot_be() {
    let get_head = Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
        context: ContextRef::Id(3),
    }));
    let role = Request::Admin(AdminRequest::Role(admin::Role));
    let append = match &vectors_v4()[4].2 {
        Frame::Request(Request::AckAfter { request, .. }) => (**request).clone(),
        _ => panic!("the fifth vector is an acknowledged append"),
    };
    for (request, takes) in [(get_head, false), (role, false), (append, true)] {
        let (header, body) = split(&encode(7, &Frame::Request(request.clone())));
        for code in 1..=3u16 {
            let header = FrameHeader {
                flags: header.flags | code << frame_flags::ACK_AFTER_SHIFT,
                ..header
            };
            let decoded = decode_request_as(4, &header, body.clone());
            if takes && code < 3 {
                assert!(decoded.is_ok(), "{decoded:?}");
            } else {
                assert_eq!(decoded.unwrap_err().code(), ErrorCode::BadFrame, "{code}");
            }
        }
        // And the encoder will not write what the decoder refuses.
        let wrapped = Request::AckAfter {
            request: Box::new(request),
            after: AckAfter::Remote,
        };
        assert_eq!(check_request(&wrapped).is_ok(), takes);
    }
}

fn split(bytes: &[u8]) -> (FrameHeader, Bytes) {
    let mut header = [0u8; HEADER_BYTES];
    header.copy_from_slice(&bytes[..HEADER_BYTES]);
    (
        FrameHeader::decode(&header),
        Bytes::copy_from_slice(&bytes[HEADER_BYTES..]),
    )
}
