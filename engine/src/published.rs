//! What the actors publish for everyone else to read, without locks: the aggregate of each
//! actor's own view (`sequencer::view`, `blob::view`) and the store's status. Each part has
//! exactly one writer; readers see only durable state.

use crate::blob::view::ShardView;
use crate::ids::{BlobHash, ContextId};
use crate::metrics::ActorMetrics;
use crate::model::Scope;
use crate::sequencer::streams::StreamsView;
use crate::sequencer::view::{ContextsView, HeadTable, SequencerCounters, TurnsView};
use crate::sequencer::watch::WatchView;
use crate::status::StoreStatus;

/// The shared, read-only face of the engine.
#[derive(Debug)]
pub(crate) struct Published {
    pub turns: TurnsView,
    pub heads: HeadTable,
    pub contexts: ContextsView,
    /// Open streams and the ended ones kept (issue 32).
    pub streams: StreamsView,
    /// Events for watchers (issue 32).
    pub watch: WatchView,
    pub counters: SequencerCounters,
    pub shards: Box<[ShardView]>,
    pub status: StoreStatus,
    /// Group-commit figures, each written only by its actor: the sequencer's, then one per
    /// shard.
    pub sequencer_metrics: ActorMetrics,
    pub shard_metrics: Box<[ActorMetrics]>,
    /// Every tenant's limits (decision 0032 §3): set by the server, read by the sequencer.
    pub quotas: crate::quota::QuotaTable,
    /// The store's keys (decision 0032 §4): what seals a tenant's payloads and stream deltas,
    /// and its blob addresses. The shards' views hold the same.
    pub keys: std::sync::Arc<crate::keys::StoreKeys>,
    /// Each vector index's graph (decision 0033 §4), written by the graph writer only.
    pub vector_graphs: crate::vector_graph::VectorGraphs,
}

impl Published {
    /// The shard that owns `hash`.
    pub fn shard_of(&self, hash: &BlobHash) -> &ShardView {
        &self.shards[usize::from(hash.shard(self.shards.len() as u16))]
    }

    /// Stored bytes of `tenant_id`'s blobs in every shard (`quota_bytes`).
    pub fn tenant_bytes(&self, tenant_id: crate::ids::TenantId) -> u64 {
        self.shards
            .iter()
            .map(|shard| shard.tenant_bytes(tenant_id))
            .sum()
    }

    /// `Contexts::visible_in` on the latest metadata snapshot, loaded only for a tenant's
    /// scope: the store-wide scope (the server's path today) sees every context.
    pub fn sees(&self, scope: Scope, context_id: ContextId) -> bool {
        scope == Scope::Store || self.contexts.load().visible_in(scope, context_id)
    }
}
