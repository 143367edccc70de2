"""Pydantic AI message history on ctxstore: :class:`CtxstoreMessageHistory`.

Needs the ``pydantic-ai`` extra (``pip install 'ctxstore[pydantic-ai]'``, the
``pydantic-ai-slim`` package). A conversation is a named context (``pai/`` and its id); each
``ModelMessage`` is one turn holding its JSON as Pydantic AI writes it
(``ModelMessagesTypeAdapter``), message i at depth i. So:

- ``save(conversation, result.new_messages())`` appends a run's messages in one all-or-none
  write (64 turns a write), compare-and-set on the length the caller expects when given;
- ``load(conversation)`` returns the history to pass as ``message_history=`` (the newest
  ``limit`` messages when given), read in pages of the server's ``read_turns_max``;
- ``edit(conversation, index, message, new_conversation)`` is how a user edits an earlier
  message: the new conversation is a fork at message ``index - 1`` (O(1), nothing copied,
  the original stays as it was) with the edited message appended; ``fork`` alone branches
  at any message. Messages and the blobs behind them are shared by both conversations.

Every method has a blocking and an ``a``-prefixed asyncio form, written once (see
``ctxstore._shells``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ._shells import Call, Plan, call, run_async, run_sync
from ._wire import APPEND_BATCH_TURNS_MAX, CONTEXT_NAME_BYTES_MAX
from .aio import AsyncClient
from .client import Client
from .errors import Conflict, NotFound
from .types import TurnSpec, VerifyPayloads

__all__ = ["CtxstoreMessageHistory", "MESSAGE_TYPE", "HistoryConflict"]

MESSAGE_TYPE = 1
"""``type_tag`` of a turn holding one ``ModelMessage`` (its JSON)."""

_PREFIX = "pai/"
_TAG_KIND = "pai.kind"
_BATCH = APPEND_BATCH_TURNS_MAX  # turns per APPEND_TURNS (the server's limit)
_NAME_BYTES_MAX = CONTEXT_NAME_BYTES_MAX


class HistoryConflict(Conflict):
    """The conversation is not as long as the caller expected: another writer added to it
    (read it again). ``actual_length`` is its length now."""

    def __init__(self, message: str, actual_length: int) -> None:
        super().__init__(message)
        self.actual_length = actual_length


def _dump(message: ModelMessage) -> bytes:
    return ModelMessagesTypeAdapter.dump_json([message])[1:-1]  # one element of the list


def _load(payload: bytes) -> ModelMessage:
    (message,) = ModelMessagesTypeAdapter.validate_json(b"[" + payload + b"]")
    return message


class CtxstoreMessageHistory:
    """Pydantic AI conversations stored in a ctxstore server.

    ``CtxstoreMessageHistory(addr="HOST:PORT", token=None)`` makes a blocking and an
    asyncio client (each connecting at its first call) unless given (``client=``,
    ``aclient=``); ``close()`` / ``aclose()`` closes those it made. Conversation ids are
    strings; with the ``pai/`` prefix a context name holds at most 256 bytes, and a longer id
    is refused (``ValueError``) before anything is written.
    """

    def __init__(
        self,
        addr: str = "127.0.0.1:7411",
        token: str | None = None,
        *,
        client: Client | None = None,
        aclient: AsyncClient | None = None,
        timeout: float | None = None,
        verify_payloads: VerifyPayloads = "when_remote",
    ) -> None:
        self._addr = addr
        self._token = token
        self._extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        self._verify: VerifyPayloads = verify_payloads
        self._client = client
        self._aclient = aclient
        self._owns = (client is None, aclient is None)

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(
                self._addr,
                token=self._token,
                lazy=True,
                verify_payloads=self._verify,
                **self._extra,
            )
        return self._client

    @property
    def aclient(self) -> AsyncClient:
        if self._aclient is None:
            self._aclient = AsyncClient(
                self._addr, token=self._token, verify_payloads=self._verify, **self._extra
            )
        return self._aclient

    def close(self) -> None:
        """Closes the blocking client if this object made it."""
        if self._owns[0] and self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        """Closes both clients if this object made them."""
        self.close()
        if self._owns[1] and self._aclient is not None:
            await self._aclient.close()

    def __enter__(self) -> CtxstoreMessageHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CtxstoreMessageHistory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @staticmethod
    def context_name(conversation_id: str) -> str:
        """The context of a conversation (ValueError when the id does not fit)."""
        if not isinstance(conversation_id, str) or not conversation_id:
            raise ValueError("a conversation id is a non-empty string")
        name = _PREFIX + conversation_id
        size = len(name.encode("utf-8"))
        if size > _NAME_BYTES_MAX:
            raise ValueError(
                f"conversation id is {size - len(_PREFIX)} bytes; at most "
                f"{_NAME_BYTES_MAX - len(_PREFIX)} (ctxstore context names hold 256 bytes)"
            )
        return name

    # -- plans ----------------------------------------------------------------------------------

    def _load_plan(self, conversation_id: str, limit: int | None) -> Plan[list[ModelMessage]]:
        name = self.context_name(conversation_id)
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        if limit == 0:
            return []
        info = yield call("server_info")
        page_max = max(1, min(info.read_turns_max, 10_000))
        size = page_max if limit is None else min(limit, page_max)
        page = yield Call("read_page", (name, size), {"payloads": True}, not_found=None)
        if page is None:
            return []
        newest_first: list[ModelMessage] = []
        while True:
            for turn in reversed(page.turns):
                assert turn.payload is not None
                newest_first.append(_load(turn.payload))
            if not page.next_before or (limit is not None and len(newest_first) >= limit):
                break
            wanted = page_max if limit is None else min(limit - len(newest_first), page_max)
            page = yield call("read_page", name, wanted, before=page.next_before, payloads=True)
        newest_first.reverse()
        return newest_first if limit is None else newest_first[-limit:]

    def _save_plan(
        self,
        conversation_id: str,
        messages: Sequence[ModelMessage],
        expected_length: int | None,
    ) -> Plan[int]:
        name = self.context_name(conversation_id)
        payloads = [_dump(m) for m in messages]
        head = yield Call("head", (name,), not_found=None)
        if head is None:
            yield call("open_context", name, {_TAG_KIND: "conversation"}, get_or_create=True)
            head = yield call("head", name)
        length = 0 if head.head_turn_id == 0 else head.head_depth + 1
        if expected_length is not None and expected_length != length:
            raise HistoryConflict(
                f"conversation {conversation_id!r} has {length} messages, not "
                f"{expected_length}: read it again",
                length,
            )
        expected = head.head_turn_id
        for start in range(0, len(payloads), _BATCH):
            specs = [TurnSpec(p, type_tag=MESSAGE_TYPE) for p in payloads[start : start + _BATCH]]
            if expected == 0:
                specs[0] = TurnSpec(specs[0].payload, parent="root", type_tag=MESSAGE_TYPE)
            try:
                appended = yield call("append_turns", name, specs, expected_head=expected)
            except Conflict:
                now = yield call("head", name)
                actual = 0 if now.head_turn_id == 0 else now.head_depth + 1
                raise HistoryConflict(
                    f"conversation {conversation_id!r} changed while saving: it has {actual} "
                    "messages now",
                    actual,
                ) from None
            expected = appended[-1].turn_id
            length += len(specs)
        return length

    def _fork_plan(self, conversation_id: str, keep: int, new_conversation_id: str) -> Plan[None]:
        """The new conversation holds the first ``keep`` messages (>= 1) of the old."""
        name = self.context_name(conversation_id)
        new_name = self.context_name(new_conversation_id)
        if keep < 1:
            raise ValueError(f"a fork keeps at least one message, got {keep}")
        page = yield Call("read_page", (name, 1), {"from_depth": keep - 1}, not_found=None)
        if page is None or not page.turns:
            raise NotFound(f"conversation {conversation_id!r} has fewer than {keep} messages")
        yield call("open_context", new_name, {_TAG_KIND: "conversation"}, page.turns[0].turn_id)

    def _edit_plan(
        self,
        conversation_id: str,
        index: int,
        message: ModelMessage,
        new_conversation_id: str,
    ) -> Plan[int]:
        new_name = self.context_name(new_conversation_id)
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        if index == 0:
            yield call("open_context", new_name, {_TAG_KIND: "conversation"})
            yield call(
                "append_turns",
                new_name,
                [TurnSpec(_dump(message), parent="root", type_tag=MESSAGE_TYPE)],
                expected_head=0,
            )
            return 1
        yield from self._fork_plan(conversation_id, index, new_conversation_id)
        appended = yield call("append", new_name, _dump(message), type_tag=MESSAGE_TYPE)
        length: int = appended.depth + 1
        return length

    def _delete_plan(self, conversation_id: str) -> Plan[bool]:
        gone = yield Call("delete_context", (self.context_name(conversation_id),), not_found=None)
        return gone is not None

    # -- blocking -------------------------------------------------------------------------------

    def load(self, conversation_id: str, *, limit: int | None = None) -> list[ModelMessage]:
        """The conversation's messages, oldest first (its newest ``limit`` when given; empty
        for an unknown conversation): pass them as ``message_history=``."""
        return run_sync(self.client, self._load_plan(conversation_id, limit))

    def save(
        self,
        conversation_id: str,
        messages: Sequence[ModelMessage],
        *,
        expected_length: int | None = None,
    ) -> int:
        """Appends ``messages`` (a run's ``new_messages()``) and returns the conversation's
        length. With ``expected_length``, only if the conversation is that long
        (``HistoryConflict`` otherwise, nothing written)."""
        return run_sync(self.client, self._save_plan(conversation_id, messages, expected_length))

    def fork(self, conversation_id: str, keep: int, new_conversation_id: str) -> None:
        """A new conversation holding the first ``keep`` messages of this one (O(1))."""
        run_sync(self.client, self._fork_plan(conversation_id, keep, new_conversation_id))

    def edit(
        self,
        conversation_id: str,
        index: int,
        message: ModelMessage,
        new_conversation_id: str,
    ) -> int:
        """A new conversation: this one's messages before ``index``, then ``message`` in
        place of message ``index`` (the original is left as it was). Returns its length."""
        return run_sync(
            self.client, self._edit_plan(conversation_id, index, message, new_conversation_id)
        )

    def delete(self, conversation_id: str) -> bool:
        """Deletes the conversation (False if there was none); forks keep their messages."""
        return run_sync(self.client, self._delete_plan(conversation_id))

    # -- asyncio --------------------------------------------------------------------------------

    async def aload(self, conversation_id: str, *, limit: int | None = None) -> list[ModelMessage]:
        """:meth:`load` on the asyncio client."""
        return await run_async(self.aclient, self._load_plan(conversation_id, limit))

    async def asave(
        self,
        conversation_id: str,
        messages: Sequence[ModelMessage],
        *,
        expected_length: int | None = None,
    ) -> int:
        """:meth:`save` on the asyncio client."""
        return await run_async(
            self.aclient, self._save_plan(conversation_id, messages, expected_length)
        )

    async def afork(self, conversation_id: str, keep: int, new_conversation_id: str) -> None:
        """:meth:`fork` on the asyncio client."""
        await run_async(self.aclient, self._fork_plan(conversation_id, keep, new_conversation_id))

    async def aedit(
        self,
        conversation_id: str,
        index: int,
        message: ModelMessage,
        new_conversation_id: str,
    ) -> int:
        """:meth:`edit` on the asyncio client."""
        return await run_async(
            self.aclient, self._edit_plan(conversation_id, index, message, new_conversation_id)
        )

    async def adelete(self, conversation_id: str) -> bool:
        """:meth:`delete` on the asyncio client."""
        return await run_async(self.aclient, self._delete_plan(conversation_id))
