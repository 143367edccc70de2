//! Every read that answers TURNs: GET_TURN, GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH and
//! GET_CHAIN (version 1: TURN records, each with its PAYLOAD when asked), GET_TURN_BY_KEY,
//! TURN_LOG, READ_PAGE and FIND_TURNS (version 2, decision 0009: turns with their key, labels
//! and links, EXTRAS). Exactly these may be read in an overlay view (frame flag `OVERLAYS`,
//! `Request::AsOf`), their answers then ending with one overlay state per TURN
//! (`overlays.rs`). Layouts in docs/protocol.md.

use bytes::Bytes;

use super::answer::AnswerLimits;
use super::check::{EncodeError, SHORT, TINY, context, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// The read messages (`Family::of` in codec/mod.rs maps message types to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    GetTurn,
    GetLast,
    GetBefore,
    GetRangeByDepth,
    GetChain,
    GetTurnByKey,
    TurnLog,
    ReadPage,
    FindTurns,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadsRequest {
    GetTurn(GetTurn),
    GetLast(GetLast),
    GetBefore(GetBefore),
    GetRangeByDepth(GetRangeByDepth),
    GetChain(GetChain),
    GetTurnByKey(GetTurnByKey),
    TurnLog(TurnLog),
    ReadPage(ReadPage),
    FindTurns(FindTurns),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetTurn {
    pub turn_id: u64,
}

/// The `limit` newest turns of a context, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetLast {
    pub context: ContextRef,
    pub limit: u32,
    pub read_flags: u32,
}

/// The `limit` turns older than `before_turn_id`, oldest first (cursor paging).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetBefore {
    pub context: ContextRef,
    pub before_turn_id: u64,
    pub limit: u32,
    pub read_flags: u32,
}

/// The turns of a context's chain with depth in `from_depth..from_depth + limit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetRangeByDepth {
    pub context: ContextRef,
    pub from_depth: u32,
    pub limit: u32,
    pub read_flags: u32,
}

/// The chain root → `turn_id`, a window of `limit` turns from `from_depth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetChain {
    pub turn_id: u64,
    pub from_depth: u32,
    pub limit: u32,
    pub read_flags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetTurnByKey {
    pub context: ContextRef,
    pub key: Bytes,
}

/// The context's turns, newest first across branches and what it inherited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnLog {
    pub context: ContextRef,
    pub labels: Vec<(String, String)>,
    pub cursor: Option<LogCursorWire>,
    pub limit: u32,
    pub read_flags: u32,
}

/// A page of the context's chain with each turn's extras.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPage {
    pub context: ContextRef,
    pub kind: PageKind,
    pub limit: u32,
    pub read_flags: u32,
}

/// Turns of every context carrying an indexed label, newest first, older than
/// `before_turn_id` (0: from the newest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindTurns {
    pub key: String,
    pub value: String,
    pub before_turn_id: u64,
    pub limit: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadsResponse {
    Turn(TurnWire),
    Turns(Turns),
    TurnInfo(TurnInfo),
    TurnLogPage(TurnLogPage),
    Page(Page),
    FoundTurns(FoundTurns),
}

/// Answer to GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH and GET_CHAIN, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turns {
    pub message_type: MessageType,
    /// Cursor for the next older page (GET_BEFORE), 0 when the root was reached.
    pub next_before: u64,
    /// Depth of the chain's tip (the context's head, or GET_CHAIN's turn).
    pub tip_depth: u32,
    pub entries: Vec<TurnEntry>,
}

/// Answer to GET_TURN_BY_KEY (boxed: it would double every response's size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnInfo {
    pub turn: Box<TurnWire>,
    pub extras: ExtrasWire,
}

/// Answer to TURN_LOG, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnLogPage {
    pub next_cursor: Option<LogCursorWire>,
    pub entries: Vec<TurnEntryV2>,
}

/// Answer to READ_PAGE, oldest first (TURNS' fields, entries with extras).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    pub next_before: u64,
    pub tip_depth: u32,
    pub entries: Vec<TurnEntryV2>,
}

