"""Flags shared by commands: the spec flags of `sf validate`, `sf submit`, `sf render` and
`sf sweep`, and where the run records are (`runs_options`, `runs_root`).

    @click.command()
    @click.argument("name")
    @spec_options
    def submit(name, **kwargs):
        flags = spec_flags(kwargs)         # pops the spec flags out of kwargs
        site = load_site(flags.get("site"))
        spec = load_spec(name, flags, site)
"""

from __future__ import annotations

import os
from pathlib import Path

import click

_OPTIONS = (
    click.option("--model", metavar="PATH_OR_HF_ID|run:RUN", shell_complete=lambda *a: complete_model(*a),
                 help="Model -> actor_rollout_ref.model.path (model.path for SFT); run:RUN takes RUN's export "
                      "(exported on the fly, after RUN succeeds, when it has none yet)."),
    click.option("--train-data", "train_data", metavar="FILE", multiple=True,
                 help="Training file -> data.train_files (repeatable; relative to --train-dataset when given)."),
    click.option("--validation-data", "validation_data", metavar="FILE", multiple=True,
                 help="Validation file -> data.val_files (repeatable)."),
    click.option("--train-dataset", "train_dataset", metavar="OWNER/NAME@VERSION",
                 help="Platform dataset under the site's dataset_roots; --train-data picks a file in it."),
    click.option("--profile", metavar="SERIES:G|SERIES:NxG",
                 help="GPUs of the training pool, e.g. h200:8 or h200:2x8."),
    click.option("--set", "set_", metavar="KEY=VALUE", multiple=True,
                 help="A knob (rollout_n=8) or a raw Hydra key (a.b.c=1); repeatable."),
    click.option("--site", metavar="FILE", help="Site file (default: $SF_SITE, /etc/sf/site.yaml, ...)."),
)


def complete_model(ctx, param, incomplete):
    """--model: `run:<id>` for the runs of the runs folder once `r`/`run:` is typed, else files."""
    from click.shell_completion import CompletionItem

    if "run:".startswith(incomplete[:4]) and incomplete:
        from launcher.cli.cmd_monitor import complete_run_ids

        ids = complete_run_ids(ctx, param, incomplete[4:] if incomplete.startswith("run:") else "")
        items = [CompletionItem(f"run:{i}") for i in ids if f"run:{i}".startswith(incomplete)]
        if items:
            return items
    return [CompletionItem(incomplete, type="file")]


def spec_options(func):
    """Decorator adding the spec flags (and the scheduler flags) to a click command."""
    from launcher.compile.scheduler_options import click_options

    for option in reversed(_OPTIONS + click_options()):
        func = option(func)
    return func


def spec_flags(kwargs: dict) -> dict:
    """Pop the spec flags out of click's kwargs into the `flags` dict load_spec takes."""
    flags = {
        "model": kwargs.pop("model", None),
        "train_data": list(kwargs.pop("train_data", None) or ()) or None,
        "validation_data": list(kwargs.pop("validation_data", None) or ()) or None,
        "train_dataset": kwargs.pop("train_dataset", None),
        "profile": kwargs.pop("profile", None),
        "set": list(kwargs.pop("set_", None) or ()),
        "site": kwargs.pop("site", None),
    }
    from launcher.compile.scheduler_options import pop_flags

    flags["slurm"], flags["slurm_provenance"] = pop_flags(kwargs)
    flags["after"] = kwargs.pop("after", None)  # --after RUN (launcher.submit.chain)
    return flags


# --- where the run records are: the flags of every command that reads or writes them ------

def runs_options(func):
    """Decorator adding --runs-dir and --site (passed as `runs_dir`, `site_path`)."""
    func = click.option("--runs-dir", default=None, metavar="DIR",
                        help="Run records folder (default: $SF_RUNS_DIR, then the site's runs_dir).")(func)
    func = click.option("--site", "site_path", default=None, metavar="FILE",
                        help="Site file (default: $SF_SITE, /etc/sf/site.yaml, ~/.config/sf/site.yaml).")(func)
    return func


def runs_root(site_path: str | None, runs_dir: str | None, site=None) -> Path:
    """--runs-dir, then $SF_RUNS_DIR, then the site's runs_dir (the site file is read
    only when needed, unless the caller has it already)."""
    if runs_dir:
        return Path(runs_dir).expanduser()
    if os.environ.get("SF_RUNS_DIR"):
        return Path(os.environ["SF_RUNS_DIR"]).expanduser()
    if site is None:
        from launcher.spec.site import load_site

        site = load_site(site_path)
    return Path(site.runs_dir)


def say_sbatch_env_left_out(passed=()) -> None:
    """One line naming the SBATCH_* variables sf's sbatch calls leave out (launcher.slurm)."""
    from launcher.slurm import login_env_variables, sbatch_input_variables

    login = login_env_variables(passed=passed)
    if login:
        click.echo(f"sf: left out of the job's environment: {', '.join(login)} (set on this login node, they would "
                   "carry another Python or verl into the job than the runtime sf checked; the site's "
                   "slurm.pass_login_env lets named ones through)", err=True)
    names = sbatch_input_variables(passed=passed)
    if names:
        click.echo(f"sf: left out of sbatch's environment: {', '.join(names)} (they would override the script's "
                   "#SBATCH lines; the site's slurm.pass_sbatch_env lets named ones through)", err=True)
