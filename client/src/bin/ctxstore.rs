//! `ctxstore`: the command-line client. Every command prints its result; with `--json`, each
//! result is one JSON object on its own line (scripts depend on the field names), and an
//! error is one JSON object on stderr. Exit codes tell the failures apart (table in
//! `EXIT_CODES`, in `--help` and in the README). Every call has a connect, a handshake and a
//! request timeout, so a port that is not ctxstore is an error, never a hang.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    BackupReport, BlobHash, ClientConfig, ClientError, ContextHead, ContextInfo, ContextQuery,
    ContextRef, ContextRetention, ErrorCode, FIND_PAGE_MAX, GcReport, KvItem, LOG_PAGE_MAX,
    LogCursor, NewContext, NewTurn, PageKind, Parent, Patched, Purged, Redacted, Turn, TurnInfo,
    VerifyPayloads, blob_hash_from_hex, codec_name, codec_tag, is_indexed_label,
};
use serde_json::json;

/// The exit codes, as `--help` and the README show them.
const EXIT_CODES: &str = "\
Exit codes:
  0  success (also when stdout is closed early, as in `ctxstore last 1 | head -1`)
  1  any other error (bad input, protocol error, server error other than those below)
  2  the command line does not parse (usage)
  3  NOT_FOUND: the context (ContextID or @NAME), turn, blob or key does not exist
  4  CONFLICT: --expect-head did not match the context's head
  5  connection failure: refused, unresolvable, timed out (connect, handshake or request),
     not a ctxstore server on that port, or the connection lost
  6  UNAUTHORIZED: the token is missing or wrong
  7  ALREADY_EXISTS: another context has that name (`ctx create --get-or-create` answers it)
With --json, an error is also one JSON object on stderr:
  {\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"...\",\"exit_code\":3}}
(`detail` is added for server errors: for CONFLICT, the context's actual head; for
ALREADY_EXISTS, the ContextID that has the name).";

const EXIT_OTHER: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_NOT_FOUND: u8 = 3;
const EXIT_CONFLICT: u8 = 4;
const EXIT_CONNECTION: u8 = 5;
const EXIT_UNAUTHORIZED: u8 = 6;
const EXIT_ALREADY_EXISTS: u8 = 7;

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
struct Cli {
    /// Server address: HOST:PORT (a host name or an IP address).
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:7411",
        env = "CTXSTORE_ADDR"
    )]
    addr: String,
    /// Token for servers that require one.
    #[arg(long, global = true, env = "CTXSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// One JSON object per result, on its own line; errors as one JSON object on stderr.
    #[arg(long, global = true)]
    json: bool,
    /// Longest wait for the TCP connection, and again for the server's answer to HELLO
    /// (like 500ms, 5s, 1m).
    #[arg(
        long,
        global = true,
        default_value = "5s",
        value_parser = parse_duration,
        env = "CTXSTORE_CONNECT_TIMEOUT"
    )]
    connect_timeout: Duration,
    /// Longest wait for each response (like 30s, 2m; 0s: no limit).
    #[arg(
        long,
        global = true,
        default_value = "30s",
        value_parser = parse_duration,
        env = "CTXSTORE_TIMEOUT"
    )]
    timeout: Duration,
    /// Reads of turns (turn, last, page, range, replay, log, find, window) show each turn as
    /// of this overlay sequence number: its latest patch up to SEQ, else as appended (a
    /// redaction holds in every view). Default: the latest view. Protocol version 2.
    #[arg(long, global = true, value_name = "SEQ")]
    as_of: Option<u64>,
    /// Which payloads are checked against their BLAKE3 hash here: when-remote (default)
    /// checks raw payloads only from a server that is not on loopback (the server checked
    /// them when it read them; compressed ones are always checked), always checks every one.
    #[arg(
        long,
        global = true,
        default_value = "when-remote",
        env = "CTXSTORE_VERIFY_PAYLOADS"
    )]
    verify_payloads: VerifyPayloads,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create, fork, show, tag, name, list, clone, delete, prune and expire contexts.
    #[command(subcommand)]
    Ctx(CtxCommand),
    /// A context's key-value entries: put, get, rm, list.
    #[command(subcommand)]
    Kv(KvCommand),
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
}

