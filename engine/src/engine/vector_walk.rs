//! The graph's side of a vector search (decision 0033 §3–§4): the plan that picks the graph,
//! and the filtered walk. The walk's predicate leads each label to the entries of the
//! search's snapshot that hold its blob (`VectorOwners`) and keeps those the search's filters
//! pass: its context, its key prefix, live (not expired, still naming that blob) and the
//! caller's value filter. The walk goes on through the labels it turns down, so a filter
//! passing 1% still meets enough. Every entry it keeps is then scored exactly from its blob,
//! with the additions the graph may not hold yet (batches after the writer's `applied_seq`)
//! and the addresses set aside. When fewer than `k + offset` pass, the walk is retried four
//! times as wide, up to the breadth limit (4,096), and then the search is exact: the answer
//! holds exactly `k` whenever `k + offset` entries pass, as the exact search's does.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use ctxstore_vocab::vectors::{VECTOR_EF_SEARCH_MAX, norm};

use crate::engine::Engine;
use crate::engine::vectors::{Searched, ValueFilter, VectorHits, VectorSearch};
use crate::error::EngineError;
use crate::ids::BlobHash;
use crate::sequencer::vector_owners::{OwnersOfIndex, VectorOwner, base_of, base_of_label};
use crate::store_dir::now_unix_ms;
use crate::vector_graph::Graph;
use crate::vector_search::{Ranked, Scored, best_score};

/// How many more candidates a search with a value filter compares exactly before it walks.
const VALUE_FILTER_EXACT_FACTOR: u64 = 10;

/// The caller's value filter during a walk, with its verdict per value address.
struct Filter<'w, 'p, 'f> {
    passes: &'w RefCell<&'p mut Option<ValueFilter<'f>>>,
    verdicts: &'w RefCell<HashMap<BlobHash, bool>>,
}

/// An entry a base leads to that passes the search's filters.
#[derive(Clone)]
struct Passing {
    key: Bytes,
    address: BlobHash,
    value_address: BlobHash,
    value_len: u32,
}

impl Engine {
    /// The index's graph, when the search should walk it: ready, and more candidates under
    /// the prefix than `vector_exact_max` (ten times that with a value filter: the walk then
    /// reads and judges the value of every node it meets, thousands for a filter passing 1%,
    /// where the exact search judges only the best-ranked; measured in docs/benchmarks.md,
    /// the walk lost at 100,000 candidates and won at a million).
    pub(crate) fn graph_for(
        &self,
        searched: &Searched<'_>,
        search: &VectorSearch,
        value_filtered: bool,
    ) -> Option<Arc<Graph>> {
        let exact_max = self.inner.config.limits.vector_exact_max
            * if value_filtered {
                VALUE_FILTER_EXACT_FACTOR
            } else {
                1
            };
        let index = searched.index;
        if index.vectors <= exact_max {
            return None;
        }
        let graph = self
            .inner
            .published
            .vector_graphs
            .get(index.tenant_id, index.index_id)?;
        if !graph.is_ready() {
            return None;
        }
        // Counting stops past the bound: a narrow prefix costs what it holds.
        let kv = &searched.info.kv;
        let many = if search.prefix.is_empty() {
            kv.len() as u64 > exact_max
        } else {
            kv.range(Bytes::copy_from_slice(&search.prefix)..)
                .take_while(|(key, _)| key.starts_with(&search.prefix))
                .filter(|(_, value)| {
                    value
                        .vectors
                        .is_some_and(|vectors| vectors.index_id == index.index_id)
                })
                .take(exact_max as usize + 1)
                .count() as u64
                > exact_max
        };
        many.then_some(graph)
    }

