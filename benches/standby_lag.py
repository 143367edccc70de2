"""Standby lag (issue 31): acknowledged on the primary -> readable on the standby.

Every PERIOD seconds a probe turn is appended to the primary (the Python client, durable
acknowledgement); from the acknowledgement the standby is asked for that turn (GET_TURN) every
POLL seconds until it answers. One sample per probe: the time from the acknowledgement to the
first answer. The probe runs beside the load (benches/replication.sh standby runs
ctxstore-loadgen against the primary at the same time).

    python benches/standby_lag.py PRIMARY_ADDR STANDBY_ADDR SECONDS OUT_CSV

Prints p50, p90, p99 and max in milliseconds and writes every sample to OUT_CSV.
"""

from __future__ import annotations

import statistics
import sys
import time

from ctxstore import Client
from ctxstore.errors import NotFound

PERIOD_S = 0.1
POLL_S = 0.002
# A probe not readable after this long is counted at this value (and reported as such).
GIVE_UP_S = 30.0


def main() -> None:
    primary_addr, standby_addr, seconds, out = sys.argv[1:5]
    primary = Client(primary_addr)
    standby = Client(standby_addr)
    context = primary.create_context().context_id
    samples: list[float] = []
    gave_up = 0
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        started = time.monotonic()
        turn_id = primary.append(context, b"probe %d" % len(samples)).turn.turn_id
        acked = time.monotonic()
        while True:
            try:
                standby.get_turn(turn_id)
                break
            except NotFound:
                if time.monotonic() - acked > GIVE_UP_S:
                    gave_up += 1
                    break
                time.sleep(POLL_S)
        samples.append((time.monotonic() - acked) * 1000.0)
        rest = PERIOD_S - (time.monotonic() - started)
        if rest > 0:
            time.sleep(rest)
    with open(out, "w") as file:
        file.write("lag_ms\n")
        file.writelines(f"{sample:.3f}\n" for sample in samples)
    ordered = sorted(samples)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    print(
        f"samples {len(samples)}, lag ms: p50 {statistics.median(ordered):.0f}, "
        f"p90 {quantile(0.90):.0f}, p99 {quantile(0.99):.0f}, max {ordered[-1]:.0f}"
        + (f", {gave_up} not readable within {GIVE_UP_S:.0f} s" if gave_up else "")
    )


if __name__ == "__main__":
    main()
