"""The blocking client: one persistent, pipelined connection, safe to share between threads."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TypeVar

from . import _net
from . import _ops as ops
from . import _protocol as p
from ._calls import Calls
from ._connection import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    FAILOVER_TIMEOUT_DEFAULT,
    SCRATCH_KEEP_BYTES,
    ConnectionState,
    Dial,
    FollowFrames,
    failover_trouble,
    lost_error,
    primary_probe,
    resends_safely,
)
from .errors import (
    ClientClosed,
    ConnectError,
    ConnectionLost,
    ConnectTimeout,
    CtxstoreError,
    NoPrimary,
    OutcomeUnknown,
    RequestTimeout,
)
from .types import (
    Idempotency,
    ServerInfo,
    VerifyPayloads,
)

__all__ = ["Client"]

T = TypeVar("T")
P = TypeVar("P")
I = TypeVar("I")  # noqa: E741 - the item type of a listing

_READ_BUFFER_BYTES = 256 * 1024


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


class _Pending:
    """One request in flight: the thread waiting for it and what it gets."""

    __slots__ = ("request", "event", "response", "error")

    def __init__(self, request: p.Request) -> None:
        self.request = request
        self.event = threading.Event()
        self.response: p.Response | None = None
        self.error: BaseException | None = None


class _Follow(FollowFrames):
    """A follow in flight (STREAM_FOLLOW): its frames under a condition that its caller
    waits on for the next frame and the connection's reader for room (see
    :data:`~ctxstore._connection.FOLLOW_FRAMES_MAX`)."""

    __slots__ = ("changed", "released")

    def __init__(self, request: p.Request) -> None:
        super().__init__(request)
        self.changed = threading.Condition(threading.Lock())
        self.released = False
        """Whether its in-flight slot was given back (once, when the route ended)."""


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
        # The buffer is kept (up to SCRATCH_KEEP_BYTES) rather than allocated per frame:
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
        if len(scratch) <= SCRATCH_KEEP_BYTES:
            self._scratch = scratch
        return body


class _Connection(ConnectionState["_Pending | _Follow"]):
    """One TCP connection after HELLO: a reader thread matches responses to requests by req_id;
    senders write whole frames under a lock."""

    def __init__(self, sock: socket.socket, dial: Dial, info: ServerInfo, hashes_raw: bool) -> None:
        super().__init__(dial, info, hashes_raw)
        # The socket stays in blocking mode for the reader thread; senders write with
        # MSG_DONTWAIT and poll for room until their deadline (a socket timeout would switch
        # the shared file description to non-blocking under the reader's feet).
        self._sock = sock
        self._receiver = _Receiver(sock)
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLOUT)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.slot_count)
        self._stalled: _Follow | None = None
        """A follow that holds its most frames: the reader waits for room before it reads on
        (set and taken by the reader thread only)."""
        self._reader = threading.Thread(target=self._read_loop, name="ctxstore-reader", daemon=True)
        self._reader.start()

    @classmethod
    def open(cls, dial: Dial, deadline: float) -> _Connection:
        """Connects and says HELLO before ``deadline``; decides from the server's address
        whether RAW payloads are hashed (``verify_payloads``, decision 0015)."""
        remaining = _remaining(deadline)
        if remaining <= 0:
            raise ConnectTimeout(f"no time left to connect to {dial.where}")
        try:
            sock = socket.create_connection((dial.host, dial.port), timeout=remaining)
        except socket.timeout:
            raise ConnectTimeout(f"connecting to {dial.where} timed out") from None
        except OSError as error:
            raise ConnectError(f"cannot connect to {dial.where}: {error}") from error
        try:
            peer: object = sock.getpeername()
        except OSError:
            peer = None  # the socket cannot tell: hashed, as for a remote server
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(max(_remaining(deadline), 0.001))
            try:
                sock.sendall(dial.hello_frame())
            except (BrokenPipeError, ConnectionResetError):
                pass  # a refusing server (OVERLOADED) may close first: read its answer
            header = p.FrameHeader.decode(_recv_exactly(sock, p.HEADER_BYTES, deadline))
            header.check(dial.frame_bytes_max)
            info = dial.hello_answer(header, _recv_exactly(sock, header.len, deadline))
            sock.settimeout(None)
            return cls(sock, dial, info, dial.hashes_raw(peer))
        except socket.timeout:
            sock.close()
            raise ConnectTimeout(f"HELLO to {dial.where} timed out") from None
        except CtxstoreError:
            sock.close()
            raise
        except OSError as error:
            sock.close()
            raise ConnectError(f"connection to {dial.where} failed: {error}") from error

    # -- reading ---------------------------------------------------------------------------

    def _read_loop(self) -> None:
        reason: BaseException
        try:
            receiver = self._receiver
            while True:
                header = p.FrameHeader.decode(receiver.header())
                # OVERLAYS: overlaid answers (AsOf); MORE: a follow's frames (checked on decoding).
                header.check(self.frame_bytes_max, p.RESPONSE_FLAGS_KNOWN)
                self._dispatch(header, receiver.body(header.len))
                stalled, self._stalled = self._stalled, None
                if stalled is not None:
                    # A follow holds its most frames: read nothing more until its caller
                    # takes one (or abandons it; one whose last frame came gets no more), so
                    # that TCP pushes back on the server.
                    with stalled.changed:
                        while stalled.full and not stalled.ended and self._dead is None:
                            stalled.changed.wait()
        except BaseException as error:  # noqa: BLE001 - the thread's end, whatever it was
            reason = error
        self._fail(reason)
        try:
            self._sock.close()
        except OSError:
            pass

    def _take(self, req_id: int) -> _Pending | _Follow | None:
        with self._lock:
            return super()._take(req_id)

    def _keep(self, req_id: int, waiter: _Pending | _Follow) -> None:
        with self._lock:
            super()._keep(req_id, waiter)

    def _resolve(self, waiter: _Pending | _Follow, response: p.Response) -> None:
        if isinstance(waiter, _Follow):
            with waiter.changed:
                waiter.arrived(response)
                waiter.changed.notify_all()
                if waiter.full:
                    self._stalled = waiter
            self._release_ended(waiter)
            return
        waiter.response = response
        waiter.event.set()

    def _reject(self, waiter: _Pending | _Follow, error: BaseException) -> None:
        if isinstance(waiter, _Follow):
            with waiter.changed:
                waiter.lost(error)
                waiter.changed.notify_all()
            self._release_ended(waiter)
            return
        waiter.error = error
        waiter.event.set()

    def _release_ended(self, follow: _Follow) -> None:
        """Gives an ended follow's in-flight slot back (once)."""
        with follow.changed:
            if not follow.ended or follow.released:
                return
            follow.released = True
        self._slots.release()

    def _fail(self, reason: BaseException) -> None:
        """Ends the connection: every request in flight fails."""
        with self._lock:
            failed = self._taken_all(reason)
        if failed is None:
            return
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for waiter in failed:
            self._reject(waiter, lost_error(reason))

    def close(self, reason: BaseException) -> None:
        """Closes the connection; requests in flight fail with ``reason``'s error."""
        self._fail(reason)
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=1.0)

    # -- requests --------------------------------------------------------------------------

    def submit(self, request: p.Request, deadline: float) -> tuple[int, _Pending]:
        """Sends ``request``; returns its req_id and the slot its response arrives in."""
        pending = _Pending(request)
        return self._submit(pending, deadline), pending

    def follow(self, request: p.Request, deadline: float) -> _Follow:
        """Sends ``request`` (STREAM_FOLLOW), answered by a series of frames: take them with
        :meth:`next_frame`; :meth:`abandon` a follow not taken to its last frame. Its
        in-flight slot is held until its last frame arrives (or the connection ends)."""
        follow = _Follow(request)
        self._submit(follow, deadline)
        return follow

    def _submit(self, waiter: _Pending | _Follow, deadline: float) -> int:
        """Takes an in-flight slot, registers ``waiter`` and sends its request; its req_id."""
        request = waiter.request
        if not self._slots.acquire(timeout=max(_remaining(deadline), 0)):
            raise RequestTimeout(
                f"{request.NAME}: no free in-flight slot before the deadline "
                f"({self.info.requests_in_flight_max} requests in flight)"
            )
        try:
            with self._lock:
                req_id = self._register(waiter)
            try:
                chunks = p.encode_request(req_id, request)
                ops.check_sendable(request, chunks, self.info)
                self._send(request, chunks, deadline)
            except BaseException:
                with self._lock:
                    self._pending.pop(req_id, None)
                raise
        except BaseException as error:
            if isinstance(waiter, _Follow):
                # Not sent (or the connection ended): its slot goes back, once.
                with waiter.changed:
                    waiter.lost(error)
                self._release_ended(waiter)
            else:
                self._slots.release()
            raise
        return req_id

    def next_frame(self, follow: _Follow, deadline: float) -> p.Response:
        """The follow's next frame (its ERROR raised) before ``deadline``; the connection's
        error once the frames it held before it ended are taken."""
        with follow.changed:
            while (frame := follow.take()) is None:
                remaining = _remaining(deadline)
                if remaining <= 0:
                    raise RequestTimeout(f"{follow.request.NAME}: no frame in time")
                follow.changed.wait(remaining)
            follow.changed.notify_all()  # room for the reader
        return ops.result_of(follow.request, frame)

    def abandon(self, follow: _Follow) -> None:
        """The caller leaves ``follow``: its frames are dropped until its last, which gives
        its slot back (the protocol has no cancel; the server ends it at the stream's end or
        after its wait)."""
        with follow.changed:
            follow.abandon()
            follow.changed.notify_all()

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


