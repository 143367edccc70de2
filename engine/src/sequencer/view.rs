//! The sequencer's published state, as readers on any thread see it: `turns.log` up to the
//! durable watermark, the head of every context, the sequencer's counters. The sequencer is
//! the only writer; it publishes after its fdatasync returned, with release stores that
//! readers pair with acquire loads, so readers see only durable state.
//!
//! - `TurnsView`: records up to the watermark, from the compacted base (`LogBase`, swapped in
//!   by the collector) or `turns.log`; a record cache of 65,536 slots (by Fibonacci hashing
//!   of the record id, emptied when a base is swapped in) and a skip-links cache (TurnID,
//!   parent, skip target and depth in one sequence-locked slot) for `ancestor` walks, both
//!   filled by readers and by the sequencer with each batch's turns before its watermark
//!   moves (`fill_caches`, decision 0015), so reads of new turns make no `pread`;
//!   `scan_range` for sequential scans safe against a compaction;
//! - `HeadTable`: segmented atomics by ContextID (a deleted context holds `DELETED_HEAD`);
//! - `ContextsView`: the metadata snapshot, swapped in after the heads; `SequencerCounters`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{Corruption, EngineError};
use crate::file::ReadFile;
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::{
    LOG_RECORD_BYTES, LogRecord, TurnRecord, record_offset, turn_extras_body,
};
use crate::ids::{CONTEXTS_MAX, ContextId, TurnId};
use crate::sequencer::contexts::Contexts;
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::heads::DELETED_HEAD;
use crate::sequencer::log_base::{LogBase, read_slots};
use crate::skip::{self, Links};

/// Decoded records kept for readers, direct-mapped (`cache_slot`): the records
/// a read walks (the newest turns of active contexts, their skip targets) come from memory
/// instead of one `pread` each (issue 19). About 200 bytes per cached record: ~13 MiB full.
const RECORD_CACHE_SLOTS: usize = 1 << 16;

/// Turns whose skip-walk links readers keep: 40 bytes each, 2.5 MiB.
const SKIP_LINKS_SLOTS: usize = 1 << 16;

const CACHE_SLOT_BITS: u32 = 16;
const _: () = assert!(RECORD_CACHE_SLOTS == 1 << CACHE_SLOT_BITS);
const _: () = assert!(SKIP_LINKS_SLOTS == 1 << CACHE_SLOT_BITS);

/// The slot of a record id in the readers' caches: Fibonacci hashing, not the id modulo the
/// slot count. Skip targets sit at depths that are multiples of large powers of two, so on
/// one context's chain their ids repeat modulo 65,536 and, with a plain modulo, evicted one
/// another (and the chain's first turns) at every walk to depth 0.
fn cache_slot(record_id: u64) -> usize {
    (record_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_SLOT_BITS)) as usize
}

/// One slot of the skip cache: a sequence lock over four words, written by whichever reader
/// missed (a writer that finds it locked leaves it: a cache may drop a fill), read without
/// locks (a read that overlaps a write sees the sequence move and counts as a miss).
#[derive(Debug, Default)]
struct SkipLinksSlot {
    /// Even: stable; odd: being written.
    sequence: AtomicU64,
    turn_id: AtomicU64,
    parent_turn_id: AtomicU64,
    skip_turn_id: AtomicU64,
    depth: AtomicU64,
}

impl SkipLinksSlot {
    fn get(&self, turn_id: TurnId) -> Option<Links> {
        let before = self.sequence.load(Ordering::Acquire);
        // An empty slot holds id 0 (`TurnId::NONE`), which names no turn: never a hit.
        if turn_id.is_none() || before & 1 == 1 || self.turn_id.load(Ordering::Relaxed) != turn_id.0
        {
            return None;
        }
        let links = Links {
            turn_id,
            parent_turn_id: TurnId(self.parent_turn_id.load(Ordering::Relaxed)),
            skip_turn_id: TurnId(self.skip_turn_id.load(Ordering::Relaxed)),
            depth: self.depth.load(Ordering::Relaxed) as u32,
        };
        std::sync::atomic::fence(Ordering::Acquire);
        (self.sequence.load(Ordering::Relaxed) == before).then_some(links)
    }

