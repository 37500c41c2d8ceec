"""One Ray node: run by every task of the node sruns (`python -m launcher.injob node`).

Reads the job (SF_JOB: launcher.injob.contract.Job), finds its Slurm node name
(SLURMD_NODENAME, never the hostname: emulated nodes share one), its slot in the job, its
ports, temp dir and address, then runs
`ray start --block` as a child with the CPUs and GPUs Slurm gave this step, tagged with
its pool and its node name. Ray is started through this very interpreter (the runtime's
python, `python -m launcher.injob.ray_start`: Ray's CLI without the two head processes sf
never uses), never a `ray` script found on PATH, whose shebang may name another Python.
It records node_started (with the ray start pid and the UUIDs of the GPUs the step sees)
and node_exit phases, and exits non-zero when Ray ends on its own: a Ray node ending while
the job lives is a failure, and srun --kill-on-bad-exit then ends the group's step.

SIGUSR2 is the supervisor's "the job is done" (srun forwards it to the task): Ray is
stopped and the wrapper exits 0, so a completed job's steps end cleanly instead of being
cancelled by Slurm.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from launcher import runs, states
from launcher.injob import address as addr_mod
from launcher.injob import auth, private, ray_tuning, raylet_watch, topology
from launcher.injob import gpus as gpus_mod
from launcher.injob import ports as ports_mod
from launcher.injob.contract import Job
from launcher.injob.node_logs import node_log_name, write_line

# The port slot's checks (node_ports) and Ray's process (ray_process), named here too: the
# supervisor, the tests and the benchmarks reach them through this module.
from launcher.injob.node_ports import (  # noqa: F401
    HEAD_PORTS_WAIT_S,
    busy_ports,
    pick_ports,
    port_free,
    ports_taken_text,
    take_head_slot_once,
    taken_text,
)
from launcher.injob.ray_process import (  # noqa: F401
    KILL_WAIT_S,
    PORT_IN_USE,
    OutputPump,
    arguments_refused,
    group_running,
    ignore_usr2,
    keep_ray_logs,
    kill_group,
    raise_nofile,
    ray_command,
    ray_env,
    ray_port_env,
    ray_start_argv,
    ray_version,
    raylet_fatal,
    wait_for_start,
)


def redirect_output(path: Path) -> None:
    """This node's output (the wrapper's and `ray start`'s) into its own file, appended
    across requeues: emulated nodes, and real nodes that share a host name, cannot be told
    apart by srun's %N, so the Slurm node name is in the file name (`sf logs --node`)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:  # keep going with srun's output: a log is no reason to fail
        write_line(f"[sf node] cannot open {path}: {exc}", err=True)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def wait_for_tcp(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


@dataclass
class NodeStart:
    """One Ray node of the job on this host: what its start needs (set once by main) and what
    its life holds (the `ray start` child, the signal that ends it, its private dir and port
    reservation), which the start and its retries, the signal handler and the clean-up share."""
    role: str
    node: str
    pool_name: str
    job: Job
    slot: int  # the node's index in the job: the port slot it tries first
    address: str
    locks: str | None  # this user's port lock dir on this host (None: bind checks only)
    cpus: int | None
    gpus: int | None
    env: dict
    identity: dict  # the GPUs this step sees (gpus.identify)
    nofile: int | None
    deadline: float  # monotonic: no retry starts after the barrier would give up
    t_start: float  # wall clock: an all_joined newer than this is this attempt's
    child: subprocess.Popen | None = None
    stopping: bool = False  # the supervisor's "job done" (SIGUSR2)
    signal: int | None = None  # Slurm's signal that ends the step (a cancel, a requeue, the time limit)
    timer: threading.Timer | None = None
    private_dir: str | None = None
    reservation: private.Reservation | None = None  # the locks on its span's ports (a worker's)

    @property
    def run_dir(self) -> str:
        return self.job.run_dir

    def fail(self, msg: str, retry_helps: bool = False, **detail) -> int:
        """This node cannot start: say so in its log and in the run's record."""
        return fail_node(self.run_dir, self.node, self.pool_name, msg, retry_helps, **detail)

    def forward(self, signum, _frame) -> None:
        """Slurm's signals and the supervisor's SIGUSR2, handed on to `ray start`."""
        if signum == signal.SIGUSR2:
            self.stopping = True
            signum = signal.SIGTERM
        elif not self.stopping:
            self.signal = signum
        if self.child is None:
            sys.exit(0 if self.stopping else 128 + signum)
        try:
            self.child.send_signal(signum)
        except ProcessLookupError:
            pass
        if self.signal and not self.timer:
            # Slurm SIGKILLs the step KillWait seconds after its SIGTERM (5 s on the dev
            # cluster): Ray gets a moment to stop, then goes, so its logs are kept and its
            # private dir removed before that.
            self.timer = threading.Timer(SLURM_STOP_GRACE_S, kill_group, args=(self.child,))
            self.timer.daemon = True
            self.timer.start()

    def hold(self, reservation: private.Reservation | None) -> None:
        """Keep a worker's new port reservation, releasing an earlier try's."""
        if reservation is not None:
            if self.reservation:
                self.reservation.release()
            self.reservation = reservation

    def release(self) -> None:
        """What this node holds on the host: its private dir and its port reservation."""
        if self.private_dir:
            private.remove_private_dir(self.private_dir)
        if self.reservation:
            self.reservation.release()


def fail_node(run_dir: str, node: str, pool_name: str, msg: str, retry_helps: bool = False, **detail) -> int:
    write_line(f"[sf node {node}] {msg}", err=True)
    runs.record_phase(run_dir, states.NODE_EXIT, node=node, pool=pool_name, rc=1, error=msg,
                      retry_helps=retry_helps, **detail)
    return 1


# One Ray node's whole life in the order it happens (signals, the host's checks, start with
# retries, watch, stop, clean up); what the steps share is the NodeStart.
def main(role: str) -> int:
    # The supervisor's "job done" may come before Ray runs (a quick preflight): end cleanly.
    signal.signal(signal.SIGUSR2, lambda *_: sys.exit(0))
    job = Job.from_env()
    node = topology.node_name()
    run_dir = job.run_dir
    pool = job.pool_of(node)
    pool_name = pool.name if pool else "?"
    redirect_output(Path(run_dir) / "logs" / node_log_name(job.job_id, role, pool_name, node))

    skip = _test_nodes("SF_TEST_SKIP_NODE")
    if node in skip or (role == "worker" and "@workers" in skip):
        # Test hook: this node never joins (a node whose Ray cannot start).
        runs.record_phase(run_dir, states.NODE_SKIPPED, node=node, pool=pool_name)
        write_line(f"[sf node {node}] SF_TEST_SKIP_NODE: not starting Ray")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        while True:
            signal.pause()

    prepared = prepare(job, node, role)
    if isinstance(prepared, str):
        return fail_node(run_dir, node, pool_name, prepared)
    slot, address, locks = prepared
    nofile = raise_nofile()
    if warning := ray_tuning.nofile_warning(nofile, len(job.nodes)):
        write_line(f"[sf node {node}] {warning}")
    start = NodeStart(
        role=role, node=node, pool_name=pool_name, job=job, slot=slot, address=address, locks=locks,
        cpus=topology.cpus_given(), gpus=topology.gpus_given(), identity=gpus_mod.identify(node), nofile=nofile,
        env=ray_tuning.apply(ray_env(os.environ), len(job.nodes), os.cpu_count() or 1),  # by cluster size
        deadline=time.monotonic() + job.ray.barrier_timeout_s, t_start=time.time())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2):
        signal.signal(sig, start.forward)
    try:
        rc = start_and_watch(start)
    finally:
        start.release()
    if start.signal and rc != 0:
        # Ended by Slurm's signal: end by that signal too, so the step reads as cancelled
        # (or requeued) and not as a failure of this node.
        signal.signal(start.signal, signal.SIG_DFL)
        os.kill(os.getpid(), start.signal)
    return rc


