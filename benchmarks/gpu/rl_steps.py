"""The numbers of the GPU RL runs (rl.sh), from the files the runs left behind.

    python3 rl_steps.py --logs /tmp/sfw/logs --runs /tmp/sfw/runs --out results.json

Per sf run (grpo, trap, pair, distill): final record state and reason, the step numbers each
attempt logged (verl's file logger: <run>/metrics/attempt-N.jsonl) and how many completed
steps a requeue lost, phase times per attempt, the GPUs each node saw, verl's own step time
(`timing_s/step`) and peak memory, the distillation loss. For the GRPO run against its bare
twin (same overrides, other GPU, same time): the step-time ratio sf/bare over the steps both
ran in steady state (step 1 and each attempt's first step left out), with a paired bootstrap
95 % interval, and submit -> first logged step beside bare's start -> first step.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics

TAGS = ("grpo", "trap", "pair", "distill")
MEMORY = "actor/perf/max_memory_allocated_gb"  # verl's RL trainers log the actor's peak here


def read_jsonl(path: str) -> list[dict]:
    out = []
    try:
        with open(path) as handle:
            for line in handle:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def read_text(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def attempts(run_dir: str) -> list[list[dict]]:
    files = sorted(glob.glob(os.path.join(run_dir, "metrics", "attempt-*.jsonl")),
                   key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    return [read_jsonl(f) for f in files]


def lost_steps(per_attempt: list[list[int]]) -> list[int]:
    """Completed steps each restart had to redo or skipped: the next attempt should start at
    the last logged step + 1 (0 = nothing lost; > 0 redone; < 0 skipped)."""
    out = []
    for before, after in zip(per_attempt, per_attempt[1:], strict=False):
        if before and after:
            out.append(max(before) + 1 - min(after))
    return out


def phases(run_dir: str) -> list[dict]:
    keep = ("allocated", "head_up", "all_joined", "driver_started", "requeued", "restarted", "ended")
    out = []
    for event in read_jsonl(os.path.join(run_dir, "events.jsonl")):
        if event.get("phase") in keep:
            item = {k: event.get(k) for k in ("phase", "iso", "restart", "seconds", "reason", "rc") if k in event}
            if event.get("phase") == "all_joined":
                item["gpu_ids"] = event.get("gpu_ids")
                item["pools"] = event.get("pools")
            out.append(item)
    return out


def checkpoints(run_dir: str) -> list[str]:
    names = (os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "checkpoints", "global_step_*")))
    return sorted(names, key=lambda name: int(name.rsplit("_", 1)[1]))


def metric(rows: list[dict], key: str) -> dict[int, float]:
    return {r["step"]: r["data"][key] for r in rows if isinstance(r.get("data"), dict) and key in r["data"]}


def run_summary(run_dir: str) -> dict:
    record = {}
    try:
        with open(os.path.join(run_dir, "record.json")) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        pass
    tries = attempts(run_dir)
    steps = [[r["step"] for r in rows if "step" in r] for rows in tries]
    all_rows = [r for rows in tries for r in rows]
    out = {"run_dir": run_dir, "state": (record.get("states") or [{}])[-1].get("state") if record.get("states")
           else record.get("state"), "job_ids": record.get("job_ids"),
           "reason": read_text(os.path.join(run_dir, "reason")), "steps_per_attempt": steps,
           "lost_steps_per_requeue": lost_steps(steps), "phases": phases(run_dir),
           "step_time_s": metric(all_rows, "timing_s/step"),
           "max_memory_allocated_gb": max(metric(all_rows, MEMORY).values(), default=None),
           "checkpoints": checkpoints(run_dir)}
    for key in ("actor/distillation/loss", "critic/score/mean", "actor/pg_loss"):
        values = metric(all_rows, key)
        if values:
            out[key] = values
    out["first_step_of_attempt"] = [min(s) for s in steps if s]
    return out


def bootstrap_ratio(sf: list[float], bare: list[float], reps: int = 5000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(sf)
    ratios = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(statistics.fmean(sf[i] for i in idx) / statistics.fmean(bare[i] for i in idx))
    ratios.sort()
    return ratios[int(0.025 * reps)], ratios[int(0.975 * reps) - 1]


def first_stamp(path: str) -> float | None:
    rows = read_jsonl(path)
    return rows[0]["t"] if rows else None


def compare(grpo: dict, logs: str) -> dict:
    bare_rows = read_jsonl(os.path.join(logs, "bare-metrics.jsonl"))
    bare = metric(bare_rows, "timing_s/step")
    sf = {int(k): v for k, v in grpo.get("step_time_s", {}).items()}
    skip = {1, *grpo.get("first_step_of_attempt", [])}
    out = {"bare_steps": sorted(bare), "bare_max_memory_allocated_gb":
           max(metric(bare_rows, MEMORY).values(), default=None), "bare_step_time_s": bare,
           **step_ratio(sf, bare, skip)}
    t_sf, t_bare = read_text(os.path.join(logs, "grpo-t0.txt")), read_text(os.path.join(logs, "bare-t0.txt"))
    s_sf = first_stamp(os.path.join(logs, "grpo-stamps.jsonl"))
    s_bare = first_stamp(os.path.join(logs, "bare-stamps.jsonl"))
    if t_sf and s_sf:
        out["sf_submit_to_first_step_s"] = round(s_sf - float(t_sf), 1)
    if t_bare and s_bare:
        out["bare_start_to_first_step_s"] = round(s_bare - float(t_bare), 1)
    return out


def step_ratio(sf: dict[int, float], bare: dict[int, float], skip: set[int]) -> dict:
    """sf/bare over the steps both logged, `skip` left out: means, ratio, bootstrap 95 %."""
    common = sorted(s for s in set(sf) & set(bare) if s not in skip)
    out: dict = {"steps_compared": common}
    if len(common) >= 2:
        a, b = [sf[s] for s in common], [bare[s] for s in common]
        low, high = bootstrap_ratio(a, b)
        out.update(sf_mean_s=statistics.fmean(a), bare_mean_s=statistics.fmean(b),
                   ratio=statistics.fmean(a) / statistics.fmean(b), ratio_95ci=[low, high],
                   per_step_ratio_median=statistics.median(x / y for x, y in zip(a, b, strict=True)))
    return out


def orders(logs: str) -> dict:
    """The order check (rl.sh stage `orders`): per GPU lane, sf and bare one after the other
    (GPU 0 bare first, GPU 1 sf first), and both lanes' steps pooled."""
    out, pooled_sf, pooled_bare = {}, [], []
    for g in ("0", "1"):
        sf_dir = read_text(os.path.join(logs, f"o{g}-sf-run-dir.txt"))
        if not sf_dir:
            continue
        run = run_summary(sf_dir)
        bare_rows = read_jsonl(os.path.join(logs, f"o{g}-bare-metrics.jsonl"))
        sf = {int(k): v for k, v in run["step_time_s"].items()}
        bare = metric(bare_rows, "timing_s/step")
        lane = {"order": read_text(os.path.join(logs, f"o{g}-order.txt")), "sf_state": run["state"],
                "sf_steps": run["steps_per_attempt"], "bare_steps": sorted(bare),
                "sf_max_memory_allocated_gb": run["max_memory_allocated_gb"],
                "bare_max_memory_allocated_gb": max(metric(bare_rows, MEMORY).values(), default=None),
                **step_ratio(sf, bare, {1})}
        for who in ("sf", "bare"):
            t0, stamp = read_text(os.path.join(logs, f"o{g}-{who}-t0.txt")), first_stamp(
                os.path.join(logs, f"o{g}-{who}-stamps.jsonl"))
            if t0 and stamp:
                lane[f"{who}_start_to_first_step_s"] = round(stamp - float(t0), 1)
        for s in lane["steps_compared"]:
            pooled_sf.append(sf[s])
            pooled_bare.append(bare[s])
        out[f"gpu{g}"] = lane
    if len(pooled_sf) >= 2:
        low, high = bootstrap_ratio(pooled_sf, pooled_bare)
        out["pooled"] = {"pairs": len(pooled_sf), "ratio": statistics.fmean(pooled_sf) / statistics.fmean(pooled_bare),
                         "ratio_95ci": [low, high]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--orders", action="store_true", help="session 2: the order check, health, distill3")
    args = ap.parse_args()
    if args.orders:
        results = {"orders": orders(args.logs)}
        for tag in ("health-pre", "health-job", "distill3"):
            run_dir = read_text(os.path.join(args.logs, f"{tag}-run-dir.txt"))
            if run_dir:
                results[tag] = run_summary(run_dir)
        health = read_text(os.path.join(args.logs, "health-pre.json"))
        results["health_preflight"] = json.loads(health) if health and health.startswith("{") else health
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1, default=str)
        print(json.dumps({"orders": results["orders"], "health_preflight": results["health_preflight"]},
                         indent=1, default=str))
        return
    results = {}
    for tag in TAGS:
        run_dir = read_text(os.path.join(args.logs, f"{tag}-run-dir.txt"))
        if run_dir:
            results[tag] = run_summary(run_dir)
            results[tag]["submit"] = read_text(os.path.join(args.logs, f"{tag}-submit.json"))
    if "grpo" in results:
        results["grpo_vs_bare"] = compare(results["grpo"], args.logs)
    check = read_text(os.path.join(args.logs, "export_check.json"))
    results["export_check"] = json.loads(check) if check else None
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=1, default=str)
    brief = {tag: {k: results[tag].get(k) for k in ("state", "reason", "steps_per_attempt", "lost_steps_per_requeue")}
             for tag in TAGS if tag in results}
    brief["grpo_vs_bare"] = {k: v for k, v in results.get("grpo_vs_bare", {}).items() if "step_time" not in k}
    print(json.dumps(brief, indent=1, default=str))


if __name__ == "__main__":
    main()
