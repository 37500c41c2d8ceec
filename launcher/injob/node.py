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

import json
import os
import random
import re
import resource
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
from launcher.injob import auth, private, ray_start, ray_tuning, topology
from launcher.injob import gpus as gpus_mod
from launcher.injob import ports as ports_mod
from launcher.injob.contract import Job
from launcher.injob.node_logs import node_log_name, write_line


def port_free(host: str, port: int) -> bool:
    """Whether a listener could bind host:port. SO_REUSEADDR as Ray's gRPC servers set it: a
    port whose last connections are in TIME_WAIT (the head's own earlier try) counts as free,
    a port something listens on (on this address or on 0.0.0.0) does not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


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


def busy_ports(address: str, ports, *, head: bool) -> list[int]:
    """The ports of a node slot that something on this host already holds: every port Ray
    will open (its fixed ones, the head's too when `head`) and the whole worker range, so a
    port another user squats anywhere in the slot skips the slot before Ray starts instead of
    failing a worker after it ran."""
    fixed = [ports.node_manager, ports.object_manager, ports.dashboard_agent_grpc,
             ports.dashboard_agent_listen, ports.metrics_export, ports.runtime_env_agent]
    if head:
        fixed += [ports.gcs, ports.client_server, ports.dashboard, ports.rdzv, ports.dashboard_metrics,
                  ports.autoscaler_metrics]
    wanted = fixed + list(range(ports.min_worker, ports.max_worker + 1))
    return [p for p in wanted if not port_free(address, p)]


def ports_taken_text(address: str, port_range, busy: list[int]) -> str:
    """The reason when no slot of the range is free on a host: the ports seen taken, the fix."""
    return (f"port collision: no port slot of ray.port_range {port_range[0]}-{port_range[1]} is free on {address} "
            f"(last slot tried: {taken_text(busy)}); widen or move ray.port_range in the site file, "
            "or exclude the node")


def taken_text(busy: list[int]) -> str:
    """"port 20001, 20005 taken, port 20001 listened on by gcs_server (pid 4242, ...)": the
    ports seen taken and who holds the first (ports.holder_text)."""
    if not busy:
        return "no port seen taken"
    shown = ", ".join(str(p) for p in busy[:8]) + (f" and {len(busy) - 8} more" if len(busy) > 8 else "")
    first = f"port {busy[0]} " if len(busy) > 1 else ""
    return f"port {shown} taken, {first}{ports_mod.holder_text(busy[0])}"


def wait_for_tcp(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def ray_command() -> list[str]:
    """Ray's CLI through this interpreter: the wrapper runs with the runtime's python, so
    Ray is the runtime's whatever PATH holds (a bundle on PYTHONPATH has no usable bin/).
    launcher.injob.ray_start is Ray's CLI less the head's client server and idle dashboard."""
    return [sys.executable, "-m", ray_start.MODULE]


def ignore_usr2() -> None:
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def ray_version() -> str | None:
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("ray")
    except Exception:  # not installed as a distribution (a bare folder on PYTHONPATH)
        try:
            import ray  # noqa: PLC0415

            return getattr(ray, "__version__", None)
        except Exception:
            return None


def ray_start_argv(*, role: str, node: str, pool: str, address: str, head: str, ports, temp: str,
                   cpus: int, gpus: int, dashboard: bool = False) -> list[str]:
    resources = {topology.pool_resource(pool): topology.TAG_AMOUNT,
                 topology.node_resource(node): topology.TAG_AMOUNT}
    argv = [*ray_command(), "start", "--block", "--disable-usage-stats",
            f"--node-ip-address={address}", f"--temp-dir={temp}",
            f"--num-cpus={cpus}", f"--num-gpus={gpus}",
            f"--resources={json.dumps(resources, separators=(',', ':'))}",
            f"--node-manager-port={ports.node_manager}",
            f"--object-manager-port={ports.object_manager}",
            f"--dashboard-agent-grpc-port={ports.dashboard_agent_grpc}",
            f"--dashboard-agent-listen-port={ports.dashboard_agent_listen}",
            f"--metrics-export-port={ports.metrics_export}",
            f"--runtime-env-agent-port={ports.runtime_env_agent}",
            f"--min-worker-port={ports.min_worker}", f"--max-worker-port={ports.max_worker}"]
    if role == "head":
        argv += ["--head", f"--port={ports.gcs}", f"--ray-client-server-port={ports.client_server}"]
        if dashboard:
            argv += ["--include-dashboard=true", f"--dashboard-host={address}", f"--dashboard-port={ports.dashboard}"]
        else:
            argv += [ray_start.DASHBOARD_OFF]
    else:
        argv += [f"--address={head}"]
    return argv


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
    reservation: private.Reservation | None = None

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


# One Ray node's whole life in the order it happens (signals, checks, port lock dir, start with
# retries, watch, stop, clean up); what the steps share is the NodeStart.
# long: they must run in this order on every ending, which one function keeps visible.
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

    def fail(msg: str) -> int:
        return fail_node(run_dir, node, pool_name, msg)

    temp_root = job.ray.temp_root
    try:
        slot = job.nodes.index(node)
        address = addr_mod.node_address(node, job.ray.address_method, job.ray.address_prefix, job.ray.interface)
    except ValueError as exc:
        return fail(f"cannot set up this node: {exc}")
    try:
        private.check_root(temp_root)
        # the longest Ray temp dir this node can get: <root>/sfXXXXXXXX/r (107-byte socket paths)
        ports_mod.check_temp_dir(private.ray_temp_dir(os.path.join(temp_root, private.PREFIX + "x" * 8)))
    except (private.UnsafeDir, ValueError) as exc:
        return fail(f"cannot set up this node: {exc}")
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
            return fail(f"the Ray head {job.head} never answered")
    if os.environ.get("RAY_AUTH_MODE") == auth.MODE:
        version = ray_version()
        if version and not auth.ray_supports_tokens(version):
            return fail(f"Ray {version} in this runtime has no token authentication (needs Ray >= "
                        f"{'.'.join(map(str, auth.MIN_RAY))}); sf runs every Ray cluster with it: "
                        "ask your site admin for a newer runtime")
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


def pick_ports(*, role, slot, port_range, first_block, head_slot, locks, address, wait_s: float = 0.0):
    """(ports, reservation, None) for a free, reserved (block, slot) of this node, or (None, None,
    why not); a head's reservation is None (the supervisor holds its slot). `wait_s`: how long
    a head's slot may stay busy before that is a collision (a retry's)."""
    if role == "head":
        # The supervisor (on this host) chose and holds the head's slot for the whole job.
        ports = ports_mod.block_ports(first_block, head_slot, port_range)
        busy = busy_ports(address, ports, head=True)
        until = time.monotonic() + wait_s
        while busy and time.monotonic() < until:
            # A retry's head waits for its slot: the failed try's Ray processes, killed, may
            # still hold its ports for a moment (on a loaded host the retry then read them as
            # another program's and failed the job: a port collision with itself).
            time.sleep(HEAD_PORTS_POLL_S)
            busy = busy_ports(address, ports, head=True)
        if busy:
            # Another user's head that drew the same slot and started between the supervisor's
            # check and this one (users' port locks are their own), or another program.
            return None, None, (f"port collision: the head's slot on {address} was taken after the supervisor "
                                f"checked it ({taken_text(busy)}); submit again, or move ray.port_range in the "
                                "site file")
        return ports, None, None
    # A worker's ports only have to be free on its own host: it takes the first slot there that
    # no other job of this user holds (the lock) and no other program uses (the bind check).
    # Slots past SLOTS_PER_JOB start one block further on.
    busy = []
    for block, pslot in ports_mod.candidate_slots(ports_mod.slot_first_block(first_block, slot), slot, port_range):
        reservation = private.reserve(locks, block, pslot)
        if reservation is None:
            continue  # another node of this user is starting or running on this slot here
        ports = ports_mod.block_ports(block, pslot, port_range)
        busy = busy_ports(address, ports, head=False)
        if not busy:
            return ports, reservation, None
        reservation.release()
    return None, None, ports_taken_text(address, port_range, busy)


# Each try in the order it happens (ports, private dir, start turn, `ray start`, its watch),
# then the retry decision, which reads all of the try.
# long: one try's steps stay in one place; what outlives a try is the NodeStart's.
def start_and_watch(start: NodeStart) -> int:
    role, node, job, run_dir, pool_name = start.role, start.node, start.job, start.run_dir, start.pool_name
    retries = job.ray.start_retries
    # A start that fails before Ray says it runs (registration timed out on a loaded host, a
    # port taken meanwhile) is started again, while the barrier still waits for it: a worker
    # with fresh ports, the head on its own ports (workers dial them; they wait for it).
    for attempt in range(retries + 1):
        if role == "head" and attempt == 0 and os.environ.get("SF_TEST_TAKE_HEAD_SLOT"):
            take_head_slot_once(run_dir, ports_mod.block_ports(job.port_block, job.head_slot, job.ray.port_range))
        ports, reservation, why = pick_ports(role=role, slot=start.slot, port_range=job.ray.port_range,
                                             first_block=job.port_block, head_slot=job.head_slot, locks=start.locks,
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
        # a start turn on this host (private.start_turn), held until Ray says it runs or this try
        # ends; heads too: many jobs' heads on one shared node are what the 40-job test starts.
        # No deadlock: a worker takes its turn only once its head answers (wait_for_tcp above)
        turns = private.start_turns(os.cpu_count() or 1)
        turn, turn_wait_s = private.start_turn(start.locks, turns, START_TURN_WAIT_S)
        write_line(f"[sf node {node}] {' '.join(argv)}")
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
        runs.record_phase(run_dir, states.NODE_STARTED, node=node, pool=pool_name, role=role, pid=child.pid,
                          wrapper_pid=os.getpid(), address=start.address, slot=start.slot, cpus=start.cpus,
                          gpus=start.gpus, gpu_ids=start.identity["ids"], gpu_id_source=start.identity["source"],
                          gpu_id_error=start.identity.get("error"), nofile=start.nofile, attempt=attempt,
                          gcs_port=ports.gcs if role == "head" else None, temp_dir=temp,
                          port_base=ports.gcs, port_last=ports.max_worker,
                          turn_wait_s=round(turn_wait_s, 2))
        rc, fatal = wait_for_start(child, output, temp, on_started=turn.release)
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
            if not kill_group(child):
                write_line(f"[sf node {node}] the failed try's processes were still there {KILL_WAIT_S:.0f} s "
                           "after SIGKILL: starting again anyway")
            keep_ray_logs(temp, run_dir, job.job_id, node, failed_try=attempt + 1)
            runs.record_phase(run_dir, states.NODE_RETRY, node=node, pool=pool_name, role=role, rc=rc,
                              attempt=attempt + 1, error=fatal or output.last_lines())
            write_line(f"[sf node {node}] ray start failed before Ray ran ({rc}): starting again "
                       f"(try {attempt + 2} of {retries + 1})")
            start.child = None
            # spread out: the nodes that failed together (a loaded host) must not all retry together
            time.sleep((RETRY_PAUSE_S + random.uniform(0, RETRY_JITTER_S)) * (attempt + 1))
            continue
        break
    keep_ray_logs(temp, run_dir, job.job_id, node)
    # Failing before Ray ran, after the retries, is what a loaded host does (retrying helps);
    # Ray ending after it ran is a node or a process dying (look at the node's logs first);
    # a port another process took between the check and Ray's bind is a port collision;
    # `ray start` refusing its arguments fails the same way every time.
    error = None if output.started else (fatal or output.last_lines())
    collision = bool(error and PORT_IN_USE.search(error))
    signum = start.signal
    runs.record_phase(run_dir, states.NODE_EXIT, node=node, pool=pool_name, role=role, rc=rc,
                      started=output.started,
                      retry_helps=not output.started and not collision and not refused,
                      port_collision=collision or None,
                      signal=signal.Signals(signum).name if signum else None,
                      error=("port collision: " + error) if collision else error)
    write_line(f"[sf node {node}] ray start exited with {rc}"
               + (f" after {signal.Signals(signum).name}" if signum else ""))
    return rc if rc and rc > 0 else 1


PORT_IN_USE = re.compile(r"address already in use|failed to bind|port .* (is )?(already )?in use", re.I)
# `ray start` refusing the arguments it was given (Ray's parameter checks raise ValueError or
# TypeError, its CLI a usage error): not load, so neither retried nor "submitting again helps".
ARGUMENTS_REFUSED = re.compile(r"(^|\| )(ValueError|TypeError): |Error: (No such option|Invalid value|Got unexpected)")


def arguments_refused(output: str) -> bool:
    """Whether `ray start`'s last lines say it refused its arguments."""
    return bool(ARGUMENTS_REFUSED.search(output))


