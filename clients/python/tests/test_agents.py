"""ctxstore.agents.CtxstoreSession against a real server: the OpenAI Agents SDK's Runner with a
session (on an offline model of our own: the SDK ships none), and every Session method
directly: limits, pop on empty, concurrent pops from two session objects (compare-and-set),
long sessions read in pages, clear."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import ctxstore
from ctxstore.agents import ITEM_TYPE, POP_TYPE, CtxstoreSession, session_context_name

from conftest import ServerProcess, new_server

set_tracing_disabled(True)  # no exporter: the tests run offline


@pytest.fixture(scope="module")
def agents_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server with small read pages (50 turns), so long sessions are read in pages."""
    process = new_server(tmp_root, extra_args=["--read-turns-max", "50"])
    yield process
    process.stop()


@pytest.fixture()
async def session(agents_server: ServerProcess) -> AsyncIterator[CtxstoreSession]:
    async with CtxstoreSession(f"s-{uuid4()}", addr=agents_server.addr) as made:
        yield made


def _msg(role: str, text: str) -> TResponseInputItem:
    return {"role": role, "content": text}  # type: ignore[return-value, misc]


class EchoModel(Model):
    """An offline model: answers each call with the text of the last user message and how
    many input items it was given; records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        last_user = next(i for i in reversed(items) if i.get("role") == "user")
        text = f"echo {last_user['content']} ({len(items)} items)"
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("EchoModel does not stream")


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of each message item."""
    out = []
    for item in items:
        content = item["content"]
        if isinstance(content, list):
            content = "".join(part["text"] for part in content)
        out.append((item["role"], content))
    return out


async def test_a_runner_keeps_its_history_in_the_session(agents_server: ServerProcess) -> None:
    model = EchoModel()
    agent = Agent(name="echo", instructions="Repeat.", model=model)
    session_id = f"run-{uuid4()}"
    async with CtxstoreSession(session_id, addr=agents_server.addr) as session:
        assert isinstance(session, Session)
        first = await Runner.run(agent, "hello", session=session)
        assert first.final_output == "echo hello (1 items)"
        second = await Runner.run(agent, "again", session=session)
        assert second.final_output == "echo again (3 items)"
        # The model was given the history from the session on the second turn.
        assert _texts(model.inputs[1]) == [
            ("user", "hello"),
            ("assistant", "echo hello (1 items)"),
            ("user", "again"),
        ]
    # Another session object (another connection) sees the same history.
    async with CtxstoreSession(session_id, addr=agents_server.addr) as again:
        assert _texts(await again.get_items()) == [
            ("user", "hello"),
            ("assistant", "echo hello (1 items)"),
            ("user", "again"),
            ("assistant", "echo again (3 items)"),
        ]
        # Undo the last exchange, as an app's "retry" button would, and run again.
        assert _texts([await again.pop_item()]) == [("assistant", "echo again (3 items)")]
        assert _texts([await again.pop_item()]) == [("user", "again")]
        third = await Runner.run(agent, "instead", session=again)
        assert third.final_output == "echo instead (3 items)"
        assert len(await again.get_items()) == 4


async def test_items_limit_pop_and_clear(session: CtxstoreSession) -> None:
    assert await session.get_items() == []
    assert await session.pop_item() is None  # nothing stored, no context yet
    items = [_msg("user", f"m{i}") for i in range(5)]
    await session.add_items(items[:3])
    await session.add_items([])
    await session.add_items(items[3:])
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[3:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []
    assert await session.pop_item() == items[4]
    assert await session.get_items(limit=1) == [items[3]]
    await session.add_items([_msg("assistant", "new")])
    assert await session.get_items() == [*items[:4], _msg("assistant", "new")]
    # The pop left no marker in the chain: the add hung from the popped item's parent.
    page = await session.client.read_page(session.context_name, 50)
    assert [t.type_tag for t in page.turns] == [ITEM_TYPE] * 5
    for _ in range(5):
        assert await session.pop_item() is not None
    assert await session.pop_item() is None
    assert await session.get_items() == []
    await session.add_items([_msg("user", "after")])
    assert await session.get_items() == [_msg("user", "after")]
    await session.clear_session()
    assert await session.get_items() == [] and await session.pop_item() is None
    await session.clear_session()  # again: nothing to clear
    await session.add_items([_msg("user", "fresh")])
    assert await session.get_items() == [_msg("user", "fresh")]


async def test_session_settings_limit_is_the_default(agents_server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(agents_server.addr) as shared:
        sid = f"lim-{uuid4()}"
        limited = CtxstoreSession(sid, client=shared, session_settings=SessionSettings(limit=2))
        await limited.add_items([_msg("user", str(i)) for i in range(4)])
        assert await limited.get_items() == [_msg("user", "2"), _msg("user", "3")]
        assert len(await limited.get_items(limit=3)) == 3
        await limited.close()  # a shared client stays open
        assert len(await CtxstoreSession(sid, client=shared).get_items()) == 4
        info = await shared.context_info(session_context_name(sid))
        assert info.tags == {"agents.session": "=" + sid}


async def test_long_sessions_are_written_in_batches_and_read_in_pages(
    session: CtxstoreSession,
) -> None:
    items = [_msg("user", f"item {i}") for i in range(130)]  # 3 batches; 3 read pages
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=70) == items[60:]
    assert await session.pop_item() == items[-1]
    assert await session.get_items(limit=60) == items[69:129]


async def test_concurrent_pops_from_two_session_objects_pop_each_item_once(
    agents_server: ServerProcess,
) -> None:
    sid = f"cas-{uuid4()}"
    items = [_msg("user", f"n{i}") for i in range(40)]
    async with (
        CtxstoreSession(sid, addr=agents_server.addr) as one,
        CtxstoreSession(sid, addr=agents_server.addr) as two,
    ):
        await one.add_items(items)
        popped = await asyncio.gather(*(s.pop_item() for _ in range(25) for s in (one, two)))
        got = [p for p in popped if p is not None]
        assert len(got) == 40 and popped.count(None) == 10
        assert sorted(p["content"] for p in got) == sorted(i["content"] for i in items)
        assert await one.get_items() == [] and await two.get_items() == []
        # Every pop marker hangs from the item before the one it popped: no item was
        # popped twice, none was lost (the compare-and-set on the head).
        log = [t async for t in one.client.iter_turn_log(one.context_name)]
        assert sum(t.type_tag == POP_TYPE for t in log) == 40


async def test_concurrent_adds_and_pops_agree(agents_server: ServerProcess) -> None:
    sid = f"mix-{uuid4()}"
    async with (
        CtxstoreSession(sid, addr=agents_server.addr) as writer,
        CtxstoreSession(sid, addr=agents_server.addr) as popper,
    ):
        await writer.add_items([_msg("user", "base")])

        async def add(i: int) -> None:
            await writer.add_items([_msg("user", f"a{i}")])

        results = await asyncio.gather(
            *(add(i) for i in range(20)), *(popper.pop_item() for _ in range(10))
        )
        popped = [r for r in results[20:] if r is not None]
        left = await writer.get_items()
        added = {"base", *(f"a{i}" for i in range(20))}
        contents = [i["content"] for i in left] + [p["content"] for p in popped]
        assert sorted(contents) == sorted(added)  # each item either left or popped, once
