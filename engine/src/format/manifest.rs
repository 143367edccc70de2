//! The body of a chunked blob's pack record (compression code 2, `Compression::Manifest`;
//! issue 16, decision 0013): the ordered chunks whose bytes, concatenated, are the payload.
//! The record's header keeps the payload's own BlobHash and length; each chunk is a blob of
//! its own (BLAKE3 of the chunk's bytes), stored once in the shard of its hash. Layout in
//! docs/storage.md#manifests.
//!
//! ```text
//! offset size field
//!      0    2 version        1
//!      2    2 flags          bit 0: the manifest has a base
//!      4    4 chunk_count    entries that follow (the manifest's own)
//!      8    8 payload_len    bytes of the whole payload (= the pack header's raw_len)
//!     16   40 base           only with flag bit 0: base hash (32), kept u32, depth u32
//!  16|56   36 × chunk_count  entries: chunk hash (32), chunk length u32
//! ```
//! A manifest with a base is a *delta*: its chunks are the first `kept` chunks of the base
//! (itself a full manifest or a delta), then its own entries; `depth` counts the deltas down
//! to a full manifest (1: the base is full), at most `MANIFEST_DEPTH_MAX`. An agent's state
//! that grew by a message shares all but its last chunks with the previous state, so a delta
//! costs a few entries instead of one per chunk of the whole state (the sweep in decision
//! 0013).
//! The pack record's body CRC covers these bytes; decoding checks every field it can without
//! the chunks (their presence and the payload's hash are checked on read and by `verify`).

use crate::format::{Fields, FieldsMut, RecordError};
use crate::ids::BlobHash;

pub const MANIFEST_VERSION: u16 = 1;
pub const MANIFEST_HEADER_BYTES: usize = 16;
pub const MANIFEST_BASE_BYTES: usize = 40;
pub const MANIFEST_ENTRY_BYTES: usize = 36;
/// Chunks of one payload, base included (`ctxstore-vocab`'s `CHUNKS_PER_PAYLOAD_MAX`): a 4 GiB
/// payload of 64 KiB chunks, and far more than the default chunker makes of the largest
/// payload the default limits allow. A chunk is never longer than `CHUNK_BYTES_MAX` (the
/// chunker's maximum is lower; a client may send its own cut, checked against this).
pub use ctxstore_vocab::limits::{
    CHUNK_BYTES_MAX, CHUNKS_PER_PAYLOAD_MAX as CHUNKS_PER_MANIFEST_MAX,
};

const FLAG_BASE: u16 = 1;

mod at {
    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 2;
    pub const CHUNK_COUNT: usize = 4;
    pub const PAYLOAD_LEN: usize = 8;
    pub const BASE_HASH: usize = 16;
    pub const BASE_KEPT: usize = 48;
    pub const BASE_DEPTH: usize = 52;
}
const _: () = assert!(at::PAYLOAD_LEN + 8 == MANIFEST_HEADER_BYTES);
const _: () = assert!(at::BASE_DEPTH + 4 == MANIFEST_HEADER_BYTES + MANIFEST_BASE_BYTES);

/// Deltas between a manifest and the full manifest under it: a read resolves at most this
/// many manifest records before the chunks.
pub const MANIFEST_DEPTH_MAX: u32 = 32;

/// One chunk of a payload: its BlobHash and length.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct ChunkRef {
    pub hash: BlobHash,
    pub len: u32,
}

/// The base of a delta manifest: its first `kept` chunks come first. `depth` is this
/// manifest's: 1 + the base's (a full manifest's is 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ManifestBase {
    pub hash: BlobHash,
    pub kept: u32,
    pub depth: u32,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Manifest {
    pub payload_len: u64,
    pub base: Option<ManifestBase>,
    pub chunks: Vec<ChunkRef>,
}

impl Manifest {
    /// Deltas down to a full manifest (0: this one is full).
    pub fn depth(&self) -> u32 {
        self.base.map_or(0, |base| base.depth)
    }

