//! APPEND_TURN and APPEND_TURN_BY_HASH (version 1), APPEND_TURNS (version 2, decision 0009:
//! turns with a parent, a key, labels, links, a summary flag, each by value or by hash).
//! Layouts in docs/protocol.md.

use bytes::Bytes;

use super::answer::{AnswerLimits, ERROR_ANSWER_BYTES_MAX, FIXED_ANSWER_BYTES, TURN_ENTRY_BYTES};
use super::check::{APPEND_PAYLOAD_BYTES_LIMIT, EncodeError, SHORT, context, extras, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// The append messages (`Family::of` in codec/mod.rs maps message types to them).
// Named as the message types they stand for (`MessageType`), prefix included.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AppendTurn,
    AppendTurnByHash,
    AppendTurns,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendsRequest {
    AppendTurn(AppendTurn),
    AppendTurnByHash(AppendTurnByHash),
    AppendTurns(AppendTurns),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendTurn {
    pub context: ContextRef,
    pub expected_head: Option<u64>,
    pub type_tag: u64,
    pub codec: u32,
    pub payload: Bytes,
}

/// Appends a turn whose payload is an already stored blob (no re-upload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendTurnByHash {
    pub context: ContextRef,
    pub expected_head: Option<u64>,
    pub type_tag: u64,
    pub codec: u32,
    pub payload_hash: BlobHash,
}

/// One or more turns to one context, in order, all or none, in one group commit; each
/// turn's parent is the one before it unless it says otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendTurns {
    pub context: ContextRef,
    pub expected_head: Option<u64>,
    pub turns: Vec<TurnSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendsResponse {
    Appended(Appended),
    AppendedTurns(AppendedTurns),
}

/// Answer to APPEND_TURN and APPEND_TURN_BY_HASH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    pub message_type: MessageType,
    pub turn: TurnWire,
    pub deduped: bool,
}

/// Answer to APPEND_TURNS, one per turn, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendedTurns {
    pub turns: Vec<AppendedWire>,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = AppendsRequest;
pub type Answers = AppendsResponse;

impl AppendsRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            AppendsRequest::AppendTurn(AppendTurn { .. }) => MessageType::AppendTurn,
            AppendsRequest::AppendTurnByHash(AppendTurnByHash { .. }) => {
                MessageType::AppendTurnByHash
            }
            AppendsRequest::AppendTurns(AppendTurns { .. }) => MessageType::AppendTurns,
        }
    }

    /// The context named by the leading `context_id` of the version-1 layout
    /// (`MessageType::takes_context`).
    pub fn leading_context(&self) -> Option<&ContextRef> {
        match self {
            AppendsRequest::AppendTurn(AppendTurn { context, .. })
            | AppendsRequest::AppendTurnByHash(AppendTurnByHash { context, .. }) => Some(context),
            AppendsRequest::AppendTurns(AppendTurns { .. }) => None,
        }
    }

    /// The largest answer (see `codec/answer.rs`): a turn without its payload per turn.
    pub fn answer_bytes_max(&self, _limits: &AnswerLimits) -> u64 {
        match self {
            AppendsRequest::AppendTurn(AppendTurn { .. })
            | AppendsRequest::AppendTurnByHash(AppendTurnByHash { .. }) => FIXED_ANSWER_BYTES,
            AppendsRequest::AppendTurns(AppendTurns { turns, .. }) => {
                turns.len() as u64 * (TURN_ENTRY_BYTES + 16) + ERROR_ANSWER_BYTES_MAX
            }
        }
    }

    pub(super) fn read(
        kind: Kind,
        cursor: &mut Cursor,
        by_name: bool,
    ) -> Result<AppendsRequest, DecodeError> {
        match kind {
            Kind::AppendTurn | Kind::AppendTurnByHash => read_append(kind, cursor, by_name),
            Kind::AppendTurns => read_append_turns(cursor),
        }
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            AppendsRequest::AppendTurn(AppendTurn { payload, .. }) => within(
                "payload",
                payload.len(),
                0,
                APPEND_PAYLOAD_BYTES_LIMIT,
                "bytes",
            ),
            // The leading context is checked for every family (`check_request`).
            AppendsRequest::AppendTurnByHash(AppendTurnByHash { .. }) => Ok(()),
            AppendsRequest::AppendTurns(AppendTurns {
                context: target,
                turns,
                ..
            }) => {
                context(target)?;
                within("turns", turns.len(), 1, SHORT, "turns")?;
                turns.iter().try_for_each(check_spec)
            }
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            AppendsRequest::AppendTurn(AppendTurn {
                context,
                expected_head,
                type_tag,
                codec,
                payload,
            }) => {
                append_fields(w, context, *expected_head, *type_tag, *codec);
                w.u32(payload.len() as u32);
                w.zero(4);
                w.data(payload);
            }
            AppendsRequest::AppendTurnByHash(AppendTurnByHash {
                context,
                expected_head,
                type_tag,
                codec,
                payload_hash,
            }) => {
                append_fields(w, context, *expected_head, *type_tag, *codec);
                w.slice(&payload_hash.0);
            }
            AppendsRequest::AppendTurns(AppendTurns {
                context,
                expected_head,
                turns,
            }) => {
                write_turns_target(w, context, *expected_head);
                w.u16(short_len(turns.len()));
                for spec in turns {
                    w.turn_spec(spec);
                }
            }
        }
    }
}

