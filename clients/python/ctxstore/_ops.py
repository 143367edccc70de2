"""What the blocking and the asyncio client share: building each request, checking and
converting its response (payload verification included), and the HELLO exchange's rules.
No I/O here."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import blake3
import zstandard

from . import _protocol as p
from .errors import (
    IntegrityError,
    NotSupported,
    ProtocolError,
    TooLarge,
    error_for_code,
)
from .types import (
    Appended,
    ContextHead,
    HashLike,
    Page,
    ServerInfo,
    Stats,
    Turn,
    parse_hash,
)

T = TypeVar("T")

DEFAULT_ADDR = "127.0.0.1:7411"
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_CLIENT_NAME = "ctxstore-python"
_INFLATE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One request and the function that turns its (non-ERROR) response into the result."""

    request: p.Request
    finish: Callable[[p.Response], T]


def parse_addr(addr: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"``, ``"[v6]:port"`` or ``(host, port)`` as ``(host, port)``."""
    if isinstance(addr, tuple):
        host, port = addr
        return str(host), int(port)
    text = addr.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            raise ValueError(f"address {addr!r} is not [HOST]:PORT")
        host, port_text = text[1:end], text[end + 2 :]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"address {addr!r} is not HOST:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"address {addr!r} has no numeric port") from None
    if not 0 < port < 65536:
        raise ValueError(f"address {addr!r}: port out of range")
    return host, port


def token_bytes(token: str | bytes | None) -> bytes:
    """The token as sent in HELLO (a str is UTF-8; surrounding whitespace is kept)."""
    if token is None:
        return b""
    raw = token.encode("utf-8") if isinstance(token, str) else bytes(token)
    if len(raw) > p.TOKEN_BYTES_MAX:
        raise ValueError(f"a token is at most {p.TOKEN_BYTES_MAX} bytes")
    return raw


def check_timeout(timeout: float | None, default: float) -> float:
    """The timeout of one call: ``timeout`` or the client's default; it must be positive."""
    value = default if timeout is None else float(timeout)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"a timeout must be a positive finite number of seconds, not {timeout!r}")
    return value


def hello_request(versions: tuple[int, int], token: bytes, client_name: str) -> p.Hello:
    """The HELLO offering ``versions``."""
    return p.Hello(versions[0], versions[1], token, client_name)


def hello_result(response: p.Response, versions: tuple[int, int]) -> ServerInfo:
    """Checks the answer to HELLO: an ERROR raises its exception, a HELLO response must choose
    a version in the offered range."""
    if isinstance(response, p.ErrorResponse):
        raise error_for_code(response.code, response.message, response.detail)
    if not isinstance(response, p.HelloResponse):
        raise ProtocolError(f"expected a HELLO response, got {type(response).__name__}")
    if not versions[0] <= response.version <= versions[1]:
        raise ProtocolError(
            f"the server chose protocol version {response.version}, "
            f"outside the offered {versions[0]}..={versions[1]}"
        )
    return ServerInfo(
        version=response.version,
        server_name=response.server_name,
        frame_bytes_max=response.frame_bytes_max,
        requests_in_flight_max=response.requests_in_flight_max,
        blob_bytes_max=response.blob_bytes_max,
        read_turns_max=response.read_turns_max,
        has_blobs_max=response.has_blobs_max,
    )


def check_sendable(request: p.Request, chunks: list[bytes], info: ServerInfo) -> None:
    """Refuses, before sending, a request the negotiated version lacks or a frame the server
    would refuse by closing the connection."""
    if request.required_version > info.version:
        raise NotSupported(
            f"{request.NAME} needs protocol version {request.required_version}; "
            f"this connection speaks version {info.version}"
        )
    body = sum(len(chunk) for chunk in chunks) - p.HEADER_BYTES
    if body > info.frame_bytes_max:
        raise TooLarge(
            f"{request.NAME} frame of {body} bytes is over the server's frame limit of "
            f"{info.frame_bytes_max} bytes (checked by the client, not sent)"
        )


def result_of(request: p.Request, response: p.Response) -> p.Response:
    """Raises the exception of an ERROR response; checks that any other has the request's
    response type."""
    if isinstance(response, p.ErrorResponse):
        raise error_for_code(response.code, response.message, response.detail)
    if response.msg_type != request.response_type:
        raise ProtocolError(
            f"{request.NAME} was answered with message type {response.msg_type:#06x}"
        )
    return response


