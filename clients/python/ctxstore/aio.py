"""The asyncio client: one persistent, pipelined connection per client."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

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

if TYPE_CHECKING:
    from asyncio.trsock import TransportSocket

__all__ = ["AsyncClient"]

T = TypeVar("T")
P = TypeVar("P")
I = TypeVar("I")  # noqa: E741 - the item type of a listing


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


async def _within(awaitable: Awaitable[T], deadline: float) -> T:
    """Awaits ``awaitable`` until ``deadline`` (time.monotonic, which is the loop's clock);
    raises asyncio.TimeoutError after it. A cancellation of the caller is never swallowed
    (asyncio.timeout_at where available; wait_for on Python 3.10)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout_at(deadline):
            return await awaitable
    return await asyncio.wait_for(awaitable, max(_remaining(deadline), 0))


class _Waiting:
    """One request in flight: the future its caller awaits."""

    __slots__ = ("request", "future")

    def __init__(self, request: p.Request, future: asyncio.Future[p.Response]) -> None:
        self.request = request
        self.future = future


class _AsyncFollow(FollowFrames):
    """A follow in flight (STREAM_FOLLOW): its frames, the event its caller awaits for the
    next one, and the event the connection's reader awaits for room (see
    :data:`~ctxstore._connection.FOLLOW_FRAMES_MAX`)."""

    __slots__ = ("arrival", "room", "released")

    def __init__(self, request: p.Request) -> None:
        super().__init__(request)
        self.arrival = asyncio.Event()
        self.room = asyncio.Event()
        self.released = False
        """Whether its in-flight slot was given back (once, when the route ended)."""


class _AsyncConnection(ConnectionState["_Waiting | _AsyncFollow"]):
    """One TCP connection after HELLO: a reader task matches responses to requests by req_id."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dial: Dial,
        info: ServerInfo,
        hashes_raw: bool,
    ) -> None:
        super().__init__(dial, info, hashes_raw)
        self.loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._sock: socket.socket | TransportSocket | None = writer.get_extra_info("socket")
        self._scratch = bytearray()  # for frames that arrive in pieces (see _read_rest)
        self._slots = asyncio.Semaphore(self.slot_count)
        self._drain_lock = asyncio.Lock()
        self._stalled: _AsyncFollow | None = None
        """A follow that holds its most frames: the reader waits for room before it reads on."""
        self._task = self.loop.create_task(self._read_loop(), name="ctxstore-reader")

    @classmethod
    async def open(cls, dial: Dial, deadline: float) -> _AsyncConnection:
        """Connects and says HELLO before ``deadline``; decides from the server's address
        whether RAW payloads are hashed (``verify_payloads``, decision 0015)."""
        try:
            opening = asyncio.open_connection(dial.host, dial.port)
            reader, writer = await _within(opening, deadline)
        except asyncio.TimeoutError:
            raise ConnectTimeout(f"connecting to {dial.where} timed out") from None
        except OSError as error:
            raise ConnectError(f"cannot connect to {dial.where}: {error}") from error
        # The socket's getpeername() (None if it could not tell: hashed, as for a remote one).
        hashes_raw = dial.hashes_raw(writer.get_extra_info("peername"))
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            writer.write(dial.hello_frame())
            header, body = await _within(
                cls._read_hello_answer(reader, writer, dial.frame_bytes_max), deadline
            )
            return cls(reader, writer, dial, dial.hello_answer(header, body), hashes_raw)
        except asyncio.TimeoutError:
            writer.close()
            raise ConnectTimeout(f"HELLO to {dial.where} timed out") from None
        except asyncio.IncompleteReadError:
            writer.close()
            raise ConnectError(
                f"the server {dial.where} closed the connection during HELLO"
            ) from None
        except CtxstoreError:
            writer.close()
            raise
        except OSError as error:
            writer.close()
            raise ConnectError(f"connection to {dial.where} failed: {error}") from error
        except BaseException:
            writer.close()
            raise

    @staticmethod
    async def _read_hello_answer(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame_bytes_max: int
    ) -> tuple[p.FrameHeader, bytes]:
        try:
            await writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # a refusing server (OVERLOADED) may close first: read its answer
        header = p.FrameHeader.decode(await reader.readexactly(p.HEADER_BYTES))
        header.check(frame_bytes_max)
        body = await reader.readexactly(header.len) if header.len else b""
        return header, body

    # -- reading ---------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason: BaseException
        try:
            reader = self._reader
            while True:
                # StreamReader.read: what has arrived, up to the count (see _read_rest).
                header_bytes = await reader.read(p.HEADER_BYTES)
                if 0 < len(header_bytes) < p.HEADER_BYTES:
                    header_bytes = await self._read_rest(header_bytes, p.HEADER_BYTES)
                if len(header_bytes) < p.HEADER_BYTES:
                    raise ConnectionLost(
                        "the server closed the connection"
                        if not header_bytes
                        else "the connection closed inside a frame header"
                    )
                header = p.FrameHeader.decode(header_bytes)
                # OVERLAYS: overlaid answers (AsOf); MORE: a follow's frames (checked on decoding).
                header.check(self.frame_bytes_max, p.RESPONSE_FLAGS_KNOWN)
                body = await reader.read(header.len) if header.len else b""
                if 0 < len(body) < header.len:
                    body = await self._read_rest(body, header.len)
                if len(body) < header.len:
                    raise ConnectionLost("the connection closed inside a frame")
                self._dispatch(header, body)
                while (stalled := self._stalled) is not None:
                    # A follow holds its most frames: read nothing more until its caller
                    # takes one (or abandons it; one whose last frame came gets no more), so
                    # that TCP pushes back on the server.
                    self._stalled = None
                    while stalled.full and not stalled.ended:
                        stalled.room.clear()
                        await stalled.room.wait()
        except asyncio.CancelledError:
            self._fail(ConnectionLost("the connection's reader was cancelled"))
            raise
        except BaseException as error:  # noqa: BLE001 - the task's end, whatever it was
            reason = error
        self._fail(reason)

    async def _read_rest(self, first: bytes, count: int) -> bytes:
        """The ``count`` bytes that start with ``first`` (part of a frame: its header or its
        body), reading the rest as it arrives; fewer if the stream ends first.

        Before waiting for each further piece it asks the kernel to acknowledge what arrived
        at once (:func:`_net.ack_now`, decision 0016): a large answer outgrows the server's
        congestion window, and the server waits for that ACK. A header or body whole in what
        the reader has buffered never comes here: no system call."""
        # The buffer is kept (up to SCRATCH_KEEP_BYTES) rather than allocated per frame:
        # large fresh allocations cost page faults each time, more than the reading.
        scratch = self._scratch if len(self._scratch) >= count else bytearray(count)
        view = memoryview(scratch)
        got = len(first)
        view[:got] = first
        while got < count:
            if self._sock is not None:
                _net.ack_now(self._sock)
            piece = await self._reader.read(count - got)
            if not piece:
                break  # the stream ended first
            view[got : got + len(piece)] = piece
            got += len(piece)
        data = bytes(view[:got])
        view.release()
        if len(scratch) <= SCRATCH_KEEP_BYTES:
            self._scratch = scratch
        return data

    def _resolve(self, waiter: _Waiting | _AsyncFollow, response: p.Response) -> None:
        if isinstance(waiter, _AsyncFollow):
            waiter.arrived(response)
            waiter.arrival.set()
            if waiter.full:
                self._stalled = waiter
            self._release_ended(waiter)
        elif not waiter.future.done():
            waiter.future.set_result(response)

    def _reject(self, waiter: _Waiting | _AsyncFollow, error: BaseException) -> None:
        if isinstance(waiter, _AsyncFollow):
            waiter.lost(error)
            waiter.arrival.set()
            waiter.room.set()  # a reader waiting for room goes on to its end
            self._release_ended(waiter)
        elif not waiter.future.done():
            waiter.future.set_exception(error)

    def _release_ended(self, follow: _AsyncFollow) -> None:
        """Gives an ended follow's in-flight slot back (once)."""
        if follow.ended and not follow.released:
            follow.released = True
            self._slots.release()

    def _fail(self, reason: BaseException) -> None:
        """Ends the connection: every request in flight fails."""
        failed = self._taken_all(reason)
        if failed is None:
            return
        try:
            self._writer.close()
        except (OSError, RuntimeError):
            pass
        for waiter in failed:
            self._reject(waiter, lost_error(reason))
        current = asyncio.current_task()
        if current is not self._task and not self._task.done():
            self._task.cancel()

    async def close(self, reason: BaseException) -> None:
        """Closes the connection; requests in flight fail with ``reason``'s error."""
        self._fail(reason)
        if self._task is not asyncio.current_task():
            await asyncio.wait({self._task}, timeout=1.0)

    # -- requests --------------------------------------------------------------------------

    async def _acquire_slot(self, request: p.Request, deadline: float) -> None:
        """Takes an in-flight slot for ``request`` before ``deadline``."""
        try:
            if self._slots.locked():
                await _within(self._slots.acquire(), deadline)
            else:
                await self._slots.acquire()  # free: returns at once
        except asyncio.TimeoutError:
            raise RequestTimeout(
                f"{request.NAME}: no free in-flight slot before the deadline "
                f"({self.info.requests_in_flight_max} requests in flight)"
            ) from None

    async def _send(
        self, request: p.Request, waiter: _Waiting | _AsyncFollow, deadline: float
    ) -> int:
        """Registers ``waiter`` and sends its request; its req_id."""
        req_id = self._register(waiter)
        try:
            chunks = p.encode_request(req_id, request)
            ops.check_sendable(request, chunks, self.info)
            self._writer.writelines(chunks)
            try:
                if self._writer.transport.get_write_buffer_size():
                    await _within(self._drain(), deadline)  # backpressure
            except asyncio.TimeoutError:
                raise RequestTimeout(f"{request.NAME}: sending timed out") from None
            except (OSError, RuntimeError) as error:
                self._fail(error)
                raise lost_error(error) from None
        except BaseException:
            self._pending.pop(req_id, None)
            raise
        return req_id

    async def follow(self, request: p.Request, deadline: float) -> _AsyncFollow:
        """Sends ``request`` (STREAM_FOLLOW), answered by a series of frames: take them with
        :meth:`next_frame`; :meth:`abandon` a follow not taken to its last frame. Its
        in-flight slot is held until its last frame arrives (or the connection ends)."""
        await self._acquire_slot(request, deadline)
        follow = _AsyncFollow(request)
        try:
            await self._send(request, follow, deadline)
        except BaseException as error:
            follow.lost(error)  # not sent (or the connection ended): the slot goes back
            self._release_ended(follow)
            raise
        return follow

    async def next_frame(self, follow: _AsyncFollow, deadline: float) -> p.Response:
        """The follow's next frame (its ERROR raised) before ``deadline``; the connection's
        error once the frames it held before it ended are taken."""
        while (frame := follow.take()) is None:
            follow.arrival.clear()
            try:
                await _within(follow.arrival.wait(), deadline)
            except asyncio.TimeoutError:
                raise RequestTimeout(f"{follow.request.NAME}: no frame in time") from None
        follow.room.set()
        return ops.result_of(follow.request, frame)

    def abandon(self, follow: _AsyncFollow) -> None:
        """The caller leaves ``follow``: its frames are dropped until its last, which gives
        its slot back (the protocol has no cancel; the server ends it at the stream's end or
        after its wait)."""
        follow.abandon()
        follow.room.set()

    async def call(self, request: p.Request, deadline: float) -> p.Response:
        """Sends ``request`` and waits for its response until ``deadline``."""
        await self._acquire_slot(request, deadline)
        req_id = 0
        try:
            future: asyncio.Future[p.Response] = self.loop.create_future()
            req_id = await self._send(request, _Waiting(request, future), deadline)
            try:
                return await _within(future, deadline)
            except asyncio.TimeoutError:
                if future.done() and not future.cancelled():
                    return future.result()
                raise RequestTimeout(f"{request.NAME}: no response in time") from None
        finally:
            self._pending.pop(req_id, None)
            self._slots.release()

    async def _drain(self) -> None:
        async with self._drain_lock:
            await self._writer.drain()


class AsyncClient(Calls, shell="asyncio"):
    """An asyncio ctxstore client over one persistent TCP connection.

    Concurrent coroutines share the connection; their requests are pipelined (up to the
    server's in-flight limit) and matched by req_id. Use it from one event loop.

    Create it with ``await AsyncClient.connect(addr, ...)`` or ``async with
    AsyncClient(addr, ...) as client``; the constructor itself does no I/O (the first call
    connects). Every call takes a ``timeout`` in seconds (default: the client's ``timeout``)
    and raises :class:`~ctxstore.errors.RequestTimeout` when it passes. If the connection
    drops, calls in flight raise :class:`~ctxstore.errors.ConnectionLost` and the next call
    reconnects; with one address the client never retries a call by itself. With several
    (``"A,B,C"`` or a list) it follows the primary as :class:`ctxstore.Client` does
    (decision 0031 §11): a call is sent again on the new primary when that is safe, else it
    raises :class:`~ctxstore.errors.OutcomeUnknown`; with ``idempotency="auto"`` every
    append carries a key, so it is always safe to send again.

    The arguments are those of :class:`ctxstore.Client` (without ``lazy``); so are the
    methods, with the same meaning (a context by ContextID ``int`` or name ``str``), as
    coroutines; the ``iter_*`` methods return async iterators.
    """

    # The constructor is ClientCore's (it does no I/O); the connection comes at the first call.
    _conn: _AsyncConnection | None = None
    _conn_lock: asyncio.Lock | None = None
    _lock_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    async def connect(
        cls,
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
    ) -> AsyncClient:
        """A client, connected (HELLO done) before it is returned."""
        client = cls(
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
        await client._connection(time.monotonic() + client._connect_timeout)
        return client

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Closes the connection; calls in flight raise ClientClosed; later calls too."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close(ClientClosed("the client was closed"))

    async def __aenter__(self) -> AsyncClient:
        await self._connection(time.monotonic() + self._connect_timeout)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._conn_lock is None or self._lock_loop is not loop:
            self._conn_lock = asyncio.Lock()
            self._lock_loop = loop
        return self._conn_lock

    async def _connection(self, deadline: float) -> _AsyncConnection:
        conn = self._conn
        loop = asyncio.get_running_loop()
        if conn is not None and conn.alive and conn.loop is loop:
            return conn
        lock = self._lock()
        try:
            await _within(lock.acquire(), deadline)
        except asyncio.TimeoutError:
            raise ConnectTimeout("another task's reconnect did not finish in time") from None
        try:
            if self._closed:
                raise ClientClosed("the client was closed")
            conn = self._conn
            if conn is None or not conn.alive or conn.loop is not loop:
                if conn is not None and conn.loop is loop:
                    await conn.close(ConnectionLost("replaced by a new connection"))
                self._conn = None
                if self.follows_primary:
                    conn = await self._find_primary()
                else:
                    conn = await _AsyncConnection.open(
                        self._dial(), min(deadline, time.monotonic() + self._connect_timeout)
                    )
                self._conn = conn
            return conn
        finally:
            lock.release()

    async def _find_primary(self) -> _AsyncConnection:
        """A connection to the listed address that takes writes with the highest epoch,
        every address asked at once, looked for until ``failover_timeout`` (then NoPrimary)."""
        until = time.monotonic() + self._failover_timeout
        backoff = BACKOFF_MIN
        while True:
            answers = await asyncio.gather(*(self._probe(where) for where in self._addrs))
            best: tuple[int, _AsyncConnection, tuple[str, int]] | None = None
            said: list[str] = []
            for where, answer in zip(self._addrs, answers, strict=True):
                if isinstance(answer, str):
                    said.append(answer)
                    continue
                accepts, epoch, conn = answer
                if accepts and (best is None or epoch > best[0]):
                    if best is not None:
                        await best[1].close(ConnectionLost("a newer primary was found"))
                    best = (epoch, conn, where)
                else:
                    await conn.close(ConnectionLost("not the primary"))
                    said.append(f"{self._dial(where).where}: takes no writes (epoch {epoch})")
            if best is not None:
                self._host, self._port = best[2]
                return best[1]
            left = until - time.monotonic()
            if left <= 0:
                raise NoPrimary(
                    f"no primary among {','.join(self.addrs)} within "
                    f"{self._failover_timeout}s: {'; '.join(said)}"
                )
            await asyncio.sleep(min(backoff, left))
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _probe(self, where: tuple[str, int]) -> tuple[bool, int, _AsyncConnection] | str:
        """A connection to ``where``, whether it takes writes and its epoch; else why not."""
        dial = self._dial(where)
        deadline = time.monotonic() + self._connect_timeout
        try:
            conn = await _AsyncConnection.open(dial, deadline)
        except CtxstoreError as error:
            return f"{dial.where}: {error}"
        probe = primary_probe(conn.info.version)
        if probe is None:
            return True, 0, conn
        try:
            response = await conn.call(probe.request, deadline)
            accepts, epoch = ops.finish_op(probe, response, conn.hashes_raw)
        except CtxstoreError as error:
            await conn.close(error)
            return f"{dial.where}: {error}"
        return accepts, epoch, conn

    async def _run(self, op: ops.Op[T], timeout: float | None) -> T:
        if self.follows_primary:
            return await self._run_following(op, timeout)
        deadline = self._deadline(timeout)
        conn = await self._connection(deadline)
        response = await conn.call(op.request, deadline)
        return ops.finish_op(op, response, conn.hashes_raw)

    async def _run_following(self, op: ops.Op[T], timeout: float | None) -> T:
        """``_run`` on the primary of several addresses (see :class:`ctxstore.Client`)."""
        until = time.monotonic() + self._failover_timeout
        safe = resends_safely(op.request)
        backoff = BACKOFF_MIN
        tries = 0
        while True:
            deadline = self._deadline(timeout)
            conn = await self._connection(deadline)
            try:
                response = await conn.call(op.request, deadline)
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
                await conn.close(ConnectionLost(f"looking for the primary after: {error}"))
            if tries:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            tries += 1

    async def _drive(self, plan: ops.Plan[T], timeout: float | None) -> T:
        """Runs a call of several steps (see :mod:`ctxstore._ops`); ``timeout`` per step; a
        :class:`~ctxstore._ops.Many` step runs its requests concurrently."""
        driver = ops.Driver(plan)
        while (step := driver.step()) is not None:
            try:
                if isinstance(step, ops.Op):
                    driver.answer(await self._run(step, timeout))
                elif isinstance(step, ops.Many):
                    runs = (self._run(op, timeout) for op in step.ops)
                    driver.answer(await asyncio.gather(*runs))
                else:
                    driver.answer(await self.server_info(timeout=timeout))
            except CtxstoreError as error:
                driver.fail(error)
        return driver.value

    async def _iterate(self, paging: ops.Paging[P, I], timeout: float | None) -> AsyncIterator[I]:
        """The items of every page of a listing, fetched as the iteration reaches them."""
        op: ops.Op[P] | None = paging.first
        while op is not None:
            page = await self._run(op, timeout)
            for item in paging.items(page):
                yield item
            op = paging.follow(page)

    # -- requests (the calls are ctxstore._calls.Calls') ---------------------------------------

    async def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """What HELLO told: the negotiated version, the server's name and limits (connects if
        needed)."""
        return (await self._connection(self._deadline(timeout))).info
