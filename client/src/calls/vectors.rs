//! The vectors family's calls (protocol version 6, decision 0033): a tenant's vector indexes,
//! key-value entries put with their vectors, and the search over one context's entries.
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
}