#[derive(Subcommand, Debug)]
enum CtxCommand {
    /// A new context: empty, or with its head at --from TURN; optionally named and tagged.
    /// Prints context_id, head_turn_id, head_depth, name, tags, created_at_unix_ms,
    /// updated_at_unix_ms and created (false when --get-or-create found the name taken).
    Create {
        /// Turn id: the new context's head (omit for an empty context).
        #[arg(long)]
        from: Option<u64>,
        /// A unique name (1..=256 bytes of UTF-8); the context is then also @NAME. A taken
        /// name exits 7 (ALREADY_EXISTS) unless --get-or-create.
        #[arg(long)]
        name: Option<String>,
        /// A tag KEY=VALUE (repeat for more; at most 32, keys 1..=64 bytes, values 1..=1024 bytes).
        #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
        tags: Vec<(String, String)>,
        /// With a taken --name: print that context (created: false) instead of failing;
        /// --from and --tag are then not applied.
        #[arg(long, requires = "name")]
        get_or_create: bool,
    },
    /// A new context whose head is TURN (copies nothing).
    Fork {
        /// Turn id: the new context's head.
        turn: u64,
    },
    /// A context's head, name, tags and times, its floor_depth (turns below it were pruned;
    /// 0: none) and ttl_ms (its own time to live; null: none).
    Show {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// Set and remove tags atomically; prints the context as `ctx show` does (without
    /// floor_depth and ttl_ms).
    Tag {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Tags to set, KEY=VALUE (keys 1..=64 bytes, values 1..=1024 bytes, ≤ 32 per context).
        #[arg(value_name = "KEY=VALUE", value_parser = parse_tag)]
        set: Vec<(String, String)>,
        /// A tag key to remove (repeat for more; a key that is not there is no error).
        #[arg(long = "remove", value_name = "KEY")]
        remove: Vec<String>,
        /// Change the tags only if the context's head is still this turn (0: only if empty);
        /// exits 4 (CONFLICT) otherwise, with the actual head in `detail`.
        #[arg(long)]
        expect_head: Option<u64>,
    },
    /// Give a context that has none a name.
    Name {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The name (1..=256 bytes of UTF-8); a taken name exits 7 (ALREADY_EXISTS).
        name: String,
    },
    /// Every context matching all the filters, one per line (the `ctx show` fields but
    /// floor_depth and ttl_ms), in ContextID order (in name order with --name-prefix).
    /// Follows the server's pages.
    List {
        /// Only contexts with this tag, KEY=VALUE (repeat: all of them).
        #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
        tags: Vec<(String, String)>,
        /// Only contexts whose name starts with this.
        #[arg(long)]
        name_prefix: Option<String>,
        /// Only contexts last updated before this time (exclusive): Unix milliseconds, a
        /// time like 2026-11-27T10:00:00Z, or an age like 7d (that long ago).
        #[arg(long, value_name = "TIME", value_parser = parse_time_bound)]
        updated_before: Option<u64>,
        /// Only contexts last updated after this time (exclusive): Unix milliseconds (0: any),
        /// a time like 2026-11-27T10:00:00Z, or an age like 7d, 12h (that long ago).
        #[arg(long, value_name = "TIME", value_parser = parse_time_bound)]
        updated_after: Option<u64>,
        /// Print at most this many (default: every match).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
    },
    /// A copy of CTX named NEW: the same head, tags and key-value entries, sharing every turn
    /// and payload (nothing is copied). Prints the new context as `ctx show` does (without
    /// floor_depth and ttl_ms).
    Clone {
        /// The context to copy: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The copy's name (1..=256 bytes of UTF-8); a taken name exits 7 (ALREADY_EXISTS).
        #[arg(long)]
        name: String,
    },
    /// Delete a context: every command naming it exits 3 (NOT_FOUND) from then on.
    ///
    /// Its name is free again; its ContextID is never reused. Its turns stay readable through
    /// the contexts that share them (forks, clones). Prints context_id, name and deleted
    /// (true).
    Delete {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
    },
    /// Keep only the newest N depths of a context's chain readable through it.
    ///
    /// The floor becomes head depth + 1 − N (it never moves down): `last`, `page`, `range`,
    /// `log`, `window` and `turn CTX --key` stop at it, on every branch; an append after a
    /// turn below it is refused. Turns below the floor stay readable through other contexts
    /// that share them. Prints the context as `ctx show` does, with the new floor_depth.
    Prune {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// How many depths to keep, counting the head (at least 1; 0 is refused by the
        /// server: use `ctx delete`).
        #[arg(long, value_name = "N", required = true)]
        keep: u32,
    },
    /// Give a context a time to live, or clear it: the server deletes a context that has
    /// not been updated (head move, tag or key-value change) for that long.
    ///
    /// Prints the context as `ctx show` does, with ttl_ms (null when cleared). A context
    /// without its own time to live may still expire under the server's --context-ttl.
    Ttl {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// A duration like 7d, 12h, 30m, 1h30m (at least 1ms, at most 100 years), or `none`
        /// to clear it.
        #[arg(value_name = "DURATION|none", value_parser = parse_ttl)]
        ttl: Ttl,
    },
}

#[derive(Subcommand, Debug)]
enum KvCommand {
    /// Store a value under KEY (replacing what is there), from --file or from stdin. Durable
    /// when it prints the entry: key, value_hash, value_len.
    Put {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The key (1..=256 bytes).
        key: OsString,
        /// Read the value from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Keep the value that is there, if the key exists (no error; the entry printed is
        /// then the kept one).
        #[arg(long)]
        if_absent: bool,
        /// Store an empty value (refused otherwise: an empty stdin is usually a mistake in a
        /// pipeline).
        #[arg(long)]
        allow_empty: bool,
    },
    /// Write the value of KEY (raw bytes, checked against its hash) to stdout or to -o PATH;
    /// a key that is not there exits 3 (NOT_FOUND).
    Get {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The key.
        key: OsString,
        /// Write the value to this file instead of stdout.
        #[arg(short = 'o')]
        output: Option<PathBuf>,
    },
    /// Delete KEY. Prints the entry removed (key, value_hash, value_len); a key that is not
    /// there exits 3 (NOT_FOUND), as for `kv get`.
    Rm {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The key.
        key: OsString,
    },
    /// The entries of a context in key order, one per line: key, value_hash, value_len
    /// (`key_b64` too, for a key that is not UTF-8). Follows the server's pages.
    List {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<OsString>,
    },
}

/// A time bound of `ctx list` as Unix milliseconds: plain milliseconds, an RFC 3339 time, or
/// an age (`7d`, `1h30m`) counted back from now.
fn parse_time_bound(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("{text:?} is too large for Unix milliseconds"));
    }
    let now = std::time::SystemTime::now();
    let time = if let Ok(age) = humantime::parse_duration(text) {
        now.checked_sub(age)
            .ok_or_else(|| format!("{text:?} reaches back before 1970"))?
    } else if let Ok(time) = humantime::parse_rfc3339_weak(text) {
        time
    } else {
        return Err(format!(
            "{text:?} is neither Unix milliseconds, a time like 2026-11-27T10:00:00Z, nor an \
             age like 7d or 12h"
        ));
    };
    time.duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .map_err(|_| format!("{text:?} is before 1970"))
}

/// `--codec`: a name or a number, checked before anything is sent (a usage error, exit 2).
fn parse_codec(text: &str) -> Result<u32, String> {
    codec_tag(text).map_err(|error| match error {
        ctxstore_client::ClientError::InvalidArgument(message) => message,
        other => other.to_string(),
    })
}

/// CTX on the command line: a ContextID, or `@NAME` (sent by name; the server resolves it).
fn parse_context(text: &str) -> Result<ContextRef, String> {
    match text.strip_prefix('@') {
        Some("") => Err("@ needs a name after it, like @thread-42".into()),
        Some(name) => Ok(ContextRef::Name(name.to_string())),
        None => text.parse::<u64>().map(ContextRef::Id).map_err(|_| {
            format!("{text:?} is neither a ContextID (a number) nor @NAME (a context's name)")
        }),
    }
}

/// `KEY=VALUE` (split at the first `=`; the value may hold more).
fn parse_tag(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE with a non-empty KEY")),
    }
}

/// A turn key: not empty (on the wire an empty key means none; the server checks the
/// 64-byte limit and names it).
fn parse_turn_key(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("a turn key cannot be empty".into());
    }
    Ok(text.to_string())
}

/// `ctx ttl`'s argument: a time to live, or `none` to clear it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ttl {
    Set(Duration),
    Clear,
}

/// A time to live: `none`, or a duration of at least 1 ms (0 would read as "expire at once"
/// but clears it on the wire: `none` says that).
fn parse_ttl(text: &str) -> Result<Ttl, String> {
    let text = text.trim();
    if text == "none" {
        return Ok(Ttl::Clear);
    }
    let ttl = humantime::parse_duration(text).map_err(|error| {
        format!("{text:?} is not a duration like 7d, 12h, 30m, or none: {error}")
    })?;
    match u64::try_from(ttl.as_millis()) {
        Ok(0) => Err(format!(
            "a time to live of {text:?} is under 1ms; to clear it, write none"
        )),
        Ok(_) => Ok(Ttl::Set(ttl)),
        Err(_) => Err(format!(
            "a time to live of {text:?} is too long (the server takes at most 100 years)"
        )),
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration like 500ms, 5s, 1m: {error}"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`| head`) is not a failure.
        Err(error) if error.downcast_ref::<StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(error) => {
            let (code, exit_code, detail) = classify(&error);
            let message = format!("{error:#}");
            let mut stderr = std::io::stderr().lock();
            // Nothing is left to do when stderr is closed too.
            let _ = if cli.json {
                let mut value = json!({"error": {
                    "code": code,
                    "message": message,
                    "exit_code": exit_code,
                }});
                if let (Some(detail), Some(object)) = (detail, value["error"].as_object_mut()) {
                    object.insert("detail".into(), json!(detail));
                }
                writeln!(stderr, "{value}")
            } else {
                writeln!(stderr, "ctxstore: {message}")
            };
            ExitCode::from(exit_code)
        }
    }
}

