"""Export (verl checkpoint -> Hugging Face folder) and SFT evaluation jobs, login side.

  - `export_request(...)` / `eval_request(...)`: the pipeline Requests `sf export` and
    `sf eval` send (and `sf submit --model run:RUN` queues, launcher.submit.chain);
  - `render_export(...)` / `render_eval(...)` render templates/export.sbatch.j2 and
    templates/eval.sbatch.j2 (pure, text out; their shared header is
    templates/_one_node_job.j2).

The checkpoint layout they check is launcher.checkpoints (shared with the job side). The
eval job's own step is launcher/injob/evaluate.py.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from launcher import runs, sbatch_values
from launcher.checkpoints import (
    ACTOR_SLOT,
    BACKEND_SLOT,
    FORMATS,
    Checkpoint,
    LaterCheckpoint,
    LayoutError,
    find_actor_dir,
    merge_argv,
)
from launcher.compile.catalog import SFT_CONFIG_NAME
from launcher.compile.scheduler_options import DEPENDENCY
from launcher.compile.slurm_time import time_seconds
from launcher.errors import SpecError
from launcher.spec import paths
from launcher.spec.files import expand_user
from launcher.spec.runtimes import registry_path, resolve_runtime
from launcher.submit.request import Rendered, Request, absolute_runs_dir

# --- rendering (pure) ---------------------------------------------------------------

def _env():
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.templates_dir())),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["argv"] = lambda argv: " ".join(shlex.quote(str(a)) for a in argv)
    return env


@dataclass(frozen=True)
class JobResources:
    """The sbatch header of an export/eval job: one node, one task."""

    job_name: str
    log_path: str  # --output (may hold %j)
    partition: str | None = None
    gpus: int = 0
    gpu_directive: str = "gres"  # gres | gpus-per-node
    gres_name: str = "gpu"
    cpus: int = 2
    mem: str | None = None
    time: str = "01:00:00"
    account: str | None = None
    qos: str | None = None
    dependency: str | None = None  # e.g. afterok:<the training job> (a chained export)


def resources_for(site, *, job_name: str, log_path: str, gpus: int, partition: str | None = None,
                  time: str | None = None, cpus: int | None = None, mem: str | None = None,
                  dependency: str | None = None) -> JobResources:
    """Header from the site: the default series' partition and GPU directive."""
    series = site.series.get(site.default_series or "") or next(iter(site.series.values()), None)
    return JobResources(
        job_name=job_name, log_path=log_path,
        partition=partition or (series.partition if series else None),
        gpus=gpus,
        gpu_directive=series.gpu_directive if series else "gres",
        gres_name=series.gres_name if series else "gpu",
        cpus=cpus or (min(series.cpus_per_node, 8) if series else 2),
        mem=mem or (series.mem_per_node if series else None),
        time=time or site.time, account=site.account, qos=site.qos, dependency=dependency,
    )


def check_resources(res: JobResources) -> JobResources:
    """Refuse header values that could break out of their #SBATCH line (the checkers of
    the training job's header, launcher.sbatch_values); a SpecError names the field."""
    sbatch_values.name(res.job_name, "job name")
    sbatch_values.log_path(res.log_path, "log path")
    sbatch_values.time_limit(res.time, "--time")
    for field, value in (("--partition", res.partition), ("slurm.account", res.account), ("slurm.qos", res.qos)):
        if value is not None:
            sbatch_values.account(value, field)
    if res.mem is not None:
        sbatch_values.mem(res.mem, "mem_per_node")
    sbatch_values.gres_name(res.gres_name, "gres_name")
    sbatch_values.whole(res.gpus, "--gpus")
    sbatch_values.whole(res.cpus, "cpus", minimum=1)
    if res.dependency is not None:
        if not DEPENDENCY.fullmatch(res.dependency):
            raise SpecError("--dependency", f"{res.dependency!r} is not a Slurm dependency like afterok:123")
    return res


def _same(argv):
    return list(argv)


