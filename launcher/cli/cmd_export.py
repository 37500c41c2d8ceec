"""`sf export` and `sf eval`: one-node jobs on the verl runtime, recorded in a run.

Each builds a launcher.submit.pipeline Request (rendered from templates/export.sbatch.j2 or
templates/eval.sbatch.j2 by launcher.submit.export), which --dry-run prints, --local runs here
with bash, and otherwise pipeline.submit sends. An export or eval of a training run is
listed in that run's record (`exports` / `evals`) and its phases are timestamped into the
run's events; an export of a bare checkpoint gets a run record of its own (task "export").
"""

from __future__ import annotations

import re
import sys

import click

from launcher import runs
from launcher.cli.options import (
    complete_run_ids,
    json_option,
    nonblank,
    print_json,
    runs_options,
    say_sbatch_env_left_out,
)
from launcher.errors import SpecError
from launcher.spec.site import load_site, runs_root
from launcher.submit import export as export_jobs
from launcher.submit import pipeline


def _send(request, *, dry_run: bool, local: bool, what: str, as_json: bool = False) -> tuple | None:
    """--dry-run: print the script. --local: run it here (exit 1 on failure). Else submit.
    Returns (run, job id or None, rendered), or None after a dry run."""
    if dry_run:
        if as_json:
            print_json({"ok": True, "dry_run": True, "what": what, "script": request.script,
                        "warnings": list(request.warnings)})
        else:
            click.echo(request.script, nl=False)
        return None
    if not local:
        say_sbatch_env_left_out(request.pass_sbatch_env)
    if local:
        run, rendered, rc, log = pipeline.run_here(request)
        if rc != 0:
            if as_json:
                print_json({"ok": False, "errors": [{"field": what, "message": f"{what} failed (exit {rc})",
                                                     "hint": f"see its log: {log}"}]})
            click.echo(f"sf: {what} failed (exit {rc}); log: {log}", err=True)
            sys.exit(1)
        return run, None, rendered
    sent = pipeline.submit(request)
    return sent.run, sent.job_id, sent.rendered


# --- export ---------------------------------------------------------------------------

@click.command("export")
@click.argument("name", metavar="NAME|RUN", shell_complete=complete_run_ids)
@click.option("--checkpoint", "checkpoint", default=None, metavar="PATH", callback=nonblank("a checkpoint path"),
              help="verl checkpoints dir, a global_step_N dir, or its actor/ dir "
                   "(default for a RUN: its checkpoints/).")
@click.option("--checkpoint-format", "fmt", type=click.Choice(["verl-fsdp", "verl-megatron"]), default=None,
              help="How the checkpoint was saved (default: detected from its files).")
@click.option("--target", default=None, metavar="DIR", callback=nonblank("a folder to write"),
              help="Hugging Face folder to write (default: <run>/exports/global_step_N).")
@click.option("--local", is_flag=True, help="Run the merge here instead of as a Slurm job.")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit and record nothing.")
@click.option("--preflight", is_flag=True,
              help="The job checks the checkpoint, verl's merger and the target, and merges nothing.")
@click.option("--framework-version", default=None, metavar="V", callback=nonblank("a verl version such as 0.9.1"),
              help="verl runtime (default: the run's, else the newest published).")
@click.option("--partition", default=None, callback=nonblank("a partition"),
              help="Partition (default: the site's default series').")
@click.option("--time", "time_limit", default=None, metavar="HH:MM:SS", callback=nonblank("a time limit (01:00:00)"),
              help="Time limit (default: the site's).")
@click.option("--gpus", type=int, default=None, help="GPUs for the job (default: 0 for FSDP, 1 for Megatron).")
@json_option
@runs_options
def export(name, checkpoint, fmt, target, local, dry_run, preflight, framework_version, partition, time_limit, gpus,
           as_json, site_path, runs_dir):
    """Merge a verl checkpoint into a Hugging Face folder with verl's model merger.

    \b
    NAME|RUN is a run id (the export is recorded in that run) or an experiment name (a
    new run record holds the export job). Examples:
      sf export my-grpo-k3x7q --checkpoint-format verl-fsdp
      sf export my-grpo --checkpoint /scratch/ckpt/global_step_200 --checkpoint-format verl-fsdp
    """
    site = load_site(site_path)
    root = runs_root(runs_dir, site, site_path)
    run = None
    try:
        run = runs.open_run(root, name)
    except SpecError:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise SpecError("NAME", f"{name!r} is neither a run nor an experiment name "
                            "(letters, digits, ._-)") from None
    request = export_jobs.export_request(site, root, name, run, checkpoint=checkpoint, fmt=fmt, target=target,
                                    framework_version=framework_version, partition=partition,
                                    time_limit=time_limit, gpus=gpus, preflight=preflight)
    sent = _send(request, dry_run=dry_run, local=local, what="export", as_json=as_json)
    if sent is None:
        return
    run, job_id, rendered = sent
    entry = rendered.entry
    what = "export preflight" if preflight else "export"
    if as_json:
        print_json({"ok": True, "run": run.id, "job_id": job_id, "preflight": preflight,
                    "checkpoint": entry["checkpoint"], "target": entry["target"],
                    "log": rendered.log_path.replace("%j", job_id) if job_id else None})
        return
    if job_id is None:
        click.echo(f"export preflight: {entry['checkpoint']} -> {entry['target']} (report {entry['report']})"
                   if preflight else f"exported {entry['checkpoint']} -> {entry['target']}")
        return
    click.echo(f"submitted {what} job {job_id} (run {run.id}): {entry['checkpoint']} -> {entry['target']}")
    click.echo(f"log: {rendered.log_path.replace('%j', job_id)}")


