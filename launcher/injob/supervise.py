"""The supervisor: the batch step of every sf job (`python -m launcher.injob supervise`).

Runs on the batch host (the first node of het group 0) and holds every process of the
job as a Popen:

  allocated     the pools' Slurm hosts are known
  head          one srun step on the first node of het group 0: `ray start --head --block`
  workers       ONE srun per het group over its other nodes: `ray start --block` each
  head_up       the GCS answers (TCP connect, no CPU cost)
  barrier       one long-lived process polls the GCS until every pool's hosts and GPUs
                are there (site barrier_timeout_s); on timeout it names who never joined
  all_joined    recorded with seconds since allocated
  driver        verl on the head with FORGE_CLUSTER_* and the wall-time end exported
                (or preflight instead, or torchrun over the train pool for SFT)
  ended         with rc and reason

Requeue (the batch script's USR1 trap does the `scontrol requeue`; templates/train.sbatch.j2):
on every start the supervisor records `restarted` (restart=SLURM_RESTART_COUNT) when the
job is a requeued one, refuses to run a job restarted more than max_requeues times (plan.json)
(Slurm itself requeues --requeue jobs, e.g. on a node failure, without any bound), brings
Ray up again, and exports the wall-time end again to the driver
(MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP, verl's save-before-expiry): the job's
EndTime, less the requeue lead (plan.json) (the USR1 lead + 30 s, as the signal can come that
much early) while the job may still be requeued, so verl's forced save lands before the
requeue; recorded in the `wall_time` phase. USR1 is ignored here (it is the trap's).

Array sweeps (launcher.submit.sweep): --manifest FILE --task N make this task a point of the
sweep: its run dir, checkpoint dir, paths to check and overrides come from the manifest.

Test hook: when the job's environment has SF_TEST_DRIVER (a shell command), it runs on the
head in place of verl (or of the preflight), after the same bring-up and with the same
environment, as `sh -c "$SF_TEST_DRIVER" sf-test-driver OVERRIDES...`. Only the cluster
tests set it (tests/cluster/test_requeue.py, test_sweep.py): a harmless, long driver.

Any node srun that ends before the driver does ends the job (within a second or two):
a `reason` file naming the node(s) and the phase, every step terminated, exit non-zero.
Stdlib only (it may run with the host's python when the runtime is a container).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from launcher import ownership, runs, slurm, states
from launcher.checkpoints import tracked_step
from launcher.errors import SpecError
from launcher.injob import address as addr_mod
from launcher.injob import auth, capabilities, heal, mounts, private, ray_tuning, stacks, verl_phases
from launcher.injob import gpus as gpus_mod
from launcher.injob import ports as ports_mod
from launcher.injob import watchdog as watchdog_mod
from launcher.injob.contract import Contract, Job, UnreadableContract, child_env
from launcher.injob.node_logs import node_logs_text, ray_step_name, write_line
from launcher.runtime import Runtime

POLL_S = 0.5
RESTARTED = object()  # on_step_end after a restart in place: the watch polls the new attempt's steps
TERM_GRACE_S = 8
STOP_GRACE_S = 20  # Ray stops in a few seconds; the node steps end by themselves in that time
REDRAW_STOP_GRACE_S = 3  # a redraw of the head's slot: no Ray cluster came up (a worker's start hangs on)
# The last line of a Python traceback ("ValueError: ...", "ray.exceptions.RayTaskError(...): ..."),
# possibly behind Ray's "(TaskRunner pid=..)" prefix.
ERROR_LINE = re.compile(r"^(\(\S+ pid=\d+[^)]*\)\s*)?[A-Za-z_][\w.]*(Error|Exception)(\([^)]*\))?: \S")
SLURM_ENDINGS = states.SLURM_ENDINGS  # Slurm's state when Slurm ends the job -> the ending recorded
ENDING_TEXT = {
    "cancelled": "cancelled (scancel or sf cancel) during phase {phase}",
    "requeued": "requeued during phase {phase}: the job runs again",
    "time limit": "reached its time limit during phase {phase}",
    "preempted": "preempted by Slurm during phase {phase}",
    "node failure": "Slurm marked a node of the job failed (NODE_FAIL) during phase {phase}",
    "ended by Slurm": "ended by Slurm (cancelled, requeued or out of time) during phase {phase}",
}
SACCT_WAIT_S = 2.0  # sacct lags scontrol by about a second
SIGNAL_WAIT_S = 1.5  # a node step ended: Slurm's own SIGTERM to this step may be on its way
PINNED_MAIN = "launcher.injob.verl_main"


RAY_PREFIX = re.compile(r"^\(\S+ pid=\d+[^)]*\)\s?")
# Ray colours its errors ("\x1b[36mray::TaskRunnerV1.run()\x1b[39m"): a reason is plain text
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TRACEBACK = "Traceback (most recent call last):"
# Ray's wrapper of a remote task's exception: "ray.exceptions.RayTaskError(ImportError): ray::X.run() (...)"
RAY_WRAPPER = re.compile(r"^(?:ray\.exceptions\.)?\w+Error\((\w+)\): ray::")
RAY_TASK = re.compile(r"(ray::[\w.]+\(\))")
CHAIN_MARKS = ("During handling of the above exception, another exception occurred:",
               "The above exception was the direct cause of the following exception:")


# a preflight failure's line kept whole in the reason: the longest, a missing capability with its
# fix and a long runtime path, is about 400 characters
PREFLIGHT_REASON_CHARS = 600


def first_cause(lines: list[str], limit: int = 400) -> str | None:
    """The exception that started the driver's failure: Python prints a chain of tracebacks,
    the first cause first, joined by "During handling of the above exception..." or "The
    above exception was the direct cause..."; the last line of the log is only the last link
    (verl 0.9.1's critic: "is not a value head model, please install trl" caused by the
    ImportError of flash_attn). Returns the first exception line of the LAST chain in
    `lines`, with the last one after it when they differ; else the last error line; None
    when there is none. Ray's "(Actor pid=..)" prefixes are ignored. Pure."""
    clean = [RAY_PREFIX.sub("", ANSI_ESCAPE.sub("", line).rstrip()) for line in lines]
    chains: list[list[str]] = []  # each: the exception lines of one chain, in order
    linked = False
    i = 0
    while i < len(clean):
        text = clean[i].strip()
        if text in CHAIN_MARKS:
            linked = True
        elif text == TRACEBACK:
            exc = None
            j = i + 1
            while j < len(clean):
                line = clean[j]
                if line.strip() in CHAIN_MARKS or line.strip() == TRACEBACK:
                    break
                if line and not line[0].isspace() and _exception_line(line.strip()):
                    exc = line.strip()
                    break
                j += 1
            if exc and RAY_WRAPPER.match(exc):
                exc, j = _ray_cause(clean, j, exc)
            if exc:
                if linked and chains:
                    chains[-1].append(exc)
                else:
                    chains.append([exc])
            linked = False
            i = j
            continue
        i += 1
    if chains:
        chain = chains[-1]
        first, last = chain[0], chain[-1]
        text = first if first == last else f"{first} (then: {last})"
        return text[:limit]
    errors = [line.strip() for line in clean if ERROR_LINE.match(line.strip())]
    return errors[-1][:limit] if errors else None


