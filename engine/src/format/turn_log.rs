//! `turns.log`: the sequencer's journal of fixed-size records. Layout in
//! docs/storage.md#turnslog.
//!
//! Record `n` (counting from 1) sits at byte offset `(n - 1) * LOG_RECORD_BYTES` and carries
//! `record_id == n`. Two kinds share the sequence:
//! - a **turn record** (kind 1): its record id *is* the TurnID, so a turn is found in O(1);
//!   appending it also moves the head of `context_id` to it;
//! - a **context record** (kind 2): creates `context_id` with a head (empty or a base turn).
//!
//! Heads are therefore not stored apart: replaying the log rebuilds them.
//!
//! ```text
//! offset size field
//!      0    8 record_id            TurnID of a turn record; sequence slot of a context record
//!      8    1 kind                 1 = turn, 2 = context
//!      9    1 format_version       1; 2 for turn records of store format 2 (skip pointer and
//!                                  context chain set)
//!     10    2 extra_slots          turn v2: continuation slots with its extras; else 0
//!     12    4 flags                turn flags: bit 0 SUMMARY (v2); 0 in v1
//!     16    8 context_id
//!     24    8 parent_turn_id       turn: parent (0 = root); context: head turn (0 = empty)
//!     32    4 depth                turn: depth; context: head depth
//!     36    4 codec / tenant       turn: caller codec tag; context: its TenantId (0: the
//!                                  operator; other values from store format 3)
//!     40    8 type_tag             turn: caller type tag; context: 0
//!     48   32 payload_hash         turn: BLAKE3-256 of the payload; context: 0
//!     80    4 payload_len          turn: raw payload bytes; context: 0
//!     84    4 extras_len           turn v2: bytes of its extras body (format::turn_extras)
//!     88    8 created_at_unix_ms
//!     96    8 skip_turn_id         turn v2: ancestor at depth `skip::skip_depth(depth)` (0 for a
//!                                  root); 0 in v1 and in other kinds
//!    104    8 context_prev_turn_id turn v2: the turn appended to the same context before this
//!                                  one (0: the first); 0 in v1 and in other kinds
//!    112    8 summary_turn_id      turn v2: nearest SUMMARY turn at or above it on its chain
//!    120    4 reserved             0
//!    124    4 crc32c               over bytes 0..124
//! ```
//! 128 bytes divide a 512-byte sector, so a record never straddles one: a torn write leaves a
//! record either whole or as it was (zeros at the end of the file).

use crate::format::context_meta::is_store_wide;
use crate::format::turn_extras::TURN_EXTRAS_BYTES_MAX;
use crate::format::{Fields, FieldsMut, RecordError, check_crc, is_all_zero};
use crate::ids::{BlobHash, CodecTag, ContextId, TenantId, TurnId, TypeTag};

pub const LOG_RECORD_BYTES: usize = 128;
const _: () = assert!(512usize.is_multiple_of(LOG_RECORD_BYTES));
const _: () = assert!(LOG_RECORD_BYTES.is_multiple_of(8));

/// Byte offsets of the fields, shared by `encode` and `decode` (the table above).
mod at {
    pub const RECORD_ID: usize = 0;
    pub const KIND: usize = 8;
    pub const FORMAT_VERSION: usize = 9;
    pub const RESERVED_10: usize = 10;
    /// Turn records of version 2: continuation slots that follow with the extras.
    pub const EXTRA_SLOTS: usize = 10;
    pub const FLAGS: usize = 12;
    pub const CONTEXT_ID: usize = 16;
    /// Turn: the parent; context: the head turn.
    pub const PARENT_TURN_ID: usize = 24;
    /// Turn: its depth; context: the head's depth.
    pub const DEPTH: usize = 32;
    pub const CODEC: usize = 36;
    /// Context records: the context's tenant (store format 3; 0 before).
    pub const TENANT_ID: usize = 36;
    pub const TYPE_TAG: usize = 40;
    pub const PAYLOAD_HASH: usize = 48;
    pub const PAYLOAD_LEN: usize = 80;
    pub const RESERVED_84: usize = 84;
    /// Turn records of version 2: bytes of the extras body.
    pub const EXTRAS_LEN: usize = 84;
    pub const CREATED_AT_UNIX_MS: usize = 88;
    /// Turn records of version 2: the skip pointer; zero elsewhere.
    pub const SKIP_TURN_ID: usize = 96;
    /// Turn records of version 2: the context's previous turn; zero elsewhere.
    pub const CONTEXT_PREV_TURN_ID: usize = 104;
    /// Turn records of version 2: the nearest SUMMARY turn at or above it.
    pub const SUMMARY_TURN_ID: usize = 112;
    pub const RESERVED_120: usize = 120;
    pub const CRC32C: usize = 124;
}
const _: () = assert!(at::PAYLOAD_HASH + 32 == at::PAYLOAD_LEN);
const _: () = assert!(at::CRC32C + 4 == LOG_RECORD_BYTES);

