"""Vector search (protocol version 6, issue 49, decision 0033) through the blocking and the
asyncio client against a real ctxstore-server: vector indexes created (idempotently), listed and
dropped; entries put with their vectors (KV_PUT_VECTORS) and found by ``vector_search`` with its
scores, ``k``, ``offset``, key prefix and value filter — exactly ``k`` while a filter passes few;
an overwrite without vectors, a delete, an expiry and a context's deletion take an entry's
vectors; what the client refuses before sending, and what the server refuses when the client's
checks are bypassed (raw requests: a wrong dimension, NaN, an unknown metric, ...), each a typed
error on a connection that stays open with nothing written. The codec's frames round-trip and
its decoders refuse what the layouts forbid; the golden frames of protocol/tests/golden-v6.txt
decode to their documented values and re-encode to exactly their bytes."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace as dataclasses_replace
from pathlib import Path
from typing import Any

import pytest

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p
from ctxstore._connection import resends_safely
from ctxstore.errors import (
    InvalidArgument,
    NotFound,
    NotSupported,
    ProtocolError,
    TooLarge,
    Unauthorized,
)

from conftest import GOLDEN_V6, ServerProcess, new_server
from test_golden import golden_frames


@pytest.fixture(scope="module")
def vector_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server of this module's own: a tenant holds at most 64 indexes."""
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def client(vector_server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(vector_server.addr, timeout=20) as c:
        yield c
        for index in c.vector_indexes():  # each test starts with no index
            c.vector_index_drop(index.name)


def _name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:12]}"


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


def _unit(angle_degrees: float) -> list[float]:
    angle = math.radians(angle_degrees)
    return [math.cos(angle), math.sin(angle), 0.0]


def _json(value: dict[str, Any]) -> bytes:
    import json

    return json.dumps(value, separators=(",", ":")).encode()


# --- indexes --------------------------------------------------------------------------------------


def test_an_index_is_created_idempotently_listed_and_dropped(client: ctxstore.Client) -> None:
    name = _name("docs")
    created = client.vector_index_create(name, 3)
    assert (created.name, created.dims, created.metric, created.vectors) == (name, 3, "cosine", 0)
    assert created.ef_search == p.VECTOR_EF_SEARCH_DEFAULT  # 0 asks for the server's default
    # The same name, dimension and metric answer the same index (a breadth of 0 matches any).
    assert client.vector_index_create(name, 3, "cosine") == created
    with pytest.raises(InvalidArgument):
        client.vector_index_create(name, 4)  # another dimension
    with pytest.raises(InvalidArgument):
        client.vector_index_create(name, 3, "l2")  # another metric

    others = [
        client.vector_index_create(_name("ip"), 8, "inner_product", 64),
        client.vector_index_create(_name("l2"), 4096, "l2"),
    ]
    assert [(i.metric, i.ef_search) for i in others] == [("inner_product", 64), ("l2", 128)]
    listed = client.vector_indexes()
    assert sorted(listed, key=lambda i: i.name.encode()) == listed
    assert {i.name: i for i in listed} == {i.name: i for i in [created, *others]}

    dropped = client.vector_index_drop(name)
    assert dropped == created
    assert name not in [i.name for i in client.vector_indexes()]
    with pytest.raises(NotFound):
        client.vector_index_drop(name)
    again = client.vector_index_create(name, 5, "l2")  # a new index: any parameters
    assert again.index_id != created.index_id and (again.dims, again.vectors) == (5, 0)


def test_the_calls_refuse_bad_arguments_before_sending(client: ctxstore.Client) -> None:
    bad_creates: list[tuple[Any, ...]] = [
        ("", 3),
        ("x" * 65, 3),
        ("é" * 33, 3),
        ("ok", 0),
        ("ok", 4097),
        ("ok", 3, "dot"),
        ("ok", 3, "cosine", 4097),
        ("ok", True),
    ]
    for args in bad_creates:
        with pytest.raises((ValueError, TypeError)):
            client.vector_index_create(*args)
    assert client.vector_indexes() == []

    ctx = _name("ctx")
    client.open_context(ctx)
    client.vector_index_create("idx", 2)
    nan, inf = float("nan"), float("inf")
    bad_puts: list[dict[Any, Any]] = [
        {},  # no entry
        {f"k{i}": (b"v", [[1.0, 0.0]]) for i in range(129)},  # more than 128
        {b"k": (b"v", [[1.0, 0.0], [1.0, 0.0, 0.0]])},  # two dimensions in one put
        {b"a": (b"v", [[1.0, 0.0]]), b"b": (b"v", [[1.0]])},  # across entries too
        {b"k": (b"v", [[nan, 0.0]])},
        {b"k": (b"v", [[1.0, inf]])},
        {b"k": (b"v", [[1.0, -inf]])},
        {b"k": (b"v", [[1e39, 0.0]])},  # past f32
        {b"k": (b"v", [[]])},  # no component
        {b"k": (b"v", [[1.0, 0.0]] * 65)},  # more than 64 vectors
        {b"k": (b"v", [["1", 0.0]])},
        {b"k": (b"v", "not vectors")},
        {b"k": ("not bytes", [[1.0, 0.0]])},
        {b"k": (b"v",)},
    ]
    for entries in bad_puts:
        with pytest.raises((ValueError, TypeError)):
            client.kv_put_vectors(ctx, entries, "idx")
    assert client.kv_list(ctx).items == []  # nothing was written

    bad_searches: list[dict[str, Any]] = [
        {"vector": [1.0, nan]},
        {"vector": []},
        {"k": 0},
        {"k": 1001},
        {"k": 10, "offset": 991},
        {"offset": -1},
        {"ef_search": 4097},
        {"filter": {"n": nan}},
        {"filter": {"n": object()}},
        {"filter": {"big": "x" * 70_000}},
        {"prefix": b"p" * 257},
    ]
    for changes in bad_searches:
        args: dict[str, Any] = {"vector": [1.0, 0.0], **changes}
        vector = args.pop("vector")
        with pytest.raises((ValueError, TypeError)):
            client.vector_search(ctx, "idx", vector, **args)