/// A command line that does not parse: clap's message and exit code 2; with `--json`
/// anywhere on the line, as a JSON error. `--help` and `--version` print and exit 0.
fn usage_error(error: &clap::Error) -> ExitCode {
    let exit_code = u8::try_from(error.exit_code()).unwrap_or(EXIT_USAGE);
    let json_wanted = std::env::args_os().skip(1).any(|arg| arg == "--json");
    if error.use_stderr() && json_wanted {
        let value = json!({"error": {
            "code": "USAGE",
            "message": error.to_string().trim_end(),
            "exit_code": exit_code,
        }});
        let _ = writeln!(std::io::stderr().lock(), "{value}");
    } else {
        // A closed stdout under `--help | head` is not an error either.
        let _ = error.print();
    }
    ExitCode::from(exit_code)
}

/// The error's stable name, exit code and (for server errors) detail.
fn classify(error: &anyhow::Error) -> (&'static str, u8, Option<u64>) {
    for cause in error.chain() {
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            let exit_code = match client.code() {
                Some(ErrorCode::NotFound) => EXIT_NOT_FOUND,
                Some(ErrorCode::Conflict) => EXIT_CONFLICT,
                Some(ErrorCode::Unauthorized) => EXIT_UNAUTHORIZED,
                Some(ErrorCode::AlreadyExists) => EXIT_ALREADY_EXISTS,
                _ if client.is_connection_failure() => EXIT_CONNECTION,
                _ => EXIT_OTHER,
            };
            // A detail says something for CONFLICT (the actual head, 0: an empty context) and
            // ALREADY_EXISTS (the ContextID); elsewhere 0 means "none" and is left out.
            let detail = match client {
                ClientError::Server { detail, .. }
                    if *detail != 0
                        || matches!(
                            client.code(),
                            Some(ErrorCode::Conflict | ErrorCode::AlreadyExists)
                        ) =>
                {
                    Some(*detail)
                }
                _ => None,
            };
            return (client.name(), exit_code, detail);
        }
        if let Some(refused) = cause.downcast_ref::<NoPayload>() {
            return (refused.code(), EXIT_OTHER, None);
        }
        if cause.downcast_ref::<NoSuchKey>().is_some() {
            return ("NOT_FOUND", EXIT_NOT_FOUND, None);
        }
        if cause.downcast_ref::<Usage>().is_some() {
            return ("USAGE", EXIT_USAGE, None);
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return ("IO", EXIT_OTHER, None);
        }
    }
    ("ERROR", EXIT_OTHER, None)
}

/// Stdout was closed by its reader: stop quietly.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
struct StdoutClosed;

/// `append` or `kv put` refused to send an empty (or absent) payload.
#[derive(Debug, thiserror::Error)]
enum NoPayload {
    #[error("the payload is empty ({0} gave 0 bytes); pass --allow-empty to {1}")]
    Empty(String, &'static str),
    #[error("no payload: stdin is a terminal; pipe the payload in or pass --file PATH")]
    Terminal,
}

/// `kv get` of a key the context does not have, or `turn CTX --key K` of a turn key.
#[derive(Debug, thiserror::Error)]
#[error("context {context} has no {what} {key:?}")]
struct NoSuchKey {
    context: ContextRef,
    what: &'static str,
    key: String,
}

/// A command line that parses but does not make sense (checked before connecting); exit 2
/// like clap's own refusals.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Usage(String);

/// What `turn` shows: a turn by id, or a context's turn by key.
enum TurnTarget {
    Id(u64),
    Key(ContextRef, String),
}

impl TurnTarget {
    fn parse(target: &str, key: Option<&String>) -> Result<TurnTarget, Usage> {
        match key {
            Some(key) => parse_context(target)
                .map(|context| TurnTarget::Key(context, key.clone()))
                .map_err(|reason| Usage(format!("turn CTX --key K: {reason}"))),
            None => target.parse::<u64>().map(TurnTarget::Id).map_err(|_| {
                Usage(format!(
                    "turn TURN: {target:?} is not a turn id (a number); to look a turn up by \
                     its key in a context: ctxstore turn CTX --key K"
                ))
            }),
        }
    }
}

/// Each label key once: a turn carries one value per key.
fn check_labels(labels: &[(String, String)]) -> Result<(), Usage> {
    let mut seen = std::collections::BTreeSet::new();
    match labels.iter().find(|(key, _)| !seen.insert(key)) {
        Some((key, _)) => Err(Usage(format!(
            "--label {key}=… is given twice: a turn has one value per label key"
        ))),
        None => Ok(()),
    }
}

impl NoPayload {
    fn code(&self) -> &'static str {
        match self {
            NoPayload::Empty(..) => "EMPTY_PAYLOAD",
            NoPayload::Terminal => "NO_PAYLOAD",
        }
    }
}

/// Writes to stdout; a closed stdout becomes `StdoutClosed`.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(error) => Err(anyhow::Error::new(error).context("writing to stdout")),
    }
}

/// The payload of `append` or the value of `kv put`, read before connecting, so that a refusal
/// needs no server. `purpose` completes "pass --allow-empty to …".
fn read_payload(
    file: Option<&PathBuf>,
    allow_empty: bool,
    purpose: &'static str,
) -> anyhow::Result<Vec<u8>> {
    let (payload, source) = match file {
        Some(path) => (
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            path.display().to_string(),
        ),
        None => {
            let mut stdin = std::io::stdin().lock();
            if stdin.is_terminal() {
                return Err(NoPayload::Terminal.into());
            }
            let mut bytes = Vec::new();
            stdin
                .read_to_end(&mut bytes)
                .context("reading the payload from stdin")?;
            (bytes, "stdin".to_string())
        }
    };
    if payload.is_empty() && !allow_empty {
        return Err(NoPayload::Empty(source, purpose).into());
    }
    Ok(payload)
}