/// The version of every record kind except turn records.
pub const LOG_FORMAT_VERSION: u8 = 1;
/// The version of turn records written now: with a skip pointer and the context chain
/// (store format 2). Version-1 turn records are read (store format 1, before migration) and
/// never written.
pub const TURN_RECORD_VERSION: u8 = 2;
const KIND_TURN: u8 = 1;
const KIND_CONTEXT: u8 = 2;
const KIND_META: u8 = 3;
const KIND_CONTINUATION: u8 = 4;

/// Byte offsets of a metadata head slot (kind 3); the common fields (record id, kind,
/// version, crc) sit where `at` says. Layout in docs/storage.md#context-metadata-records.
mod meta_at {
    pub const OP: usize = 10;
    pub const SLOT_COUNT: usize = 12;
    pub const CONTEXT_ID: usize = 16;
    pub const BODY_LEN: usize = 24;
    pub const RESERVED_28: usize = 28;
    pub const CREATED_AT_UNIX_MS: usize = 32;
    pub const BODY: usize = 40;
}
/// Byte offsets of a continuation slot (kind 4).
mod continuation_at {
    pub const RESERVED_10: usize = 10;
    pub const HEAD_RECORD_ID: usize = 16;
    pub const BODY: usize = 24;
}
/// Body bytes a metadata head slot carries.
pub const META_HEAD_BODY_BYTES: usize = at::CRC32C - meta_at::BODY;
/// Body bytes each continuation slot carries.
pub const CONTINUATION_BODY_BYTES: usize = at::CRC32C - continuation_at::BODY;
const _: () = assert!(META_HEAD_BODY_BYTES == 84 && CONTINUATION_BODY_BYTES == 100);
/// Largest metadata body: a record fits one group-commit batch many times over, and the
/// torn-tail window of recovery (`SEQUENCER_BATCH_RECORDS_LIMIT` slots) covers it.
pub const META_BODY_BYTES_MAX: usize = 64 * 1024;

/// "Everything before me is summarised in my payload": a window read starts here.
pub const TURN_FLAG_SUMMARY: u32 = 1 << 0;
/// Turn flags a version-2 record may carry (version 1: none).
pub const TURN_FLAGS_KNOWN: u32 = TURN_FLAG_SUMMARY;

/// Continuation slots a turn's extras of `extras_len` bytes take.
pub fn turn_extra_slots(extras_len: usize) -> u16 {
    let slots = extras_len.div_ceil(CONTINUATION_BODY_BYTES);
    assert!(slots <= usize::from(u16::MAX));
    slots as u16
}

/// A turn as `turns.log` stores it. The engine's API hands out `model::Turn`; this type is
/// the on-disk one, so that either can grow without silently changing the other.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TurnRecord {
    pub turn_id: TurnId,
    pub parent_turn_id: TurnId,
    pub context_id: ContextId,
    pub depth: u32,
    pub type_tag: TypeTag,
    pub codec: CodecTag,
    pub payload_hash: BlobHash,
    pub payload_len: u32,
    pub flags: u32,
    pub created_at_unix_ms: u64,
    /// The ancestor at depth `skip::skip_depth(depth)`; `NONE` for a root, and for every turn
    /// of a version-1 record (store format 1, before migration).
    pub skip_turn_id: TurnId,
    /// The turn appended to the same context before this one (`NONE`: the first). Version-1
    /// records: `NONE`.
    pub context_prev_turn_id: TurnId,
    /// The nearest turn at or above this one on its chain flagged SUMMARY (`NONE`: none).
    pub summary_turn_id: TurnId,
    /// Bytes of the extras (key, labels, links) in the continuation slots that follow.
    pub extras_len: u32,
}

impl TurnRecord {
    /// Whether this turn was read from a version-1 record (no skip pointer, no context chain).
    pub fn is_legacy(&self) -> bool {
        self.depth > 0 && self.skip_turn_id.is_none()
    }

    pub fn is_summary(&self) -> bool {
        self.flags & TURN_FLAG_SUMMARY != 0
    }

    /// Records this turn takes: its slot and its extras' continuation slots.
    pub fn slot_count(&self) -> u64 {
        1 + u64::from(turn_extra_slots(self.extras_len as usize))
    }

    /// The turn's slots, in order: the turn record, then continuations with `extras`.
    pub fn slots(&self, extras: &[u8]) -> Vec<LogRecord> {
        assert_eq!(extras.len(), self.extras_len as usize);
        let mut slots = vec![LogRecord::Turn(*self)];
        slots.extend(continuations(self.turn_id.0, extras));
        assert_eq!(slots.len() as u64, self.slot_count());
        slots
    }
}

