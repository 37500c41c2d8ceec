"""Step timing and peak memory of a verl SFT run, the same way for sf and for bare torchrun.

verl's `file` logger (trainer.logger=[console,file]) writes one JSON line per step to
<cwd>/<project_name>/<experiment_name>.jsonl, unbuffered, right after the step's metrics
are computed. `watch` polls that file every 2 ms and stamps each new line with the wall
clock, so the interval between two lines is one whole step (data loading, forward,
backward, optimizer, logging), measured identically for both launchers. `gpumem` samples
nvidia-smi's used memory (the whole process, CUDA context included). `summary` reduces
the stamps and verl's own metrics (perf/max_memory_allocated_gb, mfu) to numbers.

    python3 steptimes.py watch FILE STAMPS.jsonl --stop STOPFILE
    python3 steptimes.py gpumem CSV --stop STOPFILE
    python3 steptimes.py summary STAMPS.jsonl [--gpumem CSV] [--skip 10] [--every 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def watch(pattern: str, out: str, stop: str, interval: float = 0.002) -> None:
    """`pattern`: globs separated by '|' (sf points verl's file logger at
    <run_dir>/metrics/attempt-N.jsonl; bare verl writes <cwd>/<project>/<experiment>.jsonl).
    The newest file that appears after the watcher started is followed."""
    import glob

    t0 = time.time() - 1
    pos, buf, path = 0, b"", None
    with open(out, "a") as fo:
        while True:
            if path is None:
                found = [f for pat in pattern.split("|") for f in glob.glob(pat, recursive=True)]
                found = [f for f in found if os.path.getmtime(f) >= t0]
                path = max(found, key=os.path.getmtime) if found else None
                if path is None:
                    if os.path.exists(stop):
                        return
                    time.sleep(0.05)
                    continue
                print(f"watching {path}", flush=True)
            if os.path.exists(path):
                with open(path, "rb") as fi:
                    fi.seek(pos)
                    chunk = fi.read()
                now = time.time()
                if chunk:
                    pos += len(chunk)
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        fo.write(json.dumps({"t": now, "step": rec.get("step"), "data": rec.get("data")}) + "\n")
                        fo.flush()
            if os.path.exists(stop):
                return
            time.sleep(interval)


def gpumem(out: str, stop: str, interval_ms: int = 200) -> None:
    with open(out, "a") as fo:
        while not os.path.exists(stop):
            try:
                used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
                fo.write(f"{time.time():.3f},{used[0] if used else ''}\n")
                fo.flush()
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(interval_ms / 1000)


def summary(stamps: str, gpumem_csv: str | None, skip: int, every: int) -> dict:
    rows = [json.loads(line) for line in open(stamps) if line.strip()]
    train = [r for r in rows if isinstance(r.get("data"), dict) and "train/loss" in r["data"]]
    train.sort(key=lambda r: r["step"])
    by_step = {r["step"]: r for r in train}
    intervals = []
    for r in train:
        s = r["step"]
        prev = by_step.get(s - 1)
        if prev is None or s <= skip:
            continue
        # the interval after a validation/save step holds that validation/save too: leave it out
        if every and (s - 1) % every == 0:
            continue
        intervals.append(r["t"] - prev["t"])
    d = [r["data"] for r in train]
    mfu = [x["train/mfu"] for x in d[skip:] if x.get("train/mfu")]
    out = {
        "steps_logged": len(train),
        "first_step": train[0]["step"] if train else None,
        "last_step": train[-1]["step"] if train else None,
        "steps_timed": len(intervals),
        "step_time_mean_s": statistics.fmean(intervals) if intervals else None,
        "step_time_median_s": statistics.median(intervals) if intervals else None,
        "step_time_stdev_s": statistics.stdev(intervals) if len(intervals) > 1 else None,
        "wall_first_to_last_step_s": (train[-1]["t"] - train[0]["t"]) if len(train) > 1 else None,
        "peak_max_memory_allocated_gb": max((x.get("perf/max_memory_allocated_gb", 0) for x in d), default=None),
        "peak_max_memory_reserved_gb": max((x.get("perf/max_memory_reserved_gb", 0) for x in d), default=None),
        "mean_inv_mfu": statistics.fmean(1 / m for m in mfu) if mfu else None,
        "first_loss": d[0].get("train/loss") if d else None,
        "last_loss": d[-1].get("train/loss") if d else None,
        "val_loss": [(r["step"], r["data"]["val/loss"]) for r in rows
                     if isinstance(r.get("data"), dict) and "val/loss" in r["data"]],
    }
    if gpumem_csv and os.path.exists(gpumem_csv):
        vals = []
        for line in open(gpumem_csv):
            try:
                vals.append(float(line.split(",")[1]))
            except (IndexError, ValueError):
                pass
        out["nvidia_smi_peak_used_mib"] = max(vals) if vals else None
        out["nvidia_smi_samples"] = len(vals)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("file")
    w.add_argument("out")
    w.add_argument("--stop", required=True)
    g = sub.add_parser("gpumem")
    g.add_argument("out")
    g.add_argument("--stop", required=True)
    s = sub.add_parser("summary")
    s.add_argument("stamps")
    s.add_argument("--gpumem")
    s.add_argument("--skip", type=int, default=10)
    s.add_argument("--every", type=int, default=0)
    a = ap.parse_args(argv)
    if a.cmd == "watch":
        watch(a.file, a.out, a.stop)
    elif a.cmd == "gpumem":
        gpumem(a.out, a.stop)
    else:
        print(json.dumps(summary(a.stamps, a.gpumem, a.skip, a.every), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
