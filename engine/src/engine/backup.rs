//! Online backup (issue 18): a consistent copy of the store, written while the engine serves.
//!
//! Every file of a store only grows (turns.log, packs, blobs.idx) or never changes (the meta
//! file, sealed packs), so a consistent copy is a set of *prefixes* taken at the right cut:
//!
//! 1. the durable watermark W of `turns.log` (published after each batch's fdatasync);
//! 2. then each shard's extent (`ShardRequest::Snapshot`, answered between two batches):
//!    every blob a turn ≤ W references was durable before W was published, so it lies inside
//!    that extent; the index prefix only describes records inside it.
//!
//! The copy takes `turns.log[..W × 128]`, each shard's sealed packs whole (hard-linked when
//! the file system allows: they never change again), the open pack up to its extent and the
//! index prefix; every file and directory is fsynced, and the meta file is written last
//! (temporary name, fsync, rename, directory fsync): a directory without it is refused by
//! `Engine::open`, so a backup cut short by a crash can never be mistaken for a store.
//! Opening the copy runs the ordinary recovery (packs past the index are scanned and
//! indexed); `verify` passes on it.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::file::ops::{self, sync_dir};
use crate::file::{BackgroundWriter, ScanFile, Throttle};
use crate::format::log_base::BASE_HEADER_BYTES;
use crate::format::turn_log::LOG_RECORD_BYTES;
use crate::pipeline::ShardSnapshot;
use crate::sequencer::log_base::LogBase;
use crate::store_dir::StoreDir;

/// Bytes copied per read/write step of a prefix copy (also the unit the turn count is taken
/// over: a whole number of 128-byte records).
const COPY_STEP_BYTES: usize = 1 << 20;
/// Bytes written to a copy between two fdatasyncs of it (`file::BackgroundWriter` says why).
const SYNC_STEP_BYTES: u64 = 2 << 20;
/// Byte 8 of a `turns.log` record is its kind; 1 is a turn (docs/storage.md).
const KIND_OFFSET: usize = 8;
const KIND_TURN: u8 = 1;

/// What a finished backup holds and cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupReport {
    pub dir: PathBuf,
    /// Turn records in the copy.
    pub turns: u64,
    /// Blob records in the copy.
    pub blobs: u64,
    /// Bytes of the copy: written plus hard-linked.
    pub bytes: u64,
    /// Of `bytes`, those hard-linked (sealed packs on the same file system).
    pub linked_bytes: u64,
    pub duration_ms: u64,
}

impl Engine {
    /// Writes a consistent copy of the store into `to` (absolute; absent or an empty
    /// directory) while appends and reads go on: everything acknowledged before the call is
    /// in it. Blocking file I/O on the caller's thread: do not call it from an engine or
    /// network-core thread. One backup at a time: waits for a running backup or collection.
    pub fn backup(&self, to: &Path) -> Result<BackupReport, EngineError> {
        self.check_open()?;
        // One at a time, and never during a collection's switch-over (it replaces packs a
        // backup hard-links, and the log's base): a round waits for the backup before it
        // replaces a file. The maintenance lock is shared with the replica's cuts: shipping
        // goes on while a backup copies (issue 46).
        let _one_backup = self.inner.collector.one_backup()?;
        let _no_collection = self.inner.collector.maintenance_shared()?;
        self.backup_now(to)
    }

    fn backup_now(&self, to: &Path) -> Result<BackupReport, EngineError> {
        let started = Instant::now();
        let source = StoreDir::new(&self.inner.config.data_dir);
        check_target(&source.root, to)?;
        let target = StoreDir::new(to);

        // The cut: the log's watermark first, then each shard's extent (see the module doc).
        let published = &self.inner.published;
        let log_records = published.turns.durable_record_id();
        let shards = self.shard_snapshots()?;

        let mut throttle = Throttle::new(self.inner.config.backup_bytes_per_s_max);
        let mut report = BackupReport {
            dir: to.to_path_buf(),
            turns: 0,
            blobs: 0,
            bytes: 0,
            linked_bytes: 0,
            duration_ms: 0,
        };
        for (shard, snapshot) in shards.iter().enumerate() {
            copy_shard(
                &mut throttle,
                &source,
                &target,
                shard as u16,
                snapshot,
                &mut report,
            )?;
            report.blobs += snapshot.blobs;
        }
        copy_log(
            &mut throttle,
            &source,
            &target,
            published.turns.base(),
            log_records,
            &mut report,
        )?;
        sync(&target.root)?;

        // Last: the meta file makes the directory a store (renamed in, the directory synced).
        let meta = target.meta_path();
        let temporary = meta.with_extension("meta.tmp");
        let written = copy(
            &mut throttle,
            &source.meta_path(),
            &temporary,
            0,
            u64::MAX,
            None,
        )?;
        report.bytes += written.bytes;
        written
            .writer
            .finish_renamed(&meta)
            .map_err(|error| EngineError::from_write(&meta, error))?;
        report.duration_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            dir = %to.display(),
            turns = report.turns,
            blobs = report.blobs,
            bytes = report.bytes,
            linked_bytes = report.linked_bytes,
            duration_ms = report.duration_ms,
            "backup written"
        );
        Ok(report)
    }
}

