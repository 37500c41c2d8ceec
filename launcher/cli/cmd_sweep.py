"""`sf sweep`: a grid of points as one Slurm job array (or throttled hetjobs).

    sf sweep NAME [spec flags] --grid KEY=V1,V2 [--grid ...] [--max-parallel K]
             [--preflight] [--dry-run] [--json]
    sf sweep --retry-failed SWEEP [--json]

Parses and prints: launcher.submit.sweep_send prepares every point (as `sf submit`
prepares one run, before anything is written; one bad point fails the sweep with exit 2,
naming the point) and sends them (records, manifest, then every job through
launcher.submit.pipeline.submit, sf's one send path). Layout: launcher.submit.sweep.
"""

from __future__ import annotations

import json
import sys

import click

from launcher.cli.cmd_run import chain_line
from launcher.cli.options import say_sbatch_env_left_out, spec_flags, spec_options
from launcher.errors import SpecError
from launcher.render.script import array_directive
from launcher.submit import sweep as sweep_mod
from launcher.submit import sweep_send


@click.command()
@click.argument("name", required=False)
@spec_options
@click.option("--grid", "grid_items", multiple=True, metavar="KEY=V1,V2",
              help="A knob or Hydra key and its values (repeatable: the points are the product).")
@click.option("--max-parallel", default=None, metavar="K",
              help="At most K points run at once (array `%K`; hetjob sweeps chain dependencies).")
@click.option("--preflight", is_flag=True, help="Every point runs the preflight instead of training.")
@click.option("--dry-run", is_flag=True, help="Compile every point and show what would be submitted; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--retry-failed", "retry", default=None, metavar="SWEEP",
              help="Submit the failed points of SWEEP again (same sweep, same run dirs, new jobs).")
def sweep(name, grid_items, max_parallel, preflight, dry_run, as_json, retry, **kwargs):
    """Submit a grid of runs: one Slurm job array (or throttled hetjobs for multi-pool methods).

    \b
    Examples:
      sf sweep my-grpo --grid actor_lr=1e-6,3e-6 --grid rollout_n=5,8 --max-parallel 2
      sf sweep my-grpo --grid actor_lr=1e-6,3e-6 --dry-run
      sf sweep --retry-failed my-grpo-k3x7q
    """
    flags = spec_flags(kwargs)
    if retry:
        if name or grid_items:
            raise SpecError("--retry-failed", "takes only the sweep id (the points are in its record); "
                            "drop NAME and --grid")
        return _retry(retry, flags.get("site"), flags.get("runs_dir"), as_json, dry_run)
    if not name:
        raise SpecError("NAME", "give the experiment to sweep (or --retry-failed SWEEP)")
    prepared = sweep_send.prepare_sweep(name, flags, grid_items, max_parallel, preflight)
    if dry_run:
        return _dry_run(prepared, as_json)
    say_sbatch_env_left_out(prepared.site.pass_sbatch_env)
    sent = sweep_send.send(prepared, _say, lambda ce, job: click.echo(chain_line(ce, job, preflight), err=as_json))
    for warning in sent.warnings:
        click.echo(f"sf: warning: {warning}", err=True)
    _report(sent, as_json, retry=False)
    if not sent.ok:
        sys.exit(1)


def _say(line: str) -> None:
    click.echo(line, err=True)


def _dry_run(prepared, as_json):
    """Every point's values beside its grid text ("given"), and the script that would be sent."""
    first, n, k, mode = prepared.first, len(prepared.points), prepared.max_parallel, prepared.mode
    script = prepared.script()
    pts = [{"index": i, "params": values, "given": given, "overrides": list(request.plan.overrides),
            "sources": list(request.plan.sources)}
           for i, ((values, request), given) in enumerate(zip(prepared.points, prepared.given, strict=True))]
    if as_json:
        click.echo(json.dumps({"experiment": first.experiment, "mode": mode, "points": pts, "max_parallel": k,
                               "array": array_directive(n, k) if mode == "array" else None,
                               "preflight": prepared.preflight, "script": script,
                               "chain_exports": [{**ce.describe(), "script": req.script}
                                                 for ce, req in prepared.exports.items()],
                               "warnings": sorted({w for _, r in prepared.points for w in r.warnings})}, indent=2))
        return
    click.echo(script, nl=False)
    shape = f"one job array {array_directive(n, k)}" if mode == "array" else f"{n} hetjobs, at most {k} at once"
    for ce in prepared.exports:
        click.echo(chain_line(ce, None, prepared.preflight, dry_run=True, waiting="every point"), err=True)
    click.echo(f"sf: dry run: {n} points as {shape}", err=True)
    for p in pts:
        click.echo(f"sf:   point {p['index']}: {sweep_mod.label(p['params'])}", err=True)
    click.echo("sf: dry run: nothing written, nothing submitted", err=True)


def _report(sent, as_json, retry: bool) -> None:
    sweep_run, members, mode, k = sent.sweep_run, sent.members, sent.mode, sent.max_parallel
    rec = sweep_run.raw_record()
    pts = []
    for m in members:
        r = m.raw_record()
        pts.append({"index": r["sweep"]["index"], "run": m.id, "job_id": ",".join(r.get("job_ids") or []),
                    "state": r.get("state"), "params": r.get("params")})
    if as_json:
        click.echo(json.dumps({"sweep": sweep_run.id, "sweep_dir": str(sweep_run.dir), "mode": mode,
                               "max_parallel": k, "job_ids": rec.get("job_ids") or [], "retry": retry,
                               "chain_exports": rec.get("chain_exports") or [], "points": pts}, indent=2))
        return
    what = "resubmitted" if retry else "submitted"
    if mode == "array":
        click.echo(f"{what} sweep {sweep_run.id}: {len(pts)} point{'s' if len(pts) != 1 else ''} as job array "
                   f"{(rec.get('job_ids') or ['-'])[0]} (at most {k} at once); sweep dir {sweep_run.dir}")
    else:
        click.echo(f"{what} sweep {sweep_run.id}: {len(pts)} hetjob{'s' if len(pts) != 1 else ''} "
                   f"(at most {k} at once, afterany dependencies); sweep dir {sweep_run.dir}")
    for p in pts:
        click.echo(f"  point {p['index']}  {p['run']}  job {p['job_id'] or '-'}  {sweep_mod.label(p['params'] or {})}")
    click.echo(f"follow it with: sf status {sweep_run.id}")


def _retry(sweep_id, site_path, runs_dir, as_json, dry_run):
    found = sweep_send.failed(sweep_id, site_path, runs_dir)
    if not found.failed:
        states = ", ".join(f"{p['index']}: {p['state']}" for p in found.points)
        if as_json:
            click.echo(json.dumps({"sweep": found.sweep_run.id, "retried": [], "points": found.points},
                                  default=str, indent=2))
        else:
            click.echo(f"sweep {found.sweep_run.id}: no failed points ({states})")
        return
    if dry_run:
        click.echo(f"sf: dry run: would resubmit points {', '.join(map(str, found.failed))} of sweep "
                   f"{found.sweep_run.id}; nothing submitted", err=True)
        return
    say_sbatch_env_left_out(found.pass_env)
    sent = sweep_send.resend(found, _say)
    _report(sent, as_json, retry=True)
    if not sent.ok:
        sys.exit(1)
