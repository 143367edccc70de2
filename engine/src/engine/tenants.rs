//! Tenants, the caller's side (decision 0032 §1): a tenant name's TenantId, registered by the
//! sequencer the first time it is asked for, and the tenants registered so far. The server
//! registers the names of its tenants file; a TenantId then travels with every request of a
//! connection as its scope.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::ids::TenantId;
use crate::pipeline::SequencerRequest;
use crate::quota::TenantQuotas;

/// What a tenant uses of the quotas the engine counts (decision 0032 §3), as readers see the
/// store now.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct TenantUsage {
    /// Live contexts (created, not deleted).
    pub contexts: u64,
    /// Open streams.
    pub streams_open: u64,
    /// Stored bytes of its blobs, every shard's (`quota_bytes`).
    pub bytes: u64,
}

/// A registered tenant.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TenantView {
    pub tenant_id: TenantId,
    pub name: String,
}

impl Engine {
    /// `name`'s TenantId: the one it has, or the next, once its tenant record is durable, and,
    /// when the store seals, once its keys are durable in the keyring.
    /// INVALID_ARGUMENT for a name outside `[a-z0-9_-]{1,64}`; READ_ONLY on a standby (a
    /// standby takes the primary's tenants from the log it follows).
    pub async fn register_tenant(&self, name: &str) -> Result<TenantId, EngineError> {
        self.check_open()?;
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::RegisterTenant {
            name: name.to_owned(),
            reply,
        };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        let tenant_id = answer.await.map_err(|_| EngineError::ShutDown)??;
        assert!(
            !tenant_id.is_operator(),
            "a name never registers the operator"
        );
        // Its keys, when the store seals, before anything of it can be written: random ones
        // for a new tenant (one registered before has had its keys since the open).
        self.inner
            .published
            .keys
            .give_keys(&[(tenant_id, name)], true)?;
        Ok(tenant_id)
    }

    /// The TenantId of a registered name, as readers see the store now.
    pub fn tenant_by_name(&self, name: &str) -> Option<TenantId> {
        self.inner.published.contexts.load().tenants.by_name(name)
    }

    /// Every registered tenant, in id order (the operator, who has no record, aside).
    pub fn tenants(&self) -> Vec<TenantView> {
        let snapshot = self.inner.published.contexts.load();
        snapshot
            .tenants
            .iter()
            .map(|(tenant_id, name)| TenantView {
                tenant_id,
                name: name.to_owned(),
            })
            .collect()
    }

    /// Every tenant's limits from now on, by tenant name (decision 0032 §3): a tenant listed
    /// gets its limits, one not listed has none, and a name not registered yet finds its
    /// limits when it is. The server calls it with its tenants file, at start and on every
    /// reload; the sequencer checks each context create and stream open against it.
    pub fn set_quotas(&self, quotas: &[(String, TenantQuotas)]) {
        self.inner.published.quotas.replace(quotas);
    }

    /// The limits in force for the tenant named `tenant`.
    pub fn quotas_of(&self, tenant: &str) -> TenantQuotas {
        self.inner.published.quotas.of(tenant)
    }

    /// What `tenant_id` uses, from the latest published snapshots.
    pub fn tenant_usage(&self, tenant_id: TenantId) -> TenantUsage {
        self.tenants_usage()
            .get(&tenant_id)
            .copied()
            .unwrap_or_default()
    }

    /// What every tenant with a live context, an open stream or a stored blob uses (the
    /// operator's too), from one look at the published snapshots: one pass over the open
    /// streams and the shards' per-tenant counters.
    pub fn tenants_usage(&self) -> std::collections::HashMap<TenantId, TenantUsage> {
        let published = &self.inner.published;
        let contexts = published.contexts.load();
        let streams = published.streams.load();
        let mut usage: std::collections::HashMap<TenantId, TenantUsage> = contexts
            .live_by_tenant()
            .map(|(tenant_id, live)| {
                let usage = TenantUsage {
                    contexts: live,
                    ..TenantUsage::default()
                };
                (tenant_id, usage)
            })
            .collect();
        for (_, open) in streams.list(None, 0) {
            if let Some(info) = contexts.get(open.context_id) {
                usage.entry(info.tenant_id).or_default().streams_open += 1;
            }
        }
        for shard in published.shards.iter() {
            for (tenant_id, bytes) in shard.counters.tenant_bytes.pin().iter() {
                let bytes = bytes.load(std::sync::atomic::Ordering::Acquire);
                if bytes > 0 {
                    usage.entry(*tenant_id).or_default().bytes += bytes;
                }
            }
        }
        usage
    }
}
