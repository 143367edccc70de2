"""One failover, timed (benches/replication.sh failover, decision 0031 §13).

Usage: failover_probe.py PRIMARY STANDBY PRIMARY_PID

Appends to the primary (the server's own --ack-after) until the standby has applied a
context, then kills the primary with SIGKILL and appends to the standby until one append is
acknowledged there. Prints `took_ms N` (kill -> first write acknowledged by the new primary),
`errors N` (the standby's refusals meanwhile: NOT_PRIMARY until it takes over, or a lost
connection) and `acknowledged_before_kill N`.
"""

import os
import signal
import sys
import time

import ctxstore


def main() -> None:
    primary_addr, standby_addr, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with ctxstore.Client(primary_addr, timeout=10) as primary:
        context = primary.create_context().context_id
        acknowledged = 0
        for i in range(50):
            primary.append(context, f"before the kill {i}".encode())
            acknowledged += 1
    # The standby holds the context (it follows within a poll or two).
    deadline = time.monotonic() + 30
    while True:
        try:
            with ctxstore.Client(standby_addr, timeout=5) as standby:
                if standby.head(context).head_turn_id != 0:
                    break
        except (ctxstore.errors.CtxstoreError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the standby never applied the context")
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    errors = 0
    while True:
        try:
            with ctxstore.Client(standby_addr, timeout=5) as standby:
                standby.append(context, b"the first write after the failover")
                break
        except (ctxstore.errors.CtxstoreError, OSError):
            errors += 1
            time.sleep(0.02)
        if time.monotonic() - killed > 120:
            raise SystemExit("no failover within 120 s")
    took_ms = (time.monotonic() - killed) * 1000
    print(f"took_ms {took_ms:.0f}")
    print(f"errors {errors}")
    print(f"acknowledged_before_kill {acknowledged}")


if __name__ == "__main__":
    main()
