//! On-disk formats, one module per file type. Each record is defined once: its size as a
//! constant, its encode and decode side by side, its byte layout in the doc comment and in
//! `docs/storage.md`. Decoding never panics: a torn or rotten record is an error value.
//!
//! All integers are little endian. Every record carries a CRC-32C.
//!
//! - `turn_log`: `turns.log`'s 128 B slots — `TurnRecord` (the on-disk turn, apart from the
//!   API's `Turn`), context and metadata records, continuation slots, and the reassembly of
//!   multi-slot records (`SlotAssembly`);
//! - `turn_extras`: a turn's key, labels and links, and their limits;
//! - `context_meta`: metadata bodies (names, tags, key-value entries, retention, overlays,
//!   gc-dead records) and their limits;
//! - `stream_meta`: stream record bodies (open, delta, end; issue 32), ops 12–14 beside
//!   `context_meta`'s;
//! - `log_base`: the 128 B header of `turns.base`;
//! - `pack`: a pack record, a 64 B header and its body (raw, zstd, or a manifest);
//! - `manifest`: a chunked payload's chunk list, full or a delta of a base (decision 0013);
//! - `blob_index`: `blobs.idx` entries;
//! - `meta`: the store's meta file;
//! - `keyring`: `DIR/keyring`, each tenant's wrapped keys (decision 0032), the one file
//!   rewritten whole;
//! - `vectors`: a key-value entry's vectors, a blob (decision 0033).

pub mod blob_index;
pub mod context_meta;
pub mod graph_snapshot;
pub mod keyring;
pub mod log_base;
pub mod manifest;
pub mod meta;
pub mod pack;
pub mod stream_meta;
pub mod turn_extras;
pub mod turn_log;
pub mod vectors;

use ctxstore_vocab::le;

/// Little-endian field access on a fixed record buffer (`ctxstore_vocab::le`'s `*_at`). Offsets are constants of the layout, so
/// an out-of-range slice is a programming error and panics (in tests, on the first run).
pub(crate) struct Fields<'a>(pub &'a [u8]);

impl Fields<'_> {
    pub fn u16(&self, at: usize) -> u16 {
        le::u16_at(self.0, at)
    }

    pub fn u32(&self, at: usize) -> u32 {
        le::u32_at(self.0, at)
    }

    pub fn u64(&self, at: usize) -> u64 {
        le::u64_at(self.0, at)
    }

    pub fn hash(&self, at: usize) -> [u8; 32] {
        le::array_at(self.0, at)
    }
}

pub(crate) struct FieldsMut<'a>(pub &'a mut [u8]);

impl FieldsMut<'_> {
    pub fn u16(&mut self, at: usize, value: u16) {
        self.0[at..at + 2].copy_from_slice(&value.to_le_bytes());
    }

    pub fn u32(&mut self, at: usize, value: u32) {
        self.0[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    pub fn u64(&mut self, at: usize, value: u64) {
        self.0[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    pub fn bytes(&mut self, at: usize, value: &[u8]) {
        self.0[at..at + value.len()].copy_from_slice(value);
    }
}

pub(crate) fn is_all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&byte| byte == 0)
}

/// Why a record failed to decode. Carries no position: the caller knows file and offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("bad magic {0:#010x}")]
    Magic(u32),
    #[error("unsupported format version {0}")]
    Version(u32),
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("invalid field: {0}")]
    Field(&'static str),
}

pub(crate) fn check_crc(stored: u32, covered: &[u8]) -> Result<(), RecordError> {
    let computed = crc32c::crc32c(covered);
    if stored == computed {
        Ok(())
    } else {
        Err(RecordError::Checksum { stored, computed })
    }
}
