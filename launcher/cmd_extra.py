"""`sf export`, `sf eval`, `sf metrics`, `sf plot`, `sf doctor`.

export and eval render a one-node batch script from templates/ (launcher.export), submit
it with launcher.slurm.sbatch (or run it here with --local) and record it in the run
through launcher.runs: an export or eval of a training run is listed in that run's
record (`exports` / `evals`) and its phases are timestamped into the run's events.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click

from launcher.errors import SlurmError, SpecError


def _common(fn):
    fn = click.option("--runs-dir", default=None, metavar="DIR",
                      help="Run records folder (default: $SF_RUNS_DIR, then the site's runs_dir).")(fn)
    fn = click.option("--site", "site_path", default=None, metavar="FILE",
                      help="Site file (default: $SF_SITE, /etc/sf/site.yaml, ~/.config/sf/site.yaml).")(fn)
    return fn


def _site(site_path):
    from launcher.site import load_site

    return load_site(site_path)


def _runs_dir(site, runs_dir: str | None) -> Path:
    if runs_dir:
        return Path(runs_dir).expanduser()
    if os.environ.get("SF_RUNS_DIR"):
        return Path(os.environ["SF_RUNS_DIR"]).expanduser()
    return Path(site.runs_dir)


def _open(site_path, runs_dir, run_id):
    from launcher import runs

    site = _site(site_path) if not (runs_dir or os.environ.get("SF_RUNS_DIR")) else None
    root = Path(runs_dir).expanduser() if runs_dir else (
        Path(os.environ["SF_RUNS_DIR"]).expanduser() if os.environ.get("SF_RUNS_DIR") else Path(site.runs_dir))
    return runs.open_run(root, run_id)


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


# --- metrics and plot ------------------------------------------------------------------

@click.command("metrics")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True, help="Print the series as JSON.")
@_common
def metrics(run_id, as_json, site_path, runs_dir):
    """Print the key training metrics of RUN (from verl's file logger).

    \b
    Series: critic/score/mean, val-core/*/reward/mean*, timing_s/gen and timing_s/step,
    response_length/mean, actor/pg_loss, critic/vf_loss (train/loss, val/loss for SFT).
    """
    from launcher import metrics as m

    run = _open(site_path, runs_dir, run_id)
    data = m.load_run_metrics(run.dir, run.id)
    if as_json:
        click.echo(json.dumps(m.to_json(run.id, data), indent=2))
    else:
        click.echo(m.format_table(run.id, m.summarize(data)))


@click.command("plot")
@click.argument("run_id", metavar="RUN")
@click.option("-o", "--output", required=True, metavar="FILE.png", help="PNG file to write.")
@_common
def plot(run_id, output, site_path, runs_dir):
    """Draw the key training metrics of RUN to a PNG (needs matplotlib: sf[plots])."""
    from launcher import metrics as m

    run = _open(site_path, runs_dir, run_id)
    data = m.load_run_metrics(run.dir, run.id)
    path = m.plot(data, output, title=f"{run.id} ({data.steps} steps)")
    click.echo(f"wrote {path}")


# --- export and eval: shared ------------------------------------------------------------

def _runtime_parts(site, version: str):
    """(setup lines, env, argv wrapper) for one-node jobs on the verl runtime."""
    from launcher.runtime import resolve_runtime

    rt = resolve_runtime("verl", version, site)
    import shlex

    from launcher import render

    setup = []
    if site.modules:
        setup.append("module load " + " ".join(shlex.quote(m) for m in site.modules))
    setup += rt.activate_lines()
    env = dict(site.env)
    env.update(dict(rt.env))
    for key in env:  # keys are written bare into `export KEY=...`
        render._check(render._ENV_KEY, key, f"env.{key}", "letters, digits and _ only, not starting with a digit")

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

    from launcher.runtime import registry_path

    path = registry_path(site)
    try:
        data = yaml.safe_load(Path(path).read_text()) or {} if path else {}
    except (OSError, yaml.YAMLError):
        return []
    table = data.get("verl") if isinstance(data, dict) else None
    return sorted((str(v) for v in table), key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.]", v)]) \
        if isinstance(table, dict) else []


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
    from launcher.export import LayoutError, find_actor_dir

    try:
        return find_actor_dir(path, fmt)
    except LayoutError as exc:
        raise SpecError("--checkpoint", str(exc)) from None


def _run_local(script: Path, log: Path) -> int:
    """Run the rendered script here with bash (#SBATCH lines are comments to bash)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as handle:
        proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=str(script.parent))
        for chunk in iter(lambda: proc.stdout.readline(), b""):
            handle.write(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return proc.wait()


def _run_here(run, key: str, entry: dict, script: Path, what: str) -> None:
    """--local: run the job script here, recording it under record[key]; exit 1 on failure."""
    log = run.logs_dir / f"{entry['id']}-local.out"
    _append(run, key, {**entry, "job_id": None, "state": "running", "log": str(log)})
    rc = _run_local(script, log)
    _append(run, key, {}, match=entry["id"], state="completed" if rc == 0 else "failed", rc=rc)
    if rc != 0:
        click.echo(f"sf: {what} failed (exit {rc}); log: {log}", err=True)
        sys.exit(1)


def _submit(run, key: str, entry: dict, script: Path, log_path: str) -> str:
    """Submit the job script, recording it under record[key] (submit_failed when sbatch fails)."""
    from launcher import slurm

    try:
        job_id = slurm.sbatch(script, cwd=str(run.dir))
    except SlurmError as exc:
        _append(run, key, {**entry, "job_id": None, "state": "submit_failed", "error": str(exc)})
        raise
    _append(run, key, {**entry, "job_id": job_id, "state": "submitted", "log": log_path.replace("%j", job_id)})
    return job_id


def _append(run, key: str, entry: dict, match: str | None = None, **update):
    """Add `entry` to record[key] (a list), or update the entry whose id is `match`."""
    def apply(rec):
        items = rec.setdefault(key, [])
        if match is None:
            items.append(entry)
            return
        for item in items:
            if item.get("id") == match:
                item.update(update)

    run.mutate(apply)


# --- export ---------------------------------------------------------------------------

@click.command("export")
@click.argument("name", metavar="NAME|RUN")
@click.option("--checkpoint", "checkpoint", default=None, metavar="PATH",
              help="verl checkpoints dir, a global_step_N dir, or its actor/ dir "
                   "(default for a RUN: its checkpoints/).")
@click.option("--checkpoint-format", "fmt", type=click.Choice(["verl-fsdp", "verl-megatron"]), default=None,
              help="How the checkpoint was saved (default: detected from its files).")
@click.option("--target", default=None, metavar="DIR",
              help="Hugging Face folder to write (default: <run>/exports/global_step_N).")
@click.option("--local", is_flag=True, help="Run the merge here instead of as a Slurm job.")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit and record nothing.")
@click.option("--framework-version", default=None, metavar="V", help="verl runtime (default: the run's, else the newest published).")
@click.option("--partition", default=None, help="Partition (default: the site's default series').")
@click.option("--time", "time_limit", default=None, metavar="HH:MM:SS", help="Time limit (default: the site's).")
@click.option("--gpus", type=int, default=None, help="GPUs for the job (default: 0 for FSDP, 1 for Megatron).")
@_common
def export(name, checkpoint, fmt, target, local, dry_run, framework_version, partition, time_limit, gpus,
           site_path, runs_dir):
    """Merge a verl checkpoint into a Hugging Face folder with verl's model merger.

    \b
    NAME|RUN is a run id (the export is recorded in that run) or an experiment name (a
    new run record holds the export job). Examples:
      sf export my-grpo-k3x7q --checkpoint-format verl-fsdp
      sf export my-grpo --checkpoint /scratch/ckpt/global_step_200 --checkpoint-format verl-fsdp
    """
    from launcher import export as ex
    from launcher import runs

    site = _site(site_path)
    root = _runs_dir(site, runs_dir)
    run = None
    try:
        run = runs.open_run(root, name)
    except SpecError:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise SpecError("NAME", f"{name!r} is neither a run nor an experiment name (letters, digits, ._-)") from None
    if checkpoint is None:
        if run is None:
            raise SpecError("--checkpoint", f"{name} is not a run of {root}; pass --checkpoint PATH "
                            "(a verl checkpoints dir or global_step_N dir)")
        checkpoint = str(run.checkpoints_dir)
    ckpt = _checkpoint(checkpoint, fmt)
    version = _framework_version(site, run, framework_version)
    rt, setup, env, wrap = _runtime_parts(site, version)

    export_id = f"export-{_stamp()}"
    step_name = f"global_step_{ckpt.step}" if ckpt.step is not None else "actor"

    def render_for(run_dir: str):
        target_dir = str(Path(target).expanduser().absolute()) if target else f"{run_dir}/exports/{step_name}"
        if (Path(target_dir) / "config.json").is_file():
            raise SpecError("--target", f"{target_dir} already holds a model (config.json); pass another --target or remove it")
        res = ex.resources_for(site, job_name=f"sf-export-{name}"[:64], log_path=f"{run_dir}/logs/{export_id}-%j.out",
                               gpus=gpus if gpus is not None else (1 if ckpt.backend == "megatron" else 0),
                               partition=partition, time=time_limit)
        script = ex.render_export(res=res, setup=setup, env=env, ckpt=ckpt, target_dir=target_dir,
                                  sf_python=sys.executable, run_dir=run_dir, export_id=export_id, wrap=wrap)
        return target_dir, res, script

    if run is None:
        # Everything is checked with a placeholder dir first: bad input leaves no record.
        target_dir, res, script = render_for(f"{root}/{name}-XXXXX")
        if dry_run:
            click.echo(script, nl=False)
            return
        run = runs.create_run(root, name, task="export", framework_version=version)
    target_dir, res, script = render_for(str(run.dir))
    if dry_run:
        click.echo(script, nl=False)
        return
    path = run.write_text(f"{export_id}.sbatch", script)
    entry = {"id": export_id, "checkpoint": ckpt.actor_dir, "format": ckpt.fmt, "step": ckpt.step,
             "target": target_dir, "script": str(path), "runtime": f"verl {version} ({rt.kind})",
             "submitted": runs.utc_now()}
    if local:
        _run_here(run, "exports", entry, path, "export")
        click.echo(f"exported {ckpt.actor_dir} -> {target_dir}")
        return
    try:
        job_id = _submit(run, "exports", entry, path, res.log_path)
    except SlurmError as exc:
        if run.raw_record().get("task") == "export":
            run.add_state("submit_failed", error=str(exc))
        raise
    if (run.raw_record().get("task") == "export") and not run.raw_record().get("job_ids"):
        run.set_job_ids([job_id])
        run.add_state("submitted", job_id=job_id)
    click.echo(f"submitted export job {job_id} (run {run.id}): {ckpt.actor_dir} -> {target_dir}")
    click.echo(f"log: {res.log_path.replace('%j', job_id)}")


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
@click.option("--run-id", default=None, metavar="RUN", help="Training run to attach the samples to (default: NAME|RUN).")
@click.option("--model", "model", default=None, metavar="DIR", help="A Hugging Face model folder to evaluate.")
@click.option("--checkpoint", default=None, metavar="PATH",
              help="A verl checkpoint to merge first (default: the run's latest checkpoint).")
@click.option("--checkpoint-format", "fmt", type=click.Choice(["verl-fsdp", "verl-megatron"]), default=None)
@click.option("--validation-data", "data", default=None, metavar="FILE",
              help="parquet/jsonl of SFT samples (default: the run's data.val_files).")
@click.option("--messages-key", default=None, help="Column of chat messages (default: the run's data.messages_key, else messages).")
@click.option("--max-samples", type=int, default=64, show_default=True)
@click.option("--max-new-tokens", type=int, default=128, show_default=True)
@click.option("--gpus", type=int, default=1, show_default=True)
@click.option("--local", is_flag=True, help="Run here instead of as a Slurm job.")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit and record nothing.")
@click.option("--framework-version", default=None, metavar="V")
@click.option("--partition", default=None)
@click.option("--time", "time_limit", default=None, metavar="HH:MM:SS")
@_common
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
    from launcher import export as ex
    from launcher import runs

    site = _site(site_path)
    root = _runs_dir(site, runs_dir)
    try:
        run = runs.open_run(root, run_id or name)
    except SpecError as exc:
        if run_id:
            raise
        raise SpecError("--run-id", f"sf eval attaches samples to a training run: pass --run-id RUN ({exc.message})") from None
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
    eval_id = f"eval-{_stamp()}"
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
    if dry_run:
        click.echo(script, nl=False)
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path = run.write_text(f"evals/{eval_id}/eval.sbatch", script)
    entry = {"id": eval_id, "model": model_dir, "checkpoint": ckpt.actor_dir if ckpt else None, "data": data,
             "out": out_dir, "samples": f"{out_dir}/samples.jsonl", "summary": f"{out_dir}/summary.json",
             "runtime": f"verl {version} ({rt.kind})", "submitted": runs.utc_now()}
    if local:
        _run_here(run, "evals", entry, path, "eval")
        click.echo(f"eval {eval_id} of run {run.id}: {out_dir}/summary.json")
        return
    job_id = _submit(run, "evals", entry, path, res.log_path)
    click.echo(f"submitted eval job {job_id} for run {run.id}; samples will be in {out_dir}/samples.jsonl")


# --- doctor ---------------------------------------------------------------------------

@click.command("doctor")
@click.option("--site", "site_path", default=None, metavar="FILE", help="Site file to check (default: as sf finds it).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(site_path, as_json):
    """Check the site file against the live cluster and say what to fix.

    Exit 0 when every check passes, 1 otherwise.
    """
    from launcher import doctor as dr

    checks = dr.run_checks(site_path)
    if as_json:
        click.echo(json.dumps({"ok": dr.all_ok(checks), "checks": [c.to_dict() for c in checks]}, indent=2))
    else:
        click.echo(dr.format_checks(checks))
    sys.exit(0 if dr.all_ok(checks) else 1)
