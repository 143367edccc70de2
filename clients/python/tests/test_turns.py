"""Turns for agent frameworks (protocol version 2, decision 0009) through the blocking client
against a real ctxstore-server: idempotent keys across retries and restarts, explicit parents
(time travel), the turn log across branches with label filters and cursors, what forks and
clones inherit, the window since the latest summary, batches all or none, links, limits, and
random keys and labels round-tripped through the server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxstore
from ctxstore import TurnSpec
from ctxstore import _protocol as p

from conftest import ServerProcess, new_server


@pytest.fixture(scope="module")
def turns_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server of this module alone (tests count turns in its STATS)."""
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def client(turns_server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(turns_server.addr, timeout=20) as c:
        yield c


def unique(prefix: str = "t") -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ids(turns: object) -> list[int]:
    return [turn.turn_id for turn in turns]  # type: ignore[attr-defined]


# --- keys: idempotent appends ------------------------------------------------------------------


def test_a_retried_keyed_append_answers_the_first_turn_and_writes_nothing(
    client: ctxstore.Client, turns_server: ServerProcess
) -> None:
    name = unique()
    client.open_context(name)
    first = client.append(name, b"tool call", key="step-1", labels={"run_id": "r1"})
    assert not first.existing and first.turn.parent_turn_id == 0
    head = client.head(name)
    turns_before = client.stats().turns
    # The retry of a caller that lost its connection: a new connection, the same append
    # (even its stale expected head: an existing key answers before the compare-and-set).
    with ctxstore.Client(turns_server.addr) as retrying:
        again = retrying.append(
            name, b"tool call", key="step-1", labels={"run_id": "r1"}, expected_head=0
        )
        other_payload = retrying.append(name, b"something else", key=b"step-1")
    for answer in (again, other_payload):
        assert answer.existing and answer.turn == first.turn
    assert client.head(name) == head
    assert client.stats().turns == turns_before
    assert ids(client.iter_turn_log(name)) == [first.turn_id]
    found = client.turn_by_key(name, "step-1")
    assert found is not None and found.turn_id == first.turn_id
    assert found.key == b"step-1" and found.labels == {"run_id": "r1"}
    assert client.turn_by_key(name, "step-2") is None
    with pytest.raises(ctxstore.NotFound):
        client.turn_by_key(unique("missing"), "step-1")  # an unknown context is not None


def test_keys_survive_a_kill_and_a_retry_after_it_is_existing(own_server: ServerProcess) -> None:
    with ctxstore.Client(own_server.addr) as client:
        client.open_context("durable-turns")
        specs = [TurnSpec(b"a", key="a"), TurnSpec(b"b", key="b", summary=True)]
        written = client.append_turns("durable-turns", specs)
    own_server.kill()  # SIGKILL: only what was acknowledged durably is there
    own_server.start()
    with ctxstore.Client(own_server.addr) as client:
        retried = client.append_turns("durable-turns", specs)
        assert [a.existing for a in retried] == [True, True]
        assert [a.turn for a in retried] == [a.turn for a in written]
        window = client.window("durable-turns", payloads=True)
        assert [(t.key, t.summary, t.payload) for t in window] == [(b"b", True, b"b")]


def test_the_same_key_twice_in_one_batch_is_one_turn(client: ctxstore.Client) -> None:
    ctx = client.create_context().context_id
    answers = client.append_turns(ctx, [TurnSpec(b"x", key="k"), TurnSpec(b"y", key="k")])
    assert [a.existing for a in answers] == [False, True]
    assert answers[1].turn == answers[0].turn
    assert client.head(ctx).head_turn_id == answers[0].turn_id


# --- explicit parents: time travel ---------------------------------------------------------


def test_an_explicit_parent_moves_the_head_and_keeps_the_old_branch(
    client: ctxstore.Client,
) -> None:
    ctx = client.create_context().context_id
    a, b, c = (client.append(ctx, body) for body in (b"a", b"b", b"c"))
    d = client.append(ctx, b"d", parent=a.turn_id)  # time travel: after a, not after c
    assert (d.turn.parent_turn_id, d.depth) == (a.turn_id, 1)
    assert client.head(ctx).head_turn_id == d.turn_id
    assert ids(client.last(ctx)) == [a.turn_id, d.turn_id]
    assert ids(client.read_page(ctx)) == [a.turn_id, d.turn_id]
    # Every turn of the context, on both branches, newest first.
    assert ids(client.iter_turn_log(ctx)) == [d.turn_id, c.turn_id, b.turn_id, a.turn_id]
    # An old turn of the abandoned branch is still the context's: a parent again.
    e = client.append(ctx, b"e", parent=c.turn_id, expected_head=d.turn_id)
    assert (e.turn.parent_turn_id, e.depth) == (c.turn_id, 3)
    root = client.append(ctx, b"r", parent="root")
    assert (root.turn.parent_turn_id, root.depth) == (0, 0)
    assert client.head(ctx).head_turn_id == root.turn_id
    # A stale expected head still conflicts with a parent given.
    with pytest.raises(ctxstore.Conflict) as conflict:
        client.append(ctx, b"x", parent=a.turn_id, expected_head=d.turn_id)
    assert conflict.value.actual_head == root.turn_id


def test_a_parent_the_context_does_not_own_is_invalid_and_nothing_is_written(
    client: ctxstore.Client,
) -> None:
    mine = client.create_context().context_id
    theirs = client.create_context().context_id
    own = client.append(mine, b"mine")
    foreign = client.append(theirs, b"theirs")
    turns_before = client.stats().turns
    for parent in (foreign.turn_id, 10**15):
        with pytest.raises((ctxstore.InvalidArgument, ctxstore.NotFound)):
            client.append(mine, b"x", parent=parent)
    with pytest.raises(ctxstore.InvalidArgument, match="not a turn of context"):
        client.append(mine, b"x", parent=foreign.turn_id)
    assert client.head(mine).head_turn_id == own.turn_id
    assert client.stats().turns == turns_before
    with pytest.raises(ValueError, match="root"):
        client.append(mine, b"x", parent=0)


# --- the turn log --------------------------------------------------------------------------


def test_the_turn_log_lists_every_branch_newest_first_filtered_and_paged(
    client: ctxstore.Client,
) -> None:
    name = unique()
    client.open_context(name)
    written: list[tuple[int, dict[str, str], bytes]] = []
    parent: int | None = None
    for step in range(30):
        labels = {"run_id": f"r{step % 3}", "step": str(step)}
        if step % 2:
            labels["source"] = "loop"
        body = b"step %d" % step
        # Every fifth step travels back to the root's first child: many branches.
        if step and step % 5 == 0:
            parent = written[1][0] if len(written) > 1 else None
        appended = client.append(name, body, labels=labels, parent=parent)
        parent = None
        written.append((appended.turn_id, labels, body))
    newest_first = list(reversed(written))

    everything = list(client.iter_turn_log(name, page_size=7))
    assert ids(everything) == [turn_id for turn_id, _, _ in newest_first]
    assert [t.labels for t in everything] == [labels for _, labels, _ in newest_first]

    wanted = {"run_id": "r1", "source": "loop"}  # a conjunction, filtered by the server
    expected = [(i, body) for i, labels, body in newest_first if wanted.items() <= labels.items()]
    assert expected
    # Page by page, following the cursor by hand; short pages do not end the listing.
    pages = []
    cursor = None
    while True:
        page = client.turn_log(name, wanted, cursor=cursor, limit=2, payloads=True)
        assert len(page) <= 2
        pages.append(page)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert [(t.turn_id, t.payload) for page in pages for t in page] == expected
    assert len(pages) >= len(expected) // 2
    assert [t.payload for t in client.iter_turn_log(name, wanted, payloads=True)] == [
        body for _, body in expected
    ]
    assert list(client.iter_turn_log(name, {"run_id": "nobody"})) == []
    # Limits of a page: 1..=1000 (the client refuses 0 before sending).
    for limit in (0, 1001):
        with pytest.raises(ctxstore.TooLarge, match="turn-log page"):
            client.request(p.TurnLog(name, (), None, limit, 0))
    with pytest.raises(ValueError):
        client.turn_log(name, limit=0)
    assert len(client.turn_log(name, limit=1000)) == 30


# --- forks and clones --------------------------------------------------------------------


def test_forks_inherit_their_base_chain_and_clones_everything_up_to_the_clone(
    client: ctxstore.Client,
) -> None:
    source = unique("src")
    client.open_context(source)
    k1 = client.append(source, b"1", key="k1")
    k2 = client.append(source, b"2", key="k2")
    k3 = client.append(source, b"3", key="k3")
    k4 = client.append(source, b"4", key="k4", parent=k1.turn_id)  # a branch

    fork = client.fork(k2.turn_id).context_id
    found = {key: client.turn_by_key(fork, key) for key in ("k1", "k2", "k3", "k4")}
    assert {key: t and t.turn_id for key, t in found.items()} == {
        "k1": k1.turn_id,
        "k2": k2.turn_id,
        "k3": None,  # not on the fork's base chain
        "k4": None,
    }
    assert ids(client.iter_turn_log(fork)) == [k2.turn_id, k1.turn_id]
    own = client.append(fork, b"fork's own", key="k3")  # k3 is free in the fork
    assert not own.existing and own.turn.context_id == fork
    assert ids(client.iter_turn_log(fork)) == [own.turn_id, k2.turn_id, k1.turn_id]
    retried = client.append(fork, b"2", key="k2")  # an inherited key answers its turn
    assert retried.existing and retried.turn == k2.turn and retried.turn.context_id != fork
    # An inherited turn may be a parent; one the fork does not own may not.
    branch = client.append(fork, b"after k1", parent=k1.turn_id)
    assert branch.turn.parent_turn_id == k1.turn_id
    with pytest.raises(ctxstore.InvalidArgument):
        client.append(fork, b"x", parent=k3.turn_id)

    clone = client.clone_context(source, unique("clone")).context_id
    k5 = client.append(source, b"5", key="k5")  # after the clone: not the clone's
    all_four = [k4.turn_id, k3.turn_id, k2.turn_id, k1.turn_id]
    assert ids(client.iter_turn_log(clone)) == all_four
    assert ids(client.iter_turn_log(source)) == [k5.turn_id, *all_four]
    for key, turn in (("k1", k1), ("k3", k3), ("k4", k4)):
        hit = client.turn_by_key(clone, key)
        assert hit is not None and hit.turn_id == turn.turn_id and hit.key == key.encode()
    assert client.turn_by_key(clone, "k5") is None
    mine = client.append(clone, b"clone's own", labels={"who": "clone"})
    assert ids(client.iter_turn_log(clone, page_size=1)) == [mine.turn_id, *all_four]
    assert ids(client.iter_turn_log(clone, {"who": "clone"})) == [mine.turn_id]


# --- summaries and the window ------------------------------------------------------------


def test_the_window_starts_at_the_latest_summary_of_the_chain(client: ctxstore.Client) -> None:
    ctx = client.create_context().context_id
    a, b = client.append(ctx, b"a"), client.append(ctx, b"b")
    assert ids(client.window(ctx)) == [a.turn_id, b.turn_id]  # no summary: the whole chain
    summary = client.append(ctx, b"a and b, briefly", summary=True)
    assert summary.turn.summary and not b.turn.summary
    c, d = client.append(ctx, b"c"), client.append(ctx, b"d")
    window = client.window(ctx, payloads=True)
    assert [t.payload for t in window] == [b"a and b, briefly", b"c", b"d"]
    assert window[0].summary and window.tip_depth == d.depth
    assert [t.payload for t in client.window(ctx, 2, payloads=True)] == [b"c", b"d"]
    assert client.get_turn(summary.turn_id).summary  # the flag on version-1 reads too
    # A later summary moves the window; a branch from before the summary has none.
    later = client.append(ctx, b"everything, briefly", summary=True)
    assert ids(client.window(ctx)) == [later.turn_id]
    branch = client.append(ctx, b"b2", parent=b.turn_id)
    assert ids(client.window(ctx)) == [a.turn_id, b.turn_id, branch.turn_id]
    # The whole chain stays readable, page by page, with the extras.
    page = client.read_page(ctx, 2)
    assert ids(page) == [b.turn_id, branch.turn_id] and page.next_before == b.turn_id
    older = client.read_page(ctx, 2, before=page.next_before)
    assert ids(older) == [a.turn_id] and older.next_before == 0
    assert ids(client.read_page(ctx, 2, from_depth=1)) == [b.turn_id, branch.turn_id]
    empty = client.create_context().context_id
    assert len(client.window(empty)) == 0 and client.window(empty).tip_depth == 0
    with pytest.raises(ctxstore.InvalidArgument, match="not on the chain"):
        client.read_page(ctx, before=c.turn_id)  # c is on the old branch


# --- batches -------------------------------------------------------------------------------


def test_a_batch_is_one_chain_written_all_or_none(client: ctxstore.Client) -> None:
    ctx = client.create_context().context_id
    start = client.append(ctx, b"system")
    step = [
        TurnSpec(b'{"tool_call": 1}', key="s1-call", labels={"kind": "call"}),
        TurnSpec(b'{"tool_result": 1}', key="s1-result", labels={"kind": "result"}),
        TurnSpec(b'{"message": "done"}', key="s1-message", links=[start.turn_id]),
    ]
    turns_before = client.stats().turns
    # An over-limit key in the third turn refuses the whole batch: nothing is written.
    bad = [*step[:2], TurnSpec(b"x", key="k" * 65)]
    with pytest.raises(ctxstore.TooLarge, match="turn key"):
        client.append_turns(ctx, bad)
    # So does a link to a missing turn, and a stale expected head.
    with pytest.raises(ctxstore.NotFound):
        client.append_turns(ctx, [*step[:2], TurnSpec(b"x", links=[10**15])])
    with pytest.raises(ctxstore.Conflict):
        client.append_turns(ctx, step, expected_head=0)
    assert client.head(ctx).head_turn_id == start.turn_id
    assert client.turn_by_key(ctx, "s1-call") is None
    assert client.stats().turns == turns_before

    written = client.append_turns(ctx, step, expected_head=start.turn_id)
    parents = [a.turn.parent_turn_id for a in written]
    assert parents == [start.turn_id, written[0].turn_id, written[1].turn_id]
    assert [a.depth for a in written] == [1, 2, 3]
    assert client.head(ctx).head_turn_id == written[-1].turn_id
    assert client.stats().turns == turns_before + 3
    page = client.read_page(ctx, 3, payloads=True)
    assert [t.payload for t in page] == [spec.payload for spec in step]
    assert [t.key for t in page] == [b"s1-call", b"s1-result", b"s1-message"]
    assert [t.labels for t in page] == [{"kind": "call"}, {"kind": "result"}, {}]
    assert page[2].links == (start.turn_id,)
    # A batch may hang its turns anywhere the context owns; by hash too.
    mixed = client.append_turns(
        ctx,
        [
            TurnSpec(payload_hash=start.payload_hash, parent="root"),
            TurnSpec(b"after system", parent=start.turn_id, summary=True),
            TurnSpec(b"next"),
        ],
    )
    assert mixed[0].deduped and mixed[0].turn.parent_turn_id == 0
    assert mixed[1].turn.parent_turn_id == start.turn_id and mixed[1].turn.summary
    assert mixed[2].turn.parent_turn_id == mixed[1].turn_id
    assert ids(client.window(ctx)) == [mixed[1].turn_id, mixed[2].turn_id]


def test_a_batch_of_64_turns_is_the_limit(client: ctxstore.Client) -> None:
    ctx = client.create_context().context_id
    with pytest.raises(ctxstore.TooLarge, match="batch"):
        client.append_turns(ctx, [TurnSpec(b"%d" % i) for i in range(65)])
    assert client.head(ctx).is_empty
    written = client.append_turns(ctx, [TurnSpec(b"%d" % i, key=f"{i}") for i in range(64)])
    assert [a.depth for a in written] == list(range(64))
    with pytest.raises(ValueError, match="at least one"):
        client.append_turns(ctx, [])


# --- links and limits ----------------------------------------------------------------------


def test_links_point_at_turns_of_any_context(client: ctxstore.Client) -> None:
    workflow = client.create_context().context_id
    called = [client.create_context().context_id for _ in range(8)]
    children = [client.append(ctx, b"child %d" % i) for i, ctx in enumerate(called)]
    call = client.append(workflow, b"called 8 threads", links=[c.turn_id for c in children])
    seen = client.read_page(workflow)[0]
    assert seen.turn_id == call.turn_id and seen.links == tuple(c.turn_id for c in children)
    log = list(client.iter_turn_log(workflow))
    assert log[0].links == seen.links
    with pytest.raises(ctxstore.TooLarge, match="links"):
        client.append(workflow, b"x", links=[children[0].turn_id] * 9)
    with pytest.raises(ctxstore.NotFound):
        client.append(workflow, b"x", links=[10**15])
    assert client.head(workflow).head_turn_id == call.turn_id


def test_turn_limits_are_too_large_and_nothing_is_applied(client: ctxstore.Client) -> None:
    ctx = client.create_context().context_id
    turns_before = client.stats().turns
    too_large = [
        {"key": "k" * 65},
        {"labels": {f"l{i}": "v" for i in range(17)}},
        {"labels": {"k" * 65: "v"}},
        {"labels": {"": "v"}},
        {"labels": {"a": "v" * 1024}},  # keys and values together over 1 KiB
    ]
    for options in too_large:
        with pytest.raises(ctxstore.TooLarge) as error:
            client.append(ctx, b"x", **options)  # type: ignore[arg-type]
        assert error.value.message
    client.ping()  # the connection stayed open
    assert client.head(ctx).is_empty and client.stats().turns == turns_before
    # At the limits exactly, everything is accepted and read back.
    labels = {f"{i:02d}" + "k" * 30: "v" * 30 for i in range(16)}  # 16 x 62 = 992 bytes
    at_limit = client.append(ctx, b"x", key="k" * 64, labels=labels)
    found = client.turn_by_key(ctx, "k" * 64)
    assert found is not None and found.turn_id == at_limit.turn_id and found.labels == labels
    # What the layout cannot carry is refused before sending.
    for bad_key in ("", "k" * 256):
        with pytest.raises(ValueError):
            client.append(ctx, b"x", key=bad_key)
        with pytest.raises(ValueError):
            client.turn_by_key(ctx, bad_key)
    with pytest.raises(ValueError, match="exactly one"):
        client.append_turns(ctx, [TurnSpec()])


def test_turn_calls_on_a_version_1_connection_are_not_supported(
    turns_server: ServerProcess,
) -> None:
    class V1Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 1)

    with V1Client(turns_server.addr) as old:
        ctx = old.create_context().context_id
        plain = old.append(ctx, b"plain")  # APPEND_TURN, as before
        calls = [
            lambda: old.append(ctx, b"x", key="k"),
            lambda: old.append(ctx, b"x", parent="root"),
            lambda: old.append_by_hash(ctx, plain.payload_hash, summary=True),
            lambda: old.append_turns(ctx, [TurnSpec(b"x")]),
            lambda: old.turn_by_key(ctx, "k"),
            lambda: old.turn_log(ctx),
            lambda: old.window(ctx),
            lambda: old.read_page(ctx),
        ]
        for call in calls:
            with pytest.raises(ctxstore.NotSupported, match="version 2"):
                call()
        assert old.head(ctx).head_turn_id == plain.turn_id


