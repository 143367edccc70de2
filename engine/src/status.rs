//! Whether the store accepts writes. Set by any actor whose fdatasync failed (the kernel may
//! have dropped the dirty pages, so no later write can be trusted to be durable); read by every
//! writer before it starts and by `stats`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::EngineError;

/// Read-only mode: once set, it stays until restart.
#[derive(Debug, Default)]
pub(crate) struct StoreStatus {
    read_only: AtomicBool,
    reason: OnceLock<String>,
}

impl StoreStatus {
    pub fn set_read_only(&self, reason: String) {
        if self.reason.set(reason.clone()).is_ok() {
            tracing::error!(%reason, "store is now read-only; restart after fixing the cause");
        }
        self.read_only.store(true, Ordering::Release);
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    pub fn check_writable(&self) -> Result<(), EngineError> {
        if self.is_read_only() {
            let reason = self.reason.get().cloned().unwrap_or_default();
            return Err(EngineError::ReadOnly(reason));
        }
        Ok(())
    }
}
