"""Streams (protocol version 3, issue 32, decision 0027) for both clients, defined once: the
values (:class:`StreamInfo`, :class:`WatchEvent`, :class:`WatchLagged`), the ops of each
request (no I/O), the *feeds* that read a stream or watch contexts, the stream objects
``open_turn`` returns, and how each shell runs a feed.

A feed is a generator that yields an :class:`~ctxstore._ops.Op` (and receives its result)
or an :class:`Emit` (an item for the caller). It only ever advances its position (a stream's
offset, a watch's sequence number) after an answer arrived and before the item is handed out,
so a shell that loses the connection sends the same op again on the next one: a reader gets
every byte exactly once, in order, across reconnects and server restarts (the server only
serves durable bytes at exactly the offset asked), and a watcher misses no event still kept
(or is told it lagged). A following reader yields a :class:`Follow` (STREAM_FOLLOW) instead,
receives its frames one by one (:data:`NEXT_FRAME` after each with ``MORE``), and after a
lost connection receives :data:`RESUME` and follows again from its offset; a follow's ERROR
is raised into it (UNKNOWN_MESSAGE from an older server: it long-polls instead).
:func:`follow_blocking` and :func:`follow_async` are the two shells' loops; they differ only
in sleeping and awaiting (and abandon a follow their caller left).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from . import _ops as ops
from . import _protocol as p
from . import _stream_protocol as s
from .errors import (
    ConnectError,
    ConnectionLost,
    ConnectTimeout,
    CtxstoreError,
    IntegrityError,
    NotFound,
    ProtocolError,
    ShuttingDown,
    StreamEnded,
    UnknownMessage,
)
from .types import Appended, ContextLike, Durability, KeyLike, ParentLike

if TYPE_CHECKING:
    from .aio import AsyncClient, _AsyncConnection, _AsyncFollow
    from .client import Client, _Connection, _Follow

__all__ = [
    "StreamInfo",
    "WatchEvent",
    "WatchLagged",
    "WatchKind",
    "TurnStream",
    "AsyncTurnStream",
]

WatchKind = s.WatchKind

READ_BYTES_MAX = 1 << 20
"""The most bytes one STREAM_READ asks for by default (the server cuts it to its answer
limit)."""
WAIT_S_DEFAULT = 30.0
"""How long one long poll waits by default (the server cuts it to ``--stream-wait-ms-max``)."""
RECONNECT_S_DEFAULT = 30.0
"""How long a feed retries a lost connection by default before it raises."""
_RETRY_PAUSE_S_MIN = 0.05
_RETRY_PAUSE_S_MAX = 1.0
_RETRIED = (ConnectionLost, ConnectError, ConnectTimeout, ShuttingDown)
"""What a feed retries on a new connection: the connection, not the request, failed."""


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """An open stream (a turn in the making)."""

    stream_id: int
    context_id: int
    length: int
    """Bytes acknowledged (durable) so far."""
    type_tag: int
    codec: int
    opened_at_unix_ms: int
    updated_at_unix_ms: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: ``kind`` happened to ``context_id``; ``turn_id`` (the new head,
    or the turn a stream was sealed into) and ``stream_id`` are 0 where the kind has none.
    ``seq`` rises; pass the last one seen as ``after_seq`` to resume."""

    seq: int
    kind: s.WatchKind
    context_id: int
    turn_id: int
    stream_id: int


@dataclass(frozen=True, slots=True)
class WatchLagged:
    """A watch's typed "lagged" outcome: the events after ``after_seq`` are no longer kept
    (the server keeps the newest 65,536, none from before a restart). Re-read the state you
    follow; the watch goes on after ``resume_after``."""

    after_seq: int
    resume_after: int


@dataclass(frozen=True, slots=True)
class Emit:
    """A feed step: hand ``item`` to the caller."""

    item: Any


@dataclass(frozen=True, slots=True)
class Follow:
    """A feed step: send ``request`` (STREAM_FOLLOW) and give the feed its first frame (a
    STREAM_PUSHED); then :data:`NEXT_FRAME` gives the next, until the frame without ``MORE``.
    Instead of a frame the feed receives :data:`RESUME` when the connection was lost (follow
    again from its offset, on a new one), and the follow's ERROR (UnknownMessage, NotFound,
    …) is raised into it at the ``yield``."""

    request: s.StreamFollow


