"""LangGraph's long-term memory on ctxstore: :class:`CtxstoreStore`, a ``BaseStore``
(decision 0022). Import it from :mod:`ctxstore.langgraph`; it needs the ``langgraph`` extra.

The mapping: a store is one context (named ``lgs:`` and the store's name; tagged
``lg.store``), and each item is three key-value entries of it, next to each other in key
order:

- ``i/`` + the namespace + the key + ``\\x00v``: the value, as canonical JSON (sorted keys, no
  spaces), so equal values are one blob whatever item, namespace or store holds them;
- ``...\\x00c``: when the item was created (ISO 8601, UTC), written only if absent, so an
  update keeps it;
- ``...\\x00u``: when it was last put.

A namespace is its labels, each as UTF-8 followed by a NUL byte, then one more NUL (labels
are never empty and never hold a NUL, LangGraph checks it); NUL and 0x01 in a key are escaped
(0x01 0x01, 0x01 0x02), so that an item's three entries are adjacent and a namespace prefix is
a byte prefix: a search is one KV_LIST range, in namespace then key order (the order
``search`` and ``list_namespaces`` return). Every namespace that ever held an item has an
entry ``n/`` + the namespace (written with its items) that ``list_namespaces`` scans,
skipping the namespaces with no item left. Keys of entries are at most 256 bytes: a
namespace and a key longer together than that are refused (``ValueError``).

A put is two KV_PUT requests pipelined (one round trip): the creation time if absent, then
value, update time and namespace in one durable record; a delete one KV_DELETE of the three
entries; a get three KV_GETs pipelined; a search KV_LIST pages of the range, with the values
fetched pipelined (and remembered by hash).

Per-item TTL (``TTLConfig``, ``put(ttl=)``, minutes as LangGraph counts them) is the server's
TTL per key-value entry (protocol version 3, decision 0028): a put with a TTL writes its three
entries with it (KV_PUT_EX; the creation time's TTL restarted with a KV_TOUCH when it was
already there), so they expire together; the ``n/`` entry never expires (``list_namespaces``
checks each namespace for a live item). From its expiry on an item is gone from every read —
the server hides expired entries at once — and the server removes it within a second or so.
A get with ``refresh_ttl`` reads with KV_GET_EX and its REFRESH flag (the server restarts
only entries that have a TTL, so items without one cost no write); a search with it touches
the entries of the items it returns.

Vector search (``index``; protocol version 6, decision 0033) as PostgresStore does it: the
embedding happens here, with LangGraph's ``ensure_embeddings``, ``get_text_at_path`` and
``tokenize_path``; the server stores the vectors and answers filtered k-nearest searches. A
store with an index config has one vector index, ``lgs:`` and the store's name (``lgs#`` and a
BLAKE3 of the name when that passes 64 bytes), created with the store's context
(VECTOR_INDEX_CREATE: ``dims``, and ``distance_type``: ``"cosine"`` by default,
``"inner_product"`` or ``"l2"``). A put embeds the texts at the config's ``fields`` (default
``"$"``, the whole value), at the paths of ``put(..., index=[...])`` (where ``"$"`` is the whole
value too), or nothing with ``index=False``: each text found at a path (a ``[*]`` path finds one
per element) is one vector, at most 64 an item. The item's value entry carries them: its value,
update time and namespace entries go in one KV_PUT_VECTORS instead of the KV_PUT (an item with
no text to embed goes as before, without vectors). Overwriting an item replaces its vectors
(PostgresStore keeps those of fields a later put does not embed); a delete or an expiry takes
them.

A search with ``query`` embeds it (``embed_query``; ``aembed_query`` in the ``a*`` methods) and
sends one VECTOR_SEARCH: the namespace prefix as a key prefix, the filter as JSON (the server
applies LangGraph's operators), ``limit`` as ``k`` and ``offset`` as its offset (``limit +
offset`` at most 1,000); the hits' values come from the value cache by hash (GET_BLOB for the
others) and their times from KV_GET_MANY, pipelined, and each item has its ``score`` (as
PostgresStore's: the cosine similarity, the inner product, or minus the L2 distance). The server
answers exactly ``limit`` items whenever that many pass the filter (PostgresStore's scan may
answer fewer). Only items with vectors are found by a query; a search without ``query`` lists
items as before (``score`` None). The sync methods embed with the embeddings' sync functions,
the ``a*`` methods with their async ones, before the batch's plan runs: the plan sees vectors.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from threading import Lock
from typing import Any

import blake3
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from . import _ops as ops
from . import _protocol as p
from ._clients import TwoClients
from .aio import AsyncClient
from .client import Client
from .errors import NotFound
from .types import Idempotency, KvItem, KvPage, KvValue, VectorHits, VectorMetric, VerifyPayloads

__all__ = ["CtxstoreStore"]

_NAME_PREFIX = "lgs:"
_TAG_STORE = "lg.store"
_TAG_FMT = "lg.fmt"
_FMT = "1"
_ITEMS = b"i/"
_NAMESPACES = b"n/"
_VALUE, _CREATED, _UPDATED = b"\x00v", b"\x00c", b"\x00u"
_KEY_BYTES_MAX = 256  # a key-value key (the server's limit)
_PAGE = 1000  # entries per KV_LIST page (the server's limit)
_VALUE_CACHE_BYTES = 32 << 20
_TOUCH_KEYS_MAX = 128  # keys per KV_TOUCH (the server's limit)
_TTL_FOREVER_MS = 100 * 365 * 24 * 3600 * 1000  # the longest TTL the server takes
_INDEX_NAME_PREFIX = "lgs:"
_INDEX_NAME_HASHED = "lgs#"
_DISTANCES: tuple[VectorMetric, ...] = ("cosine", "inner_product", "l2")
_WHOLE = "$"  # a path that names the whole value (LangGraph's default field)


@dataclass(frozen=True)
class _VectorIndex:
    """A store's vector index and how it embeds (from its ``index`` config)."""

    name: str
    dims: int
    metric: VectorMetric
    fields: tuple[tuple[str, str | builtins.list[str]], ...]
    """The config's paths, each with its tokens (``"$"``: the whole value)."""


