//! Vectors on turns (decision 0033 §1–§3): an append's vectors, stored as one blob before the
//! turn that names it (as a key-value entry's), and the search over the turns of one or
//! several contexts ("the turns of this thread, or of every thread tagged `user=42`, closest
//! to this question").
//!
//! The turns searched are what reads of the contexts return: each context's chain from its
//! head down to its floor (a fork's inherited turns included, a pruned or collected turn not),
//! each turn once however many chains share it, of the searched index, not redacted, with the
//! type tag and labels asked for. Few candidates (at most `vector_exact_max` vectors) are
//! compared exactly; more walk the index's graph with a predicate that keeps only those turns,
//! widening as an entry search does and falling back to the exact comparison: the answer
//! holds exactly `k` whenever `k + offset` turns pass.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use ctxstore_vocab::vectors::{VECTOR_EF_SEARCH_MAX, VECTORS_PER_TURN_MAX, norm};

use crate::engine::Engine;
use crate::engine::contexts::ListQuery;
use crate::engine::vectors::{
    VectorIndexInfo, check_search_fields, check_vectors_of, queried_index,
};
use crate::error::EngineError;
use crate::format::context_meta::KvVectors;
use crate::format::turn_log::TurnRecord;
use crate::format::vectors as vectors_blob;
use crate::ids::{BlobHash, ContextId, TurnId, TypeTag};
use crate::model::{AppendRequest, ContextRef, Turn, TurnVectors};
use crate::sequencer::contexts::Contexts;
use crate::sequencer::vector_owners::base_of_label;
use crate::vector_graph::Graph;
use crate::vector_search::{Ranked, Scored, best_score};

/// Contexts one turn search reads the chains of (a name prefix or tags matching more are
/// refused: narrow them).
pub const TURN_SEARCH_CONTEXTS_MAX: usize = 10_000;

