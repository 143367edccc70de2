//! An actor's write handle (`ActorFile`): the write half of every group commit
//! (`append_durably`, or its halves `append_unsynced` and `sync_appended`, which a shard calls
//! apart to hand its appends on in between, decision 0014), recording the batch's records and
//! the fdatasync latency in the actor's `ActorMetrics`; `fill_zeros`, the one
//! zero-fill-ahead, cut back on failure like a record write.
//!
//! A write is a positional `pwrite` on the actor's thread: it copies into the page cache and
//! does not wait for the disk, so handing it to io_uring would only add a worker-thread hop
//! (io_uring punts buffered file writes and every fsync to its io-wq threads).
//!
//! A sync is `fdatasync`. An actor alone on its thread calls it directly: the thread has
//! nothing else to do while the disk works, and requests queue in its inbox to form the next
//! group commit. An actor sharing its thread submits it through io_uring, so that the other
//! actors keep running. Measured on the 2-core VM (benches/results/HISTORY.md): the direct call saves
//! two context switches per batch, ~15% of the throughput at 32 appenders.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::disk;
use crate::error::EngineError;
use crate::metrics::{ActorMetrics, add_single_writer};
use crate::status::StoreStatus;

/// How an actor does its I/O, fixed by configuration and placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ActorIo {
    pub sync_mode: SyncMode,
    /// Zero-fill space ahead of the writes (see `EngineConfig::preallocate`).
    pub preallocate: bool,
}

/// How an actor waits for fdatasync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncMode {
    /// A direct system call: for an actor alone on its thread.
    Blocking,
    /// Through io_uring: for an actor sharing its thread.
    Ring,
}

#[derive(Debug)]
pub(crate) struct ActorFile {
    path: PathBuf,
    /// Shared with the background syncs' tasks (`sync_data_in_background`), which pass it to
    /// the disk seam beside the ring's handle.
    file: std::sync::Arc<File>,
    ring: compio::fs::File,
    sync_mode: SyncMode,
}

impl ActorFile {
    /// Opens an existing file for writing.
    pub async fn open(path: &Path, sync_mode: SyncMode) -> io::Result<ActorFile> {
        let file = disk::open(path, disk::Open::Existing)?;
        let ring = disk::open_ring(path).await?;
        Ok(ActorFile {
            path: path.to_path_buf(),
            file: std::sync::Arc::new(file),
            ring,
            sync_mode,
        })
    }

