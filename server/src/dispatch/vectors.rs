//! The vectors family (version 6, decision 0033): VECTOR_INDEX_CREATE, VECTOR_INDEX_DROP,
//! VECTOR_INDEX_LIST, VECTOR_SEARCH, KV_PUT_VECTORS; version 7: APPEND_TURNS_VECTORS and
//! VECTOR_SEARCH_TURNS. The engine checks vectors and limits;
//! here a metric code becomes a `Metric` and a filter a `ValueFilter` (INVALID_ARGUMENT
//! naming what is wrong), before the engine is asked.

use ctxstore_engine::turn_vectors::TurnVectorSearch;
use ctxstore_engine::vectors::{
    Metric, VectorEntry, VectorIndexInfo, VectorSearch as EngineSearch,
};
use ctxstore_engine::{AppendRequest, ContextId, TurnVectors};
use ctxstore_protocol::vectors::{
    self, TurnHitWire, VectorHitWire, VectorIndexWire, vector_search_flags, vector_search_method,
};
use ctxstore_protocol::{ErrorCode, Response, VectorsRequest, VectorsResponse, kv_put_flags};
use ctxstore_vocab::vectors::VECTOR_FILTER_BYTES_MAX;

use super::appends::turn_request;
use super::{Scoped, context_ref, engine_error, error, turn_wire};
use crate::value_filter::ValueFilter;