# --- puts and searches ----------------------------------------------------------------------------


def test_entries_put_with_vectors_are_found_best_first(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    angles = {b"doc/a": 0, b"doc/b": 30, b"doc/c": 60, b"doc/d": 90, b"other/e": 12}
    client.kv_put_vectors(
        ctx,
        {key: (_json({"angle": angle}), [_unit(angle)]) for key, angle in angles.items()},
        index.name,
    )
    # Several vectors: the entry counts once, with its best.
    client.kv_put_vectors(ctx, {b"doc/f": (b'{"angle":"two"}', [_unit(80), _unit(-5)])}, index.name)
    assert client.kv_get(ctx, b"doc/a") == b'{"angle":0}'  # an ordinary entry to the reads
    assert [i.vectors for i in client.vector_indexes() if i.name == index.name] == [7]

    query = _unit(20)
    hits = client.vector_search(ctx, index.name, query, k=10)
    every = {**{k: [_unit(a)] for k, a in angles.items()}, b"doc/f": [_unit(80), _unit(-5)]}
    expected = sorted(every, key=lambda k: (-max(_cosine(query, v) for v in every[k]), k))
    assert [h.key for h in hits] == expected
    for hit in hits:
        assert hit.score == pytest.approx(max(_cosine(query, v) for v in every[hit.key]), abs=1e-6)
        assert hit.value_len == len(client.kv_get(ctx, hit.key) or b"")
        assert hit.value_hash == ctxstore.blob_hash(client.kv_get(ctx, hit.key) or b"")
    assert hits.method in ("exact", "graph") and hits.candidates >= 1
    assert len(hits) == 6 and hits[0].key == expected[0] and list(hits) == hits.hits

    # k and offset page through the same ranking; a prefix keeps its keys; exact too.
    assert [h.key for h in client.vector_search(ctx, index.name, query, 2)] == expected[:2]
    paged = client.vector_search(ctx, index.name, query, 2, offset=2)
    assert [h.key for h in paged] == expected[2:4]
    under = client.vector_search(ctx, index.name, query, 10, prefix=b"doc/")
    assert [h.key for h in under] == [k for k in expected if k.startswith(b"doc/")]
    exact = client.vector_search(ctx, index.name, query, 10, exact=True, ef_search=16)
    assert exact.method == "exact" and [h.key for h in exact] == expected
    assert [h.key for h in client.vector_search(ctx, index.name, query, 3, offset=5)] == [
        expected[5]
    ]


def test_a_filter_that_passes_few_still_answers_exactly_k(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3, "inner_product")
    for batch in range(3):
        client.kv_put_vectors(
            ctx,
            {
                f"item/{n:03}".encode(): (
                    _json({"n": n, "tag": "rare" if n % 100 == 7 else "common", "meta": {"x": n}}),
                    [_unit(n * 0.3)],
                )
                for n in range(batch * 100, batch * 100 + 100)
            },
            index.name,
        )
    # The query is nearest the common items: the three rare ones still come, all of them.
    query = [1.0, 0.0, 0.0]
    rare = client.vector_search(ctx, index.name, query, 3, filter={"tag": "rare"})
    assert sorted(h.key for h in rare) == [b"item/007", b"item/107", b"item/207"]
    assert [h.score for h in rare] == sorted((h.score for h in rare), reverse=True)
    assert [
        h.key for h in client.vector_search(ctx, index.name, query, 10, filter={"tag": "rare"})
    ] == [h.key for h in rare]  # fewer pass than k: those that pass
    few = client.vector_search(ctx, index.name, query, 5, filter={"n": {"$gte": 290}})
    assert len(few) == 5 and all(h.key >= b"item/290" for h in few)
    operators = {"n": {"$gt": 10, "$lte": 12, "$ne": 11}}
    assert [h.key for h in client.vector_search(ctx, index.name, query, 10, filter=operators)] == [
        b"item/012"
    ]
    nested = client.vector_search(ctx, index.name, query, 10, filter={"meta": {"x": 42}})
    assert [h.key for h in nested] == [b"item/042"]
    both = client.vector_search(ctx, index.name, query, 10, filter={"tag": "rare", "n": 107})
    assert [h.key for h in both] == [b"item/107"]
    assert len(client.vector_search(ctx, index.name, query, 10, filter={"tag": "none"})) == 0
    with pytest.raises(InvalidArgument):  # an operator the server does not know: never ignored
        client.vector_search(ctx, index.name, query, 3, filter={"n": {"$in": [1, 2]}})
    assert client.vector_search(ctx, index.name, query, 1000).hits[0].key  # k at its limit


def test_overwrites_deletes_and_drops_take_vectors_away(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    entries = {f"k{i}".encode(): (f"v{i}".encode(), [_unit(i * 10)]) for i in range(5)}
    client.kv_put_vectors(ctx, entries, index.name)

    def found() -> list[bytes]:
        return sorted(h.key for h in client.vector_search(ctx, index.name, _unit(0), 100))

    def live_vectors() -> int:
        return next(i.vectors for i in client.vector_indexes() if i.name == index.name)

    assert found() == [b"k0", b"k1", b"k2", b"k3", b"k4"] and live_vectors() == 5
    client.kv_put(ctx, {b"k0": b"plain"})  # an overwrite without vectors
    client.kv_put_vectors(ctx, {b"k1": (b"none", [])}, index.name)  # with no vector
    client.kv_put_vectors(ctx, {b"k2": (b"none", []), b"k9": (b"new", [])}, index.name)
    client.kv_delete(ctx, [b"k3"])
    assert found() == [b"k4"] and live_vectors() == 1
    assert client.kv_get(ctx, b"k0") == b"plain" and client.kv_get(ctx, b"k1") == b"none"
    # An if-absent put keeps what the key has, vectors included.
    client.kv_put_vectors(ctx, {b"k4": (b"new", [_unit(90)])}, index.name, if_absent=True)
    kept = client.vector_search(ctx, index.name, _unit(40), 1)
    assert [(h.key, round(h.score, 5)) for h in kept] == [(b"k4", 1.0)]
    assert client.kv_get(ctx, b"k4") == b"v4"
    # A put with vectors replaces the old ones.
    client.kv_put_vectors(ctx, {b"k4": (b"new", [_unit(90)])}, index.name)
    assert client.vector_search(ctx, index.name, _unit(90), 1)[0].score == pytest.approx(1.0)

    # A dropped index answers no search; the entries keep their values; a new index of the
    # same name starts empty.
    client.vector_index_drop(index.name)
    with pytest.raises(NotFound):
        client.vector_search(ctx, index.name, _unit(0), 5)
    assert client.kv_get(ctx, b"k4") == b"new"
    client.vector_index_create(index.name, 3)
    assert client.vector_search(ctx, index.name, _unit(0), 5).hits == []
    # Unknown index or context: NotFound.
    with pytest.raises(NotFound):
        client.kv_put_vectors(ctx, {b"k": (b"v", [_unit(0)])}, "no-such-index")
    with pytest.raises(NotFound):
        client.kv_put_vectors(ctx, {b"k": (b"v", [])}, "no-such-index")  # without vectors too
    with pytest.raises(NotFound):
        client.vector_search(_name("no-such-context"), index.name, _unit(0), 5)


def test_a_deleted_context_takes_its_vectors(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    client.kv_put_vectors(ctx, {b"a": (b"1", [_unit(0)]), b"b": (b"2", [_unit(5)])}, index.name)
    client.delete_context(ctx)
    with pytest.raises(NotFound):
        client.vector_search(ctx, index.name, _unit(0), 5)
    deadline = time.monotonic() + 10
    while next(i.vectors for i in client.vector_indexes() if i.name == index.name):
        assert time.monotonic() < deadline, "the deleted context's vectors stayed counted"
        time.sleep(0.05)


def test_an_expired_entry_is_gone_from_searches(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3, "l2")
    client.kv_put_vectors(ctx, {b"short": (b"s", [_unit(0)])}, index.name, ttl_ms=400)
    client.kv_put_vectors(ctx, {b"long": (b"l", [_unit(45)])}, index.name, ttl_ms=3_600_000)
    entry = client.kv_get_entry(ctx, b"short")
    assert entry is not None and entry.ttl_ms == 400
    first = client.vector_search(ctx, index.name, _unit(0), 5)
    assert [h.key for h in first] == [b"short", b"long"]
    assert first[0].score == pytest.approx(0.0, abs=1e-6)  # minus the L2 distance
    assert first[1].score == pytest.approx(-math.dist(_unit(0), _unit(45)), abs=1e-5)
    deadline = time.monotonic() + 10
    while [h.key for h in client.vector_search(ctx, index.name, _unit(0), 5)] != [b"long"]:
        assert time.monotonic() < deadline, "the expired entry stayed in searches"
        time.sleep(0.02)
    assert client.kv_get(ctx, b"short") is None  # as every read


def test_durability_and_versions(client: ctxstore.Client, vector_server: ServerProcess) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    client.kv_put_vectors(ctx, {b"k": (b"v", [_unit(0)])}, index.name, durability="local")
    with pytest.raises(InvalidArgument):  # no replica: remote cannot be acknowledged
        client.kv_put_vectors(ctx, {b"k": (b"w", [_unit(0)])}, index.name, durability="remote")
    assert client.kv_get(ctx, b"k") == b"v"
    disk: Any = "disk"
    with pytest.raises(ValueError):
        client.kv_put_vectors(ctx, {b"k": (b"w", [_unit(0)])}, index.name, durability=disk)

    class Version5Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 5)

    with Version5Client(vector_server.addr) as old:
        assert old.server_info().version == 5
        for call in (
            lambda: old.vector_indexes(),
            lambda: old.vector_index_create("x", 3),
            lambda: old.vector_index_drop("x"),
            lambda: old.vector_search(ctx, index.name, _unit(0)),
            lambda: old.kv_put_vectors(ctx, {b"k": (b"w", [_unit(0)])}, index.name),
            lambda: old.kv_put_vectors(ctx, {b"k": (b"w", [])}, index.name),
        ):
            with pytest.raises(NotSupported):
                call()
        # What a version-5 connection sends anyway is UNKNOWN_MESSAGE, the connection open.
        with pytest.raises(ctxstore.UnknownMessage):
            old.request(p.RawRequest(p.MessageType.VECTOR_INDEX_LIST, b""))
        old.ping()
    assert client.kv_get(ctx, b"k") == b"v"
    assert resends_safely(p.VectorSearch(1, "i", (1.0,), 1))
    assert resends_safely(p.KvPutVectors(1, 0, 0, "i", 1, ()))
    assert not resends_safely(p.VectorIndexDrop("i"))


# --- what the server refuses, the client's checks bypassed ----------------------------------------


def test_the_server_refuses_what_the_client_would_not_send(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    info, _ = client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)

    def put(dims: int, *vectors: tuple[float, ...], name: str = index.name) -> Any:
        entry = p.KvVectorEntryRecord(b"k", b"v", tuple(vectors))
        return client.request(p.KvPutVectors(ctx, 0, 0, name, dims, (entry,)))

    def search(**fields: Any) -> Any:
        request: dict[str, Any] = {
            "context": ctx,
            "index": index.name,
            "vector": (1.0, 0.0, 0.0),
            "k": 3,
        }
        request.update(fields)
        return client.request(p.VectorSearch(**request))

    refusals: list[tuple[type[Exception], Any]] = [
        (InvalidArgument, lambda: put(4, (1.0, 0.0, 0.0, 0.0))),  # not the index's dims
        (InvalidArgument, lambda: put(2, (1.0, 0.0))),
        (InvalidArgument, lambda: put(3, (1.0, math.nan, 0.0))),
        (InvalidArgument, lambda: put(3, (1.0, 0.0, math.inf))),
        (InvalidArgument, lambda: put(3, (1.0, 0.0, 0.0), (-math.inf, 0.0, 0.0))),
        (TooLarge, lambda: put(3, *[(1.0, 0.0, 0.0)] * 65)),
        (InvalidArgument, lambda: put(3, (1.0, 0.0, 0.0), name="")),
        (NotFound, lambda: put(3, (1.0, 0.0, 0.0), name="no-such-index")),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate("bad", 3, 9))),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate("bad", 3, 0))),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate("bad", 0, 1))),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate("bad", 4097, 1))),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate("", 3, 1))),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate(index.name, 4, 1))),
        (InvalidArgument, lambda: client.request(p.VectorIndexCreate(index.name, 3, 2))),
        (NotFound, lambda: client.request(p.VectorIndexDrop("no-such-index"))),
        (InvalidArgument, lambda: search(vector=(1.0, 0.0))),
        (InvalidArgument, lambda: search(vector=(1.0, math.nan, 0.0))),
        (InvalidArgument, lambda: search(k=0)),
        (TooLarge, lambda: search(k=1001)),
        (TooLarge, lambda: search(k=500, offset=501)),
        (InvalidArgument, lambda: search(filter=b'{"n": {"$in": [1]}}')),
        (InvalidArgument, lambda: search(filter=b"not json")),
        (InvalidArgument, lambda: search(filter=b"[1, 2]")),
        (TooLarge, lambda: search(filter=b'{"s":"' + b"x" * 65_536 + b'"}')),
        (NotFound, lambda: search(index="no-such-index")),
        (NotFound, lambda: search(context=info.context_id + 1_000_000)),
    ]
    for expected, attempt in refusals:
        with pytest.raises(expected):
            attempt()
        client.ping()  # the connection stays open
    assert client.kv_get(ctx, b"k") is None  # nothing was written
    assert [i.name for i in client.vector_indexes()] == [index.name]
    assert next(i.vectors for i in client.vector_indexes()) == 0


