"""Run every benchmark in one session and write benchmarks/RESULTS.md (run by run_all).

    python benchmarks/suite.py [--reps 3] [--quick] [--only login,cpu,bringup,monitor,requeue,inplace,scale]
                               [--results DIR] [--md FILE]

Order: login-node cost, CPU cost of one node start, bring-up (the long one), monitoring
cost, requeue turnaround, then (not a target) sf before its barrier fix, for a before/after; each is its own process with a bounded run time, writing its
raw JSON into the results folder (benchmarks/results/<UTC stamp>/ by default) as it goes,
so an interrupted run still leaves what it measured. The host's load average is sampled
every 10 s throughout. At the end benchmarks/report.py turns the folder into RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import BENCH, REPO, log  # noqa: E402

ALL = ("login", "cpu", "bringup", "monitor", "requeue", "inplace", "fix")
# run only when named in --only: the scale benchmark (docs/scale.md) wants a 16-core host and a
# cluster of 64 nodes (SFDEV_NODES=64), not the shared 2-core one
OPTIONAL = ("scale",)


def utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def meta() -> dict:
    mem_kb = next(int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal"))
    model = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                  if l.startswith("model name")), platform.processor())
    py = common.runtime_python()
    versions = common.run([py, "-c", "import ray, importlib.metadata as m; print(ray.__version__, m.version('verl'))"],
                          timeout=120, check=False).stdout.split()
    commit = common.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
    dirty = common.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "launcher", "templates", "configs",
                        "site"], check=False).stdout.strip()
    return {"nproc": os.cpu_count(), "cpu_model": model, "mem_total_gb": round(mem_kb / 1024 / 1024, 1),
            "kernel": platform.release(),
            "slurm_version": common.run(["sinfo", "--version"], check=False).stdout.strip(),
            "ray_version": versions[0] if versions else None, "verl_version": versions[1] if len(versions) > 1 else None,
            "runtime": str(Path(py).parent.parent), "sf_commit": commit,
            "node_cpus": (common.run(["sinfo", "-h", "-N", "-p", "all", "-o", "%c"], check=False).stdout.split() or ["?"])[0], "sf_dirty": bool(dirty),
            "cluster_nodes": len(common.run(["sinfo", "-h", "-N", "-p", "all", "-o", "%N"], check=False).stdout.split()),
            "sf_dirty_files": dirty.splitlines()}


class LoadSampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[str, float]] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append((utc(), common.load_average()[0]))
            self.stop.wait(10)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3, help="repetitions of the bring-up matrix and the CPU cost")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 repetition, N=1,2, few polls")
    p.add_argument("--only", default=",".join(ALL), help="a subset of " + ",".join(ALL + OPTIONAL))
    p.add_argument("--results", type=Path, default=None)
    p.add_argument("--md", type=Path, default=BENCH / "RESULTS.md")
    p.add_argument("--nodes", default=None, help="bring-up sizes (default 1,2,4,8; 16 needs `scripts/dev-cluster "
                   "up --nodes 16`)")
    p.add_argument("--methods", default=None, help="bring-up methods (default sf,verl_example,naive_batched)")
    p.add_argument("--health-check", default=None, choices=("preflight", "always"),
                   help="the site's ray.health_check for sf's bring-up trials")
    p.add_argument("--extra-reps", default=None, help="N:K - K more sf-only bring-ups at N (a failure count)")
    args = p.parse_args(argv)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    results = (args.results or BENCH / "results" / stamp).resolve()
    results.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev")) / "bench" / stamp
    work.mkdir(parents=True, exist_ok=True)
    only = [o for o in args.only.split(",") if o]
    reps = 1 if args.quick else args.reps
    info = {"started_utc": utc(), "command": "benchmarks/run_all " + " ".join(argv), "load_before": common.load_average(),
            "work_dir": str(work), "quick": args.quick, **meta()}
    common.save(results / "meta.json", info)
    log(f"results -> {results}; work dir {work}; load {info['load_before']}")
    sampler = LoadSampler()
    sampler.start()
    py = sys.executable
    plan = {
        "login": ([py, BENCH / "login_cost.py", "--reps", "3" if args.quick else "7"], 300),
        "cpu": ([py, BENCH / "cpu_cost.py", "--reps", str(reps)], 120 + 240 * reps),
        "bringup": ([py, BENCH / "bringup.py", "--reps", str(reps),
                     "--nodes", args.nodes or ("1,2" if args.quick else "1,2,4,8"),
                     *(["--methods", args.methods] if args.methods else []),
                     *(["--health-check", args.health_check] if args.health_check else []),
                     *(["--extra-reps", args.extra_reps] if args.extra_reps else [])], 600 + 900 * reps),
        "monitor": ([py, BENCH / "monitor_cost.py", "--polls", "2" if args.quick else "5"], 600),
        "requeue": ([py, BENCH / "requeue.py", "--reps", "1" if args.quick else "3"], 900),
        # restart in place against the requeue figures above (measured first when they are missing)
        "inplace": ([py, BENCH / "inplace.py", "--reps", "1" if args.quick else "3",
                     "--requeue-from", results / "requeue.json"], 1200),
        # not a target: sf before the barrier fix (HEAD minus barrier_fix.patch), a before/after
        "fix": ([py, BENCH / "bringup.py", "--methods", "sf_prefix", "--reps", "1",
                 "--nodes", "1,2" if args.quick else "1,2,4,8"], 600),
        # sf against Ray alone at N nodes and the scale model (docs/scale.md)
        "scale": ([py, BENCH / "scale.py", "--reps", str(reps), "--nodes", args.nodes or "1,4,8,16,32,64"],
                  600 + 1200 * reps),
    }
    try:
        for name in ALL + OPTIONAL:
            if name not in only:
                continue
            cmd, limit = plan[name]
            log(f"== {name} (at most {limit} s)")
            t0 = time.monotonic()
            try:
                proc = subprocess.run([str(c) for c in cmd] + ["--work", str(work), "--out", str(results / f"{name}.json")],
                                      cwd=REPO, timeout=limit)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            info.setdefault("benchmarks", {})[name] = {"rc": rc, "seconds": round(time.monotonic() - t0, 1)}
            log(f"== {name} done in {time.monotonic() - t0:.0f} s (rc {rc})")
            info["load_samples"] = list(sampler.samples)
            common.save(results / "meta.json", info)
    finally:
        sampler.stop.set()
        info.update(finished_utc=utc(), load_after=common.load_average(), load_samples=list(sampler.samples))
        bring = results / "bringup.json"
        if bring.is_file():
            seen = set()
            for trial in json.loads(bring.read_text()).get("trials", []):
                for line in trial.get("other_jobs_before") or []:
                    seen.add(" ".join(line.split()[1:3]))
            info["other_jobs_seen"] = ", ".join(sorted(seen)) or "none"
        common.save(results / "meta.json", info)
        subprocess.run([py, str(BENCH / "report.py"), str(results), "--md", str(args.md)], cwd=REPO, check=False)
        log(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
