#!/usr/bin/env bash
# Growing agent state (issue 16: sub-blob dedup): every step appends the previous JSON state
# plus one ~1 KiB chat message, as agent frameworks checkpoint their whole state, so N steps
# write O(N²) bytes. What does that cost on disk and on the wire? ctxstore with chunking on
# and off, PostgreSQL and SQLite, the same states, on this machine, in one run.
#
#   benches/growing.sh                              # 3 runs per row, 4 contexts × 300 steps
#   RUNS=5 CONTEXTS=1 STEPS=300 MESSAGE_BYTES=1024 benches/growing.sh
#   BACKENDS="ctxstore sqlite" benches/growing.sh   # rows: ctxstore postgres sqlite
#
# Each row runs `ctxstore-loadgen --workload growing` (CONTEXTS agents at once, one connection
# each, STEPS appends per context) on a fresh store; runs are interleaved row by row; the table
# gives the median of RUNS for every figure. Rows:
#
# - ctxstore, chunking on: a spawned ctxstore-server with its defaults but --no-preallocate
#   (prepared zeros, ~1.3 MB per store whatever it holds, would swamp a 300 KB state), the
#   load generator's client with its defaults. On a build without chunking this is the
#   "before" row, and the table says so.
# - ctxstore, chunking off: the client's chunking off (--no-client-chunking) and the server's
#   (--chunk-threshold 0); run only when `ctxstore-server --help` lists --chunk-threshold.
# - PostgreSQL (Debian's package, installed when missing; needs root), started on loopback in
#   a temporary directory as benches/peers.sh starts it: synchronous_commit=on, fsync=on; a
#   fresh database per run, CHECKPOINT after each so its writes do not spill into the next
#   row. Disk: pg_total_relation_size of the tables (TOAST, indexes); the WAL is not counted.
# - SQLite in the load generator's process: WAL, synchronous=FULL; disk: the file and its WAL.
#
# Bytes sent per append: the client's wire counter where it has one, else the payload bytes
# handed to the backend (marked "payload"; every peer row is). Reports go to $OUT (default
# benches/results/growing-<timestamp>/), the table to stdout and $OUT/table.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOADGEN=$TARGET/release/ctxstore-loadgen
SERVER=$TARGET/release/ctxstore-server
RUNS=${RUNS:-3}
CONTEXTS=${CONTEXTS:-4}
STEPS=${STEPS:-300}
MESSAGE_BYTES=${MESSAGE_BYTES:-1024}
BACKENDS=${BACKENDS:-"ctxstore postgres sqlite"}
PGPORT=${PGPORT:-55434}
OUT=${OUT:-$ROOT/benches/results/growing-$(date -u +%Y%m%d-%H%M%S)}
COMMAND="RUNS=$RUNS CONTEXTS=$CONTEXTS STEPS=$STEPS MESSAGE_BYTES=$MESSAGE_BYTES BACKENDS=\"$BACKENDS\" benches/growing.sh"
mkdir -p "$OUT"
WORK=$(mktemp -d /var/tmp/ctxstore-growing.XXXXXX)
chmod 755 "$WORK"
STOP_PG=""

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

cleanup() {
  if [ -n "$STOP_PG" ]; then eval "$STOP_PG" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

start_postgres() {
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing postgresql from Debian's packages"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  # The Debian package starts its own instance; ours runs in $WORK on its own port.
  (service postgresql stop || true) >/dev/null 2>&1
  PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)")
  mkdir -p "$WORK/pg"; chown postgres "$WORK/pg"
  runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/pg/data" -A trust -U bench >/dev/null
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w start -o \
    "-c listen_addresses=127.0.0.1 -c port=$PGPORT -c unix_socket_directories=$WORK/pg \
     -c synchronous_commit=on -c fsync=on -c full_page_writes=on -c shared_buffers=512MB" >/dev/null
  STOP_PG="runuser -u postgres -- $PGBIN/pg_ctl -D $WORK/pg/data -m fast stop"
}

psql_bench() { PGOPTIONS=--client-min-messages=warning runuser -u postgres -- "$PGBIN/psql" -q -h 127.0.0.1 -p "$PGPORT" -U bench -d postgres "$@" >/dev/null; }