SLURM_STOP_GRACE_S = 2.0  # Ray's time to stop on Slurm's SIGTERM before the wrapper kills it
RETRY_PAUSE_S = 2.0
HEAD_PORTS_WAIT_S = 15.0  # a retrying head waits this long for its slot's ports to free
KILL_WAIT_S = 10.0  # how long a failed try's killed processes may take to be gone
KILL_POLL_S = 0.1
HEAD_PORTS_POLL_S = 0.5
RETRY_JITTER_S = 5.0  # up to this much more, times the try's number
FATAL_POLL_S = 0.5  # how often a starting node looks for its raylet's fatal line
# the longest a node waits for a start turn; then it starts anyway, as without turns (a host
# so busy that turns take this long is better served by Ray's own timeouts and sf's retries)
START_TURN_WAIT_S = 60.0
STARTED_MARK = "block forever"  # `ray start --block`, once every process of the node runs
RAY_LOG_FILES = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err", "monitor.log",
                 "ray_process_exit.log", "dashboard.log", "runtime_env_agent.log")
RAY_LOG_MAX_BYTES = 1 << 20  # the last MiB of each file: enough for the cause, bounded per node


# glog's C(ritical) line of the raylet: a failed Ray check, after which the raylet aborts
# ("[2026-12-01 20:29:27,181 C 10683 10683] (raylet) node_manager.cc:3588: ... Check failed:
# ... Timed out waiting for file .../dashboard_agent_listen_port_...": 16 Ray nodes starting at
# once on 2 cores, the dashboard agent wrote its port too late).
RAYLET_FATAL = re.compile(r"^\[[^\]]* C \d+ \d+\] \(raylet\)")