def _ray_cause(clean: list[str], j: int, header: str) -> tuple[str, int]:
    """A Ray task error prints, inside the one traceback block, the remote task's traceback
    after its header ("ray.exceptions.RayTaskError(ImportError): ray::TaskRunner.run() (pid=..)"),
    nested once per task hop, ending with the original exception ("ImportError: ..."; verl
    0.9.1's one-step-off trainer on the H200: flash-attn missing in ray::WorkerDict.ref_init_model).
    Returns that exception with the innermost task named, and the index where the block ends;
    the header itself when the original is not there."""
    wanted = RAY_WRAPPER.match(header).group(1)
    cause, task = None, RAY_TASK.search(header)
    k = j + 1
    while k < len(clean):
        line = clean[k]
        text = line.strip()
        if text in CHAIN_MARKS or text == TRACEBACK:
            break
        if line and not line[0].isspace():
            if RAY_WRAPPER.match(text):
                task = RAY_TASK.search(text) or task
            elif re.match(rf"^([\w.]*\.)?{re.escape(wanted)}(:|$)", text):
                cause = text
            else:
                break  # the block is over: a log line of another kind
        k += 1
    if cause is None:
        return header, j
    return (f"{cause} (in {task.group(1)})" if task else cause), k


def _exception_line(text: str) -> bool:
    """`Name: message` or a bare `Name` of an exception class (dotted names included)."""
    return bool(ERROR_LINE.match(text) or re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)$", text))


