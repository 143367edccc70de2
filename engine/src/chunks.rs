//! Chunked blobs (issue 16, decision 0013): a payload above `Chunking::threshold_bytes` is cut
//! with FastCDC into chunks, each an ordinary blob of the CAS (BLAKE3 of its bytes, stored
//! once, compressed on its own, owned by the shard of its hash), and stored as a manifest
//! record (`format::manifest`) under the payload's own BlobHash. A state that grew by a message
//! shares all but its last chunks with the previous one, so it costs O(Δ) on disk.
//!
//! ```text
//!  caller (network core)                       chunk shards          manifest's shard → sequencer
//!  cut, BLAKE3 each chunk, pick a base
//!  pin chunks + base (gc.rs `ChunkPins`)
//!  puts of the chunks not stored ───────────► durable, indexed
//!  manifest record (after every chunk) ──────────────────────────────► durable, indexed → turn
//!  unpin
//! ```
//!
//! Durability order: a manifest is written only after each chunk it names is durable and
//! indexed, a turn only after its manifest (the pipeline's PutThenAppend). Reads rebuild the
//! payload from its chunks and check it against its BlobHash. This module is the callers'
//! side: it never writes a file itself (shards do).

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::blob::codec;
use crate::blob::view::ShardView;
use crate::config::Chunking;
use crate::engine::Engine;
use crate::error::{Corruption, EngineError};
use crate::format::blob_index::BlobLocation;
use crate::format::manifest::{
    CHUNK_BYTES_MAX, CHUNKS_PER_MANIFEST_MAX, ChunkRef, MANIFEST_DEPTH_MAX, Manifest, ManifestBase,
};
use crate::format::pack::{Compression, EncodedBlob};
use crate::gc::ChunkPin;
use crate::ids::{BlobHash, BlobHashBuildHasher};
use crate::pipeline::{PutOutcome, ShardRequest};
use crate::store_dir::pack_path;

/// A delta manifest names at most this many chunks of its own (past its base's kept prefix);
/// beyond, or past `MANIFEST_DEPTH_MAX` deltas, a full manifest is written. Chosen by the
/// sweep in decision 0013.
pub const DELTA_CHUNKS_MAX: usize = 8;

/// Bases remembered (first chunk → the newest manifest starting with it); forgotten all at
/// once when full, since a hint is only an optimisation.
const BASE_HINTS_MAX: usize = 65_536;

/// Chunks are compressed at zstd 3 at least (the store's level if higher): only new chunks
/// are compressed, one or two per step of a growing state, so the better ratio (3% less disk
/// than level 1 on the sweep of decision 0013) costs little CPU per append.
const CHUNK_ZSTD_LEVEL_MIN: i32 = 3;

/// What chunked writes did since open (`Engine::stats`). Written by callers with relaxed adds.
#[derive(Debug, Default)]
pub(crate) struct ChunkCounters {
    pub chunks_written: AtomicU64,
    pub chunk_dedup_hits: AtomicU64,
    /// Raw bytes of chunks a chunked write found stored already (what chunking saved).
    pub chunk_bytes_deduped: AtomicU64,
}

/// The newest manifest written per first chunk: where a growing state finds its base.
#[derive(Debug, Default)]
pub(crate) struct BaseHints {
    hints: papaya::HashMap<BlobHash, BlobHash, BlobHashBuildHasher>,
}

/// One chunk of a payload being stored, with its bytes when the caller has them.
#[derive(Clone, Debug)]
pub(crate) struct ChunkToStore {
    pub chunk: ChunkRef,
    pub bytes: Option<Bytes>,
}

fn shard_of<'a>(shards: &'a [ShardView], hash: &BlobHash) -> &'a ShardView {
    &shards[usize::from(hash.shard(shards.len() as u16))]
}

/// The chunk boundaries of `payload` (FastCDC 2020 with the configured sizes).
pub fn cut(payload: &[u8], chunking: &Chunking) -> Vec<Range<usize>> {
    fastcdc::v2020::FastCDC::new(
        payload,
        chunking.chunk_bytes_min,
        chunking.chunk_bytes_avg,
        chunking.chunk_bytes_max,
    )
    .map(|chunk| chunk.offset..chunk.offset + chunk.length)
    .collect()
}