@dataclass(frozen=True)
class _Texts:
    """What one batch embeds: per put that indexes its item, the texts of its vectors (in
    path order, maybe none); each query of a search."""

    items: dict[tuple[tuple[str, ...], str], builtins.list[str]]
    queries: builtins.list[str]

    def documents(self) -> builtins.list[str]:
        """Every item text once, in order (what ``embed_documents`` gets)."""
        return builtins.list(dict.fromkeys(t for texts in self.items.values() for t in texts))


@dataclass(frozen=True)
class _Vectors:
    """The embeddings of a batch's :class:`_Texts`: per item its vectors, per query its."""

    items: dict[tuple[tuple[str, ...], str], builtins.list[builtins.list[float]]]
    queries: dict[str, builtins.list[float]]


def _vector_index_name(store_name: str) -> str:
    """The store's index: ``lgs:`` and its name, or (past 64 bytes) ``lgs#`` and the first
    60 hex digits of the name's BLAKE3."""
    name = f"{_INDEX_NAME_PREFIX}{store_name}"
    if len(name.encode("utf-8")) <= p.VECTOR_INDEX_NAME_BYTES_MAX:
        return name
    digest = blake3.blake3(store_name.encode("utf-8")).hexdigest()
    return _INDEX_NAME_HASHED + digest[: p.VECTOR_INDEX_NAME_BYTES_MAX - 4]


def _index_config(
    index: IndexConfig, store_name: str
) -> tuple[dict[str, Any], Embeddings, _VectorIndex]:
    """The store's index config as PostgresStore reads it (``dims``, ``embed``, ``fields``,
    ``distance_type``; ``ann_index_config`` is accepted and has nothing to tune here): its copy
    with ``__tokenized_fields`` (as PostgresStore's ``index_config``), the embeddings
    (``ensure_embeddings``), and the index. Refused here (ValueError, TypeError) rather than
    at the first put."""
    if not isinstance(index, Mapping):
        raise TypeError(f"an index config is a dict, not {type(index).__name__}")
    config: dict[str, Any] = dict(index)
    dims = config.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int):
        raise TypeError(f"index config 'dims' is an int, not {dims!r}")
    if not 1 <= dims <= p.VECTOR_DIMS_MAX:
        raise ValueError(f"index config 'dims' is 1 to {p.VECTOR_DIMS_MAX}, not {dims}")
    distance = config.get("distance_type", "cosine")
    if distance not in _DISTANCES:
        raise ValueError(
            f"index config 'distance_type' is one of {', '.join(map(repr, _DISTANCES))}, "
            f"not {distance!r}"
        )
    fields = config.get("fields") or [_WHOLE]
    if isinstance(fields, str):
        fields = [fields]
    if not isinstance(fields, (builtins.list, tuple)) or not all(
        isinstance(f, str) for f in fields
    ):
        raise ValueError(f"index config 'fields' is a list of paths (str), not {fields!r}")
    tokenized = [(f, _tokens(f)) for f in fields]
    config["__tokenized_fields"] = tokenized
    embeddings = ensure_embeddings(config.get("embed"))
    vector_index = _VectorIndex(_vector_index_name(store_name), dims, distance, tuple(tokenized))
    return config, embeddings, vector_index


def _tokens(path: str) -> str | builtins.list[str]:
    """A path as ``get_text_at_path`` takes it: ``"$"`` (the whole value) or its tokens."""
    return _WHOLE if path == _WHOLE else tokenize_path(path)


def _label_bytes(namespace: Sequence[str]) -> bytes:
    """The labels of a namespace (or of a namespace prefix), each followed by a NUL."""
    return b"".join(label.encode("utf-8") + b"\x00" for label in namespace)


def _namespace_bytes(namespace: Sequence[str]) -> bytes:
    """A whole namespace: its labels, then one more NUL (labels are never empty)."""
    return _label_bytes(namespace) + b"\x00"


