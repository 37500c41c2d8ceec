"""Every ending and every healing decision true (issue 35), on the real dev cluster.

The drivers are SF_TEST_DRIVER hooks after the real bring-up (launcher/injob/supervise.py):

  - a frozen worker node (every process of the job on it SIGSTOPped) in a pool with a spare:
    the hang's stacks dump names it as not answering, the restart in place leaves it out for
    the spare (never back onto the frozen node) and the job completes;
  - a trainer that logs step 2 again and again (and validation records): no progress, the
    hang is found at the limit after the first step 2; `sf status` said "step 2 (N s ago)"
    meanwhile;
  - a driver SIGKILLed (as the kernel's OOM killer does): the reason names the signal and
    the likely cause;
  - `scontrol requeue` by hand: the pending job already shows 1 requeue;
  - a node failure of a --requeue job: no poll reads it as ended while Slurm requeues it;
  - `sf logs -f` and a cancel: it ends after the job's last line (the supervisor's own).

Limits are seconds, waits are on events (no fixed sleeps).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    REQUEUE_DRIVER,
    TRAIN_AND_TEACH,
    cleanup,
    experiment,
    phases,
    restarts,
    sf,
    steps_logged,
    submit_driver,
    submit_trainer,
    sweep,
    wait_event,
    wait_json,
    wait_state,
    wait_steps,
)

RELOGGER = r'''
import json, os, time
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:
    for step in (1, 2):
        log.write(json.dumps({"step": step, "data": {"actor/pg_loss": 0.1, "sf_test/time": time.time()}}) + "\n")
        log.flush()
        time.sleep(0.5)
    while True:  # step 2 again, and validation at step 2: a trainer going round in circles
        time.sleep(1)
        log.write(json.dumps({"step": 2, "data": {"actor/pg_loss": 0.1}}) + "\n")
        log.write(json.dumps({"step": 2, "data": {"val-core/reward/mean@1": 0.5}}) + "\n")
        log.flush()
'''


def job_pids(job: str, node: str) -> list[int]:
    """Every process of `job` on emulated node `node` (its environment says so)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in raw and f"SLURMD_NODENAME={node}".encode() in raw:
            found.append(int(entry))
    return found


