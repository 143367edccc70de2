//! The garbage collector (issue 15, decision 0011): one round = start → mark → seal → fence →
//! sweep and compact, on the caller's thread (`Engine::gc`) or the `ctxstore-gc` thread (every
//! `gc_interval_ms`). Appends and reads go on throughout; the actors only ever do short steps
//! between their batches (answer a start, a fence, a sweep, a file switch-over).
//!
//! ```text
//!  collector                          sequencer                        blob shards
//!  ─────────                          ─────────                        ───────────
//!  GcStart ─────────────────────────► durable watermark W, contexts;
//!                                     notes what new records name
//!  mark: read turns.log 1..=W,
//!  live = what live contexts reach
//!  GcSeal (only if the open pack is due) ───────────────────────────► open pack sealed
//!  condemn: unreachable blobs in
//!  packs past the dead-share threshold
//!  GcFence(dead turns, condemned) ──► aborts if a noted turn is dead;
//!                                     noted blobs kept; gc-dead
//!                                     records durable; from now on a
//!                                     dead turn or swept blob is
//!                                     refused
//!  per pack: GcSweep ───────────────────────────────────────────────► out of the index (CAS)
//!            copy live records to pack.compact, index to blobs.idx.compact (synced, throttled)
//!            GcInstall ─────────────────────────────────────────────► REINDEX marker, renames,
//!                                                                     new read handle, marker gone
//!  log compaction (`log_compaction.rs`, when its dead share passes the threshold):
//!  turns.base.compact ← kept slots 1..=W, rename → turns.base, publish, punch turns.log < W
//! ```
//!
//! Why each step is safe is in decision 0011; what recovery does with each file is in
//! docs/storage.md (*Garbage collection*).

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::blob::condemned::Condemned;
use crate::blob::scan::{self, ScannedRecord};
use crate::error::{EngineError, ErrorKind};
use crate::file::{Released, release_replaced};
use crate::format::blob_index::{BlobLocation, INDEX_ENTRY_BYTES, IndexEntry};
use crate::format::pack::{PACK_HEADER_BYTES, PackHeader};
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::{
    Assembled, LOG_RECORD_BYTES, LogRecord, SlotAssembly, SlotHead, Whole, turn_extra_slots,
};
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId, TurnId};
use crate::log_compaction::{LogPlan, compact_log};
use crate::model::GcReport;
use crate::pipeline::{
    CompactedPack, GcFenced, GcSnapshot, SequencerInbox, SequencerRequest, ShardRequest, SweptBlobs,
};
use crate::published::Published;
use crate::reserve::DiskReserve;
use crate::sequencer::contexts::Contexts;
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::owners;
use crate::store_dir::{
    REINDEX_MARKER_FILE, StoreDir, compact_path, create_durable, pack_path, sync_dir,
};
use crate::throttle::Throttle;

/// A compaction syncs what it wrote every this many bytes: a multi-megabyte write-back at the
/// final fsync would stall every append's fdatasync behind it (the backup's lesson,
/// docs/benchmarks.md); smaller steps keep each stall short.
const SYNC_STEP_BYTES: u64 = 512 << 10;
/// Bytes a replaced pack gives back per step (`file::release_replaced`).
const RELEASE_STEP_BYTES: u64 = 8 << 20;

/// What the collector counts across rounds (read by `Engine::stats`).
#[derive(Debug, Default)]
pub(crate) struct GcCounters {
    pub runs: AtomicU64,
    pub bytes_reclaimed_total: AtomicU64,
    pub live_bytes: AtomicU64,
    pub dead_bytes: AtomicU64,
}

/// Requested rounds and backups that may wait for the running one at a time: each waits on a
/// thread of its own, so a client pipelining GC requests cannot pile up threads.
pub const MAINTENANCE_WAITING_MAX: usize = 4;

/// Everything a round needs; shared by `Engine::gc` and the scheduler thread.
#[derive(Debug)]
pub(crate) struct Collector {
    published: Arc<Published>,
    sequencer: SequencerInbox,
    shards: Box<[flume::Sender<ShardRequest>]>,
    store: StoreDir,
    pack_dead_percent: u8,
    bytes_per_s_max: u64,
    /// The log is compacted once its droppable slots hold at least this many bytes (and
    /// `pack_dead_percent` of the slots present).
    log_dead_bytes_min: u64,
    /// One maintenance job at a time: a collection or a backup (a backup hard-links packs a
    /// compaction would replace).
    pub maintenance: Arc<Mutex<()>>,
    /// Callers waiting for `maintenance` (requested rounds and backups), ≤
    /// `MAINTENANCE_WAITING_MAX`.
    maintenance_waiting: AtomicUsize,
    pub counters: GcCounters,
    /// Set by `Engine::shutdown`: a round in progress stops at its next step.
    pub stopping: AtomicBool,
    /// Per shard: packs below this id were sealed before the last round began. A blob no turn
    /// ever named (stored by PUT_BLOB, a replaced key-value value) is collected only there,
    /// so a client has at least one interval between storing a blob and naming it.
    orphans_before_pack: Mutex<Vec<u32>>,
    /// Chunked writes in flight (issue 16, decision 0013): each names the chunks and base its
    /// manifest will name, from before it looks at the index until the manifest is indexed.
    pub pins: ChunkPins,
    /// Disk only a collection may use (`reserve.rs`): given up when a compaction finds the
    /// disk full, taken back after the round.
    reserve: DiskReserve,
}

/// The blobs chunked writes in flight are about to name in a manifest, and the condemned
/// blobs of the round in progress. A round only sees manifests that are indexed; a write
/// that dedups a chunk against the index and indexes its manifest later must not lose that
/// chunk to the round. Both sides publish, fence, then look at the other (Dekker):
///
/// - a writer inserts its pin, then resurrects its blobs in the round's map if one is
///   installed (a blob already swept is written again by the writer);
/// - the collector installs the map, then resurrects every pinned blob.
///
/// With sequentially consistent fences at least one of them sees the other, and a resurrected
/// blob is never swept (`Condemned`). Pins are lock-free (papaya); a pin lives for one write.
#[derive(Debug, Default)]
pub(crate) struct ChunkPins {
    next_id: AtomicU64,
    pins: papaya::HashMap<u64, Arc<[BlobHash]>>,
    round: arc_swap::ArcSwapOption<Condemned>,
}