run_row() { # row run
  local row=$1 run=$2 target=()
  case "$row" in
    ctxstore-on)
      target=(--spawn-server --server-bin "$SERVER" --server-arg=--no-preallocate) ;;
    ctxstore-off)
      target=(--spawn-server --server-bin "$SERVER" --server-arg=--no-preallocate
              --server-arg=--chunk-threshold=0 --no-client-chunking) ;;
    postgres)
      psql_bench -c "DROP DATABASE IF EXISTS growing" -c "CREATE DATABASE growing"
      target=(--backend postgres --peer "postgres://bench@127.0.0.1:$PGPORT/growing") ;;
    sqlite)
      rm -f "$WORK/growing.sqlite"*
      target=(--backend sqlite --peer "$WORK/growing.sqlite") ;;
  esac
  log "$row run $run (load $(cut -d' ' -f1 /proc/loadavg))"
  # TMPDIR: the spawned server's data directory lands on the same disk as the peers' files.
  TMPDIR=$WORK "$LOADGEN" "${target[@]}" --workload growing --contexts "$CONTEXTS" \
    --connections "$CONTEXTS" --growing-steps "$STEPS" --growing-message-bytes "$MESSAGE_BYTES" \
    --seed "$run" --quiet --slo 'append.errors<=0' --json "$OUT/$row-$run.json" \
    > "$OUT/$row-$run.txt"
  case "$row" in
    postgres) psql_bench -c CHECKPOINT ;;
    sqlite) rm -f "$WORK/growing.sqlite"* ;;
  esac
}

main() {
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    log "building release binaries"
    (cd "$ROOT" && cargo build --release -q -p ctxstore-server -p ctxstore-loadgen)
  fi
  local rows=() chunking=no
  if "$SERVER" --help | grep -q -- '--chunk-threshold'; then chunking=yes; fi
  for backend in $BACKENDS; do
    case "$backend" in
      ctxstore)
        rows+=(ctxstore-on)
        if [ "$chunking" = yes ]; then rows+=(ctxstore-off); fi ;;
      postgres) start_postgres; rows+=(postgres) ;;
      sqlite) rows+=(sqlite) ;;
      *) echo "unknown backend $backend (ctxstore, postgres, sqlite)" >&2; exit 2 ;;
    esac
  done
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "disk: $(df -T "$WORK" | awk 'NR==2 {print $1, $2}')"
    echo "server: $("$SERVER" --version 2>/dev/null || echo -), chunking flag: $chunking"
    echo "postgres: $([ -n "${PGBIN:-}" ] && "$PGBIN/postgres" --version || echo -)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$OUT/machine.txt"
  for run in $(seq "$RUNS"); do
    for row in "${rows[@]}"; do run_row "$row" "$run"; done
  done
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
  python3 - "$OUT" "$RUNS" "$chunking" "$COMMAND" "${rows[@]}" <<'PY' | tee "$OUT/table.md"
import json, statistics, sys
out, runs, chunking, command, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
labels = {
    "ctxstore-on": "ctxstore, chunking on" if chunking == "yes" else "ctxstore (this build: no chunking)",
    "ctxstore-off": "ctxstore, chunking off",
    "postgres": "PostgreSQL",
    "sqlite": "SQLite",
}
def median(reports, pick):
    values = [pick(r) for r in reports]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
def count(value):
    return "—" if value is None else f"{value:,.0f}"
def ms(micros):
    return "—" if micros is None else f"{micros / 1000:.2f} ms"
print(f"`{command}`\n")
with open(f"{out}/machine.txt") as machine:
    print("  \n".join(line.rstrip() for line in machine))
print()
print("| store | final state (B, mean) | logical appended (B) | disk allocated (B) | disk file sizes (B) "
      "| **disk ÷ final state** | sent per append (B) | append p50 | append p99 | appends/s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for row in rows:
    reports = [json.load(open(f"{out}/{row}-{run}.json")) for run in range(1, runs + 1)]
    g = lambda key: (lambda r: r["growing"].get(key))
    op = lambda key: (lambda r: r["operations"]["append"]["latency_us"][key])
    counted = sorted({r["growing"]["bytes_sent_counted"] for r in reports})
    ratio = median(reports, g("disk_per_final_state"))
    print(f"| {labels[row]} | {count(median(reports, g('final_state_bytes_mean')))} "
          f"| {count(median(reports, g('logical_bytes')))} "
          f"| {count(median(reports, g('disk_allocated_bytes')))} "
          f"| {count(median(reports, g('disk_file_bytes')))} "
          f"| **{'—' if ratio is None else f'{ratio:.2f}×'}** "
          f"| {count(median(reports, g('bytes_sent_per_append')))} ({'/'.join(counted)}) "
          f"| {ms(median(reports, op('p50')))} | {ms(median(reports, op('p99')))} "
          f"| {count(median(reports, lambda r: r['operations']['append']['throughput_per_s']))} |")
print(f"\nMedians of {runs} runs. Disk ÷ final state: bytes on disk (allocated where measured, "
      "else file sizes) ÷ the sum of the contexts' final states. PostgreSQL: its tables, WAL not "
      "counted. Sent per append: (wire) request bytes the client wrote; (payload) the states "
      "handed to the backend.")
PY
  log "reports and table in $OUT"
}

main "$@"
