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
use crate::ids::{BlobHash, ContextId, TurnId};
use crate::model::Turn;

pub const LOG_RECORD_BYTES: usize = 128;
const _: () = assert!(512usize.is_multiple_of(LOG_RECORD_BYTES));
const _: () = assert!(LOG_RECORD_BYTES.is_multiple_of(8));

pub const LOG_FORMAT_VERSION: u8 = 1;
const KIND_TURN: u8 = 1;
const KIND_CONTEXT: u8 = 2;
const CRC_OFFSET: usize = LOG_RECORD_BYTES - 4;

/// Turn flags defined by v1: none. Bits are reserved for tombstones and summary markers.
pub const TURN_FLAGS_KNOWN: u32 = 0;

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
    Turn(Turn),
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
        fields.u64(0, self.record_id());
        match self {
            LogRecord::Turn(turn) => {
                assert!(turn.turn_id.0 > 0, "turn records carry a TurnID");
                assert!(
                    turn.parent_turn_id < turn.turn_id,
                    "parent older than child"
                );
                assert_eq!(turn.flags & !TURN_FLAGS_KNOWN, 0, "unknown turn flags");
                fields.0[8] = KIND_TURN;
                fields.u32(12, turn.flags);
                fields.u64(16, turn.context_id.0);
                fields.u64(24, turn.parent_turn_id.0);
                fields.u32(32, turn.depth);
                fields.u32(36, turn.codec);
                fields.u64(40, turn.type_tag);
                fields.bytes(48, &turn.payload_hash.0);
                fields.u32(80, turn.payload_len);
                fields.u64(88, turn.created_at_unix_ms);
            }
            LogRecord::Context(context) => {
                assert!(context.record_id > 0);
                assert!(
                    context.head_turn_id.0 < context.record_id,
                    "base turn is older"
                );
                fields.0[8] = KIND_CONTEXT;
                fields.u64(16, context.context_id.0);
                fields.u64(24, context.head_turn_id.0);
                fields.u32(32, context.head_depth);
                fields.u64(88, context.created_at_unix_ms);
            }
        }
        fields.0[9] = LOG_FORMAT_VERSION;
        let crc = crc32c::crc32c(&fields.0[..CRC_OFFSET]);
        fields.u32(CRC_OFFSET, crc);
    }

    /// Decodes one record. `Ok(None)`: the slot is all zeros (never written).
    pub fn decode(source: &[u8; LOG_RECORD_BYTES]) -> Result<Option<LogRecord>, RecordError> {
        if is_all_zero(source) {
            return Ok(None);
        }
        let fields = Fields(source);
        check_crc(fields.u32(CRC_OFFSET), &source[..CRC_OFFSET])?;
        let version = source[9];
        if version != LOG_FORMAT_VERSION {
            return Err(RecordError::Version(u32::from(version)));
        }
        if fields.u16(10) != 0 || fields.u32(84) != 0 || !is_all_zero(&source[96..CRC_OFFSET]) {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        let record_id = fields.u64(0);
        if record_id == 0 {
            return Err(RecordError::Field("record id 0"));
        }
        match source[8] {
            KIND_TURN => {
                let turn = Turn {
                    turn_id: TurnId(record_id),
                    parent_turn_id: TurnId(fields.u64(24)),
                    context_id: ContextId(fields.u64(16)),
                    depth: fields.u32(32),
                    type_tag: fields.u64(40),
                    codec: fields.u32(36),
                    payload_hash: BlobHash(fields.hash(48)),
                    payload_len: fields.u32(80),
                    flags: fields.u32(12),
                    created_at_unix_ms: fields.u64(88),
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
                Ok(Some(LogRecord::Turn(turn)))
            }
            KIND_CONTEXT => {
                let context = ContextRecord {
                    record_id,
                    context_id: ContextId(fields.u64(16)),
                    head_turn_id: TurnId(fields.u64(24)),
                    head_depth: fields.u32(32),
                    created_at_unix_ms: fields.u64(88),
                };
                if fields.u32(12) != 0
                    || fields.u32(36) != 0
                    || fields.u64(40) != 0
                    || !is_all_zero(&source[48..84])
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
                Ok(Some(LogRecord::Context(context)))
            }
            other => Err(RecordError::Kind(other)),
        }
    }
}

/// Byte offset of record `record_id` in `turns.log`.
pub fn record_offset(record_id: u64) -> u64 {
    assert!(record_id > 0);
    (record_id - 1) * LOG_RECORD_BYTES as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_turn() -> Turn {
        Turn {
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
