//! Per-tenant series (decision 0032 §3): each tenant's usage, its quotas' limits and its
//! refusals, labelled `tenant`. The label's cardinality is bounded: the `TENANT_SERIES_MAX`
//! most used tenants get their own series, the rest sum into `tenant="other"` (limits are
//! per tenant and are not summed: the rest's are left out).

use std::cmp::Reverse;

use ctxstore_engine::quota::Quota;
use prometheus::proto::{MetricFamily, MetricType};

use super::{MetricsSource, counter, family, gauge};

/// Tenants with series of their own; documented in docs/operations.md#metrics.
pub const TENANT_SERIES_MAX: usize = 100;

/// One tenant's figures, as a scrape reads them.
#[derive(Clone, Debug, Default)]
struct TenantFigures {
    name: String,
    contexts: u64,
    streams_open: u64,
    bytes: u64,
    connections: u64,
    refused: [u64; Quota::ALL.len()],
    limits: [Option<u64>; Quota::ALL.len()],
}

impl TenantFigures {
    /// What ranks a tenant among the most used.
    fn weight(&self) -> u64 {
        self.contexts + self.streams_open + self.bytes + self.connections
    }

    fn add(&mut self, other: &TenantFigures) {
        self.contexts += other.contexts;
        self.streams_open += other.streams_open;
        self.bytes += other.bytes;
        self.connections += other.connections;
        for (sum, refused) in self.refused.iter_mut().zip(other.refused) {
            *sum += refused;
        }
    }
}

impl MetricsSource {
    /// The tenants of the tenants file in force: none without one.
    pub(super) fn gather_tenants(&self, families: &mut Vec<MetricFamily>) {
        let Some(tenants) = &self.tenants else {
            return;
        };
        let mut figures: Vec<TenantFigures> = tenants
            .reports(&self.engine)
            .into_iter()
            .filter(|report| report.in_file)
            .map(|report| TenantFigures {
                name: report.name,
                contexts: report.contexts,
                streams_open: report.streams_open,
                bytes: report.stored_bytes,
                connections: report.connections,
                refused: report.refused,
                limits: report.limits,
            })
            .collect();
        figures.sort_by_key(|tenant| (Reverse(tenant.weight()), tenant.name.clone()));
        if figures.len() > TENANT_SERIES_MAX {
            let mut other = TenantFigures {
                name: "other".into(),
                ..TenantFigures::default()
            };
            for rest in figures.drain(TENANT_SERIES_MAX..) {
                other.add(&rest);
            }
            figures.push(other);
        }
        tenant_families(&figures, families);
    }
}

/// A usage gauge: its name, its help, its figure.
type UsageSeries = (&'static str, &'static str, fn(&TenantFigures) -> u64);

fn tenant_families(figures: &[TenantFigures], families: &mut Vec<MetricFamily>) {
    let gauges = |value: fn(&TenantFigures) -> u64| {
        figures
            .iter()
            .map(|tenant| gauge(&[("tenant", tenant.name.as_str())], value(tenant) as f64))
            .collect()
    };
    let usage: [UsageSeries; 4] = [
        (
            "ctxstore_tenant_contexts",
            "A tenant's live contexts (quota_contexts).",
            |tenant| tenant.contexts,
        ),
        (
            "ctxstore_tenant_streams_open",
            "A tenant's open streams (quota_streams).",
            |tenant| tenant.streams_open,
        ),
        (
            "ctxstore_tenant_stored_bytes",
            "Stored bytes of a tenant's blobs, every shard's (quota_bytes).",
            |tenant| tenant.bytes,
        ),
        (
            "ctxstore_tenant_connections",
            "A tenant's open connections, over every network core (quota_connections).",
            |tenant| tenant.connections,
        ),
    ];
    for (name, help, value) in usage {
        families.push(family(name, help, MetricType::GAUGE, gauges(value)));
    }
    let mut limits = Vec::new();
    let mut refused = Vec::new();
    for tenant in figures {
        for quota in Quota::ALL {
            let labels = [("tenant", tenant.name.as_str()), ("quota", quota.key())];
            if let Some(limit) = tenant.limits[quota.index()] {
                limits.push(gauge(&labels, limit as f64));
            }
            let count = tenant.refused[quota.index()];
            if count > 0 {
                refused.push(counter(&labels, count));
            }
        }
    }
    families.push(family(
        "ctxstore_tenant_quota_limit",
        "A tenant's quota as its tenants file sets it (quotas it leaves out: no series).",
        MetricType::GAUGE,
        limits,
    ));
    families.push(family(
        "ctxstore_tenant_quota_refusals_total",
        "Requests refused with QUOTA_EXCEEDED (HELLOs at quota_connections included), by \
         tenant and quota.",
        MetricType::COUNTER,
        refused,
    ));
}