/// One command: its local checks and input, then the connection, then its family's function.
fn run(cli: &Cli) -> anyhow::Result<()> {
    // Local checks first: a refusal needs no server.
    let local = LocalInput::check(&cli.command, cli.as_of)?;
    let client = connect(cli)?;
    let out = Output { json: cli.json };
    match &cli.command {
        Command::Ctx(command) => ctx(&client, &out, command),
        Command::Kv(command) => kv(&client, &out, command, local.payload),
        Command::Head { context } => out.head(&client.head(context.clone())?),
        Command::Append { .. } => append(&client, &out, &cli.command, local.payload),
        Command::Turn { .. }
        | Command::Last { .. }
        | Command::Page { .. }
        | Command::Range { .. }
        | Command::Replay { .. }
        | Command::Log { .. }
        | Command::Find { .. }
        | Command::Window { .. } => read_turns(&client, &out, &cli.command, local.turn_target),
        Command::Backup { backup_timeout, .. } => {
            let Some(dir) = local.backup_dir else {
                anyhow::bail!("backup: no directory was resolved");
            };
            backup(&client, &out, dir, *backup_timeout)
        }
        Command::Blob { hash, output } => blob(&client, hash, output.as_ref()),
        Command::Ping => ping(&client, &out, &cli.addr),
        Command::Gc { gc_timeout } => gc(&client, &out, *gc_timeout),
        Command::Patch { .. } | Command::Redact { .. } | Command::Purge { .. } => {
            overlays(&client, &out, &cli.command, local.payload, local.purge_hash)
        }
        Command::Stats => stats(&client, &out),
    }
}

