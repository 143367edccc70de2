#!/usr/bin/env bash
# Installs the package with each of its extras into a fresh venv of its own (from PyPI) and
# imports, there, everything the README's examples for that extra and the extra's module
# import: what a user gets right after `pip install 'ctxstore[EXTRA]'` (issue 29), and builds
# each Pydantic AI agent an example names by model string up to where it needs an API key
# (issue 44). Versions pinned by constraints.txt. Needs the network; .ci/run runs it, and
# tests/test_extras.py checks the same from installed metadata, offline.
#
#   clients/python/check-extras.sh [EXTRA ...]      (default: the base install and every extra)
#
# Exits non-zero when an install fails or an import is missing. PYTHON picks the interpreter.
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
done
exit "$status"