/// A chunked write's pin; dropping it ends the pin (after the manifest is indexed).
#[derive(Debug)]
pub(crate) struct ChunkPin<'a> {
    pins: &'a ChunkPins,
    id: u64,
}

impl Drop for ChunkPin<'_> {
    fn drop(&mut self) {
        self.pins.pins.pin().remove(&self.id);
    }
}

impl ChunkPins {
    /// Pins `blobs` for a write; returns the pin and those of them a sweep already took (the
    /// writer stores those again instead of trusting the index).
    pub fn pin(&self, blobs: Arc<[BlobHash]>) -> (ChunkPin<'_>, Vec<BlobHash>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.pins.pin().insert(id, blobs.clone());
        std::sync::atomic::fence(Ordering::SeqCst);
        let swept = match self.round.load_full() {
            Some(condemned) => blobs
                .iter()
                .filter(|hash| !condemned.resurrect(hash))
                .copied()
                .collect(),
            None => Vec::new(),
        };
        (ChunkPin { pins: self, id }, swept)
    }

    /// Collector: the round's condemned blobs are final; pinned ones stay.
    fn install(&self, condemned: Arc<Condemned>) {
        self.round.store(Some(condemned.clone()));
        std::sync::atomic::fence(Ordering::SeqCst);
        for (_, blobs) in self.pins.pin().iter() {
            for hash in blobs.iter() {
                condemned.resurrect(hash);
            }
        }
    }

    /// Collector: the round is over (everything condemned was swept or kept).
    fn clear(&self) {
        self.round.store(None);
    }
}

impl Collector {
    pub fn new(
        published: Arc<Published>,
        sequencer: SequencerInbox,
        shards: Box<[flume::Sender<ShardRequest>]>,
        store: StoreDir,
        config: &crate::config::EngineConfig,
        open_pack_ids: Vec<u32>,
        reserve: DiskReserve,
    ) -> Collector {
        Collector {
            published,
            sequencer,
            shards,
            store,
            pack_dead_percent: config.gc_pack_dead_percent,
            bytes_per_s_max: config.gc_bytes_per_s_max,
            log_dead_bytes_min: config.gc_log_dead_bytes_min,
            maintenance: Arc::new(Mutex::new(())),
            maintenance_waiting: AtomicUsize::new(0),
            counters: GcCounters::default(),
            stopping: AtomicBool::new(false),
            orphans_before_pack: Mutex::new(open_pack_ids),
            pins: ChunkPins::default(),
            reserve,
        }
    }

