"""Retention (issue 15) and online backup (issue 18) through both clients against a real
ctxstore-server: delete (NotFound after, the name free again), prune (the floor, reads stop
at it, keep=0 refused), the time to live (set, read, clear), and a backup whose copy
`ctxstore-server verify` accepts."""

from __future__ import annotations

import subprocess
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
