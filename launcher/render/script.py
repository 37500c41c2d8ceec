"""Plan + site + runtime -> the sbatch script text (pure but for reading its template:
templates/train.sbatch.j2, or the site's own that extends it; launcher.render.sbatch_template).

One pool -> a plain job; several pools -> one heterogeneous job (`#SBATCH hetjob`
between components), pool i = het group i. Every value that reaches an `#SBATCH` line is
checked against a strict pattern and refused (SpecError naming the field) otherwise;
every value that reaches the shell is quoted (shlex.quote, or $'...' when it holds a
control character such as a newline, so no raw line of user text ever appears), here,
before the template sees it (`_context`: Shell and Sbatch values only). The script shows
the overrides and the entry as bash arrays and passes the supervisor only their digest: the
job reads them from plan.json and refuses a script whose arrays differ (launcher.injob.contract).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import launcher
from launcher import sbatch_values
from launcher.compile import scheduler_options
from launcher.errors import SpecError
from launcher.plan import PLAN_FORMAT, Plan
from launcher.render import logger_env, sbatch_template
from launcher.render.sbatch_template import Sbatch, Shell, quote
from launcher.runtime import Runtime

# Values of the supervisor's arguments (shell words, checked like #SBATCH values).
_IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,32}$")
_PREFIX = re.compile(r"^\d{1,3}(?:\.\d{1,3}){1,2}$")
_POOL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_ROLE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_SWEEP_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,80}$")
_EXPERIMENT = re.compile(r"^[A-Za-z0-9._-]{1,97}$")  # as in the job name sf-<experiment>
_LABEL = re.compile(r"^[A-Za-z0-9._+-]{1,100}$")  # the runtime's framework, version, kind (a comment line)


def array_directive(size: int, max_parallel: int | None = None, indices=None) -> str:
    """`--array=0-(size-1)%K`, or `--array=2,5%K` for some indices (a retry). Pure."""
    size = sbatch_values.whole(size, "sweep.points", 1)
    if indices is None:
        spec = f"0-{size - 1}" if size > 1 else "0"
    else:
        idx = sorted({sbatch_values.whole(i, "sweep.index", 0) for i in indices})
        if not idx or idx[-1] >= size:
            raise SpecError("sweep.index", f"array indices {idx} must lie within 0-{size - 1}")
        spec = ",".join(str(i) for i in idx)
    if max_parallel is not None:
        spec += f"%{sbatch_values.whole(max_parallel, '--max-parallel', 1)}"
    return f"--array={spec}"


def _name_and_output(plan: Plan, pool, first: bool, array: dict | None) -> list[str]:
    """The job's name, its log files and requeue lines (het group 0), or a later het
    component's own name."""
    s = plan.slurm
    d: list[str] = []
    if first:
        # a run's job is named after the run (`sf-<run id>`) and waits for any other job of
        # that name (--dependency=singleton below): two attempts of one run never overlap
        experiment = sbatch_values.name(f"sf-{plan.experiment}", "experiment")  # also in the script's header
        job_name = experiment if array else sbatch_values.name("sf-" + os.path.basename(plan.run_dir), "run_dir")
        d.append("--job-name=" + job_name)
        if array:
            # each task's output moves to its point's run dir once the script knows it
            log = sbatch_values.path(array["sweep_dir"], "sweep_dir") + "/logs/slurm-%A_%a.out"
            d.append(array_directive(array["size"], array.get("max_parallel")))
        else:
            log = sbatch_values.path(plan.run_dir, "run_dir") + "/logs/slurm-%j.out"
        d += [f"--output={log}", f"--error={log}"]
        if s.requeue:
            lead = sbatch_values.whole(s.signal_lead_s, "slurm.signal_lead_s", 1)
            d += ["--requeue", f"--signal=B:USR1@{lead}", "--open-mode=append"]
        else:
            d.append("--no-requeue")
    elif not array:
        # Slurm carries --job-name and --dependency over to the later het components: under
        # one name, component g's singleton would wait for component 0 of its own job forever.
        # Each component gets its own name, so each waits only for its counterpart of another job.
        d.append("--job-name=" + sbatch_values.name(f"sf-{os.path.basename(plan.run_dir)}.g{pool.het_group}",
                                                    "run_dir"))
    return d


