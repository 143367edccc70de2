"""What the connections of both clients share, without I/O: the client's settings
(:class:`ClientCore`), how a connection is made (:class:`Dial`: the HELLO it sends and how
its answer is checked), and the bookkeeping and decisions of a connection in use
(:class:`ConnectionState`: requests in flight by req_id, what an arriving frame answers,
when the connection is done for).

:class:`ctxstore.client._Connection` (a reader thread, a socket under locks) and
:class:`ctxstore.aio._AsyncConnection` (a reader task, a stream) differ only in their I/O:
each reads frames its own way and hands them to :meth:`ConnectionState._dispatch`, and says
how a waiting caller is woken (``_resolve``, ``_reject``).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from . import _ops as ops
from . import _protocol as p
from . import _stream_protocol as s
from .errors import (
    CONNECTION_CLOSING_CODES,
    ClientClosed,
    ConnectionLost,
    CtxstoreError,
    NotPrimary,
    ProtocolError,
    RequestTimeout,
    ShuttingDown,
    Unconfirmed,
    error_for_code,
)
from .types import Idempotency, ReplicationStats, Role, ServerInfo, VerifyPayloads

SCRATCH_KEEP_BYTES = 1 << 20
"""The largest buffer for a body that arrives in pieces a connection keeps between frames."""


def lost_error(reason: BaseException) -> CtxstoreError:
    """The exception for a call whose connection ended for ``reason``."""
    if isinstance(reason, ClientClosed):
        return ClientClosed(reason.message)
    if isinstance(reason, ProtocolError):
        # The server broke the protocol: every call on the connection reports that.
        broken = ProtocolError(f"the connection was closed: {reason.message}")
        broken.__cause__ = reason
        return broken
    error = ConnectionLost(f"the connection was lost while the request was in flight: {reason}")
    error.__cause__ = reason
    return error


@dataclass(frozen=True, slots=True)
class Dial:
    """How a client makes each of its connections (the first and every reconnect)."""

    host: str
    port: int
    token: bytes
    versions: tuple[int, int]
    client_name: str
    frame_bytes_max: int
    """The largest response frame accepted (the client's ``max_response_bytes``)."""
    max_in_flight: int
    verify_payloads: VerifyPayloads

    @property
    def where(self) -> str:
        """``host:port``, for messages."""
        return f"{self.host}:{self.port}"

    def hello_frame(self) -> bytes:
        """The HELLO frame (req_id 1) offering :attr:`versions`."""
        hello = ops.hello_request(self.versions, self.token, self.client_name)
        return b"".join(p.encode_request(1, hello))

    def hello_answer(self, header: p.FrameHeader, body: bytes) -> ServerInfo:
        """What the answer to HELLO says: the server's info, or the exception of its ERROR
        (which may come with req_id 0: a server that refuses a connection answers before it
        reads anything); any other frame is a ProtocolError."""
        if header.req_id not in (1, 0) or (header.req_id == 0 and header.msg_type != p.ERROR_TYPE):
            raise ProtocolError(f"HELLO was answered with req_id {header.req_id}")
        return ops.hello_result(p.decode_response(header.msg_type, body), self.versions)

    def hashes_raw(self, peer: object) -> bool:
        """Whether a connection to ``peer`` (its ``getpeername()``; None if it could not
        tell) hashes RAW payloads (decision 0015)."""
        return ops.hashes_raw_from(self.verify_payloads, peer)


FOLLOW_FRAMES_MAX = 64
"""Frames one follow (STREAM_FOLLOW) holds that its caller has not taken yet. When a follow
holds this many, its connection stops reading the socket until the caller takes one, so that
TCP pushes back on the server (which then waits: it pushes nothing, drops nothing and skips
nothing), as the Rust and TypeScript clients do; the client's memory per follow is bounded."""


class FollowFrames:
    """The frames of one follow (STREAM_FOLLOW) in arrival order, without I/O: each shell
    keeps one per follow in flight and wakes its caller its own way. The route ends at the
    frame without ``MORE`` (or an ERROR), or when the connection ends (:meth:`lost`: the
    connection's error comes after the frames already held). A follow its caller abandoned
    (:meth:`abandon`) drops the frames that still come, until its last, which ends it: the
    server counts the follow in flight until then, so the client keeps its in-flight slot."""

    __slots__ = ("request", "ended", "abandoned", "_frames", "_error")

    def __init__(self, request: p.Request) -> None:
        self.request = request
        self.ended = False
        """True once the last frame arrived or the connection ended."""
        self.abandoned = False
        self._frames: deque[p.Response] = deque()
        self._error: BaseException | None = None

    @property
    def full(self) -> bool:
        """Whether the connection should stop reading until the caller takes a frame."""
        return len(self._frames) >= FOLLOW_FRAMES_MAX

    def arrived(self, response: p.Response) -> None:
        """A frame of this follow arrived (its req_id; decoded and checked by
        :func:`answer_of`, so ``MORE`` is only on an open frame with bytes)."""
        assert not self.ended, "a frame after a follow's last: answer_of routes none"
        if not (isinstance(response, s.StreamPushedResponse) and response.more):
            self.ended = True
        if not self.abandoned:
            self._frames.append(response)

    def lost(self, error: BaseException) -> None:
        """The connection ended for ``error`` before the last frame."""
        if not self.ended:
            self.ended = True
            self._error = error

    def abandon(self) -> None:
        """The caller takes no more frames: drop those held and those still to come."""
        self.abandoned = True
        self._frames.clear()

    def take(self) -> p.Response | None:
        """The next frame (None: none has arrived yet); once the frames are taken, the
        connection's error if it ended first. Taking past the last frame is a caller's bug."""
        if self._frames:
            return self._frames.popleft()
        if self._error is not None:
            raise self._error
        if self.ended:
            raise RuntimeError(f"{self.request.NAME}: its frames were taken to the last")
        return None


class Waiter(Protocol):
    """A request in flight, as its connection keeps it until the answer arrives."""

    @property
    def request(self) -> p.Request: ...


W = TypeVar("W", bound=Waiter)


def answer_of(
    header: p.FrameHeader, body: bytes, request: p.Request | None, last_id: int
) -> p.Response | None:
    """The response a frame carries for ``request`` (None: no request waits for its
    req_id). None when no request waits and the frame is the late answer to one whose caller
    gave up; the exception of an ERROR sent with req_id 0 (the server says why it closes);
    a ProtocolError for an answer to a req_id never sent, of another message type than the
    request's, or that does not decode."""
    if request is None:
        if header.req_id == 0 and header.msg_type == p.ERROR_TYPE:
            error = p.decode_response(header.msg_type, body)
            assert isinstance(error, p.ErrorResponse)
            raise error_for_code(error.code, error.message, error.detail)
        if 0 < header.req_id <= last_id:
            return None
        raise ProtocolError(f"a response to req_id {header.req_id}, which was never sent")
    if header.msg_type not in (request.response_type, p.ERROR_TYPE):
        raise ProtocolError(
            f"{request.NAME} (req_id {header.req_id}) was answered with message type "
            f"{header.msg_type:#06x}"
        )
    return p.decode_response(
        header.msg_type, body, header.flags, allow_unknown=isinstance(request, p.RawRequest)
    )


class ConnectionState(Generic[W]):
    """One connection after HELLO, without its I/O: what HELLO told, whether RAW payloads
    are hashed on it, the requests in flight by req_id (``W``: how the shell keeps one), the
    next req_id, and why it ended (None while it lives). The blocking shell calls
    :meth:`_register` and ``_take`` under its lock; the asyncio shell from its loop."""

    def __init__(self, dial: Dial, info: ServerInfo, hashes_raw: bool) -> None:
        self.info = info
        self.hashes_raw = hashes_raw
        """Whether RAW payloads read on this connection are hashed (decision 0015)."""
        self.frame_bytes_max = dial.frame_bytes_max
        self.slot_count = max(1, min(dial.max_in_flight, info.requests_in_flight_max or 1))
        """How many requests this connection may have in flight at once."""
        self._pending: dict[int, W] = {}
        self._ids = itertools.count(2)  # 1 was HELLO
        self._last_id = 1
        self._dead: BaseException | None = None
        self.peak_in_flight = 0
        """The most requests this connection had in flight at once (a diagnostic)."""

    @property
    def alive(self) -> bool:
        """False once the connection failed or was closed."""
        return self._dead is None

    def _register(self, waiter: W) -> int:
        """A new req_id for ``waiter``, now in flight; the connection's exception if it
        ended."""
        if self._dead is not None:
            raise lost_error(self._dead)
        req_id = next(self._ids)
        self._last_id = req_id
        self._pending[req_id] = waiter
        self.peak_in_flight = max(self.peak_in_flight, len(self._pending))
        return req_id

    def _take(self, req_id: int) -> W | None:
        """The request waiting for ``req_id``, no longer in flight (None: none waits)."""
        return self._pending.pop(req_id, None)

    def _keep(self, req_id: int, waiter: W) -> None:
        """``waiter`` stays in flight for ``req_id`` (a follow after a frame with MORE)."""
        if self._dead is None:
            self._pending[req_id] = waiter

    def _taken_all(self, reason: BaseException) -> list[W] | None:
        """Ends the connection for ``reason``: every request in flight, now failed (None if
        it had ended already)."""
        if self._dead is not None:
            return None
        self._dead = reason
        waiting = list(self._pending.values())
        self._pending.clear()
        return waiting

    def _resolve(self, waiter: W, response: p.Response) -> None:
        raise NotImplementedError  # each shell wakes its caller its own way

    def _reject(self, waiter: W, error: BaseException) -> None:
        raise NotImplementedError  # each shell wakes its caller its own way

    def _fail(self, reason: BaseException) -> None:
        raise NotImplementedError  # each shell closes its own transport

    def _dispatch(self, header: p.FrameHeader, body: bytes) -> None:
        """Hands a frame that arrived to the request it answers (see :func:`answer_of`). An
        exception ends the reader, and so the connection: a frame the client cannot place
        breaks the framing, or says that the server closes."""
        waiter = self._take(header.req_id)
        try:
            response = answer_of(
                header, body, None if waiter is None else waiter.request, self._last_id
            )
        except ProtocolError as error:
            if waiter is not None:
                self._reject(waiter, ProtocolError(error.message))
            raise
        if waiter is None or response is None:
            return
        if isinstance(response, s.StreamPushedResponse) and response.more:
            # A follow's frame with MORE: more frames answer this req_id (the decoder let
            # MORE through only on STREAM_PUSHED, which answers only STREAM_FOLLOW).
            self._keep(header.req_id, waiter)
        self._resolve(waiter, response)
        if isinstance(response, p.ErrorResponse) and response.code in CONNECTION_CLOSING_CODES:
            # The server closes the connection after this answer: no new request may use it.
            self._fail(error_for_code(response.code, response.message, response.detail))


FAILOVER_TIMEOUT_DEFAULT = 30.0
"""With several addresses: how long a call looks for the primary again (decision 0031 §11)."""
BACKOFF_MIN = 0.1
"""The first wait between two searches for the primary, doubled up to :data:`BACKOFF_MAX`."""
BACKOFF_MAX = 1.0


def parse_addrs(addr: str | tuple[str, int] | Sequence[str] | None) -> list[tuple[str, int]]:
    """Every address ``addr`` names: ``"A,B,C"`` (a primary and its standbys), a list of
    ``"HOST:PORT"``, one address or ``(host, port)``; None is ``$CTXSTORE_ADDR`` (which may
    list several too), else ``127.0.0.1:7411``."""
    if addr is None:
        addr = os.environ.get(ops.ADDR_ENV) or ops.DEFAULT_ADDR
    if isinstance(addr, tuple) and len(addr) == 2 and isinstance(addr[1], int):
        return [ops.parse_addr((str(addr[0]), addr[1]))]
    parts = addr.split(",") if isinstance(addr, str) else [str(part) for part in addr]
    parts = [part for part in parts if part.strip()]
    if not parts:
        raise ValueError(f"no address in {addr!r}")
    return [ops.parse_addr(part) for part in parts]


def primary_probe(version: int) -> ops.Op[tuple[bool, int]] | None:
    """What asks a server of protocol ``version`` whether it takes writes, and its epoch:
    ROLE (version 4); REPLICATION_STATS (version 3: role primary and not fenced, or
    replication off); None below (a server without replication: the primary)."""
    if version >= 4:
        role = ops.role()
        return ops.Op(
            role.request,
            lambda response: _accepts(role.finish(response)),
        )
    if version >= 3:
        stats = ops.replication_stats()
        return ops.Op(
            stats.request,
            lambda response: _accepts_stats(stats.finish(response)),
        )
    return None


def _accepts(role: Role) -> tuple[bool, int]:
    return role.accepts_writes, role.epoch


def _accepts_stats(stats: ReplicationStats) -> tuple[bool, int]:
    accepts = stats.role == "off" or (stats.role == "primary" and stats.state != "fenced")
    return accepts, stats.epoch


_RESENT_SAFELY = frozenset(
    {
        # Reads.
        "PING", "STATS", "STATS_EX", "GET_HEAD", "GET_TURN", "GET_LAST", "GET_BEFORE",
        "GET_RANGE_BY_DEPTH", "GET_CHAIN", "GET_BLOB", "HAS_BLOBS", "CTX_SHOW", "CTX_LIST",
        "KV_GET", "KV_LIST", "KV_GET_EX", "KV_LIST_EX", "KV_GET_MANY", "GET_TURN_BY_KEY",
        "TURN_LOG", "READ_PAGE", "FIND_TURNS", "REPLICATION_STATS", "ROLE", "STREAM_LIST",
        "STREAM_READ", "WATCH", "TENANT_LIST", "BACKUP", "GC", "VECTOR_INDEX_LIST",
        "VECTOR_SEARCH", "VECTOR_SEARCH_TURNS",
        # Writes that land once however often they are sent.
        "CTX_OPEN", "KV_PUT", "KV_PUT_EX", "PUT_CHUNKED", "STREAM_SEAL", "TENANT_DELETE",
        "KV_PUT_VECTORS", "VECTOR_INDEX_CREATE",
    }
)  # fmt: skip


def resends_safely(request: p.Request) -> bool:
    """Whether ``request`` may be sent again when its outcome is unknown (its connection
    lost, no answer, UNCONFIRMED): a read, or a write that lands once however often it is
    sent (an APPEND_TURNS or APPEND_TURNS_VECTORS whose every turn has a key, a KV put (with
    vectors too), a chunk, a seal, a tenant's deletion, a vector index's creation: the same
    parameters answer the same index)."""
    inner = getattr(request, "request", None) or getattr(request, "read", None)
    if isinstance(inner, p.Request):
        return resends_safely(inner)
    if isinstance(request, p.AppendTurns):
        return all(spec.extras.key for spec in request.turns)
    if isinstance(request, p.AppendTurnsVectors):
        return all(turn.spec.extras.key for turn in request.turns)
    return request.NAME in _RESENT_SAFELY


def failover_trouble(error: BaseException) -> str | None:
    """Whether ``error`` sends a client of several addresses looking for the primary:
    ``"refused"`` (NOT_PRIMARY: nothing was written), ``"unknown"`` (the connection lost, no
    answer in time, SHUTTING_DOWN or UNCONFIRMED: a write may have landed), else None (any
    other answer, as CONFLICT or QUOTA_EXCEEDED: nothing was written, and the primary it came
    from is the right server, so it is the caller's)."""
    if isinstance(error, NotPrimary):
        return "refused"
    if isinstance(error, (ConnectionLost, RequestTimeout, ShuttingDown, Unconfirmed)):
        return "unknown"
    return None


class ClientCore:
    """The settings both clients take and check the same way, and what follows from them
    alone (no I/O): the base of :class:`ctxstore.Client` and :class:`ctxstore.AsyncClient`
    (whose arguments these are; see :class:`ctxstore.Client`)."""

    PROTOCOL_VERSIONS: ClassVar[tuple[int, int]] = p.SUPPORTED_VERSIONS
    """The protocol versions offered in HELLO."""

    _conn: ConnectionState[Any] | None = None
    """The connection now (each client keeps its own kind), None before the first and after
    a failure or :meth:`close`."""

    def __init__(
        self,
        addr: str | tuple[str, int] | Sequence[str] | None = None,
        *,
        token: str | bytes | None = None,
        timeout: float = ops.DEFAULT_TIMEOUT,
        connect_timeout: float = ops.DEFAULT_CONNECT_TIMEOUT,
        client_name: str = ops.DEFAULT_CLIENT_NAME,
        accept_zstd: bool = True,
        max_in_flight: int = 1024,
        max_response_bytes: int = p.FRAME_BYTES_LIMIT,
        verify_payloads: VerifyPayloads = "when_remote",
        compress_level: int | None = ops.DEFAULT_COMPRESS_LEVEL,
        failover_timeout: float = FAILOVER_TIMEOUT_DEFAULT,
        idempotency: Idempotency = "off",
    ) -> None:
        self._addrs = parse_addrs(addr)
        self._idempotency = ops.check_idempotency(idempotency)
        self._host, self._port = self._addrs[0]
        self._failover_timeout = ops.check_timeout(failover_timeout, FAILOVER_TIMEOUT_DEFAULT)
        self._token = ops.token_bytes(token)
        self._timeout = ops.check_timeout(timeout, ops.DEFAULT_TIMEOUT)
        self._connect_timeout = ops.check_timeout(connect_timeout, ops.DEFAULT_CONNECT_TIMEOUT)
        if len(client_name.encode("utf-8")) > p.NAME_BYTES_MAX:
            raise ValueError(f"client_name is at most {p.NAME_BYTES_MAX} bytes of UTF-8")
        self._client_name = client_name
        self._accept_zstd = accept_zstd
        self._max_in_flight = max(1, max_in_flight)
        self._max_response_bytes = min(max_response_bytes, p.FRAME_BYTES_LIMIT)
        self._verify_payloads = ops.check_verify_payloads(verify_payloads)
        self._compress_level = ops.check_compress_level(compress_level)
        self._closed = False

    @property
    def addr(self) -> str:
        """The server's address as ``HOST:PORT``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    @property
    def addrs(self) -> list[str]:
        """Every address given, as ``HOST:PORT``."""
        return [
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self._addrs
        ]

    @property
    def follows_primary(self) -> bool:
        """Whether the client was given several addresses and follows the primary among
        them (decision 0031 §11)."""
        return len(self._addrs) > 1

    @property
    def connected(self) -> bool:
        """True if the client holds a live connection now."""
        conn = self._conn
        return conn is not None and conn.alive

    @property
    def verifies_raw_payloads(self) -> bool:
        """Whether RAW payloads read on this client's connection are hashed: the
        ``verify_payloads`` option applied to the server's address when the connection was
        made (False only for ``"when_remote"`` and a server on loopback; decision 0015). A
        reconnect decides anew. Before the first connection and after :meth:`close`: True
        (nothing decided yet; hashing is the safe side)."""
        conn = self._conn
        return True if conn is None else conn.hashes_raw

    def _deadline(self, timeout: float | None) -> float:
        """The deadline of a call starting now (ClientClosed once the client was closed)."""
        if self._closed:
            raise ClientClosed("the client was closed")
        return time.monotonic() + ops.check_timeout(timeout, self._timeout)

    def _dial(self, where: tuple[str, int] | None = None) -> Dial:
        """How the next connection is made (the class's :attr:`PROTOCOL_VERSIONS`, read now),
        to ``where`` (default: the address of the moment)."""
        host, port = where or (self._host, self._port)
        return Dial(
            host,
            port,
            self._token,
            self.PROTOCOL_VERSIONS,
            self._client_name,
            self._max_response_bytes,
            self._max_in_flight,
            self._verify_payloads,
        )
