"""What the blocking and the asyncio client share: building each request, checking and
converting its response (payload verification included), the HELLO exchange's rules, and
every call of more than one request. No I/O here.

- An :class:`Op` is one request and the function that turns its response into the result.
- A :data:`Plan` is a generator for a call of several steps (``replay``, ``has_blobs``,
  ``kv_get``): it yields an :class:`Op` (and gets its result back, or its exception thrown
  in), a :class:`Many` (pipelined ops; gets the list of results) or :data:`SERVER_INFO`
  (gets the connection's :class:`ServerInfo`), and returns the call's result. Each client
  drives plans with one small loop (``_drive``), so the logic is written once.
- A :class:`Paging` describes a listing that follows cursors; each client turns it into an
  iterator (``_iterate``).
- Each client finishes an op with :func:`finish_op`, telling it whether the connection the
  answer came on hashes RAW payloads (decision 0015: the ``verify_payloads`` option applied
  to the server's address); :func:`payload_bytes` follows that.

Every answer is checked against what was asked where the protocol makes a promise (pair
assertions): payload hashes and lengths, the context of an appended turn, the parent a turn
was asked to hang from, the labels a turn-log page was filtered by, a chain page's links from
turn to turn, a cursor that advances. A broken promise is a :class:`ProtocolError`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Literal, NoReturn, TypeVar, cast

import blake3
import zstandard

from . import _protocol as p
from ._wire import KV_KEY_BYTES_MAX
from .errors import (
    CtxstoreError,
    IntegrityError,
    NotFound,
    NotSupported,
    ProtocolError,
    TooLarge,
    UnknownMessage,
    error_for_code,
)
from .types import (
    Appended,
    BackupReport,
    ChunkedStored,
    ContextHead,
    ContextInfo,
    ContextLike,
    ContextPage,
    Durability,
    FoundPage,
    GcReport,
    HashLike,
    Idempotency,
    KeyLike,
    KeyT,
    KvItem,
    KvPage,
    KvValue,
    LogCursor,
    LogPage,
    Opened,
    Page,
    ParentLike,
    Patched,
    Purged,
    Redacted,
    ReplicationStats,
    Retention,
    Role,
    ServerInfo,
    Stats,
    Tenant,
    TenantDeleted,
    TenantKeyRotated,
    Turn,
    TurnHit,
    TurnHits,
    TurnInfo,
    TurnPage,
    TurnSpec,
    VectorHit,
    VectorHits,
    VectorIndex,
    VectorMetric,
    VerifyPayloads,
    parse_hash,
)

T = TypeVar("T")
P = TypeVar("P")
I = TypeVar("I")  # noqa: E741 - the item type of a listing

DEFAULT_ADDR = "127.0.0.1:7411"
ADDR_ENV = "CTXSTORE_ADDR"
"""The environment variable a client's address defaults to (as the CLI's ``--addr``)."""
TOKEN_ENV = "CTXSTORE_TOKEN"
"""The environment variable a client's token defaults to (as the CLI's ``--token``)."""
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Unicode's White_Space characters: what the server's ``str::trim`` takes off a token file
(Python's own ``str.strip()`` also takes U+001C..U+001F, which are not white space there)."""
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_CLIENT_NAME = "ctxstore-python"
_INFLATE_CHUNK = 1 << 20
EMPTY_HASH = blake3.blake3(b"").digest()
"""BLAKE3 of no bytes: the ``payload_hash`` of a redacted turn."""


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One request and the function that turns its (non-ERROR) response into the result."""

    request: p.Request
    finish: Callable[[p.Response], T]


@dataclass(frozen=True, slots=True)
class Many(Generic[T]):
    """A plan step: send every op at once (pipelined), get the list of their results."""

    ops: Sequence[Op[T]]


class ServerInfoStep:
    """A plan step: get the connection's :class:`ServerInfo` (connecting if needed)."""


SERVER_INFO = ServerInfoStep()
"""The one :class:`ServerInfoStep`."""

Step = Op[Any] | Many[Any] | ServerInfoStep
Plan = Generator[Step, Any, T]
"""A call of several steps (see the module's doc)."""


class Driver(Generic[T]):
    """One run of a plan: the bookkeeping both clients' ``_drive`` share. Each takes
    :meth:`step` after step, runs it its own way (blocking, or awaiting) and hands back its
    result (:meth:`answer`) or its error (:meth:`fail`), until :meth:`step` says None: then
    :attr:`value` is the call's result."""

    __slots__ = ("_plan", "_result", "_error", "value")

    def __init__(self, plan: Plan[T]) -> None:
        self._plan = plan
        self._result: Any = None
        self._error: BaseException | None = None
        self.value: T

    def step(self) -> Step | None:
        """The next step; None once the plan returned (an exception it raises propagates)."""
        result, error = self._result, self._error
        self._result = self._error = None
        try:
            return self._plan.throw(error) if error is not None else self._plan.send(result)
        except StopIteration as stop:
            self.value = cast(T, stop.value)
            return None

    def answer(self, result: Any) -> None:
        """The last step's result."""
        self._result = result

    def fail(self, error: BaseException) -> None:
        """The last step's error, thrown into the plan at the next :meth:`step`."""
        self._error = error


@dataclass(frozen=True, slots=True)
class Paging(Generic[P, I]):
    """A listing that follows cursors: the first page's op, the op of the page after a given
    page (None: that was the last), and a page's items."""

    first: Op[P]
    follow: Callable[[P], Op[P] | None]
    items: Callable[[P], Iterable[I]]


def parse_addr(addr: str | tuple[str, int] | None) -> tuple[str, int]:
    """``"host:port"``, ``"[v6]:port"`` or ``(host, port)`` as ``(host, port)``; None is
    ``$CTXSTORE_ADDR`` when it is set and not empty, else ``127.0.0.1:7411`` (the CLI's
    defaults)."""
    if addr is None:
        addr = os.environ.get(ADDR_ENV) or DEFAULT_ADDR
    if isinstance(addr, tuple):
        host, port = addr
        return str(host), int(port)
    text = addr.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            raise ValueError(f"address {addr!r} is not [HOST]:PORT")
        host, port_text = text[1:end], text[end + 2 :]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"address {addr!r} is not HOST:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"address {addr!r} has no numeric port") from None
    if not 0 < port < 65536:
        raise ValueError(f"address {addr!r}: port out of range")
    return host, port


def token_bytes(token: str | bytes | None) -> bytes:
    """The token as sent in HELLO: a str as UTF-8, without surrounding white space, as the
    server trims its ``--token-file`` (so a token read from a file with its newline is the
    server's token). None is ``$CTXSTORE_TOKEN`` when it is set and not empty, else no token;
    an empty token is no token (whatever the environment says). A token of only white space
    is a ValueError: no server has it."""
    if token is None:
        token = os.environ.get(TOKEN_ENV) or ""
    if isinstance(token, str):
        raw = _trimmed_token(token).encode("utf-8")
    else:
        data = bytes(token)
        try:
            raw = _trimmed_token(data.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            raw = data  # not UTF-8, so no server's token (it reads its file as text): as is
    if len(raw) > p.TOKEN_BYTES_MAX:
        raise ValueError(f"a token is at most {p.TOKEN_BYTES_MAX} bytes")
    return raw


def _trimmed_token(text: str) -> str:
    trimmed = text.strip(_WHITE_SPACE)
    if text and not trimmed:
        raise ValueError("the token is only white space; no server has such a token")
    return trimmed


VERIFY_PAYLOADS: tuple[VerifyPayloads, ...] = ("when_remote", "always")
"""The values of a client's ``verify_payloads`` (decision 0015), the default first."""


def check_verify_payloads(value: object) -> VerifyPayloads:
    """``value`` if it is one of :data:`VERIFY_PAYLOADS`, else ValueError."""
    for known in VERIFY_PAYLOADS:
        if isinstance(value, str) and value == known:
            return known
    raise ValueError(f"verify_payloads is {' or '.join(map(repr, VERIFY_PAYLOADS))}, not {value!r}")


def is_loopback(host: str) -> bool:
    """Whether ``host``, an IP address as ``getpeername()`` gives it, is a loopback address:
    127.0.0.0/8, ``::1``, or 127.0.0.0/8 mapped into IPv6 (``::ffff:127.0.0.1``, which a
    dual-stack socket reports for an IPv4 peer). Anything else, a name or text that is no
    address included, is not."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def hashes_raw_from(verify_payloads: VerifyPayloads, peer: object) -> bool:
    """Whether a connection to ``peer`` (the socket's ``getpeername()``; None if it could not
    tell) hashes RAW payloads under ``verify_payloads`` (decision 0015): with ``"always"``
    yes; with ``"when_remote"`` unless the peer is on loopback. A peer the socket cannot tell
    counts as remote: hashing is the safe side."""
    if verify_payloads == "always":
        return True
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return not is_loopback(peer[0])
    return True


def check_timeout(timeout: float | None, default: float) -> float:
    """The timeout of one call: ``timeout`` or the client's default; it must be positive."""
    value = default if timeout is None else float(timeout)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"a timeout must be a positive finite number of seconds, not {timeout!r}")
    return value


def hello_request(versions: tuple[int, int], token: bytes, client_name: str) -> p.Hello:
    """The HELLO offering ``versions``."""
    return p.Hello(versions[0], versions[1], token, client_name)


def hello_result(response: p.Response, versions: tuple[int, int]) -> ServerInfo:
    """Checks the answer to HELLO: an ERROR raises its exception, a HELLO response must choose
    a version in the offered range."""
    if isinstance(response, p.ErrorResponse):
        raise error_for_code(response.code, response.message, response.detail)
    if not isinstance(response, p.HelloResponse):
        raise ProtocolError(f"expected a HELLO response, got {type(response).__name__}")
    if not versions[0] <= response.version <= versions[1]:
        raise ProtocolError(
            f"the server chose protocol version {response.version}, "
            f"outside the offered {versions[0]}..={versions[1]}"
        )
    return ServerInfo(
        version=response.version,
        server_name=response.server_name,
        frame_bytes_max=response.frame_bytes_max,
        requests_in_flight_max=response.requests_in_flight_max,
        blob_bytes_max=response.blob_bytes_max,
        read_turns_max=response.read_turns_max,
        has_blobs_max=response.has_blobs_max,
    )


def check_sendable(request: p.Request, chunks: list[bytes], info: ServerInfo) -> None:
    """Refuses, before sending, a request the negotiated version lacks or a frame the server
    would refuse by closing the connection."""
    if request.required_version > info.version:
        what = request.NAME
        if isinstance(request, p.AckAfter):
            named = p.ACK_AFTER_NAMES.get(request.after, str(request.after))
            what = f"{request.request.NAME} with durability={named!r} (ACK_AFTER)"
        elif isinstance(request, p.AsOf):
            what = f"{request.read.NAME} in an overlay view (as_of)"
        elif request.frame_flags & p.CTX_BY_NAME:
            what = f"{request.NAME} of a context by name"
        raise NotSupported(
            f"{what} needs protocol version {request.required_version}; the server "
            f"{info.server_name!r} negotiated version {info.version} (nothing was sent)"
        )
    body = sum(len(chunk) for chunk in chunks) - p.HEADER_BYTES
    if body > info.frame_bytes_max:
        raise TooLarge(
            f"{request.NAME} frame of {body} bytes is over the server's frame limit of "
            f"{info.frame_bytes_max} bytes (checked by the client, not sent)"
        )


_HASH_RAW: ContextVar[bool] = ContextVar("ctxstore_hash_raw", default=True)
"""Whether the answer being finished came on a connection that hashes RAW payloads: set by
:func:`finish_op` around an op's ``finish``, read by :func:`payload_bytes`. Outside
:func:`finish_op` (an op finished by hand) it is True: hashing is the safe side."""


def finish_op(op: Op[T], response: p.Response, hashes_raw: bool) -> T:
    """The result of ``op`` from its ``response`` (an ERROR raises its exception), received
    on a connection that hashes RAW payloads or not (``hashes_raw``, decision 0015): the
    payloads the op's ``finish`` checks follow that connection's decision. (A context
    variable carries it, so the ops need not take it through every ``finish``; ``finish``
    is synchronous, so no other call's answer can be finished while it is set.)"""
    answer = result_of(op.request, response)
    token = _HASH_RAW.set(hashes_raw)
    try:
        return op.finish(answer)
    finally:
        _HASH_RAW.reset(token)


def result_of(request: p.Request, response: p.Response) -> p.Response:
    """Raises the exception of an ERROR response; checks that any other has the request's
    response type."""
    if isinstance(response, p.ErrorResponse):
        raise error_for_code(response.code, response.message, response.detail)
    if response.msg_type != request.response_type:
        raise ProtocolError(
            f"{request.NAME} was answered with message type {response.msg_type:#06x}"
        )
    return response


def new_nonce() -> int:
    """A random PING nonce."""
    return int.from_bytes(os.urandom(8), "little")