/// A search over turns: the `k` turns nearest `vector`, after `offset`, among the turns of
/// the contexts it names.
#[derive(Clone, Debug, Default)]
pub struct TurnVectorSearch {
    pub index: String,
    pub vector: Vec<f32>,
    pub k: u32,
    pub offset: u32,
    /// One context (with `name_prefix` and `tags` empty: that context's turns).
    pub context: Option<ContextRef>,
    /// Contexts whose name starts with it.
    pub name_prefix: Option<String>,
    /// Contexts carrying every one of these tags. No context, prefix nor tag: every context
    /// of the caller's tenant.
    pub tags: Vec<(String, String)>,
    /// Turns carrying every one of these labels.
    pub labels: Vec<(String, String)>,
    /// Turns of this type only.
    pub type_tag: Option<TypeTag>,
    /// Compare every candidate exactly, never walking the graph.
    pub exact: bool,
    /// The graph's breadth for this search (0: the index's).
    pub ef_search: u16,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TurnHit {
    pub turn: Turn,
    pub score: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TurnHits {
    /// Every candidate was compared (no approximation).
    pub exact: bool,
    /// Vectors compared.
    pub candidates: u64,
    pub hits: Vec<TurnHit>,
}

/// A turn that passes the search's filters, with its vectors blob.
struct Candidate {
    record: TurnRecord,
    address: BlobHash,
    count: u8,
}

impl Engine {
    /// Stores the vectors the requests give (`TurnVectors::Given`) as blobs, durable before
    /// the append that names them, and answers the requests with `TurnVectors::Stored`. A
    /// caller's `Stored` is refused: only the engine names a blob as a turn's vectors.
    pub(crate) async fn store_turn_vectors(
        &self,
        context_id: ContextId,
        mut requests: Vec<AppendRequest>,
    ) -> Result<Vec<AppendRequest>, EngineError> {
        if requests
            .iter()
            .all(|request| request.options.vectors.is_none())
        {
            return Ok(requests);
        }
        let tenant_id = self.tenant_of(context_id)?;
        let mut blobs = Vec::new();
        for (at, request) in requests.iter_mut().enumerate() {
            let stored = match request.options.vectors.take() {
                None => continue,
                Some(TurnVectors::Stored(_)) => {
                    return Err(EngineError::InvalidArgument(
                        "a turn's vectors are given as vectors, not as a stored blob".into(),
                    ));
                }
                Some(TurnVectors::Given { index, vectors }) => {
                    let info = self.index_named(tenant_id, &index)?;
                    check_vectors_of(&info, "turn", at, &vectors, VECTORS_PER_TURN_MAX)?;
                    if vectors.is_empty() {
                        continue;
                    }
                    let blob = Bytes::from(vectors_blob::encode(usize::from(info.dims), &vectors));
                    let hash = BlobHash::of(&blob);
                    let stored = KvVectors {
                        hash: self.address(hash),
                        len: blob.len() as u32,
                        index_id: info.index_id,
                        count: vectors.len() as u8,
                    };
                    blobs.push((hash, blob));
                    stored
                }
            };
            request.options.vectors = Some(TurnVectors::Stored(stored));
        }
        self.store_blobs(blobs).await?;
        Ok(requests)
    }

    /// The `k` turns of the search's contexts nearest its vector, best first, after `offset`
    /// (module comment). Exactly `k` whenever `k + offset` turns pass its filters.
    pub fn vector_search_turns(&self, search: &TurnVectorSearch) -> Result<TurnHits, EngineError> {
        check_search_fields(&search.index, search.k, search.offset, search.ef_search)?;
        check_turn_filters(search)?;
        let snapshot = self.inner.published.contexts.load();
        let tenant_id = self.scope().tenant_id();
        let index = queried_index(&snapshot, tenant_id, &search.index, &search.vector)?;
        let contexts = self.searched_contexts(search)?;
        let candidates = self.turn_candidates(&snapshot, &index, search, &contexts)?;
        let vectors: u64 = candidates.iter().map(|c| u64::from(c.count)).sum();
        if !search.exact
            && vectors > self.inner.config.limits.vector_exact_max
            && let Some(graph) = self
                .inner
                .published
                .vector_graphs
                .get(index.tenant_id, index.index_id)
                .filter(|graph| graph.is_ready())
            && let Some(hits) = self.walk_turns(&snapshot, &index, &graph, search, &candidates)?
        {
            return Ok(hits);
        }
        let scored = self.score_turns(&index, search, candidates.iter())?;
        Ok(self.turn_hits(&snapshot, search, true, vectors, scored, &candidates))
    }

    /// The contexts the search names, each visible to the caller and live.
    fn searched_contexts(&self, search: &TurnVectorSearch) -> Result<Vec<ContextId>, EngineError> {
        let listed = search.name_prefix.is_some() || !search.tags.is_empty();
        let one = match &search.context {
            Some(context) => Some(self.resolve(context)?),
            None => None,
        };
        if let Some(context_id) = one
            && !listed
        {
            return Ok(vec![context_id]);
        }
        let mut query = ListQuery {
            tags: search.tags.clone(),
            name_prefix: search.name_prefix.clone(),
            limit: crate::engine::contexts::LIST_PAGE_MAX,
            ..ListQuery::default()
        };
        let mut found = Vec::new();
        loop {
            let page = self.list_contexts(&query)?;
            found.extend(
                page.contexts
                    .iter()
                    .map(|view| view.head.context_id)
                    .filter(|context_id| one.is_none_or(|one| one == *context_id)),
            );
            if found.len() > TURN_SEARCH_CONTEXTS_MAX {
                return Err(EngineError::Limit {
                    what: "contexts one turn search reads (narrow the name prefix or tags)",
                    limit: TURN_SEARCH_CONTEXTS_MAX,
                });
            }
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok(found),
            }
        }
    }

    /// The turns of the contexts' chains with vectors of the index that pass the search's
    /// filters, each once. A turn walked already with a floor as low stops a later chain's
    /// walk: what lies below it was walked too.
    fn turn_candidates(
        &self,
        snapshot: &Contexts,
        index: &VectorIndexInfo,
        search: &TurnVectorSearch,
        contexts: &[ContextId],
    ) -> Result<Vec<Candidate>, EngineError> {
        let reader = self.reader();
        let walked_max = self.inner.config.limits.vector_scan_max;
        let mut walked: HashMap<TurnId, u32> = HashMap::new();
        let mut candidates = Vec::new();
        let mut failure = None;
        for &context_id in contexts {
            let floor = snapshot.get(context_id).map_or(0, |info| info.floor_depth);
            reader.chain(context_id, |turn| {
                if walked.get(&turn.turn_id).is_some_and(|seen| *seen <= floor) {
                    return false;
                }
                let first = walked.insert(turn.turn_id, floor).is_none();
                if walked.len() as u64 > walked_max {
                    failure = Some(EngineError::Limit {
                        what: "turns one vector search walks (vector_scan_max; narrow the \
                               contexts)",
                        limit: walked_max as usize,
                    });
                    return false;
                }
                if first {
                    match self.turn_passes(snapshot, index, search, turn) {
                        Ok(Some(candidate)) => candidates.push(candidate),
                        Ok(None) => {}
                        Err(error) => {
                            failure = Some(error);
                            return false;
                        }
                    }
                }
                true
            })?;
            if let Some(error) = failure.take() {
                return Err(error);
            }
        }
        Ok(candidates)
    }

    /// A turn as a candidate: vectors of the index, not redacted, its type and labels as
    /// asked.
    fn turn_passes(
        &self,
        snapshot: &Contexts,
        index: &VectorIndexInfo,
        search: &TurnVectorSearch,
        turn: &TurnRecord,
    ) -> Result<Option<Candidate>, EngineError> {
        let Some(held) = snapshot.vector_indexes.of_turn(turn.turn_id) else {
            return Ok(None);
        };
        let vectors = held.vectors;
        if held.tenant_id != index.tenant_id
            || vectors.index_id != index.index_id
            || snapshot.overlays.is_redacted(turn.turn_id)
            || search.type_tag.is_some_and(|tag| tag != turn.type_tag)
        {
            return Ok(None);
        }
        if !search.labels.is_empty() {
            let extras = self.inner.published.turns.extras(turn)?;
            if !search
                .labels
                .iter()
                .all(|label| extras.labels.contains(label))
            {
                return Ok(None);
            }
        }
        Ok(Some(Candidate {
            record: *turn,
            address: vectors.hash,
            count: vectors.count,
        }))
    }

    /// The candidates scored exactly from their blobs (a turn's key: its TurnID, big-endian,
    /// so equal scores rank in TurnID order).
    fn score_turns<'c>(
        &self,
        index: &VectorIndexInfo,
        search: &TurnVectorSearch,
        candidates: impl Iterator<Item = &'c Candidate>,
    ) -> Result<Vec<Scored>, EngineError> {
        let query_norm = norm(&search.vector);
        let mut scored = Vec::new();
        for candidate in candidates {
            let decoded = self.vectors_at(candidate.address)?;
            scored.push(Scored {
                score: best_score(index.metric, &search.vector, query_norm, &decoded),
                key: Bytes::copy_from_slice(&candidate.record.turn_id.0.to_be_bytes()),
                value_address: candidate.record.payload_hash,
                value_len: candidate.record.payload_len,
            });
        }
        Ok(scored)
    }

