//! Overlays and redaction (version 2, decision 0012): PATCH_TURN, REDACT_TURN and PURGE_BLOB,
//! and the overlay states an answer in the overlay view (frame flag `OVERLAYS`) ends with.
//! Layouts in docs/protocol.md.

use bytes::Bytes;

use super::answer::{AnswerLimits, FIXED_ANSWER_BYTES};
use super::check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// The overlay messages (`Family::of` in codec/mod.rs maps message types to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    PatchTurn,
    RedactTurn,
    PurgeBlob,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OverlaysRequest {
    PatchTurn(PatchTurn),
    RedactTurn(RedactTurn),
    PurgeBlob(PurgeBlob),
}

/// Gives a turn a new payload (decision 0012); reads `as_of` an older overlay still see
/// the payload it had then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchTurn {
    pub turn_id: u64,
    pub payload: Bytes,
}

/// Takes a turn's payload away, in every view; its bytes leave at the next collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedactTurn {
    pub turn_id: u64,
}

/// Redacts every turn naming the blob and hides it by hash (the compliance path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurgeBlob {
    pub hash: BlobHash,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OverlaysResponse {
    Patched(Patched),
    Redacted(Redacted),
    Purged(Purged),
}

/// Answer to PATCH_TURN: the turn's new payload and the patch's sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patched {
    pub turn_id: u64,
    pub overlay_seq: u64,
    pub payload_hash: BlobHash,
    pub payload_len: u32,
}

/// Answer to REDACT_TURN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted {
    pub turn_id: u64,
    pub overlay_seq: u64,
}

/// Answer to PURGE_BLOB: how many turns it redacted (not counting those redacted before)
/// and the purge record's sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Purged {
    pub payload_hash: BlobHash,
    pub turns_redacted: u64,
    pub overlay_seq: u64,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = OverlaysRequest;
pub type Answers = OverlaysResponse;

impl OverlaysRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            OverlaysRequest::PatchTurn(PatchTurn { .. }) => MessageType::PatchTurn,
            OverlaysRequest::RedactTurn(RedactTurn { .. }) => MessageType::RedactTurn,
            OverlaysRequest::PurgeBlob(PurgeBlob { .. }) => MessageType::PurgeBlob,
        }
    }

    /// The largest answer (see `codec/answer.rs`): fixed fields.
    pub fn answer_bytes_max(&self, _limits: &AnswerLimits) -> u64 {
        FIXED_ANSWER_BYTES
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<OverlaysRequest, DecodeError> {
        Ok(match kind {
            Kind::PatchTurn => {
                let turn_id = cursor.u64()?;
                let payload_len = cursor.u32()? as usize;
                cursor.zero(4, "reserved")?;
                OverlaysRequest::PatchTurn(PatchTurn {
                    turn_id,
                    payload: cursor.bytes(payload_len)?,
                })
            }
            Kind::RedactTurn => OverlaysRequest::RedactTurn(RedactTurn {
                turn_id: cursor.u64()?,
            }),
            Kind::PurgeBlob => OverlaysRequest::PurgeBlob(PurgeBlob {
                hash: cursor.hash()?,
            }),
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            OverlaysRequest::PatchTurn(PatchTurn { payload, .. }) => within(
                "payload",
                payload.len(),
                0,
                APPEND_PAYLOAD_BYTES_LIMIT,
                "bytes",
            ),
            OverlaysRequest::RedactTurn(RedactTurn { .. })
            | OverlaysRequest::PurgeBlob(PurgeBlob { .. }) => Ok(()),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            OverlaysRequest::PatchTurn(PatchTurn { turn_id, payload }) => {
                w.u64(*turn_id);
                w.u32(payload.len() as u32);
                w.zero(4);
                w.data(payload);
            }
            OverlaysRequest::RedactTurn(RedactTurn { turn_id }) => w.u64(*turn_id),
            OverlaysRequest::PurgeBlob(PurgeBlob { hash }) => w.slice(&hash.0),
        }
    }
}

impl OverlaysResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            OverlaysResponse::Patched(Patched { .. }) => MessageType::PatchTurn,
            OverlaysResponse::Redacted(Redacted { .. }) => MessageType::RedactTurn,
            OverlaysResponse::Purged(Purged { .. }) => MessageType::PurgeBlob,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<OverlaysResponse, DecodeError> {
        Ok(match kind {
            Kind::PatchTurn => {
                let response = OverlaysResponse::Patched(Patched {
                    turn_id: cursor.u64()?,
                    overlay_seq: cursor.u64()?,
                    payload_hash: cursor.hash()?,
                    payload_len: cursor.u32()?,
                });
                cursor.zero(4, "reserved")?;
                response
            }
            Kind::RedactTurn => OverlaysResponse::Redacted(Redacted {
                turn_id: cursor.u64()?,
                overlay_seq: cursor.u64()?,
            }),
            Kind::PurgeBlob => OverlaysResponse::Purged(Purged {
                payload_hash: cursor.hash()?,
                turns_redacted: cursor.u64()?,
                overlay_seq: cursor.u64()?,
            }),
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            OverlaysResponse::Patched(Patched {
                turn_id,
                overlay_seq,
                payload_hash,
                payload_len,
            }) => {
                w.u64(*turn_id);
                w.u64(*overlay_seq);
                w.slice(&payload_hash.0);
                w.u32(*payload_len);
                w.zero(4);
            }
            OverlaysResponse::Redacted(Redacted {
                turn_id,
                overlay_seq,
            }) => {
                w.u64(*turn_id);
                w.u64(*overlay_seq);
            }
            OverlaysResponse::Purged(Purged {
                payload_hash,
                turns_redacted,
                overlay_seq,
            }) => {
                w.slice(&payload_hash.0);
                w.u64(*turns_redacted);
                w.u64(*overlay_seq);
            }
        }
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
        let flags = cursor.flags_u8(overlay_flags::KNOWN, "overlay_flags")?;
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