/// `payload` cut and each chunk hashed; the chunks share the payload's buffer.
pub(crate) fn cut_payload(payload: &Bytes, chunking: &Chunking) -> Vec<ChunkToStore> {
    cut(payload, chunking)
        .into_iter()
        .map(|range| {
            let bytes = payload.slice(range);
            ChunkToStore {
                chunk: ChunkRef {
                    hash: BlobHash::of(&bytes),
                    len: bytes.len() as u32,
                },
                bytes: Some(bytes),
            }
        })
        .collect()
}

fn corrupt(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
    reason: String,
) -> EngineError {
    let shard = shard_of(shards, hash);
    EngineError::Corrupt(Corruption::new(
        pack_path(&shard.dir, location.pack_id),
        location.pack_offset,
        format!("manifest of blob {hash}: {reason}"),
    ))
}

/// A manifest record's body, decoded and checked against its index entry.
pub(crate) fn read_manifest(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
) -> Result<Manifest, EngineError> {
    assert_eq!(location.compression, Compression::Manifest);
    let stored = shard_of(shards, hash).read_stored_at(hash, location)?;
    let manifest = Manifest::decode(&stored.bytes)
        .map_err(|error| corrupt(shards, hash, location, error.to_string()))?;
    if manifest.payload_len != u64::from(location.raw_len) {
        let reason = format!(
            "names {} payload bytes, the record {}",
            manifest.payload_len, location.raw_len
        );
        return Err(corrupt(shards, hash, location, reason));
    }
    Ok(manifest)
}

/// Every chunk of a chunked blob in order (its base's kept chunks first, down the chain of
/// deltas to a full manifest), with its depth; lengths and depths checked.
pub(crate) fn chunk_list(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
) -> Result<(Vec<ChunkRef>, u32), EngineError> {
    let manifest = read_manifest(shards, hash, location)?;
    let mut chunks = Vec::new();
    if let Some(base) = manifest.base {
        let Some(base_location) = shard_of(shards, &base.hash).location(&base.hash) else {
            let reason = format!("its base {} is not stored", base.hash);
            return Err(corrupt(shards, hash, location, reason));
        };
        if base_location.compression != Compression::Manifest {
            let reason = format!("its base {} is not a manifest", base.hash);
            return Err(corrupt(shards, hash, location, reason));
        }
        // Depths go down by one at each base, so this recursion ends within
        // MANIFEST_DEPTH_MAX steps even on a damaged store.
        let (base_chunks, base_depth) = chunk_list(shards, &base.hash, base_location)?;
        if base_depth + 1 != base.depth || base.kept as usize > base_chunks.len() {
            let reason = format!(
                "its base {} cannot be one (depth {base_depth} under depth {}, {} chunks for \
                 {} kept)",
                base.hash,
                base.depth,
                base_chunks.len(),
                base.kept
            );
            return Err(corrupt(shards, hash, location, reason));
        }
        chunks.extend_from_slice(&base_chunks[..base.kept as usize]);
    }
    chunks.extend_from_slice(&manifest.chunks);
    let total: u64 = chunks.iter().map(|chunk| u64::from(chunk.len)).sum();
    if total != manifest.payload_len || chunks.len() > CHUNKS_PER_MANIFEST_MAX as usize {
        let reason = format!(
            "{} chunks of {total} bytes for a payload of {}",
            chunks.len(),
            manifest.payload_len
        );
        return Err(corrupt(shards, hash, location, reason));
    }
    Ok((chunks, manifest.depth()))
}