def test_a_tenant_holds_at_most_64_indexes(client: ctxstore.Client) -> None:
    names = [f"many-{i:02}" for i in range(p.VECTOR_INDEXES_MAX)]
    for name in names:
        client.vector_index_create(name, 2)
    assert [i.name for i in client.vector_indexes()] == names
    with pytest.raises(TooLarge):
        client.vector_index_create("one-more", 2)
    assert client.vector_index_create(names[0], 2).name == names[0]  # an existing one answers


def test_an_index_is_its_tenants_and_the_rights_hold(tmp_root: Path) -> None:
    """Decision 0032 with 0033: another tenant's index of the same name is another index; a
    search sees the tenant's own entries; creating and putting need ``write``, dropping
    ``admin``, listing and searching ``read``."""
    root = tmp_root / "vector-tenants"
    root.mkdir(parents=True, exist_ok=True)
    tokens = {"acme": "acme-vectors-0123456789", "globex": "globex-vectors-0123456789"}
    tokens["readers"] = "readers-vectors-0123456789"
    rights = {"acme": '"read", "write", "admin"', "globex": '"read", "write"', "readers": '"read"'}
    tenants = root / f"tenants-{uuid.uuid4().hex}.toml"
    tenants.write_text(
        "".join(
            f'[[tenant]]\nname = "{name}"\ntokens = ["{tokens[name]}"]\nrights = [{rights[name]}]\n'
            for name in tokens
        )
    )
    operator = "operator-vectors-0123456789"
    server = new_server(root, token=operator, extra_args=["--tenants-file", str(tenants)])
    try:
        with (
            ctxstore.Client(server.addr, token=tokens["acme"]) as acme,
            ctxstore.Client(server.addr, token=tokens["globex"]) as globex,
            ctxstore.Client(server.addr, token=tokens["readers"]) as reader,
            ctxstore.Client(server.addr, token=operator) as owner,
        ):
            mine = acme.vector_index_create("shared", 3)
            theirs = globex.vector_index_create("shared", 5, "l2")  # another index
            assert [(i.name, i.dims) for i in acme.vector_indexes()] == [("shared", 3)]
            assert [(i.name, i.dims) for i in globex.vector_indexes()] == [("shared", 5)]
            assert owner.vector_indexes() == [] and reader.vector_indexes() == []
            for client, value, vector in (
                (acme, b"from acme", _unit(0)),
                (globex, b"from globex", [1.0, 0.0, 0.0, 0.0, 0.0]),
            ):
                client.open_context("notes")
                client.kv_put_vectors("notes", {b"k": (value, [vector])}, "shared")
            hits = acme.vector_search("notes", "shared", _unit(0), 5)
            assert [(h.key, h.value_hash) for h in hits] == [
                (b"k", ctxstore.blob_hash(b"from acme"))
            ]
            with pytest.raises(NotFound):  # the reader's tenant has no such context
                reader.vector_search("notes", "shared", _unit(0), 5)
            for refused in (
                lambda: reader.vector_index_create("mine", 3),
                lambda: reader.kv_put_vectors("notes", {b"k": (b"v", [_unit(0)])}, "shared"),
                lambda: globex.vector_index_drop("shared"),  # no admin right
            ):
                with pytest.raises(Unauthorized):
                    refused()
            assert acme.vector_index_drop("shared") == dataclasses_replace(mine, vectors=1)
            assert globex.vector_indexes() == [dataclasses_replace(theirs, vectors=1)]
    finally:
        server.stop()


