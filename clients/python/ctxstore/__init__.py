"""ctxstore: the Python client of the ctxstore server (durable storage for AI-agent context).

- :class:`Client`: blocking, thread-safe, pipelined over one connection.
- :class:`AsyncClient`: the same for asyncio.
- :mod:`ctxstore.errors`: one exception per server ERROR code, plus the client's own
  (all derive from :class:`CtxstoreError`).
- :mod:`ctxstore.types`: the returned values (:class:`Turn`, :class:`ContextHead`,
  :class:`ContextInfo`, ...).
- :mod:`ctxstore._protocol`: the wire protocol (versions 1 to 7), for tools and extensions.

A context is named in every call by its ContextID (``int``) or its unique name (``str``,
protocol version 2).

Example::

    import ctxstore

    with ctxstore.Client("127.0.0.1:7411") as client:
        ctx = client.create_context()
        turn = client.append(ctx.context_id, b'{"role": "user", "content": "hi"}')
        page = client.last(ctx.context_id, 64, payloads=True)

        info, created = client.open_context("thread-1", {"status": "idle"}, get_or_create=True)
        client.append("thread-1", b"...")
        client.kv_put("thread-1", {b"pending": b"..."})

        step = client.append("thread-1", b"...", key="step-1", labels={"run_id": "r1"})
        for turn in client.iter_turn_log("thread-1", {"run_id": "r1"}):  # newest first
            print(turn.turn_id, turn.key, turn.labels)
"""

from ._protocol import PROTOCOL_VERSION
from ._streams import (
    AsyncTurnStream,
    StreamInfo,
    TurnStream,
    WatchEvent,
    WatchKind,
    WatchLagged,
)
from .aio import AsyncClient
from .client import Client
from .errors import (
    AlreadyExists,
    BadFrame,
    ClientClosed,
    Conflict,
    ConnectError,
    ConnectionLost,
    ConnectTimeout,
    Corrupt,
    CtxstoreError,
    HashMismatch,
    IntegrityError,
    Internal,
    InvalidArgument,
    NoPrimary,
    NoSpace,
    NotFound,
    NotPrimary,
    NotSupported,
    OutcomeUnknown,
    Overloaded,
    ProtocolError,
    QuotaExceeded,
    ReadOnly,
    RequestTimeout,
    ServerError,
    ShuttingDown,
    StreamEnded,
    StreamNotOwned,
    Timeout,
    TooLarge,
    Unauthorized,
    Unconfirmed,
    UnknownMessage,
    UnsupportedVersion,
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
    blob_hash,
    hash_hex,
    parse_hash,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "PROTOCOL_VERSION",
    "Client",
    "AsyncClient",
    "Appended",
    "ContextHead",
    "BackupReport",
    "ContextInfo",
    "Retention",
    "ContextLike",
    "ContextPage",
    "FoundPage",
    "GcReport",
    "Patched",
    "Purged",
    "ChunkedStored",
    "Redacted",
    "HashLike",
    "KeyLike",
    "KvItem",
    "KvPage",
    "KvValue",
    "LogCursor",
    "LogPage",
    "Opened",
    "Page",
    "ParentLike",
    "ReplicationStats",
    "Role",
    "ServerInfo",
    "Stats",
    "Tenant",
    "TenantDeleted",
    "TenantKeyRotated",
    "Turn",
    "TurnHit",
    "TurnHits",
    "TurnInfo",
    "TurnPage",
    "TurnSpec",
    "VectorHit",
    "VectorHits",
    "VectorIndex",
    "VectorMetric",
    "VerifyPayloads",
    "Durability",
    "Idempotency",
    "blob_hash",
    "hash_hex",
    "parse_hash",
    "CtxstoreError",
    "ServerError",
    "BadFrame",
    "UnknownMessage",
    "TooLarge",
    "Unauthorized",
    "NotFound",
    "Conflict",
    "ReadOnly",
    "NoSpace",
    "Overloaded",
    "Internal",
    "InvalidArgument",
    "UnsupportedVersion",
    "ShuttingDown",
    "Corrupt",
    "AlreadyExists",
    "HashMismatch",
    "StreamEnded",
    "StreamNotOwned",
    "NotPrimary",
    "NoPrimary",
    "OutcomeUnknown",
    "Unconfirmed",
    "QuotaExceeded",
    "ProtocolError",
    "IntegrityError",
    "ConnectError",
    "ConnectionLost",
    "Timeout",
    "ConnectTimeout",
    "RequestTimeout",
    "ClientClosed",
    "NotSupported",
    # Streams (protocol version 3, issue 32).
    "StreamInfo",
    "TurnStream",
    "AsyncTurnStream",
    "WatchEvent",
    "WatchKind",
    "WatchLagged",
]
