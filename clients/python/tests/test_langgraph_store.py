"""ctxstore.langgraph.CtxstoreStore, LangGraph's BaseStore, against a real server (issue 34
item 3): random operation sequences give InMemoryStore's results (in the store's documented
order), through the sync methods and through abatch, puts with a TTL among them; equal values
are stored once; created_at survives an update; an item past its TTL is gone from every read
within a few seconds and reads that refresh keep it (issue 34, decision 0028); bad index
configs and bad TTLs are refused before anything is written; a namespace and key past the key
limit are refused. Vector search: test_langgraph_store_vectors.py."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, InvalidNamespaceError, Item, PutOp, SearchOp, TTLConfig
from langgraph.store.memory import InMemoryStore

import ctxstore
from ctxstore.langgraph import CtxstoreStore

from conftest import PYTHON_CLIENT_DIR, ServerProcess, new_server


@pytest.fixture(scope="module")
def store_server(tmp_root: Path) -> Iterator[ServerProcess]:
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def store(store_server: ServerProcess) -> Iterator[CtxstoreStore]:
    with CtxstoreStore.from_addr(store_server.addr, name=f"s-{uuid4()}") as made:
        yield made


# --- random operation sequences against InMemoryStore -----------------------------------------

_EXPIRED_MINUTES = 1 / 60_000  # 1 ms
labels = st.sampled_from(["a", "b", "ab", "é"])
namespaces = st.lists(labels, min_size=1, max_size=3).map(tuple)
keys = st.sampled_from(["k1", "k2", "k\x00", "x y", "ñ"])
values = st.fixed_dictionaries(
    {"n": st.integers(-3, 3)},
    optional={
        "tag": st.sampled_from(["red", "blue"]),
        "meta": st.fixed_dictionaries({"x": st.integers(0, 2)}),
        "list": st.lists(st.integers(0, 2), max_size=2),
    },
)
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"tag": st.sampled_from(["red", "blue"])}),
    st.fixed_dictionaries({"n": st.integers(-3, 3)}),
    st.fixed_dictionaries(
        {"n": st.sampled_from([{"$gt": 0}, {"$lte": -1}, {"$ne": 2}, {"$eq": 1}])}
    ),
    st.fixed_dictionaries({"meta": st.fixed_dictionaries({"x": st.integers(0, 2)})}),
    st.fixed_dictionaries({"list": st.lists(st.integers(0, 2), max_size=2)}),
)
# A TTL of an hour outlives any run; one of a millisecond is over before the next operation
# (the test sleeps past it): the item is gone from every read, as if deleted.
ttls = st.sampled_from([60.0, _EXPIRED_MINUTES])
operations = st.one_of(
    st.tuples(st.just("put"), namespaces, keys, values),
    st.tuples(st.just("put_ttl"), namespaces, keys, values, ttls),
    st.tuples(st.just("put"), namespaces, keys, values),
    st.tuples(st.just("put"), namespaces, keys, values),
    st.tuples(st.just("delete"), namespaces, keys),
    st.tuples(st.just("get"), namespaces, keys),
    st.tuples(
        st.just("search"),
        st.lists(labels, max_size=2).map(tuple),
        filters,
        st.integers(1, 6),
        st.integers(0, 3),
    ),
    st.tuples(
        st.just("list"),
        st.lists(labels | st.just("*"), max_size=2).map(tuple),
        st.lists(labels | st.just("*"), max_size=2).map(tuple),
        st.one_of(st.none(), st.integers(1, 2), st.integers(1, 2)),
        st.integers(1, 5),
        st.integers(0, 2),
    ),
)


def _plain(item: Item | None) -> Any:
    if item is None:
        return None
    return (item.namespace, item.key, item.value)


def _expected(memory: InMemoryStore, operation: tuple[Any, ...]) -> Any:
    """What InMemoryStore answers, in CtxstoreStore's order (namespace, then key: search and
    list_namespaces of InMemoryStore follow insertion order) and without InMemoryStore's
    listing of namespaces whose items were all deleted (or that were only read)."""
    kind = operation[0]
    if kind == "get":
        return _plain(memory.get(operation[1], operation[2]))
    if kind == "search":
        _, prefix, filter_, limit, offset = operation
        every = memory.search(prefix, filter=filter_, limit=10_000)
        ordered = sorted(every, key=lambda i: (i.namespace, i.key))
        return [_plain(i) for i in ordered[offset : offset + limit]]
    _, prefix, suffix, depth, limit, offset = operation
    holding = InMemoryStore()
    for namespace, items in memory._data.items():
        for key, item in items.items():
            holding.put(namespace, key, item.value)
    return holding.list_namespaces(
        prefix=prefix or None, suffix=suffix or None, max_depth=depth, limit=limit, offset=offset
    )


def _apply(store: Any, operation: tuple[Any, ...]) -> Any:
    kind = operation[0]
    if kind == "put":
        return store.put(operation[1], operation[2], operation[3])
    if kind == "put_ttl":
        _, namespace, key, value, ttl = operation
        if isinstance(store, InMemoryStore):
            # The model: an item that lives for the run is a put; one that expires a delete.
            if ttl == _EXPIRED_MINUTES:
                return store.delete(namespace, key)
            return store.put(namespace, key, value)
        store.put(namespace, key, value, ttl=ttl)
        if ttl == _EXPIRED_MINUTES:
            time.sleep(0.005)
        return None
    if kind == "delete":
        return store.delete(operation[1], operation[2])
    if kind == "get":
        return _plain(store.get(operation[1], operation[2]))
    if kind == "search":
        _, prefix, filter_, limit, offset = operation
        return [_plain(i) for i in store.search(prefix, filter=filter_, limit=limit, offset=offset)]
    _, prefix, suffix, depth, limit, offset = operation
    return store.list_namespaces(
        prefix=prefix or None, suffix=suffix or None, max_depth=depth, limit=limit, offset=offset
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=st.lists(operations, min_size=1, max_size=20))
def test_random_operations_answer_as_the_in_memory_store(
    store_server: ServerProcess, sequence: list[tuple[Any, ...]]
) -> None:
    memory = InMemoryStore()
    with CtxstoreStore.from_addr(store_server.addr, name=f"p-{uuid4()}") as store:
        for operation in sequence:
            writes = ("put", "put_ttl", "delete")
            expected = None if operation[0] in writes else _expected(memory, operation)
            _apply(memory, operation)
            assert _apply(store, operation) == expected, operation


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=st.lists(operations, min_size=1, max_size=10))
def test_random_operations_through_abatch_answer_as_the_in_memory_store(
    store_server: ServerProcess, sequence: list[tuple[Any, ...]]
) -> None:
    memory = InMemoryStore()

    async def run() -> None:
        async with CtxstoreStore.from_addr(store_server.addr, name=f"a-{uuid4()}") as store:
            for operation in sequence:
                kind = operation[0]
                writes = ("put", "put_ttl", "delete")
                expected = None if kind in writes else _expected(memory, operation)
                _apply(memory, operation)
                if kind == "put":
                    answer: Any = await store.aput(operation[1], operation[2], operation[3])
                elif kind == "put_ttl":
                    _, namespace, key, value, ttl = operation
                    answer = await store.aput(namespace, key, value, ttl=ttl)
                    if ttl == _EXPIRED_MINUTES:
                        await asyncio.sleep(0.005)
                elif kind == "delete":
                    answer = await store.adelete(operation[1], operation[2])
                elif kind == "get":
                    answer = _plain(await store.aget(operation[1], operation[2]))
                elif kind == "search":
                    _, prefix, filter_, limit, offset = operation
                    found = await store.asearch(prefix, filter=filter_, limit=limit, offset=offset)
                    answer = [_plain(i) for i in found]
                else:
                    _, prefix, suffix, depth, limit, offset = operation
                    answer = await store.alist_namespaces(
                        prefix=prefix or None,
                        suffix=suffix or None,
                        max_depth=depth,
                        limit=limit,
                        offset=offset,
                    )
                assert answer == expected, operation

    asyncio.run(run())


# --- what the store promises beyond InMemoryStore ---------------------------------------------


def test_a_batch_reads_before_its_writes_and_the_last_write_wins(store: CtxstoreStore) -> None:
    ns = ("batch",)
    store.put(ns, "k", {"n": 1})
    results = store.batch(
        [
            PutOp(ns, "k", {"n": 2}),
            GetOp(ns, "k"),
            PutOp(ns, "k", {"n": 3}),
            SearchOp(ns),
            PutOp(ns, "gone", None),
        ]
    )
    assert results[0] is None and results[2] is None and results[4] is None
    assert isinstance(results[1], Item) and results[1].value == {"n": 1}
    assert isinstance(results[3], list) and [i.value for i in results[3]] == [{"n": 1}]
    got = store.get(ns, "k")
    assert got is not None and got.value == {"n": 3}


def test_an_update_keeps_created_at_and_moves_updated_at(store: CtxstoreStore) -> None:
    store.put(("t",), "k", {"v": 1})
    first = store.get(("t",), "k")
    store.put(("t",), "k", {"v": 2})
    second = store.get(("t",), "k")
    assert first is not None and second is not None
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at and second.value == {"v": 2}
    listed = store.search(("t",))
    assert [(i.created_at, i.updated_at) for i in listed] == [
        (second.created_at, second.updated_at)
    ]


def test_equal_values_are_stored_once(store: CtxstoreStore, store_server: ServerProcess) -> None:
    value = {"memory": "the user prefers short answers " * 40, "n": 7}
    size = len(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())
    with ctxstore.Client(store_server.addr) as client:
        before = client.stats()
        for user in range(30):
            store.put(("memories", f"user-{user}"), "style", value)
        after = client.stats()
    # 30 items: one blob for the value, and one for each item's put time (its created and
    # updated entries hold the same bytes); unique bytes grow by one value, not 30.
    assert after.blobs - before.blobs == 1 + 30
    assert size <= after.unique_bytes - before.unique_bytes < size + 30 * 40
    assert len(store.search(("memories",), filter={"n": 7}, limit=100)) == 30


def test_bad_index_configs_and_bad_ttls_are_refused_before_anything_is_written(
    store: CtxstoreStore, store_server: ServerProcess
) -> None:
    assert store.supports_ttl
    for bad in (0, -1.0, "5"):
        with pytest.raises((ValueError, TypeError)):
            store.put(("x",), "k", {"n": 1}, ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.batch([PutOp(("x",), "k", {"n": 1}), PutOp(("x",), "j", {"n": 1}, ttl=-1.0)])
    with pytest.raises(ValueError):
        asyncio.run(store.aput(("x",), "k", {"n": 1}, ttl=0))
    assert store.search(("x",)) == []
    with pytest.raises(ValueError):
        CtxstoreStore.from_addr(store_server.addr, ttl={"default_ttl": -10})
    for index in ({"dims": 0, "embed": lambda texts: []}, {"dims": 3}, {"dims": 3, "embed": "x"}):
        with pytest.raises((ValueError, TypeError)):  # vector search: test_langgraph_store_vectors
            CtxstoreStore.from_addr(store_server.addr, index=index)  # type: ignore[arg-type]
    store.put(("x",), "k", {"n": 1}, index=["n"])  # ignored without an index config (LangGraph)
    assert store.get(("x",), "k", refresh_ttl=False) is not None


def _gone_within(
    store: CtxstoreStore, namespace: tuple[str, ...], key: str, seconds: float, *, alone: bool
) -> float:
    """Seconds until the item is gone from get and search (reads that do not refresh it),
    and, when it was its namespace's only item (``alone``), from list_namespaces; fails
    after ``seconds``."""
    start = time.monotonic()
    while True:
        gone = (
            store.get(namespace, key, refresh_ttl=False) is None
            and all(i.key != key for i in store.search(namespace, refresh_ttl=False))
            and (not alone or namespace not in store.list_namespaces(prefix=namespace))
        )
        if gone:
            return time.monotonic() - start
        assert time.monotonic() - start < seconds, f"{namespace}/{key} outlived its TTL"
        time.sleep(0.02)


def test_an_item_expires_from_every_read_and_refresh_on_read_keeps_it(
    store_server: ServerProcess,
) -> None:
    second = 1 / 60
    config: TTLConfig = {"default_ttl": 0.6 * second, "refresh_on_read": True}
    with CtxstoreStore.from_addr(store_server.addr, name=f"ttl-{uuid4()}", ttl=config) as store:
        assert store.ttl_config == config
        store.put(("users", "u-1"), "short", {"n": 1})  # the default TTL: 0.6 s
        store.put(("users", "u-1"), "long", {"n": 2}, ttl=60)
        store.put(("users", "u-2"), "kept", {"n": 3}, ttl=None)  # no TTL at all
        found = store.get(("users", "u-1"), "short")
        assert found is not None and found.value == {"n": 1}
        # Reads that refresh keep it for longer than its TTL: a get, then a search.
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert store.get(("users", "u-1"), "short") is not None
            time.sleep(0.15)
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            hits = store.search(("users",), filter={"n": 1})
            assert [i.key for i in hits] == ["short"]
            time.sleep(0.15)
        # Left alone, it goes from every read within its TTL and a little.
        assert _gone_within(store, ("users", "u-1"), "short", 3.0, alone=False) < 2.0
        assert store.get(("users", "u-1"), "long") is not None
        assert [i.key for i in store.search(("users",))] == ["long", "kept"]
        # A namespace whose items all expired is no longer listed.
        store.put(("tmp",), "k", {"n": 4}, ttl=0.3 * second)
        _gone_within(store, ("tmp",), "k", 3.0, alone=True)
        assert store.list_namespaces() == [("users", "u-1"), ("users", "u-2")]
        # An expired item put again is a new item.
        store.put(("tmp",), "k", {"n": 5})
        again = store.get(("tmp",), "k")
        assert again is not None and again.value == {"n": 5}


def test_without_refresh_on_read_reads_do_not_keep_an_item(store_server: ServerProcess) -> None:
    config: TTLConfig = {"default_ttl": 0.5 / 60, "refresh_on_read": False}
    with CtxstoreStore.from_addr(store_server.addr, name=f"nr-{uuid4()}", ttl=config) as store:
        store.put(("a",), "k", {"n": 1})
        start = time.monotonic()
        while store.get(("a",), "k") is not None:
            assert time.monotonic() - start < 3.0, "reads kept an item they should not refresh"
            time.sleep(0.05)
        # ...unless a read asks for it.
        store.put(("a",), "j", {"n": 2})
        for _ in range(8):
            assert store.get(("a",), "j", refresh_ttl=True) is not None
            time.sleep(0.15)


async def test_the_async_methods_keep_ttls_too(store_server: ServerProcess) -> None:
    async with CtxstoreStore.from_addr(store_server.addr, name=f"at-{uuid4()}") as store:
        await store.aput(("a",), "k", {"n": 1}, ttl=0.4 / 60)
        await store.aput(("a",), "j", {"n": 2}, ttl=60)
        start = time.monotonic()
        while await store.aget(("a",), "k", refresh_ttl=False) is not None:
            assert time.monotonic() - start < 3.0
            await asyncio.sleep(0.05)
        assert [i.key for i in await store.asearch(("a",))] == ["j"]


def test_namespaces_and_keys_past_the_limits_are_refused(store: CtxstoreStore) -> None:
    with pytest.raises(ValueError, match="at most 256"):
        store.put(("n" * 200,), "k" * 60, {"n": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"n": 1})
    with pytest.raises(TypeError):
        store.batch([PutOp(("a",), "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    assert store.list_namespaces() == []


def test_stores_of_different_names_do_not_see_each_other(store_server: ServerProcess) -> None:
    with CtxstoreStore.from_addr(store_server.addr, name=f"one-{uuid4()}") as one:
        with CtxstoreStore.from_addr(store_server.addr, name=f"two-{uuid4()}") as two:
            one.put(("a",), "k", {"n": 1})
            assert two.get(("a",), "k") is None
            assert two.search(()) == [] and two.list_namespaces() == []
            found = one.search(())
            assert [(i.namespace, i.key) for i in found] == [(("a",), "k")]


def test_the_readme_example_runs(store_server: ServerProcess, capsys: Any) -> None:
    text = (PYTHON_CLIENT_DIR / "README.md").read_text()
    start = text.index("### LangGraph: `ctxstore.langgraph.CtxstoreStore`")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    example = match.group(1).replace("127.0.0.1:7411", store_server.addr)
    example = example.replace('name="memories"', f'name="readme-{uuid4()}"')
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "{'prefers': 'short answers', 'score': 4}"
    assert printed[1].startswith("('users', 'u-42') style {'prefers': 'short answers'")
    assert printed[2] == "[('users', 'u-42')]"


def test_a_graph_remembers_across_threads_through_the_store(store_server: ServerProcess) -> None:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.runtime import Runtime

    def remember(state: MessagesState, runtime: Runtime[Any]) -> dict[str, Any]:
        assert runtime.store is not None
        seen = runtime.store.get(("users", "u-1"), "visits")
        count = 1 + (seen.value["count"] if seen is not None else 0)
        runtime.store.put(("users", "u-1"), "visits", {"count": count})
        return {"messages": [("assistant", f"visit {count}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    with CtxstoreStore.from_addr(store_server.addr, name=f"g-{uuid4()}") as store:
        graph = builder.compile(store=store)
        for thread in ("t-1", "t-2", "t-3"):
            out = graph.invoke(
                {"messages": [("user", "hi")]}, {"configurable": {"thread_id": thread}}
            )
        assert out["messages"][-1].content == "visit 3"
        found = store.get(("users", "u-1"), "visits")
        assert found is not None and found.value == {"count": 3}