def log(msg: str) -> None:
    """A line of the batch log (one write: the driver writes there too)."""
    write_line(f"[sf {datetime.now().strftime('%H:%M:%S')}] {msg}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The batch script passes the run dir (and an array task's manifest) and the entry and
    overrides as arrays; everything else is the run's plan.json (read_contract)."""
    p = argparse.ArgumentParser(prog="python -m launcher.injob supervise")
    p.add_argument("--run-dir", required=True, help="the run dir; its plan.json is the job's contract")
    p.add_argument("--preflight", action="store_true")
    p.add_argument("--manifest", default=None, help="sweep manifest (array task: its point)")
    p.add_argument("--task", type=int, default=None, help="the array task id (with --manifest)")
    p.add_argument("--n-entry", type=int, required=True, help="how many of the trailing args are the entry")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    args.entry, args.overrides = rest[: args.n_entry], rest[args.n_entry:]
    return args


def read_contract(args: argparse.Namespace) -> Contract:
    """plan.json, read once, with the batch script's entry and overrides and an array task's
    point applied."""
    contract = Contract.read(args.run_dir).with_argv(args.entry, args.overrides)
    if not args.manifest:
        return contract
    if args.task is None:
        raise SystemExit("--manifest needs --task (SLURM_ARRAY_TASK_ID)")
    point = load_point(args.manifest, args.task)
    if os.path.realpath(point["run_dir"]) != os.path.realpath(args.run_dir):
        raise SystemExit(f"run dir {args.run_dir} is not point {args.task}'s ({point['run_dir']})")
    return contract.at_point(point)


def load_point(manifest: str, task: int) -> dict:
    """The point of an array sweep's manifest (written by launcher.submit.sweep) for array task `task`."""
    with open(manifest) as handle:
        data = json.load(handle)
    for point in data.get("points", ()):
        if int(point.get("index", -1)) == int(task):
            return point
    raise RuntimeError(f"sweep manifest {manifest} has no point {task}")


def job_end_timestamp(job_id: str) -> float | None:
    """The job's end (EndTime) as epoch seconds, for verl's save-before-expiry."""
    if os.environ.get("SLURM_JOB_END_TIME", "").isdigit():
        return float(os.environ["SLURM_JOB_END_TIME"])
    try:
        end = slurm.show_job(job_id).get("EndTime", "")
        return datetime.strptime(end, "%Y-%m-%dT%H:%M:%S").timestamp()
    except Exception:  # Unknown / not parsable / scontrol failed: verl just won't save early
        return None


def restart_count() -> int:
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


def allocation(pools, hetjob: bool) -> tuple[dict, dict]:
    """({pool: its hosts in Ray}, {pool: its spare hosts}) from Slurm's node lists: a pool's
    last `spare_nodes` hosts wait out of Ray until a restart in place swaps one in (heal.py)."""
    hosts, spares = {}, {}
    for pool in pools:
        key = f"SLURM_JOB_NODELIST_HET_GROUP_{pool.het_group}" if hetjob else "SLURM_JOB_NODELIST"
        nodelist = os.environ.get(key) or (os.environ.get("SLURM_JOB_NODELIST") if not hetjob else "")
        if not nodelist:
            raise RuntimeError(f"{key} is not set: is this a {'heterogeneous ' if hetjob else ''}Slurm job?")
        given = slurm.hostnames(nodelist)
        if len(given) != pool.nodes + pool.spare_nodes:
            log(f"warning: pool {pool.name} was compiled for {pool.nodes} nodes (+{pool.spare_nodes} spare), "
                f"Slurm gave {len(given)}")
        cut = pool.nodes if pool.spare_nodes and len(given) > pool.nodes else len(given)
        hosts[pool.name], spares[pool.name] = tuple(given[:cut]), tuple(given[cut:])
    return hosts, spares


def gpu_env_wrapper(argv: list[str]) -> list[str]:
    """Run argv with ROCR_VISIBLE_DEVICES dropped when CUDA/HIP devices are set.

    Slurm 22.05 without gres.conf `Flags=nvidia_gpu_env` sets ROCR_VISIBLE_DEVICES beside
    CUDA_VISIBLE_DEVICES in every GPU step, and verl's Worker refuses to start with both
    ("Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set"; seen
    on the H200). slurmstepd sets them per step, so srun's environment cannot drop it."""
    script = ('if [ -n "${CUDA_VISIBLE_DEVICES:-}${HIP_VISIBLE_DEVICES:-}" ]; then unset ROCR_VISIBLE_DEVICES; fi; '
              'exec "$@"')
    return ["sh", "-c", script, "sf-gpu-env", *argv]


def oom_kills(cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """How many processes the kernel's OOM killer took in this process's memory cgroup (v2
    memory.events, v1 memory.oom_control), None when it cannot be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            where, name = Path(cgroup_root, path.lstrip("/")), "memory.events"
        elif "memory" in controllers.split(","):
            where, name = Path(cgroup_root, "memory", path.lstrip("/")), "memory.oom_control"
        else:
            continue
        try:
            for field in (where / name).read_text().splitlines():
                key, _, value = field.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def exit_text(rc: int, oom_killed: int | None = None) -> str:
    """How a process ended, as a person reads it: `exited with 3`, or the signal that killed it
    by name (a Popen's negative return code); SIGKILL with the likely cause: the kernel's OOM
    killer when the cgroup counted a kill, else "out of memory?" as the first thing to check."""
    signum = -rc if rc < 0 else rc - 128 if rc > 128 else 0  # 128 + N: a shell's or srun's word for signal N
    try:
        name = signal.Signals(signum).name if signum else ""
    except ValueError:
        name = f"signal {signum}" if rc < 0 else ""
    if not name:
        return f"exited with {rc}"
    text = f"was killed by {name}" if rc < 0 else f"exited with {rc} = 128 + {name}"
    if signum == signal.SIGKILL:
        text += (" (out of memory: the kernel's OOM killer killed a process of this job)" if oom_killed
                 else " (out of memory? the kernel's OOM killer kills this way; else another user or process did)")
    return text


def last_json(popen: subprocess.Popen, rc: int) -> dict:
    """The JSON line a checking step (barrier, health) printed last, or why there is none. Lines
    after it are skipped: a container runtime may log after the step's command ended (runc's
    "unable to get oom kill count" in a rootless container)."""
    out = popen.stdout.read().decode(errors="replace") if popen.stdout else ""
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"ok": False, "error": f"exited {rc} without a result: {out[-500:]}"}


def signal_steps(steps: list[dict], signum: int, grace: float, kill: bool = False) -> None:
    """Send `signum` to the live steps, wait up to `grace` seconds for them together, then
    SIGKILL what is left when `kill` (else leave it to the caller's next step)."""
    live = [s for s in steps if s["popen"].poll() is None]
    for step in live:
        try:
            step["popen"].send_signal(signum)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for step in live:
        try:
            step["popen"].wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if kill:
                step["popen"].kill()


STEPS_GONE_S = 30


def wait_steps_gone(job_id: str) -> None:
    """Until slurmctld holds none of the job's old srun steps (bounded): their memory is
    released only then, and the new node steps need it (seen on the dev cluster: a restart
    1.8 s after the stop failed with "Memory required by task is not available")."""
    deadline = time.monotonic() + STEPS_GONE_S
    while time.monotonic() < deadline:
        try:
            left = slurm.numbered_steps(job_id)
        except Exception as exc:  # no squeue: go on, the new steps say what is wrong
            log(f"cannot list the job's steps ({exc}); starting Ray again anyway")
            return
        if not left:
            return
        time.sleep(0.2)
    log(f"steps {', '.join(left)} still listed after {STEPS_GONE_S} s; starting Ray again anyway")


def tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class PortsTaken(RuntimeError):
    """No port slot of the site's range is free on the head's host (the message says which)."""


def pinned(argv: list[str]) -> list[str]:
    """A Ray driver's argv run through verl_main, so every verl resource pool it builds is
    pinned to its Slurm group: `python -m MODULE` (the method's verl main) and `python
    main.py` (an experiment's own driver of the same trainer) alike; anything else (`-c`,
    a test's driver) as it is."""
    if len(argv) >= 3 and argv[1] == "-m":
        return [argv[0], "-m", PINNED_MAIN, "--entry", *argv[2:]]
    if len(argv) >= 2 and argv[1].endswith(".py"):
        return [argv[0], "-m", PINNED_MAIN, "--script", *argv[1:]]
    return argv


class Supervisor:
    """The batch step. Every attribute it holds is declared here, in two groups: what an
    attempt keeps from setup on, and what a restart in place renews (restart_in_place).
    Only the Supervisor assigns them; healing (heal.py) decides from a Standing and
    returns a decision that apply() carries out."""

    def __init__(self, contract: Contract, run_dir: str, preflight: bool = False):
        # -- the attempt: set here or in setup(), kept to its end --------------------------
        self.contract = contract
        self.plan = contract.plan
        self.ray = contract.ray  # its port range narrowed to the usable part in setup
        self.preflight = preflight
        self.run_dir = run_dir
        self.runtime = Runtime.from_dict(contract.runtime)
        self.job_id = os.environ.get("SLURM_JOB_ID", "0")
        self.leader = os.environ.get("SLURM_HET_JOB_ID") or self.job_id
        self.hetjob = self.plan.is_hetjob
        self.t0 = time.monotonic()  # for the `seconds` of every event
        self.logs = Path(self.run_dir) / "logs"
        self.restart = 0  # SLURM_RESTART_COUNT: requeues so far (setup)
        self.end_ts: float | None = None  # the job's EndTime (setup)
        self.expires_ts: float | None = None  # the end verl is told (setup: expiration())
        self.head_addr = ""  # the head's Ray address (setup)
        self.token = None  # the Ray token of this attempt (auth.py; setup)
        self.ended = False  # finish() ran (or a requeue was sent): nothing more is recorded
        # -- renewed by a restart in place --------------------------------------------------
        self.job: Job | None = None  # what the job's processes share: hosts, spares, the head's ports
        self.ports: ports_mod.NodePorts | None = None  # the head's ports (take_head_slot)
        self.port_reservation: private.Reservation | None = None  # the lock on the head's slot
        self.steps: list[dict] = []  # the live processes: {"name", "popen", "kind", "pool", "hosts"}
        self.stage = states.STAGE_ALLOCATED  # what it does now: the "during phase X" of a reason
        self.wall0 = time.time()  # when this start began: node events before it are an earlier one's
        # this start's step records: the batch script's; a restart in place writes its own
        self.metrics_path = os.environ.get("VERL_FILE_LOGGER_PATH")
        self.restarts_in_place = 0  # in this attempt
        self.head_slot_redraws = 0  # in this attempt (heal.RedrawHeadSlot)
        # the progress watchdog of this start's driver: None until it trains (check_hang
        # makes it), False when it is off (heal.new_watchdog says why)
        self.watchdog: watchdog_mod.Watchdog | bool | None = None
        self.verl_log = verl_phases.LogWatch(None)  # verl's phases in the batch log, from each driver start

    # -- helpers ----------------------------------------------------------------------
    def record(self, phase: str, **info) -> None:
        """Append a phase (a launcher.states constant) to the run's events."""
        try:
            runs.record_phase(self.run_dir, phase, **info)
        except (OSError, SpecError) as exc:
            log(f"warning: cannot record phase {phase}: {exc}")
        log(f"phase {phase} " + " ".join(f"{k}={v}" for k, v in info.items() if v is not None))

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def child_env(self, driver: bool = False, job: Job | None = None) -> dict:
        """The environment of a child (contract.child_env: the one place it is built)."""
        job = job or self.job  # Ray's settings for the job's size; no token source that would win over its own
        base = ray_tuning.apply(auth.unshadowed(os.environ), len(job.nodes), os.cpu_count() or 1)
        return child_env(job, base, ray_auth=auth.env_for(self.token) if self.token else {},
                         metrics_path=self.metrics_path, restart_in_place=self.restarts_in_place, driver=driver,
                         expires=self.expires_ts)

    def srun(self, name, argv, *, kind, pool=None, hosts=(), stdout=None, **kw) -> subprocess.Popen:
        env = kw.pop("env", None) or self.child_env()
        flags = list(kw.pop("extra", ())) + self.runtime.srun_flags()
        popen = slurm.srun_popen(self.runtime.wrap(argv), env=env, extra=flags, stdout=stdout,
                                 stderr=subprocess.STDOUT if stdout else None, **kw)
        self.steps.append({"name": name, "popen": popen, "kind": kind, "pool": pool, "hosts": list(hosts)})
        return popen

    def local(self, name, argv, *, kind, env=None, stdout=None) -> subprocess.Popen:
        """A runtime process on the batch host (directly, or a one-task overlap step)."""
        local = self.runtime.local_argv(argv)
        if local is None:
            return self.srun(name, argv, kind=kind, env=env, stdout=stdout, het_group=0 if self.hetjob else None,
                             nodes=1, ntasks=1, nodelist=self.job.head_node, overlap=True)
        popen = subprocess.Popen(local, env=env or self.child_env(), stdout=stdout, stdin=subprocess.DEVNULL)
        self.steps.append({"name": name, "popen": popen, "kind": kind, "pool": None, "hosts": [self.job.head_node]})
        return popen

    def write_reason(self, text: str) -> None:
        try:
            runs.Run(self.run_dir).write_text(runs.REASON, text.rstrip() + "\n")
        except OSError as exc:
            log(f"warning: cannot write reason: {exc}")

    def driver_failure(self, what: str) -> str | None:
        """The first failing check of the preflight (preflight.json), or the first exception
        of the driver's last traceback chain (first_cause over the batch log, which is this
        process's stdout): the line a user would otherwise dig out of the logs."""
        if what == "preflight":
            try:
                failures = json.loads((Path(self.run_dir) / "preflight.json").read_text()).get("failures") or []
            except (OSError, ValueError):
                return None
            return str(failures[0])[:PREFLIGHT_REASON_CHARS] if failures else None
        try:
            log = Path(os.readlink("/proc/self/fd/1"))
            with open(log, "rb") as handle:
                handle.seek(max(0, log.stat().st_size - 256 * 1024))
                tail = handle.read().decode(errors="replace").splitlines()
        except OSError:
            return None
        return first_cause(tail)

    def exit_hint(self, nodes: list[str]) -> str:
        """What the nodes' node_exit said, and whether submitting again is likely to help."""
        last = {}
        for event in runs.read_phases(self.run_dir):
            if event.get("phase") == states.NODE_EXIT and event.get("node") in nodes \
                    and event.get("time", 0) >= self.wall0:
                last[event["node"]] = event
        if not last:
            return ""
        errors = "; ".join(f"{n}: {e['error']}" for n, e in last.items() if e.get("error"))
        hint = f": {errors}" if errors else ""
        if any(e.get("retry_helps") for e in last.values()):
            return (hint + ". Ray never came up there, after its retries: a loaded node or a slow GCS; "
                    "submitting again is likely to help (or raise RAY_gcs_rpc_server_connect_timeout_s "
                    "or ray.start_retries in the site file)")
        if any(e.get("started") for e in last.values()):
            return hint + ". Ray ran and then ended: a node or process died; resubmitting only helps once that is fixed"
        return hint + ". Submitting again will not help until that is fixed"

    def node_exits(self) -> list[dict]:
        """The node_exit phases of this start (this attempt, since wall0)."""
        restart = os.environ.get("SLURM_RESTART_COUNT")
        return [event for event in runs.read_phases(self.run_dir)
                if event.get("phase") == states.NODE_EXIT and str(event.get("job_id")) == self.job_id
                and str(event.get("restart", "")) == str(restart or "") and event.get("time", 0) >= self.wall0]

    def exited_nodes(self) -> list[str]:
        """Nodes whose Ray ended in this start (from the node_exit phases)."""
        return list(dict.fromkeys(event.get("node") for event in self.node_exits()))

    def head_slot_taken(self) -> bool:
        """Whether the head ended before Ray ran because its port slot was taken (node.py)."""
        return any(event.get("node") == self.job.head_node and event.get("port_collision")
                   and not event.get("started") for event in self.node_exits())

    def wants_health_check(self) -> bool:
        """The node health check before the driver: site ray.health_check: always or
        --exclude-bad-nodes (the preflight runs its own), on Ray jobs of more than one node
        or with GPUs."""
        gpus = any(p.gpus_per_node for p in self.plan.pools)
        return self.ray.health_check == "always" and not self.preflight and (len(self.job.nodes) > 1 or gpus)

    def gpus_seen(self) -> dict[str, list[str]]:
        """{node: GPU ids} from this attempt's node_started phases (each node reports what its
        step sees before it starts Ray, so every joined node has reported)."""
        seen = {}
        for event in runs.read_phases(self.run_dir):
            if event.get("phase") == states.NODE_STARTED and event.get("time", 0) >= self.wall0 \
                    and event.get("node") in self.job.nodes:
                seen[event["node"]] = list(event.get("gpu_ids") or [])
        return seen

    # -- the job ------------------------------------------------------------------------
    def setup(self) -> None:
        self.wall0 = time.time()
        plan = self.plan
        hosts, spares = allocation(plan.pools, self.hetjob)
        head_node = hosts[plan.pools[0].name][0]
        batch_node = os.environ.get("SLURMD_NODENAME", head_node)
        if batch_node != head_node:
            log(f"warning: batch host {batch_node} is not the first node of het group 0 ({head_node})")
        self.record(states.ALLOCATED, pools={name: list(h) for name, h in hosts.items()},
                    nodes=sum(len(h) for h in hosts.values()), leader=self.leader)
        usable = ports_mod.usable_range(self.ray.port_range)
        if usable != tuple(self.ray.port_range):
            lo, hi = self.ray.port_range
            log(f"ports: using {usable[0]}-{usable[1]} of the site's {lo}-{hi} "
                "(the rest is the kernel's ephemeral range)")
            self.ray = replace(self.ray, port_range=usable)
        self.head_addr = addr_mod.node_address(head_node, self.ray.address_method, self.ray.address_prefix,
                                               self.ray.interface)
        self.restart = restart_count()
        self.end_ts = job_end_timestamp(self.leader)
        self.expires_ts = self.expiration()
        self.job = Job(run_dir=self.run_dir, job_id=self.job_id, leader=self.leader, launcher=plan.launcher,
                       config_name=plan.config_name, pools=plan.pools, hosts=hosts, spares=spares,
                       head_node=head_node, head="", port_block=0, head_slot=0, ray=self.ray,
                       checkpoint_dir=plan.checkpoint_dir or "", paths_to_check=plan.paths_to_check,
                       host_missing=mounts.missing_here(plan.paths_to_check),
                       entry=plan.entry, overrides=plan.overrides, verl_pools=dict(plan.verl_pools))
        self.take_head_slot()
        if plan.launcher == "ray":
            # Every Ray process of the job (ray start on each node through srun's environment,
            # the barrier, the driver) carries the job's token; nothing else may use the cluster.
            self.token = auth.make_token(self.run_dir, self.leader)

    def take_head_slot(self) -> None:
        """The head's ports (free_head_slot) into the job: at the start and at a restart in place."""
        block, slot = self.free_head_slot()
        self.ports = ports_mod.block_ports(block, slot, self.ray.port_range)
        self.job = replace(self.job, head=f"{self.head_addr}:{self.ports.gcs}", port_block=block, head_slot=slot)

    def free_head_slot(self) -> tuple[int, int]:
        """(block, slot) of the head's ports: a slot chosen at random (ports_mod.random_slot:
        another user cannot predict it and squat it beforehand), reserved on the head's host
        for the whole job (private.reserve: an fcntl lock this process holds until it exits,
        so two jobs of this user starting on one host at once never take one slot) and with
        every port of the slot free, the worker range included (another user's job or program
        is seen by the bind check). PortsTaken, naming the ports and the fix, when no slot of
        the range is free."""
        from launcher.injob.node import busy_ports, ports_taken_text

        locks = private.lock_dir(self.ray.temp_root)
        if locks is None:
            log(f"warning: no private lock dir under {self.ray.temp_root}: the port block is not reserved")
        first, drawn = ports_mod.random_slot(self.ray.port_range)
        busy: list[int] = []
        for block, slot in ports_mod.candidate_slots(first, drawn, self.ray.port_range):
            reservation = private.reserve(locks, block, slot)
            if reservation is None:
                continue
            busy = busy_ports(self.head_addr, ports_mod.block_ports(block, slot, self.ray.port_range), head=True)
            if not busy:
                if (block, slot) != (first, drawn):
                    log(f"ports: slot {drawn} of block {first} is taken on {self.head_addr}; "
                        f"using slot {slot} of block {block}")
                self.port_reservation = reservation
                return block, slot
            reservation.release()
        raise PortsTaken(ports_taken_text(self.head_addr, self.ray.port_range, busy))

    def may_requeue(self) -> bool:
        c = self.contract
        return c.requeue_lead > 0 and (c.max_requeues is None or self.restart < c.max_requeues)

    def expiration(self) -> float | None:
        """What verl is told is the end: the job's end, or the requeue moment before it."""
        if not self.end_ts:
            return None
        if self.may_requeue():
            return self.end_ts - self.contract.requeue_lead
        return self.end_ts

    def test_driver(self) -> list[str] | None:
        """The SF_TEST_DRIVER test hook (see the module docstring), or None."""
        hook = os.environ.get("SF_TEST_DRIVER", "")
        if not hook.strip():
            return None
        return ["/bin/sh", "-c", hook, "sf-test-driver", *self.plan.overrides]

    def start_ray(self) -> None:
        # Each node writes its own log, logs/<job>-ray-<head|pool>-<node>.log (node.py);
        # srun's own messages (a task that died) land in the batch log.
        py = self.runtime.runtime_python()
        node_cmd = [py, "-m", "launcher.injob", "node"]
        self.logs.mkdir(parents=True, exist_ok=True)
        head = self.job.head_node
        self.srun(ray_step_name("head", self.plan.pools[0].name), [*node_cmd, "--role", "head"], kind="node",
                  pool=self.plan.pools[0].name,
                  hosts=[head], het_group=0 if self.hetjob else None,
                  nodes=1, ntasks=1, nodelist=head, overlap=True, kill_on_bad_exit=True)
        for pool in self.plan.pools:
            workers = [h for h in self.job.hosts[pool.name] if h != head]
            if not workers:
                continue
            self.srun(ray_step_name("worker", pool.name), [*node_cmd, "--role", "worker"], kind="node", pool=pool.name,
                      hosts=workers,
                      het_group=pool.het_group if self.hetjob else None,
                      nodes=len(workers), ntasks=len(workers), ntasks_per_node=1, nodelist=workers,
                      overlap=True, kill_on_bad_exit=True)

    def driver_argv(self) -> list[str]:
        argv = self.plan.argv()
        if argv[:1] and argv[0] in ("python", "python3"):
            argv[0] = self.runtime.runtime_python()
        return pinned(argv) if self.plan.launcher == "ray" else argv

    def start_driver(self) -> None:
        hook = self.test_driver()
        if hook is not None:
            log("driver (SF_TEST_DRIVER test hook): " + " ".join(hook[:3]))
            self.verl_log = verl_phases.LogWatch.from_here()  # the driver's lines, not sf's line naming it
            if self.runtime.local_argv(hook) is None:  # a container (oci, pyxis): where verl's driver runs
                self.local("driver", hook, kind="driver", env=self.child_env(driver=True))
            else:
                popen = subprocess.Popen(hook, env=self.child_env(driver=True), stdin=subprocess.DEVNULL)
                self.steps.append({"name": "driver", "popen": popen, "kind": "driver", "pool": None,
                                   "hosts": [self.job.head_node]})
            self.record(states.DRIVER_STARTED, what="SF_TEST_DRIVER", seconds=self.elapsed())
            self.stage = states.STAGE_DRIVER
            return
        if self.preflight:
            py = self.runtime.runtime_python()
            self.local("preflight", [py, "-m", "launcher.injob", "preflight"], kind="driver",
                       env=self.child_env(driver=True))
            self.record(states.DRIVER_STARTED, what="preflight", seconds=self.elapsed())
            self.stage = states.STAGE_PREFLIGHT
            return
        argv = self.driver_argv()
        log("driver: " + " ".join(argv))
        self.verl_log = verl_phases.LogWatch.from_here()
        self.local("driver", argv, kind="driver", env=self.child_env(driver=True))
        what = argv[2] if argv[1:2] == ["-m"] and len(argv) > 2 else (argv[1] if len(argv) > 1 else argv[0])
        self.record(states.DRIVER_STARTED, what=what, seconds=self.elapsed())
        self.stage = states.STAGE_DRIVER

    def start_torchrun(self) -> None:
        train = self.plan.pools[0]
        argv = self.plan.argv()
        rdzv = [f"--nnodes={train.nodes}", f"--nproc_per_node={train.gpus_per_node}",
                "--rdzv_backend=c10d", f"--rdzv_endpoint={self.head_addr}:{self.ports.rdzv}",
                f"--rdzv_id=sf{self.job_id}"]
        argv = [argv[0], *rdzv, *argv[1:]]
        if self.preflight:  # the preflight reports the torchrun argv it would run
            py = self.runtime.runtime_python()
            env = self.child_env(driver=True, job=replace(self.job, entry=tuple(argv)))
            self.local("preflight", [py, "-m", "launcher.injob", "preflight"], kind="driver", env=env)
            self.record(states.DRIVER_STARTED, what="preflight", seconds=self.elapsed())
            self.stage = states.STAGE_PREFLIGHT
            return
        log("driver: " + " ".join(argv))
        self.verl_log = verl_phases.LogWatch.from_here()
        self.srun("torchrun", gpu_env_wrapper(argv), kind="driver", env=self.child_env(driver=True),
                  het_group=0 if self.hetjob else None, nodes=train.nodes, ntasks=train.nodes,
                  ntasks_per_node=1, nodelist=list(self.job.hosts[train.name]), kill_on_bad_exit=True)
        self.record(states.DRIVER_STARTED, what="torchrun", seconds=self.elapsed())
        self.stage = states.STAGE_DRIVER

    def slurm_ending(self) -> str | None:
        """How Slurm is ending this job (cancelled, requeued, time limit, ...), or None while
        Slurm still runs it (then an ended step is the job's own failure). While Slurm kills
        a job scontrol says only COMPLETING; sacct (a moment behind) then says why."""
        if self.requeued_by_trap():
            return "requeued"
        try:
            state = slurm.show_job(self.leader).get("JobState", "")
        except Exception as exc:  # scontrol did not answer: no claim either way
            log(f"warning: cannot ask Slurm how the job stands: {exc}")
            return None
        if state in SLURM_ENDINGS:
            return SLURM_ENDINGS[state]
        if state != "COMPLETING":
            return None
        deadline = time.monotonic() + SACCT_WAIT_S
        while True:
            try:
                job = slurm.job_states([self.leader]).get(self.leader)
                state = job.state if job is not None else ""
            except Exception:
                state = ""
            if state in SLURM_ENDINGS or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        log(f"Slurm: job {self.leader} is ending ({state or 'sacct has no state yet'})")
        return SLURM_ENDINGS.get(state, "ended by Slurm")

    def requeued_by_trap(self) -> bool:
        """The batch script's USR1 trap recorded `requeued` in this attempt."""
        return any(e.get("phase") == states.REQUEUED and e.get("time", 0) >= self.wall0
                   for e in runs.read_phases(self.run_dir))

    def ending_by_slurm(self) -> str | None:
        """A node step ended: ask Slurm whether it is ending the job (on a cancel or a requeue
        Slurm signals every step, the node steps often first, and SIGKILLs what is left
        KillWait seconds later: this answer must come fast); when Slurm still says RUNNING,
        ask once more a moment later (its own SIGTERM to this step may be on its way)."""
        ending = self.slurm_ending()
        if ending is None:
            time.sleep(SIGNAL_WAIT_S)
            ending = self.slurm_ending()
        return ending

    def end_by_slurm(self, ending: str, signum: int | None = None) -> int:
        """Record an ending Slurm caused as what it is. A cancel or a requeue ends with 0 (the
        batch step is then no FAILED step of a cleanly cancelled job); a requeue leaves no
        reason behind (the job runs again)."""
        reason = ENDING_TEXT[ending].format(phase=self.stage)
        rc = 0 if ending in ("cancelled", "requeued") else 128 + (signum or signal.SIGTERM)
        log(f"{ending}: {reason}")
        if ending != "requeued":
            self.write_reason(reason)
        self.finish(rc, reason, ending=ending, signal=signal.Signals(signum).name if signum else None)
        return rc

    def fail(self, reason: str, rc: int = 1) -> int:
        log("FAILED: " + reason)
        self.write_reason(reason)
        self.finish(rc, reason)
        return rc

    def requeue_without(self, bad: list[str], reason: str) -> int:
        """--exclude-bad-nodes: requeue the job with `bad` added to its excluded nodes (each
        het component its own), within max_requeues; the next attempt starts elsewhere."""
        restarts = self.restart
        if restarts >= int(self.contract.max_requeues or 0):
            return self.fail(f"{reason}; not requeued without them: already requeued {restarts} times "
                             f"(max_requeues={self.contract.max_requeues})", rc=1)
        if set(bad) >= set(self.job.nodes):
            return self.fail(f"{reason}; not requeued: every node of the job is suspect (a shared cause, "
                             "such as the network or the runtime, is more likely than bad nodes)", rc=1)
        het = len({p.het_group for p in self.plan.pools}) > 1
        components: dict[str, list[str]] = {}
        for pool in self.plan.pools:
            mine = [h for h in self.job.hosts[pool.name] if h in bad]
            if mine:
                key = f"{self.leader}+{pool.het_group}" if het else self.job_id
                components.setdefault(key, []).extend(mine)
        log(f"excluding {', '.join(bad)} and requeueing: {reason}")
        self.record(states.REQUEUED, restart=restarts + 1, cause="bad nodes", excluded=bad, reason=reason)
        # the exclusion after the requeue (Slurm takes ExcNodeList only while a job is
        # pending) must still be written, by children that ignore SIGTERM too
        return self.requeue_now(lambda: slurm.requeue_excluding(self.leader, components),
                                f"{reason}; requeue without them failed")

    def requeue_now(self, call, failed: str) -> int:
        """Run `call` (a Slurm requeue of this job) with SIGTERM ignored: the requeue sends this
        job SIGTERM and this process must still get the call out. A failed requeue fails the
        job with both causes named (`failed`: the first)."""
        self.ended = True
        on_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            call()
        except Exception as exc:
            signal.signal(signal.SIGTERM, on_term)
            self.ended = False
            return self.fail(f"{failed}: {exc}", rc=1)
        if self.token:
            auth.remove_token(self.token)
        return 0

    # -- healing: heal.py decides, the supervisor carries it out --------------------------
    def standing(self) -> heal.Standing:
        """What a healing decision reads of the job now."""
        return heal.Standing(job=self.job, stage=self.stage, preflight=self.preflight, launcher=self.plan.launcher,
                             restarts_in_place=self.restarts_in_place,
                             max_restarts_in_place=self.contract.heal.max_restarts_in_place,
                             head_slot_redraws=self.head_slot_redraws,
                             restart=self.restart, may_requeue=self.may_requeue(),
                             max_requeues=self.contract.max_requeues, requeue_lead=self.contract.requeue_lead)

    def apply(self, decision: heal.Decision) -> int | None:
        """Carry out what healing decided: None when restarted in place (the watch goes on),
        else the attempt's exit code."""
        if decision.note:
            log(decision.note)
        if isinstance(decision, heal.RedrawHeadSlot):
            self.redraw_head_slot(decision)
            return None
        if isinstance(decision, heal.RestartInPlace):
            self.restart_in_place(decision)
            return None
        if isinstance(decision, heal.Requeue):
            return self.requeue(decision)
        if isinstance(decision, heal.RequeueWithout):
            return self.requeue_without(list(decision.nodes), decision.reason)
        return self.fail(decision.reason, rc=decision.rc)

    def check_hang(self) -> watchdog_mod.Hang | None:
        """Once per watch-loop turn while the driver trains: the watchdog's Hang or None. The
        watchdog is made at the driver's first turn (heal.new_watchdog: off without step records)."""
        if self.stage != states.STAGE_DRIVER or self.preflight:  # verl trains
            return None
        if self.watchdog is None:
            # the batch script exports VERL_FILE_LOGGER_PATH; a restart in place sets its own
            path = self.metrics_path or str(Path(self.run_dir) / "metrics" / f"attempt-{self.restart}.jsonl")
            dog, line = heal.new_watchdog(self.contract.heal, self.plan.overrides, path, time.monotonic())
            log(line)
            self.watchdog = dog or False
        if not self.watchdog:
            return None
        hang = self.watchdog.poll(time.monotonic())
        if self.watchdog.stepped:
            self.write_progress(self.watchdog.progress.last_step)
        return hang

    def write_progress(self, step: int | None) -> None:
        """<run>/progress.json: the newest training step and when it arrived (wall clock), which
        `sf status` shows as "step 12 (40 s ago)"; replaced at each new step number."""
        try:
            runs.Run(self.run_dir).write_json(runs.PROGRESS, {"step": step, "at": round(time.time(), 1),
                                                             "job_id": self.job_id, "restart": self.restart})
        except OSError as exc:
            log(f"warning: cannot write {runs.PROGRESS}: {exc}")

    def training_steps(self) -> int | None:
        """The training steps the driver logged, read up to its end (not a second ago); None
        without a watchdog."""
        if not self.watchdog:
            return None
        return self.watchdog.catch_up(time.monotonic()).training_steps

    def on_hang(self, hang: watchdog_mod.Hang) -> int | None:
        """Record the hang, save every node's Python stacks under <run>/stacks/<job>-<restart>/
        (the worker nodes whose processes did not answer are the evidence), kill the driver,
        then carry out what heal.after_hang decides."""
        rel = f"{stacks.STACKS_DIR}/{self.job_id}-{self.restart}" + \
            (f".{self.restarts_in_place}" if self.restarts_in_place else "")
        self.record(states.HANG, last_step=hang.last_step, seconds_since=hang.idle_s, limit_s=hang.limit_s,
                    first_step=hang.first_step, stacks=rel, seconds=self.elapsed())
        t0 = time.monotonic()
        saved = stacks.save(self, Path(self.run_dir) / rel)
        # The head is never left out (the batch step, the GCS and the hung driver, killed below,
        # live there); a worker node whose processes did not answer the dump is the evidence.
        silent = {n: why for n, why in saved["silent"].items() if n != self.job.head_node}
        self.record(states.STACKS_SAVED, dir=rel, nodes=saved["nodes"], silent=silent or None,
                    seconds=round(time.monotonic() - t0, 1))
        # A hung driver saves nothing and may not heed SIGTERM (frozen, or stuck holding the GIL):
        # kill it now, so ending the attempt does not wait out the grace times for it.
        self.kill_driver()
        return self.apply(heal.after_hang(self.standing(), heal.hang_reason(hang, rel, silent), list(silent)))

    def kill_driver(self) -> None:
        for step in self.steps:
            if step["kind"] == "driver" and step["popen"].poll() is None:
                step["popen"].kill()

    def restart_in_place(self, decision: heal.RestartInPlace) -> None:
        """Stop the driver and Ray, bring Ray up again on the decision's hosts and let the watch
        loop start the driver again (verl resumes from its last checkpoint): every attribute
        of the second group in __init__ renewed."""
        n = decision.number
        t0 = time.monotonic()
        log(f"restarting in place ({n} of at most {decision.bound}): {decision.reason}")
        self.kill_driver()
        self.stop_ray()
        self.restarts_in_place = n
        self.job = replace(self.job, hosts=decision.hosts, spares=decision.spares)
        if decision.swapped:
            log("left out for a spare: " + ", ".join(f"{dead} -> {spare}" for dead, spare in decision.swapped.items()))
        self.new_start()
        # verl's file logger opens its file with "wb": the restarted driver writes its own
        self.metrics_path = str(Path(self.run_dir) / "metrics" / f"attempt-{self.restart}.{n}.jsonl")
        self.watchdog = None
        self.record(states.RESTARTED_IN_PLACE, cause=decision.cause, restart_in_place=n,
                    max_restarts_in_place=decision.bound, nodes=list(decision.nodes) if decision.nodes else None,
                    left_out=list(decision.swapped) or None, spares_used=list(decision.swapped.values()) or None,
                    resumed_from=tracked_step(self.plan.checkpoint_dir) or 0, reason=decision.reason[:300],
                    stop_s=round(time.monotonic() - t0, 1))
        self.bring_ray_up()

    def redraw_head_slot(self, decision: heal.RedrawHeadSlot) -> None:
        """Stop Ray and bring it up again on the same nodes with the head on a slot drawn anew."""
        t0 = time.monotonic()
        taken = self.job.head
        # no Ray cluster came up: the workers wait for a GCS that is not theirs, nothing to stop with care
        self.stop_ray(grace_s=REDRAW_STOP_GRACE_S)
        self.head_slot_redraws = decision.number
        self.new_start()
        self.record(states.HEAD_SLOT_REDRAWN, number=decision.number, max_redraws=heal.MAX_HEAD_SLOT_REDRAWS,
                    taken=taken, head=self.job.head, reason=decision.reason[:300],
                    stop_s=round(time.monotonic() - t0, 1))
        self.bring_ray_up()

    def stop_ray(self, grace_s: float = STOP_GRACE_S) -> None:
        """Every node step stopped and gone: each node stops Ray and keeps its logs, as at the end
        of a job (what has not ended after `grace_s` is terminated)."""
        self.stop_nodes(grace_s)
        self.terminate()
        self.steps = []
        wait_steps_gone(self.leader)

    def new_start(self) -> None:
        """A fresh start inside the allocation: node events count from now, and the head's slot is
        drawn and reserved again (the stopped head's lock released first, so its slot may come
        back; any free one will do: the workers are told the new GCS port)."""
        self.wall0 = time.time()
        if self.port_reservation is not None:
            self.port_reservation.release()
        self.take_head_slot()

    def bring_ray_up(self) -> None:
        """Every node's Ray step and the barrier that waits for them."""
        self.start_ray()
        self.local("barrier", [self.runtime.runtime_python(), "-m", "launcher.injob", "barrier"], kind="barrier",
                   stdout=subprocess.PIPE)
        self.stage = states.STAGE_BRINGUP

    def requeue(self, decision: heal.Requeue) -> int:
        """The whole job back to the queue (the next attempt resumes from the last checkpoint),
        as requeue_without does, with nothing excluded."""
        nxt = self.restart + 1
        bound, reason = self.contract.max_requeues, decision.reason
        log(f"requeueing (restart {nxt} of at most {bound}): {reason}")
        self.write_reason(f"{reason}; requeued (restart {nxt} of at most {bound})")
        self.record(states.REQUEUED, restart=nxt, cause=decision.cause,
                    nodes=list(decision.nodes) if decision.nodes is not None else None, reason=reason)
        return self.requeue_now(lambda: slurm.requeue(self.leader), f"{reason}; the requeue failed")

    def finish(self, rc: int, reason: str, **info) -> None:
        if self.ended:
            return
        self.ended = True
        # recorded first: when Slurm ends the job, it kills this step KillWait seconds after
        # its SIGTERM, maybe before the nodes have stopped
        self.record(states.ENDED, rc=rc, reason=reason, seconds=self.elapsed(), **info)
        self.stop_nodes()
        self.terminate()
        if self.token:
            auth.remove_token(self.token)

    def stop_nodes(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ask every node step to stop Ray and end by itself (SIGUSR2, which srun forwards
        to its tasks): the steps end with 0, not CANCELLED by Slurm with 'Killed' tasks."""
        signal_steps([s for s in self.steps if s["kind"] == "driver"], signal.SIGTERM, 0)
        signal_steps([s for s in self.steps if s["kind"] == "node"], signal.SIGUSR2, grace_s)

    def terminate(self) -> None:
        signal_steps(self.steps, signal.SIGTERM, TERM_GRACE_S, kill=True)

    def check_restarts(self) -> int | None:
        """Record a restart; refuse one past the bound. None to go on, else the exit code."""
        if self.restart <= 0:
            return None
        bound = self.contract.max_requeues
        self.record(states.RESTARTED, restart=self.restart, max_requeues=bound)
        if bound is not None and self.restart > bound:
            return self.fail(f"restart {self.restart} exceeds max_requeues={bound}: the job was requeued "
                             f"{self.restart} times; not running it again (see events.jsonl for each restart)",
                             rc=3)
        return None

    def record_wall_time(self) -> None:
        self.record(states.WALL_TIME, job_end=int(self.end_ts) if self.end_ts else None,
                    expires=int(self.expires_ts) if self.expires_ts else None,
                    may_requeue=self.may_requeue())

    def run(self) -> int:
        self.setup()
        refused = self.check_restarts()
        if refused is not None:
            return refused
        if self.restart > 0:
            # an earlier attempt's reason (the requeue, a failure before it) is not this one's
            try:
                Path(self.run_dir, runs.REASON).unlink(missing_ok=True)
            except OSError as exc:
                log(f"warning: cannot clear the earlier attempt's reason: {exc}")
        self.record_wall_time()
        if (refused := capabilities.refuse_early(self)) is not None:  # before Ray: a missing flash-attn, ...
            return refused
        if self.plan.launcher == "torchrun":
            self.start_torchrun()
            return self.watch()
        self.bring_ray_up()
        return self.watch()

    # The supervisor's one loop that decides, in this order of precedence: a step that ended (a
    # node, the barrier, the health check, the driver: on_step_end), verl's start-up phases, the
    # hang watchdog, the head coming up.
    def watch(self) -> int:
        head_up = self.plan.launcher != "ray"
        while True:
            for step in self.steps:
                rc = step["popen"].poll()
                if rc is None:
                    continue
                ended = self.on_step_end(step, rc)
                if ended is RESTARTED:
                    break  # restarted in place: self.steps are the new attempt's
                if ended is not None:
                    return ended
            for found in self.verl_log.new_phases():  # verl's own start-up phases, as its driver logs them
                self.record(states.VERL_PHASE, seconds=self.elapsed(), **found)
            hang = self.check_hang()  # the progress watchdog, while the driver trains
            if hang and (ended := self.on_hang(hang)) is not None:
                return ended
            if not head_up and tcp_open(self.head_addr, self.ports.gcs):
                head_up = True
                self.record(states.HEAD_UP, seconds=self.elapsed(), address=self.job.head)
                if self.stage == states.STAGE_BRINGUP:
                    self.stage = states.STAGE_BARRIER
            self.wait_a_little()

    def on_step_end(self, step: dict, rc: int):
        """What a step's end means: the attempt's exit code (the job ends), RESTARTED (healed in
        place: the watch polls the new steps), or None (the watch goes on: the next phase started,
        or a result already read)."""
        if step["kind"] == "node":
            return self.on_node_end(step, rc)
        if step["kind"] in ("barrier", "health") and not step.get("seen"):
            step["seen"] = True
            result = last_json(step["popen"], rc)
            return self.on_barrier(result, rc) if step["kind"] == "barrier" else self.on_health(result, rc)
        if step["kind"] == "driver":
            return self.on_driver_end(step, rc)
        return None

    def on_node_end(self, step: dict, rc: int):
        # the wrapper writes its node_exit line as it ends: poll for it briefly
        named = []
        deadline = time.monotonic() + 1.0
        while not named and time.monotonic() < deadline:
            named = [n for n in self.exited_nodes() if n in step["hosts"]]
            if not named:
                time.sleep(0.05)
        lost = not named  # no node_exit: the node's processes went away, not just Ray
        named = named or step["hosts"]
        ending = self.ending_by_slurm()
        if ending:
            return self.end_by_slurm(ending)
        reason = (f"Ray node {', '.join(named)} (pool {step['pool']}) ended during phase "
                  f"{self.stage} (srun {step['name']} {exit_text(rc)}); "
                  + node_logs_text(self.run_dir, self.job_id, step["name"], named, self.wall0)
                  + self.exit_hint(named))
        ended = self.apply(heal.after_node_death(self.standing(), reason, named, lost,
                                                 head_slot_taken=self.head_slot_taken()))
        return RESTARTED if ended is None else ended

    def on_barrier(self, result: dict, rc: int) -> int | None:
        """Every node joined: the health check or the driver next; else the job fails naming who is missing."""
        if rc == 0 and result.get("ok"):
            seen = self.gpus_seen()
            self.job = replace(self.job, gpu_ids=seen)  # the preflight reports them
            problems = gpus_mod.conflicts(seen, self.job.gpus_by_host())
            if problems:
                return self.fail("GPU check failed during phase barrier: " + "; ".join(problems), rc=1)
            self.record(states.ALL_JOINED, seconds=self.elapsed(), barrier_s=result.get("seconds"),
                        ray_nodes=result.get("ray_nodes"),
                        pools={k: sorted(v["joined"]) for k, v in result["pools"].items()},
                        gpu_ids=seen)
            if self.wants_health_check():
                self.local("health", [self.runtime.runtime_python(), "-m", "launcher.injob", "health"],
                           kind="health", stdout=subprocess.PIPE)
                self.stage = states.STAGE_HEALTH
            else:
                self.start_driver()
            return None
        missing = result.get("missing") or []
        named = ", ".join(f"{h} (pool {pool.name if (pool := self.job.pool_of(h)) else '?'})" for h in missing)
        if missing and not result.get("pools"):
            # The head's GCS never answered a node listing: who joined is unknown,
            # so name the head rather than call every host absent.
            reason = (f"barrier timed out after {self.ray.barrier_timeout_s:g}s during phase barrier: "
                      f"the Ray head on {self.job.head_node} never answered a node listing "
                      f"({result.get('error') or 'no answer'})")
        elif missing:
            reason = (f"barrier timed out after {self.ray.barrier_timeout_s:g}s during phase barrier: "
                      f"hosts never joined the Ray cluster: {named}")
        elif result.get("short_of_gpus"):
            reason = ("barrier timed out during phase barrier: hosts joined with fewer GPUs than "
                      f"compiled: {', '.join(result['short_of_gpus'])}")
        else:
            reason = f"barrier failed during phase barrier: {result.get('error')}"
        return self.fail(reason, rc=1)

    def on_health(self, result: dict, rc: int) -> int | None:
        """Every pair of nodes healthy: the driver next; else fail, or requeue without the suspects."""
        if rc == 0 and result.get("ok"):
            self.record(states.HEALTH_CHECKED, seconds=self.elapsed(), pairs=result.get("pairs"),
                        median_mib_per_s=result.get("median_mib_per_s"), gpu=result.get("gpu"))
            self.start_driver()
            return None
        bad = list(result.get("suspect_nodes") or [])
        reason = (f"node health check failed during phase health (suspect nodes: "
                  f"{', '.join(bad) or 'none named'}): "
                  + "; ".join((result.get("failed") or [str(result.get("error"))])[:3]))
        if self.ray.exclude_bad_nodes and bad:
            return self.requeue_without(bad, reason)
        return self.fail(reason, rc=1)

    def on_driver_end(self, step: dict, rc: int):
        what = step["name"]
        # a driver in a container is an srun step: Slurm's cancel or requeue may end it
        # before this batch step hears of it (a local driver dies with this step)
        if rc != 0 and self.runtime.local_argv([]) is None and (ending := self.ending_by_slurm()):
            return self.end_by_slurm(ending)
        reason = "completed" if rc == 0 else \
            f"{what} {exit_text(rc, oom_kills() if rc < 0 else None)} during phase driver"
        cause = self.driver_failure(what) if rc != 0 else None
        if cause:
            reason += f": {cause}"
        if rc != 0:
            decision = heal.after_driver_failure(self.standing(), reason, self.training_steps())
            if isinstance(decision, heal.RestartInPlace):
                self.apply(decision)
                return RESTARTED
            if decision.note:
                log(decision.note)
            reason = decision.reason
            self.write_reason(reason)
        self.finish(rc, reason)
        return rc

    def wait_a_little(self) -> None:
        """POLL_S, but wake at once when the barrier (or health check) prints its result (it exits right
        after), so the driver starts within a moment of the last node joining."""
        live = next((s for s in self.steps if s["kind"] in ("barrier", "health") and not s.get("seen")), None)
        if live is None or live["popen"].stdout is None:
            time.sleep(POLL_S)
            return
        ready, _, _ = select.select([live["popen"].stdout], [], [], POLL_S)
        if ready:
            try:
                live["popen"].wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass


def own_run_dir(run_dir: str) -> str | None:
    """Why this job must not run in `run_dir` (another user's, a symlink, open to others, in a
    folder others may rename it out of), or None. Checked before the job writes anything."""
    try:
        ownership.check_own_dir(run_dir)
        ownership.trusted_chain(os.path.dirname(os.path.abspath(run_dir)))
    except SpecError as exc:
        return str(exc)
    return None


def refuse_contract(run_dir: str, reason: str) -> int:
    """End a job whose plan.json it cannot run from: the reason and an `ended` event in the
    run (so `sf status` says why), no traceback; nothing was started."""
    log("FAILED: " + reason)
    try:
        runs.Run(run_dir).write_text(runs.REASON, reason + "\n")
        runs.record_phase(run_dir, states.ENDED, rc=2, reason=reason, seconds=0.0)
    except (OSError, SpecError) as exc:
        log(f"warning: cannot record the ending: {exc}")
    return 2


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    unsafe = own_run_dir(args.run_dir)
    if unsafe:
        # nothing is written into it: not the reason, not an event (they would go where the other user says)
        log(f"refusing to run: {unsafe}")
        return 2
    # what the job makes (checkpoints, metrics, verl's and Ray's files) is its user's alone, or its
    # group's to read when the run is shared (ownership.run_umask), whatever umask it came with
    umask = ownership.run_umask(args.run_dir)
    os.umask(umask)
    try:  # a run dir of an older sf, or made by hand: the folders the job writes into, with sf's modes
        shared = umask == ownership.SHARED_UMASK
        runs.make_subdirs(args.run_dir, ownership.SHARED_DIR if shared else ownership.PRIVATE_DIR, exist_ok=True)
    except (OSError, SpecError) as exc:
        log(f"refusing to run: {exc}")
        return 2
    try:
        contract = read_contract(args)
    except UnreadableContract as exc:
        return refuse_contract(args.run_dir, str(exc))
    sup = Supervisor(contract, args.run_dir, preflight=args.preflight)

    def on_term(signum, _frame):
        if sup.ended:
            sys.exit(128 + signum)
        ending = sup.slurm_ending() if signum == signal.SIGTERM else None
        if ending:
            sys.exit(sup.end_by_slurm(ending, signum))
        sup.finish(128 + signum, f"terminated by signal {signal.Signals(signum).name} during phase {sup.stage}",
                   signal=signal.Signals(signum).name)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the batch script's requeue trap handles it
    try:
        return sup.run()
    except PortsTaken as exc:  # another user's or program's ports: the reason says which, no traceback
        return sup.fail(str(exc), rc=1)
    except Exception as exc:  # a bug or a broken allocation: still leave a reason behind
        import traceback

        traceback.print_exc()
        return sup.fail(f"supervisor error during phase {sup.stage}: {exc.__class__.__name__}: {exc}", rc=1)
