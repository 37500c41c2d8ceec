"""`sf render` and `sf submit`: one prepared request (launcher.submit.pipeline), written or sent.

    sf render NAME [spec flags] -o DIR      job.sbatch + overrides.txt + plan.json into DIR
    sf submit NAME [spec flags] [--dry-run] [--json] [--preflight] [--wait]

submit: pipeline.prepare_run (spec, ONE compile checked against the login node's verl,
runtime, rendered with a placeholder run dir, so a bad spec leaves nothing behind) ->
--dry-run prints that request; otherwise pipeline.submit: a new run (state "created"),
the same request rendered with the real run dir -> spec.yaml, plan.json, overrides.txt,
job.sbatch -> "submitting" -> sbatch -> job id, "submitted" (or "submit_failed" with the
error, exit 1). --wait then follows it with the monitor's poll (launcher.monitor.poll).
"""

from __future__ import annotations

import json
import sys
import time

import click

from launcher import runs
from launcher.cli.options import (
    json_option,
    nonblank,
    print_json,
    say_sbatch_env_left_out,
    spec_flags,
    spec_options,
)
from launcher.errors import SpecError
from launcher.render.logger_env import after_submit
from launcher.spec.files import expand_user
from launcher.states import SLURM_COMPLETED
from launcher.submit import pipeline
from launcher.submit.pipeline import prepare_run, write_render


def _warn(warnings) -> None:
    for warning in warnings:
        click.echo(f"sf: warning: {warning}", err=True)


@click.command()
@click.argument("name")
@spec_options
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR", callback=nonblank("a folder"),
              help="Folder for job.sbatch, overrides.txt and plan.json (also the job's run dir).")
@click.option("--preflight", is_flag=True, help="Render the preflight variant of the job.")
@json_option
def render(name, out_dir, preflight, as_json, **kwargs):
    """Write the sbatch script and overrides of an experiment into DIR.

    The script is standalone: `sbatch DIR/job.sbatch` runs it (its logs go to DIR/logs/).
    """
    request = prepare_run(name, spec_flags(kwargs), preflight=preflight)
    if request.upstream is not None:
        ce = request.spec.chain_export
        raise SpecError("--model", f"run {ce.run_id} has no export yet and sf render submits nothing; "
                        f"`sf submit` queues the export first, or `sf export {ce.run_id}` and render after it")
    out = runs.real_path(expand_user(out_dir, "--output"), "--output")  # no other user's link followed
    written = write_render(request, out)
    _warn(request.warnings)
    if as_json:
        print_json({"ok": True, "files": [str(f) for f in written],
                    "submit": f"sbatch {out / 'job.sbatch'}", "warnings": list(request.warnings)})
        return
    click.echo(f"wrote {out / 'job.sbatch'}, {out / 'overrides.txt'}, {out / 'plan.json'}")
    click.echo(f"submit it by hand with: sbatch {out / 'job.sbatch'}")


@click.command()
@click.argument("name")
@spec_options
@click.option("--dry-run", is_flag=True, help="Print what would be submitted; write and submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--preflight", is_flag=True,
              help="Bring the job up to the barrier, then check instead of training (report in preflight.json).")
@click.option("--wait", is_flag=True, help="Wait for the job to end, showing its phases; exit with its result.")
def submit(name, dry_run, as_json, preflight, wait, **kwargs):
    """Compile, render and submit an experiment to Slurm.

    \b
    Examples:
      sf submit my-grpo --profile fake:2x4 --dry-run
      sf submit examples/grpo --preflight --wait
    """
    request = pipeline.prepare_run(name, spec_flags(kwargs), preflight=preflight)
    plan = request.plan
    say_sbatch_env_left_out(request.pass_sbatch_env)  # what sbatch runs with is part of the request
    chain = request.spec.chain_export if request.upstream is not None else None
    if dry_run:
        script = request.script
        if as_json:
            click.echo(json.dumps({
                "experiment": plan.experiment, "method": plan.method, "framework_version": plan.framework_version,
                "run_dir": request.run_dir, "launcher": plan.launcher, "entry": list(plan.entry),
                "overrides": list(plan.overrides), "sources": list(plan.sources), "pools": plan.to_dict()["pools"],
                "resolved": plan.resolved,
                "runtime": request.record["runtime"], "preflight": preflight, "script": script,
                "chain_export": {**chain.describe(), "script": request.upstream.script} if chain else None,
                "warnings": list(request.warnings)}, indent=2))
        else:
            click.echo(script, nl=False)
            _warn(request.warnings)
            if chain:
                click.echo(chain_line(chain, None, preflight, dry_run=True), err=True)
            click.echo("sf: dry run: nothing written, nothing submitted", err=True)
        return


    # a pool no partition can ever hold, an account or QOS Slurm would refuse: exit 2 here
    from launcher.submit.live import verify  # lazy: asks Slurm, so never on a dry run's path (start-up cost)

    live_warnings = verify(plan, request.site, getattr(request.spec, "origins", None))
    sent = pipeline.submit(request)
    run, job_id = sent.run, sent.job_id
    _warn((*request.warnings, *live_warnings))
    export_job = (run.raw_record().get("model_from") or {}).get("export_job") if chain else None
    if as_json and not wait:
        click.echo(json.dumps({"run": run.id, "run_dir": str(run.dir), "job_id": job_id, "preflight": preflight,
                               "export_job": export_job}))
    elif not as_json:
        if chain:
            click.echo(chain_line(chain, export_job, preflight))
        click.echo(f"submitted run {run.id} as job {job_id} ({'preflight, ' if preflight else ''}"
                   f"{len(plan.pools)} pool{'s' if len(plan.pools) > 1 else ''}); run dir {run.dir}")

    for line in after_submit(run.dir, sent.rendered.script):  # W&B offline: the `wandb sync` line
        click.echo(line, err=True)
    if wait:
        sys.exit(wait_for_job(run, job_id, preflight=preflight, as_json=as_json))


