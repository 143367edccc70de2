//! Turns for agent frameworks (version 2, decision 0009): APPEND_TURNS, GET_TURN_BY_KEY,
//! TURN_LOG, READ_PAGE and FIND_TURNS, whose turns carry their key, labels and links (EXTRAS).
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError, SHORT, TINY, context, extras, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of an agent-turn request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Request, DecodeError> {
    let request = match message_type {
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
            Request::ReadPage {
                context,
                kind: cursor.page_kind()?,
                limit: cursor.u32()?,
                read_flags: cursor.flags(read_flags::KNOWN, "read_flags")?,
            }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// What of an agent-turn request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
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
        _ => Ok(()),
    }
}

/// Writes the body of an agent-turn request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
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
                w.turn_spec(spec);
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
        Request::ReadPage {
            context,
            kind,
            limit,
            read_flags,
        } => {
            w.context_ref(context);
            w.page_kind(kind);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        _ => unreachable!("Family::of routes only agent-turn requests here"),
    }
}

/// Reads the body of the answer to an agent-turn request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
        MessageType::AppendTurns => {
            let count = cursor.list_count()?;
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
            let count = cursor.list_count()?;
            let mut turns = Vec::with_capacity(cursor.list_capacity(count as usize, 91));
            for _ in 0..count {
                turns.push((cursor.turn()?, cursor.extras()?));
            }
            Response::FoundTurns { next_before, turns }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to an agent-turn request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
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
        _ => unreachable!("response_body routes only agent-turn answers here"),
    }
}
