"""Test fixtures: a real ctxstore-server on a temporary data directory and a free loopback
port (no mocks).

The server binary: ``$CTXSTORE_SERVER_BIN``, else ``../../target/debug/ctxstore-server``, else
``../../target/release/ctxstore-server`` (relative to clients/python). Tests that need a server
fail with a clear message when none exists; they are never skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PYTHON_CLIENT_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PYTHON_CLIENT_DIR.parent.parent
GOLDEN_V1 = REPO_ROOT / "protocol" / "tests" / "golden-v1.txt"
GOLDEN_V2 = REPO_ROOT / "protocol" / "tests" / "golden-v2.txt"
GOLDEN_V3 = REPO_ROOT / "protocol" / "tests" / "golden-v3.txt"
GOLDEN_V4 = REPO_ROOT / "protocol" / "tests" / "golden-v4.txt"
GOLDEN_V5 = REPO_ROOT / "protocol" / "tests" / "golden-v5.txt"
GOLDEN_V6 = REPO_ROOT / "protocol" / "tests" / "golden-v6.txt"
GOLDEN_V7 = REPO_ROOT / "protocol" / "tests" / "golden-v7.txt"


def server_binary() -> Path:
    """The ctxstore-server to test against (pytest.fail if there is none)."""
    configured = os.environ.get("CTXSTORE_SERVER_BIN")
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            pytest.fail(f"CTXSTORE_SERVER_BIN={configured} is not an executable file")
        return path
    candidates = [
        REPO_ROOT / "target" / "debug" / "ctxstore-server",
        REPO_ROOT / "target" / "release" / "ctxstore-server",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail(
        "no ctxstore-server binary: set CTXSTORE_SERVER_BIN or build it "
        f"(cargo build -p ctxstore-server); looked for {', '.join(map(str, candidates))}"
    )


class ServerProcess:
    """One ctxstore-server process on a data directory; restartable on the same port."""

    def __init__(
        self, data_dir: Path, token: str | None = None, extra_args: list[str] | None = None
    ):
        self.binary = server_binary()
        self.data_dir = data_dir
        self.token = token
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def addr(self) -> str:
        """HOST:PORT of the listener."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        """Starts the server (the first time on a free port, later on the same one)."""
        ready = self.data_dir.parent / f"{self.data_dir.name}.ready"
        if ready.exists():
            ready.unlink()
        args = [
            str(self.binary),
            "--data",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--ready-file",
            str(ready),
            "--network-cores",
            "1",
            "--no-preallocate",
            *self.extra_args,
        ]
        if self.token is not None:
            token_file = self.data_dir.parent / f"{self.data_dir.name}.token"
            token_file.write_text(self.token + "\n")
            args += ["--token-file", str(token_file)]
        log = open(self.log_path, "ab")
        deadline = time.monotonic() + 20
        while True:
            self.process = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            while time.monotonic() < deadline:
                if ready.exists() and ready.read_text().strip():
                    self.port = int(ready.read_text().strip().rsplit(":", 1)[1])
                    log.close()
                    return self
                if self.process.poll() is not None:
                    break
                time.sleep(0.02)
            if self.process.poll() is None or time.monotonic() >= deadline:
                self.kill()
                log.close()
                pytest.fail(f"ctxstore-server did not start; log: {self.log_text()}")
            # Exited early: the port may still be held by the previous process; retry.
            time.sleep(0.2)

    def log_text(self) -> str:
        """The server's log so far (last 4 KiB)."""
        try:
            return self.log_path.read_text(errors="replace")[-4096:]
        except OSError:
            return "(no log)"

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing. Returns once every
        thread of the server has stopped: a stop is asynchronous, and a thread not yet stopped
        can answer a request sent right after the signal (on a busy machine it did)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _all_threads_stopped(self.process.pid):
            assert time.monotonic() < deadline, "the server did not stop within 10 s of SIGSTOP"
            time.sleep(0.001)

    def kill(self) -> None:
        """SIGKILL (works on a paused server too) and wait for the process to end."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """SIGTERM: a clean shutdown (SIGKILL after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


@pytest.fixture(autouse=True)
def _no_client_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clients default to $CTXSTORE_ADDR and $CTXSTORE_TOKEN (as the CLI): a developer's
    shell must not change what a test connects to. Tests of the defaults set them."""
    monkeypatch.delenv("CTXSTORE_ADDR", raising=False)
    monkeypatch.delenv("CTXSTORE_TOKEN", raising=False)


@pytest.fixture(scope="session")
def tmp_root() -> Iterator[Path]:
    """A temporary directory for the session's servers."""
    with tempfile.TemporaryDirectory(prefix="ctxstore-pytest-") as root:
        yield Path(root)


_counter = iter(range(1_000_000))


def new_server(
    root: Path, token: str | None = None, extra_args: list[str] | None = None
) -> ServerProcess:
    """A started server on a fresh data directory under ``root``."""
    data_dir = root / f"store-{next(_counter)}"
    return ServerProcess(data_dir, token=token, extra_args=extra_args).start()


@pytest.fixture(scope="session")
def server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server without a token, shared by the tests that do not disturb it."""
    process = new_server(tmp_root)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def token_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server that requires the token ``s3cret-token``."""
    process = new_server(tmp_root, token="s3cret-token")
    yield process
    process.stop()


@pytest.fixture(scope="session")
def small_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server with small limits: 64 KiB payloads, 50 turns per read, 8 hashes per HAS_BLOBS,
    4 requests in flight per connection."""
    process = new_server(
        tmp_root,
        extra_args=[
            "--blob-bytes-max",
            str(64 * 1024),
            "--read-turns-max",
            "50",
            "--has-blobs-max",
            "8",
            "--requests-in-flight-max",
            "4",
        ],
    )
    yield process
    process.stop()


@pytest.fixture()
def own_server(tmp_root: Path) -> Iterator[ServerProcess]:
    """A server for one test alone (it may be killed, paused, restarted)."""
    process = new_server(tmp_root)
    yield process
    process.kill()


def pytest_report_header() -> str:
    """Names the server binary and the ctxstore package under test."""
    import ctxstore

    configured = os.environ.get(
        "CTXSTORE_SERVER_BIN", "(not set: target/debug, then target/release)"
    )
    return f"ctxstore package: {Path(ctxstore.__file__).parent}; CTXSTORE_SERVER_BIN: {configured}"


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped (``T``, or ``t`` when traced), from
    ``/proc/PID/task/TID/stat``: the state is the first field after the command's ``)``."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    seen = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # the thread exited meanwhile
        end = stat.rfind(") ")
        if stat[end + 2 : end + 3] not in ("T", "t"):
            return False
        seen += 1
    return seen > 0
