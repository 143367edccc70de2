//! The streams family (version 3, issue 32, decision 0027): STREAM_OPEN, STREAM_APPEND,
//! STREAM_SEAL, STREAM_ABORT, STREAM_LIST, STREAM_READ. A stream is a turn in the making:
//! opened with everything an append takes but its payload, fed deltas (each answered once
//! durable, with the stream's new length), sealed into one turn or aborted. STREAM_READ is a
//! long poll: with `wait_ms`, an open stream holding nothing past `offset` is answered when a
//! delta past it is durable, when the stream ends, or at the deadline (an empty answer).
//! WATCH (0x0036) long-polls a context's events the same way (head moves, streams, tags,
//! deletes; sequence numbers to resume from): it lives here, beside the streams it reports.
//! STREAM_FOLLOW (0x0038) is STREAM_READ pushed: one request answered by a series of
//! STREAM_READ bodies (`StreamsResponse::Pushed`), each frame but the last with the frame flag
//! MORE, each starting where the previous ended.
//! Layouts in docs/protocol.md#streams-version-3.

use bytes::Bytes;

use super::answer::{AnswerLimits, ERROR_ANSWER_BYTES_MAX, FIXED_ANSWER_BYTES};
use super::check::{EncodeError, context, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// The streams messages (`Family::of` in codec/mod.rs maps message types to them).
// Named as the message types they stand for (`MessageType`), prefix included.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    StreamOpen,
    StreamAppend,
    StreamSeal,
    StreamAbort,
    StreamList,
    StreamRead,
    Watch,
    StreamFollow,
}

/// Bytes of one STREAM_APPEND's delta at most (the engine's per-call ceiling).
pub const STREAM_DELTA_BYTES_MAX: usize = 1024 * 1024;
/// Streams one STREAM_LIST answers at most.
pub const STREAM_LIST_MAX: u32 = 1024;
/// Longest wait a STREAM_READ may ask for (the server may cut it shorter).
pub const STREAM_WAIT_MS_MAX: u32 = 60_000;
/// Events one WATCH answers at most.
pub const WATCH_EVENTS_MAX: u32 = 1024;
/// `after_seq` of a WATCH that starts now: answered at once with no event and the current
/// position.
pub const WATCH_FROM_NOW: u64 = u64::MAX;
/// Bytes of one WATCH_EVENT.
pub const WATCH_EVENT_BYTES: usize = 33;

/// Which contexts a WATCH follows (`u8 target`, then its fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchTargetWire {
    /// 0: one context, a CONTEXT_REF.
    Context(ContextRef),
    /// 1: contexts whose name starts with this (`u16 len, UTF-8`).
    NamePrefix(String),
    /// 2: contexts with this tag (`u16 len, key, u16 len, value`).
    Tag(String, String),
}

/// What happened (`u8 kind` of a WATCH_EVENT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchKindWire {
    /// 1: the head moved to `turn_id`.
    Head,
    /// 2: stream `stream_id` opened.
    StreamOpened,
    /// 3: stream `stream_id` was sealed into `turn_id`.
    StreamSealed,
    /// 4: stream `stream_id` was aborted.
    StreamAborted,
    /// 5: the context's tags changed.
    Tags,
    /// 6: the context was deleted.
    Deleted,
}

impl WatchKindWire {
    fn code(self) -> u8 {
        match self {
            WatchKindWire::Head => 1,
            WatchKindWire::StreamOpened => 2,
            WatchKindWire::StreamSealed => 3,
            WatchKindWire::StreamAborted => 4,
            WatchKindWire::Tags => 5,
            WatchKindWire::Deleted => 6,
        }
    }

    fn of(code: u8) -> Option<WatchKindWire> {
        Some(match code {
            1 => WatchKindWire::Head,
            2 => WatchKindWire::StreamOpened,
            3 => WatchKindWire::StreamSealed,
            4 => WatchKindWire::StreamAborted,
            5 => WatchKindWire::Tags,
            6 => WatchKindWire::Deleted,
            _ => return None,
        })
    }
}

