//! Requests: decoding (`decode_request`, `decode_request_as`), checking (`check_request`) and
//! encoding (`encode_request`, `encode_request_chunks`). Each is a dispatch on the message's
//! family (`Family::of`); the family's module reads and writes its messages' bodies. What is
//! frame-level stays here: the frame flags and the overlay view's `as_of` (`Request::AsOf`).

use bytes::{BufMut, Bytes, BytesMut};

use super::check::{self, EncodeError};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use super::{Family, admin, agent_turns, blobs, contexts, kv, overlays, retention, turns};
use crate::error::DecodeError;
use crate::frame::FrameHeader;
use crate::message::*;

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
    let overlay_view = header.flags & frame_flags::OVERLAYS != 0;
    if header.flags & !frame_flags::KNOWN != 0 {
        return Err(cursor.invalid("flags", "unknown frame flag bits"));
    }
    if by_name && !message_type.takes_context() {
        return Err(cursor.invalid("flags", "CTX_BY_NAME on a message without a context_id"));
    }
    if overlay_view && !message_type.takes_overlays() {
        return Err(cursor.invalid("flags", "OVERLAYS on a message that returns no turns"));
    }
    let request = match Family::of(message_type) {
        Family::Admin => admin::read_request(message_type, &mut cursor)?,
        Family::Contexts => contexts::read_request(message_type, &mut cursor, by_name)?,
        Family::Retention => retention::read_request(message_type, &mut cursor)?,
        Family::Kv => kv::read_request(message_type, &mut cursor)?,
        Family::Turns => turns::read_request(message_type, &mut cursor, by_name)?,
        Family::AgentTurns => agent_turns::read_request(message_type, &mut cursor)?,
        Family::Overlays => overlays::read_request(message_type, &mut cursor)?,
        Family::Blobs => blobs::read_request(message_type, &mut cursor)?,
    };
    let request = if overlay_view {
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

/// Checks what the encoder cannot write: lengths outside what the wire carries (a `u16`
/// length, an empty name where 0 means "none"). Input from a caller is never asserted on.
/// Semantic limits (names ≤ 256 B, ≤ 32 tags, …) are the server's to enforce and report.
pub fn check_request(request: &Request) -> Result<(), EncodeError> {
    if let Some(leading) = request.leading_context() {
        check::context(leading)?;
    }
    if let Request::AsOf { read, .. } = request {
        if matches!(**read, Request::AsOf { .. }) || !read.message_type().takes_overlays() {
            return Err(EncodeError {
                field: "overlay view (a read returning turns, once)",
                len: 1,
                min: 0,
                max: 0,
                unit: "wrappers",
            });
        }
        return check_request(read);
    }
    match Family::of(request.message_type()) {
        Family::Admin => admin::check_request(request),
        Family::Contexts => contexts::check_request(request),
        Family::Retention => retention::check_request(request),
        Family::Kv => kv::check_request(request),
        Family::Turns => turns::check_request(request),
        Family::AgentTurns => agent_turns::check_request(request),
        Family::Overlays => overlays::check_request(request),
        Family::Blobs => blobs::check_request(request),
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

/// A request's body (`check_request` passed). An overlay view's read is the read's body, then
/// `u64 as_of`.
fn request_body(w: &mut ChunkWriter, request: &Request) {
    if let Request::AsOf { as_of, read } = request {
        request_body(w, read);
        w.u64(*as_of);
        return;
    }
    match Family::of(request.message_type()) {
        Family::Admin => admin::write_request(w, request),
        Family::Contexts => contexts::write_request(w, request),
        Family::Retention => retention::write_request(w, request),
        Family::Kv => kv::write_request(w, request),
        Family::Turns => turns::write_request(w, request),
        Family::AgentTurns => agent_turns::write_request(w, request),
        Family::Overlays => overlays::write_request(w, request),
        Family::Blobs => blobs::write_request(w, request),
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
        let hashes = vec![BlobHash([0; 32]); LIST_ITEMS_LIMIT as usize + 1];
        let error = check_request(&Request::HasBlobs { hashes }).unwrap_err();
        assert_eq!(error.field, "hashes");
        assert_eq!(out.len(), encoded, "a refused request writes nothing");
    }
}
