"""The asyncio client: one persistent, pipelined connection per client."""

from __future__ import annotations

import asyncio
import itertools
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import _net
from . import _ops as ops
from . import _protocol as p
from .client import _SCRATCH_KEEP_BYTES, lost_error
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


class _AsyncConnection:
    """One TCP connection after HELLO: a reader task matches responses to requests by req_id."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        info: ServerInfo,
        frame_bytes_max: int,
        max_in_flight: int,
        hashes_raw: bool,
    ) -> None:
        self.info = info
        self.hashes_raw = hashes_raw
        """Whether RAW payloads read on this connection are hashed (decision 0015)."""
        self.loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._sock: socket.socket | TransportSocket | None = writer.get_extra_info("socket")
        self._frame_bytes_max = frame_bytes_max
        self._scratch = bytearray()  # for frames that arrive in pieces (see _read_rest)
        self._slots = asyncio.Semaphore(
            max(1, min(max_in_flight, info.requests_in_flight_max or 1))
        )
        self._drain_lock = asyncio.Lock()
        self._pending: dict[int, tuple[p.Request, asyncio.Future[p.Response]]] = {}
        self._ids = itertools.count(2)  # 1 was HELLO
        self._last_id = 1
        self._dead: BaseException | None = None
        self.peak_in_flight = 0
        """The most requests this connection had in flight at once (a diagnostic)."""
        self._task = self.loop.create_task(self._read_loop(), name="ctxstore-reader")

    @classmethod
    async def open(
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
    ) -> _AsyncConnection:
        """Connects and says HELLO before ``deadline``; decides from the server's address
        whether RAW payloads are hashed (``verify_payloads``, decision 0015)."""
        try:
            reader, writer = await _within(asyncio.open_connection(host, port), deadline)
        except asyncio.TimeoutError:
            raise ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as error:
            raise ConnectError(f"cannot connect to {host}:{port}: {error}") from error
        # The socket's getpeername() (None if it could not tell: hashed, as for a remote one).
        hashes_raw = ops.hashes_raw_from(verify_payloads, writer.get_extra_info("peername"))
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = ops.hello_request(versions, token, client_name)
            writer.writelines(p.encode_request(1, hello))
            header, body = await _within(
                cls._read_hello_answer(reader, writer, frame_bytes_max), deadline
            )
            if header.req_id not in (1, 0) or (
                header.req_id == 0 and header.msg_type != p.ERROR_TYPE
            ):
                raise ProtocolError(f"HELLO was answered with req_id {header.req_id}")
            info = ops.hello_result(p.decode_response(header.msg_type, body), versions)
            return cls(reader, writer, info, frame_bytes_max, max_in_flight, hashes_raw)
        except asyncio.TimeoutError:
            writer.close()
            raise ConnectTimeout(f"HELLO to {host}:{port} timed out") from None
        except asyncio.IncompleteReadError:
            writer.close()
            raise ConnectError(
                f"the server {host}:{port} closed the connection during HELLO"
            ) from None
        except CtxstoreError:
            writer.close()
            raise
        except OSError as error:
            writer.close()
            raise ConnectError(f"connection to {host}:{port} failed: {error}") from error
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

    @property
    def alive(self) -> bool:
        """False once the connection failed or was closed."""
        return self._dead is None

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
                header.check(self._frame_bytes_max, p.OVERLAYS)  # overlaid answers (AsOf)
                body = await reader.read(header.len) if header.len else b""
                if 0 < len(body) < header.len:
                    body = await self._read_rest(body, header.len)
                if len(body) < header.len:
                    raise ConnectionLost("the connection closed inside a frame")
                self._dispatch(header, body)
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
        # The buffer is kept (up to _SCRATCH_KEEP_BYTES) rather than allocated per frame:
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
        if len(scratch) <= _SCRATCH_KEEP_BYTES:
            self._scratch = scratch
        return data

    def _dispatch(self, header: p.FrameHeader, body: bytes) -> None:
        entry = self._pending.pop(header.req_id, None)
        if entry is None:
            if header.req_id == 0 and header.msg_type == p.ERROR_TYPE:
                error = p.decode_response(header.msg_type, body)
                assert isinstance(error, p.ErrorResponse)
                raise error_for_code(error.code, error.message, error.detail)
            if 0 < header.req_id <= self._last_id:
                return  # the late answer to a request whose caller gave up
            raise ProtocolError(f"a response to req_id {header.req_id}, which was never sent")
        request, future = entry
        if header.msg_type not in (request.response_type, p.ERROR_TYPE):
            message = (
                f"{request.NAME} (req_id {header.req_id}) was answered with message type "
                f"{header.msg_type:#06x}"
            )
            if not future.done():
                future.set_exception(ProtocolError(message))
            raise ProtocolError(message)
        try:
            response = p.decode_response(
                header.msg_type,
                body,
                header.flags,
                allow_unknown=isinstance(request, p.RawRequest),
            )
        except ProtocolError as error:
            if not future.done():
                future.set_exception(ProtocolError(error.message))
            raise
        if not future.done():
            future.set_result(response)
        if isinstance(response, p.ErrorResponse) and response.code in CONNECTION_CLOSING_CODES:
            self._fail(error_for_code(response.code, response.message, response.detail))

    def _fail(self, reason: BaseException) -> None:
        """Ends the connection: every request in flight fails."""
        if self._dead is not None:
            return
        self._dead = reason
        pending = list(self._pending.values())
        self._pending.clear()
        try:
            self._writer.close()
        except (OSError, RuntimeError):
            pass
        for _, future in pending:
            if not future.done():
                future.set_exception(lost_error(reason))
        current = asyncio.current_task()
        if current is not self._task and not self._task.done():
            self._task.cancel()

    async def close(self, reason: BaseException) -> None:
        """Closes the connection; requests in flight fail with ``reason``'s error."""
        self._fail(reason)
        if self._task is not asyncio.current_task():
            await asyncio.wait({self._task}, timeout=1.0)

    # -- requests --------------------------------------------------------------------------

    async def call(self, request: p.Request, deadline: float) -> p.Response:
        """Sends ``request`` and waits for its response until ``deadline``."""
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
        req_id = 0
        try:
            if self._dead is not None:
                raise lost_error(self._dead)
            req_id = next(self._ids)
            self._last_id = req_id
            chunks = p.encode_request(req_id, request)
            ops.check_sendable(request, chunks, self.info)
            future: asyncio.Future[p.Response] = self.loop.create_future()
            self._pending[req_id] = (request, future)
            self.peak_in_flight = max(self.peak_in_flight, len(self._pending))
            self._writer.writelines(chunks)
            try:
                if self._writer.transport.get_write_buffer_size():
                    await _within(self._drain(), deadline)  # backpressure
            except asyncio.TimeoutError:
                raise RequestTimeout(f"{request.NAME}: sending timed out") from None
            except (OSError, RuntimeError) as error:
                self._fail(error)
                raise lost_error(error) from None
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