    /// Writes all of `bytes` at `offset` (into the page cache).
    pub fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(result) = self.injected(crate::faults::FaultOp::Write, bytes, offset) {
            return result;
        }
        disk::write_at(&self.path, &self.file, bytes, offset)
    }

    /// `write_all_at` for prepared zeros, with its own fault hook (tests only).
    fn write_zeros_at(&self, zeros: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(result) = self.injected(crate::faults::FaultOp::FillZeros, zeros, offset) {
            return result;
        }
        self.write_all_at(zeros, offset)
    }

    /// A test's fault for a write of `bytes` at `offset`: a failure, a short write then EIO,
    /// or a delay (then `None`: the write goes on).
    #[cfg(any(test, feature = "fault-injection"))]
    fn injected(
        &self,
        op: crate::faults::FaultOp,
        bytes: &[u8],
        offset: u64,
    ) -> Option<io::Result<()>> {
        match crate::faults::check(&self.path, op) {
            Some(crate::faults::Fault::Fail(errno)) => Some(Err(crate::faults::error(errno))),
            Some(crate::faults::Fault::Short { keep }) => Some(
                disk::write_at(
                    &self.path,
                    &self.file,
                    &bytes[..keep.min(bytes.len())],
                    offset,
                )
                .and(Err(crate::faults::error(5))),
            ),
            other => {
                crate::faults::delay(other);
                None
            }
        }
    }

    /// fdatasync: every write before it is on the disk when it returns `Ok`.
    pub async fn fdatasync(&self) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        match crate::faults::check(&self.path, crate::faults::FaultOp::Sync) {
            Some(crate::faults::Fault::Fail(errno)) => return Err(crate::faults::error(errno)),
            other => crate::faults::delay(other),
        }
        match self.sync_mode {
            SyncMode::Blocking => disk::sync_data(&self.path, &self.file),
            SyncMode::Ring => disk::sync_ring(&self.path, &self.file, &self.ring, false).await,
        }
    }

    /// Writes `bytes` at `offset` and makes them durable: the write half of every group
    /// commit. A failed write is cut back to `offset`, so recovery never finds records whose
    /// requests were answered with an error. A failed fdatasync turns the store read-only: the
    /// kernel may have dropped the dirty pages, so a retry could report success for lost data.
    ///
    /// `records` (how many records `bytes` hold) and the fdatasync's latency go to the
    /// actor's `metrics`: this is the one place every group commit passes.
    pub async fn append_durably(
        &self,
        bytes: &[u8],
        offset: u64,
        records: u32,
        status: &StoreStatus,
        metrics: &ActorMetrics,
    ) -> Result<(), EngineError> {
        self.append_unsynced(bytes, offset, records, status, metrics)?;
        self.sync_appended(status, metrics).await
    }

    /// The first half of `append_durably`: the write (cut back on failure), into the page
    /// cache only. A shard calls the halves apart so that the sequencer can write the turns
    /// of a batch while the pack's fdatasync runs (decision 0014); whatever it does between
    /// them must not treat the records as durable.
    pub fn append_unsynced(
        &self,
        bytes: &[u8],
        offset: u64,
        records: u32,
        status: &StoreStatus,
        metrics: &ActorMetrics,
    ) -> Result<(), EngineError> {
        metrics.batch_records.record(u64::from(records));
        add_single_writer(&metrics.written_bytes, bytes.len() as u64);
        if let Err(source) = self.write_all_at(bytes, offset) {
            if let Err(cut) = self.set_len(offset) {
                status.set_read_only(format!(
                    "cutting {} after a failed write: {cut}",
                    self.path.display()
                ));
            }
            return Err(EngineError::from_write(&self.path, source));
        }
        Ok(())
    }

    /// The second half of `append_durably`: ONE fdatasync for what `append_unsynced` wrote
    /// (read-only on failure), its latency recorded.
    pub async fn sync_appended(
        &self,
        status: &StoreStatus,
        metrics: &ActorMetrics,
    ) -> Result<(), EngineError> {
        let started = Instant::now();
        let synced = self.sync_or_fail(status).await;
        metrics
            .fsync_us
            .record(started.elapsed().as_micros().try_into().unwrap_or(u64::MAX));
        synced
    }

    /// Writes `len` zero bytes at `offset` — the file's end — and syncs them: space prepared
    /// ahead of the records, so that later group commits overwrite allocated blocks instead of
    /// growing the file (about half the fdatasync cost on ext4/XFS). A failed write only costs
    /// speed and is returned as `Ok(false)` (the caller stops preparing); a failed sync turns
    /// the store read-only like any other.
    ///
    /// A failed write is cut back to `offset`, like a failed record write: a full disk
    /// takes what fits, so the write may have grown the file before it failed, and zeros the
    /// caller does not know of would outlive its bookkeeping. A shard sealing a pack relied on
    /// that bookkeeping, and a sealed pack that ends in zeros is refused at open
    /// (`blob/shard.rs` `rotate_pack`). If the cut fails too, the zeros stay: harmless at the
    /// end of the newest pack or of `turns.log`, and a seal cuts them whatever it believes.
    pub async fn fill_zeros(
        &self,
        offset: u64,
        len: u64,
        status: &StoreStatus,
    ) -> Result<bool, EngineError> {
        let zeros = vec![0u8; len as usize];
        if let Err(error) = self.write_zeros_at(&zeros, offset) {
            tracing::warn!(file = %self.path.display(), %error, "could not prepare space ahead of the records");
            if let Err(cut) = self.set_len(offset) {
                tracing::warn!(
                    file = %self.path.display(), error = %cut,
                    "could not cut back a failed zero-fill; zeros stay after the records"
                );
            }
            return Ok(false);
        }
        self.sync_or_fail(status).await.map(|()| true)
    }

    async fn sync_or_fail(&self, status: &StoreStatus) -> Result<(), EngineError> {
        if let Err(source) = self.fdatasync().await {
            let reason = format!("fdatasync of {} failed: {source}", self.path.display());
            status.set_read_only(reason.clone());
            return Err(EngineError::ReadOnly(reason));
        }
        Ok(())
    }

    /// Sets the length and makes the new length durable.
    pub async fn truncate(&self, len: u64) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(crate::faults::Fault::Fail(errno)) =
            crate::faults::check(&self.path, crate::faults::FaultOp::Truncate)
        {
            return Err(crate::faults::error(errno));
        }
        disk::set_len(&self.path, &self.file, len)?;
        match self.sync_mode {
            SyncMode::Blocking => disk::sync_all(&self.path, &self.file),
            SyncMode::Ring => disk::sync_ring(&self.path, &self.file, &self.ring, true).await,
        }
    }

    /// Sets the length, without syncing (the next sync covers it).
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        disk::set_len(&self.path, &self.file, len)
    }

    /// Starts an fdatasync that nothing waits for (for files whose durability is optional,
    /// like the blob index). A failure is logged.
    pub fn sync_data_in_background(&self) {
        let ring = self.ring.clone();
        let file = self.file.clone();
        let path = self.path.clone();
        compio::runtime::spawn(async move {
            if let Err(error) = disk::sync_ring(&path, &file, &ring, false).await {
                tracing::warn!(file = %path.display(), %error, "background fdatasync failed");
            }
        })
        .detach();
    }
}

/// Opens a file for an actor, with an engine error naming it.
pub(crate) async fn open_actor_file(
    path: &Path,
    sync_mode: SyncMode,
) -> Result<ActorFile, EngineError> {
    ActorFile::open(path, sync_mode)
        .await
        .map_err(|source| EngineError::io(path, source))
}
