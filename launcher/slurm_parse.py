"""Slurm's output read, Slurm's command lines built: pure functions, no command runs here
(launcher/slurm.py runs them).

`parse_rows` reads `sacct --parsable2` and `squeue` rows into `JobState`s; `resolve`
aggregates a hetjob's components and an array's tasks under the plain id (which sacct never
reports; submitit's watcher reads it as UNKNOWN forever), and every task and component is
also reported on its own. `parse_show_job`/`parse_show_config`/`parse_parsable` read
scontrol's and sacctmgr's records; `sbatch_input_variables`/`steering_variables` name what in
an environment would steer sbatch or the job.
"""

from __future__ import annotations

import collections
import os
import re
from dataclasses import asdict, dataclass, field

from launcher.errors import SlurmError
from launcher.sbatch_values import LOGIN_ENV, TIME
from launcher.states import AGGREGATE_ACTIVE_ORDER, AGGREGATE_END_ORDER, SLURM_PENDING, SLURM_TERMINAL, slurm_done

# sacct fields, in order (all exist in 22.05; 22.05 has no Restarts: use show_job).
SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "Start", "End", "Elapsed",
                "NodeList", "Reason", "Submit", "Timelimit")
SQUEUE_FORMAT = "%i|%j|%T|%M|%N|%r|%S|%l|%V"
SQUEUE_FIELDS = ("JobID", "JobName", "State", "Elapsed", "NodeList", "Reason", "Start",
                 "Timelimit", "Submit")

_ACCOUNTING_DOWN = re.compile(
    r"accounting storage is disabled|slurmdbd|Connection refused|"
    r"Unable to (?:contact|connect)|Problem talking to the database|"
    r"no accounting|not running a supported accounting_storage",
    re.IGNORECASE,
)
_JOBID = re.compile(r"^(?P<base>\d+)(?:_(?P<task>\d+|\[[^\]]*\])|\+(?P<het>\d+))?(?:\.(?P<step>.+))?$")

def parse_sbatch_parsable(stdout: str) -> str:
    """`123` or `123;cluster` -> `123`."""
    lines = [line for line in (stdout or "").strip().splitlines() if line.strip()]
    if not lines:
        raise SlurmError("sbatch --parsable printed no job id")
    job_id = lines[-1].split(";")[0].strip()
    if not re.fullmatch(r"\d+", job_id):
        raise SlurmError(f"sbatch --parsable printed {lines[-1]!r}, not a job id")
    return job_id


def _passed(name: str, passed) -> bool:
    """Whether `passed` (names, or prefixes ending in `*`) lets `name` through."""
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in passed)


def sbatch_input_variables(environ=None, passed=()) -> list[str]:
    """The SBATCH_* variables set in `environ` (default: ours) that sbatch would read as
    options, overriding the script's #SBATCH lines, less those `passed` on purpose."""
    environ = os.environ if environ is None else environ
    return sorted(name for name in environ if name.startswith("SBATCH_") and not _passed(name, passed))


# What else in the submitting shell would steer the job: sbatch passes its whole environment
# into the job, where every srun reads SLURM_*/SRUN_* inputs (SLURM_TIMELIMIT=1 would kill each
# Ray node after a minute, SLURM_EXPORT_ENV=NONE every step), Ray reads RAY_* (RAY_ADDRESS would
# reach every node), and the in-job code reads the SF_TEST_* test hooks. None of them reaches the
# job unless the site lets it (slurm.pass_ray_env; test_hooks for the dev cluster's tests).
STEERING_PREFIXES = ("SLURM_", "SRUN_", "SALLOC_", "RAY_", "SF_TEST_")
STEERING_KEPT = ("SLURM_CONF",)  # which cluster sbatch talks to


def steering_variables(environ=None, passed=()) -> list[str]:
    """The STEERING_PREFIXES variables set in `environ` (default: ours) that sf's sbatch calls
    leave out, less those `passed` (site.pass_sbatch_env)."""
    environ = os.environ if environ is None else environ
    return sorted(name for name in environ if name.startswith(STEERING_PREFIXES)
                  and name not in STEERING_KEPT and not _passed(name, passed))


