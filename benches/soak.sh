#!/usr/bin/env bash
# Soak: a long load run recording the server's RSS and open file descriptors every second.
#   benches/soak.sh [DURATION] [RATE]       # defaults: 10m at 3000 operations/s
#   DUP_RATIO=1 LARGE_EVERY=0 benches/soak.sh   # payloads from a fixed set: no new blobs
# Writes $OUT/soak.csv (seconds, rss_kib, fds) and prints a summary. Memory that grows with
# the data (the blob index, about one entry per distinct blob) shows as RSS per blob; with
# DUP_RATIO=1 nothing new is stored and RSS must stay flat.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${1:-10m}; RATE=${2:-3000}
DUP_RATIO=${DUP_RATIO:-0.2}; LARGE_EVERY=${LARGE_EVERY:-200}
OUT=${OUT:-$ROOT/benches/results/soak-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
(cd "$ROOT" && cargo build --release -q -p ctxstore-server -p ctxstore-loadgen)
"$ROOT/target/release/ctxstore-server" --data "$WORK/data" --listen 127.0.0.1:0 \
  --ready-file "$WORK/ready" 2> "$OUT/server.log" &
SERVER=$!
while ! grep -q . "$WORK/ready" 2>/dev/null; do sleep 0.05; done
echo "seconds,rss_kib,fds" > "$OUT/soak.csv"
(
  start=$(date +%s)
  while kill -0 $SERVER 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' /proc/$SERVER/status 2>/dev/null || echo 0)
    fds=$(ls /proc/$SERVER/fd 2>/dev/null | wc -l)
    echo "$(( $(date +%s) - start )),$rss,$fds" >> "$OUT/soak.csv"
    sleep 1
  done
) &
SAMPLER=$!
"$ROOT/target/release/ctxstore-loadgen" --addr "$(cat "$WORK/ready")" --rate "$RATE" \
  --duration "$DURATION" --warmup 5s --connections 16 --contexts 64 --prefill 16 --read-turns 32 \
  --mix append=70,get_last=15,page=5,fork=5,get_blob=5 --dup-ratio "$DUP_RATIO" --large-every "$LARGE_EVERY" \
  --quiet --json "$OUT/report.json" | tee "$OUT/report.txt"
kill $SAMPLER 2>/dev/null || true
python3 - "$OUT/soak.csv" "$OUT/report.json" <<'PY' | tee "$OUT/summary.txt"
import csv, json, sys
rows = [(int(r["seconds"]), int(r["rss_kib"]), int(r["fds"])) for r in csv.DictReader(open(sys.argv[1])) if r["rss_kib"] != "0"]
half = rows[len(rows) // 2:]
def stats(values): return f"min {min(values)} max {max(values)} last {values[-1]}"
print(f"samples {len(rows)} over {rows[-1][0]} s")
print(f"rss KiB: {stats([r[1] for r in rows])}; second half {stats([r[1] for r in half])}")
print(f"open fds: {stats([r[2] for r in rows])}; second half {stats([r[2] for r in half])}")
server = json.load(open(sys.argv[2])).get("server") or {}
blobs = server.get("blobs")
if blobs and blobs >= 10_000:
    print(f"blobs stored {blobs}, turns {server.get('turns')}: "
          f"RSS {rows[-1][1] * 1024 / blobs:.0f} B per blob at the end")
PY
