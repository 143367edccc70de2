//! HELLO, PING, STATS, STATS_EX, GC and BACKUP: the connection's handshake and the messages
//! about the server as a whole rather than one context.
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{EncodeError, SHORT, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, truncate_utf8};
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of an admin request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Request, DecodeError> {
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
        MessageType::Stats => Request::Stats,
        MessageType::StatsEx => Request::StatsEx,
        MessageType::Gc => {
            cursor.flags(0, "gc_flags")?;
            Request::Gc
        }
        MessageType::Backup => {
            let dir = cursor.short_string("dir")?;
            // What the encoder refuses, the decoder refuses (found by fuzz/frame_decoder).
            if dir.is_empty() {
                return Err(cursor.invalid("dir", "an empty backup directory"));
            }
            Request::Backup { dir }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// What of an admin request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
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
        Request::Backup { dir } => within("dir", dir.len(), 1, SHORT, "bytes"),
        _ => Ok(()),
    }
}

/// Writes the body of an admin request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
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
        Request::Stats | Request::StatsEx => {}
        Request::Gc => w.u32(0),
        Request::Backup { dir } => w.short(dir.as_bytes()),
        _ => unreachable!("Family::of routes only admin requests here"),
    }
}

/// Reads the body of the answer to an admin request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
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
        MessageType::Backup => Response::BackedUp(BackupWire {
            turns: cursor.u64()?,
            blobs: cursor.u64()?,
            bytes: cursor.u64()?,
            linked_bytes: cursor.u64()?,
            duration_ms: cursor.u64()?,
            dir: cursor.short_string("dir")?,
        }),
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to an admin request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
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
        Response::BackedUp(backup) => {
            w.u64(backup.turns);
            w.u64(backup.blobs);
            w.u64(backup.bytes);
            w.u64(backup.linked_bytes);
            w.u64(backup.duration_ms);
            w.short(backup.dir.as_bytes());
        }
        _ => unreachable!("response_body routes only admin answers here"),
    }
}
