"""Protocol version 2 through the blocking client against a real ctxstore-server: contexts by
name in every call, get-or-create, ALREADY_EXISTS, tags with compare-and-set, listing with
cursors, clone, the per-context key-value map, the limits, and a version-1 connection."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxstore
from ctxstore import _protocol as p

from conftest import ServerProcess, new_server


@pytest.fixture(scope="module")
def v2_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server of this module alone (the listing of every context counts them all)."""
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def client(v2_server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(v2_server.addr, timeout=20) as c:
        yield c


def unique(prefix: str = "t") -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class V1Client(ctxstore.Client):
    """A client that offers only protocol version 1."""

    PROTOCOL_VERSIONS = (1, 1)


# --- names everywhere -------------------------------------------------------------------------


def test_every_context_call_takes_a_name(client: ctxstore.Client) -> None:
    name = unique()
    info, created = client.open_context(name)
    assert created and info.name == name and info.is_empty and info.tags == {}
    cid = info.context_id
    assert client.head(name) == client.head(cid) == ctxstore.ContextHead(cid, 0, 0)

    first = client.append(name, b"first", type_tag=3, codec=1, expected_head=0)
    assert first.turn.context_id == cid and first.depth == 0
    second = client.append_by_hash(name, first.payload_hash, expected_head=first.turn_id)
    assert second.turn.parent_turn_id == first.turn_id and second.turn.context_id == cid
    third = client.append(name, b"third")
    with pytest.raises(ctxstore.Conflict) as conflict:
        client.append(name, b"stale", expected_head=first.turn_id)
    assert conflict.value.actual_head == third.turn_id

    assert client.head(name).head_turn_id == third.turn_id
    by_name = client.last(name, 10, payloads=True)
    assert by_name == client.last(cid, 10, payloads=True)
    assert [t.payload for t in by_name] == [b"first", b"first", b"third"]
    assert client.before(name, third.turn_id, 10) == client.before(cid, third.turn_id, 10)
    assert [t.turn_id for t in client.before(name, third.turn_id, 10)] == [
        first.turn_id,
        second.turn_id,
    ]
    assert client.range_by_depth(name, 1, 5) == client.range_by_depth(cid, 1, 5)
    assert [t.depth for t in client.range_by_depth(name, 1, 5)] == [1, 2]
    shown = client.context_info(name)
    assert shown == client.context_info(cid)
    assert (shown.head_turn_id, shown.head_depth) == (third.turn_id, 2)
    assert shown.created_at_unix_ms <= shown.updated_at_unix_ms


def test_names_are_unicode_and_exact(client: ctxstore.Client) -> None:
    name = unique("thread/ünï-😀")
    info, _ = client.open_context(name)
    assert client.context_info(name).context_id == info.context_id
    with pytest.raises(ctxstore.NotFound):
        client.context_info(name.upper())
    with pytest.raises(ctxstore.NotFound):
        client.context_info(name + " ")


def test_unknown_name_is_not_found_everywhere(client: ctxstore.Client) -> None:
    name = unique("missing")
    calls = [
        lambda: client.head(name),
        lambda: client.append(name, b"x"),
        lambda: client.append_by_hash(name, ctxstore.blob_hash(b"x")),
        lambda: client.last(name),
        lambda: client.before(name, 1),
        lambda: client.range_by_depth(name, 0),
        lambda: client.context_info(name),
        lambda: client.tag_context(name, {"a": "b"}),
        lambda: client.name_context(name, unique()),
        lambda: client.clone_context(name, unique()),
        lambda: client.kv_put(name, {b"k": b"v"}),
        lambda: client.kv_get(name, b"k"),
        lambda: client.kv_delete(name, [b"k"]),
        lambda: client.kv_list(name),
    ]
    for call in calls:
        with pytest.raises(ctxstore.NotFound) as info:
            call()
        assert name in info.value.message
    with pytest.raises(ctxstore.NotFound):
        client.context_info(2**63)  # an unknown id too
    client.ping()


def test_empty_names_never_leave_the_client(client: ctxstore.Client) -> None:
    for call in (
        lambda: client.head(""),
        lambda: client.append("", b"x"),
        lambda: client.context_info(""),
        lambda: client.open_context(""),
        lambda: client.clone_context(1, ""),
        lambda: client.list_contexts(name_prefix=""),
        lambda: client.list_contexts(updated_after_unix_ms=0),
        lambda: client.kv_list(1, limit=0),
    ):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError):
        client.head(True)
    client.ping()


