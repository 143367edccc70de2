//! Chunked blobs (issue 16, decision 0013): a payload above `ChunkingConfig::threshold_bytes` is cut
//! with FastCDC into chunks, each an ordinary blob of the CAS (BLAKE3 of its bytes, stored
//! once, compressed on its own, owned by the shard of its hash), and stored as a manifest
//! record (`format::manifest`) under the payload's own BlobHash. A state that grew by a message
//! shares all but its last chunks with the previous one, so it costs O(Δ) on disk.
//!
//! ```text
//!  caller (network core)                       other shards          manifest's shard → sequencer
//!  cut, BLAKE3 each chunk, pick a base
//!  pin chunks + base (`gc/pins.rs` `ChunkPins`)
//!  the chunks not stored, in other shards ──► durable, indexed
//!  the chunks not stored in the manifest's shard, then the manifest ──► one batch: durable,
//!                                                                         indexed → turn
//!  unpin
//! ```
//!
//! Durability order: a manifest is written only after each chunk it names in another shard is
//! durable and indexed; a chunk in its own shard is written before it in the same shard batch
//! (one fdatasync, indexed together; recovery keeps a record only when every record before it
//! in its pack is whole); a turn is published only after its manifest (the pipeline's
//! hand-on, decision 0014). Reads rebuild the payload from its chunks and check it against its
//! BlobHash. This module is what reads need (manifests, `read_payload`) and what garbage
//! collection and verify ask of manifests; the write side, `Engine::plan_manifest` and
//! `Engine::put_chunked`, is `engine/chunked.rs`, stored by `engine/append.rs`. Neither
//! writes a file itself (shards do).

use std::collections::HashMap;

use bytes::Bytes;

use crate::blob::view::ShardView;
use crate::error::{Corruption, EngineError};
use crate::format::blob_index::BlobLocation;
use crate::format::manifest::{CHUNKS_PER_MANIFEST_MAX, ChunkRef, Manifest};
use crate::format::pack::Compression;
use crate::ids::{BlobHash, BlobHashBuildHasher, TenantId};
use crate::store_dir::pack_path;

pub(crate) fn shard_of<'a>(shards: &'a [ShardView], hash: &BlobHash) -> &'a ShardView {
    &shards[usize::from(hash.shard(shards.len() as u16))]
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
    read_owned_manifest(shards, hash, location).map(|(manifest, _)| manifest)
}

/// `read_manifest`, with the tenant whose blob it is (its record's header).
fn read_owned_manifest(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
) -> Result<(Manifest, TenantId), EngineError> {
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
    Ok((manifest, stored.tenant_id))
}

/// Every chunk of a chunked blob in order (its base's kept chunks first, down the chain of
/// deltas to a full manifest), with its depth; lengths and depths checked.
pub(crate) fn chunk_list(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
) -> Result<(Vec<ChunkRef>, u32), EngineError> {
    owned_chunk_list(shards, hash, location).map(|(chunks, depth, _)| (chunks, depth))
}

/// `chunk_list`, with the tenant whose blob it is: a base is always its delta's tenant's (its
/// address is in the same tenant's address space).
fn owned_chunk_list(
    shards: &[ShardView],
    hash: &BlobHash,
    location: BlobLocation,
) -> Result<(Vec<ChunkRef>, u32, TenantId), EngineError> {
    let (manifest, tenant_id) = read_owned_manifest(shards, hash, location)?;
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
        let (base_chunks, base_depth, base_tenant) =
            owned_chunk_list(shards, &base.hash, base_location)?;
        if base_tenant != tenant_id {
            let reason = format!(
                "its base {} is tenant {}'s, it is tenant {}'s",
                base.hash, base_tenant.0, tenant_id.0
            );
            return Err(corrupt(shards, hash, location, reason));
        }
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
    Ok((chunks, manifest.depth(), tenant_id))
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
    let (chunks, _, tenant_id) = owned_chunk_list(shards, hash, location)?;
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
    // The address the rebuilt payload has in the manifest's tenant's space (the hash itself
    // for the operator's).
    let addressing = shard_of(shards, hash).keys.addressing(tenant_id);
    let actual = addressing.address(BlobHash::of(&payload));
    if actual != *hash {
        let reason = format!("its chunks rebuild a payload addressed {actual}");
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
/// base not stored, and every manifest built on one (to a fixpoint: a delta whose base goes is
/// incomplete too), and returns them. Not damage by itself, and no live turn can name one:
///
/// - an online backup takes each shard's cut in turn, so it may copy a manifest whose chunk
///   another shard wrote after its own cut;
/// - a collection interrupted by a crash: it sweeps a dead chain's manifests before their
///   chunks in memory, but compacts pack by pack (fewest live bytes first), so a pack that
///   held a dead chunk may be rewritten without it while the pack holding the dead manifests
///   naming it was not yet; the next open indexes those manifests again from their pack
///   (finding 4 of the power-loss campaign, docs/reliability.md#power-loss-findings). They
///   were condemned after the fence, so no live record names them.
///
/// Out of the index, such a manifest is not used for dedup (an append of the same payload
/// stores it again, whole) nor as a base, and a turn naming it is a missing blob for replay —
/// damage exactly when a live turn needs it. Reads each manifest (one record), not the
/// chunks' bodies: `verify` rebuilds every payload.
pub(crate) fn drop_incomplete_manifests(shards: &[ShardView]) -> Vec<Incomplete> {
    let mut incomplete = Vec::new();
    // A pass drops what lacks a part now; dropping a base makes its deltas lack one, so pass
    // again until a pass drops nothing (chains are at most MANIFEST_DEPTH_MAX deep, so at most
    // that many passes more).
    loop {
        let dropped_before = incomplete.len();
        for shard in shards {
            for (hash, location) in indexed_manifests(shard) {
                if let Some(reason) = missing_part(shards, &hash, location) {
                    shard.remove(&hash);
                    incomplete.push(Incomplete { hash, reason });
                }
            }
        }
        if incomplete.len() == dropped_before {
            return incomplete;
        }
    }
}

/// What a chunked blob lacks to be read whole (a base or a chunk not indexed), if anything.
fn missing_part(shards: &[ShardView], hash: &BlobHash, location: BlobLocation) -> Option<String> {
    match chunk_list(shards, hash, location) {
        Err(error) => Some(error.to_string()),
        Ok((chunks, _)) => chunks
            .iter()
            .find(|chunk| {
                shard_of(shards, &chunk.hash)
                    .location(&chunk.hash)
                    .is_none_or(|found| {
                        found.raw_len != chunk.len || found.compression == Compression::Manifest
                    })
            })
            .map(|chunk| format!("chunk {} ({} bytes) is not stored", chunk.hash, chunk.len)),
    }
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
