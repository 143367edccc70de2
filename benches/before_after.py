#!/usr/bin/env python3
"""ctxstore before and after a change, from peers.sh runs of each build (BACKENDS=ctxstore):
per scenario and operation, the median throughput and p99 of the runs of each side, and
after/before. Alternate the runs (before, after, before, after) in one session.

    benches/before_after.py B1,B2,... A1,A2,...   # directories peers.sh wrote (OUT=)
"""

import glob
import json
import os
import statistics
import sys


def load(dirs):
    out = {}
    for d in dirs.split(","):
        for f in glob.glob(os.path.join(d, "ctxstore-*.json")):
            scen = os.path.basename(f)[len("ctxstore-") : -5]
            with open(f) as report:
                ops = json.load(report)["operations"]
            for op, v in ops.items():
                out.setdefault((scen, op), []).append(
                    (
                        v["throughput_per_s"],
                        v["latency_us"]["p50"],
                        v["latency_us"]["p99"],
                    )
                )
    return out


b, a = load(sys.argv[1]), load(sys.argv[2])
print(
    "| scenario | op | ops/s before | ops/s after | after/before | p99 µs before | p99 µs after |"
)
print("|---|---|---|---|---|---|---|")
ratios = []
for key in sorted(b):
    if key not in a:
        continue
    tb = statistics.median(x[0] for x in b[key])
    ta = statistics.median(x[0] for x in a[key])
    pb = statistics.median(x[2] for x in b[key])
    pa = statistics.median(x[2] for x in a[key])
    r = ta / tb if tb else float("nan")
    ratios.append(r)
    print(
        f"| {key[0]} | {key[1]} | {tb:,.0f} | {ta:,.0f} | {r:.2f} | {pb:,.0f} | {pa:,.0f} |"
    )
print(f"\nmedian after/before throughput ratio: {statistics.median(ratios):.2f}")
