"""The job's one contract (issue 21): plan.json read once, and what the job's processes
share, built from it in one place.

  Contract    plan.json as the supervisor reads it, once (`Contract.read`): the Plan (with
              an array task's point applied) and the settings
              `launcher.render.script.job_contract` wrote beside it under "job": the runtime,
              Ray's settings, the requeue bounds, the heal settings
  shown_digest  what the batch script's SF_ENTRY and SF_OVERRIDES show, as one digest: the
              entry and overrides reach the job from plan.json only; a script whose arrays
              differ from it (edited by hand) is refused at job start (`Contract.check_shown`)
  Job         what every process of the job shares (node, barrier, health, preflight,
              verl_main, stacks): the Plan's own pools with the hosts Slurm gave them, the
              head's address and ports, the Ray settings; serialised into SF_JOB by
              `child_env`, read back by `Job.from_env`
  child_env   the ONE function that builds the environment of the job's children: SF_JOB,
              Ray's token, and the variables verl, Ray and a user's driver read

A pool has one encoding, launcher.plan.Pool: plan.json and SF_JOB both hold it as
`dataclasses.asdict` writes it; where it runs is `Job.hosts` (pool name -> hosts).
Standard library only: the supervisor may run on the host's bare python3.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from launcher.plan import FIRST_STEP_TIMEOUT_S, HANG_TIMEOUT_S, PLAN_FORMAT, Plan, Pool

JOB_ENV = "SF_JOB"  # the Job, JSON: every process of the job reads it (Job.from_env)


@dataclass(frozen=True)
class RaySettings:
    """plan.json "job"."ray": how the job's Ray cluster comes up (site values, checked at render)."""

    address_method: str  # loopback | interface | hostname (launcher.injob.address)
    address_prefix: str
    interface: str | None
    port_range: tuple[int, int]
    temp_root: str
    barrier_timeout_s: float
    start_retries: int
    health_check: str = "preflight"  # always: the node health check before every driver
    exclude_bad_nodes: bool = False
    dashboard: bool = False

    @classmethod
    def from_dict(cls, data: dict) -> RaySettings:
        return cls(address_method=data["address_method"], address_prefix=data["address_prefix"],
                   interface=data.get("interface"), port_range=tuple(int(p) for p in data["port_range"]),
                   temp_root=str(data["temp_root"]), barrier_timeout_s=float(data["barrier_timeout_s"]),
                   start_retries=int(data["start_retries"]), health_check=data.get("health_check") or "preflight",
                   exclude_bad_nodes=bool(data.get("exclude_bad_nodes")), dashboard=bool(data.get("dashboard")))


# k x the median step time, when that is longer than hang_timeout_s (not in plan.json)
STEP_FACTOR = 5.0


@dataclass(frozen=True)
class HealSettings:
    """plan.json "job"."heal": the progress watchdog (watchdog.py; 0: off) and restarts in place (heal.py)."""

    hang_timeout_s: float = HANG_TIMEOUT_S
    first_step_timeout_s: float = FIRST_STEP_TIMEOUT_S
    max_restarts_in_place: int = 0
    factor: float = STEP_FACTOR  # the watchdog's limit: at least factor x the median step time

    @classmethod
    def from_dict(cls, data: dict) -> HealSettings:
        default = cls()
        return cls(hang_timeout_s=float(data.get("hang_timeout_s", default.hang_timeout_s)),
                   first_step_timeout_s=float(data.get("first_step_timeout_s", default.first_step_timeout_s)),
                   max_restarts_in_place=int(data.get("max_restarts_in_place", 0)))


class UnreadableContract(Exception):
    """plan.json missing, damaged or of another plan format, or a batch script that shows other
    overrides than it: the job cannot start from it."""


def shown_digest(entry, overrides) -> str:
    """SHA-256 (hex) of the entry's length, then every entry word and override, each ended by
    a NUL byte: what the batch script computes from the words its arrays hold once bash has
    read them (templates/train.sbatch.j2: printf '%s\\0' ... | sha256sum), so quoting and
    whitespace in the script do not count, only the words."""
    words = (str(len(entry)), *entry, *overrides)
    return hashlib.sha256(b"".join(w.encode("utf-8", "surrogateescape") + b"\0" for w in words)).hexdigest()


