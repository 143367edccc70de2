"""An OpenAI Agents SDK session on ctxstore: :class:`CtxstoreSession`.

Needs the ``agents`` extra (``pip install 'ctxstore[agents]'``, the ``openai-agents``
package). It implements the SDK's ``Session`` protocol (``get_items``, ``add_items``,
``pop_item``, ``clear_session``) on an :class:`~ctxstore.AsyncClient`:

- a session is a named context (``agents:`` and the session id; tagged ``agents.session``),
  created at its first write (get-or-create);
- each item is one turn (its JSON, ``type_tag`` 1); ``add_items`` appends a call's items in
  one APPEND_TURNS batch (64 a batch: a longer call is several), after the head;
- ``get_items(limit)`` reads the chain back from the head: the newest ``limit`` items in
  chronological order (every item when ``limit`` is None);
- ``pop_item`` takes the newest item off with a compare-and-set on the head: the protocol has
  no request that moves a head back, so the pop appends a *pop marker* turn (``type_tag`` 2)
  hanging from the popped item's parent, with ``expected_head`` = the head it read; a
  concurrent pop or add makes it CONFLICT and it reads again. The chain from the head then
  ends at the parent (the marker is not an item); the popped item stays on its side branch of
  the context (nothing is rewritten). The next ``add_items`` hangs from the marker's parent;
- ``clear_session`` deletes the context (the next write creates a new one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .aio import AsyncClient
from .errors import Conflict, NotFound
from .types import Idempotency, ParentLike, TurnInfo, TurnSpec, VerifyPayloads, blob_hash

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
else:  # the SDK is needed to use the session, not to import this module
    TResponseInputItem = Any
    SessionSettings = Any

__all__ = ["CtxstoreSession", "ITEM_TYPE", "POP_TYPE"]

ITEM_TYPE = 1
"""``type_tag`` of a turn holding one session item (its JSON)."""
POP_TYPE = 2
"""``type_tag`` of a pop marker: the item before it on the chain was popped."""

_NAME_PREFIX = "agents:"
_TAG_SESSION = "agents.session"
_BATCH = 64  # turns per APPEND_TURNS (the server's limit)
_POP_RETRIES = 1000


def session_context_name(session_id: str) -> str:
    """The context of a session (a name over 256 bytes is replaced by its hash)."""
    name = _NAME_PREFIX + session_id
    if len(name.encode("utf-8")) > 256:
        name = f"{_NAME_PREFIX}#{blob_hash(session_id.encode('utf-8')).hex()}"
    return name


class CtxstoreSession:
    """A session of the OpenAI Agents SDK stored in a ctxstore server.

    ``CtxstoreSession(session_id, addr="HOST:PORT", token=None)`` makes its own
    :class:`~ctxstore.AsyncClient` (one connection, opened at the first call; :meth:`close`
    closes it; ``addr`` and ``token`` default to ``$CTXSTORE_ADDR`` and ``$CTXSTORE_TOKEN``;
    ``timeout``, ``verify_payloads``, ``failover_timeout`` and ``idempotency`` are its
    options, see :class:`~ctxstore.Client`). ``addr`` may name a primary and its standbys
    (``"A,B,C"`` or a list): the client follows the primary across a failover, and with
    ``idempotency="auto"`` every item and pop marker carries a key, so that one in flight at
    the failover lands exactly once. Many sessions may share one client:
    ``CtxstoreSession(session_id, client=shared)``. ``session_settings`` (the SDK's
    ``SessionSettings``): its ``limit`` is the default of :meth:`get_items`.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        addr: str | Sequence[str] | None = None,
        token: str | None = None,
        *,
        client: AsyncClient | None = None,
        session_settings: SessionSettings | None = None,
        timeout: float | None = None,
        verify_payloads: VerifyPayloads = "when_remote",
        failover_timeout: float | None = None,
        idempotency: Idempotency = "off",
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("a session id is a non-empty string")
        self.session_id = session_id
        self.context_name = session_context_name(session_id)
        if client is None:
            extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
            if failover_timeout is not None:
                extra["failover_timeout"] = failover_timeout
            client = AsyncClient(
                addr,
                token=token,
                verify_payloads=verify_payloads,
                idempotency=idempotency,
                **extra,
            )
            self._owns_client = True
        else:
            self._owns_client = False
        self.client = client
        self.session_settings = session_settings
        self._opened = False

    async def close(self) -> None:
        """Closes the client if this session made it."""
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> CtxstoreSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers -------------------------------------------------------------------------------

    async def _open(self, force: bool = False) -> None:
        if force or not self._opened:
            await self.client.open_context(
                self.context_name, {_TAG_SESSION: "=" + self.session_id}, get_or_create=True
            )
            self._opened = True

    async def _page_size(self) -> int:
        info = await self.client.server_info()
        return max(2, min(1000, info.read_turns_max or 64))

    async def _newest(self, wanted: int | None) -> list[TurnInfo]:
        """The chain's newest ``wanted`` item turns (every one for None), oldest first."""
        size = await self._page_size()
        if wanted is not None:
            size = min(size, wanted + 1)  # one more: the head may be a pop marker
        found: list[TurnInfo] = []
        try:
            page = await self.client.read_page(self.context_name, size, payloads=True)
        except NotFound:
            return []
        while True:
            found[:0] = [t for t in page.turns if t.type_tag != POP_TYPE]
            if (wanted is not None and len(found) >= wanted) or not page.next_before:
                break
            page = await self.client.read_page(
                self.context_name, size, before=page.next_before, payloads=True
            )
        return found if wanted is None else found[len(found) - wanted :]

    @staticmethod
    def _item(turn: TurnInfo) -> TResponseInputItem:
        assert turn.payload is not None
        item: TResponseInputItem = json.loads(turn.payload)
        return item

    # -- the Session protocol ------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in chronological order: the newest ``limit`` (default: the
        ``session_settings``' limit; None: all; 0: none)."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        if limit is not None and limit <= 0:
            return [] if limit == 0 else [self._item(t) for t in await self._newest(None)]
        return [self._item(t) for t in await self._newest(limit)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends ``items``, one turn each (in batches of 64, each all or none)."""
        if not items:
            return
        payloads = [json.dumps(item, separators=(",", ":")).encode("utf-8") for item in items]
        for start in range(0, len(payloads), _BATCH):
            await self._append(payloads[start : start + _BATCH])

    async def _append(self, payloads: Sequence[bytes]) -> None:
        for _ in range(_POP_RETRIES):
            await self._open()
            try:
                head = await self.client.read_page(self.context_name, 1)
                parent: ParentLike = None
                expected: int | None = None
                if head.turns and head.turns[-1].type_tag == POP_TYPE:
                    # After a pop: hang from the marker's parent, if the head is still it.
                    marker = head.turns[-1]
                    parent = marker.parent_turn_id or "root"
                    expected = marker.turn_id
                specs = [TurnSpec(payloads[0], parent=parent, type_tag=ITEM_TYPE)]
                specs += [TurnSpec(p, type_tag=ITEM_TYPE) for p in payloads[1:]]
                await self.client.append_turns(self.context_name, specs, expected_head=expected)
                return
            except NotFound:
                self._opened = False  # cleared meanwhile: create it again
            except Conflict:
                continue  # a pop or an add moved the head: read it again
        raise Conflict("add_items: the head kept moving")

    async def pop_item(self) -> TResponseInputItem | None:
        """Takes the newest item off the session and returns it (None if it has none): a
        compare-and-set on the head, retried while other writers move it."""
        size = 2
        for _ in range(_POP_RETRIES):
            try:
                page = await self.client.read_page(self.context_name, size, payloads=True)
            except NotFound:
                return None
            if not page.turns:
                return None
            head = page.turns[-1]
            items = [t for t in page.turns if t.type_tag != POP_TYPE]
            if not items:
                if not page.next_before:
                    return None  # only pop markers: empty
                size = min(size * 2, await self._page_size())
                continue
            top = items[-1]
            marker = TurnSpec(
                json.dumps({"popped": top.turn_id}).encode("utf-8"),
                parent=top.parent_turn_id or "root",
                type_tag=POP_TYPE,
            )
            try:
                await self.client.append_turns(
                    self.context_name, [marker], expected_head=head.turn_id
                )
            except Conflict:
                continue  # another pop or add came first: read again
            except NotFound:
                return None  # cleared meanwhile
            return self._item(top)
        raise Conflict("pop_item: the head kept moving")

    async def clear_session(self) -> None:
        """Deletes the session's context (its items are gone; the next write starts anew)."""
        self._opened = False
        try:
            await self.client.delete_context(self.context_name)
        except NotFound:
            pass
