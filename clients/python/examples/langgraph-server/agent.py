"""A graph for the LangGraph server example: it counts, in the long-term memory store, how
often each user came back (``runtime.store``), and answers with the count; the thread's
messages are the checkpointer's."""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, MessagesState, StateGraph
from langgraph.runtime import Runtime


def remember(state: MessagesState, runtime: Runtime[Any]) -> dict[str, Any]:
    assert runtime.store is not None, "the server passes its store (langgraph.json: store)"
    namespace = ("visits",)
    seen = runtime.store.get(namespace, "count")
    count = 1 + (seen.value["n"] if seen is not None else 0)
    runtime.store.put(namespace, "count", {"n": count})
    said = len(state["messages"])
    return {"messages": [("assistant", f"visit {count}, {said} messages in this thread")]}


builder = StateGraph(MessagesState)
builder.add_node("remember", remember)
builder.add_edge(START, "remember")
graph = builder.compile()