impl Command {
    /// The reads of turns: the commands `--as-of` applies to.
    fn reads_turns(&self) -> bool {
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

/// What a command takes from this side, checked and read before connecting so that a refusal
/// needs no server: `turn`'s target, `backup`'s directory, the payload of `append`, `kv put`
/// or `patch`, `purge`'s hash.
struct LocalInput {
    turn_target: Option<TurnTarget>,
    backup_dir: Option<String>,
    payload: Option<Vec<u8>>,
    purge_hash: Option<BlobHash>,
}

impl LocalInput {
    /// The checks in a fixed order (scripts see the first refusal): the turn target, the
    /// labels, `--as-of`, the backup directory, the payload (read from stdin or a file), the
    /// purge hash.
    fn check(command: &Command, as_of: Option<u64>) -> anyhow::Result<LocalInput> {
        let turn_target = match command {
            Command::Turn { target, key } => Some(TurnTarget::parse(target, key.as_ref())?),
            _ => None,
        };
        if let Command::Append { labels, .. } = command {
            check_labels(labels)?;
        }
        if as_of.is_some() && !command.reads_turns() {
            return Err(Usage(
                "--as-of applies to reads of turns (turn, last, page, range, replay, log, find, \
                 window)"
                    .into(),
            )
            .into());
        }
        let backup_dir = match command {
            Command::Backup { to, .. } => Some(backup_dir(to)?),
            _ => None,
        };
        let payload = command_payload(command)?;
        let purge_hash = match command {
            Command::Purge { hash, .. } => Some(blob_hash_from_hex(hash)?),
            _ => None,
        };
        Ok(LocalInput {
            turn_target,
            backup_dir,
            payload,
            purge_hash,
        })
    }
}

/// The payload of `append`, the value of `kv put`, the new payload of `patch`; `None` for
/// the commands that send none.
fn command_payload(command: &Command) -> anyhow::Result<Option<Vec<u8>>> {
    Ok(match command {
        Command::Append {
            file, allow_empty, ..
        } => Some(read_payload(
            file.as_ref(),
            *allow_empty,
            "append an empty turn",
        )?),
        Command::Kv(KvCommand::Put {
            file, allow_empty, ..
        }) => Some(read_payload(
            file.as_ref(),
            *allow_empty,
            "store an empty value",
        )?),
        Command::Patch {
            file, allow_empty, ..
        } => Some(read_payload(
            file.as_ref(),
            *allow_empty,
            "patch a turn to an empty payload",
        )?),
        _ => None,
    })
}

/// Connects with the command line's timeouts: `--timeout` for each request (0s: none), the
/// command's own for a backup or a collection, `--connect-timeout` for the TCP connection and
/// again for HELLO.
fn connect(cli: &Cli) -> anyhow::Result<Client> {
    let request_timeout = Some(cli.timeout).filter(|timeout| !timeout.is_zero());
    let backup_timeout = match &cli.command {
        Command::Backup { backup_timeout, .. } => {
            Some(*backup_timeout).filter(|timeout| !timeout.is_zero())
        }
        _ => Some(ClientConfig::BACKUP_TIMEOUT_DEFAULT),
    };
    let gc_timeout = match &cli.command {
        Command::Gc { gc_timeout } | Command::Purge { gc_timeout, .. } => {
            Some(*gc_timeout).filter(|timeout| !timeout.is_zero())
        }
        _ => Some(ClientConfig::GC_TIMEOUT_DEFAULT),
    };
    let config = ClientConfig::new(cli.addr.clone())
        .with_backup_timeout(backup_timeout)
        .with_gc_timeout(gc_timeout)
        .with_token(cli.token.clone())
        .with_connect_timeout(cli.connect_timeout)
        .with_hello_timeout(cli.connect_timeout)
        .with_request_timeout(request_timeout)
        .with_verify_payloads(cli.verify_payloads);
    let mut client =
        Client::connect(config).with_context(|| format!("connecting to {}", cli.addr))?;
    // Reads of turns ask for the overlay view (the latest unless --as-of), so that turn lines
    // say which turns are redacted or patched; --as-of on a version-1 server is refused.
    if client.protocol_version() >= 2 || cli.as_of.is_some() {
        client.set_view(Some(cli.as_of.unwrap_or(0)));
    }
    Ok(client)
}

/// `append`: APPEND_TURN when no option needs more (any server), else the version-2 append
/// with the turn's parent, key, labels, links and summary flag. `payload` is what was read
/// before connecting.
fn append(
    client: &Client,
    out: &Output,
    command: &Command,
    payload: Option<Vec<u8>>,
) -> anyhow::Result<()> {
    let Command::Append {
        context,
        type_tag,
        codec,
        expect_head,
        parent,
        root,
        key,
        labels,
        links,
        summary,
        ..
    } = command
    else {
        anyhow::bail!("append: the command is not an append");
    };
    let codec = *codec;
    let payload = Bytes::from(payload.unwrap_or_default());
    let plain = parent.is_none()
        && !root
        && key.is_none()
        && labels.is_empty()
        && links.is_empty()
        && !summary;
    if plain {
        // APPEND_TURN: what version 1 has, so a plain append works with any server.
        let appended = client.append(context.clone(), *expect_head, *type_tag, codec, payload)?;
        return out.appended(&appended.turn, appended.deduped, false);
    }
    let mut turn = NewTurn::bytes(payload)
        .type_tag(*type_tag)
        .codec(codec)
        .parent(match (parent, root) {
            (Some(parent), _) => Parent::Turn(*parent),
            (None, true) => Parent::Root,
            (None, false) => Parent::Head,
        })
        .summary(*summary);
    turn.key = key.clone().map(Bytes::from);
    turn.labels = labels.clone();
    turn.links = links.clone();
    let appended = client.append_turn(context.clone(), *expect_head, turn)?;
    out.appended(&appended.turn.turn, appended.deduped, appended.existing)
}

/// Reads of turns: `turn`, `last`, `page`, `range`, `replay`, `log`, `find`, `window`.
/// `turn_target` is what `turn`'s argument parsed to before connecting.
fn read_turns(
    client: &Client,
    out: &Output,
    command: &Command,
    turn_target: Option<TurnTarget>,
) -> anyhow::Result<()> {
    // Version 2 reads carry each turn's key, labels and links; a version-1 server has none.
    let v2 = client.protocol_version() >= 2;
    match command {
        Command::Turn { .. } => turn(client, out, turn_target, v2),
        Command::Last {
            context,
            n,
            payloads,
        } => out.page(client, context, PageKind::Last, *n, *payloads),
        Command::Page {
            context,
            before,
            n,
            payloads,
        } => {
            let kind = PageKind::Before {
                before_turn_id: *before,
            };
            out.page(client, context, kind, *n, *payloads)
        }
        Command::Range {
            context,
            from_depth,
            n,
            payloads,
        } => {
            let kind = PageKind::Range {
                from_depth: *from_depth,
            };
            out.page(client, context, kind, *n, *payloads)
        }
        Command::Replay { turn, payloads } if v2 => {
            out.turns(&client.replay_info(*turn, *payloads)?)
        }
        Command::Replay { turn, payloads } => out.turns(
            &client
                .replay(*turn, *payloads)?
                .into_iter()
                .map(plain_info)
                .collect::<Vec<_>>(),
        ),
        Command::Log {
            context,
            labels,
            n,
            payloads,
        } => log(client, out, context, labels, *n, *payloads),
        Command::Find { labels, n } => find(client, out, labels, *n),
        Command::Window {
            context,
            n,
            payloads,
        } => {
            let count_max = n.map(|n| n as usize);
            out.turns(&client.window_all(context.clone(), count_max, *payloads)?)
        }
        _ => anyhow::bail!("read_turns: the command reads no turns"),
    }
}

/// `turn TURN` (with its extras from a version-2 server) or `turn CTX --key K`.
fn turn(client: &Client, out: &Output, target: Option<TurnTarget>, v2: bool) -> anyhow::Result<()> {
    match target {
        Some(TurnTarget::Key(context, key)) => {
            match client.turn_by_key(context.clone(), Bytes::from(key.clone()))? {
                Some(info) => out.turns(&[info]),
                None => Err(NoSuchKey {
                    context,
                    what: "turn with the key",
                    key,
                }
                .into()),
            }
        }
        Some(TurnTarget::Id(turn)) if v2 => out.turns(&[client.turn_info(turn)?]),
        Some(TurnTarget::Id(turn)) => out.turns(&[plain_info(client.turn(turn)?)]),
        None => anyhow::bail!("turn: no target was parsed"),
    }
}

/// A version-1 read's turn with the extras it has: none (a server that speaks only version 1
/// cannot store keys, labels or links).
fn plain_info(turn: Turn) -> TurnInfo {
    TurnInfo {
        turn,
        key: None,
        labels: BTreeMap::new(),
        links: Vec::new(),
    }
}

/// `log`: the context's turn log, page by page, printing as it goes (a long log starts at once
/// and stops quietly when the reader does).
fn log(
    client: &Client,
    out: &Output,
    context: &ContextRef,
    labels: &[(String, String)],
    n: Option<u32>,
    payloads: bool,
) -> anyhow::Result<()> {
    let mut printed = 0usize;
    let mut cursor: Option<LogCursor> = None;
    loop {
        let left = n.map_or(usize::MAX, |n| (n as usize).saturating_sub(printed));
        let limit = u32::try_from(left).map_or(LOG_PAGE_MAX, |left| left.min(LOG_PAGE_MAX));
        let page = client.turn_log(context.clone(), labels, cursor, limit, payloads)?;
        let shown = page.turns.len().min(left);
        out.turns(&page.turns[..shown])?;
        printed += shown;
        if n.is_some_and(|n| printed >= n as usize) {
            return Ok(());
        }
        match page.next_cursor {
            None => return Ok(()),
            Some(next) if Some(next) == cursor => {
                anyhow::bail!("the server answered the same turn-log cursor twice")
            }
            Some(next) => cursor = Some(next),
        }
    }
}

/// `find`: the first indexed label through the server's index, the others checked here; page
/// by page, printing as it goes.
fn find(
    client: &Client,
    out: &Output,
    labels: &[(String, String)],
    n: Option<u32>,
) -> anyhow::Result<()> {
    // The first indexed label; else the first, which the server refuses saying which keys are.
    let Some((key, value)) = labels
        .iter()
        .find(|(key, _)| is_indexed_label(key))
        .or(labels.first())
    else {
        return Err(Usage("find needs at least one --label KEY=VALUE".into()).into());
    };
    let mut printed = 0usize;
    let mut before = 0u64;
    loop {
        let left = n.map_or(usize::MAX, |n| (n as usize).saturating_sub(printed));
        if left == 0 {
            return Ok(());
        }
        let limit = match labels.len() {
            // Other labels are checked here: how many of a page match is unknown.
            1 => u32::try_from(left).map_or(FIND_PAGE_MAX, |left| left.min(FIND_PAGE_MAX)),
            _ => FIND_PAGE_MAX,
        };
        let page = client.find_turns(key.clone(), value.clone(), before, limit)?;
        let matching: Vec<TurnInfo> = page
            .turns
            .into_iter()
            .filter(|info| labels.iter().all(|(key, value)| info.has_label(key, value)))
            .take(left)
            .collect();
        out.turns(&matching)?;
        printed += matching.len();
        if page.next_before == 0 {
            return Ok(());
        }
        if before != 0 && page.next_before >= before {
            anyhow::bail!("the server's find cursor did not move to older turns");
        }
        before = page.next_before;
    }
}

/// `ctx …`: contexts, and (protocol version 2) their names and tags.
fn ctx(client: &Client, out: &Output, command: &CtxCommand) -> anyhow::Result<()> {
    match command {
        CtxCommand::Create {
            from,
            name,
            tags,
            get_or_create,
        } => {
            // A plain create works with a version-1 server too (no name, no tags, no times).
            if client.protocol_version() < 2 && name.is_none() && tags.is_empty() {
                let head = match from {
                    None => client.create_context()?,
                    Some(turn) => client.create_context_from(*turn)?,
                };
                return out.created_v1(&head);
            }
            let new = NewContext {
                base_turn_id: from.unwrap_or(0),
                name: name.clone(),
                tags: tags.iter().cloned().collect(),
                get_or_create: *get_or_create,
            };
            let opened = client.open_context(new)?;
            out.context(&opened.context, Some(opened.created))
        }
        CtxCommand::Fork { turn } => out.head(&client.fork(*turn)?),
        CtxCommand::Show { context } => show(client, out, context),
        CtxCommand::Tag {
            context,
            set,
            remove,
            expect_head,
        } => {
            let info =
                client.tag_context(context.clone(), set.clone(), remove.clone(), *expect_head)?;
            out.context(&info, None)
        }
        CtxCommand::Name { context, name } => {
            out.context(&client.name_context(context.clone(), name.clone())?, None)
        }
        CtxCommand::List {
            tags,
            name_prefix,
            updated_before,
            updated_after,
            limit,
        } => {
            if *updated_before == Some(0) {
                return Err(Usage("--updated-before 0 (1970) matches no context".into()).into());
            }
            let query = ContextQuery {
                tags: tags.iter().cloned().collect::<BTreeMap<_, _>>(),
                name_prefix: name_prefix.clone(),
                // After 0 bounds nothing (every context was updated after 1970); on the wire
                // 0 means "no bound", so it is sent as none.
                updated_after_unix_ms: updated_after.filter(|at| *at != 0),
                updated_before_unix_ms: *updated_before,
                ..ContextQuery::default()
            };
            list_contexts(client, out, &query, *limit)
        }
        CtxCommand::Clone { context, name } => {
            out.context(&client.clone_context(context.clone(), name.clone())?, None)
        }
        CtxCommand::Delete { context } => out.deleted(&client.delete_context(context.clone())?),
        CtxCommand::Prune { context, keep } => {
            out.retention(&client.prune_context(context.clone(), *keep)?)
        }
        CtxCommand::Ttl { context, ttl } => {
            let ttl = match ttl {
                Ttl::Set(ttl) => Some(*ttl),
                Ttl::Clear => None,
            };
            out.retention(&client.set_context_ttl(context.clone(), ttl)?)
        }
    }
}

/// `ctx list`: page by page, printing as it goes: a long listing starts at once and stops
/// quietly when the reader does (`| head`).
fn list_contexts(
    client: &Client,
    out: &Output,
    query: &ContextQuery,
    limit: Option<u32>,
) -> anyhow::Result<()> {
    let mut printed = 0usize;
    let mut cursor = None;
    loop {
        let mut page_query = query.clone();
        if let Some(limit) = limit {
            let left = (limit as usize).saturating_sub(printed);
            page_query.page_limit = page_query
                .page_limit
                .min(u32::try_from(left).unwrap_or(u32::MAX));
        }
        let page = client.list_contexts(&page_query, cursor.as_ref())?;
        for info in &page.contexts {
            out.context(info, None)?;
        }
        printed += page.contexts.len();
        let done = limit.is_some_and(|limit| printed >= limit as usize);
        match page.next_cursor {
            Some(next) if !done => {
                if cursor.as_ref() == Some(&next) {
                    anyhow::bail!("the server answered the same listing cursor twice");
                }
                cursor = Some(next);
            }
            _ => return Ok(()),
        }
    }
}

/// `ctx show`: the context with its floor and time to live (CTX_TTL without SET, which
/// answers what CTX_SHOW does plus those); without them from a server that does not know
/// CTX_TTL.
fn show(client: &Client, out: &Output, context: &ContextRef) -> anyhow::Result<()> {
    if client.protocol_version() >= 2 {
        match client.context_retention(context.clone()) {
            Ok(retention) => return out.retention(&retention),
            Err(error) if error.code() == Some(ErrorCode::UnknownMessage) => {}
            Err(error) => return Err(error.into()),
        }
    }
    out.context(&client.context_info(context.clone())?, None)
}

/// `backup --to DIR`: DIR made absolute here (it is sent as text, and the server refuses a
/// relative path), before connecting.
fn backup_dir(to: &std::path::Path) -> Result<String, Usage> {
    let absolute = std::path::absolute(to)
        .map_err(|error| Usage(format!("backup --to {}: {error}", to.display())))?;
    absolute.into_os_string().into_string().map_err(|dir| {
        Usage(format!(
            "backup --to {}: the directory must be UTF-8 to be sent to the server",
            std::path::Path::new(&dir).display()
        ))
    })
}

/// `backup`: one BACKUP request, waiting up to `--backup-timeout`.
fn backup(client: &Client, out: &Output, dir: String, timeout: Duration) -> anyhow::Result<()> {
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
fn gc(client: &Client, out: &Output, timeout: Duration) -> anyhow::Result<()> {
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

/// `blob HASH`: the payload's raw bytes, to stdout or to -o PATH.
fn blob(client: &Client, hash: &str, output: Option<&PathBuf>) -> anyhow::Result<()> {
    let bytes = client.blob(blob_hash_from_hex(hash)?)?;
    match output {
        Some(path) => {
            std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))
        }
        None => write_stdout(&bytes),
    }
}

/// `ping`: one PING round trip, timed here.
fn ping(client: &Client, out: &Output, addr: &str) -> anyhow::Result<()> {
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

/// Overlays (decision 0012): `patch`, `redact`, `purge [--gc]`. `payload` (`patch`'s) and
/// `purge_hash` were read before connecting.
fn overlays(
    client: &Client,
    out: &Output,
    command: &Command,
    payload: Option<Vec<u8>>,
    purge_hash: Option<BlobHash>,
) -> anyhow::Result<()> {
    match command {
        Command::Patch { turn, .. } => {
            let payload = Bytes::from(payload.unwrap_or_default());
            out.patched(&client.patch_turn(*turn, payload)?)
        }
        Command::Redact { turn } => out.redacted(&client.redact_turn(*turn)?),
        Command::Purge {
            gc: collect,
            gc_timeout,
            ..
        } => {
            let Some(hash) = purge_hash else {
                anyhow::bail!("purge: no hash was parsed");
            };
            out.purged(&client.purge_blob(hash)?)?;
            if *collect {
                gc(client, out, *gc_timeout)?;
            }
            Ok(())
        }
        _ => anyhow::bail!("overlays: the command changes no overlay"),
    }
}

/// `stats`: the server's counters, one JSON object or one aligned `name value` line each
/// (garbage collection's `null` from a server without them).
fn stats(client: &Client, out: &Output) -> anyhow::Result<()> {
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

/// `kv …`: a context's key-value entries. `value` is what `kv put` read before connecting.
fn kv(
    client: &Client,
    out: &Output,
    command: &KvCommand,
    value: Option<Vec<u8>>,
) -> anyhow::Result<()> {
    match command {
        KvCommand::Put {
            context,
            key,
            if_absent,
            ..
        } => {
            let key = Bytes::from(key.clone().into_encoded_bytes());
            let value = Bytes::from(value.unwrap_or_default());
            let entry = KvItem {
                key: key.clone(),
                value_hash: BlobHash::of(&value),
                value_len: value.len() as u32,
            };
            client.kv_put(context.clone(), vec![(key.clone(), value)], *if_absent)?;
            // What the context holds now: with --if-absent, perhaps the value that was there.
            let stored = client.kv_list(context.clone(), &key, &[], 1)?;
            let stored = stored.into_iter().find(|item| item.key == key);
            out.kv_item(stored.as_ref().unwrap_or(&entry))
        }
        KvCommand::Get {
            context,
            key,
            output,
        } => {
            let key = key.clone().into_encoded_bytes();
            let Some((_, value)) = client.kv_get(context.clone(), key.clone())? else {
                return Err(NoSuchKey {
                    context: context.clone(),
                    what: "key",
                    key: String::from_utf8_lossy(&key).into_owned(),
                }
                .into());
            };
            match output {
                Some(path) => std::fs::write(path, &value)
                    .with_context(|| format!("writing {}", path.display())),
                None => write_stdout(&value),
            }
        }
        KvCommand::Rm { context, key } => {
            // KV_DELETE answers DONE whether or not the key was there: look first, so that a
            // missing key is NOT_FOUND (as for `kv get`) and a removed one is printed as it was.
            let key = Bytes::from(key.clone().into_encoded_bytes());
            let found = client
                .kv_list(context.clone(), &key, &Bytes::new(), 1)?
                .into_iter()
                .find(|item| item.key == key);
            let Some(item) = found else {
                return Err(NoSuchKey {
                    context: context.clone(),
                    what: "key",
                    key: String::from_utf8_lossy(&key).into_owned(),
                }
                .into());
            };
            client.kv_delete(context.clone(), vec![key])?;
            out.kv_item(&item)
        }
        KvCommand::List { context, prefix } => {
            let prefix = prefix.clone().unwrap_or_default().into_encoded_bytes();
            // Page by page, printing as it goes (see `ctx list`).
            const PAGE: u32 = 1000;
            let mut after = Bytes::new();
            loop {
                let page = client.kv_list(context.clone(), &prefix, &after, PAGE)?;
                for item in &page {
                    out.kv_item(item)?;
                }
                match page.last() {
                    Some(last) if page.len() == PAGE as usize => after = last.key.clone(),
                    _ => return Ok(()),
                }
            }
        }
    }
}

struct Output {
    json: bool,
}

impl Output {
    fn line(&self, value: &serde_json::Value) -> anyhow::Result<()> {
        write_stdout(format!("{value}\n").as_bytes())
    }

    fn text(&self, text: &str) -> anyhow::Result<()> {
        write_stdout(format!("{text}\n").as_bytes())
    }

    fn head(&self, head: &ContextHead) -> anyhow::Result<()> {
        if self.json {
            self.line(&json!({
                "context_id": head.context_id,
                "head_turn_id": head.head_turn_id,
                "head_depth": head.head_depth,
            }))
        } else if head.head_turn_id == 0 {
            self.text(&format!("context {} (empty)", head.context_id))
        } else {
            self.text(&format!(
                "context {} head {} depth {}",
                head.context_id, head.head_turn_id, head.head_depth
            ))
        }
    }

    /// A context as `ctx show` prints it; `created` (from `ctx create`) adds whether this call
    /// created it.
    fn context(&self, info: &ContextInfo, created: Option<bool>) -> anyhow::Result<()> {
        self.context_with(info, created, None)
    }

    /// `ctx show`, `ctx prune`, `ctx ttl`: the context with its floor and time to live.
    fn retention(&self, retention: &ContextRetention) -> anyhow::Result<()> {
        self.context_with(&retention.context, None, Some(retention))
    }

    /// `ctx delete`: which context is gone.
    fn deleted(&self, retention: &ContextRetention) -> anyhow::Result<()> {
        let info = &retention.context;
        if self.json {
            return self.line(&json!({
                "context_id": info.context_id,
                "name": info.name,
                "deleted": true,
            }));
        }
        let mut text = format!("context {}", info.context_id);
        if let Some(name) = &info.name {
            text.push_str(&format!(" @{}", readable(name)));
        }
        text.push_str(" deleted");
        self.text(&text)
    }

    /// What `backup` prints.
    fn backup(&self, report: &BackupReport) -> anyhow::Result<()> {
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

    /// What `patch` prints: the turn, its overlay sequence number, the new payload's hash and length.
    fn patched(&self, patched: &Patched) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turn_id": patched.turn_id,
                "overlay_seq": patched.overlay_seq,
                "payload_hash": patched.payload_hash.to_hex(),
                "payload_len": patched.payload_len,
            }));
        }
        self.text(&format!(
            "turn {} patched (overlay {}): payload {} of {} bytes",
            patched.turn_id, patched.overlay_seq, patched.payload_hash, patched.payload_len
        ))
    }

