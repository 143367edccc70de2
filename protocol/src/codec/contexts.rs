//! CTX_CREATE, CTX_FORK, GET_HEAD (version 1) and CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST,
//! CTX_NAME (version 2): making, finding, naming and tagging contexts. Layouts in
//! docs/protocol.md.

use super::answer::{AnswerLimits, CONTEXT_ANSWER_BYTES, FIXED_ANSWER_BYTES};
use super::check::{EncodeError, SHORT, context, optional_name, tags, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// The context messages (`Family::of` in codec/mod.rs maps message types to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    CtxCreate,
    CtxFork,
    GetHead,
    CtxOpen,
    CtxShow,
    CtxTag,
    CtxList,
    CtxName,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContextsRequest {
    CtxCreate(CtxCreate),
    CtxFork(CtxFork),
    GetHead(GetHead),
    CtxOpen(CtxOpen),
    CtxShow(CtxShow),
    CtxTag(CtxTag),
    CtxList(CtxList),
    CtxName(CtxName),
}

/// A new context: empty (`base_turn_id == 0`) or with its head at an existing turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxCreate {
    pub base_turn_id: u64,
}

/// A new context whose head is an existing turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxFork {
    pub turn_id: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetHead {
    pub context: ContextRef,
}

/// A new context, optionally named, tagged, forked at `base_turn_id` or cloned from
/// another context; with `get_or_create`, a taken name answers its context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxOpen {
    pub base_turn_id: u64,
    pub get_or_create: bool,
    pub clone_from: Option<ContextRef>,
    pub name: Option<String>,
    pub tags: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxShow {
    pub context: ContextRef,
}

/// Sets and removes tags atomically, optionally only if the head is `expected_head`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxTag {
    pub context: ContextRef,
    pub expected_head: Option<u64>,
    pub set: Vec<(String, String)>,
    pub remove: Vec<String>,
}

/// Contexts matching every condition, a page after `cursor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxList {
    pub tags: Vec<(String, String)>,
    pub name_prefix: Option<String>,
    pub updated_after_unix_ms: Option<u64>,
    pub updated_before_unix_ms: Option<u64>,
    pub cursor: Option<ListCursorWire>,
    pub limit: u32,
}

/// Names a context that has no name yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtxName {
    pub context: ContextRef,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContextsResponse {
    Context(Context),
    ContextInfo(ContextInfo),
    Opened(Opened),
    ContextList(ContextList),
}

/// Answer to CTX_CREATE, CTX_FORK and GET_HEAD (the type says which).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    pub message_type: MessageType,
    pub head: ContextHeadWire,
}

/// Answer to CTX_SHOW, CTX_TAG and CTX_NAME (the type says which).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextInfo {
    pub message_type: MessageType,
    pub info: ContextInfoWire,
}

/// Answer to CTX_OPEN: the context, and whether this request created it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub info: ContextInfoWire,
    pub created: bool,
}

/// Answer to CTX_LIST: `next_cursor` is `None` when no more contexts match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextList {
    pub next_cursor: Option<ListCursorWire>,
    pub contexts: Vec<ContextInfoWire>,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = ContextsRequest;
pub type Answers = ContextsResponse;

