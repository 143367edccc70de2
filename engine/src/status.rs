//! Whether the store accepts writes. Set by any actor whose fdatasync failed (the kernel may
//! have dropped the dirty pages, so no later write can be trusted to be durable); read by every
//! writer before it starts and by `stats`.
//!
//! A standby (issue 31, `EngineConfig::follower`) is read-only too, for another reason and not
//! for ever: it takes its turns from the replica (`engine/follow.rs`) and refuses every write
//! with a message naming the primary, until it is promoted (`leave_follower`). The background
//! work that writes (the collector's scheduler, preallocation) skips a read-only store, so the
//! one flag stops all of it.
//!
//! A fenced primary (issue 46) is read-only for good: another server took the replica's prefix
//! with a later epoch, so nothing this one acknowledges from now on would reach any restore
//! point. Its writes are refused with a message naming the new holder. A primary whose store
//! failed fences itself when it steps down (the replica's shipper): its writers are sent to
//! look for the standby that takes over, rather than told the disk failed.
//!
//! A standby's and a fenced primary's refusals are `EngineError::NotPrimary` (decision 0031:
//! the writer should go to another server), a failed fdatasync's `ReadOnly` (no server of
//! the replica is to blame: this one's disk is). The server sends NOT_PRIMARY to a connection
//! of protocol version 4, READ_ONLY to an older one.
//!
//! A primary with a lease (decision 0031 §6) acknowledges only while its **ack gate** is open:
//! `now < min(lease_until, shipped_until)` on the boot clock (`clock.rs`), where the lease
//! thread writes `lease_until` (its last successful renewal's send time + L − m) and the
//! shipper `shipped_until` (the boot time of the newest cut shipped whole + L − m). Both are
//! `u64::MAX` without a lease: the gate is open and costs three atomic loads, no clock read.
//! A closed gate refuses writes at admission (`check_writable`: `NotPrimary`), turns the
//! answers of a batch already written into `Unconfirmed` (the sequencer, once per batch,
//! `acks_closed`, which counts a fence too), and stops the background work (`is_read_only`).
//! Unlike the other states it may open again: a later renewal, a later cut shipped.
//! `AckGate::close` closes it for good (a stopping server). The local maintenance the shipper
//! needs to reopen it (the log's rebase) checks `check_store_writable`, without the gate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::clock::{boot_now_ns, ns_to_ms_ceil};
use crate::error::EngineError;

/// Whether the store takes writes: read-only once set (until restart), a standby until
/// promoted, fenced for good, and the ack gate.
#[derive(Debug, Default)]
pub(crate) struct StoreStatus {
    read_only: AtomicBool,
    reason: OnceLock<String>,
    /// A standby: writes are refused with `follow_reason` (read only on that refusal, so the
    /// lock is never on a path that succeeds).
    following: AtomicBool,
    follow_reason: Mutex<String>,
    /// Set once when the replica's prefix was taken by another primary; never cleared.
    fenced: OnceLock<String>,
    /// What the replica holds of this primary's ids (issue 46 item 8, `engine/id_floors.rs`).
    pub shipped: ShippedIds,
    /// When this primary stops acknowledging (decision 0031 §6).
    pub gate: AckGate,
}

/// The ack gate (decision 0031 §6): two deadlines on the boot clock (`clock::boot_now_ns`, in
/// nanoseconds) and a closing for good. Acknowledgements are open while `now` is before both
/// deadlines and the gate was not closed. `u64::MAX` is no deadline (the default: no lease,
/// the gate always open, as before the lease existed); 0 is a deadline long past.
///
/// The decisions take `now` as an argument (`open_at`, `ns_left_at`, `refusal_at`): the live
/// path passes `boot_now_ns()`, the tests a fake clock.
#[derive(Debug)]
pub(crate) struct AckGate {
    /// Written by the lease thread alone, stored as given: a renewal's deadline, 0 to close
    /// until the next one, `u64::MAX` for no lease.
    lease_until: AtomicU64,
    /// Written by the shipper alone, forward only (a later cut has a later deadline); the
    /// default `u64::MAX` (not armed) gives way to the first deadline set.
    shipped_until: AtomicU64,
    /// Closed for good, with the reason every refusal carries from then on.
    closed: OnceLock<String>,
}

impl Default for AckGate {
    fn default() -> Self {
        AckGate {
            lease_until: AtomicU64::new(u64::MAX),
            shipped_until: AtomicU64::new(u64::MAX),
            closed: OnceLock::new(),
        }
    }
}