def _key_bytes(key: str) -> bytes:
    """An item's key, with no NUL left (escaped, order kept), so the suffixes that follow it
    sort its three entries next to each other."""
    return key.encode("utf-8").replace(b"\x01", b"\x01\x02").replace(b"\x00", b"\x01\x01")


def _unkey(raw: bytes) -> str:
    return raw.replace(b"\x01\x01", b"\x00").replace(b"\x01\x02", b"\x01").decode("utf-8")


def _item_prefix(namespace: Sequence[str], key: str) -> bytes:
    """What the three entries of an item start with; checked against the key limit."""
    prefix = _ITEMS + _namespace_bytes(namespace) + _key_bytes(key)
    if len(prefix) + len(_VALUE) > _KEY_BYTES_MAX:
        raise ValueError(
            f"namespace {tuple(namespace)!r} and key {key!r} are {len(prefix) + 2} bytes "
            f"as a ctxstore key-value key; together they are at most {_KEY_BYTES_MAX}"
        )
    return prefix


def _split(entry_key: bytes) -> tuple[tuple[str, ...], str, bytes]:
    """(namespace, key, suffix) of an item's entry key."""
    body, suffix = entry_key[len(_ITEMS) : -2], entry_key[-2:]
    labels, sep, key = body.partition(b"\x00\x00")
    if not sep:
        raise ValueError(f"not an item entry of a CtxstoreStore: {entry_key!r}")
    return tuple(label.decode("utf-8") for label in labels.split(b"\x00")), _unkey(key), suffix


def _namespace_of(entry_key: bytes) -> tuple[str, ...]:
    """The namespace of a registry entry ``n/`` + labels + NUL."""
    labels = entry_key[len(_NAMESPACES) : -2]
    return tuple(label.decode("utf-8") for label in labels.split(b"\x00"))


def _ttl_ms(ttl_minutes: float | None) -> int | None:
    """LangGraph's TTL (minutes, a float) as the server's (whole milliseconds, at least 1)."""
    if ttl_minutes is None:
        return None
    if isinstance(ttl_minutes, bool) or not isinstance(ttl_minutes, (int, float)):
        raise TypeError(f"a TTL is a number of minutes, not {type(ttl_minutes).__name__}")
    if not ttl_minutes > 0:
        raise ValueError(f"a TTL is a positive number of minutes; got {ttl_minutes}")
    return min(max(1, round(ttl_minutes * 60_000)), _TTL_FOREVER_MS)


def _now() -> bytes:
    return datetime.now(timezone.utc).isoformat().encode("ascii")


def _time(raw: bytes | None, default: datetime) -> datetime:
    return default if raw is None else datetime.fromisoformat(raw.decode("ascii"))


