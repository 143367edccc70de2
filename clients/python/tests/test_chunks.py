"""Payloads given as chunks (issue 16) through both clients: the PUT_CHUNKED and
CHUNKED_STORED frames' strictness and limits (golden coverage is in test_golden.py), the
encoder and ``put_chunked``'s argument checks, and ``put_chunked`` against a real
ctxstore-server: a payload cut by the test into 4 KiB pieces, then a grown payload sending
only its new pieces, read back exactly; a missing chunk (NotFound), bytes that do not hash
to their entry (HashMismatch), a chunk stored with another length (InvalidArgument), a payload
over the server's limit (TooLarge), each writing nothing; the server closing the connection
for exactly the bodies the Python codec refuses; a version-1 connection and a version-2
server without PUT_CHUNKED."""

from __future__ import annotations

import contextlib
import os
import uuid

import blake3
import pytest

import ctxstore
from ctxstore import _ops as ops
from ctxstore import _protocol as p

from conftest import ServerProcess
from fakes import FakeServer, hello_then_answer
from test_golden import golden_frames

PIECE = 4096
MIB = 1 << 20


def unique(prefix: str = "chunks") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def digest(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def cut(payload: bytes, size: int = PIECE) -> list[bytes]:
    """The test's own chunker: fixed pieces (the server accepts any cut)."""
    return [payload[i : i + size] for i in range(0, len(payload), size)]


def entries(pieces: list[bytes]) -> list[tuple[bytes, int]]:
    return [(digest(piece), len(piece)) for piece in pieces]


def _body(name: str) -> bytes:
    return golden_frames()[name][p.HEADER_BYTES :]


def _u32(value: int) -> bytes:
    return value.to_bytes(4, "little")


def put_body(
    chunk_lens: list[int], sent: list[tuple[int, int, bytes]], chunk_count: int | None = None
) -> bytes:
    """A PUT_CHUNKED body written by hand, so that it can break the rules: chunk entries of
    the given lengths (hash 0x11…), then SENT entries ``(index, len, bytes)``."""
    count = len(chunk_lens) if chunk_count is None else chunk_count
    body = bytes([0xAA]) * 32 + bytes(36) + _u32(count)  # no base
    body += b"".join(bytes([0x11]) * 32 + _u32(length) for length in chunk_lens)
    body += _u32(len(sent))
    body += b"".join(_u32(index) + _u32(length) + data for index, length, data in sent)
    return body


# --- frames -----------------------------------------------------------------------------------

# Bodies the codec refuses, with the ERROR the server answers them with before it closes the
# connection: BAD_FRAME for a malformed body, TOO_LARGE for a list over the protocol's ceiling.
REFUSED_BODIES: dict[str, tuple[bytes, str, type[ctxstore.ServerError]]] = {
    "no chunks": (put_body([], []), "chunk_count", ctxstore.BadFrame),
    "too many chunks": (
        put_body([], [], chunk_count=p.CHUNKS_PER_PAYLOAD_MAX + 1),
        "chunk_count is 65537, above the limit",
        ctxstore.TooLarge,
    ),
    "an empty chunk": (put_body([3, 0], []), "empty chunk", ctxstore.BadFrame),
    "a chunk over 1 MiB": (
        put_body([3, MIB + 1], []),
        "chunk len is 1048577, above the limit",
        ctxstore.TooLarge,
    ),
    "more sent than chunks": (
        put_body([1], [(0, 1, b"a"), (0, 1, b"a")]),
        "sent_count is 2, above the limit of 1",
        ctxstore.TooLarge,
    ),
    "an index past the chunks": (
        put_body([1, 1], [(2, 1, b"a")]),
        "sent index is 2, above the limit of 1",
        ctxstore.TooLarge,
    ),
    "an index sent twice": (
        put_body([1, 1], [(1, 1, b"a"), (1, 1, b"b")]),
        "strictly increase",
        ctxstore.BadFrame,
    ),
    "indexes going down": (
        put_body([1, 1], [(1, 1, b"a"), (0, 1, b"b")]),
        "strictly increase",
        ctxstore.BadFrame,
    ),
    "a sent len other than its chunk's": (
        put_body([2], [(0, 1, b"a")]),
        "differs from its chunk's len",
        ctxstore.BadFrame,
    ),
    "sent bytes cut short": (put_body([4], [(0, 4, b"abc")]), "too short", ctxstore.BadFrame),
    "a trailing byte": (
        put_body([1], [(0, 1, b"a")]) + b"\x00",
        "after its end",
        ctxstore.BadFrame,
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_BODIES))
def test_put_chunked_decoder_refuses_what_the_codec_refuses(case: str) -> None:
    body, message, _ = REFUSED_BODIES[case]
    with pytest.raises(p.ProtocolError, match=message):
        p.decode_request(p.MessageType.PUT_CHUNKED, body)


def test_put_chunked_frames_decode_at_their_limits_and_refuse_broken_bytes() -> None:
    # The limits themselves: 65,536 chunks, a chunk of 1 MiB (entries only: none sent).
    widest = p.decode_request(
        p.MessageType.PUT_CHUNKED, put_body([1] * p.CHUNKS_PER_PAYLOAD_MAX, [])
    )
    assert isinstance(widest, p.PutChunked) and len(widest.chunks) == p.CHUNKS_PER_PAYLOAD_MAX
    largest = p.decode_request(p.MessageType.PUT_CHUNKED, put_body([MIB], []))
    assert isinstance(largest, p.PutChunked) and largest.chunks[0].len == MIB
    # Every sent chunk, the first and last indexes included.
    full = put_body([1, 2, 3], [(0, 1, b"a"), (1, 2, b"bc"), (2, 3, b"def")])
    request = p.decode_request(p.MessageType.PUT_CHUNKED, full)
    assert isinstance(request, p.PutChunked)
    assert [(s.index, s.data) for s in request.sent] == [(0, b"a"), (1, b"bc"), (2, b"def")]
    assert request.encode_body() == full
    # The golden body: cut anywhere, or with a byte more, it does not decode.
    body = _body("put_chunked")
    for end in range(len(body)):
        with pytest.raises(p.ProtocolError):
            p.decode_request(p.MessageType.PUT_CHUNKED, body[:end])
    # CHUNKED_STORED: already_stored is 0 or 1, 7 reserved zero bytes, 48 bytes exactly.
    answer = _body("chunked_stored_response")
    response_type = p.MessageType.PUT_CHUNKED.response_type
    assert len(answer) == p.CHUNKED_STORED_BYTES
    stored = bytearray(answer)
    stored[40] = 1
    decoded = p.decode_response(response_type, bytes(stored))
    assert decoded == p.ChunkedStoredResponse(bytes(range(0xA0, 0xC0)), 12, True)
    stored[40] = 2
    with pytest.raises(p.ProtocolError, match="already_stored"):
        p.decode_response(response_type, bytes(stored))
    reserved = bytearray(answer)
    reserved[47] = 1
    with pytest.raises(p.ProtocolError, match="reserved"):
        p.decode_response(response_type, bytes(reserved))
    for broken in (answer[:-1], answer + b"\x00"):
        with pytest.raises(p.ProtocolError):
            p.decode_response(response_type, broken)
    with pytest.raises(p.ProtocolError):  # an answer never carries OVERLAYS
        p.decode_response(response_type, answer, p.OVERLAYS)
    with pytest.raises(p.ProtocolError, match="CTX_BY_NAME"):
        p.decode_request(p.MessageType.PUT_CHUNKED, body, p.CTX_BY_NAME)
    assert p.PutChunked(bytes(32), (p.ChunkRecord(bytes(32), 1),)).required_version == 2


def test_put_chunked_encoder_refuses_what_the_codec_refuses() -> None:
    one = p.ChunkRecord(bytes(32), 1)
    two = p.ChunkRecord(bytes(32), 2)
    cases = {
        "1 to 65536 chunks": p.PutChunked(bytes(32), ()),
        "1 to 1048576 bytes, not 0": p.PutChunked(bytes(32), (p.ChunkRecord(bytes(32), 0),)),
        "not 1048577": p.PutChunked(bytes(32), (p.ChunkRecord(bytes(32), MIB + 1),)),
        "at most one per chunk": p.PutChunked(
            bytes(32), (one,), (p.SentChunkRecord(0, b"a"), p.SentChunkRecord(0, b"a"))
        ),
        "sent index 2": p.PutChunked(bytes(32), (one, one), (p.SentChunkRecord(2, b"a"),)),
        "sent index 0": p.PutChunked(
            bytes(32), (one, one), (p.SentChunkRecord(1, b"a"), p.SentChunkRecord(0, b"a"))
        ),
        "has 1 bytes; its entry says 2": p.PutChunked(
            bytes(32), (two,), (p.SentChunkRecord(0, b"a"),)
        ),
        "a hash is 32 bytes": p.PutChunked(bytes(31), (one,)),
    }
    for message, request in cases.items():
        with pytest.raises(ValueError, match=message):
            request.body_chunks()
    with pytest.raises(ValueError, match="1 to 65536 chunks"):
        p.PutChunked(bytes(32), (one,) * (p.CHUNKS_PER_PAYLOAD_MAX + 1)).body_chunks()


def test_put_chunked_sends_large_chunks_by_reference_and_round_trips() -> None:
    big, small = os.urandom(PIECE + 100), b"tiny"
    chunks = (
        p.ChunkRecord(digest(small), len(small)),
        p.ChunkRecord(digest(big), len(big)),
        p.ChunkRecord(digest(small), len(small)),
    )
    request = p.PutChunked(
        digest(small + big + small),
        chunks,
        (
            p.SentChunkRecord(0, small),
            p.SentChunkRecord(1, big),
            p.SentChunkRecord(2, small),
        ),
    )
    frame = p.encode_request(7, request)
    assert any(part is big for part in frame) and not any(part is small for part in frame)
    header = p.FrameHeader.decode(frame[0][: p.HEADER_BYTES])
    body = b"".join(frame)[p.HEADER_BYTES :]
    assert (header.msg_type, header.flags, header.len) == (0x0027, 0, len(body))
    assert p.decode_request(header.msg_type, body) == request
    # None sent, no base: a body of the entries alone (after a zero base).
    bare = p.PutChunked(digest(big), (chunks[1],))
    assert p.encode_request(1, bare)[0][p.HEADER_BYTES :] == (
        digest(big) + bytes(36) + _u32(1) + digest(big) + _u32(len(big)) + _u32(0)
    )
    answer = p.ChunkedStoredResponse(digest(big), len(big), True)
    frame_bytes = p.encode_response(7, answer)
    assert len(frame_bytes) == p.HEADER_BYTES + p.CHUNKED_STORED_BYTES
    assert p.decode_response(0x8027, frame_bytes[p.HEADER_BYTES :]) == answer


def test_put_chunked_op_checks_its_arguments_and_the_answer() -> None:
    pieces = [b"abc", b"de", b"f"]
    payload = b"".join(pieces)
    chunks = entries(pieces)
    # Sent pairs in any order, or a mapping, go out sorted; hex hashes are accepted.
    op = ops.put_chunked(digest(payload).hex(), chunks, [(2, b"f"), (0, bytearray(b"abc"))])
    assert isinstance(op.request, p.PutChunked)
    assert [(s.index, s.data) for s in op.request.sent] == [(0, b"abc"), (2, b"f")]
    assert ops.put_chunked(digest(payload), chunks, {2: b"f", 0: b"abc"}).request == op.request
    result = op.finish(p.ChunkedStoredResponse(digest(payload), 6, False))
    assert result == ctxstore.ChunkedStored(digest(payload), 6, False)
    assert result.payload_hash_hex == digest(payload).hex()
    # The answer must name the payload and the sum of the lengths.
    for wrong in (
        p.ChunkedStoredResponse(digest(b"other"), 6, False),
        p.ChunkedStoredResponse(digest(payload), 7, False),
        p.PurgedResponse(digest(payload), 0, 0),
    ):
        with pytest.raises(ctxstore.ProtocolError):
            op.finish(wrong)
    # Refused before anything is sent.
    bad_arguments = {
        "1 to 65536 chunks": (chunks[:0], ()),
        "is 0 bytes": ([(digest(b""), 0)], ()),
        "is 1048577 bytes": ([(bytes(32), MIB + 1)], ()),
        "past the 3 chunks": (chunks, [(3, b"x")]),
        "sent twice": (chunks, [(1, b"de"), (1, b"de")]),
        "its entry says 2": (chunks, [(1, b"d")]),
        "sent index": (chunks, [(-1, b"d")]),
        "a hash is 32 bytes": ([(bytes(5), 1)], ()),
    }
    for message, (given, sent) in bad_arguments.items():
        with pytest.raises(ValueError, match=message):
            ops.put_chunked(digest(payload), given, sent)


# --- against a real server --------------------------------------------------------------------


def test_put_chunked_stores_a_payload_and_then_only_the_new_chunks(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr, timeout=20) as client:
        first = os.urandom(10 * PIECE + 1234)  # 11 pieces, the last one short
        pieces = cut(first)
        hashes = [digest(piece) for piece in pieces]
        assert client.has_blobs(hashes) == [False] * len(pieces)
        stored = client.put_chunked(digest(first), entries(pieces), list(enumerate(pieces)))
        assert isinstance(stored, ctxstore.ChunkedStored)
        assert stored == ctxstore.ChunkedStored(digest(first), len(first), False)
        assert client.get_blob(digest(first)) == first
        assert client.has_blobs(hashes) == [True] * len(pieces)  # each chunk is a blob

        # A grown payload: the first ten pieces again, then new bytes. Only the pieces the
        # server lacks (as has_blobs says) are sent.
        second = first[: 10 * PIECE] + os.urandom(2 * PIECE + 77)
        pieces2 = cut(second)
        have = client.has_blobs([digest(piece) for piece in pieces2])
        assert have == [True] * 10 + [False] * 3
        new = [
            (i, piece)
            for i, (piece, known) in enumerate(zip(pieces2, have, strict=True))
            if not known
        ]
        assert sum(len(piece) for _, piece in new) < len(second) / 4
        grown = client.put_chunked(digest(second), entries(pieces2), new)
        assert (grown.payload_hash, grown.payload_len) == (digest(second), len(second))
        assert not grown.already_stored
        assert client.get_blob(digest(second)) == second
        assert client.get_blob(digest(first)) == first

        # Named by a turn, it reads back like any payload.
        name = unique()
        client.open_context(name)
        turn = client.append_by_hash(name, grown.payload_hash).turn
        assert (turn.payload_hash, turn.payload_len) == (digest(second), len(second))
        assert [t.payload for t in client.last(name, 1, payloads=True)] == [second]

        # A third payload names the second as its base: only the pieces after their shared
        # prefix (the first 12) are listed and sent.
        third = second[: 12 * PIECE] + os.urandom(PIECE + 5)
        pieces3 = cut(third)
        assert len(pieces3) == 14
        based = client.put_chunked(
            digest(third),
            entries(pieces3[12:]),
            dict(enumerate(pieces3[12:])),
            base=(digest(second), 12),
        )
        assert based == ctxstore.ChunkedStored(digest(third), len(third), False)
        assert client.get_blob(digest(third)) == third
        with pytest.raises(ctxstore.NotFound):
            client.put_chunked(
                digest(os.urandom(8)),
                entries(pieces3[12:]),
                {0: pieces3[12]},
                base=(digest(b"no such base"), 1),
            )

        # Again, sending nothing: stored before, nothing new written.
        again = client.put_chunked(grown.payload_hash_hex, entries(pieces2))
        assert again == ctxstore.ChunkedStored(digest(second), len(second), True)
        # A single chunk that is the whole payload: stored as one blob, by this request.
        small = os.urandom(300)
        whole = client.put_chunked(digest(small), entries([small]), {0: small})
        assert whole == ctxstore.ChunkedStored(digest(small), 300, False)
        assert client.get_blob(digest(small)) == small


def test_a_chunk_neither_sent_nor_stored_is_not_found_and_nothing_is_written(
    server: ServerProcess,
) -> None:
    with ctxstore.Client(server.addr, timeout=20) as client:
        conn = client._conn
        payload = os.urandom(3 * PIECE)
        pieces = cut(payload)
        with pytest.raises(ctxstore.NotFound) as info:
            client.put_chunked(digest(payload), entries(pieces), [(0, pieces[0]), (2, pieces[2])])
        assert info.value.code == 5 and "1" in info.value.message
        assert client.has_blobs([digest(payload), *map(digest, pieces)]) == [False] * 4
        client.ping()
        assert client._conn is conn  # the connection stays open
        # Sending the missing chunk as well stores it.
        stored = client.put_chunked(digest(payload), entries(pieces), list(enumerate(pieces)))
        assert client.get_blob(stored.payload_hash) == payload


def test_bytes_that_do_not_hash_to_their_entry_are_hash_mismatch(server: ServerProcess) -> None:
    with ctxstore.Client(server.addr, timeout=20) as client:
        conn = client._conn
        payload = os.urandom(2 * PIECE + 10)
        pieces = cut(payload)
        forged = bytes([pieces[1][0] ^ 0xFF]) + pieces[1][1:]  # same length, other bytes
        with pytest.raises(ctxstore.HashMismatch) as info:
            client.put_chunked(
                digest(payload), entries(pieces), [(0, pieces[0]), (1, forged), (2, pieces[2])]
            )
        assert (info.value.code, info.value.name) == (16, "HASH_MISMATCH")
        assert isinstance(info.value, ctxstore.ServerError)
        # Chunks that hash right, rebuilding a payload other than the one claimed.
        claimed = digest(b"not this payload")
        with pytest.raises(ctxstore.HashMismatch):
            client.put_chunked(claimed, entries(pieces), list(enumerate(pieces)))
        assert client.has_blobs([digest(payload), claimed, digest(forged)]) == [False] * 3
        client.ping()
        assert client._conn is conn


def test_a_chunk_stored_with_another_length_and_a_payload_over_the_limit_are_refused(
    server: ServerProcess, small_server: ServerProcess
) -> None:
    with ctxstore.Client(server.addr, timeout=20) as client:
        name = unique()
        client.open_context(name)
        blob = os.urandom(100)
        client.append(name, blob)
        payload = blob + os.urandom(50)
        with pytest.raises(ctxstore.InvalidArgument):
            client.put_chunked(
                digest(payload),
                [(digest(blob), 99), (digest(payload[100:]), 50)],
                {1: payload[100:]},
            )
        client.ping()
    # The small server stores payloads of at most 64 KiB.
    with ctxstore.Client(small_server.addr, timeout=20) as client:
        conn = client._conn
        payload = os.urandom(80 * 1024)
        pieces = cut(payload)
        with pytest.raises(ctxstore.TooLarge):
            client.put_chunked(digest(payload), entries(pieces), list(enumerate(pieces)))
        assert client.has_blobs([digest(payload)]) == [False]
        client.ping()
        assert client._conn is conn


@pytest.mark.parametrize("case", sorted(REFUSED_BODIES))
def test_the_server_refuses_the_same_bodies_and_closes_the_connection(
    server: ServerProcess, case: str
) -> None:
    body, _, error = REFUSED_BODIES[case]
    with ctxstore.Client(server.addr, timeout=20) as client:
        first = client._conn
        with pytest.raises(error):
            client.request(p.RawRequest(p.MessageType.PUT_CHUNKED, body, min_version=2))
        # The server closes the connection after its answer. The client knows it from
        # BAD_FRAME at once; TOO_LARGE leaves some connections open, so it learns it when the
        # socket ends, which a request sent just before may see as ConnectionLost.
        if error is ctxstore.TooLarge:
            with contextlib.suppress(ctxstore.ConnectionLost):
                client.ping()
        client.ping()  # on a new connection
        assert client._conn is not first


async def test_the_async_client_puts_chunks(server: ServerProcess) -> None:
    async with ctxstore.AsyncClient(server.addr, timeout=20) as client:
        payload = os.urandom(5 * PIECE)
        pieces = cut(payload)
        stored = await client.put_chunked(digest(payload), entries(pieces), list(enumerate(pieces)))
        assert stored == ctxstore.ChunkedStored(digest(payload), len(payload), False)
        grown = payload + b"one more message"
        pieces2 = cut(grown)
        again = await client.put_chunked(digest(grown), entries(pieces2), [(5, pieces2[5])])
        assert (again.payload_len, again.already_stored) == (len(grown), False)
        assert await client.get_blob(digest(grown)) == grown
        with pytest.raises(ctxstore.NotFound):
            await client.put_chunked(digest(b"x" * 8), [(digest(b"x" * 8), 8)])
        with pytest.raises(ctxstore.HashMismatch):
            await client.put_chunked(digest(b"abcd"), [(digest(b"abcd"), 4)], [(0, b"abce")])
        await client.ping()


def test_a_version_1_connection_refuses_put_chunked_before_sending(server: ServerProcess) -> None:
    class V1Client(ctxstore.Client):
        PROTOCOL_VERSIONS = (1, 1)

    payload = os.urandom(64)
    with V1Client(server.addr) as old:
        assert old.server_info().version == 1
        with pytest.raises(ctxstore.NotSupported, match="version 2"):
            old.put_chunked(digest(payload), entries([payload]), [(0, payload)])
        assert old.ping() is None
    with ctxstore.Client(server.addr) as client:
        assert client.has_blobs([digest(payload)]) == [False]  # nothing was sent


def _server_without_put_chunked(header: p.FrameHeader, body: bytes) -> bytes:
    """A version-2 server that predates PUT_CHUNKED: UNKNOWN_MESSAGE, connection open."""
    if header.msg_type == p.MessageType.PUT_CHUNKED:
        unknown = p.ErrorResponse(2, 0, "unknown message type 0x0027")
        return p.encode_response(header.req_id, unknown)
    if header.msg_type == p.MessageType.PING:
        return p.encode_response(header.req_id, p.Pong(int.from_bytes(body, "little")))
    return b""


def test_a_server_without_put_chunked_answers_unknown_message() -> None:
    with FakeServer(hello_then_answer(_server_without_put_chunked, version=2)) as fake:
        with ctxstore.Client(fake.addr, timeout=5) as client:
            with pytest.raises(ctxstore.UnknownMessage):
                client.put_chunked(digest(b"ab"), [(digest(b"ab"), 2)], [(0, b"ab")])
            client.ping()
