//! The exact vector search (decision 0033 §3): candidates scored against the query, ranked
//! best first (equal scores in key order), then taken in rank order through the caller's
//! value filter until `k + offset` pass. Exact by construction: every candidate the snapshot
//! holds is compared, so it answers exactly `k` whenever `k + offset` or more pass.
//!
//! `VectorCache` keeps decoded vectors blobs by address. An address names immutable content
//! (decision 0032: a tenant's blob address), so an entry is never stale: a search checks
//! which addresses the snapshot names, and the cache only saves the read, the seal's
//! opening and the decoding. Bounded by bytes (`vector_cache_bytes_max`): past the bound it
//! is emptied and refilled by the searches that follow (searches never wait on it).

use std::cmp::Ordering;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use bytes::Bytes;
use ctxstore_vocab::vectors::{Metric, norm};

use crate::format::vectors::Vectors;
use crate::ids::{BlobHash, BlobHashBuildHasher};

/// A decoded vectors blob and each row's norm.
#[derive(Debug)]
pub(crate) struct CachedVectors {
    pub vectors: Vectors,
    pub norms: Vec<f32>,
}

impl CachedVectors {
    pub fn new(vectors: Vectors) -> CachedVectors {
        let norms = vectors.rows().map(norm).collect();
        CachedVectors { vectors, norms }
    }
}

/// Decoded vectors blobs by address.
pub(crate) struct VectorCache {
    entries: papaya::HashMap<BlobHash, Arc<CachedVectors>, BlobHashBuildHasher>,
    bytes: AtomicU64,
    bytes_max: u64,
}

impl std::fmt::Debug for VectorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorCache")
            .field("bytes", &self.bytes.load(AtomicOrdering::Relaxed))
            .field("bytes_max", &self.bytes_max)
            .finish_non_exhaustive()
    }
}

impl VectorCache {
    pub fn new(bytes_max: u64) -> VectorCache {
        VectorCache {
            entries: papaya::HashMap::default(),
            bytes: AtomicU64::new(0),
            bytes_max,
        }
    }

    pub fn get(&self, address: &BlobHash) -> Option<Arc<CachedVectors>> {
        self.entries.pin().get(address).cloned()
    }

    /// Keeps `vectors` unless one blob alone passes the bound; empties the cache first when
    /// it would pass it.
    pub fn insert(&self, address: BlobHash, vectors: Arc<CachedVectors>) {
        let bytes = ((vectors.vectors.components.len() + vectors.norms.len()) * 4 + 64) as u64;
        if bytes > self.bytes_max {
            return;
        }
        if self.bytes.load(AtomicOrdering::Relaxed) + bytes > self.bytes_max {
            self.entries.pin().clear();
            self.bytes.store(0, AtomicOrdering::Relaxed);
        }
        if self.entries.pin().insert(address, vectors).is_none() {
            self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed);
        }
    }
}

/// A candidate: an entry's best score over its vectors.
#[derive(Clone, Debug)]
pub(crate) struct Scored {
    pub score: f32,
    pub key: Bytes,
    pub value_address: BlobHash,
    pub value_len: u32,
}

/// The best score of `query` (of norm `query_norm`) over `cached`'s rows.
pub(crate) fn best_score(
    metric: Metric,
    query: &[f32],
    query_norm: f32,
    cached: &CachedVectors,
) -> f32 {
    assert_eq!(
        cached.vectors.dims,
        query.len(),
        "checked against the index before the scan"
    );
    cached
        .vectors
        .rows()
        .zip(&cached.norms)
        .map(|(row, &norm)| metric.score_normed(query, query_norm, row, norm))
        .fold(f32::NEG_INFINITY, f32::max)
}

/// Best first; equal scores in key order (a total order: scores are finite, the callers
/// checked the vectors).
fn order(a: &Scored, b: &Scored) -> Ordering {
    b.score
        .partial_cmp(&a.score)
        .unwrap_or(Ordering::Equal)
        .then_with(|| a.key.cmp(&b.key))
}