def _gpu_directives(series, gpus: int) -> list[str]:
    """A node's GPUs as the series asks for them: --gpus-per-node or --gres=NAME:N."""
    if not gpus:
        return []
    if series.gpu_directive == "gpus-per-node":
        return [f"--gpus-per-node={gpus}"]
    if series.gpu_directive == "gres":
        name = sbatch_values.gres_name(series.gres_name, f"site.series.{series.name}.gres_name")
        return [f"--gres={name}:{gpus}"]
    raise SpecError(f"site.series.{series.name}.gpu_directive",
                    f"{series.gpu_directive!r} is not gres or gpus-per-node")


def _pool_directives(plan: Plan, pool, site, first: bool, array: dict | None = None) -> list[str]:
    """One het group's #SBATCH lines, in the order they are written."""
    if pool.series not in site.series:
        raise SpecError(f"pools.{pool.name}.series", f"unknown GPU series {pool.series!r} in site {site.name}; "
                        f"known: {', '.join(sorted(site.series)) or 'none'}")
    series = site.series[pool.series]
    s = plan.slurm
    d = _name_and_output(plan, pool, first, array)
    account = s.account or site.account
    qos = s.qos or site.qos
    if account:
        d.append("--account=" + sbatch_values.account(account, "slurm.account"))
    if qos:
        d.append("--qos=" + sbatch_values.account(qos, "slurm.qos"))
    d.append("--time=" + sbatch_values.time_limit(s.time or site.time, "slurm.time"))
    partition = s.partition or series.partition
    d.append("--partition=" + sbatch_values.account(partition, "slurm.partition"))
    nodes = sbatch_values.whole(pool.nodes, f"pools.{pool.name}.nodes", 1)
    spares = sbatch_values.whole(pool.spare_nodes, f"pools.{pool.name}.spare_nodes", 0)
    d.append(f"--nodes={nodes + spares}")  # the spares are allocated too, kept out of Ray until needed
    d.append("--ntasks-per-node=1")
    d += _gpu_directives(series, sbatch_values.whole(pool.gpus_per_node, f"pools.{pool.name}.gpus_per_node", 0))
    if series.constraint:
        sbatch_values.constraint(series.constraint, f"site.series.{series.name}.constraint")
        if not s.constraint:  # else joined with the user's constraint (scheduler_options)
            d.append("--constraint=" + series.constraint)
    cpus = sbatch_values.whole(series.cpus_per_node, f"site.series.{series.name}.cpus_per_node", 1)
    d.append(f"--cpus-per-task={cpus}")
    if series.mem_per_node:
        d.append("--mem=" + sbatch_values.mem(series.mem_per_node, f"site.series.{series.name}.mem_per_node"))
    if s.exclusive:
        d.append("--exclusive")
    d += scheduler_options.directives(s, first=first, singleton=first and not array,
                                      series_constraint=series.constraint)
    return d


def _env_lines(plan: Plan, site, runtime: Runtime) -> list[str]:
    lines = []
    # A job of many nodes first gets the site's large-cluster env (sf's own Ray tuning by node
    # count is applied in the job, under anything exported here); the site's env may still set any of it.
    large = site.ray.large_cluster_env if sum(p.nodes for p in plan.pools) >= site.ray.large_cluster_min_nodes else ()
    for source, pairs in (("site.ray.large_cluster.env", large), ("site.env", site.env),
                          ("runtime.env", runtime.env), ("env", plan.env)):
        for key, value in pairs:
            sbatch_values.env_key(key, f"{source}.{key}")
            sbatch_values.env_value(key, value, f"{source}.{key}")
            lines.append(f"export {key}={quote(value)}")
    return lines


def _module_lines(site, runtime: Runtime) -> list[str]:
    """The site's modules and a module runtime's: the template's module_loads block."""
    modules = list(site.modules) + list(runtime.script_modules())
    if not modules:
        return []
    return ["type module >/dev/null 2>&1 || source /etc/profile.d/lmod.sh 2>/dev/null "
            "|| source /etc/profile.d/modules.sh 2>/dev/null || true",
            "module load " + " ".join(quote(m) for m in modules)]


def _activate_lines(runtime: Runtime) -> list[str]:
    return runtime.source_lines()  # quoted by the runtime; its modules are in the module_loads block