/// Answer to FIND_TURNS, newest first; `next_before` 0 when there are no more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTurns {
    pub next_before: u64,
    pub turns: Vec<(TurnWire, ExtrasWire)>,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = ReadsRequest;
pub type Answers = ReadsResponse;

impl ReadsRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            ReadsRequest::GetTurn(GetTurn { .. }) => MessageType::GetTurn,
            ReadsRequest::GetLast(GetLast { .. }) => MessageType::GetLast,
            ReadsRequest::GetBefore(GetBefore { .. }) => MessageType::GetBefore,
            ReadsRequest::GetRangeByDepth(GetRangeByDepth { .. }) => MessageType::GetRangeByDepth,
            ReadsRequest::GetChain(GetChain { .. }) => MessageType::GetChain,
            ReadsRequest::GetTurnByKey(GetTurnByKey { .. }) => MessageType::GetTurnByKey,
            ReadsRequest::TurnLog(TurnLog { .. }) => MessageType::TurnLog,
            ReadsRequest::ReadPage(ReadPage { .. }) => MessageType::ReadPage,
            ReadsRequest::FindTurns(FindTurns { .. }) => MessageType::FindTurns,
        }
    }

    /// The context named by the leading `context_id` of the version-1 layout
    /// (`MessageType::takes_context`).
    pub fn leading_context(&self) -> Option<&ContextRef> {
        match self {
            ReadsRequest::GetLast(GetLast { context, .. })
            | ReadsRequest::GetBefore(GetBefore { context, .. })
            | ReadsRequest::GetRangeByDepth(GetRangeByDepth { context, .. }) => Some(context),
            _ => None,
        }
    }

    /// The largest answer (see `codec/answer.rs`): a version-1 page is bounded by its limit
    /// and its read flags; the other reads by the largest answer the limits allow.
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            ReadsRequest::GetLast(GetLast {
                limit, read_flags, ..
            })
            | ReadsRequest::GetBefore(GetBefore {
                limit, read_flags, ..
            })
            | ReadsRequest::GetRangeByDepth(GetRangeByDepth {
                limit, read_flags, ..
            })
            | ReadsRequest::GetChain(GetChain {
                limit, read_flags, ..
            }) => limits.page(*limit, *read_flags),
            ReadsRequest::GetTurn(GetTurn { .. })
            | ReadsRequest::GetTurnByKey(GetTurnByKey { .. })
            | ReadsRequest::TurnLog(TurnLog { .. })
            | ReadsRequest::ReadPage(ReadPage { .. })
            | ReadsRequest::FindTurns(FindTurns { .. }) => limits.largest(),
        }
    }

    pub(super) fn read(
        kind: Kind,
        cursor: &mut Cursor,
        by_name: bool,
    ) -> Result<ReadsRequest, DecodeError> {
        Ok(match kind {
            Kind::GetTurn => ReadsRequest::GetTurn(GetTurn {
                turn_id: cursor.u64()?,
            }),
            Kind::GetLast => {
                let context = cursor.leading_context(by_name)?;
                let limit = cursor.u32()?;
                let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
                ReadsRequest::GetLast(GetLast {
                    context,
                    limit,
                    read_flags,
                })
            }
            Kind::GetBefore => read_get_before(cursor, by_name)?,
            Kind::GetRangeByDepth => read_get_range_by_depth(cursor, by_name)?,
            Kind::GetChain => read_get_chain(cursor)?,
            Kind::GetTurnByKey => {
                let context = cursor.context_ref()?;
                let key_len = usize::from(cursor.u8()?);
                ReadsRequest::GetTurnByKey(GetTurnByKey {
                    context,
                    key: cursor.bytes(key_len)?,
                })
            }
            Kind::TurnLog => read_turn_log(cursor)?,
            Kind::ReadPage => {
                let context = cursor.context_ref()?;
                ReadsRequest::ReadPage(ReadPage {
                    context,
                    kind: cursor.page_kind()?,
                    limit: cursor.u32()?,
                    read_flags: cursor.flags(read_flags::KNOWN, "read_flags")?,
                })
            }
            Kind::FindTurns => ReadsRequest::FindTurns(FindTurns {
                key: cursor.tiny_string("label key")?,
                value: cursor.short_string("label value")?,
                before_turn_id: cursor.u64()?,
                limit: cursor.u32()?,
            }),
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            ReadsRequest::GetTurnByKey(GetTurnByKey {
                context: target,
                key,
            }) => {
                context(target)?;
                within("key", key.len(), 0, TINY, "bytes")
            }
            ReadsRequest::TurnLog(TurnLog {
                context: target,
                labels,
                ..
            }) => {
                context(target)?;
                within("labels", labels.len(), 0, TINY, "labels")?;
                labels.iter().try_for_each(|(key, value)| {
                    within("label key", key.len(), 0, TINY, "bytes")?;
                    within("label value", value.len(), 0, SHORT, "bytes")
                })
            }
            ReadsRequest::ReadPage(ReadPage {
                context: target, ..
            }) => context(target),
            ReadsRequest::FindTurns(FindTurns { key, value, .. }) => {
                within("label key", key.len(), 0, TINY, "bytes")?;
                within("label value", value.len(), 0, SHORT, "bytes")
            }
            // Numbers only, or a leading context (checked for every family, `check_request`).
            ReadsRequest::GetTurn(GetTurn { .. })
            | ReadsRequest::GetLast(GetLast { .. })
            | ReadsRequest::GetBefore(GetBefore { .. })
            | ReadsRequest::GetRangeByDepth(GetRangeByDepth { .. })
            | ReadsRequest::GetChain(GetChain { .. }) => Ok(()),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            ReadsRequest::GetTurn(GetTurn { turn_id }) => w.u64(*turn_id),
            ReadsRequest::GetLast(GetLast {
                context,
                limit,
                read_flags,
            }) => {
                w.leading_context(context);
                w.u32(*limit);
                w.u32(*read_flags);
            }
            ReadsRequest::GetBefore(GetBefore {
                context,
                before_turn_id,
                limit,
                read_flags,
            }) => write_get_before(w, context, *before_turn_id, *limit, *read_flags),
            ReadsRequest::GetRangeByDepth(GetRangeByDepth {
                context,
                from_depth,
                limit,
                read_flags,
            }) => {
                w.leading_context(context);
                write_window(w, *from_depth, *limit, *read_flags);
            }
            ReadsRequest::GetChain(GetChain {
                turn_id,
                from_depth,
                limit,
                read_flags,
            }) => {
                w.u64(*turn_id);
                write_window(w, *from_depth, *limit, *read_flags);
            }
            ReadsRequest::GetTurnByKey(GetTurnByKey { context, key }) => {
                w.context_ref(context);
                w.tiny(key);
            }
            ReadsRequest::TurnLog(TurnLog {
                context,
                labels,
                cursor,
                limit,
                read_flags,
            }) => write_turn_log(w, context, labels, cursor, *limit, *read_flags),
            ReadsRequest::ReadPage(ReadPage {
                context,
                kind,
                limit,
                read_flags,
            }) => {
                w.context_ref(context);
                w.page_kind(kind);
                w.u32(*limit);
                w.u32(*read_flags);
            }
            ReadsRequest::FindTurns(FindTurns {
                key,
                value,
                before_turn_id,
                limit,
            }) => write_find_turns(w, key, value, *before_turn_id, *limit),
        }
    }
}

