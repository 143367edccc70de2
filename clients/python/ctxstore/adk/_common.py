"""What the ADK session and artifact services share: context names, the ``ctxstore://`` URI,
the clients, JSON, a cache of blobs by hash, and the mapping of ctxstore's errors onto ADK's.

Context names (protocol limit: 1-256 bytes of UTF-8). Each identifier is one path component,
with ``%`` and ``/`` escaped (``%25``, ``%2F``) so that a name parses back to exactly one
(app, user, session) whatever the identifiers hold; the kind comes first, so a name prefix
lists exactly one kind of one scope:

- ``adk.s/<namespace>/<app>/<user>/<session>``: a session;
- ``adk.u/<namespace>/<app>/<user>``: a user's ``user:`` state (key-value entries);
- ``adk.a/<namespace>/<app>``: an app's ``app:`` state (key-value entries);
- ``adk.f/<namespace>/<app>/<user>/u/<filename>``: a user-scoped artifact;
- ``adk.f/<namespace>/<app>/<user>/s/<session>/<filename>``: a session-scoped artifact.

A name over 256 bytes is refused before anything is written (``InputValidationError``, with
the lengths), never shortened: a hashed name could not be listed by prefix.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from google.adk.errors.input_validation_error import InputValidationError
from pydantic_core import to_jsonable_python

from .._ops import check_idempotency
from .._wire import CONTEXT_NAME_BYTES_MAX
from ..aio import AsyncClient
from ..client import Client
from ..types import Idempotency, VerifyPayloads, blob_hash

NAME_BYTES_MAX = CONTEXT_NAME_BYTES_MAX
"""A context name's limit (docs/protocol.md, version 2)."""
TAG_VALUE_BYTES_MAX = 1024
"""A tag value's limit."""
KV_KEY_BYTES_MAX = 256
"""A key-value key's limit."""
NAMESPACE_BYTES_MAX = 64
"""A namespace's limit: it is part of every name, and must leave room for the identifiers."""
STATE_KEY_PREFIX = b"s/"
"""Key-value keys of ``app:`` / ``user:`` state entries: the prefix and the state key."""
STATE_KEY_BYTES_MAX = KV_KEY_BYTES_MAX - len(STATE_KEY_PREFIX)

DEFAULT_ADDR = "127.0.0.1:7411"


def escape(component: str) -> str:
    """One identifier as a name component (``%`` and ``/`` escaped)."""
    return component.replace("%", "%25").replace("/", "%2F")


def unescape(component: str) -> str:
    """The identifier of a name component (the inverse of :func:`escape`)."""
    return component.replace("%2F", "/").replace("%25", "%")