def chain_line(chain, export_job: str | None, preflight: bool, dry_run: bool = False,
               waiting: str = "this job") -> str:
    """What `--model run:RUN` queued (or would queue) before the run (or a sweep's
    points): RUN's export."""
    kind = "export preflight (checks, merges nothing)" if preflight else "export"
    when = f"after {chain.after}" if chain.after else "now (the run completed)"
    if dry_run:
        return (f"sf: dry run: would first queue an {kind} of run {chain.run_id}'s last checkpoint, {when}, "
                f"into {chain.target}; {waiting} would wait on afterok:<that export job>")
    return (f"queued {kind} job {export_job} of run {chain.run_id}'s last checkpoint ({when}) -> {chain.target}")


# --wait: the monitor's poll (one sacct per poll), spaced out the way submitit's watcher
# does it: often at first, then less often while nothing changes.
POLL_FIRST_S = 1.0
POLL_GROWTH = 1.5
POLL_MAX_S = 15.0
UNKNOWN_GIVE_UP_S = 120.0


def next_poll_delay(delay: float, changed: bool) -> float:
    """Back to the first delay when something changed, else POLL_GROWTH times longer, at
    most POLL_MAX_S."""
    return POLL_FIRST_S if changed else min(POLL_MAX_S, delay * POLL_GROWTH)


def wait_for_job(run, job_id: str, *, preflight: bool, as_json: bool, echo=None, sleep=time.sleep) -> int:
    """Follow the run with monitor.poll: print each new Slurm state and phase; at the end
    the reason / preflight report. 0 when the job completed, else 1."""
    echo = echo or (lambda text: click.echo(text, err=as_json))
    from launcher.monitor import poll as monitor  # lazy: only --wait follows the job (start-up cost)
    from launcher.monitor.progress import wait_lines  # lazy: as monitor above

    seen, last_state, unknown_since, delay = 0, None, None, POLL_FIRST_S
    while True:
        polled = monitor.poll([run])
        if not polled:  # the record could not be read this time (poll leaves such runs out)
            unknown_since = unknown_since or time.monotonic()
            if time.monotonic() - unknown_since > UNKNOWN_GIVE_UP_S:
                echo(f"job {job_id}: the run record {run.dir} could not be read for {UNKNOWN_GIVE_UP_S:.0f} s; "
                     f"stopped waiting (see `sf status {run.id}`)")
                break
            sleep(delay)
            continue
        status = polled[0]
        slurm_state = status.slurm_state or "UNKNOWN"
        # Slurm does not know the job (not yet in sacct, or purged): do not wait forever
        # on a job nobody can see.
        if slurm_state == "UNKNOWN":
            unknown_since = unknown_since or time.monotonic()
            if time.monotonic() - unknown_since > UNKNOWN_GIVE_UP_S:
                echo(f"job {job_id}: Slurm has not known it for {UNKNOWN_GIVE_UP_S:.0f} s; "
                     f"stopped waiting (see `sf status {run.id}`)")
                break
        else:
            unknown_since = None
        changed = slurm_state != last_state
        new_state = [(time.time(), f"job {job_id}: {slurm_state}")] if changed else []
        last_state = slurm_state
        phases = runs.read_phases(run.dir)
        for line in wait_lines(phases[seen:], new_state):  # in time order, verl's phases named
            echo(line)
        changed = changed or len(phases) > seen
        seen = len(phases)
        if status.done:
            break
        delay = next_poll_delay(delay, changed)
        sleep(delay)
    reason = run.read_text(runs.REASON)
    report = run.read_json("preflight.json") if preflight else None
    ok = last_state == SLURM_COMPLETED
    if as_json:
        click.echo(json.dumps({"run": run.id, "job_id": job_id, "state": last_state, "ok": ok,
                               "reason": reason.strip() if reason else None, "preflight": report}, indent=2))
    else:
        if report:
            # lazy: the preflight report's module (with its health-check imports) costs every
            # `sf submit --dry-run` about 8 ms of a 0.6 s cold start; only --wait --preflight prints it
            from launcher.injob.preflight import summary

            click.echo(summary(report))
        if reason and not ok:
            click.echo(f"reason: {reason.strip()}")
        click.echo(f"job {job_id} ended: {last_state}")
    return 0 if ok else 1
