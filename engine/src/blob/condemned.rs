//! Blobs a garbage-collection round condemned (decision 0011), shared by the sequencer and the
//! shards for the round: a lock-free map hash → state, each hash moved by compare-and-set, so
//! that "a turn names this blob" and "this blob's bytes go" can never both win.
//!
//! ```text
//!  CONDEMNED ──(sequencer: a turn or key-value entry names it)──► RESURRECTED  (kept)
//!      │
//!      └──(shard: sweeps it, drops it from the index)──► SWEPT ──(shard: a new put writes
//!                                                                a fresh copy)──► REWRITTEN
//! ```
//!
//! The sequencer refuses a reference to a SWEPT blob with `BlobNotFound` (a by-value append or
//! key-value put then stores the payload again: the shard writes a fresh copy and marks it
//! REWRITTEN); every other state may be referenced.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::ids::{BlobHash, BlobHashBuildHasher};

const CONDEMNED: u8 = 0;
const RESURRECTED: u8 = 1;
const SWEPT: u8 = 2;
const REWRITTEN: u8 = 3;

#[derive(Debug, Default)]
pub(crate) struct Condemned {
    states: papaya::HashMap<BlobHash, AtomicU8, BlobHashBuildHasher>,
    /// A condemned manifest's chunks and base (decision 0013): naming the manifest names them
    /// too. The collector sweeps every condemned manifest before any blob a condemned manifest
    /// names (bases after their deltas), so a swept dependency means its manifest was swept
    /// first, and the manifest's own compare-and-set fails as well.
    depends_on: papaya::HashMap<BlobHash, Box<[BlobHash]>, BlobHashBuildHasher>,
}

impl Condemned {
    #[cfg(test)]
    pub fn new(hashes: impl IntoIterator<Item = BlobHash>) -> Condemned {
        Condemned::with_dependencies(hashes, std::iter::empty())
    }

    pub fn with_dependencies(
        hashes: impl IntoIterator<Item = BlobHash>,
        dependencies: impl IntoIterator<Item = (BlobHash, Box<[BlobHash]>)>,
    ) -> Condemned {
        let condemned = Condemned::default();
        {
            let states = condemned.states.pin();
            for hash in hashes {
                states.insert(hash, AtomicU8::new(CONDEMNED));
            }
            let depends_on = condemned.depends_on.pin();
            for (hash, needs) in dependencies {
                assert!(
                    states.contains_key(&hash),
                    "only a condemned blob has dependencies"
                );
                depends_on.insert(hash, needs);
            }
        }
        condemned
    }

    /// Sequencer (or a chunked write, or the collector for a pin): a record is about to name
    /// `hash`. True if it may (the blob, and everything a condemned manifest needs, is kept or
    /// was written again); false if bytes it needs were swept. Dependencies are resurrected
    /// before the blob itself (bottom-up), so a kept manifest never lacks a chunk.
    pub fn resurrect(&self, hash: &BlobHash) -> bool {
        let depends_on = self.depends_on.pin();
        if let Some(needs) = depends_on.get(hash) {
            // Every one, not only up to the first failure: what is kept stays whole.
            let mut kept = true;
            for need in needs.iter() {
                kept &= self.resurrect(need);
            }
            if !kept {
                return false;
            }
        }
        let states = self.states.pin();
        let Some(state) = states.get(hash) else {
            return true;
        };
        match state.compare_exchange(CONDEMNED, RESURRECTED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(now) => now != SWEPT,
        }
    }

    /// Shard: takes `hash` for sweeping. True if it was still condemned (no one named it).
    pub fn sweep(&self, hash: &BlobHash) -> bool {
        let states = self.states.pin();
        states.get(hash).is_some_and(|state| {
            state
                .compare_exchange(CONDEMNED, SWEPT, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// Shard: a fresh copy of `hash` is durable and indexed.
    pub fn rewritten(&self, hash: &BlobHash) {
        let states = self.states.pin();
        if let Some(state) = states.get(hash) {
            let _ = state.compare_exchange(SWEPT, REWRITTEN, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_blob_is_never_swept_and_a_swept_one_is_never_named() {
        let kept = BlobHash([1; 32]);
        let gone = BlobHash([2; 32]);
        let other = BlobHash([3; 32]);
        let condemned = Condemned::new([kept, gone]);
        assert!(condemned.resurrect(&kept));
        assert!(!condemned.sweep(&kept), "named first: kept");
        assert!(condemned.sweep(&gone));
        assert!(!condemned.resurrect(&gone), "swept first: refused");
        condemned.rewritten(&gone);
        assert!(condemned.resurrect(&gone), "a fresh copy may be named");
        assert!(condemned.resurrect(&other) && !condemned.sweep(&other));
    }

    #[test]
    fn naming_a_manifest_keeps_its_chunks_and_its_base() {
        let (delta, base, chunk, base_chunk) = (
            BlobHash([1; 32]),
            BlobHash([2; 32]),
            BlobHash([3; 32]),
            BlobHash([4; 32]),
        );
        let condemned = Condemned::with_dependencies(
            [delta, base, chunk, base_chunk],
            [
                (delta, vec![base, chunk].into_boxed_slice()),
                (base, vec![base_chunk].into_boxed_slice()),
            ],
        );
        assert!(condemned.resurrect(&delta));
        for kept in [delta, base, chunk, base_chunk] {
            assert!(!condemned.sweep(&kept), "kept");
        }

        // Swept in the collector's order (manifests first): naming the manifest fails.
        let condemned =
            Condemned::with_dependencies([delta, chunk], [(delta, vec![chunk].into_boxed_slice())]);
        assert!(condemned.sweep(&delta) && condemned.sweep(&chunk));
        assert!(!condemned.resurrect(&delta));
    }
}
