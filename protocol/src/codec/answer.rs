//! The largest answer a request may produce, in bytes on the wire: what a server reserves of
//! its memory budget before it runs the request (docs/architecture.md, the server's
//! `connection/budget.rs`). Each family's `answer_bytes_max` is built from these bounds; a
//! bound may be loose, never short.

use crate::message::{CONTEXT_HEAD_BYTES, MESSAGE_BYTES_MAX, TURN_WIRE_BYTES, read_flags};

/// The server's settings an answer's size depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerLimits {
    /// Largest payload the server stores (`--blob-bytes-max`).
    pub blob_bytes_max: u32,
    /// Most turns one read answers (`--read-turns-max`).
    pub read_turns_max: u32,
    /// Payload bytes one answer carries at most (`--response-bytes-max`).
    pub response_bytes_max: u64,
}

/// Any request may be answered by an ERROR: header, fields and the longest message.
pub const ERROR_ANSWER_BYTES_MAX: u64 = 16 + 16 + MESSAGE_BYTES_MAX as u64;

/// One turn of a TURNS answer, without its payload bytes.
pub(super) const TURN_ENTRY_BYTES: u64 = TURN_WIRE_BYTES as u64 + 16;

/// An acknowledgement, a head, a turn without its payload, fixed statistics.
pub(super) const FIXED_ANSWER_BYTES: u64 = TURN_ENTRY_BYTES + ERROR_ANSWER_BYTES_MAX;

/// The largest CONTEXT_INFO: a name and every tag at their limits.
pub(super) const CONTEXT_INFO_BYTES_MAX: u64 = {
    use ctxstore_vocab::limits;
    let tag = 4 + limits::TAG_KEY_BYTES_MAX + limits::TAG_VALUE_BYTES_MAX;
    (CONTEXT_HEAD_BYTES
        + 8
        + 8
        + 2
        + limits::CONTEXT_NAME_BYTES_MAX
        + 2
        + limits::TAGS_PER_CONTEXT_MAX * tag) as u64
};

/// One CONTEXT_INFO and the ERROR that may replace it.
pub(super) const CONTEXT_ANSWER_BYTES: u64 = CONTEXT_INFO_BYTES_MAX + ERROR_ANSWER_BYTES_MAX;

impl AnswerLimits {
    /// A page of at most `limit` turns, with payloads when `flags` ask for them (at most
    /// `response_bytes_max` of them).
    pub(super) fn page(&self, limit: u32, flags: u32) -> u64 {
        let payloads = if flags & read_flags::WITH_PAYLOADS != 0 {
            self.response_bytes_max
        } else {
            0
        };
        u64::from(limit) * TURN_ENTRY_BYTES + payloads + ERROR_ANSWER_BYTES_MAX
    }

    /// A payload by hash (GET_BLOB).
    pub(super) fn blob(&self) -> u64 {
        u64::from(self.blob_bytes_max) + ERROR_ANSWER_BYTES_MAX
    }

    /// The largest answer the limits allow (a turn or a value with its payload, pages of turns,
    /// of contexts, of keys): for answers whose size the request does not bound. Reads answer
    /// at once and give back the difference before the next frame is taken; this only makes
    /// them wait when the budget is nearly spent.
    pub(super) fn largest(&self) -> u64 {
        u64::from(self.blob_bytes_max).max(self.response_bytes_max)
            + u64::from(self.read_turns_max) * TURN_ENTRY_BYTES
            + CONTEXT_INFO_BYTES_MAX
            + ERROR_ANSWER_BYTES_MAX
    }
}