def _sf_root() -> str | None:
    root = Path(launcher.__file__).resolve().parent.parent
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def job_contract(plan: Plan, site, runtime: Runtime) -> dict:
    """What the job reads from its plan.json beside the Plan (key "job"): the runtime, where and
    how Ray comes up, and the requeue bounds. Pure; every value checked here, once."""
    ray = site.ray
    if ray.address_method not in ("loopback", "interface", "hostname"):
        raise SpecError("site.ray.node_address.method",
                        f"{ray.address_method!r} is not loopback, interface or hostname")
    for pool in plan.pools:
        sbatch_values.check(_POOL, pool.name, "pools.name", "a letter then letters, digits, _ or -")
        for role in pool.roles:
            sbatch_values.check(_ROLE, role, f"pools.{pool.name}.roles", "letters, digits, _-")
    lo, hi = (int(p) for p in ray.port_range)
    if not (1024 <= lo < hi <= 65535):
        raise SpecError("site.ray.port_range", f"{lo}-{hi} must lie within 1024-65535")
    return {
        "runtime": runtime.to_dict(),
        "ray": {
            "address_method": ray.address_method,
            "address_prefix": sbatch_values.check(_PREFIX, ray.address_prefix, "site.ray.node_address.prefix",
                                                  "like 127.0.0"),
            "interface": sbatch_values.check(_IFACE, ray.interface, "site.ray.node_address.interface",
                                             "an interface name") if ray.interface else None,
            "port_range": [lo, hi], "temp_root": str(ray.temp_root),
            "barrier_timeout_s": sbatch_values.whole(int(ray.barrier_timeout_s), "site.ray.barrier_timeout_s", 1),
            "start_retries": sbatch_values.whole(int(ray.start_retries), "site.ray.start_retries", 0),
            # --exclude-bad-nodes needs the check before every driver to find the nodes
            "health_check": "always" if plan.slurm.exclude_bad_nodes else ray.health_check,
            "exclude_bad_nodes": bool(plan.slurm.exclude_bad_nodes),
            "dashboard": bool((site.raw.get("ray") or {}).get("dashboard")),
        },
        "max_requeues": sbatch_values.whole(plan.slurm.max_requeues, "slurm.max_requeues", 0),
        # the USR1 can come up to ~30 s before its lead (slurmctld's timer tick); 0: never requeued
        "requeue_lead": sbatch_values.whole(plan.slurm.signal_lead_s, "slurm.signal_lead_s", 1) + 30
        if plan.slurm.requeue else 0,
        # the progress watchdog (launcher/injob/watchdog.py; 0: off) and restarts in place (heal.py)
        "heal": {"hang_timeout_s": sbatch_values.whole(plan.slurm.hang_timeout_s, "slurm.hang_timeout_s", 0),
                 "first_step_timeout_s": sbatch_values.whole(plan.slurm.first_step_timeout_s,
                                                             "slurm.first_step_timeout_s", 1),
                 "max_restarts_in_place": sbatch_values.whole(plan.slurm.max_restarts_in_place,
                                                              "slurm.max_restarts_in_place", 0)},
    }


def plan_json(plan: Plan, site, runtime: Runtime) -> str:
    """The run's plan.json: the Plan (Plan.from_dict reads it back) and the job contract."""
    return json.dumps({**plan.to_dict(), "plan_format": PLAN_FORMAT, "job": job_contract(plan, site, runtime)},
                      indent=2, default=str) + "\n"


def _supervise_args(plan: Plan, site, runtime: Runtime, array: dict | None = None) -> list[str]:
    job_contract(plan, site, runtime)  # a bad site value fails the render, not the job
    args = ["--run-dir", '"$SF_RUN_DIR"']  # the job reads $SF_RUN_DIR/plan.json
    if array:  # run dir and overrides of the task's point
        args += ["--manifest", '"$SF_MANIFEST"', "--task", '"$SF_TASK"']
    return args


def _pair(args: list[str]) -> list[str]:
    """["--a", "1", "--flag", "--b", "2"] -> ["--a 1", "--flag", "--b 2"] (one option a line)."""
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{args[i]} {args[i + 1]}")
            i += 2
        else:
            lines.append(args[i])
            i += 1
    return lines


def overrides_text(plan: Plan) -> str:
    """overrides.txt: one override per line (a newline inside one is written as \\n)."""
    return "".join(o.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for o in plan.overrides)


def _checked_array(plan: Plan, array: dict | None) -> dict | None:
    if array is None:
        return None
    if plan.is_hetjob:
        raise SpecError("sweep", "Slurm has no arrays of heterogeneous jobs: a multi-pool sweep is "
                        "submitted as one hetjob per point")
    array = {"size": sbatch_values.whole(array.get("size"), "sweep.points", 1),
             "max_parallel": array.get("max_parallel"),
             "sweep_dir": quote(sbatch_values.path(str(array["sweep_dir"]), "sweep_dir")),
             "raw_sweep_dir": str(array["sweep_dir"]),
             "sweep_id": sbatch_values.check(_SWEEP_ID, array.get("sweep_id", "sweep"), "sweep.id", "a run id")}
    array_directive(array["size"], array["max_parallel"])  # checked before anything renders
    return array