/// APPEND_TURN and APPEND_TURN_BY_HASH: the fields they share (`append_fields`), then the
/// payload (`u32 len, 4 reserved, bytes`) or the hash of a stored blob.
fn read_append(
    kind: Kind,
    cursor: &mut Cursor,
    by_name: bool,
) -> Result<AppendsRequest, DecodeError> {
    let context = cursor.leading_context(by_name)?;
    let expected = cursor.u64()?;
    let type_tag = cursor.u64()?;
    let codec = cursor.u32()?;
    let flags = cursor.flags(append_flags::KNOWN, "append_flags")?;
    let expected_head = (flags & append_flags::EXPECT_HEAD != 0).then_some(expected);
    if expected_head.is_none() && expected != 0 {
        return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
    }
    let request = if kind == Kind::AppendTurn {
        let payload_len = cursor.u32()? as usize;
        cursor.zero(4, "reserved")?;
        let payload = cursor.bytes(payload_len)?;
        AppendsRequest::AppendTurn(AppendTurn {
            context,
            expected_head,
            type_tag,
            codec,
            payload,
        })
    } else {
        let payload_hash = cursor.hash()?;
        AppendsRequest::AppendTurnByHash(AppendTurnByHash {
            context,
            expected_head,
            type_tag,
            codec,
            payload_hash,
        })
    };
    Ok(request)
}

/// APPEND_TURNS: CONTEXT_REF, `u32 append_flags, u64 expected_head, u16 count` (1 or more),
/// then `count` × TURN_SPEC.
fn read_append_turns(cursor: &mut Cursor) -> Result<AppendsRequest, DecodeError> {
    let (context, expected_head) = read_turns_target(cursor)?;
    let count = usize::from(cursor.u16()?);
    if count == 0 {
        return Err(cursor.invalid("count", "no turns"));
    }
    let mut turns = Vec::with_capacity(cursor.list_capacity(count, 27));
    for _ in 0..count {
        turns.push(cursor.turn_spec()?);
    }
    Ok(AppendsRequest::AppendTurns(AppendTurns {
        context,
        expected_head,
        turns,
    }))
}

/// What APPEND_TURNS and APPEND_TURNS_VECTORS begin with: CONTEXT_REF, `u32 append_flags,
/// u64 expected_head`.
pub(super) fn read_turns_target(
    cursor: &mut Cursor,
) -> Result<(ContextRef, Option<u64>), DecodeError> {
    let context = cursor.context_ref()?;
    let flags = cursor.flags(append_flags::KNOWN, "append_flags")?;
    let expected = cursor.u64()?;
    let expected_head = (flags & append_flags::EXPECT_HEAD != 0).then_some(expected);
    if expected_head.is_none() && expected != 0 {
        return Err(cursor.invalid("expected_head", "set without EXPECT_HEAD"));
    }
    Ok((context, expected_head))
}

