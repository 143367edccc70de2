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

use std::sync::atomic::{AtomicBool, Ordering};
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
            return Err(EngineError::ReadOnly(reason.clone()));
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
            return Err(EngineError::ReadOnly(reason));
        }
        Ok(())
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
