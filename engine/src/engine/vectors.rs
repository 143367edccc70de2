//! Vector search, the caller's side (decision 0033): a tenant's indexes (created and dropped
//! by the sequencer's records), key-value entries written with their vectors (a vectors blob
//! beside the value, named by the entry's record), and the search: the snapshot's entries of
//! one context under a key prefix, scored exactly (`vector_search.rs`), filtered in rank
//! order. A search reads one published snapshot, as a KV_GET does: it never answers an entry
//! a read would not find, and it finds every acknowledged put.

use std::sync::Arc;

use bytes::Bytes;
use ctxstore_vocab::limits::KV_KEY_BYTES_MAX;
pub use ctxstore_vocab::vectors::Metric;
use ctxstore_vocab::vectors::{
    VECTOR_DIMS_MAX, VECTOR_EF_SEARCH_MAX, VECTOR_K_MAX, VECTORS_PER_ENTRY_MAX, all_finite,
    is_index_name,
};
use oneshot;

use crate::engine::Engine;
use crate::engine::contexts::{check_kv_count, check_kv_key, check_kv_ttl};
use crate::error::EngineError;
use crate::format::context_meta::{KvEntry, KvVectors, VectorIndexRecord};
use crate::format::vectors as vectors_blob;
use crate::ids::{BlobHash, TenantId};
use crate::model::ContextRef;
use crate::pipeline::{SequencerRequest, VectorIndexChange};
use crate::sequencer::contexts::{ContextInfo, Contexts};
pub use crate::sequencer::vector_indexes::VectorIndexInfo;
use crate::store_dir::now_unix_ms;
use crate::vector_search::{CachedVectors, Ranked, Scored, best_score};

/// What a search reads: one published snapshot, its context and its index.
pub(crate) struct Searched<'a> {
    pub snapshot: &'a Contexts,
    pub context_id: crate::ids::ContextId,
    pub info: &'a ContextInfo,
    pub index: &'a VectorIndexInfo,
}

/// A search's filter over an entry's value bytes: asked in rank order.
pub type ValueFilter<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// A key-value entry to put with its vectors (none: stored without any).
#[derive(Clone, Debug)]
pub struct VectorEntry {
    pub key: Vec<u8>,
    pub value: Bytes,
    pub vectors: Vec<Vec<f32>>,
}

/// A search: the `k` entries of one context nearest `vector`, after `offset`.
#[derive(Clone, Debug)]
pub struct VectorSearch {
    pub context: ContextRef,
    pub index: String,
    pub vector: Vec<f32>,
    pub k: u32,
    pub offset: u32,
    /// Only entries whose key starts with it.
    pub prefix: Vec<u8>,
    /// Compare every candidate exactly, never walking the graph (the planner picks otherwise).
    pub exact: bool,
    /// The graph's breadth for this search (0: the index's).
    pub ef_search: u16,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VectorHit {
    pub key: Bytes,
    pub score: f32,
    pub value_hash: BlobHash,
    pub value_len: u32,
}

/// An index's graph (decision 0033 §4), as the engine holds it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorGraphInfo {
    /// Built and kept: searches with many candidates walk it.
    pub ready: bool,
    /// Vectors in it.
    pub vectors: u64,
    pub memory_bytes: u64,
    /// Addresses added by batches the graph's writer has not applied yet (searched exactly).
    pub pending: u64,
    /// Addresses its snapshot brought at the open (0: built from the vectors blobs).
    pub loaded: u64,
    /// Times it was built anew after churn since the open (a quarter of its rows removed).
    pub rebuilds: u64,
}

/// Every index's graph of the store, summed (all tenants): what `/metrics` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorGraphsSummary {
    /// Live vector indexes.
    pub indexes: u64,
    /// Indexes whose graph is not ready (being built at open, dropped after a failure, or
    /// past `vector_graph_bytes_max`): their searches are exact.
    pub not_ready: u64,
    /// Vectors in the graphs.
    pub vectors: u64,
    /// Addresses added by batches the graphs' writer has not applied yet (searched exactly).
    pub pending: u64,
    pub memory_bytes: u64,
    /// Graphs built anew after churn since the open, and those being built now.
    pub rebuilds: u64,
    pub rebuilding: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VectorHits {
    /// Every candidate was compared (no approximation).
    pub exact: bool,
    /// Vectors compared.
    pub candidates: u64,
    pub hits: Vec<VectorHit>,
}

