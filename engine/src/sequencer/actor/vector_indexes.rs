//! The sequencer's rule for vector indexes (decision 0033 §1): a creation takes the tenant's
//! next index id in a vector index record (op 23, store-wide), unless the tenant already has
//! an index of that name with the same dimension and metric (then it answers that one); a
//! drop writes op 24. Replay and ingest apply the same rules (`VectorIndexes::check_create`,
//! `check_drop`).

use ctxstore_vocab::vectors::{VECTOR_EF_SEARCH_DEFAULT, VECTOR_INDEXES_PER_TENANT_MAX};

use crate::error::EngineError;
use crate::format::context_meta::{ContextMeta, VectorIndexRecord};
use crate::ids::ContextId;
use crate::pipeline::VectorIndexChange;
use crate::sequencer::actor::SequencerActor;
use crate::sequencer::vector_indexes::VectorIndexInfo;
use crate::store_dir::now_unix_ms;

impl SequencerActor {
    pub(super) fn change_vector_index(
        &mut self,
        change: VectorIndexChange,
    ) -> Result<VectorIndexInfo, EngineError> {
        match change {
            VectorIndexChange::Create(wanted) => self.create_vector_index(wanted),
            VectorIndexChange::Drop { tenant_id, name } => {
                let indexes = &self.contexts.vector_indexes;
                let Some(index) = indexes.by_name(tenant_id, &name) else {
                    return Err(EngineError::VectorIndexNotFound(format!(
                        "vector index {name:?}"
                    )));
                };
                let index_id = index.index_id;
                self.check_takes_ids(false)?;
                let dropped = self.contexts.vector_indexes.drop_index(tenant_id, index_id);
                let record = ContextMeta::VectorIndexDropped {
                    tenant_id,
                    index_id,
                };
                self.push_meta(ContextId(0), &record, now_unix_ms());
                Ok(dropped)
            }
        }
    }

    fn create_vector_index(
        &mut self,
        wanted: VectorIndexRecord,
    ) -> Result<VectorIndexInfo, EngineError> {
        let tenant_id = wanted.tenant_id;
        let tenants = &self.contexts.tenants;
        if !tenants.exists(tenant_id) || tenants.is_deleted(tenant_id) {
            return Err(EngineError::InvalidArgument(format!(
                "tenant {tenant_id} is not registered, or deleted: it holds no vector index"
            )));
        }
        let indexes = &self.contexts.vector_indexes;
        if let Some(existing) = indexes.by_name(tenant_id, &wanted.name) {
            let same_breadth = wanted.ef_search == 0 || wanted.ef_search == existing.ef_search;
            if existing.dims == wanted.dims && existing.metric == wanted.metric && same_breadth {
                return Ok(existing.clone());
            }
            return Err(EngineError::InvalidArgument(format!(
                "vector index {:?} exists with {} dimensions, metric {} and ef_search {}; asked \
                 {} dimensions, metric {} and ef_search {} (drop it first to change them)",
                wanted.name,
                existing.dims,
                existing.metric.name(),
                existing.ef_search,
                wanted.dims,
                wanted.metric.name(),
                wanted.ef_search
            )));
        }
        if indexes.of_tenant(tenant_id).len() >= VECTOR_INDEXES_PER_TENANT_MAX {
            return Err(EngineError::Limit {
                what: "vector indexes per tenant (drop one first)",
                limit: VECTOR_INDEXES_PER_TENANT_MAX,
            });
        }
        self.check_takes_ids(false)?;
        let record = VectorIndexRecord {
            index_id: indexes.next_id(tenant_id),
            ef_search: match wanted.ef_search {
                0 => VECTOR_EF_SEARCH_DEFAULT,
                asked => asked,
            },
            ..wanted
        };
        self.contexts
            .vector_indexes
            .check_create(&record)
            .map_err(EngineError::InvalidArgument)?;
        let created = self.contexts.vector_indexes.create(&record);
        self.push_meta(
            ContextId(0),
            &ContextMeta::VectorIndex(record),
            now_unix_ms(),
        );
        Ok(created)
    }
}