    fn put(&self, links: &Links) {
        let before = self.sequence.load(Ordering::Relaxed);
        if before & 1 == 1
            || self
                .sequence
                .compare_exchange(before, before + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        std::sync::atomic::fence(Ordering::Release);
        self.turn_id.store(links.turn_id.0, Ordering::Relaxed);
        self.parent_turn_id
            .store(links.parent_turn_id.0, Ordering::Relaxed);
        self.skip_turn_id
            .store(links.skip_turn_id.0, Ordering::Relaxed);
        self.depth.store(u64::from(links.depth), Ordering::Relaxed);
        self.sequence.store(before + 2, Ordering::Release);
    }
}

/// `turns.log` as readers see it: records `1..=durable_record_id` are durable and immutable.
/// Those a log compaction covered are read from `turns.base` (`log_base.rs`), the rest from
/// `turns.log` at their offset.
#[derive(Debug)]
pub(crate) struct TurnsView {
    file: ReadFile,
    /// The compacted prefix; replaced (never changed) by the collector's log compaction.
    base: arc_swap::ArcSwapOption<LogBase>,
    /// Durable records are immutable while the engine is open, so a cached decode stays
    /// right; a slot holds the record last read into it, checked by its id. Filled by
    /// readers after a `pread`; lock-free (one atomic load per hit).
    cache: Box<[arc_swap::ArcSwapOption<LogRecord>]>,
    /// The links of turns a walk down skip pointers passed (`ancestor`): one cache line per
    /// turn instead of a record's `Arc`, so a walk to depth 0 of a deep chain (~90 steps at
    /// 200k) costs little more than reading the page it finds (issue 14 item 7).
    skip_links: Box<[SkipLinksSlot]>,
    durable_record_id: AtomicU64,
    /// The turns the garbage collector collected (durable gc-dead records): they read as not
    /// found, their blobs may be gone.
    dead: arc_swap::ArcSwap<DeadTurns>,
}

impl TurnsView {
    pub fn new(
        file: ReadFile,
        base: Option<Arc<LogBase>>,
        durable_record_id: u64,
        dead: DeadTurns,
    ) -> Self {
        TurnsView {
            file,
            base: arc_swap::ArcSwapOption::new(base),
            cache: (0..RECORD_CACHE_SLOTS)
                .map(|_| arc_swap::ArcSwapOption::empty())
                .collect(),
            skip_links: (0..SKIP_LINKS_SLOTS)
                .map(|_| SkipLinksSlot::default())
                .collect(),
            durable_record_id: AtomicU64::new(durable_record_id),
            dead: arc_swap::ArcSwap::from_pointee(dead),
        }
    }

    /// The ancestor of `start` at `depth`, in O(log n) steps: the steps read the skip cache
    /// (a durable turn's links never change, even after a collection: TurnIDs are never
    /// reused), the turn found is read whole and must not be collected (`turn`).
    pub fn ancestor(&self, start: TurnRecord, depth: u32) -> Result<TurnRecord, EngineError> {
        if start.depth == depth {
            return Ok(start);
        }
        let found = skip::ancestor(Links::of(&start), depth, |turn_id| self.skip_links(turn_id))?;
        self.turn(found.turn_id)
    }

    fn skip_links(&self, turn_id: TurnId) -> Result<Links, EngineError> {
        let slot = &self.skip_links[cache_slot(turn_id.0)];
        if let Some(links) = slot.get(turn_id) {
            return Ok(links);
        }
        let links = Links::of(&self.turn_record(turn_id)?);
        slot.put(&links);
        Ok(links)
    }

    /// The collected turns as of the last durable gc-dead record.
    pub fn dead(&self) -> Arc<DeadTurns> {
        self.dead.load_full()
    }

    pub fn is_dead(&self, turn_id: TurnId) -> bool {
        self.dead.load().contains(turn_id)
    }

    /// Sequencer only, after the gc-dead records of `dead` are durable.
    pub fn publish_dead(&self, dead: DeadTurns) {
        self.dead.store(Arc::new(dead));
    }

    pub fn path(&self) -> &PathBuf {
        &self.file.path
    }

    /// The compacted prefix, if a log compaction ran.
    pub fn base(&self) -> Option<Arc<LogBase>> {
        self.base.load_full()
    }

