"""Benchmark 4: requeue turnaround of a real sf job.

    python benchmarks/requeue.py --work DIR --out FILE [--reps 3] [--nodes 2] [--checkout DIR]

One sf job (GRPO on N nodes of partition `all`, requeue on, the site's max_requeues) whose
driver is a trivial long-running command: the experiment's main.py (bench_driver.py,
MODE=block) waits for a signal. sf runs an experiment's main.py as the driver, so this
is the real sbatch script, supervisor, node wrapper, barrier and requeue trap.

Each repetition, once the driver runs: `scancel --signal=USR1 --batch JOB` (what Slurm's
`--signal=B:USR1@N` does before the wall-time limit), and then, from that moment:

  requeued_phase   the trap's `requeued` phase lands in events.jsonl
  left_running     scontrol stops reporting RUNNING (polled every 0.1 s)
  running_again    scontrol reports RUNNING with Restarts = k
  allocated / all_joined / driver_started   the supervisor's phases of attempt k
The job is cancelled at the end. The requeue delay of this Slurm is the credential
lifetime (dev cluster: AuthInfo=cred_expire=10), which bounds running_again from below.

--checkout DIR: sf and its job run from another checkout of sf (a git worktree of an earlier
commit), with this venv's packages: `sf submit` imports that checkout's launcher (PYTHONPATH),
so the script it renders runs that checkout's supervisor. Side by side with the current one:
the same benchmark, same machine, interleaved (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bringup import _jsonl, write_experiment  # noqa: E402
from common import log  # noqa: E402


def phase_of(run_dir: Path, name: str, job_id: str, restart: int) -> dict | None:
    for event in _jsonl(run_dir / "events.jsonl"):
        if event.get("phase") != name or str(event.get("job_id")) != job_id:
            continue
        if int(event.get("restart") or 0) == restart:
            return event
    return None


def wait_for(fn, timeout: float, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(poll)
    return None


def sf_env(checkout: Path | None) -> dict | None:
    """The environment `sf submit` runs in: that of this process, or one whose sf is `checkout`'s."""
    if checkout is None:
        return None
    if not (checkout / "launcher" / "__init__.py").is_file():
        raise SystemExit(f"--checkout {checkout}: no launcher/ there (a checkout of sf is wanted)")
    return {**os.environ, "PYTHONPATH": str(checkout.resolve())}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--checkout", type=Path, default=None, help="run sf and the job from this checkout of sf")
    args = p.parse_args(argv)
    work = args.work.resolve()
    site = common.bench_site(work)
    max_requeues = int(common.dev_site()["slurm"].get("max_requeues", 3))
    reps = min(args.reps, max_requeues)
    exp = write_experiment(work, f"requeue{args.nodes}", args.nodes, mode="block", requeue=True,
                           time_limit="00:15:00")
    common.wait_idle_nodes(args.nodes, "all", timeout=300)
    proc = common.run([common.SF, "submit", str(exp), "--site", str(site), "--json"], timeout=120,
                      env=sf_env(args.checkout))
    info = json.loads(proc.stdout[proc.stdout.index("{"):])
    job_id, run_dir = info["job_id"], Path(info["run_dir"])
    result = {"job_id": job_id, "run": info["run"], "nodes": args.nodes, "reps": [], "max_requeues": max_requeues,
              "checkout": str(args.checkout or common.REPO)}
    heads = set()
    try:
        first = wait_for(lambda: phase_of(run_dir, "driver_started", job_id, 0), timeout=240, poll=0.5)
        if not first:
            raise RuntimeError(f"job {job_id}: the driver never started (state {common.job_state(job_id)})")
        result["first_driver_started"] = first["time"]
        for k in range(1, reps + 1):
            time.sleep(1.0)  # let the attempt settle (the driver is up; nothing else to wait for)
            t_sig = time.time()
            common.run(["scancel", "--signal=USR1", "--batch", job_id])
            row = {"rep": k, "signal": t_sig}
            left = wait_for(lambda: common.job_state(job_id) != "RUNNING" and time.time(), timeout=60)
            row["left_running"] = left

            def running_again():
                job = common.show_job(job_id)
                return job.get("JobState") == "RUNNING" and int(job.get("Restarts", 0)) >= k and time.time()

            row["running_again"] = wait_for(running_again, timeout=180)
            for name in ("allocated", "all_joined", "driver_started"):
                event = wait_for(lambda n=name: phase_of(run_dir, n, job_id, k), timeout=180)
                row[name] = event["time"] if event else None
                if name == "allocated" and event:
                    heads = {(event.get("pools") or {}).get("train", [None])[0]}
            head = next(iter(heads - {None}), None)
            regs = [t for t in common.gcs_registrations(f"/tmp/sf{job_id}_{head}") if t >= t_sig] if head else []
            if regs:
                row["last_registration"] = max(regs)
                row["registered_nodes"] = len(regs)
                if row.get("all_joined"):
                    row["barrier_lag_s"] = round(row["all_joined"] - max(regs), 3)
            requeued = [e for e in _jsonl(run_dir / "events.jsonl")
                        if e.get("phase") == "requeued" and e.get("time", 0) >= t_sig]
            row["requeued_phase"] = requeued[0]["time"] if requeued else None
            for key in ("requeued_phase", "left_running", "running_again", "allocated", "last_registration",
                        "all_joined", "driver_started"):
                if row.get(key):
                    row[f"{key}_s"] = round(row[key] - t_sig, 3)
            result["reps"].append(row)
            common.save(args.out, result)
            log(f"requeue {k}: trap {row.get('requeued_phase_s')}s, running again {row.get('running_again_s')}s, "
                f"driver again {row.get('driver_started_s')}s after the signal")
    except Exception as exc:
        result["error"] = f"{exc.__class__.__name__}: {exc}"
        log(f"requeue benchmark failed: {result['error']}")
    finally:
        common.scancel(job_id)
        common.wait_job_end(job_id, timeout=60)
        common.remove_temp_dirs(job_id)
        common.save(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
