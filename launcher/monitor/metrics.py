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

from launcher.errors import SpecError

METRICS_DIR = "metrics"
METRICS_FILE = "metrics.jsonl"

# The key series, in display order. A pattern with "*" matches several keys
# (e.g. val-core/openai/gsm8k/reward/mean@1).
KEY_SERIES: tuple[str, ...] = (
    "critic/score/mean",
    "val-core/*/reward/mean*",
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
    ("reward", ("critic/score/mean", "val-core/*/reward/mean*")),
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
        return float(value) if math.isfinite(float(value)) else None
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
        except (ValueError, KeyError, TypeError):
            metrics.skipped_lines += 1  # torn last line of a killed job, or not ours
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


def plot(metrics: Metrics, out: str | Path, title: str = "") -> Path:
    """Draw the key series, one panel per group, to a PNG file."""
    try:
        import matplotlib  # lazy: matplotlib imports in ~0.4 s and is an extra (sf[plots])

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: matplotlib imports in ~0.4 s and is an extra (sf[plots])
    except ImportError:
        raise SpecError("plot", "matplotlib is not installed; pip install 'sf[plots]' (or matplotlib)") from None
    panels = [(t, [k for p in pats for k in metrics.keys_matching(p)]) for t, pats in PANELS]
    panels = [(t, keys) for t, keys in panels if keys]
    if not panels:
        raise SpecError("plot", "none of the key series is logged yet: " + ", ".join(KEY_SERIES))
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise SpecError("-o", f"{out} must end in .png")
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
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, format="png")
    plt.close(fig)
    return out
