"""``ctxstore-mcp``: an MCP (Model Context Protocol) server that gives agents their context
in a ctxstore server.

Needs the ``mcp`` extra (``pip install 'ctxstore[mcp]'``, the ``mcp`` SDK 2.x). Run it as
``ctxstore-mcp [--addr HOST:PORT] [--token-file FILE]`` (stdio, what MCP hosts launch) or
``ctxstore-mcp --http 127.0.0.1:8765`` (streamable HTTP at ``/mcp``). The token may also
come from ``$CTXSTORE_TOKEN``.

Over HTTP (issue 44: it served a token-protected store to anyone who could reach it): every
request must carry ``Authorization: Bearer <token>`` when ``--http-token-file`` (or
``$CTXSTORE_MCP_HTTP_TOKEN``) gives one, compared in constant time; a listen address beyond
loopback is refused without one; the ``Host`` header must name the listen address (or an
``--allow-host``), against DNS rebinding. ``read_turns`` returns at most
``READ_TURNS_PAYLOAD_BYTES_MAX`` payload bytes a call, with where to continue.

Tools (each validates its arguments and answers ctxstore's typed errors as MCP tool errors,
``is_error`` with the error's name, e.g. ``NOT_FOUND: no context named 'x'``):

- ``list_contexts``: contexts by name prefix and tags, a page at a time;
- ``read_turns``: the last N turns of a context, the page before a turn, a depth range, or
  the window from its latest summary;
- ``append_turn``: a turn (text or base64 bytes) with an idempotency key and labels, after
  the head or any turn the context owns; the context is created when missing; it may carry
  vectors of a vector index (protocol version 7), which ``search_turns`` finds;
- ``fork``: a new context whose head is a given turn (O(1), nothing is copied);
- ``find_turns``: turns of every context carrying an indexed label (``run_id``,
  ``thread_id``, ``idx.*``);
- ``kv_get`` / ``kv_put``: a context's key-value entries (text or base64); a put may carry
  vectors of a vector index (protocol version 6), which ``search`` finds;
- ``search``: the entries of a context nearest a query vector (the agent embeds with the
  model that embedded the entries; the server stores vectors, it embeds nothing), exactly
  ``k`` whenever ``k`` pass the key prefix and the filter over the values;
- ``search_turns``: the turns nearest a query vector (protocol version 7) among the contexts
  named by a context, a name prefix and tags (none: every context), of a type and carrying
  labels, exactly ``k`` whenever ``k`` pass: an agent's recall over its own turns;
- ``branch_tree``: a context's turns as a text tree of its branches.

Resources: ``ctxstore://context/{name}`` (the name percent-encoded), the context's
description and newest turns as text.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hmac
import ipaddress
import math
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar
from urllib.parse import unquote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from pydantic import Field

from . import PROTOCOL_VERSION
from ._protocol import (
    VECTOR_DIMS_MAX,
    VECTOR_INDEX_NAME_BYTES_MAX,
    VECTOR_K_MAX,
    VECTORS_PER_ENTRY_MAX,
    VECTORS_PER_TURN_MAX,
)
from ._wire import CONTEXT_NAME_BYTES_MAX as NAME_BYTES_MAX
from ._wire import LABELS_PER_TURN_MAX as LABELS_MAX
from ._wire import TURN_KEY_BYTES_MAX
from .aio import AsyncClient
from .errors import CtxstoreError, NotFound, ServerError
from .types import ContextInfo, ParentLike, Turn, TurnInfo, TurnSpec

__all__ = ["build_server", "main"]

LABEL_KEY_BYTES_MAX = 64
LABEL_BYTES_MAX = 1024  # keys and values together
KV_KEY_BYTES_MAX = 256
TAGS_MAX = 32
TAG_VALUE_BYTES_MAX = 1024
PAGE_MAX = 1000
READ_TURNS_PAYLOAD_BYTES_MAX = 1 << 20
"""Payload bytes one ``read_turns`` answer carries at most (before base64): a page of 1,000
turns of 64 KiB would otherwise be 85 MB of JSON for a model's context. The turns past it are
left out (``truncated``), with ``next_before`` or ``next_from_depth`` to read on."""
TREE_TURNS_MAX = 2000
PREVIEW_CHARS_MAX = 4000

ContextArg = Annotated[
    str | int,
    Field(description="A context: its name (1-256 bytes of UTF-8) or its numeric ContextID"),
]

T = TypeVar("T")

_ERROR_NAMES = {
    1: "BAD_FRAME",
    2: "UNKNOWN_MESSAGE",
    3: "TOO_LARGE",
    4: "UNAUTHORIZED",
    5: "NOT_FOUND",
    6: "CONFLICT",
    7: "READ_ONLY",
    8: "NO_SPACE",
    9: "OVERLOADED",
    10: "INTERNAL",
    11: "INVALID_ARGUMENT",
    12: "UNSUPPORTED_VERSION",
    13: "SHUTTING_DOWN",
    14: "CORRUPT",
    15: "ALREADY_EXISTS",
    16: "HASH_MISMATCH",
    17: "STREAM_ENDED",
    18: "STREAM_NOT_OWNED",
    19: "NOT_PRIMARY",
    20: "UNCONFIRMED",
    21: "QUOTA_EXCEEDED",
}


def _error_text(error: CtxstoreError) -> str:
    if isinstance(error, ServerError):
        name = _ERROR_NAMES.get(error.code, f"ERROR_{error.code}")
        return f"{name}: {error.message}"
    return f"{type(error).__name__}: {error}"


# -- argument checks (each refusal names the argument and its limit) ----------------------------


def _context(value: str | int) -> str | int:
    if isinstance(value, bool):
        raise ToolError("context: a name or a ContextID, not a boolean")
    if isinstance(value, int):
        if value <= 0:
            raise ToolError(f"context: a ContextID is a positive integer, got {value}")
        return value
    size = len(value.encode("utf-8"))
    if not 1 <= size <= NAME_BYTES_MAX:
        raise ToolError(f"context: a name is 1-{NAME_BYTES_MAX} bytes of UTF-8, got {size}")
    return value


def _limit(value: int, what: str = "limit", high: int = PAGE_MAX) -> int:
    if not 1 <= value <= high:
        raise ToolError(f"{what}: 1-{high}, got {value}")
    return value


def _turn_id(value: int, what: str) -> int:
    if value <= 0:
        raise ToolError(f"{what}: a TurnID is a positive integer, got {value}")
    return value


def _index_name(name: str) -> None:
    if not 1 <= len(name.encode("utf-8")) <= VECTOR_INDEX_NAME_BYTES_MAX:
        raise ToolError(f"index: 1-{VECTOR_INDEX_NAME_BYTES_MAX} bytes")


def _vectors(vectors: Sequence[Sequence[float]], count_max: int) -> None:
    """Vectors a tool was given: at most ``count_max``, one dimension, finite numbers."""
    if len(vectors) > count_max:
        raise ToolError(f"vectors: at most {count_max}")
    dims = {len(vector) for vector in vectors}
    if len(dims) > 1 or any(not 1 <= d <= VECTOR_DIMS_MAX for d in dims):
        raise ToolError(f"vectors: one dimension for all, 1-{VECTOR_DIMS_MAX}")
    if not all(math.isfinite(x) for vector in vectors for x in vector):
        raise ToolError("vectors: finite numbers only (no NaN, no infinity)")


def _payload(text: str | None, data_base64: str | None, what: str) -> bytes:
    if (text is None) == (data_base64 is None):
        raise ToolError(f"{what}: give exactly one of text and data_base64")
    if text is not None:
        return text.encode("utf-8")
    assert data_base64 is not None
    try:
        return base64.b64decode(data_base64, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("data_base64: not valid base64") from None


def _labels(labels: Mapping[str, str] | None) -> dict[str, str] | None:
    if not labels:
        return None
    if len(labels) > LABELS_MAX:
        raise ToolError(f"labels: at most {LABELS_MAX}, got {len(labels)}")
    total = 0
    for key, value in labels.items():
        key_size = len(key.encode("utf-8"))
        if not 1 <= key_size <= LABEL_KEY_BYTES_MAX:
            raise ToolError(
                f"labels: a key is 1-{LABEL_KEY_BYTES_MAX} bytes, {key!r} is {key_size}"
            )
        total += key_size + len(value.encode("utf-8"))
    if total > LABEL_BYTES_MAX:
        raise ToolError(
            f"labels: keys and values hold at most {LABEL_BYTES_MAX} bytes, got {total}"
        )
    return dict(labels)


def _tags(tags: Mapping[str, str] | None) -> dict[str, str] | None:
    if not tags:
        return None
    if len(tags) > TAGS_MAX:
        raise ToolError(f"tags: at most {TAGS_MAX}, got {len(tags)}")
    for key, value in tags.items():
        if not 1 <= len(key.encode("utf-8")) <= 64:
            raise ToolError(f"tags: a key is 1-64 bytes, got {key!r}")
        if not 1 <= len(value.encode("utf-8")) <= TAG_VALUE_BYTES_MAX:
            raise ToolError(f"tags: a value is 1-{TAG_VALUE_BYTES_MAX} bytes, {key!r}'s is not")
    return dict(tags)


def _kv_key(key: str) -> bytes:
    raw = key.encode("utf-8")
    if not 1 <= len(raw) <= KV_KEY_BYTES_MAX:
        raise ToolError(f"key: 1-{KV_KEY_BYTES_MAX} bytes, got {len(raw)}")
    return raw


# -- rendering ----------------------------------------------------------------------------------


def _bytes_out(data: bytes | None) -> dict[str, Any]:
    """A payload as text when it is UTF-8, else as base64."""
    if data is None:
        return {}
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"data_base64": base64.b64encode(data).decode("ascii")}


def _turn_out(turn: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {
        "turn_id": turn.turn_id,
        "parent_turn_id": turn.parent_turn_id,
        "context_id": turn.context_id,
        "depth": turn.depth,
        "type_tag": turn.type_tag,
        "payload_len": turn.payload_len,
        "payload_hash": turn.payload_hash.hex(),
        "created_at_unix_ms": turn.created_at_unix_ms,
    }
    if turn.summary:
        out["summary"] = True
    if isinstance(turn, TurnInfo):
        if turn.key is not None:
            out["key"] = turn.key.decode("utf-8", "replace")
        if turn.labels:
            out["labels"] = dict(turn.labels)
        if turn.links:
            out["links"] = list(turn.links)
    out.update(_bytes_out(turn.payload))
    return out


def _within_budget(turns: Sequence[Turn], forward: bool) -> list[Turn]:
    """The oldest (``forward``) or newest turns whose payloads fit in
    ``READ_TURNS_PAYLOAD_BYTES_MAX``, in their order."""
    total = 0
    ordered = list(turns) if forward else list(reversed(turns))
    kept: list[Turn] = []
    for turn in ordered:
        size = len(turn.payload) if turn.payload is not None else 0
        if total + size > READ_TURNS_PAYLOAD_BYTES_MAX:
            break
        total += size
        kept.append(turn)
    return kept if forward else list(reversed(kept))


def _context_out(info: ContextInfo) -> dict[str, Any]:
    return {
        "context_id": info.context_id,
        "name": info.name,
        "tags": dict(info.tags),
        "head_turn_id": info.head_turn_id,
        "head_depth": info.head_depth,
        "created_at_unix_ms": info.created_at_unix_ms,
        "updated_at_unix_ms": info.updated_at_unix_ms,
    }


def _preview(turn: Turn, chars: int = 60) -> str:
    if turn.payload is None:
        return f"{turn.payload_len} bytes"
    try:
        text = turn.payload.decode("utf-8")
    except UnicodeDecodeError:
        return f"{turn.payload_len} bytes (binary)"
    text = " ".join(text.split())
    return repr(text if len(text) <= chars else text[: chars - 1] + "…")


def render_tree(info: ContextInfo, turns: list[TurnInfo], truncated: bool) -> str:
    """The turns a context owns as a text tree of its branches (by parent pointer), the head
    marked; turns whose parent is not among them (inherited, or older than the page) are
    roots of the drawing."""
    by_id = {t.turn_id: t for t in turns}
    children: dict[int, list[TurnInfo]] = {}
    roots: list[TurnInfo] = []
    for turn in sorted(turns, key=lambda t: t.turn_id):
        if turn.parent_turn_id in by_id:
            children.setdefault(turn.parent_turn_id, []).append(turn)
        else:
            roots.append(turn)
    title = info.name if info.name is not None else f"#{info.context_id}"
    lines = [
        f"context {title} (ContextID {info.context_id}): head {info.head_turn_id} at depth "
        f"{info.head_depth}, {len(turns)} turns"
    ]

    def line(turn: TurnInfo) -> str:
        marks = []
        if turn.turn_id == info.head_turn_id:
            marks.append("HEAD")
        if turn.summary:
            marks.append("summary")
        if turn.key is not None:
            marks.append(f"key={turn.key.decode('utf-8', 'replace')}")
        if turn.context_id != info.context_id:
            marks.append(f"from context {turn.context_id}")
        mark = f" [{', '.join(marks)}]" if marks else ""
        return f"turn {turn.turn_id} (depth {turn.depth}){mark}: {_preview(turn)}"

    # Iterative (a chain of 2,000 turns would pass Python's recursion limit).
    stack: list[tuple[TurnInfo, str, bool, bool]] = [
        (root, "", i == len(roots) - 1, True) for i, root in reversed(list(enumerate(roots)))
    ]
    while stack:
        turn, prefix, last, top = stack.pop()
        branch = "" if top else ("└─ " if last else "├─ ")
        lines.append(prefix + branch + line(turn))
        kids = children.get(turn.turn_id, [])
        # A single child continues the same column: chains read as lists, not staircases.
        if len(kids) == 1:
            stack.append((kids[0], prefix, last, top))
            continue
        inner = prefix + ("" if top else ("   " if last else "│  "))
        for i, kid in reversed(list(enumerate(kids))):
            stack.append((kid, inner, i == len(kids) - 1, False))
    if truncated:
        lines.append(f"(only the newest {len(turns)} turns shown)")
    return "\n".join(lines)


# -- the server ---------------------------------------------------------------------------------


def build_server(
    addr: str = "127.0.0.1:7411",
    token: str | None = None,
    *,
    client: AsyncClient | None = None,
    name: str = "ctxstore",
) -> MCPServer:
    """The MCP server (``mcp.server.mcpserver.MCPServer``) on a ctxstore server at ``addr``
    (or on ``client``, an :class:`~ctxstore.AsyncClient` the caller owns)."""
    state: dict[str, AsyncClient] = {}

    def ctx() -> AsyncClient:
        if client is not None:
            return client
        if "client" not in state:
            state["client"] = AsyncClient(addr, token=token)
        return state["client"]

    server = MCPServer(
        name,
        instructions=(
            "ctxstore keeps agents' context: immutable turns in chains, contexts as named "
            "heads, forks that copy nothing, key-value entries per context. Read a context "
            "with read_turns, add to it with append_turn, branch with fork."
        ),
        version=f"protocol {PROTOCOL_VERSION}",
    )

    async def guarded(work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await work()
        except CtxstoreError as error:
            raise ToolError(_error_text(error)) from None
        except ValueError as refused:  # the client's own checks: nothing was sent
            raise ToolError(f"INVALID_ARGUMENT: {refused}") from None

    @server.tool(
        description="List contexts by name prefix and tags (all must match), a page at a time; "
        "pass next_cursor back as cursor for the next page."
    )
    async def list_contexts(
        name_prefix: Annotated[str | None, Field(description="names starting with this")] = None,
        tags: Annotated[dict[str, str] | None, Field(description="tag equalities")] = None,
        limit: Annotated[int, Field(description="1-1000")] = 100,
        cursor: Annotated[str | int | None, Field(description="from a previous page")] = None,
    ) -> dict[str, Any]:
        _limit(limit)
        if name_prefix is not None and len(name_prefix.encode("utf-8")) > NAME_BYTES_MAX:
            raise ToolError(f"name_prefix: at most {NAME_BYTES_MAX} bytes")
        wanted_tags = _tags(tags)
        page = await guarded(
            lambda: ctx().list_contexts(
                wanted_tags, name_prefix or None, cursor=cursor, limit=limit
            )
        )
        return {
            "contexts": [_context_out(c) for c in page.contexts],
            "next_cursor": page.next_cursor,
        }

    @server.tool(
        description="Read turns of a context, oldest first: the last `limit` turns (default), "
        "the `limit` turns before turn `before`, `limit` turns from depth `from_depth`, or "
        "with window=true the chain from its latest summary turn to the head. Payloads are "
        "returned as text when they are UTF-8, else as base64."
    )
    async def read_turns(
        context: ContextArg,
        limit: Annotated[int, Field(description="1-1000")] = 20,
        before: Annotated[int | None, Field(description="a TurnID: the turns older")] = None,
        from_depth: Annotated[int | None, Field(description="the depth to start at")] = None,
        window: Annotated[bool, Field(description="from the latest summary turn")] = False,
        payloads: bool = True,
    ) -> dict[str, Any]:
        target = _context(context)
        _limit(limit)
        given = sum(x is not None for x in (before, from_depth)) + int(window)
        if given > 1:
            raise ToolError("give at most one of before, from_depth and window")
        if before is not None:
            _turn_id(before, "before")
        if from_depth is not None and from_depth < 0:
            raise ToolError(f"from_depth: 0 or more, got {from_depth}")
        if window:
            page = await guarded(lambda: ctx().window(target, limit, payloads=payloads))
        else:
            page = await guarded(
                lambda: ctx().read_page(
                    target, limit, before=before, from_depth=from_depth, payloads=payloads
                )
            )
        turns: list[Turn] = list(page.turns)
        out: dict[str, Any] = {"next_before": page.next_before or None}
        # Within the byte budget: a range from a depth keeps its oldest turns, every other
        # read its newest (the ones next to the head), and says where to read on. A turn
        # alone over the budget comes without its payload (`payload_omitted`).
        forward = from_depth is not None
        kept = _within_budget(turns, forward)
        shown = [_turn_out(t) for t in kept]
        if not kept and turns:
            big = turns[0] if forward else turns[-1]
            kept = [big]
            alone = _turn_out(big)
            alone.pop("text", None)
            alone.pop("data_base64", None)
            alone["payload_omitted"] = (
                f"{big.payload_len} bytes, over the {READ_TURNS_PAYLOAD_BYTES_MAX} "
                "bytes one read_turns returns"
            )
            shown = [alone]
        if len(kept) < len(turns):
            out["truncated"] = True
            if forward:
                out["next_from_depth"] = turns[len(kept)].depth
            else:
                out["next_before"] = kept[0].turn_id
        out["turns"] = shown
        out["tip_depth"] = page.tip_depth
        return out

    @server.tool(
        description="Append a turn to a context (created when missing, unless create=false): "
        "its payload as `text` or `data_base64`, an optional idempotency `key` (an append "
        "whose key the context has answers that turn, existing=true, and writes nothing), "
        "`labels` to find it by, and `parent` (a TurnID the context owns, or 'root') to "
        "branch from an older turn. `expected_head` makes it a compare-and-set. With `index` "
        "and `vectors` (protocol version 7; the agent embeds the turn, the server embeds "
        "nothing) the turn carries those vectors, which search_turns finds."
    )
    async def append_turn(
        context: ContextArg,
        text: str | None = None,
        data_base64: str | None = None,
        key: Annotated[str | None, Field(description="1-64 bytes, unique in the context")] = None,
        labels: Annotated[dict[str, str] | None, Field(description="<= 16")] = None,
        parent: Annotated[int | str | None, Field(description="a TurnID or 'root'")] = None,
        expected_head: Annotated[int | None, Field(description="0: must be empty")] = None,
        type_tag: Annotated[int, Field(description="the caller's tag, 0-2^63")] = 0,
        create: bool = True,
        index: Annotated[
            str | None,
            Field(
                description="A vector index (protocol version 7): the turn is appended with "
                "`vectors`, which search_turns finds"
            ),
        ] = None,
        vectors: Annotated[
            list[list[float]] | None,
            Field(
                description=f"The turn's vectors (<= {VECTORS_PER_TURN_MAX}, each of the "
                "index's dimension), with `index`"
            ),
        ] = None,
    ) -> dict[str, Any]:
        target = _context(context)
        payload = _payload(text, data_base64, "payload")
        if vectors is not None and index is None:
            raise ToolError("vectors need the index they belong to: give `index`")
        if index is not None:
            _index_name(index)
            _vectors(vectors or [], VECTORS_PER_TURN_MAX)
        if key is not None and not 1 <= len(key.encode("utf-8")) <= TURN_KEY_BYTES_MAX:
            raise ToolError(f"key: 1-{TURN_KEY_BYTES_MAX} bytes")
        turn_labels = _labels(labels)
        where: ParentLike = None
        if parent == "root":
            where = "root"
        elif isinstance(parent, int) and not isinstance(parent, bool):
            where = _turn_id(parent, "parent")
        elif parent is not None:
            raise ToolError("parent: a TurnID or 'root'")
        if expected_head is not None and expected_head < 0:
            raise ToolError("expected_head: a TurnID, or 0 for an empty context")
        if not 0 <= type_tag < 2**63:
            raise ToolError("type_tag: 0 to 2^63 - 1")

        async def append() -> dict[str, Any]:
            client = ctx()
            if create and isinstance(target, str):
                await client.open_context(target, get_or_create=True)
            if index is None:
                appended = await client.append(
                    target,
                    payload,
                    type_tag=type_tag,
                    expected_head=expected_head,
                    parent=where,
                    key=key,
                    labels=turn_labels,
                )
            else:
                spec = TurnSpec(
                    payload, parent=where, key=key, labels=turn_labels, type_tag=type_tag
                )
                (appended,) = await client.append_turns_vectors(
                    target, [(spec, vectors or [])], index=index, expected_head=expected_head
                )
            out = _turn_out(appended.turn)
            out.update(deduped=appended.deduped, existing=appended.existing)
            return out

        return await guarded(append)

    @server.tool(
        description="Fork: a new context whose head is `turn_id` (any turn of any context); "
        "it shares every turn before it and copies nothing. Give it a `name` to find it by."
    )
    async def fork(
        turn_id: int,
        name: Annotated[str | None, Field(description="1-256 bytes, unique")] = None,
        tags: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        _turn_id(turn_id, "turn_id")
        if name is not None:
            _context(name)
        wanted_tags = _tags(tags)
        opened = await guarded(lambda: ctx().open_context(name, wanted_tags, base_turn_id=turn_id))
        return _context_out(opened.info)

    @server.tool(
        description="Turns of every context that carry the label key=value (key: run_id, "
        "thread_id, or one starting 'idx.'), newest first; pass next_before back as before."
    )
    async def find_turns(
        key: str,
        value: str,
        limit: Annotated[int, Field(description="1-1000")] = 100,
        before: int | None = None,
    ) -> dict[str, Any]:
        _limit(limit)
        if not 1 <= len(key.encode("utf-8")) <= LABEL_KEY_BYTES_MAX:
            raise ToolError(f"key: 1-{LABEL_KEY_BYTES_MAX} bytes")
        if before is not None:
            _turn_id(before, "before")
        page = await guarded(lambda: ctx().find_turns(key, value, before=before, limit=limit))
        return {"turns": [_turn_out(t) for t in page.turns], "next_before": page.next_before}

    @server.tool(description="The value of a context's key-value entry (null when absent).")
    async def kv_get(context: ContextArg, key: str) -> dict[str, Any]:
        target = _context(context)
        raw_key = _kv_key(key)
        value = await guarded(lambda: ctx().kv_get(target, raw_key))
        return {"key": key, "found": value is not None, **_bytes_out(value)}

    @server.tool(
        description="Set a context's key-value entry (the context is created when missing, "
        "unless create=false): the value as `text` or `data_base64`; with if_absent=true an "
        "existing value is kept."
    )
    async def kv_put(
        context: ContextArg,
        key: str,
        text: str | None = None,
        data_base64: str | None = None,
        if_absent: bool = False,
        create: bool = True,
        index: Annotated[
            str | None,
            Field(
                description="A vector index (protocol version 6): the entry is put with `vectors`"
            ),
        ] = None,
        vectors: Annotated[
            list[list[float]] | None,
            Field(description="The entry's vectors (each of the index's dimension), with `index`"),
        ] = None,
    ) -> dict[str, Any]:
        target = _context(context)
        raw_key = _kv_key(key)
        value = _payload(text, data_base64, "value")
        if vectors is not None and index is None:
            raise ToolError("vectors need the index they belong to: give `index`")
        if index is not None:
            _index_name(index)
            _vectors(vectors or [], VECTORS_PER_ENTRY_MAX)

        async def put() -> dict[str, Any]:
            client = ctx()
            if create and isinstance(target, str):
                await client.open_context(target, get_or_create=True)
            if index is None:
                await client.kv_put(target, {raw_key: value}, if_absent=if_absent)
            else:
                entries = {raw_key: (value, vectors or [])}
                await client.kv_put_vectors(target, entries, index, if_absent=if_absent)
            return {"key": key, "stored": True, "value_len": len(value)}

        return await guarded(put)

    @server.tool(
        description="The key-value entries of a context nearest a query vector, best first "
        "(protocol version 6). Embed the query with the model that embedded the entries: the "
        "server stores vectors and embeds nothing. Exactly `k` hits whenever `k` entries pass "
        "`prefix` (keys starting with it) and `filter` (a JSON object over the values, "
        'LangGraph\'s: {"kind": "note", "score": {"$gte": 3}}; $eq $ne $gt $gte $lt '
        "$lte). Each hit: key, score (higher is nearer: cosine similarity, inner product or "
        "minus the L2 distance), and the value (text, or base64)."
    )
    async def search(
        context: ContextArg,
        index: Annotated[str, Field(description="The vector index (1-64 bytes)")],
        vector: Annotated[list[float], Field(description="The query's embedding")],
        k: Annotated[int, Field(description="Hits wanted, 1-1000")] = 10,
        prefix: Annotated[str | None, Field(description="Only keys starting with it")] = None,
        filter: Annotated[
            dict[str, Any] | None, Field(description="Conditions on the values' fields")
        ] = None,
    ) -> dict[str, Any]:
        target = _context(context)
        _index_name(index)
        _vectors([vector], 1)
        if not 1 <= k <= VECTOR_K_MAX:
            raise ToolError(f"k: 1-{VECTOR_K_MAX}")
        raw_prefix = b"" if prefix is None else prefix.encode("utf-8")
        if len(raw_prefix) > KV_KEY_BYTES_MAX:
            raise ToolError(f"prefix: at most {KV_KEY_BYTES_MAX} bytes")

        async def found() -> dict[str, Any]:
            client = ctx()
            hits = await client.vector_search(
                target, index, vector, k, prefix=raw_prefix, filter=filter
            )
            values = [await client.get_blob(hit.value_hash) for hit in hits]
            return {
                "hits": [
                    {
                        "key": hit.key.decode("utf-8", errors="replace"),
                        "score": hit.score,
                        **_bytes_out(value),
                    }
                    for hit, value in zip(hits, values, strict=True)
                ],
                "candidates": hits.candidates,
            }

        return await guarded(found)

    @server.tool(
        description="Recall: the turns nearest a query vector, best first (protocol version "
        "7), among the turns appended with vectors of `index` (append_turn's `index` and "
        "`vectors`). Embed the query with the model that embedded the turns: the server "
        "stores vectors and embeds nothing. The contexts searched match every one of "
        "`context`, `name_prefix` (names starting with it) and `tags` (contexts carrying "
        "each); none of the three: every context. Only turns carrying every one of `labels` "
        "and, when given, of `type_tag`. Exactly `k` hits whenever `k` turns pass. Each hit: "
        "the turn (turn_id, context_id, depth, type_tag, ...; not its labels), its score "
        "(higher is nearer: cosine similarity, inner product or minus the L2 distance) and "
        "its payload (text, or base64) while the hits' payloads fit in 1 MiB (then "
        "payload_omitted)."
    )
    async def search_turns(
        index: Annotated[str, Field(description="The vector index (1-64 bytes)")],
        vector: Annotated[list[float], Field(description="The query's embedding")],
        k: Annotated[int, Field(description="Hits wanted, 1-1000")] = 10,
        context: Annotated[
            str | int | None, Field(description="Only this context's turns (name or ContextID)")
        ] = None,
        name_prefix: Annotated[
            str | None, Field(description="Only contexts whose name starts with it")
        ] = None,
        tags: Annotated[
            dict[str, str] | None, Field(description="Only contexts carrying every tag")
        ] = None,
        labels: Annotated[
            dict[str, str] | None, Field(description="Only turns carrying every label")
        ] = None,
        type_tag: Annotated[int | None, Field(description="Only turns of this type tag")] = None,
    ) -> dict[str, Any]:
        target = None if context is None else _context(context)
        _index_name(index)
        _vectors([vector], 1)
        if not 1 <= k <= VECTOR_K_MAX:
            raise ToolError(f"k: 1-{VECTOR_K_MAX}")
        if name_prefix is not None and len(name_prefix.encode("utf-8")) > NAME_BYTES_MAX:
            raise ToolError(f"name_prefix: at most {NAME_BYTES_MAX} bytes")
        wanted_tags = _tags(tags)
        wanted_labels = _labels(labels)
        if type_tag is not None and not 0 <= type_tag < 2**63:
            raise ToolError("type_tag: 0 to 2^63 - 1")

        async def found() -> dict[str, Any]:
            client = ctx()
            hits = await client.vector_search_turns(
                index,
                vector,
                k,
                context=target,
                name_prefix=name_prefix or None,
                tags=wanted_tags,
                labels=wanted_labels,
                type_tag=type_tag,
            )
            # The payloads of the best hits that fit in the budget, fetched at once (pipelined).
            kept: list[Turn] = []
            total = 0
            for hit in hits:
                total += hit.turn.payload_len
                if total > READ_TURNS_PAYLOAD_BYTES_MAX:
                    break
                kept.append(hit.turn)

            async def payload_of(turn: Turn) -> bytes:
                return await client.get_blob(turn.payload_hash) if turn.payload_len else b""

            payloads = await asyncio.gather(*(payload_of(turn) for turn in kept))
            out = []
            for number, hit in enumerate(hits):
                shown = _turn_out(hit.turn)
                shown["score"] = hit.score
                if number < len(kept):
                    shown.update(_bytes_out(payloads[number]))
                else:
                    shown["payload_omitted"] = (
                        f"{hit.turn.payload_len} bytes, past the {READ_TURNS_PAYLOAD_BYTES_MAX} "
                        "bytes one search_turns returns: read it with read_turns"
                    )
                out.append(shown)
            return {"hits": out, "candidates": hits.candidates}

        return await guarded(found)

    @server.tool(
        description="A context's turns as a text tree of its branches (every branch it owns, "
        "newest `limit` turns), the head marked."
    )
    async def branch_tree(
        context: ContextArg,
        limit: Annotated[int, Field(description=f"1-{TREE_TURNS_MAX}")] = 200,
    ) -> str:
        target = _context(context)
        _limit(limit, high=TREE_TURNS_MAX)

        async def tree() -> str:
            client = ctx()
            info = await client.context_info(target)
            turns: list[TurnInfo] = []
            truncated = False
            pages = client.iter_turn_log(target, page_size=min(limit, PAGE_MAX), payloads=True)
            async for turn in pages:  # newest first, every branch
                if len(turns) == limit:
                    truncated = True
                    break
                turns.append(turn)
            return render_tree(info, turns, truncated)

        return await guarded(tree)

    @server.resource(
        "ctxstore://context/{name}",
        name="context",
        description="A context (its name percent-encoded): description and newest 20 turns",
        mime_type="text/plain",
    )
    async def context_resource(name: str) -> str:
        decoded = unquote(name)
        try:
            _context(decoded)
        except ToolError as refused:
            raise ResourceError(str(refused)) from None
        try:
            client = ctx()
            info = await client.context_info(decoded)
            page = await client.read_page(decoded, 20, payloads=True)
        except NotFound as missing:
            raise ResourceNotFoundError(_error_text(missing)) from None
        except CtxstoreError as error:
            raise ResourceError(_error_text(error)) from None
        lines = [
            f"context {info.name} (ContextID {info.context_id})",
            f"head: turn {info.head_turn_id} at depth {info.head_depth}",
            f"tags: {dict(info.tags)}",
            f"updated_at_unix_ms: {info.updated_at_unix_ms}",
            "",
        ]
        for turn in page.turns:
            body = _bytes_out(turn.payload)
            text = body.get("text", f"<{turn.payload_len} bytes, base64 {body.get('data_base64')}>")
            if len(text) > PREVIEW_CHARS_MAX:
                text = text[:PREVIEW_CHARS_MAX] + f"… ({turn.payload_len} bytes)"
            lines.append(f"[turn {turn.turn_id}, depth {turn.depth}] {text}")
        return "\n".join(lines)

    return server


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {value!r}")
    return host.strip("[]"), int(port)


class BearerAuth:
    """ASGI middleware: every HTTP request carries ``Authorization: Bearer <token>`` or is
    answered 401 before it reaches MCP (compared in constant time). Lifespan events pass."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = b""
            for name, value in scope.get("headers", []):
                if name.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="ctxstore-mcp"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_token(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as error:
        raise SystemExit(f"ctxstore-mcp: reading {what} {path}: {error}") from None
    if not token:
        raise SystemExit(f"ctxstore-mcp: {what} {path} is empty")
    return token


def http_app(
    server: MCPServer, host: str, port: int, token: str | None, allow_hosts: list[str]
) -> Any:
    """The streamable HTTP app of ``server`` as ``--http HOST:PORT`` serves it: the Host
    header checked against the listen address and ``allow_hosts`` (DNS rebinding), and every
    request authenticated with ``token`` when one is given."""
    from mcp.server.transport_security import TransportSecuritySettings

    shown = f"[{host}]" if ":" in host else host
    allowed = [f"{shown}:{port}", *allow_hosts]
    if _is_loopback(host):
        allowed += [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
    origins = [f"{scheme}://{name}" for name in allowed for scheme in ("http", "https")]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed, allowed_origins=origins
    )
    app = server.streamable_http_app(transport_security=security, host=host)
    return BearerAuth(app, token) if token is not None else app


def main(argv: list[str] | None = None) -> int:
    """The ``ctxstore-mcp`` console script."""
    parser = argparse.ArgumentParser(
        prog="ctxstore-mcp",
        description="An MCP server (stdio, or streamable HTTP with --http) on a ctxstore server.",
    )
    parser.add_argument("--addr", default=os.environ.get("CTXSTORE_ADDR", "127.0.0.1:7411"))
    parser.add_argument("--token-file", help="a file holding the ctxstore token")
    parser.add_argument(
        "--http",
        type=_host_port,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    parser.add_argument(
        "--http-token-file",
        metavar="FILE",
        help="HTTP clients must send 'Authorization: Bearer <the token in FILE>' (also "
        "$CTXSTORE_MCP_HTTP_TOKEN); required for a listen address beyond loopback",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="another Host header HTTP clients may send (a name the bridge is reached by); "
        "repeatable. Others are refused (DNS-rebinding protection)",
    )
    args = parser.parse_args(argv)
    token = os.environ.get("CTXSTORE_TOKEN")
    if args.token_file:
        token = _read_token(args.token_file, "--token-file")
    server = build_server(args.addr, token)
    if args.http is None:
        server.run("stdio")
        return 0
    host, port = args.http
    http_token = os.environ.get("CTXSTORE_MCP_HTTP_TOKEN") or None
    if args.http_token_file:
        http_token = _read_token(args.http_token_file, "--http-token-file")
    if http_token is None and not _is_loopback(host):
        print(
            f"ctxstore-mcp: refusing to serve HTTP on {host}, beyond loopback, without "
            "--http-token-file: anyone who reaches it would read and write the store",
            file=sys.stderr,
        )
        return 2
    import anyio
    import uvicorn

    app = http_app(server, host, port, http_token, args.allow_host)
    auth = "bearer token required" if http_token else "no token (loopback only)"
    print(f"ctxstore-mcp: streamable HTTP at http://{host}:{port}/mcp ({auth})", file=sys.stderr)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
