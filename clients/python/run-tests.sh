#!/usr/bin/env bash
# Tests of the Python client: installs it with its test extras into a venv, runs `ruff`
# (lint and format check), `mypy --strict` on the package and `pytest -q` against a real
# ctxstore-server.
#
#   clients/python/run-tests.sh [VENV_DIR]
#
# VENV_DIR: the venv to create or reuse (default: $PYVENV, else a temporary directory that is
# removed afterwards). The server binary: $CTXSTORE_SERVER_BIN, else target/debug, else
# target/release of this repository (the tests fail, loudly, if there is none).
# Exits non-zero on any failure. PYTHON picks the interpreter (default python3, >= 3.10).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="${1:-${PYVENV:-}}"
cleanup=""
if [[ -z "$venv" ]]; then
    venv="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-pyvenv.XXXXXX")"
    cleanup="$venv"
fi
trap '[[ -n "$cleanup" ]] && rm -rf "$cleanup"' EXIT

"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is needed")'
if [[ ! -x "$venv/bin/python" ]]; then
    echo "== creating venv $venv"
    "$python" -m venv "$venv"
fi
echo "== installing ctxstore[test] into $venv (versions pinned by constraints.txt; lock.sh)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$here/constraints.txt" "$here[test]"
# A reused venv may hold an older (or editable) ctxstore: install this tree's for certain.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --force-reinstall "$here"

# Run from a scratch directory so that `import ctxstore` is the installed package, not the
# source tree, and no caches land in the repository.
workdir="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-pytest.XXXXXX")"
trap '[[ -n "$cleanup" ]] && rm -rf "$cleanup"; rm -rf "$workdir"' EXIT
export PYTHONDONTWRITEBYTECODE=1

echo "== ruff check, ruff format --check"
(cd "$here" && "$venv/bin/python" -m ruff check --no-cache ctxstore tests check_readme_examples.py \
    && "$venv/bin/python" -m ruff format --check --no-cache ctxstore tests check_readme_examples.py)

echo "== mypy --strict ctxstore"
(cd "$here" && "$venv/bin/python" -m mypy --strict --python-version 3.10 \
    --cache-dir "$workdir/.mypy_cache" ctxstore)

if [[ -n "${CTXSTORE_SERVER_BIN:-}" ]]; then
    export CTXSTORE_SERVER_BIN
    echo "== server binary: $CTXSTORE_SERVER_BIN"
fi

echo "== pytest"
(cd "$workdir" && "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    -c "$here/pyproject.toml" --rootdir "$here" "$here/tests")
