"""Tenants (issue 48, decision 0032): the clients and the LangGraph adapters work unchanged with
a tenant's token (LangGraph's own conformance suite passes through one), and what one tenant
saves is absent to another: threads, checkpoints, store items, blobs. The operator lists the
tenants with their usage, quotas and refusals (``tenants()``, TENANT_LIST, version 5), deletes a
tenant (``delete_tenant()``, TENANT_DELETE, version 5) and rotates a tenant's data key
(``rotate_tenant_key()``, TENANT_ROTATE_KEY, version 5)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

import ctxstore
from ctxstore.errors import (
    InvalidArgument,
    NotFound,
    NotSupported,
    QuotaExceeded,
    Unauthorized,
)
from ctxstore.langgraph import CtxstoreSaver
from ctxstore.langgraph_store import CtxstoreStore

from conftest import ServerProcess, new_server

OPERATOR = "operator-token-0123456789"
ACME = "acme-token-0123456789abcdef"
GLOBEX = "globex-token-0123456789abcd"
READER = "acme-reader-token-0123456789"
INITECH = "initech-token-0123456789abcde"
"""A tenant of at most two contexts, which only the listing's test uses."""
MASTER_KEY = "8f2a61c03e5d47b9a1c2d3e4f5061728394a5b6c7d8e9fa0b1c2d3e4f5a6b7c8"
"""The master key of the servers that seal payloads (64 hex digits)."""


def tenants_server(root: Path, *, master_key: bool = False) -> ServerProcess:
    """A server with the operator's token and four tenants (one of them read-only, one of at
    most two contexts); with ``master_key``, one that seals payloads (``--master-key-file``)."""
    root.mkdir(parents=True, exist_ok=True)
    tenants = root / f"tenants-{uuid4().hex}.toml"
    tenants.write_text(
        f'[[tenant]]\nname = "acme"\ntokens = ["{ACME}"]\nrights = ["read", "write", "admin"]\n'
        f'[[tenant]]\nname = "globex"\ntokens = ["{GLOBEX}"]\nrights = ["read", "write"]\n'
        f'[[tenant]]\nname = "readers"\ntokens = ["{READER}"]\nrights = ["read"]\n'
        f'[[tenant]]\nname = "initech"\ntokens = ["{INITECH}"]\nrights = ["read", "write"]\n'
        "quota_contexts = 2\n"
    )
    extra_args = ["--tenants-file", str(tenants)]
    if master_key:
        key_file = root / f"master-key-{uuid4().hex}"
        key_file.touch(mode=0o600)
        key_file.write_text(MASTER_KEY + "\n")
        extra_args += ["--master-key-file", str(key_file)]
    return new_server(root, token=OPERATOR, extra_args=extra_args)


@pytest.fixture(scope="module")
def tenants(tmp_root: Path) -> Iterator[ServerProcess]:
    process = tenants_server(tmp_root / "tenants")
    yield process
    process.stop()


async def test_langgraph_conformance_suite_passes_with_a_tenants_token(tmp_root: Path) -> None:
    """The saver needs nothing but the tenant's token: every base capability of LangGraph's
    suite, and the extended ones, on a fresh server each."""

    @checkpointer_test(name="CtxstoreSaver (a tenant's token)")
    async def ctxstore_checkpointer() -> AsyncIterator[CtxstoreSaver]:
        process = tenants_server(tmp_root / "tenants-conformance")
        made = CtxstoreSaver.from_addr(process.addr, token=ACME)
        try:
            yield made
        finally:
            await made.aclose()
            process.stop()

    report = await validate(ctxstore_checkpointer, progress=ProgressCallbacks.verbose())
    report.print_report()
    assert report.passed_all_base(), report.to_dict()
    for extended in ("copy_thread", "prune", "delete_for_runs"):
        assert report.results[extended].passed, report.to_dict()


