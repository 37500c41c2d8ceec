"""Flags shared by commands: the spec flags of `sf validate`, `sf submit`, `sf render` and
`sf sweep`, and where the run records are (`runs_options`; the order is
launcher.spec.site.runs_root's).

    @click.command()
    @click.argument("name")
    @spec_options
    def validate(name, **kwargs):
        flags = spec_flags(kwargs)                      # pops the spec flags out of kwargs
        spec, plan, site = pipeline.check(name, flags)  # launcher.submit.pipeline
"""

from __future__ import annotations

import json
import math

import click
from click.shell_completion import CompletionItem

from launcher import runs, sbatch_values
from launcher.compile import scheduler_options
from launcher.errors import SpecError
from launcher.slurm import login_env_variables, sbatch_input_variables, steering_variables
from launcher.spec.site import runs_root


def not_blank(value, flag: str, what: str, required: bool = False):
    """A flag given as '' (or spaces): a SpecError naming it, never read as "not given" (`--model ''`
    would fall back to config.yaml's model) nor as the current folder (`--train-data ''`)."""
    for item in value if isinstance(value, (list, tuple)) else (value,):
        if item is not None and not str(item).strip():
            raise SpecError(flag, f"{item!r} is empty; pass {what}" + ("" if required else f", or leave {flag} out"))
    return value


def nonblank(what: str):
    """A click callback: not_blank on the option's (or argument's) value (its SpecError is one
    line, launcher.cli.app)."""
    def callback(ctx, param, value):
        if isinstance(param, click.Option):
            return not_blank(value, max(param.opts, key=len), what, param.required)
        return not_blank(value, param.human_readable_name, what, required=True)

    return callback


def finite_seconds(value, flag: str, maximum: float = 86400.0):
    """A number of seconds a loop sleeps: a SpecError for nan, inf or more than `maximum`."""
    if value is not None and not (math.isfinite(value) and value <= maximum):
        raise SpecError(flag, f"{value!r} is not a number of seconds sf can wait; pass a number up to {maximum:g}")
    return value


_OPTIONS = (
    click.option("--model", metavar="PATH_OR_HF_ID|run:RUN", shell_complete=lambda *a: complete_model(*a),
                 callback=nonblank("a model path, a Hugging Face id or run:RUN"),
                 help="Model -> actor_rollout_ref.model.path (model.path for SFT); run:RUN takes RUN's export "
                      "(exported on the fly, after RUN succeeds, when it has none yet)."),
    click.option("--train-data", "train_data", metavar="FILE", multiple=True, callback=nonblank("a training file"),
                 help="Training file -> data.train_files (repeatable; relative to --train-dataset when given)."),
    click.option("--validation-data", "validation_data", metavar="FILE", multiple=True,
                 callback=nonblank("a validation file"),
                 help="Validation file -> data.val_files (repeatable)."),
    click.option("--train-dataset", "train_dataset", metavar="OWNER/NAME@VERSION",
                 callback=nonblank("OWNER/NAME@VERSION"),
                 help="Platform dataset under the site's dataset_roots; --train-data picks a file in it."),
    click.option("--profile", metavar="SERIES:G|SERIES:NxG", callback=nonblank("SERIES:G or SERIES:NxG"),
                 help="GPUs of the training pool, e.g. h200:8 or h200:2x8."),
    click.option("--set", "set_", metavar="KEY=VALUE", multiple=True,
                 help="A knob (rollout_n=8) or a raw Hydra key (a.b.c=1); repeatable."),
    click.option("--site", metavar="FILE", callback=nonblank("a site file"),
                 help="Site file (default: $SF_SITE, /etc/sf/site.yaml, ...)."),
    click.option("--runs-dir", "runs_dir", default=None, metavar="DIR", callback=nonblank("a folder"),
                 help="Run records folder (default: $SF_RUNS_DIR, then the site's runs_dir)."),
)


def complete_run_ids(ctx, param, incomplete):
    """Shell completion of RUN/SWEEP arguments: the ids in the runs folder (no Slurm call)."""
    try:
        root = runs_root(ctx.params.get("runs_dir"), site_path=ctx.params.get("site_path") or ctx.params.get("site"))
        names = runs.run_ids(root)  # the caller's runs (in a shared runs folder: their own folder)
    except Exception:  # completion must never fail loudly
        return []
    return [n for n in names if n.startswith(incomplete)]


def complete_model(ctx, param, incomplete):
    """--model: `run:<id>` for the runs of the runs folder once `r`/`run:` is typed, else files."""
    if "run:".startswith(incomplete[:4]) and incomplete:
        ids = complete_run_ids(ctx, param, incomplete[4:] if incomplete.startswith("run:") else "")
        items = [CompletionItem(f"run:{i}") for i in ids if f"run:{i}".startswith(incomplete)]
        if items:
            return items
    return [CompletionItem(incomplete, type="file")]


def spec_options(func):
    """Decorator adding the spec flags (and the scheduler flags) to a click command."""
    for option in reversed(_OPTIONS + _scheduler_options()):
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
        "runs_dir": kwargs.pop("runs_dir", None),
    }
    flags["slurm"], flags["slurm_provenance"] = _pop_scheduler_flags(kwargs)
    flags["after"] = kwargs.pop("after", None)  # --after RUN (launcher.submit.chain)
    return flags


