"""The only module that runs Slurm commands.

Every call goes through `_run` (or `srun_popen`): argv lists, never a shell, a timeout,
and a SlurmError that carries the command and its stderr. `CALLS` counts invocations per
command name (`CALLS["sacct"]`, `CALLS["total"]`) so tests and benchmarks can assert
"one sacct call per poll".

`job_states(ids)` asks ONE `sacct -X` for every id (plain jobs, array tasks `123_4`,
hetjob components `123+1`) and aggregates: a hetjob's plain id (which sacct never
reports; submitit's watcher reads it as UNKNOWN forever) gets the state of its
components, an array's plain id the state of its tasks, and every task and component is
also reported on its own. When accounting is unavailable it falls back to ONE `squeue`
call and says so (`JobStates.source == "squeue"`, `.warning`).

`SF_SLURM_BIN_DIR` (optional) is a folder to take the Slurm binaries from.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from launcher.errors import SlurmError
from launcher.sbatch_values import LOGIN_ENV
from launcher.states import AGGREGATE_ACTIVE_ORDER, AGGREGATE_END_ORDER, SLURM_PENDING, SLURM_TERMINAL, slurm_done

CALLS: collections.Counter = collections.Counter()
DEFAULT_TIMEOUT_S = 60
QUEUE_LOOK_TIMEOUT_S = 5  # squeue's second look after sacct, best effort (a down slurmctld: 18 s)

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


# --- running commands -----------------------------------------------------------------

def _bin(name: str) -> str:
    folder = os.environ.get("SF_SLURM_BIN_DIR")
    if folder:
        return str(Path(folder) / name)
    return shutil.which(name) or name


def _run(argv: list[str], *, timeout: float = DEFAULT_TIMEOUT_S, cwd=None, check: bool = True,
         input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [str(a) for a in argv]
    name = Path(argv[0]).name
    argv[0] = _bin(argv[0])
    CALLS[name] += 1
    CALLS["total"] += 1
    shown = " ".join([name, *argv[1:]])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmError(f"`{shown}`: {name} not found; is Slurm installed and on PATH "
                         f"(or inside the dev cluster: scripts/dev-cluster exec -- ...)?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{shown}` did not answer within {timeout:g} s; is slurmctld up?") from None
    if check and proc.returncode != 0:
        raise SlurmError(_error_text(shown, proc))
    return proc


def _error_text(shown: str, proc: subprocess.CompletedProcess) -> str:
    err = (proc.stderr or "").strip() or (proc.stdout or "").strip() or "(no output)"
    return f"`{shown}` failed (exit {proc.returncode}): {err}"


# --- submit and control -----------------------------------------------------------------

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


def sbatch(script_path, *, extra_args=(), cwd=None, timeout: float = DEFAULT_TIMEOUT_S, pass_env=(),
           umask: int = 0o077) -> str:
    """Submit a batch script; returns the job id (leader id for a hetjob, array id for an
    array). sbatch runs without our SBATCH_* and steering variables but those in `pass_env`:
    the script says what the job asks for. `umask` is the job's (Slurm gives the batch step
    and every srun task the submitter's; the user's own may be 000)."""
    proc = _run(["sbatch", "--parsable", *extra_args, str(script_path)], cwd=cwd, timeout=timeout,
                env=_sbatch_env(pass_env, umask))
    return parse_sbatch_parsable(proc.stdout)


def _sbatch_env(pass_env, umask: int = 0o077) -> dict:
    """Our environment less the SBATCH_* and steering variables, with the job's umask
    (sbatch sends SLURM_UMASK as it finds it, else its own umask). The LOGIN_ENV ones stay:
    sbatch may need LD_LIBRARY_PATH to run at all; the job's script unsets them
    (sbatch_values.login_env_unset)."""
    left_out = set(sbatch_input_variables(passed=pass_env)) | set(steering_variables(passed=pass_env))
    env = {name: value for name, value in os.environ.items() if name not in left_out}
    env["SLURM_UMASK"] = f"{umask:04o}"
    return env


def sbatch_test_only(script_path, *, extra_args=(), cwd=None, pass_env=()) -> str:
    """`sbatch --test-only`: validates the script against the cluster, submits nothing.
    Returns Slurm's message (e.g. "Job 12 to start at ... on nodes dev1")."""
    proc = _run(["sbatch", "--test-only", *extra_args, str(script_path)], cwd=cwd, env=_sbatch_env(pass_env))
    return ((proc.stderr or "") + (proc.stdout or "")).strip().removeprefix("sbatch: ").strip()


def scancel(job_ids, *, signal: str | None = None, batch: bool = False, full: bool = False) -> None:
    ids = [str(i) for i in job_ids if str(i)]
    if not ids:
        return
    argv = ["scancel"]
    if signal:
        argv.append(f"--signal={signal}")
    if batch:
        argv.append("--batch")
    if full:
        argv.append("--full")
    _run([*argv, *ids])


