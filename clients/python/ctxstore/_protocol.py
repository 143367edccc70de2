"""The ctxstore wire protocol, version 1, byte for byte as in docs/protocol.md.

No I/O: frames and message bodies to and from bytes. Both directions are implemented (the
client encodes requests and decodes responses; tests also decode requests and encode
responses, e.g. for the golden vectors and for test servers).

Decoding is strict: every field must be present, a body must end exactly where its message
ends, reserved fields and unknown flag bits must be zero, enums must hold a known value,
strings must be UTF-8, lengths must be within their limits. Any violation raises
:class:`~ctxstore.errors.ProtocolError`; no other exception escapes a decoder.

Extending the protocol (a later version): define a request dataclass deriving from
:class:`Request` with ``MSG_TYPE``, ``NAME``, ``MIN_VERSION``, ``body_chunks`` and
``decode_body``, decorate it with :func:`register_request`; define its response deriving from
:class:`Response` with ``MSG_TYPES``, ``encode_body`` and ``decode_body``, decorate it with
:func:`register_response`. The client's generic ``request()`` then sends it, refuses it on a
connection that negotiated an older version, and decodes its answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, TypeVar

from .errors import ProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "HEADER_BYTES",
    "FRAME_BYTES_LIMIT",
    "RESPONSE_BIT",
    "ERROR_TYPE",
    "TOKEN_BYTES_MAX",
    "NAME_BYTES_MAX",
    "MESSAGE_BYTES_MAX",
    "LIST_ITEMS_LIMIT",
    "HASH_BYTES",
    "TURN_BYTES",
    "CONTEXT_HEAD_BYTES",
    "PAYLOAD_HEADER_BYTES",
    "READ_WITH_PAYLOADS",
    "READ_ACCEPT_ZSTD",
    "READ_FLAGS_KNOWN",
    "APPEND_EXPECT_HEAD",
    "APPEND_FLAGS_KNOWN",
    "MessageType",
    "PayloadEncoding",
    "FrameHeader",
    "FrameReader",
    "Reader",
    "Message",
    "Request",
    "Response",
    "TurnRecord",
    "ContextHeadRecord",
    "PayloadRecord",
    "TurnEntry",
    "Hello",
    "Ping",
    "CtxCreate",
    "CtxFork",
    "GetHead",
    "AppendTurn",
    "AppendTurnByHash",
    "GetTurn",
    "GetLast",
    "GetBefore",
    "GetRangeByDepth",
    "GetChain",
    "GetBlob",
    "HasBlobs",
    "Stats",
    "RawRequest",
    "HelloResponse",
    "Pong",
    "ContextResponse",
    "AppendedResponse",
    "TurnResponse",
    "TurnsResponse",
    "BlobResponse",
    "HasBlobsResponse",
    "StatsResponse",
    "ErrorResponse",
    "RawResponse",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "register_request",
    "register_response",
    "encode_frame",
    "encode_request",
    "encode_response",
    "decode_request",
    "decode_response",
]

PROTOCOL_VERSION = 1
"""The newest protocol version this module speaks."""
SUPPORTED_VERSIONS: tuple[int, int] = (1, 1)
"""The range of versions offered in HELLO (min, max)."""

HEADER_BYTES = 16
FRAME_BYTES_LIMIT = 1 << 30
"""Hard ceiling of any frame body, whatever a server is configured to send or accept."""
RESPONSE_BIT = 0x8000
ERROR_TYPE = 0xFFFF
TOKEN_BYTES_MAX = 1024
NAME_BYTES_MAX = 256
MESSAGE_BYTES_MAX = 4096
LIST_ITEMS_LIMIT = 1 << 20
"""Hard ceiling of HAS_BLOBS hashes and of turns in one TURNS response."""
HASH_BYTES = 32
TURN_BYTES = 88
CONTEXT_HEAD_BYTES = 24
PAYLOAD_HEADER_BYTES = 16

READ_WITH_PAYLOADS = 1 << 0
"""read_flags bit 0: return each turn's payload."""
READ_ACCEPT_ZSTD = 1 << 1
"""read_flags bit 1: the server may send stored zstd bodies; the client inflates them."""
READ_FLAGS_KNOWN = READ_WITH_PAYLOADS | READ_ACCEPT_ZSTD
APPEND_EXPECT_HEAD = 1 << 0
"""append_flags bit 0: append only if the context's head is ``expected_head``."""
APPEND_FLAGS_KNOWN = APPEND_EXPECT_HEAD

U16_MAX = 0xFFFF
U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class MessageType(IntEnum):
    """Request types of version 1. A response has ``request | 0x8000``; ERROR is 0xFFFF."""

    HELLO = 0x0001
    PING = 0x0002
    CTX_CREATE = 0x0003
    CTX_FORK = 0x0004
    GET_HEAD = 0x0005
    APPEND_TURN = 0x0006
    APPEND_TURN_BY_HASH = 0x0007
    GET_TURN = 0x0008
    GET_LAST = 0x0009
    GET_BEFORE = 0x000A
    GET_RANGE_BY_DEPTH = 0x000B
    GET_CHAIN = 0x000C
    GET_BLOB = 0x000D
    HAS_BLOBS = 0x000E
    STATS = 0x000F

    @property
    def response_type(self) -> int:
        """The ``msg_type`` of this request's response frame."""
        return int(self) | RESPONSE_BIT


