//! `Tenants` (decision 0032 §1): the store's registry of tenant names and their TenantIds, as
//! the tenant records (op 20) of `turns.log` build it. The sequencer registers a name the
//! first time it is asked for it; replay and a standby's ingest apply the same rule, so every
//! replica of the log holds the same ids. The operator (`TenantId::OPERATOR`, 0) is in every
//! store and registered by no record.
//!
//! A tenant deleted (op 21, decision 0032 §6) keeps its id and its name: neither is given
//! again, so a name in the tenants file after its tenant's deletion finds the deleted tenant
//! (whose tokens are refused), never a fresh one that a restore could confuse with it.
//!
//! Persistent maps (`imbl`), published with the contexts: a reader resolves a name without a
//! lock, and a snapshot never shows a registration its batch has not made durable.

use std::sync::Arc;

use crate::format::context_meta::is_tenant_name;
use crate::ids::{TENANTS_MAX, TenantId};

/// Every registered tenant. Tenant `t` is at index `t - 1`: ids are dense from 1, in the
/// order of their records.
#[derive(Clone, Debug, Default)]
pub struct Tenants {
    names: imbl::Vector<Arc<str>>,
    by_name: imbl::HashMap<Arc<str>, TenantId>,
    /// Tenants deleted (op 21), for good.
    deleted: imbl::OrdSet<TenantId>,
}

impl Tenants {
    /// Registered tenants, the operator aside.
    pub fn count(&self) -> u32 {
        self.names.len() as u32
    }

    /// The name of a registered tenant; `None` for the operator and an unknown id.
    pub fn name(&self, tenant_id: TenantId) -> Option<&str> {
        let index = (tenant_id.0 as usize).checked_sub(1)?;
        self.names.get(index).map(|name| name.as_ref())
    }

    pub fn by_name(&self, name: &str) -> Option<TenantId> {
        self.by_name.get(name).copied()
    }

    /// Whether a context may belong to `tenant_id`: the operator, or a registered tenant.
    pub fn exists(&self, tenant_id: TenantId) -> bool {
        tenant_id.is_operator() || tenant_id.0 <= self.count()
    }

    /// The id the next registration takes; `None` once `TENANTS_MAX` are registered.
    pub fn next_id(&self) -> Option<TenantId> {
        (self.count() < TENANTS_MAX).then(|| TenantId(self.count() + 1))
    }

    /// Whether `tenant_id` was deleted (op 21).
    pub fn is_deleted(&self, tenant_id: TenantId) -> bool {
        self.deleted.contains(&tenant_id)
    }

    /// Whether a tenant-deleted record of `tenant_id` follows the rules: a registered tenant
    /// (never the operator), not deleted yet.
    pub fn check_delete(&self, tenant_id: TenantId) -> Result<(), String> {
        if tenant_id.is_operator() || !self.exists(tenant_id) {
            return Err(format!(
                "tenant-deleted record names tenant {tenant_id}, which is not registered"
            ));
        }
        if self.is_deleted(tenant_id) {
            return Err(format!(
                "tenant-deleted record deletes tenant {tenant_id} again"
            ));
        }
        Ok(())
    }

    /// Marks `tenant_id` deleted, which `check_delete` accepted.
    pub fn delete(&mut self, tenant_id: TenantId) {
        assert!(
            self.check_delete(tenant_id).is_ok(),
            "a deletion is checked before it is applied"
        );
        self.deleted.insert(tenant_id);
    }

    /// Registered tenants in id order, deleted ones included.
    pub fn iter(&self) -> impl Iterator<Item = (TenantId, &str)> {
        self.names
            .iter()
            .enumerate()
            .map(|(index, name)| (TenantId(index as u32 + 1), name.as_ref()))
    }

    /// Whether a tenant record registering `name` as `tenant_id` follows the rules: the next
    /// id, a tenant name, a name not registered yet. The live path checks before it writes
    /// one; replay and ingest call it on every record they meet (a breach there is damage).
    pub fn check_register(&self, tenant_id: TenantId, name: &str) -> Result<(), String> {
        if Some(tenant_id) != self.next_id() {
            return Err(format!(
                "tenant record registers tenant {tenant_id}, expected {}",
                self.next_id()
                    .map_or("none (the registry is full)".into(), |id| id.to_string())
            ));
        }
        if !is_tenant_name(name) {
            return Err(format!("tenant record names {name:?}, not a tenant name"));
        }
        if let Some(existing) = self.by_name(name) {
            return Err(format!(
                "tenant record registers {name:?} again (tenant {existing} has it)"
            ));
        }
        Ok(())
    }

    /// Registers `name` as `tenant_id`, which `check_register` accepted.
    pub fn register(&mut self, tenant_id: TenantId, name: &str) {
        assert!(
            self.check_register(tenant_id, name).is_ok(),
            "a registration is checked before it is applied"
        );
        let name: Arc<str> = Arc::from(name);
        self.names.push_back(name.clone());
        self.by_name.insert(name, tenant_id);
        assert_eq!(self.names.len(), self.by_name.len(), "names are unique");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_from_one_and_names_unique() {
        let mut tenants = Tenants::default();
        assert!(tenants.exists(TenantId::OPERATOR));
        assert!(!tenants.exists(TenantId(1)));
        assert_eq!(tenants.next_id(), Some(TenantId(1)));
        tenants.register(TenantId(1), "acme");
        tenants.register(TenantId(2), "globex");
        assert_eq!(tenants.by_name("globex"), Some(TenantId(2)));
        assert!(tenants.exists(TenantId(2)) && !tenants.exists(TenantId(3)));
        assert!(tenants.check_register(TenantId(3), "acme").is_err());
        assert!(tenants.check_register(TenantId(4), "initech").is_err());
        assert!(tenants.check_register(TenantId(3), "Initech").is_err());
        assert!(tenants.check_register(TenantId(3), "initech").is_ok());
        let listed: Vec<_> = tenants.iter().collect();
        assert_eq!(listed, vec![(TenantId(1), "acme"), (TenantId(2), "globex")]);
    }

    #[test]
    fn a_deleted_tenant_keeps_its_id_and_name() {
        let mut tenants = Tenants::default();
        tenants.register(TenantId(1), "acme");
        assert!(tenants.check_delete(TenantId::OPERATOR).is_err());
        assert!(tenants.check_delete(TenantId(2)).is_err());
        tenants.delete(TenantId(1));
        assert!(tenants.is_deleted(TenantId(1)));
        assert!(tenants.check_delete(TenantId(1)).is_err());
        // Neither the name nor the id is given again.
        assert_eq!(tenants.by_name("acme"), Some(TenantId(1)));
        assert!(tenants.check_register(TenantId(2), "acme").is_err());
        assert_eq!(tenants.next_id(), Some(TenantId(2)));
    }
}
