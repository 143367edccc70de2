//! Tenants, the caller's side (decision 0032 §1): a tenant name's TenantId, registered by the
//! sequencer the first time it is asked for, and the tenants registered so far. The server
//! registers the names of its tenants file; a TenantId then travels with every request of a
//! connection as its scope.
//!
//! Deleting a tenant (decision 0032 §6, `delete_tenant`) destroys its keys first (the
//! keyring's tombstone, durable), then writes the tenant-deleted record (op 21) that deletes
//! its contexts. That order makes a crash between the two safe in the direction that matters:
//! the keys are gone, and the next open of a store that leads finishes the record
//! (`finish_erasures`), as it does after a restore whose point predates the deletion.

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
    /// Deleted (decision 0032 §6): its contexts are gone and its tokens refused.
    pub deleted: bool,
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

    /// Deletes the tenant named `name` (decision 0032 §6): its keys destroyed in the keyring
    /// (durable) when the store seals, then its open streams aborted and its contexts
    /// deleted by one tenant-deleted record (op 21), answered once that is durable. From the
    /// keyring's rewrite on nothing of the tenant opens on this store; from the record on its
    /// contexts answer NOT_FOUND and `tenant_deleted` is true (the server refuses its tokens);
    /// the next collection gives its bytes back. Deleting a deleted tenant again answers as
    /// the first time did (and finishes a deletion a crash interrupted). The store-wide
    /// handle's: INVALID_ARGUMENT from a tenant's handle and for a name never registered;
    /// READ_ONLY on a standby.
    pub async fn delete_tenant(&self, name: &str) -> Result<TenantId, EngineError> {
        self.check_open()?;
        if self.scope != crate::model::Scope::Store {
            return Err(EngineError::InvalidArgument(
                "deleting a tenant is the operator's".into(),
            ));
        }
        let Some(tenant_id) = self.tenant_by_name(name) else {
            return Err(EngineError::InvalidArgument(format!(
                "no tenant is named {name:?} in this store (`ctxstore tenant list` shows them)"
            )));
        };
        if !self.accepts_writes() {
            return Err(EngineError::ReadOnly(
                "a standby deletes no tenant: delete it on the primary, whose keyring and log \
                 bring the deletion here"
                    .into(),
            ));
        }
        self.inner.published.keys.forget(tenant_id)?;
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::DeleteTenant { tenant_id, reply };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        let deleted = answer.await.map_err(|_| EngineError::ShutDown)??;
        tracing::warn!(
            tenant = name,
            tenant_id = tenant_id.0,
            "tenant deleted: its keys are destroyed and its contexts deleted"
        );
        Ok(deleted)
    }

    /// A new version of the data key of the tenant named `name` (`operator`: the operator's),
    /// durable in the keyring before this returns (decision 0032 §7): its new payloads are
    /// sealed under it; what it stored before keeps its version and opens as before; the
    /// replica's keyring object follows with the next cut, before anything sealed under the
    /// new version ships. Answers the tenant and the new version. The store-wide handle's;
    /// INVALID_ARGUMENT in a store that seals nothing, for a tenant deleted or not
    /// registered, or past 64 versions; READ_ONLY on a standby.
    pub fn rotate_tenant_key(&self, name: &str) -> Result<(TenantId, u16), EngineError> {
        self.check_open()?;
        if self.scope != crate::model::Scope::Store {
            return Err(EngineError::InvalidArgument(
                "rotating a tenant's key is the operator's".into(),
            ));
        }
        let tenant_id = if name == crate::format::keyring::OPERATOR_NAME {
            TenantId::OPERATOR
        } else {
            self.tenant_by_name(name).ok_or_else(|| {
                EngineError::InvalidArgument(format!(
                    "no tenant is named {name:?} in this store (`ctxstore tenant list` shows them)"
                ))
            })?
        };
        if !self.accepts_writes() {
            return Err(EngineError::ReadOnly(
                "a standby rotates no key: rotate it on the primary, whose keyring comes here"
                    .into(),
            ));
        }
        let version = self.inner.published.keys.rotate(tenant_id)?;
        tracing::info!(
            tenant = name,
            tenant_id = tenant_id.0,
            version,
            "tenant data key rotated"
        );
        Ok((tenant_id, version))
    }

    /// Whether `tenant_id` is deleted: by its record (op 21), or by its keyring tombstone (a
    /// restore of a point before the deletion, or a crash between the two steps).
    pub fn tenant_deleted(&self, tenant_id: TenantId) -> bool {
        let published = &self.inner.published;
        published.contexts.load().tenants.is_deleted(tenant_id) || published.keys.erased(tenant_id)
    }

    /// Whether `tenant_id`'s keys are destroyed (the store seals, and its keyring entry is a
    /// tombstone): nothing it sealed opens on any copy of this keyring.
    pub fn tenant_erased(&self, tenant_id: TenantId) -> bool {
        self.inner.published.keys.erased(tenant_id)
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
                deleted: self.tenant_deleted(tenant_id),
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

/// Finishes the deletions the keyring and the log do not both know (decision 0032 §6): a
/// tenant whose keys are a tombstone gets its tenant-deleted record (after a restore to a
/// point before a deletion, which reads the replica's current keyring, or a crash between a
/// deletion's two steps); a tenant the log deleted whose keys are live (an older copy of the
/// keyring put back) loses them again. Only a store that takes writes: a standby learns both
/// from its primary. Blocking: at open and at promotion, before anything is served.
pub(crate) fn finish_erasures(engine: &Engine) -> Result<(), EngineError> {
    let published = &engine.inner.published;
    let tenants = published.contexts.load().tenants.clone();
    for (tenant_id, name) in tenants.iter() {
        if tenants.is_deleted(tenant_id) && published.keys.forget(tenant_id)? {
            tracing::warn!(
                tenant = name,
                "the log says this tenant was deleted: its keys, found in the keyring, are \
                 destroyed again"
            );
        }
    }
    let unfinished = (published.keys.erased_tenants().into_iter())
        .filter(|tenant_id| tenants.exists(*tenant_id) && !tenants.is_deleted(*tenant_id));
    for tenant_id in unfinished {
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::DeleteTenant { tenant_id, reply };
        (engine.inner.sequencer.0.send(request)).map_err(|_| EngineError::ShutDown)?;
        answer.recv().map_err(|_| EngineError::ShutDown)??;
        tracing::warn!(
            tenant_id = tenant_id.0,
            "the keyring says this tenant was deleted: its contexts are deleted now"
        );
    }
    Ok(())
}