impl Engine {
    /// Creates the index `name` of this handle's tenant, or answers the one it has when its
    /// dimension and metric are these (an `ef_search` of 0 matches any, and gives a new index
    /// the default, 128).
    pub async fn vector_index_create(
        &self,
        name: &str,
        dims: u16,
        metric: Metric,
        ef_search: u16,
    ) -> Result<VectorIndexInfo, EngineError> {
        check_index_name(name)?;
        if dims == 0 || usize::from(dims) > VECTOR_DIMS_MAX {
            return Err(EngineError::InvalidArgument(format!(
                "a vector index has 1 to {VECTOR_DIMS_MAX} dimensions, not {dims}"
            )));
        }
        check_ef_search(ef_search)?;
        let wanted = VectorIndexRecord {
            tenant_id: self.scope().tenant_id(),
            index_id: 0,
            dims,
            metric,
            ef_search,
            name: name.to_owned(),
        };
        self.change_vector_index(VectorIndexChange::Create(wanted))
            .await
    }

    /// Drops the index `name` of this handle's tenant: its vectors answer no search from
    /// here on. Answers it as it was.
    pub async fn vector_index_drop(&self, name: &str) -> Result<VectorIndexInfo, EngineError> {
        check_index_name(name)?;
        let change = VectorIndexChange::Drop {
            tenant_id: self.scope().tenant_id(),
            name: name.to_owned(),
        };
        self.change_vector_index(change).await
    }

    /// This handle's tenant's indexes, in name order.
    pub fn vector_indexes(&self) -> Vec<VectorIndexInfo> {
        let snapshot = self.inner.published.contexts.load();
        snapshot.vector_indexes.of_tenant(self.scope().tenant_id())
    }

    /// The graph of this handle's tenant's index `name` (`None`: no such index, or no graph:
    /// its searches are exact).
    pub fn vector_graph_info(&self, name: &str) -> Option<VectorGraphInfo> {
        let snapshot = self.inner.published.contexts.load();
        let tenant_id = self.scope().tenant_id();
        let index = snapshot.vector_indexes.by_name(tenant_id, name)?;
        let graphs = &self.inner.published.vector_graphs;
        let applied_seq = graphs.applied_seq();
        let graph = graphs.get(tenant_id, index.index_id)?;
        let pending = snapshot
            .vector_indexes
            .owners
            .unapplied(tenant_id, index.index_id, applied_seq)
            .count();
        Some(VectorGraphInfo {
            ready: graph.is_ready(),
            vectors: graph.vectors() as u64,
            memory_bytes: graph.memory_bytes(),
            pending: pending as u64,
            loaded: graph.loaded(),
            rebuilds: graph.rebuilds(),
        })
    }

    /// Every tenant's indexes' graphs, summed (the operator's figures, whatever this
    /// handle's scope).
    pub fn vector_graphs_summary(&self) -> VectorGraphsSummary {
        let snapshot = self.inner.published.contexts.load();
        let graphs = &self.inner.published.vector_graphs;
        let applied_seq = graphs.applied_seq();
        let mut summary = VectorGraphsSummary {
            rebuilding: graphs.rebuilding(),
            ..VectorGraphsSummary::default()
        };
        for index in snapshot.vector_indexes.all() {
            summary.indexes += 1;
            let graph = graphs
                .get(index.tenant_id, index.index_id)
                .filter(|graph| graph.is_ready());
            let Some(graph) = graph else {
                summary.not_ready += 1;
                continue;
            };
            summary.vectors += graph.vectors() as u64;
            summary.memory_bytes += graph.memory_bytes();
            summary.rebuilds += graph.rebuilds();
            summary.pending += snapshot
                .vector_indexes
                .owners
                .unapplied(index.tenant_id, index.index_id, applied_seq)
                .count() as u64;
        }
        summary
    }