    /// Takes the maintenance lock, waiting for a running collection or backup to finish
    /// (a collection round is bounded; a caller asking for one wants it run, not refused
    /// because the scheduler's round happened to be running). At most
    /// `MAINTENANCE_WAITING_MAX` callers wait (each holds a thread), else `Limit`.
    pub fn maintenance(&self) -> Result<MutexGuard<'_, ()>, EngineError> {
        let waiting = self.maintenance_waiting.fetch_add(1, Ordering::AcqRel);
        let guard = if waiting >= MAINTENANCE_WAITING_MAX {
            Err(EngineError::Limit {
                what: "garbage collections and backups waiting for the running one",
                limit: MAINTENANCE_WAITING_MAX,
            })
        } else {
            Ok(match self.maintenance.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            })
        };
        self.maintenance_waiting.fetch_sub(1, Ordering::AcqRel);
        guard
    }

    /// One round, after any running collection or backup. Blocking file I/O on the caller's
    /// thread.
    pub fn run(&self) -> Result<GcReport, EngineError> {
        let guard = self.maintenance()?;
        if self.stopping.load(Ordering::Acquire) {
            return Err(EngineError::ShutDown);
        }
        self.round(guard)
    }

    /// One round if no collection or backup is running, else `None` (the scheduler's next
    /// tick tries again).
    fn run_if_free(&self) -> Option<Result<GcReport, EngineError>> {
        match self.maintenance.try_lock() {
            Ok(guard) => Some(self.round(guard)),
            Err(TryLockError::Poisoned(poisoned)) => Some(self.round(poisoned.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// One round under the maintenance lock `_guard`.
    fn round(&self, _guard: MutexGuard<'_, ()>) -> Result<GcReport, EngineError> {
        self.published.status.check_writable()?;
        let started = Instant::now();
        let snapshot = self.start()?;
        let result = self.collect(&snapshot);
        self.pins.clear();
        // Given up for a compaction on a full disk: back once the round freed the room.
        self.reserve.take_back();
        if !matches!(result, Ok((_, Fence::Reached))) {
            // No fence reached the sequencer: it stops noting.
            let _ = self.sequencer.0.send(SequencerRequest::GcAbort);
        }
        let (mut report, _) = result?;
        report.duration_ms = started.elapsed().as_millis() as u64;
        self.counters.runs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_reclaimed_total
            .fetch_add(report.bytes_reclaimed, Ordering::Relaxed);
        self.counters
            .live_bytes
            .store(report.live_bytes, Ordering::Relaxed);
        self.counters
            .dead_bytes
            .store(report.dead_bytes, Ordering::Relaxed);
        tracing::info!(
            turns_dead = report.turns_dead,
            blobs_dead = report.blobs_dead,
            bytes_reclaimed = report.bytes_reclaimed,
            packs_compacted = report.packs_compacted,
            live_bytes = report.live_bytes,
            dead_bytes = report.dead_bytes,
            duration_ms = report.duration_ms,
            "garbage collection done"
        );
        Ok(report)
    }

    fn start(&self) -> Result<GcSnapshot, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.sequencer
            .0
            .send(SequencerRequest::GcStart { reply })
            .map_err(|_| EngineError::ShutDown)?;
        answer.recv().map_err(|_| EngineError::ShutDown)
    }

    /// Mark, condemn, fence, sweep; with whether the fence reached the sequencer (else the
    /// round ended before it: nothing to collect, or the fence was aborted). The report's live
    /// and dead bytes are the mark's either way.
    fn collect(&self, snapshot: &GcSnapshot) -> Result<(GcReport, Fence), EngineError> {
        let log = LogTable::read(&self.published, snapshot.watermark)?;
        let marked = mark(&log, &snapshot.contexts, &snapshot.dead, &self.published)?;
        let mut report = GcReport::default();
        let mut dead = DeadTurns::default();
        // Blobs a turn let go: named by a turn dying now (its payload and patches), or by a
        // live redacted turn (decision 0012: no view reads them any more), or purged.
        // Collectable unless something live names them too.
        let overlays = &snapshot.contexts.overlays;
        let mut named_by_dead: HashSet<BlobHash, BlobHashBuildHasher> =
            overlays.purged().copied().collect();
        // Of those, the bytes an erasure asked to remove (purged, or a redacted turn's payload
        // and patches): their packs are compacted whatever their dead share, so that no file
        // holds them once the round is over (issue 29 item 2).
        let mut erased = named_by_dead.clone();
        for record_id in 1..=snapshot.watermark {
            let turn_id = TurnId(record_id);
            if !log.is_turn(record_id) || snapshot.dead.contains(turn_id) {
                continue;
            }
            let live = marked.is_live(record_id);
            if !live {
                dead.insert(turn_id);
            }
            let redacted = overlays.is_redacted(turn_id);
            if !live || redacted {
                named_by_dead.insert(log.hash[record_id as usize]);
                named_by_dead.extend(overlays.all_patch_blobs(turn_id));
            }
            if redacted {
                erased.insert(log.hash[record_id as usize]);
                erased.extend(overlays.all_patch_blobs(turn_id));
            }
        }
        report.turns_dead = dead.count();

        // Where each shard's open pack ends. It is sealed (a new pack file) only when it is
        // itself due for compaction; a round every few minutes would otherwise leave a trail of
        // small packs.
        let mut cuts = Vec::with_capacity(self.shards.len());
        for sender in self.shards.iter() {
            let (reply, answer) = oneshot::channel();
            sender
                .send(ShardRequest::Snapshot { reply })
                .map_err(|_| EngineError::ShutDown)?;
            cuts.push(answer.recv().map_err(|_| EngineError::ShutDown)?);
        }
        let open_packs: Vec<u32> = cuts.iter().map(|cut| cut.pack_id).collect();
        let orphans_before = self
            .orphans_before_pack
            .lock()
            .map(|mut before| std::mem::replace(&mut *before, open_packs.clone()))
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());

        // Chunked blobs (decision 0013): what an indexed manifest names (its chunks, its base)
        // is collectable only with every manifest naming it, so a kept manifest is whole.
        // Manifests indexed after this look are covered by their writers' pins.
        let manifests = crate::chunks::manifest_references(&self.published.shards)?;
        let mut named_by: HashMap<BlobHash, Vec<BlobHash>, BlobHashBuildHasher> =
            HashMap::default();
        for (manifest, names) in &manifests {
            for name in names.iter() {
                named_by.entry(*name).or_default().push(*manifest);
            }
        }
        // What a dead manifest names was named by the dead too (no orphan grace for it): a
        // redacted chunked payload leaves the disk at the first collection like any other.
        // The same for erased manifests: their chunks hold the erased bytes.
        for set in [&mut named_by_dead, &mut erased] {
            let mut dying: Vec<BlobHash> = set
                .iter()
                .filter(|hash| manifests.contains_key(*hash))
                .copied()
                .collect();
            while let Some(manifest) = dying.pop() {
                for name in manifests.get(&manifest).into_iter().flatten() {
                    if set.insert(*name) && manifests.contains_key(name) {
                        dying.push(*name);
                    }
                }
            }
        }
        let mut collectable: HashSet<BlobHash, BlobHashBuildHasher> = HashSet::default();
        for (shard, view) in self.published.shards.iter().enumerate() {
            let orphans_before = orphans_before.get(shard).copied().unwrap_or(0);
            for (hash, location) in view.index.pin().iter() {
                if location.pack_id <= open_packs[shard]
                    && !marked.live_blobs.contains(hash)
                    && (named_by_dead.contains(hash) || location.pack_id < orphans_before)
                {
                    collectable.insert(*hash);
                }
            }
        }
        keep_what_kept_manifests_name(&mut collectable, &named_by);

        // Condemn: unreachable blobs, in packs whose dead share passes the threshold.
        let mut plans: Vec<PackPlan> = Vec::new();
        for (shard, view) in self.published.shards.iter().enumerate() {
            let open = open_packs[shard];
            let mut packs: HashMap<u32, PackPlan> = HashMap::new();
            {
                let index = view.index.pin();
                for (hash, location) in index.iter() {
                    if location.pack_id > open {
                        continue;
                    }
                    let plan = packs.entry(location.pack_id).or_insert_with(|| PackPlan {
                        shard: shard as u16,
                        pack_id: location.pack_id,
                        ..PackPlan::default()
                    });
                    if collectable.contains(hash) {
                        plan.dead.push(*hash);
                        plan.dead_bytes += location.record_bytes();
                    } else {
                        plan.live_bytes += location.record_bytes();
                    }
                }
            }
            for pack_id in 0..=open {
                let path = pack_path(&view.dir, pack_id);
                let file_bytes = if pack_id == open {
                    cuts[shard].pack_end
                } else {
                    std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
                };
                let plan = packs.remove(&pack_id).unwrap_or(PackPlan {
                    shard: shard as u16,
                    pack_id,
                    ..PackPlan::default()
                });
                report.live_bytes += plan.live_bytes;
                let garbage = file_bytes.saturating_sub(plan.live_bytes);
                report.dead_bytes += garbage;
                // Due past the dead share, or at once when it holds erased bytes.
                let due = garbage > 0
                    && (garbage * 100 >= u64::from(self.pack_dead_percent) * file_bytes
                        || plan.dead.iter().any(|hash| erased.contains(hash)));
                if !due {
                    continue;
                }
                if pack_id == open {
                    let (reply, answer) = oneshot::channel();
                    self.shards[shard]
                        .send(ShardRequest::GcSeal { reply })
                        .map_err(|_| EngineError::ShutDown)?;
                    let now_open = answer.recv().map_err(|_| EngineError::ShutDown)??;
                    assert!(now_open > pack_id, "a sealed pack has a successor");
                }
                let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                plans.push(PackPlan { file_bytes, ..plan });
            }
        }
        if dead.is_empty() && plans.is_empty() {
            // Nothing new dies; turns collected before may still leave the log.
            self.compact_log(&log, &marked, snapshot.watermark, &mut report)?;
            return Ok((report, Fence::NotSent));
        }
        // A manifest in a pack below the threshold stays, and so does what it names.
        let mut condemned: HashSet<BlobHash, BlobHashBuildHasher> = plans
            .iter()
            .flat_map(|plan| plan.dead.iter().copied())
            .collect();
        keep_what_kept_manifests_name(&mut condemned, &named_by);
        for plan in &mut plans {
            plan.dead.retain(|hash| condemned.contains(hash));
        }
        let dependencies: Vec<(BlobHash, Box<[BlobHash]>)> = manifests
            .iter()
            .filter(|(manifest, _)| condemned.contains(*manifest))
            .map(|(manifest, names)| (*manifest, names.clone()))
            .collect();
        // Sweep order: a condemned manifest after every condemned manifest naming it (the
        // newest delta of a chain first, its full manifest last), then every other blob, so a
        // swept dependency implies a swept manifest (`Condemned::resurrect`).
        let sweep_first = sweep_levels(&dependencies, &condemned, &named_by);
        let condemned = Arc::new(Condemned::with_dependencies(condemned, dependencies));
        self.pins.install(condemned.clone());

        // Fence: from here on nothing may name a dead turn or a swept blob.
        let (reply, answer) = oneshot::channel();
        self.sequencer
            .0
            .send(SequencerRequest::GcFence {
                dead,
                condemned: condemned.clone(),
                reply,
            })
            .map_err(|_| EngineError::ShutDown)?;
        match answer.recv().map_err(|_| EngineError::ShutDown)?? {
            GcFenced::Fenced => {}
            GcFenced::Aborted(turn_id) => {
                tracing::info!(
                    %turn_id,
                    "garbage collection stopped before sweeping: a new record names a turn it \
                     found unreachable (the next round sees it live)"
                );
                let nothing = GcReport {
                    live_bytes: report.live_bytes,
                    dead_bytes: report.dead_bytes,
                    ..GcReport::default()
                };
                return Ok((nothing, Fence::Reached));
            }
        }

        // Sweep: condemned manifests first, level by level, in every pack; then sweep and
        // compact one pack at a time.
        for level in &sweep_first {
            for plan in &plans {
                let hashes: Vec<BlobHash> = plan
                    .dead
                    .iter()
                    .filter(|hash| level.contains(*hash))
                    .copied()
                    .collect();
                if hashes.is_empty() {
                    continue;
                }
                let (reply, answer) = oneshot::channel();
                self.shards[usize::from(plan.shard)]
                    .send(ShardRequest::GcSweep {
                        pack_id: plan.pack_id,
                        hashes,
                        condemned: condemned.clone(),
                        reply,
                    })
                    .map_err(|_| EngineError::ShutDown)?;
                let swept: SweptBlobs = answer.recv().map_err(|_| EngineError::ShutDown)?;
                report.blobs_dead += swept.blobs;
            }
        }
        let mut throttle = Throttle::new(self.bytes_per_s_max);
        // The packs with the fewest live bytes first: a wholly dead pack costs no copy, and on a
        // nearly full disk each compaction frees room for the next, larger copy.
        plans.sort_by_key(|plan| plan.live_bytes);
        for plan in plans {
            if self.stopping.load(Ordering::Acquire) {
                return Err(EngineError::ShutDown);
            }
            let sender = &self.shards[usize::from(plan.shard)];
            let (reply, answer) = oneshot::channel();
            sender
                .send(ShardRequest::GcSweep {
                    pack_id: plan.pack_id,
                    hashes: plan.dead.clone(),
                    condemned: condemned.clone(),
                    reply,
                })
                .map_err(|_| EngineError::ShutDown)?;
            let swept: SweptBlobs = answer.recv().map_err(|_| EngineError::ShutDown)?;
            report.blobs_dead += swept.blobs;
            let compacted = match self.compact(&plan, sender, &mut throttle) {
                // A full disk: the reserve exists for this copy (reserve.rs).
                Err(error) if error.kind() == ErrorKind::NoSpace && self.reserve.give_up() => {
                    self.compact(&plan, sender, &mut throttle)?
                }
                other => other?,
            };
            report.bytes_reclaimed += plan.file_bytes.saturating_sub(compacted);
            report.bytes_rewritten += compacted;
            report.packs_compacted += 1;
        }
        report.dead_bytes = report.dead_bytes.saturating_sub(report.bytes_reclaimed);
        self.compact_log(&log, &marked, snapshot.watermark, &mut report)?;
        Ok((report, Fence::Reached))
    }

    /// The round's last step (`log_compaction.rs`): the records of collected turns that no
    /// record that stays needs leave `turns.log`, once they pass the thresholds. Runs after
    /// the fence, so the durable dead set holds this round's turns too.
    fn compact_log(
        &self,
        log: &LogTable,
        marked: &Marked,
        watermark: u64,
        report: &mut GcReport,
    ) -> Result<(), EngineError> {
        let Some(plan) = self.plan_log(log, marked, watermark) else {
            return Ok(());
        };
        let mut throttle = Throttle::new(self.bytes_per_s_max);
        let compacted = compact_log(
            &self.store,
            &self.published.turns,
            &plan,
            &mut throttle,
            &self.stopping,
        )?;
        tracing::info!(
            watermark,
            turns_dropped = plan.turns_dropped,
            slots_dropped = compacted.slots_dropped,
            bytes_reclaimed = compacted.bytes_reclaimed,
            punched = compacted.punched,
            "turns.log compacted"
        );
        report.log_bytes_reclaimed += compacted.bytes_reclaimed;
        report.bytes_reclaimed += compacted.bytes_reclaimed;
        Ok(())
    }

    /// Which turn records go: collected (durable gc-dead), not owned by a live context, no
    /// ancestor of a record that stays, and newer than every record of its context that
    /// stays (a fork made later of a turn walks its context's turns before it: the turn
    /// log, key look-ups). `None` below the thresholds.
    fn plan_log(&self, log: &LogTable, marked: &Marked, watermark: u64) -> Option<LogPlan> {
        let through = self.published.turns.base().map_or(0, |base| base.through());
        if watermark <= through {
            return None;
        }
        let dead = self.published.turns.dead();
        let slots = log.context.len();
        let mut needed: Vec<bool> = (0..slots)
            .map(|id| {
                log.is_turn(id as u64)
                    && (marked.owned[id]
                        || marked.is_live(id as u64)
                        || !dead.contains(TurnId(id as u64)))
            })
            .collect();
        // To a fixpoint: ancestors, then each context's turns before its newest that stays
        // (which may name further ancestors). Each pass only adds.
        let mut newest_needed: HashMap<u64, u64> = HashMap::new();
        loop {
            // Children before parents (a parent's id is lower).
            for id in (1..slots).rev() {
                if needed[id] {
                    let parent = log.parent[id] as usize;
                    assert!(parent < id, "a parent precedes its child");
                    needed[parent] = log.is_turn(parent as u64) || needed[parent];
                }
            }
            let mut grown = false;
            for (context, turns) in &log.by_context {
                let newest = turns
                    .iter()
                    .rev()
                    .find(|&&turn| needed[turn as usize])
                    .copied()
                    .unwrap_or(0);
                if newest_needed.get(context).copied().unwrap_or(0) >= newest {
                    continue;
                }
                newest_needed.insert(*context, newest);
                for &turn in turns.iter().take_while(|&&turn| turn <= newest) {
                    grown |= !needed[turn as usize];
                    needed[turn as usize] = true;
                }
            }
            if !grown {
                break;
            }
        }
        let mut plan = LogPlan {
            watermark,
            drop: vec![false; slots],
            turns_dropped: 0,
            logical_bytes_dropped: 0,
        };
        let mut slots_dropped = 0u64;
        for (id, needed) in needed.iter().enumerate().skip(1) {
            if log.is_turn(id as u64) && !needed {
                plan.drop[id] = true;
                plan.turns_dropped += 1;
                plan.logical_bytes_dropped += u64::from(log.payload_len[id]);
                slots_dropped += 1 + u64::from(log.extra_slots[id]);
            }
        }
        let due = slots_dropped > 0
            && slots_dropped * LOG_RECORD_BYTES as u64 >= self.log_dead_bytes_min
            && slots_dropped * 100 >= u64::from(self.pack_dead_percent) * log.slots_present;
        due.then_some(plan)
    }

    /// Rewrites one swept pack with the records the index still points at, and the shard's
    /// index to match; the shard installs both. Returns the new pack's length.
    fn compact(
        &self,
        plan: &PackPlan,
        sender: &flume::Sender<ShardRequest>,
        throttle: &mut Throttle,
    ) -> Result<u64, EngineError> {
        let result = self.compact_pack(plan, sender, throttle);
        if result.is_err() {
            // No `.compact` file outlives a failed compaction (on a full disk it would hold
            // blocks until the next open); renamed-in ones are gone already.
            let dir = self.store.shard_dir(plan.shard);
            let pack = compact_path(&pack_path(&dir, plan.pack_id));
            let index = compact_path(&self.store.blob_index_path(plan.shard));
            let removed = [pack, index]
                .iter()
                .filter(|path| std::fs::remove_file(path).is_ok())
                .count();
            if removed > 0 {
                let _ = sync_dir(&dir);
            }
        }
        result
    }

    fn compact_pack(
        &self,
        plan: &PackPlan,
        sender: &flume::Sender<ShardRequest>,
        throttle: &mut Throttle,
    ) -> Result<u64, EngineError> {
        let view = &self.published.shards[usize::from(plan.shard)];
        let dir = self.store.shard_dir(plan.shard);
        let old_path = pack_path(&dir, plan.pack_id);
        let new_path = compact_path(&old_path);
        let write = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EngineError::from_write(&path, source)
        };
        let mut out = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&new_path)
            .map_err(write(&new_path))?;
        let mut relocated: Vec<IndexEntry> = Vec::new();
        let mut new_len = 0u64;
        let mut unsynced = 0u64;
        let mut failure: Option<std::io::Error> = None;
        let mut header_bytes = [0u8; PACK_HEADER_BYTES];
        let stopping = &self.stopping;
        let visit = |record: ScannedRecord<'_>| {
            if failure.is_some() {
                return;
            }
            if stopping.load(Ordering::Relaxed) {
                failure = Some(std::io::Error::other("the engine is stopping"));
                return;
            }
            let header: PackHeader = record.header;
            let here = BlobLocation {
                pack_id: plan.pack_id,
                pack_offset: record.offset,
                raw_len: header.raw_len,
                stored_len: header.stored_len,
                compression: header.compression,
            };
            // Kept: the record the index points at. Swept blobs, and older copies of blobs
            // stored again elsewhere, are left behind.
            if view.location(&header.hash) != Some(here) {
                return;
            }
            header.encode(&mut header_bytes);
            // Records keep their alignment: the padding after a body is zeros.
            let padding = header.record_bytes() as usize - PACK_HEADER_BYTES - record.body.len();
            let written = out
                .write_all(&header_bytes)
                .and_then(|()| out.write_all(record.body))
                .and_then(|()| out.write_all(&[0u8; 64][..padding]));
            if let Err(error) = written {
                failure = Some(error);
                return;
            }
            relocated.push(IndexEntry {
                hash: header.hash,
                location: BlobLocation {
                    pack_offset: new_len,
                    ..here
                },
            });
            let bytes = header.record_bytes();
            new_len += bytes;
            unsynced += bytes;
            throttle.take(2 * bytes);
            if unsynced >= SYNC_STEP_BYTES {
                unsynced = 0;
                if let Err(error) = out.sync_data() {
                    failure = Some(error);
                }
            }
        };
        let durable_end = u64::MAX;
        let scanned = scan::scan_pack(&old_path, 0, false, durable_end, visit)
            .map_err(|source| EngineError::io(&old_path, source))?;
        if let Some(error) = failure {
            return Err(EngineError::from_write(&new_path, error));
        }
        if let crate::tail::Tail::Corrupt(corruption) = scanned.tail {
            let _ = std::fs::remove_file(&new_path);
            return Err(EngineError::Corrupt(corruption));
        }
        out.sync_all().map_err(write(&new_path))?;
        drop(out);

        // The index: the shard's entries up to now, this pack's replaced by the relocated ones.
        let (reply, answer) = oneshot::channel();
        sender
            .send(ShardRequest::Snapshot { reply })
            .map_err(|_| EngineError::ShutDown)?;
        let cut = answer.recv().map_err(|_| EngineError::ShutDown)?;
        let index_path = self.store.blob_index_path(plan.shard);
        let new_index = compact_path(&index_path);
        let mut old_index = vec![0u8; cut.index_end as usize];
        File::open(&index_path)
            .and_then(|file| file.read_exact_at(&mut old_index, 0))
            .map_err(|source| EngineError::io(&index_path, source))?;
        let mut entries = Vec::with_capacity(old_index.len() / INDEX_ENTRY_BYTES + 1);
        let mut placed = false;
        for chunk in old_index.chunks_exact(INDEX_ENTRY_BYTES) {
            let mut bytes = [0u8; INDEX_ENTRY_BYTES];
            bytes.copy_from_slice(chunk);
            let entry = match IndexEntry::decode(&bytes) {
                Ok(Some(entry)) => entry,
                _ => {
                    return Err(EngineError::Corrupt(crate::error::Corruption::new(
                        &index_path,
                        (entries.len() * INDEX_ENTRY_BYTES) as u64,
                        "blob index entry does not decode".to_string(),
                    )));
                }
            };
            if entry.location.pack_id != plan.pack_id {
                entries.push(bytes);
                continue;
            }
            if !placed {
                placed = true;
                for kept in &relocated {
                    let mut encoded = [0u8; INDEX_ENTRY_BYTES];
                    kept.encode(&mut encoded);
                    entries.push(encoded);
                }
            }
        }
        assert!(
            placed || relocated.is_empty(),
            "pack {} has live records but no index entries",
            plan.pack_id
        );
        let mut index_out = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&new_index)
            .map_err(write(&new_index))?;
        index_out
            .write_all(entries.as_flattened())
            .map_err(write(&new_index))?;
        throttle.take(entries.len() as u64 * INDEX_ENTRY_BYTES as u64);
        index_out.sync_all().map_err(write(&new_index))?;
        drop(index_out);
        sync_dir(&dir).map_err(write(&dir))?;

        // Held past the rename, so that the old file's blocks are freed here, a step at a
        // time, rather than all at once by whichever thread closes it last: freeing a large
        // file in one go stalls the file system's journal, and every append's fdatasync with
        // it (docs/benchmarks.md).
        let old_file = OpenOptions::new()
            .write(true)
            .open(&old_path)
            .map_err(write(&old_path))?;
        // The switch-over: under the marker, the shard renames and points its readers at the
        // new file without waiting for the disk; this thread makes it durable, then removes
        // the marker.
        let marker = dir.join(REINDEX_MARKER_FILE);
        create_durable(&marker).map_err(write(&marker))?;
        sync_dir(&dir).map_err(write(&dir))?;
        let (reply, answer) = oneshot::channel();
        sender
            .send(ShardRequest::GcInstall {
                install: CompactedPack {
                    pack_id: plan.pack_id,
                    pack_path: new_path.clone(),
                    relocated,
                    index_path: new_index.clone(),
                    index_prefix_end: cut.index_end,
                },
                reply,
            })
            .map_err(|_| EngineError::ShutDown)?;
        let installed = answer.recv().map_err(|_| EngineError::ShutDown)?;
        if let Err(error) = installed {
            // Not installed: the old files stand; the next open would only rebuild the index.
            let _ = std::fs::remove_file(&new_path);
            let _ = std::fs::remove_file(&new_index);
            let _ = std::fs::remove_file(&marker);
            let _ = sync_dir(&dir);
            return Err(error);
        }
        File::open(&index_path)
            .and_then(|file| file.sync_all())
            .map_err(write(&index_path))?;
        sync_dir(&dir).map_err(write(&dir))?;
        std::fs::remove_file(&marker).map_err(write(&marker))?;
        sync_dir(&dir).map_err(write(&dir))?;
        // Freed a step at a time (see `release_replaced`), paced by the throttle: 8 MiB, then
        // 2 ms. A hard link (a backup on this file system) keeps the old file whole.
        let released = release_replaced(old_file, RELEASE_STEP_BYTES, |bytes| {
            throttle.take(bytes / 8);
            std::thread::sleep(Duration::from_millis(2));
        });
        if released == Released::Shared {
            tracing::info!(
                pack = %old_path.display(),
                "the replaced pack has another name (a backup on this file system hard-linked \
                 it): its blocks stay until that name is removed"
            );
        }
        Ok(new_len)
    }
}