/// The writer's side of `read_turns_target`.
pub(super) fn write_turns_target(
    w: &mut ChunkWriter,
    context: &ContextRef,
    expected_head: Option<u64>,
) {
    w.context_ref(context);
    w.u32(if expected_head.is_some() {
        append_flags::EXPECT_HEAD
    } else {
        0
    });
    w.u64(expected_head.unwrap_or(0));
}

/// One TURN_SPEC: a parent turn is not 0, the extras fit, a payload by value fits a frame.
pub(super) fn check_spec(spec: &TurnSpec) -> Result<(), EncodeError> {
    if spec.parent == ParentWire::Turn(0) {
        within("parent turn id", 0, 1, u64::MAX, "(0 is no turn)")?;
    }
    extras(&spec.extras)?;
    match &spec.payload {
        PayloadSpec::Bytes(bytes) => within(
            "payload",
            bytes.len(),
            0,
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
        PayloadSpec::Hash(_) => Ok(()),
        PayloadSpec::Zstd { frame, .. } => within(
            "zstd payload frame",
            frame.len(),
            0,
            APPEND_PAYLOAD_BYTES_LIMIT,
            "bytes",
        ),
    }
}

/// The fields APPEND_TURN and APPEND_TURN_BY_HASH share, up to their payload or its hash.
fn append_fields(
    w: &mut ChunkWriter,
    context: &ContextRef,
    expected_head: Option<u64>,
    type_tag: u64,
    codec: u32,
) {
    w.leading_context(context);
    w.u64(expected_head.unwrap_or(0));
    w.u64(type_tag);
    w.u32(codec);
    w.u32(if expected_head.is_some() {
        append_flags::EXPECT_HEAD
    } else {
        0
    });
}

impl AppendsResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            AppendsResponse::Appended(Appended { message_type, .. }) => *message_type,
            AppendsResponse::AppendedTurns(AppendedTurns { .. }) => MessageType::AppendTurns,
        }
    }

    pub(super) fn read(
        kind: Kind,
        message_type: MessageType,
        cursor: &mut Cursor,
    ) -> Result<AppendsResponse, DecodeError> {
        Ok(match kind {
            Kind::AppendTurn | Kind::AppendTurnByHash => {
                let turn = cursor.turn()?;
                let deduped = match cursor.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(cursor.invalid("deduped", "not 0 or 1")),
                };
                cursor.zero(7, "reserved")?;
                AppendsResponse::Appended(Appended {
                    message_type,
                    turn,
                    deduped,
                })
            }
            Kind::AppendTurns => AppendsResponse::AppendedTurns(read_appended_turns(cursor)?),
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            AppendsResponse::Appended(Appended { turn, deduped, .. }) => {
                w.turn(turn);
                w.u8(u8::from(*deduped));
                w.zero(7);
            }
            AppendsResponse::AppendedTurns(appended) => write_appended_turns(w, appended),
        }
    }
}

/// APPENDED_TURNS (APPEND_TURNS' and APPEND_TURNS_VECTORS' answer): `u32 count`, then per
/// turn TURN, `deduped u8`, `existing u8`.
pub(super) fn read_appended_turns(cursor: &mut Cursor) -> Result<AppendedTurns, DecodeError> {
    let count = cursor.list_count()?;
    let mut turns = Vec::with_capacity(cursor.list_capacity(count as usize, 90));
    for _ in 0..count {
        turns.push(AppendedWire {
            turn: cursor.turn()?,
            deduped: cursor.bool("deduped")?,
            existing: cursor.bool("existing")?,
        });
    }
    Ok(AppendedTurns { turns })
}

pub(super) fn write_appended_turns(w: &mut ChunkWriter, AppendedTurns { turns }: &AppendedTurns) {
    w.u32(turns.len() as u32);
    for appended in turns {
        w.turn(&appended.turn);
        w.u8(u8::from(appended.deduped));
        w.u8(u8::from(appended.existing));
    }
}