# --- open, get-or-create, ALREADY_EXISTS, name ------------------------------------------------


def test_get_or_create(client: ctxstore.Client) -> None:
    name = unique()
    info, created = client.open_context(name, {"status": "idle"}, get_or_create=True)
    assert created and info.tags == {"status": "idle"}
    again, created_again = client.open_context(name, {"status": "other"}, get_or_create=True)
    assert not created_again
    assert again.context_id == info.context_id
    assert again.tags == {"status": "idle"}  # an existing context is answered as it is
    assert client.open_context(unique(), get_or_create=True).created


def test_open_forked_at_a_turn(client: ctxstore.Client) -> None:
    base = client.open_context(unique()).info
    turn = client.append(base.context_id, b"root")
    info, created = client.open_context(unique(), {"k": "v"}, base_turn_id=turn.turn_id)
    assert created and info.head_turn_id == turn.turn_id and info.head_depth == 0
    assert info.context_id != base.context_id
    with pytest.raises(ctxstore.NotFound):
        client.open_context(unique(), base_turn_id=2**62)


def test_duplicate_name_is_already_exists_with_the_owner(client: ctxstore.Client) -> None:
    name = unique()
    owner = client.open_context(name).info
    with pytest.raises(ctxstore.AlreadyExists) as info:
        client.open_context(name, {"x": "y"})
    assert info.value.code == 15 and info.value.context_id == owner.context_id
    assert name in info.value.message

    other = client.create_context()
    with pytest.raises(ctxstore.AlreadyExists) as info:
        client.name_context(other.context_id, name)
    assert info.value.context_id == owner.context_id
    with pytest.raises(ctxstore.AlreadyExists) as info:
        client.clone_context(other.context_id, name)
    assert info.value.context_id == owner.context_id
    # Nothing was applied, and the connection stays open.
    assert client.context_info(other.context_id).name is None
    assert client.context_info(name) == owner
    client.ping()


def test_name_an_unnamed_context_once(client: ctxstore.Client) -> None:
    ctx = client.create_context()  # a version-1 context: no name, no tags
    info = client.context_info(ctx.context_id)
    assert info.name is None and info.tags == {} and info.head == ctx
    name = unique()
    named = client.name_context(ctx.context_id, name)
    assert named.name == name and named.context_id == ctx.context_id
    assert client.head(name) == ctx
    with pytest.raises(ctxstore.InvalidArgument):
        client.name_context(name, unique())  # names do not change
    assert client.context_info(ctx.context_id).name == name


# --- tags -------------------------------------------------------------------------------------


def test_tags_set_remove_and_compare_and_set(client: ctxstore.Client) -> None:
    name = unique()
    info = client.open_context(name, {"status": "idle", "owner": "a", "z": "1"}).info
    assert info.tags == {"owner": "a", "status": "idle", "z": "1"}
    assert list(info.tags) == sorted(info.tags)  # sorted by key

    changed = client.tag_context(name, {"status": "running"}, remove=["owner", "absent"])
    assert changed.tags == {"status": "running", "z": "1"}
    assert changed.updated_at_unix_ms >= info.updated_at_unix_ms
    assert client.tag_context(name, remove="z").tags == {"status": "running"}

    # Compare-and-set against the head: 0 is "empty".
    assert client.tag_context(name, {"status": "a"}, expected_head=0).tags["status"] == "a"
    turn = client.append(name, b"work")
    with pytest.raises(ctxstore.Conflict) as conflict:
        client.tag_context(name, {"status": "done"}, remove=["status"], expected_head=0)
    assert conflict.value.actual_head == turn.turn_id
    assert client.context_info(name).tags == {"status": "a"}  # nothing applied
    done = client.tag_context(name, {"status": "done"}, expected_head=turn.turn_id)
    assert done.tags == {"status": "done"} and done.head_turn_id == turn.turn_id


# --- listing ----------------------------------------------------------------------------------