def login_env_variables(environ=None, passed=()) -> list[str]:
    """The LOGIN_ENV variables set in `environ` (default: ours) that the job's script unsets,
    less those the site passes on purpose (what sf tells the user it left out)."""
    environ = os.environ if environ is None else environ
    return [name for name in LOGIN_ENV if environ.get(name) and name not in passed]

def _split_kv(line: str) -> dict[str, str]:
    """`A=1 B=x y C=2` -> {A: 1, B: 'x y', C: 2} (values may hold spaces)."""
    out: dict[str, str] = {}
    for match in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_:/]*=|\s*$)", line):
        out[match.group(1)] = match.group(2)
    return out


def parse_show_job(text: str) -> dict:
    """`scontrol show job -o` output -> the first record's key->value; a hetjob's other
    components are under "Components" (a list of dicts, leader first)."""
    records = [_split_kv(line) for line in text.splitlines() if line.strip()]
    if not records:
        return {}
    first = dict(records[0])
    if len(records) > 1:
        first["Components"] = records
    return first

def _joined(value) -> str:
    """A node list given as a list -> `a,b`; anything else as text."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def srun_argv(argv, *, het_group=None, nodes=None, ntasks=None, ntasks_per_node=None,
              nodelist=None, exclude=None, overlap=False, kill_on_bad_exit=True,
              extra=()) -> list[str]:
    valued = (("--het-group", het_group), ("--nodes", nodes), ("--ntasks", ntasks),
              ("--ntasks-per-node", ntasks_per_node), ("--nodelist", nodelist or None),
              ("--exclude", exclude or None))
    cmd = ["srun"] + [f"{flag}={_joined(value)}" for flag, value in valued if value is not None]
    cmd += [flag for flag, on in (("--overlap", overlap), ("--kill-on-bad-exit=1", kill_on_bad_exit)) if on]
    cmd.extend(str(e) for e in extra)
    cmd.extend(str(a) for a in argv)
    return cmd

# --- states -----------------------------------------------------------------------------

@dataclass
class JobState:
    job_id: str  # as asked or as reported: "123", "123_4", "123+1"
    state: str  # normalized: RUNNING, PENDING, COMPLETED, CANCELLED, ... or UNKNOWN
    raw_state: str = ""
    name: str = ""
    exit_code: str = ""
    start: str = ""
    end: str = ""
    elapsed: str = ""
    nodelist: str = ""
    reason: str = ""
    submit: str = ""
    timelimit: str = ""
    kind: str = "job"  # job | array | hetjob | task | component
    parts: list[str] = field(default_factory=list)  # ids of tasks/components aggregated
    missing: bool = False  # Slurm reported nothing for it (yet, or any more)

    @property
    def done(self) -> bool:
        return slurm_done(self.state)

    def to_dict(self) -> dict:
        return {**asdict(self), "done": self.done}


class JobStates(dict):
    """dict[str, JobState] with where it came from: source "sacct" or "squeue" (accounting
    unavailable: finished jobs may be missing), and a warning line when degraded."""

    def __init__(self, *args, source: str = "sacct", warning: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.source = source
        self.warning = warning

    @property
    def accounting(self) -> bool:
        return self.source == "sacct"


def normalize_state(raw: str) -> str:
    """`CANCELLED by 0` -> CANCELLED, `RUNNING+` -> RUNNING, `` -> UNKNOWN."""
    state = (raw or "").strip().split(" ")[0].rstrip("+").upper()
    return state or "UNKNOWN"


def split_job_id(job_id: str) -> tuple[str, str | None, str | None]:
    """"123" -> (123, None, None); "123_4" -> (123, "4", None); "123+1" -> (123, None, "1")."""
    match = _JOBID.match(str(job_id).strip())
    if not match:
        return str(job_id), None, None
    return match["base"], match["task"], match["het"]


def _expand_array(base: str, bracket: str) -> list[str]:
    """`[2-5%2]` / `[1,3-4]` -> task ids. Uses submitit's parser of array ids."""
    from submitit.slurm.slurm import read_job_id  # lazy: only pending arrays need it

    tasks = []
    for part in read_job_id(f"{base}_{bracket}"):
        if len(part) == 2:
            tasks.append(int(part[1]))
        elif len(part) == 3:
            tasks.extend(range(int(part[1]), int(part[2]) + 1))
    return [f"{base}_{t}" for t in tasks]


