//! How payloads are cut into chunks (issue 16, decision 0013): FastCDC 2020, content-defined,
//! so a state that grows by a little each step keeps all but its last chunk or two. The engine
//! stores a payload longer than `threshold_bytes` as chunks and a manifest; a client cuts the
//! same way and sends only the chunks the server lacks. Chunks cut alike dedup, so both sides
//! use these defaults unless told otherwise; any sizes are correct (a manifest names whatever
//! cut it was written with, and a payload's BlobHash is BLAKE3 of its whole bytes either way).
//! The sweep that chose the defaults: decision 0013.

use std::ops::Range;

use fastcdc::v2020;

use crate::limits::CHUNK_BYTES_MAX;

/// Chunk sizes and the threshold past which a payload is chunked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkingConfig {
    /// Payloads longer than this are chunked (default 16 KiB: a smaller payload costs less
    /// whole than its chunk hashes and an extra round trip). 0: never chunk.
    pub threshold_bytes: u32,
    /// Smallest chunk, but for a payload's last (default 512 B).
    pub chunk_bytes_min: u32,
    /// The chunk size cuts aim at (default 1 KiB).
    pub chunk_bytes_avg: u32,
    /// Largest chunk (default 8 KiB; at most `CHUNK_BYTES_MAX`).
    pub chunk_bytes_max: u32,
}

impl ChunkingConfig {
    /// The defaults of the engine and of every client.
    pub const DEFAULT: ChunkingConfig = ChunkingConfig {
        threshold_bytes: 16 * 1024,
        chunk_bytes_min: 512,
        chunk_bytes_avg: 1024,
        chunk_bytes_max: 8 * 1024,
    };

    /// Checks sizes a store is configured with: within what FastCDC accepts and what one
    /// chunk may be, `min < avg < max`, and a threshold of 0 (off) or at least `min`.
    pub fn validate(&self) -> Result<(), String> {
        use v2020::{AVERAGE_MAX, AVERAGE_MIN, MAXIMUM_MIN, MINIMUM_MAX, MINIMUM_MIN};
        let (min, avg, max) = (
            self.chunk_bytes_min,
            self.chunk_bytes_avg,
            self.chunk_bytes_max,
        );
        let in_range = (MINIMUM_MIN..=MINIMUM_MAX).contains(&min)
            && (AVERAGE_MIN..=AVERAGE_MAX).contains(&avg)
            && (MAXIMUM_MIN..=CHUNK_BYTES_MAX).contains(&max);
        if !(in_range && min < avg && avg < max) {
            return Err(format!(
                "chunk sizes min {min} / avg {avg} / max {max} must satisfy \
                 {MINIMUM_MIN} <= min < avg < max <= {CHUNK_BYTES_MAX}, avg >= {AVERAGE_MIN}, \
                 max >= {MAXIMUM_MIN}"
            ));
        }
        if self.threshold_bytes != 0 && self.threshold_bytes < min {
            return Err(format!(
                "chunk threshold {} must be 0 (off) or at least the minimum chunk size {min}",
                self.threshold_bytes
            ));
        }
        Ok(())
    }

    /// The sizes handed to the chunker, brought within its bounds (it panics outside them) and
    /// `CHUNK_BYTES_MAX`, `min ≤ avg ≤ max`: a client may be given any sizes and still cuts
    /// correctly. Sizes that pass `validate` come back unchanged.
    pub fn sizes(&self) -> (u32, u32, u32) {
        let max = self
            .chunk_bytes_max
            .clamp(v2020::MAXIMUM_MIN, CHUNK_BYTES_MAX);
        let avg = self.chunk_bytes_avg.clamp(v2020::AVERAGE_MIN, max);
        let min = self.chunk_bytes_min.clamp(v2020::MINIMUM_MIN, avg);
        (min, avg, max)
    }

    /// Whether a payload of `len` bytes is stored (and sent) as chunks.
    pub fn applies_to(&self, len: usize) -> bool {
        self.threshold_bytes != 0 && len > self.threshold_bytes as usize
    }

    /// The cut: where each chunk of `payload` lies, in order. The ranges tile the payload; an
    /// empty payload has none. The same bytes and sizes always give the same cut.
    pub fn cut(&self, payload: &[u8]) -> Vec<Range<usize>> {
        let (min, avg, max) = self.sizes();
        let cut: Vec<Range<usize>> = v2020::FastCDC::new(payload, min, avg, max)
            .map(|chunk| chunk.offset..chunk.offset + chunk.length)
            .collect();
        debug_assert_eq!(cut.last().map_or(0, |last| last.end), payload.len());
        cut
    }
}

impl Default for ChunkingConfig {
    fn default() -> Self {
        ChunkingConfig::DEFAULT
    }
}

#[cfg(test)]
mod tests {
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
    fn the_defaults_are_valid_and_the_threshold_is_exclusive() {
        let config = ChunkingConfig::DEFAULT;
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.sizes(), (512, 1024, 8192));
        assert!(!config.applies_to(16_384));
        assert!(config.applies_to(16_385));
        let off = ChunkingConfig {
            threshold_bytes: 0,
            ..config
        };
        assert!(!off.applies_to(1 << 30));
    }

    #[test]
    fn chunks_tile_the_payload_within_their_bounds() {
        let config = ChunkingConfig::DEFAULT;
        let payload = text(300_000, 7);
        let cut = config.cut(&payload);
        let mut end = 0;
        for (index, range) in cut.iter().enumerate() {
            assert_eq!(range.start, end);
            end = range.end;
            assert!(range.len() <= 8192);
            if index + 1 < cut.len() {
                assert!(range.len() >= 512, "chunk {index} of {}", range.len());
            }
        }
        assert_eq!(end, payload.len());
        assert!((50..=300).contains(&cut.len()), "{} chunks", cut.len());
        assert!(config.cut(&[]).is_empty());
    }

    /// The point of content-defined chunking: a payload that grew at its end keeps every chunk
    /// but the last few.
    #[test]
    fn a_payload_grown_at_its_end_shares_all_but_its_last_chunks() {
        let config = ChunkingConfig::DEFAULT;
        let before = text(200_000, 3);
        let mut after = before.clone();
        after.extend(text(1000, 4));
        let old = config.cut(&before);
        let new = config.cut(&after);
        let kept = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        assert!(kept + 2 >= old.len(), "{kept} of {} chunks kept", old.len());
    }

    #[test]
    fn any_sizes_are_brought_within_the_chunkers_bounds() {
        let payload = text(100_000, 9);
        for (min, avg, max) in [
            (0, 0, 0),
            (u32::MAX, u32::MAX, u32::MAX),
            (1 << 20, 16, 4096),
            (5000, 100, 1),
        ] {
            let config = ChunkingConfig {
                threshold_bytes: 0,
                chunk_bytes_min: min,
                chunk_bytes_avg: avg,
                chunk_bytes_max: max,
            };
            let (min, avg, max) = config.sizes();
            assert!(min <= avg && avg <= max && max <= CHUNK_BYTES_MAX);
            let cut = config.cut(&payload);
            assert_eq!(
                cut.iter().map(|range| range.len()).sum::<usize>(),
                payload.len()
            );
            assert!(
                cut.iter()
                    .all(|range| !range.is_empty() && range.len() <= max as usize)
            );
            assert!(config.validate().is_err());
        }
    }
}
