"""ctxstore-mcp end to end: the MCP SDK's own client (in-process, then over stdio and
streamable HTTP through the console script) against a real ctxstore-server. Every tool (turns
with vectors and ``search_turns`` too), the context resource, argument checks and the server's
typed errors as MCP errors."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

import ctxstore
from ctxstore.mcp_server import build_server

from conftest import ServerProcess


async def _call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    structured = result.structured_content
    if structured is not None and set(structured) == {"result"}:
        return structured["result"]  # a tool that returns text
    return structured


async def _error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def test_tools_end_to_end(server: ServerProcess) -> None:
    async with Client(build_server(server.addr)) as mcp:
        await _tools_end_to_end(mcp, server)


async def _tools_end_to_end(mcp: Client, server: ServerProcess) -> None:
    name = f"mcp-{uuid.uuid4().hex[:8]}"
    tools = {t.name for t in (await mcp.list_tools()).tools}
    assert tools == {
        "list_contexts",
        "read_turns",
        "append_turn",
        "fork",
        "find_turns",
        "kv_get",
        "kv_put",
        "search",
        "search_turns",
        "branch_tree",
    }
    run = f"run-{uuid.uuid4().hex[:8]}"
    first = await _call(
        mcp, "append_turn", context=name, text="hello", key="k1", labels={"run_id": run}
    )
    second = await _call(
        mcp, "append_turn", context=name, data_base64=base64.b64encode(b"\xff\x00binary").decode()
    )
    retry = await _call(mcp, "append_turn", context=name, text="hello", key="k1")
    assert retry["existing"] and retry["turn_id"] == first["turn_id"]
    branch = await _call(
        mcp,
        "append_turn",
        context=name,
        text="instead",
        parent=first["turn_id"],
        labels={"run_id": run},
    )
    assert branch["depth"] == 1 and branch["parent_turn_id"] == first["turn_id"]

    # What the tools wrote is what the ctxstore client reads.
    with ctxstore.Client(server.addr) as direct:
        page = direct.last(name, 10, payloads=True)
        assert [t.payload for t in page] == [b"hello", b"instead"]
        assert direct.get_turn(second["turn_id"]).payload_hash == ctxstore.blob_hash(
            b"\xff\x00binary"
        )

    read = await _call(mcp, "read_turns", context=name, limit=10)
    assert [t.get("text") for t in read["turns"]] == ["hello", "instead"]
    assert read["turns"][0]["labels"] == {"run_id": run} and read["turns"][0]["key"] == "k1"
    older = await _call(mcp, "read_turns", context=name, limit=10, before=branch["turn_id"])
    assert [t["turn_id"] for t in older["turns"]] == [first["turn_id"]]
    ranged = await _call(mcp, "read_turns", context=name, from_depth=1)
    assert [t["turn_id"] for t in ranged["turns"]] == [branch["turn_id"]]
    by_id = await _call(mcp, "read_turns", context=first["context_id"], limit=1)
    assert by_id["turns"][0]["turn_id"] == branch["turn_id"]

    fork = await _call(mcp, "fork", turn_id=second["turn_id"], name=f"{name}-f", tags={"k": "v"})
    assert fork["head_turn_id"] == second["turn_id"] and fork["tags"] == {"k": "v"}
    forked = await _call(mcp, "read_turns", context=f"{name}-f")
    assert forked["turns"][-1]["data_base64"] == base64.b64encode(b"\xff\x00binary").decode()

    listed = await _call(mcp, "list_contexts", name_prefix=name)
    assert sorted(c["name"] for c in listed["contexts"]) == [name, f"{name}-f"]
    tagged = await _call(mcp, "list_contexts", tags={"k": "v"}, name_prefix=name)
    assert [c["name"] for c in tagged["contexts"]] == [f"{name}-f"]
    paged = await _call(mcp, "list_contexts", name_prefix=name, limit=1)
    assert len(paged["contexts"]) == 1 and paged["next_cursor"] is not None

    found = await _call(mcp, "find_turns", key="run_id", value=run)
    assert [t["turn_id"] for t in found["turns"]] == [branch["turn_id"], first["turn_id"]]

    await _call(mcp, "kv_put", context=name, key="memo", text="remember this")
    assert (await _call(mcp, "kv_get", context=name, key="memo"))["text"] == "remember this"
    await _call(mcp, "kv_put", context=name, key="memo", text="other", if_absent=True)
    assert (await _call(mcp, "kv_get", context=name, key="memo"))["text"] == "remember this"
    # Memories with vectors, found by meaning (protocol version 6): the agent embeds.
    index = f"mcp-{uuid.uuid4().hex[:8]}"
    async with await ctxstore.AsyncClient.connect(server.addr) as direct:
        await direct.vector_index_create(index, 2)
    # JSON values go as base64: the MCP SDK parses a JSON-looking string argument itself.
    for key, text, vector in [
        ("m/east", '{"kind": "place"}', [1.0, 0.0]),
        ("m/north", '{"kind": "place"}', [0.0, 1.0]),
        ("m/note", '{"kind": "note"}', [0.9, 0.1]),
    ]:
        encoded = base64.b64encode(text.encode()).decode()
        await _call(
            mcp,
            "kv_put",
            context=name,
            key=key,
            data_base64=encoded,
            index=index,
            vectors=[vector],
        )
    found = await _call(mcp, "search", context=name, index=index, vector=[1.0, 0.05], k=2)
    assert [hit["key"] for hit in found["hits"]] == ["m/east", "m/note"]
    assert found["hits"][0]["text"] == '{"kind": "place"}'
    assert found["hits"][0]["score"] > 0.99
    places = await _call(
        mcp,
        "search",
        context=name,
        index=index,
        vector=[1.0, 0.05],
        k=5,
        prefix="m/",
        filter={"kind": "place"},
    )
    assert [hit["key"] for hit in places["hits"]] == ["m/east", "m/north"]
    # JSON has no NaN: it arrives as null, which the tool's schema refuses.
    assert "valid number" in await _error(
        mcp, "search", context=name, index=index, vector=[float("nan"), 0.0]
    )
    assert "INVALID_ARGUMENT" in await _error(
        mcp, "search", context=name, index=index, vector=[1.0, 0.0, 0.0]
    )
    assert "NOT_FOUND" in await _error(mcp, "search", context=name, index="absent", vector=[1.0])
    assert "give `index`" in await _error(
        mcp, "kv_put", context=name, key="x", text="x", vectors=[[1.0, 0.0]]
    )
    missing = await _call(mcp, "kv_get", context=name, key="nothing")
    assert missing == {"key": "nothing", "found": False}

    tree = await _call(mcp, "branch_tree", context=name)
    lines = tree.splitlines()
    assert lines[0].startswith(f"context {name} ") and "3 turns" in lines[0]
    assert lines[1] == f"turn {first['turn_id']} (depth 0) [key=k1]: 'hello'"
    assert lines[2] == f"├─ turn {second['turn_id']} (depth 1): 8 bytes (binary)"
    assert lines[3] == f"└─ turn {branch['turn_id']} (depth 1) [HEAD]: 'instead'"


async def test_turns_with_vectors_are_recalled(server: ServerProcess) -> None:
    async with Client(build_server(server.addr)) as mcp:
        await _turns_with_vectors(mcp, server)


async def _turns_with_vectors(mcp: Client, server: ServerProcess) -> None:
    """An agent's recall over its own turns (protocol version 7): append_turn with `index`
    and `vectors`, search_turns by context, name prefix, tags, labels and type."""
    base = f"mcp-recall-{uuid.uuid4().hex[:8]}"
    index = f"mcp-turns-{uuid.uuid4().hex[:8]}"
    async with await ctxstore.AsyncClient.connect(server.addr) as direct:
        await direct.vector_index_create(index, 2)
        await direct.open_context(f"{base}/b", {"project": "x"})
    east = await _call(
        mcp,
        "append_turn",
        context=f"{base}/a",
        text="the sun rises in the east",
        labels={"role": "user"},
        type_tag=1,
        index=index,
        vectors=[[1.0, 0.0]],
    )
    north = await _call(
        mcp,
        "append_turn",
        context=f"{base}/a",
        text="north",
        labels={"role": "assistant"},
        index=index,
        vectors=[[0.0, 1.0], [0.6, 0.8]],
    )
    other = await _call(
        mcp,
        "append_turn",
        context=f"{base}/b",
        data_base64=base64.b64encode(b"\xff elsewhere").decode(),
        type_tag=1,
        index=index,
        vectors=[[0.9, 0.1]],
    )
    await _call(mcp, "append_turn", context=f"{base}/a", text="no vector", index=index)
    assert north["parent_turn_id"] == east["turn_id"]

    async def ids(**arguments: Any) -> list[int]:
        found = await _call(mcp, "search_turns", index=index, vector=[1.0, 0.05], **arguments)
        return [hit["turn_id"] for hit in found["hits"]]

    found = await _call(mcp, "search_turns", index=index, vector=[1.0, 0.05], k=2)
    assert [hit["turn_id"] for hit in found["hits"]] == [east["turn_id"], other["turn_id"]]
    assert found["hits"][0]["text"] == "the sun rises in the east"
    assert (
        found["hits"][0]["context_id"] == east["context_id"] and found["hits"][0]["type_tag"] == 1
    )
    assert found["hits"][0]["score"] > 0.99 and found["candidates"] >= 2
    assert base64.b64decode(found["hits"][1]["data_base64"]) == b"\xff elsewhere"
    everything = [east["turn_id"], other["turn_id"], north["turn_id"]]
    assert await ids() == everything
    assert await ids(context=f"{base}/a") == [east["turn_id"], north["turn_id"]]
    assert await ids(context=other["context_id"]) == [other["turn_id"]]
    assert await ids(name_prefix=f"{base}/") == everything
    assert await ids(name_prefix=base, tags={"project": "x"}) == [other["turn_id"]]
    assert await ids(labels={"role": "assistant"}) == [north["turn_id"]]
    assert await ids(type_tag=1) == [east["turn_id"], other["turn_id"]]
    assert await ids(k=1, context=f"{base}/a", labels={"role": "user"}) == [east["turn_id"]]

    # Refusals: the tool's own checks, then the server's typed errors; nothing is appended.
    assert "give `index`" in await _error(
        mcp, "append_turn", context=f"{base}/a", text="x", vectors=[[1.0, 0.0]]
    )
    assert "vectors: at most 16" in await _error(
        mcp, "append_turn", context=f"{base}/a", text="x", index=index, vectors=[[1.0, 0.0]] * 17
    )
    assert "INVALID_ARGUMENT" in await _error(
        mcp, "append_turn", context=f"{base}/a", text="x", index=index, vectors=[[1.0, 0.0, 0.0]]
    )
    assert "NOT_FOUND" in await _error(
        mcp, "append_turn", context=f"{base}/a", text="x", index="absent", vectors=[[1.0, 0.0]]
    )
    read = await _call(mcp, "read_turns", context=f"{base}/a")
    assert [t["text"] for t in read["turns"]] == ["the sun rises in the east", "north", "no vector"]
    assert "valid number" in await _error(
        mcp, "search_turns", index=index, vector=[float("nan"), 0.0]
    )
    assert "INVALID_ARGUMENT" in await _error(
        mcp, "search_turns", index=index, vector=[1.0, 0.0, 0.0]
    )
    assert "NOT_FOUND" in await _error(mcp, "search_turns", index="absent", vector=[1.0])
    assert "NOT_FOUND" in await _error(
        mcp, "search_turns", index=index, vector=[1.0, 0.0], context=f"{base}/none"
    )
    assert "k: 1-1000" in await _error(mcp, "search_turns", index=index, vector=[1.0, 0.0], k=0)
    assert "labels: at most 16" in await _error(
        mcp,
        "search_turns",
        index=index,
        vector=[1.0, 0.0],
        labels={str(i): "v" for i in range(17)},
    )
    async with await ctxstore.AsyncClient.connect(server.addr) as direct:
        assert (await direct.vector_index_drop(index)).vectors == 4


async def test_arguments_and_server_errors_are_mcp_errors(server: ServerProcess) -> None:
    async with Client(build_server(server.addr)) as mcp:
        await _arguments_and_errors(mcp)


async def _arguments_and_errors(mcp: Client) -> None:
    name = f"mcp-{uuid.uuid4().hex[:8]}"
    assert "NOT_FOUND" in await _error(mcp, "read_turns", context=name)
    assert "limit: 1-1000" in await _error(mcp, "read_turns", context=name, limit=0)
    assert "1-256 bytes" in await _error(mcp, "read_turns", context="x" * 257)
    assert "exactly one of text" in await _error(mcp, "append_turn", context=name)
    assert "base64" in await _error(mcp, "append_turn", context=name, data_base64="@@")
    assert "key: 1-64" in await _error(mcp, "append_turn", context=name, text="x", key="k" * 65)
    assert "labels: at most 16" in await _error(
        mcp, "append_turn", context=name, text="x", labels={str(i): "v" for i in range(17)}
    )
    assert "NOT_FOUND" in await _error(mcp, "append_turn", context=name, text="x", create=False)
    first = await _call(mcp, "append_turn", context=name, text="a")
    conflict = await _error(mcp, "append_turn", context=name, text="b", expected_head=1)
    assert conflict.startswith("Error executing tool append_turn: CONFLICT")
    assert "INVALID_ARGUMENT" in await _error(mcp, "find_turns", key="plain", value="v")
    assert "ALREADY_EXISTS" in await _error(mcp, "fork", turn_id=first["turn_id"], name=name)
    assert "turn_id: a TurnID" in await _error(mcp, "fork", turn_id=0)
    assert "key: 1-256" in await _error(mcp, "kv_get", context=name, key="")
    assert "give at most one" in await _error(
        mcp, "read_turns", context=name, before=1, from_depth=0
    )
    # Nothing above wrote anything but the one turn.
    read = await _call(mcp, "read_turns", context=name)
    assert [t["text"] for t in read["turns"]] == ["a"]


async def test_context_resource(server: ServerProcess) -> None:
    async with Client(build_server(server.addr)) as mcp:
        await _context_resource(mcp)


async def _context_resource(mcp: Client) -> None:
    name = f"mcp/{uuid.uuid4().hex[:8]}"
    await _call(mcp, "append_turn", context=name, text="first words")
    templates = (await mcp.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["ctxstore://context/{name}"]
    encoded = name.replace("/", "%2F")
    contents = (await mcp.read_resource(f"ctxstore://context/{encoded}")).contents
    text = contents[0].text  # type: ignore[union-attr]
    assert text.startswith(f"context {name} ") and text.endswith("] first words")
    with pytest.raises(MCPError, match="NOT_FOUND"):
        await mcp.read_resource("ctxstore://context/no-such-context-here")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _console_script() -> str:
    script = Path(sys.executable).with_name("ctxstore-mcp")
    assert script.exists(), f"the console script is not installed at {script}"
    return str(script)


async def test_console_script_over_stdio_and_http(server: ServerProcess) -> None:
    name = f"mcp-{uuid.uuid4().hex[:8]}"
    params = StdioServerParameters(command=_console_script(), args=["--addr", server.addr])
    async with Client(params) as client:
        written = await _call(client, "append_turn", context=name, text="over stdio")
    port = _free_port()
    process = subprocess.Popen(
        [_console_script(), "--addr", server.addr, "--http", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    err = process.stderr.read().decode() if process.stderr else ""
                    pytest.fail(f"ctxstore-mcp --http did not start: {err[-2000:]}")
                time.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            read = await _call(client, "read_turns", context=name)
            assert [t["turn_id"] for t in read["turns"]] == [written["turn_id"]]
    finally:
        process.terminate()
        process.wait(timeout=10)


def _start_http(
    server: ServerProcess, extra: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    process = subprocess.Popen(
        [_console_script(), "--addr", server.addr, "--http", f"127.0.0.1:{port}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                err = process.stderr.read().decode() if process.stderr else ""
                process.kill()
                pytest.fail(f"ctxstore-mcp --http did not start: {err[-2000:]}")
            time.sleep(0.1)


def _initialize(port: int, headers: dict[str, str]) -> int:
    """POSTs MCP's initialize to /mcp with `headers`; the HTTP status."""
    import http.client
    import json

    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
    )
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST",
            "/mcp",
            body=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_http_clients_must_present_the_token_and_a_host_we_serve(
    server: ServerProcess, tmp_path: Path
) -> None:
    token_file = tmp_path / "http-token"
    token_file.write_text("s3cret-http-token\n")
    process, port = _start_http(server, ["--http-token-file", str(token_file)])
    try:
        host = {"Host": f"127.0.0.1:{port}"}
        assert _initialize(port, host) == 401
        assert _initialize(port, {**host, "Authorization": "Bearer wrong"}) == 401
        assert _initialize(port, {**host, "Authorization": "s3cret-http-token"}) == 401
        right = {**host, "Authorization": "Bearer s3cret-http-token"}
        assert _initialize(port, right) == 200
        # DNS rebinding: a page on evil.example resolving to us sends its own Host.
        assert _initialize(port, {**right, "Host": f"evil.example:{port}"}) != 200
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_http_beyond_loopback_without_a_token_is_refused_at_start(server: ServerProcess) -> None:
    done = subprocess.run(
        [_console_script(), "--addr", server.addr, "--http", f"0.0.0.0:{_free_port()}"],
        capture_output=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "CTXSTORE_MCP_HTTP_TOKEN"},
    )
    assert done.returncode == 2, done.stderr
    assert b"without --http-token-file" in done.stderr


