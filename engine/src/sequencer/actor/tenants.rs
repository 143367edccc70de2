//! The sequencer's rule for tenants (decision 0032 §1): a name gets its TenantId the first
//! time it is asked for, in a tenant record (op 20, store-wide) of the batch; ids are dense
//! from 1 and never given twice. Replay and ingest apply the same rule
//! (`Tenants::check_register`).

use crate::error::EngineError;
use crate::format::context_meta::{ContextMeta, is_tenant_name};
use crate::format::stream_meta::{StreamEnd, StreamMeta};
use crate::ids::{ContextId, TENANTS_MAX, TenantId};
use crate::quota::Quota;
use crate::sequencer::actor::{HeadMove, SequencerActor};
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

    /// Deletes `tenant_id` (decision 0032 §6): its open streams aborted (so that log
    /// compaction takes their records), then one tenant-deleted record (op 21), which deletes
    /// every live context of the tenant as a context's delete would. A tenant deleted already
    /// answers as the first time did.
    pub(super) fn delete_tenant(&mut self, tenant_id: TenantId) -> Result<TenantId, EngineError> {
        self.check_takes_ids(false)?;
        let tenants = &self.contexts.tenants;
        if tenant_id.is_operator() || !tenants.exists(tenant_id) {
            return Err(EngineError::InvalidArgument(format!(
                "tenant {tenant_id} is not registered (the operator is never deleted)"
            )));
        }
        if tenants.is_deleted(tenant_id) {
            return Ok(tenant_id);
        }
        let of_tenant = |context_id: ContextId| {
            self.contexts
                .get(context_id)
                .is_some_and(|info| info.tenant_id == tenant_id)
        };
        let open: Vec<_> = (self.streams.list(None, 0))
            .filter(|(_, stream)| of_tenant(stream.context_id))
            .map(|(stream_id, stream)| (stream_id, stream.context_id))
            .collect();
        for (stream_id, context_id) in open {
            let end = StreamEnd::Aborted;
            self.push_stream_end(context_id, StreamMeta::End { stream_id, end });
        }
        let now = now_unix_ms();
        let deleted =
            (self.contexts.delete_tenant(tenant_id, now)).map_err(EngineError::InvalidArgument)?;
        for context_id in deleted {
            let previous = self.heads.delete(context_id);
            self.batch.moves.push(HeadMove {
                context_id,
                previous,
            });
        }
        self.push_meta(ContextId(0), &ContextMeta::TenantDeleted(tenant_id), now);
        Ok(tenant_id)
    }
}

impl SequencerActor {
    /// `Ok` when `tenant_id` may have one more of `quota` (decision 0032 §3): its limit from
    /// the server's table, its usage from the batch's own state, so the check and the write
    /// it admits are one step of this thread.
    pub(super) fn check_quota(&self, quota: Quota, tenant_id: TenantId) -> Result<(), EngineError> {
        // The operator has no name in the registry, and no quotas.
        let Some(tenant) = self.contexts.tenants.name(tenant_id) else {
            return Ok(());
        };
        let limits = self.published.quotas.of(tenant);
        let limit = match quota {
            Quota::Contexts => limits.contexts,
            Quota::Streams => limits.streams,
            Quota::Bytes | Quota::AppendsPerS | Quota::Connections => {
                unreachable!("{quota} is not the sequencer's to count")
            }
        };
        let Some(limit) = limit else {
            return Ok(());
        };
        let usage = match quota {
            Quota::Contexts => self.contexts.live_of(tenant_id),
            _ => self.open_streams_of(tenant_id),
        };
        let refused = crate::quota::check(quota, Some(limit), usage, || tenant.to_string());
        refused.map_err(EngineError::QuotaExceeded)
    }

    /// `tenant_id`'s open streams: a walk over the open ones, at most `streams_open_max`.
    fn open_streams_of(&self, tenant_id: TenantId) -> u64 {
        let of_tenant = |context_id: ContextId| {
            self.contexts
                .get(context_id)
                .is_some_and(|info| info.tenant_id == tenant_id)
        };
        let open = self.streams.list(None, 0);
        open.filter(|(_, stream)| of_tenant(stream.context_id))
            .count() as u64
    }
}
