//! `ping`, `stats` (with garbage collection's fields, `null` from a server without them, and
//! replication's, `replication`: `null` from a server older than protocol version 3; with a
//! tenant's token, the tenant's own usage only), `gc`
//! (`--gc-timeout`) and `backup --to DIR` (`--backup-timeout`).

use std::time::{Duration, Instant};

use ctxstore_client::blocking::Client;
use ctxstore_client::{BackupReport, ClientError, ErrorCode, GcReport, ReplicationStats};
use serde_json::{Value, json};

use crate::output::Output;

/// `backup`: one BACKUP request, waiting up to `--backup-timeout`.
pub(crate) fn backup(
    client: &Client,
    out: &Output,
    dir: String,
    timeout: Duration,
) -> anyhow::Result<()> {
    let report = match client.backup(dir.clone()) {
        Ok(report) => report,
        Err(error @ ClientError::Timeout { .. }) => {
            let waited = humantime::format_duration(timeout);
            return Err(anyhow::Error::new(error).context(format!(
                "the server did not finish the backup into {dir} within {waited}; it may still \
                 be writing it (wait longer with --backup-timeout)"
            )));
        }
        Err(error) => {
            return Err(anyhow::Error::new(error).context(format!("backing up into {dir}")));
        }
    };
    out.backup(&report)
}

/// `gc`: one GC request, waiting up to `--gc-timeout`.
pub(crate) fn gc(client: &Client, out: &Output, timeout: Duration) -> anyhow::Result<()> {
    let report = match client.gc() {
        Ok(report) => report,
        Err(error @ ClientError::Timeout { .. }) => {
            let waited = humantime::format_duration(timeout);
            return Err(anyhow::Error::new(error).context(format!(
                "the server did not finish the garbage collection within {waited}; it may still \
                 be running it (wait longer with --gc-timeout)"
            )));
        }
        Err(error) => {
            return Err(anyhow::Error::new(error).context("garbage collection"));
        }
    };
    out.gc(&report)
}

/// `ping`: one PING round trip, timed here.
pub(crate) fn ping(client: &Client, out: &Output, addr: &str) -> anyhow::Result<()> {
    let nonce = u64::from(std::process::id());
    let started = Instant::now();
    client.ping(nonce)?;
    let rtt_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    if out.json {
        out.line(&json!({ "rtt_us": rtt_us }))
    } else {
        out.text(&format!("pong from {addr}: {rtt_us} µs"))
    }
}

/// `stats`: the server's counters, one JSON object or one aligned `name value` line each
/// (garbage collection's `null` from a server without them).
pub(crate) fn stats(client: &Client, out: &Output) -> anyhow::Result<()> {
    let stats = match client.stats() {
        Ok(stats) => stats,
        // A tenant's token: the store's figures are the operator's; its own usage is its
        // TENANT_LIST entry, the only one it is answered.
        Err(
            refused @ ClientError::Server {
                code: ErrorCode::Unauthorized,
                ..
            },
        ) => return tenant_stats(client, out, refused),
        Err(error) => return Err(error.into()),
    };
    let replication = match client.replication_stats() {
        Ok(replication) => {
            let mut value = replication_json(&replication);
            // Version 4's ROLE: the lease, the gate, failovers and remote acknowledgements.
            match client.role() {
                Ok(role) => add_role(&mut value, &role),
                Err(ClientError::Unsupported { .. }) => {}
                Err(error) => return Err(anyhow::Error::new(error).context("asking ROLE")),
            }
            value
        }
        // A server older than version 3 has no such figures: said as null, like gc's.
        Err(ClientError::Unsupported { .. }) => Value::Null,
        Err(error) => return Err(anyhow::Error::new(error).context("asking replication's figures")),
    };
    // Usage per tenant (TENANT_LIST, version 5): an object by name, empty without tenants,
    // null from an older server.
    let tenants = match client.tenants() {
        Ok(tenants) => tenants_usage(&tenants),
        Err(ClientError::Unsupported { .. }) => Value::Null,
        Err(error) => return Err(anyhow::Error::new(error).context("asking the tenants' usage")),
    };
    let value = json!({
        "turns": stats.turns,
        "contexts": stats.contexts,
        "blobs": stats.blobs,
        "logical_bytes": stats.logical_bytes,
        "unique_bytes": stats.unique_bytes,
        "stored_bytes": stats.stored_bytes,
        "dedup_hits": stats.dedup_hits,
        "read_only": stats.read_only,
        "connections": stats.connections,
        "requests_total": stats.requests_total,
        "errors_total": stats.errors_total,
        "uptime_ms": stats.uptime_ms,
        "live_bytes": stats.live_bytes,
        "dead_bytes": stats.dead_bytes,
        "gc_runs": stats.gc_runs,
        "bytes_reclaimed_total": stats.bytes_reclaimed_total,
        "tenants": tenants,
        "replication": replication,
    });
    if out.json {
        out.line(&value)
    } else {
        // One aligned `name value` line per figure: the store's, then replication's by their
        // dotted path (`replication.backlog.objects`), aligned apart so that the store's lines
        // read as they always did; failure kinds that never happened are left out.
        let mut lines = Vec::new();
        flatten("", &value, &mut lines);
        let (replication, rest): (Vec<_>, Vec<_>) = lines
            .into_iter()
            .partition(|(name, _)| name.starts_with("replication"));
        let (tenants, store): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|(name, _)| name.starts_with("tenants."));
        let mut text = String::new();
        for group in [store, tenants, replication] {
            let width = group.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
            for (name, value) in group {
                text.push_str(&format!("{name:<width$} {value}\n"));
            }
        }
        out.text(text.trim_end())
    }
}