def make_contexts(client: ctxstore.Client, run: str, count: int) -> list[ctxstore.ContextInfo]:
    """``count`` contexts tagged run=<run>, every third also parity=odd... named <run>-NN."""
    infos = []
    for i in range(count):
        tags = {"run": run, "kind": "even" if i % 2 == 0 else "odd"}
        if i % 3 == 0:
            tags["third"] = "yes"
        infos.append(client.open_context(f"{run}-{i:02d}", tags).info)
    return infos


def follow_pages(client: ctxstore.Client, limit: int, **query: object) -> list[int]:
    """The ContextIDs of every page of a listing, following cursors by hand."""
    seen: list[int] = []
    cursor: int | str | None = None
    while True:
        page = client.list_contexts(cursor=cursor, limit=limit, **query)  # type: ignore[arg-type]
        assert len(page) <= limit
        seen += [info.context_id for info in page]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_listing_by_tags_prefix_and_time_with_paging(client: ctxstore.Client) -> None:
    run = unique("run")
    infos = make_contexts(client, run, 23)
    make_contexts(client, unique("other"), 5)  # must never show up
    ids = [info.context_id for info in infos]
    by_id = {info.context_id: info for info in infos}

    # By tag: ContextID order, each exactly once, through any page size.
    for limit in (1, 4, 23, 1000):
        assert follow_pages(client, limit, tags={"run": run}) == ids
    odd = [i for i in ids if by_id[i].tags["kind"] == "odd"]
    assert follow_pages(client, 3, tags={"run": run, "kind": "odd"}) == odd
    both = [i for i in odd if "third" in by_id[i].tags]
    assert follow_pages(client, 2, tags={"kind": "odd", "run": run, "third": "yes"}) == both
    assert follow_pages(client, 5, tags={"run": run, "kind": "none"}) == []

    # By name prefix: name order (here the same as creation order), name cursors.
    page = client.list_contexts(name_prefix=f"{run}-1", limit=4)
    assert [info.name for info in page] == [f"{run}-{i:02d}" for i in range(10, 14)]
    assert page.next_cursor == f"{run}-13"
    assert follow_pages(client, 4, name_prefix=f"{run}-") == ids
    assert follow_pages(client, 7, name_prefix=f"{run}-2", tags={"kind": "even"}) == [
        by_id[i].context_id for i in ids if by_id[i].name in (f"{run}-20", f"{run}-22")
    ]

    # By time (strict bounds), computed from the contexts' own times: no wall clock.
    times = sorted({info.updated_at_unix_ms for info in infos})
    middle = times[len(times) // 2]
    after = [i for i in ids if by_id[i].updated_at_unix_ms > middle]
    before = [i for i in ids if by_id[i].updated_at_unix_ms < middle]
    assert follow_pages(client, 3, tags={"run": run}, updated_after_unix_ms=middle) == after
    assert follow_pages(client, 3, tags={"run": run}, updated_before_unix_ms=middle) == before
    assert follow_pages(
        client,
        2,
        name_prefix=run,
        updated_after_unix_ms=times[0],
        updated_before_unix_ms=times[-1],
    ) == [i for i in ids if times[0] < by_id[i].updated_at_unix_ms < times[-1]]

    # The iterator follows the cursor and returns the same as the pages.
    listed = list(client.iter_contexts({"run": run}, page_size=5))
    assert [info.context_id for info in listed] == ids
    assert listed == [client.context_info(i) for i in ids]
    assert [i.context_id for i in client.iter_contexts(name_prefix=run, page_size=2)] == ids


@pytest.mark.parametrize("by_name", [False, True])
def test_listing_with_concurrent_tag_changes_returns_each_match_at_most_once(
    client: ctxstore.Client, by_name: bool
) -> None:
    run = unique("churn")
    infos = make_contexts(client, run, 30)
    for info in infos:
        client.tag_context(info.context_id, {"state": "open"})
    query = {"tags": {"run": run, "state": "open"}, "name_prefix": run if by_name else None}
    seen: list[ctxstore.ContextInfo] = []
    cursor: int | str | None = None
    step = 0
    while True:
        page = client.list_contexts(**query, cursor=cursor, limit=4)  # type: ignore[arg-type]
        seen += page.contexts
        assert all(info.tags["state"] == "open" for info in page)
        # Between pages, close and reopen contexts already returned and ones not reached yet.
        for info in infos[step % 7 :: 5]:
            if step % 2:
                client.tag_context(info.context_id, remove=["state"])
            else:
                client.tag_context(info.context_id, {"state": "open", "step": str(step)})
        step += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    ids = [info.context_id for info in seen]
    assert len(ids) == len(set(ids))
    order = [info.name for info in seen] if by_name else ids
    assert order == sorted(order)  # type: ignore[type-var]
    assert step > 3


def test_listing_every_context_includes_version_1_contexts(client: ctxstore.Client) -> None:
    created = [client.create_context().context_id for _ in range(3)]
    turn = client.append(created[0], b"x")
    created.append(client.fork(turn.turn_id).context_id)
    everything = [info.context_id for info in client.iter_contexts(page_size=7)]
    assert len(everything) == len(set(everything)) == client.stats().contexts
    assert set(created) <= set(everything)
    assert everything == sorted(everything)


def test_pages_cut_short_by_the_response_budget_are_followed(tmp_root: Path) -> None:
    budget = 64 * 1024
    process = new_server(
        tmp_root,
        extra_args=["--blob-bytes-max", str(budget), "--response-bytes-max", str(budget)],
    )
    try:
        with ctxstore.Client(process.addr) as client:
            big_tags = {f"key-{i:02d}": f"{i:02d}" * 512 for i in range(31)}  # ~32 KiB each
            ids = [
                client.open_context(f"big-{i}", {"big": "yes", **big_tags}).info.context_id
                for i in range(7)
            ]
            page = client.list_contexts({"big": "yes"}, limit=7)
            assert 0 < len(page) < 7 and page.next_cursor == page[-1].context_id
            assert follow_pages(client, 7, tags={"big": "yes"}) == ids
            listed = list(client.iter_contexts(name_prefix="big-", page_size=1000))
            assert [info.context_id for info in listed] == ids
            assert all(info.tags == {"big": "yes", **big_tags} for info in listed)
    finally:
        process.stop()


def test_a_listing_page_of_limit_0_is_too_large_naming_the_range(
    client: ctxstore.Client,
) -> None:
    # Sent raw: the client refuses a limit of 0 itself (ValueError) before anything is sent.
    ctx = client.open_context(unique()).info.context_id
    for request in (p.CtxList((), None, None, None, None, 0), p.KvList(ctx, b"", b"", 0)):
        with pytest.raises(ctxstore.TooLarge, match=r"\(1\.\.=1000\)"):
            client.request(request)
    client.ping()  # the connection stayed open


def test_listing_limits(client: ctxstore.Client) -> None:
    assert len(client.list_contexts(limit=1000)) <= 1000
    with pytest.raises(ctxstore.TooLarge):
        client.list_contexts(limit=1001)
    with pytest.raises(ValueError):
        client.list_contexts(limit=0)
    client.ping()


# --- clone ------------------------------------------------------------------------------------


def test_clone_copies_head_tags_and_key_values_and_then_diverges(client: ctxstore.Client) -> None:
    source = unique("src")
    client.open_context(source, {"status": "idle", "owner": "me"})
    turn = client.append(source, b"shared turn")
    client.kv_put(source, {b"a": b"1", b"b": b"2"})
    src_info = client.context_info(source)

    name = unique("copy")
    clone = client.clone_context(source, name, tags={"owner": "you"})
    assert clone.name == name and clone.context_id != src_info.context_id
    assert (clone.head_turn_id, clone.head_depth) == (turn.turn_id, 0)
    assert clone.tags == {"status": "idle", "owner": "you"}
    assert list(client.iter_kv(name)) == list(client.iter_kv(source))
    assert client.kv_get(name, b"a") == b"1"
    # A clone by id works the same.
    by_id = client.clone_context(src_info.context_id, unique("copy"))
    assert by_id.head == ctxstore.ContextHead(by_id.context_id, turn.turn_id, 0)

    # They share turns but diverge from here.
    mine = client.append(name, b"only in the clone")
    assert mine.turn.parent_turn_id == turn.turn_id
    client.kv_put(name, {b"a": b"changed", b"c": b"3"})
    client.kv_delete(name, b"b")
    assert client.head(source).head_turn_id == turn.turn_id
    assert client.kv_get(source, b"a") == b"1" and client.kv_get(source, b"b") == b"2"
    assert client.kv_get(source, b"c") is None
    assert client.context_info(source).tags == {"status": "idle", "owner": "me"}
    assert [t.payload for t in client.last(name, 5, payloads=True)] == [
        b"shared turn",
        b"only in the clone",
    ]


# --- key-value --------------------------------------------------------------------------------


def test_kv_round_trip_with_binary_keys_and_values(client: ctxstore.Client) -> None:
    ctx = client.open_context(unique()).info.context_id
    entries = {
        b"\x00": b"",
        b"\x00\x01": bytes(range(256)),
        b"\xff" * 256: os.urandom(3000),
        "naïve/ключ": "value ü".encode(),
        b"big": os.urandom(300_000),  # over the chunking threshold
    }
    client.kv_put(ctx, entries)
    for key, value in entries.items():
        assert client.kv_get(ctx, key) == value
    assert client.kv_get(ctx, "naïve/ключ".encode()) == "value ü".encode()
    assert client.kv_get(ctx, b"\x00\x02") is None

    items = list(client.iter_kv(ctx))
    raw = {k.encode() if isinstance(k, str) else k: v for k, v in entries.items()}
    assert [item.key for item in items] == sorted(raw)
    for item in items:
        assert item.value_hash == ctxstore.blob_hash(raw[item.key])
        assert item.value_len == len(raw[item.key])
        assert client.get_blob(item.value_hash) == raw[item.key]  # values are blobs

    # Equal values are one blob.
    client.kv_put(ctx, {b"copy-1": entries[b"big"], b"copy-2": entries[b"big"]})
    hashes = {item.key: item.value_hash for item in client.iter_kv(ctx, b"copy-")}
    assert hashes[b"copy-1"] == hashes[b"copy-2"] == ctxstore.blob_hash(entries[b"big"])


def test_kv_replace_if_absent_and_delete(client: ctxstore.Client) -> None:
    name = unique()
    client.open_context(name)
    client.kv_put(name, {b"k": b"one", b"j": b"j1"})
    client.kv_put(name, {b"k": b"two", b"new": b"n"}, if_absent=True)
    assert client.kv_get(name, b"k") == b"one"  # kept
    assert client.kv_get(name, b"new") == b"n"  # absent: put
    client.kv_put(name, {b"k": b"three"})
    assert client.kv_get(name, b"k") == b"three"  # replaced

    client.kv_delete(name, [b"k", b"never-there"])
    assert client.kv_get(name, b"k") is None
    client.kv_delete(name, "j")
    assert [item.key for item in client.iter_kv(name)] == [b"new"]
    client.kv_put(name, {})  # nothing to do: nothing sent
    client.kv_delete(name, [])
    before = client.context_info(name).updated_at_unix_ms
    client.kv_put(name, {b"z": b"z"})
    assert client.context_info(name).updated_at_unix_ms >= before


def test_kv_list_paging_and_prefix(client: ctxstore.Client) -> None:
    ctx = client.open_context(unique()).info.context_id
    keys = [f"w:{i:03d}".encode() for i in range(37)] + [b"v", b"w", b"x:1", b"w;"]
    for start in range(0, len(keys), 128):
        client.kv_put(ctx, {key: key[::-1] for key in keys[start : start + 128]})
    under = sorted(k for k in keys if k.startswith(b"w:"))

    collected: list[bytes] = []
    after = b""
    while True:
        page = client.kv_list(ctx, b"w:", after, limit=8)
        collected += [item.key for item in page]
        if page.next_after is None:
            break
        assert len(page) == 8 and page.next_after == page[-1].key
        after = page.next_after
    assert collected == under
    assert [item.key for item in client.iter_kv(ctx, "w:", page_size=5)] == under
    assert [item.key for item in client.iter_kv(ctx, b"w:", b"w:030")] == under[31:]
    assert [item.key for item in client.iter_kv(ctx, page_size=1000)] == sorted(keys)
    assert list(client.iter_kv(ctx, b"nothing")) == []
    # A full last page needs one more (empty) request to know it was the last.
    page = client.kv_list(ctx, b"x", limit=1)
    assert [item.key for item in page] == [b"x:1"] and page.next_after == b"x:1"
    assert len(client.kv_list(ctx, b"x", page.next_after, limit=1)) == 0


def test_kv_values_sent_as_zstd_are_inflated_and_verified(tmp_root: Path) -> None:
    process = new_server(tmp_root, extra_args=["--payload-cache-bytes", "0"])
    try:
        value = b'{"role": "tool", "content": "the same line again"}\n' * 4000
        with ctxstore.Client(process.addr) as client:
            ctx = client.open_context("kv-zstd").info.context_id
            client.kv_put(ctx, {b"doc": value})
            assert client.kv_get(ctx, b"doc") == value
        with ctxstore.Client(process.addr, accept_zstd=False) as client:
            assert client.kv_get("kv-zstd", b"doc") == value
    finally:
        process.stop()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "put_if_absent", "delete"]),
            st.dictionaries(st.binary(min_size=1, max_size=3), st.binary(max_size=8), max_size=6),
        ),
        max_size=12,
    )
)
def test_kv_against_a_dict_model(
    v2_server: ServerProcess, steps: list[tuple[str, dict[bytes, bytes]]]
) -> None:
    with ctxstore.Client(v2_server.addr, timeout=20) as client:
        ctx = client.open_context().info.context_id
        model: dict[bytes, bytes] = {}
        for action, entries in steps:
            if action == "put":
                client.kv_put(ctx, entries)
                model.update(entries)
            elif action == "put_if_absent":
                client.kv_put(ctx, entries, if_absent=True)
                for key, value in entries.items():
                    model.setdefault(key, value)
            else:
                client.kv_delete(ctx, list(entries))
                for key in entries:
                    model.pop(key, None)
        items = list(client.iter_kv(ctx, page_size=3))
        assert [(i.key, i.value_hash, i.value_len) for i in items] == [
            (key, ctxstore.blob_hash(value), len(value)) for key, value in sorted(model.items())
        ]
        for key, value in model.items():
            assert client.kv_get(ctx, key) == value


