//! The `Engine` handle: reads (`read.rs`), stats, shutdown. Opening is `engine/open.rs`
//! (recover → publish → start actors → start background work); the caller's side of an
//! append is `engine/append.rs` (`pipeline.rs` draws the whole route).

// The Engine's own methods, in files of their own by concern: each is an `impl Engine` block
// (with the threads and helpers only it uses), so these are the Engine itself, not modules
// below it; everything they call lies below `engine.rs` in the code map.
pub(crate) mod append;
pub mod backup;
pub(crate) mod chunked;
pub mod contexts;
pub mod cut;
pub mod follow;
pub mod id_floors;
mod open;
pub mod overlays;
pub mod retention;
pub mod streams;
pub mod tenants;
pub mod turn_vectors;
pub mod turns;
mod vector_walk;
pub mod vectors;
pub mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;

use crate::blob::codec::Owner;
use crate::config::EngineConfig;
use crate::engine::chunked::BaseHints;
use crate::error::{EngineError, OpenError};
use crate::format::meta::Meta;
use crate::format::pack::EncodedBlob;
use crate::gc::{Collector, Scheduler};
use crate::ids::{BlobHash, ContextId, TenantId, TurnId};
use crate::metrics::ActorSnapshot;
use crate::model::{
    ContextHead, Created, NewContext, NoPayloadCache, Page, PageOptions, PageQuery, Payload,
    PayloadCache, PayloadMode, Scope, StoreStats, StoredBlob, Turn, TurnPage, TurnWithPayload,
};
use crate::pipeline::{SequencerInbox, SequencerRequest, ShardRequest};
use crate::published::Published;
use crate::read::{Reader, shown};
use crate::seal::Addressing;
use retention::Reaper;

/// A handle on an open store. Cheap to clone; every method can be called from any thread and,
/// for the async ones, from any async runtime (the futures only wait on channels).
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    /// Whose data this handle sees (decision 0032 §2): `Scope::Store` from `open`; a
    /// connection's handle is `scoped` to its tenant.
    pub(crate) scope: Scope,
    /// How this handle's BlobHashes become the store's addresses (decision 0032 §4): every
    /// hash a caller gives is turned into its address here, and every address an answer
    /// carries back into the caller's hash, so a tenant sees only its own address space.
    pub(crate) addressing: Addressing,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) published: Arc<Published>,
    pub(crate) sequencer: SequencerInbox,
    pub(crate) shards: Box<[flume::Sender<ShardRequest>]>,
    pub(crate) config: EngineConfig,
    /// The garbage collector (`gc/`); it also keeps backups one at a time.
    pub(crate) collector: Arc<Collector>,
    /// The `ctxstore-gc` thread, stopped first by `shutdown`.
    gc_scheduler: Mutex<Option<Scheduler>>,
    closed: AtomicBool,
    /// Touched only by `shutdown`.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The directory lock, released by `shutdown`.
    lock: Mutex<Option<crate::store_dir::DirLock>>,
    /// The TTL reaper thread, stopped first by `shutdown`.
    reaper: Mutex<Option<Reaper>>,
    /// Where a chunked write finds its base manifest (`chunks.rs`).
    pub(crate) base_hints: BaseHints,
    /// Decoded vectors blobs, for searches (`vector_search.rs`).
    pub(crate) vector_cache: crate::vector_search::VectorCache,
}

impl Engine {
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// A handle on the same store that sees `tenant_id`'s data only (decision 0032 §2):
    /// another tenant's contexts, names and turns answer exactly as absent ones do, and a
    /// context it creates is `tenant_id`'s. The tenant must be registered (or the operator)
    /// for a create to succeed. Its addresses are fixed when the handle is made: in a store
    /// that seals, make it once `tenant_ready` (a standby learns a tenant's keys after its
    /// record).
    pub fn scoped(&self, tenant_id: TenantId) -> Engine {
        Engine {
            inner: self.inner.clone(),
            scope: Scope::Tenant(tenant_id),
            addressing: self.inner.published.keys.addressing(tenant_id),
        }
    }

    /// Whether a handle on `tenant_id` would find its data: the tenant's addresses are known
    /// (always, but in a sealing store whose keyring does not hold the tenant's keys yet: a
    /// standby before its primary's keyring arrived).
    pub fn tenant_ready(&self, tenant_id: TenantId) -> bool {
        self.inner.published.keys.knows(tenant_id) && !self.tenant_deleted(tenant_id)
    }

    /// Whose data this handle sees.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The key under which a `PayloadCache` holds this handle's payload `hash` (its address:
    /// a cache shared by every tenant's connections never answers one tenant with another's
    /// entry).
    pub fn cache_key(&self, hash: BlobHash) -> BlobHash {
        self.addressing.address(hash)
    }

