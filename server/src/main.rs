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
//!
//! Code map: this file holds the flags (clap) and `main`; `values.rs` the flags' value
//! parsers; `commands/` one file per subcommand: `serve.rs` (with `server_config.rs`, the
//! flags into a `ServerConfig`), `print_config.rs`, `verify.rs`, `backup.rs`, `restore.rs`,
//! `promote.rs`.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

mod commands;
mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ctxstore_engine::{OpenCheck, Placement};
use ctxstore_server::config::{DEFAULT_DATA_DIR, DEFAULT_LISTEN, resolve_addr};
use ctxstore_server::{parse_duration, settings};

use values::{
    BaseInterval, parse_ack_after, parse_base_interval, parse_chunk_bytes, parse_gc_interval,
    parse_rate, parse_remote_ack_timeout, parse_replica_lease, parse_replicate_interval,
    parse_retention, parse_rfc3339, parse_ship_priority, parse_size, parse_size_u32, parse_ttl,
    parse_umask,
};

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
        #[command(flatten)]
        key: KeyArgs,
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
        #[command(flatten)]
        key: KeyArgs,
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
        /// A sealing store's master key: the restored store is opened and verified with it
        /// (its keyring is the replica's current one, whatever the point).
        #[command(flatten)]
        key: KeyArgs,
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

/// Where an S3-compatible replica is (each also from the usual AWS_* variables).
/// The master key of a store that seals its payloads, for the offline commands.
#[derive(Args, Debug, Clone)]
struct KeyArgs {
    /// The store's master key file (a store that seals opens only with it; `verify` without
    /// it checks sealed bodies by their checksums only).
    #[arg(long, value_name = "FILE", conflicts_with = "master_key_command")]
    master_key_file: Option<PathBuf>,
    /// As --master-key-file, from this shell command's standard output.
    #[arg(long, value_name = "CMD")]
    master_key_command: Option<String>,
}