@dataclass(frozen=True)
class Contract:
    """What the login side decided for this job, as the job reads it: plan.json, once."""

    plan: Plan
    runtime: dict  # the runtime's entry (launcher.runtime.Runtime.from_dict types it)
    ray: RaySettings
    max_requeues: int | None
    requeue_lead: int  # seconds before the end the USR1 trap may requeue; 0: never requeued
    heal: HealSettings

    @classmethod
    def read(cls, run_dir: str) -> Contract:
        """plan.json of `run_dir`; UnreadableContract (one line: the file, why, what to do) when
        it is missing, damaged or of another plan format."""
        path = Path(run_dir) / "plan.json"
        try:
            data = json.loads(path.read_text())
            found = data.get("plan_format", 1)  # plans written before the format was stated: 1
            if found != PLAN_FORMAT:
                raise UnreadableContract(
                    f"{path} is of plan format {found} and this sf's job side reads format {PLAN_FORMAT} "
                    "(sf was changed since the run was submitted): submit the run again with this sf")
            return cls.from_dict(data)
        except UnreadableContract:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"no key {exc}" if isinstance(exc, KeyError) else f"{exc.__class__.__name__}: {exc}"
            raise UnreadableContract(f"{path} cannot be read by the job ({why}): it is damaged or was "
                                     "not written by sf; submit the run again") from None

    @classmethod
    def from_dict(cls, data: dict) -> Contract:
        job = data["job"]
        max_requeues = job.get("max_requeues")
        return cls(plan=Plan.from_dict(data), runtime=dict(job["runtime"]), ray=RaySettings.from_dict(job["ray"]),
                   max_requeues=None if max_requeues is None else int(max_requeues),
                   requeue_lead=int(job.get("requeue_lead") or 0), heal=HealSettings.from_dict(job.get("heal") or {}))

    def check_shown(self, digest: str, *, array: bool = False) -> None:
        """The batch script shows the entry and overrides (SF_ENTRY, SF_OVERRIDES) for people
        and passes only their digest; the job runs plan.json's. UnreadableContract (one line)
        when they differ: a hand edit of the script would otherwise be ignored silently. An
        array task's script shows no overrides (each point's are in the manifest)."""
        if digest == shown_digest(self.plan.entry, () if array else self.plan.overrides):
            return
        if not digest:
            raise UnreadableContract("the batch script passed no digest of its entry and overrides (sha256sum "
                                     "missing on the batch host, or a script not written by this sf): submit the "
                                     "run again with this sf")
        raise UnreadableContract("the batch script's overrides differ from plan.json: edit the experiment and submit "
                                 "again, or put the script's SF_ENTRY and SF_OVERRIDES back as sf wrote them "
                                 "(plan.json holds them; the job runs plan.json's)")

    def at_point(self, point: dict) -> Contract:
        """An array task's point of a sweep manifest (launcher.submit.sweep): its overrides,
        checkpoint dir and paths to check."""
        return replace(self, plan=replace(
            self.plan, overrides=tuple(str(o) for o in point["overrides"]),
            checkpoint_dir=point.get("checkpoint_dir") or "",
            paths_to_check=tuple(str(p) for p in point.get("check_paths", ()))))


