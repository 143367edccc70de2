//! ctxstore-engine: the storage core of ctxstore. No sockets.
//!
//! Immutable turns in a parent-pointer DAG, contexts as head pointers, forks that copy
//! nothing, payloads in a content-addressed blob store (BLAKE3) that stores each distinct
//! payload once. Durable: an acknowledged write was fdatasync'ed, with one fsync per batch.
//! The engine's place among the crates: docs/architecture.md.
//!
//! # Code map
//!
//! Imports flow one way, top to bottom of this table: a module uses only modules in its own
//! row or listed above it (formats → vocabulary → file layer → the sequencer's and shards'
//! state types → views → pipeline and actors → reads and garbage collection → `Engine`). The
//! identifiers (`crate::ids`) are `ctxstore-vocab`'s, under the engine's own path. The files
//! under `engine/` are `impl Engine` blocks, the Engine's own methods split by concern, so
//! they may name `engine.rs`, their parent; likewise `sequencer/actor/` for the sequencer
//! actor. A row names what a module owns in a line or two; the detail is in each module's
//! `//!` header. `tests/code_map.rs` reads this table and fails when a module is missing
//! from it or imports one listed below it (reorder the table only when the code's layering
//! really changes).
//!
//! | module | owns | must not | invariants |
//! |---|---|---|---|
//! | `format/` | every on-disk record, one module per file type: encode, decode, size, checksum (`stream_meta.rs`: stream records, ops 12–14) | do I/O | decoding never panics |
//! | `seal.rs` | sealing per tenant (decision 0032): the master key, the keyring unwrapped, XChaCha20-Poly1305 seals with random nonces, blob addresses (a keyed permutation of the client's hash; `Addressing`: a handle's hashes ↔ addresses, keys derived from the TenantId without a master key) | do I/O; print a key | a seal opens only under its key and associated data; a key is wiped when dropped |
//! | `quota.rs` | quotas (decision 0032 §3): `Quota` and its names, `QuotaExceeded`, `TenantQuotas`, the `QuotaTable` of limits by tenant name the server sets and the sequencer and shards read, and the bytes shards reserved but not yet published | count published usage (the writers' own state does: the sequencer's contexts and streams, each shard's bytes per tenant) | a context or stream check and its write are one step of the sequencer; a byte reservation is one compare-and-swap against every shard's bytes plus every reservation |
//! | `model.rs`, `error.rs`, `config.rs` | the API's types (`Scope`: whose data a handle sees), `EngineError` and its stable `ErrorKind`, `EngineConfig`/`Limits`/`Placement` | do I/O | `validate()` holds before open |
//! | `tail.rs` | the verdict on a file's end: clean, prepared space, torn, damaged | — | — |
//! | `clock.rs` | `boot_now_ns`: `CLOCK_BOOTTIME`, the one clock of every deadline (decision 0031 §5; the replica and the server read it too) | read the wall clock or `Instant` for a deadline | counts suspended time; never jumps with the wall clock |
//! | `status.rs` | `StoreStatus`: read-only once any fdatasync failed; a standby's and a fenced primary's refusals; the ack gate (`AckGate`: `lease_until`, `shipped_until`, decision 0031 §6); what the replica holds of the ids (`ShippedIds`, the base of the bound on unshipped ids) | — | never reset until restart, but the gate, which opens again on a later deadline |
//! | `metrics.rs` | single-writer histograms and counters, `ActorMetrics`, the snapshots `Engine::actor_metrics` returns | be written by two threads | a snapshot's count is the sum of its buckets |
//! | `faults.rs` | test-only fault injection read by `file/` (`cfg(test)`, and the `fault-injection` feature the replica's tests turn on): the tests of READ_ONLY, NO_SPACE, the overlapped fsync and a failed primary's step-down | exist in release builds; cost a build with no rule set more than one atomic load | — |
//! | `file/` | the file layer: every byte the engine writes reaches the disk here — `ActorFile`, `BackgroundWriter` and `Throttle`, durable namespace operations, shared files (decision 0017), `ReadFile`; `disk.rs`, the seam: one function per system call, observed by the simulated disk (`sim.rs`, `simulated-disk` feature, tests only; decision 0026); `api.rs`, the same calls for other crates (`ctxstore_engine::files`: the replica) | decide what to write | no other module calls a write operation (`code_map.rs`); inside `file/` only `disk.rs` calls the system to change the disk (`power_loss.rs`); no store changes a byte another name reads |
//! | `store_dir.rs` | `StoreDir`: file names and paths, the LOCK (`DirLock`: unlocked before it closes, so a child process forked meanwhile cannot keep it), the meta file | decide what a file holds | — |
//! | `keys.rs` | `StoreKeys`, the store's keys at run time (decision 0032 §4–§5): `DIR/keyring` opened under the master key (a wrong one refused by its check), the snapshot writers seal with and readers open with, a tenant's keys given and the keyring rewritten durably | seal or open a body itself (`seal.rs`) | a key is durable in the keyring before anything is sealed under it; a store with a keyring never opens without its master key |
//! | `reserve.rs` | `DiskReserve`: disk kept for garbage collection alone (issue 29) | hold data | never read; never copied by a backup |
//! | `skip.rs` | skip pointers: `skip_depth`, `ancestor`, `skip_of_child`, `Ancestry` | do I/O | a skip target sits at exactly `skip_depth(depth)` on the turn's chain |
//! | `sequencer/heads.rs` | `Heads` and the DAG rule, for the live path and replay | — | parent = head at append, depth = parent + 1 (root 0) |
//! | `sequencer/dead.rs` | `DeadTurns`: what garbage collection collected, a bitmap by TurnID | — | a dead turn stays dead |
//! | `sequencer/overlays.rs` | `Overlays` (decision 0012): patches, redactions, purged blobs; a turn's view | do I/O | a redaction is last and holds in every view |
//! | `sequencer/tenants.rs` | `Tenants` (decision 0032): tenant names ↔ TenantIds, as the tenant records (op 20) build it; published with the contexts | do I/O | ids dense from 1 in log order, never given twice; a name registered once |
//! | `sequencer/vector_owners.rs` | `VectorOwners` (decision 0033 §4): which entries hold each vectors blob of each index, the graph's changes of the batch being built, the recent additions a graph may lack; graph labels from addresses | do I/O | agrees with its snapshot's entries (kept at the one choke point, `VectorIndexes::reindex`); an address's first owner adds it to the graph, its last removes it |
//! | `sequencer/vector_indexes.rs` | `VectorIndexes` (decision 0033): each tenant's vector indexes as the index records (ops 23, 24) build them, and their live vectors; published with the contexts | do I/O | ids per tenant dense from 1 in log order, never given twice; an entry's vectors name a live index when written |
//! | `sequencer/contexts.rs` | `Contexts`: each context's tenant, names, tags, key-value entries (with their TTLs and the expiry index), inheritance, the indexes, turn keys | do I/O | names unique; ≤ 32 tags; turn keys unique per context; every entry with an expiry is in the expiry index, and only those |
//! | `sequencer/streams.rs` | `Streams` (issue 32): open streams (a turn in the making: its open's options, its bytes) and the ended ones kept; `StreamsView`, the snapshot readers read and wait on (a wake slot per stream id modulo 1,024: a batch wakes the readers of the streams it wrote) | do I/O | a delta continues its stream exactly at its length; an ended stream never reopens; one whose records a compaction dropped is unknown, before a restart as after |
//! | `sequencer/watch.rs` | `WatchLog` (issue 32): the bounded log of events watchers read, sequence numbers = record ids; `WatchView` | do I/O | events in record order; a watcher older than the log is told it lagged |
//! | `sequencer/owners.rs` | which turns a context owns: `walk_owners`, `owns`, `turn_by_key`, `on_chain` | do I/O itself | one set of ownership rules |
//! | `sequencer/log_base.rs` | `LogBase`: `turns.base`, the compacted prefix of the log, at run time | write it (`log_compaction.rs` does) | immutable once renamed in |
//! | `blob/condemned.rs` | `Condemned`: one round's condemned blobs, each move a compare-and-set | — | a named blob is never swept; a swept one is never named |
//! | `sequencer/view.rs` | what readers see of the sequencer: `TurnsView` and its caches, `HeadTable`, `ContextsView` | be written by anyone but the sequencer | published after fdatasync (release/acquire) |
//! | `blob/codec.rs` | compression policy, a client's zstd frame checked and kept (`encode_compressed`, decision 0029), a tenant's record at its address (`Owner`), decode and the BLAKE3 check against the address its header's tenant gives | — | runs on the caller's thread |
//! | `blob/view.rs` | what readers see of a shard: `ShardView`, its index and pack read handles | write packs | an index entry exists only for a durable record |
//! | `vector_graph.rs` | `VectorGraphs` (decision 0033 §4): each index's HNSW graph (usearch) as searches see it, the writer's watermark (`applied_seq`), the sequencer's feed to it | decide what a search answers (owners and the snapshot do) | one writer; searches share it, its growth alone takes the lock exclusively |
//! | `published.rs` | `Published`: the aggregate of the views and the status | own anything itself | — |
//! | `pipeline.rs` | the append route, drawn in its doc; every message and reply between caller, shards and sequencer | hold state | a turn naming a pending blob is answered only after its `BlobsDurable` notice |
//! | `group_commit.rs` | the one loop every actor runs, and the `GroupCommit` trait | know any record format | one fdatasync per batch; answers after commit |
//! | `sequencer/scan.rs`, `sequencer/recover.rs` | reading the base and `turns.log` at open and for verify; the unacknowledged tail cut | — | damage is never cut silently |
//! | `sequencer/migrate.rs` | store format 1 → 2 at open | run on a log recovery has not made whole | idempotent |
//! | `sequencer/actor.rs`, `sequencer/actor/` | the sequencer: the batch's mechanics; each request kind's rules in `actor/` | touch blobs | linearizable TurnIDs; a failed batch is rolled back and answered with the error; a batch durable once the ack gate closed is answered `Unconfirmed` (checked once per batch, before the answers) |
//! | `blob/scan.rs`, `blob/recover.rs` | reading a shard's files at open and for verify; cutting torn tails | — | damage is never cut silently (only with `repair`) |
//! | `blob/shard.rs`, `blob/shard/ingest.rs` | the shard actor: dedup, pack batches, handing appends on, rotation, GC's steps; a standby's pack bytes checked and written (`ingest.rs`) | import `sequencer/` | a put's blobs share one batch; an index entry only for a synced record |
//! | `threads.rs` | engine threads: a compio runtime per `ThreadPlacement`, its actors | — | an actor that panics aborts the process |
//! | `chunks.rs` | chunked blobs (decision 0013): manifests read and resolved, `read_payload`, what GC keeps | write files | a manifest is trusted only once checked against its chunks |
//! | `vector_graph/snapshot.rs` | graph snapshots: save (sealed under the tenant's key when the store seals; temporary file, rename), load with every check, remove stale ones | trust a snapshot that fails a check | a snapshot's held list is exactly what its graph holds |
//! | `vector_graph/writer.rs` | the graph writer thread: builds the graphs from the recovered owners at open, applies each fed batch in order; a graph churned past a quarter is built anew on a rebuild thread, caught up with what the writer applied meanwhile and swapped in | write files | `applied_seq` = the last batch every graph holds; a rebuilt graph is published only once it holds what the writer holds |
//! | `read.rs` | every read: the tip, the walk, depth windows, page assembly, payloads | ask actors | every walked link checked |
//! | `vector_search.rs` | the exact vector search's parts (decision 0033 §3): `VectorCache` (decoded vectors blobs by address, bounded by bytes), an entry's best score, the ranking | read or write files | ranks are total: best first, equal scores in key order |
//! | `log_compaction.rs` | the round's last step: `turns.base` written, renamed in, published, the log punched | decide what goes (`gc/plan_log.rs`) | the base is durable and checked before any slot leaves the log |
//! | `gc/` | the garbage collector (decision 0011), one file per phase of a round; pins, the scheduler | remove anything itself | nothing is swept before the round's gc-dead records are durable |
//! | `engine/append.rs` | the caller's side of every write that stores blobs: one route (`BlobPlan`) | write files | an append waits for one overlapped fsync |
//! | `engine/cut.rs` | `Engine::hold_cut`: the store's consistent cut, held while a tool reads the files it names (the replicator, issue 31) | write files | no collection replaces a file while a cut is held (backups and cuts share the maintenance lock; a round holds it alone only for a switch-over) |
//! | `engine/id_floors.rs` | ids unique across replica generations (issue 46 item 8): `raise_id_floors` (a new generation's TurnIDs start past a `turns.base` that stands for the slots below the floor, `Collector::raise_record_floor`; ContextIDs past one `SkipContexts` record, `sequencer/actor/floors.rs`), `set_shipped_ids` (the bound a primary keeps past its replica's newest point, checked by the sequencer's `check_takes_ids`) | write files itself | floors only rise; raised only while the store takes no writes |
//! | `engine/follow.rs` | a standby's side (issue 31): `ingest_pack` (a shard's `Ingest`) then `ingest_log` (the sequencer's `Ingest`, `sequencer/actor/ingest.rs`: slots written, replayed with `Replay::resume`, published as one batch), then `install_pack` (a pack the primary's collection rewrote, installed by its shard as a compaction is), `promote`, the READ_ONLY reason naming the primary; a primary's role: `fence`, the ack gate's API (`set_lease_until`, `set_shipped_until`, `close_gate`, `gate_open`, `check_acks_open`, `ack_open_ms_left`) | write files itself | pack bytes are published before the slots naming them; a rewritten pack is installed after them |
//! | `engine/backup.rs` | online backup: the consistent cut, prefix copies, the meta file last | write the store's own files | every turn of the copy names a blob inside the copy |
//! | `engine/chunked.rs` | the caller's side of a chunked write: base choice, `plan_manifest`, `put_chunked` | write files | a manifest is written only after each chunk it names is durable |
//! | `engine/streams.rs` | streams, the caller's side (decision 0027): open, deltas, the seal (bytes stored as one blob, then turn and end record in one batch), abort, reads and waits, the reaper's idle aborts | write records itself | a seal's turn holds exactly the stream's acknowledged bytes |
//! | `engine/watch.rs` | watches, the caller's side: a context, a name prefix or a tag, after a sequence number, at once or waited for | ask the sequencer | — |
//! | `engine/contexts.rs` | contexts as agent threads, the caller's side | ask the sequencer for a read | — |
//! | `engine/overlays.rs` | patch, redact, purge (decision 0012), the caller's side | write records itself | a patch's blob is durable before its record |
//! | `engine/retention.rs` | delete, prune, TTL, and the `Reaper` thread (idle contexts; expired key-value entries, decision 0028) | decide a floor, a delete or an expiry itself | an expiry is a delete record like any other; a key-value expiry is a compare-and-delete the sequencer checks |
//! | `engine/tenants.rs` | tenants, the caller's side: `register_tenant` (a name's TenantId, the sequencer's record), `tenant_by_name`, `tenants` | ask the sequencer for a read | — |
//! | `engine/turns.rs` | turns for agent frameworks, reads only: extras, keys, the turn log, the window | ask the sequencer | — |
//! | `engine/vectors.rs` | vector search, the caller's side (decision 0033): index create, drop, list (the sequencer's records); `kv_put_vectors` (a vectors blob beside each value); `vector_search` over one snapshot | ask the sequencer for a read | a search answers only what a read of its snapshot would |
//! | `engine/vector_walk.rs` | a search's plan (the graph past `vector_exact_max` candidates) and its filtered walk: labels → owners → the snapshot's live entries, scored exactly; the additions the graph lacks scanned | trust the graph for liveness | answers exactly k when k + offset pass (widens, then falls back to exact) |
//! | `engine/turn_vectors.rs` | vectors on turns (decision 0033): an append's vectors stored as a blob before the turn; `vector_search_turns` over the chains of one context, a name prefix or tags (labels, type), exact at few candidates, the graph past them | trust the graph for liveness, read a turn below its context's floor | answers only turns a read of the named contexts returns; exactly k when k + offset pass |
//! | `engine/open.rs` | `Engine::open`: recover → publish → start actors → start background work | — | a failed step stops what the steps before it started |
//! | `engine.rs` | `Engine`: the handle and its scope (`scoped`, decision 0032), reads, stats, shutdown | write files (actors do) | an append is answered only after its blobs and turn records are durable |
//! | `verify.rs` | the offline checker: checksums, every blob's hash, the DAG, skip pointers | write | — |

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

