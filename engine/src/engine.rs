//! The `Engine` handle: open (recover, start actors), reads (`read.rs`), stats, shutdown. The
//! caller's side of an append is `engine/append.rs` (`pipeline.rs` draws the whole route).

// The Engine's own methods, in files of their own by concern: each is an `impl Engine` block
// (with the threads and helpers only it uses), so these are the Engine itself, not modules
// below it; everything they call lies below `engine.rs` in the code map.
pub(crate) mod append;
pub mod backup;
pub(crate) mod chunked;
pub mod contexts;
pub mod overlays;
pub mod retention;
pub mod turns;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;

use crate::blob::recover::{RecoveredShard, recover_shard};
use crate::config::{Actor, EngineConfig};
use crate::engine::chunked::BaseHints;
use crate::error::{EngineError, OpenError};
use crate::file::ReadFile;
use crate::format::meta::{Meta, STORE_FORMAT_VERSION};
use crate::gc::{Collector, Scheduler};
use crate::ids::{BlobHash, ContextId, TurnId};
use crate::metrics::{ActorMetrics, ActorSnapshot};
use crate::model::{
    ContextHead, Created, NewContext, NoPayloadCache, Page, PageOptions, PageQuery, Payload,
    PayloadCache, PayloadMode, StoreStats, StoredBlob, Turn, TurnPage, TurnWithPayload,
};
use crate::pipeline::{SequencerInbox, SequencerRequest, ShardRequest};
use crate::published::Published;
use crate::read::Reader;
use crate::sequencer::migrate::migrate_turn_log;
use crate::sequencer::recover::recover_log;
use crate::sequencer::view::{ContextsView, HeadTable, SequencerCounters, TurnsView};
use crate::status::StoreStatus;
use crate::store_dir::{StoreDir, now_unix_ms};
use crate::threads::{ActorSeed, start_thread};
use retention::Reaper;

/// A handle on an open store. Cheap to clone; every method can be called from any thread and,
/// for the async ones, from any async runtime (the futures only wait on channels).
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) published: Arc<Published>,
    pub(crate) sequencer: SequencerInbox,
    pub(crate) shards: Box<[flume::Sender<ShardRequest>]>,
    pub(crate) config: EngineConfig,
    /// The garbage collector (`gc.rs`); its maintenance lock also keeps backups one at a time.
    pub(crate) collector: Arc<Collector>,
    /// The `ctxstore-gc` thread, stopped first by `shutdown`.
    gc_scheduler: Mutex<Option<Scheduler>>,
    closed: AtomicBool,
    /// Touched only by `shutdown`.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The directory lock, released by `shutdown`.
    lock: Mutex<Option<std::fs::File>>,
    /// The TTL reaper thread, stopped first by `shutdown`.
    reaper: Mutex<Option<Reaper>>,
    /// Where a chunked write finds its base manifest (`chunks.rs`).
    pub(crate) base_hints: BaseHints,
}

