//! Prometheus metrics: what the network cores count, and the endpoint that serves it.
//!
//! Counting (hot path): each network core owns a [`CoreMetrics`] that only its thread writes,
//! with single-writer relaxed atomics (`ctxstore_engine::metrics`): per request a few plain
//! loads and stores and two clock reads; no lock, no cache line shared with another core. The
//! engine's actors keep their own (`Engine::actor_metrics`).
//!
//! Exposition (cold path): on each `GET /metrics`, [`MetricsSource::gather`] reads every
//! core's counters, the server's connection counters, the engine's stats and actor figures
//! and the data directory's size, sums over cores, and the `prometheus` crate encodes the
//! families in the Prometheus text format (0.0.4). [`MetricsEndpoint`]
//! (`metrics/endpoint.rs`) serves it from one thread with hyper. The series are listed
//! in docs/operations.md#metrics.

mod endpoint;
mod tenants;
mod vectors;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ctxstore_engine::metrics::{
    Histogram, HistogramSnapshot, LATENCY_BOUNDS_US, add_single_writer,
};
use ctxstore_engine::{Engine, StoreStats};
use ctxstore_protocol::{ErrorCode, MessageType, Response};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};

use crate::counters::ServerCounters;
use crate::payload_cache::CacheCounters;
pub use endpoint::MetricsEndpoint;

/// Request-type slots: one per `MessageType`, then one for codes no message type has.
const TYPE_SLOTS: usize = MessageType::ALL.len() + 1;
const UNKNOWN_TYPE_SLOT: usize = MessageType::ALL.len();
const ERROR_SLOTS: usize = ErrorCode::ALL.len();

fn type_slot(msg_type: u16) -> usize {
    MessageType::ALL
        .iter()
        .position(|candidate| candidate.code() == msg_type)
        .unwrap_or(UNKNOWN_TYPE_SLOT)
}

fn type_name(slot: usize) -> &'static str {
    MessageType::ALL
        .get(slot)
        .map_or("UNKNOWN", |message_type| message_type.name())
}

/// One network core's request figures. Written only by that core's thread.
#[derive(Debug)]
pub struct CoreMetrics {
    /// Request frames answered, per type slot.
    requests: Box<[AtomicU64]>,
    /// ERROR responses, per `type slot * ERROR_SLOTS + error slot`.
    errors: Box<[AtomicU64]>,
    /// From a request decoded to its response queued for writing, per type slot.
    latency_us: Box<[Histogram]>,
    /// The core's payload cache.
    cache: Arc<CacheCounters>,
    /// Count requests at all: false when no metrics endpoint is configured, so that a server
    /// without one pays neither the counting nor the clock reads (and the overhead A/B in
    /// benches/results/HISTORY.md compares exactly this switch).
    enabled: bool,
}