def _config(thread_id: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def test_a_tenants_threads_and_items_are_absent_to_another(tenants: ServerProcess) -> None:
    thread = f"t-{uuid4()}"
    with (
        CtxstoreSaver.from_addr(tenants.addr, token=ACME) as acme,
        CtxstoreSaver.from_addr(tenants.addr, token=GLOBEX) as globex,
    ):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["acme's secret"]}
        checkpoint["channel_versions"] = {"messages": 1}
        acme.put(_config(thread), checkpoint, {"source": "input", "step": 0}, {"messages": 1})
        assert acme.get_tuple(_config(thread)) is not None
        # The same thread id through another tenant: no such thread.
        assert globex.get_tuple(_config(thread)) is None
        assert list(globex.list(_config(thread))) == []
        assert list(globex.list(None)) == []
        # Globex's own thread of the same name is its own.
        globex.put(_config(thread), empty_checkpoint(), {"source": "input", "step": 0}, {})
        seen = acme.get_tuple(_config(thread))
        assert seen is not None
        assert seen.checkpoint["channel_values"] == {"messages": ["acme's secret"]}

    with (
        CtxstoreStore.from_addr(tenants.addr, token=ACME) as acme_store,
        CtxstoreStore.from_addr(tenants.addr, token=GLOBEX) as globex_store,
    ):
        acme_store.put(("users", "42"), "prefs", {"theme": "dark"})
        assert acme_store.get(("users", "42"), "prefs") is not None
        assert globex_store.get(("users", "42"), "prefs") is None
        assert globex_store.search(("users",)) == []


def test_blobs_rights_and_store_wide_messages_per_tenant(tenants: ServerProcess) -> None:
    payload = f"acme's payload {uuid4()}".encode()
    with (
        ctxstore.Client(tenants.addr, token=ACME) as acme,
        ctxstore.Client(tenants.addr, token=GLOBEX) as globex,
        ctxstore.Client(tenants.addr, token=READER) as reader,
        ctxstore.Client(tenants.addr, token=OPERATOR) as operator,
    ):
        head = acme.create_context()
        appended = acme.append(head.context_id, payload)
        assert acme.get_blob(appended.turn.payload_hash) == payload
        for other in (globex, operator):
            with pytest.raises(NotFound):
                other.get_blob(appended.turn.payload_hash)
            with pytest.raises(NotFound):
                other.head(head.context_id)
        # Globex stores the same bytes: its own copy, not a dedup hit on acme's.
        theirs = globex.append(globex.create_context().context_id, payload)
        assert theirs.turn.payload_hash == appended.turn.payload_hash
        assert not theirs.deduped
        # Read-only: reads its own tenant's data, refused every write.
        with pytest.raises(Unauthorized, match="write"):
            reader.create_context()
        # STATS concerns the whole store: the operator's.
        with pytest.raises(Unauthorized, match="operator"):
            acme.stats()
        assert operator.stats().contexts >= 2


def test_a_token_no_tenant_holds_is_refused(tenants: ServerProcess) -> None:
    with pytest.raises(Unauthorized):
        with ctxstore.Client(tenants.addr, token="no-tenant-has-this-token-at-all") as client:
            client.ping()


def test_the_operator_lists_the_tenants_with_their_usage_and_quotas(
    tenants: ServerProcess,
) -> None:
    with (
        ctxstore.Client(tenants.addr, token=INITECH) as initech,
        ctxstore.Client(tenants.addr, token=OPERATOR) as operator,
    ):
        for _ in range(2):
            initech.create_context()
        with pytest.raises(QuotaExceeded) as refused:
            initech.create_context()
        assert refused.value.limit == 2
        listed = operator.tenants()
        assert [tenant.name for tenant in listed] == ["acme", "globex", "initech", "readers"]
        by_name = {tenant.name: tenant for tenant in listed}
        assert by_name["acme"].rights == ("read", "write", "admin")
        assert by_name["globex"].rights == ("read", "write")
        assert by_name["readers"].rights == ("read",)
        assert all(tenant.in_tenants_file for tenant in listed)
        mine = by_name["initech"]
        assert mine.registered and mine.tenant_id is not None and mine.tenant_id > 0
        assert (mine.contexts, mine.streams_open, mine.connections) == (2, 0, 1)
        assert (mine.quota_contexts, mine.quota_refusals) == (2, 1)
        assert (
            mine.quota_bytes,
            mine.quota_appends_per_s,
            mine.quota_connections,
            mine.quota_streams,
        ) == (None, None, None, None)
        # One tenant a page: the same tenants, every page read.
        paged = operator.tenants(page_size=1)
        assert [tenant.name for tenant in paged] == [tenant.name for tenant in listed]
        assert paged[2].contexts == 2 and paged[2].quota_refusals == 1


