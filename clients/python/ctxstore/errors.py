"""Exceptions raised by the ctxstore client.

Every exception derives from :class:`CtxstoreError`, which carries ``.code``,
``.message`` and ``.detail``:

- :class:`ServerError` and its subclasses are ERROR responses of the server. ``.code`` is the
  stable numeric code of docs/protocol.md (``NotFound.code == 5``); one subclass per code.
  A code this client does not know yet (a newer server) raises :class:`ServerError` itself,
  with that code.
- The others are raised by the client itself and have ``.code == 0``:
  :class:`ProtocolError` (the server broke the protocol), :class:`IntegrityError` (a payload
  does not match its BLAKE3 hash), :class:`ConnectError`, :class:`ConnectionLost`,
  :class:`Timeout` (:class:`ConnectTimeout`, :class:`RequestTimeout`), :class:`ClientClosed`,
  :class:`NotSupported`, and with several addresses (decision 0031 §11)
  :class:`OutcomeUnknown` and :class:`NoPrimary`.
"""

from __future__ import annotations

from ._wire import ErrorCode

__all__ = [
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
    "NotPrimary",
    "Unconfirmed",
    "QuotaExceeded",
    "StreamNotOwned",
    "ProtocolError",
    "IntegrityError",
    "ConnectError",
    "ConnectionLost",
    "Timeout",
    "ConnectTimeout",
    "RequestTimeout",
    "ClientClosed",
    "NotSupported",
    "OutcomeUnknown",
    "NoPrimary",
    "ERROR_CLASSES",
    "error_for_code",
    "CONNECTION_CLOSING_CODES",
]


class CtxstoreError(Exception):
    """Base of every exception of this package.

    Attributes:
        code: the ERROR code of the server (see docs/protocol.md), or 0 for an error raised by
            the client itself.
        name: the code's name in docs/protocol.md (``"NOT_FOUND"``), or a short name of the
            client-side condition.
        message: what failed, in words.
        detail: the ERROR's ``detail`` field (CONFLICT: the actual head turn;
            UNSUPPORTED_VERSION: the server's version; ALREADY_EXISTS: the ContextID that
            has the name; QUOTA_EXCEEDED: the quota's limit), else 0.
    """

    code: int = 0
    name: str = "CLIENT_ERROR"

    def __init__(self, message: str, *, code: int | None = None, detail: int = 0) -> None:
        super().__init__(message)
        self.message: str = message
        if code is not None:
            self.code = code
        self.detail: int = detail

    def __str__(self) -> str:
        if self.code:
            return f"{self.name} ({self.code}): {self.message}"
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, self.code, self.detail))


def _rebuild(cls: type[CtxstoreError], message: str, code: int, detail: int) -> CtxstoreError:
    """Unpickles an error (exceptions with keyword arguments need this)."""
    return cls(message, code=code, detail=detail)


# ----------------------------------------------------------------------------------------------
# Server errors: one class per ERROR code of docs/protocol.md.


class ServerError(CtxstoreError):
    """An ERROR response from the server (any code; a subclass per known code)."""

    name = "SERVER_ERROR"


class BadFrame(ServerError):
    """BAD_FRAME (1): the server could not parse a frame or body; it closed the connection."""

    code = ErrorCode.BAD_FRAME.value
    name = "BAD_FRAME"


class UnknownMessage(ServerError):
    """UNKNOWN_MESSAGE (2): the server does not know this message type; connection stays open."""

    code = ErrorCode.UNKNOWN_MESSAGE.value
    name = "UNKNOWN_MESSAGE"


class TooLarge(ServerError):
    """TOO_LARGE (3): a frame, payload, ``limit`` or list is over the server's limit.

    Also raised by the client, before sending, for a frame the server would refuse (the
    server would close the connection for it); then the message says so.
    """

    code = ErrorCode.TOO_LARGE.value
    name = "TOO_LARGE"


class Unauthorized(ServerError):
    """UNAUTHORIZED (4): a missing or wrong token (or no HELLO first); connection closed."""

    code = ErrorCode.UNAUTHORIZED.value
    name = "UNAUTHORIZED"


class NotFound(ServerError):
    """NOT_FOUND (5): no such context, turn or blob."""

    code = ErrorCode.NOT_FOUND.value
    name = "NOT_FOUND"


class Conflict(ServerError):
    """CONFLICT (6): the context's head is not the expected one. See :attr:`actual_head`."""

    code = ErrorCode.CONFLICT.value
    name = "CONFLICT"

    @property
    def actual_head(self) -> int:
        """The context's actual head turn (0: the context is empty)."""
        return self.detail


