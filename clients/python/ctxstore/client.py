"""The blocking client: one persistent, pipelined connection, safe to share between threads."""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

from . import _net
from . import _ops as ops
from . import _protocol as p
from .errors import (
    CONNECTION_CLOSING_CODES,
    ClientClosed,
    ConnectError,
    ConnectionLost,
    ConnectTimeout,
    CtxstoreError,
    ProtocolError,
    RequestTimeout,
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
    FoundPage,
    GcReport,
    HashLike,
    KeyLike,
    KeyT,
    KvItem,
    KvPage,
    LogCursor,
    LogPage,
    Opened,
    Page,
    ParentLike,
    Patched,
    Purged,
    Redacted,
    Retention,
    ServerInfo,
    Stats,
    Turn,
    TurnInfo,
    TurnPage,
    TurnSpec,
    VerifyPayloads,
)

__all__ = ["Client"]

T = TypeVar("T")
P = TypeVar("P")
I = TypeVar("I")  # noqa: E741 - the item type of a listing

_READ_BUFFER_BYTES = 256 * 1024
_SCRATCH_KEEP_BYTES = 1 << 20
"""The largest buffer for a body that arrives in pieces a connection keeps between frames."""


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


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


class _Pending:
    """One request in flight: the thread waiting for it and what it gets."""

    __slots__ = ("request", "event", "response", "error")

    def __init__(self, request: p.Request) -> None:
        self.request = request
        self.event = threading.Event()
        self.response: p.Response | None = None
        self.error: BaseException | None = None


def _recv_exactly(sock: socket.socket, count: int, deadline: float) -> bytes:
    """Reads exactly ``count`` bytes before ``deadline`` (handshake only)."""
    parts: list[bytes] = []
    while count:
        remaining = _remaining(deadline)
        if remaining <= 0:
            raise socket.timeout("deadline passed")
        sock.settimeout(remaining)
        if parts:
            _net.ack_now(sock)  # the rest of what is read is on its way (see _Receiver)
        chunk = sock.recv(min(count, 1 << 20))
        if not chunk:
            raise ConnectError("the server closed the connection during HELLO")
        parts.append(chunk)
        count -= len(chunk)
    return b"".join(parts)


class _Receiver:
    """The reader thread's side of the socket: cuts frames out of what it receives, through
    its own buffer (no buffered file, so that it knows when part of a frame is in).

    Before each receive that waits for the rest of a frame (part of its header or body is
    in), it asks the kernel to acknowledge what arrived at once (:func:`_net.ack_now`,
    decision 0016): a large answer outgrows the server's congestion window, and the server
    waits for that ACK. A frame that is whole in what was received costs no system call."""

    __slots__ = ("_sock", "_buffer", "_view", "_start", "_end", "_scratch")

    def __init__(self, sock: socket.socket, capacity: int = _READ_BUFFER_BYTES) -> None:
        self._sock = sock
        self._buffer = bytearray(capacity)
        self._view = memoryview(self._buffer)
        # The bytes received and not yet taken: self._buffer[self._start : self._end].
        self._start = 0
        self._end = 0
        self._scratch = bytearray()  # for bodies not whole in the buffer (see body)

    def header(self) -> bytes:
        """The next frame's header bytes; ConnectionLost if the connection ends first."""
        while self._end - self._start < p.HEADER_BYTES:
            if not self._receive():
                raise ConnectionLost(
                    "the server closed the connection"
                    if self._end == self._start
                    else "the connection closed inside a frame header"
                )
        start = self._start
        self._start = start + p.HEADER_BYTES
        return bytes(self._view[start : self._start])

    def _receive(self) -> int:
        """Receives after the bytes kept (moved to the front first); 0 at the end of the
        stream. Only for a header: what is kept is shorter than one."""
        start, end = self._start, self._end
        if start:
            kept = end - start
            self._buffer[:kept] = self._buffer[start:end]
            self._start, self._end = 0, kept
            end = kept
        if end:
            _net.ack_now(self._sock)  # part of a header is in: the rest is on its way
        count = self._sock.recv_into(self._view[end:])
        self._end = end + count
        return count

    def body(self, length: int) -> bytes:
        """The ``length`` bytes of the body whose header was just taken; ConnectionLost if
        the connection ends first. One not whole in what was received is received into a
        scratch buffer, acknowledging before each receive, up to its end (not beyond)."""
        start, end = self._start, self._end
        if end - start >= length:
            self._start = start + length
            return bytes(self._view[start : self._start]) if length else b""
        # The buffer is kept (up to _SCRATCH_KEEP_BYTES) rather than allocated per frame:
        # large fresh allocations cost page faults each time, more than the reading.
        scratch = self._scratch if len(self._scratch) >= length else bytearray(length)
        view = memoryview(scratch)
        got = end - start
        view[:got] = self._view[start:end]
        self._start = self._end = 0
        while got < length:
            _net.ack_now(self._sock)  # part of the frame is in: the rest is on its way
            count = self._sock.recv_into(view[got:length])
            if not count:
                raise ConnectionLost("the connection closed inside a frame")
            got += count
        body = bytes(view[:length])
        view.release()
        if len(scratch) <= _SCRATCH_KEEP_BYTES:
            self._scratch = scratch
        return body


