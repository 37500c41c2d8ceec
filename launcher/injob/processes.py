"""The processes of the job the supervisor holds (each a Step: its Popen and what it is), how
they start (an srun step, or a runtime process on the batch host), with the environment
contract.child_env builds, and how they stop. Stdlib only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

from launcher import slurm
from launcher.injob import auth, json_lines, ray_tuning
from launcher.injob.attempt import Attempt
from launcher.injob.contract import Job, child_env
from launcher.injob.record_keeper import log

TERM_GRACE_S = 8
STOP_GRACE_S = 20  # Ray stops in a few seconds; the node steps end by themselves in that time
STEPS_GONE_S = 30
# what a step is: its end means something else for each (launcher.injob.watch)
KINDS = ("node", "barrier", "health", "driver")


@dataclass
class Step:
    """A live process of the job."""

    name: str  # the srun step's name (or "driver", "barrier", ...)
    popen: subprocess.Popen
    kind: str  # one of KINDS
    pool: str | None = None  # a node step's pool
    hosts: list[str] = field(default_factory=list)  # where it runs
    seen: bool = False  # a checking step's (barrier, health) result was read


def gpu_env_wrapper(argv: list[str]) -> list[str]:
    """Run argv with ROCR_VISIBLE_DEVICES dropped when CUDA/HIP devices are set.

    Slurm 22.05 without gres.conf `Flags=nvidia_gpu_env` sets ROCR_VISIBLE_DEVICES beside
    CUDA_VISIBLE_DEVICES in every GPU step, and verl's Worker refuses to start with both
    ("Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set"; seen
    on the H200). slurmstepd sets them per step, so srun's environment cannot drop it."""
    script = ('if [ -n "${CUDA_VISIBLE_DEVICES:-}${HIP_VISIBLE_DEVICES:-}" ]; then unset ROCR_VISIBLE_DEVICES; fi; '
              'exec "$@"')
    return ["sh", "-c", script, "sf-gpu-env", *argv]


def last_json(popen: subprocess.Popen, rc: int) -> dict:
    """The JSON line a checking step (barrier, health) printed last (json_lines.last_object), or
    why there is none."""
    out = popen.stdout.read().decode(errors="replace") if popen.stdout else ""
    result = json_lines.last_object(out)
    return result if result is not None else {"ok": False, "error": f"exited {rc} without a result: {out[-500:]}"}


def signal_steps(steps: list[Step], signum: int, grace: float, kill: bool = False) -> None:
    """Send `signum` to the live steps, wait up to `grace` seconds for them together, then
    SIGKILL what is left when `kill` (else leave it to the caller's next step)."""
    live = [s for s in steps if s.popen.poll() is None]
    for step in live:
        try:
            step.popen.send_signal(signum)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for step in live:
        try:
            step.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if kill:
                step.popen.kill()


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


class Processes:
    """The live steps of this start and the environment every child gets. `runtime`, `plan`,
    `job` and `hetjob` are the attempt's (stacks.save and capabilities read them here)."""

    def __init__(self, attempt: Attempt):
        self.attempt = attempt
        self.steps: list[Step] = []  # the live processes of this start

    @property
    def runtime(self):
        return self.attempt.runtime

    @property
    def plan(self):
        return self.attempt.plan

    @property
    def job(self) -> Job:
        return self.attempt.job

    @property
    def hetjob(self) -> bool:
        return self.attempt.hetjob

    def child_env(self, driver: bool = False, job: Job | None = None) -> dict:
        """The environment of a child (contract.child_env: the one place it is built)."""
        a = self.attempt
        job = job or a.job  # Ray's settings for the job's size; no token source that would win over its own
        base = ray_tuning.apply(auth.unshadowed(os.environ), len(job.nodes), os.cpu_count() or 1)
        return child_env(job, base, ray_auth=auth.env_for(a.token) if a.token else {},
                         metrics_path=a.metrics_path, restart_in_place=a.restarts_in_place, driver=driver,
                         expires=a.expires_ts)

    def srun(self, name, argv, *, kind, pool=None, hosts=(), stdout=None, **kw) -> subprocess.Popen:
        env = kw.pop("env", None) or self.child_env()
        flags = list(kw.pop("extra", ())) + self.runtime.srun_flags()
        popen = slurm.srun_popen(self.runtime.wrap(argv), env=env, extra=flags, stdout=stdout,
                                 stderr=subprocess.STDOUT if stdout else None, **kw)
        self.steps.append(Step(name, popen, kind, pool, list(hosts)))
        return popen

    def local(self, name, argv, *, kind, env=None, stdout=None) -> subprocess.Popen:
        """A runtime process on the batch host (directly, or a one-task overlap step)."""
        local = self.runtime.local_argv(argv)
        if local is None:
            return self.srun(name, argv, kind=kind, env=env, stdout=stdout, het_group=0 if self.hetjob else None,
                             nodes=1, ntasks=1, nodelist=self.job.head_node, overlap=True)
        popen = subprocess.Popen(local, env=env or self.child_env(), stdout=stdout, stdin=subprocess.DEVNULL)
        self.steps.append(Step(name, popen, kind, None, [self.job.head_node]))
        return popen

    def here(self, name, argv, *, kind, env) -> subprocess.Popen:
        """A process of this host's own (the test hook's driver), not through the runtime."""
        popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        self.steps.append(Step(name, popen, kind, None, [self.job.head_node]))
        return popen

    def of_kind(self, kind: str) -> list[Step]:
        return [s for s in self.steps if s.kind == kind]

    def kill_driver(self) -> None:
        for step in self.of_kind("driver"):
            if step.popen.poll() is None:
                step.popen.kill()

    def stop_nodes(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ask every node step to stop Ray and end by itself (SIGUSR2, which srun forwards
        to its tasks): the steps end with 0, not CANCELLED by Slurm with 'Killed' tasks."""
        signal_steps(self.of_kind("driver"), signal.SIGTERM, 0)
        signal_steps(self.of_kind("node"), signal.SIGUSR2, grace_s)

    def terminate(self) -> None:
        signal_steps(self.steps, signal.SIGTERM, TERM_GRACE_S, kill=True)

    def stop_all(self, grace_s: float = STOP_GRACE_S) -> None:
        """Every node step stopped and gone: each node stops Ray and keeps its logs, as at the end
        of a job (what has not ended after `grace_s` is terminated)."""
        self.stop_nodes(grace_s)
        self.terminate()
        self.steps = []
        wait_steps_gone(self.attempt.leader)
