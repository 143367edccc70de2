#!/usr/bin/env bash
# The lead's quiet-machine figures for issues 31, 32 and 38, one after the other, on merged main.
cd /work/main
export CARGO_INCREMENTAL=0
export WEED=/work/venvs/weed/bin/weed WEED_PORT=8633
export WEED_FLAGS="-master.port=9633 -master.port.grpc=19633 -filer.port=8989 -filer.port.grpc=18989 -volume.port=8581 -volume.port.grpc=18581 -admin.port=23747 -debug.port=6161 -webdav.port=7434 -s3.port.iceberg=8681 -master.telemetry=false"
R=/var/tmp/lead/final; mkdir -p $R
stamp() { echo "== $* $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
stamp cpu
for i in 1 2 3; do
  nice -n 10 benches/scripts/cpu-per-append.sh 6000 8 --connections 32 --contexts 32 --no-client-compression
  nice -n 10 benches/scripts/cpu-per-append.sh 6000 8 --connections 32 --contexts 32
done 2>&1 | tee $R/cpu.txt
stamp cpu-saturation
for i in 1 2 3; do
  nice -n 10 benches/scripts/cpu-per-append.sh 40000 8 --connections 32 --contexts 32
done 2>&1 | tee $R/cpu-sat.txt
stamp streams
OUT=benches/results/streams-500x40-final STREAMS=500 RATE=40 ROUNDS=3 nice -n 10 benches/streams.sh > $R/streams.txt 2>&1
stamp peers
OUT=benches/results/peers-20261127-final ONLY="append_1 append_32 get_last_64 mixed_at_2000" BACKENDS="ctxstore redis" DURATION=10s nice -n 10 benches/peers.sh > $R/peers.txt 2>&1
stamp overhead-shared
ROUNDS=3 nice -n 10 benches/replication.sh overhead > $R/over-shared.txt 2>&1
stamp overhead-pin
ROUNDS=3 SKIP_IDLE=1 WEED_PLACE=pin nice -n 10 benches/replication.sh overhead > $R/over-pin.txt 2>&1
stamp overhead-file
ROUNDS=3 SKIP_IDLE=1 REMOTE=file nice -n 10 benches/replication.sh overhead > $R/over-file.txt 2>&1
stamp overhead-nice
ROUNDS=3 SKIP_IDLE=1 WEED_PLACE=nice nice -n 10 benches/replication.sh overhead > $R/over-nice.txt 2>&1
stamp done
