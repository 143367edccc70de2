"""The Python half of the Python <-> TypeScript interop tests (test/interop.test.ts): each
command drives the repository's Python client (ctxstore.langgraph.CtxstoreSaver, a real
LangGraph graph; ctxstore.agents.CtxstoreSession) against the server the TypeScript test
started, and prints its result as one JSON line.

    python driver.py lg-run ADDR THREAD TEXT     # one graph step on the thread; prints the state
    python driver.py lg-read ADDR THREAD         # the thread's state and checkpoint ids
    python driver.py agents-add ADDR SESSION JSON_ITEMS
    python driver.py agents-get ADDR SESSION
    python driver.py agents-pop ADDR SESSION
    python driver.py lg-format - -                # the saver's context format: 1 or 2
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from ctxstore.agents import CtxstoreSession
from ctxstore.langgraph import CtxstoreSaver


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    count: int


def bot(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    return {
        "messages": [AIMessage(content=f"py: {last.content}")],
        "count": state.get("count", 0) + 1,
    }


def graph(saver: CtxstoreSaver) -> Any:
    return (
        StateGraph(State)
        .add_node("bot", bot)
        .add_edge(START, "bot")
        .add_edge("bot", END)
        .compile(checkpointer=saver)
    )


def state_json(saver: CtxstoreSaver, thread: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    snapshot = graph(saver).get_state(config)
    values = snapshot.values
    return {
        "messages": [[m.type, m.content] for m in values.get("messages", [])],
        "count": values.get("count"),
        "checkpoints": [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)],
    }


def main() -> None:
    command, addr, name, *rest = sys.argv[1:]
    if command == "lg-format":
        # Format 2 (plain lg.thread/lg.ns tags with lg.fmt=2) came with the lg.fmt tag.
        from ctxstore import langgraph

        print(json.dumps(2 if hasattr(langgraph, "_TAG_FMT") else 1))
        return
    if command.startswith("lg-"):
        with CtxstoreSaver.from_addr(addr) as saver:
            if command == "lg-run":
                config = {"configurable": {"thread_id": name}}
                graph(saver).invoke({"messages": [HumanMessage(content=rest[0])]}, config)
            print(json.dumps(state_json(saver, name)))
        return

    async def agents() -> Any:
        session = CtxstoreSession(name, addr=addr)
        try:
            if command == "agents-add":
                await session.add_items(json.loads(rest[0]))
                return None
            if command == "agents-get":
                return await session.get_items()
            if command == "agents-pop":
                return await session.pop_item()
            raise SystemExit(f"unknown command {command}")
        finally:
            await session.close()

    print(json.dumps(asyncio.run(agents())))


if __name__ == "__main__":
    main()