def _u64(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= p.U64_MAX:
        raise ValueError(f"{name} must be an integer in 0..2**64, not {value!r}")
    return value


def _u32(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= p.U32_MAX:
        raise ValueError(f"{name} must be an integer in 0..2**32, not {value!r}")
    return value


def _context(context: ContextLike, name: str = "context") -> ContextLike:
    """A ContextID (u64) or a non-empty name, as given (the server checks a name's length:
    over 256 bytes is TOO_LARGE)."""
    if isinstance(context, str):
        if not context:
            raise ValueError(f"{name}: a context name must not be empty")
        if len(context.encode("utf-8")) > p.U16_MAX:
            raise ValueError(f"{name}: a context name is at most 65535 bytes on the wire")
        return context
    if isinstance(context, bool) or not isinstance(context, int):
        raise TypeError(f"{name} is a ContextID (int) or a name (str), not {context!r}")
    return _u64(context, name)


def _key(key: KeyLike) -> bytes:
    """A key-value key as bytes (a str as its UTF-8)."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"a key is bytes or str, not {key!r}")
    return bytes(key)


def _strings(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {value!r}")
    return value


def _tag_pairs(tags: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if tags is None:
        return ()
    return tuple(
        (_strings(key, "a tag key"), _strings(value, "a tag value")) for key, value in tags.items()
    )


def _expect(response: p.Response, cls: type[T]) -> T:
    if not isinstance(response, cls):
        raise ProtocolError(f"expected {cls.__name__}, got {type(response).__name__}")
    return response


# ----------------------------------------------------------------------------------------------
# Payloads


def inflate(data: bytes, raw_len: int) -> bytes:
    """Inflates a zstd frame that must hold exactly ``raw_len`` bytes, reading at most
    ``raw_len + 1`` bytes of output (a frame claiming more cannot exhaust memory)."""
    if raw_len > p.FRAME_BYTES_LIMIT:
        raise IntegrityError(f"zstd payload claims {raw_len} bytes, above any server's limit")
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as error:
        raise IntegrityError(f"zstd payload has no valid frame header: {error}") from None
    if declared >= 0 and declared != raw_len:
        raise IntegrityError(f"zstd frame declares {declared} bytes, raw_len is {raw_len}")
    parts: list[bytes] = []
    total = 0
    try:
        decompressor = zstandard.ZstdDecompressor()
        with decompressor.stream_reader(data, read_across_frames=False) as reader:
            while total <= raw_len:
                chunk = reader.read(min(_INFLATE_CHUNK, raw_len + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
    except zstandard.ZstdError as error:
        raise IntegrityError(f"zstd payload does not inflate: {error}") from None
    if total != raw_len:
        raise IntegrityError(
            f"zstd payload inflates to {'more than ' if total > raw_len else ''}"
            f"{total} bytes, raw_len is {raw_len}"
        )
    return b"".join(parts)


def payload_bytes(
    payload: p.PayloadRecord,
    expected_hash: bytes,
    expected_len: int | None,
    accept_zstd: bool,
    what: str,
    *,
    hash_raw: bool | None = None,
) -> bytes:
    """The checked bytes of a PAYLOAD (decision 0015): RAW as sent, ZSTD inflated (only if it
    was accepted). The length must match ``expected_len`` (when there is one) and a ZSTD
    payload's BLAKE3 hash must match, else :class:`IntegrityError`; so must a RAW payload's
    hash when ``hash_raw`` (None: as the connection the answer came on decided, see
    :func:`finish_op`; True outside it). The server hashed every RAW payload it sends when it
    read it; it never hashed the bytes a ZSTD payload inflates to."""
    if payload.encoding == p.PayloadEncoding.RAW:
        data = payload.data
        hashed = _HASH_RAW.get() if hash_raw is None else hash_raw
    elif payload.encoding == p.PayloadEncoding.ZSTD:
        if not accept_zstd:
            raise ProtocolError(f"{what}: a zstd payload the request did not accept")
        data = inflate(payload.data, payload.raw_len)
        hashed = True
    else:
        raise ProtocolError(f"{what}: the payload is absent though it was requested")
    if expected_len is not None and len(data) != expected_len:
        raise IntegrityError(
            f"{what}: payload of {len(data)} bytes, the turn says {expected_len} bytes"
        )
    if hashed:
        actual = blake3.blake3(data).digest()
        if actual != expected_hash:
            raise IntegrityError(
                f"{what}: payload hash {actual.hex()} does not match {expected_hash.hex()}"
            )
    return data


def turn_of(record: p.TurnRecord, payload: bytes | None = None) -> Turn:
    """A public :class:`Turn` from its wire record."""
    return Turn(
        turn_id=record.turn_id,
        parent_turn_id=record.parent_turn_id,
        context_id=record.context_id,
        depth=record.depth,
        codec=record.codec,
        type_tag=record.type_tag,
        payload_hash=record.payload_hash,
        payload_len=record.payload_len,
        flags=record.flags,
        created_at_unix_ms=record.created_at_unix_ms,
        payload=payload,
    )


def _head(response: p.Response) -> ContextHead:
    head = _expect(response, p.ContextResponse).head
    return ContextHead(head.context_id, head.head_turn_id, head.head_depth)


def _read_flags(payloads: bool, accept_zstd: bool) -> int:
    if not payloads:
        return 0
    return p.READ_WITH_PAYLOADS | (p.READ_ACCEPT_ZSTD if accept_zstd else 0)


def _page_finisher(payloads: bool, accept_zstd: bool) -> Callable[[p.Response], Page]:
    def finish(response: p.Response) -> Page:
        turns_response = _expect(response, p.TurnsResponse)
        turns = []
        for entry in turns_response.entries:
            record = entry.turn
            if payloads:
                what = f"turn {record.turn_id}"
                data: bytes | None = payload_bytes(
                    entry.payload, record.payload_hash, record.payload_len, accept_zstd, what
                )
            else:
                if entry.payload.encoding != p.PayloadEncoding.ABSENT:
                    raise ProtocolError(
                        f"turn {record.turn_id}: a payload was sent though none was requested"
                    )
                data = None
            turns.append(turn_of(record, data))
        return Page(turns, turns_response.next_before, turns_response.tip_depth)

    return finish


# ----------------------------------------------------------------------------------------------
# One Op per request


def ping(nonce: int | None = None) -> Op[None]:
    """PING: checks that the PONG echoes the nonce."""
    value = new_nonce() if nonce is None else _u64(nonce, "nonce")

    def finish(response: p.Response) -> None:
        if _expect(response, p.Pong).nonce != value:
            raise ProtocolError("PONG does not echo the PING's nonce")

    return Op(p.Ping(value), finish)


def create_context(base_turn_id: int = 0) -> Op[ContextHead]:
    """CTX_CREATE."""
    return Op(p.CtxCreate(_u64(base_turn_id, "base_turn_id")), _head)


def fork(turn_id: int) -> Op[ContextHead]:
    """CTX_FORK."""
    return Op(p.CtxFork(_u64(turn_id, "turn_id")), _head)


def head(context: ContextLike) -> Op[ContextHead]:
    """GET_HEAD (by name: CTX_BY_NAME)."""
    return Op(p.GetHead(_context(context)), _head)


def append(
    context: ContextLike,
    payload: bytes | bytearray | memoryview,
    type_tag: int,
    codec: int,
    expected_head: int | None,
) -> Op[Appended]:
    """APPEND_TURN; checks that the new turn carries the payload's hash and length."""
    data = bytes(payload)
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    request = p.AppendTurn(
        _context(context),
        expected_head,
        _u64(type_tag, "type_tag"),
        _u32(codec, "codec"),
        data,
    )
    if len(data) > p.U32_MAX:
        raise ValueError("a payload is at most 4 GiB - 1 bytes")
    digest = blake3.blake3(data).digest()

    def finish(response: p.Response) -> Appended:
        appended = _expect(response, p.AppendedResponse)
        record = appended.turn
        if record.payload_hash != digest or record.payload_len != len(data):
            raise IntegrityError(
                f"appended turn {record.turn_id} records payload {record.payload_hash.hex()} "
                f"({record.payload_len} bytes), sent {digest.hex()} ({len(data)} bytes)"
            )
        if isinstance(context, int) and record.context_id != context:
            raise ProtocolError(
                f"appended turn {record.turn_id} is in context {record.context_id}, not {context}"
            )
        return Appended(turn_of(record), appended.deduped)

    return Op(request, finish)


def append_by_hash(
    context: ContextLike,
    payload_hash: HashLike,
    type_tag: int,
    codec: int,
    expected_head: int | None,
) -> Op[Appended]:
    """APPEND_TURN_BY_HASH."""
    digest = parse_hash(payload_hash)
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    request = p.AppendTurnByHash(
        _context(context),
        expected_head,
        _u64(type_tag, "type_tag"),
        _u32(codec, "codec"),
        digest,
    )

    def finish(response: p.Response) -> Appended:
        appended = _expect(response, p.AppendedResponse)
        if appended.turn.payload_hash != digest:
            raise IntegrityError(
                f"appended turn {appended.turn.turn_id} records payload "
                f"{appended.turn.payload_hash.hex()}, asked for {digest.hex()}"
            )
        return Appended(turn_of(appended.turn), appended.deduped)

    return Op(request, finish)


def get_turn(turn_id: int) -> Op[Turn]:
    """GET_TURN."""

    def finish(response: p.Response) -> Turn:
        return turn_of(_expect(response, p.TurnResponse).turn)

    return Op(p.GetTurn(_u64(turn_id, "turn_id")), finish)


def last(context: ContextLike, limit: int, payloads: bool, accept_zstd: bool) -> Op[Page]:
    """GET_LAST."""
    request = p.GetLast(
        _context(context),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def before(
    context: ContextLike, before_turn_id: int, limit: int, payloads: bool, accept_zstd: bool
) -> Op[Page]:
    """GET_BEFORE."""
    request = p.GetBefore(
        _context(context),
        _u64(before_turn_id, "before_turn_id"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def range_by_depth(
    context: ContextLike, from_depth: int, limit: int, payloads: bool, accept_zstd: bool
) -> Op[Page]:
    """GET_RANGE_BY_DEPTH."""
    request = p.GetRangeByDepth(
        _context(context),
        _u32(from_depth, "from_depth"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def chain(turn_id: int, from_depth: int, limit: int, payloads: bool, accept_zstd: bool) -> Op[Page]:
    """GET_CHAIN."""
    request = p.GetChain(
        _u64(turn_id, "turn_id"),
        _u32(from_depth, "from_depth"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def get_blob(payload_hash: HashLike, accept_zstd: bool) -> Op[bytes]:
    """GET_BLOB; the bytes are checked against the hash (see :func:`payload_bytes`)."""
    digest = parse_hash(payload_hash)

    def finish(response: p.Response) -> bytes:
        payload = _expect(response, p.BlobResponse).payload
        return payload_bytes(payload, digest, None, accept_zstd, f"blob {digest.hex()}")

    return Op(p.GetBlob(digest, p.READ_ACCEPT_ZSTD if accept_zstd else 0), finish)


def has_blobs_op(hashes: Sequence[bytes]) -> Op[list[bool]]:
    """HAS_BLOBS of already parsed hashes; the answer must have one flag per hash."""
    request = p.HasBlobs(tuple(hashes))

    def finish(response: p.Response) -> list[bool]:
        present = _expect(response, p.HasBlobsResponse).present
        if len(present) != len(hashes):
            raise ProtocolError(
                f"HAS_BLOBS of {len(hashes)} hashes was answered with {len(present)} flags"
            )
        return list(present)

    return Op(request, finish)


def _stats_of(s: p.StatsResponse, gc: p.StatsExResponse | None = None) -> Stats:
    return Stats(
        turns=s.turns,
        contexts=s.contexts,
        blobs=s.blobs,
        logical_bytes=s.logical_bytes,
        unique_bytes=s.unique_bytes,
        stored_bytes=s.stored_bytes,
        dedup_hits=s.dedup_hits,
        connections=s.connections,
        requests_total=s.requests_total,
        errors_total=s.errors_total,
        uptime_ms=s.uptime_ms,
        read_only=s.read_only,
        live_bytes=None if gc is None else gc.live_bytes,
        dead_bytes=None if gc is None else gc.dead_bytes,
        gc_runs=None if gc is None else gc.gc_runs,
        bytes_reclaimed_total=None if gc is None else gc.bytes_reclaimed_total,
    )


def stats_op() -> Op[Stats]:
    """STATS: the garbage collector's fields are None."""
    return Op(p.Stats(), lambda response: _stats_of(_expect(response, p.StatsResponse)))


def stats_ex_op() -> Op[Stats]:
    """STATS_EX (version 2): STATS' fields and the garbage collector's."""

    def finish(response: p.Response) -> Stats:
        answer = _expect(response, p.StatsExResponse)
        return _stats_of(answer.stats, answer)

    return Op(p.StatsEx(), finish)


def stats() -> Plan[Stats]:
    """STATS_EX on a version-2 connection, else STATS; a version-2 server older than STATS_EX
    answers it UNKNOWN_MESSAGE, and then STATS is asked (its garbage collector's fields are
    None)."""
    info: ServerInfo = yield SERVER_INFO
    if info.version >= 2:
        try:
            extended: Stats = yield stats_ex_op()
            return extended
        except UnknownMessage:
            pass
    plain: Stats = yield stats_op()
    return plain


def replication_stats() -> Op[ReplicationStats]:
    """REPLICATION_STATS (version 3): this server's side of its replica."""

    def finish(response: p.Response) -> ReplicationStats:
        r = _expect(response, p.ReplicationStatsResponse)
        return ReplicationStats(
            role=p.REPLICATION_ROLES[r.role],
            state=p.REPLICATION_STATES[r.state],
            reason=r.reason,
            promoting=r.promoting,
            target=r.target,
            primary=r.primary,
            epoch=r.epoch,
            generation=r.generation,
            seq=r.seq,
            records=r.records,
            records_unix_ms=r.records_unix_ms,
            lag_ms=r.lag_ms,
            lag_bytes=r.lag_bytes,
            objects_total=r.objects_total,
            bytes_total=r.bytes_total,
            last_success_unix_ms=r.last_success_unix_ms,
            backlog_objects=r.backlog_objects,
            segment_bytes_max=r.segment_bytes_max,
            failures=dict(r.failures),
        )

    return Op(p.ReplicationStats(), finish)


def role() -> Op[Role]:
    """ROLE (version 4, decision 0031): what this server is in its replica's failover now."""

    def finish(response: p.Response) -> Role:
        r = _expect(response, p.RoleResponse)
        return Role(
            role=p.SERVER_ROLES[r.role],
            accepts_writes=r.accepts_writes,
            ack_after=p.ACK_AFTER_NAMES[r.ack_after],
            epoch=r.epoch,
            lease_ms=r.lease_ms,
            lease_age_ms=r.lease_age_ms,
            ack_open_ms=r.ack_open_ms,
            failovers=r.failovers,
            last_failover_ms=r.last_failover_ms,
            remote_waiting=r.remote_waiting,
            remote_acks_total=r.remote_acks_total,
            remote_unconfirmed_total=r.remote_unconfirmed_total,
            remote_ack_us_p50=r.remote_ack_us_p50,
            remote_ack_us_p99=r.remote_ack_us_p99,
            primary=r.primary,
            holder=r.holder,
        )

    return Op(p.Role(), finish)


def _tenant_of(record: p.TenantRecord) -> Tenant:
    def quota(value: int) -> int | None:
        return value or None

    return Tenant(
        name=record.name,
        tenant_id=record.tenant_id or None,
        in_tenants_file=bool(record.flags & p.TENANT_IN_FILE),
        registered=bool(record.flags & p.TENANT_REGISTERED),
        deleted=bool(record.flags & p.TENANT_DELETED),
        rights=tuple(
            right for bit, right in enumerate(p.TENANT_RIGHTS) if record.rights & (1 << bit)
        ),
        contexts=record.contexts,
        streams_open=record.streams_open,
        stored_bytes=record.stored_bytes,
        connections=record.connections,
        quota_bytes=quota(record.quota_bytes),
        quota_contexts=quota(record.quota_contexts),
        quota_appends_per_s=quota(record.quota_appends_per_s),
        quota_connections=quota(record.quota_connections),
        quota_streams=quota(record.quota_streams),
        quota_refusals=record.refusals,
    )


def tenant_page(after: str, limit: int) -> Op[p.TenantsListedResponse]:
    """TENANT_LIST (version 5, decision 0032 §8; a tenant's token: its own entry only): one page of
    at most ``limit`` tenants after ``after``, checked: no more than asked, names ascending after
    ``after``, a ``next`` after them (str order is UTF-8's byte order, the server's)."""

    def finish(response: p.Response) -> p.TenantsListedResponse:
        page = _expect(response, p.TenantsListedResponse)
        if len(page.tenants) > limit:
            raise ProtocolError(f"TENANT_LIST with limit {limit} answered {len(page.tenants)}")
        previous = after
        for tenant in page.tenants:
            if tenant.name <= previous:
                raise ProtocolError(
                    f"TENANT_LIST after {after!r} answered tenant {tenant.name!r} after "
                    f"{previous!r}: not in name order"
                )
            previous = tenant.name
        if page.next and (page.next < previous or page.next == after):
            raise ProtocolError(
                f"TENANT_LIST after {after!r} answered next {page.next!r}, which does not advance"
            )
        return page

    return Op(p.TenantList(after, limit), finish)


def tenants(page_size: int = p.TENANT_LIST_LIMIT) -> Plan[list[Tenant]]:
    """Every tenant, in name order: TENANT_LIST pages, each after the previous page's
    ``next``, until one says it is the last (an empty ``next``)."""
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise ValueError(f"page_size is an int, not {page_size!r}")
    if not 1 <= page_size <= p.TENANT_LIST_LIMIT:
        raise ValueError(f"page_size is 1 to {p.TENANT_LIST_LIMIT}, not {page_size}")
    listed: list[Tenant] = []
    after = ""
    while True:
        page: p.TenantsListedResponse = yield tenant_page(after, page_size)
        listed.extend(_tenant_of(record) for record in page.tenants)
        if not page.next:
            return listed
        after = page.next


def _check_tenant_name(name: str) -> None:
    """A tenant's name, as TENANT_DELETE and TENANT_ROTATE_KEY take it: 1 to 64 bytes of
    UTF-8 (TypeError, ValueError otherwise)."""
    if not isinstance(name, str):
        raise TypeError(f"a tenant name is a str, not {name!r}")
    if not name:
        raise ValueError("a tenant name must not be empty")
    if len(name.encode("utf-8")) > p.TENANT_NAME_BYTES_MAX:
        raise ValueError(f"a tenant name is at most {p.TENANT_NAME_BYTES_MAX} bytes of UTF-8")


def delete_tenant(name: str) -> Op[TenantDeleted]:
    """TENANT_DELETE (version 5, decision 0032 §6; the operator's): the tenant ``name`` (1 to
    64 bytes of UTF-8) deleted — its keys destroyed, its contexts deleted, its tokens refused;
    idempotent, a second time answers as the first."""
    _check_tenant_name(name)

    def finish(response: p.Response) -> TenantDeleted:
        deleted = _expect(response, p.TenantDeletedResponse)
        return TenantDeleted(
            tenant_id=deleted.tenant_id,
            keys_destroyed=bool(deleted.flags & p.TENANT_KEYS_DESTROYED),
            replica_updated=bool(deleted.flags & p.TENANT_REPLICA_UPDATED),
        )

    return Op(p.TenantDelete(name), finish)


def rotate_tenant_key(name: str) -> Op[TenantKeyRotated]:
    """TENANT_ROTATE_KEY (version 5, decision 0032 §7; the operator's): a new version of the
    data key of the tenant ``name`` (1 to 64 bytes of UTF-8; ``"operator"``: the operator's
    own); not idempotent, each call makes another version."""
    _check_tenant_name(name)

    def finish(response: p.Response) -> TenantKeyRotated:
        rotated = _expect(response, p.TenantKeyRotatedResponse)
        return TenantKeyRotated(tenant_id=rotated.tenant_id, key_version=rotated.key_version)

    return Op(p.TenantRotateKey(name), finish)


def gc() -> Op[GcReport]:
    """GC (version 2): a garbage collection now."""

    def finish(response: p.Response) -> GcReport:
        answer = _expect(response, p.GcDoneResponse)
        return GcReport(
            turns_dead=answer.turns_dead,
            blobs_dead=answer.blobs_dead,
            bytes_reclaimed=answer.bytes_reclaimed,
            packs_compacted=answer.packs_compacted,
            live_bytes=answer.live_bytes,
            dead_bytes=answer.dead_bytes,
            duration_ms=answer.duration_ms,
        )

    return Op(p.Gc(), finish)


def patch_turn(turn_id: int, payload: bytes | bytearray | memoryview) -> Op[Patched]:
    """PATCH_TURN (version 2): the answer must name the turn and the payload's hash and
    length."""
    data = bytes(payload)
    digest = blake3.blake3(data).digest()
    turn = _u64(turn_id, "turn_id")

    def finish(response: p.Response) -> Patched:
        answer = _expect(response, p.PatchedResponse)
        if (answer.turn_id, answer.payload_hash, answer.payload_len) != (turn, digest, len(data)):
            raise ProtocolError(
                f"PATCH_TURN of turn {turn} ({len(data)} bytes, {digest.hex()}) was answered "
                f"for turn {answer.turn_id} ({answer.payload_len} bytes, "
                f"{answer.payload_hash.hex()})"
            )
        return Patched(answer.turn_id, answer.overlay_seq, answer.payload_hash, answer.payload_len)

    return Op(p.PatchTurn(turn, data), finish)


def redact_turn(turn_id: int) -> Op[Redacted]:
    """REDACT_TURN (version 2): the answer must name the turn."""
    turn = _u64(turn_id, "turn_id")

    def finish(response: p.Response) -> Redacted:
        answer = _expect(response, p.RedactedResponse)
        if answer.turn_id != turn:
            raise ProtocolError(f"REDACT_TURN of turn {turn} was answered for {answer.turn_id}")
        return Redacted(answer.turn_id, answer.overlay_seq)

    return Op(p.RedactTurn(turn), finish)


def purge_blob(payload_hash: HashLike) -> Op[Purged]:
    """PURGE_BLOB (version 2): the answer must name the hash."""
    digest = parse_hash(payload_hash)

    def finish(response: p.Response) -> Purged:
        answer = _expect(response, p.PurgedResponse)
        if answer.payload_hash != digest:
            raise ProtocolError(
                f"PURGE_BLOB of {digest.hex()} was answered for {answer.payload_hash.hex()}"
            )
        return Purged(answer.payload_hash, answer.turns_redacted, answer.overlay_seq)

    return Op(p.PurgeBlob(digest), finish)


ChunkBytes = bytes | bytearray | memoryview
"""The bytes of one chunk ``put_chunked`` sends."""


def put_chunked(
    payload_hash: HashLike,
    chunks: Sequence[tuple[HashLike, int]],
    sent: Iterable[tuple[int, ChunkBytes]] | Mapping[int, ChunkBytes] = (),
    base: tuple[HashLike, int] | None = None,
) -> Op[ChunkedStored]:
    """PUT_CHUNKED (version 2): the payload ``payload_hash`` made of ``chunks`` (each
    ``(hash, length)``, in order), with the bytes of the chunks in ``sent`` (``(index,
    bytes)`` pairs or a mapping, in any order). The codec's limits are checked here, before
    anything is sent (``ValueError``: the server would close the connection for them); the
    hashes are the server's to check (HASH_MISMATCH). With ``base`` (``(hash, kept)``: a
    stored chunked payload and how many of its first chunks come first), ``chunks`` and the
    indexes of ``sent`` follow the base's kept chunks: a grown state names the previous one
    and lists only what comes after their shared prefix. The answer must name the payload's
    hash (and, without a base, the sum of the chunks' lengths)."""
    digest = parse_hash(payload_hash)
    chunk_base = None
    if base is not None:
        _u32(base[1], "base kept")
        if base[1] < 1:
            raise ValueError("a base keeps 1 or more of its chunks")
        chunk_base = p.ChunkBase(parse_hash(base[0]), base[1])
    kept = 0 if chunk_base is None else chunk_base.kept
    if not 1 <= len(chunks) <= p.CHUNKS_PER_PAYLOAD_MAX - kept:
        raise ValueError(f"a payload is 1 to {p.CHUNKS_PER_PAYLOAD_MAX} chunks, not {len(chunks)}")
    entries = []
    for position, (chunk_hash, length) in enumerate(chunks):
        _u32(length, f"chunk {position}'s length")
        if not 1 <= length <= p.CHUNK_BYTES_MAX:
            raise ValueError(
                f"chunk {position} is {length} bytes; a chunk is 1 to {p.CHUNK_BYTES_MAX}"
            )
        entries.append(p.ChunkRecord(parse_hash(chunk_hash), length))
    pairs = sent.items() if isinstance(sent, Mapping) else sent
    given: dict[int, bytes] = {}
    for index, data in pairs:
        _u32(index, "sent index")
        if index >= len(entries):
            raise ValueError(f"sent index {index} is past the {len(entries)} chunks")
        if index in given:
            raise ValueError(f"chunk {index} is sent twice")
        raw = bytes(data)
        if len(raw) != entries[index].len:
            raise ValueError(
                f"chunk {index} is sent with {len(raw)} bytes; its entry says {entries[index].len}"
            )
        given[index] = raw
    records = tuple(p.SentChunkRecord(index, given[index]) for index in sorted(given))
    total = sum(entry.len for entry in entries)

    def finish(response: p.Response) -> ChunkedStored:
        answer = _expect(response, p.ChunkedStoredResponse)
        length = answer.payload_len if chunk_base is not None else total
        if (answer.payload_hash, answer.payload_len) != (digest, length):
            raise ProtocolError(
                f"PUT_CHUNKED of {digest.hex()} ({total} bytes) was answered for "
                f"{answer.payload_hash.hex()} ({answer.payload_len} bytes)"
            )
        return ChunkedStored(answer.payload_hash, answer.payload_len, answer.already_stored)

    return Op(p.PutChunked(digest, tuple(entries), records, chunk_base), finish)


def _overlay_turn(turn: T, state: p.OverlayRecord) -> T:
    if not isinstance(turn, Turn):
        raise TypeError(f"not a turn: {turn!r}")
    if state.redacted and (turn.payload_len != 0 or turn.payload_hash != EMPTY_HASH):
        raise ProtocolError(
            f"turn {turn.turn_id} is redacted but its TURN names {turn.payload_len} bytes"
        )
    changed: Any = dataclasses.replace(turn, redacted=state.redacted, overlay_seq=state.overlay_seq)
    return cast(T, changed)


def _with_overlays(result: T, states: Sequence[p.OverlayRecord]) -> T:
    """``result`` (a turn, or a page of them) with each turn's overlay state, in order."""
    if isinstance(result, Turn):
        return _overlay_turn(result, states[0])
    turns = getattr(result, "turns", None)
    if not isinstance(turns, list) or len(turns) != len(states):
        raise ProtocolError("an overlaid answer without one overlay state per turn")
    changed: Any = dataclasses.replace(
        cast(Any, result),
        turns=[_overlay_turn(turn, state) for turn, state in zip(turns, states, strict=True)],
    )
    return cast(T, changed)


def overlaid(op: Op[T], as_of: int) -> Op[T]:
    """``op`` (a read returning turns) in the overlay view ``as_of`` (0: the latest; version
    2): the read is sent with the frame flag OVERLAYS, each turn of the result gets its
    ``redacted`` and ``overlay_seq``."""
    view = _u64(as_of, "as_of")

    def finish(response: p.Response) -> T:
        answer = _expect(response, p.OverlaidResponse)
        return _with_overlays(op.finish(answer.response), answer.overlays)

    return Op(p.AsOf(op.request, view), finish)


def view(op: Op[T], as_of: int | None) -> Op[T]:
    """``op`` as is when ``as_of`` is None, else :func:`overlaid`."""
    return op if as_of is None else overlaid(op, as_of)


_ACK_AFTER_OF: dict[str, int] = {"local": p.ACK_AFTER_LOCAL, "remote": p.ACK_AFTER_REMOTE}


def ack_after_of(durability: Durability | None) -> int | None:
    """The frame flag ``ACK_AFTER`` a ``durability=`` asks for (None: none, the server's
    default); anything but ``"local"``, ``"remote"`` or None is a ValueError."""
    if durability is None:
        return None
    after = _ACK_AFTER_OF.get(durability) if isinstance(durability, str) else None
    if after is None:
        raise ValueError(f"durability is 'local', 'remote' or None, not {durability!r}")
    return after


def _acked(op: Op[T], after: int) -> Op[T]:
    """``op`` with ``ACK_AFTER`` when it is a write that takes it (any other: as it is)."""
    request = op.request
    if isinstance(request, (p.AckAfter, p.AsOf)) or request.msg_type not in p.TAKES_ACK_AFTER:
        return op
    return Op(p.AckAfter(request, after), op.finish)


def _acked_plan(plan: Plan[T], after: int) -> Plan[T]:
    """``plan`` whose writes that take ``ACK_AFTER`` carry it (the chunks of a chunked append
    do not: only its append, whose cut holds them too)."""
    result: Any = None
    error: CtxstoreError | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(result)
        except StopIteration as stop:
            return cast(T, stop.value)
        result, error = None, None
        if isinstance(step, Op):
            step = _acked(step, after)
        elif isinstance(step, Many):
            step = Many([_acked(op, after) for op in step.ops])
        try:
            result = yield step
        except CtxstoreError as failed:  # the drivers throw in only the client's errors
            error = failed


def durable_op(op: Op[T], durability: Durability | None) -> Op[T]:
    """:func:`durable` of one op."""
    after = ack_after_of(durability)
    return op if after is None else _acked(op, after)


def _version_4_first(op: Op[T], what: str, durability: Durability) -> Plan[T]:
    info: ServerInfo = yield SERVER_INFO
    if info.version < p.AckAfter.MIN_VERSION:
        raise NotSupported(
            f"{what} with durability={durability!r} needs protocol version "
            f"{p.AckAfter.MIN_VERSION}; the server {info.server_name!r} negotiated version "
            f"{info.version} (nothing was sent)"
        )
    result: T = yield op
    return result


def durable_later(op: Op[T], what: str, durability: Durability | None) -> Op[T] | Plan[T]:
    """``op`` (one that is not a write of ``ACK_AFTER`` itself, as STREAM_OPEN) refused
    before sending, on a connection below version 4, when a write after it is to carry
    ``durability`` (a stream's seal): nothing is begun that could not end as asked."""
    if ack_after_of(durability) is None:
        return op
    assert durability is not None
    return _version_4_first(op, what, durability)


def durable(step: Op[T] | Plan[T], durability: Durability | None) -> Op[T] | Plan[T]:
    """``step`` (a write's op or plan) acknowledged as ``durability`` asks (decision 0031):
    its writes of :data:`~ctxstore._protocol.TAKES_ACK_AFTER` sent with the frame flag
    ``ACK_AFTER`` (version 4: refused before sending on an older connection); as it is for
    None."""
    after = ack_after_of(durability)
    if after is None:
        return step
    if isinstance(step, Op):
        return _acked(step, after)
    return _acked_plan(step, after)


def raw(request: p.Request) -> Op[p.Response]:
    """Any request; the response as decoded."""
    return Op(request, lambda response: response)


def has_blobs(hashes: Sequence[HashLike]) -> Plan[list[bool]]:
    """HAS_BLOBS, split at the server's ``has_blobs_max`` into pipelined requests."""
    parsed = [parse_hash(h) for h in hashes]
    if not parsed:
        return []
    info: ServerInfo = yield SERVER_INFO
    size = max(1, info.has_blobs_max)
    groups = [parsed[i : i + size] for i in range(0, len(parsed), size)]
    answers: list[list[bool]] = yield Many([has_blobs_op(group) for group in groups])
    return [flag for answer in answers for flag in answer]


def replay(
    turn_id: int, payloads: bool, page_size: int | None, accept_zstd: bool
) -> Plan[list[Turn]]:
    """The chain root → ``turn_id`` in GET_CHAIN pages (default size: the server's
    ``read_turns_max``), oldest first, each turn the child of the one before it.

    History a garbage collection took (the turns below a pruned context's floor, once
    collected) is not there: the replay is then the kept turns, from the oldest the server
    still has up to ``turn_id``, as the CLI prints them. The server answers a GET_CHAIN
    window that overlaps collected history from its oldest kept turn, and one whose newest
    turn is collected NOT_FOUND (docs/protocol.md, GET_CHAIN and CTX_PRUNE); the second
    case is told apart from a missing ``turn_id`` by :func:`_oldest_kept_depth`. Should a
    collection take more of the chain while the replay pages, it goes on from what is kept
    and drops what it had read below that (the answer stays one unbroken chain)."""
    size = page_size
    if not size:
        info: ServerInfo = yield SERVER_INFO
        size = info.read_turns_max or 64
    turns: list[Turn] = []
    from_depth = 0
    while True:
        try:
            page: Page = yield chain(turn_id, from_depth, size, payloads, accept_zstd)
        except NotFound:
            # turn_id itself is gone (raised again below), or the window ends in history a
            # collection took: go on from the oldest kept turn.
            kept = yield from _oldest_kept_depth(turn_id, size)
            if kept <= from_depth:
                raise  # the window's turns exist, so the NOT_FOUND was not about them
            turns, from_depth = [], kept
            continue
        if page.turns and turns and page.turns[0].depth > from_depth:
            turns = []  # a collection took the turns read so far
        _check_chain_page(page, turn_id, from_depth, turns[-1] if turns else None)
        turns.extend(page.turns)
        last_depth = page.turns[-1].depth
        if last_depth >= page.tip_depth:
            return turns
        from_depth = last_depth + 1


def _check_chain_page(page: Page, turn_id: int, from_depth: int, previous: Turn | None) -> None:
    """A GET_CHAIN page of a replay must advance (no endless loop on a faulty server): it
    starts at ``from_depth``, or above it only where the history below was collected (then
    it carries no turn before it), each turn is the child of the one before it (``previous``:
    the last turn of the page before), and it ends at or below ``turn_id``'s depth."""
    if not page.turns:
        raise ProtocolError(f"GET_CHAIN of turn {turn_id} returned an empty page before its end")
    first, last = page.turns[0], page.turns[-1]
    if first.depth < from_depth or last.depth < first.depth or last.depth > page.tip_depth:
        raise ProtocolError(
            f"GET_CHAIN of turn {turn_id} from depth {from_depth} returned depths "
            f"{first.depth}..{last.depth} (tip depth {page.tip_depth})"
        )
    chained = [previous, *page.turns] if previous is not None else page.turns
    for older, newer in zip(chained, chained[1:], strict=False):
        if newer.parent_turn_id != older.turn_id or newer.depth != older.depth + 1:
            raise ProtocolError(
                f"GET_CHAIN of turn {turn_id}: turn {newer.turn_id} (depth {newer.depth}) "
                f"does not follow turn {older.turn_id} (depth {older.depth}) on one chain"
            )
    if last.depth == page.tip_depth and last.turn_id != turn_id:
        raise ProtocolError(
            f"GET_CHAIN of turn {turn_id} ended at turn {last.turn_id}, at the tip's depth"
        )


def _oldest_kept_depth(turn_id: int, size: int) -> Plan[int]:
    """The depth of the oldest turn of ``turn_id``'s chain the server still has (0 when
    nothing was collected); NotFound when ``turn_id`` itself is not there. Walks down from
    ``turn_id`` in windows without payloads, each ending at a turn already seen (so its
    newest turn exists), until one starts above where it was asked to: the history below
    it was collected."""
    tip: Turn = yield get_turn(turn_id)
    span = max(2, size)  # a window of one would never get below the turn it ends at
    newest = tip.depth
    while True:
        oldest = max(0, newest - span + 1)
        page: Page = yield chain(turn_id, oldest, newest - oldest + 1, False, False)
        if not page.turns or page.turns[-1].depth != newest:
            raise ProtocolError(
                f"GET_CHAIN of turn {turn_id} from depth {oldest} did not reach depth {newest}"
            )
        first = page.turns[0].depth
        if first > oldest or oldest == 0:
            return first
        newest = oldest


# ----------------------------------------------------------------------------------------------
# Version 2: contexts by name, tags, listing, key-value


def context_info_of(record: p.ContextInfoRecord) -> ContextInfo:
    """A public :class:`ContextInfo` from its wire record."""
    return ContextInfo(
        context_id=record.head.context_id,
        head_turn_id=record.head.head_turn_id,
        head_depth=record.head.head_depth,
        created_at_unix_ms=record.created_at_unix_ms,
        updated_at_unix_ms=record.updated_at_unix_ms,
        name=record.name,
        tags=dict(record.tags),
    )


def _info(response: p.Response) -> ContextInfo:
    return context_info_of(_expect(response, p.ContextInfoResponse).info)


def _check_name(info: ContextInfo, name: str | None, what: str) -> ContextInfo:
    """The context a request named ``name`` must carry it (a pair check of the server)."""
    if name is not None and info.name != name:
        raise ProtocolError(
            f"{what} for the name {name!r} answered context {info.context_id} named {info.name!r}"
        )
    return info


def open_context(
    name: str | None,
    tags: Mapping[str, str] | None,
    base_turn_id: int,
    get_or_create: bool,
) -> Op[Opened]:
    """CTX_OPEN without CLONE."""
    if name is not None and not _strings(name, "name"):
        _empty_name()
    request = p.CtxOpen(
        _u64(base_turn_id, "base_turn_id"), bool(get_or_create), None, name, _tag_pairs(tags)
    )

    def finish(response: p.Response) -> Opened:
        opened = _expect(response, p.OpenedResponse)
        info = _check_name(context_info_of(opened.info), name, "CTX_OPEN")
        return Opened(info, opened.created)

    return Op(request, finish)


def _empty_name() -> NoReturn:
    raise ValueError("a context name must not be empty (pass None for no name)")


def clone_context(
    source: ContextLike, name: str, tags: Mapping[str, str] | None
) -> Op[ContextInfo]:
    """CTX_OPEN with CLONE: a copy of ``source`` (head, tags, key-value entries) named
    ``name``."""
    if not _strings(name, "name"):
        _empty_name()
    request = p.CtxOpen(0, False, _context(source, "source"), name, _tag_pairs(tags))

    def finish(response: p.Response) -> ContextInfo:
        opened = _expect(response, p.OpenedResponse)
        if not opened.created:
            raise ProtocolError("CTX_OPEN (clone) without GET_OR_CREATE answered created = 0")
        return _check_name(context_info_of(opened.info), name, "CTX_OPEN (clone)")

    return Op(request, finish)


def context_info(context: ContextLike) -> Op[ContextInfo]:
    """CTX_SHOW."""
    return Op(p.CtxShow(_context(context)), _info)


def _retention(response: p.Response) -> Retention:
    answer = _expect(response, p.RetentionResponse)
    return Retention(context_info_of(answer.info), answer.floor_depth, answer.ttl_ms or None)


def delete_context(context: ContextLike) -> Op[Retention]:
    """CTX_DELETE: answers the context as it was just before."""
    return Op(p.CtxDelete(_context(context)), _retention)


def prune_context(context: ContextLike, keep: int) -> Op[Retention]:
    """CTX_PRUNE; ``keep`` >= 1 (0 is the server's InvalidArgument: that is a delete)."""
    if not isinstance(keep, int) or isinstance(keep, bool) or not 0 <= keep <= 0xFFFF_FFFF:
        raise ValueError(f"keep must be an integer in 0..=4294967295, not {keep!r}")
    return Op(p.CtxPrune(_context(context), keep), _retention)


def context_ttl(context: ContextLike, ttl_ms: int | None, set_it: bool) -> Op[Retention]:
    """CTX_TTL: with ``set_it`` sets (None clears), else only reads.

    A TTL of 0 is refused rather than sent (decision 0011): the wire's 0 means "no TTL", so a
    caller asking for "expire now" would silently get "never"."""
    value = 0 if ttl_ms is None else ttl_ms
    if set_it:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"ttl_ms must be a positive integer or None, not {ttl_ms!r}")
        if ttl_ms == 0:
            raise ValueError("ttl_ms 0 would mean no time to live: pass None to clear it")
        _u64(value, "ttl_ms")
    return Op(p.CtxTtl(_context(context), set_it, value if set_it else 0), _retention)


def backup(directory: str) -> Op[BackupReport]:
    """BACKUP into ``directory`` (absolute, on the server's host)."""
    if not isinstance(directory, str) or not directory.startswith("/"):
        raise ValueError(
            f"a backup directory is an absolute path on the server's host, not {directory!r}"
        )

    def finish(response: p.Response) -> BackupReport:
        answer = _expect(response, p.BackedUpResponse)
        return BackupReport(
            answer.dir,
            answer.turns,
            answer.blobs,
            answer.total_bytes,
            answer.linked_bytes,
            answer.duration_ms,
        )

    return Op(p.Backup(directory), finish)


def tag_context(
    context: ContextLike,
    set_tags: Mapping[str, str] | None,
    remove: Iterable[str] | str,
    expected_head: int | None,
) -> Op[ContextInfo]:
    """CTX_TAG; checks that the answer carries the tags set and lacks the ones removed."""
    pairs = _tag_pairs(set_tags)
    removed = (remove,) if isinstance(remove, str) else tuple(remove)
    for key in removed:
        _strings(key, "a removed tag key")
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    request = p.CtxTag(_context(context), expected_head, pairs, removed)

    def finish(response: p.Response) -> ContextInfo:
        info = _info(response)
        set_keys = {key for key, _ in pairs}
        wrong = [key for key, value in pairs if key not in removed and info.tags.get(key) != value]
        wrong += [key for key in removed if key not in set_keys and key in info.tags]
        if wrong:
            raise ProtocolError(
                f"CTX_TAG of context {info.context_id} answered tags {info.tags!r}, "
                f"which do not reflect the change of {sorted(wrong)!r}"
            )
        return info

    return Op(request, finish)


def name_context(context: ContextLike, name: str) -> Op[ContextInfo]:
    """CTX_NAME."""
    request = p.CtxName(_context(context), _strings(name, "name"))
    return Op(request, lambda response: _check_name(_info(response), name, "CTX_NAME"))


def list_contexts(
    tags: Mapping[str, str] | None,
    name_prefix: str | None,
    updated_after_unix_ms: int | None,
    updated_before_unix_ms: int | None,
    cursor: int | str | None,
    limit: int,
) -> Op[ContextPage]:
    """CTX_LIST: one page."""
    if name_prefix is not None and not _strings(name_prefix, "name_prefix"):
        raise ValueError("name_prefix must not be empty (pass None for any name)")
    bounds = []
    for bound, what in (
        (updated_after_unix_ms, "updated_after_unix_ms"),
        (updated_before_unix_ms, "updated_before_unix_ms"),
    ):
        if bound is not None and not 0 < _u64(bound, what):
            raise ValueError(f"{what} 0 would mean no bound: pass None")
        bounds.append(bound)
    if cursor is not None:
        if isinstance(cursor, str):
            if not cursor:
                raise ValueError("a name cursor must not be empty")
        else:
            _u64(cursor, "cursor")
    if not 0 < _u32(limit, "limit"):
        raise ValueError("limit must be at least 1")
    request = p.CtxList(_tag_pairs(tags), name_prefix, bounds[0], bounds[1], cursor, limit)

    def finish(response: p.Response) -> ContextPage:
        page = _expect(response, p.ContextListResponse)
        if len(page.contexts) > limit:
            raise ProtocolError(
                f"CTX_LIST with limit {limit} answered {len(page.contexts)} contexts"
            )
        if page.next_cursor is not None and page.next_cursor == cursor:
            raise ProtocolError(f"CTX_LIST after {cursor!r} answered the same cursor")
        contexts = [context_info_of(info) for info in page.contexts]
        return ContextPage(contexts, page.next_cursor)

    return Op(request, finish)


def contexts_paging(
    tags: Mapping[str, str] | None,
    name_prefix: str | None,
    updated_after_unix_ms: int | None,
    updated_before_unix_ms: int | None,
    page_size: int,
) -> Paging[ContextPage, ContextInfo]:
    """Every matching context: CTX_LIST pages, following ``next_cursor``."""

    def page_after(cursor: int | str | None) -> Op[ContextPage]:
        return list_contexts(
            tags, name_prefix, updated_after_unix_ms, updated_before_unix_ms, cursor, page_size
        )

    def follow(page: ContextPage) -> Op[ContextPage] | None:
        return None if page.next_cursor is None else page_after(page.next_cursor)

    return Paging(page_after(None), follow, lambda page: page.contexts)


def _ttl_ms(ttl_ms: int | None, field: str = "ttl_ms") -> int:
    """A key-value TTL as the wire carries it: None is 0 (none); else 1 ms to 100 years."""
    if ttl_ms is None:
        return 0
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
        raise TypeError(f"{field} is an int of milliseconds, not {type(ttl_ms).__name__}")
    if not 0 < ttl_ms <= TTL_MS_MAX:
        raise ValueError(f"{field} is 1 ms to 100 years ({TTL_MS_MAX} ms); got {ttl_ms}")
    return ttl_ms


TTL_MS_MAX = 100 * 365 * 24 * 3600 * 1000
"""The longest time to live the server takes (ctxstore-vocab's ``TTL_MS_MAX``)."""


def kv_put(
    context: ContextLike,
    entries: Mapping[KeyT, bytes | bytearray | memoryview],
    if_absent: bool,
    ttl_ms: int | None = None,
) -> Plan[None]:
    """KV_PUT of every entry in one request (one durable record); nothing for no entries. With
    ``ttl_ms``, KV_PUT_EX (version 3): each entry expires that long after the put."""
    target = _context(context)
    ttl = _ttl_ms(ttl_ms)
    pairs = []
    for key, value in entries.items():
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"a value is bytes, not {type(value).__name__}")
        if len(value) > p.U32_MAX:
            raise ValueError("a value is at most 4 GiB - 1 bytes")
        pairs.append((_key(key), bytes(value)))
    if not pairs:
        return None
    request: p.Request
    if ttl:
        flags = p.KV_PUT_IF_ABSENT if if_absent else 0
        request = p.KvPutEx(target, flags, ttl, tuple(pairs))
    else:
        request = p.KvPut(target, bool(if_absent), tuple(pairs))
    yield Op(request, lambda response: _expect(response, p.DoneResponse))
    return None


def kv_get_op(context: ContextLike, key: KeyLike, accept_zstd: bool) -> Op[bytes]:
    """KV_GET; the value is checked against the hash the server sends with it (see
    :func:`payload_bytes`)."""
    raw_key = _key(key)
    request = p.KvGet(_context(context), raw_key, p.READ_ACCEPT_ZSTD if accept_zstd else 0)

    def finish(response: p.Response) -> bytes:
        value = _expect(response, p.KvValueResponse)
        what = f"value of key {raw_key!r}"
        return payload_bytes(value.payload, value.value_hash, None, accept_zstd, what)

    return Op(request, finish)


def kv_get(context: ContextLike, key: KeyLike, accept_zstd: bool) -> Plan[bytes | None]:
    """KV_GET; a missing key is None. The server answers NOT_FOUND both for a missing key and
    for an unknown context: after NOT_FOUND, CTX_SHOW tells them apart (it raises NotFound for
    an unknown context)."""
    op = kv_get_op(context, key, accept_zstd)
    try:
        value: bytes = yield op
        return value
    except NotFound:
        pass
    yield context_info(context)
    return None


def kv_get_entry_op(
    context: ContextLike, key: KeyLike, accept_zstd: bool, refresh: bool
) -> Op[KvValue]:
    """KV_GET_EX (version 3): the value with its TTL and expiry; with ``refresh`` the TTL
    restarts first. The value is checked against its hash (see :func:`payload_bytes`)."""
    raw_key = _key(key)
    flags = p.KV_READ_REFRESH if refresh else 0
    read_flags = p.READ_ACCEPT_ZSTD if accept_zstd else 0
    request = p.KvGetEx(_context(context), raw_key, read_flags, flags)

    def finish(response: p.Response) -> KvValue:
        answer = _expect(response, p.KvValueExResponse)
        what = f"value of key {raw_key!r}"
        value = payload_bytes(answer.payload, answer.value_hash, None, accept_zstd, what)
        return KvValue(value, answer.value_hash, answer.ttl_ms, answer.expires_at_unix_ms)

    return Op(request, finish)


def kv_get_entry(
    context: ContextLike, key: KeyLike, accept_zstd: bool, refresh: bool
) -> Plan[KvValue | None]:
    """KV_GET_EX; a missing or expired key is None, an unknown context NotFound (as
    :func:`kv_get`)."""
    op = kv_get_entry_op(context, key, accept_zstd, refresh)
    try:
        value: KvValue = yield op
        return value
    except NotFound:
        pass
    yield context_info(context)
    return None


def kv_get_refreshed(
    context: ContextLike, key: KeyLike, accept_zstd: bool, refresh: bool
) -> Plan[bytes | None]:
    """:func:`kv_get`, or with ``refresh`` KV_GET_EX that restarts the entry's TTL."""
    if not refresh:
        return (yield from kv_get(context, key, accept_zstd))
    entry = yield from kv_get_entry(context, key, accept_zstd, True)
    return None if entry is None else entry.value


def kv_get_many_op(
    context: ContextLike, keys: Sequence[bytes], accept_zstd: bool
) -> Op[list[KvValue | None]]:
    """One KV_GET_MANY (version 3) of 1 to 128 keys: their values from one snapshot, in order,
    None for a missing or expired key; fewer than asked when the rest passed the server's
    response budget. Each value is checked against its hash (see :func:`payload_bytes`)."""
    read_flags = p.READ_ACCEPT_ZSTD if accept_zstd else 0
    request = p.KvGetMany(_context(context), read_flags, tuple(keys))

    def finish(response: p.Response) -> list[KvValue | None]:
        answers = _expect(response, p.KvValuesResponse).values
        if not 0 < len(answers) <= len(keys):
            raise ProtocolError(f"KV_GET_MANY of {len(keys)} keys answered {len(answers)}")
        values: list[KvValue | None] = []
        for key, answer in zip(keys, answers, strict=False):
            if answer is None:
                values.append(None)
                continue
            what = f"value of key {key!r}"
            value = payload_bytes(answer.payload, answer.value_hash, None, accept_zstd, what)
            values.append(
                KvValue(value, answer.value_hash, answer.ttl_ms, answer.expires_at_unix_ms)
            )
        return values

    return Op(request, finish)


def kv_get_many(
    context: ContextLike, keys: Iterable[KeyLike], accept_zstd: bool
) -> Plan[list[KvValue | None]]:
    """KV_GET_MANY (version 3) of any number of keys, in ``keys``' order: one request per 128
    keys, and more when their values pass the response budget (each request reads one
    snapshot). An unknown context is NotFound; no keys send nothing."""
    raw_keys = tuple(_key(key) for key in keys)
    values: list[KvValue | None] = []
    while len(values) < len(raw_keys):
        asked = raw_keys[len(values) : len(values) + p.KV_ENTRIES_PER_REQUEST_MAX]
        page: list[KvValue | None] = yield kv_get_many_op(context, asked, accept_zstd)
        values.extend(page)
    return values


def kv_touch(
    context: ContextLike, keys: Iterable[KeyLike] | KeyLike, ttl_ms: int | None
) -> Op[list[KvItem]]:
    """KV_TOUCH (version 3): restarts each key's TTL from now (``ttl_ms``, else each entry's
    own); the live entries among ``keys`` as they are now. 1 to 128 keys."""
    target = _context(context)
    if isinstance(keys, (bytes, bytearray, memoryview, str)):
        keys = [keys]
    raw_keys = tuple(_key(key) for key in keys)
    if not 0 < len(raw_keys) <= p.KV_TOUCH_KEYS_MAX:
        raise ValueError(f"a touch takes 1 to {p.KV_TOUCH_KEYS_MAX} keys; got {len(raw_keys)}")
    request = p.KvTouch(target, _ttl_ms(ttl_ms), raw_keys)

    def finish(response: p.Response) -> list[KvItem]:
        records = _expect(response, p.KvItemsExResponse).items
        if len(records) > len(raw_keys) or any(r.key not in raw_keys for r in records):
            raise ProtocolError(f"KV_TOUCH of {len(raw_keys)} keys answered other entries")
        return [_kv_item(record) for record in records]

    return Op(request, finish)


def _kv_item(record: p.KvItemRecord | p.KvItemExRecord) -> KvItem:
    if isinstance(record, p.KvItemExRecord):
        return KvItem(
            record.key,
            record.value_hash,
            record.value_len,
            record.ttl_ms,
            record.expires_at_unix_ms,
        )
    return KvItem(record.key, record.value_hash, record.value_len)


def kv_delete(context: ContextLike, keys: Iterable[KeyLike] | KeyLike) -> Plan[None]:
    """KV_DELETE of every key in one request; nothing for no keys."""
    target = _context(context)
    if isinstance(keys, (bytes, bytearray, memoryview, str)):
        keys = [keys]
    raw_keys = tuple(_key(key) for key in keys)
    if not raw_keys:
        return None
    request = p.KvDelete(target, raw_keys)
    yield Op(request, lambda response: _expect(response, p.DoneResponse))
    return None


def kv_list(
    context: ContextLike,
    prefix: KeyLike,
    after: KeyLike,
    limit: int,
    refresh: bool = False,
    with_ttl: bool = False,
) -> Op[KvPage]:
    """KV_LIST: one page; checks key order, prefix and cursor (a pair check of the server).
    With ``refresh`` or ``with_ttl``, KV_LIST_EX (version 3): each entry's TTL and expiry,
    and with ``refresh`` each returned entry's TTL restarted."""
    raw_prefix = _key(prefix)
    raw_after = _key(after)
    if not 0 < _u32(limit, "limit"):
        raise ValueError("limit must be at least 1")
    request: p.Request
    if refresh or with_ttl:
        flags = p.KV_READ_REFRESH if refresh else 0
        request = p.KvListEx(_context(context), raw_prefix, raw_after, limit, flags)
    else:
        request = p.KvList(_context(context), raw_prefix, raw_after, limit)

    def finish(response: p.Response) -> KvPage:
        records: tuple[p.KvItemRecord | p.KvItemExRecord, ...]
        if refresh or with_ttl:
            records = _expect(response, p.KvItemsExResponse).items
        else:
            records = _expect(response, p.KvListResponse).items
        if len(records) > limit:
            raise ProtocolError(f"KV_LIST with limit {limit} answered {len(records)} items")
        previous = raw_after
        for record in records:
            if not record.key.startswith(raw_prefix) or (previous and record.key <= previous):
                raise ProtocolError(
                    f"KV_LIST (prefix {raw_prefix!r}, after {raw_after!r}) answered key "
                    f"{record.key!r} out of order or outside the prefix"
                )
            previous = record.key
        items = [_kv_item(r) for r in records]
        next_after = items[-1].key if len(items) == limit else None
        return KvPage(items, next_after)

    return Op(request, finish)


def kv_paging(
    context: ContextLike, prefix: KeyLike, after: KeyLike, page_size: int, with_ttl: bool = False
) -> Paging[KvPage, KvItem]:
    """Every entry under ``prefix``: KV_LIST pages (KV_LIST_EX ``with_ttl``), each after the
    previous page's last key."""

    def page(start: KeyLike) -> Op[KvPage]:
        return kv_list(context, prefix, start, page_size, with_ttl=with_ttl)

    def follow(page_before: KvPage) -> Op[KvPage] | None:
        return None if page_before.next_after is None else page(page_before.next_after)

    return Paging(page(after), follow, lambda listed: listed.items)


# ----------------------------------------------------------------------------------------------
# Version 2: turns for agent frameworks (decision 0009)


def _parent(parent: ParentLike) -> tuple[p.ParentKind, int]:
    if parent is None:
        return p.ParentKind.HEAD, 0
    if parent == "root":
        return p.ParentKind.ROOT, 0
    if isinstance(parent, bool) or not isinstance(parent, int):
        raise TypeError(f'a parent is None, "root" or a TurnID (int), not {parent!r}')
    if not 0 < _u64(parent, "parent"):
        raise ValueError('parent 0 is no turn: pass "root" for a new root')
    return p.ParentKind.TURN, parent


def _turn_key(key: KeyLike | None) -> bytes:
    """A turn key as bytes (b"": none). The layout carries 255 bytes; the server allows 64
    (TooLarge above)."""
    if key is None:
        return b""
    raw = _key(key)
    if not raw:
        raise ValueError("a turn key must not be empty (pass None for no key)")
    if len(raw) > p.TINY_BYTES_MAX:
        raise ValueError(
            f"a turn key of {len(raw)} bytes: the protocol carries at most "
            f"{p.TINY_BYTES_MAX} (the server allows 64)"
        )
    return raw


def _label_pairs(labels: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if labels is None:
        return ()
    return tuple(
        (_strings(key, "a label key"), _strings(value, "a label value"))
        for key, value in labels.items()
    )


def _links(links: Iterable[int] | None) -> tuple[int, ...]:
    if links is None:
        return ()
    return tuple(_u64(link, "a link") for link in links)


@dataclass(frozen=True, slots=True)
class _SentTurn:
    """What was sent for one turn of APPEND_TURNS, to check its answer against."""

    record: p.TurnSpecRecord
    digest: bytes
    payload_len: int | None
    """None for a payload by hash (its length is the stored blob's)."""


COMPRESS_BYTES_MIN = 64
"""Payloads shorter than this travel as they are: a frame's own overhead eats any saving (the
Rust client's ``COMPRESS_BYTES_MIN``, the engine's ``blob/codec.rs`` line)."""
ZSTD_PAYLOADS_SINCE_VERSION = 3
"""The protocol version that has TURN_SPEC flag ZSTD (decision 0029)."""
DEFAULT_COMPRESS_LEVEL = 1
"""The zstd level a client compresses payloads at by default (the Rust client's)."""
_COMPRESSORS = threading.local()


@dataclass(frozen=True, slots=True)
class Compression:
    """How payloads are compressed on a connection: the zstd ``level``, and the largest
    payload worth it (the server's ``blob_bytes_max``: a larger one is refused whatever way
    it travels, and goes raw so that the refusal is the one it always was)."""

    level: int
    payload_bytes_max: int


def compressed(payload: bytes, compression: Compression) -> bytes | None:
    """``payload`` as a zstd frame (its content size in the header, no checksum: the BLAKE3
    sent with it is the check) at the compression's level, when that is smaller; None
    otherwise, and for payloads under :data:`COMPRESS_BYTES_MIN` or over its limit."""
    if not COMPRESS_BYTES_MIN <= len(payload) <= compression.payload_bytes_max:
        return None
    level = compression.level
    # A compressor per thread and level: zstd's context is reused, and a ZstdCompressor is not
    # safe to share between threads.
    kept: tuple[int, zstandard.ZstdCompressor] | None = getattr(_COMPRESSORS, "kept", None)
    if kept is None or kept[0] != level:
        kept = (level, zstandard.ZstdCompressor(level=level, write_content_size=True))
        _COMPRESSORS.kept = kept
    frame = kept[1].compress(payload)
    return frame if len(frame) < len(payload) else None


def check_compress_level(level: int | None) -> int | None:
    """``level`` if it is None (no compression) or a zstd level, else ValueError."""
    if level is None:
        return None
    if isinstance(level, bool) or not isinstance(level, int):
        raise ValueError(f"compress_level is None or a zstd level (int), not {level!r}")
    low, high = -(1 << 17), zstandard.MAX_COMPRESSION_LEVEL
    if not low <= level <= high:
        raise ValueError(f"compress_level is {low}..={high} or None, not {level}")
    return level


IDEMPOTENCY: tuple[Idempotency, ...] = ("off", "auto")
AUTO_KEY_PREFIX = "ctxstore-auto:"
"""The prefix of the keys ``idempotency="auto"`` makes (the Rust client's
``Idempotency::AUTO_KEY_PREFIX``)."""
KEYS_SINCE_VERSION = 2
"""The protocol version whose APPEND_TURNS carries a turn's key (decision 0009)."""


def check_idempotency(value: object) -> Idempotency:
    """``value`` if it is one of :data:`IDEMPOTENCY`, else ValueError."""
    for known in IDEMPOTENCY:
        if isinstance(value, str) and value == known:
            return known
    raise ValueError(f"idempotency is {' or '.join(map(repr, IDEMPOTENCY))}, not {value!r}")


def auto_key() -> bytes:
    """A new key, unique across processes and calls: :data:`AUTO_KEY_PREFIX` and 32 hex digits
    of 128 random bits."""
    return (AUTO_KEY_PREFIX + secrets.token_hex(16)).encode("ascii")


def auto_keyed(specs: list[TurnSpec], idempotency: Idempotency) -> Plan[list[TurnSpec]]:
    """``specs`` with a fresh key (:func:`auto_key`) on each turn without one, when
    ``idempotency`` is ``"auto"`` and the connection carries keys (version 2; no round trip:
    what HELLO told); else as they are. Made once, here, before the request is built: every
    resend of that request after a failover carries the same keys."""
    if idempotency != "auto" or all(
        not isinstance(spec, TurnSpec) or spec.key is not None for spec in specs
    ):
        return specs
    info: ServerInfo = yield SERVER_INFO
    if info.version < KEYS_SINCE_VERSION:
        return specs
    return [
        dataclasses.replace(spec, key=auto_key())
        if isinstance(spec, TurnSpec) and spec.key is None
        else spec
        for spec in specs
    ]


def _turn_spec(spec: TurnSpec, compression: Compression | None = None) -> _SentTurn:
    if not isinstance(spec, TurnSpec):
        raise TypeError(f"append_turns takes TurnSpec values, not {type(spec).__name__}")
    if (spec.payload is None) == (spec.payload_hash is None):
        raise ValueError("a TurnSpec has a payload or a payload_hash (exactly one)")
    kind, parent = _parent(spec.parent)
    extras = p.ExtrasRecord(_turn_key(spec.key), _label_pairs(spec.labels), _links(spec.links))
    if spec.payload_hash is not None:
        digest = parse_hash(spec.payload_hash)
        data, by_hash, length = digest, True, None
    else:
        assert spec.payload is not None
        if not isinstance(spec.payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"a payload is bytes, not {type(spec.payload).__name__}")
        data = bytes(spec.payload)
        if len(data) > p.U32_MAX:
            raise ValueError("a payload is at most 4 GiB - 1 bytes")
        digest, by_hash, length = blake3.blake3(data).digest(), False, len(data)
    frame = None if by_hash or compression is None else compressed(data, compression)
    record = p.TurnSpecRecord(
        kind,
        parent,
        _u64(spec.type_tag, "type_tag"),
        _u32(spec.codec, "codec"),
        bool(spec.summary),
        extras,
        data if frame is None else frame,
        by_hash,
        None if frame is None else digest,
        0 if frame is None else len(data),
    )
    return _SentTurn(record, digest, length)


def _check_appended(
    context: ContextLike,
    sent: _SentTurn,
    answer: p.AppendedTurnRecord,
    head_before: int | None,
) -> None:
    """The pair checks of one appended turn against its spec; ``head_before`` is the head it
    hangs from if its parent is the head and that is known (the turn before it in the call,
    or the expected head), else None."""
    record = answer.turn
    what = f"APPEND_TURNS: turn {record.turn_id}"
    if isinstance(context, int) and record.context_id != context and not answer.existing:
        raise ProtocolError(f"{what} is in context {record.context_id}, not {context}")
    if answer.existing:
        if not sent.record.extras.key:
            raise ProtocolError(f"{what} is answered as existing, but it was sent without a key")
        return  # the earlier turn of that key: its payload and parent are its own
    if record.payload_hash != sent.digest or (
        sent.payload_len is not None and record.payload_len != sent.payload_len
    ):
        raise IntegrityError(
            f"{what} records payload {record.payload_hash.hex()} ({record.payload_len} bytes), "
            f"sent {sent.digest.hex()} ({sent.payload_len} bytes)"
        )
    if bool(record.flags & p.TURN_SUMMARY) != sent.record.summary:
        raise ProtocolError(f"{what}: its SUMMARY flag is not what was asked")
    spec = sent.record
    if spec.parent_kind == p.ParentKind.ROOT:
        expected_parent: int | None = 0
    elif spec.parent_kind == p.ParentKind.TURN:
        expected_parent = spec.parent_turn_id
    else:
        expected_parent = head_before
    if expected_parent is not None and record.parent_turn_id != expected_parent:
        raise ProtocolError(
            f"{what} hangs from turn {record.parent_turn_id}, asked {expected_parent}"
        )
    if expected_parent == 0 and record.depth != 0:
        raise ProtocolError(f"{what} is a root at depth {record.depth}")


def append_turns(
    context: ContextLike,
    specs: Iterable[TurnSpec],
    expected_head: int | None,
    compression: Compression | None = None,
) -> Op[list[Appended]]:
    """APPEND_TURNS: one or more turns, all or none; each answer is checked against its spec
    (payload hash and length, SUMMARY, the parent asked for, the context). ``compression``
    (a version-3 connection's, see :func:`compression_for`): payloads zstd shrinks go as
    their frames (TURN_SPEC flag ZSTD), checked by the server and stored as they came."""
    target = _context(context)
    sent = _sent_turns(specs, expected_head, compression)
    request = p.AppendTurns(target, expected_head, tuple(turn.record for turn in sent))
    return Op(request, _appended_checked(target, sent, expected_head, request.NAME))


def _sent_turns(
    specs: Iterable[TurnSpec], expected_head: int | None, compression: Compression | None
) -> list[_SentTurn]:
    """The turns of an APPEND_TURNS or APPEND_TURNS_VECTORS as sent (1 or more), with what
    their answers are checked against; ``expected_head`` checked too."""
    sent = [_turn_spec(spec, compression) for spec in specs]
    if not sent:
        raise ValueError("append_turns needs at least one TurnSpec")
    if len(sent) > p.U16_MAX:
        raise ValueError(f"{len(sent)} turns; the protocol carries at most {p.U16_MAX}")
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    return sent


def _appended_checked(
    target: ContextLike, sent: list[_SentTurn], expected_head: int | None, name: str
) -> Callable[[p.Response], list[Appended]]:
    """The finish of the append ``name`` of ``sent``: APPENDED_TURNS, one answer per turn,
    each checked against its spec (:func:`_check_appended`)."""

    def finish(response: p.Response) -> list[Appended]:
        answers = _expect(response, p.AppendedTurnsResponse).turns
        if len(answers) != len(sent):
            raise ProtocolError(f"{name} of {len(sent)} turns was answered with {len(answers)}")
        # The head a turn hangs from when its parent is the head: the expected head for the
        # first, then the turn before it when that one was written (after an existing turn
        # the answer does not tell: not checked).
        head: int | None = expected_head
        for turn, answer in zip(sent, answers, strict=True):
            _check_appended(target, turn, answer, head)
            head = None if answer.existing else answer.turn.turn_id
        return [Appended(turn_of(a.turn), a.deduped, a.existing) for a in answers]

    return finish


def compression_for(compress_level: int | None) -> Plan[Compression | None]:
    """How payloads are compressed on the connection now: at ``compress_level`` on a
    version-3 connection, else not (no round trip: what HELLO told)."""
    if compress_level is None:
        return None
    info: ServerInfo = yield SERVER_INFO
    if info.version < ZSTD_PAYLOADS_SINCE_VERSION:
        return None
    return Compression(compress_level, info.blob_bytes_max)


def append_turns_compressed(
    context: ContextLike,
    specs: Iterable[TurnSpec],
    expected_head: int | None,
    compress_level: int | None,
    idempotency: Idempotency = "off",
) -> Plan[list[Appended]]:
    """:func:`append_turns`, compressing payloads when the connection has the ZSTD flag; each
    turn without a key given one with ``idempotency="auto"`` (:func:`auto_keyed`)."""
    specs = list(specs)  # read once, before the connection is asked for its version
    specs = yield from auto_keyed(specs, idempotency)
    compression = yield from compression_for(compress_level)
    appended: list[Appended] = yield append_turns(context, specs, expected_head, compression)
    return appended


def append_spec_compressed(
    context: ContextLike,
    spec: TurnSpec,
    expected_head: int | None,
    compress_level: int | None,
    idempotency: Idempotency = "off",
) -> Plan[Appended]:
    """:func:`append_spec`; on a version-3 connection a payload zstd shrinks goes as its frame
    in a one-turn APPEND_TURNS (APPEND_TURN has no room for one; the answer is the same). A
    turn without a key gets one with ``idempotency="auto"`` (:func:`auto_keyed`)."""
    (spec,) = yield from auto_keyed([spec], idempotency)
    compression = yield from compression_for(compress_level)
    if compression is not None and spec.payload is not None and spec.payload_hash is None:
        many = append_turns(context, [spec], expected_head, compression)
        request = many.request
        assert isinstance(request, p.AppendTurns)
        if request.turns[0].zstd_hash is not None:
            one: Appended = yield Op(request, lambda response: many.finish(response)[0])
            return one
    appended: Appended = yield append_spec(context, spec, expected_head)
    return appended


def append_spec_keyed(
    context: ContextLike, spec: TurnSpec, expected_head: int | None, idempotency: Idempotency
) -> Plan[Appended]:
    """:func:`append_spec`, the turn given a key with ``idempotency="auto"``
    (:func:`auto_keyed`)."""
    (spec,) = yield from auto_keyed([spec], idempotency)
    appended: Appended = yield append_spec(context, spec, expected_head)
    return appended


def append_spec(context: ContextLike, spec: TurnSpec, expected_head: int | None) -> Op[Appended]:
    """One turn: APPEND_TURN or APPEND_TURN_BY_HASH (version 1) when it asks for nothing more,
    else APPEND_TURNS of one turn (a parent, key, labels, links or summary: version 2)."""
    plain = (
        spec.parent is None
        and spec.key is None
        and not spec.labels
        and not spec.links
        and not spec.summary
    )
    if plain and spec.payload_hash is None and spec.payload is not None:
        return append(context, spec.payload, spec.type_tag, spec.codec, expected_head)
    if plain and spec.payload is None and spec.payload_hash is not None:
        return append_by_hash(context, spec.payload_hash, spec.type_tag, spec.codec, expected_head)
    many = append_turns(context, [spec], expected_head)
    return Op(many.request, lambda response: many.finish(response)[0])


def turn_info_of(
    record: p.TurnRecord, extras: p.ExtrasRecord, payload: bytes | None = None
) -> TurnInfo:
    """A public :class:`TurnInfo` from its wire records."""
    return TurnInfo(
        turn_id=record.turn_id,
        parent_turn_id=record.parent_turn_id,
        context_id=record.context_id,
        depth=record.depth,
        codec=record.codec,
        type_tag=record.type_tag,
        payload_hash=record.payload_hash,
        payload_len=record.payload_len,
        flags=record.flags,
        created_at_unix_ms=record.created_at_unix_ms,
        payload=payload,
        key=extras.key or None,
        labels=dict(extras.labels),
        links=extras.links,
    )


def _entries(
    entries: Sequence[p.TurnExtrasEntry], payloads: bool, accept_zstd: bool
) -> list[TurnInfo]:
    turns = []
    for entry in entries:
        record = entry.turn
        data: bytes | None = None
        if payloads:
            data = payload_bytes(
                entry.payload,
                record.payload_hash,
                record.payload_len,
                accept_zstd,
                f"turn {record.turn_id}",
            )
        elif entry.payload.encoding != p.PayloadEncoding.ABSENT:
            raise ProtocolError(
                f"turn {record.turn_id}: a payload was sent though none was requested"
            )
        turns.append(turn_info_of(record, entry.extras, data))
    return turns


def turn_by_key_op(context: ContextLike, key: KeyLike) -> Op[TurnInfo]:
    """GET_TURN_BY_KEY; the answer must carry the key asked for."""
    raw_key = _turn_key(key)
    if not raw_key:
        raise ValueError("a turn key must not be empty")

    def finish(response: p.Response) -> TurnInfo:
        info = _expect(response, p.TurnInfoResponse)
        if info.extras.key != raw_key:
            raise ProtocolError(
                f"GET_TURN_BY_KEY {raw_key!r} answered turn {info.turn.turn_id} with key "
                f"{info.extras.key!r}"
            )
        return turn_info_of(info.turn, info.extras)

    return Op(p.GetTurnByKey(_context(context), raw_key), finish)


def turn_by_key(
    context: ContextLike, key: KeyLike, as_of: int | None = None
) -> Plan[TurnInfo | None]:
    """GET_TURN_BY_KEY (in the overlay view ``as_of``, see :func:`view`); a key no turn has is
    None. The server answers NOT_FOUND for a missing key and for an unknown context alike:
    after NOT_FOUND, CTX_SHOW tells them apart."""
    op = view(turn_by_key_op(context, key), as_of)
    try:
        turn: TurnInfo = yield op
        return turn
    except NotFound:
        pass
    yield context_info(context)
    return None


def turn_log(
    context: ContextLike,
    labels: Mapping[str, str] | None,
    cursor: LogCursor | None,
    limit: int,
    payloads: bool,
    accept_zstd: bool,
) -> Op[LogPage]:
    """TURN_LOG: one page; every turn must carry the labels asked for, the cursor must
    advance, payloads are checked (see :func:`payload_bytes`)."""
    wanted = _label_pairs(labels)
    if cursor is not None and not isinstance(cursor, LogCursor):
        raise TypeError(f"a turn-log cursor is the LogCursor of a page, not {cursor!r}")
    sent_cursor = None if cursor is None else p.LogCursor(cursor.phase, cursor.next)
    if not 0 < _u32(limit, "limit"):
        raise ValueError("limit must be at least 1")
    request = p.TurnLog(
        _context(context), wanted, sent_cursor, limit, _read_flags(payloads, accept_zstd)
    )

    def finish(response: p.Response) -> LogPage:
        page = _expect(response, p.TurnLogResponse)
        if len(page.entries) > limit:
            raise ProtocolError(f"TURN_LOG with limit {limit} answered {len(page.entries)} turns")
        for entry in page.entries:
            have = set(entry.extras.labels)
            if not have.issuperset(wanted):
                raise ProtocolError(
                    f"TURN_LOG filtered by {dict(wanted)!r} answered turn {entry.turn.turn_id} "
                    f"labelled {dict(entry.extras.labels)!r}"
                )
        if page.next_cursor is not None and page.next_cursor == sent_cursor:
            raise ProtocolError(f"TURN_LOG after {sent_cursor} answered the same cursor")
        next_cursor = page.next_cursor
        return LogPage(
            _entries(page.entries, payloads, accept_zstd),
            None if next_cursor is None else LogCursor(next_cursor.phase, next_cursor.next),
        )

    return Op(request, finish)


def turn_log_paging(
    context: ContextLike,
    labels: Mapping[str, str] | None,
    page_size: int,
    payloads: bool,
    accept_zstd: bool,
) -> Paging[LogPage, TurnInfo]:
    """The whole turn log: TURN_LOG pages, following ``next_cursor`` (pages may be short or
    empty while more match)."""

    def page_after(cursor: LogCursor | None) -> Op[LogPage]:
        return turn_log(context, labels, cursor, page_size, payloads, accept_zstd)

    def follow(page: LogPage) -> Op[LogPage] | None:
        return None if page.next_cursor is None else page_after(page.next_cursor)

    return Paging(page_after(None), follow, lambda page: page.turns)


FIND_LABEL_KEYS = ("run_id", "thread_id")
"""The label keys the server indexes store-wide (and every key starting ``idx.``)."""


def find_turns(key: str, value: str, before: int | None, limit: int) -> Op[FoundPage]:
    """FIND_TURNS: one page of the turns of every context labelled ``key = value``, newest
    first, older than ``before`` (None: from the newest); every turn must carry the label, the
    page must go down in TurnID and stay below ``before``."""
    if key not in FIND_LABEL_KEYS and not (isinstance(key, str) and key.startswith("idx.")):
        raise ValueError(
            f"find_turns needs an indexed label key (run_id, thread_id or idx.*), not {key!r}"
        )
    _strings(value, "label value")
    sent_before = 0 if before is None else _u64(before, "before")
    if before is not None and sent_before == 0:
        raise ValueError("before=0 would mean from the newest: pass None")
    if not 0 < _u32(limit, "limit") <= 1000:
        raise ValueError("limit must be in 1..=1000")

    def finish(response: p.Response) -> FoundPage:
        page = _expect(response, p.FoundTurnsResponse)
        if len(page.turns) > limit:
            raise ProtocolError(f"FIND_TURNS with limit {limit} answered {len(page.turns)} turns")
        ceiling = sent_before or (1 << 64)
        for record, extras in page.turns:
            if dict(extras.labels).get(key) != value:
                raise ProtocolError(
                    f"FIND_TURNS {key}={value!r} answered turn {record.turn_id} labelled "
                    f"{dict(extras.labels)!r}"
                )
            if record.turn_id >= ceiling:
                raise ProtocolError(
                    f"FIND_TURNS answered turn {record.turn_id} out of order (below {ceiling})"
                )
            ceiling = record.turn_id
        if page.next_before and sent_before and page.next_before >= sent_before:
            raise ProtocolError(f"FIND_TURNS before {sent_before} did not advance")
        turns = [turn_info_of(record, extras) for record, extras in page.turns]
        return FoundPage(turns, page.next_before or None)

    return Op(p.FindTurns(key, value, sent_before, limit), finish)


def find_turns_paging(key: str, value: str, page_size: int) -> Paging[FoundPage, TurnInfo]:
    """Every turn labelled ``key = value``: FIND_TURNS pages, following ``next_before``."""

    def follow(page: FoundPage) -> Op[FoundPage] | None:
        if page.next_before is None:
            return None
        return find_turns(key, value, page.next_before, page_size)

    return Paging(find_turns(key, value, None, page_size), follow, lambda page: page.turns)


def read_page(
    context: ContextLike,
    kind: p.PageKind,
    before_turn_id: int,
    from_depth: int,
    limit: int,
    payloads: bool,
    accept_zstd: bool,
) -> Op[TurnPage]:
    """READ_PAGE: a page of the context's chain, oldest first; each turn must be the child of
    the one before it; a window holds no summary after its first turn."""
    request = p.ReadPage(
        _context(context),
        kind,
        _u64(before_turn_id, "before"),
        _u32(from_depth, "from_depth"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )

    def finish(response: p.Response) -> TurnPage:
        page = _expect(response, p.PageResponse)
        what = f"READ_PAGE ({kind.name})"
        if len(page.entries) > limit:
            raise ProtocolError(f"{what} with limit {limit} answered {len(page.entries)} turns")
        records = [entry.turn for entry in page.entries]
        for older, newer in zip(records, records[1:], strict=False):
            if newer.parent_turn_id != older.turn_id or newer.depth != older.depth + 1:
                raise ProtocolError(
                    f"{what}: turn {newer.turn_id} (depth {newer.depth}) does not follow turn "
                    f"{older.turn_id} (depth {older.depth}) on one chain"
                )
        if kind == p.PageKind.WINDOW and any(r.flags & p.TURN_SUMMARY for r in records[1:]):
            raise ProtocolError(f"{what}: a summary turn after the start of the window")
        turns = _entries(page.entries, payloads, accept_zstd)
        return TurnPage(turns, page.next_before, page.tip_depth)

    return Op(request, finish)


def page_kind(before: int | None, from_depth: int | None) -> tuple[p.PageKind, int, int]:
    """The READ_PAGE kind of ``read_page``'s arguments: BEFORE with ``before``, RANGE with
    ``from_depth``, else LAST."""
    if before is not None and from_depth is not None:
        raise ValueError("read_page takes before= or from_depth=, not both")
    if before is not None:
        if not 0 < _u64(before, "before"):
            raise ValueError("before=0: the previous page reached the root; nothing is older")
        return p.PageKind.BEFORE, before, 0
    if from_depth is not None:
        return p.PageKind.RANGE, 0, _u32(from_depth, "from_depth")
    return p.PageKind.LAST, 0, 0


# ----------------------------------------------------------------------------------------------
# Version 6: vector search (issue 49, decision 0033)

_METRIC_OF_NAME: dict[str, p.VectorMetric] = {
    name: metric for metric, name in p.VECTOR_METRIC_NAMES.items()
}
_F32_MAX = 3.4028234663852886e38
"""The largest finite binary32 (a component past it cannot travel)."""
VectorEntries = Mapping[KeyT, tuple[bytes | bytearray | memoryview, Sequence[Sequence[float]]]]
"""What ``kv_put_vectors`` takes: per key, its value and its vectors (none, or up to 64)."""


def _index_name(name: str) -> str:
    """A vector index's name: 1 to 64 bytes of UTF-8 (TypeError, ValueError otherwise)."""
    if not isinstance(name, str):
        raise TypeError(f"a vector index name is a str, not {name!r}")
    size = len(name.encode("utf-8"))
    if not 1 <= size <= p.VECTOR_INDEX_NAME_BYTES_MAX:
        raise ValueError(
            f"a vector index name is 1 to {p.VECTOR_INDEX_NAME_BYTES_MAX} bytes of UTF-8; "
            f"{name!r} is {size}"
        )
    return name


def _int_in(value: int, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is an int, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{what} is {low} to {high}, not {value}")
    return value


def _components(vector: Sequence[float], what: str) -> tuple[float, ...]:
    """A vector as the wire takes it: 1 to 4096 numbers, each finite and within binary32's
    range (TypeError, ValueError otherwise, naming the vector and the component)."""
    if isinstance(vector, (str, bytes, bytearray, memoryview)) or not isinstance(vector, Iterable):
        raise TypeError(f"{what} is a sequence of numbers, not {type(vector).__name__}")
    components: list[float] = []
    for position, component in enumerate(vector):
        if isinstance(component, (str, bytes, bytearray, bool)):
            raise TypeError(f"{what}: component {position} is not a number: {component!r}")
        try:
            value = float(component)
        except (TypeError, ValueError):
            raise TypeError(
                f"{what}: component {position} is not a number: {component!r}"
            ) from None
        if not math.isfinite(value):
            raise ValueError(
                f"{what}: component {position} is {value}; vector components must be finite "
                "(no NaN, no infinity)"
            )
        if abs(value) > _F32_MAX:
            raise ValueError(
                f"{what}: component {position} is {value}, outside the range of f32 (the "
                "components travel as 32-bit floats)"
            )
        components.append(value)
    if not 1 <= len(components) <= p.VECTOR_DIMS_MAX:
        raise ValueError(
            f"{what} has {len(components)} components; a vector has 1 to {p.VECTOR_DIMS_MAX}"
        )
    return tuple(components)


def _vector_index_of(record: p.VectorIndexInfoRecord) -> VectorIndex:
    return VectorIndex(
        index_id=record.index_id,
        name=record.name,
        dims=record.dims,
        metric=cast(VectorMetric, p.VECTOR_METRIC_NAMES[record.metric]),
        ef_search=record.ef_search,
        vectors=record.vectors,
    )


def vector_index_create(
    name: str, dims: int, metric: VectorMetric, ef_search: int
) -> Op[VectorIndex]:
    """VECTOR_INDEX_CREATE (version 6): the index ``name`` of ``dims`` dimensions and
    ``metric``, created, or the one of that name when it has that dimension and metric;
    checked: the answer is that index (name, dimension, metric, and the breadth asked when it
    is not 0)."""
    _index_name(name)
    _int_in(dims, 1, p.VECTOR_DIMS_MAX, "dims")
    code = _METRIC_OF_NAME.get(metric) if isinstance(metric, str) else None
    if code is None:
        known = ", ".join(repr(known) for known in _METRIC_OF_NAME)
        raise ValueError(f"metric is one of {known}, not {metric!r}")
    _int_in(ef_search, 0, p.VECTOR_EF_SEARCH_MAX, "ef_search")

    def finish(response: p.Response) -> VectorIndex:
        info = _expect(response, p.VectorIndexResponse).index
        if (
            info.name != name
            or info.dims != dims
            or info.metric != code
            or (ef_search and info.ef_search != ef_search)
        ):
            raise ProtocolError(
                f"VECTOR_INDEX_CREATE of {name!r} ({dims} dims, {metric}, ef_search "
                f"{ef_search}) answered another index: {info}"
            )
        return _vector_index_of(info)

    return Op(p.VectorIndexCreate(name, dims, code, ef_search), finish)


def vector_index_drop(name: str) -> Op[VectorIndex]:
    """VECTOR_INDEX_DROP (version 6): the index ``name`` dropped; its info as it was
    (checked: that index)."""
    _index_name(name)

    def finish(response: p.Response) -> VectorIndex:
        info = _expect(response, p.VectorIndexResponse).index
        if info.name != name:
            raise ProtocolError(f"VECTOR_INDEX_DROP of {name!r} answered the index {info.name!r}")
        return _vector_index_of(info)

    return Op(p.VectorIndexDrop(name), finish)


def vector_indexes() -> Op[list[VectorIndex]]:
    """VECTOR_INDEX_LIST (version 6): the tenant's indexes, checked to be in name order (the
    bytes of their UTF-8), each once."""

    def finish(response: p.Response) -> list[VectorIndex]:
        records = _expect(response, p.VectorIndexesResponse).indexes
        previous = b""
        for record in records:
            name = record.name.encode("utf-8")
            if name <= previous:
                raise ProtocolError(
                    f"VECTOR_INDEX_LIST answered {record.name!r} after "
                    f"{previous.decode('utf-8')!r}: not in name order"
                )
            previous = name
        return [_vector_index_of(record) for record in records]

    return Op(p.VectorIndexList(), finish)


def _checked_vectors(
    vectors: object, owner: str, kind: str, count_max: int, found: int | None
) -> tuple[list[tuple[float, ...]], int | None]:
    """The vectors of one entry or turn (``owner``, e.g. ``turn 3``; ``kind``, e.g. ``a
    turn``): a sequence of at most ``count_max`` vectors of finite components, each of the
    dimension ``found`` (the request's so far; None: the first sets it). Returns them as
    tuples and the dimension."""
    if isinstance(vectors, (str, bytes, bytearray, memoryview)) or not isinstance(
        vectors, Iterable
    ):
        raise TypeError(
            f"the vectors of {owner} are a sequence of vectors, not {type(vectors).__name__}"
        )
    listed = list(vectors)
    if len(listed) > count_max:
        raise ValueError(f"{owner} has {len(listed)} vectors; {kind} carries at most {count_max}")
    converted: list[tuple[float, ...]] = []
    for position, vector in enumerate(listed):
        components = _components(vector, f"vector {position} of {owner}")
        if found is None:
            found = len(components)
        elif len(components) != found:
            raise ValueError(
                f"vector {position} of {owner} has {len(components)} dimensions, not "
                f"{found}: every vector of one request has the index's dimension (it is "
                "sent once)"
            )
        converted.append(components)
    return converted, found


def vector_entries(
    entries: VectorEntries[KeyT], dims: int | None
) -> tuple[tuple[p.KvVectorEntryRecord, ...], int | None]:
    """The entries of a KV_PUT_VECTORS, checked before anything is sent: 1 to 128 entries,
    each a ``(value, vectors)`` pair of bytes and at most 64 vectors, every vector of the
    request of one dimension (``dims`` when given) with finite components. Returns the records
    and that dimension (None when no entry carries a vector and ``dims`` is None)."""
    if not isinstance(entries, Mapping):
        raise TypeError(
            f"entries is a mapping of key to (value, vectors), not {type(entries).__name__}"
        )
    if not 1 <= len(entries) <= p.KV_ENTRIES_PER_REQUEST_MAX:
        raise ValueError(
            f"a put with vectors takes 1 to {p.KV_ENTRIES_PER_REQUEST_MAX} entries; got "
            f"{len(entries)}"
        )
    found = None if dims is None else _int_in(dims, 1, p.VECTOR_DIMS_MAX, "dims")
    records: list[p.KvVectorEntryRecord] = []
    for key, entry in entries.items():
        raw_key = _key(key)
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(
                f"the entry of key {raw_key!r} is a (value, vectors) pair, not {entry!r:.80}"
            )
        value, vectors = entry
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"the value of key {raw_key!r} is bytes, not {type(value).__name__}")
        if len(value) > p.U32_MAX:
            raise ValueError(f"the value of key {raw_key!r} is over 4 GiB - 1 bytes")
        converted, found = _checked_vectors(
            vectors, f"key {raw_key!r}", "an entry", p.VECTORS_PER_ENTRY_MAX, found
        )
        records.append(p.KvVectorEntryRecord(raw_key, bytes(value), tuple(converted)))
    return tuple(records), found


def kv_put_vectors_op(
    context: ContextLike,
    records: tuple[p.KvVectorEntryRecord, ...],
    index: str,
    dims: int,
    if_absent: bool,
    ttl_ms: int | None,
) -> Op[None]:
    """One KV_PUT_VECTORS (version 6) of checked ``records`` (see :func:`vector_entries`)."""
    flags = p.KV_PUT_IF_ABSENT if if_absent else 0
    request = p.KvPutVectors(
        _context(context), flags, _ttl_ms(ttl_ms), _index_name(index), dims, records
    )
    return Op(request, _done)


def kv_put_vectors(
    context: ContextLike,
    entries: VectorEntries[KeyT],
    index: str,
    if_absent: bool,
    ttl_ms: int | None,
) -> Op[None]:
    """KV_PUT_VECTORS (version 6): every entry's value and vectors in one durable record;
    checked before sending (:func:`vector_entries`). When no entry carries a vector the
    request's ``dims`` is 0 (the server checks it only against the vectors a request carries;
    it still needs the index to exist)."""
    target = _context(context)
    _index_name(index)
    _ttl_ms(ttl_ms)
    records, found = vector_entries(entries, None)
    return kv_put_vectors_op(target, records, index, found or 0, if_absent, ttl_ms)


def filter_json(search_filter: Mapping[str, Any] | None) -> bytes:
    """A search filter as the wire carries it: compact JSON (UTF-8), empty for none; at most
    64 KiB (ValueError), JSON only (TypeError; NaN and infinities ValueError)."""
    if search_filter is None:
        return b""
    if not isinstance(search_filter, Mapping):
        raise TypeError(f"a filter is a dict, not {type(search_filter).__name__}")
    if not search_filter:
        return b""
    try:
        text = json.dumps(
            dict(search_filter), separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except TypeError as error:
        raise TypeError(f"the filter is not JSON: {error}") from None
    except ValueError as error:
        raise ValueError(f"the filter is not JSON: {error}") from None
    data = text.encode("utf-8")
    if len(data) > p.VECTOR_FILTER_BYTES_MAX:
        raise ValueError(
            f"the filter is {len(data)} bytes of JSON; a search takes at most "
            f"{p.VECTOR_FILTER_BYTES_MAX}"
        )
    return data


def vector_search(
    context: ContextLike,
    index: str,
    vector: Sequence[float],
    k: int,
    offset: int,
    prefix: KeyLike,
    search_filter: Mapping[str, Any] | None,
    exact: bool,
    ef_search: int,
) -> Op[VectorHits]:
    """VECTOR_SEARCH (version 6): the ``k`` entries nearest ``vector`` after ``offset``, under
    ``prefix``, passing ``search_filter``; checked: at most ``k`` hits, each under the prefix
    and once, best first (equal scores in key order)."""
    target = _context(context)
    _index_name(index)
    query = _components(vector, "the query vector")
    _int_in(k, 1, p.VECTOR_K_MAX, "k")
    _int_in(offset, 0, p.VECTOR_K_MAX - 1, "offset")
    if k + offset > p.VECTOR_K_MAX:
        raise ValueError(f"k + offset is at most {p.VECTOR_K_MAX}; got {k} + {offset}")
    _int_in(ef_search, 0, p.VECTOR_EF_SEARCH_MAX, "ef_search")
    raw_prefix = _key(prefix)
    if len(raw_prefix) > KV_KEY_BYTES_MAX:
        raise ValueError(f"a prefix is at most {KV_KEY_BYTES_MAX} bytes, not {len(raw_prefix)}")
    flags = p.VECTOR_SEARCH_EXACT if exact else 0
    request = p.VectorSearch(
        target,
        index,
        query,
        k,
        offset,
        flags,
        ef_search,
        raw_prefix,
        filter_json(search_filter),
    )

    def finish(response: p.Response) -> VectorHits:
        answer = _expect(response, p.VectorHitsResponse)
        if len(answer.hits) > k:
            raise ProtocolError(f"VECTOR_SEARCH with k {k} answered {len(answer.hits)} hits")
        seen: set[bytes] = set()
        previous: p.VectorHitRecord | None = None
        for hit in answer.hits:
            if not hit.key.startswith(raw_prefix) or hit.key in seen:
                raise ProtocolError(
                    f"VECTOR_SEARCH (prefix {raw_prefix!r}) answered key {hit.key!r} outside "
                    "the prefix or twice"
                )
            if previous is not None and (
                hit.score > previous.score
                or (hit.score == previous.score and hit.key < previous.key)
            ):
                raise ProtocolError(
                    f"VECTOR_SEARCH answered {hit.key!r} (score {hit.score}) after "
                    f"{previous.key!r} (score {previous.score}): not best first, equal scores "
                    "in key order"
                )
            seen.add(hit.key)
            previous = hit
        method: Literal["exact", "graph"] = (
            "exact" if answer.method == p.VectorMethod.EXACT else "graph"
        )
        hits = [VectorHit(h.key, h.score, h.value_hash, h.value_len) for h in answer.hits]
        return VectorHits(method, answer.candidates, hits)

    return Op(request, finish)


# ----------------------------------------------------------------------------------------------
# Version 7: vectors on turns, and the search over them (issue 49, decision 0033)

TurnVectors = Iterable[tuple[TurnSpec, Sequence[Sequence[float]]]]
"""What ``append_turns_vectors`` takes: per turn, its :class:`TurnSpec` and its vectors (none,
or up to 16)."""


def turn_vectors(
    turns: TurnVectors, dims: int | None
) -> tuple[list[TurnSpec], list[tuple[tuple[float, ...], ...]], int | None]:
    """The turns of an APPEND_TURNS_VECTORS, checked before anything is sent: each a
    ``(TurnSpec, vectors)`` pair of at most 16 vectors, every vector of the request of one
    dimension (``dims`` when given) with finite components within f32's range. Returns the
    specs, their vectors and that dimension (None when no turn carries a vector and ``dims``
    is None)."""
    if isinstance(turns, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        turns, Iterable
    ):
        raise TypeError(
            f"turns is a sequence of (TurnSpec, vectors) pairs, not {type(turns).__name__}"
        )
    found = None if dims is None else _int_in(dims, 1, p.VECTOR_DIMS_MAX, "dims")
    specs: list[TurnSpec] = []
    all_vectors: list[tuple[tuple[float, ...], ...]] = []
    for number, turn in enumerate(turns):
        if not isinstance(turn, (tuple, list)) or len(turn) != 2:
            raise TypeError(f"turn {number} is a (TurnSpec, vectors) pair, not {turn!r:.80}")
        spec, vectors = turn
        if not isinstance(spec, TurnSpec):
            raise TypeError(f"turn {number}'s spec is a TurnSpec, not {type(spec).__name__}")
        converted, found = _checked_vectors(
            vectors, f"turn {number}", "a turn", p.VECTORS_PER_TURN_MAX, found
        )
        specs.append(spec)
        all_vectors.append(tuple(converted))
    if not specs:
        raise ValueError("append_turns_vectors needs at least one turn")
    return specs, all_vectors, found


def append_turns_vectors_op(
    context: ContextLike,
    specs: Sequence[TurnSpec],
    vectors: Sequence[tuple[tuple[float, ...], ...]],
    index: str,
    dims: int,
    expected_head: int | None,
    compression: Compression | None = None,
) -> Op[list[Appended]]:
    """One APPEND_TURNS_VECTORS (version 7) of turns checked by :func:`turn_vectors`; the
    answer is checked as APPEND_TURNS' (:func:`append_turns`), and payloads go as their zstd
    frames with ``compression`` as there."""
    target = _context(context)
    sent = _sent_turns(specs, expected_head, compression)
    turns = tuple(
        p.VectorTurnRecord(turn.record, carried)
        for turn, carried in zip(sent, vectors, strict=True)
    )
    request = p.AppendTurnsVectors(target, expected_head, _index_name(index), dims, turns)
    return Op(request, _appended_checked(target, sent, expected_head, request.NAME))


def append_turns_vectors(
    context: ContextLike,
    turns: TurnVectors,
    index: str,
    dims: int | None,
    expected_head: int | None,
    compress_level: int | None,
    idempotency: Idempotency = "off",
) -> Plan[list[Appended]]:
    """APPEND_TURNS_VECTORS (version 7): :func:`append_turns_compressed` with each turn's
    vectors, checked before anything is sent (:func:`turn_vectors`; the index's name, the
    context and ``expected_head`` too). When no turn carries a vector and ``dims`` is None
    the request's ``dims`` is 0 (the server checks the dimension only against the vectors a
    request carries; the index always)."""
    target = _context(context)
    _index_name(index)
    specs, vectors, found = turn_vectors(turns, dims)
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    return _append_turns_vectors(
        target, specs, vectors, index, found or 0, expected_head, compress_level, idempotency
    )


def _append_turns_vectors(
    context: ContextLike,
    specs: list[TurnSpec],
    vectors: list[tuple[tuple[float, ...], ...]],
    index: str,
    dims: int,
    expected_head: int | None,
    compress_level: int | None,
    idempotency: Idempotency,
) -> Plan[list[Appended]]:
    specs = yield from auto_keyed(specs, idempotency)
    compression = yield from compression_for(compress_level)
    op = append_turns_vectors_op(context, specs, vectors, index, dims, expected_head, compression)
    appended: list[Appended] = yield op
    return appended


def _pairs(
    pairs: Mapping[str, str] | None, what: str, count_max: int
) -> tuple[tuple[str, str], ...]:
    """Tags or labels a turn search names: ``str`` pairs, at most ``count_max``."""
    if pairs is None:
        return ()
    if not isinstance(pairs, Mapping):
        raise TypeError(f"{what} is a dict of str to str, not {type(pairs).__name__}")
    if len(pairs) > count_max:
        raise ValueError(f"a turn search names at most {count_max} {what}; got {len(pairs)}")
    return tuple(
        (_strings(key, f"a {what[:-1]} key"), _strings(value, f"a {what[:-1]} value"))
        for key, value in pairs.items()
    )


def vector_search_turns(
    index: str,
    vector: Sequence[float],
    k: int,
    offset: int,
    context: ContextLike | None,
    name_prefix: str | None,
    tags: Mapping[str, str] | None,
    labels: Mapping[str, str] | None,
    type_tag: int | None,
    exact: bool,
    ef_search: int,
) -> Op[TurnHits]:
    """VECTOR_SEARCH_TURNS (version 7): the ``k`` turns nearest ``vector`` after ``offset``,
    of the contexts named by ``context``, ``name_prefix`` and ``tags`` (none: every context of
    the tenant), carrying ``labels`` and of ``type_tag``; checked: at most ``k`` hits, each
    turn once, of ``type_tag`` when given, best first (equal scores in TurnID order)."""
    _index_name(index)
    query = _components(vector, "the query vector")
    _int_in(k, 1, p.VECTOR_K_MAX, "k")
    _int_in(offset, 0, p.VECTOR_K_MAX - 1, "offset")
    if k + offset > p.VECTOR_K_MAX:
        raise ValueError(f"k + offset is at most {p.VECTOR_K_MAX}; got {k} + {offset}")
    _int_in(ef_search, 0, p.VECTOR_EF_SEARCH_MAX, "ef_search")
    target: ContextLike = 0
    if context is not None:
        target = _context(context)
        if target == 0:
            raise ValueError("context 0 is no context: pass None to search every context")
    prefix = "" if name_prefix is None else _strings(name_prefix, "name_prefix")
    if len(prefix.encode("utf-8")) > p.U16_MAX:
        raise ValueError("name_prefix is at most 65535 bytes on the wire")
    flags = p.VECTOR_SEARCH_EXACT if exact else 0
    if type_tag is not None:
        _u64(type_tag, "type_tag")
        flags |= p.VECTOR_SEARCH_TYPE_TAG
    request = p.VectorSearchTurns(
        index,
        query,
        k,
        offset,
        flags,
        ef_search,
        target,
        prefix,
        _pairs(tags, "tags", p.TURN_SEARCH_TAGS_MAX),
        _pairs(labels, "labels", p.TURN_SEARCH_LABELS_MAX),
        type_tag or 0,
    )

    def finish(response: p.Response) -> TurnHits:
        answer = _expect(response, p.TurnHitsResponse)
        if len(answer.hits) > k:
            raise ProtocolError(f"VECTOR_SEARCH_TURNS with k {k} answered {len(answer.hits)} hits")
        seen: set[int] = set()
        previous: p.TurnHitRecord | None = None
        for hit in answer.hits:
            turn_id = hit.turn.turn_id
            if turn_id in seen:
                raise ProtocolError(f"VECTOR_SEARCH_TURNS answered turn {turn_id} twice")
            if type_tag is not None and hit.turn.type_tag != type_tag:
                raise ProtocolError(
                    f"VECTOR_SEARCH_TURNS of type {type_tag} answered turn {turn_id} of type "
                    f"{hit.turn.type_tag}"
                )
            if previous is not None and (
                hit.score > previous.score
                or (hit.score == previous.score and turn_id < previous.turn.turn_id)
            ):
                raise ProtocolError(
                    f"VECTOR_SEARCH_TURNS answered turn {turn_id} (score {hit.score}) after "
                    f"turn {previous.turn.turn_id} (score {previous.score}): not best first, "
                    "equal scores in TurnID order"
                )
            seen.add(turn_id)
            previous = hit
        method: Literal["exact", "graph"] = (
            "exact" if answer.method == p.VectorMethod.EXACT else "graph"
        )
        hits = [TurnHit(turn_of(hit.turn), hit.score) for hit in answer.hits]
        return TurnHits(method, answer.candidates, hits)

    return Op(request, finish)


# ----------------------------------------------------------------------------------------------
# Building blocks of the framework adapters' plans (ctxstore.langgraph)

KV_ENTRIES_MAX = 128
"""Entries per KV_PUT or KV_DELETE (the protocol's limit)."""


def _done(response: p.Response) -> None:
    _expect(response, p.DoneResponse)


def kv_put_ops(
    context: ContextLike,
    entries: Mapping[str, bytes] | Mapping[bytes, bytes],
    if_absent: bool,
    ttl_ms: int | None = None,
) -> list[Op[None]]:
    """KV_PUT requests of ``entries`` (a str key as its UTF-8), at most 128 a request: to send
    pipelined (each request one durable record; together not atomic). With ``ttl_ms``,
    KV_PUT_EX (version 3): each entry expires that long after its put."""
    target = _context(context)
    ttl = _ttl_ms(ttl_ms)
    pairs = [(_key(key), bytes(value)) for key, value in entries.items()]
    chunks = [tuple(pairs[i : i + KV_ENTRIES_MAX]) for i in range(0, len(pairs), KV_ENTRIES_MAX)]
    if ttl:
        flags = p.KV_PUT_IF_ABSENT if if_absent else 0
        return [Op(p.KvPutEx(target, flags, ttl, chunk), _done) for chunk in chunks]
    return [Op(p.KvPut(target, if_absent, chunk), _done) for chunk in chunks]


def kv_delete_ops(context: ContextLike, keys: Sequence[bytes]) -> list[Op[None]]:
    """KV_DELETE requests of ``keys``, at most 128 a request (see :func:`kv_put_ops`)."""
    target = _context(context)
    return [
        Op(p.KvDelete(target, tuple(keys[i : i + KV_ENTRIES_MAX])), _done)
        for i in range(0, len(keys), KV_ENTRIES_MAX)
    ]


def collect_from(paging: Paging[Any, I], page: Any) -> Plan[list[I]]:
    """Every item of a listing whose first page is ``page`` (following its cursors)."""
    items: list[I] = list(paging.items(page))
    op = paging.follow(page)
    while op is not None:
        page = yield op
        items.extend(paging.items(page))
        op = paging.follow(page)
    return items


def collect(paging: Paging[Any, I]) -> Plan[list[I]]:
    """Every item of a listing."""
    first = yield paging.first
    return (yield from collect_from(paging, first))


def tolerant(batch: Sequence[Op[Any]]) -> Plan[list[Any]]:
    """The ops pipelined; if one is NOT_FOUND (a context deleted meanwhile), each again on its
    own, None for those NOT_FOUND."""
    if not batch:
        return []
    try:
        answers: list[Any] = yield Many(batch)
        return answers
    except NotFound:
        pass
    results: list[Any] = []
    for op in batch:
        try:
            results.append((yield op))
        except NotFound:
            results.append(None)
    return results


class BlobCache:
    """Blobs by their BlobHash for a framework adapter's plans (the blob under a hash never
    changes, so a copy is never stale), least recently used dropped past ``bytes_max``;
    blobs over ``entry_bytes_max`` are not kept. Thread-safe: an adapter's sync methods may
    run in several threads at once."""

    def __init__(self, accept_zstd: bool, bytes_max: int, entry_bytes_max: int) -> None:
        self.accept_zstd = accept_zstd
        self._bytes_max = bytes_max
        self._entry_bytes_max = entry_bytes_max
        self._lock = threading.Lock()
        self._blobs: OrderedDict[bytes, bytes] = OrderedDict()
        self._bytes = 0

    def split(self, digests: Iterable[bytes]) -> tuple[dict[bytes, bytes], list[bytes]]:
        """The blobs of ``digests`` the cache holds, and the others (each once, in order)."""
        found: dict[bytes, bytes] = {}
        missing: list[bytes] = []
        with self._lock:
            for digest in dict.fromkeys(digests):
                data = self._blobs.get(digest)
                if data is None:
                    missing.append(digest)
                else:
                    self._blobs.move_to_end(digest)
                    found[digest] = data
        return found, missing

    def fetches(self, digests: Sequence[bytes]) -> list[Op[bytes]]:
        """GET_BLOB of each of ``digests`` (to send pipelined, then :meth:`keep`)."""
        return [get_blob(digest, self.accept_zstd) for digest in digests]

    def keep(
        self, found: dict[bytes, bytes], digests: Sequence[bytes], blobs: Sequence[bytes]
    ) -> None:
        """Adds fetched blobs to ``found`` and to the cache."""
        with self._lock:
            for digest, data in zip(digests, blobs, strict=False):
                found[digest] = data
                if len(data) > self._entry_bytes_max or digest in self._blobs:
                    continue
                self._blobs[digest] = data
                self._bytes += len(data)
                while self._bytes > self._bytes_max:
                    _, old = self._blobs.popitem(last=False)
                    self._bytes -= len(old)

    def blobs(self, digests: Iterable[bytes]) -> Plan[dict[bytes, bytes]]:
        """The blobs of ``digests``: from the cache, the others fetched pipelined."""
        found, missing = self.split(digests)
        if missing:
            fetched = yield Many(self.fetches(missing))
            self.keep(found, missing, fetched)
        return found