# --- the asyncio client -------------------------------------------------------------------------


async def test_the_asyncio_client_has_the_same_calls(vector_server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(vector_server.addr, timeout=20) as client:
        ctx = _name("actx")
        await client.open_context(ctx)
        index = await client.vector_index_create(_name("aidx"), 3, "cosine")
        assert index in await client.vector_indexes()
        await client.kv_put_vectors(
            ctx,
            {
                b"a": (b'{"c":"red"}', [_unit(0)]),
                b"b": (b'{"c":"blue"}', [_unit(50)]),
                b"c": (b'{"c":"red"}', [_unit(80), _unit(10)]),
            },
            index.name,
            ttl_ms=3_600_000,
            durability="local",
        )
        hits = await client.vector_search(ctx, index.name, _unit(12), 2, filter={"c": "red"})
        assert [h.key for h in hits] == [b"c", b"a"]
        assert hits[0].score == pytest.approx(_cosine(_unit(12), _unit(10)), abs=1e-6)
        await client.kv_put_vectors(ctx, {b"c": (b'{"c":"red"}', [])}, index.name)
        hits = await client.vector_search(ctx, index.name, _unit(12), 2, filter={"c": "red"})
        assert [h.key for h in hits] == [b"a"]
        with pytest.raises(InvalidArgument):
            await client.vector_index_create(index.name, 2)
        with pytest.raises(ValueError):
            await client.kv_put_vectors(ctx, {b"x": (b"v", [[math.nan, 0.0, 0.0]])}, index.name)
        assert await client.vector_index_drop(index.name) == ctxstore.VectorIndex(
            index.index_id, index.name, 3, "cosine", index.ef_search, 2
        )
        with pytest.raises(NotFound):
            await client.vector_search(ctx, index.name, _unit(12), 2)


# --- the codec (no server) ----------------------------------------------------------------------


def _frame(message: p.Request) -> bytes:
    return b"".join(p.encode_request(7, message))


REQUESTS: list[p.Request] = [
    p.VectorIndexCreate("docs", 384, p.VectorMetric.COSINE, 0),
    p.VectorIndexCreate("docs", 3, 9, 4096),  # an unknown metric decodes: the server refuses it
    p.VectorIndexDrop("docs"),
    p.VectorIndexList(),
    p.VectorSearch("thread-1", "docs", (0.5, -1.25, 3.0), 10),
    p.VectorSearch(3, "docs", (1.0,), 5, 2, p.VECTOR_SEARCH_EXACT, 64, b"i/", b'{"n":1}'),
    p.KvPutVectors(
        "thread-1",
        p.KV_PUT_IF_ABSENT,
        60_000,
        "docs",
        2,
        (
            p.KvVectorEntryRecord(b"a", b"x" * 10_000, ((1.0, 2.0), (0.25, -0.5))),
            p.KvVectorEntryRecord(b"b", b"y", ()),
        ),
    ),
]
RESPONSES: list[p.Response] = [
    p.VectorIndexResponse(p.VectorIndexInfoRecord(1, 384, p.VectorMetric.COSINE, 128, 0, "docs")),
    p.VectorIndexResponse(
        p.VectorIndexInfoRecord(2, 3, p.VectorMetric.L2, 64, 9, "é"),
        p.MessageType.VECTOR_INDEX_DROP.response_type,
    ),
    p.VectorIndexesResponse(()),
    p.VectorIndexesResponse(
        (
            p.VectorIndexInfoRecord(1, 3, p.VectorMetric.INNER_PRODUCT, 128, 2, "a"),
            p.VectorIndexInfoRecord(4, 4096, p.VectorMetric.COSINE, 4096, 2**40, "b" * 64),
        )
    ),
    p.VectorHitsResponse(
        p.VectorMethod.GRAPH,
        123,
        (
            p.VectorHitRecord(b"k1", 0.75, bytes(range(32)), 5),
            p.VectorHitRecord(b"k2", -1.5, bytes(32), 0),
        ),
    ),
    p.DoneResponse(p.MessageType.KV_PUT_VECTORS.response_type),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: r.NAME)
def test_requests_round_trip_and_refuse_trailing_bytes(request_: p.Request) -> None:
    frame = _frame(request_)
    header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
    assert header.msg_type == request_.MSG_TYPE and request_.required_version == 6
    assert p.decode_request(header.msg_type, frame[p.HEADER_BYTES :]) == request_
    with pytest.raises(ProtocolError):
        p.decode_request(header.msg_type, frame[p.HEADER_BYTES :] + b"\x00")
    if len(frame) > p.HEADER_BYTES:
        with pytest.raises(ProtocolError):
            p.decode_request(header.msg_type, frame[p.HEADER_BYTES : -1])


@pytest.mark.parametrize("response", RESPONSES, ids=lambda r: r.NAME)
def test_responses_round_trip_and_refuse_trailing_bytes(response: p.Response) -> None:
    frame = p.encode_response(7, response)
    body = frame[p.HEADER_BYTES :]
    assert p.decode_response(response.msg_type, body) == response
    with pytest.raises(ProtocolError):
        p.decode_response(response.msg_type, body + b"\x00")
    if body:
        with pytest.raises(ProtocolError):
            p.decode_response(response.msg_type, body[:-1])


def test_the_layouts_are_the_documented_bytes() -> None:
    create = _frame(p.VectorIndexCreate("ab", 384, p.VectorMetric.L2, 64))[p.HEADER_BYTES :]
    assert create == b"\x02\x00ab" + (384).to_bytes(2, "little") + b"\x03\x00" + b"\x40\x00"
    search = _frame(p.VectorSearch(3, "i", (1.0,), 10, 2, 1, 0, b"p", b"{}"))[p.HEADER_BYTES :]
    assert search == (
        b"\x00\x00" + (3).to_bytes(8, "little")  # CONTEXT_REF by id
        + b"\x01\x00i"  # the index
        + b"\x01\x00" + b"\x00\x00\x80\x3f"  # dims 1, 1.0f
        + b"\x0a\x00" + b"\x02\x00" + b"\x01" + b"\x00" + b"\x00\x00"  # k, offset, flags, ef
        + b"\x01\x00p" + b"\x02\x00\x00\x00{}"  # prefix, filter
    )  # fmt: skip
    put = _frame(
        p.KvPutVectors("c", 1, 5, "i", 1, (p.KvVectorEntryRecord(b"k", b"v", ((2.0,),)),))
    )[p.HEADER_BYTES :]
    assert put == (
        b"\x01\x00c" + b"\x01" + (5).to_bytes(8, "little") + b"\x01\x00i" + b"\x01\x00"
        + b"\x01\x00" + b"\x01\x00k" + b"\x01\x00\x00\x00v" + b"\x01" + b"\x00\x00\x00\x40"
    )  # fmt: skip
    info = p.VectorIndexInfoRecord(7, 3, p.VectorMetric.COSINE, 128, 9, "x").encode()
    assert len(info) == 20 + 1
    assert info == (
        (7).to_bytes(4, "little") + b"\x03\x00\x01\x00\x80\x00" + (9).to_bytes(8, "little")
        + b"\x01\x00x"
    )  # fmt: skip
    assert p.MessageType.KV_PUT_VECTORS in p.TAKES_ACK_AFTER
    acked = p.AckAfter(p.KvPutVectors("c", 0, 0, "i", 1, ()), p.ACK_AFTER_LOCAL)
    assert acked.required_version == 6 and acked.frame_flags == p.ACK_AFTER_LOCAL << 3


def _info_body(**changes: Any) -> bytes:
    fields: dict[str, Any] = {
        "index_id": 1,
        "dims": 3,
        "metric": 1,
        "reserved": 0,
        "ef_search": 128,
        "vectors": 0,
        "name": b"docs",
    }
    fields.update(changes)
    return (
        fields["index_id"].to_bytes(4, "little")
        + fields["dims"].to_bytes(2, "little")
        + bytes([fields["metric"], fields["reserved"]])
        + fields["ef_search"].to_bytes(2, "little")
        + fields["vectors"].to_bytes(8, "little")
        + len(fields["name"]).to_bytes(2, "little")
        + fields["name"]
    )


def test_strict_decoding_of_the_answers() -> None:
    index = p.MessageType.VECTOR_INDEX_CREATE.response_type
    assert p.decode_response(index, _info_body()).index.name == "docs"  # type: ignore[attr-defined]
    for bad in (
        {"dims": 0},
        {"dims": 4097},
        {"metric": 0},
        {"metric": 4},
        {"reserved": 1},
        {"ef_search": 4097},
        {"name": b""},
        {"name": b"x" * 65},
        {"name": b"\xff"},
    ):
        with pytest.raises(ProtocolError):
            p.decode_response(index, _info_body(**bad))
    listed = p.MessageType.VECTOR_INDEX_LIST.response_type
    with pytest.raises(ProtocolError):  # more than 64 indexes
        p.decode_response(listed, (65).to_bytes(2, "little") + _info_body() * 65)
    with pytest.raises(ProtocolError):  # a count the body cannot hold
        p.decode_response(listed, (2).to_bytes(2, "little") + _info_body())
    hits = p.MessageType.VECTOR_SEARCH.response_type
    good = p.encode_response(1, RESPONSES[4])[p.HEADER_BYTES :]
    for bad_body in (
        b"\x02" + good[1:],  # an unknown method
        good[:1] + b"\x01" + good[2:],  # reserved set
        good[:6] + (1001).to_bytes(2, "little") + good[8:],  # more hits than any k
    ):
        with pytest.raises(ProtocolError):
            p.decode_response(hits, bad_body)


def test_answers_that_break_their_promises_are_refused() -> None:
    """The pair checks of the calls: an index answered for another, hits out of order, past k
    or outside the prefix, a listing out of name order."""
    h = bytes(32)
    create = ops.vector_index_create("docs", 3, "cosine", 0)
    other = p.VectorIndexInfoRecord(1, 4, p.VectorMetric.COSINE, 128, 0, "docs")
    with pytest.raises(ProtocolError):
        create.finish(p.VectorIndexResponse(other))
    with pytest.raises(ProtocolError):
        ops.vector_index_create("docs", 3, "cosine", 64).finish(
            p.VectorIndexResponse(
                p.VectorIndexInfoRecord(1, 3, p.VectorMetric.COSINE, 128, 0, "docs")
            )
        )
    with pytest.raises(ProtocolError):
        ops.vector_index_drop("docs").finish(
            p.VectorIndexResponse(p.VectorIndexInfoRecord(1, 3, p.VectorMetric.COSINE, 128, 0, "x"))
        )
    search = ops.vector_search("c", "docs", [1.0], 2, 0, b"p/", None, False, 0)

    def answer(*hits: tuple[bytes, float]) -> p.VectorHitsResponse:
        records = tuple(p.VectorHitRecord(key, score, h, 1) for key, score in hits)
        return p.VectorHitsResponse(p.VectorMethod.EXACT, 3, records)

    ok = search.finish(answer((b"p/b", 0.9), (b"p/a", 0.5)))
    assert [hit.key for hit in ok] == [b"p/b", b"p/a"] and ok.method == "exact"
    assert [hit.key for hit in search.finish(answer((b"p/a", 0.5), (b"p/b", 0.5)))] == [
        b"p/a",
        b"p/b",
    ]
    for broken in (
        answer((b"p/a", 0.5), (b"p/b", 0.9)),  # not best first
        answer((b"p/b", 0.5), (b"p/a", 0.5)),  # equal scores out of key order
        answer((b"q/a", 0.5)),  # outside the prefix
        answer((b"p/a", 0.5), (b"p/a", 0.4)),  # twice
        answer((b"p/a", 0.5), (b"p/b", 0.4), (b"p/c", 0.3)),  # more than k
    ):
        with pytest.raises(ProtocolError):
            search.finish(broken)
    listing = ops.vector_indexes()
    b, a = (
        p.VectorIndexInfoRecord(i, 3, p.VectorMetric.COSINE, 128, 0, n)
        for i, n in ((1, "b"), (2, "a"))
    )
    with pytest.raises(ProtocolError):
        listing.finish(p.VectorIndexesResponse((b, a)))
    assert [i.name for i in listing.finish(p.VectorIndexesResponse((a, b)))] == ["a", "b"]


_MEMORIES = p.VectorIndexInfoRecord(1, 3, p.VectorMetric.COSINE, 128, 2, "memories")
GOLDEN_V6_EXPECTED: dict[str, tuple[int, p.Message]] = {
    "vector_index_create": (81, p.VectorIndexCreate("memories", 3, p.VectorMetric.COSINE, 0)),
    "vector_index": (81, p.VectorIndexResponse(_MEMORIES)),
    "vector_index_drop": (82, p.VectorIndexDrop("memories")),
    "vector_index_dropped": (
        82,
        p.VectorIndexResponse(_MEMORIES, p.MessageType.VECTOR_INDEX_DROP.response_type),
    ),
    "vector_index_list": (83, p.VectorIndexList()),
    "vector_indexes": (83, p.VectorIndexesResponse((_MEMORIES,))),
    "kv_put_vectors": (
        84,
        p.KvPutVectors(
            "lgs:main",
            0,
            0,
            "memories",
            3,
            (
                p.KvVectorEntryRecord(
                    b"i/a", b'{"text":"hi"}', ((1.0, 0.0, -0.5), (0.25, 0.5, 2.0))
                ),
                p.KvVectorEntryRecord(b"i/b", b"{}", ()),
            ),
        ),
    ),
    "kv_put_vectors_stored": (84, p.DoneResponse(p.MessageType.KV_PUT_VECTORS.response_type)),
    "vector_search": (
        85,
        p.VectorSearch(
            3,
            "memories",
            (1.0, 0.0, 0.0),
            2,
            1,
            p.VECTOR_SEARCH_EXACT,
            0,
            b"i/",
            b'{"color":{"$ne":"red"}}',
        ),
    ),
    "vector_hits": (
        85,
        p.VectorHitsResponse(
            p.VectorMethod.EXACT,
            4,
            (p.VectorHitRecord(b"i/a", 0.875, bytes(range(0x30, 0x50)), 13),),
        ),
    ),
}


def test_the_golden_frames_of_version_6() -> None:
    frames = golden_frames((GOLDEN_V6,))
    assert set(frames) == set(GOLDEN_V6_EXPECTED)
    for name, (req_id, expected) in GOLDEN_V6_EXPECTED.items():
        frame = frames[name]
        header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
        assert header.req_id == req_id and header.len == len(frame) - p.HEADER_BYTES, name
        body = frame[p.HEADER_BYTES :]
        if isinstance(expected, p.Request):
            assert p.decode_request(header.msg_type, body, header.flags) == expected, name
            assert b"".join(p.encode_request(req_id, expected)) == frame, name
        else:
            assert isinstance(expected, p.Response)
            assert p.decode_response(header.msg_type, body, header.flags) == expected, name
            assert p.encode_response(req_id, expected) == frame, name