def raylet_fatal(temp: str) -> str | None:
    """The raylet's fatal line in this try's session logs, or None. Pure but for the read."""
    try:
        with open(Path(temp) / "session_latest" / "logs" / "raylet.out", "rb") as f:
            for raw in f:
                line = raw.decode(errors="replace")
                if RAYLET_FATAL.match(line):
                    where, _, what = line.split("(raylet)", 1)[1].strip().partition(" ")
                    # Ray's "An unexpected system state has occurred ... report it" says nothing
                    what = what[what.find("Check failed:"):] if "Check failed:" in what else what
                    return f"raylet aborted: {where} {what.strip()}"[:400]
    except OSError:
        return None
    return None


def wait_for_start(child: subprocess.Popen, output, temp: str, on_started=None) -> tuple[int, str | None]:
    """`ray start`'s exit code, and the raylet's fatal line when that is why it failed. Before
    Ray says it runs, a raylet that aborted ends the try at once: `ray start` itself would wait
    out raylet_start_wait_time_s (30 s, minutes where a site raises it) for a raylet that is
    gone, and the start retry would come too late for the barrier. `on_started` is called
    once, when Ray says it runs (the start turn goes to the next node)."""
    while True:
        try:
            return child.wait(timeout=FATAL_POLL_S), None
        except subprocess.TimeoutExpired:
            pass
        if output.started and on_started:
            on_started()
            on_started = None
        if not output.started and (fatal := raylet_fatal(temp)):
            kill_group(child)
            return 1, fatal


