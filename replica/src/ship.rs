//! The primary's replicator: one thread, `ctxstore-replica`, shipping the store to its replica
//! every `interval`, asynchronously (no acknowledgement ever waits for it).
//!
//! A cycle:
//! 1. **Fencing**: if epoch E + 1 exists, another primary took the prefix: stop shipping.
//! 2. **Cut** (`Engine::hold_cut`: no collection or backup runs meanwhile): `turns.log` up to
//!    the durable watermark, each shard's packs up to their extents. Bytes not shipped yet are
//!    read into the segment's body; a pack or `turns.base` whose file was replaced since it was
//!    shipped (a collection renamed a new version over it) is hard-linked into
//!    `DIR/replica/staging` to be uploaded whole, and so is a sealed pack never shipped. The
//!    cut is released before anything is uploaded.
//! 3. **Upload**: the staged whole files first, then the segment, all create-only: data goes up
//!    before the object that names it, so a segment never names a missing object, and within a
//!    segment the packs' bytes and the log slots naming them arrive in one PUT.
//! 4. **Commit**: the segment folded into `StoreState`, `DIR/replica/state` rewritten.
//! 5. **Checkpoint** on schedule (time or bytes shipped), then **retention**.
//!
//! A cut larger than `segment_bytes_max` ships as several segments, all but the last marked
//! `continues` (not restore points), without waiting for the next tick. A failed cycle is
//! retried at the next tick from the same shipped position: nothing is lost, since what was
//! not shipped is still in the store's files (the backlog costs no disk of its own; see
//! decision 0019). Memory: one segment's body, plus the largest file uploaded whole.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_engine::cut::{ShardCut, StoreCut};
use ctxstore_engine::store_dir::StoreDir;
use ctxstore_engine::{Engine, files};
use object_store::PutPayload;

use crate::acks::RemoteAcks;
use crate::catalog;
use crate::error::ReplicaError;
use crate::format::{
    BaseRef, Checkpoint, GenerationRecord, LOG_SLOT_BYTES, Marker, ObjectRef, Replaced, ReplicaId,
    SegmentHeader, SegmentPiece, ShardPoint, StoreState, encode_segment_parts,
};
use crate::layout::Key;
use crate::local::{self, FileIdentity, LocalState};
use crate::remote::{Created, Remote};
use crate::stats::{ReplicationRole, ReplicationState, ReplicationStats, now_unix_ms};
use crate::target::{self, S3Settings};

/// How the primary ships (the server's `--replicate-*` flags).
#[derive(Clone, Debug)]
pub struct ShipConfig {
    pub url: String,
    pub s3: S3Settings,
    /// At most one segment PUT per interval (plus one per file uploaded whole).
    pub interval: Duration,
    /// A checkpoint once this long has passed since the last …
    pub checkpoint_interval: Duration,
    /// … or once this many bytes were shipped since it (0: by time only).
    pub checkpoint_bytes: u64,
    /// Objects no restore point of this window needs are deleted (`None`: keep everything).
    pub retention: Option<Duration>,
    /// The most bytes one segment's body carries.
    pub segment_bytes_max: u64,
    /// Start serving even if the target cannot be reached at start; replication catches up.
    pub start_anyway: bool,
    /// Where clients reach this primary, written into its epoch object: a standby's READ_ONLY
    /// answers name it (empty: not said).
    pub advertise: String,
    /// Where the shipper's threads stand for the CPU: shipping is background work, and on a
    /// busy machine the network cores and the actors, whose latency clients wait for, go
    /// first.
    pub priority: ShipPriority,
    /// The waiters for remote acknowledgements (`acks.rs`): shared with the network cores, and
    /// with the replicator a promoted standby starts.
    pub remote_acks: Arc<RemoteAcks>,
    /// The prefix's lease time L (`--replica-lease`, decision 0031 §4–§6): the primary holds
    /// `PREFIX/lease`, renews it every L/3, and acknowledges only while its last renewal and
    /// its last cut shipped whole are younger than L − m. `None`: no lease (decision 0019's
    /// epochs only; acknowledgements never wait for the object store).
    pub lease: Option<Duration>,
}

/// How the shipper's threads yield the CPU to the server's (`--replica-nice`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShipPriority {
    /// This many nice steps below the server's own (0..=19; the result is capped at nice 19).
    /// A niced thread may still run out its time slice when a server thread wakes on its core.
    Nice(u8),
    /// Linux's SCHED_IDLE: the threads run only on a core no other thread wants, and a server
    /// thread that wakes takes the core from them at once, so shipping adds no wait to an
    /// acknowledgement; on a machine with no idle time at all they fall behind (the lag says
    /// so) instead of taking their share.
    Idle,
}

/// `ShipConfig::priority`'s default. Nice 10 gets about a tenth of the CPU time of a nice-0
/// thread it competes with, yet is never starved: at 32 agents saturating two cores the
/// shipper kept up at 10 (benches/results/HISTORY.md, "Replication overhead: where the cost is").
pub const SHIP_PRIORITY_DEFAULT: ShipPriority = ShipPriority::Nice(SHIP_NICE_STEPS_DEFAULT);
const SHIP_NICE_STEPS_DEFAULT: u8 = 10;
/// Checkpoints and the refresh wait for remote waiters at most this many intervals in a row.
const MAINTENANCE_DEFERRED_INTERVALS_MAX: u32 = 10;

/// Nice values end at 19 (Linux).
pub const NICE_MAX: u8 = 19;

/// The runtime the shipper's async work runs on: one thread (the shipper's), plus at most
/// `BLOCKING_THREADS_MAX` for the blocking calls of `object_store` (a file:// target's
/// reads and writes; S3 needs none), all at the shipper's priority.
const BLOCKING_THREADS_MAX: usize = 2;

impl ShipConfig {
    pub fn new(url: &str) -> ShipConfig {
        ShipConfig {
            url: url.to_string(),
            s3: S3Settings::default(),
            interval: Duration::from_secs(1),
            checkpoint_interval: Duration::from_secs(3600),
            checkpoint_bytes: 1 << 30,
            retention: None,
            segment_bytes_max: 64 << 20,
            start_anyway: false,
            advertise: String::new(),
            priority: SHIP_PRIORITY_DEFAULT,
            remote_acks: Arc::default(),
            lease: None,
        }
    }
}

/// What a promotion took before the replicator starts (`takeover.rs`): the epoch, and the
/// lease with the boot time its take was sent. Empty for a primary's start.
#[derive(Debug, Default)]
pub struct Promotion {
    pub epoch: Option<u64>,
    /// The keeper already renewing the lease the promotion took.
    pub keeper: Option<crate::lease::LeaseKeeper>,
    /// The boot time (ns) before which the promoted store must not acknowledge.
    pub open_at_ns: u64,
    /// When the takeover began (boot ns): the first sight of the lapsed lease's version, or
    /// the take of a manual promotion; its figure is measured from here.
    pub started_ns: u64,
}

