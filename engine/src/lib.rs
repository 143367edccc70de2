//! ctxstore-engine: the storage core of ctxstore. No sockets.
//!
//! Immutable turns in a parent-pointer DAG, contexts as head pointers, forks that copy
//! nothing, payloads in a content-addressed blob store (BLAKE3) that stores each distinct
//! payload once. Durable: an acknowledged write was fdatasync'ed, with one fsync per batch.
//!
//! Code map (details in docs/architecture.md):
//! - [`engine`]: the `Engine` handle; open, the append path, reads, shutdown.
//! - `blob`: blob shards (codec on the caller, actor writing packs, recovery, read view).
//! - `sequencer`: the one actor owning `turns.log`, TurnIDs and heads.
//! - `published`: state the actors publish for lock-free readers.
//! - `read`: chain walks over published state.
//! - [`format`]: every on-disk record, encoded and decoded in one place.
//! - [`verify`]: the offline invariant checker.

pub mod blob_codec {
    //! The compression policy, for clients that receive stored (possibly zstd) bodies.
    pub use crate::blob::codec::{DecodeError, decode};
}
mod blob;
pub mod config;
mod engine;
pub mod error;
#[cfg(test)]
mod faults;
mod file;
pub mod format;
pub mod ids;
pub mod model;
mod published;
mod read;
mod sequencer;
pub mod store_dir;
mod tail;
mod threads;
pub mod verify;

pub use config::{Actor, EngineConfig, Limits, OpenCheck, Placement, ThreadPlacement};
pub use engine::Engine;
pub use error::{Corruption, EngineError, ErrorKind, OpenError};
pub use format::pack::Compression;
pub use ids::{BlobHash, CodecTag, ContextId, TurnId, TypeTag};
pub use model::{
    AppendPayload, AppendRequest, Appended, ContextHead, StoreStats, StoredBlob, Turn, TurnPage,
    TurnWithPayload,
};
pub use published::CONTEXTS_MAX;
pub use verify::{VerifyReport, verify};
