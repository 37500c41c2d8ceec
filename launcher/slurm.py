"""The only module that runs Slurm commands (launcher/slurm_parse.py reads their output).

Every call goes through `_run` (or `srun_popen`/`exec_srun`): argv lists, never a shell, a
timeout, the environment of `client_env()` (the shell's Slurm client variables cannot steer
sf's own calls) and a SlurmError that carries the command and its stderr. `CALLS` counts
invocations per command name (`CALLS["sacct"]`, `CALLS["total"]`) so tests and benchmarks can
assert "one sacct call per poll".

`job_states(ids)` asks ONE `sacct -X` for every id (plain jobs, array tasks `123_4`, hetjob
components `123+1`) and aggregates (slurm_parse.resolve). When accounting is unavailable it
falls back to ONE `squeue` call and says so (`JobStates.source == "squeue"`, `.warning`).

`SF_SLURM_BIN_DIR` (optional) is a folder to take the Slurm binaries from.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import time
from pathlib import Path

from launcher import sbatch_values, slurm_versions
from launcher.errors import SlurmError

# Re-exported: callers name the parsed types and helpers through launcher.slurm.
from launcher.slurm_parse import (  # noqa: F401
    _ACCOUNTING_DOWN,
    ASSOC_FIELDS,
    SACCT_FIELDS,
    SQUEUE_FIELDS,
    JobState,
    JobStates,
    _elapsed_s,
    _query_ids,
    _split_kv,
    aggregate,
    aggregate_state,
    lagging,
    login_env_variables,
    normalize_state,
    parse_parsable,
    parse_rows,
    parse_sbatch_parsable,
    parse_show_config,
    parse_show_job,
    prefer_queue,
    resolve,
    sacct_argv,
    sbatch_input_variables,
    split_job_id,
    squeue_argv,
    srun_argv,
    steering_variables,
)

CALLS: collections.Counter = collections.Counter()
DEFAULT_TIMEOUT_S = 60
QUEUE_LOOK_TIMEOUT_S = 5  # squeue's second look after sacct, best effort (a down slurmctld: 18 s)
CANCEL_CONFIRM_S = 30.0  # how long sf waits for Slurm to say a cancelled job ended
CANCEL_POLL_S = 0.5

# What Slurm's clients read from their environment as options (sbatch_values says which and
# why): none of them reaches sf's own calls
CLIENT_PREFIXES = sbatch_values.SLURM_CLIENT_PREFIXES
CLIENT_KEPT = ("SLURM_CONF",)  # which cluster the clients talk to


def client_env(environ=None) -> dict:
    """`environ` (default: ours) less the Slurm client variables (CLIENT_PREFIXES, but
    SLURM_CONF): the environment of every Slurm command sf runs on the login side."""
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items()
            if name in CLIENT_KEPT or not name.startswith(CLIENT_PREFIXES)}


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
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=client_env() if env is None else env,
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


def scancel_confirmed(job_ids, *, timeout_s: float = CANCEL_CONFIRM_S) -> dict[str, str]:
    """scancel the jobs, then read Slurm's state of each until every one has ended or
    `timeout_s` has passed: {job id: state} of those Slurm does not say ended (empty: all did).
    A job's state is Slurm's (sacct, squeue for what sacct has not recorded yet), never sf's."""
    ids = [str(i) for i in job_ids if str(i)]
    scancel(ids)
    until = time.monotonic() + timeout_s
    while True:
        left = {job_id: state.state for job_id, state in job_states(ids).items()
                if job_id in ids and not state.done}
        if not left or time.monotonic() >= until:
            return left
        time.sleep(CANCEL_POLL_S)


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


def show_config() -> dict[str, str]:
    """`scontrol show config`: {AccountingStorageEnforce, ClusterName, ...}."""
    return parse_show_config(_run(["scontrol", "show", "config"]).stdout)


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


def srun_help(timeout: float = 30) -> str | None:
    """`srun --help`'s text (the options a SPANK plugin adds are in it); None when srun does not
    answer."""
    try:
        proc = _run(["srun", "--help"], timeout=timeout, check=False)
    except SlurmError:
        return None
    return (proc.stdout or "") + (proc.stderr or "")


def version() -> tuple[int, int, int] | None:
    """The Slurm release of the client tools sf runs (`scontrol --version`: `slurm 24.11.5`);
    None when they do not answer (sf doctor and the preflight say so; slurm_versions)."""
    try:
        proc = _run(["scontrol", "--version"], check=False, timeout=15)
    except SlurmError:
        return None
    return slurm_versions.parse_version(proc.stdout)


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
        os.execve(path, [path, *argv[1:]], client_env())
    except OSError as exc:
        raise SlurmError(f"cannot run srun: {exc}") from None
