"""The progress watchdog on the real dev cluster (issue 23, item 1), through `sf submit`.

The driver is the SF_TEST_DRIVER hook (launcher/injob/supervise.py) running FROZEN (helpers.py)
on the runtime's Python, after the real bring-up: it joins the job's Ray cluster, starts
one actor on every node (each blocked in `generate_sequences`, as verl's rollout workers
would be), writes two step records to $VERL_FILE_LOGGER_PATH as verl's file logger does,
then stops itself with SIGSTOP in `freeze_in_rollout`: a driver that no longer makes steps.

  - the hang is found within hang_timeout_s + 10 s of the last step, a `hang` event names
    step 2, every node's py-spy stacks are saved (the frozen driver's frame on the head, the
    actor's on the worker node), `sf logs --stacks` prints them, the job is requeued
    (cause hang) and its next attempt completes;
  - with max_restarts_in_place: 1 the same hang restarts Ray and the driver in the same job
    instead (no requeue), and the restarted driver completes;
  - a driver that never makes a first step fails after first_step_timeout_s when the job
    may not be requeued, with the reason in the record.
Detection time is printed (pytest -s).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    cleanup,
    job_state,
    phases,
    restarts,
    sf,
    status,
    submit_driver,
    wait_event,
    wait_state,
    watchdog_experiment,
)

SILENT = "exec sleep 600"




def submit(exp: str, driver: str, finish_at: int = 99) -> tuple[str, Path, str]:
    return submit_driver(exp, driver, SF_TEST_FINISH_AT=str(finish_at))


def test_frozen_driver_is_found_stacks_saved_and_job_requeued(tmp_path):
    exp = watchdog_experiment(tmp_path, "frozen", nodes=2, hang_timeout_s=20, first_step_timeout_s=180, max_requeues=1)
    run, run_dir, job = submit(exp, f"exec python3 {exp}/frozen.py", finish_at=1)
    try:
        hang = wait_event(run_dir, "hang", timeout=240)
        records = [json.loads(line) for line in (run_dir / "metrics" / "attempt-0.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [1, 2]
        found_after = hang["time"] - records[-1]["data"]["sf_test/time"]
        assert 20 <= found_after <= 30, f"hang found {found_after:.1f} s after the last step (limit 20 s)"
        assert hang["last_step"] == 2 and hang["limit_s"] == 20 and hang["seconds_since"] >= 20
        assert hang.get("restart", 0) == 0
        saved = wait_event(run_dir, "stacks_saved", timeout=120)
        hosts = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"]
        assert sorted(saved["nodes"]) == sorted(hosts), (saved, hosts)
        head, worker = hosts[0], hosts[1]
        stacks = run_dir / hang["stacks"]
        head_text, worker_text = (stacks / f"{head}.txt").read_text(), (stacks / f"{worker}.txt").read_text()
        assert "freeze_in_rollout" in head_text, head_text  # the frozen driver, read without pausing it
        assert "generate_sequences" in head_text and "generate_sequences" in worker_text, worker_text
        # the attempt ends the way a failed one does: requeued while the bound allows
        requeued = wait_event(run_dir, "requeued", timeout=60)
        assert requeued["cause"] == "hang" and str(requeued["restart"]) == "1"
        assert requeued["reason"].startswith("hang: no training step for"), requeued
        assert "after step 2" in requeued["reason"]
        wait_event(run_dir, "driver_started", restart=1, timeout=180)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
        st = status(run)
        assert st["state"] == "completed" and st["requeue_count"] == 1, st
        shown = sf("logs", run, "--stacks")
        assert shown.returncode == 0 and "freeze_in_rollout" in shown.stdout and f"{worker}.txt" in shown.stdout
        only = sf("logs", run, "--stacks", "--node", worker)
        assert only.returncode == 0 and f"{head}.txt" not in only.stdout and "generate_sequences" in only.stdout
        print(f"\nfrozen driver: hang found {found_after:.1f} s after step 2 (limit 20 s); stacks of "
              f"{len(saved['nodes'])} nodes in {saved['seconds']} s; requeued, attempt 1 completed")
    finally:
        cleanup(job)


def test_frozen_driver_restarts_in_place(tmp_path):
    exp = watchdog_experiment(tmp_path, "frozeninplace", nodes=1, hang_timeout_s=15, first_step_timeout_s=180,
                     max_restarts_in_place=1)
    run, run_dir, job = submit(exp, f"exec python3 {exp}/frozen.py")
    try:
        hang = wait_event(run_dir, "hang", timeout=240)
        assert hang["last_step"] == 2 and hang["limit_s"] == 15
        restarted = wait_event(run_dir, "restarted_in_place", timeout=120)
        assert restarted["cause"] == "hang" and restarted["restart_in_place"] == 1
        assert restarted["reason"].startswith("hang: no training step for") and "after step 2" in restarted["reason"]
        assert (run_dir / hang["stacks"]).is_dir()
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=180) == "COMPLETED"
        assert restarts(job) == 0 and not any(e["phase"] == "requeued" for e in phases(run_dir))
        again = [json.loads(x)["step"] for x in (run_dir / "metrics" / "attempt-0.1.jsonl").read_text().splitlines()]
        assert again == [1, 2]  # this driver resumes from nothing: it has no checkpoint
        took = restarted["time"] - hang["time"]
        print(f"\nfrozen driver, max_restarts_in_place=1: hang, stacks and the stop took {took:.1f} s; "
              "the restarted driver completed in the same job")
    finally:
        cleanup(job)


def test_driver_without_a_first_step_fails_when_it_may_not_requeue(tmp_path):
    exp = watchdog_experiment(tmp_path, "silent", nodes=1, hang_timeout_s=20, first_step_timeout_s=15, requeue=False)
    run, run_dir, job = submit(exp, SILENT)
    try:
        started = wait_event(run_dir, "driver_started", timeout=180)
        hang = wait_event(run_dir, "hang", timeout=60)
        found_after = hang["time"] - started["time"]
        assert 15 <= found_after <= 25, found_after
        assert hang["first_step"] is True and hang["last_step"] is None
        assert wait_state(job, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=120) == "FAILED"
        reason = (run_dir / "reason").read_text()
        assert reason.startswith("hang: no training step for") and "after the driver started" in reason, reason
        assert "stacks" in reason
        assert not any(e["phase"] == "requeued" for e in phases(run_dir))
        st = status(run)
        assert st["state"] == "failed" and "hang: no training step" in st["exit_reason"], st
        print(f"\nsilent driver: hang found {found_after:.1f} s after it started (first_step_timeout_s 15): {reason}")
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "CANCELLED"):
            subprocess.run(["scancel", job], check=False)
