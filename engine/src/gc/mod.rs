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
//! docs/storage.md (*Garbage collection*). One file per phase: `log_table.rs` and `mark.rs`
//! (start → mark), `condemn.rs` (condemn, sealing a due open pack), the fence here,
//! `sweep.rs`, `compact.rs` (the pack copies and their switch-over), `plan_log.rs` (log
//! planning and the log compaction); `pins.rs` (chunked writes in flight) and `scheduler.rs`
//! (the `ctxstore-gc` thread) around them. Rounds run one at a time (`rounds`: a requested
//! round waits, ≤ `MAINTENANCE_WAITING_MAX`; a scheduled one skips). The maintenance lock
//! keeps the readers of the store's files (backups and the replica's cuts, which hold it
//! shared) apart from the only steps that change a file under them: a pack's switch-over and
//! the log's (`exclusive`). A round holds it alone for those moments only, never for its mark,
//! sweep or copies, so shipping goes on through a collection (issue 46: a round of seconds
//! paused it, and what was acknowledged meanwhile was at risk); and it takes it only when no
//! reader holds it, never queueing (a queued writer would stop the next cut behind a backup).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::Instant;

use crate::blob::condemned::Condemned;
use crate::error::EngineError;
use crate::model::GcReport;
use crate::pipeline::{
    GcFenced, GcSnapshot, SequencerInbox, SequencerRequest, ShardRequest, ShardSnapshot,
};
use crate::published::Published;
use crate::reserve::DiskReserve;
use crate::sequencer::dead::DeadTurns;
use crate::store_dir::StoreDir;

mod compact;
mod condemn;
mod log_table;
mod mark;
mod pins;
mod plan_log;
mod scheduler;
mod sweep;

use condemn::{Dying, Manifests, Verdict};
use log_table::LogTable;
use mark::mark;
pub(crate) use pins::{ChunkPin, ChunkPins};
pub(crate) use scheduler::Scheduler;

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

/// How often a round looks again for the maintenance lock while a backup or a cut holds it.
const EXCLUSIVE_RETRY_MS: u64 = 2;

