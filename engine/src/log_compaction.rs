//! Log compaction (issue 15, decision 0011): the last step of a collection round gives back
//! the `turns.log` slots of collected turns that no live history needs.
//!
//! **What goes.** A turn record (with its extras slots) goes when the turn is collected (a
//! durable gc-dead record names it) and no record that stays needs it: it is not owned by a
//! live context (its own turns on every branch, what a clone inherited, a fork's base — those
//! stay even below a floor, so a context's turn log and every replay check still find them)
//! and it is no ancestor of a turn that stays (skip pointers, explicit parents and replay's
//! depth checks read ancestors). In practice: the histories of deleted contexts. Context
//! records and metadata records all stay (a few per context). Nothing that goes can be named
//! again: the sequencer refuses a fork, parent or link naming a collected turn, and a context
//! created later owns only turns that stay.
//!
//! **How, crash-safe.** The kept slots of `1..=W` (the round's watermark, a batch boundary)
//! are written to `turns.base.compact` after a header (`format/log_base.rs`), synced, renamed
//! to `turns.base`, the directory synced; then read back and checked, published to readers
//! (`TurnsView::publish_base`), and last the slots below W leave `turns.log` as a hole
//! (`fallocate(PUNCH_HOLE)`: TurnIDs keep their offsets, so records after W stay one `pread`
//! away and the sequencer appends as before). A crash before the rename leaves a `.compact`
//! file that the next open deletes; after it, the open loads the new base and punches again
//! (idempotent). Readers that raced the punch read zeros and retry through the base.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{EngineError, OpenError};
use crate::file::ops::{remove, sync_dir};
use crate::file::{BackgroundWriter, Throttle, punch_prefix};
use crate::format::log_base::{BASE_HEADER_BYTES, BaseHeader};
use crate::format::stream_meta::is_stream_op;
use crate::format::turn_log::{LOG_RECORD_BYTES, LogRecord, turn_extra_slots};
use crate::sequencer::log_base::LogBase;
use crate::sequencer::view::TurnsView;
use crate::store_dir::StoreDir;

/// The file system's block: only whole blocks can be punched out of `turns.log`.
const PUNCH_ALIGN_BYTES: u64 = 4096;
/// The new base is synced every this many bytes (`file::BackgroundWriter`), so that the page
/// cache never holds much of it when an append's fdatasync comes (the same step as a pack
/// compaction's).
const SYNC_STEP_BYTES: u64 = 512 << 10;

/// What one log compaction is to drop: turn records (with their extras slots) by TurnID, and
/// the records of ended streams (open, deltas, end; with their continuation slots, issue 32).
#[derive(Debug)]
pub(crate) struct LogPlan {
    /// The round's watermark: the slots `1..=watermark` are compacted.
    pub watermark: u64,
    /// The new base stands for slots `1..=through` (at least `watermark`): past it only when
    /// a replica generation starts with its TurnIDs raised (`Collector::raise_record_floor`,
    /// issue 46 item 8), where slots `watermark + 1..=through` never held a record.
    pub through: u64,
    /// Indexed by record id: the turn record (or stream record) there goes.
    pub drop: Vec<bool>,
    pub turns_dropped: u64,
    pub logical_bytes_dropped: u64,
}

#[derive(Debug, Default)]
pub(crate) struct LogCompacted {
    pub slots_dropped: u64,
    /// Bytes `turns.base` plus the allocated part of `turns.log` below the watermark shrank by.
    pub bytes_reclaimed: u64,
    /// `false` when the file system could not punch holes (the bytes stay allocated).
    pub punched: bool,
}