    async fn change_vector_index(
        &self,
        change: VectorIndexChange,
    ) -> Result<VectorIndexInfo, EngineError> {
        self.check_open()?;
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::VectorIndex { change, reply };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }

    /// Puts key-value entries with their vectors, all of `index`, in one durable record (as
    /// `kv_put_ttl`): each entry's vectors are one blob beside its value; an entry with none
    /// is stored without any (an overwrite drops the old ones).
    pub async fn kv_put_vectors(
        &self,
        context: &ContextRef,
        index: &str,
        entries: Vec<VectorEntry>,
        if_absent: bool,
        ttl_ms: u64,
    ) -> Result<(), EngineError> {
        let context_id = self.resolve(context)?;
        check_kv_count(entries.len())?;
        check_kv_ttl(ttl_ms)?;
        let tenant_id = self.tenant_of(context_id)?;
        let info = self.index_named(tenant_id, index)?;
        let mut stored = Vec::with_capacity(entries.len());
        let mut blobs = Vec::with_capacity(entries.len() * 2);
        for (at, entry) in entries.into_iter().enumerate() {
            check_kv_key(&entry.key)?;
            check_vectors_of(&info, "entry", at, &entry.vectors, VECTORS_PER_ENTRY_MAX)?;
            let value_hash = BlobHash::of(&entry.value);
            let vectors = (!entry.vectors.is_empty()).then(|| {
                let blob =
                    Bytes::from(vectors_blob::encode(usize::from(info.dims), &entry.vectors));
                let hash = BlobHash::of(&blob);
                let vectors = KvVectors {
                    hash: self.address(hash),
                    len: blob.len() as u32,
                    index_id: info.index_id,
                    count: entry.vectors.len() as u8,
                };
                blobs.push((hash, blob));
                vectors
            });
            stored.push(KvEntry {
                key: entry.key,
                value_hash: self.address(value_hash),
                value_len: entry.value.len() as u32,
                ttl_ms,
                expires_at_unix_ms: 0,
                vectors,
            });
            blobs.push((value_hash, entry.value));
        }
        self.put_kv_entries(context_id, stored, blobs, if_absent)
            .await
    }

    /// The `k` entries of the search's context nearest its vector, best first, after
    /// `offset`, among those whose key starts with its prefix and whose value `passes` (the
    /// caller's filter). Exactly `k` whenever `k + offset` pass. The plan (decision 0033 §3):
    /// few candidates (at most `vector_exact_max` under the prefix), an exact search asked
    /// for, or an index whose graph is not ready: every candidate compared exactly, the filter
    /// asked in rank order; otherwise the graph's filtered walk (`vector_walk.rs`), which falls
    /// back to the exact comparison when it cannot find `k + offset`.
    pub fn vector_search(
        &self,
        search: &VectorSearch,
        passes: Option<ValueFilter<'_>>,
    ) -> Result<VectorHits, EngineError> {
        check_search(search)?;
        let snapshot = self.inner.published.contexts.load();
        let context_id = self.resolve(&search.context)?;
        let info = snapshot.get(context_id).cloned().unwrap_or_default();
        let index = queried_index(&snapshot, info.tenant_id, &search.index, &search.vector)?;
        let mut passes = passes;
        let searched = Searched {
            snapshot: &snapshot,
            context_id,
            info: &info,
            index: &index,
        };
        if !search.exact
            && let Some(graph) = self.graph_for(&searched, search, passes.is_some())
            && let Some(hits) = self.walk(&searched, &graph, search, &mut passes)?
        {
            return Ok(hits);
        }
        self.exact_search(&searched, search, passes)
    }

    /// Every candidate compared exactly, then taken in rank order through the filter.
    fn exact_search(
        &self,
        searched: &Searched<'_>,
        search: &VectorSearch,
        passes: Option<ValueFilter<'_>>,
    ) -> Result<VectorHits, EngineError> {
        let (candidates, scored) = self.score_candidates(searched, search)?;
        let wanted = (search.k + search.offset) as usize;
        let mut passed = Vec::with_capacity(wanted.min(scored.len()));
        let mut passes = passes;
        for candidate in Ranked::new(scored, wanted) {
            if passed.len() == wanted {
                break;
            }
            if let Some(passes) = passes.as_mut()
                && !self.value_passes(candidate.value_address, passes)
            {
                continue;
            }
            passed.push(candidate);
        }
        Ok(self.hits(search, true, candidates, passed))
    }

