//! Pack files (`blobs/shard-SS/pack-NNNNNN.pack`): append-only blob records. Layout in
//! docs/storage.md#pack-files.
//!
//! ```text
//! offset size field
//!      0    4 magic          0x42534C42 ("BLSB" read as little-endian bytes)
//!      4    2 version        1
//!      6    2 compression    0 = raw, 1 = zstd, 2 = manifest (the body names the chunks)
//!      8    4 raw_len        payload bytes before compression
//!     12    4 stored_len     bytes of the stored body that follows the header
//!     16   32 hash           the blob's address: BLAKE3-256 of the raw payload, permuted
//!                            under its tenant's address key
//!     48    4 body_crc32c    over the stored body
//!     52    4 tenant_id      the tenant whose blob this is (0: the operator); `hash` is its
//!                            address (decision 0032 §4: the hash itself for the operator)
//!     56    2 key_version    SEALED: the tenant's data key version that sealed the body; else 0
//!     58    2 flags          bit 0 SEALED: the body is sealed (`nonce ‖ ciphertext ‖ tag`,
//!                            decision 0032 §4) under the tenant's data key `key_version`;
//!                            the plain body (raw, zstd or manifest) is what it opens to
//!     60    4 header_crc32c  over bytes 0..60
//!     64    … stored body, then zero padding to a multiple of 8 bytes
//! ```
//! The header has its own checksum so that the index can be rebuilt by hopping from header to
//! header, and a torn body is still told apart from a torn header.

use crate::format::{Fields, FieldsMut, RecordError, check_crc};
use crate::ids::{BlobHash, TenantId};

pub const PACK_HEADER_BYTES: usize = 64;
pub const PACK_MAGIC: u32 = 0x4253_4C42;
pub const PACK_FORMAT_VERSION: u16 = 1;

/// Byte offsets of the header fields, shared by `encode` and `decode` (the table above).
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const COMPRESSION: usize = 6;
    pub const RAW_LEN: usize = 8;
    pub const STORED_LEN: usize = 12;
    pub const HASH: usize = 16;
    pub const BODY_CRC32C: usize = 48;
    pub const TENANT_ID: usize = 52;
    pub const KEY_VERSION: usize = 56;
    pub const FLAGS: usize = 58;
    pub const HEADER_CRC32C: usize = 60;
}
const _: () = assert!(at::HASH + 32 == at::BODY_CRC32C);
const _: () = assert!(at::HEADER_CRC32C + 4 == PACK_HEADER_BYTES);
const _: () = assert!(PACK_HEADER_BYTES.is_multiple_of(8));
const _: () = assert!(at::FLAGS + 2 == at::HEADER_CRC32C);

/// Bytes a sealed body holds beyond the body it seals: the nonce (24) and the tag (16)
/// (`seal::SEAL_OVERHEAD_BYTES`, asserted equal there).
pub const SEALED_BODY_OVERHEAD_BYTES: usize = 40;

/// `flags` bit 0: the body is sealed.
const FLAG_SEALED: u16 = 1;

/// How a blob body is stored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Compression {
    Raw,
    Zstd,
    /// The body is a `format::manifest::Manifest`: the payload is the concatenation of the
    /// chunks it names (issue 16); `raw_len` is the payload's length, not the body's.
    Manifest,
}

impl Compression {
    pub fn code(self) -> u16 {
        match self {
            Compression::Raw => 0,
            Compression::Zstd => 1,
            Compression::Manifest => 2,
        }
    }

