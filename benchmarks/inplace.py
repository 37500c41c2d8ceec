"""Benchmark 5: a fault to the driver running again, restart in place against requeue.

    python benchmarks/inplace.py --work DIR --out FILE [--reps 3] [--nodes 2] [--requeue-from FILE]
                               [--checkout DIR]

Restart in place (issue 23): one sf job (GRPO on N nodes of partition `all`,
max_restarts_in_place = reps) whose driver is bench_driver.py in MODE=block. Each
repetition SIGKILLs the running driver (the fault) and times, from that moment:

  restarted_phase   the supervisor's `restarted_in_place` phase (Ray stopped on every node)
  all_joined        Ray up again in the same allocation (the barrier passed)
  driver_started    the driver running again (its own record in bench_driver.jsonl)

The same job id throughout; the Slurm restart count stays 0.

Against: today's requeue path, the fault to the driver running again through a Slurm
requeue (benchmarks/requeue.py: USR1 -> trap -> scontrol requeue -> Ray again -> driver).
Its result is read from --requeue-from (a requeue.json, benchmarks/suite.py runs requeue
first) or, where there is none, measured here first with the same node count. Prints the
medians and the ratio in place / requeue. --checkout DIR: sf and the job from another checkout of sf
(benchmarks/requeue.py says how), to compare two commits side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import requeue  # noqa: E402
from bringup import _jsonl, write_experiment  # noqa: E402
from common import log  # noqa: E402


def driver_record(run_dir: Path, in_place: int) -> dict | None:
    return next((e for e in _jsonl(run_dir / "bench_driver.jsonl") if e.get("in_place") == in_place), None)


def measure_in_place(work: Path, site: Path, reps: int, nodes: int, checkout: Path | None = None) -> dict:
    exp = write_experiment(work, f"inplace{nodes}", nodes, mode="block", requeue=True, time_limit="00:15:00")
    config = yaml.safe_load((exp / "config.yaml").read_text())
    config["slurm"]["max_restarts_in_place"] = reps
    (exp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    common.wait_idle_nodes(nodes, "all", timeout=300)
    proc = common.run([common.SF, "submit", str(exp), "--site", str(site), "--json"], timeout=120,
                      env=requeue.sf_env(checkout))
    info = json.loads(proc.stdout[proc.stdout.index("{"):])
    job_id, run_dir = info["job_id"], Path(info["run_dir"])
    result = {"job_id": job_id, "run": info["run"], "nodes": nodes, "reps": [],
              "checkout": str(checkout or common.REPO)}
    try:
        for k in range(0, reps):
            current = requeue.wait_for(lambda k=k: driver_record(run_dir, k), timeout=240, poll=0.2)
            if not current:
                raise RuntimeError(f"job {job_id}: driver {k} never started (state {common.job_state(job_id)})")
            time.sleep(1.0)
            t_fault = time.time()
            os.kill(int(current["pid"]), signal.SIGKILL)
            row = {"rep": k + 1, "fault": t_fault}
            again = requeue.wait_for(lambda k=k: driver_record(run_dir, k + 1), timeout=240, poll=0.1)
            row["driver_started"] = again["driver_start"] if again else None
            events = [e for e in _jsonl(run_dir / "events.jsonl") if e.get("time", 0) >= t_fault]
            for name, key in (("restarted_in_place", "restarted_phase"), ("all_joined", "all_joined")):
                event = next((e for e in events if e.get("phase") == name), None)
                row[key] = event["time"] if event else None
            for key in ("restarted_phase", "all_joined", "driver_started"):
                if row.get(key):
                    row[f"{key}_s"] = round(row[key] - t_fault, 3)
            row["slurm_restarts"] = int(common.show_job(job_id).get("Restarts", 0))
            result["reps"].append(row)
            log(f"in place {k + 1}: restarted phase {row.get('restarted_phase_s')}s, Ray up "
                f"{row.get('all_joined_s')}s, driver again {row.get('driver_started_s')}s after the kill")
    except Exception as exc:
        result["error"] = f"{exc.__class__.__name__}: {exc}"
        log(f"in-place benchmark failed: {result['error']}")
    finally:
        common.scancel(job_id)
        common.wait_job_end(job_id, timeout=60)
        common.remove_temp_dirs(job_id)
    return result


def median_of(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--requeue-from", type=Path, default=None, help="a requeue.json to compare with")
    p.add_argument("--checkout", type=Path, default=None, help="run sf and the job from this checkout of sf")
    args = p.parse_args(argv)
    work = args.work.resolve()
    site = common.bench_site(work)
    if args.requeue_from and args.requeue_from.is_file():
        requeued = json.loads(args.requeue_from.read_text())
    else:
        rq_out = args.out.with_name("requeue-for-inplace.json")
        requeue.main(["--work", str(work), "--out", str(rq_out), "--reps", str(args.reps),
                      "--nodes", str(args.nodes), *(["--checkout", str(args.checkout)] if args.checkout else [])])
        requeued = json.loads(rq_out.read_text())
    in_place = measure_in_place(work, site, args.reps, args.nodes, args.checkout)
    rq = median_of(requeued.get("reps", []), "driver_started_s")
    ip = median_of(in_place["reps"], "driver_started_s")
    result = {"nodes": args.nodes, "in_place": in_place, "requeue": requeued,
              "median_driver_again_s": {"in_place": ip, "requeue": rq},
              "ratio_in_place_to_requeue": round(ip / rq, 3) if ip and rq else None}
    common.save(args.out, result)
    log(f"fault -> driver running again, median over {args.reps}: in place {ip} s, requeue {rq} s, "
        f"ratio {result['ratio_in_place_to_requeue']} (target <= 0.5)")
    return 0 if result["ratio_in_place_to_requeue"] is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