def requeue(job_id) -> None:
    _run(["scontrol", "requeue", str(job_id)])


def requeue_excluding(job_id, exclude: dict[str, list[str]]) -> None:
    """Requeue `job_id` and add nodes to the excluded list of each component named in
    `exclude` ({"123" or "123+1": [node, ...]}). Slurm takes ExcNodeList only while a job is
    pending, so the update follows the requeue; the nodes already excluded are kept (one
    `scontrol show job` of the leader lists every het component, by HetJobOffset)."""
    shown = show_job(job_id)
    by_offset = {record.get("HetJobOffset", "0"): record for record in shown.get("Components") or [shown]}
    before = {}
    for component in exclude:
        value = by_offset.get(component.partition("+")[2] or "0", {}).get("ExcNodeList") or ""
        before[component] = hostnames(value) if value not in ("(null)", "") else []
    requeue(job_id)
    for component, nodes in exclude.items():
        names = list(dict.fromkeys(before[component] + list(nodes)))
        _run(["scontrol", "update", f"JobId={component}", "ExcNodeList=" + ",".join(names)])


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


def show_job(job_id) -> dict:
    proc = _run(["scontrol", "show", "job", "-o", str(job_id)])
    return parse_show_job(proc.stdout)


def numbered_steps(job_id) -> list[str]:
    """The job's srun steps slurmctld still holds (`123.4`, `123+1.0`; not batch or extern):
    a step that has ended keeps its memory until slurmctld has seen it go, and a new step
    asked for meanwhile fails ("Memory required by task is not available")."""
    proc = _run(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i"], check=False)
    steps = [s.strip() for s in proc.stdout.split()]
    return [s for s in steps if s.rpartition(".")[2].isdigit()]


def still_queued(job_ids) -> bool:
    """Whether slurmctld still lists any of the jobs (pending, running or COMPLETING: its
    processes may still write); False when squeue cannot say."""
    if not job_ids:
        return False
    proc = _run(["squeue", "-h", "-j", ",".join(_query_ids(job_ids)), "-o", "%T"], check=False)
    return proc.returncode == 0 and bool(proc.stdout.split())


def hostnames(nodelist: str) -> list[str]:
    if not nodelist:
        return []
    proc = _run(["scontrol", "show", "hostnames", nodelist])
    return [h.strip() for h in proc.stdout.split() if h.strip()]


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


def srun_popen(argv, *, het_group=None, nodes=None, ntasks=None, ntasks_per_node=None,
               nodelist=None, exclude=None, overlap=False, kill_on_bad_exit=True, extra=(),
               env=None, stdout=None, stderr=None, **popen_kwargs) -> subprocess.Popen:
    """Start one srun step (inside a job); argv is a list, never through a shell."""
    cmd = srun_argv(argv, het_group=het_group, nodes=nodes, ntasks=ntasks,
                    ntasks_per_node=ntasks_per_node, nodelist=nodelist, exclude=exclude,
                    overlap=overlap, kill_on_bad_exit=kill_on_bad_exit, extra=extra)
    CALLS["srun"] += 1
    CALLS["total"] += 1
    cmd[0] = _bin("srun")
    try:
        return subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL, **popen_kwargs)
    except FileNotFoundError:
        raise SlurmError("srun not found on PATH") from None


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


