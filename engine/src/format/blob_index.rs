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
//!     54    2 flags          bit 0 TENANT: tenant_id is the record's (every entry written
//!                            since decision 0032 step 2); 0: an entry written before, which
//!                            says nothing of its tenant (the shard rebuilds such an index)
//!     56    4 tenant_id      the record's tenant, as in its pack header (0 without TENANT)
//!     60    4 crc32c         over bytes 0..60
//! ```

use crate::format::pack::{Compression, PackHeader};
use crate::format::{Fields, FieldsMut, RecordError, check_crc, is_all_zero};
use crate::ids::{BlobHash, TenantId};

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
    pub const FLAGS: usize = 54;
    pub const TENANT_ID: usize = 56;
    pub const CRC32C: usize = 60;
}
const _: () = assert!(at::HASH + 32 == at::PACK_OFFSET);
const _: () = assert!(at::CRC32C + 4 == INDEX_ENTRY_BYTES);
const _: () = assert!(at::TENANT_ID + 4 == at::CRC32C);

/// `flags` bit 0: the entry names its record's tenant.
const FLAG_TENANT: u16 = 1;

/// Where a blob lives. Also the value of the in-memory index.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlobLocation {
    pub pack_id: u32,
    pub pack_offset: u64,
    pub raw_len: u32,
    pub stored_len: u32,
    pub compression: Compression,
    /// The record's tenant (its pack header's): whose quota its bytes count against.
    pub tenant_id: TenantId,
}

impl BlobLocation {
    /// The location of the record `header` heads at `pack_offset` of pack `pack_id`.
    pub fn of(pack_id: u32, pack_offset: u64, header: &PackHeader) -> BlobLocation {
        BlobLocation {
            pack_id,
            pack_offset,
            raw_len: header.raw_len,
            stored_len: header.stored_len,
            compression: header.compression,
            tenant_id: header.tenant_id,
        }
    }

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
        fields.u16(at::FLAGS, FLAG_TENANT);
        fields.u32(at::TENANT_ID, self.location.tenant_id.0);
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
        let flags = fields.u16(at::FLAGS);
        if flags & !FLAG_TENANT != 0 {
            return Err(RecordError::Field("unknown flags"));
        }
        if flags & FLAG_TENANT == 0 && !is_all_zero(&source[at::TENANT_ID..at::CRC32C]) {
            return Err(RecordError::Field("a tenant without the TENANT flag"));
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
                tenant_id: TenantId(fields.u32(at::TENANT_ID)),
            },
        }))
    }

    /// Whether the encoded entry `source` (one `decode` accepted) names its record's tenant:
    /// false for an entry written before entries did, whose `tenant_id` reads as the operator
    /// whatever the record's is.
    pub fn names_tenant(source: &[u8; INDEX_ENTRY_BYTES]) -> bool {
        Fields(source).u16(at::FLAGS) & FLAG_TENANT != 0
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
                tenant_id: TenantId(7),
            },
        };
        let mut bytes = [0u8; INDEX_ENTRY_BYTES];
        entry.encode(&mut bytes);
        assert_eq!(IndexEntry::decode(&bytes), Ok(Some(entry)));
        assert!(IndexEntry::names_tenant(&bytes));
        for bit in 0..INDEX_ENTRY_BYTES * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(IndexEntry::decode(&damaged).is_err(), "bit {bit}");
        }
    }

    /// An entry written before entries named their tenant (flags and tenant zero) still
    /// decodes, as the operator's, and says it names no tenant.
    #[test]
    fn an_entry_from_before_tenants_decodes_and_says_so() {
        let entry = IndexEntry {
            hash: BlobHash::of(b"old"),
            location: BlobLocation {
                pack_id: 0,
                pack_offset: 0,
                raw_len: 3,
                stored_len: 3,
                compression: Compression::Raw,
                tenant_id: TenantId::OPERATOR,
            },
        };
        let mut bytes = [0u8; INDEX_ENTRY_BYTES];
        entry.encode(&mut bytes);
        bytes[at::FLAGS..at::CRC32C].fill(0);
        let crc = crc32c::crc32c(&bytes[..at::CRC32C]);
        bytes[at::CRC32C..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(IndexEntry::decode(&bytes), Ok(Some(entry)));
        assert!(!IndexEntry::names_tenant(&bytes));
    }
}
