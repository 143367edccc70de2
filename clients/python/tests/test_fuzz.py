"""Property tests of the decoders (hypothesis): random and mutated bytes make a decoder
return a value or raise ProtocolError, nothing else; valid messages round-trip; a client
facing a server that sends garbage raises, never hangs."""

from __future__ import annotations

import socket
import time

import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p
from ctxstore.errors import ConnectionLost, CtxstoreError, ProtocolError

from fakes import FakeServer, hello_then_answer, hello_then_bytes
from test_golden import EXPECTED, golden_frames

RESPONSE_TYPES = sorted(p.RESPONSE_TYPES)
REQUEST_TYPES = sorted(p.REQUEST_TYPES)

u16 = st.integers(0, p.U16_MAX)
u32 = st.integers(0, p.U32_MAX)
u64 = st.integers(0, p.U64_MAX)
hashes = st.binary(min_size=32, max_size=32)
names = st.text(max_size=40).filter(lambda s: len(s.encode()) <= p.NAME_BYTES_MAX)
# Version 2: a context by id or by (non-empty) name; tags; key-value keys and values.
context_names = st.text(min_size=1, max_size=20)
context_refs = u64 | context_names
tag_lists = st.lists(st.tuples(st.text(max_size=8), st.text(max_size=12)), max_size=4).map(tuple)
kv_keys = st.binary(max_size=24)
time_bounds = st.none() | st.integers(1, p.U64_MAX)
list_cursors = st.none() | u64 | context_names

turns = st.builds(
    p.TurnRecord,
    turn_id=u64,
    parent_turn_id=u64,
    context_id=u64,
    depth=u32,
    codec=u32,
    type_tag=u64,
    payload_hash=hashes,
    payload_len=u32,
    flags=st.sampled_from([0, p.TURN_SUMMARY]),
    created_at_unix_ms=u64,
)

# Version 2, turns for agent frameworks: extras, turn specs, log cursors, page kinds.
tiny_text = st.text(max_size=12).filter(lambda s: len(s.encode()) <= p.TINY_BYTES_MAX)
label_lists = st.lists(st.tuples(tiny_text, st.text(max_size=12)), max_size=4).map(tuple)
extras = st.builds(
    p.ExtrasRecord,
    st.binary(max_size=24),
    label_lists,
    st.lists(u64, max_size=8).map(tuple),
)
log_cursors = st.none() | st.builds(p.LogCursor, u32, u64)


@st.composite
def turn_specs(draw: st.DrawFn) -> p.TurnSpecRecord:
    kind = draw(st.sampled_from(list(p.ParentKind)))
    parent = draw(st.integers(1, p.U64_MAX)) if kind == p.ParentKind.TURN else 0
    by_hash = draw(st.booleans())
    payload = draw(hashes if by_hash else st.binary(max_size=5000))
    return p.TurnSpecRecord(
        kind, parent, draw(u64), draw(u32), draw(st.booleans()), draw(extras), payload, by_hash
    )


@st.composite
def read_pages(draw: st.DrawFn) -> p.ReadPage:
    kind = draw(st.sampled_from(list(p.PageKind)))
    before = draw(u64) if kind == p.PageKind.BEFORE else 0
    from_depth = draw(u32) if kind == p.PageKind.RANGE else 0
    flags = draw(st.integers(0, p.READ_FLAGS_KNOWN))
    return p.ReadPage(draw(context_refs), kind, before, from_depth, draw(u32), flags)


entries_v2 = st.deferred(
    lambda: st.lists(st.builds(p.TurnExtrasEntry, turns, extras, payloads()), max_size=4).map(tuple)
)


@st.composite
def payloads(draw: st.DrawFn) -> p.PayloadRecord:
    encoding = draw(st.sampled_from(list(p.PayloadEncoding)))
    if encoding == p.PayloadEncoding.ABSENT:
        return p.PayloadRecord(encoding, 0, b"")
    data = draw(st.binary(max_size=64))
    if encoding == p.PayloadEncoding.RAW:
        return p.PayloadRecord(encoding, len(data), data)
    return p.PayloadRecord(encoding, draw(u32), data)


@st.composite
def put_chunked(draw: st.DrawFn) -> p.PutChunked:
    """PUT_CHUNKED within the codec's limits: 1-6 chunks, some of them sent (now and then one
    large enough to travel as its own chunk of the frame)."""
    lengths = draw(st.lists(st.integers(1, 40) | st.just(5000), min_size=1, max_size=6))
    chunks = tuple(p.ChunkRecord(draw(hashes), length) for length in lengths)
    indexes = sorted(draw(st.sets(st.integers(0, len(chunks) - 1))))
    sent = tuple(
        p.SentChunkRecord(i, draw(st.binary(min_size=lengths[i], max_size=lengths[i])))
        for i in indexes
    )
    return p.PutChunked(draw(hashes), chunks, sent)


