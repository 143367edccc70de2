"""Every call of both clients, defined once: :class:`Calls` (issue 30; style.md §9).

A call is a method of :class:`Calls` with its signature and docstring that builds, without
I/O, what to send: a :class:`Call` of an :class:`~ctxstore._ops.Op` (one request) or of a
:data:`~ctxstore._ops.Plan` (several), or a :class:`Listing` of a
:class:`~ctxstore._ops.Paging`. :class:`ctxstore.Client` and :class:`ctxstore.AsyncClient`
are two thin shells over it that own only their transport: each names its kind
(``class Client(Calls, shell="blocking")``), and :meth:`Calls.__init_subclass__` gives it,
for every call, a real method of that kind — ``client.append(...)`` runs the definition and
then the request on the blocking connection; ``await aclient.append(...)`` the same on the
asyncio one; ``iter_*`` return an iterator or an async iterator of the pages.

Why one table of calls and two shells rather than psycopg's generated sync twin
(``tools/async_to_sync.py``): the two clients differ only in their transport (a reader thread
and a socket under locks, a reader task and a stream), which a generator would have to be
told to leave alone, while every call differs only by an ``await`` that a three-line wrapper
adds. Nothing is generated, so nothing can go stale and no second copy of 46 methods sits in
the tree. The methods are ordinary functions on each class (``help()``, ``inspect.signature``
and ``inspect.iscoroutinefunction`` see what a hand-written method shows), and type checkers
see exact types through :class:`call`'s ``__get__`` overloads: ``Client.append`` returns an
:class:`~ctxstore.types.Appended`, ``AsyncClient.append`` a coroutine of one.

A new call is one method here, on top of its op or plan in :mod:`ctxstore._ops`.
"""

from __future__ import annotations

import inspect
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypeVar,
    cast,
    overload,
)

from . import _ops as ops
from . import _protocol as p
from . import _stream_protocol as s
from . import _streams
from ._connection import ClientCore
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
    Stats,
    Tenant,
    TenantDeleted,
    TenantKeyRotated,
    Turn,
    TurnHits,
    TurnInfo,
    TurnPage,
    TurnSpec,
    VectorHits,
    VectorIndex,
    VectorMetric,
)

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

__all__ = ["Call", "Calls", "Listing", "Shell"]

P = ParamSpec("P")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - the item type of a listing

Shell = Literal["blocking", "asyncio"]
"""The kinds of shell: :class:`ctxstore.Client` and :class:`ctxstore.AsyncClient`."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """What one call sends: an op or a plan, and the call's ``timeout`` (None: the client's)."""

    step: ops.Op[T] | ops.Plan[T]
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Listing(Generic[I]):
    """What an ``iter_*`` call follows: a paging, and the ``timeout`` of each page."""

    paging: ops.Paging[Any, I]
    timeout: float | None


class call(Generic[P, T]):  # noqa: N801 - a decorator, named as one
    """Marks a method of :class:`Calls` as a call; to a type checker, the method of each shell
    (at run time each shell has its own function, installed by ``__init_subclass__``)."""

    def __init__(self, define: Callable[Concatenate[Calls, P], Call[T]]) -> None:
        self.define = define

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> call[P, T]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, obj: AsyncClient, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: object, owner: type[Any]) -> Any:
        if obj is None:
            return self
        raise TypeError(f"{type(obj).__name__} is no client shell (see ctxstore._calls)")

    def method(self, name: str, owner: type[Any], shell: Shell) -> Callable[..., Any]:
        """The shell's method: runs the definition, then what it built on the shell's own
        transport (``_run`` an op, ``_drive`` a plan: blocking, or coroutines)."""
        define = self.define

        def blocking(client: Any, /, *args: Any, **kwargs: Any) -> Any:
            made = define(client, *args, **kwargs)
            if isinstance(made.step, ops.Op):  # one request: no plan to drive
                return client._run(made.step, made.timeout)
            return client._drive(made.step, made.timeout)

        async def awaiting(client: Any, /, *args: Any, **kwargs: Any) -> Any:
            made = define(client, *args, **kwargs)
            if isinstance(made.step, ops.Op):
                return await client._run(made.step, made.timeout)
            return await client._drive(made.step, made.timeout)

        method = blocking if shell == "blocking" else awaiting
        return _described(method, define, name, owner, shell)


class listing(Generic[P, I]):  # noqa: N801 - a decorator, named as one
    """Marks a method of :class:`Calls` as a listing (``iter_*``): an iterator of the
    blocking shell, an async iterator of the asyncio one; pages are fetched as the iteration
    reaches them, the arguments checked when the method is called."""

    def __init__(self, define: Callable[Concatenate[Calls, P], Listing[I]]) -> None:
        self.define = define

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> listing[P, I]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any]) -> Callable[P, Iterator[I]]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type[Any]) -> Callable[P, AsyncIterator[I]]: ...
    def __get__(self, obj: object, owner: type[Any]) -> Any:
        if obj is None:
            return self
        raise TypeError(f"{type(obj).__name__} is no client shell (see ctxstore._calls)")

    def method(self, name: str, owner: type[Any], shell: Shell) -> Callable[..., Any]:
        """The shell's method: its ``_iterate`` (a generator, or an async generator) over the
        definition's paging."""
        define = self.define

        def method(client: Any, /, *args: Any, **kwargs: Any) -> Any:
            made = define(client, *args, **kwargs)
            return client._iterate(made.paging, made.timeout)

        return _described(method, define, name, owner, shell)


@dataclass(frozen=True, slots=True)
class Following(Generic[I]):
    """What a feed call (``read_stream``, ``watch``) follows: a feed
    (:mod:`ctxstore._streams`), the ``timeout`` of each request (its long poll's wait
    included) and how long a lost connection is retried."""

    feed: _streams.Feed
    timeout: float | None
    reconnect_s: float


class following(listing[P, I]):  # noqa: N801 - a decorator, named as one
    """Marks a method of :class:`Calls` as a feed: an iterator of the blocking shell, an async
    iterator of the asyncio one, as a listing (whose typing it shares), run by
    :func:`ctxstore._streams.follow_blocking` / ``follow_async``, which send a request again
    on a new connection when its connection is lost; the arguments are checked when the
    method is called."""

    def __init__(self, define: Callable[Concatenate[Calls, P], Following[I]]) -> None:
        self.define = define  # type: ignore[assignment]

    def method(self, name: str, owner: type[Any], shell: Shell) -> Callable[..., Any]:
        """The shell's method: the shell's loop over the definition's feed."""
        define = cast(Callable[..., Following[I]], self.define)
        follow = _streams.follow_blocking if shell == "blocking" else _streams.follow_async

        def method(client: Any, /, *args: Any, **kwargs: Any) -> Any:
            made = define(client, *args, **kwargs)
            return follow(client, made.feed, made.timeout, made.reconnect_s)

        return _described(method, define, name, owner, shell)


