//! The command line: `Cli` (the global flags) and the commands (`Command`, `CtxCommand`,
//! `KvCommand`) as clap parses them, with the parsers of their values (contexts as ids or
//! `@NAME`, tags, codecs, durations, TTLs, time bounds). Brief §6 is the contract scripts
//! rely on. `ctx …` (`contexts.rs`) and `kv …` (`kv.rs`) have files of their own, as their
//! families do in `commands/`.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use ctxstore_client::{ContextRef, Durability, VerifyPayloads, codec_tag};

use crate::exits::EXIT_CODES;

mod contexts;
mod kv;
mod vectors;

#[cfg(test)]
use contexts::parse_ttl;
pub(crate) use contexts::{CtxCommand, Ttl};
pub(crate) use kv::KvCommand;
pub(crate) use vectors::{IndexCommand, QueryArgs, SearchArgs, SearchTurnsArgs};

/// Talk to a ctxstore server: create and fork contexts, append turns, read them back; name,
/// tag, list and clone contexts, keep key-value entries beside them; delete, prune and expire
/// contexts, collect what nothing reaches any more; patch and redact turns, purge a blob; back
/// the store up.
///
/// A tour (start a server first: `ctxstore-server`):
///   ctxstore ctx create                                   # → context 1
///   echo '{"role":"user","content":"hi"}' | ctxstore append 1 --codec json
///   ctxstore append 1 --file answer.json --codec json
///   ctxstore last 1 -n 10 --payloads
///   ctxstore ctx fork 3                                   # a new context whose head is turn 3
///   ctxstore --json turn 3                                # one JSON object per line
///   ctxstore blob <64-hex-hash> -o payload.bin
///   ctxstore ctx create --name thread-42 --tag status=idle   # CTX: a ContextID or @NAME
///   ctxstore ctx list --tag status=idle
///   echo '{"step":1}' | ctxstore kv put @thread-42 checkpoint/1
///   echo '{"m":1}' | ctxstore append @thread-42 --key cp-1 --label run_id=r1  # retry-safe
///   ctxstore append @thread-42 --parent 5 --file retry.json  # branch after turn 5
///   ctxstore log @thread-42 --label run_id=r1             # every branch, newest first
///   ctxstore find --label run_id=r1                       # turns of every context
///   echo 'summary…' | ctxstore append @thread-42 --summary
///   ctxstore window @thread-42                            # latest summary → head
///   ctxstore ctx prune @thread-42 --keep 100              # only the newest 100 depths stay
///   ctxstore ctx ttl @thread-42 7d                        # deleted after 7 days without updates
///   ctxstore ctx delete @thread-42                        # gone; forks keep their history
///   ctxstore gc                                           # give the disk back now
///   echo 'fixed' | ctxstore patch 7                       # turn 7 reads "fixed" from now on
///   ctxstore --as-of 12 last @thread-42                   # the turns as of overlay 12
///   ctxstore redact 8                                     # turn 8's payload is gone, for good
///   ctxstore purge <64-hex-hash> --gc                     # every turn naming it, bytes off disk
///   ctxstore backup --to /var/backups/ctxstore-1          # a consistent copy, on the server's host
///   ctxstore ping                                         # is the server there? round trip
///
/// Exit codes: 0 ok, 1 other error, 2 usage, 3 NOT_FOUND, 4 CONFLICT, 5 connection failure
/// or timeout, 6 UNAUTHORIZED, 7 ALREADY_EXISTS (details under --help).
#[derive(Parser, Debug)]
#[command(
    name = "ctxstore",
    version,
    verbatim_doc_comment,
    after_long_help = EXIT_CODES
)]
pub(crate) struct Cli {
    /// Server address: HOST:PORT (a host name or an IP address); several separated by
    /// commas (A,B,C: a primary and its standbys) to follow the primary among them: the
    /// command goes to the one that takes writes, found again after a failover within
    /// --failover-timeout (exit 8 when none is); no other address is ever used.
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:7411",
        env = "CTXSTORE_ADDR"
    )]
    pub(crate) addr: String,
    /// Token for servers that require one.
    #[arg(long, global = true, env = "CTXSTORE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// A file holding the token (the server's --token-file; surrounding white space, as its
    /// trailing newline, is trimmed as the server trims it). Not with --token; either on the
    /// command line wins over the other from the environment.
    #[arg(long, global = true, value_name = "PATH", env = "CTXSTORE_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// One JSON object per result, on its own line; errors as one JSON object on stderr.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Longest wait for the TCP connection, and again for the server's answer to HELLO
    /// (like 500ms, 5s, 1m).
    #[arg(
        long,
        global = true,
        default_value = "5s",
        value_parser = parse_duration,
        env = "CTXSTORE_CONNECT_TIMEOUT"
    )]
    pub(crate) connect_timeout: Duration,
    /// Longest wait for each response (like 30s, 2m; 0s: no limit).
    #[arg(
        long,
        global = true,
        default_value = "30s",
        value_parser = parse_duration,
        env = "CTXSTORE_TIMEOUT"
    )]
    pub(crate) timeout: Duration,
    /// With several --addr: longest wait for a primary among them, at connect and after a
    /// failover (like 10s, 1m).
    #[arg(
        long,
        global = true,
        default_value = "30s",
        value_parser = parse_duration,
        env = "CTXSTORE_FAILOVER_TIMEOUT"
    )]
    pub(crate) failover_timeout: Duration,
    /// Reads of turns (turn, last, page, range, replay, log, find, window) show each turn as
    /// of this overlay sequence number: its latest patch up to SEQ, else as appended (a
    /// redaction holds in every view). Default: the latest view. Protocol version 2.
    #[arg(long, global = true, value_name = "SEQ")]
    pub(crate) as_of: Option<u64>,
    /// Which payloads are checked against their BLAKE3 hash here: when-remote (default)
    /// checks raw payloads only from a server that is not on loopback (the server checked
    /// them when it read them; compressed ones are always checked), always checks every one.
    #[arg(
        long,
        global = true,
        default_value = "when-remote",
        env = "CTXSTORE_VERIFY_PAYLOADS"
    )]
    pub(crate) verify_payloads: VerifyPayloads,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Parses the command line (as `Cli::try_parse`), then settles where the token comes
    /// from: `--token` and `--token-file` both on the command line, or `CTXSTORE_TOKEN` and
    /// `CTXSTORE_TOKEN_FILE` both in the environment, is a usage error; one on the command line
    /// wins over the other from the environment (as a flag wins over its own variable).
    pub(crate) fn parse_settled() -> Result<Cli, clap::Error> {
        let matches = Cli::command().try_get_matches()?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        if cli.token.is_some() && cli.token_file.is_some() {
            let on_command_line =
                |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
            match (on_command_line("token"), on_command_line("token_file")) {
                (true, false) => cli.token_file = None,
                (false, true) => cli.token = None,
                (true, true) => {
                    return Err(Cli::command().error(
                        ErrorKind::ArgumentConflict,
                        "--token and --token-file both give the token: pass one",
                    ));
                }
                (false, false) => {
                    return Err(Cli::command().error(
                        ErrorKind::ArgumentConflict,
                        "CTXSTORE_TOKEN and CTXSTORE_TOKEN_FILE are both set: unset one, or \
                         pass --token or --token-file (the command line wins)",
                    ));
                }
            }
        }
        Ok(cli)
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum TenantCommand {
    /// Every tenant, one line each: name, TenantId, contexts, open streams, stored bytes and
    /// connections (each `used/limit` when it has a quota), appends per second allowed, and
    /// QUOTA_EXCEEDED refusals since the server started. With --json one object per tenant
    /// (a quota of null: none). With a tenant's token, that tenant's own line only.
    List,
    /// One tenant's fields, one per line (with --json, one object).
    Show {
        /// The tenant's name, as in the tenants file.
        name: String,
    },
    /// Erase a tenant for good (decision 0032 §6): its keys are destroyed (when the server
    /// seals payloads, none of its payloads opens again: not on the disk, in a backup, on
    /// the standby or at any restore point), its contexts deleted, its open streams aborted,
    /// its tokens refused; the next collection gives its bytes back. When the server
    /// replicates, it answers once the object store holds the deletion. Irreversible; the
    /// name is never given to a tenant again. Sent again, it answers as the first time did.
    Delete {
        /// The tenant's name.
        name: String,
    },
    /// A new version of a tenant's data key (decision 0032 §7; a server with
    /// --master-key-file): its new payloads are sealed under it, what it stored before keeps
    /// its version and reads as before. `operator` rotates the operator's own.
    RotateKey {
        /// The tenant's name, or `operator`.
        name: String,
    },
    /// Add a tenant to the server's tenants file (run on the server's host; no connection):
    /// a `[[tenant]]` table with a new random token, kept in the file as its BLAKE3 only and
    /// printed once. The server takes it on SIGHUP (--reload-pid, or `kill -HUP`).
    Create {
        /// The new tenant's name: 1 to 64 bytes of a-z, 0-9, '_' and '-'.
        name: String,
        #[command(flatten)]
        file: TenantsFileArgs,
        /// Its tokens' rights, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "read,write")]
        rights: Vec<TenantRight>,
        #[command(flatten)]
        quotas: QuotaArgs,
    },
    /// Set or lift a tenant's quotas in the server's tenants file (run on the server's host;
    /// no connection); the rest of the file, comments included, stays as it is. The server
    /// applies them on SIGHUP (--reload-pid, or `kill -HUP`), to open connections too.
    Quota {
        /// The tenant's name, as in the tenants file.
        name: String,
        #[command(flatten)]
        file: TenantsFileArgs,
        #[command(flatten)]
        quotas: QuotaArgs,
    },
}

/// Which tenants file, and which server to tell.
#[derive(clap::Args, Debug)]
pub(crate) struct TenantsFileArgs {
    /// The server's --tenants-file.
    #[arg(long, value_name = "FILE")]
    pub(crate) tenants_file: PathBuf,
    /// Send SIGHUP to this process (the server) once the file is written.
    #[arg(long, value_name = "PID")]
    pub(crate) reload_pid: Option<u32>,
}

/// A right of a tenant's tokens over its own data.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TenantRight {
    Read,
    Write,
    Admin,
}