/// At open: a compaction's leftover `.compact` file goes (it never was the base), the base is
/// loaded and checked, and `turns.log` below it is punched again (a crash may have come
/// between the rename and the punch).
pub(crate) fn open_base(store: &StoreDir) -> Result<Option<Arc<LogBase>>, OpenError> {
    let leftover = store.turns_base_compact_path();
    match remove(&leftover) {
        Ok(()) => {
            tracing::info!(file = %leftover.display(), "removed an unfinished log compaction");
            sync_dir(&store.root).map_err(|source| OpenError::io(&store.root, source))?;
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(OpenError::io(&leftover, source)),
    }
    let Some(base) = LogBase::load(&store.turns_base_path())? else {
        return Ok(None);
    };
    let log = store.turns_log_path();
    punch_below(&log, base.through()).map_err(|source| OpenError::io(&log, source))?;
    Ok(Some(Arc::new(base)))
}

/// Punches `turns.log`'s whole blocks below record `through + 1`.
fn punch_below(log: &Path, through: u64) -> std::io::Result<bool> {
    let end = through * LOG_RECORD_BYTES as u64;
    let len = end - end % PUNCH_ALIGN_BYTES;
    punch_prefix(log, len)
}

/// Writes the new base without the plan's records, installs it and punches the log. Blocking
/// file I/O on the collector's thread, throttled to `throttle`. `exclusive` is held from the
/// install through the punch: the readers of the store's files (backups, the replica's cuts)
/// read the base and the log's slots and must not see either change under them.
pub(crate) fn compact_log<G>(
    store: &StoreDir,
    turns: &TurnsView,
    plan: &LogPlan,
    throttle: &mut Throttle,
    stopping: &AtomicBool,
    exclusive: impl FnOnce() -> Result<G, EngineError>,
) -> Result<LogCompacted, EngineError> {
    let old_base = turns.base();
    let old_through = old_base.as_ref().map_or(0, |base| base.through());
    assert!(
        plan.through > old_through && plan.through >= plan.watermark,
        "a compaction moves the base forward"
    );
    assert!(
        plan.watermark >= old_through,
        "the watermark is past the old base"
    );
    let old_bytes = old_base.as_ref().map_or(0, |base| base.header.file_bytes())
        + (plan.watermark - old_through) * LOG_RECORD_BYTES as u64;

    let path = store.turns_base_compact_path();
    let write = |source| EngineError::from_write(&path, source);
    let mut out = BackgroundWriter::create(&path, SYNC_STEP_BYTES, throttle).map_err(write)?;
    // The header goes in last, when the counts are known.
    out.write(&[0u8; BASE_HEADER_BYTES]).map_err(write)?;
    let mut header = next_header(old_base.as_deref(), plan);
    let mut slots_dropped = 0u64;
    // The turn (or stream record) whose continuation slots are being dropped with it, and how
    // many are left.
    let mut dropping: (u64, u32) = (0, 0);
    let mut failure: Option<std::io::Error> = None;
    turns
        .for_each_slot(plan.watermark, |slot| {
            let record = match LogRecord::decode(slot) {
                Ok(Some(record)) => record,
                // Durable slots were checked when they were read at open or written.
                _ => {
                    return Err(EngineError::Corrupt(crate::error::Corruption::new(
                        turns.path(),
                        0,
                        "a durable slot does not decode during log compaction",
                    )));
                }
            };
            let dropped = drops_slot(plan, &record, &mut dropping);
            if dropped {
                slots_dropped += 1;
                return Ok(());
            }
            if stopping.load(Ordering::Acquire) {
                return Err(EngineError::ShutDown);
            }
            // A slot read and a slot written.
            out.count_read(LOG_RECORD_BYTES as u64);
            if let Err(error) = out.write(slot) {
                failure = Some(error);
                return Err(EngineError::ShutDown);
            }
            header.record_count += 1;
            Ok(())
        })
        .map_err(|error| failure.take().map_or(error, write))?;
    assert_eq!(dropping.1, 0, "the watermark splits a dropped turn's slots");
    out.write_at(0, &header.encode()).map_err(write)?;
    out.finish().map_err(write)?;
    // Synced before the lock is taken: the readers wait only for the rename and the punch.
    let _exclusive = exclusive()?;
    let base_path = store.turns_base_path();
    crate::file::ops::rename_durably(&path, &base_path)
        .map_err(|source| EngineError::from_write(&base_path, source))?;

    // Read back and checked before readers use it (and before the log's copy goes).
    let base = load_new_base(&base_path)?;
    assert_eq!(base.header, header, "the base read back is the one written");
    turns.publish_base(Arc::new(base), plan.watermark);

    let punched = punch_log(store, plan.through)?;
    let new_bytes = header.file_bytes();
    Ok(LogCompacted {
        slots_dropped,
        bytes_reclaimed: if punched {
            old_bytes.saturating_sub(new_bytes)
        } else {
            0
        },
        punched,
    })
}

/// Whether the plan drops this slot: a planned turn or stream record, and the continuation
/// slots after it (`dropping`: the record whose slots are being dropped, and how many are
/// left).
fn drops_slot(plan: &LogPlan, record: &LogRecord, dropping: &mut (u64, u32)) -> bool {
    match record {
        LogRecord::Turn(turn) if plan.drop.get(turn.turn_id.0 as usize) == Some(&true) => {
            *dropping = (
                turn.turn_id.0,
                u32::from(turn_extra_slots(turn.extras_len as usize)),
            );
            true
        }
        LogRecord::Meta(head) if plan.drop.get(head.record_id as usize) == Some(&true) => {
            // Pair of the plan: only stream records are planned among metadata.
            assert!(
                is_stream_op(head.op),
                "record {} is no stream record",
                head.record_id
            );
            *dropping = (head.record_id, head.slot_count - 1);
            true
        }
        LogRecord::Continuation(continuation)
            if dropping.1 > 0 && continuation.head_record_id == dropping.0 =>
        {
            dropping.1 -= 1;
            true
        }
        _ => false,
    }
}

/// The new base's header before its records are counted: the plan's drops added to the old
/// base's.
fn next_header(old_base: Option<&LogBase>, plan: &LogPlan) -> BaseHeader {
    BaseHeader {
        through_record_id: plan.through,
        record_count: 0,
        turns_dropped: old_base.map_or(0, |base| base.header.turns_dropped) + plan.turns_dropped,
        logical_bytes_dropped: old_base.map_or(0, |base| base.header.logical_bytes_dropped)
            + plan.logical_bytes_dropped,
    }
}

/// Frees `turns.log`'s blocks below `through` (the base holds them now); whether the file
/// system could.
fn punch_log(store: &StoreDir, through: u64) -> Result<bool, EngineError> {
    let log_path = store.turns_log_path();
    let punched =
        punch_below(&log_path, through).map_err(|source| EngineError::io(&log_path, source))?;
    if !punched {
        tracing::warn!(
            log = %log_path.display(),
            "the file system cannot punch holes: turns.log keeps its compacted prefix's blocks"
        );
    }
    Ok(punched)
}

/// The base just installed, read back (damage there is corruption: it was just written).
fn load_new_base(base_path: &Path) -> Result<LogBase, EngineError> {
    LogBase::load(base_path)
        .map_err(|error| {
            EngineError::Corrupt(crate::error::Corruption::new(
                base_path,
                0,
                format!("the new base does not read back: {error}"),
            ))
        })?
        .ok_or_else(|| EngineError::io(base_path, std::io::ErrorKind::NotFound.into()))
}
