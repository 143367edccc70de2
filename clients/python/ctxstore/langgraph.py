"""A LangGraph checkpointer on ctxstore: :class:`CtxstoreSaver`.

Needs the ``langgraph`` extra (``pip install 'ctxstore[langgraph]'``). The mapping:

- a thread's namespace (``thread_id`` + ``checkpoint_ns``) is a named context, tagged
  ``lg.thread`` (``=`` and its thread) and ``lg.ns`` (``=`` and its namespace), so that every namespace of a thread
  is found (``delete_thread``, ``copy_thread``, ``prune``, ``list`` without a namespace);
- a checkpoint is a turn of that context, keyed by its checkpoint id, appended after its parent
  checkpoint's turn (a root turn when it has none), labelled ``thread_id``, ``run_id`` (both
  indexed store-wide), ``m.source`` and ``m.step``. Its payload (JSON) holds the serialized
  checkpoint without its channel values, the serialized metadata, the parent's id and, per
  channel, the serializer's type string (kept as it is) and the BLAKE3 hash of the value's
  bytes;
- each channel value is its own blob, kept alive by the context's key-value entry
  ``b/<hash>``: a value that did not change is the same blob (nothing is uploaded again);
- pending writes are key-value entries ``w/<checkpoint id>/<task id>/<idx>`` (they may arrive
  before their checkpoint);
- ``list`` reads the turn log (newest first) with the server filtering on the labels it has;
  the rest of a metadata filter is applied here;
- ``copy_thread`` clones every namespace's context, ``prune`` prunes each to its newest
  checkpoint (``keep_latest``) or deletes it (``delete``), ``delete_thread`` deletes them.

``delete_for_runs`` is not implemented (it needs tombstones the server does not have yet):
it raises NotImplementedError, as :class:`BaseCheckpointSaver`'s does.

The async methods run the blocking client's calls in a worker thread (the client is
thread-safe and pipelines concurrent calls on its one connection).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from threading import Lock
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .client import Client
from .errors import NotFound
from .types import TurnInfo, blob_hash

__all__ = ["CtxstoreSaver"]

_NAME_PREFIX = "lg:"
_TAG_THREAD = "lg.thread"
_TAG_NS = "lg.ns"
_KV_PUT_MAX = 128
_LABEL_VALUE_MAX = 256
_BLOB_CACHE_MAX = 4096


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


def _tags(thread_id: str, checkpoint_ns: str) -> dict[str, str]:
    """The tags of a namespace's context (a tag value is never empty: "=" comes first)."""
    return {_TAG_THREAD: "=" + thread_id, _TAG_NS: "=" + checkpoint_ns}


def _label_value(value: Any) -> str | None:
    """A scalar metadata value as a label (JSON), or None when it is not one or too long."""
    if value is None or isinstance(value, (str, int, float, bool)):
        text = json.dumps(value)
        if 0 < len(text.encode("utf-8")) <= _LABEL_VALUE_MAX:
            return text
    return None


class CtxstoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver storing threads in a ctxstore server.

    Build it with :meth:`from_addr` (it then owns its client and :meth:`close` closes it), or
    pass a :class:`~ctxstore.Client` of your own.
    """

    def __init__(
        self,
        client: Client,
        *,
        serde: SerializerProtocol | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self.client = client
        self._owns_client = owns_client
        self._blob_cache: OrderedDict[bytes, bytes] = OrderedDict()
        self._cache_lock = Lock()

    @classmethod
    def from_addr(
        cls,
        addr: str,
        token: str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        timeout: float | None = None,
    ) -> CtxstoreSaver:
        """A saver with its own client connected to ``addr`` (``"HOST:PORT"``)."""
        if timeout is None:
            client = Client(addr, token=token)
        else:
            client = Client(addr, token=token, timeout=timeout)
        return cls(client, serde=serde, owns_client=True)

    def close(self) -> None:
        """Closes the client if this saver made it."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> CtxstoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------------

    def _open(self, thread_id: str, checkpoint_ns: str) -> str:
        name = _context_name(thread_id, checkpoint_ns)
        self.client.open_context(
            name, _tags(thread_id, checkpoint_ns), get_or_create=True
        )
        return name

    def _blob(self, digest: bytes) -> bytes:
        with self._cache_lock:
            cached = self._blob_cache.get(digest)
            if cached is not None:
                self._blob_cache.move_to_end(digest)
                return cached
        data = self.client.get_blob(digest)
        with self._cache_lock:
            self._blob_cache[digest] = data
            while len(self._blob_cache) > _BLOB_CACHE_MAX:
                self._blob_cache.popitem(last=False)
        return data

    def _namespaces(self, thread_id: str) -> list[tuple[str, str]]:
        """(context name, namespace) of every namespace of the thread."""
        found = []
        for info in self.client.iter_contexts(tags={_TAG_THREAD: "=" + thread_id}):
            if info.name is not None and info.name.startswith(_NAME_PREFIX):
                found.append((info.name, info.tags.get(_TAG_NS, "=")[1:]))
        return found

    def _writes(self, name: str, checkpoint_id: str) -> list[PendingWrite]:
        stored: list[tuple[tuple[str, str, int], PendingWrite]] = []
        for item in self.client.iter_kv(name, prefix=f"w/{checkpoint_id}/"):
            raw = self._blob(item.value_hash)
            head, _, body = raw.partition(b"\n")
            meta = json.loads(head)
            value = self.serde.loads_typed((meta["type"], body))
            sort_key = writes_sort_key(meta["path"], meta["task_id"], meta["idx"])
            stored.append((sort_key, (meta["task_id"], meta["channel"], value)))
        stored.sort(key=lambda entry: entry[0])
        return [write for _, write in stored]

    def _tuple(
        self, name: str, thread_id: str, checkpoint_ns: str, payload: bytes
    ) -> CheckpointTuple:
        doc = json.loads(payload)
        checkpoint_id: str = doc["id"]
        checkpoint: Checkpoint = self.serde.loads_typed(
            (doc["checkpoint"][0], _unb64(doc["checkpoint"][1]))
        )
        values: dict[str, Any] = {}
        for channel, (type_, digest) in doc["channels"].items():
            values[channel] = self.serde.loads_typed((type_, self._blob(bytes.fromhex(digest))))
        checkpoint["channel_values"] = values
        metadata: CheckpointMetadata = self.serde.loads_typed(
            (doc["metadata"][0], _unb64(doc["metadata"][1]))
        )
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
            pending_writes=self._writes(name, checkpoint_id),
        )

    def _turn_payload(self, turn: TurnInfo) -> bytes:
        if turn.payload is not None:
            return turn.payload
        return self._blob(turn.payload_hash)

    # -- BaseCheckpointSaver ----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the thread namespace's
        newest), with its pending writes; None if there is none."""
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        checkpoint_ns: str = configurable.get("checkpoint_ns", "")
        name = _context_name(thread_id, checkpoint_ns)
        checkpoint_id = get_checkpoint_id(config)
        try:
            if checkpoint_id:
                turn = self.client.turn_by_key(name, f"cp/{checkpoint_id}")
                if turn is None:
                    return None
                return self._tuple(name, thread_id, checkpoint_ns, self._turn_payload(turn))
            page = self.client.turn_log(name, limit=1, payloads=True)
            while not page.turns:
                if page.next_cursor is None:
                    return None
                page = self.client.turn_log(
                    name, cursor=page.next_cursor, limit=1, payloads=True
                )
            latest = page.turns[0]
            return self._tuple(name, thread_id, checkpoint_ns, self._turn_payload(latest))
        except NotFound:
            return None

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
        return iter(self._list(config, filter, before, limit))

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,  # noqa: A002
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return []
        spaces: list[tuple[str, str, str]] = []  # (context name, thread, namespace)
        only_id: str | None = None
        if config is not None:
            configurable = config["configurable"]
            thread_id: str = configurable["thread_id"]
            ns: str | None = configurable.get("checkpoint_ns")
            only_id = get_checkpoint_id(config)
            if ns is not None:
                spaces.append((_context_name(thread_id, ns), thread_id, ns))
            else:
                spaces.extend((name, thread_id, n) for name, n in self._namespaces(thread_id))
        else:
            for info in self.client.iter_contexts(name_prefix=_NAME_PREFIX):
                if info.name is not None and _TAG_THREAD in info.tags:
                    spaces.append(
                        (info.name, info.tags[_TAG_THREAD][1:], info.tags.get(_TAG_NS, "=")[1:])
                    )
        before_id = get_checkpoint_id(before) if before else None
        labels: dict[str, str] = {}
        for key, value in (filter or {}).items():
            # Only strings on the server (1 == 1.0 == True in Python, not as labels); every
            # filter item is checked here on the metadata too.
            if key == "run_id" and isinstance(value, str) and value:
                labels["run_id"] = value
            elif key in ("source", "step") and isinstance(value, str):
                label = _label_value(value)
                if label is not None:
                    labels[f"m.{key}"] = label
        candidates: list[tuple[str, str, str, str, bytes]] = []
        for name, thread_id, ns in spaces:
            try:
                if only_id:
                    turn = self.client.turn_by_key(name, f"cp/{only_id}")
                    turns = [] if turn is None else [turn]
                else:
                    turns = list(self.client.iter_turn_log(name, labels or None, payloads=True))
            except NotFound:
                continue
            for turn in turns:
                if turn.key is None or not turn.key.startswith(b"cp/"):
                    continue
                checkpoint_id = turn.key[3:].decode("utf-8")
                if before_id and checkpoint_id >= before_id:
                    continue
                candidates.append(
                    (checkpoint_id, name, thread_id, ns, self._turn_payload(turn))
                )
        candidates.sort(key=lambda c: c[0], reverse=True)
        results: list[CheckpointTuple] = []
        for _, name, thread_id, ns, payload in candidates:
            found = self._tuple(name, thread_id, ns, payload)
            if filter and not all(found.metadata.get(k) == v for k, v in filter.items()):
                continue
            results.append(found)
            if limit is not None and len(results) >= limit:
                break
        return results

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores ``checkpoint`` as a turn after its parent's (``config``'s checkpoint id),
        each channel value as its own blob; returns the config naming it."""
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        checkpoint_ns: str = configurable.get("checkpoint_ns", "")
        parent_id: str | None = configurable.get("checkpoint_id")
        name = self._open(thread_id, checkpoint_ns)

        body = checkpoint.copy()
        values: dict[str, Any] = body.pop("channel_values")  # type: ignore[misc]
        versions = checkpoint.get("channel_versions", {})
        channels: dict[str, list[str]] = {}
        blobs: dict[str, bytes] = {}
        missing: list[str] = []
        for channel in versions:
            if channel in values:
                type_, data = self.serde.dumps_typed(values[channel])
                if type_ == "empty":
                    continue
                digest = blob_hash(data)
                channels[channel] = [type_, digest.hex()]
                blobs[f"b/{digest.hex()}"] = data
            elif channel not in new_versions:
                missing.append(channel)

        parent_turn: TurnInfo | None = None
        if parent_id:
            parent_turn = self.client.turn_by_key(name, f"cp/{parent_id}")
        if missing and parent_turn is not None:
            # Unchanged channels the checkpoint does not carry: the parent's blobs.
            parent_doc = json.loads(self._turn_payload(parent_turn))
            for channel in missing:
                if channel in parent_doc["channels"]:
                    channels[channel] = parent_doc["channels"][channel]

        self._kv_put(name, blobs, if_absent=True)
        meta_type, meta_bytes = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        cp_type, cp_bytes = self.serde.dumps_typed(body)
        doc = {
            "v": 1,
            "id": checkpoint["id"],
            "parent": parent_id,
            "checkpoint": [cp_type, _b64(cp_bytes)],
            "metadata": [meta_type, _b64(meta_bytes)],
            "channels": channels,
        }
        labels = {"thread_id": thread_id}
        full_metadata = get_checkpoint_metadata(config, metadata)
        run_id = full_metadata.get("run_id")
        if isinstance(run_id, str) and run_id and len(run_id) <= _LABEL_VALUE_MAX:
            labels["run_id"] = run_id
        for key in ("source", "step"):
            if key in full_metadata:
                label = _label_value(full_metadata[key])
                if label is not None:
                    labels[f"m.{key}"] = label
        self.client.append(
            name,
            json.dumps(doc, separators=(",", ":")).encode("utf-8"),
            parent=parent_turn.turn_id if parent_turn is not None else "root",
            key=f"cp/{checkpoint['id']}",
            labels=labels,
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _kv_put(self, name: str, entries: dict[str, bytes], *, if_absent: bool) -> None:
        items = list(entries.items())
        for start in range(0, len(items), _KV_PUT_MAX):
            self.client.kv_put(name, dict(items[start : start + _KV_PUT_MAX]), if_absent)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores a task's writes for ``config``'s checkpoint (key-value entries); a write
        stored before keeps its value, except the special channels' (errors, interrupts...)."""
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        checkpoint_ns: str = configurable.get("checkpoint_ns", "")
        checkpoint_id: str = configurable["checkpoint_id"]
        name = self._open(thread_id, checkpoint_ns)
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
            key = f"w/{checkpoint_id}/{task_id}/{write_idx}"
            (keep if write_idx >= 0 else replace)[key] = entry
        self._kv_put(name, keep, if_absent=True)
        self._kv_put(name, replace, if_absent=False)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every namespace's context of the thread (nothing if it has none)."""
        for name, _ in self._namespaces(thread_id):
            try:
                self.client.delete_context(name)
            except NotFound:
                pass

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every namespace of a thread to another thread: clones of its contexts
        (every checkpoint, blob and pending write shared, nothing copied)."""
        for name, ns in self._namespaces(source_thread_id):
            target = _context_name(target_thread_id, ns)
            try:
                self.client.delete_context(target)
            except NotFound:
                pass
            self.client.clone_context(
                name, target, tags=_tags(target_thread_id, ns)
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each namespace of the threads keeps only its newest checkpoint
        (and that checkpoint's pending writes); ``delete``: the threads are deleted."""
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise ValueError(f"unknown prune strategy: {strategy!r}")
        for thread_id in thread_ids:
            for name, _ in self._namespaces(thread_id):
                try:
                    info = self.client.context_info(name)
                    if info.is_empty:
                        continue
                    head = self.client.turn_log(name, limit=1)
                    latest = head.turns[0] if head.turns else None
                    self.client.prune_context(name, 1)
                    keep_prefix = b""
                    if latest is not None and latest.key is not None:
                        keep_prefix = b"w/" + latest.key[3:] + b"/"
                    stale = [
                        item.key
                        for item in self.client.iter_kv(name, prefix=b"w/")
                        if not (keep_prefix and item.key.startswith(keep_prefix))
                    ]
                    for start in range(0, len(stale), _KV_PUT_MAX):
                        self.client.kv_delete(name, stale[start : start + _KV_PUT_MAX])
                except NotFound:
                    continue

    # -- async: the same, in a worker thread ------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, in a worker thread."""
        found = await asyncio.to_thread(self._list, config, filter, before, limit)
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, in a worker thread."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))