def prepare(job: Job, node: str, role: str) -> tuple[int, str, str | None] | str:
    """What this node's start needs from its host, checked: (its slot in the job, its Ray
    address, this user's port lock dir or None), or why the node cannot start."""
    temp_root = job.ray.temp_root
    try:
        slot = job.nodes.index(node)
        address = addr_mod.node_address(node, job.ray.address_method, job.ray.address_prefix, job.ray.interface)
    except ValueError as exc:
        return f"cannot set up this node: {exc}"
    try:
        private.check_root(temp_root)
        # the longest Ray temp dir this node can get: <root>/sfXXXXXXXX/r (107-byte socket paths)
        ports_mod.check_temp_dir(private.ray_temp_dir(os.path.join(temp_root, private.PREFIX + "x" * 8)))
    except (private.UnsafeDir, ValueError) as exc:
        return f"cannot set up this node: {exc}"
    removed = private.sweep_stale(temp_root)
    if removed:
        write_line(f"[sf node {node}] removed {len(removed)} temp dir(s) of earlier jobs that were killed")
    locks = private.lock_dir(temp_root)
    if locks is None:
        write_line(f"[sf node {node}] warning: no private lock dir under {temp_root}: ports are not reserved "
                   "against this user's other jobs (the bind check still runs)")
    if role == "worker":
        host, _, port = job.head.rpartition(":")
        if not wait_for_tcp(host, int(port), job.ray.barrier_timeout_s):
            return f"the Ray head {job.head} never answered"
    if os.environ.get("RAY_AUTH_MODE") == auth.MODE:
        version = ray_version()
        if version and not auth.ray_supports_tokens(version):
            return (f"Ray {version} in this runtime has no token authentication (needs Ray >= "
                    f"{'.'.join(map(str, auth.MIN_RAY))}); sf runs every Ray cluster with it: "
                    "ask your site admin for a newer runtime")
    return slot, address, locks


