"""The golden frames of protocol/tests/golden-v3-streams.txt (the streams family, issue 32)
decode to the documented values and re-encode to exactly their bytes; the decoders refuse
what the layouts forbid."""

from __future__ import annotations

import pytest

from ctxstore import _protocol as p
from ctxstore import _stream_protocol as s

import test_golden as golden
from conftest import REPO_ROOT
from test_golden import HASH_A0, TURN, decode_frame

GOLDEN_V3_STREAMS = REPO_ROOT / "protocol" / "tests" / "golden-v3-streams.txt"


def golden_frames() -> dict[str, bytes]:
    """name → frame bytes of golden-v3-streams.txt."""
    return golden.golden_frames((GOLDEN_V3_STREAMS,))


INFO_57 = s.StreamInfoRecord(57, 3, 11, 2, 1, 1_767_225_600_000, 1_767_225_601_000)

EXPECTED: dict[str, tuple[int, p.Message]] = {
    "hello_request_v3": (1, p.Hello(1, 3, b"", "py")),
    "stream_open": (
        40,
        s.StreamOpen(
            "t-1",
            42,
            p.ParentKind.HEAD,
            0,
            2,
            1,
            False,
            p.ExtrasRecord(b"a-1", (("role", "assistant"),)),
        ),
    ),
    "stream_opened_response": (40, s.StreamInfoResponse(INFO_57)),
    "stream_append": (41, s.StreamAppend(57, None, b"Hello")),
    "stream_append_at_offset": (42, s.StreamAppend(57, 5, b", world")),
    "stream_appended_response": (42, s.StreamAppendedResponse(57, 12)),
    "stream_seal": (43, s.StreamSeal(57)),
    "stream_sealed_response": (43, s.StreamSealedResponse(TURN, False)),
    "stream_abort": (44, s.StreamAbort(58)),
    "stream_aborted_response": (44, s.StreamAbortedResponse(58)),
    "stream_list": (45, s.StreamList(3, 0, 100)),
    "stream_listed_response": (45, s.StreamListResponse((INFO_57,))),
    "stream_read_wait": (46, s.StreamRead(57, 5, 64 * 1024, 30_000)),
    "stream_read_response": (
        46,
        s.StreamBytesResponse(57, s.StreamState.OPEN, 0, 5, 12, b", world"),
    ),
    "stream_read_sealed_response": (
        47,
        s.StreamBytesResponse(57, s.StreamState.SEALED, 42, 12, 0, b""),
    ),
    "watch_tag": (48, s.Watch(s.WatchTarget(tag=("team", "a")), 41, 100, 30_000)),
    "watched_response": (
        48,
        s.WatchedResponse(
            False,
            58,
            (
                s.WatchEventRecord(42, s.WatchKind.HEAD, 3, 42, 0),
                s.WatchEventRecord(58, s.WatchKind.STREAM_SEALED, 3, 42, 57),
            ),
        ),
    ),
    "watch_lagged_response": (49, s.WatchedResponse(True, 90_000, ())),
    "error_stream_ended": (41, p.ErrorResponse(17, 42, "stream 57 was sealed into turn 42")),
}


