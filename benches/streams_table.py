#!/usr/bin/env python3
"""The table of benches/streams.sh: per store, the median over its rounds of each figure, and
each peer's figure as a ratio to ctxstore's (peer ÷ ctxstore).

    benches/streams_table.py benches/results/streams-<timestamp>
"""

import json
import statistics
import sys
from pathlib import Path

STORES = ["ctxstore", "ctxstore-poll", "ctxstore-before", "redis-always", "redis-everysec"]


def figures(report):
    """The figures of one run's report, by name (None where the run has none)."""
    ops = report["operations"]
    streaming = report["streaming"]

    def latency(op, quantile):
        return ops.get(op, {}).get("latency_us", {}).get(quantile)

    def disk(key):
        usage = streaming.get(key) or {}
        return usage.get("bytes")

    errors = sum(op.get("errors", 0) for op in ops.values())
    return {
        "deltas/s": ops.get("delta", {}).get("throughput_per_s"),
        "delta p50 µs": latency("delta", "p50"),
        "delta p99 µs": latency("delta", "p99"),
        "delta p999 µs": latency("delta", "p999"),
        "delivery p50 µs": latency("delivery", "p50"),
        "delivery p99 µs": latency("delivery", "p99"),
        "delivery p999 µs": latency("delivery", "p999"),
        "seal p50 µs": latency("seal", "p50"),
        "seal p99 µs": latency("seal", "p99"),
        "server CPU µs/delta": streaming.get("server_cpu_us_per_delta"),
        # Its own process only, over the same part as the server's (/usr/bin/time's figure
        # beside the report counts a spawned server too).
        "load generator CPU µs/delta": streaming.get("loadgen_cpu_us_per_delta"),
        "disk after seals B": disk("disk_after_seal"),
        "disk after GC B": disk("disk_after_gc"),
        "errors": errors,
        "mismatches": streaming.get("delivery_mismatches"),
        "undelivered": streaming["deltas_acknowledged"] - streaming["deltas_delivered"],
    }


def median(values):
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def show(value):
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def main():
    out = Path(sys.argv[1])
    runs = {}
    for path in sorted(out.glob("*.json")):
        store, _, _round = path.stem.rpartition("-")
        runs.setdefault(store, []).append(figures(json.loads(path.read_text())))
    stores = [store for store in STORES if store in runs]
    if not stores:
        for path in sorted(out.glob("*.failed")):
            print(f"FAILED {path.stem}: {path.read_text().strip()}")
        sys.exit(f"no reports in {out}")
    names = list(runs[stores[0]][0].keys())
    medians = {store: {name: median([run[name] for run in runs[store]]) for name in names} for store in stores}
    rounds = ", ".join(f"{store} {len(runs[store])}" for store in stores)
    print(f"Medians over the rounds ({rounds}); ratio = peer ÷ ctxstore.\n")
    header = ["figure"] + stores + [f"{store} ÷ ctxstore" for store in stores if store != "ctxstore"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in names:
        row = [name] + [show(medians[store][name]) for store in stores]
        base = medians.get("ctxstore", {}).get(name)
        for store in stores:
            if store == "ctxstore":
                continue
            value = medians[store][name]
            ratio = f"{value / base:.2f}×" if base and value is not None else "-"
            row.append(ratio)
        print("| " + " | ".join(row) + " |")
    for path in sorted(out.glob("*.failed")):
        print(f"\nFAILED {path.stem}: {path.read_text().strip()}")
    print("\nEach run (delivery p99 µs): " + "; ".join(
        f"{store} " + ", ".join(show(run["delivery p99 µs"]) for run in runs[store]) for store in stores))


if __name__ == "__main__":
    main()