    pub fn encoded_len(&self) -> usize {
        MANIFEST_HEADER_BYTES
            + if self.base.is_some() {
                MANIFEST_BASE_BYTES
            } else {
                0
            }
            + self.chunks.len() * MANIFEST_ENTRY_BYTES
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.chunks.len() <= CHUNKS_PER_MANIFEST_MAX as usize);
        assert!(
            self.base.is_some_and(|base| base.kept >= 1) || !self.chunks.is_empty(),
            "a manifest names at least one chunk"
        );
        let mut bytes = vec![0u8; self.encoded_len()];
        let mut fields = FieldsMut(&mut bytes);
        fields.u16(at::VERSION, MANIFEST_VERSION);
        fields.u16(at::FLAGS, if self.base.is_some() { FLAG_BASE } else { 0 });
        fields.u32(at::CHUNK_COUNT, self.chunks.len() as u32);
        fields.u64(at::PAYLOAD_LEN, self.payload_len);
        let mut offset = MANIFEST_HEADER_BYTES;
        if let Some(base) = self.base {
            fields.bytes(at::BASE_HASH, &base.hash.0);
            assert!((1..=MANIFEST_DEPTH_MAX).contains(&base.depth));
            fields.u32(at::BASE_KEPT, base.kept);
            fields.u32(at::BASE_DEPTH, base.depth);
            offset += MANIFEST_BASE_BYTES;
        }
        for chunk in &self.chunks {
            assert!(chunk.len >= 1 && chunk.len <= CHUNK_BYTES_MAX);
            fields.bytes(offset, &chunk.hash.0);
            fields.u32(offset + 32, chunk.len);
            offset += MANIFEST_ENTRY_BYTES;
        }
        debug_assert_eq!(Manifest::decode(&bytes).as_ref(), Ok(self));
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<Manifest, RecordError> {
        if bytes.len() < MANIFEST_HEADER_BYTES {
            return Err(RecordError::Field("manifest shorter than its header"));
        }
        let fields = Fields(bytes);
        let version = fields.u16(at::VERSION);
        if version != MANIFEST_VERSION {
            return Err(RecordError::Version(u32::from(version)));
        }
        let flags = fields.u16(at::FLAGS);
        if flags & !FLAG_BASE != 0 {
            return Err(RecordError::Field("unknown manifest flags"));
        }
        let count = fields.u32(at::CHUNK_COUNT);
        if count > CHUNKS_PER_MANIFEST_MAX {
            return Err(RecordError::Field("manifest names too many chunks"));
        }
        let payload_len = fields.u64(at::PAYLOAD_LEN);
        let base = decode_base(bytes, flags, count)?;
        let mut offset = MANIFEST_HEADER_BYTES;
        if base.is_some() {
            offset += MANIFEST_BASE_BYTES;
        }
        if bytes.len() != offset + count as usize * MANIFEST_ENTRY_BYTES {
            return Err(RecordError::Field(
                "manifest length differs from its chunk count",
            ));
        }
        let mut chunks = Vec::with_capacity(count as usize);
        let mut own_len = 0u64;
        for _ in 0..count {
            let len = fields.u32(offset + 32);
            if len == 0 || len > CHUNK_BYTES_MAX {
                return Err(RecordError::Field("manifest chunk length out of range"));
            }
            own_len += u64::from(len);
            chunks.push(ChunkRef {
                hash: BlobHash(fields.hash(offset)),
                len,
            });
            offset += MANIFEST_ENTRY_BYTES;
        }
        // Without a base the lengths must add up here; with one, when the base is read.
        if (base.is_none() && own_len != payload_len) || own_len > payload_len {
            return Err(RecordError::Field("manifest chunk lengths do not add up"));
        }
        Ok(Manifest {
            payload_len,
            base,
            chunks,
        })
    }

    /// The blobs this manifest needs: its base and its own chunks.
    pub fn references(&self) -> impl Iterator<Item = BlobHash> + '_ {
        self.base
            .map(|base| base.hash)
            .into_iter()
            .chain(self.chunks.iter().map(|chunk| chunk.hash))
    }
}

