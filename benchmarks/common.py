"""Shared helpers of the benchmarks (run inside the dev cluster's namespace by run_all).

The benchmarks call Slurm directly (subprocess), not through launcher.slurm, so that
launcher.slurm.CALLS counts only what sf itself does.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# sf and the site the benchmarks start from: the venv's and the dev cluster's, unless a kit
# without either says otherwise (the GPU machine: benchmarks/gpu/rl.sh stage scale)
SF = os.environ.get("SF_BENCH_SF") or str(Path(sys.executable).parent / "sf")
BASE_SITE = Path(os.environ.get("SF_BENCH_SITE") or REPO / "site" / "dev.yaml")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED"}
GCS_REGISTER = "Registering new node"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(argv, *, timeout: float = 120, check: bool = True, env=None, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd or REPO, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({proc.returncode}): "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


# --- Slurm -------------------------------------------------------------------------------

def sbatch(args: list[str], env=None) -> str:
    out = run(["sbatch", "--parsable", *args], env=env).stdout.strip()
    return out.splitlines()[-1].split(";")[0]


def show_job(job_id: str) -> dict:
    proc = run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    fields = {}
    for token in proc.stdout.splitlines()[0].split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields


def job_state(job_id: str) -> str:
    return show_job(job_id).get("JobState", "GONE")


def wait_job_end(job_id: str, timeout: float, poll: float = 0.5) -> str:
    """Wait (bounded) until the job is in a terminal state; cancel it on timeout."""
    deadline = time.monotonic() + timeout
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state in TERMINAL or state == "GONE":
            return state
        time.sleep(poll)
    log(f"job {job_id} still {state} after {timeout:.0f}s: cancelling it")
    scancel(job_id)
    return f"TIMEOUT_WAITING({state})"


def wait_started(job_id: str, timeout: float, poll: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state not in ("PENDING", "CONFIGURING", "UNKNOWN"):
            return True
        time.sleep(poll)
    return False


def scancel(*job_ids: str) -> None:
    ids = [str(j) for j in job_ids if j]
    if ids:
        run(["scancel", *ids], check=False)


def wait_idle_nodes(n: int, partition: str = "all", timeout: float = 300) -> bool:
    """Wait (bounded) until at least n nodes of the partition are idle, so a job of n
    nodes starts at once and no other job's Ray shares the CPUs... as far as we can see."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %t"], check=False).stdout
        idle = sum(1 for line in out.splitlines() if line.split()[-1:] == ["idle"])
        if idle >= n:
            return True
        time.sleep(1)
    return False


def other_jobs() -> list[str]:
    out = run(["squeue", "-h", "-o", "%i %j %u %T %D"], check=False).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


# --- Ray artefacts -----------------------------------------------------------------------

def gcs_registrations(temp_dir: str) -> list[float]:
    """Epoch times of every "Registering new node" line in the head's GCS log under a Ray temp
    dir (the baselines' /tmp/sf<job>_<head>)."""
    logs = [p for p in Path(temp_dir).glob("session_*/logs/gcs_server.out")
            if p.parent.parent.name != "session_latest"]  # a symlink to the session itself
    return gcs_log_registrations(logs)


def sf_gcs_registrations(run_dir: Path, job_id: str, head: str) -> list[float]:
    """The same for an sf run: sf keeps each node's Ray logs in <run>/logs/ray/<job>-<node>/
    (its Ray temp dir under /tmp is gone when the job ends)."""
    return gcs_log_registrations([Path(run_dir) / "logs" / "ray" / f"{job_id}-{head}" / "gcs_server.out"])


def gcs_log_registrations(paths) -> list[float]:
    from datetime import datetime

    times = []
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if GCS_REGISTER in line and line.startswith("["):
                stamp = line[1:24]  # 2026-11-29 11:36:14,499
                times.append(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return sorted(times)


def remove_temp_dirs(job_id: str, root: str = "/tmp") -> None:
    """Remove the Ray temp dirs of one of OUR jobs (/tmp/sf<job>_<node>)."""
    for path in Path(root).glob(f"sf{job_id}_*"):
        shutil.rmtree(path, ignore_errors=True)


# --- site, stats, results ------------------------------------------------------------------

def dev_site() -> dict:
    """The site the benchmarks start from (BASE_SITE: site/dev.yaml unless set)."""
    return yaml.safe_load(BASE_SITE.read_text())


def bench_site(work: Path, health_check: str | None = None) -> Path:
    """The dev site with runs under the benchmark's work dir and a series on partition
    `all` (dev1-dev8, dev1-dev16 on a 16-node dev cluster), so every node of the cluster
    can be in one job and benchmark runs stay out of `sf list`. `health_check`: the site's
    `ray.health_check` (`always`: the node health check before every driver)."""
    data = dev_site()
    data["runs_dir"] = str(work / "runs")
    if health_check:
        data.setdefault("ray", {})["health_check"] = health_check
    base = dict(data["series"][data.get("default_series") or "fake"])
    base["partition"] = "all"
    data["series"]["benchall"] = base
    (work / "runs").mkdir(parents=True, exist_ok=True)
    path = work / "site.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def runtime_python(version: str = "0.9.1") -> str:
    reg = yaml.safe_load(Path(dev_site()["runtime_registry"]).read_text())
    return str(Path(reg["verl"][version]["path"]) / "bin" / "python")


def summary(values: list[float]) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "spread": None}
    return {"n": len(vals), "median": round(statistics.median(vals), 3), "min": round(min(vals), 3),
            "max": round(max(vals), 3), "spread": round(max(vals) - min(vals), 3)}


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def save(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)
