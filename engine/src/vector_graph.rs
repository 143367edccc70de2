//! The graph index of each vector index (decision 0033 §4): an HNSW graph (usearch) over the
//! vectors of its live entries, for the searches whose candidates are too many to compare
//! exactly. Derived state: nothing of it is on disk; it is built from the owners of the
//! recovered snapshot when the store opens, then kept by the batches the sequencer publishes.
//!
//! **One writer.** The graph writer thread (`GraphWriter`) is the only one to add to a graph or
//! remove from it. The sequencer hands it each published batch's changes (`GraphChange`: an
//! address's first entry in an index adds its rows, its last entry removes them), numbered;
//! after applying batch `seq` the writer publishes `applied_seq`. Searches run on the network
//! cores beside it. The one lock here is each graph's `RwLock`: searches share it; the writer
//! takes it exclusively for each insert and removal of a served graph (one blob's rows at a
//! time: a removal frees a slot that the next insert rewrites in place, which a walk must not
//! read half-written: with inserts and removals beside walks the graph tests crashed once in
//! eleven runs, and not in the runs since they exclude them), and
//! shares it only while it builds a graph no search reads yet, with as many inserters as CPUs.
//!
//! **The graph is never the truth.** A search maps each label the walk meets to the entries of
//! its snapshot that hold it (`VectorOwners`), keeps only those the search's filters pass, and
//! scores them exactly from their blobs. What the graph lacks, the search scans exactly: the
//! additions of batches after `applied_seq` (the snapshot's recent additions) and addresses set
//! aside (a base another address holds). A graph that is not `ready` (being built at open, or
//! past `vector_graph_bytes_max`, or after a failed read) is not used at all: searches are exact.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use ctxstore_vocab::vectors::Metric;

use crate::ids::{BlobHash, TenantId};
use crate::sequencer::vector_owners::GraphChange;

pub(crate) mod snapshot;
pub(crate) mod writer;

/// Searches and inserts one graph serves at once: usearch keeps a context per thread.
const GRAPH_THREADS: usize = 256;
/// Vectors a new graph has room for before it first grows.
const GRAPH_CAPACITY_MIN: usize = 1024;
/// The graph's out-degree (usearch's connectivity, HNSW's M).
const GRAPH_CONNECTIVITY: usize = 16;
/// The breadth of an insert's search (HNSW's ef_construction).
const GRAPH_EXPANSION_ADD: usize = 128;

type GraphKey = (TenantId, u32);

