//! `turns.base`: the compacted prefix of `turns.log` (issue 15, decision 0011). The garbage
//! collector writes it when the records of collected turns no live history needs pass a share
//! of the log; it holds the kept records of `turns.log` slots `1..=through_record_id`, each
//! the same 128-byte slot as in the log (its own record id and CRC-32C), in ascending record
//! id order, after this header. `turns.log`'s own bytes below `through_record_id` are then
//! ignored (the collector punches them out of the file). Layout in
//! docs/storage.md#turnsbase.
//!
//! ```text
//! offset size field
//!      0    8 magic                  "CTXLBASE"
//!      8    4 version                1
//!     12    4 reserved               0
//!     16    8 through_record_id      the base stands for turns.log slots 1..=this
//!     24    8 record_count           slots after this header
//!     32    8 turns_dropped          turn records compacted away, in all (statistics)
//!     40    8 logical_bytes_dropped  their payload bytes (statistics)
//!     48   76 reserved               0
//!    124    4 crc32c                 over bytes 0..124
//! ```

use crate::format::turn_log::LOG_RECORD_BYTES;
use crate::format::{Fields, FieldsMut, RecordError, check_crc, is_all_zero};

/// The header takes one slot, so every record slot of the file is 128-byte aligned too.
pub const BASE_HEADER_BYTES: usize = LOG_RECORD_BYTES;
pub const BASE_MAGIC: &[u8; 8] = b"CTXLBASE";
pub const BASE_VERSION: u32 = 1;

/// Byte offsets of the fields, shared by `encode` and `decode` (the table above).
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const RESERVED_12: usize = 12;
    pub const THROUGH_RECORD_ID: usize = 16;
    pub const RECORD_COUNT: usize = 24;
    pub const TURNS_DROPPED: usize = 32;
    pub const LOGICAL_BYTES_DROPPED: usize = 40;
    pub const RESERVED_48: usize = 48;
    pub const CRC32C: usize = 124;
}
const _: () = assert!(at::MAGIC + BASE_MAGIC.len() == at::VERSION);
const _: () = assert!(at::CRC32C + 4 == BASE_HEADER_BYTES);

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct BaseHeader {
    pub through_record_id: u64,
    pub record_count: u64,
    pub turns_dropped: u64,
    pub logical_bytes_dropped: u64,
}

impl BaseHeader {
    /// The file's length with its records.
    pub fn file_bytes(&self) -> u64 {
        BASE_HEADER_BYTES as u64 + self.record_count * LOG_RECORD_BYTES as u64
    }

    pub fn encode(&self) -> [u8; BASE_HEADER_BYTES] {
        assert!(
            self.record_count <= self.through_record_id,
            "a base holds at most the slots it stands for"
        );
        let mut target = [0u8; BASE_HEADER_BYTES];
        let mut fields = FieldsMut(&mut target);
        fields.bytes(at::MAGIC, BASE_MAGIC);
        fields.u32(at::VERSION, BASE_VERSION);
        fields.u64(at::THROUGH_RECORD_ID, self.through_record_id);
        fields.u64(at::RECORD_COUNT, self.record_count);
        fields.u64(at::TURNS_DROPPED, self.turns_dropped);
        fields.u64(at::LOGICAL_BYTES_DROPPED, self.logical_bytes_dropped);
        let crc = crc32c::crc32c(&fields.0[..at::CRC32C]);
        fields.u32(at::CRC32C, crc);
        target
    }

    pub fn decode(source: &[u8; BASE_HEADER_BYTES]) -> Result<BaseHeader, RecordError> {
        if &source[at::MAGIC..at::VERSION] != BASE_MAGIC {
            return Err(RecordError::Field(
                "turns.base does not start with CTXLBASE",
            ));
        }
        let fields = Fields(source);
        check_crc(fields.u32(at::CRC32C), &source[..at::CRC32C])?;
        let version = fields.u32(at::VERSION);
        if version != BASE_VERSION {
            return Err(RecordError::Version(version));
        }
        if fields.u32(at::RESERVED_12) != 0 || !is_all_zero(&source[at::RESERVED_48..at::CRC32C]) {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        let header = BaseHeader {
            through_record_id: fields.u64(at::THROUGH_RECORD_ID),
            record_count: fields.u64(at::RECORD_COUNT),
            turns_dropped: fields.u64(at::TURNS_DROPPED),
            logical_bytes_dropped: fields.u64(at::LOGICAL_BYTES_DROPPED),
        };
        if header.record_count > header.through_record_id {
            return Err(RecordError::Field(
                "record_count exceeds the slots the base stands for",
            ));
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_bit_flip_is_caught() {
        let header = BaseHeader {
            through_record_id: 1_000,
            record_count: 37,
            turns_dropped: 900,
            logical_bytes_dropped: 1 << 30,
        };
        let encoded = header.encode();
        assert_eq!(BaseHeader::decode(&encoded), Ok(header));
        for bit in 0..BASE_HEADER_BYTES * 8 {
            let mut damaged = encoded;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(BaseHeader::decode(&damaged).is_err(), "bit {bit}");
        }
    }
}