/// Continuation slots carrying `body`, after the head slot `head_record_id`.
fn continuations(head_record_id: u64, body: &[u8]) -> impl Iterator<Item = LogRecord> + '_ {
    body.chunks(CONTINUATION_BODY_BYTES)
        .enumerate()
        .map(move |(index, chunk)| {
            let mut slot_body = [0u8; CONTINUATION_BODY_BYTES];
            slot_body[..chunk.len()].copy_from_slice(chunk);
            LogRecord::Continuation(ContinuationSlot {
                record_id: head_record_id + 1 + index as u64,
                head_record_id,
                body: slot_body,
            })
        })
}

/// Creates a context with its initial head.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ContextRecord {
    pub record_id: u64,
    pub context_id: ContextId,
    pub head_turn_id: TurnId,
    pub head_depth: u32,
    pub created_at_unix_ms: u64,
    /// The tenant that owns the context (decision 0032); a tenant record registered it
    /// earlier in the log, unless it is the operator.
    pub tenant_id: TenantId,
}

/// The first slot of a context metadata record (names, tags, key-value; see
/// `format::context_meta` for the body). `slot_count - 1` continuation slots follow it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MetaSlot {
    pub record_id: u64,
    pub op: u16,
    /// Slots of the whole record, this one included.
    pub slot_count: u32,
    pub context_id: ContextId,
    pub body_len: u32,
    pub created_at_unix_ms: u64,
    /// The first `min(body_len, 84)` bytes of the body; zeros after them.
    pub body: [u8; META_HEAD_BODY_BYTES],
}

/// A further slot of a metadata record.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ContinuationSlot {
    pub record_id: u64,
    pub head_record_id: u64,
    /// The next bytes of the body; zeros after its end.
    pub body: [u8; CONTINUATION_BODY_BYTES],
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LogRecord {
    Turn(TurnRecord),
    Context(ContextRecord),
    Meta(MetaSlot),
    Continuation(ContinuationSlot),
}

impl LogRecord {
    pub fn record_id(&self) -> u64 {
        match self {
            LogRecord::Turn(turn) => turn.turn_id.0,
            LogRecord::Context(context) => context.record_id,
            LogRecord::Meta(head) => head.record_id,
            LogRecord::Continuation(slot) => slot.record_id,
        }
    }

    pub fn encode(&self, target: &mut [u8; LOG_RECORD_BYTES]) {
        target.fill(0);
        let mut fields = FieldsMut(target);
        fields.u64(at::RECORD_ID, self.record_id());
        match self {
            LogRecord::Turn(turn) => encode_turn(&mut fields, turn),
            LogRecord::Context(context) => {
                assert!(context.record_id > 0);
                assert!(
                    context.head_turn_id.0 < context.record_id,
                    "base turn is older"
                );
                fields.0[at::KIND] = KIND_CONTEXT;
                fields.u64(at::CONTEXT_ID, context.context_id.0);
                fields.u64(at::PARENT_TURN_ID, context.head_turn_id.0);
                fields.u32(at::DEPTH, context.head_depth);
                fields.u32(at::TENANT_ID, context.tenant_id.0);
                fields.u64(at::CREATED_AT_UNIX_MS, context.created_at_unix_ms);
            }
            LogRecord::Meta(head) => {
                assert!(head.record_id > 0);
                assert!((head.context_id.0 > 0) != is_store_wide(head.op));
                assert_eq!(head.slot_count, meta_slot_count(head.body_len as usize));
                fields.0[at::KIND] = KIND_META;
                fields.u16(meta_at::OP, head.op);
                fields.u32(meta_at::SLOT_COUNT, head.slot_count);
                fields.u64(meta_at::CONTEXT_ID, head.context_id.0);
                fields.u32(meta_at::BODY_LEN, head.body_len);
                fields.u64(meta_at::CREATED_AT_UNIX_MS, head.created_at_unix_ms);
                fields.bytes(meta_at::BODY, &head.body);
            }
            LogRecord::Continuation(slot) => {
                assert!(slot.head_record_id > 0 && slot.head_record_id < slot.record_id);
                fields.0[at::KIND] = KIND_CONTINUATION;
                fields.u64(continuation_at::HEAD_RECORD_ID, slot.head_record_id);
                fields.bytes(continuation_at::BODY, &slot.body);
            }
        }
        fields.0[at::FORMAT_VERSION] = match self {
            LogRecord::Turn(_) => TURN_RECORD_VERSION,
            _ => LOG_FORMAT_VERSION,
        };
        let crc = crc32c::crc32c(&fields.0[..at::CRC32C]);
        fields.u32(at::CRC32C, crc);
    }