async def test_read_turns_returns_a_bounded_answer_and_where_to_read_on(
    server: ServerProcess,
) -> None:
    from ctxstore.mcp_server import READ_TURNS_PAYLOAD_BYTES_MAX

    name = f"mcp-big-{uuid.uuid4().hex[:8]}"
    chunk = READ_TURNS_PAYLOAD_BYTES_MAX // 3 + 1  # three turns never fit in one answer
    async with Client(build_server(server.addr)) as mcp:
        ids = []
        for i in range(5):
            written = await _call(mcp, "append_turn", context=name, text=str(i) * chunk)
            ids.append(written["turn_id"])
        last = await _call(mcp, "read_turns", context=name, limit=5)
        assert last["truncated"] is True
        assert [t["turn_id"] for t in last["turns"]] == ids[3:]  # the newest, in order
        assert last["next_before"] == ids[3]
        older = await _call(mcp, "read_turns", context=name, limit=5, before=last["next_before"])
        assert [t["turn_id"] for t in older["turns"]] == ids[1:3]
        forward = await _call(mcp, "read_turns", context=name, limit=5, from_depth=0)
        assert [t["turn_id"] for t in forward["turns"]] == ids[:2]
        assert forward["truncated"] is True and forward["next_from_depth"] == 2
        # One turn alone over the budget: its metadata, not its payload.
        huge = await _call(
            mcp, "append_turn", context=name, text="x" * (READ_TURNS_PAYLOAD_BYTES_MAX + 1)
        )
        alone = await _call(mcp, "read_turns", context=name, limit=3)
        assert [t["turn_id"] for t in alone["turns"]] == [huge["turn_id"]]
        assert "text" not in alone["turns"][0] and "payload_omitted" in alone["turns"][0]
        assert alone["next_before"] == huge["turn_id"]
