"""The payload verification policy (decision 0015). ``verify_payloads="when_remote"`` (the
default) hashes a RAW payload only on a connection to a server that is not on loopback (the
server hashed it when it read it); ``"always"`` hashes it everywhere. Lengths are always
checked, and ZSTD payloads (whose inflated bytes the server never hashed) are always inflated
and hashed. Against a real server (on loopback) and fakes that answer reads with payloads the
tests break."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import zstandard

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p

from conftest import ServerProcess
from fakes import FakeServer, hello_then_same

# --- the decision from the peer's address -----------------------------------------------------

LOOPBACK = [
    "127.0.0.1",
    "127.1.2.3",
    "127.255.255.254",
    "::1",
    "::ffff:127.0.0.1",
    "::ffff:127.9.8.7",
]
REMOTE = [
    "10.0.0.1",
    "192.168.1.1",
    "128.0.0.1",
    "0.0.0.0",
    "::ffff:10.0.0.1",
    "2001:db8::1",
    "::",
    "fe80::1%eth0",
    "localhost",  # getpeername() gives addresses, never names: a name is not taken as loopback
    "",
]


def _peer(host: str) -> tuple[Any, ...]:
    """``host`` as ``getpeername()`` gives it: (host, port) for IPv4, (host, port, flowinfo,
    scope_id) for IPv6."""
    return (host, 7411, 0, 0) if ":" in host else (host, 7411)


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_peers_are_trusted_unless_always(host: str) -> None:
    assert ops.is_loopback(host)
    assert ops.hashes_raw_from("when_remote", _peer(host)) is False
    assert ops.hashes_raw_from("always", _peer(host)) is True


@pytest.mark.parametrize("host", REMOTE)
def test_remote_peers_are_hashed(host: str) -> None:
    assert not ops.is_loopback(host)
    assert ops.hashes_raw_from("when_remote", _peer(host)) is True
    assert ops.hashes_raw_from("always", _peer(host)) is True


@pytest.mark.parametrize("peer", [None, (), "127.0.0.1", (None, 0)])
def test_a_peer_the_socket_cannot_tell_counts_as_remote(peer: object) -> None:
    assert ops.hashes_raw_from("when_remote", peer) is True


# --- the option -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["never", "", "Always", "when-remote", True, None, 1])
def test_an_unknown_verify_payloads_is_refused_before_connecting(value: Any) -> None:
    # Nobody listens on port 1: without the check these would be ConnectErrors.
    with pytest.raises(ValueError, match="verify_payloads"):
        ctxstore.Client("127.0.0.1:1", verify_payloads=value)
    with pytest.raises(ValueError, match="verify_payloads"):
        ctxstore.AsyncClient("127.0.0.1:1", verify_payloads=value)
    with pytest.raises(ValueError, match="verify_payloads"):
        asyncio.run(ctxstore.AsyncClient.connect("127.0.0.1:1", verify_payloads=value))


def test_nothing_is_decided_without_a_connection(server: ServerProcess) -> None:
    lazy = ctxstore.Client(server.addr, lazy=True)
    assert lazy.verifies_raw_payloads  # no connection yet: the safe side
    lazy.ping()
    assert not lazy.verifies_raw_payloads
    lazy.close()
    assert lazy.verifies_raw_payloads

    async def run() -> None:
        client = ctxstore.AsyncClient(server.addr)
        assert client.verifies_raw_payloads
        await client.ping()
        assert not client.verifies_raw_payloads
        await client.close()
        assert client.verifies_raw_payloads

    asyncio.run(run())


# --- against a real server (on loopback) ------------------------------------------------------

BODIES = [
    b"x",
    b"a compressible turn, stored as zstd by the server " * 2000,
    os.urandom(200_000),
]


@pytest.mark.parametrize("accept_zstd", [True, False])
@pytest.mark.parametrize(("verify", "hashes"), [("when_remote", False), ("always", True)])
def test_reads_return_exact_bytes_in_both_modes(
    server: ServerProcess, verify: str, hashes: bool, accept_zstd: bool
) -> None:
    with ctxstore.Client(server.addr, verify_payloads=verify, accept_zstd=accept_zstd) as client:
        assert client.verifies_raw_payloads is hashes  # the default trusts a loopback server
        ctx = client.create_context()
        appended = [client.append(ctx.context_id, body) for body in BODIES]
        client.kv_put(ctx.context_id, {b"k%d" % i: body for i, body in enumerate(BODIES)})
        page = client.last(ctx.context_id, 10, payloads=True)
        assert [t.payload for t in page] == BODIES
        assert [t.payload for t in client.window(ctx.context_id, payloads=True)] == BODIES
        log = client.turn_log(ctx.context_id, payloads=True)
        assert [t.payload for t in log] == BODIES[::-1]
        for i, (body, turn) in enumerate(zip(BODIES, appended, strict=True)):
            assert client.get_blob(turn.payload_hash) == body
            assert client.kv_get(ctx.context_id, b"k%d" % i) == body


@pytest.mark.parametrize(("verify", "hashes"), [("when_remote", False), ("always", True)])
async def test_async_reads_return_exact_bytes_in_both_modes(
    server: ServerProcess, verify: str, hashes: bool
) -> None:
    async with ctxstore.AsyncClient(server.addr, verify_payloads=verify) as client:
        assert client.verifies_raw_payloads is hashes
        ctx = await client.create_context()
        appended = [await client.append(ctx.context_id, body) for body in BODIES]
        await client.kv_put(ctx.context_id, {b"k%d" % i: body for i, body in enumerate(BODIES)})
        page = await client.last(ctx.context_id, 10, payloads=True)
        assert [t.payload for t in page] == BODIES
        window = await client.window(ctx.context_id, payloads=True)
        assert [t.payload for t in window] == BODIES
        for i, (body, turn) in enumerate(zip(BODIES, appended, strict=True)):
            assert await client.get_blob(turn.payload_hash) == body
            assert await client.kv_get(ctx.context_id, b"k%d" % i) == body


def _wait_disconnected(client: ctxstore.Client) -> None:
    deadline = time.monotonic() + 10
    while client.connected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not client.connected, "the client did not notice the server's end"


def test_a_reconnect_decides_again_with_the_same_option(own_server: ServerProcess) -> None:
    always = ctxstore.Client(own_server.addr, timeout=10, verify_payloads="always")
    default = ctxstore.Client(own_server.addr, timeout=10)
    try:
        assert always.verifies_raw_payloads and not default.verifies_raw_payloads
        first = always._conn, default._conn
        own_server.kill()
        _wait_disconnected(always)
        _wait_disconnected(default)
        own_server.start()  # same port
        always.ping()  # reconnects
        default.ping()
        assert always._conn is not first[0] and default._conn is not first[1]
        assert always.verifies_raw_payloads  # the option outlived the connection
        assert not default.verifies_raw_payloads
    finally:
        always.close()
        default.close()


async def test_async_a_reconnect_decides_again_with_the_same_option(
    own_server: ServerProcess,
) -> None:
    async with ctxstore.AsyncClient(own_server.addr, timeout=10, verify_payloads="always") as c:
        assert c.verifies_raw_payloads
        first = c._conn
        own_server.kill()
        deadline = time.monotonic() + 10
        while c.connected and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not c.connected
        own_server.start()
        await c.ping()  # reconnects
        assert c._conn is not first
        assert c.verifies_raw_payloads


# --- against fakes that answer reads with broken payloads -------------------------------------

BODY = bytes(range(256)) * 8
OTHER = BODY[::-1]  # as long as BODY, other bytes
BODY_HASH = ctxstore.blob_hash(BODY)


def _record(length: int = len(BODY)) -> p.TurnRecord:
    return p.TurnRecord(5, 0, 1, 0, 0, 0, BODY_HASH, length, 0, 1)


def _extras(payload: p.PayloadRecord) -> tuple[p.TurnExtrasEntry, ...]:
    return (p.TurnExtrasEntry(_record(), p.ExtrasRecord(), payload),)


def _turns(payload: p.PayloadRecord, msg: p.MessageType) -> p.TurnsResponse:
    return p.TurnsResponse(0, 0, (p.TurnEntry(_record(), payload),), msg.response_type)


def _first_payload(page: Any) -> bytes | None:
    payload: bytes | None = page.turns[0].payload
    return payload


def _itself(value: Any) -> bytes | None:
    result: bytes | None = value
    return result


@dataclass(frozen=True)
class Read:
    """A read of the payload of a turn (or blob, or value) of ``BODY``: the answer a fake gives
    with a given PAYLOAD, the call (a coroutine on an AsyncClient), the payload in its result,
    and whether the answer tells the payload's length (a turn's ``payload_len``)."""

    answer: Callable[[p.PayloadRecord], p.Response]
    call: Callable[[Any], Any]
    payload_of: Callable[[Any], bytes | None]
    has_length: bool = True


READS = {
    "last": Read(
        lambda pl: _turns(pl, p.MessageType.GET_LAST),
        lambda c: c.last(1, 1, payloads=True),
        _first_payload,
    ),
    "before": Read(
        lambda pl: _turns(pl, p.MessageType.GET_BEFORE),
        lambda c: c.before(1, 9, 1, payloads=True),
        _first_payload,
    ),
    "window": Read(
        lambda pl: p.PageResponse(0, 0, _extras(pl)),
        lambda c: c.window(1, payloads=True),
        _first_payload,
    ),
    "read_page": Read(
        lambda pl: p.PageResponse(0, 0, _extras(pl)),
        lambda c: c.read_page(1, before=9, payloads=True),
        _first_payload,
    ),
    "turn_log": Read(
        lambda pl: p.TurnLogResponse(None, _extras(pl)),
        lambda c: c.turn_log(1, payloads=True),
        _first_payload,
    ),
    "get_blob": Read(
        lambda pl: p.BlobResponse(pl), lambda c: c.get_blob(BODY_HASH), _itself, False
    ),
    "kv_get": Read(
        lambda pl: p.KvValueResponse(BODY_HASH, pl), lambda c: c.kv_get(1, b"k"), _itself, False
    ),
}
TURN_READS = [kind for kind, read in READS.items() if read.has_length]
CLIENTS = ["sync", "async"]


def _read(kind: str, client: str, verify: str | None, payload: p.PayloadRecord) -> tuple[Any, bool]:
    """Reads through a ``client`` ("sync" or "async") with ``verify_payloads=verify`` (None:
    not given, the default) from a fake (on loopback) that answers with ``payload``: the
    payload read, and the client's ``verifies_raw_payloads``."""
    read = READS[kind]
    options: dict[str, Any] = {} if verify is None else {"verify_payloads": verify}
    with FakeServer(hello_then_same(read.answer(payload))) as fake:
        if client == "sync":
            with ctxstore.Client(fake.addr, timeout=5, **options) as sync:
                return read.payload_of(read.call(sync)), sync.verifies_raw_payloads

        async def run() -> tuple[Any, bool]:
            async with ctxstore.AsyncClient(fake.addr, timeout=5, **options) as aio:
                return read.payload_of(await read.call(aio)), aio.verifies_raw_payloads

        return asyncio.run(run())


