//! Responses: decoding (`decode_response`) and encoding (`encode_response`). Each is a
//! dispatch on the answered request's family; the family's module reads and writes the body.
//! What no family owns stays here: ERROR (0xFFFF, the answer to any request) and the frame
//! flag `OVERLAYS` (`Response::Overlaid`, whose states `overlays.rs` reads and writes).

use bytes::Bytes;

use super::cursor::Cursor;
use super::writer::{ChunkWriter, truncate_utf8};
use super::{Family, admin, agent_turns, blobs, contexts, kv, overlays, retention, turns};
use crate::error::{DecodeError, ErrorCode};
use crate::frame::FrameHeader;
use crate::message::*;

/// Decodes a response body, given the frame's `msg_type`.
pub fn decode_response(header: &FrameHeader, body: Bytes) -> Result<Response, DecodeError> {
    if header.msg_type == ERROR_TYPE {
        return read_error(body);
    }
    let request_type = header.msg_type & !RESPONSE_BIT;
    let message_type = MessageType::from_code(request_type)
        .filter(|_| header.msg_type & RESPONSE_BIT != 0)
        .ok_or(DecodeError::UnknownMessage(header.msg_type))?;
    let mut cursor = Cursor::new(body, message_type.name());
    let overlay_view = header.flags & frame_flags::OVERLAYS != 0;
    if header.flags & !frame_flags::OVERLAYS != 0
        || (overlay_view && !message_type.takes_overlays())
    {
        return Err(cursor.invalid("flags", "frame flags this answer cannot carry"));
    }
    let response = match Family::of(message_type) {
        Family::Admin => admin::read_response(message_type, &mut cursor)?,
        Family::Contexts => contexts::read_response(message_type, &mut cursor)?,
        Family::Retention => retention::read_response(message_type, &mut cursor)?,
        Family::Kv => kv::read_response(message_type, &mut cursor)?,
        Family::Turns => turns::read_response(message_type, &mut cursor)?,
        Family::AgentTurns => agent_turns::read_response(message_type, &mut cursor)?,
        Family::Overlays => overlays::read_response(message_type, &mut cursor)?,
        Family::Blobs => blobs::read_response(message_type, &mut cursor)?,
    };
    let response = if overlay_view {
        let states = overlays::read_states(&mut cursor, response.turn_count())?;
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

/// ERROR's body: `u16 code, 2 reserved, u32 message_len, u64 detail, message` (UTF-8).
fn read_error(body: Bytes) -> Result<Response, DecodeError> {
    let mut cursor = Cursor::new(body, "ERROR");
    let code = cursor.u16()?;
    let code =
        ErrorCode::from_code(code).ok_or_else(|| cursor.invalid("code", "unknown error code"))?;
    cursor.zero(2, "reserved")?;
    let message_len = cursor.u32()? as usize;
    if message_len > MESSAGE_BYTES_MAX {
        return Err(cursor.too_large("message_len", message_len as u64, MESSAGE_BYTES_MAX as u64));
    }
    let detail = cursor.u64()?;
    let message = cursor.string(message_len, "message")?;
    cursor.finish()?;
    Ok(Response::Error {
        code,
        detail,
        message,
    })
}

/// Encodes a response frame as chunks: the first holds the header; payloads of 2 KiB or more
/// are separate chunks referencing the caller's bytes (no copy).
pub fn encode_response(req_id: u64, response: &Response) -> Vec<Bytes> {
    let mut w = ChunkWriter::new();
    response_body(&mut w, response);
    w.finish(response.msg_type(), response.frame_flags(), req_id)
}

/// A response's body. Routed by variant, not by `Family::of`, since a variant (`Context`,
/// `Turns`, …) may answer several message types; the match has no catch-all, so a new variant
/// must be given its family here.
fn response_body(w: &mut ChunkWriter, response: &Response) {
    match response {
        Response::Error {
            code,
            detail,
            message,
        } => write_error(w, *code, *detail, message),
        Response::Overlaid {
            response,
            overlays: states,
        } => {
            // One state per TURN: the server builds both from the same page.
            assert_eq!(states.len(), response.turn_count(), "an overlay per turn");
            response_body(w, response);
            overlays::write_states(w, states);
        }
        Response::Hello { .. }
        | Response::Pong { .. }
        | Response::Stats(_)
        | Response::StatsEx { .. }
        | Response::GcDone(_)
        | Response::BackedUp(_) => admin::write_response(w, response),
        Response::Context { .. }
        | Response::ContextInfo { .. }
        | Response::Opened { .. }
        | Response::ContextList { .. } => contexts::write_response(w, response),
        Response::Retention { .. } => retention::write_response(w, response),
        Response::Done { .. } | Response::KvValue { .. } | Response::KvList { .. } => {
            kv::write_response(w, response)
        }
        Response::Appended { .. } | Response::Turn(_) | Response::Turns { .. } => {
            turns::write_response(w, response)
        }
        Response::AppendedTurns { .. }
        | Response::TurnInfo { .. }
        | Response::TurnLog { .. }
        | Response::Page { .. }
        | Response::FoundTurns { .. } => agent_turns::write_response(w, response),
        Response::Patched { .. } | Response::Redacted { .. } | Response::Purged { .. } => {
            overlays::write_response(w, response)
        }
        Response::Blob(_) | Response::HasBlobs { .. } | Response::ChunkedStored { .. } => {
            blobs::write_response(w, response)
        }
    }
}

/// ERROR's body; a message longer than the protocol's 4 KiB is cut on a character boundary.
fn write_error(w: &mut ChunkWriter, code: ErrorCode, detail: u64, message: &str) {
    let message = truncate_utf8(message, MESSAGE_BYTES_MAX);
    w.u16(code.code());
    w.zero(2);
    w.u32(message.len() as u32);
    w.u64(detail);
    w.slice(message.as_bytes());
}