def test_every_golden_frame_is_covered() -> None:
    assert set(golden_frames()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_frame_decodes_and_reencodes(name: str) -> None:
    req_id, expected = EXPECTED[name]
    assert expected.frame_flags == 0
    golden.check_golden_frame(golden_frames()[name], req_id, expected)


def test_stream_requests_need_version_3() -> None:
    for _, message in EXPECTED.values():
        if isinstance(message, p.Request) and not isinstance(message, p.Hello):
            assert message.required_version == 3
            assert message.response_type == message.msg_type | p.RESPONSE_BIT


def _body(name: str) -> bytes:
    return golden_frames()[name][p.HEADER_BYTES :]


def test_stream_decoders_refuse_what_the_layouts_forbid() -> None:
    request = s.StreamsMessageType
    response = s.StreamsMessageType
    open_body = _body("stream_open")  # context ref "t-1": 5 bytes, then open_flags
    append = _body("stream_append")
    read = _body("stream_read_wait")
    cases: list[tuple[int, bytes, str]] = [
        (request.STREAM_OPEN, open_body[:5] + b"\x04" + open_body[6:], "open_flags"),
        (request.STREAM_OPEN, open_body[:5] + b"\x00" + open_body[6:], "expected_head"),
        (request.STREAM_OPEN, open_body[:14] + b"\x02" + open_body[15:], "parent"),
        (request.STREAM_APPEND, append[:8] + b"\x02" + append[9:], "append_flags"),
        (request.STREAM_APPEND, append[:17] + bytes(4), "delta_len"),
        (request.STREAM_APPEND, append[:17] + (2 << 20).to_bytes(4, "little"), "delta_len"),
        (request.STREAM_LIST, _body("stream_list")[:-4] + bytes(4), "limit"),
        (request.STREAM_READ, read[:16] + bytes(4) + read[20:], "bytes_max"),
        (request.STREAM_READ, read[:20] + (60_001).to_bytes(4, "little"), "wait_ms"),
        (request.WATCH, b"\x07" + _body("watch_tag")[1:], "target"),
    ]
    for msg_type, body, field in cases:
        with pytest.raises(p.ProtocolError, match=field):
            p.decode_request(msg_type, body)
    sealed_read = bytearray(_body("stream_read_sealed_response"))
    sealed_read[9] = 0  # sealed into turn 0
    answers: list[tuple[int, bytes, str]] = [
        (response.STREAM_READ.response_type, bytes(sealed_read), "state"),
        (
            response.STREAM_READ.response_type,
            _body("stream_read_sealed_response")[:-4] + b"\x01\x00\x00\x00x",
            "bytes",
        ),
        (
            response.WATCH.response_type,
            b"\x01" + _body("watched_response")[1:],
            "lagged",
        ),
        (
            response.WATCH.response_type,
            _body("watched_response")[:21] + b"\x09" + _body("watched_response")[22:],
            "kind",
        ),
        (
            response.STREAM_LIST.response_type,
            _body("stream_listed_response")[:-17] + b"\x01" + _body("stream_listed_response")[-16:],
            "reserved",
        ),
    ]
    for msg_type, body, field in answers:
        with pytest.raises(p.ProtocolError, match=field):
            p.decode_response(msg_type, body)


def test_stream_encoders_refuse_what_the_layouts_cannot_carry() -> None:
    with pytest.raises(ValueError, match="delta"):
        s.StreamAppend(1, None, b"").body_chunks()
    with pytest.raises(ValueError, match="delta"):
        s.StreamAppend(1, None, bytes(s.STREAM_DELTA_BYTES_MAX + 1)).body_chunks()
    with pytest.raises(ValueError, match="limit"):
        s.StreamList(3, 0, s.STREAM_LIST_MAX + 1).body_chunks()
    with pytest.raises(ValueError, match="wait_ms"):
        s.StreamRead(1, 0, 1, s.STREAM_WAIT_MS_MAX + 1).body_chunks()
    with pytest.raises(ValueError, match="max_events"):
        s.Watch(s.WatchTarget(name_prefix="a"), 0, 0, 0).body_chunks()
    with pytest.raises(ValueError, match="target"):
        s.Watch(s.WatchTarget(), 0, 1, 0).body_chunks()
    with pytest.raises(ValueError, match="parent"):
        s.StreamOpen(3, None, p.ParentKind.TURN, 0, 0, 0, False, p.ExtrasRecord()).body_chunks()
    # A delta at the limit exactly travels as its own chunk (not copied into the header's).
    big = bytes(s.STREAM_DELTA_BYTES_MAX)
    chunks = p.encode_request(5, s.StreamAppend(1, 0, big))
    assert chunks[1] == big
    _, message = decode_frame(b"".join(chunks))
    assert message == s.StreamAppend(1, 0, big)
    assert HASH_A0 == TURN.payload_hash


# -- STREAM_FOLLOW (golden-v3-follow.txt): one request, a series of STREAM_PUSHED frames ---------

GOLDEN_V3_FOLLOW = REPO_ROOT / "protocol" / "tests" / "golden-v3-follow.txt"

FOLLOW_EXPECTED: dict[str, tuple[int, p.Message]] = {
    "stream_follow": (50, s.StreamFollow(57, 5, 64 * 1024, 30_000)),
    "stream_pushed_more": (
        50,
        s.StreamPushedResponse(57, s.StreamState.OPEN, 0, 5, 12, b", world", more=True),
    ),
    "stream_pushed_sealed": (
        50,
        s.StreamPushedResponse(57, s.StreamState.SEALED, 42, 12, 0, b""),
    ),
    "stream_pushed_idle": (
        51,
        s.StreamPushedResponse(58, s.StreamState.OPEN, 0, 12, 12, b""),
    ),
    "error_follow_not_found": (52, p.ErrorResponse(5, 0, "stream 59 not found")),
}


def follow_frames() -> dict[str, bytes]:
    """name → frame bytes of golden-v3-follow.txt."""
    return golden.golden_frames((GOLDEN_V3_FOLLOW,))


def test_every_follow_golden_frame_is_covered() -> None:
    assert set(follow_frames()) == set(FOLLOW_EXPECTED)


@pytest.mark.parametrize("name", sorted(FOLLOW_EXPECTED))
def test_follow_golden_frame_decodes_and_reencodes(name: str) -> None:
    req_id, expected = FOLLOW_EXPECTED[name]
    frame = follow_frames()[name]
    header = p.FrameHeader.decode(frame[: p.HEADER_BYTES])
    header.check(p.FRAME_BYTES_LIMIT, p.RESPONSE_FLAGS_KNOWN)
    body = frame[p.HEADER_BYTES :]
    assert header.len == len(body) and header.req_id == req_id
    assert header.flags == expected.frame_flags
    if isinstance(expected, p.Request):
        assert p.decode_request(header.msg_type, body, header.flags) == expected
        assert b"".join(p.encode_request(req_id, expected)) == frame
    else:
        assert isinstance(expected, p.Response)
        assert p.decode_response(header.msg_type, body, header.flags) == expected
        assert p.encode_response(req_id, expected) == frame


def test_follow_is_version_3_and_answered_by_stream_pushed() -> None:
    follow = s.StreamFollow(57, 5, 1, 0)
    assert follow.required_version == 3 and follow.msg_type == 0x0038
    assert follow.response_type == 0x8038 == s.StreamPushedResponse.MSG_TYPES[0]
    assert p.MORE == 0x0004 and p.MORE & p.FRAME_FLAGS_KNOWN == 0  # never on a request


def test_more_is_refused_where_the_protocol_forbids_it() -> None:
    frames = follow_frames()
    pushed = frames["stream_pushed_more"][p.HEADER_BYTES :]
    sealed = frames["stream_pushed_sealed"][p.HEADER_BYTES :]
    idle = frames["stream_pushed_idle"][p.HEADER_BYTES :]
    pushed_type = s.StreamsMessageType.STREAM_FOLLOW.response_type
    # MORE on a follow's frame of an ended stream, or of an open one without bytes.
    for body in (sealed, idle):
        with pytest.raises(p.ProtocolError, match="MORE"):
            p.decode_response(pushed_type, body, p.MORE)
    # MORE on any other answer: STREAM_READ's, with the same body.
    read_type = s.StreamsMessageType.STREAM_READ.response_type
    with pytest.raises(p.ProtocolError, match="flags"):
        p.decode_response(read_type, pushed, p.MORE)
    error = frames["error_follow_not_found"][p.HEADER_BYTES :]
    with pytest.raises(p.ProtocolError, match="flags"):
        p.decode_response(p.ERROR_TYPE, error, p.MORE)
    # A frame bit beyond MORE, on a follow's frame.
    with pytest.raises(p.ProtocolError, match="flags"):
        p.decode_response(pushed_type, pushed, p.MORE | (1 << 3))
    # The same bytes without MORE: a last frame.
    last = p.decode_response(pushed_type, pushed)
    assert isinstance(last, s.StreamPushedResponse) and not last.more
    assert last.data == b", world"
