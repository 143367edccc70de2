//! The streaming workload (`--workload streaming`, issue 32): S streams, each a model
//! answering token by token, each followed by one reader.
//!
//! - **Writers**: stream slot `s` writes delta `k` (`workload/deltas.rs`, 4–40 bytes) at its
//!   intended time `start + (k·S + s) / (S·R)`: one schedule thread spreads the S·R deltas per
//!   second evenly over the slots (open loop). A slot's deltas go one after the other (a
//!   stream's bytes are ordered); a delta whose predecessor is slow goes late, and its ack
//!   latency counts from its intended time all the same (coordinated omission corrected).
//!   After `deltas_per_stream` acknowledged deltas the writer seals the stream (one turn) and
//!   opens the next on the same context; a slot's first stream is shorter, `N − s·N/S`
//!   deltas, so that the slots' seals spread evenly over time instead of all falling in the
//!   same few milliseconds. At the end every open stream is sealed.
//! - **Readers**: one per slot, told each new StreamID by its writer, reads it from its last
//!   offset with a wait (ctxstore: STREAM_FOLLOW, the server pushing each acknowledged delta,
//!   or with `--stream-read poll` STREAM_READ long polls; Redis XREAD BLOCK from the last
//!   entry id). It regenerates what the writer sent, so it checks every byte it is delivered
//!   (each once, in order) and knows each delta's intended time: delivery latency is intended
//!   send → bytes in the reader's hands. A ctxstore stream sealed before its reader caught up
//!   answers the rest from the sealed turn.
//! - **Figures**: delta, delivery, seal and stream-open latencies (`Op::Delta` …), the server's
//!   CPU time per delta (`/proc/PID/stat` of the server process; the load generator's own
//!   too, over the same part: it shares the cores), bytes on disk after the
//!   last seal and after a collection (`Connection::stream_collect`).
//! - **A store that stops answering** fails the run (exit 1, with what was counted until
//!   then) once writers or readers are not done 60 s after the schedule's end (plus one read's
//!   wait), instead of waiting forever.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::backend::streams::{ReadPosition, StreamEnd, StreamReadMode, StreamReading};
use crate::backend::{BackendKind, Connection, redis_streams};
use crate::driver::LoadConfig;
use crate::ops::Op;
use crate::report::{Recorder, Report, ServerReport, StreamingReport};
use crate::spawn::{directory_usage, files_usage};
use crate::workload::deltas::{DeltaBytes, delta};

/// The streaming workload's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamingConfig {
    /// Streams written at once (each on its own context, each with one reader).
    pub streams: usize,
    /// Deltas per second of each stream.
    pub deltas_per_s: u32,
    /// A stream is sealed after this many acknowledged deltas, and the next one opened.
    pub deltas_per_stream: u32,
    pub delta_bytes: DeltaBytes,
    /// Longest wait of one read (a long poll / XREAD BLOCK), or of a follow for a delta.
    pub read_wait: Duration,
    /// How ctxstore's readers read: STREAM_FOLLOW (pushed) or STREAM_READ long polls.
    pub read_mode: StreamReadMode,
    /// The server process, for its CPU time (a spawned server's, else `--server-pid`; Redis
    /// tells its own).
    pub server_pid: Option<u32>,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            streams: 500,
            deltas_per_s: 40,
            deltas_per_stream: 500,
            delta_bytes: DeltaBytes::default(),
            read_wait: Duration::from_secs(5),
            read_mode: StreamReadMode::Push,
            server_pid: None,
        }
    }
}

/// Streams one ctxstore connection may hold open (the server's default
/// `--streams-per-connection-max`).
pub const STREAMS_PER_CONNECTION_MAX: usize = 64;