/// One index's graph, as searches see it.
pub(crate) struct Graph {
    pub dims: u16,
    pub metric: Metric,
    index: RwLock<usearch::Index>,
    /// Whether the graph holds every address the owners held through `applied_seq`.
    ready: AtomicBool,
    /// Addresses out of the graph because another address holds their base: searched exactly.
    set_aside: ArcSwap<Vec<BlobHash>>,
    /// Addresses its snapshot brought at the open (0: built from the blobs).
    loaded: AtomicU64,
    /// usearch's memory as of the last growth: its own count walks every node, which is
    /// not safe beside inserts, so it is asked only under the exclusive lock.
    memory_bytes: AtomicU64,
    /// Times the graph was built anew after churn since the open (`writer.rs`).
    rebuilds: AtomicU64,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("metric", &self.metric)
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl Graph {
    fn new(dims: u16, metric: Metric) -> Result<Graph, String> {
        let options = usearch::IndexOptions {
            dimensions: usize::from(dims),
            metric: match metric {
                Metric::Cosine => usearch::MetricKind::Cos,
                Metric::InnerProduct => usearch::MetricKind::IP,
                Metric::L2 => usearch::MetricKind::L2sq,
            },
            quantization: usearch::ScalarKind::F32,
            connectivity: GRAPH_CONNECTIVITY,
            expansion_add: GRAPH_EXPANSION_ADD,
            // A search asks for its breadth as its count (`search`), which usearch widens to.
            expansion_search: 1,
            multi: false,
        };
        let index = usearch::Index::new(&options).map_err(|error| error.to_string())?;
        index
            .reserve_capacity_and_threads(GRAPH_CAPACITY_MIN, GRAPH_THREADS)
            .map_err(|error| error.to_string())?;
        Ok(Graph {
            dims,
            metric,
            index: RwLock::new(index),
            ready: AtomicBool::new(false),
            set_aside: ArcSwap::from_pointee(Vec::new()),
            loaded: AtomicU64::new(0),
            memory_bytes: AtomicU64::new(0),
            rebuilds: AtomicU64::new(0),
        })
    }

    /// Times the graph was built anew after churn since the open.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Acquire)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Addresses its snapshot brought at the open (0: built from the blobs).
    pub fn loaded(&self) -> u64 {
        self.loaded.load(Ordering::Acquire)
    }

    /// The addresses a search scans exactly beside the graph.
    pub fn set_aside(&self) -> Arc<Vec<BlobHash>> {
        self.set_aside.load_full()
    }

    /// The labels of up to `breadth` vectors near `query` that `passes`, nearest first (the
    /// walk goes on through those it turns down).
    pub fn search(
        &self,
        query: &[f32],
        breadth: usize,
        passes: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<u64>, String> {
        let index = self
            .index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let matches = index
            .filtered_search(query, breadth, passes)
            .map_err(|error| error.to_string())?;
        Ok(matches.keys)
    }

    /// Vectors in the graph (removed ones excluded).
    pub fn vectors(&self) -> usize {
        self.index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .size()
    }

    /// Memory of the graph as of its last growth.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes.load(Ordering::Acquire)
    }
}

/// What the sequencer hands the writer.
enum Feed {
    /// A published batch's changes.
    Batch(u64, Vec<GraphChange>),
    Stop,
}

/// Every index's graph, published by the writer; the feed to it.
pub(crate) struct VectorGraphs {
    graphs: ArcSwap<imbl::HashMap<GraphKey, Arc<Graph>>>,
    /// The last batch whose changes every graph holds.
    applied_seq: AtomicU64,
    feed: flume::Sender<Feed>,
    inbox: Mutex<Option<flume::Receiver<Feed>>>,
    stopping: AtomicBool,
    /// Graphs being built anew after churn now (the writer's count, for the figures).
    rebuilding: AtomicU64,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for VectorGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorGraphs")
            .field("graphs", &self.graphs.load().len())
            .field("applied_seq", &self.applied_seq())
            .finish_non_exhaustive()
    }
}

impl Default for VectorGraphs {
    fn default() -> VectorGraphs {
        // Unbounded: the sequencer never waits on the writer. A batch's changes are a few
        // words per address, and a writer that falls behind leaves searches more to scan
        // exactly, never a wrong answer.
        let (feed, inbox) = flume::unbounded();
        VectorGraphs {
            graphs: ArcSwap::from_pointee(imbl::HashMap::new()),
            applied_seq: AtomicU64::new(0),
            feed,
            inbox: Mutex::new(Some(inbox)),
            stopping: AtomicBool::new(false),
            rebuilding: AtomicU64::new(0),
            writer: Mutex::new(None),
        }
    }
}

impl VectorGraphs {
    pub fn get(&self, tenant_id: TenantId, index_id: u32) -> Option<Arc<Graph>> {
        self.graphs.load().get(&(tenant_id, index_id)).cloned()
    }

    pub fn applied_seq(&self) -> u64 {
        self.applied_seq.load(Ordering::Acquire)
    }

    /// Graphs being built anew after churn now.
    pub fn rebuilding(&self) -> u64 {
        self.rebuilding.load(Ordering::Acquire)
    }

    /// The sequencer, once batch `seq` is published.
    pub fn feed(&self, seq: u64, changes: Vec<GraphChange>) {
        // A writer gone (stopped) needs no more changes.
        let _ = self.feed.send(Feed::Batch(seq, changes));
    }

    /// Stops the writer (at the engine's shutdown, after the sequencer stopped feeding it).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.feed.send(Feed::Stop);
        let handle = self.writer.lock().ok().and_then(|mut writer| writer.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}
