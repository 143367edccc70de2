"""A LangGraph checkpointer on ctxstore: :class:`CtxstoreSaver`.

Needs the ``langgraph`` extra (``pip install 'ctxstore[langgraph]'``). The mapping:

- a thread's namespace (``thread_id`` + ``checkpoint_ns``) is a named context, tagged
  ``lg.thread`` (the thread id as it is), ``lg.ns`` (the namespace, only when it is not
  empty) and ``lg.fmt`` (``2``), so that every namespace of a thread is found
  (``delete_thread``, ``copy_thread``, ``prune``, ``list`` without a namespace) and a user
  finds a thread with ``ctxstore ctx list --tag lg.thread=thread-1``; a copy
  (``copy_thread``) is also tagged ``lg.from`` (``=`` and the ContextID it was cloned from).
  A context without ``lg.fmt`` was written before format 2: its ``lg.thread`` and ``lg.ns``
  start with ``=`` (a tag value may not be empty), which is taken off when read, and a thread
  is listed by both values. A thread id that cannot be a tag value (empty, over 1,024 bytes)
  is refused before anything is written;
- a checkpoint is a turn of that context, keyed ``cp/<checkpoint id>``, appended after its
  parent checkpoint's turn (a root turn when it has none), labelled ``lg.cp`` (``1``: the turn
  log's filter), ``thread_id``, ``run_id`` (both indexed store-wide), ``m.source`` and
  ``m.step``. Its payload (JSON) holds the serialized checkpoint without its channel values,
  the serialized metadata, the parent's id and, per channel, the serializer's type string
  (kept as it is) and the BLAKE3 hash of the value's bytes;
- each channel value is its own blob. A value the parent checkpoint does not have is a turn
  (``type_tag`` 1) of the checkpoint's own APPEND_TURNS batch, just before the checkpoint's
  turn: checkpoint and values are one durable write, all or none. A value that did not
  change is not sent again (the parent's turn holds it; equal bytes are one blob anyway).
  ``prune`` holds the kept checkpoint's values by key-value entries ``b/<hash>`` before the
  floor cuts their turns;
- pending writes are key-value entries ``w/<checkpoint id>/<task id>/<idx>`` (they may arrive
  before their checkpoint);
- a checkpoint deleted by ``delete_for_runs`` (or dropped by ``prune``) is a tombstone, the
  key-value entry ``x/<checkpoint id>``: ``get_tuple`` and ``list`` skip it, its pending writes
  are deleted. Its turn stays (the server has no turn tombstones yet);
- ``list`` reads the turn log (newest first) with the server filtering on the labels it has;
  the rest of a metadata filter is applied here; ``delete_for_runs`` finds the checkpoints of
  a run with the server's store-wide ``run_id`` label index (FIND_TURNS);
- ``copy_thread`` clones every namespace's context, ``prune`` prunes each to its newest
  checkpoint (``keep_latest``) or deletes it (``delete``), ``delete_thread`` deletes them.

Every method is written once, as a plan of requests (:mod:`ctxstore._ops`): the sync methods
run it on a :class:`~ctxstore.Client`, the ``a*`` methods on an
:class:`~ctxstore.AsyncClient` (no worker threads); requests that do not depend on each other
are pipelined on the one connection.
"""

from __future__ import annotations

import base64
import builtins
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from threading import Lock
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from . import _ops as ops
from ._clients import TwoClients
from .aio import AsyncClient
from .client import Client
from .errors import InvalidArgument, NotFound
from .langgraph_store import CtxstoreStore
from .types import (
    ContextInfo,
    Idempotency,
    KvItem,
    KvPage,
    LogPage,
    ParentLike,
    ServerInfo,
    Turn,
    TurnInfo,
    TurnSpec,
    VerifyPayloads,
    blob_hash,
)

__all__ = ["CtxstoreSaver", "CtxstoreStore"]

T = TypeVar("T")

_NAME_PREFIX = "lg:"
_TAG_THREAD = "lg.thread"
_TAG_NS = "lg.ns"
_TAG_FROM = "lg.from"
_TAG_FMT = "lg.fmt"
_FMT = "2"
"""The format of the contexts this saver writes: plain tag values (format 1, without the
``lg.fmt`` tag, prefixed them with ``=``)."""
_TAG_VALUE_MAX = 1024  # bytes of a tag value (the server's limit)
_CP = "cp/"
_WRITES = "w/"
_BLOBS = "b/"
_DEAD = "x/"
_PAGE = 1000  # items per listing page (the server's limit)
_LABEL_VALUE_MAX = 256
_CP_LABEL = {"lg.cp": "1"}  # every checkpoint turn carries it: the turn log's filter
VALUE_TYPE = 1
"""``type_tag`` of a turn holding a channel value (the checkpoint turn's is 0)."""
_BATCH_TURNS = 64  # turns per APPEND_TURNS (the server's limit)
_PARENTS_MAX = 4096
_BLOB_CACHE_BYTES = 64 << 20
_OPENED_MAX = 65_536
_CHAIN_WINDOW = 32  # turns of the first GET_CHAIN window of an ancestor walk (then × 4)
_CHAIN_WINDOW_MAX = 4096
_DELTA_COUNTERS = "counters_since_delta_snapshot"  # LangGraph's checkpoint metadata key
_WRITES_LISTED_MAX = 4  # checkpoints whose writes are listed one by one (more: one range)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def _context_name(thread_id: str, checkpoint_ns: str) -> str:
    """The context of a thread's namespace: unambiguous (the thread id's length first); a
    name over 256 bytes is replaced by its hash."""
    name = f"{_NAME_PREFIX}{len(thread_id)}:{thread_id}:{checkpoint_ns}"
    if len(name.encode("utf-8")) > 256:
        name = f"{_NAME_PREFIX}#{blob_hash(name.encode('utf-8')).hex()}"
    return name


def _checked_space(thread_id: Any, checkpoint_ns: Any) -> tuple[str, str]:
    """A thread id and namespace this saver can write: each a str (a thread id that is not,
    such as a UUID, as its ``str``), the thread id 1 to 1,024 bytes of UTF-8 and the
    namespace at most that (each is a tag value); else ValueError, before anything is
    written."""
    thread = thread_id if isinstance(thread_id, str) else str(thread_id)
    if not isinstance(checkpoint_ns, str):
        raise TypeError(f"checkpoint_ns is a str, not {checkpoint_ns!r}")
    size = len(thread.encode("utf-8"))
    if not 1 <= size <= _TAG_VALUE_MAX:
        raise ValueError(
            f"a thread id is 1 to {_TAG_VALUE_MAX} bytes of UTF-8 (it is the {_TAG_THREAD} tag "
            f"of its contexts), not {size}: nothing was written"
        )
    if len(checkpoint_ns.encode("utf-8")) > _TAG_VALUE_MAX:
        raise ValueError(
            f"a checkpoint_ns is at most {_TAG_VALUE_MAX} bytes of UTF-8 (it is the {_TAG_NS} "
            "tag of its context): nothing was written"
        )
    return thread, checkpoint_ns


