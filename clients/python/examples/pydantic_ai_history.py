"""Pydantic AI conversations kept in ctxstore: save after each run, load before the next,
edit an earlier message as a fork. Runs offline (Pydantic AI's FunctionModel); put a real
model name in `Agent(...)` for a real agent.

    ctxstore-server --data /tmp/ctxstore-demo &        # or: pip install ctxstore-server
    python examples/pydantic_ai_history.py [HOST:PORT]
"""

from __future__ import annotations

import sys
import uuid

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxstore.pydantic_ai import CtxstoreMessageHistory


def offline_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    asked = [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]
    return ModelResponse(parts=[TextPart(f"you said: {' / '.join(map(str, asked))}")])


def main() -> None:
    agent = Agent(FunctionModel(offline_model), instructions="Be brief.")
    chat = f"demo-{uuid.uuid4().hex[:6]}"
    with CtxstoreMessageHistory(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7411") as history:
        for prompt in ["My name is Ada.", "What is my name?"]:
            past = history.load(chat)
            result = agent.run_sync(prompt, message_history=past)
            history.save(chat, result.new_messages(), expected_length=len(past))
            print(result.output)
        # Edit the first question: a fork at message 0, the original conversation unchanged.
        history.edit(chat, 2, ModelRequest(parts=[UserPromptPart("Spell my name.")]), f"{chat}-b")
        result = agent.run_sync(None, message_history=history.load(f"{chat}-b"))
        history.save(f"{chat}-b", result.new_messages())
        print(result.output)
        print(
            len(history.load(chat)),
            "messages in",
            chat,
            ";",
            len(history.load(f"{chat}-b")),
            "in its fork",
        )


if __name__ == "__main__":
    main()
