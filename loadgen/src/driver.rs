//! Runs a workload against a backend.
//!
//! - **Closed loop** (default): each connection runs `pipeline` workers; a worker sends an
//!   operation, waits for its answer, sends the next. Latency is send → answer.
//! - **Open loop** (`rate`): operations are scheduled at fixed intended times (`start + k /
//!   rate`), whatever the answers do; latency is counted from the *intended* send time, so a
//!   stalled server shows up in the tail instead of slowing the schedule (coordinated
//!   omission corrected).
//!
//! Contexts live in slots; a fork moves its slot to the new branch (the agent continues on
//! it). Warm-up operations run but are not recorded.
//!
//! - **Growing states** (`Workload::Growing`, issue 16): a fixed amount of work instead of a
//!   duration. Each context is an agent thread that appends `steps` states, each the previous
//!   one plus a message (`workload/growing.rs`), one after the other; the `connections ×
//!   pipeline` workers take the next context not yet started until every context is done. No
//!   warm-up, every append is measured, and the report adds what the states cost on disk and
//!   on the wire (`run_growing`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::backend::{BackendKind, BlobRef, Connection};
use crate::ops::{Mix, Op};
use crate::report::{GrowingReport, Recorder, Report, SentCounted};
use crate::spawn::directory_usage;
use crate::streaming::StreamingConfig;
use crate::workload::growing::{GrowingConfig, GrowingThread};
use crate::workload::payloads::{PayloadConfig, PayloadSource};
use crate::workload::text::Rng;

/// What the contexts do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// The operation mix, for `duration` after `warmup`, closed or open loop.
    Mix,
    /// Each context appends growing states, then is done; the run ends when all are.
    Growing(GrowingConfig),
    /// Streams of token deltas, each followed by a reader (`streaming.rs`).
    Streaming(StreamingConfig),
}

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub backend: BackendKind,
    pub connections: usize,
    pub contexts: usize,
    /// Open loop at this many operations per second; `None`: closed loop.
    pub rate: Option<f64>,
    /// Closed loop: workers per connection (requests in flight on each).
    pub pipeline: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub mix: Mix,
    pub payloads: PayloadConfig,
    /// Turns per get_last / page / range.
    pub read_turns: u32,
    /// Turns appended to every context before the run.
    pub prefill: u32,
    /// Open loop: requests outstanding at most (the schedule waits beyond it; the wait shows in
    /// the latencies).
    pub max_in_flight: usize,
    pub ack_log: Option<PathBuf>,
    pub seed: u64,
    /// A progress line on stderr every second.
    pub progress: bool,
    pub workload: Workload,
    /// The ctxstore server's data directory, where this process can read it: the growing
    /// workload's bytes on disk.
    pub data_dir: Option<PathBuf>,
}

impl LoadConfig {
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::json!({
            "backend": self.backend.name(),
            "connections": self.connections,
            "contexts": self.contexts,
            "mode": if self.rate.is_some() { "open" } else { "closed" },
            "rate": self.rate,
            "pipeline": self.pipeline,
            "duration_s": self.duration.as_secs_f64(),
            "warmup_s": self.warmup.as_secs_f64(),
            "mix": self.mix.to_string(),
            "payload_bytes": self.payloads.payload_bytes,
            "large_every": self.payloads.large_every,
            "large_bytes": self.payloads.large_bytes,
            "dup_ratio": self.payloads.dup_ratio,
            "read_turns": self.read_turns,
            "prefill": self.prefill,
            "seed": self.seed,
            "durability": self.backend.durability(),
            "workload": match self.workload {
                Workload::Mix => "mix",
                Workload::Growing(_) => "growing",
                Workload::Streaming(_) => "streaming",
            },
        });
        if let (Workload::Growing(growing), Some(object)) = (self.workload, value.as_object_mut()) {
            object.insert("growing_message_bytes".into(), growing.message_bytes.into());
            object.insert("growing_steps".into(), growing.steps.into());
        }
        value
    }
}

/// What is known of a context slot: enough to aim reads, pages and forks at real turns.
#[derive(Clone, Debug, Default)]
struct Slot {
    context: u64,
    head: u64,
    depth: u32,
    /// Recent turns: (turn id, depth, payload hash).
    known: Vec<(u64, u32, String)>,
}

