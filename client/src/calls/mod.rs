//! The client's typed calls, one file per message family as the protocol groups them
//! (`admin`, `contexts`, `retention`, `kv`, `appends`, `reads`, `overlays`, `blobs`,
//! `streams`, `vectors`), each an
//! `impl Client` block whose calls build their family's request, send it with `Client::call`
//! and turn its family's answer into the types the client hands out (`types.rs`). The
//! transport under them is `client.rs`.

mod admin;
mod appends;
mod blobs;
mod contexts;
mod kv;
mod overlays;
mod reads;
mod retention;
mod streams;
mod vectors;

pub use streams::{
    NewStream, STREAM_READER_BYTES_MAX, STREAM_READER_WAIT, StreamChunk, StreamFollow, StreamInfo,
    StreamReader, StreamState, Watched,
};
pub use vectors::{TurnHit, TurnHits, TurnVectorQuery, VectorQuery};