def utf8(value: str, what: str) -> bytes:
    """``value`` as UTF-8, or InputValidationError naming ``what``."""
    if not isinstance(value, str):
        raise InputValidationError(f"{what} must be a string, got {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputValidationError(f"{what} {value!r} is not valid UTF-8") from None


def context_name(kind: str, namespace: str, parts: list[tuple[str, str]]) -> str:
    """The context name of ``kind`` for the identifiers ``parts`` (``(what, value)`` pairs);
    InputValidationError when it would pass 256 bytes (nothing is written)."""
    encoded = [escape(namespace)]
    for what, value in parts:
        utf8(value, what)
        encoded.append(escape(value))
    name = "/".join([kind, *encoded])
    size = len(name.encode("utf-8"))
    if size > NAME_BYTES_MAX:
        lengths = ", ".join(f"{what} {len(utf8(value, what))} bytes" for what, value in parts)
        raise InputValidationError(
            f"{' + '.join(what for what, _ in parts)} do not fit a ctxstore context name: "
            f"{size} bytes escaped, the limit is {NAME_BYTES_MAX} ({lengths}; the namespace "
            f"and separators take the rest)"
        )
    return name


def state_key(key: str, scope: str) -> bytes:
    """The key-value key of an ``app:`` / ``user:`` state entry (InputValidationError past the
    key-value key limit)."""
    raw = utf8(key, f"{scope} state key")
    if len(raw) > STATE_KEY_BYTES_MAX:
        raise InputValidationError(
            f"{scope} state key {key[:40]!r}... is {len(raw)} bytes; ctxstore keeps "
            f"{scope} state as key-value entries, whose keys hold at most "
            f"{STATE_KEY_BYTES_MAX} bytes here"
        )
    return STATE_KEY_PREFIX + raw


def dumps(value: Any, what: str) -> bytes:
    """``value`` as compact JSON (UTF-8). Values without a JSON form are refused
    (InputValidationError): a store that kept their ``repr`` would hand back something else."""
    try:
        return json.dumps(
            to_jsonable_python(value), separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8")
    except Exception as failed:
        raise InputValidationError(f"{what} has no JSON form: {failed}") from None


class BlobCache:
    """Immutable bytes by BLAKE3 hash (so an entry is never stale), least recently used out
    first, at most ``bytes_max`` bytes in all. Shared by the plans of one service."""

    def __init__(self, bytes_max: int = 32 * 1024 * 1024) -> None:
        self.bytes_max = bytes_max
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._bytes = 0

    def get(self, digest: bytes) -> bytes | None:
        value = self._entries.get(digest)
        if value is not None:
            self._entries.move_to_end(digest)
        return value

    def put(self, value: bytes, digest: bytes | None = None) -> bytes:
        """Keeps ``value`` (its hash computed when not given); returns the hash."""
        digest = blob_hash(value) if digest is None else digest
        if digest in self._entries or len(value) > self.bytes_max // 4:
            return digest
        self._entries[digest] = value
        self._bytes += len(value)
        while self._bytes > self.bytes_max:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= len(dropped)
        return digest


class Endpoint:
    """Where the ctxstore server is and how to talk to it, from arguments or a
    ``ctxstore://[TOKEN@]HOST:PORT[/NAMESPACE][?timeout=SECONDS&verify_payloads=always]``
    URI (what ``adk web --session_service_uri`` passes)."""

    def __init__(
        self,
        addr: str | Sequence[str] | None,
        token: str | None,
        namespace: str | None,
        timeout: float | None,
        verify_payloads: VerifyPayloads,
        uri: str | None,
        failover_timeout: float | None = None,
        idempotency: Idempotency = "off",
    ) -> None:
        if uri is not None:
            if addr is not None:
                raise ValueError("give either addr or uri, not both")
            addr, uri_token, uri_namespace, options = parse_uri(uri)
            token = token if token is not None else uri_token
            namespace = namespace if namespace is not None else uri_namespace
            if "timeout" in options:
                timeout = float(options["timeout"])
            if "verify_payloads" in options:
                verify_payloads = options["verify_payloads"]  # type: ignore[assignment]
            if "failover_timeout" in options:
                failover_timeout = float(options["failover_timeout"])
            if "idempotency" in options:
                idempotency = options["idempotency"]  # type: ignore[assignment]
        if addr is not None and not isinstance(addr, str):
            addr = ",".join(addr)  # a primary and its standbys: "A,B,C"
        self.addr: str = addr or DEFAULT_ADDR
        self.idempotency: Idempotency = check_idempotency(idempotency)
        if failover_timeout is not None and not failover_timeout > 0:
            raise ValueError(f"failover_timeout must be positive, got {failover_timeout}")
        self.failover_timeout = failover_timeout
        self.token = token
        self.namespace = namespace or ""
        raw = utf8(self.namespace, "namespace")
        if len(escape(self.namespace).encode("utf-8")) > NAMESPACE_BYTES_MAX:
            raise InputValidationError(
                f"namespace is {len(raw)} bytes; at most {NAMESPACE_BYTES_MAX} (escaped), so "
                "that identifiers still fit a 256-byte context name"
            )
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.verify_payloads = verify_payloads

    def _options(self) -> dict[str, Any]:
        extra: dict[str, Any] = {} if self.timeout is None else {"timeout": self.timeout}
        if self.failover_timeout is not None:
            extra["failover_timeout"] = self.failover_timeout
        return {
            "token": self.token,
            "verify_payloads": self.verify_payloads,
            "idempotency": self.idempotency,
            **extra,
        }

    def client(self) -> Client:
        return Client(self.addr, lazy=True, **self._options())

    def aclient(self) -> AsyncClient:
        return AsyncClient(self.addr, **self._options())


_URI_OPTIONS = ("timeout", "verify_payloads", "failover_timeout", "idempotency")


def _host_port(netloc: str, uri: str) -> str:
    """``HOST:PORT`` of one address of a URI's authority (without the token)."""
    parts = urlsplit(f"//{netloc}")
    host, port = parts.hostname, None
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in {uri!r}") from None
    if not host or port is None:
        raise ValueError(f"a ctxstore:// URI names HOST:PORT, got {uri!r}")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_uri(uri: str) -> tuple[str, str | None, str, dict[str, str]]:
    """``ctxstore://[TOKEN@]HOST:PORT[,HOST:PORT...][/NAMESPACE][?k=v...]`` as (addr, token,
    namespace, options); several addresses (a primary and its standbys) come back as
    ``"A,B,C"``, which the clients follow the primary among. ValueError for anything else."""
    parts = urlsplit(uri)
    if parts.scheme != "ctxstore":
        raise ValueError(f"not a ctxstore:// URI: {uri!r}")
    hosts = parts.netloc.rpartition("@")[2]
    addr = ",".join(_host_port(one, uri) for one in hosts.split(","))
    token = unquote(parts.username) if parts.username else None
    namespace = unquote(parts.path.lstrip("/"))
    options: dict[str, str] = {}
    for key, values in parse_qs(parts.query, keep_blank_values=True, strict_parsing=False).items():
        if key not in _URI_OPTIONS:
            known = ", ".join(_URI_OPTIONS)
            raise ValueError(f"unknown option {key!r} in {uri!r} ({known})")
        options[key] = values[-1]
    return addr, token, namespace, options
