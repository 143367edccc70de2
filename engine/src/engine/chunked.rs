//! The caller's side of a chunked write (issue 16, decision 0013; the format and the reads
//! are `chunks.rs`): `Engine::plan_manifest` pins what the manifest will name
//! (`gc::ChunkPins`), picks a base (`BaseHints`), plans the chunks not stored yet and then the
//! manifest record into a write's `BlobPlan` (`engine/append.rs` stores it: chunks in the
//! manifest's shard in the same shard batch, before it; chunks elsewhere durable first);
//! `Engine::put_chunked` is the wire's O(Δ) path (a base's kept chunks first, the sent chunks
//! checked, the payload rebuilt and hashed). It never writes a file itself (shards do).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::blob::codec;
use crate::chunks::{chunk_list, shard_of};
use crate::config::ChunkingConfig;
use crate::engine::Engine;
use crate::engine::append::{BlobPlan, Planned};
use crate::error::EngineError;
use crate::format::manifest::{
    CHUNK_BYTES_MAX, CHUNKS_PER_MANIFEST_MAX, ChunkRef, MANIFEST_DEPTH_MAX, Manifest, ManifestBase,
};
use crate::format::pack::{Compression, EncodedBlob};
use crate::ids::{BlobHash, BlobHashBuildHasher};
use crate::pipeline::PutOutcome;
use crate::seal::Addressing;

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

/// `payload` cut and each chunk hashed and addressed (a chunk is a blob of the payload's
/// tenant); the chunks share the payload's buffer.
fn cut_payload(
    payload: &Bytes,
    chunking: &ChunkingConfig,
    addressing: &Addressing,
) -> Vec<ChunkToStore> {
    chunking
        .cut(payload)
        .into_iter()
        .map(|range| {
            let bytes = payload.slice(range);
            ChunkToStore {
                chunk: ChunkRef {
                    hash: addressing.address(BlobHash::of(&bytes)),
                    len: bytes.len() as u32,
                },
                bytes: Some(bytes),
            }
        })
        .collect()
}

impl Engine {
    /// Whether a payload of `len` bytes is stored as chunks.
    pub(crate) fn is_chunked_len(&self, len: usize) -> bool {
        self.inner.config.chunking.applies_to(len)
    }