# Each try in the order it happens (ports, private dir, `ray start`, its watch), then the retry
# decision, which reads all of the try; what outlives a try is the NodeStart's.
def start_and_watch(start: NodeStart) -> int:
    role, node, job, run_dir, pool_name = start.role, start.node, start.job, start.run_dir, start.pool_name
    retries = job.ray.start_retries
    # A start that fails before Ray says it runs (registration timed out on a loaded host, a
    # port taken meanwhile) is started again, while the barrier still waits for it: a worker
    # with fresh ports, the head on its own ports (workers dial them; they wait for it).
    head_base = int(job.head.rpartition(":")[2])  # the head's GCS port: the first of its span
    for attempt in range(retries + 1):
        if role == "head" and attempt == 0 and os.environ.get("SF_TEST_TAKE_HEAD_SLOT"):
            take_head_slot_once(run_dir, ports_mod.span_ports(head_base))
        ports, reservation, why = pick_ports(role=role, slot=start.slot, port_range=job.ray.port_range,
                                             head_base=head_base, locks=start.locks,
                                             address=start.address, wait_s=HEAD_PORTS_WAIT_S if attempt else 0.0)
        if ports is None:  # the supervisor's head may draw another slot (heal.RedrawHeadSlot)
            return start.fail(why, port_collision=True)
        start.hold(reservation)
        if start.private_dir:  # an earlier try's
            private.remove_private_dir(start.private_dir)
        try:
            start.private_dir = private.make_private_dir(job.ray.temp_root, job.job_id, node)
        except (OSError, private.UnsafeDir) as exc:
            return start.fail(f"cannot make a private Ray temp dir under {job.ray.temp_root}: {exc}")
        temp = private.ray_temp_dir(start.private_dir)
        argv = ray_start_argv(role=role, node=node, pool=pool_name, address=start.address, head=job.head,
                              ports=ports, temp=temp, cpus=start.cpus, gpus=start.gpus, dashboard=job.ray.dashboard)
        if role == "worker" and attempt < int(os.environ.get("SF_TEST_FAIL_STARTS") or 0):
            # Test hook: a worker's first N starts fail the way a start under load does.
            argv = [sys.executable, "-c", "print('sf test: simulated start failure: Deadline Exceeded'); "
                    "raise SystemExit(1)"]
        launched = launch(start, argv, ports, temp, attempt)
        if isinstance(launched, int):
            return launched
        child, output, turn = launched
        watch = raylet_watch.watch(child.pid, run_dir, node, pool_name)  # a stopped raylet: named within 30 s
        rc, fatal = wait_for_start(child, output, temp, on_started=turn.release)
        watch.stop()
        turn.release()  # a no-op when Ray said it runs: the turn went then
        output.join()
        if start.stopping:
            keep_ray_logs(temp, run_dir, job.job_id, node)
            # `ray start --block` exits 1 on the SIGTERM that stops it: Ray's code, not this
            # node's result (printed as rc= after a completed job, it read as a failure)
            runs.record_phase(run_dir, states.NODE_STOPPED, node=node, pool=pool_name, role=role, ray_exit=rc)
            write_line(f"[sf node {node}] the job is done: Ray stopped ({rc})")
            return 0
        refused = arguments_refused(output.last_lines())
        if (rc > 0 and not output.started and not start.signal and not joined(run_dir, start.t_start)
                and not refused and attempt < retries and time.monotonic() < start.deadline - RETRY_PAUSE_S * 4):
            # `ray start` gave up by itself before Ray ran (not killed, and the job's barrier
            # has not seen every node): clear what that try left and start again.
            retry_later(start, child, temp, rc, fatal or output.last_lines(), attempt)
            continue
        break
    return record_exit(start, temp, rc, fatal, output, refused)


