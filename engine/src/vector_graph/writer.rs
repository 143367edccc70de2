//! The graph writer (decision 0033 §4): the one thread that adds to the graphs and removes
//! from them. At the open it builds each live index's graph from the recovered snapshot's
//! owners (searches are exact until it is ready), then applies each batch the sequencer
//! feeds it, in order, and publishes how far it got (`applied_seq`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ctxstore_vocab::vectors::Metric;

use super::snapshot::{self, Held, SNAPSHOT_CHANGES_MIN, SNAPSHOT_INTERVAL};
use super::{Feed, GRAPH_THREADS, Graph, GraphKey};
use crate::ids::BlobHash;
use crate::published::Published;
use crate::sequencer::vector_indexes::VectorIndexes;
use crate::sequencer::vector_owners::{GraphChange, base_of, label_of};

/// Rows removed from a graph since it was built past which it is built anew, when they are
/// also a quarter of the rows it holds: usearch reuses a removed node's slot in place, so the
/// links that led to the old vector lead to the new one, and recall falls with churn (5% of
/// the vectors replaced took recall@10 from 0.97–0.995 to 0.945–0.99 in
/// `engine/tests/vector_graph.rs`).
pub(crate) const REBUILD_REMOVED_ROWS_MIN: u64 = 1_000;

/// Free slots kept beyond an insert's own: inserters side by side (at most 64, each adding at
/// most 64 rows) each check for room under the shared lock before they add.
pub(crate) const GROWTH_SLACK: usize = 64 * 64;

/// Starts the writer: it builds each live index's graph from `indexes` (the recovered
/// snapshot's, which the first fed batch follows), then applies the batches fed to it.
pub(crate) fn start(
    published: &Arc<Published>,
    data_dir: &std::path::Path,
    indexes: VectorIndexes,
    graph_bytes_max: u64,
) -> Result<(), String> {
    let graphs = &published.vector_graphs;
    let taken = graphs.inbox.lock().map(|mut inbox| inbox.take());
    let Ok(Some(inbox)) = taken else {
        return Err("the graph writer was started already".into());
    };
    let mut writer = GraphWriter {
        published: published.clone(),
        inserter: Inserter {
            published: published.clone(),
            graph_bytes_max,
            cancel: Arc::new(AtomicBool::new(false)),
        },
        graphs: imbl::HashMap::new(),
        held: HashMap::new(),
        set_aside: HashMap::new(),
        rebuilding: HashMap::new(),
        data_dir: data_dir.to_path_buf(),
        changes: HashMap::new(),
        removed: HashMap::new(),
        saved_at: std::time::Instant::now(),
    };
    // Each live index has its graph (not ready) from the open on.
    for info in indexes.all() {
        writer.create(
            (info.tenant_id, info.index_id),
            info.dims,
            info.metric,
            false,
        );
    }
    let handle = std::thread::Builder::new()
        .name("ctxstore-vector-graph".into())
        .spawn(move || {
            writer.build(&indexes);
            while let Some(Feed::Batch(seq, changes)) = writer.next(&inbox) {
                // A shutdown does not wait for a backlog: the graph dies with the process.
                if writer.stopping() {
                    break;
                }
                for change in changes {
                    writer.apply(change);
                }
                writer
                    .published
                    .vector_graphs
                    .applied_seq
                    .store(seq, Ordering::Release);
                writer.finish_rebuilds();
                writer.rebuild_churned();
                if writer.saved_at.elapsed() >= SNAPSHOT_INTERVAL {
                    writer.save_changed(SNAPSHOT_CHANGES_MIN);
                }
            }
            writer.cancel_rebuilds();
            // At shutdown (or with the sequencer gone): what changed since the last save.
            writer.save_changed(1);
        })
        .map_err(|error| format!("starting the graph writer: {error}"))?;
    if let Ok(mut writer) = graphs.writer.lock() {
        *writer = Some(handle);
    }
    Ok(())
}

