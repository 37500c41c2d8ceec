"""Issue 34's learning figures from what rl.sh stage `learn` left (device or here, offline).

    python3 learn_summary.py --logs LOGS_DIR [--runs RUNS_DIR] --out results-learn.json

Reads LOGS_DIR/{sft,learn}-run-dir.txt, sweep-id.txt and sft-pick.json, and each run's
metrics/*.jsonl through sf's own reader (launcher.monitor.metrics): per GRPO run the reward
(`critic/score/mean`) of the first and last 5 steps and their difference, the validation
score by step (`val-core/*/reward/mean@1`, or `val-core/*/acc/mean@1` as verl 0.9.1 logs
it), the median step time; for the SFT the loss at the picked checkpoint. With --runs the
run folders are looked up there by name (the tarball brought back from the device keeps
the device's paths).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from launcher.monitor import metrics as m  # noqa: E402

REWARD = "critic/score/mean"


def grpo_figures(run_dir: Path) -> dict:
    data = m.read_metrics(run_dir)
    reward = data.series.get(REWARD, [])
    values = [v for _, v in reward]
    out: dict = {"run": run_dir.name, "steps": data.steps, "reward_points": len(values)}
    if len(values) >= 10:
        first, last = statistics.mean(values[:5]), statistics.mean(values[-5:])
        out.update(first5=round(first, 4), last5=round(last, 4), gain=round(last - first, 4))
    if values:
        best = max(reward, key=lambda p: p[1])
        out.update(first=values[0], last=values[-1], best=best[1], best_step=best[0])
    for key in data.keys_matching("val-core/*/reward/mean*") + data.keys_matching("val-core/*/acc/mean*"):
        out.setdefault("validation", {})[key] = {str(s): round(v, 4) for s, v in data.series[key]}
    steps = [v for s, v in data.series.get("timing_s/step", []) if s > 1]
    if steps:
        out["median_step_s"] = round(statistics.median(steps), 3)
    out["reward_by_step"] = [[s, round(v, 4)] for s, v in reward]
    return out


def find(runs: Path | None, recorded: str) -> Path:
    path = Path(recorded.strip())
    return runs / path.name if runs is not None else path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True, type=Path)
    ap.add_argument("--runs", type=Path, default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    result: dict = {}
    pick_file = a.logs / "sft-pick.json"
    if pick_file.is_file():
        pick = json.loads(pick_file.read_text())
        result["sft_pick"] = {"pick": pick.get("pick"), "target": pick.get("target"),
                              "sampled": {s: round(e["sampled"]["mean"], 4) for s, e in pick["checkpoints"].items()
                                          if "sampled" in e},
                              "greedy": {s: round(e["greedy"]["mean"], 4) for s, e in pick["checkpoints"].items()
                                         if "greedy" in e}}
    sft = a.logs / "sft-run-dir.txt"
    if sft.is_file() and sft.read_text().strip():
        data = m.read_metrics(find(a.runs, sft.read_text()))
        result["sft"] = {"run": find(a.runs, sft.read_text()).name, "steps": data.steps,
                         "train_loss": {str(s): round(v, 4) for s, v in data.series.get("train/loss", [])
                                        if s % 10 == 0 or s == 1},
                         "val_loss": {str(s): round(v, 4) for s, v in data.series.get("val/loss", [])}}
    learn = a.logs / "learn-run-dir.txt"
    if learn.is_file() and learn.read_text().strip():
        result["learn"] = grpo_figures(find(a.runs, learn.read_text()))
    sweep_id = a.logs / "sweep-id.txt"
    if sweep_id.is_file() and sweep_id.read_text().strip():
        learn_dir = find(a.runs, learn.read_text()) if learn.is_file() else None
        root = a.runs or (learn_dir.parent if learn_dir else None)
        sweep_dir = root / sweep_id.read_text().strip() if root else None
        if sweep_dir and (sweep_dir / "record.json").is_file():
            record = json.loads((sweep_dir / "record.json").read_text())
            points = []
            for member in record.get("members") or []:
                rec = json.loads((root / member / "record.json").read_text())
                points.append({"params": rec.get("params"), "state": rec.get("state"),
                               **grpo_figures(root / member)})
            result["sweep"] = {"id": sweep_dir.name, "points": points}
    Path(a.out).write_text(json.dumps(result, indent=1))
    show = json.loads(json.dumps(result))
    for entry in [show.get("learn") or {}] + [p for p in (show.get("sweep") or {}).get("points", [])]:
        entry.pop("reward_by_step", None)
    print(json.dumps(show, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
