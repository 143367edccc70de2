"""The blocking client against a real ctxstore-server: every request round-trips; pipelining
across threads; every ERROR code the server can be driven to produce over the network."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import ctxstore
from ctxstore import _protocol as p
from ctxstore.errors import CONNECTION_CLOSING_CODES, ERROR_CLASSES

from conftest import REPO_ROOT, ServerProcess, new_server
from fakes import FakeServer, hello_then_answer, hello_then_error


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[ctxstore.Client]:
    with ctxstore.Client(server.addr, timeout=20) as c:
        yield c


@pytest.fixture(scope="module")
def nocache_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server without a payload cache: reads ship stored (zstd) bodies when accepted. Its
    payloads stay one record each (``--chunk-threshold off``): a payload the server stored
    as chunks (decision 0013) is rebuilt on a read and shipped RAW."""
    process = new_server(
        tmp_root, extra_args=["--payload-cache-bytes", "0", "--chunk-threshold", "off"]
    )
    yield process
    process.stop()


def text_payload(i: int, size: int = 3000) -> bytes:
    line = f'{{"role": "assistant", "turn": {i}, "content": "the quick brown fox"}}\n'.encode()
    return (line * (size // len(line) + 1))[:size]


# --- round trips ------------------------------------------------------------------------------


def test_hello_reports_version_and_limits(client: ctxstore.Client) -> None:
    info = client.server_info()
    assert info.version == 7 == ctxstore.PROTOCOL_VERSION
    assert info.server_name.startswith("ctxstore")
    assert info.frame_bytes_max == 16 << 20
    assert info.requests_in_flight_max == 1024
    assert info.read_turns_max == 10_000
    assert info.has_blobs_max == 4096
    assert 0 < info.blob_bytes_max <= info.frame_bytes_max


def test_ping(client: ctxstore.Client) -> None:
    client.ping()
    client.ping(0)
    client.ping(p.U64_MAX)


def test_create_append_read_back(client: ctxstore.Client) -> None:
    ctx = client.create_context()
    assert ctx.is_empty and ctx.head_depth == 0 and ctx.context_id > 0
    assert client.head(ctx.context_id) == ctx

    bodies = [text_payload(i, 100 + i * 37) for i in range(20)] + [b"", os.urandom(70_000)]
    appended = []
    for i, body in enumerate(bodies):
        a = client.append(ctx.context_id, body, type_tag=i, codec=i % 3)
        assert a.turn.context_id == ctx.context_id
        assert a.turn.depth == i and a.depth == i
        assert a.turn.parent_turn_id == (appended[-1].turn_id if appended else 0)
        assert a.turn.payload_hash == ctxstore.blob_hash(body)
        assert a.turn.payload_len == len(body)
        assert a.turn.type_tag == i and a.turn.codec == i % 3 and a.turn.flags == 0
        assert a.turn.payload is None
        appended.append(a)

    head = client.head(ctx.context_id)
    assert head.head_turn_id == appended[-1].turn_id
    assert head.head_depth == len(bodies) - 1

    for a, body in zip(appended, bodies, strict=True):
        turn = client.get_turn(a.turn_id)
        assert turn == a.turn
        assert client.get_blob(turn.payload_hash) == body
        assert client.get_blob(turn.payload_hash_hex) == body

    page = client.last(ctx.context_id, 100, payloads=True)
    assert [t.turn_id for t in page] == [a.turn_id for a in appended]
    assert [t.payload for t in page] == bodies
    assert page.tip_depth == len(bodies) - 1
    assert page.next_before == 0  # the root was reached

    metadata_only = client.last(ctx.context_id, 5)
    assert [t.turn_id for t in metadata_only] == [a.turn_id for a in appended[-5:]]
    assert all(t.payload is None for t in metadata_only)
    assert metadata_only.next_before == appended[-5].turn_id

    older = client.before(ctx.context_id, metadata_only.next_before, 4, payloads=True)
    assert [t.turn_id for t in older] == [a.turn_id for a in appended[-9:-5]]
    assert [t.payload for t in older] == bodies[-9:-5]

    window = client.range_by_depth(ctx.context_id, 3, 4, payloads=True)
    assert [t.depth for t in window] == [3, 4, 5, 6]
    assert [t.payload for t in window] == bodies[3:7]
    assert window.tip_depth == len(bodies) - 1

    chain = client.chain(appended[10].turn_id, 0, 100, payloads=True)
    assert [t.turn_id for t in chain] == [a.turn_id for a in appended[:11]]
    assert chain.tip_depth == 10
    assert [t.payload for t in chain] == bodies[:11]

    replayed = client.replay(appended[-1].turn_id, payloads=True, page_size=6)
    assert [t.turn_id for t in replayed] == [a.turn_id for a in appended]
    assert [t.payload for t in replayed] == bodies


def test_paging_with_next_before_visits_every_turn_once(client: ctxstore.Client) -> None:
    ctx = client.create_context()
    ids = [client.append(ctx.context_id, b"turn %d" % i).turn_id for i in range(57)]
    seen: list[int] = []
    page = client.last(ctx.context_id, 10, payloads=True)
    while True:
        seen[:0] = [t.turn_id for t in page]
        for t in page:
            assert t.payload == b"turn %d" % ids.index(t.turn_id)
        if page.next_before == 0:
            break
        page = client.before(ctx.context_id, page.next_before, 10, payloads=True)
    assert seen == ids


def test_tags_at_their_limits(client: ctxstore.Client) -> None:
    ctx = client.create_context()
    a = client.append(ctx.context_id, b"x", type_tag=p.U64_MAX, codec=p.U32_MAX)
    t = client.get_turn(a.turn_id)
    assert t.type_tag == p.U64_MAX and t.codec == p.U32_MAX
    with pytest.raises(ValueError):
        client.append(ctx.context_id, b"x", type_tag=-1)
    with pytest.raises(ValueError):
        client.append(ctx.context_id, b"x", codec=1 << 32)


def test_fork_and_create_from_a_turn_share_history(client: ctxstore.Client) -> None:
    ctx = client.create_context()
    first = client.append(ctx.context_id, b"system prompt")
    second = client.append(ctx.context_id, b"user: hi")
    fork = client.fork(first.turn_id)
    assert fork.context_id != ctx.context_id
    assert (fork.head_turn_id, fork.head_depth) == (first.turn_id, 0)
    branch = client.append(fork.context_id, b"user: hello instead")
    assert branch.turn.parent_turn_id == first.turn_id and branch.depth == 1
    assert [t.payload for t in client.last(fork.context_id, 10, payloads=True)] == [
        b"system prompt",
        b"user: hello instead",
    ]
    assert client.head(ctx.context_id).head_turn_id == second.turn_id

    based = client.create_context(second.turn_id)
    assert (based.head_turn_id, based.head_depth) == (second.turn_id, 1)
    assert [t.turn_id for t in client.last(based.context_id)] == [first.turn_id, second.turn_id]


def test_expected_head_compare_and_set(client: ctxstore.Client) -> None:
    ctx = client.create_context()
    a = client.append(ctx.context_id, b"one", expected_head=0)  # must be empty
    b = client.append(ctx.context_id, b"two", expected_head=a.turn_id)
    with pytest.raises(ctxstore.Conflict) as info:
        client.append(ctx.context_id, b"three", expected_head=a.turn_id)
    assert info.value.actual_head == b.turn_id == info.value.detail
    assert info.value.code == 6
    with pytest.raises(ctxstore.Conflict) as info:
        client.append(ctx.context_id, b"three", expected_head=0)
    assert info.value.actual_head == b.turn_id
    assert client.head(ctx.context_id).head_turn_id == b.turn_id


def test_dedup_and_append_by_hash(client: ctxstore.Client) -> None:
    payload = os.urandom(5000)
    digest = ctxstore.blob_hash(payload)
    before = client.stats()
    assert client.has_blobs([digest]) == [False]
    with pytest.raises(ctxstore.NotFound):
        client.append_by_hash(client.create_context().context_id, digest)
    ctx = client.create_context()
    first = client.append(ctx.context_id, payload)
    assert not first.deduped
    second = client.append(ctx.context_id, payload)
    assert second.deduped
    by_hash = client.append_by_hash(
        ctx.context_id, digest.hex(), type_tag=5, codec=2, expected_head=second.turn_id
    )
    assert by_hash.payload_hash == digest and by_hash.turn.payload_len == len(payload)
    assert by_hash.turn.type_tag == 5 and by_hash.turn.codec == 2 and by_hash.depth == 2
    assert [t.payload for t in client.last(ctx.context_id, 3, payloads=True)] == [payload] * 3
    assert client.has_blobs([digest, bytes(32), digest.hex()]) == [True, False, True]
    after = client.stats()
    assert after.dedup_hits >= before.dedup_hits + 1
    assert after.turns >= before.turns + 3
    assert after.blobs >= before.blobs + 1
    assert not after.read_only
    assert after.connections >= 1 and after.uptime_ms > 0
    assert after.requests_total > before.requests_total


def test_has_blobs_splits_long_lists(client: ctxstore.Client) -> None:
    ctx = client.create_context()
    stored = [client.append(ctx.context_id, b"blob %d" % i).payload_hash for i in range(3)]
    asked = [bytes([i % 256, i // 256]) * 16 for i in range(9000)] + stored
    answer = client.has_blobs(asked)
    assert answer == [False] * 9000 + [True] * 3
    assert client.has_blobs([]) == []


def test_zstd_payloads_are_inflated_and_verified(nocache_server: ServerProcess) -> None:
    bodies = [text_payload(i, 20_000 + i) for i in range(12)]
    with ctxstore.Client(nocache_server.addr) as client:
        ctx = client.create_context()
        for body in bodies:
            client.append(ctx.context_id, body)
        # The raw response shows the server shipped stored zstd bodies...
        flags = p.READ_WITH_PAYLOADS | p.READ_ACCEPT_ZSTD
        raw = client.request(p.GetLast(ctx.context_id, 64, flags))
        assert isinstance(raw, p.TurnsResponse)
        encodings = {entry.payload.encoding for entry in raw.entries}
        assert p.PayloadEncoding.ZSTD in encodings
        assert sum(len(e.payload.data) for e in raw.entries) < sum(map(len, bodies)) // 2
        # ... which the client inflates and checks.
        assert [t.payload for t in client.last(ctx.context_id, 64, payloads=True)] == bodies
        assert (
            client.replay(client.head(ctx.context_id).head_turn_id, payloads=True)[3].payload
            == bodies[3]
        )
        blob = client.request(p.GetBlob(ctxstore.blob_hash(bodies[0]), p.READ_ACCEPT_ZSTD))
        assert isinstance(blob, p.BlobResponse) and blob.payload.encoding == p.PayloadEncoding.ZSTD
        assert client.get_blob(ctxstore.blob_hash(bodies[0])) == bodies[0]
    with ctxstore.Client(nocache_server.addr, accept_zstd=False) as client:
        raw = client.request(p.GetLast(ctx.context_id, 64, p.READ_WITH_PAYLOADS))
        assert isinstance(raw, p.TurnsResponse)
        assert {e.payload.encoding for e in raw.entries} == {p.PayloadEncoding.RAW}
        assert [t.payload for t in client.last(ctx.context_id, 64, payloads=True)] == bodies
        assert client.get_blob(ctxstore.blob_hash(bodies[1])) == bodies[1]


def test_large_payload_round_trip(client: ctxstore.Client) -> None:
    payload = os.urandom(3 << 20)
    ctx = client.create_context()
    a = client.append(ctx.context_id, payload)
    assert client.get_blob(a.payload_hash) == payload
    assert client.last(ctx.context_id, 1, payloads=True)[0].payload == payload


# --- pipelining -------------------------------------------------------------------------------


def test_pipelining_across_threads(server: ServerProcess) -> None:
    threads = 16
    per_thread = 40
    with ctxstore.Client(server.addr, timeout=60) as client:
        contexts = [client.create_context().context_id for _ in range(threads)]
        barrier = threading.Barrier(threads)

        def work(index: int) -> list[int]:
            barrier.wait()
            ctx = contexts[index]
            ids = []
            for i in range(per_thread):
                a = client.append(ctx, b"thread %d turn %d" % (index, i), type_tag=index)
                ids.append(a.turn_id)
                if i % 5 == 0:
                    client.ping()
                    assert client.head(ctx).head_turn_id == a.turn_id
            return ids

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(work, range(threads)))
        for index, ids in enumerate(results):
            page = client.last(contexts[index], per_thread, payloads=True)
            assert [t.turn_id for t in page] == ids
            assert [t.payload for t in page] == [
                b"thread %d turn %d" % (index, i) for i in range(per_thread)
            ]
        conn = client._conn
        assert conn is not None
        assert conn.peak_in_flight > 1, "requests of different threads were not pipelined"


def test_pipelining_from_one_thread(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr) as client:
        ctx = client.create_context()
        a = client.append(ctx.context_id, b"payload")
        batch = [ctxstore._ops.get_turn(a.turn_id) for _ in range(200)]
        turns = client._run_many(batch, None)
        assert all(t == a.turn for t in turns)
        conn = client._conn
        # More than one request of this thread was in flight at once: pipelined. (How many
        # depends on how fast the server answers while the thread sends: 6 on a loaded CI
        # machine, where this asked for 10.)
        assert conn is not None and conn.peak_in_flight > 1, "one thread's batch was not pipelined"


def test_client_in_flight_limit_follows_the_server(small_server: ServerProcess) -> None:
    with ctxstore.Client(small_server.addr) as client:
        assert client.server_info().requests_in_flight_max == 4
        ctx = client.create_context()
        with ThreadPoolExecutor(12) as pool:
            heads = list(pool.map(lambda _: client.head(ctx.context_id), range(200)))
        assert all(h == ctx for h in heads)
        conn = client._conn
        assert conn is not None and conn.peak_in_flight <= 4


def test_a_batch_longer_than_the_in_flight_limit_is_windowed(small_server: ServerProcess) -> None:
    """A pipelined batch of many requests on one thread never waits for a slot only its own
    unread responses hold (the server allows 4 in flight)."""
    from ctxstore import _ops as ops

    with ctxstore.Client(small_server.addr, timeout=10) as client:
        ctx = client.create_context()
        heads = client._run_many([ops.head(ctx.context_id) for _ in range(50)], None)
        assert heads == [ctx] * 50
        with pytest.raises(ctxstore.NotFound):
            client._run_many([ops.head(ctx.context_id)] * 9 + [ops.head(1 << 60)] * 3, None)
        conn = client._conn
        assert conn is not None and conn.peak_in_flight <= 4
        client.ping()  # every slot came back
        assert client.has_blobs([bytes(32)] * 100) == [False] * 100  # 13 requests of <= 8


# --- errors the server produces ---------------------------------------------------------------


def test_not_found(client: ctxstore.Client) -> None:
    missing = 1 << 60
    for call in (
        lambda: client.head(missing),
        lambda: client.get_turn(missing),
        lambda: client.get_blob(bytes(32)),
        lambda: client.fork(missing),
        lambda: client.last(missing),
        lambda: client.chain(missing),
        lambda: client.append(missing, b"x"),
    ):
        with pytest.raises(ctxstore.NotFound) as info:
            call()
        assert info.value.code == 5 and info.value.message
        assert isinstance(info.value, ctxstore.ServerError)
    client.ping()  # the connection stays open


def test_invalid_argument(client: ctxstore.Client) -> None:
    with pytest.raises(ctxstore.InvalidArgument) as info:
        client.fork(0)
    assert info.value.code == 11
    client.ping()


def test_too_large_limit_and_payload_keep_the_connection(small_server: ServerProcess) -> None:
    with ctxstore.Client(small_server.addr) as client:
        info = client.server_info()
        assert info.read_turns_max == 50
        ctx = client.create_context()
        conn = client._conn
        with pytest.raises(ctxstore.TooLarge) as error:
            client.last(ctx.context_id, 51)
        assert error.value.code == 3
        with pytest.raises(ctxstore.TooLarge):
            client.append(ctx.context_id, bytes(info.blob_bytes_max + 1))
        client.append(ctx.context_id, bytes(info.blob_bytes_max))
        assert client._conn is conn and client.connected


def test_too_large_has_blobs_list(small_server: ServerProcess) -> None:
    with ctxstore.Client(small_server.addr) as client:
        assert client.server_info().has_blobs_max == 8
        with pytest.raises(ctxstore.TooLarge):
            client.request(p.HasBlobs(tuple(bytes([i]) * 32 for i in range(9))))
        assert client.has_blobs([bytes([i]) * 32 for i in range(20)]) == [False] * 20


def test_too_large_frame_is_refused_by_the_client(small_server: ServerProcess) -> None:
    with ctxstore.Client(small_server.addr) as client:
        conn = client._conn
        ctx = client.create_context()
        with pytest.raises(ctxstore.TooLarge, match="checked by the client"):
            client.append(ctx.context_id, bytes((16 << 20) + 1))
        client.ping()
        assert client._conn is conn


def test_unknown_message_keeps_the_connection(client: ctxstore.Client) -> None:
    conn = client._conn
    with pytest.raises(ctxstore.UnknownMessage) as info:
        client.request(p.RawRequest(0x00FE, b"\x01\x02"))
    assert info.value.code == 2
    client.ping()
    assert client._conn is conn


def test_bad_frame_closes_the_connection_and_the_next_call_reconnects(
    server: ServerProcess,
) -> None:
    with ctxstore.Client(server.addr) as client:
        first = client._conn
        with pytest.raises(ctxstore.BadFrame) as info:
            client.request(p.RawRequest(p.MessageType.PING, b"abc"))  # PING needs 8 bytes
        assert info.value.code == 1
        client.ping()
        assert client._conn is not first


def test_second_hello_is_bad_frame(client: ctxstore.Client) -> None:
    with pytest.raises(ctxstore.BadFrame):
        client.request(p.Hello(1, 1, b"", "again"))
    client.ping()


def test_token(token_server: ServerProcess) -> None:
    with ctxstore.Client(token_server.addr, token="s3cret-token") as client:
        client.ping()
        ctx = client.create_context()
        client.append(ctx.context_id, b"authorised")
    with ctxstore.Client(token_server.addr, token=b"s3cret-token") as client:
        client.ping()
    for wrong in ("wrong", None, "", "s3cret-token x"):
        with pytest.raises(ctxstore.Unauthorized) as info:
            ctxstore.Client(token_server.addr, token=wrong)
        assert info.value.code == 4


@pytest.mark.parametrize("spaced", ["s3cret-token\n", " s3cret-token\r\n", b"s3cret-token\n"])
def test_a_token_is_trimmed_as_the_server_trims_its_token_file(
    token_server: ServerProcess, spaced: str | bytes
) -> None:
    """Issue 29: a token read from a file keeps its newline; the server trims its own token
    file, so the client takes the white space off too (else the token is "wrong")."""
    with ctxstore.Client(token_server.addr, token=spaced) as client:
        client.ping()
    with pytest.raises(ValueError, match="white space"):
        ctxstore.Client(token_server.addr, token=" \n", lazy=True)


def test_the_address_and_token_default_to_the_environment(
    token_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: CTXSTORE_ADDR and CTXSTORE_TOKEN are the clients' defaults, as the CLI's."""
    assert ctxstore.Client(lazy=True).addr == "127.0.0.1:7411"
    monkeypatch.setenv("CTXSTORE_ADDR", token_server.addr)
    monkeypatch.setenv("CTXSTORE_TOKEN", "s3cret-token\n")  # as `export X=$(cat file)` would not
    with ctxstore.Client() as client:
        assert client.addr == token_server.addr
        client.ping()
    with pytest.raises(ctxstore.Unauthorized):
        ctxstore.Client(token="")  # an explicit empty token: none, whatever the environment
    monkeypatch.setenv("CTXSTORE_TOKEN", "wrong")
    with ctxstore.Client(token="s3cret-token") as client:  # an explicit token wins
        client.ping()
    monkeypatch.setenv("CTXSTORE_ADDR", "")  # empty: unset
    assert ctxstore.Client(lazy=True).addr == "127.0.0.1:7411"


def test_unsupported_version(server: ServerProcess) -> None:
    class FutureClient(ctxstore.Client):
        PROTOCOL_VERSIONS = (8, 9)

    with pytest.raises(ctxstore.UnsupportedVersion) as info:
        FutureClient(server.addr)
    assert info.value.code == 12 and info.value.server_version == 7

    class WideClient(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 8)

    with WideClient(server.addr) as client:
        assert client.server_info().version == 7

    # A client of version 3 still speaks to a server of version 7; ROLE is refused locally.
    class Version3Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 3)

    with Version3Client(server.addr) as client:
        assert client.server_info().version == 3
        assert client.replication_stats().role == "off"
        with pytest.raises(ctxstore.NotSupported):
            client.role()
    with ctxstore.Client(server.addr) as client:
        role = client.role()
        assert (role.role, role.accepts_writes, role.ack_after, role.epoch) == (
            "off",
            True,
            "local",
            0,
        )
        assert (role.lease_ms, role.primary, role.holder) == (0, "", "")


def test_request_of_a_newer_version_is_refused_locally(client: ctxstore.Client) -> None:
    with pytest.raises(ctxstore.NotSupported):
        client.request(p.RawRequest(0x0019, b"", min_version=ctxstore.PROTOCOL_VERSION + 1))
    client.ping()


def test_overloaded(tmp_root: Path) -> None:
    process = new_server(tmp_root, extra_args=["--connections-max", "1"])
    try:
        with ctxstore.Client(process.addr) as first:
            first.ping()
            with pytest.raises(ctxstore.Overloaded) as info:
                ctxstore.Client(process.addr)
            assert info.value.code == 9
            first.ping()
    finally:
        process.stop()


# --- every ERROR code through the client (a plain socket server sends them) -------------------


@pytest.mark.parametrize("code", sorted(ERROR_CLASSES) + [99])
def test_every_error_code_maps_to_its_exception(code: int) -> None:
    with FakeServer(hello_then_error(code, detail=77)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(ctxstore.ServerError) as info:
                client.stats()
    error = info.value
    assert type(error) is ERROR_CLASSES.get(code, ctxstore.ServerError)
    assert error.code == code and error.detail == 77
    assert error.message == f"fake error {code}"
    assert isinstance(error, ctxstore.CtxstoreError)


def test_error_names_match_the_protocol_table() -> None:
    names = {
        1: "BAD_FRAME", 2: "UNKNOWN_MESSAGE", 3: "TOO_LARGE", 4: "UNAUTHORIZED",
        5: "NOT_FOUND", 6: "CONFLICT", 7: "READ_ONLY", 8: "NO_SPACE", 9: "OVERLOADED",
        10: "INTERNAL", 11: "INVALID_ARGUMENT", 12: "UNSUPPORTED_VERSION",
        13: "SHUTTING_DOWN", 14: "CORRUPT", 15: "ALREADY_EXISTS", 16: "HASH_MISMATCH",
        17: "STREAM_ENDED", 18: "STREAM_NOT_OWNED", 19: "NOT_PRIMARY", 20: "UNCONFIRMED",
        21: "QUOTA_EXCEEDED",
    }  # fmt: skip
    assert {code: cls.name for code, cls in ERROR_CLASSES.items()} == names
    # The same table as the reference implementation (protocol/src/error.rs).
    source = (REPO_ROOT / "protocol" / "src" / "error.rs").read_text()
    numbers = dict(re.findall(r"^\s+(\w+) = (\d+),$", source, re.MULTILINE))
    rust_names = dict(re.findall(r'ErrorCode::(\w+) => "(\w+)"', source))
    assert {int(numbers[v]): rust_names[v] for v in numbers} == names
    assert str(ctxstore.NotFound("no such turn")) == "NOT_FOUND (5): no such turn"


def test_errors_pickle() -> None:
    import pickle

    error = ctxstore.Conflict("moved", code=6, detail=9)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ctxstore.Conflict and copy.actual_head == 9 and copy.message == "moved"


def test_quota_exceeded_names_its_limit_and_the_connection_stays_open() -> None:
    import pickle

    # QUOTA_EXCEEDED (21, version 5): nothing was written, `detail` is the quota's limit; the
    # server keeps the connection, so the next call goes on it.
    message = "tenant acme is at its quota_contexts: 100 of 100 contexts"

    def answer(header: p.FrameHeader, body: bytes) -> bytes:
        return p.encode_response(header.req_id, p.ErrorResponse(21, 100, message))

    with FakeServer(hello_then_answer(answer, version=5)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            assert client.server_info().version == 5
            for _ in range(2):
                with pytest.raises(ctxstore.QuotaExceeded) as info:
                    client.create_context()
            assert len(fake.connections) == 1
    error = info.value
    assert isinstance(error, ctxstore.ServerError)
    assert (error.code, error.name, error.limit, error.detail) == (21, "QUOTA_EXCEEDED", 100, 100)
    assert str(error) == f"QUOTA_EXCEEDED (21): {message}"
    assert error.code not in CONNECTION_CLOSING_CODES
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ctxstore.QuotaExceeded and copy.limit == 100


def test_closed_client_refuses_calls(server: ServerProcess) -> None:
    client = ctxstore.Client(server.addr)
    client.close()
    with pytest.raises(ctxstore.ClientClosed):
        client.ping()


def test_lazy_client_and_address_forms(server: ServerProcess) -> None:
    client = ctxstore.Client(("127.0.0.1", server.port), lazy=True)
    assert not client.connected
    client.ping()
    assert client.connected
    client.close()
    with pytest.raises(ValueError):
        ctxstore.Client("no-port", lazy=True)
    with pytest.raises(ValueError):
        ctxstore.Client(server.addr, timeout=0, lazy=True)