def _time_limit(text: str) -> str:
    """sacct's Timelimit as Slurm writes a time, else unknown (empty): 24.11 prints
    `Partition_Limit` there for a requeued job pending again (slurm_versions, pending_timelimit)."""
    return text if TIME.match(text) else ""


def _row_to_state(values: dict[str, str], job_id: str) -> JobState:
    raw = values.get("State", "")
    return JobState(
        job_id=job_id, state=normalize_state(raw), raw_state=raw,
        name=values.get("JobName", ""), exit_code=values.get("ExitCode", ""),
        start=values.get("Start", ""), end=values.get("End", ""),
        elapsed=values.get("Elapsed", ""), nodelist=values.get("NodeList", ""),
        reason=values.get("Reason", ""), submit=values.get("Submit", ""),
        timelimit=_time_limit(values.get("Timelimit", "")),
        kind="task" if "_" in job_id else "component" if "+" in job_id else "job",
    )


def parse_rows(text: str, fields=SACCT_FIELDS) -> dict[str, JobState]:
    """Parse `--parsable2 --noheader` rows (sacct) or `|`-separated squeue rows into
    JobStates keyed by the reported id. Steps (`123.batch`) are skipped; pending array
    ranges (`123_[2-5%2]`) are expanded into one PENDING entry per task."""
    out: dict[str, JobState] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        values = {name: cells[i].strip() if i < len(cells) else "" for i, name in enumerate(fields)}
        job_id = values.get("JobID", "")
        match = _JOBID.match(job_id)
        if not match or match["step"]:
            continue
        if match["task"] and match["task"].startswith("["):
            for task_id in _expand_array(match["base"], match["task"]):
                out[task_id] = _row_to_state(values, task_id)
            continue
        out[job_id] = _row_to_state(values, job_id)
    return out


def aggregate_state(states: list[str]) -> str:
    """One state for a hetjob from its components / an array from its tasks: active if
    any part is active (RUNNING before PENDING); when all ended COMPLETED only if all
    completed, else the worst end (NODE_FAIL, ..., FAILED, TIMEOUT, CANCELLED)."""
    states = [normalize_state(s) for s in states] or ["UNKNOWN"]
    active = [s for s in states if s not in SLURM_TERMINAL]
    if active:
        for candidate in AGGREGATE_ACTIVE_ORDER:
            if candidate in active:
                return candidate
        return active[0]
    for candidate in AGGREGATE_END_ORDER:
        if candidate in states:
            return candidate
    return states[0]


def aggregate(job_id: str, parts: list[JobState], kind: str) -> JobState:
    """One JobState for `parts` (a hetjob's components, an array's tasks, a run's jobs)."""
    parts = sorted(parts, key=lambda p: _sort_key(p.job_id))
    first = parts[0]
    starts = [p.start for p in parts if p.start and p.start[:1].isdigit()]
    ends = [p.end for p in parts if p.end and p.end[:1].isdigit()]
    state = aggregate_state([p.state for p in parts])
    all_ended = all(p.done for p in parts)
    codes = [p.exit_code for p in parts if p.exit_code and p.exit_code != "0:0"]
    return JobState(
        job_id=job_id, state=state, raw_state=state, name=first.name,
        exit_code=codes[0] if codes else first.exit_code,
        start=min(starts) if starts else first.start,
        end=max(ends) if (ends and all_ended) else ("Unknown" if not all_ended else first.end),
        elapsed=max((p.elapsed for p in parts), key=_elapsed_s, default=""),
        nodelist=",".join(dict.fromkeys(p.nodelist for p in parts
                                        if p.nodelist and p.nodelist != "None assigned")),
        reason=next((p.reason for p in parts if p.reason and p.reason != "None"), first.reason),
        submit=first.submit, timelimit=first.timelimit, kind=kind,
        parts=[p.job_id for p in parts],
    )


