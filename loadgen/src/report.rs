//! Recording and reporting: one HdrHistogram per operation (microseconds), merged across
//! workers; the final table; the `--json` report.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::ops::Op;

/// Latencies from 1 µs to 1 hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, 3_600_000_000, 3) {
        Ok(histogram) => histogram,
        Err(error) => panic!("histogram bounds are constants: {error}"),
    }
}

/// One worker's measurements.
#[derive(Debug, Clone)]
pub struct Recorder {
    histograms: Vec<Histogram<u64>>,
    errors: Vec<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            histograms: Op::ALL.iter().map(|_| new_histogram()).collect(),
            errors: vec![0; Op::ALL.len()],
        }
    }
}

impl Recorder {
    pub fn record(&mut self, op: Op, latency: Duration) {
        let micros = (latency.as_nanos() / 1000).max(1) as u64;
        // Beyond an hour is clamped to the bound: still counted, never lost.
        let histogram = &mut self.histograms[op.index()];
        let _ = histogram.record(micros.min(histogram.high()));
    }

    pub fn error(&mut self, op: Op) {
        self.errors[op.index()] += 1;
    }

    pub fn merge(&mut self, other: &Recorder) {
        for (mine, theirs) in self.histograms.iter_mut().zip(&other.histograms) {
            let _ = mine.add(theirs);
        }
        for (mine, theirs) in self.errors.iter_mut().zip(&other.errors) {
            *mine += theirs;
        }
    }

    pub fn histogram(&self, op: Op) -> &Histogram<u64> {
        &self.histograms[op.index()]
    }

    pub fn errors(&self, op: Op) -> u64 {
        self.errors[op.index()]
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyUs {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpReport {
    pub count: u64,
    pub errors: u64,
    pub throughput_per_s: f64,
    pub latency_us: LatencyUs,
}

/// What the store says about itself at the end of the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerReport {
    pub turns: Option<u64>,
    pub blobs: Option<u64>,
    pub logical_bytes: Option<u64>,
    pub stored_bytes: Option<u64>,
    /// Bytes the store occupies on disk (data directory), where the backend can tell.
    pub disk_bytes: Option<u64>,
    pub dedup_hits: Option<u64>,
}

/// Bytes a store occupies on disk, measured both ways where its files are at hand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskUsage {
    /// Sum of the files' allocated blocks (st_blocks × 512): what the disk holds, prepared
    /// (preallocated) space and partly filled blocks included.
    pub allocated_bytes: Option<u64>,
    /// Sum of the files' lengths, or the store's own size figure where the files are not at
    /// hand (PostgreSQL).
    pub file_bytes: Option<u64>,
    /// What was measured, for whoever reads the report.
    pub measured: String,
}

impl DiskUsage {
    /// The headline figure: allocated blocks where known, else the file sizes.
    pub fn bytes(&self) -> Option<u64> {
        self.allocated_bytes.or(self.file_bytes)
    }
}

/// Where the bytes-sent figure of a growing run comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentCounted {
    /// Request bytes the client wrote to its connections (frames, chunk uploads, look-ups).
    Wire,
    /// Payload bytes handed to the backend: what a store without sub-blob dedup sends at
    /// least; the peers' drivers count no wire bytes.
    Payload,
}

impl SentCounted {
    pub fn name(self) -> &'static str {
        match self {
            SentCounted::Wire => "wire",
            SentCounted::Payload => "payload",
        }
    }
}

/// The growing-state workload's figures (issue 16): what the states cost the store.
#[derive(Clone, Debug, PartialEq)]
pub struct GrowingReport {
    pub contexts: u64,
    pub steps: u32,
    pub message_bytes: usize,
    /// Appends sent (acknowledged or failed).
    pub appends: u64,
    /// Sum of the acknowledged states' lengths.
    pub logical_bytes: u64,
    /// Sum over contexts of each one's last acknowledged state.
    pub final_state_bytes_total: u64,
    pub disk: Option<DiskUsage>,
    pub bytes_sent: u64,
    pub bytes_sent_counted: SentCounted,
}

impl GrowingReport {
    pub fn final_state_bytes_mean(&self) -> Option<f64> {
        (self.contexts > 0).then(|| self.final_state_bytes_total as f64 / self.contexts as f64)
    }

    /// Bytes on disk ÷ the sum of the final states (with one context: ÷ its final state).
    /// Keeping only the final states would cost about 1× (before compression).
    pub fn disk_per_final_state(&self) -> Option<f64> {
        let disk = self.disk.as_ref()?.bytes()?;
        (self.final_state_bytes_total > 0)
            .then(|| disk as f64 / self.final_state_bytes_total as f64)
    }