/// The target is absolute, outside the data directory, and absent or an empty directory.
/// The log: its compacted base whole (no compaction installs one while a backup holds the
/// maintenance lock), then `turns.log` after the base at the same offsets (the target has a
/// hole where the base stands).
fn copy_log(
    throttle: &mut Throttle,
    source: &StoreDir,
    target: &StoreDir,
    base: Option<Arc<LogBase>>,
    log_records: u64,
    report: &mut BackupReport,
) -> Result<(), EngineError> {
    let log_bytes = log_records * LOG_RECORD_BYTES as u64;
    let skip_bytes = base
        .as_ref()
        .map_or(0, |base| base.through() * LOG_RECORD_BYTES as u64);
    if let Some(base) = &base {
        // Its slots follow a header of one slot: turn records are counted after it.
        let (written, turns) = copy_range(
            throttle,
            base.path(),
            &target.turns_base_path(),
            0,
            base.header.file_bytes(),
            Some(BASE_HEADER_BYTES as u64),
        )?;
        report.bytes += written;
        report.turns += turns;
    }
    let (written, turns) = copy_range(
        throttle,
        &source.turns_log_path(),
        &target.turns_log_path(),
        skip_bytes.min(log_bytes),
        log_bytes,
        Some(0),
    )?;
    report.bytes += written;
    report.turns += turns;
    Ok(())
}

fn check_target(data_dir: &Path, to: &Path) -> Result<(), EngineError> {
    if !to.is_absolute() {
        return Err(EngineError::InvalidArgument(format!(
            "backup directory {} is not an absolute path (it is a path on the server's host)",
            to.display()
        )));
    }
    // Inside the store? Decided on the nearest existing ancestor, before anything is created
    // (a refused target must not leave a directory behind in the store).
    let data = std::fs::canonicalize(data_dir).map_err(|error| EngineError::io(data_dir, error))?;
    let existing = to
        .ancestors()
        .find(|ancestor| ancestor.exists())
        .unwrap_or(Path::new("/"));
    let existing =
        std::fs::canonicalize(existing).map_err(|error| EngineError::io(existing, error))?;
    if existing.starts_with(&data) {
        return Err(EngineError::InvalidArgument(format!(
            "backup directory {} lies inside the data directory {}; choose one outside it",
            to.display(),
            data_dir.display()
        )));
    }
    match std::fs::read_dir(to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(EngineError::InvalidArgument(format!(
                    "backup directory {} is not empty; give a new or empty directory",
                    to.display()
                )));
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            ops::create_dir_all(to).map_err(|error| EngineError::from_write(to, error))?;
        }
        Err(error) => return Err(EngineError::io(to, error)),
    }
    // Again on the created path (a symbolic link below the ancestor could point inside).
    let target = std::fs::canonicalize(to).map_err(|error| EngineError::io(to, error))?;
    if target.starts_with(&data) {
        return Err(EngineError::InvalidArgument(format!(
            "backup directory {} lies inside the data directory {}; choose one outside it",
            to.display(),
            data_dir.display()
        )));
    }
    Ok(())
}

/// One shard: sealed packs whole (hard-linked, else copied), the open pack and the index up to
/// the snapshot's extent, then the directory synced.
fn copy_shard(
    throttle: &mut Throttle,
    source: &StoreDir,
    target: &StoreDir,
    shard: u16,
    snapshot: &ShardSnapshot,
    report: &mut BackupReport,
) -> Result<(), EngineError> {
    let dir = target.shard_dir(shard);
    ops::create_dir_all(&dir).map_err(|error| EngineError::from_write(&dir, error))?;
    for pack_id in 0..snapshot.pack_id {
        let from = source.pack_path(shard, pack_id);
        let to = target.pack_path(shard, pack_id);
        let len = std::fs::metadata(&from)
            .map_err(|error| EngineError::io(&from, error))?
            .len();
        // Sealed packs never change again (they are cut to their last record when sealed),
        // so a second name for the same blocks is as good as a copy, and free.
        if ops::hard_link(&from, &to).is_ok() {
            report.bytes += len;
            report.linked_bytes += len;
        } else {
            report.bytes += copy_prefix(throttle, &from, &to, len)?;
        }
    }
    let open_pack = source.pack_path(shard, snapshot.pack_id);
    let open_pack_copy = target.pack_path(shard, snapshot.pack_id);
    report.bytes += copy_prefix(throttle, &open_pack, &open_pack_copy, snapshot.pack_end)?;
    let index = source.blob_index_path(shard);
    let index_copy = target.blob_index_path(shard);
    report.bytes += copy_prefix(throttle, &index, &index_copy, snapshot.index_end)?;
    sync(&dir)?;
    if let Some(blobs_dir) = dir.parent() {
        sync(blobs_dir)?;
    }
    Ok(())
}

