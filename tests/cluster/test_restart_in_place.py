"""Restart in place on the real dev cluster (issue 23, item 2), through `sf submit`.

The driver is the SF_TEST_DRIVER hook running TRAINER below on the runtime's Python: it
resumes from the step in the run's checkpoint tracker (what verl's resume_mode=auto does),
logs two steps to $VERL_FILE_LOGGER_PATH, saving a "checkpoint" (the tracker) after each,
and then either waits (to be killed) or, once restarted in place SF_TEST_FINISH_IN_PLACE
times, ends.

  - the driver killed mid-run: Ray and the driver come up again in the same job (same id,
    no Slurm requeue), the restarted driver resumes from step 2 and the job completes; the
    restart is an event and a line of `sf status`;
  - the same in a 1+1 node distillation hetjob: both het groups' Ray nodes come up again;
  - a worker killed in a pool with a spare node: the job goes on on the spare (same job
    id, no requeue) and completes, the dead node left out;
  - a worker node killed twice with max_restarts_in_place=1: the first death restarts in
    place, the second ends the job, its reason naming the node and the bound;
  - a worker node gone (its wrapper and Ray killed: no node_exit) with no spare: the job is
    requeued (same job id, restart 1, a `requeued` event naming the node and the cause),
    runs again from its checkpoint, and gone again at max_requeues=1 ends FAILED naming
    the bound (a run that keeps failing stops).
The time from the fault to the driver running again is printed (pytest -s).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    cleanup,
    experiment,
    hetjob_experiment,
    job_state,
    phases,
    restarts,
    sf,
    status,
    steps_logged,
    submit_trainer,
    wait_event,
    wait_json,
    wait_state,
    wait_steps,
)


def test_killed_driver_restarts_in_place_and_completes(tmp_path):
    exp = experiment(tmp_path, "inplace", nodes=1, max_restarts_in_place=1)
    run, run_dir, job = submit_trainer(exp, finish_in_place=1)
    try:
        first = wait_json(run_dir / "driver-0.json")
        wait_steps(run_dir, "attempt-0.jsonl", 2)
        killed = time.time()
        os.kill(first["pid"], signal.SIGKILL)
        again = wait_json(run_dir / "driver-1.json", timeout=120)
        took = again["time"] - killed
        event = wait_event(run_dir, "restarted_in_place", timeout=10)
        assert event["cause"] == "driver" and event["restart_in_place"] == 1 and event["resumed_from"] == 2, event
        assert again["resumed"] == 2
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
        assert restarts(job) == 0  # the same allocation: Slurm never requeued it
        assert steps_logged(run_dir, "attempt-0.jsonl") == [1, 2]
        assert steps_logged(run_dir, "attempt-0.1.jsonl") == [3, 4]  # 0 completed steps lost
        joined = [e for e in phases(run_dir) if e["phase"] == "all_joined"]
        assert len(joined) == 2 and {e["job_id"] for e in joined} == {job}  # Ray came up again, same job
        st = status(run)
        assert st["state"] == "completed" and st["requeue_count"] == 0, st
        assert [(r["n"], r["cause"], r["resumed_from"]) for r in st["restarts_in_place"]] == [(1, "driver", 2)]
        text = sf("status", run)
        assert "restart in place 1" in text.stdout and "cause driver, resumed from step 2" in text.stdout, text.stdout
        metrics = sf("metrics", run, "--json")
        assert metrics.returncode == 0, metrics.stderr
        assert [s for s, _v in json.loads(metrics.stdout)["data"]["actor/pg_loss"]] == [1, 2, 3, 4]
        print(f"\nkilled driver: running again in place {took:.1f} s later (job {job}, no requeue)")
    finally:
        cleanup(job)


def test_hetjob_restarts_in_place_across_its_groups(tmp_path):
    exp = hetjob_experiment(tmp_path, "hetinplace", max_restarts_in_place=1)
    run, run_dir, job = submit_trainer(exp, finish_in_place=1)
    try:
        first = wait_json(run_dir / "driver-0.json")
        wait_steps(run_dir, "attempt-0.jsonl", 2)
        os.kill(first["pid"], signal.SIGKILL)
        wait_json(run_dir / "driver-1.json", timeout=120)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
        joined = [e for e in phases(run_dir) if e["phase"] == "all_joined"]
        assert len(joined) == 2 and all(len(e["pools"]) == 2 for e in joined), joined  # train and teach, twice
        assert restarts(job) == 0 and steps_logged(run_dir, "attempt-0.1.jsonl") == [3, 4]
        print(f"\nhetjob: restarted in place across both groups ({joined[1]['pools']})")
    finally:
        cleanup(job)


def test_killed_worker_is_replaced_by_the_spare_node(tmp_path):
    import yaml

    exp = experiment(tmp_path, "spare", nodes=2, max_restarts_in_place=1)
    config = yaml.safe_load(Path(exp, "config.yaml").read_text())
    config["spec"]["resources"]["pools"][0]["spare_nodes"] = 1
    Path(exp, "config.yaml").write_text(yaml.safe_dump(config))
    run, run_dir, job = submit_trainer(exp, finish_in_place=1)
    try:
        wait_json(run_dir / "driver-0.json")
        wait_steps(run_dir, "attempt-0.jsonl", 2)
        allocated = next(e for e in phases(run_dir) if e["phase"] == "allocated")
        head, worker = allocated["pools"]["train"]
        joined = next(e for e in phases(run_dir) if e["phase"] == "all_joined")
        assert sorted(joined["pools"]["train"]) == sorted([head, worker]) and joined["ray_nodes"] == 2
        killed = [e for e in phases(run_dir) if e["phase"] == "node_started" and e["node"] == worker][-1]
        os.kill(killed["pid"], signal.SIGKILL)
        event = wait_event(run_dir, "restarted_in_place", timeout=60)
        assert event["cause"] == "node" and event["left_out"] == [worker], event
        spare = event["spares_used"][0]
        assert spare not in (head, worker)
        wait_json(run_dir / "driver-1.json", timeout=120)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
        again = [e for e in phases(run_dir) if e["phase"] == "all_joined"][-1]
        assert sorted(again["pools"]["train"]) == sorted([head, spare]), again  # the dead node left out
        assert restarts(job) == 0 and steps_logged(run_dir, "attempt-0.1.jsonl") == [3, 4]
        text = sf("status", run).stdout
        assert f"node {worker} left out for spare {spare}" in text, text
        print(f"\nspare: {worker} died, {spare} took its place in job {job}; completed")
    finally:
        cleanup(job)


def test_node_killed_past_the_bound_ends_the_job(tmp_path):
    exp = experiment(tmp_path, "inplacebound", nodes=2, max_restarts_in_place=1, requeue=False)
    run, run_dir, job = submit_trainer(exp, finish_in_place=99)
    try:
        hosts = None
        for k in (0, 1):
            wait_json(run_dir / f"driver-{k}.json")
            wait_steps(run_dir, "attempt-0.jsonl" if k == 0 else f"attempt-0.{k}.jsonl", 2)  # mid-run
            hosts = hosts or next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"]
            worker = [e for e in phases(run_dir) if e["phase"] == "node_started" and e["node"] == hosts[1]][-1]
            os.kill(worker["pid"], signal.SIGKILL)  # the worker's `ray start --block`
            if k == 0:
                event = wait_event(run_dir, "restarted_in_place", timeout=60)
                assert event["cause"] == "node" and event["nodes"] == [hosts[1]], event
        assert wait_state(job, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=120) == "FAILED"
        reason = (run_dir / "reason").read_text()
        assert hosts[1] in reason and "after 1 restart in place (max_restarts_in_place=1)" in reason, reason
        assert len([e for e in phases(run_dir) if e["phase"] == "restarted_in_place"]) == 1
        assert restarts(job) == 0
        print(f"\nworker killed twice, bound 1: {reason.strip()}")
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "CANCELLED"):
            cleanup(job)


def wait_new_driver(path: Path, old_pid: int, timeout: float = 240) -> dict:
    """driver-0.json written by a driver other than `old_pid` (the next attempt's)."""
    return wait_json(path, timeout, accept=lambda data: data["pid"] != old_pid)

def kill_node(run_dir: Path, node: str) -> None:
    """The job's processes on `node` die without a word: its wrapper (no node_exit written)
    and its `ray start`, as when the node itself goes."""
    started = [e for e in phases(run_dir) if e["phase"] == "node_started" and e["node"] == node][-1]
    for pid in (started["wrapper_pid"], started["pid"]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_node_gone_without_a_spare_requeues_then_stops_at_the_bound(tmp_path):
    exp = experiment(tmp_path, "gone", nodes=2, max_restarts_in_place=1, max_requeues=1)
    run, run_dir, job = submit_trainer(exp, finish_in_place=99)
    try:
        first = wait_json(run_dir / "driver-0.json")
        wait_steps(run_dir, "attempt-0.jsonl", 2)
        hosts = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"]
        killed = time.time()
        kill_node(run_dir, hosts[1])
        requeued = wait_event(run_dir, "requeued", timeout=60)
        assert requeued["cause"] == "node" and requeued["nodes"] == [hosts[1]] and requeued["restart"] == 1, requeued
        assert "went away" in requeued["reason"], requeued
        assert not [e for e in phases(run_dir) if e["phase"] == "restarted_in_place"]  # no spare: no gamble
        again = wait_new_driver(run_dir / "driver-0.json", first["pid"])
        took = again["time"] - killed
        assert again["resumed"] == 2  # from the checkpoint of the first attempt
        assert restarts(job) == 1 and wait_event(run_dir, "restarted", restart=1, timeout=10)
        st = status(run)
        assert st["job_ids"] == [job] and st["requeue_count"] == 1, st
        # gone again at the bound: no third attempt, the reason names the bound
        wait_steps(run_dir, "attempt-1.jsonl", 2)
        hosts = [e for e in phases(run_dir) if e["phase"] == "allocated"][-1]["pools"]["train"]
        kill_node(run_dir, hosts[1])
        assert wait_state(job, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=120) == "FAILED"
        reason = (run_dir / "reason").read_text()
        assert hosts[1] in reason and "not requeued: already requeued 1 times (max_requeues=1)" in reason, reason
        assert restarts(job) == 1
        assert "failed" in sf("status", run).stdout
        print(f"\nnode gone, no spare: requeued, driver running again {took:.1f} s later; at the bound: "
              f"{reason.strip()}")
    finally:
        cleanup(job)