def _raw(data: bytes) -> p.PayloadRecord:
    return p.PayloadRecord(p.PayloadEncoding.RAW, len(data), data)


def _zstd(data: bytes, raw_len: int | None = None) -> p.PayloadRecord:
    frame = zstandard.ZstdCompressor(level=1).compress(data)
    return p.PayloadRecord(p.PayloadEncoding.ZSTD, len(data) if raw_len is None else raw_len, frame)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("kind", sorted(READS))
def test_sound_payloads_read_in_both_modes(kind: str, client: str) -> None:
    # The fakes' answers pass every other check: what the tests below refuse is the payload.
    assert _read(kind, client, "when_remote", _raw(BODY)) == (BODY, False)
    assert _read(kind, client, "always", _raw(BODY)) == (BODY, True)
    assert _read(kind, client, "when_remote", _zstd(BODY)) == (BODY, False)
    assert _read(kind, client, "always", _zstd(BODY)) == (BODY, True)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("kind", sorted(READS))
def test_a_raw_payload_that_does_not_match_its_hash(kind: str, client: str) -> None:
    with pytest.raises(ctxstore.IntegrityError, match="does not match"):
        _read(kind, client, "always", _raw(OTHER))
    # The default trusts a server on loopback: it hashed every RAW payload it sends when it
    # read it (its cache holds only checked bytes), and no network lies between the two. The
    # fake did not hash, which is what lets this show that the client did not either.
    assert _read(kind, client, None, _raw(OTHER)) == (OTHER, False)
    assert _read(kind, client, "when_remote", _raw(OTHER)) == (OTHER, False)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("kind", TURN_READS)
