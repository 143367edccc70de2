#!/usr/bin/env bash
# Issue 19: how close can a lone append get to the fdatasync floor on this machine?
# Alternates, 3 rounds, 10 s each (1 connection, 1 context, closed loop, 10 KiB payloads):
#   main     ctxstore-server as built from main (pack and turns.log fdatasyncs overlap, 0014)
#   onesync  the same with pack-sync-off.patch applied: NOT durable, one flush per append
#   redis    redis-server --appendonly yes --appendfsync always (the peer of benches/peers.sh)
# and prints, per ctxstore run, the server's own figures from its /metrics: mean fdatasync of
# the sequencer and the shard, and the mean server time of APPEND_TURN (request decoded to
# response queued). Floor: 4 KiB appended to a file, then fdatasync (as benches/peers.sh).
# Usage: ceiling.sh MAIN_SERVER ONESYNC_SERVER LOADGEN
set -u
MAIN=$1 ONESYNC=$2 LOADGEN=$3
DATA=$(mktemp -d /var/tmp/ceiling.XXXXXX); trap 'rm -rf "$DATA"; redis-cli -p 7495 shutdown nosave >/dev/null 2>&1' EXIT
floor() { python3 - "$DATA" <<'PY'
import os, sys, time
path = os.path.join(sys.argv[1], "floor.bin"); fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
b = b"x" * 4096; s = []
for _ in range(2000):
    t = time.perf_counter(); os.write(fd, b); os.fdatasync(fd); s.append((time.perf_counter() - t) * 1e6)
os.close(fd); os.remove(path); s.sort(); print(f"fdatasync floor p50 {s[1000]:.0f} us")
PY
}
lone() { awk 'NR==2 {printf "%s/s p50 %s p90 %s p99 %s", $4, $5, $6, $7}'; }
metric() { curl -s 127.0.0.1:7498/metrics | awk -v pat="$1" 'index($0, pat) == 1 {print $2}'; }
run_ctxstore() { # label server
  rm -rf "$DATA/store"; "$2" --data "$DATA/store" --listen 127.0.0.1:7499 --metrics-listen 127.0.0.1:7498 2>/dev/null &
  local pid=$!; sleep 1
  printf "%-8s " "$1"; "$LOADGEN" --addr 127.0.0.1:7499 --duration 10s --warmup 2s --quiet --connections 1 --contexts 1 --mix append=100 2>&1 | lone
  local ss=$(metric 'ctxstore_fsync_duration_seconds_sum{actor="sequencer"}') sc=$(metric 'ctxstore_fsync_duration_seconds_count{actor="sequencer"}')
  local hs=$(metric 'ctxstore_fsync_duration_seconds_sum{actor="shard0"}') hc=$(metric 'ctxstore_fsync_duration_seconds_count{actor="shard0"}')
  local rs=$(metric 'ctxstore_request_duration_seconds_sum{type="APPEND_TURN"}') rc=$(metric 'ctxstore_request_duration_seconds_count{type="APPEND_TURN"}')
  python3 -c "import sys; f=lambda s,c: f'{1e6*float(s)/float(c):.0f} us' if float(c) else '-'; print(f' | server: sequencer fdatasync mean {f(\"$ss\",\"$sc\")}, shard fdatasync mean {f(\"$hs\",\"$hc\")}, APPEND_TURN mean {f(\"$rs\",\"$rc\")}')"
  kill "$pid"; wait "$pid" 2>/dev/null
}
run_redis() {
  rm -rf "$DATA/redis"; mkdir -p "$DATA/redis"
  redis-server --port 7495 --bind 127.0.0.1 --dir "$DATA/redis" --appendonly yes --appendfsync always --save '' --daemonize yes >/dev/null
  for _ in $(seq 50); do redis-cli -p 7495 ping >/dev/null 2>&1 && break; sleep 0.1; done
  printf "%-8s " redis; "$LOADGEN" --backend redis --peer redis://127.0.0.1:7495 --duration 10s --warmup 2s --quiet --connections 1 --contexts 1 --mix append=100 2>&1 | lone; echo
  redis-cli -p 7495 shutdown nosave >/dev/null 2>&1; sleep 0.5
}
for round in 1 2 3; do
  echo "# round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; floor
  run_ctxstore main "$MAIN"; run_ctxstore onesync "$ONESYNC"; run_redis
done
