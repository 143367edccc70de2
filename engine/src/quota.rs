//! Quotas (decision 0032 §3): the limits a tenant's writes are held to, checked by the single
//! writer that commits them. The server sets each tenant's limits from its tenants file, at
//! start and on every reload (`Engine::set_quotas`); the sequencer reads them when it creates
//! a context or opens a stream. Limits are keyed by the tenant's name, the file's identity:
//! a tenant the log registers later (a standby's, promoted) finds its limits waiting.
//!
//! Only limits live here, and the bytes shards have admitted but not yet published. Usage is
//! the writers' own state (the contexts' count per tenant and the open streams, the
//! sequencer's; each shard's bytes per tenant, counted from its index), so a restart, a
//! standby and a restore rebuild it like the rest. Contexts and streams are checked in one
//! step of the sequencer's thread. Bytes are stored by many shards at once, so a shard
//! reserves a put's new bytes here, against every shard's published bytes plus every
//! reservation, with one compare-and-swap on the tenant's reservation word: two puts racing
//! at the edge on different shards cannot both pass. A reservation is let go once its batch
//! is published (its bytes then count in the shard) or failed.

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
    /// Stored bytes of its blobs: every record its shards hold (header, body, padding).
    pub bytes: Option<u64>,
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
    /// Bytes shards admitted for each tenant and have not yet published (or failed).
    reserved: papaya::HashMap<TenantId, AtomicU64>,
}

impl QuotaTable {
    /// Whether any tenant has a limit (a store without one skips every name look-up).
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// Reserves `bytes` of `tenant_id`'s `quota_bytes` for a put a shard admits, or refuses
    /// the put whole. `tenant`: its name and limits (`None`: none); `published`: its bytes
    /// every shard holds now. Let go with `release_bytes` once the batch is published or
    /// failed.
    pub fn reserve_bytes(
        &self,
        tenant_id: TenantId,
        tenant: Option<(&str, TenantQuotas)>,
        bytes: u64,
        published: impl Fn() -> u64,
    ) -> Result<(), QuotaExceeded> {
        let reserved = self.reserved.pin();
        let held = reserved.get_or_insert_with(tenant_id, || AtomicU64::new(0));
        let limit = tenant.and_then(|(name, quotas)| Some((name, quotas.bytes?)));
        let mut current = held.load(Ordering::Acquire);
        loop {
            if let Some((name, limit)) = limit {
                let usage = published().saturating_add(current);
                if usage.saturating_add(bytes) > limit {
                    return Err(QuotaExceeded {
                        tenant: name.to_string(),
                        quota: Quota::Bytes,
                        limit,
                        usage,
                    });
                }
            }
            match held.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => current = now,
            }
        }
    }

    /// Lets go of a reservation `reserve_bytes` made.
    pub fn release_bytes(&self, tenant_id: TenantId, bytes: u64) {
        let reserved = self.reserved.pin();
        let held = reserved.get(&tenant_id);
        assert!(held.is_some(), "a release follows its reservation");
        if let Some(held) = held {
            let before = held.fetch_sub(bytes, Ordering::AcqRel);
            assert!(before >= bytes, "a release gives back what was reserved");
        }
    }

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

use std::sync::atomic::{AtomicU64, Ordering};

use ctxstore_vocab::ids::TenantId;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replace_sets_named_tenants_and_clears_the_rest() {
        let table = QuotaTable::default();
        let two = TenantQuotas {
            contexts: Some(2),
            ..TenantQuotas::default()
        };
        table.replace(&[("acme".into(), two), ("globex".into(), two)]);
        assert_eq!(table.of("acme"), two);
        let one = TenantQuotas {
            streams: Some(1),
            ..TenantQuotas::default()
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

    #[test]
    fn byte_reservations_hold_across_racing_shards_and_are_let_go() {
        let table = QuotaTable::default();
        let quotas = TenantQuotas {
            bytes: Some(1_000),
            ..TenantQuotas::default()
        };
        let acme = Some(("acme", quotas));
        let published = AtomicU64::new(400);
        let now = || published.load(Ordering::Relaxed);
        // Eight shards race 100-byte puts against 600 bytes of room: six pass.
        let passed = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    if table.reserve_bytes(TenantId(1), acme, 100, now).is_ok() {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(passed.load(Ordering::Relaxed), 6);
        let refused = table.reserve_bytes(TenantId(1), acme, 1, now).unwrap_err();
        assert_eq!(
            (refused.quota, refused.limit, refused.usage),
            (Quota::Bytes, 1_000, 1_000)
        );
        // Published, then let go: the usage is the same, the room too.
        published.fetch_add(600, Ordering::Relaxed);
        table.release_bytes(TenantId(1), 600);
        assert!(table.reserve_bytes(TenantId(1), acme, 1, now).is_err());
        // Another tenant, and a tenant without a limit, reserve freely.
        assert!(table.reserve_bytes(TenantId(2), None, 1 << 40, now).is_ok());
    }
}
