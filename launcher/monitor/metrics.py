"""Training metrics of a run, read from verl's file logger.

verl's FileLogger (verl/utils/tracking.py, class FileLogger) writes one JSON object per
`Tracking.log` call:

    {"step": <int>, "data": {"critic/score/mean": 0.41, "timing_s/gen": 12.3, ...}}

to $VERL_FILE_LOGGER_PATH (or $VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl), and it
opens that file with mode "wb": a job that restarts (Slurm requeue, resume) truncates it.
So the job points VERL_FILE_LOGGER_PATH at one file per attempt,

    <run_dir>/metrics/attempt-<SLURM_RESTART_COUNT or 0>.jsonl

and this module reads every `*.jsonl` under <run_dir>/metrics/ (and <run_dir>/metrics.jsonl
if present), oldest attempt first; a later attempt's value for the same step wins, because
verl logs the steps it redoes after a resume again.

Everything here is pure or read-only. Plots import matplotlib lazily (`pip install sf[plots]`).
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from launcher import runs
from launcher.errors import SpecError

METRICS_DIR = "metrics"
METRICS_FILE = "metrics.jsonl"

# The key series, in display order. A pattern with "*" matches several keys
# (e.g. val-core/openai/gsm8k/reward/mean@1).
KEY_SERIES: tuple[str, ...] = (
    "critic/score/mean",
    "val-core/*/reward/mean*",
    # verl 0.9.1's reward loop also returns `acc` (the score): its validation core variable is
    # then acc, not reward (seen on the H200: val-core/sf_tiny/acc/mean@1, reward in val-aux)
    "val-core/*/acc/mean*",
    "timing_s/gen",
    "timing_s/step",
    "response_length/mean",
    "actor/pg_loss",
    "critic/vf_loss",
    # on-policy distillation (verl logs it beside a pg_loss that stays near 0)
    "actor/distillation/loss",
    # SFT (verl.trainer.sft_trainer logs these)
    "train/loss",
    "val/loss",
)

# Panels of `sf plot`: title -> patterns drawn on one axis.
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("critic/score/mean", "val-core/*/reward/mean*", "val-core/*/acc/mean*")),
    ("time per step (s)", ("timing_s/step", "timing_s/gen")),
    ("response length", ("response_length/mean",)),
    ("loss", ("actor/pg_loss", "actor/distillation/loss", "critic/vf_loss", "train/loss", "val/loss")),
)


@dataclass
class Metrics:
    """Every numeric series of a run: key -> sorted [(step, value)]."""

    files: list[str]
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    skipped_lines: int = 0

    @property
    def steps(self) -> int:
        return max((s for points in self.series.values() for s, _ in points), default=0)

    def keys_matching(self, pattern: str) -> list[str]:
        if "*" in pattern or "?" in pattern:
            return sorted(k for k in self.series if fnmatch.fnmatchcase(k, pattern))
        return [pattern] if pattern in self.series else []

    def key_series(self) -> list[str]:
        seen: list[str] = []
        for pattern in KEY_SERIES:
            for key in self.keys_matching(pattern):
                if key not in seen:
                    seen.append(key)
        return seen


def _attempt_order(path: Path) -> tuple:
    """attempt-N.jsonl, then its restarts in place attempt-N.K.jsonl (K = 1, 2, ...)."""
    match = re.search(r"(\d+)(?:\.(\d+))?", path.stem)
    if not match:
        return (-1, 0, path.name)
    return (int(match.group(1)), int(match.group(2) or 0), path.name)


def metrics_files(run_dir: str | Path) -> list[Path]:
    """The file-logger outputs of a run, oldest attempt first."""
    run_dir = Path(run_dir)
    files = []
    single = run_dir / METRICS_FILE
    if single.is_file():
        files.append(single)
    folder = run_dir / METRICS_DIR
    if folder.is_dir():
        files.extend(sorted((p for p in folder.glob("*.jsonl") if p.is_file()), key=_attempt_order))
    return files


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int past 1e308: no value a plot or a table can hold
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, list) and len(value) == 1:  # a 1-element numpy array serialises so
        return _number(value[0])
    return None


def parse_lines(lines, metrics: Metrics) -> None:
    """Fold file-logger lines into `metrics` (later lines win for the same key and step)."""
    table: dict[str, dict[int, float]] = {k: dict(v) for k, v in metrics.series.items()}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
            step = int(entry["step"])
            data = entry["data"]
            if not isinstance(data, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            # a torn last line of a killed job, or not ours (a step of Infinity or NaN, nesting
            # deeper than Python's parser goes)
            metrics.skipped_lines += 1
            continue
        for key, value in data.items():
            number = _number(value)
            if number is not None:
                table.setdefault(str(key), {})[step] = number
    metrics.series = {k: sorted(v.items()) for k, v in table.items()}


def read_metrics(run_dir: str | Path) -> Metrics:
    files = metrics_files(run_dir)
    metrics = Metrics(files=[str(f) for f in files])
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as handle:
            parse_lines(handle, metrics)
    return metrics


def load_run_metrics(run_dir: str | Path, run_id: str = "") -> Metrics:
    """Metrics of a run; SpecError saying how to get them when the run has none."""
    metrics = read_metrics(run_dir)
    if not metrics.files:
        raise SpecError(
            "run",
            f"run {run_id or run_dir} has no metrics file ({Path(run_dir) / METRICS_DIR}/*.jsonl); "
            "runs submitted by this sf log them with trainer.logger=[console,file] once verl has "
            "finished its first step",
        )
    if not metrics.series:
        raise SpecError("run", f"the metrics files of run {run_id or run_dir} hold no step yet; try again later")
    return metrics


def summarize(metrics: Metrics) -> dict:
    """Per key series: points, first/last step and value, min, max; plus the generation
    share of step time (mean timing_s/gen / mean timing_s/step)."""
    out: dict = {"steps": metrics.steps, "files": metrics.files, "series": {}}
    for key in metrics.key_series():
        points = metrics.series[key]
        values = [v for _, v in points]
        out["series"][key] = {
            "points": len(points),
            "first_step": points[0][0],
            "first": values[0],
            "last_step": points[-1][0],
            "last": values[-1],
            "min": min(values),
            "max": max(values),
            "mean": sum(values) / len(values),
        }
    gen = metrics.series.get("timing_s/gen")
    step = metrics.series.get("timing_s/step")
    if gen and step:
        step_total = sum(v for _, v in step)
        if step_total > 0:
            out["gen_share_of_step"] = sum(v for _, v in gen) / step_total
    return out


def _fmt(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


def format_table(run_id: str, summary: dict) -> str:
    rows = [("series", "points", "first", "last", "min", "max", "last step")]
    for key, s in summary["series"].items():
        rows.append((key, str(s["points"]), _fmt(s["first"]), _fmt(s["last"]), _fmt(s["min"]),
                     _fmt(s["max"]), str(s["last_step"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"run {run_id}: {summary['steps']} steps"]
    for n, row in enumerate(rows):
        cells = (c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row))
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if len(rows) == 1:
        lines.append("(none of the key series is logged yet: " + ", ".join(KEY_SERIES) + ")")
    if "gen_share_of_step" in summary:
        lines.append(f"generation takes {summary['gen_share_of_step'] * 100:.1f}% of step time "
                     "(timing_s/gen / timing_s/step)")
    return "\n".join(lines)


def to_json(run_id: str, metrics: Metrics) -> dict:
    keys = metrics.key_series()
    return {
        "run": run_id,
        **summarize(metrics),
        "data": {k: [[s, v] for s, v in metrics.series[k]] for k in keys},
    }


def _pyplot():
    try:
        import matplotlib  # lazy: matplotlib imports in ~0.4 s and is an extra (sf[plots])

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: matplotlib imports in ~0.4 s and is an extra (sf[plots])
    except ImportError:
        raise SpecError("plot", "matplotlib is not installed; pip install 'sf[plots]' (or matplotlib)") from None
    return plt


def _save(plt, fig, out: Path) -> Path:
    """Write a finished figure as the PNG `out` (its folder made) and free it."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, format="png")
    plt.close(fig)
    return out