@pytest.mark.parametrize("verify", [None, "always"])
def test_a_payload_of_the_wrong_length_is_refused_in_both_modes(
    kind: str, client: str, verify: str
) -> None:
    with pytest.raises(ctxstore.IntegrityError, match="the turn says"):
        _read(kind, client, verify, _raw(BODY + b"!"))
    with pytest.raises(ctxstore.IntegrityError, match="the turn says"):
        _read(kind, client, verify, _raw(BODY[:-1]))
    with pytest.raises(ctxstore.IntegrityError, match="the turn says"):
        _read(kind, client, verify, _zstd(BODY + b"!"))


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("kind", sorted(READS))
@pytest.mark.parametrize("verify", [None, "always"])
def test_a_corrupt_zstd_payload_is_refused_in_both_modes(
    kind: str, client: str, verify: str
) -> None:
    # Inflates cleanly to bytes of the right length that are not the payload: only the hash
    # can tell, and the server never hashed them.
    with pytest.raises(ctxstore.IntegrityError, match="does not match"):
        _read(kind, client, verify, _zstd(OTHER))
    # Does not inflate at all.
    garbage = p.PayloadRecord(p.PayloadEncoding.ZSTD, len(BODY), b"\x28\xb5\x2f\xfd" + bytes(40))
    with pytest.raises(ctxstore.IntegrityError):
        _read(kind, client, verify, garbage)
    # Inflates to more than it claims.
    with pytest.raises(ctxstore.IntegrityError):
        _read(kind, client, verify, _zstd(BODY + b"!", raw_len=len(BODY)))


# --- the framework adapters pass the option on ------------------------------------------------


def test_the_langgraph_saver_passes_verify_payloads_to_both_clients(server: ServerProcess) -> None:
    from ctxstore.langgraph import CtxstoreSaver

    saver = CtxstoreSaver.from_addr(server.addr, verify_payloads="always")
    saver.client.ping()
    assert saver.client.verifies_raw_payloads

    async def run() -> bool:
        try:
            await saver.aclient.ping()  # made from the Client's settings
            return saver.aclient.verifies_raw_payloads
        finally:
            await saver.aclose()  # both clients

    assert asyncio.run(run())
    with pytest.raises(ValueError, match="verify_payloads"):
        CtxstoreSaver.from_addr(server.addr, verify_payloads="sometimes")


async def test_the_agents_session_passes_verify_payloads_to_its_client(
    server: ServerProcess,
) -> None:
    from ctxstore.agents import CtxstoreSession

    async with CtxstoreSession("verify", addr=server.addr, verify_payloads="always") as session:
        await session.client.ping()
        assert session.client.verifies_raw_payloads
    async with CtxstoreSession("verify", addr=server.addr) as session:
        await session.client.ping()
        assert not session.client.verifies_raw_payloads
