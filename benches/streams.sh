#!/usr/bin/env bash
# Streaming turns (issue 32): ctxstore against Redis Streams with `appendfsync always` and with
# `everysec`, in one run, alternated, on the same workload: S streams × R deltas/s of 4–40
# bytes, sealed after 500 deltas and reopened, each followed by one reader.
#
#   benches/streams.sh                           # 3 rounds × 3 stores, 500 streams × 40/s, 20 s each
#   ROUNDS=1 DURATION=5s benches/streams.sh      # shorter
#   STREAMS=100 RATE=40 STORES="ctxstore redis-always" benches/streams.sh
#   BEFORE=/path/to/old/ctxstore-server benches/streams.sh   # + that server as "ctxstore-before"
#   READ=poll benches/streams.sh                 # ctxstore's readers long-poll (default push)
#   STORES="ctxstore ctxstore-poll" benches/streams.sh       # push and poll readers, alternated
#
# READ is how ctxstore's readers read (`ctxstore-loadgen --stream-read`, issue 32): push, one
# STREAM_FOLLOW per stream, the server pushing each acknowledged delta; or poll, one STREAM_READ
# long poll per delivery. The store "ctxstore-poll" is ctxstore with poll readers whatever READ
# says, so that one run compares them. Redis readers XREAD BLOCK either way.
#
# Each round runs every store once, in turn (ctxstore, redis-always, redis-everysec; the next
# round the same order), each alone on the machine, on a fresh store in a temporary directory:
# ctxstore with --spawn-server, Redis with `appendonly yes` and the round's `appendfsync`. The
# whole script runs under `nice -n 10` (so do the servers it starts: the machine is shared).
# Reports go to benches/results/streams-<timestamp>/ (or $OUT), the table of medians over the
# rounds to table.md there (benches/streams_table.py).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/benches/results/streams-$(date -u +%Y%m%d-%H%M%S)}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=${ROUNDS:-3}
STREAMS=${STREAMS:-500}
RATE=${RATE:-40}
DELTAS=${DELTAS:-500}
CONNECTIONS=${CONNECTIONS:-16}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-3s}
READ=${READ:-push}
# A ctxstore-server binary built from another commit (a copy: the build below replaces this
# tree's), run as the store "ctxstore-before" with the same load generator: a same-run
# before/after.
BEFORE=${BEFORE:-}
STORES=${STORES:-"${BEFORE:+ctxstore-before }ctxstore redis-always redis-everysec"}
mkdir -p "$OUT"
WORK=$(mktemp -d /var/tmp/ctxstore-streams.XXXXXX)
REDIS_PORT=""

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

stop_redis() {
  if [ -n "$REDIS_PORT" ]; then
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    REDIS_PORT=""
  fi
}

cleanup() { stop_redis; rm -rf "$WORK"; }
trap cleanup EXIT

describe_machine() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
    echo "kernel: $(uname -r)"
    echo "disk: $(df -T "$WORK" | awk 'NR==2 {print $1, $2}')"
    echo "redis: $(redis-server --version | awk '{print $3}')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (shared with other engineers' builds)"
    echo "workload: $STREAMS streams × $RATE deltas/s, sealed after $DELTAS, $CONNECTIONS connections, $DURATION after $WARMUP warm-up, ctxstore readers: $READ"
  } > "$OUT/machine.txt"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start_redis() { # appendfsync
  REDIS_PORT=$(free_port)
  rm -rf "$WORK/redis"; mkdir -p "$WORK/redis"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK/redis" --appendonly yes \
    --appendfsync "$1" --save '' --maxclients 10000 --daemonize yes \
    --pidfile "$WORK/redis/pid" --logfile "$WORK/redis/log" >/dev/null
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return; sleep 0.1; done
  log "redis-server did not answer on $REDIS_PORT; see $WORK/redis/log"; exit 1
}

run_store() { # store round
  local store=$1 round=$2 target=()
  case "$store" in
    ctxstore) target=(--spawn-server --server-bin "$TARGET/release/ctxstore-server" --stream-read "$READ") ;;
    ctxstore-poll) target=(--spawn-server --server-bin "$TARGET/release/ctxstore-server" --stream-read poll) ;;
    ctxstore-before)
      [ -x "$BEFORE" ] || { log "ctxstore-before: set BEFORE to a ctxstore-server binary"; exit 1; }
      # A server older than STREAM_FOLLOW (issue 32) needs READ=poll.
      target=(--spawn-server --server-bin "$BEFORE" --stream-read "$READ") ;;
    redis-always) start_redis always; target=(--backend redis --peer "redis://127.0.0.1:$REDIS_PORT") ;;
    redis-everysec) start_redis everysec; target=(--backend redis --peer "redis://127.0.0.1:$REDIS_PORT") ;;
    *) log "unknown store $store (ctxstore, ctxstore-poll, ctxstore-before, redis-always, redis-everysec)"; exit 1 ;;
  esac
  log "round $round: $store (load average $(cut -d' ' -f1 /proc/loadavg))"
  # A run that fails (a store that stops answering) is recorded and the others go on.
  if ! /usr/bin/time -f '%U %S' -o "$OUT/$store-$round.loadgen-cpu" \
    "$TARGET/release/ctxstore-loadgen" "${target[@]}" --workload streaming \
    --streams "$STREAMS" --stream-rate "$RATE" --stream-deltas "$DELTAS" \
    --connections "$CONNECTIONS" --duration "$DURATION" --warmup "$WARMUP" --quiet \
    --json "$OUT/$store-$round.json" > "$OUT/$store-$round.txt" 2> "$OUT/$store-$round.err"; then
    log "round $round: $store FAILED: $(grep -v WARN "$OUT/$store-$round.err" | tail -1)"
    grep -v WARN "$OUT/$store-$round.err" | tail -1 > "$OUT/$store-$round.failed"
  fi
  stop_redis
}

main() {
  if [ "${NICED:-}" != 1 ]; then
    NICED=1 exec nice -n 10 "$0" "$@"
  fi
  log "building release binaries"
  (cd "$ROOT" && cargo build --release -q -p ctxstore-server -p ctxstore-loadgen)
  command -v redis-server >/dev/null || { log "redis-server is missing (apt-get install redis-server)"; exit 1; }
  describe_machine
  for round in $(seq "$ROUNDS"); do
    for store in $STORES; do run_store "$store" "$round"; done
  done
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
  python3 "$ROOT/benches/streams_table.py" "$OUT" | tee "$OUT/table.md"
  log "reports and table in $OUT"
}

main "$@"
