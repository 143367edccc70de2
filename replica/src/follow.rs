//! The standby (`ctxstore-server --follow URL --data DIR`): a store that serves every read from
//! what its primary shipped, polling the replica at most every interval, and refuses writes
//! (READ_ONLY naming the primary) until it is promoted.
//!
//! 1. **Prepare** (before the engine opens): a `DIR` without a store is restored from the
//!    newest point (`restore.rs`); a `DIR` that followed before resumes from the segment its
//!    `DIR/replica/state` records (no restore again).
//! 2. **Poll** (one thread, `ctxstore-follow`): the segments after the last applied one are
//!    listed from an offset (`start-after` the sibling key, never a whole listing); each is
//!    fetched, checked, and applied THROUGH THE ACTORS (`Engine::ingest_pack`, then
//!    `Engine::ingest_log`): pack bytes first (written, synced, indexed, published by their
//!    shard), then the log slots naming them (written, synced, replayed with recovery's rules,
//!    published by the sequencer as one batch). A cut shipped as several segments (`continues`)
//!    is applied whole: its slots are handed over at its last segment, since a record's slots
//!    may straddle two of them.
//! 3. **Record**: after each restore point applied, `DIR/replica/state` (generation, segment,
//!    `fork`, the identity of every pack file) and `DIR/replica/inherited` (the replica's state
//!    there): a restart resumes from it, and a promotion starts a new generation that refers to
//!    the objects already shipped. What the engine applied beyond that record is applied again
//!    idempotently (pack bytes it holds are compared, log slots it holds skipped).
//! 4. **Follow the lineage**: when the generation ends (its primary was promoted elsewhere or
//!    restarted on a replica ahead of it), the next generation is followed if it forked exactly
//!    where this standby stands.
//!
//! A segment that does not apply (damaged, a slot that does not replay, a lineage that forked
//! before this standby's point) stops the applying: the standby keeps serving what it has,
//! logs the error, and `stats` says `stalled`. An object store that is down is retried every
//! interval (`failing`).

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ctxstore_engine::store_dir::StoreDir;
use ctxstore_engine::{Engine, files};

use crate::catalog;
use crate::error::ReplicaError;
use crate::format::{
    Checkpoint, LOG_SLOT_BYTES, ObjectRef, Replaced, SegmentHeader, StoreState, decode_segment,
};
use crate::layout::Key;
use crate::local::{self, FileIdentity, LocalState};
use crate::remote::Remote;
use crate::restore::{self, RestorePoint};
use crate::stats::{ReplicationRole, ReplicationState, ReplicationStats, now_unix_ms};
use crate::target::{self, S3Settings};

/// How the standby follows (the server's `--follow` and `--replicate-*` flags).
#[derive(Clone, Debug)]
pub struct FollowConfig {
    pub url: String,
    pub s3: S3Settings,
    /// At most one listing per interval.
    pub interval: Duration,
    /// How the store ships once promoted (its URL is the followed one).
    pub ship: crate::ship::ShipConfig,
    /// `--auto-promote` (decision 0031 §7): take the prefix over once its lease has gone
    /// unrenewed for the holder's L + m, as this standby observes it (needs `ship.lease`).
    pub auto_promote: bool,
}

/// How long one request of a standby's poll may take: ten intervals, at least 2 s (a whole
/// segment of `--replica-segment-bytes-max` must fit), at most the shipper's 30 s.
const POLL_REQUEST_TIMEOUT_MIN: Duration = Duration::from_secs(2);
const POLL_REQUEST_TIMEOUT_MAX: Duration = Duration::from_secs(30);

impl FollowConfig {
    pub fn request_timeout(&self) -> Duration {
        (self.interval * 10).clamp(POLL_REQUEST_TIMEOUT_MIN, POLL_REQUEST_TIMEOUT_MAX)
    }
}

/// `DIR/replica/promote`: written by `ctxstore-server promote --data DIR`; the running standby
/// looks for it at every poll (decision 0019 says why a file and not a message).
pub fn promote_request_path(data_dir: &Path) -> PathBuf {
    local::dir(data_dir).join("promote")
}

/// `DIR/replica/promote.answer`: the standby's answer to the request, `promoted` or
/// `refused: WHY`, written when it acts on the request (`ctxstore-server promote` waits for
/// it).
pub fn promote_answer_path(data_dir: &Path) -> PathBuf {
    local::dir(data_dir).join("promote.answer")
}

/// What the standby answered a promotion request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromotionAnswer {
    Promoted,
    /// Why it stays a standby (it has not applied everything its primary shipped, or the
    /// promotion itself failed); the request is gone.
    Refused(String),
}

/// Asks the standby running on `data_dir` to promote itself (durably: the file and its
/// directory are synced, so a standby restarted meanwhile still finds it). An earlier answer
/// is removed first.
pub fn request_promotion(data_dir: &Path) -> Result<PathBuf, ReplicaError> {
    let path = promote_request_path(data_dir);
    if !local::dir(data_dir).join("state").exists() {
        return Err(ReplicaError::Invalid(format!(
            "{} holds no standby (no replica/state); start one with --follow URL --data DIR",
            data_dir.display()
        )));
    }
    let answer = promote_answer_path(data_dir);
    match files::remove_durably(&answer) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(ReplicaError::io(&answer, error));
        }
        _ => {}
    }
    files::write_file_durably(&path, b"promote\n")
        .map_err(|source| ReplicaError::io(&path, source))?;
    Ok(path)
}

/// The standby's answer to the request `request_promotion` made, once there is one (`None`:
/// not yet).
pub fn promotion_answer(data_dir: &Path) -> Result<Option<PromotionAnswer>, ReplicaError> {
    let path = promote_answer_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(match text.trim_end().strip_prefix("refused: ") {
            Some(why) => PromotionAnswer::Refused(why.to_string()),
            None => PromotionAnswer::Promoted,
        })),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(ReplicaError::io(&path, error)),
    }
}

/// The standby acts on the request: the answer first (durably), then the request goes.
fn answer_promotion(data_dir: &Path, answer: &PromotionAnswer) {
    let text = match answer {
        PromotionAnswer::Promoted => "promoted\n".to_string(),
        PromotionAnswer::Refused(why) => format!("refused: {why}\n"),
    };
    let path = promote_answer_path(data_dir);
    if let Err(error) = files::write_file_durably(&path, text.as_bytes()) {
        tracing::warn!(%error, path = %path.display(), "writing the promotion's answer failed");
    }
    let _ = files::remove_durably(&promote_request_path(data_dir));
}

/// Where the standby stands: restored or resumed (`prepare`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub restored: bool,
    pub generation: u32,
    pub seq: u64,
}

/// How often a standby whose replica has no restore point yet looks again, at most.
const WAITING_POLL_MAX: Duration = Duration::from_secs(5);