class _NextFrame:
    """The type of :data:`NEXT_FRAME`."""

    __slots__ = ()


NEXT_FRAME = _NextFrame()
"""A feed step: the follow's next frame (after one with ``MORE``)."""
RESUME: Any = object()
"""What a feed receives instead of a follow's frame when the connection was lost."""

Feed = Generator["ops.Op[Any] | Emit | Follow | _NextFrame", Any, None]
"""A read or a watch (see the module's doc)."""


def _info(record: s.StreamInfoRecord) -> StreamInfo:
    return StreamInfo(
        record.stream_id,
        record.context_id,
        record.length,
        record.type_tag,
        record.codec,
        record.opened_at_unix_ms,
        record.updated_at_unix_ms,
    )


def _expect(response: p.Response, cls: type[Any]) -> Any:
    if not isinstance(response, cls):
        raise ProtocolError(f"expected {cls.__name__}, got {type(response).__name__}")
    return response


def _wait_ms(wait_s: float) -> int:
    if not 0 <= wait_s <= s.STREAM_WAIT_MS_MAX / 1000:
        raise ValueError(f"a wait is 0 to {s.STREAM_WAIT_MS_MAX / 1000:g} s, not {wait_s!r}")
    return int(wait_s * 1000)


def _delta(data: bytes | bytearray | memoryview) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a delta is bytes, not {type(data).__name__}")
    raw = bytes(data)
    if not 1 <= len(raw) <= s.STREAM_DELTA_BYTES_MAX:
        raise ValueError(
            f"a delta is 1 to {s.STREAM_DELTA_BYTES_MAX} bytes, not {len(raw)} "
            "(send a larger one in pieces)"
        )
    return raw


# -- ops -----------------------------------------------------------------------------------------


def open_stream(
    context: ContextLike,
    *,
    type_tag: int,
    codec: int,
    expected_head: int | None,
    parent: ParentLike,
    key: KeyLike | None,
    labels: Mapping[str, str] | None,
    links: Sequence[int],
    summary: bool,
) -> ops.Op[StreamInfo]:
    """STREAM_OPEN; the answer must be a new, empty stream of the context asked for."""
    target = ops._context(context)
    kind, parent_turn_id = ops._parent(parent)
    if expected_head is not None:
        ops._u64(expected_head, "expected_head")
    extras = p.ExtrasRecord(ops._turn_key(key), ops._label_pairs(labels), ops._links(links))
    request = s.StreamOpen(
        target,
        expected_head,
        kind,
        parent_turn_id,
        ops._u64(type_tag, "type_tag"),
        ops._u32(codec, "codec"),
        bool(summary),
        extras,
    )

    def finish(response: p.Response) -> StreamInfo:
        info = _info(_expect(response, s.StreamInfoResponse).info)
        if info.length != 0 or (isinstance(target, int) and info.context_id != target):
            raise ProtocolError(
                f"STREAM_OPEN on context {target!r} answered stream {info.stream_id} of "
                f"context {info.context_id} holding {info.length} bytes"
            )
        return info

    return ops.Op(request, finish)


def append_delta(
    stream_id: int, data: bytes | bytearray | memoryview, offset: int | None
) -> ops.Op[int]:
    """STREAM_APPEND (``offset``: only there); the stream's length once the delta is durable."""
    raw = _delta(data)
    request = s.StreamAppend(
        ops._u64(stream_id, "stream_id"),
        None if offset is None else ops._u64(offset, "offset"),
        raw,
    )

    def finish(response: p.Response) -> int:
        answer = _expect(response, s.StreamAppendedResponse)
        expected = None if offset is None else offset + len(raw)
        if (
            answer.stream_id != stream_id
            or answer.length < len(raw)
            or (expected is not None and answer.length != expected)
        ):
            raise ProtocolError(
                f"STREAM_APPEND of {len(raw)} bytes to stream {stream_id} at {offset} was "
                f"answered: stream {answer.stream_id}, length {answer.length}"
            )
        return int(answer.length)

    return ops.Op(request, finish)


