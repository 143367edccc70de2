//! The vectors family's calls (protocol version 6, decision 0033): a tenant's vector indexes,
//! key-value entries put with their vectors, and the search over one context's entries;
//! version 7, the search over turns (their vectors go with `append_turns_vectors`).
//! `kv_put_vectors` carries its handle's durability, as `kv_put_ex` does.

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::vectors::{
    self, VectorEntryWire, VectorHits, VectorIndexWire, vector_search_flags,
};
use ctxstore_protocol::{ContextRef, MessageType, kv_put_flags};
use ctxstore_vocab::vectors::{Metric, all_finite};

use super::kv::ttl_ms;
use crate::client::{Client, check_pair};
use crate::error::ClientError;
use crate::types::Turn;

/// A search over turns (`Client::vector_search_turns`): the `k` turns nearest `vector`, after
/// `offset`, of the contexts it names: `context`, the contexts whose name starts with
/// `name_prefix`, those carrying every one of `tags` (none of the three: every context of the
/// tenant), each turn with every one of `labels` and, when given, of `type_tag`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TurnVectorQuery {
    pub index: String,
    pub vector: Vec<f32>,
    pub k: u16,
    pub offset: u16,
    pub context: Option<ContextRef>,
    pub name_prefix: String,
    pub tags: Vec<(String, String)>,
    pub labels: Vec<(String, String)>,
    pub type_tag: Option<u64>,
    /// Compare every candidate exactly.
    pub exact: bool,
    /// The graph's breadth (0: the index's).
    pub ef_search: u16,
}

impl TurnVectorQuery {
    /// The `k` nearest turns of every context of the tenant in `index`.
    pub fn new(index: impl Into<String>, vector: Vec<f32>, k: u16) -> TurnVectorQuery {
        TurnVectorQuery {
            index: index.into(),
            vector,
            k,
            ..TurnVectorQuery::default()
        }
    }
}

/// A turn a search found, with its score (higher is nearer).
#[derive(Clone, Debug, PartialEq)]
pub struct TurnHit {
    pub turn: Turn,
    pub score: f32,
}

/// VECTOR_SEARCH_TURNS' answer.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnHits {
    /// Every candidate was compared exactly (else the graph was walked).
    pub exact: bool,
    /// Vectors compared.
    pub candidates: u32,
    /// Best first: exactly `k` whenever `k + offset` turns pass.
    pub hits: Vec<TurnHit>,
}

/// A search (`Client::vector_search`): the `k` entries nearest `vector`, after `offset`, under
/// `prefix`, whose value passes `filter` (JSON, LangGraph's operators; empty: none).
#[derive(Clone, Debug, PartialEq)]
pub struct VectorQuery {
    pub index: String,
    pub vector: Vec<f32>,
    pub k: u16,
    pub offset: u16,
    pub prefix: Bytes,
    pub filter: Bytes,
    /// Compare every candidate exactly.
    pub exact: bool,
    /// The graph's breadth (0: the index's).
    pub ef_search: u16,
}