/// How long a stalled standby waits before it tries a failed fresh restore again (the
/// replica may be unreachable, or its newest point damaged until the next checkpoint).
pub const FRESH_RESTORE_RETRY: Duration = Duration::from_secs(30);

/// `prepare`, waiting while the replica has no restore point yet (issue 44: a standby started
/// with its primary, before the primary's first write shipped, exited). While it waits,
/// `stats` says `waiting` (role standby, the replica's URL, and in `reason` what it waits for:
/// no replica at all, or a generation that shipped nothing yet), the log says so once per
/// change, and the replica is looked at again every interval (at most every
/// `WAITING_POLL_MAX`). `on_first_wait` runs once, when the first look finds nothing (the
/// server starts answering then). A stop (`stopping`, set by a signal) while waiting is
/// `ReplicaError::Stopped`. Blocking.
pub fn prepare_waiting(
    data_dir: &Path,
    config: &FollowConfig,
    stopping: &AtomicBool,
    stats: &ReplicationStats,
    mut on_first_wait: impl FnMut(),
) -> Result<Prepared, ReplicaError> {
    let pause = config.interval.min(WAITING_POLL_MAX);
    let mut told: Option<String> = None;
    loop {
        match prepare(data_dir, config) {
            Err(ReplicaError::NotYet { location, what }) => {
                let now = format!("{location} {what}");
                if told.is_none() {
                    stats.set_role(ReplicationRole::Standby);
                    stats.set_target(&config.url);
                    stats.set_state(ReplicationState::Waiting);
                }
                if told.as_ref() != Some(&now) {
                    tracing::info!(
                        replica = %crate::stats::without_credentials(&location),
                        waiting_for = %what,
                        poll_interval = ?pause,
                        "standby waiting: its primary has shipped no restore point yet; it \
                         restores and follows as soon as one is there"
                    );
                    stats.set_reason(&format!(
                        "{} {what}: waiting for the primary's first restore point",
                        crate::stats::without_credentials(&location)
                    ));
                    if told.is_none() {
                        on_first_wait();
                    }
                    told = Some(now);
                }
            }
            done => return done,
        }
        // Sleeps in short steps so that a stop is seen at once.
        let deadline = std::time::Instant::now() + pause;
        while std::time::Instant::now() < deadline {
            if stopping.load(Ordering::Acquire) {
                return Err(ReplicaError::Stopped);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if stopping.load(Ordering::Acquire) {
            return Err(ReplicaError::Stopped);
        }
    }
}

/// Makes `data_dir` a store the standby can open: restored from the newest point when it holds
/// none, else checked to be this replica's follower (see the module doc). Blocking. A replica
/// with no restore point yet is `ReplicaError::NotYet` (`prepare_waiting` waits for one).
pub fn prepare(data_dir: &Path, config: &FollowConfig) -> Result<Prepared, ReplicaError> {
    let remote = target::open(&config.url, &config.s3)?;
    let runtime = runtime()?;
    runtime.block_on(async {
        let marker = catalog::marker(&remote)
            .await?
            .ok_or_else(|| ReplicaError::NotYet {
                location: remote.location.clone(),
                what: "holds no replica".into(),
            })?;
        let meta = data_dir.join(ctxstore_engine::store_dir::META_FILE);
        if meta.exists() {
            let local = LocalState::load(data_dir)?.ok_or_else(|| {
                ReplicaError::Invalid(format!(
                    "{} holds a store that was never restored from a replica; a standby \
                     starts from an empty directory (or one it followed before)",
                    data_dir.display()
                ))
            })?;
            if local.replica_id != marker.replica_id {
                return Err(ReplicaError::OtherStore {
                    location: remote.location.clone(),
                    remote: crate::ship::hex(&marker.replica_id),
                    local: crate::ship::hex(&local.replica_id),
                });
            }
            if !local.fork || local::load_inherited(data_dir)?.is_none() {
                return Err(ReplicaError::Invalid(format!(
                    "{} holds a store that shipped to this replica itself (a primary's, or a \
                     promoted standby's); follow from an empty directory instead",
                    data_dir.display()
                )));
            }
            return Ok(Prepared {
                restored: false,
                generation: local.generation,
                seq: local.seq,
            });
        }
        let report = restore::restore(
            &remote,
            data_dir,
            RestorePoint::Latest,
            None,
            &mut |progress| {
                tracing::debug!(?progress, "standby restoring");
            },
        )
        .await?;
        tracing::info!(
            generation = report.generation,
            seq = report.seq,
            records = report.log_records,
            "standby restored its starting point"
        );
        Ok(Prepared {
            restored: true,
            generation: report.generation,
            seq: report.seq,
        })
    })
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn runtime() -> Result<tokio::runtime::Runtime, ReplicaError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ReplicaError::io("tokio runtime", source))
}

/// The running standby's poller; `stop` ends it, `promote` applies what is left first.
#[derive(Debug)]
pub struct Follower {
    stats: Arc<ReplicationStats>,
    stopping: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<Result<(), ReplicaError>>>,
}

/// How a poll loop ended.
enum Ended {
    Stopped(Result<(), ReplicaError>),
    /// The promote file was found (or, with `--auto-promote`, the lease lapsed) and the
    /// replica applied up to its end.
    Promote,
}

impl Follower {
    /// Starts polling for the engine `prepare` made ready (opened with
    /// `EngineConfig::follower`).
    pub fn start(engine: Engine, config: FollowConfig) -> Result<Follower, ReplicaError> {
        let remote = target::open_with_timeout(&config.url, &config.s3, config.request_timeout())?;
        Follower::start_with(engine, config, remote)
    }

    /// `start` on a location opened by the caller (a test's fault-injecting store).
    pub fn start_with(
        engine: Engine,
        config: FollowConfig,
        remote: Remote,
    ) -> Result<Follower, ReplicaError> {
        let data_dir = engine.config().data_dir.clone();
        let mut local = LocalState::load(&data_dir)?.ok_or_else(|| {
            ReplicaError::Invalid(format!("{} holds no replica record", data_dir.display()))
        })?;
        let inherited = local::load_inherited(&data_dir)?.ok_or_else(|| {
            ReplicaError::Invalid(format!(
                "{} holds no inherited replica state",
                data_dir.display()
            ))
        })?;
        // The inherited state is written first at each point (`commit`): a crash between the
        // two files leaves it one point ahead of the record, and it is the one that matches
        // the state it describes.
        local.generation = inherited.generation;
        local.seq = inherited.seq;
        let stats = Arc::new(ReplicationStats::default());
        stats.set_state(ReplicationState::Following);
        stats.set_role(ReplicationRole::Standby);
        stats.set_target(&config.url);
        stats
            .records
            .store(inherited.state.log_records, Ordering::Relaxed);
        stats
            .generation
            .store(u64::from(local.generation), Ordering::Relaxed);
        stats.seq.store(local.seq, Ordering::Relaxed);
        stats
            .shipped_cut_unix_ms
            .store(inherited.created_unix_ms, Ordering::Relaxed);
        let applier = Applier {
            engine,
            remote,
            config,
            stats: stats.clone(),
            data_dir,
            local,
            state: inherited.state,
            applied_cut_unix_ms: inherited.created_unix_ms,
            epoch: 0,
            kept_own: BTreeSet::new(),
            lease_watch: None,
            lease_read_due_ns: 0,
            keyring_version: None,
        };
        let stopping = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(tokio::sync::Notify::new());
        let runtime = runtime()?;
        let thread = {
            let stopping = stopping.clone();
            let wake = wake.clone();
            std::thread::Builder::new()
                .name("ctxstore-follow".into())
                .spawn(move || follow_then_ship(runtime, applier, stopping, wake))
                .map_err(|source| ReplicaError::io("ctxstore-follow thread", source))?
        };
        Ok(Follower {
            stats,
            stopping,
            wake,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> &Arc<ReplicationStats> {
        &self.stats
    }

    /// A stalled standby restored its replica afresh: stop it, `fresh::swap_in`, and start
    /// again (the server does).
    pub fn fresh_restore_ready(&self) -> bool {
        self.stats.fresh_restore_ready.load(Ordering::Acquire)
    }

    /// Applies what the replica holds one last time, then ends the thread; answers the last
    /// poll's error (a promotion refuses to go on when the standby could not catch up).
    pub fn stop(mut self) -> Result<(), ReplicaError> {
        self.stopping.store(true, Ordering::Release);
        self.wake.notify_one();
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ReplicaError::Invalid(
                "the ctxstore-follow thread panicked".into(),
            )),
            None => Ok(()),
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The standby's thread: polls until stopped, or until promoted; then ships as a primary
/// (the same figures, now `shipping`) until stopped.
fn follow_then_ship(
    runtime: tokio::runtime::Runtime,
    mut applier: Applier,
    stopping: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
) -> Result<(), ReplicaError> {
    loop {
        let ended = runtime.block_on(applier.run(stopping.clone(), wake.clone()));
        match ended {
            Ended::Stopped(result) => return result,
            Ended::Promote => {}
        }
        // The epoch and the seal (`takeover.rs`), then ids past everything the old primary
        // may have handed out (issue 46 item 8), while the store still takes no writes; then,
        // outside the runtime, the replicator (it runs its own).
        let taken = runtime.block_on(async {
            let promotion = applier.take_over().await?;
            let floors = crate::ids::start_past_replica(&applier.remote, &applier.engine).await?;
            Ok::<_, ReplicaError>((promotion, floors))
        });
        let promoted = taken.and_then(|(promotion, floors)| {
            tracing::info!(
                epoch = ?promotion.epoch,
                next_record_id = floors.records,
                next_context_id = floors.contexts,
                "the promoted store's ids start past the replica's"
            );
            applier.promote(promotion)
        });
        applier.stats.promoting.store(false, Ordering::Relaxed);
        match promoted {
            Ok(replicator) => {
                answer_promotion(&applier.data_dir, &PromotionAnswer::Promoted);
                while !stopping.load(Ordering::Acquire) {
                    std::thread::park_timeout(Duration::from_millis(100));
                }
                replicator.stop();
                return Ok(());
            }
            Err(error) => {
                // Still a standby: it goes on following (and looks for the file again).
                tracing::error!(%error, "promotion failed; the store stays a standby");
                applier.stats.count_failure(error.kind());
                let why = format!("the promotion failed: {error}");
                answer_promotion(&applier.data_dir, &PromotionAnswer::Refused(why));
            }
        }
    }
}

struct Applier {
    engine: Engine,
    remote: Remote,
    config: FollowConfig,
    stats: Arc<ReplicationStats>,
    data_dir: PathBuf,
    /// The last restore point applied (`seq`), the generation followed.
    local: LocalState,
    /// The replica's state after `local.seq`.
    state: StoreState,
    /// When the cut of the last applied point was taken on the primary.
    applied_cut_unix_ms: u64,
    /// The newest epoch seen (its primary is the one READ_ONLY names).
    epoch: u64,
    /// Packs whose rewritten version this standby has not installed yet (its own is a
    /// superset until the cut's end installs it): a promoted store would upload them whole
    /// (their identity is not recorded).
    kept_own: BTreeSet<(u16, u32)>,
    /// `--auto-promote`: the lease version watched, and the boot time of the first answer
    /// that showed it (decision 0031 §5: t_o).
    lease_watch: Option<(crate::lease::Seen, u64)>,
    /// When the lease is read next (boot ns).
    lease_read_due_ns: u64,
    /// The version of the replica's keyring last installed (decision 0032 §5).
    keyring_version: Option<String>,
}

/// One restore point's worth of segments, fetched and checked, ready to apply.
#[derive(Default)]
struct Pending {
    slots: Vec<u8>,
    /// Record id of the first slot in `slots` (0: no slot yet).
    first_record_id: u64,
    /// Sealed packs a collection rewrote on the primary, whole, that differ from this
    /// standby's: installed after the cut's slots (its gc-dead records and redactions first).
    rewritten: Vec<(u16, u32, Vec<u8>)>,
    /// Per pack, the bytes at the end of a segment's piece that begin a record the next
    /// segment ends (`IngestedPack::bytes_left`), and their offset: sent again with the next
    /// piece. None is left at a cut's end.
    tails: std::collections::BTreeMap<(u16, u32), (u64, Vec<u8>)>,
}

/// What applying one segment did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Applied {
    /// A cut's segment, not its last: no restore point yet.
    Continues,
    /// A restore point, cut on the primary at this time (Unix ms).
    Point(u64),
    /// A seal (decision 0031 §2): the generation ends here, a partial cut before it is
    /// dropped, and the lineage goes on in the next generation.
    Seal,
}

/// A segment's log slots (of records from `first_record_id`) held until the cut's last
/// segment: they must continue the slots its earlier segments held.
fn hold_slots(
    pending: &mut Option<Pending>,
    slots: &[u8],
    first_record_id: u64,
    what: &str,
) -> Result<(), ReplicaError> {
    match pending.as_mut() {
        Some(held) if held.first_record_id != 0 => {
            let expected = held.first_record_id + (held.slots.len() as u64) / LOG_SLOT_BYTES;
            if expected != first_record_id {
                return Err(ReplicaError::Damaged {
                    key: what.to_string(),
                    reason: format!(
                        "its log slots start at record {first_record_id}, the cut's \
                         earlier segments end before record {expected}"
                    ),
                });
            }
            held.slots.extend_from_slice(slots);
        }
        _ => {
            let held = pending.get_or_insert_with(Pending::default);
            held.slots = slots.to_vec();
            held.first_record_id = first_record_id;
        }
    }
    Ok(())
}

impl Applier {
    async fn run(&mut self, stopping: Arc<AtomicBool>, wake: Arc<tokio::sync::Notify>) -> Ended {
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stalled: Option<String> = None;
        // A stalled standby restores afresh at once, then again every
        // `FRESH_RESTORE_RETRY` until one succeeds (`fresh.rs`).
        let mut fresh_due: Option<std::time::Instant> = None;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = wake.notified() => {}
            }
            let last = stopping.load(Ordering::Acquire);
            let polled = match &stalled {
                Some(reason) => Err(ReplicaError::Invalid(reason.clone())),
                None => self.poll().await,
            };
            self.polled(&polled, &mut stalled, &mut fresh_due);
            if let Some(due) = fresh_due
                && std::time::Instant::now() >= due
                && !last
            {
                fresh_due = self.fresh_restore(stalled.as_deref()).await;
            }
            if last {
                return Ended::Stopped(polled);
            }
            if polled.is_ok() && self.lease_lapsed().await {
                self.stats.promoting.store(true, Ordering::Relaxed);
                return Ended::Promote;
            }
            if promote_request_path(&self.data_dir).exists() {
                if let Err(error) = &polled {
                    self.refuse_promotion(error, stalled.is_some());
                } else {
                    self.stats.promoting.store(true, Ordering::Relaxed);
                    return Ended::Promote;
                }
            }
        }
    }

    /// `--auto-promote`, after a poll that applied everything listed (a caught-up standby
    /// wins): whether the lease watched has gone unrenewed for its holder's L + m since this
    /// standby first saw its version, or was released. Read at most every min(interval, L/6);
    /// a read that fails starts the watch again (the holder may have lost the object store
    /// with everyone else: it is given its renewal first). A prefix without a lease is never
    /// taken over.
    async fn lease_lapsed(&mut self) -> bool {
        let Some(lease) = self.config.ship.lease.filter(|_| self.config.auto_promote) else {
            return false;
        };
        let now_ns = ctxstore_engine::clock::boot_now_ns();
        if now_ns < self.lease_read_due_ns {
            return false;
        }
        let every = self.config.interval.min(lease / 6);
        self.lease_read_due_ns = now_ns.saturating_add(duration_ns(every));
        let seen = match crate::lease::read(&self.remote).await {
            Ok(Some(seen)) => seen,
            Ok(None) => return false,
            Err(error) => {
                tracing::warn!(%error, "reading the lease failed: its watch starts again");
                self.lease_watch = None;
                return false;
            }
        };
        let seen_ns = ctxstore_engine::clock::boot_now_ns();
        if seen.record.state == crate::format::LeaseState::Released {
            tracing::info!(holder = %seen.record.holder, "the lease was released: taking over");
            self.lease_watch = Some((seen, 0));
            return true;
        }
        let lapse = Duration::from_millis(
            u64::from(seen.record.lease_ms) + u64::from(seen.record.margin_ms),
        );
        self.stats.set_lease_holder(&seen.record.holder);
        self.stats
            .failovers
            .store(seen.record.failovers, Ordering::Relaxed);
        match &self.lease_watch {
            Some((watched, since)) if watched.version == seen.version => {
                let lapsed = seen_ns >= since.saturating_add(duration_ns(lapse));
                if lapsed {
                    tracing::warn!(holder = %seen.record.holder, unrenewed_for = ?lapse, "the primary's lease lapsed: taking over");
                }
                lapsed
            }
            _ => {
                self.lease_watch = Some((seen, seen_ns));
                self.stats
                    .lease_renewed_unix_ms
                    .store(now_unix_ms(), Ordering::Relaxed);
                false
            }
        }
    }

    /// Says how a poll went in the figures and the log; an error that is not transient
    /// stalls the standby (`stalled`, the reason) and makes a fresh restore due at once.
    fn polled(
        &mut self,
        polled: &Result<(), ReplicaError>,
        stalled: &mut Option<String>,
        fresh_due: &mut Option<std::time::Instant>,
    ) {
        match polled {
            Ok(()) => {
                self.stats.set_state(ReplicationState::Following);
                self.stats.set_reason("");
                self.stats
                    .last_success_unix_ms
                    .store(now_unix_ms(), Ordering::Relaxed);
            }
            // Stalled already: said once, when it happened.
            Err(_) if stalled.is_some() => {}
            Err(error) if error.is_transient() => {
                tracing::warn!(%error, "standby poll failed; the next one retries");
                self.stats.count_failure(error.kind());
                self.stats.set_reason(&error.to_string());
                self.stats.set_state(ReplicationState::Failing);
                // A poll may have folded segments into the state that it did not record:
                // the next starts again from the last recorded point (applying is
                // idempotent).
                if let Err(error) = self.reload() {
                    tracing::warn!(%error, "rereading the standby's record failed");
                }
            }
            Err(error) => {
                tracing::error!(%error, "the standby cannot apply what its primary shipped; it keeps serving what it has and restores the replica afresh to start again from there");
                self.stats.count_failure(error.kind());
                self.stats.set_reason(&error.to_string());
                self.stats.set_state(ReplicationState::Stalled);
                *stalled = Some(error.to_string());
                *fresh_due = Some(std::time::Instant::now());
            }
        }
    }

    /// A stalled standby's fresh restore (`stalled`: why it stalled). Answers when the next
    /// is due: never once one succeeded, `FRESH_RESTORE_RETRY` from now if it failed.
    async fn fresh_restore(&self, stalled: Option<&str>) -> Option<std::time::Instant> {
        match self.restore_afresh().await {
            Ok(()) => {
                self.stats.set_reason(&format!(
                    "{}; restored afresh, restarting onto it",
                    stalled.unwrap_or_default()
                ));
                self.stats
                    .fresh_restore_ready
                    .store(true, Ordering::Release);
                None
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?FRESH_RESTORE_RETRY, "the stalled standby's fresh restore failed; it tries again");
                self.stats.count_failure(error.kind());
                Some(std::time::Instant::now() + FRESH_RESTORE_RETRY)
            }
        }
    }

    /// Promoting a standby that has not applied everything its primary shipped would drop
    /// acknowledged writes, or fork from a point it cannot apply past (issue 46): refused,
    /// saying why; the request goes.
    fn refuse_promotion(&self, error: &ReplicaError, stalled: bool) {
        let state = self.stats.state().name();
        let why = format!(
            "this standby has not applied everything its primary shipped \
             (state {state}: {error}); {}",
            if stalled {
                "restore a new standby from the replica and promote that one"
            } else {
                "promote it once it follows again (ctxstore stats: following)"
            }
        );
        tracing::error!(reason = %why, "promotion refused");
        answer_promotion(&self.data_dir, &PromotionAnswer::Refused(why));
    }

    /// The replica's latest point, restored into `DIR/.fresh` (an unfinished one there is
    /// dropped first) and marked complete: the server puts it in place of this store.
    async fn restore_afresh(&self) -> Result<(), ReplicaError> {
        let fresh = crate::fresh::fresh_dir(&self.data_dir);
        if fresh.exists() {
            files::remove_dir_all(&fresh).map_err(|source| ReplicaError::io(&fresh, source))?;
        }
        let report = restore::restore(
            &self.remote,
            &fresh,
            RestorePoint::Latest,
            None,
            &mut |progress| tracing::debug!(?progress, "stalled standby restoring afresh"),
        )
        .await?;
        crate::fresh::mark_complete(&self.data_dir)?;
        tracing::info!(
            generation = report.generation,
            seq = report.seq,
            records = report.log_records,
            "the stalled standby restored its replica afresh; it restarts onto it"
        );
        Ok(())
    }

    /// The first steps of a promotion (`takeover.rs`), once the replica is applied to its
    /// end: the next epoch taken, then the followed generation sealed, applying what its
    /// primary created meanwhile. Answers the epoch taken.
    async fn take_over(&mut self) -> Result<crate::ship::Promotion, ReplicaError> {
        // The failover's figure counts from the first sight of the lapsed version (an
        // automatic takeover), else from now.
        let started_ns = match &self.lease_watch {
            Some((_, since)) if *since > 0 => *since,
            _ => ctxstore_engine::clock::boot_now_ns(),
        };
        let lease = match self.config.ship.lease {
            Some(lease) => Some(self.take_lease(lease).await?),
            None => None,
        };
        let taker = crate::takeover::Taker {
            replica_id: self.local.replica_id,
            holder: crate::takeover::holder(),
            advertise: self.config.ship.advertise.clone(),
        };
        let epoch =
            crate::takeover::take_epoch(&self.remote, &taker, self.local.generation).await?;
        tracing::info!(
            epoch,
            generation = self.local.generation,
            "promotion: epoch taken"
        );
        self.seal(epoch).await?;
        let (keeper, open_at_ns) = lease.unzip();
        Ok(crate::ship::Promotion {
            epoch: Some(epoch),
            keeper,
            open_at_ns: open_at_ns.unwrap_or(0),
            started_ns,
        })
    }

    /// With `--replica-lease` (decision 0031 §7, a manual promotion): the lease's current
    /// version taken (`If-Match`; none there: created), renewed from then on by a keeper of
    /// its own, and the boot time before which this store must not acknowledge: the old
    /// holder's L + m after the answer that showed the version (at once when it was
    /// released). Another taker winning the version refuses the promotion.
    async fn take_lease(
        &mut self,
        lease: Duration,
    ) -> Result<(crate::lease::LeaseKeeper, u64), ReplicaError> {
        use crate::lease::{Acquired, LeaseTiming};
        let now_ns = ctxstore_engine::clock::boot_now_ns;
        let timing = LeaseTiming { lease };
        // Auto-promotion takes the version it watched lapse (its first sight the start of the
        // wait, already past); a manual one the version there now.
        let (current, seen_ns) = match self.lease_watch.take() {
            Some((watched, since)) => (Some(watched), since),
            None => (crate::lease::read(&self.remote).await?, now_ns()),
        };
        let mut me = crate::ship::lease_record(
            self.local.replica_id,
            self.local.generation,
            &self.config.ship.advertise,
            &self.data_dir,
            timing,
        );
        let sent_ns = now_ns();
        let (acquired, open_at_ns) = match &current {
            None => (crate::lease::acquire(&self.remote, me).await?, seen_ns),
            Some(current) => {
                me.failovers = current.record.failovers + 1;
                let waits = current.record.state == crate::format::LeaseState::Held;
                let lapse = Duration::from_millis(u64::from(current.record.lease_ms))
                    + Duration::from_millis(u64::from(current.record.margin_ms));
                let open_at = if waits {
                    seen_ns.saturating_add(u64::try_from(lapse.as_nanos()).unwrap_or(u64::MAX))
                } else {
                    seen_ns
                };
                (
                    crate::lease::take(&self.remote, current, me).await?,
                    open_at,
                )
            }
        };
        let holder = match acquired {
            Acquired::Ours(holder) => holder,
            Acquired::Held(now) => {
                return Err(ReplicaError::LeaseHeld {
                    location: self.remote.location.clone(),
                    holder: now.record.holder,
                });
            }
        };
        tracing::info!(
            failovers = holder.held().record.failovers,
            "promotion: lease taken; it is renewed from now on"
        );
        self.stats.set_lease_holder(&holder.held().record.holder);
        self.stats
            .failovers
            .store(holder.held().record.failovers, Ordering::Relaxed);
        let hooks = crate::ship::keeper_hooks(
            &self.engine,
            &self.config.ship.remote_acks,
            &self.stats,
            &self.remote.location,
        );
        self.stats.lease_ms.store(
            u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let keeper = crate::lease::LeaseKeeper::start(holder, timing, sent_ns, hooks)?;
        Ok((keeper, open_at_ns))
    }

    /// Ends the followed generation with a seal (decision 0031 §2): tried at the key after
    /// the last segment applied; a segment the old primary created there first is applied
    /// and the next key tried. Leaves the standby at the generation's last restore point
    /// before the seal (a cut shipped in part is dropped), where the new generation forks.
    async fn seal(&mut self, epoch: u64) -> Result<(), ReplicaError> {
        use crate::takeover::SealTry;
        let generation = self.local.generation;
        let mut point = (self.state.clone(), self.applied_cut_unix_ms);
        let mut pending = None;
        let mut seq = self.local.seq + 1;
        loop {
            let seal = SegmentHeader::seal(
                generation,
                seq,
                epoch,
                self.local.replica_id,
                point.1,
                &point.0,
            );
            match crate::takeover::try_seal(&self.remote, &seal).await? {
                SealTry::Sealed => {
                    tracing::info!(
                        generation,
                        seq,
                        epoch,
                        "sealed the old primary's generation"
                    );
                    break;
                }
                SealTry::SealedBefore(theirs) => {
                    // Another taker sealed it (and died, or is forking): the generation ends
                    // there all the same; the fork's create-only generation object decides
                    // between the takers.
                    tracing::warn!(
                        generation,
                        seq,
                        theirs = theirs.epoch,
                        "the generation was sealed already by another taker"
                    );
                    break;
                }
                SealTry::Segment => {
                    match self.apply_segment(generation, seq, &mut pending).await? {
                        Applied::Point(created_unix_ms) => {
                            self.commit(seq, created_unix_ms)?;
                            point = (self.state.clone(), created_unix_ms);
                        }
                        Applied::Continues => {}
                        // Only a taker writes a seal, and keys are never written twice: one
                        // found here now was there when `try_seal` looked. Ends it all the same.
                        Applied::Seal => break,
                    }
                }
            }
            seq += 1;
        }
        // Back to the last point: the new generation forks there.
        self.reload()
    }

    /// Promotion (the replica applied to its end and sealed just now): a new generation
    /// started under `epoch` by the replicator (`ship.rs` `attach`: this store's record says
    /// `fork`), then writes accepted. The old primary's next segment finds the seal (or its
    /// next cycle the newer epoch) and it stops shipping.
    fn promote(
        &mut self,
        promotion: crate::ship::Promotion,
    ) -> Result<crate::Replicator, ReplicaError> {
        let open_at_ns = promotion.open_at_ns;
        let started_ns = promotion.started_ns;
        let mut ship = self.config.ship.clone();
        ship.url = self.config.url.clone();
        // The shipper's own client: whole packs take longer than a poll's requests.
        let remote = target::open(&ship.url, &ship.s3)?;
        let replicator = crate::Replicator::start_shared(
            self.engine.clone(),
            ship,
            remote,
            self.stats.clone(),
            promotion,
        )?;
        // The old holder's lease must have lapsed on any clock rate within 5 % (decision 0031
        // §5) before this store acknowledges anything.
        let left_ns = open_at_ns.saturating_sub(ctxstore_engine::clock::boot_now_ns());
        if left_ns > 0 {
            tracing::info!(wait = ?Duration::from_nanos(left_ns), "promotion: waiting out the old primary's lease");
            std::thread::sleep(Duration::from_nanos(left_ns));
        }
        self.engine.promote();
        let took_ns = ctxstore_engine::clock::boot_now_ns().saturating_sub(started_ns);
        self.stats
            .last_failover_ms
            .store(took_ns / 1_000_000, Ordering::Relaxed);
        tracing::info!(location = %self.remote.location, "promoted: this store is the primary");
        Ok(replicator)
    }

    /// One poll: the primary's address, then every segment after the last applied, restore
    /// point by restore point, following the lineage into the next generation.
    async fn poll(&mut self) -> Result<(), ReplicaError> {
        tracing::trace!(
            generation = self.local.generation,
            seq = self.local.seq,
            "standby polls"
        );
        self.watch_epoch().await?;
        loop {
            let generation = self.local.generation;
            tracing::trace!(generation, after = self.local.seq, "standby lists segments");
            let listed = catalog::segments_after(&self.remote, generation, self.local.seq).await?;
            if listed.is_empty() {
                if self.next_generation().await? {
                    continue;
                }
                self.stats.lag_bytes.store(0, Ordering::Relaxed);
                self.stats.backlog_objects.store(0, Ordering::Relaxed);
                self.stats
                    .shipped_cut_unix_ms
                    .store(self.applied_cut_unix_ms, Ordering::Relaxed);
                return Ok(());
            }
            let mut seqs: Vec<u64> = listed
                .iter()
                .filter_map(|listed| match listed.key {
                    Key::Segment { seq, .. } => Some(seq),
                    _ => None,
                })
                .collect();
            seqs.sort_unstable();
            // After the listing, before the segments: the primary replaced the keyring before
            // it shipped anything sealed under a key the keyring did not hold.
            self.install_keyring().await?;
            let backlog: u64 = listed.iter().map(|listed| listed.size).sum();
            self.stats.lag_bytes.store(backlog, Ordering::Relaxed);
            self.stats
                .backlog_objects
                .store(seqs.len() as u64, Ordering::Relaxed);
            if !self.apply_listed(generation, &seqs).await? {
                return Ok(());
            }
        }
    }

    /// The primary's keyring (the replica's `keyring` object), installed when its version
    /// changed: the standby opens what the primary sealed (decision 0032 §5). One that does not
    /// open under this store's master key (another key, or none) fails the poll, naming why;
    /// the standby keeps its own keyring and stalls rather than apply what it cannot open.
    async fn install_keyring(&mut self) -> Result<(), ReplicaError> {
        let Some(found) = crate::keyring::fetch(&self.remote).await? else {
            return Ok(());
        };
        if self.keyring_version.as_deref() == Some(found.version.as_str()) {
            return Ok(());
        }
        if self.engine.install_keyring(&found.bytes)? {
            tracing::info!("standby installed its primary's keyring");
        }
        self.keyring_version = Some(found.version);
        Ok(())
    }

    /// Every segment of `generation` up to the newest listed (`seqs`), in order, each read
    /// directly: a listing may lag behind a PUT (SeaweedFS's filer does), so a segment it left
    /// out is fetched all the same, and one that is not there yet ends this poll (the next one
    /// looks again; the lag figures show a gap that lasts). Answers whether the standby moved
    /// on to the next generation (a seal ended this one).
    async fn apply_listed(&mut self, generation: u32, seqs: &[u64]) -> Result<bool, ReplicaError> {
        let mut pending = None;
        let mut mid_cut = false;
        let newest = seqs.last().copied().unwrap_or(self.local.seq);
        for seq in self.local.seq + 1..=newest {
            let applied = match self.apply_segment(generation, seq, &mut pending).await {
                Err(ReplicaError::MissingObject { key }) if seqs.binary_search(&seq).is_err() => {
                    tracing::debug!(%key, "a segment not listed yet is not there yet");
                    // A cut half applied (`continues`) is folded in again next time.
                    self.reload()?;
                    return Ok(false);
                }
                applied => applied?,
            };
            match applied {
                Applied::Point(created_unix_ms) => self.commit(seq, created_unix_ms)?,
                Applied::Continues => {}
                Applied::Seal => {
                    // The cut the old primary shipped in part before the seal is no point of
                    // the lineage: back to the last one, which the next generation forked
                    // from.
                    self.reload()?;
                    if self.local.generation < generation {
                        // No point of the sealed generation was applied (a taker killed after
                        // its fork left it empty): the standby stands on its start, the same
                        // state as its parent point, and the next generation is looked for
                        // after it, never the sealed one again.
                        self.local.generation = generation;
                        self.local.seq = 0;
                    }
                    let moved = self.next_generation().await?;
                    if !moved {
                        tracing::debug!(
                            generation,
                            "the sealed generation has no successor yet: its taker forks it"
                        );
                    }
                    return Ok(moved);
                }
            }
            mid_cut = applied == Applied::Continues;
        }
        if mid_cut {
            // The cut's last segment is not there yet: its first ones are folded in again
            // with it at the next poll (the state must not hold them twice).
            self.reload()?;
        }
        Ok(false)
    }

    /// Reads the newest epoch's record when a newer one exists: its primary is where writes go.
    async fn watch_epoch(&mut self) -> Result<(), ReplicaError> {
        if self.epoch == 0 {
            self.epoch = catalog::epochs(&self.remote)
                .await?
                .last()
                .copied()
                .unwrap_or(0);
            self.name_primary().await?;
        }
        tracing::trace!(epoch = self.epoch + 1, "standby looks for a newer epoch");
        while self.remote.exists(Key::Epoch(self.epoch + 1)).await? {
            self.epoch += 1;
            self.name_primary().await?;
        }
        self.stats.epoch.store(self.epoch, Ordering::Relaxed);
        Ok(())
    }

    async fn name_primary(&self) -> Result<(), ReplicaError> {
        let record = match self.epoch {
            0 => None,
            epoch => catalog::epoch_record(&self.remote, epoch).await?,
        };
        let primary = match &record {
            Some(record) if !record.advertise.is_empty() => {
                format!(
                    "the primary at {} (host {})",
                    record.advertise, record.holder
                )
            }
            Some(record) => format!(
                "the primary on host {} (it advertises no address)",
                record.holder
            ),
            None => "the primary (none has taken the replica yet)".into(),
        };
        self.stats.set_primary(&primary);
        self.engine.set_follow_reason(format!(
            "this store is a standby following {}; send writes to {primary}",
            self.remote.location
        ));
        Ok(())
    }

    /// The generation after the followed one, when it forked exactly where this standby
    /// stands; `true` when the standby moved on to it.
    async fn next_generation(&mut self) -> Result<bool, ReplicaError> {
        let next = self.local.generation + 1;
        tracing::trace!(generation = next, "standby looks for the next generation");
        // A HEAD first: SeaweedFS was seen to hold a GET of a missing key for the client's
        // whole timeout, where a HEAD answers 404 at once.
        if !self.remote.exists(Key::Generation(next)).await? {
            return Ok(false);
        }
        let bytes = self.remote.get_required(Key::Generation(next)).await?;
        let what = self.remote.path(Key::Generation(next)).to_string();
        let record = crate::format::GenerationRecord::decode(&bytes, &what)?;
        if record.parent != Some((self.local.generation, self.local.seq))
            && !self
                .stands_on_the_start_of_one_forked_at(record.parent)
                .await?
        {
            return Err(ReplicaError::Invalid(format!(
                "generation {next} forked from {:?}, but this standby applied generation {} up \
                 to segment {}: it cannot follow that lineage; restore a new standby",
                record.parent, self.local.generation, self.local.seq
            )));
        }
        tracing::info!(generation = next, "the standby follows the next generation");
        self.local.generation = next;
        self.local.seq = 0;
        self.stats
            .generation
            .store(u64::from(next), Ordering::Relaxed);
        Ok(true)
    }

    /// Whether the standby applied nothing of the followed generation (it stands on its
    /// start) and that generation forked at `parent`: the same state, so a generation forked
    /// there follows on. A taker killed after its fork leaves such an empty generation; the
    /// next taker seals it and forks from the point before it, which is `parent`.
    async fn stands_on_the_start_of_one_forked_at(
        &self,
        parent: Option<(u32, u64)>,
    ) -> Result<bool, ReplicaError> {
        if self.local.seq != 0 || parent.is_none() {
            return Ok(false);
        }
        let key = Key::Generation(self.local.generation);
        let what = self.remote.path(key).to_string();
        let followed = self.remote.get_required(key).await?;
        let followed = crate::format::GenerationRecord::decode(&followed, &what)?;
        Ok(followed.parent == parent)
    }

    /// Fetches one segment and applies its pack bytes; its log slots join `pending`, handed
    /// to the sequencer at the cut's last segment. A seal is not applied: the generation ends
    /// there.
    async fn apply_segment(
        &mut self,
        generation: u32,
        seq: u64,
        pending: &mut Option<Pending>,
    ) -> Result<Applied, ReplicaError> {
        let key = Key::Segment { generation, seq };
        let what = self.remote.path(key).to_string();
        let bytes = self.remote.get_required(key).await?;
        let (header, body_start) = decode_segment(&bytes, &what)?;
        catalog::check_segment_key(&header, generation, seq, what.clone())?;
        if header.seal {
            tracing::info!(
                generation,
                seq,
                epoch = header.epoch,
                "the followed generation ends at a seal: a standby was promoted"
            );
            return Ok(Applied::Seal);
        }
        let body = &bytes[body_start..body_start + header.body_bytes as usize];
        self.stats.add_shipped(1, bytes.len() as u64);

        self.apply_packs(&header, body, pending).await?;
        // Then the log slots naming those blobs (only those the engine does not hold yet: a
        // restart may have applied more than the record says).
        if let Some(log) = &header.log_piece {
            let start = log.body_offset as usize;
            let slots = &body[start..start + log.len as usize];
            let first_record_id = log.file_offset / LOG_SLOT_BYTES + 1;
            hold_slots(pending, slots, first_record_id, &what)?;
        }
        self.state.apply(
            &header,
            ObjectRef::Segment { generation, seq },
            body_start as u64,
            &what,
        )?;
        if header.continues {
            return Ok(Applied::Continues);
        }
        if let Some(pending) = pending.take() {
            self.hand_over(pending).await?;
        }
        Ok(Applied::Point(header.created_unix_ms))
    }

    /// A segment's pack bytes, per shard in pack order: whole packs (a sealed pack never
    /// shipped in pieces, or one a collection rewrote) before the pieces that may continue
    /// them.
    async fn apply_packs(
        &mut self,
        header: &SegmentHeader,
        body: &[u8],
        pending: &mut Option<Pending>,
    ) -> Result<(), ReplicaError> {
        // An empty one too (a collection found nothing live in it): the packs after it begin
        // only once it exists here (issue 46: skipped, the standby stalled on "only its
        // successor may begin") — but not an empty one followed by pieces of the same pack,
        // which says the open pack starts again at 0 (a restored file), its bytes following.
        let mut work: Vec<(u16, u32, u8, usize)> = Vec::new();
        for (index, replaced) in header.replaced.iter().enumerate() {
            let restarts = replaced.len == 0
                && header.pieces.iter().any(|piece| {
                    (piece.shard, piece.pack_id) == (replaced.shard, replaced.pack_id)
                });
            if !restarts {
                work.push((replaced.shard, replaced.pack_id, 0, index));
            }
        }
        for (index, piece) in header.pieces.iter().enumerate() {
            work.push((piece.shard, piece.pack_id, 1, index));
        }
        work.sort_unstable();
        for (shard, pack_id, kind, index) in work {
            let kept_own_version = if kind == 0 {
                self.apply_whole(shard, pack_id, header.replaced[index], pending)
                    .await?
            } else {
                let piece = header.pieces[index];
                let start = piece.body_offset as usize;
                let bytes = &body[start..start + piece.len as usize];
                self.apply_piece(shard, pack_id, piece.file_offset, bytes, pending)
                    .await?
            };
            if kept_own_version {
                self.kept_own.insert((shard, pack_id));
            }
        }
        Ok(())
    }

    /// A piece of pack `pack_id` at `offset`, after the tail the previous segment left of it
    /// (a record split between two segments of a cut); what the shard leaves of it now is
    /// the next tail. Answers whether the standby kept its own version (never, for a piece).
    async fn apply_piece(
        &mut self,
        shard: u16,
        pack_id: u32,
        offset: u64,
        bytes: &[u8],
        pending: &mut Option<Pending>,
    ) -> Result<bool, ReplicaError> {
        let tail = pending
            .as_mut()
            .and_then(|held| held.tails.remove(&(shard, pack_id)));
        let (start, joined) = match tail {
            Some((tail_offset, tail)) => {
                if tail_offset + tail.len() as u64 != offset {
                    return Err(ReplicaError::Damaged {
                        key: format!("shard {shard} pack {pack_id}"),
                        reason: format!(
                            "a piece at {offset} does not continue the record begun at \
                             {tail_offset} ({} bytes)",
                            tail.len()
                        ),
                    });
                }
                let mut joined = tail;
                joined.extend_from_slice(bytes);
                (tail_offset, joined)
            }
            None => (offset, bytes.to_vec()),
        };
        let len = joined.len();
        let ingested = self
            .engine
            .ingest_pack(shard, pack_id, start, joined.clone(), false)
            .await?;
        if ingested.bytes_left > 0 {
            let keep = len - ingested.bytes_left as usize;
            pending.get_or_insert_with(Pending::default).tails.insert(
                (shard, pack_id),
                (start + keep as u64, joined[keep..].to_vec()),
            );
        }
        Ok(ingested.kept_own_version)
    }

    /// A whole pack (its object checked against the BLAKE3 its segment recorded). A sealed
    /// pack this standby holds in another version is kept for now and joins `pending`'s
    /// rewritten packs. Answers whether the standby kept its own version.
    async fn apply_whole(
        &mut self,
        shard: u16,
        pack_id: u32,
        replaced: Replaced,
        pending: &mut Option<Pending>,
    ) -> Result<bool, ReplicaError> {
        let object = replaced.object.key();
        let whole = if replaced.len == 0 {
            bytes::Bytes::new()
        } else {
            self.remote.get_required(object).await?
        };
        if replaced.len > 0 && blake3::hash(&whole).as_bytes() != &replaced.hash {
            return Err(ReplicaError::Damaged {
                key: self.remote.path(object).to_string(),
                reason: "its BLAKE3 differs from the one its segment recorded".into(),
            });
        }
        self.stats.add_shipped(1, whole.len() as u64);
        let ingested = self
            .engine
            .ingest_pack(shard, pack_id, 0, whole.to_vec(), true)
            .await?;
        if ingested.kept_own_version {
            pending
                .get_or_insert_with(Pending::default)
                .rewritten
                .push((shard, pack_id, whole.to_vec()));
        }
        Ok(ingested.kept_own_version)
    }

    /// A cut's last segment applied: its held log slots go to the sequencer, then the
    /// primary's rewritten packs replace this standby's.
    async fn hand_over(&mut self, pending: Pending) -> Result<(), ReplicaError> {
        let Pending {
            slots,
            first_record_id,
            rewritten,
            tails,
        } = pending;
        if let Some(((shard, pack_id), (offset, tail))) = tails.into_iter().next() {
            // A cut ends where the primary's shards ended a batch: between records.
            return Err(ReplicaError::Damaged {
                key: format!("shard {shard} pack {pack_id}"),
                reason: format!(
                    "the cut ends inside the record at {offset} ({} bytes of it shipped)",
                    tail.len()
                ),
            });
        }
        if first_record_id != 0 {
            let mut held = self.engine.follow_position()?.log_records;
            let base_through = self.state.log_base.map_or(0, |base| base.through);
            if held + 1 < first_record_id && base_through + 1 >= first_record_id {
                // The primary's ids jumped past its base's end (a new generation's floor,
                // issue 46 item 8): this store's base stands for those slots too.
                self.engine
                    .raise_id_floors(ctxstore_engine::id_floors::IdFloors {
                        records: first_record_id,
                        contexts: 0,
                    })
                    .await?;
                held = first_record_id - 1;
            }
            let skip = held.saturating_sub(first_record_id - 1);
            let skip_bytes = (skip * LOG_SLOT_BYTES).min(slots.len() as u64) as usize;
            if skip_bytes < slots.len() {
                self.engine
                    .ingest_log(first_record_id + skip, slots[skip_bytes..].to_vec())
                    .await?;
            }
        }
        // Now that the turns naming what the new versions dropped are dead (or redacted)
        // here too: the primary's rewritten packs replace this standby's, and the bytes a
        // collection or a purge removed there leave this disk as well.
        for (shard, pack_id, whole) in rewritten {
            self.engine.install_pack(shard, pack_id, whole).await?;
            self.kept_own.remove(&(shard, pack_id));
        }
        Ok(())
    }

    /// Back to the last recorded point (see `Follower::start_with`).
    fn reload(&mut self) -> Result<(), ReplicaError> {
        let inherited = local::load_inherited(&self.data_dir)?.ok_or_else(|| {
            ReplicaError::Invalid(format!(
                "{} holds no inherited replica state",
                self.data_dir.display()
            ))
        })?;
        self.local.generation = inherited.generation;
        self.local.seq = inherited.seq;
        self.state = inherited.state;
        self.applied_cut_unix_ms = inherited.created_unix_ms;
        Ok(())
    }

    /// A restore point applied: recorded on disk (see the module doc), figures updated.
    fn commit(&mut self, seq: u64, created_unix_ms: u64) -> Result<(), ReplicaError> {
        self.local.seq = seq;
        self.local.fork = true;
        let store = StoreDir::new(&self.data_dir);
        let mut packs = Vec::with_capacity(self.state.shards.len());
        for (shard, files) in self.state.shards.iter().enumerate() {
            let mut identities = Vec::with_capacity(files.packs.len());
            for pack_id in 0..files.packs.len() {
                let key = (shard as u16, pack_id as u32);
                if self.kept_own.contains(&key) {
                    identities.push(None);
                    continue;
                }
                let path = store.pack_path(key.0, key.1);
                let identity = File::open(&path)
                    .and_then(|file| FileIdentity::of(&file))
                    .map_err(|source| ReplicaError::io(&path, source))?;
                identities.push(Some(identity));
            }
            packs.push(identities);
        }
        self.local.packs = packs;
        let mut state = self.state.clone();
        state.meta = std::fs::read(store.meta_path())
            .map_err(|source| ReplicaError::io(store.meta_path(), source))?;
        local::save_inherited(
            &self.data_dir,
            &Checkpoint {
                generation: self.local.generation,
                seq,
                epoch: 0,
                replica_id: self.local.replica_id,
                created_unix_ms,
                state,
            },
        )?;
        self.local.save(&self.data_dir)?;
        self.applied_cut_unix_ms = created_unix_ms;
        self.stats.seq.store(seq, Ordering::Relaxed);
        self.stats
            .records
            .store(self.state.log_records, Ordering::Relaxed);
        self.stats
            .shipped_cut_unix_ms
            .store(created_unix_ms, Ordering::Relaxed);
        Ok(())
    }
}