class ReadOnly(ServerError):
    """READ_ONLY (7): the store refuses writes (a failed fsync, a standby, a fenced primary, or
    for now a primary too far ahead of its replica: the message says which); reads go on."""

    code = ErrorCode.READ_ONLY.value
    name = "READ_ONLY"


class NoSpace(ServerError):
    """NO_SPACE (8): the server's disk is full; reads go on."""

    code = ErrorCode.NO_SPACE.value
    name = "NO_SPACE"


class Overloaded(ServerError):
    """OVERLOADED (9): too many connections; the server closed this one. Retry later."""

    code = ErrorCode.OVERLOADED.value
    name = "OVERLOADED"


class Internal(ServerError):
    """INTERNAL (10): an I/O error or a bug in the server; the message says which."""

    code = ErrorCode.INTERNAL.value
    name = "INTERNAL"


class InvalidArgument(ServerError):
    """INVALID_ARGUMENT (11): a well-formed request the store cannot honour (fork of turn 0)."""

    code = ErrorCode.INVALID_ARGUMENT.value
    name = "INVALID_ARGUMENT"


class UnsupportedVersion(ServerError):
    """UNSUPPORTED_VERSION (12): no common protocol version. See :attr:`server_version`."""

    code = ErrorCode.UNSUPPORTED_VERSION.value
    name = "UNSUPPORTED_VERSION"

    @property
    def server_version(self) -> int:
        """The protocol version the server speaks (the ERROR's ``detail``)."""
        return self.detail


class ShuttingDown(ServerError):
    """SHUTTING_DOWN (13): the server is stopping and takes no new work."""

    code = ErrorCode.SHUTTING_DOWN.value
    name = "SHUTTING_DOWN"


class Corrupt(ServerError):
    """CORRUPT (14): stored data failed its checksum; the message names file and offset."""

    code = ErrorCode.CORRUPT.value
    name = "CORRUPT"


class AlreadyExists(ServerError):
    """ALREADY_EXISTS (15, protocol version 2): the name belongs to another context (opening
    a context with a taken name without ``get_or_create``, or naming one). See
    :attr:`context_id`. The connection stays open."""

    code = ErrorCode.ALREADY_EXISTS.value
    name = "ALREADY_EXISTS"

    @property
    def context_id(self) -> int:
        """The ContextID that has the name (the ERROR's ``detail``)."""
        return self.detail


class HashMismatch(ServerError):
    """HASH_MISMATCH (16, protocol version 2): bytes sent do not hash to the BlobHash they
    claim — a chunk of ``put_chunked``, or the payload its chunks rebuild. Nothing was
    written; the connection stays open."""

    code = ErrorCode.HASH_MISMATCH.value
    name = "HASH_MISMATCH"


class StreamEnded(ServerError):
    """STREAM_ENDED (17, protocol version 3): the stream was sealed or aborted and takes no
    more deltas; a sealed stream's turn is in ``detail``."""

    code = ErrorCode.STREAM_ENDED.value
    name = "STREAM_ENDED"


class StreamNotOwned(ServerError):
    """STREAM_NOT_OWNED (18, protocol version 3): another connection holds the stream; only
    the connection that holds it writes it (it is released when that connection closes)."""

    code = ErrorCode.STREAM_NOT_OWNED.value
    name = "STREAM_NOT_OWNED"


class NotPrimary(ServerError):
    """NOT_PRIMARY (19, protocol version 4, decision 0031): this server takes no writes now (a
    standby, or a primary another took the replica from); nothing was written, and the
    message names the primary's address when the server knows it (``detail``: the newest
    epoch it knows). Send the write to the primary (``role()`` tells which server is). A
    server answers a client of version 3 :class:`ReadOnly` instead."""

    code = ErrorCode.NOT_PRIMARY.value
    name = "NOT_PRIMARY"


class Unconfirmed(ServerError):
    """UNCONFIRMED (20, protocol version 4, decision 0031): the write is durable on the server
    but was not acknowledged as it asked (a remote acknowledgement the object store did not
    give in time); it may or may not survive a failover (``detail``: its TurnID when it has
    one). Retry it with the same idempotency key. A server answers a client of version 3
    :class:`Internal` instead."""

    code = ErrorCode.UNCONFIRMED.value
    name = "UNCONFIRMED"

    @property
    def turn_id(self) -> int | None:
        """The write's TurnID, durable on the server (None: the write names none, as a
        ``kv_put``)."""
        return self.detail or None


