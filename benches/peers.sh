#!/usr/bin/env bash
# ctxstore side by side with PostgreSQL, Redis and SQLite, on the same workload, in one run.
#
#   benches/peers.sh                 # full run (~10 min): every backend, every scenario, 10 s each
#   DURATION=3s benches/peers.sh     # shorter
#   BACKENDS="ctxstore redis" benches/peers.sh
#   ONLY="append_1 mixed_at" benches/peers.sh   # scenarios whose name starts with one of these
#   CTXSTORE_ARGS=--no-client-compression benches/peers.sh   # extra loadgen flags, ctxstore only
#
# Installs the peers from Debian's packages when missing (needs root), starts each on loopback
# in a temporary directory with durable settings (PostgreSQL synchronous_commit=on; Redis
# appendonly yes, appendfsync always; SQLite WAL, synchronous=FULL), runs the scenarios with
# ctxstore-loadgen against each backend alone on the machine, stops it, and prints one table
# with ctxstore/peer ratios (benches/compare.py). Reports, the table, a latency plot and the
# machine's description go to benches/results/<timestamp>/ (or $OUT).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/benches/results/$(date -u +%Y%m%d-%H%M%S)}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
BACKENDS=${BACKENDS:-"ctxstore postgres redis sqlite"}
mkdir -p "$OUT"
WORK=$(mktemp -d /var/tmp/ctxstore-peers.XXXXXX)
chmod 755 "$WORK"
PIDS=()

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

cleanup() {
  for stop in "${PIDS[@]:-}"; do [ -n "$stop" ] && eval "$stop" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

install_peers() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from Debian's packages"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # The Debian package starts its own instances; ours run in $WORK on other ports.
  (service redis-server stop || true; service postgresql stop || true) >/dev/null 2>&1
}

describe_machine() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
    echo "kernel: $(uname -r)"
    echo "disk: $(df -T "$WORK" | awk 'NR==2 {print $1, $2}')"
    echo "postgres: $("$PGBIN/postgres" --version 2>/dev/null || echo -)"
    echo "redis: $(redis-server --version 2>/dev/null | awk '{print $3}' || echo -)"
    echo "sqlite: bundled with rusqlite ($(cargo tree -p ctxstore-loadgen -i libsqlite3-sys 2>/dev/null | head -1 | awk '{print $2}'))"
  } > "$OUT/machine.txt"
}

# The fdatasync floor, measured on the same disk: 4 KiB appended, then fdatasync.
fdatasync_floor() {
  python3 - "$WORK" > "$OUT/fdatasync-floor.json" <<'PY'
import json, os, sys, time
path = os.path.join(sys.argv[1], "floor.bin")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
block, samples = b"x" * 4096, []
for _ in range(2000):
    start = time.perf_counter()
    os.write(fd, block)
    os.fdatasync(fd)
    samples.append((time.perf_counter() - start) * 1e6)
os.close(fd); os.remove(path); samples.sort()
pick = lambda q: round(samples[min(len(samples) - 1, int(q * len(samples)))])
print(json.dumps({"p50_us": pick(0.5), "p99_us": pick(0.99), "p999_us": pick(0.999)}))
PY
}

start_postgres() {
  PGPORT=55432
  mkdir -p "$WORK/pg"; chown postgres "$WORK/pg"
  runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/pg/data" -A trust -U bench >/dev/null
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w start -o \
    "-c listen_addresses=127.0.0.1 -c port=$PGPORT -c unix_socket_directories=$WORK/pg \
     -c synchronous_commit=on -c fsync=on -c full_page_writes=on -c shared_buffers=512MB \
     -c max_connections=200" >/dev/null
  PIDS+=("runuser -u postgres -- $PGBIN/pg_ctl -D $WORK/pg/data -m fast stop")
}

