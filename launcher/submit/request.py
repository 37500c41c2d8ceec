"""What a submission is: a Request (prepared once: the dry run prints it, launcher.submit.pipeline
sends it; a sweep's script written before it is sent is one too: `written_request`) and what it
renders to for one run dir (Rendered). Its own module so that pipeline,
chain and export share it without importing each other in a circle."""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass, field
from typing import Callable

from launcher import runs
from launcher.errors import SpecError

PLACEHOLDER_ID = "XXXXX"  # as long as a real id's suffix (runs.new_run_id), but upper case


def placeholder_run_dir(runs_dir: str, experiment: str) -> str:
    """Where a run of `experiment` will be, but for its 5-character id suffix."""
    return os.path.join(run_home(runs_dir), f"{runs.slug(experiment)}-{PLACEHOLDER_ID}")


def run_home(runs_dir: str) -> str:
    """The folder submit makes a run in (runs_folder.make_runs_root), asked without making it: the
    runs folder's real path, and in a shared one (1777) the user's own folder in it, so the dry
    run shows the run dir submit's script will hold. An unsafe folder is pipeline.checked's to
    refuse; here it stays as given."""
    root = absolute_runs_dir(runs_dir)
    try:
        real = runs.real_path(root, "runs_dir")
        shared = real.is_dir() and bool(os.stat(real).st_mode & (stat.S_IWGRP | stat.S_IWOTH))  # as runs_folder
    except (OSError, SpecError):
        return root
    return str(real / _user_folder_name()) if shared else str(real)


def _user_folder_name() -> str:
    """runs_folder.user_folder_name (not imported: the submit stage reaches run folders through
    launcher.runs): the user name, the uid when it has none."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def absolute_runs_dir(runs_dir: str) -> str:
    return os.path.abspath(os.path.expanduser(str(runs_dir)))


@dataclass(frozen=True)
class Rendered:
    """What a request becomes for one run dir."""

    files: dict[str, str]  # path relative to the run dir -> text
    script_name: str  # which of the files is the batch script
    entry: dict | None = None  # export/eval: the item the run's record lists under Request.entry_key
    log_path: str | None = None  # the job's output (may hold %j)

    @property
    def script(self) -> str:
        return self.files[self.script_name]


@dataclass(frozen=True)
class Request:
    """One prepared submission. `render(run_dir)` is pure and cheap (the compile happened
    before); it is called once for the dry run and once for the bound run dir."""

    experiment: str
    runs_dir: str  # absolute
    render: Callable[[str], Rendered]
    record: dict = field(default_factory=dict)  # fields of the new run's record
    run: runs.Run | None = None  # the run it belongs to when that exists (export/eval of a run)
    entry_key: str | None = None  # record list of export/eval jobs: "exports" | "evals"
    sbatch_in_run_dir: bool = False  # sbatch's working directory: the run dir (else the caller's)
    pass_sbatch_env: tuple[str, ...] = ()  # SBATCH_* variables let through (site.pass_sbatch_env)
    warnings: tuple[str, ...] = ()
    plan: object = None  # the compiled launcher.plan.Plan (training jobs), unbound
    site: object = None  # the launcher.spec.site.Site it was compiled for
    spec: object = None  # the launcher.spec.experiment.MergedSpec it came from
    runtime: object = None  # the launcher.runtime.Runtime it renders for (training jobs)
    upstream: "Request | None" = None  # a job to submit first; this one waits on afterok:<its job>
    chain: dict | None = None  # what the new run's record says about its model run (`model_from`)
    # a wait known only at send time (a sweep's throttle, a chained export's job): rendered into
    # the script of a request rendered now, on sbatch's command line for one written before
    after: str | None = None
    # a script already in `run` (a sweep's: the array's one script, a point's), sent as it
    # stands; None: the request is rendered and written when sent
    written: str | None = None
    own_dependency: str | None = None  # a written script's own --dependency, from its Plan (pipeline.own_dependency)
    sbatch_args: tuple[str, ...] = ()  # options of this send only (the array tasks a retry sends)
    # the runs a written script's job is, each with its job id's suffix ("_<task>" in an array,
    # "" for the run's own job): each records the job (an earlier one's ending kept in attempts)
    tasks: tuple[tuple[runs.Run, str], ...] = ()

    @property
    def run_dir(self) -> str:
        """The run dir the dry run shows: the real one when the run exists already."""
        return str(self.run.dir) if self.run else placeholder_run_dir(self.runs_dir, self.experiment)

    def rendered(self, run_dir: str | None = None, after: str | None = None) -> Rendered:
        """`after`: a dependency known only at submit time (the upstream's job), training
        requests only. A written request gives its script as it stands."""
        run = self.run
        if self.written is not None and run is not None:
            return Rendered(files={self.written: run.read_text(self.written) or ""}, script_name=self.written)
        if after is None:
            return self.render(run_dir or self.run_dir)
        return self.render(run_dir or self.run_dir, after)

    @property
    def script(self) -> str:
        """The batch script exactly as `submit` sends it, but for the run id."""
        return self.rendered().script


@dataclass(frozen=True)
class Submitted:
    run: runs.Run
    job_id: str
    rendered: Rendered


def written_request(run: runs.Run, script_name: str, *, tasks, pass_sbatch_env=(), own_dependency: str | None = None,
                    after: str | None = None, sbatch_args: tuple[str, ...] = ()) -> Request:
    """The request of a script already written into `run` (a sweep's array script, a point's
    script, sent again by --retry-failed): pipeline.submit sends it as it stands."""
    return Request(experiment=str(run.raw_record().get("experiment") or ""), runs_dir=str(run.dir.parent),
                   render=lambda _run_dir, _after=None: Rendered(files={}, script_name=script_name), run=run,
                   written=script_name, tasks=tuple(tasks), pass_sbatch_env=tuple(pass_sbatch_env),
                   own_dependency=own_dependency, after=after, sbatch_args=tuple(sbatch_args))