class PayloadEncoding(IntEnum):
    """How a PAYLOAD's bytes travel."""

    ABSENT = 0
    """Not requested: no bytes."""
    RAW = 1
    """The payload as it was appended."""
    ZSTD = 2
    """A zstd frame inflating to ``raw_len`` bytes (only if the request set ACCEPT_ZSTD)."""


# ----------------------------------------------------------------------------------------------
# Frames

_HEADER = struct.Struct("<IHHQ")


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The 16-byte frame header: body length, message type, flags (0 in v1), request id."""

    len: int
    msg_type: int
    flags: int
    req_id: int

    def encode(self) -> bytes:
        """The header's 16 bytes."""
        try:
            return _HEADER.pack(self.len, self.msg_type, self.flags, self.req_id)
        except struct.error as error:
            raise ValueError(f"frame header field out of range: {error}") from None

    @staticmethod
    def decode(data: bytes | bytearray | memoryview) -> FrameHeader:
        """Decodes exactly 16 bytes (no validation of the values: see :meth:`check`)."""
        if len(data) != HEADER_BYTES:
            raise ProtocolError(f"a frame header is {HEADER_BYTES} bytes, got {len(data)}")
        length, msg_type, flags, req_id = _HEADER.unpack(data)
        return FrameHeader(length, msg_type, flags, req_id)

    def check(self, frame_bytes_max: int) -> None:
        """Raises :class:`ProtocolError` for a frame this side must refuse (framing is lost)."""
        if self.len > min(frame_bytes_max, FRAME_BYTES_LIMIT):
            raise ProtocolError(
                f"frame of {self.len} bytes exceeds the limit of "
                f"{min(frame_bytes_max, FRAME_BYTES_LIMIT)} bytes"
            )
        if self.flags != 0:
            raise ProtocolError(f"frame flags {self.flags:#06x} are not 0")


class FrameReader:
    """Cuts frames out of a byte stream: :meth:`feed` bytes, then take :meth:`next_frame` until
    it returns ``None``. A frame over ``frame_bytes_max`` or with flags raises
    :class:`ProtocolError` as soon as its header is complete."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_LIMIT) -> None:
        self._buffer = bytearray()
        self._frame_bytes_max = min(frame_bytes_max, FRAME_BYTES_LIMIT)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Appends received bytes."""
        self._buffer += data

    @property
    def pending_bytes(self) -> int:
        """Bytes received that are not yet part of a returned frame."""
        return len(self._buffer)

    def next_frame(self) -> tuple[FrameHeader, bytes] | None:
        """The next complete frame (header, body), or ``None`` if more bytes are needed."""
        if len(self._buffer) < HEADER_BYTES:
            return None
        header = FrameHeader.decode(bytes(self._buffer[:HEADER_BYTES]))
        header.check(self._frame_bytes_max)
        total = HEADER_BYTES + header.len
        if len(self._buffer) < total:
            return None
        body = bytes(self._buffer[HEADER_BYTES:total])
        del self._buffer[:total]
        return header, body


def encode_frame(msg_type: int, req_id: int, body: bytes, flags: int = 0) -> bytes:
    """One frame: the header for ``body``, then ``body``."""
    return FrameHeader(len(body), msg_type, flags, req_id).encode() + body


# ----------------------------------------------------------------------------------------------
# Reading and writing bodies

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# TURN: turn_id, parent, context_id, depth, codec, type_tag, hash, payload_len, flags, created.
_TURN = struct.Struct("<QQQIIQ32sIIQ")
_CONTEXT_HEAD = struct.Struct("<QQII")
_PAYLOAD_HEADER = struct.Struct("<HHIII")
assert _TURN.size == TURN_BYTES
assert _CONTEXT_HEAD.size == CONTEXT_HEAD_BYTES
assert _PAYLOAD_HEADER.size == PAYLOAD_HEADER_BYTES


