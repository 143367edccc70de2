#!/usr/bin/env bash
# LangGraph.js checkpointers side by side (benches/langgraph_js/bench.mjs): ctxstore's
# CtxstoreSaver vs PostgresSaver vs SqliteSaver on the same graph, and the TypeScript client's
# 64-turn read (raw vs zstd) beside PostgreSQL and SQLite, on this machine, in one run.
#
#   benches/langgraph_js_bench.sh                          # 3 runs of 200 supersteps
#   RUNS=5 SUPERSTEPS=200 READS=500 benches/langgraph_js_bench.sh --json=/tmp/lgjs.json
#
# Uses $CTXSTORE_SERVER_BIN (default target/release/ctxstore-server: build it with
# `cargo build --release -p ctxstore-server`), the ctxstore package built and packed from
# clients/typescript (npm ci, npm run build, npm pack) and installed into
# benches/langgraph_js/node_modules with the peers' savers (npm ci there: better-sqlite3 12
# compiles on Node 20), and a PostgreSQL 15 from Debian's packages (installed when missing;
# needs root) started on loopback in a temporary directory as benches/langgraph_bench.sh
# starts it: synchronous_commit=on, fsync=on. Extra arguments go to bench.mjs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SERVER_BIN=${CTXSTORE_SERVER_BIN:-$ROOT/target/release/ctxstore-server}
PGPORT=${PGPORT:-55434}
WORK=$(mktemp -d /var/tmp/ctxstore-lgjsbench.XXXXXX)
chmod 755 "$WORK"
STOP_PG=""
cleanup() {
  if [ -n "$STOP_PG" ]; then eval "$STOP_PG" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$SERVER_BIN" ] || { echo "no ctxstore-server at $SERVER_BIN (set CTXSTORE_SERVER_BIN)" >&2; exit 1; }

(cd "$ROOT/clients/typescript" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build \
  && npm pack --silent --pack-destination "$WORK" >/dev/null)
# npm ci compiles better-sqlite3 (minutes on this VM): only when the savers are not installed
# yet (BENCH_NPM_CI=1 forces it); the ctxstore package is installed fresh every time.
(cd "$ROOT/benches/langgraph_js" \
  && { [ -d node_modules/better-sqlite3/build/Release ] && [ -z "${BENCH_NPM_CI:-}" ] || npm ci --no-audit --no-fund --loglevel=error; } \
  && npm install --no-save --no-audit --no-fund --loglevel=error "$WORK"/ctxstore-*.tgz)

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

echo "server: $SERVER_BIN; load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
node "$ROOT/benches/langgraph_js/bench.mjs" \
  --server-bin="$SERVER_BIN" --pg-dsn="postgresql://bench@127.0.0.1:$PGPORT/postgres" \
  --dir="$WORK/run" --runs="${RUNS:-3}" --supersteps="${SUPERSTEPS:-200}" --reads="${READS:-300}" "$@"
