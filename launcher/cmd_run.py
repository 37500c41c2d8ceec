"""`sf render` and `sf submit`: compile, check, render, and hand the script to Slurm.

    sf render NAME [spec flags] -o DIR      job.sbatch + overrides.txt + plan.json into DIR
    sf submit NAME [spec flags] [--dry-run] [--json] [--preflight] [--wait]

submit: load_spec -> compile_plan (checked with a placeholder run dir first, so a bad
spec leaves nothing behind) -> verlcheck against the login node's verl -> runtime ->
a new run (runs.create_run) -> render -> run files (spec.yaml, plan.json,
overrides.txt, job.sbatch; state "submitting") -> sbatch -> job ids, state "submitted"
(or "submit_failed" with the error, exit 1).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
import yaml

from launcher.cli_options import spec_flags, spec_options
from launcher.errors import SlurmError

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED", "REVOKED")


def _prepare(name: str, flags: dict, run_dir: str | None = None):
    """spec, plan (with `run_dir` or a placeholder), site, runtime; SpecError(s) on any problem.
    The checks are `sf validate`'s (launcher.cmd_spec.check), then the runtime."""
    from launcher.cmd_spec import check
    from launcher.runtime import resolve_runtime

    spec, plan, site = check(name, flags, run_dir)
    runtime = resolve_runtime(plan.framework, plan.framework_version, site)
    return spec, plan, site, runtime


def _pools_json(plan) -> list[dict]:
    return [{"name": p.name, "series": p.series, "nodes": p.nodes, "gpus_per_node": p.gpus_per_node,
             "het_group": p.het_group, "roles": list(p.roles)} for p in plan.pools]


@click.command()
@click.argument("name")
@spec_options
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR",
              help="Folder for job.sbatch, overrides.txt and plan.json (also the job's run dir).")
@click.option("--preflight", is_flag=True, help="Render the preflight variant of the job.")
def render(name, out_dir, preflight, **kwargs):
    """Write the sbatch script and overrides of an experiment into DIR.

    The script is standalone: `sbatch DIR/job.sbatch` runs it (its logs go to DIR/logs/).
    """
    from launcher.render import overrides_text, render_script

    flags = spec_flags(kwargs)
    out = Path(out_dir).expanduser().resolve()
    _spec, plan, site, runtime = _prepare(name, flags, run_dir=str(out))
    script = render_script(plan, site, runtime, preflight=preflight)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "job.sbatch").write_text(script)
    (out / "overrides.txt").write_text(overrides_text(plan))
    (out / "plan.json").write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
    for warning in plan.warnings:
        click.echo(f"sf: warning: {warning}", err=True)
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
    from launcher import runs, slurm
    from launcher.render import overrides_text, render_script

    flags = spec_flags(kwargs)
    spec, plan, site, runtime = _prepare(name, flags)
    if dry_run:
        script = render_script(plan, site, runtime, preflight=preflight)
        if as_json:
            click.echo(json.dumps({
                "experiment": plan.experiment, "method": plan.method, "framework_version": plan.framework_version,
                "run_dir": plan.run_dir, "launcher": plan.launcher, "entry": list(plan.entry),
                "overrides": list(plan.overrides), "sources": list(plan.sources), "pools": _pools_json(plan),
                "runtime": runtime.to_dict(), "preflight": preflight, "script": script,
                "warnings": list(plan.warnings)}, indent=2))
        else:
            click.echo(script, nl=False)
            for warning in plan.warnings:
                click.echo(f"sf: warning: {warning}", err=True)
            click.echo("sf: dry run: nothing written, nothing submitted", err=True)
        return

    from dataclasses import replace

    from launcher.compile import compile_plan

    run = runs.create_run(site.runs_dir, spec.name)
    try:
        plan = replace(compile_plan(spec, site, str(run.dir)), warnings=plan.warnings)
        script = render_script(plan, site, runtime, preflight=preflight)
    except Exception as exc:
        run.add_state("submit_failed", error=str(exc))
        raise
    run.write_text("spec.yaml", yaml.safe_dump({"name": spec.name, "exp_dir": spec.exp_dir, "values": spec.values,
                                                "provenance": spec.provenance}, sort_keys=False))
    run.write_json("plan.json", plan.to_dict())
    run.write_text("overrides.txt", overrides_text(plan))
    script_path = run.write_text("job.sbatch", script)
    run.update(preflight=preflight, runtime=runtime.to_dict())
    run.add_state("submitting")
    try:
        job_id = slurm.sbatch(script_path)
    except SlurmError as exc:
        run.add_state("submit_failed", error=str(exc))
        raise
    run.set_job_ids([job_id])
    run.add_state("submitted", job_id=job_id)
    for warning in plan.warnings:
        click.echo(f"sf: warning: {warning}", err=True)
    if as_json and not wait:
        click.echo(json.dumps({"run": run.id, "run_dir": str(run.dir), "job_id": job_id, "preflight": preflight}))
    elif not as_json:
        click.echo(f"submitted run {run.id} as job {job_id} ({'preflight, ' if preflight else ''}"
                   f"{len(plan.pools)} pool{'s' if len(plan.pools) > 1 else ''}); run dir {run.dir}")
    if wait:
        rc = wait_for_job(run, job_id, preflight=preflight, as_json=as_json)
        sys.exit(rc)


