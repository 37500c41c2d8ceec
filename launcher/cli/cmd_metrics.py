"""`sf metrics` and `sf plot`: the key training metrics of a run (launcher.monitor.metrics)."""

from __future__ import annotations

import json

import click

from launcher import runs
from launcher.cli.options import runs_options
from launcher.monitor import metrics as m
from launcher.spec.site import runs_root


def _open(site_path, runs_dir, run_id):
    return runs.open_run(runs_root(runs_dir, site_path=site_path), run_id)


@click.command("metrics")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True, help="Print the series as JSON.")
@runs_options
def metrics(run_id, as_json, site_path, runs_dir):
    """Print the key training metrics of RUN (from verl's file logger).

    \b
    Series: critic/score/mean, val-core/*/reward/mean*, timing_s/gen and timing_s/step,
    response_length/mean, actor/pg_loss, critic/vf_loss (train/loss, val/loss for SFT).
    """
    run = _open(site_path, runs_dir, run_id)
    data = m.load_run_metrics(run.dir, run.id)
    if as_json:
        click.echo(json.dumps(m.to_json(run.id, data), indent=2))
    else:
        click.echo(m.format_table(run.id, m.summarize(data)))


@click.command("plot")
@click.argument("run_id", metavar="RUN")
@click.option("-o", "--output", required=True, metavar="FILE.png", help="PNG file to write.")
@runs_options
def plot(run_id, output, site_path, runs_dir):
    """Draw the key training metrics of RUN to a PNG (needs matplotlib: sf[plots])."""
    run = _open(site_path, runs_dir, run_id)
    data = m.load_run_metrics(run.dir, run.id)
    path = m.plot(data, output, title=f"{run.id} ({data.steps} steps)")
    click.echo(f"wrote {path}")
