#!/usr/bin/env bash
# Decision 0016: before/after of quick ACKs on half-received frames. Alternates, 3 rounds:
#   before  BEFORE_SERVER + BEFORE_LOADGEN (e09d58e: no TCP_QUICKACK anywhere)
#   after   AFTER_SERVER + AFTER_LOADGEN (TCP_QUICKACK before each read of a partial frame)
# Workloads: issue 19's 2,000/s mixed open loop; the lone append; 32 agents closed loop; and
# appends with a 1 MiB payload every 20th at 500/s (large requests: the server's side).
# Usage: quickack.sh BEFORE_SERVER BEFORE_LOADGEN AFTER_SERVER AFTER_LOADGEN
set -u
row() { # label server loadgen args...
  local label=$1 server=$2 loadgen=$3; shift 3
  printf "%-7s %-6s " "$label" "$SIDE"
  "$loadgen" --spawn-server --server-bin "$server" --duration 10s --warmup 2s --quiet "$@" 2>&1 \
    | awk 'NR>1 && NR<4 && $1 != "server:" {printf "%s %s/s p50 %s p99 %s p999 %s max %s | ", $1, $4, $5, $7, $8, $9}'; echo
}
for round in 1 2 3; do
  echo "# round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  for SIDE in before after; do
    if [ $SIDE = before ]; then S=$1 L=$2; else S=$3 L=$4; fi
    row mixed "$S" "$L" --connections 32 --contexts 32 --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 2000
    row lone "$S" "$L" --connections 1 --contexts 1 --mix append=100
    row sat32 "$S" "$L" --connections 32 --contexts 32 --mix append=100
    row large "$S" "$L" --connections 32 --contexts 32 --mix append=100 --large-every 20 --rate 500
  done
done
