//! The tenants the server serves (decision 0032 §1): the tenants file in force and its token
//! table, what HELLO looks a token up in, replaced whole on SIGHUP. The file is the one
//! source of tokens and rights; the store's TenantIds are the engine's (tenant records,
//! replicated), given to a name by `Engine::register_tenant` when a primary first reads it.
//!
//! Read at HELLO only (one `RwLock` read and an `Arc` clone per connection, never per
//! request); a connection keeps the rights it was given at HELLO for its life, so a reload
//! changes who may connect from then on, not the connections already open. Quotas are the
//! exception: a load and every reload set them in force at once (decision 0032 §3), the
//! engine's (`Engine::set_quotas`: contexts, open streams) and the server's (`quota::Meters`:
//! connections, appends per second), for open connections too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use ctxstore_engine::quota::{Quota, TenantQuotas};
use ctxstore_engine::tenants::TenantUsage;
use ctxstore_engine::{Engine, EngineError, ErrorKind, TenantId};

use crate::quota::Meters;

use crate::tenants_file::{Rights, TenantEntry, TenantsFile, TenantsFileError, TokenTable};

/// A tenants file and its token table, checked whole.
#[derive(Debug)]
pub struct Tenancy {
    file: TenantsFile,
    tokens: TokenTable,
}

impl Tenancy {
    fn new(file: TenantsFile) -> Tenancy {
        let tokens = TokenTable::new(&file);
        Tenancy { file, tokens }
    }

    /// The tenant whose token has this BLAKE3 `digest` (constant in time, `TokenTable::find`).
    pub fn find(&self, digest: &[u8; 32]) -> Option<(&str, Rights)> {
        let index = self.tokens.find(digest)?;
        let entry: &TenantEntry = self.file.tenants.get(index)?;
        Some((entry.name.as_str(), entry.rights))
    }

    pub fn len(&self) -> usize {
        self.file.tenants.len()
    }

    /// The file's tenants, in its order.
    pub fn entries(&self) -> &[TenantEntry] {
        &self.file.tenants
    }

    pub fn is_empty(&self) -> bool {
        self.file.tenants.is_empty()
    }
}

/// The tenancy in force, shared by the cores; replaced whole by `reload`.
#[derive(Debug)]
pub struct Tenants {
    path: PathBuf,
    current: RwLock<Arc<Tenancy>>,
    /// Every tenant's connections and appends, kept across reloads.
    meters: Meters,
}

impl Tenants {
    /// Reads and checks the file (a malformed one is refused, naming its line) and registers
    /// its tenants in the store.
    pub fn load(path: &Path, store: &Engine) -> Result<Tenants, TenantsFileError> {
        let file = TenantsFile::load(path)?;
        register(store, &file);
        store.set_quotas(&engine_quotas(&file));
        Ok(Tenants {
            path: path.to_path_buf(),
            meters: Meters::new(&file),
            current: RwLock::new(Arc::new(Tenancy::new(file))),
        })
    }

    /// The tenancy in force now.
    pub fn current(&self) -> Arc<Tenancy> {
        // A writer that panicked left a whole `Arc` behind (the swap is one assignment).
        let current = self
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        current.clone()
    }

    /// Reads the file again (SIGHUP). A file that fails a check changes nothing: the old
    /// one stays in force, and the error says why. Answers how many tenants it names.
    pub fn reload(&self, store: &Engine) -> Result<usize, TenantsFileError> {
        let file = TenantsFile::load(&self.path)?;
        register(store, &file);
        store.set_quotas(&engine_quotas(&file));
        self.meters.set_limits(&file);
        let tenancy = Arc::new(Tenancy::new(file));
        let count = tenancy.len();
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *current = tenancy;
        Ok(count)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn meters(&self) -> &Meters {
        &self.meters
    }
}

/// One tenant as the operator sees it (TENANT_LIST, `/metrics`): who it is, what it uses, its
/// limits, its refusals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantReport {
    pub name: String,
    /// `None` while the store has not registered the name.
    pub tenant_id: Option<TenantId>,
    /// Deleted (TENANT_DELETE, decision 0032 §6): its tokens are refused for good.
    pub deleted: bool,
    /// The tenants file in force names it (else: a tenant the store holds data of, removed
    /// from the file since).
    pub in_file: bool,
    pub rights: Rights,
    pub contexts: u64,
    pub streams_open: u64,
    pub stored_bytes: u64,
    pub connections: u64,
    /// Each quota's limit (`Quota::index`); `None`: none.
    pub limits: [Option<u64>; Quota::ALL.len()],
    /// QUOTA_EXCEEDED answers since the server started, per quota (`Quota::index`).
    pub refused: [u64; Quota::ALL.len()],
}

