"""The Plan: everything compile decides, and everything render and the job need.

compile.compile_plan(spec, site, run_dir) -> Plan is pure; render.render_script(plan, site)
-> str is pure. A plan is compiled once, against a placeholder run dir, and bound to its
real run dir by `with_run_dir` once the run exists (launcher.submit.pipeline). It is written into
the run directory (plan.json, with the job contract of launcher.render.script.job_contract under
"job"), which the job itself reads once (launcher.injob.contract.Contract: this Plan and
"job": runtime, Ray's address/ports/barrier, requeue bounds), and `sf status`, `sf eval`
and `sf export` read too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

# plan.json's layout (written by launcher.render.script.plan_json as "plan_format"). The job
# side reads no other (launcher.injob.contract): a run requeued after sf was upgraded in place
# must not run on fields its plan lacks (a plan from before `verl_pools` would place a
# teacher's rollout servers with the actor). Raise it when the job side reads plan.json anew.
PLAN_FORMAT = 2

# The progress watchdog's defaults (launcher/injob/watchdog.py), stated here once: the site
# file, the spec, the Plan and the job's contract all fall back to these.
HANG_TIMEOUT_S = 1800  # NeMo-RL's heartbeat is 450 s; RL steps with long rollouts take minutes
FIRST_STEP_TIMEOUT_S = 3600  # verl's start on 8 x H200 took about 200 s to the first step


@dataclass(frozen=True)
class Pool:
    """One group of identical nodes. Pool i becomes het group i of the Slurm job."""

    name: str  # "train", "teach", "reward"
    series: str  # a GPU series of the site file, e.g. "h200" or "fake"
    nodes: int
    gpus_per_node: int
    het_group: int
    roles: tuple[str, ...] = ()  # e.g. ("actor", "rollout") or ("teacher",)
    # allocated beside `nodes`, kept out of verl's topology and Ray until a restart in place
    # swaps one in for a node that died (launcher/injob/heal.py)
    spare_nodes: int = 0

    @classmethod
    def from_dict(cls, data: dict) -> "Pool":
        """A pool as plan.json (and the job's SF_JOB) hold it: `dataclasses.asdict`'s dict."""
        return cls(**{**data, "roles": tuple(data.get("roles", ()))})


@dataclass(frozen=True)
class SlurmOptions:
    """Directives that come from the spec and the site (never free text)."""

    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    partition: str | None = None  # overrides the series' partition for every pool
    exclusive: bool = False
    requeue: bool = True
    max_requeues: int = 3
    signal_lead_s: int = 300  # --signal=B:USR1@<lead>
    # the progress watchdog (launcher/injob/heal.py): a hang after hang_timeout_s without a
    # training step (or 5 x the median step time when longer; 0: off), first_step_timeout_s
    # before the first one
    hang_timeout_s: int = HANG_TIMEOUT_S
    first_step_timeout_s: int = FIRST_STEP_TIMEOUT_S
    # restarts of Ray and the driver inside the allocation (a hang, a node's or the driver's
    # death) before the job is requeued or fails; 0: none (launcher/injob/heal.py)
    max_restarts_in_place: int = 0
    # scheduler options (launcher.compile.scheduler_options), checked when compiled and rendered
    reservation: str | None = None
    mail_type: str | None = None
    mail_user: str | None = None
    dependency: str | None = None
    exclude: str | None = None
    constraint: str | None = None
    sbatch: tuple[tuple[str, str | None], ...] = ()  # allowlisted long options: (key, value or None)
    # health check before training; its suspect nodes are excluded and the job requeued
    exclude_bad_nodes: bool = False


@dataclass(frozen=True)
class Plan:
    experiment: str  # experiment name (folder under experiments/)
    method: str  # "grpo", "dapo", ..., "sft"
    framework: str  # "verl"
    framework_version: str  # "0.9.1"
    config_name: str  # verl Hydra config: "ppo_trainer" or "sft_trainer_engine"
    launcher: str  # "ray" (main_ppo / main.py on a Ray cluster) or "torchrun" (SFT)
    # argv before the overrides. For torchrun the job inserts the rendezvous flags
    # (--nnodes, --nproc_per_node, --rdzv_*) right after argv[0].
    entry: tuple[str, ...]
    overrides: tuple[str, ...]  # "key=value", in the order passed to verl
    pools: tuple[Pool, ...]
    run_dir: str  # absolute
    checkpoint_dir: str  # absolute, inside run_dir (trainer.default_local_dir)
    slurm: SlurmOptions = SlurmOptions()
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the driver
    paths_to_check: tuple[str, ...] = ()  # model/data paths preflight reads on the nodes
    # what the method needs importable in the runtime (catalog `needs`; launcher/injob/capabilities.py)
    runtime_needs: tuple[str, ...] = ()
    # the method's trainer family (catalog `trainer`: colocated, one-step-off, fully-async) and
    # the verl resource pool each role lands in under it: what the job knows of the method,
    # whatever the entry (a user's main.py runs the method's trainer too)
    trainer: str = "colocated"
    verl_pools: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()  # provenance of each override, parallel to `overrides`
    # the one resolved map (launcher.compile.resolve): verl key -> {value, op, layer, source,
    # field, overrides: [the lower writes it won over]}
    resolved: dict = field(default_factory=dict)

    @property
    def is_hetjob(self) -> bool:
        return len(self.pools) > 1

    def argv(self) -> list[str]:
        return [*self.entry, *self.overrides]

    def with_run_dir(self, run_dir: str) -> "Plan":
        """The same plan in another run dir: every path under the old one moves along
        (the checkpoint dir, the overrides that name it, the environment)."""
        old = self.run_dir

        def moved(text: str) -> str:
            return text.replace(old, run_dir)

        return replace(
            self, run_dir=run_dir, checkpoint_dir=moved(self.checkpoint_dir),
            overrides=tuple(moved(o) for o in self.overrides),
            env=tuple((key, moved(value)) for key, value in self.env),
            resolved=_moved(self.resolved, moved),
        )

    def with_dependency(self, extra: str | None) -> "Plan":
        """The same plan also waiting on `extra` (joined with its own dependency by `,`): a
        job id known only at submit time, such as the export `--model run:RUN` queues."""
        if not extra:
            return self
        dependency = ",".join(d for d in (self.slurm.dependency, extra) if d)
        return replace(self, slurm=replace(self.slurm, dependency=dependency))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        """The Plan of a plan.json (its other keys, such as the job contract "job", are not
        the Plan's)."""
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        data["pools"] = tuple(Pool.from_dict(p) for p in data["pools"])
        slurm = dict(data.get("slurm", {}))
        slurm["sbatch"] = tuple(tuple(kv) for kv in slurm.get("sbatch", ()))
        data["slurm"] = SlurmOptions(**slurm)
        for key in ("entry", "overrides", "paths_to_check", "warnings", "sources", "runtime_needs"):
            data[key] = tuple(data.get(key, ()))
        data["env"] = tuple(tuple(kv) for kv in data.get("env", ()))
        return cls(**data)


def _moved(value, moved):
    """`value` (the resolved map) with every string passed through `moved`."""
    if isinstance(value, str):
        return moved(value)
    if isinstance(value, dict):
        return {k: _moved(v, moved) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, moved) for v in value]
    return value
