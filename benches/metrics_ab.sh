#!/usr/bin/env bash
# The cost of metrics on the request path: the same load with the metrics endpoint on (and a
# scraper hitting it every second, 15× Prometheus' usual rate) and off (no endpoint: the network
# cores count nothing), in interleaved pairs within one run, alternating which goes first.
#
#   benches/metrics_ab.sh                 # 5 pairs of each workload (~5 min)
#   PAIRS=9 DURATION=10s benches/metrics_ab.sh
#
# Workloads: 32 connections appending 10 KiB turns (durable), and 8 connections reading the
# last turn of their context (the cheapest request with a payload: the most requests per
# second, so the largest share of per-request overhead). Needs release binaries:
#   cargo build --release -p ctxstore-server -p ctxstore-loadgen
# Prints one line per run and the medians; reports go to $OUT (default a temporary directory).
#
# AB=tenant compares something else with the same pairs: "off" is the operator's token on a
# server without tenants, "on" a tenant's token with all five quotas in force (set far above
# the load, so none refuses): what serving a tenant costs, quotas included (decision 0032).
#   AB=tenant benches/metrics_ab.sh
#
# AB=seal: "off" a server without a master key, "on" the same with --master-key-file (every
# payload sealed on the way in, opened on the way out: XChaCha20-Poly1305, decision 0032 §4).
# Both without the payload cache (--payload-cache-bytes 0), so every read opens its payload;
# CACHE=on keeps the cache (the default configuration: a hot read is served from it, opened
# once).
#   AB=seal benches/metrics_ab.sh
#   AB=seal CACHE=on benches/metrics_ab.sh
#
# PIN=1 keeps the server and the load generator off each other's CPUs: the server on CPU 1
# with one network core, the load generator on CPU 0 (taskset). On a 2-CPU machine the two
# otherwise take turns on the same CPUs, and a network core preempted by the load generator
# holds its connections for a scheduler slice: the tail then measures the scheduler, and
# grows with whatever adds CPU to the server. READ_CONNECTIONS sets the readers (8).
#   AB=seal PIN=1 READ_CONNECTIONS=32 benches/metrics_ab.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release}
PAIRS=${PAIRS:-5}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
PORT=${METRICS_PORT:-19411}
OUT=${OUT:-$(mktemp -d /tmp/ctxstore-metrics-ab.XXXXXX)}
mkdir -p "$OUT"
AB=${AB:-metrics}
READ_CONNECTIONS=${READ_CONNECTIONS:-8}
LOADGEN=("$BIN/ctxstore-loadgen")
SERVER_BIN=$BIN/ctxstore-server
if [ "${PIN:-0}" = 1 ]; then
  LOADGEN=(taskset -c 0 "$BIN/ctxstore-loadgen")
  SERVER_BIN=$OUT/server-on-cpu-1
  printf '#!/bin/sh\nexec taskset -c 1 "%s" --network-cores 1 "$@"\n' "$BIN/ctxstore-server" >"$SERVER_BIN"
  chmod +x "$SERVER_BIN"
fi
OPERATOR_TOKEN=operator-token-0123456789
TENANT_TOKEN=acme-token-0123456789abcdef
if [ "$AB" = tenant ]; then
  echo "$OPERATOR_TOKEN" >"$OUT/token"
  cat >"$OUT/tenants.toml" <<TOML
[[tenant]]
name = "acme"
tokens = ["$TENANT_TOKEN"]
rights = ["read", "write", "admin"]
quota_bytes = 100_000_000_000
quota_contexts = 1_000_000
quota_appends_per_s = 10_000_000
quota_connections = 1_000
quota_streams = 1_000
TOML
elif [ "$AB" = seal ]; then
  openssl rand -hex 32 >"$OUT/master.key" 2>/dev/null || python3 -c 'import os; print(os.urandom(32).hex())' >"$OUT/master.key"
fi

scraper() {
  while true; do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics" || true
    sleep 1
  done
}

run() { # name mode(on|off) loadgen-args...
  local name=$1 mode=$2
  shift 2
  local extra=()
  local scraper_pid=
  if [ "$AB" = tenant ]; then
    extra=(--server-arg=--token-file="$OUT/token" --token "$OPERATOR_TOKEN")
    if [ "$mode" = on ]; then
      extra=(--server-arg=--token-file="$OUT/token" --server-arg=--tenants-file="$OUT/tenants.toml"
        --token "$TENANT_TOKEN")
    fi
  elif [ "$AB" = seal ]; then
    extra=()
    if [ "${CACHE:-off}" != on ]; then extra=(--server-arg=--payload-cache-bytes=0); fi
    if [ "$mode" = on ]; then
      extra+=(--server-arg=--master-key-file="$OUT/master.key")
    fi
  elif [ "$mode" = on ]; then
    extra=(--server-arg=--metrics-listen=127.0.0.1:$PORT)
    scraper &
    scraper_pid=$!
  fi
  "${LOADGEN[@]}" --spawn-server --server-bin "$SERVER_BIN" \
    --duration "$DURATION" --warmup "$WARMUP" --json "$OUT/$name-$mode-$RUN.json" \
    "${extra[@]}" "$@" >"$OUT/$name-$mode-$RUN.txt" 2>&1
  if [ -n "$scraper_pid" ]; then kill "$scraper_pid" 2>/dev/null; wait "$scraper_pid" 2>/dev/null || true; fi
  python3 - "$OUT/$name-$mode-$RUN.json" "$name" "$mode" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
op, figures = next(iter(report["operations"].items()))
lat = figures["latency_us"]
print(f"{sys.argv[2]:<8} {sys.argv[3]:<3} {op:<9} {figures['throughput_per_s']:>9.0f}/s "
      f"p50 {lat['p50']:>6} us  p99 {lat['p99']:>6} us  errors {figures['errors']}")
EOF
}

for RUN in $(seq 1 "$PAIRS"); do
  if [ $((RUN % 2)) -eq 1 ]; then order="off on"; else order="on off"; fi
  for mode in $order; do
    run append "$mode" --connections 32 --contexts 32 --mix append=100
  done
  for mode in $order; do
    run get_last "$mode" --connections "$READ_CONNECTIONS" --contexts "$READ_CONNECTIONS" \
      --prefill 8 --read-turns 1 --mix get_last=100
  done
done | tee "$OUT/runs.txt"

python3 - "$OUT/runs.txt" <<'EOF'
import statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.split()
    name, mode = parts[0], parts[1]
    throughput = float(parts[3].rstrip("/s"))
    p50, p99 = float(parts[5]), float(parts[8])
    runs[(name, mode)].append((throughput, p50, p99))
print(f"\nmedians over {len(next(iter(runs.values())))} runs each:")
for name in sorted({name for name, _ in runs}):
    off = [statistics.median(column) for column in zip(*runs[(name, "off")])]
    on = [statistics.median(column) for column in zip(*runs[(name, "on")])]
    print(f"{name:<8} off {off[0]:>9.0f}/s p50 {off[1]:>6.0f} us p99 {off[2]:>6.0f} us | "
          f"on {on[0]:>9.0f}/s p50 {on[1]:>6.0f} us p99 {on[2]:>6.0f} us | "
          f"throughput {100 * (on[0] / off[0] - 1):+.1f}%")
EOF
echo "reports: $OUT"
