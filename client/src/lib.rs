//! ctxstore-client: talk to a ctxstore server.
//!
//! - [`Client`]: async, on tokio; pipelined (any number of concurrent calls on one
//!   connection, matched by req_id); cheap to clone.
//! - [`blocking::Client`]: the same API for code that is not async.
//! - Payloads are verified against their BLAKE3 hashes; with `accept_zstd` (default) the server
//!   may ship stored zstd bodies (those too large for its payload cache) and the client
//!   inflates them.
//! - Contexts as agent threads (protocol version 2): a context is named by its ContextID or
//!   by its unique name ([`ContextRef`]), carries tags and a small key-value map, and can be
//!   listed by tag or name prefix and cloned ([`Client::open_context`],
//!   [`Client::list_contexts`], [`Client::kv_put`], [`Client::clone_context`], …).
//! - Turns for agent frameworks (protocol version 2): appends after any turn the context
//!   owns or as a new root, idempotency keys, labels, links and summary marks
//!   ([`Client::append_turn`], [`Client::append_turns`] for a batch in one group commit), a
//!   turn by key ([`Client::turn_by_key`]), the context's turn log across branches
//!   ([`Client::turn_log`]), windows from the latest summary ([`Client::window`]) and a
//!   store-wide find by label ([`Client::find_turns`]). They return [`TurnInfo`]: the turn
//!   with its key, labels and links. On a version-1 server each is
//!   [`ClientError::Unsupported`], before anything is sent.
//!
//! - Retention and backups (protocol version 2): delete a context, prune it to its newest
//!   turns, give it a time to live ([`Client::delete_context`], [`Client::prune_context`],
//!   [`Client::set_context_ttl`], [`Client::context_retention`], each returning a
//!   [`ContextRetention`]), and have the server copy its store while it serves
//!   ([`Client::backup`], waiting up to [`ClientConfig::backup_timeout`], not the request
//!   timeout).
//!
//! - Overlays and redaction (protocol version 2, decision 0012): give a turn a new payload
//!   ([`Client::patch_turn`]), take its payload away in every view ([`Client::redact_turn`]),
//!   redact every turn naming a blob ([`Client::purge_blob`]; its bytes leave the disk at
//!   the next [`Client::gc`]). A handle from [`Client::as_of`] (or
//!   [`blocking::Client::set_view`]) reads turns in an overlay view, each with
//!   [`Turn::redacted`] and [`Turn::overlay_seq`].
//!
//! - Sub-blob dedup on the wire (protocol version 2, issue 16): an append by value of a
//!   payload larger than [`ChunkingConfig::threshold_bytes`] (16 KiB) sends only the
//!   content-defined chunks the server lacks (HAS_BLOBS → PUT_CHUNKED → an append by hash),
//!   so an agent state that grows a little each step costs about what it grew by
//!   ([`ClientConfig::chunking`]; `None` turns it off). [`Client::bytes_sent`] counts what a
//!   connection wrote; [`Client::put_chunked`] is the step by hand.
//!
//! - A context as a tree ([`tree::fetch`], `ctxstore tree`): every branch, the heads that
//!   point into it, previews of the shown turns only; as box-drawing text or JSON.
//!
//! ```no_run
//! # fn main() -> Result<(), ctxstore_client::ClientError> {
//! use ctxstore_client::{ClientConfig, blocking::Client};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:7411"))?;
//! let context = client.create_context()?.context_id;
//! let appended = client.append(context, None, 1, 1, bytes::Bytes::from_static(b"{\"role\":\"user\"}"))?;
//! let page = client.last(context, 10, true)?;
//! assert_eq!(page.turns.last().map(|t| t.turn_id), Some(appended.turn.turn_id));
//! # Ok(()) }
//! ```
//!
//! Contexts as agent threads, by name (protocol version 2):
//!
//! ```no_run
//! # fn main() -> Result<(), ctxstore_client::ClientError> {
//! use ctxstore_client::{ClientConfig, ContextQuery, ContextRef, NewContext, blocking::Client};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:7411"))?;
//! let new = NewContext::new().name("thread-42").tag("status", "idle").get_or_create(true);
//! let opened = client.open_context(new)?; // `created` is false if it existed
//! let thread = ContextRef::Name("thread-42".into());
//! client.append(thread.clone(), None, 1, 1, bytes::Bytes::from_static(b"hi"))?;
//! client.tag_context(thread.clone(), [("status", "running")], [] as [&str; 0], None)?;
//! let running = client.list_all_contexts(&ContextQuery::new().tag("status", "running"), None)?;
//! client.kv_put(thread.clone(), vec![("checkpoint/1".into(), "{}".into())], false)?;
//! let copy = client.clone_context(thread, "thread-42-retry")?; // same head, tags, entries
//! # let _ = (opened, running, copy);
//! # Ok(()) }
//! ```
//!
//! Turns for agent frameworks (protocol version 2):
//!
//! ```no_run
//! # fn main() -> Result<(), ctxstore_client::ClientError> {
//! use bytes::Bytes;
//! use ctxstore_client::{ClientConfig, ContextRef, NewTurn, Parent, blocking::Client};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:7411"))?;
//! let thread = ContextRef::Name("thread-42".into());
//! // A retried append with the same key writes nothing: `existing` is then true.
//! let step = NewTurn::bytes(Bytes::from_static(b"{}")).key("checkpoint-1").label("run_id", "r-1");
//! let appended = client.append_turn(thread.clone(), None, step)?;
//! // Time travel: a new turn after an older one; the head moves to it.
//! let old = appended.turn.turn.turn_id;
//! client.append_turn(thread.clone(), None, NewTurn::bytes(Bytes::from_static(b"retry")).parent(Parent::Turn(old)))?;
//! let every_branch = client.turn_log_all(thread.clone(), &[("run_id".into(), "r-1".into())], None, false)?;
//! let for_the_model = client.window_all(thread.clone(), None, true)?;
//! let by_run = client.find_all_turns(&[("run_id".into(), "r-1".into())], None)?;
//! # let _ = (every_branch, for_the_model, by_run);
//! # Ok(()) }
//! ```
//!
//! Retention and backups (protocol version 2):
//!
//! ```no_run
//! # fn main() -> Result<(), ctxstore_client::ClientError> {
//! use std::time::Duration;
//! use ctxstore_client::{ClientConfig, ContextRef, blocking::Client};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:7411"))?;
//! let thread = ContextRef::Name("thread-42".into());
//! let pruned = client.prune_context(thread.clone(), 100)?; // keep the newest 100 depths
//! let week = Duration::from_secs(7 * 24 * 3600);
//! let kept = client.set_context_ttl(thread.clone(), Some(week))?; // deleted after a week idle
//! assert_eq!(kept.ttl(), Some(week));
//! client.delete_context(ContextRef::Name("thread-41".into()))?;
//! // A path on the server's host; waits up to ClientConfig::backup_timeout (24 h).
//! let report = client.backup("/var/backups/ctxstore-2026-11-23")?;
//! # let _ = (pruned, report);
//! # Ok(()) }
//! ```
//!
//! Overlays and redaction (protocol version 2):
//!
//! ```no_run
//! # fn main() -> Result<(), ctxstore_client::ClientError> {
//! use ctxstore_client::{BlobHash, ClientConfig, ContextRef, blocking::Client};
//! let mut client = Client::connect(ClientConfig::new("127.0.0.1:7411"))?;
//! let patched = client.patch_turn(7, &b"the corrected answer"[..])?;
//! client.redact_turn(8)?; // final: a second redaction is INVALID_ARGUMENT
//! let purged = client.purge_blob(BlobHash::of(b"an uploaded document"))?;
//! client.set_view(Some(0)); // the latest view, with each turn's overlay state
//! let page = client.last(ContextRef::Name("thread-42".into()), 10, true)?;
//! assert!(page.turns.iter().all(|turn| !turn.redacted || turn.payload_len == 0));
//! client.set_view(Some(patched.overlay_seq - 1)); // turn 7 as it was before the patch
//! let before = client.turn(7)?;
//! # let _ = (purged, before);
//! # Ok(()) }
//! ```

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

