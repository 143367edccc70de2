//! The frame builder every encoder writes with: small fields copied, large payloads kept by
//! reference so a frame goes out in one vectored write without copying what the caller holds.
//! Its field writers mirror the readers of `cursor.rs`, structure for structure.

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::{FrameHeader, HEADER_BYTES};
use crate::message::*;

/// Payloads at least this large are sent by reference (a separate chunk), not copied.
const COPY_BYTES_MAX: usize = 2048;

/// Builds one frame as a list of chunks: header and small fields copied into buffers, large
/// payloads referenced as they are, ready for a vectored write.
pub(super) struct ChunkWriter {
    first: BytesMut,
    rest: Vec<Bytes>,
    tail: BytesMut,
}

impl ChunkWriter {
    pub(super) fn new() -> Self {
        let mut first = BytesMut::with_capacity(256);
        first.put_bytes(0, HEADER_BYTES);
        ChunkWriter {
            first,
            rest: Vec::new(),
            tail: BytesMut::new(),
        }
    }

    pub(super) fn current(&mut self) -> &mut BytesMut {
        if self.rest.is_empty() {
            &mut self.first
        } else {
            &mut self.tail
        }
    }

    pub(super) fn u8(&mut self, value: u8) {
        self.current().put_u8(value);
    }

    pub(super) fn u16(&mut self, value: u16) {
        self.current().put_u16_le(value);
    }

    pub(super) fn u32(&mut self, value: u32) {
        self.current().put_u32_le(value);
    }

    pub(super) fn u64(&mut self, value: u64) {
        self.current().put_u64_le(value);
    }

    pub(super) fn slice(&mut self, bytes: &[u8]) {
        self.current().put_slice(bytes);
    }

    pub(super) fn zero(&mut self, count: usize) {
        self.current().put_bytes(0, count);
    }

    pub(super) fn data(&mut self, data: &Bytes) {
        if data.len() < COPY_BYTES_MAX {
            self.slice(data);
            return;
        }
        if !self.tail.is_empty() {
            self.rest.push(self.tail.split().freeze());
        }
        self.rest.push(data.clone());
    }