def _one_line(**values) -> None:
    """Paths and ids are shell-quoted in the scripts; a line break is refused outright
    (it could end a quoted word's line in an echo or a comment)."""
    for field, value in values.items():
        if value is not None and ("\n" in str(value) or "\r" in str(value)):
            raise SpecError(field.replace("_", "-"), f"{str(value)!r} holds a line break; use a plain path")


# The folder holding sf's launcher package (a source folder, or site-packages): the job's
# `python -m launcher.injob` calls put it on PYTHONPATH themselves, whatever the runtime set.
SF_PATH = str(Path(__file__).resolve().parents[2])


def _render(template: str, *, res: JobResources, setup: list[str], env: dict, run_dir: str, kind: str,
            ended: dict, **values) -> str:
    """One of the one-node job templates; `kind`_started/_ended phases go to the run's
    events (`ended`: what the ended phase carries besides rc)."""
    return _env().get_template(template).render(
        res=check_resources(res), setup=list(setup), env=dict(env), run_dir=run_dir, kind=kind, sf_path=SF_PATH,
        ended=[f"{key}={shlex.quote(str(value))}" for key, value in ended.items()], **values)


# Where verl's merger is on the runtime, without importing verl (which pulls torch):
# find_spec of a top-level package does not run it.
FIND_MERGER = ("import importlib.util, os; s = importlib.util.find_spec('verl'); "
               "p = os.path.join(os.path.dirname(s.origin), 'model_merger', '__main__.py') if s and s.origin else ''; "
               "print(p if p and os.path.isfile(p) else '')")


def render_export(*, res: JobResources, setup: list[str], env: dict, ckpt, target_dir: str,
                  sf_python: str, run_dir: str, export_id: str, extra=(), wrap=_same, preflight: bool = False,
                  report: str | None = None, upstream_preflight: bool = False) -> str:
    """`wrap(argv)` turns a `python ...` argv into how it runs on the runtime (the venv's
    python, `apptainer exec ...`, an srun step with a pyxis image). `ckpt` is a Checkpoint,
    or a LaterCheckpoint the job looks up itself. `preflight`: the job checks what the
    merge needs (preflight_report into `report`) and merges nothing."""
    later = isinstance(ckpt, LaterCheckpoint)
    _one_line(checkpoint=ckpt.checkpoints_dir if later else ckpt.actor_dir, target=target_dir, run_dir=run_dir,
              export_id=export_id, report=report)
    if ckpt.fmt is not None and ckpt.fmt not in FORMATS:
        raise LayoutError(f"--checkpoint-format must be one of {', '.join(FORMATS)}, not {ckpt.fmt!r}")
    merge = " ".join(shlex.quote(str(a)) for a in wrap(merge_argv(ckpt, target_dir, python="python", extra=extra)))
    if later:  # only sf's own slots may become variables: a path that spells one is refused
        if any(slot in str(v) for slot in (ACTOR_SLOT, BACKEND_SLOT) for v in (target_dir, run_dir, *extra)):
                    raise SpecError("--target", f"{target_dir!r}: a path cannot hold {ACTOR_SLOT} or {BACKEND_SLOT}")
        merge = merge.replace(ACTOR_SLOT, '"$SF_ACTOR_DIR"').replace(BACKEND_SLOT, '"$SF_BACKEND"')
    return _render("export.sbatch.j2", res=res, setup=setup, env=env, run_dir=run_dir, kind="export",
                   ended={"export_id": export_id}, sf_python=sf_python, export_id=export_id, ckpt=ckpt,
                   later=later, target_dir=target_dir, merge_line=merge, preflight=preflight, report=report,
                   upstream_preflight=upstream_preflight, find_merger=wrap(["python", "-c", FIND_MERGER]))


EVALUATE_PY = Path(__file__).resolve().parents[1] / "injob" / "evaluate.py"