def _png(out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise SpecError("-o", f"{out} must end in .png")
    return out


def plot(metrics: Metrics, out: str | Path, title: str = "") -> Path:
    """Draw the key series, one panel per group, to a PNG file."""
    plt = _pyplot()
    panels = [(t, [k for p in pats for k in metrics.keys_matching(p)]) for t, pats in PANELS]
    panels = [(t, keys) for t, keys in panels if keys]
    if not panels:
        raise SpecError("plot", "none of the key series is logged yet: " + ", ".join(KEY_SERIES))
    out = _png(out)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.8 * len(panels)), squeeze=False, sharex=True)
    for ax, (panel_title, keys) in zip(axes[:, 0], panels, strict=True):
        for key in keys:
            points = metrics.series[key]
            style = "o-" if len(points) < 30 else "-"
            ax.plot([s for s, _ in points], [v for _, v in points], style, markersize=3, label=key)
        ax.set_title(panel_title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    return _save(plt, fig, out)


# --- sweeps: one row (and one curve) per point ------------------------------------------
# The score of a point, first found wins: (pattern, higher is better). RL logs the reward,
# SFT its loss; validation likewise (verl's val-core reward, or the SFT's val/loss).
TRAIN_SCORES: tuple[tuple[str, bool], ...] = (("critic/score/mean", True), ("train/loss", False))
VAL_SCORES: tuple[tuple[str, bool], ...] = (("val-core/*/reward/mean*", True), ("val-core/*/acc/mean*", True),
                                             ("val/loss", False))


@dataclass
class SweepPoint:
    """One point of a sweep: its index, run, swept values, record state and metrics (None
    while it has logged nothing)."""

    index: int
    run_id: str
    params: dict
    state: str
    metrics: Metrics | None


def _score_key(metrics: Metrics | None, choices) -> tuple[str, bool] | None:
    if metrics is None:
        return None
    for pattern, higher in choices:
        keys = metrics.keys_matching(pattern)
        if keys:
            return keys[0], higher
    return None


def point_summary(point: SweepPoint) -> dict:
    """Pure: steps, the training score's last and best value (with its step), the validation
    score's first and last value (with their steps); None where nothing is logged."""
    out = {"index": point.index, "run": point.run_id, "params": dict(point.params), "state": point.state,
           "steps": point.metrics.steps if point.metrics else 0,
           "score": None, "last": None, "best": None, "best_step": None,
           "validation": None, "val_first": None, "val_first_step": None, "val_last": None, "val_last_step": None}
    train = _score_key(point.metrics, TRAIN_SCORES)
    if train:
        key, higher = train
        points = point.metrics.series[key]
        best = (max if higher else min)(points, key=lambda p: p[1])
        out.update(score=key, last=points[-1][1], best=best[1], best_step=best[0])
    val = _score_key(point.metrics, VAL_SCORES)
    if val:
        key, _ = val
        points = point.metrics.series[key]
        out.update(validation=key, val_first=points[0][1], val_first_step=points[0][0], val_last=points[-1][1],
                   val_last_step=points[-1][0])
    return out


def load_sweep_points(sweep_dir: str | Path, record: dict) -> list[SweepPoint]:
    """The points of the sweep whose record is `record` (its `members`, run folders beside it)."""
    root = Path(sweep_dir).parent
    points = []
    for position, member in enumerate(record.get("members") or []):
        run_dir = root / member
        try:
            rec = runs.Run(run_dir).raw_record()  # a member's record: a regular file of the user's, capped
        except (OSError, ValueError):
            rec = {}
        data = read_metrics(run_dir)
        points.append(SweepPoint(index=int((rec.get("sweep") or {}).get("index", position)), run_id=str(member),
                                 params=dict(rec.get("params") or {}), state=str(rec.get("state") or "?"),
                                 metrics=data if data.series else None))
    return sorted(points, key=lambda p: p.index)


def grid_keys(record: dict, points: list[SweepPoint]) -> list[str]:
    keys = [str(g.get("key")) for g in record.get("grid") or [] if g.get("key")]
    for point in points:
        keys += [k for k in point.params if k not in keys]
    return keys


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return _fmt(value)
    return str(value)


def _param(value) -> str:
    """A swept value as given (1e-05, 0.0001, 8), not rounded to 4 digits."""
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_sweep_table(sweep_id: str, keys: list[str], rows: list[dict]) -> str:
    """One line per point: its swept values, steps, the training score's last and best, the
    validation score's first -> last."""
    score = next((r["score"] for r in rows if r["score"]), None)
    val = next((r["validation"] for r in rows if r["validation"]), None)
    head = ["point", "run", *keys, "state", "steps", "last", "best (step)", "validation first -> last (step)"]
    table = [head]
    for r in rows:
        best = "-" if r["best"] is None else f"{_fmt(r['best'])} ({r['best_step']})"
        validation = "-" if r["val_last"] is None else (
            f"{_fmt(r['val_first'])} -> {_fmt(r['val_last'])} ({r['val_first_step']} -> {r['val_last_step']})")
        table.append([str(r["index"]), r["run"], *(_param(r["params"].get(k)) for k in keys), r["state"].lower(),
                      str(r["steps"]), _cell(r["last"]), best, validation])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [f"sweep {sweep_id}: {len(rows)} point{'s' if len(rows) != 1 else ''}"
             + (f"; last/best: {score}" if score else "") + (f"; validation: {val}" if val else "")]
    for n, row in enumerate(table):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    waiting = [str(r["index"]) for r in rows if not r["steps"]]
    if waiting:
        lines.append(f"(no step logged yet by point{'s' if len(waiting) > 1 else ''} {', '.join(waiting)})")
    return "\n".join(lines)


def sweep_to_json(sweep_id: str, keys: list[str], points: list[SweepPoint]) -> dict:
    out = {"sweep": sweep_id, "grid_keys": keys, "points": []}
    for point in points:
        row = point_summary(point)
        wanted = [k for k in (row["score"], row["validation"]) if k]
        row["data"] = {k: [[s, v] for s, v in point.metrics.series[k]] for k in wanted} if point.metrics else {}
        out["points"].append(row)
    return out


def point_label(point: SweepPoint, keys: list[str]) -> str:
    values = ", ".join(f"{k.rsplit('.', 1)[-1]}={_param(point.params.get(k))}" for k in keys)
    return f"point {point.index}" + (f" ({values})" if values else "")


def plot_sweep(points: list[SweepPoint], keys: list[str], out: str | Path, title: str = "") -> Path:
    """The points' curves in one PNG: per panel of PANELS, one colour per point (validation
    dashed with markers)."""
    plt = _pyplot()
    logged = [p for p in points if p.metrics]
    panels = [(t, pats) for t, pats in PANELS if any(p.metrics.keys_matching(pat) for p in logged for pat in pats)]
    if not panels:
        raise SpecError("plot", "no point of the sweep has logged a key series yet: " + ", ".join(KEY_SERIES))
    out = _png(out)
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0", "C1", "C2", "C3"])
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.0 * len(panels)), squeeze=False, sharex=True)
    for ax, (panel_title, patterns) in zip(axes[:, 0], panels, strict=True):
        for n, point in enumerate(logged):
            color = colors[n % len(colors)]
            for key in (k for pat in patterns for k in point.metrics.keys_matching(pat)):
                series = point.metrics.series[key]
                style = "o--" if key.startswith("val") else ("o-" if len(series) < 30 else "-")
                ax.plot([s for s, _ in series], [v for _, v in series], style, color=color, markersize=3,
                        label=f"{point_label(point, keys)}: {key}")
        ax.set_title(panel_title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    return _save(plt, fig, out)
