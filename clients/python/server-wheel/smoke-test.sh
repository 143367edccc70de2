#!/usr/bin/env bash
# Smoke test of a ctxstore-server wheel in a fresh venv: install it (and the Python client),
# start `ctxstore-server` from PATH on a temporary directory and a free port, then one
# append/read round trip through the `ctxstore` CLI and one through the Python client, each
# reading back what the other wrote.
#
#   clients/python/server-wheel/smoke-test.sh WHEEL
set -euo pipefail

wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-wheel-smoke.XXXXXX")"
server_pid=""
cleanup() {
    [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel" "$here/.."
# From PATH, as a user's shell would find them: nothing of the repository's target/ is used.
export PATH="$work/venv/bin:$PATH"
[[ "$(command -v ctxstore-server)" == "$work/venv/bin/ctxstore-server" ]]
[[ "$(command -v ctxstore)" == "$work/venv/bin/ctxstore" ]]
python -m ctxstore_server

ctxstore-server --data "$work/data" --listen 127.0.0.1:0 --ready-file "$work/ready" \
    --network-cores 1 --no-preallocate >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [[ -s "$work/ready" ]] && break; sleep 0.1; done
[[ -s "$work/ready" ]] || { cat "$work/server.log"; echo "the server did not start" >&2; exit 1; }
addr="$(cat "$work/ready")"

context="$(ctxstore --addr "$addr" --json ctx create | python -c 'import json,sys; print(json.load(sys.stdin)["context_id"])')"
printf 'written by the CLI' | ctxstore --addr "$addr" --json append "$context" >/dev/null
python - "$addr" "$context" <<'PY'
import sys
import ctxstore

addr, context = sys.argv[1], int(sys.argv[2])
with ctxstore.Client(addr) as client:
    page = client.last(context, 10, payloads=True)
    assert [t.payload for t in page] == [b"written by the CLI"], page
    client.append(context, b"written by Python")
PY
last="$(ctxstore --addr "$addr" --json last "$context" -n 1 --payloads)"
python -c 'import base64,json,sys; t=json.loads(sys.argv[1]); assert base64.b64decode(t["payload_b64"]) == b"written by Python", t' "$last"
echo "wheel smoke test passed: $(basename "$wheel") (server $addr, context $context)"