def seal_stream(stream_id: int, length: int | None = None) -> ops.Op[Appended]:
    """STREAM_SEAL: the sealed turn (its payload is the stream's ``length`` bytes, when known)."""
    request = s.StreamSeal(ops._u64(stream_id, "stream_id"))

    def finish(response: p.Response) -> Appended:
        answer = _expect(response, s.StreamSealedResponse)
        if length is not None and answer.turn.payload_len != length:
            raise IntegrityError(
                f"stream {stream_id} of {length} bytes was sealed into turn "
                f"{answer.turn.turn_id} of {answer.turn.payload_len} bytes"
            )
        return Appended(ops.turn_of(answer.turn), answer.deduped)

    return ops.Op(request, finish)


def abort_stream(stream_id: int) -> ops.Op[None]:
    """STREAM_ABORT."""
    request = s.StreamAbort(ops._u64(stream_id, "stream_id"))

    def finish(response: p.Response) -> None:
        answer = _expect(response, s.StreamAbortedResponse)
        if answer.stream_id != stream_id:
            raise ProtocolError(f"STREAM_ABORT of {stream_id} answered {answer.stream_id}")

    return ops.Op(request, finish)


def open_streams(
    context: ContextLike, page_size: int = s.STREAM_LIST_MAX
) -> ops.Plan[list[StreamInfo]]:
    """Every open stream of the context, by StreamID (STREAM_LIST page after page)."""
    target = ops._context(context)
    if not 1 <= page_size <= s.STREAM_LIST_MAX:
        raise ValueError(f"page_size is 1 to {s.STREAM_LIST_MAX}, not {page_size}")
    found: list[StreamInfo] = []
    after = 0
    while True:
        page: list[StreamInfo] = yield ops.Op(
            s.StreamList(target, after, page_size),
            lambda response: [_info(r) for r in _expect(response, s.StreamListResponse).streams],
        )
        for info in page:
            if info.stream_id <= after or (isinstance(target, int) and info.context_id != target):
                raise ProtocolError(
                    f"STREAM_LIST after stream {after} of context {target!r} answered stream "
                    f"{info.stream_id} of context {info.context_id}"
                )
            after = info.stream_id
        found.extend(page)
        if len(page) < page_size:
            return found


def find_stream(context: ContextLike, stream_id: int) -> ops.Plan[StreamInfo]:
    """The context's open stream ``stream_id`` (NotFound if it is not open there)."""
    ops._u64(stream_id, "stream_id")
    for info in (yield from open_streams(context)):
        if info.stream_id == stream_id:
            return info
    raise NotFound(
        f"stream {stream_id} is not open in context {context!r} (sealed, aborted, or never "
        "opened there); read it with read_stream"
    )


# -- feeds ---------------------------------------------------------------------------------------


def read_feed(
    stream_id: int,
    offset: int,
    follow: bool,
    wait_s: float,
    bytes_max: int,
    accept_zstd: bool,
    follow_request: type[s.StreamFollow] = s.StreamFollow,
) -> Feed:
    """The bytes of a stream from ``offset``, chunk by chunk (see :meth:`Calls.read_stream`):
    with ``follow`` pushed (``follow_request``, STREAM_FOLLOW), long-polled where the server
    answers UNKNOWN_MESSAGE; the arguments are checked now, not at the first step."""
    ops._u64(stream_id, "stream_id")
    ops._u64(offset, "offset")
    if not 1 <= bytes_max <= p.U32_MAX:
        raise ValueError(f"bytes_max is 1 to {p.U32_MAX}, not {bytes_max}")
    if not follow:
        return _read(stream_id, offset, False, 0, bytes_max, accept_zstd)
    wait_ms = _wait_ms(wait_s)
    return _follow(stream_id, offset, wait_ms, bytes_max, accept_zstd, follow_request)