@dataclass(frozen=True)
class Job:
    """What every process of the job shares; the supervisor builds it (bringup.Bringup.setup)
    and builds it again when a restart in place moves the head or swaps in a spare."""

    run_dir: str
    job_id: str
    leader: str  # the het leader's id (the plain job id otherwise): what Slurm requeues
    launcher: str  # ray | torchrun
    config_name: str
    pools: tuple[Pool, ...]
    hosts: dict[str, tuple[str, ...]]  # pool name -> its nodes in Ray, in slot order
    spares: dict[str, tuple[str, ...]]  # pool name -> allocated nodes kept out of Ray (heal.py)
    head_node: str
    head: str  # the GCS address, host:port
    ray: RaySettings
    checkpoint_dir: str
    paths_to_check: tuple[str, ...] = ()
    # of paths_to_check, those the supervisor (on the batch host, outside any container) did not
    # find: path -> its part missing there; the preflight tells a wrong path from an unmounted one
    host_missing: dict = field(default_factory=dict)
    entry: tuple[str, ...] = ()  # the driver's argv before the overrides (the preflight reports it)
    overrides: tuple[str, ...] = ()
    verl_pools: dict = field(default_factory=dict)  # role -> verl resource pool (Plan.verl_pools)
    gpu_ids: dict = field(default_factory=dict)  # node -> the GPUs its step sees (after the barrier)

    @property
    def nodes(self) -> list[str]:
        """Every node in Ray, pool by pool: a node's index is its port slot."""
        return [h for p in self.pools for h in self.hosts.get(p.name, ())]

    @property
    def hetjob(self) -> bool:
        return len(self.pools) > 1

    def pool_of(self, node: str) -> Pool | None:
        return next((p for p in self.pools if node in self.hosts.get(p.name, ())), None)

    def gpus_by_host(self) -> dict[str, int]:
        """{host: GPUs its pool asks of every node}: what the GPU identity check and the health
        check's GPU part expect on each host."""
        return {host: pool.gpus_per_node for pool in self.pools for host in self.hosts.get(pool.name, ())}

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        data["pools"] = tuple(Pool.from_dict(p) for p in data["pools"])
        data["ray"] = RaySettings.from_dict(data["ray"])
        for key in ("hosts", "spares"):
            data[key] = {name: tuple(hosts) for name, hosts in data[key].items()}
        for key in ("paths_to_check", "entry", "overrides"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)

    @classmethod
    def from_env(cls, environ=None) -> Job:
        text = (os.environ if environ is None else environ).get(JOB_ENV)
        if not text:
            raise SystemExit(f"{JOB_ENV} is not set: this command runs inside an sf job only")
        return cls.from_json(text)


def child_env(job: Job, base, *, ray_auth: dict, metrics_path: str | None = None, restart_in_place: int = 0,
              driver: bool = False, expires: float | None = None) -> dict:
    """The environment of a child of the supervisor: `base` (the batch step's own: Slurm's,
    the runtime's, the site's) plus
      SF_JOB                  the Job (node, barrier, health, preflight, verl_main, stacks)
      PYTHONUNBUFFERED        every child's output reaches the logs as it happens
      RAY_AUTH_*              the job's Ray token (auth.env_for), for every Ray process
      VERL_FILE_LOGGER_PATH   this attempt's step records (a restart in place writes its own:
                              verl's file logger opens its file with "wb")
      SF_RESTART_IN_PLACE     how many restarts in place came before (a test driver reads it)
    and for the driver (`driver`):
      RAY_ADDRESS             Ray's own: the driver's ray.init() joins the job's cluster
      MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP   verl's save-before-expiry (`expires`)
      FORGE_CLUSTER_*         the topology a user's driver reads (docs/healing.md: inside the job)"""
    env = dict(base)
    env[JOB_ENV] = job.to_json()
    env["PYTHONUNBUFFERED"] = "1"
    env.update(ray_auth)
    if metrics_path:
        env["VERL_FILE_LOGGER_PATH"] = metrics_path
    if restart_in_place:
        env["SF_RESTART_IN_PLACE"] = str(restart_in_place)
    if not driver:
        return env
    first = job.pools[0]
    env.update({
        "FORGE_CLUSTER_NNODES": str(first.nodes),
        "FORGE_CLUSTER_GPUS_PER_NODE": str(first.gpus_per_node),
        "FORGE_CLUSTER_TOTAL_NODES": str(len(job.nodes)),
        "FORGE_CLUSTER_HEAD_ADDRESS": job.head,
        "FORGE_CLUSTER_HEAD_NODE": job.head_node,
        "FORGE_CLUSTER_NODES": ",".join(job.nodes),
        "FORGE_CLUSTER_RUN_DIR": job.run_dir,
    })
    if job.launcher == "ray":
        env["RAY_ADDRESS"] = job.head
    if expires:
        env["MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"] = str(int(expires))
    return env
