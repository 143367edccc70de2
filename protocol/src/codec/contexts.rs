//! CTX_CREATE, CTX_FORK, GET_HEAD (version 1) and CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST,
//! CTX_NAME (version 2): making, finding, naming and tagging contexts.
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{EncodeError, SHORT, context, optional_name, tags, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of a context request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
    by_name: bool,
) -> Result<Request, DecodeError> {
    let request = match message_type {
        MessageType::CtxCreate => Request::CtxCreate {
            base_turn_id: cursor.u64()?,
        },
        MessageType::CtxFork => Request::CtxFork {
            turn_id: cursor.u64()?,
        },
        MessageType::GetHead => Request::GetHead {
            context: cursor.leading_context(by_name)?,
        },
        MessageType::CtxOpen => read_ctx_open(cursor)?,
        MessageType::CtxShow => Request::CtxShow {
            context: cursor.context_ref()?,
        },
        MessageType::CtxTag => read_ctx_tag(cursor)?,
        MessageType::CtxList => {
            let tags = cursor.tags()?;
            let name_prefix = cursor.optional_name("name_prefix")?;
            let updated_after_unix_ms = Some(cursor.u64()?).filter(|at| *at != 0);
            let updated_before_unix_ms = Some(cursor.u64()?).filter(|at| *at != 0);
            Request::CtxList {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor: cursor.list_cursor()?,
                limit: cursor.u32()?,
            }
        }
        MessageType::CtxName => Request::CtxName {
            context: cursor.context_ref()?,
            name: cursor.short_string("name")?,
        },
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// CTX_OPEN: `u64 base_turn_id, u8 open_flags, 1 reserved`, the CONTEXT_REF to clone (with
/// CLONE), then the name (0: none) and TAGS.
fn read_ctx_open(cursor: &mut Cursor) -> Result<Request, DecodeError> {
    let base_turn_id = cursor.u64()?;
    let flags = cursor.u8()?;
    if flags & !open_flags::KNOWN != 0 {
        return Err(cursor.invalid("open_flags", "unknown flag bits"));
    }
    cursor.zero(1, "reserved")?;
    let clone_from = if flags & open_flags::CLONE != 0 {
        Some(cursor.context_ref()?)
    } else {
        None
    };
    Ok(Request::CtxOpen {
        base_turn_id,
        get_or_create: flags & open_flags::GET_OR_CREATE != 0,
        clone_from,
        name: cursor.optional_name("name")?,
        tags: cursor.tags()?,
    })
}

/// CTX_TAG: CONTEXT_REF, `u32 tag_flags, u64 expected_head`, TAGS to set, then `u16 count` tag
/// keys to remove.
fn read_ctx_tag(cursor: &mut Cursor) -> Result<Request, DecodeError> {
    let context = cursor.context_ref()?;
    let flags = cursor.flags(tag_flags::KNOWN, "tag_flags")?;
    let expected = cursor.u64()?;
    let expected_head = (flags & tag_flags::EXPECT_HEAD != 0).then_some(expected);
    if expected_head.is_none() && expected != 0 {
        return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
    }
    let set = cursor.tags()?;
    let remove_count = usize::from(cursor.u16()?);
    let mut remove = Vec::with_capacity(cursor.list_capacity(remove_count, 2));
    for _ in 0..remove_count {
        remove.push(cursor.short_string("tag key")?);
    }
    Ok(Request::CtxTag {
        context,
        expected_head,
        set,
        remove,
    })
}

/// What of a context request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
        Request::CtxOpen {
            clone_from,
            name,
            tags: open_tags,
            ..
        } => {
            if let Some(source) = clone_from {
                context(source)?;
            }
            optional_name("name", name)?;
            tags(open_tags)
        }
        Request::CtxShow { context: target } => context(target),
        Request::CtxTag {
            context: target,
            set,
            remove,
            ..
        } => {
            context(target)?;
            tags(set)?;
            within("removed tags", remove.len(), 0, SHORT, "tags")?;
            remove
                .iter()
                .try_for_each(|key| within("tag key", key.len(), 0, SHORT, "bytes"))
        }
        Request::CtxList {
            tags: list_tags,
            name_prefix,
            updated_after_unix_ms,
            updated_before_unix_ms,
            cursor,
            ..
        } => {
            tags(list_tags)?;
            optional_name("name_prefix", name_prefix)?;
            for (field, at) in [
                ("updated_after_unix_ms", updated_after_unix_ms),
                ("updated_before_unix_ms", updated_before_unix_ms),
            ] {
                if let Some(at) = at {
                    // 0 on the wire means "no bound".
                    within(field, usize::from(*at != 0), 1, 1, "(0 is no bound)")?;
                }
            }
            match cursor {
                Some(ListCursorWire::Name(name)) => {
                    within("cursor name", name.len(), 1, SHORT, "bytes")
                }
                _ => Ok(()),
            }
        }
        Request::CtxName {
            context: target,
            name,
        } => {
            context(target)?;
            within("name", name.len(), 0, SHORT, "bytes")
        }
        _ => Ok(()),
    }
}

