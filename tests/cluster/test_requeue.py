"""Requeue on the real dev cluster, through `sf submit` and the real batch script.

The driver is the SF_TEST_DRIVER test hook (launcher/injob/supervise.py): after the real
Ray bring-up it runs a shell command in place of verl, with verl's environment and
overrides. Here it writes what it was given (overrides, the wall-time end) into the run
dir and then sleeps, or ends at once from attempt SF_TEST_FINISH_AT on.

  - `scancel --signal=USR1 --batch` (what --signal=B:USR1@lead does at the wall-time lead)
    runs the trap: the job requeues, restarts with Ray up again, the record shows restart 1,
    the wall-time end is exported again (later), the overrides still resume from the run's
    absolute checkpoint dir, and a job that then ends normally is not requeued;
  - `scontrol requeue` by hand: the same restart 1;
  - the bound: with max_requeues=1 a second USR1 is refused (reason recorded, the job
    runs on), and a requeue past the bound is refused by the job itself (FAILED, reason).
Requeue turnaround (signal -> driver running again) is printed (pytest -s).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402, F401
    REPO,
    REQUEUE_DRIVER,
    cleanup,
    hetjob_experiment,
    job_state,
    phases,
    requeue_experiment,
    restarts,
    sf,
    status,
    submit_driver,
    touch_until,
    wait_event,
    wait_file,
    wait_state,
)


def submit(exp: str, finish_at: int) -> tuple[str, Path, str]:
    return submit_driver(exp, REQUEUE_DRIVER, SF_TEST_FINISH_AT=str(finish_at))


def requeue_once(tmp_path, how: str) -> None:
    run, run_dir, job = submit(requeue_experiment(tmp_path, max_requeues=3), finish_at=1)
    try:
        wait_event(run_dir, "driver_started", restart=0, timeout=120)
        first_end = int(wait_file(run_dir / "expires-0"))
        t0 = time.monotonic()
        if how == "signal":
            subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        else:
            subprocess.run(["scontrol", "requeue", job], check=True)
        wait_event(run_dir, "restarted", restart=1, timeout=120)
        started = wait_event(run_dir, "driver_started", restart=1, timeout=120)
        took = time.monotonic() - t0
        # the first attempt ended as a requeue, not as a dead node; running again, no stale reason
        ended = [e for e in phases(run_dir) if e["phase"] == "ended" and e.get("restart", 0) == 0]
        assert ended and ended[-1]["ending"] == "requeued" and ended[-1]["rc"] == 0, ended
        running = status(run)
        assert running["state"] == "running" and not running["exit_reason"], running
        assert not (run_dir / "reason").exists()
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=60) == "COMPLETED"
        time.sleep(2)
        assert job_state(job) == "COMPLETED" and restarts(job) == 1  # ended normally: not requeued again
        names = [(e["phase"], e.get("restart", 0)) for e in phases(run_dir)]
        if how == "signal":
            # the trap ran in attempt 0 and recorded the restart it asked for
            requeued = [e for e in phases(run_dir) if e["phase"] == "requeued"]
            assert len(requeued) == 1, names
            assert str(requeued[0]["restart"]) == "1" and requeued[0]["signal"] == "USR1"
        assert ("all_joined", 1) in names  # Ray came up again
        st = status(run)
        assert st["requeue_count"] == 1 and st["state"] == "completed", st
        # the wall-time end is exported again: the new attempt ends later
        second_end = int(wait_file(run_dir / "expires-1"))
        assert second_end > first_end, (first_end, second_end)
        wall = [e for e in phases(run_dir) if e["phase"] == "wall_time"]
        assert len(wall) == 2 and all(e["expires"] == e["job_end"] - 90 and e["may_requeue"] for e in wall), wall
        # resume: the restarted driver gets resume_mode=auto and the run's absolute checkpoint dir
        args = (run_dir / "driver-args-1.txt").read_text().splitlines()
        assert "trainer.resume_mode=auto" in args
        assert f"trainer.default_local_dir={run_dir}/checkpoints" in args
        print(f"\nrequeue by {how}: driver running again {took:.1f}s later "
              f"(restart 1 of max 3; Ray up in {started['seconds']:.1f}s of it)")
    finally:
        cleanup(job)


def test_requeue_by_usr1_signal_reruns_and_records_restart(tmp_path):
    requeue_once(tmp_path, "signal")


def test_requeue_by_scontrol_reruns_and_records_restart(tmp_path):
    requeue_once(tmp_path, "scontrol")


def test_bound_stops_a_job_that_keeps_being_requeued(tmp_path):
    run, run_dir, job = submit(requeue_experiment(tmp_path, max_requeues=1), finish_at=99)
    try:
        wait_event(run_dir, "driver_started", restart=0, timeout=120)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        wait_event(run_dir, "driver_started", restart=1, timeout=120)
        # at the bound the trap refuses: recorded, reason written, the job runs on
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        refused = wait_event(run_dir, "requeue_refused", timeout=30)
        assert str(refused["max_requeues"]) == "1" and str(refused["restarts"]) == "1"
        time.sleep(3)
        assert job_state(job) == "RUNNING" and restarts(job) == 1
        assert "requeue refused" in (run_dir / "reason").read_text()
        # a requeue past the bound (Slurm requeues --requeue jobs by itself too): the job refuses to run
        subprocess.run(["scontrol", "requeue", job], check=True)
        assert wait_state(job, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=120) == "FAILED"
        reason = (run_dir / "reason").read_text()
        assert "exceeds max_requeues=1" in reason, reason
        assert not any(e["phase"] == "driver_started" and e.get("restart") == 2 for e in phases(run_dir))
        st = status(run)
        assert st["state"] == "failed" and st["requeue_count"] == 2 and "max_requeues=1" in st["exit_reason"], st
        print(f"\nbound: {reason.strip()}")
    finally:
        cleanup(job)


def test_hetjob_requeues_as_one(tmp_path):
    """USR1 to a 1+1 node distillation hetjob: both het groups go back to the queue and come
    back together (one Ray cluster of 2 nodes again, restart 1 on every component)."""
    run, run_dir, job = submit(hetjob_experiment(tmp_path, "hetrequeue", max_requeues=2), finish_at=1)
    try:
        touch_until(run_dir, "driver_started", 0)
        t0 = time.monotonic()
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        started = touch_until(run_dir, "driver_started", 1)
        took = time.monotonic() - t0
        joined = [e for e in phases(run_dir) if e["phase"] == "all_joined"]
        assert [e.get("restart", 0) for e in joined] == [0, 1] and all(e["ray_nodes"] == 2 for e in joined)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=60) == "COMPLETED"
        from launcher import slurm

        info = slurm.show_job(job)
        parts = info.get("Components") or [info]
        assert len(parts) == 2 and all(p.get("Restarts") == "1" for p in parts), parts
        assert status(run)["requeue_count"] == 1
        print(f"\nhetjob requeue: both groups back, driver running again {took:.1f}s later "
              f"(Ray up in {started['seconds']:.1f}s)")
    finally:
        cleanup(job)


@pytest.fixture(autouse=True)
def _no_test_driver_leak(monkeypatch):
    monkeypatch.delenv("SF_TEST_DRIVER", raising=False)
