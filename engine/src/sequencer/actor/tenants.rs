//! The sequencer's rule for tenants (decision 0032 §1): a name gets its TenantId the first
//! time it is asked for, in a tenant record (op 20, store-wide) of the batch; ids are dense
//! from 1 and never given twice. Replay and ingest apply the same rule
//! (`Tenants::check_register`).

use crate::error::EngineError;
use crate::format::context_meta::{ContextMeta, is_tenant_name};
use crate::ids::{ContextId, TENANTS_MAX, TenantId};
use crate::sequencer::actor::SequencerActor;
use crate::store_dir::now_unix_ms;

impl SequencerActor {
    /// `name`'s TenantId: the registered one, else the next, registered by a tenant record.
    pub(super) fn register_tenant(&mut self, name: String) -> Result<TenantId, EngineError> {
        if !is_tenant_name(&name) {
            return Err(EngineError::InvalidArgument(format!(
                "{name:?} is not a tenant name: 1 to {} bytes of a-z, 0-9, '_' and '-'",
                crate::format::context_meta::TENANT_NAME_BYTES_MAX
            )));
        }
        if let Some(tenant_id) = self.contexts.tenants.by_name(&name) {
            return Ok(tenant_id);
        }
        self.check_takes_ids(false)?;
        let Some(tenant_id) = self.contexts.tenants.next_id() else {
            return Err(EngineError::InvalidArgument(format!(
                "the store holds the maximum of {TENANTS_MAX} tenants"
            )));
        };
        self.contexts.tenants.register(tenant_id, &name);
        let record = ContextMeta::Tenant { tenant_id, name };
        self.push_meta(ContextId(0), &record, now_unix_ms());
        Ok(tenant_id)
    }
}