# Version 6, vector search: f32 components (NaN never equals itself: left out of round trips).
f32s = st.floats(width=32, allow_nan=False)
index_names = st.text(min_size=1, max_size=16).filter(
    lambda s: len(s.encode()) <= p.VECTOR_INDEX_NAME_BYTES_MAX
)
vector_index_infos = st.builds(
    p.VectorIndexInfoRecord,
    u32,
    st.integers(1, p.VECTOR_DIMS_MAX),
    st.sampled_from(list(p.VectorMetric)),
    st.integers(0, p.VECTOR_EF_SEARCH_MAX),
    u64,
    index_names,
)


@st.composite
def kv_put_vectors(draw: st.DrawFn) -> p.KvPutVectors:
    dims = draw(st.integers(0, 6))
    vectors = st.lists(st.lists(f32s, min_size=dims, max_size=dims).map(tuple), max_size=3)
    entries = draw(
        st.lists(
            st.builds(p.KvVectorEntryRecord, kv_keys, st.binary(max_size=5000), vectors.map(tuple)),
            max_size=3,
        )
    )
    return p.KvPutVectors(
        draw(context_refs),
        draw(st.sampled_from([0, p.KV_PUT_IF_ABSENT])),
        draw(u64),
        draw(st.text(max_size=16)),
        dims,
        tuple(entries),
    )


@st.composite
def append_turns_vectors(draw: st.DrawFn) -> p.AppendTurnsVectors:
    """Version 7: turns with their vectors (of one dimension, 0 when none carries one)."""
    dims = draw(st.integers(0, 6))
    vectors = st.lists(st.lists(f32s, min_size=dims, max_size=dims).map(tuple), max_size=3)
    turns = draw(
        st.lists(
            st.builds(p.VectorTurnRecord, turn_specs(), vectors.map(tuple)), min_size=1, max_size=3
        )
    )
    return p.AppendTurnsVectors(
        draw(context_refs), draw(st.none() | u64), draw(st.text(max_size=16)), dims, tuple(turns)
    )


@st.composite
def vector_search_turns(draw: st.DrawFn) -> p.VectorSearchTurns:
    flags = draw(st.integers(0, p.VECTOR_SEARCH_TURNS_FLAGS_KNOWN))
    return p.VectorSearchTurns(
        draw(st.text(max_size=16)),
        tuple(draw(st.lists(f32s, max_size=8))),
        draw(u16),
        draw(u16),
        flags,
        draw(u16),
        draw(context_refs),
        draw(st.text(max_size=12)),
        draw(tag_lists),
        draw(tag_lists),
        draw(u64) if flags & p.VECTOR_SEARCH_TYPE_TAG else 0,
    )


def _with_type(cls: type[p.Response], types: tuple[int, ...]) -> st.SearchStrategy[int]:
    return st.sampled_from(types)


context_infos = st.builds(
    p.ContextInfoRecord,
    st.builds(p.ContextHeadRecord, u64, u64, u32),
    u64,
    u64,
    st.none() | context_names,
    tag_lists,
)