UNKNOWN_GIVE_UP_S = 120.0


def _job_state(job_id: str) -> str:
    from launcher import slurm

    try:
        info = slurm.show_job(job_id)
        state = (info.get("JobState") or "").upper()
        if state:
            return state
    except SlurmError:
        pass
    try:
        states = slurm.job_states([job_id])
        js = states.get(str(job_id))
        return js.state if js else "UNKNOWN"
    except SlurmError:
        return "UNKNOWN"


def wait_for_job(run, job_id: str, *, preflight: bool, as_json: bool, poll_s: float = 2.0,
                 echo=None) -> int:
    """Follow the job: print each new phase; at the end the reason / preflight report."""
    from launcher import runs

    echo = echo or (lambda text: click.echo(text, err=as_json))
    seen = 0
    state = "PENDING"
    last_state = None
    unknown_since = None
    while True:
        state = _job_state(job_id)
        # Neither scontrol nor sacct knows the job (purged, accounting down): do not wait
        # forever on a job nobody can see.
        if state == "UNKNOWN":
            unknown_since = unknown_since or time.monotonic()
            if time.monotonic() - unknown_since > UNKNOWN_GIVE_UP_S:
                echo(f"job {job_id}: Slurm has not known it for {UNKNOWN_GIVE_UP_S:.0f} s; "
                     f"stopped waiting (see `sf status {run.id}`)")
                break
        else:
            unknown_since = None
        if state != last_state:
            echo(f"[{time.strftime('%H:%M:%S')}] job {job_id}: {state}")
            last_state = state
        phases = runs.read_phases(run.dir)
        for event in phases[seen:]:
            extra = " ".join(f"{k}={v}" for k, v in event.items()
                             if k in ("seconds", "node", "rc", "reason", "ray_nodes", "what") and v is not None)
            echo(f"[{event.get('iso', '')[11:19]}] {event.get('phase')} {extra}".rstrip())
        seen = len(phases)
        if state in TERMINAL:
            break
        time.sleep(poll_s)
    reason = run.read_text(runs.REASON)
    report = run.read_json("preflight.json") if preflight else None
    ok = state == "COMPLETED"
    if as_json:
        click.echo(json.dumps({"run": run.id, "job_id": job_id, "state": state, "ok": ok,
                               "reason": reason.strip() if reason else None, "preflight": report}, indent=2))
    else:
        if report:
            from launcher.injob.preflight import summary

            click.echo(summary(report))
        if reason and not ok:
            click.echo(f"reason: {reason.strip()}")
        click.echo(f"job {job_id} ended: {state}")
    return 0 if ok else 1