    /// Collector only, once the new base is renamed into place and synced, before the old
    /// base's slots leave `turns.log`. The record cache is emptied: a record the base dropped
    /// must read as gone from now on, as it will after a restart. The base holds records up
    /// to `watermark`; it may stand for slots past the durable ones, which no record ever
    /// had (a generation's raised floor, `Collector::raise_record_floor`).
    pub fn publish_base(&self, base: Arc<LogBase>, watermark: u64) {
        let previous = self.base.swap(Some(base.clone()));
        let previous_through = previous.map_or(0, |previous| previous.through());
        let durable = self.durable_record_id();
        assert!(
            previous_through <= base.through()
                && watermark <= durable
                && (base.through() <= durable || watermark == durable),
            "a new base covers the old one and only durable records"
        );
        for slot in self.cache.iter() {
            slot.store(None);
        }
    }

    /// The durable slots with record ids in `first..=last` (those a log compaction dropped
    /// are not there), read sequentially: the base's, then `turns.log`'s, in record id order.
    /// Safe while a compaction runs: a slot the log answered with zeros (punched after a new
    /// base took it) is read from that base, after the others (out of order then).
    pub fn scan_range(
        &self,
        first: u64,
        last: u64,
        mut visit: impl FnMut(u64, &[u8; LOG_RECORD_BYTES]) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        assert!(last <= self.durable_record_id(), "only durable slots");
        let first = first.max(1);
        if first > last {
            return Ok(());
        }
        let mut through = 0;
        if let Some(base) = self.base() {
            through = base.through();
            if first <= through {
                base.for_each_slot(
                    |slot| {
                        let record_id = crate::sequencer::log_base::slot_record_id(slot);
                        if (first..=last).contains(&record_id) {
                            visit(record_id, slot)?;
                        }
                        Ok(())
                    },
                    |error| error,
                )?;
            }
        }
        let mut zeros: Vec<u64> = Vec::new();
        let next = first.max(through + 1);
        let count = (last + 1).saturating_sub(next);
        read_slots(
            &self.file,
            record_offset(next),
            count,
            |index, slot| {
                let record_id = next + index;
                if crate::format::is_all_zero(slot) {
                    zeros.push(record_id);
                    return Ok(());
                }
                visit(record_id, slot)
            },
            |error| error,
        )?;
        // A compaction publishes its base before it punches the log: zeros read here are in
        // the base published now, or damage.
        if let Some(&record_id) = zeros.first() {
            let Some(base) = self.base().filter(|base| base.covers(record_id)) else {
                return Err(EngineError::Corrupt(Corruption::new(
                    &self.file.path,
                    record_offset(record_id),
                    format!("durable record {record_id} reads as zeros"),
                )));
            };
            for record_id in zeros {
                if !base.covers(record_id) {
                    return Err(EngineError::Corrupt(Corruption::new(
                        &self.file.path,
                        record_offset(record_id),
                        format!("durable record {record_id} reads as zeros"),
                    )));
                }
                if let Some((_, slot)) = base.slot(record_id)? {
                    visit(record_id, &slot)?;
                }
            }
        }
        Ok(())
    }

    /// Every durable slot up to `watermark` in record id order: the base's, then `turns.log`'s
    /// after it. One sequential read of each (the collector's mark and log compaction).
    pub fn for_each_slot(
        &self,
        watermark: u64,
        mut visit: impl FnMut(&[u8; LOG_RECORD_BYTES]) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        assert!(watermark <= self.durable_record_id(), "only durable slots");
        let base = self.base();
        let mut next = 1u64;
        if let Some(base) = &base {
            assert!(base.through() <= watermark, "a base past the watermark");
            base.for_each_slot(&mut visit, |error| error)?;
            next = base.through() + 1;
        }
        let count = (watermark + 1).saturating_sub(next);
        read_slots(
            &self.file,
            record_offset(next),
            count,
            |_, slot| visit(slot),
            |error| error,
        )
    }

    pub fn durable_record_id(&self) -> u64 {
        self.durable_record_id.load(Ordering::Acquire)
    }

    /// Sequencer only, after a batch's fdatasync and before its watermark (`publish`): puts
    /// the batch's turn records (as written, in record order) into the record and skip-links
    /// caches, so that the first reads of new turns (an agent reads its context before each
    /// model call) come from memory, not one `pread` each (issue 19 item 3). Readers look at a
    /// slot only for a durable record id, so a fill never shows them more than the watermark
    /// allows.
    pub fn fill_caches(&self, turns: &[TurnRecord]) {
        let durable = self.durable_record_id();
        for turn in turns {
            assert!(turn.turn_id.0 > durable, "a batch not yet published");
            self.skip_links[cache_slot(turn.turn_id.0)].put(&Links::of(turn));
            self.cache[cache_slot(turn.turn_id.0)].store(Some(Arc::new(LogRecord::Turn(*turn))));
        }
    }

