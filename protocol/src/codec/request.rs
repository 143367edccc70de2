//! `Request`, a variant per message family, and its entry points: decoding
//! (`decode_request`, `decode_request_as`), checking (`check_request`) and encoding
//! (`encode_request`, `encode_request_chunks`), each one match over the families; the
//! family's module reads and writes its messages' bodies. What is frame-level stays here: the
//! frame flags, the overlay view's `as_of` (`Request::AsOf`) and when a write is
//! acknowledged (`Request::AckAfter`, version 4).

use bytes::{BufMut, Bytes, BytesMut};

use super::answer::AnswerLimits;
use super::appends;
use super::check::{self, EncodeError};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use super::{
    AdminRequest, AppendsRequest, BlobsRequest, ContextsRequest, Family, KvRequest,
    OverlaysRequest, ReadsRequest, RetentionRequest, StreamsRequest, VectorsRequest,
};
use crate::error::DecodeError;
use crate::frame::FrameHeader;
use crate::message::*;

/// A request: the family that owns it, then the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Admin(AdminRequest),
    Contexts(ContextsRequest),
    Retention(RetentionRequest),
    Kv(KvRequest),
    Appends(AppendsRequest),
    Reads(ReadsRequest),
    Overlays(OverlaysRequest),
    Blobs(BlobsRequest),
    Streams(StreamsRequest),
    Vectors(VectorsRequest),
    /// A read in the overlay view `as_of` (0: the latest), with each TURN's overlay state in
    /// the answer (frame flag `OVERLAYS`, version 2, decision 0012). Only reads answer TURNs,
    /// so only a read can be in a view.
    AsOf {
        as_of: u64,
        read: ReadsRequest,
    },
    /// A write that says when it is acknowledged (frame flag `ACK_AFTER`, version 4, decision
    /// 0031): `request` is one of `MessageType::takes_ack_after` (never an `AckAfter` or an
    /// `AsOf` itself). A write whose flag is 0 (the server's default) is not wrapped.
    AckAfter {
        request: Box<Request>,
        after: AckAfter,
    },
}