def _follow(
    stream_id: int,
    offset: int,
    wait_ms: int,
    bytes_max: int,
    accept_zstd: bool,
    follow_request: type[s.StreamFollow],
) -> Feed:
    """STREAM_FOLLOW from ``offset``, again from the new offset after a follow that ended
    open (no delta for ``wait_ms``, the server closing) or a lost connection; the offset
    advances only with a frame, by its bytes: exactly once, in order."""
    while True:
        try:
            frame = yield Follow(follow_request(stream_id, offset, bytes_max, wait_ms))
        except UnknownMessage:
            # A server older than STREAM_FOLLOW: long polls, from the same offset.
            yield from _read(stream_id, offset, True, wait_ms, bytes_max, accept_zstd)
            return
        while frame is not RESUME:
            answer = _expect(frame, s.StreamPushedResponse)
            _check_answer("STREAM_FOLLOW", stream_id, offset, answer)
            if answer.state == s.StreamState.ABORTED:
                raise _aborted(stream_id, offset)
            if answer.state == s.StreamState.SEALED:
                yield from _sealed_rest(stream_id, answer.turn_id, offset, accept_zstd)
                return
            if answer.data:
                offset += len(answer.data)
                yield Emit(answer.data)
            if not answer.more:
                break  # open at the follow's end (idle, or the server closing): again
            frame = yield NEXT_FRAME


def _read(
    stream_id: int, offset: int, follow: bool, wait_ms: int, bytes_max: int, accept_zstd: bool
) -> Feed:
    while True:
        request = s.StreamRead(stream_id, offset, bytes_max, wait_ms)
        answer = yield ops.Op(request, lambda response: _expect(response, s.StreamBytesResponse))
        _check_answer("STREAM_READ", stream_id, offset, answer)
        if answer.state == s.StreamState.OPEN:
            if answer.data:
                offset += len(answer.data)
                yield Emit(answer.data)
            if not follow and offset >= answer.length:
                return
            continue
        if answer.state == s.StreamState.ABORTED:
            raise _aborted(stream_id, offset)
        yield from _sealed_rest(stream_id, answer.turn_id, offset, accept_zstd)
        return


def _check_answer(name: str, stream_id: int, offset: int, answer: s.StreamBytesResponse) -> None:
    """A STREAM_READ answer or a STREAM_FOLLOW frame is of the stream asked for, at the offset
    asked (a follow's next frame: where the previous ended), its bytes within the stream's
    acknowledged length: else a ProtocolError."""
    if answer.stream_id != stream_id or answer.offset != offset:
        raise ProtocolError(
            f"{name} of stream {stream_id} at {offset} answered stream {answer.stream_id} at "
            f"{answer.offset}"
        )
    if answer.state == s.StreamState.OPEN and offset + len(answer.data) > answer.length:
        raise ProtocolError(
            f"{name} of stream {stream_id} answered bytes {offset}..{offset + len(answer.data)} "
            f"of a stream of {answer.length}"
        )


def _aborted(stream_id: int, offset: int) -> StreamEnded:
    return StreamEnded(
        f"stream {stream_id} was aborted (read up to byte {offset}); it never became a turn",
        code=StreamEnded.code,
        detail=0,
    )


def _sealed_rest(stream_id: int, turn_id: int, offset: int, accept_zstd: bool) -> Feed:
    """A sealed stream's bytes past ``offset``: its turn's payload (a reader that was away
    during the seal resumes there, exactly once)."""
    turn = yield ops.get_turn(turn_id)
    if offset > turn.payload_len:
        raise ProtocolError(
            f"stream {stream_id} was read to byte {offset}, past its sealed turn "
            f"{turn.turn_id} of {turn.payload_len} bytes"
        )
    if offset < turn.payload_len:
        payload: bytes = yield ops.get_blob(turn.payload_hash, accept_zstd)
        yield Emit(payload[offset:])


def watch_target(
    context: ContextLike | None, name_prefix: str | None, tag: tuple[str, str] | None
) -> s.WatchTarget:
    """Exactly one of the three, as a WATCH target."""
    given = sum(value is not None for value in (context, name_prefix, tag))
    if given != 1:
        raise ValueError("watch one context, one name_prefix or one tag (exactly one)")
    if context is not None:
        return s.WatchTarget(context=ops._context(context))
    if name_prefix is not None:
        return s.WatchTarget(name_prefix=ops._strings(name_prefix, "name_prefix"))
    assert tag is not None
    key, value = tag
    return s.WatchTarget(tag=(ops._strings(key, "a tag key"), ops._strings(value, "a tag value")))