def _check_plan(plan: Plan) -> None:
    if not plan.pools:
        raise SpecError("pools", "the plan has no pools")
    groups = sorted(p.het_group for p in plan.pools)
    if groups != list(range(len(plan.pools))):
        raise SpecError("pools", f"het groups must be 0..{len(plan.pools) - 1}, not {groups}")
    if not str(plan.run_dir).startswith("/"):
        raise SpecError("run_dir", f"{plan.run_dir!r} must be absolute")
    if not plan.entry:
        raise SpecError("entry", "the plan has no entry command")


def render_script(plan: Plan, site, runtime: Runtime, *, preflight: bool = False,
                  array: dict | None = None) -> str:
    """The batch script. `array` ({"size", "max_parallel", "sweep_dir", "sweep_id"}) makes it
    a job array over the points of a sweep (launcher.submit.sweep): `plan` is any point's (they
    differ only in overrides and run dirs, which each task reads from manifest.json)."""
    array = _checked_array(plan, array)
    _check_plan(plan)
    components = []
    header_array = array and {**array, "sweep_dir": array["raw_sweep_dir"]}  # the unquoted dir
    for index, pool in enumerate(sorted(plan.pools, key=lambda p: p.het_group)):
        components.append({"pool": pool.name, "het_group": pool.het_group, "nodes": pool.nodes,
                           "spares": sbatch_values.whole(pool.spare_nodes, f"pools.{pool.name}.spare_nodes", 0),
                           "gpus": pool.gpus_per_node, "series": sbatch_values.name(pool.series, "pools.series"),
                           "directives": _pool_directives(plan, pool, site, first=index == 0, array=header_array)})
    supervise = _supervise_args(plan, site, runtime, array)
    if preflight:
        supervise.append("--preflight")
    root = _sf_root()
    label = " ".join(sbatch_values.check(_LABEL, v, "runtime", "letters, digits and ._+- only")
                     for v in (runtime.framework, runtime.version))
    context = _context(dict(
        components=components,
        sf_version=launcher.__version__,
        experiment=sbatch_values.check(_EXPERIMENT, plan.experiment, "experiment", "letters, digits and ._- only"),
        method=sbatch_values.name(plan.method, "method"),
        framework=sbatch_values.name(plan.framework, "framework"),
        framework_version=sbatch_values.name(plan.framework_version, "framework_version"),
        script_name="job.sbatch",
        run_dir=quote(plan.run_dir),
        max_requeues=sbatch_values.whole(plan.slurm.max_requeues, "slurm.max_requeues", 0),
        requeue=plan.slurm.requeue,
        signal_lead_s=sbatch_values.whole(plan.slurm.signal_lead_s, "slurm.signal_lead_s", 1)
        if plan.slurm.requeue else None,
        login_env_unset=sbatch_values.login_env_unset(site.pass_sbatch_env),
        env_lines=_env_lines(plan, site, runtime),
        runtime_label=label + ", " + sbatch_values.check(_LABEL, runtime.kind, "runtime.kind", "a runtime kind"),
        module_lines=_module_lines(site, runtime),
        activate_lines=_activate_lines(runtime),
        sf_root=quote(root) if root else None,
        host_python=quote(runtime.host_python(sys.executable)),
        launcher=sbatch_values.name(plan.launcher, "launcher"),
        entry=[quote(a) for a in plan.entry],
        overrides=[quote(o) for o in plan.overrides],
        array=array and {k: v for k, v in array.items() if k != "raw_sweep_dir"},
        supervise_args=_pair(supervise),
        logger_lines=logger_env.env_lines(plan, site),
    ))
    if site.templates_dir:
        from launcher.render import site_template  # only for a site with its own templates (start-up cost)

        return site_template.render(context, site.templates_dir)
    return sbatch_template.render(context)


def _context(values: dict) -> dict:
    """The template's context: every text in `values` was checked or quoted above, and is
    marked so (Shell; the directives Sbatch, for #SBATCH lines only); lists become tuples
    (the template cannot change them). Numbers, booleans and None stay as they are."""
    def mark(value, key=None):
        if isinstance(value, bool) or value is None or isinstance(value, int):
            return value
        if isinstance(value, str):
            return Sbatch(value) if key == "directives" else Shell(value)
        if isinstance(value, dict):
            return {k: mark(v, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return tuple(mark(v, key) for v in value)
        raise TypeError(f"{key}: {type(value).__name__} is not a value the batch script's template takes")

    return mark(values)