/// `read_get_before`'s layout.
fn write_get_before(
    w: &mut ChunkWriter,
    context: &ContextRef,
    before_turn_id: u64,
    limit: u32,
    read_flags: u32,
) {
    w.leading_context(context);
    w.u64(before_turn_id);
    w.u32(limit);
    w.u32(read_flags);
}

/// FIND_TURNS: `u8 len, key, u16 len, value, u64 before_turn_id, u32 limit`.
fn write_find_turns(w: &mut ChunkWriter, key: &str, value: &str, before_turn_id: u64, limit: u32) {
    w.tiny(key.as_bytes());
    w.short(value.as_bytes());
    w.u64(before_turn_id);
    w.u32(limit);
}

/// GET_BEFORE: the leading context, `u64 before_turn_id, u32 limit, u32 read_flags`.
fn read_get_before(cursor: &mut Cursor, by_name: bool) -> Result<ReadsRequest, DecodeError> {
    let context = cursor.leading_context(by_name)?;
    let before_turn_id = cursor.u64()?;
    let limit = cursor.u32()?;
    let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
    Ok(ReadsRequest::GetBefore(GetBefore {
        context,
        before_turn_id,
        limit,
        read_flags,
    }))
}

/// GET_RANGE_BY_DEPTH: the leading context, then a window (`read_window`).
fn read_get_range_by_depth(
    cursor: &mut Cursor,
    by_name: bool,
) -> Result<ReadsRequest, DecodeError> {
    let context = cursor.leading_context(by_name)?;
    let (from_depth, limit, read_flags) = read_window(cursor)?;
    Ok(ReadsRequest::GetRangeByDepth(GetRangeByDepth {
        context,
        from_depth,
        limit,
        read_flags,
    }))
}

