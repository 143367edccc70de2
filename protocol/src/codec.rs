//! Encoding and strict decoding of message bodies. Layouts in docs/protocol.md.
//!
//! Decoding never panics and never trusts a length: every field is bounds-checked, every
//! enum and flag word validated, reserved fields must be zero, and a body must end exactly
//! where its message ends. Payloads are zero-copy slices of the received frame.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, ErrorCode};
use crate::frame::{FRAME_BYTES_LIMIT, FrameHeader, HEADER_BYTES};
use crate::message::*;

/// Payloads at least this large are sent by reference (a separate chunk), not copied.
const COPY_BYTES_MAX: usize = 2048;

// ---------------------------------------------------------------------------------------------
// Reading

/// A bounds-checked reader over a body.
struct Cursor {
    body: Bytes,
    position: usize,
    message: &'static str,
}

impl Cursor {
    fn new(body: Bytes, message: &'static str) -> Self {
        Cursor {
            body,
            position: 0,
            message,
        }
    }

    fn take(&mut self, count: usize) -> Result<&[u8], DecodeError> {
        let end = self
            .position
            .checked_add(count)
            .filter(|end| *end <= self.body.len());
        let Some(end) = end else {
            return Err(DecodeError::Truncated {
                message: self.message,
                needed: self.position.saturating_add(count),
                actual: self.body.len(),
            });
        };
        let slice = &self.body[self.position..end];
        self.position = end;
        Ok(slice)
    }

    fn bytes(&mut self, count: usize) -> Result<Bytes, DecodeError> {
        let start = self.position;
        self.take(count)?;
        Ok(self.body.slice(start..start + count))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let mut word = [0u8; 2];
        word.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(word))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut word = [0u8; 4];
        word.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(word))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn hash(&mut self) -> Result<Hash32, DecodeError> {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(self.take(32)?);
        Ok(Hash32(hash))
    }

    fn zero(&mut self, count: usize, field: &'static str) -> Result<(), DecodeError> {
        if self.take(count)?.iter().any(|&byte| byte != 0) {
            return Err(self.invalid(field, "reserved bytes must be zero"));
        }
        Ok(())
    }

    fn string(&mut self, count: usize, field: &'static str) -> Result<String, DecodeError> {
        let bytes = self.take(count)?.to_vec();
        String::from_utf8(bytes).map_err(|_| self.invalid(field, "not UTF-8"))
    }

    fn invalid(&self, field: &'static str, reason: &'static str) -> DecodeError {
        DecodeError::Invalid {
            message: self.message,
            field,
            reason,
        }
    }

    fn too_large(&self, field: &'static str, value: u64, limit: u64) -> DecodeError {
        DecodeError::TooLarge {
            message: self.message,
            field,
            value,
            limit,
        }
    }

    fn finish(self) -> Result<(), DecodeError> {
        let extra = self.body.len() - self.position;
        if extra != 0 {
            return Err(DecodeError::TrailingBytes {
                message: self.message,
                extra,
            });
        }
        Ok(())
    }

    fn flags(&mut self, known: u32, field: &'static str) -> Result<u32, DecodeError> {
        let flags = self.u32()?;
        if flags & !known != 0 {
            return Err(self.invalid(field, "unknown flag bits"));
        }
        Ok(flags)
    }

    fn turn(&mut self) -> Result<TurnWire, DecodeError> {
        Ok(TurnWire {
            turn_id: self.u64()?,
            parent_turn_id: self.u64()?,
            context_id: self.u64()?,
            depth: self.u32()?,
            codec: self.u32()?,
            type_tag: self.u64()?,
            payload_hash: self.hash()?,
            payload_len: self.u32()?,
            flags: self.u32()?,
            created_at_unix_ms: self.u64()?,
        })
    }

    fn context_head(&mut self) -> Result<ContextHeadWire, DecodeError> {
        let head = ContextHeadWire {
            context_id: self.u64()?,
            head_turn_id: self.u64()?,
            head_depth: self.u32()?,
        };
        self.zero(4, "reserved")?;
        Ok(head)
    }

    fn payload(&mut self) -> Result<PayloadWire, DecodeError> {
        let encoding = self.u16()?;
        let encoding = PayloadEncoding::from_code(encoding)
            .ok_or_else(|| self.invalid("encoding", "unknown"))?;
        self.zero(2, "reserved")?;
        let raw_len = self.u32()?;
        let data_len = self.u32()? as usize;
        self.zero(4, "reserved")?;
        let data = self.bytes(data_len)?;
        match encoding {
            PayloadEncoding::Absent if raw_len != 0 || data_len != 0 => {
                Err(self.invalid("payload", "an absent payload has no bytes"))
            }
            PayloadEncoding::Raw if raw_len as usize != data_len => {
                Err(self.invalid("payload", "raw payload length differs from raw_len"))
            }
            _ => Ok(PayloadWire {
                encoding,
                raw_len,
                data,
            }),
        }
    }
}