/// Whether a round's fence reached the sequencer (which stops noting when it does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    NotSent,
    Reached,
}

/// Condemned manifests in sweep order, level by level: level 0 holds those no condemned
/// manifest names, level n those named by one at level n − 1 at most. Chains are at most
/// `MANIFEST_DEPTH_MAX` deep; a cycle (impossible: a manifest names older ones) would stop
/// at that bound.
fn sweep_levels(
    dependencies: &[(BlobHash, Box<[BlobHash]>)],
    condemned: &HashSet<BlobHash, BlobHashBuildHasher>,
    named_by: &HashMap<BlobHash, Vec<BlobHash>, BlobHashBuildHasher>,
) -> Vec<HashSet<BlobHash, BlobHashBuildHasher>> {
    let mut level: HashMap<BlobHash, usize, BlobHashBuildHasher> =
        dependencies.iter().map(|(hash, _)| (*hash, 0)).collect();
    let rounds = crate::format::manifest::MANIFEST_DEPTH_MAX as usize + 1;
    for _ in 0..rounds {
        let mut changed = false;
        for (hash, _) in dependencies {
            let deepest_namer = named_by
                .get(hash)
                .into_iter()
                .flatten()
                .filter(|namer| condemned.contains(*namer))
                .filter_map(|namer| level.get(namer).copied())
                .max();
            if let Some(namer_level) = deepest_namer
                && level.get(hash).copied().unwrap_or(0) <= namer_level
            {
                level.insert(*hash, namer_level + 1);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let depth = level.values().copied().max().map_or(0, |max| max + 1);
    let mut levels = vec![HashSet::default(); depth];
    for (hash, at) in level {
        levels[at].insert(hash);
    }
    levels
}

/// Takes out of `set` every blob a manifest outside `set` names, until none is left: a kept
/// manifest (or base) keeps its chunks. Chains of deltas are at most 32 deep, so this ends
/// within 33 passes.
fn keep_what_kept_manifests_name(
    set: &mut HashSet<BlobHash, BlobHashBuildHasher>,
    named_by: &HashMap<BlobHash, Vec<BlobHash>, BlobHashBuildHasher>,
) {
    loop {
        let kept: Vec<BlobHash> = set
            .iter()
            .filter(|hash| {
                named_by
                    .get(*hash)
                    .is_some_and(|by| by.iter().any(|manifest| !set.contains(manifest)))
            })
            .copied()
            .collect();
        if kept.is_empty() {
            return;
        }
        for hash in kept {
            set.remove(&hash);
        }
    }
}

/// One sealed pack of one shard, as the condemn step sees it.
#[derive(Debug, Default)]
struct PackPlan {
    shard: u16,
    pack_id: u32,
    /// Condemned blobs located here.
    dead: Vec<BlobHash>,
    /// Record bytes of the blobs that stay.
    live_bytes: u64,
    /// Record bytes of the condemned blobs.
    dead_bytes: u64,
    file_bytes: u64,
}

/// `turns.log` up to the watermark, in arrays by record id: what marking needs of each turn.
struct LogTable {
    /// 0: not a turn record (a context, metadata or continuation slot).
    context: Vec<u64>,
    parent: Vec<u64>,
    depth: Vec<u32>,
    hash: Vec<BlobHash>,
    payload_len: Vec<u32>,
    /// Continuation slots after each turn record (its extras).
    extra_slots: Vec<u16>,
    /// Slots present up to the watermark: the base's and `turns.log`'s after it.
    slots_present: u64,
    /// Heads as of the watermark (a turn moves its context's head to itself; a context record
    /// sets its first head).
    heads: HashMap<u64, u64>,
    /// Turns of each context, ascending.
    by_context: HashMap<u64, Vec<u64>>,
    links: Vec<(u64, Vec<TurnId>)>,
}

impl LogTable {
    fn is_turn(&self, record_id: u64) -> bool {
        self.context[record_id as usize] != 0
    }

    /// One sequential read of records `1..=watermark` (all durable): the base's (a log
    /// compaction's), then `turns.log`'s after it.
    fn read(published: &Published, watermark: u64) -> Result<LogTable, EngineError> {
        let path = published.turns.path().clone();
        let slots = watermark as usize + 1;
        let mut table = LogTable {
            context: vec![0; slots],
            parent: vec![0; slots],
            depth: vec![0; slots],
            hash: vec![BlobHash([0; 32]); slots],
            payload_len: vec![0; slots],
            extra_slots: vec![0; slots],
            slots_present: 0,
            heads: HashMap::new(),
            by_context: HashMap::new(),
            links: Vec::new(),
        };
        let corrupt = |record_id: u64, reason: String| {
            EngineError::Corrupt(crate::error::Corruption::new(
                &path,
                record_id.saturating_sub(1) * LOG_RECORD_BYTES as u64,
                reason,
            ))
        };
        let mut pending: Option<SlotAssembly> = None;
        let mut previous = 0u64;
        published.turns.for_each_slot(watermark, |encoded| {
            {
                let record = match LogRecord::decode(encoded) {
                    Ok(Some(record)) if record.record_id() > previous => record,
                    _ => {
                        return Err(corrupt(
                            previous + 1,
                            "durable record does not decode".into(),
                        ));
                    }
                };
                let record_id = record.record_id();
                previous = record_id;
                table.slots_present += 1;
                let assembled = match (pending.take(), record) {
                    (None, LogRecord::Context(context)) => {
                        table
                            .heads
                            .insert(context.context_id.0, context.head_turn_id.0);
                        None
                    }
                    (None, LogRecord::Turn(turn)) => {
                        Some(SlotAssembly::start(SlotHead::Turn(turn)))
                    }
                    (None, LogRecord::Meta(head)) => {
                        Some(SlotAssembly::start(SlotHead::Meta(head)))
                    }
                    (Some(assembly), LogRecord::Continuation(slot)) => Some(
                        assembly
                            .push(&slot)
                            .map_err(|reason| corrupt(record_id, reason))?,
                    ),
                    _ => return Err(corrupt(record_id, "slots out of order".into())),
                };
                match assembled {
                    None | Some(Assembled::Complete(Whole::Meta(_))) => {}
                    Some(Assembled::Partial(assembly)) => pending = Some(assembly),
                    Some(Assembled::Complete(Whole::Turn(turn, extras))) => {
                        let id = turn.turn_id.0 as usize;
                        table.context[id] = turn.context_id.0;
                        table.parent[id] = turn.parent_turn_id.0;
                        table.depth[id] = turn.depth;
                        table.hash[id] = turn.payload_hash;
                        table.payload_len[id] = turn.payload_len;
                        table.extra_slots[id] = turn_extra_slots(turn.extras_len as usize);
                        table.heads.insert(turn.context_id.0, turn.turn_id.0);
                        table
                            .by_context
                            .entry(turn.context_id.0)
                            .or_default()
                            .push(turn.turn_id.0);
                        if !extras.is_empty() {
                            let extras = TurnExtras::decode(&extras)
                                .map_err(|error| corrupt(turn.turn_id.0, error.to_string()))?;
                            if !extras.links.is_empty() {
                                table.links.push((turn.turn_id.0, extras.links));
                            }
                        }
                    }
                }
            }
            Ok(())
        })?;
        // The watermark is a batch boundary: no record is half-read.
        assert!(pending.is_none(), "the durable watermark splits a record");
        Ok(table)
    }
}

/// What the live contexts reach.
struct Marked {
    /// Per record id: the lowest floor it was reached with (`u32::MAX`: not reached). A turn
    /// reached with floor f has every ancestor at depth ≥ f reached too.
    floor: Vec<u32>,
    /// Per record id: a live context owns the turn (its own turns, a clone's inherited ones, a
    /// fork's base), reached or not (below its floor): its record must stay for the context's
    /// turn log and for replay (log compaction).
    owned: Vec<bool>,
    live_blobs: HashSet<BlobHash, BlobHashBuildHasher>,
}

impl Marked {
    fn is_live(&self, record_id: u64) -> bool {
        self.floor[record_id as usize] != u32::MAX
    }
}

/// Marks from the roots (decision 0011): each live context's head chain and every turn it
/// owns (`sequencer/owners.rs`: its own turns on every branch, what it inherited through
/// clones and forks) at or above its floor, with their ancestors down to that floor; every
/// link of a live turn with the linked turn's whole history; live contexts' key-value values;
/// the payloads and patches of live turns that are not redacted (decision 0012).
fn mark(
    log: &LogTable,
    contexts: &Contexts,
    dead: &DeadTurns,
    published: &Published,
) -> Result<Marked, EngineError> {
    let mut floors = vec![u32::MAX; log.context.len()];
    let mut owned = vec![false; log.context.len()];
    let mut own = |turn: u64| {
        if let Some(slot) = owned.get_mut(turn as usize) {
            *slot = true;
        }
    };
    let chain = |start: u64, floor: u32, floors: &mut Vec<u32>| -> bool {
        let mut turn = start;
        let mut marked = false;
        while turn != 0 && (turn as usize) < floors.len() {
            let id = turn as usize;
            // A collected turn ends the history (a fork or link made after a collection
            // reaches only what is left of it).
            if log.context[id] == 0
                || log.depth[id] < floor
                || floors[id] <= floor
                || dead.contains(TurnId(turn))
            {
                break;
            }
            floors[id] = floor;
            marked = true;
            turn = log.parent[id];
        }
        marked
    };
    let mut live_blobs: HashSet<BlobHash, BlobHashBuildHasher> = HashSet::default();
    // Fork bases are read as records: a base below its fork's floor may be collected, and
    // the walk only needs where it sits.
    let lookup = |id: TurnId| match published.turns.record(id.0)? {
        Some(LogRecord::Turn(turn)) => Ok(turn),
        _ => Err(EngineError::TurnNotFound(id)),
    };
    for context_id in 1..=contexts.count() {
        let Some(info) = contexts.get(ContextId(context_id)) else {
            continue;
        };
        if info.deleted {
            continue;
        }
        for value in info.kv.values() {
            live_blobs.insert(value.hash);
        }
        let floor = info.floor_depth;
        if let Some(&head) = log.heads.get(&context_id) {
            own(head);
            chain(head, floor, &mut floors);
        }
        // Past a fork, what is inherited is the base's chain only (marked from its tip);
        // the owners further on are still walked by readers (the turn log goes through each
        // owner's own turns up to its bound, key look-ups try them), so their records stay.
        let mut past_fork = false;
        owners::walk_owners(contexts, ContextId(context_id), &lookup, |step| {
            let own_turns = log.by_context.get(&step.owner.0).map_or(&[][..], |turns| {
                let end = turns.partition_point(|&turn| turn <= step.upto.0);
                &turns[..end]
            });
            for &turn in own_turns {
                own(turn);
            }
            if let Some(tip) = step.chain {
                own(tip.turn_id.0);
            }
            if past_fork {
                return Ok(false);
            }
            if let Some(tip) = step.chain {
                chain(tip.turn_id.0, floor, &mut floors);
                past_fork = true;
                return Ok(false);
            }
            for &turn in own_turns {
                chain(turn, floor, &mut floors);
            }
            Ok(false)
        })?;
    }
    // Links reach another history whole; a newly live turn may link further.
    loop {
        let mut more = false;
        for (turn, targets) in &log.links {
            if floors[*turn as usize] == u32::MAX {
                continue;
            }
            for target in targets {
                more |= chain(target.0, 0, &mut floors);
            }
        }
        if !more {
            break;
        }
    }
    // A live turn's payload and every patch (a read `as_of` an older overlay reads them);
    // nothing of a redacted one (decision 0012: its bytes go unless another turn names them).
    for (id, floor) in floors.iter().enumerate() {
        if *floor == u32::MAX {
            continue;
        }
        if let Some(patches) = contexts.overlays.patch_blobs(TurnId(id as u64)) {
            live_blobs.insert(log.hash[id]);
            live_blobs.extend(patches);
        }
    }
    Ok(Marked {
        floor: floors,
        owned,
        live_blobs,
    })
}

/// The `ctxstore-gc` thread: a round every `interval`, and early once contexts holding
/// `deleted_bytes_trigger` payload bytes were deleted since the last round (a round that finds
/// nothing costs one read of the log and the indexes).
#[derive(Debug)]
pub(crate) struct Scheduler {
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    thread: Option<JoinHandle<()>>,
}

/// When the scheduler looks at the trigger.
const TRIGGER_CHECK: Duration = Duration::from_secs(1);

impl Scheduler {
    pub fn start(
        collector: Arc<Collector>,
        interval: Duration,
        deleted_bytes_trigger: u64,
    ) -> std::io::Result<Scheduler> {
        let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let thread = if interval.is_zero() && deleted_bytes_trigger == 0 {
            None
        } else {
            let stop = stop.clone();
            Some(
                std::thread::Builder::new()
                    .name("ctxstore-gc".into())
                    .spawn(move || schedule(&collector, interval, deleted_bytes_trigger, &stop))?,
            )
        };
        Ok(Scheduler { stop, thread })
    }

    pub fn stop(mut self) {
        let (stopped, wake) = &*self.stop;
        if let Ok(mut stopped) = stopped.lock() {
            *stopped = true;
        }
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn schedule(
    collector: &Collector,
    interval: Duration,
    deleted_bytes_trigger: u64,
    stop: &(Mutex<bool>, std::sync::Condvar),
) {
    let (stopped, wake) = stop;
    let tick = if interval.is_zero() {
        TRIGGER_CHECK
    } else {
        interval.min(TRIGGER_CHECK)
    };
    let deleted_bytes = || collector.published.contexts.load().deleted_payload_bytes;
    let mut last_round = Instant::now();
    let mut deleted_at_last_round = deleted_bytes();
    loop {
        let Ok(guard) = stopped.lock() else {
            return;
        };
        let Ok((guard, _)) = wake.wait_timeout_while(guard, tick, |stopped| !*stopped) else {
            return;
        };
        if *guard {
            return;
        }
        drop(guard);
        let deleted_now = deleted_bytes();
        let scheduled = !interval.is_zero() && last_round.elapsed() >= interval;
        let triggered = deleted_bytes_trigger > 0
            && deleted_now.saturating_sub(deleted_at_last_round) >= deleted_bytes_trigger;
        if !(scheduled || triggered) || collector.published.status.is_read_only() {
            continue;
        }
        last_round = Instant::now();
        deleted_at_last_round = deleted_now;
        if triggered {
            tracing::info!(
                deleted_now,
                "garbage collection: deleted contexts passed the trigger"
            );
        }
        match collector.run_if_free() {
            None => tracing::debug!(
                "scheduled garbage collection skipped: a backup or a collection is running"
            ),
            Some(Ok(_)) => {}
            Some(Err(EngineError::ShutDown)) => return,
            Some(Err(error)) => tracing::warn!(%error, "scheduled garbage collection failed"),
        }
    }
}