/// A tenant's quotas as flags: a number sets one, `none` lifts it, a flag left out leaves it.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct QuotaArgs {
    /// Bytes its blobs may take in the packs (quota_bytes).
    #[arg(long, value_name = "N|none", value_parser = parse_quota)]
    pub(crate) quota_bytes: Option<QuotaValue>,
    /// Live contexts (quota_contexts).
    #[arg(long, value_name = "N|none", value_parser = parse_quota)]
    pub(crate) quota_contexts: Option<QuotaValue>,
    /// Turns appended per second, over all its connections (quota_appends_per_s).
    #[arg(long, value_name = "N|none", value_parser = parse_quota)]
    pub(crate) quota_appends_per_s: Option<QuotaValue>,
    /// Open connections (quota_connections).
    #[arg(long, value_name = "N|none", value_parser = parse_quota)]
    pub(crate) quota_connections: Option<QuotaValue>,
    /// Open streams (quota_streams).
    #[arg(long, value_name = "N|none", value_parser = parse_quota)]
    pub(crate) quota_streams: Option<QuotaValue>,
}

/// A quota flag's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuotaValue {
    Limit(u64),
    None,
}

fn parse_quota(text: &str) -> Result<QuotaValue, String> {
    if text == "none" {
        return Ok(QuotaValue::None);
    }
    let limit: u64 = text
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{text:?} is not a number (or `none`, no limit)"))?;
    // The tenants file holds TOML integers: at most i64::MAX.
    if limit > i64::MAX as u64 {
        return Err(format!("{limit} is past the largest quota, {}", i64::MAX));
    }
    Ok(QuotaValue::Limit(limit))
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Create, fork, show, tag, name, list, clone, delete, prune and expire contexts.
    #[command(subcommand)]
    Ctx(CtxCommand),
    /// A context's key-value entries: put, get, rm, list.
    #[command(subcommand)]
    Kv(KvCommand),
    /// Your tenant's vector indexes: create, list, drop (protocol version 6). Entries get
    /// their vectors with `kv put --index NAME --vector …`; `search` finds them by meaning.
    #[command(subcommand)]
    Index(IndexCommand),
    /// The key-value entries of a context nearest a query vector, best first: exactly k
    /// whenever k or more pass --prefix and --filter. Prints key, score, value_hash,
    /// value_len per hit (protocol version 6).
    Search(SearchArgs),
    /// The turns nearest a query vector among the contexts named (--context, --name-prefix,
    /// --tag; none: every context of your tenant), best first: exactly k whenever k or more
    /// pass --label and --type. Each context's turns are those a read of it returns (a fork's
    /// inherited ones included). Prints turn_id, context_id, depth, type, score and
    /// payload_hash per hit (protocol version 7).
    SearchTurns(SearchTurnsArgs),
    /// The tenants the server serves, with their usage, quotas and refusals: list, show;
    /// erasure: delete; a new data key: rotate-key (the operator's token; protocol version 5);
    /// and, on the server's host, edits of its tenants file: create, quota
    /// (docs/operations.md, Tenants).
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Show a context's head.
    Head {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// Append a turn to a context, from --file or from stdin; durable when it prints.
    ///
    /// Prints turn_id, parent_turn_id, depth, payload_hash, deduped and existing. By default
    /// the turn follows the head; --parent hangs it on an older turn (time travel), --root
    /// starts a new chain; either way the head moves to the new turn. --key makes a retry
    /// safe: a key the context already has writes nothing and prints that turn with
    /// existing: true. --key, --label, --link, --summary, --parent and --root need a server
    /// of protocol version 2.
    Append {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Type tag: what the payload is (yours to define).
        #[arg(long = "type", default_value_t = 0)]
        type_tag: u64,
        /// How the payload is serialised: raw, json, protobuf, cbor, msgpack, text,
        /// flatbuffers, capnp, gob, or a number.
        #[arg(long, default_value = "raw", value_parser = parse_codec)]
        codec: u32,
        /// Append only if the context's head is still this turn (0: only if empty).
        #[arg(long)]
        expect_head: Option<u64>,
        /// Read the payload from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Append even when the payload is empty (refused otherwise: an empty stdin is
        /// usually a mistake in a pipeline).
        #[arg(long)]
        allow_empty: bool,
        /// Hang the turn on this turn instead of the head: a turn the context owns (appended
        /// to it, on its chain, or inherited from a fork or clone).
        #[arg(long, value_name = "TURN", conflicts_with = "root",
              value_parser = clap::value_parser!(u64).range(1..))]
        parent: Option<u64>,
        /// Start a new chain: the turn has no parent (depth 0).
        #[arg(long)]
        root: bool,
        /// An idempotency key, unique in the context (1..=64 bytes, like a checkpoint id).
        #[arg(long, value_name = "K", value_parser = parse_turn_key)]
        key: Option<String>,
        /// A label KEY=VALUE (repeat for more; at most 16, keys 1..=64 bytes, 1,024 bytes
        /// of keys and values in all). Keys run_id, thread_id and idx.* can be found with
        /// `find`; any label filters `log`.
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_tag)]
        labels: Vec<(String, String)>,
        /// A link to another turn, in any context (repeat for more; at most 8).
        #[arg(long = "link", value_name = "TURN",
              value_parser = clap::value_parser!(u64).range(1..))]
        links: Vec<u64>,
        /// Mark the turn as a summary of everything before it: `window` starts here.
        #[arg(long)]
        summary: bool,
        /// When the server answers: local (durable on its disk) or remote (the object store
        /// holds it too; a server without --replicate-to refuses it). Default: the server's
        /// --ack-after. Remote answered UNCONFIRMED exits 9: run it again with the same --key.
        /// Protocol version 4.
        #[arg(long, value_name = "local|remote", value_parser = parse_durability)]
        durability: Option<Durability>,
        /// The vector index the --vector ones belong to (protocol version 7): the turn is
        /// appended with them, and `search-turns` finds it by meaning.
        #[arg(long, value_name = "NAME")]
        index: Option<String>,
        /// A vector of the turn, comma-separated numbers (repeat it for several, ≤ 16).
        #[arg(long, requires = "index", allow_hyphen_values = true,
            value_parser = vectors::parse_vector)]
        vector: Vec<vectors::VectorArg>,
    },
    /// Show one turn: by its id (turn TURN) or by its key (turn CTX --key K).
    ///
    /// With --key, the context's own turns and those it inherited (fork, clone) are looked
    /// up; an unknown key exits 3 (NOT_FOUND).
    Turn {
        /// A turn id; with --key, the context: a ContextID, or @NAME.
        #[arg(value_name = "TURN|CTX")]
        target: String,
        /// Look the turn up by this key in the context CTX.
        #[arg(long, value_name = "K", value_parser = parse_turn_key)]
        key: Option<String>,
    },
    /// The newest turns of a context, oldest first.
    Last {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// How many turns.
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The turns older than --before (a cursor from a previous page), oldest first.
    Page {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Turn id: the page holds the turns older than it.
        #[arg(long)]
        before: u64,
        /// How many turns.
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The turns of a context with depth from --from-depth, oldest first.
    Range {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Depth of the first turn (the root is depth 0).
        #[arg(long)]
        from_depth: u32,
        /// How many turns.
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The whole chain from the root to a turn.
    Replay {
        /// Turn id: the last turn of the chain.
        turn: u64,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// Every turn of a context, newest first, on all its branches.
    ///
    /// The context's own turns (those appended after --parent or --root too), then the turns
    /// it inherited (a fork's base chain, a clone's source up to the clone); with --label,
    /// only turns carrying all of them (filtered by the server). Follows the server's pages.
    Log {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Only turns with this label KEY=VALUE (repeat: all of them).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_tag)]
        labels: Vec<(String, String)>,
        /// Print at most N turns (default: all).
        #[arg(short = 'n', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        n: Option<u32>,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// Turns of every context carrying all the given labels, newest first.
    ///
    /// The first label whose key is indexed store-wide (run_id, thread_id, idx.*) is looked
    /// up in the index; the others are checked on the turns it finds. A label without an
    /// indexed key cannot be found store-wide: filter a context's `log` by it instead.
    Find {
        /// A label KEY=VALUE (repeat: all of them; at least one with an indexed key).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_tag, required = true)]
        labels: Vec<(String, String)>,
        /// Print at most N turns (default: all).
        #[arg(short = 'n', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        n: Option<u32>,
    },
    /// What to send a model: the chain from the latest summary turn to the head.
    ///
    /// Oldest first, starting at the latest turn appended with --summary on the context's
    /// chain (inclusive); the whole chain when it has none.
    Window {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Only its newest N turns (default: all of the window).
        #[arg(short = 'n', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        n: Option<u32>,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// Draw a context as the tree of its turns: branches where forks and clones share them,
    /// every head that points into it, names, summaries, redactions and patches, and a
    /// one-line preview of each payload (the turn log without payloads, then the previews of
    /// the shown turns only).
    Tree {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Show only N levels from the top.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        depth: Option<u32>,
        /// Show only this turn and the turns after it (its subtree).
        #[arg(long, value_name = "TURN")]
        since: Option<u64>,
    },
    /// Write a payload's raw bytes to stdout or to -o PATH.
    Blob {
        /// The payload's hash: 64 hex digits.
        hash: String,
        /// Write the bytes to this file instead of stdout.
        #[arg(short = 'o')]
        output: Option<PathBuf>,
    },
    /// Have the server write a consistent copy of its store into DIR while it serves.
    ///
    /// DIR is a directory on the server's host, not on this machine (unless the server runs
    /// here): absent or empty, outside the server's data directory. A relative DIR is made
    /// absolute against this shell's working directory before it is sent, which names the
    /// intended place only when the server runs on this host; give an absolute path for a
    /// remote server. Everything acknowledged before the backup started is in the copy; it
    /// opens with `ctxstore-server --data DIR` and passes `ctxstore-server verify --data DIR`.
    /// Sealed packs are hard-linked when DIR is on the store's file system. Prints
    /// backup_dir, turns, blobs, bytes, linked_bytes (of bytes, those hard-linked) and
    /// duration_ms. For a stopped server: `ctxstore-server backup --data SRC --to DIR`.
    Backup {
        /// The copy's directory, on the server's host (absent or empty).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        /// Longest wait for the server to finish the copy (like 30m, 2h; 0s: no limit). The
        /// global --timeout does not apply to a backup. A backup this command stops waiting
        /// for goes on on the server.
        #[arg(long, value_name = "D", default_value = "24h", value_parser = parse_duration)]
        backup_timeout: Duration,
    },
    /// Run a garbage collection on the server now and wait for it.
    ///
    /// Collects the turns and blobs no live context reaches any more (deleted contexts,
    /// history below a prune floor, unless a fork, a clone or a link still reaches it) and
    /// rewrites the packs whose unreachable share passes the server's --gc-pack-dead-percent.
    /// The server also collects on its own every --gc-interval (10m by default). Prints
    /// turns_dead, blobs_dead, bytes_reclaimed, packs_compacted, live_bytes, dead_bytes and
    /// duration_ms. One collection or backup at a time: while one runs, this fails (exit 1,
    /// INVALID_ARGUMENT); try again later.
    Gc {
        /// Longest wait for the server to finish (like 30m, 2h; 0s: no limit). The global
        /// --timeout does not apply. A collection this command stops waiting for goes on on
        /// the server.
        #[arg(long, value_name = "D", default_value = "1h", value_parser = parse_duration)]
        gc_timeout: Duration,
    },
    /// Give a turn a new payload (an overlay), read from --file PATH or stdin.
    ///
    /// The turn keeps its id, parent, depth, key, labels and links; reads show the new
    /// payload from now on, reads with --as-of an earlier sequence number the payload it had
    /// then. Prints turn_id, overlay_seq and payload_hash (and payload_len). An unknown turn
    /// exits 3 (NOT_FOUND); a redacted turn takes no patch (exit 1, INVALID_ARGUMENT).
    Patch {
        /// The turn to patch.
        turn: u64,
        /// Read the new payload from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Patch even when the payload is empty (refused otherwise: an empty stdin is usually
        /// a mistake in a pipeline; to remove a payload, use `redact`).
        #[arg(long)]
        allow_empty: bool,
    },
    /// Take a turn's payload away, in every view, for good.
    ///
    /// Reads return the turn with redacted true, an empty payload and the hash of no bytes;
    /// its parent, depth, key, labels and links stay, so chains and windows through it work.
    /// Its bytes leave the disk at the next garbage collection (`ctxstore gc`). Prints
    /// turn_id, overlay_seq and redacted. An unknown turn exits 3 (NOT_FOUND); a turn
    /// redacted already exits 1 (INVALID_ARGUMENT).
    Redact {
        /// The turn to redact.
        turn: u64,
    },
    /// Redact every turn naming a blob and refuse reads of it by hash (compliance deletion).
    ///
    /// Prints payload_hash and turns_redacted (turns redacted before are not counted) and
    /// overlay_seq. The bytes leave the disk at the next garbage collection; --gc runs one
    /// at once and prints its figures on a second line (like `ctxstore gc`). A hash the
    /// store never had exits 3 (NOT_FOUND).
    Purge {
        /// The blob's hash: 64 hex digits.
        hash: String,
        /// Run a garbage collection right after, so the bytes leave the disk now.
        #[arg(long)]
        gc: bool,
        /// With --gc: longest wait for the collection (see `ctxstore gc --gc-timeout`).
        #[arg(long, value_name = "D", default_value = "1h", value_parser = parse_duration)]
        gc_timeout: Duration,
    },
    /// Server counters: turns, contexts, blobs, bytes, dedup hits, and garbage collection
    /// (live_bytes, dead_bytes, gc_runs, bytes_reclaimed_total; null from a server without
    /// them).
    Stats,
    /// Check that a ctxstore server answers: one PING round trip, its time in microseconds.
    Ping,
    /// Stream stdin into a turn as it arrives (protocol version 3): each read of stdin is one
    /// delta, durable when it prints; at EOF the stream is sealed into one turn.
    ///
    /// With --json: one line per acknowledged delta (stream_id, length), then the sealed
    /// turn's line (stream_id, turn_id, parent_turn_id, depth, payload_hash, payload_len,
    /// deduped). Readers follow it with `stream-read --follow` meanwhile.
    Stream {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Type tag of the sealed turn.
        #[arg(long = "type", default_value_t = 0)]
        type_tag: u64,
        /// Codec of the sealed turn (as for `append`).
        #[arg(long, default_value = "raw", value_parser = parse_codec)]
        codec: u32,
        /// Seal only if the context's head is still this turn (0: only if empty); on
        /// CONFLICT the stream stays open and the command fails naming it.
        #[arg(long)]
        expect_head: Option<u64>,
        /// The sealed turn's key (default: stream:<StreamID>).
        #[arg(long, value_name = "K", value_parser = parse_turn_key)]
        key: Option<String>,
        /// A label KEY=VALUE of the sealed turn (repeat for more).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_tag)]
        labels: Vec<(String, String)>,
        /// When the server answers the seal (the deltas are answered as always): local or
        /// remote, as for `append`. Protocol version 4.
        #[arg(long, value_name = "local|remote", value_parser = parse_durability)]
        durability: Option<Durability>,
    },
    /// A context's events as they happen, like `tail -f` (protocol version 3): head moves
    /// (new turns), streams opened, sealed and aborted, tag changes, the deletion. With
    /// --json one object per event: seq, event, context_id, turn_id, stream_id. Runs until
    /// interrupted (or the context is deleted); a watcher that falls behind the server's
    /// kept events says so on stderr and goes on from the newest.
    Follow {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// A context's open streams, one per line: stream_id, length, type_tag, codec, times.
    Streams {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// A stream's bytes, raw on stdout, from --from: those acknowledged so far, or with
    /// --follow as they are acknowledged, until the stream ends. A sealed stream's bytes (also
    /// those sealed before this read) come from its turn: every byte once, in order, exit 0.
    /// An aborted stream is an error (exit 1), after any bytes read before the abort: it never
    /// became a turn.
    StreamRead {
        /// The StreamID (`stream`, `streams`).
        stream: u64,
        /// Byte offset to start at (resume where a previous read stopped).
        #[arg(long = "from", default_value_t = 0)]
        from: u64,
        /// Wait for new bytes as they are acknowledged, until the stream ends.
        #[arg(long)]
        follow: bool,
    },
}

/// `--codec`: a name or a number, checked before anything is sent (a usage error, exit 2).
pub(crate) fn parse_codec(text: &str) -> Result<u32, String> {
    codec_tag(text).map_err(|error| match error {
        ctxstore_client::ClientError::InvalidArgument(message) => message,
        other => other.to_string(),
    })
}

/// CTX on the command line: a ContextID, or `@NAME` (sent by name; the server resolves it).
pub(crate) fn parse_context(text: &str) -> Result<ContextRef, String> {
    match text.strip_prefix('@') {
        Some("") => Err("@ needs a name after it, like @thread-42".into()),
        Some(name) => Ok(ContextRef::Name(name.to_string())),
        None => text.parse::<u64>().map(ContextRef::Id).map_err(|_| {
            format!("{text:?} is neither a ContextID (a number) nor @NAME (a context's name)")
        }),
    }
}

/// `KEY=VALUE` (split at the first `=`; the value may hold more).
pub(crate) fn parse_tag(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE with a non-empty KEY")),
    }
}

/// A turn key: not empty (on the wire an empty key means none; the server checks the
/// 64-byte limit and names it).
pub(crate) fn parse_turn_key(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("a turn key cannot be empty".into());
    }
    Ok(text.to_string())
}

/// `--durability`: `local` or `remote` (no flag: the server's `--ack-after`).
pub(crate) fn parse_durability(text: &str) -> Result<Durability, String> {
    match text {
        "local" => Ok(Durability::Local),
        "remote" => Ok(Durability::Remote),
        other => Err(format!("{other:?} is not local or remote")),
    }
}

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration like 500ms, 5s, 1m: {error}"))
}

impl Command {
    /// When the command's write is acknowledged (`--durability` of `append`, `kv put` and
    /// `stream`; decision 0031): the client's durability, which only those writes carry.
    pub(crate) fn durability(&self) -> Durability {
        let durability = match self {
            Command::Append { durability, .. } | Command::Stream { durability, .. } => durability,
            Command::Kv(KvCommand::Put { durability, .. }) => durability,
            _ => &None,
        };
        durability.unwrap_or_default()
    }

    /// The reads of turns: the commands `--as-of` applies to.
    pub(crate) fn reads_turns(&self) -> bool {
        matches!(
            self,
            Command::Turn { .. }
                | Command::Last { .. }
                | Command::Page { .. }
                | Command::Range { .. }
                | Command::Replay { .. }
                | Command::Log { .. }
                | Command::Find { .. }
                | Command::Window { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every subcommand and every argument says what it is in `--help`.
    #[test]
    pub(crate) fn every_command_and_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let name = arg.get_id().as_str();
                if name != "help" && name != "version" && arg.get_help().is_none() {
                    missing.push(format!("{path} {name}"));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let command = Cli::command();
        command.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&command, "ctxstore", &mut missing);
        assert_eq!(missing, Vec::<String>::new(), "without help text");
        // The walk saw the commands (a renamed getter would make it vacuous).
        assert!(
            command
                .get_subcommands()
                .any(|sub| sub.get_name() == "ping")
        );
        assert!(command.get_subcommands().count() >= 11);
    }

    #[test]
    pub(crate) fn contexts_are_ids_or_at_names() {
        assert_eq!(parse_context("42"), Ok(ContextRef::Id(42)));
        assert_eq!(
            parse_context("@thread-42"),
            Ok(ContextRef::Name("thread-42".into()))
        );
        // Only the first @ marks a name.
        assert_eq!(parse_context("@@x"), Ok(ContextRef::Name("@x".into())));
        assert!(parse_context("@").is_err());
        assert!(parse_context("thread").is_err());
        assert!(parse_context("-1").is_err());
    }

    #[test]
    pub(crate) fn tags_split_at_the_first_equals() {
        assert_eq!(parse_tag("status=a=b"), Ok(("status".into(), "a=b".into())));
        assert_eq!(parse_tag("k="), Ok(("k".into(), String::new())));
        assert!(parse_tag("=v").is_err());
        assert!(parse_tag("novalue").is_err());
    }

    #[test]
    pub(crate) fn ttls_are_durations_or_none() {
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(parse_ttl("7d"), Ok(Ttl::Set(7 * day)));
        assert_eq!(
            parse_ttl("12h"),
            Ok(Ttl::Set(Duration::from_secs(12 * 3600)))
        );
        assert_eq!(parse_ttl("30m"), Ok(Ttl::Set(Duration::from_secs(30 * 60))));
        assert_eq!(parse_ttl("1h30m"), Ok(Ttl::Set(Duration::from_secs(5400))));
        assert_eq!(parse_ttl("none"), Ok(Ttl::Clear));
        for bad in [
            "",
            "7",
            "7x",
            "-1d",
            "0s",
            "0",
            "500us",
            "None",
            "forever",
            "18446744073709551615s",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    pub(crate) fn durations_name_their_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
    }
}
