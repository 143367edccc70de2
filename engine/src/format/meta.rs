//! `ctxstore.meta`: written when a data directory is created (temp file, fsync, rename,
//! directory fsync), and again (the same way) only when a format migration completes. Fixes
//! what must never change for the life of the store. Layout in
//! docs/storage.md#ctxstoremeta.
//!
//! ```text
//! offset size field
//!      0    8 magic               "CTXSTORE"
//!      8    4 format_version      2 (1: before skip pointers; migrated at open)
//!     12    2 shard_count         blob shards; the hash → shard mapping depends on it
//!     14    2 flags               bit 0 SEALS: the store seals its payloads (decision 0032
//!                                 §4); its `keyring` must be beside it to open it
//!     16    8 created_at_unix_ms
//!     24   36 reserved            0
//!     60    4 crc32c              over bytes 0..60
//! ```

use crate::format::{Fields, FieldsMut, RecordError, check_crc, is_all_zero};

pub const META_BYTES: usize = 64;
pub const META_MAGIC: &[u8; 8] = b"CTXSTORE";
/// The store format this code writes. Format 1 (no skip pointers, no context chains in
/// `turns.log`) is read and migrated at open (`sequencer::migrate`). Format 3 (decision 0032)
/// lets context records name a tenant and adds tenant records (op 20); a format-2 log is a
/// format-3 log whose contexts are all the operator's, so its migration only rewrites the
/// meta file — after which code that knows only format 2, which would take a tenant's
/// context record for damage, refuses the store by its version instead.
pub const STORE_FORMAT_VERSION: u32 = 3;
/// The first store format whose `turns.log` has skip pointers and context chains (and may
/// have a `turns.base`).
pub const STORE_FORMAT_SKIPS: u32 = 2;
/// The oldest store format this code opens.
pub const STORE_FORMAT_VERSION_MIN: u32 = 1;

/// Byte offsets of the fields, shared by `encode` and `decode` (the table above).
mod at {
    pub const MAGIC: usize = 0;
    pub const FORMAT_VERSION: usize = 8;
    pub const SHARD_COUNT: usize = 12;
    pub const FLAGS: usize = 14;
    pub const CREATED_AT_UNIX_MS: usize = 16;
    pub const RESERVED_24: usize = 24;
    pub const CRC32C: usize = 60;
}
const _: () = assert!(at::MAGIC + META_MAGIC.len() == at::FORMAT_VERSION);
const _: () = assert!(at::CRC32C + 4 == META_BYTES);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Meta {
    pub format_version: u32,
    pub shard_count: u16,
    pub created_at_unix_ms: u64,
    /// The store seals its payloads: set when its keyring is first written, never cleared.
    /// Copied with the meta file by backups and the replica, so a copy without the keyring
    /// (a backup, a restore) refuses to open rather than start a new keyring over sealed bodies.
    pub seals: bool,
}

/// `flags` bit 0: the store seals its payloads.
const FLAG_SEALS: u16 = 1;

impl Meta {
    pub fn encode(&self) -> [u8; META_BYTES] {
        let mut target = [0u8; META_BYTES];
        let mut fields = FieldsMut(&mut target);
        fields.bytes(at::MAGIC, META_MAGIC);
        fields.u32(at::FORMAT_VERSION, self.format_version);
        fields.u16(at::SHARD_COUNT, self.shard_count);
        fields.u64(at::CREATED_AT_UNIX_MS, self.created_at_unix_ms);
        fields.u16(at::FLAGS, if self.seals { FLAG_SEALS } else { 0 });
        let crc = crc32c::crc32c(&fields.0[..at::CRC32C]);
        fields.u32(at::CRC32C, crc);
        target
    }

    pub fn decode(source: &[u8]) -> Result<Meta, RecordError> {
        if source.len() != META_BYTES {
            return Err(RecordError::Field("ctxstore.meta is not 64 bytes"));
        }
        if &source[at::MAGIC..at::FORMAT_VERSION] != META_MAGIC {
            return Err(RecordError::Field(
                "ctxstore.meta does not start with CTXSTORE",
            ));
        }
        let fields = Fields(source);
        check_crc(fields.u32(at::CRC32C), &source[..at::CRC32C])?;
        let meta = Meta {
            format_version: fields.u32(at::FORMAT_VERSION),
            shard_count: fields.u16(at::SHARD_COUNT),
            created_at_unix_ms: fields.u64(at::CREATED_AT_UNIX_MS),
            seals: fields.u16(at::FLAGS) & FLAG_SEALS != 0,
        };
        if !(STORE_FORMAT_VERSION_MIN..=STORE_FORMAT_VERSION).contains(&meta.format_version) {
            return Err(RecordError::Version(meta.format_version));
        }
        if fields.u16(at::FLAGS) & !FLAG_SEALS != 0 {
            return Err(RecordError::Field("unknown flags"));
        }
        if !is_all_zero(&source[at::RESERVED_24..at::CRC32C]) {
            return Err(RecordError::Field("reserved bytes are not zero"));
        }
        if meta.shard_count == 0 {
            return Err(RecordError::Field("shard_count 0"));
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let meta = Meta {
            format_version: 1,
            shard_count: 4,
            created_at_unix_ms: 99,
            seals: false,
        };
        assert_eq!(Meta::decode(&meta.encode()), Ok(meta));
        let mut damaged = meta.encode();
        damaged[13] ^= 1;
        assert!(Meta::decode(&damaged).is_err());
        let sealing = Meta {
            seals: true,
            ..meta
        };
        assert_eq!(Meta::decode(&sealing.encode()), Ok(sealing));
    }
}
