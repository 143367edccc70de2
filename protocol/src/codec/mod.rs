//! Encoding and strict decoding of message bodies. Layouts in docs/protocol.md.
//!
//! Decoding never panics and never trusts a length: every field is bounds-checked, every
//! enum and flag word validated, reserved fields must be zero, and a body must end exactly
//! where its message ends. Payloads are zero-copy slices of the received frame.

mod cursor;
mod writer;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, ErrorCode};
use crate::frame::{FRAME_BYTES_LIMIT, FrameHeader};
use crate::message::*;
use cursor::Cursor;
use writer::{ChunkWriter, short_len, truncate_utf8};

/// Decodes a request body of a connection that negotiated `version`: messages and frame
/// flags of newer versions are refused (`UnknownMessage`, and a flag is a bad frame), so a
/// version-1 peer sees version 1 byte for byte.
pub fn decode_request_as(
    version: u16,
    header: &FrameHeader,
    body: Bytes,
) -> Result<Request, DecodeError> {
    let newer = MessageType::from_code(header.msg_type)
        .is_some_and(|message_type| message_type.since_version() > version);
    if newer {
        return Err(DecodeError::UnknownMessage(header.msg_type));
    }
    if version < 2 && header.flags != 0 {
        return Err(DecodeError::Invalid {
            message: "frame",
            field: "flags",
            reason: "not 0 in protocol version 1",
        });
    }
    decode_request(header, body)
}

