//! `Response`, a variant per message family, and its entry points: decoding
//! (`decode_response`) and encoding (`encode_response`), each one match over the families;
//! the family's module reads and writes the body. What no family owns stays here: ERROR
//! (0xFFFF, the answer to any request) and the frame flag `OVERLAYS` (`Response::Overlaid`,
//! whose states `overlays.rs` reads and writes). The frame flag MORE is STREAM_FOLLOW's
//! (`StreamsResponse::Pushed`).

use bytes::Bytes;

use super::cursor::Cursor;
use super::streams;
use super::writer::{ChunkWriter, truncate_utf8};
use super::{
    AdminResponse, AppendsResponse, BlobsResponse, ContextsResponse, Family, KvResponse,
    OverlaysResponse, ReadsResponse, RetentionResponse, StreamsResponse, VectorsResponse, overlays,
};
use crate::error::{DecodeError, ErrorCode};
use crate::frame::FrameHeader;
use crate::message::*;

/// An answer: the family of the request it answers, then the message; or ERROR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Admin(AdminResponse),
    Contexts(ContextsResponse),
    Retention(RetentionResponse),
    Kv(KvResponse),
    Appends(AppendsResponse),
    Reads(ReadsResponse),
    Overlays(OverlaysResponse),
    Blobs(BlobsResponse),
    Streams(StreamsResponse),
    Vectors(VectorsResponse),
    /// Answer to a read sent with `Request::AsOf`: the read's answer (boxed: a TURN would grow
    /// every response's size), and one overlay state per TURN in it, in order (frame flag
    /// `OVERLAYS`).
    Overlaid {
        response: Box<ReadsResponse>,
        overlays: Vec<OverlayWire>,
    },
    Error {
        code: ErrorCode,
        detail: u64,
        message: String,
    },
}

impl Response {
    /// The `msg_type` of the frame that carries this response.
    pub fn msg_type(&self) -> u16 {
        let answered = match self {
            Response::Admin(response) => response.message_type(),
            Response::Contexts(response) => response.message_type(),
            Response::Retention(response) => response.message_type(),
            Response::Kv(response) => response.message_type(),
            Response::Appends(response) => response.message_type(),
            Response::Reads(response) => response.message_type(),
            Response::Overlaid { response, .. } => response.message_type(),
            Response::Overlays(response) => response.message_type(),
            Response::Blobs(response) => response.message_type(),
            Response::Streams(response) => response.message_type(),
            Response::Vectors(response) => response.message_type(),
            Response::Error { .. } => return ERROR_TYPE,
        };
        answered.response_code()
    }

    /// The frame header's `flags` this response is sent with.
    pub fn frame_flags(&self) -> u16 {
        match self {
            Response::Overlaid { .. } => frame_flags::OVERLAYS,
            Response::Streams(StreamsResponse::Pushed(streams::Pushed { more: true, .. })) => {
                frame_flags::MORE
            }
            _ => 0,
        }
    }

    pub fn error(code: ErrorCode, message: impl Into<String>) -> Response {
        Response::Error {
            code,
            detail: 0,
            message: message.into(),
        }
    }
}

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
    let more = header.flags & frame_flags::MORE != 0;
    if header.flags & !(frame_flags::OVERLAYS | frame_flags::MORE) != 0
        || (overlay_view && !message_type.takes_overlays())
        || (more && message_type != MessageType::StreamFollow)
    {
        return Err(cursor.invalid("flags", "frame flags this answer cannot carry"));
    }
    let response = match Family::of(message_type) {
        Family::Admin(kind) => Response::Admin(AdminResponse::read(kind, &mut cursor)?),
        Family::Contexts(kind) => {
            Response::Contexts(ContextsResponse::read(kind, message_type, &mut cursor)?)
        }
        Family::Retention(kind) => {
            Response::Retention(RetentionResponse::read(kind, message_type, &mut cursor)?)
        }
        Family::Kv(kind) => Response::Kv(KvResponse::read(kind, message_type, &mut cursor)?),
        Family::Appends(kind) => {
            Response::Appends(AppendsResponse::read(kind, message_type, &mut cursor)?)
        }
        Family::Reads(kind) => {
            let response = ReadsResponse::read(kind, message_type, &mut cursor)?;
            if overlay_view {
                let overlays = overlays::read_states(&mut cursor, response.turn_count())?;
                Response::Overlaid {
                    response: Box::new(response),
                    overlays,
                }
            } else {
                Response::Reads(response)
            }
        }
        Family::Overlays(kind) => Response::Overlays(OverlaysResponse::read(kind, &mut cursor)?),
        Family::Blobs(kind) => Response::Blobs(BlobsResponse::read(kind, &mut cursor)?),
        Family::Streams(kind) => Response::Streams(StreamsResponse::read(kind, &mut cursor, more)?),
        Family::Vectors(kind) => Response::Vectors(VectorsResponse::read(kind, &mut cursor)?),
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
    match response {
        Response::Admin(response) => response.write(&mut w),
        Response::Contexts(response) => response.write(&mut w),
        Response::Retention(response) => response.write(&mut w),
        Response::Kv(response) => response.write(&mut w),
        Response::Appends(response) => response.write(&mut w),
        Response::Reads(response) => response.write(&mut w),
        Response::Overlaid {
            response,
            overlays: states,
        } => {
            // One state per TURN: the server builds both from the same page.
            assert_eq!(states.len(), response.turn_count(), "an overlay per turn");
            response.write(&mut w);
            overlays::write_states(&mut w, states);
        }
        Response::Overlays(response) => response.write(&mut w),
        Response::Blobs(response) => response.write(&mut w),
        Response::Streams(response) => response.write(&mut w),
        Response::Vectors(response) => response.write(&mut w),
        Response::Error {
            code,
            detail,
            message,
        } => write_error(&mut w, *code, *detail, message),
    }
    w.finish(response.msg_type(), response.frame_flags(), req_id)
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