/// Decodes a request body. Unknown types are `UnknownMessage`; responses sent as requests too.
pub fn decode_request(header: &FrameHeader, body: Bytes) -> Result<Request, DecodeError> {
    let message_type = MessageType::from_code(header.msg_type)
        .ok_or(DecodeError::UnknownMessage(header.msg_type))?;
    let mut cursor = Cursor::new(body, message_type.name());
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
            context_id: cursor.u64()?,
        },
        MessageType::AppendTurn | MessageType::AppendTurnByHash => {
            let context_id = cursor.u64()?;
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
                    context_id,
                    expected_head,
                    type_tag,
                    codec,
                    payload,
                }
            } else {
                let payload_hash = cursor.hash()?;
                Request::AppendTurnByHash {
                    context_id,
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
            let context_id = cursor.u64()?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            Request::GetLast {
                context_id,
                limit,
                read_flags,
            }
        }
        MessageType::GetBefore => {
            let context_id = cursor.u64()?;
            let before_turn_id = cursor.u64()?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            Request::GetBefore {
                context_id,
                before_turn_id,
                limit,
                read_flags,
            }
        }
        MessageType::GetRangeByDepth => {
            let context_id = cursor.u64()?;
            let from_depth = cursor.u32()?;
            let limit = cursor.u32()?;
            let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
            cursor.zero(4, "reserved")?;
            Request::GetRangeByDepth {
                context_id,
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
        MessageType::Stats => {
            let mut stats = StatsWire {
                turns: cursor.u64()?,
                contexts: cursor.u64()?,
                blobs: cursor.u64()?,
                logical_bytes: cursor.u64()?,
                unique_bytes: cursor.u64()?,
                stored_bytes: cursor.u64()?,
                dedup_hits: cursor.u64()?,
                connections: cursor.u64()?,
                requests_total: cursor.u64()?,
                errors_total: cursor.u64()?,
                uptime_ms: cursor.u64()?,
                read_only: false,
            };
            stats.read_only = match cursor.u8()? {
                0 => false,
                1 => true,
                _ => return Err(cursor.invalid("read_only", "not 0 or 1")),
            };
            cursor.zero(7, "reserved")?;
            Response::Stats(stats)
        }
    };
    cursor.finish()?;
    Ok(response)
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Builds one frame as a list of chunks: header and small fields copied into buffers, large
/// payloads referenced as they are, ready for a vectored write.
struct ChunkWriter {
    first: BytesMut,
    rest: Vec<Bytes>,
    tail: BytesMut,
}

impl ChunkWriter {
    fn new() -> Self {
        let mut first = BytesMut::with_capacity(256);
        first.put_bytes(0, HEADER_BYTES);
        ChunkWriter {
            first,
            rest: Vec::new(),
            tail: BytesMut::new(),
        }
    }

    fn current(&mut self) -> &mut BytesMut {
        if self.rest.is_empty() {
            &mut self.first
        } else {
            &mut self.tail
        }
    }

    fn u8(&mut self, value: u8) {
        self.current().put_u8(value);
    }

    fn u16(&mut self, value: u16) {
        self.current().put_u16_le(value);
    }

    fn u32(&mut self, value: u32) {
        self.current().put_u32_le(value);
    }

    fn u64(&mut self, value: u64) {
        self.current().put_u64_le(value);
    }

    fn slice(&mut self, bytes: &[u8]) {
        self.current().put_slice(bytes);
    }

    fn zero(&mut self, count: usize) {
        self.current().put_bytes(0, count);
    }

    fn data(&mut self, data: &Bytes) {
        if data.len() < COPY_BYTES_MAX {
            self.slice(data);
            return;
        }
        if !self.tail.is_empty() {
            self.rest.push(self.tail.split().freeze());
        }
        self.rest.push(data.clone());
    }

    fn turn(&mut self, turn: &TurnWire) {
        self.u64(turn.turn_id);
        self.u64(turn.parent_turn_id);
        self.u64(turn.context_id);
        self.u32(turn.depth);
        self.u32(turn.codec);
        self.u64(turn.type_tag);
        self.slice(&turn.payload_hash.0);
        self.u32(turn.payload_len);
        self.u32(turn.flags);
        self.u64(turn.created_at_unix_ms);
    }

    fn context_head(&mut self, head: &ContextHeadWire) {
        self.u64(head.context_id);
        self.u64(head.head_turn_id);
        self.u32(head.head_depth);
        self.zero(4);
    }

    fn payload(&mut self, payload: &PayloadWire) {
        self.u16(payload.encoding as u16);
        self.zero(2);
        self.u32(payload.raw_len);
        self.u32(payload.data.len() as u32);
        self.zero(4);
        self.data(&payload.data);
    }

    fn finish(mut self, msg_type: u16, req_id: u64) -> Vec<Bytes> {
        if !self.tail.is_empty() {
            self.rest.push(self.tail.split().freeze());
        }
        let body_len =
            self.first.len() - HEADER_BYTES + self.rest.iter().map(Bytes::len).sum::<usize>();
        assert!(
            body_len <= u32::MAX as usize,
            "frame bodies are limited below 4 GiB"
        );
        let header = FrameHeader {
            len: body_len as u32,
            msg_type,
            flags: 0,
            req_id,
        };
        self.first[..HEADER_BYTES].copy_from_slice(&header.encode());
        let mut chunks = Vec::with_capacity(1 + self.rest.len());
        chunks.push(self.first.freeze());
        chunks.extend(self.rest);
        chunks
    }
}

/// A request the protocol cannot carry: a field longer than its limit. Nothing was encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {len} {unit}; the protocol carries at most {max}")]
pub struct EncodeError {
    /// What is too long: `token`, `client_name`, `payload`, `hashes`.
    pub field: &'static str,
    pub len: u64,
    pub max: u64,
    pub unit: &'static str,
}

/// Largest payload one APPEND_TURN can carry: a frame of the protocol's ceiling, less the
/// message's fields (no server accepts more).
pub const APPEND_PAYLOAD_BYTES_LIMIT: u64 = FRAME_BYTES_LIMIT as u64 - 48;

/// Checks what the encoder cannot write: lengths over the protocol's limits. Input from a
/// caller is never asserted on.
pub fn check_request(request: &Request) -> Result<(), EncodeError> {
    let too_long = |field, len: usize, max: u64, unit| {
        let len = len as u64;
        if len > max {
            Err(EncodeError {
                field,
                len,
                max,
                unit,
            })
        } else {
            Ok(())
        }
    };
    match request {
        Request::Hello {
            token, client_name, ..
        } => {
            too_long("token", token.len(), TOKEN_BYTES_MAX as u64, "bytes")?;
            too_long(
                "client_name",
                client_name.len(),
                NAME_BYTES_MAX as u64,
                "bytes",
            )
        }
        Request::AppendTurn { payload, .. } => too_long(
            "payload",
            payload.len(),
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
        Request::HasBlobs { hashes } => too_long(
            "hashes",
            hashes.len(),
            u64::from(LIST_ITEMS_LIMIT),
            "hashes",
        ),
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
        Request::GetHead { context_id } => w.u64(*context_id),
        Request::AppendTurn {
            context_id,
            expected_head,
            type_tag,
            codec,
            payload,
        } => {
            append_fields(&mut w, *context_id, *expected_head, *type_tag, *codec);
            w.u32(payload.len() as u32);
            w.zero(4);
            w.data(payload);
        }
        Request::AppendTurnByHash {
            context_id,
            expected_head,
            type_tag,
            codec,
            payload_hash,
        } => {
            append_fields(&mut w, *context_id, *expected_head, *type_tag, *codec);
            w.slice(&payload_hash.0);
        }
        Request::GetTurn { turn_id } => w.u64(*turn_id),
        Request::GetLast {
            context_id,
            limit,
            read_flags,
        } => {
            w.u64(*context_id);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        Request::GetBefore {
            context_id,
            before_turn_id,
            limit,
            read_flags,
        } => {
            w.u64(*context_id);
            w.u64(*before_turn_id);
            w.u32(*limit);
            w.u32(*read_flags);
        }
        // One layout: a context's chain by depth, or a turn's chain from the root.
        Request::GetRangeByDepth {
            context_id: id,
            from_depth,
            limit,
            read_flags,
        }
        | Request::GetChain {
            turn_id: id,
            from_depth,
            limit,
            read_flags,
        } => {
            w.u64(*id);
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
        Request::Stats => {}
    }
    Ok(w.finish(request.message_type().code(), req_id))
}

fn append_fields(
    w: &mut ChunkWriter,
    context_id: u64,
    expected_head: Option<u64>,
    type_tag: u64,
    codec: u32,
) {
    w.u64(context_id);
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
        Response::Stats(stats) => {
            for value in [
                stats.turns,
                stats.contexts,
                stats.blobs,
                stats.logical_bytes,
                stats.unique_bytes,
                stats.stored_bytes,
                stats.dedup_hits,
                stats.connections,
                stats.requests_total,
                stats.errors_total,
                stats.uptime_ms,
            ] {
                w.u64(value);
            }
            w.u8(u8::from(stats.read_only));
            w.zero(7);
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
    }
    w.finish(response.msg_type(), req_id)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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
