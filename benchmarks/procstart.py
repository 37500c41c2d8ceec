"""When a process started, as epoch seconds, from /proc (clock-tick resolution, 10 ms).

    python procstart.py PID            print the start epoch of PID
    python procstart.py --batch PID    of the Slurm batch script among PID and its ancestors

Every bring-up in the benchmarks is timed from the same reference: the start of the
job's batch script process (the `slurm_script` bash that slurmstepd runs), read the same
way for sf and for the baselines.
"""

from __future__ import annotations

import os
import sys
import time


def _stat_fields(pid: int) -> list[str]:
    text = open(f"/proc/{pid}/stat").read()
    return text[text.rindex(")") + 2:].split()  # fields from 3 (state) on


def start_epoch(pid: int) -> float:
    ticks = int(_stat_fields(pid)[19])  # field 22: starttime, clock ticks since boot
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)


def parent(pid: int) -> int:
    return int(_stat_fields(pid)[1])


def batch_script_pid(pid: int) -> int | None:
    """PID or the nearest ancestor running the job's batch script (slurm_script)."""
    for _ in range(12):
        if pid <= 1:
            return None
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
        except OSError:
            return None
        if b"slurm_script" in cmdline:
            return pid
        pid = parent(pid)
    return None


def batch_start_epoch(pid: int | None = None) -> float | None:
    found = batch_script_pid(pid or os.getpid())
    return start_epoch(found) if found else None


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--batch"]:
        value = batch_start_epoch(int(args[1]))
        print("" if value is None else f"{value:.3f}")
    else:
        print(f"{start_epoch(int(args[0])):.3f}")