    pub fn from_code(code: u16) -> Option<Compression> {
        match code {
            0 => Some(Compression::Raw),
            1 => Some(Compression::Zstd),
            2 => Some(Compression::Manifest),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PackHeader {
    pub compression: Compression,
    pub raw_len: u32,
    pub stored_len: u32,
    /// The blob's address (the hash for the operator's blobs).
    pub hash: BlobHash,
    pub body_crc: u32,
    /// Whose blob it is: the address is `tenant_id`'s (`seal::Addressing`).
    pub tenant_id: TenantId,
    /// The data key version that sealed the body, when it is sealed (`seal::seal_blob`).
    pub sealed: Option<u16>,
}

impl PackHeader {
    /// Bytes the whole record (header, body, padding) occupies in the pack.
    pub fn record_bytes(&self) -> u64 {
        record_bytes(self.stored_len)
    }

    pub fn encode(&self, target: &mut [u8; PACK_HEADER_BYTES]) {
        assert!(
            self.compression != Compression::Raw
                || u64::from(self.stored_len) == raw_stored_len(self.raw_len, self.sealed),
            "a raw body is the payload (sealed: and the seal's overhead)"
        );
        target.fill(0);
        let mut fields = FieldsMut(target);
        fields.u32(at::MAGIC, PACK_MAGIC);
        fields.u16(at::VERSION, PACK_FORMAT_VERSION);
        fields.u16(at::COMPRESSION, self.compression.code());
        fields.u32(at::RAW_LEN, self.raw_len);
        fields.u32(at::STORED_LEN, self.stored_len);
        fields.bytes(at::HASH, &self.hash.0);
        fields.u32(at::BODY_CRC32C, self.body_crc);
        fields.u32(at::TENANT_ID, self.tenant_id.0);
        if let Some(version) = self.sealed {
            fields.u16(at::KEY_VERSION, version);
            fields.u16(at::FLAGS, FLAG_SEALED);
        }
        let crc = crc32c::crc32c(&fields.0[..at::HEADER_CRC32C]);
        fields.u32(at::HEADER_CRC32C, crc);
    }

    pub fn decode(source: &[u8; PACK_HEADER_BYTES]) -> Result<PackHeader, RecordError> {
        let fields = Fields(source);
        let magic = fields.u32(at::MAGIC);
        if magic != PACK_MAGIC {
            return Err(RecordError::Magic(magic));
        }
        check_crc(fields.u32(at::HEADER_CRC32C), &source[..at::HEADER_CRC32C])?;
        let version = fields.u16(at::VERSION);
        if version != PACK_FORMAT_VERSION {
            return Err(RecordError::Version(u32::from(version)));
        }
        let compression = Compression::from_code(fields.u16(at::COMPRESSION))
            .ok_or(RecordError::Field("unknown compression"))?;
        let header = PackHeader {
            compression,
            raw_len: fields.u32(at::RAW_LEN),
            stored_len: fields.u32(at::STORED_LEN),
            hash: BlobHash(fields.hash(at::HASH)),
            body_crc: fields.u32(at::BODY_CRC32C),
            tenant_id: TenantId(fields.u32(at::TENANT_ID)),
            sealed: None,
        };
        let (flags, key_version) = (fields.u16(at::FLAGS), fields.u16(at::KEY_VERSION));
        let header = match flags {
            0 if key_version == 0 => header,
            FLAG_SEALED => PackHeader {
                sealed: Some(key_version),
                ..header
            },
            0 => return Err(RecordError::Field("a key version on an unsealed body")),
            _ => return Err(RecordError::Field("unknown flags")),
        };
        if compression == Compression::Raw
            && u64::from(header.stored_len) != raw_stored_len(header.raw_len, header.sealed)
        {
            return Err(RecordError::Field("raw body length differs from raw_len"));
        }
        Ok(header)
    }

    pub fn check_body(&self, body: &[u8]) -> Result<(), RecordError> {
        if body.len() != self.stored_len as usize {
            return Err(RecordError::Field("body length differs from stored_len"));
        }
        check_crc(self.body_crc, body)
    }
}

/// The stored length of a raw body of `raw_len` bytes: the payload, and the seal's overhead
/// when sealed.
fn raw_stored_len(raw_len: u32, sealed: Option<u16>) -> u64 {
    let overhead = if sealed.is_some() {
        SEALED_BODY_OVERHEAD_BYTES as u64
    } else {
        0
    };
    u64::from(raw_len) + overhead
}

pub fn record_bytes(stored_len: u32) -> u64 {
    PACK_HEADER_BYTES as u64 + u64::from(stored_len).next_multiple_of(8)
}

/// A whole pack record, encoded and ready to be appended: header, body, padding.
#[derive(Clone, Debug)]
pub struct EncodedBlob {
    pub header: PackHeader,
    pub bytes: Vec<u8>,
}

impl EncodedBlob {
    /// The record of `tenant_id`'s blob at address `hash`, its body stored as it is.
    pub fn new(
        tenant_id: TenantId,
        hash: BlobHash,
        raw_len: u32,
        compression: Compression,
        body: &[u8],
    ) -> Self {
        Self::with_seal(tenant_id, hash, raw_len, compression, body, None)
    }

    /// `new` with a body sealed under the tenant's data key `sealed` (when `Some`).
    pub fn with_seal(
        tenant_id: TenantId,
        hash: BlobHash,
        raw_len: u32,
        compression: Compression,
        body: &[u8],
        sealed: Option<u16>,
    ) -> Self {
        assert!(
            body.len() <= u32::MAX as usize,
            "blob bodies are limited below 4 GiB"
        );
        let stored_len = body.len() as u32;
        let header = PackHeader {
            compression,
            raw_len,
            stored_len,
            hash,
            body_crc: crc32c::crc32c(body),
            tenant_id,
            sealed,
        };
        let total = header.record_bytes() as usize;
        let mut bytes = vec![0u8; total];
        let mut header_bytes = [0u8; PACK_HEADER_BYTES];
        header.encode(&mut header_bytes);
        bytes[..PACK_HEADER_BYTES].copy_from_slice(&header_bytes);
        bytes[PACK_HEADER_BYTES..PACK_HEADER_BYTES + body.len()].copy_from_slice(body);
        EncodedBlob { header, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_padding() {
        let body = b"0123456789";
        let blob = EncodedBlob::new(
            TenantId::OPERATOR,
            BlobHash::of(body),
            10,
            Compression::Raw,
            body,
        );
        assert_eq!(blob.bytes.len(), 64 + 16);
        let mut header = [0u8; PACK_HEADER_BYTES];
        header.copy_from_slice(&blob.bytes[..PACK_HEADER_BYTES]);
        let decoded = PackHeader::decode(&header).unwrap();
        assert_eq!(decoded, blob.header);
        decoded.check_body(&blob.bytes[64..74]).unwrap();
        assert!(decoded.check_body(&blob.bytes[64..73]).is_err());
    }

    #[test]
    fn every_flipped_header_bit_is_detected() {
        let blob = EncodedBlob::new(TenantId(3), BlobHash::of(b"x"), 1, Compression::Raw, b"x");
        let mut header = [0u8; PACK_HEADER_BYTES];
        header.copy_from_slice(&blob.bytes[..PACK_HEADER_BYTES]);
        for bit in 0..PACK_HEADER_BYTES * 8 {
            let mut damaged = header;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(PackHeader::decode(&damaged).is_err(), "bit {bit}");
        }
    }
}