/// GET_CHAIN: `u64 turn_id`, then a window (`read_window`).
fn read_get_chain(cursor: &mut Cursor) -> Result<ReadsRequest, DecodeError> {
    let turn_id = cursor.u64()?;
    let (from_depth, limit, read_flags) = read_window(cursor)?;
    Ok(ReadsRequest::GetChain(GetChain {
        turn_id,
        from_depth,
        limit,
        read_flags,
    }))
}

/// A window of depths: `u32 from_depth, u32 limit, u32 read_flags, 4 reserved`.
fn read_window(cursor: &mut Cursor) -> Result<(u32, u32, u32), DecodeError> {
    let from_depth = cursor.u32()?;
    let limit = cursor.u32()?;
    let read_flags = cursor.flags(read_flags::KNOWN, "read_flags")?;
    cursor.zero(4, "reserved")?;
    Ok((from_depth, limit, read_flags))
}

/// `read_window`'s layout.
fn write_window(w: &mut ChunkWriter, from_depth: u32, limit: u32, read_flags: u32) {
    w.u32(from_depth);
    w.u32(limit);
    w.u32(read_flags);
    w.zero(4);
}

/// `read_turn_log`'s layout.
fn write_turn_log(
    w: &mut ChunkWriter,
    context: &ContextRef,
    labels: &[(String, String)],
    cursor: &Option<LogCursorWire>,
    limit: u32,
    read_flags: u32,
) {
    w.context_ref(context);
    assert!(labels.len() <= usize::from(u8::MAX));
    w.u8(labels.len() as u8);
    for (key, value) in labels {
        w.tiny(key.as_bytes());
        w.short(value.as_bytes());
    }
    w.log_cursor(cursor);
    w.u32(limit);
    w.u32(read_flags);
}

/// TURN_LOG: CONTEXT_REF, `u8 label_count` × (`u8` key, `u16` value), LOG_CURSOR, `u32 limit,
/// u32 read_flags`.
fn read_turn_log(cursor: &mut Cursor) -> Result<ReadsRequest, DecodeError> {
    let context = cursor.context_ref()?;
    let count = usize::from(cursor.u8()?);
    let mut labels = Vec::with_capacity(cursor.list_capacity(count, 3));
    for _ in 0..count {
        let key = cursor.tiny_string("label key")?;
        labels.push((key, cursor.short_string("label value")?));
    }
    Ok(ReadsRequest::TurnLog(TurnLog {
        context,
        labels,
        cursor: cursor.log_cursor()?,
        limit: cursor.u32()?,
        read_flags: cursor.flags(read_flags::KNOWN, "read_flags")?,
    }))
}

