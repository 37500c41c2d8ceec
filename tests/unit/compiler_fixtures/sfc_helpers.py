"""Helpers of the compiler tests (spec, compile, rules, bad inputs, golden tutorial)."""
from __future__ import annotations

from pathlib import Path

import yaml

from launcher.compile.compiler import compile_plan
from launcher.errors import SpecError, SpecErrors
from launcher.spec import layers
from launcher.spec.experiment import MergedSpec, _deep_merge, builtin_defaults, leaves
from launcher.spec.site import site_from_dict


def spec_from_values(values: dict, name: str = "test", exp_dir: str = "/tmp/exp",
                     main_py: str | None = None) -> MergedSpec:
    """A MergedSpec built in memory: defaults < values, no files read but the defaults."""
    merged = _deep_merge(builtin_defaults(), {k: v for k, v in values.items() if k != "overrides"})
    merged["overrides"] = list(values.get("overrides") or [])
    origins = {d: layers.DEFAULTS for d, _ in leaves(builtin_defaults())}
    origins.update({d: layers.CONFIG for d, _ in leaves({k: v for k, v in values.items() if k != "overrides"})})
    return MergedSpec(name=name, exp_dir=exp_dir, values=merged, origins=origins,
                      override_sources=[f"overrides[{i}]" for i in range(len(merged["overrides"]))], main_py=main_py)


SITE_DICT = {
    "name": "unit",
    "runs_dir": "/tmp/sf-unit-runs",
    "default_series": "fake",
    "series": {
        "fake": {"partition": "train", "gpus_per_node": 4},
        "fake-teach": {"partition": "teach", "gpus_per_node": 4},
        "h200": {"partition": "gpu", "gpus_per_node": 8},
    },
    "slurm": {"account": "acct", "time": "00:30:00", "max_requeues": 2, "signal_lead_s": 90},
}
SITE = site_from_dict(SITE_DICT, "unit.yaml")
RUN_DIR = "/runs/exp-0001"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
TRAIN = "/data/gsm8k/train.parquet"
TEST = "/data/gsm8k/test.parquet"


def base(method: str, **extra) -> dict:
    values = {"method": f"verl/{method}", "model": MODEL,
              "data": {"train": {"files": TRAIN}, "validation": {"files": TEST}}}
    if method == "distillation":
        values["teacher"] = {"model": "/models/teacher"}
        values["spec"] = {"resources": {"pools": [{"name": "train"}, {"name": "teach", "series": "fake-teach"}],
                                        "roles": {"actor": "train", "rollout": "train", "teacher": "teach"}}}
    if method in ("grpo-one-step-off", "grpo-async"):  # the rollout on a pool of its own
        values["spec"] = {"resources": {"pools": [{"name": "train"}, {"name": "gen", "series": "fake-teach"}],
                                        "roles": {"actor": "train", "rollout": "gen"}}}
    for key, value in extra.items():
        values[key] = value
    return values


def compile_values(values: dict, main_py: str | None = None, site=SITE):
    return compile_plan(spec_from_values(values, main_py=main_py), site, RUN_DIR)


def overrides_of(values: dict, **kw) -> dict:
    """key (without +) -> value text."""
    plan = compile_values(values, **kw)
    out = {}
    for ov in plan.overrides:
        k, _, v = ov.partition("=")
        out[k.lstrip("+~")] = v
    return out


def errors_of(values: dict, **kw) -> list[str]:
    try:
        compile_values(values, **kw)
    except SpecErrors as exc:
        return [str(e) for e in exc.errors]
    except SpecError as exc:
        return [str(exc)]
    return []


def write_site(tmp: Path, **extra) -> Path:
    data = dict(SITE_DICT, **extra)
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_exp(root: Path, name: str, text: str | dict, main_py: bool = False) -> Path:
    exp = root / "experiments" / name
    exp.mkdir(parents=True, exist_ok=True)
    (exp / "config.yaml").write_text(text if isinstance(text, str) else yaml.safe_dump(text))
    if main_py:
        (exp / "main.py").write_text("print('custom entry')\n")
    return exp
