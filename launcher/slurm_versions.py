"""The Slurm releases sf knows, and every difference between them that sf meets: one table.

`parse_version` reads what `scontrol --version` / `sinfo --version` print (`slurm 24.11.5`,
Debian's `slurm-wlm 22.05.8`) or the SLURM_VERSION line of `scontrol show config`;
`version_warning` is the one line `sf doctor` and `sf validate --live` print for a Slurm older
than sf supports or newer than what it was tested on; `DIFFERENCES` says, per feature, what
each release does and how sf takes it (docs/admins.md's table is made from the same facts).
Every row was seen on both lanes' real daemons (scripts/test-lane; the recorded output is in
tests/unit/fixtures/slurm-22.05 and slurm-24.11, one unit test per row).

Standard library only: the job side (the preflight) imports it on any runtime's Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The oldest release sf supports, and the releases each CI lane runs (scripts/test, test-lane).
OLDEST = (22, 5)
TESTED = ((22, 5), (24, 11))

_VERSION = re.compile(r"(?:^|[\s=])(?:slurm(?:-wlm)?\s+)?(\d{2})\.(\d{2})(?:\.(\d+))?\b")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`slurm-wlm 24.11.5` / `slurm 22.05.8` / `SLURM_VERSION = 23.11.10` -> (24, 11, 5);
    None when no release number is there."""
    match = _VERSION.search(text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def version_text(version: tuple[int, ...] | None) -> str:
    """(24, 11, 5) -> `24.11.5`; None -> `unknown`."""
    if not version:
        return "unknown"
    return f"{version[0]}.{version[1]:02d}" + (f".{version[2]}" if len(version) > 2 else "")


def version_warning(version: tuple[int, ...] | None) -> str | None:
    """One line for a Slurm sf was not tested on, None for a tested or a newer release in
    between; older than OLDEST or unreadable: what will break and what to do."""
    tested = ", ".join(version_text(v) for v in TESTED)
    if version is None:
        return (f"Slurm's version could not be read (`scontrol --version`); sf is tested on {tested}: "
                "check that Slurm's client tools on PATH are the cluster's")
    if tuple(version[:2]) < OLDEST:
        return (f"Slurm {version_text(version)} is older than sf supports ({version_text(OLDEST)} and later, "
                f"tested on {tested}): srun/sacct options sf uses may be missing; ask the admins to upgrade")
    if tuple(version[:2]) > TESTED[-1]:
        return (f"Slurm {version_text(version)} is newer than sf was tested on ({tested}): "
                "run `sf submit examples/grpo --preflight --wait` once before real runs")
    return None


@dataclass(frozen=True)
class Difference:
    """One behaviour that changed at release `since`: `before` is what older releases do,
    `after` what `since` and later do; `handled` is how sf meets both."""

    feature: str
    since: tuple[int, int]
    before: str
    after: str
    handled: str

    def applies(self, version: tuple[int, ...] | None) -> bool:
        """Whether `version` behaves as `after` (an unknown version: as the newest tested)."""
        return version is None or tuple(version[:2]) >= self.since


# Seen between Debian 12's Slurm 22.05.8 and Debian 13's 24.11.5 on the dev clusters (the
# fixture files named in each unit test); `since` is the first tested release that behaves
# as `after` (the change may be older: 23.02-24.05 were not run).
DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "sacct_restarts", (24, 11),
        before="sacct has no Restarts field (`sacct: error: Invalid field requested: \"Restarts\"`)",
        after="`sacct --format=Restarts` prints how often the job was requeued",
        handled="sf's sacct format names only fields both have (slurm_parse.SACCT_FIELDS); the restart "
                "count comes from `scontrol show job` (Restarts=) on every version"),
    Difference(
        "pending_timelimit", (24, 11),
        before="a requeued job's sacct row says its time limit (365-00:00:00 under MaxTime=INFINITE)",
        after="a requeued job's sacct row, pending again, says `Partition_Limit` where the time limit was",
        handled="slurm_parse reads a Timelimit that is not a Slurm time as unknown (empty), on every version"),
    Difference(
        "show_job_tres", (24, 11),
        before="`scontrol show job`: TRES=, Power=; no TresPerTask",
        after="`scontrol show job`: ReqTRES= and AllocTRES= for TRES=, no Power=; --cpus-per-task also "
              "shows as TresPerTask=cpu=N",
        handled="sf reads none of those keys: JobState, Restarts, JobName, UserId, StdOut, Reason, EndTime, "
                "ExcNodeList and HetJobOffset are in both"),
    Difference(
        "srun_options", (24, 11),
        before="srun has no --tres-per-task and no --container-id",
        after="srun --tres-per-task and --container-id exist",
        handled="sf's srun lines use only options both have (--het-group, --nodes, --ntasks, --ntasks-per-node, "
                "--nodelist, --exclude, --overlap, --kill-on-bad-exit, --container)"),
    Difference(
        "default_priority", (24, 11),
        before="PriorityType defaults to priority/basic (first come, first served)",
        after="PriorityType defaults to priority/multifactor",
        handled="sf reads no priority; the 24.11 dev cluster sets priority/basic as 22.05's has"),
    Difference(
        "oci_bundle_arg", (24, 11),
        before="oci.conf's %b in RunTimeRun is the step's generated bundle, one a node "
               "(SlurmdSpoolDir/oci-jobNNNNN-SSSSS/: 22.05 runs one container task a node)",
        after="%b in RunTimeRun is the task's generated bundle (SlurmdSpoolDir/oci-jobN-S/task-T/, a config.json a "
              "task); RunTimeQuery/Kill/Delete at the step's end get the user's bundle there",
        handled="the dev clusters' oci.conf names %b only in RunTimeRun and each container by %n.%u.%j.%s.%t; "
                "scripts/sf-oci-run rewrites <%b>/config.json on every version"),
    Difference(
        "oci_step_env", (24, 11),
        before="a container step's config.json env is the bundle's with the job's appended (the job's PATH too); "
               "per-task variables (SLURMD_NODENAME, GPUs) are missing or the batch shell's",
        after="the bundle's env is merged over the job's, one entry a name: PATH is the bundle's alone; "
              "per-task variables are the task's",
        handled="scripts/sf-oci-run sets the node's name, index and GPUs and puts the bundle's PATH first on every "
                "version; nothing in the job side needs the job's PATH inside the container"),
    Difference(
        "reconfigure_pid", (24, 11),
        before="`scontrol reconfigure` keeps slurmctld's pid",
        after="`scontrol reconfigure` makes slurmctld and every slurmd execute themselves again (run with -D: "
              "the same pid, by the binary's own name: Debian's slurmctld-wlm, slurmd-wlm)",
        handled="sf never reconfigures; the 24.11 dev cluster knows its daemons by either name and reads "
                "slurmctld's SlurmctldPidFile too"),
)


def difference(feature: str) -> Difference:
    return next(d for d in DIFFERENCES if d.feature == feature)
