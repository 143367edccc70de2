#!/usr/bin/env bash
# Installs the package with each of its extras into a fresh venv of its own (from PyPI), the
# way the README shows (`pip install 'ctxstore[EXTRA]'`), and there:
#  - imports everything the README's examples for that extra and the extra's modules import
#    (issue 29), and builds each Pydantic AI agent an example names by model string;
#  - runs the extra's README examples against a real ctxstore-server, with no model API key
#    in the environment: each must run to its end or stop exactly where it needs a key
#    (check_readme_examples.py; `mcp`: each `ctxstore-mcp` command answers a tool call)
#    (issue 44).
# Versions pinned by constraints.txt. Needs the network; .ci/run runs it, and
# tests/test_extras.py checks the same from installed metadata, offline.
#
#   clients/python/check-extras.sh [EXTRA ...]      (default: the base install and every extra)
#
# Exits non-zero when an install fails, an import is missing or an example fails. PYTHON picks
# the interpreter; the server binary: $CTXSTORE_SERVER_BIN, else target/debug, else
# target/release.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-extras.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ $# -gt 0 ]]; then
    extras=("$@")
else
    # "" is the base install; then every extra pyproject.toml declares, but test.
    mapfile -t declared < <("$python" - "$here/pyproject.toml" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
for name in re.findall(r"^([A-Za-z0-9_.-]+)\s*=", section, re.M):
    if name != "test":
        print(name)
EOF
)
    extras=("" "${declared[@]}")
fi

server_bin="${CTXSTORE_SERVER_BIN:-}"
if [[ -z "$server_bin" ]]; then
    for candidate in "$here/../../target/debug/ctxstore-server" "$here/../../target/release/ctxstore-server"; do
        if [[ -x "$candidate" ]]; then server_bin="$candidate"; break; fi
    done
fi
if [[ -z "$server_bin" || ! -x "$server_bin" ]]; then
    echo "check-extras.sh: no ctxstore-server binary (set CTXSTORE_SERVER_BIN or cargo build -p ctxstore-server)" >&2
    exit 2
fi
mkdir -p "$work/data"
"$server_bin" --data "$work/data" --listen 127.0.0.1:0 --ready-file "$work/ready" \
    --network-cores 1 --no-preallocate >"$work/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 200); do
    [[ -s "$work/ready" ]] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 2; }
    sleep 0.1
done
addr="$(cat "$work/ready")"
echo "== the examples' server: $server_bin at $addr"

status=0
for extra in "${extras[@]}"; do
    spec="$here${extra:+[$extra]}"
    venv="$work/venv-${extra:-base}"
    echo "== pip install 'ctxstore${extra:+[$extra]}' into a fresh venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$here/constraints.txt" "$spec"
    # The imports of the README blocks that import ctxstore.<extra> (for the base install:
    # those importing no extra's module) and of the extra's modules, executed one by one.
    if ! "$venv/bin/python" - "$here" "$extra" <<'EOF'
import ast, importlib, pathlib, re, sys
here, extra = pathlib.Path(sys.argv[1]), sys.argv[2].replace("-", "_")
text = (here / "README.md").read_text()
extras = {p.stem for p in (here / "ctxstore").glob("*.py")}
extras |= {p.name for p in (here / "ctxstore").iterdir() if (p / "__init__.py").exists()}
sources = []
for block in re.findall(r"```python\n(.*?)```", text, re.S):
    modules = {n.module for n in ast.walk(ast.parse(block)) if isinstance(n, ast.ImportFrom)}
    owner = next((m.split(".")[1] for m in modules if m and m.startswith("ctxstore.")), "")
    if owner == extra or (not extra and owner not in extras):
        sources.append(block)
if extra:  # the extra's modules: ctxstore/<extra>.py, ctxstore/<extra>_*.py
    for module in sorted((here / "ctxstore").glob(f"{extra}*.py")):
        sources.append(module.read_text())
    for module in sorted((here / "ctxstore").glob(f"{extra}/*.py")):  # a package
        sources.append(module.read_text())
failed = 0
for source in sources:
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "level", 0) == 0:
            line = ast.unparse(node)
            try:
                exec(line, {})
                print("   ok:", line)
            except Exception as error:
                failed += 1
                print("   MISSING:", line, "->", type(error).__name__, error)
# A model an example names as "provider:model" (Pydantic AI's Agent("openai:gpt-4o")) is
# loaded at run time, not imported (issue 44): build each such agent, as the example does, up
# to where it would need a real API key (a placeholder key here; nothing is sent).
if extra == "pydantic_ai":
    import os
    os.environ.setdefault("OPENAI_API_KEY", "sk-placeholder-check-extras")
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "Agent" and node.args):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and ":" in first.value:
                try:
                    from pydantic_ai import Agent
                    Agent(first.value)
                    print("   ok: Agent(%r) builds" % first.value)
                except Exception as error:
                    failed += 1
                    print("   MISSING: Agent(%r) ->" % first.value, type(error).__name__, error)
sys.exit(1 if failed else 0)
EOF
    then
        status=1
    fi
    # The extra's README examples, run as written (the address replaced), from a scratch
    # directory, with no model API key. (The base install's blocks are a reference of calls,
    # fragments on one client, not programs; the Python tests cover those calls.)
    if [[ -n "$extra" ]]; then
        echo "   the README's examples of 'ctxstore[$extra]':"
        mkdir -p "$work/run-$extra"
        if ! (cd "$work/run-$extra" &&
              "$venv/bin/python" "$here/check_readme_examples.py" "$extra" "$addr"); then
            echo "   FAILED: the README's examples of 'ctxstore[$extra]'"
            status=1
        fi
    fi
done
exit "$status"