    /// Decodes one record. `Ok(None)`: the slot is all zeros (never written).
    pub fn decode(source: &[u8; LOG_RECORD_BYTES]) -> Result<Option<LogRecord>, RecordError> {
        if is_all_zero(source) {
            return Ok(None);
        }
        let fields = Fields(source);
        check_crc(fields.u32(at::CRC32C), &source[..at::CRC32C])?;
        let version = source[at::FORMAT_VERSION];
        let kind = source[at::KIND];
        let known_version =
            version == LOG_FORMAT_VERSION || (kind == KIND_TURN && version == TURN_RECORD_VERSION);
        if !known_version {
            return Err(RecordError::Version(u32::from(version)));
        }
        let record_id = fields.u64(at::RECORD_ID);
        if record_id == 0 {
            return Err(RecordError::Field("record id 0"));
        }
        // Version-2 turn records use 10..12, 84..88 and 96..120; everything else keeps them
        // zero.
        let turn_v2 = kind == KIND_TURN && version == TURN_RECORD_VERSION;
        let reserved_set = if turn_v2 {
            !is_all_zero(&source[at::RESERVED_120..at::CRC32C])
        } else {
            fields.u16(at::RESERVED_10) != 0
                || fields.u32(at::RESERVED_84) != 0
                || !is_all_zero(&source[at::SKIP_TURN_ID..at::CRC32C])
        };
        if (kind == KIND_TURN || kind == KIND_CONTEXT) && reserved_set {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        match kind {
            KIND_TURN => {
                decode_turn(&fields, record_id, turn_v2).map(|turn| Some(LogRecord::Turn(turn)))
            }
            KIND_CONTEXT => {
                decode_context(&fields, record_id).map(|context| Some(LogRecord::Context(context)))
            }
            KIND_META => {
                decode_meta_head(&fields, record_id).map(|head| Some(LogRecord::Meta(head)))
            }
            KIND_CONTINUATION => decode_continuation(&fields, record_id)
                .map(|slot| Some(LogRecord::Continuation(slot))),
            other => Err(RecordError::Kind(other)),
        }
    }
}

fn decode_turn(
    fields: &Fields<'_>,
    record_id: u64,
    version_2: bool,
) -> Result<TurnRecord, RecordError> {
    let turn = TurnRecord {
        turn_id: TurnId(record_id),
        parent_turn_id: TurnId(fields.u64(at::PARENT_TURN_ID)),
        context_id: ContextId(fields.u64(at::CONTEXT_ID)),
        depth: fields.u32(at::DEPTH),
        type_tag: fields.u64(at::TYPE_TAG),
        codec: fields.u32(at::CODEC),
        payload_hash: BlobHash(fields.hash(at::PAYLOAD_HASH)),
        payload_len: fields.u32(at::PAYLOAD_LEN),
        flags: fields.u32(at::FLAGS),
        created_at_unix_ms: fields.u64(at::CREATED_AT_UNIX_MS),
        skip_turn_id: TurnId(fields.u64(at::SKIP_TURN_ID)),
        context_prev_turn_id: TurnId(fields.u64(at::CONTEXT_PREV_TURN_ID)),
        summary_turn_id: TurnId(fields.u64(at::SUMMARY_TURN_ID)),
        extras_len: fields.u32(at::EXTRAS_LEN),
    };
    if !version_2 && turn.flags != 0 {
        return Err(RecordError::Field("a version-1 turn record has flags"));
    }
    if turn.extras_len as usize > TURN_EXTRAS_BYTES_MAX
        || fields.u16(at::EXTRA_SLOTS) != turn_extra_slots(turn.extras_len as usize)
    {
        return Err(RecordError::Field("extras length and slots disagree"));
    }
    if turn.summary_turn_id > turn.turn_id
        || turn.is_summary() != (turn.summary_turn_id == turn.turn_id)
    {
        return Err(RecordError::Field(
            "summary_turn_id does not match the flag",
        ));
    }
    if version_2 && (turn.depth == 0) != turn.skip_turn_id.is_none() {
        return Err(RecordError::Field(
            "a skip pointer is set exactly when the turn has a parent",
        ));
    }
    if turn.skip_turn_id > turn.parent_turn_id {
        return Err(RecordError::Field("skip_turn_id is newer than the parent"));
    }
    if turn.context_prev_turn_id >= turn.turn_id {
        return Err(RecordError::Field(
            "context_prev_turn_id is not older than the turn",
        ));
    }
    if turn.parent_turn_id >= turn.turn_id {
        return Err(RecordError::Field(
            "parent_turn_id is not older than the turn",
        ));
    }
    if turn.flags & !TURN_FLAGS_KNOWN != 0 {
        return Err(RecordError::Field("unknown turn flags"));
    }
    if turn.context_id.0 == 0 {
        return Err(RecordError::Field("context id 0"));
    }
    Ok(turn)
}

fn decode_context(fields: &Fields<'_>, record_id: u64) -> Result<ContextRecord, RecordError> {
    let context = ContextRecord {
        record_id,
        context_id: ContextId(fields.u64(at::CONTEXT_ID)),
        head_turn_id: TurnId(fields.u64(at::PARENT_TURN_ID)),
        head_depth: fields.u32(at::DEPTH),
        created_at_unix_ms: fields.u64(at::CREATED_AT_UNIX_MS),
        tenant_id: TenantId(fields.u32(at::TENANT_ID)),
    };
    if fields.u32(at::FLAGS) != 0
        || fields.u64(at::TYPE_TAG) != 0
        || !is_all_zero(&fields.0[at::PAYLOAD_HASH..at::RESERVED_84])
    {
        return Err(RecordError::Field("turn fields set in a context record"));
    }
    if context.head_turn_id.0 >= record_id {
        return Err(RecordError::Field(
            "context head is not older than the record",
        ));
    }
    if context.context_id.0 == 0 {
        return Err(RecordError::Field("context id 0"));
    }
    Ok(context)
}

fn decode_meta_head(fields: &Fields<'_>, record_id: u64) -> Result<MetaSlot, RecordError> {
    let mut body = [0u8; META_HEAD_BODY_BYTES];
    body.copy_from_slice(&fields.0[meta_at::BODY..at::CRC32C]);
    let head = MetaSlot {
        record_id,
        op: fields.u16(meta_at::OP),
        slot_count: fields.u32(meta_at::SLOT_COUNT),
        context_id: ContextId(fields.u64(meta_at::CONTEXT_ID)),
        body_len: fields.u32(meta_at::BODY_LEN),
        created_at_unix_ms: fields.u64(meta_at::CREATED_AT_UNIX_MS),
        body,
    };
    if fields.u32(meta_at::RESERVED_28) != 0 {
        return Err(RecordError::Field("reserved bytes are not zero"));
    }
    // Every metadata record names its context, except gc-dead and purge: store-wide.
    if (head.context_id.0 == 0) != is_store_wide(head.op) {
        return Err(RecordError::Field(
            "context id 0 on a context's record, or a context on a store-wide record",
        ));
    }
    let body_len = head.body_len as usize;
    if body_len > META_BODY_BYTES_MAX || head.slot_count != meta_slot_count(body_len) {
        return Err(RecordError::Field(
            "metadata slot count does not fit its length",
        ));
    }
    if !is_all_zero(&head.body[body_len.min(META_HEAD_BODY_BYTES)..]) {
        return Err(RecordError::Field(
            "bytes after the metadata body are not zero",
        ));
    }
    Ok(head)
}

fn decode_continuation(
    fields: &Fields<'_>,
    record_id: u64,
) -> Result<ContinuationSlot, RecordError> {
    let mut body = [0u8; CONTINUATION_BODY_BYTES];
    body.copy_from_slice(&fields.0[continuation_at::BODY..at::CRC32C]);
    let slot = ContinuationSlot {
        record_id,
        head_record_id: fields.u64(continuation_at::HEAD_RECORD_ID),
        body,
    };
    if !is_all_zero(&fields.0[continuation_at::RESERVED_10..continuation_at::HEAD_RECORD_ID]) {
        return Err(RecordError::Field("reserved bytes are not zero"));
    }
    if slot.head_record_id == 0 || slot.head_record_id >= record_id {
        return Err(RecordError::Field(
            "continuation does not follow its metadata head",
        ));
    }
    Ok(slot)
}

/// Slots a metadata record with a body of `body_len` bytes takes.
pub fn meta_slot_count(body_len: usize) -> u32 {
    let rest = body_len.saturating_sub(META_HEAD_BODY_BYTES);
    1 + rest.div_ceil(CONTINUATION_BODY_BYTES) as u32
}

/// A whole context metadata record: its head slot's fields and the body its slots carry.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MetaRecord {
    pub record_id: u64,
    pub op: u16,
    pub context_id: ContextId,
    pub created_at_unix_ms: u64,
    pub body: Vec<u8>,
}