class QuotaExceeded(ServerError):
    """QUOTA_EXCEEDED (21, protocol version 5, decision 0032): the write would take the
    connection's tenant past one of its quotas; nothing of it was written, and the connection
    stays open (at HELLO, ``quota_connections``, the server closes it). The message names the
    quota, its limit and the usage (``tenant acme is at its quota_contexts: 100 of 100
    contexts``); see :attr:`limit`. Retrying does not help until the tenant's usage falls or
    the operator raises the quota, except for ``quota_appends_per_s``, which refills each
    second. A server answers a client of versions 1 to 4 :class:`Overloaded` instead."""

    code = ErrorCode.QUOTA_EXCEEDED.value
    name = "QUOTA_EXCEEDED"

    @property
    def limit(self) -> int:
        """The quota's limit (the ERROR's ``detail``)."""
        return self.detail


ERROR_CLASSES: dict[int, type[ServerError]] = {
    cls.code: cls
    for cls in (
        BadFrame,
        UnknownMessage,
        TooLarge,
        Unauthorized,
        NotFound,
        Conflict,
        ReadOnly,
        NoSpace,
        Overloaded,
        Internal,
        InvalidArgument,
        UnsupportedVersion,
        ShuttingDown,
        Corrupt,
        AlreadyExists,
        HashMismatch,
        StreamEnded,
        StreamNotOwned,
        NotPrimary,
        Unconfirmed,
        QuotaExceeded,
    )
}
"""The exception class of each known ERROR code."""

CONNECTION_CLOSING_CODES: frozenset[int] = frozenset(
    {BadFrame.code, Unauthorized.code, Overloaded.code, UnsupportedVersion.code}
)
"""Codes after which the server always closes the connection (TOO_LARGE sometimes does)."""


def error_for_code(code: int, message: str, detail: int = 0) -> ServerError:
    """The exception for an ERROR response: its class by code, :class:`ServerError` if unknown."""
    cls = ERROR_CLASSES.get(code, ServerError)
    return cls(message, code=code, detail=detail)


# ----------------------------------------------------------------------------------------------
# Client-side errors (code 0).


class ProtocolError(CtxstoreError):
    """The server sent bytes that break the protocol (a malformed frame or body, a response of
    the wrong type, an unknown req_id). The connection is closed; the next call reconnects."""

    name = "PROTOCOL_ERROR"


class IntegrityError(ProtocolError):
    """A payload does not match its BLAKE3 hash or length, or its zstd body does not inflate to
    it. Only the call that read it fails; the connection stays open."""

    name = "INTEGRITY_ERROR"


class ConnectError(CtxstoreError, ConnectionError):
    """The client could not open a connection (refused, unreachable, closed during HELLO)."""

    name = "CONNECT_ERROR"


class ConnectionLost(CtxstoreError, ConnectionError):
    """The connection dropped while this call was in flight (or could not be written). The call
    may or may not have taken effect on the server. The next call reconnects. An append with
    a turn ``key`` may be retried: if it happened, the retry answers that turn as
    ``existing`` and writes nothing."""

    name = "CONNECTION_LOST"


class Timeout(CtxstoreError, TimeoutError):
    """A deadline passed (base of :class:`ConnectTimeout` and :class:`RequestTimeout`)."""

    name = "TIMEOUT"


class ConnectTimeout(Timeout):
    """Connecting (TCP connect and the HELLO exchange) took longer than ``connect_timeout``."""

    name = "CONNECT_TIMEOUT"


class RequestTimeout(Timeout):
    """No response within the call's timeout. The request may still run on the server; its
    late answer is discarded."""

    name = "REQUEST_TIMEOUT"


class ClientClosed(CtxstoreError):
    """The client was closed with ``close()``; create a new one."""

    name = "CLIENT_CLOSED"


class NotSupported(CtxstoreError):
    """The request needs a newer protocol version than the one negotiated with the server
    (e.g. a context named by a ``str``, or any context call of version 2, on a connection to
    a server that speaks only version 1). Nothing was sent."""

    name = "NOT_SUPPORTED"


class OutcomeUnknown(CtxstoreError):
    """A client of several addresses lost the primary (the connection, no answer in time,
    SHUTTING_DOWN or UNCONFIRMED) while a write without an idempotency key was in flight:
    the write **may or may not have landed**, and it is not sent again (that could write it
    twice). Read back to see; a turn with a ``key`` (``append_turn(..., key=...)``), a KV
    put or a seal is sent again on the new primary instead and lands exactly once."""

    name = "OUTCOME_UNKNOWN"


class NoPrimary(ConnectError):
    """A client of several addresses found none of them taking writes within its
    ``failover_timeout``."""

    name = "NO_PRIMARY"