/// `stats` with a tenant's token: `{"tenants": {NAME: usage}}`, its own usage only (the
/// operator's `stats` carries the same object for every tenant, beside the store's figures).
/// Anything else (not a tenant's token, a server without tenants) is `refused`, STATS's
/// answer.
fn tenant_stats(client: &Client, out: &Output, refused: ClientError) -> anyhow::Result<()> {
    let own = match client.tenants() {
        Ok(own) if own.len() == 1 => own,
        _ => return Err(refused.into()),
    };
    let value = json!({ "tenants": tenants_usage(&own) });
    if out.json {
        return out.line(&value);
    }
    let mut lines = Vec::new();
    flatten("", &value, &mut lines);
    let width = lines.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let text: Vec<String> = lines
        .into_iter()
        .map(|(name, value)| format!("{name:<width$} {value}"))
        .collect();
    out.text(&text.join("\n"))
}

/// `stats --json`'s `tenants` object: each tenant's usage by name (`ctxstore tenant list`
/// has its quotas and refusals too).
fn tenants_usage(tenants: &[ctxstore_client::Tenant]) -> Value {
    let usage: serde_json::Map<String, Value> = tenants
        .iter()
        .map(|tenant| {
            let deleted = tenant.flags & ctxstore_client::tenant_flags::DELETED != 0;
            let usage = json!({
                "contexts": tenant.contexts,
                "streams_open": tenant.streams_open,
                "stored_bytes": tenant.stored_bytes,
                "connections": tenant.connections,
                "deleted": deleted,
            });
            (tenant.name.clone(), usage)
        })
        .collect();
    Value::Object(usage)
}

/// `stats --json`'s `replication` object, field by field in docs/operations.md#replication.
fn replication_json(stats: &ReplicationStats) -> Value {
    let failures: serde_json::Map<String, Value> = stats
        .failures
        .iter()
        .map(|(kind, count)| (kind.clone(), json!(count)))
        .collect();
    json!({
        "role": stats.role.name(),
        "state": stats.state.name(),
        "reason": stats.reason,
        "promoting": stats.promoting,
        "target": stats.target,
        "primary": stats.primary,
        "epoch": stats.epoch,
        "generation": stats.generation,
        "seq": stats.seq,
        "records": stats.records,
        "records_unix_ms": stats.records_unix_ms,
        "lag_ms": stats.lag_ms,
        "lag_bytes": stats.lag_bytes,
        "objects_total": stats.objects_total,
        "bytes_total": stats.bytes_total,
        "last_success_unix_ms": stats.last_success_unix_ms,
        "failures": failures,
        "backlog": {
            "objects": stats.backlog_objects,
            "bytes": stats.lag_bytes,
            "segment_bytes_max": stats.segment_bytes_max,
        },
    })
}

/// ROLE's figures added to `stats`' `replication` object (decision 0031 §10; a version-3
/// server has none): `lease_holder` is empty without a lease.
fn add_role(value: &mut Value, role: &ctxstore_client::Role) {
    let Value::Object(fields) = value else {
        return;
    };
    let extra = json!({
        "accepts_writes": role.accepts_writes,
        "ack_after": match role.ack_after {
            ctxstore_client::AckAfter::Local => "local",
            ctxstore_client::AckAfter::Remote => "remote",
        },
        "lease_holder": role.holder,
        "lease_ms": role.lease_ms,
        "lease_age_ms": role.lease_age_ms,
        "ack_open_ms": role.ack_open_ms,
        "failovers": role.failovers,
        "last_failover_ms": role.last_failover_ms,
        "remote_acks": {
            "waiting": role.remote_waiting,
            "total": role.remote_acks_total,
            "unconfirmed": role.remote_unconfirmed_total,
            "p50_us": role.remote_ack_us_p50,
            "p99_us": role.remote_ack_us_p99,
        },
    });
    if let Value::Object(extra) = extra {
        fields.extend(extra);
    }
}

/// `value`'s leaves as (dotted name, text), objects walked in their order.
fn flatten(prefix: &str, value: &Value, lines: &mut Vec<(String, String)>) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                if path.starts_with("replication.failures.") && field.as_u64() == Some(0) {
                    continue;
                }
                flatten(&path, field, lines);
            }
        }
        Value::String(text) => lines.push((prefix.to_string(), text.clone())),
        other => lines.push((prefix.to_string(), other.to_string())),
    }
}

impl Output {
    /// What `backup` prints.
    pub(crate) fn backup(&self, report: &BackupReport) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "backup_dir": report.backup_dir,
                "turns": report.turns,
                "blobs": report.blobs,
                "bytes": report.bytes,
                "linked_bytes": report.linked_bytes,
                "duration_ms": report.duration_ms,
            }));
        }
        self.text(&format!(
            "backup in {}: {} turns, {} blobs, {} bytes ({} hard-linked), {} ms",
            report.backup_dir,
            report.turns,
            report.blobs,
            report.bytes,
            report.linked_bytes,
            report.duration_ms
        ))
    }

    pub(crate) fn gc(&self, report: &GcReport) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turns_dead": report.turns_dead,
                "blobs_dead": report.blobs_dead,
                "bytes_reclaimed": report.bytes_reclaimed,
                "packs_compacted": report.packs_compacted,
                "live_bytes": report.live_bytes,
                "dead_bytes": report.dead_bytes,
                "duration_ms": report.duration_ms,
            }));
        }
        self.text(&format!(
            "garbage collection: {} turns and {} blobs collected, {} bytes reclaimed ({} packs \
             compacted); {} live bytes, {} dead bytes left; {} ms",
            report.turns_dead,
            report.blobs_dead,
            report.bytes_reclaimed,
            report.packs_compacted,
            report.live_bytes,
            report.dead_bytes,
            report.duration_ms
        ))
    }
}