class Reader:
    """A bounds-checked reader over one message body. Every method raises
    :class:`ProtocolError` (naming the message and field) instead of reading past the end."""

    __slots__ = ("_body", "_position", "_message")

    def __init__(self, body: bytes, message: str) -> None:
        self._body = body
        self._position = 0
        self._message = message

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return len(self._body) - self._position

    def error(self, field: str, reason: str) -> ProtocolError:
        """A :class:`ProtocolError` about ``field`` of this message."""
        return ProtocolError(f"{self._message}: {field} is invalid ({reason})")

    def _need(self, count: int, field: str) -> int:
        start = self._position
        if count < 0 or start + count > len(self._body):
            raise ProtocolError(
                f"{self._message}: body of {len(self._body)} bytes is too short for {field} "
                f"(needs {start + max(count, 0)})"
            )
        self._position = start + count
        return start

    def take(self, count: int, field: str = "bytes") -> bytes:
        """The next ``count`` bytes."""
        start = self._need(count, field)
        return self._body[start : start + count]

    def u8(self, field: str) -> int:
        """An unsigned byte."""
        start = self._need(1, field)
        return self._body[start]

    def u16(self, field: str) -> int:
        """A little-endian u16."""
        start = self._need(2, field)
        value: int = _U16.unpack_from(self._body, start)[0]
        return value

    def u32(self, field: str) -> int:
        """A little-endian u32."""
        start = self._need(4, field)
        value: int = _U32.unpack_from(self._body, start)[0]
        return value

    def u64(self, field: str) -> int:
        """A little-endian u64."""
        start = self._need(8, field)
        value: int = _U64.unpack_from(self._body, start)[0]
        return value

    def boolean(self, field: str) -> bool:
        """A u8 that must be 0 or 1."""
        value = self.u8(field)
        if value > 1:
            raise self.error(field, "not 0 or 1")
        return value == 1

    def hash(self, field: str = "hash") -> bytes:
        """A 32-byte hash."""
        return self.take(HASH_BYTES, field)

    def zero(self, count: int, field: str = "reserved") -> None:
        """``count`` reserved bytes, which must be zero."""
        if any(self.take(count, field)):
            raise self.error(field, "reserved bytes must be zero")

    def flags(self, known: int, field: str) -> int:
        """A u32 flag word with no bits outside ``known``."""
        value = self.u32(field)
        if value & ~known:
            raise self.error(field, "unknown flag bits")
        return value

    def string(self, count: int, field: str) -> str:
        """``count`` bytes of UTF-8."""
        data = self.take(count, field)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(field, "not UTF-8") from None

    def limit(self, value: int, maximum: int, field: str) -> int:
        """``value`` if it is at most ``maximum``."""
        if value > maximum:
            raise ProtocolError(
                f"{self._message}: {field} is {value}, above the limit of {maximum}"
            )
        return value

    def turn(self) -> TurnRecord:
        """A TURN (88 bytes); its flags must be 0 in version 1."""
        start = self._need(TURN_BYTES, "turn")
        values = _TURN.unpack_from(self._body, start)
        if values[8] != 0:
            raise self.error("turn flags", "must be 0 in protocol version 1")
        return TurnRecord(*values)

    def context_head(self) -> ContextHeadRecord:
        """A CONTEXT_HEAD (24 bytes)."""
        start = self._need(CONTEXT_HEAD_BYTES, "context head")
        context_id, head_turn_id, head_depth, reserved = _CONTEXT_HEAD.unpack_from(
            self._body, start
        )
        if reserved:
            raise self.error("context head reserved", "reserved bytes must be zero")
        return ContextHeadRecord(context_id, head_turn_id, head_depth)

    def payload(self) -> PayloadRecord:
        """A PAYLOAD (16 bytes, then its data)."""
        start = self._need(PAYLOAD_HEADER_BYTES, "payload")
        encoding, reserved1, raw_len, data_len, reserved2 = _PAYLOAD_HEADER.unpack_from(
            self._body, start
        )
        if encoding not in _PAYLOAD_ENCODINGS:
            raise self.error("payload encoding", f"unknown value {encoding}")
        if reserved1 or reserved2:
            raise self.error("payload reserved", "reserved bytes must be zero")
        data = self.take(data_len, "payload data")
        if encoding == PayloadEncoding.ABSENT and (raw_len or data_len):
            raise self.error("payload", "an absent payload has no bytes")
        if encoding == PayloadEncoding.RAW and raw_len != data_len:
            raise self.error("payload", "raw payload length differs from raw_len")
        return PayloadRecord(PayloadEncoding(encoding), raw_len, data)

    def finish(self) -> None:
        """Checks that the whole body was read."""
        extra = len(self._body) - self._position
        if extra:
            raise ProtocolError(f"{self._message} body has {extra} bytes after its end")


_PAYLOAD_ENCODINGS = frozenset(int(encoding) for encoding in PayloadEncoding)


def _pack(fmt: struct.Struct, *values: object) -> bytes:
    try:
        return fmt.pack(*values)
    except struct.error as error:
        raise ValueError(f"field out of range: {error}") from None


def _u8(value: int) -> bytes:
    return _pack(_U8, value)


def _u16(value: int) -> bytes:
    return _pack(_U16, value)


def _u32(value: int) -> bytes:
    return _pack(_U32, value)


def _u64(value: int) -> bytes:
    return _pack(_U64, value)


def _hash(value: bytes) -> bytes:
    if len(value) != HASH_BYTES:
        raise ValueError(f"a hash is {HASH_BYTES} bytes, got {len(value)}")
    return bytes(value)


# ----------------------------------------------------------------------------------------------
# Shared structures


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """TURN on the wire (88 bytes)."""

    turn_id: int
    parent_turn_id: int
    context_id: int
    depth: int
    codec: int
    type_tag: int
    payload_hash: bytes
    payload_len: int
    flags: int
    created_at_unix_ms: int

    def encode(self) -> bytes:
        """The 88 bytes."""
        return _pack(
            _TURN,
            self.turn_id,
            self.parent_turn_id,
            self.context_id,
            self.depth,
            self.codec,
            self.type_tag,
            _hash(self.payload_hash),
            self.payload_len,
            self.flags,
            self.created_at_unix_ms,
        )


@dataclass(frozen=True, slots=True)
class ContextHeadRecord:
    """CONTEXT_HEAD on the wire (24 bytes)."""

    context_id: int
    head_turn_id: int
    head_depth: int

    def encode(self) -> bytes:
        """The 24 bytes."""
        return _pack(_CONTEXT_HEAD, self.context_id, self.head_turn_id, self.head_depth, 0)