pub mod blocking;
mod calls;
mod chunking;
mod client;
mod compress;
mod config;
mod error;
mod primary;
mod transport;
pub mod tree;
mod types;

pub use calls::{
    NewStream, STREAM_READER_BYTES_MAX, STREAM_READER_WAIT, StreamChunk, StreamFollow, StreamInfo,
    StreamReader, StreamState, TurnHit, TurnHits, TurnVectorQuery, VectorQuery, Watched,
};
pub use chunking::{ChunkingConfig, split_into_chunks};
pub use client::{
    APPEND_BATCH_TURNS_MAX, Client, FIND_PAGE_MAX, KV_TOUCH_KEYS_MAX, LOG_PAGE_MAX, TTL_MS_MAX,
    is_indexed_label,
};
pub use config::{ClientConfig, Idempotency};
/// `role`'s answer (protocol version 4): the wire's struct as it is, and when a write is
/// acknowledged.
pub use ctxstore_protocol::AckAfter;
/// A tenant as TENANT_LIST reports it (`Client::tenants`, protocol version 5), and what
/// TENANT_DELETE and TENANT_ROTATE_KEY answer (`Client::delete_tenant`,
/// `Client::rotate_tenant_key`).
pub use ctxstore_protocol::admin::{
    QuotasWire as TenantQuotas, TenantDeleted, TenantKeyRotated, TenantWire as Tenant,
    tenant_deleted_flags, tenant_flags, tenant_rights,
};
pub use ctxstore_protocol::admin::{RoleAnswer as Role, ServerRole};
/// Vector search (protocol version 6, decision 0033): the wire's structs as they are.
pub use ctxstore_protocol::vectors::{
    VectorEntryWire as VectorEntry, VectorHitWire as VectorHit, VectorHits,
    VectorIndexWire as VectorIndex,
};
pub use ctxstore_protocol::{ContextRef, ErrorCode, PageKind, ServerLimits, StatsWire};
/// `replication_stats`' answer: the wire's struct as it is (one definition, every field
/// documented there).
pub use ctxstore_protocol::{
    ReplicationRoleWire as ReplicationRole, ReplicationStateWire as ReplicationState,
    ReplicationStatsWire as ReplicationStats,
};
pub use ctxstore_protocol::{WATCH_FROM_NOW, WatchEventWire, WatchKindWire, WatchTargetWire};
pub use ctxstore_vocab::vectors::Metric;
pub use error::ClientError;
pub use types::{
    Appended, AppendedTurn, BackupReport, BlobHash, CODEC_NAMES, ChunkRef, ChunkedStored,
    ContextHead, ContextInfo, ContextListPage, ContextQuery, ContextRetention, Durability,
    FoundPage, GcReport, KvItem, KvValue, ListCursor, LogCursor, LogPage, NewContext, NewPayload,
    NewTurn, Opened, Page, Parent, Patched, Purged, Redacted, Stats, TURN_FLAG_SUMMARY, Turn,
    TurnInfo, TurnPage, VerifyPayloads, blob_hash_from_hex, codec_name, codec_tag,
};
