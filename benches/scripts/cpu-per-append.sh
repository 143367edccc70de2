#!/usr/bin/env bash
# CPU time per operation, server and load generator, at a fixed (open-loop) rate. Far steadier
# than throughput on a shared machine: use it to compare changes.
#   benches/scripts/cpu-per-append.sh [RATE] [DURATION_S] [extra loadgen args…]
# SERVER_BIN=path runs another server build (an A/B against a saved baseline binary);
# SERVER_ARGS adds server flags; PERF_DATA=file records the server's profile (perf, cpu-clock);
# THREADS=1 adds the server's CPU per append thread by thread, and its context switches.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RATE=${1:-8000}; SECONDS_RUN=${2:-10}; shift 2 || true
DIR=$(mktemp -d); trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$DIR"' EXIT
"${SERVER_BIN:-$ROOT/target/release/ctxstore-server}" --data "$DIR/data" --listen 127.0.0.1:0 --ready-file "$DIR/ready" ${SERVER_ARGS:-} 2>"$DIR/log" &
SERVER=$!
while ! grep -q . "$DIR/ready" 2>/dev/null; do sleep 0.05; done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# name, CPU ticks and context switches of each server thread (names may hold no spaces).
# A thread that ends while it is read (io_uring's workers come and go) is left out.
threads() {
  for task in /proc/"$SERVER"/task/*; do
    comm=$(cat "$task/comm" 2>/dev/null) || continue
    ticks=$(awk '{print $14 + $15}' "$task/stat" 2>/dev/null) || continue
    switches=$(awk '/ctxt_switches/ {n += $2} END {print n}' "$task/status" 2>/dev/null) || continue
    [ -n "$comm" ] && [ -n "$ticks" ] && [ -n "$switches" ] && echo "$comm $ticks $switches"
  done
  return 0
}
HZ=$(getconf CLK_TCK)
before=$(ticks $SERVER)
threads > "$DIR/threads_before"
PERF=
if [ -n "${PERF_DATA:-}" ]; then
  /usr/bin/perf record -e cpu-clock -g -o "$PERF_DATA" -p "$SERVER" 2>"$DIR/perf_log" &
  PERF=$!
fi
/usr/bin/time -f "%U %S" -o "$DIR/lg_time" "$ROOT/target/release/ctxstore-loadgen" --addr "$(cat "$DIR/ready")" \
  --rate "$RATE" --duration "${SECONDS_RUN}s" --warmup 1s --quiet --json "$DIR/report.json" "$@" > /dev/null
after=$(ticks $SERVER)
threads > "$DIR/threads_after"
if [ -n "$PERF" ]; then kill -INT "$PERF"; wait "$PERF" || true; fi
python3 - "$DIR/report.json" "$DIR/lg_time" "$before" "$after" "$HZ" "${THREADS:-}" "$DIR" <<'PY'
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
if sys.argv[6]:
    def table(name):
        rows = {}
        for line in open(f"{sys.argv[7]}/{name}"):
            comm, ticks, switches = line.split()
            old = rows.get(comm, (0, 0))
            rows[comm] = (old[0] + int(ticks), old[1] + int(switches))
        return rows
    start, end = table("threads_before"), table("threads_after")
    for comm in sorted(end):
        ticks = end[comm][0] - start.get(comm, (0, 0))[0]
        switches = end[comm][1] - start.get(comm, (0, 0))[1]
        print(f"  {comm:24} {ticks / hz * 1e6 / total_ops:6.1f} µs/op  "
              f"{switches / total_ops:5.2f} context switches/op")
PY