def freeze(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass


def test_frozen_node_is_left_out_for_the_spare(tmp_path):
    exp = experiment(tmp_path, "frozen-node", nodes=2, hang_timeout_s=6, first_step_timeout_s=120,
                     max_restarts_in_place=1)
    config = yaml.safe_load(Path(exp, "config.yaml").read_text())
    config["spec"]["resources"]["pools"][0]["spare_nodes"] = 1
    Path(exp, "config.yaml").write_text(yaml.safe_dump(config))
    run, run_dir, job = submit_trainer(exp, finish_in_place=1)
    frozen: list[int] = []
    try:
        wait_json(run_dir / "driver-0.json", timeout=420)  # three nodes: the shared dev cluster may be full
        wait_steps(run_dir, "attempt-0.jsonl", 2)
        head, worker = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"]
        frozen = job_pids(job, worker)
        assert frozen, f"no process of job {job} on {worker}"
        freeze(frozen)
        saved = wait_event(run_dir, "stacks_saved", timeout=60)
        assert list(saved["silent"]) == [worker] and "stopped" in saved["silent"][worker], saved
        event = wait_event(run_dir, "restarted_in_place", timeout=60)
        assert event["cause"] == "hang" and event["left_out"] == [worker], event
        spare = event["spares_used"][0]
        assert spare not in (head, worker)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
        again = [e for e in phases(run_dir) if e["phase"] == "all_joined"][-1]
        assert sorted(again["pools"]["train"]) == sorted([head, spare]), again  # not back onto the frozen node
        assert restarts(job) == 0 and steps_logged(run_dir, "attempt-0.1.jsonl") == [3, 4]
        text = sf("status", run).stdout
        assert f"node {worker} left out for spare {spare}" in text, text
        print(f"\nfrozen {worker}: {event['reason'][:300]}\n  -> restarted in place on {head}, {spare}")
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        cleanup(job)


def test_relogged_step_is_no_progress(tmp_path):
    exp = experiment(tmp_path, "relog", nodes=1, hang_timeout_s=8, first_step_timeout_s=120, requeue=False)
    Path(exp, "relog.py").write_text(RELOGGER)
    proc = sf("submit", exp, "--json", env={"SF_TEST_DRIVER": f"exec python3 {exp}/relog.py"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, job = out["run"], Path(out["run_dir"]), out["job_id"]
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "progress.json").exists():
            assert time.monotonic() < deadline, "no progress.json"
            time.sleep(0.3)
        shown = json.loads(sf("status", run, "--json").stdout)["runs"][0]
        assert shown["step"] == 2 and shown["progress"].startswith("step 2") and " s ago)" in shown["progress"], shown
        hang = wait_event(run_dir, "hang", timeout=60)
        records = [json.loads(line) for line in (run_dir / "metrics" / "attempt-0.jsonl").read_text().splitlines()]
        first_two = next(r for r in records if r["step"] == 2)["data"]["sf_test/time"]
        assert len(records) > 6, "the trainer re-logged step 2 while the clock ran"
        found_after = hang["time"] - first_two
        assert 8 <= found_after <= 14, f"hang found {found_after:.1f} s after the first step 2 (limit 8 s)"
        assert hang["last_step"] == 2, hang
        assert wait_state(job, {"FAILED", "COMPLETED"}, timeout=60) == "FAILED"
        reason = (run_dir / "reason").read_text()
        assert reason.startswith("hang: no training step for"), reason
        print(f"\nre-logged step: {shown['progress']!r} while running; reason: {reason.strip()[:200]}")
    finally:
        cleanup(job)


def submit_one_node(tmp_path, driver: str = REQUEUE_DRIVER, **slurm) -> tuple[str, Path, str]:
    return submit_driver(experiment(tmp_path, "one-node", max_requeues=3, **slurm), driver)


def status_json(run: str) -> dict:
    proc = sf("status", run, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"][0]


def test_a_sigkilled_driver_is_named_so(tmp_path):
    run, run_dir, job = submit_one_node(tmp_path, driver="kill -KILL $$", requeue=False)
    try:
        assert wait_state(job, {"FAILED", "COMPLETED"}, timeout=240) == "FAILED"
        reason = (run_dir / "reason").read_text()
        assert "was killed by SIGKILL (out of memory?" in reason and "exited with -9" not in reason, reason
        print(f"\nSIGKILLed driver: {reason.strip()}")
    finally:
        cleanup(job)


def test_a_hand_requeue_counts_at_once(tmp_path):
    run, run_dir, job = submit_one_node(tmp_path)
    try:
        wait_event(run_dir, "driver_started", timeout=240)
        subprocess.run(["scontrol", "requeue", job], check=True)
        ended = wait_event(run_dir, "ended", timeout=60)
        assert ended["ending"] == "requeued", ended
        st = status_json(run)
        assert st["requeue_count"] == 1 and st["state"] in ("pending", "requeued", "running"), st
        line = sf("status", run).stdout
        print(f"\nhand requeue, right after: {st['state']} / {st['progress']!r}, "
              f"requeues {st['requeue_count']}\n{line}")
        assert wait_event(run_dir, "restarted", restart=1, timeout=120)
        assert status_json(run)["requeue_count"] == 1
    finally:
        cleanup(job)


def alone_on(node: str, job: str, timeout: float = 120) -> bool:
    """Whether `job` is the only job on `node` (waits up to `timeout`): a node failure must not
    hit other engineers' jobs on the shared dev cluster."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = subprocess.run(["squeue", "-h", "-w", node, "-o", "%A"], capture_output=True, text=True).stdout.split()
        if set(jobs) <= {job}:
            return True
        time.sleep(1)
    return False


def test_a_node_failure_with_requeue_on_is_never_final(tmp_path):
    run, run_dir, job = submit_one_node(tmp_path, partition="teach")
    node = None
    try:
        wait_event(run_dir, "driver_started", timeout=240)
        node = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"][0]
        assert alone_on(node, job), f"another job shares {node}: not failing it"
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=sf-test-node-failure"],
                       check=True)
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = status_json(run)
            seen.append((st["slurm_state"], st["state"], st["done"]))
            assert not st["done"], seen  # never an ending: Slurm requeues it
            if st["state"] in ("requeued", "pending"):
                break
        assert seen[-1][1] in ("requeued", "pending"), seen
        print(f"\nnode failure, requeue on: {sorted(set(seen))}")
    finally:
        if node:
            # resumed by hand unless Slurm already returned it to service (then "Invalid node state")
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False,
                           capture_output=True)
        subprocess.run(["scancel", job], check=False)


def test_logs_follow_ends_after_the_last_line_of_a_cancel(tmp_path):
    run, run_dir, job = submit_one_node(tmp_path)
    try:
        wait_event(run_dir, "driver_started", timeout=240)
        follow = subprocess.Popen([str(Path(sys.executable).parent / "sf"), "logs", run, "-f"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        subprocess.run(["scancel", job], check=True)
        out, err = follow.communicate(timeout=150)
        assert follow.returncode == 0, err
        log = next((run_dir / "logs").glob("slurm-*.out")).read_text().rstrip().splitlines()
        assert any("cancelled:" in line for line in log), log[-10:]
        assert log[-1] in out, f"last line {log[-1]!r} missing from sf logs -f:\n{out[-2000:]}"
        print(f"\nsf logs -f after a cancel ended with: {out.rstrip().splitlines()[-1]!r}")
    finally:
        cleanup(job)


def test_a_cancelled_hetjob_sweep_reads_cancelled_and_its_points_point(tmp_path):
    exp = experiment(tmp_path, "hetcancel", example="distill", pools=TRAIN_AND_TEACH,
                     roles={"actor": "train", "rollout": "train", "teacher": "teach"})
    # held behind a held job: the points never start, the cancel is what ends them
    held = subprocess.run(["sbatch", "--parsable", "--hold", "-p", "train", "-o", "/dev/null", "--wrap", "true"],
                          capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    out = sweep(exp, "--grid", "rollout_n=4,8", "--dependency", f"afterany:{held}")
    jobs = [p["job_id"] for p in out["points"]]
    try:
        assert out["mode"] == "hetjobs" and len(jobs) == 2, out
        cancel = sf("cancel", out["sweep"])
        assert cancel.returncode == 0, cancel.stderr
        ours = {out["sweep"], *(p["run"] for p in out["points"])}
        listed = json.loads(sf("list", "--json", "--limit", "50").stdout)["runs"]
        mine = {r["id"]: r for r in listed if r["id"] in ours}
        assert mine[out["sweep"]]["state"] == "cancelled", mine
        assert mine[out["sweep"]]["kind"] == "sweep"
        assert all(mine[p["run"]]["kind"] == "point" for p in out["points"]), mine
        table = sf("list", "--limit", "50").stdout
        row = next(line for line in table.splitlines() if line.startswith(out["sweep"]))
        assert "cancelled" in row and "submitted" not in row, row
        print(f"\ncancelled hetjob sweep in sf list: {row}")
    finally:
        subprocess.run(["scancel", *jobs, held], check=False)