def _sort_key(job_id: str):
    base, task, het = split_job_id(job_id)
    tail = task if task and task.isdigit() else het if het else "-1"
    return (int(base) if base.isdigit() else 0, int(tail) if tail.lstrip("-").isdigit() else 0)


def _elapsed_s(text: str) -> int:
    """`1-02:03:04` / `02:03:04` / `03:04` -> seconds."""
    if not text or not text[0].isdigit():
        return 0
    days, _, rest = text.rpartition("-")
    try:
        nums = [int(x) for x in rest.split(":")]
    except ValueError:
        return 0
    seconds = 0
    for n in nums:
        seconds = seconds * 60 + n
    return seconds + (int(days) * 86400 if days.isdigit() else 0)


def resolve(requested: list[str], rows: dict[str, JobState]) -> dict[str, JobState]:
    """For every requested id, its own row, or the aggregate of its hetjob components
    (`ID+k`) or array tasks (`ID_k`); plus every row seen (tasks and components)."""
    out: dict[str, JobState] = dict(rows)
    by_base: dict[str, list[JobState]] = collections.defaultdict(list)
    for row_id, row in rows.items():
        base, task, het = split_job_id(row_id)
        if task is not None or het is not None:
            by_base[base].append(row)
    for job_id in requested:
        job_id = str(job_id)
        if job_id in rows and job_id not in by_base:
            continue
        base, task, het = split_job_id(job_id)
        if task is None and het is None and by_base.get(base):
            parts = by_base[base]
            kind = "hetjob" if any("+" in p.job_id for p in parts) else "array"
            out[job_id] = aggregate(job_id, parts, kind)
        elif job_id not in out:
            out[job_id] = JobState(job_id=job_id, state="UNKNOWN", missing=True)
    return out


def prefer_queue(states: dict[str, JobState], queued: dict[str, JobState]) -> None:
    """Ids sacct has not recorded yet, or still records as PENDING, take squeue's answer where
    squeue has one: slurmdbd lags the controller (by seconds on a loaded host), so a job that
    started a moment ago is missing there, or reads PENDING, while slurmctld runs it."""
    for job_id, state in list(states.items()):
        found = queued.get(job_id)
        if lagging(state) and found is not None and not found.missing:
            states[job_id] = found


def lagging(state: JobState) -> bool:
    """sacct's answer may trail the controller's: worth one squeue look."""
    return state.missing or state.state == SLURM_PENDING


def _query_ids(job_ids) -> list[str]:
    """Ids to pass to sacct/squeue -j: plain base ids (all tasks and components come back)."""
    seen = []
    for job_id in job_ids:
        base, _, _ = split_job_id(str(job_id))
        if base not in seen:
            seen.append(base)
    return seen


def sacct_argv(job_ids) -> list[str]:
    return ["sacct", "--parsable2", "--noheader", "--allocations",
            f"--format={','.join(SACCT_FIELDS)}", f"--jobs={','.join(_query_ids(job_ids))}"]


def squeue_argv(job_ids) -> list[str]:
    return ["squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}",
            f"--jobs={','.join(_query_ids(job_ids))}"]


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` (`Key = value` lines) -> {Key: value}."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out

ASSOC_FIELDS = ("User", "DefaultAccount", "Cluster", "Account", "Partition", "QOS", "DefaultQOS")


def parse_parsable(text: str, fields) -> list[dict[str, str]]:
    """`sacctmgr -n -P ... format=F1,F2` output -> one {field: value} dict per line."""
    rows = []
    for line in (text or "").splitlines():
        if line.strip():
            values = line.split("|")
            rows.append(dict(zip(fields, values + [""] * (len(fields) - len(values)), strict=False)))
    return rows