impl Tenants {
    /// Every tenant of the file in force and every tenant the store registered, in name
    /// order, from one look at the engine's figures.
    pub fn reports(&self, store: &Engine) -> Vec<TenantReport> {
        let usage = store.tenants_usage();
        let tenancy = self.current();
        let mut reports: std::collections::BTreeMap<String, TenantReport> = tenancy
            .entries()
            .iter()
            .map(|entry| {
                let report = TenantReport {
                    name: entry.name.clone(),
                    in_file: true,
                    rights: entry.rights,
                    ..TenantReport::default()
                };
                (entry.name.clone(), report)
            })
            .collect();
        for registered in store.tenants() {
            let report = reports
                .entry(registered.name.clone())
                .or_insert_with(|| TenantReport {
                    name: registered.name.clone(),
                    ..TenantReport::default()
                });
            report.tenant_id = Some(registered.tenant_id);
            report.deleted = registered.deleted;
        }
        for report in reports.values_mut() {
            let used = report
                .tenant_id
                .and_then(|tenant_id| usage.get(&tenant_id).copied())
                .unwrap_or_default();
            self.fill(store, report, used);
        }
        reports.into_values().collect()
    }

    /// `name`'s report alone (a tenant's own TENANT_LIST and console): what `reports` says of
    /// it, without looking at every other tenant. `None` for a name neither the file in force
    /// nor the store knows.
    pub fn report_of(&self, store: &Engine, name: &str) -> Option<TenantReport> {
        let tenancy = self.current();
        let entry = tenancy.entries().iter().find(|entry| entry.name == name);
        let tenant_id = store.tenant_by_name(name);
        if entry.is_none() && tenant_id.is_none() {
            return None;
        }
        let mut report = TenantReport {
            name: name.to_string(),
            tenant_id,
            deleted: tenant_id.is_some_and(|tenant_id| store.tenant_deleted(tenant_id)),
            in_file: entry.is_some(),
            rights: entry.map(|entry| entry.rights).unwrap_or_default(),
            ..TenantReport::default()
        };
        let used = tenant_id.map(|tenant_id| store.tenant_usage(tenant_id));
        self.fill(store, &mut report, used.unwrap_or_default());
        Some(report)
    }

    /// The usage, limits and refusals of `report`'s tenant, `used` being its engine usage.
    fn fill(&self, store: &Engine, report: &mut TenantReport, used: TenantUsage) {
        report.contexts = used.contexts;
        report.streams_open = used.streams_open;
        report.stored_bytes = used.bytes;
        let engine_limits = store.quotas_of(&report.name);
        report.limits[Quota::Contexts.index()] = engine_limits.contexts;
        report.limits[Quota::Streams.index()] = engine_limits.streams;
        report.limits[Quota::Bytes.index()] = engine_limits.bytes;
        if let Some(meter) = self.meters.get(&report.name) {
            report.connections = meter.connections();
            report.refused = Quota::ALL.map(|quota| meter.refused(quota));
            for quota in [Quota::Connections, Quota::AppendsPerS] {
                report.limits[quota.index()] = meter.limit(quota);
            }
        }
    }
}

/// The limits of `file` the engine checks, by tenant name.
fn engine_quotas(file: &TenantsFile) -> Vec<(String, TenantQuotas)> {
    let quotas = file.tenants.iter().map(|entry| {
        let quotas = TenantQuotas {
            contexts: entry.quotas.contexts,
            streams: entry.quotas.streams,
            bytes: entry.quotas.bytes,
        };
        (entry.name.clone(), quotas)
    });
    quotas.collect()
}

/// Gives each name of `file` its TenantId (a tenant record, once per name in the store's
/// life). A standby takes its tenants from its primary's log instead: its refusal is expected
/// and a tenant it does not know yet is refused at HELLO until it does. Any other failure is
/// logged; the tenant's tokens are refused until a later reload registers it.
fn register(store: &Engine, file: &TenantsFile) {
    for entry in &file.tenants {
        if let Some(tenant_id) = store.tenant_by_name(&entry.name) {
            if store.tenant_deleted(tenant_id) {
                tracing::warn!(
                    tenant = %entry.name,
                    "the tenants file names a deleted tenant: its tokens are refused (a deleted \
                     tenant's name is never given again; remove it from the file)"
                );
            }
            continue;
        }
        match pollster::block_on(store.register_tenant(&entry.name)) {
            Ok(tenant_id) => {
                tracing::info!(tenant = %entry.name, tenant_id = tenant_id.0, "tenant registered");
            }
            Err(error) if is_standby_refusal(&error) => {}
            Err(error) => {
                tracing::error!(tenant = %entry.name, %error, "registering a tenant failed");
            }
        }
    }
}

fn is_standby_refusal(error: &EngineError) -> bool {
    matches!(error.kind(), ErrorKind::NotPrimary | ErrorKind::ReadOnly)
}