    pub fn bytes_sent_per_append(&self) -> Option<f64> {
        (self.appends > 0).then(|| self.bytes_sent as f64 / self.appends as f64)
    }

    pub fn to_json(&self) -> Value {
        let disk = self.disk.as_ref();
        json!({
            "contexts": self.contexts,
            "steps": self.steps,
            "message_bytes": self.message_bytes,
            "appends": self.appends,
            "logical_bytes": self.logical_bytes,
            "final_state_bytes_total": self.final_state_bytes_total,
            "final_state_bytes_mean": self.final_state_bytes_mean(),
            "disk_bytes": disk.and_then(DiskUsage::bytes),
            "disk_allocated_bytes": disk.and_then(|disk| disk.allocated_bytes),
            "disk_file_bytes": disk.and_then(|disk| disk.file_bytes),
            "disk_measured": disk.map(|disk| disk.measured.clone()),
            "disk_per_final_state": self.disk_per_final_state(),
            "bytes_sent": self.bytes_sent,
            "bytes_sent_per_append": self.bytes_sent_per_append(),
            "bytes_sent_counted": self.bytes_sent_counted.name(),
        })
    }

    pub fn table(&self) -> String {
        let show = |value: Option<u64>| value.map_or_else(|| "-".into(), |v| v.to_string());
        let ratio = |value: Option<f64>| value.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
        let disk = self.disk.clone().unwrap_or_default();
        let counted = match self.bytes_sent_counted {
            SentCounted::Wire => "request bytes the client wrote",
            SentCounted::Payload => "payload bytes handed to the backend, not wire bytes",
        };
        format!(
            "growing: {} contexts × {} steps, messages ~{} B: {} appends, {} B logical, \
             final state {} B (mean)\n\
             disk: {} B allocated, {} B in file sizes ({}): {}× the final states\n\
             sent per append: {} B ({counted})",
            self.contexts,
            self.steps,
            self.message_bytes,
            self.appends,
            self.logical_bytes,
            self.final_state_bytes_mean()
                .map_or_else(|| "-".into(), |mean| format!("{mean:.0}")),
            show(disk.allocated_bytes),
            show(disk.file_bytes),
            if disk.measured.is_empty() {
                "not measured"
            } else {
                &disk.measured
            },
            ratio(self.disk_per_final_state()),
            self.bytes_sent_per_append()
                .map_or_else(|| "-".into(), |sent| format!("{sent:.0}")),
        )
    }
}

/// The streaming workload's figures (issue 32), beside its latencies (`delta`, `delivery`,
/// `seal`, `stream_open` in the operations).
#[derive(Clone, Debug, PartialEq)]
pub struct StreamingReport {
    pub streams: u64,
    pub deltas_acknowledged: u64,
    /// Deltas whose bytes their reader got, checked byte for byte against what was sent.
    pub deltas_delivered: u64,
    /// Reads that answered bytes other than the writer's (or cut a delta at the end).
    pub delivery_mismatches: u64,
    pub streams_sealed: u64,
    pub streams_aborted: u64,
    /// The server process's CPU time (user + system) from the start of the measured part
    /// until every writer was done (last seals included).
    pub server_cpu_s: Option<f64>,
    pub server_cpu_us_per_delta: Option<f64>,
    /// The load generator's own CPU time over the same part (it shares the machine's cores
    /// with the server; a spawned server's time is not in it), per measured delta.
    pub loadgen_cpu_us_per_delta: Option<f64>,
    /// Seconds from the start of the measured part until the readers were done.
    pub server_cpu_measured_s: f64,
    /// Acknowledged deltas with an intended time in the measured part.
    pub deltas_measured: u64,
    /// The store's files once every stream is sealed, and after its collection.
    pub disk_after_seal: Option<DiskUsage>,
    pub disk_after_gc: Option<DiskUsage>,
    /// ctxstore's log (`turns.log` + `turns.base`, where its deltas live), at the same times.
    pub log_after_seal: Option<DiskUsage>,
    pub log_after_gc: Option<DiskUsage>,
    /// Why the collection failed, if it did.
    pub gc_error: Option<String>,
    /// Redis's `appendfsync` (always, everysec); none for ctxstore, which acknowledges only
    /// what is fdatasync'ed.
    pub redis_appendfsync: Option<String>,
}

