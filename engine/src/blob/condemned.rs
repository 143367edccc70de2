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
}

impl Condemned {
    pub fn new(hashes: impl IntoIterator<Item = BlobHash>) -> Condemned {
        let condemned = Condemned::default();
        {
            let states = condemned.states.pin();
            for hash in hashes {
                states.insert(hash, AtomicU8::new(CONDEMNED));
            }
        }
        condemned
    }

    /// Sequencer: a record is about to name `hash`. True if it may (the blob is kept or was
    /// written again); false if its bytes were swept.
    pub fn resurrect(&self, hash: &BlobHash) -> bool {
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
}