# --- random keys, labels and links through the server --------------------------------------

label_keys = st.text(min_size=1, max_size=16).filter(lambda s: len(s.encode()) <= 64)
turn_keys = st.binary(min_size=1, max_size=64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=turn_keys,
    labels=st.dictionaries(label_keys, st.text(max_size=20), max_size=8).filter(
        lambda labels: sum(len(k.encode()) + len(v.encode()) for k, v in labels.items()) <= 1024
    ),
    link_count=st.integers(0, 8),
    summary=st.booleans(),
    payload=st.binary(max_size=300),
)
def test_keys_labels_links_round_trip_through_the_server(
    turns_server: ServerProcess,
    key: bytes,
    labels: dict[str, str],
    link_count: int,
    summary: bool,
    payload: bytes,
) -> None:
    with ctxstore.Client(turns_server.addr) as client:
        ctx = client.create_context().context_id
        targets = [client.append(ctx, b"target %d" % i).turn_id for i in range(link_count)]
        appended = client.append(
            ctx, payload, key=key, labels=labels, links=targets, summary=summary
        )
        for turn in (
            client.turn_by_key(ctx, key),
            client.read_page(ctx, 1, payloads=True)[0],
            next(iter(client.iter_turn_log(ctx, labels, payloads=True))),
        ):
            assert turn is not None and turn.turn_id == appended.turn_id
            assert (turn.key, turn.labels, turn.links, turn.summary) == (
                key,
                labels,
                tuple(targets),
                summary,
            )
        assert client.read_page(ctx, 1, payloads=True)[0].payload == payload