impl AckGate {
    /// The lease thread's deadline: acknowledgements close at `ns` (boot clock) unless a later
    /// renewal moves it. 0 closes the gate until the next call; `u64::MAX` lifts the deadline.
    pub fn set_lease_until(&self, ns: u64) {
        self.lease_until.store(ns, Ordering::Release);
    }

    /// The shipper's deadline: acknowledgements close at `ns` (boot clock) unless a later cut
    /// ships. Forward only: an earlier `ns` than the one set is ignored; the first call
    /// replaces the default (no deadline) whatever its value.
    pub fn set_shipped_until(&self, ns: u64) {
        let _ = self
            .shipped_until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                if current == u64::MAX {
                    Some(ns)
                } else {
                    (ns > current).then_some(ns)
                }
            });
    }

    /// Closes the gate for good (the first reason stays): no deadline set later opens it.
    pub fn close(&self, reason: String) {
        if self.closed.set(reason.clone()).is_ok() {
            tracing::warn!(%reason, "acknowledgements closed for good");
        }
    }

    /// The deadlines: (lease_until, shipped_until).
    fn deadlines(&self) -> (u64, u64) {
        (
            self.lease_until.load(Ordering::Acquire),
            self.shipped_until.load(Ordering::Acquire),
        )
    }

    /// Whether neither deadline is set and the gate is not closed: open whatever the clock
    /// says, so the live path need not read it.
    fn is_unarmed(&self) -> bool {
        let (lease, shipped) = self.deadlines();
        lease == u64::MAX && shipped == u64::MAX && self.closed.get().is_none()
    }

    /// Whether acknowledgements are open at `now_ns` (boot clock).
    pub fn open_at(&self, now_ns: u64) -> bool {
        self.ns_left_at(now_ns).is_none_or(|left| left > 0)
    }

    /// Nanoseconds acknowledgements stay open from `now_ns` on without another renewal or
    /// cut: `None` without a deadline (no lease, and not closed), `Some(0)` when closed.
    pub fn ns_left_at(&self, now_ns: u64) -> Option<u64> {
        if self.closed.get().is_some() {
            return Some(0);
        }
        let (lease, shipped) = self.deadlines();
        let until = lease.min(shipped);
        (until != u64::MAX).then(|| until.saturating_sub(now_ns))
    }

    /// Why acknowledgements are closed at `now_ns`, or `None` while they are open.
    pub fn refusal_at(&self, now_ns: u64) -> Option<String> {
        if let Some(reason) = self.closed.get() {
            return Some(reason.clone());
        }
        let (lease, shipped) = self.deadlines();
        if lease != u64::MAX && now_ns >= lease {
            return Some(match lease {
                0 => "this primary holds no lease on the replica's prefix (not taken yet, or \
                      given up): it takes no writes until it holds one"
                    .to_string(),
                _ => format!(
                    "this primary's lease on the replica's prefix lapsed {} ms ago (no renewal \
                     succeeded in time): it takes no writes until a renewal succeeds, and \
                     another server may be taking over",
                    ns_to_ms_ceil(now_ns - lease)
                ),
            });
        }
        if shipped != u64::MAX && now_ns >= shipped {
            return Some(format!(
                "this primary could not ship to the replica within its lease (the newest cut \
                 shipped whole is {} ms past its deadline): it takes no writes until a cut \
                 ships, so that a server taking over loses at most one lease of them",
                ns_to_ms_ceil(now_ns - shipped)
            ));
        }
        None
    }

    /// Whether acknowledgements are open now: no clock read without a deadline, else one
    /// (vDSO) and two atomic loads.
    pub fn open_now(&self) -> bool {
        self.is_unarmed() || self.open_at(boot_now_ns())
    }

    /// Why acknowledgements are closed now, or `None` while they are open.
    pub fn refusal_now(&self) -> Option<String> {
        if self.is_unarmed() {
            return None;
        }
        self.refusal_at(boot_now_ns())
    }

    /// Nanoseconds acknowledgements stay open from now (see `ns_left_at`).
    pub fn ns_left_now(&self) -> Option<u64> {
        if self.is_unarmed() {
            return None;
        }
        self.ns_left_at(boot_now_ns())
    }
}

