//! `ctxstore-loadgen`: load a ctxstore server with an agent-like workload and report latency
//! per operation. Exit codes: 0 ok, 1 error, 3 an objective of --slo was missed, 4 `check`
//! found a lost or doubled acknowledgement.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ctxstore_client::{Durability, VerifyPayloads};
use ctxstore_loadgen::backend::BackendKind;
use ctxstore_loadgen::backend::streams::StreamReadMode;
use ctxstore_loadgen::driver::{self, LoadConfig, Workload};
use ctxstore_loadgen::ops::{Mix, Op};
use ctxstore_loadgen::report::{Report, format_us};
use ctxstore_loadgen::slo::{Metric, Slo};
use ctxstore_loadgen::spawn::{SpawnedServer, default_server_binary, directory_bytes};
use ctxstore_loadgen::streaming::{self, StreamingConfig};
use ctxstore_loadgen::workload::deltas::DeltaBytes;
use ctxstore_loadgen::workload::growing::GrowingConfig;
use ctxstore_loadgen::workload::payloads::PayloadConfig;

/// Load a ctxstore server with an agent-like workload; report p50/p90/p99/p999/max per
/// operation, throughput, and the server's dedup and bytes-on-disk figures.
///
/// Closed loop by default (each worker waits for its answer); --rate R runs an open loop at R
/// operations per second with latency counted from each request's intended send time, so a
/// stalled server shows in the tail (coordinated omission corrected).
///
/// Examples:
///   ctxstore-loadgen --spawn-server --duration 10s                  # 32 agents appending
///   ctxstore-loadgen --addr 127.0.0.1:7411 --rate 5000 --duration 1m --mix append=70,get_last=25,fork=5
///   ctxstore-loadgen --spawn-server --json report.json --slo 'append.p99<=10ms,get_last.p50<=1ms'
///   ctxstore-loadgen --spawn-server --workload growing --contexts 4 --connections 4  # issue 16
///   ctxstore-loadgen --spawn-server --workload streaming --streams 500 --stream-rate 40 --connections 8  # issue 32
///   ctxstore-loadgen --backend redis --peer redis://127.0.0.1:6379 --workload streaming --streams 500
///
/// `ctxstore-loadgen check --ack-log F --addr A,B,C` reads ack logs against a store after a
/// failover drill (see `ctxstore-loadgen check --help`).
#[derive(Parser, Debug)]
#[command(
    name = "ctxstore-loadgen",
    version,
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Server address (ignored with --spawn-server).
    #[arg(long, default_value = "127.0.0.1:7411")]
    addr: String,
    /// The store to load: ctxstore, or a peer for comparison: postgres, redis, sqlite.
    #[arg(long, value_enum, default_value_t = Backend::Ctxstore)]
    backend: Backend,
    /// Where the peer is: postgres://user@host:port/db, redis://host:port, or a SQLite file.
    #[arg(long)]
    peer: Option<String>,
    /// Token for servers that require one.
    #[arg(long, env = "CTXSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Connections to the server.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Contexts (agents' conversations) the workload spreads over.
    #[arg(long, default_value_t = 32)]
    contexts: usize,
    /// Open loop at this many operations per second (all connections together).
    #[arg(long)]
    rate: Option<f64>,
    /// Closed loop (the default when --rate is not given).
    #[arg(long, conflicts_with = "rate")]
    closed_loop: bool,
    /// Closed loop: requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// How long to measure, e.g. 10s, 2m.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// How long to run before measuring.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Operations and their weights: append, get_last, page, range, fork, get_blob.
    #[arg(long, default_value = "append=100")]
    mix: Mix,
    /// Size of ordinary payloads (chat-like text), bytes.
    #[arg(long, default_value_t = 10 * 1024)]
    payload_bytes: usize,
    /// Every Nth append carries a 1 MiB incompressible payload (0: never).
    #[arg(long, default_value_t = 0)]
    large_every: u64,
    /// Share of appends that repeat an earlier payload (shared prompts, tool results), 0..1.
    #[arg(long, default_value_t = 0.0)]
    dup_ratio: f64,
    /// Turns per get_last, page and range.
    #[arg(long, default_value_t = 64)]
    read_turns: u32,
    /// Turns appended to each context before the run (reads need something to read).
    #[arg(long, default_value_t = 0)]
    prefill: u32,
    /// Open loop: requests outstanding at most.
    #[arg(long, default_value_t = 10_000)]
    max_in_flight: usize,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Objectives, e.g. 'append.p99<=10ms,get_last.p50<=1ms,append.errors<=0'; exit 3 when
    /// one is missed.
    #[arg(long)]
    slo: Option<Slo>,
    /// Start a fresh ctxstore-server on a temporary directory and a free port; stop it after.
    #[arg(long)]
    spawn_server: bool,
    /// The server binary for --spawn-server (default: next to this one, else on PATH).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Extra argument for the spawned server (repeatable), e.g. --server-arg=--shards=4.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Write one JSON line {"context_id","turn_id","parent_turn_id","depth","payload_hash",
    /// "durability"} per acknowledged append (`durability`: default, local or remote; null
    /// for a peer).
    #[arg(long)]
    ack_log: Option<PathBuf>,
    /// Seed of the workload's randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Threads of the load generator's runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// No progress line each second.
    #[arg(long)]
    quiet: bool,
    /// What the contexts do. mix: the --mix operations for --duration. growing: each context
    /// appends --growing-steps states, each the previous JSON state ({"messages":[…]}) plus
    /// one chat message, as agent frameworks checkpoint their whole state (issue 16); the run
    /// ends when every context is done, every append is measured (--duration, --warmup and
    /// --mix do not apply), and the report adds the states' bytes on disk and sent.
    /// streaming: --streams streams of token deltas at --stream-rate each, sealed after
    /// --stream-deltas and reopened, each followed by a reader (issue 32); the report adds
    /// delta, delivery, seal and stream_open latencies, the server's CPU per delta and the
    /// bytes on disk after the seals and after a collection. ctxstore or --backend redis
    /// (Redis Streams: XADD, XREAD BLOCK).
    #[arg(long, value_enum, default_value_t = WorkloadArg::Mix)]
    workload: WorkloadArg,
    /// Streaming workload: streams written at once, each on its own context with one reader.
    #[arg(long, default_value_t = 500)]
    streams: usize,
    /// Streaming workload: deltas per second of each stream (open loop).
    #[arg(long, default_value_t = 40)]
    stream_rate: u32,
    /// Streaming workload: acknowledged deltas after which a stream is sealed and the next
    /// opened.
    #[arg(long, default_value_t = 500)]
    stream_deltas: u32,
    /// Streaming workload: shortest delta, bytes.
    #[arg(long, default_value_t = 4)]
    delta_bytes_min: usize,
    /// Streaming workload: longest delta, bytes.
    #[arg(long, default_value_t = 40)]
    delta_bytes_max: usize,
    /// Streaming workload: longest wait of one read (long poll, XREAD BLOCK), e.g. 5s; with
    /// --stream-read push, how long a follow waits for a delta before it is sent again.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    stream_read_wait: Duration,
    /// Streaming workload: how ctxstore's readers read. push: one STREAM_FOLLOW per stream,
    /// the server pushes each acknowledged delta; poll: one STREAM_READ long poll per
    /// delivery (issue 32). Redis readers XREAD BLOCK either way.
    #[arg(long, value_enum, default_value_t = StreamReadArg::Push)]
    stream_read: StreamReadArg,
    /// Streaming workload: the ctxstore server's process id at --addr, for its CPU time per
    /// delta (--spawn-server knows its own; Redis tells its own).
    #[arg(long, conflicts_with = "spawn_server")]
    server_pid: Option<u32>,
    /// Growing workload: mean length of a message; each is drawn in [½, 1½] × this.
    #[arg(long, default_value_t = 1024)]
    growing_message_bytes: usize,
    /// Growing workload: appends (states) per context.
    #[arg(long, default_value_t = 300)]
    growing_steps: u32,
    /// Send every payload whole: the client's sub-blob dedup (chunking, on by default: a
    /// payload over 16 KiB goes as the chunks the server lacks) off.
    #[arg(long)]
    no_client_chunking: bool,
    /// Send payloads as they are: the client's compression (on by default on a version-3
    /// server: payloads go as zstd frames and the server checks and stores them as they
    /// came, issue 38) off, so the server compresses them.
    #[arg(long)]
    no_client_compression: bool,
    /// Which payloads the client hashes (decision 0015): `when-remote` hashes raw payloads
    /// only from a server that is not on loopback (the server hashed them when it read them;
    /// zstd ones are always hashed), `always` every payload.
    #[arg(long, default_value = "when-remote")]
    verify_payloads: VerifyPayloads,
    /// When ctxstore acknowledges each append and seal (decision 0031): local (on the
    /// server's disk) or remote (the object store holds it too: the server needs
    /// --replicate-to, e.g. --server-arg=--replicate-to=file:///tmp/replica). Default: no
    /// flag, the server's --ack-after. The ack log's `durability` says which each append had.
    #[arg(long, value_name = "local|remote", value_parser = parse_durability)]
    durability: Option<Durability>,
    /// Give every append a fresh idempotency key (decision 0031 §11): across a failover the
    /// client retries an append whose answer was lost on the next primary, where it lands
    /// exactly once. With --addr A,B,C the client follows the primary.
    #[arg(long)]
    idempotency_keys: bool,
    /// The data directory (--data) of the ctxstore server at --addr, for the bytes-on-disk
    /// figures; --spawn-server knows its own.
    #[arg(long, conflicts_with = "spawn_server")]
    data_dir: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    Check(CheckArgs),
}

