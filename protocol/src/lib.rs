//! ctxstore-protocol: the binary protocol of ctxstore, byte for byte as in docs/protocol.md.
//! No I/O and no runtime: the server and the clients bring their own.
//!
//! - [`frame`]: the 16-byte frame header and an incremental frame reader with a size limit.
//! - [`message`]: the message types, flags, limits and the wire structs messages share.
//! - [`codec`]: a message family is a type (`Request::Reads(ReadsRequest::GetLast(..))`),
//!   owned end to end by one module: a struct per request and per answer (`reads::GetLast`,
//!   `reads::Turns`), their encoding and strict decoding (no panics on any input), and the
//!   largest answer each request may produce. `Ask` ties each request to its answer.
//! - [`error`]: the stable error codes of the ERROR message, and decoding errors.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

pub mod codec;
pub mod error;
pub mod frame;
pub mod message;

pub use codec::{
    AdminRequest, AdminResponse, AnswerLimits, AppendsRequest, AppendsResponse, Ask, BlobsRequest,
    BlobsResponse, ContextsRequest, ContextsResponse, ERROR_ANSWER_BYTES_MAX, EncodeError,
    KvRequest, KvResponse, OverlaysRequest, OverlaysResponse, ReadsRequest, ReadsResponse, Request,
    Response, RetentionRequest, RetentionResponse, StreamInfoWire, StreamStateWire, StreamsRequest,
    StreamsResponse, VectorsRequest, VectorsResponse, WATCH_FROM_NOW, WatchEventWire,
    WatchKindWire, WatchTargetWire, admin, appends, blobs, check_request, contexts, decode_request,
    decode_request_as, decode_response, encode_request, encode_request_chunks, encode_response, kv,
    overlays, reads, retention, streams, vectors,
};
pub use error::{DecodeError, ErrorCode};
pub use frame::{FrameError, FrameHeader, FrameReader, HEADER_BYTES};
pub use message::*;

/// The newest protocol version this crate speaks. HELLO negotiates the highest version both
/// sides speak.
pub const PROTOCOL_VERSION: u16 = 7;
/// The first version whose APPEND_TURNS may carry a payload the client compressed
/// (`PayloadSpec::Zstd`, TURN_SPEC flag `ZSTD`, issue 38).
pub const ZSTD_PAYLOADS_SINCE_VERSION: u16 = 3;
/// The first version whose writes may carry the frame flag `ACK_AFTER` (decision 0031): a
/// connection of an older one refuses it as a bad frame.
pub const ACK_AFTER_SINCE_VERSION: u16 = 4;
/// The oldest protocol version this crate still speaks (byte for byte).
pub const PROTOCOL_VERSION_MIN: u16 = 1;
