//! Content-defined chunking of payloads, as the server's engine cuts them (FastCDC 2020): a
//! state that grows by a little each step keeps all but its last chunk or two, so the client
//! sends only the chunks the server lacks (PUT_CHUNKED) and then appends by hash.

use bytes::Bytes;
use ctxstore_protocol::CHUNK_BYTES_MAX;
use fastcdc::v2020;

use crate::types::{BlobHash, ChunkRef};

/// How appends by value cut large payloads into chunks (`ClientConfig::chunking`). Must match
/// the server's `--chunk-*` settings (`--chunk-threshold`, `--chunk-min`, `--chunk-avg`,
/// `--chunk-max`; the defaults match) for best dedup: chunks cut
/// alike are stored once, also against payloads other clients sent whole. Any values are
/// correct: the server stores whatever chunks it is given, and the payload's BlobHash is
/// BLAKE3 of its whole bytes either way.
///
/// Sizes outside what the chunker and the protocol take are brought within them: `max` to
/// 1 KiB..=1 MiB (`CHUNK_BYTES_MAX`), `avg` to 256 B..=`max`, `min` to 64 B..=`avg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkingConfig {
    /// Payloads larger than this are chunked (default 16,384: a smaller payload costs less
    /// sent whole than its chunk hashes and the extra round trips).
    pub threshold_bytes: u32,
    /// Smallest chunk, but for a payload's last (default 1 KiB).
    pub min: u32,
    /// The chunk size cuts aim at (default 2 KiB).
    pub avg: u32,
    /// Largest chunk (default 16 KiB).
    pub max: u32,
}

impl ChunkingConfig {
    /// The engine's defaults.
    pub const DEFAULT: ChunkingConfig = ChunkingConfig {
        threshold_bytes: 16_384,
        min: 1024,
        avg: 2048,
        max: 16_384,
    };

    /// The sizes handed to the chunker: `min ≤ avg ≤ max`, each within what FastCDC accepts
    /// (it panics outside) and `max` within what one PUT_CHUNKED entry may carry.
    pub fn sizes(&self) -> (u32, u32, u32) {
        let max = self.max.clamp(v2020::MAXIMUM_MIN, CHUNK_BYTES_MAX);
        let avg = self.avg.clamp(v2020::AVERAGE_MIN, max);
        let min = self.min.clamp(v2020::MINIMUM_MIN, avg);
        (min, avg, max)
    }

    /// Whether a payload of `len` bytes is chunked.
    pub fn applies_to(&self, len: usize) -> bool {
        len > self.threshold_bytes as usize
    }

    /// The payload's chunks in order, each with its BLAKE3 hash and its bytes (slices of
    /// `payload`, no copy). Their bytes concatenate to `payload`; an empty payload has none.
    pub fn split(&self, payload: &Bytes) -> Vec<(ChunkRef, Bytes)> {
        let (min, avg, max) = self.sizes();
        v2020::FastCDC::new(payload, min, avg, max)
            .map(|chunk| {
                let bytes = payload.slice(chunk.offset..chunk.offset + chunk.length);
                let chunk = ChunkRef {
                    hash: BlobHash::of(&bytes),
                    // ≤ max ≤ CHUNK_BYTES_MAX: fits.
                    len: chunk.length as u32,
                };
                (chunk, bytes)
            })
            .collect()
    }
}

impl Default for ChunkingConfig {
    fn default() -> Self {
        ChunkingConfig::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Bytes that look like text but do not repeat (a fixed xorshift stream).
    fn text(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                b"abcdefghij klmnopqrstuvwxyz,.\"{}"[(state % 32) as usize]
            })
            .collect()
    }

    #[test]
    fn chunks_rebuild_the_payload_within_their_bounds() {
        let config = ChunkingConfig::DEFAULT;
        let payload = Bytes::from(text(300_000, 7));
        let chunks = config.split(&payload);
        let rebuilt: Vec<u8> = chunks.iter().flat_map(|(_, b)| b.to_vec()).collect();
        assert_eq!(rebuilt, payload);
        for (index, (chunk, bytes)) in chunks.iter().enumerate() {
            assert_eq!(chunk.len as usize, bytes.len());
            assert_eq!(chunk.hash, BlobHash::of(bytes));
            assert!(chunk.len <= config.max);
            if index + 1 < chunks.len() {
                assert!(chunk.len >= config.min, "chunk {index} of {}", chunk.len);
            }
        }
        // About one chunk per `avg` bytes.
        assert!(
            (50..=300).contains(&chunks.len()),
            "{} chunks",
            chunks.len()
        );
        assert!(config.split(&Bytes::new()).is_empty());
    }

    /// The point of content-defined chunking: a payload that grew at its end keeps every chunk
    /// but the last few, so only those travel.
    #[test]
    fn a_payload_grown_at_its_end_shares_all_but_its_last_chunks() {
        let config = ChunkingConfig::DEFAULT;
        let before = text(200_000, 3);
        let mut after = before.clone();
        after.extend(text(1000, 4));
        let old = config.split(&Bytes::from(before));
        let new = config.split(&Bytes::from(after));
        let kept = old
            .iter()
            .zip(&new)
            .take_while(|(old, new)| old.0 == new.0)
            .count();
        assert!(kept + 2 >= old.len(), "{kept} of {} chunks kept", old.len());
    }

    #[test]
    fn any_sizes_are_brought_within_the_chunkers_bounds() {
        let payload = Bytes::from(text(100_000, 9));
        for (min, avg, max) in [
            (0, 0, 0),
            (u32::MAX, u32::MAX, u32::MAX),
            (1 << 20, 16, 4096),
            (5000, 100, 1),
        ] {
            let config = ChunkingConfig {
                threshold_bytes: 0,
                min,
                avg,
                max,
            };
            let (min, avg, max) = config.sizes();
            assert!(min <= avg && avg <= max && max <= CHUNK_BYTES_MAX);
            let chunks = config.split(&payload);
            let total: usize = chunks.iter().map(|(chunk, _)| chunk.len as usize).sum();
            assert_eq!(total, payload.len());
            assert!(
                chunks
                    .iter()
                    .all(|(chunk, _)| chunk.len >= 1 && chunk.len <= max)
            );
        }
    }

    #[test]
    fn the_threshold_is_exclusive() {
        let config = ChunkingConfig::DEFAULT;
        assert!(!config.applies_to(16_384));
        assert!(config.applies_to(16_385));
    }
}