impl StreamingReport {
    pub fn to_json(&self) -> Value {
        let disk = |usage: &Option<DiskUsage>| {
            usage.as_ref().map(|usage| {
                json!({
                    "bytes": usage.bytes(),
                    "allocated_bytes": usage.allocated_bytes,
                    "file_bytes": usage.file_bytes,
                    "measured": usage.measured,
                })
            })
        };
        json!({
            "streams": self.streams,
            "deltas_acknowledged": self.deltas_acknowledged,
            "deltas_delivered": self.deltas_delivered,
            "delivery_mismatches": self.delivery_mismatches,
            "streams_sealed": self.streams_sealed,
            "streams_aborted": self.streams_aborted,
            "server_cpu_s": self.server_cpu_s,
            "server_cpu_us_per_delta": self.server_cpu_us_per_delta,
            "server_cpu_measured_s": self.server_cpu_measured_s,
            "loadgen_cpu_us_per_delta": self.loadgen_cpu_us_per_delta,
            "deltas_measured": self.deltas_measured,
            "disk_after_seal": disk(&self.disk_after_seal),
            "disk_after_gc": disk(&self.disk_after_gc),
            "log_after_seal": disk(&self.log_after_seal),
            "log_after_gc": disk(&self.log_after_gc),
            "gc_error": self.gc_error,
            "redis_appendfsync": self.redis_appendfsync,
        })
    }

    pub fn table(&self) -> String {
        let bytes = |usage: &Option<DiskUsage>| {
            usage
                .as_ref()
                .and_then(DiskUsage::bytes)
                .map_or_else(|| "-".into(), |bytes| format!("{bytes} B"))
        };
        format!(
            "streaming: {} streams, {} deltas acknowledged, {} delivered ({} mismatches), \
             {} sealed, {} aborted{}\n\
             server CPU: {} per delta ({} over {} measured deltas); load generator CPU: {} \
             per delta\n\
             disk: {} after the seals, {} after the collection{}\n\
             log: {} after the seals, {} after the collection",
            self.streams,
            self.deltas_acknowledged,
            self.deltas_delivered,
            self.delivery_mismatches,
            self.streams_sealed,
            self.streams_aborted,
            self.redis_appendfsync
                .as_ref()
                .map_or_else(String::new, |fsync| format!(" (Redis appendfsync {fsync})")),
            self.server_cpu_us_per_delta
                .map_or_else(|| "-".into(), |us| format!("{us:.1}µs")),
            self.server_cpu_s
                .map_or_else(|| "-".into(), |s| format!("{s:.2}s")),
            self.deltas_measured,
            self.loadgen_cpu_us_per_delta
                .map_or_else(|| "-".into(), |us| format!("{us:.1}µs")),
            bytes(&self.disk_after_seal),
            bytes(&self.disk_after_gc),
            self.gc_error
                .as_ref()
                .map_or_else(String::new, |error| format!(
                    " (collection failed: {error})"
                )),
            bytes(&self.log_after_seal),
            bytes(&self.log_after_gc),
        )
    }
}

#[derive(Clone, Debug)]
pub struct Report {
    pub operations: BTreeMap<&'static str, OpReport>,
    pub server: ServerReport,
    pub config: Value,
    pub measured_s: f64,
    /// The growing-state workload's figures (only that workload has them).
    pub growing: Option<GrowingReport>,
    /// The streaming workload's figures (only that workload has them).
    pub streaming: Option<StreamingReport>,
}

impl Report {
    pub fn new(
        recorder: &Recorder,
        measured: Duration,
        server: ServerReport,
        config: Value,
    ) -> Report {
        let seconds = measured.as_secs_f64().max(1e-9);
        let mut operations = BTreeMap::new();
        for op in Op::ALL {
            let histogram = recorder.histogram(op);
            let errors = recorder.errors(op);
            if histogram.is_empty() && errors == 0 {
                continue;
            }
            let count = histogram.len();
            operations.insert(
                op.name(),
                OpReport {
                    count,
                    errors,
                    throughput_per_s: count as f64 / seconds,
                    latency_us: LatencyUs {
                        p50: histogram.value_at_quantile(0.50),
                        p90: histogram.value_at_quantile(0.90),
                        p99: histogram.value_at_quantile(0.99),
                        p999: histogram.value_at_quantile(0.999),
                        max: histogram.max(),
                    },
                },
            );
        }
        Report {
            operations,
            server,
            config,
            measured_s: seconds,
            growing: None,
            streaming: None,
        }
    }

