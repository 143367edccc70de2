//! CTX_DELETE, CTX_PRUNE and CTX_TTL (version 2, issue 15): what a context keeps. Each answers
//! the context's CONTEXT_INFO with its floor depth and time to live.
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{EncodeError, context, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of a retention request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Request, DecodeError> {
    let request = match message_type {
        MessageType::CtxDelete => Request::CtxDelete {
            context: cursor.context_ref()?,
        },
        MessageType::CtxPrune => Request::CtxPrune {
            context: cursor.context_ref()?,
            keep: cursor.u32()?,
        },
        MessageType::CtxTtl => {
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
            Request::CtxTtl {
                context,
                set,
                ttl_ms,
            }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// What of a retention request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
        Request::CtxDelete { context: target }
        | Request::CtxPrune {
            context: target, ..
        } => context(target),
        Request::CtxTtl {
            context: target,
            set,
            ttl_ms,
        } => {
            context(target)?;
            // Without SET the request only reads: a value there would be a caller's mistake.
            let max = if *set { u64::MAX } else { 0 };
            let ttl_ms = usize::try_from(*ttl_ms).unwrap_or(usize::MAX);
            within("ttl_ms (0 without the SET flag)", ttl_ms, 0, max, "ms")
        }
        _ => Ok(()),
    }
}

/// Writes the body of a retention request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
        Request::CtxDelete { context } => w.context_ref(context),
        Request::CtxPrune { context, keep } => {
            w.context_ref(context);
            w.u32(*keep);
        }
        Request::CtxTtl {
            context,
            set,
            ttl_ms,
        } => {
            w.context_ref(context);
            w.u8(u8::from(*set));
            w.u64(*ttl_ms);
        }
        _ => unreachable!("Family::of routes only retention requests here"),
    }
}

/// Reads the body of the answer to a retention request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
        MessageType::CtxDelete | MessageType::CtxPrune | MessageType::CtxTtl => {
            Response::Retention {
                message_type,
                info: cursor.context_info()?,
                floor_depth: cursor.u32()?,
                ttl_ms: cursor.u64()?,
            }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to a retention request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
        Response::Retention {
            info,
            floor_depth,
            ttl_ms,
            ..
        } => {
            w.context_info(info);
            w.u32(*floor_depth);
            w.u64(*ttl_ms);
        }
        _ => unreachable!("response_body routes only retention answers here"),
    }
}
