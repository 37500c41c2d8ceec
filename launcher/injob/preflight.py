"""--preflight: everything training needs, checked on the running job instead of training.

Runs with the runtime's python on the head after the barrier (Ray) or on the batch host
(torchrun). Checks, each one a line of <run_dir>/preflight.json:
  pools        nodes and GPUs per pool as compiled vs what joined
  placement    verl's tagged placement groups per pool; the node of every bundle
  overrides    the overrides compose against this runtime's verl (launcher.verlcheck)
  paths        model/data/reward paths readable, and the run dir writable, from every compute
               node (a Ray task pinned to each: inside the container on a container runtime,
               where a path the container cannot see is named with the mount that fixes it)
  runtime      what the driver and every node run in (python, the container's marker)
  checkpoint   the checkpoint a resume would start from (or none)
  capabilities what the method needs importable in the runtime (launcher.injob.capabilities)
Prints a summary to the job log; exits 1 when any check fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher import runs, slurm, slurm_versions
from launcher.checkpoints import tracked_step
from launcher.injob import capabilities, health, mounts, placement, stacks, topology
from launcher.injob.contract import Job


def check_paths_here(paths: list[str], writable: tuple[str, ...] = ()) -> dict:
    out = {}
    for path in paths:
        exists = os.path.exists(path)
        readable = os.access(path, os.R_OK) and (not os.path.isdir(path) or os.access(path, os.X_OK))
        out[path] = {"exists": exists, "readable": bool(exists and readable)}
        if path in writable:
            out[path]["writable"] = bool(exists and os.access(path, os.W_OK | os.X_OK))
    return out


def check_node_here(paths: list[str], writable: tuple[str, ...] = ()) -> dict:
    """One node's answer: its paths and what it runs in."""
    return {"paths": check_paths_here(paths, writable), "where": mounts.where()}


def job_paths(job: Job) -> tuple[list[str], tuple[str, ...]]:
    """(every path the job reads, those it writes): the run dir first, then the compiled
    model/data/teacher/reward/main.py paths."""
    paths = [job.run_dir] + [p for p in job.paths_to_check if p != job.run_dir]
    return paths, (job.run_dir,)


def job_plan(run_dir: str) -> dict:
    """plan.json (the runtime the job runs on, under "job"; where each path was given), {} unread."""
    try:
        plan = json.loads((Path(run_dir) / "plan.json").read_text())
    except (OSError, ValueError):
        return {}
    return plan if isinstance(plan, dict) else {}


def path_failures(path_report: dict, runtime: dict | None, host_missing: dict | None = None,
                  plan: dict | None = None) -> list[str]:
    """One line per path a node cannot read (or write, the run dir), with the fix: a path the
    batch host lacks too (`host_missing`, Job.host_missing) is a wrong path, named with the
    field that gives it (`plan`: plan.json); one the host has is a missing mount."""
    host_missing, plan = host_missing or {}, plan or {}
    out = []
    for host, checks in path_report.items():
        if "_error" in checks:
            out.append(f"paths on {host}: {checks['_error']}")
            continue
        for path, res in checks.items():
            if not res["exists"]:
                out.append(f"paths on {host}: " + mounts.mount_hint(path, runtime, host_missing.get(path),
                                                                   mounts.path_field(path, plan)))
            elif not res["readable"]:
                out.append(f"paths: {path} is not readable on {host}")
            elif res.get("writable") is False:
                out.append(f"paths: {path} is not writable on {host} (the job writes its logs and records there)")
    return out


def latest_checkpoint(checkpoint_dir: str) -> dict:
    if not checkpoint_dir:
        return {"dir": None, "resume_from": None, "note": "no checkpoint dir compiled"}
    step = tracked_step(checkpoint_dir)
    if step is None:
        return {"dir": checkpoint_dir, "resume_from": None, "note": "no checkpoint yet: starts from step 0"}
    path = Path(checkpoint_dir) / f"global_step_{step}"
    return {"dir": checkpoint_dir, "resume_from": str(path) if path.is_dir() else None, "step": step,
            "note": "resumes from it" if path.is_dir() else f"tracker names step {step} but {path} is missing"}


def check_overrides(config_name: str, overrides: list[str]) -> dict:
    try:
        from launcher.verlcheck import check_overrides as verl_check
    except ImportError as exc:
        return {"ok": False, "errors": [f"launcher.verlcheck is not available: {exc}"]}
    try:
        errors = verl_check(config_name, list(overrides))
    except Exception as exc:  # a crash in composing is a failed check, not a crashed preflight
        return {"ok": False, "errors": [f"{exc.__class__.__name__}: {exc}"]}
    return {"ok": not errors, "errors": [str(e) for e in errors]}


