"""A plain-socket stand-in for a server, for what a real one will not do on demand: never
answer, answer garbage, answer every request with a given ERROR code. Not a mock of the
client: it speaks bytes on a real loopback socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from ctxstore import _protocol as p

Behaviour = Callable[[socket.socket], None]


def read_frame(conn: socket.socket) -> tuple[p.FrameHeader, bytes] | None:
    """One frame from ``conn``, or None at EOF."""
    data = b""
    while len(data) < p.HEADER_BYTES:
        chunk = conn.recv(p.HEADER_BYTES - len(data))
        if not chunk:
            return None
        data += chunk
    header = p.FrameHeader.decode(data)
    body = b""
    while len(body) < header.len:
        chunk = conn.recv(header.len - len(body))
        if not chunk:
            return None
        body += chunk
    return header, body


def hello_answer(version: int = 1) -> p.HelloResponse:
    """A HELLO response with the default limits."""
    return p.HelloResponse(version, 16 << 20, 1024, 16 << 20, 10_000, 4096, "fake")


def say_hello(conn: socket.socket, version: int = 1) -> bool:
    """Reads the client's HELLO and answers it; False if the client left."""
    frame = read_frame(conn)
    if frame is None:
        return False
    conn.sendall(p.encode_response(frame[0].req_id, hello_answer(version)))
    return True


def silent(conn: socket.socket) -> None:
    """Accepts, reads and never answers."""
    while read_frame(conn) is not None:
        pass


def hello_then_silent(conn: socket.socket) -> None:
    """Answers HELLO, then reads requests and never answers them."""
    if say_hello(conn):
        silent(conn)


def hello_then_error(code: int, detail: int = 0) -> Behaviour:
    """Answers HELLO, then every request with ERROR ``code``."""

    def behaviour(conn: socket.socket) -> None:
        if not say_hello(conn):
            return
        while (frame := read_frame(conn)) is not None:
            error = p.ErrorResponse(code, detail, f"fake error {code}")
            conn.sendall(p.encode_response(frame[0].req_id, error))

    return behaviour


def hello_then_bytes(make: Callable[[int], bytes], version: int = 1) -> Behaviour:
    """Answers HELLO (choosing ``version``), then the first request with ``make(req_id)`` and
    closes."""

    def behaviour(conn: socket.socket) -> None:
        if not say_hello(conn, version):
            return
        frame = read_frame(conn)
        if frame is not None:
            conn.sendall(make(frame[0].req_id))

    return behaviour


def hello_then_answer(make: Callable[[p.FrameHeader, bytes], bytes], version: int = 1) -> Behaviour:
    """Answers HELLO (choosing ``version``), then every request with ``make(header, body)``
    (empty: no answer)."""

    def behaviour(conn: socket.socket) -> None:
        if not say_hello(conn, version):
            return
        while (frame := read_frame(conn)) is not None:
            answer = make(*frame)
            if answer:
                conn.sendall(answer)

    return behaviour


def hello_then_same(answer: p.Response, version: int = 2) -> Behaviour:
    """Answers HELLO (choosing ``version``), then every request with ``answer`` (a read's
    answer with the bytes a test chose, e.g. a payload that does not match its hash)."""

    def behaviour(conn: socket.socket) -> None:
        if not say_hello(conn, version):
            return
        while (frame := read_frame(conn)) is not None:
            conn.sendall(p.encode_response(frame[0].req_id, answer))

    return behaviour


class FakeServer:
    """A loopback listener running ``behaviour`` for each connection, on its own threads."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def addr(self) -> str:
        """HOST:PORT."""
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.behaviour(conn)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        """Stops listening and closes every connection."""
        self._stopped = True
        self.listener.close()
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
