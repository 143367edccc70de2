"""ctxstore.pydantic_ai against a real server: a Pydantic AI agent (on FunctionModel, the
offline model Pydantic AI ships) whose history is saved after each run and loaded before the
next; the stored history round-trips through ModelMessagesTypeAdapter exactly; an edit of an
earlier message forks the conversation and leaves the original as it was."""

from __future__ import annotations

import uuid

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxstore.pydantic_ai import CtxstoreMessageHistory, HistoryConflict

from conftest import ServerProcess


def _user_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, UserPromptPart)
    ]


def _agent(seen: list[list[str]]) -> Agent[None, str]:
    """An offline agent that answers with the user prompts it was given (and records them)."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts = _user_texts(messages)
        seen.append(prompts)
        return ModelResponse(parts=[TextPart(" | ".join(prompts))])

    return Agent(FunctionModel(answer), instructions="answer from the history")


def _json(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def test_history_persists_across_runs_and_edits_fork(server: ServerProcess) -> None:
    seen: list[list[str]] = []
    agent = _agent(seen)
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    with CtxstoreMessageHistory(server.addr) as history:
        assert history.load(chat) == []
        for prompt in ["hello", "what did I say?", "and then?"]:
            before = history.load(chat)
            result = agent.run_sync(prompt, message_history=before)
            length = history.save(chat, result.new_messages(), expected_length=len(before))
            assert length == len(result.all_messages())
            # What is stored is what Pydantic AI has, byte for byte once serialised.
            assert _json(history.load(chat)) == _json(result.all_messages())
        assert seen[-1] == ["hello", "what did I say?", "and then?"]
        assert _json(history.load(chat, limit=2)) == _json(result.all_messages()[-2:])

        # A stale writer: the conversation grew since it was read.
        with pytest.raises(HistoryConflict) as stale:
            history.save(chat, result.new_messages(), expected_length=2)
        assert stale.value.actual_length == 6

        # Edit the second user message (index 2): a fork, the original untouched.
        original = history.load(chat)
        edited = ModelRequest(parts=[UserPromptPart("what is the capital of France?")])
        assert history.edit(chat, 2, edited, f"{chat}-edit") == 3
        branch = history.load(f"{chat}-edit")
        assert _json(branch[:2]) == _json(original[:2])
        assert _user_texts(branch) == ["hello", "what is the capital of France?"]
        assert _json(history.load(chat)) == _json(original)
        result = agent.run_sync(None, message_history=branch)
        history.save(f"{chat}-edit", result.new_messages())
        assert seen[-1] == ["hello", "what is the capital of France?"]
        # Forked turns are shared: the fork's first two messages are the original's turns.
        a = history.client.read_page(f"pai/{chat}", 2, from_depth=0)
        b = history.client.read_page(f"pai/{chat}-edit", 2, from_depth=0)
        assert [t.turn_id for t in a] == [t.turn_id for t in b]

        history.fork(chat, 4, f"{chat}-fork")
        assert _json(history.load(f"{chat}-fork")) == _json(original[:4])
        assert history.delete(chat) and not history.delete(chat)
        assert _json(history.load(f"{chat}-fork")) == _json(original[:4])  # forks keep theirs


async def test_async_history_and_bad_input(server: ServerProcess) -> None:
    seen: list[list[str]] = []
    agent = _agent(seen)
    chat = f"achat-{uuid.uuid4().hex[:8]}"
    async with CtxstoreMessageHistory(server.addr) as history:
        for prompt in ["one", "two"]:
            result = await agent.run(prompt, message_history=await history.aload(chat))
            await history.asave(chat, result.new_messages())
        assert _json(await history.aload(chat)) == _json(result.all_messages())
        assert (
            await history.aedit(chat, 0, ModelRequest(parts=[UserPromptPart("zero")]), f"{chat}-e")
            == 1
        )
        assert _user_texts(await history.aload(f"{chat}-e")) == ["zero"]
        await history.afork(chat, 1, f"{chat}-f")
        assert len(await history.aload(f"{chat}-f")) == 1
        with pytest.raises(ValueError, match="at most 252"):
            await history.asave("x" * 253, result.new_messages())
        with pytest.raises(ValueError, match="at least one"):
            await history.afork(chat, 0, "whatever")
        assert await history.aload(f"{chat}-never") == []
        assert await history.adelete(chat)