@dataclass(frozen=True, slots=True)
class Opening:
    """What ``open_turn`` and ``resume_turn`` send (STREAM_OPEN; STREAM_LIST pages), and the
    timeout of the stream's calls."""

    step: ops.Op[_streams.StreamInfo] | ops.Plan[_streams.StreamInfo]
    timeout: float | None
    durability: Durability | None = None
    """When the stream's seal is acknowledged (``open_turn(durability=...)``)."""


class opening(Generic[P]):  # noqa: N801 - a decorator, named as one
    """Marks a method of :class:`Calls` that opens a stream: the blocking shell's returns a
    :class:`~ctxstore._streams.TurnStream`, the asyncio shell's a coroutine of an
    :class:`~ctxstore._streams.AsyncTurnStream`."""

    def __init__(self, define: Callable[Concatenate[Calls, P], Opening]) -> None:
        self.define = define

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> opening[P]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any]) -> Callable[P, _streams.TurnStream]: ...
    @overload
    def __get__(
        self, obj: AsyncClient, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, _streams.AsyncTurnStream]]: ...
    def __get__(self, obj: object, owner: type[Any]) -> Any:
        if obj is None:
            return self
        raise TypeError(f"{type(obj).__name__} is no client shell (see ctxstore._calls)")

    def method(self, name: str, owner: type[Any], shell: Shell) -> Callable[..., Any]:
        """The shell's method: runs STREAM_OPEN, wraps the stream in the shell's object."""
        define = self.define

        def blocking(client: Any, /, *args: Any, **kwargs: Any) -> Any:
            made = define(client, *args, **kwargs)
            run = client._run if isinstance(made.step, ops.Op) else client._drive
            info = run(made.step, made.timeout)
            return _streams.TurnStream(client, info, made.timeout, made.durability)

        async def awaiting(client: Any, /, *args: Any, **kwargs: Any) -> Any:
            made = define(client, *args, **kwargs)
            run = client._run if isinstance(made.step, ops.Op) else client._drive
            info = await run(made.step, made.timeout)
            return _streams.AsyncTurnStream(client, info, made.timeout, made.durability)

        method = blocking if shell == "blocking" else awaiting
        return _described(method, define, name, owner, shell)


def _described(
    method: Callable[..., Any],
    define: Callable[..., Any],
    name: str,
    owner: type[Any],
    shell: Shell,
) -> Callable[..., Any]:
    """``method`` named, documented and signed as the shell's own ``owner.name``: the
    definition's docstring and parameters, the return annotation the shell gives."""
    signature = inspect.signature(define)
    returned = _returned(str(signature.return_annotation), shell)
    method.__name__ = name
    method.__qualname__ = f"{owner.__qualname__}.{name}"
    method.__module__ = owner.__module__
    method.__doc__ = define.__doc__
    method.__signature__ = signature.replace(return_annotation=returned)  # type: ignore[attr-defined]
    method.__annotations__ = {**define.__annotations__, "return": returned}
    return method


def _returned(annotation: str, shell: Shell) -> str:
    """The return annotation of a shell's method, from its definition's (a string: this
    module is ``from __future__ import annotations``): ``Call[X]`` is ``X`` (awaited, for
    the asyncio shell), ``Listing[X]`` an ``Iterator[X]`` or an ``AsyncIterator[X]``."""
    kind, _, rest = annotation.partition("[")
    inner = rest[:-1]
    if kind == "Call":
        return inner
    if kind == "Opening":
        return "TurnStream" if shell == "blocking" else "AsyncTurnStream"
    assert kind in ("Listing", "Following"), annotation
    return f"Iterator[{inner}]" if shell == "blocking" else f"AsyncIterator[{inner}]"


