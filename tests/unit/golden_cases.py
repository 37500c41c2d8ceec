"""The training job's batch scripts that test_train_golden.py compares byte for byte with
golden/train_scripts/ (every example, and Plans that reach every branch of the template), and
how a script is normalized before it is compared or saved."""
from __future__ import annotations

import functools
import sys
from dataclasses import replace
from pathlib import Path

from unit_helpers import SITE, VENV, het_plan, make_plan

import launcher
from launcher.compile.compiler import compile_plan
from launcher.plan import SlurmOptions
from launcher.render import script as script_mod
from launcher.render.script import render_script
from launcher.runtime import Runtime
from launcher.spec import paths
from launcher.spec.experiment import load_spec
from launcher.spec.site import load_site
from launcher.submit.request import placeholder_run_dir

GOLDEN = Path(__file__).resolve().parent / "golden" / "train_scripts"
EXAMPLES = sorted(p.name for p in (paths.data_root() / "examples").iterdir() if (p / "config.yaml").is_file())
MODULE = Runtime(framework="verl", version="0.9.1", kind="module", modules=("cuda/12", "verl/0.9.1"))
PYXIS = Runtime(framework="verl", version="0.9.1", kind="pyxis", image="/img/verl.sqsh", mounts=("/data:/data",))
FULL = SlurmOptions(time="00:20:00", reservation="maint", mail_type="END,FAIL", mail_user="alice@example.org",
                    dependency="afterok:123", exclude="node[01-02],node07", constraint="ib",
                    sbatch=(("begin", "now+1hour"), ("mem-per-gpu", "32G"), ("spread-job", None)))
WANDB = ("algorithm.adv_estimator=grpo", "trainer.logger=[console,file,wandb]", "trainer.project_name=proj")
ARRAY = {"size": 6, "max_parallel": 2, "sweep_dir": "/runs/g-sweep", "sweep_id": "g-sweep"}


def _example(name: str):
    site = replace(load_site(str(paths.site_dir() / "dev.yaml")), runs_dir="/runs")
    spec = load_spec(str(paths.data_root() / "examples" / name), {}, site)
    return compile_plan(spec, site, placeholder_run_dir("/runs", spec.name)), site


@functools.lru_cache(maxsize=None)
def cases() -> dict:
    """name -> (plan, site, runtime, render_script's keyword arguments)."""
    out = {}
    for name in EXAMPLES:
        plan, site = _example(name)
        out[f"example-{name}"] = (plan, site, VENV, {})
        out[f"example-{name}-preflight"] = (plan, site, VENV, {"preflight": True})
    plan, site = _example("grpo")
    out["example-grpo-module"] = (plan, site, MODULE, {})
    out["example-grpo-pyxis"] = (plan, site, PYXIS, {})
    out["example-grpo-sweep"] = (plan, site, VENV, {"array": {**ARRAY, "max_parallel": None}})
    gpn = replace(SITE, series={**SITE.series, "fake": replace(SITE.series["fake"], gpu_directive="gpus-per-node",
                                                               constraint="h200&ib")})
    out.update({
        "plain": (make_plan(), SITE, VENV, {}),
        "plain-preflight": (make_plan(), SITE, VENV, {"preflight": True}),
        "het": (het_plan(), SITE, VENV, {}),
        "het-full-options": (het_plan(slurm=FULL), SITE, VENV, {}),
        "plain-full-options": (make_plan(slurm=FULL), SITE, VENV, {}),
        "options-no-requeue": (make_plan(slurm=SlurmOptions(account="proj1", qos="high", partition="all",
                                                            exclusive=True, requeue=False)), gpn, VENV, {}),
        "module-runtime": (make_plan(), replace(SITE, modules=("gcc/12", "odd name;x")), MODULE, {}),
        "pyxis-runtime": (make_plan(), SITE, PYXIS, {}),
        "large-cluster-env": (make_plan(), replace(SITE, ray=replace(
            SITE.ray, large_cluster_min_nodes=2, large_cluster_env=(("RAY_worker_register_timeout_seconds", "120"),)),
            env=(("RAY_worker_register_timeout_seconds", "300"), ("ODD", "a b'c\nd"))), VENV, {}),
        "experiment-env": (make_plan(env=(("HF_HOME", "/data/hf cache"), ("X", "$(id)"))), SITE, VENV, {}),
        "wandb": (make_plan(overrides=WANDB), SITE, VENV, {}),
        "login-env": (make_plan(), replace(SITE, pass_sbatch_env=("SBATCH_RESERVATION", "PYTHONPATH")), VENV, {}),
        "login-env-all": (make_plan(), replace(SITE, pass_sbatch_env=(
            "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONHOME")), VENV, {}),
        "array": (make_plan(), SITE, VENV, {"array": ARRAY}),
        "array-preflight-no-requeue": (make_plan(slurm=SlurmOptions(requeue=False)), SITE, VENV,
                                       {"array": ARRAY, "preflight": True}),
        "odd-overrides": (make_plan(overrides=("a=1", "b=x y", "c=$(id)", "d=line\nbreak", "e='q'")), SITE, VENV,
                          {}),
    })
    return out


def normalized(text: str) -> str:
    text = text.replace(sys.executable, "<SF_PYTHON>").replace(str(paths.data_root()), "<SF_ROOT>")
    return text.replace(f"sf {launcher.__version__} ", "sf <SF_VERSION> ")


def render_case(plan, site, runtime, kwargs, installed: bool = False) -> str:
    if not installed:
        return render_script(plan, site, runtime, **kwargs)
    saved = script_mod._sf_root
    script_mod._sf_root = lambda: None  # as an installed sf (no PYTHONPATH line)
    try:
        return render_script(plan, site, runtime, **kwargs)
    finally:
        script_mod._sf_root = saved


def all_rendered():
    """(name, script) of every case, and the plain case as an installed sf renders it."""
    found = cases()
    for name, (plan, site, runtime, kwargs) in found.items():
        yield name, render_case(plan, site, runtime, kwargs)
    plan, site, runtime, kwargs = found["plain"]
    yield "plain-installed", render_case(plan, site, runtime, kwargs, installed=True)
