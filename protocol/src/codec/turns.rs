//! The turns of version 1: APPEND_TURN, APPEND_TURN_BY_HASH, GET_TURN, GET_LAST, GET_BEFORE,
//! GET_RANGE_BY_DEPTH and GET_CHAIN (TURN records, each with its PAYLOAD when asked).
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of a version-1 turn request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
    by_name: bool,
) -> Result<Request, DecodeError> {
    let request = match message_type {
        MessageType::AppendTurn | MessageType::AppendTurnByHash => {
            read_append(message_type, cursor, by_name)?
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
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// APPEND_TURN and APPEND_TURN_BY_HASH: the fields they share (`append_fields`), then the
/// payload (`u32 len, 4 reserved, bytes`) or the hash of a stored blob.
fn read_append(
    message_type: MessageType,
    cursor: &mut Cursor,
    by_name: bool,
) -> Result<Request, DecodeError> {
    let context = cursor.leading_context(by_name)?;
    let expected = cursor.u64()?;
    let type_tag = cursor.u64()?;
    let codec = cursor.u32()?;
    let flags = cursor.flags(append_flags::KNOWN, "append_flags")?;
    let expected_head = (flags & append_flags::EXPECT_HEAD != 0).then_some(expected);
    if expected_head.is_none() && expected != 0 {
        return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
    }
    let request = if message_type == MessageType::AppendTurn {
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
    };
    Ok(request)
}

/// What of a version-1 turn request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
        Request::AppendTurn { payload, .. } => within(
            "payload",
            payload.len(),
            0,
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
        _ => Ok(()),
    }
}

/// Writes the body of a version-1 turn request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
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
        _ => unreachable!("Family::of routes only version-1 turn requests here"),
    }
}

/// The fields APPEND_TURN and APPEND_TURN_BY_HASH share, up to their payload or its hash.
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

/// Reads the body of the answer to a version-1 turn request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
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
            let count = cursor.list_count()?;
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
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to a version-1 turn request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
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
        _ => unreachable!("response_body routes only version-1 turn answers here"),
    }
}