def _thread_of(configurable: Any) -> str:
    """The thread id of a config's ``configurable`` as a str (LangGraph allows any value, such
    as a UUID; the saver names and tags contexts with its ``str``)."""
    thread_id = configurable["thread_id"]
    return thread_id if isinstance(thread_id, str) else str(thread_id)


def _tags(thread_id: str, checkpoint_ns: str) -> dict[str, str]:
    """The tags of a namespace's context, format 2: plain values, ``lg.ns`` only when the
    namespace is not empty (a tag value may not be empty)."""
    tags = {_TAG_THREAD: thread_id, _TAG_FMT: _FMT}
    if checkpoint_ns:
        tags[_TAG_NS] = checkpoint_ns
    return tags


def _thread_tag_values(thread_id: str) -> builtins.list[str]:
    """The ``lg.thread`` values a thread's contexts may carry: plain (format 2) and with the
    ``=`` of format 1, each only where it can be a tag value."""
    values = []
    for value in (thread_id, "=" + thread_id):
        if 1 <= len(value.encode("utf-8")) <= _TAG_VALUE_MAX:
            values.append(value)
    return values


def _label_value(value: Any) -> str | None:
    """A scalar metadata value as a label (JSON), or None when it is not one or too long."""
    if value is None or isinstance(value, (str, int, float, bool)):
        text = json.dumps(value)
        if 0 < len(text.encode("utf-8")) <= _LABEL_VALUE_MAX:
            return text
    return None


def _run_label(run_id: Any) -> str | None:
    """A run id as the ``run_id`` label (a string of 1-256 bytes), else None."""
    if isinstance(run_id, str) and run_id and len(run_id.encode("utf-8")) <= _LABEL_VALUE_MAX:
        return run_id
    return None


def _checkpoint_id(turn: TurnInfo) -> str | None:
    """The checkpoint id of a checkpoint's turn (its key ``cp/<id>``), else None."""
    if turn.key is None or not turn.key.startswith(_CP.encode()):
        return None
    return turn.key[len(_CP) :].decode("utf-8")


def _is_saver_context(info: ContextInfo) -> bool:
    return info.name is not None and info.name.startswith(_NAME_PREFIX) and _TAG_THREAD in info.tags


def _space(info: ContextInfo) -> tuple[str, str, str]:
    """(context name, thread id, namespace) of a saver's context, by its format: plain tag
    values with ``lg.fmt`` (an absent ``lg.ns`` is the empty namespace), else format 1's
    values less their leading ``=``."""
    assert info.name is not None
    tags = info.tags
    if _TAG_FMT in tags:
        return info.name, tags[_TAG_THREAD], tags.get(_TAG_NS, "")
    return info.name, tags[_TAG_THREAD][1:], tags.get(_TAG_NS, "=")[1:]


def _walk(
    ancestors: Sequence[dict[str, Any]], channels: Iterable[str]
) -> tuple[dict[str, builtins.list[str]], dict[str, tuple[str, str]]]:
    """Per channel, the checkpoint ids an ancestor walk visits (``ancestors``: documents,
    the target's parent first) up to and including the nearest that holds the channel's
    value, and that value's (serializer type, hex digest): its seed. A channel no ancestor
    holds walks them all and has no seed."""
    walked: dict[str, builtins.list[str]] = {ch: [] for ch in channels}
    seeds: dict[str, tuple[str, str]] = {}
    for doc in ancestors:
        for ch, ids in walked.items():
            if ch in seeds:
                continue
            ids.append(doc["id"])
            if ch in doc["channels"]:
                type_, digest = doc["channels"][ch]
                seeds[ch] = (type_, digest)
    return walked, seeds