class AsyncClient(ops.ClientCore):
    """An asyncio ctxstore client over one persistent TCP connection.

    Concurrent coroutines share the connection; their requests are pipelined (up to the
    server's in-flight limit) and matched by req_id. Use it from one event loop.

    Create it with ``await AsyncClient.connect(addr, ...)`` or ``async with
    AsyncClient(addr, ...) as client``; the constructor itself does no I/O (the first call
    connects). Every call takes a ``timeout`` in seconds (default: the client's ``timeout``)
    and raises :class:`~ctxstore.errors.RequestTimeout` when it passes. If the connection
    drops, calls in flight raise :class:`~ctxstore.errors.ConnectionLost` and the next call
    reconnects; the client never retries a call by itself.

    The arguments are those of :class:`ctxstore.Client` (without ``lazy``); so are the
    methods, with the same meaning (a context by ContextID ``int`` or name ``str``), as
    coroutines; the ``iter_*`` methods return async iterators.
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
        self._conn: _AsyncConnection | None = None
        self._conn_lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    async def connect(
        cls,
        addr: str | tuple[str, int] | None = None,
        *,
        token: str | bytes | None = None,
        timeout: float = ops.DEFAULT_TIMEOUT,
        connect_timeout: float = ops.DEFAULT_CONNECT_TIMEOUT,
        client_name: str = ops.DEFAULT_CLIENT_NAME,
        accept_zstd: bool = True,
        max_in_flight: int = 1024,
        max_response_bytes: int = p.FRAME_BYTES_LIMIT,
        verify_payloads: VerifyPayloads = "when_remote",
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
                conn = await _AsyncConnection.open(
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
            lock.release()

    async def _run(self, op: ops.Op[T], timeout: float | None) -> T:
        deadline = self._deadline(timeout)
        conn = await self._connection(deadline)
        response = await conn.call(op.request, deadline)
        return ops.finish_op(op, response, conn.hashes_raw)

    async def _drive(self, plan: ops.Plan[T], timeout: float | None) -> T:
        """Runs a call of several steps (see :mod:`ctxstore._ops`); ``timeout`` per step; a
        :class:`~ctxstore._ops.Many` step runs its requests concurrently."""
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
                    result = await self._run(step, timeout)
                elif isinstance(step, ops.Many):
                    result = await asyncio.gather(*(self._run(op, timeout) for op in step.ops))
                else:
                    result = await self.server_info(timeout=timeout)
            except CtxstoreError as caught:
                error = caught

    async def _iterate(self, paging: ops.Paging[P, I], timeout: float | None) -> AsyncIterator[I]:
        """The items of every page of a listing, fetched as the iteration reaches them."""
        op: ops.Op[P] | None = paging.first
        while op is not None:
            page = await self._run(op, timeout)
            for item in paging.items(page):
                yield item
            op = paging.follow(page)

    # -- requests --------------------------------------------------------------------------

    async def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """What HELLO told: the negotiated version, the server's name and limits (connects if
        needed)."""
        return (await self._connection(self._deadline(timeout))).info

    async def request(self, request: p.Request, *, timeout: float | None = None) -> p.Response:
        """Sends any request (see :mod:`ctxstore._protocol`) and returns its decoded response;
        an ERROR raises its exception. The low-level door for messages without a method."""
        return await self._run(ops.raw(request), timeout)

    async def ping(self, nonce: int | None = None, *, timeout: float | None = None) -> None:
        """Round trip to the server (PING/PONG); checks that the nonce is echoed."""
        await self._run(ops.ping(nonce), timeout)

    async def create_context(
        self, base_turn_id: int = 0, *, timeout: float | None = None
    ) -> ContextHead:
        """A new context: empty, or with its head at ``base_turn_id`` (copies nothing)."""
        return await self._run(ops.create_context(base_turn_id), timeout)

    async def fork(self, turn_id: int, *, timeout: float | None = None) -> ContextHead:
        """A new context whose head is ``turn_id`` (O(1); 0 raises InvalidArgument)."""
        return await self._run(ops.fork(turn_id), timeout)

    async def head(self, context: ContextLike, *, timeout: float | None = None) -> ContextHead:
        """The context's head (NotFound if there is no such context)."""
        return await self._run(ops.head(context), timeout)

    async def append(
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
        """Appends a turn with ``payload`` after the context's head (or ``parent``), durably,
        with an optional key, labels, links, summary flag; see
        :meth:`ctxstore.Client.append`."""
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
        return await self._run(ops.append_spec(context, spec, expected_head), timeout)

    async def append_by_hash(
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
        """Appends a turn whose payload is a blob already stored (nothing is uploaded); the
        options are :meth:`append`'s."""
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
        return await self._run(ops.append_spec(context, spec, expected_head), timeout)

    async def get_turn(
        self, turn_id: int, *, as_of: int | None = None, timeout: float | None = None
    ) -> Turn:
        """One turn's metadata (no payload: use :meth:`get_blob` with its hash). ``as_of``
        (version 2): the overlay view to read — 0 the latest, else the view as of that
        overlay sequence number — with ``redacted`` and ``overlay_seq`` set."""
        return await self._run(ops.view(ops.get_turn(turn_id), as_of), timeout)

    async def last(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Page:
        """The ``limit`` newest turns of the context, oldest first."""
        return await self._run(
            ops.view(ops.last(context, limit, payloads, self._accept_zstd), as_of), timeout
        )

    async def before(
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
        return await self._run(
            ops.view(
                ops.before(context, before_turn_id, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    async def range_by_depth(
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
        return await self._run(
            ops.view(
                ops.range_by_depth(context, from_depth, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    async def chain(
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
        return await self._run(
            ops.view(ops.chain(turn_id, from_depth, limit, payloads, self._accept_zstd), as_of),
            timeout,
        )

    async def replay(
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
        return await self._drive(
            ops.replay(turn_id, payloads, page_size, self._accept_zstd), timeout
        )

    async def get_blob(self, payload_hash: HashLike, *, timeout: float | None = None) -> bytes:
        """A payload by its hash, checked against it as ``verify_payloads`` says (NotFound if
        it is not stored)."""
        return await self._run(ops.get_blob(payload_hash, self._accept_zstd), timeout)

    async def has_blobs(
        self, hashes: Sequence[HashLike], *, timeout: float | None = None
    ) -> list[bool]:
        """Which of ``hashes`` are stored, in order (long lists: several pipelined requests)."""
        return await self._drive(ops.has_blobs(hashes), timeout)

    async def stats(self, *, timeout: float | None = None) -> Stats:
        """The server's counters; from a version-2 server also the garbage collector's
        (``live_bytes``, ``dead_bytes``, ``gc_runs``, ``bytes_reclaimed_total``; None from a
        server without them)."""
        return await self._drive(ops.stats(), timeout)

    # -- version 2: contexts by name, tags, listing, key-value ---------------------------------

    async def open_context(
        self,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        base_turn_id: int = 0,
        get_or_create: bool = False,
        *,
        timeout: float | None = None,
    ) -> Opened:
        """A new context, optionally named and tagged; see :meth:`ctxstore.Client.open_context`.
        Returns ``(info, created)``."""
        return await self._run(ops.open_context(name, tags, base_turn_id, get_or_create), timeout)

    async def clone_context(
        self,
        source: ContextLike,
        name: str,
        *,
        tags: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ContextInfo:
        """A copy of ``source`` named ``name`` (head, tags, key-value entries; O(metadata))."""
        return await self._run(ops.clone_context(source, name, tags), timeout)

    async def context_info(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> ContextInfo:
        """The context's head, name, tags and times (NotFound for an unknown id or name)."""
        return await self._run(ops.context_info(context), timeout)

    async def delete_context(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> Retention:
        """Deletes the context: from then on every request naming it (by id or name) raises
        NotFound and its name may be taken again; its turns and blobs stay while another
        context (a fork, a clone) reaches them. Returns the context as it was just before."""
        return await self._run(ops.delete_context(context), timeout)

    async def prune_context(
        self, context: ContextLike, keep: int, *, timeout: float | None = None
    ) -> Retention:
        """Keeps only the newest ``keep`` (>= 1) depths of the context's chain reachable
        through it (LangGraph's ``prune(keep_latest)``): reads, the turn log and key look-ups
        stop at the returned ``floor_depth``, which never moves down. ``keep=0`` raises
        InvalidArgument (delete instead)."""
        return await self._run(ops.prune_context(context, keep), timeout)

    async def set_context_ttl(
        self, context: ContextLike, ttl_ms: int | None, *, timeout: float | None = None
    ) -> Retention:
        """Sets the context's time to live in milliseconds (None clears it): once not updated
        for that long, the server deletes it. At least 1 ms (0 raises ValueError: it would
        mean "never", not "now"), at most 100 years (else InvalidArgument)."""
        return await self._run(ops.context_ttl(context, ttl_ms, True), timeout)

    async def context_retention(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> Retention:
        """The context with its floor depth and time to live."""
        return await self._run(ops.context_ttl(context, None, False), timeout)

    async def backup(self, directory: str, *, timeout: float | None = 86_400.0) -> BackupReport:
        """Has the server write a consistent copy of its store into ``directory`` (an
        absolute path on the server's host, absent or empty) while it goes on serving;
        returns when the copy is complete and synced. A backup takes as long as copying the
        store, so it waits up to ``timeout`` seconds (default a day), not the request timeout;
        a backup no longer waited for goes on on the server."""
        return await self._run(ops.backup(directory), timeout)

    async def gc(self, *, timeout: float | None = 3_600.0) -> GcReport:
        """Runs a garbage collection on the server now (protocol version 2) and returns what
        it did: turns and blobs no live context reaches any more are collected (a collected
        turn is NotFound from then on) and packs whose dead share passes the server's
        ``--gc-pack-dead-percent`` are rewritten. It takes as long as rewriting those packs,
        so it waits up to ``timeout`` seconds (default an hour), not the request timeout; a
        collection no longer waited for goes on on the server. One collection or backup at a
        time: while one runs (the server's schedule included), this one waits for it to
        finish, then runs its own round."""
        return await self._run(ops.gc(), timeout)

    async def patch_turn(
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
        return await self._run(ops.patch_turn(turn_id, payload), timeout)

    async def redact_turn(self, turn_id: int, *, timeout: float | None = None) -> Redacted:
        """Takes the turn's payload away in every view (version 2): reads return it with
        ``redacted`` True and an empty payload; its bytes leave the disk at the next garbage
        collection. Final: redacting again is InvalidArgument; NotFound for an unknown turn."""
        return await self._run(ops.redact_turn(turn_id), timeout)

    async def purge_blob(self, payload_hash: HashLike, *, timeout: float | None = None) -> Purged:
        """Redacts every turn naming the blob and makes reads of it by hash NotFound (version
        2, the compliance path; run :meth:`gc` to remove its bytes now). NotFound for a hash
        the store never had."""
        return await self._run(ops.purge_blob(payload_hash), timeout)

    async def put_chunked(
        self,
        payload_hash: HashLike,
        chunks: Sequence[tuple[HashLike, int]],
        sent: Iterable[tuple[int, ops.ChunkBytes]] | Mapping[int, ops.ChunkBytes] = (),
        *,
        base: tuple[HashLike, int] | None = None,
        timeout: float | None = None,
    ) -> ChunkedStored:
        """Stores a payload given as its chunks, sending the bytes of only the chunks in
        ``sent`` (version 2, PUT_CHUNKED); see :meth:`ctxstore.Client.put_chunked`. No
        automatic chunking: ``append`` sends payloads whole."""
        return await self._run(ops.put_chunked(payload_hash, chunks, sent, base), timeout)

    async def tag_context(
        self,
        context: ContextLike,
        set: Mapping[str, str] | None = None,  # noqa: A002 - the protocol's word
        remove: Iterable[str] | str = (),
        expected_head: int | None = None,
        *,
        timeout: float | None = None,
    ) -> ContextInfo:
        """Sets and removes tags atomically (with ``expected_head``: only if the head is that
        turn, else Conflict); see :meth:`ctxstore.Client.tag_context`."""
        return await self._run(ops.tag_context(context, set, remove, expected_head), timeout)

    async def name_context(
        self, context: ContextLike, name: str, *, timeout: float | None = None
    ) -> ContextInfo:
        """Names a context that has none (AlreadyExists for a taken name)."""
        return await self._run(ops.name_context(context, name), timeout)

    async def list_contexts(
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
        """One page of matching contexts; see :meth:`ctxstore.Client.list_contexts`."""
        return await self._run(
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
    ) -> AsyncIterator[ContextInfo]:
        """Every matching context, page after page: ``async for info in
        client.iter_contexts(...)``."""
        paging = ops.contexts_paging(
            tags, name_prefix, updated_after_unix_ms, updated_before_unix_ms, page_size
        )
        return self._iterate(paging, timeout)

    async def kv_put(
        self,
        context: ContextLike,
        entries: Mapping[KeyT, bytes | bytearray | memoryview],
        if_absent: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        """Puts every entry in one durable record; see :meth:`ctxstore.Client.kv_put`."""
        await self._drive(ops.kv_put(context, entries, if_absent), timeout)

    async def kv_get(
        self, context: ContextLike, key: KeyLike, *, timeout: float | None = None
    ) -> bytes | None:
        """The value of ``key``, checked as ``verify_payloads`` says, or None if the context
        has no such key."""
        return await self._drive(ops.kv_get(context, key, self._accept_zstd), timeout)

    async def kv_delete(
        self,
        context: ContextLike,
        keys: Iterable[KeyLike] | KeyLike,
        *,
        timeout: float | None = None,
    ) -> None:
        """Deletes ``keys`` in one durable record (absent keys are no error)."""
        await self._drive(ops.kv_delete(context, keys), timeout)

    async def kv_list(
        self,
        context: ContextLike,
        prefix: KeyLike = b"",
        after: KeyLike = b"",
        *,
        limit: int = 100,
        timeout: float | None = None,
    ) -> KvPage:
        """One page of entries under ``prefix`` after ``after``; see
        :meth:`ctxstore.Client.kv_list`."""
        return await self._run(ops.kv_list(context, prefix, after, limit), timeout)

    def iter_kv(
        self,
        context: ContextLike,
        prefix: KeyLike = b"",
        after: KeyLike = b"",
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> AsyncIterator[KvItem]:
        """Every entry under ``prefix``, in key order: ``async for item in
        client.iter_kv(...)``."""
        return self._iterate(ops.kv_paging(context, prefix, after, page_size), timeout)

    # -- version 2: turns for agent frameworks -------------------------------------------------

    async def append_turns(
        self,
        context: ContextLike,
        turns: Iterable[TurnSpec],
        *,
        expected_head: int | None = None,
        timeout: float | None = None,
    ) -> list[Appended]:
        """Appends ``turns`` in order, all or none, in one durable write; see
        :meth:`ctxstore.Client.append_turns`."""
        return await self._run(ops.append_turns(context, turns, expected_head), timeout)

    async def turn_by_key(
        self,
        context: ContextLike,
        key: KeyLike,
        *,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> TurnInfo | None:
        """The context's turn with ``key`` (own or inherited), or None if no turn has it."""
        return await self._drive(ops.turn_by_key(context, key, as_of), timeout)

    async def turn_log(
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
        """One page of the context's turn log, newest first across branches, filtered by
        ``labels``; see :meth:`ctxstore.Client.turn_log`."""
        return await self._run(
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
    ) -> AsyncIterator[TurnInfo]:
        """Every turn of the turn log, newest first: ``async for turn in
        client.iter_turn_log(...)``."""
        paging = ops.turn_log_paging(context, labels, page_size, payloads, self._accept_zstd)
        return self._iterate(paging, timeout)

    async def find_turns(
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
        return await self._run(ops.find_turns(key, value, before, limit), timeout)

    def iter_find_turns(
        self,
        key: str,
        value: str,
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> AsyncIterator[TurnInfo]:
        """Every turn labelled ``key = value``, newest first: ``async for turn in
        client.iter_find_turns(...)``."""
        return self._iterate(ops.find_turns_paging(key, value, page_size), timeout)

    async def window(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> TurnPage:
        """The chain from the latest summary turn to the head, oldest first; see
        :meth:`ctxstore.Client.window`."""
        return await self._run(
            ops.view(
                ops.read_page(context, p.PageKind.WINDOW, 0, 0, limit, payloads, self._accept_zstd),
                as_of,
            ),
            timeout,
        )

    async def read_page(
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
        """A page of the chain with each turn's extras; see
        :meth:`ctxstore.Client.read_page`."""
        kind, before_turn_id, depth = ops.page_kind(before, from_depth)
        return await self._run(
            ops.view(
                ops.read_page(
                    context, kind, before_turn_id, depth, limit, payloads, self._accept_zstd
                ),
                as_of,
            ),
            timeout,
        )
