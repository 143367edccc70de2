#!/usr/bin/env bash
# Tests of the TypeScript client: installs the locked dependencies (npm ci), type-checks
# (tsc, strict), lints (eslint), builds dist/ (npm run build), installs the package the way the
# README shows into a scratch project and imports it, then runs the tests (vitest)
# against a real ctxstore-server: the codec against the golden vectors, the client (vector
# search included), the LangGraph.js checkpointer (LangGraph's own validation suite and a real
# graph) and store (LangGraph's PostgresStore cases, vector search), the Agents session, the AI
# SDK example, and the Python <-> TypeScript interop.
#
#   clients/typescript/run-tests.sh [PYVENV_DIR]
#
# The server binary: $CTXSTORE_SERVER_BIN, else target/debug, else target/release of this
# repository (the tests fail, loudly, if there is none). The interop tests drive the
# repository's clients/python from a virtualenv: PYVENV_DIR (default: $PYVENV, else a
# temporary one, removed afterwards), where clients/python[test] is installed. PYTHON picks the
# interpreter for a new virtualenv (default python3, >= 3.10). Exits non-zero on any failure and
# ends with the line "N passed, M failed".
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

node -e 'const [major] = process.versions.node.split(".").map(Number); if (major < 20) { console.error(`Node.js >= 20 is needed, this is ${process.version}`); process.exit(1); }'

venv="${1:-${PYVENV:-}}"
cleanup=""
if [[ -z "$venv" ]]; then
    venv="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-ts-pyvenv.XXXXXX")"
    cleanup="$venv"
fi
results="$(mktemp "${TMPDIR:-/tmp}/ctxstore-ts-results.XXXXXX.json")"
trap '[[ -n "$cleanup" ]] && rm -rf "$cleanup"; rm -f "$results"' EXIT

echo "== npm ci"
npm ci --no-audit --no-fund --loglevel=error

echo "== tsc (strict), eslint"
npx --no-install tsc -p tsconfig.json --noEmit
npx --no-install eslint --max-warnings 0 .

echo "== npm run build"
npm run --silent build

echo "== the README's path install, into a scratch project, then imported"
# A copy of the sources as a fresh clone has them (no node_modules, no dist): npm runs the
# package's prepare script, which installs its build tools and builds dist/ (issue 44: without
# it the path install gave a client that could not be imported).
scratch="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-ts-install.XXXXXX")"
mkdir -p "$scratch/ctxstore" "$scratch/app"
tar --exclude=./node_modules --exclude=./dist -C "$here" -cf - . | tar -C "$scratch/ctxstore" -xf -
(cd "$scratch/app" \
  && npm init -y >/dev/null \
  && npm install --no-audit --no-fund --loglevel=error "$scratch/ctxstore" \
  && node --input-type=module -e '
    import { Client, Conflict } from "@ctxstore/client";
    import { CtxstoreSaver, CtxstoreStore } from "@ctxstore/client/langgraph";
    import { CtxstoreSession } from "@ctxstore/client/agents";
    for (const [name, value] of Object.entries({ Client, Conflict, CtxstoreSaver, CtxstoreStore, CtxstoreSession })) {
      if (typeof value !== "function") throw new Error(`@ctxstore/client: ${name} is ${typeof value}`);
    }
    console.log("imported @ctxstore/client and its langgraph and agents entry points");
  ')
rm -rf "$scratch"

echo "== Python for the interop tests: clients/python[test] in $venv"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is needed")'
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$repo/clients/python[test]"
# A reused venv may hold an older ctxstore: this tree's, for certain.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$repo/clients/python"
export CTXSTORE_PYTHON="$venv/bin/python"
export PYTHONDONTWRITEBYTECODE=1

if [[ -n "${CTXSTORE_SERVER_BIN:-}" ]]; then
    export CTXSTORE_SERVER_BIN
    echo "== server binary: $CTXSTORE_SERVER_BIN"
fi

echo "== vitest"
status=0
npx --no-install vitest run --reporter=default --reporter=json --outputFile="$results" || status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ""));
' "$results"
exit "$status"
