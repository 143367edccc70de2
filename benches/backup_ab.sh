#!/usr/bin/env bash
# Online backup under load (issue 18 item 5): how long a backup of a store of STORE_GB takes,
# and what it does to the appends that go on meanwhile. One server, one store; pairs of
# identical open-loop append runs, one with `ctxstore backup` started BACKUP_AT into it and one
# without, alternating which goes first.
#
#   benches/backup_ab.sh                      # ~2 GB store, 3 pairs (~4 min)
#   PAIRS=5 STORE_GB=4 benches/backup_ab.sh
#
# BACKUP_RATE=32MiB sets the server's --backup-rate-max. Needs release binaries:
#   cargo build --release -p ctxstore-server -p ctxstore-loadgen -p ctxstore-client
# The backup goes to $OUT on the same file system, so sealed packs are hard-linked and the open
# pack (up to --pack-bytes-max, 1 GiB) is copied; COPY_ONLY=1 sets --pack-bytes-max 64GiB so
# nothing is sealed and every byte is copied (the worst case: a backup to another disk).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release}
PAIRS=${PAIRS:-3}
STORE_GB=${STORE_GB:-2}
RATE=${RATE:-500}
DURATION=${DURATION:-20}
BACKUP_AT=${BACKUP_AT:-5}
OUT=${OUT:-$(mktemp -d /tmp/ctxstore-backup-ab.XXXXXX)}
mkdir -p "$OUT"
DATA="$OUT/data"
PACK_ARGS=()
if [ "${COPY_ONLY:-0}" = 1 ]; then PACK_ARGS=(--pack-bytes-max 68719476736); fi
# The backup's copy rate (the server's --backup-rate-max; default off: full speed).
PACK_ARGS+=(--backup-rate-max "${BACKUP_RATE:-off}")

"$BIN/ctxstore-server" --data "$DATA" --listen 127.0.0.1:0 --ready-file "$OUT/ready" \
  "${PACK_ARGS[@]}" 2>"$OUT/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
while [ ! -s "$OUT/ready" ]; do sleep 0.1; done
ADDR=$(head -n 1 "$OUT/ready")

# The store: 1 MiB incompressible turns (and 32 KiB text ones) until it holds STORE_GB.
while [ "$(du -sb "$DATA" | cut -f1)" -lt $((STORE_GB * 1024 * 1024 * 1024)) ]; do
  "$BIN/ctxstore-loadgen" --addr "$ADDR" --closed-loop --connections 8 --contexts 64 \
    --mix append=100 --payload-bytes 32768 --large-every 2 --duration 10s --warmup 0s \
    --quiet >/dev/null 2>&1
done
echo "store: $(du -sh "$DATA" | cut -f1) in $DATA"

run() { # name with|without
  local name=$1 mode=$2
  "$BIN/ctxstore-loadgen" --addr "$ADDR" --rate "$RATE" --connections 32 --contexts 32 \
    --mix append=100 --payload-bytes 4096 --duration "${DURATION}s" --warmup 0s \
    --json "$OUT/$name-$mode.json" --quiet >/dev/null 2>&1 &
  local loadgen=$!
  local backup_ms=-
  if [ "$mode" = with ]; then
    sleep "$BACKUP_AT"
    "$BIN/ctxstore" --addr "$ADDR" --json backup --to "$OUT/copy" >"$OUT/$name-backup.json"
    backup_ms=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["duration_ms"], r["bytes"], r["linked_bytes"])' "$OUT/$name-backup.json")
  fi
  wait $loadgen
  # Deleting gigabytes is journal work that stalls fdatasyncs too: never inside a run.
  rm -rf "$OUT/copy"
  sync
  sleep 2
  python3 - "$OUT/$name-$mode.json" "$name" "$mode" "$backup_ms" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
figures = report["operations"]["append"]
lat = figures["latency_us"]
print(f"{sys.argv[2]:<4} {sys.argv[3]:<7} {figures['throughput_per_s']:>6.0f}/s "
      f"p50 {lat['p50']:>6} us  p99 {lat['p99']:>6} us  p99.9 {lat['p999']:>6} us  "
      f"errors {figures['errors']}  backup(ms bytes linked) {' '.join(sys.argv[4:])}")
EOF
}

for RUN in $(seq 1 "$PAIRS"); do
  if [ $((RUN % 2)) -eq 1 ]; then order="without with"; else order="with without"; fi
  for mode in $order; do run "r$RUN" "$mode"; done
done | tee "$OUT/runs.txt"

python3 - "$OUT/runs.txt" <<'EOF'
import statistics, sys, collections
runs = collections.defaultdict(list)
backups = []
for line in open(sys.argv[1]):
    parts = line.split()
    runs[parts[1]].append((float(parts[4]), float(parts[7])))
    if parts[1] == "with":
        backups.append(float(parts[-3]))
print(f"\nmedians over {len(runs['with'])} pairs:")
for mode in ("without", "with"):
    p50 = statistics.median(r[0] for r in runs[mode])
    p99 = statistics.median(r[1] for r in runs[mode])
    print(f"{mode:<7} append p50 {p50:>6.0f} us  p99 {p99:>6.0f} us")
print(f"backup duration median {statistics.median(backups):.0f} ms")
EOF
echo "reports: $OUT"