impl StreamingConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.delta_bytes.validate()?;
        if self.streams == 0 || self.deltas_per_s == 0 || self.deltas_per_stream == 0 {
            return Err("--streams, --stream-rate and --stream-deltas must be at least 1".into());
        }
        if self.read_wait.is_zero() || self.read_wait > Duration::from_secs(60) {
            return Err("--stream-read-wait must be between 1ms and 60s".into());
        }
        Ok(())
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "streams": self.streams,
            "stream_rate_per_s": self.deltas_per_s,
            "stream_deltas": self.deltas_per_stream,
            "delta_bytes_min": self.delta_bytes.min,
            "delta_bytes_max": self.delta_bytes.max,
            "read_wait_ms": self.read_wait.as_millis() as u64,
            "stream_read": self.read_mode.name(),
        })
    }
}

/// When each delta is meant to be sent: one definition for the schedule thread (which sends
/// the ticks) and the readers (which measure delivery from it).
#[derive(Clone, Copy, Debug)]
struct Schedule {
    start: Instant,
    streams: u64,
    deltas_per_s_total: f64,
}

impl Schedule {
    /// The `n`th delta of the whole run: slot `n mod S`, that slot's delta `n div S`.
    fn intended_nth(&self, n: u64) -> Instant {
        self.start + Duration::from_secs_f64(n as f64 / self.deltas_per_s_total)
    }

    fn intended(&self, slot: u64, index: u64) -> Instant {
        self.intended_nth(index * self.streams + slot)
    }
}

/// A new stream of a slot, from its writer to its reader: its id and the slot's delta index
/// of its first delta.
#[derive(Clone, Copy, Debug)]
struct Started {
    stream_id: u64,
    first_index: u64,
}

/// Counters the progress line reads while the run goes.
#[derive(Debug, Default)]
struct Progress {
    acknowledged: AtomicU64,
    delivered: AtomicU64,
    sealed: AtomicU64,
    errors: AtomicU64,
}

/// What one slot's writer or reader counted.
#[derive(Debug, Default)]
struct SlotTotals {
    recorder: Recorder,
    acknowledged: u64,
    /// Acknowledged deltas whose intended time was in the measured part.
    acknowledged_measured: u64,
    delivered: u64,
    /// Bytes delivered that differ from what the writer sent (or past it).
    mismatches: u64,
    sealed: u64,
    aborted: u64,
}

impl SlotTotals {
    fn add(&mut self, other: &SlotTotals) {
        self.recorder.merge(&other.recorder);
        self.acknowledged += other.acknowledged;
        self.acknowledged_measured += other.acknowledged_measured;
        self.delivered += other.delivered;
        self.mismatches += other.mismatches;
        self.sealed += other.sealed;
        self.aborted += other.aborted;
    }
}

/// What each task of a slot needs to know.
#[derive(Clone, Copy, Debug)]
struct SlotPlan {
    slot: u64,
    seed: u64,
    streaming: StreamingConfig,
    schedule: Schedule,
    measure_from: Instant,
}

