#!/usr/bin/env bash
# CPU time per operation, server and load generator, at a fixed (open-loop) rate. Far steadier
# than throughput on a shared machine: use it to compare changes.
#   benches/scripts/cpu-per-append.sh [RATE] [DURATION_S] [extra loadgen args…]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RATE=${1:-8000}; SECONDS_RUN=${2:-10}; shift 2 || true
DIR=$(mktemp -d); trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$DIR"' EXIT
"$ROOT/target/release/ctxstore-server" --data "$DIR/data" --listen 127.0.0.1:0 --ready-file "$DIR/ready" ${SERVER_ARGS:-} 2>"$DIR/log" &
SERVER=$!
while ! grep -q . "$DIR/ready" 2>/dev/null; do sleep 0.05; done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
before=$(ticks $SERVER)
/usr/bin/time -f "%U %S" -o "$DIR/lg_time" "$ROOT/target/release/ctxstore-loadgen" --addr "$(cat "$DIR/ready")" \
  --rate "$RATE" --duration "${SECONDS_RUN}s" --warmup 1s --quiet --json "$DIR/report.json" "$@" > /dev/null
after=$(ticks $SERVER)
python3 - "$DIR/report.json" "$DIR/lg_time" "$before" "$after" "$HZ" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
user, system = map(float, open(sys.argv[2]).read().split())
before, after, hz = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ops = sum(op["count"] for op in report["operations"].values())
total_ops = ops * (1 + 1 / max(report["config"]["duration_s"], 1))  # warm-up second included in CPU
server_us = (after - before) / hz * 1e6 / total_ops
loadgen_us = (user + system) * 1e6 / total_ops
append = report["operations"].get("append", {})
print(f"ops {ops}  server {server_us:.1f} µs/op  loadgen {loadgen_us:.1f} µs/op  "
      f"append p50 {append.get('latency_us', {}).get('p50')} µs p99 {append.get('latency_us', {}).get('p99')} µs")
PY
