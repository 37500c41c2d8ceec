"""The cluster tests' order: the longest first on every worker.

pytest-xdist's worksteal hands each worker one contiguous share of the collection (worker i
gets len(rest) // (workers - i) of what is left, in order) and lets a worker that runs out
take the back half of the longest queue. A test of 60-100 s (a time limit, a hang, a
requeue) that sits late in a share starts late and ends the pass alone while the other
workers idle: in the fresh-clone run of 2026-12-03 21:33, the last minute of the cluster pass
kept the host about 20% busy. Ordered here, every share starts with its longest tests and
the short ones fill in at the end. A replay of that run's durations put it at 464 against
502 s at 4 workers (404 against 427 s at 6); measured, one pass each on the same host, the
difference was within the host's noise (4 workers: 457 s ordered, 448 s in file order), and
with only 6 train nodes the long tests first queued for nodes together (the pass's first two
minutes at 20-40% CPU), which the dev cluster's 10 train nodes since remove.

The seconds come from durations.json beside this file, the tests' durations of one earlier
pass (a test it does not name counts as the median). Refresh it from a pass's JUnit report:

    .venv/bin/python tests/cluster/durations.py /var/lib/sfdev/test-reports/cluster.xml
"""
from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

DURATIONS = Path(__file__).with_name("durations.json")


def worksteal_share_sizes(count: int, workers: int) -> list[int]:
    """How many of ``count`` tests each worker is first given (xdist's worksteal.check_schedule)."""
    sizes, left = [], count
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def longest_first_on_every_worker(items: list, seconds_of, workers: int) -> list:
    """``items`` reordered so that each worker's share begins with its longest tests: the
    longest overall dealt round-robin to the shares (largest-first), then shares concatenated."""
    ranked = sorted(items, key=lambda item: -seconds_of(item))  # stable: ties keep their order
    sizes = worksteal_share_sizes(len(items), workers)
    shares: list[list] = [[] for _ in sizes]
    turn = 0
    for item in ranked:
        while len(shares[turn % workers]) >= sizes[turn % workers]:
            turn += 1
        shares[turn % workers].append(item)
        turn += 1
    return [item for share in shares for item in share]


def load() -> dict[str, float]:
    """{pytest node id: seconds} of the earlier pass; empty when there is no file."""
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def typical(seconds: dict[str, float]) -> float:
    return statistics.median(seconds.values()) if seconds else 0.0


def from_junit(report: Path) -> dict[str, float]:
    """{node id: seconds of setup + call + teardown} from a pytest JUnit XML report."""
    seconds = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        seconds[f"{module}::{case.get('name')}"] = round(float(case.get("time", 0)), 1)
    return dict(sorted(seconds.items()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} CLUSTER_PASS_JUNIT.xml")
    DURATIONS.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {DURATIONS}")