    /// The filtered walk: `None` when the search must be exact (the walk found fewer than
    /// `k + offset` at the widest, or the graph failed).
    pub(crate) fn walk(
        &self,
        searched: &Searched<'_>,
        graph: &Graph,
        search: &VectorSearch,
        passes: &mut Option<ValueFilter<'_>>,
    ) -> Result<Option<VectorHits>, EngineError> {
        let index = searched.index;
        // After the snapshot: the graph holds at least what the snapshot's recent list left out.
        let applied_seq = self.inner.published.vector_graphs.applied_seq();
        let empty = OwnersOfIndex::new();
        let owners = searched
            .snapshot
            .vector_indexes
            .owners
            .of_index(index.tenant_id, index.index_id)
            .unwrap_or(&empty);
        let now = now_unix_ms();
        let passes = RefCell::new(passes);
        // Per base: the entries it leads to that pass (each base's filters asked once).
        let memo: RefCell<HashMap<u64, Vec<Passing>>> = RefCell::new(HashMap::new());
        // Per value: the caller's filter's verdict (equal values are read and parsed once).
        let verdicts: RefCell<HashMap<BlobHash, bool>> = RefCell::new(HashMap::new());
        let asked = Cell::new(0u64);
        let leads_to = |base: u64| -> bool {
            if let Some(found) = memo.borrow().get(&base) {
                return !found.is_empty();
            }
            asked.set(asked.get() + 1);
            let filter = Filter {
                passes: &passes,
                verdicts: &verdicts,
            };
            let found = self.passing(searched, search, owners, base, now, &filter);
            let any = !found.is_empty();
            memo.borrow_mut().insert(base, found);
            any
        };
        // Without a value filter the walk's predicate is the owners' context and prefix only
        // (no entry read, nothing kept): liveness and the blob are checked on what the walk
        // returns (`leads_to` below), and a hit lost there is made up by a wider walk.
        let value_filtered = passes.borrow().is_some();
        let predicate = |label: u64| {
            let base = base_of_label(label);
            if value_filtered {
                return leads_to(base);
            }
            asked.set(asked.get() + 1);
            owners
                .get(&base)
                .is_some_and(|list| list.iter().any(|owner| in_search(searched, search, owner)))
        };
        let beside = beside(searched, graph, applied_seq);
        let wanted = (search.k + search.offset) as usize;
        let ef_search = if search.ef_search > 0 {
            search.ef_search
        } else {
            index.ef_search
        };
        let mut breadth = usize::from(ef_search).max(2 * wanted);
        let query_norm = norm(&search.vector);
        loop {
            breadth = breadth.min(usize::from(VECTOR_EF_SEARCH_MAX));
            let Ok(labels) = graph.search(&search.vector, breadth, &predicate) else {
                return Ok(None);
            };
            let mut bases: Vec<u64> = labels.iter().map(|label| base_of_label(*label)).collect();
            bases.extend(beside.iter().copied());
            bases.retain(|base| leads_to(*base));
            let scored = self.score_found(searched, search, query_norm, &bases, &memo.borrow())?;
            if scored.len() >= wanted {
                let compared = asked.get() + scored.len() as u64;
                let ranked: Vec<Scored> = Ranked::new(scored, wanted).take(wanted).collect();
                return Ok(Some(self.hits(search, false, compared, ranked)));
            }
            if breadth >= usize::from(VECTOR_EF_SEARCH_MAX) {
                return Ok(None);
            }
            breadth *= 4;
        }
    }

    /// The entries `bases` lead to, each once, scored exactly from its blob.
    fn score_found(
        &self,
        searched: &Searched<'_>,
        search: &VectorSearch,
        query_norm: f32,
        bases: &[u64],
        memo: &HashMap<u64, Vec<Passing>>,
    ) -> Result<Vec<Scored>, EngineError> {
        let mut seen: HashSet<&Bytes> = HashSet::new();
        let mut scored = Vec::new();
        for entry in bases.iter().filter_map(|base| memo.get(base)).flatten() {
            if !seen.insert(&entry.key) {
                continue;
            }
            let decoded = self.vectors_at(entry.address)?;
            let metric = searched.index.metric;
            scored.push(Scored {
                score: best_score(metric, &search.vector, query_norm, &decoded),
                key: entry.key.clone(),
                value_address: entry.value_address,
                value_len: entry.value_len,
            });
        }
        Ok(scored)
    }

    /// Whether the value at `address` passes the caller's filter (none: every value does).
    fn filter_passes(&self, filter: &Filter<'_, '_, '_>, address: BlobHash) -> bool {
        if let Some(verdict) = filter.verdicts.borrow().get(&address) {
            return *verdict;
        }
        let mut passes = filter.passes.borrow_mut();
        let Some(passes) = passes.as_mut() else {
            return true;
        };
        let verdict = self.value_passes(address, *passes);
        filter.verdicts.borrow_mut().insert(address, verdict);
        verdict
    }

    /// The entries of the snapshot `base` leads to that pass the search's filters.
    fn passing(
        &self,
        searched: &Searched<'_>,
        search: &VectorSearch,
        owners: &OwnersOfIndex,
        base: u64,
        now: u64,
        filter: &Filter<'_, '_, '_>,
    ) -> Vec<Passing> {
        let Some(list) = owners.get(&base) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for owner in list.iter() {
            if !in_search(searched, search, owner) {
                continue;
            }
            let Some(value) = searched.info.kv.get(&owner.key) else {
                unreachable!("an owner of the snapshot is an entry of it");
            };
            assert!(
                value
                    .vectors
                    .is_some_and(|vectors| vectors.hash == owner.address),
                "an owner of the snapshot holds the blob it is listed under"
            );
            if !value.live_at(now) {
                continue;
            }
            if !self.filter_passes(filter, value.hash) {
                continue;
            }
            found.push(Passing {
                key: owner.key.clone(),
                address: owner.address,
                value_address: value.hash,
                value_len: value.len,
            });
        }
        found
    }
}

/// Whether an owner is an entry of the search's context under its prefix (a turn never is).
fn in_search(searched: &Searched<'_>, search: &VectorSearch, owner: &VectorOwner) -> bool {
    owner.is_entry()
        && owner.context_id == searched.context_id
        && owner.key.starts_with(&search.prefix)
}

/// The bases a walk scans beside the graph: the recent additions of the index the writer has
/// not applied (through `applied_seq`), and the addresses set aside.
fn beside(searched: &Searched<'_>, graph: &Graph, applied_seq: u64) -> Vec<u64> {
    let index = searched.index;
    let mut beside: Vec<u64> = searched
        .snapshot
        .vector_indexes
        .owners
        .unapplied(index.tenant_id, index.index_id, applied_seq)
        .collect();
    beside.extend(graph.set_aside().iter().map(base_of));
    beside
}
