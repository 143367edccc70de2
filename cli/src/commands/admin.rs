//! `ping`, `stats` (with garbage collection's fields, `null` from a server without them),
//! `gc` (`--gc-timeout`) and `backup --to DIR` (`--backup-timeout`).

use std::time::{Duration, Instant};

use ctxstore_client::blocking::Client;
use ctxstore_client::{BackupReport, ClientError, GcReport};
use serde_json::json;

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
    let stats = client.stats()?;
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
    });
    if out.json {
        out.line(&value)
    } else {
        let mut text = String::new();
        if let Some(fields) = value.as_object() {
            let width = fields.keys().map(String::len).max().unwrap_or(0);
            for (name, value) in fields {
                text.push_str(&format!("{name:<width$} {value}\n"));
            }
        }
        out.text(text.trim_end())
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
