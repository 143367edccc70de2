"""The ctxstore wire protocol, versions 1 to 7, byte for byte as in docs/protocol.md (the
reference is the Rust crate ``protocol/``: ``message.rs`` and ``codec/``; the codec is the
truth where the two disagree).

No I/O: frames and message bodies to and from bytes. Both directions are implemented (the
client encodes requests and decodes responses; tests also decode requests and encode
responses, e.g. for the golden vectors and for test servers).

Decoding is strict: every field must be present, a body must end exactly where its message
ends, reserved fields and unknown flag bits must be zero, enums must hold a known value,
strings must be UTF-8, lengths must be within their limits. Any violation raises
:class:`~ctxstore.errors.ProtocolError`; no other exception escapes a decoder. Encoders raise
``ValueError`` for what the layout cannot carry (a field over its length prefix, an empty name
where an empty one means "none"); semantic limits (a name of at most 256 bytes, 32 tags, ...)
are the server's to enforce, answered TOO_LARGE.

A context is named in a request by a :data:`ContextRef`: an ``int`` is a ContextID, a ``str``
its name (version 2). On the six version-1 messages that lead with a ``context_id``, a name is
sent with the frame flag :data:`CTX_BY_NAME`; the version-2 messages carry an inline context
ref (``u16 name_len``, then ``u64 context_id`` when it is 0, else the name).

Extending the protocol (a later version): define a request dataclass deriving from
:class:`Request` with ``MSG_TYPE``, ``NAME``, ``MIN_VERSION``, ``body_chunks`` and
``decode_body``, decorate it with :func:`register_request`; define its response deriving from
:class:`Response` with ``MSG_TYPES``, ``encode_body`` and ``decode_body``, decorate it with
:func:`register_response`. The client's generic ``request()`` then sends it, refuses it on a
connection that negotiated an older version, and decodes its answer.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence, Sized
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, TypeVar, cast

from ._wire import (
    CHUNK_BYTES_MAX,
    CHUNKS_PER_PAYLOAD_MAX,
    ERROR_TYPE,
    FRAME_BYTES_LIMIT,
    HEADER_BYTES,
    KV_ENTRIES_PER_REQUEST_MAX,
    KV_TOUCH_KEYS_MAX,
    LIST_ITEMS_LIMIT,
    MESSAGE_BYTES_MAX,
    NAME_BYTES_MAX,
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_MIN,
    RESPONSE_BIT,
    TOKEN_BYTES_MAX,
    MessageType,
)
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
    "CTX_BY_NAME",
    "OVERLAYS",
    "OVERLAY_REDACTED",
    "OVERLAY_BYTES",
    "FRAME_FLAGS_KNOWN",
    "MORE",
    "RESPONSE_FLAGS_KNOWN",
    "OPEN_GET_OR_CREATE",
    "OPEN_CLONE",
    "OPEN_FLAGS_KNOWN",
    "TAG_EXPECT_HEAD",
    "TAG_FLAGS_KNOWN",
    "CONTEXT_INFO_BYTES_MIN",
    "KV_ITEM_BYTES_MIN",
    "KV_ITEM_EX_BYTES_MIN",
    "KV_PUT_IF_ABSENT",
    "KV_READ_REFRESH",
    "KV_ENTRIES_PER_REQUEST_MAX",
    "KV_TOUCH_KEYS_MAX",
    "TURN_SUMMARY",
    "TURN_FLAGS_KNOWN",
    "TURN_SPEC_SUMMARY",
    "TURN_SPEC_BY_HASH",
    "TURN_SPEC_ZSTD",
    "TURN_SPEC_FLAGS_KNOWN",
    "EXTRAS_BYTES_MIN",
    "TURN_SPEC_BYTES_MIN",
    "TURN_EXTRAS_ENTRY_BYTES_MIN",
    "APPENDED_TURN_BYTES",
    "TINY_BYTES_MAX",
    "CHUNKS_PER_PAYLOAD_MAX",
    "CHUNK_BYTES_MAX",
    "CHUNK_ENTRY_BYTES",
    "SENT_CHUNK_BYTES_MIN",
    "CHUNKED_STORED_BYTES",
    "ContextRef",
    "ListCursor",
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
    "ContextInfoRecord",
    "KvItemRecord",
    "KvItemExRecord",
    "ParentKind",
    "PageKind",
    "LogCursor",
    "ExtrasRecord",
    "TurnSpecRecord",
    "AppendedTurnRecord",
    "TurnExtrasEntry",
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
    "CtxOpen",
    "CtxShow",
    "CtxTag",
    "CtxList",
    "CtxName",
    "KvPut",
    "KvGet",
    "KvDelete",
    "KvList",
    "KvPutEx",
    "KvGetEx",
    "KvListEx",
    "KvTouch",
    "KvGetMany",
    "AppendTurns",
    "GetTurnByKey",
    "TurnLog",
    "ReadPage",
    "FindTurns",
    "CtxDelete",
    "CtxPrune",
    "CtxTtl",
    "Backup",
    "Gc",
    "StatsEx",
    "ReplicationStats",
    "PatchTurn",
    "RedactTurn",
    "PurgeBlob",
    "AsOf",
    "AckAfter",
    "ACK_AFTER_LOCAL",
    "ACK_AFTER_REMOTE",
    "ACK_AFTER_MASK",
    "ACK_AFTER_SHIFT",
    "TAKES_ACK_AFTER",
    "Role",
    "RoleResponse",
    "SERVER_ROLES",
    "TenantList",
    "TenantRecord",
    "TenantsListedResponse",
    "TenantDelete",
    "TenantDeletedResponse",
    "TENANT_NAME_BYTES_MAX",
    "TENANT_LIST_LIMIT",
    "TENANT_IN_FILE",
    "TENANT_REGISTERED",
    "TENANT_DELETED",
    "TENANT_FLAGS_KNOWN",
    "TENANT_RIGHTS",
    "TENANT_RIGHTS_KNOWN",
    "TENANT_BYTES_MIN",
    "TENANT_KEYS_DESTROYED",
    "TENANT_REPLICA_UPDATED",
    "TENANT_DELETE_FLAGS_KNOWN",
    "TENANT_DELETED_BYTES",
    "TenantRotateKey",
    "TenantKeyRotatedResponse",
    "TENANT_KEY_ROTATED_BYTES",
    "VectorMetric",
    "VECTOR_METRIC_NAMES",
    "VectorMethod",
    "VECTOR_INDEX_NAME_BYTES_MAX",
    "VECTOR_INDEXES_MAX",
    "VECTOR_DIMS_MAX",
    "VECTORS_PER_ENTRY_MAX",
    "VECTOR_K_MAX",
    "VECTOR_FILTER_BYTES_MAX",
    "VECTOR_EF_SEARCH_MAX",
    "VECTOR_EF_SEARCH_DEFAULT",
    "VECTOR_SEARCH_EXACT",
    "VECTOR_SEARCH_FLAGS_KNOWN",
    "VECTOR_INDEX_INFO_BYTES_MIN",
    "VECTOR_HIT_BYTES_MIN",
    "KV_VECTOR_ENTRY_BYTES_MIN",
    "VECTORS_PER_TURN_MAX",
    "VECTOR_SEARCH_TYPE_TAG",
    "VECTOR_SEARCH_TURNS_FLAGS_KNOWN",
    "TURN_SEARCH_TAGS_MAX",
    "TURN_SEARCH_LABELS_MAX",
    "TURN_HIT_BYTES",
    "VECTOR_TURN_BYTES_MIN",
    "VectorIndexInfoRecord",
    "VectorHitRecord",
    "KvVectorEntryRecord",
    "VectorTurnRecord",
    "TurnHitRecord",
    "VectorIndexCreate",
    "VectorIndexDrop",
    "VectorIndexList",
    "VectorSearch",
    "KvPutVectors",
    "AppendTurnsVectors",
    "VectorSearchTurns",
    "VectorIndexResponse",
    "VectorIndexesResponse",
    "VectorHitsResponse",
    "TurnHitsResponse",
    "OverlayRecord",
    "ChunkRecord",
    "SentChunkRecord",
    "PutChunked",
    "ChunkBase",
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
    "OpenedResponse",
    "ContextInfoResponse",
    "ContextListResponse",
    "DoneResponse",
    "KvValueResponse",
    "KvListResponse",
    "KvValueExResponse",
    "KvItemsExResponse",
    "KvValuesResponse",
    "AppendedTurnsResponse",
    "TurnInfoResponse",
    "TurnLogResponse",
    "PageResponse",
    "FoundTurnsResponse",
    "RetentionResponse",
    "BackedUpResponse",
    "GcDoneResponse",
    "StatsExResponse",
    "ReplicationStatsResponse",
    "PatchedResponse",
    "RedactedResponse",
    "PurgedResponse",
    "ChunkedStoredResponse",
    "OverlaidResponse",
    "ErrorResponse",
    "RawResponse",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "TAKES_OVERLAYS",
    "turn_count",
    "register_request",
    "register_response",
    "encode_frame",
    "encode_request",
    "encode_response",
    "decode_request",
    "decode_response",
]

SUPPORTED_VERSIONS: tuple[int, int] = (PROTOCOL_VERSION_MIN, PROTOCOL_VERSION)
"""The range of versions offered in HELLO (min, max)."""
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

CTX_BY_NAME = 1 << 0
"""Frame flag bit 0 (version 2): the request's leading ``context_id u64`` is replaced by
``u16 name_len (>= 1), name``. Only on the messages whose ``TAKES_CONTEXT`` is true."""
OVERLAYS = 1 << 1
"""Frame flag bit 1 (version 2, decision 0012): on a read that answers TURNs (see
:class:`AsOf`) the body ends with ``u64 as_of`` (0: the latest view); on its answer the body
ends with ``u32 count`` and one OVERLAY (16 bytes) per TURN (see :class:`OverlaidResponse`)."""
ACK_AFTER_SHIFT = 3
ACK_AFTER_MASK = 0b11 << ACK_AFTER_SHIFT
"""Frame flag bits 3-4 (version 4, decision 0031; requests only): when a write is
acknowledged. 0 the server's default (``--ack-after``), :data:`ACK_AFTER_LOCAL`,
:data:`ACK_AFTER_REMOTE`; 3 is a bad frame. Only on the writes of :data:`TAKES_ACK_AFTER` (see
:class:`AckAfter`)."""
ACK_AFTER_LOCAL = 1
"""``ACK_AFTER`` 1: acknowledged once durable on the server's disk (every older write)."""
ACK_AFTER_REMOTE = 2
"""``ACK_AFTER`` 2: acknowledged once the object store holds it too."""
ACK_AFTER_NAMES = {ACK_AFTER_LOCAL: "local", ACK_AFTER_REMOTE: "remote"}
"""``ACK_AFTER`` values (and ROLE's ``ack_after``) by name."""
TAKES_ACK_AFTER = frozenset(
    {
        MessageType.APPEND_TURN,
        MessageType.APPEND_TURN_BY_HASH,
        MessageType.APPEND_TURNS,
        MessageType.STREAM_SEAL,
        MessageType.KV_PUT,
        MessageType.KV_PUT_EX,
        MessageType.KV_PUT_VECTORS,
        MessageType.APPEND_TURNS_VECTORS,
    }
)
"""The writes that may carry ``ACK_AFTER`` (KV_PUT_VECTORS: version 6; APPEND_TURNS_VECTORS:
version 7)."""
FRAME_FLAGS_KNOWN = CTX_BY_NAME | OVERLAYS | ACK_AFTER_MASK
MORE = 1 << 2
"""Frame flag bit 2 (version 3, answers only; issue 32): more frames answer this req_id. Only
an answer whose class sets ``CARRIES_MORE`` (STREAM_FOLLOW's STREAM_PUSHED) may carry it; on
any other answer it is a ProtocolError that closes the connection."""
RESPONSE_FLAGS_KNOWN = OVERLAYS | MORE
"""The frame flags an answer may carry (which answer may carry which is decided when it is
decoded, by :func:`decode_response`)."""
OVERLAY_REDACTED = 1 << 0
"""OVERLAY ``overlay_flags`` bit 0: the turn is redacted (empty payload, hash of no bytes)."""
OVERLAY_BYTES = 16
OPEN_GET_OR_CREATE = 1 << 0
"""CTX_OPEN open_flags bit 0: a taken name answers its context instead of ALREADY_EXISTS."""
OPEN_CLONE = 1 << 1
"""CTX_OPEN open_flags bit 1: a context ref follows; the new context copies that one."""
OPEN_FLAGS_KNOWN = OPEN_GET_OR_CREATE | OPEN_CLONE
TAG_EXPECT_HEAD = 1 << 0
"""CTX_TAG tag_flags bit 0: change the tags only if the head is ``expected_head``."""
TAG_FLAGS_KNOWN = TAG_EXPECT_HEAD
CONTEXT_INFO_BYTES_MIN = 44
"""The smallest CONTEXT_INFO: head (24), two times (16), no name (2), no tags (2)."""
KV_ITEM_BYTES_MIN = 38
"""The smallest KV_LIST item: key_len (2), no key, hash (32), value_len (4)."""
KV_ITEM_EX_BYTES_MIN = 54
"""The smallest KV_ITEM_EX (version 3): a KV_LIST item, then ttl_ms (8), expires_at (8)."""
KV_PUT_IF_ABSENT = 1 << 0
"""KV_PUT_EX put_flags bit 0: keys the context has (live) keep their values and TTLs."""
KV_READ_REFRESH = 1 << 0
"""KV_GET_EX / KV_LIST_EX kv_flags bit 0: restart the TTL of each entry returned."""
TURN_SUMMARY = 1 << 0
"""TURN flags bit 0 (version 2): everything before this turn is summarised in its payload."""
TURN_FLAGS_KNOWN = TURN_SUMMARY
TURN_SPEC_SUMMARY = 1 << 0
"""TURN_SPEC turn_flags bit 0 (APPEND_TURNS): the new turn is a summary."""
TURN_SPEC_BY_HASH = 1 << 1
"""TURN_SPEC turn_flags bit 1: the payload is the hash of a stored blob (32 bytes), not
``u32 len`` and bytes."""
TURN_SPEC_ZSTD = 1 << 2
"""TURN_SPEC turn_flags bit 2 (version 3, decision 0029): the payload is a zstd frame the
client made: ``hash [32], u32 raw_len, u32 frame_len``, then the frame (never with BY_HASH)."""
TURN_SPEC_FLAGS_KNOWN = TURN_SPEC_SUMMARY | TURN_SPEC_BY_HASH | TURN_SPEC_ZSTD
TINY_BYTES_MAX = 0xFF
"""The longest field with a ``u8`` length: a turn key, a label key (the engine allows less:
64 bytes each)."""
EXTRAS_BYTES_MIN = 3
"""The smallest EXTRAS: no key, no labels, no links (three zero counts)."""
TURN_SPEC_BYTES_MIN = 29
"""The smallest TURN_SPEC: parent (9), type_tag (8), codec (4), turn_flags (1), EXTRAS (3),
an empty payload's length (4)."""
TURN_EXTRAS_ENTRY_BYTES_MIN = 88 + EXTRAS_BYTES_MIN + 16
"""The smallest entry of a version-2 page: TURN, EXTRAS, an absent PAYLOAD."""
APPENDED_TURN_BYTES = 90
"""One turn of APPEND_TURNS' answer: TURN (88), deduped (1), existing (1)."""
CHUNK_ENTRY_BYTES = 36
"""A CHUNK entry of PUT_CHUNKED: ``hash[32], u32 len``."""
SENT_CHUNK_BYTES_MIN = 9
"""The smallest SENT entry of PUT_CHUNKED: ``u32 index, u32 len`` and at least one byte."""
CHUNKED_STORED_BYTES = 48
"""CHUNKED_STORED: ``hash[32], u64 payload_len, u8 already_stored``, 7 reserved."""

ContextRef = int | str
"""A context in a request: its ContextID (``int``) or its name (``str``, version 2)."""
ListCursor = int | str
"""Where a CTX_LIST page ended: a ContextID, or a name (when the listing has a name prefix)."""

U16_MAX = 0xFFFF
_COPY_BYTES_MAX = 4096
"""Payloads and values at least this large are separate chunks of a request (not copied)."""
U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class PayloadEncoding(IntEnum):
    """How a PAYLOAD's bytes travel."""

    ABSENT = 0
    """Not requested: no bytes."""
    RAW = 1
    """The payload as it was appended."""
    ZSTD = 2
    """A zstd frame inflating to ``raw_len`` bytes (only if the request set ACCEPT_ZSTD)."""


class ParentKind(IntEnum):
    """Where a TURN_SPEC hangs its turn (``u8 parent_kind``; ``u64 parent_turn_id`` is 0
    unless TURN)."""

    HEAD = 0
    """After the previous turn of the request (the first: the context's head)."""
    ROOT = 1
    """A new root (depth 0)."""
    TURN = 2
    """After ``parent_turn_id``, a turn the context owns."""


class PageKind(IntEnum):
    """Which page READ_PAGE reads (``u8 kind``)."""

    LAST = 0
    """The newest ``limit`` turns of the chain."""
    BEFORE = 1
    """The ``limit`` turns older than ``before_turn_id``."""
    RANGE = 2
    """The turns with depth in ``from_depth .. from_depth + limit``."""
    WINDOW = 3
    """From the latest SUMMARY turn of the chain (the root when there is none) to the head;
    its newest ``limit`` turns."""


# ----------------------------------------------------------------------------------------------
# Frames

_HEADER = struct.Struct("<IHHQ")


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The 16-byte frame header: body length, message type, flags (version 2 defines bit 0,
    :data:`CTX_BY_NAME`, on requests), request id."""

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

    def check(self, frame_bytes_max: int, flags_known: int = 0) -> None:
        """Raises :class:`ProtocolError` for a frame this side must refuse (framing is lost):
        over ``frame_bytes_max``, or with flag bits outside ``flags_known`` (0: responses
        carry no flags; a server reading requests passes :data:`FRAME_FLAGS_KNOWN`)."""
        if self.len > min(frame_bytes_max, FRAME_BYTES_LIMIT):
            raise ProtocolError(
                f"frame of {self.len} bytes exceeds the limit of "
                f"{min(frame_bytes_max, FRAME_BYTES_LIMIT)} bytes"
            )
        if self.flags & ~flags_known:
            raise ProtocolError(f"frame flags {self.flags:#06x} have bits this side refuses")


class FrameReader:
    """Cuts frames out of a byte stream: :meth:`feed` bytes, then take :meth:`next_frame` until
    it returns ``None``. A frame over ``frame_bytes_max`` or with flags outside
    ``flags_known`` raises :class:`ProtocolError` as soon as its header is complete."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_LIMIT, flags_known: int = 0) -> None:
        self._buffer = bytearray()
        self._frame_bytes_max = min(frame_bytes_max, FRAME_BYTES_LIMIT)
        self._flags_known = flags_known

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
        header.check(self._frame_bytes_max, self._flags_known)
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
_F32 = struct.Struct("<f")
# TURN: turn_id, parent, context_id, depth, codec, type_tag, hash, payload_len, flags, created.
_TURN = struct.Struct("<QQQIIQ32sIIQ")
_CONTEXT_HEAD = struct.Struct("<QQII")
_PAYLOAD_HEADER = struct.Struct("<HHIII")
assert _TURN.size == TURN_BYTES
assert _CONTEXT_HEAD.size == CONTEXT_HEAD_BYTES
assert _PAYLOAD_HEADER.size == PAYLOAD_HEADER_BYTES