/// Decodes a request body in the newest version. Unknown types are `UnknownMessage`;
/// responses sent as requests too.
pub fn decode_request(header: &FrameHeader, body: Bytes) -> Result<Request, DecodeError> {
    let message_type = MessageType::from_code(header.msg_type)
        .ok_or(DecodeError::UnknownMessage(header.msg_type))?;
    let mut cursor = Cursor::new(body, message_type.name());
    let by_name = header.flags & frame_flags::CTX_BY_NAME != 0;
    let overlays = header.flags & frame_flags::OVERLAYS != 0;
    if header.flags & !frame_flags::KNOWN != 0 {
        return Err(cursor.invalid("flags", "unknown frame flag bits"));
    }
    if by_name && !message_type.takes_context() {
        return Err(cursor.invalid("flags", "CTX_BY_NAME on a message without a context_id"));
    }
    if overlays && !message_type.takes_overlays() {
        return Err(cursor.invalid("flags", "OVERLAYS on a message that returns no turns"));
    }
    let request = match message_type {
        MessageType::Hello => {
            let min_version = cursor.u16()?;
            let max_version = cursor.u16()?;
            if min_version > max_version || min_version == 0 {
                return Err(cursor.invalid("version range", "min is 0 or above max"));
            }
            let token_len = usize::from(cursor.u16()?);
            if token_len > TOKEN_BYTES_MAX {
                return Err(cursor.too_large(
                    "token_len",
                    token_len as u64,
                    TOKEN_BYTES_MAX as u64,
                ));
            }
            let name_len = usize::from(cursor.u16()?);
            if name_len > NAME_BYTES_MAX {
                return Err(cursor.too_large(
                    "client_name_len",
                    name_len as u64,
                    NAME_BYTES_MAX as u64,
                ));
            }
            let token = cursor.bytes(token_len)?;
            let client_name = cursor.string(name_len, "client_name")?;
            Request::Hello {
                min_version,
                max_version,
                token,
                client_name,
            }
        }
        MessageType::Ping => Request::Ping {
            nonce: cursor.u64()?,
        },
        MessageType::CtxCreate => Request::CtxCreate {
            base_turn_id: cursor.u64()?,
        },
        MessageType::CtxFork => Request::CtxFork {
            turn_id: cursor.u64()?,
        },
        MessageType::GetHead => Request::GetHead {
            context: cursor.leading_context(by_name)?,
        },
        MessageType::AppendTurn | MessageType::AppendTurnByHash => {
            let context = cursor.leading_context(by_name)?;
            let expected = cursor.u64()?;
            let type_tag = cursor.u64()?;
            let codec = cursor.u32()?;
            let flags = cursor.flags(append_flags::KNOWN, "append_flags")?;
            let expected_head = (flags & append_flags::EXPECT_HEAD != 0).then_some(expected);
            if expected_head.is_none() && expected != 0 {
                return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
            }
            if message_type == MessageType::AppendTurn {
                let payload_len = cursor.u32()? as usize;
                cursor.zero(4, "reserved")?;
                let payload = cursor.bytes(payload_len)?;
                Request::AppendTurn {
                    context,
                    expected_head,
                    type_tag,
                    codec,
                    payload,
                }
            } else {
                let payload_hash = cursor.hash()?;
                Request::AppendTurnByHash {
                    context,
                    expected_head,
                    type_tag,
                    codec,
                    payload_hash,
                }
            }
        }
        MessageType::GetTurn => Request::GetTurn {
            turn_id: cursor.u64()?,
        },
        MessageType::GetLast => {
            let context = cursor.leading_context(by_name)?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            Request::GetLast {
                context,
                limit,
                read_flags,
            }
        }
        MessageType::GetBefore => {
            let context = cursor.leading_context(by_name)?;
            let before_turn_id = cursor.u64()?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            Request::GetBefore {
                context,
                before_turn_id,
                limit,
                read_flags,
            }
        }
        MessageType::GetRangeByDepth => {
            let context = cursor.leading_context(by_name)?;
            let from_depth = cursor.u32()?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            cursor.zero(4, "reserved")?;
            Request::GetRangeByDepth {
                context,
                from_depth,
                limit,
                read_flags,
            }
        }
        MessageType::GetChain => {
            let turn_id = cursor.u64()?;
            let from_depth = cursor.u32()?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            cursor.zero(4, "reserved")?;
            Request::GetChain {
                turn_id,
                from_depth,
                limit,
                read_flags,
            }
        }
        MessageType::GetBlob => {
            let hash = cursor.hash()?;
            let read_flags = cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?;
            cursor.zero(4, "reserved")?;
            Request::GetBlob { hash, read_flags }
        }
        MessageType::HasBlobs => {
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            cursor.zero(4, "reserved")?;
            let mut hashes = Vec::with_capacity((count as usize).min(4096));
            for _ in 0..count {
                hashes.push(cursor.hash()?);
            }
            Request::HasBlobs { hashes }
        }
        MessageType::Stats => Request::Stats,
        MessageType::StatsEx => Request::StatsEx,
        MessageType::Gc => {
            cursor.flags(0, "gc_flags")?;
            Request::Gc
        }
        MessageType::CtxOpen => {
            let base_turn_id = cursor.u64()?;
            let flags = cursor.u8()?;
            if flags & !open_flags::KNOWN != 0 {
                return Err(cursor.invalid("open_flags", "unknown flag bits"));
            }
            cursor.zero(1, "reserved")?;
            let clone_from = if flags & open_flags::CLONE != 0 {
                Some(cursor.context_ref()?)
            } else {
                None
            };
            Request::CtxOpen {
                base_turn_id,
                get_or_create: flags & open_flags::GET_OR_CREATE != 0,
                clone_from,
                name: cursor.optional_name("name")?,
                tags: cursor.tags()?,
            }
        }
        MessageType::CtxShow => Request::CtxShow {
            context: cursor.context_ref()?,
        },
        MessageType::CtxTag => {
            let context = cursor.context_ref()?;
            let flags = cursor.flags(tag_flags::KNOWN, "tag_flags")?;
            let expected = cursor.u64()?;
            let expected_head = (flags & tag_flags::EXPECT_HEAD != 0).then_some(expected);
            if expected_head.is_none() && expected != 0 {
                return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
            }
            let set = cursor.tags()?;
            let remove_count = usize::from(cursor.u16()?);
            let mut remove = Vec::with_capacity(cursor.list_capacity(remove_count, 2));
            for _ in 0..remove_count {
                remove.push(cursor.short_string("tag key")?);
            }
            Request::CtxTag {
                context,
                expected_head,
                set,
                remove,
            }
        }
        MessageType::CtxList => {
            let tags = cursor.tags()?;
            let name_prefix = cursor.optional_name("name_prefix")?;
            let updated_after_unix_ms = Some(cursor.u64()?).filter(|at| *at != 0);
            let updated_before_unix_ms = Some(cursor.u64()?).filter(|at| *at != 0);
            Request::CtxList {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor: cursor.list_cursor()?,
                limit: cursor.u32()?,
            }
        }
        MessageType::CtxName => Request::CtxName {
            context: cursor.context_ref()?,
            name: cursor.short_string("name")?,
        },
        MessageType::CtxDelete => Request::CtxDelete {
            context: cursor.context_ref()?,
        },
        MessageType::Backup => {
            let dir = cursor.short_string("dir")?;
            // What the encoder refuses, the decoder refuses (found by fuzz/frame_decoder).
            if dir.is_empty() {
                return Err(cursor.invalid("dir", "an empty backup directory"));
            }
            Request::Backup { dir }
        }
        MessageType::CtxPrune => Request::CtxPrune {
            context: cursor.context_ref()?,
            keep: cursor.u32()?,
        },
        MessageType::CtxTtl => {
            let context = cursor.context_ref()?;
            let set = match cursor.u8()? {
                0 => false,
                1 => true,
                _ => return Err(cursor.invalid("ttl_flags", "reserved bits set")),
            };
            let ttl_ms = cursor.u64()?;
            if !set && ttl_ms != 0 {
                return Err(cursor.invalid("ttl_ms", "not 0 without the SET flag"));
            }
            Request::CtxTtl {
                context,
                set,
                ttl_ms,
            }
        }
        MessageType::KvPut => {
            let context = cursor.context_ref()?;
            let if_absent = match cursor.u8()? {
                0 => false,
                1 => true,
                _ => return Err(cursor.invalid("mode", "not 0 (replace) or 1 (if absent)")),
            };
            let count = usize::from(cursor.u16()?);
            let mut entries = Vec::with_capacity(cursor.list_capacity(count, 6));
            for _ in 0..count {
                let key = cursor.short_bytes()?;
                let value_len = cursor.u32()? as usize;
                entries.push((key, cursor.bytes(value_len)?));
            }
            Request::KvPut {
                context,
                if_absent,
                entries,
            }
        }
        MessageType::KvGet => Request::KvGet {
            context: cursor.context_ref()?,
            key: cursor.short_bytes()?,
            read_flags: cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?,
        },
        MessageType::KvDelete => {
            let context = cursor.context_ref()?;
            let count = usize::from(cursor.u16()?);
            let mut keys = Vec::with_capacity(cursor.list_capacity(count, 2));
            for _ in 0..count {
                keys.push(cursor.short_bytes()?);
            }
            Request::KvDelete { context, keys }
        }
        MessageType::KvList => Request::KvList {
            context: cursor.context_ref()?,
            prefix: cursor.short_bytes()?,
            after: cursor.short_bytes()?,
            limit: cursor.u32()?,
        },
        MessageType::AppendTurns => {
            let context = cursor.context_ref()?;
            let flags = cursor.flags(append_flags::KNOWN, "append_flags")?;
            let expected = cursor.u64()?;
            let expected_head = (flags & append_flags::EXPECT_HEAD != 0).then_some(expected);
            if expected_head.is_none() && expected != 0 {
                return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
            }
            let count = usize::from(cursor.u16()?);
            if count == 0 {
                return Err(cursor.invalid("count", "no turns"));
            }
            let mut turns = Vec::with_capacity(cursor.list_capacity(count, 27));
            for _ in 0..count {
                turns.push(cursor.turn_spec()?);
            }
            Request::AppendTurns {
                context,
                expected_head,
                turns,
            }
        }
        MessageType::GetTurnByKey => {
            let context = cursor.context_ref()?;
            let key_len = usize::from(cursor.u8()?);
            Request::GetTurnByKey {
                context,
                key: cursor.bytes(key_len)?,
            }
        }
        MessageType::TurnLog => {
            let context = cursor.context_ref()?;
            let count = usize::from(cursor.u8()?);
            let mut labels = Vec::with_capacity(cursor.list_capacity(count, 3));
            for _ in 0..count {
                let key = cursor.tiny_string("label key")?;
                labels.push((key, cursor.short_string("label value")?));
            }
            Request::TurnLog {
                context,
                labels,
                cursor: cursor.log_cursor()?,
                limit: cursor.u32()?,
                read_flags: cursor.flags(read_flags::KNOWN, "read_flags")?,
            }
        }
        MessageType::FindTurns => Request::FindTurns {
            key: cursor.tiny_string("label key")?,
            value: cursor.short_string("label value")?,
            before_turn_id: cursor.u64()?,
            limit: cursor.u32()?,
        },
        MessageType::ReadPage => {
            let context = cursor.context_ref()?;
            let kind = cursor.u8()?;
            let before_turn_id = cursor.u64()?;
            let from_depth = cursor.u32()?;
            let kind = match (kind, before_turn_id, from_depth) {
                (0, 0, 0) => PageKind::Last,
                (1, before_turn_id, 0) => PageKind::Before { before_turn_id },
                (2, 0, from_depth) => PageKind::Range { from_depth },
                (3, 0, 0) => PageKind::Window,
                _ => return Err(cursor.invalid("kind", "unknown, or a field it does not use set")),
            };
            Request::ReadPage {
                context,
                kind,
                limit: cursor.u32()?,
                read_flags: cursor.flags(read_flags::KNOWN, "read_flags")?,
            }
        }
        MessageType::PatchTurn => {
            let turn_id = cursor.u64()?;
            let payload_len = cursor.u32()? as usize;
            cursor.zero(4, "reserved")?;
            Request::PatchTurn {
                turn_id,
                payload: cursor.bytes(payload_len)?,
            }
        }
        MessageType::RedactTurn => Request::RedactTurn {
            turn_id: cursor.u64()?,
        },
        MessageType::PurgeBlob => Request::PurgeBlob {
            hash: cursor.hash()?,
        },
        MessageType::PutChunked => cursor.put_chunked()?,
    };
    let request = if overlays {
        Request::AsOf {
            as_of: cursor.u64()?,
            read: Box::new(request),
        }
    } else {
        request
    };
    cursor.finish()?;
    Ok(request)
}