def render_eval(*, res: JobResources, setup: list[str], env: dict, run_dir: str, eval_id: str,
                out_dir: str, model_dir: str, data: str, ckpt: Checkpoint | None, sf_python: str,
                options: dict, wrap=_same) -> str:
    _one_line(run_dir=run_dir, eval_id=eval_id, out_dir=out_dir, model=model_dir, validation_data=data,
              checkpoint=ckpt.actor_dir if ckpt else None)
    # by path, with runpy: the runtime's Python need not have sf, and the file's folder
    # must not become sys.path[0]
    evaluate = ["python", "-c",
                "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                str(EVALUATE_PY), "--model", model_dir, "--data", data, "--out", out_dir]
    for key, value in options.items():
        if value is not None:
            evaluate += [f"--{key.replace('_', '-')}", str(value)]
    return _render("eval.sbatch.j2", res=res, setup=setup, env=env, run_dir=run_dir, kind="eval",
                   ended={"eval_id": eval_id, "out": out_dir}, sf_python=sf_python, eval_id=eval_id,
                   out_dir=out_dir, model_dir=model_dir, data=data, ckpt=ckpt,
                   merge=wrap(merge_argv(ckpt, model_dir, python="python")) if ckpt else None,
                   evaluate=wrap(evaluate))


# --- the requests `sf export` and `sf eval` send (launcher.submit.pipeline) ---------------

def runtime_parts(site, version: str):
    """(runtime, setup lines, env, argv wrapper) for one-node jobs on the verl runtime."""
    rt = resolve_runtime("verl", version, site)
    unset = sbatch_values.login_env_unset(site.pass_sbatch_env)
    setup = [unset] if unset else []
    if site.modules:
        setup.append("module load " + " ".join(shlex.quote(m) for m in site.modules))
    setup += rt.activate_lines()
    env = dict(site.env)
    env.update(dict(rt.env))
    for key in env:  # keys are written bare into `export KEY=...`
        sbatch_values.env_key(key, f"env.{key}")

    def wrap(argv):
        argv = list(argv)
        if argv and argv[0] == "python":
            argv[0] = rt.runtime_python()
        if rt.local_argv(argv) is None:  # pyxis, oci: only an srun step enters the container
            return ["srun", "--ntasks=1", *rt.srun_flags(), *argv]
        return rt.wrap(argv)

    return rt, setup, env, wrap


def _published_versions(site) -> list[str]:
    path = registry_path(site)
    try:
        data = yaml.safe_load(Path(path).read_text()) or {} if path else {}
    except (OSError, yaml.YAMLError):
        return []
    table = data.get("verl") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return []
    return sorted((str(v) for v in table), key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.]", v)])


def plan_of(run) -> dict | None:
    """A run's plan.json (None without a run or a plan); a damaged one is a SpecError naming it."""
    return run.read_plan() if run else None


def version_for(site, run, explicit: str | None) -> str:
    if explicit:
        return explicit
    plan = plan_of(run)
    if plan and plan.get("framework_version"):
        return str(plan["framework_version"])
    versions = _published_versions(site)
    if versions:
        return versions[-1]
    raise SpecError("--framework-version", "no verl version known for this job; pass --framework-version (e.g. 0.9.1)")


def check_time(time_limit) -> None:
    """--time as Slurm reads it: `0` (no limit to Slurm) or 99:99:99 refused naming the flag."""
    if time_limit is not None:
        time_seconds(time_limit, "--time")


def check_target(target_dir: str) -> None:
    """--target must be a folder the merger can create or fill: not a file, a device
    (/dev/null) or a path through a file."""
    path = Path(target_dir)
    for here in (path, *path.parents):
        if here.exists() or here.is_symlink():
            if not here.is_dir():
                what = "is a file" if here.is_file() else "is not a folder (a device, FIFO or broken link)"
                raise SpecError("--target", f"{here} {what}; the merger writes a Hugging Face folder there: "
                                "pass a new or empty folder")
            return


def checkpoint_at(path, fmt):
    try:
        return find_actor_dir(path, fmt)
    except LayoutError as exc:
        raise SpecError("--checkpoint", str(exc)) from None


# --- export ---------------------------------------------------------------------------

def _format_of(run) -> str | None:
    """The checkpoint format a run will save, from its plan (megatron needs a GPU to merge)."""
    plan = plan_of(run)
    overrides = " ".join(str(o) for o in (plan or {}).get("overrides", ()))
    if "strategy=megatron" in overrides or "model_engine=megatron" in overrides:
        return "verl-megatron"
    return None


def export_request(site, root, name: str, run, *, checkpoint=None, fmt=None, target=None,
                   framework_version=None, partition=None, time_limit=None, gpus=None, export_id=None,
                   later: bool = False, after: str | None = None, preflight: bool = False,
                   upstream_preflight: bool = False):
    """The pipeline Request of one export job (checked against the placeholder run dir:
    bad input raises SpecError and leaves nothing behind). `later`: the job looks up the
    run's last checkpoint itself when it runs (a chained export, queued with `after` =
    afterok:<the run's job> before that checkpoint exists). `preflight`: check, merge nothing."""
    check_time(time_limit)
    if later:
        fmt = fmt or _format_of(run)
        ckpt = LaterCheckpoint(str(run.checkpoints_dir), fmt)
        step_name = "latest"
    else:
        if checkpoint is None:
            if run is None:
                raise SpecError("--checkpoint", f"{name} is not a run of {root}; pass --checkpoint PATH "
                                "(a verl checkpoints dir or global_step_N dir)")
            checkpoint = str(run.checkpoints_dir)
        ckpt = checkpoint_at(checkpoint, fmt)
        step_name = f"global_step_{ckpt.step}" if ckpt.step is not None else "actor"
    version = version_for(site, run, framework_version)
    rt, setup, env, wrap = runtime_parts(site, version)
    export_id = export_id or runs.new_entry_id("export")
    script_name = f"{export_id}.sbatch"
    megatron = (ckpt.fmt or "") == "verl-megatron"

    def render(run_dir: str) -> Rendered:
        target_dir = str(expand_user(target, "--target").absolute()) if target else f"{run_dir}/exports/{step_name}"
        check_target(target_dir)
        if (Path(target_dir) / "config.json").is_file():
            raise SpecError("--target", f"{target_dir} already holds a model (config.json); "
                            "pass another --target or remove it")
        report = f"{run_dir}/exports/{export_id}.preflight.json" if preflight else None
        res = resources_for(site, job_name=f"sf-export-{name}"[:64], log_path=f"{run_dir}/logs/{export_id}-%j.out",
                            gpus=gpus if gpus is not None else (1 if megatron else 0),
                            partition=partition, time=time_limit, dependency=after)
        try:
            script = render_export(res=res, setup=setup, env=env, ckpt=ckpt, target_dir=target_dir,
                                   sf_python=sys.executable, run_dir=run_dir, export_id=export_id, wrap=wrap,
                                   preflight=preflight, report=report, upstream_preflight=upstream_preflight)
        except LayoutError as exc:
            raise SpecError("--checkpoint-format", str(exc)) from None
        entry = {"id": export_id, "checkpoint": ckpt.checkpoints_dir if later else ckpt.actor_dir,
                 "format": ckpt.fmt, "step": ckpt.step, "target": target_dir, "script": f"{run_dir}/{script_name}",
                 "runtime": f"verl {version} ({rt.kind})", "submitted": runs.utc_now()}
        if later:
            entry["checkpoint_at_run_time"] = True  # the job looked up the last checkpoint itself
        if after:
            entry["after"] = after
        if preflight:
            entry.update(preflight=True, report=report)
        return Rendered(files={script_name: script}, script_name=script_name, entry=entry, log_path=res.log_path)

    request = Request(experiment=name, runs_dir=absolute_runs_dir(root), render=render, run=run,
                      record={"task": "export", "framework_version": version}, entry_key="exports",
                      sbatch_in_run_dir=True, pass_sbatch_env=site.pass_sbatch_env)
    request.rendered()  # every check, against the placeholder dir: bad input leaves no record
    return request

# --- eval -----------------------------------------------------------------------------

def _override(plan: dict | None, key: str) -> str | None:
    for item in (plan or {}).get("overrides", ()):
        k, sep, v = str(item).partition("=")
        if sep and k.lstrip("+~") == key:
            return v
    return None


def _first_file(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip()
    if value.startswith("["):
        value = value.strip("[]").split(",")[0]
    return value.strip().strip("'\"") or None


def eval_request(site, root, run, *, model=None, checkpoint=None, fmt=None, data=None, messages_key=None,
                 max_samples=64, max_new_tokens=128, gpus=1, framework_version=None, partition=None,
                 time_limit=None) -> tuple[Request, str, str]:
    """The pipeline Request of one eval job of SFT run `run` (its samples land in the run):
    (request, eval id, output folder). SpecError names the flag to fix."""
    for flag, value in (("--max-samples", max_samples), ("--max-new-tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(flag, f"{value!r} would evaluate nothing; pass 1 or more")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise SpecError("--gpus", f"{gpus!r} is not a number of GPUs; pass 0 or more")
    check_time(time_limit)
    plan = plan_of(run)
    if plan and plan.get("config_name", SFT_CONFIG_NAME) != SFT_CONFIG_NAME:
        raise SpecError("RUN", f"run {run.id} is a {plan.get('method')} run; sf eval is for SFT runs "
                        "(RL runs log validation rewards: sf metrics RUN)")
    data = data or _first_file(_override(plan, "data.val_files"))
    if not data:
        raise SpecError("--validation-data", f"run {run.id} names no data.val_files; pass --validation-data FILE")
    data = str(expand_user(data, "--validation-data").absolute())
    if not Path(data).is_file():
        raise SpecError("--validation-data", f"{data} does not exist or is not a file")
    messages_key = messages_key or _override(plan, "data.messages_key") or "messages"
    ckpt = None
    eval_id = runs.new_entry_id("eval")
    out_dir = f"{run.dir}/evals/{eval_id}"
    if model:
        model_dir = str(expand_user(model, "--model").absolute())
        if not (Path(model_dir) / "config.json").is_file():
            raise SpecError("--model", f"{model_dir} has no config.json; pass a Hugging Face model folder "
                            "(sf export makes one) or --checkpoint")
    else:
        ckpt = checkpoint_at(checkpoint or run.checkpoints_dir, fmt)
        model_dir = f"{out_dir}/model"
    version = version_for(site, run, framework_version)
    rt, setup, env, wrap = runtime_parts(site, version)
    res = resources_for(site, job_name=f"sf-eval-{run.id}"[:64], log_path=f"{run.dir}/logs/{eval_id}-%j.out",
                        gpus=gpus, partition=partition, time=time_limit)
    options = {"messages_key": messages_key, "max_samples": max_samples, "max_new_tokens": max_new_tokens}
    script = render_eval(res=res, setup=setup, env=env, run_dir=str(run.dir), eval_id=eval_id, out_dir=out_dir,
                         model_dir=model_dir, data=data, ckpt=ckpt, sf_python=sys.executable, options=options,
                         wrap=wrap)
    entry = {"id": eval_id, "model": model_dir, "checkpoint": ckpt.actor_dir if ckpt else None, "data": data,
             "out": out_dir, "samples": f"{out_dir}/samples.jsonl", "summary": f"{out_dir}/summary.json",
             "runtime": f"verl {version} ({rt.kind})", "submitted": runs.utc_now()}
    script_name = f"evals/{eval_id}/eval.sbatch"
    rendered = Rendered(files={script_name: script}, script_name=script_name, entry=entry, log_path=res.log_path)
    # the run exists: nothing is left to bind
    request = Request(experiment=run.id, runs_dir=absolute_runs_dir(root), render=lambda _run_dir: rendered,
                      run=run, entry_key="evals", sbatch_in_run_dir=True, pass_sbatch_env=site.pass_sbatch_env)
    return request, eval_id, out_dir