/// One event (WATCH_EVENT, 33 bytes): `u64 seq, u8 kind, u64 context_id, u64 turn_id,
/// u64 stream_id` (0 where the kind has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchEventWire {
    pub seq: u64,
    pub kind: WatchKindWire,
    pub context_id: u64,
    pub turn_id: u64,
    pub stream_id: u64,
}

/// Bytes of a STREAM_INFO.
pub const STREAM_INFO_BYTES: usize = 56;

/// Bits of STREAM_OPEN's `open_flags`.
pub mod stream_open_flags {
    /// The sealed turn is a summary (as APPEND_TURNS' SUMMARY).
    pub const SUMMARY: u8 = 1 << 0;
    /// The seal is a compare-and-set on the head: `expected_head` must still be the head.
    pub const EXPECT_HEAD: u8 = 1 << 1;
    pub const KNOWN: u8 = SUMMARY | EXPECT_HEAD;
}

/// Bits of STREAM_APPEND's `append_flags`.
pub mod stream_append_flags {
    /// Append only at `offset` (the stream's length): a retried delta is answered again, any
    /// other offset is CONFLICT with the stream's length in `detail`.
    pub const AT_OFFSET: u8 = 1 << 0;
    pub const KNOWN: u8 = AT_OFFSET;
}

/// An open stream (STREAM_INFO, 56 bytes): `u64 stream_id, u64 context_id, u64 length,
/// u64 type_tag, u32 codec, u32 reserved 0, u64 opened_at_unix_ms, u64 updated_at_unix_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StreamInfoWire {
    pub stream_id: u64,
    pub context_id: u64,
    pub length: u64,
    pub type_tag: u64,
    pub codec: u32,
    pub opened_at_unix_ms: u64,
    pub updated_at_unix_ms: u64,
}

/// How a stream stands in a STREAM_READ answer (`u8 state`, then `u64 turn_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamStateWire {
    /// 0: open; `turn_id` 0.
    Open,
    /// 1: sealed into this turn.
    Sealed(u64),
    /// 2: aborted; `turn_id` 0.
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamsRequest {
    StreamOpen(StreamOpen),
    StreamAppend(StreamAppend),
    StreamSeal(StreamSeal),
    StreamAbort(StreamAbort),
    StreamList(StreamList),
    StreamRead(StreamRead),
    Watch(Watch),
    StreamFollow(StreamFollow),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOpen {
    pub context: ContextRef,
    /// `Some`: the seal is a compare-and-set on the head.
    pub expected_head: Option<u64>,
    pub parent: ParentWire,
    pub type_tag: u64,
    pub codec: u32,
    pub summary: bool,
    pub extras: ExtrasWire,
}

/// `offset`: only there (`AT_OFFSET`). 1..=`STREAM_DELTA_BYTES_MAX` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamAppend {
    pub stream_id: u64,
    pub offset: Option<u64>,
    pub bytes: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSeal {
    pub stream_id: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamAbort {
    pub stream_id: u64,
}

/// The context's open streams by StreamID after `after_stream_id`, at most `limit`
/// (1..=`STREAM_LIST_MAX`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamList {
    pub context: ContextRef,
    pub after_stream_id: u64,
    pub limit: u32,
}

/// Up to `bytes_max` (≥ 1) bytes from `offset`; waits up to `wait_ms` for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRead {
    pub stream_id: u64,
    pub offset: u64,
    pub bytes_max: u32,
    pub wait_ms: u32,
}

/// The target's events after `after_seq` (`WATCH_FROM_NOW`: the current position, no
/// event), at most `max_events` (1..=1,024); waits up to `wait_ms` for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    pub target: WatchTargetWire,
    pub after_seq: u64,
    pub max_events: u32,
    pub wait_ms: u32,
}

/// STREAM_READ's fields, answered by a series of frames (`StreamsResponse::Pushed`): the
/// bytes from `offset` as they become durable, up to `bytes_max` (≥ 1) a frame, until the
/// stream ends or no delta came for `wait_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamFollow {
    pub stream_id: u64,
    pub offset: u64,
    pub bytes_max: u32,
    pub wait_ms: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamsResponse {
    Opened(Opened),
    Appended(Appended),
    Sealed(Sealed),
    Aborted(Aborted),
    Listed(Listed),
    Watched(Watched),
    Read(Read),
    Pushed(Pushed),
}