class Reader:
    """A bounds-checked reader over one message body. Every method raises
    :class:`ProtocolError` (naming the message and field) instead of reading past the end.
    ``by_name``: the frame had the flag :data:`CTX_BY_NAME` (see :meth:`leading_context`)."""

    __slots__ = ("_body", "_position", "_message", "by_name")

    def __init__(self, body: bytes, message: str, by_name: bool = False) -> None:
        self._body = body
        self._position = 0
        self._message = message
        self.by_name = by_name

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

    def count(self, count: int, item_bytes_min: int, field: str) -> int:
        """``count`` items of at least ``item_bytes_min`` bytes each, if the rest of the body
        can hold them (a huge count in a short body fails at once, not item by item)."""
        if count * item_bytes_min > self.remaining:
            raise ProtocolError(
                f"{self._message}: body too short for {count} {field} "
                f"(at least {item_bytes_min} bytes each)"
            )
        return count

    def short_bytes(self, field: str) -> bytes:
        """``u16 len``, then ``len`` bytes."""
        return self.take(self.u16(f"{field} length"), field)

    def short_string(self, field: str) -> str:
        """``u16 len``, then ``len`` bytes of UTF-8."""
        return self.string(self.u16(f"{field} length"), field)

    def f32(self, field: str) -> float:
        """A little-endian IEEE 754 binary32 (any bits: NaN and infinities too)."""
        start = self._need(4, field)
        value: float = _F32.unpack_from(self._body, start)[0]
        return value

    def f32s(self, count: int, field: str) -> tuple[float, ...]:
        """``count`` little-endian binary32 values (a VECTOR of ``count`` dimensions)."""
        start = self._need(4 * count, field)
        return struct.unpack_from(f"<{count}f", self._body, start)

    def optional_name(self, field: str) -> str | None:
        """A short string where length 0 means none."""
        name = self.short_string(field)
        return name if name else None

    def context_ref(self) -> ContextRef:
        """A version-2 inline context ref: ``u16 name_len``, then ``u64 context_id`` when it
        is 0, else the name."""
        length = self.u16("context name length")
        if length == 0:
            return self.u64("context_id")
        return self.string(length, "context name")

    def leading_context(self) -> ContextRef:
        """The leading context of a version-1 layout: ``u64 context_id``, or with the frame
        flag CTX_BY_NAME ``u16 name_len (>= 1), name``."""
        if not self.by_name:
            return self.u64("context_id")
        length = self.u16("context name length")
        if length == 0:
            raise self.error("name_len", "CTX_BY_NAME needs a name of 1 or more bytes")
        return self.string(length, "context name")

    def tags(self, field: str = "tags") -> tuple[tuple[str, str], ...]:
        """TAGS: ``u16 count``, then count x (key, value) as short strings."""
        count = self.count(self.u16(f"{field} count"), 4, field)
        return tuple(
            (self.short_string(f"{field} key"), self.short_string(f"{field} value"))
            for _ in range(count)
        )

    def list_cursor(self) -> ListCursor | None:
        """LIST_CURSOR: ``u8 kind`` (0 none, 1 ContextID u64, 2 name of 1 or more bytes)."""
        kind = self.u8("cursor_kind")
        if kind == 0:
            return None
        if kind == 1:
            return self.u64("cursor context_id")
        if kind == 2:
            name = self.optional_name("cursor name")
            if name is None:
                raise self.error("cursor name", "empty")
            return name
        raise self.error("cursor_kind", f"unknown value {kind}")

    def context_info(self) -> ContextInfoRecord:
        """CONTEXT_INFO: CONTEXT_HEAD, created and updated times, name (0: none), TAGS."""
        head = self.context_head()
        created = self.u64("created_at_unix_ms")
        updated = self.u64("updated_at_unix_ms")
        name = self.optional_name("name")
        return ContextInfoRecord(head, created, updated, name, self.tags())

    def turn(self) -> TurnRecord:
        """A TURN (88 bytes); its flags may hold only SUMMARY (version 2; 0 in version 1)."""
        start = self._need(TURN_BYTES, "turn")
        values = _TURN.unpack_from(self._body, start)
        if values[8] & ~TURN_FLAGS_KNOWN:
            raise self.error("turn flags", f"unknown bits in {values[8]:#x}")
        return TurnRecord(*values)

    def tiny_bytes(self, field: str) -> bytes:
        """``u8 len``, then ``len`` bytes."""
        return self.take(self.u8(f"{field} length"), field)

    def tiny_string(self, field: str) -> str:
        """``u8 len``, then ``len`` bytes of UTF-8."""
        return self.string(self.u8(f"{field} length"), field)

    def labels(self) -> tuple[tuple[str, str], ...]:
        """``u8 count``, then count x (``u8 key_len, key, u16 value_len, value``), UTF-8."""
        count = self.count(self.u8("label count"), 3, "labels")
        return tuple(
            (self.tiny_string("label key"), self.short_string("label value")) for _ in range(count)
        )

    def extras(self) -> ExtrasRecord:
        """EXTRAS: ``u8 key_len, key, labels, u8 link_count, link_count x u64``."""
        key = self.tiny_bytes("key")
        labels = self.labels()
        count = self.count(self.u8("link count"), 8, "links")
        links = tuple(self.u64("link") for _ in range(count))
        return ExtrasRecord(key, labels, links)

    def turn_spec(self) -> TurnSpecRecord:
        """TURN_SPEC of APPEND_TURNS (see :class:`TurnSpecRecord`)."""
        kind = self.u8("parent_kind")
        parent_turn_id = self.u64("parent_turn_id")
        if kind not in _PARENT_KINDS:
            raise self.error("parent_kind", f"unknown value {kind}")
        if (kind == ParentKind.TURN) != (parent_turn_id != 0):
            raise self.error("parent_turn_id", "a turn id only, and always, with parent kind 2")
        type_tag = self.u64("type_tag")
        codec = self.u32("codec")
        flags = self.u8("turn_flags")
        if flags & ~TURN_SPEC_FLAGS_KNOWN:
            raise self.error("turn_flags", "unknown flag bits")
        extras = self.extras()
        by_hash = bool(flags & TURN_SPEC_BY_HASH)
        zstd_hash: bytes | None = None
        raw_len = 0
        if flags & TURN_SPEC_ZSTD:
            if by_hash:
                raise self.error("turn_flags", "BY_HASH and ZSTD together")
            zstd_hash = self.hash("payload_hash")
            raw_len = self.u32("raw_len")
            payload = self.take(self.u32("frame_len"), "zstd frame")
        elif by_hash:
            payload = self.hash("payload_hash")
        else:
            payload = self.take(self.u32("len"), "payload")
        return TurnSpecRecord(
            ParentKind(kind),
            parent_turn_id,
            type_tag,
            codec,
            bool(flags & TURN_SPEC_SUMMARY),
            extras,
            payload,
            by_hash,
            zstd_hash,
            raw_len,
        )

    def log_cursor(self) -> LogCursor | None:
        """``u8 present``, then ``u32 phase, u64 next``."""
        if not self.boolean("cursor present"):
            return None
        return LogCursor(self.u32("cursor phase"), self.u64("cursor next"))

    def turn_extras_entries(self) -> tuple[TurnExtrasEntry, ...]:
        """``u32 count``, count x (TURN, EXTRAS, PAYLOAD)."""
        count = self.limit(self.u32("count"), LIST_ITEMS_LIMIT, "count")
        self.count(count, TURN_EXTRAS_ENTRY_BYTES_MIN, "turns")
        return tuple(
            TurnExtrasEntry(self.turn(), self.extras(), self.payload()) for _ in range(count)
        )

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


def _short(data: bytes, field: str) -> bytes:
    """``u16 len, data``."""
    if len(data) > U16_MAX:
        raise ValueError(f"{field} is {len(data)} bytes; the protocol carries at most {U16_MAX}")
    return _u16(len(data)) + bytes(data)


def _short_str(text: str, field: str) -> bytes:
    return _short(text.encode("utf-8"), field)


def _name(name: str, field: str) -> bytes:
    """A short string that must not be empty (an empty one means "none" or "by id")."""
    if not name:
        raise ValueError(f"{field} must not be empty (an empty one means none)")
    return _short_str(name, field)


def _optional_name(name: str | None, field: str) -> bytes:
    return _u16(0) if name is None else _name(name, field)


def _count(items: Sized, field: str) -> bytes:
    """A ``u16`` count."""
    if len(items) > U16_MAX:
        raise ValueError(f"{field}: {len(items)} items; the protocol carries at most {U16_MAX}")
    return _u16(len(items))


def _check_context(context: ContextRef) -> None:
    if isinstance(context, str):
        if not context:
            raise ValueError("a context name must not be empty")
    elif not isinstance(context, int) or isinstance(context, bool):
        raise ValueError(f"a context is a ContextID (int) or a name (str), not {context!r}")


def _context_ref(context: ContextRef) -> bytes:
    """A version-2 inline context ref."""
    _check_context(context)
    if isinstance(context, str):
        return _short_str(context, "context name")
    return _u16(0) + _u64(context)


def _leading_context(context: ContextRef) -> bytes:
    """The leading context of a version-1 layout (a name goes with CTX_BY_NAME)."""
    _check_context(context)
    if isinstance(context, str):
        return _short_str(context, "context name")
    return _u64(context)


def _tags(tags: Sequence[tuple[str, str]], field: str = "tags") -> bytes:
    return _count(tags, field) + b"".join(
        _short_str(key, f"{field} key") + _short_str(value, f"{field} value") for key, value in tags
    )


def _list_cursor(cursor: ListCursor | None) -> bytes:
    if cursor is None:
        return _u8(0)
    if isinstance(cursor, str):
        return _u8(2) + _name(cursor, "cursor name")
    return _u8(1) + _u64(cursor)


def _f32s(vector: Sequence[float], field: str) -> bytes:
    """A VECTOR's components as little-endian binary32 (the caller checked them: finite; a
    component outside binary32's range is a ValueError here)."""
    try:
        return struct.pack(f"<{len(vector)}f", *vector)
    except (struct.error, OverflowError, TypeError) as error:
        raise ValueError(f"{field} cannot travel as f32 components: {error}") from None


def _vector(vector: Sequence[float], dims: int, field: str) -> bytes:
    """A VECTOR of a request whose ``dims`` is given once: exactly ``dims`` components."""
    if len(vector) != dims:
        raise ValueError(
            f"{field} has {len(vector)} components; every vector of the request has {dims}"
        )
    return _f32s(vector, field)


def _tiny(data: bytes, field: str) -> bytes:
    """``u8 len, data``."""
    if len(data) > TINY_BYTES_MAX:
        raise ValueError(
            f"{field} is {len(data)} bytes; the protocol carries at most {TINY_BYTES_MAX}"
        )
    return _u8(len(data)) + bytes(data)


def _tiny_count(items: Sized, field: str) -> bytes:
    """A ``u8`` count."""
    if len(items) > TINY_BYTES_MAX:
        raise ValueError(
            f"{field}: {len(items)} items; the protocol carries at most {TINY_BYTES_MAX}"
        )
    return _u8(len(items))


def _labels(labels: Sequence[tuple[str, str]]) -> bytes:
    return _tiny_count(labels, "labels") + b"".join(
        _tiny(key.encode("utf-8"), "label key") + _short_str(value, "label value")
        for key, value in labels
    )


def _log_cursor(cursor: LogCursor | None) -> bytes:
    if cursor is None:
        return _u8(0)
    return _u8(1) + _u32(cursor.phase) + _u64(cursor.next)


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


@dataclass(frozen=True, slots=True)
class ContextInfoRecord:
    """CONTEXT_INFO on the wire (version 2): the head, times, name (None: none) and tags
    (sorted by key, as the server sends them)."""

    head: ContextHeadRecord
    created_at_unix_ms: int
    updated_at_unix_ms: int
    name: str | None
    tags: tuple[tuple[str, str], ...]

    def encode(self) -> bytes:
        """The record's bytes."""
        return (
            self.head.encode()
            + _u64(self.created_at_unix_ms)
            + _u64(self.updated_at_unix_ms)
            + _optional_name(self.name, "name")
            + _tags(self.tags)
        )


@dataclass(frozen=True, slots=True)
class KvItemRecord:
    """One KV_LIST item: a key, its value's hash and length (the value: KV_GET)."""

    key: bytes
    value_hash: bytes
    value_len: int

    def encode(self) -> bytes:
        """The item's bytes."""
        return _short(self.key, "key") + _hash(self.value_hash) + _u32(self.value_len)


@dataclass(frozen=True, slots=True)
class KvItemExRecord:
    """One KV_ITEM_EX (version 3): a KV_LIST item with its TTL (0: none) and expiry (unix ms;
    0: never)."""

    key: bytes
    value_hash: bytes
    value_len: int
    ttl_ms: int
    expires_at_unix_ms: int

    def encode(self) -> bytes:
        """The item's bytes."""
        return (
            _short(self.key, "key")
            + _hash(self.value_hash)
            + _u32(self.value_len)
            + _u64(self.ttl_ms)
            + _u64(self.expires_at_unix_ms)
        )


@dataclass(frozen=True, slots=True)
class LogCursor:
    """Where a TURN_LOG page ended (version 2): the next turn to look at (``next``) in the
    ``phase``-th owner of the context's turns (0: the context itself, then what it
    inherited). Opaque to callers: pass it back as it came."""

    phase: int
    next: int


@dataclass(frozen=True, slots=True)
class ExtrasRecord:
    """EXTRAS on the wire (version 2): a turn's key (empty: none), labels (in the order
    stored) and links. ``u8 key_len, key, u8 label_count, label_count x (u8 key_len, key, u16
    value_len, value), u8 link_count, link_count x u64``; none: three zero bytes."""

    key: bytes = b""
    labels: tuple[tuple[str, str], ...] = ()
    links: tuple[int, ...] = ()

    def encode(self) -> bytes:
        """The record's bytes."""
        return (
            _tiny(self.key, "key")
            + _labels(self.labels)
            + _tiny_count(self.links, "links")
            + b"".join(_u64(link) for link in self.links)
        )


_PARENT_KINDS = frozenset(int(kind) for kind in ParentKind)


@dataclass(frozen=True, slots=True)
class TurnSpecRecord:
    """One TURN_SPEC of APPEND_TURNS: ``u8 parent_kind, u64 parent_turn_id (0 unless kind
    TURN), u64 type_tag, u32 codec, u8 turn_flags (SUMMARY, BY_HASH, ZSTD), EXTRAS``, then the
    payload: ``hash[32]`` with BY_HASH (``by_hash``: ``payload`` is that hash); with ZSTD
    (version 3: ``zstd_hash`` set, ``payload`` the frame) ``hash[32], u32 raw_len, u32
    frame_len`` and the frame; else ``u32 len`` and the bytes."""

    parent_kind: ParentKind
    parent_turn_id: int
    type_tag: int
    codec: int
    summary: bool
    extras: ExtrasRecord
    payload: bytes
    by_hash: bool = False
    zstd_hash: bytes | None = None
    """With ZSTD: the BLAKE3 of the ``raw_len`` bytes the frame ``payload`` inflates to."""
    raw_len: int = 0

    def head_bytes(self) -> bytes:
        """Everything before the payload's bytes (for a payload by hash: everything)."""
        if self.parent_kind not in _PARENT_KINDS:
            raise ValueError(f"unknown parent kind {self.parent_kind!r}")
        if (self.parent_kind == ParentKind.TURN) != (self.parent_turn_id != 0):
            raise ValueError("parent_turn_id is set with parent kind TURN only (and 0 is no turn)")
        if self.by_hash and self.zstd_hash is not None:
            raise ValueError("a payload is by hash or a zstd frame, not both")
        flags = (
            (TURN_SPEC_SUMMARY if self.summary else 0)
            | (TURN_SPEC_BY_HASH if self.by_hash else 0)
            | (0 if self.zstd_hash is None else TURN_SPEC_ZSTD)
        )
        head = (
            _u8(int(self.parent_kind))
            + _u64(self.parent_turn_id)
            + _u64(self.type_tag)
            + _u32(self.codec)
            + _u8(flags)
            + self.extras.encode()
        )
        if self.by_hash:
            return head + _hash(self.payload)
        if self.zstd_hash is not None:
            return head + _hash(self.zstd_hash) + _u32(self.raw_len) + _u32(len(self.payload))
        return head + _u32(len(self.payload))

    def encode(self) -> bytes:
        """The record's bytes."""
        return self.head_bytes() + (b"" if self.by_hash else bytes(self.payload))


@dataclass(frozen=True, slots=True)
class AppendedTurnRecord:
    """One turn of APPEND_TURNS' answer: the turn, whether its payload was stored already
    (``deduped``), whether its key was (``existing``: the turn is that earlier one; nothing
    was written)."""

    turn: TurnRecord
    deduped: bool
    existing: bool

    def encode(self) -> bytes:
        """The record's 90 bytes."""
        return self.turn.encode() + _u8(int(self.deduped)) + _u8(int(self.existing))


