"""Endings and timing that read true (issue 47), on the real dev cluster:

  - a node failure of a --requeue job: while the job pends again, `sf status` counts the
    requeue (slurmctld's Restarts; sf's record and accounting lag) and shows no reason of the
    failed attempt; once it runs again, ELAPSED counts both attempts;
  - a model through a symbolic link under a mounted folder to one not mounted: the mount
    advice names the link's target;
  - a raylet alone stopped (SIGSTOP): the node's wrapper names the node within min(30 s,
    the hang limit), and the job's reason names it;
  - a container job (Slurm's --container, runc through scripts/sf-oci-run) requeued, then
    cancelled: its driver step of each attempt ends as a venv step does (CANCELLED by
    SIGTERM, not FAILED 15:0, runc's exit status), and the driver runs with umask 077.
    Only the driver step is asserted: it sleeps until a signal ends it. The Ray node steps
    end on their own once the signal reaches them (COMPLETED, or FAILED when the head went
    first: the order slurmstepd signals steps in is not fixed), so they prove nothing.

Waits are on events and states (no fixed sleeps); the node is failed only when the job is
alone on it, and resumed after.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    REPO,
    REQUEUE_DRIVER,
    RUNS,
    cleanup,
    experiment,
    phases,
    sf,
    submit_driver,
    wait_event,
    wait_until,
)

from launcher.monitor import progress  # noqa: E402
from launcher.states import SLURM_TERMINAL  # noqa: E402

STATE = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev"))
CONTAINER_REGISTRY = str(STATE / "runtimes-container.yaml")  # scripts/build-runtime publishes it
UMASK_DRIVER = r'''
n="${SLURM_RESTART_COUNT:-0}"
umask > "$FORGE_CLUSTER_RUN_DIR/.umask-$n.part"
mv "$FORGE_CLUSTER_RUN_DIR/.umask-$n.part" "$FORGE_CLUSTER_RUN_DIR/umask-$n"
exec sleep 600
'''


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
        # tests run side by side: wait until the others' jobs left the node (ours holds it)
        wait_until(lambda: alone_on(node, job), 420, f"another job shares {node}: not failing it", interval=2)
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
        # attempt 1 runs (Slurm's Elapsed counts again): its Ray need not come up for this
        wait_event(run_dir, "allocated", restart=1, timeout=180)
        first = [e for e in phases(run_dir) if int(e.get("restart") or 0) == 0 and isinstance(e.get("time"), float)]
        attempt_0 = max(e["time"] for e in first) - next(e["time"] for e in first if e["phase"] == "allocated")
        st = status_json(run)
        shown = progress.elapsed_seconds(st["elapsed"])
        # whole seconds, as Slurm writes them
        assert shown is not None and shown >= int(attempt_0) and attempt_0 > 0, (st["elapsed"], attempt_0, st)
        assert st["requeue_count"] == 1, st
        print(f"elapsed over both attempts: {st['elapsed']} (attempt 0 ran {attempt_0:.1f} s)")
    finally:
        if node:
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False,
                           capture_output=True)
        cleanup(job)


def settled_attempts(job: str) -> list[dict] | None:
    """sacct's rows of every attempt of `job` (-D), once the last attempt and all its steps are
    final: [{"job": state, "steps": {step id: (name, state, exit code)}}, ...]; None before."""
    out = subprocess.run(["sacct", "-D", "-n", "-P", "-j", job, "-o", "JobID,JobName,State,ExitCode"],
                         capture_output=True, text=True).stdout
    attempts: list[dict] = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 4:
            continue
        jid, name, state, code = parts
        state = state.split()[0] if state else state
        if "." not in jid:
            attempts.append({"job": state, "steps": {}})
        elif attempts:
            attempts[-1]["steps"][jid] = (name, state, code)
    last = attempts[-1] if attempts else None
    if not last or last["job"] not in SLURM_TERMINAL or any(
            st not in SLURM_TERMINAL for a in attempts for _, st, _ in a["steps"].values()):
        return None
    return attempts


def test_container_steps_end_as_venv_steps_and_the_driver_has_umask_077(tmp_path):
    exp = experiment(tmp_path, "ct-end", max_requeues=3)
    run, run_dir, job = submit_driver(exp, UMASK_DRIVER, FORGE_RUNTIME_REGISTRY_FILE=CONTAINER_REGISTRY)
    try:
        wait_event(run_dir, "driver_started", timeout=300)
        umask = wait_until(lambda: (run_dir / "umask-0").exists() and (run_dir / "umask-0").read_text().strip(), 60,
                           "the driver wrote no umask-0")
        assert umask == "0077", umask
        subprocess.run(["scontrol", "requeue", job], check=True)
        # the new attempt's driver runs (its own file: driver_started is recorded before its step exists)
        wait_until(lambda: (run_dir / "umask-1").exists() and (run_dir / "umask-1").read_text().strip(), 300,
                   "the driver of attempt 1 wrote no umask-1")
        subprocess.run(["scancel", job], check=True)
        wait_until(lambda: job_state_is_final(job), 120, f"job {job} not cancelled")

        def driver_steps():  # each attempt's driver step, once sacct has them all
            attempts = settled_attempts(job)
            if not attempts or len(attempts) < 2:
                return None
            found = [[(jid, *row) for jid, row in a["steps"].items() if row[0] == "sh"] for a in attempts]
            return found if all(len(f) == 1 for f in found) else None

        found = wait_until(driver_steps, 120, lambda: f"sacct of {job} did not settle: {settled_attempts(job)}")
        print(f"\ncontainer driver steps: {found}; all: {settled_attempts(job)}")
        for [(jid, _name, state, code)] in found:
            assert state == "CANCELLED" and code == "0:15", (jid, state, code, settled_attempts(job))
    finally:
        cleanup(job)


def job_state_is_final(job: str) -> bool:
    from launcher import slurm

    try:
        return slurm.show_job(job).get("JobState") in SLURM_TERMINAL
    except Exception:  # noqa: BLE001 - the controller forgot it: final
        return True


def test_a_link_under_a_mounted_folder_gets_the_mount_of_its_target(tmp_path):
    """The model is given through a symbolic link in a folder the bundle mounts (/tmp) to a
    folder it does not mount: the preflight's advice mounts the link's target (it named the
    path through the link, under a folder that is mounted already)."""
    outside = STATE / "ct-unmounted" / f"link-{os.getpid()}-{tmp_path.name}"
    try:
        shutil.copytree(REPO / "examples" / "assets" / "model", outside / "model")
        (tmp_path / "link").symlink_to(outside)
        model = tmp_path / "link" / "model"
        exp = experiment(tmp_path, "linked")
        data = yaml.safe_load((Path(exp) / "config.yaml").read_text())
        data["model"] = str(model)
        (Path(exp) / "config.yaml").write_text(yaml.safe_dump(data))
        proc = sf("submit", exp, "--preflight", "--wait", "--json",
                  env={"FORGE_RUNTIME_REGISTRY_FILE": CONTAINER_REGISTRY}, timeout=900)
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
        assert proc.returncode != 0, out
        report = json.loads((RUNS / out["run"] / "preflight.json").read_text())
        [line] = [f for f in report["failures"] if f.startswith("paths on ") and str(model) in f]
        assert "exists on the host but is not mounted in the container" in line, line
        assert f"--mount {outside} 0.9.1" in line, line
        print(f"\n{line}")
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def raylet_of(job: str) -> int | None:
    """The pid of the job's raylet (its environment names the job)."""
    for entry in os.listdir("/proc"):
        try:
            if not entry.isdigit() or Path(f"/proc/{entry}/comm").read_text().strip() != "raylet":
                continue
            if f"SLURM_JOB_ID={job}".encode() in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                return int(entry)
        except OSError:
            continue
    return None