# --- limits -----------------------------------------------------------------------------------


def test_limits_are_too_large_and_nothing_is_applied(client: ctxstore.Client) -> None:
    name = unique()
    ctx = client.open_context(name, {"keep": "me"}).info.context_id
    too_large = [
        lambda: client.open_context("n" * 257),
        lambda: client.head("n" * 257),
        lambda: client.open_context(unique(), {f"k{i}": "v" for i in range(33)}),
        lambda: client.tag_context(ctx, {f"k{i}": "v" for i in range(32)}),  # 1 + 32 > 32
        lambda: client.tag_context(ctx, {"k" * 65: "v"}),
        lambda: client.tag_context(ctx, {"k": "v" * 1025}),
        lambda: client.kv_put(ctx, {b"k" * 257: b"v"}),
        lambda: client.kv_put(ctx, {b"": b"v"}),
        lambda: client.kv_put(ctx, {f"{i}".encode(): b"v" for i in range(129)}),
        lambda: client.kv_delete(ctx, [f"{i}".encode() for i in range(129)]),
        lambda: client.kv_list(ctx, limit=1001),
    ]
    for index, call in enumerate(too_large):
        try:
            call()
        except ctxstore.TooLarge as error:
            assert error.message
        else:
            pytest.fail(f"call {index} of the list was not refused TOO_LARGE")
    # Empty where 1 or more bytes go: INVALID_ARGUMENT saying so (over-long stays TOO_LARGE).
    other = client.create_context().context_id
    empty = [
        lambda: client.name_context(other, ""),
        lambda: client.request(p.CtxOpen(0, False, None, None, (("", "v"),))),
        lambda: client.tag_context(ctx, {"": "v"}),
        lambda: client.tag_context(ctx, {"k": ""}),  # tag values are 1-1024 bytes
    ]
    for call in empty:
        with pytest.raises(ctxstore.InvalidArgument, match="empty"):
            call()
    assert client.context_info(other).name is None
    client.ping()  # the connection stayed open
    info_after = client.context_info(ctx)
    assert info_after.tags == {"keep": "me"} and info_after.name == name
    assert list(client.iter_kv(ctx)) == []
    # At the limits exactly, everything is accepted.
    client.name_context(client.create_context().context_id, "n" * 256)
    client.tag_context(ctx, {f"k{i}": "v" * 1024 for i in range(31)})
    client.tag_context(ctx, {"k" * 64: "v"}, remove=["keep"])
    assert len(client.context_info(ctx).tags) == 32
    client.kv_put(ctx, {f"{i:03d}".encode(): b"v" for i in range(128)})
    client.kv_put(ctx, {b"k" * 256: b"v"})
    assert len(list(client.iter_kv(ctx))) == 129