    /// The graph's filtered walk over the candidates' labels; `None` when the search must be
    /// exact (fewer than `k + offset` found at the widest, or the graph failed).
    fn walk_turns(
        &self,
        snapshot: &Contexts,
        index: &VectorIndexInfo,
        graph: &Graph,
        search: &TurnVectorSearch,
        candidates: &[Candidate],
    ) -> Result<Option<TurnHits>, EngineError> {
        // The graph's labels lead to bases; a base to the candidates whose blob it is.
        let mut by_base: HashMap<u64, Vec<usize>> = HashMap::new();
        for (at, candidate) in candidates.iter().enumerate() {
            let base = crate::sequencer::vector_owners::base_of(&candidate.address);
            by_base.entry(base).or_default().push(at);
        }
        let predicate = |label: u64| by_base.contains_key(&base_of_label(label));
        // Beside the graph: the additions its writer may not hold yet, and the set-aside.
        let applied_seq = self.inner.published.vector_graphs.applied_seq();
        let mut beside: HashSet<u64> = snapshot
            .vector_indexes
            .owners
            .unapplied(index.tenant_id, index.index_id, applied_seq)
            .collect();
        beside.extend(
            graph
                .set_aside()
                .iter()
                .map(crate::sequencer::vector_owners::base_of),
        );
        let wanted = (search.k + search.offset) as usize;
        let ef_search = if search.ef_search > 0 {
            search.ef_search
        } else {
            index.ef_search
        };
        let mut breadth = usize::from(ef_search).max(2 * wanted);
        loop {
            breadth = breadth.min(usize::from(VECTOR_EF_SEARCH_MAX));
            let Ok(labels) = graph.search(&search.vector, breadth, &predicate) else {
                return Ok(None);
            };
            let bases = labels
                .iter()
                .map(|label| base_of_label(*label))
                .chain(beside.iter().copied());
            let mut found: Vec<usize> = bases
                .filter_map(|base| by_base.get(&base))
                .flatten()
                .copied()
                .collect();
            found.sort_unstable();
            found.dedup();
            if found.len() >= wanted {
                let scored =
                    self.score_turns(index, search, found.iter().map(|at| &candidates[*at]))?;
                let compared = scored.len() as u64;
                return Ok(Some(
                    self.turn_hits(snapshot, search, false, compared, scored, candidates),
                ));
            }
            if breadth >= usize::from(VECTOR_EF_SEARCH_MAX) {
                return Ok(None);
            }
            breadth *= 4;
        }
    }