/// Runs the streaming workload (see the module doc) and builds its report.
pub async fn run_streaming(
    config: &LoadConfig,
    streaming: StreamingConfig,
) -> anyhow::Result<Report> {
    let is_ctxstore = check_streaming(config, streaming)?;
    let writers = connect(&config.backend, config.connections).await?;
    // ctxstore's long polls share connections (pipelined); an XREAD BLOCK holds its
    // connection for the wait, so each Redis reader has its own.
    let readers = if is_ctxstore {
        connect(&config.backend, config.connections).await?
    } else {
        connect(&config.backend, streaming.streams).await?
    };
    let mut contexts = Vec::with_capacity(streaming.streams);
    for slot in 0..streaming.streams {
        contexts.push(writers[slot % writers.len()].create_context().await?);
    }
    let admin = &writers[0];
    let store = StoreUnderTest::of(admin, streaming).await?;
    let server_pid = store.server_pid;
    let ticks_per_s = CpuTicks::per_second();

    let start = Instant::now() + Duration::from_millis(100);
    let schedule = Schedule {
        start,
        streams: streaming.streams as u64,
        deltas_per_s_total: streaming.streams as f64 * f64::from(streaming.deltas_per_s),
    };
    let measure_from = start + config.warmup;
    let end = measure_from + config.duration;
    let progress = Arc::new(Progress::default());
    let ticker = config
        .progress
        .then(|| tokio::spawn(show_progress(progress.clone(), start, end)));
    let plan = |slot: usize| SlotPlan {
        slot: slot as u64,
        seed: config.seed,
        streaming,
        schedule,
        measure_from,
    };
    let (tick_senders, writer_tasks, reader_tasks) =
        spawn_slots(&contexts, &writers, &readers, plan, &progress);

    // The CPU sample at the start of the measured part.
    let cpu_at_measure = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        (
            server_pid.and_then(CpuTicks::of),
            CpuTicks::of(std::process::id()),
        )
    });
    let scheduler = std::thread::Builder::new()
        .name("stream-schedule".into())
        .spawn(move || send_ticks(schedule, end, tick_senders))?;

    // A store that stops answering must not hold the run forever: what is not done this
    // long after the schedule ended fails the run, with what was counted until then.
    let deadline = end + DRAIN_TIME_MAX + streaming.read_wait;
    let mut totals = SlotTotals::default();
    join_before(writer_tasks, deadline, &mut totals, "writers", &progress).await?;
    let cpu_after = server_pid.and_then(CpuTicks::of);
    let own_cpu_after = CpuTicks::of(std::process::id());
    join_before(reader_tasks, deadline, &mut totals, "readers", &progress).await?;
    let elapsed_after_measure = measure_from.elapsed();
    if scheduler.join().is_err() {
        anyhow::bail!("the schedule thread panicked");
    }
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    let (cpu_before, own_cpu_before) = cpu_at_measure.await?;
    let measured = Measured {
        totals,
        server_cpu_s: cpu_seconds(cpu_before, cpu_after, ticks_per_s),
        own_cpu_s: cpu_seconds(own_cpu_before, own_cpu_after, ticks_per_s),
        elapsed_after_measure,
    };
    Ok(streaming_report(config, streaming, admin, &store, is_ctxstore, measured).await)
}

/// Checks the streaming settings against the run's; answers whether the store is ctxstore
/// (else Redis).
fn check_streaming(config: &LoadConfig, streaming: StreamingConfig) -> anyhow::Result<bool> {
    streaming.validate().map_err(anyhow::Error::msg)?;
    anyhow::ensure!(config.connections > 0, "--connections must be at least 1");
    let is_ctxstore = matches!(config.backend, BackendKind::Ctxstore { .. });
    anyhow::ensure!(
        is_ctxstore || matches!(config.backend, BackendKind::Redis { .. }),
        "--workload streaming runs against ctxstore or redis (Redis Streams)"
    );
    anyhow::ensure!(
        !is_ctxstore || streaming.streams <= config.connections * STREAMS_PER_CONNECTION_MAX,
        "{} streams need at least {} writer connections (the server holds at most {} open \
         streams per connection, --streams-per-connection-max): raise --connections",
        streaming.streams,
        streaming.streams.div_ceil(STREAMS_PER_CONNECTION_MAX),
        STREAMS_PER_CONNECTION_MAX
    );
    Ok(is_ctxstore)
}

/// The server process and, for Redis, its data directory and `appendfsync`.
struct StoreUnderTest {
    server_pid: Option<u32>,
    redis_dir: Option<PathBuf>,
    redis_fsync: Option<String>,
}

impl StoreUnderTest {
    /// Redis says its own; ctxstore's pid is the one the run was given (if any).
    async fn of(admin: &Connection, streaming: StreamingConfig) -> anyhow::Result<Self> {
        Ok(match admin {
            Connection::Redis(redis) => {
                let (dir, fsync) = redis_streams::data_dir_and_fsync(redis).await?;
                StoreUnderTest {
                    server_pid: Some(redis_streams::server_pid(redis).await?),
                    redis_dir: Some(dir),
                    redis_fsync: Some(fsync),
                }
            }
            _ => StoreUnderTest {
                server_pid: streaming.server_pid,
                redis_dir: None,
                redis_fsync: None,
            },
        })
    }
}

