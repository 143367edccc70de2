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
//! point. Its writes are refused with a message naming the new holder.
//!
//! A standby's and a fenced primary's refusals are `EngineError::NotPrimary` (decision 0031:
//! the writer should go to another server), a failed fdatasync's `ReadOnly` (no server of
//! the replica is to blame: this one's disk is). The server sends NOT_PRIMARY to a connection
//! of protocol version 4, READ_ONLY to an older one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::error::EngineError;

/// Read-only mode: once set, it stays until restart.
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

    /// A failed fdatasync, a standby that is not promoted yet, or a fenced primary.
    pub fn is_read_only(&self) -> bool {
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

    pub fn check_writable(&self) -> Result<(), EngineError> {
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