/// Check ack logs (--ack-log of earlier runs) against a store, after failovers: every append
/// acknowledged `remote` present once, with its payload, on its context's chain; a `local`
/// one missing only as one of a fault's losses (before the fault, or at most --loss-window
/// after it; one fault's losses spanning less than --loss-window); no TurnID naming two turns;
/// no payload twice
/// in a chain. Exit 0 passed, 4 failed, 1 error.
///
/// Example (a drill: the primary killed at a known instant, lease 10s):
///   ctxstore-loadgen check --addr A,B,C --ack-log remote.jsonl --ack-log local.jsonl \
///       --fault-unix-ms 1796520000000 --loss-window 9500ms
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
struct CheckArgs {
    /// The store: one address, or several (the client follows the primary).
    #[arg(long, env = "CTXSTORE_ADDR", default_value = "127.0.0.1:7411")]
    addr: String,
    /// Token for servers that require one.
    #[arg(long, env = "CTXSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// An ack log to check (repeatable).
    #[arg(long, required = true)]
    ack_log: Vec<PathBuf>,
    /// When a primary was lost (Unix ms; repeatable): the local acknowledgements lost to it
    /// came before it or at most --loss-window after it.
    #[arg(long)]
    fault_unix_ms: Vec<u64>,
    /// The span of the local acknowledgements one fault may lose: the lease less its margin
    /// (9.5s at --replica-lease 10s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "9500ms")]
    loss_window: Duration,
    /// Write the verdict as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `check`: the verdict's table on stdout; exit 4 when it failed.
fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = ctxstore_loadgen::check::CheckConfig {
        addr: args.addr,
        token: args.token,
        ack_logs: args.ack_log,
        faults_unix_ms: args.fault_unix_ms,
        loss_window: args.loss_window,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = runtime.block_on(ctxstore_loadgen::check::check(&config))?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(4)
    })
}