/// The tasks of one side (writers or readers), one per slot, each answering its totals.
type SlotTasks = Vec<tokio::task::JoinHandle<SlotTotals>>;

/// The tasks of a slot (writer and reader) per context, spread over the connections;
/// answers the writers' tick senders and both sets of tasks.
fn spawn_slots(
    contexts: &[u64],
    writers: &[Arc<Connection>],
    readers: &[Arc<Connection>],
    plan: impl Fn(usize) -> SlotPlan,
    progress: &Arc<Progress>,
) -> (Vec<mpsc::UnboundedSender<Instant>>, SlotTasks, SlotTasks) {
    let mut tick_senders = Vec::with_capacity(contexts.len());
    let mut writer_tasks = Vec::with_capacity(contexts.len());
    let mut reader_tasks = Vec::with_capacity(contexts.len());
    for (slot, &context) in contexts.iter().enumerate() {
        let (tick_sender, ticks) = mpsc::unbounded_channel();
        let (start_sender, starts) = mpsc::unbounded_channel();
        tick_senders.push(tick_sender);
        let plan = plan(slot);
        writer_tasks.push(tokio::spawn(write_slot(
            writers[slot % writers.len()].clone(),
            context,
            plan,
            ticks,
            start_sender,
            progress.clone(),
        )));
        reader_tasks.push(tokio::spawn(follow_slot(
            readers[slot % readers.len()].clone(),
            plan,
            starts,
            progress.clone(),
        )));
    }
    (tick_senders, writer_tasks, reader_tasks)
}

/// CPU seconds between two samples (`None` when either, or the tick rate, is unknown).
fn cpu_seconds(
    before: Option<CpuTicks>,
    after: Option<CpuTicks>,
    ticks_per_s: Option<u64>,
) -> Option<f64> {
    match (before, after, ticks_per_s) {
        (Some(before), Some(after), Some(per_s)) => {
            Some(after.0.saturating_sub(before.0) as f64 / per_s as f64)
        }
        _ => None,
    }
}

/// What the run counted and the CPU it took, for its report.
struct Measured {
    totals: SlotTotals,
    server_cpu_s: Option<f64>,
    own_cpu_s: Option<f64>,
    elapsed_after_measure: Duration,
}

/// The report, once every stream is sealed: with what the store holds now, then after its
/// collection.
async fn streaming_report(
    config: &LoadConfig,
    streaming: StreamingConfig,
    admin: &Connection,
    store: &StoreUnderTest,
    is_ctxstore: bool,
    measured: Measured,
) -> Report {
    let Measured {
        totals,
        server_cpu_s,
        own_cpu_s,
        elapsed_after_measure,
    } = measured;
    let per_measured_delta = |cpu_s: Option<f64>| {
        cpu_s
            .filter(|_| totals.acknowledged_measured > 0)
            .map(|cpu_s| cpu_s * 1e6 / totals.acknowledged_measured as f64)
    };

    // Every stream is sealed: what the store holds now, then after its collection.
    let disk = |dir: Option<&Path>| dir.map(directory_usage);
    // ctxstore's deltas live in its log (decision 0027); Redis's whole directory is its AOF.
    let log = |dir: Option<&Path>| {
        dir.filter(|_| is_ctxstore)
            .map(|dir| files_usage(dir, &["turns.log", "turns.base"]))
    };
    let data_dir = config.data_dir.as_deref().or(store.redis_dir.as_deref());
    let (disk_after_seal, log_after_seal) = (disk(data_dir), log(data_dir));
    let collected = admin.stream_collect().await;
    let (disk_after_gc, log_after_gc) = (disk(data_dir), log(data_dir));
    let server = admin.server_report().await.unwrap_or_else(|error| {
        tracing::warn!(%error, "the store's own figures could not be read");
        ServerReport::default()
    });

    let mut json_config = config.to_json();
    if let Some(object) = json_config.as_object_mut() {
        object.insert("workload".into(), "streaming".into());
        object.insert("streaming".into(), streaming.to_json());
    }
    let mut report = Report::new(&totals.recorder, config.duration, server, json_config);
    report.streaming = Some(StreamingReport {
        streams: streaming.streams as u64,
        deltas_acknowledged: totals.acknowledged,
        deltas_delivered: totals.delivered,
        delivery_mismatches: totals.mismatches,
        streams_sealed: totals.sealed,
        streams_aborted: totals.aborted,
        server_cpu_s,
        server_cpu_us_per_delta: per_measured_delta(server_cpu_s),
        loadgen_cpu_us_per_delta: per_measured_delta(own_cpu_s),
        server_cpu_measured_s: elapsed_after_measure.as_secs_f64(),
        deltas_measured: totals.acknowledged_measured,
        disk_after_seal,
        disk_after_gc,
        log_after_seal,
        log_after_gc,
        gc_error: collected.err().map(|error| format!("{error:#}")),
        redis_appendfsync: store.redis_fsync.clone(),
    });
    report
}

