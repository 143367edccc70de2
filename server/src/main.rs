//! `ctxstore-server`: serve a store over the binary protocol, or check one offline.
//!
//! - Flags (`--help`), layered by `settings.rs` (flag > `CTXSTORE_<FLAG>` > `--config` >
//!   default; `--print-config`), into `ServerConfig` and the engine's `EngineConfig`
//!   (`--context-ttl`, `--backup-rate-max`, `--gc-*`, `--chunk-threshold`, `--chunk-min/avg/max`,
//!   `--disk-reserve`, …); the token file checked (length, permissions), `--umask` applied.
//! - Logging to stderr, `--log-format text|json`.
//! - Signals: SIGINT/SIGTERM → drain with a deadline (`--drain-timeout`); a second → close
//!   connections now (exit 130); a third → exit at once.
//! - Offline subcommands: `verify --data DIR` (every checksum, hash and DAG invariant; non-zero
//!   on any problem) and `backup --data SRC --to DIR` (a copy of a stopped store).

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ctxstore_engine::{OpenCheck, Placement};
use ctxstore_server::config::{DEFAULT_DATA_DIR, DEFAULT_LISTEN, resolve_addr};
use ctxstore_server::{Server, ServerConfig, parse_duration, settings};

/// ctxstore: durable context storage for AI agents, over a binary protocol.
///
/// With no command, serves the store in --data on --listen until SIGINT or SIGTERM: then it
/// stops accepting, answers and writes what is in flight for at most --drain-timeout, closes
/// the remaining connections, syncs, and exits 0. A second signal closes them at once (the
/// store still syncs) and exits 130.
///
/// Examples:
///   ctxstore-server                                   # ./ctxstore-data on 127.0.0.1:7411
///   ctxstore-server --data /var/lib/ctxstore --listen 0.0.0.0:7411 --token-file /etc/ctxstore/token
///   ctxstore-server --config /etc/ctxstore/server.toml --print-config
///   ctxstore-server verify --data /var/lib/ctxstore   # offline check; exit 1 on any problem
///   ctxstore-server backup --data /var/lib/ctxstore --to /backup/ctxstore-1   # offline copy
///
/// Settings: every flag below can also come from the environment (CTXSTORE_<FLAG>, e.g.
/// CTXSTORE_NETWORK_CORES=2) or from a TOML file given with --config (key = the flag without
/// its dashes, e.g. network-cores = 2). Precedence: command line > environment > config file >
/// default. --print-config shows the result and where each value came from.
///
/// Logs go to stderr (--log-format json for one JSON object per line); RUST_LOG=debug (or
/// ctxstore_server=debug) shows more.
#[derive(Parser, Debug)]
#[command(
    name = "ctxstore-server",
    version,
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a store offline: every checksum, every blob's hash, the blob index against the
    /// packs, and the turn DAG (parent exists and is older, depth = parent + 1, every head
    /// and every turn's blob exists). Prints a summary; exits 1 if anything is wrong.
    /// The server must not be running on the directory.
    Verify {
        /// The store's directory.
        #[arg(long, default_value = DEFAULT_DATA_DIR, env = "CTXSTORE_DATA")]
        data: PathBuf,
    },
    /// Copy a store that no server is running on into a new directory (a consistent store of
    /// its own: it opens and passes verify). Sealed packs are hard-linked when both lie on one
    /// file system. For a running server use `ctxstore backup --to DIR` instead.
    Backup {
        /// The store's directory.
        #[arg(long, default_value = DEFAULT_DATA_DIR, env = "CTXSTORE_DATA")]
        data: PathBuf,
        /// Where the copy goes: absent or empty, outside the store.
        #[arg(long)]
        to: PathBuf,
        /// Creation mask of the copy's directories and files, octal (077: 0700 and 0600, as
        /// the store's own; the payloads are private).
        #[arg(long, default_value = "077", value_parser = parse_umask)]
        umask: u32,
    },
    /// Build a store from its replica (--replicate-to), as it was at a shipped point: the
    /// latest, the last point at or before --at TIME, or exactly the records up to --at-seq N
    /// (TurnIDs are record ids). The new store opens and passes verify; started with
    /// --replicate-to, it ships a new generation. Progress on stderr; an interrupted restore,
    /// run again with the same arguments, fetches only what it had not.
    Restore {
        /// The replica: s3://BUCKET/PREFIX or file:///DIR (credentials and endpoint as for
        /// --replicate-to).
        #[arg(long, value_name = "URL")]
        from: String,
        /// The new store's directory: absent or empty.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        /// The last point cut at or before this time (RFC 3339, e.g. 2026-11-27T10:00:00Z).
        #[arg(long, value_name = "TIME", conflicts_with = "at_seq", value_parser = parse_rfc3339)]
        at: Option<u64>,
        /// Every record up to this id (a TurnID), nothing after.
        #[arg(long, value_name = "N")]
        at_seq: Option<u64>,
        /// Restore from this generation's lineage instead of the newest one's.
        #[arg(long, value_name = "G")]
        generation: Option<u32>,
        #[command(flatten)]
        s3: S3Args,
        /// Creation mask of the new store, octal (as `--umask` of the server).
        #[arg(long, default_value = "077", value_parser = parse_umask)]
        umask: u32,
    },
    /// Make the standby running on DIR (--follow) the primary: at its next poll it applies
    /// what the replica holds, takes the next epoch (the old primary stops shipping within
    /// one interval), starts a new generation and ships it, then takes writes. A standby that
    /// has not applied everything its primary shipped (stalled, or unable to reach the
    /// replica) refuses, saying why. Waits for the standby's answer: exit 0 once promoted,
    /// 1 when refused or not answered in time.
    Promote {
        /// The standby's directory.
        #[arg(long, default_value = DEFAULT_DATA_DIR, env = "CTXSTORE_DATA")]
        data: PathBuf,
        /// How long to wait for the standby's answer, in seconds (0: return once the
        /// request is on disk; the standby's log and `ctxstore stats` tell the outcome).
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        wait: u64,
    },
}