impl MetaRecord {
    pub fn slot_count(&self) -> u32 {
        meta_slot_count(self.body.len())
    }

    /// The record's slots, in order: the head, then its continuations.
    pub fn slots(&self) -> Vec<LogRecord> {
        assert!(
            self.body.len() <= META_BODY_BYTES_MAX,
            "metadata body too long"
        );
        let mut head_body = [0u8; META_HEAD_BODY_BYTES];
        let first = self.body.len().min(META_HEAD_BODY_BYTES);
        head_body[..first].copy_from_slice(&self.body[..first]);
        let mut slots = vec![LogRecord::Meta(MetaSlot {
            record_id: self.record_id,
            op: self.op,
            slot_count: self.slot_count(),
            context_id: self.context_id,
            body_len: self.body.len() as u32,
            created_at_unix_ms: self.created_at_unix_ms,
            body: head_body,
        })];
        slots.extend(continuations(self.record_id, &self.body[first..]));
        assert_eq!(slots.len() as u32, self.slot_count());
        slots
    }
}

/// The first slot of a multi-slot record: a metadata record, or a turn with extras.
#[derive(Clone, Copy, Debug)]
pub enum SlotHead {
    Meta(MetaSlot),
    Turn(TurnRecord),
}

/// A whole record, reassembled from its slots.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Whole {
    Meta(MetaRecord),
    /// A turn and its extras body (empty when it has none).
    Turn(TurnRecord, Vec<u8>),
}

