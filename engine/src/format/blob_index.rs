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

/// Byte offsets of the fields, shared by `encode` and `decode` (the table above).
mod at {
    pub const HASH: usize = 0;
    pub const PACK_OFFSET: usize = 32;
    pub const PACK_ID: usize = 40;
    pub const RAW_LEN: usize = 44;
    pub const STORED_LEN: usize = 48;
    pub const COMPRESSION: usize = 52;
    pub const RESERVED: usize = 54;
    pub const CRC32C: usize = 60;
}
const _: () = assert!(at::HASH + 32 == at::PACK_OFFSET);
const _: () = assert!(at::CRC32C + 4 == INDEX_ENTRY_BYTES);

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
        fields.bytes(at::HASH, &self.hash.0);
        fields.u64(at::PACK_OFFSET, self.location.pack_offset);
        fields.u32(at::PACK_ID, self.location.pack_id);
        fields.u32(at::RAW_LEN, self.location.raw_len);
        fields.u32(at::STORED_LEN, self.location.stored_len);
        fields.u16(at::COMPRESSION, self.location.compression.code());
        let crc = crc32c::crc32c(&fields.0[..at::CRC32C]);
        fields.u32(at::CRC32C, crc);
    }

    /// `Ok(None)`: an all-zero entry (never written).
    pub fn decode(source: &[u8; INDEX_ENTRY_BYTES]) -> Result<Option<IndexEntry>, RecordError> {
        if is_all_zero(source) {
            return Ok(None);
        }
        let fields = Fields(source);
        check_crc(fields.u32(at::CRC32C), &source[..at::CRC32C])?;
        if !is_all_zero(&source[at::RESERVED..at::CRC32C]) {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        let compression = Compression::from_code(fields.u16(at::COMPRESSION))
            .ok_or(RecordError::Field("unknown compression"))?;
        Ok(Some(IndexEntry {
            hash: BlobHash(fields.hash(at::HASH)),
            location: BlobLocation {
                pack_id: fields.u32(at::PACK_ID),
                pack_offset: fields.u64(at::PACK_OFFSET),
                raw_len: fields.u32(at::RAW_LEN),
                stored_len: fields.u32(at::STORED_LEN),
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