/// Answer to STREAM_OPEN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub info: StreamInfoWire,
}

/// Answer to STREAM_APPEND: the stream's length once the delta is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    pub stream_id: u64,
    pub length: u64,
}

/// Answer to STREAM_SEAL: the turn, as APPEND_TURN answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub turn: TurnWire,
    pub deduped: bool,
}

/// Answer to STREAM_ABORT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aborted {
    pub stream_id: u64,
}

/// Answer to STREAM_LIST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub streams: Vec<StreamInfoWire>,
}

/// Answer to WATCH: the events (oldest first) and the sequence number to resume after;
/// `lagged`: events after the asked one are gone, re-read the state first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    pub lagged: bool,
    pub resume_after: u64,
    pub events: Vec<WatchEventWire>,
}

/// Answer to STREAM_READ: `bytes` start at `offset`; `length` is the stream's (open) or
/// the turn's (sealed) length, 0 when aborted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub stream_id: u64,
    pub state: StreamStateWire,
    pub offset: u64,
    pub length: u64,
    pub bytes: Bytes,
}

/// One frame answering STREAM_FOLLOW: STREAM_READ's answer body, and `more` (the frame
/// flag MORE): more frames follow, the next from `offset + bytes.len()`. A frame with
/// `more` is of an open stream and carries at least one byte; the last frame (no MORE) is
/// the end (sealed, aborted) or an open answer (the follower follows again from its
/// offset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    pub more: bool,
    pub stream_id: u64,
    pub state: StreamStateWire,
    pub offset: u64,
    pub length: u64,
    pub bytes: Bytes,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = StreamsRequest;
pub type Answers = StreamsResponse;

