"""Endings and timing that read true (issue 47), on the real dev cluster:

  - a node failure of a --requeue job: while the job pends again, `sf status` counts the
    requeue (slurmctld's Restarts; sf's record and accounting lag) and shows no reason of the
    failed attempt; once it runs again, ELAPSED counts both attempts.

Waits are on events and states (no fixed sleeps); the node is failed only when the job is
alone on it, and resumed after.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import REQUEUE_DRIVER, cleanup, experiment, phases, sf, submit_driver, wait_event, wait_until  # noqa: E402

from launcher.monitor import progress  # noqa: E402


def status_json(run: str) -> dict:
    proc = sf("status", run, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"][0]


def alone_on(node: str, job: str) -> bool:
    """Whether `job` is the only job on `node`: a node failure must not hit other jobs."""
    jobs = subprocess.run(["squeue", "-h", "-w", node, "-o", "%A"], capture_output=True, text=True).stdout.split()
    return set(jobs) <= {job}


def test_a_node_failure_requeue_counts_at_once_and_elapsed_spans_both_attempts(tmp_path):
    exp = experiment(tmp_path, "node-fail", max_requeues=3, partition="teach")
    run, run_dir, job = submit_driver(exp, REQUEUE_DRIVER)
    node = None
    try:
        wait_event(run_dir, "driver_started", timeout=240)
        node = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"][0]
        wait_until(lambda: alone_on(node, job), 120, f"another job shares {node}: not failing it")
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=sf-test-node-failure"],
                       check=True)
        seen = []

        def pending_again():
            st = status_json(run)
            seen.append((st["state"], st["requeue_count"], st["reason"], st["progress"]))
            again = st["state"] in ("requeued", "pending")
            if again:  # from the first look on: counted, and no reason of the failed attempt
                assert st["requeue_count"] == 1, seen
                assert "fail" not in f"{st['reason']} {st['progress']}".lower(), seen
            return again

        wait_until(pending_again, 120, lambda: f"never pending again after the node failure: {seen}")
        print(f"\nnode failure, pending again: {seen[-1]}")
        wait_event(run_dir, "driver_started", restart=1, timeout=180)
        first = [e for e in phases(run_dir) if int(e.get("restart") or 0) == 0 and isinstance(e.get("time"), float)]
        attempt_0 = max(e["time"] for e in first) - next(e["time"] for e in first if e["phase"] == "allocated")
        st = status_json(run)
        shown = progress.elapsed_seconds(st["elapsed"])
        assert shown is not None and shown >= attempt_0 > 0, (st["elapsed"], attempt_0, st)
        assert st["requeue_count"] == 1, st
        print(f"elapsed over both attempts: {st['elapsed']} (attempt 0 ran {attempt_0:.1f} s)")
    finally:
        if node:
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False,
                           capture_output=True)
        cleanup(job)
