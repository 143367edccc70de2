//! ctxstore's shared vocabulary (issue 30): what the engine, the protocol and the clients must
//! agree on, defined once. Each module is one concept:
//!
//! - `ids`: TurnID, ContextID, BlobHash (the one 32-byte hash type) and its hasher;
//! - `limits`: every limit a client must respect and the store enforces (names, tags,
//!   key-value entries, turn extras, pages and batches, chunks, tokens);
//! - `labels`: which labels are indexed store-wide;
//! - `le`: little-endian reading, bounds-checked: the one reader under every decoder (the
//!   wire, the disk, the object store);
//! - `payloads`: how a payload is shown to people (codec names, JSON / text / image /
//!   binary, a one-line preview), for the CLI's `tree` and the web console alike;
//! - `chunking`: how payloads are cut into chunks (FastCDC 2020) and the default sizes, so
//!   that chunks a client cuts dedup against the ones the server cuts;
//! - `vectors`: vector search's metrics, their scores and limits (decision 0033).
//!
//! It does no I/O and knows nothing of files or frames: the on-disk formats stay in the
//! engine, the wire formats in the protocol (both read through `le`).

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

pub mod chunking;
pub mod ids;
pub mod labels;
pub mod le;
pub mod limits;
pub mod payloads;
pub mod vectors;

pub use chunking::ChunkingConfig;
pub use ids::{BlobHash, BlobHashBuildHasher, ContextId, TurnId};
