//! Quotas (decision 0032 §3): the limits a tenant's writes are held to, checked by the single
//! writer that commits them. The server sets each tenant's limits from its tenants file, at
//! start and on every reload (`Engine::set_quotas`); the sequencer reads them when it creates
//! a context or opens a stream. Limits are keyed by the tenant's name, the file's identity:
//! a tenant the log registers later (a standby's, promoted) finds its limits waiting.
//!
//! Only limits live here. Usage is the writers' own state (the contexts' count per tenant,
//! the open streams), so a restart, a standby and a restore rebuild it from the log like the
//! rest, and a check and the write it admits happen in one step of one thread: two
//! connections racing at the edge cannot both pass.

/// The quotas of the tenants file. The server counts connections and appends per second
/// itself (they are no state of the store); the engine counts contexts and open streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Quota {
    Bytes,
    Contexts,
    AppendsPerS,
    Connections,
    Streams,
}

impl Quota {
    pub const ALL: [Quota; 5] = [
        Quota::Bytes,
        Quota::Contexts,
        Quota::AppendsPerS,
        Quota::Connections,
        Quota::Streams,
    ];

    /// Its place in `ALL`, for tables of counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its key in the tenants file, which messages name.
    pub fn key(self) -> &'static str {
        match self {
            Quota::Bytes => "quota_bytes",
            Quota::Contexts => "quota_contexts",
            Quota::AppendsPerS => "quota_appends_per_s",
            Quota::Connections => "quota_connections",
            Quota::Streams => "quota_streams",
        }
    }

    /// What it counts, for messages.
    pub fn unit(self) -> &'static str {
        match self {
            Quota::Bytes => "bytes",
            Quota::Contexts => "contexts",
            Quota::AppendsPerS => "appends in one second",
            Quota::Connections => "connections",
            Quota::Streams => "open streams",
        }
    }

    /// What frees some of it, for messages.
    pub fn remedy(self) -> &'static str {
        match self {
            Quota::Bytes => "delete or prune contexts and let a collection run",
            Quota::Contexts => "delete contexts",
            Quota::AppendsPerS => "slow down: it refills every second",
            Quota::Connections => "close a connection",
            Quota::Streams => "seal or abort a stream",
        }
    }
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// A write refused at a quota: which, its limit, the usage it met. Nothing of the write was
/// written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// The tenant's name (its TenantId as text when the store does not know the name).
    pub tenant: String,
    pub quota: Quota,
    pub limit: u64,
    pub usage: u64,
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let QuotaExceeded {
            tenant,
            quota,
            limit,
            usage,
        } = self;
        write!(
            f,
            "tenant {tenant} is at its {quota}: {usage} of {limit} {}; nothing was written \
             ({}, or the operator raises {quota} in the tenants file)",
            quota.unit(),
            quota.remedy()
        )
    }
}

impl QuotaExceeded {
    /// The quota a refusal's message names (its `Display`, which QUOTA_EXCEEDED carries on
    /// the wire): how a server that only holds the answer tells which quota refused it.
    pub fn quota_in(message: &str) -> Option<Quota> {
        Quota::ALL
            .into_iter()
            .find(|quota| message.contains(&format!(" is at its {quota}: ")))
    }
}

/// The limits of one tenant the engine checks; `None`: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantQuotas {
    pub contexts: Option<u64>,
    pub streams: Option<u64>,
}

impl TenantQuotas {
    pub fn is_unlimited(&self) -> bool {
        *self == TenantQuotas::default()
    }
}

/// Every tenant's limits, by tenant name: written by the server (`Engine::set_quotas`), read
/// by the sequencer without a lock. A tenant absent from it has no limits (the operator, who
/// has no name in the registry, never is in it).
#[derive(Debug, Default)]
pub(crate) struct QuotaTable {
    limits: papaya::HashMap<String, TenantQuotas>,
}

impl QuotaTable {
    pub fn of(&self, tenant: &str) -> TenantQuotas {
        self.limits.pin().get(tenant).copied().unwrap_or_default()
    }

    /// Replaces every tenant's limits by `quotas`: a tenant named there gets its limits in one
    /// step (never none between the old and the new), one not named loses its.
    pub fn replace(&self, quotas: &[(String, TenantQuotas)]) {
        let limits = self.limits.pin();
        for (tenant, quota) in quotas {
            if quota.is_unlimited() {
                limits.remove(tenant);
            } else {
                limits.insert(tenant.clone(), *quota);
            }
        }
        let kept: std::collections::HashSet<&str> = quotas
            .iter()
            .filter(|(_, quota)| !quota.is_unlimited())
            .map(|(tenant, _)| tenant.as_str())
            .collect();
        limits.retain(|tenant, _| kept.contains(tenant.as_str()));
    }
}

/// `Err` when one more of `quota` would pass `limit` at `usage`.
pub(crate) fn check(
    quota: Quota,
    limit: Option<u64>,
    usage: u64,
    tenant: impl FnOnce() -> String,
) -> Result<(), QuotaExceeded> {
    match limit {
        Some(limit) if usage >= limit => Err(QuotaExceeded {
            tenant: tenant(),
            quota,
            limit,
            usage,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replace_sets_named_tenants_and_clears_the_rest() {
        let table = QuotaTable::default();
        let two = TenantQuotas {
            contexts: Some(2),
            streams: None,
        };
        table.replace(&[("acme".into(), two), ("globex".into(), two)]);
        assert_eq!(table.of("acme"), two);
        let one = TenantQuotas {
            contexts: None,
            streams: Some(1),
        };
        table.replace(&[("globex".into(), one)]);
        assert!(table.of("acme").is_unlimited());
        assert_eq!(table.of("globex"), one);
        assert!(table.of("operator").is_unlimited());
    }

    #[test]
    fn a_check_refuses_the_one_past_the_limit_and_names_it() {
        let name = || "acme".to_string();
        assert!(check(Quota::Contexts, Some(2), 1, name).is_ok());
        assert!(check(Quota::Contexts, None, 1_000, name).is_ok());
        let refused = check(Quota::Contexts, Some(2), 2, name).unwrap_err();
        assert_eq!(refused.limit, 2);
        let text = refused.to_string();
        assert!(
            text.starts_with("tenant acme is at its quota_contexts: 2 of 2 contexts"),
            "{text}"
        );
        for quota in Quota::ALL {
            assert_eq!(Quota::ALL[quota.index()], quota);
            let refused = check(quota, Some(1), 1, name).unwrap_err();
            assert_eq!(QuotaExceeded::quota_in(&refused.to_string()), Some(quota));
        }
        assert_eq!(QuotaExceeded::quota_in("tenant acme is over"), None);
    }
}
