//! Encoding and strict decoding of message bodies. Layouts in docs/protocol.md.
//!
//! Decoding never panics and never trusts a length: every field is bounds-checked, every
//! enum and flag word validated, reserved fields must be zero, and a body must end exactly
//! where its message ends. Payloads are zero-copy slices of the received frame.
//!
//! Layout, top down: `request.rs` and `response.rs` hold the entry points, each a short
//! dispatch on the message's `Family`. One module per family owns its messages' bodies both
//! ways (decode, check, encode; request and answer), so a message reads on one screen:
//! `admin`, `contexts`, `retention`, `kv`, `turns`, `agent_turns`, `overlays`, `blobs`. Under
//! them, `cursor.rs` reads fields, `writer.rs` writes them and `check.rs` checks what the wire
//! can carry.

mod admin;
mod agent_turns;
mod blobs;
mod check;
mod contexts;
mod cursor;
mod kv;
mod overlays;
mod request;
mod response;
mod retention;
mod turns;
mod writer;

pub use check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError};
pub use request::{
    check_request, decode_request, decode_request_as, encode_request, encode_request_chunks,
};
pub use response::{decode_response, encode_response};

use crate::message::MessageType;

/// The families of messages, one module each. Defined once, here: every entry point routes
/// with `Family::of` (`response_body` by variant), so a family's functions are given only its
/// own messages and their catch-all arms are never taken: decoding answers `UnknownMessage`
/// there rather than panic, checking has nothing to refuse, encoding is `unreachable!`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// HELLO, PING, STATS, STATS_EX, GC, BACKUP (`admin.rs`).
    Admin,
    /// CTX_CREATE, CTX_FORK, GET_HEAD, CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST, CTX_NAME.
    Contexts,
    /// CTX_DELETE, CTX_PRUNE, CTX_TTL.
    Retention,
    /// KV_PUT, KV_GET, KV_DELETE, KV_LIST.
    Kv,
    /// APPEND_TURN, APPEND_TURN_BY_HASH, GET_TURN, GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH,
    /// GET_CHAIN.
    Turns,
    /// APPEND_TURNS, GET_TURN_BY_KEY, TURN_LOG, READ_PAGE, FIND_TURNS.
    AgentTurns,
    /// PATCH_TURN, REDACT_TURN, PURGE_BLOB.
    Overlays,
    /// GET_BLOB, HAS_BLOBS, PUT_CHUNKED.
    Blobs,
}

impl Family {
    fn of(message_type: MessageType) -> Family {
        match message_type {
            MessageType::Hello
            | MessageType::Ping
            | MessageType::Stats
            | MessageType::StatsEx
            | MessageType::Gc
            | MessageType::Backup => Family::Admin,
            MessageType::CtxCreate
            | MessageType::CtxFork
            | MessageType::GetHead
            | MessageType::CtxOpen
            | MessageType::CtxShow
            | MessageType::CtxTag
            | MessageType::CtxList
            | MessageType::CtxName => Family::Contexts,
            MessageType::CtxDelete | MessageType::CtxPrune | MessageType::CtxTtl => {
                Family::Retention
            }
            MessageType::KvPut
            | MessageType::KvGet
            | MessageType::KvDelete
            | MessageType::KvList => Family::Kv,
            MessageType::AppendTurn
            | MessageType::AppendTurnByHash
            | MessageType::GetTurn
            | MessageType::GetLast
            | MessageType::GetBefore
            | MessageType::GetRangeByDepth
            | MessageType::GetChain => Family::Turns,
            MessageType::AppendTurns
            | MessageType::GetTurnByKey
            | MessageType::TurnLog
            | MessageType::ReadPage
            | MessageType::FindTurns => Family::AgentTurns,
            MessageType::PatchTurn | MessageType::RedactTurn | MessageType::PurgeBlob => {
                Family::Overlays
            }
            MessageType::GetBlob | MessageType::HasBlobs | MessageType::PutChunked => Family::Blobs,
        }
    }
}
