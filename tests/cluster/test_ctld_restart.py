"""`sf status` survives slurmctld being restarted (the dev cluster's own slurmctld).

A 2-point array sweep runs; slurmctld is stopped the way scripts/dev-cluster stops it (the
pid in $SF_DEV_STATE/pids/slurmctld.pid, checked to be a live slurmctld, SIGTERM, wait
until dead, zombies count as dead) and started again with `scripts/dev-cluster up` (which
starts only what is not running and waits until every node is up). While it is down,
`sf status SWEEP` still answers (sacct talks to slurmdbd); once it is back the jobs have
kept running and end completed. Whatever happens, the cluster is up again at the end.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import ONE_NODE, REPO, experiment, poll_until_done, sf, sweep  # noqa: E402

STATE = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev"))
PIDFILE = STATE / "pids" / "slurmctld.pid"
# Stopping slurmctld stalls every other job's sbatch/squeue: scripts/test runs this file alone,
# after the tests that share the cluster (-m serial).
pytestmark = pytest.mark.serial


def ctld_pid() -> int | None:
    """The recorded slurmctld pid when it is a live slurmctld (not a zombie), else None."""
    try:
        pid = int(PIDFILE.read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    state = stat.rsplit(")", 1)[1].split()[0]
    return pid if comm == "slurmctld" and state not in ("Z", "X") else None


def stop_ctld(timeout: float = 15) -> None:
    pid = ctld_pid()
    assert pid, f"no live slurmctld recorded in {PIDFILE}"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while ctld_pid() == pid:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            break
        time.sleep(0.2)


def start_ctld() -> None:
    """scripts/dev-cluster up: starts what is not running, waits for every node."""
    proc = subprocess.run([str(REPO / "scripts" / "dev-cluster"), "up"], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]


def nodes_up() -> bool:
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "all", "-o", "%N %t"], capture_output=True, text=True,
                         timeout=15).stdout.split("\n")
    states = [line.split()[1] for line in out if line.strip()]
    conf = Path(os.environ["SLURM_CONF"]).read_text().splitlines()
    configured = sum(1 for line in conf if line.startswith("NodeName="))
    return len(states) == configured and all(s.rstrip("*~#") in ("idle", "mix", "alloc", "comp") for s in states)


def sacct_running(array_id: str, count: int) -> bool:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", array_id, "-o", "JobID,State"], capture_output=True,
                         text=True, timeout=15).stdout
    return sum(1 for line in out.splitlines() if line.endswith("|RUNNING")) >= count


def test_status_survives_slurmctld_restart(tmp_path):
    exp = experiment(tmp_path, "ctld", pools=ONE_NODE)
    release = tmp_path / "release"  # the points' drivers run until it exists: through the restart
    out = sweep(exp, "--grid", "rollout_n=2,4", "--max-parallel", "2", env={"SF_TEST_UNTIL": str(release)})
    sweep_id, (array_id,) = out["sweep"], out["job_ids"]
    stopped = False
    try:
        deadline = time.monotonic() + 120
        while True:  # both points running with their driver started
            manifest = json.loads((Path(out["sweep_dir"]) / "manifest.json").read_text())
            dirs = [Path(p["run_dir"]) for p in manifest["points"]]
            if all((d / "driver-args.txt").exists() for d in dirs):
                break
            assert time.monotonic() < deadline, "points did not start"
            time.sleep(1)
        # slurmdbd lags slurmctld on a loaded host: with slurmctld down sacct is the only
        # source, so stop it only once sacct itself holds both tasks as RUNNING
        while not sacct_running(array_id, 2):
            assert time.monotonic() < deadline, "sacct never showed both points RUNNING"
            time.sleep(1)
        t0 = time.monotonic()
        stop_ctld()
        stopped = True
        assert subprocess.run(["scontrol", "ping"], capture_output=True, text=True).returncode != 0
        proc = sf("status", sweep_id, "--json", timeout=60)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["source"] == "sacct"
        assert [p["state"] for p in doc["runs"][0]["points"]] == ["running", "running"], doc["runs"][0]["points"]
        start_ctld()
        stopped = False
        down_s = time.monotonic() - t0
        proc = sf("status", sweep_id)
        assert proc.returncode == 0 and "running" in proc.stdout, proc.stdout + proc.stderr
        release.touch()
        status, _ = poll_until_done(sweep_id, timeout=120)
        assert [p["state"] for p in status.points] == ["completed", "completed"], status.points
        print(f"\nslurmctld down and back in {down_s:.1f}s; sf status answered from sacct meanwhile; "
              f"both points completed\n{sf('status', sweep_id).stdout}")
    finally:
        release.touch()
        if stopped or ctld_pid() is None:
            start_ctld()
        deadline = time.monotonic() + 60
        while not nodes_up() and time.monotonic() < deadline:
            time.sleep(1)
        assert ctld_pid() is not None and nodes_up(), "dev cluster not fully back up"
        subprocess.run(["scancel", array_id], check=False)