class Client(Calls, shell="blocking"):
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

    With several addresses (``"A,B,C"`` or a list: a primary and its standbys, decision 0031
    §11) the client follows the primary: it connects to the one whose ROLE takes writes with
    the highest epoch, and when the connection goes or a server answers NOT_PRIMARY it finds
    it again (backoff 100 ms to 1 s, at most ``failover_timeout``, then
    :class:`~ctxstore.errors.NoPrimary`) and sends the call again when that is safe: a read;
    a write refused with NOT_PRIMARY; a write whose outcome is unknown only when it lands
    once however often it is sent (a turn with a ``key``, a KV put, a seal). Any other write
    whose outcome is unknown raises :class:`~ctxstore.errors.OutcomeUnknown`: it may or may
    not have landed. Only the listed addresses are ever used. With ``idempotency="auto"``
    every append carries a key (its own, else one made here), so an append whose connection
    broke mid-write is sent again on the new primary, with the same key, and lands exactly
    once.

    Args:
        addr: ``"HOST:PORT"``, ``"[V6]:PORT"`` or ``(host, port)``; several as ``"A,B,C"``
            or a list of ``"HOST:PORT"``; by default ``$CTXSTORE_ADDR``, else
            ``127.0.0.1:7411`` (as the CLI).
        failover_timeout: with several addresses, how long a call looks for the primary
            (default 30 s).
        idempotency: ``"auto"`` gives each turn of :meth:`append`, :meth:`append_by_hash`
            and :meth:`append_turns` that has no ``key`` a fresh one (``ctxstore-auto:`` and
            32 random hex digits), made once per call and sent with every retry of it: after
            a failover the append is sent again on the new primary and lands exactly once
            (its answer may say ``existing``: its own first write), instead of raising
            :class:`~ctxstore.errors.OutcomeUnknown`. The key is stored with the turn,
            visible and unique in its context. ``"off"`` (the default): a turn has the key
            its caller gave, or none. See :data:`~ctxstore.types.Idempotency`.
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
        compress_level: on a protocol-version-3 connection, appended payloads of at least 64
            bytes that zstd shrinks travel as zstd frames of this level (TURN_SPEC flag ZSTD,
            decision 0029): the server checks each frame against the payload's BLAKE3 and
            stores it as it came, so the compression costs the server nothing; the stored
            blob is the same either way. None: payloads go as they are. Default 1.
    """

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
        lazy: bool = False,
        verify_payloads: VerifyPayloads = "when_remote",
        compress_level: int | None = ops.DEFAULT_COMPRESS_LEVEL,
        failover_timeout: float = FAILOVER_TIMEOUT_DEFAULT,
        idempotency: Idempotency = "off",
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
            compress_level=compress_level,
            failover_timeout=failover_timeout,
            idempotency=idempotency,
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
                if self.follows_primary:
                    conn = self._find_primary()
                else:
                    conn = _Connection.open(
                        self._dial(), min(deadline, time.monotonic() + self._connect_timeout)
                    )
                self._conn = conn
            return conn
        finally:
            self._conn_lock.release()

    def _find_primary(self) -> _Connection:
        """A connection to the listed address that takes writes with the highest epoch,
        looked for until ``failover_timeout`` (then NoPrimary), every address in turn."""
        until = time.monotonic() + self._failover_timeout
        backoff = BACKOFF_MIN
        while True:
            best: tuple[int, _Connection, tuple[str, int]] | None = None
            said: list[str] = []
            for where in self._addrs:
                dial = self._dial(where)
                deadline = time.monotonic() + self._connect_timeout
                try:
                    conn = _Connection.open(dial, deadline)
                except CtxstoreError as error:
                    said.append(f"{dial.where}: {error}")
                    continue
                try:
                    accepts, epoch = self._probe(conn, deadline)
                except CtxstoreError as error:
                    conn.close(error)
                    said.append(f"{dial.where}: {error}")
                    continue
                if accepts and (best is None or epoch > best[0]):
                    if best is not None:
                        best[1].close(ConnectionLost("a newer primary was found"))
                    best = (epoch, conn, where)
                else:
                    conn.close(ConnectionLost("not the primary"))
                    said.append(f"{dial.where}: takes no writes (epoch {epoch})")
            if best is not None:
                self._host, self._port = best[2]
                return best[1]
            left = until - time.monotonic()
            if left <= 0:
                raise NoPrimary(
                    f"no primary among {','.join(self.addrs)} within "
                    f"{self._failover_timeout}s: {'; '.join(said)}"
                )
            time.sleep(min(backoff, left))
            backoff = min(backoff * 2, BACKOFF_MAX)

    @staticmethod
    def _probe(conn: _Connection, deadline: float) -> tuple[bool, int]:
        """Whether ``conn``'s server takes writes, and its epoch."""
        probe = primary_probe(conn.info.version)
        if probe is None:
            return True, 0
        req_id, pending = conn.submit(probe.request, deadline)
        return ops.finish_op(probe, conn.wait(req_id, pending, deadline), conn.hashes_raw)

    def _run(self, op: ops.Op[T], timeout: float | None) -> T:
        if self.follows_primary:
            return self._run_following(op, timeout)
        deadline = self._deadline(timeout)
        conn = self._connection(deadline)
        req_id, pending = conn.submit(op.request, deadline)
        response = conn.wait(req_id, pending, deadline)
        return ops.finish_op(op, response, conn.hashes_raw)

    def _run_following(self, op: ops.Op[T], timeout: float | None) -> T:
        """``_run`` on the primary of several addresses (see the class's doc)."""
        until = time.monotonic() + self._failover_timeout
        safe = resends_safely(op.request)
        backoff = BACKOFF_MIN
        tries = 0
        while True:
            deadline = self._deadline(timeout)
            conn = self._connection(deadline)
            try:
                req_id, pending = conn.submit(op.request, deadline)
                response = conn.wait(req_id, pending, deadline)
                return ops.finish_op(op, response, conn.hashes_raw)
            except CtxstoreError as error:
                trouble = failover_trouble(error)
                if trouble is None:
                    raise
                if trouble == "unknown" and not safe:
                    raise OutcomeUnknown(
                        f"{op.request.NAME} may or may not have been written ({error})"
                    ) from error
                if time.monotonic() >= until:
                    raise
                conn.close(ConnectionLost(f"looking for the primary after: {error}"))
            if tries:
                time.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            tries += 1

    def _run_many(self, batch: Sequence[ops.Op[T]], timeout: float | None) -> list[T]:
        """Sends the requests and collects their responses, pipelined on one thread: at most
        the connection's in-flight limit are outstanding (past it, the oldest response is
        awaited before the next request goes out, so a long batch cannot wait for a slot that
        only its own unread responses hold). The first error is raised once all are in."""
        if self.follows_primary:  # each sent again on its own after a failover
            return [self._run(op, timeout) for op in batch]
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
        """Runs a call of several steps (see :mod:`ctxstore._ops`); ``timeout`` per step; a
        :class:`~ctxstore._ops.Many` step pipelines its requests from this thread."""
        driver = ops.Driver(plan)
        while (step := driver.step()) is not None:
            try:
                if isinstance(step, ops.Op):
                    driver.answer(self._run(step, timeout))
                elif isinstance(step, ops.Many):
                    driver.answer(self._run_many(step.ops, timeout))
                else:
                    driver.answer(self.server_info(timeout=timeout))
            except CtxstoreError as error:
                driver.fail(error)
        return driver.value

    def _iterate(self, paging: ops.Paging[P, I], timeout: float | None) -> Iterator[I]:
        """The items of every page of a listing, fetched as the iteration reaches them."""
        op: ops.Op[P] | None = paging.first
        while op is not None:
            page = self._run(op, timeout)
            yield from paging.items(page)
            op = paging.follow(page)

    # -- requests (the calls are ctxstore._calls.Calls') ---------------------------------------

    def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """What HELLO told: the negotiated version, the server's name and limits (connects if
        needed)."""
        return self._connection(self._deadline(timeout)).info