/// How often a writer with a rebuild under way and no batch to apply looks whether it ended.
const REBUILD_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The one writer of the graphs.
struct GraphWriter {
    /// Read for the vectors blobs; the writer's thread is joined at shutdown.
    published: Arc<Published>,
    /// Inserts into a graph; one of its own for each rebuild's thread.
    inserter: Inserter,
    graphs: imbl::HashMap<GraphKey, Arc<Graph>>,
    /// Per graph: the address holding each base in it, and its rows.
    held: HashMap<GraphKey, Held>,
    /// Per graph: the addresses set aside.
    set_aside: HashMap<GraphKey, Vec<BlobHash>>,
    /// Graphs being built anew after churn, on threads of their own (`rebuild_churned`).
    rebuilding: HashMap<GraphKey, Rebuild>,
    /// The store's directory: snapshots go to its `vectors/`.
    data_dir: std::path::PathBuf,
    /// Per graph: addresses added and removed since its last snapshot.
    changes: HashMap<GraphKey, u64>,
    /// Per graph: rows removed since it was built (`rebuild_churned`).
    removed: HashMap<GraphKey, u64>,
    saved_at: std::time::Instant,
}

/// Addresses inserted into a graph, each with its rows.
type Inserted = Vec<(BlobHash, u8)>;

/// A graph being built anew beside `old`, which searches walk and the writer keeps applying
/// batches to meanwhile.
struct Rebuild {
    old: Arc<Graph>,
    fresh: Arc<Graph>,
    /// The removed rows that started it (for the log).
    removed: u64,
    started: std::time::Instant,
    cancel: Arc<AtomicBool>,
    /// Inserts the held addresses of the start into `fresh`; answers them with their rows.
    /// Taken when joined.
    thread: Option<std::thread::JoinHandle<Result<Inserted, String>>>,
}

/// Inserts vectors blobs into a graph: the writer's own, or a rebuild's on its thread.
struct Inserter {
    published: Arc<Published>,
    graph_bytes_max: u64,
    /// Set to stop a rebuild whose graph went (its index dropped, or the engine stopping).
    cancel: Arc<AtomicBool>,
}