class OutputPump:
    """Copies `ray start`'s output into this node's log and notes whether Ray came up."""

    def __init__(self, child: subprocess.Popen):
        self.started = False
        self._tail: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(child.stdout,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            self._tail = (self._tail + [line.rstrip()])[-5:]
            if STARTED_MARK in line:
                self.started = True

    def join(self) -> None:
        self._thread.join(timeout=5)

    def last_lines(self) -> str:
        return " | ".join(t for t in self._tail if t.strip())[-600:]


def joined(run_dir: str, since: float) -> bool:
    """Whether this attempt's barrier already passed (every node was registered then): an
    all_joined newer than this wrapper (a het group's steps see their own SLURM_JOB_ID, so
    the time, not the id, tells the attempts apart)."""
    return any(e.get("phase") == "all_joined" and e.get("time", 0) >= since for e in runs.read_phases(run_dir))


def kill_group(child: subprocess.Popen, wait_s: float = KILL_WAIT_S) -> bool:
    """Kill what a failed `ray start` left running (it is its own process group's leader) and
    wait, at most `wait_s`, until the group is gone: a retry must not find the killed try's
    processes still holding its ports. Whether the group is gone."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    until = time.monotonic() + wait_s
    try:
        child.wait(timeout=wait_s)  # reap the leader
    except subprocess.TimeoutExpired:
        return False
    while group_running(child.pid):
        if time.monotonic() >= until:
            return False
        time.sleep(KILL_POLL_S)
    return True


def group_running(pgid: int, proc: str = "/proc") -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: they hold no port,
    and Ray's processes, reparented when `ray start` died, are reaped by whoever adopted
    them, which may be slow (or never, where the adopter does not reap)."""
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/stat") as f:
                # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
                state, _ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


def take_head_slot_once(run_dir: str, ports) -> None:
    """Test hook SF_TEST_TAKE_HEAD_SLOT: the first head of the run finds its GCS port listened on,
    as when another user's head drew the same slot and started first. The listener is a child
    of this step: it goes when the head's step ends."""
    try:  # the first head of the run only: the marker made once, 0600, never through a link
        os.close(os.open(Path(run_dir) / ".sf-test-head-slot-taken",
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        return
    squatter = subprocess.Popen([sys.executable, "-c", "import socket, sys, time\n"
                                 "s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
                                 "print('held', flush=True); time.sleep(120)", str(ports.gcs)],
                                stdout=subprocess.PIPE, text=True)
    squatter.stdout.readline()


def _test_nodes(variable: str) -> list[str]:
    return [n for n in os.environ.get(variable, "").split(",") if n]


def raise_nofile() -> int | None:
    """Open files up to the hard limit (Ray's large-cluster guide: >= 65535; one raylet holds
    a socket per worker and peer). Returns the soft limit now in force."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ValueError, OSError):
        return None


def ray_env(environ) -> dict:
    """Ray's environment: usage stats off; GPU variables verl accepts (the GCS and RPC
    settings by cluster size are ray_tuning's)."""
    env = dict(environ)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if env.get("CUDA_VISIBLE_DEVICES") or env.get("HIP_VISIBLE_DEVICES"):
        # Slurm may set ROCR_VISIBLE_DEVICES too (gres.conf without Flags=nvidia_gpu_env);
        # verl's workers, which inherit the raylet's environment, refuse to start with both.
        env.pop("ROCR_VISIBLE_DEVICES", None)
    return env


def ray_port_env(env: dict, ports) -> dict:
    """The head's two metrics servers on the slot's own ports instead of Ray's fixed ones."""
    return {**env, "DASHBOARD_METRIC_PORT": str(ports.dashboard_metrics),
            "AUTOSCALER_METRIC_PORT": str(ports.autoscaler_metrics)}


def keep_ray_logs(temp: str, run_dir: str, job_id: str, node: str, failed_try: int | None = None) -> None:
    """Ray's own logs of this node (raylet, GCS, process exits) into the run dir before the
    node-local temp dir goes: the last RAY_LOG_MAX_BYTES of each, logs/ray/<job>-<node>/
    (a start that failed and is tried again: <job>-<node>-try<N>/, its raylet's own error)."""
    src = Path(temp) / "session_latest" / "logs"
    if not src.is_dir():
        return
    dest = Path(run_dir) / "logs" / "ray" / (f"{job_id}-{node}" + (f"-try{failed_try}" if failed_try else ""))
    try:
        dest.mkdir(parents=True, exist_ok=True)
        names = [p for p in src.iterdir() if p.name in RAY_LOG_FILES or p.name.startswith("python-core-driver")]
        for path in sorted(names)[:20]:
            with open(path, "rb") as fi:
                fi.seek(max(0, path.stat().st_size - RAY_LOG_MAX_BYTES))
                (dest / path.name).write_bytes(fi.read())
    except OSError as exc:  # a log copy is never a reason to fail
        write_line(f"[sf node {node}] cannot keep Ray's logs: {exc}")
