//! The bounds-checked reader every decoder reads a body with, and its readers of the fields
//! and structures of docs/protocol.md that messages share or repeat (TURN, PAYLOAD,
//! CONTEXT_REF, TAGS, EXTRAS, a TURN_SPEC of APPEND_TURNS, READ_PAGE's page kind, …).
//!
//! Every read checks the length first and answers a `DecodeError` naming the message and the
//! field, so no input can make a decoder panic or read past its body.

use bytes::Bytes;
use ctxstore_vocab::le::{LeReader, ShortRead};

use crate::error::DecodeError;
use crate::message::*;

/// A bounds-checked reader over a body.
pub(super) struct Cursor {
    body: Bytes,
    position: usize,
    message: &'static str,
}

impl Cursor {
    pub(super) fn new(body: Bytes, message: &'static str) -> Self {
        Cursor {
            body,
            position: 0,
            message,
        }
    }

    /// One read of the shared little-endian reader (`ctxstore_vocab::le`) at this cursor's
    /// position; a short body is TRUNCATED naming the message.
    fn read<'c, T>(
        &'c mut self,
        read: impl FnOnce(&mut LeReader<'c>) -> Result<T, ShortRead>,
    ) -> Result<T, DecodeError> {
        let mut reader = LeReader::at(&self.body, self.position);
        match read(&mut reader) {
            Ok(value) => {
                self.position = reader.position();
                Ok(value)
            }
            Err(short) => Err(DecodeError::Truncated {
                message: self.message,
                needed: short.needed_len(),
                actual: self.body.len(),
            }),
        }
    }

    pub(super) fn take(&mut self, count: usize) -> Result<&[u8], DecodeError> {
        self.read(|reader| reader.take(count))
    }