impl KeyArgs {
    fn read(&self) -> anyhow::Result<Option<std::sync::Arc<ctxstore_engine::seal::MasterKey>>> {
        commands::master_key::read(
            self.master_key_file.as_deref(),
            self.master_key_command.as_deref(),
        )
    }
}

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
    /// With --tenants-file, the operator's token: it sees the operator's own data and alone
    /// may ask for STATS, BACKUP, GC and REPLICATION_STATS.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Tenants (TOML, `[[tenant]]` tables: name, tokens, rights, quotas): a connection whose
    /// HELLO token is a tenant's sees that tenant's data only, with its rights. Read at start
    /// (a malformed file refuses the start, naming its line) and again on SIGHUP (a malformed
    /// one keeps the old in force; the log says why). Needs --token-file.
    #[arg(long)]
    tenants_file: Option<PathBuf>,
    /// Seal every payload at rest (decision 0032 §4): a file of 64 hex digits (32 random
    /// bytes: `openssl rand -hex 32 > FILE`). Each tenant (and the operator) gets a data key,
    /// wrapped by this key in DIR/keyring; blob bodies are sealed with XChaCha20-Poly1305
    /// before they reach the disk. A store that seals never opens without it; a wrong key is
    /// refused at start. With --replicate-to the keyring (keys wrapped by this key) goes to the
    /// replica; a standby (--follow) needs the same key. Rotation: put the new key on the
    /// first line and the old one on the second, and restart; the keyring is rewrapped under
    /// the new key (no payload is rewritten), then remove the old line.
    #[arg(long, value_name = "FILE", conflicts_with = "master_key_command")]
    master_key_file: Option<PathBuf>,
    /// As --master-key-file, the key read from this shell command's standard output (a
    /// secret manager's client), run once at start.
    #[arg(long, value_name = "CMD")]
    master_key_command: Option<String>,
    /// A backup restored without its keyring (decision 0032 §5: a backup never holds a key):
    /// the live store's keyring, copied into the data directory before the store opens, once
    /// it opens under the master key. Ignored when the directory already holds that keyring;
    /// refused when it holds another.
    #[arg(long, value_name = "FILE")]
    keyring_from: Option<PathBuf>,
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
    /// Decoded vectors kept in memory for vector searches (decision 0033), e.g. `1GiB`: past
    /// it the cache is emptied and refilled from the stored blobs (searches go on, slower).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    vector_cache_bytes_max: u64,
    /// Vectors one exact vector search compares (one asked exact, or while the index's
    /// graph is being built): a search over more is refused with TOO_LARGE naming this limit
    /// (narrow its key prefix). Bounds a search's time on a network core.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    vector_scan_max: u64,
    /// Candidates (entries under a search's key prefix) up to which a vector search compares
    /// every one exactly; past it, it walks the index's graph (decision 0033 §3).
    #[arg(long, default_value_t = 10_000)]
    vector_exact_max: u64,
    /// Memory one vector index's graph may take, e.g. `8GiB`: a graph that would grow past
    /// it is dropped and its index's searches are exact until the next start (logged).
    #[arg(long, default_value = "8GiB", value_parser = parse_size)]
    vector_graph_bytes_max: u64,
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
    /// Asynchronous unless a write asks for a remote acknowledgement (--ack-after). Restore
    /// with `ctxstore-server restore` (docs/operations.md#replication).
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
    /// When a write that does not say is acknowledged: `local`, once durable on this
    /// server's disk (fdatasync); `remote`, once the object store holds it too (the segment
    /// with it stored: nothing acknowledged is lost with this host). Needs --replicate-to or
    /// --follow. A client may ask either per write (protocol version 4's ACK_AFTER).
    #[arg(long, default_value = "local", value_name = "local|remote", value_parser = parse_ack_after)]
    ack_after: ctxstore_protocol::AckAfter,
    /// A remote acknowledgement not confirmed within this (`10s`; 100ms to 10m) is answered
    /// UNCONFIRMED: the write is durable here and may or may not survive a failover; retry it
    /// with its idempotency key.
    #[arg(long, default_value = "10s", value_parser = parse_remote_ack_timeout)]
    remote_ack_timeout: Duration,
    /// The prefix's lease (`10s`, 2s to 10m, or `off`: epochs alone, no automatic
    /// failover, acknowledgements never wait on the object store): the primary holds
    /// PREFIX/lease, renews it every third of this, and acknowledges writes (local or remote)
    /// only while its last renewal and its last cut shipped whole are younger than the lease
    /// less a twentieth: a primary cut off from the object store stops acknowledging before
    /// a standby may take over. At least three --replicate-interval (decision 0031).
    #[arg(long, default_value = "10s", value_name = "D|off", value_parser = parse_replica_lease)]
    replica_lease: Duration,
    /// A standby (--follow) that takes the prefix over by itself once its primary's lease has
    /// gone unrenewed for the lease plus a twentieth, as it observes it: it applies what was
    /// shipped, takes the lease and the next epoch (with several standbys exactly one wins;
    /// the others follow it), seals the old primary's generation and takes writes. Needs
    /// --replica-lease (the same on the primary).
    #[arg(long)]
    auto_promote: bool,
    /// What a primary does once another took its prefix over (a lease renewal refused, a seal
    /// or a newer epoch found; needs --replica-lease), and what a start with --follow does on
    /// a directory that shipped to that replica itself (a primary's, or a promoted
    /// standby's): `standby` (the default) sets the store aside under DIR/.diverged/, never
    /// deleting it, restores the replica's latest point and follows it on the same addresses
    /// (with --auto-promote only if it was given); `off` stays fenced, serving reads, and a
    /// start refuses such a directory (decision 0031 §8).
    #[arg(
        long,
        value_enum,
        default_value = "standby",
        value_name = "standby|off"
    )]
    rejoin: Rejoin,
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

/// `--rejoin`: what a fenced primary does (decision 0031 §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Rejoin {
    /// Set its store aside and follow the new primary.
    Standby,
    /// Stay fenced, serving reads, for an operator.
    Off,
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
        Some(Command::Verify { data, key }) => key
            .read()
            .and_then(|key| commands::verify::verify(&data, key)),
        Some(Command::Backup {
            data,
            to,
            umask,
            key,
        }) => key
            .read()
            .and_then(|key| commands::backup::backup(&data, &to, umask, key)),
        Some(Command::Restore {
            from,
            to,
            at,
            at_seq,
            generation,
            s3,
            umask,
            key,
        }) => key.read().and_then(|key| {
            let point = commands::restore::Point {
                at,
                at_seq,
                generation,
            };
            commands::restore::restore(&from, &to, point, &s3, umask, key)
        }),
        Some(Command::Promote { data, wait }) => commands::promote::promote(&data, wait),
        None if cli.serve.print_config => {
            commands::print_config::print_config(cli.serve, &effective)
        }
        None => commands::serve::serve(cli.serve),
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

#[cfg(test)]
mod tests {
    use super::*;

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