impl StreamsRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            StreamsRequest::StreamOpen(StreamOpen { .. }) => MessageType::StreamOpen,
            StreamsRequest::StreamAppend(StreamAppend { .. }) => MessageType::StreamAppend,
            StreamsRequest::StreamSeal(StreamSeal { .. }) => MessageType::StreamSeal,
            StreamsRequest::StreamAbort(StreamAbort { .. }) => MessageType::StreamAbort,
            StreamsRequest::StreamList(StreamList { .. }) => MessageType::StreamList,
            StreamsRequest::StreamRead(StreamRead { .. }) => MessageType::StreamRead,
            StreamsRequest::Watch(Watch { .. }) => MessageType::Watch,
            StreamsRequest::StreamFollow(StreamFollow { .. }) => MessageType::StreamFollow,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            StreamsRequest::StreamList(StreamList { limit, .. }) => {
                u64::from(*limit) * STREAM_INFO_BYTES as u64 + 4 + ERROR_ANSWER_BYTES_MAX
            }
            // A follow's frames are answers of the same size, reserved one at a time.
            StreamsRequest::StreamRead(StreamRead { bytes_max, .. })
            | StreamsRequest::StreamFollow(StreamFollow { bytes_max, .. }) => {
                let bytes = u64::from(*bytes_max).min(limits.response_bytes_max);
                16 + 41 + 4 + bytes + ERROR_ANSWER_BYTES_MAX
            }
            StreamsRequest::Watch(Watch { max_events, .. }) => {
                u64::from(*max_events) * WATCH_EVENT_BYTES as u64 + 13 + ERROR_ANSWER_BYTES_MAX
            }
            _ => FIXED_ANSWER_BYTES + STREAM_INFO_BYTES as u64,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<StreamsRequest, DecodeError> {
        Ok(match kind {
            Kind::StreamOpen => read_stream_open(cursor)?,
            Kind::StreamAppend => read_stream_append(cursor)?,
            Kind::StreamSeal => StreamsRequest::StreamSeal(StreamSeal {
                stream_id: cursor.u64()?,
            }),
            Kind::StreamAbort => StreamsRequest::StreamAbort(StreamAbort {
                stream_id: cursor.u64()?,
            }),
            Kind::StreamList => {
                let context = cursor.context_ref()?;
                let after_stream_id = cursor.u64()?;
                let limit = count_u32(cursor, "limit", STREAM_LIST_MAX)?;
                StreamsRequest::StreamList(StreamList {
                    context,
                    after_stream_id,
                    limit,
                })
            }
            Kind::StreamRead | Kind::StreamFollow => read_stream_read(kind, cursor)?,
            Kind::Watch => read_watch(cursor)?,
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            StreamsRequest::StreamOpen(StreamOpen {
                context: target,
                parent,
                ..
            }) => {
                context(target)?;
                // Turn 0 is no turn: the decoder refuses it, so it is not sent.
                let turn_id = match parent {
                    ParentWire::Turn(turn_id) => *turn_id,
                    _ => 1,
                };
                within("parent turn_id", turn_id as usize, 1, u64::MAX, "")
            }
            StreamsRequest::StreamAppend(StreamAppend { bytes, .. }) => within(
                "delta",
                bytes.len(),
                1,
                STREAM_DELTA_BYTES_MAX as u64,
                "bytes",
            ),
            StreamsRequest::StreamList(StreamList {
                context: target,
                limit,
                ..
            }) => {
                context(target)?;
                within(
                    "limit",
                    *limit as usize,
                    1,
                    u64::from(STREAM_LIST_MAX),
                    "streams",
                )
            }
            StreamsRequest::StreamRead(StreamRead {
                bytes_max, wait_ms, ..
            })
            | StreamsRequest::StreamFollow(StreamFollow {
                bytes_max, wait_ms, ..
            }) => check_stream_read(*bytes_max, *wait_ms),
            StreamsRequest::Watch(Watch {
                target,
                max_events,
                wait_ms,
                ..
            }) => check_watch(target, *max_events, *wait_ms),
            StreamsRequest::StreamSeal(StreamSeal { .. })
            | StreamsRequest::StreamAbort(StreamAbort { .. }) => Ok(()),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            StreamsRequest::StreamOpen(StreamOpen {
                context,
                expected_head,
                parent,
                type_tag,
                codec,
                summary,
                extras,
            }) => {
                w.context_ref(context);
                w.u8(open_flags(*summary, *expected_head));
                w.u64(expected_head.unwrap_or(0));
                write_parent(w, parent);
                w.u64(*type_tag);
                w.u32(*codec);
                w.extras(extras);
            }
            StreamsRequest::StreamAppend(StreamAppend {
                stream_id,
                offset,
                bytes,
            }) => {
                w.u64(*stream_id);
                w.u8(append_flags(*offset));
                w.u64(offset.unwrap_or(0));
                w.u32(bytes.len() as u32);
                w.data(bytes);
            }
            StreamsRequest::StreamSeal(StreamSeal { stream_id })
            | StreamsRequest::StreamAbort(StreamAbort { stream_id }) => w.u64(*stream_id),
            StreamsRequest::StreamList(StreamList {
                context,
                after_stream_id,
                limit,
            }) => {
                w.context_ref(context);
                w.u64(*after_stream_id);
                w.u32(*limit);
            }
            StreamsRequest::StreamRead(StreamRead {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            })
            | StreamsRequest::StreamFollow(StreamFollow {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }) => {
                w.u64(*stream_id);
                w.u64(*offset);
                w.u32(*bytes_max);
                w.u32(*wait_ms);
            }
            StreamsRequest::Watch(Watch {
                target,
                after_seq,
                max_events,
                wait_ms,
            }) => {
                write_watch_target(w, target);
                w.u64(*after_seq);
                w.u32(*max_events);
                w.u32(*wait_ms);
            }
        }
    }
}