impl Request {
    /// Whether an APPEND_TURNS carries a payload the client compressed (version 3).
    pub fn carries_zstd_payload(&self) -> bool {
        match self {
            Request::AckAfter { request, .. } => request.carries_zstd_payload(),
            Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns {
                turns, ..
            })) => turns
                .iter()
                .any(|turn| matches!(turn.payload, PayloadSpec::Zstd { .. })),
            _ => false,
        }
    }

    pub fn message_type(&self) -> MessageType {
        match self {
            Request::Admin(request) => request.message_type(),
            Request::Contexts(request) => request.message_type(),
            Request::Retention(request) => request.message_type(),
            Request::Kv(request) => request.message_type(),
            Request::Appends(request) => request.message_type(),
            Request::Reads(request) | Request::AsOf { read: request, .. } => request.message_type(),
            Request::Overlays(request) => request.message_type(),
            Request::Blobs(request) => request.message_type(),
            Request::Streams(request) => request.message_type(),
            Request::Vectors(request) => request.message_type(),
            Request::AckAfter { request, .. } => request.message_type(),
        }
    }

    /// The context a request of the version-1 layout names with its leading `context_id`
    /// (`MessageType::takes_context`).
    pub fn leading_context(&self) -> Option<&ContextRef> {
        match self {
            Request::Contexts(request) => request.leading_context(),
            Request::Appends(request) => request.leading_context(),
            Request::Reads(request) | Request::AsOf { read: request, .. } => {
                request.leading_context()
            }
            Request::AckAfter { request, .. } => request.leading_context(),
            Request::Admin(_)
            | Request::Retention(_)
            | Request::Kv(_)
            | Request::Overlays(_)
            | Request::Blobs(_)
            | Request::Streams(_)
            | Request::Vectors(_) => None,
        }
    }

    /// The frame header's `flags` this request is sent with.
    pub fn frame_flags(&self) -> u16 {
        let overlays = match self {
            Request::AsOf { .. } => frame_flags::OVERLAYS,
            Request::AckAfter { request, after } => {
                return request.frame_flags() | frame_flags::ack_after(*after);
            }
            _ => 0,
        };
        match self.leading_context() {
            Some(ContextRef::Name(_)) => frame_flags::CTX_BY_NAME | overlays,
            _ => overlays,
        }
    }

    /// The largest answer this request may produce, in bytes on the wire (frame header
    /// included): what a server reserves of its memory budget before it runs the request.
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            Request::Admin(request) => request.answer_bytes_max(limits),
            Request::Contexts(request) => request.answer_bytes_max(limits),
            Request::Retention(request) => request.answer_bytes_max(limits),
            Request::Kv(request) => request.answer_bytes_max(limits),
            Request::Appends(request) => request.answer_bytes_max(limits),
            Request::Reads(request) => request.answer_bytes_max(limits),
            // As the server's table had it when the bounds moved here (its catch-all): the
            // overlay states add 16 bytes per turn to the read's answer.
            Request::AsOf { .. } => limits.largest(),
            Request::Overlays(request) => request.answer_bytes_max(limits),
            Request::Blobs(request) => request.answer_bytes_max(limits),
            Request::Streams(request) => request.answer_bytes_max(limits),
            Request::Vectors(request) => request.answer_bytes_max(),
            // When it is acknowledged changes nothing of the answer's size.
            Request::AckAfter { request, .. } => request.answer_bytes_max(limits),
        }
    }
}

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
    if version < crate::ACK_AFTER_SINCE_VERSION && header.flags & frame_flags::ACK_AFTER != 0 {
        return Err(DecodeError::Invalid {
            message: "frame",
            field: "flags",
            reason: "ACK_AFTER needs protocol version 4",
        });
    }
    let request = decode_request(header, body)?;
    if version < crate::ZSTD_PAYLOADS_SINCE_VERSION && request.carries_zstd_payload() {
        return Err(DecodeError::Invalid {
            message: "APPEND_TURNS",
            field: "turn_flags",
            reason: "ZSTD payloads need protocol version 3",
        });
    }
    Ok(request)
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
    let ack_after = ack_after(header.flags, message_type, &cursor)?;
    let request = match Family::of(message_type) {
        Family::Admin(kind) => Request::Admin(AdminRequest::read(kind, &mut cursor)?),
        Family::Contexts(kind) => {
            Request::Contexts(ContextsRequest::read(kind, &mut cursor, by_name)?)
        }
        Family::Retention(kind) => Request::Retention(RetentionRequest::read(kind, &mut cursor)?),
        Family::Kv(kind) => Request::Kv(KvRequest::read(kind, &mut cursor)?),
        Family::Appends(kind) => {
            Request::Appends(AppendsRequest::read(kind, &mut cursor, by_name)?)
        }
        Family::Reads(kind) => {
            let read = ReadsRequest::read(kind, &mut cursor, by_name)?;
            if overlay_view {
                Request::AsOf {
                    as_of: cursor.u64()?,
                    read,
                }
            } else {
                Request::Reads(read)
            }
        }
        Family::Overlays(kind) => Request::Overlays(OverlaysRequest::read(kind, &mut cursor)?),
        Family::Blobs(kind) => Request::Blobs(BlobsRequest::read(kind, &mut cursor)?),
        Family::Streams(kind) => Request::Streams(StreamsRequest::read(kind, &mut cursor)?),
        Family::Vectors(kind) => Request::Vectors(VectorsRequest::read(kind, &mut cursor)?),
    };
    cursor.finish()?;
    Ok(match ack_after {
        Some(after) => Request::AckAfter {
            request: Box::new(request),
            after,
        },
        None => request,
    })
}

