"""The startup timeline of a run recorded before the supervisor recorded verl's phases itself.

    python benchmarks/gpu/timeline_replay.py RUN_DIR [--json]

Reads the run's events.jsonl (sf's own phases, as recorded on the device) and its batch
log(s) logs/slurm-*.out, splits the log where sf started a driver, finds verl's phases with
sf's own table (launcher/injob/verl_phases.py) and prints sf's timeline (launcher/monitor/
timeline.py) with them. The one difference from a live run: a verl phase's time is not when
the supervisor read the line but verl's own clock: the "INFO:<time>:" of the v1 trainer's
logger on the line itself or, for a line without one, a neighbour's: the rollout servers'
print takes the next line's (verl logs "checkpoint engine manager initialized" right after
it), a step line the line's before (a run that saves every step logs "Saving checkpoint ...
global_step_N" or "Saved model ... global_step_N" just before step N's line). So the replay is
good to about a second only for runs that save every step (trainer.save_freq=1: the H200's
heal and hang runs); in others a step line's time is that of an earlier line. The device's
clock is UTC, as sf's events are.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from launcher import runs, states  # noqa: E402
from launcher.injob import verl_phases  # noqa: E402
from launcher.monitor import timeline  # noqa: E402

STAMP = re.compile(r"INFO:(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}):")
# a step line is timed by the line before it (the step's own checkpoint save), any other by the one after
BY_LINE_BEFORE = ("validated", "first_step")
DRIVER = re.compile(r"^\[sf [\d:]+\] phase driver_started")


def stamp(line: str) -> float | None:
    found = STAMP.search(line)
    if not found:
        return None
    when = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
    return when.timestamp()


def verl_events(log_lines: list[str], driver_times: list[float]) -> list[dict]:
    """verl_phase events of each driver start in the log, timed by verl's own clock."""
    events, start, pending, before = [], -1, [], None
    seen: set[str] = set()
    for line in log_lines:
        if DRIVER.match(line):
            start += 1
            seen, pending, before = set(), [], None
            continue
        if start < 0:
            continue
        when = stamp(line)
        if when is not None and when < driver_times[min(start, len(driver_times) - 1)]:
            when = None  # a line of an earlier driver printed late: not this start's
        found = verl_phases.match(line)
        if found and found["name"] not in seen:
            seen.add(found["name"])
            if when is None and found["name"] in BY_LINE_BEFORE and before is not None:
                events.append({"phase": states.VERL_PHASE, "time": before, **found})
            else:
                pending.append(found)
        if when is not None:
            for event in pending:
                events.append({"phase": states.VERL_PHASE, "time": when, **event})
            pending, before = [], when
    return events


def replay(run_dir: Path) -> list[dict]:
    sf_events = runs.read_phases(run_dir)
    driver_times = [e["time"] for e in sf_events if e["phase"] == states.DRIVER_STARTED]
    lines: list[str] = []
    for log in sorted((run_dir / "logs").glob("slurm-*.out")):
        lines += log.read_text(errors="replace").splitlines()
    merged = sorted(sf_events + verl_events(lines, driver_times), key=lambda e: e["time"])
    return timeline.attempts(merged)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = replay(args.run_dir)
    if args.json:
        print(json.dumps({"run": args.run_dir.name, "attempts": rows}, indent=2))
    else:
        print(timeline.format_timeline(args.run_dir.name, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