def test_turn_log_and_window_pages_cut_by_the_response_budget(tmp_root: Path) -> None:
    budget = 64 * 1024
    process = new_server(
        tmp_root,
        extra_args=["--blob-bytes-max", str(budget), "--response-bytes-max", str(budget)],
    )
    try:
        with ctxstore.Client(process.addr) as client:
            ctx = client.create_context().context_id
            bodies = [bytes([i]) * (budget // 2 - 100 + i) for i in range(7)]
            written = client.append_turns(
                ctx, [TurnSpec(body, labels={"big": "yes"}) for body in bodies]
            )
            page = client.turn_log(ctx, {"big": "yes"}, limit=1000, payloads=True)
            assert 0 < len(page) < 7 and page.next_cursor is not None
            log = list(client.iter_turn_log(ctx, {"big": "yes"}, payloads=True))
            assert [t.payload for t in log] == bodies[::-1]
            assert ids(log) == ids(reversed(written))
            # Without payloads nothing is cut.
            assert len(client.turn_log(ctx, limit=1000)) == 7
            # A window with payloads keeps the newest turns that fit; read_page goes on.
            window = client.window(ctx, payloads=True)
            assert 0 < len(window) < 7 and window[-1].turn_id == written[-1].turn_id
            older = client.read_page(ctx, before=window.next_before, payloads=True)
            assert older[-1].turn_id == written[-len(window) - 1].turn_id
    finally:
        process.stop()


def test_turn_pages_ship_zstd_bodies_which_the_client_inflates(tmp_root: Path) -> None:
    # Payloads of one record each: one stored as chunks (decision 0013) is shipped RAW.
    process = new_server(
        tmp_root, extra_args=["--payload-cache-bytes", "0", "--chunk-threshold", "off"]
    )
    line = b'{"role": "assistant", "content": "the quick brown fox"}\n'
    bodies = [line * (400 + i) for i in range(6)]
    try:
        with ctxstore.Client(process.addr) as client:
            ctx = client.create_context().context_id
            client.append_turns(ctx, [TurnSpec(body, labels={"n": "1"}) for body in bodies])
            flags = p.READ_WITH_PAYLOADS | p.READ_ACCEPT_ZSTD
            for request in (
                p.TurnLog(ctx, (), None, 100, flags),
                p.ReadPage(ctx, p.PageKind.WINDOW, 0, 0, 100, flags),
            ):
                raw = client.request(request)
                assert isinstance(raw, (p.TurnLogResponse, p.PageResponse))
                assert {e.payload.encoding for e in raw.entries} == {p.PayloadEncoding.ZSTD}
            log = client.iter_turn_log(ctx, {"n": "1"}, payloads=True)
            assert [t.payload for t in log] == bodies[::-1]
            assert [t.payload for t in client.window(ctx, payloads=True)] == bodies
        with ctxstore.Client(process.addr, accept_zstd=False) as client:
            page = client.read_page(ctx, 3, from_depth=0, payloads=True)
            assert [t.payload for t in page] == bodies[:3]
    finally:
        process.stop()


def test_a_version_1_connection_sees_turn_flags_0(turns_server: ServerProcess) -> None:
    class V1Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 1)

    with ctxstore.Client(turns_server.addr) as client:
        ctx = client.create_context().context_id
        summary = client.append(ctx, b"briefly", summary=True)
    with V1Client(turns_server.addr) as old:
        raw = old.request(p.GetTurn(summary.turn_id))
        assert isinstance(raw, p.TurnResponse)
        assert raw.turn.flags == 0


def test_find_turns_by_an_indexed_label_across_contexts(client: ctxstore.Client) -> None:
    run = f"run-{uuid.uuid4().hex}"
    expected = []
    for _ in range(3):
        ctx = client.create_context().context_id
        for step in range(3):
            labels = {"run_id": run if step != 1 else "other"}
            appended = client.append(ctx, f"step {step}".encode(), labels=labels)
            if step != 1:
                expected.append(appended.turn_id)
    found: list[int] = []
    before = 0
    while True:
        answer = client.request(p.FindTurns("run_id", run, before, 2))
        assert isinstance(answer, p.FoundTurnsResponse)
        for _turn, extras in answer.turns:
            assert ("run_id", run) in extras.labels
        found.extend(turn.turn_id for turn, _ in answer.turns)
        if answer.next_before == 0:
            break
        before = answer.next_before
    assert found == sorted(expected, reverse=True)
    with pytest.raises(ctxstore.InvalidArgument):
        client.request(p.FindTurns("step", "x", 0, 10))


def test_find_turns_methods_page_through_every_context(
    client: ctxstore.Client, turns_server: ServerProcess
) -> None:
    run = f"run-{uuid.uuid4().hex}"
    expected = []
    for _ in range(3):
        ctx = client.create_context().context_id
        for step in range(3):
            labels = {"run_id": run if step != 1 else "other"}
            appended = client.append(ctx, f"step {step}".encode(), key=f"k{step}", labels=labels)
            if step != 1:
                expected.append((appended.turn_id, ctx, f"k{step}".encode()))
    expected.sort(reverse=True)
    page = client.find_turns("run_id", run, limit=4)
    assert [(t.turn_id, t.context_id, t.key) for t in page] == expected[:4]
    assert page.next_before == expected[3][0]
    rest = client.find_turns("run_id", run, before=page.next_before, limit=4)
    assert [t.turn_id for t in rest] == [e[0] for e in expected[4:]]
    assert [
        (t.turn_id, t.labels["run_id"]) for t in client.iter_find_turns("run_id", run, page_size=2)
    ] == [(e[0], run) for e in expected]
    assert list(client.iter_find_turns("run_id", f"none-{run}")) == []
    for key, value, kwargs in (
        ("step", "x", {}),
        ("run_id", run, {"limit": 0}),
        ("run_id", run, {"before": 0}),
    ):
        with pytest.raises(ValueError):
            client.find_turns(key, value, **kwargs)  # type: ignore[arg-type]

    async def through_async() -> list[int]:
        async with ctxstore.AsyncClient(turns_server.addr) as aclient:
            first = await aclient.find_turns("run_id", run, limit=1)
            assert [t.turn_id for t in first] == [expected[0][0]]
            return [t.turn_id async for t in aclient.iter_find_turns("run_id", run, page_size=3)]

    assert asyncio.run(through_async()) == [e[0] for e in expected]
