"""Daily use on the real dev cluster (issue 12): scheduler options reach real sbatch; one
attempt of a run at a time (per-run job name + --dependency=singleton)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_bringup import job_state, sf  # noqa: E402
from test_requeue import cleanup, experiment, wait_event  # noqa: E402

from launcher import slurm  # noqa: E402

SLEEPER = 'echo "test driver: attempt ${SLURM_RESTART_COUNT:-0}"; exec sleep 600'


def _wait(job: str, states: set[str], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    info: dict = {}
    while time.monotonic() < deadline:
        info = slurm.show_job(job)
        if info.get("JobState") in states:
            return info
        time.sleep(0.5)
    raise AssertionError(f"job {job}: {info.get('JobState')} ({info.get('Reason')}), not {states} after {timeout}s")


def test_scheduler_options_and_singleton_on_real_slurm(tmp_path):
    exp = experiment(tmp_path, max_requeues=1)
    proc = sf("submit", exp, "--json", "--exclude", "dev8", "--mail-type", "FAIL", "--mail-user", "sftest",
              "--sbatch", "comment=sf-daily", "--sbatch", "nice=10", env={"SF_TEST_DRIVER": SLEEPER})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, first = out["run"], Path(out["run_dir"]), out["job_id"]
    jobs = [first]
    try:
        info = slurm.show_job(first)
        # the options as Slurm understood them
        assert info["JobName"] == f"sf-{run}"
        assert info.get("ExcNodeList") == "dev8" and info.get("MailType") == "FAIL"
        assert info.get("MailUser") == "sftest" and info.get("Comment") == "sf-daily" and info.get("Nice") == "10"
        assert info.get("Dependency") in ("singleton", "(null)")  # (null) once satisfied
        wait_event(run_dir, "driver_started", restart=0, timeout=150)
        # the same run submitted again by hand (the script says how): it waits for the first
        second = subprocess.run(["sbatch", "--parsable", str(run_dir / "job.sbatch")], capture_output=True,
                                text=True, env={**os.environ, "SF_TEST_DRIVER": SLEEPER}, check=True,
                                timeout=30).stdout.strip().split(";")[0]
        jobs.append(second)
        time.sleep(5)
        info2 = slurm.show_job(second)
        assert info2["JobState"] == "PENDING" and info2["Reason"] == "Dependency", info2
        assert info2["Dependency"].startswith("singleton") and info2["JobName"] == f"sf-{run}"
        assert job_state(first) == "RUNNING"
        # a run that must wait for another job: --dependency through sf, as Slurm sees it
        proc = sf("submit", exp, "--json", "--dependency", f"afterok:{first}", env={"SF_TEST_DRIVER": SLEEPER})
        assert proc.returncode == 0, proc.stderr
        third = json.loads(proc.stdout)["job_id"]
        jobs.append(third)
        info3 = slurm.show_job(third)
        assert info3["JobState"] == "PENDING" and info3["Dependency"].startswith(f"afterok:{first}"), info3
        assert "singleton" in info3["Dependency"]
        # the first attempt ends: only then does the second start
        subprocess.run(["scancel", first], check=True)
        _wait(second, {"RUNNING"}, timeout=120)
        print(f"\nsingleton: job {second} of run {run} waited (Reason=Dependency) until job {first} ended")
    finally:
        for job in jobs:
            cleanup(job)
