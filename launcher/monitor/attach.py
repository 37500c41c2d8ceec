"""`sf attach` and `sf dashboard`: the way into a running job (pure).

A run's record and events say where its job is: the job id (record.json), the nodes of
every pool in the current attempt (the `allocated` phase), the Ray head's address (the
`head_up` phase), the pools' het groups and roles (plan.json). From those:

  - `target(...)`      which node, which het group (--node NAME, --role head|actor|..., else the head)
  - `shell_argv(...)`  the srun command: an overlapping step of that job on that node
                       (`srun --jobid=J --overlap [--het-group=G] --nodes=1 --ntasks=1
                       --nodelist=NODE [--pty] bash -c SETUP sf-attach [CMD...]`), SETUP
                       exporting the site's and the runtime's environment, SF_RUN_DIR,
                       RAY_ADDRESS and Ray's token (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH=
                       <run>/.ray-auth/<job>.token), activating the runtime, then an
                       interactive bash or CMD
  - `dashboard_line(...)`  the ssh port-forward to the head's Ray dashboard.
  - `enter(argv, ...)` the one call that is not pure: once Slurm's record shows the job is
                       the run's (job_owner), this process becomes that srun.

Every value that reaches SETUP is quoted (render.quote); the argv never passes a shell on
the login node.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from launcher import ray_facts, slurm
from launcher.errors import SpecError
from launcher.monitor import job_owner
from launcher.render.script import quote
from launcher.slurm import srun_argv
from launcher.states import ALLOCATED, HEAD_UP

DASHBOARD_LOCAL_PORT = 8265


@dataclass(frozen=True)
class Where:
    """The current attempt of a running job, as its events tell it."""

    job_id: str  # the job (a hetjob's leader; an array task's own job id, not `<array>_<task>`)
    pools: dict  # pool name -> [hosts] (the latest `allocated` phase)
    het_groups: dict  # pool name -> het group (plan.json)
    roles: dict  # pool name -> [roles] (plan.json)
    head_address: str | None  # "addr:gcs_port" (the latest `head_up` phase), None before Ray is up

    @property
    def hetjob(self) -> bool:
        return len(self.pools) > 1

    @property
    def head_pool(self) -> str:
        return min(self.pools, key=lambda name: self.het_groups.get(name, 0))


def where(record: dict, phases: list[dict], plan: dict | None) -> Where:
    """The job's current attempt from its record, events and plan.json; SpecError when the
    job has not been placed on nodes yet."""
    job_ids = [str(j) for j in record.get("job_ids") or []]
    if not job_ids:
        raise SpecError("run", f"run {record.get('id')} has no job (state {record.get('state')}); nothing to attach to")
    allocated = [i for i, e in enumerate(phases) if e.get("phase") == ALLOCATED and e.get("pools")]
    if not allocated:
        raise SpecError("run", f"run {record.get('id')}: job {job_ids[-1]} has no nodes yet; "
                        "wait for it to start (`sf status`)")
    last = allocated[-1]
    heads = [e.get("address") for e in phases[last:] if e.get("phase") == HEAD_UP and e.get("address")]
    pools = {str(k): [str(h) for h in v] for k, v in phases[last]["pools"].items()}
    plan_pools = {p["name"]: p for p in (plan or {}).get("pools", [])}
    job_id = job_ids[-1]
    leader = str(phases[last].get("leader") or "")
    if "_" in job_id and leader.isdigit():
        # a point of an array sweep (`<array>_<task>`): srun --jobid takes the task's own job
        # id, which is also what its Ray token is named after (SLURM_JOB_ID in the task; the
        # supervisor records it as `leader` when the task is allocated)
        job_id = leader
    return Where(job_id=job_id, pools=pools,
                 het_groups={n: int(plan_pools.get(n, {}).get("het_group", i)) for i, n in enumerate(pools)},
                 roles={n: list(plan_pools.get(n, {}).get("roles", ())) for n in pools},
                 head_address=heads[-1] if heads else None)


def target(w: Where, node: str | None = None, role: str | None = None) -> tuple[str, int | None]:
    """(node name, het group or None for a plain job) for --node / --role (default: the head)."""
    if node and role:
        raise SpecError("--node/--role", "give one of --node and --role, not both")
    if node:
        for pool, hosts in w.pools.items():
            if node in hosts:
                return node, w.het_groups[pool] if w.hetjob else None
        every = ", ".join(h for hosts in w.pools.values() for h in hosts)
        raise SpecError("--node", f"{node!r} is not a node of job {w.job_id}; its nodes: {every}")
    role = role or "head"
    if role == "head":
        pool = w.head_pool
    else:
        pool = next((p for p, roles in w.roles.items() if role in roles), None)
        if pool is None and role in w.pools:
            pool = role  # a pool's name
        if pool is None:
            known = sorted({r for roles in w.roles.values() for r in roles} | {"head"})
            raise SpecError("--role", f"no pool of this run has the role {role!r}; roles: {', '.join(known)}")
    return w.pools[pool][0], w.het_groups[pool] if w.hetjob else None


def setup_script(run_dir: str, w: Where, runtime, site_env=(), token_exists: bool = True) -> str:
    """The shell lines the step runs before the shell (or CMD): environment, runtime."""
    lines = []
    for key, value in [*site_env, *runtime.env]:
        lines.append(f"export {key}={quote(value)}")
    lines += runtime.activate_lines()  # none for a container (its steps enter it through srun)
    lines.append(f"export SF_RUN_DIR={quote(run_dir)}")
    if w.head_address:
        lines.append(f"export RAY_ADDRESS={quote(w.head_address)}")
    if token_exists:
        lines += [f"unset {key}" for key in ray_facts.TOKEN_SHADOWING]  # Ray would read it before the job's token file
        for key, value in ray_facts.token_env(ray_facts.token_path(run_dir, w.job_id)).items():
            lines.append(f"export {key}={quote(value)}")
    lines.append('if [ "$#" -gt 0 ]; then exec "$@"; fi')
    lines.append('echo "sf attach: job $SLURM_JOB_ID, node $SLURMD_NODENAME, run dir $SF_RUN_DIR, '
                 'RAY_ADDRESS=${RAY_ADDRESS:-none}; exit leaves the job running"')
    # An interactive bash reads the user's rc files, which may put another python first (a
    # pyenv shim without ray): its rc file sources ~/.bashrc and then puts the runtime's bin
    # first again, whatever the rc files did.
    lines.append(f'SF_RUNTIME_BIN="$(dirname "$(command -v {quote(runtime.runtime_python())})")"; '
                 "export SF_RUNTIME_BIN")
    lines.append("exec bash --rcfile /dev/fd/3 -i 3<<'SF_RC'\n" + ATTACH_RC + "SF_RC")
    return "\n".join(lines)


ATTACH_RC = """\
if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
PATH="$SF_RUNTIME_BIN:$PATH"
unset RAY_AUTH_TOKEN
exec 3<&-
"""


def shell_argv(run_dir: str, w: Where, runtime, node: str, het_group: int | None, command=(),
               site_env=(), token_exists: bool = True) -> list[str]:
    """The srun command of `sf attach` (interactive with --pty unless a command is given)."""
    script = setup_script(run_dir, w, runtime, site_env, token_exists)
    inner = runtime.wrap(["bash", "-c", script, "sf-attach", *command])
    extra = [f"--jobid={w.job_id}", *runtime.srun_flags()]
    if not command:
        extra.append("--pty")
    return srun_argv(inner, het_group=het_group, nodes=1, ntasks=1, nodelist=node, overlap=True,
                     kill_on_bad_exit=False, extra=extra)


def printable(argv: list[str]) -> str:
    return shlex.join(argv)


def dashboard_line(w: Where, login_host: str, user: str, local_port: int = DASHBOARD_LOCAL_PORT) -> str:
    """`ssh -N -L LOCAL:HEAD:PORT user@login`: the head's dashboard port sits at a fixed
    offset from its GCS port (launcher.ray_facts)."""
    if not w.head_address:
        raise SpecError("run", f"job {w.job_id}: Ray is not up yet (no head_up phase); try again in a moment")
    host, _, gcs = w.head_address.rpartition(":")
    port = ray_facts.dashboard_port(int(gcs))
    return f"ssh -N -L {local_port}:{host}:{port} {shlex.quote(user)}@{shlex.quote(login_host)}"


def enter(argv: list[str], run=None, record: dict | None = None, job_id: str | None = None) -> None:
    """`sf attach`: this process becomes the srun step of `shell_argv` (launcher.slurm), once
    Slurm's record of `job_id` shows it is `run`'s (job_owner.check_jobs: NotTheRunsJob else)."""
    if run is not None and job_id:
        job_owner.check_jobs(run, record or {}, [job_id])
    slurm.exec_srun(argv)
