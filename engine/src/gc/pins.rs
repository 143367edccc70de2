//! Chunked writes in flight against a round (decision 0013): a write pins what its manifest
//! will name from before it looks at the index until the manifest is indexed; the round's
//! condemned map resurrects every pinned blob. Each side publishes, fences, then looks at the
//! other.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::blob::condemned::Condemned;
use crate::ids::BlobHash;

/// The blobs chunked writes in flight are about to name in a manifest, and the condemned
/// blobs of the round in progress. A round only sees manifests that are indexed; a write
/// that dedups a chunk against the index and indexes its manifest later must not lose that
/// chunk to the round. Both sides publish, fence, then look at the other (Dekker):
///
/// - a writer inserts its pin, then resurrects its blobs in the round's map if one is
///   installed (a blob already swept is written again by the writer);
/// - the collector installs the map, then resurrects every pinned blob.
///
/// With sequentially consistent fences at least one of them sees the other, and a resurrected
/// blob is never swept (`Condemned`). Pins are lock-free (papaya); a pin lives for one write.
#[derive(Debug, Default)]
pub(crate) struct ChunkPins {
    next_id: AtomicU64,
    pins: papaya::HashMap<u64, Arc<[BlobHash]>>,
    round: arc_swap::ArcSwapOption<Condemned>,
}

/// A chunked write's pin; dropping it ends the pin (after the manifest is indexed).
#[derive(Debug)]
pub(crate) struct ChunkPin<'a> {
    pins: &'a ChunkPins,
    id: u64,
}

impl Drop for ChunkPin<'_> {
    fn drop(&mut self) {
        self.pins.pins.pin().remove(&self.id);
    }
}

impl ChunkPins {
    /// Pins `blobs` for a write; returns the pin and those of them a sweep already took (the
    /// writer stores those again instead of trusting the index).
    pub fn pin(&self, blobs: Arc<[BlobHash]>) -> (ChunkPin<'_>, Vec<BlobHash>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.pins.pin().insert(id, blobs.clone());
        std::sync::atomic::fence(Ordering::SeqCst);
        let swept = match self.round.load_full() {
            Some(condemned) => blobs
                .iter()
                .filter(|hash| !condemned.resurrect(hash))
                .copied()
                .collect(),
            None => Vec::new(),
        };
        (ChunkPin { pins: self, id }, swept)
    }

    /// Collector: the round's condemned blobs are final; pinned ones stay.
    pub(super) fn install(&self, condemned: Arc<Condemned>) {
        self.round.store(Some(condemned.clone()));
        std::sync::atomic::fence(Ordering::SeqCst);
        for (_, blobs) in self.pins.pin().iter() {
            for hash in blobs.iter() {
                condemned.resurrect(hash);
            }
        }
    }

    /// Collector: the round is over (everything condemned was swept or kept).
    pub(super) fn clear(&self) {
        self.round.store(None);
    }
}
