//! The engine's file layer: the one place where a record reaches the page cache, where the
//! page cache reaches the disk, and where readers read published files. The test-only fault
//! hooks (`crate::faults`) sit here and nowhere else.
//!
//! - `ActorFile`: an actor's write handle. `append_durably` is the one write → (on failure,
//!   cut back) → fdatasync → (on failure, read-only) sequence of every group commit;
//!   `fill_zeros` is the one zero-fill-ahead.
//! - `ReadFile`: a reader's positional read handle on a published file.
//!
//! A write is a positional `pwrite` on the actor's thread: it copies into the page cache and
//! does not wait for the disk, so handing it to io_uring would only add a worker-thread hop
//! (io_uring punts buffered file writes and every fsync to its io-wq threads).
//!
//! A sync is `fdatasync`. An actor alone on its thread calls it directly: the thread has
//! nothing else to do while the disk works, and requests queue in its inbox to form the next
//! group commit. An actor sharing its thread submits it through io_uring, so that the other
//! actors keep running. Measured on the 2-core VM (docs/benchmarks.md): the direct call saves
//! two context switches per batch, ~15% of the throughput at 32 appenders.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
    file: File,
    ring: compio::fs::File,
    sync_mode: SyncMode,
}

impl ActorFile {
    /// Opens an existing file for writing.
    pub async fn open(path: &Path, sync_mode: SyncMode) -> io::Result<ActorFile> {
        let file = OpenOptions::new().write(true).open(path)?;
        let ring = compio::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .await?;
        Ok(ActorFile {
            path: path.to_path_buf(),
            file,
            ring,
            sync_mode,
        })
    }

    /// Writes all of `bytes` at `offset` (into the page cache).
    pub fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(test)]
        match crate::faults::check(&self.path, crate::faults::FaultOp::Write) {
            Some(crate::faults::Fault::Fail(errno)) => return Err(crate::faults::error(errno)),
            Some(crate::faults::Fault::Short { keep }) => {
                self.file
                    .write_all_at(&bytes[..keep.min(bytes.len())], offset)?;
                return Err(crate::faults::error(5));
            }
            other => crate::faults::delay(other),
        }
        self.file.write_all_at(bytes, offset)
    }

    /// `write_all_at` for prepared zeros, with its own test-only fault hook.
    fn write_zeros_at(&self, zeros: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(test)]
        match crate::faults::check(&self.path, crate::faults::FaultOp::FillZeros) {
            Some(crate::faults::Fault::Fail(errno)) => return Err(crate::faults::error(errno)),
            Some(crate::faults::Fault::Short { keep }) => {
                self.file
                    .write_all_at(&zeros[..keep.min(zeros.len())], offset)?;
                return Err(crate::faults::error(5));
            }
            other => crate::faults::delay(other),
        }
        self.write_all_at(zeros, offset)
    }

    /// fdatasync: every write before it is on the disk when it returns `Ok`.
    pub async fn sync_data(&self) -> io::Result<()> {
        #[cfg(test)]
        match crate::faults::check(&self.path, crate::faults::FaultOp::Sync) {
            Some(crate::faults::Fault::Fail(errno)) => return Err(crate::faults::error(errno)),
            other => crate::faults::delay(other),
        }
        match self.sync_mode {
            SyncMode::Blocking => self.file.sync_data(),
            SyncMode::Ring => self.ring.sync_data().await,
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
        if let Err(source) = self.sync_data().await {
            let reason = format!("fdatasync of {} failed: {source}", self.path.display());
            status.set_read_only(reason.clone());
            return Err(EngineError::ReadOnly(reason));
        }
        Ok(())
    }

    /// Sets the length and makes the new length durable.
    pub async fn truncate(&self, len: u64) -> io::Result<()> {
        #[cfg(test)]
        if let Some(crate::faults::Fault::Fail(errno)) =
            crate::faults::check(&self.path, crate::faults::FaultOp::Truncate)
        {
            return Err(crate::faults::error(errno));
        }
        self.file.set_len(len)?;
        match self.sync_mode {
            SyncMode::Blocking => self.file.sync_all(),
            SyncMode::Ring => self.ring.sync_all().await,
        }
    }

    /// Sets the length, without syncing (the next sync covers it).
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// Starts an fdatasync that nothing waits for (for files whose durability is optional,
    /// like the blob index). A failure is logged.
    pub fn sync_data_in_background(&self) {
        let ring = self.ring.clone();
        let path = self.path.clone();
        compio::runtime::spawn(async move {
            if let Err(error) = ring.sync_data().await {
                tracing::warn!(file = %path.display(), %error, "background fdatasync failed");
            }
        })
        .detach();
    }
}