/// The payload of a blob at `location`: read and verified as one record, or rebuilt from its
/// chunks and checked against its BlobHash (a missing or wrong chunk is damage: a manifest is
/// durable only after its chunks, and garbage collection keeps what manifests name).
pub(crate) fn read_payload(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
) -> Result<Bytes, EngineError> {
    if location.compression != Compression::Manifest {
        return shard_of(shards, hash).read_payload_at(hash, location);
    }
    let (chunks, _) = chunk_list(shards, hash, location)?;
    let mut payload = Vec::with_capacity(location.raw_len as usize);
    for chunk in &chunks {
        let shard = shard_of(shards, &chunk.hash);
        let found = shard.location(&chunk.hash).filter(|found| {
            found.compression != Compression::Manifest && found.raw_len == chunk.len
        });
        let Some(chunk_location) = found else {
            let reason = format!("chunk {} ({} bytes) is not stored", chunk.hash, chunk.len);
            return Err(corrupt(shards, hash, location, reason));
        };
        payload.extend_from_slice(&shard.read_payload_at(&chunk.hash, chunk_location)?);
    }
    let actual = BlobHash::of(&payload);
    if actual != *hash {
        let reason = format!("its chunks rebuild a payload hashing to {actual}");
        return Err(corrupt(shards, hash, location, reason));
    }
    Ok(Bytes::from(payload))
}

/// The manifests a shard's index holds now (a copy: the caller reads records after).
pub(crate) fn indexed_manifests(shard: &ShardView) -> Vec<(BlobHash, BlobLocation)> {
    shard
        .index
        .pin()
        .iter()
        .filter(|(_, location)| location.compression == Compression::Manifest)
        .map(|(hash, location)| (*hash, *location))
        .collect()
}

/// A chunked blob that cannot be read whole: what is wrong with it.
#[derive(Clone, Debug)]
pub(crate) struct Incomplete {
    pub hash: BlobHash,
    pub reason: String,
}

/// At open (and in `verify`): takes out of the index every manifest that names a chunk or
/// base not stored, and returns them. Not damage by itself: an online backup takes each
/// shard's cut in turn, so it may copy a manifest whose chunk another shard wrote after its
/// own cut (a manifest is written only after its chunks, so never in the store itself). Out
/// of the index, such a manifest is not used for dedup, and a turn naming it is a missing
/// blob for replay — damage exactly when a live turn needs it. Reads each manifest (one
/// record), not the chunks' bodies: `verify` rebuilds every payload.
pub(crate) fn drop_incomplete_manifests(shards: &[ShardView]) -> Vec<Incomplete> {
    let mut incomplete = Vec::new();
    for shard in shards {
        for (hash, location) in indexed_manifests(shard) {
            let missing = match chunk_list(shards, &hash, location) {
                Err(error) => Some(error.to_string()),
                Ok((chunks, _)) => chunks
                    .iter()
                    .find(|chunk| {
                        shard_of(shards, &chunk.hash)
                            .location(&chunk.hash)
                            .is_none_or(|found| {
                                found.raw_len != chunk.len
                                    || found.compression == Compression::Manifest
                            })
                    })
                    .map(|chunk| {
                        format!("chunk {} ({} bytes) is not stored", chunk.hash, chunk.len)
                    }),
            };
            if let Some(reason) = missing {
                shard.remove(&hash);
                incomplete.push(Incomplete { hash, reason });
            }
        }
    }
    incomplete
}