impl Scoped<'_> {
    pub(super) async fn answer_vectors(
        &self,
        request: VectorsRequest,
    ) -> Result<VectorsResponse, Response> {
        match request {
            VectorsRequest::VectorIndexCreate(create) => self
                .vector_index_create(create)
                .await
                .map(VectorsResponse::VectorIndex),
            VectorsRequest::VectorIndexDrop(drop) => {
                let dropped = self.engine.vector_index_drop(&drop.name).await;
                dropped
                    .map(|info| VectorsResponse::VectorIndexDropped(index_wire(&info)))
                    .map_err(engine_error)
            }
            VectorsRequest::VectorIndexList(_) => {
                let indexes = self
                    .engine
                    .vector_indexes()
                    .iter()
                    .map(index_wire)
                    .collect();
                Ok(VectorsResponse::VectorIndexes(vectors::VectorIndexes {
                    indexes,
                }))
            }
            VectorsRequest::VectorSearch(search) => {
                self.vector_search(search).map(VectorsResponse::VectorHits)
            }
            VectorsRequest::KvPutVectors(put) => self
                .kv_put_vectors(put)
                .await
                .map(|()| VectorsResponse::Stored(vectors::Stored {})),
            VectorsRequest::AppendTurnsVectors(append) => self
                .append_turns_vectors(append)
                .await
                .map(VectorsResponse::TurnsStored),
            VectorsRequest::VectorSearchTurns(search) => self
                .vector_search_turns(search)
                .map(VectorsResponse::TurnHits),
        }
    }

    /// APPEND_TURNS_VECTORS: APPEND_TURNS with each turn's vectors (the engine checks them
    /// against the index and stores them before the turns).
    async fn append_turns_vectors(
        &self,
        append: vectors::AppendTurnsVectors,
    ) -> Result<ctxstore_protocol::appends::AppendedTurns, Response> {
        let context_id: ContextId = self.context_id(append.context)?;
        let requests: Vec<AppendRequest> = append
            .turns
            .into_iter()
            .enumerate()
            .map(|(at, turn)| {
                let expected_head = append.expected_head.filter(|_| at == 0);
                let mut request = turn_request(context_id, expected_head, turn.spec);
                // Given even when empty: the index is checked as KV_PUT_VECTORS checks it.
                request.options.vectors = Some(TurnVectors::Given {
                    index: append.index.clone(),
                    vectors: turn.vectors,
                });
                request
            })
            .collect();
        self.append_batch(requests).await
    }

    /// VECTOR_SEARCH_TURNS: the turns of the contexts it names nearest the query.
    fn vector_search_turns(
        &self,
        search: vectors::VectorSearchTurns,
    ) -> Result<vectors::TurnHits, Response> {
        let context = match search.context {
            ctxstore_protocol::ContextRef::Id(0) => None,
            context => Some(context_ref(context)),
        };
        let asked = TurnVectorSearch {
            index: search.index,
            vector: search.vector,
            k: u32::from(search.k),
            offset: u32::from(search.offset),
            context,
            name_prefix: (!search.name_prefix.is_empty()).then_some(search.name_prefix),
            tags: search.tags,
            labels: search.labels,
            type_tag: (search.search_flags & vector_search_flags::TYPE_TAG != 0)
                .then_some(search.type_tag),
            exact: search.search_flags & vector_search_flags::EXACT != 0,
            ef_search: search.ef_search,
        };
        let found = self
            .engine
            .vector_search_turns(&asked)
            .map_err(engine_error)?;
        Ok(vectors::TurnHits {
            method: method(found.exact),
            candidates: u32::try_from(found.candidates).unwrap_or(u32::MAX),
            hits: found
                .hits
                .into_iter()
                .map(|hit| TurnHitWire {
                    turn: turn_wire(&hit.turn),
                    score: hit.score,
                })
                .collect(),
        })
    }

    async fn vector_index_create(
        &self,
        create: vectors::VectorIndexCreate,
    ) -> Result<VectorIndexWire, Response> {
        let Some(metric) = Metric::from_code(create.metric) else {
            return Err(error(
                ErrorCode::InvalidArgument,
                format!(
                    "metric {} is not 1 (cosine), 2 (inner_product) or 3 (l2)",
                    create.metric
                ),
            ));
        };
        let created = self
            .engine
            .vector_index_create(&create.name, create.dims, metric, create.ef_search)
            .await;
        created.map(|info| index_wire(&info)).map_err(engine_error)
    }

    fn vector_search(
        &self,
        search: vectors::VectorSearch,
    ) -> Result<vectors::VectorHits, Response> {
        if search.filter.len() > VECTOR_FILTER_BYTES_MAX {
            return Err(error(
                ErrorCode::TooLarge,
                format!(
                    "the filter is {} bytes; at most {VECTOR_FILTER_BYTES_MAX}",
                    search.filter.len()
                ),
            ));
        }
        let filter = match search.filter.is_empty() {
            true => None,
            false => Some(
                ValueFilter::parse(&search.filter)
                    .map_err(|problem| error(ErrorCode::InvalidArgument, problem))?,
            ),
        };
        let asked = EngineSearch {
            context: context_ref(search.context),
            index: search.index,
            vector: search.vector,
            k: u32::from(search.k),
            offset: u32::from(search.offset),
            prefix: search.prefix.to_vec(),
            exact: search.search_flags & vector_search_flags::EXACT != 0,
            ef_search: search.ef_search,
        };
        let mut passes = |value: &[u8]| filter.as_ref().is_none_or(|filter| filter.passes(value));
        let passes: ctxstore_engine::vectors::ValueFilter<'_> = &mut passes;
        let found = self.engine.vector_search(&asked, Some(passes));
        let found = found.map_err(engine_error)?;
        Ok(vectors::VectorHits {
            method: method(found.exact),
            candidates: u32::try_from(found.candidates).unwrap_or(u32::MAX),
            hits: found
                .hits
                .into_iter()
                .map(|hit| VectorHitWire {
                    key: hit.key,
                    score: hit.score,
                    value_hash: hit.value_hash,
                    value_len: hit.value_len,
                })
                .collect(),
        })
    }

    async fn kv_put_vectors(&self, put: vectors::KvPutVectors) -> Result<(), Response> {
        let if_absent = put.put_flags & kv_put_flags::IF_ABSENT != 0;
        let context = context_ref(put.context);
        let entries = put
            .entries
            .into_iter()
            .map(|entry| VectorEntry {
                key: entry.key.to_vec(),
                value: entry.value,
                vectors: entry.vectors,
            })
            .collect();
        let stored = self
            .engine
            .kv_put_vectors(&context, &put.index, entries, if_absent, put.ttl_ms);
        stored.await.map_err(engine_error)
    }
}

/// VECTOR_HITS' and TURN_HITS' `method`.
fn method(exact: bool) -> u8 {
    if exact {
        vector_search_method::EXACT
    } else {
        vector_search_method::GRAPH
    }
}

fn index_wire(info: &VectorIndexInfo) -> VectorIndexWire {
    VectorIndexWire {
        index_id: info.index_id,
        dims: info.dims,
        metric: info.metric.code(),
        ef_search: info.ef_search,
        vectors: info.vectors,
        name: info.name.to_string(),
    }
}
