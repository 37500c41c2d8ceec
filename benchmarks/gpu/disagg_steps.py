"""The numbers of rl.sh's `disagg` stage (issue 24 item 4), from the files the runs left.

    python3 disagg_steps.py --logs /tmp/sfw/logs --runs /tmp/sfw/runs --out results-disagg.json

Per run (d-sync: colocated GRPO over both GPUs; d-osp: one-step-off; d-async: fully async;
d-osp-rq / d-async-rq: the same with a requeue mid-run): rl_steps.run_summary (steps per
attempt, steps a requeue lost, phases, checkpoints) and the throughput from verl's own
timing: samples a trainer step takes (prompts x rollout.n, from the run's overrides) over the
median `timing_s/step` of the steady steps (each attempt's first step left out), and the same
over the wall time between the first and the last logged step of attempt 0 (rl.sh stamps
each line of verl's file logger as it appears: steptimes.py watch -> <tag>-stamps.jsonl),
which also counts what overlaps between steps in the async modes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_steps import attempts, metric, read_jsonl, read_text, run_summary  # noqa: E402

TAGS = ("d-sync", "d-osp", "d-async", "d-osp-rq", "d-async-rq")


def samples_per_step(run_dir: str) -> int | None:
    """Prompts a trainer step takes x rollout.n, read from the overrides the run was given."""
    ov = {}
    for line in (read_text(os.path.join(run_dir, "overrides.txt")) or "").splitlines():
        key, _, value = line.lstrip("+").partition("=")
        ov[key] = value
    try:
        n = int(ov["actor_rollout_ref.rollout.n"])
        prompts = int(ov.get("data.train_batch_size", "0"))
        if prompts == 0:  # fully async: ppo_mini_batch_size x require_batches
            prompts = int(ov["actor_rollout_ref.actor.ppo_mini_batch_size"]) * int(
                ov.get("async_training.require_batches", "1"))
    except (KeyError, ValueError):
        return None
    return prompts * n


def throughput(run_dir: str, stamps_file: str) -> dict:
    tries = attempts(run_dir)
    steady = []
    for rows in tries:
        times = metric(rows, "timing_s/step")
        first = min(times, default=None)
        steady += [t for step, t in times.items() if step != first]
    per_step = samples_per_step(run_dir)
    out = {"samples_per_step": per_step, "steady_steps": len(steady)}
    if steady and per_step:
        med = statistics.median(steady)
        out.update(median_step_s=round(med, 3), samples_per_s_verl_timing=round(per_step / med, 2))
    # trainer rows only: fully async's rollouter logs rows of its own (5 keys, no step time)
    # under its own counter, beside the trainer's
    stamps = sorted(r["t"] for r in read_jsonl(stamps_file)
                    if isinstance(r.get("t"), (int, float)) and "timing_s/step" in (r.get("data") or {}))
    if len(stamps) >= 3 and per_step:  # attempt 0 only (the watcher follows attempt-0.jsonl)
        out["samples_per_s_wall"] = round(per_step * (len(stamps) - 1) / (stamps[-1] - stamps[0]), 2)
    return out


def resumes(run_dir: str) -> list[dict]:
    """What each restart loaded, from verl's own lines in the run's Slurm logs: the checkpoint
    folder, and (fully async) the last parameter version the attempt before had synced, so
    `versions_redone` = trainer steps lost (the rows of verl's file logger lag behind its
    syncs, and fully async's rollouter rows share the step column: the logged rows cannot say it)."""
    out: list[dict] = []
    last_version = None
    for path in sorted(glob.glob(os.path.join(run_dir, "logs", "slurm-*.out"))):
        for line in (read_text(path) or "").splitlines():
            m = re.search(r"_fit_update_weights.*current_param_version: (\d+)", line)
            if m:
                last_version = int(m.group(1))
            m = re.search(r"Load from checkpoint folder: \S*global_step_(\d+)", line)
            if m:
                row = {"loaded": f"global_step_{m.group(1)}"}
                if last_version is not None:
                    row.update(last_version_synced_before=last_version,
                               versions_redone=last_version - int(m.group(1)))
                out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tags", default=",".join(TAGS), help="the runs to read (rl.sh disagg1: d1-osp-rq,d1-async-rq)")
    args = ap.parse_args()
    tags = [t for t in args.tags.split(",") if t]
    result = {"order": read_text(os.path.join(args.logs, "disagg-order.txt"))}
    for tag in tags:
        run_dir = read_text(os.path.join(args.logs, f"{tag}-run-dir.txt"))
        if not run_dir or not os.path.isdir(run_dir):
            result[tag] = {"missing": f"no run dir in {tag}-run-dir.txt"}
            continue
        stamps = os.path.join(args.logs, f"{tag}-stamps.jsonl")
        result[tag] = {**run_summary(run_dir), **throughput(run_dir, stamps), "resumes": resumes(run_dir)}
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1, default=str)
    for tag in tags:
        r = result[tag]
        print(f"{tag:11s} state={r.get('state')} steps={r.get('steps_per_attempt')} "
              f"lost={r.get('lost_steps_per_requeue')} samples/s (verl timing)={r.get('samples_per_s_verl_timing')} "
              f"(wall)={r.get('samples_per_s_wall')} resumes={r.get('resumes')}")


if __name__ == "__main__":
    main()