class Calls(ClientCore):
    """The calls both clients have, each defined once (see the module's doc). A subclass that
    passes ``shell=`` is a shell: it gets every call as a method of that kind, and must have
    ``_run`` (an op), ``_drive`` (a plan) and ``_iterate`` (follow a paging), blocking or
    coroutines as its kind says."""

    _STREAM_FOLLOW_REQUEST: ClassVar[type[s.StreamFollow]] = s.StreamFollow
    """The request ``read_stream(..., follow=True)`` pushes with (STREAM_FOLLOW). A hook for
    tests: a subclass that sends a message type the server does not know sees the fallback to
    STREAM_READ long polls that an older server causes (UNKNOWN_MESSAGE)."""

    def __init_subclass__(cls, shell: Shell | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if shell is None:
            return  # a subclass of a shell inherits its methods
        if shell not in ("blocking", "asyncio"):
            raise TypeError(f"shell is 'blocking' or 'asyncio', not {shell!r}")
        for name, definition in vars(Calls).items():
            if isinstance(definition, (call, listing, opening)):  # following is a listing
                setattr(cls, name, definition.method(name, cls, shell))

    @call
    def request(self, request: p.Request, *, timeout: float | None = None) -> Call[p.Response]:
        """Sends any request (see :mod:`ctxstore._protocol`) and returns its decoded response;
        an ERROR raises its exception. The low-level door for messages without a method."""
        return Call(ops.raw(request), timeout)

    @call
    def ping(self, nonce: int | None = None, *, timeout: float | None = None) -> Call[None]:
        """Round trip to the server (PING/PONG); checks that the nonce is echoed."""
        return Call(ops.ping(nonce), timeout)

    @call
    def create_context(
        self, base_turn_id: int = 0, *, timeout: float | None = None
    ) -> Call[ContextHead]:
        """A new context: empty, or with its head at ``base_turn_id`` (copies nothing)."""
        return Call(ops.create_context(base_turn_id), timeout)

    @call
    def fork(self, turn_id: int, *, timeout: float | None = None) -> Call[ContextHead]:
        """A new context whose head is ``turn_id`` (O(1); 0 raises InvalidArgument)."""
        return Call(ops.fork(turn_id), timeout)

    @call
    def head(self, context: ContextLike, *, timeout: float | None = None) -> Call[ContextHead]:
        """The context's head (NotFound if there is no such context)."""
        return Call(ops.head(context), timeout)

    @call
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
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[Appended]:
        """Appends a turn with ``payload`` after the context's head, durably; the head moves
        to it.

        With ``expected_head`` (0: the context must be empty) the append happens only if the
        head is that turn; else :class:`~ctxstore.errors.Conflict`, whose ``actual_head`` is
        the head. ``type_tag`` (u64) and ``codec`` (u32) are the caller's tags.

        Protocol version 2 (sent as APPEND_TURNS when any is given; see :class:`TurnSpec`):
        ``parent`` ``"root"`` or a TurnID the context owns (time travel: the head moves to the
        new turn); ``key`` unique in the context — appending a key it has answers that turn
        with ``existing`` True and writes nothing, so a retry after ``ConnectionLost`` is
        safe (a client made with ``idempotency="auto"`` gives a turn without one a fresh
        key, see :data:`~ctxstore.types.Idempotency`); ``labels``; ``links`` to other turns;
        ``summary``.

        ``durability`` (protocol version 4, decision 0031): ``"remote"`` answers once the
        object store holds the write too, ``"local"`` once it is on the server's disk; None:
        the server's ``--ack-after`` (see :data:`~ctxstore.types.Durability`;
        :class:`~ctxstore.errors.Unconfirmed`: durable on the server but not confirmed
        off-host, retry it with the same key).
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
        plan = ops.append_spec_compressed(
            context, spec, expected_head, self._compress_level, self._idempotency
        )
        return Call(ops.durable(plan, durability), timeout)

    @call
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
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[Appended]:
        """Appends a turn whose payload is a blob already stored (nothing is uploaded;
        NotFound if the blob is not stored); the options are :meth:`append`'s, ``durability``
        too."""
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
        plan = ops.append_spec_keyed(context, spec, expected_head, self._idempotency)
        return Call(ops.durable(plan, durability), timeout)

    @call
    def get_turn(
        self, turn_id: int, *, as_of: int | None = None, timeout: float | None = None
    ) -> Call[Turn]:
        """One turn's metadata (no payload: use :meth:`get_blob` with its hash). ``as_of``
        (version 2): the overlay view to read — 0 the latest, else the view as of that
        overlay sequence number — with ``redacted`` and ``overlay_seq`` set."""
        return Call(ops.view(ops.get_turn(turn_id), as_of), timeout)

    @call
    def last(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Call[Page]:
        """The ``limit`` newest turns of the context, oldest first (``payloads``: with their
        checked bytes, see ``verify_payloads``). Continue with :meth:`before` and the page's
        ``next_before``."""
        return Call(ops.view(ops.last(context, limit, payloads, self._accept_zstd), as_of), timeout)

    @call
    def before(
        self,
        context: ContextLike,
        before_turn_id: int,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Call[Page]:
        """The ``limit`` turns older than ``before_turn_id``, oldest first (cursor paging)."""
        return Call(
            ops.view(
                ops.before(context, before_turn_id, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    @call
    def range_by_depth(
        self,
        context: ContextLike,
        from_depth: int,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Call[Page]:
        """The context's turns with depth in ``from_depth .. from_depth + limit``."""
        return Call(
            ops.view(
                ops.range_by_depth(context, from_depth, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    @call
    def chain(
        self,
        turn_id: int,
        from_depth: int = 0,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Call[Page]:
        """The chain root → ``turn_id``: ``limit`` turns from ``from_depth``."""
        return Call(
            ops.view(ops.chain(turn_id, from_depth, limit, payloads, self._accept_zstd), as_of),
            timeout,
        )

    @call
    def replay(
        self,
        turn_id: int,
        *,
        payloads: bool = False,
        page_size: int | None = None,
        timeout: float | None = None,
    ) -> Call[list[Turn]]:
        """The whole chain root → ``turn_id``, oldest first, paging :meth:`chain` (``timeout``
        per page). Where a garbage collection took the history below a pruned context's floor,
        the kept turns: from the oldest the server still has up to ``turn_id`` (as the CLI's
        ``replay``). NotFound if ``turn_id`` itself is not there."""
        return Call(ops.replay(turn_id, payloads, page_size, self._accept_zstd), timeout)

    @call
    def get_blob(self, payload_hash: HashLike, *, timeout: float | None = None) -> Call[bytes]:
        """A payload by its hash, checked against it as ``verify_payloads`` says (NotFound if
        it is not stored)."""
        return Call(ops.get_blob(payload_hash, self._accept_zstd), timeout)

    @call
    def has_blobs(
        self, hashes: Sequence[HashLike], *, timeout: float | None = None
    ) -> Call[list[bool]]:
        """Which of ``hashes`` are stored, in order. Lists longer than the server's
        ``has_blobs_max`` are split into several pipelined requests."""
        return Call(ops.has_blobs(hashes), timeout)

    @call
    def stats(self, *, timeout: float | None = None) -> Call[Stats]:
        """The server's counters; from a version-2 server also the garbage collector's
        (``live_bytes``, ``dead_bytes``, ``gc_runs``, ``bytes_reclaimed_total``; None from a
        server without them)."""
        return Call(ops.stats(), timeout)

    @call
    def replication_stats(self, *, timeout: float | None = None) -> Call[ReplicationStats]:
        """This server's side of its replica (protocol version 3; issue 31): role, state and
        why, target, epoch, generation, what shipped (or was applied) and when, the lag, the
        backlog, failures by kind. A server that does not replicate says ``"off"``."""
        return Call(ops.replication_stats(), timeout)

    @call
    def role(self, *, timeout: float | None = None) -> Call[Role]:
        """What this server is in its replica's failover now (protocol version 4, decision
        0031): its role (``"off"``, ``"primary"``, ``"standby"``, ``"fenced"``, …), whether it
        takes writes, when it acknowledges a write by default, the epoch, and the primary's
        address when it knows it. Raises :class:`~ctxstore.errors.NotSupported` on a server
        older than version 4 (ask :meth:`replication_stats` there)."""
        return Call(ops.role(), timeout)

    @call
    def tenants(
        self, *, page_size: int = p.TENANT_LIST_LIMIT, timeout: float | None = None
    ) -> Call[list[Tenant]]:
        """Every tenant of the server, in name order (protocol version 5, decision 0032 §8;
        a tenant's token is answered its own entry only, its usage): its
        id, whether the tenants file names it, its rights, its usage (contexts, open streams,
        stored bytes, connections), its quotas (None: no limit) and how often they refused it.
        Reads every page (``page_size`` tenants each, 1 to 1000; ``timeout`` per page). A
        server without a tenants file has none. Raises
        :class:`~ctxstore.errors.NotSupported` on a server older than version 5."""
        return Call(ops.tenants(page_size), timeout)

    @call
    def delete_tenant(self, name: str, *, timeout: float | None = None) -> Call[TenantDeleted]:
        """Deletes the tenant ``name`` (protocol version 5, decision 0032 §6; the operator's
        token only: a tenant's is :class:`~ctxstore.errors.Unauthorized`): erasure by
        forgetting its keys. The store destroys the tenant's keys (when it seals payloads) and
        deletes every context of it; from then on its tokens are refused (open connections
        included) and its name and id are never given again; the next collection gives its
        bytes back. Idempotent: a tenant deleted before answers as the first time did. A name
        the store never registered is :class:`~ctxstore.errors.InvalidArgument`; a standby
        answers :class:`~ctxstore.errors.NotPrimary`; a server that replicates and whose object
        store did not confirm the deletion in time :class:`~ctxstore.errors.Unconfirmed`
        (deleted here; call again to wait again). Raises
        :class:`~ctxstore.errors.NotSupported` on a server older than version 5."""
        return Call(ops.delete_tenant(name), timeout)

    @call
    def rotate_tenant_key(
        self, name: str, *, timeout: float | None = None
    ) -> Call[TenantKeyRotated]:
        """Makes a new version of the data key of the tenant ``name`` (``"operator"``: the
        operator's own) (protocol version 5, decision 0032 §7; the operator's token only: a
        tenant's is :class:`~ctxstore.errors.Unauthorized`), durable in the store's keyring
        before the answer. The tenant's new payloads are sealed under it; what it stored before
        keeps the version it was sealed under and reads as before (nothing is rewritten).
        Not idempotent: each call makes another version, so it is not sent again by itself
        when its answer is lost. A server that seals nothing (no master key), a name never
        registered, a deleted tenant and a tenant at its last version are
        :class:`~ctxstore.errors.InvalidArgument`; a standby answers
        :class:`~ctxstore.errors.NotPrimary`. Raises :class:`~ctxstore.errors.NotSupported` on
        a server older than version 5."""
        return Call(ops.rotate_tenant_key(name), timeout)

    # -- version 2: contexts by name, tags, listing, key-value ---------------------------------
    @call
    def open_context(
        self,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        base_turn_id: int = 0,
        get_or_create: bool = False,
        *,
        timeout: float | None = None,
    ) -> Call[Opened]:
        """A new context, in one durable record: empty (or headed at ``base_turn_id``),
        optionally named (1-256 bytes of UTF-8, unique) and tagged.

        A taken ``name`` raises :class:`~ctxstore.errors.AlreadyExists` (its ``context_id``
        is the owner), unless ``get_or_create``: then the existing context is answered (its
        tags and head as they are) with ``created`` False. Returns ``(info, created)``.
        """
        return Call(ops.open_context(name, tags, base_turn_id, get_or_create), timeout)

    @call
    def clone_context(
        self,
        source: ContextLike,
        name: str,
        *,
        tags: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Call[ContextInfo]:
        """A copy of ``source`` named ``name``: its head, tags (``tags`` replace copied ones
        of the same key) and key-value entries, sharing every turn and blob (O(its
        metadata)). A taken name raises AlreadyExists."""
        return Call(ops.clone_context(source, name, tags), timeout)

    @call
    def context_info(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> Call[ContextInfo]:
        """The context's head, name, tags and times (NotFound for an unknown id or name)."""
        return Call(ops.context_info(context), timeout)

    @call
    def delete_context(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> Call[Retention]:
        """Deletes the context: from then on every request naming it (by id or name) raises
        NotFound and its name may be taken again; its turns and blobs stay while another
        context (a fork, a clone) reaches them. Returns the context as it was just before."""
        return Call(ops.delete_context(context), timeout)

    @call
    def prune_context(
        self, context: ContextLike, keep: int, *, timeout: float | None = None
    ) -> Call[Retention]:
        """Keeps only the newest ``keep`` (>= 1) depths of the context's chain reachable
        through it (LangGraph's ``prune(keep_latest)``): reads, the turn log and key look-ups
        stop at the returned ``floor_depth``, which never moves down. ``keep=0`` raises
        InvalidArgument (delete instead)."""
        return Call(ops.prune_context(context, keep), timeout)

    @call
    def set_context_ttl(
        self, context: ContextLike, ttl_ms: int | None, *, timeout: float | None = None
    ) -> Call[Retention]:
        """Sets the context's time to live in milliseconds (None clears it): once not updated
        for that long, the server deletes it. At least 1 ms (0 raises ValueError: it would
        mean "never", not "now"), at most 100 years (else InvalidArgument)."""
        return Call(ops.context_ttl(context, ttl_ms, True), timeout)

    @call
    def context_retention(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> Call[Retention]:
        """The context with its floor depth and time to live."""
        return Call(ops.context_ttl(context, None, False), timeout)

    @call
    def backup(self, directory: str, *, timeout: float | None = 86_400.0) -> Call[BackupReport]:
        """Has the server write a consistent copy of its store into ``directory`` (an
        absolute path on the server's host, absent or empty) while it goes on serving;
        returns when the copy is complete and synced. A backup takes as long as copying the
        store, so it waits up to ``timeout`` seconds (default a day), not the request timeout;
        a backup no longer waited for goes on on the server."""
        return Call(ops.backup(directory), timeout)

    @call
    def gc(self, *, timeout: float | None = 3_600.0) -> Call[GcReport]:
        """Runs a garbage collection on the server now (protocol version 2) and returns what
        it did: turns and blobs no live context reaches any more are collected (a collected
        turn is NotFound from then on) and packs whose dead share passes the server's
        ``--gc-pack-dead-percent`` are rewritten. It takes as long as rewriting those packs,
        so it waits up to ``timeout`` seconds (default an hour), not the request timeout; a
        collection no longer waited for goes on on the server. One collection or backup at a
        time: while one runs (the server's schedule included), this one waits for it to
        finish, then runs its own round."""
        return Call(ops.gc(), timeout)

    @call
    def patch_turn(
        self,
        turn_id: int,
        payload: bytes | bytearray | memoryview,
        *,
        timeout: float | None = None,
    ) -> Call[Patched]:
        """Gives the turn a new payload (an overlay, version 2): reads show it from now on,
        reads ``as_of`` an earlier sequence number the payload it had then. The turn keeps
        its id, parent, depth, key, labels and links. NotFound for an unknown turn;
        InvalidArgument for a redacted one."""
        return Call(ops.patch_turn(turn_id, payload), timeout)

    @call
    def redact_turn(self, turn_id: int, *, timeout: float | None = None) -> Call[Redacted]:
        """Takes the turn's payload away in every view (version 2): reads return it with
        ``redacted`` True and an empty payload; its bytes leave the disk at the next garbage
        collection. Final: redacting again is InvalidArgument; NotFound for an unknown turn."""
        return Call(ops.redact_turn(turn_id), timeout)

    @call
    def purge_blob(self, payload_hash: HashLike, *, timeout: float | None = None) -> Call[Purged]:
        """Redacts every turn naming the blob and makes reads of it by hash NotFound (version
        2, the compliance path; run :meth:`gc` to remove its bytes now). NotFound for a hash
        the store never had."""
        return Call(ops.purge_blob(payload_hash), timeout)

    @call
    def put_chunked(
        self,
        payload_hash: HashLike,
        chunks: Sequence[tuple[HashLike, int]],
        sent: Iterable[tuple[int, ops.ChunkBytes]] | Mapping[int, ops.ChunkBytes] = (),
        *,
        base: tuple[HashLike, int] | None = None,
        timeout: float | None = None,
    ) -> Call[ChunkedStored]:
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
        return Call(ops.put_chunked(payload_hash, chunks, sent, base), timeout)

    @call
    def tag_context(
        self,
        context: ContextLike,
        set: Mapping[str, str] | None = None,  # noqa: A002 - the protocol's word
        remove: Iterable[str] | str = (),
        expected_head: int | None = None,
        *,
        timeout: float | None = None,
    ) -> Call[ContextInfo]:
        """Sets the tags of ``set`` and removes the keys of ``remove`` (absent keys are no
        error), atomically. With ``expected_head`` only if the context's head is that turn
        (0: empty), else :class:`~ctxstore.errors.Conflict` with its ``actual_head``; so a
        status change and the head agree. Limits (TooLarge): 32 tags, key 1-64 bytes, value
        up to 1 KiB. Returns the context after the change."""
        return Call(ops.tag_context(context, set, remove, expected_head), timeout)

    @call
    def name_context(
        self, context: ContextLike, name: str, *, timeout: float | None = None
    ) -> Call[ContextInfo]:
        """Names a context that has none (names never change: InvalidArgument for a named
        context; AlreadyExists for a taken name)."""
        return Call(ops.name_context(context, name), timeout)

    @call
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
    ) -> Call[ContextPage]:
        """One page of the contexts matching every condition: each tag equality of ``tags``,
        a name starting with ``name_prefix`` (pages then go in name order, else in ContextID
        order), ``updated_at_unix_ms`` strictly after / before the bounds. ``limit`` up to
        1,000 (TooLarge above). Pass the page's ``next_cursor`` as ``cursor`` for the next
        one, or use :meth:`iter_contexts`."""
        return Call(
            ops.list_contexts(
                tags, name_prefix, updated_after_unix_ms, updated_before_unix_ms, cursor, limit
            ),
            timeout,
        )

    @listing
    def iter_contexts(
        self,
        tags: Mapping[str, str] | None = None,
        name_prefix: str | None = None,
        updated_after_unix_ms: int | None = None,
        updated_before_unix_ms: int | None = None,
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Listing[ContextInfo]:
        """Every context matching :meth:`list_contexts`' conditions, page after page
        (fetched as the iteration goes; ``timeout`` per page). Each match is returned once."""
        paging = ops.contexts_paging(
            tags, name_prefix, updated_after_unix_ms, updated_before_unix_ms, page_size
        )
        return Listing(paging, timeout)

    @call
    def kv_put(
        self,
        context: ContextLike,
        entries: Mapping[KeyT, bytes | bytearray | memoryview],
        if_absent: bool = False,
        *,
        ttl_ms: int | None = None,
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[None]:
        """Puts every ``key: value`` of ``entries`` in the context's key-value map, in one
        durable record (all or none). Keys are bytes (1-256) or str (as UTF-8); values are
        bytes, stored as blobs (equal values once). ``if_absent``: keys the context has keep
        their values. At most 128 entries per call (TooLarge); none sends nothing.
        ``ttl_ms`` (protocol version 3): each entry expires that long after this put or its
        last refresh; from then on no read sees it and the server removes it.
        ``durability``: as :meth:`append`'s (a retry after
        :class:`~ctxstore.errors.Unconfirmed` puts the same values again)."""
        return Call(
            ops.durable(ops.kv_put(context, entries, if_absent, ttl_ms), durability), timeout
        )

    @call
    def kv_get(
        self,
        context: ContextLike,
        key: KeyLike,
        *,
        refresh: bool = False,
        timeout: float | None = None,
    ) -> Call[bytes | None]:
        """The value of ``key``, checked against its BLAKE3 hash as ``verify_payloads`` says
        (zstd inflated and hashed always), or None if the context has no such key or it
        expired (NotFound if there is no such context). ``refresh`` (version 3): restart the
        entry's TTL from now (a durable write when it has one)."""
        return Call(ops.kv_get_refreshed(context, key, self._accept_zstd, refresh), timeout)

    @call
    def kv_get_entry(
        self,
        context: ContextLike,
        key: KeyLike,
        *,
        refresh: bool = False,
        timeout: float | None = None,
    ) -> Call[KvValue | None]:
        """:meth:`kv_get` with the entry's TTL and expiry (protocol version 3): a
        :class:`~ctxstore.types.KvValue`, or None for a missing or expired key."""
        return Call(ops.kv_get_entry(context, key, self._accept_zstd, refresh), timeout)

    @call
    def kv_get_many(
        self,
        context: ContextLike,
        keys: Iterable[KeyLike],
        *,
        timeout: float | None = None,
    ) -> Call[list[KvValue | None]]:
        """The values of ``keys`` with their TTLs and expiries, in order (protocol version 3):
        a :class:`~ctxstore.types.KvValue` per key, or None for a missing or expired one. One
        round trip per 128 keys (more when the values pass the server's response budget);
        each reads one snapshot, so a put of several keys shows whole in one of them. An
        unknown context raises NotFound."""
        return Call(ops.kv_get_many(context, keys, self._accept_zstd), timeout)

    @call
    def kv_touch(
        self,
        context: ContextLike,
        keys: Iterable[KeyLike] | KeyLike,
        *,
        ttl_ms: int | None = None,
        timeout: float | None = None,
    ) -> Call[list[KvItem]]:
        """Restarts the TTL of each key from now, in one durable record (protocol version 3):
        ``ttl_ms`` from now on (also for entries without one), else each entry's own (entries
        without one are left as they are). Absent and expired keys are no error. Returns the
        live entries among ``keys`` as they are now. 1 to 128 keys (ValueError)."""
        return Call(ops.kv_touch(context, keys, ttl_ms), timeout)

    @call
    def kv_delete(
        self,
        context: ContextLike,
        keys: Iterable[KeyLike] | KeyLike,
        *,
        timeout: float | None = None,
    ) -> Call[None]:
        """Deletes ``keys`` (one key or several; absent keys are no error) in one durable
        record. At most 128 per call (TooLarge); none sends nothing."""
        return Call(ops.kv_delete(context, keys), timeout)

    @call
    def kv_list(
        self,
        context: ContextLike,
        prefix: KeyLike = b"",
        after: KeyLike = b"",
        *,
        limit: int = 100,
        refresh: bool = False,
        with_ttl: bool = False,
        timeout: float | None = None,
    ) -> Call[KvPage]:
        """One page of the entries whose keys start with ``prefix``, in key order, after the
        key ``after`` (empty: from the first). ``limit`` up to 1,000. Pass the page's
        ``next_after`` as ``after`` for the next one, or use :meth:`iter_kv`. Expired entries
        are not listed. ``with_ttl`` (version 3): each item's ``ttl_ms`` and
        ``expires_at_unix_ms``; ``refresh`` (version 3, implies ``with_ttl``): the TTL of
        every entry returned restarts from now."""
        return Call(ops.kv_list(context, prefix, after, limit, refresh, with_ttl), timeout)

    @listing
    def iter_kv(
        self,
        context: ContextLike,
        prefix: KeyLike = b"",
        after: KeyLike = b"",
        *,
        page_size: int = 1000,
        with_ttl: bool = False,
        timeout: float | None = None,
    ) -> Listing[KvItem]:
        """Every entry whose key starts with ``prefix``, in key order, page after page
        (``with_ttl``: as :meth:`kv_list`)."""
        return Listing(ops.kv_paging(context, prefix, after, page_size, with_ttl), timeout)

    # -- version 6: vector search (issue 49, decision 0033) ------------------------------------
    @call
    def vector_index_create(
        self,
        name: str,
        dims: int,
        metric: VectorMetric = "cosine",
        ef_search: int = 0,
        *,
        timeout: float | None = None,
    ) -> Call[VectorIndex]:
        """Creates the vector index ``name`` (1-64 bytes of UTF-8; the connection's tenant's,
        in one durable record) of ``dims`` dimensions (1-4096) comparing with ``metric``
        (``"cosine"``, ``"inner_product"`` or ``"l2"``; scores higher for nearer, as
        LangGraph's PostgresStore), or answers the one of that name when it has that
        dimension, metric and ``ef_search`` (idempotent; an ``ef_search`` of 0 matches any);
        another is :class:`~ctxstore.errors.InvalidArgument`. ``ef_search``: its graph's search
        breadth (0: the server's default, 128; at most 4096). At most 64 indexes a tenant
        (:class:`~ctxstore.errors.TooLarge`). Raises :class:`~ctxstore.errors.NotSupported` on
        a server older than protocol version 6."""
        return Call(ops.vector_index_create(name, dims, metric, ef_search), timeout)

    @call
    def vector_index_drop(self, name: str, *, timeout: float | None = None) -> Call[VectorIndex]:
        """Drops the vector index ``name`` (protocol version 6) in one durable record and
        returns it as it was: its vectors no longer answer a search (the entries keep their
        values; a new index of the same name starts empty). An unknown name is
        :class:`~ctxstore.errors.NotFound`."""
        return Call(ops.vector_index_drop(name), timeout)

    @call
    def vector_indexes(self, *, timeout: float | None = None) -> Call[list[VectorIndex]]:
        """The vector indexes of the connection's tenant, in name order (protocol version
        6), each with its dimension, metric, breadth and live vectors."""
        return Call(ops.vector_indexes(), timeout)

    @call
    def kv_put_vectors(
        self,
        context: ContextLike,
        entries: Mapping[KeyT, tuple[bytes | bytearray | memoryview, Sequence[Sequence[float]]]],
        index: str,
        *,
        if_absent: bool = False,
        ttl_ms: int | None = None,
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[None]:
        """Puts key-value entries with their vectors (protocol version 6): ``entries`` maps
        each key to ``(value, vectors)``, its value's bytes and up to 64 vectors of the index
        ``index`` (each a sequence of floats; none: the entry is stored without vectors, and
        an overwrite drops the vectors it had). Every value and vector lands in one durable
        record; overwriting or deleting an entry, its expiry and its context's deletion take
        its vectors with it. ``if_absent``, ``ttl_ms`` and ``durability``: as
        :meth:`kv_put`'s.

        Checked before anything is sent (ValueError, TypeError): 1 to 128 entries, at most 64
        vectors an entry, every vector of the call of one dimension (the index's: it is sent
        once), finite components within f32's range (they travel as 32-bit floats). A
        dimension other than the index's is :class:`~ctxstore.errors.InvalidArgument`; an
        unknown index or context :class:`~ctxstore.errors.NotFound` (with or without vectors);
        nothing is written then."""
        step = ops.kv_put_vectors(context, entries, index, if_absent, ttl_ms)
        return Call(ops.durable_op(step, durability), timeout)

    @call
    def vector_search(
        self,
        context: ContextLike,
        index: str,
        vector: Sequence[float],
        k: int = 10,
        *,
        offset: int = 0,
        prefix: KeyLike = b"",
        filter: Mapping[str, Any] | None = None,
        exact: bool = False,
        ef_search: int = 0,
        timeout: float | None = None,
    ) -> Call[VectorHits]:
        """The ``k`` key-value entries of ``context`` nearest ``vector`` in the index ``index``
        (protocol version 6), best first, after skipping the ``offset`` best: exactly ``k``
        whenever ``k + offset`` or more entries pass the filters (an entry with several
        vectors counts once, with its best). Only entries whose key starts with ``prefix``,
        and, with ``filter``, whose value is a JSON object passing it (LangGraph's filter:
        ``{"field": value}`` equality, ``{"field": {"$gt": 3}}`` with ``$eq``, ``$ne``,
        ``$gt``, ``$gte``, ``$lt``, ``$lte``; sent as compact JSON, at most 64 KiB; an
        operator the server does not know is :class:`~ctxstore.errors.InvalidArgument`).

        A search reads what a ``kv_get`` would: every entry whose put was acknowledged before
        it, none that a read would not find. ``exact``: compare every candidate, never the
        graph; ``ef_search``: the graph's breadth for this search (0: the index's). ``k`` is
        1 to 1000 and ``k + offset`` at most 1000 (ValueError). Returns
        :class:`~ctxstore.types.VectorHits` (``hits``: key, score, value hash and length; the
        values: :meth:`kv_get_many`, or ``get_blob(value_hash)``). An unknown context or
        index is :class:`~ctxstore.errors.NotFound`."""
        step = ops.vector_search(
            context, index, vector, k, offset, prefix, filter, exact, ef_search
        )
        return Call(step, timeout)

    # -- version 7: vectors on turns (issue 49, decision 0033) -----------------------------------
    @call
    def append_turns_vectors(
        self,
        context: ContextLike,
        turns: Iterable[tuple[TurnSpec, Sequence[Sequence[float]]]],
        *,
        index: str,
        dims: int | None = None,
        expected_head: int | None = None,
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[list[Appended]]:
        """:meth:`append_turns` with each turn's vectors (protocol version 7): ``turns`` is a
        sequence of ``(TurnSpec, vectors)`` pairs, each turn's spec and up to 16 vectors of
        the index ``index`` (each a sequence of floats; none: the turn is appended without
        any). The turns and their vectors land in one group commit, all or none, and
        :meth:`vector_search_turns` finds them; a turn's vectors live as long as the turn (a
        redaction, its context's deletion or a prune that collects it takes them). A turn
        whose key the context has writes nothing, vectors included. ``expected_head``,
        ``durability``, keys (``idempotency="auto"`` too) and compression: as
        :meth:`append_turns`'. Returns one :class:`Appended` per turn.

        Checked before anything is sent (ValueError, TypeError): at most 16 vectors a turn,
        every vector of the call of one dimension (``dims`` when given; the index's: it is
        sent once), finite components within f32's range. A dimension other than the
        index's is :class:`~ctxstore.errors.InvalidArgument`; an unknown context or index
        :class:`~ctxstore.errors.NotFound`;
        nothing is written then. Raises :class:`~ctxstore.errors.NotSupported` on a server
        older than protocol version 7."""
        plan = ops.append_turns_vectors(
            context,
            turns,
            index,
            dims,
            expected_head,
            self._compress_level,
            self._idempotency,
        )
        return Call(ops.durable(plan, durability), timeout)

    @call
    def vector_search_turns(
        self,
        index: str,
        vector: Sequence[float],
        k: int = 10,
        *,
        offset: int = 0,
        context: ContextLike | None = None,
        name_prefix: str | None = None,
        tags: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        type_tag: int | None = None,
        exact: bool = False,
        ef_search: int = 0,
        timeout: float | None = None,
    ) -> Call[TurnHits]:
        """The ``k`` turns nearest ``vector`` in the index ``index`` (protocol version 7), best
        first, after skipping the ``offset`` best: exactly ``k`` whenever ``k + offset`` or
        more turns pass the filters (a turn with several vectors counts once, with its best;
        equal scores in TurnID order). The turns searched are those of the contexts that
        match every one of ``context``, ``name_prefix`` (names starting with it) and ``tags``
        (contexts carrying every one) — none of the three: every context of the connection's
        tenant — as a read of each returns them (a fork's inherited turns included, each
        turn once); of those, only turns carrying every one of ``labels`` and, when given, of
        ``type_tag``. At most 10,000 contexts and the server's ``--vector-scan-max`` turns
        walked (:class:`~ctxstore.errors.TooLarge`: narrow the prefix or the tags).

        ``exact`` and ``ef_search``: as :meth:`vector_search`'s; ``k`` is 1 to 1000 and ``k
        + offset`` at most 1000 (ValueError). Returns :class:`~ctxstore.types.TurnHits`
        (``hits``: each :class:`~ctxstore.types.TurnHit` the :class:`Turn`, no payload:
        ``get_blob(hit.turn.payload_hash)``, and its score). An unknown context or index is
        :class:`~ctxstore.errors.NotFound`; a query of another dimension than the index's
        :class:`~ctxstore.errors.InvalidArgument`."""
        step = ops.vector_search_turns(
            index,
            vector,
            k,
            offset,
            context,
            name_prefix,
            tags,
            labels,
            type_tag,
            exact,
            ef_search,
        )
        return Call(step, timeout)

    # -- version 2: turns for agent frameworks -------------------------------------------------
    @call
    def append_turns(
        self,
        context: ContextLike,
        turns: Iterable[TurnSpec],
        *,
        expected_head: int | None = None,
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[list[Appended]]:
        """Appends ``turns`` to the context in order, all or none, in one durable write (one
        group commit): e.g. an agent step's tool call, its result and a message. Each turn
        hangs from the one before it unless its ``parent`` says otherwise; the head moves to
        the last. With ``expected_head`` only if the head is that turn (Conflict otherwise).
        A turn whose key the context has is answered as that turn with ``existing`` True and
        is not written again. Limits (TooLarge, nothing written): 64 turns; per turn a key of
        64 bytes, 16 labels in 1 KiB, 8 links (each must exist: NotFound); a parent the
        context does not own is InvalidArgument. Returns one :class:`Appended` per turn.
        ``durability``: as :meth:`append`'s, for the whole batch."""
        plan = ops.append_turns_compressed(
            context, turns, expected_head, self._compress_level, self._idempotency
        )
        return Call(ops.durable(plan, durability), timeout)

    @call
    def turn_by_key(
        self,
        context: ContextLike,
        key: KeyLike,
        *,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Call[TurnInfo | None]:
        """The context's turn with ``key`` (its own, or inherited through a fork or clone),
        with its labels and links; None if no turn has it (NotFound for an unknown
        context)."""
        return Call(ops.turn_by_key(context, key, as_of), timeout)

    @call
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
    ) -> Call[LogPage]:
        """One page of the context's turn log: every turn it owns, newest first across all
        its branches, then the turns it inherited (a clone: its source's up to the clone; a
        fork: its base's chain), filtered on the server by every label of ``labels``.
        ``limit`` 1-1,000. A page may be short, even empty, while more match: pass its
        ``next_cursor`` as ``cursor`` until it is None, or use :meth:`iter_turn_log`."""
        return Call(
            ops.view(
                ops.turn_log(context, labels, cursor, limit, payloads, self._accept_zstd), as_of
            ),
            timeout,
        )

    @listing
    def iter_turn_log(
        self,
        context: ContextLike,
        labels: Mapping[str, str] | None = None,
        *,
        page_size: int = 1000,
        payloads: bool = False,
        timeout: float | None = None,
    ) -> Listing[TurnInfo]:
        """Every turn of :meth:`turn_log`, newest first, page after page (fetched as the
        iteration goes; ``timeout`` per page)."""
        paging = ops.turn_log_paging(context, labels, page_size, payloads, self._accept_zstd)
        return Listing(paging, timeout)

    @call
    def find_turns(
        self,
        key: str,
        value: str,
        *,
        before: int | None = None,
        limit: int = 100,
        timeout: float | None = None,
    ) -> Call[FoundPage]:
        """One page of the turns of every context labelled ``key = value`` (an indexed label
        key: ``run_id``, ``thread_id`` or one starting ``idx.``), newest first, from the
        server's store-wide label index (protocol version 2). Turns of deleted contexts and
        below a context's floor are not returned. ``limit`` 1-1,000; pass the page's
        ``next_before`` as ``before`` for the next page, or use :meth:`iter_find_turns`."""
        return Call(ops.find_turns(key, value, before, limit), timeout)

    @listing
    def iter_find_turns(
        self,
        key: str,
        value: str,
        *,
        page_size: int = 1000,
        timeout: float | None = None,
    ) -> Listing[TurnInfo]:
        """Every turn of :meth:`find_turns`, newest first, page after page (fetched as
        the iteration goes; ``timeout`` per page)."""
        return Listing(ops.find_turns_paging(key, value, page_size), timeout)

    @call
    def window(
        self,
        context: ContextLike,
        limit: int = 64,
        *,
        payloads: bool = False,
        as_of: int | None = None,
        timeout: float | None = None,
    ) -> Call[TurnPage]:
        """What to send a model: the context's chain from its latest summary turn (inclusive;
        from the root when there is none) to the head, oldest first — its newest ``limit``
        turns if it is longer (continue with :meth:`read_page` ``before=``)."""
        return Call(
            ops.view(
                ops.read_page(context, p.PageKind.WINDOW, 0, 0, limit, payloads, self._accept_zstd),
                as_of,
            ),
            timeout,
        )

    @call
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
    ) -> Call[TurnPage]:
        """A page of the context's chain, oldest first, each turn with its key, labels and
        links: the newest ``limit`` turns; with ``before`` the ``limit`` turns older than that
        turn (the previous page's ``next_before``; it must be on the chain); with
        ``from_depth`` those with depth in ``from_depth .. from_depth + limit``."""
        kind, before_turn_id, depth = ops.page_kind(before, from_depth)
        return Call(
            ops.view(
                ops.read_page(
                    context, kind, before_turn_id, depth, limit, payloads, self._accept_zstd
                ),
                as_of,
            ),
            timeout,
        )

    # -- version 3: streams, turns in the making (issue 32, decision 0027) ---------------------
    @opening
    def open_turn(
        self,
        context: ContextLike,
        *,
        type_tag: int = 0,
        codec: int = 0,
        expected_head: int | None = None,
        parent: ParentLike = None,
        key: KeyLike | None = None,
        labels: Mapping[str, str] | None = None,
        links: Sequence[int] = (),
        summary: bool = False,
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Opening:
        """Opens a stream on the context (protocol version 3): a turn in the making, with
        everything :meth:`append` takes but its payload (``expected_head`` is checked at the
        seal, as an append's; without a ``key`` the sealed turn gets ``stream:<StreamID>``).

        Returns a stream object: ``append(data)`` each delta (answered once it is durable,
        with the stream's new length; readers see it from then on), then ``seal()`` (one
        ordinary turn: an :class:`~ctxstore.types.Appended`) or ``abort()``. Used as a
        context manager (``with`` / ``async with``) it seals at a clean exit and aborts on
        an exception. Only this client's connection writes the stream (StreamNotOwned for
        others) until it closes; a stream with no delta for the server's
        ``--stream-idle-timeout`` (10 min) is aborted. ``timeout``: of each of its calls.
        ``durability``: of its seal, as :meth:`append`'s (the deltas are answered as
        always)."""
        op = _streams.open_stream(
            context,
            type_tag=type_tag,
            codec=codec,
            expected_head=expected_head,
            parent=parent,
            key=key,
            labels=labels,
            links=links,
            summary=summary,
        )
        return Opening(ops.durable_later(op, "open_turn", durability), timeout, durability)

    @opening
    def resume_turn(
        self, context: ContextLike, stream_id: int, *, timeout: float | None = None
    ) -> Opening:
        """An open stream of the context, by StreamID, as the object :meth:`open_turn`
        returns, at its acknowledged length now (from :meth:`streams`): a writer continues a
        stream another process or a crashed run opened; its connection takes the stream over
        at the first delta (once the opener's connection closed: StreamNotOwned before).
        NotFound when the context has no such open stream."""
        return Opening(_streams.find_stream(context, stream_id), timeout)

    @call
    def append_delta(
        self,
        stream_id: int,
        data: bytes | bytearray | memoryview,
        *,
        offset: int | None = None,
        timeout: float | None = None,
    ) -> Call[int]:
        """Appends a delta (1 byte to 1 MiB) to an open stream, by StreamID (the stream
        objects of :meth:`open_turn` call this); returns the stream's length once the delta
        is durable. With ``offset`` only there: a retry of a delta already written is
        answered again and writes nothing; another offset is
        :class:`~ctxstore.errors.Conflict` with the stream's length in ``detail``. A stream
        past the server's blob limit: TooLarge, nothing written; a sealed or aborted one:
        StreamEnded; one another connection holds: StreamNotOwned."""
        return Call(_streams.append_delta(stream_id, data, offset), timeout)

    @call
    def seal_stream(
        self,
        stream_id: int,
        *,
        durability: Durability | None = None,
        timeout: float | None = None,
    ) -> Call[Appended]:
        """Seals an open stream, by StreamID, into one turn (see :meth:`open_turn`);
        ``durability`` as :meth:`append`'s (a retry after
        :class:`~ctxstore.errors.Unconfirmed` is answered StreamEnded naming the sealed
        turn)."""
        return Call(ops.durable(_streams.seal_stream(stream_id), durability), timeout)

    @call
    def abort_stream(self, stream_id: int, *, timeout: float | None = None) -> Call[None]:
        """Aborts an open stream, by StreamID: it never becomes a turn."""
        return Call(_streams.abort_stream(stream_id), timeout)

    @call
    def streams(
        self, context: ContextLike, *, timeout: float | None = None
    ) -> Call[list[_streams.StreamInfo]]:
        """The context's open streams, by StreamID, each with its acknowledged ``length``
        (protocol version 3; every page of STREAM_LIST, ``timeout`` per page)."""
        return Call(_streams.open_streams(context), timeout)

    @following
    def read_stream(
        self,
        stream_id: int,
        offset: int = 0,
        follow: bool = False,
        *,
        bytes_max: int = _streams.READ_BYTES_MAX,
        wait_s: float = _streams.WAIT_S_DEFAULT,
        reconnect_s: float = _streams.RECONNECT_S_DEFAULT,
        timeout: float | None = None,
    ) -> Following[bytes]:
        """The stream's bytes from ``offset``, as chunks (an iterator; an async iterator in
        :class:`~ctxstore.AsyncClient`), only ever acknowledged (durable) bytes, in order.

        Without ``follow`` it ends after what the stream holds now (STREAM_READ); with
        ``follow`` the server pushes each new delta as it is acknowledged (one STREAM_FOLLOW
        on the client's connection, its frames up to ``bytes_max`` each, followed again from
        the offset reached after ``wait_s`` without a delta) and it ends when the stream is
        sealed. A server older than STREAM_FOLLOW (UNKNOWN_MESSAGE) is long-polled instead
        (STREAM_READ with a wait of ``wait_s``). A sealed stream's bytes past ``offset`` are
        read from its turn, so a reader that was away during the seal still gets them. An
        aborted stream raises :class:`~ctxstore.errors.StreamEnded` (``detail`` 0) after its
        bytes. When the connection is lost (a server restart included) the read or follow is
        sent again on a new one, from the offset after the last chunk yielded: every byte
        exactly once, in order; after ``reconnect_s`` without a connection, ConnectionLost (or
        ConnectError) is raised. A follow holds at most 64 frames its reader has not taken
        (then the connection reads nothing more until it does: TCP pushes back on the
        server); a reader that leaves early (``break``) lets its follow's frames be dropped
        until the server ends it. ``timeout``: of each request (each frame), on top of its
        wait."""
        feed = _streams.read_feed(
            stream_id,
            offset,
            follow,
            wait_s,
            bytes_max,
            self._accept_zstd,
            self._STREAM_FOLLOW_REQUEST,
        )
        return Following(feed, self._long_poll_timeout(timeout, wait_s), reconnect_s)

    @following
    def watch(
        self,
        context: ContextLike | None = None,
        *,
        name_prefix: str | None = None,
        tag: tuple[str, str] | None = None,
        after_seq: int | None = None,
        max_events: int = s.WATCH_EVENTS_MAX,
        wait_s: float = _streams.WAIT_S_DEFAULT,
        reconnect_s: float = _streams.RECONNECT_S_DEFAULT,
        timeout: float | None = None,
    ) -> Following[_streams.WatchEvent | _streams.WatchLagged]:
        """The events of one context (by ContextID or name), of the contexts whose name
        starts with ``name_prefix``, or of those tagged ``tag=(key, value)`` (exactly one):
        an endless iterator (an async iterator in :class:`~ctxstore.AsyncClient`; stop with
        ``break``) of :class:`~ctxstore.WatchEvent` — head moves, streams opened, sealed and
        aborted, tag changes, deletions — each with its sequence number ``seq``.

        ``after_seq``: the last ``seq`` seen (resume after it), None: from now. When the
        server no longer keeps the events after it (it keeps the newest 65,536, none from
        before a restart) the iterator yields a :class:`~ctxstore.WatchLagged` instead:
        re-read the state you follow; the watch goes on after its ``resume_after``. A lost
        connection is retried as :meth:`read_stream`'s, from the last ``seq`` yielded."""
        target = _streams.watch_target(context, name_prefix, tag)
        feed = _streams.watch_feed(target, after_seq, max_events, wait_s)
        return Following(feed, self._long_poll_timeout(timeout, wait_s), reconnect_s)

    @call
    def watch_position(
        self,
        context: ContextLike | None = None,
        *,
        name_prefix: str | None = None,
        tag: tuple[str, str] | None = None,
        timeout: float | None = None,
    ) -> Call[int]:
        """The sequence number a :meth:`watch` of the same target (exactly one of a context, a
        ``name_prefix`` or a ``tag``) would start after now (answered at once). To follow a
        state without missing a change: take the position, read the state, then watch with
        ``after_seq`` the position."""
        target = _streams.watch_target(context, name_prefix, tag)
        return Call(_streams.watch_position(target), timeout)

    def _long_poll_timeout(self, timeout: float | None, wait_s: float) -> float:
        """The timeout of one long poll: the call's (or the client's) on top of its wait."""
        return ops.check_timeout(timeout, self._timeout) + wait_s
