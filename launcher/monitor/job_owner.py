"""Whether a run's job is the run's, by Slurm's own view of it, before sf acts on it.

A run record is a file in a runs folder that other users may write into (a shared folder, a
planted run): the job ids it holds are a claim, not a fact. Before `sf cancel` or `sf attach`
acts on a job, `check_jobs` asks slurmctld (`scontrol show job`) who the job is: its user must
be the caller, and its name the run's (`sf-<run id>`, `sf-<experiment>` for an array sweep and
its points) with its output file in the run's logs/ (the sweep's logs/ for a point of an
array). A mismatch is refused naming both (NotTheRunsJob, exit 2); a job slurmctld no longer
knows has ended and is left out.
"""

from __future__ import annotations

import os
import re

from launcher import runs, slurm
from launcher.errors import SlurmError, SpecError

_UID = re.compile(r"\((\d+)\)$")  # UserId=alice(1001)
GONE = re.compile(r"Invalid job id", re.IGNORECASE)


class NotTheRunsJob(SpecError):
    """A run's record names a job that, by Slurm's view, is another user's or another run's."""


def expected(run: runs.Run, record: dict) -> tuple[set[str], set[str]]:
    """(job names, log folders) a job of `run` has: sf names a run's job `sf-<run id>` (a het
    component `sf-<run id>.g<N>`) and an array sweep's `sf-<experiment>`, and writes its
    output into the run's logs/ (an array's into the sweep's logs/)."""
    names = {f"sf-{run.id}"}
    logs = {os.path.realpath(run.dir / "logs")}
    sweep = record.get("sweep") or {}
    if record.get("kind") == "sweep" or sweep.get("id"):
        names.add(f"sf-{record.get('experiment')}")
    if sweep.get("id"):
        logs.add(os.path.realpath(run.dir.parent / str(sweep["id"]) / "logs"))
    return names, logs


def mismatch(shown: dict, uid: int, names: set[str], logs: set[str]) -> str | None:
    """What in Slurm's record of a job (`scontrol show job -o` parsed) says it is not the
    run's, or None. Pure."""
    found = _UID.search(shown.get("UserId", ""))
    if found is None or int(found.group(1)) != uid:
        return f"its user is {shown.get('UserId') or '?'}, not uid {uid}"
    name = shown.get("JobName", "")
    if name not in names and name.rsplit(".g", 1)[0] not in names:
        return f"its name is {name!r}, not {' or '.join(sorted(map(repr, names)))}"
    stdout = shown.get("StdOut", "")
    if os.path.dirname(os.path.realpath(stdout)) not in logs:
        return f"its output goes to {stdout!r}, not into {' or '.join(sorted(logs))}"
    return None


def check_jobs(run: runs.Run, record: dict, job_ids, uid: int | None = None) -> list[str]:
    """The `job_ids` of `run` that slurmctld still knows, each checked against Slurm's record;
    NotTheRunsJob naming the run and the job (and what differs) at the first mismatch."""
    uid = os.getuid() if uid is None else uid
    names, logs = expected(run, record)
    live = []
    for job_id in job_ids:
        try:
            shown = slurm.show_job(job_id)
        except SlurmError as exc:
            if GONE.search(str(exc)):
                continue  # ended and purged by slurmctld: nothing to act on
            raise
        if not shown:
            continue
        why = mismatch(shown, uid, names, logs)
        if why:
            raise NotTheRunsJob("job_ids", f"run {run.id}'s record names Slurm job {job_id}, which is not this "
                                f"run's: {why}; refusing to act on it (a record in a shared runs folder may be "
                                "planted: check `scontrol show job " + str(job_id) + "`)")
        live.append(str(job_id))
    return live