def launch(start: NodeStart, argv: list[str], ports, temp: str, attempt: int):
    """`ray start` of this try, in a start turn of this host, recorded (node_started): (the
    child, its OutputPump, the turn), or this node's exit code when it cannot be started."""
    # a start turn on this host (private.start_turn), held until Ray says it runs or this try
    # ends; heads too: many jobs' heads on one shared node are what the 40-job test starts.
    # No deadlock: a worker takes its turn only once its head answers (wait_for_tcp in prepare)
    turns = private.start_turns(os.cpu_count() or 1)
    turn, turn_wait_s = private.start_turn(start.locks, turns, START_TURN_WAIT_S)
    write_line(f"[sf node {start.node}] {' '.join(argv)}")
    try:
        # srun hands SIGUSR2 to every process of the step: Ray's own processes ignore it
        # (the disposition survives exec), so only this wrapper acts, stopping Ray by SIGTERM.
        child = subprocess.Popen(argv, env=ray_port_env(start.env, ports), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, preexec_fn=ignore_usr2, start_new_session=True)
    except OSError as exc:  # no such interpreter, no permission: say so, do not hang the barrier
        turn.release()
        return start.fail(f"cannot start Ray ({' '.join(argv[:3])}): {exc.__class__.__name__}: {exc}")
    start.child = child
    output = OutputPump(child)
    runs.record_phase(start.run_dir, states.NODE_STARTED, node=start.node, pool=start.pool_name, role=start.role,
                      pid=child.pid, wrapper_pid=os.getpid(), address=start.address, slot=start.slot,
                      cpus=start.cpus, gpus=start.gpus, gpu_ids=start.identity["ids"],
                      gpu_id_source=start.identity["source"], gpu_id_error=start.identity.get("error"),
                      nofile=start.nofile, attempt=attempt, gcs_port=ports.gcs if start.role == "head" else None,
                      temp_dir=temp, port_base=ports.gcs, port_last=ports.last,
                      turn_wait_s=round(turn_wait_s, 2))
    return child, output, turn


def retry_later(start: NodeStart, child: subprocess.Popen, temp: str, rc: int, error: str, attempt: int) -> None:
    """A try that failed before Ray ran: its processes killed and waited for, its Ray logs kept
    (logs/ray/<job>-<node>-try<N>/), node_retry recorded, then a pause before the next try."""
    node, retries = start.node, start.job.ray.start_retries
    if not kill_group(child):
        write_line(f"[sf node {node}] the failed try's processes were still there {KILL_WAIT_S:.0f} s "
                   "after SIGKILL: starting again anyway")
    keep_ray_logs(temp, start.run_dir, start.job.job_id, node, failed_try=attempt + 1)
    runs.record_phase(start.run_dir, states.NODE_RETRY, node=node, pool=start.pool_name, role=start.role, rc=rc,
                      attempt=attempt + 1, error=error)
    write_line(f"[sf node {node}] ray start failed before Ray ran ({rc}): starting again "
               f"(try {attempt + 2} of {retries + 1})")
    start.child = None
    # spread out: the nodes that failed together (a loaded host) must not all retry together
    time.sleep((RETRY_PAUSE_S + random.uniform(0, RETRY_JITTER_S)) * (attempt + 1))


def record_exit(start: NodeStart, temp: str, rc: int, fatal: str | None, output, refused: bool) -> int:
    """Ray's end on this node, for good: its logs kept, node_exit recorded; the exit code."""
    keep_ray_logs(temp, start.run_dir, start.job.job_id, start.node)
    # Failing before Ray ran, after the retries, is what a loaded host does (retrying helps);
    # Ray ending after it ran is a node or a process dying (look at the node's logs first);
    # a port another process took between the check and Ray's bind is a port collision;
    # `ray start` refusing its arguments fails the same way every time.
    error = None if output.started else (fatal or output.last_lines())
    collision = bool(error and PORT_IN_USE.search(error))
    signum = start.signal
    runs.record_phase(start.run_dir, states.NODE_EXIT, node=start.node, pool=start.pool_name, role=start.role,
                      rc=rc, started=output.started,
                      retry_helps=not output.started and not collision and not refused,
                      port_collision=collision or None,
                      signal=signal.Signals(signum).name if signum else None,
                      error=("port collision: " + error) if collision else error)
    write_line(f"[sf node {start.node}] ray start exited with {rc}"
               + (f" after {signal.Signals(signum).name}" if signum else ""))
    return rc if rc and rc > 0 else 1


SLURM_STOP_GRACE_S = 2.0  # Ray's time to stop on Slurm's SIGTERM before the wrapper kills it
RETRY_PAUSE_S = 2.0
RETRY_JITTER_S = 5.0  # up to this much more, times the try's number
# the longest a node waits for a start turn; then it starts anyway, as without turns (a host
# so busy that turns take this long is better served by Ray's own timeouts and sf's retries)
START_TURN_WAIT_S = 60.0


def joined(run_dir: str, since: float) -> bool:
    """Whether this attempt's barrier already passed (every node was registered then): an
    all_joined newer than this wrapper (a het group's steps see their own SLURM_JOB_ID, so
    the time, not the id, tells the attempts apart)."""
    return any(e.get("phase") == "all_joined" and e.get("time", 0) >= since for e in runs.read_phases(run_dir))


def _test_nodes(variable: str) -> list[str]:
    return [n for n in os.environ.get(variable, "").split(",") if n]