async def test_the_async_client_lists_the_tenants_too(tenants: ServerProcess) -> None:
    async with ctxstore.AsyncClient(tenants.addr, token=OPERATOR) as operator:
        listed = await operator.tenants(page_size=3)
    assert [tenant.name for tenant in listed] == ["acme", "globex", "initech", "readers"]


def test_a_tenant_lists_only_itself(tenants: ServerProcess) -> None:
    with ctxstore.Client(tenants.addr, token=OPERATOR) as operator:
        everyone = {tenant.name: tenant for tenant in operator.tenants()}
    for token, name in ((ACME, "acme"), (READER, "readers")):
        with ctxstore.Client(tenants.addr, token=token) as client:
            (own,) = client.tenants(page_size=1)
            assert own.name == name
            assert (own.tenant_id, own.contexts, own.stored_bytes, own.rights) == (
                everyone[name].tenant_id,
                everyone[name].contexts,
                everyone[name].stored_bytes,
                everyone[name].rights,
            )
            # The store's figures stay the operator's.
            with pytest.raises(Unauthorized, match="TENANT_LIST"):
                client.stats()
            client.ping()  # the connection stays open

    class Version4Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 4)

    with Version4Client(tenants.addr, token=OPERATOR) as old:
        with pytest.raises(NotSupported, match="needs protocol version 5"):
            old.tenants()
    with ctxstore.Client(tenants.addr, token=OPERATOR) as operator:
        with pytest.raises(ValueError):
            operator.tenants(page_size=0)


def test_a_server_without_tenants_lists_none(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr) as client:
        assert client.tenants() == []


def test_the_operator_deletes_a_tenant(tmp_root: Path) -> None:
    # A server of its own: the deleted tenant is gone for good.
    process = tenants_server(tmp_root / "tenants-delete")
    try:
        with (
            ctxstore.Client(process.addr, token=GLOBEX) as globex,
            ctxstore.Client(process.addr, token=OPERATOR) as operator,
        ):
            head = globex.create_context()
            globex.append(head.context_id, b"globex's turn")
            before = {tenant.name: tenant for tenant in operator.tenants()}
            assert not any(tenant.deleted for tenant in before.values())
            deleted = operator.delete_tenant("globex")
            assert isinstance(deleted, ctxstore.TenantDeleted)
            assert deleted.tenant_id == before["globex"].tenant_id
            # No master key (the store does not seal) and no replica: neither flag.
            assert (deleted.keys_destroyed, deleted.replica_updated) == (False, False)
            # (a) Its token is refused from then on, on its open connection too.
            with pytest.raises(Unauthorized):
                with ctxstore.Client(process.addr, token=GLOBEX) as client:
                    client.ping()
            with pytest.raises(Unauthorized):
                globex.ping()
            # (b) Listed, deleted; the others are not.
            after = {tenant.name: tenant for tenant in operator.tenants()}
            assert list(after) == ["acme", "globex", "initech", "readers"]
            assert after["globex"].deleted and after["globex"].registered
            assert after["globex"].tenant_id == deleted.tenant_id
            assert after["globex"].contexts == 0  # every context of it deleted
            assert [name for name, tenant in after.items() if tenant.deleted] == ["globex"]
            # (c) Idempotent: the same answer again.
            assert operator.delete_tenant("globex") == deleted
            # (d) A name the store never registered.
            with pytest.raises(InvalidArgument):
                operator.delete_tenant("no-such-tenant")
            operator.ping()  # the connection stays open
            with pytest.raises(ValueError):
                operator.delete_tenant("")
            with pytest.raises(ValueError):
                operator.delete_tenant("x" * 65)
        # The other tenants go on.
        with ctxstore.Client(process.addr, token=ACME) as acme:
            acme.create_context()
            # (e) A tenant's token, even one with the admin right, may not delete a tenant.
            with pytest.raises(Unauthorized):
                acme.delete_tenant("initech")
            acme.ping()  # the connection stays open

        class Version4Client(ctxstore.Client):
            PROTOCOL_VERSIONS = (1, 4)

        with Version4Client(process.addr, token=OPERATOR) as old:
            with pytest.raises(NotSupported, match="needs protocol version 5"):
                old.delete_tenant("initech")
    finally:
        process.stop()


