"""Benchmark 3: what one `sf status` poll costs for 1, 10 and 100 array tasks.

    python benchmarks/monitor_cost.py --work DIR --out FILE [--polls 5] [--sizes 1,10,100]

For each size a real job array of trivial `sleep` tasks (4 CPUs each, partition `all`) is
submitted, with a sweep run record pointing at it (as `sf sweep` writes one), so
`sf status SWEEP` follows every task. While the arrays run (tasks pending, running and
completed at once), each poll is measured two ways:

  cli        `sf status SWEEP --json` as a child process (what a user runs, Python start-up
             included); Slurm commands counted by a PATH-free shim: SF_SLURM_BIN_DIR points
             sf at a folder of wrappers that log each invocation, then exec the real binary
  in-process launcher.monitor.poll.poll([run]) with launcher.slurm.CALLS before/after

plus one overview poll (`sf status` without a target) over all the sweeps at once.
Every array is cancelled at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import log  # noqa: E402

SLURM_COMMANDS = ("sacct", "squeue", "scontrol", "sbatch", "scancel", "srun", "sinfo", "sacctmgr", "sstat")
ARRAY_SCRIPT = """#!/bin/bash
#SBATCH --job-name=bx-mon{size} --partition=all --cpus-per-task=4 --mem=64M --time=5
#SBATCH --output=/dev/null --array=0-{last}
sleep {sleep_s}
"""


def make_shim(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in SLURM_COMMANDS:
        real = shutil.which(name)
        if not real:
            continue
        path = folder / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >>"$BX_SHIM_LOG"\nexec {real} "$@"\n')
        path.chmod(0o755)
    return folder


def cli_poll(run_id: str | None, root: Path, shim: Path, log_file: Path) -> dict:
    log_file.write_text("")
    env = dict(os.environ, SF_SLURM_BIN_DIR=str(shim), BX_SHIM_LOG=str(log_file))
    argv = [common.SF, "status", *([run_id] if run_id else []), "--runs-dir", str(root), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    calls = [line for line in log_file.read_text().splitlines() if line.strip()]
    doc = {}
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        pass
    runs_doc = doc.get("runs") or []
    points = [len(r.get("points") or []) for r in runs_doc]
    states = {}
    for r in runs_doc:
        for pt in r.get("points") or []:
            states[pt["state"]] = states.get(pt["state"], 0) + 1
    return {"wall_s": round(wall, 4), "slurm_calls": len(calls),
            "sacct_calls": sum(1 for c in calls if c.startswith("sacct ")),
            "commands": sorted({c.split()[0] for c in calls}), "rc": proc.returncode,
            "points": points, "point_states": states, "stderr_tail": proc.stderr.strip()[-300:]}


def inproc_poll(run, root: Path) -> dict:
    from launcher import slurm
    from launcher.monitor import poll as monitor

    before = dict(slurm.CALLS)
    t0 = time.perf_counter()
    statuses = monitor.poll([run], runs_dir=root)
    wall = time.perf_counter() - t0
    after = dict(slurm.CALLS)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    return {"wall_s": round(wall, 4), "slurm_calls": delta.get("total", 0), "sacct_calls": delta.get("sacct", 0),
            "calls": delta, "points": len(statuses[0].points) if statuses else 0}


def main(argv: list[str]) -> int:
    from launcher import runs

    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--polls", type=int, default=5)
    p.add_argument("--sizes", default="1,10,100")
    p.add_argument("--sleep", type=int, default=40, help="seconds each array task sleeps")
    args = p.parse_args(argv)
    work = args.work.resolve()
    root = work / "monitor-runs"
    root.mkdir(parents=True, exist_ok=True)
    shim = make_shim(work / "slurm-shim")
    sizes = [int(s) for s in args.sizes.split(",")]
    sweeps, array_ids = {}, []
    try:
        for size in sizes:
            run = runs.create_run(root, f"mon{size}", kind="sweep", points=[{"i": i} for i in range(size)])
            script = run.write_text("job.sbatch", ARRAY_SCRIPT.format(size=size, last=size - 1, sleep_s=args.sleep))
            array_id = common.sbatch([str(script)])
            array_ids.append(array_id)
            run.set_job_ids([array_id])
            run.add_state("submitted", job_id=array_id)
            sweeps[size] = (run, array_id)
        deadline = time.monotonic() + 120  # until every array has a task running (bounded)
        while time.monotonic() < deadline:
            running = common.run(["squeue", "-h", "-t", "RUNNING", "-o", "%F", "-j", ",".join(array_ids)],
                                 check=False).stdout.split()
            if set(array_ids) <= set(running):
                break
            time.sleep(0.5)
        time.sleep(2)  # sacct lags squeue by about a second
        result = {"sizes": sizes, "polls": args.polls, "sleep_s": args.sleep,
                  "arrays": {str(s): a for s, (_, a) in sweeps.items()}, "cli": {}, "inproc": {}, "overview": []}
        for i in range(args.polls):
            for size, (run, _) in sweeps.items():
                row = cli_poll(run.id, root, shim, work / "shim.log")
                row["poll"] = i
                result["cli"].setdefault(str(size), []).append(row)
                row2 = inproc_poll(run, root)
                row2["poll"] = i
                result["inproc"].setdefault(str(size), []).append(row2)
                log(f"poll {i} size {size:3d}: cli {row['wall_s']}s {row['slurm_calls']} slurm call(s) "
                    f"{row['commands']} points={row['points']} {row['point_states']}; in-process "
                    f"{row2['wall_s']}s {row2['calls']}")
            over = cli_poll(None, root, shim, work / "shim.log")
            over["poll"] = i
            result["overview"].append(over)
            log(f"poll {i} overview of {len(sweeps)} sweeps: {over['wall_s']}s {over['slurm_calls']} slurm call(s)")
            common.save(args.out, result)
            time.sleep(2)  # spacing between polls, so the tasks' states move on
        common.save(args.out, result)
    finally:
        common.scancel(*array_ids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
