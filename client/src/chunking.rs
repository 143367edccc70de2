//! Content-defined chunking of payloads, as the server's engine cuts them (FastCDC 2020, one
//! definition in `ctxstore-vocab`): a state that grows by a little each step keeps all but its
//! last chunk or two, so the client sends only the chunks the server lacks (PUT_CHUNKED) and
//! then appends by hash.

use bytes::Bytes;

use crate::types::{BlobHash, ChunkRef};

/// How appends by value cut large payloads into chunks (`ClientConfig::chunking`). Should match
/// the server's `--chunk-*` settings (the defaults do) for best dedup: chunks cut alike are
/// stored once, also against payloads other clients sent whole. Any values are correct: the
/// server stores whatever chunks it is given, and sizes outside what the chunker and the
/// protocol take are brought within them (`ChunkingConfig::sizes`).
pub use ctxstore_vocab::ChunkingConfig;

/// The payload's chunks in order, each with its BLAKE3 hash and its bytes (slices of
/// `payload`, no copy). Their bytes concatenate to `payload`; an empty payload has none.
pub fn split_into_chunks(config: &ChunkingConfig, payload: &Bytes) -> Vec<(ChunkRef, Bytes)> {
    config
        .cut(payload)
        .into_iter()
        .map(|range| {
            let bytes = payload.slice(range);
            let chunk = ChunkRef {
                hash: BlobHash::of(&bytes),
                // ≤ CHUNK_BYTES_MAX: fits.
                len: bytes.len() as u32,
            };
            (chunk, bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn chunks_carry_their_hashes_and_rebuild_the_payload() {
        let config = ChunkingConfig::DEFAULT;
        let payload = Bytes::from(
            (0..100_000u32)
                .map(|i| (i * 7 % 251) as u8)
                .collect::<Vec<u8>>(),
        );
        let chunks = split_into_chunks(&config, &payload);
        assert!(chunks.len() > 1);
        let rebuilt: Vec<u8> = chunks.iter().flat_map(|(_, b)| b.to_vec()).collect();
        assert_eq!(rebuilt, payload);
        for (chunk, bytes) in &chunks {
            assert_eq!(chunk.len as usize, bytes.len());
            assert_eq!(chunk.hash, BlobHash::of(bytes));
        }
        assert!(split_into_chunks(&config, &Bytes::new()).is_empty());
    }
}
