"""The streams family on the wire (protocol version 3, issue 32, decision 0027): STREAM_OPEN,
STREAM_APPEND, STREAM_SEAL, STREAM_ABORT, STREAM_LIST, STREAM_READ and WATCH (0x0030-0x0036),
and STREAM_FOLLOW (0x0038, answered by STREAM_PUSHED frames, ``MORE`` on all but the last),
each request and its answer encoded and strictly decoded here, and nowhere else (style.md §8:
a message family is owned by one module per layer; :mod:`ctxstore._protocol` holds the frame
and the shared records, and imports this module so that its registry knows these types).

Layouts in docs/protocol.md#streams-version-3-issue-32-decision-0027; golden frames in
protocol/tests/golden-v3-streams.txt and golden-v3-follow.txt.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from ._protocol import (
    MORE,
    RESPONSE_BIT,
    ContextRef,
    ExtrasRecord,
    ParentKind,
    Reader,
    Request,
    Response,
    TurnRecord,
    _context_ref,
    _short_str,
    _u8,
    _u32,
    _u64,
    register_request,
    register_response,
)
from ._wire import MessageType
from .errors import ProtocolError

__all__ = [
    "StreamsMessageType",
    "StreamState",
    "WatchKind",
    "StreamInfoRecord",
    "WatchEventRecord",
    "StreamOpen",
    "StreamAppend",
    "StreamSeal",
    "StreamAbort",
    "StreamList",
    "StreamRead",
    "StreamFollow",
    "Watch",
    "StreamInfoResponse",
    "StreamAppendedResponse",
    "StreamSealedResponse",
    "StreamAbortedResponse",
    "StreamListResponse",
    "StreamBytesResponse",
    "StreamPushedResponse",
    "WatchedResponse",
    "STREAM_INFO_BYTES",
    "WATCH_EVENT_BYTES",
    "STREAM_DELTA_BYTES_MAX",
    "STREAM_LIST_MAX",
    "STREAM_WAIT_MS_MAX",
    "WATCH_EVENTS_MAX",
    "WATCH_FROM_NOW",
    "WatchTarget",
]

STREAM_INFO_BYTES = 56
"""STREAM_INFO: ``u64 stream_id, u64 context_id, u64 length, u64 type_tag, u32 codec, u32
reserved 0, u64 opened_at_unix_ms, u64 updated_at_unix_ms``."""
WATCH_EVENT_BYTES = 33
"""WATCH_EVENT: ``u64 seq, u8 kind, u64 context_id, u64 turn_id, u64 stream_id``."""
STREAM_DELTA_BYTES_MAX = 1 << 20
"""Bytes of one STREAM_APPEND's delta at most (1 MiB)."""
STREAM_LIST_MAX = 1024
"""Streams one STREAM_LIST answers at most."""
STREAM_WAIT_MS_MAX = 60_000
"""The longest wait a STREAM_READ or WATCH may ask for (the server may cut it shorter)."""
WATCH_EVENTS_MAX = 1024
"""Events one WATCH answers at most."""
WATCH_FROM_NOW = 0xFFFF_FFFF_FFFF_FFFF
"""``after_seq`` of a WATCH that starts now: answered at once, no event, the position."""

OPEN_SUMMARY = 1 << 0
"""STREAM_OPEN ``open_flags`` bit 0: the sealed turn is a summary."""
OPEN_EXPECT_HEAD = 1 << 1
"""STREAM_OPEN ``open_flags`` bit 1: the seal appends only if the head is ``expected_head``."""
OPEN_FLAGS_KNOWN = OPEN_SUMMARY | OPEN_EXPECT_HEAD
APPEND_AT_OFFSET = 1 << 0
"""STREAM_APPEND ``append_flags`` bit 0: write the delta only at ``offset``."""