impl StreamsResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            StreamsResponse::Opened(Opened { .. }) => MessageType::StreamOpen,
            StreamsResponse::Appended(Appended { .. }) => MessageType::StreamAppend,
            StreamsResponse::Sealed(Sealed { .. }) => MessageType::StreamSeal,
            StreamsResponse::Aborted(Aborted { .. }) => MessageType::StreamAbort,
            StreamsResponse::Listed(Listed { .. }) => MessageType::StreamList,
            StreamsResponse::Read(Read { .. }) => MessageType::StreamRead,
            StreamsResponse::Watched(Watched { .. }) => MessageType::Watch,
            StreamsResponse::Pushed(Pushed { .. }) => MessageType::StreamFollow,
        }
    }

    /// `more`: the frame flag MORE (only STREAM_FOLLOW's frames carry it: `decode_response`).
    pub(super) fn read(
        kind: Kind,
        cursor: &mut Cursor,
        more: bool,
    ) -> Result<StreamsResponse, DecodeError> {
        Ok(match kind {
            Kind::StreamOpen => StreamsResponse::Opened(Opened {
                info: read_info(cursor)?,
            }),
            Kind::StreamAppend => StreamsResponse::Appended(Appended {
                stream_id: cursor.u64()?,
                length: cursor.u64()?,
            }),
            Kind::StreamSeal => StreamsResponse::Sealed(Sealed {
                turn: cursor.turn()?,
                deduped: cursor.bool("deduped")?,
            }),
            Kind::StreamAbort => StreamsResponse::Aborted(Aborted {
                stream_id: cursor.u64()?,
            }),
            Kind::StreamList => read_listed(cursor)?,
            Kind::StreamRead => {
                let (stream_id, state, offset, length, bytes) = read_stream_answer(cursor)?;
                StreamsResponse::Read(Read {
                    stream_id,
                    state,
                    offset,
                    length,
                    bytes,
                })
            }
            Kind::StreamFollow => {
                let (stream_id, state, offset, length, bytes) = read_stream_answer(cursor)?;
                if more && (state != StreamStateWire::Open || bytes.is_empty()) {
                    return Err(cursor.invalid(
                        "flags",
                        "MORE on a frame that ends the follow (an ended stream, or no bytes)",
                    ));
                }
                StreamsResponse::Pushed(Pushed {
                    more,
                    stream_id,
                    state,
                    offset,
                    length,
                    bytes,
                })
            }
            Kind::Watch => read_watched(cursor)?,
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            StreamsResponse::Opened(Opened { info }) => write_info(w, info),
            StreamsResponse::Appended(Appended { stream_id, length }) => {
                w.u64(*stream_id);
                w.u64(*length);
            }
            StreamsResponse::Sealed(Sealed { turn, deduped }) => {
                w.turn(turn);
                w.u8(u8::from(*deduped));
            }
            StreamsResponse::Aborted(Aborted { stream_id }) => w.u64(*stream_id),
            StreamsResponse::Listed(Listed { streams }) => {
                w.u32(streams.len() as u32);
                for info in streams {
                    write_info(w, info);
                }
            }
            StreamsResponse::Read(Read {
                stream_id,
                state,
                offset,
                length,
                bytes,
            }) => write_stream_answer(w, *stream_id, *state, *offset, *length, bytes),
            StreamsResponse::Pushed(Pushed {
                more,
                stream_id,
                state,
                offset,
                length,
                bytes,
            }) => {
                // The server builds MORE frames only from an open stream's new bytes.
                assert!(
                    !*more || (*state == StreamStateWire::Open && !bytes.is_empty()),
                    "a MORE frame of stream {stream_id} ends nothing and carries bytes"
                );
                write_stream_answer(w, *stream_id, *state, *offset, *length, bytes)
            }
            StreamsResponse::Watched(Watched {
                lagged,
                resume_after,
                events,
            }) => {
                w.u8(u8::from(*lagged));
                w.u64(*resume_after);
                w.u32(events.len() as u32);
                for event in events {
                    w.u64(event.seq);
                    w.u8(event.kind.code());
                    w.u64(event.context_id);
                    w.u64(event.turn_id);
                    w.u64(event.stream_id);
                }
            }
        }
    }
}

/// STREAM_OPEN: `CONTEXT_REF, u8 open_flags, u64 expected_head, u8 parent_kind, u64 parent_turn_id,
/// u64 type_tag, u32 codec`, EXTRAS.
fn read_stream_open(cursor: &mut Cursor) -> Result<StreamsRequest, DecodeError> {
    let context = cursor.context_ref()?;
    let flags = cursor.flags_u8(stream_open_flags::KNOWN, "open_flags")?;
    let expected_head = flagged_u64(
        cursor,
        flags & stream_open_flags::EXPECT_HEAD != 0,
        "expected_head",
        "not 0 without EXPECT_HEAD",
    )?;
    let parent = match (cursor.u8()?, cursor.u64()?) {
        (0, 0) => ParentWire::Head,
        (1, 0) => ParentWire::Root,
        (2, turn_id) if turn_id != 0 => ParentWire::Turn(turn_id),
        _ => {
            return Err(cursor.invalid("parent", "unknown kind, or a turn id where none goes"));
        }
    };
    Ok(StreamsRequest::StreamOpen(StreamOpen {
        context,
        expected_head,
        parent,
        type_tag: cursor.u64()?,
        codec: cursor.u32()?,
        summary: flags & stream_open_flags::SUMMARY != 0,
        extras: cursor.extras()?,
    }))
}