def test_kv_get_keys_and_kv_list_cursors_over_the_key_limit_are_too_large(
    client: ctxstore.Client,
) -> None:
    ctx = client.open_context(unique()).info.context_id
    client.kv_put(ctx, {b"k" * 256: b"v"})
    too_large = [
        p.KvGet(ctx, b"k" * 257, 0),
        p.KvGet(ctx, b"", 0),  # a key is 1-256 bytes
        p.KvList(ctx, b"k" * 257, b"", 10),
        p.KvList(ctx, b"", b"k" * 257, 10),
    ]
    for request in too_large:
        with pytest.raises(ctxstore.TooLarge, match="256"):
            client.request(request)
    client.ping()
    # At the limit exactly: found, listed.
    assert client.kv_get(ctx, b"k" * 256) == b"v"
    assert [item.key for item in client.kv_list(ctx, prefix=b"k" * 256)] == [b"k" * 256]
    assert client.kv_list(ctx, after=b"k" * 256).items == []


def test_kv_value_over_the_blob_limit_is_too_large(small_server: ServerProcess) -> None:
    with ctxstore.Client(small_server.addr) as client:
        ctx = client.open_context(unique()).info.context_id
        with pytest.raises(ctxstore.TooLarge):
            client.kv_put(ctx, {b"big": bytes(64 * 1024 + 1), b"small": b"s"})
        client.ping()
        assert client.kv_get(ctx, b"small") is None
        client.kv_put(ctx, {b"big": bytes(64 * 1024)})
        assert client.kv_get(ctx, b"big") == bytes(64 * 1024)


