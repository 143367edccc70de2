#!/usr/bin/env bash
# Google ADK session services side by side (benches/adk_bench.py): CtxstoreSessionService vs
# ADK's DatabaseSessionService on PostgreSQL 15 and on SQLite, in one run, on this machine.
#
#   benches/adk_bench.sh                                  # prints the table
#   APPENDS=2000 SESSIONS=2000 benches/adk_bench.sh --json /tmp/adk.json   # shorter
#
# Uses $CTXSTORE_SERVER_BIN (default target/release/ctxstore-server), a venv in $PYVENV
# (default /var/tmp/ctxstore-adkbench-venv) with the Python client's adk extra and ADK's
# database dependencies, and a PostgreSQL from Debian's packages (installed when missing;
# needs root) started on loopback in a temporary directory as benches/peers.sh starts it:
# synchronous_commit=on, fsync=on. Extra arguments go to adk_bench.py.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SERVER_BIN=${CTXSTORE_SERVER_BIN:-$ROOT/target/release/ctxstore-server}
VENV=${PYVENV:-/var/tmp/ctxstore-adkbench-venv}
PGPORT=${PGPORT:-55434}
WORK=$(mktemp -d /var/tmp/ctxstore-adkbench.XXXXXX)
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
  "$ROOT/clients/python[adk]" "sqlalchemy[asyncio]>=2,<3" asyncpg aiosqlite

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
"$VENV/bin/python" "$ROOT/benches/adk_bench.py" \
  --server-bin "$SERVER_BIN" \
  --pg-url "postgresql+asyncpg://bench@127.0.0.1:$PGPORT/postgres" \
  --appends "${APPENDS:-10000}" --sessions "${SESSIONS:-10000}" --dir "$WORK" "$@"