@dataclass(frozen=True, slots=True)
class PayloadRecord:
    """PAYLOAD on the wire: its encoding, the raw length, and the bytes as sent."""

    encoding: PayloadEncoding
    raw_len: int
    data: bytes

    def encode(self) -> bytes:
        """The 16-byte header and the data."""
        return (
            _pack(_PAYLOAD_HEADER, int(self.encoding), 0, self.raw_len, len(self.data), 0)
            + self.data
        )


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """One entry of a TURNS response: a turn and its payload (ABSENT if not requested)."""

    turn: TurnRecord
    payload: PayloadRecord


# ----------------------------------------------------------------------------------------------
# Messages

M = TypeVar("M", bound="Message")


class Message:
    """Base of requests and responses: a body encoder and a strict body decoder."""

    NAME: ClassVar[str] = "MESSAGE"

    def body_chunks(self) -> list[bytes]:
        """The body as one or more chunks (large payloads are not copied into the first)."""
        return [self.encode_body()]

    def encode_body(self) -> bytes:
        """The body as one bytes object."""
        raise NotImplementedError

    @classmethod
    def decode_body(cls: type[M], reader: Reader) -> M:
        """Reads the body; the caller checks that the reader is then at its end."""
        raise NotImplementedError


class Request(Message):
    """A request: ``MSG_TYPE`` is its frame's type, ``MIN_VERSION`` the protocol version that
    introduced it (a client refuses to send it on a connection of an older version)."""

    MSG_TYPE: ClassVar[int] = 0
    MIN_VERSION: ClassVar[int] = 1

    def encode_body(self) -> bytes:
        """The body as one bytes object."""
        return b"".join(self.body_chunks())

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.MSG_TYPE

    @property
    def response_type(self) -> int:
        """The ``msg_type`` of the expected (non-ERROR) response."""
        return self.msg_type | RESPONSE_BIT

    @property
    def required_version(self) -> int:
        """The lowest protocol version that has this request."""
        return self.MIN_VERSION


class Response(Message):
    """A response: ``MSG_TYPES`` lists the frame types it answers (several requests can share
    one response layout, e.g. CONTEXT); ``msg_type`` is the one of this instance."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = ()

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.MSG_TYPES[0]


REQUEST_TYPES: dict[int, type[Request]] = {}
"""Request classes by ``msg_type``."""
RESPONSE_TYPES: dict[int, type[Response]] = {}
"""Response classes by ``msg_type`` (ERROR included)."""

R = TypeVar("R", bound=Request)
S = TypeVar("S", bound=Response)


def register_request(cls: type[R]) -> type[R]:
    """Class decorator: makes ``decode_request`` know the request type."""
    if cls.MSG_TYPE in REQUEST_TYPES:
        raise ValueError(f"request type {cls.MSG_TYPE:#06x} registered twice")
    REQUEST_TYPES[cls.MSG_TYPE] = cls
    return cls


def register_response(cls: type[S]) -> type[S]:
    """Class decorator: makes ``decode_response`` know the response's types."""
    for msg_type in cls.MSG_TYPES:
        if msg_type in RESPONSE_TYPES:
            raise ValueError(f"response type {msg_type:#06x} registered twice")
        RESPONSE_TYPES[msg_type] = cls
    return cls


# --- requests ---------------------------------------------------------------------------------


@register_request
@dataclass(frozen=True, slots=True)
class Hello(Request):
    """HELLO (0x0001): the first frame of every connection."""

    MSG_TYPE: ClassVar[int] = MessageType.HELLO
    NAME: ClassVar[str] = "HELLO"

    min_version: int
    max_version: int
    token: bytes
    client_name: str

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        name = self.client_name.encode("utf-8")
        if len(self.token) > TOKEN_BYTES_MAX:
            raise ValueError(f"a token is at most {TOKEN_BYTES_MAX} bytes")
        if len(name) > NAME_BYTES_MAX:
            raise ValueError(f"a client name is at most {NAME_BYTES_MAX} bytes of UTF-8")
        return [
            _u16(self.min_version)
            + _u16(self.max_version)
            + _u16(len(self.token))
            + _u16(len(name))
            + bytes(self.token)
            + name
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> Hello:
        """See :meth:`Message.decode_body`."""
        min_version = reader.u16("min_version")
        max_version = reader.u16("max_version")
        if min_version == 0 or min_version > max_version:
            raise reader.error("version range", "min is 0 or above max")
        token_len = reader.limit(reader.u16("token_len"), TOKEN_BYTES_MAX, "token_len")
        name_len = reader.limit(reader.u16("client_name_len"), NAME_BYTES_MAX, "client_name_len")
        token = reader.take(token_len, "token")
        name = reader.string(name_len, "client_name")
        return cls(min_version, max_version, token, name)


@dataclass(frozen=True, slots=True)
class _U64Request(Request):
    """A request whose body is one u64."""

    def _value(self) -> int:
        raise NotImplementedError

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_u64(self._value())]