    /// Whose blobs this handle writes, and at which addresses.
    pub(crate) fn owner(&self) -> Owner<'_> {
        Owner {
            tenant_id: self.scope.tenant_id(),
            addressing: &self.addressing,
        }
    }

    /// `blob`, a record of this handle's tenant, sealed under the tenant's data key when the
    /// store seals (`codec::sealed`).
    pub(crate) fn sealed(&self, blob: EncodedBlob) -> Result<EncodedBlob, EngineError> {
        let key = self
            .inner
            .published
            .keys
            .sealing_key(self.scope.tenant_id())?;
        crate::blob::codec::sealed(blob, key.as_deref())
    }

    /// The address of the caller's `hash`.
    pub(crate) fn address(&self, hash: BlobHash) -> BlobHash {
        self.addressing.address(hash)
    }

    /// The caller's hash of `address`.
    pub(crate) fn hash_of(&self, address: BlobHash) -> BlobHash {
        self.addressing.hash_of(address)
    }

    /// A turn as the caller sees it: its payload's hash, not its address.
    pub(crate) fn shown(&self, turn: Turn) -> Turn {
        shown(&self.addressing, turn)
    }

    /// An error as the caller sees it: a blob it names by its hash, not by its address.
    pub(crate) fn shown_error(&self, error: EngineError) -> EngineError {
        match error {
            EngineError::BlobNotFound(address) => EngineError::BlobNotFound(self.hash_of(address)),
            EngineError::ReferencedBlobNotFound(address) => {
                EngineError::ReferencedBlobNotFound(self.hash_of(address))
            }
            other => other,
        }
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
        let request = SequencerRequest::CreateContext {
            new,
            scope: self.scope,
            reply,
        };
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
            scope: self.scope,
            addressing: &self.addressing,
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
        let page = self.reader().page(query, options, cache);
        page.map_err(|error| self.shown_error(error))
    }

    /// A payload as `mode` asks, looked up in `cache` first (and put there once read).
    pub fn read_payload(
        &self,
        hash: BlobHash,
        mode: PayloadMode,
        cache: &mut dyn PayloadCache,
    ) -> Result<Payload, EngineError> {
        let payload = self.reader().payload(self.address(hash), mode, cache);
        payload.map_err(|error| self.shown_error(error))
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
        let page = self.reader().page(query, options, &mut NoPayloadCache);
        page.map_err(|error| self.shown_error(error))
    }

    /// A payload, verified against its hash.
    pub async fn blob(&self, hash: BlobHash) -> Result<Bytes, EngineError> {
        let address = self.address(hash);
        if self.is_purged(&address) {
            return Err(EngineError::BlobNotFound(hash));
        }
        let published = &self.inner.published;
        let location = published.shard_of(&address).find(&address);
        let location = location.map_err(|error| self.shown_error(error))?;
        crate::chunks::read_payload(&published.shards, &address, location)
    }

    /// A blob as stored (possibly zstd), checksum-verified; the caller inflates and hashes.
    pub async fn blob_stored(&self, hash: BlobHash) -> Result<StoredBlob, EngineError> {
        let address = self.address(hash);
        if self.is_purged(&address) {
            return Err(EngineError::BlobNotFound(hash));
        }
        let published = &self.inner.published;
        let location = published.shard_of(&address).find(&address);
        let location = location.map_err(|error| self.shown_error(error))?;
        if location.compression == crate::format::pack::Compression::Manifest {
            // Chunked: the stored form is the rebuilt payload.
            let bytes = crate::chunks::read_payload(&published.shards, &address, location)?;
            return Ok(StoredBlob {
                hash,
                compression: crate::format::pack::Compression::Raw,
                raw_len: location.raw_len,
                bytes,
                tenant_id: self.scope.tenant_id(),
            });
        }
        let stored = published
            .shard_of(&address)
            .read_stored_at(&address, location)?;
        Ok(StoredBlob { hash, ..stored })
    }

    /// A stored blob's payload length, from its shard's index (no I/O); `None` if not stored.
    pub fn blob_len(&self, hash: BlobHash) -> Option<u32> {
        let address = self.address(hash);
        if self.is_purged(&address) {
            return None;
        }
        let location = self.inner.published.shard_of(&address).location(&address);
        location.map(|location| location.raw_len)
    }

    pub async fn has_blob(&self, hash: BlobHash) -> bool {
        let address = self.address(hash);
        !self.is_purged(&address) && self.inner.published.shard_of(&address).contains(&address)
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
        self.published.vector_graphs.stop();
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
        self.published.vector_graphs.stop();
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

/// Every registered tenant has its keys when the store seals: one without (registered before
/// the store sealed, or whose keys a crash kept from the keyring) gets its derived address
/// key, the one its blobs may lie at already, and a fresh data key.
pub(crate) fn give_registered_keys(
    keys: &crate::keys::StoreKeys,
    published: &crate::published::Published,
) -> Result<(), OpenError> {
    if !keys.seals() {
        return Ok(());
    }
    let contexts = published.contexts.load();
    // The operator too: a promoted standby whose primary never sealed has no entry 0.
    let registered: Vec<_> =
        std::iter::once((TenantId::OPERATOR, crate::format::keyring::OPERATOR_NAME))
            .chain(contexts.tenants.iter())
            .collect();
    keys.give_keys(&registered, false).map_err(|error| {
        OpenError::Config(format!("giving registered tenants their keys: {error}"))
    })
}

/// The meta file says the store seals (a promoted standby whose primary never did).
pub(crate) fn mark_sealing(store: &crate::store_dir::StoreDir) -> Result<(), OpenError> {
    let path = store.meta_path();
    let bytes = crate::file::read_whole(&path).map_err(|source| OpenError::io(&path, source))?;
    let meta = Meta::decode(&bytes)
        .map_err(|error| OpenError::Corrupt(crate::error::Corruption::record(&path, 0, &error)))?;
    if !meta.seals {
        store.write_meta(&Meta {
            seals: true,
            ..meta
        })?;
    }
    Ok(())
}