mod blob;
pub mod chunks;
pub mod clock;
pub mod config;
mod engine;
pub mod error;
#[cfg(any(test, feature = "fault-injection"))]
pub mod faults;
mod file;
pub mod format;
mod gc;
mod group_commit;
mod keys;
/// The shared vocabulary's identifiers (`ctxstore-vocab`), under the engine's own path.
pub use ctxstore_vocab::ids;
mod log_compaction;
pub mod metrics;
pub mod model;
mod pipeline;
mod published;
pub mod quota;
mod read;
pub mod reserve;
pub mod seal;
mod sequencer;
mod skip;
mod status;
pub mod store_dir;
mod tail;
mod threads;
mod vector_graph;
mod vector_search;
pub mod verify;

pub use config::{
    Actor, ChunkingConfig, EngineConfig, Limits, OpenCheck, Placement, ThreadPlacement,
};
pub use engine::Engine;
/// The file layer's calls for crates that write beside the engine (the replica), through the
/// same disk seam as the engine's own writes (decision 0026).
pub use file::api as files;
/// The simulated disk under the file layer (decision 0026), for tests only.
#[cfg(feature = "simulated-disk")]
pub use file::sim as simulated_disk;
// The Engine's methods by concern, with their public types (`contexts::ListQuery`, …).
pub use engine::{
    backup, contexts, cut, follow, id_floors, overlays, retention, streams, tenants, turn_vectors,
    turns, vectors, watch,
};
pub use error::{Corruption, EngineError, ErrorKind, OpenError};
pub use format::manifest::ChunkRef;
pub use format::pack::Compression;
pub use ids::CONTEXTS_MAX;
pub use ids::{BlobHash, CodecTag, ContextId, TenantId, TurnId, TypeTag};
pub use model::{
    AppendPayload, AppendRequest, Appended, ContextHead, ContextRef, ContextView, Created,
    GcReport, IngestedLog, IngestedPack, NewContext, NoPayloadCache, Overlaid, Page, PageEntry,
    PageOptions, PageQuery, Parent, Payload, PayloadCache, PayloadMode, Purged, Scope, StoreStats,
    StoredBlob, Turn, TurnOptions, TurnPage, TurnVectors, TurnWithPayload,
};
pub use sequencer::overlays::OVERLAYS_PER_TURN_MAX;
pub use verify::{VerifyReport, verify, verify_sealed};
