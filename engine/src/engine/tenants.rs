//! Tenants, the caller's side (decision 0032 §1): a tenant name's TenantId, registered by the
//! sequencer the first time it is asked for, and the tenants registered so far. The server
//! registers the names of its tenants file; a TenantId then travels with every request of a
//! connection as its scope.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::ids::TenantId;
use crate::pipeline::SequencerRequest;

/// A registered tenant.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TenantView {
    pub tenant_id: TenantId,
    pub name: String,
}

impl Engine {
    /// `name`'s TenantId: the one it has, or the next, once its tenant record is durable.
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
}