/// Everything a round needs; shared by `Engine::gc` and the scheduler thread.
#[derive(Debug)]
pub(crate) struct Collector {
    pub(super) published: Arc<Published>,
    sequencer: SequencerInbox,
    pub(super) shards: Box<[flume::Sender<ShardRequest>]>,
    pub(super) store: StoreDir,
    pub(super) pack_dead_percent: u8,
    pub(super) bytes_per_s_max: u64,
    /// The log is compacted once its droppable slots hold at least this many bytes (and
    /// `pack_dead_percent` of the slots present).
    pub(super) log_dead_bytes_min: u64,
    /// A log compaction leaves every record after this one in `turns.log` (`u64::MAX`: no
    /// limit): the replicator's, what its replica holds as slots (`Engine::hold_log_after`).
    pub log_compaction_limit: AtomicU64,
    /// A round holds it alone while it replaces a file (`exclusive`); the readers of the
    /// store's files (backups, which hard-link packs a compaction would replace, and the
    /// replica's cuts) share it.
    pub maintenance: Arc<RwLock<()>>,
    /// Rounds one at a time.
    rounds: Mutex<()>,
    /// Backups one at a time (each copies the whole store: two would share its bandwidth and
    /// finish no sooner).
    backups: Mutex<()>,
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
    pub(super) reserve: DiskReserve,
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
            log_compaction_limit: AtomicU64::new(u64::MAX),
            maintenance: Arc::new(RwLock::new(())),
            rounds: Mutex::new(()),
            backups: Mutex::new(()),
            maintenance_waiting: AtomicUsize::new(0),
            counters: GcCounters::default(),
            stopping: AtomicBool::new(false),
            orphans_before_pack: Mutex::new(open_pack_ids),
            pins: ChunkPins::default(),
            reserve,
        }
    }

    /// Waits for a running round to finish (a round is bounded; a caller asking for one
    /// wants it run, not refused because the scheduler's round happened to be running). At
    /// most `MAINTENANCE_WAITING_MAX` callers wait (each holds a thread), else `Limit`.
    pub(super) fn one_round(&self) -> Result<MutexGuard<'_, ()>, EngineError> {
        self.waiting_for(|| match self.rounds.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        })
    }

    /// The maintenance lock alone, for a round about to replace a file its readers may be
    /// reading (a pack's or the log's switch-over): taken once no backup or cut holds it,
    /// looking again every `EXCLUSIVE_RETRY_MS` rather than queueing (std's lock would make
    /// every new cut wait behind a queued writer, and so behind the backup it waits for).
    /// A round waits as long as a backup lasts; `ShutDown` when the engine stops meanwhile.
    pub(super) fn exclusive(&self) -> Result<RwLockWriteGuard<'_, ()>, EngineError> {
        loop {
            match self.maintenance.try_write() {
                Ok(guard) => return Ok(guard),
                Err(TryLockError::Poisoned(poisoned)) => return Ok(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
            if self.stopping.load(Ordering::Acquire) {
                return Err(EngineError::ShutDown);
            }
            std::thread::sleep(std::time::Duration::from_millis(EXCLUSIVE_RETRY_MS));
        }
    }

    /// Takes the maintenance lock shared (a backup or a cut: they only read the files),
    /// waiting for a round's switch-over to finish (milliseconds); same bound on waiters.
    pub fn maintenance_shared(&self) -> Result<RwLockReadGuard<'_, ()>, EngineError> {
        self.waiting_for(|| match self.maintenance.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        })
    }

    /// Backups one at a time: waits for a running backup; same bound on waiters.
    pub fn one_backup(&self) -> Result<std::sync::MutexGuard<'_, ()>, EngineError> {
        self.waiting_for(|| match self.backups.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        })
    }

    fn waiting_for<G>(&self, take: impl FnOnce() -> G) -> Result<G, EngineError> {
        let waiting = self.maintenance_waiting.fetch_add(1, Ordering::AcqRel);
        let guard = if waiting >= MAINTENANCE_WAITING_MAX {
            Err(EngineError::Limit {
                what: "garbage collections, backups and cuts waiting for the running collection",
                limit: MAINTENANCE_WAITING_MAX,
            })
        } else {
            Ok(take())
        };
        self.maintenance_waiting.fetch_sub(1, Ordering::AcqRel);
        guard
    }

    /// One round, after any running one. Blocking file I/O on the caller's thread.
    pub fn run(&self) -> Result<GcReport, EngineError> {
        let guard = self.one_round()?;
        if self.stopping.load(Ordering::Acquire) {
            return Err(EngineError::ShutDown);
        }
        self.round(guard)
    }

    /// One round if none is running, else `None` (the scheduler's next tick tries again).
    pub(super) fn run_if_free(&self) -> Option<Result<GcReport, EngineError>> {
        match self.rounds.try_lock() {
            Ok(guard) => Some(self.round(guard)),
            Err(TryLockError::Poisoned(poisoned)) => Some(self.round(poisoned.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// One round, the only one while `_round` is held.
    fn round(&self, _round: MutexGuard<'_, ()>) -> Result<GcReport, EngineError> {
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

    /// The round's phases in order: read the log and mark, condemn (sealing due open packs),
    /// fence, sweep and compact, then the log. Answers whether the fence reached the
    /// sequencer (else the round ended before it: nothing to collect, or the fence was
    /// aborted); the report's live and dead bytes are the mark's either way.
    fn collect(&self, snapshot: &GcSnapshot) -> Result<(GcReport, Fence), EngineError> {
        let log = LogTable::read(&self.published, snapshot.watermark)?;
        let marked = mark(&log, &snapshot.contexts, &snapshot.dead, &self.published)?;
        let mut report = GcReport::default();
        let mut dying = Dying::of(&log, &marked, snapshot);
        report.turns_dead = dying.dead.count();
        let cut = self.cut()?;
        let manifests = Manifests::read(self)?;
        manifests.extend_dying(&mut dying);
        let plans = self.condemn(&dying, &marked, &manifests, &cut, &mut report)?;
        if dying.dead.is_empty() && plans.is_empty() {
            // Nothing new dies; turns collected before may still leave the log.
            self.compact_log(&log, &marked, snapshot.watermark, &mut report)?;
            return Ok((report, Fence::NotSent));
        }
        let verdict = Verdict::of(plans, &manifests);
        self.pins.install(verdict.condemned.clone());
        if let GcFenced::Aborted(turn_id) = self.fence(dying.dead, verdict.condemned.clone())? {
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
        report.blobs_dead += self.sweep_manifests(&verdict)?;
        self.compact_packs(verdict, &mut report)?;
        report.dead_bytes = report.dead_bytes.saturating_sub(report.bytes_reclaimed);
        self.compact_log(&log, &marked, snapshot.watermark, &mut report)?;
        Ok((report, Fence::Reached))
    }

    /// Where each shard's durable data ends now, and the orphan bound: packs sealed before
    /// the last round began (a blob no turn ever named is collected only there, so a client
    /// has at least one interval between storing a blob and naming it).
    fn cut(&self) -> Result<ShardCut, EngineError> {
        let snapshots = (0..self.shards.len())
            .map(|shard| self.shard_snapshot(shard))
            .collect::<Result<Vec<_>, _>>()?;
        let open_packs: Vec<u32> = snapshots.iter().map(|cut| cut.pack_id).collect();
        let orphans_before = self
            .orphans_before_pack
            .lock()
            .map(|mut before| std::mem::replace(&mut *before, open_packs.clone()))
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        Ok(ShardCut {
            snapshots,
            open_packs,
            orphans_before,
        })
    }

    /// A shard's durable extent between two of its batches.
    fn shard_snapshot(&self, shard: usize) -> Result<ShardSnapshot, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.shards[shard]
            .send(ShardRequest::Snapshot { reply })
            .map_err(|_| EngineError::ShutDown)?;
        answer.recv().map_err(|_| EngineError::ShutDown)
    }

    /// Fence: from here on nothing may name a dead turn or a swept blob. The sequencer writes
    /// the gc-dead records durably, or aborts when a record since `GcStart` named a dead turn.
    fn fence(&self, dead: DeadTurns, condemned: Arc<Condemned>) -> Result<GcFenced, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.sequencer
            .0
            .send(SequencerRequest::GcFence {
                dead,
                condemned,
                reply,
            })
            .map_err(|_| EngineError::ShutDown)?;
        answer.recv().map_err(|_| EngineError::ShutDown)?
    }
}

/// Each shard's durable extent as a round sees it (see `Collector::cut`).
struct ShardCut {
    snapshots: Vec<ShardSnapshot>,
    open_packs: Vec<u32>,
    orphans_before: Vec<u32>,
}

/// Whether a round's fence reached the sequencer (which stops noting when it does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    NotSent,
    Reached,
}