/// STREAM_APPEND: `u64 stream_id, u8 append_flags, u64 offset, u32 delta_len`, the delta.
fn read_stream_append(cursor: &mut Cursor) -> Result<StreamsRequest, DecodeError> {
    let stream_id = cursor.u64()?;
    let flags = cursor.flags_u8(stream_append_flags::KNOWN, "append_flags")?;
    let offset = flagged_u64(
        cursor,
        flags & stream_append_flags::AT_OFFSET != 0,
        "offset",
        "not 0 without AT_OFFSET",
    )?;
    let len = cursor.u32()? as usize;
    if len == 0 {
        return Err(cursor.invalid("delta_len", "a delta has at least one byte"));
    }
    if len > STREAM_DELTA_BYTES_MAX {
        return Err(cursor.too_large("delta_len", len as u64, STREAM_DELTA_BYTES_MAX as u64));
    }
    Ok(StreamsRequest::StreamAppend(StreamAppend {
        stream_id,
        offset,
        bytes: cursor.bytes(len)?,
    }))
}

/// STREAM_READ and STREAM_FOLLOW: `u64 stream_id, u64 offset, u32 bytes_max, u32 wait_ms`.
fn read_stream_read(kind: Kind, cursor: &mut Cursor) -> Result<StreamsRequest, DecodeError> {
    let stream_id = cursor.u64()?;
    let offset = cursor.u64()?;
    let bytes_max = cursor.u32()?;
    if bytes_max == 0 {
        return Err(cursor.invalid("bytes_max", "at least 1"));
    }
    let wait_ms = cursor.u32()?;
    if wait_ms > STREAM_WAIT_MS_MAX {
        return Err(cursor.too_large("wait_ms", u64::from(wait_ms), u64::from(STREAM_WAIT_MS_MAX)));
    }
    Ok(if kind == Kind::StreamFollow {
        StreamsRequest::StreamFollow(StreamFollow {
            stream_id,
            offset,
            bytes_max,
            wait_ms,
        })
    } else {
        StreamsRequest::StreamRead(StreamRead {
            stream_id,
            offset,
            bytes_max,
            wait_ms,
        })
    })
}

/// WATCH: `u8 target_kind`, the target, `u64 after_seq, u32 max_events, u32 wait_ms`.
fn read_watch(cursor: &mut Cursor) -> Result<StreamsRequest, DecodeError> {
    let target = match cursor.u8()? {
        0 => WatchTargetWire::Context(cursor.context_ref()?),
        1 => WatchTargetWire::NamePrefix(cursor.short_string("name prefix")?),
        2 => {
            let key = cursor.short_string("tag key")?;
            WatchTargetWire::Tag(key, cursor.short_string("tag value")?)
        }
        _ => return Err(cursor.invalid("target", "unknown watch target")),
    };
    let after_seq = cursor.u64()?;
    let max_events = count_u32(cursor, "max_events", WATCH_EVENTS_MAX)?;
    let wait_ms = cursor.u32()?;
    if wait_ms > STREAM_WAIT_MS_MAX {
        return Err(cursor.too_large("wait_ms", u64::from(wait_ms), u64::from(STREAM_WAIT_MS_MAX)));
    }
    Ok(StreamsRequest::Watch(Watch {
        target,
        after_seq,
        max_events,
        wait_ms,
    }))
}

/// STREAM_READ and STREAM_FOLLOW's `check`.
fn check_stream_read(bytes_max: u32, wait_ms: u32) -> Result<(), EncodeError> {
    within(
        "bytes_max",
        bytes_max as usize,
        1,
        u64::from(u32::MAX),
        "bytes",
    )?;
    within(
        "wait_ms",
        wait_ms as usize,
        0,
        u64::from(STREAM_WAIT_MS_MAX),
        "ms",
    )
}

