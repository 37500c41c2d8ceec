"""The cluster tests' shared helpers: run sf, read a run's phase record, wait for an event.

Every wait here polls for the event it names (a phase in the run's record, a Slurm state, a
file) and returns as soon as it is there; none sleeps a fixed time. The test files import
from here (tests/cluster/conftest.py puts this folder on sys.path); the old homes
(test_bringup, test_requeue, ...) re-export these names for the files that still use them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.states import slurm_done

REPO = Path(__file__).resolve().parents[2]
SF = str(Path(sys.executable).parent / "sf")
# job states after which `scancel` has nothing left to do
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN")
# How long a job may pend before a wait's own timeout starts: tests run side by side
# (scripts/test -n), so a job may wait for nodes that other tests' jobs hold. Time in the
# queue is not what the tests measure; their timeouts count from the job's start.
QUEUE_WAIT_S = float(os.environ.get("SF_TEST_QUEUE_WAIT_S", "900"))


def sf(*args, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([SF, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})


def phases(run_dir) -> list[dict]:
    from launcher import runs

    return runs.read_phases(run_dir)


def phase(run_dir, name):
    return next((e for e in phases(run_dir) if e["phase"] == name), None)


def job_state(job_id: str) -> str:
    from launcher import slurm

    try:
        return slurm.show_job(job_id).get("JobState", "UNKNOWN")
    except Exception:
        return "UNKNOWN"


def wait_until(check, timeout: float, what, interval: float = 0.5):
    """Poll ``check()`` until it returns something truthy; return that value. After ``timeout``
    seconds raise AssertionError naming ``what`` (a string, or a function giving one, called
    then so the message shows the last state)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what() if callable(what) else what} (waited {timeout:.0f}s)")
        time.sleep(interval)


def wait_started(job: str) -> None:
    """Until the job has left the queue (QUEUE_WAIT_S at most)."""
    wait_until(lambda: job_state(job) != "PENDING", QUEUE_WAIT_S, f"job {job} still pending", interval=1)


def wait_event(run_dir: Path, name: str, timeout: float = 120, restart=None, **match) -> dict:
    """The first phase ``name`` in the run's record (of attempt ``restart`` when given, with
    the fields ``match``). ``timeout`` counts from the run's first phase (the job started)."""
    wait_until(lambda: phases(run_dir), QUEUE_WAIT_S, f"{run_dir}: its job never started", interval=1)
    def found():
        for event in phases(run_dir):
            if (event["phase"] == name and (restart is None or event.get("restart", 0) == restart)
                    and all(event.get(k) == v for k, v in match.items())):
                return event
        return None

    return wait_until(found, timeout, lambda: f"no {name} (restart {restart}, {match}) in {run_dir}:\n"
                      + "\n".join(json.dumps(e) for e in phases(run_dir)[-12:]))


def wait_state(job: str, states: set[str], timeout: float = 90) -> str:
    """The job's state (scontrol) once it is one of ``states``; ``timeout`` counts from its start."""
    if "PENDING" not in states:
        wait_started(job)
    last = {"state": ""}

    def reached():
        last["state"] = job_state(job)
        return last["state"] if last["state"] in states else None

    return wait_until(reached, timeout, lambda: f"job {job} is {last['state']}, not {states}")


def wait_terminal(job_id: str, timeout: float = 180) -> str:
    """The job's final state, once it has one; ``timeout`` counts from its start."""
    wait_started(job_id)
    def ended():
        state = job_state(job_id)
        return state if slurm_done(state) else None

    return wait_until(ended, timeout, f"job {job_id} did not end", interval=1)


def wait_json(path: Path, timeout: float = 180, accept=lambda data: True) -> dict:
    """The JSON object in ``path`` once the file holds one that ``accept`` takes."""
    def read():
        try:
            data = json.loads(path.read_text())
            return data if accept(data) else None
        except (OSError, ValueError, KeyError):
            return None

    return wait_until(read, timeout, f"no (new) {path}", interval=0.3)


def status(run: str) -> dict:
    proc = sf("status", run, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"][0]


def cleanup(job: str) -> None:
    if job_state(job) not in ENDED:
        subprocess.run(["scancel", job], check=False)