    /// Sequencer only, after the records up to `record_id` are durable.
    pub fn publish(&self, record_id: u64) {
        let previous = self.durable_record_id.swap(record_id, Ordering::AcqRel);
        assert!(previous <= record_id, "durable watermark moved back");
    }

    /// Reads a durable record. `Ok(None)` if `record_id` is not durable (or 0).
    pub fn record(&self, record_id: u64) -> Result<Option<LogRecord>, EngineError> {
        if record_id == 0 || record_id > self.durable_record_id() {
            return Ok(None);
        }
        let slot = &self.cache[cache_slot(record_id)];
        if let Some(cached) = slot.load().as_deref()
            && cached.record_id() == record_id
        {
            return Ok(Some(*cached));
        }
        let record = self.read_record(record_id)?;
        if let Some(record) = record {
            slot.store(Some(Arc::new(record)));
        }
        Ok(record)
    }

    /// One `pread` of a durable record, checked: its checksum, its slot. `None` for a
    /// record a log compaction dropped (a collected turn).
    fn read_record(&self, record_id: u64) -> Result<Option<LogRecord>, EngineError> {
        if let Some(base) = self.base.load().as_deref()
            && base.covers(record_id)
        {
            return base.record(record_id);
        }
        let offset = record_offset(record_id);
        let mut bytes = [0u8; LOG_RECORD_BYTES];
        self.file.read_exact_at(&mut bytes, offset)?;
        let corrupt =
            |reason: String| EngineError::Corrupt(Corruption::new(&self.file.path, offset, reason));
        match LogRecord::decode(&bytes) {
            Ok(Some(record)) if record.record_id() == record_id => Ok(Some(record)),
            Ok(Some(record)) => Err(corrupt(format!(
                "slot of record {record_id} holds record {}",
                record.record_id()
            ))),
            // A compaction published a base covering it and punched its slot out of the
            // log between the look at the base above and the read.
            Ok(None)
                if self
                    .base
                    .load()
                    .as_deref()
                    .is_some_and(|b| b.covers(record_id)) =>
            {
                self.read_record(record_id)
            }
            Ok(None) => Err(corrupt(format!(
                "durable record {record_id} reads as zeros"
            ))),
            Err(error) => Err(corrupt(error.to_string())),
        }
    }

    /// A durable turn's key, labels and links (empty when it has none): its continuation
    /// slots, read one by one (page-cache hits: they follow the turn's slot).
    pub fn extras(&self, turn: &TurnRecord) -> Result<TurnExtras, EngineError> {
        if turn.extras_len == 0 {
            return Ok(TurnExtras::default());
        }
        let mut failure = None;
        let body = turn_extras_body(turn, |record_id| match self.record(record_id) {
            Ok(record) => record,
            Err(error) => {
                failure = Some(error);
                None
            }
        });
        if let Some(error) = failure {
            return Err(error);
        }
        let offset = record_offset(turn.turn_id.0);
        let corrupt =
            |reason: String| EngineError::Corrupt(Corruption::new(&self.file.path, offset, reason));
        let body = body.map_err(corrupt)?;
        TurnExtras::decode(&body).map_err(|error| corrupt(error.to_string()))
    }

    /// A durable turn record, collected or not: for walks that must pass collected records
    /// (a context chain below its floor, a fork base below the fork's floor, the depth of a
    /// summary below the floor). Its payload may be gone: never return it to a caller as a
    /// turn without checking `is_dead`.
    pub fn turn_record(&self, turn_id: TurnId) -> Result<TurnRecord, EngineError> {
        match self.record(turn_id.0)? {
            Some(LogRecord::Turn(turn)) => Ok(turn),
            _ => Err(EngineError::TurnNotFound(turn_id)),
        }
    }

