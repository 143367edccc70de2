#!/usr/bin/env bash
# Installs the package with each of its extras into a fresh venv of its own (from PyPI) and
# imports, there, everything the README's examples for that extra and the extra's module
# import: what a user gets right after `pip install 'ctxstore[EXTRA]'` (issue 29). Needs the
# network; CI's tests/test_extras.py checks the same from installed metadata, offline.
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
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
    # The imports of the README blocks that import ctxstore.<extra> (for the base install:
    # those importing no extra's module) and of the extra's modules, executed one by one.
    if ! "$venv/bin/python" - "$here" "$extra" <<'EOF'
import ast, importlib, pathlib, re, sys
here, extra = pathlib.Path(sys.argv[1]), sys.argv[2].replace("-", "_")
text = (here / "README.md").read_text()
extras = {p.stem for p in (here / "ctxstore").glob("*.py")}
sources = []
for block in re.findall(r"```python\n(.*?)```", text, re.S):
    modules = {n.module for n in ast.walk(ast.parse(block)) if isinstance(n, ast.ImportFrom)}
    owner = next((m.split(".")[1] for m in modules if m and m.startswith("ctxstore.")), "")
    if owner == extra or (not extra and owner not in extras):
        sources.append(block)
if extra:  # the extra's modules: ctxstore/<extra>.py, ctxstore/<extra>_*.py
    for module in sorted((here / "ctxstore").glob(f"{extra}*.py")):
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
sys.exit(1 if failed else 0)
EOF
    then
        status=1
    fi
done
exit "$status"