/// WATCH's `check`.
fn check_watch(target: &WatchTargetWire, max_events: u32, wait_ms: u32) -> Result<(), EncodeError> {
    match target {
        WatchTargetWire::Context(target) => context(target)?,
        WatchTargetWire::NamePrefix(prefix) => {
            within("name prefix", prefix.len(), 0, u64::from(u16::MAX), "bytes")?
        }
        WatchTargetWire::Tag(key, value) => {
            within("tag key", key.len(), 0, u64::from(u16::MAX), "bytes")?;
            within("tag value", value.len(), 0, u64::from(u16::MAX), "bytes")?
        }
    }
    within(
        "max_events",
        max_events as usize,
        1,
        u64::from(WATCH_EVENTS_MAX),
        "events",
    )?;
    within(
        "wait_ms",
        wait_ms as usize,
        0,
        u64::from(STREAM_WAIT_MS_MAX),
        "ms",
    )
}

/// STREAM_OPEN's `open_flags`.
fn open_flags(summary: bool, expected_head: Option<u64>) -> u8 {
    let mut flags = 0;
    if summary {
        flags |= stream_open_flags::SUMMARY;
    }
    if expected_head.is_some() {
        flags |= stream_open_flags::EXPECT_HEAD;
    }
    flags
}

/// STREAM_OPEN's parent: `u8 kind` (0 head, 1 root, 2 a turn), `u64 turn_id` (0 but for a turn).
fn write_parent(w: &mut ChunkWriter, parent: &ParentWire) {
    let (kind, turn_id) = match parent {
        ParentWire::Head => (0, 0),
        ParentWire::Root => (1, 0),
        ParentWire::Turn(turn_id) => (2, *turn_id),
    };
    w.u8(kind);
    w.u64(turn_id);
}

/// WATCH's target: `u8 kind`, then a CONTEXT_REF (0), a name prefix (1) or a tag (2).
fn write_watch_target(w: &mut ChunkWriter, target: &WatchTargetWire) {
    match target {
        WatchTargetWire::Context(context) => {
            w.u8(0);
            w.context_ref(context);
        }
        WatchTargetWire::NamePrefix(prefix) => {
            w.u8(1);
            w.short(prefix.as_bytes());
        }
        WatchTargetWire::Tag(key, value) => {
            w.u8(2);
            w.short(key.as_bytes());
            w.short(value.as_bytes());
        }
    }
}

/// STREAM_APPEND's `append_flags`.
fn append_flags(offset: Option<u64>) -> u8 {
    if offset.is_some() {
        stream_append_flags::AT_OFFSET
    } else {
        0
    }
}

/// STREAM_LIST's answer: `u32 count`, STREAM_INFO × count.
fn read_listed(cursor: &mut Cursor) -> Result<StreamsResponse, DecodeError> {
    let count = cursor.list_count()?;
    if count > STREAM_LIST_MAX {
        return Err(cursor.too_large("count", u64::from(count), u64::from(STREAM_LIST_MAX)));
    }
    let mut streams = Vec::with_capacity(cursor.list_capacity(count as usize, STREAM_INFO_BYTES));
    for _ in 0..count {
        streams.push(read_info(cursor)?);
    }
    Ok(StreamsResponse::Listed(Listed { streams }))
}

/// WATCH's answer: `u8 lagged, u64 resume_after, u32 count`, WATCH_EVENT × count.
fn read_watched(cursor: &mut Cursor) -> Result<StreamsResponse, DecodeError> {
    let lagged = cursor.bool("lagged")?;
    let resume_after = cursor.u64()?;
    let count = cursor.list_count()?;
    if count > WATCH_EVENTS_MAX {
        return Err(cursor.too_large("count", u64::from(count), u64::from(WATCH_EVENTS_MAX)));
    }
    let mut events = Vec::with_capacity(cursor.list_capacity(count as usize, WATCH_EVENT_BYTES));
    for _ in 0..count {
        let seq = cursor.u64()?;
        let kind = WatchKindWire::of(cursor.u8()?)
            .ok_or_else(|| cursor.invalid("kind", "unknown watch event kind"))?;
        events.push(WatchEventWire {
            seq,
            kind,
            context_id: cursor.u64()?,
            turn_id: cursor.u64()?,
            stream_id: cursor.u64()?,
        });
    }
    if lagged && !events.is_empty() {
        return Err(cursor.invalid("lagged", "a lagged answer carries no events"));
    }
    Ok(StreamsResponse::Watched(Watched {
        lagged,
        resume_after,
        events,
    }))
}