/// Decodes a response body, given the frame's `msg_type`.
pub fn decode_response(header: &FrameHeader, body: Bytes) -> Result<Response, DecodeError> {
    if header.msg_type == ERROR_TYPE {
        let mut cursor = Cursor::new(body, "ERROR");
        let code = cursor.u16()?;
        let code = ErrorCode::from_code(code)
            .ok_or_else(|| cursor.invalid("code", "unknown error code"))?;
        cursor.zero(2, "reserved")?;
        let message_len = cursor.u32()? as usize;
        if message_len > MESSAGE_BYTES_MAX {
            return Err(cursor.too_large(
                "message_len",
                message_len as u64,
                MESSAGE_BYTES_MAX as u64,
            ));
        }
        let detail = cursor.u64()?;
        let message = cursor.string(message_len, "message")?;
        cursor.finish()?;
        return Ok(Response::Error {
            code,
            detail,
            message,
        });
    }
    let request_type = header.msg_type & !RESPONSE_BIT;
    let message_type = MessageType::from_code(request_type)
        .filter(|_| header.msg_type & RESPONSE_BIT != 0)
        .ok_or(DecodeError::UnknownMessage(header.msg_type))?;
    let mut cursor = Cursor::new(body, message_type.name());
    let overlays = header.flags & frame_flags::OVERLAYS != 0;
    if header.flags & !frame_flags::OVERLAYS != 0 || (overlays && !message_type.takes_overlays()) {
        return Err(cursor.invalid("flags", "frame flags this answer cannot carry"));
    }
    let response = match message_type {
        MessageType::Hello => {
            let version = cursor.u16()?;
            let name_len = usize::from(cursor.u16()?);
            if name_len > NAME_BYTES_MAX {
                return Err(cursor.too_large(
                    "server_name_len",
                    name_len as u64,
                    NAME_BYTES_MAX as u64,
                ));
            }
            let limits = ServerLimits {
                frame_bytes_max: cursor.u32()?,
                requests_in_flight_max: cursor.u32()?,
                blob_bytes_max: cursor.u32()?,
                read_turns_max: cursor.u32()?,
                has_blobs_max: cursor.u32()?,
            };
            cursor.zero(4, "reserved")?;
            let server_name = cursor.string(name_len, "server_name")?;
            Response::Hello {
                version,
                limits,
                server_name,
            }
        }
        MessageType::Ping => Response::Pong {
            nonce: cursor.u64()?,
        },
        MessageType::CtxCreate | MessageType::CtxFork | MessageType::GetHead => Response::Context {
            message_type,
            head: cursor.context_head()?,
        },
        MessageType::AppendTurn | MessageType::AppendTurnByHash => {
            let turn = cursor.turn()?;
            let deduped = match cursor.u8()? {
                0 => false,
                1 => true,
                _ => return Err(cursor.invalid("deduped", "not 0 or 1")),
            };
            cursor.zero(7, "reserved")?;
            Response::Appended {
                message_type,
                turn,
                deduped,
            }
        }
        MessageType::GetTurn => Response::Turn(cursor.turn()?),
        MessageType::GetLast
        | MessageType::GetBefore
        | MessageType::GetRangeByDepth
        | MessageType::GetChain => {
            let next_before = cursor.u64()?;
            let tip_depth = cursor.u32()?;
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            let mut entries = Vec::with_capacity((count as usize).min(4096));
            for _ in 0..count {
                let turn = cursor.turn()?;
                let payload = cursor.payload()?;
                entries.push(TurnEntry { turn, payload });
            }
            Response::Turns {
                message_type,
                next_before,
                tip_depth,
                entries,
            }
        }
        MessageType::GetBlob => Response::Blob(cursor.payload()?),
        MessageType::HasBlobs => {
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            cursor.zero(4, "reserved")?;
            let mut present = Vec::with_capacity((count as usize).min(4096));
            for _ in 0..count {
                present.push(match cursor.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(cursor.invalid("present", "not 0 or 1")),
                });
            }
            Response::HasBlobs { present }
        }
        MessageType::Stats => Response::Stats(cursor.stats()?),
        MessageType::StatsEx => Response::StatsEx {
            stats: Box::new(cursor.stats()?),
            gc: GcStatsWire {
                live_bytes: cursor.u64()?,
                dead_bytes: cursor.u64()?,
                gc_runs: cursor.u64()?,
                bytes_reclaimed_total: cursor.u64()?,
            },
        },
        MessageType::Gc => {
            let turns_dead = cursor.u64()?;
            let blobs_dead = cursor.u64()?;
            let bytes_reclaimed = cursor.u64()?;
            let packs_compacted = cursor.u32()?;
            cursor.zero(4, "reserved")?;
            Response::GcDone(GcWire {
                turns_dead,
                blobs_dead,
                bytes_reclaimed,
                packs_compacted,
                live_bytes: cursor.u64()?,
                dead_bytes: cursor.u64()?,
                duration_ms: cursor.u64()?,
            })
        }
        MessageType::CtxShow | MessageType::CtxTag | MessageType::CtxName => {
            Response::ContextInfo {
                message_type,
                info: cursor.context_info()?,
            }
        }
        MessageType::CtxOpen => Response::Opened {
            info: cursor.context_info()?,
            created: cursor.bool("created")?,
        },
        MessageType::Backup => Response::BackedUp(BackupWire {
            turns: cursor.u64()?,
            blobs: cursor.u64()?,
            bytes: cursor.u64()?,
            linked_bytes: cursor.u64()?,
            duration_ms: cursor.u64()?,
            dir: cursor.short_string("dir")?,
        }),
        MessageType::CtxDelete | MessageType::CtxPrune | MessageType::CtxTtl => {
            Response::Retention {
                message_type,
                info: cursor.context_info()?,
                floor_depth: cursor.u32()?,
                ttl_ms: cursor.u64()?,
            }
        }
        MessageType::CtxList => {
            let next_cursor = cursor.list_cursor()?;
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            let mut contexts = Vec::with_capacity(cursor.list_capacity(count as usize, 44));
            for _ in 0..count {
                contexts.push(cursor.context_info()?);
            }
            Response::ContextList {
                next_cursor,
                contexts,
            }
        }
        MessageType::KvPut | MessageType::KvDelete => Response::Done { message_type },
        MessageType::KvGet => Response::KvValue {
            value_hash: cursor.hash()?,
            payload: cursor.payload()?,
        },
        MessageType::KvList => {
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            let mut items = Vec::with_capacity(cursor.list_capacity(count as usize, 38));
            for _ in 0..count {
                items.push(KvItemWire {
                    key: cursor.short_bytes()?,
                    value_hash: cursor.hash()?,
                    value_len: cursor.u32()?,
                });
            }
            Response::KvList { items }
        }
        MessageType::AppendTurns => {
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            let mut turns = Vec::with_capacity(cursor.list_capacity(count as usize, 90));
            for _ in 0..count {
                turns.push(AppendedWire {
                    turn: cursor.turn()?,
                    deduped: cursor.bool("deduped")?,
                    existing: cursor.bool("existing")?,
                });
            }
            Response::AppendedTurns { turns }
        }
        MessageType::GetTurnByKey => Response::TurnInfo {
            turn: Box::new(cursor.turn()?),
            extras: cursor.extras()?,
        },
        MessageType::TurnLog => Response::TurnLog {
            next_cursor: cursor.log_cursor()?,
            entries: cursor.entries_v2()?,
        },
        MessageType::ReadPage => Response::Page {
            next_before: cursor.u64()?,
            tip_depth: cursor.u32()?,
            entries: cursor.entries_v2()?,
        },
        MessageType::FindTurns => {
            let next_before = cursor.u64()?;
            let count = cursor.u32()?;
            if count > LIST_ITEMS_LIMIT {
                return Err(cursor.too_large(
                    "count",
                    u64::from(count),
                    u64::from(LIST_ITEMS_LIMIT),
                ));
            }
            let mut turns = Vec::with_capacity(cursor.list_capacity(count as usize, 91));
            for _ in 0..count {
                turns.push((cursor.turn()?, cursor.extras()?));
            }
            Response::FoundTurns { next_before, turns }
        }
        MessageType::PatchTurn => {
            let response = Response::Patched {
                turn_id: cursor.u64()?,
                overlay_seq: cursor.u64()?,
                payload_hash: cursor.hash()?,
                payload_len: cursor.u32()?,
            };
            cursor.zero(4, "reserved")?;
            response
        }
        MessageType::RedactTurn => Response::Redacted {
            turn_id: cursor.u64()?,
            overlay_seq: cursor.u64()?,
        },
        MessageType::PurgeBlob => Response::Purged {
            payload_hash: cursor.hash()?,
            turns_redacted: cursor.u64()?,
            overlay_seq: cursor.u64()?,
        },
        MessageType::PutChunked => {
            let response = Response::ChunkedStored {
                payload_hash: cursor.hash()?,
                payload_len: cursor.u64()?,
                already_stored: cursor.bool("already_stored")?,
            };
            cursor.zero(7, "reserved")?;
            response
        }
    };
    let response = if overlays {
        let count = cursor.u32()? as usize;
        if count != response.turn_count() {
            return Err(cursor.invalid("overlay count", "not one per TURN of the answer"));
        }
        let mut states = Vec::with_capacity(cursor.list_capacity(count, OVERLAY_WIRE_BYTES));
        for _ in 0..count {
            let overlay_seq = cursor.u64()?;
            let flags = cursor.u8()?;
            if flags & !overlay_flags::KNOWN != 0 {
                return Err(cursor.invalid("overlay_flags", "unknown flag bits"));
            }
            cursor.zero(7, "reserved")?;
            states.push(OverlayWire {
                overlay_seq,
                redacted: flags & overlay_flags::REDACTED != 0,
            });
        }
        Response::Overlaid {
            response: Box::new(response),
            overlays: states,
        }
    } else {
        response
    };
    cursor.finish()?;
    Ok(response)
}