@dataclass(frozen=True, slots=True)
class TurnExtrasEntry:
    """One entry of a version-2 page (TURN_LOG, READ_PAGE): a turn, its extras, its payload
    (ABSENT if not requested)."""

    turn: TurnRecord
    extras: ExtrasRecord
    payload: PayloadRecord

    def encode(self) -> bytes:
        """The entry's bytes."""
        return self.turn.encode() + self.extras.encode() + self.payload.encode()


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A CHUNK entry of PUT_CHUNKED (36 bytes): ``hash[32]`` (BLAKE3 of the chunk's bytes),
    ``u32 len`` (1..=:data:`CHUNK_BYTES_MAX`)."""

    hash: bytes
    len: int


@dataclass(frozen=True, slots=True)
class ChunkBase:
    """PUT_CHUNKED's base: the payload's first ``kept`` chunks (1 or more) are the first
    ``kept`` chunks of the stored chunked payload ``hash``; the request's chunks follow them.
    On the wire ``hash[32], u32 kept``; none is 32 zero bytes and 0."""

    hash: bytes
    kept: int


@dataclass(frozen=True, slots=True)
class SentChunkRecord:
    """A SENT entry of PUT_CHUNKED: ``u32 index`` (into the chunks), ``u32 len`` (that chunk's
    ``len``), then ``data`` (``len`` bytes)."""

    index: int
    data: bytes


_OVERLAY = struct.Struct("<QB7s")
assert _OVERLAY.size == OVERLAY_BYTES


@dataclass(frozen=True, slots=True)
class OverlayRecord:
    """OVERLAY (16 bytes, version 2, decision 0012): a turn's overlay state in an answer sent
    with the frame flag :data:`OVERLAYS` — ``u64 overlay_seq`` (the overlay its TURN shows, 0:
    as appended), ``u8 overlay_flags`` (bit 0 :data:`OVERLAY_REDACTED`), 7 reserved."""

    overlay_seq: int = 0
    redacted: bool = False

    def encode(self) -> bytes:
        """The record's 16 bytes."""
        return _pack(_OVERLAY, self.overlay_seq, OVERLAY_REDACTED if self.redacted else 0, bytes(7))


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
    TAKES_CONTEXT: ClassVar[bool] = False
    """True for the version-1 messages that lead with a ``context_id``, which the frame flag
    CTX_BY_NAME replaces by a name."""

    def encode_body(self) -> bytes:
        """The body as one bytes object."""
        return b"".join(self.body_chunks())

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.MSG_TYPE

    @property
    def frame_flags(self) -> int:
        """The frame header's ``flags`` this request is sent with."""
        return 0

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
    CARRIES_MORE: ClassVar[bool] = False
    """Whether this answer may come with the frame flag :data:`MORE` (then the class has
    ``with_more``, which checks the body allows it)."""

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.MSG_TYPES[0]

    @property
    def frame_flags(self) -> int:
        """The frame header's ``flags`` this response is sent with (only
        :class:`OverlaidResponse` has one)."""
        return 0


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


class _LeadingContext(Request):
    """A version-1 message whose body leads with its context: a ContextID, or (version 2) a
    name sent with the frame flag CTX_BY_NAME."""

    TAKES_CONTEXT: ClassVar[bool] = True
    context: ContextRef

    @property
    def frame_flags(self) -> int:
        """CTX_BY_NAME when the context is named."""
        return CTX_BY_NAME if isinstance(self.context, str) else 0

    @property
    def required_version(self) -> int:
        """2 when the context is named (the flag is version 2), else 1."""
        return 2 if isinstance(self.context, str) else self.MIN_VERSION


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
class GetHead(_LeadingContext):
    """GET_HEAD (0x0005): a context's head."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_HEAD
    NAME: ClassVar[str] = "GET_HEAD"

    context: ContextRef

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_leading_context(self.context)]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetHead:
        """See :meth:`Message.decode_body`."""
        return cls(reader.leading_context())


def _append_fields(
    context: ContextRef, expected_head: int | None, type_tag: int, codec: int
) -> bytes:
    flags = 0 if expected_head is None else APPEND_EXPECT_HEAD
    return (
        _leading_context(context)
        + _u64(0 if expected_head is None else expected_head)
        + _u64(type_tag)
        + _u32(codec)
        + _u32(flags)
    )


def _decode_append_fields(reader: Reader) -> tuple[ContextRef, int | None, int, int]:
    context = reader.leading_context()
    expected = reader.u64("expected_head")
    type_tag = reader.u64("type_tag")
    codec = reader.u32("codec")
    flags = reader.flags(APPEND_FLAGS_KNOWN, "append_flags")
    if not flags & APPEND_EXPECT_HEAD:
        if expected:
            raise reader.error("expected_head", "set without EXPECT_HEAD")
        return context, None, type_tag, codec
    return context, expected, type_tag, codec


@register_request
@dataclass(frozen=True, slots=True)
class AppendTurn(_LeadingContext):
    """APPEND_TURN (0x0006): appends a turn with its payload (``expected_head`` None: no
    compare-and-set; 0: the context must be empty)."""

    MSG_TYPE: ClassVar[int] = MessageType.APPEND_TURN
    NAME: ClassVar[str] = "APPEND_TURN"

    context: ContextRef
    expected_head: int | None
    type_tag: int
    codec: int
    payload: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        fields = _append_fields(self.context, self.expected_head, self.type_tag, self.codec)
        head = fields + _u32(len(self.payload)) + _u32(0)
        if len(self.payload) < _COPY_BYTES_MAX:
            return [head + bytes(self.payload)]
        return [head, self.payload]

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendTurn:
        """See :meth:`Message.decode_body`."""
        context, expected_head, type_tag, codec = _decode_append_fields(reader)
        payload_len = reader.u32("payload_len")
        reader.zero(4)
        payload = reader.take(payload_len, "payload")
        return cls(context, expected_head, type_tag, codec, payload)


@register_request
@dataclass(frozen=True, slots=True)
class AppendTurnByHash(_LeadingContext):
    """APPEND_TURN_BY_HASH (0x0007): appends a turn whose payload is an already stored blob."""

    MSG_TYPE: ClassVar[int] = MessageType.APPEND_TURN_BY_HASH
    NAME: ClassVar[str] = "APPEND_TURN_BY_HASH"

    context: ContextRef
    expected_head: int | None
    type_tag: int
    codec: int
    payload_hash: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        fields = _append_fields(self.context, self.expected_head, self.type_tag, self.codec)
        return [fields + _hash(self.payload_hash)]

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendTurnByHash:
        """See :meth:`Message.decode_body`."""
        context, expected_head, type_tag, codec = _decode_append_fields(reader)
        return cls(context, expected_head, type_tag, codec, reader.hash("payload_hash"))


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
class GetLast(_LeadingContext):
    """GET_LAST (0x0009): the ``limit`` newest turns of a context, oldest first."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_LAST
    NAME: ClassVar[str] = "GET_LAST"

    context: ContextRef
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_leading_context(self.context) + _u32(self.limit) + _u32(self.read_flags)]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetLast:
        """See :meth:`Message.decode_body`."""
        context = reader.leading_context()
        limit = reader.u32("limit")
        return cls(context, limit, reader.flags(READ_FLAGS_KNOWN, "read_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class GetBefore(_LeadingContext):
    """GET_BEFORE (0x000A): the ``limit`` turns older than ``before_turn_id``, oldest first."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_BEFORE
    NAME: ClassVar[str] = "GET_BEFORE"

    context: ContextRef
    before_turn_id: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _leading_context(self.context)
            + _u64(self.before_turn_id)
            + _u32(self.limit)
            + _u32(self.read_flags)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetBefore:
        """See :meth:`Message.decode_body`."""
        context = reader.leading_context()
        before = reader.u64("before_turn_id")
        limit = reader.u32("limit")
        return cls(context, before, limit, reader.flags(READ_FLAGS_KNOWN, "read_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class GetRangeByDepth(_LeadingContext):
    """GET_RANGE_BY_DEPTH (0x000B): a context's turns with depth in ``from_depth ..
    from_depth + limit``."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_RANGE_BY_DEPTH
    NAME: ClassVar[str] = "GET_RANGE_BY_DEPTH"

    context: ContextRef
    from_depth: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _leading_context(self.context)
            + _u32(self.from_depth)
            + _u32(self.limit)
            + _u32(self.read_flags)
            + _u32(0)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetRangeByDepth:
        """See :meth:`Message.decode_body`."""
        context = reader.leading_context()
        from_depth = reader.u32("from_depth")
        limit = reader.u32("limit")
        flags = reader.flags(READ_FLAGS_KNOWN, "read_flags")
        reader.zero(4)
        return cls(context, from_depth, limit, flags)


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


# --- version 2 requests -----------------------------------------------------------------------


def _expected_head_fields(known_bit: int, expected_head: int | None) -> bytes:
    """``u32 flags`` with ``known_bit`` when ``expected_head`` is set, then ``u64
    expected_head`` (0 without it)."""
    if expected_head is None:
        return _u32(0) + _u64(0)
    return _u32(known_bit) + _u64(expected_head)


@register_request
@dataclass(frozen=True, slots=True)
class CtxOpen(Request):
    """CTX_OPEN (0x0010, v2): a new context — empty, forked at ``base_turn_id`` or a clone of
    ``clone_from`` — optionally named and tagged; with ``get_or_create`` a taken name answers
    its context instead of ALREADY_EXISTS.

    Body: ``u64 base_turn_id, u8 open_flags, u8 reserved, [CLONE: context ref], u16 name_len,
    name (0: none), TAGS``."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_OPEN
    NAME: ClassVar[str] = "CTX_OPEN"
    MIN_VERSION: ClassVar[int] = 2

    base_turn_id: int
    get_or_create: bool
    clone_from: ContextRef | None
    name: str | None
    tags: tuple[tuple[str, str], ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        flags = (OPEN_GET_OR_CREATE if self.get_or_create else 0) | (
            0 if self.clone_from is None else OPEN_CLONE
        )
        source = b"" if self.clone_from is None else _context_ref(self.clone_from)
        return [
            _u64(self.base_turn_id)
            + _u8(flags)
            + _u8(0)
            + source
            + _optional_name(self.name, "name")
            + _tags(self.tags)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxOpen:
        """See :meth:`Message.decode_body`."""
        base_turn_id = reader.u64("base_turn_id")
        flags = reader.u8("open_flags")
        if flags & ~OPEN_FLAGS_KNOWN:
            raise reader.error("open_flags", "unknown flag bits")
        reader.zero(1)
        clone_from = reader.context_ref() if flags & OPEN_CLONE else None
        name = reader.optional_name("name")
        tags = reader.tags()
        return cls(base_turn_id, bool(flags & OPEN_GET_OR_CREATE), clone_from, name, tags)


@register_request
@dataclass(frozen=True, slots=True)
class CtxShow(Request):
    """CTX_SHOW (0x0011, v2): a context's head, name, tags and times. Body: context ref."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_SHOW
    NAME: ClassVar[str] = "CTX_SHOW"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_context_ref(self.context)]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxShow:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_ref())


@register_request
@dataclass(frozen=True, slots=True)
class CtxTag(Request):
    """CTX_TAG (0x0012, v2): sets and removes tags atomically, with ``expected_head`` only if
    the head is that turn (else CONFLICT).

    Body: ``context ref, u32 tag_flags, u64 expected_head, TAGS (set), u16 remove_count x
    (u16 key_len, key)``."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_TAG
    NAME: ClassVar[str] = "CTX_TAG"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    expected_head: int | None
    set: tuple[tuple[str, str], ...]
    remove: tuple[str, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _context_ref(self.context)
            + _expected_head_fields(TAG_EXPECT_HEAD, self.expected_head)
            + _tags(self.set)
            + _count(self.remove, "removed tags")
            + b"".join(_short_str(key, "tag key") for key in self.remove)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxTag:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        flags = reader.flags(TAG_FLAGS_KNOWN, "tag_flags")
        expected = reader.u64("expected_head")
        if not flags & TAG_EXPECT_HEAD and expected:
            raise reader.error("expected_head", "set without EXPECT_HEAD")
        set_tags = reader.tags()
        count = reader.count(reader.u16("remove_count"), 2, "removed tags")
        remove = tuple(reader.short_string("tag key") for _ in range(count))
        return cls(context, expected if flags & TAG_EXPECT_HEAD else None, set_tags, remove)


def _time_bound(value: int | None, field: str) -> bytes:
    if value == 0:
        raise ValueError(f"{field} 0 would mean no bound: pass None")
    return _u64(value or 0)


@register_request
@dataclass(frozen=True, slots=True)
class CtxList(Request):
    """CTX_LIST (0x0013, v2): contexts matching every condition, one page after ``cursor``.

    Body: ``TAGS, u16 prefix_len, prefix (0: any), u64 updated_after_unix_ms (0: no bound),
    u64 updated_before_unix_ms (0: no bound), LIST_CURSOR, u32 limit``."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_LIST
    NAME: ClassVar[str] = "CTX_LIST"
    MIN_VERSION: ClassVar[int] = 2

    tags: tuple[tuple[str, str], ...]
    name_prefix: str | None
    updated_after_unix_ms: int | None
    updated_before_unix_ms: int | None
    cursor: ListCursor | None
    limit: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _tags(self.tags)
            + _optional_name(self.name_prefix, "name_prefix")
            + _time_bound(self.updated_after_unix_ms, "updated_after_unix_ms")
            + _time_bound(self.updated_before_unix_ms, "updated_before_unix_ms")
            + _list_cursor(self.cursor)
            + _u32(self.limit)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxList:
        """See :meth:`Message.decode_body`."""
        tags = reader.tags()
        prefix = reader.optional_name("name_prefix")
        after = reader.u64("updated_after_unix_ms") or None
        before = reader.u64("updated_before_unix_ms") or None
        cursor = reader.list_cursor()
        return cls(tags, prefix, after, before, cursor, reader.u32("limit"))