class _Plans:
    """The saver's mapping, once: every method a plan of requests, run by a Client or an
    AsyncClient. Holds the blob cache and the names of contexts known to exist."""

    def __init__(
        self,
        serde: SerializerProtocol,
        accept_zstd: bool,
        compress_level: int | None,
        idempotency: Idempotency = "off",
    ) -> None:
        self.serde = serde
        # The clients' idempotency: with "auto" the channel-value turns of a checkpoint's
        # batch get keys too (its own turn has one, cp/<id>), so that a batch in flight at a
        # failover is sent again on the new primary and lands once (issue 47).
        self.idempotency: Idempotency = idempotency
        self.zstd = accept_zstd
        # The clients' level: a checkpoint's payloads go zstd-compressed where the connection
        # speaks version 3, as the clients' own appends do (issue 38 item 1).
        self.compress_level = compress_level
        self._lock = Lock()
        self.cache = ops.BlobCache(accept_zstd, _BLOB_CACHE_BYTES, _BLOB_CACHE_BYTES // 8)
        self._opened: OrderedDict[str, None] = OrderedDict()
        # (context name, checkpoint id) -> (its turn, its depth, its channels): the next
        # put's parent, and where a delta channel's ancestor walk starts.
        self._parents: OrderedDict[tuple[str, str], tuple[int, int, dict[str, Any]]] = OrderedDict()

    # -- caches --------------------------------------------------------------------------------

    def _mark_open(self, name: str) -> None:
        with self._lock:
            self._opened[name] = None
            self._opened.move_to_end(name)
            while len(self._opened) > _OPENED_MAX:
                self._opened.popitem(last=False)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._opened.pop(name, None)
        self._drop_parents(name)

    def _drop_parents(self, name: str) -> None:
        with self._lock:
            for key in [k for k in self._parents if k[0] == name]:
                del self._parents[key]

    def _parent(self, name: str, checkpoint_id: str) -> tuple[int, int, dict[str, Any]] | None:
        with self._lock:
            return self._parents.get((name, checkpoint_id))

    def _remember_parent(
        self, name: str, checkpoint_id: str, turn_id: int, depth: int, channels: dict[str, Any]
    ) -> None:
        with self._lock:
            self._parents[(name, checkpoint_id)] = (turn_id, depth, channels)
            while len(self._parents) > _PARENTS_MAX:
                self._parents.popitem(last=False)

    def _is_open(self, name: str) -> bool:
        with self._lock:
            return name in self._opened

    # -- building blocks -----------------------------------------------------------------------

    def blobs(self, digests: Iterable[bytes]) -> ops.Plan[dict[bytes, bytes]]:
        """The blobs of ``digests``: from the cache, the others fetched pipelined."""
        return (yield from self.cache.blobs(digests))

    def _docs(self, turns: Sequence[Turn]) -> ops.Plan[builtins.list[dict[str, Any]]]:
        """The payloads (checkpoint documents) of checkpoint turns, in order."""
        blobs = yield from self.blobs(t.payload_hash for t in turns if t.payload is None)
        return [
            json.loads(t.payload if t.payload is not None else blobs[t.payload_hash]) for t in turns
        ]

    def open(self, thread_id: str, checkpoint_ns: str, force: bool = False) -> ops.Plan[str]:
        """The name of the namespace's context, created (get-or-create) unless this saver
        knows it exists. A context of format 1 stays as it is (its tags are read as such)."""
        thread_id, checkpoint_ns = _checked_space(thread_id, checkpoint_ns)
        name = _context_name(thread_id, checkpoint_ns)
        if force or not self._is_open(name):
            yield ops.open_context(name, _tags(thread_id, checkpoint_ns), 0, True)
            self._mark_open(name)
        return name

    def _dead(self, name: str, first: KvPage) -> ops.Plan[set[str]]:
        """The tombstoned checkpoint ids of a context (``first``: the first page of x/)."""
        items: builtins.list[KvItem] = yield from ops.collect_from(
            ops.kv_paging(name, _DEAD, b"", _PAGE), first
        )
        return {item.key[len(_DEAD) :].decode("utf-8") for item in items}

    def _is_dead(self, checkpoint_id: str, page: KvPage) -> bool:
        return any(item.key == (_DEAD + checkpoint_id).encode("utf-8") for item in page.items)

    def _latest(
        self, name: str, page: LogPage, dead: set[str]
    ) -> ops.Plan[tuple[TurnInfo, dict[str, Any]] | None]:
        """The newest checkpoint not tombstoned, from the turn log's page ``page`` on."""
        size = 1
        while True:
            for turn in page.turns:
                checkpoint_id = _checkpoint_id(turn)
                if checkpoint_id is None or checkpoint_id in dead:
                    continue
                docs = yield from self._docs([turn])
                return turn, docs[0]
            if page.next_cursor is None:
                return None
            size = min(_PAGE, size * 8)
            page = yield ops.turn_log(name, _CP_LABEL, page.next_cursor, size, True, self.zstd)

    def namespaces(self, thread_id: str) -> ops.Plan[builtins.list[ContextInfo]]:
        """The contexts of every namespace of a thread, of both formats: listed by the plain
        ``lg.thread`` value and by format 1's ``=``-prefixed one, each context kept once and
        only if its own format reads as this thread (a thread ``=x`` of format 2 and a
        thread ``x`` of format 1 share the value ``=x``)."""
        thread_id = _thread_of({"thread_id": thread_id})
        pagings = [
            ops.contexts_paging({_TAG_THREAD: value}, None, None, None, _PAGE)
            for value in _thread_tag_values(thread_id)
        ]
        if not pagings:
            return []
        firsts = yield ops.Many([paging.first for paging in pagings])
        found: dict[int, ContextInfo] = {}
        for paging, first in zip(pagings, firsts, strict=True):
            infos: builtins.list[ContextInfo] = yield from ops.collect_from(paging, first)
            for info in infos:
                if _is_saver_context(info) and _space(info)[1] == thread_id:
                    found.setdefault(info.context_id, info)
        return builtins.list(found.values())

    def tuples(
        self, entries: Sequence[tuple[str, str, str, dict[str, Any]]]
    ) -> ops.Plan[builtins.list[CheckpointTuple]]:
        """The CheckpointTuples of checkpoint documents (context name, thread, namespace,
        document): channel values and pending writes fetched pipelined, for all at once."""
        if not entries:
            return []
        digests = [
            bytes.fromhex(digest) for *_, doc in entries for _, digest in doc["channels"].values()
        ]
        values, missing = self.cache.split(digests)
        pagings = [
            ops.kv_paging(name, f"{_WRITES}{doc['id']}/", b"", _PAGE) for name, *_, doc in entries
        ]
        answers = yield ops.Many([*self.cache.fetches(missing), *(pg.first for pg in pagings)])
        self.cache.keep(values, missing, answers[: len(missing)])
        write_items: builtins.list[builtins.list[KvItem]] = []
        for paging, page in zip(pagings, answers[len(missing) :], strict=True):
            write_items.append((yield from ops.collect_from(paging, page)))
        write_values = yield from self.blobs(
            item.value_hash for items in write_items for item in items
        )
        return [
            self._tuple(thread_id, ns, doc, values, items, write_values)
            for (_, thread_id, ns, doc), items in zip(entries, write_items, strict=True)
        ]

    def _tuple(
        self,
        thread_id: str,
        checkpoint_ns: str,
        doc: dict[str, Any],
        values: dict[bytes, bytes],
        write_items: Sequence[KvItem],
        write_values: dict[bytes, bytes],
    ) -> CheckpointTuple:
        checkpoint_id: str = doc["id"]
        checkpoint: Checkpoint = self.serde.loads_typed(
            (doc["checkpoint"][0], _unb64(doc["checkpoint"][1]))
        )
        checkpoint["channel_values"] = {
            channel: self.serde.loads_typed((type_, values[bytes.fromhex(digest)]))
            for channel, (type_, digest) in doc["channels"].items()
        }
        metadata: CheckpointMetadata = self._metadata(doc)
        parent_id: str | None = doc.get("parent")
        parent_config: RunnableConfig | None = None
        if parent_id:
            parent_config = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": parent_id,
                }
            }
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent_config,
            pending_writes=self._writes(write_items, write_values),
        )

    def _writes(
        self, items: Sequence[KvItem], values: dict[bytes, bytes]
    ) -> builtins.list[PendingWrite]:
        """One checkpoint's pending writes (its ``w/`` entries and their values), in
        ``writes_sort_key`` order: the order live execution applied them in."""
        stored: builtins.list[tuple[tuple[str, str, int], PendingWrite]] = []
        for item in items:
            head, _, body = values[item.value_hash].partition(b"\n")
            meta = json.loads(head)
            value = self.serde.loads_typed((meta["type"], body))
            sort_key = writes_sort_key(meta["path"], meta["task_id"], meta["idx"])
            stored.append((sort_key, (meta["task_id"], meta["channel"], value)))
        stored.sort(key=lambda entry: entry[0])
        return [write for _, write in stored]

    def _metadata(self, doc: dict[str, Any]) -> CheckpointMetadata:
        metadata: CheckpointMetadata = self.serde.loads_typed(
            (doc["metadata"][0], _unb64(doc["metadata"][1]))
        )
        return metadata

    # -- delta channels: the ancestor walk ------------------------------------------------------

    def _target(self, name: str, checkpoint_id: str | None) -> ops.Plan[tuple[int, int] | None]:
        """(turn, depth) of a checkpoint of the context (its newest when ``checkpoint_id`` is
        None); None when there is none or it was deleted. A checkpoint this saver stored (or
        looked up as a parent) recently costs no request."""
        if checkpoint_id:
            known = self._parent(name, checkpoint_id)
            if known is not None:
                return known[0], known[1]
            turn, dead = yield ops.Many(
                [
                    ops.turn_by_key_op(name, _CP + checkpoint_id),
                    ops.kv_list(name, _DEAD + checkpoint_id, b"", 1),
                ]
            )
            return None if self._is_dead(checkpoint_id, dead) else (turn.turn_id, turn.depth)
        first, dead_page = yield ops.Many(
            [
                ops.turn_log(name, _CP_LABEL, None, 1, True, self.zstd),
                ops.kv_list(name, _DEAD, b"", _PAGE),
            ]
        )
        dead_ids = yield from self._dead(name, dead_page)
        found = yield from self._latest(name, first, dead_ids)
        return None if found is None else (found[0].turn_id, found[0].depth)

    def _ancestors(
        self, turn_id: int, depth: int, channels: set[str]
    ) -> ops.Plan[builtins.list[tuple[dict[str, Any], Turn]]]:
        """The checkpoint documents above the checkpoint turn ``turn_id`` (at ``depth``), its
        parent first, up to the nearest one that holds a value of each of ``channels`` (that
        one included), or to the start of the chain (its root, or where a garbage collection
        cut it). The chain is read in GET_CHAIN windows without payloads (32 turns, then 4
        times more each), each ending at a turn already seen; a window's documents are fetched
        pipelined (once: the blob cache keeps them) and parsed newest first only until every
        channel is found: a few round trips and about the work the walk needs, not one
        ``get_tuple`` per ancestor.
        Tombstones (``delete_for_runs``, ``prune``) do not stop the walk: a live checkpoint's
        delta channels still need the writes of the deleted ones before it."""
        info: ServerInfo = yield ops.SERVER_INFO
        ceiling = max(2, min(_CHAIN_WINDOW_MAX, info.read_turns_max or _CHAIN_WINDOW_MAX))
        span = min(_CHAIN_WINDOW, ceiling)
        remaining = set(channels)
        found: builtins.list[tuple[dict[str, Any], Turn]] = []
        newest = depth
        while remaining and newest > 0:
            oldest = max(0, newest - span + 1)
            page = yield ops.chain(turn_id, oldest, newest - oldest + 1, False, self.zstd)
            fresh = [t for t in reversed(page.turns) if t.depth < newest]  # newest first
            checkpoints = [t for t in fresh if t.type_tag != VALUE_TYPE]
            blobs = yield from self.blobs(t.payload_hash for t in checkpoints)
            for turn in checkpoints:
                doc = json.loads(blobs[turn.payload_hash])
                if found and found[-1][0].get("parent") != doc["id"]:
                    child = found[-1][0]
                    raise ValueError(
                        f"checkpoint {child['id']} names parent {child.get('parent')!r} but its "
                        f"turn hangs from checkpoint {doc['id']}: the thread's chain is not what "
                        "this saver wrote"
                    )
                found.append((doc, turn))
                remaining -= set(doc["channels"])
                if not remaining:
                    break
            if not page.turns or page.turns[0].depth > oldest or oldest == 0:
                break  # the root, or history a garbage collection took
            newest = oldest
            span = min(span * 4, ceiling)
        return found

    def delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> ops.Plan[dict[str, DeltaChannelHistory]]:
        """``get_delta_channel_history``: per channel, the pending writes of the target's
        ancestors, oldest first, back to (and including) the nearest ancestor that holds the
        channel's value, and that value as ``seed`` (no ``seed`` when the walk reached the
        root without one). The target's own writes are not included (they are pending for
        the next step). A target that does not exist (or was deleted) has no history."""
        if not channels:
            return {}
        configurable = config["configurable"]
        thread_id = _thread_of(configurable)
        name = _context_name(thread_id, configurable.get("checkpoint_ns", ""))
        empty: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
        try:
            target = yield from self._target(name, get_checkpoint_id(config))
        except NotFound:
            return empty
        if target is None:
            return empty
        ancestors = yield from self._ancestors(target[0], target[1], set(channels))
        walked, seeds = _walk([doc for doc, _ in ancestors], channels)
        needed = builtins.list(dict.fromkeys(cid for ids in walked.values() for cid in ids))
        writes = yield from self._writes_of(name, needed)
        values = yield from self.blobs(bytes.fromhex(digest) for _, digest in seeds.values())
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {
                "writes": [
                    write
                    for cid in reversed(walked[ch])  # oldest first
                    for write in writes[cid]
                    if write[1] == ch
                ]
            }
            if ch in seeds:
                type_, digest = seeds[ch]
                entry["seed"] = self.serde.loads_typed((type_, values[bytes.fromhex(digest)]))
            result[ch] = entry
        return result

    def _writes_of(
        self, name: str, checkpoint_ids: Sequence[str]
    ) -> ops.Plan[dict[str, builtins.list[PendingWrite]]]:
        """The pending writes of each checkpoint, in ``writes_sort_key`` order, then their
        values (the blob cache first). A few checkpoints: one listing each, pipelined. More:
        one KV_LIST range from the oldest id to the newest (ids grow with time, so an
        ancestor walk's checkpoints are one range, less what other branches wrote meanwhile,
        which is left out), and per-checkpoint listings if that range holds many more
        entries than it should."""
        if not checkpoint_ids:
            return {}
        wanted = set(checkpoint_ids)
        grouped: dict[str, builtins.list[KvItem]] = {cid: [] for cid in checkpoint_ids}
        ranged = False
        if len(wanted) > _WRITES_LISTED_MAX:
            ranged = yield from self._writes_in_range(name, wanted, grouped)
        if not ranged:
            pagings = [
                ops.kv_paging(name, f"{_WRITES}{cid}/", b"", _PAGE) for cid in checkpoint_ids
            ]
            firsts = yield ops.Many([paging.first for paging in pagings])
            for cid, paging, first in zip(checkpoint_ids, pagings, firsts, strict=True):
                grouped[cid] = yield from ops.collect_from(paging, first)
        values = yield from self.blobs(
            item.value_hash for some in grouped.values() for item in some
        )
        return {cid: self._writes(some, values) for cid, some in grouped.items()}

    def _writes_in_range(
        self, name: str, wanted: set[str], grouped: dict[str, builtins.list[KvItem]]
    ) -> ops.Plan[bool]:
        """Fills ``grouped`` from one scan of the ``w/`` keys between the oldest and the
        newest of ``wanted``; False (``grouped`` untouched) when the range holds over four
        times as many other checkpoints' entries as wanted ones (ids not in time order, or
        busy branches; a page's worth is always read): then listing each is cheaper."""
        low, high = min(wanted), max(wanted)
        found: dict[str, builtins.list[KvItem]] = {cid: [] for cid in wanted}
        others = 0
        page: KvPage = yield ops.kv_list(name, _WRITES, f"{_WRITES}{low}", _PAGE)
        while True:
            for item in page.items:
                cid = item.key[len(_WRITES) :].split(b"/", 1)[0].decode("utf-8")
                if cid > high:
                    grouped.update(found)
                    return True
                if cid in found:
                    found[cid].append(item)
                else:
                    others += 1
            if others > 4 * max(_PAGE // 4, sum(len(items) for items in found.values())):
                return False
            if page.next_after is None:
                grouped.update(found)
                return True
            page = yield ops.kv_list(name, _WRITES, page.next_after, _PAGE)

    def _delta_channels(self, doc: dict[str, Any]) -> set[str]:
        """The delta channels a checkpoint rebuilds from its ancestors' writes: those its
        metadata counts since their last snapshot, less those it holds a value of."""
        metadata: dict[str, Any] = dict(self._metadata(doc))
        counters = metadata.get(_DELTA_COUNTERS) or {}
        return {str(ch) for ch in counters} - set(doc["channels"])

    # -- BaseCheckpointSaver's methods, as plans ------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> ops.Plan[CheckpointTuple | None]:
        configurable = config["configurable"]
        thread_id = _thread_of(configurable)
        checkpoint_ns: str = configurable.get("checkpoint_ns", "")
        name = _context_name(thread_id, checkpoint_ns)
        checkpoint_id = get_checkpoint_id(config)
        try:
            if checkpoint_id:
                turn, dead = yield ops.Many(
                    [
                        ops.turn_by_key_op(name, _CP + checkpoint_id),
                        ops.kv_list(name, _DEAD + checkpoint_id, b"", 1),
                    ]
                )
                if self._is_dead(checkpoint_id, dead):
                    return None
                doc = (yield from self._docs([turn]))[0]
            else:
                first, dead_page = yield ops.Many(
                    [
                        ops.turn_log(name, _CP_LABEL, None, 1, True, self.zstd),
                        ops.kv_list(name, _DEAD, b"", _PAGE),
                    ]
                )
                dead_ids = yield from self._dead(name, dead_page)
                found = yield from self._latest(name, first, dead_ids)
                if found is None:
                    return None
                doc = found[1]
        except NotFound:
            return None
        tuples = yield from self.tuples([(name, thread_id, checkpoint_ns, doc)])
        return tuples[0]

    def list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None,
        limit: int | None,
    ) -> ops.Plan[builtins.list[CheckpointTuple]]:
        if limit is not None and limit <= 0:
            return []
        spaces: builtins.list[tuple[str, str, str]] = []  # (context name, thread, namespace)
        only_id: str | None = None
        if config is not None:
            configurable = config["configurable"]
            thread_id = _thread_of(configurable)
            ns: str | None = configurable.get("checkpoint_ns")
            only_id = get_checkpoint_id(config)
            if ns is not None:
                spaces.append((_context_name(thread_id, ns), thread_id, ns))
            else:
                spaces.extend(_space(info) for info in (yield from self.namespaces(thread_id)))
        else:
            infos: builtins.list[ContextInfo] = yield from ops.collect(
                ops.contexts_paging(None, _NAME_PREFIX, None, None, _PAGE)
            )
            spaces.extend(_space(info) for info in infos if _is_saver_context(info))
        before_id = get_checkpoint_id(before) if before else None
        labels: dict[str, str] = dict(_CP_LABEL)
        for key, value in (filter or {}).items():
            # Only strings on the server (1 == 1.0 == True in Python, not as labels); every
            # filter item is checked here on the metadata too.
            if key == "run_id" and _run_label(value) is not None:
                labels["run_id"] = value
            elif key in ("source", "step") and isinstance(value, str):
                label = _label_value(value)
                if label is not None:
                    labels[f"m.{key}"] = label
        candidates: builtins.list[tuple[str, str, str, dict[str, Any]]] = []
        for name, thread_id, ns in spaces:
            try:
                if only_id:
                    turn, dead = yield ops.Many(
                        [
                            ops.turn_by_key_op(name, _CP + only_id),
                            ops.kv_list(name, _DEAD + only_id, b"", 1),
                        ]
                    )
                    alive = [] if self._is_dead(only_id, dead) else [turn]
                    alive = [t for t in alive if not (before_id and only_id >= before_id)]
                    docs = yield from self._docs(alive)
                    docs = [d for d in docs if self._matches(d, filter)]
                else:
                    docs = yield from self._newest(name, labels, filter, before_id, limit)
            except NotFound:
                continue
            candidates.extend((name, thread_id, ns, doc) for doc in docs)
        candidates.sort(key=lambda c: str(c[3]["id"]), reverse=True)
        return (yield from self.tuples(candidates[:limit]))

    def _matches(self, doc: dict[str, Any], filter: dict[str, Any] | None) -> bool:  # noqa: A002
        """Whether the checkpoint's metadata has every item of ``filter``."""
        if not filter:
            return True
        metadata = self._metadata(doc)
        return all(metadata.get(key) == value for key, value in filter.items())

    def _newest(
        self,
        name: str,
        labels: dict[str, str],
        filter: dict[str, Any] | None,  # noqa: A002 - LangGraph's name
        before_id: str | None,
        limit: int | None,
    ) -> ops.Plan[builtins.list[dict[str, Any]]]:
        """The documents of the context's newest ``limit`` checkpoints (all for None) that
        are not tombstoned, older than ``before_id`` and match ``labels`` (the server
        filters) and ``filter`` (checked here), newest first: the turn log read a page at a
        time, ``limit`` turns and then four times more while checks reject, with payloads
        (each checkpoint's document inline) and each candidate's tombstone looked up
        pipelined. O(limit) turns and payloads when the filters keep most checkpoints, not
        the whole thread.

        The turn log lists turns newest first in the order they were stored; the
        checkpoints' ids order them the same way (LangGraph makes uuid6 ids, which grow with
        time, and stores each checkpoint after its parent), and ``list`` orders by id."""
        size = _PAGE if limit is None else min(_PAGE, max(limit, 1))
        found: builtins.list[dict[str, Any]] = []
        page: LogPage = yield ops.turn_log(name, labels, None, size, True, self.zstd)
        while True:
            fresh = [
                (cid, turn)
                for turn in page.turns
                if (cid := _checkpoint_id(turn)) is not None
                and not (before_id and cid >= before_id)
            ]
            if fresh:
                checks = yield ops.Many(
                    [ops.kv_list(name, _DEAD + cid, b"", 1) for cid, _ in fresh]
                )
                alive = [
                    t
                    for (cid, t), dead in zip(fresh, checks, strict=True)
                    if not self._is_dead(cid, dead)
                ]
                for doc in (yield from self._docs(alive)):
                    if self._matches(doc, filter):
                        found.append(doc)
                        if limit is not None and len(found) >= limit:
                            return found
            if page.next_cursor is None:
                return found
            size = min(_PAGE, size * 4)
            page = yield ops.turn_log(name, labels, page.next_cursor, size, True, self.zstd)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> ops.Plan[RunnableConfig]:
        try:
            return (yield from self._put(config, checkpoint, metadata, new_versions, False))
        except (NotFound, InvalidArgument):
            # The context was deleted (or pruned) since this saver last saw it: look the
            # parent up again (create the context again), once.
            return (yield from self._put(config, checkpoint, metadata, new_versions, True))

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        again: bool,
    ) -> ops.Plan[RunnableConfig]:
        configurable = config["configurable"]
        thread_id = _thread_of(configurable)
        checkpoint_ns: str = configurable.get("checkpoint_ns", "")
        parent_id: str | None = configurable.get("checkpoint_id")

        body = checkpoint.copy()
        values: dict[str, Any] = body.pop("channel_values")  # type: ignore[misc]
        versions = checkpoint.get("channel_versions", {})
        channels: dict[str, builtins.list[str]] = {}
        blobs: dict[str, bytes] = {}
        missing: builtins.list[str] = []
        for channel in versions:
            if channel in values:
                type_, data = self.serde.dumps_typed(values[channel])
                if type_ == "empty":
                    continue
                digest = blob_hash(data)
                channels[channel] = [type_, digest.hex()]
                blobs[digest.hex()] = data
            elif channel not in new_versions:
                missing.append(channel)

        name = yield from self.open(thread_id, checkpoint_ns, force=again)
        parent_turn_id: int | None = None
        parent_channels: dict[str, builtins.list[str]] = {}
        if parent_id:
            known = None if again else self._parent(name, parent_id)
            if known is not None:
                parent_turn_id, _, parent_channels = known
            else:
                parent_turn = yield from ops.turn_by_key(name, _CP + parent_id)
                if parent_turn is not None:
                    parent_turn_id = parent_turn.turn_id
                    parent_channels = (yield from self._docs([parent_turn]))[0]["channels"]
        for channel in missing:
            # Unchanged channels the checkpoint does not carry: the parent's blobs.
            if channel in parent_channels:
                channels[channel] = parent_channels[channel]
        # A value the parent checkpoint has is held already (by its turn, or b/<hash>); the
        # new ones become turns of the checkpoint's own batch: one durable write, all or none.
        # Past the batch's room, the rest are held by b/<hash> entries, written before it.
        held = {digest for _, digest in parent_channels.values()}
        new = [(digest, data) for digest, data in blobs.items() if digest not in held]
        as_turns, overflow = new[: _BATCH_TURNS - 1], new[_BATCH_TURNS - 1 :]
        if overflow:
            yield ops.Many(ops.kv_put_ops(name, {_BLOBS + d: data for d, data in overflow}, True))

        full_metadata = get_checkpoint_metadata(config, metadata)
        meta_type, meta_bytes = self.serde.dumps_typed(full_metadata)
        cp_type, cp_bytes = self.serde.dumps_typed(body)
        doc = {
            "v": 1,
            "id": checkpoint["id"],
            "parent": parent_id,
            "checkpoint": [cp_type, _b64(cp_bytes)],
            "metadata": [meta_type, _b64(meta_bytes)],
            "channels": channels,
        }
        labels = {**_CP_LABEL, "thread_id": thread_id}
        run_id = _run_label(full_metadata.get("run_id"))
        if run_id is not None:
            labels["run_id"] = run_id
        for key in ("source", "step"):
            if key in full_metadata:
                label = _label_value(full_metadata[key])
                if label is not None:
                    labels[f"m.{key}"] = label
        payload = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        parent: ParentLike = parent_turn_id if parent_turn_id is not None else "root"
        specs = [
            TurnSpec(data, parent=parent if i == 0 else None, type_tag=VALUE_TYPE)
            for i, (_, data) in enumerate(as_turns)
        ]
        specs.append(
            TurnSpec(
                payload,
                parent=None if specs else parent,
                key=_CP + checkpoint["id"],
                labels=labels,
            )
        )
        appended = yield from ops.append_turns_compressed(
            name, specs, None, self.compress_level, self.idempotency
        )
        cp_turn = appended[-1].turn
        self._remember_parent(name, checkpoint["id"], cp_turn.turn_id, cp_turn.depth, channels)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> ops.Plan[None]:
        configurable = config["configurable"]
        thread_id = _thread_of(configurable)
        checkpoint_ns: str = configurable.get("checkpoint_ns", "")
        checkpoint_id: str = configurable["checkpoint_id"]
        keep: dict[str, bytes] = {}
        replace: dict[str, bytes] = {}
        for idx, (channel, value) in enumerate(writes):
            write_idx = WRITES_IDX_MAP.get(channel, idx)
            type_, data = self.serde.dumps_typed(value)
            head = {
                "task_id": task_id,
                "channel": channel,
                "type": type_,
                "path": task_path,
                "idx": write_idx,
            }
            entry = json.dumps(head, separators=(",", ":")).encode("utf-8") + b"\n" + data
            key = f"{_WRITES}{checkpoint_id}/{task_id}/{write_idx}"
            (keep if write_idx >= 0 else replace)[key] = entry
        for attempt in (False, True):
            name = yield from self.open(thread_id, checkpoint_ns, force=attempt)
            batch = ops.kv_put_ops(name, keep, True) + ops.kv_put_ops(name, replace, False)
            if not batch:
                return None
            try:
                yield ops.Many(batch)
                return None
            except NotFound:
                if attempt:
                    raise
        return None

    def delete_thread(self, thread_id: str) -> ops.Plan[None]:
        infos = yield from self.namespaces(thread_id)
        for info in infos:
            assert info.name is not None
            self._forget(info.name)
        yield from ops.tolerant([ops.delete_context(info.context_id) for info in infos])
        return None

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> ops.Plan[None]:
        target_thread_id, _ = _checked_space(target_thread_id, "")
        for info in (yield from self.namespaces(source_thread_id)):
            name, _, ns = _space(info)
            target_thread_id, ns = _checked_space(target_thread_id, ns)
            target = _context_name(target_thread_id, ns)
            try:
                yield ops.delete_context(target)
            except NotFound:
                pass
            tags = {**_tags(target_thread_id, ns), _TAG_FROM: f"={info.context_id}"}
            self._drop_parents(target)
            clone: ContextInfo = yield ops.clone_context(info.context_id, target, tags)
            if _TAG_NS in clone.tags and _TAG_NS not in tags:
                # A format-1 source's "=" (its empty namespace) came with the copy: in format
                # 2 the empty namespace has no lg.ns.
                yield ops.tag_context(target, None, [_TAG_NS], None)
            self._mark_open(target)
        return None

    def prune(self, thread_ids: Sequence[str], strategy: str) -> ops.Plan[None]:
        if strategy == "delete":
            for thread_id in thread_ids:
                yield from self.delete_thread(thread_id)
            return None
        if strategy != "keep_latest":
            raise ValueError(f"unknown prune strategy: {strategy!r}")
        for thread_id in thread_ids:
            for info in (yield from self.namespaces(thread_id)):
                try:
                    yield from self._keep_latest(str(info.name))
                except NotFound:
                    continue
        return None

    def _keep_latest(self, name: str) -> ops.Plan[None]:
        """Prunes a context to its newest live checkpoint: the server drops the depths below
        it (from the head's depth down to its own); what the floor leaves of other branches is
        tombstoned; pending writes of every other checkpoint are deleted. A checkpoint with
        delta channels keeps its ancestors back to each channel's nearest snapshot, hidden
        (tombstoned) but with their writes, so that the channels still replay (LangGraph's
        ``prune`` warning: a kept checkpoint is rarely a snapshot itself)."""
        info, first, dead_page = yield ops.Many(
            [
                ops.context_info(name),
                ops.turn_log(name, _CP_LABEL, None, 1, True, self.zstd),
                ops.kv_list(name, _DEAD, b"", _PAGE),
            ]
        )
        if info.is_empty:
            return None
        dead = yield from self._dead(name, dead_page)
        found = yield from self._latest(name, first, dead)
        keep_id: str | None = None
        keep_writes: set[str] = set()
        if found is not None:
            latest, doc = found
            keep_id = _checkpoint_id(latest)
            floor = latest.depth
            digests = [d for _, d in doc["channels"].values()]
            delta = self._delta_channels(doc)
            if delta:
                # Its delta channels replay the writes of its ancestors back to each one's
                # nearest snapshot: those ancestors stay above the floor (hidden by
                # tombstones below), their writes stay, and the snapshots are held.
                ancestors = yield from self._ancestors(latest.turn_id, latest.depth, delta)
                walked, seeds = _walk([d for d, _ in ancestors], delta)
                keep_writes = {cid for ids in walked.values() for cid in ids}
                depths = [turn.depth for d, turn in ancestors if d["id"] in keep_writes]
                floor = min([floor, *depths])
                digests += [digest for _, digest in seeds.values()]
            # The values may be turns below the new floor: hold them as b/<hash>.
            values = yield from self.blobs(bytes.fromhex(d) for d in digests)
            held = {_BLOBS + d.hex(): values[d] for d in dict.fromkeys(values)}
            if held:
                yield ops.Many(ops.kv_put_ops(name, held, True))
            yield ops.prune_context(name, max(1, info.head_depth - floor + 1))
        else:
            yield ops.prune_context(name, 1)
        left: builtins.list[TurnInfo] = yield from ops.collect(
            ops.turn_log_paging(name, _CP_LABEL, _PAGE, False, self.zstd)
        )
        self._drop_parents(name)
        stale = sorted(
            cid
            for cid in (_checkpoint_id(t) for t in left)
            if cid is not None and cid != keep_id and cid not in dead
        )
        if stale:
            yield ops.Many(ops.kv_put_ops(name, {_DEAD + cid: b"{}" for cid in stale}, False))
        writes: builtins.list[KvItem] = yield from ops.collect(
            ops.kv_paging(name, _WRITES, b"", _PAGE)
        )
        kept = tuple(f"{_WRITES}{cid}/".encode() for cid in {keep_id, *keep_writes} if cid)
        drop = [item.key for item in writes if not item.key.startswith(kept)]
        if drop:
            yield ops.Many(ops.kv_delete_ops(name, drop))
        return None

    def _replayed_by_live(self, name: str) -> ops.Plan[set[str]]:
        """The tombstoned checkpoints of the context whose writes a live (not tombstoned)
        checkpoint's delta channels replay: those an ancestor walk from a live checkpoint
        visits for a channel it rebuilds, before that channel's nearest snapshot. Reads
        every checkpoint document of the context (the turn log, payloads inline)."""
        first, dead_page = yield ops.Many(
            [
                ops.turn_log(name, _CP_LABEL, None, _PAGE, True, self.zstd),
                ops.kv_list(name, _DEAD, b"", _PAGE),
            ]
        )
        turns: builtins.list[TurnInfo] = yield from ops.collect_from(
            ops.turn_log_paging(name, _CP_LABEL, _PAGE, True, self.zstd), first
        )
        dead = yield from self._dead(name, dead_page)
        if not dead:
            return set()
        docs = {doc["id"]: doc for doc in (yield from self._docs(turns))}
        needed: set[str] = set()
        for doc in docs.values():
            if doc["id"] in dead:
                continue
            for ch in self._delta_channels(doc):
                cursor = docs.get(doc.get("parent") or "")
                while cursor is not None:
                    if cursor["id"] in dead:
                        needed.add(cursor["id"])
                    if ch in cursor["channels"]:
                        break  # the channel's snapshot: nothing older is replayed
                    cursor = docs.get(cursor.get("parent") or "")
        return needed

    def delete_for_runs(self, run_ids: Sequence[str]) -> ops.Plan[None]:
        runs = [r for r in dict.fromkeys(run_ids) if _run_label(r) is not None]
        # The checkpoints labelled with each run, by context, from the store-wide index.
        by_context: dict[int, set[str]] = {}
        for run_id in runs:
            found: builtins.list[TurnInfo] = yield from ops.collect(
                ops.find_turns_paging("run_id", run_id, _PAGE)
            )
            for turn in found:
                checkpoint_id = _checkpoint_id(turn)
                if checkpoint_id is not None:
                    by_context.setdefault(turn.context_id, set()).add(checkpoint_id)
        if not by_context:
            return None
        owners = builtins.list(by_context)
        infos = yield from ops.tolerant([ops.context_info(c) for c in owners])
        targets: dict[str, set[str]] = {}
        queue: builtins.list[tuple[ContextInfo, set[str]]] = []
        for info in infos:
            if info is not None and _is_saver_context(info):
                cps = by_context[info.context_id]
                targets.setdefault(str(info.name), set()).update(cps)
                queue.append((info, cps))
        # Copies (copy_thread's clones) inherit the checkpoints, not their index entries.
        seen = {info.context_id for info, _ in queue}
        while queue:
            source, cps = queue.pop()
            clones: builtins.list[ContextInfo] = yield from ops.collect(
                ops.contexts_paging({_TAG_FROM: f"={source.context_id}"}, None, None, None, _PAGE)
            )
            for clone in clones:
                if clone.context_id in seen or not _is_saver_context(clone):
                    continue
                seen.add(clone.context_id)
                targets.setdefault(str(clone.name), set()).update(cps)
                queue.append((clone, cps))
        names = sorted(targets)
        # Tombstones first (the checkpoints disappear at once), then their pending writes.
        yield from ops.tolerant(
            [
                op
                for name in names
                for op in ops.kv_put_ops(
                    name, {f"{_DEAD}{cid}": b"{}" for cid in sorted(targets[name])}, False
                )
            ]
        )
        # The writes a live checkpoint's delta channels replay stay (LangGraph's warning on
        # delete_for_runs: without them those channels rebuild wrong, silently).
        for name in names:
            try:
                targets[name] -= yield from self._replayed_by_live(name)
            except NotFound:
                continue
        listed = [
            (name, ops.kv_paging(name, f"{_WRITES}{cid}/", b"", _PAGE))
            for name in names
            for cid in sorted(targets[name])
        ]
        pages = yield from ops.tolerant([paging.first for _, paging in listed])
        drop: dict[str, builtins.list[bytes]] = {}
        for (name, paging), page in zip(listed, pages, strict=True):
            if page is None:
                continue
            try:
                items: builtins.list[KvItem] = yield from ops.collect_from(paging, page)
            except NotFound:
                continue
            drop.setdefault(name, []).extend(item.key for item in items)
        yield from ops.tolerant(
            [op for name, keys in drop.items() for op in ops.kv_delete_ops(name, keys)]
        )
        return None