/// Where the reassembly of a multi-slot record stands.
#[derive(Debug)]
pub enum Assembled {
    Complete(Whole),
    Partial(SlotAssembly),
}

/// Reassembles a record from its slots, as they are read in log order.
#[derive(Debug)]
pub struct SlotAssembly {
    head: SlotHead,
    body_len: usize,
    body: Vec<u8>,
    next_record_id: u64,
}

impl SlotAssembly {
    /// Starts with a head slot. A one-slot record is complete at once.
    pub fn start(head: SlotHead) -> Assembled {
        let (record_id, body_len, body) = match &head {
            SlotHead::Meta(meta) => {
                let first = (meta.body_len as usize).min(META_HEAD_BODY_BYTES);
                (
                    meta.record_id,
                    meta.body_len as usize,
                    meta.body[..first].to_vec(),
                )
            }
            SlotHead::Turn(turn) => (turn.turn_id.0, turn.extras_len as usize, Vec::new()),
        };
        let assembly = SlotAssembly {
            head,
            body_len,
            body,
            next_record_id: record_id + 1,
        };
        if assembly.body.len() == body_len {
            return Assembled::Complete(assembly.finish());
        }
        Assembled::Partial(assembly)
    }

    /// The head slot's record id: where a torn record starts.
    pub fn head_record_id(&self) -> u64 {
        match &self.head {
            SlotHead::Meta(meta) => meta.record_id,
            SlotHead::Turn(turn) => turn.turn_id.0,
        }
    }

    /// Adds the next slot. An error names what does not fit (a slot of another record, a
    /// continuation out of order, bytes past the body's end).
    pub fn push(mut self, slot: &ContinuationSlot) -> Result<Assembled, String> {
        let head_record_id = self.head_record_id();
        if slot.head_record_id != head_record_id || slot.record_id != self.next_record_id {
            return Err(format!(
                "continuation {} belongs to record {}, expected a continuation of record {}",
                slot.record_id, slot.head_record_id, head_record_id
            ));
        }
        let take = (self.body_len - self.body.len()).min(CONTINUATION_BODY_BYTES);
        if !is_all_zero(&slot.body[take..]) {
            return Err(format!(
                "continuation {} has bytes after the end of its record",
                slot.record_id
            ));
        }
        self.body.extend_from_slice(&slot.body[..take]);
        self.next_record_id += 1;
        if self.body.len() == self.body_len {
            return Ok(Assembled::Complete(self.finish()));
        }
        Ok(Assembled::Partial(self))
    }

    fn finish(self) -> Whole {
        assert_eq!(self.body.len(), self.body_len);
        match self.head {
            SlotHead::Meta(head) => Whole::Meta(MetaRecord {
                record_id: head.record_id,
                op: head.op,
                context_id: head.context_id,
                created_at_unix_ms: head.created_at_unix_ms,
                body: self.body,
            }),
            SlotHead::Turn(turn) => Whole::Turn(turn, self.body),
        }
    }
}

/// The extras body of `turn`, from the continuation slots after it (`slot` reads a record
/// by id). An error names what is wrong with the slots.
pub fn turn_extras_body(
    turn: &TurnRecord,
    mut slot: impl FnMut(u64) -> Option<LogRecord>,
) -> Result<Vec<u8>, String> {
    let mut assembled = SlotAssembly::start(SlotHead::Turn(*turn));
    loop {
        match assembled {
            Assembled::Complete(Whole::Turn(_, body)) => return Ok(body),
            Assembled::Complete(Whole::Meta(_)) => unreachable!("a turn assembles to a turn"),
            Assembled::Partial(assembly) => {
                let next = assembly.next_record_id;
                match slot(next) {
                    Some(LogRecord::Continuation(continuation)) => {
                        assembled = assembly.push(&continuation)?;
                    }
                    _ => {
                        return Err(format!(
                            "turn {} misses its extras slot {next}",
                            turn.turn_id
                        ));
                    }
                }
            }
        }
    }
}