const KNOWN_TURNS_MAX: usize = 64;

impl Slot {
    fn appended(&mut self, turn: u64, depth: u32, hash: String) {
        self.head = turn;
        self.depth = depth;
        if self.known.len() == KNOWN_TURNS_MAX {
            self.known.remove(0);
        }
        self.known.push((turn, depth, hash));
    }
}

struct Shared {
    slots: Vec<Mutex<Slot>>,
    completed: Vec<AtomicU64>,
    failed: Vec<AtomicU64>,
    ack_log: Option<Mutex<BufWriter<File>>>,
    /// Each ack log line's `durability` (`BackendKind::durability`).
    durability: Option<&'static str>,
}

impl Shared {
    /// `slots` empty context slots, counters at zero, and the ack log (`config.ack_log`)
    /// created.
    fn new(config: &LoadConfig, slots: usize) -> anyhow::Result<Shared> {
        let ack_log = match &config.ack_log {
            Some(path) => Some(Mutex::new(BufWriter::new(File::create(path)?))),
            None => None,
        };
        Ok(Shared {
            slots: (0..slots).map(|_| Mutex::new(Slot::default())).collect(),
            completed: Op::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            failed: Op::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            ack_log,
            durability: config.backend.durability(),
        })
    }

    fn log_ack(&self, context: u64, ack: &crate::backend::Ack) {
        if let Some(log) = &self.ack_log
            && let Ok(mut log) = log.lock()
        {
            let line = serde_json::json!({
                "context_id": context,
                "turn_id": ack.turn_id,
                "parent_turn_id": ack.parent_turn_id,
                "depth": ack.depth,
                "payload_hash": ack.payload_hash,
                "durability": self.durability,
                "acked_unix_ms": unix_ms_now(),
            });
            let _ = writeln!(log, "{line}");
        }
    }

    fn flush_ack_log(&self) {
        if let Some(log) = &self.ack_log
            && let Ok(mut log) = log.lock()
        {
            let _ = log.flush();
        }
    }
}

/// The wall clock in Unix milliseconds: when an acknowledgement came, for `check`'s loss
/// windows (the faults are timed on the same host's clock).
fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// An operation, aimed.
enum Plan {
    Append {
        slot: usize,
        payload: Bytes,
    },
    GetLast {
        context: u64,
    },
    Page {
        context: u64,
        before: u64,
    },
    Range {
        context: u64,
        from_depth: u32,
    },
    Fork {
        slot: usize,
        turn: u64,
    },
    GetBlob {
        blob: BlobRef,
    },
    /// Nothing to aim at yet (a get_blob before any append): skipped, not measured.
    Skip,
}

fn plan(
    op: Op,
    slot_index: usize,
    shared: &Shared,
    payloads: &mut PayloadSource,
    rng: &mut Rng,
    read_turns: u32,
) -> Plan {
    let slot = match shared.slots[slot_index].lock() {
        Ok(slot) => slot.clone(),
        Err(_) => return Plan::Skip,
    };
    match op {
        Op::Append => Plan::Append {
            slot: slot_index,
            payload: payloads.next_payload().0,
        },
        Op::GetLast => Plan::GetLast {
            context: slot.context,
        },
        Op::Page => match slot.known.get(rng.below(slot.known.len() as u64) as usize) {
            Some((turn, _, _)) => Plan::Page {
                context: slot.context,
                before: *turn,
            },
            None => Plan::GetLast {
                context: slot.context,
            },
        },
        Op::Range => {
            let top = slot.depth.saturating_sub(read_turns.saturating_sub(1));
            Plan::Range {
                context: slot.context,
                from_depth: rng.below(u64::from(top) + 1) as u32,
            }
        }
        Op::Fork => match slot.head {
            0 => Plan::Skip,
            head => Plan::Fork {
                slot: slot_index,
                turn: head,
            },
        },
        Op::GetBlob => match slot.known.get(rng.below(slot.known.len() as u64) as usize) {
            Some((turn, _, hash)) => Plan::GetBlob {
                blob: BlobRef {
                    turn_id: *turn,
                    payload_hash: hash.clone(),
                },
            },
            None => Plan::Skip,
        },
        // Mix::from_str refuses them: the streaming workload runs them (streaming.rs).
        Op::StreamOpen | Op::Delta | Op::Delivery | Op::Seal => Plan::Skip,
    }
}