@register_request
@dataclass(frozen=True, slots=True)
class CtxName(Request):
    """CTX_NAME (0x0014, v2): names a context that has no name yet. Body: ``context ref, u16
    name_len, name``."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_NAME
    NAME: ClassVar[str] = "CTX_NAME"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    name: str

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_context_ref(self.context) + _short_str(self.name, "name")]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxName:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_ref(), reader.short_string("name"))


@register_request
@dataclass(frozen=True, slots=True)
class KvPut(Request):
    """KV_PUT (0x0015, v2): puts key-value entries in one durable record; with
    ``if_absent``, keys the context has keep their values.

    Body: ``context ref, u8 mode (0 replace, 1 if absent), u16 count x (u16 key_len, key, u32
    value_len, value)``. Large values travel as separate chunks (not copied)."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_PUT
    NAME: ClassVar[str] = "KV_PUT"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    if_absent: bool
    entries: tuple[tuple[bytes, bytes], ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return _kv_entries(_context_ref(self.context) + _u8(int(self.if_absent)), self.entries)

    @classmethod
    def decode_body(cls, reader: Reader) -> KvPut:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        mode = reader.u8("mode")
        if mode > 1:
            raise reader.error("mode", "not 0 (replace) or 1 (if absent)")
        return cls(context, mode == 1, _read_kv_entries(reader))


@register_request
@dataclass(frozen=True, slots=True)
class KvGet(Request):
    """KV_GET (0x0016, v2): a key's value. Body: ``context ref, u16 key_len, key, u32
    read_flags (only ACCEPT_ZSTD)``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_GET
    NAME: ClassVar[str] = "KV_GET"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    key: bytes
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_context_ref(self.context) + _short(self.key, "key") + _u32(self.read_flags)]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvGet:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        key = reader.short_bytes("key")
        return cls(context, key, reader.flags(READ_ACCEPT_ZSTD, "read_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class KvDelete(Request):
    """KV_DELETE (0x0017, v2): deletes keys (absent keys are no error). Body: ``context ref,
    u16 count x (u16 key_len, key)``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_DELETE
    NAME: ClassVar[str] = "KV_DELETE"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    keys: tuple[bytes, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _context_ref(self.context)
            + _count(self.keys, "keys")
            + b"".join(_short(key, "key") for key in self.keys)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvDelete:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        count = reader.count(reader.u16("count"), 2, "keys")
        return cls(context, tuple(reader.short_bytes("key") for _ in range(count)))


@register_request
@dataclass(frozen=True, slots=True)
class KvList(Request):
    """KV_LIST (0x0018, v2): entries whose keys start with ``prefix``, in key order, after
    ``after`` (empty: from the first). Body: ``context ref, u16 prefix_len, prefix, u16
    after_len, after, u32 limit``. Fewer than ``limit`` items: the listing is complete."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_LIST
    NAME: ClassVar[str] = "KV_LIST"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    prefix: bytes
    after: bytes
    limit: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_kv_list_body(self.context, self.prefix, self.after, self.limit)]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvList:
        """See :meth:`Message.decode_body`."""
        return cls(*_read_kv_list(reader))


def _kv_list_body(context: ContextRef, prefix: bytes, after: bytes, limit: int) -> bytes:
    """KV_LIST's body, which KV_LIST_EX's starts with."""
    return _context_ref(context) + _short(prefix, "prefix") + _short(after, "after") + _u32(limit)


def _read_kv_list(reader: Reader) -> tuple[ContextRef, bytes, bytes, int]:
    context = reader.context_ref()
    prefix = reader.short_bytes("prefix")
    after = reader.short_bytes("after")
    return context, prefix, after, reader.u32("limit")


def _kv_entries(head: bytes, entries: tuple[tuple[bytes, bytes], ...]) -> list[bytes]:
    """``head``, then ``u16 count x (u16 key_len, key, u32 value_len, value)``, large values
    as chunks of their own (not copied): KV_PUT and KV_PUT_EX."""
    chunks: list[bytes] = []
    small = bytearray(head)
    small += _count(entries, "entries")
    for key, value in entries:
        small += _short(key, "key") + _u32(len(value))
        if len(value) < _COPY_BYTES_MAX:
            small += value
        else:
            chunks += [bytes(small), value]
            small = bytearray()
    if small or not chunks:
        chunks.append(bytes(small))
    return chunks


def _read_kv_entries(reader: Reader) -> tuple[tuple[bytes, bytes], ...]:
    count = reader.count(reader.u16("count"), 6, "entries")
    entries = []
    for _ in range(count):
        key = reader.short_bytes("key")
        entries.append((key, reader.take(reader.u32("value_len"), "value")))
    return tuple(entries)


def _kv_flags(reader: Reader, known: int, field: str) -> int:
    value = reader.u8(field)
    if value & ~known:
        raise reader.error(field, "unknown flag bits")
    return value


@register_request
@dataclass(frozen=True, slots=True)
class KvPutEx(Request):
    """KV_PUT_EX (0x0028, v3): KV_PUT with a time to live: every entry written expires
    ``ttl_ms`` after this put or its last refresh (0: never).

    Body: ``context ref, u8 put_flags (IF_ABSENT), u64 ttl_ms, u16 count x (u16 key_len, key,
    u32 value_len, value)``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_PUT_EX
    NAME: ClassVar[str] = "KV_PUT_EX"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    put_flags: int
    ttl_ms: int
    entries: tuple[tuple[bytes, bytes], ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        head = _context_ref(self.context) + _u8(self.put_flags) + _u64(self.ttl_ms)
        return _kv_entries(head, self.entries)

    @classmethod
    def decode_body(cls, reader: Reader) -> KvPutEx:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        put_flags = _kv_flags(reader, KV_PUT_IF_ABSENT, "put_flags")
        ttl_ms = reader.u64("ttl_ms")
        return cls(context, put_flags, ttl_ms, _read_kv_entries(reader))


@register_request
@dataclass(frozen=True, slots=True)
class KvGetEx(Request):
    """KV_GET_EX (0x0029, v3): a key's value with its TTL and expiry; ``kv_flags`` REFRESH
    restarts the TTL first. Body: ``context ref, u16 key_len, key, u32 read_flags (only
    ACCEPT_ZSTD), u8 kv_flags``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_GET_EX
    NAME: ClassVar[str] = "KV_GET_EX"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    key: bytes
    read_flags: int
    kv_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _context_ref(self.context)
            + _short(self.key, "key")
            + _u32(self.read_flags)
            + _u8(self.kv_flags)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvGetEx:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        key = reader.short_bytes("key")
        read_flags = reader.flags(READ_ACCEPT_ZSTD, "read_flags")
        return cls(context, key, read_flags, _kv_flags(reader, KV_READ_REFRESH, "kv_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class KvListEx(Request):
    """KV_LIST_EX (0x002A, v3): KV_LIST answering each entry's TTL and expiry; ``kv_flags``
    REFRESH restarts those of the entries returned. Body: KV_LIST's, then ``u8 kv_flags``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_LIST_EX
    NAME: ClassVar[str] = "KV_LIST_EX"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    prefix: bytes
    after: bytes
    limit: int
    kv_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        body = _kv_list_body(self.context, self.prefix, self.after, self.limit)
        return [body + _u8(self.kv_flags)]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvListEx:
        """See :meth:`Message.decode_body`."""
        listed = _read_kv_list(reader)
        return cls(*listed, _kv_flags(reader, KV_READ_REFRESH, "kv_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class KvTouch(Request):
    """KV_TOUCH (0x002B, v3): restarts the TTL of each key from now: ``ttl_ms`` from now on,
    or (0) each entry's own. Body: ``context ref, u64 ttl_ms, u16 count x (u16 key_len,
    key)``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_TOUCH
    NAME: ClassVar[str] = "KV_TOUCH"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    ttl_ms: int
    keys: tuple[bytes, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _context_ref(self.context)
            + _u64(self.ttl_ms)
            + _count(self.keys, "keys")
            + b"".join(_short(key, "key") for key in self.keys)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvTouch:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        ttl_ms = reader.u64("ttl_ms")
        count = reader.count(reader.u16("count"), 2, "keys")
        return cls(context, ttl_ms, tuple(reader.short_bytes("key") for _ in range(count)))


@register_request
@dataclass(frozen=True, slots=True)
class KvGetMany(Request):
    """KV_GET_MANY (0x002C, v3): the values of 1 to 128 keys, each with its TTL and expiry, from
    one snapshot. Body: ``context ref, u32 read_flags (only ACCEPT_ZSTD), u16 count x (u16
    key_len, key)``."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_GET_MANY
    NAME: ClassVar[str] = "KV_GET_MANY"
    MIN_VERSION: ClassVar[int] = 3

    context: ContextRef
    read_flags: int
    keys: tuple[bytes, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _context_ref(self.context)
            + _u32(self.read_flags)
            + _count(self.keys, "keys")
            + b"".join(_short(key, "key") for key in self.keys)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> KvGetMany:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        read_flags = reader.flags(READ_ACCEPT_ZSTD, "read_flags")
        count = reader.count(reader.u16("count"), 2, "keys")
        return cls(context, read_flags, tuple(reader.short_bytes("key") for _ in range(count)))


@register_request
@dataclass(frozen=True, slots=True)
class AppendTurns(Request):
    """APPEND_TURNS (0x0019, v2): one or more turns to one context, in order, all or none, in
    one group commit; each turn's parent is the previous one unless its spec says otherwise.
    With ``expected_head`` (0: the context must be empty) only if the head is that turn.

    Body: ``context ref, u32 append_flags (EXPECT_HEAD), u64 expected_head, u16 count (>= 1),
    count x TURN_SPEC``. Large payloads travel as separate chunks (not copied)."""

    MSG_TYPE: ClassVar[int] = MessageType.APPEND_TURNS
    NAME: ClassVar[str] = "APPEND_TURNS"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    expected_head: int | None
    turns: tuple[TurnSpecRecord, ...]

    @property
    def required_version(self) -> int:
        """2; 3 when a payload is a zstd frame (TURN_SPEC flag ZSTD)."""
        return 3 if any(spec.zstd_hash is not None for spec in self.turns) else 2

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not self.turns:
            raise ValueError("APPEND_TURNS carries at least one turn")
        chunks: list[bytes] = []
        small = bytearray(
            _context_ref(self.context)
            + _expected_head_fields(APPEND_EXPECT_HEAD, self.expected_head)
            + _count(self.turns, "turns")
        )
        for spec in self.turns:
            small += spec.head_bytes()
            if spec.by_hash:
                continue
            if len(spec.payload) < _COPY_BYTES_MAX:
                small += spec.payload
            else:
                chunks += [bytes(small), spec.payload]
                small = bytearray()
        if small or not chunks:
            chunks.append(bytes(small))
        return chunks

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendTurns:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        flags = reader.flags(APPEND_FLAGS_KNOWN, "append_flags")
        expected = reader.u64("expected_head")
        if not flags & APPEND_EXPECT_HEAD and expected:
            raise reader.error("expected_head", "set without EXPECT_HEAD")
        count = reader.count(reader.u16("count"), TURN_SPEC_BYTES_MIN, "turns")
        if count == 0:
            raise reader.error("count", "no turns")
        turns = tuple(reader.turn_spec() for _ in range(count))
        return cls(context, expected if flags & APPEND_EXPECT_HEAD else None, turns)


@register_request
@dataclass(frozen=True, slots=True)
class GetTurnByKey(Request):
    """GET_TURN_BY_KEY (0x001A, v2): the turn of the context (its own or inherited through a
    fork or clone) with ``key``; NOT_FOUND if none. Body: ``context ref, u8 key_len, key``."""

    MSG_TYPE: ClassVar[int] = MessageType.GET_TURN_BY_KEY
    NAME: ClassVar[str] = "GET_TURN_BY_KEY"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    key: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_context_ref(self.context) + _tiny(self.key, "key")]

    @classmethod
    def decode_body(cls, reader: Reader) -> GetTurnByKey:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_ref(), reader.tiny_bytes("key"))


@register_request
@dataclass(frozen=True, slots=True)
class TurnLog(Request):
    """TURN_LOG (0x001B, v2): the context's turns carrying every label of ``labels``, newest
    first across all its branches, then what it inherited; one page after ``cursor``.

    Body: ``context ref, u8 label_count x (u8 key_len, key, u16 value_len, value), cursor (u8
    present, then u32 phase, u64 next), u32 limit (1..=1000), u32 read_flags``."""

    MSG_TYPE: ClassVar[int] = MessageType.TURN_LOG
    NAME: ClassVar[str] = "TURN_LOG"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    labels: tuple[tuple[str, str], ...]
    cursor: LogCursor | None
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _context_ref(self.context)
            + _labels(self.labels)
            + _log_cursor(self.cursor)
            + _u32(self.limit)
            + _u32(self.read_flags)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> TurnLog:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        labels = reader.labels()
        cursor = reader.log_cursor()
        limit = reader.u32("limit")
        return cls(context, labels, cursor, limit, reader.flags(READ_FLAGS_KNOWN, "read_flags"))


@register_request
@dataclass(frozen=True, slots=True)
class ReadPage(Request):
    """READ_PAGE (0x001C, v2): a page of the context's chain with each turn's extras.

    Body: ``context ref, u8 kind, u64 before_turn_id (BEFORE; else 0), u32 from_depth (RANGE;
    else 0), u32 limit, u32 read_flags``."""

    MSG_TYPE: ClassVar[int] = MessageType.READ_PAGE
    NAME: ClassVar[str] = "READ_PAGE"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    kind: PageKind
    before_turn_id: int
    from_depth: int
    limit: int
    read_flags: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if self.kind not in _PAGE_KINDS:
            raise ValueError(f"unknown page kind {self.kind!r}")
        if self.before_turn_id and self.kind != PageKind.BEFORE:
            raise ValueError("before_turn_id is for a BEFORE page only")
        if self.from_depth and self.kind != PageKind.RANGE:
            raise ValueError("from_depth is for a RANGE page only")
        return [
            _context_ref(self.context)
            + _u8(int(self.kind))
            + _u64(self.before_turn_id)
            + _u32(self.from_depth)
            + _u32(self.limit)
            + _u32(self.read_flags)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> ReadPage:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        kind = reader.u8("kind")
        before = reader.u64("before_turn_id")
        from_depth = reader.u32("from_depth")
        if kind not in _PAGE_KINDS:
            raise reader.error("kind", f"unknown value {kind}")
        if (before and kind != PageKind.BEFORE) or (from_depth and kind != PageKind.RANGE):
            raise reader.error("kind", "a field it does not use is set")
        limit = reader.u32("limit")
        flags = reader.flags(READ_FLAGS_KNOWN, "read_flags")
        return cls(context, PageKind(kind), before, from_depth, limit, flags)


@register_request
@dataclass(frozen=True, slots=True)
class FindTurns(Request):
    """FIND_TURNS (0x001D, v2): turns of every context carrying the label ``key = value``,
    newest first, older than ``before_turn_id`` (0: from the newest), from the server's
    store-wide index; only indexed label keys (``run_id``, ``thread_id``, ``idx.*``).

    Body: ``u8 key_len, key, u16 value_len, value (UTF-8), u64 before_turn_id, u32 limit``."""

    MSG_TYPE: ClassVar[int] = MessageType.FIND_TURNS
    NAME: ClassVar[str] = "FIND_TURNS"
    MIN_VERSION: ClassVar[int] = 2

    key: str
    value: str
    before_turn_id: int
    limit: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _tiny(self.key.encode("utf-8"), "label key")
            + _short_str(self.value, "label value")
            + _u64(self.before_turn_id)
            + _u32(self.limit)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> FindTurns:
        """See :meth:`Message.decode_body`."""
        key = reader.tiny_string("label key")
        value = reader.short_string("label value")
        return cls(key, value, reader.u64("before_turn_id"), reader.u32("limit"))


@register_request
@dataclass(frozen=True, slots=True)
class CtxDelete(Request):
    """CTX_DELETE (0x001E, v2): deletes a context (NOT_FOUND from then on; its name is free
    again). Body: context ref."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_DELETE
    NAME: ClassVar[str] = "CTX_DELETE"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_context_ref(self.context)]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxDelete:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_ref())


@register_request
@dataclass(frozen=True, slots=True)
class CtxPrune(Request):
    """CTX_PRUNE (0x001F, v2): keeps the newest ``keep`` (>= 1) depths of the context's chain
    reachable through it. Body: context ref, ``u32 keep``."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_PRUNE
    NAME: ClassVar[str] = "CTX_PRUNE"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    keep: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_context_ref(self.context) + _u32(self.keep)]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxPrune:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_ref(), reader.u32("keep"))


#: CTX_TTL's ``ttl_flags`` bit: set ``ttl_ms`` (clear: only read the retention settings).
TTL_SET = 0x01


@register_request
@dataclass(frozen=True, slots=True)
class CtxTtl(Request):
    """CTX_TTL (0x0020, v2): with ``set``, sets the context's time to live (``ttl_ms``; 0
    clears it); without, only reads. Body: context ref, ``u8 ttl_flags`` (bit 0 SET),
    ``u64 ttl_ms`` (0 without SET)."""

    MSG_TYPE: ClassVar[int] = MessageType.CTX_TTL
    NAME: ClassVar[str] = "CTX_TTL"
    MIN_VERSION: ClassVar[int] = 2

    context: ContextRef
    set: bool
    ttl_ms: int

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not self.set and self.ttl_ms:
            raise ValueError("ttl_ms is 0 when CTX_TTL only reads")
        return [_context_ref(self.context) + _u8(TTL_SET if self.set else 0) + _u64(self.ttl_ms)]

    @classmethod
    def decode_body(cls, reader: Reader) -> CtxTtl:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        flags = reader.u8("ttl_flags")
        if flags & ~TTL_SET:
            raise reader.error("ttl_flags", "unknown flag bits")
        ttl_ms = reader.u64("ttl_ms")
        if not flags and ttl_ms:
            raise reader.error("ttl_ms", "not 0 without the SET flag")
        return cls(context, bool(flags), ttl_ms)


@register_request
@dataclass(frozen=True, slots=True)
class Backup(Request):
    """BACKUP (0x0021, v2): the server writes a consistent copy of its store into ``dir`` (an
    absolute path on the server's host, absent or empty). Body: ``u16 dir_len, dir``."""

    MSG_TYPE: ClassVar[int] = MessageType.BACKUP
    NAME: ClassVar[str] = "BACKUP"
    MIN_VERSION: ClassVar[int] = 2

    dir: str

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not self.dir:
            raise ValueError("a backup directory is needed")
        return [_short_str(self.dir, "dir")]

    @classmethod
    def decode_body(cls, reader: Reader) -> Backup:
        """See :meth:`Message.decode_body`."""
        return cls(reader.short_string("dir"))


@register_request
@dataclass(frozen=True, slots=True)
class Gc(Request):
    """GC (0x0022, v2): run a garbage collection now; answered GC_DONE when it is done. Body:
    ``u32 gc_flags`` (no bit defined yet: 0)."""

    MSG_TYPE: ClassVar[int] = MessageType.GC
    NAME: ClassVar[str] = "GC"
    MIN_VERSION: ClassVar[int] = 2

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_u32(0)]

    @classmethod
    def decode_body(cls, reader: Reader) -> Gc:
        """See :meth:`Message.decode_body`."""
        reader.flags(0, "gc_flags")
        return cls()


@register_request
@dataclass(frozen=True, slots=True)
class StatsEx(Request):
    """STATS_EX (0x0023, v2): STATS with the garbage collector's figures. Empty body."""

    MSG_TYPE: ClassVar[int] = MessageType.STATS_EX
    NAME: ClassVar[str] = "STATS_EX"
    MIN_VERSION: ClassVar[int] = 2

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [b""]

    @classmethod
    def decode_body(cls, reader: Reader) -> StatsEx:
        """See :meth:`Message.decode_body`."""
        return cls()


@register_request
@dataclass(frozen=True, slots=True)
class ReplicationStats(Request):
    """REPLICATION_STATS (0x0037, v3): this server's side of its replica (issue 31). Empty
    body."""

    MSG_TYPE: ClassVar[int] = MessageType.REPLICATION_STATS
    NAME: ClassVar[str] = "REPLICATION_STATS"
    MIN_VERSION: ClassVar[int] = 3

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [b""]

    @classmethod
    def decode_body(cls, reader: Reader) -> ReplicationStats:
        """See :meth:`Message.decode_body`."""
        return cls()


@register_request
@dataclass(frozen=True, slots=True)
class Role(Request):
    """ROLE (0x0039, v4, decision 0031): what this server is in its replica's failover now.
    Empty body."""

    MSG_TYPE: ClassVar[int] = MessageType.ROLE
    NAME: ClassVar[str] = "ROLE"
    MIN_VERSION: ClassVar[int] = 4

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [b""]

    @classmethod
    def decode_body(cls, reader: Reader) -> Role:
        """See :meth:`Message.decode_body`."""
        return cls()


TENANT_NAME_BYTES_MAX = 64
"""The longest tenant name (bytes of UTF-8), and so TENANT_LIST's ``after`` and ``next``."""
TENANT_LIST_LIMIT = 1000
"""The most tenants one TENANT_LIST page holds (``limit`` is 1 to this)."""


def _tenant_name_length(name: str, field: str) -> bytes:
    """A ``u16 len``-prefixed tenant name (or cursor) of at most 64 bytes of UTF-8."""
    data = name.encode("utf-8")
    if len(data) > TENANT_NAME_BYTES_MAX:
        raise ValueError(
            f"{field} is {len(data)} bytes; a tenant name is at most {TENANT_NAME_BYTES_MAX}"
        )
    return _short(data, field)


def _tenant_name(reader: Reader, field: str) -> str:
    """A ``u16 len``-prefixed tenant name (or cursor) of at most 64 bytes."""
    length = reader.limit(reader.u16(f"{field} length"), TENANT_NAME_BYTES_MAX, field)
    return reader.string(length, field)


def _tenant_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= TENANT_LIST_LIMIT:
        raise ValueError(f"a TENANT_LIST limit is 1 to {TENANT_LIST_LIMIT} tenants, not {limit!r}")
    return limit


@register_request
@dataclass(frozen=True, slots=True)
class TenantList(Request):
    """TENANT_LIST (0x003A, v5, decision 0032 §8; a tenant's token: its own entry only): a page
    of the server's tenants, in name order, after ``after`` (``""``: from the first), at most
    ``limit`` (1 to :data:`TENANT_LIST_LIMIT`). Body: ``u16 after_len, after`` (at most 64
    bytes), ``u32 limit``."""

    MSG_TYPE: ClassVar[int] = MessageType.TENANT_LIST
    NAME: ClassVar[str] = "TENANT_LIST"
    MIN_VERSION: ClassVar[int] = 5

    after: str = ""
    limit: int = TENANT_LIST_LIMIT

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_tenant_name_length(self.after, "after") + _u32(_tenant_limit(self.limit))]

    @classmethod
    def decode_body(cls, reader: Reader) -> TenantList:
        """See :meth:`Message.decode_body`."""
        after = _tenant_name(reader, "after")
        limit = reader.limit(reader.u32("limit"), TENANT_LIST_LIMIT, "limit")
        if limit == 0:
            raise reader.error("limit", "0 (at least one tenant a page)")
        return cls(after, limit)


@register_request
@dataclass(frozen=True, slots=True)
class TenantDelete(Request):
    """TENANT_DELETE (0x003B, v5, decision 0032 §6; the operator's token only): erasure of
    the tenant ``name`` by forgetting its keys — its keys destroyed (when the store seals
    payloads), its contexts deleted, its tokens refused from then on. Sent again, it answers
    as the first time did. Body: ``u16 len, name`` (1 to 64 bytes of UTF-8)."""

    MSG_TYPE: ClassVar[int] = MessageType.TENANT_DELETE
    NAME: ClassVar[str] = "TENANT_DELETE"
    MIN_VERSION: ClassVar[int] = 5

    name: str

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return _named_tenant_body(self.name)

    @classmethod
    def decode_body(cls, reader: Reader) -> TenantDelete:
        """See :meth:`Message.decode_body`."""
        return cls(_read_named_tenant(reader))


def _named_tenant_body(name: str) -> list[bytes]:
    """TENANT_DELETE's and TENANT_ROTATE_KEY's body: ``u16 len, name`` (1 to 64 bytes)."""
    if not name:
        raise ValueError("a tenant name must not be empty")
    return [_tenant_name_length(name, "name")]


def _read_named_tenant(reader: Reader) -> str:
    """The name of a TENANT_DELETE or TENANT_ROTATE_KEY body, refused when empty."""
    name = _tenant_name(reader, "name")
    if not name:
        raise reader.error("name", "empty")
    return name


@register_request
@dataclass(frozen=True, slots=True)
class TenantRotateKey(Request):
    """TENANT_ROTATE_KEY (0x003C, v5, decision 0032 §7; the operator's token only): a new
    version of the data key of the tenant ``name`` (``"operator"``: the operator's own),
    durable in the store's keyring before the answer. The tenant's new payloads are sealed
    under it; what it stored before reads as before. Not idempotent: sent again, it makes
    another version. Body: TENANT_DELETE's, ``u16 len, name`` (1 to 64 bytes of UTF-8)."""

    MSG_TYPE: ClassVar[int] = MessageType.TENANT_ROTATE_KEY
    NAME: ClassVar[str] = "TENANT_ROTATE_KEY"
    MIN_VERSION: ClassVar[int] = 5

    name: str

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return _named_tenant_body(self.name)

    @classmethod
    def decode_body(cls, reader: Reader) -> TenantRotateKey:
        """See :meth:`Message.decode_body`."""
        return cls(_read_named_tenant(reader))


# --- vector search (version 6, issue 49, decision 0033) ----------------------------------------

VECTOR_INDEX_NAME_BYTES_MAX = 64
"""The longest index name (bytes of UTF-8; 1 or more)."""
VECTOR_INDEXES_MAX = 64
"""The most indexes a tenant holds (and VECTOR_INDEXES lists)."""
VECTOR_DIMS_MAX = 4096
"""The largest dimension of an index (1 or more)."""
VECTORS_PER_ENTRY_MAX = 64
"""The most vectors one key-value entry carries."""
VECTOR_K_MAX = 1000
"""The most hits a search answers, and the most it ranks (``k + offset``)."""
VECTOR_FILTER_BYTES_MAX = 65_536
"""The longest filter of a search (bytes of JSON)."""
VECTOR_EF_SEARCH_MAX = 4096
"""The largest search breadth (``ef_search``) of an index or a search."""
VECTOR_EF_SEARCH_DEFAULT = 128
"""The breadth an index gets when its creation asks for 0 (decision 0033 §3)."""
VECTOR_SEARCH_EXACT = 1 << 0
"""VECTOR_SEARCH ``search_flags`` bit 0: compare every candidate exactly, never the graph."""
VECTOR_SEARCH_FLAGS_KNOWN = VECTOR_SEARCH_EXACT
VECTOR_INDEX_INFO_BYTES_MIN = 21
"""The smallest VECTOR_INDEX_INFO: 20 bytes and a 1-byte name."""
VECTOR_HIT_BYTES_MIN = 42
"""The smallest hit of VECTOR_HITS: ``u16 key_len``, ``f32 score``, hash, ``u32 value_len``."""
KV_VECTOR_ENTRY_BYTES_MIN = 7
"""The smallest entry of KV_PUT_VECTORS: ``u16 key_len, u32 value_len, u8 vector_count``."""
VECTORS_PER_TURN_MAX = 16
"""The most vectors one turn carries (APPEND_TURNS_VECTORS, version 7)."""
VECTOR_SEARCH_TYPE_TAG = 1 << 1
"""VECTOR_SEARCH_TURNS ``search_flags`` bit 1 (version 7): only turns of ``type_tag``."""
VECTOR_SEARCH_TURNS_FLAGS_KNOWN = VECTOR_SEARCH_EXACT | VECTOR_SEARCH_TYPE_TAG
TURN_SEARCH_TAGS_MAX = 32
"""The most context tags a VECTOR_SEARCH_TURNS names (a context carries at most 32)."""
TURN_SEARCH_LABELS_MAX = 16
"""The most turn labels a VECTOR_SEARCH_TURNS names (a turn carries at most 16)."""
TURN_HIT_BYTES = TURN_BYTES + 4
"""One hit of TURN_HITS: TURN, ``f32 score``."""
VECTOR_TURN_BYTES_MIN = TURN_SPEC_BYTES_MIN + 1
"""The smallest turn of APPEND_TURNS_VECTORS: a TURN_SPEC and ``u8 vector_count``."""


class VectorMetric(IntEnum):
    """How an index compares vectors (``metric u8``); the score is higher for nearer."""

    COSINE = 1
    """Score: the cosine similarity (1 - cosine distance); 0 when either vector is zero."""
    INNER_PRODUCT = 2
    """Score: the dot product."""
    L2 = 3
    """Score: minus the Euclidean distance."""


VECTOR_METRIC_NAMES = {
    VectorMetric.COSINE: "cosine",
    VectorMetric.INNER_PRODUCT: "inner_product",
    VectorMetric.L2: "l2",
}
"""The name of each metric, as the CLI, the clients and LangGraph's ``distance_type`` say it."""
_VECTOR_METRICS = frozenset(int(metric) for metric in VectorMetric)


class VectorMethod(IntEnum):
    """How a search found its hits (VECTOR_HITS ``method u8``)."""

    EXACT = 0
    """Every candidate was compared."""
    GRAPH = 1
    """The index's graph was walked (approximate)."""


_VECTOR_METHODS = frozenset(int(method) for method in VectorMethod)


def _index_name(reader: Reader) -> str:
    """An index name in a request: ``u16 len``, UTF-8 (its length is the server's to check)."""
    return reader.short_string("index name")


@dataclass(frozen=True, slots=True)
class KvVectorEntryRecord:
    """One entry of KV_PUT_VECTORS: its key, its value and its vectors (each of the request's
    ``dims`` components; none: the entry is stored without vectors). On the wire ``u16
    key_len, key, u32 value_len, value, u8 vector_count, vector_count x VECTOR``."""

    key: bytes
    value: bytes
    vectors: tuple[tuple[float, ...], ...] = ()


@register_request
@dataclass(frozen=True, slots=True)
class VectorIndexCreate(Request):
    """VECTOR_INDEX_CREATE (0x003D, v6, decision 0033): creates the vector index ``name`` of
    ``dims`` dimensions and ``metric`` (a :class:`VectorMetric`) in one durable record, or
    answers the one of that name when its dimension and metric are these. ``ef_search``: its
    graph's search breadth (0: the server's default, 128). Body: ``u16 name_len, name, u16
    dims, u8 metric, u8 reserved, u16 ef_search``."""

    MSG_TYPE: ClassVar[int] = MessageType.VECTOR_INDEX_CREATE
    NAME: ClassVar[str] = "VECTOR_INDEX_CREATE"
    MIN_VERSION: ClassVar[int] = 6

    name: str
    dims: int
    metric: int = VectorMetric.COSINE
    ef_search: int = 0

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [
            _short_str(self.name, "index name")
            + _u16(self.dims)
            + _u8(int(self.metric))
            + _u8(0)
            + _u16(self.ef_search)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorIndexCreate:
        """See :meth:`Message.decode_body` (an unknown metric decodes: the server answers it
        INVALID_ARGUMENT with the connection open)."""
        name = _index_name(reader)
        dims = reader.u16("dims")
        metric = reader.u8("metric")
        reader.zero(1)
        return cls(name, dims, metric, reader.u16("ef_search"))


@register_request
@dataclass(frozen=True, slots=True)
class VectorIndexDrop(Request):
    """VECTOR_INDEX_DROP (0x003E, v6): drops the vector index ``name`` in one durable record
    (its vectors no longer answer a search). Body: ``u16 name_len, name``."""

    MSG_TYPE: ClassVar[int] = MessageType.VECTOR_INDEX_DROP
    NAME: ClassVar[str] = "VECTOR_INDEX_DROP"
    MIN_VERSION: ClassVar[int] = 6

    name: str

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_short_str(self.name, "index name")]

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorIndexDrop:
        """See :meth:`Message.decode_body`."""
        return cls(_index_name(reader))


@register_request
@dataclass(frozen=True, slots=True)
class VectorIndexList(Request):
    """VECTOR_INDEX_LIST (0x003F, v6): the connection's tenant's vector indexes. Empty
    body."""

    MSG_TYPE: ClassVar[int] = MessageType.VECTOR_INDEX_LIST
    NAME: ClassVar[str] = "VECTOR_INDEX_LIST"
    MIN_VERSION: ClassVar[int] = 6

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [b""]

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorIndexList:
        """See :meth:`Message.decode_body`."""
        return cls()


@register_request
@dataclass(frozen=True, slots=True)
class VectorSearch(Request):
    """VECTOR_SEARCH (0x0040, v6): the ``k`` key-value entries of ``context`` nearest
    ``vector`` in the index ``index``, after skipping ``offset``, among those whose key starts
    with ``prefix`` and whose value (JSON) passes ``filter`` (JSON bytes; empty: none).

    Body: ``context ref, u16 name_len, name, u16 dims, dims x f32, u16 k, u16 offset, u8
    search_flags (EXACT), u8 reserved, u16 ef_search, u16 prefix_len, prefix, u32 filter_len,
    filter``."""

    MSG_TYPE: ClassVar[int] = MessageType.VECTOR_SEARCH
    NAME: ClassVar[str] = "VECTOR_SEARCH"
    MIN_VERSION: ClassVar[int] = 6

    context: ContextRef
    index: str
    vector: tuple[float, ...]
    k: int
    offset: int = 0
    search_flags: int = 0
    ef_search: int = 0
    prefix: bytes = b""
    filter: bytes = b""

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if len(self.filter) > U32_MAX:
            raise ValueError(f"a filter is at most {U32_MAX} bytes on the wire")
        return [
            _context_ref(self.context)
            + _short_str(self.index, "index name")
            + _u16(len(self.vector))
            + _f32s(self.vector, "the query vector")
            + _u16(self.k)
            + _u16(self.offset)
            + _u8(self.search_flags)
            + _u8(0)
            + _u16(self.ef_search)
            + _short(self.prefix, "prefix")
            + _u32(len(self.filter))
            + bytes(self.filter)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorSearch:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        index = _index_name(reader)
        vector = reader.f32s(reader.u16("dims"), "vector")
        k = reader.u16("k")
        offset = reader.u16("offset")
        flags = _kv_flags(reader, VECTOR_SEARCH_FLAGS_KNOWN, "search_flags")
        reader.zero(1)
        ef_search = reader.u16("ef_search")
        prefix = reader.short_bytes("prefix")
        search_filter = reader.take(reader.u32("filter_len"), "filter")
        return cls(context, index, vector, k, offset, flags, ef_search, prefix, search_filter)


@register_request
@dataclass(frozen=True, slots=True)
class KvPutVectors(Request):
    """KV_PUT_VECTORS (0x0041, v6): KV_PUT_EX with vectors — every entry's value and its
    vectors (of the index ``index``, each of ``dims`` components) in one durable record; an
    entry given no vector is stored without any (an overwrite drops the old ones).

    Body: ``context ref, u8 put_flags (IF_ABSENT), u64 ttl_ms, u16 name_len, name, u16 dims,
    u16 count x (u16 key_len, key, u32 value_len, value, u8 vector_count, vector_count x
    VECTOR)``. Large values travel as separate chunks (not copied)."""

    MSG_TYPE: ClassVar[int] = MessageType.KV_PUT_VECTORS
    NAME: ClassVar[str] = "KV_PUT_VECTORS"
    MIN_VERSION: ClassVar[int] = 6

    context: ContextRef
    put_flags: int
    ttl_ms: int
    index: str
    dims: int
    entries: tuple[KvVectorEntryRecord, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        chunks: list[bytes] = []
        small = bytearray(
            _context_ref(self.context)
            + _u8(self.put_flags)
            + _u64(self.ttl_ms)
            + _short_str(self.index, "index name")
            + _u16(self.dims)
            + _count(self.entries, "entries")
        )
        for entry in self.entries:
            small += _short(entry.key, "key") + _u32(len(entry.value))
            vectors = _tiny_count(entry.vectors, "vectors") + b"".join(
                _vector(vector, self.dims, f"vector {i} of key {entry.key!r}")
                for i, vector in enumerate(entry.vectors)
            )
            if len(entry.value) < _COPY_BYTES_MAX:
                small += entry.value + vectors
            else:
                chunks += [bytes(small), bytes(entry.value)]
                small = bytearray(vectors)
        if small or not chunks:
            chunks.append(bytes(small))
        return chunks

    @classmethod
    def decode_body(cls, reader: Reader) -> KvPutVectors:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        put_flags = _kv_flags(reader, KV_PUT_IF_ABSENT, "put_flags")
        ttl_ms = reader.u64("ttl_ms")
        index = _index_name(reader)
        dims = reader.u16("dims")
        count = reader.count(reader.u16("count"), KV_VECTOR_ENTRY_BYTES_MIN, "entries")
        entries = []
        for _ in range(count):
            key = reader.short_bytes("key")
            value = reader.take(reader.u32("value_len"), "value")
            vector_count = reader.count(reader.u8("vector_count"), 4 * dims, "vectors")
            vectors = tuple(reader.f32s(dims, "vector") for _ in range(vector_count))
            entries.append(KvVectorEntryRecord(key, value, vectors))
        return cls(context, put_flags, ttl_ms, index, dims, tuple(entries))


@dataclass(frozen=True, slots=True)
class VectorTurnRecord:
    """One turn of APPEND_TURNS_VECTORS: its TURN_SPEC (as APPEND_TURNS') and its vectors
    (each of the request's ``dims`` components; none: the turn is appended without any). On
    the wire TURN_SPEC, ``u8 vector_count, vector_count x VECTOR``."""

    spec: TurnSpecRecord
    vectors: tuple[tuple[float, ...], ...] = ()


@register_request
@dataclass(frozen=True, slots=True)
class AppendTurnsVectors(Request):
    """APPEND_TURNS_VECTORS (0x0042, v7): APPEND_TURNS with each turn's vectors (of the index
    ``index``, each of ``dims`` components): the turns and their vectors in one group commit,
    all or none. Answered APPENDED_TURNS, as APPEND_TURNS.

    Body: ``context ref, u32 append_flags (EXPECT_HEAD), u64 expected_head, u16 name_len,
    name, u16 dims, u16 count (>= 1), count x (TURN_SPEC, u8 vector_count, vector_count x
    VECTOR)``. Large payloads travel as separate chunks (not copied)."""

    MSG_TYPE: ClassVar[int] = MessageType.APPEND_TURNS_VECTORS
    NAME: ClassVar[str] = "APPEND_TURNS_VECTORS"
    MIN_VERSION: ClassVar[int] = 7

    context: ContextRef
    expected_head: int | None
    index: str
    dims: int
    turns: tuple[VectorTurnRecord, ...]

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if not self.turns:
            raise ValueError("APPEND_TURNS_VECTORS carries at least one turn")
        chunks: list[bytes] = []
        small = bytearray(
            _context_ref(self.context)
            + _expected_head_fields(APPEND_EXPECT_HEAD, self.expected_head)
            + _short_str(self.index, "index name")
            + _u16(self.dims)
            + _count(self.turns, "turns")
        )
        for number, turn in enumerate(self.turns):
            spec = turn.spec
            vectors = _tiny_count(turn.vectors, "vectors") + b"".join(
                _vector(vector, self.dims, f"vector {i} of turn {number}")
                for i, vector in enumerate(turn.vectors)
            )
            small += spec.head_bytes()
            if spec.by_hash or len(spec.payload) < _COPY_BYTES_MAX:
                small += (b"" if spec.by_hash else spec.payload) + vectors
            else:
                chunks += [bytes(small), spec.payload]
                small = bytearray(vectors)
        if small or not chunks:
            chunks.append(bytes(small))
        return chunks

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendTurnsVectors:
        """See :meth:`Message.decode_body`."""
        context = reader.context_ref()
        flags = reader.flags(APPEND_FLAGS_KNOWN, "append_flags")
        expected = reader.u64("expected_head")
        if not flags & APPEND_EXPECT_HEAD and expected:
            raise reader.error("expected_head", "set without EXPECT_HEAD")
        index = _index_name(reader)
        dims = reader.u16("dims")
        count = reader.count(reader.u16("count"), VECTOR_TURN_BYTES_MIN, "turns")
        if count == 0:
            raise reader.error("count", "no turns")
        turns = []
        for _ in range(count):
            spec = reader.turn_spec()
            vector_count = reader.count(reader.u8("vector_count"), 4 * dims, "vectors")
            vectors = tuple(reader.f32s(dims, "vector") for _ in range(vector_count))
            turns.append(VectorTurnRecord(spec, vectors))
        expected_head = expected if flags & APPEND_EXPECT_HEAD else None
        return cls(context, expected_head, index, dims, tuple(turns))


@register_request
@dataclass(frozen=True, slots=True)
class VectorSearchTurns(Request):
    """VECTOR_SEARCH_TURNS (0x0043, v7): the ``k`` turns nearest ``vector`` in the index
    ``index``, after skipping ``offset``, among the turns of the contexts it names: those
    matching every one of ``context`` (0: none), ``name_prefix`` (empty: none) and ``tags``
    (none of the three: every context of the tenant), keeping the turns that carry every one
    of ``labels`` and, with :data:`VECTOR_SEARCH_TYPE_TAG`, of ``type_tag``.

    Body: ``u16 name_len, name, u16 dims, dims x f32, u16 k, u16 offset, u8 search_flags
    (EXACT, TYPE_TAG), u8 reserved, u16 ef_search, context ref, u16 prefix_len, prefix,
    TAGS, LABELS (TAGS' layout), u64 type_tag (0 without TYPE_TAG)``."""

    MSG_TYPE: ClassVar[int] = MessageType.VECTOR_SEARCH_TURNS
    NAME: ClassVar[str] = "VECTOR_SEARCH_TURNS"
    MIN_VERSION: ClassVar[int] = 7

    index: str
    vector: tuple[float, ...]
    k: int
    offset: int = 0
    search_flags: int = 0
    ef_search: int = 0
    context: ContextRef = 0
    name_prefix: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    type_tag: int = 0

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if len(self.tags) > TURN_SEARCH_TAGS_MAX:
            raise ValueError(f"a turn search names at most {TURN_SEARCH_TAGS_MAX} tags")
        if len(self.labels) > TURN_SEARCH_LABELS_MAX:
            raise ValueError(f"a turn search names at most {TURN_SEARCH_LABELS_MAX} labels")
        if self.type_tag and not self.search_flags & VECTOR_SEARCH_TYPE_TAG:
            raise ValueError("a type_tag is sent with the search flag TYPE_TAG only")
        return [
            _short_str(self.index, "index name")
            + _u16(len(self.vector))
            + _f32s(self.vector, "the query vector")
            + _u16(self.k)
            + _u16(self.offset)
            + _u8(self.search_flags)
            + _u8(0)
            + _u16(self.ef_search)
            + _context_ref(self.context)  # 0: no context (u16 0, u64 0)
            + _short_str(self.name_prefix, "name prefix")
            + _tags(self.tags)
            + _tags(self.labels, "labels")
            + _u64(self.type_tag)
        ]

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorSearchTurns:
        """See :meth:`Message.decode_body`."""
        index = _index_name(reader)
        vector = reader.f32s(reader.u16("dims"), "vector")
        k = reader.u16("k")
        offset = reader.u16("offset")
        flags = _kv_flags(reader, VECTOR_SEARCH_TURNS_FLAGS_KNOWN, "search_flags")
        reader.zero(1)
        ef_search = reader.u16("ef_search")
        context = reader.context_ref()
        name_prefix = reader.short_string("name prefix")
        tags = reader.tags()
        reader.limit(len(tags), TURN_SEARCH_TAGS_MAX, "tags count")
        labels = reader.tags("labels")
        reader.limit(len(labels), TURN_SEARCH_LABELS_MAX, "labels count")
        type_tag = reader.u64("type_tag")
        if type_tag and not flags & VECTOR_SEARCH_TYPE_TAG:
            raise reader.error("type_tag", "set without TYPE_TAG")
        return cls(
            index,
            vector,
            k,
            offset,
            flags,
            ef_search,
            context,
            name_prefix,
            tags,
            labels,
            type_tag,
        )


@register_request
@dataclass(frozen=True, slots=True)
class PatchTurn(Request):
    """PATCH_TURN (0x0024, v2): the turn reads ``payload`` from now on (an overlay; reads
    ``as_of`` an older overlay see what it had then). Body: ``u64 turn_id, u32 payload_len, u32
    reserved, payload``."""

    MSG_TYPE: ClassVar[int] = MessageType.PATCH_TURN
    NAME: ClassVar[str] = "PATCH_TURN"
    MIN_VERSION: ClassVar[int] = 2

    turn_id: int
    payload: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if len(self.payload) > U32_MAX:
            raise ValueError("a PATCH_TURN payload is at most 2**32 - 1 bytes")
        head = _u64(self.turn_id) + _u32(len(self.payload)) + bytes(4)
        if len(self.payload) < _COPY_BYTES_MAX:
            return [head + bytes(self.payload)]
        return [head, self.payload]

    @classmethod
    def decode_body(cls, reader: Reader) -> PatchTurn:
        """See :meth:`Message.decode_body`."""
        turn_id = reader.u64("turn_id")
        length = reader.u32("payload_len")
        reader.zero(4)
        return cls(turn_id, reader.take(length, "payload"))


@register_request
@dataclass(frozen=True, slots=True)
class RedactTurn(_U64Request):
    """REDACT_TURN (0x0025, v2): the turn loses its payload in every view; its bytes leave the
    disk at the next collection. Body: ``u64 turn_id``."""

    MSG_TYPE: ClassVar[int] = MessageType.REDACT_TURN
    NAME: ClassVar[str] = "REDACT_TURN"
    MIN_VERSION: ClassVar[int] = 2

    turn_id: int

    def _value(self) -> int:
        return self.turn_id

    @classmethod
    def decode_body(cls, reader: Reader) -> RedactTurn:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("turn_id"))


@register_request
@dataclass(frozen=True, slots=True)
class PurgeBlob(Request):
    """PURGE_BLOB (0x0026, v2): redacts every turn naming the blob and refuses reads of it by
    hash. Body: ``hash[32]``."""

    MSG_TYPE: ClassVar[int] = MessageType.PURGE_BLOB
    NAME: ClassVar[str] = "PURGE_BLOB"
    MIN_VERSION: ClassVar[int] = 2

    payload_hash: bytes

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        return [_hash(self.payload_hash)]

    @classmethod
    def decode_body(cls, reader: Reader) -> PurgeBlob:
        """See :meth:`Message.decode_body`."""
        return cls(reader.hash("hash"))


@register_request
@dataclass(frozen=True, slots=True)
class PutChunked(Request):
    """PUT_CHUNKED (0x0027, v2, issue 16): stores the payload made of ``chunks`` (in order),
    carrying the bytes of only the chunks in ``sent``; every other chunk must be stored
    already; with a ``base``, the base's first ``base.kept`` chunks come before ``chunks``.
    Body: ``hash[32] payload_hash, hash[32] base_hash, u32 base_kept, u32 chunk_count,
    chunk_count x CHUNK (hash[32], u32 len), u32 sent_count, sent_count x SENT (u32 index, u32
    len, len bytes)``; no base is a zero hash and 0.

    The codec's limits (the server closes the connection for them, so the encoder refuses
    them with ``ValueError`` as the Rust encoder does, and the decoder with
    :class:`ProtocolError`): 1..=65,536 chunks, each ``len`` 1..=1 MiB, at most one SENT
    per chunk, SENT indexes strictly increasing and below ``chunk_count``, a SENT's bytes
    exactly its chunk's ``len``. Sent chunks of 4 KiB or more are separate chunks of the
    frame (not copied)."""

    MSG_TYPE: ClassVar[int] = MessageType.PUT_CHUNKED
    NAME: ClassVar[str] = "PUT_CHUNKED"
    MIN_VERSION: ClassVar[int] = 2

    payload_hash: bytes
    chunks: tuple[ChunkRecord, ...]
    sent: tuple[SentChunkRecord, ...] = ()
    base: ChunkBase | None = None

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        count = len(self.chunks)
        kept = 0 if self.base is None else self.base.kept
        if self.base is not None and (kept < 1 or _hash(self.base.hash) == bytes(32)):
            raise ValueError(
                "a PUT_CHUNKED base is a stored payload's hash keeping 1 or more chunks"
            )
        if not 1 <= count <= CHUNKS_PER_PAYLOAD_MAX - kept:
            raise ValueError(f"PUT_CHUNKED names 1 to {CHUNKS_PER_PAYLOAD_MAX} chunks, not {count}")
        base = bytes(36) if self.base is None else _hash(self.base.hash) + _u32(kept)
        head = bytearray(_hash(self.payload_hash) + base + _u32(count))
        for chunk in self.chunks:
            if not 1 <= chunk.len <= CHUNK_BYTES_MAX:
                raise ValueError(f"a chunk is 1 to {CHUNK_BYTES_MAX} bytes, not {chunk.len}")
            head += _hash(chunk.hash) + _u32(chunk.len)
        if len(self.sent) > count:
            raise ValueError(f"{len(self.sent)} chunks sent of {count}: at most one per chunk")
        head += _u32(len(self.sent))
        out: list[bytes] = []
        index_min = 0
        for sent in self.sent:
            if isinstance(sent.index, bool) or not index_min <= sent.index < count:
                raise ValueError(
                    f"sent index {sent.index}: indexes strictly increase and are below the "
                    f"chunk count {count}"
                )
            length = self.chunks[sent.index].len
            if len(sent.data) != length:
                raise ValueError(
                    f"sent chunk {sent.index} has {len(sent.data)} bytes; its entry says {length}"
                )
            head += _u32(sent.index) + _u32(length)
            if length < _COPY_BYTES_MAX:
                head += sent.data
            else:
                out += [bytes(head), sent.data]
                head = bytearray()
            index_min = sent.index + 1
        if head or not out:
            out.append(bytes(head))
        return out

    @classmethod
    def decode_body(cls, reader: Reader) -> PutChunked:
        """See :meth:`Message.decode_body`. The same rules, in the Rust codec's order."""
        payload_hash = reader.hash("payload_hash")
        base_hash = reader.hash("base_hash")
        kept = reader.u32("base_kept")
        if (kept == 0) != (base_hash == bytes(32)):
            raise reader.error(
                "base_hash", "a base that keeps no chunk" if kept == 0 else "kept chunks of no base"
            )
        base = None if kept == 0 else ChunkBase(base_hash, kept)
        count = reader.u32("chunk_count")
        if count == 0:
            raise reader.error("chunk_count", "a payload of no chunks")
        reader.limit(count + kept, CHUNKS_PER_PAYLOAD_MAX, "chunk_count")
        reader.count(count, CHUNK_ENTRY_BYTES, "chunks")
        chunks = []
        for _ in range(count):
            chunk_hash = reader.hash("chunk hash")
            length = reader.u32("chunk len")
            if length == 0:
                raise reader.error("chunk len", "an empty chunk")
            reader.limit(length, CHUNK_BYTES_MAX, "chunk len")
            chunks.append(ChunkRecord(chunk_hash, length))
        sent_count = reader.limit(reader.u32("sent_count"), count, "sent_count")
        reader.count(sent_count, SENT_CHUNK_BYTES_MIN, "sent chunks")
        sent = []
        index_min = 0
        for _ in range(sent_count):
            index = reader.limit(reader.u32("sent index"), count - 1, "sent index")
            if index < index_min:
                raise reader.error("sent index", "indexes must strictly increase")
            length = reader.u32("sent len")
            if length != chunks[index].len:
                raise reader.error("sent len", "differs from its chunk's len")
            sent.append(SentChunkRecord(index, reader.take(length, "sent chunk bytes")))
            index_min = index + 1
        return cls(payload_hash, tuple(chunks), tuple(sent), base)


TAKES_OVERLAYS = frozenset(
    {
        MessageType.GET_TURN,
        MessageType.GET_LAST,
        MessageType.GET_BEFORE,
        MessageType.GET_RANGE_BY_DEPTH,
        MessageType.GET_CHAIN,
        MessageType.GET_TURN_BY_KEY,
        MessageType.TURN_LOG,
        MessageType.READ_PAGE,
        MessageType.FIND_TURNS,
    }
)
"""The reads that may be sent with the frame flag :data:`OVERLAYS` (every read answering
TURNs)."""


@dataclass(frozen=True, slots=True)
class AsOf(Request):
    """A read of :data:`TAKES_OVERLAYS` in the overlay view ``as_of`` (0: the latest; v2,
    decision 0012): sent as the read with the frame flag :data:`OVERLAYS` and ``u64 as_of``
    after its body; answered :class:`OverlaidResponse`."""

    NAME: ClassVar[str] = "overlay view"
    MIN_VERSION: ClassVar[int] = 2

    read: Request
    as_of: int = 0

    @property
    def msg_type(self) -> int:
        """The read's ``msg_type``."""
        return self.read.msg_type

    @property
    def frame_flags(self) -> int:
        """The read's flags and :data:`OVERLAYS`."""
        return self.read.frame_flags | OVERLAYS

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if isinstance(self.read, AsOf) or self.read.msg_type not in TAKES_OVERLAYS:
            raise ValueError(f"{self.read.NAME} returns no turns: it has no overlay view")
        return [*self.read.body_chunks(), _u64(self.as_of)]


@dataclass(frozen=True, slots=True)
class AckAfter(Request):
    """A write of :data:`TAKES_ACK_AFTER` that says when it is acknowledged (v4, decision
    0031): sent as the write with ``after`` (:data:`ACK_AFTER_LOCAL` or
    :data:`ACK_AFTER_REMOTE`) in the frame flag bits 3-4; the body is the write's."""

    NAME: ClassVar[str] = "ACK_AFTER"
    MIN_VERSION: ClassVar[int] = 4

    request: Request
    after: int = ACK_AFTER_LOCAL

    @property
    def msg_type(self) -> int:
        """The write's ``msg_type``."""
        return self.request.msg_type

    @property
    def frame_flags(self) -> int:
        """The write's flags and ``after`` in bits 3-4."""
        return self.request.frame_flags | self.after << ACK_AFTER_SHIFT

    @property
    def required_version(self) -> int:
        """Version 4, or the write's when newer."""
        return max(self.MIN_VERSION, self.request.required_version)

    def body_chunks(self) -> list[bytes]:
        """See :meth:`Message.body_chunks`."""
        if isinstance(self.request, (AckAfter, AsOf)) or (
            self.request.msg_type not in TAKES_ACK_AFTER
        ):
            raise ValueError(f"{self.request.NAME} is not a write that takes ACK_AFTER")
        if self.after not in ACK_AFTER_NAMES:
            raise ValueError(f"ACK_AFTER {self.after}: only 1 (local) or 2 (remote)")
        return self.request.body_chunks()


_PAGE_KINDS = frozenset(int(kind) for kind in PageKind)


@dataclass(frozen=True, slots=True)
class RawRequest(Request):
    """Any frame, as bytes: for messages this module does not define (and for tests). Its
    response is decoded by the registered class of ``msg_type | 0x8000`` if there is one,
    else returned as :class:`RawResponse`."""

    NAME: ClassVar[str] = "RAW"

    raw_msg_type: int
    body: bytes = b""
    min_version: int = 1
    raw_flags: int = 0

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.raw_msg_type

    @property
    def frame_flags(self) -> int:
        """The frame's ``flags``, as given."""
        return self.raw_flags

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


# --- version 2 responses ----------------------------------------------------------------------


@register_response
@dataclass(frozen=True, slots=True)
class OpenedResponse(Response):
    """OPENED (0x8010, v2): CONTEXT_INFO, then ``u8 created`` (1: this request created it)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.CTX_OPEN.response_type,)
    NAME: ClassVar[str] = "OPENED"

    info: ContextInfoRecord
    created: bool

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.info.encode() + _u8(int(self.created))

    @classmethod
    def decode_body(cls, reader: Reader) -> OpenedResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_info(), reader.boolean("created"))


@register_response
@dataclass(frozen=True, slots=True)
class ContextInfoResponse(Response):
    """CONTEXT_INFO (0x8011, 0x8012, 0x8014; v2): a context after CTX_SHOW, CTX_TAG or
    CTX_NAME."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.CTX_SHOW.response_type,
        MessageType.CTX_TAG.response_type,
        MessageType.CTX_NAME.response_type,
    )
    NAME: ClassVar[str] = "CONTEXT_INFO"

    info: ContextInfoRecord
    response_msg_type: int = field(default=MessageType.CTX_SHOW.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.info.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> ContextInfoResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_info())


@register_response
@dataclass(frozen=True, slots=True)
class ContextListResponse(Response):
    """CONTEXT_LIST (0x8013, v2): LIST_CURSOR ``next_cursor`` (None: nothing more matches),
    ``u32 count``, count x CONTEXT_INFO."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.CTX_LIST.response_type,)
    NAME: ClassVar[str] = "CONTEXT_LIST"

    next_cursor: ListCursor | None
    contexts: tuple[ContextInfoRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _list_cursor(self.next_cursor)
            + _u32(len(self.contexts))
            + b"".join(info.encode() for info in self.contexts)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> ContextListResponse:
        """See :meth:`Message.decode_body`."""
        next_cursor = reader.list_cursor()
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        reader.count(count, CONTEXT_INFO_BYTES_MIN, "contexts")
        return cls(next_cursor, tuple(reader.context_info() for _ in range(count)))


@register_response
@dataclass(frozen=True, slots=True)
class DoneResponse(Response):
    """An empty answer (0x8015 KV_PUT, 0x8017 KV_DELETE; v2; 0x8028 KV_PUT_EX, v3; 0x8041
    KV_PUT_VECTORS, v6): the change is durable."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.KV_PUT.response_type,
        MessageType.KV_DELETE.response_type,
        MessageType.KV_PUT_EX.response_type,
        MessageType.KV_PUT_VECTORS.response_type,
    )
    NAME: ClassVar[str] = "DONE"

    response_msg_type: int = field(default=MessageType.KV_PUT.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return b""

    @classmethod
    def decode_body(cls, reader: Reader) -> DoneResponse:
        """See :meth:`Message.decode_body`."""
        return cls()


@register_response
@dataclass(frozen=True, slots=True)
class KvValueResponse(Response):
    """KV_VALUE (0x8016, v2): the value's hash, then its PAYLOAD (RAW or ZSTD)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.KV_GET.response_type,)
    NAME: ClassVar[str] = "KV_VALUE"

    value_hash: bytes
    payload: PayloadRecord

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _hash(self.value_hash) + self.payload.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> KvValueResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.hash("value_hash"), reader.payload())


@register_response
@dataclass(frozen=True, slots=True)
class KvListResponse(Response):
    """KV_ITEMS (0x8018, v2): ``u32 count``, count x (u16 key_len, key, hash[32], u32
    value_len), in key order."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.KV_LIST.response_type,)
    NAME: ClassVar[str] = "KV_ITEMS"

    items: tuple[KvItemRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u32(len(self.items)) + b"".join(item.encode() for item in self.items)

    @classmethod
    def decode_body(cls, reader: Reader) -> KvListResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        reader.count(count, KV_ITEM_BYTES_MIN, "items")
        return cls(
            tuple(
                KvItemRecord(
                    reader.short_bytes("key"), reader.hash("value_hash"), reader.u32("value_len")
                )
                for _ in range(count)
            )
        )


@register_response
@dataclass(frozen=True, slots=True)
class KvValueExResponse(Response):
    """KV_VALUE_EX (0x8029, v3): the value's hash, ``u64 ttl_ms``, ``u64 expires_at_unix_ms``,
    then its PAYLOAD (RAW or ZSTD)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.KV_GET_EX.response_type,)
    NAME: ClassVar[str] = "KV_VALUE_EX"

    value_hash: bytes
    ttl_ms: int
    expires_at_unix_ms: int
    payload: PayloadRecord

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _hash(self.value_hash)
            + _u64(self.ttl_ms)
            + _u64(self.expires_at_unix_ms)
            + self.payload.encode()
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> KvValueExResponse:
        """See :meth:`Message.decode_body`."""
        value_hash = reader.hash("value_hash")
        ttl_ms = reader.u64("ttl_ms")
        expires_at_unix_ms = reader.u64("expires_at_unix_ms")
        return cls(value_hash, ttl_ms, expires_at_unix_ms, reader.payload())


@register_response
@dataclass(frozen=True, slots=True)
class KvValuesResponse(Response):
    """KV_VALUES (0x802C KV_GET_MANY, v3): ``u16 count``, then per key asked, in order, ``u8
    found`` (0: no such key, or expired) and, when found, a KV_VALUE_EX body. ``count`` may be
    less than the keys asked: the rest passed the response budget (ask again for them)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.KV_GET_MANY.response_type,)
    NAME: ClassVar[str] = "KV_VALUES"

    values: tuple[KvValueExResponse | None, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u16(len(self.values)) + b"".join(
            b"\x00" if value is None else b"\x01" + value.encode_body() for value in self.values
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> KvValuesResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.count(reader.u16("count"), 1, "values")
        values: list[KvValueExResponse | None] = []
        for _ in range(count):
            found = reader.u8("found")
            if found > 1:
                raise reader.error("found", f"{found} is not 0 (no such key) or 1")
            values.append(KvValueExResponse.decode_body(reader) if found else None)
        return cls(tuple(values))


@register_response
@dataclass(frozen=True, slots=True)
class KvItemsExResponse(Response):
    """KV_ITEMS_EX (0x802A KV_LIST_EX, 0x802B KV_TOUCH; v3): ``u32 count`` x KV_ITEM_EX."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.KV_LIST_EX.response_type,
        MessageType.KV_TOUCH.response_type,
    )
    NAME: ClassVar[str] = "KV_ITEMS_EX"

    items: tuple[KvItemExRecord, ...]
    response_msg_type: int = field(default=MessageType.KV_LIST_EX.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u32(len(self.items)) + b"".join(item.encode() for item in self.items)

    @classmethod
    def decode_body(cls, reader: Reader) -> KvItemsExResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        reader.count(count, KV_ITEM_EX_BYTES_MIN, "items")
        return cls(
            tuple(
                KvItemExRecord(
                    reader.short_bytes("key"),
                    reader.hash("value_hash"),
                    reader.u32("value_len"),
                    reader.u64("ttl_ms"),
                    reader.u64("expires_at_unix_ms"),
                )
                for _ in range(count)
            )
        )


@register_response
@dataclass(frozen=True, slots=True)
class AppendedTurnsResponse(Response):
    """APPENDED_TURNS (0x8019 APPEND_TURNS, v2; 0x8042 APPEND_TURNS_VECTORS, v7): ``u32
    count`` x (TURN, u8 deduped, u8 existing), one per turn of the request, in order."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.APPEND_TURNS.response_type,
        MessageType.APPEND_TURNS_VECTORS.response_type,
    )
    NAME: ClassVar[str] = "APPENDED_TURNS"

    turns: tuple[AppendedTurnRecord, ...]
    response_msg_type: int = field(default=MessageType.APPEND_TURNS.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u32(len(self.turns)) + b"".join(turn.encode() for turn in self.turns)

    @classmethod
    def decode_body(cls, reader: Reader) -> AppendedTurnsResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        reader.count(count, APPENDED_TURN_BYTES, "turns")
        return cls(
            tuple(
                AppendedTurnRecord(
                    reader.turn(), reader.boolean("deduped"), reader.boolean("existing")
                )
                for _ in range(count)
            )
        )


@register_response
@dataclass(frozen=True, slots=True)
class TurnInfoResponse(Response):
    """TURN_INFO (0x801A, v2): the turn GET_TURN_BY_KEY found, then its EXTRAS."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.GET_TURN_BY_KEY.response_type,)
    NAME: ClassVar[str] = "TURN_INFO"

    turn: TurnRecord
    extras: ExtrasRecord

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.turn.encode() + self.extras.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> TurnInfoResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.turn(), reader.extras())


@register_response
@dataclass(frozen=True, slots=True)
class TurnLogResponse(Response):
    """TURN_LOG response (0x801B, v2): ``next_cursor`` (None: the log is exhausted), then
    ``u32 count`` x (TURN, EXTRAS, PAYLOAD), newest first. A page may be short, even empty,
    while more match: follow the cursor."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.TURN_LOG.response_type,)
    NAME: ClassVar[str] = "TURN_LOG response"

    next_cursor: LogCursor | None
    entries: tuple[TurnExtrasEntry, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _log_cursor(self.next_cursor)
            + _u32(len(self.entries))
            + b"".join(entry.encode() for entry in self.entries)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> TurnLogResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.log_cursor(), reader.turn_extras_entries())


@register_response
@dataclass(frozen=True, slots=True)
class PageResponse(Response):
    """PAGE (0x801C, v2): READ_PAGE's answer — TURNS' ``next_before`` and ``tip_depth``, then
    ``u32 count`` x (TURN, EXTRAS, PAYLOAD), oldest first."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.READ_PAGE.response_type,)
    NAME: ClassVar[str] = "PAGE"

    next_before: int
    tip_depth: int
    entries: tuple[TurnExtrasEntry, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _u64(self.next_before)
            + _u32(self.tip_depth)
            + _u32(len(self.entries))
            + b"".join(entry.encode() for entry in self.entries)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> PageResponse:
        """See :meth:`Message.decode_body`."""
        next_before = reader.u64("next_before")
        tip_depth = reader.u32("tip_depth")
        return cls(next_before, tip_depth, reader.turn_extras_entries())


@register_response
@dataclass(frozen=True, slots=True)
class FoundTurnsResponse(Response):
    """FOUND_TURNS (0x801D, v2): FIND_TURNS' answer — ``u64 next_before`` (0: no more), then
    ``u32 count`` x (TURN, EXTRAS), newest first."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.FIND_TURNS.response_type,)
    NAME: ClassVar[str] = "FOUND_TURNS"

    next_before: int
    turns: tuple[tuple[TurnRecord, ExtrasRecord], ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _u64(self.next_before)
            + _u32(len(self.turns))
            + b"".join(turn.encode() + extras.encode() for turn, extras in self.turns)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> FoundTurnsResponse:
        """See :meth:`Message.decode_body`."""
        next_before = reader.u64("next_before")
        count = reader.limit(reader.u32("count"), LIST_ITEMS_LIMIT, "count")
        # A TURN (88 bytes) and the smallest EXTRAS (3 bytes) per turn.
        reader.count(count, 91, "turns")
        return cls(next_before, tuple((reader.turn(), reader.extras()) for _ in range(count)))


@register_response
@dataclass(frozen=True, slots=True)
class RetentionResponse(Response):
    """RETENTION (0x801E, 0x801F, 0x8020; v2): CTX_DELETE's (the context just before), CTX_PRUNE's
    and CTX_TTL's answer — CONTEXT_INFO, ``u32 floor_depth``, ``u64 ttl_ms`` (0: none)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.CTX_DELETE.response_type,
        MessageType.CTX_PRUNE.response_type,
        MessageType.CTX_TTL.response_type,
    )
    NAME: ClassVar[str] = "RETENTION"

    info: ContextInfoRecord
    floor_depth: int
    ttl_ms: int
    response_msg_type: int = field(default=MessageType.CTX_TTL.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.info.encode() + _u32(self.floor_depth) + _u64(self.ttl_ms)

    @classmethod
    def decode_body(cls, reader: Reader) -> RetentionResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.context_info(), reader.u32("floor_depth"), reader.u64("ttl_ms"))


@register_response
@dataclass(frozen=True, slots=True)
class BackedUpResponse(Response):
    """BACKED_UP (0x8021, v2): BACKUP's answer — ``u64 turns, u64 blobs, u64 bytes, u64
    linked_bytes, u64 duration_ms, u16 dir_len, dir``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.BACKUP.response_type,)
    NAME: ClassVar[str] = "BACKED_UP"

    turns: int
    blobs: int
    total_bytes: int
    """The wire's ``bytes``: written plus hard-linked (named apart from the builtin)."""
    linked_bytes: int
    duration_ms: int
    dir: str

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _u64(self.turns)
            + _u64(self.blobs)
            + _u64(self.total_bytes)
            + _u64(self.linked_bytes)
            + _u64(self.duration_ms)
            + _short_str(self.dir, "dir")
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> BackedUpResponse:
        """See :meth:`Message.decode_body`."""
        return cls(
            reader.u64("turns"),
            reader.u64("blobs"),
            reader.u64("bytes"),
            reader.u64("linked_bytes"),
            reader.u64("duration_ms"),
            reader.short_string("dir"),
        )


_GC_DONE = struct.Struct("<3QI4s3Q")


@register_response
@dataclass(frozen=True, slots=True)
class GcDoneResponse(Response):
    """GC_DONE (0x8022, v2): GC's answer (56 bytes) — ``u64 turns_dead, u64 blobs_dead, u64
    bytes_reclaimed, u32 packs_compacted, u32 reserved, u64 live_bytes, u64 dead_bytes, u64
    duration_ms``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.GC.response_type,)
    NAME: ClassVar[str] = "GC_DONE"

    turns_dead: int
    blobs_dead: int
    bytes_reclaimed: int
    packs_compacted: int
    live_bytes: int
    dead_bytes: int
    duration_ms: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _pack(
            _GC_DONE,
            self.turns_dead,
            self.blobs_dead,
            self.bytes_reclaimed,
            self.packs_compacted,
            bytes(4),
            self.live_bytes,
            self.dead_bytes,
            self.duration_ms,
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> GcDoneResponse:
        """See :meth:`Message.decode_body`."""
        turns_dead = reader.u64("turns_dead")
        blobs_dead = reader.u64("blobs_dead")
        bytes_reclaimed = reader.u64("bytes_reclaimed")
        packs_compacted = reader.u32("packs_compacted")
        reader.zero(4)
        return cls(
            turns_dead,
            blobs_dead,
            bytes_reclaimed,
            packs_compacted,
            reader.u64("live_bytes"),
            reader.u64("dead_bytes"),
            reader.u64("duration_ms"),
        )


_GC_STATS = struct.Struct("<4Q")


@register_response
@dataclass(frozen=True, slots=True)
class StatsExResponse(Response):
    """STATS_EX response (0x8023, v2; 128 bytes): STATS' 96 bytes, then ``u64 live_bytes,
    u64 dead_bytes, u64 gc_runs, u64 bytes_reclaimed_total``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.STATS_EX.response_type,)
    NAME: ClassVar[str] = "STATS_EX response"

    stats: StatsResponse
    live_bytes: int
    dead_bytes: int
    gc_runs: int
    bytes_reclaimed_total: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.stats.encode_body() + _pack(
            _GC_STATS,
            self.live_bytes,
            self.dead_bytes,
            self.gc_runs,
            self.bytes_reclaimed_total,
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> StatsExResponse:
        """See :meth:`Message.decode_body`."""
        stats = StatsResponse.decode_body(reader)
        return cls(
            stats,
            reader.u64("live_bytes"),
            reader.u64("dead_bytes"),
            reader.u64("gc_runs"),
            reader.u64("bytes_reclaimed_total"),
        )


SERVER_ROLES = (
    "off",
    "primary",
    "standby",
    "fenced",
    "lapsed",
    "taking_over",
    "rejoining",
)
"""ROLE ``role`` codes, by index (a decoder refuses any past 6)."""
ROLE_TEXT_BYTES_MAX = 1024
_ROLE_FIGURES = (
    "lease_age_ms",
    "ack_open_ms",
    "failovers",
    "last_failover_ms",
    "remote_waiting",
    "remote_acks_total",
    "remote_unconfirmed_total",
)
_ROLE_FIXED = struct.Struct("<BBB5sQI7QII")


@register_response
@dataclass(frozen=True, slots=True)
class RoleResponse(Response):
    """ROLE response (0x8039, v4): ``u8 role`` (:data:`SERVER_ROLES`), ``u8 accepts_writes``,
    ``u8 ack_after`` (1 local, 2 remote), 5 reserved, ``u64 epoch, u32 lease_ms``, seven u64
    (lease_age_ms, ack_open_ms, failovers, last_failover_ms, remote_waiting,
    remote_acks_total, remote_unconfirmed_total), ``u32 remote_ack_us_p50, u32
    remote_ack_us_p99``, two ``u16 len, UTF-8`` texts of at most 1024 bytes (primary,
    holder). A lease figure of 0: no lease; an empty text: unknown."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.ROLE.response_type,)
    NAME: ClassVar[str] = "ROLE response"

    role: int
    accepts_writes: bool
    ack_after: int
    epoch: int
    lease_ms: int
    lease_age_ms: int
    ack_open_ms: int
    failovers: int
    last_failover_ms: int
    remote_waiting: int
    remote_acks_total: int
    remote_unconfirmed_total: int
    remote_ack_us_p50: int
    remote_ack_us_p99: int
    primary: str
    holder: str

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        body = _pack(
            _ROLE_FIXED,
            self.role,
            int(self.accepts_writes),
            self.ack_after,
            b"\0" * 5,
            self.epoch,
            self.lease_ms,
            *(getattr(self, name) for name in _ROLE_FIGURES),
            self.remote_ack_us_p50,
            self.remote_ack_us_p99,
        )
        for name in ("primary", "holder"):
            text = getattr(self, name).encode()
            if len(text) > ROLE_TEXT_BYTES_MAX:
                raise ValueError(f"{name} of {len(text)} bytes (at most 1024)")
            body += _short(text, name)
        return body

    @classmethod
    def decode_body(cls, reader: Reader) -> RoleResponse:
        """See :meth:`Message.decode_body`."""
        role = reader.u8("role")
        if role >= len(SERVER_ROLES):
            raise reader.error("role", "not a role (0..=6)")
        accepts_writes = reader.boolean("accepts_writes")
        ack_after = reader.u8("ack_after")
        if ack_after not in ACK_AFTER_NAMES:
            raise reader.error("ack_after", "not 1 (local) or 2 (remote)")
        reader.zero(5)
        epoch = reader.u64("epoch")
        lease_ms = reader.u32("lease_ms")
        figures = {name: reader.u64(name) for name in _ROLE_FIGURES}
        p50 = reader.u32("remote_ack_us_p50")
        p99 = reader.u32("remote_ack_us_p99")
        texts = {}
        for name in ("primary", "holder"):
            length = reader.limit(reader.u16(name), ROLE_TEXT_BYTES_MAX, name)
            texts[name] = reader.string(length, name)
        return cls(
            role=role,
            accepts_writes=accepts_writes,
            ack_after=ack_after,
            epoch=epoch,
            lease_ms=lease_ms,
            lease_age_ms=figures["lease_age_ms"],
            ack_open_ms=figures["ack_open_ms"],
            failovers=figures["failovers"],
            last_failover_ms=figures["last_failover_ms"],
            remote_waiting=figures["remote_waiting"],
            remote_acks_total=figures["remote_acks_total"],
            remote_unconfirmed_total=figures["remote_unconfirmed_total"],
            remote_ack_us_p50=p50,
            remote_ack_us_p99=p99,
            primary=texts["primary"],
            holder=texts["holder"],
        )


TENANT_IN_FILE = 1 << 0
"""TENANTS ``flags`` bit 0: the tenants file in force names the tenant."""
TENANT_REGISTERED = 1 << 1
"""TENANTS ``flags`` bit 1: the store has its tenant record (it has a TenantId)."""
TENANT_DELETED = 1 << 2
"""TENANTS ``flags`` bit 2: deleted (TENANT_DELETE): its contexts are gone, its tokens
refused, its id and name never given again."""
TENANT_FLAGS_KNOWN = TENANT_IN_FILE | TENANT_REGISTERED | TENANT_DELETED
TENANT_RIGHTS = ("read", "write", "admin")
"""TENANTS ``rights`` bits, by index: bit 0 read, bit 1 write, bit 2 admin."""
TENANT_RIGHTS_KNOWN = (1 << len(TENANT_RIGHTS)) - 1
_TENANT_FIGURES = (
    "contexts",
    "streams_open",
    "stored_bytes",
    "connections",
    "quota_bytes",
    "quota_contexts",
    "quota_appends_per_s",
    "quota_connections",
    "quota_streams",
    "refusals",
)
_TENANT_HEAD = struct.Struct("<IBB")
_TENANT_FIGURES_FIXED = struct.Struct(f"<{len(_TENANT_FIGURES)}Q")
TENANT_BYTES_MIN = _TENANT_HEAD.size + 2 + 1 + _TENANT_FIGURES_FIXED.size
"""The smallest tenant of a TENANTS answer: id, flags, rights, a 1-byte name, 10 u64."""


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """One tenant of a TENANTS answer: ``u32 tenant_id`` (0 while the store has not
    registered it), ``u8 flags`` (:data:`TENANT_IN_FILE`, :data:`TENANT_REGISTERED`,
    :data:`TENANT_DELETED`), ``u8 rights`` (bits of :data:`TENANT_RIGHTS`; 0 when not in the
    file), ``u16 name_len, name`` (1 to 64 bytes), then ten u64: contexts, streams_open,
    stored_bytes, connections, quota_bytes, quota_contexts, quota_appends_per_s,
    quota_connections, quota_streams (0: no limit), refusals (QUOTA_EXCEEDED answers since the
    server started)."""

    tenant_id: int
    flags: int
    rights: int
    name: str
    contexts: int = 0
    streams_open: int = 0
    stored_bytes: int = 0
    connections: int = 0
    quota_bytes: int = 0
    quota_contexts: int = 0
    quota_appends_per_s: int = 0
    quota_connections: int = 0
    quota_streams: int = 0
    refusals: int = 0

    def encode(self) -> bytes:
        """The tenant's bytes."""
        if self.flags & ~TENANT_FLAGS_KNOWN:
            raise ValueError(f"tenant flags {self.flags:#x} have unknown bits")
        if self.rights & ~TENANT_RIGHTS_KNOWN:
            raise ValueError(f"tenant rights {self.rights:#x} have unknown bits")
        if not self.name:
            raise ValueError("a tenant name must not be empty")
        return (
            _pack(_TENANT_HEAD, self.tenant_id, self.flags, self.rights)
            + _tenant_name_length(self.name, "name")
            + _pack(_TENANT_FIGURES_FIXED, *(getattr(self, name) for name in _TENANT_FIGURES))
        )

    @staticmethod
    def decode(reader: Reader) -> TenantRecord:
        """Reads one tenant (strictly: unknown flag or right bits, an empty name or one over
        64 bytes are a :class:`ProtocolError`)."""
        tenant_id = reader.u32("tenant_id")
        flags = reader.u8("flags")
        if flags & ~TENANT_FLAGS_KNOWN:
            raise reader.error("flags", f"unknown bits in {flags:#x}")
        rights = reader.u8("rights")
        if rights & ~TENANT_RIGHTS_KNOWN:
            raise reader.error("rights", f"unknown bits in {rights:#x}")
        name = _tenant_name(reader, "name")
        if not name:
            raise reader.error("name", "empty")
        figures = {field: reader.u64(field) for field in _TENANT_FIGURES}
        return TenantRecord(tenant_id, flags, rights, name, **figures)


@register_response
@dataclass(frozen=True, slots=True)
class TenantsListedResponse(Response):
    """TENANTS (0x803A, v5): TENANT_LIST's answer — ``u32 count`` (at most
    :data:`TENANT_LIST_LIMIT`), count :class:`TenantRecord`, then ``u16 next_len, next`` (at
    most 64 bytes): the name to send as ``after`` for the next page; empty on the last."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.TENANT_LIST.response_type,)
    NAME: ClassVar[str] = "TENANTS"

    tenants: tuple[TenantRecord, ...]
    next: str = ""

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        if len(self.tenants) > TENANT_LIST_LIMIT:
            raise ValueError(
                f"a TENANTS page holds at most {TENANT_LIST_LIMIT} tenants, not {len(self.tenants)}"
            )
        return (
            _u32(len(self.tenants))
            + b"".join(tenant.encode() for tenant in self.tenants)
            + _tenant_name_length(self.next, "next")
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> TenantsListedResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u32("count"), TENANT_LIST_LIMIT, "count")
        reader.count(count, TENANT_BYTES_MIN, "tenants")
        tenants = tuple(TenantRecord.decode(reader) for _ in range(count))
        return cls(tenants, _tenant_name(reader, "next"))


TENANT_KEYS_DESTROYED = 1 << 0
"""TENANT_DELETED ``flags`` bit 0: the store seals payloads and the tenant's keys are destroyed
in its keyring, so what it stored opens nowhere any more."""
TENANT_REPLICA_UPDATED = 1 << 1
"""TENANT_DELETED ``flags`` bit 1: the server replicates and the object store holds the
deletion (the replica's keyring and a cut with the tenant-deleted record)."""
TENANT_DELETE_FLAGS_KNOWN = TENANT_KEYS_DESTROYED | TENANT_REPLICA_UPDATED
TENANT_DELETED_BYTES = 8
"""TENANT_DELETED's body: ``u32 tenant_id, u32 flags``."""


@register_response
@dataclass(frozen=True, slots=True)
class TenantDeletedResponse(Response):
    """TENANT_DELETED (0x803B, v5; 8 bytes): TENANT_DELETE's answer — ``u32 tenant_id`` (the
    deleted tenant's TenantId, never 0), ``u32 flags`` (:data:`TENANT_KEYS_DESTROYED`,
    :data:`TENANT_REPLICA_UPDATED`; other bits 0)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.TENANT_DELETE.response_type,)
    NAME: ClassVar[str] = "TENANT_DELETED"

    tenant_id: int
    flags: int = 0

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        if self.tenant_id == 0:
            raise ValueError("TENANT_DELETED's tenant_id is never 0 (the operator is not deleted)")
        if self.flags & ~TENANT_DELETE_FLAGS_KNOWN:
            raise ValueError(f"TENANT_DELETED flags {self.flags:#x} have unknown bits")
        return _u32(self.tenant_id) + _u32(self.flags)

    @classmethod
    def decode_body(cls, reader: Reader) -> TenantDeletedResponse:
        """See :meth:`Message.decode_body`."""
        tenant_id = reader.u32("tenant_id")
        if tenant_id == 0:
            raise reader.error("tenant_id", "0 (the operator is never deleted)")
        return cls(tenant_id, reader.flags(TENANT_DELETE_FLAGS_KNOWN, "flags"))


TENANT_KEY_ROTATED_BYTES = 8
"""TENANT_KEY_ROTATED's body: ``u32 tenant_id, u16 key_version, u16 reserved``."""


@register_response
@dataclass(frozen=True, slots=True)
class TenantKeyRotatedResponse(Response):
    """TENANT_KEY_ROTATED (0x803C, v5; 8 bytes): TENANT_ROTATE_KEY's answer — ``u32
    tenant_id`` (0: the operator), ``u16 key_version`` (the new version, 1 or more: a tenant's
    first key is version 0), ``u16`` reserved 0."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.TENANT_ROTATE_KEY.response_type,)
    NAME: ClassVar[str] = "TENANT_KEY_ROTATED"

    tenant_id: int
    key_version: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        if not 1 <= self.key_version <= 0xFFFF:
            raise ValueError(
                f"TENANT_KEY_ROTATED's key_version is 1 to 65535 (a rotation makes version 1 "
                f"or later), not {self.key_version}"
            )
        return _u32(self.tenant_id) + _u16(self.key_version) + _u16(0)

    @classmethod
    def decode_body(cls, reader: Reader) -> TenantKeyRotatedResponse:
        """See :meth:`Message.decode_body`."""
        tenant_id = reader.u32("tenant_id")
        key_version = reader.u16("key_version")
        if key_version == 0:
            raise reader.error("key_version", "0 (a rotation makes version 1 or later)")
        reader.zero(2)
        return cls(tenant_id, key_version)


_VECTOR_INDEX_HEAD = struct.Struct("<IHBBHQ")


@dataclass(frozen=True, slots=True)
class VectorIndexInfoRecord:
    """VECTOR_INDEX_INFO (v6): ``u32 index_id`` (the tenant's id of the index; a dropped name
    created again gets another), ``u16 dims`` (1 to 4096), ``u8 metric`` (a
    :class:`VectorMetric`), ``u8 reserved``, ``u16 ef_search`` (its graph's search breadth),
    ``u64 vectors`` (live vectors in it now), ``u16 name_len, name`` (1 to 64 bytes of
    UTF-8). 20 bytes and the name."""

    index_id: int
    dims: int
    metric: VectorMetric
    ef_search: int
    vectors: int
    name: str

    def encode(self) -> bytes:
        """The record's bytes."""
        if not self.name:
            raise ValueError("an index name must not be empty")
        name = self.name.encode("utf-8")
        if len(name) > VECTOR_INDEX_NAME_BYTES_MAX:
            raise ValueError(f"an index name is at most {VECTOR_INDEX_NAME_BYTES_MAX} bytes")
        return _pack(
            _VECTOR_INDEX_HEAD,
            self.index_id,
            self.dims,
            int(self.metric),
            0,
            self.ef_search,
            self.vectors,
        ) + _short(name, "index name")

    @staticmethod
    def decode(reader: Reader) -> VectorIndexInfoRecord:
        """Reads one record, strictly: a dimension outside 1 to 4096, an unknown metric, a
        reserved byte set, a breadth over 4096, an empty name or one over 64 bytes are a
        :class:`ProtocolError`."""
        index_id = reader.u32("index_id")
        dims = reader.u16("dims")
        if not 1 <= dims <= VECTOR_DIMS_MAX:
            raise reader.error("dims", f"{dims} is not 1 to {VECTOR_DIMS_MAX}")
        metric = reader.u8("metric")
        if metric not in _VECTOR_METRICS:
            raise reader.error("metric", f"unknown value {metric}")
        reader.zero(1)
        ef_search = reader.limit(reader.u16("ef_search"), VECTOR_EF_SEARCH_MAX, "ef_search")
        vectors = reader.u64("vectors")
        length = reader.limit(
            reader.u16("index name length"), VECTOR_INDEX_NAME_BYTES_MAX, "index name length"
        )
        if length == 0:
            raise reader.error("index name", "empty")
        name = reader.string(length, "index name")
        return VectorIndexInfoRecord(index_id, dims, VectorMetric(metric), ef_search, vectors, name)


@register_response
@dataclass(frozen=True, slots=True)
class VectorIndexResponse(Response):
    """VECTOR_INDEX (0x803D VECTOR_INDEX_CREATE: the index as it is) and VECTOR_INDEX_DROPPED
    (0x803E VECTOR_INDEX_DROP: the index as it was), v6: one :class:`VectorIndexInfoRecord`."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (
        MessageType.VECTOR_INDEX_CREATE.response_type,
        MessageType.VECTOR_INDEX_DROP.response_type,
    )
    NAME: ClassVar[str] = "VECTOR_INDEX"

    index: VectorIndexInfoRecord
    response_msg_type: int = field(default=MessageType.VECTOR_INDEX_CREATE.response_type)

    @property
    def msg_type(self) -> int:
        """The frame's ``msg_type``."""
        return self.response_msg_type

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return self.index.encode()

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorIndexResponse:
        """See :meth:`Message.decode_body`."""
        return cls(VectorIndexInfoRecord.decode(reader))


@register_response
@dataclass(frozen=True, slots=True)
class VectorIndexesResponse(Response):
    """VECTOR_INDEXES (0x803F VECTOR_INDEX_LIST, v6): ``u16 count`` (at most 64), count
    :class:`VectorIndexInfoRecord`, in name order."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.VECTOR_INDEX_LIST.response_type,)
    NAME: ClassVar[str] = "VECTOR_INDEXES"

    indexes: tuple[VectorIndexInfoRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        if len(self.indexes) > VECTOR_INDEXES_MAX:
            raise ValueError(f"VECTOR_INDEXES lists at most {VECTOR_INDEXES_MAX} indexes")
        return _u16(len(self.indexes)) + b"".join(index.encode() for index in self.indexes)

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorIndexesResponse:
        """See :meth:`Message.decode_body`."""
        count = reader.limit(reader.u16("count"), VECTOR_INDEXES_MAX, "count")
        reader.count(count, VECTOR_INDEX_INFO_BYTES_MIN, "indexes")
        return cls(tuple(VectorIndexInfoRecord.decode(reader) for _ in range(count)))


@dataclass(frozen=True, slots=True)
class VectorHitRecord:
    """One hit of VECTOR_HITS: the entry's key, its score (``f32``; higher is nearer), its
    value's hash and length. On the wire ``u16 key_len, key, f32 score, hash[32], u32
    value_len``."""

    key: bytes
    score: float
    value_hash: bytes
    value_len: int

    def encode(self) -> bytes:
        """The hit's bytes."""
        return (
            _short(self.key, "key")
            + _f32s((self.score,), "score")
            + _hash(self.value_hash)
            + _u32(self.value_len)
        )


def _encode_hits(
    name: str,
    method: VectorMethod,
    candidates: int,
    hits: Sequence[VectorHitRecord | TurnHitRecord],
) -> bytes:
    """VECTOR_HITS' and TURN_HITS' body: ``u8 method``, ``u8 reserved``, ``u32 candidates``,
    ``u16 count``, then the hits."""
    if len(hits) > VECTOR_K_MAX:
        raise ValueError(f"{name} holds at most {VECTOR_K_MAX} hits")
    return (
        _u8(int(method))
        + _u8(0)
        + _u32(candidates)
        + _u16(len(hits))
        + b"".join(hit.encode() for hit in hits)
    )


def _decode_hits_head(reader: Reader, hit_bytes_min: int) -> tuple[int, int, int]:
    """What VECTOR_HITS and TURN_HITS begin with: the method (known), the candidates, and the
    count of hits (at most 1000, each at least ``hit_bytes_min`` bytes in what is left)."""
    method = reader.u8("method")
    if method not in _VECTOR_METHODS:
        raise reader.error("method", f"unknown value {method}")
    reader.zero(1)
    candidates = reader.u32("candidates")
    count = reader.limit(reader.u16("count"), VECTOR_K_MAX, "count")
    reader.count(count, hit_bytes_min, "hits")
    return method, candidates, count


@register_response
@dataclass(frozen=True, slots=True)
class VectorHitsResponse(Response):
    """VECTOR_HITS (0x8040 VECTOR_SEARCH, v6): ``u8 method`` (a :class:`VectorMethod`), ``u8
    reserved``, ``u32 candidates`` (the vectors compared), ``u16 count`` (at most 1000), count
    :class:`VectorHitRecord`, best first."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.VECTOR_SEARCH.response_type,)
    NAME: ClassVar[str] = "VECTOR_HITS"

    method: VectorMethod
    candidates: int
    hits: tuple[VectorHitRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _encode_hits("VECTOR_HITS", self.method, self.candidates, self.hits)

    @classmethod
    def decode_body(cls, reader: Reader) -> VectorHitsResponse:
        """See :meth:`Message.decode_body`."""
        method, candidates, count = _decode_hits_head(reader, VECTOR_HIT_BYTES_MIN)
        hits = tuple(
            VectorHitRecord(
                reader.short_bytes("key"),
                reader.f32("score"),
                reader.hash("value_hash"),
                reader.u32("value_len"),
            )
            for _ in range(count)
        )
        return cls(VectorMethod(method), candidates, hits)


@dataclass(frozen=True, slots=True)
class TurnHitRecord:
    """One hit of TURN_HITS: the turn and its score (``f32``; higher is nearer). On the wire
    TURN, ``f32 score``."""

    turn: TurnRecord
    score: float

    def encode(self) -> bytes:
        """The hit's 92 bytes."""
        return self.turn.encode() + _f32s((self.score,), "score")


@register_response
@dataclass(frozen=True, slots=True)
class TurnHitsResponse(Response):
    """TURN_HITS (0x8043 VECTOR_SEARCH_TURNS, v7): ``u8 method`` (a :class:`VectorMethod`),
    ``u8 reserved``, ``u32 candidates`` (the vectors compared), ``u16 count`` (at most 1000),
    count :class:`TurnHitRecord`, best first (equal scores in TurnID order)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.VECTOR_SEARCH_TURNS.response_type,)
    NAME: ClassVar[str] = "TURN_HITS"

    method: VectorMethod
    candidates: int
    hits: tuple[TurnHitRecord, ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _encode_hits("TURN_HITS", self.method, self.candidates, self.hits)

    @classmethod
    def decode_body(cls, reader: Reader) -> TurnHitsResponse:
        """See :meth:`Message.decode_body`."""
        method, candidates, count = _decode_hits_head(reader, TURN_HIT_BYTES)
        hits = tuple(TurnHitRecord(reader.turn(), reader.f32("score")) for _ in range(count))
        return cls(VectorMethod(method), candidates, hits)


REPLICATION_ROLES = ("off", "primary", "standby")
"""REPLICATION_STATS ``role`` codes, by index."""
REPLICATION_STATES = (
    "off",
    "shipping",
    "failing",
    "fenced",
    "stopped",
    "following",
    "stalled",
    "waiting",
)
"""REPLICATION_STATS ``state`` codes, by index."""
REPLICATION_TEXT_BYTES_MAX = 1024
REPLICATION_FAILURE_KINDS_MAX = 32
REPLICATION_FAILURE_KIND_BYTES_MAX = 32
_REPLICATION_FIGURES = (
    "generation",
    "epoch",
    "seq",
    "records",
    "records_unix_ms",
    "lag_ms",
    "lag_bytes",
    "objects_total",
    "bytes_total",
    "last_success_unix_ms",
    "backlog_objects",
    "segment_bytes_max",
)
_REPLICATION_FIXED = struct.Struct("<BBB5s12Q")


@register_response
@dataclass(frozen=True, slots=True)
class ReplicationStatsResponse(Response):
    """REPLICATION_STATS response (0x8037, v3): ``u8 role, u8 state, u8 promoting, 5
    reserved``, twelve u64 (generation, epoch, seq, records, records_unix_ms, lag_ms,
    lag_bytes, objects_total, bytes_total, last_success_unix_ms, backlog_objects,
    segment_bytes_max), three ``u16 len, UTF-8`` texts of at most 1024 bytes (target,
    primary, reason), ``u16 failure_count`` (≤ 32) and per failure ``u8 kind_len (1..=32),
    kind, u64 count``. Roles and states by code: :data:`REPLICATION_ROLES`,
    :data:`REPLICATION_STATES`."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.REPLICATION_STATS.response_type,)
    NAME: ClassVar[str] = "REPLICATION_STATS response"

    role: int
    state: int
    promoting: bool
    generation: int
    epoch: int
    seq: int
    records: int
    records_unix_ms: int
    lag_ms: int
    lag_bytes: int
    objects_total: int
    bytes_total: int
    last_success_unix_ms: int
    backlog_objects: int
    segment_bytes_max: int
    target: str
    primary: str
    reason: str
    failures: tuple[tuple[str, int], ...]

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        if len(self.failures) > REPLICATION_FAILURE_KINDS_MAX:
            raise ValueError(f"{len(self.failures)} failure kinds (at most 32)")
        body = _pack(
            _REPLICATION_FIXED,
            self.role,
            self.state,
            int(self.promoting),
            b"\0" * 5,
            *(getattr(self, name) for name in _REPLICATION_FIGURES),
        )
        for name in ("target", "primary", "reason"):
            text = getattr(self, name).encode()
            if len(text) > REPLICATION_TEXT_BYTES_MAX:
                raise ValueError(f"{name} of {len(text)} bytes (at most 1024)")
            body += _short(text, name)
        body += _u16(len(self.failures))
        for kind, count in self.failures:
            if not 0 < len(kind.encode()) <= REPLICATION_FAILURE_KIND_BYTES_MAX:
                raise ValueError(f"failure kind {kind!r}: 1 to 32 bytes")
            body += _tiny(kind.encode(), "failure kind") + _u64(count)
        return body

    @classmethod
    def decode_body(cls, reader: Reader) -> ReplicationStatsResponse:
        """See :meth:`Message.decode_body`."""
        role = reader.u8("role")
        if role >= len(REPLICATION_ROLES):
            raise reader.error("role", "not 0 (off), 1 (primary) or 2 (standby)")
        state = reader.u8("state")
        if state >= len(REPLICATION_STATES):
            raise reader.error("state", "not a replication state (0..=7)")
        promoting = reader.boolean("promoting")
        reader.zero(5)
        generation = reader.u64("generation")
        epoch = reader.u64("epoch")
        seq = reader.u64("seq")
        records = reader.u64("records")
        records_unix_ms = reader.u64("records_unix_ms")
        lag_ms = reader.u64("lag_ms")
        lag_bytes = reader.u64("lag_bytes")
        objects_total = reader.u64("objects_total")
        bytes_total = reader.u64("bytes_total")
        last_success_unix_ms = reader.u64("last_success_unix_ms")
        backlog_objects = reader.u64("backlog_objects")
        segment_bytes_max = reader.u64("segment_bytes_max")
        texts = []
        for name in ("target", "primary", "reason"):
            length = reader.limit(reader.u16(name), REPLICATION_TEXT_BYTES_MAX, name)
            texts.append(reader.string(length, name))
        count = reader.limit(
            reader.u16("failure_count"), REPLICATION_FAILURE_KINDS_MAX, "failure_count"
        )
        failures: list[tuple[str, int]] = []
        for _ in range(count):
            kind = reader.tiny_string("failure kind")
            if not 0 < len(kind.encode()) <= REPLICATION_FAILURE_KIND_BYTES_MAX:
                raise reader.error("failure kind", "empty or longer than 32 bytes")
            if any(known == kind for known, _ in failures):
                raise reader.error("failure kind", "named twice")
            failures.append((kind, reader.u64("failure count")))
        return cls(
            role,
            state,
            promoting,
            generation,
            epoch,
            seq,
            records,
            records_unix_ms,
            lag_ms,
            lag_bytes,
            objects_total,
            bytes_total,
            last_success_unix_ms,
            backlog_objects,
            segment_bytes_max,
            texts[0],
            texts[1],
            texts[2],
            tuple(failures),
        )


_PATCHED = struct.Struct("<QQ32sI4s")


@register_response
@dataclass(frozen=True, slots=True)
class PatchedResponse(Response):
    """PATCH_TURN response (0x8024, v2; 64 bytes): ``u64 turn_id, u64 overlay_seq, hash[32]
    payload_hash, u32 payload_len, u32 reserved``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.PATCH_TURN.response_type,)
    NAME: ClassVar[str] = "PATCH_TURN response"

    turn_id: int
    overlay_seq: int
    payload_hash: bytes
    payload_len: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _pack(
            _PATCHED,
            self.turn_id,
            self.overlay_seq,
            _hash(self.payload_hash),
            self.payload_len,
            bytes(4),
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> PatchedResponse:
        """See :meth:`Message.decode_body`."""
        turn_id = reader.u64("turn_id")
        overlay_seq = reader.u64("overlay_seq")
        payload_hash = reader.hash("payload_hash")
        payload_len = reader.u32("payload_len")
        reader.zero(4)
        return cls(turn_id, overlay_seq, payload_hash, payload_len)


@register_response
@dataclass(frozen=True, slots=True)
class RedactedResponse(Response):
    """REDACT_TURN response (0x8025, v2; 16 bytes): ``u64 turn_id, u64 overlay_seq``."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.REDACT_TURN.response_type,)
    NAME: ClassVar[str] = "REDACT_TURN response"

    turn_id: int
    overlay_seq: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _u64(self.turn_id) + _u64(self.overlay_seq)

    @classmethod
    def decode_body(cls, reader: Reader) -> RedactedResponse:
        """See :meth:`Message.decode_body`."""
        return cls(reader.u64("turn_id"), reader.u64("overlay_seq"))


@register_response
@dataclass(frozen=True, slots=True)
class PurgedResponse(Response):
    """PURGE_BLOB response (0x8026, v2; 48 bytes): ``hash[32] payload_hash, u64
    turns_redacted, u64 overlay_seq`` (the purge record's)."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.PURGE_BLOB.response_type,)
    NAME: ClassVar[str] = "PURGE_BLOB response"

    payload_hash: bytes
    turns_redacted: int
    overlay_seq: int

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return _hash(self.payload_hash) + _u64(self.turns_redacted) + _u64(self.overlay_seq)

    @classmethod
    def decode_body(cls, reader: Reader) -> PurgedResponse:
        """See :meth:`Message.decode_body`."""
        return cls(
            reader.hash("payload_hash"), reader.u64("turns_redacted"), reader.u64("overlay_seq")
        )


@register_response
@dataclass(frozen=True, slots=True)
class ChunkedStoredResponse(Response):
    """PUT_CHUNKED response CHUNKED_STORED (0x8027, v2; 48 bytes): ``hash[32] payload_hash,
    u64 payload_len, u8 already_stored`` (1: stored before this request, nothing new was
    written), 7 reserved."""

    MSG_TYPES: ClassVar[tuple[int, ...]] = (MessageType.PUT_CHUNKED.response_type,)
    NAME: ClassVar[str] = "CHUNKED_STORED"

    payload_hash: bytes
    payload_len: int
    already_stored: bool

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        return (
            _hash(self.payload_hash)
            + _u64(self.payload_len)
            + _u8(int(self.already_stored))
            + bytes(7)
        )

    @classmethod
    def decode_body(cls, reader: Reader) -> ChunkedStoredResponse:
        """See :meth:`Message.decode_body`."""
        payload_hash = reader.hash("payload_hash")
        payload_len = reader.u64("payload_len")
        already_stored = reader.boolean("already_stored")
        reader.zero(7)
        return cls(payload_hash, payload_len, already_stored)


def turn_count(response: Response) -> int:
    """The TURNs a response carries, in wire order (an :class:`OverlaidResponse` has one
    OVERLAY per TURN)."""
    if isinstance(response, (TurnResponse, TurnInfoResponse, AppendedResponse)):
        return 1
    if isinstance(response, (TurnsResponse, TurnLogResponse, PageResponse)):
        return len(response.entries)
    if isinstance(response, (FoundTurnsResponse, AppendedTurnsResponse)):
        return len(response.turns)
    if isinstance(response, TurnHitsResponse):
        return len(response.hits)
    return 0


@dataclass(frozen=True, slots=True)
class OverlaidResponse(Response):
    """The answer to an :class:`AsOf` read (frame flag :data:`OVERLAYS`): the read's answer,
    then ``u32 count`` and one :class:`OverlayRecord` per TURN of it, in order."""

    NAME: ClassVar[str] = "overlaid response"

    response: Response
    overlays: tuple[OverlayRecord, ...]

    @property
    def msg_type(self) -> int:
        """The read's response type."""
        return self.response.msg_type

    @property
    def frame_flags(self) -> int:
        """:data:`OVERLAYS`."""
        return OVERLAYS

    def encode_body(self) -> bytes:
        """See :meth:`Message.encode_body`."""
        if len(self.overlays) != turn_count(self.response):
            raise ValueError("an overlaid answer has one OVERLAY per TURN")
        return (
            self.response.encode_body()
            + _u32(len(self.overlays))
            + b"".join(overlay.encode() for overlay in self.overlays)
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


def _decode(cls: type[M], body: bytes, by_name: bool = False) -> M:
    reader = Reader(bytes(body), cls.NAME, by_name)
    message = cls.decode_body(reader)
    reader.finish()
    return message


def decode_request(msg_type: int, body: bytes, flags: int = 0) -> Request:
    """Decodes a request body of type ``msg_type`` sent with frame ``flags`` (unknown types,
    unknown flag bits, CTX_BY_NAME on a message without a leading context:
    :class:`ProtocolError`). Decodes the newest version; a server speaking version 1 to a
    connection must refuse version-2 types and any flag before calling this."""
    cls = REQUEST_TYPES.get(msg_type)
    if cls is None:
        raise ProtocolError(f"unknown request type {msg_type:#06x}")
    if flags & ~FRAME_FLAGS_KNOWN:
        raise ProtocolError(f"{cls.NAME}: unknown frame flag bits {flags:#06x}")
    by_name = bool(flags & CTX_BY_NAME)
    if by_name and not cls.TAKES_CONTEXT:
        raise ProtocolError(f"{cls.NAME}: CTX_BY_NAME on a message without a context_id")
    after = (flags & ACK_AFTER_MASK) >> ACK_AFTER_SHIFT
    if after:
        if msg_type not in TAKES_ACK_AFTER:
            raise ProtocolError(f"{cls.NAME}: ACK_AFTER on a message that is not such a write")
        if after not in ACK_AFTER_NAMES:
            raise ProtocolError(f"{cls.NAME}: ACK_AFTER is 3 (only 0, 1 and 2 are defined)")
        return AckAfter(_decode(cls, body, by_name), after)
    if not flags & OVERLAYS:
        return _decode(cls, body, by_name)
    if msg_type not in TAKES_OVERLAYS:
        raise ProtocolError(f"{cls.NAME}: frame flag OVERLAYS on a message that returns no turns")
    reader = Reader(bytes(body), cls.NAME, by_name)
    read = cls.decode_body(reader)
    as_of = reader.u64("as_of")
    reader.finish()
    return AsOf(read, as_of)


def decode_response(
    msg_type: int, body: bytes, flags: int = 0, *, allow_unknown: bool = False
) -> Response:
    """Decodes a response body of type ``msg_type`` sent with frame ``flags`` (only
    :data:`OVERLAYS`, on the answer to a read of :data:`TAKES_OVERLAYS`: then an
    :class:`OverlaidResponse`). An unknown type is a :class:`ProtocolError` unless
    ``allow_unknown`` (then a :class:`RawResponse`)."""
    cls = RESPONSE_TYPES.get(msg_type)
    overlays = bool(flags & OVERLAYS)
    more = bool(flags & MORE)
    if (
        flags & ~RESPONSE_FLAGS_KNOWN
        or (overlays and (msg_type & ~RESPONSE_BIT) not in TAKES_OVERLAYS)
        or (more and (cls is None or not cls.CARRIES_MORE))
    ):
        raise ProtocolError(f"frame flags {flags:#06x} this answer cannot carry")
    if cls is None:
        if allow_unknown and msg_type & RESPONSE_BIT:
            return RawResponse(msg_type, bytes(body))
        raise ProtocolError(f"unknown response type {msg_type:#06x}")
    reader = Reader(bytes(body), cls.NAME)
    response: Response = cls.decode_body(reader)
    if len(cls.MSG_TYPES) > 1:
        # One layout answers several requests: the instance records which.
        response = cast(
            Response, dataclasses.replace(cast(Any, response), response_msg_type=msg_type)
        )
    if overlays:
        count = reader.u32("overlay count")
        if count != turn_count(response):
            raise reader.error("overlay count", "not one per TURN of the answer")
        reader.count(count, OVERLAY_BYTES, "overlays")
        states = []
        for _ in range(count):
            overlay_seq = reader.u64("overlay_seq")
            overlay_flags = reader.u8("overlay_flags")
            if overlay_flags & ~OVERLAY_REDACTED:
                raise reader.error("overlay_flags", "unknown flag bits")
            reader.zero(7)
            states.append(OverlayRecord(overlay_seq, bool(overlay_flags & OVERLAY_REDACTED)))
        response = OverlaidResponse(response, tuple(states))
    reader.finish()
    if more:
        # Only a frame that can be followed by more (its class checks the body) carries it.
        response = cast(Any, response).with_more()
    return response


def encode_request(req_id: int, request: Request) -> list[bytes]:
    """A request frame as chunks (header and fields first; a large payload by reference)."""
    chunks = request.body_chunks()
    length = sum(len(chunk) for chunk in chunks)
    header = FrameHeader(length, request.msg_type, request.frame_flags, req_id).encode()
    return [header + chunks[0], *chunks[1:]]


def encode_response(req_id: int, response: Response) -> bytes:
    """A response frame (header and body)."""
    return encode_frame(response.msg_type, req_id, response.encode_body(), response.frame_flags)


# The streams family (version 3, issue 32) is owned by its own module; importing it here
# registers its messages with REQUEST_TYPES and RESPONSE_TYPES whoever imports this one.
from . import _stream_protocol as _stream_protocol  # noqa: E402
