"""Vectors on turns (protocol version 7, issue 49, decision 0033) through the blocking and the
asyncio client against a real ctxstore-server: turns appended with their vectors
(APPEND_TURNS_VECTORS) to named, tagged contexts and found by ``vector_search_turns``
(VECTOR_SEARCH_TURNS) by context, name prefix, tags, labels and type tag, best first with
their scores, exactly ``k`` after ``offset``, a fork's inherited turns once; a key the context
has writes nothing, vectors included; a redaction and a context's deletion take a turn's
vectors; what the client refuses before sending and what the server refuses when the client's
checks are bypassed (a wrong dimension, NaN, more than 16 vectors, an unknown index or
context), each a typed error with nothing appended. The codec's frames round-trip, its
decoders refuse what the layouts forbid, the calls refuse answers that break their promises,
and the golden frames of protocol/tests/golden-v7.txt decode to their documented values and
re-encode to exactly their bytes."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import ctxstore
from ctxstore import TurnSpec
from ctxstore import _ops as ops
from ctxstore import _protocol as p
from ctxstore._connection import resends_safely
from ctxstore.errors import (
    InvalidArgument,
    NotFound,
    NotSupported,
    ProtocolError,
    TooLarge,
)

from conftest import GOLDEN_V7, ServerProcess, new_server
from test_golden import golden_frames
from test_vectors import _cosine, _name, _unit


@pytest.fixture(scope="module")
def vector_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server of this module's own (as test_vectors.py's)."""
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def client(vector_server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(vector_server.addr, timeout=20) as c:
        yield c
        for index in c.vector_indexes():  # each test starts with no index
            c.vector_index_drop(index.name)


@dataclass(frozen=True)
class Sent:
    """A turn a test appended, with what the searches filter and rank it by."""

    turn_id: int
    context: str
    role: str | None
    type_tag: int
    vectors: list[list[float]]
    payload: bytes


def _ranked(query: Sequence[float], turns: Sequence[Sent]) -> list[int]:
    """The TurnIDs of ``turns`` with a vector, best first (a turn's best vector), equal
    scores in TurnID order: what VECTOR_SEARCH_TURNS promises."""
    carrying = [turn for turn in turns if turn.vectors]
    best = {t.turn_id: max(_cosine(query, v) for v in t.vectors) for t in carrying}
    return sorted(best, key=lambda turn_id: (-best[turn_id], turn_id))


def _ids(hits: ctxstore.TurnHits) -> list[int]:
    return [hit.turn.turn_id for hit in hits]


def _vector_count(client: ctxstore.Client, index: str) -> int:
    return next(i.vectors for i in client.vector_indexes() if i.name == index)


# --- appends and searches -------------------------------------------------------------------------


def test_turns_are_found_by_context_prefix_tags_labels_and_type(client: ctxstore.Client) -> None:
    base = _name("agent")
    alpha, beta, outside = f"{base}/alpha", f"{base}/beta", _name("outside")
    alpha_info, _ = client.open_context(alpha, {"project": "x", "team": "red"})
    client.open_context(beta, {"project": "y"})
    client.open_context(outside, {"project": "x"})
    index = client.vector_index_create(_name("recall"), 3)

    plan: dict[str, list[tuple[bytes, str | None, int, list[list[float]]]]] = {
        alpha: [
            (b"a0", "user", 1, [_unit(0)]),
            (b"a20", "assistant", 2, [_unit(20)]),
            (b"a-none", None, 0, []),  # appended without a vector: an ordinary turn
            (b"a40", "user", 1, [_unit(40)]),
        ],
        beta: [
            (b"b10", "user", 1, [_unit(10)]),
            (b"b30", "assistant", 2, [_unit(170), _unit(30)]),  # counts once, with its best
        ],
        outside: [(b"o5", "user", 1, [_unit(5)])],
    }
    sent: list[Sent] = []
    for context, turns in plan.items():
        appended = client.append_turns_vectors(
            context,
            [
                (TurnSpec(payload, labels={"role": role} if role else None, type_tag=tag), vecs)
                for payload, role, tag, vecs in turns
            ],
            index=index.name,
        )
        assert [a.turn.payload_hash for a in appended] == [
            ctxstore.blob_hash(payload) for payload, *_ in turns
        ]
        assert all(not a.existing for a in appended)
        sent += [
            Sent(a.turn.turn_id, context, role, tag, vecs, payload)
            for a, (payload, role, tag, vecs) in zip(appended, turns, strict=True)
        ]
    assert _vector_count(client, index.name) == 7
    assert [t.payload for t in client.last(alpha, 10, payloads=True)] == [
        b"a0",
        b"a20",
        b"a-none",
        b"a40",
    ]

    query = _unit(12)

    def expected(keep: Any = lambda turn: True) -> list[int]:
        return _ranked(query, [turn for turn in sent if keep(turn)])

    def search(**filters: Any) -> list[int]:
        return _ids(client.vector_search_turns(index.name, query, 10, **filters))

    every = client.vector_search_turns(index.name, query, 10)
    assert _ids(every) == expected() and len(every) == 6
    assert every.method in ("exact", "graph") and every.candidates >= 1
    by_id = {turn.turn_id: turn for turn in sent}
    for hit in every:
        turn = by_id[hit.turn.turn_id]
        best = max(_cosine(query, v) for v in turn.vectors)
        assert hit.score == pytest.approx(best, abs=1e-6)
        assert hit.turn == client.get_turn(turn.turn_id)  # the Turn every read returns
        assert client.get_blob(hit.turn.payload_hash) == turn.payload
        assert hit.turn.type_tag == turn.type_tag
    exact = client.vector_search_turns(index.name, query, 10, exact=True, ef_search=16)
    assert exact.method == "exact" and _ids(exact) == expected()
    assert exact.candidates == 7  # every vector of the index compared

    assert search(context=alpha) == expected(lambda t: t.context == alpha)
    assert search(context=alpha_info.context_id) == expected(lambda t: t.context == alpha)
    assert search(name_prefix=f"{base}/") == expected(lambda t: t.context in (alpha, beta))
    assert search(tags={"project": "x"}) == expected(lambda t: t.context in (alpha, outside))
    assert search(tags={"project": "x", "team": "red"}) == expected(lambda t: t.context == alpha)
    assert search(name_prefix=base, tags={"project": "x"}) == expected(lambda t: t.context == alpha)
    assert search(context=outside, name_prefix=base) == []  # every condition must match
    assert search(labels={"role": "user"}) == expected(lambda t: t.role == "user")
    assert search(type_tag=2) == expected(lambda t: t.type_tag == 2)
    assert search(type_tag=0) == []  # the turn of type 0 carries no vector
    both = client.vector_search_turns(
        index.name, query, 10, context=beta, labels={"role": "assistant"}
    )
    assert _ids(both) == expected(lambda t: t.context == beta and t.role == "assistant")
    assert both[0].score == pytest.approx(_cosine(query, _unit(30)), abs=1e-6)
    assert search(tags={"project": "none"}) == [] and search(labels={"role": "tool"}) == []
    assert search(name_prefix=f"{base}/alpha", labels={"role": "user"}, type_tag=1) == expected(
        lambda t: t.context == alpha and t.role == "user"
    )


def test_exactly_k_after_offset_and_a_forks_turns_once(client: ctxstore.Client) -> None:
    base = _name("many")
    main, fork = f"{base}/main", f"{base}/fork"
    client.open_context(main)
    index = client.vector_index_create(_name("idx"), 3)
    angles = [i * 4.5 for i in range(40)]  # 0 to 175.5 degrees: nearer 0, better
    appended = client.append_turns_vectors(
        main,
        [
            (
                TurnSpec(f"t{i}".encode(), labels={"kind": "rare" if i % 8 == 3 else "common"}),
                [_unit(angle)],
            )
            for i, angle in enumerate(angles)
        ],
        index=index.name,
        dims=3,
        expected_head=0,
    )
    ids = [a.turn.turn_id for a in appended]
    rare = [ids[i] for i in range(40) if i % 8 == 3]
    assert _vector_count(client, index.name) == 40

    query = _unit(0)
    for exact in (False, True):
        for k, offset in [(1, 0), (5, 0), (5, 5), (10, 30), (7, 35), (40, 0), (3, 39)]:
            hits = client.vector_search_turns(index.name, query, k, offset=offset, exact=exact)
            assert _ids(hits) == ids[offset : offset + k], (k, offset, exact)
            assert len(hits) == min(k, 40 - offset)  # exactly k while k + offset pass
        # A filter that passes few still answers exactly k of those.
        few = client.vector_search_turns(index.name, query, 3, labels={"kind": "rare"})
        assert _ids(few) == rare[:3]
        assert _ids(client.vector_search_turns(index.name, query, 10, labels={"kind": "rare"})) == (
            rare
        )
        paged = client.vector_search_turns(index.name, query, 2, offset=2, labels={"kind": "rare"})
        assert _ids(paged) == rare[2:4]
    assert _ids(client.vector_search_turns(index.name, query, 1000)) == ids  # k at its limit

    # A fork's turns are those a read of it returns (its chain, inherited); a turn shared by
    # several of the contexts searched comes once.
    client.open_context(fork, base_turn_id=ids[9])
    near_91 = _unit(91)  # every turn at a distance of its own: no equal scores
    by_angle = sorted(range(40), key=lambda i: (abs(91 - angles[i]), ids[i]))
    assert _ids(client.vector_search_turns(index.name, near_91, 40, context=fork)) == [
        ids[i] for i in by_angle if i <= 9
    ]
    shared = client.vector_search_turns(index.name, near_91, 100, name_prefix=f"{base}/")
    assert _ids(shared) == [ids[i] for i in by_angle]  # 40 turns, each once


def test_a_key_the_context_has_writes_no_vector_and_a_redaction_takes_them(
    client: ctxstore.Client,
) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    (first,) = client.append_turns_vectors(
        ctx, [(TurnSpec(b"note", key="k1"), [_unit(0)])], index=index.name
    )
    (again,) = client.append_turns_vectors(
        ctx, [(TurnSpec(b"other", key="k1"), [_unit(90)])], index=index.name
    )
    assert again.existing and again.turn.turn_id == first.turn.turn_id
    assert _vector_count(client, index.name) == 1
    kept = client.vector_search_turns(index.name, _unit(90), 5)
    assert _ids(kept) == [first.turn.turn_id]
    assert kept[0].score == pytest.approx(0.0, abs=1e-6)  # the first vector, not the retry's

    (second,) = client.append_turns_vectors(
        ctx, [(TurnSpec(b"secret"), [_unit(45)])], index=index.name
    )
    assert _ids(client.vector_search_turns(index.name, _unit(45), 5)) == [
        second.turn.turn_id,
        first.turn.turn_id,
    ]
    client.redact_turn(second.turn.turn_id)
    deadline = time.monotonic() + 10
    while _ids(client.vector_search_turns(index.name, _unit(45), 5)) != [first.turn.turn_id]:
        assert time.monotonic() < deadline, "the redacted turn's vectors stayed searchable"
        time.sleep(0.05)

    client.delete_context(ctx)
    with pytest.raises(NotFound):
        client.vector_search_turns(index.name, _unit(0), 5, context=ctx)
    deadline = time.monotonic() + 10
    while client.vector_search_turns(index.name, _unit(0), 5).hits:
        assert time.monotonic() < deadline, "the deleted context's turns stayed searchable"
        time.sleep(0.05)


# --- what is refused ------------------------------------------------------------------------------


def test_the_calls_refuse_bad_arguments_before_sending(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    spec = TurnSpec(b"x")
    nan, inf = math.nan, math.inf
    bad_turns: list[Any] = [
        [],  # no turn
        [(spec, [[1.0, 0.0, 0.0], [1.0, 0.0]])],  # two dimensions in one turn
        [(spec, [[1.0, 0.0, 0.0]]), (spec, [[1.0, 0.0]])],  # across turns too
        [(spec, [[nan, 0.0, 0.0]])],
        [(spec, [[1.0, inf, 0.0]])],
        [(spec, [[1.0, 0.0, -inf]])],
        [(spec, [[1e39, 0.0, 0.0]])],  # past f32
        [(spec, [[]])],  # no component
        [(spec, [_unit(0)] * 17)],  # more than 16 vectors
        [(spec, [["1", 0.0, 0.0]])],
        [(spec, "not vectors")],
        [spec],  # not a pair
        [(spec,)],
        [(b"not a TurnSpec", [_unit(0)])],
        {spec: [_unit(0)]},  # not a sequence of pairs
        [(TurnSpec(), [_unit(0)])],  # neither payload nor payload_hash
    ]
    for turns in bad_turns:
        with pytest.raises((ValueError, TypeError)):
            client.append_turns_vectors(ctx, turns, index=index.name)
    for options in (
        {"dims": 2},  # the vectors have 3
        {"dims": 0},
        {"dims": 4097},
        {"index": ""},
        {"index": "x" * 65},
        {"expected_head": -1},
    ):
        arguments: dict[str, Any] = {"index": index.name, **options}
        with pytest.raises((ValueError, TypeError)):
            client.append_turns_vectors(ctx, [(spec, [_unit(0)])], **arguments)
    assert client.head(ctx).head_turn_id == 0  # nothing was appended
    assert _vector_count(client, index.name) == 0

    bad_searches: list[dict[str, Any]] = [
        {"vector": [1.0, nan, 0.0]},
        {"vector": []},
        {"k": 0},
        {"k": 1001},
        {"k": 10, "offset": 991},
        {"offset": -1},
        {"ef_search": 4097},
        {"context": 0},  # no context is None
        {"context": ""},
        {"name_prefix": b"bytes"},
        {"tags": {f"t{i}": "v" for i in range(33)}},
        {"labels": {f"l{i}": "v" for i in range(17)}},
        {"labels": {"role": 1}},
        {"type_tag": -1},
        {"type_tag": 2**64},
    ]
    for changes in bad_searches:
        args: dict[str, Any] = {"vector": [1.0, 0.0, 0.0], **changes}
        vector = args.pop("vector")
        with pytest.raises((ValueError, TypeError)):
            client.vector_search_turns(index.name, vector, **args)


def test_the_server_refuses_what_the_client_would_not_send(client: ctxstore.Client) -> None:
    ctx = _name("ctx")
    info, _ = client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    spec = p.TurnSpecRecord(p.ParentKind.HEAD, 0, 0, 0, False, p.ExtrasRecord(), b"raw")

    def append(dims: int, *vectors: tuple[float, ...], **fields: Any) -> Any:
        request: dict[str, Any] = {
            "context": ctx,
            "expected_head": None,
            "index": index.name,
            "dims": dims,
            "turns": (p.VectorTurnRecord(spec, tuple(vectors)),),
        }
        request.update(fields)
        return client.request(p.AppendTurnsVectors(**request))

    def search(**fields: Any) -> Any:
        request: dict[str, Any] = {"index": index.name, "vector": (1.0, 0.0, 0.0), "k": 3}
        request.update(fields)
        return client.request(p.VectorSearchTurns(**request))

    one = (1.0, 0.0, 0.0)
    refusals: list[tuple[type[Exception], Any]] = [
        (InvalidArgument, lambda: append(2, (1.0, 0.0))),  # not the index's dimension
        (InvalidArgument, lambda: append(4, (1.0, 0.0, 0.0, 0.0))),
        (InvalidArgument, lambda: append(3, (1.0, math.nan, 0.0))),
        (InvalidArgument, lambda: append(3, (1.0, 0.0, math.inf))),
        (InvalidArgument, lambda: append(3, one, (-math.inf, 0.0, 0.0))),
        (TooLarge, lambda: append(3, *[one] * 17)),  # a turn carries at most 16
        (NotFound, lambda: append(3, one, index="no-such-index")),
        (NotFound, lambda: append(0, index="no-such-index")),  # checked without vectors too
        (NotFound, lambda: append(3, one, context=_name("no-such-context"))),
        (InvalidArgument, lambda: search(vector=(1.0, 0.0))),
        (InvalidArgument, lambda: search(vector=(1.0, math.nan, 0.0))),
        (InvalidArgument, lambda: search(k=0)),
        (TooLarge, lambda: search(k=1001)),
        (TooLarge, lambda: search(k=500, offset=501)),
        (NotFound, lambda: search(index="no-such-index")),
        (NotFound, lambda: search(context=info.context_id + 1_000_000)),
        (NotFound, lambda: search(context=_name("no-such-context"))),
    ]
    for expected, attempt in refusals:
        with pytest.raises(expected):
            attempt()
        client.ping()  # the connection stays open

    # The same refusals through the calls themselves.
    def put(vectors: list[Any], name: str = index.name, context: str = ctx) -> Any:
        return client.append_turns_vectors(context, [(TurnSpec(b"x"), vectors)], index=name)

    for expected, call in (
        (InvalidArgument, lambda: put([[1.0]])),  # one dimension in the call, not the index's
        (NotFound, lambda: put([one], name="none")),
        (NotFound, lambda: put([one], context=_name("none"))),
        (InvalidArgument, lambda: client.vector_search_turns(index.name, [1.0, 0.0])),
        (NotFound, lambda: client.vector_search_turns("none", one)),
        (NotFound, lambda: client.vector_search_turns(index.name, one, context=_name("none"))),
    ):
        with pytest.raises(expected):
            call()
    assert client.head(ctx).head_turn_id == 0  # nothing was appended
    assert client.last(ctx).turns == []
    assert _vector_count(client, index.name) == 0


def test_durability_idempotency_and_versions(
    client: ctxstore.Client, vector_server: ServerProcess
) -> None:
    ctx = _name("ctx")
    client.open_context(ctx)
    index = client.vector_index_create(_name("idx"), 3)
    one = [(TurnSpec(b"v"), [_unit(0)])]
    (local,) = client.append_turns_vectors(ctx, one, index=index.name, durability="local")
    with pytest.raises(InvalidArgument):  # no replica: remote cannot be acknowledged
        client.append_turns_vectors(ctx, one, index=index.name, durability="remote")
    assert client.head(ctx).head_turn_id == local.turn.turn_id

    with ctxstore.Client(vector_server.addr, idempotency="auto") as auto:
        (keyed,) = auto.append_turns_vectors(ctx, one, index=index.name)
    info = client.turn_log(ctx, limit=1).turns[0]
    assert info.turn_id == keyed.turn.turn_id
    assert info.key is not None and info.key.startswith(b"ctxstore-auto:")

    class Version6Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 6)

    with Version6Client(vector_server.addr) as old:
        assert old.server_info().version == 6
        old.vector_search(ctx, index.name, _unit(0))  # version 6 has the search of entries
        for call in (
            lambda: old.append_turns_vectors(ctx, one, index=index.name),
            lambda: old.append_turns_vectors(ctx, [(TurnSpec(b"v"), [])], index=index.name),
            lambda: old.vector_search_turns(index.name, _unit(0)),
        ):
            with pytest.raises(NotSupported):
                call()
        # What a version-6 connection sends anyway is UNKNOWN_MESSAGE, the connection open.
        with pytest.raises(ctxstore.UnknownMessage):
            old.request(p.RawRequest(p.MessageType.VECTOR_SEARCH_TURNS, b""))
        old.ping()
    assert _vector_count(client, index.name) == 2

    keyed_spec = p.TurnSpecRecord(p.ParentKind.HEAD, 0, 0, 0, False, p.ExtrasRecord(b"k"), b"x")
    unkeyed = replace(keyed_spec, extras=p.ExtrasRecord())
    all_keyed, mixed = (
        p.AppendTurnsVectors(1, None, "i", 1, tuple(p.VectorTurnRecord(spec) for spec in specs))
        for specs in ((keyed_spec,), (keyed_spec, unkeyed))
    )
    assert resends_safely(all_keyed) and not resends_safely(mixed)  # as APPEND_TURNS
    assert resends_safely(p.VectorSearchTurns("i", (1.0,), 1))
    assert p.MessageType.APPEND_TURNS_VECTORS in p.TAKES_ACK_AFTER
    acked = p.AckAfter(p.AppendTurnsVectors(1, None, "i", 1, ()), p.ACK_AFTER_LOCAL)
    assert acked.required_version == 7


# --- the asyncio client -------------------------------------------------------------------------


async def test_the_asyncio_client_has_the_same_calls(vector_server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(vector_server.addr, timeout=20) as client:
        base = _name("async")
        await client.open_context(f"{base}/a", {"kind": "chat"})
        await client.open_context(f"{base}/b")
        index = await client.vector_index_create(_name("aidx"), 3, "cosine")
        first = await client.append_turns_vectors(
            f"{base}/a",
            [
                (TurnSpec(b"hello", labels={"role": "user"}), [_unit(0)]),
                (TurnSpec(b"hi there", labels={"role": "assistant"}), [_unit(50), _unit(15)]),
            ],
            index=index.name,
            durability="local",
        )
        (other,) = await client.append_turns_vectors(
            f"{base}/b", [(TurnSpec(b"elsewhere"), [_unit(8)])], index=index.name
        )
        hits = await client.vector_search_turns(index.name, _unit(12), 3, name_prefix=base)
        assert _ids(hits) == [first[1].turn.turn_id, other.turn.turn_id, first[0].turn.turn_id]
        assert hits[0].score == pytest.approx(_cosine(_unit(12), _unit(15)), abs=1e-6)
        assert hits[0].turn == await client.get_turn(first[1].turn.turn_id)
        tagged = await client.vector_search_turns(
            index.name, _unit(12), 3, tags={"kind": "chat"}, labels={"role": "user"}
        )
        assert _ids(tagged) == [first[0].turn.turn_id]
        paged = await client.vector_search_turns(index.name, _unit(12), 1, offset=1, exact=True)
        assert _ids(paged) == [other.turn.turn_id] and paged.method == "exact"
        with pytest.raises(ValueError):
            await client.append_turns_vectors(
                f"{base}/a", [(TurnSpec(b"x"), [[math.nan, 0.0, 0.0]])], index=index.name
            )
        with pytest.raises(InvalidArgument):
            await client.vector_search_turns(index.name, [1.0, 0.0])
        with pytest.raises(NotFound):
            await client.vector_search_turns(_name("none"), _unit(0))
        await client.vector_index_drop(index.name)


# --- the codec (no server) ----------------------------------------------------------------------


def _frame(message: p.Request) -> bytes:
    return b"".join(p.encode_request(7, message))


_SPEC = p.TurnSpecRecord(
    p.ParentKind.HEAD, 0, 1, 0, False, p.ExtrasRecord(b"k", (("role", "user"),), (5,)), b"hi"
)
_TURN = p.TurnRecord(42, 41, 3, 7, 1, 9, bytes(range(32)), 5, 0, 1_767_225_600_000)
REQUESTS: list[p.Request] = [
    p.AppendTurnsVectors(
        "thread-1",
        42,
        "recall",
        2,
        (
            p.VectorTurnRecord(_SPEC, ((1.0, 2.0), (0.25, -0.5))),
            p.VectorTurnRecord(
                p.TurnSpecRecord(p.ParentKind.ROOT, 0, 0, 0, True, p.ExtrasRecord(), b"x" * 9000)
            ),
            p.VectorTurnRecord(
                p.TurnSpecRecord(
                    p.ParentKind.TURN, 7, 0, 0, False, p.ExtrasRecord(), bytes(32), by_hash=True
                ),
                ((3.0, 4.0),),
            ),
        ),
    ),
    p.AppendTurnsVectors(3, None, "i", 0, (p.VectorTurnRecord(_SPEC),)),
    p.VectorSearchTurns("recall", (0.5, -1.25, 3.0), 10),
    p.VectorSearchTurns(
        "recall",
        (1.0,),
        5,
        2,
        p.VECTOR_SEARCH_EXACT | p.VECTOR_SEARCH_TYPE_TAG,
        64,
        "thread-1",
        "user-",
        (("project", "x"), ("team", "é")),
        (("role", "user"),),
        2**64 - 1,
    ),
    p.VectorSearchTurns("recall", (1.0,), 5, context=3, type_tag=0),
]
RESPONSES: list[p.Response] = [
    p.AppendedTurnsResponse(
        (p.AppendedTurnRecord(_TURN, True, False),),
        p.MessageType.APPEND_TURNS_VECTORS.response_type,
    ),
    p.TurnHitsResponse(p.VectorMethod.EXACT, 0, ()),
    p.TurnHitsResponse(
        p.VectorMethod.GRAPH,
        123,
        (p.TurnHitRecord(_TURN, 0.75), p.TurnHitRecord(_TURN, -1.5)),
    ),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: r.NAME)
def test_requests_round_trip_and_refuse_trailing_bytes(request_: p.Request) -> None:
    frame = _frame(request_)
    header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
    assert header.msg_type == request_.MSG_TYPE and request_.required_version == 7
    assert p.decode_request(header.msg_type, frame[p.HEADER_BYTES :]) == request_
    with pytest.raises(ProtocolError):
        p.decode_request(header.msg_type, frame[p.HEADER_BYTES :] + b"\x00")
    with pytest.raises(ProtocolError):
        p.decode_request(header.msg_type, frame[p.HEADER_BYTES : -1])


@pytest.mark.parametrize("response", RESPONSES, ids=lambda r: r.NAME)
def test_responses_round_trip_and_refuse_trailing_bytes(response: p.Response) -> None:
    frame = p.encode_response(7, response)
    body = frame[p.HEADER_BYTES :]
    assert p.decode_response(response.msg_type, body) == response
    with pytest.raises(ProtocolError):
        p.decode_response(response.msg_type, body + b"\x00")
    with pytest.raises(ProtocolError):
        p.decode_response(response.msg_type, body[:-1])


def test_the_layouts_are_the_documented_bytes() -> None:
    spec = p.TurnSpecRecord(p.ParentKind.HEAD, 0, 0, 0, False, p.ExtrasRecord(), b"v")
    append = _frame(p.AppendTurnsVectors("c", 9, "i", 1, (p.VectorTurnRecord(spec, ((2.0,),)),)))
    assert append[p.HEADER_BYTES :] == (
        b"\x01\x00c" + b"\x01\x00\x00\x00" + (9).to_bytes(8, "little")  # as APPEND_TURNS
        + b"\x01\x00i" + b"\x01\x00" + b"\x01\x00"  # the index, dims 1, one turn
        + spec.encode()  # its TURN_SPEC
        + b"\x01" + b"\x00\x00\x00\x40"  # one vector: 2.0f
    )  # fmt: skip
    search = _frame(p.VectorSearchTurns("i", (1.0,), 10, 2, 3, 0, 0, "p", (("k", "v"),), (), 7))[
        p.HEADER_BYTES :
    ]
    assert search == (
        b"\x01\x00i"  # the index
        + b"\x01\x00" + b"\x00\x00\x80\x3f"  # dims 1, 1.0f
        + b"\x0a\x00" + b"\x02\x00" + b"\x03" + b"\x00" + b"\x00\x00"  # k, offset, flags, ef
        + b"\x00\x00" + bytes(8)  # no context
        + b"\x01\x00p"  # the name prefix
        + b"\x01\x00" + b"\x01\x00k\x01\x00v"  # TAGS
        + b"\x00\x00"  # LABELS: none
        + (7).to_bytes(8, "little")  # type_tag
    )  # fmt: skip
    hit = p.TurnHitRecord(_TURN, 0.5).encode()
    assert len(hit) == p.TURN_HIT_BYTES == 92 and hit == _TURN.encode() + b"\x00\x00\x00\x3f"
    # A large payload travels as its own chunk of the frame, its vectors after it.
    big = p.TurnSpecRecord(p.ParentKind.HEAD, 0, 0, 0, False, p.ExtrasRecord(), b"x" * 5000)
    chunks = p.AppendTurnsVectors(1, None, "i", 1, (p.VectorTurnRecord(big, ((1.0,),)),))
    parts = chunks.body_chunks()
    assert parts[1] == big.payload and parts[2] == b"\x01\x00\x00\x80\x3f"


def test_strict_decoding_and_what_the_encoders_refuse() -> None:
    search = p.MessageType.VECTOR_SEARCH_TURNS
    good = _frame(REQUESTS[3])[p.HEADER_BYTES :]
    flags_at = 2 + 6 + 2 + 4 + 2 + 2  # the index, dims and the vector, k, offset
    assert good[flags_at] == p.VECTOR_SEARCH_EXACT | p.VECTOR_SEARCH_TYPE_TAG
    for bad_body in (
        good[:flags_at] + b"\x04" + good[flags_at + 1 :],  # an unknown flag bit
        good[: flags_at + 1] + b"\x01" + good[flags_at + 2 :],  # reserved set
    ):
        with pytest.raises(ProtocolError):
            p.decode_request(search, bad_body)
    plain = _frame(p.VectorSearchTurns("i", (1.0,), 5))[p.HEADER_BYTES :]
    with pytest.raises(ProtocolError):  # a type tag without TYPE_TAG
        p.decode_request(search, plain[:-8] + (1).to_bytes(8, "little"))
    with pytest.raises(ValueError):  # more labels than any turn carries
        _frame(p.VectorSearchTurns("i", (1.0,), 5, labels=(("k", "v"),) * 17))
    sixteen = _frame(p.VectorSearchTurns("i", (1.0,), 5, labels=(("k", "v"),) * 16))
    at = len(sixteen) - 8 - 16 * 6 - 2  # LABELS' count: before 16 labels and the type tag
    assert sixteen[at : at + 2] == b"\x10\x00"
    seventeen = sixteen[p.HEADER_BYTES : at] + b"\x11\x00" + b"\x01\x00k\x01\x00v" * 17
    assert len(p.decode_request(search, sixteen[p.HEADER_BYTES :]).labels) == 16  # type: ignore[attr-defined]
    with pytest.raises(ProtocolError):
        p.decode_request(search, seventeen + sixteen[-8:])
    with pytest.raises(ValueError):
        _frame(p.VectorSearchTurns("i", (1.0,), 5, tags=(("k", "v"),) * 33))
    with pytest.raises(ValueError):
        _frame(p.VectorSearchTurns("i", (1.0,), 5, type_tag=3))  # without TYPE_TAG

    append = p.MessageType.APPEND_TURNS_VECTORS
    no_turns = _frame(p.AppendTurnsVectors(3, None, "i", 0, (p.VectorTurnRecord(_SPEC),)))
    body = no_turns[p.HEADER_BYTES :]
    count_at = 2 + 8 + 4 + 8 + 3 + 2
    with pytest.raises(ProtocolError):  # no turns
        p.decode_request(append, body[:count_at] + b"\x00\x00")
    with pytest.raises(ValueError):
        _frame(p.AppendTurnsVectors(3, None, "i", 0, ()))
    with pytest.raises(ValueError):  # a vector of another dimension than the request's
        _frame(p.AppendTurnsVectors(3, None, "i", 2, (p.VectorTurnRecord(_SPEC, ((1.0,),)),)))
    with pytest.raises(ValueError):  # more vectors than a u8 counts
        _frame(p.AppendTurnsVectors(3, None, "i", 1, (p.VectorTurnRecord(_SPEC, ((1.0,),) * 256),)))

    hits = p.MessageType.VECTOR_SEARCH_TURNS.response_type
    answer = p.encode_response(1, RESPONSES[2])[p.HEADER_BYTES :]
    for bad_body in (
        b"\x02" + answer[1:],  # an unknown method
        answer[:1] + b"\x01" + answer[2:],  # reserved set
        answer[:6] + (1001).to_bytes(2, "little") + answer[8:],  # more hits than any k
    ):
        with pytest.raises(ProtocolError):
            p.decode_response(hits, bad_body)


def test_answers_that_break_their_promises_are_refused() -> None:
    """The pair checks of the calls: hits past k, out of order, twice, of another type; an
    append answered for another count of turns or another payload."""

    def turn(turn_id: int, type_tag: int = 2) -> p.TurnRecord:
        return p.TurnRecord(turn_id, 0, 3, 0, 0, type_tag, bytes(32), 1, 0, 1)

    def answer(*hits: tuple[int, float]) -> p.TurnHitsResponse:
        records = tuple(p.TurnHitRecord(turn(turn_id), score) for turn_id, score in hits)
        return p.TurnHitsResponse(p.VectorMethod.EXACT, 3, records)

    args = ("i", [1.0], 2, 0, None, None, None, None, 2, False, 0)
    search = ops.vector_search_turns(*args)
    ok = search.finish(answer((9, 0.9), (4, 0.5)))
    assert [hit.turn.turn_id for hit in ok] == [9, 4] and ok.method == "exact"
    assert isinstance(ok[0].turn, ctxstore.Turn) and ok[0].score == 0.9 and len(ok) == 2
    assert [h.turn.turn_id for h in search.finish(answer((4, 0.5), (9, 0.5)))] == [4, 9]
    for broken in (
        answer((4, 0.5), (9, 0.9)),  # not best first
        answer((9, 0.5), (4, 0.5)),  # equal scores out of TurnID order
        answer((4, 0.5), (4, 0.4)),  # twice
        answer((4, 0.5), (5, 0.4), (6, 0.3)),  # more than k
        p.TurnHitsResponse(p.VectorMethod.EXACT, 1, (p.TurnHitRecord(turn(4, 1), 0.5),)),
    ):
        with pytest.raises(ProtocolError):
            search.finish(broken)

    plan = ops.append_turns_vectors(3, [(TurnSpec(b"a"), [[1.0]])], "i", None, None, None)
    op = next(plan)
    assert isinstance(op, ops.Op) and isinstance(op.request, p.AppendTurnsVectors)
    assert op.request.dims == 1 and op.request.turns[0].vectors == ((1.0,),)
    good = p.TurnRecord(8, 7, 3, 1, 0, 0, ctxstore.blob_hash(b"a"), 1, 0, 1)
    kind = p.MessageType.APPEND_TURNS_VECTORS.response_type
    appended = op.finish(p.AppendedTurnsResponse((p.AppendedTurnRecord(good, False, False),), kind))
    assert [a.turn.turn_id for a in appended] == [8]
    for wrong in (
        (),  # no turn for the one sent
        (
            p.AppendedTurnRecord(replace(good, payload_hash=bytes(32)), False, False),
        ),  # another payload
    ):
        with pytest.raises((ProtocolError, ctxstore.IntegrityError)):
            op.finish(p.AppendedTurnsResponse(wrong, kind))


GOLDEN_V7_EXPECTED: dict[str, tuple[int, p.Message]] = {
    "append_turns_vectors": (
        86,
        p.AppendTurnsVectors(
            "thread-1",
            42,
            "recall",
            3,
            (
                p.VectorTurnRecord(
                    p.TurnSpecRecord(
                        p.ParentKind.HEAD,
                        0,
                        1,
                        0,
                        False,
                        p.ExtrasRecord(b"", (("role", "user"),)),
                        b"hi",
                    ),
                    ((1.0, 0.0, -0.5),),
                ),
                p.VectorTurnRecord(
                    p.TurnSpecRecord(p.ParentKind.HEAD, 0, 2, 0, False, p.ExtrasRecord(), b"ok")
                ),
            ),
        ),
    ),
    "turns_stored": (
        86,
        p.AppendedTurnsResponse(
            (
                p.AppendedTurnRecord(
                    p.TurnRecord(
                        42,
                        41,
                        3,
                        7,
                        1,
                        0x1122_3344_5566_7788,
                        bytes(range(0xA0, 0xC0)),
                        5,
                        0,
                        1_767_225_600_000,
                    ),
                    False,
                    False,
                ),
            ),
            p.MessageType.APPEND_TURNS_VECTORS.response_type,
        ),
    ),
    "vector_search_turns": (
        87,
        p.VectorSearchTurns(
            "recall",
            (1.0, 0.0, 0.0),
            5,
            0,
            p.VECTOR_SEARCH_TYPE_TAG,
            0,
            0,
            "user-42/",
            (("project", "x"),),
            (("role", "user"),),
            1,
        ),
    ),
    "turn_hits": (
        87,
        p.TurnHitsResponse(
            p.VectorMethod.GRAPH,
            300,
            (
                p.TurnHitRecord(
                    p.TurnRecord(
                        42,
                        41,
                        3,
                        7,
                        1,
                        0x1122_3344_5566_7788,
                        bytes(range(0xA0, 0xC0)),
                        5,
                        0,
                        1_767_225_600_000,
                    ),
                    0.75,
                ),
            ),
        ),
    ),
}


def test_the_golden_frames_of_version_7() -> None:
    frames = golden_frames((GOLDEN_V7,))
    assert set(frames) == set(GOLDEN_V7_EXPECTED)
    for name, (req_id, expected) in GOLDEN_V7_EXPECTED.items():
        frame = frames[name]
        header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
        assert header.req_id == req_id and header.len == len(frame) - p.HEADER_BYTES, name
        assert header.msg_type == expected.msg_type and header.flags == 0, name
        body = frame[p.HEADER_BYTES :]
        if isinstance(expected, p.Request):
            assert p.decode_request(header.msg_type, body, header.flags) == expected, name
            assert b"".join(p.encode_request(req_id, expected)) == frame, name
        else:
            assert isinstance(expected, p.Response)
            assert p.decode_response(header.msg_type, body, header.flags) == expected, name
            assert p.encode_response(req_id, expected) == frame, name
