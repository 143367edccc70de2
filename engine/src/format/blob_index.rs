//! `blobs/shard-SS/blobs.idx`: one fixed-size entry per pack record, in pack order. Layout in
//! docs/storage.md#blob-index.
//!
//! The index is an accelerator, not the truth: entries are appended only after the pack bytes
//! they describe were fsynced, and the index itself is fsynced lazily. At open, the entries
//! tell where every blob is without reading the packs; whatever the pack holds beyond the last
//! entry is scanned and indexed again.
//!
//! ```text
//! offset size field
//!      0   32 hash           BLAKE3-256 of the raw payload
//!     32    8 pack_offset    byte offset of the record in its pack
//!     40    4 pack_id        NNNNNN of pack-NNNNNN.pack
//!     44    4 raw_len
//!     48    4 stored_len
//!     52    2 compression    as in the pack header
//!     54    6 reserved       0
//!     60    4 crc32c         over bytes 0..60
//! ```

use crate::format::pack::Compression;
use crate::format::{Fields, FieldsMut, RecordError, check_crc, is_all_zero};
use crate::ids::BlobHash;

pub const INDEX_ENTRY_BYTES: usize = 64;
const _: () = assert!(512usize.is_multiple_of(INDEX_ENTRY_BYTES));
const CRC_OFFSET: usize = 60;

/// Where a blob lives. Also the value of the in-memory index.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlobLocation {
    pub pack_id: u32,
    pub pack_offset: u64,
    pub raw_len: u32,
    pub stored_len: u32,
    pub compression: Compression,
}

impl BlobLocation {
    pub fn record_bytes(&self) -> u64 {
        crate::format::pack::record_bytes(self.stored_len)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IndexEntry {
    pub hash: BlobHash,
    pub location: BlobLocation,
}

impl IndexEntry {
    pub fn encode(&self, target: &mut [u8; INDEX_ENTRY_BYTES]) {
        target.fill(0);
        let mut fields = FieldsMut(target);
        fields.bytes(0, &self.hash.0);
        fields.u64(32, self.location.pack_offset);
        fields.u32(40, self.location.pack_id);
        fields.u32(44, self.location.raw_len);
        fields.u32(48, self.location.stored_len);
        fields.u16(52, self.location.compression.code());
        let crc = crc32c::crc32c(&fields.0[..CRC_OFFSET]);
        fields.u32(CRC_OFFSET, crc);
    }

    /// `Ok(None)`: an all-zero entry (never written).
    pub fn decode(source: &[u8; INDEX_ENTRY_BYTES]) -> Result<Option<IndexEntry>, RecordError> {
        if is_all_zero(source) {
            return Ok(None);
        }
        let fields = Fields(source);
        check_crc(fields.u32(CRC_OFFSET), &source[..CRC_OFFSET])?;
        if !is_all_zero(&source[54..CRC_OFFSET]) {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        let compression = Compression::from_code(fields.u16(52))
            .ok_or(RecordError::Field("unknown compression"))?;
        Ok(Some(IndexEntry {
            hash: BlobHash(fields.hash(0)),
            location: BlobLocation {
                pack_id: fields.u32(40),
                pack_offset: fields.u64(32),
                raw_len: fields.u32(44),
                stored_len: fields.u32(48),
                compression,
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bit_flips() {
        let entry = IndexEntry {
            hash: BlobHash::of(b"abc"),
            location: BlobLocation {
                pack_id: 3,
                pack_offset: 4096,
                raw_len: 10_240,
                stored_len: 4_000,
                compression: Compression::Zstd,
            },
        };
        let mut bytes = [0u8; INDEX_ENTRY_BYTES];
        entry.encode(&mut bytes);
        assert_eq!(IndexEntry::decode(&bytes), Ok(Some(entry)));
        for bit in 0..INDEX_ENTRY_BYTES * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(IndexEntry::decode(&damaged).is_err(), "bit {bit}");
        }
    }
}
