#!/usr/bin/env python3
"""CPU time per process and per thread name, between two snapshots (benches/replication.sh).

    thread_cpu.py snap ROLE=PID [ROLE=PID ...] > before.json
    ... the load ...
    thread_cpu.py snap ROLE=PID [ROLE=PID ...] > after.json
    thread_cpu.py diff before.json after.json LABEL   # CSV rows: label,role,thread,cpu_s

A process's total comes from /proc/PID/stat (it counts threads that exited meanwhile); its
threads from /proc/PID/task/*/stat, summed by name (Linux truncates names to 15 bytes). What
the threads alive at the second snapshot do not account for (threads that ended in between)
is the row `(exited)`. A role whose process has ended is skipped.
"""
import json
import os
import sys

HZ = os.sysconf("SC_CLK_TCK")


def ticks(stat_text):
    # The name is in parentheses and may hold spaces: fields count from the last ')'.
    name = stat_text[stat_text.index("(") + 1 : stat_text.rindex(")")]
    fields = stat_text[stat_text.rindex(")") + 2 :].split()
    # utime and stime are fields 14 and 15 of proc(5); fields[0] here is field 3.
    return name, int(fields[11]) + int(fields[12])


def snap(roles):
    out = {}
    for role_pid in roles:
        role, pid = role_pid.split("=", 1)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                _, total = ticks(stat.read())
        except (FileNotFoundError, ProcessLookupError):
            continue
        threads = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                    threads[tid] = ticks(stat.read())
            except (FileNotFoundError, ProcessLookupError):
                pass
        out[role] = {"pid": pid, "total": total, "threads": threads}
    json.dump(out, sys.stdout)


def diff(before_path, after_path, label):
    before = json.load(open(before_path))
    after = json.load(open(after_path))
    for role, now in after.items():
        then = before.get(role)
        if then is None or then["pid"] != now["pid"]:
            continue
        by_name = {}
        accounted = 0
        for tid, (name, count) in now["threads"].items():
            # A thread born in between spent all its time in the window.
            spent = count - then["threads"][tid][1] if tid in then["threads"] else count
            by_name[name] = by_name.get(name, 0) + spent
            accounted += spent
        total = now["total"] - then["total"]
        by_name["(exited)"] = max(total - accounted, 0)
        print(f"{label},{role},(total),{total / HZ:.2f}")
        for name, spent in sorted(by_name.items(), key=lambda item: -item[1]):
            if spent > 0:
                print(f"{label},{role},{name},{spent / HZ:.2f}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "snap":
        snap(sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