    fn redacted(&self, redacted: &Redacted) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turn_id": redacted.turn_id,
                "overlay_seq": redacted.overlay_seq,
                "redacted": true,
            }));
        }
        self.text(&format!(
            "turn {} redacted (overlay {}); its bytes leave the disk at the next gc",
            redacted.turn_id, redacted.overlay_seq
        ))
    }

    fn purged(&self, purged: &Purged) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "payload_hash": purged.payload_hash.to_hex(),
                "turns_redacted": purged.turns_redacted,
                "overlay_seq": purged.overlay_seq,
            }));
        }
        self.text(&format!(
            "blob {} purged (overlay {}): {} turns redacted",
            purged.payload_hash, purged.overlay_seq, purged.turns_redacted
        ))
    }

    fn gc(&self, report: &GcReport) -> anyhow::Result<()> {
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

    fn context_with(
        &self,
        info: &ContextInfo,
        created: Option<bool>,
        retention: Option<&ContextRetention>,
    ) -> anyhow::Result<()> {
        if self.json {
            let mut value = json!({
                "context_id": info.context_id,
                "head_turn_id": info.head_turn_id,
                "head_depth": info.head_depth,
                "name": info.name,
                "tags": info.tags,
                "created_at_unix_ms": info.created_at_unix_ms,
                "updated_at_unix_ms": info.updated_at_unix_ms,
            });
            if let Some(object) = value.as_object_mut() {
                if let Some(created) = created {
                    object.insert("created".into(), json!(created));
                }
                if let Some(retention) = retention {
                    object.insert("floor_depth".into(), json!(retention.floor_depth));
                    object.insert("ttl_ms".into(), json!(retention.ttl_ms));
                }
            }
            return self.line(&value);
        }
        let mut text = format!("context {}", info.context_id);
        if let Some(name) = &info.name {
            text.push_str(&format!(" @{}", readable(name)));
        }
        if info.head_turn_id == 0 {
            text.push_str(" (empty)");
        } else {
            text.push_str(&format!(
                " head {} depth {}",
                info.head_turn_id, info.head_depth
            ));
        }
        if !info.tags.is_empty() {
            let tags: Vec<String> = info
                .tags
                .iter()
                .map(|(key, value)| format!("{}={}", readable(key), readable(value)))
                .collect();
            text.push_str(&format!(" tags {}", tags.join(" ")));
        }
        if let Some(retention) = retention {
            if retention.floor_depth > 0 {
                text.push_str(&format!(" floor {}", retention.floor_depth));
            }
            if let Some(ttl) = retention.ttl() {
                text.push_str(&format!(" ttl {}", humantime::format_duration(ttl)));
            }
        }
        text.push_str(&format!(
            " created {} updated {}",
            unix_ms_text(info.created_at_unix_ms),
            unix_ms_text(info.updated_at_unix_ms)
        ));
        if created == Some(false) {
            text.push_str(" (already existed)");
        }
        self.text(&text)
    }

    /// `ctx create` against a version-1 server: the same fields, no name, tags or times.
    fn created_v1(&self, head: &ContextHead) -> anyhow::Result<()> {
        if !self.json {
            return self.head(head);
        }
        self.line(&json!({
            "context_id": head.context_id,
            "head_turn_id": head.head_turn_id,
            "head_depth": head.head_depth,
            "name": null,
            "tags": {},
            "created": true,
        }))
    }

    /// A key-value entry as `kv list` prints it.
    fn kv_item(&self, item: &KvItem) -> anyhow::Result<()> {
        let key = String::from_utf8_lossy(&item.key);
        if self.json {
            let mut value = json!({
                "key": key,
                "value_hash": item.value_hash.to_hex(),
                "value_len": item.value_len,
            });
            if let (Err(_), Some(object)) = (std::str::from_utf8(&item.key), value.as_object_mut())
            {
                object.insert("key_b64".into(), json!(BASE64_STANDARD.encode(&item.key)));
            }
            self.line(&value)
        } else {
            self.text(&format!(
                "{} {} bytes {}",
                readable(&key),
                item.value_len,
                item.value_hash
            ))
        }
    }

    /// What `append` prints: the turn appended (or, with `existing`, the turn that had the
    /// key).
    fn appended(&self, turn: &Turn, deduped: bool, existing: bool) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turn_id": turn.turn_id,
                "parent_turn_id": turn.parent_turn_id,
                "depth": turn.depth,
                "payload_hash": turn.payload_hash.to_hex(),
                "deduped": deduped,
                "existing": existing,
            }));
        }
        let mut text = format!(
            "turn {} (parent {}, depth {}) payload {}",
            turn.turn_id, turn.parent_turn_id, turn.depth, turn.payload_hash
        );
        if existing {
            text.push_str(" (the key was there: nothing written)");
        } else if deduped {
            text.push_str(" (already stored)");
        }
        self.text(&text)
    }

    /// `last`, `page`, `range`: READ_PAGE with each turn's extras; the version-1 reads on a
    /// server that speaks only version 1.
    fn page(
        &self,
        client: &Client,
        context: &ContextRef,
        kind: PageKind,
        n: u32,
        payloads: bool,
    ) -> anyhow::Result<()> {
        if client.protocol_version() >= 2 {
            return self.turns(&client.read_page(context.clone(), kind, n, payloads)?.turns);
        }
        let context = context.clone();
        let page = match kind {
            PageKind::Last => client.last(context, n, payloads)?,
            PageKind::Before { before_turn_id } => {
                client.before(context, before_turn_id, n, payloads)?
            }
            PageKind::Range { from_depth } => client.range(context, from_depth, n, payloads)?,
            PageKind::Window => anyhow::bail!("a window needs protocol version 2"),
        };
        let turns: Vec<TurnInfo> = page.turns.into_iter().map(plain_info).collect();
        self.turns(&turns)
    }

    /// Turn lines, one per turn: the turn, its key, labels, links and summary flag.
    fn turns(&self, turns: &[TurnInfo]) -> anyhow::Result<()> {
        for info in turns {
            let turn = &info.turn;
            if self.json {
                let mut value = json!({
                    "turn_id": turn.turn_id,
                    "parent_turn_id": turn.parent_turn_id,
                    "context_id": turn.context_id,
                    "depth": turn.depth,
                    "type_tag": turn.type_tag,
                    "codec": codec_name(turn.codec),
                    "payload_hash": turn.payload_hash.to_hex(),
                    "payload_len": turn.payload_len,
                    "created_at_unix_ms": turn.created_at_unix_ms,
                    "key": info.key.as_ref().map(|key| String::from_utf8_lossy(key)),
                    "labels": info.labels,
                    "links": info.links,
                    "summary": turn.summary(),
                    "redacted": turn.redacted,
                    "overlay_seq": turn.overlay_seq,
                });
                if let Some(object) = value.as_object_mut() {
                    if let Some(key) = &info.key
                        && std::str::from_utf8(key).is_err()
                    {
                        object.insert("key_b64".into(), json!(BASE64_STANDARD.encode(key)));
                    }
                    if let Some(payload) = &turn.payload {
                        object.insert("payload_b64".into(), json!(BASE64_STANDARD.encode(payload)));
                    }
                }
                self.line(&value)?;
            } else {
                let mut text = format!(
                    "turn {} parent {} depth {} context {} type {} codec {} {} bytes {}",
                    turn.turn_id,
                    turn.parent_turn_id,
                    turn.depth,
                    turn.context_id,
                    turn.type_tag,
                    codec_name(turn.codec),
                    turn.payload_len,
                    turn.payload_hash
                );
                if let Some(key) = &info.key {
                    text.push_str(&format!(" key {}", readable(&String::from_utf8_lossy(key))));
                }
                if !info.labels.is_empty() {
                    let labels: Vec<String> = info
                        .labels
                        .iter()
                        .map(|(key, value)| format!("{}={}", readable(key), readable(value)))
                        .collect();
                    text.push_str(&format!(" labels {}", labels.join(" ")));
                }
                if !info.links.is_empty() {
                    let links: Vec<String> = info.links.iter().map(u64::to_string).collect();
                    text.push_str(&format!(" links {}", links.join(",")));
                }
                if turn.summary() {
                    text.push_str(" summary");
                }
                if turn.redacted {
                    text.push_str(&format!(" redacted (overlay {})", turn.overlay_seq));
                } else if turn.overlay_seq > 0 {
                    text.push_str(&format!(" patched (overlay {})", turn.overlay_seq));
                }
                if let Some(payload) = &turn.payload {
                    text.push_str("\n  ");
                    text.push_str(&String::from_utf8_lossy(payload));
                }
                self.text(&text)?;
            }
        }
        Ok(())
    }
}

/// Text as it is when it has no spaces, quotes or control characters; quoted otherwise (so
/// that a line of readable output stays one line with its fields apart).
fn readable(text: &str) -> String {
    let plain = !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\');
    if plain {
        text.to_string()
    } else {
        format!("{text:?}")
    }
}

/// Unix milliseconds as RFC 3339 (UTC), for humans.
fn unix_ms_text(unix_ms: u64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every subcommand and every argument says what it is in `--help`.
    #[test]
    fn every_command_and_argument_has_help() {
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
    fn contexts_are_ids_or_at_names() {
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
    fn tags_split_at_the_first_equals() {
        assert_eq!(parse_tag("status=a=b"), Ok(("status".into(), "a=b".into())));
        assert_eq!(parse_tag("k="), Ok(("k".into(), String::new())));
        assert!(parse_tag("=v").is_err());
        assert!(parse_tag("novalue").is_err());
    }

    #[test]
    fn ttls_are_durations_or_none() {
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
    fn durations_name_their_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
    }
}
