//! Remote acknowledgements (decision 0031 §3): a write asked `remote` is answered only once a
//! cut holding it has been stored in the object store, its last segment's create-only PUT
//! answered success. A group commit to the object store: waiters share cuts.
//!
//! **Cut tickets, not record ids.** The shipper takes a ticket just before each new cut
//! (`start_cut`, then `Engine::hold_cut`) and confirms it once the cut's last segment is
//! created (`cut_shipped`). A waiter, once the engine answered its write (durable and
//! published here), takes `ticket()` = the tickets started so far + 1 and waits until that
//! ticket is confirmed: a cut started after the ticket reads the durable watermark after the
//! write, so it holds it. The waiter's read of `cuts_started` is a read-modify-write
//! (`fetch_add(0)`), so the shipper's next increment, also one, is ordered after it in the
//! counter's modification order and synchronises with it. Tickets cover writes with no log
//! record of their own (a PUT_CHUNKED's blob) and a retry answered by key without a write.
//!
//! **One PUT in flight, the next forming behind it.** A waiter raises `wanted` to its ticket;
//! when that raised it, it wakes the shipper, which cuts at once instead of at its next tick,
//! and goes on cutting while `wanted` is ahead of what shipped. Waiters that arrive while a
//! PUT is in flight share the next cut.
//!
//! **Never early, never from a fenced primary.** A fenced shipper (another primary took the
//! prefix) closes this for good: every waiter, now and later, is answered `Fenced`. The wait's
//! deadline is the server's (`--remote-ack-timeout`).
//!
//! Waiters live on the server's network cores: the shipper calls every registered `on_shipped`
//! once per cut confirmed (each core's is a `try_send` on a channel of one, which coalesces),
//! and a core's waiters re-check `outcome` when woken. No lock on the request path: two atomic
//! operations per remote write.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use ctxstore_engine::metrics::HistogramSnapshot;

/// Upper bounds (inclusive) of a remote acknowledgement's wait, microseconds: from the engine's
/// answer to the cut's confirmation (one PUT or two, plus a cut).
pub const REMOTE_ACK_BOUNDS_US: &[u64] = &[
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
    5_000_000, 10_000_000, 30_000_000,
];

/// What a waiter's ticket came to, so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// Not confirmed yet: wait for the next wake.
    Waiting,
    /// A cut holding the write is stored in the object store.
    Shipped,
    /// This primary was fenced: the write is durable here only, and never will be confirmed.
    Fenced,
}

/// `RemoteAcks::state`: 0 open (the default), then fenced for good.
const FENCED: u8 = 1;

/// A callback the shipper runs after each cut it confirms (a network core's wake).
type OnShipped = Box<dyn Fn() + Send + Sync>;

/// Shared by the shipper and the network cores (see the module doc).
#[derive(Default)]
pub struct RemoteAcks {
    cuts_started: AtomicU64,
    cuts_shipped: AtomicU64,
    /// The newest ticket a waiter waits for.
    wanted: AtomicU64,
    state: AtomicU8,
    /// Wakes the shipper when a waiter raised `wanted`.
    wake_shipper: tokio::sync::Notify,
    on_shipped: Mutex<Vec<OnShipped>>,
    /// Figures: writes waiting now, confirmed, answered UNCONFIRMED.
    pub waiting: AtomicU64,
    pub acks_total: AtomicU64,
    pub unconfirmed_total: AtomicU64,
    /// Confirmed waits by `REMOTE_ACK_BOUNDS_US` (one more: above the last), and their sum.
    /// Written by every core: a read-modify-write per confirmed write, on a path that waited
    /// for an object store's PUT.
    latency_buckets: [AtomicU64; REMOTE_ACK_BOUNDS_US.len() + 1],
    latency_sum_us: AtomicU64,
}