class StreamsMessageType(IntEnum):
    """The streams family's request types (version 3); a response has ``request | 0x8000``."""

    STREAM_OPEN = MessageType.STREAM_OPEN.value
    STREAM_APPEND = MessageType.STREAM_APPEND.value
    STREAM_SEAL = MessageType.STREAM_SEAL.value
    STREAM_ABORT = MessageType.STREAM_ABORT.value
    STREAM_LIST = MessageType.STREAM_LIST.value
    STREAM_READ = MessageType.STREAM_READ.value
    WATCH = MessageType.WATCH.value
    STREAM_FOLLOW = MessageType.STREAM_FOLLOW.value

    @property
    def response_type(self) -> int:
        """The ``msg_type`` of this request's response frame."""
        return int(self) | RESPONSE_BIT


class StreamState(IntEnum):
    """How a stream stands in a STREAM_READ answer (``u8 state``)."""

    OPEN = 0
    SEALED = 1
    """Sealed into ``turn_id``."""
    ABORTED = 2


class WatchKind(IntEnum):
    """What a WATCH_EVENT reports (``u8 kind``)."""

    HEAD = 1
    """The head moved to ``turn_id``."""
    STREAM_OPENED = 2
    STREAM_SEALED = 3
    """Stream ``stream_id`` was sealed into ``turn_id``."""
    STREAM_ABORTED = 4
    TAGS = 5
    """The context's tags changed."""
    DELETED = 6
    """The context was deleted."""


_WATCH_KINDS = frozenset(int(kind) for kind in WatchKind)


def _checked_u32(reader: Reader, field: str, low: int, high: int) -> int:
    value = reader.u32(field)
    if value < low:
        raise reader.error(field, f"at least {low}")
    return reader.limit(value, high, field)


@dataclass(frozen=True, slots=True)
class StreamInfoRecord:
    """STREAM_INFO (56 bytes): an open stream."""

    stream_id: int
    context_id: int
    length: int
    """Acknowledged (durable) bytes so far."""
    type_tag: int
    codec: int
    opened_at_unix_ms: int
    updated_at_unix_ms: int

    def encode(self) -> bytes:
        """The record's bytes."""
        return (
            _u64(self.stream_id)
            + _u64(self.context_id)
            + _u64(self.length)
            + _u64(self.type_tag)
            + _u32(self.codec)
            + bytes(4)
            + _u64(self.opened_at_unix_ms)
            + _u64(self.updated_at_unix_ms)
        )

    @classmethod
    def read(cls, reader: Reader) -> StreamInfoRecord:
        """One STREAM_INFO from ``reader``."""
        stream_id = reader.u64("stream_id")
        context_id = reader.u64("context_id")
        length = reader.u64("length")
        type_tag = reader.u64("type_tag")
        codec = reader.u32("codec")
        reader.zero(4, "stream_info reserved")
        opened = reader.u64("opened_at_unix_ms")
        return cls(
            stream_id, context_id, length, type_tag, codec, opened, reader.u64("updated_at_unix_ms")
        )


@dataclass(frozen=True, slots=True)
class WatchEventRecord:
    """WATCH_EVENT (33 bytes); ``turn_id`` and ``stream_id`` are 0 where the kind has none."""

    seq: int
    kind: WatchKind
    context_id: int
    turn_id: int
    stream_id: int

    def encode(self) -> bytes:
        """The record's bytes."""
        return (
            _u64(self.seq)
            + _u8(int(self.kind))
            + _u64(self.context_id)
            + _u64(self.turn_id)
            + _u64(self.stream_id)
        )


# --- requests ---------------------------------------------------------------------------------


