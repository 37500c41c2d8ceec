"""One logger run across restarts: the W&B environment of a run's job (pure).

When trainer.logger includes wandb, the batch script exports (after it knows the run dir,
so array tasks get their own point's id):

    WANDB_RUN_ID=<sf run id>    the same in every attempt (requeue) and on every node
    WANDB_RESUME=allow          a requeued attempt continues that run instead of starting one
    WANDB_PROJECT, WANDB_NAME   trainer.project_name / trainer.experiment_name when set, else
                                the experiment's name / the run id
    WANDB_DIR=<run dir>         the W&B files of every attempt stay with the run
    WANDB_MODE=offline          where the site file says `internet: false` (compute nodes
                                reach no internet); `sf submit` prints the `wandb sync` line

verl passes project and name to wandb.init itself; the id and resume mode come from the
environment. MLflow gets no run id: mlflow.start_run refuses an MLFLOW_RUN_ID that does
not exist yet, so its first attempt would fail.
"""

from __future__ import annotations

import shlex

from launcher.errors import SpecError


def loggers(overrides) -> list[str]:
    """The backends of the last `trainer.logger=...` override: "[console,wandb]" -> [...]."""
    names: list[str] = []
    for item in overrides:
        key, _, value = str(item).partition("=")
        if key.lstrip("+~") == "trainer.logger":
            names = [n.strip(" '\"") for n in value.strip().strip("[]").split(",") if n.strip(" '\"")]
    return names


def _override(overrides, key: str) -> str | None:
    found = None
    for item in overrides:
        k, _, value = str(item).partition("=")
        if k.lstrip("+~") == key:
            found = value.strip()
            if len(found) >= 2 and found[0] == found[-1] and found[0] in "'\"":  # Hydra's 'quoted value'
                found = found[1:-1]
            if any(ord(c) < 32 or ord(c) == 127 for c in found):
                raise SpecError(key, f"{found!r} holds a control character (a newline?); use one line of text")
    return found


def offline(site) -> bool:
    """The site says its compute nodes reach no internet (`internet: false`)."""
    value = (getattr(site, "raw", None) or {}).get("internet", True)
    if not isinstance(value, bool):
        raise SpecError("site.internet", f"{value!r} in {site.path} must be true or false "
                        "(false: compute nodes reach no internet; W&B logs offline)")
    return not value


def env_lines(plan, site) -> list[str]:
    """The script's export lines (empty unless trainer.logger has wandb). `$SF_RUN_DIR` is
    the run dir at that point of the script; the run id is its last component."""
    if "wandb" not in loggers(plan.overrides):
        return []
    lines = ['export WANDB_RUN_ID="${SF_RUN_DIR##*/}"  # the sf run id: one W&B run across requeues',
             "export WANDB_RESUME=allow", 'export WANDB_DIR="$SF_RUN_DIR"']
    project = _override(plan.overrides, "trainer.project_name") or plan.experiment
    name = _override(plan.overrides, "trainer.experiment_name")
    lines.append("export WANDB_PROJECT=" + shlex.quote(project))
    lines.append("export WANDB_NAME=" + (shlex.quote(name) if name else '"$WANDB_RUN_ID"'))
    if offline(site):
        lines.append("export WANDB_MODE=offline  # site: internet: false")
    return lines


def sync_command(run_dir: str) -> str:
    """What uploads an offline run's W&B files (every attempt's) from a login node."""
    return f"wandb sync --include-offline {shlex.quote(str(run_dir))}/wandb/offline-run-*"


def after_submit(run_dir, script: str) -> list[str]:
    """The lines `sf submit` prints about the run's logger (from the script it sent)."""
    if "export WANDB_MODE=offline" not in script:
        return []
    return [f"sf: W&B logs offline (the site has no internet) into {run_dir}/wandb; upload it from a login "
            f"node with: {sync_command(run_dir)}"]
