"""Faults for a running sf GRPO job on the GPU, and what healing made of them (issue 23 item 4).

    python3 heal_watch.py RUN_DIR OUT.json [--kill-at 3] [--stop-at 6] [--requeue-at 0]
                          [--steps 10] [--timeout 1500]

It follows every step-record file of the run (<run>/metrics/attempt-*.jsonl: attempt-N.jsonl
for a Slurm attempt, attempt-N.K.jsonl for its K-th restart in place) and stamps each step
with the wall clock when it first appears. Then, in this order, each fault once:

  --kill-at S     once step S is logged: SIGKILL verl's training worker (the fused
                  actor/rollout/ref `ray::WorkerDict`; else vLLM's `EngineCore`): the driver
                  fails, sf restarts Ray and the driver in place from the last checkpoint
  --stop-at S     once step S is logged: SIGSTOP verl's trainer loop (`ray::TaskRunner`): no
                  step ever comes; sf's watchdog must find the hang, save stacks, restart
  --requeue-at S  (0: none) once step S is logged: USR1 to the batch shell, today's requeue
                  path, the baseline the two in-place restarts are held against

Each fault's time to the next step logged is the figure; OUT.json gets the stamps, the
faults, the run's heal events and the steps per file (0 completed steps lost: every file
after a fault starts at the step after the last one logged before it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

STEP = re.compile(rb'^\{"step": ?(\d+),')


# --this-job: only the processes of the run's own Slurm job (their SLURM_JOB_ID), when other
# runs' verl processes share the host (rl.sh stage learn runs several jobs on one GPU)
ONLY_JOB: str | None = None


def job_of_pid(pid: int) -> str | None:
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"SLURM_JOB_ID="):
                return item.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return None


def pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split() if int(p) != os.getpid()]
    return [p for p in pids if ONLY_JOB is None or job_of_pid(p) == ONLY_JOB]


def run_job(run_dir: Path) -> str | None:
    try:
        record = json.loads((run_dir / "record.json").read_text())
    except (OSError, ValueError):
        return None
    jobs = record.get("job_ids") or [record.get("job_id")]
    return str(jobs[-1]).split("+")[0] if jobs and jobs[-1] else None


def args_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


class Steps:
    """Every step record of the run, stamped when first seen, by file."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.offsets: dict[str, int] = {}
        self.stamps: list[dict] = []  # {"step", "file", "time"}

    def poll(self) -> None:
        for path in sorted(glob.glob(str(self.run_dir / "metrics" / "attempt-*.jsonl"))):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                m = STEP.match(line)
                if m:
                    self.stamps.append({"step": int(m.group(1)), "file": os.path.basename(path), "time": time.time()})

    def last(self) -> int:
        return max((s["step"] for s in self.stamps), default=0)

    def first_after(self, t: float) -> dict | None:
        later = [s for s in self.stamps if s["time"] > t]
        return min(later, key=lambda s: s["time"]) if later else None


def kill_worker() -> dict:
    for pattern in ("^ray::WorkerDict", "WorkerDict", "EngineCore"):
        pids = pids_of(pattern)
        if pids:
            process = args_of(pids[0])  # before the kill: a dead process has no cmdline
            os.kill(pids[0], signal.SIGKILL)
            return {"signal": "SIGKILL", "pid": pids[0], "process": process, "pattern": pattern}
    return {"error": "no WorkerDict or EngineCore process found"}


def stop_trainer() -> dict:
    pids = pids_of("^ray::TaskRunner")
    if not pids:
        return {"error": "no ray::TaskRunner process found"}
    process = args_of(pids[0])
    os.kill(pids[0], signal.SIGSTOP)
    return {"signal": "SIGSTOP", "pid": pids[0], "process": process}


def requeue(run_dir: Path) -> dict:
    record = json.loads((run_dir / "record.json").read_text())
    job = str((record.get("job_ids") or [record.get("job_id")])[-1]).split("+")[0]
    rc = subprocess.run(["scancel", "--signal=USR1", "--batch", job]).returncode
    return {"signal": "USR1 (scancel --batch)", "job": job, "rc": rc}


def state_of(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "record.json").read_text()).get("state", "")).lower()
    except (OSError, ValueError):
        return ""


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    keep = ("hang", "stacks_saved", "restarted_in_place", "requeued", "driver_started", "ended", "allocated")
    out = []
    for line in path.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("phase") in keep:
            out.append(e)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out")
    ap.add_argument("--kill-at", type=int, default=3)
    ap.add_argument("--stop-at", type=int, default=6)
    ap.add_argument("--requeue-at", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=1500)
    ap.add_argument("--this-job", action="store_true", help="signal only the processes of the run's own job")
    ap.add_argument("--stop-file", default=None, help="stop following once this file exists (the run ended)")
    a = ap.parse_args()
    plan = [(s, name, fn) for s, name, fn in ((a.kill_at, "kill_worker", kill_worker),
                                              (a.stop_at, "stop_trainer", stop_trainer),
                                              (a.requeue_at, "requeue", lambda: requeue(a.run_dir))) if s > 0]
    steps, faults = Steps(a.run_dir), []
    end = time.time() + a.timeout
    while time.time() < end:
        steps.poll()
        if plan and steps.last() >= plan[0][0]:
            if a.this_job:
                global ONLY_JOB
                ONLY_JOB = run_job(a.run_dir)
            at, name, fn = plan.pop(0)
            fault = {"fault": name, "after_step": at, "time": time.time(), **fn()}
            print(f"[heal] {json.dumps(fault)}", flush=True)
            faults.append(fault)
        if steps.last() >= a.steps and not plan:
            break
        if not plan and (state_of(a.run_dir) in ("completed", "failed", "cancelled", "timeout")
                         or (a.stop_file and os.path.exists(a.stop_file))):
            steps.poll()
            break
        time.sleep(0.2)
    for f in faults:
        nxt = steps.first_after(f["time"])
        f["next_step"] = nxt and nxt["step"]
        f["fault_to_next_step_s"] = nxt and round(nxt["time"] - f["time"], 1)
    by_file: dict[str, list[int]] = {}
    for s in steps.stamps:
        by_file.setdefault(s["file"], []).append(s["step"])
    result = {"faults": faults, "steps_by_file": by_file, "last_step": steps.last(),
              "events": events(a.run_dir), "stamps": steps.stamps}
    Path(a.out).write_text(json.dumps(result, indent=1))
    for f in faults:
        print(f"[heal] {f['fault']} after step {f['after_step']}: next step {f['next_step']} "
              f"{f['fault_to_next_step_s']} s later")
    print(f"[heal] steps by file: {by_file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
