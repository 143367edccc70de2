#!/usr/bin/env bash
# The runs of hiccup.txt: the 2,000/s mixed open loop against SERVER, six times, each with
# hiccup.py (sleeps 1 ms in a loop, reports its worst oversleep) beside it and the machine's
# steal ticks over the run. Usage: hiccup.sh SERVER LOADGEN
set -u
SERVER=$1 LOADGEN=$2 HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$(mktemp -d /var/tmp/hiccup.XXXXXX); trap 'rm -rf "$DATA"' EXIT
steal() { awk '/^cpu / {print $9}' /proc/stat; }
for i in 1 2 3 4 5 6; do
  s0=$(steal); rm -rf "$DATA/store"
  "$SERVER" --data "$DATA/store" --listen 127.0.0.1:7499 >/dev/null 2>&1 & pid=$!; sleep 1
  python3 "$HERE/hiccup.py" 13.5 > "$DATA/hiccup.txt" & meter=$!
  "$LOADGEN" --addr 127.0.0.1:7499 --duration 10s --warmup 2s --quiet --connections 32 --contexts 32 \
    --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 2000 2>&1 \
    | awk 'NR>1 && NR<4 {printf "%s p999 %s max %s | ", $1, $8, $9}'
  wait "$meter"; printf "steal %s ticks | " $(( $(steal) - s0 )); cat "$DATA/hiccup.txt"
  kill "$pid"; wait "$pid" 2>/dev/null
done