    /// A payload over the chunk threshold, whose BLAKE3 is `hash`, into `plan`: its chunks cut,
    /// hashed and addressed, then `plan_manifest` at its address.
    pub(crate) fn plan_chunked<'e>(
        &'e self,
        plan: &mut BlobPlan<'e>,
        hash: BlobHash,
        payload: &Bytes,
    ) -> Result<Planned, EngineError> {
        let chunks = cut_payload(payload, &self.inner.config.chunking, &self.addressing);
        self.plan_manifest(plan, self.address(hash), chunks)
    }

    /// Plans the chunks of a payload that are not stored yet, then its manifest record at
    /// `hash` (the payload's address; the chunks' are addresses too), into
    /// `plan`, which holds the pin that keeps what the manifest names through a garbage
    /// collection until the plan is dropped (after the write is answered: the record is
    /// indexed by then). A chunk without bytes must be stored already (`MissingChunks`).
    pub(crate) fn plan_manifest<'e>(
        &'e self,
        plan: &mut BlobPlan<'e>,
        hash: BlobHash,
        chunks: Vec<ChunkToStore>,
    ) -> Result<Planned, EngineError> {
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
        let raw_len = u32::try_from(payload_len).map_err(|_| EngineError::TooLarge {
            len: payload_len,
            max: u64::from(self.inner.config.limits.blob_bytes_max),
        })?;

        let manifest_shard = hash.shard(published.shards.len() as u16);
        self.plan_chunks(plan, manifest_shard, &chunks, &swept)?;
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
        let tenant_id = self.scope.tenant_id();
        let body = manifest.encode();
        let record = EncodedBlob::new(tenant_id, hash, raw_len, Compression::Manifest, &body);
        plan.hold(pin);
        Ok(plan.add(record, false))
    }

    /// The chunks of a payload that are not stored yet into `plan` (each once; a chunk a sweep
    /// took, in `swept`, is stored again); those found stored count as chunk dedup hits. A
    /// chunk without bytes must be stored already: `MissingChunks` names those that are not.
    fn plan_chunks(
        &self,
        plan: &mut BlobPlan<'_>,
        manifest_shard: u16,
        chunks: &[ChunkToStore],
        swept: &[BlobHash],
    ) -> Result<(), EngineError> {
        let mut missing = Vec::new();
        let mut seen: HashSet<BlobHash, BlobHashBuildHasher> = HashSet::default();
        for (index, to_store) in chunks.iter().enumerate() {
            let chunk = to_store.chunk;
            if !seen.insert(chunk.hash) {
                continue;
            }
            let shard = self.inner.published.shard_of(&chunk.hash);
            let stored = !swept.contains(&chunk.hash)
                && shard
                    .location(&chunk.hash)
                    .is_some_and(|l| l.compression != Compression::Manifest);
            match (&to_store.bytes, stored) {
                (_, true) => {
                    let counters = &shard.counters;
                    counters.chunk_dedup_hits.fetch_add(1, Ordering::Relaxed);
                    counters
                        .chunk_bytes_deduped
                        .fetch_add(u64::from(chunk.len), Ordering::Relaxed);
                }
                (None, false) => missing.push(index as u32),
                (Some(bytes), false) => {
                    let blob = codec::encode_at(
                        self.scope.tenant_id(),
                        chunk.hash,
                        bytes,
                        self.inner.config.zstd_level.max(CHUNK_ZSTD_LEVEL_MIN),
                    );
                    plan.add_chunk(manifest_shard, self.sealed(blob)?);
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EngineError::MissingChunks { missing })
        }
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
        let stored = self.put_chunked_addressed(hash, base, chunks, sent).await;
        stored.map_err(|error| self.shown_error(error))
    }

    /// `put_chunked`, every hash the caller gave turned into its address first (the base's,
    /// the chunks'), so the chunks and the manifest are this handle's tenant's.
    async fn put_chunked_addressed(
        &self,
        hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<bool, EngineError> {
        self.check_open()?;
        let published = &self.inner.published;
        published.status.check_writable()?;
        let address = self.address(hash);
        let kept = match base {
            None => Vec::new(),
            Some((base, kept)) => self.kept_chunks(self.address(base), kept)?,
        };
        let offset = kept.len() as u32;
        let chunks: Vec<ChunkRef> = kept
            .into_iter()
            .chain(chunks.into_iter().map(|chunk| ChunkRef {
                hash: self.address(chunk.hash),
                len: chunk.len,
            }))
            .collect();
        self.check_chunk_list(&chunks)?;
        let sent = sent
            .into_iter()
            .map(|(index, bytes)| (index.saturating_add(offset), bytes));
        let to_store = with_sent_bytes(&chunks, sent, &self.addressing)?;
        let actual = self.rebuilt_hash(&to_store)?;
        if actual != hash {
            return Err(EngineError::HashMismatch {
                what: "the payload rebuilt from the chunks".into(),
                claimed: hash,
                actual,
            });
        }
        if published.shard_of(&address).contains(&address) {
            return Ok(true);
        }
        // One chunk that is the whole payload: a plain blob, no manifest (its only chunk would
        // be the blob itself).
        if let [only] = to_store.as_slice()
            && only.chunk.hash == address
            && let Some(bytes) = &only.bytes
        {
            let stored = self.store_blobs(vec![(hash, bytes.clone())]).await?;
            return Ok(stored.first().copied().unwrap_or(true));
        }
        let outcome = self.store_manifest(address, to_store).await?;
        Ok(outcome == PutOutcome::AlreadyStored)
    }

    /// The first `kept` chunks of the stored chunked blob at address `base`.
    fn kept_chunks(&self, base: BlobHash, kept: u32) -> Result<Vec<ChunkRef>, EngineError> {
        let shards = &self.inner.published.shards;
        let Some(location) = shard_of(shards, &base).location(&base) else {
            return Err(EngineError::BlobNotFound(base));
        };
        let named = self.hash_of(base);
        if location.compression != Compression::Manifest {
            return Err(EngineError::InvalidArgument(format!(
                "base {named} is not stored as chunks; send every chunk"
            )));
        }
        let (base_chunks, _) = chunk_list(shards, &base, location)?;
        if kept == 0 || kept as usize > base_chunks.len() {
            return Err(EngineError::InvalidArgument(format!(
                "base {named} has {} chunks, {kept} asked to be kept",
                base_chunks.len()
            )));
        }
        Ok(base_chunks[..kept as usize].to_vec())
    }

    /// A chunked payload's chunk list within the limits: 1..=65,536 chunks of 1 B..=1 MiB,
    /// the payload no larger than a blob may be.
    fn check_chunk_list(&self, chunks: &[ChunkRef]) -> Result<(), EngineError> {
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
        Ok(())
    }

    /// The BlobHash of the payload the chunks make: sent chunks as they are, the others read
    /// back (verified); `MissingChunks` names every chunk neither sent nor stored.
    fn rebuilt_hash(&self, to_store: &[ChunkToStore]) -> Result<BlobHash, EngineError> {
        let published = &self.inner.published;
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
        Ok(BlobHash(*payload.finalize().as_bytes()))
    }

    /// A chunked blob stored without a turn: its missing chunks and its manifest record, each
    /// durable (one fdatasync when they share a shard); the pin is held until the record is
    /// indexed.
    async fn store_manifest(
        &self,
        hash: BlobHash,
        chunks: Vec<ChunkToStore>,
    ) -> Result<PutOutcome, EngineError> {
        let mut plan = self.blob_plan();
        let planned = self.plan_manifest(&mut plan, hash, chunks)?;
        let outcomes = self.store_plan(&mut plan).await?;
        drop(plan);
        let outcome = outcomes[usize::from(planned.shard)].get(planned.index as usize);
        assert!(outcome.is_some(), "a put answers each of its blobs");
        Ok(outcome.copied().unwrap_or(PutOutcome::AlreadyStored))
    }
}

/// The chunks to store, each with the bytes the caller sent for it (by index, checked
/// against its entry's length and address).
fn with_sent_bytes(
    chunks: &[ChunkRef],
    sent: impl Iterator<Item = (u32, Bytes)>,
    addressing: &Addressing,
) -> Result<Vec<ChunkToStore>, EngineError> {
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
        if addressing.address(actual) != slot.chunk.hash {
            return Err(EngineError::HashMismatch {
                what: format!("sent chunk {index}"),
                claimed: addressing.hash_of(slot.chunk.hash),
                actual,
            });
        }
        slot.bytes = Some(bytes);
    }
    Ok(to_store)
}
