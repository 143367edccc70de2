"""Dropped connections and timeouts: a killed server fails the calls in flight with
ConnectionLost and the next call reconnects (to the restarted server on the same port and
data); a listener that never answers makes calls time out, never hang."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

import ctxstore
from ctxstore import _protocol as p

from conftest import ServerProcess
from fakes import FakeServer, hello_then_answer, hello_then_silent, silent


def test_killed_server_in_flight_raises_and_next_call_reconnects(own_server: ServerProcess) -> None:
    client = ctxstore.Client(own_server.addr, timeout=30)
    try:
        ctx = client.create_context()
        first = client.append(ctx.context_id, b"before the crash")

        own_server.pause()  # the request below stays in flight
        outcome: list[BaseException | None] = []

        def in_flight() -> None:
            try:
                client.append(ctx.context_id, b"in flight during the crash")
                outcome.append(None)
            except BaseException as error:  # noqa: BLE001
                outcome.append(error)

        thread = threading.Thread(target=in_flight)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive(), "the request was answered by a paused server"
        own_server.kill()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the in-flight call hangs after the server died"
        assert len(outcome) == 1 and isinstance(outcome[0], ctxstore.ConnectionLost)
        assert isinstance(outcome[0], ConnectionError)

        with pytest.raises(ctxstore.ConnectError):
            client.ping()  # nobody listens now

        own_server.start()  # same data directory, same port
        head = client.head(ctx.context_id)  # reconnects
        assert client.connected
        assert head.head_turn_id >= first.turn_id
        turns = client.last(ctx.context_id, 10, payloads=True)
        assert turns[0].payload == b"before the crash"
        after = client.append(ctx.context_id, b"after the restart")
        assert after.turn.parent_turn_id == head.head_turn_id
    finally:
        client.close()


async def test_async_killed_server_in_flight_raises_and_next_call_reconnects(
    own_server: ServerProcess,
) -> None:
    async with ctxstore.AsyncClient(own_server.addr, timeout=30) as client:
        ctx = await client.create_context()
        await client.append(ctx.context_id, b"before the crash")
        own_server.pause()
        task = asyncio.ensure_future(client.append(ctx.context_id, b"in flight"))
        await asyncio.sleep(0.3)
        assert not task.done()
        own_server.kill()
        with pytest.raises(ctxstore.ConnectionLost):
            await asyncio.wait_for(task, 10)
        with pytest.raises(ctxstore.ConnectError):
            await client.ping()
        own_server.start()
        page = await client.last(ctx.context_id, 10, payloads=True)
        assert page[0].payload == b"before the crash"
        await client.append(ctx.context_id, b"after the restart")


def test_server_restart_between_calls_is_invisible(own_server: ServerProcess) -> None:
    with ctxstore.Client(own_server.addr) as client:
        ctx = client.create_context()
        own_server.stop()
        own_server.start()
        # The old connection is gone; the reader notices EOF and the call reconnects, or the
        # call itself is the one that finds out (then it raises and the next one reconnects).
        try:
            client.head(ctx.context_id)
        except ctxstore.ConnectionLost:
            pass
        assert client.head(ctx.context_id).context_id == ctx.context_id


def test_connect_timeout_against_a_listener_that_never_answers() -> None:
    with FakeServer(silent) as fake:
        started = time.monotonic()
        with pytest.raises(ctxstore.ConnectTimeout) as info:
            ctxstore.Client(fake.addr, connect_timeout=0.5)
        assert isinstance(info.value, TimeoutError) and isinstance(info.value, ctxstore.Timeout)
        assert time.monotonic() - started < 3


def test_request_timeout_against_a_server_that_never_answers() -> None:
    with FakeServer(hello_then_silent) as fake:
        with ctxstore.Client(fake.addr, timeout=0.4) as client:
            for call in (client.ping, client.stats, lambda: client.head(1)):
                started = time.monotonic()
                with pytest.raises(ctxstore.RequestTimeout):
                    call()
                assert time.monotonic() - started < 3
            started = time.monotonic()
            with pytest.raises(ctxstore.RequestTimeout):
                client.get_turn(5, timeout=0.2)
            assert time.monotonic() - started < 2


def test_a_late_answer_is_discarded_and_the_connection_goes_on() -> None:
    answered: list[int] = []

    def answer(header: p.FrameHeader, body: bytes) -> bytes:
        nonce = p.Ping.decode_body(p.Reader(body, "PING")).nonce
        answered.append(header.req_id)
        if len(answered) == 1:
            time.sleep(0.6)  # too late for the first call
        return p.encode_response(header.req_id, p.Pong(nonce))

    with FakeServer(hello_then_answer(answer)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(ctxstore.RequestTimeout):
                client.ping(timeout=0.2)
            client.ping()  # the late PONG of the first is skipped, this one matches
            assert client.connected


async def test_async_timeouts() -> None:
    with FakeServer(silent) as fake:
        started = time.monotonic()
        with pytest.raises(ctxstore.ConnectTimeout):
            await ctxstore.AsyncClient.connect(fake.addr, connect_timeout=0.5)
        assert time.monotonic() - started < 3
    with FakeServer(hello_then_silent) as fake:
        async with ctxstore.AsyncClient(fake.addr, timeout=0.4) as client:
            started = time.monotonic()
            with pytest.raises(ctxstore.RequestTimeout):
                await client.stats()
            with pytest.raises(ctxstore.RequestTimeout):
                await client.ping(timeout=0.2)
            assert time.monotonic() - started < 3


def test_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ctxstore.ConnectError):
        ctxstore.Client(f"127.0.0.1:{port}", connect_timeout=2)


def test_close_fails_calls_in_flight() -> None:
    with FakeServer(hello_then_silent) as fake:
        client = ctxstore.Client(fake.addr, timeout=10)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                client.ping()
            except BaseException as error:  # noqa: BLE001
                errors.append(error)

        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.2)
        client.close()
        thread.join(timeout=5)
        assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], ctxstore.ClientClosed)


def test_many_threads_in_flight_when_the_server_dies(own_server: ServerProcess) -> None:
    client = ctxstore.Client(own_server.addr, timeout=20)
    ctx = client.create_context().context_id
    stop = threading.Event()
    outcomes: list[str] = []
    lock = threading.Lock()

    def hammer() -> None:
        while not stop.is_set():
            try:
                client.append(ctx, b"x" * 2048)
                result = "ok"
            except ctxstore.ConnectionLost:
                result = "lost"
            except ctxstore.ConnectError:
                result = "refused"
            with lock:
                outcomes.append(result)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    own_server.kill()
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads), "a call hangs"
    assert "ok" in outcomes and ("lost" in outcomes or "refused" in outcomes)
    own_server.start()
    assert client.head(ctx).head_turn_id > 0
    client.close()