/// The running replicator; `stop` ships what is durable once more, then ends the thread.
#[derive(Debug)]
pub struct Replicator {
    stats: Arc<ReplicationStats>,
    stopping: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replicator {
    /// Attaches to the replica (refusing a foreign prefix, taking the next epoch, choosing the
    /// generation) and starts the thread. With `start_anyway`, a failure to attach is logged
    /// and retried by the thread instead of returned.
    pub fn start(engine: Engine, config: ShipConfig) -> Result<Replicator, ReplicaError> {
        let remote = target::open(&config.url, &config.s3)?;
        Replicator::start_with(engine, config, remote)
    }

    /// `start` on a location opened by the caller (a test's fault-injecting store).
    pub fn start_with(
        engine: Engine,
        config: ShipConfig,
        remote: Remote,
    ) -> Result<Replicator, ReplicaError> {
        let stats = Arc::new(ReplicationStats::default());
        Replicator::start_shared(engine, config, remote, stats, Promotion::default())
    }

    /// `start_with`, reporting into `stats` (a promoted standby's: the same figures go on,
    /// from `following` to `shipping`); `epoch_taken`: the epoch a promotion took already
    /// (`takeover.rs`), which the replicator ships under instead of taking the next.
    pub fn start_shared(
        engine: Engine,
        config: ShipConfig,
        remote: Remote,
        stats: Arc<ReplicationStats>,
        promotion: Promotion,
    ) -> Result<Replicator, ReplicaError> {
        let priority = ThreadPriority::of(config.priority);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            // 15 bytes, all Linux keeps of a thread name: told apart from `ctxstore-replica`.
            .thread_name("ctxstore-rep-io")
            .max_blocking_threads(BLOCKING_THREADS_MAX)
            .on_thread_start(move || priority.set_for_this_thread())
            .build()
            .map_err(|source| ReplicaError::io("tokio runtime", source))?;
        stats.set_role(ReplicationRole::Primary);
        stats.set_target(&config.url);
        stats
            .segment_bytes_max
            .store(config.segment_bytes_max, Ordering::Relaxed);
        // The lag figures read the durable watermark live (issue 46 item 6); until the first
        // cut ships, they count from now (a promoted standby's go on from its last cut).
        let durable = engine.clone();
        stats.watch_durable_records(Box::new(move || durable.durable_records()));
        let _ = stats.shipped_cut_unix_ms.compare_exchange(
            0,
            now_unix_ms(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        // No log compaction drops a record the replica lacks as a slot: none until the first
        // cut shipped whole says how far it holds the log (`Engine::hold_log_after`).
        engine.hold_log_after(0);
        // Until it attaches, a store that shipped before hands out ids up to the bound past
        // what it holds now (issue 46 item 8; attach sets what the replica holds).
        if LocalState::load(&engine.config().data_dir)?.is_some() {
            let now = engine.id_floors();
            engine.set_shipped_ids(now.records - 1, now.contexts - 1);
        }
        if config.lease.is_some() && promotion.keeper.is_none() {
            // Nothing is acknowledged until the lease is held (an attach that fails at start
            // with --replicate-start-anyway retries every interval meanwhile).
            engine.set_lease_until(0);
        }
        let mut shipper = Shipper::new(engine, remote, config, stats.clone());
        shipper.epoch_taken = promotion.epoch;
        shipper.keeper = promotion.keeper;
        match runtime.block_on(shipper.attach()) {
            Ok(()) => {}
            Err(error) if shipper.config.start_anyway && error.is_transient() => {
                tracing::warn!(%error, "replication target unreachable at start; serving anyway, replication retries every interval");
                shipper.stats.set_state(ReplicationState::Failing);
                shipper.stats.set_reason(&error.to_string());
                shipper.stats.count_failure(error.kind());
            }
            Err(error) => return Err(error),
        }
        let stopping = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(tokio::sync::Notify::new());
        let thread = {
            let stopping = stopping.clone();
            let wake = wake.clone();
            std::thread::Builder::new()
                .name("ctxstore-replica".into())
                .spawn(move || {
                    priority.set_for_this_thread();
                    runtime.block_on(shipper.run(stopping, wake))
                })
                .map_err(|source| ReplicaError::io("ctxstore-replica thread", source))?
        };
        Ok(Replicator {
            stats,
            stopping,
            wake,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> &Arc<ReplicationStats> {
        &self.stats
    }

    /// Ships what is durable one last time (bounded by the object store's timeouts), then
    /// ends the thread. Call before the engine shuts down.
    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::Release);
        self.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Shipper {
    engine: Engine,
    remote: Remote,
    config: ShipConfig,
    stats: Arc<ReplicationStats>,
    data_dir: PathBuf,
    holder: String,
    /// Attached: the epoch taken and the generation chosen.
    attached: bool,
    /// The epoch a promotion took before it sealed the old generation: `attach` forks under it.
    epoch_taken: Option<u64>,
    /// Since when checkpoints wait for remote waiters (`maintenance_due`).
    maintenance_deferred_since: Option<Instant>,
    /// The thread renewing this primary's lease, once attached with one.
    keeper: Option<crate::lease::LeaseKeeper>,
    /// The boot time of the newest cut taken.
    cut_boot_ns: u64,
    local: LocalState,
    /// The replica's state after `local.seq`.
    state: StoreState,
    checkpoint_at: Instant,
    /// When the replica last stopped naming old segments for what the store still holds
    /// (`refresh_if_due`).
    refreshed_at: Instant,
    bytes_since_checkpoint: u64,
    /// The last segment's body buffer, back from its upload, for the next cycle to read into:
    /// a fresh buffer of up to `segment_bytes_max` each interval cost a page fault per 4 KiB
    /// on the shipper's thread, in a burst each interval (issue 31's overhead figure,
    /// benches/results/HISTORY.md). At most one segment's body, which the cycle holds anyway.
    spare_body: Vec<u8>,
    /// A cycle whose shipping failed (its cut's time, then the cycle): an object of it may
    /// have landed without an answer, so the next cycle ships it again byte for byte rather
    /// than a new cut under the same keys. In memory only: after a restart, `attach` finds a
    /// segment it has no record of and forks.
    retry: Option<(u64, Cycle)>,
    /// The BLAKE3 of the keyring last made the replica's (memory only: after a restart the
    /// first cycle compares with the object itself).
    keyring_shipped: Option<[u8; 32]>,
}

/// What the cut gave a cycle to upload.
struct Cycle {
    /// The cut's ticket (`RemoteAcks::start_cut`): confirmed when its last segment is created.
    ticket: u64,
    /// The boot time the cut was taken: everything acknowledged before it is in it.
    cut_boot_ns: u64,
    header: SegmentHeader,
    body: Vec<u8>,
    /// Whole files (staged hard links) to upload before the segment.
    uploads: Vec<Upload>,
    /// Identities of the files whose bytes the segment ships.
    identities: Vec<(Option<(u16, u32)>, FileIdentity)>,
    /// Bytes durable locally that this segment does not ship yet.
    left_bytes: u64,
    /// The store's keyring as of the cut (read while it was held), when the store seals: the
    /// replica's is made this before anything of the cut ships (`keyring.rs`).
    keyring: Option<Vec<u8>>,
}

struct Upload {
    staged: PathBuf,
    object: ObjectRef,
    what: UploadKind,
}

enum UploadKind {
    Pack { shard: u16, pack_id: u32 },
    Base { through: u64 },
}

/// `ShipPriority` resolved against the server's own nice value, on the thread that starts the
/// replicator, for the threads it starts.
#[derive(Clone, Copy, Debug)]
enum ThreadPriority {
    Nice(i32),
    /// SCHED_IDLE, keeping a nice value below the server's too (the policy ignores it; tools
    /// that show only nice values show the threads below the server).
    Idle(i32),
}

impl ThreadPriority {
    fn of(priority: ShipPriority) -> ThreadPriority {
        let below = |steps: u8| {
            let own = rustix::process::getpriority_process(None).unwrap_or(0);
            (own + i32::from(steps.min(NICE_MAX))).min(i32::from(NICE_MAX))
        };
        match priority {
            ShipPriority::Nice(steps) => ThreadPriority::Nice(below(steps)),
            ShipPriority::Idle => ThreadPriority::Idle(below(SHIP_NICE_STEPS_DEFAULT)),
        }
    }

    /// Linux keeps a nice value and a scheduling policy per thread: this sets the calling
    /// thread's only. A failure (a sandbox that forbids it) costs priority, never shipping,
    /// so it is logged and ignored.
    fn set_for_this_thread(self) {
        let nice = match self {
            ThreadPriority::Nice(nice) => nice,
            ThreadPriority::Idle(nice) => {
                use thread_priority::{
                    NormalThreadSchedulePolicy, ThreadSchedulePolicy,
                    set_thread_priority_and_policy, thread_native_id,
                };
                // SCHED_IDLE takes static priority 0, which `Min` maps to (the crate then
                // sets a nice value of its own: set ours after it).
                if let Err(error) = set_thread_priority_and_policy(
                    thread_native_id(),
                    thread_priority::ThreadPriority::Min,
                    ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
                ) {
                    tracing::debug!(
                        ?error,
                        "could not put a replication thread under SCHED_IDLE"
                    );
                }
                nice
            }
        };
        if let Err(error) =
            rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice)
        {
            tracing::debug!(%error, nice, "could not lower a replication thread's priority");
        }
    }
}

fn random_id() -> ReplicaId {
    // The time and the process make it unique enough to tell two stores apart; BLAKE3 spreads
    // it over 16 bytes.
    let seed = format!(
        "{}:{}:{:?}",
        now_unix_ms(),
        std::process::id(),
        std::time::Instant::now()
    );
    let mut id = [0u8; 16];
    id.copy_from_slice(&blake3::hash(seed.as_bytes()).as_bytes()[..16]);
    id
}

pub(crate) fn hex(id: &[u8]) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl Shipper {
    fn new(
        engine: Engine,
        remote: Remote,
        config: ShipConfig,
        stats: Arc<ReplicationStats>,
    ) -> Shipper {
        let data_dir = engine.config().data_dir.clone();
        Shipper {
            engine,
            remote,
            config,
            stats,
            data_dir,
            holder: crate::takeover::holder(),
            attached: false,
            epoch_taken: None,
            maintenance_deferred_since: None,
            keeper: None,
            cut_boot_ns: 0,
            local: LocalState::default(),
            state: StoreState::default(),
            checkpoint_at: Instant::now(),
            refreshed_at: Instant::now(),
            bytes_since_checkpoint: 0,
            spare_body: Vec::new(),
            retry: None,
            keyring_shipped: None,
        }
    }

    /// See `Replicator::start`.
    async fn attach(&mut self) -> Result<(), ReplicaError> {
        let marker = catalog::marker(&self.remote).await?;
        let local = LocalState::load(&self.data_dir)?;
        let replica_id = self
            .agree_replica_id(marker.as_ref(), local.as_ref())
            .await?;
        let generations = catalog::generations(&self.remote).await?;
        let latest = generations.last().map_or(0, |record| record.generation);
        self.hold_lease(replica_id).await?;
        let epoch = match self.epoch_taken {
            Some(epoch) => epoch,
            None => self.take_epoch(replica_id, latest).await?,
        };

        // Continue the generation this store shipped last, if the replica ends where it does.
        if let Some(local) = local.clone().filter(|local| {
            !local.fork
                && local.replica_id == replica_id
                && local.generation == latest
                && latest > 0
        }) {
            return self
                .continue_or_fork(replica_id, epoch, &generations, local)
                .await;
        }
        let (state, parent, identities) = match local::load_inherited(&self.data_dir)? {
            Some(inherited) if local.as_ref().is_some_and(|local| local.fork) => (
                inherited.state,
                Some((inherited.generation, inherited.seq)),
                local.clone(),
            ),
            _ => (StoreState::default(), None, None),
        };
        self.fork(replica_id, epoch, latest + 1, parent, state, identities)
            .await
    }

    /// The replica id this store ships under: the marker's when it is this store's own, this
    /// store's (or a new one) written into a new marker when the replica has none. A marker
    /// naming another store refuses the attach, so two stores never share one prefix.
    async fn agree_replica_id(
        &self,
        marker: Option<&Marker>,
        local: Option<&LocalState>,
    ) -> Result<ReplicaId, ReplicaError> {
        Ok(match (marker, local) {
            (Some(marker), Some(local)) if marker.replica_id != local.replica_id => {
                return Err(ReplicaError::OtherStore {
                    location: self.remote.location.clone(),
                    remote: hex(&marker.replica_id),
                    local: hex(&local.replica_id),
                });
            }
            (Some(marker), None) => {
                return Err(ReplicaError::OtherStore {
                    location: self.remote.location.clone(),
                    remote: hex(&marker.replica_id),
                    local: "none (this store never replicated)".into(),
                });
            }
            (Some(marker), Some(_)) => marker.replica_id,
            (None, local) => {
                let replica_id = local.map_or_else(random_id, |local| local.replica_id);
                let marker = Marker {
                    replica_id,
                    created_unix_ms: now_unix_ms(),
                };
                if let Created::Theirs(found) = self
                    .remote
                    .create(Key::Marker, Bytes::from(marker.encode()))
                    .await?
                {
                    let what = self.remote.path(Key::Marker).to_string();
                    let theirs = Marker::decode(&found, &what)?;
                    if theirs.replica_id != replica_id {
                        return Err(ReplicaError::OtherStore {
                            location: self.remote.location.clone(),
                            remote: hex(&theirs.replica_id),
                            local: hex(&replica_id),
                        });
                    }
                }
                replica_id
            }
        })
    }

    /// Continues generation `local.generation` where this store's record says it ended, or,
    /// when the replica holds segments past that record, forks a new generation from it.
    async fn continue_or_fork(
        &mut self,
        replica_id: ReplicaId,
        epoch: u64,
        generations: &[GenerationRecord],
        local: LocalState,
    ) -> Result<(), ReplicaError> {
        let latest = local.generation;
        let newer = catalog::segments_after(&self.remote, latest, local.seq).await?;
        let (state, _) = catalog::state_at(&self.remote, latest, local.seq).await?;
        if newer.is_empty() {
            self.local = LocalState { epoch, ..local };
            self.state = state;
            self.local.save(&self.data_dir)?;
            let shipped = crate::ids::shipped_ids(
                &self.remote,
                generations,
                latest,
                self.local.seq,
                self.state.log_records,
            )
            .await?;
            let shipped_contexts = shipped
                .contexts
                .unwrap_or_else(|| self.engine.id_floors().contexts - 1);
            self.engine
                .set_shipped_ids(shipped.records, shipped_contexts);
            tracing::info!(
                location = %self.remote.location,
                generation = latest,
                epoch,
                seq = self.local.seq,
                "replication continues"
            );
            self.finish_attach();
            return Ok(());
        }
        // The replica holds segments this store has no record of (a last PUT whose
        // answer was lost before the crash): fork from what the record says.
        let parent = Some((latest, local.seq));
        let identities = local;
        self.fork(
            replica_id,
            epoch,
            latest + 1,
            parent,
            state,
            Some(identities),
        )
        .await
    }

    /// With `--replica-lease`: the prefix's lease, before the epoch (decision 0031 §7): the one
    /// a promotion took, or one acquired now (`lease::acquire_watching`: another live holder
    /// refuses the start); then the keeper renews it and opens the ack gate, and a lost lease
    /// fences this store.
    async fn hold_lease(&mut self, replica_id: ReplicaId) -> Result<(), ReplicaError> {
        let Some(lease) = self.config.lease else {
            return Ok(());
        };
        if self.keeper.is_some() {
            return Ok(());
        }
        let timing = crate::lease::LeaseTiming { lease };
        let now_ns = ctxstore_engine::clock::boot_now_ns;
        // Until the lease is held (and again if it is lost), nothing is acknowledged.
        self.engine.set_lease_until(0);
        let me = lease_record(
            replica_id,
            self.local.generation,
            &self.config.advertise,
            &self.data_dir,
            timing,
        );
        let (holder, taken_ns) = crate::lease::acquire_watching(&self.remote, me, now_ns).await?;
        // A cut must ship within L − m of the start as of every later cut (§6).
        self.engine
            .set_shipped_until(taken_ns.saturating_add(duration_ns(timing.open_for())));
        let hooks = keeper_hooks(
            &self.engine,
            &self.config.remote_acks,
            &self.stats,
            &self.remote.location,
        );
        self.stats.lease_ms.store(
            u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.stats.set_lease_holder(&holder.held().record.holder);
        self.stats
            .failovers
            .store(holder.held().record.failovers, Ordering::Relaxed);
        self.keeper = Some(crate::lease::LeaseKeeper::start(
            holder, timing, taken_ns, hooks,
        )?);
        tracing::info!(location = %self.remote.location, lease = ?lease, "holding the replica's lease");
        Ok(())
    }

    /// With a lease: what was acknowledged before the cut taken at `cut_boot_ns` shipped whole,
    /// so acknowledgements stay open until then plus L − m (decision 0031 §6, §9: what `local`
    /// can lose at a failover is bounded by the lease window).
    fn shipped_until(&self, cut_boot_ns: u64) {
        if let Some(lease) = self.config.lease {
            let timing = crate::lease::LeaseTiming { lease };
            self.engine
                .set_shipped_until(cut_boot_ns.saturating_add(duration_ns(timing.open_for())));
        }
    }

    /// Takes the next epoch (`takeover::take_epoch`), as this primary.
    async fn take_epoch(
        &self,
        replica_id: ReplicaId,
        generation: u32,
    ) -> Result<u64, ReplicaError> {
        let taker = crate::takeover::Taker {
            replica_id,
            holder: self.holder.clone(),
            advertise: self.config.advertise.clone(),
        };
        crate::takeover::take_epoch(&self.remote, &taker, generation).await
    }

    /// Starts generation `generation` at `state` (its checkpoint 0).
    async fn fork(
        &mut self,
        replica_id: ReplicaId,
        epoch: u64,
        generation: u32,
        parent: Option<(u32, u64)>,
        state: StoreState,
        identities: Option<LocalState>,
    ) -> Result<(), ReplicaError> {
        // Where this generation's ids start (a restore or a promotion raised them past the
        // replica's points, issue 46 item 8): a later generation starts past them even if this
        // one ships nothing.
        let floors = self.engine.id_floors();
        let record = GenerationRecord {
            generation,
            replica_id,
            parent,
            created_unix_ms: now_unix_ms(),
            holder: self.holder.clone(),
            floors,
        };
        let key = Key::Generation(generation);
        if let Created::Theirs(_) = self
            .remote
            .create(key, Bytes::from(record.encode()))
            .await?
        {
            return Err(ReplicaError::Fenced {
                location: self.remote.location.clone(),
                epoch,
                holder: format!("the creator of generation {generation}"),
            });
        }
        let checkpoint = Checkpoint {
            generation,
            seq: 0,
            epoch,
            replica_id,
            created_unix_ms: now_unix_ms(),
            state: state.clone(),
        };
        let key = Key::Checkpoint { generation, seq: 0 };
        self.remote
            .create(key, Bytes::from(checkpoint.encode()))
            .await?;
        let (base, packs) = match identities {
            Some(previous) if !state.shards.is_empty() || state.log_base.is_some() => {
                (previous.base, previous.packs)
            }
            _ => (None, Vec::new()),
        };
        self.local = LocalState {
            replica_id,
            url: self.config.url.clone(),
            generation,
            epoch,
            seq: 0,
            fork: false,
            base,
            packs,
        };
        self.state = state;
        self.local.save(&self.data_dir)?;
        local::remove_inherited(&self.data_dir)?;
        // What the replica holds of this generation's ids: where they start.
        self.engine
            .set_shipped_ids(floors.records - 1, floors.contexts - 1);
        tracing::info!(
            location = %self.remote.location,
            generation,
            epoch,
            parent = ?parent,
            "replication starts a new generation"
        );
        self.finish_attach();
        Ok(())
    }

    fn finish_attach(&mut self) {
        self.attached = true;
        self.checkpoint_at = Instant::now();
        self.stats.set_state(ReplicationState::Shipping);
        let stats = &self.stats;
        stats
            .generation
            .store(u64::from(self.local.generation), Ordering::Relaxed);
        stats.epoch.store(self.local.epoch, Ordering::Relaxed);
        stats.seq.store(self.local.seq, Ordering::Relaxed);
        stats
            .records
            .store(self.state.log_records, Ordering::Relaxed);
        stats.set_reason("");
    }

    async fn run(mut self, stopping: Arc<AtomicBool>, wake: Arc<tokio::sync::Notify>) {
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let acks = self.config.remote_acks.clone();
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = wake.notified() => {}
                _ = acks.asked() => {}
            }
            let last = stopping.load(Ordering::Acquire);
            if last && self.keeper.is_some() {
                // A planned stop (decision 0031 §7): nothing more is acknowledged, the last
                // cut ships what was, then the lease is released for a taker to take at once.
                self.engine.close_gate(
                    "this server is stopping: it acknowledges nothing more, ships its last cut \
                     and releases its lease"
                        .into(),
                );
            }
            // While remote waiters wait for a cut not shipped yet, the next is cut at once
            // (one PUT in flight, the next forming behind it); a failing store waits for the
            // tick.
            while self.stats.state() != ReplicationState::Fenced {
                self.cycles().await;
                if !acks.wanted()
                    || self.stats.state() != ReplicationState::Shipping
                    || stopping.load(Ordering::Acquire)
                {
                    break;
                }
            }
            if last {
                if self.stats.state() != ReplicationState::Fenced {
                    self.stats.set_state(ReplicationState::Stopped);
                    self.release_lease().await;
                }
                return;
            }
            if self.keeper.is_some()
                && let Some(reason) = self.engine.store_failed()
            {
                self.step_down(&reason).await;
            }
        }
    }

    /// A primary whose store failed (a failed fdatasync: read-only until a restart) can never
    /// acknowledge again, yet its lease thread would go on renewing, and no standby could ever
    /// take over. It steps down as a planned stop does: nothing more is acknowledged, the last
    /// cut ships what the store holds, and the lease is released when every byte shipped (a
    /// standby with `--auto-promote` takes over at once), else left to lapse (after L + m).
    /// Its shipper goes on until the taker fences it; reads go on.
    async fn step_down(&mut self, reason: &str) {
        let why = format!(
            "this primary stepped down: its store failed ({reason}); it acknowledges nothing \
             more and gives up the lease of {} for a standby to take; restart it once the \
             disk is fixed, as a standby (--follow) if another primary took over",
            self.remote.location
        );
        tracing::error!(%why, "stepping down");
        // Fenced rather than the gate closed: a write is refused NOT_PRIMARY, not READ_ONLY,
        // so that a client of several addresses goes to find the taker.
        self.engine.fence(why.clone());
        self.cycles().await;
        self.stats.set_reason(&why);
        self.release_lease().await;
    }

    /// The lease given up at a planned stop, once the last cut shipped whole (a taker need not
    /// wait it out); kept when the last cut did not ship (a taker waits L + m, and the
    /// replica misses nothing it acknowledged remote).
    async fn release_lease(&mut self) {
        let Some(keeper) = self.keeper.take() else {
            return;
        };
        let Some(holder) = keeper.stop() else {
            return;
        };
        if self.stats.snapshot(now_unix_ms()).lag_bytes > 0 {
            tracing::warn!("the last cut did not ship: the lease is left to lapse");
            return;
        }
        match holder.release().await {
            Ok(crate::lease::Renewal::Renewed) => {
                tracing::info!(location = %self.remote.location, "released the replica's lease");
            }
            Ok(other) => tracing::warn!(?other, "the lease was not released"),
            Err(error) => tracing::warn!(%error, "releasing the lease failed; it lapses"),
        }
    }

    /// One tick: attach if not yet, then ship until the cut is shipped whole.
    async fn cycles(&mut self) {
        if !self.attached
            && let Err(error) = self.attach().await
        {
            self.failed(&error);
            return;
        }
        loop {
            match self.cycle().await {
                Ok(true) => continue,
                Ok(false) => return,
                Err(error) => {
                    self.failed(&error);
                    return;
                }
            }
        }
    }

    fn failed(&mut self, error: &ReplicaError) {
        self.stats.count_failure(error.kind());
        self.stats.set_reason(&error.to_string());
        if let ReplicaError::Fenced {
            location,
            epoch,
            holder,
        } = error
        {
            // Nothing acknowledged from now on would reach a restore point: refuse writes at
            // once (issue 46), naming who holds the prefix now.
            self.engine.fence(format!(
                "this server is fenced: {holder} took the replica {location} with epoch \
                 {epoch}; it refuses writes; write to {holder} instead"
            ));
            self.stats.set_primary(holder);
            self.config.remote_acks.fence();
            // A fenced primary renews nothing more: its lease lapses for a taker (never
            // released: it may still hold acknowledged writes the replica lacks).
            drop(self.keeper.take());
            tracing::error!(%error, "replication fenced: this primary ships nothing more");
            self.stats.set_state(ReplicationState::Fenced);
        } else {
            tracing::warn!(%error, "replication cycle failed; the next one retries");
            self.stats.set_state(ReplicationState::Failing);
        }
    }

    /// One segment. Answers whether the cut needs another right away (`continues`).
    async fn cycle(&mut self) -> Result<bool, ReplicaError> {
        self.check_not_fenced().await?;
        let seq = self.local.seq + 1;
        let (cut_at, ticket, cycle) = self.next_cycle(seq)?;
        let Some(mut cycle) = cycle else {
            self.all_shipped(cut_at);
            self.config.remote_acks.cut_shipped(ticket);
            self.shipped_until(self.cut_boot_ns);
            return Ok(false);
        };
        cycle.cut_boot_ns = self.cut_boot_ns.min(cycle.cut_boot_ns);
        // The backlog as of this cut: until it ships, the figures say what is waiting.
        let segment_bytes_max = self.config.segment_bytes_max.max(LOG_SLOT_BYTES);
        let staged_bytes: u64 = cycle
            .uploads
            .iter()
            .filter_map(|upload| std::fs::metadata(&upload.staged).ok())
            .map(|metadata| metadata.len())
            .sum();
        self.stats.lag_bytes.store(
            staged_bytes + cycle.body.len() as u64 + cycle.left_bytes,
            Ordering::Relaxed,
        );
        self.stats.backlog_objects.store(
            cycle.uploads.len() as u64 + 1 + cycle.left_bytes.div_ceil(segment_bytes_max),
            Ordering::Relaxed,
        );
        let (objects, bytes_shipped, header_len) = match self.ship_cycle(seq, &mut cycle).await {
            Ok(shipped) => shipped,
            Err(error) => {
                // Its objects may have landed without an answer (a reset after the write, then
                // the endpoint gone before the read-back): the next cycle ships these same
                // bytes again, never another segment under the same key (it would read as
                // another writer's, and this primary would fence itself).
                if !matches!(error, ReplicaError::Fenced { .. }) {
                    self.retry = Some((cut_at, cycle));
                }
                return Err(error);
            }
        };
        if !cycle.header.continues {
            // Stored: its waiters are answered now, before this store's own record of it is
            // written and synced (that record is for a restart; the acknowledgement needs only
            // the object).
            self.config.remote_acks.cut_shipped(cycle.ticket);
            self.shipped_until(cycle.cut_boot_ns);
        }
        self.remember_shipped(seq, &cycle, header_len)?;
        self.count_shipped(seq, &cycle, objects, bytes_shipped, segment_bytes_max);
        self.bytes_since_checkpoint += bytes_shipped;
        if !cycle.header.continues && self.maintenance_due() {
            self.checkpoint_if_due(seq, cycle.header.created_unix_ms)
                .await?;
            self.refresh_if_due()?;
        }
        Ok(cycle.header.continues)
    }

    /// Fails with `Fenced` when another primary took the next epoch: this one ships nothing
    /// more.
    async fn check_not_fenced(&self) -> Result<(), ReplicaError> {
        let next_epoch = Key::Epoch(self.local.epoch + 1);
        if self.remote.exists(next_epoch).await? {
            let holder = catalog::epoch_record(&self.remote, self.local.epoch + 1)
                .await?
                .map_or_else(
                    || "unknown".into(),
                    |record| crate::takeover::primary_named(&record),
                );
            return Err(ReplicaError::Fenced {
                location: self.remote.location.clone(),
                epoch: self.local.epoch + 1,
                holder,
            });
        }
        Ok(())
    }

    /// The cut's time and segment `seq`'s cycle: the one whose answer was lost, shipped again
    /// as it was, or one read from a new cut (`None`: nothing new since the last).
    fn next_cycle(&mut self, seq: u64) -> Result<(u64, u64, Option<Cycle>), ReplicaError> {
        // The cut's own time, read by the engine once the cut's wait is over (`StoreCut`):
        // everything acknowledged before it is in the cut, nothing much later.
        let retry = self
            .retry
            .take()
            .filter(|(_, cycle)| cycle.header.seq == seq && cycle.header.epoch == self.local.epoch);
        if let Some((cut_at, cycle)) = retry {
            tracing::debug!(
                seq,
                "the segment whose answer was lost is shipped again as it was"
            );
            return Ok((cut_at, cycle.ticket, Some(cycle)));
        }
        // The ticket before the cut: a waiter that took the one before it wrote before this
        // cut reads the durable watermark (`acks.rs`). The boot time too: what was
        // acknowledged before it is in the cut (the gate's `shipped_until`).
        let ticket = self.config.remote_acks.start_cut();
        self.cut_boot_ns = ctxstore_engine::clock::boot_now_ns();
        let held = self.engine.hold_cut()?;
        let cut_at = held.cut.taken_unix_ms;
        // Contexts read after the cut: as many as it holds, or more (issue 46 item 8).
        let contexts = self.engine.id_floors().contexts - 1;
        let body = std::mem::take(&mut self.spare_body);
        let cycle = self.read_cut(&held.cut, seq, cut_at, body)?;
        Ok((
            cut_at,
            ticket,
            cycle.map(|mut cycle| {
                cycle.header.contexts = contexts;
                cycle.ticket = ticket;
                cycle
            }),
        ))
    }

    /// Nothing new: everything acknowledged before the cut taken at `cut_at` is shipped.
    fn all_shipped(&self, cut_at: u64) {
        self.engine.hold_log_after(self.state.log_records);
        self.stats.lag_bytes.store(0, Ordering::Relaxed);
        self.stats.backlog_objects.store(0, Ordering::Relaxed);
        self.stats.set_reason("");
        self.stats
            .shipped_cut_unix_ms
            .store(cut_at, Ordering::Relaxed);
        self.stats
            .last_success_unix_ms
            .store(now_unix_ms(), Ordering::Relaxed);
        self.stats.set_state(ReplicationState::Shipping);
    }

    /// Segment `seq` is committed remotely: folds it into the state and records it, with the
    /// identities of the files it shipped, in this store's own record; then drops the staged
    /// links its uploads read.
    fn remember_shipped(
        &mut self,
        seq: u64,
        cycle: &Cycle,
        header_len: u64,
    ) -> Result<(), ReplicaError> {
        let key = Key::Segment {
            generation: self.local.generation,
            seq,
        };

        // Committed remotely: fold it in and remember it.
        let what = self.remote.path(key).to_string();
        self.state.apply(
            &cycle.header,
            ObjectRef::Segment {
                generation: self.local.generation,
                seq,
            },
            header_len,
            &what,
        )?;
        self.local.seq = seq;
        for (pack, identity) in &cycle.identities {
            match pack {
                None => self.local.base = Some(*identity),
                Some((shard, pack_id)) => {
                    let shard = usize::from(*shard);
                    if self.local.packs.len() <= shard {
                        self.local.packs.resize(shard + 1, Vec::new());
                    }
                    let packs = &mut self.local.packs[shard];
                    if packs.len() <= *pack_id as usize {
                        packs.resize(*pack_id as usize + 1, None);
                    }
                    packs[*pack_id as usize] = Some(*identity);
                }
            }
        }
        self.local.save(&self.data_dir)?;
        for upload in &cycle.uploads {
            let _ = files::remove(&upload.staged);
        }
        Ok(())
    }

    /// The figures once segment `seq` is shipped; a segment that ends its cut is a restore
    /// point, from which the bound on unshipped ids and the log the engine keeps count.
    fn count_shipped(
        &self,
        seq: u64,
        cycle: &Cycle,
        objects: u64,
        bytes_shipped: u64,
        segment_bytes_max: u64,
    ) {
        let stats = &self.stats;
        stats.add_shipped(objects, bytes_shipped);
        stats.seq.store(seq, Ordering::Relaxed);
        stats
            .records
            .store(self.state.log_records, Ordering::Relaxed);
        stats.lag_bytes.store(cycle.left_bytes, Ordering::Relaxed);
        stats.backlog_objects.store(
            cycle.left_bytes.div_ceil(segment_bytes_max),
            Ordering::Relaxed,
        );
        stats.set_reason("");
        if !cycle.header.continues {
            // A restore point stored: the bound on unshipped ids counts from it.
            self.engine
                .set_shipped_ids(self.state.log_records, cycle.header.contexts);
            stats
                .shipped_cut_unix_ms
                .store(cycle.header.created_unix_ms, Ordering::Relaxed);
            // The cut shipped whole: the replica holds the log up to its end as slots.
            self.engine.hold_log_after(self.state.log_records);
        }
        stats
            .last_success_unix_ms
            .store(now_unix_ms(), Ordering::Relaxed);
        stats.set_state(ReplicationState::Shipping);
    }

    /// The cycle's whole uploads, then its segment (create-only PUTs): answers the objects,
    /// the bytes and the segment header's length. On failure the body stays in `cycle`, to be
    /// shipped again as it was; on success its buffer becomes the next cycle's.
    async fn ship_cycle(
        &mut self,
        seq: u64,
        cycle: &mut Cycle,
    ) -> Result<(u64, u64, u64), ReplicaError> {
        // Set by the uploads (again when the cycle is shipped again).
        cycle.header.replaced.clear();
        cycle.header.log_base = None;
        let mut objects = 0u64;
        let mut bytes_shipped = 0u64;
        if let Some(keyring) = &cycle.keyring {
            let hash = *blake3::hash(keyring).as_bytes();
            if self.keyring_shipped != Some(hash) {
                crate::keyring::ship(&self.remote, keyring).await?;
                self.keyring_shipped = Some(hash);
                objects += 1;
                bytes_shipped += keyring.len() as u64;
            }
        }
        for upload in &cycle.uploads {
            let bytes = std::fs::read(&upload.staged)
                .map_err(|source| ReplicaError::io(&upload.staged, source))?;
            let hash = *blake3::hash(&bytes).as_bytes();
            let len = bytes.len() as u64;
            self.create_or_fenced(upload.object.key(), Bytes::from(bytes))
                .await?;
            objects += 1;
            bytes_shipped += len;
            match upload.what {
                UploadKind::Pack { shard, pack_id } => cycle.header.replaced.push(Replaced {
                    shard,
                    pack_id,
                    len,
                    object: upload.object,
                    hash,
                }),
                UploadKind::Base { through } => {
                    cycle.header.log_base = Some(BaseRef {
                        object: upload.object,
                        through,
                        file_bytes: len,
                        hash,
                    })
                }
            }
        }
        // The body goes out as read, never copied into the object.
        let body = Bytes::from(std::mem::take(&mut cycle.body));
        let body_back = body.clone();
        let parts = encode_segment_parts(&cycle.header, body);
        let header_len = parts[0].len() as u64;
        let segment = PutPayload::from_iter(parts);
        let segment_len = segment.content_length() as u64;
        let key = Key::Segment {
            generation: self.local.generation,
            seq,
        };
        let created = self.create_or_fenced(key, segment).await;
        // The upload let go of its parts: the buffer is ours again (else a copy, or a fresh
        // one next): the next cycle's, or this one's again after a failure.
        match (body_back.try_into_mut(), created.is_ok()) {
            (Ok(body), true) => self.spare_body = Vec::from(body),
            (Ok(body), false) => cycle.body = Vec::from(body),
            (Err(body), false) => cycle.body = body.to_vec(),
            (Err(_), true) => {}
        }
        created?;
        objects += 1;
        bytes_shipped += segment_len;

        Ok((objects, bytes_shipped, header_len))
    }

    async fn create_or_fenced(
        &self,
        key: Key,
        payload: impl Into<PutPayload>,
    ) -> Result<(), ReplicaError> {
        match self.remote.create_parts(key, payload.into()).await? {
            Created::Ours => Ok(()),
            // Only a primary of this generation writes its keys: another one did.
            Created::Theirs(found) => {
                Err(crate::takeover::fenced_by(&self.remote, self.local.epoch, key, &found).await)
            }
        }
    }

    /// Whether a checkpoint and the refresh may run after this cut: not while remote waiters
    /// wait for the next one (their acknowledgement would wait for the checkpoint's upload),
    /// for at most ten intervals in a row.
    fn maintenance_due(&mut self) -> bool {
        if !self.config.remote_acks.wanted() {
            self.maintenance_deferred_since = None;
            return true;
        }
        let since = *self
            .maintenance_deferred_since
            .get_or_insert_with(Instant::now);
        if since.elapsed() >= self.config.interval * MAINTENANCE_DEFERRED_INTERVALS_MAX {
            self.maintenance_deferred_since = None;
            return true;
        }
        false
    }

    /// Every half retention window, what the store still holds stops being named by old
    /// segments: each sealed pack still shipped in pieces is forgotten (the next cut uploads
    /// it whole, in its own object), the open pack too (shipped again from 0), and the log's
    /// prefix shipped as slots moves into a new
    /// `turns.base` (uploaded whole at the next cut). From the next checkpoint on, no restore
    /// point needs the old segments, and retention deletes them once the points that do leave
    /// the window, with the bytes a purge or a collection removed since (issue 46 item 9:
    /// segments a later checkpoint still named were kept forever, purged bytes inside them).
    /// Costs one upload of those packs and of the log's prefix per half window.
    fn refresh_if_due(&mut self) -> Result<(), ReplicaError> {
        let Some(window) = self.config.retention else {
            return Ok(());
        };
        if self.refreshed_at.elapsed() < window / 2 {
            return Ok(());
        }
        self.refreshed_at = Instant::now();
        let mut packs = 0usize;
        for (shard, files) in self.state.shards.iter().enumerate() {
            // The open pack too: its bytes start again at 0 in the next segment (after an
            // empty replacement), so the old segments its first pieces lay in go as well.
            let open = files.point.pack_id as usize;
            for (pack_id, pack) in files.packs.iter().enumerate().take(open + 1) {
                let in_segments = pack
                    .pieces
                    .iter()
                    .any(|piece| matches!(piece.object, ObjectRef::Segment { .. }));
                if let Some(known) = self
                    .local
                    .packs
                    .get_mut(shard)
                    .and_then(|packs| packs.get_mut(pack_id))
                    && in_segments
                {
                    *known = None;
                    packs += 1;
                }
            }
        }
        let log_in_segments = self
            .state
            .log_pieces
            .iter()
            .any(|piece| matches!(piece.object, ObjectRef::Segment { .. }));
        let rebased = log_in_segments && self.engine.rebase_log(self.state.log_records)?;
        if packs > 0 || rebased {
            tracing::info!(
                packs,
                log_rebased = rebased,
                "replica refresh: these go whole into new objects at the next cut, so that \
                 retention can delete the old segments"
            );
        }
        Ok(())
    }

    async fn checkpoint_if_due(
        &mut self,
        seq: u64,
        created_unix_ms: u64,
    ) -> Result<(), ReplicaError> {
        let by_time = self.checkpoint_at.elapsed() >= self.config.checkpoint_interval;
        let by_bytes = self.config.checkpoint_bytes > 0
            && self.bytes_since_checkpoint >= self.config.checkpoint_bytes;
        if !(by_time || by_bytes) {
            return Ok(());
        }
        let checkpoint = Checkpoint {
            generation: self.local.generation,
            seq,
            epoch: self.local.epoch,
            replica_id: self.local.replica_id,
            created_unix_ms,
            state: self.state.clone(),
        };
        let bytes = Bytes::from(checkpoint.encode());
        let len = bytes.len() as u64;
        let key = Key::Checkpoint {
            generation: self.local.generation,
            seq,
        };
        self.create_or_fenced(key, bytes).await?;
        self.stats.add_shipped(1, len);
        self.checkpoint_at = Instant::now();
        self.bytes_since_checkpoint = 0;
        tracing::debug!(
            generation = self.local.generation,
            seq,
            "replica checkpoint written"
        );
        if let Some(window) = self.config.retention {
            let location = self.remote.location.clone();
            match crate::retention::run(&self.remote, window, now_unix_ms()).await {
                Ok(report) if report.deleted > 0 => {
                    tracing::info!(%location, deleted = report.deleted, bytes = report.bytes, "replica retention deleted objects no kept restore point needs");
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "replica retention failed; the next checkpoint retries")
                }
            }
        }
        Ok(())
    }

    /// Reads the cut into a cycle (see the module doc), its segment's body into `body`
    /// (emptied first; a buffer to reuse); `None` when nothing is new.
    fn read_cut(
        &self,
        cut: &StoreCut,
        seq: u64,
        cut_at: u64,
        mut body: Vec<u8>,
    ) -> Result<Option<Cycle>, ReplicaError> {
        let store = cut.store_dir();
        let generation = self.local.generation;
        body.clear();
        let mut read = CutRead {
            generation,
            seq,
            budget: self.config.segment_bytes_max.max(LOG_SLOT_BYTES),
            staging: local::staging_dir(&self.data_dir),
            body,
            uploads: Vec::new(),
            identities: Vec::new(),
            pieces: Vec::new(),
            left_bytes: 0,
            continues: false,
        };
        let base_through = self.read_base(cut, &mut read)?;
        let (log_to, log_piece) = self.read_log(cut, &store, base_through, &mut read)?;

        let points = self.read_packs(cut, &store, &mut read)?;
        let CutRead {
            body,
            uploads,
            identities,
            pieces,
            left_bytes,
            continues,
            ..
        } = read;
        if log_piece.is_none() && pieces.is_empty() && uploads.is_empty() {
            return Ok(None);
        }
        let meta_path = store.meta_path();
        let meta =
            std::fs::read(&meta_path).map_err(|source| ReplicaError::io(&meta_path, source))?;
        let header = SegmentHeader {
            generation,
            seq,
            epoch: self.local.epoch,
            replica_id: self.local.replica_id,
            created_unix_ms: cut_at,
            continues,
            seal: false,
            meta,
            log_records: log_to,
            log_piece,
            log_base: None,
            shards: points,
            pieces,
            replaced: Vec::new(),
            body_bytes: body.len() as u64,
            // Set by the cycle, read after the cut (`Shipper::cycle`).
            contexts: 0,
        };
        // After the cut is held: every key its sealed bytes need is in the keyring read now.
        let keyring = crate::keyring::read_local(&store.root)?;
        Ok(Some(Cycle {
            ticket: 0,
            cut_boot_ns: u64::MAX,
            header,
            body,
            uploads,
            identities,
            left_bytes,
            keyring,
        }))
    }

    /// A new turns.base, staged for a whole upload. Answers the last record the log's piece
    /// need not carry: the new base's end, or the shipped one's.
    fn read_base(&self, cut: &StoreCut, read: &mut CutRead) -> Result<u64, ReplicaError> {
        let mut base_through = self.state.log_base.map_or(0, |base| base.through);
        if let Some(base) = &cut.log_base {
            let file = open(&base.path)?;
            let identity =
                FileIdentity::of(&file).map_err(|source| ReplicaError::io(&base.path, source))?;
            if self.local.base != Some(identity) {
                let seq = read.seq;
                let staged = read.staging.join(format!("b{seq:012}"));
                stage(&base.path, &staged)?;
                read.uploads.push(Upload {
                    staged,
                    object: ObjectRef::Base {
                        generation: read.generation,
                        seq,
                    },
                    what: UploadKind::Base {
                        through: base.through,
                    },
                });
                read.identities.push((None, identity));
                base_through = base.through;
            }
        }
        Ok(base_through)
    }

    /// turns.log after what was shipped (and after a new base), as much as the budget holds.
    /// Answers the segment's log end and its log piece (`None`: no new slots).
    fn read_log(
        &self,
        cut: &StoreCut,
        store: &StoreDir,
        base_through: u64,
        read: &mut CutRead,
    ) -> Result<(u64, Option<SegmentPiece>), ReplicaError> {
        let log_from = self.state.log_records.max(base_through);
        let mut log_to = cut.log_records.max(log_from);
        let log_records_wanted = log_to - log_from;
        let fit = read.budget / LOG_SLOT_BYTES;
        if log_records_wanted > fit {
            log_to = log_from + fit;
            read.continues = true;
            read.left_bytes += (log_records_wanted - fit) * LOG_SLOT_BYTES;
        }
        let log_piece = if log_to > log_from {
            let path = store.turns_log_path();
            let len = ((log_to - log_from) * LOG_SLOT_BYTES) as usize;
            let offset = log_from * LOG_SLOT_BYTES;
            let start = read.body.len();
            read.body.resize(start + len, 0);
            read_at(&open(&path)?, &mut read.body[start..], offset, &path)?;
            Some(SegmentPiece {
                shard: 0,
                pack_id: 0,
                file_offset: offset,
                len: len as u64,
                body_offset: start as u64,
            })
        } else {
            None
        };
        Ok((log_to, log_piece))
    }

    /// Packs, shard by shard. Answers each shard's point at the cut.
    fn read_packs(
        &self,
        cut: &StoreCut,
        store: &StoreDir,
        read: &mut CutRead,
    ) -> Result<Vec<ShardPoint>, ReplicaError> {
        let mut points = Vec::with_capacity(cut.shards.len());
        for (shard, shard_cut) in cut.shards.iter().enumerate() {
            let shard = shard as u16;
            points.push(ShardPoint {
                pack_id: shard_cut.pack_id,
                pack_end: shard_cut.pack_end,
            });
            for pack_id in 0..=shard_cut.pack_id {
                if self.read_pack(store, shard, shard_cut, pack_id, read)? {
                    break;
                }
            }
        }
        Ok(points)
    }

    /// One pack of a shard at the cut: skipped when shipped already, staged whole when sealed
    /// and new (or replaced), else its unshipped bytes as a piece of the body, within the
    /// budget. Answers whether the budget ran out here, which ends this shard's packs.
    fn read_pack(
        &self,
        store: &StoreDir,
        shard: u16,
        shard_cut: &ShardCut,
        pack_id: u32,
        read: &mut CutRead,
    ) -> Result<bool, ReplicaError> {
        let sealed = pack_id < shard_cut.pack_id;
        let path = store.pack_path(shard, pack_id);
        let (shipped, known) = self.shipped_of(shard, pack_id);
        if !sealed && shard_cut.pack_end == shipped && known.is_some() {
            return Ok(false);
        }
        let file = match File::open(&path) {
            Ok(file) => file,
            // An empty store's first pack, never written.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !sealed => {
                return Ok(false);
            }
            Err(source) => return Err(ReplicaError::io(&path, source)),
        };
        let identity = FileIdentity::of(&file).map_err(|source| ReplicaError::io(&path, source))?;
        let file_len = if sealed {
            file.metadata()
                .map_err(|source| ReplicaError::io(&path, source))?
                .len()
        } else {
            shard_cut.pack_end
        };
        let same_version = known == Some(identity);
        if same_version && file_len == shipped {
            return Ok(false);
        }
        if !same_version && (sealed || shipped > 0) {
            let seq = read.seq;
            let staged = read
                .staging
                .join(format!("p{shard:02}-{pack_id:06}-{seq:012}"));
            // Never shipped and sealed, or replaced since: whole, in its own object.
            if sealed {
                stage(&path, &staged)?;
                read.upload_pack(staged, shard, pack_id);
                read.identities.push((Some((shard, pack_id)), identity));
                return Ok(false);
            }
            // The open pack replaced (a restored file): its bytes start again at 0 in
            // this segment, after an empty replacement.
            files::WriteFile::create(&staged)
                .map_err(|source| ReplicaError::io(&staged, source))?;
            read.upload_pack(staged, shard, pack_id);
        }
        let from = if same_version { shipped } else { 0 };
        if file_len < from {
            return Err(ReplicaError::Invalid(format!(
                "{} is {file_len} bytes, shorter than the {from} shipped of the same \
                 file: it changed in place, which a store never does",
                path.display()
            )));
        }
        read.read_piece(&file, &path, (shard, pack_id), from, file_len)?;
        read.identities.push((Some((shard, pack_id)), identity));
        Ok(read.continues)
    }

    /// How many bytes of pack `pack_id` of `shard` the replica holds, and the identity of the
    /// file they were shipped from (`None`: never shipped from this store).
    fn shipped_of(&self, shard: u16, pack_id: u32) -> (u64, Option<FileIdentity>) {
        let shipped = self
            .state
            .shards
            .get(usize::from(shard))
            .and_then(|files| files.packs.get(pack_id as usize))
            .map_or(0, |pack| pack.len);
        let known = self
            .local
            .packs
            .get(usize::from(shard))
            .and_then(|packs| packs.get(pack_id as usize))
            .copied()
            .flatten();
        (shipped, known)
    }
}

/// A cycle being read from a cut (`Shipper::read_cut`): the segment's body so far, the files
/// to upload whole, and whether the budget left bytes for the next segment.
struct CutRead {
    generation: u32,
    seq: u64,
    /// The most bytes the segment's body carries.
    budget: u64,
    staging: PathBuf,
    body: Vec<u8>,
    uploads: Vec<Upload>,
    identities: Vec<(Option<(u16, u32)>, FileIdentity)>,
    pieces: Vec<SegmentPiece>,
    left_bytes: u64,
    continues: bool,
}

impl CutRead {
    /// Bytes `from..file_len` of a pack into the body, as many as the budget leaves room for
    /// (the rest is left for the next segment).
    fn read_piece(
        &mut self,
        file: &File,
        path: &Path,
        (shard, pack_id): (u16, u32),
        from: u64,
        file_len: u64,
    ) -> Result<(), ReplicaError> {
        let room = self.budget.saturating_sub(self.body.len() as u64);
        let mut to = file_len;
        if to - from > room {
            self.left_bytes += to - from - room;
            to = from + room;
            self.continues = true;
        }
        if to > from {
            let start = self.body.len();
            self.body.resize(start + (to - from) as usize, 0);
            read_at(file, &mut self.body[start..], from, path)?;
            self.pieces.push(SegmentPiece {
                shard,
                pack_id,
                file_offset: from,
                len: to - from,
                body_offset: start as u64,
            });
        }
        Ok(())
    }

    /// Pack `pack_id` of `shard`, staged at `staged`, to upload whole before the segment.
    fn upload_pack(&mut self, staged: PathBuf, shard: u16, pack_id: u32) {
        self.uploads.push(Upload {
            staged,
            object: ObjectRef::Pack {
                generation: self.generation,
                seq: self.seq,
                shard,
                pack_id,
            },
            what: UploadKind::Pack { shard, pack_id },
        });
    }
}

fn open(path: &Path) -> Result<File, ReplicaError> {
    File::open(path).map_err(|source| ReplicaError::io(path, source))
}

fn read_at(file: &File, target: &mut [u8], offset: u64, path: &Path) -> Result<(), ReplicaError> {
    file.read_exact_at(target, offset)
        .map_err(|source| ReplicaError::io(path, source))
}

/// A second name for `path` in the staging directory, so that its bytes stay as they are
/// until they are uploaded, whatever a collection does meanwhile (decision 0017: no store
/// changes a file another name holds). Copied where a hard link cannot be made.
fn stage(path: &Path, staged: &Path) -> Result<(), ReplicaError> {
    if let Some(dir) = staged.parent() {
        files::create_dir_all(dir).map_err(|source| ReplicaError::io(dir, source))?;
    }
    // A leftover of a failed cycle; the link below needs the name free.
    let _ = files::remove(staged);
    files::hard_link_or_copy(path, staged).map_err(|source| ReplicaError::io(staged, source))?;
    Ok(())
}

/// A lease record for this store (its renewal number and time are set when written; a taker
/// sets `failovers`).
pub(crate) fn lease_record(
    replica_id: ReplicaId,
    generation: u32,
    advertise: &str,
    data_dir: &Path,
    timing: crate::lease::LeaseTiming,
) -> crate::format::LeaseRecord {
    let millis = |duration: Duration| u32::try_from(duration.as_millis()).unwrap_or(u32::MAX);
    crate::format::LeaseRecord {
        state: crate::format::LeaseState::Held,
        epoch: 0,
        replica_id,
        holder_nonce: crate::takeover::random_nonce(),
        renewal: 0,
        lease_ms: millis(timing.lease),
        margin_ms: millis(timing.margin()),
        written_unix_ms: now_unix_ms(),
        failovers: 0,
        last_failover_ms: 0,
        generation,
        holder: crate::takeover::holder(),
        advertise: advertise.to_string(),
        store: store_id(data_dir),
    }
}

/// What the lease keeper of a store tells it: how long it may acknowledge (the engine's ack
/// gate), and, when the lease is lost, that it is fenced (its writes refused, its remote
/// waiters answered UNCONFIRMED).
pub(crate) fn keeper_hooks(
    engine: &Engine,
    acks: &Arc<RemoteAcks>,
    stats: &Arc<ReplicationStats>,
    location: &str,
) -> crate::lease::KeeperHooks {
    let engine = engine.clone();
    let stats = stats.clone();
    let fenced = engine.clone();
    let acks = acks.clone();
    let location = location.to_string();
    crate::lease::KeeperHooks {
        now_ns: ctxstore_engine::clock::boot_now_ns,
        open_until: Box::new(move |until| {
            engine.set_lease_until(until);
            stats
                .lease_renewed_unix_ms
                .store(now_unix_ms(), Ordering::Relaxed);
        }),
        lost: Box::new(move |who| {
            fenced.fence(format!(
                "this server is fenced: {who} took the lease of {location}; it refuses \
                 writes; write to {who} instead"
            ));
            acks.fence();
        }),
    }
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// This store as a lease names it: its host and canonical data directory. A restart of the
/// same store (the directory's lock is this process's) takes its own lease back at once.
pub(crate) fn store_id(data_dir: &Path) -> String {
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{host}:{}", dir.display())
}

/// The store directory of a data dir (for tools that have no engine).
pub fn store_dir(data_dir: &Path) -> StoreDir {
    StoreDir::new(data_dir)
}