def _scheduler_options():
    """The scheduler flags (launcher.compile.scheduler_options checks their values)."""
    return (
        click.option("--account", metavar="NAME", callback=nonblank("an account"),
                     help="Slurm account to charge (slurm.account; over the site's)."),
        click.option("--qos", metavar="NAME", callback=nonblank("a QOS"),
                     help="Slurm QOS (slurm.qos; over the site's)."),
        click.option("--reservation", metavar="NAME", callback=nonblank("a reservation"),
                     help="Run in a Slurm reservation (every het group)."),
        click.option("--mail-type", "mail_type", metavar="TYPES", callback=nonblank("mail types such as END,FAIL"),
                     help="Mail on these events, e.g. FAIL or END,FAIL (job-wide)."),
        click.option("--mail-user", "mail_user", metavar="ADDR", callback=nonblank("an address"),
                     help="Who gets the mail (job-wide)."),
        click.option("--dependency", metavar="EXPR", callback=nonblank("a dependency such as afterok:123"),
                     help="Slurm dependency, e.g. afterok:1234 (job-wide; sf adds singleton for the run)."),
        click.option("--exclude", metavar="NODES", callback=nonblank("node names"),
                     help="Nodes to leave out, e.g. node[01-02] (every het group)."),
        click.option("--constraint", metavar="FEATURES", callback=nonblank("node features such as a100&ib"),
                     help="Node features, joined with the series' own by & (every het group)."),
        click.option("--after", metavar="RUN", shell_complete=complete_run_ids, callback=nonblank("a run id"),
                     help="Wait for another run (or sweep) to succeed: afterok on its "
                     "current job, still right after it is requeued."),
        click.option("--exclude-bad-nodes", "exclude_bad_nodes", is_flag=True, default=None,
                     help="Check every node (object transfers; NCCL all-reduce and a GEMM per GPU on GPU nodes) "
                          "before training; requeue without the nodes that fail (at most max_requeues times)."),
        click.option("--sbatch", "sbatch_", metavar="KEY=VALUE", multiple=True,
                     help="Another long sbatch option from sf's allowlist, e.g. mem-per-gpu=32G (repeatable; "
                          "job-wide ones such as begin go to the first het group, per-node ones to every group)."),
    )


def _pop_scheduler_flags(kwargs: dict) -> tuple[dict, dict]:
    """Pop the scheduler flags out of click's kwargs -> ({slurm key: value}, {dotted: flag})."""
    slurm, prov = {}, {}
    for flag, key in (("--account", "account"), ("--qos", "qos")):  # rendered by launcher.render.script itself
        value = kwargs.pop(key, None)
        if value is not None:
            slurm[key] = sbatch_values.account(value, flag)
            prov[f"slurm.{key}"] = flag
    for flag, key, *_ in scheduler_options.SCALARS:
        value = kwargs.pop(key, None)
        if value is not None:
            slurm[key] = value
            prov[f"slurm.{key}"] = flag
    if kwargs.pop("exclude_bad_nodes", None):
        slurm["exclude_bad_nodes"] = True
        prov["slurm.exclude_bad_nodes"] = "--exclude-bad-nodes"
    extra = scheduler_options.parse_sbatch_flags(kwargs.pop("sbatch_", None) or ())
    if extra:
        slurm["sbatch"] = extra
        prov.update({f"slurm.sbatch.{k}": "--sbatch" for k in extra})
        prov["slurm.sbatch"] = "--sbatch"
    return slurm, prov


# --- where the run records are: the flags of every command that reads or writes them ------

def json_option(func):
    """--json: machine-readable output (errors too: launcher.cli.app prints them as JSON)."""
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output (errors included).")(func)


def print_json(doc: dict) -> None:
    """One JSON document on stdout: what every command prints with --json."""
    click.echo(json.dumps(doc, indent=2))


def runs_options(func):
    """Decorator adding --runs-dir and --site (passed as `runs_dir`, `site_path`)."""
    func = click.option("--runs-dir", default=None, metavar="DIR", callback=nonblank("a folder"),
                        help="Run records folder (default: $SF_RUNS_DIR, then the site's runs_dir).")(func)
    func = click.option("--site", "site_path", default=None, metavar="FILE", callback=nonblank("a site file"),
                        help="Site file (default: $SF_SITE, /etc/sf/site.yaml, ~/.config/sf/site.yaml).")(func)
    return func


def say_sbatch_env_left_out(passed=()) -> None:
    """One line naming the SBATCH_* variables sf's sbatch calls leave out (launcher.slurm)."""
    login = login_env_variables(passed=passed)
    if login:
        click.echo(f"sf: left out of the job's environment: {', '.join(login)} (set on this login node, they would "
                   "carry another Python or verl into the job than the runtime sf checked; the site's "
                   "slurm.pass_login_env lets named ones through)", err=True)
    names = sbatch_input_variables(passed=passed)
    if names:
        click.echo(f"sf: left out of sbatch's environment: {', '.join(names)} (they would override the script's "
                   "#SBATCH lines; the site's slurm.pass_sbatch_env lets named ones through)", err=True)
    steering = steering_variables(passed=passed)
    if steering:
        shown = ", ".join(steering[:8]) + (f" and {len(steering) - 8} more" if len(steering) > 8 else "")
        click.echo(f"sf: left out of the job's environment: {shown} (they would steer the job's srun steps, Ray "
                   "or sf's test hooks instead of sf; the site's slurm.pass_ray_env lets named RAY_* ones through)",
                   err=True)