    /// The answer: the ranked candidates after `offset`.
    pub(crate) fn hits(
        &self,
        search: &VectorSearch,
        exact: bool,
        candidates: u64,
        ranked: Vec<Scored>,
    ) -> VectorHits {
        let hits = ranked
            .into_iter()
            .skip(search.offset as usize)
            .map(|candidate| VectorHit {
                key: candidate.key,
                score: candidate.score,
                value_hash: self.hash_of(candidate.value_address),
                value_len: candidate.value_len,
            })
            .collect();
        VectorHits {
            exact,
            candidates,
            hits,
        }
    }

    /// Whether the value at `address` passes the caller's filter (a value gone meanwhile,
    /// purged, passes none).
    pub(crate) fn value_passes(&self, address: BlobHash, passes: ValueFilter<'_>) -> bool {
        self.read_address(address).is_ok_and(|value| passes(&value))
    }

    /// Every live entry of the search's context under its prefix with vectors of its index,
    /// scored (not yet ranked: `Ranked` sorts as far as the search takes them); and how many
    /// vectors were compared.
    fn score_candidates(
        &self,
        searched: &Searched<'_>,
        search: &VectorSearch,
    ) -> Result<(u64, Vec<Scored>), EngineError> {
        let index = searched.index;
        let now = now_unix_ms();
        let query_norm = ctxstore_vocab::vectors::norm(&search.vector);
        let scan_max = self.inner.config.limits.vector_scan_max;
        let mut candidates = 0u64;
        let mut scored = Vec::new();
        let entries = searched
            .info
            .kv
            .range(Bytes::copy_from_slice(&search.prefix)..)
            .take_while(|(key, _)| key.starts_with(&search.prefix))
            .filter(|(_, value)| value.live_at(now));
        for (key, value) in entries {
            let Some(vectors) = value.vectors.filter(|v| v.index_id == index.index_id) else {
                continue;
            };
            candidates += u64::from(vectors.count);
            if candidates > scan_max {
                return Err(EngineError::Limit {
                    what: "vectors one search compares exactly (vector_scan_max; narrow the \
                           prefix)",
                    limit: scan_max as usize,
                });
            }
            let decoded = self.vectors_at(vectors.hash)?;
            scored.push(Scored {
                score: best_score(index.metric, &search.vector, query_norm, &decoded),
                key: key.clone(),
                value_address: value.hash,
                value_len: value.len,
            });
        }
        Ok((candidates, scored))
    }

    pub(crate) fn tenant_of(
        &self,
        context_id: crate::ids::ContextId,
    ) -> Result<TenantId, EngineError> {
        let snapshot = self.inner.published.contexts.load();
        snapshot
            .get(context_id)
            .map(|info| info.tenant_id)
            .ok_or(EngineError::ContextNotFound(context_id))
    }

    pub(crate) fn index_named(
        &self,
        tenant_id: TenantId,
        name: &str,
    ) -> Result<VectorIndexInfo, EngineError> {
        check_index_name(name)?;
        let snapshot = self.inner.published.contexts.load();
        snapshot
            .vector_indexes
            .by_name(tenant_id, name)
            .cloned()
            .ok_or_else(|| EngineError::VectorIndexNotFound(format!("vector index {name:?}")))
    }

    /// A vectors blob decoded, from the cache or read (and then cached).
    pub(crate) fn vectors_at(&self, address: BlobHash) -> Result<Arc<CachedVectors>, EngineError> {
        if let Some(vectors) = self.inner.vector_cache.get(&address) {
            return Ok(vectors);
        }
        let bytes = self.read_address(address)?;
        let decoded = vectors_blob::decode(&bytes).map_err(|error| {
            EngineError::InvalidArgument(format!(
                "the vectors blob {} does not decode: {error}; run `ctxstore-server verify`",
                self.hash_of(address)
            ))
        })?;
        let decoded = Arc::new(CachedVectors::new(decoded));
        self.inner.vector_cache.insert(address, decoded.clone());
        Ok(decoded)
    }