@register_request
@dataclass(frozen=True, slots=True)
class StreamOpen(Request):
    """STREAM_OPEN (0x0030, v3): a stream on a context, with everything its seal appends but
    the payload. Body: ``context ref, u8 open_flags (SUMMARY, EXPECT_HEAD), u64 expected_head
    (0 without EXPECT_HEAD), u8 parent_kind, u64 parent_turn_id, u64 type_tag, u32 codec,
    EXTRAS``."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_OPEN
    NAME: ClassVar[str] = "STREAM_OPEN"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    expected_head: int | None
    parent_kind: ParentKind
    parent_turn_id: int
    type_tag: int
    codec: int
    summary: bool
    extras: ExtrasRecord

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if (self.parent_kind == ParentKind.TURN) != (self.parent_turn_id != 0):
            raise ValueError("parent_turn_id is set with parent kind TURN only (and 0 is no turn)")
        flags = (OPEN_SUMMARY if self.summary else 0) | (
            0 if self.expected_head is None else OPEN_EXPECT_HEAD
        )
        return [
            _context_ref(self.context)
            + _u8(flags)
            + _u64(self.expected_head or 0)
            + _u8(int(self.parent_kind))
            + _u64(self.parent_turn_id)
            + _u64(self.type_tag)
            + _u32(self.codec)
            + self.extras.encode()
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamOpen:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        flags = reader.u8("open_flags")
        if flags & ~OPEN_FLAGS_KNOWN:
            raise reader.error("open_flags", "unknown flag bits")
        expected_head = reader.u64("expected_head")
        if not flags & OPEN_EXPECT_HEAD and expected_head:
            raise reader.error("expected_head", "not 0 without EXPECT_HEAD")
        kind = reader.u8("parent_kind")
        parent_turn_id = reader.u64("parent_turn_id")
        if kind not in (0, 1, 2) or (kind == ParentKind.TURN) != (parent_turn_id != 0):
            raise reader.error("parent", "unknown kind, or a turn id where none goes")
        return cls(
            context,
            expected_head if flags & OPEN_EXPECT_HEAD else None,
            ParentKind(kind),
            parent_turn_id,
            reader.u64("type_tag"),
            reader.u32("codec"),
            bool(flags & OPEN_SUMMARY),
            reader.extras(),
        )


@register_request
@dataclass(frozen=True, slots=True)
class StreamAppend(Request):
    """STREAM_APPEND (0x0031, v3): a delta. Body: ``u64 stream_id, u8 append_flags
    (AT_OFFSET), u64 offset (0 without AT_OFFSET), u32 len, len bytes`` (1 byte to 1 MiB)."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_APPEND
    NAME: ClassVar[str] = "STREAM_APPEND"
    MIN_VERSION: ClassVar[int] = 3

    stream_id: int
    offset: int | None
    """Write only at this offset (the stream's length): a retry is answered again."""
    data: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not 1 <= len(self.data) <= STREAM_DELTA_BYTES_MAX:
            raise ValueError(
                f"a delta is 1 to {STREAM_DELTA_BYTES_MAX} bytes, not {len(self.data)}"
            )
        flags = 0 if self.offset is None else APPEND_AT_OFFSET
        head = _u64(self.stream_id) + _u8(flags) + _u64(self.offset or 0) + _u32(len(self.data))
        return [head, bytes(self.data)]

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamAppend:
        """See :meth:`Message.decode_body`."""
        stream_id = reader.u64("stream_id")
        flags = reader.u8("append_flags")
        if flags & ~APPEND_AT_OFFSET:
            raise reader.error("append_flags", "unknown flag bits")
        offset = reader.u64("offset")
        if not flags & APPEND_AT_OFFSET and offset:
            raise reader.error("offset", "not 0 without AT_OFFSET")
        length = _checked_u32(reader, "delta_len", 1, STREAM_DELTA_BYTES_MAX)
        data = reader.take(length, "delta")
        return cls(stream_id, offset if flags & APPEND_AT_OFFSET else None, data)


@dataclass(frozen=True, slots=True)
class _StreamIdRequest(Request):
    """A request whose body is ``u64 stream_id``."""

    stream_id: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_u64(self.stream_id)]

    @classmethod
    def decode_body(cls, reader: Reader) -> _StreamIdRequest:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("stream_id"))


@register_request
@dataclass(frozen=True, slots=True)
class StreamSeal(_StreamIdRequest):
    """STREAM_SEAL (0x0032, v3): the stream becomes one ordinary turn."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_SEAL
    NAME: ClassVar[str] = "STREAM_SEAL"
    MIN_VERSION: ClassVar[int] = 3


@register_request
@dataclass(frozen=True, slots=True)
class StreamAbort(_StreamIdRequest):
    """STREAM_ABORT (0x0033, v3): the stream never becomes a turn."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_ABORT
    NAME: ClassVar[str] = "STREAM_ABORT"
    MIN_VERSION: ClassVar[int] = 3