class _Connection:
    """One TCP connection after HELLO: a reader thread matches responses to requests by req_id;
    senders write whole frames under a lock."""

    def __init__(
        self,
        sock: socket.socket,
        info: ServerInfo,
        frame_bytes_max: int,
        max_in_flight: int,
        hashes_raw: bool,
    ) -> None:
        self.info = info
        self.hashes_raw = hashes_raw
        """Whether RAW payloads read on this connection are hashed (decision 0015)."""
        # The socket stays in blocking mode for the reader thread; senders write with
        # MSG_DONTWAIT and poll for room until their deadline (a socket timeout would switch
        # the shared file description to non-blocking under the reader's feet).
        self._sock = sock
        self._receiver = _Receiver(sock)
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLOUT)
        self._frame_bytes_max = frame_bytes_max
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.slot_count = max(1, min(max_in_flight, info.requests_in_flight_max or 1))
        """How many requests this connection may have in flight at once."""
        self._slots = threading.BoundedSemaphore(self.slot_count)
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(2)  # 1 was HELLO
        self._last_id = 1
        self._dead: BaseException | None = None
        self.peak_in_flight = 0
        """The most requests this connection had in flight at once (a diagnostic)."""
        self._reader = threading.Thread(target=self._read_loop, name="ctxstore-reader", daemon=True)
        self._reader.start()

    @classmethod
    def open(
        cls,
        host: str,
        port: int,
        *,
        token: bytes,
        versions: tuple[int, int],
        client_name: str,
        deadline: float,
        frame_bytes_max: int,
        max_in_flight: int,
        verify_payloads: VerifyPayloads,
    ) -> _Connection:
        """Connects and says HELLO before ``deadline``; decides from the server's address
        whether RAW payloads are hashed (``verify_payloads``, decision 0015)."""
        remaining = _remaining(deadline)
        if remaining <= 0:
            raise ConnectTimeout(f"no time left to connect to {host}:{port}")
        try:
            sock = socket.create_connection((host, port), timeout=remaining)
        except socket.timeout:
            raise ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as error:
            raise ConnectError(f"cannot connect to {host}:{port}: {error}") from error
        try:
            peer: object = sock.getpeername()
        except OSError:
            peer = None  # the socket cannot tell: hashed, as for a remote server
        hashes_raw = ops.hashes_raw_from(verify_payloads, peer)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = ops.hello_request(versions, token, client_name)
            sock.settimeout(max(_remaining(deadline), 0.001))
            try:
                sock.sendall(b"".join(p.encode_request(1, hello)))
            except (BrokenPipeError, ConnectionResetError):
                pass  # a refusing server (OVERLOADED) may close first: read its answer
            header = p.FrameHeader.decode(_recv_exactly(sock, p.HEADER_BYTES, deadline))
            header.check(frame_bytes_max)
            body = _recv_exactly(sock, header.len, deadline)
            if header.req_id not in (1, 0) or (
                header.req_id == 0 and header.msg_type != p.ERROR_TYPE
            ):
                raise ProtocolError(f"HELLO was answered with req_id {header.req_id}")
            info = ops.hello_result(p.decode_response(header.msg_type, body), versions)
            sock.settimeout(None)
            return cls(sock, info, frame_bytes_max, max_in_flight, hashes_raw)
        except socket.timeout:
            sock.close()
            raise ConnectTimeout(f"HELLO to {host}:{port} timed out") from None
        except CtxstoreError:
            sock.close()
            raise
        except OSError as error:
            sock.close()
            raise ConnectError(f"connection to {host}:{port} failed: {error}") from error

    @property
    def alive(self) -> bool:
        """False once the connection failed or was closed."""
        return self._dead is None

    # -- reading ---------------------------------------------------------------------------

    def _read_loop(self) -> None:
        reason: BaseException
        try:
            receiver = self._receiver
            while True:
                header = p.FrameHeader.decode(receiver.header())
                header.check(self._frame_bytes_max, p.OVERLAYS)  # overlaid answers (AsOf)
                self._dispatch(header, receiver.body(header.len))
        except BaseException as error:  # noqa: BLE001 - the thread's end, whatever it was
            reason = error
        self._fail(reason)
        try:
            self._sock.close()
        except OSError:
            pass

    def _dispatch(self, header: p.FrameHeader, body: bytes) -> None:
        with self._lock:
            pending = self._pending.pop(header.req_id, None)
        if pending is None:
            if header.req_id == 0 and header.msg_type == p.ERROR_TYPE:
                error = p.decode_response(header.msg_type, body)
                assert isinstance(error, p.ErrorResponse)
                raise error_for_code(error.code, error.message, error.detail)
            if 0 < header.req_id <= self._last_id:
                return  # the late answer to a request whose caller gave up
            raise ProtocolError(f"a response to req_id {header.req_id}, which was never sent")
        if header.msg_type not in (pending.request.response_type, p.ERROR_TYPE):
            message = (
                f"{pending.request.NAME} (req_id {header.req_id}) was answered with message "
                f"type {header.msg_type:#06x}"
            )
            pending.error = ProtocolError(message)
            pending.event.set()
            raise ProtocolError(message)
        try:
            response = p.decode_response(
                header.msg_type,
                body,
                header.flags,
                allow_unknown=isinstance(pending.request, p.RawRequest),
            )
        except ProtocolError as error:
            pending.error = ProtocolError(error.message)
            pending.event.set()
            raise
        pending.response = response
        pending.event.set()
        if isinstance(response, p.ErrorResponse) and response.code in CONNECTION_CLOSING_CODES:
            # The server closes the connection after this answer: no new request may use it.
            self._fail(error_for_code(response.code, response.message, response.detail))

    def _fail(self, reason: BaseException) -> None:
        """Ends the connection: every request in flight fails."""
        with self._lock:
            if self._dead is not None:
                return
            self._dead = reason
            pending = list(self._pending.values())
            self._pending.clear()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for entry in pending:
            entry.error = lost_error(reason)
            entry.event.set()

    def close(self, reason: BaseException) -> None:
        """Closes the connection; requests in flight fail with ``reason``'s error."""
        self._fail(reason)
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=1.0)

    # -- requests --------------------------------------------------------------------------

    def submit(self, request: p.Request, deadline: float) -> tuple[int, _Pending]:
        """Sends ``request``; returns its req_id and the slot its response arrives in."""
        if not self._slots.acquire(timeout=max(_remaining(deadline), 0)):
            raise RequestTimeout(
                f"{request.NAME}: no free in-flight slot before the deadline "
                f"({self.info.requests_in_flight_max} requests in flight)"
            )
        try:
            pending = _Pending(request)
            with self._lock:
                if self._dead is not None:
                    raise lost_error(self._dead)
                req_id = next(self._ids)
                self._last_id = req_id
                self._pending[req_id] = pending
                self.peak_in_flight = max(self.peak_in_flight, len(self._pending))
            try:
                chunks = p.encode_request(req_id, request)
                ops.check_sendable(request, chunks, self.info)
                self._send(request, chunks, deadline)
            except BaseException:
                with self._lock:
                    self._pending.pop(req_id, None)
                raise
        except BaseException:
            self._slots.release()
            raise
        return req_id, pending

    def _send(self, request: p.Request, chunks: list[bytes], deadline: float) -> None:
        if not self._send_lock.acquire(timeout=max(_remaining(deadline), 0)):
            raise RequestTimeout(f"{request.NAME}: could not send before the deadline")
        try:
            if self._dead is not None:
                raise lost_error(self._dead)
            if _remaining(deadline) <= 0:
                raise RequestTimeout(f"{request.NAME}: the deadline passed before sending")
            try:
                for chunk in chunks:
                    self._send_all(chunk, deadline)
            except socket.timeout:
                # Part of a frame may be on the wire: this connection's framing is lost.
                error = RequestTimeout(f"{request.NAME}: sending timed out")
                self._fail(ConnectionLost("a frame could not be sent completely in time"))
                raise error from None
            except OSError as error:
                self._fail(error)
                raise lost_error(error) from None
        finally:
            self._send_lock.release()

    def _send_all(self, chunk: bytes, deadline: float) -> None:
        view = memoryview(chunk)
        while view:
            try:
                sent = self._sock.send(view, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent:
                view = view[sent:]
                continue
            remaining = _remaining(deadline)
            if remaining <= 0:
                raise socket.timeout("send deadline passed")
            self._poller.poll(max(1, int(remaining * 1000)))

    def wait(self, req_id: int, pending: _Pending, deadline: float) -> p.Response:
        """The response to a submitted request (waits until ``deadline``)."""
        try:
            if not pending.event.wait(max(_remaining(deadline), 0)):
                with self._lock:
                    self._pending.pop(req_id, None)
                if not pending.event.is_set():
                    raise RequestTimeout(f"{pending.request.NAME}: no response in time")
            if pending.error is not None:
                raise pending.error
            assert pending.response is not None
            return pending.response
        finally:
            self._slots.release()


class Client(ops.ClientCore):
    """A blocking ctxstore client over one persistent TCP connection.

    A context is named in every call by its ContextID (``int``) or by its unique name
    (``str``; protocol version 2: a server that speaks only version 1 makes such calls raise
    :class:`~ctxstore.errors.NotSupported` before anything is sent).

    Thread-safe: any number of threads may call it at once; their requests are pipelined on
    the connection (up to the server's in-flight limit) and matched by req_id.

    Every call takes a ``timeout`` in seconds (default: the client's ``timeout``) and raises
    :class:`~ctxstore.errors.RequestTimeout` when it passes. If the connection drops, calls in
    flight raise :class:`~ctxstore.errors.ConnectionLost` and the next call reconnects (a call
    is never retried by the client: an append may or may not have happened; one with a
    ``key`` can be retried safely, its retry answers the first turn as ``existing``).

    Args:
        addr: ``"HOST:PORT"``, ``"[V6]:PORT"`` or ``(host, port)``; by default
            ``$CTXSTORE_ADDR``, else ``127.0.0.1:7411`` (as the CLI).
        token: the server's token (``--token-file``), if it has one; by default
            ``$CTXSTORE_TOKEN`` (as the CLI); ``""`` for none whatever the environment
            says. White space around it is taken off, as the server trims its token file
            (a token read from that file, newline and all, is the server's token).
        timeout: the default timeout of each call, in seconds.
        connect_timeout: the limit for TCP connect plus HELLO, in seconds.
        client_name: sent in HELLO (the server logs it).
        accept_zstd: let the server send stored zstd payloads (the client inflates and
            verifies them); saves server CPU and bandwidth.
        verify_payloads: which payloads the client hashes (decision 0015). Every payload's
            length is checked and every zstd payload is inflated and hashed, whatever this
            says. A raw payload was hashed by the server when it read it: ``"when_remote"``
            (the default) hashes it again only when the server is not on a loopback address
            (decided per connection; see :attr:`verifies_raw_payloads`), ``"always"`` hashes
            it on loopback too. Any other value: ValueError.
        max_in_flight: the most requests this client has in flight at once (the server's limit
            applies too).
        max_response_bytes: the largest response frame accepted (larger: ProtocolError).
        lazy: connect at the first call instead of in the constructor.
    """

    def __init__(
        self,
        addr: str | tuple[str, int] | None = None,
        *,
        token: str | bytes | None = None,
        timeout: float = ops.DEFAULT_TIMEOUT,
        connect_timeout: float = ops.DEFAULT_CONNECT_TIMEOUT,
        client_name: str = ops.DEFAULT_CLIENT_NAME,
        accept_zstd: bool = True,
        max_in_flight: int = 1024,
        max_response_bytes: int = p.FRAME_BYTES_LIMIT,
        lazy: bool = False,
        verify_payloads: VerifyPayloads = "when_remote",
    ) -> None:
        super().__init__(
            addr,
            token=token,
            timeout=timeout,
            connect_timeout=connect_timeout,
            client_name=client_name,
            accept_zstd=accept_zstd,
            max_in_flight=max_in_flight,
            max_response_bytes=max_response_bytes,
            verify_payloads=verify_payloads,
        )
        self._conn: _Connection | None = None
        self._conn_lock = threading.Lock()
        if not lazy:
            self._connection(time.monotonic() + self._connect_timeout)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; calls in flight raise ClientClosed; later calls too."""
        self._closed = True
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close(ClientClosed("the client was closed"))

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            conn = self._conn
            if conn is not None:
                conn.close(ClientClosed("the client was garbage-collected"))
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def _connection(self, deadline: float) -> _Connection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        if not self._conn_lock.acquire(timeout=max(_remaining(deadline), 0)):
            raise ConnectTimeout("another thread's reconnect did not finish in time")
        try:
            if self._closed:
                raise ClientClosed("the client was closed")
            conn = self._conn
            if conn is None or not conn.alive:
                if conn is not None:
                    conn.close(ConnectionLost("replaced by a new connection"))
                self._conn = None
                conn = _Connection.open(
                    self._host,
                    self._port,
                    token=self._token,
                    versions=self.PROTOCOL_VERSIONS,
                    client_name=self._client_name,
                    deadline=min(deadline, time.monotonic() + self._connect_timeout),
                    frame_bytes_max=self._max_response_bytes,
                    max_in_flight=self._max_in_flight,
                    verify_payloads=self._verify_payloads,
                )
                self._conn = conn
            return conn
        finally:
            self._conn_lock.release()

    def _run(self, op: ops.Op[T], timeout: float | None) -> T:
        deadline = self._deadline(timeout)
        conn = self._connection(deadline)
        req_id, pending = conn.submit(op.request, deadline)
        response = conn.wait(req_id, pending, deadline)
        return ops.finish_op(op, response, conn.hashes_raw)

    def _run_many(self, batch: Sequence[ops.Op[T]], timeout: float | None) -> list[T]:
        """Sends the requests and collects their responses, pipelined on one thread: at most
        the connection's in-flight limit are outstanding (past it, the oldest response is
        awaited before the next request goes out, so a long batch cannot wait for a slot that
        only its own unread responses hold). The first error is raised once all are in."""
        deadline = self._deadline(timeout)
        conn = self._connection(deadline)
        window = conn.slot_count
        sent: list[tuple[int, _Pending]] = []
        responses: list[p.Response | BaseException] = []

        def collect(index: int, until: float) -> None:
            req_id, pending = sent[index]
            try:
                responses.append(conn.wait(req_id, pending, until))
            except CtxstoreError as error:
                responses.append(error)

        try:
            for op in batch:
                if len(sent) - len(responses) >= window:
                    collect(len(responses), deadline)
                sent.append(conn.submit(op.request, deadline))
        except BaseException:
            while len(responses) < len(sent):  # free the slots of what was sent
                collect(len(responses), time.monotonic())
            raise
        while len(responses) < len(sent):
            collect(len(responses), deadline)
        results = []
        for op, response in zip(batch, responses, strict=True):
            if isinstance(response, BaseException):
                raise response
            results.append(ops.finish_op(op, response, conn.hashes_raw))
        return results

    def _drive(self, plan: ops.Plan[T], timeout: float | None) -> T:
        """Runs a call of several steps (see :mod:`ctxstore._ops`); ``timeout`` per step."""
        result: Any = None
        error: CtxstoreError | None = None
        while True:
            try:
                step = plan.throw(error) if error is not None else plan.send(result)
            except StopIteration as stop:
                return cast(T, stop.value)
            result, error = None, None
            try:
                if isinstance(step, ops.Op):
                    result = self._run(step, timeout)
                elif isinstance(step, ops.Many):
                    result = self._run_many(step.ops, timeout)
                else:
                    result = self.server_info(timeout=timeout)
            except CtxstoreError as caught:
                error = caught

    def _iterate(self, paging: ops.Paging[P, I], timeout: float | None) -> Iterator[I]:
        """The items of every page of a listing, fetched as the iteration reaches them."""
        op: ops.Op[P] | None = paging.first
        while op is not None:
            page = self._run(op, timeout)
            yield from paging.items(page)
            op = paging.follow(page)

    # -- requests --------------------------------------------------------------------------

    def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """What HELLO told: the negotiated version, the server's name and limits (connects if
        needed)."""
        return self._connection(self._deadline(timeout)).info

    def request(self, request: p.Request, *, timeout: float | None = None) -> p.Response:
        """Sends any request (see :mod:`ctxstore._protocol`) and returns its decoded response;
        an ERROR raises its exception. The low-level door for messages without a method."""
        return self._run(ops.raw(request), timeout)

    def ping(self, nonce: int | None = None, *, timeout: float | None = None) -> None:
        """Round trip to the server (PING/PONG); checks that the nonce is echoed."""
        self._run(ops.ping(nonce), timeout)

    def create_context(self, base_turn_id: int = 0, *, timeout: float | None = None) -> ContextHead:
        """A new context: empty, or with its head at ``base_turn_id`` (copies nothing)."""
        return self._run(ops.create_context(base_turn_id), timeout)

    def fork(self, turn_id: int, *, timeout: float | None = None) -> ContextHead:
        """A new context whose head is ``turn_id`` (O(1); 0 raises InvalidArgument)."""
        return self._run(ops.fork(turn_id), timeout)

    def head(self, context: ContextLike, *, timeout: float | None = None) -> ContextHead:
        """The context's head (NotFound if there is no such context)."""
        return self._run(ops.head(context), timeout)

    def append(
        self,
        context: ContextLike,
        payload: bytes | bytearray | memoryview,
        *,
        type_tag: int = 0,
        codec: int = 0,
        expected_head: int | None = None,
        parent: ParentLike = None,
        key: KeyLike | None = None,
        labels: Mapping[str, str] | None = None,
        links: Sequence[int] = (),
        summary: bool = False,
        timeout: float | None = None,
    ) -> Appended:
        """Appends a turn with ``payload`` after the context's head, durably; the head moves
        to it.

        With ``expected_head`` (0: the context must be empty) the append happens only if the
        head is that turn; else :class:`~ctxstore.errors.Conflict`, whose ``actual_head`` is
        the head. ``type_tag`` (u64) and ``codec`` (u32) are the caller's tags.

        Protocol version 2 (sent as APPEND_TURNS when any is given; see :class:`TurnSpec`):
        ``parent`` ``"root"`` or a TurnID the context owns (time travel: the head moves to the
        new turn); ``key`` unique in the context — appending a key it has answers that turn
        with ``existing`` True and writes nothing, so a retry after ``ConnectionLost`` is
        safe; ``labels``; ``links`` to other turns; ``summary``.
        """
        spec = TurnSpec(
            payload,
            parent=parent,
            key=key,
            labels=labels,
            links=links,
            summary=summary,
            type_tag=type_tag,
            codec=codec,
        )
        return self._run(ops.append_spec(context, spec, expected_head), timeout)

    def append_by_hash(
        self,
        context: ContextLike,
        payload_hash: HashLike,
        *,
        type_tag: int = 0,
        codec: int = 0,
        expected_head: int | None = None,
        parent: ParentLike = None,
        key: KeyLike | None = None,
        labels: Mapping[str, str] | None = None,
        links: Sequence[int] = (),
        summary: bool = False,
        timeout: float | None = None,
    ) -> Appended:
        """Appends a turn whose payload is a blob already stored (nothing is uploaded;
        NotFound if the blob is not stored); the options are :meth:`append`'s."""
        spec = TurnSpec(
            payload_hash=payload_hash,
            parent=parent,
            key=key,
            labels=labels,
            links=links,
            summary=summary,
            type_tag=type_tag,
            codec=codec,
        )
        return self._run(ops.append_spec(context, spec, expected_head), timeout)

    def get_turn(
        self, turn_id: int, *, as_of: int | None = None, timeout: float | None = None
    ) -> Turn:
        """One turn's metadata (no payload: use :meth:`get_blob` with its hash). ``as_of``
        (version 2): the overlay view to read — 0 the latest, else the view as of that
        overlay sequence number — with ``redacted`` and ``overlay_seq`` set."""
        return self._run(ops.view(ops.get_turn(turn_id), as_of), timeout)

    def last(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Page:
        """The ``limit`` newest turns of the context, oldest first (``payloads``: with their
        checked bytes, see ``verify_payloads``). Continue with :meth:`before` and the page's
        ``next_before``."""
        return self._run(
            ops.view(ops.last(context, limit, payloads, self._accept_zstd), as_of), timeout
        )

    def before(
        self,
        context: ContextLike,
        before_turn_id: int,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Page:
        """The ``limit`` turns older than ``before_turn_id``, oldest first (cursor paging)."""
        return self._run(
            ops.view(
                ops.before(context, before_turn_id, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    def range_by_depth(
        self,
        context: ContextLike,
        from_depth: int,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Page:
        """The context's turns with depth in ``from_depth .. from_depth + limit``."""
        return self._run(
            ops.view(
                ops.range_by_depth(context, from_depth, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    def chain(
        self,
        turn_id: int,
        from_depth: int = 0,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Page:
        """The chain root → ``turn_id``: ``limit`` turns from ``from_depth``."""
        return self._run(
            ops.view(ops.chain(turn_id, from_depth, limit, payloads, self._accept_zstd), as_of),
            timeout,
        )

    def replay(
        self,
        turn_id: int,
        *,
        payloads: bool = False,
        page_size: int | None = None,
        timeout: float | None = None,
    ) -> list[Turn]:
        """The whole chain root → ``turn_id``, oldest first, paging :meth:`chain` (``timeout``
        per page). Where a garbage collection took the history below a pruned context's floor,
        the kept turns: from the oldest the server still has up to ``turn_id`` (as the CLI's
        ``replay``). NotFound if ``turn_id`` itself is not there."""
        return self._drive(ops.replay(turn_id, payloads, page_size, self._accept_zstd), timeout)

    def get_blob(self, payload_hash: HashLike, *, timeout: float | None = None) -> bytes:
        """A payload by its hash, checked against it as ``verify_payloads`` says (NotFound if
        it is not stored)."""
        return self._run(ops.get_blob(payload_hash, self._accept_zstd), timeout)

    def has_blobs(self, hashes: Sequence[HashLike], *, timeout: float | None = None) -> list[bool]:
        """Which of ``hashes`` are stored, in order. Lists longer than the server's
        ``has_blobs_max`` are split into several pipelined requests."""
        return self._drive(ops.has_blobs(hashes), timeout)

    def stats(self, *, timeout: float | None = None) -> Stats:
        """The server's counters; from a version-2 server also the garbage collector's
        (``live_bytes``, ``dead_bytes``, ``gc_runs``, ``bytes_reclaimed_total``; None from a
        server without them)."""
        return self._drive(ops.stats(), timeout)

    # -- version 2: contexts by name, tags, listing, key-value ---------------------------------

    def open_context(
        self,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        base_turn_id: int = 0,
        get_or_create: bool = False,
        *,
        timeout: float | None = None,
    ) -> Opened:
        """A new context, in one durable record: empty (or headed at ``base_turn_id``),
        optionally named (1-256 bytes of UTF-8, unique) and tagged.

        A taken ``name`` raises :class:`~ctxstore.errors.AlreadyExists` (its ``context_id``
        is the owner), unless ``get_or_create``: then the existing context is answered (its
        tags and head as they are) with ``created`` False. Returns ``(info, created)``.
        """
        return self._run(ops.open_context(name, tags, base_turn_id, get_or_create), timeout)

    def clone_context(
        self,
        source: ContextLike,
        name: str,
        *,
        tags: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ContextInfo:
        """A copy of ``source`` named ``name``: its head, tags (``tags`` replace copied ones
        of the same key) and key-value entries, sharing every turn and blob (O(its
        metadata)). A taken name raises AlreadyExists."""
        return self._run(ops.clone_context(source, name, tags), timeout)

    def context_info(self, context: ContextLike, *, timeout: float | None = None) -> ContextInfo:
        """The context's head, name, tags and times (NotFound for an unknown id or name)."""
        return self._run(ops.context_info(context), timeout)

    def delete_context(self, context: ContextLike, *, timeout: float | None = None) -> Retention:
        """Deletes the context: from then on every request naming it (by id or name) raises
        NotFound and its name may be taken again; its turns and blobs stay while another
        context (a fork, a clone) reaches them. Returns the context as it was just before."""
        return self._run(ops.delete_context(context), timeout)

    def prune_context(
        self, context: ContextLike, keep: int, *, timeout: float | None = None
    ) -> Retention:
        """Keeps only the newest ``keep`` (>= 1) depths of the context's chain reachable
        through it (LangGraph's ``prune(keep_latest)``): reads, the turn log and key look-ups
        stop at the returned ``floor_depth``, which never moves down. ``keep=0`` raises
        InvalidArgument (delete instead)."""
        return self._run(ops.prune_context(context, keep), timeout)

    def set_context_ttl(
        self, context: ContextLike, ttl_ms: int | None, *, timeout: float | None = None
    ) -> Retention:
        """Sets the context's time to live in milliseconds (None clears it): once not updated
        for that long, the server deletes it. At least 1 ms (0 raises ValueError: it would
        mean "never", not "now"), at most 100 years (else InvalidArgument)."""
        return self._run(ops.context_ttl(context, ttl_ms, True), timeout)

    def context_retention(self, context: ContextLike, *, timeout: float | None = None) -> Retention:
        """The context with its floor depth and time to live."""
        return self._run(ops.context_ttl(context, None, False), timeout)

    def backup(self, directory: str, *, timeout: float | None = 86_400.0) -> BackupReport:
        """Has the server write a consistent copy of its store into ``directory`` (an
        absolute path on the server's host, absent or empty) while it goes on serving;
        returns when the copy is complete and synced. A backup takes as long as copying the
        store, so it waits up to ``timeout`` seconds (default a day), not the request timeout;
        a backup no longer waited for goes on on the server."""
        return self._run(ops.backup(directory), timeout)

    def gc(self, *, timeout: float | None = 3_600.0) -> GcReport:
        """Runs a garbage collection on the server now (protocol version 2) and returns what
        it did: turns and blobs no live context reaches any more are collected (a collected
        turn is NotFound from then on) and packs whose dead share passes the server's
        ``--gc-pack-dead-percent`` are rewritten. It takes as long as rewriting those packs,
        so it waits up to ``timeout`` seconds (default an hour), not the request timeout; a
        collection no longer waited for goes on on the server. One collection or backup at a
        time: while one runs (the server's schedule included), this one waits for it to
        finish, then runs its own round."""
        return self._run(ops.gc(), timeout)

    def patch_turn(
        self,
        turn_id: int,
        payload: bytes | bytearray | memoryview,
        *,
        timeout: float | None = None,
    ) -> Patched:
        """Gives the turn a new payload (an overlay, version 2): reads show it from now on,
        reads ``as_of`` an earlier sequence number the payload it had then. The turn keeps
        its id, parent, depth, key, labels and links. NotFound for an unknown turn;
        InvalidArgument for a redacted one."""
        return self._run(ops.patch_turn(turn_id, payload), timeout)

    def redact_turn(self, turn_id: int, *, timeout: float | None = None) -> Redacted:
        """Takes the turn's payload away in every view (version 2): reads return it with
        ``redacted`` True and an empty payload; its bytes leave the disk at the next garbage
        collection. Final: redacting again is InvalidArgument; NotFound for an unknown turn."""
        return self._run(ops.redact_turn(turn_id), timeout)

    def purge_blob(self, payload_hash: HashLike, *, timeout: float | None = None) -> Purged:
        """Redacts every turn naming the blob and makes reads of it by hash NotFound (version
        2, the compliance path; run :meth:`gc` to remove its bytes now). NotFound for a hash
        the store never had."""
        return self._run(ops.purge_blob(payload_hash), timeout)

    def put_chunked(
        self,
        payload_hash: HashLike,
        chunks: Sequence[tuple[HashLike, int]],
        sent: Iterable[tuple[int, ops.ChunkBytes]] | Mapping[int, ops.ChunkBytes] = (),
        *,
        base: tuple[HashLike, int] | None = None,
        timeout: float | None = None,
    ) -> ChunkedStored:
        """Stores a payload given as its chunks (protocol version 2, PUT_CHUNKED), sending
        the bytes of only the chunks the server does not have; then name it by hash
        (``append_by_hash``, or a ``TurnSpec(payload_hash=...)``).

        ``chunks``: every chunk of the payload, in order, as ``(BLAKE3 hash, length)``
        (1 byte to 1 MiB each, at most 65,536; the payload is their bytes concatenated).
        ``sent``: ``(index, bytes)`` pairs (or a mapping ``{index: bytes}``), in any order,
        each chunk at most once, with exactly its entry's length. A chunk not sent must be
        stored already, as a blob of that length (``has_blobs`` tells which are):
        ``NotFound`` otherwise, and then send it. The server checks every sent chunk and the
        payload they rebuild against their hashes (``HashMismatch``), stores the chunks (each
        a blob, deduplicated) and the payload, and answers once both are durable. Nothing is
        written on any error. Until a turn names the payload, garbage collection gives it one
        interval of grace: append it right after. Breaking the limits above raises
        ``ValueError`` before anything is sent.

        This client never cuts payloads into chunks by itself: ``append`` sends a payload
        whole (the server stores large by-value payloads as content-defined chunks on disk
        anyway). Cut them yourself to save bytes on the wire: any cut is accepted, and one
        like the server's (FastCDC 2020, its ``--chunk-*`` sizes) finds the unchanged chunks
        of a grown state stored already. ``base=(hash, kept)`` names a stored chunked payload
        whose first ``kept`` chunks come first; ``chunks`` and the indexes of ``sent`` follow
        them (a grown state lists only what comes after the prefix it shares with the
        previous one: O(growth) on the wire). A base the server no longer has is
        ``NotFound``."""
        return self._run(ops.put_chunked(payload_hash, chunks, sent, base), timeout)

    def tag_context(
        self,
        context: ContextLike,
        set: Mapping[str, str] | None = None,  # noqa: A002 - the protocol's word
        remove: Iterable[str] | str = (),
        expected_head: int | None = None,
        *,
        timeout: float | None = None,
    ) -> ContextInfo:
        """Sets the tags of ``set`` and removes the keys of ``remove`` (absent keys are no
        error), atomically. With ``expected_head`` only if the context's head is that turn
        (0: empty), else :class:`~ctxstore.errors.Conflict` with its ``actual_head``; so a
        status change and the head agree. Limits (TooLarge): 32 tags, key 1-64 bytes, value
        up to 1 KiB. Returns the context after the change."""
        return self._run(ops.tag_context(context, set, remove, expected_head), timeout)

    def name_context(
        self, context: ContextLike, name: str, *, timeout: float | None = None
    ) -> ContextInfo:
        """Names a context that has none (names never change: InvalidArgument for a named
        context; AlreadyExists for a taken name)."""
        return self._run(ops.name_context(context, name), timeout)

    def list_contexts(
        self,
        tags: Mapping[str, str] | None = None,
        name_prefix: str | None = None,
        updated_after_unix_ms: int | None = None,
        updated_before_unix_ms: int | None = None,
        *,
        cursor: int | str | None = None,
        limit: int = 100,
        timeout: float | None = None,
    ) -> ContextPage:
        """One page of the contexts matching every condition: each tag equality of ``tags``,
        a name starting with ``name_prefix`` (pages then go in name order, else in ContextID
        order), ``updated_at_unix_ms`` strictly after / before the bounds. ``limit`` up to
        1,000 (TooLarge above). Pass the page's ``next_cursor`` as ``cursor`` for the next
        one, or use :meth:`iter_contexts`."""
        return self._run(
            ops.list_contexts(
                tags, name_prefix, updated_after_unix_ms, updated_before_unix_ms, cursor, limit
            ),
            timeout,
        )

    def iter_contexts(
        self,
        tags: Mapping[str, str] | None = None,
        name_prefix: str | None = None,
        updated_after_unix_ms: int | None = None,
        updated_before_unix_ms: int | None = None,
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Iterator[ContextInfo]:
        """Every context matching :meth:`list_contexts`' conditions, page after page
        (fetched as the iteration goes; ``timeout`` per page). Each match is returned once."""
        paging = ops.contexts_paging(
            tags, name_prefix, updated_after_unix_ms, updated_before_unix_ms, page_size
        )
        return self._iterate(paging, timeout)

    def kv_put(
        self,
        context: ContextLike,
        entries: Mapping[KeyT, bytes | bytearray | memoryview],
        if_absent: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        """Puts every ``key: value`` of ``entries`` in the context's key-value map, in one
        durable record (all or none). Keys are bytes (1-256) or str (as UTF-8); values are
        bytes, stored as blobs (equal values once). ``if_absent``: keys the context has keep
        their values. At most 128 entries per call (TooLarge); none sends nothing."""
        self._drive(ops.kv_put(context, entries, if_absent), timeout)

    def kv_get(
        self, context: ContextLike, key: KeyLike, *, timeout: float | None = None
    ) -> bytes | None:
        """The value of ``key``, checked against its BLAKE3 hash as ``verify_payloads`` says
        (zstd inflated and hashed always), or None if the context has no such key (NotFound if
        there is no such context)."""
        return self._drive(ops.kv_get(context, key, self._accept_zstd), timeout)

    def kv_delete(
        self,
        context: ContextLike,
        keys: Iterable[KeyLike] | KeyLike,
        *,
        timeout: float | None = None,
    ) -> None:
        """Deletes ``keys`` (one key or several; absent keys are no error) in one durable
        record. At most 128 per call (TooLarge); none sends nothing."""
        self._drive(ops.kv_delete(context, keys), timeout)

    def kv_list(
        self,
        context: ContextLike,
        prefix: KeyLike = b"",
        after: KeyLike = b"",
        *,
        limit: int = 100,
        timeout: float | None = None,
    ) -> KvPage:
        """One page of the entries whose keys start with ``prefix``, in key order, after the
        key ``after`` (empty: from the first). ``limit`` up to 1,000. Pass the page's
        ``next_after`` as ``after`` for the next one, or use :meth:`iter_kv`."""
        return self._run(ops.kv_list(context, prefix, after, limit), timeout)

    def iter_kv(
        self,
        context: ContextLike,
        prefix: KeyLike = b"",
        after: KeyLike = b"",
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Iterator[KvItem]:
        """Every entry whose key starts with ``prefix``, in key order, page after page."""
        return self._iterate(ops.kv_paging(context, prefix, after, page_size), timeout)

    # -- version 2: turns for agent frameworks -------------------------------------------------

    def append_turns(
        self,
        context: ContextLike,
        turns: Iterable[TurnSpec],
        *,
        expected_head: int | None = None,
        timeout: float | None = None,
    ) -> list[Appended]:
        """Appends ``turns`` to the context in order, all or none, in one durable write (one
        group commit): e.g. an agent step's tool call, its result and a message. Each turn
        hangs from the one before it unless its ``parent`` says otherwise; the head moves to
        the last. With ``expected_head`` only if the head is that turn (Conflict otherwise).
        A turn whose key the context has is answered as that turn with ``existing`` True and
        is not written again. Limits (TooLarge, nothing written): 64 turns; per turn a key of
        64 bytes, 16 labels in 1 KiB, 8 links (each must exist: NotFound); a parent the
        context does not own is InvalidArgument. Returns one :class:`Appended` per turn."""
        return self._run(ops.append_turns(context, turns, expected_head), timeout)

    def turn_by_key(
        self,
        context: ContextLike,
        key: KeyLike,
        *,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> TurnInfo | None:
        """The context's turn with ``key`` (its own, or inherited through a fork or clone),
        with its labels and links; None if no turn has it (NotFound for an unknown
        context)."""
        return self._drive(ops.turn_by_key(context, key, as_of), timeout)

    def turn_log(
        self,
        context: ContextLike,
        labels: Mapping[str, str] | None = None,
        *,
        cursor: LogCursor | None = None,
        limit: int = 100,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> LogPage:
        """One page of the context's turn log: every turn it owns, newest first across all
        its branches, then the turns it inherited (a clone: its source's up to the clone; a
        fork: its base's chain), filtered on the server by every label of ``labels``.
        ``limit`` 1-1,000. A page may be short, even empty, while more match: pass its
        ``next_cursor`` as ``cursor`` until it is None, or use :meth:`iter_turn_log`."""
        return self._run(
            ops.view(
                ops.turn_log(context, labels, cursor, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    def iter_turn_log(
        self,
        context: ContextLike,
        labels: Mapping[str, str] | None = None,
        *,
        page_size: int = 1000,
        payloads: bool = False,
        timeout: float | None = None,
    ) -> Iterator[TurnInfo]:
        """Every turn of :meth:`turn_log`, newest first, page after page (fetched as the
        iteration goes; ``timeout`` per page)."""
        paging = ops.turn_log_paging(context, labels, page_size, payloads, self._accept_zstd)
        return self._iterate(paging, timeout)

    def find_turns(
        self,
        key: str,
        value: str,
        *,
        before: int | None = None,
        limit: int = 100,
        timeout: float | None = None,
    ) -> FoundPage:
        """One page of the turns of every context labelled ``key = value`` (an indexed label
        key: ``run_id``, ``thread_id`` or one starting ``idx.``), newest first, from the
        server's store-wide label index (protocol version 2). Turns of deleted contexts and
        below a context's floor are not returned. ``limit`` 1-1,000; pass the page's
        ``next_before`` as ``before`` for the next page, or use :meth:`iter_find_turns`."""
        return self._run(ops.find_turns(key, value, before, limit), timeout)

    def iter_find_turns(
        self,
        key: str,
        value: str,
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Iterator[TurnInfo]:
        """Every turn of :meth:`find_turns`, newest first, page after page (fetched as
        the iteration goes; ``timeout`` per page)."""
        return self._iterate(ops.find_turns_paging(key, value, page_size), timeout)

    def window(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> TurnPage:
        """What to send a model: the context's chain from its latest summary turn (inclusive;
        from the root when there is none) to the head, oldest first — its newest ``limit``
        turns if it is longer (continue with :meth:`read_page` ``before=``)."""
        return self._run(
            ops.view(
                ops.read_page(context, p.PageKind.WINDOW, 0, 0, limit, payloads, self._accept_zstd),
                as_of,
            ),
            timeout,
        )

    def read_page(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        before: int | None = None,
        from_depth: int | None = None,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> TurnPage:
        """A page of the context's chain, oldest first, each turn with its key, labels and
        links: the newest ``limit`` turns; with ``before`` the ``limit`` turns older than that
        turn (the previous page's ``next_before``; it must be on the chain); with
        ``from_depth`` those with depth in ``from_depth .. from_depth + limit``."""
        kind, before_turn_id, depth = ops.page_kind(before, from_depth)
        return self._run(
            ops.view(
                ops.read_page(
                    context, kind, before_turn_id, depth, limit, payloads, self._accept_zstd
                ),
                as_of,
            ),
            timeout,
        )