/// The candidates in rank order, sorted only as far as they are taken: a search that wants
/// ten of a hundred thousand selects and sorts the best few, not all of them (the prefix
/// sorted so far grows by doubling when a filter turns candidates down).
pub(crate) struct Ranked {
    candidates: Vec<Scored>,
    sorted: usize,
    next: usize,
}

impl Ranked {
    /// `wanted`: how many the caller expects to take (the first selection's size).
    pub fn new(candidates: Vec<Scored>, wanted: usize) -> Ranked {
        let mut ranked = Ranked {
            candidates,
            sorted: 0,
            next: 0,
        };
        ranked.sort_through(wanted.max(1));
        ranked
    }

    /// Sorts the candidates through position `end` (exclusive): those before `sorted` are
    /// already the best, in order, so the rest is selected from what follows them.
    fn sort_through(&mut self, end: usize) {
        let end = end.min(self.candidates.len());
        if end <= self.sorted {
            return;
        }
        let rest = &mut self.candidates[self.sorted..];
        let take = end - self.sorted;
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, order);
        }
        rest[..take].sort_unstable_by(order);
        self.sorted = end;
    }
}

impl Iterator for Ranked {
    type Item = Scored;

    fn next(&mut self) -> Option<Scored> {
        if self.next >= self.candidates.len() {
            return None;
        }
        if self.next >= self.sorted {
            self.sort_through(self.sorted * 2);
        }
        let candidate = self.candidates[self.next].clone();
        self.next += 1;
        Some(candidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors(rows: &[&[f32]]) -> Vectors {
        Vectors {
            dims: rows[0].len(),
            components: rows.iter().flat_map(|row| row.iter().copied()).collect(),
        }
    }

    #[test]
    fn an_entry_scores_its_best_vector_and_ranks_are_total() {
        let entry = CachedVectors::new(vectors(&[&[0.0, 1.0], &[1.0, 0.0]]));
        assert_eq!(best_score(Metric::Cosine, &[1.0, 0.0], 1.0, &entry), 1.0);
        let scored = |score, key: &'static [u8]| Scored {
            score,
            key: Bytes::from_static(key),
            value_address: BlobHash([0; 32]),
            value_len: 0,
        };
        let candidates = vec![scored(0.5, b"b"), scored(0.9, b"c"), scored(0.5, b"a")];
        let keys: Vec<_> = Ranked::new(candidates, 1).map(|c| c.key).collect();
        assert_eq!(keys, [&b"c"[..], b"a", b"b"]);
        // However far it is taken, the order is a full sort's.
        let mut rng = 7u64;
        let many: Vec<Scored> = (0..1000u32)
            .map(|i| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                Scored {
                    score: (rng >> 40) as f32 / 1e3,
                    key: Bytes::from(i.to_be_bytes().to_vec()),
                    value_address: BlobHash([0; 32]),
                    value_len: 0,
                }
            })
            .collect();
        let mut full = many.clone();
        full.sort_by(order);
        for wanted in [1, 10, 999, 5000] {
            let ranked: Vec<_> = Ranked::new(many.clone(), wanted).map(|c| c.key).collect();
            let expected: Vec<_> = full.iter().map(|c| c.key.clone()).collect();
            assert_eq!(ranked, expected, "{wanted}");
        }
    }

    #[test]
    fn the_cache_stays_under_its_bound() {
        let cache = VectorCache::new(200);
        let one = Arc::new(CachedVectors::new(vectors(&[&[1.0; 15]]))); // 64 + 64 bytes
        cache.insert(BlobHash([1; 32]), one.clone());
        assert!(cache.get(&BlobHash([1; 32])).is_some());
        cache.insert(BlobHash([2; 32]), one.clone());
        assert!(
            cache.get(&BlobHash([1; 32])).is_none(),
            "emptied to stay under 200"
        );
        assert!(cache.get(&BlobHash([2; 32])).is_some());
        let huge = Arc::new(CachedVectors::new(vectors(&[&[1.0; 64]])));
        cache.insert(BlobHash([3; 32]), huge);
        assert!(
            cache.get(&BlobHash([3; 32])).is_none(),
            "larger than the bound alone"
        );
    }
}