    pub fn to_json(&self) -> Value {
        let operations: serde_json::Map<String, Value> = self
            .operations
            .iter()
            .map(|(name, op)| {
                let latency = op.latency_us;
                let value = json!({
                    "count": op.count,
                    "errors": op.errors,
                    "throughput_per_s": (op.throughput_per_s * 10.0).round() / 10.0,
                    "latency_us": {
                        "p50": latency.p50, "p90": latency.p90, "p99": latency.p99,
                        "p999": latency.p999, "max": latency.max,
                    },
                });
                (name.to_string(), value)
            })
            .collect();
        let server = &self.server;
        let dedup_ratio = match (server.logical_bytes, server.stored_bytes) {
            (Some(logical), Some(stored)) if stored > 0 => Some(logical as f64 / stored as f64),
            _ => None,
        };
        let bytes_per_turn = match (server.disk_bytes.or(server.stored_bytes), server.turns) {
            (Some(bytes), Some(turns)) if turns > 0 => Some(bytes as f64 / turns as f64),
            _ => None,
        };
        let mut value = json!({
            "operations": operations,
            "server": {
                "turns": server.turns,
                "blobs": server.blobs,
                "logical_bytes": server.logical_bytes,
                "stored_bytes": server.stored_bytes,
                "disk_bytes": server.disk_bytes,
                "dedup_hits": server.dedup_hits,
                "logical_per_stored": dedup_ratio,
                "bytes_per_turn": bytes_per_turn,
            },
            "config": self.config,
            "measured_s": self.measured_s,
        });
        if let (Some(growing), Some(object)) = (&self.growing, value.as_object_mut()) {
            object.insert("growing".into(), growing.to_json());
        }
        if let (Some(streaming), Some(object)) = (&self.streaming, value.as_object_mut()) {
            object.insert("streaming".into(), streaming.to_json());
        }
        value
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<11} {:>9} {:>7} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "op", "count", "errors", "per second", "p50", "p90", "p99", "p999", "max"
        );
        for (name, op) in &self.operations {
            let latency = op.latency_us;
            out.push_str(&format!(
                "{:<11} {:>9} {:>7} {:>11.1} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                name,
                op.count,
                op.errors,
                op.throughput_per_s,
                format_us(latency.p50),
                format_us(latency.p90),
                format_us(latency.p99),
                format_us(latency.p999),
                format_us(latency.max),
            ));
        }
        let server = &self.server;
        let show =
            |value: Option<u64>| value.map_or_else(|| "-".to_string(), |value| value.to_string());
        out.push_str(&format!(
            "server: turns {} blobs {} logical {} B stored {} B on disk {} B dedup hits {}",
            show(server.turns),
            show(server.blobs),
            show(server.logical_bytes),
            show(server.stored_bytes),
            show(server.disk_bytes),
            show(server.dedup_hits)
        ));
        if let Some(growing) = &self.growing {
            out.push('\n');
            out.push_str(&growing.table());
        }
        if let Some(streaming) = &self.streaming {
            out.push('\n');
            out.push_str(&streaming.table());
        }
        out
    }
}

/// `742µs`, `3.21ms`, `1.50s`.
pub fn format_us(micros: u64) -> String {
    if micros < 1000 {
        format!("{micros}µs")
    } else if micros < 1_000_000 {
        format!("{:.2}ms", micros as f64 / 1000.0)
    } else {
        format!("{:.2}s", micros as f64 / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_report_has_the_documented_shape() {
        let mut recorder = Recorder::default();
        for micros in 1..=1000 {
            recorder.record(Op::Append, Duration::from_micros(micros));
        }
        recorder.error(Op::Append);
        recorder.record(Op::GetLast, Duration::from_millis(2));
        let server = ServerReport {
            turns: Some(1000),
            stored_bytes: Some(500),
            logical_bytes: Some(1000),
            ..ServerReport::default()
        };
        let report = Report::new(
            &recorder,
            Duration::from_secs(10),
            server,
            json!({"rate": 100}),
        );
        let value = report.to_json();
        let append = &value["operations"]["append"];
        assert_eq!(append["count"], 1000);
        assert_eq!(append["errors"], 1);
        assert_eq!(append["throughput_per_s"], 100.0);
        for (key, expected) in [
            ("p50", 500),
            ("p90", 900),
            ("p99", 990),
            ("p999", 999),
            ("max", 1000),
        ] {
            let actual = append["latency_us"][key].as_u64().unwrap();
            assert!(actual.abs_diff(expected) <= 1, "{key}: {actual}");
        }
        assert_eq!(value["operations"]["get_last"]["count"], 1);
        assert!(
            value["operations"].get("fork").is_none(),
            "operations that did not run are left out"
        );
        assert_eq!(value["server"]["turns"], 1000);
        assert_eq!(value["server"]["logical_per_stored"], 2.0);
        assert_eq!(value["config"]["rate"], 100);
        assert!(report.table().contains("append"));
    }
}