/// The workloads `--workload` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WorkloadArg {
    Mix,
    Growing,
    Streaming,
}

/// How `--stream-read` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum StreamReadArg {
    Push,
    Poll,
}

/// The stores `--backend` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Ctxstore,
    Postgres,
    Redis,
    Sqlite,
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let mut args = Args::parse();
    let result = match args.command.take() {
        Some(Command::Check(check)) => run_check(check),
        None => run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("ctxstore-loadgen: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Set-up (the flags' checks, the server, the configuration), the run, then the report.
fn run(args: Args) -> anyhow::Result<ExitCode> {
    let workload = check_flags(&args)?;
    let spawned = if args.spawn_server {
        let binary = args
            .server_bin
            .clone()
            .unwrap_or_else(default_server_binary);
        Some(SpawnedServer::start(&binary, &args.server_args)?)
    } else {
        None
    };
    let mut config = load_config(&args, workload, spawned.as_ref())?;
    // The spawned server's CPU time is the streaming workload's figure per delta.
    if let (Workload::Streaming(streaming), Some(server)) = (&mut config.workload, &spawned) {
        streaming.server_pid = Some(server.pid());
    }
    let mut report = run_load(&config, args.threads)?;
    if args.backend == Backend::Ctxstore
        && report.streaming.is_none()
        && let Some(dir) = &config.data_dir
    {
        report.server.disk_bytes = Some(directory_bytes(dir));
    }
    if let Some(server) = spawned {
        server.stop()?;
    }
    println!("{}", report.table());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(match &args.slo {
        None => ExitCode::SUCCESS,
        Some(slo) => judge(slo, &report),
    })
}

/// The checks of flags that parse but do not fit together, before anything starts; the
/// workload they name.
fn check_flags(args: &Args) -> anyhow::Result<Workload> {
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.dup_ratio),
        "--dup-ratio must be between 0 and 1"
    );
    anyhow::ensure!(
        args.rate.is_none_or(|rate| rate > 0.0),
        "--rate must be positive"
    );
    anyhow::ensure!(
        !args.spawn_server || args.backend == Backend::Ctxstore,
        "--spawn-server starts ctxstore only"
    );
    Ok(match args.workload {
        WorkloadArg::Mix => Workload::Mix,
        WorkloadArg::Growing => {
            let growing = GrowingConfig {
                message_bytes: args.growing_message_bytes,
                steps: args.growing_steps,
            };
            growing.validate().map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                args.rate.is_none(),
                "--workload growing runs closed loop: a context's next state waits for the previous append"
            );
            anyhow::ensure!(
                args.prefill == 0,
                "--workload growing starts every context empty: --prefill does not apply"
            );
            anyhow::ensure!(
                args.mix.weights().iter().all(|(op, _)| *op == Op::Append),
                "--workload growing only appends: --mix does not apply"
            );
            Workload::Growing(growing)
        }
        WorkloadArg::Streaming => {
            let streaming = StreamingConfig {
                streams: args.streams,
                deltas_per_s: args.stream_rate,
                deltas_per_stream: args.stream_deltas,
                delta_bytes: DeltaBytes {
                    min: args.delta_bytes_min,
                    max: args.delta_bytes_max,
                },
                read_wait: args.stream_read_wait,
                read_mode: match args.stream_read {
                    StreamReadArg::Push => StreamReadMode::Push,
                    StreamReadArg::Poll => StreamReadMode::Poll,
                },
                server_pid: args.server_pid,
            };
            streaming.validate().map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                args.rate.is_none() && !args.closed_loop,
                "--workload streaming runs its own open loop: --stream-rate per stream, not --rate"
            );
            anyhow::ensure!(
                matches!(args.backend, Backend::Ctxstore | Backend::Redis),
                "--workload streaming runs against ctxstore or --backend redis (Redis Streams)"
            );
            Workload::Streaming(streaming)
        }
    })
}

