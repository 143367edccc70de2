//! The background writer: every file the engine writes off the acknowledgement path — a
//! collection's pack and index copies (`gc/compact.rs`), a log compaction's new base
//! (`log_compaction.rs`), an online backup's copies (`engine/backup.rs`), a format
//! migration's new `turns.log` (`sequencer/migrate.rs`) — goes through one `BackgroundWriter`,
//! which owns the file and every write, sync and rename of it:
//!
//! - **throttled** (`Throttle`): a background copy shares the disk with every append's
//!   fdatasync, so it is held to a byte rate (0: none);
//! - **synced every `sync_step_bytes`**: without intermediate syncs the kernel gathers the
//!   whole copy as dirty pages and writes it back at once, and every append's fdatasync waits
//!   behind that flood (measured: append p99 149 ms during a 2.9 GB backup without them, 6 ms
//!   with a sync every 8 MiB; benches/results/HISTORY.md#online-backup);
//! - **finished durably**: `finish` syncs data and length; `finish_renamed` then renames the
//!   file over its target and syncs the directory, so a crash leaves the old file or the new
//!   one, never half of either.
//!
//! One struct owns the file's calls, each through the disk seam (`disk.rs`), so that the
//! simulated disk sees them (issue 36).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::disk;

/// Holds a background copy to `bytes_per_s_max` on average (0: no limit): one per copy job,
/// shared by the files it writes and the reads it makes.
pub(crate) struct Throttle {
    bytes_per_s_max: u64,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    pub fn new(bytes_per_s_max: u64) -> Throttle {
        Throttle {
            bytes_per_s_max,
            started: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts `bytes` moved; sleeps while the copy is ahead of its allowance.
    pub fn take(&mut self, bytes: u64) {
        self.bytes += bytes;
        if self.bytes_per_s_max == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_s_max as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

/// Bytes gathered before one positional write.
const BUFFER_BYTES: usize = 1 << 20;

/// A new file written sequentially off the acknowledgement path (see the module doc).
pub(crate) struct BackgroundWriter<'t> {
    path: PathBuf,
    file: File,
    /// Bytes not written yet; they go at `position`.
    buffer: Vec<u8>,
    position: u64,
    /// Bytes written since the last sync.
    unsynced_bytes: u64,
    sync_step_bytes: u64,
    throttle: &'t mut Throttle,
}

impl<'t> BackgroundWriter<'t> {
    /// Creates `path` (emptied if it exists: a leftover of an interrupted job).
    pub fn create(
        path: &Path,
        sync_step_bytes: u64,
        throttle: &'t mut Throttle,
    ) -> io::Result<BackgroundWriter<'t>> {
        let file = disk::open(path, disk::Open::CreateOrEmpty)?;
        Ok(Self::over(path, file, sync_step_bytes, throttle))
    }

    /// Creates `path`, which must not exist (a backup never overwrites).
    pub fn create_new(
        path: &Path,
        sync_step_bytes: u64,
        throttle: &'t mut Throttle,
    ) -> io::Result<BackgroundWriter<'t>> {
        let file = disk::open(path, disk::Open::CreateNew)?;
        Ok(Self::over(path, file, sync_step_bytes, throttle))
    }

    fn over(
        path: &Path,
        file: File,
        sync_step_bytes: u64,
        throttle: &'t mut Throttle,
    ) -> BackgroundWriter<'t> {
        assert!(sync_step_bytes > 0, "a background copy syncs in steps");
        BackgroundWriter {
            path: path.to_path_buf(),
            file,
            buffer: Vec::with_capacity(BUFFER_BYTES),
            position: 0,
            unsynced_bytes: 0,
            sync_step_bytes,
            throttle,
        }
    }

    /// Where the next byte goes (bytes written so far, holes included).
    pub fn position(&self) -> u64 {
        self.position + self.buffer.len() as u64
    }

    /// The next bytes go at `offset`, past the end: the file has a hole before them (a
    /// backup's log after its compacted base).
    pub fn skip_to(&mut self, offset: u64) -> io::Result<()> {
        self.flush()?;
        assert!(
            offset >= self.position,
            "a background file is written forward"
        );
        self.position = offset;
        Ok(())
    }

    /// Appends `bytes`: buffered, counted against the throttle, synced every step.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buffer.extend_from_slice(bytes);
        self.throttle.take(bytes.len() as u64);
        self.unsynced_bytes += bytes.len() as u64;
        if self.buffer.len() >= BUFFER_BYTES {
            self.flush()?;
        }
        if self.unsynced_bytes >= self.sync_step_bytes {
            self.flush()?;
            disk::sync_data(&self.path, &self.file)?;
            self.unsynced_bytes = 0;
        }
        Ok(())
    }

    /// Counts `bytes` the job read for this copy against its throttle (a compaction reads
    /// what it copies from the same disk).
    pub fn count_read(&mut self, bytes: u64) {
        self.throttle.take(bytes);
    }

    /// Writes `bytes` at `offset`, before the position (a header filled in last).
    pub fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.flush()?;
        assert!(
            offset + bytes.len() as u64 <= self.position,
            "a rewrite stays within what was written"
        );
        disk::write_at(&self.path, &self.file, bytes, offset)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        disk::write_at(&self.path, &self.file, &self.buffer, self.position)?;
        self.position += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Writes what is buffered and makes the file durable, its length (holes included)
    /// too. Answers its length.
    pub fn finish(mut self) -> io::Result<u64> {
        self.flush()?;
        if self.file.metadata()?.len() < self.position {
            disk::set_len(&self.path, &self.file, self.position)?;
        }
        disk::sync_all(&self.path, &self.file)?;
        Ok(self.position)
    }

    /// `finish`, then the file renamed over `target` and the directory synced: a crash
    /// leaves the old `target` or the new one. Answers its length.
    pub fn finish_renamed(self, target: &Path) -> io::Result<u64> {
        let path = self.path.clone();
        let len = self.finish()?;
        crate::file::ops::rename_durably(&path, target)?;
        Ok(len)
    }
}