impl Engine {
    /// Opens (or creates) the store in `config.data_dir`: checks and recovers every file,
    /// then starts the actors on their threads. Blocks until the store is ready.
    pub fn open(config: EngineConfig) -> Result<Engine, OpenError> {
        config.validate().map_err(OpenError::Config)?;
        let started = std::time::Instant::now();
        let store = StoreDir::new(&config.data_dir);
        crate::file::ops::create_dir_all(&store.root)
            .map_err(|source| OpenError::io(&store.root, source))?;
        let lock = store.lock()?;
        let meta = store.open_or_create(config.shard_count, now_unix_ms())?;
        if meta.shard_count != config.shard_count {
            return Err(OpenError::Config(format!(
                "the store in {} has {} blob shards, the configuration says {}; start with the \
                 store's shard count",
                store.root.display(),
                meta.shard_count,
                config.shard_count
            )));
        }

        // No store writes a byte another reads: a file it writes in place that shares its
        // inode with another name (a backup's or a copy's hard link) gets one of its own.
        let in_place = store
            .files_written_in_place(meta.shard_count)
            .map_err(|source| OpenError::io(&store.root, source))?;
        for path in in_place {
            crate::file::make_private(&path).map_err(|source| OpenError::io(&path, source))?;
        }
        // Taken before recovery and the prepared space can fill a nearly full disk.
        let reserve = crate::reserve::DiskReserve::open(&store.root, config.disk_reserve_bytes)
            .map_err(|source| OpenError::io(&store.root, source))?;

        // Shards recover in parallel; the log's replay then checks every turn's blob.
        let shards = recover_shards(&store, &config)?;
        let (views, cursors): (Vec<_>, Vec<_>) = shards
            .into_iter()
            .map(|RecoveredShard { view, cursor }| (view, cursor))
            .unzip();
        for incomplete in crate::chunks::drop_incomplete_manifests(&views) {
            tracing::warn!(
                blob = %incomplete.hash,
                reason = %incomplete.reason,
                "a chunked blob lacks part of itself (a backup's cut?); it is not used, and a \
                 live turn naming it fails the open below"
            );
        }
        let log_path = store.turns_log_path();
        // The compacted prefix of the log, if a collection wrote one (`log_compaction.rs`).
        let base = crate::log_compaction::open_base(&store)?;
        if base.is_some() && meta.format_version < STORE_FORMAT_VERSION {
            return Err(OpenError::Inconsistent(format!(
                "{} is of store format {} but has a compacted log ({}), which only format {} \
                 writes",
                store.root.display(),
                meta.format_version,
                store.turns_base_path().display(),
                STORE_FORMAT_VERSION
            )));
        }
        let recovered = recover_log(&log_path, base.as_ref(), &views, config.repair)?;
        if meta.format_version < STORE_FORMAT_VERSION {
            migrate_store(&store, &meta, &log_path, recovered.next_record_id - 1)?;
        }

        let turns_file =
            ReadFile::open(log_path.clone()).map_err(|source| OpenError::io(&log_path, source))?;
        let contexts = ContextsView::new(recovered.contexts.clone());
        let heads = HeadTable::new();
        for (context_id, head) in recovered.heads.iter() {
            heads.set_head(context_id, head.head_turn_id);
        }
        heads.publish_contexts(recovered.heads.count());
        let counters = SequencerCounters::default();
        counters.turns.store(recovered.turns, Ordering::Relaxed);
        counters.contexts.store(
            recovered.heads.count() - recovered.contexts.deleted_contexts,
            Ordering::Relaxed,
        );
        counters
            .logical_bytes
            .store(recovered.logical_bytes, Ordering::Relaxed);
        counters
            .dedup_hits
            .store(recovered.dedup_hits, Ordering::Relaxed);
        let published = Arc::new(Published {
            turns: TurnsView::new(
                turns_file,
                base,
                recovered.next_record_id - 1,
                recovered.dead.clone(),
            ),
            heads,
            contexts,
            counters,
            shard_metrics: views.iter().map(|_| ActorMetrics::default()).collect(),
            shards: views.into_boxed_slice(),
            status: StoreStatus::default(),
            sequencer_metrics: ActorMetrics::default(),
        });
        tracing::info!(
            data = %store.root.display(),
            turns = recovered.turns,
            contexts = recovered.heads.count(),
            blobs = published.shards.iter().map(|s| s.counters.blobs.load(Ordering::Relaxed)).sum::<u64>(),
            recovery_ms = started.elapsed().as_millis() as u64,
            "store recovered"
        );

        // Actors: one inbox each, bounded (backpressure on callers), then their threads.
        let queue_depth = config.limits.queue_depth_max as usize;
        let (sequencer_sender, sequencer_inbox) = flume::bounded(queue_depth);
        let sequencer = SequencerInbox(sequencer_sender);
        // Shards tell the sequencer which of their batches are durable (decision 0014); only
        // the shards hold a sender, so the sequencer learns when they are all gone.
        let (notices, notices_inbox) = flume::unbounded();
        let mut sequencer_seed = Some(ActorSeed::Sequencer(
            Box::new(recovered),
            sequencer_inbox,
            notices_inbox,
        ));
        let mut shard_senders = Vec::new();
        let mut shard_seeds: Vec<Option<ActorSeed>> = Vec::new();
        let open_packs: Vec<u32> = cursors.iter().map(|cursor| cursor.pack_id).collect();
        for cursor in cursors {
            let (sender, inbox) = flume::bounded(queue_depth);
            shard_senders.push(sender);
            let seed = ActorSeed::Shard(cursor, inbox, sequencer.clone(), notices.clone());
            shard_seeds.push(Some(seed));
        }
        drop(notices);
        let mut threads = Vec::new();
        for (index, placement) in config.placement.threads.iter().enumerate() {
            let seeds = placement
                .actors
                .iter()
                .filter_map(|actor| match actor {
                    Actor::Sequencer => sequencer_seed.take(),
                    Actor::Shard(shard) => shard_seeds.get_mut(usize::from(*shard))?.take(),
                })
                .collect();
            let started = start_thread(
                index,
                placement,
                seeds,
                published.clone(),
                config.limits,
                config.preallocate,
            );
            match started {
                Ok(handle) => threads.push(handle),
                Err(error) => {
                    // Dropping the senders stops the actors already started.
                    drop(sequencer);
                    drop(shard_senders);
                    for handle in threads {
                        let _ = handle.join();
                    }
                    return Err(error);
                }
            }
        }
        assert!(sequencer_seed.is_none() && shard_seeds.iter().all(Option::is_none));
        let reaper = Reaper::start(
            published.clone(),
            sequencer.clone(),
            config.context_ttl_default_ms,
            std::time::Duration::from_millis(config.reaper_interval_ms),
        );
        let reaper = match reaper {
            Ok(reaper) => reaper,
            Err(error) => {
                stop_actors(&sequencer, &shard_senders, threads);
                return Err(OpenError::Thread(format!("ctxstore-reaper: {error}")));
            }
        };
        let collector = Arc::new(Collector::new(
            published.clone(),
            sequencer.clone(),
            shard_senders.clone().into_boxed_slice(),
            store.clone(),
            &config,
            open_packs,
            reserve,
        ));
        let gc_scheduler = match Scheduler::start(
            collector.clone(),
            std::time::Duration::from_millis(config.gc_interval_ms),
            config.gc_deleted_bytes_trigger,
        ) {
            Ok(scheduler) => scheduler,
            Err(error) => {
                reaper.stop();
                stop_actors(&sequencer, &shard_senders, threads);
                return Err(OpenError::Thread(format!("ctxstore-gc: {error}")));
            }
        };
        Ok(Engine {
            inner: Arc::new(Inner {
                published,
                sequencer,
                shards: shard_senders.into_boxed_slice(),
                config,
                closed: AtomicBool::new(false),
                collector,
                gc_scheduler: Mutex::new(Some(gc_scheduler)),
                threads: Mutex::new(threads),
                lock: Mutex::new(Some(lock)),
                reaper: Mutex::new(Some(reaper)),
                base_hints: BaseHints::default(),
            }),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// A new, empty context.
    pub async fn create_context(&self) -> Result<ContextHead, EngineError> {
        let created = self.create(NewContext::default()).await?;
        Ok(created.context.head)
    }

    /// A new context whose head is the existing turn `base` (a fork): O(1), copies nothing.
    pub async fn fork(&self, base: TurnId) -> Result<ContextHead, EngineError> {
        if base.is_none() {
            return Err(EngineError::InvalidArgument(
                "fork needs a turn; 0 names none".into(),
            ));
        }
        let new = NewContext {
            base,
            ..NewContext::default()
        };
        Ok(self.create(new).await?.context.head)
    }

    /// A new context (empty, a fork, or a clone) with an optional name and tags; with
    /// `get_or_create`, the existing context of that name instead of `NameTaken`.
    pub async fn create(&self, new: NewContext) -> Result<Created, EngineError> {
        self.check_open()?;
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::CreateContext { new, reply };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }

    pub(crate) fn check_open(&self) -> Result<(), EngineError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(EngineError::ShutDown);
        }
        Ok(())
    }

    pub(crate) fn reader(&self) -> Reader<'_> {
        Reader {
            published: &self.inner.published,
            read_turns_max: self.inner.config.limits.read_turns_max,
        }
    }