/// The run's configuration: the backend (the spawned server, else --addr or --peer) and
/// the flags; the data directory of a spawned server, else --data-dir.
fn load_config(
    args: &Args,
    workload: Workload,
    spawned: Option<&SpawnedServer>,
) -> anyhow::Result<LoadConfig> {
    let addr = spawned.map_or_else(|| args.addr.clone(), |server| server.addr.clone());
    anyhow::ensure!(
        args.durability.is_none() || matches!(args.backend, Backend::Ctxstore),
        "--durability is ctxstore's (protocol version 4): not with --backend {:?}",
        args.backend
    );
    let peer = || {
        args.peer
            .clone()
            .with_context(|| format!("--backend {:?} needs --peer", args.backend))
    };
    let backend = match args.backend {
        Backend::Ctxstore => BackendKind::Ctxstore {
            addr,
            token: args.token.clone(),
            client_chunking: !args.no_client_chunking,
            client_compression: !args.no_client_compression,
            verify_payloads: args.verify_payloads,
            durability: args.durability.unwrap_or_default(),
            idempotency_keys: args.idempotency_keys,
        },
        Backend::Postgres => BackendKind::Postgres { url: peer()? },
        Backend::Redis => BackendKind::Redis { url: peer()? },
        Backend::Sqlite => BackendKind::Sqlite {
            path: PathBuf::from(peer()?),
        },
    };
    Ok(LoadConfig {
        backend,
        connections: args.connections,
        contexts: args.contexts,
        rate: args.rate,
        pipeline: args.pipeline,
        duration: args.duration,
        warmup: args.warmup,
        mix: args.mix.clone(),
        payloads: PayloadConfig {
            payload_bytes: args.payload_bytes,
            large_every: args.large_every,
            large_bytes: 1 << 20,
            dup_ratio: args.dup_ratio,
        },
        read_turns: args.read_turns,
        prefill: args.prefill,
        max_in_flight: args.max_in_flight,
        ack_log: args.ack_log.clone(),
        seed: args.seed,
        progress: !args.quiet,
        workload,
        data_dir: spawned
            .map(|server| server.data_dir.clone())
            .or_else(|| args.data_dir.clone()),
    })
}

/// The workload on a runtime of `threads` threads: the mix (warm-up, then measured for
/// --duration) and its report, or the growing states and theirs.
fn run_load(config: &LoadConfig, threads: usize) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match config.workload {
            Workload::Mix => {
                let (recorder, measured) = driver::run(config).await?;
                anyhow::Ok(driver::report(config, &recorder, measured).await)
            }
            Workload::Growing(growing) => driver::run_growing(config, growing).await,
            Workload::Streaming(streams) => streaming::run_streaming(config, streams).await,
        }
    })
}

/// One line per objective of --slo, met or MISSED with the actual value; exit 3 when any
/// was missed.
fn judge(slo: &Slo, report: &Report) -> ExitCode {
    let mut missed = 0;
    for verdict in slo.judge(report) {
        let actual = match (verdict.actual, verdict.objective.metric) {
            (None, _) => "did not run".to_string(),
            (Some(value), Metric::Throughput) => format!("{value:.1}/s"),
            (Some(value), Metric::Errors) => format!("{value}"),
            (Some(value), _) => format_us(value as u64),
        };
        let mark = if verdict.met { "met   " } else { "MISSED" };
        println!("slo {mark} {} (actual {actual})", verdict.objective);
        missed += usize::from(!verdict.met);
    }
    if missed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

/// `--durability`: `local` or `remote`.
fn parse_durability(text: &str) -> Result<Durability, String> {
    match text {
        "local" => Ok(Durability::Local),
        "remote" => Ok(Durability::Remote),
        other => Err(format!("{other:?} is not local or remote")),
    }
}
