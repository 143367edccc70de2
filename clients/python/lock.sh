#!/usr/bin/env bash
# Writes constraints.txt: the exact versions of everything `pip install '.[test]'` brings in,
# resolved now in a fresh venv from PyPI. run-tests.sh installs under these constraints, so a
# CI run on a clean machine tests the versions the last lock tested, not whatever PyPI has
# that day. Run it after changing the dependencies or extras in pyproject.toml (and commit
# constraints.txt); a dependency the constraints do not list is installed unpinned.
#
#   clients/python/lock.sh          (needs the network; PYTHON picks the interpreter)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-lock.XXXXXX")"
trap 'rm -rf "$venv"' EXIT

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"
{
    echo "# Written by clients/python/lock.sh on $(date -u +%Y-%m-%d) with $("$venv/bin/python" --version):"
    echo "# the versions run-tests.sh installs (pip install -c). Regenerate, do not edit."
    "$venv/bin/python" -m pip freeze --disable-pip-version-check --exclude-editable \
        | grep -v -i '^ctxstore[ =@]' | LC_ALL=C sort -f
} > "$here/constraints.txt"
echo "wrote $here/constraints.txt ($(grep -vc '^#' "$here/constraints.txt") packages)"