def watch_position(target: s.WatchTarget) -> ops.Op[int]:
    """WATCH from now: the current position, no event."""

    def finish(response: p.Response) -> int:
        answer = _expect(response, s.WatchedResponse)
        if answer.lagged or answer.events:
            raise ProtocolError("WATCH from now was answered with events, or lagged")
        return int(answer.resume_after)

    return ops.Op(s.Watch(target, s.WATCH_FROM_NOW, 1, 0), finish)


def watch_feed(
    target: s.WatchTarget, after_seq: int | None, max_events: int, wait_s: float
) -> Feed:
    """The target's events after ``after_seq`` (None: from now), forever (see
    :meth:`Calls.watch`); the arguments are checked now, not at the first step."""
    if not 1 <= max_events <= s.WATCH_EVENTS_MAX:
        raise ValueError(f"max_events is 1 to {s.WATCH_EVENTS_MAX}, not {max_events}")
    wait_ms = _wait_ms(wait_s)
    position = s.WATCH_FROM_NOW if after_seq is None else ops._u64(after_seq, "after_seq")
    return _watch(target, position, max_events, wait_ms)


def _watch(target: s.WatchTarget, position: int, max_events: int, wait_ms: int) -> Feed:
    while True:
        from_now = position == s.WATCH_FROM_NOW
        request = s.Watch(target, position, max_events, 0 if from_now else wait_ms)
        answer = yield ops.Op(request, lambda response: _expect(response, s.WatchedResponse))
        if answer.lagged:
            if from_now:
                raise ProtocolError("WATCH from now was answered lagged")
            yield Emit(WatchLagged(position, answer.resume_after))
            position = answer.resume_after
            continue
        for event in answer.events:
            if not from_now and event.seq <= position or event.seq > answer.resume_after:
                raise ProtocolError(
                    f"WATCH after {position} answered event {event.seq} (resume after "
                    f"{answer.resume_after})"
                )
            position = event.seq
            yield Emit(
                WatchEvent(event.seq, event.kind, event.context_id, event.turn_id, event.stream_id)
            )
        if not from_now and answer.resume_after < position:
            raise ProtocolError(
                f"WATCH after {position} answered resume_after {answer.resume_after}"
            )
        position = answer.resume_after


# -- the shells' loops ---------------------------------------------------------------------------


class Follower:
    """One run of a feed: the bookkeeping both shells' loops share (as :class:`ops.Driver`
    for plans). Each takes :meth:`step` after step — an :class:`Emit` to hand out, or an op
    to run and :meth:`answer` — until it says None; when an op's connection failed it asks
    :meth:`lost` how long to pause, and :meth:`step` then gives the same op again."""

    __slots__ = ("_feed", "_reconnect_s", "_result", "_error", "_again", "_lost_at", "_attempt")

    def __init__(self, feed: Feed, reconnect_s: float) -> None:
        self._feed = feed
        self._reconnect_s = reconnect_s
        self._result: Any = None
        self._error: BaseException | None = None
        self._again: ops.Op[Any] | None = None
        self._lost_at: float | None = None
        self._attempt = 0

    def step(self) -> ops.Op[Any] | Emit | Follow | _NextFrame | None:
        """The next step; None once the feed ended (an exception it raises propagates)."""
        if self._again is not None:
            return self._again
        result, self._result = self._result, None
        error, self._error = self._error, None
        try:
            step = self._feed.send(result) if error is None else self._feed.throw(error)
        except StopIteration:
            return None
        return step

    def refused(self, error: BaseException) -> None:
        """A follow's ERROR (or a failure that is not the connection's): raised into the
        feed at its step, which decides (UNKNOWN_MESSAGE: it long-polls instead)."""
        self._error = error

    def answer(self, result: Any) -> None:
        """The last op's result: the feed goes on."""
        self._result = result
        self._again = None
        self._lost_at = None
        self._attempt = 0

    def lost(self, error: BaseException, step: ops.Op[Any] | Follow | _NextFrame) -> float:
        """``step``'s connection failed with ``error``: the pause before an op is sent again
        on a new connection (a follow's feed receives :data:`RESUME` and follows again from
        its offset); ``error`` itself once ``reconnect_s`` passed since the loss."""
        now = time.monotonic()
        self._lost_at = now if self._lost_at is None else self._lost_at
        if now - self._lost_at >= self._reconnect_s:
            raise error
        if isinstance(step, ops.Op):
            self._again = step
        else:
            self._result = RESUME
        pause = min(_RETRY_PAUSE_S_MAX, _RETRY_PAUSE_S_MIN * (1 << min(self._attempt, 8)))
        self._attempt += 1
        return pause