@register_request
@dataclass(frozen=True, slots=True)
class StreamList(Request):
    """STREAM_LIST (0x0034, v3): a context's open streams after ``after_stream_id``. Body:
    ``context ref, u64 after_stream_id, u32 limit`` (1..=1,024)."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_LIST
    NAME: ClassVar[str] = "STREAM_LIST"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    after_stream_id: int
    limit: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not 1 <= self.limit <= STREAM_LIST_MAX:
            raise ValueError(f"limit is 1 to {STREAM_LIST_MAX}, not {self.limit}")
        return [_context_ref(self.context) + _u64(self.after_stream_id) + _u32(self.limit)]

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamList:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        after = reader.u64("after_stream_id")
        return cls(context, after, _checked_u32(reader, "limit", 1, STREAM_LIST_MAX))


def _check_wait(wait_ms: int) -> None:
    if not 0 <= wait_ms <= STREAM_WAIT_MS_MAX:
        raise ValueError(f"wait_ms is 0 to {STREAM_WAIT_MS_MAX}, not {wait_ms}")


@register_request
@dataclass(frozen=True, slots=True)
class StreamRead(Request):
    """STREAM_READ (0x0035, v3): up to ``bytes_max`` bytes from ``offset``; with ``wait_ms`` a
    long poll. Body: ``u64 stream_id, u64 offset, u32 bytes_max (>= 1), u32 wait_ms``."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_READ
    NAME: ClassVar[str] = "STREAM_READ"
    MIN_VERSION: ClassVar[int] = 3

    stream_id: int
    offset: int
    bytes_max: int
    wait_ms: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if self.bytes_max < 1:
            raise ValueError(f"bytes_max is at least 1, not {self.bytes_max}")
        _check_wait(self.wait_ms)
        return [
            _u64(self.stream_id) + _u64(self.offset) + _u32(self.bytes_max) + _u32(self.wait_ms)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamRead:
        """See :meth:`Message.decode_body`."""
        stream_id = reader.u64("stream_id")
        offset = reader.u64("offset")
        bytes_max = _checked_u32(reader, "bytes_max", 1, 0xFFFF_FFFF)
        wait_ms = reader.limit(reader.u32("wait_ms"), STREAM_WAIT_MS_MAX, "wait_ms")
        return cls(stream_id, offset, bytes_max, wait_ms)


@register_request
@dataclass(frozen=True, slots=True)
class StreamFollow(StreamRead):
    """STREAM_FOLLOW (0x0038, v3): STREAM_READ pushed. STREAM_READ's body; answered by a
    series of STREAM_PUSHED frames (``bytes_max`` per frame), ``MORE`` on all but the last,
    which is the stream's end, an open frame after ``wait_ms`` without a delta, or an ERROR."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.STREAM_FOLLOW
    NAME: ClassVar[str] = "STREAM_FOLLOW"


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """What a WATCH follows: exactly one of a context (``context``), the contexts whose name
    starts with ``name_prefix``, or those tagged ``tag`` (key, value)."""

    context: ContextRef | None = None
    name_prefix: str | None = None
    tag: tuple[str, str] | None = None

    def encode(self) -> bytes:
        """``u8 target``, then its fields."""
        if self.context is not None:
            return _u8(0) + _context_ref(self.context)
        if self.name_prefix is not None:
            return _u8(1) + _short_str(self.name_prefix, "name prefix")
        if self.tag is not None:
            key, value = self.tag
            return _u8(2) + _short_str(key, "tag key") + _short_str(value, "tag value")
        raise ValueError("a watch target is a context, a name prefix or a tag")

    @classmethod
    def read(cls, reader: Reader) -> WatchTarget:
        """A target from ``reader``."""
        kind = reader.u8("target")
        if kind == 0:
            return cls(context=reader.context_ref())
        if kind == 1:
            return cls(name_prefix=reader.short_string("name prefix"))
        if kind == 2:
            key = reader.short_string("tag key")
            return cls(tag=(key, reader.short_string("tag value")))
        raise reader.error("target", f"unknown watch target {kind}")


@register_request
@dataclass(frozen=True, slots=True)
class Watch(Request):
    """WATCH (0x0036, v3): the target's events after ``after_seq``; a long poll. Body:
    ``target, u64 after_seq, u32 max_events (1..=1,024), u32 wait_ms``."""

    MSG_TYPE: ClassVar[int] = StreamsMessageType.WATCH
    NAME: ClassVar[str] = "WATCH"
    MIN_VERSION: ClassVar[int] = 3

    target: WatchTarget
    after_seq: int
    max_events: int
    wait_ms: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not 1 <= self.max_events <= WATCH_EVENTS_MAX:
            raise ValueError(f"max_events is 1 to {WATCH_EVENTS_MAX}, not {self.max_events}")
        _check_wait(self.wait_ms)
        return [
            self.target.encode() + _u64(self.after_seq) + _u32(self.max_events) + _u32(self.wait_ms)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> Watch:
        """See :meth:`Message.decode_body`."""
        target = WatchTarget.read(reader)
        after_seq = reader.u64("after_seq")
        max_events = _checked_u32(reader, "max_events", 1, WATCH_EVENTS_MAX)
        wait_ms = reader.limit(reader.u32("wait_ms"), STREAM_WAIT_MS_MAX, "wait_ms")
        return cls(target, after_seq, max_events, wait_ms)


# --- responses --------------------------------------------------------------------------------


@register_response
@dataclass(frozen=True, slots=True)
class StreamInfoResponse(Response):
    """STREAM_INFO (0x8030): the opened stream."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_OPEN.response_type,)
    NAME: ClassVar[str] = "STREAM_INFO"

    info: StreamInfoRecord

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.info.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamInfoResponse:
        """See :meth:`Message.decode_body`."""
        return cls(StreamInfoRecord.read(reader))


@register_response
@dataclass(frozen=True, slots=True)
class StreamAppendedResponse(Response):
    """STREAM_APPENDED (0x8031): ``u64 stream_id, u64 length`` once the delta is durable."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_APPEND.response_type,)
    NAME: ClassVar[str] = "STREAM_APPENDED"

    stream_id: int
    length: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u64(self.stream_id) + _u64(self.length)

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamAppendedResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("stream_id"), reader.u64("length"))


@register_response
@dataclass(frozen=True, slots=True)
class StreamSealedResponse(Response):
    """The answer to STREAM_SEAL (0x8032): ``TURN, u8 deduped`` (no reserved bytes after)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_SEAL.response_type,)
    NAME: ClassVar[str] = "STREAM_SEALED"

    turn: TurnRecord
    deduped: bool

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.turn.encode() + _u8(int(self.deduped))

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamSealedResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.turn(), reader.boolean("deduped"))


