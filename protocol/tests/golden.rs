//! Golden vectors: `protocol/tests/golden-v1.txt` holds frames as hex with their meaning, for
//! clients in other languages to test against. Each must decode to the value below and
//! re-encode to exactly its bytes. To regenerate after a deliberate protocol change (which
//! needs a new protocol version): `CTXSTORE_WRITE_GOLDEN=1 cargo test -p ctxstore-protocol --test golden`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use ctxstore_protocol::*;

enum Frame {
    Request(Request),
    Response(Response),
}

fn hash(seed: u8) -> Hash32 {
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = seed.wrapping_add(index as u8);
    }
    Hash32(bytes)
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

fn vectors() -> Vec<(&'static str, u64, Frame, &'static str)> {
    use Frame::{Request as Q, Response as R};
    vec![
        (
            "hello_request",
            1,
            Q(Request::Hello {
                min_version: 1,
                max_version: 1,
                token: Bytes::from_static(b"secret"),
                client_name: "cli".into(),
            }),
            "HELLO, req_id 1: protocol versions 1..=1, token \"secret\", client name \"cli\"",
        ),
        (
            "hello_response",
            1,
            R(Response::Hello {
                version: 1,
                limits: ServerLimits {
                    frame_bytes_max: 16 << 20,
                    requests_in_flight_max: 1024,
                    blob_bytes_max: 16 << 20,
                    read_turns_max: 10_000,
                    has_blobs_max: 4096,
                },
                server_name: "ctxstore".into(),
            }),
            "HELLO response: version 1, limits (frame 16 MiB, 1024 in flight, blob 16 MiB, 10000 turns per read, 4096 hashes per HAS_BLOBS), server \"ctxstore\"",
        ),
        (
            "ping_request",
            2,
            Q(Request::Ping { nonce: 0xdead_beef }),
            "PING, req_id 2, nonce 0xdeadbeef",
        ),
        (
            "pong_response",
            2,
            R(Response::Pong { nonce: 0xdead_beef }),
            "PING response echoing the nonce",
        ),
        (
            "ctx_create_empty",
            3,
            Q(Request::CtxCreate { base_turn_id: 0 }),
            "CTX_CREATE of an empty context",
        ),
        (
            "ctx_create_response",
            3,
            R(Response::Context {
                message_type: MessageType::CtxCreate,
                head: ContextHeadWire {
                    context_id: 3,
                    head_turn_id: 0,
                    head_depth: 0,
                },
            }),
            "CTX_CREATE response: context 3, empty (head 0, depth 0)",
        ),
        (
            "ctx_fork",
            4,
            Q(Request::CtxFork { turn_id: 42 }),
            "CTX_FORK at turn 42",
        ),
        (
            "get_head",
            5,
            Q(Request::GetHead { context_id: 3 }),
            "GET_HEAD of context 3",
        ),
        (
            "get_head_response",
            5,
            R(Response::Context {
                message_type: MessageType::GetHead,
                head: ContextHeadWire {
                    context_id: 3,
                    head_turn_id: 42,
                    head_depth: 7,
                },
            }),
            "GET_HEAD response: context 3 at turn 42, depth 7",
        ),
        (
            "append_turn",
            6,
            Q(Request::AppendTurn {
                context_id: 3,
                expected_head: Some(41),
                type_tag: 0x1122_3344_5566_7788,
                codec: 1,
                payload: Bytes::from_static(b"hello"),
            }),
            "APPEND_TURN to context 3 if its head is turn 41; type tag 0x1122334455667788, codec 1, payload \"hello\"",
        ),
        (
            "appended_response",
            6,
            R(Response::Appended {
                message_type: MessageType::AppendTurn,
                turn: turn(),
                deduped: false,
            }),
            "APPEND_TURN response: turn 42 (parent 41, context 3, depth 7), not deduplicated",
        ),
        (
            "append_turn_by_hash",
            7,
            Q(Request::AppendTurnByHash {
                context_id: 3,
                expected_head: None,
                type_tag: 9,
                codec: 2,
                payload_hash: hash(0xa0),
            }),
            "APPEND_TURN_BY_HASH to context 3 (no expected head), payload hash a0a1a2…bf",
        ),
        (
            "get_turn",
            8,
            Q(Request::GetTurn { turn_id: 42 }),
            "GET_TURN 42",
        ),
        (
            "turn_response",
            8,
            R(Response::Turn(turn())),
            "GET_TURN response: turn 42",
        ),
        (
            "get_last_with_payloads",
            9,
            Q(Request::GetLast {
                context_id: 3,
                limit: 64,
                read_flags: read_flags::WITH_PAYLOADS | read_flags::ACCEPT_ZSTD,
            }),
            "GET_LAST 64 of context 3, with payloads, zstd accepted",
        ),
        (
            "turns_response",
            9,
            R(Response::Turns {
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
            }),
            "GET_LAST response: one turn (42) with its raw payload \"hello\"; next page before turn 42; tip depth 7",
        ),
        (
            "get_before",
            10,
            Q(Request::GetBefore {
                context_id: 3,
                before_turn_id: 42,
                limit: 10,
                read_flags: 0,
            }),
            "GET_BEFORE turn 42 in context 3, 10 turns, no payloads",
        ),
        (
            "get_range_by_depth",
            11,
            Q(Request::GetRangeByDepth {
                context_id: 3,
                from_depth: 2,
                limit: 5,
                read_flags: 0,
            }),
            "GET_RANGE_BY_DEPTH of context 3, depths 2..7",
        ),
        (
            "get_chain",
            12,
            Q(Request::GetChain {
                turn_id: 42,
                from_depth: 0,
                limit: 100,
                read_flags: read_flags::WITH_PAYLOADS,
            }),
            "GET_CHAIN root → turn 42, first 100 turns, raw payloads",
        ),
        (
            "get_blob",
            13,
            Q(Request::GetBlob {
                hash: hash(0xa0),
                read_flags: 0,
            }),
            "GET_BLOB a0a1…bf, raw",
        ),
        (
            "blob_response",
            13,
            R(Response::Blob(PayloadWire {
                encoding: PayloadEncoding::Raw,
                raw_len: 5,
                data: Bytes::from_static(b"hello"),
            })),
            "GET_BLOB response: \"hello\"",
        ),
        (
            "has_blobs",
            14,
            Q(Request::HasBlobs {
                hashes: vec![hash(0xa0), hash(0x00)],
            }),
            "HAS_BLOBS of two hashes",
        ),
        (
            "has_blobs_response",
            14,
            R(Response::HasBlobs {
                present: vec![true, false],
            }),
            "HAS_BLOBS response: first present, second not",
        ),
        ("stats", 15, Q(Request::Stats), "STATS"),
        (
            "stats_response",
            15,
            R(Response::Stats(StatsWire {
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
            })),
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

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-v1.txt");

#[test]
fn golden_vectors_decode_and_reencode_byte_exactly() {
    let vectors = vectors();
    if std::env::var("CTXSTORE_WRITE_GOLDEN").is_ok() {
        let mut text = String::from(
            "# ctxstore protocol version 1: golden frames (see docs/protocol.md).\n\
             # One frame per line: name | frame as hex (16-byte header, then body) | meaning.\n",
        );
        for (name, req_id, frame, meaning) in &vectors {
            text.push_str(&format!(
                "{name} | {} | {meaning}\n",
                to_hex(&encode(*req_id, frame))
            ));
        }
        std::fs::write(FILE, text).unwrap();
    }
    let text = std::fs::read_to_string(FILE).unwrap();
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
                assert_eq!(&decode_request(&header, body).unwrap(), request, "{name}")
            }
            Frame::Response(response) => {
                assert_eq!(&decode_response(&header, body).unwrap(), response, "{name}")
            }
        }
    }
}
