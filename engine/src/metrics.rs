//! Figures for monitoring that cost the writer almost nothing: fixed-bucket histograms and
//! counters of relaxed atomics, each with ONE writing thread (an actor, a network core), read
//! at any moment by a scraper on another thread.
//!
//! Single writer: an update is a relaxed load and a relaxed store (no locked instruction, no
//! shared cache line with another writer), so a value may be read a moment stale but is never
//! torn. A histogram's buckets are read one by one: a snapshot taken during an update may miss
//! that one observation in its count or its sum, never more. Each structure is documented with
//! the thread that writes it.
//!
//! The engine keeps per actor (`ActorMetrics`, written by that actor's thread inside
//! `ActorFile::append_durably`): the fdatasync latency and the records of each group commit.
//! `Engine::actor_metrics` snapshots them, with each actor's queue depth.

use std::sync::atomic::{AtomicU64, Ordering};

/// Adds `by` to a counter that only the calling thread writes.
#[inline]
pub fn add_single_writer(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Upper bounds (inclusive) of latency buckets, in microseconds: 25 µs to 10 s, roughly three
/// per decade, covering a page-cache hit up to a stalled disk.
pub const LATENCY_BOUNDS_US: &[u64] = &[
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    1_000_000, 10_000_000,
];

/// Upper bounds (inclusive) of group-commit batch sizes, in records.
pub const BATCH_RECORDS_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];

/// A histogram over fixed buckets with one writing thread (see the module doc).
#[derive(Debug)]
pub struct Histogram {
    /// Inclusive upper bounds, ascending; observations above the last go to the `+Inf` bucket.
    bounds: &'static [u64],
    /// Non-cumulative counts, one per bound plus the `+Inf` bucket.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// What a scraper reads of a [`Histogram`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Inclusive upper bounds, ascending (the `+Inf` bucket is implied).
    pub bounds: &'static [u64],
    /// Cumulative counts: `cumulative[i]` observations were ≤ `bounds[i]`; the last element,
    /// one past the bounds, is the total count.
    pub cumulative: Vec<u64>,
    pub sum: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]));
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Counts one observation. Only the histogram's writing thread may call it.
    #[inline]
    pub fn record(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        add_single_writer(&self.buckets[bucket], 1);
        add_single_writer(&self.sum, value);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|bucket| {
                total += bucket.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            bounds: self.bounds,
            cumulative,
            sum: self.sum.load(Ordering::Relaxed),
        }
    }

    /// Adds `other`'s counts to `into` (snapshots of histograms with the same bounds, e.g. one
    /// per network core).
    pub fn merge(into: &mut HistogramSnapshot, other: &HistogramSnapshot) {
        assert_eq!(
            into.bounds, other.bounds,
            "merging histograms of different buckets"
        );
        for (mine, theirs) in into.cumulative.iter_mut().zip(&other.cumulative) {
            *mine += theirs;
        }
        into.sum += other.sum;
    }
}

/// One actor's group-commit figures; written only by the actor's thread.
#[derive(Debug)]
pub struct ActorMetrics {
    /// fdatasync of a group commit, microseconds (whether it succeeded or not).
    pub fsync_us: Histogram,
    /// Records written by one group commit (turn records, or blob records).
    pub batch_records: Histogram,
    /// Bytes written by group commits.
    pub written_bytes: AtomicU64,
}

impl Default for ActorMetrics {
    fn default() -> Self {
        ActorMetrics {
            fsync_us: Histogram::new(LATENCY_BOUNDS_US),
            batch_records: Histogram::new(BATCH_RECORDS_BOUNDS),
            written_bytes: AtomicU64::new(0),
        }
    }
}

/// A snapshot of one actor for monitoring (`Engine::actor_metrics`).
#[derive(Clone, Debug)]
pub struct ActorSnapshot {
    /// `sequencer`, or `shard0`, `shard1`, …
    pub actor: String,
    /// Requests waiting in the actor's inbox (at most `queue_depth_max`).
    pub queue_depth: u64,
    pub fsync_us: HistogramSnapshot,
    pub batch_records: HistogramSnapshot,
    pub written_bytes: u64,
}

impl ActorMetrics {
    pub fn snapshot(&self, actor: String, queue_depth: u64) -> ActorSnapshot {
        ActorSnapshot {
            actor,
            queue_depth,
            fsync_us: self.fsync_us.snapshot(),
            batch_records: self.batch_records.snapshot(),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds_and_cumulative() {
        let histogram = Histogram::new(&[1, 10, 100]);
        for value in [0, 1, 2, 10, 11, 100, 101, 5000] {
            histogram.record(value);
        }
        let snapshot = histogram.snapshot();
        // ≤1: 0,1; ≤10: +2,10; ≤100: +11,100; +Inf: +101,5000.
        assert_eq!(snapshot.cumulative, vec![2, 4, 6, 8]);
        assert_eq!(snapshot.count(), 8);
        assert_eq!(snapshot.sum, 1 + 2 + 10 + 11 + 100 + 101 + 5000);

        let mut merged = snapshot.clone();
        Histogram::merge(&mut merged, &snapshot);
        assert_eq!(merged.cumulative, vec![4, 8, 12, 16]);
        assert_eq!(merged.sum, 2 * snapshot.sum);
    }
}
