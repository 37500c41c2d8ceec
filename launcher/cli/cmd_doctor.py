"""`sf doctor`: the site file against the live cluster (launcher.submit.doctor)."""

from __future__ import annotations

import json
import sys

import click

from launcher.cli.options import nonblank
from launcher.submit import doctor as dr


@click.command("doctor")
@click.option("--site", "site_path", default=None, metavar="FILE", callback=nonblank("a site file"),
              help="Site file to check (default: as sf finds it).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(site_path, as_json):
    """Check the site file against the live cluster and say what to fix.

    Exit 0 when every check passes, 1 otherwise.
    """
    checks = dr.run_checks(site_path)
    if as_json:
        click.echo(json.dumps({"ok": dr.all_ok(checks), "checks": [c.to_dict() for c in checks]}, indent=2))
    else:
        click.echo(dr.format_checks(checks))
    sys.exit(0 if dr.all_ok(checks) else 1)