responses: st.SearchStrategy[p.Response] = st.one_of(
    st.builds(p.HelloResponse, u16, u32, u32, u32, u32, u32, names),
    st.builds(p.Pong, u64),
    st.builds(
        p.ContextResponse,
        st.builds(p.ContextHeadRecord, u64, u64, u32),
        st.sampled_from(p.ContextResponse.MSG_TYPES),
    ),
    st.builds(
        p.AppendedResponse, turns, st.booleans(), st.sampled_from(p.AppendedResponse.MSG_TYPES)
    ),
    st.builds(p.TurnResponse, turns),
    st.builds(
        p.TurnsResponse,
        u64,
        u32,
        st.lists(st.builds(p.TurnEntry, turns, payloads()), max_size=4).map(tuple),
        st.sampled_from(p.TurnsResponse.MSG_TYPES),
    ),
    st.builds(p.BlobResponse, payloads()),
    st.builds(p.HasBlobsResponse, st.lists(st.booleans(), max_size=40).map(tuple)),
    st.builds(p.StatsResponse, *([u64] * 11), st.booleans()),
    st.builds(
        p.ErrorResponse,
        st.integers(1, p.U16_MAX),
        u64,
        st.text(max_size=60).filter(lambda s: len(s.encode()) <= p.MESSAGE_BYTES_MAX),
    ),
    st.builds(p.OpenedResponse, context_infos, st.booleans()),
    st.builds(
        p.ContextInfoResponse, context_infos, st.sampled_from(p.ContextInfoResponse.MSG_TYPES)
    ),
    st.builds(p.ContextListResponse, list_cursors, st.lists(context_infos, max_size=3).map(tuple)),
    st.builds(p.DoneResponse, st.sampled_from(p.DoneResponse.MSG_TYPES)),
    st.builds(p.KvValueResponse, hashes, payloads()),
    st.builds(
        p.KvListResponse,
        st.lists(st.builds(p.KvItemRecord, kv_keys, hashes, u32), max_size=5).map(tuple),
    ),
    st.builds(
        p.AppendedTurnsResponse,
        st.lists(
            st.builds(p.AppendedTurnRecord, turns, st.booleans(), st.booleans()), max_size=4
        ).map(tuple),
        st.sampled_from(p.AppendedTurnsResponse.MSG_TYPES),
    ),
    st.builds(p.TurnInfoResponse, turns, extras),
    st.builds(p.TurnLogResponse, log_cursors, entries_v2),
    st.builds(p.PageResponse, u64, u32, entries_v2),
    st.builds(p.ChunkedStoredResponse, hashes, u64, st.booleans()),
    st.builds(
        p.VectorIndexResponse, vector_index_infos, st.sampled_from(p.VectorIndexResponse.MSG_TYPES)
    ),
    st.builds(p.VectorIndexesResponse, st.lists(vector_index_infos, max_size=3).map(tuple)),
    st.builds(
        p.VectorHitsResponse,
        st.sampled_from(list(p.VectorMethod)),
        u32,
        st.lists(st.builds(p.VectorHitRecord, kv_keys, f32s, hashes, u32), max_size=4).map(tuple),
    ),
    st.builds(
        p.TurnHitsResponse,
        st.sampled_from(list(p.VectorMethod)),
        u32,
        st.lists(st.builds(p.TurnHitRecord, turns, f32s), max_size=4).map(tuple),
    ),
)