/// Record ids (TurnIDs, stream ids) a primary hands out past the replica's newest point.
pub const IDS_UNSHIPPED_RECORDS_MAX: u64 = 1 << 18;
/// ContextIDs a primary hands out past the replica's newest point.
pub const IDS_UNSHIPPED_CONTEXTS_MAX: u64 = 1 << 15;
/// How far past the newest point a new generation's record ids start.
pub const IDS_GENERATION_SKIP_RECORDS: u64 = 2 * IDS_UNSHIPPED_RECORDS_MAX;
/// How far past the newest point a new generation's ContextIDs start.
pub const IDS_GENERATION_SKIP_CONTEXTS: u64 = 2 * IDS_UNSHIPPED_CONTEXTS_MAX;

/// The ids of the last point the replica holds: records (TurnIDs) `1..=records` and contexts
/// `1..=contexts`. The sequencer hands out no id more than `IDS_UNSHIPPED_MAX` past them, so
/// that a new generation that starts `IDS_GENERATION_SKIP` past the newest point never hands
/// one out again. `u64::MAX` (the default): no replica, no bound.
#[derive(Debug)]
pub(crate) struct ShippedIds {
    pub records: AtomicU64,
    pub contexts: AtomicU64,
}

impl Default for ShippedIds {
    fn default() -> Self {
        ShippedIds {
            records: AtomicU64::new(u64::MAX),
            contexts: AtomicU64::new(u64::MAX),
        }
    }
}

impl StoreStatus {
    pub fn set_read_only(&self, reason: String) {
        if self.reason.set(reason.clone()).is_ok() {
            tracing::error!(%reason, "store is now read-only; restart after fixing the cause");
        }
        self.read_only.store(true, Ordering::Release);
    }

    /// Why the store failed (a failed fdatasync, or a failed write that could not be cut back:
    /// read-only until restart), or `None`. Not a standby, a fence or a closed gate: those
    /// are roles, not a broken disk.
    pub fn failed(&self) -> Option<String> {
        if !self.read_only.load(Ordering::Acquire) {
            return None;
        }
        Some(self.reason.get().cloned().unwrap_or_default())
    }

    /// A failed fdatasync, a standby that is not promoted yet, a fenced primary, or a closed
    /// ack gate: the background work that writes (the collector's scheduler, preallocation)
    /// skips such a store.
    pub fn is_read_only(&self) -> bool {
        self.store_read_only() || !self.gate.open_now()
    }