class CtxstoreSaver(TwoClients, BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver storing threads in a ctxstore server.

    Build it with :meth:`from_addr` (it then owns its clients: :meth:`close` /
    :meth:`aclose`), or pass a :class:`~ctxstore.Client` and/or an
    :class:`~ctxstore.AsyncClient` of your own. The sync methods use the Client, the ``a*``
    methods the AsyncClient; one that is not given is made when first needed, with the other's
    address, token and settings (timeouts, ``accept_zstd``, ``verify_payloads``), and owned by
    the saver.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        aclient: AsyncClient | None = None,
        serde: SerializerProtocol | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        some = self._use_clients(client, aclient, owns_client)
        self._plans = _Plans(self.serde, some._accept_zstd, some._compress_level, some._idempotency)

    @classmethod
    def from_addr(
        cls,
        addr: str | Sequence[str] | None = None,
        token: str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        timeout: float | None = None,
        verify_payloads: VerifyPayloads = "when_remote",
        failover_timeout: float | None = None,
        idempotency: Idempotency = "off",
    ) -> CtxstoreSaver:
        """A saver with its own clients for ``addr`` (``"HOST:PORT"``, or a primary and its
        standbys as ``"A,B,C"`` or a list: the clients follow the primary across a failover);
        each connects at its first call (the Client for the sync methods, the AsyncClient for
        the ``a*`` ones). ``addr`` and ``token`` default to ``$CTXSTORE_ADDR`` and
        ``$CTXSTORE_TOKEN``; ``timeout``, ``verify_payloads``, ``failover_timeout`` and
        ``idempotency`` are the clients' (see :class:`~ctxstore.Client`): with
        ``idempotency="auto"`` a checkpoint in flight at a failover lands exactly once."""
        client = cls._client_for(
            addr, token, timeout, verify_payloads, failover_timeout, idempotency
        )
        return cls(client, serde=serde, owns_client=True)

    # -- BaseCheckpointSaver: sync ------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the thread namespace's
        newest), with its pending writes; None if there is none (or it was deleted)."""
        return self._run(self._plans.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of ``config``'s thread (and namespace,
        when it names one; one checkpoint when it names one), else of every thread; only those
        whose metadata has every ``filter`` item, older than ``before``, at most ``limit``."""
        return iter(self._run(self._plans.list(config, filter, before, limit)))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores ``checkpoint`` as a turn after its parent's (``config``'s checkpoint id),
        each channel value as its own blob; returns the config naming it."""
        return self._run(self._plans.put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores a task's writes for ``config``'s checkpoint (key-value entries); a write
        stored before keeps its value, except the special channels' (errors, interrupts...)."""
        self._run(self._plans.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every namespace's context of the thread (nothing if it has none)."""
        self._run(self._plans.delete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every namespace of a thread to another thread: clones of its contexts
        (every checkpoint, blob and pending write shared, nothing copied)."""
        self._run(self._plans.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each namespace of the threads keeps only its newest checkpoint
        (and that checkpoint's pending writes); ``delete``: the threads are deleted."""
        self._run(self._plans.prune(thread_ids, strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints (of every thread and namespace, copies included) whose
        metadata ``run_id`` is one of ``run_ids``, and their pending writes: each becomes a
        tombstone (``get_tuple``/``list`` no longer return it). Its turn and channel blobs stay
        on the server until server-side redaction exists."""
        self._run(self._plans.delete_for_runs(run_ids))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel of ``channels``, the writes of ``config``'s checkpoint's ancestors back
        to the nearest one holding the channel's value, oldest first, and that value as
        ``seed`` (LangGraph's ``DeltaChannel``): the chain read in a few windows and every
        document, write and value fetched pipelined — a few round trips, not the default's
        one ``get_tuple`` per ancestor."""
        return self._run(self._plans.delta_history(config, channels))

    # -- BaseCheckpointSaver: async, on the AsyncClient ----------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` on the AsyncClient."""
        return await self._arun(self._plans.get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` on the AsyncClient."""
        for item in await self._arun(self._plans.list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` on the AsyncClient."""
        return await self._arun(self._plans.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` on the AsyncClient."""
        await self._arun(self._plans.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` on the AsyncClient."""
        await self._arun(self._plans.delete_thread(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` on the AsyncClient."""
        await self._arun(self._plans.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` on the AsyncClient."""
        await self._arun(self._plans.prune(thread_ids, strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` on the AsyncClient."""
        await self._arun(self._plans.delete_for_runs(run_ids))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """:meth:`get_delta_channel_history` on the AsyncClient."""
        return await self._arun(self._plans.delta_history(config, channels))
