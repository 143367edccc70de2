//! The blobs family's calls: GET_BLOB and HAS_BLOBS (version 1), PUT_CHUNKED (version 2,
//! issue 16) by hand (`put_chunked`, `put_chunked_after`) and the automatic path of appends by
//! value (`store_chunked`): a payload over `ChunkingConfig::threshold_bytes` → its base (the
//! payload this client stored last that starts with the same chunk, `recent_chunked`, and
//! their shared prefix) → HAS_BLOBS of its hash and of the chunks after that prefix, in parts
//! of `has_blobs_max` → PUT_CHUNKED naming the base and sending only the missing chunks' bytes,
//! once more with all and no base after NOT_FOUND. Whole payloads instead on version 1, with
//! chunking off, after an UNKNOWN_MESSAGE (remembered per connection), or past the chunk or
//! frame limits.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::blobs;
use ctxstore_protocol::{
    CHUNK_ENTRY_BYTES, CHUNKS_PER_PAYLOAD_MAX, ChunkBaseWire, ChunkWire, ErrorCode,
    LIST_ITEMS_LIMIT, MessageType, SentChunkWire, read_flags,
};

use crate::chunking::ChunkingConfig;
use crate::client::{Client, check_pair};
use crate::error::ClientError;
use crate::types::{BlobHash, ChunkRef, ChunkedStored, verify_payload};