requests: st.SearchStrategy[p.Request] = st.one_of(
    st.builds(
        p.Hello,
        st.integers(1, 3),
        st.integers(3, 9),
        st.binary(max_size=p.TOKEN_BYTES_MAX),
        names,
    ),
    st.builds(p.Ping, u64),
    st.builds(p.CtxCreate, u64),
    st.builds(p.CtxFork, u64),
    st.builds(p.GetHead, context_refs),
    st.builds(p.AppendTurn, context_refs, st.none() | u64, u64, u32, st.binary(max_size=5000)),
    st.builds(p.AppendTurnByHash, context_refs, st.none() | u64, u64, u32, hashes),
    st.builds(p.GetTurn, u64),
    st.builds(p.GetLast, context_refs, u32, st.integers(0, p.READ_FLAGS_KNOWN)),
    st.builds(p.GetBefore, context_refs, u64, u32, st.integers(0, p.READ_FLAGS_KNOWN)),
    st.builds(p.GetRangeByDepth, context_refs, u32, u32, st.integers(0, p.READ_FLAGS_KNOWN)),
    st.builds(p.GetChain, u64, u32, u32, st.integers(0, p.READ_FLAGS_KNOWN)),
    st.builds(p.GetBlob, hashes, st.sampled_from([0, p.READ_ACCEPT_ZSTD])),
    st.builds(p.HasBlobs, st.lists(hashes, max_size=10).map(tuple)),
    st.just(p.Stats()),
    st.builds(
        p.CtxOpen,
        u64,
        st.booleans(),
        st.none() | context_refs,
        st.none() | context_names,
        tag_lists,
    ),
    st.builds(p.CtxShow, context_refs),
    st.builds(
        p.CtxTag,
        context_refs,
        st.none() | u64,
        tag_lists,
        st.lists(st.text(max_size=8), max_size=3).map(tuple),
    ),
    st.builds(
        p.CtxList,
        tag_lists,
        st.none() | context_names,
        time_bounds,
        time_bounds,
        list_cursors,
        u32,
    ),
    st.builds(p.CtxName, context_refs, st.text(max_size=20)),
    st.builds(
        p.KvPut,
        context_refs,
        st.booleans(),
        st.lists(st.tuples(kv_keys, st.binary(max_size=5000)), max_size=4).map(tuple),
    ),
    st.builds(p.KvGet, context_refs, kv_keys, st.sampled_from([0, p.READ_ACCEPT_ZSTD])),
    st.builds(p.KvDelete, context_refs, st.lists(kv_keys, max_size=4).map(tuple)),
    st.builds(p.KvList, context_refs, kv_keys, kv_keys, u32),
    st.builds(
        p.AppendTurns,
        context_refs,
        st.none() | u64,
        st.lists(turn_specs(), min_size=1, max_size=3).map(tuple),
    ),
    st.builds(p.GetTurnByKey, context_refs, st.binary(max_size=p.TINY_BYTES_MAX)),
    st.builds(
        p.TurnLog, context_refs, label_lists, log_cursors, u32, st.integers(0, p.READ_FLAGS_KNOWN)
    ),
    read_pages(),
    put_chunked(),
    st.builds(p.VectorIndexCreate, st.text(max_size=16), u16, st.integers(0, 255), u16),
    st.builds(p.VectorIndexDrop, st.text(max_size=16)),
    st.just(p.VectorIndexList()),
    st.builds(
        p.VectorSearch,
        context_refs,
        st.text(max_size=16),
        st.lists(f32s, max_size=8).map(tuple),
        u16,
        u16,
        st.sampled_from([0, p.VECTOR_SEARCH_EXACT]),
        u16,
        kv_keys,
        st.binary(max_size=40),
    ),
    kv_put_vectors(),
    append_turns_vectors(),
    vector_search_turns(),
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def only_protocol_errors(call: object, *args: object) -> object:
    """Runs ``call(*args)``; a ProtocolError is fine, anything else fails the test."""
    try:
        return call(*args)  # type: ignore[operator]
    except ProtocolError:
        return None


# --- frames ---------------------------------------------------------------------------------


@FAST
@given(st.binary(min_size=16, max_size=16), st.integers(0, p.FRAME_BYTES_LIMIT))
def test_frame_header_decoder(data: bytes, limit: int) -> None:
    header = p.FrameHeader.decode(data)
    assert header.encode() == data
    try:
        header.check(limit)
    except ProtocolError:
        assert header.len > limit or header.flags != 0
    else:
        assert header.len <= limit and header.flags == 0


@FAST
@given(st.binary(max_size=15) | st.binary(min_size=17, max_size=40))
def test_frame_header_of_wrong_size(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        p.FrameHeader.decode(data)


@FAST
@given(st.lists(st.binary(max_size=64), max_size=20), st.integers(0, 256))
def test_frame_reader_random_stream(chunks: list[bytes], limit: int) -> None:
    reader = p.FrameReader(limit)
    try:
        for chunk in chunks:
            reader.feed(chunk)
            while (frame := reader.next_frame()) is not None:
                header, body = frame
                assert len(body) == header.len <= limit and header.flags == 0
    except ProtocolError:
        pass


@FAST
@given(st.lists(responses, min_size=1, max_size=5), st.data())
def test_frame_reader_cuts_valid_streams_anywhere(
    messages: list[p.Response], data: st.DataObject
) -> None:
    stream = b"".join(p.encode_response(i + 1, m) for i, m in enumerate(messages))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    reader = p.FrameReader()
    decoded = []
    start = 0
    for cut in [*cuts, len(stream)]:
        reader.feed(stream[start:cut])
        start = cut
        while (frame := reader.next_frame()) is not None:
            decoded.append(p.decode_response(frame[0].msg_type, frame[1]))
    assert decoded == messages
    assert reader.pending_bytes == 0


# --- bodies ---------------------------------------------------------------------------------


@FAST
@given(st.sampled_from(RESPONSE_TYPES) | u16, st.binary(max_size=400))
def test_response_decoder_random_bytes(msg_type: int, body: bytes) -> None:
    only_protocol_errors(p.decode_response, msg_type, body)
    only_protocol_errors(lambda: p.decode_response(msg_type, body, allow_unknown=True))


@FAST
@given(st.sampled_from(REQUEST_TYPES) | u16, st.binary(max_size=400), st.integers(0, 3) | u16)
def test_request_decoder_random_bytes(msg_type: int, body: bytes, flags: int) -> None:
    only_protocol_errors(p.decode_request, msg_type, body, flags)


@FAST
@given(responses)
def test_responses_round_trip(response: p.Response) -> None:
    frame = p.encode_response(7, response)
    header = p.FrameHeader.decode(frame[:16])
    assert header.len == len(frame) - 16 and header.req_id == 7
    assert p.decode_response(header.msg_type, frame[16:]) == response


@FAST
@given(requests)
def test_requests_round_trip(request: p.Request) -> None:
    frame = b"".join(p.encode_request(9, request))
    header = p.FrameHeader.decode(frame[:16])
    assert header.len == len(frame) - 16 and header.msg_type == request.msg_type
    assert header.flags == request.frame_flags
    assert (header.flags == p.CTX_BY_NAME) == (
        request.required_version == 2 and request.TAKES_CONTEXT
    )
    assert p.decode_request(header.msg_type, frame[16:], header.flags) == request


@FAST
@given(requests, st.data())
def test_request_decoder_mutated_valid_bodies(request: p.Request, data: st.DataObject) -> None:
    body = request.encode_body()
    broken = data.draw(mutated(body))
    flags = data.draw(st.sampled_from([request.frame_flags, 0, p.CTX_BY_NAME]))
    only_protocol_errors(p.decode_request, request.msg_type, broken, flags)


@st.composite
def mutated(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` with bytes flipped, cut, inserted or appended."""
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert", "append", "set"]))
        position = draw(st.integers(0, len(data)))
        if action == "flip" and data:
            index = min(position, len(data) - 1)
            data[index] ^= draw(st.integers(1, 255))
        elif action == "set" and data:
            index = min(position, len(data) - 1)
            data[index] = draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF]))
        elif action == "cut":
            del data[position:]
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        else:
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@FAST
@given(responses, st.data())
def test_response_decoder_mutated_valid_bodies(response: p.Response, data: st.DataObject) -> None:
    body = response.encode_body()
    broken = data.draw(mutated(body))
    only_protocol_errors(p.decode_response, response.msg_type, broken)


@FAST
@given(st.sampled_from(sorted(EXPECTED)), st.data())
def test_decoders_on_mutated_golden_frames(name: str, data: st.DataObject) -> None:
    frame = golden_frames()[name]
    header = p.FrameHeader.decode(frame[:16])
    broken = data.draw(mutated(frame[16:]))
    if header.msg_type & p.RESPONSE_BIT:
        only_protocol_errors(p.decode_response, header.msg_type, broken)
    else:
        only_protocol_errors(p.decode_request, header.msg_type, broken, header.flags)


# --- payload verification ---------------------------------------------------------------------


@FAST
@given(st.binary(max_size=300), u32, st.booleans())
def test_zstd_inflate_of_random_bytes(data: bytes, raw_len: int, with_magic: bool) -> None:
    if with_magic:
        data = b"\x28\xb5\x2f\xfd" + data
    record = p.PayloadRecord(p.PayloadEncoding.ZSTD, raw_len, data)
    only_protocol_errors(ops.payload_bytes, record, bytes(32), None, True, "fuzz")


@FAST
@given(st.binary(max_size=2000), st.data())
def test_zstd_payloads_inflate_and_verify(raw: bytes, data: st.DataObject) -> None:
    compressed = zstandard.ZstdCompressor(level=1).compress(raw)
    record = p.PayloadRecord(p.PayloadEncoding.ZSTD, len(raw), compressed)
    digest = ctxstore.blob_hash(raw)
    assert ops.payload_bytes(record, digest, len(raw), True, "ok") == raw
    broken = data.draw(mutated(compressed))
    if broken != compressed:
        bad = p.PayloadRecord(p.PayloadEncoding.ZSTD, len(raw), broken)
        out = only_protocol_errors(ops.payload_bytes, bad, digest, len(raw), True, "bad")
        assert out is None or out == raw
    with pytest.raises(ProtocolError):  # zstd that was not accepted
        ops.payload_bytes(record, digest, len(raw), False, "not accepted")


def test_zstd_bomb_is_refused_without_inflating_it() -> None:
    raw = bytes(64 << 20)
    compressed = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw)
    record = p.PayloadRecord(p.PayloadEncoding.ZSTD, 10, compressed)
    with pytest.raises(ctxstore.IntegrityError):
        ops.payload_bytes(record, ctxstore.blob_hash(raw), 10, True, "bomb")


def test_raw_payload_hash_and_length_are_checked() -> None:
    record = p.PayloadRecord(p.PayloadEncoding.RAW, 5, b"hello")
    digest = ctxstore.blob_hash(b"hello")
    assert ops.payload_bytes(record, digest, 5, False, "ok") == b"hello"
    # Outside a connection's answer (hash_raw not given) a RAW payload is hashed: the safe side.
    with pytest.raises(ctxstore.IntegrityError):
        ops.payload_bytes(record, ctxstore.blob_hash(b"hellO"), 5, False, "bad hash")
    # A connection that trusts the server's hash (loopback) skips it; never the length.
    wrong = ctxstore.blob_hash(b"hellO")
    assert ops.payload_bytes(record, wrong, 5, False, "trusted", hash_raw=False) == b"hello"
    for hash_raw in (True, False):
        with pytest.raises(ctxstore.IntegrityError):
            ops.payload_bytes(record, digest, 6, False, "bad length", hash_raw=hash_raw)
    with pytest.raises(ProtocolError):
        absent = p.PayloadRecord(p.PayloadEncoding.ABSENT, 0, b"")
        ops.payload_bytes(absent, digest, 5, False, "absent")


# --- a client facing garbage ------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.booleans())
@example(b"\x00" * 16, True)
@example(b"\xff" * 16, False)
def test_client_facing_garbage_raises_and_never_hangs(garbage: bytes, with_header: bool) -> None:
    def make(req_id: int) -> bytes:
        if with_header:
            # A header that matches the request, then a garbage body.
            return (
                p.FrameHeader(len(garbage), p.MessageType.STATS.response_type, 0, req_id).encode()
                + garbage
            )
        return garbage

    with FakeServer(hello_then_bytes(make)) as fake:
        client = ctxstore.Client(fake.addr, timeout=5, connect_timeout=5)
        started = time.monotonic()
        try:
            client.stats()
        except (ProtocolError, ConnectionLost):
            pass
        except CtxstoreError as error:  # an ERROR frame that happened to decode
            assert isinstance(error, ctxstore.ServerError)
        finally:
            client.close()
        assert time.monotonic() - started < 4


V2_CALLS = {
    p.MessageType.CTX_OPEN: lambda c: c.open_context("n"),
    p.MessageType.CTX_SHOW: lambda c: c.context_info("n"),
    p.MessageType.CTX_TAG: lambda c: c.tag_context(1, {"a": "b"}),
    p.MessageType.CTX_LIST: lambda c: c.list_contexts(),
    p.MessageType.CTX_NAME: lambda c: c.name_context(1, "n"),
    p.MessageType.KV_PUT: lambda c: c.kv_put(1, {b"k": b"v"}),
    p.MessageType.KV_GET: lambda c: c.kv_get("n", b"k"),
    p.MessageType.KV_DELETE: lambda c: c.kv_delete(1, b"k"),
    p.MessageType.KV_LIST: lambda c: c.kv_list(1),
    p.MessageType.APPEND_TURNS: lambda c: c.append(1, b"x", key="k"),
    p.MessageType.GET_TURN_BY_KEY: lambda c: c.turn_by_key("n", "k"),
    p.MessageType.TURN_LOG: lambda c: list(c.iter_turn_log(1, {"a": "b"})),
    p.MessageType.READ_PAGE: lambda c: c.window("n", payloads=True),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(V2_CALLS)), st.binary(max_size=200))
def test_v2_calls_facing_garbage_bodies_raise_and_never_hang(
    msg_type: p.MessageType, garbage: bytes
) -> None:
    def make(req_id: int) -> bytes:
        return p.FrameHeader(len(garbage), msg_type.response_type, 0, req_id).encode() + garbage

    with FakeServer(hello_then_bytes(make, version=2)) as fake:
        client = ctxstore.Client(fake.addr, timeout=5, connect_timeout=5)
        started = time.monotonic()
        try:
            V2_CALLS[msg_type](client)
        except (ProtocolError, ConnectionLost):
            pass
        except CtxstoreError as error:  # e.g. NotFound after a garbage-free empty body
            assert not isinstance(error, ctxstore.Timeout)
        finally:
            client.close()
        assert time.monotonic() - started < 4


def test_garbage_response_types_raise_protocol_error() -> None:
    def make(req_id: int) -> bytes:
        return p.encode_response(req_id, p.Pong(1))  # PONG to a STATS request

    with FakeServer(hello_then_bytes(make)) as fake, ctxstore.Client(fake.addr, timeout=5) as c:
        with pytest.raises(ProtocolError):
            c.stats()


def test_response_to_unknown_req_id_is_a_protocol_error() -> None:
    def make(req_id: int) -> bytes:
        return p.encode_response(req_id + 1000, p.Pong(1))

    with FakeServer(hello_then_bytes(make)) as fake, ctxstore.Client(fake.addr, timeout=5) as c:
        with pytest.raises(ProtocolError, match="never sent"):
            c.ping()


def test_oversized_frame_from_server_is_refused() -> None:
    def make(req_id: int) -> bytes:
        return p.FrameHeader(1 << 20, p.MessageType.STATS.response_type, 0, req_id).encode()

    with FakeServer(hello_then_bytes(make)) as fake:
        with ctxstore.Client(fake.addr, timeout=5, max_response_bytes=1024) as client:
            with pytest.raises(ProtocolError):
                client.stats()


def test_hello_answered_with_garbage() -> None:
    def behaviour(conn: socket.socket) -> None:
        conn.recv(1024)
        conn.sendall(b"\x01" * 40)

    with FakeServer(behaviour) as fake:
        with pytest.raises((ProtocolError, ctxstore.ConnectError)):
            ctxstore.Client(fake.addr, connect_timeout=5)


def test_replay_against_a_server_that_never_advances() -> None:
    root = p.TurnRecord(1, 0, 1, 0, 0, 0, ctxstore.blob_hash(b""), 0, 0, 0)

    def answer(header: p.FrameHeader, body: bytes) -> bytes:
        page = p.TurnsResponse(
            0,
            5,
            (p.TurnEntry(root, p.PayloadRecord(p.PayloadEncoding.ABSENT, 0, b"")),),
            p.MessageType.GET_CHAIN.response_type,
        )
        return p.encode_response(header.req_id, page)

    with FakeServer(hello_then_answer(answer)) as fake, ctxstore.Client(fake.addr) as client:
        with pytest.raises(ProtocolError, match="returned depths"):
            client.replay(1, page_size=1)


def test_replay_refuses_a_page_that_is_not_one_chain() -> None:
    """Each turn of a replay is the child of the one before it, across pages too."""
    empty = ctxstore.blob_hash(b"")

    def turn(turn_id: int, parent: int, depth: int) -> p.TurnEntry:
        record = p.TurnRecord(turn_id, parent, 1, depth, 0, 0, empty, 0, 0, 0)
        return p.TurnEntry(record, p.PayloadRecord(p.PayloadEncoding.ABSENT, 0, b""))

    def answer(header: p.FrameHeader, body: bytes) -> bytes:
        entries = (turn(1, 0, 0), turn(3, 2, 1))  # turn 3 names parent 2, not turn 1
        page = p.TurnsResponse(0, 1, entries, p.MessageType.GET_CHAIN.response_type)
        return p.encode_response(header.req_id, page)

    with FakeServer(hello_then_answer(answer)) as fake, ctxstore.Client(fake.addr) as client:
        with pytest.raises(ProtocolError, match="does not follow turn 1"):
            client.replay(3)


# --- version-2 answers that break their promises ----------------------------------------------


def _info(context_id: int, name: str | None) -> p.ContextInfoRecord:
    return p.ContextInfoRecord(p.ContextHeadRecord(context_id, 0, 0), 1, 1, name, ())


def _answering(answer: p.Response) -> FakeServer:
    """A version-2 fake that answers every request with ``answer`` (its type adjusted)."""

    def make(header: p.FrameHeader, body: bytes) -> bytes:
        frame = bytearray(p.encode_response(header.req_id, answer))
        frame[4:6] = (header.msg_type | p.RESPONSE_BIT).to_bytes(2, "little")
        return bytes(frame)

    return FakeServer(hello_then_answer(make, version=2))


def _hashing_client(addr: str) -> ctxstore.Client:
    """A client that hashes RAW payloads on loopback too (decision 0015)."""
    return ctxstore.Client(addr, timeout=5, verify_payloads="always")


def test_kv_value_that_does_not_match_its_hash_is_an_integrity_error() -> None:
    value = p.KvValueResponse(
        ctxstore.blob_hash(b"v1"), p.PayloadRecord(p.PayloadEncoding.RAW, 2, b"v2")
    )
    # "always": the fake is on loopback, where the default trusts the server's hash.
    with _answering(value) as fake, _hashing_client(fake.addr) as client:
        with pytest.raises(ctxstore.IntegrityError):
            client.kv_get(1, b"k")
        with pytest.raises(ctxstore.IntegrityError):
            client.kv_get("by-name", b"k")  # the same connection: only the call failed
        assert client.connected


def test_kv_list_out_of_order_is_a_protocol_error() -> None:
    items = tuple(p.KvItemRecord(k, bytes(32), 1) for k in (b"p:2", b"p:1"))
    with _answering(p.KvListResponse(items)) as fake, ctxstore.Client(fake.addr, timeout=5) as c:
        with pytest.raises(ProtocolError, match="out of order"):
            c.kv_list(1, b"p:")
    outside = (p.KvItemRecord(b"q", bytes(32), 1),)
    with _answering(p.KvListResponse(outside)) as fake, ctxstore.Client(fake.addr, timeout=5) as c:
        with pytest.raises(ProtocolError, match="outside the prefix"):
            list(c.iter_kv(1, b"p:"))


def test_a_listing_cursor_that_does_not_advance_ends_in_a_protocol_error() -> None:
    stuck = p.ContextListResponse(5, (_info(5, None),))
    with _answering(stuck) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        started = time.monotonic()
        with pytest.raises(ProtocolError, match="same cursor"):
            list(client.iter_contexts())
        assert time.monotonic() - started < 4
    too_many = p.ContextListResponse(None, tuple(_info(i, None) for i in range(1, 4)))
    with _answering(too_many) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        with pytest.raises(ProtocolError, match="limit 2"):
            client.list_contexts(limit=2)


def test_a_context_answered_under_another_name_is_a_protocol_error() -> None:
    with _answering(p.OpenedResponse(_info(3, "other"), True)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(ProtocolError, match="named 'other'"):
                client.open_context("mine")
    with _answering(p.ContextInfoResponse(_info(3, None))) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(ProtocolError, match="do not reflect"):
                client.tag_context(3, {"status": "done"})


# --- turn answers that break their promises ----------------------------------------------------

HASH_X = ctxstore.blob_hash(b"x")


def _turn(
    turn_id: int, parent: int, depth: int, flags: int = 0, body: bytes = b"x"
) -> p.TurnRecord:
    return p.TurnRecord(
        turn_id, parent, 1, depth, 0, 0, ctxstore.blob_hash(body), len(body), flags, 1
    )


def _entry(turn: p.TurnRecord, labels: tuple[tuple[str, str], ...] = ()) -> p.TurnExtrasEntry:
    absent = p.PayloadRecord(p.PayloadEncoding.ABSENT, 0, b"")
    return p.TurnExtrasEntry(turn, p.ExtrasRecord(b"", labels), absent)


def test_appended_turns_that_differ_from_what_was_sent_are_refused() -> None:
    cases = [
        # The wrong payload.
        (ctxstore.IntegrityError, p.AppendedTurnRecord(_turn(5, 4, 1, body=b"y"), False, False)),
        # Not a summary though one was asked for.
        (ProtocolError, p.AppendedTurnRecord(_turn(5, 4, 1), False, False)),
        # Hanging from another turn than the parent asked for.
        (ProtocolError, p.AppendedTurnRecord(_turn(5, 3, 1, p.TURN_SUMMARY), False, False)),
        # "existing" for a turn sent without a key.
        (ProtocolError, p.AppendedTurnRecord(_turn(5, 4, 1, p.TURN_SUMMARY), False, True)),
    ]
    for error, record in cases:
        answer = p.AppendedTurnsResponse((record,))
        with _answering(answer) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(error):
                client.append(1, b"x", parent=4, summary=True)
    two = p.AppendedTurnsResponse((p.AppendedTurnRecord(_turn(5, 4, 1), False, False),) * 2)
    with _answering(two) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        with pytest.raises(ProtocolError, match="answered with 2"):
            client.append(1, b"x", key="k")
        # The second turn of a batch hangs from the first one written.
        with pytest.raises(ProtocolError, match="hangs from turn 4, asked 5"):
            client.append_turns(1, [ctxstore.TurnSpec(b"x"), ctxstore.TurnSpec(b"x")])


def test_turn_pages_that_break_their_promises_are_refused() -> None:
    unfiltered = p.TurnLogResponse(None, (_entry(_turn(5, 4, 1), (("run", "r2"),)),))
    with _answering(unfiltered) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        with pytest.raises(ProtocolError, match="filtered by"):
            client.turn_log(1, {"run": "r1"})
    stuck = p.TurnLogResponse(p.LogCursor(0, 9), ())
    with _answering(stuck) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        started = time.monotonic()
        with pytest.raises(ProtocolError, match="same cursor"):
            list(client.iter_turn_log(1))
        assert time.monotonic() - started < 4
    broken_chain = p.PageResponse(0, 2, (_entry(_turn(5, 0, 0)), _entry(_turn(7, 6, 1))))
    with _answering(broken_chain) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        with pytest.raises(ProtocolError, match="does not follow"):
            client.read_page(1)
    late_summary = p.PageResponse(
        0, 1, (_entry(_turn(5, 0, 0)), _entry(_turn(7, 5, 1, p.TURN_SUMMARY)))
    )
    with _answering(late_summary) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        assert len(client.read_page(1)) == 2  # a summary inside a LAST page is fine
        with pytest.raises(ProtocolError, match="summary turn after the start"):
            client.window(1)
    wrong_key = p.TurnInfoResponse(_turn(5, 4, 1), p.ExtrasRecord(b"other"))
    with _answering(wrong_key) as fake, ctxstore.Client(fake.addr, timeout=5) as client:
        with pytest.raises(ProtocolError, match="with key"):
            client.turn_by_key(1, "mine")
    bad_payload = p.PageResponse(
        0,
        0,
        (
            p.TurnExtrasEntry(
                _turn(5, 0, 0), p.ExtrasRecord(), p.PayloadRecord(p.PayloadEncoding.RAW, 1, b"y")
            ),
        ),
    )
    with _answering(bad_payload) as fake, _hashing_client(fake.addr) as client:
        with pytest.raises(ctxstore.IntegrityError):
            client.window(1, payloads=True)
