"""Key-value entries with a time to live (protocol version 3, issue 34) through the blocking and
the asyncio client against a real ctxstore-server: ``kv_put(ttl_ms=)``, ``kv_get(refresh=)``,
``kv_get_entry``, ``kv_list(with_ttl=, refresh=)``, ``kv_touch``, an expired entry gone from
every read, the arguments refused before anything is sent, and ``kv_get_many`` in order across
requests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

import ctxstore
from ctxstore import _protocol as p

from conftest import ServerProcess


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(server.addr, timeout=20) as c:
        yield c


def _wait_gone(client: ctxstore.Client, name: str, key: bytes) -> None:
    deadline = time.monotonic() + 10
    while client.kv_get(name, key) is not None:
        assert time.monotonic() < deadline, f"{key!r} never expired"
        time.sleep(0.01)


def test_entries_with_a_ttl(client: ctxstore.Client) -> None:
    name = f"mem-{uuid.uuid4().hex}"
    client.open_context(name)
    before_ms = int(time.time() * 1000)
    client.kv_put(name, {b"fact": b"blue"}, ttl_ms=3_600_000)
    client.kv_put(name, {"short": b"s"}, ttl_ms=300)
    client.kv_put(name, {b"plain": b"p"})
    # If absent: the live entry keeps its value and its TTL.
    client.kv_put(name, {b"fact": b"red"}, if_absent=True)
    entry = client.kv_get_entry(name, b"fact")
    assert entry is not None
    assert (entry.value, entry.ttl_ms) == (b"blue", 3_600_000)
    assert entry.expires_at_unix_ms >= before_ms + 3_600_000
    time.sleep(0.02)
    assert client.kv_get(name, b"fact", refresh=True) == b"blue"
    refreshed = client.kv_get_entry(name, b"fact")
    assert refreshed is not None and refreshed.expires_at_unix_ms >= entry.expires_at_unix_ms + 20

    listed = client.kv_list(name, with_ttl=True)
    assert [(i.key, i.ttl_ms) for i in listed] == [
        (b"fact", 3_600_000),
        (b"plain", 0),
        (b"short", 300),
    ]
    assert listed[0].expires_at_unix_ms == refreshed.expires_at_unix_ms
    # Without with_ttl: KV_LIST, which does not say.
    assert [i.ttl_ms for i in client.kv_list(name)] == [0, 0, 0]
    assert [i.key for i in client.iter_kv(name, with_ttl=True)] == [b"fact", b"plain", b"short"]
    time.sleep(0.02)
    again = client.kv_list(name, prefix=b"fact", refresh=True)
    assert again[0].expires_at_unix_ms >= refreshed.expires_at_unix_ms + 20

    touched = client.kv_touch(name, [b"plain", b"absent"], ttl_ms=7_200_000)
    assert [(i.key, i.ttl_ms) for i in touched] == [(b"plain", 7_200_000)]
    own = client.kv_touch(name, b"fact")
    assert [(i.key, i.ttl_ms) for i in own] == [(b"fact", 3_600_000)]

    _wait_gone(client, name, b"short")
    assert client.kv_get_entry(name, b"short") is None
    assert [i.key for i in client.kv_list(name)] == [b"fact", b"plain"]
    with pytest.raises(ctxstore.NotFound):
        client.kv_get_entry(f"nope-{uuid.uuid4().hex}", b"k")


def test_ttl_arguments_are_checked_before_sending(client: ctxstore.Client) -> None:
    name = f"mem-{uuid.uuid4().hex}"
    client.open_context(name)
    for bad in (0, -1, 100 * 365 * 24 * 3600 * 1000 + 1):
        with pytest.raises(ValueError):
            client.kv_put(name, {b"k": b"v"}, ttl_ms=bad)
    with pytest.raises(TypeError):
        client.kv_put(name, {b"k": b"v"}, ttl_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.kv_touch(name, [])
    with pytest.raises(ValueError):
        client.kv_touch(name, [f"k{i}" for i in range(129)])
    assert client.kv_list(name).items == []


def test_a_version_2_server_is_not_asked(client: ctxstore.Client, server: ServerProcess) -> None:
    class OldClient(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 2)

    with OldClient(server.addr) as old:
        assert old.server_info().version == 2
        with pytest.raises(ctxstore.NotSupported):
            old.kv_put("anything", {b"k": b"v"}, ttl_ms=1000)
        with pytest.raises(ctxstore.NotSupported):
            old.kv_touch("anything", b"k")
    assert p.KvTouch("x", 0, (b"k",)).required_version == 3


async def test_the_async_client_has_the_same_calls(server: ServerProcess) -> None:
    name = f"mem-{uuid.uuid4().hex}"
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        await client.open_context(name)
        await client.kv_put(name, {b"k": b"v"}, ttl_ms=60_000)
        touched = await client.kv_touch(name, b"k")
        assert [i.ttl_ms for i in touched] == [60_000]
        entry = await client.kv_get_entry(name, b"k", refresh=True)
        assert entry is not None and entry.ttl_ms == 60_000
        listed = await client.kv_list(name, with_ttl=True)
        assert listed[0].expires_at_unix_ms == entry.expires_at_unix_ms


def test_kv_get_many_answers_in_order_across_requests(client: ctxstore.Client) -> None:
    name = f"mem-{uuid.uuid4().hex}"
    client.open_context(name)
    # 300 keys: three KV_GET_MANY requests of at most 128 keys each.
    client.kv_put(name, {f"k{i:03}".encode(): str(i).encode() for i in range(0, 120)})
    for start, end in ((120, 220), (220, 300)):
        entries = {f"k{i:03}".encode(): str(i).encode() for i in range(start, end)}
        client.kv_put(name, entries, ttl_ms=60_000)
    keys = [f"k{i:03}" for i in range(300)] + ["absent"]
    values = client.kv_get_many(name, keys)
    assert len(values) == 301 and values[-1] is None
    got = [(v.value, v.ttl_ms) for v in values[:-1] if v is not None]
    assert got == [(str(i).encode(), 0 if i < 120 else 60_000) for i in range(300)]
    assert client.kv_get_many(name, []) == []
    with pytest.raises(ctxstore.NotFound):
        client.kv_get_many(f"nope-{uuid.uuid4().hex}", [b"k"])
    # The frame refused before sending on a version-2 connection.
    assert p.KvGetMany("x", 0, (b"k",)).required_version == 3


async def test_the_async_client_gets_many(server: ServerProcess) -> None:
    name = f"mem-{uuid.uuid4().hex}"
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        await client.open_context(name)
        await client.kv_put(name, {b"a": b"1", b"b": b"2"})
        values = await client.kv_get_many(name, [b"b", b"x", "a"])
        assert [None if v is None else v.value for v in values] == [b"2", None, b"1"]