def test_a_frozen_raylet_alone_is_named_as_its_node_within_the_limit(tmp_path):
    """SIGSTOP of the raylet only (the node's wrapper and `ray start` run on): the wrapper's
    watch names the node within min(30 s, the hang limit) = 20 s here, and the job's reason
    names that node (Ray alone found it after ~85 s, naming no node)."""
    exp = experiment(tmp_path, "frozen-raylet", hang_timeout_s=20, first_step_timeout_s=500, requeue=False)
    run, run_dir, job = submit_driver(exp, REQUEUE_DRIVER)
    try:
        wait_event(run_dir, "driver_started", timeout=240)
        node = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"][0]
        raylet = wait_until(lambda: raylet_of(job), 60, f"no raylet of job {job}")
        stopped_at = time.time()
        os.kill(raylet, signal.SIGSTOP)
        frozen = wait_event(run_dir, "node_frozen", timeout=120)
        assert frozen["node"] == node and frozen["pid"] == raylet, frozen
        found_after = frozen["time"] - stopped_at
        assert 20 <= found_after <= 60, f"found {found_after:.1f} s after the stop (limit 20 s)"
        reason = wait_until(lambda: (run_dir / "reason").exists() and (run_dir / "reason").read_text(), 120,
                            "no reason written")
        assert f"Ray node {node}" in reason, reason
        print(f"\nfrozen raylet found after {found_after:.1f} s; reason: {reason.strip()[:400]}")
    finally:
        cleanup(job)