impl CoreMetrics {
    pub fn new(cache: Arc<CacheCounters>, enabled: bool) -> CoreMetrics {
        CoreMetrics {
            enabled,
            requests: (0..TYPE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            errors: (0..TYPE_SLOTS * ERROR_SLOTS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            latency_us: (0..TYPE_SLOTS)
                .map(|_| Histogram::new(LATENCY_BOUNDS_US))
                .collect(),
            cache,
        }
    }

    /// The counters the core's payload cache publishes into.
    pub fn cache_counters(&self) -> Arc<CacheCounters> {
        self.cache.clone()
    }

    /// Now, when request latency is measured; `None` when counting is off.
    #[inline]
    pub fn clock(&self) -> Option<Instant> {
        self.enabled.then(Instant::now)
    }

    /// Counts one request frame of type `msg_type` answered with `response`; with `started`
    /// (when the request was decoded), its latency too. Only the owning core calls it.
    #[inline]
    pub fn answered(&self, msg_type: u16, response: &Response, started: Option<Instant>) {
        if !self.enabled {
            return;
        }
        let slot = type_slot(msg_type);
        add_single_writer(&self.requests[slot], 1);
        if let Response::Error { code, .. } = response
            && let Some(error_slot) = ErrorCode::ALL.iter().position(|known| known == code)
        {
            add_single_writer(&self.errors[slot * ERROR_SLOTS + error_slot], 1);
        }
        if let Some(started) = started {
            let micros = started.elapsed().as_micros();
            self.latency_us[slot].record(u64::try_from(micros).unwrap_or(u64::MAX));
        }
    }
}

/// Everything a scrape reads. Cheap to share: the engine handle and `Arc`s.
#[derive(Debug, Clone)]
pub struct MetricsSource {
    pub engine: Engine,
    pub counters: Arc<ServerCounters>,
    pub cores: Vec<Arc<CoreMetrics>>,
    pub data_dir: PathBuf,
    pub payload_cache_bytes_per_core: u64,
    /// Replication's figures, when the server replicates (`--replicate-to`).
    pub replication: Option<Arc<ctxstore_replica::ReplicationStats>>,
    /// Remote acknowledgements' figures, when the server replicates (or follows: a promoted
    /// standby's).
    pub remote_acks: Option<Arc<ctxstore_replica::RemoteAcks>>,
    /// The tenants file in force, when the server has one (`--tenants-file`).
    pub tenants: Option<Arc<crate::tenancy::Tenants>>,
}

impl MetricsSource {
    /// Every family, summed over network cores, in a stable order.
    pub fn gather(&self) -> Vec<MetricFamily> {
        let mut families = Vec::new();
        self.gather_requests(&mut families);
        self.gather_connections(&mut families);
        self.gather_cache(&mut families);
        self.gather_actors(&mut families);
        self.gather_store(&mut families);
        self.gather_replication(&mut families);
        self.gather_tenants(&mut families);
        self.gather_vectors(&mut families);
        // The encoder refuses a family without samples (no error has happened yet).
        families.retain(|family| !family.get_metric().is_empty());
        families
    }

    /// The text exposition (Prometheus text format 0.0.4).
    pub fn render(&self) -> Result<String, prometheus::Error> {
        use prometheus::Encoder;
        let mut text = Vec::new();
        prometheus::TextEncoder::new().encode(&self.gather(), &mut text)?;
        String::from_utf8(text).map_err(|error| prometheus::Error::Msg(error.to_string()))
    }

    /// Replication (issue 31; docs/operations.md#replication): lag, what shipped, failures.
    fn gather_replication(&self, families: &mut Vec<MetricFamily>) {
        let Some(stats) = &self.replication else {
            return;
        };
        let now = ctxstore_replica::stats::now_unix_ms();
        let snapshot = stats.snapshot(now);
        replication_state(&snapshot, families);
        replication_shipped(&snapshot, families);
        if let Some(acks) = &self.remote_acks {
            remote_acks(acks, families);
        }
        self.lease(stats, now, families);
        // Rejoins (decision 0031 §8): a standby shows its own process's, once it rejoined.
        families.push(counter_family(
            "ctxstore_replication_rejoins_total",
            "Times this process, a fenced primary, set its store aside and became a standby of \
             the new primary (--rejoin standby).",
            stats.rejoins.load(Ordering::Relaxed),
        ));
        families.push(gauge_family(
            "ctxstore_replication_diverged_records",
            "Records the stores set aside at those rejoins held past the new lineage's fork \
             point (kept under DIR/.diverged/, never deleted).",
            stats.diverged_records.load(Ordering::Relaxed),
        ));
    }

    /// The lease (decision 0031 §4–§7), when this server holds or watches one.
    fn lease(
        &self,
        stats: &ctxstore_replica::ReplicationStats,
        now_unix_ms: u64,
        families: &mut Vec<MetricFamily>,
    ) {
        let lease_ms = stats.lease_ms.load(Ordering::Relaxed);
        if lease_ms == 0 {
            return;
        }
        let renewed = stats.lease_renewed_unix_ms.load(Ordering::Relaxed);
        let seconds = |ms: u64| vec![gauge::<&str>(&[], ms as f64 / 1000.0)];
        families.push(family(
            "ctxstore_replication_lease_seconds",
            "The lease this server holds or takes over (--replica-lease).",
            MetricType::GAUGE,
            seconds(lease_ms),
        ));
        families.push(family(
            "ctxstore_replication_lease_age_seconds",
            "Since the lease's last renewal as this server knows it (its own, or the version a \
             standby first saw).",
            MetricType::GAUGE,
            seconds(now_unix_ms.saturating_sub(renewed)),
        ));
        families.push(family(
            "ctxstore_acks_open_seconds",
            "How long this primary may still acknowledge without another renewal or shipped \
             cut (0: closed).",
            MetricType::GAUGE,
            seconds(self.engine.ack_open_ms_left().unwrap_or(0)),
        ));
        families.push(gauge_family(
            "ctxstore_replication_failovers",
            "Takeovers of this prefix so far, as its lease says.",
            stats.failovers.load(Ordering::Relaxed),
        ));
        families.push(family(
            "ctxstore_replication_last_failover_seconds",
            "This server's own last takeover: from its first sight of the lapsed lease to \
             taking writes (0: none).",
            MetricType::GAUGE,
            seconds(stats.last_failover_ms.load(Ordering::Relaxed)),
        ));
    }
    fn gather_requests(&self, families: &mut Vec<MetricFamily>) {
        let sum = |cells: fn(&CoreMetrics) -> &[AtomicU64], index: usize| -> u64 {
            self.cores
                .iter()
                .map(|core| cells(core)[index].load(Ordering::Relaxed))
                .sum()
        };
        let requests = (0..TYPE_SLOTS)
            .map(|slot| {
                counter(
                    &[("type", type_name(slot))],
                    sum(|core| &core.requests, slot),
                )
            })
            .collect();
        families.push(family(
            "ctxstore_requests_total",
            "Request frames answered (HELLO included, ERROR responses included), by message type.",
            MetricType::COUNTER,
            requests,
        ));
        let mut errors = Vec::new();
        for slot in 0..TYPE_SLOTS {
            for (error_slot, code) in ErrorCode::ALL.iter().enumerate() {
                let count = sum(|core| &core.errors, slot * ERROR_SLOTS + error_slot);
                // Types × codes is a wide matrix: only the pairs that happened.
                if count > 0 {
                    errors.push(counter(
                        &[("type", type_name(slot)), ("code", code.name())],
                        count,
                    ));
                }
            }
        }
        families.push(family(
            "ctxstore_request_errors_total",
            "ERROR responses, by request message type and error code (pairs that occurred).",
            MetricType::COUNTER,
            errors,
        ));
        // HELLO and unknown types are answered before dispatch: no latency is recorded.
        let latency = (0..TYPE_SLOTS)
            .filter(|&slot| {
                slot != UNKNOWN_TYPE_SLOT && type_name(slot) != MessageType::Hello.name()
            })
            .map(|slot| {
                let mut merged = Histogram::new(LATENCY_BOUNDS_US).snapshot();
                for core in &self.cores {
                    Histogram::merge(&mut merged, &core.latency_us[slot].snapshot());
                }
                histogram(&[("type", type_name(slot))], &merged, 1e6)
            })
            .collect();
        families.push(family(
            "ctxstore_request_duration_seconds",
            "From a request decoded to its response queued for writing, by message type \
             (HELLO and requests refused before decoding excluded).",
            MetricType::HISTOGRAM,
            latency,
        ));
    }

    fn gather_connections(&self, families: &mut Vec<MetricFamily>) {
        let counters = &self.counters;
        let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        families.push(gauge_family(
            "ctxstore_connections_open",
            "Open client connections (limit --connections-max).",
            load(&counters.connections),
        ));
        families.push(gauge_family(
            "ctxstore_connections_unauthenticated",
            "Open connections that have not completed HELLO (limit \
             --connections-unauthenticated-max).",
            load(&counters.connections_unauthenticated),
        ));
        families.push(counter_family(
            "ctxstore_connections_accepted_total",
            "Connections accepted and handed to a network core.",
            load(&counters.connections_accepted),
        ));
        families.push(counter_family(
            "ctxstore_connections_refused_total",
            "Connections refused with OVERLOADED because a connection limit was reached.",
            load(&counters.connections_refused),
        ));
        families.push(gauge_family(
            "ctxstore_unwritten_bytes",
            "Response bytes not yet written to sockets, with what running requests hold \
             (limit --unwritten-bytes-total-max).",
            load(&counters.unwritten_bytes),
        ));
    }

    fn gather_cache(&self, families: &mut Vec<MetricFamily>) {
        let sum = |cell: fn(&CacheCounters) -> &AtomicU64| -> u64 {
            self.cores
                .iter()
                .map(|core| cell(&core.cache).load(Ordering::Relaxed))
                .sum()
        };
        families.push(counter_family(
            "ctxstore_payload_cache_hits_total",
            "Payload reads served from the network cores' payload caches.",
            sum(|cache| &cache.hits),
        ));
        families.push(counter_family(
            "ctxstore_payload_cache_misses_total",
            "Payload reads that missed the payload caches (read from a pack).",
            sum(|cache| &cache.misses),
        ));
        families.push(gauge_family(
            "ctxstore_payload_cache_bytes",
            "Payload bytes held by the payload caches, all cores.",
            sum(|cache| &cache.bytes),
        ));
        families.push(gauge_family(
            "ctxstore_payload_cache_capacity_bytes",
            "Payload cache budget, all cores (--payload-cache-bytes times network cores).",
            self.payload_cache_bytes_per_core
                .saturating_mul(self.cores.len() as u64),
        ));
    }

    fn gather_actors(&self, families: &mut Vec<MetricFamily>) {
        let actors = self.engine.actor_metrics();
        let labels = |actor: &str| [("actor", actor.to_string())];
        families.push(family(
            "ctxstore_actor_queue_depth",
            "Requests waiting in an engine actor's inbox (limit --queue-depth-max).",
            MetricType::GAUGE,
            actors
                .iter()
                .map(|actor| gauge(&labels(&actor.actor), actor.queue_depth as f64))
                .collect(),
        ));
        families.push(family(
            "ctxstore_fsync_duration_seconds",
            "fdatasync of one group commit, by engine actor.",
            MetricType::HISTOGRAM,
            actors
                .iter()
                .map(|actor| histogram(&labels(&actor.actor), &actor.fsync_us, 1e6))
                .collect(),
        ));
        families.push(family(
            "ctxstore_group_commit_records",
            "Records written by one group commit (one fdatasync), by engine actor.",
            MetricType::HISTOGRAM,
            actors
                .iter()
                .map(|actor| histogram(&labels(&actor.actor), &actor.batch_records, 1.0))
                .collect(),
        ));
        families.push(family(
            "ctxstore_written_bytes_total",
            "Bytes written by group commits, by engine actor.",
            MetricType::COUNTER,
            actors
                .iter()
                .map(|actor| counter(&labels(&actor.actor), actor.written_bytes))
                .collect(),
        ));
    }

    fn gather_store(&self, families: &mut Vec<MetricFamily>) {
        let stats = self.engine.stats();
        for (name, help, value) in self.store_gauges(&stats) {
            families.push(gauge_family(name, help, value));
        }
        for (name, help, value) in store_counters(&stats) {
            families.push(counter_family(name, help, value));
        }
        families.push(family(
            "ctxstore_build_info",
            "Always 1; the version label names the running release.",
            MetricType::GAUGE,
            vec![gauge(&[("version", env!("CARGO_PKG_VERSION"))], 1.0)],
        ));
    }

    /// The store's sizes and state now: name, help, value.
    fn store_gauges(&self, stats: &StoreStats) -> [(&'static str, &'static str, u64); 13] {
        [
            ("ctxstore_turns", "Turns stored.", stats.turns),
            (
                "ctxstore_contexts",
                "Live contexts (deleted ones not counted).",
                stats.contexts,
            ),
            ("ctxstore_blobs", "Distinct blobs stored.", stats.blobs),
            (
                "ctxstore_logical_bytes",
                "Sum of payload lengths over all turns (the size without dedup).",
                stats.logical_bytes,
            ),
            (
                "ctxstore_unique_bytes",
                "Sum of raw lengths of distinct blobs (after dedup, before compression).",
                stats.unique_bytes,
            ),
            (
                "ctxstore_stored_bytes",
                "Bytes of pack records (after dedup and compression).",
                stats.stored_bytes,
            ),
            (
                "ctxstore_live_bytes",
                "Pack bytes of blobs the last garbage collection found reachable (0 before the \
                 first since the server started).",
                stats.live_bytes,
            ),
            (
                "ctxstore_dead_bytes",
                "Pack bytes of unreachable blobs still on disk as of the last garbage collection \
                 (in packs below --gc-pack-dead-percent).",
                stats.dead_bytes,
            ),
            (
                "ctxstore_chunked_blobs",
                "Blobs stored as content-defined chunks plus a manifest (payloads over \
                 --chunk-threshold).",
                stats.chunked_blobs,
            ),
            (
                "ctxstore_chunked_payload_bytes",
                "Raw bytes of the payloads stored as chunks.",
                stats.chunked_payload_bytes,
            ),
            (
                "ctxstore_disk_bytes",
                "Bytes the data directory occupies on disk (allocated blocks, preallocated \
                 space included; the disk reserve, RESERVE, not).",
                directory_disk_bytes(&self.data_dir),
            ),
            (
                "ctxstore_read_only",
                "1 when the store refuses writes (a failed fdatasync; see the log), else 0.",
                u64::from(stats.read_only),
            ),
            (
                "ctxstore_uptime_seconds",
                "Seconds since the server started.",
                self.counters.started.elapsed().as_secs(),
            ),
        ]
    }
}

/// What replication is doing now and how far behind it is.
fn replication_state(
    snapshot: &ctxstore_replica::ReplicationSnapshot,
    families: &mut Vec<MetricFamily>,
) {
    let states = [
        ctxstore_replica::ReplicationState::Shipping,
        ctxstore_replica::ReplicationState::Failing,
        ctxstore_replica::ReplicationState::Fenced,
        ctxstore_replica::ReplicationState::Stopped,
        ctxstore_replica::ReplicationState::Following,
        ctxstore_replica::ReplicationState::Stalled,
        ctxstore_replica::ReplicationState::Waiting,
    ];
    families.push(family(
        "ctxstore_replication_state",
        "1 for what replication is doing now (shipping, failing: retrying, fenced: another \
         primary took the prefix, stopped, following: a standby, stalled: a standby that \
         stopped applying, waiting: a standby whose replica has no restore point yet), 0 \
         for the others.",
        MetricType::GAUGE,
        states
            .iter()
            .map(|state| {
                gauge(
                    &[("state", state.name())],
                    f64::from(u8::from(*state == snapshot.state)),
                )
            })
            .collect(),
    ));
    families.push(family(
        "ctxstore_replication_lag_seconds",
        "Age of the newest data durable here but not shipped (0 when everything is shipped).",
        MetricType::GAUGE,
        vec![gauge::<&str>(&[], snapshot.lag_ms as f64 / 1000.0)],
    ));
    families.push(gauge_family(
        "ctxstore_replication_lag_bytes",
        "Bytes durable here but not shipped yet, as of the last cut (the backlog; it stays in \
         the store's own files and costs no disk of its own).",
        snapshot.lag_bytes,
    ));
}

/// What replication shipped, how often it failed, and the generation and epoch it ships.
fn replication_shipped(
    snapshot: &ctxstore_replica::ReplicationSnapshot,
    families: &mut Vec<MetricFamily>,
) {
    families.push(counter_family(
        "ctxstore_replication_objects_total",
        "Objects uploaded to the replica (segments, packs and bases uploaded whole, \
         checkpoints).",
        snapshot.objects_total,
    ));
    families.push(counter_family(
        "ctxstore_replication_bytes_total",
        "Bytes uploaded to the replica.",
        snapshot.bytes_total,
    ));
    families.push(family(
        "ctxstore_replication_failures_total",
        "Failed replication cycles, by kind (store: the object store answered an error or \
         timed out; fenced: another primary took the prefix; no_space: the local disk).",
        MetricType::COUNTER,
        snapshot
            .failures
            .iter()
            .filter(|(_, count)| *count > 0)
            .map(|(kind, count)| counter(&[("kind", *kind)], *count))
            .collect(),
    ));
    families.push(family(
        "ctxstore_replication_last_success_timestamp_seconds",
        "When the last replication cycle ended well (Unix time; 0: never).",
        MetricType::GAUGE,
        vec![gauge::<&str>(
            &[],
            snapshot.last_success_unix_ms as f64 / 1000.0,
        )],
    ));
    families.push(gauge_family(
        "ctxstore_replication_generation",
        "The replica generation this server ships (a restore or a promotion starts a new one).",
        snapshot.generation,
    ));
    families.push(gauge_family(
        "ctxstore_replication_epoch",
        "The epoch this primary took on the replica's prefix.",
        snapshot.epoch,
    ));
}

/// Remote acknowledgements (decision 0031 §3): waiting now, their outcomes, their wait.
fn remote_acks(acks: &ctxstore_replica::RemoteAcks, families: &mut Vec<MetricFamily>) {
    families.push(gauge_family(
        "ctxstore_remote_acks_waiting",
        "Writes asked to be acknowledged remote that wait now for the object store to hold \
         them.",
        acks.waiting.load(Ordering::Relaxed),
    ));
    families.push(family(
        "ctxstore_remote_acks_total",
        "Writes asked to be acknowledged remote, by outcome (confirmed: the object store \
         holds them; unconfirmed: answered UNCONFIRMED, durable here only, after \
         --remote-ack-timeout or a fence).",
        MetricType::COUNTER,
        vec![
            counter(
                &[("outcome", "confirmed")],
                acks.acks_total.load(Ordering::Relaxed),
            ),
            counter(
                &[("outcome", "unconfirmed")],
                acks.unconfirmed_total.load(Ordering::Relaxed),
            ),
        ],
    ));
    families.push(family(
        "ctxstore_remote_ack_seconds",
        "How long confirmed remote acknowledgements waited after the write was durable here \
         (a cut, and one or two PUTs).",
        MetricType::HISTOGRAM,
        vec![histogram::<&str>(&[], &acks.latency(), 1e6)],
    ));
}

/// The store's running totals: name, help, value.
fn store_counters(stats: &StoreStats) -> [(&'static str, &'static str, u64); 6] {
    [
        (
            "ctxstore_dedup_hits_total",
            "Appends whose payload was already stored.",
            stats.dedup_hits,
        ),
        (
            "ctxstore_chunks_written_total",
            "Chunks chunked writes stored (new chunk records).",
            stats.chunks_written,
        ),
        (
            "ctxstore_chunk_dedup_hits_total",
            "Chunks chunked writes found stored already.",
            stats.chunk_dedup_hits,
        ),
        (
            "ctxstore_chunk_bytes_saved_total",
            "Raw bytes of chunks chunked writes found stored already (what chunking saved).",
            stats.chunk_bytes_saved,
        ),
        (
            "ctxstore_gc_runs_total",
            "Garbage collections completed (scheduled and requested).",
            stats.gc_runs,
        ),
        (
            "ctxstore_gc_bytes_reclaimed_total",
            "Bytes garbage collection gave back to the file system (pack files shrunk).",
            stats.bytes_reclaimed_total,
        ),
    ]
}

/// Allocated bytes of the files under `dir` (two levels: the store's files and its shard
/// directories), the disk reserve aside (space kept free for garbage collection, not data).
/// Unreadable entries count 0: a scrape never fails on them.
fn directory_disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, depth: u32) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter(|entry| entry.file_name() != ctxstore_engine::reserve::RESERVE_FILE)
            .map(|entry| match entry.metadata() {
                Ok(metadata) if metadata.is_dir() && depth > 0 => walk(&entry.path(), depth - 1),
                Ok(metadata) if metadata.is_file() => metadata.blocks() * 512,
                _ => 0,
            })
            .sum()
    }
    walk(dir, 2)
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_string());
    family.set_help(help.to_string());
    family.set_field_type(kind);
    family.set_metric(metrics);
    family
}

