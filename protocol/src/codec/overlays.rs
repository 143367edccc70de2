//! Overlays and redaction (version 2, decision 0012): PATCH_TURN, REDACT_TURN and PURGE_BLOB,
//! and the overlay states an answer in the overlay view (frame flag `OVERLAYS`) ends with.
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of an overlay request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Request, DecodeError> {
    let request = match message_type {
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
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// What of an overlay request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
        Request::PatchTurn { payload, .. } => within(
            "payload",
            payload.len(),
            0,
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
        _ => Ok(()),
    }
}

/// Writes the body of an overlay request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
        Request::PatchTurn { turn_id, payload } => {
            w.u64(*turn_id);
            w.u32(payload.len() as u32);
            w.zero(4);
            w.data(payload);
        }
        Request::RedactTurn { turn_id } => w.u64(*turn_id),
        Request::PurgeBlob { hash } => w.slice(&hash.0),
        _ => unreachable!("Family::of routes only overlay requests here"),
    }
}

/// Reads the body of the answer to an overlay request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
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
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to an overlay request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
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
        _ => unreachable!("response_body routes only overlay answers here"),
    }
}

/// The overlay states an answer in the overlay view (frame flag `OVERLAYS`) ends with: `u32
/// count`, one per TURN of the answer (`turn_count`, in wire order), then `count` × OVERLAY
/// (16 bytes: `u64 overlay_seq, u8 overlay_flags, 7 reserved`).
pub(super) fn read_states(
    cursor: &mut Cursor,
    turn_count: usize,
) -> Result<Vec<OverlayWire>, DecodeError> {
    let count = cursor.u32()? as usize;
    if count != turn_count {
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
    Ok(states)
}

/// The overlay states of an answer in the overlay view (`read_states`' layout).
pub(super) fn write_states(w: &mut ChunkWriter, overlays: &[OverlayWire]) {
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
