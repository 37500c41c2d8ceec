"""`sf export` and `sf eval`: one-node jobs on the verl runtime, recorded in a run.

Each builds a launcher.submit.pipeline Request (rendered from templates/export.sbatch.j2 or
templates/eval.sbatch.j2 by launcher.submit.export), which --dry-run prints, --local runs here
with bash, and otherwise pipeline.submit sends. An export or eval of a training run is
listed in that run's record (`exports` / `evals`) and its phases are timestamped into the
run's events; an export of a bare checkpoint gets a run record of its own (task "export").
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import click

from launcher.cli.options import runs_options, runs_root, say_sbatch_env_left_out
from launcher.errors import SpecError


def _runtime_parts(site, version: str):
    """(runtime, setup lines, env, argv wrapper) for one-node jobs on the verl runtime."""
    from launcher.render import sbatch_values
    from launcher.spec.runtime import resolve_runtime

    rt = resolve_runtime("verl", version, site)
    setup = []
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
        if rt.kind == "pyxis":
            return ["srun", "--ntasks=1", *rt.srun_flags(), *argv]
        return rt.wrap(argv)

    return rt, setup, env, wrap


def _published_versions(site) -> list[str]:
    import yaml

    from launcher.spec.runtime import registry_path

    path = registry_path(site)
    try:
        data = yaml.safe_load(Path(path).read_text()) or {} if path else {}
    except (OSError, yaml.YAMLError):
        return []
    table = data.get("verl") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return []
    return sorted((str(v) for v in table), key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.]", v)])


def _framework_version(site, run, explicit: str | None) -> str:
    if explicit:
        return explicit
    plan = run.read_json("plan.json") if run else None
    if plan and plan.get("framework_version"):
        return str(plan["framework_version"])
    versions = _published_versions(site)
    if versions:
        return versions[-1]
    raise SpecError("--framework-version", "no verl version known for this job; pass --framework-version (e.g. 0.9.1)")


def _checkpoint(path, fmt):
    from launcher.submit.export import LayoutError, find_actor_dir

    try:
        return find_actor_dir(path, fmt)
    except LayoutError as exc:
        raise SpecError("--checkpoint", str(exc)) from None


def _send(request, *, dry_run: bool, local: bool, what: str) -> tuple | None:
    """--dry-run: print the script. --local: run it here (exit 1 on failure). Else submit.
    Returns (run, job id or None, rendered), or None after a dry run."""
    from launcher.submit import pipeline

    if dry_run:
        click.echo(request.script, nl=False)
        return None
    if not local:
        say_sbatch_env_left_out(request.pass_sbatch_env)
    if local:
        run, rendered, rc, log = pipeline.run_here(request)
        if rc != 0:
            click.echo(f"sf: {what} failed (exit {rc}); log: {log}", err=True)
            sys.exit(1)
        return run, None, rendered
    sent = pipeline.submit(request)
    return sent.run, sent.job_id, sent.rendered


# --- export ---------------------------------------------------------------------------

def _format_of(run) -> str | None:
    """The checkpoint format a run will save, from its plan (megatron needs a GPU to merge)."""
    plan = run.read_json("plan.json") if run else None
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
    from launcher import runs
    from launcher.submit import export as ex
    from launcher.submit.pipeline import Rendered, Request, absolute_runs_dir

    if later:
        fmt = fmt or _format_of(run)
        ckpt = ex.LaterCheckpoint(str(run.checkpoints_dir), fmt)
        step_name = "latest"
    else:
        if checkpoint is None:
            if run is None:
                raise SpecError("--checkpoint", f"{name} is not a run of {root}; pass --checkpoint PATH "
                                "(a verl checkpoints dir or global_step_N dir)")
            checkpoint = str(run.checkpoints_dir)
        ckpt = _checkpoint(checkpoint, fmt)
        step_name = f"global_step_{ckpt.step}" if ckpt.step is not None else "actor"
    version = _framework_version(site, run, framework_version)
    rt, setup, env, wrap = _runtime_parts(site, version)
    export_id = export_id or runs.new_entry_id("export")
    script_name = f"{export_id}.sbatch"
    megatron = (ckpt.fmt or "") == "verl-megatron"

    def render(run_dir: str) -> Rendered:
        target_dir = str(Path(target).expanduser().absolute()) if target else f"{run_dir}/exports/{step_name}"
        if (Path(target_dir) / "config.json").is_file():
            raise SpecError("--target", f"{target_dir} already holds a model (config.json); "
                            "pass another --target or remove it")
        report = f"{run_dir}/exports/{export_id}.preflight.json" if preflight else None
        res = ex.resources_for(site, job_name=f"sf-export-{name}"[:64], log_path=f"{run_dir}/logs/{export_id}-%j.out",
                               gpus=gpus if gpus is not None else (1 if megatron else 0),
                               partition=partition, time=time_limit, dependency=after)
        try:
            script = ex.render_export(res=res, setup=setup, env=env, ckpt=ckpt, target_dir=target_dir,
                                      sf_python=sys.executable, run_dir=run_dir, export_id=export_id, wrap=wrap,
                                      preflight=preflight, report=report, upstream_preflight=upstream_preflight)
        except ex.LayoutError as exc:
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


def _complete_runs(ctx, param, incomplete):
    from launcher.cli.cmd_monitor import complete_run_ids

    return complete_run_ids(ctx, param, incomplete)


@click.command("export")
@click.argument("name", metavar="NAME|RUN", shell_complete=_complete_runs)
@click.option("--checkpoint", "checkpoint", default=None, metavar="PATH",
              help="verl checkpoints dir, a global_step_N dir, or its actor/ dir "
                   "(default for a RUN: its checkpoints/).")
@click.option("--checkpoint-format", "fmt", type=click.Choice(["verl-fsdp", "verl-megatron"]), default=None,
              help="How the checkpoint was saved (default: detected from its files).")
@click.option("--target", default=None, metavar="DIR",
              help="Hugging Face folder to write (default: <run>/exports/global_step_N).")
@click.option("--local", is_flag=True, help="Run the merge here instead of as a Slurm job.")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit and record nothing.")
@click.option("--preflight", is_flag=True,
              help="The job checks the checkpoint, verl's merger and the target, and merges nothing.")
@click.option("--framework-version", default=None, metavar="V",
              help="verl runtime (default: the run's, else the newest published).")
@click.option("--partition", default=None, help="Partition (default: the site's default series').")
@click.option("--time", "time_limit", default=None, metavar="HH:MM:SS", help="Time limit (default: the site's).")
@click.option("--gpus", type=int, default=None, help="GPUs for the job (default: 0 for FSDP, 1 for Megatron).")
@runs_options
def export(name, checkpoint, fmt, target, local, dry_run, preflight, framework_version, partition, time_limit, gpus,
           site_path, runs_dir):
    """Merge a verl checkpoint into a Hugging Face folder with verl's model merger.

    \b
    NAME|RUN is a run id (the export is recorded in that run) or an experiment name (a
    new run record holds the export job). Examples:
      sf export my-grpo-k3x7q --checkpoint-format verl-fsdp
      sf export my-grpo --checkpoint /scratch/ckpt/global_step_200 --checkpoint-format verl-fsdp
    """
    from launcher import runs
    from launcher.spec.site import load_site

    site = load_site(site_path)
    root = runs_root(site_path, runs_dir, site)
    run = None
    try:
        run = runs.open_run(root, name)
    except SpecError:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise SpecError("NAME", f"{name!r} is neither a run nor an experiment name "
                            "(letters, digits, ._-)") from None
    request = export_request(site, root, name, run, checkpoint=checkpoint, fmt=fmt, target=target,
                             framework_version=framework_version, partition=partition, time_limit=time_limit,
                             gpus=gpus, preflight=preflight)
    sent = _send(request, dry_run=dry_run, local=local, what="export")
    if sent is None:
        return
    run, job_id, rendered = sent
    entry = rendered.entry
    what = "export preflight" if preflight else "export"
    if job_id is None:
        click.echo(f"export preflight: {entry['checkpoint']} -> {entry['target']} (report {entry['report']})"
                   if preflight else f"exported {entry['checkpoint']} -> {entry['target']}")
        return
    click.echo(f"submitted {what} job {job_id} (run {run.id}): {entry['checkpoint']} -> {entry['target']}")
    click.echo(f"log: {rendered.log_path.replace('%j', job_id)}")


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


@click.command("eval")
@click.argument("name", metavar="NAME|RUN")
@click.option("--run-id", default=None, metavar="RUN",
              help="Training run to attach the samples to (default: NAME|RUN).")
@click.option("--model", "model", default=None, metavar="DIR", help="A Hugging Face model folder to evaluate.")
@click.option("--checkpoint", default=None, metavar="PATH",
              help="A verl checkpoint to merge first (default: the run's latest checkpoint).")
@click.option("--checkpoint-format", "fmt", type=click.Choice(["verl-fsdp", "verl-megatron"]), default=None)
@click.option("--validation-data", "data", default=None, metavar="FILE",
              help="parquet/jsonl of SFT samples (default: the run's data.val_files).")
@click.option("--messages-key", default=None,
              help="Column of chat messages (default: the run's data.messages_key, else messages).")
@click.option("--max-samples", type=int, default=64, show_default=True)
@click.option("--max-new-tokens", type=int, default=128, show_default=True)
@click.option("--gpus", type=int, default=1, show_default=True)
@click.option("--local", is_flag=True, help="Run here instead of as a Slurm job.")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit and record nothing.")
@click.option("--framework-version", default=None, metavar="V")
@click.option("--partition", default=None)
@click.option("--time", "time_limit", default=None, metavar="HH:MM:SS")
@runs_options
def eval_cmd(name, run_id, model, checkpoint, fmt, data, messages_key, max_samples, max_new_tokens, gpus, local,
             dry_run, framework_version, partition, time_limit, site_path, runs_dir):
    """Evaluate an SFT model on validation samples and attach them to the training run.

    \b
    The job merges the checkpoint (unless --model is given), then for each sample
    computes the reference's token loss and a greedy generation; samples.jsonl and
    summary.json land in <run>/evals/<id>/, listed in the run record under `evals`.
      sf eval my-sft --run-id my-sft-k3x7q
      sf eval my-sft-k3x7q --model /models/exported --validation-data data/val.parquet
    """
    from launcher import runs
    from launcher.spec.site import load_site
    from launcher.submit import export as ex
    from launcher.submit.pipeline import Rendered, Request, absolute_runs_dir

    site = load_site(site_path)
    root = runs_root(site_path, runs_dir, site)
    try:
        run = runs.open_run(root, run_id or name)
    except SpecError as exc:
        if run_id:
            raise
        raise SpecError("--run-id", f"sf eval attaches samples to a training run: pass --run-id RUN "
                        f"({exc.message})") from None
    plan = run.read_json("plan.json")
    if plan and plan.get("method") not in (None, "sft"):
        raise SpecError("RUN", f"run {run.id} is a {plan.get('method')} run; sf eval is for SFT runs "
                        "(RL runs log validation rewards: sf metrics RUN)")
    data = data or _first_file(_override(plan, "data.val_files"))
    if not data:
        raise SpecError("--validation-data", f"run {run.id} names no data.val_files; pass --validation-data FILE")
    data = str(Path(data).expanduser().absolute())
    if not Path(data).is_file():
        raise SpecError("--validation-data", f"{data} does not exist or is not a file")
    messages_key = messages_key or _override(plan, "data.messages_key") or "messages"
    ckpt = None
    eval_id = runs.new_entry_id("eval")
    out_dir = f"{run.dir}/evals/{eval_id}"
    if model:
        model_dir = str(Path(model).expanduser().absolute())
        if not (Path(model_dir) / "config.json").is_file():
            raise SpecError("--model", f"{model_dir} has no config.json; pass a Hugging Face model folder "
                            "(sf export makes one) or --checkpoint")
    else:
        ckpt = _checkpoint(checkpoint or run.checkpoints_dir, fmt)
        model_dir = f"{out_dir}/model"
    version = _framework_version(site, run, framework_version)
    rt, setup, env, wrap = _runtime_parts(site, version)
    res = ex.resources_for(site, job_name=f"sf-eval-{run.id}"[:64], log_path=f"{run.dir}/logs/{eval_id}-%j.out",
                           gpus=gpus, partition=partition, time=time_limit)
    options = {"messages_key": messages_key, "max_samples": max_samples, "max_new_tokens": max_new_tokens}
    script = ex.render_eval(res=res, setup=setup, env=env, run_dir=str(run.dir), eval_id=eval_id, out_dir=out_dir,
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
    sent = _send(request, dry_run=dry_run, local=local, what="eval")
    if sent is None:
        return
    if sent[1] is None:
        click.echo(f"eval {eval_id} of run {run.id}: {out_dir}/summary.json")
        return
    click.echo(f"submitted eval job {sent[1]} for run {run.id}; samples will be in {out_dir}/samples.jsonl")
