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
    python driver.py store-put ADDR STORE JSON_OPS  # CtxstoreStore puts: [[namespace, key, value or null]]
    python driver.py store-dump ADDR STORE        # every item (search), namespaces, gets
    python driver.py store-vput ADDR STORE JSON_OPS     # the same, with vector search (INDEX below)
    python driver.py store-vsearch ADDR STORE JSON_ARGS # {prefix, query, filter, limit}: [[ns, key, score]]
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
from collections import Counter, defaultdict
from typing import Annotated, Any, TypedDict

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from ctxstore.agents import CtxstoreSession
from ctxstore.langgraph import CtxstoreSaver


class CharacterEmbeddings(Embeddings):
    """LangGraph's test embeddings (libs/checkpoint-postgres/tests/embed_test_utils.py,
    langchain-ai/langgraph, MIT): character frequencies through a random projection per
    character. The projections of WARM are drawn first, so that a text of those characters
    embeds as in test/embeddings.ts whatever was embedded before."""

    def __init__(self, dims: int, seed: int = 42) -> None:
        self._rng = random.Random(seed)
        self.dims = dims
        self._projections: defaultdict[str, list[float]] = defaultdict(
            lambda: [self._rng.gauss(0, 1 / math.sqrt(self.dims)) for _ in range(self.dims)]
        )
        self.embed_query(WARM)

    def _embed_one(self, text: str) -> list[float]:
        counts = Counter(text)
        total = sum(counts.values())
        if total == 0:
            return [0.0] * self.dims
        embedding = [0.0] * self.dims
        for char, count in counts.items():
            weight = count / total
            for i, proj in enumerate(self._projections[char]):
                embedding[i] += weight * proj
        norm = math.sqrt(sum(x * x for x in embedding))
        return [x / norm for x in embedding] if norm > 0 else embedding

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed_one(text)


WARM = "abcdefghijklmnopqrstuvwxyz "
DIMS = 64


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
    if command.startswith("store-"):
        from ctxstore.langgraph import CtxstoreStore

        index = None
        if command.startswith("store-v"):
            index = {"dims": DIMS, "embed": CharacterEmbeddings(DIMS), "fields": ["text"]}
        store = CtxstoreStore.from_addr(addr, name=name, index=index)
        try:
            if command == "store-vsearch":
                args = json.loads(rest[0])
                found = store.search(
                    tuple(args["prefix"]),
                    query=args["query"],
                    filter=args.get("filter"),
                    limit=args.get("limit", 10),
                )
                print(json.dumps([[list(i.namespace), i.key, i.score] for i in found]))
                return
            if command in ("store-put", "store-vput"):
                for namespace, key, value in json.loads(rest[0]):
                    if value is None:
                        store.delete(tuple(namespace), key)
                    else:
                        store.put(tuple(namespace), key, value)
                print(json.dumps(None))
                return
            if command != "store-dump":
                raise SystemExit(f"unknown command {command}")
            items = store.search((), limit=1000)
            gets = [store.get(item.namespace, item.key) for item in items]
            print(
                json.dumps(
                    {
                        "items": [
                            [list(i.namespace), i.key, i.value, i.created_at.isoformat(), i.updated_at.isoformat()]
                            for i in items
                        ],
                        "gets": [g.value if g is not None else None for g in gets],
                        "namespaces": [list(ns) for ns in store.list_namespaces(limit=1000)],
                    },
                    ensure_ascii=False,
                )
            )
        finally:
            store.close()
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