/// Every indexed manifest and the blobs it names (its base and its own chunks), for garbage
/// collection.
pub(crate) fn manifest_references(
    shards: &[ShardView],
) -> Result<HashMap<BlobHash, Box<[BlobHash]>, BlobHashBuildHasher>, EngineError> {
    let mut named = HashMap::default();
    for shard in shards {
        for (hash, location) in indexed_manifests(shard) {
            match read_manifest(shards, &hash, location) {
                Ok(manifest) => {
                    named.insert(hash, manifest.references().collect());
                }
                // Swept by a round or rewritten since the look at the index: it names nothing.
                Err(_) if shard.location(&hash) != Some(location) => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(named)
}

impl Engine {
    /// Whether a payload of `len` bytes is stored as chunks.
    pub(crate) fn is_chunked_len(&self, len: usize) -> bool {
        self.inner.config.chunking.applies_to(len)
    }

    /// Stores the chunks of a payload that are not stored yet (durably, in their shards) and
    /// returns the payload's manifest record, ready for its shard, with the pin that keeps
    /// what it names through a garbage collection until the record is indexed: drop the pin
    /// only after that. A chunk without bytes must be stored already (`MissingChunks`).
    pub(crate) async fn prepare_manifest(
        &self,
        hash: BlobHash,
        chunks: Vec<ChunkToStore>,
    ) -> Result<(EncodedBlob, ChunkPin<'_>), EngineError> {
        assert!(!chunks.is_empty() && chunks.len() <= CHUNKS_PER_MANIFEST_MAX as usize);
        let published = &self.inner.published;
        let payload_len: u64 = chunks.iter().map(|c| u64::from(c.chunk.len)).sum();
        let base = self.choose_base(hash, &chunks);
        let named: Arc<[BlobHash]> = base
            .map(|base| base.hash)
            .into_iter()
            .chain(chunks.iter().map(|c| c.chunk.hash))
            .collect();
        let (pin, swept) = self.inner.collector.pins.pin(named);
        let base = base.filter(|base| !swept.contains(&base.hash));

        let mut missing = Vec::new();
        let mut answers = Vec::new();
        let mut seen: HashSet<BlobHash, BlobHashBuildHasher> = HashSet::default();
        for (index, to_store) in chunks.iter().enumerate() {
            let chunk = to_store.chunk;
            if !seen.insert(chunk.hash) {
                continue;
            }
            let shard = usize::from(chunk.hash.shard(published.shards.len() as u16));
            let stored = !swept.contains(&chunk.hash)
                && published.shards[shard]
                    .location(&chunk.hash)
                    .is_some_and(|l| l.compression != Compression::Manifest);
            let counters = &self.inner.chunk_counters;
            match (&to_store.bytes, stored) {
                (_, true) => {
                    counters.chunk_dedup_hits.fetch_add(1, Ordering::Relaxed);
                    counters
                        .chunk_bytes_deduped
                        .fetch_add(u64::from(chunk.len), Ordering::Relaxed);
                }
                (None, false) => missing.push(index as u32),
                (Some(bytes), false) => {
                    let blob = codec::encode(
                        chunk.hash,
                        bytes,
                        self.inner.config.zstd_level.max(CHUNK_ZSTD_LEVEL_MIN),
                    );
                    let (reply, answer) = oneshot::channel();
                    self.inner.shards[shard]
                        .send_async(ShardRequest::Put { blob, reply })
                        .await
                        .map_err(|_| EngineError::ShutDown)?;
                    answers.push((chunk, answer));
                }
            }
        }
        if !missing.is_empty() {
            return Err(EngineError::MissingChunks { missing });
        }
        for (chunk, answer) in answers {
            let outcome = answer.await.map_err(|_| EngineError::ShutDown)??;
            let counters = &self.inner.chunk_counters;
            if outcome == PutOutcome::AlreadyStored {
                counters.chunk_dedup_hits.fetch_add(1, Ordering::Relaxed);
                counters
                    .chunk_bytes_deduped
                    .fetch_add(u64::from(chunk.len), Ordering::Relaxed);
            } else {
                counters.chunks_written.fetch_add(1, Ordering::Relaxed);
            }
        }

        let manifest = match base {
            Some(base) => Manifest {
                payload_len,
                base: Some(base),
                chunks: chunks[base.kept as usize..]
                    .iter()
                    .map(|c| c.chunk)
                    .collect(),
            },
            None => Manifest {
                payload_len,
                base: None,
                chunks: chunks.iter().map(|c| c.chunk).collect(),
            },
        };
        {
            let hints = self.inner.base_hints.hints.pin();
            if hints.len() >= BASE_HINTS_MAX {
                hints.clear();
            }
            hints.insert(chunks[0].chunk.hash, hash);
        }
        let raw_len = u32::try_from(payload_len).map_err(|_| EngineError::TooLarge {
            len: payload_len,
            max: u64::from(self.inner.config.limits.blob_bytes_max),
        })?;
        let record = EncodedBlob::new(hash, raw_len, Compression::Manifest, &manifest.encode());
        Ok((record, pin))
    }

    /// The base a new manifest can be a delta of: the newest manifest written that starts
    /// with the same chunk (full or a delta itself, under the depth limit), if the two share
    /// a prefix and few chunks follow it.
    fn choose_base(&self, hash: BlobHash, chunks: &[ChunkToStore]) -> Option<ManifestBase> {
        let shards = &self.inner.published.shards;
        let first = chunks.first()?.chunk.hash;
        let candidate = *self.inner.base_hints.hints.pin().get(&first)?;
        if candidate == hash {
            return None;
        }
        let location = shard_of(shards, &candidate).location(&candidate)?;
        if location.compression != Compression::Manifest {
            return None;
        }
        let (base_chunks, base_depth) = chunk_list(shards, &candidate, location).ok()?;
        if base_depth >= MANIFEST_DEPTH_MAX {
            return None;
        }
        let kept = base_chunks
            .iter()
            .zip(chunks)
            .take_while(|(base, new)| **base == new.chunk)
            .count();
        let own = chunks.len() - kept;
        (kept >= 1 && (1..=DELTA_CHUNKS_MAX).contains(&own)).then_some(ManifestBase {
            hash: candidate,
            kept: kept as u32,
            depth: base_depth + 1,
        })
    }

    /// Stores a payload given as its chunks, in order (the wire's O(Δ) path, issue 16 item 3).
    /// `sent` carries the bytes of the chunks the caller sends (by index into `chunks`, each
    /// checked against its hash); every other chunk must be stored already. The payload is
    /// rebuilt from the chunks and must hash to `hash`, so a manifest cannot lie about its
    /// BlobHash. Returns whether the blob was stored already.
    ///
    /// With a `base` (a stored chunked blob and a count), the payload's first chunks are the
    /// base's first `kept` ones and `chunks` (and the indexes of `sent`) follow them: a
    /// growing state names the previous one and sends only what comes after the shared
    /// prefix (O(Δ) on the wire). A base not stored is `BlobNotFound` (send it all again).
    pub async fn put_chunked(
        &self,
        hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<bool, EngineError> {
        self.check_open()?;
        let published = &self.inner.published;
        published.status.check_writable()?;
        let kept: Vec<ChunkRef> = match base {
            None => Vec::new(),
            Some((base, kept)) => {
                let Some(location) = shard_of(&published.shards, &base).location(&base) else {
                    return Err(EngineError::BlobNotFound(base));
                };
                if location.compression != Compression::Manifest {
                    return Err(EngineError::InvalidArgument(format!(
                        "base {base} is not stored as chunks; send every chunk"
                    )));
                }
                let (base_chunks, _) = chunk_list(&published.shards, &base, location)?;
                if kept == 0 || kept as usize > base_chunks.len() {
                    return Err(EngineError::InvalidArgument(format!(
                        "base {base} has {} chunks, {kept} asked to be kept",
                        base_chunks.len()
                    )));
                }
                base_chunks[..kept as usize].to_vec()
            }
        };
        let offset = kept.len() as u32;
        let sent: Vec<(u32, Bytes)> = sent
            .into_iter()
            .map(|(index, bytes)| (index.saturating_add(offset), bytes))
            .collect();
        let chunks: Vec<ChunkRef> = kept.into_iter().chain(chunks).collect();
        if chunks.is_empty() {
            return Err(EngineError::InvalidArgument(
                "a chunked payload names at least one chunk".into(),
            ));
        }
        if chunks.len() > CHUNKS_PER_MANIFEST_MAX as usize {
            return Err(EngineError::Limit {
                what: "chunks of one payload",
                limit: CHUNKS_PER_MANIFEST_MAX as usize,
            });
        }
        let total: u64 = chunks.iter().map(|chunk| u64::from(chunk.len)).sum();
        self.check_blob_len(usize::try_from(total).unwrap_or(usize::MAX))?;
        if let Some(bad) = chunks
            .iter()
            .position(|c| c.len == 0 || c.len > CHUNK_BYTES_MAX)
        {
            return Err(EngineError::InvalidArgument(format!(
                "chunk {bad} is {} bytes; a chunk has 1..={CHUNK_BYTES_MAX}",
                chunks[bad].len
            )));
        }
        let mut to_store: Vec<ChunkToStore> = chunks
            .iter()
            .map(|&chunk| ChunkToStore { chunk, bytes: None })
            .collect();
        for (index, bytes) in sent {
            let Some(slot) = to_store.get_mut(index as usize) else {
                return Err(EngineError::InvalidArgument(format!(
                    "sent chunk index {index} is past the {} chunks",
                    chunks.len()
                )));
            };
            if bytes.len() != slot.chunk.len as usize {
                return Err(EngineError::InvalidArgument(format!(
                    "sent chunk {index} has {} bytes, its entry says {}",
                    bytes.len(),
                    slot.chunk.len
                )));
            }
            let actual = BlobHash::of(&bytes);
            if actual != slot.chunk.hash {
                return Err(EngineError::HashMismatch {
                    what: format!("sent chunk {index}"),
                    claimed: slot.chunk.hash,
                    actual,
                });
            }
            slot.bytes = Some(bytes);
        }
        // Rebuild the payload: sent chunks as they are, the others read back (verified).
        let mut payload = blake3::Hasher::new();
        let mut missing = Vec::new();
        for (index, slot) in to_store.iter().enumerate() {
            if let Some(bytes) = &slot.bytes {
                payload.update(bytes);
                continue;
            }
            let shard = published.shard_of(&slot.chunk.hash);
            match shard.location(&slot.chunk.hash) {
                Some(location) if location.compression == Compression::Manifest => {
                    return Err(EngineError::InvalidArgument(format!(
                        "chunk {index} names a chunked blob; chunks are plain blobs"
                    )));
                }
                Some(location) if location.raw_len == slot.chunk.len => {
                    payload.update(&shard.read_payload_at(&slot.chunk.hash, location)?);
                }
                Some(location) => {
                    return Err(EngineError::InvalidArgument(format!(
                        "chunk {index} is {} bytes, its entry says {}",
                        location.raw_len, slot.chunk.len
                    )));
                }
                None => missing.push(index as u32),
            }
        }
        if !missing.is_empty() {
            return Err(EngineError::MissingChunks { missing });
        }
        let actual = BlobHash(*payload.finalize().as_bytes());
        if actual != hash {
            return Err(EngineError::HashMismatch {
                what: "the payload rebuilt from the chunks".into(),
                claimed: hash,
                actual,
            });
        }
        if published.shard_of(&hash).contains(&hash) {
            return Ok(true);
        }
        // One chunk that is the whole payload: a plain blob, no manifest (its only chunk would
        // be the blob itself).
        if let [only] = to_store.as_slice()
            && only.chunk.hash == hash
            && let Some(bytes) = &only.bytes
        {
            let stored = self.store_blobs(vec![(hash, bytes.clone())]).await?;
            return Ok(stored.first().copied().unwrap_or(true));
        }
        let outcome = self.store_manifest(hash, to_store).await?;
        Ok(outcome == PutOutcome::AlreadyStored)
    }

    /// A chunked blob stored without a turn: its missing chunks, then its manifest record,
    /// each durable; the pin is held until the record is indexed.
    pub(crate) async fn store_manifest(
        &self,
        hash: BlobHash,
        chunks: Vec<ChunkToStore>,
    ) -> Result<PutOutcome, EngineError> {
        let (blob, pin) = self.prepare_manifest(hash, chunks).await?;
        let shard = usize::from(hash.shard(self.inner.published.shards.len() as u16));
        let (reply, answer) = oneshot::channel();
        self.inner.shards[shard]
            .send_async(ShardRequest::Put { blob, reply })
            .await
            .map_err(|_| EngineError::ShutDown)?;
        let outcome = answer.await.map_err(|_| EngineError::ShutDown)??;
        drop(pin);
        Ok(outcome)
    }
}