/// Copies the first `len` bytes of `from` (all of it when shorter) into a new file `to`,
/// fsynced. Answers the bytes copied.
fn copy_prefix(
    throttle: &mut Throttle,
    from: &Path,
    to: &Path,
    len: u64,
) -> Result<u64, EngineError> {
    copy_range(throttle, from, to, 0, len, None).map(|(copied, _)| copied)
}

/// `copy_prefix` of the bytes `start..len` only, at the same offsets in `to` (a hole before
/// `start`). With `count_turns_from`, also counts the turn records (128-byte slots) from
/// that offset on. Answers the bytes copied and the turns counted.
fn copy_range(
    throttle: &mut Throttle,
    from: &Path,
    to: &Path,
    start: u64,
    len: u64,
    count_turns_from: Option<u64>,
) -> Result<(u64, u64), EngineError> {
    let copied = copy(throttle, from, to, start, len, count_turns_from)?;
    copied
        .writer
        .finish()
        .map_err(|error| EngineError::from_write(to, error))?;
    Ok((copied.bytes, copied.turns))
}

/// A copy written but not finished: the caller finishes it (or renames it in).
struct Copied<'t> {
    writer: BackgroundWriter<'t>,
    bytes: u64,
    turns: u64,
}

/// Copies the bytes `start..len` of `from` (to its end when shorter) into the new file `to`,
/// through the background writer (throttled, synced every `SYNC_STEP_BYTES`).
fn copy<'t>(
    throttle: &'t mut Throttle,
    from: &Path,
    to: &Path,
    start: u64,
    len: u64,
    count_turns_from: Option<u64>,
) -> Result<Copied<'t>, EngineError> {
    let mut reader = ScanFile::open(from).map_err(|error| EngineError::io(from, error))?;
    let mut writer = BackgroundWriter::create_new(to, SYNC_STEP_BYTES, throttle)
        .map_err(|error| EngineError::from_write(to, error))?;
    reader
        .seek(SeekFrom::Start(start))
        .map_err(|error| EngineError::io(from, error))?;
    writer
        .skip_to(start)
        .map_err(|error| EngineError::from_write(to, error))?;
    let mut buffer = vec![0u8; COPY_STEP_BYTES];
    let mut copied = start;
    let mut turns = 0u64;
    while copied < len {
        let want = (len - copied).min(COPY_STEP_BYTES as u64) as usize;
        let read = read_full(&mut reader, &mut buffer[..want])
            .map_err(|error| EngineError::io(from, error))?;
        if read == 0 {
            break;
        }
        let chunk = &buffer[..read];
        if let Some(from) = count_turns_from {
            // Whole records: `COPY_STEP_BYTES`, `start` and `from` are multiples of 128, and
            // `read_full` fills the buffer unless the file ends.
            let skip = (from.saturating_sub(copied) as usize).min(chunk.len());
            turns += chunk[skip..]
                .chunks_exact(LOG_RECORD_BYTES)
                .filter(|record| record[KIND_OFFSET] == KIND_TURN)
                .count() as u64;
        }
        writer
            .write(chunk)
            .map_err(|error| EngineError::from_write(to, error))?;
        copied += read as u64;
    }
    if len != u64::MAX && copied != len {
        // The extent came from the actor that wrote it: a shorter file lost durable data.
        return Err(EngineError::Io {
            file: from.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{copied} bytes where {len} were durable"),
            ),
        });
    }
    Ok(Copied {
        writer,
        bytes: copied - start,
        turns,
    })
}

/// Reads until `buffer` is full or the file ends (a plain `read` may return less).
fn read_full(reader: &mut ScanFile, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

fn sync(dir: &Path) -> Result<(), EngineError> {
    sync_dir(dir).map_err(|error| EngineError::from_write(dir, error))
}