/// `ctxstore-server promote`: the request file the running standby looks for, then its
/// answer.
fn promote(data: &std::path::Path, wait_s: u64) -> anyhow::Result<ExitCode> {
    use ctxstore_replica::follow::{PromotionAnswer, promotion_answer, request_promotion};
    let path = request_promotion(data).with_context(|| {
        format!(
            "requesting the promotion of the standby in {}",
            data.display()
        )
    })?;
    if wait_s == 0 {
        println!(
            "promotion requested ({}); the standby promotes itself at its next poll",
            path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_s);
    loop {
        match promotion_answer(data).context("reading the standby's answer")? {
            Some(PromotionAnswer::Promoted) => {
                println!("promoted: the standby in {} is the primary", data.display());
                return Ok(ExitCode::SUCCESS);
            }
            Some(PromotionAnswer::Refused(why)) => {
                eprintln!("promotion refused: {why}");
                return Ok(ExitCode::FAILURE);
            }
            None if std::time::Instant::now() >= deadline => {
                eprintln!(
                    "promotion requested ({}), but no answer within {wait_s} s: is a standby \
                     (--follow) running on {}? The request stays: it promotes at its next \
                     poll that applies everything shipped (its log says when).",
                    path.display(),
                    data.display()
                );
                return Ok(ExitCode::FAILURE);
            }
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

/// Where an S3-compatible replica is (each also from the usual AWS_* variables).
#[derive(Args, Debug, Clone)]
struct S3Args {
    /// The S3 endpoint, e.g. http://127.0.0.1:8333 for SeaweedFS (default: AWS_ENDPOINT, else
    /// AWS's).
    #[arg(long, value_name = "URL")]
    replica_s3_endpoint: Option<String>,
    /// The S3 region (default: AWS_REGION).
    #[arg(long, value_name = "REGION")]
    replica_s3_region: Option<String>,
    /// Allow http:// endpoints (default: AWS_ALLOW_HTTP).
    #[arg(long)]
    replica_s3_allow_http: bool,
    /// SigV4-sign each upload's body (a SHA-256 of every byte shipped) instead of sending
    /// UNSIGNED-PAYLOAD: off by default, since every object carries a BLAKE3 checksum that
    /// restore and the standby check (decision 0019).
    #[arg(long)]
    replica_s3_sign_payload: bool,
}

impl S3Args {
    fn settings(&self) -> ctxstore_replica::S3Settings {
        ctxstore_replica::S3Settings {
            endpoint: self.replica_s3_endpoint.clone(),
            region: self.replica_s3_region.clone(),
            allow_http: self.replica_s3_allow_http.then_some(true),
            sign_payload: self.replica_s3_sign_payload,
        }
    }
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// The store's directory (created on first start).
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    data: PathBuf,
    /// TOML file with any of these settings; flags and CTXSTORE_* variables override it.
    /// Unknown keys are an error.
    #[arg(long, env = "CTXSTORE_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration (as TOML, each value with its source), check it,
    /// and exit (1 if it is invalid).
    #[arg(long)]
    print_config: bool,
    /// Address to listen on, HOST:PORT (a host name is resolved; its first address is used).
    /// Anything but loopback requires --token-file.
    #[arg(long, default_value = DEFAULT_LISTEN, value_parser = resolve_addr)]
    listen: SocketAddr,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default). Loopback only unless
    /// --metrics-allow-non-loopback: the endpoint has no authentication.
    #[arg(long, value_parser = resolve_addr)]
    metrics_listen: Option<SocketAddr>,
    /// Allow --metrics-listen on a non-loopback address (a trusted network, or a firewall).
    #[arg(long)]
    metrics_allow_non_loopback: bool,
    /// Serve the read-only web console at http://ADDR/ (off by default). Loopback only
    /// unless --token-file: the console then asks for the token. The same address as
    /// --metrics-listen serves both on one socket.
    #[arg(long, value_parser = resolve_addr)]
    console_listen: Option<SocketAddr>,
    /// Log lines as text or as one JSON object per line (for log shippers).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// File holding the token clients must present in HELLO (surrounding whitespace ignored).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Network cores: threads owning connections (default: one per CPU).
    #[arg(long)]
    network_cores: Option<usize>,
    /// Pin network core i to the i-th CPU of this comma-separated list, e.g. 0,1.
    #[arg(long, value_delimiter = ',')]
    network_core_cpus: Option<Vec<usize>>,
    /// Blob shards of a new store (default 1: on small machines one pack stream syncs fastest;
    /// more parallelise fsyncs on fast disks). An existing store keeps its own count; giving a
    /// different one is an error.
    #[arg(long)]
    shards: Option<u16>,
    /// Engine threads and their actors: threads separated by '|', actors by ',' (seq, s0,
    /// s1, …), '@N' pins a thread to CPU N. Default: one thread per actor, e.g. seq|s0|s1.
    #[arg(long)]
    placement: Option<Placement>,
    /// zstd level for new blobs (1..=19).
    #[arg(long, default_value_t = 1)]
    zstd_level: i32,
    /// Largest frame a client may send (`16MiB`; bytes, or units as --backup-rate-max).
    #[arg(long, default_value = "16MiB", value_parser = parse_size_u32)]
    frame_bytes_max: u32,
    /// Largest payload of one turn (bytes or units; at most the frame size minus 48 bytes).
    #[arg(long, default_value = "16777152", value_parser = parse_size_u32)]
    blob_bytes_max: u32,
    /// Requests of one connection in flight (read, and not yet answered and written); at it the
    /// server stops reading that connection.
    #[arg(long, default_value_t = 1024)]
    requests_in_flight_max: u32,
    /// Open connections; more are answered OVERLOADED and closed (a connection still without
    /// HELLO is closed to make room first).
    #[arg(long, default_value_t = 1024)]
    connections_max: u32,
    /// Connections that have not completed HELLO (default: a quarter of --connections-max).
    /// Past it, each new connection closes the oldest of them (OVERLOADED), so that silent
    /// connections cannot lock authenticated clients out.
    #[arg(long)]
    connections_unauthenticated_max: Option<u32>,
    /// A connection must complete HELLO within this long of being accepted, or it is closed.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    hello_timeout: Duration,
    /// Response bytes one connection may hold unwritten (its peer not reading), with what its
    /// running requests hold and may still produce; past it the server stops reading that
    /// connection (`64MiB`; bytes or units).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    unwritten_bytes_max: u64,
    /// Response bytes all connections together may hold unwritten, with what running requests
    /// reserve (a hard bound). A request reserves its largest answer before it starts and waits
    /// while it does not fit; connections already holding bytes fill only a quarter of it, so
    /// clients that read are still served, those that do not wait (`1GiB`; bytes or units).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    unwritten_bytes_total_max: u64,
    /// At SIGINT/SIGTERM, how long connections get to answer and write what is in flight
    /// before they are closed hard.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// Delete contexts not updated for this long (`7d`, `12h`, …) unless they carry a time
    /// to live of their own (`ctxstore ctx ttl`); `off` (default) keeps them until deleted.
    /// Expiry is a delete written to the log, so it survives restarts.
    #[arg(long, default_value = "off", value_parser = parse_ttl)]
    context_ttl: Duration,
    /// Abort a stream (issue 32) without a delta for this long (`10m`, `1h`); `off`: never.
    /// Aborted, not sealed: the head moves only when a writer seals (decision 0027).
    #[arg(long, default_value = "10m", value_parser = parse_ttl)]
    stream_idle_timeout: Duration,
    /// Streams open at once in the store; each holds its bytes in memory until sealed.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    streams_open_max: u32,
    /// Longest wait of one STREAM_READ (a long poll), in milliseconds (at most 60,000): the
    /// reader asks again from the same offset.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    stream_wait_ms_max: u32,
    /// Streams one connection may hold open at once (it opened them and has not sealed or
    /// aborted them; a closed connection's streams are released to whoever writes next).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    streams_per_connection_max: u32,
    /// Bytes per second an online backup (`ctxstore backup`) copies at most, e.g. `64MiB`,
    /// `200MB`; `off` (default): as fast as the disk allows. The copy shares the disk with every
    /// append's fdatasync: limit it on a disk that a full-speed copy would crowd.
    #[arg(long, default_value = "off", value_parser = parse_rate)]
    backup_rate_max: u64,
    /// How often garbage collection runs on its own (`10m`, `1h`, at most 30 days): it
    /// collects what no live context reaches and compacts packs (`ctxstore gc` runs one now).
    /// `off` or `0`: only on request.
    #[arg(long, default_value = "10m", value_parser = parse_gc_interval)]
    gc_interval: Duration,
    /// A pack is rewritten with only its live records when at least this percentage of its
    /// bytes is unreachable (1..=100): lower gives disk back sooner for more rewriting.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=100))]
    gc_pack_dead_percent: u8,
    /// Bytes per second a pack compaction reads and writes at most (units as
    /// --backup-rate-max); `off` or `0`: as fast as the disk allows. The compaction shares the
    /// disk with every append's fdatasync.
    #[arg(long, default_value = "32MiB", value_parser = parse_rate)]
    gc_rate_max: u64,
    /// A collection starts early (checked every second) once deleted contexts held this many
    /// payload bytes since the last one (`512MiB`, `2GiB`; raw bytes appended to them, an
    /// estimate); `off` or `0`: on the schedule only.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    gc_deleted_bytes_trigger: u64,
    /// turns.log is compacted at the end of a collection (the records of collected turns no
    /// live history needs leave it; mostly deleted contexts' turns, 128 B each) once they hold
    /// this many bytes and --gc-pack-dead-percent of the log (`1MiB`; `0`: whenever there is
    /// one).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    gc_log_dead_bytes_min: u64,
    /// Disk kept allocated (DIR/RESERVE) for garbage collection alone: when the disk fills
    /// up, a collection gives it up to compact, so deleting contexts always gives space back
    /// (`64MiB`; at most 64GiB; `off` or `0`: none). Size it to the live bytes of the packs you
    /// expect to compact first (docs/operations.md#a-full-disk).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    disk_reserve: u64,
    /// Ship the store continuously to an object store: s3://BUCKET/PREFIX (credentials, region
    /// and endpoint from the AWS_* variables or the --replica-s3-* settings) or file:///DIR.
    /// Asynchronous: no acknowledgement waits for it. Restore with `ctxstore-server restore`
    /// (docs/operations.md#replication).
    #[arg(long, value_name = "URL")]
    replicate_to: Option<String>,
    /// At most one segment upload per this interval (`1s`; plus one per pack a collection
    /// rewrites): what was acknowledged is off-host about this long later.
    #[arg(long, default_value = "1s", value_parser = parse_replicate_interval)]
    replicate_interval: Duration,
    /// A checkpoint (a restore starts from the newest one) this often, by time (`1h`) or by
    /// bytes shipped since the last (`1GiB`).
    #[arg(long, default_value = "1h", value_parser = parse_base_interval)]
    replica_base_interval: BaseInterval,
    /// Delete remote objects that no restore point of this window needs (`7d`; `off`: keep
    /// everything). Every half window the store's packs and log prefix still shipped in old
    /// segments are uploaded anew, so purged bytes leave within about 1.5 windows.
    #[arg(long, default_value = "7d", value_parser = parse_retention)]
    replica_retention: Duration,
    /// Serve even if the replica cannot be reached at start; replication catches up.
    #[arg(long)]
    replicate_start_anyway: bool,
    /// Run as a standby of the replica at URL (s3://BUCKET/PREFIX or file:///DIR): an empty
    /// --data is restored from its newest point first; then every read is served from what
    /// the primary shipped (polled every --replicate-interval), and every write is refused
    /// with READ_ONLY naming the primary. `ctxstore-server promote --data DIR` makes it the
    /// primary (docs/operations.md#a-standby).
    #[arg(long, value_name = "URL", conflicts_with = "replicate_to")]
    follow: Option<String>,
    /// Where clients reach this server, written into the replica's epoch object when it takes
    /// the replica: standbys name it in their READ_ONLY answers (default: --listen).
    #[arg(long, value_name = "HOST:PORT")]
    replica_advertise: Option<String>,
    /// The most bytes one segment carries (`64MiB`); a larger backlog ships as several.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    replica_segment_bytes_max: u64,
    /// How the shipper's threads yield the CPU to the server's: N nice steps below the
    /// server's own (`10`; 0..=19, capped at nice 19), or `idle` (Linux's SCHED_IDLE: they run
    /// only on an otherwise idle core and give it up at once when a server thread wakes; on a
    /// machine without idle time they fall behind, which the lag shows).
    #[arg(long, default_value = "10", value_name = "N|idle", value_parser = parse_ship_priority)]
    replica_nice: ctxstore_replica::ShipPriority,
    #[command(flatten)]
    replica_s3: S3Args,
    /// Payloads longer than this are stored as content-defined chunks plus a manifest, so a
    /// state that grows a little each step costs its growth on disk (`16KiB`; `off` or `0`:
    /// every payload stays one record). Decision 0013.
    #[arg(long, default_value = "16KiB", value_parser = parse_chunk_bytes)]
    chunk_threshold: u64,
    /// Smallest chunk FastCDC cuts (bytes, 64..=1MiB). Clients that chunk on their side use
    /// the same three sizes so that their chunks dedup with the server's.
    #[arg(long, default_value = "512", value_parser = parse_chunk_bytes)]
    chunk_min: u64,
    /// The chunk size FastCDC aims at (256 B..=4MiB, between --chunk-min and --chunk-max).
    #[arg(long, default_value = "1KiB", value_parser = parse_chunk_bytes)]
    chunk_avg: u64,
    /// Largest chunk (1KiB..=1MiB).
    #[arg(long, default_value = "8KiB", value_parser = parse_chunk_bytes)]
    chunk_max: u64,
    /// File-mode creation mask (octal) for the store's directory and files: 077 makes them
    /// 0700 and 0600 (only the server's user may read the data).
    #[arg(long, default_value = "077", value_parser = parse_umask)]
    umask: u32,
    /// Turns one read (GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH, GET_CHAIN) may return.
    #[arg(long, default_value_t = 10_000)]
    read_turns_max: u32,
    /// Hashes in one HAS_BLOBS.
    #[arg(long, default_value_t = 4096)]
    has_blobs_max: u32,
    /// Close a connection idle this long (e.g. 300s, 5m).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// A frame must arrive completely within this long of its first byte (slow senders).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    frame_timeout: Duration,
    /// What to check at start: full (every record) or tail (trust the blob index).
    #[arg(long, default_value = "full")]
    open_check: OpenCheck,
    /// Cut a file at a damaged record instead of refusing to start (loses what follows it).
    #[arg(long)]
    repair: bool,
    /// Do not prepare zero-filled space ahead of writes (for btrfs/ZFS).
    #[arg(long)]
    no_preallocate: bool,
    /// When listening, write the bound address to this file (useful with --listen …:0).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Bytes a pack grows to before a new one is started. Every pack keeps one file
    /// descriptor open for reads, so the server needs about packs + connections + 64 of them
    /// (`1GiB`; bytes or units).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pack_bytes_max: u64,
    /// Raw payload bytes each network core keeps for hot reads (an agent reading its last
    /// turns again), so that they skip the pack read and zstd. Payloads over 1/16 of it are not
    /// cached; `0` or `off` disables the cache. Memory: this times --network-cores (`32MiB`;
    /// bytes or units).
    #[arg(long, default_value = "32MiB", value_parser = parse_size)]
    payload_cache_bytes: u64,
    /// Payload bytes in one page of turns (GET_LAST, GET_BEFORE, …): a page holds fewer turns
    /// than asked rather than more bytes, and the client follows the cursor (at most 512 MiB;
    /// clients must accept frames this large; `64MiB`, bytes or units).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    response_bytes_max: u64,
    /// Requests queued per engine actor (sequencer, each blob shard); when a queue is full,
    /// network cores wait, and so stop reading their connections.
    #[arg(long, default_value_t = 4096)]
    queue_depth_max: u32,
    /// Records (turns, context creations) in one sequencer group commit (at most 65,536).
    #[arg(long, default_value_t = 4096)]
    sequencer_batch_records_max: u32,
    /// Blob records in one shard group commit (at most 1,024).
    #[arg(long, default_value_t = 256)]
    shard_batch_records_max: u32,
    /// Bytes of blob records in one shard group commit (at most 256 MiB; at least one record
    /// of --blob-bytes-max; `64MiB`, bytes or units).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    shard_batch_bytes_max: u64,
    /// Microseconds an engine actor may wait for more requests before a group commit. 0: none
    /// (requests that arrive during an fsync form the next batch); waiting trades one
    /// agent's latency for fewer fsyncs, which pays only when fsyncs, not CPU, are the limit.
    #[arg(long, default_value_t = 0)]
    batch_wait_us_max: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let (cli, effective) = parse_layered();
    init_logging(cli.serve.log_format);
    let result = match cli.command {
        Some(Command::Verify { data }) => verify(&data),
        Some(Command::Backup { data, to, umask }) => backup(&data, &to, umask),
        Some(Command::Restore {
            from,
            to,
            at,
            at_seq,
            generation,
            s3,
            umask,
        }) => restore(&from, &to, at, at_seq, generation, &s3, umask),
        Some(Command::Promote { data, wait }) => promote(&data, wait),
        None if cli.serve.print_config => print_config(cli.serve, &effective),
        None => serve(cli.serve),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("ctxstore-server: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses the command line over the environment over the `--config` file over the defaults
/// (`ctxstore_server::settings`); exits like clap on a usage error, with 2 and the file and
/// line on a bad config file. Returns the settings' values and sources too.
fn parse_layered() -> (Cli, Vec<settings::Effective>) {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = settings::with_env(Cli::command());
    // First pass: only to find --config (a usage error here would be one in the second too).
    let first = command
        .clone()
        .try_get_matches_from(&args)
        .unwrap_or_else(|error| error.exit());
    let file = match first.get_one::<PathBuf>("config") {
        Some(path) if first.subcommand().is_none() => {
            match settings::ConfigFile::load(path, &command) {
                Ok(file) => Some(file),
                Err(error) => {
                    eprintln!("ctxstore-server: {error}");
                    std::process::exit(2);
                }
            }
        }
        _ => None,
    };
    let command = match &file {
        Some(file) => file.apply(command),
        None => command,
    };
    let matches = command
        .clone()
        .try_get_matches_from(&args)
        .unwrap_or_else(|error| error.exit());
    // The pristine command lists the settings in --help order.
    let effective = settings::effective(&Cli::command(), &matches, file.as_ref());
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    (cli, effective)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // object_store logs each retry at info: its own transient errors, which the
        // replication state and failure counters already report; RUST_LOG=object_store=info
        // shows them.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,object_store=warn"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// `--print-config`: the effective settings as TOML with their sources, then the same checks
/// a start makes (without opening the store or binding anything).
fn print_config(args: ServeArgs, effective: &[settings::Effective]) -> anyhow::Result<ExitCode> {
    let config = match config(args) {
        Ok(config) => config,
        Err(error) => {
            print!("{}", settings::render(effective));
            return Err(error);
        }
    };
    // Settings left out that the server works out at start: show the values it will use.
    let mut effective = effective.to_vec();
    for setting in effective
        .iter_mut()
        .filter(|setting| setting.source == settings::Source::Unset)
    {
        let derived = match setting.key.as_str() {
            "network-cores" => Some((config.network_cores.to_string(), "one per CPU")),
            "shards" => Some((
                config.engine.shard_count.to_string(),
                "the store's own count, 1 for a new store",
            )),
            "placement" => Some((config.engine.placement.to_string(), "a thread per actor")),
            "connections-unauthenticated-max" => Some((
                config.limits.connections_unauthenticated_max.to_string(),
                "a quarter of connections-max",
            )),
            _ => None,
        };
        if let Some((value, reason)) = derived {
            setting.values = vec![value];
            setting.source = settings::Source::Derived(reason);
        }
    }
    print!("{}", settings::render(&effective));
    config
        .validate()
        .map_err(anyhow::Error::msg)
        .context("invalid configuration")?;
    Ok(ExitCode::SUCCESS)
}

fn verify(data: &std::path::Path) -> anyhow::Result<ExitCode> {
    let report =
        ctxstore_engine::verify(data).with_context(|| format!("verifying {}", data.display()))?;
    println!("{report}");
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `ctxstore-server restore`: the replica's point into a new store, opened and verified.
fn restore(
    from: &str,
    to: &std::path::Path,
    at: Option<u64>,
    at_seq: Option<u64>,
    generation: Option<u32>,
    s3: &S3Args,
    umask: u32,
) -> anyhow::Result<ExitCode> {
    use ctxstore_replica::restore::RestorePoint;
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(umask));
    let to = std::path::absolute(to).with_context(|| format!("resolving {}", to.display()))?;
    let point = match (at, at_seq) {
        (Some(unix_ms), _) => RestorePoint::AtTime { unix_ms },
        (None, Some(record_id)) => RestorePoint::AtSeq { record_id },
        (None, None) => RestorePoint::Latest,
    };
    let remote = ctxstore_replica::target::open(from, &s3.settings())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .context("starting the restore's runtime")?;
    let started = std::time::Instant::now();
    let mut progress = restore_progress(started);
    let report = runtime
        .block_on(ctxstore_replica::restore::restore(
            &remote,
            &to,
            point,
            generation,
            &mut progress,
        ))
        .with_context(|| format!("restoring {from} into {}", to.display()))?;
    let (floors, verified) = check_restored(&to, &report, &remote, &runtime)?;
    println!(
        "restored_dir {}\ngeneration {}\nseq {}\npoint_unix_ms {}\nlog_records {}\nnext_turn_id {}\nnext_context_id {}\nturns {}\nblobs {}\nobjects {}\nbytes {}\nduration_ms {}",
        report.dir.display(),
        report.generation,
        report.seq,
        report.created_unix_ms,
        report.log_records,
        floors.records,
        floors.contexts,
        verified.turns,
        verified.blobs,
        report.objects,
        report.bytes,
        started.elapsed().as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

/// A restore's progress on stderr: a line a second at most, and the last one.
fn restore_progress(
    started: std::time::Instant,
) -> impl FnMut(ctxstore_replica::restore::Progress) {
    let mut last_line = std::time::Instant::now() - std::time::Duration::from_secs(1);
    move |done: ctxstore_replica::restore::Progress| {
        let finished = done.objects_done == done.objects_total;
        if finished || last_line.elapsed() >= std::time::Duration::from_secs(1) {
            last_line = std::time::Instant::now();
            let seconds = started.elapsed().as_secs_f64().max(0.001);
            eprintln!(
                "restore: {}/{} objects, {:.1}/{:.1} MiB, {:.1} MiB/s",
                done.objects_done,
                done.objects_total,
                done.bytes_done as f64 / 1048576.0,
                done.bytes_total as f64 / 1048576.0,
                done.bytes_done as f64 / 1048576.0 / seconds
            );
        }
    }
}

/// The restored store opened (recovery checks it), every record of the point found in it,
/// its ids raised past the replica's, then verified.
fn check_restored(
    to: &std::path::Path,
    report: &ctxstore_replica::restore::RestoreReport,
    remote: &ctxstore_replica::Remote,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<(
    ctxstore_engine::id_floors::IdFloors,
    ctxstore_engine::VerifyReport,
)> {
    // The restored store is a store like any other: recovery checks it, then verify.
    let shards = ctxstore_engine::store_dir::StoreDir::new(to)
        .existing_shard_count()?
        .unwrap_or(1);
    let engine =
        ctxstore_engine::Engine::open(ctxstore_engine::EngineConfig::new(to).with_shards(shards))
            .with_context(|| format!("opening the restored store {}", to.display()))?;
    // Recovery keeps a turn only with its blob: a store that opens with fewer records than
    // the point holds lost some (issue 46: this exited 0 and verified). Never a silent loss.
    let held = engine.durable_records();
    if held < report.log_records {
        engine.shutdown();
        anyhow::bail!(
            "the store restored in {} opens with records up to {held}, not the point's {}: a \
             blob record {} names is in no object the point reads; restore an earlier point \
             (--at-seq {held} or before), and report this",
            to.display(),
            report.log_records,
            held + 1
        );
    }
    // A restored store is started to take writes: its ids start past every one the
    // replica's primaries may have handed out without shipping it (issue 46 item 8).
    let floors = runtime
        .block_on(ctxstore_replica::ids::start_past_replica(remote, &engine))
        .with_context(|| format!("raising the ids of {}", to.display()));
    engine.shutdown();
    let floors = floors?;
    let verified = ctxstore_engine::verify(to)?;
    if !verified.is_ok() {
        eprintln!("{verified}");
        anyhow::bail!("the restored store in {} does not verify", to.display());
    }
    Ok((floors, verified))
}

/// A checkpoint schedule: by time or by bytes shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BaseInterval {
    Time(Duration),
    Bytes(u64),
}

fn parse_base_interval(text: &str) -> Result<BaseInterval, String> {
    if let Ok(duration) = parse_duration(text) {
        if duration < Duration::from_secs(1) {
            return Err(format!("{text:?}: a checkpoint interval is at least 1s"));
        }
        return Ok(BaseInterval::Time(duration));
    }
    match parse_rate(text) {
        Ok(bytes) if bytes >= 1 << 20 => Ok(BaseInterval::Bytes(bytes)),
        _ => Err(format!(
            "{text:?} is neither a duration (1h) nor a size of at least 1MiB (1GiB)"
        )),
    }
}

fn parse_replicate_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&interval) {
        return Err(format!("{text:?}: the replication interval is 10ms to 1h"));
    }
    Ok(interval)
}

/// `off` (keep everything) or a window of at least 1 minute.
fn parse_retention(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let window = parse_duration(text)?;
    if window < Duration::from_secs(60) {
        return Err(format!(
            "{text:?}: the replica retention is at least 1m (or off)"
        ));
    }
    Ok(window)
}

/// An RFC 3339 time as Unix milliseconds.
fn parse_rfc3339(text: &str) -> Result<u64, String> {
    humantime::parse_rfc3339_weak(text.trim())
        .map_err(|_| format!("{text:?} is not a time like 2026-11-27T10:00:00Z"))?
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .map_err(|_| format!("{text:?} is before 1970"))
}

/// The offline backup: open the store (recovery runs as at a start), copy it, close it.
fn backup(data: &std::path::Path, to: &std::path::Path, umask: u32) -> anyhow::Result<ExitCode> {
    // Before anything is created, as for a server: the copy holds the same private payloads.
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(umask));
    if !data.join("ctxstore.meta").exists() {
        anyhow::bail!("{} is not a ctxstore data directory", data.display());
    }
    let to = std::path::absolute(to).with_context(|| format!("resolving {}", to.display()))?;
    // The store keeps the shard count it was created with.
    let shards = ctxstore_engine::store_dir::StoreDir::new(data)
        .existing_shard_count()
        .with_context(|| format!("reading {}", data.display()))?
        .unwrap_or(1);
    let config = ctxstore_engine::EngineConfig::new(data).with_shards(shards);
    let engine = ctxstore_engine::Engine::open(config)
        .with_context(|| format!("opening {}", data.display()))?;
    let report = engine.backup(&to);
    engine.shutdown();
    let report =
        report.with_context(|| format!("backing up {} to {}", data.display(), to.display()))?;
    println!(
        "backup_dir {}\nturns {}\nblobs {}\nbytes {} ({} hard-linked)\nduration_ms {}",
        report.dir.display(),
        report.turns,
        report.blobs,
        report.bytes,
        report.linked_bytes,
        report.duration_ms
    );
    Ok(ExitCode::SUCCESS)
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before anything is created: the data may be private (conversations, tool output).
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(args.umask));
    warn_if_more_open_than_umask(&args.data, args.umask);
    let config = config(args)?;
    raise_open_files_limit(config.limits.connections_max);
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing signal handlers")?;
    let drain_timeout = config.drain_timeout;
    // A signal while the start waits (a standby waiting for its replica's first restore
    // point) ends the wait; the iterator above still sees it.
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, config.stop_waiting.clone())
            .context("installing signal handlers")?;
    }
    // Kept for a standby's restart onto a fresh restore (the same addresses once bound).
    let mut restart_config = config.clone();
    let mut server = match Server::start(config) {
        Ok(server) => server,
        Err(error)
            if error.chain().any(|cause| {
                matches!(
                    cause.downcast_ref::<ctxstore_replica::ReplicaError>(),
                    Some(ctxstore_replica::ReplicaError::Stopped)
                )
            }) =>
        {
            tracing::info!("stopped by a signal while waiting for the replica; nothing to drain");
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => return Err(error),
    };
    let second_signal = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut signals = signals;
    let signal = serve_until_signal(&mut server, &mut signals, &mut restart_config)?;
    tracing::info!(
        signal,
        ?drain_timeout,
        "shutting down: no new connections, answering and writing what is in flight"
    );
    let handle = signals.handle();
    watch_later_signals(signals, server.hurry_handle(), second_signal.clone());
    server.stop();
    handle.close();
    Ok(if second_signal.load(std::sync::atomic::Ordering::SeqCst) {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// Serves until a signal, and returns it; a stalled standby that restored its replica afresh
/// restarts onto it meanwhile (its connections closed; clients reconnect to the same
/// address).
fn serve_until_signal(
    server: &mut Server,
    signals: &mut signal_hook::iterator::Signals,
    restart_config: &mut ServerConfig,
) -> anyhow::Result<i32> {
    loop {
        if let Some(signal) = signals.pending().next() {
            return Ok(signal);
        }
        if server.fresh_restore_ready() {
            tracing::warn!(
                "the stalled standby restarts onto its fresh restore: its connections close, \
                 it answers again on the same address once the fresh store is open"
            );
            restart_config.listen = server.local_addr();
            restart_config.metrics_listen = server.metrics_addr().or(restart_config.metrics_listen);
            restart_config.console_listen = server.console_addr().or(restart_config.console_listen);
            server.stop();
            *server = Server::start(restart_config.clone())
                .context("restarting the standby onto its fresh restore")?;
            continue;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A second signal while draining closes every connection at once (and raises
/// `second_signal`); the engine still finishes its queues and syncs. A third exits without
/// waiting for anything (recovery at the next start handles whatever was not synced; nothing
/// acknowledged is lost).
fn watch_later_signals(
    signals: signal_hook::iterator::Signals,
    hurry: ctxstore_server::HurryHandle,
    second_signal: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let mut signals = signals;
    std::thread::spawn(move || {
        let mut more = signals.forever();
        if more.next().is_some() {
            second_signal.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!("ctxstore-server: second signal, closing every connection now");
            hurry.hurry();
        }
        if more.next().is_some() {
            eprintln!("ctxstore-server: third signal, exiting without waiting");
            std::process::exit(130);
        }
    });
}

/// A chunk size or threshold: a byte count (units as `parse_size`) that fits in 32 bits.
fn parse_chunk_bytes(text: &str) -> Result<u64, String> {
    parse_size_u32(text).map(u64::from)
}

/// A byte count (units as `parse_size`) for a 32-bit setting: at most 4 GiB − 1 byte.
fn parse_size_u32(text: &str) -> Result<u32, String> {
    let bytes = parse_size(text)?;
    u32::try_from(bytes).map_err(|_| {
        format!(
            "{text:?} is over 4 GiB ({bytes} bytes; at most {} here)",
            u32::MAX
        )
    })
}

/// A byte count with the units of `parse_rate` (`32MiB`, `200MB`, plain bytes), or
/// `off` / `0`.
fn parse_ship_priority(text: &str) -> Result<ctxstore_replica::ShipPriority, String> {
    if text == "idle" {
        return Ok(ctxstore_replica::ShipPriority::Idle);
    }
    match text.parse::<u8>() {
        Ok(steps) if steps <= ctxstore_replica::ship::NICE_MAX => {
            Ok(ctxstore_replica::ShipPriority::Nice(steps))
        }
        _ => Err(format!(
            "{text:?} is neither a number of nice steps (0..=19) nor `idle`"
        )),
    }
}

fn parse_size(text: &str) -> Result<u64, String> {
    parse_rate(text).map_err(|_| format!("{text:?} is not a byte count (e.g. 512MiB, 2GiB, off)"))
}

/// A rate in bytes per second: a number with an optional unit (`KB`, `MB`, `GB`, powers of
/// 1000; `KiB`, `MiB`, `GiB`, powers of 1024), or `off` / `0` for no limit.
fn parse_rate(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if matches!(text, "off" | "none" | "0") {
        return Ok(0);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte rate (e.g. 64MiB, 200MB, off)"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (B, KB, MB, GB, KiB, MiB, GiB)"
            ));
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A context TTL: `off` (or `0`) for none, else a duration of at most 100 years.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let ttl = parse_duration(text)?;
    let max = Duration::from_millis(ctxstore_engine::config::TTL_MS_MAX);
    if ttl > max {
        return Err(format!(
            "a context TTL is at most 100 years; {text:?} is longer"
        ));
    }
    if ttl < Duration::from_millis(1) {
        return Err(format!(
            "a context TTL is at least 1ms (or off); got {text:?}"
        ));
    }
    Ok(ttl)
}

/// The garbage collector's interval: `off` (or `0`) for only on request, else a duration of
/// 1 ms to 30 days.
fn parse_gc_interval(text: &str) -> Result<Duration, String> {
    if matches!(text.trim(), "off" | "none" | "0") {
        return Ok(Duration::ZERO);
    }
    let interval = parse_duration(text)?;
    if interval > Duration::from_secs(30 * 24 * 3600) {
        return Err(format!(
            "the garbage collection interval is at most 30 days; {text:?} is longer"
        ));
    }
    if interval < Duration::from_millis(1) {
        return Err(format!(
            "the garbage collection interval is at least 1ms (or off); got {text:?}"
        ));
    }
    Ok(interval)
}

/// Parses an octal umask such as `077` or `0027`.
fn parse_umask(text: &str) -> Result<u32, String> {
    match u32::from_str_radix(text.trim(), 8) {
        Ok(mask) if mask <= 0o777 => Ok(mask),
        _ => Err(format!("{text:?} is not an octal umask like 077 or 027")),
    }
}

/// File descriptors the server needs besides one per connection and one per pack: the
/// store's other files, listeners, io_uring instances, wakers and the runtimes' own.
const FDS_BESIDES_CONNECTIONS_AND_PACKS: u64 = 64;

/// Raises the soft limit on open files to the hard limit: the server holds one descriptor
/// per connection and per pack, and the usual soft limit (1,024) is below the default
/// `--connections-max` plus a store's packs. Warns when the hard limit is still too low,
/// because then accepting connections or opening a new pack fails with EMFILE at run time.
fn raise_open_files_limit(connections_max: u32) {
    let wanted = u64::from(connections_max) + FDS_BESIDES_CONNECTIONS_AND_PACKS;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < wanted => tracing::warn!(
            open_files_max = limit,
            wanted,
            "the open-files limit is below --connections-max plus the store's own; \
             raise it (ulimit -n / LimitNOFILE=) or lower --connections-max"
        ),
        Ok(limit) => tracing::info!(open_files_max = limit, "open-files limit"),
        Err(error) => tracing::warn!(%error, "could not read or raise the open-files limit"),
    }
}

fn config(args: ServeArgs) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::new(&args.data);
    config.listen = args.listen;
    config.metrics_listen = args.metrics_listen;
    config.metrics_allow_non_loopback = args.metrics_allow_non_loopback;
    config.console_listen = args.console_listen;
    if let Some(path) = &args.token_file {
        warn_if_readable_by_others(path);
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token file {}", path.display()))?;
        let token = token.trim().to_string();
        anyhow::ensure!(
            !token.is_empty(),
            "the token file {} is empty",
            path.display()
        );
        config.token = Some(token);
    }
    if let Some(cores) = args.network_cores {
        config.network_cores = cores;
    }
    if let Some(cpus) = &args.network_core_cpus {
        if args.network_cores.is_none() {
            config.network_cores = cpus.len();
        }
        config.network_core_cpus = Some(cpus.clone());
    }
    let existing = ctxstore_engine::store_dir::StoreDir::new(&args.data).existing_shard_count()?;
    let shards = args.shards.or(existing).unwrap_or(1);
    config.engine = config.engine.with_shards(shards);
    engine_settings(&args, &mut config.engine);
    replication_settings(&args, &mut config);
    limit_settings(&args, &mut config);
    config.ready_file = args.ready_file;
    config.payload_cache_bytes_per_core = args.payload_cache_bytes;
    Ok(config)
}

/// The engine's settings: placement, checks at open, expiry, streams, garbage collection,
/// chunking and its own limits.
fn engine_settings(args: &ServeArgs, engine: &mut ctxstore_engine::EngineConfig) {
    if let Some(placement) = &args.placement {
        engine.placement = placement.clone();
    }
    engine.zstd_level = args.zstd_level;
    engine.open_check = args.open_check;
    engine.repair = args.repair;
    engine.preallocate = !args.no_preallocate;
    engine.context_ttl_default_ms = args.context_ttl.as_millis() as u64;
    engine.stream_idle_timeout_ms = args.stream_idle_timeout.as_millis() as u64;
    engine.limits.streams_open_max = args.streams_open_max;
    engine.backup_bytes_per_s_max = args.backup_rate_max;
    engine.gc_interval_ms = args.gc_interval.as_millis() as u64;
    engine.gc_deleted_bytes_trigger = args.gc_deleted_bytes_trigger;
    engine.gc_log_dead_bytes_min = args.gc_log_dead_bytes_min;
    engine.disk_reserve_bytes = args.disk_reserve;
    engine.gc_pack_dead_percent = args.gc_pack_dead_percent;
    engine.gc_bytes_per_s_max = args.gc_rate_max;
    // parse_chunk_bytes bounds each to u32; the engine's validation checks the rest.
    engine.chunking = ctxstore_engine::ChunkingConfig {
        threshold_bytes: args.chunk_threshold as u32,
        chunk_bytes_min: args.chunk_min as u32,
        chunk_bytes_avg: args.chunk_avg as u32,
        chunk_bytes_max: args.chunk_max as u32,
    };
    engine.limits.blob_bytes_max = args.blob_bytes_max;
    engine.limits.read_turns_max = args.read_turns_max;
    engine.limits.pack_bytes_max = args.pack_bytes_max;
    engine.limits.queue_depth_max = args.queue_depth_max;
    engine.limits.sequencer_batch_records_max = args.sequencer_batch_records_max;
    engine.limits.shard_batch_records_max = args.shard_batch_records_max;
    engine.limits.shard_batch_bytes_max = args.shard_batch_bytes_max;
    engine.limits.batch_wait_us_max = args.batch_wait_us_max;
}

/// Shipping to a replica (`--replicate-to`) or following one as a standby (`--follow`).
fn replication_settings(args: &ServeArgs, config: &mut ServerConfig) {
    // Empty: the server writes the address it bound (`Server::start`).
    let advertise = args.replica_advertise.clone().unwrap_or_default();
    if let Some(url) = &args.replicate_to {
        let mut replication = ctxstore_replica::ShipConfig::new(url);
        replication.s3 = args.replica_s3.settings();
        replication.interval = args.replicate_interval;
        match args.replica_base_interval {
            BaseInterval::Time(interval) => {
                replication.checkpoint_interval = interval;
                replication.checkpoint_bytes = 0;
            }
            BaseInterval::Bytes(bytes) => {
                replication.checkpoint_interval = Duration::from_secs(u64::MAX / 4);
                replication.checkpoint_bytes = bytes;
            }
        }
        replication.retention =
            (!args.replica_retention.is_zero()).then_some(args.replica_retention);
        replication.segment_bytes_max = args.replica_segment_bytes_max;
        replication.start_anyway = args.replicate_start_anyway;
        replication.priority = args.replica_nice;
        replication.advertise = advertise.clone();
        config.replication = Some(replication);
    }
    if let Some(url) = &args.follow {
        // A standby ships, once promoted, with the --replicate-* settings given.
        let mut ship = ctxstore_replica::ShipConfig::new(url);
        ship.s3 = args.replica_s3.settings();
        ship.interval = args.replicate_interval;
        ship.retention = (!args.replica_retention.is_zero()).then_some(args.replica_retention);
        ship.segment_bytes_max = args.replica_segment_bytes_max;
        ship.priority = args.replica_nice;
        ship.advertise = advertise;
        config.engine.follower = true;
        config.follow = Some(ctxstore_replica::FollowConfig {
            url: url.clone(),
            s3: args.replica_s3.settings(),
            interval: args.replicate_interval,
            ship,
        });
    }
}

/// The network cores' limits: frames, requests, connections, unwritten bytes, timeouts,
/// streams, the drain.
fn limit_settings(args: &ServeArgs, config: &mut ServerConfig) {
    config.limits.stream_wait_ms_max = args.stream_wait_ms_max;
    config.limits.streams_per_connection_max = args.streams_per_connection_max;
    config.limits.response_bytes_max = args.response_bytes_max;
    config.limits.frame_bytes_max = args.frame_bytes_max;
    config.limits.requests_in_flight_max = args.requests_in_flight_max;
    config.limits.connections_max = args.connections_max;
    config.limits.connections_unauthenticated_max = args
        .connections_unauthenticated_max
        .unwrap_or((args.connections_max / 4).max(1));
    config.limits.hello_timeout = args.hello_timeout;
    config.limits.unwritten_bytes_max = args.unwritten_bytes_max;
    config.limits.unwritten_bytes_total_max = args.unwritten_bytes_total_max;
    config.drain_timeout = args.drain_timeout;
    config.limits.has_blobs_max = args.has_blobs_max;
    config.limits.idle_timeout = args.idle_timeout;
    config.limits.frame_timeout = args.frame_timeout;
}

/// The token is a password: say so when others than the server's user may read its file.
fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{:o}", mode & 0o777),
                "the token file is readable or writable by group or others; chmod 600 it"
            );
        }
    }
}

/// A store created before `--umask` (0755, files 0644) stays as open as it was: say so, once,
/// at start. Only bits the mask would have removed count, so `--umask 027` accepts a
/// group-readable store.
fn warn_if_more_open_than_umask(data: &std::path::Path, umask: u32) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(data) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & umask != 0 {
            tracing::warn!(
                data = %data.display(),
                mode = format_args!("{mode:o}"),
                umask = format_args!("{umask:03o}"),
                "the data directory is more open than --umask allows (files created before \
                 keep their modes); chmod -R go-rwx it to make the store private"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rate_takes_bytes_decimal_and_binary_units_and_off() {
        assert_eq!(parse_rate("0"), Ok(0));
        assert_eq!(parse_rate("off"), Ok(0));
        assert_eq!(parse_rate("none"), Ok(0));
        assert_eq!(parse_rate("12345"), Ok(12_345));
        assert_eq!(parse_rate("7B"), Ok(7));
        assert_eq!(parse_rate("3KB"), Ok(3_000));
        assert_eq!(parse_rate("200MB"), Ok(200_000_000));
        assert_eq!(parse_rate("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_rate("3KiB"), Ok(3 << 10));
        assert_eq!(parse_rate("64MiB"), Ok(64 << 20));
        assert_eq!(parse_rate("2GiB"), Ok(2 << 30));
        assert_eq!(parse_rate(" 32 MiB "), Ok(32 << 20));
        for bad in ["", "MiB", "1.5MiB", "-1", "12TiB", "12mib", "1 2"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} was accepted");
        }
        let overflow = parse_rate("18446744073709551615GiB").unwrap_err();
        assert!(overflow.contains("too large"), "{overflow}");
    }

    #[test]
    fn parse_size_takes_the_same_units_and_names_a_byte_count_in_its_error() {
        assert_eq!(parse_size("32MiB"), Ok(32 * 1024 * 1024));
        assert_eq!(parse_size("33554432"), Ok(33_554_432));
        assert_eq!(parse_size("off"), Ok(0));
        let error = parse_size("lots").unwrap_err();
        assert!(error.contains("not a byte count"), "{error}");
    }

    #[test]
    fn replica_nice_takes_steps_or_idle() {
        use ctxstore_replica::ShipPriority;
        assert_eq!(parse_ship_priority("0"), Ok(ShipPriority::Nice(0)));
        assert_eq!(parse_ship_priority("19"), Ok(ShipPriority::Nice(19)));
        assert_eq!(parse_ship_priority("idle"), Ok(ShipPriority::Idle));
        for bad in ["20", "-1", "", "IDLE", "nice"] {
            let error = parse_ship_priority(bad).unwrap_err();
            assert!(error.contains("0..=19"), "{bad:?}: {error}");
        }
        let default = Cli::try_parse_from(["ctxstore-server"]).unwrap();
        assert_eq!(
            default.serve.replica_nice,
            ctxstore_replica::ship::SHIP_PRIORITY_DEFAULT
        );
    }

    #[test]
    fn thirty_two_bit_sizes_are_range_checked() {
        assert_eq!(parse_size_u32("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size_u32("4294967295"), Ok(u32::MAX));
        let error = parse_size_u32("4GiB").unwrap_err();
        assert!(error.contains("over 4 GiB"), "{error}");
        assert!(parse_size_u32("4294967296").is_err());
        assert_eq!(parse_chunk_bytes("8KiB"), Ok(8192));
        assert!(parse_chunk_bytes("5GiB").is_err());
    }

    #[test]
    fn byte_size_flags_take_units_and_plain_integers() {
        let units = Cli::try_parse_from([
            "ctxstore-server",
            "--payload-cache-bytes",
            "32MiB",
            "--frame-bytes-max",
            "1MiB",
            "--blob-bytes-max",
            "1000KB",
            "--unwritten-bytes-max",
            "2MiB",
            "--unwritten-bytes-total-max",
            "1GB",
            "--pack-bytes-max",
            "64MiB",
            "--response-bytes-max",
            "8MiB",
            "--shard-batch-bytes-max",
            "4MiB",
        ])
        .unwrap();
        let args = units.serve;
        assert_eq!(args.payload_cache_bytes, 32 << 20);
        assert_eq!(args.frame_bytes_max, 1 << 20);
        assert_eq!(args.blob_bytes_max, 1_000_000);
        assert_eq!(args.unwritten_bytes_max, 2 << 20);
        assert_eq!(args.unwritten_bytes_total_max, 1_000_000_000);
        assert_eq!(args.pack_bytes_max, 64 << 20);
        assert_eq!(args.response_bytes_max, 8 << 20);
        assert_eq!(args.shard_batch_bytes_max, 4 << 20);
        let plain = Cli::try_parse_from([
            "ctxstore-server",
            "--payload-cache-bytes",
            "1048576",
            "--frame-bytes-max",
            "2097152",
        ])
        .unwrap();
        assert_eq!(plain.serve.payload_cache_bytes, 1 << 20);
        assert_eq!(plain.serve.frame_bytes_max, 2 << 20);
        // The defaults are what they were as integers.
        let defaults = Cli::try_parse_from(["ctxstore-server"]).unwrap().serve;
        assert_eq!(defaults.frame_bytes_max, 16 * 1024 * 1024);
        assert_eq!(defaults.blob_bytes_max, 16 * 1024 * 1024 - 64);
        assert_eq!(defaults.unwritten_bytes_max, 64 * 1024 * 1024);
        assert_eq!(defaults.unwritten_bytes_total_max, 1024 * 1024 * 1024);
        assert_eq!(defaults.pack_bytes_max, 1 << 30);
        assert_eq!(defaults.payload_cache_bytes, 32 * 1024 * 1024);
        assert_eq!(defaults.response_bytes_max, 64 * 1024 * 1024);
        assert_eq!(defaults.shard_batch_bytes_max, 64 * 1024 * 1024);
        let error = Cli::try_parse_from(["ctxstore-server", "--frame-bytes-max", "5GiB"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--frame-bytes-max") && error.contains("over 4 GiB"),
            "{error}"
        );
    }
}