def new_nonce() -> int:
    """A random PING nonce."""
    return int.from_bytes(os.urandom(8), "little")


def _u64(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= p.U64_MAX:
        raise ValueError(f"{name} must be an integer in 0..2**64, not {value!r}")
    return value


def _u32(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= p.U32_MAX:
        raise ValueError(f"{name} must be an integer in 0..2**32, not {value!r}")
    return value


def _expect(response: p.Response, cls: type[T]) -> T:
    if not isinstance(response, cls):
        raise ProtocolError(f"expected {cls.__name__}, got {type(response).__name__}")
    return response


# ----------------------------------------------------------------------------------------------
# Payloads


def inflate(data: bytes, raw_len: int) -> bytes:
    """Inflates a zstd frame that must hold exactly ``raw_len`` bytes, reading at most
    ``raw_len + 1`` bytes of output (a frame claiming more cannot exhaust memory)."""
    if raw_len > p.FRAME_BYTES_LIMIT:
        raise IntegrityError(f"zstd payload claims {raw_len} bytes, above any server's limit")
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as error:
        raise IntegrityError(f"zstd payload has no valid frame header: {error}") from None
    if declared >= 0 and declared != raw_len:
        raise IntegrityError(f"zstd frame declares {declared} bytes, raw_len is {raw_len}")
    parts: list[bytes] = []
    total = 0
    try:
        decompressor = zstandard.ZstdDecompressor()
        with decompressor.stream_reader(data, read_across_frames=False) as reader:
            while total <= raw_len:
                chunk = reader.read(min(_INFLATE_CHUNK, raw_len + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
    except zstandard.ZstdError as error:
        raise IntegrityError(f"zstd payload does not inflate: {error}") from None
    if total != raw_len:
        raise IntegrityError(
            f"zstd payload inflates to {'more than ' if total > raw_len else ''}"
            f"{total} bytes, raw_len is {raw_len}"
        )
    return b"".join(parts)


def payload_bytes(
    payload: p.PayloadRecord,
    expected_hash: bytes,
    expected_len: int | None,
    accept_zstd: bool,
    what: str,
) -> bytes:
    """The verified bytes of a PAYLOAD: RAW as sent, ZSTD inflated (only if it was accepted);
    length and BLAKE3 hash must match, else :class:`IntegrityError`."""
    if payload.encoding == p.PayloadEncoding.RAW:
        data = payload.data
    elif payload.encoding == p.PayloadEncoding.ZSTD:
        if not accept_zstd:
            raise ProtocolError(f"{what}: a zstd payload the request did not accept")
        data = inflate(payload.data, payload.raw_len)
    else:
        raise ProtocolError(f"{what}: the payload is absent though it was requested")
    if expected_len is not None and len(data) != expected_len:
        raise IntegrityError(
            f"{what}: payload of {len(data)} bytes, the turn says {expected_len} bytes"
        )
    actual = blake3.blake3(data).digest()
    if actual != expected_hash:
        raise IntegrityError(
            f"{what}: payload hash {actual.hex()} does not match {expected_hash.hex()}"
        )
    return data


def turn_of(record: p.TurnRecord, payload: bytes | None = None) -> Turn:
    """A public :class:`Turn` from its wire record."""
    return Turn(
        turn_id=record.turn_id,
        parent_turn_id=record.parent_turn_id,
        context_id=record.context_id,
        depth=record.depth,
        codec=record.codec,
        type_tag=record.type_tag,
        payload_hash=record.payload_hash,
        payload_len=record.payload_len,
        flags=record.flags,
        created_at_unix_ms=record.created_at_unix_ms,
        payload=payload,
    )


def _head(response: p.Response) -> ContextHead:
    head = _expect(response, p.ContextResponse).head
    return ContextHead(head.context_id, head.head_turn_id, head.head_depth)


def _read_flags(payloads: bool, accept_zstd: bool) -> int:
    if not payloads:
        return 0
    return p.READ_WITH_PAYLOADS | (p.READ_ACCEPT_ZSTD if accept_zstd else 0)


def _page_finisher(payloads: bool, accept_zstd: bool) -> Callable[[p.Response], Page]:
    def finish(response: p.Response) -> Page:
        turns_response = _expect(response, p.TurnsResponse)
        turns = []
        for entry in turns_response.entries:
            record = entry.turn
            if payloads:
                what = f"turn {record.turn_id}"
                data: bytes | None = payload_bytes(
                    entry.payload, record.payload_hash, record.payload_len, accept_zstd, what
                )
            else:
                if entry.payload.encoding != p.PayloadEncoding.ABSENT:
                    raise ProtocolError(
                        f"turn {record.turn_id}: a payload was sent though none was requested"
                    )
                data = None
            turns.append(turn_of(record, data))
        return Page(turns, turns_response.next_before, turns_response.tip_depth)

    return finish


# ----------------------------------------------------------------------------------------------
# One Op per request


def ping(nonce: int | None = None) -> Op[None]:
    """PING: checks that the PONG echoes the nonce."""
    value = new_nonce() if nonce is None else _u64(nonce, "nonce")

    def finish(response: p.Response) -> None:
        if _expect(response, p.Pong).nonce != value:
            raise ProtocolError("PONG does not echo the PING's nonce")

    return Op(p.Ping(value), finish)


def create_context(base_turn_id: int = 0) -> Op[ContextHead]:
    """CTX_CREATE."""
    return Op(p.CtxCreate(_u64(base_turn_id, "base_turn_id")), _head)


def fork(turn_id: int) -> Op[ContextHead]:
    """CTX_FORK."""
    return Op(p.CtxFork(_u64(turn_id, "turn_id")), _head)


def head(context_id: int) -> Op[ContextHead]:
    """GET_HEAD."""
    return Op(p.GetHead(_u64(context_id, "context_id")), _head)


def append(
    context_id: int,
    payload: bytes | bytearray | memoryview,
    type_tag: int,
    codec: int,
    expected_head: int | None,
) -> Op[Appended]:
    """APPEND_TURN; checks that the new turn carries the payload's hash and length."""
    data = bytes(payload)
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    request = p.AppendTurn(
        _u64(context_id, "context_id"),
        expected_head,
        _u64(type_tag, "type_tag"),
        _u32(codec, "codec"),
        data,
    )
    if len(data) > p.U32_MAX:
        raise ValueError("a payload is at most 4 GiB - 1 bytes")
    digest = blake3.blake3(data).digest()

    def finish(response: p.Response) -> Appended:
        appended = _expect(response, p.AppendedResponse)
        record = appended.turn
        if record.payload_hash != digest or record.payload_len != len(data):
            raise IntegrityError(
                f"appended turn {record.turn_id} records payload {record.payload_hash.hex()} "
                f"({record.payload_len} bytes), sent {digest.hex()} ({len(data)} bytes)"
            )
        if record.context_id != context_id:
            raise ProtocolError(
                f"appended turn {record.turn_id} is in context {record.context_id}, "
                f"not {context_id}"
            )
        return Appended(turn_of(record), appended.deduped)

    return Op(request, finish)


def append_by_hash(
    context_id: int,
    payload_hash: HashLike,
    type_tag: int,
    codec: int,
    expected_head: int | None,
) -> Op[Appended]:
    """APPEND_TURN_BY_HASH."""
    digest = parse_hash(payload_hash)
    if expected_head is not None:
        _u64(expected_head, "expected_head")
    request = p.AppendTurnByHash(
        _u64(context_id, "context_id"),
        expected_head,
        _u64(type_tag, "type_tag"),
        _u32(codec, "codec"),
        digest,
    )

    def finish(response: p.Response) -> Appended:
        appended = _expect(response, p.AppendedResponse)
        if appended.turn.payload_hash != digest:
            raise IntegrityError(
                f"appended turn {appended.turn.turn_id} records payload "
                f"{appended.turn.payload_hash.hex()}, asked for {digest.hex()}"
            )
        return Appended(turn_of(appended.turn), appended.deduped)

    return Op(request, finish)


def get_turn(turn_id: int) -> Op[Turn]:
    """GET_TURN."""

    def finish(response: p.Response) -> Turn:
        return turn_of(_expect(response, p.TurnResponse).turn)

    return Op(p.GetTurn(_u64(turn_id, "turn_id")), finish)


def last(context_id: int, limit: int, payloads: bool, accept_zstd: bool) -> Op[Page]:
    """GET_LAST."""
    request = p.GetLast(
        _u64(context_id, "context_id"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def before(
    context_id: int, before_turn_id: int, limit: int, payloads: bool, accept_zstd: bool
) -> Op[Page]:
    """GET_BEFORE."""
    request = p.GetBefore(
        _u64(context_id, "context_id"),
        _u64(before_turn_id, "before_turn_id"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def range_by_depth(
    context_id: int, from_depth: int, limit: int, payloads: bool, accept_zstd: bool
) -> Op[Page]:
    """GET_RANGE_BY_DEPTH."""
    request = p.GetRangeByDepth(
        _u64(context_id, "context_id"),
        _u32(from_depth, "from_depth"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def chain(turn_id: int, from_depth: int, limit: int, payloads: bool, accept_zstd: bool) -> Op[Page]:
    """GET_CHAIN."""
    request = p.GetChain(
        _u64(turn_id, "turn_id"),
        _u32(from_depth, "from_depth"),
        _u32(limit, "limit"),
        _read_flags(payloads, accept_zstd),
    )
    return Op(request, _page_finisher(payloads, accept_zstd))


def get_blob(payload_hash: HashLike, accept_zstd: bool) -> Op[bytes]:
    """GET_BLOB; the bytes are verified against the hash."""
    digest = parse_hash(payload_hash)

    def finish(response: p.Response) -> bytes:
        payload = _expect(response, p.BlobResponse).payload
        return payload_bytes(payload, digest, None, accept_zstd, f"blob {digest.hex()}")

    return Op(p.GetBlob(digest, p.READ_ACCEPT_ZSTD if accept_zstd else 0), finish)


def has_blobs(hashes: Sequence[bytes]) -> Op[list[bool]]:
    """HAS_BLOBS of already parsed hashes; the answer must have one flag per hash."""
    request = p.HasBlobs(tuple(hashes))

    def finish(response: p.Response) -> list[bool]:
        present = _expect(response, p.HasBlobsResponse).present
        if len(present) != len(hashes):
            raise ProtocolError(
                f"HAS_BLOBS of {len(hashes)} hashes was answered with {len(present)} flags"
            )
        return list(present)

    return Op(request, finish)


def stats() -> Op[Stats]:
    """STATS."""

    def finish(response: p.Response) -> Stats:
        s = _expect(response, p.StatsResponse)
        return Stats(
            turns=s.turns,
            contexts=s.contexts,
            blobs=s.blobs,
            logical_bytes=s.logical_bytes,
            unique_bytes=s.unique_bytes,
            stored_bytes=s.stored_bytes,
            dedup_hits=s.dedup_hits,
            connections=s.connections,
            requests_total=s.requests_total,
            errors_total=s.errors_total,
            uptime_ms=s.uptime_ms,
            read_only=s.read_only,
        )

    return Op(p.Stats(), finish)


def raw(request: p.Request) -> Op[p.Response]:
    """Any request; the response as decoded."""
    return Op(request, lambda response: response)


def chunk_hashes(hashes: Sequence[HashLike], per_request: int) -> list[list[bytes]]:
    """Parses ``hashes`` and splits them into lists of at most ``per_request``."""
    parsed = [parse_hash(h) for h in hashes]
    size = max(1, per_request)
    return [parsed[i : i + size] for i in range(0, len(parsed), size)]


def replay_next(page: Page, turn_id: int, from_depth: int) -> int | None:
    """The ``from_depth`` of the next GET_CHAIN page of a replay, or None when it is done.
    A page that does not advance is a ProtocolError (no endless loop on a faulty server)."""
    if not page.turns:
        raise ProtocolError(f"GET_CHAIN of turn {turn_id} returned an empty page before its end")
    last_depth = page.turns[-1].depth
    if page.turns[0].depth != from_depth or last_depth < from_depth:
        raise ProtocolError(
            f"GET_CHAIN of turn {turn_id} from depth {from_depth} returned depths "
            f"{page.turns[0].depth}..{last_depth}"
        )
    if last_depth >= page.tip_depth:
        return None
    return last_depth + 1
