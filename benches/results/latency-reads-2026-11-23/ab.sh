#!/usr/bin/env bash
# A/B of issue 19: before = server.base (8e7bef8) with the client hashing every payload (as the
# old client did); after = server.feed (HEAD) with the default client. Alternating, 3 rounds.
set -u
floor() { python3 - <<'PY'
import os, time
fd = os.open("/var/tmp/floor.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC); b = b"x" * 4096; s = []
for _ in range(2000):
    t = time.perf_counter(); os.write(fd, b); os.fdatasync(fd); s.append((time.perf_counter() - t) * 1e6)
os.close(fd); os.remove("/var/tmp/floor.bin"); s.sort(); print(f"floor p50 {s[1000]:.0f} us")
PY
}
run() { # server verify label args...
  local server=$1 verify=$2 label=$3; shift 3
  printf "%-6s %-10s " "$label" "$server"
  ./loadgen.new --spawn-server --server-bin ./server.$server --verify-payloads $verify --duration 10s --warmup 2s --quiet "$@" 2>&1 \
    | awk 'NR>1 && NR<4 {printf "%s %s/s p50 %s p99 %s | ", $1, $4, $5, $7}'; echo
}
for round in 1 2 3; do
  echo "# round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; floor
  for side in "base always" "feed when-remote"; do set -- $side
    run $1 $2 lone --connections 1 --contexts 1 --mix append=100
    run $1 $2 mixed --connections 32 --contexts 32 --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 2000
    run $1 $2 sat32 --connections 32 --contexts 32 --mix append=100
  done
done