async def test_the_async_client_deletes_a_tenant_too(tmp_root: Path) -> None:
    process = tenants_server(tmp_root / "tenants-delete-async")
    try:
        async with ctxstore.AsyncClient(process.addr, token=INITECH) as initech:
            await initech.create_context()
        async with ctxstore.AsyncClient(process.addr, token=OPERATOR) as operator:
            deleted = await operator.delete_tenant("initech")
            assert deleted.tenant_id > 0
            assert (deleted.keys_destroyed, deleted.replica_updated) == (False, False)
            assert await operator.delete_tenant("initech") == deleted
            with pytest.raises(InvalidArgument):
                await operator.delete_tenant("no-such-tenant")
            listed = {tenant.name: tenant.deleted for tenant in await operator.tenants()}
            assert listed == {"acme": False, "globex": False, "initech": True, "readers": False}
        with pytest.raises(Unauthorized):
            async with ctxstore.AsyncClient(process.addr, token=INITECH) as initech:
                await initech.ping()
    finally:
        process.stop()


def test_a_server_that_seals_nothing_rotates_no_key(tenants: ServerProcess) -> None:
    # No --master-key-file: there is no data key to rotate, the operator's included.
    with ctxstore.Client(tenants.addr, token=OPERATOR) as operator:
        for name in ("acme", "operator", "no-such-tenant"):
            with pytest.raises(InvalidArgument):
                operator.rotate_tenant_key(name)
        operator.ping()  # the connection stays open
        with pytest.raises(ValueError):
            operator.rotate_tenant_key("")
        with pytest.raises(ValueError):
            operator.rotate_tenant_key("x" * 65)
    # A tenant's token, even one with the admin right, may not rotate a key.
    for token in (ACME, GLOBEX):
        with ctxstore.Client(tenants.addr, token=token) as client:
            with pytest.raises(Unauthorized):
                client.rotate_tenant_key("acme")
            client.ping()  # the connection stays open

    class Version4Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 4)

    with Version4Client(tenants.addr, token=OPERATOR) as old:
        with pytest.raises(NotSupported, match="needs protocol version 5"):
            old.rotate_tenant_key("acme")


async def test_the_async_client_is_refused_a_rotation_without_a_master_key(
    tenants: ServerProcess,
) -> None:
    async with ctxstore.AsyncClient(tenants.addr, token=OPERATOR) as operator:
        with pytest.raises(InvalidArgument):
            await operator.rotate_tenant_key("acme")
    async with ctxstore.AsyncClient(tenants.addr, token=ACME) as acme:
        with pytest.raises(Unauthorized):
            await acme.rotate_tenant_key("acme")