@register_response
@dataclass(frozen=True, slots=True)
class StreamAbortedResponse(Response):
    """STREAM_ABORTED (0x8033): ``u64 stream_id``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_ABORT.response_type,)
    NAME: ClassVar[str] = "STREAM_ABORTED"

    stream_id: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u64(self.stream_id)

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamAbortedResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("stream_id"))


@register_response
@dataclass(frozen=True, slots=True)
class StreamListResponse(Response):
    """STREAM_LIST (0x8034): ``u32 count, count x STREAM_INFO``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_LIST.response_type,)
    NAME: ClassVar[str] = "STREAM_LIST"

    streams: tuple[StreamInfoRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u32(len(self.streams)) + b"".join(info.encode() for info in self.streams)

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamListResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), STREAM_LIST_MAX, "count")
        reader.count(count, STREAM_INFO_BYTES, "streams")
        return cls(tuple(StreamInfoRecord.read(reader) for _ in range(count)))


@register_response
@dataclass(frozen=True, slots=True)
class StreamBytesResponse(Response):
    """STREAM_BYTES (0x8035): ``u64 stream_id, u8 state, u64 turn_id (sealed: the turn, else
    0), u64 offset, u64 length (open: the acknowledged bytes), u32 len, len bytes`` (none
    once ended)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_READ.response_type,)
    NAME: ClassVar[str] = "STREAM_BYTES"

    stream_id: int
    state: StreamState
    turn_id: int
    offset: int
    length: int
    data: bytes

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _u64(self.stream_id)
            + _u8(int(self.state))
            + _u64(self.turn_id)
            + _u64(self.offset)
            + _u64(self.length)
            + _u32(len(self.data))
            + bytes(self.data)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> StreamBytesResponse:
        """See :meth:`Message.decode_body`."""
        stream_id = reader.u64("stream_id")
        state = reader.u8("state")
        turn_id = reader.u64("turn_id")
        if state not in (0, 1, 2) or (state == StreamState.SEALED) != (turn_id != 0):
            raise reader.error("state", "unknown, or a turn where none goes")
        offset = reader.u64("offset")
        length = reader.u64("length")
        data = reader.take(reader.u32("len"), "bytes")
        if state != StreamState.OPEN and data:
            raise reader.error("bytes", "an ended stream's answer carries none")
        return cls(stream_id, StreamState(state), turn_id, offset, length, data)


@register_response
@dataclass(frozen=True, slots=True)
class StreamPushedResponse(StreamBytesResponse):
    """STREAM_PUSHED (0x8038): one frame of a STREAM_FOLLOW's answer, STREAM_BYTES's body byte
    for byte; ``more`` (the frame flag ``MORE``): frames follow for the same req_id. Only a
    frame of an open stream holding bytes may carry it (docs/protocol.md#stream_follow-0x0038)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.STREAM_FOLLOW.response_type,)
    NAME: ClassVar[str] = "STREAM_PUSHED"
    CARRIES_MORE: ClassVar[bool] = True

    more: bool = False

    @property
    def frame_flags(self) -> int:
        """``MORE`` on every frame but a follow's last."""
        return MORE if self.more else 0

    def with_more(self) -> StreamPushedResponse:
        """This frame as sent with ``MORE``; a ProtocolError unless it is an open stream's
        with bytes (the server sends ``MORE`` on no other: the connection is broken)."""
        if self.state != StreamState.OPEN or not self.data:
            raise ProtocolError(
                f"STREAM_PUSHED of stream {self.stream_id} at {self.offset} carries MORE on a "
                f"{self.state.name.lower()} stream's frame of {len(self.data)} bytes (only an "
                "open stream's frame with bytes may)"
            )
        return StreamPushedResponse(
            self.stream_id, self.state, self.turn_id, self.offset, self.length, self.data, True
        )


@register_response
@dataclass(frozen=True, slots=True)
class WatchedResponse(Response):
    """WATCHED (0x8036): ``u8 lagged, u64 resume_after, u32 count, count x WATCH_EVENT``; a
    lagged answer carries no event."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (StreamsMessageType.WATCH.response_type,)
    NAME: ClassVar[str] = "WATCHED"

    lagged: bool
    resume_after: int
    events: tuple[WatchEventRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _u8(int(self.lagged))
            + _u64(self.resume_after)
            + _u32(len(self.events))
            + b"".join(event.encode() for event in self.events)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> WatchedResponse:
        """See :meth:`Message.decode_body`."""
        lagged = reader.boolean("lagged")
        resume_after = reader.u64("resume_after")
        count = reader.limit(reader.u32("count"), WATCH_EVENTS_MAX, "count")
        reader.count(count, WATCH_EVENT_BYTES, "events")
        events = []
        for _ in range(count):
            seq = reader.u64("seq")
            kind = reader.u8("kind")
            if kind not in _WATCH_KINDS:
                raise reader.error("kind", f"unknown watch event kind {kind}")
            context_id = reader.u64("context_id")
            turn_id = reader.u64("turn_id")
            events.append(
                WatchEventRecord(seq, WatchKind(kind), context_id, turn_id, reader.u64("stream_id"))
            )
        if lagged and events:
            raise reader.error("lagged", "a lagged answer carries no events")
        return cls(lagged, resume_after, tuple(events))