impl std::fmt::Debug for RemoteAcks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAcks")
            .field("cuts_started", &self.cuts_started.load(Ordering::Relaxed))
            .field("cuts_shipped", &self.cuts_shipped.load(Ordering::Relaxed))
            .field("wanted", &self.wanted.load(Ordering::Relaxed))
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RemoteAcks {
    // --- the waiters' side (network cores) ---

    /// The ticket of a write the engine has answered (durable and published): the next cut
    /// started holds it. Wakes the shipper when no earlier waiter asked for that cut.
    pub fn ticket(&self) -> u64 {
        let ticket = self.cuts_started.fetch_add(0, Ordering::AcqRel) + 1;
        if self.wanted.fetch_max(ticket, Ordering::AcqRel) < ticket {
            self.wake_shipper.notify_one();
        }
        ticket
    }

    /// Where `ticket` stands now.
    pub fn outcome(&self, ticket: u64) -> AckOutcome {
        if self.cuts_shipped.load(Ordering::Acquire) >= ticket {
            AckOutcome::Shipped
        } else if self.state.load(Ordering::Acquire) == FENCED {
            AckOutcome::Fenced
        } else {
            AckOutcome::Waiting
        }
    }

    /// A write confirmed `latency_us` after the engine answered it.
    pub fn record_ack(&self, latency_us: u64) {
        self.acks_total.fetch_add(1, Ordering::Relaxed);
        let bucket = REMOTE_ACK_BOUNDS_US.partition_point(|&bound| bound < latency_us);
        self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(latency_us, Ordering::Relaxed);
    }

    /// The confirmed waits so far (`/metrics`).
    pub fn latency(&self) -> HistogramSnapshot {
        let mut total = 0;
        HistogramSnapshot {
            bounds: REMOTE_ACK_BOUNDS_US,
            cumulative: self
                .latency_buckets
                .iter()
                .map(|bucket| {
                    total += bucket.load(Ordering::Relaxed);
                    total
                })
                .collect(),
            sum: self.latency_sum_us.load(Ordering::Relaxed),
        }
    }

    /// The upper bound of the bucket that holds the `quantile` (0..=1) of the confirmed waits,
    /// microseconds (ROLE's p50 and p99); 0 before the first, the last bound + 1 above it.
    pub fn latency_quantile_us(&self, quantile: f64) -> u64 {
        let snapshot = self.latency();
        let count = snapshot.count();
        if count == 0 {
            return 0;
        }
        let rank = ((count as f64) * quantile).ceil().max(1.0) as u64;
        let bucket = snapshot
            .cumulative
            .iter()
            .position(|cumulative| *cumulative >= rank)
            .unwrap_or(REMOTE_ACK_BOUNDS_US.len());
        REMOTE_ACK_BOUNDS_US
            .get(bucket)
            .copied()
            .unwrap_or(REMOTE_ACK_BOUNDS_US[REMOTE_ACK_BOUNDS_US.len() - 1] + 1)
    }

    /// Runs `wake` after each cut the shipper confirms, and when it is fenced (a network
    /// core's wake: it must not block).
    pub fn on_shipped(&self, wake: impl Fn() + Send + Sync + 'static) {
        self.lock_wakes().push(Box::new(wake));
    }

    // --- the shipper's side ---

    /// A new cut is about to be taken: its ticket.
    pub(crate) fn start_cut(&self) -> u64 {
        self.cuts_started.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The cut of `ticket` is stored whole (its last segment created, or nothing new to
    /// ship): every waiter of a ticket up to it is confirmed.
    pub(crate) fn cut_shipped(&self, ticket: u64) {
        let before = self.cuts_shipped.fetch_max(ticket, Ordering::AcqRel);
        if before < ticket {
            self.wake_waiters();
        }
    }

    /// Another primary took the prefix: no waiter is ever confirmed from now on.
    pub(crate) fn fence(&self) {
        if self.state.swap(FENCED, Ordering::AcqRel) != FENCED {
            self.wake_waiters();
        }
    }

    /// Whether a waiter waits for a cut not shipped yet (the shipper cuts again at once).
    pub(crate) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire) > self.cuts_shipped.load(Ordering::Acquire)
    }

    /// Until a waiter asks for a cut (the shipper's loop selects on it beside its tick).
    pub(crate) async fn asked(&self) {
        self.wake_shipper.notified().await;
    }

    fn wake_waiters(&self) {
        for wake in self.lock_wakes().iter() {
            wake();
        }
    }

    fn lock_wakes(&self) -> std::sync::MutexGuard<'_, Vec<OnShipped>> {
        // The list is only pushed to and iterated: a panic elsewhere leaves it whole.
        self.on_shipped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ticket_is_confirmed_only_by_a_cut_started_after_it() {
        let acks = RemoteAcks::default();
        let first_cut = acks.start_cut();
        let ticket = acks.ticket();
        assert_eq!(ticket, first_cut + 1, "the cut in progress may not hold it");
        acks.cut_shipped(first_cut);
        assert_eq!(acks.outcome(ticket), AckOutcome::Waiting);
        assert!(acks.wanted());
        let next = acks.start_cut();
        acks.cut_shipped(next);
        assert_eq!(acks.outcome(ticket), AckOutcome::Shipped);
        assert!(!acks.wanted());
    }

    #[test]
    fn waiters_share_a_cut_and_the_cores_are_woken_once_per_cut() {
        let acks = Arc::new(RemoteAcks::default());
        let wakes = Arc::new(AtomicU64::new(0));
        let counted = wakes.clone();
        acks.on_shipped(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        let tickets: Vec<u64> = (0..64).map(|_| acks.ticket()).collect();
        assert!(tickets.iter().all(|ticket| *ticket == 1), "one cut for all");
        let cut = acks.start_cut();
        acks.cut_shipped(cut);
        assert!(
            tickets
                .iter()
                .all(|ticket| acks.outcome(*ticket) == AckOutcome::Shipped)
        );
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        acks.cut_shipped(cut);
        assert_eq!(
            wakes.load(Ordering::Relaxed),
            1,
            "a cut confirmed again wakes none"
        );
    }

    #[test]
    fn latency_quantiles_name_the_bucket_that_holds_them() {
        let acks = RemoteAcks::default();
        assert_eq!(acks.latency_quantile_us(0.5), 0);
        for _ in 0..98 {
            acks.record_ack(3_000);
        }
        acks.record_ack(150_000);
        acks.record_ack(40_000_000);
        assert_eq!(acks.latency_quantile_us(0.5), 5_000);
        assert_eq!(acks.latency_quantile_us(0.99), 200_000);
        assert_eq!(acks.latency_quantile_us(1.0), 30_000_001);
        assert_eq!(acks.latency().count(), 100);
        assert_eq!(acks.acks_total.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn a_fenced_shipper_confirms_nothing_more() {
        let acks = RemoteAcks::default();
        let ticket = acks.ticket();
        acks.fence();
        assert_eq!(acks.outcome(ticket), AckOutcome::Fenced);
        assert_eq!(acks.outcome(acks.ticket()), AckOutcome::Fenced);
    }
}