/// How long after the schedule's end the writers may take to seal and the readers to read
/// the rest (beyond one read's wait).
const DRAIN_TIME_MAX: Duration = Duration::from_secs(60);

/// Waits for `tasks` until `deadline`; past it, stops them and fails the run.
async fn join_before(
    tasks: SlotTasks,
    deadline: Instant,
    totals: &mut SlotTotals,
    what: &str,
    progress: &Progress,
) -> anyhow::Result<()> {
    let count = tasks.len();
    for (done, mut task) in tasks.into_iter().enumerate() {
        match tokio::time::timeout_at(deadline.into(), &mut task).await {
            Ok(slot) => totals.add(&slot?),
            Err(_) => {
                task.abort();
                anyhow::bail!(
                    "the store stopped answering: {} of {count} {what} were not done {} s after \
                     the schedule ended ({} deltas acknowledged, {} delivered, {} errors until \
                     then); see the server's log",
                    count - done,
                    DRAIN_TIME_MAX.as_secs(),
                    progress.acknowledged.load(Ordering::Relaxed),
                    progress.delivered.load(Ordering::Relaxed),
                    progress.errors.load(Ordering::Relaxed),
                );
            }
        }
    }
    Ok(())
}

async fn connect(backend: &BackendKind, count: usize) -> anyhow::Result<Vec<Arc<Connection>>> {
    let mut connections = Vec::with_capacity(count);
    for _ in 0..count {
        connections.push(Arc::new(backend.connect().await?));
    }
    Ok(connections)
}

/// The schedule thread: each delta's tick to its slot's writer at its intended time (a
/// thread, as the mix's open loop: the runtime's timer would round every send up to the next
/// millisecond). Dropping the senders at the end tells the writers to seal and stop.
fn send_ticks(schedule: Schedule, end: Instant, slots: Vec<mpsc::UnboundedSender<Instant>>) {
    for n in 0u64.. {
        let intended = schedule.intended_nth(n);
        if intended >= end {
            break;
        }
        if let Some(wait) = intended.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // A writer that stopped (its connection failed for good) takes no more ticks.
        let _ = slots[(n % schedule.streams) as usize].send(intended);
    }
}

/// A stream being written: its id, length and running hash (checked at the seal).
struct Writing {
    stream_id: u64,
    length: u64,
    deltas: u32,
    hash: blake3::Hasher,
}

impl Writing {
    /// A delta acknowledged: the stream is that much longer.
    fn append(&mut self, bytes: &[u8]) {
        self.length += bytes.len() as u64;
        self.deltas += 1;
        self.hash.update(bytes);
    }
}