/// A manifest's base (`FLAG_BASE`): the earlier manifest it extends, how many of its chunks it
/// keeps and how deep the chain is; without one, the manifest must name a chunk of its own.
fn decode_base(bytes: &[u8], flags: u16, count: u32) -> Result<Option<ManifestBase>, RecordError> {
    if flags & FLAG_BASE == 0 {
        if count == 0 {
            return Err(RecordError::Field("manifest names no chunk"));
        }
        return Ok(None);
    }
    if bytes.len() < MANIFEST_HEADER_BYTES + MANIFEST_BASE_BYTES {
        return Err(RecordError::Field("manifest shorter than its base"));
    }
    let fields = Fields(bytes);
    let depth = fields.u32(at::BASE_DEPTH);
    if !(1..=MANIFEST_DEPTH_MAX).contains(&depth) {
        return Err(RecordError::Field("manifest depth out of range"));
    }
    let kept = fields.u32(at::BASE_KEPT);
    if kept == 0 || kept > CHUNKS_PER_MANIFEST_MAX - count {
        return Err(RecordError::Field(
            "manifest keeps no or too many base chunks",
        ));
    }
    Ok(Some(ManifestBase {
        hash: BlobHash(fields.hash(at::BASE_HASH)),
        kept,
        depth,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(seed: u8, len: u32) -> ChunkRef {
        ChunkRef {
            hash: BlobHash::of(&[seed]),
            len,
        }
    }

    #[test]
    fn full_and_delta_round_trip() {
        let full = Manifest {
            payload_len: 30,
            base: None,
            chunks: vec![chunk(1, 10), chunk(2, 20)],
        };
        assert_eq!(Manifest::decode(&full.encode()), Ok(full.clone()));
        let delta = Manifest {
            payload_len: 45,
            base: Some(ManifestBase {
                hash: BlobHash::of(b"base"),
                kept: 1,
                depth: 3,
            }),
            chunks: vec![chunk(3, 35)],
        };
        assert_eq!(Manifest::decode(&delta.encode()), Ok(delta));
    }

    proptest::proptest! {
        /// What decodes re-encodes to the same bytes (the fuzz target's pair assertion, here
        /// over bodies near the valid ones).
        #[test]
        fn decoding_is_canonical(
            count in 0u32..4,
            base in proptest::option::of((1u32..5, 0u32..40)),
            lens in proptest::collection::vec(0u32..3, 4),
            flip in proptest::option::of((0usize..200, 0u8..8)),
        ) {
            let chunks: Vec<ChunkRef> = (0..count)
                .map(|i| chunk(i as u8, lens[i as usize].max(1)))
                .collect();
            let own: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
            let manifest = Manifest {
                payload_len: own + base.map_or(0, |(kept, _)| u64::from(kept)),
                base: base.map(|(kept, depth)| ManifestBase {
                    hash: BlobHash::of(b"b"),
                    kept,
                    depth: depth.clamp(1, MANIFEST_DEPTH_MAX),
                }),
                chunks,
            };
            if manifest.base.is_none() && manifest.chunks.is_empty() {
                return Ok(());
            }
            let mut bytes = manifest.encode();
            if let Some((at, bit)) = flip {
                let at = at % bytes.len();
                bytes[at] ^= 1 << bit;
            }
            if let Ok(decoded) = Manifest::decode(&bytes) {
                proptest::prop_assert_eq!(decoded.encode(), bytes);
            }
        }
    }

    #[test]
    fn damaged_manifests_are_refused() {
        let full = Manifest {
            payload_len: 30,
            base: None,
            chunks: vec![chunk(1, 10), chunk(2, 20)],
        }
        .encode();
        assert!(Manifest::decode(&full[..full.len() - 1]).is_err());
        let mut wrong_len = full.clone();
        wrong_len[at::PAYLOAD_LEN] = 31;
        assert!(Manifest::decode(&wrong_len).is_err());
        let mut zero_chunk = full.clone();
        zero_chunk[MANIFEST_HEADER_BYTES + 32..MANIFEST_HEADER_BYTES + 36].fill(0);
        assert!(Manifest::decode(&zero_chunk).is_err());
        let mut flags = full;
        flags[at::FLAGS] = 2;
        assert!(Manifest::decode(&flags).is_err());
    }
}