# --- eval -----------------------------------------------------------------------------

@click.command("eval")
@click.argument("name", metavar="NAME|RUN")
@click.option("--run-id", default=None, metavar="RUN", callback=nonblank("a run id"),
              help="Training run to attach the samples to (default: NAME|RUN).")
@click.option("--model", "model", default=None, metavar="DIR", callback=nonblank("a Hugging Face model folder"),
              help="A Hugging Face model folder to evaluate.")
@click.option("--checkpoint", default=None, metavar="PATH", callback=nonblank("a checkpoint path"),
              help="A verl checkpoint to merge first (default: the run's latest checkpoint).")
@click.option("--checkpoint-format", "fmt", type=click.Choice(["verl-fsdp", "verl-megatron"]), default=None)
@click.option("--validation-data", "data", default=None, metavar="FILE", callback=nonblank("a parquet or jsonl file"),
              help="parquet/jsonl of SFT samples (default: the run's data.val_files).")
@click.option("--messages-key", default=None, callback=nonblank("a column name"),
              help="Column of chat messages (default: the run's data.messages_key, else messages).")
@click.option("--max-samples", type=int, default=64, show_default=True)
@click.option("--max-new-tokens", type=int, default=128, show_default=True)
@click.option("--gpus", type=int, default=1, show_default=True)
@click.option("--local", is_flag=True, help="Run here instead of as a Slurm job.")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit and record nothing.")
@click.option("--framework-version", default=None, metavar="V", callback=nonblank("a verl version such as 0.9.1"))
@click.option("--partition", default=None, callback=nonblank("a partition"))
@click.option("--time", "time_limit", default=None, metavar="HH:MM:SS", callback=nonblank("a time limit (01:00:00)"))
@json_option
@runs_options
def eval_cmd(name, run_id, model, checkpoint, fmt, data, messages_key, max_samples, max_new_tokens, gpus, local,
             dry_run, framework_version, partition, time_limit, as_json, site_path, runs_dir):
    """Evaluate an SFT model on validation samples and attach them to the training run.

    \b
    The job merges the checkpoint (unless --model is given), then for each sample
    computes the reference's token loss and a greedy generation; samples.jsonl and
    summary.json land in <run>/evals/<id>/, listed in the run record under `evals`.
      sf eval my-sft --run-id my-sft-k3x7q
      sf eval my-sft-k3x7q --model /models/exported --validation-data data/val.parquet
    """
    site = load_site(site_path)
    root = runs_root(runs_dir, site, site_path)
    try:
        run = runs.open_run(root, run_id or name)
    except SpecError as exc:
        if run_id:
            raise
        raise SpecError("--run-id", f"sf eval attaches samples to a training run: pass --run-id RUN "
                        f"({exc.message})") from None
    request, eval_id, out_dir = export_jobs.eval_request(
        site, root, run, model=model, checkpoint=checkpoint, fmt=fmt, data=data, messages_key=messages_key,
        max_samples=max_samples, max_new_tokens=max_new_tokens, gpus=gpus, framework_version=framework_version,
        partition=partition, time_limit=time_limit)
    sent = _send(request, dry_run=dry_run, local=local, what="eval", as_json=as_json)
    if sent is None:
        return
    if as_json:
        print_json({"ok": True, "run": run.id, "eval": eval_id, "job_id": sent[1],
                    "samples": f"{out_dir}/samples.jsonl", "summary": f"{out_dir}/summary.json"})
        return
    if sent[1] is None:
        click.echo(f"eval {eval_id} of run {run.id}: {out_dir}/summary.json")
        return
    click.echo(f"submitted eval job {sent[1]} for run {run.id}; samples will be in {out_dir}/samples.jsonl")
