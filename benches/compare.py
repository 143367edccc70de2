#!/usr/bin/env python3
"""Side-by-side table and latency plot from ctxstore-loadgen JSON reports.

    python3 benches/compare.py RESULTS_DIR

Reads RESULTS_DIR/<backend>-<scenario>.json (written by benches/peers.sh), prints a Markdown
table per scenario with ctxstore/peer ratios, and writes RESULTS_DIR/latency.svg: append and
get-last latency percentiles per backend on a log scale. No dependencies beyond Python 3.
"""

import json
import math
import os
import sys

BACKENDS = ["ctxstore", "postgres", "redis", "sqlite"]
SCENARIOS = [
    ("append_1", "append", "append 10 KiB, 1 agent"),
    ("append_32", "append", "append 10 KiB, 32 agents"),
    ("append_32_at_2000", "append", "append 10 KiB, 32 agents, open loop at 2,000/s"),
    ("get_last_64", "get_last", "get-last-64 with payloads, 1 client"),
    ("get_last_64_32", "get_last", "get-last-64 with payloads, 32 clients"),
    ("fork_1", "fork", "fork, 1 client"),
    ("fork_32", "fork", "fork, 32 clients"),
    ("mixed_dedup", "append", "append, 32 clients, 30% duplicates, 1 MiB every 100th"),
    ("mixed_at_100", "append", "append in 75/25 append/get-last-64, 32 agents, open loop at 100/s"),
    ("mixed_at_100", "get_last", "get-last-64 in 75/25 append/get-last-64, 32 agents, open loop at 100/s"),
    ("mixed_at_500", "append", "append in 75/25 append/get-last-64, 32 agents, open loop at 500/s"),
    ("mixed_at_500", "get_last", "get-last-64 in 75/25 append/get-last-64, 32 agents, open loop at 500/s"),
    ("mixed_at_2000", "append", "append in 75/25 append/get-last-64, 32 agents, open loop at 2,000/s"),
    ("mixed_at_2000", "get_last", "get-last-64 in 75/25 append/get-last-64, 32 agents, open loop at 2,000/s"),
]
PERCENTILES = ["p50", "p90", "p99", "p999", "max"]


def load(directory):
    reports = {}
    for name in os.listdir(directory):
        if name.endswith(".json") and "-" in name and not name.startswith("fdatasync"):
            backend, scenario = name[: -len(".json")].split("-", 1)
            with open(os.path.join(directory, name)) as handle:
                reports[(backend, scenario)] = json.load(handle)
    return reports


def fmt_us(value):
    if value is None:
        return "–"
    if value < 1000:
        return f"{value:.0f} µs"
    if value < 1_000_000:
        return f"{value / 1000:.2f} ms"
    return f"{value / 1e6:.2f} s"


def fmt_decade(micros):
    for unit, scale in (("s", 1e6), ("ms", 1e3), ("µs", 1)):
        if micros >= scale:
            return f"{micros / scale:g} {unit}"
    return f"{micros:g} µs"


def ratio(numerator, denominator):
    if not numerator or not denominator:
        return "–"
    return f"{numerator / denominator:.1f}×"