/// One slot's writer: a delta per tick; seal after `deltas_per_stream`, then a new stream.
async fn write_slot(
    connection: Arc<Connection>,
    context: u64,
    plan: SlotPlan,
    mut ticks: mpsc::UnboundedReceiver<Instant>,
    starts: mpsc::UnboundedSender<Started>,
    progress: Arc<Progress>,
) -> SlotTotals {
    let mut totals = SlotTotals::default();
    let mut writing: Option<Writing> = None;
    let mut index = 0u64;
    let per_stream = u64::from(plan.streaming.deltas_per_stream);
    // The first stream's length staggers the slots' seals (module doc).
    let mut seal_after = per_stream - plan.slot * per_stream / plan.schedule.streams;
    while let Some(intended) = ticks.recv().await {
        let measured = intended >= plan.measure_from;
        let this_index = index;
        index += 1;
        let stream = match writing.as_mut() {
            Some(stream) => stream,
            None => {
                let opened = open_stream(&connection, context, measured, &mut totals).await;
                match opened {
                    Some(stream_id) => {
                        let _ = starts.send(Started {
                            stream_id,
                            first_index: this_index,
                        });
                        writing.insert(Writing {
                            stream_id,
                            length: 0,
                            deltas: 0,
                            hash: blake3::Hasher::new(),
                        })
                    }
                    None => {
                        // This delta and those that fell due meanwhile go unsent: errors, not
                        // a backlog that each waits for the next open.
                        totals.recorder.error(Op::Delta);
                        while ticks.try_recv().is_ok() {
                            totals.recorder.error(Op::Delta);
                            index += 1;
                        }
                        progress.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
            }
        };
        let bytes = delta(plan.seed, plan.slot, this_index, plan.streaming.delta_bytes);
        let result = connection
            .stream_append(stream.stream_id, stream.length, bytes.clone())
            .await;
        if let Err(error) = result {
            let stream_id = stream.stream_id;
            writing = None;
            abort_stream(&connection, stream_id, &error, &mut totals, &progress).await;
            continue;
        }
        stream.append(&bytes);
        totals.acknowledged += 1;
        progress.acknowledged.fetch_add(1, Ordering::Relaxed);
        if measured {
            totals.acknowledged_measured += 1;
            totals.recorder.record(Op::Delta, intended.elapsed());
        }
        if u64::from(stream.deltas) >= seal_after
            && let Some(stream) = writing.take()
        {
            seal(&connection, stream, measured, &mut totals, &progress).await;
            seal_after = per_stream;
        }
    }
    if let Some(stream) = writing.take() {
        seal(&connection, stream, false, &mut totals, &progress).await;
    }
    totals
}

/// A delta failed: the stream's bytes are unknown now, so it is aborted (its reader stops
/// there) and the writer goes on with a new one.
async fn abort_stream(
    connection: &Connection,
    stream_id: u64,
    error: &anyhow::Error,
    totals: &mut SlotTotals,
    progress: &Progress,
) {
    tracing::warn!(%error, stream_id, "a delta failed");
    totals.recorder.error(Op::Delta);
    progress.errors.fetch_add(1, Ordering::Relaxed);
    if connection.stream_abort(stream_id).await.is_ok() {
        totals.aborted += 1;
    }
}

/// Opens a slot's next stream in `context`, timing it when `measured`; a failure counts as
/// an open error (`None`).
async fn open_stream(
    connection: &Connection,
    context: u64,
    measured: bool,
    totals: &mut SlotTotals,
) -> Option<u64> {
    let sent = Instant::now();
    match connection.stream_open(context).await {
        Ok(stream_id) => {
            if measured {
                totals.recorder.record(Op::StreamOpen, sent.elapsed());
            }
            Some(stream_id)
        }
        Err(error) => {
            tracing::warn!(%error, context, "opening a stream failed");
            totals.recorder.error(Op::StreamOpen);
            None
        }
    }
}

async fn seal(
    connection: &Connection,
    stream: Writing,
    measured: bool,
    totals: &mut SlotTotals,
    progress: &Progress,
) {
    let sent = Instant::now();
    match connection
        .stream_seal(stream.stream_id, stream.length, stream.hash.finalize())
        .await
    {
        Ok(()) => {
            totals.sealed += 1;
            progress.sealed.fetch_add(1, Ordering::Relaxed);
            if measured {
                totals.recorder.record(Op::Seal, sent.elapsed());
            }
        }
        Err(error) => {
            tracing::warn!(%error, stream_id = stream.stream_id, "a seal failed");
            totals.recorder.error(Op::Seal);
            progress.errors.fetch_add(1, Ordering::Relaxed);
            let _ = connection.stream_abort(stream.stream_id).await;
        }
    }
}

/// What a reader expects of the stream it follows: the writer's bytes, regenerated delta by
/// delta as the reader gets that far, and where each delta ends.
struct Expected {
    bytes: Vec<u8>,
    /// (end offset, slot delta index) of the deltas not yet wholly delivered, oldest first.
    pending: std::collections::VecDeque<(u64, u64)>,
    next_index: u64,
}

impl Expected {
    fn new(first_index: u64) -> Expected {
        Expected {
            bytes: Vec::new(),
            pending: std::collections::VecDeque::new(),
            next_index: first_index,
        }
    }

    /// Regenerates deltas until `len` bytes are known.
    fn extend_to(&mut self, len: u64, plan: &SlotPlan) {
        while (self.bytes.len() as u64) < len {
            let bytes = delta(
                plan.seed,
                plan.slot,
                self.next_index,
                plan.streaming.delta_bytes,
            );
            self.bytes.extend_from_slice(&bytes);
            self.pending
                .push_back((self.bytes.len() as u64, self.next_index));
            self.next_index += 1;
        }
    }
}

/// One slot's reader: follows each stream its writer opens, from offset 0 to its end.
async fn follow_slot(
    connection: Arc<Connection>,
    plan: SlotPlan,
    mut starts: mpsc::UnboundedReceiver<Started>,
    progress: Arc<Progress>,
) -> SlotTotals {
    let mut totals = SlotTotals::default();
    while let Some(started) = starts.recv().await {
        follow_stream(&connection, &plan, started, &mut totals, &progress).await;
    }
    totals
}

async fn follow_stream(
    connection: &Connection,
    plan: &SlotPlan,
    started: Started,
    totals: &mut SlotTotals,
    progress: &Progress,
) {
    let mut position = ReadPosition::default();
    let mut reading = StreamReading::new(plan.streaming.read_mode);
    let mut expected = Expected::new(started.first_index);
    // A stream whose reads keep failing is given up after this many, each counted.
    let mut failures_left = 3;
    loop {
        let wait = plan.streaming.read_wait;
        let read = match connection
            .stream_read(&mut reading, started.stream_id, &position, wait)
            .await
        {
            Ok(read) => read,
            Err(error) => {
                tracing::warn!(%error, stream_id = started.stream_id, "a stream read failed");
                totals.recorder.error(Op::Delivery);
                progress.errors.fetch_add(1, Ordering::Relaxed);
                failures_left -= 1;
                if failures_left == 0 {
                    return;
                }
                continue;
            }
        };
        let now = Instant::now();
        let from = position.offset;
        let to = from + read.bytes.len() as u64;
        expected.extend_to(to, plan);
        if expected.bytes[from as usize..to as usize] != read.bytes[..] {
            tracing::warn!(
                stream_id = started.stream_id,
                from,
                to,
                "delivered bytes differ from what the writer sent"
            );
            totals.mismatches += 1;
            return;
        }
        position.offset = to;
        if let Some(entry_id) = read.entry_id {
            position.entry_id = entry_id;
        }
        while let Some(&(end, index)) = expected.pending.front()
            && end <= to
        {
            expected.pending.pop_front();
            totals.delivered += 1;
            progress.delivered.fetch_add(1, Ordering::Relaxed);
            let intended = plan.schedule.intended(plan.slot, index);
            if intended >= plan.measure_from {
                totals
                    .recorder
                    .record(Op::Delivery, now.saturating_duration_since(intended));
            }
        }
        match read.end {
            None => {}
            Some(StreamEnd::Sealed) => {
                // The sealed stream is all the writer's deltas, whole: no delta cut short.
                if !expected.pending.is_empty() {
                    totals.mismatches += 1;
                }
                return;
            }
            Some(StreamEnd::Aborted) => return,
        }
    }
}

/// A process's CPU time (user + system) in clock ticks, from `/proc/PID/stat`.
#[derive(Clone, Copy, Debug)]
struct CpuTicks(u64);

impl CpuTicks {
    fn of(pid: u32) -> Option<CpuTicks> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces: count fields after its `)`.
        let after_name = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // Fields 14 (utime) and 15 (stime) of proc(5): 11 and 12 after the name and state.
        let user: u64 = fields.get(11)?.parse().ok()?;
        let system: u64 = fields.get(12)?.parse().ok()?;
        Some(CpuTicks(user + system))
    }

    /// Clock ticks per second (`getconf CLK_TCK`).
    fn per_second() -> Option<u64> {
        let output = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()?;
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    }
}

/// A line per second: deltas acknowledged and delivered, seals, errors.
async fn show_progress(progress: Arc<Progress>, start: Instant, end: Instant) {
    let mut last = (0, 0);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let acknowledged = progress.acknowledged.load(Ordering::Relaxed);
        let delivered = progress.delivered.load(Ordering::Relaxed);
        eprintln!(
            "[{:>4.0}s] delta {}/s delivery {}/s | sealed {} errors {}{}",
            start.elapsed().as_secs_f64(),
            acknowledged - last.0,
            delivered - last.1,
            progress.sealed.load(Ordering::Relaxed),
            progress.errors.load(Ordering::Relaxed),
            if Instant::now() > end {
                " (finishing)"
            } else {
                ""
            }
        );
        last = (acknowledged, delivered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_spreads_deltas_evenly_over_the_slots() {
        let schedule = Schedule {
            start: Instant::now(),
            streams: 4,
            deltas_per_s_total: 400.0,
        };
        // Slot 1's delta 2 is the run's 9th delta: 9 / 400 s after the start.
        let at = schedule.intended(1, 2) - schedule.start;
        assert_eq!(at, Duration::from_secs_f64(9.0 / 400.0));
        assert_eq!(schedule.intended(1, 2), schedule.intended_nth(9));
        // Each slot's own deltas are 1 / (400 / 4) = 10 ms apart.
        let gap = schedule.intended(3, 5) - schedule.intended(3, 4);
        assert!(gap.abs_diff(Duration::from_millis(10)) < Duration::from_micros(1));
    }

    #[test]
    fn the_reader_regenerates_what_the_writer_sends() {
        let plan = SlotPlan {
            slot: 3,
            seed: 9,
            streaming: StreamingConfig::default(),
            schedule: Schedule {
                start: Instant::now(),
                streams: 4,
                deltas_per_s_total: 400.0,
            },
            measure_from: Instant::now(),
        };
        let mut expected = Expected::new(500);
        expected.extend_to(100, &plan);
        let sent: Vec<u8> = (500..expected.next_index)
            .flat_map(|index| delta(9, 3, index, DeltaBytes::default()).to_vec())
            .collect();
        assert_eq!(expected.bytes, sent);
        assert!(expected.bytes.len() >= 100);
        assert_eq!(
            expected.pending.back().map(|&(end, _)| end),
            Some(sent.len() as u64)
        );
    }

    #[test]
    fn cpu_ticks_of_this_process() {
        let pid = std::process::id();
        assert!(CpuTicks::of(pid).is_some());
        assert!(CpuTicks::of(u32::MAX).is_none());
    }
}
