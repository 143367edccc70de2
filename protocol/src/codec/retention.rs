//! CTX_DELETE, CTX_PRUNE and CTX_TTL (version 2, issue 15): what a context keeps. Each answers
//! the context's CONTEXT_INFO with its floor depth and time to live. Layouts in
//! docs/protocol.md.

use super::answer::{AnswerLimits, CONTEXT_ANSWER_BYTES};
use super::check::{EncodeError, context, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// The retention messages (`Family::of` in codec/mod.rs maps message types to them).
// Named as the message types they stand for (`MessageType`), prefix included.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    CtxDelete,
    CtxPrune,
    CtxTtl,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetentionRequest {
    CtxDelete(CtxDelete),
    CtxPrune(CtxPrune),
    CtxTtl(CtxTtl),
}

/// Deletes a context (issue 15): NOT_FOUND for it from then on; its name is free again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxDelete {
    pub context: ContextRef,
}

/// Keeps the newest `keep` (≥ 1) depths of the context's chain reachable through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxPrune {
    pub context: ContextRef,
    pub keep: u32,
}

/// With `set`, sets the context's time to live (`ttl_ms`; 0: none); without, reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxTtl {
    pub context: ContextRef,
    pub set: bool,
    pub ttl_ms: u64,
}

/// Answer to CTX_DELETE (the context just before), CTX_PRUNE and CTX_TTL (after): the
/// context with its retention settings (the type says which request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetentionResponse {
    Retention(Retention),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    pub message_type: MessageType,
    pub info: ContextInfoWire,
    pub floor_depth: u32,
    pub ttl_ms: u64,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = RetentionRequest;
pub type Answers = RetentionResponse;

impl RetentionRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            RetentionRequest::CtxDelete(CtxDelete { .. }) => MessageType::CtxDelete,
            RetentionRequest::CtxPrune(CtxPrune { .. }) => MessageType::CtxPrune,
            RetentionRequest::CtxTtl(CtxTtl { .. }) => MessageType::CtxTtl,
        }
    }

    /// The largest answer (see `codec/answer.rs`): one CONTEXT_INFO and its settings.
    pub fn answer_bytes_max(&self, _limits: &AnswerLimits) -> u64 {
        CONTEXT_ANSWER_BYTES
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<RetentionRequest, DecodeError> {
        Ok(match kind {
            Kind::CtxDelete => RetentionRequest::CtxDelete(CtxDelete {
                context: cursor.context_ref()?,
            }),
            Kind::CtxPrune => RetentionRequest::CtxPrune(CtxPrune {
                context: cursor.context_ref()?,
                keep: cursor.u32()?,
            }),
            Kind::CtxTtl => {
                let context = cursor.context_ref()?;
                let set = match cursor.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(cursor.invalid("ttl_flags", "reserved bits set")),
                };
                let ttl_ms = cursor.u64()?;
                if !set && ttl_ms != 0 {
                    return Err(cursor.invalid("ttl_ms", "not 0 without the SET flag"));
                }
                RetentionRequest::CtxTtl(CtxTtl {
                    context,
                    set,
                    ttl_ms,
                })
            }
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            RetentionRequest::CtxDelete(CtxDelete { context: target })
            | RetentionRequest::CtxPrune(CtxPrune {
                context: target, ..
            }) => context(target),
            RetentionRequest::CtxTtl(CtxTtl {
                context: target,
                set,
                ttl_ms,
            }) => {
                context(target)?;
                // Without SET the request only reads: a value there would be a caller's mistake.
                let max = if *set { u64::MAX } else { 0 };
                let ttl_ms = usize::try_from(*ttl_ms).unwrap_or(usize::MAX);
                within("ttl_ms (0 without the SET flag)", ttl_ms, 0, max, "ms")
            }
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            RetentionRequest::CtxDelete(CtxDelete { context }) => w.context_ref(context),
            RetentionRequest::CtxPrune(CtxPrune { context, keep }) => {
                w.context_ref(context);
                w.u32(*keep);
            }
            RetentionRequest::CtxTtl(CtxTtl {
                context,
                set,
                ttl_ms,
            }) => {
                w.context_ref(context);
                w.u8(u8::from(*set));
                w.u64(*ttl_ms);
            }
        }
    }
}

impl RetentionResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            RetentionResponse::Retention(Retention { message_type, .. }) => *message_type,
        }
    }

    pub(super) fn read(
        kind: Kind,
        message_type: MessageType,
        cursor: &mut Cursor,
    ) -> Result<RetentionResponse, DecodeError> {
        Ok(match kind {
            Kind::CtxDelete | Kind::CtxPrune | Kind::CtxTtl => {
                RetentionResponse::Retention(Retention {
                    message_type,
                    info: cursor.context_info()?,
                    floor_depth: cursor.u32()?,
                    ttl_ms: cursor.u64()?,
                })
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            RetentionResponse::Retention(Retention {
                info,
                floor_depth,
                ttl_ms,
                ..
            }) => {
                w.context_info(info);
                w.u32(*floor_depth);
                w.u64(*ttl_ms);
            }
        }
    }
}
