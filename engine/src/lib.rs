//! ctxstore-engine: the storage core of ctxstore. No sockets.
//!
//! Immutable turns in a parent-pointer DAG, contexts as head pointers, forks that copy
//! nothing, payloads in a content-addressed blob store (BLAKE3) that stores each distinct
//! payload once. Durable: an acknowledged write was fdatasync'ed, with one fsync per batch.
//!
//! Code map (details in docs/architecture.md, whose engine table `tests/code_map.rs` checks
//! against the imports), in the order imports flow (no module imports one below it):
//! - `ids`, [`format`] (every on-disk record, encoded and decoded in one place), then the
//!   vocabulary `model`, `error`, `config`; `file`: the only place bytes reach or leave the disk.
//! - the actors' state types (`sequencer::{heads, dead, overlays, contexts, owners, log_base}`,
//!   `blob::condemned`), then `sequencer::view`, `blob::view`, `status`, aggregated by
//!   `published`: what the actors publish for lock-free readers.
//! - `pipeline`: the messages of the append route; `group_commit`: the loop every actor runs.
//! - `sequencer`: the one actor owning `turns.log`, TurnIDs and heads (`heads`: the DAG rule).
//! - `blob`: blob shards (codec on the caller, actor writing packs, recovery, read view).
//! - `chunks`: chunked blobs (cut, manifests, reads rebuilding a payload); `read`: page reads
//!   over published state; `gc` and `log_compaction`: garbage collection.
//! - [`engine`]: the `Engine` handle (open, the caller's step of an append, reads, shutdown)
//!   and its methods by concern in `engine/`: `backup`, `chunked` (the chunked write),
//!   `contexts`, `overlays` (patch, redact, purge), `retention` (delete, prune, TTL, the
//!   reaper), `turns`.
//! - [`verify`]: the offline invariant checker.
//! - [`metrics`]: single-writer histograms and counters for monitoring; the actors' group
//!   commit figures are recorded in `file` (`append_durably`).

mod blob;
pub mod chunks;
pub mod config;
mod engine;
pub mod error;
#[cfg(test)]
mod faults;
mod file;
pub mod format;
mod gc;
mod group_commit;
/// The shared vocabulary's identifiers (`ctxstore-vocab`), under the engine's own path.
pub use ctxstore_vocab::ids;
mod log_compaction;
pub mod metrics;
pub mod model;
mod pipeline;
mod published;
mod read;
pub mod reserve;
mod sequencer;
mod skip;
mod status;
pub mod store_dir;
mod tail;
mod threads;
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
    backup, contexts, cut, follow, id_floors, overlays, retention, streams, turns, watch,
};
pub use error::{Corruption, EngineError, ErrorKind, OpenError};
pub use format::manifest::ChunkRef;
pub use format::pack::Compression;
pub use ids::CONTEXTS_MAX;
pub use ids::{BlobHash, CodecTag, ContextId, TurnId, TypeTag};
pub use model::{
    AppendPayload, AppendRequest, Appended, ContextHead, ContextRef, ContextView, Created,
    GcReport, IngestedLog, IngestedPack, NewContext, NoPayloadCache, Overlaid, Page, PageEntry,
    PageOptions, PageQuery, Parent, Payload, PayloadCache, PayloadMode, Purged, StoreStats,
    StoredBlob, Turn, TurnOptions, TurnPage, TurnWithPayload,
};
pub use sequencer::overlays::OVERLAYS_PER_TURN_MAX;
pub use verify::{VerifyReport, verify};
