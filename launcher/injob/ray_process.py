"""`ray start` as one node's child process: its command line, its environment, its watch
(the line that says Ray runs, the raylet's fatal line), its end (the process group killed and
waited for) and Ray's own logs kept in the run dir."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from launcher.injob import node_logs, ray_start, topology


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
            # Ray's workers bind ports the kernel gives them (0: Ray 2.60 passes port 0 to each
            # worker): Ray hands out a fixed worker range lazily, so another user could take its
            # ports once the head is up and each worker start would then fail
            "--min-worker-port=0", "--max-worker-port=0"]
    if role == "head":
        argv += ["--head", f"--port={ports.gcs}", f"--ray-client-server-port={ports.client_server}"]
        if dashboard:
            argv += ["--include-dashboard=true", f"--dashboard-host={address}", f"--dashboard-port={ports.dashboard}"]
        else:
            argv += [ray_start.DASHBOARD_OFF]
    else:
        argv += [f"--address={head}"]
    return argv


PORT_IN_USE = re.compile(r"address already in use|failed to bind|port .* (is )?(already )?in use", re.I)
# `ray start` refusing the arguments it was given (Ray's parameter checks raise ValueError or
# TypeError, its CLI a usage error): not load, so neither retried nor "submitting again helps".
ARGUMENTS_REFUSED = re.compile(r"(^|\| )(ValueError|TypeError): |Error: (No such option|Invalid value|Got unexpected)")


def arguments_refused(output: str) -> bool:
    """Whether `ray start`'s last lines say it refused its arguments."""
    return bool(ARGUMENTS_REFUSED.search(output))
KILL_WAIT_S = 10.0  # how long a failed try's killed processes may take to be gone
KILL_POLL_S = 0.1
FATAL_POLL_S = 0.5  # how often a starting node looks for its raylet's fatal line
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
    """Ray's own logs of this node into logs/ray/<job>-<node>/ of the run, through the gateway
    (node_logs.keep_ray_logs: a planted logs/ray link is refused, never written through)."""
    node_logs.keep_ray_logs(temp, run_dir, job_id, node, failed_try, RAY_LOG_FILES, RAY_LOG_MAX_BYTES)