/// Byte offset of record `record_id` in `turns.log`.
pub fn record_offset(record_id: u64) -> u64 {
    assert!(record_id > 0);
    (record_id - 1) * LOG_RECORD_BYTES as u64
}

/// A turn record's fields, its invariants asserted before they are written.
fn encode_turn(fields: &mut FieldsMut<'_>, turn: &TurnRecord) {
    assert!(turn.turn_id.0 > 0, "turn records carry a TurnID");
    assert!(
        turn.parent_turn_id < turn.turn_id,
        "parent older than child"
    );
    assert_eq!(turn.flags & !TURN_FLAGS_KNOWN, 0, "unknown turn flags");
    assert_eq!(
        turn.depth == 0,
        turn.skip_turn_id.is_none(),
        "a skip pointer exactly when the turn has a parent"
    );
    assert!(turn.skip_turn_id <= turn.parent_turn_id);
    assert!(turn.context_prev_turn_id < turn.turn_id);
    assert!(turn.summary_turn_id <= turn.turn_id);
    assert_eq!(turn.is_summary(), turn.summary_turn_id == turn.turn_id);
    assert!(turn.extras_len as usize <= TURN_EXTRAS_BYTES_MAX);
    fields.0[at::KIND] = KIND_TURN;
    fields.u16(at::EXTRA_SLOTS, turn_extra_slots(turn.extras_len as usize));
    fields.u32(at::EXTRAS_LEN, turn.extras_len);
    fields.u64(at::SUMMARY_TURN_ID, turn.summary_turn_id.0);
    fields.u32(at::FLAGS, turn.flags);
    fields.u64(at::CONTEXT_ID, turn.context_id.0);
    fields.u64(at::PARENT_TURN_ID, turn.parent_turn_id.0);
    fields.u32(at::DEPTH, turn.depth);
    fields.u32(at::CODEC, turn.codec);
    fields.u64(at::TYPE_TAG, turn.type_tag);
    fields.bytes(at::PAYLOAD_HASH, &turn.payload_hash.0);
    fields.u32(at::PAYLOAD_LEN, turn.payload_len);
    fields.u64(at::CREATED_AT_UNIX_MS, turn.created_at_unix_ms);
    fields.u64(at::SKIP_TURN_ID, turn.skip_turn_id.0);
    fields.u64(at::CONTEXT_PREV_TURN_ID, turn.context_prev_turn_id.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_turn() -> TurnRecord {
        TurnRecord {
            turn_id: TurnId(42),
            parent_turn_id: TurnId(7),
            context_id: ContextId(3),
            depth: 5,
            type_tag: 0xdead_beef_0000_0001,
            codec: 9,
            payload_hash: BlobHash::of(b"payload"),
            payload_len: 7,
            flags: 0,
            created_at_unix_ms: 1_700_000_000_000,
            skip_turn_id: TurnId(3),
            context_prev_turn_id: TurnId(40),
            summary_turn_id: TurnId(5),
            extras_len: 0,
        }
    }

    #[test]
    fn turn_round_trip() {
        let record = LogRecord::Turn(sample_turn());
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        record.encode(&mut bytes);
        assert_eq!(LogRecord::decode(&bytes), Ok(Some(record)));
    }

    /// Rewrites an encoded turn record as store format 1 wrote it: version 1, no skip pointer,
    /// no context chain.
    fn as_version_1(bytes: &mut [u8; LOG_RECORD_BYTES]) {
        bytes[at::FORMAT_VERSION] = 1;
        bytes[at::EXTRA_SLOTS..at::FLAGS].fill(0);
        bytes[at::EXTRAS_LEN..at::CREATED_AT_UNIX_MS].fill(0);
        bytes[at::SKIP_TURN_ID..at::CRC32C].fill(0);
        let crc = crc32c::crc32c(&bytes[..at::CRC32C]);
        bytes[at::CRC32C..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn version_1_turn_records_read_as_legacy_and_version_2_needs_its_pointers() {
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        LogRecord::Turn(sample_turn()).encode(&mut bytes);
        let mut old = bytes;
        as_version_1(&mut old);
        let Ok(Some(LogRecord::Turn(legacy))) = LogRecord::decode(&old) else {
            panic!("a version-1 turn record decodes");
        };
        assert!(legacy.is_legacy());
        assert_eq!(legacy.context_prev_turn_id, TurnId::NONE);
        // Version 2 without a skip pointer on a turn with a parent is damage.
        let mut missing = bytes;
        missing[at::SKIP_TURN_ID..at::CONTEXT_PREV_TURN_ID].fill(0);
        let crc = crc32c::crc32c(&missing[..at::CRC32C]);
        missing[at::CRC32C..].copy_from_slice(&crc.to_le_bytes());
        assert!(LogRecord::decode(&missing).is_err());
        // Version 1 with pointers set is damage too (its reserved bytes).
        let mut mixed = old;
        mixed[at::SKIP_TURN_ID] = 3;
        let crc = crc32c::crc32c(&mixed[..at::CRC32C]);
        mixed[at::CRC32C..].copy_from_slice(&crc.to_le_bytes());
        assert!(LogRecord::decode(&mixed).is_err());
    }

    #[test]
    fn context_round_trip() {
        let record = LogRecord::Context(ContextRecord {
            record_id: 43,
            context_id: ContextId(4),
            head_turn_id: TurnId(42),
            head_depth: 5,
            created_at_unix_ms: 1,
            tenant_id: TenantId(7),
        });
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        record.encode(&mut bytes);
        assert_eq!(
            &bytes[at::TENANT_ID..at::TENANT_ID + 4],
            &7u32.to_le_bytes()
        );
        assert_eq!(LogRecord::decode(&bytes), Ok(Some(record)));
    }

    #[test]
    fn zeros_are_an_empty_slot() {
        assert_eq!(LogRecord::decode(&[0u8; LOG_RECORD_BYTES]), Ok(None));
    }

    fn meta_record(body_len: usize) -> MetaRecord {
        MetaRecord {
            record_id: 100,
            op: 3,
            context_id: ContextId(9),
            created_at_unix_ms: 1_700_000_000_000,
            body: (0..body_len).map(|i| (i % 251) as u8 + 1).collect(),
        }
    }

    #[test]
    fn metadata_records_round_trip_through_their_slots_at_every_boundary() {
        for body_len in [0, 1, 83, 84, 85, 184, 185, 1000, META_BODY_BYTES_MAX] {
            let record = meta_record(body_len);
            let slots = record.slots();
            assert_eq!(slots.len() as u32, meta_slot_count(body_len), "{body_len}");
            let mut decoded = Vec::new();
            for (index, slot) in slots.iter().enumerate() {
                assert_eq!(slot.record_id(), 100 + index as u64);
                let mut bytes = [0u8; LOG_RECORD_BYTES];
                slot.encode(&mut bytes);
                decoded.push(LogRecord::decode(&bytes).unwrap().unwrap());
            }
            assert_eq!(decoded, slots);
            let Some(LogRecord::Meta(head)) = decoded.first().copied() else {
                panic!("the first slot is the head");
            };
            let mut assembly = SlotAssembly::start(SlotHead::Meta(head));
            for slot in &decoded[1..] {
                let LogRecord::Continuation(slot) = slot else {
                    panic!("continuations follow the head");
                };
                let Assembled::Partial(partial) = assembly else {
                    panic!("the record completed early");
                };
                assembly = partial.push(slot).unwrap();
            }
            let Assembled::Complete(assembled) = assembly else {
                panic!("the record is incomplete after its last slot");
            };
            assert_eq!(assembled, Whole::Meta(record.clone()), "{body_len}");
        }
    }

    #[test]
    fn a_continuation_of_another_record_is_refused() {
        let first = meta_record(300).slots();
        let other = MetaRecord {
            record_id: 200,
            ..meta_record(300)
        }
        .slots();
        let (LogRecord::Meta(head), LogRecord::Continuation(foreign)) = (first[0], other[1]) else {
            panic!("head and continuation");
        };
        let Assembled::Partial(assembly) = SlotAssembly::start(SlotHead::Meta(head)) else {
            panic!("a multi-slot record is not complete at its head");
        };
        assert!(assembly.push(&foreign).is_err());
    }

    #[test]
    fn every_flipped_bit_of_a_metadata_slot_is_detected() {
        for slot in meta_record(150).slots() {
            let mut bytes = [0u8; LOG_RECORD_BYTES];
            slot.encode(&mut bytes);
            for bit in 0..LOG_RECORD_BYTES * 8 {
                let mut damaged = bytes;
                damaged[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    LogRecord::decode(&damaged).is_err(),
                    "bit {bit} flip went unnoticed"
                );
            }
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        LogRecord::Turn(sample_turn()).encode(&mut bytes);
        for bit in 0..LOG_RECORD_BYTES * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                LogRecord::decode(&damaged).is_err(),
                "bit {bit} flip went unnoticed"
            );
        }
    }
}
