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
//!      9    1 format_version       1
//!     10    2 reserved             0
//!     12    4 flags                turn flags; 0 in v1 (bit 0 reserved: summary marker)
//!     16    8 context_id
//!     24    8 parent_turn_id       turn: parent (0 = root); context: head turn (0 = empty)
//!     32    4 depth                turn: depth; context: head depth
//!     36    4 codec                turn: caller codec tag; context: 0
//!     40    8 type_tag             turn: caller type tag; context: 0
//!     48   32 payload_hash         turn: BLAKE3-256 of the payload; context: 0
//!     80    4 payload_len          turn: raw payload bytes; context: 0
//!     84    4 reserved             0
//!     88    8 created_at_unix_ms
//!     96    8 skip_turn_id         reserved (ancestor skip pointer), 0 in v1
//!    104    8 link_turn_id         reserved (cross-context link), 0 in v1
//!    112   12 reserved             0
//!    124    4 crc32c               over bytes 0..124
//! ```
//! 128 bytes divide a 512-byte sector, so a record never straddles one: a torn write leaves a
//! record either whole or as it was (zeros at the end of the file).

use crate::format::{Fields, FieldsMut, RecordError, check_crc, is_all_zero};
use crate::ids::{BlobHash, CodecTag, ContextId, TurnId, TypeTag};

pub const LOG_RECORD_BYTES: usize = 128;
const _: () = assert!(512usize.is_multiple_of(LOG_RECORD_BYTES));
const _: () = assert!(LOG_RECORD_BYTES.is_multiple_of(8));

/// Byte offsets of the fields, shared by `encode` and `decode` (the table above).
mod at {
    pub const RECORD_ID: usize = 0;
    pub const KIND: usize = 8;
    pub const FORMAT_VERSION: usize = 9;
    pub const RESERVED_10: usize = 10;
    pub const FLAGS: usize = 12;
    pub const CONTEXT_ID: usize = 16;
    /// Turn: the parent; context: the head turn.
    pub const PARENT_TURN_ID: usize = 24;
    /// Turn: its depth; context: the head's depth.
    pub const DEPTH: usize = 32;
    pub const CODEC: usize = 36;
    pub const TYPE_TAG: usize = 40;
    pub const PAYLOAD_HASH: usize = 48;
    pub const PAYLOAD_LEN: usize = 80;
    pub const RESERVED_84: usize = 84;
    pub const CREATED_AT_UNIX_MS: usize = 88;
    /// Reserved (skip pointer, link, spare) up to the checksum: zero in v1.
    pub const RESERVED_96: usize = 96;
    pub const CRC32C: usize = 124;
}
const _: () = assert!(at::PAYLOAD_HASH + 32 == at::PAYLOAD_LEN);
const _: () = assert!(at::CRC32C + 4 == LOG_RECORD_BYTES);

pub const LOG_FORMAT_VERSION: u8 = 1;
const KIND_TURN: u8 = 1;
const KIND_CONTEXT: u8 = 2;

/// Turn flags defined by v1: none. Bits are reserved for tombstones and summary markers.
pub const TURN_FLAGS_KNOWN: u32 = 0;

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
}

/// Creates a context with its initial head.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ContextRecord {
    pub record_id: u64,
    pub context_id: ContextId,
    pub head_turn_id: TurnId,
    pub head_depth: u32,
    pub created_at_unix_ms: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LogRecord {
    Turn(TurnRecord),
    Context(ContextRecord),
}

impl LogRecord {
    pub fn record_id(&self) -> u64 {
        match self {
            LogRecord::Turn(turn) => turn.turn_id.0,
            LogRecord::Context(context) => context.record_id,
        }
    }

    pub fn encode(&self, target: &mut [u8; LOG_RECORD_BYTES]) {
        target.fill(0);
        let mut fields = FieldsMut(target);
        fields.u64(at::RECORD_ID, self.record_id());
        match self {
            LogRecord::Turn(turn) => {
                assert!(turn.turn_id.0 > 0, "turn records carry a TurnID");
                assert!(
                    turn.parent_turn_id < turn.turn_id,
                    "parent older than child"
                );
                assert_eq!(turn.flags & !TURN_FLAGS_KNOWN, 0, "unknown turn flags");
                fields.0[at::KIND] = KIND_TURN;
                fields.u32(at::FLAGS, turn.flags);
                fields.u64(at::CONTEXT_ID, turn.context_id.0);
                fields.u64(at::PARENT_TURN_ID, turn.parent_turn_id.0);
                fields.u32(at::DEPTH, turn.depth);
                fields.u32(at::CODEC, turn.codec);
                fields.u64(at::TYPE_TAG, turn.type_tag);
                fields.bytes(at::PAYLOAD_HASH, &turn.payload_hash.0);
                fields.u32(at::PAYLOAD_LEN, turn.payload_len);
                fields.u64(at::CREATED_AT_UNIX_MS, turn.created_at_unix_ms);
            }
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
                fields.u64(at::CREATED_AT_UNIX_MS, context.created_at_unix_ms);
            }
        }
        fields.0[at::FORMAT_VERSION] = LOG_FORMAT_VERSION;
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
        if version != LOG_FORMAT_VERSION {
            return Err(RecordError::Version(u32::from(version)));
        }
        if fields.u16(at::RESERVED_10) != 0
            || fields.u32(at::RESERVED_84) != 0
            || !is_all_zero(&source[at::RESERVED_96..at::CRC32C])
        {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        let record_id = fields.u64(at::RECORD_ID);
        if record_id == 0 {
            return Err(RecordError::Field("record id 0"));
        }
        match source[at::KIND] {
            KIND_TURN => decode_turn(&fields, record_id).map(|turn| Some(LogRecord::Turn(turn))),
            KIND_CONTEXT => {
                decode_context(&fields, record_id).map(|context| Some(LogRecord::Context(context)))
            }
            other => Err(RecordError::Kind(other)),
        }
    }
}

fn decode_turn(fields: &Fields<'_>, record_id: u64) -> Result<TurnRecord, RecordError> {
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
    };
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
    };
    if fields.u32(at::FLAGS) != 0
        || fields.u32(at::CODEC) != 0
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

/// Byte offset of record `record_id` in `turns.log`.
pub fn record_offset(record_id: u64) -> u64 {
    assert!(record_id > 0);
    (record_id - 1) * LOG_RECORD_BYTES as u64
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
        }
    }

    #[test]
    fn turn_round_trip() {
        let record = LogRecord::Turn(sample_turn());
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        record.encode(&mut bytes);
        assert_eq!(LogRecord::decode(&bytes), Ok(Some(record)));
    }

    #[test]
    fn context_round_trip() {
        let record = LogRecord::Context(ContextRecord {
            record_id: 43,
            context_id: ContextId(4),
            head_turn_id: TurnId(42),
            head_depth: 5,
            created_at_unix_ms: 1,
        });
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        record.encode(&mut bytes);
        assert_eq!(LogRecord::decode(&bytes), Ok(Some(record)));
    }

    #[test]
    fn zeros_are_an_empty_slot() {
        assert_eq!(LogRecord::decode(&[0u8; LOG_RECORD_BYTES]), Ok(None));
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