/// Writes the body of a context request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
        Request::CtxCreate { base_turn_id } => w.u64(*base_turn_id),
        Request::CtxFork { turn_id } => w.u64(*turn_id),
        Request::GetHead { context } => w.leading_context(context),
        Request::CtxOpen {
            base_turn_id,
            get_or_create,
            clone_from,
            name,
            tags,
        } => {
            w.u64(*base_turn_id);
            let mut flags = 0;
            if *get_or_create {
                flags |= open_flags::GET_OR_CREATE;
            }
            if clone_from.is_some() {
                flags |= open_flags::CLONE;
            }
            w.u8(flags);
            w.zero(1);
            if let Some(source) = clone_from {
                w.context_ref(source);
            }
            w.short(name.as_deref().unwrap_or("").as_bytes());
            w.tags(tags);
        }
        Request::CtxShow { context } => w.context_ref(context),
        Request::CtxTag {
            context,
            expected_head,
            set,
            remove,
        } => {
            w.context_ref(context);
            w.u32(if expected_head.is_some() {
                tag_flags::EXPECT_HEAD
            } else {
                0
            });
            w.u64(expected_head.unwrap_or(0));
            w.tags(set);
            w.u16(short_len(remove.len()));
            for key in remove {
                w.short(key.as_bytes());
            }
        }
        Request::CtxList {
            tags,
            name_prefix,
            updated_after_unix_ms,
            updated_before_unix_ms,
            cursor,
            limit,
        } => {
            w.tags(tags);
            w.short(name_prefix.as_deref().unwrap_or("").as_bytes());
            w.u64(updated_after_unix_ms.unwrap_or(0));
            w.u64(updated_before_unix_ms.unwrap_or(0));
            w.list_cursor(cursor);
            w.u32(*limit);
        }
        Request::CtxName { context, name } => {
            w.context_ref(context);
            w.short(name.as_bytes());
        }
        _ => unreachable!("Family::of routes only context requests here"),
    }
}

/// Reads the body of the answer to a context request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
        MessageType::CtxCreate | MessageType::CtxFork | MessageType::GetHead => Response::Context {
            message_type,
            head: cursor.context_head()?,
        },
        MessageType::CtxShow | MessageType::CtxTag | MessageType::CtxName => {
            Response::ContextInfo {
                message_type,
                info: cursor.context_info()?,
            }
        }
        MessageType::CtxOpen => Response::Opened {
            info: cursor.context_info()?,
            created: cursor.bool("created")?,
        },
        MessageType::CtxList => {
            let next_cursor = cursor.list_cursor()?;
            let count = cursor.list_count()?;
            let mut contexts = Vec::with_capacity(cursor.list_capacity(count as usize, 44));
            for _ in 0..count {
                contexts.push(cursor.context_info()?);
            }
            Response::ContextList {
                next_cursor,
                contexts,
            }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to a context request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
        Response::Context { head, .. } => w.context_head(head),
        Response::ContextInfo { info, .. } => w.context_info(info),
        Response::Opened { info, created } => {
            w.context_info(info);
            w.u8(u8::from(*created));
        }
        Response::ContextList {
            next_cursor,
            contexts,
        } => {
            w.list_cursor(next_cursor);
            w.u32(contexts.len() as u32);
            for info in contexts {
                w.context_info(info);
            }
        }
        _ => unreachable!("response_body routes only context answers here"),
    }
}