def _value_bytes(value: Any) -> bytes:
    """A value as canonical JSON: equal values are equal bytes, one blob."""
    if not isinstance(value, Mapping):
        raise TypeError(f"a store value is a dict, not {type(value).__name__}")
    return json.dumps(
        dict(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def _matches(value: Any, condition: Any) -> bool:
    """LangGraph's filter semantics (its InMemoryStore and PostgresStore): a dict of
    operators (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``) compares, a plain dict
    matches a dict field by field, a list matches element by element, anything else is
    equality."""
    if isinstance(condition, dict):
        if any(str(k).startswith("$") for k in condition):
            return all(_compare(value, op, operand) for op, operand in condition.items())
        return isinstance(value, dict) and all(
            _matches(value.get(k), v) for k, v in condition.items()
        )
    if isinstance(condition, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(condition)
            and all(_matches(a, b) for a, b in zip(value, condition, strict=True))
        )
    return bool(value == condition)


def _compare(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        left, right = float(value), float(operand)
        return {
            "$gt": left > right,
            "$gte": left >= right,
            "$lt": left < right,
            "$lte": left <= right,
        }[operator]
    raise ValueError(f"unsupported filter operator: {operator}")


def _fits(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets a prefix or suffix condition ("*" matches any label)."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type: {condition.match_type}")
    return all(want == "*" or label == want for label, want in pairs)


class _Item:
    """An item's entries as a listing found them."""

    __slots__ = ("namespace", "key", "value", "created", "updated")

    def __init__(self, namespace: tuple[str, ...], key: str) -> None:
        self.namespace = namespace
        self.key = key
        self.value: bytes | None = None
        self.created: bytes | None = None
        self.updated: bytes | None = None


class _StorePlans:
    """The store's operations, once, as plans run by a Client or an AsyncClient; holds the
    value cache (values are immutable under their hash) and whether the context exists."""

    def __init__(
        self,
        name: str,
        store_name: str,
        accept_zstd: bool,
        ttl_config: TTLConfig | None,
        vector_index: _VectorIndex | None = None,
    ) -> None:
        self.name = name
        self.store_name = store_name
        self.zstd = accept_zstd
        self.ttl_config = ttl_config
        self.vector_index = vector_index
        self._lock = Lock()
        self._opened = False
        self.cache = ops.BlobCache(accept_zstd, _VALUE_CACHE_BYTES, _VALUE_CACHE_BYTES // 16)

    def _open(self, force: bool = False) -> ops.Plan[None]:
        """The store's context, created (get-or-create) unless this store knows it exists,
        and its vector index with it (created, or answered when it exists as configured)."""
        if force or not self._opened:
            tags = {_TAG_STORE: self.store_name, _TAG_FMT: _FMT}
            steps: builtins.list[ops.Op[Any]] = [ops.open_context(self.name, tags, 0, True)]
            index = self.vector_index
            if index is not None:
                steps.append(ops.vector_index_create(index.name, index.dims, index.metric, 0))
            yield ops.Many(steps)
            self._opened = True
        return None

    # -- embedding: before the plan, by the sync or the async methods ---------------------------

    def texts(self, batch: Sequence[Op]) -> _Texts | None:
        """What ``batch`` needs embedded (None: nothing, or the store has no index): the texts
        of each put that indexes its item (the last put of an item, as :meth:`batch` writes
        it; checked first, so that a put refused is refused before any embedding) and the
        query of each search that has one. An item with more than 64 texts is refused
        (ValueError): an entry carries at most 64 vectors."""
        index = self.vector_index
        if index is None:
            return None
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        queries: dict[str, None] = {}
        for op in batch:
            if isinstance(op, PutOp):
                validate_op_namespace(op)
                if op.value is not None:
                    _item_prefix(op.namespace, str(op.key))
                    _value_bytes(op.value)
                puts[(tuple(op.namespace), str(op.key))] = op
            elif isinstance(op, SearchOp) and op.query:
                queries[op.query] = None
        items: dict[tuple[tuple[str, ...], str], builtins.list[str]] = {}
        for item, op in puts.items():
            if op.value is None or op.index is False:
                continue
            if op.index is None:
                paths = builtins.list(index.fields)
            else:
                paths = [(path, _tokens(path)) for path in op.index]
            texts = [text for _, tokens in paths for text in get_text_at_path(op.value, tokens)]
            if len(texts) > p.VECTORS_PER_ENTRY_MAX:
                raise ValueError(
                    f"item {item[1]!r} of namespace {item[0]!r} has {len(texts)} texts to embed "
                    f"at {[path for path, _ in paths]}; an item carries at most "
                    f"{p.VECTORS_PER_ENTRY_MAX} vectors"
                )
            items[item] = texts
        if not items and not queries:
            return None
        return _Texts(items, builtins.list(queries))

    def vectors(
        self,
        texts: _Texts,
        documents: Sequence[Sequence[float]],
        queries: Sequence[Sequence[float]],
    ) -> _Vectors:
        """The embeddings of ``texts`` (``documents`` for :meth:`_Texts.documents`, in order;
        ``queries`` for its queries), checked: one per text, each of the index's dimension."""
        index = self.vector_index
        assert index is not None
        unique = texts.documents()
        if len(documents) != len(unique) or len(queries) != len(texts.queries):
            raise ValueError(
                f"the embeddings answered {len(documents)} vectors for {len(unique)} texts and "
                f"{len(queries)} for {len(texts.queries)} queries"
            )
        for vector in (*documents, *queries):
            if len(vector) != index.dims:
                raise ValueError(
                    f"the embeddings answered a vector of {len(vector)} dimensions; the index "
                    f"config's dims is {index.dims}"
                )
        by_text = dict(zip(unique, documents, strict=True))
        return _Vectors(
            {
                item: [builtins.list(by_text[text]) for text in item_texts]
                for item, item_texts in texts.items.items()
            },
            {
                query: builtins.list(vector)
                for query, vector in zip(texts.queries, queries, strict=True)
            },
        )

    # -- the operations ------------------------------------------------------------------------

    def batch(
        self, batch: Sequence[Op], vectors: _Vectors | None = None
    ) -> ops.Plan[builtins.list[Result]]:
        """LangGraph's batch: every read sees the store as it was before the batch's writes
        (as InMemoryStore), the writes to one item the last of them; ``vectors``: the
        embeddings of the batch's :meth:`texts`."""
        results: builtins.list[Result] = [None] * len(batch)
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        gets: builtins.list[tuple[int, GetOp]] = []
        for index, op in enumerate(batch):
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                gets.append((index, op))
            elif isinstance(op, SearchOp):
                if op.query and self.vector_index is not None:
                    if vectors is None or op.query not in vectors.queries:
                        raise ValueError(f"the query {op.query!r} was not embedded")
                    query = vectors.queries[op.query]
                    results[index] = yield from self._vector_search(op, query)
                else:
                    results[index] = yield from self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[index] = yield from self._list_namespaces(op)
            elif isinstance(op, PutOp):
                if op.value is not None:
                    _value_bytes(op.value)  # refused before anything is written
                    _ttl_ms(op.ttl)
                writes[(tuple(op.namespace), str(op.key))] = op
            else:
                raise ValueError(f"unknown store operation: {op!r}")
        if gets:
            found = yield from self._get_all([op for _, op in gets])
            for (index, _), item in zip(gets, found, strict=True):
                results[index] = item
        if writes:
            yield from self._write(builtins.list(writes.values()), vectors)
        return results

    def _get_all(self, gets: Sequence[GetOp]) -> ops.Plan[builtins.list[Item | None]]:
        """The items of ``gets``: three KV_GETs each, all pipelined; an item whose value is
        missing (or expired) is None (each looked up alone only then, to tell a missing item
        from one whose times are missing). A get with ``refresh_ttl`` reads with KV_GET_EX
        and REFRESH: the server restarts the TTL of each entry that has one."""
        requests: builtins.list[ops.Op[Any]] = []
        for op in gets:
            prefix = _item_prefix(op.namespace, str(op.key))
            for suffix in (_VALUE, _CREATED, _UPDATED):
                key = prefix + suffix
                if op.refresh_ttl:
                    requests.append(ops.kv_get_entry_op(self.name, key, self.zstd, True))
                else:
                    requests.append(ops.kv_get_op(self.name, key, self.zstd))
        try:
            answers: builtins.list[Any] = yield ops.Many(requests)
        except NotFound:
            answers = yield from ops.tolerant(requests)
        answers = [a.value if isinstance(a, KvValue) else a for a in answers]
        items: builtins.list[Item | None] = []
        for position, op in enumerate(gets):
            value, created, updated = answers[3 * position : 3 * position + 3]
            if value is None:
                items.append(None)
                continue
            when = _time(updated, datetime.now(timezone.utc))
            items.append(
                Item(
                    value=json.loads(value),
                    key=str(op.key),
                    namespace=tuple(op.namespace),
                    created_at=_time(created, when),
                    updated_at=when,
                )
            )
        return items

    def _write(self, puts: Sequence[PutOp], vectors: _Vectors | None = None) -> ops.Plan[None]:
        """The puts and deletes, pipelined: per put, its creation time if absent, then its
        value, update time and namespace entry in one durable record (value and times with
        the put's TTL, the namespace entry without; a creation time already there gets the
        TTL by a KV_TOUCH, so the three expire together); per delete, one KV_DELETE of its
        entries. (A put without TTL after one with a TTL leaves the creation time its old
        TTL: a TTL cannot be taken off an entry without rewriting it, and rewriting it would
        lose it. At that expiry the item reads with its update time as creation time.) A put
        whose item has vectors (``vectors``) writes its value, update time and namespace in one
        KV_PUT_VECTORS instead, the vectors on the value entry."""
        requests: builtins.list[ops.Op[Any]] = []
        for op in puts:
            prefix = _item_prefix(op.namespace, str(op.key))
            if op.value is None:
                keys = [prefix + suffix for suffix in (_CREATED, _UPDATED, _VALUE)]
                requests += ops.kv_delete_ops(self.name, keys)
                continue
            now = _now()
            ttl_ms = _ttl_ms(op.ttl)
            created = {prefix + _CREATED: now}
            current = {prefix + _VALUE: _value_bytes(op.value), prefix + _UPDATED: now}
            requests += ops.kv_put_ops(self.name, created, True, ttl_ms)
            if ttl_ms is not None:
                requests.append(ops.kv_touch(self.name, prefix + _CREATED, ttl_ms))
            namespace = {_NAMESPACES + _namespace_bytes(op.namespace): b""}
            item_vectors = (
                vectors.items.get((tuple(op.namespace), str(op.key))) if vectors else None
            )
            if item_vectors and self.vector_index is not None:
                index = self.vector_index
                entries: dict[bytes, tuple[bytes, builtins.list[builtins.list[float]]]] = {
                    prefix + _VALUE: (current[prefix + _VALUE], item_vectors),
                    prefix + _UPDATED: (current[prefix + _UPDATED], []),
                }
                if ttl_ms is None:
                    entries.update((key, (value, [])) for key, value in namespace.items())
                records, _ = ops.vector_entries(entries, index.dims)
                requests.append(
                    ops.kv_put_vectors_op(self.name, records, index.name, index.dims, False, ttl_ms)
                )
                if ttl_ms is not None:
                    # The namespace entry never expires: a second record.
                    requests += ops.kv_put_ops(self.name, namespace, False)
            elif ttl_ms is None:
                requests += ops.kv_put_ops(self.name, {**current, **namespace}, False)
            else:
                # The namespace entry never expires: a second record.
                requests += ops.kv_put_ops(self.name, current, False, ttl_ms)
                requests += ops.kv_put_ops(self.name, namespace, False)
        for again in (False, True):
            yield from self._open(force=again)
            try:
                yield ops.Many(requests)
                return None
            except NotFound:
                if again:
                    raise  # the context was deleted between the open and the writes
        return None

    def _search(self, op: SearchOp) -> ops.Plan[builtins.list[SearchItem]]:
        """Items under ``op.namespace_prefix`` whose value meets ``op.filter``, in namespace
        then key order, ``op.offset`` of them skipped, at most ``op.limit``: KV_LIST pages of
        the prefix's range (sized to what is asked), each page's values fetched pipelined."""
        if op.limit <= 0:
            return []
        prefix = _ITEMS + _label_bytes(op.namespace_prefix)
        wanted = op.offset + op.limit
        size = min(_PAGE, max(3 * wanted, 3) + 3)
        after = b""
        matched: builtins.list[SearchItem] = []
        skipped = 0
        # With refresh_ttl, the entries of the items returned that have a TTL: touched last.
        expiring: dict[tuple[tuple[str, ...], str], builtins.list[bytes]] = {}
        while True:
            try:
                page: KvPage = yield ops.kv_list(
                    self.name, prefix, after, size, with_ttl=op.refresh_ttl
                )
            except NotFound:
                return []  # no item was ever put in this store
            entries = page.items
            if page.next_after is not None:
                # An item cut by the page's end is read whole from the next page.
                last = _split(entries[-1].key)[:2]
                while entries and _split(entries[-1].key)[:2] == last:
                    entries = entries[:-1]
                if not entries:
                    raise ValueError(f"a CtxstoreStore item has more than {size} entries")
                after = entries[-1].key
            items = self._items(entries)
            if op.refresh_ttl:
                for entry in entries:
                    if entry.ttl_ms:
                        expiring.setdefault(_split(entry.key)[:2], []).append(entry.key)
            values = yield from self.cache.blobs(
                digest
                for item in items
                for digest in (item.value, item.created, item.updated)
                if digest is not None
            )
            for item in items:
                assert item.value is not None
                value = json.loads(values[item.value])
                if op.filter and not all(_matches(value.get(k), v) for k, v in op.filter.items()):
                    continue
                if skipped < op.offset:
                    skipped += 1
                    continue
                when = _time(values.get(item.updated or b""), datetime.now(timezone.utc))
                matched.append(
                    SearchItem(
                        namespace=item.namespace,
                        key=item.key,
                        value=value,
                        created_at=_time(values.get(item.created or b""), when),
                        updated_at=when,
                    )
                )
                if len(matched) >= op.limit:
                    break
            if len(matched) >= op.limit or page.next_after is None:
                break
            size = _PAGE
        yield from self._touch(
            key for item in matched for key in expiring.get((tuple(item.namespace), item.key), ())
        )
        return matched

    def _vector_search(
        self, op: SearchOp, query: Sequence[float]
    ) -> ops.Plan[builtins.list[SearchItem]]:
        """Items under ``op.namespace_prefix`` nearest the embedded ``query`` whose value
        meets ``op.filter``, best first, ``op.offset`` of them skipped, at most ``op.limit``:
        one VECTOR_SEARCH (the server filters, ranks and skips), then the hits' values (by
        hash, from the cache or GET_BLOB) and times (KV_GET_MANY), pipelined. An item deleted
        between the search and the reads is left out; with ``refresh_ttl`` the entries of
        the items returned that have a TTL are touched."""
        if op.limit <= 0:
            return []
        index = self.vector_index
        assert index is not None
        if op.limit + op.offset > p.VECTOR_K_MAX:
            raise ValueError(
                f"a vector search ranks at most {p.VECTOR_K_MAX} items: limit {op.limit} + "
                f"offset {op.offset} is more"
            )
        prefix = _ITEMS + _label_bytes(op.namespace_prefix)
        try:
            hits: VectorHits = yield ops.vector_search(
                self.name, index.name, query, op.limit, op.offset, prefix, op.filter, False, 0
            )
        except NotFound:
            return []  # no item was ever put in this store (no context, or no index yet)
        found: builtins.list[tuple[tuple[str, ...], str, bytes, float]] = []
        for hit in hits:
            namespace, key, suffix = _split(hit.key)
            if suffix != _VALUE:
                raise ValueError(f"a vector of the store is on {hit.key!r}, not an item's value")
            found.append((namespace, key, hit.value_hash, hit.score))
        if not found:
            return []
        time_keys = [
            _item_prefix(namespace, key) + suffix
            for namespace, key, _, _ in found
            for suffix in (_CREATED, _UPDATED)
        ]
        cached, missing = self.cache.split(digest for _, _, digest, _ in found)
        chunks = [
            time_keys[i : i + p.KV_ENTRIES_PER_REQUEST_MAX]
            for i in range(0, len(time_keys), p.KV_ENTRIES_PER_REQUEST_MAX)
        ]
        requests: builtins.list[ops.Op[Any]] = [
            *self.cache.fetches(missing),
            *(ops.kv_get_many_op(self.name, chunk, self.zstd) for chunk in chunks),
        ]
        answers: builtins.list[Any] = yield from ops.tolerant(requests)
        blobs = answers[: len(missing)]
        fetched = [(d, b) for d, b in zip(missing, blobs, strict=True) if b is not None]
        self.cache.keep(cached, [d for d, _ in fetched], [b for _, b in fetched])
        times: builtins.list[KvValue | None] = []
        for chunk, got in zip(chunks, answers[len(missing) :], strict=True):
            if got is None:
                return []  # the store's context was deleted meanwhile
            times.extend(got)
            if len(got) < len(chunk):  # past the server's response budget: the rest
                times.extend((yield from ops.kv_get_many(self.name, chunk[len(got) :], self.zstd)))
        matched: builtins.list[SearchItem] = []
        touch: builtins.list[bytes] = []
        for position, (namespace, key, digest, score) in enumerate(found):
            raw = cached.get(digest)
            if raw is None:
                continue  # deleted (and collected) since the search
            created, updated = times[2 * position], times[2 * position + 1]
            when = _time(updated.value if updated else None, datetime.now(timezone.utc))
            matched.append(
                SearchItem(
                    namespace=namespace,
                    key=key,
                    value=json.loads(raw),
                    created_at=_time(created.value if created else None, when),
                    updated_at=when,
                    score=float(score),
                )
            )
            if op.refresh_ttl and any(t is not None and t.ttl_ms for t in (created, updated)):
                item = _item_prefix(namespace, key)
                touch += [item + suffix for suffix in (_VALUE, _CREATED, _UPDATED)]
        yield from self._touch(touch)
        return matched

    def _touch(self, keys: Iterable[bytes]) -> ops.Plan[None]:
        """Restarts the TTL of ``keys`` (each its own), in KV_TOUCHes of at most 128 keys,
        pipelined; an entry that expired or went meanwhile is no error."""
        keys = builtins.list(keys)
        touches = [
            ops.kv_touch(self.name, keys[i : i + _TOUCH_KEYS_MAX], None)
            for i in range(0, len(keys), _TOUCH_KEYS_MAX)
        ]
        if touches:
            yield ops.Many(touches)
        return None

    @staticmethod
    def _items(entries: Sequence[KvItem]) -> builtins.list[_Item]:
        """The items of a listing's entries (``value`` etc. are the entries' hashes); an item
        without its value entry (a put or delete half done) is left out."""
        items: dict[tuple[tuple[str, ...], str], _Item] = {}
        for entry in entries:
            namespace, key, suffix = _split(entry.key)
            item = items.setdefault((namespace, key), _Item(namespace, key))
            if suffix == _VALUE:
                item.value = entry.value_hash
            elif suffix == _CREATED:
                item.created = entry.value_hash
            elif suffix == _UPDATED:
                item.updated = entry.value_hash
        return [item for item in items.values() if item.value is not None]

    def _list_namespaces(self, op: ListNamespacesOp) -> ops.Plan[builtins.list[tuple[str, ...]]]:
        """The namespaces holding items that meet every condition, truncated to
        ``max_depth`` (each once), sorted, ``offset`` skipped, at most ``limit``: the
        namespace entries scanned from the longest literal prefix of the conditions, each
        page's namespaces checked for an item pipelined."""
        if op.limit <= 0:
            return []
        conditions = op.match_conditions or ()
        literal: builtins.list[str] = []
        for condition in conditions:
            if condition.match_type == "prefix":
                for label in condition.path:
                    if label == "*":
                        break
                    literal.append(label)
                break
        prefix = _NAMESPACES + _label_bytes(literal)
        after = b""
        found: builtins.list[tuple[str, ...]] = []
        skipped = 0
        previous: tuple[str, ...] | None = None  # the last namespace shown or skipped
        while True:
            try:
                page: KvPage = yield ops.kv_list(self.name, prefix, after, _PAGE)
            except NotFound:
                return []
            candidates = [
                ns
                for ns in (_namespace_of(entry.key) for entry in page.items)
                if all(_fits(condition, ns) for condition in conditions)
            ]
            checks = [
                ops.kv_list(self.name, _ITEMS + _namespace_bytes(ns), b"", 1) for ns in candidates
            ]
            held = (yield ops.Many(checks)) if checks else []
            for ns, check in zip(candidates, held, strict=True):
                if not check.items:
                    continue  # every item of it was deleted
                shown = ns if op.max_depth is None else ns[: op.max_depth]
                if shown == previous:
                    continue  # truncated to one already counted (the entries are sorted)
                previous = shown
                if skipped < op.offset:
                    skipped += 1
                    continue
                found.append(shown)
                if len(found) >= op.limit:
                    return found
            if page.next_after is None:
                return found
            after = page.next_after


class CtxstoreStore(TwoClients, BaseStore):
    """LangGraph's long-term memory (``BaseStore``) in a ctxstore server: namespaces of
    items, ``get``, ``put``, ``delete``, ``search`` with LangGraph's filter semantics, limit
    and offset, ``list_namespaces`` with prefix, suffix, ``max_depth``, limit and offset,
    ``batch``, and their ``a*`` versions (decision 0022; the module's doc has the mapping).

    Build it with :meth:`from_addr`, or pass a :class:`~ctxstore.Client` and/or an
    :class:`~ctxstore.AsyncClient` (as :class:`~ctxstore.langgraph.CtxstoreSaver`: the sync
    methods use the Client, the ``a*`` ones the AsyncClient). ``name`` picks the store: each
    name is a context of its own (``lgs:<name>``).

    Per-item TTL as LangGraph's ``TTLConfig`` defines it: ``ttl`` (``default_ttl`` in
    minutes for puts that give none, ``refresh_on_read`` the default of ``refresh_ttl``;
    ``sweep_interval_minutes`` is accepted and has nothing to do: the server removes expired
    entries every second, and reads never see them meanwhile) and ``put(..., ttl=minutes)``.
    It needs a server of protocol version 3.

    Vector search as PostgresStore's (a server of protocol version 6; the module's doc has
    the mapping): ``index={"dims": D, "embed": fn_or_Embeddings, "fields": [...]}`` (LangGraph's
    ``IndexConfig``; PostgresStore's ``distance_type``, ``"cosine"`` by default,
    ``"inner_product"`` or ``"l2"``, is honoured, its ``ann_index_config`` accepted and
    unused). Then ``put(..., index=None | False | [paths])`` embeds as PostgresStore does and
    ``search(prefix, query=...)`` ranks by similarity, each item with its ``score``.
    ``index_config`` and ``embeddings`` are PostgresStore's attributes of the same names. Two
    stores of one name share their index: their configs must agree on ``dims`` and
    ``distance_type`` (else the first write raises
    :class:`~ctxstore.errors.InvalidArgument`).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        client: Client | None = None,
        *,
        aclient: AsyncClient | None = None,
        name: str = "default",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        owns_client: bool = False,
    ) -> None:
        if ttl is not None:
            _ttl_ms(ttl.get("default_ttl"))  # refused here rather than at the first put
        if not isinstance(name, str) or not name:
            raise ValueError("a store name is a non-empty str")
        context = f"{_NAME_PREFIX}{name}"
        if len(context.encode("utf-8")) > 256 or len(name.encode("utf-8")) > 1024:
            raise ValueError("a store name is at most 252 bytes of UTF-8")
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Embeddings | None = None
        vector_index = None
        if index:  # as PostgresStore: an empty config is none
            self.index_config, self.embeddings, vector_index = _index_config(index, name)
        some = self._use_clients(client, aclient, owns_client)
        self.ttl_config = ttl
        self.store_name = name
        self._plans = _StorePlans(context, name, some._accept_zstd, ttl, vector_index)

    @classmethod
    def from_addr(
        cls,
        addr: str | Sequence[str] | None = None,
        token: str | None = None,
        *,
        name: str = "default",
        timeout: float | None = None,
        verify_payloads: VerifyPayloads = "when_remote",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        failover_timeout: float | None = None,
        idempotency: Idempotency = "off",
    ) -> CtxstoreStore:
        """A store with its own clients for ``addr`` (``"HOST:PORT"``, or a primary and its
        standbys as ``"A,B,C"`` or a list: the clients follow the primary across a failover);
        each connects at its first call (the Client for the sync methods, the AsyncClient for
        the ``a*`` ones). ``addr`` and ``token`` default to ``$CTXSTORE_ADDR`` and
        ``$CTXSTORE_TOKEN``; ``timeout``, ``verify_payloads``, ``failover_timeout`` and
        ``idempotency`` are the clients' (see :class:`~ctxstore.Client`; the store writes
        key-value entries only, which land once however often they are sent); ``ttl`` the
        store's ``TTLConfig``; ``index`` its vector search config (see the class)."""
        if ttl is not None:
            _ttl_ms(ttl.get("default_ttl"))
        if index:
            _index_config(index, name)  # refused before a client is made
        client = cls._client_for(
            addr, token, timeout, verify_payloads, failover_timeout, idempotency
        )
        return cls(client, name=name, index=index, ttl=ttl, owns_client=True)

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Runs the operations on the Client; results in their order (reads see the store as
        it was before the batch's writes). Texts and queries are embedded first, with the
        embeddings' sync functions."""
        batch = builtins.list(ops)
        texts = self._plans.texts(batch)
        vectors = None
        if texts is not None:
            assert self.embeddings is not None
            documents = texts.documents()
            embedded = self.embeddings.embed_documents(documents) if documents else []
            queries = [self.embeddings.embed_query(query) for query in texts.queries]
            vectors = self._plans.vectors(texts, embedded, queries)
        return self._run(self._plans.batch(batch, vectors))

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """:meth:`batch` on the AsyncClient, embedding with the embeddings' async functions
        (``aembed_documents``, ``aembed_query``)."""
        batch = builtins.list(ops)
        texts = self._plans.texts(batch)
        vectors = None
        if texts is not None:
            assert self.embeddings is not None
            documents = texts.documents()
            embedded = await self.embeddings.aembed_documents(documents) if documents else []
            queries = await asyncio.gather(
                *(self.embeddings.aembed_query(query) for query in texts.queries)
            )
            vectors = self._plans.vectors(texts, embedded, queries)
        return await self._arun(self._plans.batch(batch, vectors))