    /// A durable turn, or `TurnNotFound` (no such record, a context record, or a turn the
    /// garbage collector collected).
    pub fn turn(&self, turn_id: TurnId) -> Result<TurnRecord, EngineError> {
        if self.is_dead(turn_id) {
            return Err(EngineError::TurnNotFound(turn_id));
        }
        match self.record(turn_id.0)? {
            Some(LogRecord::Turn(turn)) => Ok(turn),
            _ => Err(EngineError::TurnNotFound(turn_id)),
        }
    }
}

const HEAD_CHUNK_SLOTS: usize = 1 << 16;
const HEAD_CHUNKS: usize = 1 << 16;
// The table holds every ContextID there can be (slot 0 is unused: ContextIDs start at 1).
const _: () = assert!((HEAD_CHUNK_SLOTS * HEAD_CHUNKS) as u64 - 1 == CONTEXTS_MAX);

/// Head of every context, indexed by ContextID: a segmented array of atomics, grown by the
/// sequencer one 512 KiB chunk at a time. Contexts `1..=durable_contexts` exist.
#[derive(Debug)]
pub(crate) struct HeadTable {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    durable_contexts: AtomicU64,
}

impl HeadTable {
    pub fn new() -> Self {
        HeadTable {
            chunks: (0..HEAD_CHUNKS).map(|_| OnceLock::new()).collect(),
            durable_contexts: AtomicU64::new(0),
        }
    }

    fn slot(&self, context_id: u64) -> Option<&AtomicU64> {
        let index = context_id as usize;
        let chunk = self.chunks.get(index / HEAD_CHUNK_SLOTS)?.get()?;
        chunk.get(index % HEAD_CHUNK_SLOTS)
    }

    /// The published head of a durable context.
    pub fn head(&self, context_id: ContextId) -> Option<TurnId> {
        if context_id.0 == 0 || context_id.0 > self.durable_contexts.load(Ordering::Acquire) {
            return None;
        }
        let slot = self.slot(context_id.0);
        assert!(
            slot.is_some(),
            "durable context {context_id} has no head slot"
        );
        slot.map(|slot| TurnId(slot.load(Ordering::Acquire)))
            .filter(|&head| head != DELETED_HEAD)
    }

    /// Sequencer only. The turn must already be durable and published in `TurnsView`.
    pub fn set_head(&self, context_id: ContextId, head: TurnId) {
        assert!(context_id.0 > 0 && context_id.0 <= CONTEXTS_MAX);
        let index = context_id.0 as usize;
        let chunk = self.chunks[index / HEAD_CHUNK_SLOTS]
            .get_or_init(|| (0..HEAD_CHUNK_SLOTS).map(|_| AtomicU64::new(0)).collect());
        chunk[index % HEAD_CHUNK_SLOTS].store(head.0, Ordering::Release);
    }

    /// Contexts `1..=this` exist (live, deleted or skipped).
    pub fn contexts_published(&self) -> u64 {
        self.durable_contexts.load(Ordering::Acquire)
    }

    /// Sequencer only, after the heads of the new contexts were set.
    pub fn publish_contexts(&self, count: u64) {
        let previous = self.durable_contexts.swap(count, Ordering::AcqRel);
        assert!(previous <= count, "context count moved back");
    }
}

/// Every context's metadata (names, tags, key-value entries, times) as of the last durable
/// batch: an immutable snapshot the sequencer swaps in after its fdatasync, after the heads.
#[derive(Debug, Default)]
pub(crate) struct ContextsView {
    snapshot: arc_swap::ArcSwap<Contexts>,
}

impl ContextsView {
    pub fn new(contexts: Contexts) -> Self {
        ContextsView {
            snapshot: arc_swap::ArcSwap::from_pointee(contexts),
        }
    }

    /// The current snapshot; it stays whole however long the reader holds it.
    pub fn load(&self) -> Arc<Contexts> {
        self.snapshot.load_full()
    }

    /// Sequencer only, after the batch that made `contexts` is durable and its heads are
    /// published.
    pub fn publish(&self, contexts: Contexts) {
        self.snapshot.store(Arc::new(contexts));
    }
}

/// Counters the sequencer owns (it is their only writer).
#[derive(Debug, Default)]
pub(crate) struct SequencerCounters {
    pub turns: AtomicU64,
    pub contexts: AtomicU64,
    pub logical_bytes: AtomicU64,
    pub dedup_hits: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(turn_id: u64) -> Links {
        Links {
            turn_id: TurnId(turn_id),
            parent_turn_id: TurnId(turn_id - 1),
            skip_turn_id: TurnId(turn_id / 2),
            depth: (turn_id - 1) as u32,
        }
    }

