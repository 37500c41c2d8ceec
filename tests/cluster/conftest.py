"""Fixtures for tests that need the real dev Slurm cluster (scripts/dev-cluster).

These tests must run inside the cluster's network namespace: ``scripts/test`` (or
``scripts/dev-cluster exec -- .venv/bin/python -m pytest tests/cluster``). When Slurm does
not answer they FAIL: a test suite that silently skips its cluster tests proves nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.states import SLURM_TERMINAL as TERMINAL  # sf's one table of states

# The test files import their shared helpers as `from helpers import ...` (tests/cluster/helpers.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The tests' own runs folder, beside the user's (site/dev.yaml's runs_dir, where the quickstart's
# runs are): a pass submits ~100 runs, and `sf list` after scripts/test showed only those. Set
# here, before any test module imports helpers (helpers.RUNS reads it), and inherited by every
# sf the tests start; a test that needs a folder of its own still passes --runs-dir or its own
# $SF_RUNS_DIR. Same owner and mode as the user's folder (root, 0755: made in the slurm fixture).
TEST_RUNS = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev")) / "test-runs"
os.environ["SF_RUNS_DIR"] = str(TEST_RUNS)


@dataclass
class Slurm:
    """Thin helpers over the Slurm CLIs, for tests only (sf's own code uses launcher.slurm)."""

    def run(self, *args: str, timeout: float = 30, check: bool = True) -> str:
        p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(args)} -> rc {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def sbatch(self, *args: str, script: str | None = None, cwd=None) -> str:
        """Submit; return the job id. ``script`` is the batch script text (else use --wrap)."""
        p = subprocess.run(["sbatch", "--parsable", *args], input=script, capture_output=True,
                           text=True, timeout=30, cwd=cwd)
        if p.returncode != 0:
            raise AssertionError(f"sbatch {' '.join(args)} failed: {p.stderr}")
        return p.stdout.strip().split(";")[0]

    def sacct_states(self, job_id: str) -> dict[str, str]:
        """{job id (ID, ID+0, ID_3, ...): state} for the allocations of ``job_id``."""
        out = self.run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State", check=False)
        states = {}
        for line in out.splitlines():
            if "|" in line:
                jid, state = line.split("|", 1)
                states[jid] = state.split()[0] if state else state  # "CANCELLED by 0"
        return states

    def wait_terminal(self, job_id: str, timeout: float = 60, count: int = 1) -> dict[str, str]:
        """Wait until sacct shows at least ``count`` rows for the job, all in final states."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.sacct_states(job_id)
            if len(states) >= count and all(s in TERMINAL for s in states.values()):
                return states
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} not finished after {timeout}s: {states}\n"
                             + self.run("squeue", "-j", job_id, check=False))

    def show_job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False)
        fields = {}
        for tok in out.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def cancel(self, job_id: str) -> None:
        self.run("scancel", job_id, check=False)


@pytest.fixture(scope="session")
def slurm() -> Slurm:
    """The live dev cluster; fails (never skips) when Slurm does not answer."""
    hint = ("the dev Slurm cluster does not answer: run via scripts/test "
            "(or scripts/dev-cluster up, then scripts/dev-cluster exec -- "
            ".venv/bin/python -m pytest tests)")
    if not os.environ.get("SLURM_CONF"):
        pytest.fail(f"SLURM_CONF is not set; {hint}", pytrace=False)
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%P %D %t"], capture_output=True, text=True,
                           timeout=15)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"sinfo: {e}; {hint}", pytrace=False)
    if p.returncode != 0 or not p.stdout.strip():
        pytest.fail(f"sinfo rc={p.returncode}: {p.stderr.strip()}; {hint}", pytrace=False)
    TEST_RUNS.mkdir(mode=0o755, exist_ok=True)
    return Slurm()


@pytest.fixture(autouse=True)
def _require_cluster(slurm):
    """Every test under tests/cluster/ needs the live cluster."""
    return slurm


def pytest_collection_modifyitems(config, items):
    """Side by side (xdist), every worker's share starts with its longest tests (durations.py
    says why); one at a time, the collection's own order."""
    import durations

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    seconds = durations.load()
    if workers < 2 or not seconds:
        return
    typical = durations.typical(seconds)
    items[:] = durations.longest_first_on_every_worker(items, lambda item: seconds.get(item.nodeid, typical), workers)