    pub(super) fn bytes(&mut self, count: usize) -> Result<Bytes, DecodeError> {
        let start = self.position;
        self.take(count)?;
        Ok(self.body.slice(start..start + count))
    }

    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        self.read(LeReader::u8)
    }

    pub(super) fn u16(&mut self) -> Result<u16, DecodeError> {
        self.read(LeReader::u16)
    }

    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.read(LeReader::u32)
    }

    pub(super) fn u64(&mut self) -> Result<u64, DecodeError> {
        self.read(LeReader::u64)
    }

    pub(super) fn hash(&mut self) -> Result<BlobHash, DecodeError> {
        self.read(LeReader::array).map(BlobHash)
    }

    pub(super) fn zero(&mut self, count: usize, field: &'static str) -> Result<(), DecodeError> {
        if self.take(count)?.iter().any(|&byte| byte != 0) {
            return Err(self.invalid(field, "reserved bytes must be zero"));
        }
        Ok(())
    }

    pub(super) fn string(
        &mut self,
        count: usize,
        field: &'static str,
    ) -> Result<String, DecodeError> {
        let bytes = self.take(count)?.to_vec();
        String::from_utf8(bytes).map_err(|_| self.invalid(field, "not UTF-8"))
    }

    pub(super) fn invalid(&self, field: &'static str, reason: &'static str) -> DecodeError {
        DecodeError::Invalid {
            message: self.message,
            field,
            reason,
        }
    }

    pub(super) fn too_large(&self, field: &'static str, value: u64, limit: u64) -> DecodeError {
        DecodeError::TooLarge {
            message: self.message,
            field,
            value,
            limit,
        }
    }

    pub(super) fn finish(self) -> Result<(), DecodeError> {
        let extra = self.body.len() - self.position;
        if extra != 0 {
            return Err(DecodeError::TrailingBytes {
                message: self.message,
                extra,
            });
        }
        Ok(())
    }

    /// A `u32` of flag bits, refused with a bit outside `known`.
    pub(super) fn flags(&mut self, known: u32, field: &'static str) -> Result<u32, DecodeError> {
        let flags = self.u32()?;
        if flags & !known != 0 {
            return Err(self.invalid(field, "unknown flag bits"));
        }
        Ok(flags)
    }

    /// A `u8` of flag bits, refused with a bit outside `known`.
    pub(super) fn flags_u8(&mut self, known: u8, field: &'static str) -> Result<u8, DecodeError> {
        let flags = self.u8()?;
        if flags & !known != 0 {
            return Err(self.invalid(field, "unknown flag bits"));
        }
        Ok(flags)
    }

    /// STATS' 96 bytes (also the start of STATS_EX).
    pub(super) fn stats(&mut self) -> Result<StatsWire, DecodeError> {
        let mut stats = StatsWire {
            turns: self.u64()?,
            contexts: self.u64()?,
            blobs: self.u64()?,
            logical_bytes: self.u64()?,
            unique_bytes: self.u64()?,
            stored_bytes: self.u64()?,
            dedup_hits: self.u64()?,
            connections: self.u64()?,
            requests_total: self.u64()?,
            errors_total: self.u64()?,
            uptime_ms: self.u64()?,
            read_only: false,
        };
        stats.read_only = self.bool("read_only")?;
        self.zero(7, "reserved")?;
        Ok(stats)
    }

    pub(super) fn turn(&mut self) -> Result<TurnWire, DecodeError> {
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

    pub(super) fn context_head(&mut self) -> Result<ContextHeadWire, DecodeError> {
        let head = ContextHeadWire {
            context_id: self.u64()?,
            head_turn_id: self.u64()?,
            head_depth: self.u32()?,
        };
        self.zero(4, "reserved")?;
        Ok(head)
    }

    /// A list's `u32` item count, refused above `LIST_ITEMS_LIMIT` before anything is
    /// allocated for it.
    pub(super) fn list_count(&mut self) -> Result<u32, DecodeError> {
        let count = self.u32()?;
        if count > LIST_ITEMS_LIMIT {
            return Err(self.too_large("count", u64::from(count), u64::from(LIST_ITEMS_LIMIT)));
        }
        Ok(count)
    }

    /// A count of a `u16`-counted list, with a first allocation bounded by what the body could
    /// hold (each item takes at least `item_bytes_min`).
    pub(super) fn list_capacity(&self, count: usize, item_bytes_min: usize) -> usize {
        count.min((self.body.len() - self.position) / item_bytes_min.max(1))
    }

    /// `u16 len, len bytes of UTF-8`.
    pub(super) fn short_string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let len = usize::from(self.u16()?);
        self.string(len, field)
    }

    /// `u16 len, len bytes`.
    pub(super) fn short_bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = usize::from(self.u16()?);
        self.bytes(len)
    }

    /// `u16 len, name`: `None` when `len = 0`.
    pub(super) fn optional_name(
        &mut self,
        field: &'static str,
    ) -> Result<Option<String>, DecodeError> {
        let name = self.short_string(field)?;
        Ok((!name.is_empty()).then_some(name))
    }

    /// A context ref of the version-2 messages: `u16 name_len`, then `u64 context_id` when
    /// `name_len = 0`, else the name.
    pub(super) fn context_ref(&mut self) -> Result<ContextRef, DecodeError> {
        let len = usize::from(self.u16()?);
        if len == 0 {
            return Ok(ContextRef::Id(self.u64()?));
        }
        Ok(ContextRef::Name(self.string(len, "context name")?))
    }

    /// The leading context of a version-1 layout: `u64 context_id`, or with the frame flag
    /// `CTX_BY_NAME`, `u16 name_len (≥ 1), name`.
    pub(super) fn leading_context(&mut self, by_name: bool) -> Result<ContextRef, DecodeError> {
        if !by_name {
            return Ok(ContextRef::Id(self.u64()?));
        }
        let len = usize::from(self.u16()?);
        if len == 0 {
            return Err(self.invalid("name_len", "CTX_BY_NAME needs a name of 1 or more bytes"));
        }
        Ok(ContextRef::Name(self.string(len, "context name")?))
    }

    /// `u16 count × (u16 key_len, key, u16 value_len, value)`.
    pub(super) fn tags(&mut self) -> Result<Vec<(String, String)>, DecodeError> {
        let count = usize::from(self.u16()?);
        let mut tags = Vec::with_capacity(self.list_capacity(count, 4));
        for _ in 0..count {
            let key = self.short_string("tag key")?;
            let value = self.short_string("tag value")?;
            tags.push((key, value));
        }
        Ok(tags)
    }

    pub(super) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.invalid(field, "not 0 or 1")),
        }
    }

    /// `u8 cursor_kind (0 none, 1 id, 2 name)`, then `u64` or `u16 len (≥ 1), name`.
    pub(super) fn list_cursor(&mut self) -> Result<Option<ListCursorWire>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(ListCursorWire::Id(self.u64()?))),
            2 => match self.optional_name("cursor name")? {
                Some(name) => Ok(Some(ListCursorWire::Name(name))),
                None => Err(self.invalid("cursor name", "empty")),
            },
            _ => Err(self.invalid("cursor_kind", "unknown")),
        }
    }

    /// `u8 len, len bytes of UTF-8`.
    pub(super) fn tiny_string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let len = usize::from(self.u8()?);
        self.string(len, field)
    }

    pub(super) fn extras(&mut self) -> Result<ExtrasWire, DecodeError> {
        let key_len = usize::from(self.u8()?);
        let key = self.bytes(key_len)?;
        let label_count = usize::from(self.u8()?);
        let mut labels = Vec::with_capacity(self.list_capacity(label_count, 3));
        for _ in 0..label_count {
            let label_key = self.tiny_string("label key")?;
            let value = self.short_string("label value")?;
            labels.push((label_key, value));
        }
        let link_count = usize::from(self.u8()?);
        let mut links = Vec::with_capacity(self.list_capacity(link_count, 8));
        for _ in 0..link_count {
            links.push(self.u64()?);
        }
        Ok(ExtrasWire { key, labels, links })
    }

    pub(super) fn turn_spec(&mut self) -> Result<TurnSpec, DecodeError> {
        let parent_kind = self.u8()?;
        let parent_turn_id = self.u64()?;
        let parent = match (parent_kind, parent_turn_id) {
            (0, 0) => ParentWire::Head,
            (1, 0) => ParentWire::Root,
            (2, turn_id) if turn_id != 0 => ParentWire::Turn(turn_id),
            _ => return Err(self.invalid("parent", "unknown kind, or a turn id where none goes")),
        };
        let type_tag = self.u64()?;
        let codec = self.u32()?;
        let flags = self.flags_u8(turn_spec_flags::KNOWN, "turn_flags")?;
        let extras = self.extras()?;
        let by_hash = flags & turn_spec_flags::BY_HASH != 0;
        let zstd = flags & turn_spec_flags::ZSTD != 0;
        let payload = match (by_hash, zstd) {
            (true, true) => return Err(self.invalid("turn_flags", "BY_HASH and ZSTD together")),
            (true, false) => PayloadSpec::Hash(self.hash()?),
            (false, true) => {
                let hash = self.hash()?;
                let raw_len = self.u32()?;
                let frame_len = self.u32()? as usize;
                PayloadSpec::Zstd {
                    hash,
                    raw_len,
                    frame: self.bytes(frame_len)?,
                }
            }
            (false, false) => {
                let len = self.u32()? as usize;
                PayloadSpec::Bytes(self.bytes(len)?)
            }
        };
        Ok(TurnSpec {
            parent,
            type_tag,
            codec,
            summary: flags & turn_spec_flags::SUMMARY != 0,
            extras,
            payload,
        })
    }

    /// Which page READ_PAGE reads: `u8 kind` (0 LAST, 1 BEFORE, 2 RANGE, 3 WINDOW), `u64
    /// before_turn_id`, `u32 from_depth`; a field the kind does not use must be 0.
    pub(super) fn page_kind(&mut self) -> Result<PageKind, DecodeError> {
        let kind = self.u8()?;
        let before_turn_id = self.u64()?;
        let from_depth = self.u32()?;
        match (kind, before_turn_id, from_depth) {
            (0, 0, 0) => Ok(PageKind::Last),
            (1, before_turn_id, 0) => Ok(PageKind::Before { before_turn_id }),
            (2, 0, from_depth) => Ok(PageKind::Range { from_depth }),
            (3, 0, 0) => Ok(PageKind::Window),
            _ => Err(self.invalid("kind", "unknown, or a field it does not use set")),
        }
    }

    pub(super) fn log_cursor(&mut self) -> Result<Option<LogCursorWire>, DecodeError> {
        if !self.bool("cursor present")? {
            return Ok(None);
        }
        Ok(Some(LogCursorWire {
            phase: self.u32()?,
            next: self.u64()?,
        }))
    }

    pub(super) fn entries_v2(&mut self) -> Result<Vec<TurnEntryV2>, DecodeError> {
        let count = self.list_count()?;
        let mut entries = Vec::with_capacity(self.list_capacity(count as usize, 107));
        for _ in 0..count {
            entries.push(TurnEntryV2 {
                turn: self.turn()?,
                extras: self.extras()?,
                payload: self.payload()?,
            });
        }
        Ok(entries)
    }

    pub(super) fn context_info(&mut self) -> Result<ContextInfoWire, DecodeError> {
        Ok(ContextInfoWire {
            head: self.context_head()?,
            created_at_unix_ms: self.u64()?,
            updated_at_unix_ms: self.u64()?,
            name: self.optional_name("name")?,
            tags: self.tags()?,
        })
    }

    pub(super) fn payload(&mut self) -> Result<PayloadWire, DecodeError> {
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