/// The frame flag `ACK_AFTER` (bits 3–4): `None` for 0 (the server's default); 3, or any
/// value on a message that is not a write of `MessageType::takes_ack_after`, is BAD_FRAME.
fn ack_after(
    flags: u16,
    message_type: MessageType,
    cursor: &Cursor,
) -> Result<Option<AckAfter>, DecodeError> {
    let code = (flags & frame_flags::ACK_AFTER) >> frame_flags::ACK_AFTER_SHIFT;
    if code == 0 {
        return Ok(None);
    }
    if !message_type.takes_ack_after() {
        return Err(cursor.invalid(
            "flags",
            "ACK_AFTER on a message that is not an append, STREAM_SEAL, KV_PUT, KV_PUT_EX or \
             KV_PUT_VECTORS",
        ));
    }
    match AckAfter::from_code(code as u8) {
        Some(after) => Ok(Some(after)),
        None => Err(cursor.invalid("flags", "ACK_AFTER is 3 (only 0, 1 and 2 are defined)")),
    }
}

/// Checks what the encoder cannot write: lengths outside what the wire carries (a `u16`
/// length, an empty name where 0 means "none"). Input from a caller is never asserted on.
/// Semantic limits (names ≤ 256 B, ≤ 32 tags, …) are the server's to enforce and report.
pub fn check_request(request: &Request) -> Result<(), EncodeError> {
    if let Some(leading) = request.leading_context() {
        check::context(leading)?;
    }
    match request {
        Request::Admin(request) => request.check(),
        Request::Contexts(request) => request.check(),
        Request::Retention(request) => request.check(),
        Request::Kv(request) => request.check(),
        Request::Appends(request) => request.check(),
        Request::Reads(request) | Request::AsOf { read: request, .. } => request.check(),
        Request::Overlays(request) => request.check(),
        Request::Blobs(request) => request.check(),
        Request::Streams(request) => request.check(),
        Request::Vectors(request) => request.check(),
        Request::AckAfter { request, .. } => {
            let takes = request.message_type().takes_ack_after()
                && !matches!(**request, Request::AckAfter { .. } | Request::AsOf { .. });
            if !takes {
                return Err(EncodeError {
                    field: "ACK_AFTER (only on appends, STREAM_SEAL, KV_PUT, KV_PUT_EX and KV_PUT_VECTORS)",
                    len: 1,
                    min: 0,
                    max: 0,
                    unit: "frame flags",
                });
            }
            check_request(request)
        }
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
    write_body(request, &mut w);
    Ok(w.finish(request.message_type().code(), request.frame_flags(), req_id))
}

/// A request's body (`check_request` passed): its family's; an overlay view's read, then
/// `u64 as_of`; an acknowledged write's own body (`ACK_AFTER` is in the header only).
fn write_body(request: &Request, w: &mut ChunkWriter) {
    match request {
        Request::Admin(request) => request.write(w),
        Request::Contexts(request) => request.write(w),
        Request::Retention(request) => request.write(w),
        Request::Kv(request) => request.write(w),
        Request::Appends(request) => request.write(w),
        Request::Reads(request) => request.write(w),
        // An overlay view's read is the read's body, then `u64 as_of`.
        Request::AsOf { as_of, read } => {
            read.write(w);
            w.u64(*as_of);
        }
        Request::Overlays(request) => request.write(w),
        Request::Blobs(request) => request.write(w),
        Request::Streams(request) => request.write(w),
        Request::Vectors(request) => request.write(w),
        Request::AckAfter { request, .. } => write_body(request, w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{admin, blobs};

    fn hello(token_len: usize, name_len: usize) -> Request {
        Request::Admin(AdminRequest::Hello(admin::Hello {
            min_version: 1,
            max_version: 1,
            token: Bytes::from(vec![b't'; token_len]),
            client_name: "n".repeat(name_len),
        }))
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
        let error = check_request(&Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs {
            hashes,
        })))
        .unwrap_err();
        assert_eq!(error.field, "hashes");
        assert_eq!(out.len(), encoded, "a refused request writes nothing");
    }
}