impl VectorQuery {
    /// The `k` nearest in `index`, no offset, prefix or filter.
    pub fn new(index: impl Into<String>, vector: Vec<f32>, k: u16) -> VectorQuery {
        VectorQuery {
            index: index.into(),
            vector,
            k,
            offset: 0,
            prefix: Bytes::new(),
            filter: Bytes::new(),
            exact: false,
            ef_search: 0,
        }
    }
}

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Creates the vector index `name` of this connection's tenant (VECTOR_INDEX_CREATE), or
    /// answers the one it has when its dimension and metric are these; other ones are
    /// INVALID_ARGUMENT. `ef_search` 0: the server's default (128).
    pub async fn vector_index_create(
        &self,
        name: &str,
        dims: u16,
        metric: Metric,
        ef_search: u16,
    ) -> Result<VectorIndexWire, ClientError> {
        let request = vectors::VectorIndexCreate {
            name: name.to_owned(),
            dims,
            metric: metric.code(),
            ef_search,
        };
        let index = self.ask(request).await?;
        check_pair(
            MessageType::VectorIndexCreate,
            index.name == name && index.dims == dims && index.metric == metric.code(),
        )?;
        Ok(index)
    }

    /// Drops the vector index `name` (VECTOR_INDEX_DROP): its vectors answer no search from
    /// then on. NOT_FOUND when there is none.
    pub async fn vector_index_drop(&self, name: &str) -> Result<VectorIndexWire, ClientError> {
        let request = vectors::VectorIndexDrop {
            name: name.to_owned(),
        };
        let index = self.ask(request).await?;
        check_pair(MessageType::VectorIndexDrop, index.name == name)?;
        Ok(index)
    }

    /// This connection's tenant's vector indexes, in name order (VECTOR_INDEX_LIST).
    pub async fn vector_indexes(&self) -> Result<Vec<VectorIndexWire>, ClientError> {
        let listed = self.ask(vectors::VectorIndexList {}).await?;
        Ok(listed.indexes)
    }

    /// Puts key-value entries with their vectors (KV_PUT_VECTORS): each entry's value and
    /// vectors (of `index`, each of `dims` finite components; none: stored without any) in
    /// one durable record, as `kv_put_ex` puts values. Checked here before sending: the
    /// dimension of each vector and its components.
    pub async fn kv_put_vectors(
        &self,
        context: impl Into<ContextRef>,
        index: &str,
        dims: u16,
        entries: Vec<VectorEntryWire>,
        if_absent: bool,
        ttl: Option<Duration>,
    ) -> Result<(), ClientError> {
        for (at, entry) in entries.iter().enumerate() {
            for (number, vector) in entry.vectors.iter().enumerate() {
                if vector.len() != usize::from(dims) || !all_finite(vector) {
                    return Err(ClientError::InvalidArgument(format!(
                        "entry {at}'s vector {number} has {} components, not {dims} finite ones",
                        vector.len()
                    )));
                }
            }
        }
        let request = vectors::KvPutVectors {
            context: context.into(),
            put_flags: if if_absent {
                kv_put_flags::IF_ABSENT
            } else {
                0
            },
            ttl_ms: ttl_ms(ttl)?,
            index: index.to_owned(),
            dims,
            entries,
        };
        self.ask(request).await?;
        Ok(())
    }

    /// The entries of a context nearest a query (VECTOR_SEARCH), best first: exactly `k`
    /// whenever `k + offset` or more pass the filter.
    pub async fn vector_search(
        &self,
        context: impl Into<ContextRef>,
        query: VectorQuery,
    ) -> Result<VectorHits, ClientError> {
        if !all_finite(&query.vector) {
            return Err(ClientError::InvalidArgument(
                "the query vector has a NaN or infinite component".into(),
            ));
        }
        let k = query.k;
        let request = vectors::VectorSearch {
            context: context.into(),
            index: query.index,
            vector: query.vector,
            k,
            offset: query.offset,
            search_flags: if query.exact {
                vector_search_flags::EXACT
            } else {
                0
            },
            ef_search: query.ef_search,
            prefix: query.prefix,
            filter: query.filter,
        };
        let prefix = request.prefix.clone();
        let hits = self.ask(request).await?;
        // At most k, under the prefix, best first.
        let ordered = hits
            .hits
            .windows(2)
            .all(|pair| pair[0].score >= pair[1].score);
        let under = hits.hits.iter().all(|hit| hit.key.starts_with(&prefix));
        check_pair(
            MessageType::VectorSearch,
            hits.hits.len() <= usize::from(k) && ordered && under,
        )?;
        Ok(hits)
    }

    /// The turns nearest a query among the contexts it names (VECTOR_SEARCH_TURNS, protocol
    /// version 7), best first: exactly `k` whenever `k + offset` or more pass its filters.
    pub async fn vector_search_turns(
        &self,
        query: TurnVectorQuery,
    ) -> Result<TurnHits, ClientError> {
        if !all_finite(&query.vector) {
            return Err(ClientError::InvalidArgument(
                "the query vector has a NaN or infinite component".into(),
            ));
        }
        let k = query.k;
        let mut search_flags = 0;
        if query.exact {
            search_flags |= vector_search_flags::EXACT;
        }
        if query.type_tag.is_some() {
            search_flags |= vector_search_flags::TYPE_TAG;
        }
        let type_tag = query.type_tag;
        let request = vectors::VectorSearchTurns {
            index: query.index,
            vector: query.vector,
            k,
            offset: query.offset,
            search_flags,
            ef_search: query.ef_search,
            context: query.context.unwrap_or(ContextRef::Id(0)),
            name_prefix: query.name_prefix,
            tags: query.tags,
            labels: query.labels,
            type_tag: type_tag.unwrap_or(0),
        };
        let hits = self.ask(request).await?;
        // At most k, best first, of the type asked.
        let ordered = hits
            .hits
            .windows(2)
            .all(|pair| pair[0].score >= pair[1].score);
        let typed = type_tag.is_none_or(|tag| hits.hits.iter().all(|hit| hit.turn.type_tag == tag));
        check_pair(
            MessageType::VectorSearchTurns,
            hits.hits.len() <= usize::from(k) && ordered && typed,
        )?;
        Ok(TurnHits {
            exact: hits.method == vectors::vector_search_method::EXACT,
            candidates: hits.candidates,
            hits: hits
                .hits
                .iter()
                .map(|hit| TurnHit {
                    turn: Turn::from_wire(&hit.turn, None),
                    score: hit.score,
                })
                .collect(),
        })
    }
}
