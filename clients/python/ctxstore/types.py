"""The values the client returns: contexts, turns, pages, server information and counters.

Hashes are ``bytes`` of length 32 (BLAKE3-256); :func:`blob_hash` computes one and
:func:`hash_hex` / :func:`parse_hash` convert to and from 64 hex digits.

A context is named in every call by a :data:`ContextLike`: an ``int`` is its ContextID, a
``str`` its unique name (protocol version 2).

Turns for agent frameworks (protocol version 2, decision 0009): a turn may carry a key (unique
in its context, for idempotent retries), labels and links, and may be a summary;
:class:`TurnInfo` is a :class:`Turn` with them, :class:`TurnSpec` describes one turn of
``append_turns``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal, NamedTuple, TypeVar

import blake3

__all__ = [
    "ContextLike",
    "KeyLike",
    "HashLike",
    "blob_hash",
    "hash_hex",
    "parse_hash",
    "ServerInfo",
    "ContextHead",
    "Turn",
    "Appended",
    "Page",
    "Stats",
    "ReplicationStats",
    "Role",
    "Tenant",
    "TenantDeleted",
    "TenantKeyRotated",
    "GcReport",
    "Patched",
    "Redacted",
    "Purged",
    "ChunkedStored",
    "ContextInfo",
    "Opened",
    "ContextPage",
    "KvItem",
    "KvPage",
    "KvValue",
    "ParentLike",
    "VerifyPayloads",
    "Durability",
    "Idempotency",
    "TurnSpec",
    "TurnInfo",
    "TurnPage",
    "LogCursor",
    "LogPage",
    "VectorMetric",
    "VectorIndex",
    "VectorHit",
    "VectorHits",
    "TurnHit",
    "TurnHits",
]

HashLike = bytes | bytearray | memoryview | str
"""A hash as 32 bytes or as 64 hex digits."""

ContextLike = int | str
"""A context: its ContextID (``int``) or its name (``str``, 1-256 bytes of UTF-8; protocol
version 2)."""

KeyLike = bytes | bytearray | memoryview | str
"""A key-value key: any bytes (1-256), or a ``str`` sent as its UTF-8."""

ParentLike = int | Literal["root"] | None
"""Where a new turn hangs: ``None`` after the context's head (in ``append_turns``: after the
turn before it in the same call), ``"root"`` as a new root, or a TurnID the context owns (its
own turns, its chain, what it inherited): time travel, the head moves to the new turn."""

VerifyPayloads = Literal["when_remote", "always"]
"""Which payloads a client hashes (decision 0015). Every payload's length is checked, and a
zstd payload is always inflated and hashed by the client (the server never hashed those
bytes). A raw payload was hashed by the server when it read it, so ``"when_remote"`` (the
default) hashes it again only on a connection to a server that is not on a loopback address,
where a network could corrupt it unnoticed; ``"always"`` hashes every payload."""

Durability = Literal["local", "remote"]
"""When the server acknowledges a write (protocol version 4, decision 0031 §11), the
``durability=`` of the appends, ``append_turns``, ``kv_put``, ``kv_put_vectors``,
``seal_stream`` and ``open_turn`` (its seal): ``"local"`` once it is durable on the server's
disk, ``"remote"`` once the object store holds it too (a server without ``--replicate-to``
refuses it: :class:`~ctxstore.errors.InvalidArgument`, nothing written). ``None``: the server's
``--ack-after``. A remote write the object store does not confirm in time raises
:class:`~ctxstore.errors.Unconfirmed`: it is durable on the server but not confirmed off-host;
retry it with the same idempotency key. Refused before sending on a server of version 3 or older
(:class:`~ctxstore.errors.NotSupported`)."""

Idempotency = Literal["off", "auto"]
"""Whether a client gives appends without a key one of its own (decision 0031 §11), its
``idempotency=`` option: ``"off"`` (the default) sends a turn with the key its caller gave,
or none; ``"auto"`` gives every turn of ``append``, ``append_by_hash`` and ``append_turns``
that has no ``key`` a fresh one (``ctxstore-auto:`` and 32 random hex digits) made once per
call, so that a client of several addresses sends the append again, with the same key, on
the new primary after a failover and it lands exactly once instead of raising
:class:`~ctxstore.errors.OutcomeUnknown` (such a retry may answer ``existing`` True: the
call's own first write). The key is part of the turn: stored, visible, unique in its
context. On a version-1 connection (no keys) appends go as they are."""

VectorMetric = Literal["cosine", "inner_product", "l2"]
"""How a vector index compares vectors (protocol version 6, decision 0033), with LangGraph's
``distance_type`` names; the score is higher for nearer with each: ``"cosine"`` the cosine
similarity (0 when either vector is zero), ``"inner_product"`` the dot product, ``"l2"``
minus the Euclidean distance."""

KeyT = TypeVar("KeyT", bound=KeyLike)
"""The key type of a mapping of entries (``Mapping`` is invariant in its keys: a
``dict[bytes, bytes]`` is accepted through this, as is a ``dict[str, bytes]``)."""


def blob_hash(data: bytes | bytearray | memoryview) -> bytes:
    """The BLAKE3-256 hash of ``data``: the id of its blob on the server."""
    return blake3.blake3(data).digest()


def hash_hex(value: bytes) -> str:
    """A hash as 64 lowercase hex digits."""
    return bytes(value).hex()


def parse_hash(value: HashLike) -> bytes:
    """A hash given as 32 bytes or 64 hex digits, as 32 bytes (else ``ValueError``)."""
    if isinstance(value, str):
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise ValueError(f"not a hex hash: {value!r}") from None
    else:
        raw = bytes(value)
    if len(raw) != 32:
        raise ValueError(f"a hash is 32 bytes (64 hex digits), got {len(raw)} bytes")
    return raw


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What HELLO told about the server: the negotiated protocol version, its name, its limits."""

    version: int
    """The protocol version of this connection."""
    server_name: str
    frame_bytes_max: int
    """The largest frame body the server accepts."""
    requests_in_flight_max: int
    """Requests of one connection the server runs at once."""
    blob_bytes_max: int
    """The largest payload of one turn."""
    read_turns_max: int
    """Turns one read (last, before, range_by_depth, chain) may return."""
    has_blobs_max: int
    """Hashes in one HAS_BLOBS request (``has_blobs`` splits longer lists)."""


@dataclass(frozen=True, slots=True)
class ContextHead:
    """A context and its head: ``head_turn_id`` 0 and ``head_depth`` 0 when it is empty."""

    context_id: int
    head_turn_id: int
    head_depth: int

    @property
    def is_empty(self) -> bool:
        """True if the context has no turn yet."""
        return self.head_turn_id == 0


@dataclass(frozen=True, slots=True)
class Turn:
    """One immutable turn. ``payload`` is its bytes (checked against ``payload_len`` and
    ``payload_hash``, as the client's ``verify_payloads`` says) when the read asked for
    payloads, else ``None``."""

    turn_id: int
    parent_turn_id: int
    """0 for a root turn."""
    context_id: int
    """The context it was appended to."""
    depth: int
    """0 for a root turn; parent's depth + 1 otherwise."""
    codec: int
    """The caller's codec tag."""
    type_tag: int
    """The caller's type tag."""
    payload_hash: bytes
    """BLAKE3-256 of the payload (32 bytes)."""
    payload_len: int
    flags: int
    """Bit 0 SUMMARY (see :attr:`summary`); no other bit is defined."""
    created_at_unix_ms: int
    payload: bytes | None = field(default=None, repr=False)
    redacted: bool = False
    """The turn's payload was taken away (``redact_turn``, ``purge_blob``): ``payload`` is
    empty, ``payload_hash`` BLAKE3 of no bytes, ``payload_len`` 0 — in every view. Known on
    reads that ask for the overlay view (the version-2 reads, and the others given
    ``as_of``); False otherwise."""
    overlay_seq: int = 0
    """The sequence number of the overlay (patch or redaction) this turn shows; 0: the turn
    as appended (or a read without the overlay view)."""

    @property
    def is_root(self) -> bool:
        """True if the turn has no parent."""
        return self.parent_turn_id == 0

    @property
    def summary(self) -> bool:
        """True if the turn is a summary: everything before it on its chain is summarised in
        its payload (a window read starts at the latest one)."""
        return bool(self.flags & 1)

    @property
    def payload_hash_hex(self) -> str:
        """``payload_hash`` as 64 hex digits."""
        return self.payload_hash.hex()


@dataclass(frozen=True, slots=True)
class Appended:
    """The result of an append: the new turn, and whether its payload was already stored."""

    turn: Turn
    deduped: bool
    """True if no new blob was written (the payload was stored before)."""
    existing: bool = False
    """True if the turn's key was already in the context: ``turn`` is that earlier turn and
    nothing was written (a retried append, protocol version 2)."""

    @property
    def turn_id(self) -> int:
        """The new turn's id (the context's new head)."""
        return self.turn.turn_id

    @property
    def depth(self) -> int:
        """The new turn's depth."""
        return self.turn.depth

    @property
    def payload_hash(self) -> bytes:
        """The payload's BLAKE3-256 hash."""
        return self.turn.payload_hash


@dataclass(frozen=True, slots=True)
class Page:
    """A page of turns, oldest first.

    ``next_before``: for ``last``/``before``, the oldest turn returned — pass it as
    ``before_turn_id`` to ``before`` for the next older page; 0 when the root was reached (and
    for the other reads). ``tip_depth``: the depth of the context's head (of the chain's turn
    for ``chain``).
    """

    turns: list[Turn]
    next_before: int
    tip_depth: int

    def __iter__(self) -> Iterator[Turn]:
        return iter(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, index: int) -> Turn:
        return self.turns[index]


@dataclass(frozen=True, slots=True)
class Stats:
    """The server's counters (STATS)."""

    turns: int
    contexts: int
    blobs: int
    logical_bytes: int
    """Sum of payload lengths over turns."""
    unique_bytes: int
    """Sum of distinct blobs' lengths."""
    stored_bytes: int
    """Pack bytes on disk."""
    dedup_hits: int
    connections: int
    """Open connections."""
    requests_total: int
    errors_total: int
    uptime_ms: int
    read_only: bool
    """True if the store refuses writes (after a failed fsync)."""
    live_bytes: int | None = None
    """Pack bytes of blobs the last garbage collection found reachable (0 before the first
    since the server started). None from a server without garbage collection (protocol
    version 1, or a version-2 server older than STATS_EX); so are the three below."""
    dead_bytes: int | None = None
    """Pack bytes of unreachable blobs still on disk, as of the last collection."""
    gc_runs: int | None = None
    """Garbage collections completed since the server started."""
    bytes_reclaimed_total: int | None = None
    """Bytes garbage collection gave back to the file system since the server started."""


@dataclass(frozen=True, slots=True)
class ReplicationStats:
    """This server's side of its replica (REPLICATION_STATS, protocol version 3, issue 31).
    The fields as docs/operations.md#replication-in-ctxstore-stats describes them; a server
    that does not replicate has role and state ``"off"`` and zeros."""

    role: str
    """``"primary"``, ``"standby"`` or ``"off"``."""
    state: str
    """``"shipping"``, ``"failing"``, ``"fenced"``, ``"stopped"``, ``"following"``,
    ``"stalled"``, ``"waiting"`` (a standby whose replica has no restore point yet) or
    ``"off"``."""
    reason: str
    """Why the state is failing, fenced or stalled (the last error), or what a waiting standby
    waits for; else empty."""
    promoting: bool
    """A standby that found its promote request is becoming the primary."""
    target: str
    """The replica's URL, without credentials."""
    primary: str
    """A standby: the primary it names; a fenced primary: who took the prefix."""
    epoch: int
    generation: int
    seq: int
    """The last segment shipped (or applied)."""
    records: int
    """The record id of the last turn record shipped (or applied)."""
    records_unix_ms: int
    """When the cut holding them was taken on the primary (0: none yet)."""
    lag_ms: int
    lag_bytes: int
    """Bytes durable but not shipped (a standby: listed, not applied): the backlog's bytes."""
    objects_total: int
    bytes_total: int
    last_success_unix_ms: int
    backlog_objects: int
    segment_bytes_max: int
    """The backlog's only bound: it ships in segments of at most this many bytes."""
    failures: dict[str, int]
    """Failed cycles (or polls) by kind since the server started, every kind listed."""


@dataclass(frozen=True, slots=True)
class Role:
    """What this server is in its replica's failover now (ROLE, protocol version 4, decision
    0031). A lease figure of 0 means no lease; an empty text, unknown."""

    role: str
    """``"off"`` (no replica), ``"primary"``, ``"standby"``, ``"fenced"`` (another took the
    replica), ``"lapsed"`` (holds the lease, cannot renew it), ``"taking_over"`` or
    ``"rejoining"``."""
    accepts_writes: bool
    """Whether a write sent here now would be taken."""
    ack_after: str
    """When a write that does not say is acknowledged: ``"local"`` or ``"remote"``."""
    epoch: int
    """The epoch this primary took (a standby: the newest it knows); 0 without a replica."""
    lease_ms: int
    lease_age_ms: int
    """Since the lease holder's last renewal, as this server knows it."""
    ack_open_ms: int
    """A primary: how long its acknowledgements stay open without another renewal."""
    failovers: int
    last_failover_ms: int
    remote_waiting: int
    """Writes waiting for a remote acknowledgement now."""
    remote_acks_total: int
    remote_unconfirmed_total: int
    remote_ack_us_p50: int
    remote_ack_us_p99: int
    primary: str
    """Where writes go: the primary's HOST:PORT (empty: unknown)."""
    holder: str
    """Who holds the lease, ``host:pid`` (empty: unknown, or no lease)."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant of the server as its operator (or the tenant itself) sees it (TENANT_LIST,
    protocol version 5, decision 0032 §8): who it is, what it may do, what it uses, its quotas and
    how often they refused it. A quota of None is no limit."""

    name: str
    tenant_id: int | None
    """Its TenantId; None while the store has not registered the name (a standby that has not
    seen its record yet)."""
    in_tenants_file: bool
    """The tenants file in force names it (a tenant removed from the file keeps its data and is
    listed without it)."""
    registered: bool
    """The store has its tenant record."""
    deleted: bool
    """Deleted (:meth:`~ctxstore.Client.delete_tenant`, TENANT_DELETE): its contexts are gone,
    its tokens refused, its name and id never given again."""
    rights: tuple[str, ...]
    """Its tokens' rights, of ``"read"``, ``"write"`` and ``"admin"`` (none when not in the
    file)."""
    contexts: int
    """Live contexts."""
    streams_open: int
    stored_bytes: int
    """Its blobs' records in the packs (what ``quota_bytes`` counts)."""
    connections: int
    """Open now, over every core of the server."""
    quota_bytes: int | None
    quota_contexts: int | None
    quota_appends_per_s: int | None
    quota_connections: int | None
    quota_streams: int | None
    quota_refusals: int
    """QUOTA_EXCEEDED answers since the server started."""


@dataclass(frozen=True, slots=True)
class TenantDeleted:
    """What deleting a tenant did (TENANT_DELETE, protocol version 5, decision 0032 §6): its
    contexts are deleted and its tokens refused from then on, whatever the flags say."""

    tenant_id: int
    """The deleted tenant's TenantId (the same each time the name is deleted again)."""
    keys_destroyed: bool
    """The store seals payloads and the tenant's keys are destroyed in its keyring: what it
    stored opens nowhere any more (False on a store that does not seal)."""
    replica_updated: bool
    """The server replicates and the object store holds the deletion, so no restore brings
    the tenant back (False on a server that does not replicate)."""


@dataclass(frozen=True, slots=True)
class TenantKeyRotated:
    """A new version of a tenant's data key (TENANT_ROTATE_KEY, protocol version 5, decision
    0032 §7), durable in the store's keyring: the tenant's new payloads are sealed under it,
    what it stored before keeps its version and reads as before."""

    tenant_id: int
    """The tenant's TenantId (0: the operator's own data key)."""
    key_version: int
    """The new version, 1 or more (a tenant's first key is version 0)."""


@dataclass(frozen=True, slots=True)
class Retention:
    """A context's retention settings (CTX_DELETE, CTX_PRUNE, CTX_TTL): the context, the floor
    below which its turns are no longer read through it (0: all), and its own time to live."""

    context: ContextInfo
    """The context (for a delete: as it was just before)."""
    floor_depth: int
    """Turns below this depth are not read through the context (a prune)."""
    ttl_ms: int | None
    """The context's own time to live in milliseconds; None when it has none (the server's
    ``--context-ttl`` may still apply)."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a finished online backup holds (BACKUP)."""

    dir: str
    """Where the copy is, on the server's host."""
    turns: int
    blobs: int
    bytes: int
    """Bytes of the copy: written plus hard-linked."""
    linked_bytes: int
    """Of ``bytes``, those hard-linked (sealed packs on the same file system)."""
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Patched:
    """What ``patch_turn`` did: the turn reads the new payload from ``overlay_seq`` on (reads
    ``as_of`` an earlier sequence number still see the payload it had then)."""

    turn_id: int
    overlay_seq: int
    """The patch's sequence number (monotonic across the store)."""
    payload_hash: bytes
    """BLAKE3-256 of the new payload."""
    payload_len: int

    @property
    def payload_hash_hex(self) -> str:
        """``payload_hash`` as 64 hex digits."""
        return self.payload_hash.hex()


@dataclass(frozen=True, slots=True)
class Redacted:
    """What ``redact_turn`` did: the turn has no payload any more, in every view; its bytes
    leave the disk at the next garbage collection."""

    turn_id: int
    overlay_seq: int
    """The redaction's sequence number."""


@dataclass(frozen=True, slots=True)
class Purged:
    """What ``purge_blob`` did: every turn naming the blob is redacted (``turns_redacted``
    counts those not redacted before) and reads of the blob by hash are NotFound; its bytes
    leave the disk at the next garbage collection."""

    payload_hash: bytes
    turns_redacted: int
    overlay_seq: int
    """The purge record's sequence number."""


@dataclass(frozen=True, slots=True)
class ChunkedStored:
    """What ``put_chunked`` stored: the payload its chunks make, a blob like any other from
    now on (``append_by_hash`` names it, ``get_blob`` returns it whole)."""

    payload_hash: bytes
    """BLAKE3-256 of the whole payload."""
    payload_len: int
    """The payload's length: the sum of its chunks' lengths."""
    already_stored: bool
    """True when the server had the payload before this call (nothing new was written)."""

    @property
    def payload_hash_hex(self) -> str:
        """``payload_hash`` as 64 hex digits."""
        return self.payload_hash.hex()


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one garbage collection did (GC): the turns and blobs nothing live reached any more
    are gone (a collected turn is NotFound from then on)."""

    turns_dead: int
    """Turns found unreachable and collected in this round."""
    blobs_dead: int
    """Blobs removed from the store in this round."""
    bytes_reclaimed: int
    """Bytes the pack files shrank by."""
    packs_compacted: int
    """Packs rewritten with only their live records."""
    live_bytes: int
    """Pack bytes (records with headers) of reachable blobs after the round."""
    dead_bytes: int
    """Pack bytes of unreachable blobs still on disk (in packs below the server's
    ``--gc-pack-dead-percent``)."""
    duration_ms: int


@dataclass(frozen=True, slots=True)
class ContextInfo:
    """A context as version 2 describes it: head, name, tags and times (CONTEXT_INFO)."""

    context_id: int
    head_turn_id: int
    """0 when the context is empty."""
    head_depth: int
    created_at_unix_ms: int
    updated_at_unix_ms: int
    """The newest head move, tag or key-value change."""
    name: str | None
    """None when the context has no name."""
    tags: dict[str, str]
    """The context's tags (a copy; sorted by key)."""

    @property
    def head(self) -> ContextHead:
        """The context's head alone."""
        return ContextHead(self.context_id, self.head_turn_id, self.head_depth)

    @property
    def is_empty(self) -> bool:
        """True if the context has no turn yet."""
        return self.head_turn_id == 0


class Opened(NamedTuple):
    """The result of ``open_context``: the context, and whether this call created it (False:
    ``get_or_create`` found the name taken and answered its context). Unpacks as
    ``info, created = client.open_context(...)``."""

    info: ContextInfo
    created: bool


@dataclass(frozen=True, slots=True)
class ContextPage:
    """One page of ``list_contexts``. ``next_cursor``: pass it as ``cursor=`` for the next
    page (a ContextID, or a name when the listing has a name prefix); None when no more
    contexts match. A page may hold fewer than ``limit`` contexts while more match (the
    server keeps responses within its byte budget): follow the cursor, not the count."""

    contexts: list[ContextInfo]
    next_cursor: int | str | None

    def __iter__(self) -> Iterator[ContextInfo]:
        return iter(self.contexts)

    def __len__(self) -> int:
        return len(self.contexts)

    def __getitem__(self, index: int) -> ContextInfo:
        return self.contexts[index]


@dataclass(frozen=True, slots=True)
class KvItem:
    """A key-value entry as ``kv_list`` returns it (the value itself: ``kv_get``, or
    ``get_blob(value_hash)``)."""

    key: bytes
    value_hash: bytes
    """BLAKE3-256 of the value: equal values are stored once."""
    value_len: int
    ttl_ms: int = 0
    """Milliseconds the entry lives after its put or last refresh (0: for ever, or listed
    without ``with_ttl``: KV_LIST does not say)."""
    expires_at_unix_ms: int = 0
    """When it expires (unix ms; 0: never, or not said)."""


@dataclass(frozen=True, slots=True)
class KvValue:
    """A key-value entry with its value, as ``kv_get_entry`` returns it (protocol version 3):
    the value checked against ``value_hash``, its TTL and expiry (after the refresh if one was
    asked)."""

    value: bytes
    value_hash: bytes
    ttl_ms: int
    """Milliseconds the entry lives after its put or last refresh (0: for ever)."""
    expires_at_unix_ms: int
    """When it expires (unix ms; 0: never)."""


@dataclass(frozen=True, slots=True)
class KvPage:
    """One page of ``kv_list``, in key order. ``next_after``: pass it as ``after=`` for the
    next page (the last key of a full page); None when the listing is complete."""

    items: list[KvItem]
    next_after: bytes | None

    def __iter__(self) -> Iterator[KvItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> KvItem:
        return self.items[index]


@dataclass(frozen=True, slots=True)
class TurnInfo(Turn):
    """A :class:`Turn` with its key, labels and links, as the version-2 reads return it
    (``turn_by_key``, ``turn_log``, ``window``, ``read_page``)."""

    key: bytes | None = None
    """The turn's key (unique in its context), or None."""
    labels: dict[str, str] = field(default_factory=dict)
    """The turn's labels (a copy)."""
    links: tuple[int, ...] = ()
    """TurnIDs of other turns, in any context, that this turn refers to."""


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """One turn of ``append_turns``: its payload (bytes, or ``payload_hash`` of a stored blob:
    exactly one of the two) and, by keyword, where it hangs and what it carries.

    - ``parent``: see :data:`ParentLike` (None: after the turn before it in the call; the
      first after the context's head).
    - ``key``: unique in the context (1-64 bytes, or a ``str`` as UTF-8): appending a key the
      context has answers its turn with ``existing`` True and writes nothing.
    - ``labels``: up to 16 ``str`` pairs, keys 1-64 bytes, keys and values 1 KiB together;
      the turn log filters on them.
    - ``links``: up to 8 TurnIDs of existing turns, in any context.
    - ``summary``: everything before this turn is summarised in its payload.
    """

    payload: bytes | bytearray | memoryview | None = None
    _: KW_ONLY
    payload_hash: HashLike | None = None
    parent: ParentLike = None
    key: KeyLike | None = None
    labels: Mapping[str, str] | None = None
    links: Sequence[int] = ()
    summary: bool = False
    type_tag: int = 0
    codec: int = 0


@dataclass(frozen=True, slots=True)
class TurnPage:
    """A page of a context's chain with each turn's key, labels and links, oldest first
    (``window``, ``read_page``). ``next_before``: the oldest turn returned — pass it as
    ``before=`` to ``read_page`` for the next older page; 0 when the root was reached.
    ``tip_depth``: the depth of the context's head."""

    turns: list[TurnInfo]
    next_before: int
    tip_depth: int

    def __iter__(self) -> Iterator[TurnInfo]:
        return iter(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, index: int) -> TurnInfo:
        return self.turns[index]


@dataclass(frozen=True, slots=True)
class LogCursor:
    """Where a turn-log page ended; pass it back as ``cursor=`` as it came (its fields are
    the server's: the owner of the turns, 0 the context itself, then what it inherited, and
    the next turn to look at)."""

    phase: int
    next: int


@dataclass(frozen=True, slots=True)
class LogPage:
    """One page of ``turn_log``: the context's turns newest first, across all its branches,
    then the ones it inherited. ``next_cursor``: pass it as ``cursor=`` for the next page;
    None when the log is exhausted. A page may hold fewer turns than ``limit`` (even none)
    while more match: follow the cursor, not the count (or use ``iter_turn_log``)."""

    turns: list[TurnInfo]
    next_cursor: LogCursor | None

    def __iter__(self) -> Iterator[TurnInfo]:
        return iter(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, index: int) -> TurnInfo:
        return self.turns[index]


@dataclass(frozen=True, slots=True)
class FoundPage:
    """One page of ``find_turns``: turns of every context carrying a label, newest first
    (each :class:`TurnInfo` names its context in ``context_id``). ``next_before``: pass it as
    ``before=`` for the next page; None when there are no more."""

    turns: list[TurnInfo]
    next_before: int | None

    def __iter__(self) -> Iterator[TurnInfo]:
        return iter(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, index: int) -> TurnInfo:
        return self.turns[index]


@dataclass(frozen=True, slots=True)
class VectorIndex:
    """A vector index of the connection's tenant (protocol version 6, decision 0033), as
    ``vector_index_create``, ``vector_index_drop`` and ``vector_indexes`` return it."""

    index_id: int
    """The tenant's id of the index (a dropped name created again gets another)."""
    name: str
    dims: int
    """The dimension of every vector in it (1 to 4096)."""
    metric: VectorMetric
    ef_search: int
    """The breadth of its graph's search (a search may ask for another)."""
    vectors: int
    """Live vectors in it now."""


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One key-value entry a ``vector_search`` found: its key, its score (its best vector's;
    higher is nearer), its value's hash and length (the value itself: ``kv_get``, or
    ``get_blob(value_hash)``)."""

    key: bytes
    score: float
    value_hash: bytes
    value_len: int


@dataclass(frozen=True, slots=True)
class VectorHits:
    """The answer of ``vector_search``: the hits, best first (equal scores in key order), and
    how the server found them: ``method`` ``"exact"`` (every candidate compared) or
    ``"graph"`` (the index's graph walked), ``candidates`` the vectors it compared."""

    method: Literal["exact", "graph"]
    candidates: int
    hits: list[VectorHit]

    def __iter__(self) -> Iterator[VectorHit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, index: int) -> VectorHit:
        return self.hits[index]


@dataclass(frozen=True, slots=True)
class TurnHit:
    """One turn a ``vector_search_turns`` found (protocol version 7): the turn (its metadata,
    no payload: ``get_blob(hit.turn.payload_hash)``, or a read of its context) and its score
    (its best vector's; higher is nearer)."""

    turn: Turn
    score: float


@dataclass(frozen=True, slots=True)
class TurnHits:
    """The answer of ``vector_search_turns``: the hits, best first (equal scores in TurnID
    order), and how the server found them, as :class:`VectorHits` says: ``method``
    ``"exact"`` or ``"graph"``, ``candidates`` the vectors it compared."""

    method: Literal["exact", "graph"]
    candidates: int
    hits: list[TurnHit]

    def __iter__(self) -> Iterator[TurnHit]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, index: int) -> TurnHit:
        return self.hits[index]