impl ReadsResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            ReadsResponse::Turn(_) => MessageType::GetTurn,
            ReadsResponse::Turns(Turns { message_type, .. }) => *message_type,
            ReadsResponse::TurnInfo(TurnInfo { .. }) => MessageType::GetTurnByKey,
            ReadsResponse::TurnLogPage(TurnLogPage { .. }) => MessageType::TurnLog,
            ReadsResponse::Page(Page { .. }) => MessageType::ReadPage,
            ReadsResponse::FoundTurns(FoundTurns { .. }) => MessageType::FindTurns,
        }
    }

    /// The TURNs this answer carries, in wire order: an answer in an overlay view has one
    /// overlay state per TURN.
    pub fn turn_count(&self) -> usize {
        match self {
            ReadsResponse::Turn(_) | ReadsResponse::TurnInfo(TurnInfo { .. }) => 1,
            ReadsResponse::Turns(Turns { entries, .. }) => entries.len(),
            ReadsResponse::TurnLogPage(TurnLogPage { entries, .. })
            | ReadsResponse::Page(Page { entries, .. }) => entries.len(),
            ReadsResponse::FoundTurns(FoundTurns { turns, .. }) => turns.len(),
        }
    }

    pub(super) fn read(
        kind: Kind,
        message_type: MessageType,
        cursor: &mut Cursor,
    ) -> Result<ReadsResponse, DecodeError> {
        Ok(match kind {
            Kind::GetTurn => ReadsResponse::Turn(cursor.turn()?),
            Kind::GetLast | Kind::GetBefore | Kind::GetRangeByDepth | Kind::GetChain => {
                let next_before = cursor.u64()?;
                let tip_depth = cursor.u32()?;
                let count = cursor.list_count()?;
                let mut entries = Vec::with_capacity((count as usize).min(4096));
                for _ in 0..count {
                    let turn = cursor.turn()?;
                    let payload = cursor.payload()?;
                    entries.push(TurnEntry { turn, payload });
                }
                ReadsResponse::Turns(Turns {
                    message_type,
                    next_before,
                    tip_depth,
                    entries,
                })
            }
            Kind::GetTurnByKey => ReadsResponse::TurnInfo(TurnInfo {
                turn: Box::new(cursor.turn()?),
                extras: cursor.extras()?,
            }),
            Kind::TurnLog => ReadsResponse::TurnLogPage(TurnLogPage {
                next_cursor: cursor.log_cursor()?,
                entries: cursor.entries_v2()?,
            }),
            Kind::ReadPage => ReadsResponse::Page(Page {
                next_before: cursor.u64()?,
                tip_depth: cursor.u32()?,
                entries: cursor.entries_v2()?,
            }),
            Kind::FindTurns => {
                let next_before = cursor.u64()?;
                let count = cursor.list_count()?;
                let mut turns = Vec::with_capacity(cursor.list_capacity(count as usize, 91));
                for _ in 0..count {
                    turns.push((cursor.turn()?, cursor.extras()?));
                }
                ReadsResponse::FoundTurns(FoundTurns { next_before, turns })
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            ReadsResponse::Turn(turn) => w.turn(turn),
            ReadsResponse::Turns(Turns {
                next_before,
                tip_depth,
                entries,
                ..
            }) => {
                w.u64(*next_before);
                w.u32(*tip_depth);
                w.u32(entries.len() as u32);
                for entry in entries {
                    w.turn(&entry.turn);
                    w.payload(&entry.payload);
                }
            }
            ReadsResponse::TurnInfo(TurnInfo { turn, extras }) => {
                w.turn(turn);
                w.extras(extras);
            }
            ReadsResponse::TurnLogPage(TurnLogPage {
                next_cursor,
                entries,
            }) => {
                w.log_cursor(next_cursor);
                w.entries_v2(entries);
            }
            ReadsResponse::Page(Page {
                next_before,
                tip_depth,
                entries,
            }) => {
                w.u64(*next_before);
                w.u32(*tip_depth);
                w.entries_v2(entries);
            }
            ReadsResponse::FoundTurns(FoundTurns { next_before, turns }) => {
                w.u64(*next_before);
                w.u32(turns.len() as u32);
                for (turn, extras) in turns {
                    w.turn(turn);
                    w.extras(extras);
                }
            }
        }
    }
}
