//! ctxstore-client: talk to a ctxstore server.
//!
//! - [`Client`]: async, on tokio; pipelined (any number of concurrent calls on one
//!   connection, matched by req_id); cheap to clone.
//! - [`blocking::Client`]: the same API for code that is not async.
//! - Payloads are verified against their BLAKE3 hashes; with `accept_zstd` (default) the server
//!   may ship stored zstd bodies (those too large for its payload cache) and the client
//!   inflates them.
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

pub mod blocking;
mod client;
mod error;
mod types;

pub use client::{Client, ClientConfig};
pub use ctxstore_protocol::{ErrorCode, ServerLimits, StatsWire};
pub use error::ClientError;
pub use types::{Appended, BlobHash, CODEC_NAMES, ContextHead, Page, Turn, codec_name, codec_tag};