/// A reader's handle on a published file: positional reads from any thread, no lock.
#[derive(Debug)]
pub(crate) struct ReadFile {
    pub path: PathBuf,
    file: File,
}

impl ReadFile {
    pub fn open(path: PathBuf) -> io::Result<ReadFile> {
        let file = File::open(&path)?;
        Ok(ReadFile { path, file })
    }

    /// Fills `target` from `offset`, with an engine error naming the file.
    pub fn read_exact_at(&self, target: &mut [u8], offset: u64) -> Result<(), EngineError> {
        #[cfg(test)]
        if let Some(crate::faults::Fault::Fail(errno)) =
            crate::faults::check(&self.path, crate::faults::FaultOp::Read)
        {
            return Err(EngineError::io(&self.path, crate::faults::error(errno)));
        }
        self.file
            .read_exact_at(target, offset)
            .map_err(|source| EngineError::io(&self.path, source))
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

/// Gives the disk blocks of `file`'s bytes `0..len` back to the file system (a hole reads as
/// zeros; the file's length stays). `Ok(false)` when the file system cannot punch holes, or
/// another name shares the file (the bytes then stay allocated: a loss of space, not of data).
pub(crate) fn punch_prefix(file: &File, len: u64) -> io::Result<bool> {
    use rustix::fs::{FallocateFlags, fallocate};
    if len == 0 {
        return Ok(true);
    }
    // A shared inode's bytes are another name's data too (decision 0017). The store made its
    // files private at open; a link made since (by hand, while it runs) keeps its bytes.
    if link_count(file)? > 1 {
        return Ok(false);
    }
    match fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        0,
        len,
    ) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::OPNOTSUPP) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// Names (hard links) the inode of `file` has: 0 once its last name is gone (a replaced file
/// still held open), more than 1 while another name shares it — a backup on the same file
/// system hard-links sealed packs (`engine/backup.rs`), and an operator may `cp -al` a store.
pub(crate) fn link_count(file: &File) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.nlink())
}

/// Suffix of `make_private`'s copy before its rename.
pub(crate) const PRIVATE_SUFFIX: &str = ".private";

/// Gives `path` an inode of its own when another name shares it: its bytes are copied under a
/// temporary name (same permissions, fsynced), renamed over `path`, and the directory synced.
/// Answers whether a copy was made. Every file a store writes, cuts or punches in place goes
/// through this before the first such change (at open, and before a repair cuts a pack), so
/// that no store ever changes a byte another store or backup reads (decision 0017). A crash
/// mid-copy leaves only the temporary file, which the next call replaces.
pub(crate) fn make_private(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let mut source = File::open(path)?;
    if link_count(&source)? <= 1 {
        return Ok(false);
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(PRIVATE_SUFFIX);
    let temporary = path.with_file_name(name);
    let mode = source.metadata()?.permissions().mode();
    let mut copy = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&temporary)?;
    copy.set_permissions(std::fs::Permissions::from_mode(mode))?;
    let copied = io::copy(&mut source, &mut copy)?;
    let expected = source.metadata()?.len();
    if copied != expected {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("copied {copied} of {expected} bytes of {}", path.display()),
        ));
    }
    copy.sync_all()?;
    drop(copy);
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    tracing::info!(
        file = %path.display(),
        bytes = copied,
        "the file had another name (a hard link: a backup or a copy of the store); \
         it was copied so that this store's writes never reach the other"
    );
    Ok(true)
}

/// What `release_replaced` did with a replaced file's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Every block given back, a step at a time.
    Freed,
    /// Another name still holds the inode (a backup's hard link): its bytes are that name's
    /// data, so the file was only closed.
    Shared,
    /// A step failed; the last close frees the rest.
    Failed,
}

/// Gives back the blocks of a file whose name was replaced (a compaction renamed the new
/// version over it), `step_bytes` at a time with `pace(step_bytes)` after each step. Freeing
/// a large file in one go stalls the file system's journal, and every append's fdatasync
/// with it (docs/benchmarks.md), so the shrinking is gradual; a reader still holding the
/// file reads short and retries at the record's new location. Only a file no name holds any
/// more is shrunk: with another name, the bytes belong to it (decision 0017).
pub(crate) fn release_replaced(file: File, step_bytes: u64, mut pace: impl FnMut(u64)) -> Released {
    assert!(step_bytes > 0);
    match link_count(&file) {
        Ok(0) => {}
        Ok(_) => return Released::Shared,
        Err(_) => return Released::Failed,
    }
    let Ok(mut len) = file.metadata().map(|meta| meta.len()) else {
        return Released::Failed;
    };
    while len > 0 {
        len = len.saturating_sub(step_bytes);
        if file.set_len(len).is_err() {
            return Released::Failed;
        }
        pace(step_bytes);
    }
    Released::Freed
}