    /// STATS' 96 bytes (also the start of STATS_EX).
    pub(super) fn stats(&mut self, stats: &StatsWire) {
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
            self.u64(value);
        }
        self.u8(u8::from(stats.read_only));
        self.zero(7);
    }

    pub(super) fn turn(&mut self, turn: &TurnWire) {
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

    pub(super) fn context_head(&mut self, head: &ContextHeadWire) {
        self.u64(head.context_id);
        self.u64(head.head_turn_id);
        self.u32(head.head_depth);
        self.zero(4);
    }

    /// `u16 len, bytes` (`check_request` or the response's builder bounded the length).
    pub(super) fn short(&mut self, bytes: &[u8]) {
        self.u16(short_len(bytes.len()));
        self.slice(bytes);
    }

    pub(super) fn tags(&mut self, tags: &[(String, String)]) {
        self.u16(short_len(tags.len()));
        for (key, value) in tags {
            self.short(key.as_bytes());
            self.short(value.as_bytes());
        }
    }

    pub(super) fn context_ref(&mut self, context: &ContextRef) {
        match context {
            ContextRef::Id(context_id) => {
                self.u16(0);
                self.u64(*context_id);
            }
            ContextRef::Name(name) => self.short(name.as_bytes()),
        }
    }

    /// The leading context of a version-1 layout; a name goes with the frame flag
    /// `CTX_BY_NAME` (`Request::frame_flags`).
    pub(super) fn leading_context(&mut self, context: &ContextRef) {
        match context {
            ContextRef::Id(context_id) => self.u64(*context_id),
            ContextRef::Name(name) => self.short(name.as_bytes()),
        }
    }

    pub(super) fn list_cursor(&mut self, cursor: &Option<ListCursorWire>) {
        match cursor {
            None => self.u8(0),
            Some(ListCursorWire::Id(context_id)) => {
                self.u8(1);
                self.u64(*context_id);
            }
            Some(ListCursorWire::Name(name)) => {
                self.u8(2);
                self.short(name.as_bytes());
            }
        }
    }

    /// `u8 len, bytes` (`check_request` or the engine's limits bound the length).
    pub(super) fn tiny(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= usize::from(u8::MAX),
            "u8 field of {} bytes",
            bytes.len()
        );
        self.u8(bytes.len() as u8);
        self.slice(bytes);
    }

    pub(super) fn extras(&mut self, extras: &ExtrasWire) {
        self.tiny(&extras.key);
        assert!(extras.labels.len() <= usize::from(u8::MAX) && extras.links.len() <= 255);
        self.u8(extras.labels.len() as u8);
        for (key, value) in &extras.labels {
            self.tiny(key.as_bytes());
            self.short(value.as_bytes());
        }
        self.u8(extras.links.len() as u8);
        for link in &extras.links {
            self.u64(*link);
        }
    }

    /// One turn of APPEND_TURNS (`Cursor::turn_spec`'s layout).
    pub(super) fn turn_spec(&mut self, spec: &TurnSpec) {
        let (kind, parent) = match spec.parent {
            ParentWire::Head => (0, 0),
            ParentWire::Root => (1, 0),
            ParentWire::Turn(turn_id) => (2, turn_id),
        };
        self.u8(kind);
        self.u64(parent);
        self.u64(spec.type_tag);
        self.u32(spec.codec);
        let mut flags = 0;
        if spec.summary {
            flags |= turn_spec_flags::SUMMARY;
        }
        match spec.payload {
            PayloadSpec::Hash(_) => flags |= turn_spec_flags::BY_HASH,
            PayloadSpec::Zstd { .. } => flags |= turn_spec_flags::ZSTD,
            PayloadSpec::Bytes(_) => {}
        }
        self.u8(flags);
        self.extras(&spec.extras);
        match &spec.payload {
            PayloadSpec::Hash(hash) => self.slice(&hash.0),
            PayloadSpec::Bytes(bytes) => {
                self.u32(bytes.len() as u32);
                self.data(bytes);
            }
            PayloadSpec::Zstd {
                hash,
                raw_len,
                frame,
            } => {
                self.slice(&hash.0);
                self.u32(*raw_len);
                self.u32(frame.len() as u32);
                self.data(frame);
            }
        }
    }

    /// Which page READ_PAGE reads (`Cursor::page_kind`'s layout).
    pub(super) fn page_kind(&mut self, kind: &PageKind) {
        let (code, before, from_depth) = match kind {
            PageKind::Last => (0, 0, 0),
            PageKind::Before { before_turn_id } => (1, *before_turn_id, 0),
            PageKind::Range { from_depth } => (2, 0, *from_depth),
            PageKind::Window => (3, 0, 0),
        };
        self.u8(code);
        self.u64(before);
        self.u32(from_depth);
    }

    pub(super) fn log_cursor(&mut self, cursor: &Option<LogCursorWire>) {
        match cursor {
            None => self.u8(0),
            Some(cursor) => {
                self.u8(1);
                self.u32(cursor.phase);
                self.u64(cursor.next);
            }
        }
    }

    pub(super) fn entries_v2(&mut self, entries: &[TurnEntryV2]) {
        self.u32(entries.len() as u32);
        for entry in entries {
            self.turn(&entry.turn);
            self.extras(&entry.extras);
            self.payload(&entry.payload);
        }
    }

    pub(super) fn context_info(&mut self, info: &ContextInfoWire) {
        self.context_head(&info.head);
        self.u64(info.created_at_unix_ms);
        self.u64(info.updated_at_unix_ms);
        self.short(info.name.as_deref().unwrap_or("").as_bytes());
        self.tags(&info.tags);
    }

    pub(super) fn payload(&mut self, payload: &PayloadWire) {
        self.u16(payload.encoding as u16);
        self.zero(2);
        self.u32(payload.raw_len);
        self.u32(payload.data.len() as u32);
        self.zero(4);
        self.data(&payload.data);
    }

    pub(super) fn finish(mut self, msg_type: u16, flags: u16, req_id: u64) -> Vec<Bytes> {
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
            flags,
            req_id,
        };
        self.first[..HEADER_BYTES].copy_from_slice(&header.encode());
        let mut chunks = Vec::with_capacity(1 + self.rest.len());
        chunks.push(self.first.freeze());
        chunks.extend(self.rest);
        chunks
    }
}

/// The length of a `u16`-counted field; `check_request` (requests) or the server's limits
/// (responses: names ≤ 256 B, ≤ 32 tags of ≤ 1 KiB) keep it in range.
pub(super) fn short_len(len: usize) -> u16 {
    assert!(len <= usize::from(u16::MAX), "u16 field of {len} bytes");
    len as u16
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(super) fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
