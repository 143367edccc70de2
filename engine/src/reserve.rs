//! The disk reserve (issue 29 item 3): `DIR/RESERVE`, a file of `disk_reserve_bytes`
//! allocated blocks that only garbage collection may give up. A store that filled its file
//! system (appends answered NO_SPACE) can then still collect: compaction writes a pack's live
//! records to a new file before the old one's blocks come back, and without room for that copy
//! no collection could ever run (etcd and CockroachDB keep such a ballast for the same
//! reason). The collector gives the reserve up when a compaction hits ENOSPC, retries, and
//! takes it back after the round when the space is there again; the store takes it at open.
//!
//! The file holds no data: it is never copied by a backup, never read, and a shared one (a
//! `cp -al` copy of the store) is replaced rather than grown (decision 0017).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::file::ops::{allocate_durably, remove, sync_dir};

/// The reserve's file name in the data directory.
pub const RESERVE_FILE: &str = "RESERVE";

/// Whether the reserve is held, and what to do about it. One per store, used by the opener and
/// the collector (never on a request path).
#[derive(Debug)]
pub(crate) struct DiskReserve {
    path: PathBuf,
    bytes: u64,
    /// Whether `path` holds `bytes` allocated bytes now.
    held: Mutex<bool>,
}

impl DiskReserve {
    /// The reserve of the store in `dir`, of `bytes` (0: none; an existing file is removed).
    /// Takes it at once when the file system has room, else says so and goes on without it.
    pub fn open(dir: &Path, bytes: u64) -> io::Result<DiskReserve> {
        let reserve = DiskReserve {
            path: dir.join(RESERVE_FILE),
            bytes,
            held: Mutex::new(false),
        };
        match std::fs::metadata(&reserve.path) {
            Ok(metadata) => {
                use std::os::unix::fs::MetadataExt;
                // Another size than asked, or shared with another name: start afresh.
                if bytes == 0 || metadata.len() != bytes || metadata.nlink() > 1 {
                    remove(&reserve.path)?;
                    sync_dir(dir)?;
                } else {
                    *reserve.lock() = true;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        reserve.take_back();
        Ok(reserve)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Gives the reserve's blocks back to the file system (the collector, on ENOSPC). Answers
    /// whether there was one to give.
    pub fn give_up(&self) -> bool {
        let mut held = self.lock();
        if !*held {
            return false;
        }
        *held = false;
        match remove(&self.path) {
            Ok(()) => {
                if let Some(dir) = self.path.parent() {
                    let _ = sync_dir(dir);
                }
                tracing::warn!(
                    reserve = %self.path.display(),
                    bytes = self.bytes,
                    "the disk is full: the disk reserve is given up so that garbage collection \
                     can compact; it is taken back once there is room"
                );
                true
            }
            Err(error) => {
                tracing::warn!(reserve = %self.path.display(), %error, "removing the disk reserve failed");
                false
            }
        }
    }

    /// Allocates the reserve again when it is not held and the file system has room; a
    /// failure leaves no partial file and is only logged (the next round or open retries).
    pub fn take_back(&self) {
        let mut held = self.lock();
        if *held || self.bytes == 0 {
            return;
        }
        match allocate_durably(&self.path, self.bytes) {
            Ok(()) => {
                *held = true;
                tracing::debug!(reserve = %self.path.display(), bytes = self.bytes, "disk reserve held");
            }
            Err(error) => {
                let _ = remove(&self.path);
                tracing::warn!(
                    reserve = %self.path.display(),
                    bytes = self.bytes,
                    %error,
                    "no room for the disk reserve; garbage collection on a full disk may fail \
                     until there is"
                );
            }
        }
    }
}