/// A request the protocol cannot carry: a field longer (or shorter) than the wire allows.
/// Nothing was encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {len} {unit}; the protocol carries {min} to {max} {unit}")]
pub struct EncodeError {
    /// What does not fit: `token`, `client_name`, `payload`, `hashes`, `context name`, …
    pub field: &'static str,
    pub len: u64,
    pub min: u64,
    pub max: u64,
    pub unit: &'static str,
}

/// Largest payload one APPEND_TURN can carry: a frame of the protocol's ceiling, less the
/// message's fields (no server accepts more).
pub const APPEND_PAYLOAD_BYTES_LIMIT: u64 = FRAME_BYTES_LIMIT as u64 - 48;

/// Checks what the encoder cannot write: lengths outside what the wire carries (a `u16`
/// length, an empty name where 0 means "none"). Input from a caller is never asserted on.
/// Semantic limits (names ≤ 256 B, ≤ 32 tags, …) are the server's to enforce and report.
pub fn check_request(request: &Request) -> Result<(), EncodeError> {
    const SHORT: u64 = u16::MAX as u64;
    const TINY: u64 = u8::MAX as u64;
    let within = |field, len: usize, min: u64, max: u64, unit| {
        let len = len as u64;
        if (min..=max).contains(&len) {
            Ok(())
        } else {
            Err(EncodeError {
                field,
                len,
                min,
                max,
                unit,
            })
        }
    };
    let context = |context: &ContextRef| match context {
        ContextRef::Id(_) => Ok(()),
        ContextRef::Name(name) => within("context name", name.len(), 1, SHORT, "bytes"),
    };
    let tags = |tags: &[(String, String)]| {
        within("tags", tags.len(), 0, SHORT, "tags")?;
        tags.iter().try_for_each(|(key, value)| {
            within("tag key", key.len(), 0, SHORT, "bytes")?;
            within("tag value", value.len(), 0, SHORT, "bytes")
        })
    };
    let extras = |extras: &ExtrasWire| {
        within("key", extras.key.len(), 0, TINY, "bytes")?;
        within("labels", extras.labels.len(), 0, TINY, "labels")?;
        within("links", extras.links.len(), 0, TINY, "links")?;
        extras.labels.iter().try_for_each(|(key, value)| {
            within("label key", key.len(), 0, TINY, "bytes")?;
            within("label value", value.len(), 0, SHORT, "bytes")
        })
    };
    let optional_name = |field, name: &Option<String>| match name {
        None => Ok(()),
        Some(name) => within(field, name.len(), 1, SHORT, "bytes"),
    };
    if let Some(leading) = request.leading_context() {
        context(leading)?;
    }
    match request {
        Request::Hello {
            token, client_name, ..
        } => {
            within("token", token.len(), 0, TOKEN_BYTES_MAX as u64, "bytes")?;
            within(
                "client_name",
                client_name.len(),
                0,
                NAME_BYTES_MAX as u64,
                "bytes",
            )
        }
        Request::AppendTurn { payload, .. } => within(
            "payload",
            payload.len(),
            0,
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
        Request::HasBlobs { hashes } => within(
            "hashes",
            hashes.len(),
            0,
            u64::from(LIST_ITEMS_LIMIT),
            "hashes",
        ),
        Request::CtxOpen {
            clone_from,
            name,
            tags: open_tags,
            ..
        } => {
            if let Some(source) = clone_from {
                context(source)?;
            }
            optional_name("name", name)?;
            tags(open_tags)
        }
        Request::CtxShow { context: target } => context(target),
        Request::CtxTag {
            context: target,
            set,
            remove,
            ..
        } => {
            context(target)?;
            tags(set)?;
            within("removed tags", remove.len(), 0, SHORT, "tags")?;
            remove
                .iter()
                .try_for_each(|key| within("tag key", key.len(), 0, SHORT, "bytes"))
        }
        Request::CtxList {
            tags: list_tags,
            name_prefix,
            updated_after_unix_ms,
            updated_before_unix_ms,
            cursor,
            ..
        } => {
            tags(list_tags)?;
            optional_name("name_prefix", name_prefix)?;
            for (field, at) in [
                ("updated_after_unix_ms", updated_after_unix_ms),
                ("updated_before_unix_ms", updated_before_unix_ms),
            ] {
                if let Some(at) = at {
                    // 0 on the wire means "no bound".
                    within(field, usize::from(*at != 0), 1, 1, "(0 is no bound)")?;
                }
            }
            match cursor {
                Some(ListCursorWire::Name(name)) => {
                    within("cursor name", name.len(), 1, SHORT, "bytes")
                }
                _ => Ok(()),
            }
        }
        Request::CtxName {
            context: target,
            name,
        } => {
            context(target)?;
            within("name", name.len(), 0, SHORT, "bytes")
        }
        Request::KvPut {
            context: target,
            entries,
            ..
        } => {
            context(target)?;
            within("entries", entries.len(), 0, SHORT, "entries")?;
            entries.iter().try_for_each(|(key, value)| {
                within("key", key.len(), 0, SHORT, "bytes")?;
                within("value", value.len(), 0, u64::from(u32::MAX), "bytes")
            })
        }
        Request::KvGet {
            context: target,
            key,
            ..
        } => {
            context(target)?;
            within("key", key.len(), 0, SHORT, "bytes")
        }
        Request::KvDelete {
            context: target,
            keys,
        } => {
            context(target)?;
            within("keys", keys.len(), 0, SHORT, "keys")?;
            keys.iter()
                .try_for_each(|key| within("key", key.len(), 0, SHORT, "bytes"))
        }
        Request::KvList {
            context: target,
            prefix,
            after,
            ..
        } => {
            context(target)?;
            within("prefix", prefix.len(), 0, SHORT, "bytes")?;
            within("after", after.len(), 0, SHORT, "bytes")
        }
        Request::AppendTurns {
            context: target,
            turns,
            ..
        } => {
            context(target)?;
            within("turns", turns.len(), 1, SHORT, "turns")?;
            turns.iter().try_for_each(|spec| {
                if spec.parent == ParentWire::Turn(0) {
                    within("parent turn id", 0, 1, u64::MAX, "(0 is no turn)")?;
                }
                extras(&spec.extras)?;
                match &spec.payload {
                    PayloadSpec::Bytes(bytes) => within(
                        "payload",
                        bytes.len(),
                        0,
                        APPEND_PAYLOAD_BYTES_LIMIT,
                        "bytes",
                    ),
                    PayloadSpec::Hash(_) => Ok(()),
                }
            })
        }
        Request::GetTurnByKey {
            context: target,
            key,
        } => {
            context(target)?;
            within("key", key.len(), 0, TINY, "bytes")
        }
        Request::TurnLog {
            context: target,
            labels,
            ..
        } => {
            context(target)?;
            within("labels", labels.len(), 0, TINY, "labels")?;
            labels.iter().try_for_each(|(key, value)| {
                within("label key", key.len(), 0, TINY, "bytes")?;
                within("label value", value.len(), 0, SHORT, "bytes")
            })
        }
        Request::ReadPage {
            context: target, ..
        } => context(target),
        Request::FindTurns { key, value, .. } => {
            within("label key", key.len(), 0, TINY, "bytes")?;
            within("label value", value.len(), 0, SHORT, "bytes")
        }
        Request::Backup { dir } => within("dir", dir.len(), 1, SHORT, "bytes"),
        Request::CtxDelete { context: target }
        | Request::CtxPrune {
            context: target, ..
        } => context(target),
        Request::CtxTtl {
            context: target,
            set,
            ttl_ms,
        } => {
            context(target)?;
            // Without SET the request only reads: a value there would be a caller's mistake.
            let max = if *set { u64::MAX } else { 0 };
            let ttl_ms = usize::try_from(*ttl_ms).unwrap_or(usize::MAX);
            within("ttl_ms (0 without the SET flag)", ttl_ms, 0, max, "ms")
        }
        Request::PatchTurn { payload, .. } => within(
            "payload",
            payload.len(),
            0,
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
        Request::PutChunked {
            base, chunks, sent, ..
        } => {
            let kept = base.map_or(0, |base| u64::from(base.kept));
            if base.is_some_and(|base| base.kept == 0 || base.hash.0 == [0u8; 32]) {
                return Err(EncodeError {
                    field: "base (a stored blob's hash, keeping 1 or more chunks)",
                    len: 0,
                    min: 1,
                    max: u64::from(CHUNKS_PER_PAYLOAD_MAX),
                    unit: "chunks",
                });
            }
            let chunk_count = u64::from(CHUNKS_PER_PAYLOAD_MAX).saturating_sub(kept);
            // A base's kept chunks count against the limit too.
            within("chunks", chunks.len(), 1, chunk_count, "chunks")?;
            chunks.iter().try_for_each(|chunk| {
                let len = chunk.len as usize;
                within("chunk len", len, 1, u64::from(CHUNK_BYTES_MAX), "bytes")
            })?;
            within("sent chunks", sent.len(), 0, chunks.len() as u64, "chunks")?;
            // Strictly increasing indexes into `chunks`, each with exactly its chunk's bytes.
            let mut index_min = 0u64;
            let index_max = chunks.len() as u64 - 1;
            sent.iter().try_for_each(|chunk| {
                let index = chunk.index as usize;
                let field = "sent index (strictly increasing, into chunks)";
                within(field, index, index_min, index_max, "index")?;
                index_min = u64::from(chunk.index) + 1;
                let len = chunks.get(index).map_or(0, |entry| u64::from(entry.len));
                let field = "sent chunk bytes (its chunk's len)";
                within(field, chunk.bytes.len(), len, len, "bytes")
            })
        }
        Request::AsOf { read, .. } => {
            if matches!(**read, Request::AsOf { .. }) || !read.message_type().takes_overlays() {
                return Err(EncodeError {
                    field: "overlay view (a read returning turns, once)",
                    len: 1,
                    min: 0,
                    max: 0,
                    unit: "wrappers",
                });
            }
            check_request(read)
        }
        _ => Ok(()),
    }
}

/// Encodes a request frame (header and body) into `out`; on an error `out` is unchanged.
pub fn encode_request(
    req_id: u64,
    request: &Request,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    for chunk in encode_request_chunks(req_id, request)? {
        out.put_slice(&chunk);
    }
    Ok(())
}

/// Encodes a request frame as chunks (large payloads by reference).
pub fn encode_request_chunks(req_id: u64, request: &Request) -> Result<Vec<Bytes>, EncodeError> {
    check_request(request)?;
    let mut w = ChunkWriter::new();
    request_body(&mut w, request);
    Ok(w.finish(request.message_type().code(), request.frame_flags(), req_id))
}

/// A request's body (`check_request` passed).
fn request_body(w: &mut ChunkWriter, request: &Request) {
    match request {
        Request::Hello {
            min_version,
            max_version,
            token,
            client_name,
        } => {
            w.u16(*min_version);
            w.u16(*max_version);
            w.u16(token.len() as u16);
            w.u16(client_name.len() as u16);
            w.slice(token);
            w.slice(client_name.as_bytes());
        }
        Request::Ping { nonce } => w.u64(*nonce),
        Request::CtxCreate { base_turn_id } => w.u64(*base_turn_id),
        Request::CtxFork { turn_id } => w.u64(*turn_id),
        Request::GetHead { context } => w.leading_context(context),
        Request::AppendTurn {
            context,
            expected_head,
            type_tag,
            codec,
            payload,
        } => {
            append_fields(w, context, *expected_head, *type_tag, *codec);
            w.u32(payload.len() as u32);
            w.zero(4);
            w.data(payload);
        }
        Request::AppendTurnByHash {
            context,
            expected_head,
            type_tag,
            codec,
            payload_hash,
        } => {
            append_fields(w, context, *expected_head, *type_tag, *codec);
            w.slice(&payload_hash.0);
        }
        Request::GetTurn { turn_id } => w.u64(*turn_id),
        Request::GetLast {
            context,
            limit,
            read_flags,
        } => {
            w.leading_context(context);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        Request::GetBefore {
            context,
            before_turn_id,
            limit,
            read_flags,
        } => {
            w.leading_context(context);
            w.u64(*before_turn_id);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        Request::GetRangeByDepth {
            context,
            from_depth,
            limit,
            read_flags,
        } => {
            w.leading_context(context);
            w.u32(*from_depth);
            w.u32(*limit);
            w.u32(*read_flags);
            w.zero(4);
        }
        Request::GetChain {
            turn_id,
            from_depth,
            limit,
            read_flags,
        } => {
            w.u64(*turn_id);
            w.u32(*from_depth);
            w.u32(*limit);
            w.u32(*read_flags);
            w.zero(4);
        }
        Request::GetBlob { hash, read_flags } => {
            w.slice(&hash.0);
            w.u32(*read_flags);
            w.zero(4);
        }
        Request::HasBlobs { hashes } => {
            w.u32(hashes.len() as u32);
            w.zero(4);
            for hash in hashes {
                w.slice(&hash.0);
            }
        }
        Request::Stats | Request::StatsEx => {}
        Request::Gc => w.u32(0),
        Request::CtxOpen {
            base_turn_id,
            get_or_create,
            clone_from,
            name,
            tags,
        } => {
            w.u64(*base_turn_id);
            let mut flags = 0;
            if *get_or_create {
                flags |= open_flags::GET_OR_CREATE;
            }
            if clone_from.is_some() {
                flags |= open_flags::CLONE;
            }
            w.u8(flags);
            w.zero(1);
            if let Some(source) = clone_from {
                w.context_ref(source);
            }
            w.short(name.as_deref().unwrap_or("").as_bytes());
            w.tags(tags);
        }
        Request::CtxShow { context } => w.context_ref(context),
        Request::CtxTag {
            context,
            expected_head,
            set,
            remove,
        } => {
            w.context_ref(context);
            w.u32(if expected_head.is_some() {
                tag_flags::EXPECT_HEAD
            } else {
                0
            });
            w.u64(expected_head.unwrap_or(0));
            w.tags(set);
            w.u16(short_len(remove.len()));
            for key in remove {
                w.short(key.as_bytes());
            }
        }
        Request::CtxList {
            tags,
            name_prefix,
            updated_after_unix_ms,
            updated_before_unix_ms,
            cursor,
            limit,
        } => {
            w.tags(tags);
            w.short(name_prefix.as_deref().unwrap_or("").as_bytes());
            w.u64(updated_after_unix_ms.unwrap_or(0));
            w.u64(updated_before_unix_ms.unwrap_or(0));
            w.list_cursor(cursor);
            w.u32(*limit);
        }
        Request::CtxName { context, name } => {
            w.context_ref(context);
            w.short(name.as_bytes());
        }
        Request::KvPut {
            context,
            if_absent,
            entries,
        } => {
            w.context_ref(context);
            w.u8(u8::from(*if_absent));
            w.u16(short_len(entries.len()));
            for (key, value) in entries {
                w.short(key);
                w.u32(value.len() as u32);
                w.data(value);
            }
        }
        Request::KvGet {
            context,
            key,
            read_flags,
        } => {
            w.context_ref(context);
            w.short(key);
            w.u32(*read_flags);
        }
        Request::KvDelete { context, keys } => {
            w.context_ref(context);
            w.u16(short_len(keys.len()));
            for key in keys {
                w.short(key);
            }
        }
        Request::KvList {
            context,
            prefix,
            after,
            limit,
        } => {
            w.context_ref(context);
            w.short(prefix);
            w.short(after);
            w.u32(*limit);
        }
        Request::AppendTurns {
            context,
            expected_head,
            turns,
        } => {
            w.context_ref(context);
            w.u32(if expected_head.is_some() {
                append_flags::EXPECT_HEAD
            } else {
                0
            });
            w.u64(expected_head.unwrap_or(0));
            w.u16(short_len(turns.len()));
            for spec in turns {
                let (kind, parent) = match spec.parent {
                    ParentWire::Head => (0, 0),
                    ParentWire::Root => (1, 0),
                    ParentWire::Turn(turn_id) => (2, turn_id),
                };
                w.u8(kind);
                w.u64(parent);
                w.u64(spec.type_tag);
                w.u32(spec.codec);
                let mut flags = 0;
                if spec.summary {
                    flags |= turn_spec_flags::SUMMARY;
                }
                if matches!(spec.payload, PayloadSpec::Hash(_)) {
                    flags |= turn_spec_flags::BY_HASH;
                }
                w.u8(flags);
                w.extras(&spec.extras);
                match &spec.payload {
                    PayloadSpec::Hash(hash) => w.slice(&hash.0),
                    PayloadSpec::Bytes(bytes) => {
                        w.u32(bytes.len() as u32);
                        w.data(bytes);
                    }
                }
            }
        }
        Request::GetTurnByKey { context, key } => {
            w.context_ref(context);
            w.tiny(key);
        }
        Request::TurnLog {
            context,
            labels,
            cursor,
            limit,
            read_flags,
        } => {
            w.context_ref(context);
            assert!(labels.len() <= usize::from(u8::MAX));
            w.u8(labels.len() as u8);
            for (key, value) in labels {
                w.tiny(key.as_bytes());
                w.short(value.as_bytes());
            }
            w.log_cursor(cursor);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        Request::FindTurns {
            key,
            value,
            before_turn_id,
            limit,
        } => {
            w.tiny(key.as_bytes());
            w.short(value.as_bytes());
            w.u64(*before_turn_id);
            w.u32(*limit);
        }
        Request::CtxDelete { context } => w.context_ref(context),
        Request::Backup { dir } => w.short(dir.as_bytes()),
        Request::CtxPrune { context, keep } => {
            w.context_ref(context);
            w.u32(*keep);
        }
        Request::CtxTtl {
            context,
            set,
            ttl_ms,
        } => {
            w.context_ref(context);
            w.u8(u8::from(*set));
            w.u64(*ttl_ms);
        }
        Request::ReadPage {
            context,
            kind,
            limit,
            read_flags,
        } => {
            w.context_ref(context);
            let (code, before, from_depth) = match kind {
                PageKind::Last => (0, 0, 0),
                PageKind::Before { before_turn_id } => (1, *before_turn_id, 0),
                PageKind::Range { from_depth } => (2, 0, *from_depth),
                PageKind::Window => (3, 0, 0),
            };
            w.u8(code);
            w.u64(before);
            w.u32(from_depth);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        Request::PatchTurn { turn_id, payload } => {
            w.u64(*turn_id);
            w.u32(payload.len() as u32);
            w.zero(4);
            w.data(payload);
        }
        Request::RedactTurn { turn_id } => w.u64(*turn_id),
        Request::PurgeBlob { hash } => w.slice(&hash.0),
        Request::PutChunked {
            payload_hash,
            base,
            chunks,
            sent,
        } => {
            w.slice(&payload_hash.0);
            match base {
                Some(base) => {
                    w.slice(&base.hash.0);
                    w.u32(base.kept);
                }
                None => {
                    w.zero(32);
                    w.u32(0);
                }
            }
            w.u32(chunks.len() as u32);
            for chunk in chunks {
                w.slice(&chunk.hash.0);
                w.u32(chunk.len);
            }
            w.u32(sent.len() as u32);
            for chunk in sent {
                w.u32(chunk.index);
                w.u32(chunk.bytes.len() as u32);
                w.data(&chunk.bytes);
            }
        }
        Request::AsOf { as_of, read } => {
            request_body(w, read);
            w.u64(*as_of);
        }
    }
}

fn append_fields(
    w: &mut ChunkWriter,
    context: &ContextRef,
    expected_head: Option<u64>,
    type_tag: u64,
    codec: u32,
) {
    w.leading_context(context);
    w.u64(expected_head.unwrap_or(0));
    w.u64(type_tag);
    w.u32(codec);
    w.u32(if expected_head.is_some() {
        append_flags::EXPECT_HEAD
    } else {
        0
    });
}

/// Encodes a response frame as chunks: the first holds the header; payloads of 2 KiB or more
/// are separate chunks referencing the caller's bytes (no copy).
pub fn encode_response(req_id: u64, response: &Response) -> Vec<Bytes> {
    let mut w = ChunkWriter::new();
    response_body(&mut w, response);
    w.finish(response.msg_type(), response.frame_flags(), req_id)
}

fn response_body(w: &mut ChunkWriter, response: &Response) {
    match response {
        Response::Hello {
            version,
            limits,
            server_name,
        } => {
            let name = truncate_utf8(server_name, NAME_BYTES_MAX);
            w.u16(*version);
            w.u16(name.len() as u16);
            w.u32(limits.frame_bytes_max);
            w.u32(limits.requests_in_flight_max);
            w.u32(limits.blob_bytes_max);
            w.u32(limits.read_turns_max);
            w.u32(limits.has_blobs_max);
            w.zero(4);
            w.slice(name.as_bytes());
        }
        Response::Pong { nonce } => w.u64(*nonce),
        Response::Context { head, .. } => w.context_head(head),
        Response::Appended { turn, deduped, .. } => {
            w.turn(turn);
            w.u8(u8::from(*deduped));
            w.zero(7);
        }
        Response::Turn(turn) => w.turn(turn),
        Response::Turns {
            next_before,
            tip_depth,
            entries,
            ..
        } => {
            w.u64(*next_before);
            w.u32(*tip_depth);
            w.u32(entries.len() as u32);
            for entry in entries {
                w.turn(&entry.turn);
                w.payload(&entry.payload);
            }
        }
        Response::Blob(payload) => w.payload(payload),
        Response::HasBlobs { present } => {
            w.u32(present.len() as u32);
            w.zero(4);
            for flag in present {
                w.u8(u8::from(*flag));
            }
        }
        Response::Stats(stats) => w.stats(stats),
        Response::StatsEx { stats, gc } => {
            w.stats(stats);
            w.u64(gc.live_bytes);
            w.u64(gc.dead_bytes);
            w.u64(gc.gc_runs);
            w.u64(gc.bytes_reclaimed_total);
        }
        Response::GcDone(gc) => {
            w.u64(gc.turns_dead);
            w.u64(gc.blobs_dead);
            w.u64(gc.bytes_reclaimed);
            w.u32(gc.packs_compacted);
            w.zero(4);
            w.u64(gc.live_bytes);
            w.u64(gc.dead_bytes);
            w.u64(gc.duration_ms);
        }
        Response::Error {
            code,
            detail,
            message,
        } => {
            let message = truncate_utf8(message, MESSAGE_BYTES_MAX);
            w.u16(code.code());
            w.zero(2);
            w.u32(message.len() as u32);
            w.u64(*detail);
            w.slice(message.as_bytes());
        }
        Response::ContextInfo { info, .. } => w.context_info(info),
        Response::BackedUp(backup) => {
            w.u64(backup.turns);
            w.u64(backup.blobs);
            w.u64(backup.bytes);
            w.u64(backup.linked_bytes);
            w.u64(backup.duration_ms);
            w.short(backup.dir.as_bytes());
        }
        Response::Retention {
            info,
            floor_depth,
            ttl_ms,
            ..
        } => {
            w.context_info(info);
            w.u32(*floor_depth);
            w.u64(*ttl_ms);
        }
        Response::Opened { info, created } => {
            w.context_info(info);
            w.u8(u8::from(*created));
        }
        Response::ContextList {
            next_cursor,
            contexts,
        } => {
            w.list_cursor(next_cursor);
            w.u32(contexts.len() as u32);
            for info in contexts {
                w.context_info(info);
            }
        }
        Response::Done { .. } => {}
        Response::KvValue {
            value_hash,
            payload,
        } => {
            w.slice(&value_hash.0);
            w.payload(payload);
        }
        Response::KvList { items } => {
            w.u32(items.len() as u32);
            for item in items {
                w.short(&item.key);
                w.slice(&item.value_hash.0);
                w.u32(item.value_len);
            }
        }
        Response::AppendedTurns { turns } => {
            w.u32(turns.len() as u32);
            for appended in turns {
                w.turn(&appended.turn);
                w.u8(u8::from(appended.deduped));
                w.u8(u8::from(appended.existing));
            }
        }
        Response::TurnInfo { turn, extras } => {
            w.turn(turn);
            w.extras(extras);
        }
        Response::TurnLog {
            next_cursor,
            entries,
        } => {
            w.log_cursor(next_cursor);
            w.entries_v2(entries);
        }
        Response::Page {
            next_before,
            tip_depth,
            entries,
        } => {
            w.u64(*next_before);
            w.u32(*tip_depth);
            w.entries_v2(entries);
        }
        Response::FoundTurns { next_before, turns } => {
            w.u64(*next_before);
            w.u32(turns.len() as u32);
            for (turn, extras) in turns {
                w.turn(turn);
                w.extras(extras);
            }
        }
        Response::Patched {
            turn_id,
            overlay_seq,
            payload_hash,
            payload_len,
        } => {
            w.u64(*turn_id);
            w.u64(*overlay_seq);
            w.slice(&payload_hash.0);
            w.u32(*payload_len);
            w.zero(4);
        }
        Response::Redacted {
            turn_id,
            overlay_seq,
        } => {
            w.u64(*turn_id);
            w.u64(*overlay_seq);
        }
        Response::Purged {
            payload_hash,
            turns_redacted,
            overlay_seq,
        } => {
            w.slice(&payload_hash.0);
            w.u64(*turns_redacted);
            w.u64(*overlay_seq);
        }
        Response::ChunkedStored {
            payload_hash,
            payload_len,
            already_stored,
        } => {
            w.slice(&payload_hash.0);
            w.u64(*payload_len);
            w.u8(u8::from(*already_stored));
            w.zero(7);
        }
        Response::Overlaid { response, overlays } => {
            // One state per TURN: the server builds both from the same page.
            assert_eq!(overlays.len(), response.turn_count(), "an overlay per turn");
            response_body(w, response);
            w.u32(overlays.len() as u32);
            for overlay in overlays {
                w.u64(overlay.overlay_seq);
                w.u8(if overlay.redacted {
                    overlay_flags::REDACTED
                } else {
                    0
                });
                w.zero(7);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(token_len: usize, name_len: usize) -> Request {
        Request::Hello {
            min_version: 1,
            max_version: 1,
            token: Bytes::from(vec![b't'; token_len]),
            client_name: "n".repeat(name_len),
        }
    }

    #[test]
    fn over_long_fields_are_errors_not_panics() {
        let mut out = BytesMut::new();
        assert!(encode_request(1, &hello(TOKEN_BYTES_MAX, NAME_BYTES_MAX), &mut out).is_ok());
        let encoded = out.len();
        let error = encode_request(2, &hello(TOKEN_BYTES_MAX + 1, 0), &mut out).unwrap_err();
        assert_eq!(
            (error.field, error.len, error.max),
            ("token", TOKEN_BYTES_MAX as u64 + 1, TOKEN_BYTES_MAX as u64)
        );
        let error = encode_request_chunks(3, &hello(0, NAME_BYTES_MAX + 1)).unwrap_err();
        assert_eq!(error.field, "client_name");
        let hashes = vec![Hash32([0; 32]); LIST_ITEMS_LIMIT as usize + 1];
        let error = check_request(&Request::HasBlobs { hashes }).unwrap_err();
        assert_eq!(error.field, "hashes");
        assert_eq!(out.len(), encoded, "a refused request writes nothing");
    }
}