/// STREAM_READ's answer body, which STREAM_FOLLOW's frames carry too: `u64 stream_id,
/// u8 state, u64 turn_id, u64 offset, u64 length, u32 len, bytes`.
fn read_stream_answer(
    cursor: &mut Cursor,
) -> Result<(u64, StreamStateWire, u64, u64, Bytes), DecodeError> {
    let stream_id = cursor.u64()?;
    let state = match (cursor.u8()?, cursor.u64()?) {
        (0, 0) => StreamStateWire::Open,
        (1, turn_id) if turn_id != 0 => StreamStateWire::Sealed(turn_id),
        (2, 0) => StreamStateWire::Aborted,
        _ => return Err(cursor.invalid("state", "unknown, or a turn where none goes")),
    };
    let offset = cursor.u64()?;
    let length = cursor.u64()?;
    let len = cursor.u32()? as usize;
    let bytes = cursor.bytes(len)?;
    if state != StreamStateWire::Open && !bytes.is_empty() {
        return Err(cursor.invalid("bytes", "an ended stream's answer carries none"));
    }
    Ok((stream_id, state, offset, length, bytes))
}

fn write_stream_answer(
    w: &mut ChunkWriter,
    stream_id: u64,
    state: StreamStateWire,
    offset: u64,
    length: u64,
    bytes: &Bytes,
) {
    w.u64(stream_id);
    let (code, turn_id) = match state {
        StreamStateWire::Open => (0, 0),
        StreamStateWire::Sealed(turn_id) => (1, turn_id),
        StreamStateWire::Aborted => (2, 0),
    };
    w.u8(code);
    w.u64(turn_id);
    w.u64(offset);
    w.u64(length);
    w.u32(bytes.len() as u32);
    w.data(bytes);
}

/// A `u64` that a flag bit says is there: `None` without the bit, where it must be 0.
fn flagged_u64(
    cursor: &mut Cursor,
    present: bool,
    field: &'static str,
    reason: &'static str,
) -> Result<Option<u64>, DecodeError> {
    let value = cursor.u64()?;
    match (present, value) {
        (true, value) => Ok(Some(value)),
        (false, 0) => Ok(None),
        (false, _) => Err(cursor.invalid(field, reason)),
    }
}

/// A `u32` count of 1..=`max`.
fn count_u32(cursor: &mut Cursor, field: &'static str, max: u32) -> Result<u32, DecodeError> {
    let count = cursor.u32()?;
    if count == 0 {
        return Err(cursor.invalid(field, "at least 1"));
    }
    if count > max {
        return Err(cursor.too_large(field, u64::from(count), u64::from(max)));
    }
    Ok(count)
}

fn read_info(cursor: &mut Cursor) -> Result<StreamInfoWire, DecodeError> {
    let stream_id = cursor.u64()?;
    let context_id = cursor.u64()?;
    let length = cursor.u64()?;
    let type_tag = cursor.u64()?;
    let codec = cursor.u32()?;
    cursor.zero(4, "stream_info reserved")?;
    Ok(StreamInfoWire {
        stream_id,
        context_id,
        length,
        type_tag,
        codec,
        opened_at_unix_ms: cursor.u64()?,
        updated_at_unix_ms: cursor.u64()?,
    })
}

fn write_info(w: &mut ChunkWriter, info: &StreamInfoWire) {
    w.u64(info.stream_id);
    w.u64(info.context_id);
    w.u64(info.length);
    w.u64(info.type_tag);
    w.u32(info.codec);
    w.zero(4);
    w.u64(info.opened_at_unix_ms);
    w.u64(info.updated_at_unix_ms);
}