/// Chunk lists a client remembers to name as bases (`recent_chunked`): one per growing thread
/// it writes; each about 36 bytes per chunk of the state.
const RECENT_CHUNKED_MAX: usize = 256;

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Stores a payload given as its chunks, in order (PUT_CHUNKED, protocol version 2):
    /// `sent` carries `(index into chunks, bytes)` for the chunks the server does not have
    /// (strictly increasing indexes; any subset; each checked against its hash there); the
    /// server must have every other one already. The chunks rebuild the payload, which must
    /// hash to `hash`. Append it then with `append_by_hash`. Errors: `ErrorCode::NotFound`
    /// when a chunk not sent is not stored (nothing is written; the message names the
    /// missing indexes), `ErrorCode::HashMismatch` when a sent chunk or the rebuilt payload
    /// does not hash to what it claims, `ErrorCode::TooLarge` above the server's blob limit,
    /// `ClientError::InvalidArgument` for what the protocol cannot carry (no chunks, more
    /// than 65,536, a chunk of 0 B or over 1 MiB, bytes of another length than their chunk).
    /// `ClientConfig::chunking` does all this by itself for appends by value.
    pub async fn put_chunked(
        &self,
        hash: BlobHash,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<ChunkedStored, ClientError> {
        let payload_len: u64 = chunks.iter().map(|chunk| u64::from(chunk.len)).sum();
        self.put_chunked_after(hash, None, chunks, sent)
            .await
            .and_then(|stored| {
                if stored.payload_len == payload_len {
                    Ok(stored)
                } else {
                    Err(ClientError::Protocol(format!(
                        "CHUNKED_STORED says {} bytes for {payload_len} bytes of chunks",
                        stored.payload_len
                    )))
                }
            })
    }

    /// `put_chunked` with a base: the payload's first `kept` chunks are the first `kept`
    /// chunks of the chunked blob `base` the server stores, `chunks` (and the indexes of
    /// `sent`) follow them — a grown state names the previous one and sends only what comes
    /// after the shared prefix. A base the server no longer has is `ErrorCode::NotFound`.
    pub async fn put_chunked_after(
        &self,
        hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<ChunkedStored, ClientError> {
        let request = blobs::PutChunked {
            payload_hash: hash,
            base: base.map(|(hash, kept)| ChunkBaseWire { hash, kept }),
            chunks: chunks
                .into_iter()
                .map(|chunk| ChunkWire {
                    hash: chunk.hash,
                    len: chunk.len,
                })
                .collect(),
            sent: sent
                .into_iter()
                .map(|(index, bytes)| SentChunkWire { index, bytes })
                .collect(),
        };
        let blobs::ChunkedStored {
            payload_hash,
            payload_len,
            already_stored,
        } = self.ask(request).await?;
        check_pair(MessageType::PutChunked, payload_hash.0 == hash.0)?;
        Ok(ChunkedStored {
            payload_hash: hash,
            payload_len,
            already_stored,
        })
    }

    /// The automatic path of an append by value (issue 16): cuts `payload` into chunks as
    /// `ClientConfig::chunking` says, asks HAS_BLOBS for the whole payload's hash and every
    /// distinct chunk hash (in requests of at most the server's `has_blobs_max`; the first
    /// one holds the whole payload's hash: if it is stored, nothing else is sent), then sends
    /// PUT_CHUNKED with the bytes of the chunks the server lacks (at every index where such a
    /// chunk occurs: the server takes a chunk it is not sent only if it has it stored). A
    /// PUT_CHUNKED answered NOT_FOUND (a chunk collected between HAS_BLOBS and the put) is
    /// sent once more with every chunk.
    ///
    /// The chunks are sent even when the server has none of them (rather than the payload
    /// whole): a unique payload cannot be told from one the server cut otherwise (other
    /// `--chunk-*` sizes than this client's), and the chunks stored now are what the next,
    /// grown state finds. A unique large payload (an image) thus costs
    /// about 4 % more bytes and two round trips more than a whole append; raise the threshold
    /// or turn chunking off for such traffic.
    ///
    /// `None` when the payload travels whole instead: a version-1 connection, chunking off, a
    /// payload at or below the threshold, a server that does not know PUT_CHUNKED (it
    /// answered UNKNOWN_MESSAGE once; remembered), more chunks than one PUT_CHUNKED names,
    /// or a PUT_CHUNKED over the server's frame limit.
    pub(crate) async fn store_chunked(
        &self,
        payload: &Bytes,
    ) -> Result<Option<ChunkedStored>, ClientError> {
        let Some(config) = self.chunking_for(payload.len()) else {
            return Ok(None);
        };
        let pieces = crate::chunking::split_into_chunks(&config, payload);
        if pieces.is_empty() || pieces.len() > CHUNKS_PER_PAYLOAD_MAX as usize {
            return Ok(None);
        }
        let payload_hash = BlobHash::of(payload);
        // The previous state of the same thread, if this client stored it: its chunks up to
        // where the two differ are named, not listed (at least one chunk stays listed).
        let base = self.recent_base(&pieces);
        let kept = base.map_or(0, |(_, kept)| kept as usize);
        let mut asked = vec![payload_hash];
        let mut distinct = HashSet::with_capacity(pieces.len());
        for (chunk, _) in &pieces[kept..] {
            if distinct.insert(chunk.hash) {
                asked.push(chunk.hash);
            }
        }
        let per_request = self
            .server_limits()
            .has_blobs_max
            .clamp(1, LIST_ITEMS_LIMIT) as usize;
        let mut present = HashSet::with_capacity(asked.len());
        for (part, hashes) in asked.chunks(per_request).enumerate() {
            let answer = self.has_blobs(hashes).await?;
            if part == 0 && answer.first() == Some(&true) {
                return Ok(Some(ChunkedStored {
                    payload_hash,
                    payload_len: payload.len() as u64,
                    already_stored: true,
                }));
            }
            for (hash, stored) in hashes.iter().zip(answer) {
                if stored {
                    present.insert(*hash);
                }
            }
        }
        let first = self
            .put_missing(payload_hash, base, &pieces[kept..], &present)
            .await;
        let outcome = match first {
            // A chunk or the base collected between HAS_BLOBS and the put: all of it again.
            Err(ClientError::Server {
                code: ErrorCode::NotFound,
                ..
            }) => {
                let every = self
                    .put_missing(payload_hash, None, &pieces, &HashSet::new())
                    .await;
                self.put_outcome(every)
            }
            other => self.put_outcome(other),
        };
        if let Ok(Some(_)) = &outcome {
            self.remember_chunked(payload_hash, &pieces);
        }
        outcome
    }

    /// A recently stored payload that starts like `pieces` and how many chunks they share
    /// (fewer than `pieces` has: a PUT_CHUNKED lists one chunk at least).
    fn recent_base(&self, pieces: &[(ChunkRef, Bytes)]) -> Option<(BlobHash, u32)> {
        let first = pieces.first()?.0.hash;
        let recent = self
            .shared
            .recent_chunked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (base, chunks) = recent.get(&first)?;
        let shared = chunks
            .iter()
            .zip(pieces)
            .take_while(|(old, (new, _))| *old == new)
            .count()
            .min(pieces.len() - 1);
        (shared > 0).then_some((*base, shared as u32))
    }

    fn remember_chunked(&self, payload_hash: BlobHash, pieces: &[(ChunkRef, Bytes)]) {
        let Some((first, _)) = pieces.first() else {
            return;
        };
        let mut recent = self
            .shared
            .recent_chunked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if recent.len() >= RECENT_CHUNKED_MAX {
            recent.clear();
        }
        let chunks: Arc<[ChunkRef]> = pieces.iter().map(|(chunk, _)| *chunk).collect();
        recent.insert(first.hash, (payload_hash, chunks));
    }

    /// The chunking a payload of `len` bytes gets: `None` on a version-1 connection, with
    /// chunking off, at or below the threshold, or once the server proved not to know
    /// PUT_CHUNKED.
    pub(crate) fn chunking_for(&self, len: usize) -> Option<ChunkingConfig> {
        let config = self.shared.config.chunking?;
        let chunked = self.protocol_version() >= 2
            && config.applies_to(len)
            && !self.shared.no_put_chunked.load(Ordering::Relaxed);
        chunked.then_some(config)
    }

    /// One PUT_CHUNKED listing `pieces` (after `base`'s kept chunks) and sending those not in
    /// `present`; `None` when that frame would be over the server's frame limit (the payload
    /// then goes whole).
    async fn put_missing(
        &self,
        payload_hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        pieces: &[(ChunkRef, Bytes)],
        present: &HashSet<BlobHash>,
    ) -> Result<Option<ChunkedStored>, ClientError> {
        let sent: Vec<(u32, Bytes)> = pieces
            .iter()
            .enumerate()
            .filter(|(_, (chunk, _))| !present.contains(&chunk.hash))
            .map(|(index, (_, bytes))| (index as u32, bytes.clone()))
            .collect();
        // hash, base hash and kept, chunk count, the chunks, sent count, then index, len and
        // bytes per sent chunk.
        let body_bytes = 32
            + 36
            + 4
            + pieces.len() * CHUNK_ENTRY_BYTES
            + 4
            + sent.iter().map(|(_, bytes)| 8 + bytes.len()).sum::<usize>();
        let frame_bytes_max = self.server_limits().frame_bytes_max as usize;
        if frame_bytes_max > 0 && body_bytes > frame_bytes_max {
            return Ok(None);
        }
        let chunks = pieces.iter().map(|(chunk, _)| *chunk).collect();
        self.put_chunked_after(payload_hash, base, chunks, sent)
            .await
            .map(Some)
    }

    /// A PUT_CHUNKED's answer as `store_chunked` returns it: UNKNOWN_MESSAGE means a server
    /// without the message, remembered, and the payload goes whole.
    fn put_outcome(
        &self,
        outcome: Result<Option<ChunkedStored>, ClientError>,
    ) -> Result<Option<ChunkedStored>, ClientError> {
        match outcome {
            Err(ClientError::Server {
                code: ErrorCode::UnknownMessage,
                ..
            }) => {
                self.shared.no_put_chunked.store(true, Ordering::Relaxed);
                Ok(None)
            }
            other => other,
        }
    }

    /// A payload by hash, verified.
    pub async fn blob(&self, hash: BlobHash) -> Result<Bytes, ClientError> {
        let read_flags = if self.shared.config.accept_zstd {
            read_flags::ACCEPT_ZSTD
        } else {
            0
        };
        let payload = self.ask(blobs::GetBlob { hash, read_flags }).await?;
        verify_payload(&hash, None, payload, self.verifies_raw_payloads())?
            .ok_or_else(|| ClientError::Protocol("GET_BLOB answered without bytes".into()))
    }

    /// Which of `hashes` are stored.
    pub async fn has_blobs(&self, hashes: &[BlobHash]) -> Result<Vec<bool>, ClientError> {
        let request = blobs::HasBlobs {
            hashes: hashes.to_vec(),
        };
        let blobs::BlobsHeld { present } = self.ask(request).await?;
        check_pair(MessageType::HasBlobs, present.len() == hashes.len())?;
        Ok(present)
    }
}