@register_request
@dataclass(frozen=True, slots=True)
class Ping(_U64Request):
    """PING (0x0002): the server echoes ``nonce`` in PONG."""

    MSG_TYPE: ClassVar[int] = MessageType.PING
    NAME: ClassVar[str] = "PING"

    nonce: int

    def _value(self) -> int:
        return self.nonce

    @classmethod
    def decode_body(cls, reader: Reader) -> Ping:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("nonce"))


@register_request
@dataclass(frozen=True, slots=True)
class CtxCreate(_U64Request):
    """CTX_CREATE (0x0003): a new context, empty (``base_turn_id`` 0) or headed at a turn."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_CREATE
    NAME: ClassVar[str] = "CTX_CREATE"

    base_turn_id: int

    def _value(self) -> int:
        return self.base_turn_id

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxCreate:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("base_turn_id"))


@register_request
@dataclass(frozen=True, slots=True)
class CtxFork(_U64Request):
    """CTX_FORK (0x0004): a new context whose head is ``turn_id``."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_FORK
    NAME: ClassVar[str] = "CTX_FORK"

    turn_id: int

    def _value(self) -> int:
        return self.turn_id

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxFork:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("turn_id"))


@register_request
@dataclass(frozen=True, slots=True)
class GetHead(_U64Request):
    """GET_HEAD (0x0005): a context's head."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_HEAD
    NAME: ClassVar[str] = "GET_HEAD"

    context_id: int

    def _value(self) -> int:
        return self.context_id

    @classmethod
    def decode_body(cls, reader: Reader) -> GetHead:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("context_id"))


def _append_fields(context_id: int, expected_head: int | None, type_tag: int, codec: int) -> bytes:
    flags = 0 if expected_head is None else APPEND_EXPECT_HEAD
    return (
        _u64(context_id)
        + _u64(0 if expected_head is None else expected_head)
        + _u64(type_tag)
        + _u32(codec)
        + _u32(flags)
    )


def _decode_append_fields(reader: Reader) -> tuple[int, int | None, int, int]:
    context_id = reader.u64("context_id")
    expected = reader.u64("expected_head")
    type_tag = reader.u64("type_tag")
    codec = reader.u32("codec")
    flags = reader.flags(APPEND_FLAGS_KNOWN, "append_flags")
    if not flags & APPEND_EXPECT_HEAD:
        if expected:
            raise reader.error("expected_head", "set without EXPECT_HEAD")
        return context_id, None, type_tag, codec
    return context_id, expected, type_tag, codec


@register_request
@dataclass(frozen=True, slots=True)
class AppendTurn(Request):
    """APPEND_TURN (0x0006): appends a turn with its payload (``expected_head`` None: no
    compare-and-set; 0: the context must be empty)."""

    MSG_TYPE: ClassVar[int] = MessageType.APPEND_TURN
    NAME: ClassVar[str] = "APPEND_TURN"

    context_id: int
    expected_head: int | None
    type_tag: int
    codec: int
    payload: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        fields = _append_fields(self.context_id, self.expected_head, self.type_tag, self.codec)
        head = fields + _u32(len(self.payload)) + _u32(0)
        if len(self.payload) < 4096:
            return [head + bytes(self.payload)]
        return [head, self.payload]

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendTurn:
        """See :meth:`Message.decode_body`."""
        context_id, expected_head, type_tag, codec = _decode_append_fields(reader)
        payload_len = reader.u32("payload_len")
        reader.zero(4)
        payload = reader.take(payload_len, "payload")
        return cls(context_id, expected_head, type_tag, codec, payload)


@register_request
@dataclass(frozen=True, slots=True)
class AppendTurnByHash(Request):
    """APPEND_TURN_BY_HASH (0x0007): appends a turn whose payload is an already stored blob."""

    MSG_TYPE: ClassVar[int] = MessageType.APPEND_TURN_BY_HASH
    NAME: ClassVar[str] = "APPEND_TURN_BY_HASH"

    context_id: int
    expected_head: int | None
    type_tag: int
    codec: int
    payload_hash: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        fields = _append_fields(self.context_id, self.expected_head, self.type_tag, self.codec)
        return [fields + _hash(self.payload_hash)]

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendTurnByHash:
        """See :meth:`Message.decode_body`."""
        context_id, expected_head, type_tag, codec = _decode_append_fields(reader)
        return cls(context_id, expected_head, type_tag, codec, reader.hash("payload_hash"))


@register_request
@dataclass(frozen=True, slots=True)
class GetTurn(_U64Request):
    """GET_TURN (0x0008): one turn by id."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_TURN
    NAME: ClassVar[str] = "GET_TURN"

    turn_id: int

    def _value(self) -> int:
        return self.turn_id

    @classmethod
    def decode_body(cls, reader: Reader) -> GetTurn:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("turn_id"))


