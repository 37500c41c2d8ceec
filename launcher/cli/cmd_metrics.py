"""`sf metrics` and `sf plot`: the key training metrics of a run (launcher.monitor.metrics)."""

from __future__ import annotations

import json

import click

from launcher import runs
from launcher.cli.options import json_option, nonblank, print_json, runs_options
from launcher.errors import SpecError
from launcher.monitor import metrics as m
from launcher.monitor import timeline as timeline_mod
from launcher.spec.site import runs_root


def _open(site_path, runs_dir, run_id):
    return runs.open_run(runs_root(runs_dir, site_path=site_path), run_id)


def _sweep(run):
    """(record, grid keys, points) when `run` is a sweep, else None."""
    record = run.raw_record()
    if record.get("kind") != "sweep":
        return None
    points = m.load_sweep_points(run.dir, record)
    return record, m.grid_keys(record, points), points


@click.command("metrics")
@click.argument("run_id", metavar="RUN|SWEEP")
@click.option("--json", "as_json", is_flag=True, help="Print the series as JSON.")
@runs_options
def metrics(run_id, as_json, site_path, runs_dir):
    """Print the key training metrics of RUN (from verl's file logger), or one row per point
    of SWEEP.

    \b
    Series: critic/score/mean, val-core/*/reward/mean*, timing_s/gen and timing_s/step,
    response_length/mean, actor/pg_loss, critic/vf_loss (train/loss, val/loss for SFT).
    A sweep: per point its swept values, state, steps, the reward's last and best value
    (SFT: train/loss, lowest best) and the validation score's first and last value.
    """
    run = _open(site_path, runs_dir, run_id)
    sweep = _sweep(run)
    if sweep is not None:
        _record, keys, points = sweep
        if as_json:
            click.echo(json.dumps(m.sweep_to_json(run.id, keys, points), indent=2))
        else:
            click.echo(m.format_sweep_table(run.id, keys, [m.point_summary(p) for p in points]))
        return
    data = m.load_run_metrics(run.dir, run.id)
    if as_json:
        click.echo(json.dumps(m.to_json(run.id, data), indent=2))
    else:
        click.echo(m.format_table(run.id, m.summarize(data)))


@click.command("plot")
@click.argument("run_id", metavar="RUN|SWEEP")
@click.option("-o", "--output", required=True, metavar="FILE.png", callback=nonblank("a FILE.png to write"),
              help="PNG file to write.")
@click.option("--timeline", is_flag=True, help="Draw RUN's start-up per attempt (sf status RUN --timeline) instead.")
@json_option
@runs_options
def plot(run_id, output, timeline, as_json, site_path, runs_dir):
    """Draw the key training metrics of RUN to a PNG (needs matplotlib: sf[plots]); for a
    SWEEP, every point's curves in one PNG (a colour per point); with --timeline, RUN's
    start-up: a bar per attempt, a segment per phase (sf's blue, verl's orange)."""
    run = _open(site_path, runs_dir, run_id)
    if timeline:
        rows = timeline_mod.attempts(runs.read_phases(run.dir))
        if not rows:
            raise SpecError("--timeline", f"run {run.id} has no events yet: plot it once its job has started")
        path = timeline_mod.plot_timeline(rows, output, title=f"{run.id}: start-up per attempt")
        if as_json:
            print_json({"ok": True, "run": run.id, "png": str(path), "attempts": len(rows)})
            return
        click.echo(f"wrote {path}")
        return
    sweep = _sweep(run)
    if sweep is not None:
        _record, keys, points = sweep
        path = m.plot_sweep(points, keys, output, title=f"sweep {run.id} ({len(points)} points)")
        if as_json:
            print_json({"ok": True, "sweep": run.id, "png": str(path),
                        "points": [{"index": p.index, "run": p.run_id, "steps": p.metrics.steps if p.metrics else 0}
                                   for p in points]})
            return
        click.echo(f"wrote {path}")
        return
    data = m.load_run_metrics(run.dir, run.id)
    path = m.plot(data, output, title=f"{run.id} ({data.steps} steps)")
    if as_json:
        print_json({"ok": True, "run": run.id, "png": str(path), "steps": data.steps})
        return
    click.echo(f"wrote {path}")