impl GraphWriter {
    /// The next feed: waits for it, but with a rebuild under way looks every `REBUILD_POLL`
    /// whether one ended, so that an idle store swaps its rebuilt graph in too. `None`: the
    /// sequencer is gone.
    fn next(&mut self, inbox: &flume::Receiver<Feed>) -> Option<Feed> {
        loop {
            if self.rebuilding.is_empty() {
                return inbox.recv().ok();
            }
            match inbox.recv_timeout(REBUILD_POLL) {
                Ok(feed) => return Some(feed),
                Err(flume::RecvTimeoutError::Timeout) => self.finish_rebuilds(),
                Err(flume::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Every live index's graph: its snapshot loaded and reconciled with the recovered
    /// owners, or built from them. Searches stay exact until it is ready.
    fn build(&mut self, indexes: &VectorIndexes) {
        let started = std::time::Instant::now();
        let live: Vec<GraphKey> = self.graphs.keys().copied().collect();
        snapshot::remove_stale(&self.data_dir, &live);
        let (mut loaded, mut added) = (0u64, 0u64);
        for key in live {
            // Each distinct address once (a base's few owners may share one).
            let mut addresses: Vec<BlobHash> = Vec::new();
            if let Some(owners) = indexes.owners.of_index(key.0, key.1) {
                for list in owners.values() {
                    for (at, owner) in list.iter().enumerate() {
                        if !list[..at].iter().any(|seen| seen.address == owner.address) {
                            addresses.push(owner.address);
                        }
                    }
                }
            }
            let wanted = match self.load(key) {
                Some(held) => {
                    loaded += held.len() as u64;
                    if let Some(graph) = self.graphs.get(&key) {
                        graph.loaded.store(held.len() as u64, Ordering::Release);
                    }
                    self.reconcile(key, held, &addresses)
                }
                None => addresses,
            };
            added += wanted.len() as u64;
            self.insert_missing(key, &wanted);
            if self.stopping() {
                return;
            }
        }
        for graph in self.graphs.values() {
            graph.ready.store(true, Ordering::Release);
        }
        if !self.graphs.is_empty() {
            tracing::info!(
                graphs = self.graphs.len(),
                loaded,
                added,
                build_ms = started.elapsed().as_millis() as u64,
                "vector graphs built; searches use them from now on"
            );
        }
        // A graph that had to take blobs is saved, so that the next open loads it whole.
        self.save_changed(1);
    }

    /// `key`'s snapshot, loaded into its (new, empty) graph; `None` when there is none or
    /// it failed a check (then removed, the graph made anew, and the reason logged).
    fn load(&mut self, key: GraphKey) -> Option<Held> {
        let graph = self.graphs.get(&key).cloned()?;
        match snapshot::load(&self.published, &self.data_dir, key, graph.dims, &graph) {
            Ok(held) => held,
            Err(error) => {
                tracing::warn!(
                    tenant = %key.0, index = key.1, %error,
                    "a vector graph snapshot failed its checks; it is removed and the graph \
                     rebuilt from the vectors blobs"
                );
                snapshot::remove(&self.data_dir, key);
                self.create(key, graph.dims, graph.metric, false);
                None
            }
        }
    }

    /// Takes a loaded graph to what the owners hold: the addresses they no longer name
    /// removed; answers those they name that it lacks.
    fn reconcile(&mut self, key: GraphKey, held: Held, addresses: &[BlobHash]) -> Vec<BlobHash> {
        let named: std::collections::HashSet<BlobHash> = addresses.iter().copied().collect();
        let holds: std::collections::HashSet<BlobHash> =
            held.values().map(|(address, _)| *address).collect();
        let gone: Vec<BlobHash> = holds.difference(&named).copied().collect();
        self.held.insert(key, held);
        for address in gone {
            self.remove(key, address);
        }
        addresses
            .iter()
            .filter(|address| !holds.contains(*address))
            .copied()
            .collect()
    }

    /// Inserts `addresses` (none held yet) on every CPU; those whose base is taken go aside.
    fn insert_missing(&mut self, key: GraphKey, addresses: &[BlobHash]) {
        let (inserted, aside) = self.insert_all(key, addresses);
        *self.changes.entry(key).or_default() += inserted.len() as u64;
        let held = self.held.entry(key).or_default();
        for (address, rows) in inserted {
            held.insert(base_of(&address), (address, rows));
        }
        for address in aside {
            self.add(key, address);
        }
    }

    /// Saves every ready graph with at least `changes_min` changes since its last save.
    fn save_changed(&mut self, changes_min: u64) {
        self.saved_at = std::time::Instant::now();
        let keys: Vec<GraphKey> = self
            .changes
            .iter()
            .filter(|(_, changes)| **changes >= changes_min)
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            let (Some(graph), Some(held)) = (self.graphs.get(&key), self.held.get(&key)) else {
                self.changes.remove(&key);
                continue;
            };
            if !graph.is_ready() {
                continue;
            }
            let started = std::time::Instant::now();
            match snapshot::save(
                &self.published,
                &self.data_dir,
                key,
                graph.dims,
                graph,
                held,
            ) {
                Ok(bytes) => {
                    tracing::info!(
                        tenant = %key.0, index = key.1, bytes, addresses = held.len(),
                        save_ms = started.elapsed().as_millis() as u64,
                        "vector graph snapshot saved"
                    );
                    self.changes.remove(&key);
                }
                // The next open rebuilds what the last good snapshot lacks.
                Err(error) => tracing::warn!(
                    tenant = %key.0, index = key.1, %error,
                    "cannot save a vector graph snapshot"
                ),
            }
        }
    }

    /// Inserts the first address of each base of `addresses` into `key`'s graph, on every
    /// CPU (usearch's inserts run side by side); answers them with their rows, and the
    /// addresses left for `add` (another address held their base). A failure drops the graph.
    fn insert_all(
        &mut self,
        key: GraphKey,
        addresses: &[BlobHash],
    ) -> (Vec<(BlobHash, u8)>, Vec<BlobHash>) {
        let Some(graph) = self.graphs.get(&key).cloned() else {
            return (Vec::new(), Vec::new());
        };
        let held = self.held.get(&key);
        let mut bases = std::collections::HashSet::new();
        let (first, aside): (Vec<BlobHash>, Vec<BlobHash>) =
            addresses.iter().partition(|address| {
                let base = base_of(address);
                bases.insert(base) && held.is_none_or(|held| !held.contains_key(&base))
            });
        match self.inserter.insert_parallel(&graph, &first) {
            Ok(inserted) => (inserted, aside),
            Err(error) => {
                tracing::error!(
                    tenant = %key.0, index = key.1, %error,
                    "a vector graph cannot be built; its index's searches are exact until \
                     the next start"
                );
                self.forget(key);
                (Vec::new(), Vec::new())
            }
        }
    }

    /// Builds anew, beside the one searches use, every graph whose removals since its build
    /// pass `REBUILD_REMOVED_ROWS_MIN` and a quarter of its rows. The build runs on a thread
    /// of its own (`start_rebuild`), so the writer goes on applying batches to the old graph,
    /// which searches walk meanwhile; `finish_rebuilds` brings the new one up to date and
    /// swaps it in, and the old graph's memory goes with its last search.
    fn rebuild_churned(&mut self) {
        let churned: Vec<GraphKey> = self
            .removed
            .iter()
            .filter(|(key, removed)| {
                let rows = self
                    .graphs
                    .get(*key)
                    .map_or(0, |graph| graph.vectors() as u64);
                !self.rebuilding.contains_key(*key)
                    && **removed >= REBUILD_REMOVED_ROWS_MIN
                    && **removed * 4 >= rows
            })
            .map(|(key, _)| *key)
            .collect();
        for key in churned {
            self.start_rebuild(key);
        }
    }

    /// Starts building `key`'s graph anew from the addresses held now, on every CPU, on a
    /// thread of its own. Its churn is counted again from here.
    fn start_rebuild(&mut self, key: GraphKey) {
        let (Some(old), Some(held)) = (self.graphs.get(&key).cloned(), self.held.get(&key)) else {
            return;
        };
        if !old.is_ready() {
            return;
        }
        let removed = self.removed.remove(&key).unwrap_or(0);
        let addresses: Vec<BlobHash> = held.values().map(|(address, _)| *address).collect();
        let fresh = match Graph::new(old.dims, old.metric) {
            Ok(graph) => Arc::new(graph),
            Err(error) => {
                tracing::warn!(tenant = %key.0, index = key.1, %error, "cannot rebuild a vector graph");
                return;
            }
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let inserter = Inserter {
            published: self.published.clone(),
            graph_bytes_max: self.inserter.graph_bytes_max,
            cancel: cancel.clone(),
        };
        let building = fresh.clone();
        let spawned = std::thread::Builder::new()
            .name("ctxstore-vector-rebuild".into())
            .spawn(move || inserter.insert_parallel(&building, &addresses));
        match spawned {
            Ok(thread) => {
                self.published
                    .vector_graphs
                    .rebuilding
                    .fetch_add(1, Ordering::AcqRel);
                self.rebuilding.insert(
                    key,
                    Rebuild {
                        old,
                        fresh,
                        removed,
                        started: std::time::Instant::now(),
                        cancel,
                        thread: Some(thread),
                    },
                );
            }
            Err(error) => {
                tracing::warn!(tenant = %key.0, index = key.1, %error, "cannot start a vector graph's rebuild");
            }
        }
    }

    /// Swaps in every rebuilt graph whose build ended, once it holds what the writer applied
    /// to the old one meanwhile. One whose index went, or that failed, is let go: the old
    /// graph goes on serving.
    fn finish_rebuilds(&mut self) {
        let ended: Vec<GraphKey> = self
            .rebuilding
            .iter()
            .filter(|(_, rebuild)| {
                rebuild
                    .thread
                    .as_ref()
                    .is_none_or(std::thread::JoinHandle::is_finished)
            })
            .map(|(key, _)| *key)
            .collect();
        for key in ended {
            let Some(mut rebuild) = self.take_rebuild(key) else {
                continue;
            };
            let built = rebuild.thread.take().map_or_else(
                || Err("a graph builder was joined twice".into()),
                |thread| {
                    thread
                        .join()
                        .unwrap_or_else(|_| Err("a graph builder panicked".into()))
                },
            );
            let current = self.graphs.get(&key);
            if self.stopping() || !current.is_some_and(|graph| Arc::ptr_eq(graph, &rebuild.old)) {
                continue;
            }
            let caught_up = built.and_then(|inserted| self.catch_up(key, &rebuild.fresh, inserted));
            match caught_up {
                Ok(addresses) => self.swap_in(key, &rebuild, addresses),
                Err(error) => tracing::warn!(
                    tenant = %key.0, index = key.1, %error,
                    "cannot rebuild a vector graph; the churned one goes on serving"
                ),
            }
        }
    }

    /// Brings `fresh`, built from the addresses held at the rebuild's start (`inserted`, with
    /// their rows), to what the writer holds now: an address held since is inserted, the rows
    /// of an address no longer held are removed. Inserts come before removals (but for a base
    /// another address took, whose label must be free first): usearch reuses a removed slot in
    /// place, and the links that led to the old vector would lead to the new one, the very
    /// decay the rebuild is for. Answers the addresses it holds.
    fn catch_up(&self, key: GraphKey, fresh: &Graph, inserted: Inserted) -> Result<usize, String> {
        let empty = Held::new();
        let held = self.held.get(&key).unwrap_or(&empty);
        let built: Held = inserted
            .into_iter()
            .map(|(address, rows)| (base_of(&address), (address, rows)))
            .collect();
        let stale =
            |base: &u64, address: &BlobHash| held.get(base).is_none_or(|(now, _)| now != address);
        // A base held by another address now: its label is freed before the insert.
        let taken: Vec<(u64, u8)> = built
            .iter()
            .filter(|(base, (address, _))| stale(base, address) && held.contains_key(base))
            .map(|(base, (_, rows))| (*base, *rows))
            .collect();
        remove_rows(fresh, &taken);
        for (base, (address, rows)) in held {
            if built.get(base).is_some_and(|(then, _)| then == address) {
                continue;
            }
            let added = self.inserter.insert(fresh, *base, *address)?;
            assert_eq!(added, *rows, "an address has the rows it had");
        }
        let gone: Vec<(u64, u8)> = built
            .iter()
            .filter(|(base, (address, _))| stale(base, address) && !held.contains_key(base))
            .map(|(base, (_, rows))| (*base, *rows))
            .collect();
        remove_rows(fresh, &gone);
        Ok(held.len())
    }

    fn swap_in(&mut self, key: GraphKey, rebuild: &Rebuild, addresses: usize) {
        let (old, fresh) = (&rebuild.old, rebuild.fresh.clone());
        {
            let index = fresh.index.write().unwrap_or_else(|p| p.into_inner());
            fresh
                .memory_bytes
                .store(index.memory_usage() as u64, Ordering::Release);
        }
        fresh.set_aside.store(old.set_aside());
        fresh.loaded.store(old.loaded(), Ordering::Release);
        fresh.rebuilds.store(old.rebuilds() + 1, Ordering::Release);
        fresh.ready.store(true, Ordering::Release);
        self.graphs.insert(key, fresh);
        self.publish();
        // Saved at the next interval, as a changed graph.
        let changes = self.changes.entry(key).or_default();
        *changes = (*changes).max(SNAPSHOT_CHANGES_MIN);
        tracing::info!(
            tenant = %key.0, index = key.1, removed = rebuild.removed, addresses,
            build_ms = rebuild.started.elapsed().as_millis() as u64,
            "vector graph rebuilt after churn"
        );
    }

    /// Stops the rebuild of `key` if one runs (its index went), and waits for its thread:
    /// its builders look at the cancel before each blob.
    fn cancel_rebuild(&mut self, key: GraphKey) {
        if let Some(mut rebuild) = self.take_rebuild(key) {
            rebuild.cancel.store(true, Ordering::Release);
            if let Some(thread) = rebuild.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// `key`'s rebuild, no longer counted as running.
    fn take_rebuild(&mut self, key: GraphKey) -> Option<Rebuild> {
        let rebuild = self.rebuilding.remove(&key)?;
        self.published
            .vector_graphs
            .rebuilding
            .fetch_sub(1, Ordering::AcqRel);
        Some(rebuild)
    }

    /// Every rebuild stopped (the writer is ending).
    fn cancel_rebuilds(&mut self) {
        let keys: Vec<GraphKey> = self.rebuilding.keys().copied().collect();
        for key in keys {
            self.cancel_rebuild(key);
        }
    }

    /// The engine stopping (the writer's own inserter is never cancelled).
    fn stopping(&self) -> bool {
        self.inserter.stopping()
    }

    fn apply(&mut self, change: GraphChange) {
        match change {
            GraphChange::Create {
                tenant_id,
                index_id,
                dims,
                metric,
            } => self.create((tenant_id, index_id), dims, metric, true),
            GraphChange::Drop {
                tenant_id,
                index_id,
            } => self.forget((tenant_id, index_id)),
            GraphChange::Add {
                tenant_id,
                index_id,
                address,
                ..
            } => {
                *self.changes.entry((tenant_id, index_id)).or_default() += 1;
                self.add((tenant_id, index_id), address);
            }
            GraphChange::Remove {
                tenant_id,
                index_id,
                address,
                ..
            } => {
                *self.changes.entry((tenant_id, index_id)).or_default() += 1;
                self.remove((tenant_id, index_id), address);
            }
        }
    }

    fn create(&mut self, key: GraphKey, dims: u16, metric: Metric, ready: bool) {
        match Graph::new(dims, metric) {
            Ok(graph) => {
                graph.ready.store(ready, Ordering::Release);
                self.graphs.insert(key, Arc::new(graph));
                self.held.insert(key, HashMap::new());
                self.set_aside.insert(key, Vec::new());
                self.removed.remove(&key);
            }
            // No graph: the index's searches are exact.
            Err(error) => tracing::error!(
                tenant = %key.0, index = key.1, %error,
                "cannot create a vector graph; the index's searches stay exact"
            ),
        }
        self.publish();
    }

    /// Takes a graph away: its index's searches are exact.
    fn forget(&mut self, key: GraphKey) {
        self.cancel_rebuild(key);
        self.graphs.remove(&key);
        self.held.remove(&key);
        self.set_aside.remove(&key);
        self.changes.remove(&key);
        self.removed.remove(&key);
        snapshot::remove(&self.data_dir, key);
        self.publish();
    }

    fn publish(&self) {
        self.published
            .vector_graphs
            .graphs
            .store(Arc::new(self.graphs.clone()));
    }

    fn add(&mut self, key: GraphKey, address: BlobHash) {
        let Some(graph) = self.graphs.get(&key).cloned() else {
            return; // No graph (taken away after a failure): nothing to keep.
        };
        let base = base_of(&address);
        let holder = self.held.get(&key).and_then(|held| held.get(&base));
        if let Some((holder, _)) = holder {
            assert!(
                *holder != address,
                "an address is added at its first owner only"
            );
            let set_aside = self.set_aside.entry(key).or_default();
            set_aside.push(address);
            graph.set_aside.store(Arc::new(set_aside.clone()));
            return;
        }
        match self.inserter.insert(&graph, base, address) {
            Ok(rows) => {
                self.held
                    .entry(key)
                    .or_default()
                    .insert(base, (address, rows));
            }
            Err(error) => {
                tracing::error!(
                    tenant = %key.0, index = key.1, %error,
                    "a vector graph cannot take a blob's vectors; it is dropped, and the \
                     index's searches are exact until the next start"
                );
                self.forget(key);
            }
        }
    }

    fn remove(&mut self, key: GraphKey, address: BlobHash) {
        let Some(graph) = self.graphs.get(&key).cloned() else {
            return;
        };
        let base = base_of(&address);
        let held = self.held.entry(key).or_default();
        let set_aside = self.set_aside.entry(key).or_default();
        if let Some((holder, rows)) = held.get(&base).copied()
            && holder == address
        {
            held.remove(&base);
            *self.removed.entry(key).or_default() += u64::from(rows);
            remove_rows(&graph, &[(base, rows)]);
            // An address set aside for this base takes its place in the graph.
            if let Some(at) = set_aside.iter().position(|a| base_of(a) == base) {
                let promoted = set_aside.remove(at);
                graph.set_aside.store(Arc::new(set_aside.clone()));
                self.add(key, promoted);
            }
        } else if let Some(at) = set_aside.iter().position(|a| *a == address) {
            set_aside.remove(at);
            graph.set_aside.store(Arc::new(set_aside.clone()));
        }
    }
}

impl Inserter {
    fn stopping(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
            || self
                .published
                .vector_graphs
                .stopping
                .load(Ordering::Acquire)
    }

    /// Inserts `addresses` (one per base, none in the graph) into a graph no search reads
    /// yet, on every CPU; answers each with its rows (fewer when stopping).
    fn insert_parallel(
        &self,
        graph: &Graph,
        addresses: &[BlobHash],
    ) -> Result<Vec<(BlobHash, u8)>, String> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = addresses.len().div_ceil(threads).max(1);
        let results: Vec<Result<Vec<(BlobHash, u8)>, String>> = std::thread::scope(|scope| {
            let workers: Vec<_> = addresses
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        let mut done = Vec::with_capacity(part.len());
                        for address in part {
                            if self.stopping() {
                                break;
                            }
                            let rows = self.insert(graph, base_of(address), *address)?;
                            done.push((*address, rows));
                        }
                        Ok(done)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| {
                    worker
                        .join()
                        .unwrap_or_else(|_| Err("a graph builder panicked".into()))
                })
                .collect()
        });
        let mut inserted = Vec::with_capacity(addresses.len());
        for result in results {
            inserted.extend(result?);
        }
        Ok(inserted)
    }

    fn read(&self, address: BlobHash) -> Result<Vec<Vec<f32>>, String> {
        let published = &self.published;
        let location = published
            .shard_of(&address)
            .find(&address)
            .map_err(|error| error.to_string())?;
        let bytes = crate::chunks::read_payload(&published.shards, &address, location)
            .map_err(|error| error.to_string())?;
        let decoded = crate::format::vectors::decode(&bytes).map_err(|error| error.to_string())?;
        Ok(decoded.rows().map(<[f32]>::to_vec).collect())
    }

    /// Inserts `address`'s rows, growing the graph first when it is full; answers how many.
    fn insert(&self, graph: &Graph, base: u64, address: BlobHash) -> Result<u8, String> {
        let rows = self.read(address)?;
        if !graph.is_ready() {
            // Building: no search reads the graph, and the builders add side by side.
            let index = graph.index.read().unwrap_or_else(|p| p.into_inner());
            // Room for this blob and for what other builders may be adding beside it.
            if index.size() + rows.len() + GROWTH_SLACK <= index.capacity() {
                add_rows(&index, base, &rows)?;
                return Ok(rows.len() as u8);
            }
        }
        // Served: an insert excludes the searches (a slot freed by a removal is reused in place,
        // which a walk beside it could read half-written).
        let index = graph.index.write().unwrap_or_else(|p| p.into_inner());
        if index.size() + rows.len() + GROWTH_SLACK <= index.capacity() {
            add_rows(&index, base, &rows)?;
            return Ok(rows.len() as u8);
        }
        let capacity = (index.capacity() * 2).max(index.size() + rows.len() + GROWTH_SLACK);
        // usearch's memory grows with the capacity: the bound is checked before it grows.
        let bytes_per_vector = index.memory_usage() / index.capacity().max(1);
        if (capacity * bytes_per_vector) as u64 > self.graph_bytes_max {
            return Err(format!(
                "growing it to {capacity} vectors would take about {} bytes, past \
                 vector_graph_bytes_max ({})",
                capacity * bytes_per_vector,
                self.graph_bytes_max
            ));
        }
        index
            .reserve_capacity_and_threads(capacity, GRAPH_THREADS)
            .map_err(|error| error.to_string())?;
        graph
            .memory_bytes
            .store(index.memory_usage() as u64, Ordering::Release);
        add_rows(&index, base, &rows)?;
        Ok(rows.len() as u8)
    }
}

/// Removes the rows of each `(base, rows)` from `graph`, under its exclusive lock (a search
/// must not walk a node being removed).
fn remove_rows(graph: &Graph, bases: &[(u64, u8)]) {
    let index = graph.index.write().unwrap_or_else(|p| p.into_inner());
    for (base, rows) in bases {
        for row in 0..usize::from(*rows) {
            let removed = index.remove(label_of(*base, row));
            assert!(
                removed.is_ok_and(|count| count == 1),
                "a held address's rows are in its graph"
            );
        }
    }
}

fn add_rows(index: &usearch::Index, base: u64, rows: &[Vec<f32>]) -> Result<(), String> {
    for (row, vector) in rows.iter().enumerate() {
        index
            .add(label_of(base, row), vector)
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}