    /// A blob's bytes by address (checked against it as every read is).
    fn read_address(&self, address: BlobHash) -> Result<Bytes, EngineError> {
        let published = &self.inner.published;
        let location = published.shard_of(&address).find(&address);
        let location = location.map_err(|error| self.shown_error(error))?;
        crate::chunks::read_payload(&published.shards, &address, location)
    }
}

/// The index a search names, of its tenant, and of the query's dimension.
pub(crate) fn queried_index(
    snapshot: &Contexts,
    tenant_id: TenantId,
    name: &str,
    query: &[f32],
) -> Result<VectorIndexInfo, EngineError> {
    let index = snapshot
        .vector_indexes
        .by_name(tenant_id, name)
        .cloned()
        .ok_or_else(|| EngineError::VectorIndexNotFound(format!("vector index {name:?}")))?;
    if query.len() != usize::from(index.dims) {
        return Err(EngineError::InvalidArgument(format!(
            "the query has {} dimensions; vector index {name:?} has {}",
            query.len(),
            index.dims
        )));
    }
    Ok(index)
}

fn check_index_name(name: &str) -> Result<(), EngineError> {
    if is_index_name(name) {
        Ok(())
    } else {
        Err(EngineError::InvalidArgument(format!(
            "a vector index name is 1 to 64 bytes, not {} ({name:?})",
            name.len()
        )))
    }
}

fn check_ef_search(ef_search: u16) -> Result<(), EngineError> {
    if ef_search > VECTOR_EF_SEARCH_MAX {
        return Err(EngineError::InvalidArgument(format!(
            "ef_search is 0 (the default) to {VECTOR_EF_SEARCH_MAX}, not {ef_search}"
        )));
    }
    Ok(())
}

/// An entry's or a turn's vectors (`what`, number `at` of the request): at most `count_max`,
/// each of the index's dimension, every component finite.
pub(crate) fn check_vectors_of(
    index: &VectorIndexInfo,
    what: &str,
    at: usize,
    vectors: &[Vec<f32>],
    count_max: usize,
) -> Result<(), EngineError> {
    if vectors.len() > count_max {
        return Err(EngineError::Limit {
            what: if count_max == VECTORS_PER_ENTRY_MAX {
                "vectors per key-value entry"
            } else {
                "vectors per turn"
            },
            limit: count_max,
        });
    }
    for (number, vector) in vectors.iter().enumerate() {
        if vector.len() != usize::from(index.dims) {
            return Err(EngineError::InvalidArgument(format!(
                "{what} {at}'s vector {number} has {} dimensions; vector index {:?} has {}",
                vector.len(),
                index.name,
                index.dims
            )));
        }
        if !all_finite(vector) {
            return Err(EngineError::InvalidArgument(format!(
                "{what} {at}'s vector {number} has a NaN or infinite component"
            )));
        }
    }
    Ok(())
}

/// What every search names: an index, `k` ≥ 1 with `k + offset` within the limit, a breadth.
pub(crate) fn check_search_fields(
    index: &str,
    k: u32,
    offset: u32,
    ef_search: u16,
) -> Result<(), EngineError> {
    check_index_name(index)?;
    if k == 0 {
        return Err(EngineError::InvalidArgument(
            "a search asks for k ≥ 1 hits".into(),
        ));
    }
    if (k + offset) as usize > VECTOR_K_MAX {
        return Err(EngineError::Limit {
            what: "k + offset of a vector search",
            limit: VECTOR_K_MAX,
        });
    }
    check_ef_search(ef_search)
}

fn check_search(search: &VectorSearch) -> Result<(), EngineError> {
    check_search_fields(&search.index, search.k, search.offset, search.ef_search)?;
    if search.prefix.len() > KV_KEY_BYTES_MAX {
        return Err(EngineError::Limit {
            what: "bytes of a vector search's key prefix",
            limit: KV_KEY_BYTES_MAX,
        });
    }
    if !all_finite(&search.vector) {
        return Err(EngineError::InvalidArgument(
            "the query vector has a NaN or infinite component".into(),
        ));
    }
    Ok(())
}