def ray_checks(job: Job) -> tuple[dict, dict, dict]:
    import ray

    paths, writable = job_paths(job)
    ray.init(address=job.head, logging_level="ERROR", log_to_driver=False)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    by_name = {}
    for node in nodes:
        for key in node["Resources"]:
            if key.startswith(topology.NODE_PREFIX):
                by_name[key[len(topology.NODE_PREFIX):]] = node
    pool_report = {}
    for pool in job.pools:
        hosts, resource = job.hosts.get(pool.name, ()), topology.pool_resource(pool.name)
        joined = {h: {"gpus": int(by_name[h]["Resources"].get("GPU", 0)),
                      "cpus": int(by_name[h]["Resources"].get("CPU", 0)),
                      "address": by_name[h]["NodeManagerAddress"]}
                  for h in hosts if h in by_name and resource in by_name[h]["Resources"]}
        ok = len(joined) == pool.nodes and all(j["gpus"] >= pool.gpus_per_node for j in joined.values())
        pool_report[pool.name] = {"ok": ok, "compiled": compiled(pool), "joined": joined,
                                  "missing": [h for h in hosts if h not in joined]}
    pool_report["_cluster"] = {"ok": True, "ray_nodes": len(nodes),
                               "gpus": sum(int(n["Resources"].get("GPU", 0)) for n in nodes)}
    place = {}
    for pool in job.pools:
        cpus = min((j["cpus"] for j in pool_report[pool.name]["joined"].values()), default=0)
        try:
            place[pool.name] = placement.pin_report(pool, job.hosts.get(pool.name, ()), cpus)
        except Exception as exc:
            place[pool.name] = {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"}

    # one probe actor (one Ray worker) a node for the path check and the health check both
    to_probe = set(by_name) if paths else set()
    probed = health.probe_nodes(job)
    if len(probed) > 1:  # objects move between two nodes or more
        to_probe |= set(probed)
    probes = health.node_probes(ray, sorted(to_probe))
    try:
        path_report, node_where = {}, {}
        if paths:
            refs = {name: probes[name].run.remote(check_node_here, paths, tuple(writable)) for name in by_name}
            for name, ref in refs.items():
                try:
                    answer = ray.get(ref, timeout=60)
                    path_report[name], node_where[name] = answer["paths"], answer["where"]
                except Exception as exc:
                    path_report[name] = {"_error": f"{exc.__class__.__name__}: {exc}"}
        pool_report["_health"] = health.check(ray, job, probes)
    finally:
        health.kill_probes(ray, probes)
    pool_report["_where"] = node_where
    return pool_report, place, path_report


def compiled(pool) -> dict:
    return {"nodes": pool.nodes, "gpus_per_node": pool.gpus_per_node, "het_group": pool.het_group}


def srun_paths(job: Job) -> dict:
    """torchrun jobs have no Ray: one srun task per node checks the paths."""
    report = {}
    paths, _ = job_paths(job)
    code = ("import json,sys,os;from launcher.injob.preflight import check_paths_here as c;"
            "print(json.dumps({os.environ.get('SLURMD_NODENAME'): c(sys.argv[1:], (sys.argv[1],))}))")
    for pool in job.pools:
        proc = slurm.srun_popen([sys.executable, "-c", code, *paths],
                                het_group=pool.het_group if job.hetjob else None,
                                nodes=pool.nodes, ntasks=pool.nodes, ntasks_per_node=1,
                                nodelist=list(job.hosts.get(pool.name, ())), overlap=True, stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=120)
        for line in out.decode(errors="replace").splitlines():
            try:
                report.update(json.loads(line))
            except ValueError:
                pass
    return report


def health_gpu_text(gpu: dict) -> str:
    if gpu.get("skipped"):
        return "skipped (" + gpu["skipped"] + ")"
    reduce = gpu.get("allreduce") or {}
    figures = (f"GEMM median {gpu.get('gemm_median_tflops')} TFLOP/s over {gpu.get('gpus')} GPUs; all-reduce "
               + (f"{reduce['busbw_gb_s']} GB/s bus bandwidth ({reduce['mib']} MiB)" if "busbw_gb_s" in reduce
                  else reduce.get("skipped", "FAILED")))
    return figures + ("" if gpu.get("ok") else "; " + "; ".join(gpu.get("failed", [])[:3]))


# The words of sf's compile-time warnings (launcher/compile/rules/: disaggregated.rule_separate_cpus,
# pitfalls.rule_batch_sizes' and rule_micro_batch_sizes' warnings) that say the real job would stop or
# never start training; a preflight fails on them, with the warning as its reason.
STOPS_THE_JOB = ("would wait for CPUs forever", "asserts at start-up", "refuses it at start-up")


def job_stoppers(run_dir: str) -> list[str]:
    """The plan's warnings that would stop the real job, as preflight failures."""
    try:
        warnings = json.loads((Path(run_dir) / "plan.json").read_text()).get("warnings") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [f"the real job would stop: {w}" for w in warnings if any(p in str(w) for p in STOPS_THE_JOB)]


# long: the report is built in the order the checks run (Ray, placement, roles, overrides, paths, GPUs).
def pools_places_paths(job: Job, paths, failures: list) -> tuple[dict, dict, dict]:
    """What joined per pool, where each pool's bundles landed and the paths each node reads:
    through Ray for a Ray job (a failure to reach it is one line of ``failures``), else from
    Slurm's hosts and one srun of the path check."""
    if job.launcher != "ray":
        pool_report = {p.name: {"ok": len(job.hosts.get(p.name, ())) == p.nodes, "compiled": compiled(p),
                                "hosts": list(job.hosts.get(p.name, ()))} for p in job.pools}
        return pool_report, {}, (srun_paths(job) if paths else {})
    try:
        return ray_checks(job)
    except Exception as exc:
        cause = exc.__cause__ or exc.__context__  # Ray's "Failed to connect" hides why
        because = f" (because {cause.__class__.__name__}: {str(cause)[:300]})" if cause else ""
        failures.append(f"ray: {exc.__class__.__name__}: {exc}{because}")
        return {}, {}, {}


def judge_pools_and_placement(job: Job, report: dict, pool_report: dict, place: dict) -> None:
    """The failures and warnings of what joined and where it landed, added to ``report``."""
    if place:  # where each role's workers land: the pool roles: names, or a failure naming the role
        report["roles"] = placement.role_report(job.pools, place, job.verl_pools)
        for entry_ in report["roles"]:
            if not entry_["ok"]:
                nodes = ", ".join(entry_["nodes"]) or "no nodes"
                report["failures"].append(f"role {entry_['role']}: its workers land on pool "
                                          f"{entry_['placed_on_pool']} ({nodes}), not on pool {entry_['pool']}")
    for name, entry_ in pool_report.items():
        if not entry_.get("ok", True):
            report["failures"].append(f"pool {name}: nodes/GPUs joined differ from what was compiled")
    for name, entry_ in place.items():
        if entry_.get("warning"):
            report["warnings"].append(entry_["warning"])
        if not entry_.get("ok"):
            why = entry_.get("error") or "bundles off the pool nodes"
            report["failures"].append(f"placement of pool {name}: {why}")


def main() -> int:
    job = Job.from_env()
    entry, paths = list(job.entry), job_paths(job)[0]
    t0 = time.time()
    report = {"ok": False, "job_id": job.job_id, "launcher": job.launcher, "head": job.head,
              "entry": entry, "config_name": job.config_name, "warnings": [], "failures": []}
    pool_report, place, path_report = pools_places_paths(job, paths, report["failures"])
    report["health"] = pool_report.pop("_health", None)
    report["runtime"] = {"driver": mounts.where(), "nodes": pool_report.pop("_where", {})}
    report["pools"] = pool_report
    report["ray_nodes"] = pool_report.get("_cluster", {}).get("ray_nodes")
    if report["health"] and not report["health"]["ok"]:
        bad = ", ".join(report["health"]["suspect_nodes"]) or "see health.failed"
        report["failures"].append(f"health: node check failed (suspect: {bad}): "
                                  + "; ".join(report["health"]["failed"][:3]))
    report["placement"] = place
    judge_pools_and_placement(job, report, pool_report, place)
    report["overrides"] = check_overrides(job.config_name or "ppo_trainer", list(job.overrides))
    if not report["overrides"]["ok"]:
        report["failures"] += [f"overrides: {e}" for e in report["overrides"]["errors"]]
    report["capabilities"], missing = capabilities.preflight(job.run_dir, sys.executable)
    no_py_spy = stacks.preflight_warning(job.run_dir)  # a hang limit and no py-spy: its stacks would be empty
    if no_py_spy:
        report["warnings"].append(no_py_spy)
    report["failures"] += missing
    report["failures"] += job_stoppers(job.run_dir)
    report["paths"] = path_report
    for host in job.nodes:
        if paths and host not in path_report:
            report["failures"].append(f"paths: no answer from {host}")
    plan = job_plan(job.run_dir)
    report["failures"] += path_failures(path_report, (plan.get("job") or {}).get("runtime"), job.host_missing, plan)
    # The GPUs each node's step sees (UUIDs where nvidia-smi answers): the supervisor already
    # refused shared or missing ones before the preflight started.
    report["gpu_ids"] = dict(job.gpu_ids)
    report["slurm"] = slurm_versions.version_text(slurm.version())
    report["checkpoint"] = latest_checkpoint(job.checkpoint_dir or "")
    report["seconds"] = round(time.time() - t0, 2)
    report["ok"] = not report["failures"]
    try:
        runs.Run(job.run_dir).write_json("preflight.json", report)
    except OSError as exc:  # the run dir unseen (a container without it): the summary still says why
        report["ok"] = False
        report["failures"].append(f"preflight.json: {exc.__class__.__name__}: {exc}")
    print(summary(report), flush=True)
    return 0 if report["ok"] else 1


def summary(report: dict) -> str:
    lines = [f"== sf preflight: {'PASSED' if report['ok'] else 'FAILED'} "
             f"(Ray nodes: {report.get('ray_nodes')}, {report.get('seconds')}s) =="]
    for name, pool in report.get("pools", {}).items():
        if name.startswith("_"):
            continue
        c = pool.get("compiled", {})
        joined = pool.get("joined") or {h: {} for h in pool.get("hosts", [])}
        lines.append(f"pool {name}: compiled {c.get('nodes')}x{c.get('gpus_per_node')} GPUs (het group "
                     f"{c.get('het_group')}); joined: " + ", ".join(
                         f"{h}({j.get('gpus', '?')} GPUs)" for h, j in joined.items()))
    for name, place in report.get("placement", {}).items():
        lines.append(f"placement {name}: {len(place.get('bundles', []))} bundles on {', '.join(place.get('nodes', []))}"
                     f" -> {'ok' if place.get('ok') else 'WRONG'}")
    for role in report.get("roles", []):
        lines.append(f"role {role['role']}: pool {role['pool']} -> {', '.join(role['nodes']) or '?'}"
                     f" {'ok' if role['ok'] else 'WRONG (lands on pool ' + role['placed_on_pool'] + ')'}")
    o = report.get("overrides", {})
    lines.append(f"overrides: {'compose' if o.get('ok') else 'FAIL'}")
    if report.get("slurm"):
        lines.append(f"slurm: {report['slurm']}")
    lines.append(capabilities.summary(report.get("capabilities") or {}))
    paths = report.get("paths", {})
    lines.append(f"paths: checked on {len(paths)} nodes")
    where = report.get("runtime") or {}
    if where.get("driver"):
        inside = {w.get("container") for w in [where["driver"], *(where.get("nodes") or {}).values()]}
        driver = where["driver"]
        lines.append(f"runtime: {driver.get('python')} (python {driver.get('python_version')}); "
                     + ("container: " + ", ".join(sorted(str(c) for c in inside)) if inside != {None}
                        else "no container"))
    health = report.get("health")
    if health:
        lines.append(f"health: {health['pairs']} object transfers ({health['mode']}, {health['payload_mib']} MiB): "
                     + ("ok" if health["ok"] else f"{len(health['failed'])} FAILED")
                     + (f", median {health['median_mib_per_s']} MiB/s" if health.get("median_mib_per_s") else ""))
        gpu = health.get("gpu")
        if gpu:
            lines.append("health gpus: " + health_gpu_text(gpu))
    for host, ids in (report.get("gpu_ids") or {}).items():
        lines.append(f"gpus {host}: {', '.join(ids) or 'none'}")
    ck = report.get("checkpoint", {})
    lines.append(f"checkpoint: {ck.get('resume_from') or ck.get('note')}")
    for w in report.get("warnings", []):
        lines.append(f"warning: {w}")
    for f in report.get("failures", []):
        lines.append(f"FAIL: {f}")
    return "\n".join(lines)
