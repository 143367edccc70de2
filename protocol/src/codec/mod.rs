//! Encoding and strict decoding of message bodies. Layouts in docs/protocol.md.
//!
//! Decoding never panics and never trusts a length: every field is bounds-checked, every
//! enum and flag word validated, reserved fields must be zero, and a body must end exactly
//! where its message ends. Payloads are zero-copy slices of the received frame.
//!
//! Layout, top down: a message family is a type, owned end to end by one module here: its
//! requests and answers as Rust values (`AdminRequest`, `AdminResponse`, …), read, checked
//! and written side by side, and the largest answer each request may produce
//! (`answer_bytes_max`): `admin`, `contexts`, `retention`, `kv`, `appends`, `reads`,
//! `overlays`, `blobs`, `streams`, `vectors`. `request.rs` and `response.rs` hold `Request` and `Response` (a
//! variant per family) and the entry points, each one match over the families; `Family::of`
//! below is the one table from a message type to its family. Under them, `cursor.rs` reads
//! fields, `writer.rs` writes them, `check.rs` checks what the wire can carry and `answer.rs`
//! holds the bounds answers are built from.

use crate::message::MessageType;

pub mod admin;
mod answer;
pub mod appends;
pub mod blobs;
mod check;
pub mod contexts;
mod cursor;
pub mod kv;
pub mod overlays;
pub mod reads;
mod request;
mod response;
pub mod retention;
pub mod streams;
pub mod vectors;
mod writer;

pub use admin::{AdminRequest, AdminResponse};
pub use answer::{AnswerLimits, ERROR_ANSWER_BYTES_MAX};
pub use appends::{AppendsRequest, AppendsResponse};
pub use blobs::{BlobsRequest, BlobsResponse};
pub use check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError};
pub use contexts::{ContextsRequest, ContextsResponse};
pub use kv::{KvRequest, KvResponse};
pub use overlays::{OverlaysRequest, OverlaysResponse};
pub use reads::{ReadsRequest, ReadsResponse};
pub use request::{
    Request, check_request, decode_request, decode_request_as, encode_request,
    encode_request_chunks,
};
pub use response::{Response, decode_response, encode_response};
pub use retention::{RetentionRequest, RetentionResponse};
pub use streams::{
    STREAM_DELTA_BYTES_MAX, STREAM_INFO_BYTES, STREAM_LIST_MAX, STREAM_WAIT_MS_MAX, StreamInfoWire,
    StreamStateWire, StreamsRequest, StreamsResponse, WATCH_EVENT_BYTES, WATCH_EVENTS_MAX,
    WATCH_FROM_NOW, WatchEventWire, WatchKindWire, WatchTargetWire, stream_append_flags,
    stream_open_flags,
};
pub use vectors::{VectorsRequest, VectorsResponse};

/// Which family owns a message type, and which of its messages it is. `Family::of` comes from
/// the message table (message.rs): every decoder routes with it, and a family's decoders match
/// exhaustively on its own kinds, so no module is ever handed another family's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// HELLO, PING, STATS, STATS_EX, GC, BACKUP; REPLICATION_STATS (version 3); ROLE
    /// (version 4).
    Admin(admin::Kind),
    /// CTX_CREATE, CTX_FORK, GET_HEAD, CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST, CTX_NAME.
    Contexts(contexts::Kind),
    /// CTX_DELETE, CTX_PRUNE, CTX_TTL.
    Retention(retention::Kind),
    /// KV_PUT, KV_GET, KV_DELETE, KV_LIST; KV_PUT_EX, KV_GET_EX, KV_LIST_EX, KV_TOUCH.
    Kv(kv::Kind),
    /// APPEND_TURN, APPEND_TURN_BY_HASH, APPEND_TURNS.
    Appends(appends::Kind),
    /// GET_TURN, GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH, GET_CHAIN, GET_TURN_BY_KEY,
    /// TURN_LOG, READ_PAGE, FIND_TURNS: every message that answers TURNs, and so every
    /// message an overlay view applies to (`MessageType::takes_overlays`).
    Reads(reads::Kind),
    /// PATCH_TURN, REDACT_TURN, PURGE_BLOB.
    Overlays(overlays::Kind),
    /// GET_BLOB, HAS_BLOBS, PUT_CHUNKED.
    Blobs(blobs::Kind),
    /// STREAM_OPEN, STREAM_APPEND, STREAM_SEAL, STREAM_ABORT, STREAM_LIST, STREAM_READ,
    /// WATCH, STREAM_FOLLOW (version 3).
    Streams(streams::Kind),
    /// VECTOR_INDEX_CREATE, VECTOR_INDEX_DROP, VECTOR_INDEX_LIST, VECTOR_SEARCH,
    /// KV_PUT_VECTORS (version 6).
    Vectors(vectors::Kind),
}

/// A family's request type: it converts into a `Request`, and the answers its requests get are
/// its family's answer type, taken out of a `Response` (`Err` gives back any other response,
/// an ERROR included). Lets a client send a family's request and get its family's answer.
/// A request of one message type and the answer it gets, from the message table's answer
/// column (`message_table!` writes every impl). `answer` is the one place a response of the
/// wrong message is told apart: it hands the response back.
pub trait Ask: Into<Request> {
    const MESSAGE_TYPE: MessageType;
    type Answer;

    /// The answer this request gets, or the response back when it holds another message's
    /// answer. Answers several messages share (`reads::Turns`) say their message type; the
    /// caller compares it with `MESSAGE_TYPE` (`Response::msg_type`).
    fn answer(response: Response) -> Result<Self::Answer, Response>;

    /// The response that carries this request's answer (the server's side of `answer`).
    fn respond(answer: Self::Answer) -> Response;
}

/// The conversions between each family's types and `Request`/`Response`, one line a family.
macro_rules! family_conversions {
    ($($family:ident: $request:ident => $answer:ident;)*) => {$(
        impl From<$request> for Request {
            fn from(request: $request) -> Request {
                Request::$family(request)
            }
        }

        impl From<$answer> for Response {
            fn from(answer: $answer) -> Response {
                Response::$family(answer)
            }
        }

        impl TryFrom<Response> for $answer {
            type Error = Response;

            fn try_from(response: Response) -> Result<$answer, Response> {
                match response {
                    Response::$family(answer) => Ok(answer),
                    other => Err(other),
                }
            }
        }
    )*};
}

family_conversions! {
    Admin: AdminRequest => AdminResponse;
    Contexts: ContextsRequest => ContextsResponse;
    Retention: RetentionRequest => RetentionResponse;
    Kv: KvRequest => KvResponse;
    Appends: AppendsRequest => AppendsResponse;
    Reads: ReadsRequest => ReadsResponse;
    Overlays: OverlaysRequest => OverlaysResponse;
    Blobs: BlobsRequest => BlobsResponse;
    Streams: StreamsRequest => StreamsResponse;
    Vectors: VectorsRequest => VectorsResponse;
}