    /// `is_read_only` but for the ack gate: whether this store's files take any write at all.
    fn store_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
            || self.following.load(Ordering::Acquire)
            || self.fenced.get().is_some()
    }

    /// A primary whose replica prefix another took: every write is refused with `reason` from
    /// now on (the first reason stays).
    pub fn set_fenced(&self, reason: String) {
        if self.fenced.set(reason.clone()).is_ok() {
            tracing::error!(%reason, "fenced: this server refuses writes from now on");
        }
    }

    /// Whether a write may be admitted: `check_store_writable`, then the ack gate (a closed
    /// one is `NotPrimary`). Every writer calls it before it writes anything.
    pub fn check_writable(&self) -> Result<(), EngineError> {
        self.check_store_writable()?;
        match self.gate.refusal_now() {
            Some(reason) => Err(EngineError::NotPrimary(reason)),
            None => Ok(()),
        }
    }

    /// Whether the store's files may change at all, whatever the ack gate says: the local
    /// maintenance that acknowledges nothing and that the shipper needs to go on (the log's
    /// rebase for a checkpoint) checks this alone.
    pub fn check_store_writable(&self) -> Result<(), EngineError> {
        if let Some(reason) = self.fenced.get() {
            return Err(EngineError::NotPrimary(reason.clone()));
        }
        if self.read_only.load(Ordering::Acquire) {
            let reason = self.reason.get().cloned().unwrap_or_default();
            return Err(EngineError::ReadOnly(reason));
        }
        if self.following.load(Ordering::Acquire) {
            let reason = match self.follow_reason.lock() {
                Ok(reason) => reason.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            };
            return Err(EngineError::NotPrimary(reason));
        }
        Ok(())
    }

    /// Why a batch already written and synced may not be answered as a success now (decision
    /// 0031 §6): the ack gate closed, or another server fenced this one, since its requests
    /// were admitted. `None` while acknowledgements are open. The sequencer asks once per
    /// batch, before it answers.
    pub fn acks_closed(&self) -> Option<String> {
        if let Some(reason) = self.fenced.get() {
            return Some(reason.clone());
        }
        self.gate.refusal_now()
    }

    /// Whether acknowledgements are open now: the gate open and no fence (`acks_closed` is
    /// `None`), without building the reason.
    pub fn acks_open(&self) -> bool {
        self.fenced.get().is_none() && self.gate.open_now()
    }

    /// Milliseconds acknowledgements stay open without another renewal or cut (ROLE's
    /// `ack_open_ms`): `None` without a deadline (no lease), `Some(0)` once closed or fenced.
    pub fn ack_open_ms_left(&self) -> Option<u64> {
        if self.fenced.get().is_some() {
            return Some(0);
        }
        self.gate.ns_left_now().map(ns_to_ms_ceil)
    }

    /// Whether a write would be taken now (`check_writable` passes): what ROLE's
    /// `accepts_writes` says. The id bound of `shipped` is not counted: it refuses for a
    /// moment, until more has shipped, and names the wait.
    pub fn accepts_writes(&self) -> bool {
        !self.is_read_only()
    }

    /// A standby: every write is refused with `reason` (which says where the primary is).
    pub fn set_following(&self, reason: String) {
        match self.follow_reason.lock() {
            Ok(mut current) => *current = reason,
            Err(poisoned) => *poisoned.into_inner() = reason,
        }
        self.following.store(true, Ordering::Release);
    }

    pub fn is_following(&self) -> bool {
        self.following.load(Ordering::Acquire)
    }

    /// Promotion: writes are accepted from now on (unless an fdatasync failed).
    pub fn leave_follower(&self) {
        self.following.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    //! The ack gate's deadline logic on a fake clock (the `*_at` decisions take the time), and
    //! the store's status with the gate closed by deadlines the live clock has passed.

    use super::*;
    use crate::ErrorKind;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn without_a_deadline_the_gate_is_open_whatever_the_clock() {
        let gate = AckGate::default();
        for now in [0, 1, 5 * SECOND, u64::MAX - 1, u64::MAX] {
            assert!(gate.open_at(now), "{now}");
            assert_eq!(gate.ns_left_at(now), None);
            assert_eq!(gate.refusal_at(now), None);
        }
        assert!(gate.is_unarmed());
        assert!(gate.open_now());
        assert_eq!(gate.ns_left_now(), None);
    }

    #[test]
    fn the_lease_deadline_is_open_before_and_closed_at_and_after_it() {
        let gate = AckGate::default();
        gate.set_lease_until(10 * SECOND);
        assert!(gate.open_at(0));
        assert!(gate.open_at(10 * SECOND - 1));
        assert_eq!(gate.ns_left_at(10 * SECOND - 1), Some(1));
        assert_eq!(gate.ns_left_at(4 * SECOND), Some(6 * SECOND));
        assert!(!gate.open_at(10 * SECOND));
        assert_eq!(gate.ns_left_at(10 * SECOND), Some(0));
        assert!(!gate.open_at(11 * SECOND));
        assert_eq!(gate.ns_left_at(11 * SECOND), Some(0));
        let refusal = gate.refusal_at(10 * SECOND + 1_500_000).unwrap();
        assert!(refusal.contains("lease"), "{refusal}");
        assert!(refusal.contains("lapsed 2 ms ago"), "{refusal}");
        assert_eq!(gate.refusal_at(10 * SECOND - 1), None);
    }

    #[test]
    fn the_gate_closes_at_the_earlier_of_both_deadlines() {
        let gate = AckGate::default();
        gate.set_lease_until(10 * SECOND);
        gate.set_shipped_until(7 * SECOND);
        assert!(gate.open_at(7 * SECOND - 1));
        assert!(!gate.open_at(7 * SECOND));
        assert_eq!(gate.ns_left_at(2 * SECOND), Some(5 * SECOND));
        let refusal = gate.refusal_at(8 * SECOND).unwrap();
        assert!(refusal.contains("could not ship"), "{refusal}");
        assert!(refusal.contains("1000 ms past"), "{refusal}");
        gate.set_shipped_until(20 * SECOND);
        assert!(gate.open_at(8 * SECOND));
        assert_eq!(gate.ns_left_at(8 * SECOND), Some(2 * SECOND));
        assert!(!gate.open_at(10 * SECOND));
        // Both passed: the lease is named first.
        let refusal = gate.refusal_at(30 * SECOND).unwrap();
        assert!(refusal.contains("lease"), "{refusal}");
    }

    #[test]
    fn the_lease_deadline_is_stored_as_given_and_0_closes_it() {
        let gate = AckGate::default();
        gate.set_lease_until(10 * SECOND);
        gate.set_lease_until(5 * SECOND);
        assert!(
            !gate.open_at(6 * SECOND),
            "a renewal may move the deadline back"
        );
        gate.set_lease_until(0);
        assert!(!gate.open_at(1));
        let refusal = gate.refusal_at(1).unwrap();
        assert!(refusal.contains("holds no lease"), "{refusal}");
        assert!(!gate.is_unarmed());
        gate.set_lease_until(u64::MAX);
        assert!(gate.open_at(100 * SECOND), "u64::MAX lifts the deadline");
        assert!(gate.is_unarmed());
    }

    #[test]
    fn the_shipped_deadline_only_moves_forward_once_set() {
        let gate = AckGate::default();
        // The first deadline replaces "none", however early.
        gate.set_shipped_until(3 * SECOND);
        assert!(!gate.open_at(3 * SECOND));
        gate.set_shipped_until(9 * SECOND);
        gate.set_shipped_until(4 * SECOND);
        assert!(gate.open_at(5 * SECOND), "an earlier deadline is ignored");
        assert_eq!(gate.ns_left_at(5 * SECOND), Some(4 * SECOND));
        gate.set_shipped_until(9 * SECOND);
        assert_eq!(gate.ns_left_at(5 * SECOND), Some(4 * SECOND));
        assert!(!gate.open_at(9 * SECOND));
    }

    #[test]
    fn a_gate_closed_for_good_stays_closed_with_its_first_reason() {
        let gate = AckGate::default();
        gate.close("the server is stopping".into());
        gate.close("a second reason".into());
        assert!(!gate.open_at(0));
        assert!(!gate.open_now());
        assert_eq!(gate.ns_left_at(0), Some(0));
        gate.set_lease_until(u64::MAX);
        gate.set_shipped_until(u64::MAX);
        gate.set_lease_until(100 * SECOND);
        assert!(!gate.open_at(SECOND), "no deadline opens it");
        assert_eq!(
            gate.refusal_at(SECOND).as_deref(),
            Some("the server is stopping")
        );
        assert_eq!(
            gate.refusal_now().as_deref(),
            Some("the server is stopping")
        );
    }

    #[test]
    fn a_closed_gate_refuses_writes_and_stops_the_background_work() {
        let status = StoreStatus::default();
        assert!(status.check_writable().is_ok());
        assert!(status.acks_open());
        assert_eq!(status.ack_open_ms_left(), None);
        let now = boot_now_ns();
        // An hour ahead on the live clock: open, and ROLE counts it down.
        status.gate.set_lease_until(now + 3600 * SECOND);
        assert!(status.check_writable().is_ok());
        assert!(!status.is_read_only());
        let left = status.ack_open_ms_left().unwrap();
        assert!(left > 3_500_000 && left <= 3_600_000, "{left}");
        // A deadline the clock has passed.
        status.gate.set_lease_until(now);
        let refused = status.check_writable().unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::NotPrimary, "{refused}");
        assert!(refused.to_string().contains("lease"), "{refused}");
        assert!(status.is_read_only());
        assert!(!status.accepts_writes());
        assert!(!status.acks_open());
        assert_eq!(status.ack_open_ms_left(), Some(0));
        assert!(status.acks_closed().unwrap().contains("lease"));
        // The store's files still take maintenance (the shipper's rebase).
        assert!(status.check_store_writable().is_ok());
        // A later deadline opens it again.
        status.gate.set_lease_until(boot_now_ns() + 3600 * SECOND);
        assert!(status.check_writable().is_ok());
        assert!(status.acks_open());
    }

    #[test]
    fn a_fence_closes_acknowledgements_whatever_the_gate() {
        let status = StoreStatus::default();
        status.set_fenced("epoch 3 holds the prefix".into());
        assert!(!status.acks_open());
        assert_eq!(status.ack_open_ms_left(), Some(0));
        assert_eq!(
            status.acks_closed().as_deref(),
            Some("epoch 3 holds the prefix")
        );
        assert_eq!(
            status.check_store_writable().unwrap_err().kind(),
            ErrorKind::NotPrimary
        );
    }
}