@register_request
@dataclass(frozen=True, slots=True)
class GetLast(Request):
    """GET_LAST (0x0009): the ``limit`` newest turns of a context, oldest first."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_LAST
    NAME: ClassVar[str] = "GET_LAST"

    context_id: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_u64(self.context_id) + _u32(self.limit) + _u32(self.read_flags)]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetLast:
        """See :meth:`Message.decode_body`."""
        context_id = reader.u64("context_id")
        limit = reader.u32("limit")
        return cls(context_id, limit, reader.flags(READ_FLAGS_KNOWN, "read_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class GetBefore(Request):
    """GET_BEFORE (0x000A): the ``limit`` turns older than ``before_turn_id``, oldest first."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_BEFORE
    NAME: ClassVar[str] = "GET_BEFORE"

    context_id: int
    before_turn_id: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _u64(self.context_id)
            + _u64(self.before_turn_id)
            + _u32(self.limit)
            + _u32(self.read_flags)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetBefore:
        """See :meth:`Message.decode_body`."""
        context_id = reader.u64("context_id")
        before = reader.u64("before_turn_id")
        limit = reader.u32("limit")
        return cls(context_id, before, limit, reader.flags(READ_FLAGS_KNOWN, "read_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class GetRangeByDepth(Request):
    """GET_RANGE_BY_DEPTH (0x000B): a context's turns with depth in ``from_depth ..
    from_depth + limit``."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_RANGE_BY_DEPTH
    NAME: ClassVar[str] = "GET_RANGE_BY_DEPTH"

    context_id: int
    from_depth: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _u64(self.context_id)
            + _u32(self.from_depth)
            + _u32(self.limit)
            + _u32(self.read_flags)
            + _u32(0)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetRangeByDepth:
        """See :meth:`Message.decode_body`."""
        context_id = reader.u64("context_id")
        from_depth = reader.u32("from_depth")
        limit = reader.u32("limit")
        flags = reader.flags(READ_FLAGS_KNOWN, "read_flags")
        reader.zero(4)
        return cls(context_id, from_depth, limit, flags)


@register_request
@dataclass(frozen=True, slots=True)
class GetChain(Request):
    """GET_CHAIN (0x000C): the chain root → ``turn_id``, ``limit`` turns from ``from_depth``."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_CHAIN
    NAME: ClassVar[str] = "GET_CHAIN"

    turn_id: int
    from_depth: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _u64(self.turn_id)
            + _u32(self.from_depth)
            + _u32(self.limit)
            + _u32(self.read_flags)
            + _u32(0)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetChain:
        """See :meth:`Message.decode_body`."""
        turn_id = reader.u64("turn_id")
        from_depth = reader.u32("from_depth")
        limit = reader.u32("limit")
        flags = reader.flags(READ_FLAGS_KNOWN, "read_flags")
        reader.zero(4)
        return cls(turn_id, from_depth, limit, flags)


@register_request
@dataclass(frozen=True, slots=True)
class GetBlob(Request):
    """GET_BLOB (0x000D): a payload by hash (``read_flags``: only ACCEPT_ZSTD)."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_BLOB
    NAME: ClassVar[str] = "GET_BLOB"

    payload_hash: bytes
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_hash(self.payload_hash) + _u32(self.read_flags) + _u32(0)]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetBlob:
        """See :meth:`Message.decode_body`."""
        payload_hash = reader.hash("payload_hash")
        flags = reader.flags(READ_ACCEPT_ZSTD, "read_flags")
        reader.zero(4)
        return cls(payload_hash, flags)


@register_request
@dataclass(frozen=True, slots=True)
class HasBlobs(Request):
    """HAS_BLOBS (0x000E): which of ``hashes`` are stored."""

    MSG_TYPE: ClassVar[int] = MessageType.HAS_BLOBS
    NAME: ClassVar[str] = "HAS_BLOBS"

    hashes: tuple[bytes, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_u32(len(self.hashes)) + _u32(0) + b"".join(_hash(h) for h in self.hashes)]

    @classmethod
    def decode_body(cls, reader: Reader) -> HasBlobs:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        reader.zero(4)
        if count * HASH_BYTES > reader.remaining:
            raise ProtocolError(f"HAS_BLOBS: body too short for {count} hashes")
        return cls(tuple(reader.hash() for _ in range(count)))


@register_request
@dataclass(frozen=True, slots=True)
class Stats(Request):
    """STATS (0x000F): the server's counters. Empty body."""

    MSG_TYPE: ClassVar[int] = MessageType.STATS
    NAME: ClassVar[str] = "STATS"

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [b""]

    @classmethod
    def decode_body(cls, reader: Reader) -> Stats:
        """See :meth:`Message.decode_body`."""
        return cls()


@dataclass(frozen=True, slots=True)
class RawRequest(Request):
    """Any frame, as bytes: for messages this module does not define (and for tests). Its
    response is decoded by the registered class of ``msg_type | 0x8000`` if there is one,
    else returned as :class:`RawResponse`."""

    NAME: ClassVar[str] = "RAW"

    raw_msg_type: int
    body: bytes = b""
    min_version: int = 1

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.raw_msg_type

    @property
    def required_version(self) -> int:
        """The lowest protocol version that has this request."""
        return self.min_version

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [self.body]


# --- responses --------------------------------------------------------------------------------


@register_response
@dataclass(frozen=True, slots=True)
class HelloResponse(Response):
    """HELLO response (0x8001): the chosen version, the server's limits and name."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.HELLO.response_type,)
    NAME: ClassVar[str] = "HELLO response"

    version: int
    frame_bytes_max: int
    requests_in_flight_max: int
    blob_bytes_max: int
    read_turns_max: int
    has_blobs_max: int
    server_name: str

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        name = self.server_name.encode("utf-8")
        if len(name) > NAME_BYTES_MAX:
            raise ValueError(f"a server name is at most {NAME_BYTES_MAX} bytes of UTF-8")
        return (
            _u16(self.version)
            + _u16(len(name))
            + _u32(self.frame_bytes_max)
            + _u32(self.requests_in_flight_max)
            + _u32(self.blob_bytes_max)
            + _u32(self.read_turns_max)
            + _u32(self.has_blobs_max)
            + _u32(0)
            + name
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> HelloResponse:
        """See :meth:`Message.decode_body`."""
        version = reader.u16("version")
        name_len = reader.limit(reader.u16("server_name_len"), NAME_BYTES_MAX, "server_name_len")
        frame_bytes_max = reader.u32("frame_bytes_max")
        requests_in_flight_max = reader.u32("requests_in_flight_max")
        blob_bytes_max = reader.u32("blob_bytes_max")
        read_turns_max = reader.u32("read_turns_max")
        has_blobs_max = reader.u32("has_blobs_max")
        reader.zero(4)
        name = reader.string(name_len, "server_name")
        return cls(
            version,
            frame_bytes_max,
            requests_in_flight_max,
            blob_bytes_max,
            read_turns_max,
            has_blobs_max,
            name,
        )


@register_response
@dataclass(frozen=True, slots=True)
class Pong(Response):
    """PONG (0x8002): the PING's nonce."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.PING.response_type,)
    NAME: ClassVar[str] = "PONG"

    nonce: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u64(self.nonce)

    @classmethod
    def decode_body(cls, reader: Reader) -> Pong:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("nonce"))


@register_response
@dataclass(frozen=True, slots=True)
class ContextResponse(Response):
    """CONTEXT (0x8003, 0x8004, 0x8005): the head of a created, forked or asked-for context."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.CTX_CREATE.response_type,
        MessageType.CTX_FORK.response_type,
        MessageType.GET_HEAD.response_type,
    )
    NAME: ClassVar[str] = "CONTEXT"

    head: ContextHeadRecord
    response_msg_type: int = field(default=MessageType.CTX_CREATE.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.head.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> ContextResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_head())


@register_response
@dataclass(frozen=True, slots=True)
class AppendedResponse(Response):
    """APPENDED (0x8006, 0x8007): the new turn, and whether its payload was already stored."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.APPEND_TURN.response_type,
        MessageType.APPEND_TURN_BY_HASH.response_type,
    )
    NAME: ClassVar[str] = "APPENDED"

    turn: TurnRecord
    deduped: bool
    response_msg_type: int = field(default=MessageType.APPEND_TURN.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.turn.encode() + _u8(int(self.deduped)) + bytes(7)

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendedResponse:
        """See :meth:`Message.decode_body`."""
        turn = reader.turn()
        deduped = reader.boolean("deduped")
        reader.zero(7)
        return cls(turn, deduped)


@register_response
@dataclass(frozen=True, slots=True)
class TurnResponse(Response):
    """TURN (0x8008): one turn."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.GET_TURN.response_type,)
    NAME: ClassVar[str] = "TURN"

    turn: TurnRecord

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.turn.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> TurnResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.turn())


@register_response
@dataclass(frozen=True, slots=True)
class TurnsResponse(Response):
    """TURNS (0x8009–0x800C): a page of turns, oldest first, with their payloads."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.GET_LAST.response_type,
        MessageType.GET_BEFORE.response_type,
        MessageType.GET_RANGE_BY_DEPTH.response_type,
        MessageType.GET_CHAIN.response_type,
    )
    NAME: ClassVar[str] = "TURNS"

    next_before: int
    tip_depth: int
    entries: tuple[TurnEntry, ...]
    response_msg_type: int = field(default=MessageType.GET_LAST.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        parts = [_u64(self.next_before) + _u32(self.tip_depth) + _u32(len(self.entries))]
        for entry in self.entries:
            parts.append(entry.turn.encode())
            parts.append(entry.payload.encode())
        return b"".join(parts)

    @classmethod
    def decode_body(cls, reader: Reader) -> TurnsResponse:
        """See :meth:`Message.decode_body`."""
        next_before = reader.u64("next_before")
        tip_depth = reader.u32("tip_depth")
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        if count * (TURN_BYTES + PAYLOAD_HEADER_BYTES) > reader.remaining:
            raise ProtocolError(f"TURNS: body too short for {count} turns")
        entries = tuple(TurnEntry(reader.turn(), reader.payload()) for _ in range(count))
        return cls(next_before, tip_depth, entries)


@register_response
@dataclass(frozen=True, slots=True)
class BlobResponse(Response):
    """BLOB (0x800D): one payload."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.GET_BLOB.response_type,)
    NAME: ClassVar[str] = "BLOB"

    payload: PayloadRecord

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.payload.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> BlobResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.payload())


@register_response
@dataclass(frozen=True, slots=True)
class HasBlobsResponse(Response):
    """HAS_BLOBS response (0x800E): one flag per asked hash."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.HAS_BLOBS.response_type,)
    NAME: ClassVar[str] = "HAS_BLOBS response"

    present: tuple[bool, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u32(len(self.present)) + _u32(0) + bytes(int(flag) for flag in self.present)

    @classmethod
    def decode_body(cls, reader: Reader) -> HasBlobsResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        reader.zero(4)
        flags = reader.take(count, "present")
        if any(byte > 1 for byte in flags):
            raise reader.error("present", "not 0 or 1")
        return cls(tuple(byte == 1 for byte in flags))


_STATS = struct.Struct("<11QB7s")


@register_response
@dataclass(frozen=True, slots=True)
class StatsResponse(Response):
    """STATS response (0x800F): the server's counters (96 bytes)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.STATS.response_type,)
    NAME: ClassVar[str] = "STATS response"

    turns: int
    contexts: int
    blobs: int
    logical_bytes: int
    unique_bytes: int
    stored_bytes: int
    dedup_hits: int
    connections: int
    requests_total: int
    errors_total: int
    uptime_ms: int
    read_only: bool

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _pack(
            _STATS,
            self.turns,
            self.contexts,
            self.blobs,
            self.logical_bytes,
            self.unique_bytes,
            self.stored_bytes,
            self.dedup_hits,
            self.connections,
            self.requests_total,
            self.errors_total,
            self.uptime_ms,
            int(self.read_only),
            bytes(7),
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> StatsResponse:
        """See :meth:`Message.decode_body`."""
        c = [reader.u64(name) for name in _STATS_FIELDS]
        read_only = reader.boolean("read_only")
        reader.zero(7)
        return cls(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], read_only)


_STATS_FIELDS = (
    "turns",
    "contexts",
    "blobs",
    "logical_bytes",
    "unique_bytes",
    "stored_bytes",
    "dedup_hits",
    "connections",
    "requests_total",
    "errors_total",
    "uptime_ms",
)


@register_response
@dataclass(frozen=True, slots=True)
class ErrorResponse(Response):
    """ERROR (0xFFFF): a stable code, a detail (CONFLICT: the actual head; UNSUPPORTED_VERSION:
    the server's version) and a message. Codes this module does not know are accepted (new
    codes are appended to the table); 0 is not a code."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (ERROR_TYPE,)
    NAME: ClassVar[str] = "ERROR"

    code: int
    detail: int
    message: str

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        message = self.message.encode("utf-8")
        if len(message) > MESSAGE_BYTES_MAX:
            raise ValueError(f"an error message is at most {MESSAGE_BYTES_MAX} bytes of UTF-8")
        return _u16(self.code) + _u16(0) + _u32(len(message)) + _u64(self.detail) + message

    @classmethod
    def decode_body(cls, reader: Reader) -> ErrorResponse:
        """See :meth:`Message.decode_body`."""
        code = reader.u16("code")
        if code == 0:
            raise reader.error("code", "0 is not an error code")
        reader.zero(2)
        message_len = reader.limit(reader.u32("message_len"), MESSAGE_BYTES_MAX, "message_len")
        detail = reader.u64("detail")
        message = reader.string(message_len, "message")
        return cls(code, detail, message)


@dataclass(frozen=True, slots=True)
class RawResponse(Response):
    """A response of a type this module does not define: its type and body as received."""

    NAME: ClassVar[str] = "RAW"

    raw_msg_type: int
    body: bytes

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.raw_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.body


# ----------------------------------------------------------------------------------------------
# Whole messages


def _decode(cls: type[M], body: bytes) -> M:
    reader = Reader(bytes(body), cls.NAME)
    message = cls.decode_body(reader)
    reader.finish()
    return message


def decode_request(msg_type: int, body: bytes) -> Request:
    """Decodes a request body of type ``msg_type`` (unknown types: :class:`ProtocolError`)."""
    cls = REQUEST_TYPES.get(msg_type)
    if cls is None:
        raise ProtocolError(f"unknown request type {msg_type:#06x}")
    return _decode(cls, body)


def decode_response(msg_type: int, body: bytes, *, allow_unknown: bool = False) -> Response:
    """Decodes a response body of type ``msg_type``. An unknown type is a
    :class:`ProtocolError` unless ``allow_unknown`` (then a :class:`RawResponse`)."""
    cls = RESPONSE_TYPES.get(msg_type)
    if cls is None:
        if allow_unknown and msg_type & RESPONSE_BIT:
            return RawResponse(msg_type, bytes(body))
        raise ProtocolError(f"unknown response type {msg_type:#06x}")
    response = _decode(cls, body)
    if isinstance(response, ContextResponse):
        return ContextResponse(response.head, msg_type)
    if isinstance(response, AppendedResponse):
        return AppendedResponse(response.turn, response.deduped, msg_type)
    if isinstance(response, TurnsResponse):
        return TurnsResponse(response.next_before, response.tip_depth, response.entries, msg_type)
    return response


def encode_request(req_id: int, request: Request) -> list[bytes]:
    """A request frame as chunks (header and fields first; a large payload by reference)."""
    chunks = request.body_chunks()
    length = sum(len(chunk) for chunk in chunks)
    header = FrameHeader(length, request.msg_type, 0, req_id).encode()
    return [header + chunks[0], *chunks[1:]]


def encode_response(req_id: int, response: Response) -> bytes:
    """A response frame (header and body)."""
    return encode_frame(response.msg_type, req_id, response.encode_body())
