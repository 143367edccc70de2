"""Runs one extra's README examples as a user would right after `pip install 'ctxstore[EXTRA]'`
(issue 44): every ```python block of the extra's section, in order, against a real
ctxstore-server, with no model API key in the environment. An example passes when it runs to
its end, or stops with the error that says a model API key is missing (the point past which it
needs one, and which is as far as anyone can run it without an account). Anything else (an
import the extra lacks, an adapter error, a wrong address) fails. For `mcp`, whose examples are
shell commands, each `ctxstore-mcp` command of the README is started as written (its listen
address moved to a free loopback port) and an MCP client calls a tool through it.

    python check_readme_examples.py EXTRA HOST:PORT

Run by check-extras.sh with the fresh venv's interpreter, from a scratch directory. A block that
imports nothing continues the block before it (the same namespace): the README's second
LangGraph block uses the first one's graph builder. Blocks with top-level `await` run in
asyncio.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
README_ADDR = "127.0.0.1:7411"
# What a missing model key says (OpenAI's client, Pydantic AI, Google's genai client).
MISSING_KEY = re.compile(r"api[ _-]?key|OPENAI_API_KEY|GOOGLE_API_KEY", re.I)
KEY_VARIABLES = ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY")


def extra_modules() -> set[str]:
    package = HERE / "ctxstore"
    names = {path.stem for path in package.glob("*.py")}
    return names | {path.name for path in package.iterdir() if (path / "__init__.py").exists()}


def blocks_of(extra: str) -> list[tuple[int, str]]:
    """The README's python blocks owned by `extra` ("" for the base install), with the line
    each starts at: the block imports `ctxstore.<extra>`, or imports nothing and follows one
    of the extra's blocks."""
    text = (HERE / "README.md").read_text()
    modules = extra_modules()
    owned: list[tuple[int, str]] = []
    owner = ""
    for match in re.finditer(r"```python\n(.*?)```", text, re.S):
        block = match.group(1)
        imports = [
            node
            for node in ast.walk(ast.parse(block))
            if isinstance(node, (ast.Import, ast.ImportFrom))
        ]
        if imports:
            names = {n.module for n in imports if isinstance(n, ast.ImportFrom) and n.module}
            owner = next((m.split(".")[1] for m in sorted(names) if m.startswith("ctxstore.")), "")
            if owner not in modules:
                owner = ""
        line = text.count("\n", 0, match.start(1)) + 1
        if owner == extra.replace("-", "_"):
            owned.append((line, block))
    return owned


def run_block(line: int, block: str, namespace: dict[str, Any], addr: str) -> str:
    """Runs one block in `namespace`: "ran", or "needs an API key" when it stopped there."""
    source = "\n" * (line - 1) + block.replace(README_ADDR, addr)
    code = compile(source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    try:
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, namespace))
        else:
            exec(code, namespace)
    except Exception as error:  # an example's failure, whatever it is, is reported
        if MISSING_KEY.search(f"{type(error).__name__}: {error}"):
            where = traceback.extract_tb(error.__traceback__)
            at = next((frame.lineno for frame in where if frame.filename == "README.md"), line)
            print(f"   stopped at README.md:{at}, where it needs an API key: {error}")
            return "needs an API key"
        traceback.print_exc()
        raise SystemExit(f"README.md:{line}: the example failed: {type(error).__name__}") from error
    return "ran"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def mcp_commands() -> list[list[str]]:
    """Every `ctxstore-mcp` command line of the README's sh blocks (continuations joined,
    comments dropped)."""
    text = (HERE / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "ctxstore-mcp":
                commands.append(words)
    return commands


async def call_a_tool(params: Any) -> None:
    from mcp import Client

    async with Client(params) as client:
        tools = await client.list_tools()
        names = {tool.name for tool in tools.tools}
        assert {"list_contexts", "append_turn", "read_turns"} <= names, names
        written = await client.call_tool(
            "append_turn", {"context": "readme-mcp", "text": "hello", "create": True}
        )
        assert not written.is_error, written


def http_status(url: str, headers: dict[str, str]) -> int:
    """The status of an MCP initialize POSTed to `url` with `headers`."""
    import urllib.error
    import urllib.request

    body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def run_mcp(addr: str) -> None:
    from mcp.client.stdio import StdioServerParameters

    script = str(Path(sys.executable).with_name("ctxstore-mcp"))
    # A command without --addr uses the default, the README's address: here, the server's.
    os.environ["CTXSTORE_ADDR"] = addr
    for words in mcp_commands():
        args = [word.replace(README_ADDR, addr) for word in words[1:]]
        for name in ("store.token", "mcp.token"):  # what the README's token example names
            Path(name).write_text(f"{name}-secret\n")
        if "--http" not in args:
            print("   $", shlex.join(words), "(stdio, through an MCP client)")
            asyncio.run(call_a_tool(StdioServerParameters(command=script, args=args)))
            continue
        # The README's listen address on a free loopback port (10.0.0.5 is no address here).
        at = args.index("--http") + 1
        port = free_port()
        args[at] = f"127.0.0.1:{port}"
        print("   $", shlex.join(words), f"(listening on {args[at]})")
        process = subprocess.Popen([script, *args], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        err = process.stderr.read().decode() if process.stderr else ""
                        raise SystemExit(f"ctxstore-mcp did not start: {err[-2000:]}") from None
                    time.sleep(0.1)
            url = f"http://127.0.0.1:{port}/mcp"
            if "--http-token-file" in args:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                token = Path(args[args.index("--http-token-file") + 1]).read_text().strip()
                for refused in ({}, {"Authorization": "Bearer wrong"}):
                    status = http_status(url, refused)
                    assert status == 401, f"{refused or 'no token'}: {status}, not 401"

                async def with_token(url: str, token: str) -> None:
                    headers = {"Authorization": f"Bearer {token}"}
                    async with httpx2.AsyncClient(headers=headers) as http:
                        await call_a_tool(streamable_http_client(url, http_client=http))

                asyncio.run(with_token(url, token))
            else:
                asyncio.run(call_a_tool(url))
        finally:
            process.terminate()
            process.wait(timeout=10)
    print("   ok: every ctxstore-mcp command of the README answered a tool call")


def main() -> None:
    extra, addr = sys.argv[1], sys.argv[2]
    for variable in KEY_VARIABLES:
        os.environ.pop(variable, None)
    if extra == "mcp":
        run_mcp(addr)
        return
    blocks = blocks_of(extra)
    if not blocks:
        raise SystemExit(f"the README has no python example for the extra {extra!r}")
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    for line, block in blocks:
        outcome = run_block(line, block, namespace, addr)
        print(f"   ok: README.md:{line} {outcome}")


if __name__ == "__main__":
    main()