    fn turn(turn_id: u64) -> TurnRecord {
        TurnRecord {
            turn_id: TurnId(turn_id),
            parent_turn_id: TurnId(turn_id - 1),
            context_id: ContextId(1),
            depth: (turn_id - 1) as u32,
            type_tag: 1,
            codec: 0,
            payload_hash: crate::ids::BlobHash([turn_id as u8; 32]),
            payload_len: 10,
            flags: 0,
            created_at_unix_ms: 1,
            // Any turn of the chain will do here: the view does not walk.
            skip_turn_id: if turn_id > 1 { TurnId(1) } else { TurnId::NONE },
            context_prev_turn_id: TurnId(turn_id - 1),
            summary_turn_id: TurnId::NONE,
            extras_len: 0,
        }
    }

    /// The sequencer's fill at publish puts a batch's turns where readers look first: with a
    /// log file of zeros under them, a read of a filled turn can only have come from memory
    /// (a `pread` would find zeros and call it damage), and a turn beyond the watermark stays
    /// unseen though it sits in the cache.
    #[test]
    fn a_published_batchs_turns_are_read_from_the_caches_not_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("turns.log");
        std::fs::write(&path, vec![0u8; LOG_RECORD_BYTES * 8]).unwrap();
        let view = TurnsView::new(ReadFile::open(path).unwrap(), None, 0, DeadTurns::default());
        view.fill_caches(&[turn(1), turn(2), turn(3)]);
        assert_eq!(view.record(1).unwrap(), None, "not durable yet");
        view.publish(2);
        assert_eq!(view.turn(TurnId(1)).unwrap(), turn(1));
        assert_eq!(view.turn(TurnId(2)).unwrap(), turn(2));
        assert_eq!(view.skip_links(TurnId(2)).unwrap(), Links::of(&turn(2)));
        assert_eq!(view.record(3).unwrap(), None, "beyond the watermark");
        // Record 4 was never filled: its read goes to the file, which holds zeros.
        view.publish(4);
        assert!(
            view.record(4).is_err(),
            "a durable record of zeros is damage"
        );
    }

    #[test]
    fn a_skip_links_slot_answers_only_its_turn_and_never_while_written() {
        let slot = SkipLinksSlot::default();
        assert_eq!(slot.get(TurnId::NONE), None, "an empty slot names no turn");
        assert_eq!(slot.get(TurnId(7)), None);
        slot.put(&links(7));
        assert_eq!(slot.get(TurnId(7)), Some(links(7)));
        // The slot's other turns (same index, another id) miss.
        let other = (8..).find(|id| cache_slot(*id) == cache_slot(7)).unwrap();
        assert_eq!(slot.get(TurnId(other)), None);
        slot.put(&links(other));
        assert_eq!(slot.get(TurnId(7)), None);
        assert_eq!(slot.get(TurnId(other)), Some(links(other)));
        // A slot being written: reads miss, a second writer leaves it.
        let sequence = slot.sequence.fetch_add(1, Ordering::AcqRel) + 1;
        assert_eq!(slot.get(TurnId(other)), None);
        slot.put(&links(9));
        assert_eq!(slot.sequence.load(Ordering::Acquire), sequence);
        assert_eq!(slot.turn_id.load(Ordering::Relaxed), other);
    }

    #[test]
    fn racing_writers_and_readers_of_a_slot_never_see_a_torn_entry() {
        let slot = Arc::new(SkipLinksSlot::default());
        let writers: Vec<_> = (0..2u64)
            .map(|writer| {
                let slot = slot.clone();
                std::thread::spawn(move || {
                    for round in 0..20_000u64 {
                        slot.put(&links(2 + (round * 2 + writer) % 64));
                    }
                })
            })
            .collect();
        let mut hits = 0u64;
        while !writers.iter().all(|writer| writer.is_finished()) {
            for turn_id in 2..66 {
                if let Some(found) = slot.get(TurnId(turn_id)) {
                    assert_eq!(found, links(turn_id));
                    hits += 1;
                }
            }
        }
        for writer in writers {
            writer.join().unwrap();
        }
        let last = slot.turn_id.load(Ordering::Relaxed);
        assert_eq!(
            slot.get(TurnId(last)),
            Some(links(last)),
            "after {hits} hits"
        );
    }
}
