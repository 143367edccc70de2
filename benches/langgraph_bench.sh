#!/usr/bin/env bash
# LangGraph checkpointers side by side (benches/langgraph_bench.py): ctxstore vs SqliteSaver vs
# PostgresSaver, the same 200-superstep agent loop, on this machine.
#
#   benches/langgraph_bench.sh                       # 3 runs per backend, prints the table
#   RUNS=5 SUPERSTEPS=200 benches/langgraph_bench.sh --json /tmp/lg.json
#
# Uses $CTXSTORE_SERVER_BIN (default target/release/ctxstore-server: build it with
# `cargo build --release -p ctxstore-server`), a venv in $PYVENV (default
# /var/tmp/ctxstore-lgbench-venv) with the Python client and the LangGraph savers, and a
# PostgreSQL from Debian's packages (installed when missing; needs root), started on loopback
# in a temporary directory as benches/peers.sh starts it: synchronous_commit=on, fsync=on.
# Extra arguments go to langgraph_bench.py.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SERVER_BIN=${CTXSTORE_SERVER_BIN:-$ROOT/target/release/ctxstore-server}
VENV=${PYVENV:-/var/tmp/ctxstore-lgbench-venv}
PGPORT=${PGPORT:-55433}
WORK=$(mktemp -d /var/tmp/ctxstore-lgbench.XXXXXX)
chmod 755 "$WORK"
STOP_PG=""
cleanup() {
  if [ -n "$STOP_PG" ]; then eval "$STOP_PG" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$SERVER_BIN" ] || { echo "no ctxstore-server at $SERVER_BIN (set CTXSTORE_SERVER_BIN)" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "$ROOT/clients/python[langgraph]" langgraph langgraph-checkpoint-sqlite \
  langgraph-checkpoint-postgres 'psycopg[binary]'

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
(service postgresql stop || true) >/dev/null 2>&1
PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)")
mkdir -p "$WORK/pg"; chown postgres "$WORK/pg"
runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/pg/data" -A trust -U bench >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w start -o \
  "-c listen_addresses=127.0.0.1 -c port=$PGPORT -c unix_socket_directories=$WORK/pg \
   -c synchronous_commit=on -c fsync=on -c full_page_writes=on -c shared_buffers=512MB" >/dev/null
STOP_PG="runuser -u postgres -- $PGBIN/pg_ctl -D $WORK/pg/data -m fast stop"

echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$VENV/bin/python" "$ROOT/benches/langgraph_bench.py" \
  --server-bin "$SERVER_BIN" --server-arg=--no-preallocate \
  --pg-dsn "postgresql://bench@127.0.0.1:$PGPORT/postgres" \
  --runs "${RUNS:-3}" --supersteps "${SUPERSTEPS:-200}" --dir "$WORK" "$@"