    pub async fn head(&self, context_id: ContextId) -> Result<ContextHead, EngineError> {
        self.reader().head(context_id)
    }

    /// A turn by id, as it reads now (its latest patch, or redacted).
    pub async fn turn(&self, turn_id: TurnId) -> Result<Turn, EngineError> {
        self.reader().turn(turn_id, None)
    }

    /// A turn by id in the overlay view `as_of` (decision 0012; `None`: the latest).
    pub fn turn_as_of(&self, turn_id: TurnId, as_of: Option<u64>) -> Result<Turn, EngineError> {
        self.reader().turn(turn_id, as_of)
    }

    /// Whether a purge removed `hash` (and nothing named it since): reads by hash answer not
    /// found, whatever the shard or a cache still holds.
    pub(crate) fn is_purged(&self, hash: &BlobHash) -> bool {
        self.inner
            .published
            .contexts
            .load()
            .overlays
            .is_purged(hash)
    }

    /// A page of turns, oldest first, with payloads as `options` ask, looked up in `cache`
    /// first (and put there once read). Runs on the caller's thread; never waits.
    pub fn read_page(
        &self,
        query: PageQuery,
        options: PageOptions,
        cache: &mut dyn PayloadCache,
    ) -> Result<Page, EngineError> {
        self.reader().page(query, options, cache)
    }