fn op_of(plan: &Plan) -> Option<Op> {
    Some(match plan {
        Plan::Append { .. } => Op::Append,
        Plan::GetLast { .. } => Op::GetLast,
        Plan::Page { .. } => Op::Page,
        Plan::Range { .. } => Op::Range,
        Plan::Fork { .. } => Op::Fork,
        Plan::GetBlob { .. } => Op::GetBlob,
        Plan::Skip => return None,
    })
}

async fn execute(
    connection: &Connection,
    plan: Plan,
    shared: &Shared,
    read_turns: u32,
) -> anyhow::Result<()> {
    match plan {
        Plan::Append { slot, payload } => {
            let context = shared.slots[slot]
                .lock()
                .map(|slot| slot.context)
                .unwrap_or(0);
            let ack = connection.append(context, payload).await?;
            shared.log_ack(context, &ack);
            if let Ok(mut state) = shared.slots[slot].lock()
                && state.context == context
                && ack.depth >= state.depth
            {
                state.appended(ack.turn_id, ack.depth, ack.payload_hash);
            }
        }
        Plan::GetLast { context } => {
            connection.get_last(context, read_turns).await?;
        }
        Plan::Page { context, before } => {
            connection.page(context, before, read_turns).await?;
        }
        Plan::Range {
            context,
            from_depth,
        } => {
            connection.range(context, from_depth, read_turns).await?;
        }
        Plan::Fork { slot, turn } => {
            let context = connection.fork(turn).await?;
            if let Ok(mut state) = shared.slots[slot].lock() {
                // The agent continues on the new branch: same history, new head pointer.
                state.context = context;
            }
        }
        Plan::GetBlob { blob } => {
            connection.get_blob(&blob).await?;
        }
        Plan::Skip => {}
    }
    Ok(())
}

/// Runs the workload; returns what it recorded and how long the measured part took (the
/// caller builds the report, with the server part).
pub async fn run(config: &LoadConfig) -> anyhow::Result<(Recorder, Duration)> {
    anyhow::ensure!(
        config.connections > 0 && config.contexts > 0,
        "connections and contexts must be at least 1"
    );
    let connections = connect_all(config).await?;
    let shared = Arc::new(Shared::new(config, config.contexts)?);
    prepare(config, &connections, &shared).await?;

    let start = Instant::now();
    let measure_from = start + config.warmup;
    let end = measure_from + config.duration;
    let ticker = config
        .progress
        .then(|| tokio::spawn(progress(shared.clone(), start, Some(end))));
    let recorders = match config.rate {
        None => closed_loop(config, &connections, &shared, measure_from, end).await,
        Some(rate) => vec![open_loop(config, rate, &connections, &shared, measure_from, end).await],
    };
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    shared.flush_ack_log();
    let mut merged = Recorder::default();
    for recorder in &recorders {
        merged.merge(recorder);
    }
    Ok((merged, config.duration))
}

/// The backend prepared (its tables, where it has any) and `config.connections` connections
/// to it.
async fn connect_all(config: &LoadConfig) -> anyhow::Result<Vec<Arc<Connection>>> {
    config.backend.prepare().await?;
    let mut connections = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        connections.push(Arc::new(config.backend.connect().await?));
    }
    Ok(connections)
}

