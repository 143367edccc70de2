"""The LangGraph server (``langgraph dev``, the Agent Server's in-memory runtime) on ctxstore
(issue 34 item 4): ``examples/langgraph-server/langgraph.json`` names CtxstoreSaver and
CtxstoreStore as the server's checkpointer and store; the test starts the server from that
directory exactly as a user would (offline: no LangSmith, no license key), runs the graph
through the server's HTTP API (langgraph-sdk) on two threads, and finds the threads'
checkpoints and the shared memory in ctxstore."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_sync_client

import ctxstore
from ctxstore.langgraph import CtxstoreSaver, CtxstoreStore

from conftest import PYTHON_CLIENT_DIR, ServerProcess, new_server

EXAMPLE = PYTHON_CLIENT_DIR / "examples" / "langgraph-server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def agent_server(tmp_path: Path, tmp_root: Path) -> Iterator[tuple[str, ServerProcess]]:
    """ctxstore-server, and ``langgraph dev`` in a copy of the example pointed at it."""
    ctx = new_server(tmp_root)
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app)
    port = _free_port()
    cli = Path(sys.executable).parent / "langgraph"
    assert cli.is_file(), "langgraph-cli[inmem] is in the test extras"
    env = {
        **os.environ,
        "CTXSTORE_ADDR": ctx.addr,
        "CTXSTORE_STORE": "agent-memory",
        "LANGSMITH_TRACING": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    }
    log = open(tmp_path / "langgraph-dev.log", "wb")
    process = subprocess.Popen(
        [
            str(cli),
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=app,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail((tmp_path / "langgraph-dev.log").read_text(errors="replace")[-4000:])
            time.sleep(0.2)
        yield url, ctx
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        ctx.stop()


def test_the_langgraph_server_keeps_threads_and_memory_in_ctxstore(
    agent_server: tuple[str, ServerProcess],
) -> None:
    url, ctx = agent_server
    sdk = get_sync_client(url=url)
    threads = []
    for visit in (1, 2):
        thread = sdk.threads.create()["thread_id"]
        threads.append(thread)
        out = sdk.runs.wait(
            thread, "agent", input={"messages": [{"role": "user", "content": "hi"}]}
        )
        assert isinstance(out, dict)
        assert out["messages"][-1]["content"] == f"visit {visit}, 1 messages in this thread"
    again = sdk.runs.wait(
        threads[0], "agent", input={"messages": [{"role": "user", "content": "back"}]}
    )
    assert isinstance(again, dict)
    assert again["messages"][-1]["content"] == "visit 3, 3 messages in this thread"

    # What the server stored went to ctxstore: each thread is a context of the saver, and
    # the saver reads the server's checkpoints back; the memory is the store's.
    with ctxstore.Client(ctx.addr) as client:
        for thread in threads:
            found = list(client.iter_contexts({"lg.thread": thread}))
            assert [info.tags.get("lg.fmt") for info in found] == ["2"]
    with CtxstoreSaver.from_addr(ctx.addr) as saver:
        state = saver.get_tuple({"configurable": {"thread_id": threads[0], "checkpoint_ns": ""}})
        assert state is not None
        assert len(state.checkpoint["channel_values"]["messages"]) == 4
    with CtxstoreStore.from_addr(ctx.addr, name="agent-memory") as store:
        memory = store.get(("visits",), "count")
        assert memory is not None and memory.value == {"n": 3}


def test_the_readme_shows_the_examples_langgraph_json() -> None:
    text = (PYTHON_CLIENT_DIR / "README.md").read_text()
    start = text.index("### The LangGraph server")
    block = text[start:].split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == json.loads((EXAMPLE / "langgraph.json").read_text())
