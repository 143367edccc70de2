"""Retention (issue 15) and online backup (issue 18) through both clients against a real
ctxstore-server: delete (NotFound after, the name free again), prune (the floor, reads stop
at it, keep=0 refused), the time to live (set, read, clear, expiry), a version-1
connection, and a backup whose copy `ctxstore-server verify` accepts."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctxstore

from conftest import ServerProcess, new_server


@pytest.fixture(scope="module")
def retention_server(tmp_root: Path) -> Iterator[ServerProcess]:
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture()
def client(retention_server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(retention_server.addr, timeout=20) as c:
        yield c


def unique(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_a_deleted_context_is_not_found_and_its_name_is_free(client: ctxstore.Client) -> None:
    name = unique()
    opened = client.open_context(name)
    client.append(name, b"hello")
    before = client.delete_context(name)
    assert before.context.context_id == opened.info.context_id
    assert before.context.name == name
    with pytest.raises(ctxstore.NotFound):
        client.context_info(opened.info.context_id)
    with pytest.raises(ctxstore.NotFound):
        client.append(opened.info.context_id, b"late")
    with pytest.raises(ctxstore.NotFound):
        client.delete_context(name)
    again = client.open_context(name)
    assert again.info.context_id != opened.info.context_id


def test_prune_floors_reads_and_never_moves_down(client: ctxstore.Client) -> None:
    name = unique()
    client.open_context(name)
    for i in range(5):
        client.append(name, f"turn {i}".encode())
    with pytest.raises(ctxstore.InvalidArgument):
        client.prune_context(name, 0)
    pruned = client.prune_context(name, 2)
    assert pruned.floor_depth == 3
    assert [turn.depth for turn in client.last(name, 100).turns] == [3, 4]
    assert client.prune_context(name, 100).floor_depth == 3
    assert client.context_retention(name).floor_depth == 3


def test_prune_by_id_floors_the_turn_log_and_refuses_a_parent_below_the_floor(
    client: ctxstore.Client,
) -> None:
    cid = client.open_context(unique()).info.context_id
    appended = [client.append(cid, f"turn {i}".encode()) for i in range(5)]
    assert [a.depth for a in appended] == [0, 1, 2, 3, 4]
    pruned = client.prune_context(cid, 2)
    assert (pruned.context.context_id, pruned.floor_depth) == (cid, 3)
    assert pruned.context.head_turn_id == appended[-1].turn_id  # the head does not move
    assert sorted(t.depth for t in client.turn_log(cid, limit=100).turns) == [3, 4]
    with pytest.raises(ctxstore.InvalidArgument):
        client.append(cid, b"below the floor", parent=appended[1].turn_id)
    # At the floor is still reachable: a branch from depth 3 is accepted.
    branch = client.append(cid, b"from the floor", parent=appended[3].turn_id)
    assert branch.depth == 4


def test_time_to_live_is_set_read_and_cleared(client: ctxstore.Client) -> None:
    name = unique()
    client.open_context(name)
    assert client.context_retention(name).ttl_ms is None
    week_ms = 7 * 24 * 3600 * 1000
    assert client.set_context_ttl(name, week_ms).ttl_ms == week_ms
    assert client.context_retention(name).ttl_ms == week_ms
    assert client.set_context_ttl(name, None).ttl_ms is None
    with pytest.raises(ctxstore.InvalidArgument):
        client.set_context_ttl(name, 1 << 62)
    # 0 on the wire means "none": asked for here it would read as "expire now", so the client
    # refuses it before sending (decision 0011) and the TTL set before is untouched.
    client.set_context_ttl(name, 60_000)
    for bad in (0, -1, True, 1.5, 1 << 64):
        with pytest.raises(ValueError):
            client.set_context_ttl(name, bad)  # type: ignore[arg-type]
    assert client.context_retention(name).ttl_ms == 60_000
    with pytest.raises(ValueError):
        client.prune_context(name, -1)


def test_a_context_idle_past_its_ttl_is_deleted_by_the_server(client: ctxstore.Client) -> None:
    name, kept = unique(), unique()
    cid = client.open_context(name).info.context_id
    client.append(cid, b"short-lived")
    client.open_context(kept)
    client.set_context_ttl(name, 200)
    deadline = time.monotonic() + 15  # the reaper ticks every second by default
    while True:
        try:
            client.context_info(cid)
        except ctxstore.NotFound:
            break
        assert time.monotonic() < deadline, "the server did not delete the expired context"
        time.sleep(0.1)
    with pytest.raises(ctxstore.NotFound):
        client.context_info(name)
    assert client.context_info(kept).name == kept  # no TTL: untouched
    assert client.open_context(name).info.context_id != cid  # the name is free again


def test_a_version_1_connection_refuses_retention_calls_before_sending(
    retention_server: ServerProcess, client: ctxstore.Client
) -> None:
    name = unique()
    cid = client.open_context(name).info.context_id

    class V1Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 1)

    with V1Client(retention_server.addr) as old:
        assert old.server_info().version == 1
        for call in (
            lambda: old.delete_context(cid),
            lambda: old.prune_context(cid, 1),
            lambda: old.set_context_ttl(cid, 60_000),
            lambda: old.context_retention(cid),
            lambda: old.backup("/nonexistent/ctxstore-backup"),
        ):
            with pytest.raises(ctxstore.NotSupported, match="version 2"):
                call()
        old.ping()
    assert client.context_info(name).context_id == cid  # nothing was sent


def test_a_backup_copy_passes_verify(
    client: ctxstore.Client, retention_server: ServerProcess, tmp_path: Path
) -> None:
    name = unique()
    client.open_context(name)
    for i in range(20):
        client.append(name, f"backed up {i}".encode() * 50)
    target = tmp_path / "copy"
    report = client.backup(str(target))
    assert report.dir == str(target)
    assert report.turns >= 20 and report.blobs >= 20 and report.bytes > 0
    with pytest.raises(ValueError):
        client.backup("relative/dir")
    with pytest.raises(ctxstore.InvalidArgument):
        client.backup(str(target))  # not empty any more
    verified = subprocess.run(
        [str(retention_server.binary), "verify", "--data", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_the_async_client_deletes_prunes_and_reads_retention(
    retention_server: ServerProcess,
) -> None:
    async with ctxstore.AsyncClient(retention_server.addr, timeout=20) as client:
        name = unique("a")
        await client.open_context(name)
        for i in range(4):
            await client.append(name, f"turn {i}".encode())
        assert (await client.prune_context(name, 1)).floor_depth == 3
        assert (await client.set_context_ttl(name, 60_000)).ttl_ms == 60_000
        assert (await client.context_retention(name)).floor_depth == 3
        await client.delete_context(name)
        with pytest.raises(ctxstore.NotFound):
            await client.context_retention(name)


async def test_the_async_client_deletes_frees_the_name_and_refuses_what_sync_refuses(
    retention_server: ServerProcess,
) -> None:
    async with ctxstore.AsyncClient(retention_server.addr, timeout=20) as client:
        name = unique("a")
        opened = await client.open_context(name)
        cid = opened.info.context_id
        await client.append(cid, b"hello")
        with pytest.raises(ctxstore.InvalidArgument):
            await client.prune_context(name, 0)
        with pytest.raises(ValueError):
            await client.set_context_ttl(name, 0)
        assert (await client.context_retention(cid)).ttl_ms is None
        assert (await client.set_context_ttl(cid, 3_600_000)).ttl_ms == 3_600_000
        assert (await client.set_context_ttl(cid, None)).ttl_ms is None
        before = await client.delete_context(cid)
        assert (before.context.context_id, before.context.name) == (cid, name)
        assert before.floor_depth == 0
        with pytest.raises(ctxstore.NotFound):
            await client.context_info(cid)
        with pytest.raises(ctxstore.NotFound):
            await client.delete_context(name)
        again = await client.open_context(name)
        assert again.info.context_id != cid


def _pruned_and_collected(client: ctxstore.Client, name: str) -> list[ctxstore.Appended]:
    """30 turns in ``name``, pruned to the newest 10 (floor 20) and garbage-collected, so
    that depths 0..19 are gone from the store."""
    client.open_context(name)
    appended = [client.append(name, f"turn {i}".encode()) for i in range(30)]
    assert client.prune_context(name, 10).floor_depth == 20
    assert client.gc().turns_dead >= 20
    with pytest.raises(ctxstore.NotFound):
        client.get_turn(appended[19].turn.turn_id)
    return appended


@pytest.mark.parametrize("page_size", [None, 4, 10, 11])
def test_replay_of_a_pruned_and_collected_chain_returns_the_kept_turns(
    client: ctxstore.Client, page_size: int | None
) -> None:
    """Issue 29: replay() raised ProtocolError ("returned depths 20..29"), the answer meant
    for a misbehaving server, where the CLI prints the kept turns. With the default page the
    server answers from the oldest kept turn; with a page smaller than the collected prefix
    its first window ends in collected history (NOT_FOUND)."""
    appended = _pruned_and_collected(client, unique("replay"))
    head = appended[-1].turn.turn_id
    kept = client.replay(head, payloads=True, page_size=page_size)
    assert [t.depth for t in kept] == list(range(20, 30))
    assert [t.turn_id for t in kept] == [a.turn.turn_id for a in appended[20:]]
    assert [t.payload for t in kept] == [f"turn {i}".encode() for i in range(20, 30)]
    middle = client.replay(appended[24].turn.turn_id, page_size=page_size)
    assert [t.depth for t in middle] == list(range(20, 25))
    with pytest.raises(ctxstore.NotFound):
        client.replay(appended[5].turn.turn_id, page_size=page_size)


async def test_the_async_client_replays_the_kept_turns_of_a_collected_chain(
    client: ctxstore.Client, retention_server: ServerProcess
) -> None:
    appended = _pruned_and_collected(client, unique("areplay"))
    async with ctxstore.AsyncClient(retention_server.addr, timeout=20) as aclient:
        for page_size in (None, 3):
            kept = await aclient.replay(
                appended[-1].turn.turn_id, payloads=True, page_size=page_size
            )
            assert [t.turn_id for t in kept] == [a.turn.turn_id for a in appended[20:]]
            assert kept[0].payload == b"turn 20"
        with pytest.raises(ctxstore.NotFound):
            await aclient.replay(appended[0].turn.turn_id)