stop_postgres() { runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pg/data" -m fast stop >/dev/null; }

start_redis() {
  REDISPORT=56379
  mkdir -p "$WORK/redis"
  redis-server --port "$REDISPORT" --bind 127.0.0.1 --dir "$WORK/redis" --appendonly yes \
    --appendfsync always --save '' --daemonize yes --pidfile "$WORK/redis/pid" \
    --logfile "$WORK/redis/log" >/dev/null
  for _ in $(seq 100); do redis-cli -p "$REDISPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  PIDS+=("redis-cli -p $REDISPORT shutdown nosave")
}

stop_redis() { redis-cli -p "$REDISPORT" shutdown nosave >/dev/null 2>&1 || true; sleep 0.5; }

# A fresh store per scenario, so that each starts empty.
peer_for() { # backend scenario
  case "$1" in
    postgres)
      runuser -u postgres -- psql -q -h 127.0.0.1 -p "$PGPORT" -U bench -d postgres \
        -c "DROP DATABASE IF EXISTS $2" -c "CREATE DATABASE $2" >/dev/null
      echo "postgres://bench@127.0.0.1:$PGPORT/$2" ;;
    redis)
      stop_redis; rm -rf "$WORK/redis"; start_redis
      echo "redis://127.0.0.1:$REDISPORT" ;;
    sqlite)
      rm -f "$WORK/$2.sqlite"*; echo "$WORK/$2.sqlite" ;;
  esac
}

# name | loadgen arguments. Every scenario: 10 KiB chat-like payloads unless stated.
SCENARIOS=(
  "append_1|--connections 1 --contexts 1 --mix append=100"
  "append_32|--connections 32 --contexts 32 --mix append=100"
  "append_32_at_2000|--connections 32 --contexts 32 --mix append=100 --rate 2000"
  "get_last_64|--connections 1 --contexts 4 --prefill 64 --read-turns 64 --mix get_last=100"
  "get_last_64_32|--connections 32 --contexts 32 --prefill 64 --read-turns 64 --mix get_last=100"
  "fork_1|--connections 1 --contexts 4 --prefill 4 --mix fork=100"
  "fork_32|--connections 32 --contexts 32 --prefill 4 --mix fork=100"
  "mixed_dedup|--connections 32 --contexts 64 --mix append=100 --dup-ratio 0.3 --large-every 100"
  # Agents as they behave (issue 19): they arrive at their own pace, mostly while the server
  # idles, and read their context before each model call. Open loop, latency from the
  # intended send time; compare with the fdatasync floor of the same run.
  "mixed_at_100|--connections 32 --contexts 32 --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 100"
  "mixed_at_500|--connections 32 --contexts 32 --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 500"
  "mixed_at_2000|--connections 32 --contexts 32 --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 2000"
)
ONLY=${ONLY:-}

selected() { # scenario name
  [ -z "$ONLY" ] && return 0
  local prefix
  for prefix in $ONLY; do
    case "$1" in "$prefix"*) return 0 ;; esac
  done
  return 1
}

run_scenario() { # backend scenario args...
  local backend=$1 scenario=$2; shift 2
  local target=()
  if [ "$backend" = ctxstore ]; then
    # shellcheck disable=SC2206
    target=(--spawn-server --server-bin "$ROOT/target/release/ctxstore-server" ${CTXSTORE_ARGS:-})
  else
    target=(--backend "$backend" --peer "$(peer_for "$backend" "$scenario")")
  fi
  log "$backend $scenario"
  "$ROOT/target/release/ctxstore-loadgen" "${target[@]}" "$@" --duration "$DURATION" \
    --warmup "$WARMUP" --quiet --json "$OUT/$backend-$scenario.json" > "$OUT/$backend-$scenario.txt"
}

main() {
  log "building release binaries"
  (cd "$ROOT" && cargo build --release -q -p ctxstore-server -p ctxstore-loadgen)
  install_peers
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  describe_machine
  fdatasync_floor
  for backend in $BACKENDS; do
    case "$backend" in postgres) start_postgres ;; redis) start_redis ;; esac
    for entry in "${SCENARIOS[@]}"; do
      selected "${entry%%|*}" || continue
      # shellcheck disable=SC2086
      run_scenario "$backend" "${entry%%|*}" ${entry#*|}
    done
    case "$backend" in postgres) stop_postgres ;; redis) stop_redis ;; esac
  done
  python3 "$ROOT/benches/compare.py" "$OUT" | tee "$OUT/table.md"
  log "reports, table and plot in $OUT"
}

main "$@"