def table(reports, floor):
    present = [b for b in BACKENDS if any(key[0] == b for key in reports)]
    lines = []
    if floor:
        lines.append(
            f"fdatasync floor (4 KiB append + fdatasync, same disk): p50 {fmt_us(floor['p50_us'])}, "
            f"p99 {fmt_us(floor['p99_us'])}\n"
        )
    for scenario, op, title in SCENARIOS:
        rows = {b: reports.get((b, scenario), {}).get("operations", {}).get(op) for b in present}
        if not any(rows.values()):
            continue
        lines.append(f"### {title} (`{scenario}`)\n")
        lines.append("| | " + " | ".join(present) + " |")
        lines.append("|---|" + "---:|" * len(present))
        def row(label, cell):
            lines.append(f"| {label} | " + " | ".join(cell(b) for b in present) + " |")
        row("ops/s", lambda b: f"{rows[b]['throughput_per_s']:,.0f}" if rows[b] else "–")
        for p in ["p50", "p99", "p999"]:
            row(p, lambda b, p=p: fmt_us(rows[b]["latency_us"][p]) if rows[b] else "–")
        row("errors", lambda b: str(rows[b]["errors"]) if rows[b] else "–")
        if floor and scenario == "append_1":
            # Issue 19's target for a lone append: p50 within 1.3x of one fdatasync.
            row(
                "p50 ÷ fdatasync floor p50",
                lambda b: ratio(rows[b]["latency_us"]["p50"], floor["p50_us"]) if rows[b] else "–",
            )
        ours = rows.get("ctxstore")
        if ours:
            row(
                "ctxstore throughput ÷ this",
                lambda b: ratio(ours["throughput_per_s"], rows[b]["throughput_per_s"]) if rows[b] and b != "ctxstore" else "",
            )
            row(
                "this p99 ÷ ctxstore p99",
                lambda b: ratio(rows[b]["latency_us"]["p99"], ours["latency_us"]["p99"]) if rows[b] and b != "ctxstore" else "",
            )
        if scenario in ("append_1", "append_32", "mixed_dedup"):
            def server(b, key):
                return reports.get((b, scenario), {}).get("server", {}).get(key)
            row("bytes on disk per turn", lambda b: f"{server(b, 'bytes_per_turn'):,.0f}" if server(b, "bytes_per_turn") else "–")
            row("logical ÷ stored", lambda b: f"{server(b, 'logical_per_stored'):.2f}" if server(b, "logical_per_stored") else "–")
        lines.append("")
    return "\n".join(lines)


def plot(reports, path):
    """Percentile curves (log-scale latency) for append_32 and get_last_64, one line per backend."""
    colours = {"ctxstore": "#1b7837", "postgres": "#2166ac", "redis": "#b2182b", "sqlite": "#8c510a"}
    panels = [("append_32", "append", "append 10 KiB, 32 agents"), ("get_last_64", "get_last", "get-last-64, 1 client")]
    width, height, margin = 480, 320, 70
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" height="{height}" font-family="sans-serif" font-size="12">']
    for index, (scenario, op, title) in enumerate(panels):
        x0 = index * width
        series = {}
        for backend in BACKENDS:
            entry = reports.get((backend, scenario), {}).get("operations", {}).get(op)
            if entry:
                series[backend] = [max(1, entry["latency_us"][p]) for p in PERCENTILES]
        if not series:
            continue
        low = 10 ** math.floor(math.log10(min(min(v) for v in series.values())))
        high = 10 ** math.ceil(math.log10(max(max(v) for v in series.values())))
        def y(value):
            span = math.log10(high) - math.log10(low)
            return height - margin - (math.log10(value) - math.log10(low)) / span * (height - 2 * margin)
        def x(position):
            return x0 + margin + position * (width - 2 * margin) / (len(PERCENTILES) - 1)
        svg.append(f'<text x="{x0 + width / 2}" y="20" text-anchor="middle" font-weight="bold">{title}</text>')
        decade = low
        while decade <= high:
            svg.append(f'<line x1="{x(0)}" x2="{x(len(PERCENTILES) - 1)}" y1="{y(decade)}" y2="{y(decade)}" stroke="#ddd"/>')
            svg.append(f'<text x="{x(0) - 6}" y="{y(decade) + 4}" text-anchor="end">{fmt_decade(decade)}</text>')
            decade *= 10
        for position, name in enumerate(PERCENTILES):
            svg.append(f'<text x="{x(position)}" y="{height - margin + 18}" text-anchor="middle">{name}</text>')
        for row, (backend, values) in enumerate(series.items()):
            points = " ".join(f"{x(i)},{y(v)}" for i, v in enumerate(values))
            svg.append(f'<polyline points="{points}" fill="none" stroke="{colours[backend]}" stroke-width="2"/>')
            svg.append(f'<text x="{x0 + margin + 6}" y="{40 + 14 * row}" fill="{colours[backend]}">{backend}</text>')
    svg.append("</svg>")
    with open(path, "w") as handle:
        handle.write("\n".join(svg) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    directory = sys.argv[1]
    reports = load(directory)
    floor = None
    floor_path = os.path.join(directory, "fdatasync-floor.json")
    if os.path.exists(floor_path):
        with open(floor_path) as handle:
            floor = json.load(handle)
    print(table(reports, floor))
    plot(reports, os.path.join(directory, "latency.svg"))


if __name__ == "__main__":
    main()