def follow_blocking(
    client: Client, feed: Feed, timeout: float | None, reconnect_s: float
) -> Iterator[Any]:
    """Runs ``feed`` on the blocking client: each op on its connection (an op whose
    connection failed is sent again on a new one for up to ``reconnect_s``), each item
    yielded."""
    follower = Follower(feed, reconnect_s)
    route: tuple[_Connection, _Follow] | None = None
    try:
        while (step := follower.step()) is not None:
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                if isinstance(step, ops.Op):
                    follower.answer(client._run(step, timeout))
                    continue
                deadline = client._deadline(timeout)
                if isinstance(step, Follow):
                    conn = client._connection(deadline)
                    route = (conn, conn.follow(step.request, deadline))
                assert route is not None, "NEXT_FRAME follows a Follow"
                follower.answer(route[0].next_frame(route[1], deadline))
            except _RETRIED as error:
                route = None  # its connection ended, and its follow with it
                time.sleep(follower.lost(error, step))
            except CtxstoreError as error:
                if isinstance(step, ops.Op):
                    raise
                follower.refused(error)
    finally:
        if route is not None:
            route[0].abandon(route[1])  # its frames are dropped until its last


async def follow_async(
    client: AsyncClient, feed: Feed, timeout: float | None, reconnect_s: float
) -> AsyncIterator[Any]:
    """:func:`follow_blocking` for the asyncio client."""
    follower = Follower(feed, reconnect_s)
    route: tuple[_AsyncConnection, _AsyncFollow] | None = None
    try:
        while (step := follower.step()) is not None:
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                if isinstance(step, ops.Op):
                    follower.answer(await client._run(step, timeout))
                    continue
                deadline = client._deadline(timeout)
                if isinstance(step, Follow):
                    conn = await client._connection(deadline)
                    route = (conn, await conn.follow(step.request, deadline))
                assert route is not None, "NEXT_FRAME follows a Follow"
                follower.answer(await route[0].next_frame(route[1], deadline))
            except _RETRIED as error:
                route = None  # its connection ended, and its follow with it
                await asyncio.sleep(follower.lost(error, step))
            except CtxstoreError as error:
                if isinstance(step, ops.Op):
                    raise
                follower.refused(error)
    finally:
        if route is not None:
            route[0].abandon(route[1])  # its frames are dropped until its last


# -- the stream objects --------------------------------------------------------------------------

StreamStatus = Literal["open", "sealed", "aborted"]