# --- durability -------------------------------------------------------------------------------


def test_names_tags_and_key_values_survive_a_restart(own_server: ServerProcess) -> None:
    with ctxstore.Client(own_server.addr) as client:
        info, _ = client.open_context("durable", {"status": "idle"})
        client.append("durable", b"turn")
        client.kv_put("durable", {b"k": b"v"})
        client.tag_context("durable", {"status": "done"}, remove=["nothing"])
        before = client.context_info("durable")
    own_server.kill()  # kill -9: only what was acknowledged
    own_server.start()
    with ctxstore.Client(own_server.addr) as client:
        assert client.context_info("durable") == before
        assert client.kv_get("durable", b"k") == b"v"
        assert [info.name for info in client.iter_contexts({"status": "done"})] == ["durable"]


# --- a version-1 connection -------------------------------------------------------------------


def test_version_1_connection_refuses_version_2_calls_before_sending(
    v2_server: ServerProcess, client: ctxstore.Client
) -> None:
    name = unique()
    cid = client.open_context(name).info.context_id
    with V1Client(v2_server.addr) as old:
        assert old.server_info().version == 1
        for call in (
            lambda: old.head(name),
            lambda: old.append(name, b"x"),
            lambda: old.last(name),
            lambda: old.open_context(unique()),
            lambda: old.context_info(cid),
            lambda: old.tag_context(cid, {"a": "b"}),
            lambda: old.list_contexts(),
            lambda: next(old.iter_contexts()),
            lambda: old.kv_put(cid, {b"k": b"v"}),
            lambda: old.kv_get(cid, b"k"),
            lambda: old.kv_list(cid),
        ):
            with pytest.raises(ctxstore.NotSupported, match="version 2") as info:
                call()
            assert info.value.code == 0
        assert old.head(cid).context_id == cid  # by id: version 1 as before
        assert old.connected
        # Sent anyway (bypassing the client's check), the server answers UNKNOWN_MESSAGE and
        # keeps the connection open.
        body = p.CtxShow(cid).encode_body()
        with pytest.raises(ctxstore.UnknownMessage):
            old.request(p.RawRequest(p.MessageType.CTX_SHOW, body))
        old.ping()
    assert client.kv_get(cid, b"k") is None  # nothing was sent


def test_version_1_error_names_no_version_2_code(v2_server: ServerProcess) -> None:
    """A taken name can only be met through version 2; a v1 client still gets v1 answers."""
    with V1Client(v2_server.addr) as old:
        ctx = old.create_context()
        assert old.append(ctx.context_id, b"v1").turn.context_id == ctx.context_id
        with pytest.raises(ctxstore.NotFound):
            old.head(2**62)