    /// The answer: the best `k + offset` ranked, after `offset`, as turns read them.
    fn turn_hits(
        &self,
        snapshot: &Contexts,
        search: &TurnVectorSearch,
        exact: bool,
        compared: u64,
        scored: Vec<Scored>,
        candidates: &[Candidate],
    ) -> TurnHits {
        let wanted = (search.k + search.offset) as usize;
        let records: HashMap<TurnId, &TurnRecord> = candidates
            .iter()
            .map(|candidate| (candidate.record.turn_id, &candidate.record))
            .collect();
        let hits = Ranked::new(scored, wanted)
            .take(wanted)
            .skip(search.offset as usize)
            .filter_map(|scored| {
                let mut id = [0u8; 8];
                id.copy_from_slice(&scored.key);
                let record = records.get(&TurnId(u64::from_be_bytes(id)))?;
                let turn =
                    crate::read::shown(&self.addressing, snapshot.overlays.view(record, None));
                Some(TurnHit {
                    turn,
                    score: scored.score,
                })
            })
            .collect();
        TurnHits {
            exact,
            candidates: compared,
            hits,
        }
    }
}

/// A turn search's filters within their limits.
fn check_turn_filters(search: &TurnVectorSearch) -> Result<(), EngineError> {
    use ctxstore_vocab::limits::{LABELS_PER_TURN_MAX, TAGS_PER_CONTEXT_MAX};
    if search.labels.len() > LABELS_PER_TURN_MAX {
        return Err(EngineError::Limit {
            what: "labels a turn search asks for",
            limit: LABELS_PER_TURN_MAX,
        });
    }
    if search.tags.len() > TAGS_PER_CONTEXT_MAX {
        return Err(EngineError::Limit {
            what: "tags a turn search asks for",
            limit: TAGS_PER_CONTEXT_MAX,
        });
    }
    if !ctxstore_vocab::vectors::all_finite(&search.vector) {
        return Err(EngineError::InvalidArgument(
            "the query vector has a NaN or infinite component".into(),
        ));
    }
    Ok(())
}
