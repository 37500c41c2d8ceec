"""Reduce one run.sh call's logs to results.json: sf vs bare step time and peak memory.

    python3 compare.py --logs DIR --every SAVE_FREQ --steps N --batch B --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from steptimes import summary  # noqa: E402


def _read(path: str):
    if not os.path.exists(path):
        return None
    text = open(path).read()
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def _intervals(path: str, skip: int, every: int):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if isinstance(r.get("data"), dict) and "train/loss" in r["data"]]
    t = {r["step"]: r["t"] for r in rows}
    data = {r["step"]: r["data"] for r in rows}
    iv = {s: t[s] - t[s - 1] for s in t if s - 1 in t and s > skip and not (every and (s - 1) % every == 0)}
    return iv, data


def paired(sf_path: str, bare_path: str, skip: int, every: int, n_boot: int = 2000):
    """Step k of sf against step k of bare (same data, same seed, same batches): the ratio
    of mean step times with a paired bootstrap 95% interval, and whether both runs
    computed the same losses."""
    import random
    import statistics as st

    if not (os.path.exists(sf_path) and os.path.exists(bare_path)):
        return None
    a, da = _intervals(sf_path, skip, every)
    b, db = _intervals(bare_path, skip, every)
    steps = sorted(set(a) & set(b))
    if len(steps) < 10:
        return None
    ra, rb = [a[s] for s in steps], [b[s] for s in steps]
    rng = random.Random(0)
    boots = []
    for _ in range(n_boot):
        idx = [rng.randrange(len(steps)) for _ in steps]
        boots.append(sum(ra[i] for i in idx) / sum(rb[i] for i in idx))
    boots.sort()
    common = sorted(set(da) & set(db))
    return {
        "steps_paired": len(steps),
        "ratio_of_mean_step_times": sum(ra) / sum(rb),
        "bootstrap_95ci": [boots[int(0.025 * n_boot)], boots[int(0.975 * n_boot)]],
        "mean_diff_s": st.fmean(x - y for x, y in zip(ra, rb)),
        "per_step_correlation": st.correlation(ra, rb),
        "same_tokens_every_step": all(da[s].get("train/global_tokens") == db[s].get("train/global_tokens") for s in common),
        "steps_with_same_loss_1e-6": sum(abs(da[s]["train/loss"] - db[s]["train/loss"]) < 1e-6 for s in common),
        "steps_compared": len(common),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--every", type=int, default=0)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--skip", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    L = a.logs
    res: dict = {"steps": a.steps, "batch": a.batch, "save_and_test_every": a.every,
                 "timing": f"interval between consecutive per-step lines of verl's file logger, "
                           f"stamped by a 2 ms poller; steps <= {a.skip} and the interval after each "
                           f"validation/checkpoint step left out"}
    for who in ("sf", "bare", "bare0", "sf2"):
        stamps = os.path.join(L, f"{who}-steps.jsonl")
        if os.path.exists(stamps) and os.path.getsize(stamps):
            res[who] = summary(stamps, os.path.join(L, f"{who}-gpumem.csv"), a.skip, a.every)
        else:
            res[who] = None
        res[f"{who}_wall"] = _read(os.path.join(L, f"{who}-wall.json"))
    for who, base in (("sf", "bare"), ("sf2", "bare"), ("sf", "bare0")):
        sf, bare = res.get(who) or {}, res.get(base) or {}
        for k in ("step_time_mean_s", "step_time_median_s", "peak_max_memory_allocated_gb",
                  "nvidia_smi_peak_used_mib", "mean_inv_mfu"):
            if sf.get(k) and bare.get(k):
                res[f"ratio_{who}_over_{base}_{k}"] = sf[k] / bare[k]
    res["paired_sf_vs_bare"] = paired(os.path.join(L, "sf-steps.jsonl"), os.path.join(L, "bare-steps.jsonl"),
                                      a.skip, a.every)
    r = res.get("ratio_sf_over_bare_step_time_mean_s")
    if r is not None:
        res["within_3_percent"] = abs(r - 1) <= 0.03
    res["export_workaround"] = _read(os.path.join(L, "sf-export-workaround.txt"))
    res["export_mode"] = _read(os.path.join(L, "sf-export-mode.txt"))
    res["export_job_state"] = _read(os.path.join(L, "sf-export-state.txt"))
    res["checkpoints"] = _read(os.path.join(L, "checkpoints.txt"))
    res["versions"] = _read(os.path.join(L, "versions.txt"))
    res["assets"] = _read(os.path.join(L, "assets.json"))
    res["notes"] = _read(os.path.join(L, "notes.txt"))
    text = json.dumps(res, indent=2, default=str)
    print(text)
    with open(a.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