def test_the_operator_rotates_a_tenants_key_on_a_server_that_seals(tmp_root: Path) -> None:
    process = tenants_server(tmp_root / "tenants-rotate", master_key=True)
    try:
        before_payload = b"sealed under version 0 " + bytes(range(256)) * 64
        after_payload = b"sealed under version 2 " + bytes(range(255, -1, -1)) * 64
        with (
            ctxstore.Client(process.addr, token=ACME) as acme,
            ctxstore.Client(process.addr, token=OPERATOR) as operator,
        ):
            head = acme.create_context()
            stored = acme.append(head.context_id, before_payload)
            acme_id = {tenant.name: tenant for tenant in operator.tenants()}["acme"].tenant_id
            assert acme_id is not None and acme_id > 0
            first = operator.rotate_tenant_key("acme")
            assert isinstance(first, ctxstore.TenantKeyRotated)
            assert first == ctxstore.TenantKeyRotated(tenant_id=acme_id, key_version=1)
            # Not idempotent: each call makes another version.
            assert operator.rotate_tenant_key("acme") == ctxstore.TenantKeyRotated(acme_id, 2)
            # The operator's own data key: tenant 0, its first rotation.
            assert operator.rotate_tenant_key("operator") == ctxstore.TenantKeyRotated(0, 1)
            # What acme stored before reads as before, byte-exact; what it stores now too.
            assert acme.get_blob(stored.turn.payload_hash) == before_payload
            later = acme.append(head.context_id, after_payload)
            assert acme.get_blob(later.turn.payload_hash) == after_payload
            page = acme.last(head.context_id, payloads=True)
            assert [turn.payload for turn in page.turns] == [before_payload, after_payload]
            # A tenant's token may not rotate a key, not even its own.
            with pytest.raises(Unauthorized):
                acme.rotate_tenant_key("acme")
            acme.ping()  # the connection stays open
            # A name never registered, and a deleted tenant: InvalidArgument.
            with pytest.raises(InvalidArgument):
                operator.rotate_tenant_key("no-such-tenant")
            with ctxstore.Client(process.addr, token=GLOBEX) as globex:
                globex.create_context()
            deleted = operator.delete_tenant("globex")
            assert deleted.keys_destroyed  # the store seals: the keys are destroyed
            with pytest.raises(InvalidArgument):
                operator.rotate_tenant_key("globex")
            operator.ping()  # the connection stays open
        # The keyring is durable: after a restart, both payloads still read, the versions go on.
        process.stop()
        process.start()
        with (
            ctxstore.Client(process.addr, token=ACME) as acme,
            ctxstore.Client(process.addr, token=OPERATOR) as operator,
        ):
            assert acme.get_blob(stored.turn.payload_hash) == before_payload
            assert acme.get_blob(later.turn.payload_hash) == after_payload
            assert operator.rotate_tenant_key("acme") == ctxstore.TenantKeyRotated(acme_id, 3)
            assert operator.rotate_tenant_key("operator") == ctxstore.TenantKeyRotated(0, 2)
    finally:
        process.stop()


async def test_the_async_client_rotates_a_tenants_key_too(tmp_root: Path) -> None:
    process = tenants_server(tmp_root / "tenants-rotate-async", master_key=True)
    try:
        async with ctxstore.AsyncClient(process.addr, token=GLOBEX) as globex:
            head = await globex.create_context()
            stored = await globex.append(head.context_id, b"globex's payload, version 0")
        async with ctxstore.AsyncClient(process.addr, token=OPERATOR) as operator:
            rotated = await operator.rotate_tenant_key("globex")
            assert rotated.tenant_id > 0 and rotated.key_version == 1
            assert (await operator.rotate_tenant_key("globex")).key_version == 2
            assert await operator.rotate_tenant_key("operator") == ctxstore.TenantKeyRotated(0, 1)
            with pytest.raises(InvalidArgument):
                await operator.rotate_tenant_key("no-such-tenant")
        async with ctxstore.AsyncClient(process.addr, token=GLOBEX) as globex:
            assert await globex.get_blob(stored.turn.payload_hash) == b"globex's payload, version 0"
    finally:
        process.stop()