    /// A payload as `mode` asks, looked up in `cache` first (and put there once read).
    pub fn read_payload(
        &self,
        hash: BlobHash,
        mode: PayloadMode,
        cache: &mut dyn PayloadCache,
    ) -> Result<Payload, EngineError> {
        self.reader().payload(hash, mode, cache)
    }

    /// The `limit` newest turns of a context, oldest first.
    pub async fn last(
        &self,
        context_id: ContextId,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, EngineError> {
        let query = PageQuery::Last { context_id, limit };
        self.raw_page(query, payloads).map(turn_page)
    }

    /// The `limit` turns older than `before` (a cursor from a previous page), oldest first.
    pub async fn before(
        &self,
        context_id: ContextId,
        before: TurnId,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, EngineError> {
        let query = PageQuery::Before {
            context_id,
            before,
            limit,
        };
        self.raw_page(query, payloads).map(turn_page)
    }

    /// The turns of a context's chain with depth in `from_depth..from_depth + limit`.
    pub async fn range_by_depth(
        &self,
        context_id: ContextId,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Vec<TurnWithPayload>, EngineError> {
        let query = PageQuery::RangeByDepth {
            context_id,
            from_depth,
            limit,
        };
        self.raw_page(query, payloads)
            .map(|page| turn_page(page).turns)
    }

    /// The chain root → `turn_id`, paged: up to `limit` turns from depth `from_depth`.
    pub async fn chain(
        &self,
        turn_id: TurnId,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Vec<TurnWithPayload>, EngineError> {
        let query = PageQuery::Chain {
            turn_id,
            from_depth,
            limit,
        };
        self.raw_page(query, payloads)
            .map(|page| turn_page(page).turns)
    }

    fn raw_page(&self, query: PageQuery, payloads: bool) -> Result<Page, EngineError> {
        let options = if payloads {
            PageOptions::RAW_PAYLOADS
        } else {
            PageOptions::TURNS
        };
        self.reader().page(query, options, &mut NoPayloadCache)
    }

    /// A payload, verified against its hash.
    pub async fn blob(&self, hash: BlobHash) -> Result<Bytes, EngineError> {
        if self.is_purged(&hash) {
            return Err(EngineError::BlobNotFound(hash));
        }
        let published = &self.inner.published;
        let location = published.shard_of(&hash).find(&hash)?;
        crate::chunks::read_payload(&published.shards, &hash, location)
    }

    /// A blob as stored (possibly zstd), checksum-verified; the caller inflates and hashes.
    pub async fn blob_stored(&self, hash: BlobHash) -> Result<StoredBlob, EngineError> {
        if self.is_purged(&hash) {
            return Err(EngineError::BlobNotFound(hash));
        }
        let published = &self.inner.published;
        let location = published.shard_of(&hash).find(&hash)?;
        if location.compression == crate::format::pack::Compression::Manifest {
            // Chunked: the stored form is the rebuilt payload.
            let bytes = crate::chunks::read_payload(&published.shards, &hash, location)?;
            return Ok(StoredBlob {
                hash,
                compression: crate::format::pack::Compression::Raw,
                raw_len: location.raw_len,
                bytes,
            });
        }
        published.shard_of(&hash).read_stored_at(&hash, location)
    }

    /// A stored blob's payload length, from its shard's index (no I/O); `None` if not stored.
    pub fn blob_len(&self, hash: BlobHash) -> Option<u32> {
        if self.is_purged(&hash) {
            return None;
        }
        let location = self.inner.published.shard_of(&hash).location(&hash);
        location.map(|location| location.raw_len)
    }

    pub async fn has_blob(&self, hash: BlobHash) -> bool {
        !self.is_purged(&hash) && self.inner.published.shard_of(&hash).contains(&hash)
    }

    pub fn stats(&self) -> StoreStats {
        let published = &self.inner.published;
        let counters = &published.counters;
        let gc = &self.inner.collector.counters;
        let mut stats = StoreStats {
            turns: counters.turns.load(Ordering::Relaxed),
            contexts: counters.contexts.load(Ordering::Relaxed),
            logical_bytes: counters.logical_bytes.load(Ordering::Relaxed),
            dedup_hits: counters.dedup_hits.load(Ordering::Relaxed),
            read_only: published.status.is_read_only(),
            live_bytes: gc.live_bytes.load(Ordering::Relaxed),
            dead_bytes: gc.dead_bytes.load(Ordering::Relaxed),
            gc_runs: gc.runs.load(Ordering::Relaxed),
            bytes_reclaimed_total: gc.bytes_reclaimed_total.load(Ordering::Relaxed),
            ..StoreStats::default()
        };
        for shard in published.shards.iter() {
            stats.blobs += shard.counters.blobs.load(Ordering::Relaxed);
            stats.unique_bytes += shard.counters.unique_bytes.load(Ordering::Relaxed);
            stats.stored_bytes += shard.counters.stored_bytes.load(Ordering::Relaxed);
            stats.chunked_blobs += shard.counters.manifests.load(Ordering::Relaxed);
            stats.chunked_payload_bytes += shard
                .counters
                .manifest_payload_bytes
                .load(Ordering::Relaxed);
            stats.chunks_written += shard.counters.chunks_written.load(Ordering::Relaxed);
            stats.chunk_dedup_hits += shard.counters.chunk_dedup_hits.load(Ordering::Relaxed);
            stats.chunk_bytes_saved += shard.counters.chunk_bytes_deduped.load(Ordering::Relaxed);
        }
        stats
    }

    /// Each actor's group-commit figures and queue depth, for monitoring: the sequencer
    /// first, then the shards in order. Reads atomics and channel lengths only.
    pub fn actor_metrics(&self) -> Vec<ActorSnapshot> {
        let inner = &self.inner;
        let published = &inner.published;
        let mut actors = Vec::with_capacity(1 + inner.shards.len());
        actors.push(
            published
                .sequencer_metrics
                .snapshot("sequencer".into(), inner.sequencer.0.len() as u64),
        );
        for (shard, (metrics, inbox)) in published
            .shard_metrics
            .iter()
            .zip(inner.shards.iter())
            .enumerate()
        {
            actors.push(metrics.snapshot(format!("shard{shard}"), inbox.len() as u64));
        }
        actors
    }

    /// Runs a garbage collection now (decision 0011): marks what live contexts reach, records
    /// the unreachable turns as collected, and rewrites the packs whose unreachable share
    /// passes `gc_pack_dead_percent` (the open pack is sealed first). Appends and reads go on.
    /// Blocking file I/O on the caller's thread: do not call it from an engine or network-core
    /// thread. One collection or backup at a time: waits for a running one to finish first.
    pub fn gc(&self) -> Result<crate::model::GcReport, EngineError> {
        self.check_open()?;
        self.inner.collector.run()
    }

    /// Stops the engine: refuses new work, lets every actor finish its queue and sync, joins
    /// the engine threads. Blocks; do not call it from an engine thread. Idempotent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.collector.stopping.store(true, Ordering::Release);
        let scheduler = match self.gc_scheduler.lock() {
            Ok(mut scheduler) => scheduler.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(scheduler) = scheduler {
            scheduler.stop();
        }
        let reaper = match self.reaper.lock() {
            Ok(mut reaper) => reaper.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(reaper) = reaper {
            reaper.stop();
        }
        let threads = match self.threads.lock() {
            Ok(mut threads) => std::mem::take(&mut *threads),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        stop_actors(&self.sequencer, &self.shards, threads);
        match self.lock.lock() {
            Ok(mut lock) => drop(lock.take()),
            Err(poisoned) => drop(poisoned.into_inner().take()),
        }
        tracing::info!(data = %self.config.data_dir.display(), "engine stopped");
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.shutdown();
            return;
        }
        // compio aborts the process when a panicking thread wakes one of its tasks, and
        // stopping the actors (even dropping their senders) wakes them: hand the shutdown to a
        // thread that is not unwinding.
        self.closed.store(true, Ordering::Release);
        let sequencer = std::mem::replace(&mut self.sequencer, SequencerInbox(flume::bounded(1).0));
        let shards = std::mem::take(&mut self.shards);
        let threads = std::mem::take(self.threads.get_mut().unwrap_or_else(|p| p.into_inner()));
        let lock = self
            .lock
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let reaper = self
            .reaper
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.collector.stopping.store(true, Ordering::Release);
        let scheduler = self
            .gc_scheduler
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let stopper = std::thread::spawn(move || {
            if let Some(scheduler) = scheduler {
                scheduler.stop();
            }
            if let Some(reaper) = reaper {
                reaper.stop();
            }
            stop_actors(&sequencer, &shards, threads);
            drop((sequencer, shards, lock));
        });
        let _ = stopper.join();
    }
}

/// Lets every actor finish its queue and sync, then joins the engine threads. Shards stop
/// first: an append that already holds a durable blob can still reach the sequencer.
fn stop_actors(
    sequencer: &SequencerInbox,
    shards: &[flume::Sender<ShardRequest>],
    threads: Vec<JoinHandle<()>>,
) {
    let mut waits = Vec::new();
    for shard in shards {
        let (done, wait) = oneshot::channel();
        if shard.send(ShardRequest::Stop { done }).is_ok() {
            waits.push(wait);
        }
    }
    for wait in waits {
        let _ = wait.recv();
    }
    let (done, wait) = oneshot::channel();
    if sequencer.0.send(SequencerRequest::Stop { done }).is_ok() {
        let _ = wait.recv();
    }
    for handle in threads {
        let _ = handle.join();
    }
}

/// A page in the shape of the in-process API (payloads raw, as `raw_page` asked).
fn turn_page(page: Page) -> TurnPage {
    let turns = page
        .entries
        .into_iter()
        .map(|entry| TurnWithPayload {
            turn: entry.turn,
            payload: entry.payload.map(|payload| match payload {
                Payload::Raw(bytes) => bytes,
                Payload::Stored(stored) => {
                    unreachable!("raw mode returned stored blob {}", stored.hash)
                }
            }),
        })
        .collect();
    TurnPage {
        turns,
        next_before: page.next_before,
    }
}

/// Store format migrations, once, at open, after recovery: format 1 → 2 writes `turns.log`
/// anew with skip pointers and context chains (`sequencer::migrate`), then the meta file.
fn migrate_store(
    store: &StoreDir,
    meta: &Meta,
    log_path: &std::path::Path,
    records: u64,
) -> Result<(), OpenError> {
    let started = std::time::Instant::now();
    tracing::info!(
        data = %store.root.display(),
        from = meta.format_version,
        to = STORE_FORMAT_VERSION,
        records,
        "migrating the store format (once)"
    );
    let turns = migrate_turn_log(log_path, records)?;
    store.write_meta(&Meta {
        format_version: STORE_FORMAT_VERSION,
        ..*meta
    })?;
    tracing::info!(
        turns,
        migration_ms = started.elapsed().as_millis() as u64,
        "store format migrated"
    );
    Ok(())
}

fn recover_shards(
    store: &StoreDir,
    config: &EngineConfig,
) -> Result<Vec<RecoveredShard>, OpenError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.shard_count)
            .map(|shard| {
                scope.spawn(move || recover_shard(store, shard, config.open_check, config.repair))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| {
                    Err(OpenError::Thread("a shard recovery thread panicked".into()))
                })
            })
            .collect()
    })
}