fn gauge_family(name: &str, help: &str, value: u64) -> MetricFamily {
    family(
        name,
        help,
        MetricType::GAUGE,
        vec![gauge::<&str>(&[], value as f64)],
    )
}

fn counter_family(name: &str, help: &str, value: u64) -> MetricFamily {
    family(
        name,
        help,
        MetricType::COUNTER,
        vec![counter::<&str>(&[], value)],
    )
}

fn labelled<V: AsRef<str>>(labels: &[(&str, V)]) -> proto::Metric {
    let pairs = labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.as_ref().to_string());
            pair
        })
        .collect();
    proto::Metric::from_label(pairs)
}

fn counter<V: AsRef<str>>(labels: &[(&str, V)], value: u64) -> proto::Metric {
    let mut metric = labelled(labels);
    let mut counter = proto::Counter::default();
    counter.set_value(value as f64);
    metric.set_counter(counter);
    metric
}

fn gauge<V: AsRef<str>>(labels: &[(&str, V)], value: f64) -> proto::Metric {
    let mut metric = labelled(labels);
    let mut gauge = proto::Gauge::default();
    gauge.set_value(value);
    metric.set_gauge(gauge);
    metric
}

/// A histogram of `snapshot`, its bounds and sum divided by `divisor` (1e6: µs → s; a
/// division keeps bounds like 25 µs exact in decimal: 0.000025).
fn histogram<V: AsRef<str>>(
    labels: &[(&str, V)],
    snapshot: &HistogramSnapshot,
    divisor: f64,
) -> proto::Metric {
    let mut metric = labelled(labels);
    let mut histogram = proto::Histogram::default();
    histogram.set_sample_count(snapshot.count());
    histogram.set_sample_sum(snapshot.sum as f64 / divisor);
    histogram.set_bucket(
        snapshot
            .bounds
            .iter()
            .zip(&snapshot.cumulative)
            .map(|(&bound, &count)| {
                let mut bucket = proto::Bucket::default();
                bucket.set_upper_bound(bound as f64 / divisor);
                bucket.set_cumulative_count(count);
                bucket
            })
            .collect(),
    );
    metric.set_histogram(histogram);
    metric
}
