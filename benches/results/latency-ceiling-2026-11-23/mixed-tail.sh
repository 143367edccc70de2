#!/usr/bin/env bash
# Issue 19: where the p999 of the 2,000/s mixed run comes from. Runs the mixed open loop once
# against SERVER (with its /metrics on) and prints: the load generator's table (client side,
# from the intended send time); the server's own request-duration buckets for APPEND_TURN and
# GET_LAST (request decoded -> response queued); the kernel's TCP counters of the run (nstat);
# and, 1.5 s before the end, `ss -ti` of the server's connections (RTT, ato, cwnd).
# Usage: mixed-tail.sh SERVER LOADGEN
set -u
SERVER=$1 LOADGEN=$2
DATA=$(mktemp -d /var/tmp/tail.XXXXXX); trap 'rm -rf "$DATA"' EXIT
"$SERVER" --data "$DATA/store" --listen 127.0.0.1:7499 --metrics-listen 127.0.0.1:7498 2>/dev/null &
pid=$!; sleep 1
echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) congestion control $(sysctl -n net.ipv4.tcp_congestion_control)"
nstat -n >/dev/null
(sleep 10.5; ss -tin 'sport = :7499' > "$DATA/ss.txt") &
"$LOADGEN" --addr 127.0.0.1:7499 --duration 10s --warmup 2s --quiet --connections 32 --contexts 32 \
  --prefill 64 --read-turns 64 --mix append=75,get_last=25 --rate 2000 2>&1 | head -3
echo "## server: request decoded -> response queued (cumulative buckets, seconds)"
curl -s 127.0.0.1:7498/metrics | grep -E 'request_duration_seconds_bucket\{type="(GET_LAST|APPEND_TURN)"' \
  | grep -E 'le="(0.001|0.0025|0.005|0.01|0.025|0.05|\+Inf)"'
echo "## kernel TCP counters of the run (nstat, non-zero, loss and reordering)"
nstat | grep -E "Retrans|OFO|DelayedACK|Reorder|SackRecovery|Drop" || echo "(none)"
echo "## ss -ti of the server's connections: RTT (ms), ato (ms), cwnd (segments of 64 KiB)"
grep -o "rtt:[0-9.]*/[0-9.]*\|ato:[0-9]*\|cwnd:[0-9]*\|minrtt:[0-9.]*" "$DATA/ss.txt" | sort | uniq -c | sort -rn | head -12
kill "$pid"; wait "$pid" 2>/dev/null