class _StreamCore:
    """What both stream objects keep — the stream, its acknowledged length, how it stands —
    and the ops of their methods, so each shell's method is a line that runs one."""

    def __init__(
        self, info: StreamInfo, timeout: float | None, durability: Durability | None = None
    ) -> None:
        self.info = info
        self.stream_id = info.stream_id
        self.length = info.length
        """Bytes acknowledged (durable) so far."""
        self.status: StreamStatus = "open"
        self.sealed: Appended | None = None
        """The sealed turn, once :meth:`seal` returned."""
        self._timeout = timeout
        self._durability = durability
        """When the seal is acknowledged (``open_turn(durability=...)``)."""

    def _check_open(self, what: str) -> None:
        if self.status != "open":
            raise StreamEnded(
                f"{what}: stream {self.stream_id} was {self.status} by this object",
                code=StreamEnded.code,
                detail=self.sealed.turn_id if self.sealed is not None else 0,
            )

    def _append_op(self, data: bytes | bytearray | memoryview) -> ops.Op[int]:
        self._check_open("append")

        def finish(response: p.Response) -> int:
            self.length = op.finish(response)
            return self.length

        op = append_delta(self.stream_id, data, self.length)
        return ops.Op(op.request, finish)

    def _seal_op(self) -> ops.Op[Appended]:
        self._check_open("seal")
        op = seal_stream(self.stream_id, self.length)

        def finish(response: p.Response) -> Appended:
            self.sealed = op.finish(response)
            self.status = "sealed"
            return self.sealed

        return ops.durable_op(ops.Op(op.request, finish), self._durability)

    def _abort_op(self) -> ops.Op[None]:
        self._check_open("abort")
        op = abort_stream(self.stream_id)

        def finish(response: p.Response) -> None:
            op.finish(response)
            self.status = "aborted"

        return ops.Op(op.request, finish)

    def _exit_op(self, exc: BaseException | None) -> ops.Op[Any] | None:
        """What leaving a ``with`` block does: nothing once ended, else seal after a clean
        block, abort after an exception."""
        if self.status != "open":
            return None
        return self._seal_op() if exc is None else self._abort_op()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(stream_id={self.stream_id}, length={self.length}, "
            f"status={self.status!r})"
        )


class TurnStream(_StreamCore):
    """An open stream of the blocking client (``Client.open_turn``): :meth:`append` deltas,
    then :meth:`seal` (one ordinary turn) or :meth:`abort`.

    Each delta is sent at the stream's length (STREAM_APPEND with AT_OFFSET), so an
    :meth:`append` that raised :class:`~ctxstore.errors.ConnectionLost` may simply be
    repeated: the next connection takes the stream over and the delta is written once.

    As a context manager: a clean exit seals the stream (unless it was sealed or aborted in
    the block); an exception aborts it (the exception propagates; a failure of the abort
    itself is dropped, as the stream is aborted by the server's idle timeout anyway)."""

    def __init__(
        self,
        client: Client,
        info: StreamInfo,
        timeout: float | None = None,
        durability: Durability | None = None,
    ) -> None:
        super().__init__(info, timeout, durability)
        self._client = client

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Appends a delta (1 byte to 1 MiB); returns the stream's length once it is durable
        (fdatasync'ed in a group commit)."""
        return self._client._run(self._append_op(data), self._timeout)

    def seal(self) -> Appended:
        """Seals the stream into one turn (its bytes one blob) and moves the head as an
        append would; :class:`~ctxstore.errors.Conflict` on a stale expected head (the stream
        stays open)."""
        return self._client._run(self._seal_op(), self._timeout)

    def abort(self) -> None:
        """Aborts the stream: it never becomes a turn."""
        self._client._run(self._abort_op(), self._timeout)

    def __enter__(self) -> TurnStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        op = self._exit_op(exc)
        if op is None:
            return
        try:
            self._client._run(op, self._timeout)
        except CtxstoreError:
            if exc is None:
                raise  # a seal that failed is the block's outcome
            # An abort that failed: the block's exception is the one to see (the server
            # aborts an idle stream anyway).


class AsyncTurnStream(_StreamCore):
    """:class:`TurnStream` for the asyncio client (``await AsyncClient.open_turn``): the same
    methods as coroutines, ``async with`` for the context manager."""

    def __init__(
        self,
        client: AsyncClient,
        info: StreamInfo,
        timeout: float | None = None,
        durability: Durability | None = None,
    ) -> None:
        super().__init__(info, timeout, durability)
        self._client = client

    async def append(self, data: bytes | bytearray | memoryview) -> int:
        """See :meth:`TurnStream.append`."""
        return await self._client._run(self._append_op(data), self._timeout)

    async def seal(self) -> Appended:
        """See :meth:`TurnStream.seal`."""
        return await self._client._run(self._seal_op(), self._timeout)

    async def abort(self) -> None:
        """See :meth:`TurnStream.abort`."""
        await self._client._run(self._abort_op(), self._timeout)

    async def __aenter__(self) -> AsyncTurnStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        op = self._exit_op(exc)
        if op is None:
            return
        try:
            await self._client._run(op, self._timeout)
        except CtxstoreError:
            if exc is None:
                raise  # as TurnStream.__exit__