/// Creates the contexts and appends `prefill` turns to each, all connections at once.
async fn prepare(
    config: &LoadConfig,
    connections: &[Arc<Connection>],
    shared: &Arc<Shared>,
) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for (index, connection) in connections.iter().enumerate() {
        let connection = connection.clone();
        let shared = shared.clone();
        let (count, prefill, payload_config) = (config.contexts, config.prefill, config.payloads);
        let (seed, step) = (config.seed, config.connections);
        tasks.push(tokio::spawn(async move {
            let mut payloads = PayloadSource::new(
                PayloadConfig {
                    large_every: 0,
                    ..payload_config
                },
                seed ^ (1000 + index as u64),
            );
            for slot in (index..count).step_by(step) {
                let context = connection.create_context().await?;
                if let Ok(mut state) = shared.slots[slot].lock() {
                    state.context = context;
                }
                for _ in 0..prefill {
                    let ack = connection
                        .append(context, payloads.next_payload().0)
                        .await?;
                    shared.log_ack(context, &ack);
                    if let Ok(mut state) = shared.slots[slot].lock() {
                        state.appended(ack.turn_id, ack.depth, ack.payload_hash);
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

async fn closed_loop(
    config: &LoadConfig,
    connections: &[Arc<Connection>],
    shared: &Arc<Shared>,
    measure_from: Instant,
    end: Instant,
) -> Vec<Recorder> {
    let workers = config.connections * config.pipeline.max(1);
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let connection = connections[worker % config.connections].clone();
        let shared = shared.clone();
        let (mix, read_turns, payload_config) =
            (config.mix.clone(), config.read_turns, config.payloads);
        // Worker w owns slots w, w + workers, …; with fewer slots than workers, they share.
        let slots: Vec<usize> = if config.contexts >= workers {
            (worker..config.contexts).step_by(workers).collect()
        } else {
            vec![worker % config.contexts]
        };
        let seed = config.seed ^ (worker as u64).wrapping_mul(0x9E37_79B9);
        tasks.push(tokio::spawn(async move {
            let mut recorder = Recorder::default();
            let mut rng = Rng::new(seed);
            let mut payloads = PayloadSource::new(payload_config, seed);
            while Instant::now() < end {
                let op = mix.pick(&mut rng);
                let slot = slots[rng.below(slots.len() as u64) as usize];
                let plan = plan(op, slot, &shared, &mut payloads, &mut rng, read_turns);
                let Some(op) = op_of(&plan) else { continue };
                let sent = Instant::now();
                let result = execute(&connection, plan, &shared, read_turns).await;
                account(
                    &shared,
                    &mut recorder,
                    op,
                    sent,
                    sent >= measure_from,
                    result,
                )
                .await;
            }
            recorder
        }));
    }
    let mut recorders = Vec::with_capacity(workers);
    for task in tasks {
        if let Ok(recorder) = task.await {
            recorders.push(recorder);
        }
    }
    recorders
}

async fn account(
    shared: &Shared,
    recorder: &mut Recorder,
    op: Op,
    since: Instant,
    measured: bool,
    result: anyhow::Result<()>,
) {
    match result {
        Ok(()) => {
            shared.completed[op.index()].fetch_add(1, Ordering::Relaxed);
            if measured {
                recorder.record(op, since.elapsed());
            }
        }
        Err(error) => {
            shared.failed[op.index()].fetch_add(1, Ordering::Relaxed);
            if measured {
                recorder.error(op);
            }
            tracing::debug!(%op, %error, "operation failed");
            // A dead server answers instantly; do not spin on it.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn open_loop(
    config: &LoadConfig,
    rate: f64,
    connections: &[Arc<Connection>],
    shared: &Arc<Shared>,
    measure_from: Instant,
    end: Instant,
) -> Recorder {
    // The schedule runs on a thread of its own: tokio's timer has millisecond ticks, which
    // would send each request up to a millisecond late and, since latency counts from the
    // intended time, add that lag to every measurement. A thread sleeps to within tens of µs.
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let permits = Arc::new(tokio::sync::Semaphore::new(config.max_in_flight.max(1)));
    let recorder = Arc::new(Mutex::new(Recorder::default()));
    let runtime = tokio::runtime::Handle::current();
    let (config, connections, shared_state) =
        (config.clone(), connections.to_vec(), shared.clone());
    let (schedule_recorder, schedule_permits) = (recorder.clone(), permits.clone());
    let scheduler = std::thread::spawn(move || {
        let (recorder, permits, shared) = (schedule_recorder, schedule_permits, shared_state);
        let mut rng = Rng::new(config.seed);
        let mut payloads = PayloadSource::new(config.payloads, config.seed);
        let start = Instant::now();
        for sequence in 0u64.. {
            let intended = start + interval.mul_f64(sequence as f64);
            if intended >= end {
                break;
            }
            if let Some(wait) = intended.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let Ok(permit) = runtime.block_on(permits.clone().acquire_owned()) else {
                break;
            };
            let op = config.mix.pick(&mut rng);
            let slot = rng.below(config.contexts as u64) as usize;
            let plan = plan(
                op,
                slot,
                &shared,
                &mut payloads,
                &mut rng,
                config.read_turns,
            );
            let Some(op) = op_of(&plan) else { continue };
            let connection = connections[(sequence as usize) % connections.len()].clone();
            let (shared, recorder, read_turns) =
                (shared.clone(), recorder.clone(), config.read_turns);
            runtime.spawn(async move {
                let result = execute(&connection, plan, &shared, read_turns).await;
                // Latency from the intended send time: a stall delays the schedule's sends,
                // and that delay is part of what the clients experience.
                let measured = intended >= measure_from;
                record_outcome(&shared, &recorder, op, intended, measured, result);
                drop(permit);
            });
        }
    });
    while !scheduler.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = scheduler.join();
    // Every request holds a permit until it is answered: all permits back = all answered.
    let _ = permits
        .acquire_many(config.max_in_flight.max(1) as u32)
        .await;
    recorder
        .lock()
        .map(|recorder| recorder.clone())
        .unwrap_or_default()
}

/// Counts an open-loop request's outcome, and records it (latency from `intended`) when it
/// falls in the measured part of the run.
fn record_outcome<E: std::fmt::Display>(
    shared: &Shared,
    recorder: &Mutex<Recorder>,
    op: Op,
    intended: Instant,
    measured: bool,
    result: Result<(), E>,
) {
    match result {
        Ok(()) => {
            shared.completed[op.index()].fetch_add(1, Ordering::Relaxed);
            if measured && let Ok(mut recorder) = recorder.lock() {
                recorder.record(op, intended.elapsed());
            }
        }
        Err(error) => {
            shared.failed[op.index()].fetch_add(1, Ordering::Relaxed);
            if measured && let Ok(mut recorder) = recorder.lock() {
                recorder.error(op);
            }
            tracing::debug!(%op, %error, "operation failed");
        }
    }
}

/// A line per second; `end`: when the run stops sending (none for a fixed amount of work).
async fn progress(shared: Arc<Shared>, start: Instant, end: Option<Instant>) {
    let mut last: Vec<u64> = vec![0; Op::ALL.len()];
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let mut line = format!("[{:>4.0}s]", start.elapsed().as_secs_f64());
        for op in Op::ALL {
            let completed = shared.completed[op.index()].load(Ordering::Relaxed);
            let delta = completed - last[op.index()];
            last[op.index()] = completed;
            if completed > 0 {
                line.push_str(&format!(" {op} {delta}/s"));
            }
        }
        let errors: u64 = shared
            .failed
            .iter()
            .map(|failed| failed.load(Ordering::Relaxed))
            .sum();
        line.push_str(&format!(" | errors {errors}"));
        if end.is_some_and(|end| Instant::now() > end) {
            line.push_str(" (finishing)");
        }
        eprintln!("{line}");
        shared.flush_ack_log();
    }
}

/// Builds the report: the run's measurements and what the store says about itself.
pub async fn report(config: &LoadConfig, recorder: &Recorder, measured: Duration) -> Report {
    let server = match config.backend.connect().await {
        Ok(connection) => connection.server_report().await.unwrap_or_default(),
        Err(_) => Default::default(),
    };
    Report::new(recorder, measured, server, config.to_json())
}

/// What one worker of a growing run counted.
#[derive(Debug, Default)]
struct GrowingTotals {
    appends: u64,
    /// Every state handed to the backend, acknowledged or not.
    payload_bytes: u64,
    /// Acknowledged states.
    logical_bytes: u64,
    /// Per context, its last acknowledged state.
    final_state_bytes: u64,
}

impl GrowingTotals {
    /// Adds another worker's counts to these.
    fn add(&mut self, other: &GrowingTotals) {
        self.appends += other.appends;
        self.payload_bytes += other.payload_bytes;
        self.logical_bytes += other.logical_bytes;
        self.final_state_bytes += other.final_state_bytes;
    }
}

/// Runs the growing-state workload (see the module doc) and builds its report.
pub async fn run_growing(config: &LoadConfig, growing: GrowingConfig) -> anyhow::Result<Report> {
    anyhow::ensure!(
        config.connections > 0 && config.contexts > 0,
        "connections and contexts must be at least 1"
    );
    growing.validate().map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        config.rate.is_none(),
        "the growing workload runs closed loop: a context's next state waits for the previous append"
    );
    let connections = connect_all(config).await?;
    let shared = Arc::new(Shared::new(config, 0)?);
    // Contexts first, so that the bytes counted as sent are the appends' alone.
    let contexts = create_contexts(config, &connections).await?;
    let wire_bytes_before = wire_bytes_sent(&connections);

    // No warm-up: every append is measured.
    let start = Instant::now();
    let ticker = config
        .progress
        .then(|| tokio::spawn(progress(shared.clone(), start, None)));
    let (recorder, totals) = grow(config, growing, &connections, &shared, contexts).await?;
    let elapsed = start.elapsed();
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    shared.flush_ack_log();

    let run = GrowingRun {
        recorder,
        totals,
        elapsed,
        wire_bytes_before,
    };
    Ok(growing_report(config, growing, &connections, run).await)
}

/// The contexts of a growing run, empty, created round robin over the connections.
async fn create_contexts(
    config: &LoadConfig,
    connections: &[Arc<Connection>],
) -> anyhow::Result<Vec<u64>> {
    let mut contexts = Vec::with_capacity(config.contexts);
    for index in 0..config.contexts {
        contexts.push(
            connections[index % connections.len()]
                .create_context()
                .await?,
        );
    }
    Ok(contexts)
}

/// The measured part of a growing run: `connections × pipeline` workers (at most one per
/// context) append every context's states; their recorders and totals merged.
async fn grow(
    config: &LoadConfig,
    growing: GrowingConfig,
    connections: &[Arc<Connection>],
    shared: &Arc<Shared>,
    contexts: Vec<u64>,
) -> anyhow::Result<(Recorder, GrowingTotals)> {
    let contexts = Arc::new(contexts);
    let next_context = Arc::new(AtomicUsize::new(0));
    let workers = (config.connections * config.pipeline.max(1)).min(config.contexts);
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let connection = connections[worker % connections.len()].clone();
        let (shared, contexts, next_context) =
            (shared.clone(), contexts.clone(), next_context.clone());
        tasks.push(tokio::spawn(grow_contexts(
            connection,
            shared,
            contexts,
            next_context,
            growing,
            config.seed,
        )));
    }
    let mut recorder = Recorder::default();
    let mut totals = GrowingTotals::default();
    for task in tasks {
        let (worker_recorder, worker_totals) = task.await?;
        recorder.merge(&worker_recorder);
        totals.add(&worker_totals);
    }
    Ok((recorder, totals))
}

/// One worker of a growing run: takes the next context not yet started and appends its
/// states one after the other, until no context is left.
async fn grow_contexts(
    connection: Arc<Connection>,
    shared: Arc<Shared>,
    contexts: Arc<Vec<u64>>,
    next_context: Arc<AtomicUsize>,
    growing: GrowingConfig,
    seed: u64,
) -> (Recorder, GrowingTotals) {
    let mut recorder = Recorder::default();
    let mut totals = GrowingTotals::default();
    loop {
        let index = next_context.fetch_add(1, Ordering::Relaxed);
        let Some(&context) = contexts.get(index) else {
            break;
        };
        let mut thread = GrowingThread::new(growing, seed, index as u64);
        let mut final_state_bytes = 0;
        for step in 0..growing.steps {
            let state = thread.next_state();
            let state_bytes = state.len() as u64;
            totals.appends += 1;
            totals.payload_bytes += state_bytes;
            let sent = Instant::now();
            let result = connection.append(context, state).await.and_then(|ack| {
                // One context, one writer: each state lands one deeper than the last.
                anyhow::ensure!(
                    ack.depth == step,
                    "context {context}: step {step} acknowledged at depth {}",
                    ack.depth
                );
                shared.log_ack(context, &ack);
                Ok(())
            });
            if result.is_ok() {
                totals.logical_bytes += state_bytes;
                final_state_bytes = state_bytes;
            }
            account(&shared, &mut recorder, Op::Append, sent, true, result).await;
        }
        totals.final_state_bytes += final_state_bytes;
    }
    (recorder, totals)
}

/// What a growing run measured, for its report.
struct GrowingRun {
    recorder: Recorder,
    totals: GrowingTotals,
    elapsed: Duration,
    /// The connections' request bytes before the first append (`None`: not counted).
    wire_bytes_before: Option<u64>,
}

/// The growing run's report: its latencies, and what the states cost on the wire and on
/// disk.
async fn growing_report(
    config: &LoadConfig,
    growing: GrowingConfig,
    connections: &[Arc<Connection>],
    run: GrowingRun,
) -> Report {
    let (bytes_sent, bytes_sent_counted) =
        match (run.wire_bytes_before, wire_bytes_sent(connections)) {
            (Some(before), Some(after)) => (after.saturating_sub(before), SentCounted::Wire),
            _ => (run.totals.payload_bytes, SentCounted::Payload),
        };
    // Measured with the run's connections still open (SQLite's WAL is removed by the last
    // connection to close).
    let disk = match (&config.backend, &config.data_dir) {
        (BackendKind::Ctxstore { .. }, Some(dir)) => Some(directory_usage(dir)),
        (BackendKind::Ctxstore { .. }, None) => None,
        _ => connections[0].disk_usage().await.unwrap_or_else(|error| {
            tracing::warn!(%error, "could not measure the store's bytes on disk");
            None
        }),
    };
    let server = connections[0].server_report().await.unwrap_or_default();
    let mut report = Report::new(&run.recorder, run.elapsed, server, config.to_json());
    report.growing = Some(GrowingReport {
        contexts: config.contexts as u64,
        steps: growing.steps,
        message_bytes: growing.message_bytes,
        appends: run.totals.appends,
        logical_bytes: run.totals.logical_bytes,
        final_state_bytes_total: run.totals.final_state_bytes,
        disk,
        bytes_sent,
        bytes_sent_counted,
    });
    report
}

/// Request bytes written on all connections, if every one counts them.
fn wire_bytes_sent(connections: &[Arc<Connection>]) -> Option<u64> {
    connections
        .iter()
        .map(|connection| connection.bytes_sent())
        .sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::backend::scripted::Script;

    fn config(script: Arc<Script>, rate: Option<f64>) -> LoadConfig {
        LoadConfig {
            backend: BackendKind::Scripted(script),
            connections: 1,
            contexts: 1,
            rate,
            pipeline: 1,
            duration: Duration::from_millis(1500),
            warmup: Duration::ZERO,
            mix: Mix::only(Op::Append),
            payloads: PayloadConfig {
                payload_bytes: 256,
                ..PayloadConfig::default()
            },
            read_turns: 16,
            prefill: 0,
            max_in_flight: 100_000,
            ack_log: None,
            seed: 7,
            progress: false,
            workload: Workload::Mix,
            data_dir: None,
        }
    }

    /// A 300 ms stall in a 1.5 s run. Open loop counts from the intended send time, so every
    /// request scheduled during the stall shows it: p99 near the stall. The closed loop's one
    /// worker sees the stall once: p99 stays at the normal latency. That difference is the
    /// coordinated-omission correction.
    #[test]
    fn a_stalled_server_shows_in_the_open_loop_tail() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for (rate, expect_stall_in_p99) in [(Some(1000.0), true), (None, false)] {
            let script = Arc::new(Script::new(Duration::from_millis(1)));
            let stall_from = Instant::now() + Duration::from_millis(600);
            *script.stall.lock().unwrap() =
                Some((stall_from, stall_from + Duration::from_millis(300)));
            let (recorder, _) = runtime.block_on(run(&config(script, rate))).unwrap();
            let histogram = recorder.histogram(Op::Append);
            let p99_ms = histogram.value_at_quantile(0.99) / 1000;
            let max_ms = histogram.max() / 1000;
            assert!(
                max_ms >= 250,
                "the stall itself is always seen once (max {max_ms} ms)"
            );
            if expect_stall_in_p99 {
                assert!(p99_ms >= 150, "open loop p99 {p99_ms} ms hides the stall");
                let count = histogram.len();
                assert!(
                    (1300..=1600).contains(&count),
                    "the schedule kept its rate: {count} requests"
                );
            } else {
                assert!(p99_ms < 50, "closed loop p99 {p99_ms} ms");
            }
        }
    }
}