impl ContextsRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            ContextsRequest::CtxCreate(CtxCreate { .. }) => MessageType::CtxCreate,
            ContextsRequest::CtxFork(CtxFork { .. }) => MessageType::CtxFork,
            ContextsRequest::GetHead(GetHead { .. }) => MessageType::GetHead,
            ContextsRequest::CtxOpen(CtxOpen { .. }) => MessageType::CtxOpen,
            ContextsRequest::CtxShow(CtxShow { .. }) => MessageType::CtxShow,
            ContextsRequest::CtxTag(CtxTag { .. }) => MessageType::CtxTag,
            ContextsRequest::CtxList(CtxList { .. }) => MessageType::CtxList,
            ContextsRequest::CtxName(CtxName { .. }) => MessageType::CtxName,
        }
    }

    /// The context named by the leading `context_id` of the version-1 layout
    /// (`MessageType::takes_context`).
    pub fn leading_context(&self) -> Option<&ContextRef> {
        match self {
            ContextsRequest::GetHead(GetHead { context }) => Some(context),
            _ => None,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            ContextsRequest::CtxCreate(CtxCreate { .. })
            | ContextsRequest::CtxFork(CtxFork { .. })
            | ContextsRequest::GetHead(GetHead { .. }) => FIXED_ANSWER_BYTES,
            ContextsRequest::CtxOpen(CtxOpen { .. })
            | ContextsRequest::CtxTag(CtxTag { .. })
            | ContextsRequest::CtxName(CtxName { .. }) => CONTEXT_ANSWER_BYTES,
            // CTX_SHOW as the server's table had it when the bounds moved here (its
            // catch-all); a page of contexts is cut to the response budget.
            ContextsRequest::CtxShow(CtxShow { .. }) | ContextsRequest::CtxList(CtxList { .. }) => {
                limits.largest()
            }
        }
    }

    pub(super) fn read(
        kind: Kind,
        cursor: &mut Cursor,
        by_name: bool,
    ) -> Result<ContextsRequest, DecodeError> {
        Ok(match kind {
            Kind::CtxCreate => ContextsRequest::CtxCreate(CtxCreate {
                base_turn_id: cursor.u64()?,
            }),
            Kind::CtxFork => ContextsRequest::CtxFork(CtxFork {
                turn_id: cursor.u64()?,
            }),
            Kind::GetHead => ContextsRequest::GetHead(GetHead {
                context: cursor.leading_context(by_name)?,
            }),
            Kind::CtxOpen => read_ctx_open(cursor)?,
            Kind::CtxShow => ContextsRequest::CtxShow(CtxShow {
                context: cursor.context_ref()?,
            }),
            Kind::CtxTag => read_ctx_tag(cursor)?,
            Kind::CtxList => {
                let tags = cursor.tags()?;
                let name_prefix = cursor.optional_name("name_prefix")?;
                let updated_after_unix_ms = Some(cursor.u64()?).filter(|at| *at != 0);
                let updated_before_unix_ms = Some(cursor.u64()?).filter(|at| *at != 0);
                ContextsRequest::CtxList(CtxList {
                    tags,
                    name_prefix,
                    updated_after_unix_ms,
                    updated_before_unix_ms,
                    cursor: cursor.list_cursor()?,
                    limit: cursor.u32()?,
                })
            }
            Kind::CtxName => ContextsRequest::CtxName(CtxName {
                context: cursor.context_ref()?,
                name: cursor.short_string("name")?,
            }),
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            ContextsRequest::CtxOpen(CtxOpen {
                clone_from,
                name,
                tags: open_tags,
                ..
            }) => {
                if let Some(source) = clone_from {
                    context(source)?;
                }
                optional_name("name", name)?;
                tags(open_tags)
            }
            ContextsRequest::CtxShow(CtxShow { context: target }) => context(target),
            ContextsRequest::CtxTag(CtxTag {
                context: target,
                set,
                remove,
                ..
            }) => {
                context(target)?;
                tags(set)?;
                within("removed tags", remove.len(), 0, SHORT, "tags")?;
                remove
                    .iter()
                    .try_for_each(|key| within("tag key", key.len(), 0, SHORT, "bytes"))
            }
            ContextsRequest::CtxList(CtxList {
                tags: list_tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor,
                ..
            }) => {
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
            ContextsRequest::CtxName(CtxName {
                context: target,
                name,
            }) => {
                context(target)?;
                within("name", name.len(), 0, SHORT, "bytes")
            }
            // GET_HEAD's leading context is checked for every family (`check_request`).
            ContextsRequest::CtxCreate(CtxCreate { .. })
            | ContextsRequest::CtxFork(CtxFork { .. })
            | ContextsRequest::GetHead(GetHead { .. }) => Ok(()),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            ContextsRequest::CtxCreate(CtxCreate { base_turn_id }) => w.u64(*base_turn_id),
            ContextsRequest::CtxFork(CtxFork { turn_id }) => w.u64(*turn_id),
            ContextsRequest::GetHead(GetHead { context }) => w.leading_context(context),
            ContextsRequest::CtxOpen(CtxOpen {
                base_turn_id,
                get_or_create,
                clone_from,
                name,
                tags,
            }) => {
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
            ContextsRequest::CtxShow(CtxShow { context }) => w.context_ref(context),
            ContextsRequest::CtxTag(CtxTag {
                context,
                expected_head,
                set,
                remove,
            }) => {
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
            ContextsRequest::CtxList(CtxList {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor,
                limit,
            }) => {
                w.tags(tags);
                w.short(name_prefix.as_deref().unwrap_or("").as_bytes());
                w.u64(updated_after_unix_ms.unwrap_or(0));
                w.u64(updated_before_unix_ms.unwrap_or(0));
                w.list_cursor(cursor);
                w.u32(*limit);
            }
            ContextsRequest::CtxName(CtxName { context, name }) => {
                w.context_ref(context);
                w.short(name.as_bytes());
            }
        }
    }
}

/// CTX_OPEN: `u64 base_turn_id, u8 open_flags, 1 reserved`, the CONTEXT_REF to clone (with
/// CLONE), then the name (0: none) and TAGS.
fn read_ctx_open(cursor: &mut Cursor) -> Result<ContextsRequest, DecodeError> {
    let base_turn_id = cursor.u64()?;
    let flags = cursor.flags_u8(open_flags::KNOWN, "open_flags")?;
    cursor.zero(1, "reserved")?;
    let clone_from = if flags & open_flags::CLONE != 0 {
        Some(cursor.context_ref()?)
    } else {
        None
    };
    Ok(ContextsRequest::CtxOpen(CtxOpen {
        base_turn_id,
        get_or_create: flags & open_flags::GET_OR_CREATE != 0,
        clone_from,
        name: cursor.optional_name("name")?,
        tags: cursor.tags()?,
    }))
}

/// CTX_TAG: CONTEXT_REF, `u32 tag_flags, u64 expected_head`, TAGS to set, then `u16 count` tag
/// keys to remove.
fn read_ctx_tag(cursor: &mut Cursor) -> Result<ContextsRequest, DecodeError> {
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
    Ok(ContextsRequest::CtxTag(CtxTag {
        context,
        expected_head,
        set,
        remove,
    }))
}

impl ContextsResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            ContextsResponse::Context(Context { message_type, .. })
            | ContextsResponse::ContextInfo(ContextInfo { message_type, .. }) => *message_type,
            ContextsResponse::Opened(Opened { .. }) => MessageType::CtxOpen,
            ContextsResponse::ContextList(ContextList { .. }) => MessageType::CtxList,
        }
    }

    pub(super) fn read(
        kind: Kind,
        message_type: MessageType,
        cursor: &mut Cursor,
    ) -> Result<ContextsResponse, DecodeError> {
        Ok(match kind {
            Kind::CtxCreate | Kind::CtxFork | Kind::GetHead => ContextsResponse::Context(Context {
                message_type,
                head: cursor.context_head()?,
            }),
            Kind::CtxShow | Kind::CtxTag | Kind::CtxName => {
                ContextsResponse::ContextInfo(ContextInfo {
                    message_type,
                    info: cursor.context_info()?,
                })
            }
            Kind::CtxOpen => ContextsResponse::Opened(Opened {
                info: cursor.context_info()?,
                created: cursor.bool("created")?,
            }),
            Kind::CtxList => {
                let next_cursor = cursor.list_cursor()?;
                let count = cursor.list_count()?;
                let mut contexts = Vec::with_capacity(cursor.list_capacity(count as usize, 44));
                for _ in 0..count {
                    contexts.push(cursor.context_info()?);
                }
                ContextsResponse::ContextList(ContextList {
                    next_cursor,
                    contexts,
                })
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            ContextsResponse::Context(Context { head, .. }) => w.context_head(head),
            ContextsResponse::ContextInfo(ContextInfo { info, .. }) => w.context_info(info),
            ContextsResponse::Opened(Opened { info, created }) => {
                w.context_info(info);
                w.u8(u8::from(*created));
            }
            ContextsResponse::ContextList(ContextList {
                next_cursor,
                contexts,
            }) => {
                w.list_cursor(next_cursor);
                w.u32(contexts.len() as u32);
                for info in contexts {
                    w.context_info(info);
                }
            }
        }
    }
}