def _row_to_state(values: dict[str, str], job_id: str) -> JobState:
    raw = values.get("State", "")
    return JobState(
        job_id=job_id, state=normalize_state(raw), raw_state=raw,
        name=values.get("JobName", ""), exit_code=values.get("ExitCode", ""),
        start=values.get("Start", ""), end=values.get("End", ""),
        elapsed=values.get("Elapsed", ""), nodelist=values.get("NodeList", ""),
        reason=values.get("Reason", ""), submit=values.get("Submit", ""),
        timelimit=values.get("Timelimit", ""),
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


def job_states(job_ids) -> JobStates:
    """States of all `job_ids` from ONE sacct call (or ONE squeue call when accounting is
    unavailable). Ids sacct has not recorded yet or records as PENDING (slurmdbd lags the
    controller, by seconds on a loaded host) are asked of squeue in one more call, with a
    short bound (slurmctld may be down while slurmdbd answers: sacct's view stands then);
    ids neither reports come back as UNKNOWN with `missing=True`."""
    requested = [str(j) for j in job_ids if str(j)]
    if not requested:
        return JobStates()
    proc = _run(sacct_argv(requested), check=False)
    if proc.returncode == 0 and not _ACCOUNTING_DOWN.search(proc.stderr or ""):
        states = resolve(requested, parse_rows(proc.stdout, SACCT_FIELDS))
        behind = [j for j in requested if lagging(states[j])]
        if behind:  # slurmdbd lags the controller under load: ask squeue for those only
            try:
                queued = _run(squeue_argv(behind), check=False, timeout=QUEUE_LOOK_TIMEOUT_S)
            except SlurmError:  # slurmctld not answering: sacct's view stands
                queued = None
            if queued is not None and queued.returncode == 0:
                prefer_queue(states, resolve(behind, parse_rows(queued.stdout, SQUEUE_FIELDS)))
        return JobStates(states, source="sacct")
    sacct_error = (proc.stderr or proc.stdout or "").strip().splitlines()
    sacct_error = sacct_error[-1] if sacct_error else f"exit {proc.returncode}"
    proc = _run(squeue_argv(requested), check=False)
    if proc.returncode != 0 and "Invalid job id" not in (proc.stderr or ""):
        raise SlurmError(f"`sacct` failed ({sacct_error}) and " +
                         _error_text(" ".join(squeue_argv(requested)), proc))
    rows = parse_rows(proc.stdout if proc.returncode == 0 else "", SQUEUE_FIELDS)
    states = resolve(requested, rows)
    for state in states.values():
        if state.missing:
            state.state = "GONE"  # not in squeue any more: ended, outcome unknown
    return JobStates(states, source="squeue",
                     warning=f"accounting unavailable ({sacct_error}); states from squeue, "
                             "which forgets finished jobs")


# --- cluster facts (sf doctor) ------------------------------------------------------------

def show_partitions() -> list[dict]:
    """`scontrol show partition -o`: one key->value dict per partition (PartitionName,
    State, Nodes, ...)."""
    proc = _run(["scontrol", "show", "partition", "-o"])
    return [_split_kv(line) for line in proc.stdout.splitlines() if line.strip()]


def show_nodes() -> list[dict]:
    """`scontrol show node -o`: one key->value dict per node (NodeName, CPUTot, RealMemory,
    Gres, Partitions, State, AvailableFeatures, ...)."""
    proc = _run(["scontrol", "show", "node", "-o"])
    return [_split_kv(line) for line in proc.stdout.splitlines() if line.strip()]


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` (`Key = value` lines) -> {Key: value}."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def show_config() -> dict[str, str]:
    """`scontrol show config`: {AccountingStorageEnforce, ClusterName, ...}."""
    return parse_show_config(_run(["scontrol", "show", "config"]).stdout)


ASSOC_FIELDS = ("User", "DefaultAccount", "Cluster", "Account", "Partition", "QOS", "DefaultQOS")


def parse_parsable(text: str, fields) -> list[dict[str, str]]:
    """`sacctmgr -n -P ... format=F1,F2` output -> one {field: value} dict per line."""
    rows = []
    for line in (text or "").splitlines():
        if line.strip():
            values = line.split("|")
            rows.append(dict(zip(fields, values + [""] * (len(fields) - len(values)), strict=False)))
    return rows


def user_associations(user: str, cluster: str | None = None) -> list[dict[str, str]]:
    """ONE `sacctmgr show user ... withassoc`: every association of `user` (on `cluster`),
    each with the user's DefaultAccount, the Account, Partition, QOS (comma-separated) and
    DefaultQOS. No association: an empty list."""
    where = [f"name={user}"] + ([f"cluster={cluster}"] if cluster else [])
    proc = _run(["sacctmgr", "--noheader", "--parsable2", "show", "user", "withassoc", "where", *where,
                 "format=" + ",".join(ASSOC_FIELDS)])
    return [row for row in parse_parsable(proc.stdout, ASSOC_FIELDS) if row.get("Account")]


def qos_names() -> list[str]:
    """ONE `sacctmgr show qos`: the names of every QOS of the accounting database."""
    proc = _run(["sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=Name"])
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def run_on_a_node(partition: str, argv: list[str], timeout: float = 60) -> str:
    """One task on one node of `partition` (`srun -N1 -n1 --time=1`): its stdout."""
    proc = _run(["srun", "-p", partition, "-N1", "-n1", "--time=1", "--quiet", *argv], timeout=timeout)
    return proc.stdout


def accounting_check() -> str | None:
    """None when sacct answers from the accounting database, else why not."""
    proc = _run(["sacct", "--noheader", "--parsable2", "--allocations", "--format=JobID",
                 "--starttime=now-1minutes"], check=False)
    err = (proc.stderr or "").strip()
    if proc.returncode != 0 or _ACCOUNTING_DOWN.search(err):
        return err.splitlines()[-1] if err else f"sacct exit {proc.returncode}"
    return None


def exec_srun(argv: list[str]) -> None:
    """Replace this process with an srun command (`sf attach`: an interactive step)."""
    CALLS["srun"] += 1
    CALLS["total"] += 1
    path = _bin("srun")
    try:
        os.execv(path, [path, *argv[1:]])
    except OSError as exc:
        raise SlurmError(f"cannot run srun: {exc}") from None
