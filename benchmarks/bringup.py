"""Benchmark 1: Ray bring-up time against node count, sf vs two baselines, side by side.

    python benchmarks/bringup.py --work DIR --out FILE [--reps 3] [--nodes 1,2,4,8]
                                 [--methods sf,verl_example,naive_batched]
    python benchmarks/bringup.py --summary FILE    # the ratios, side by side, of a finished run

On the Slurm 24.11 dev cluster: the same command inside `scripts/dev-cluster --slurm 24.11 exec --`
(its login venv's python; the result's `slurm` says which Slurm ran the trials).

Every trial is one real Slurm job on the dev cluster (partition `all`, dev1-dev8, 4 fake
GPUs per node), run one at a time; each repetition runs every (N, method) pair, the
method order rotating between repetitions so drift in the host's load spreads evenly.

  sf             `sf submit` of a minimal experiment (GRPO on N nodes) whose main.py is a
                 trivial driver (bench_driver.py, MODE=exit): the real sbatch script, the
                 real in-job supervisor, node wrapper and barrier; the job ends as soon as
                 the driver has started.
  verl_example   baseline_verl_example.sbatch: head, sleep 10, one srun per worker + sleep 5.
  naive_batched  baseline_naive_batched.sbatch: head, one srun for all workers, readiness
                 by polling `ray status`.
  sf_patched     (optional) sf as above, run from a copy of HEAD with barrier_fix.patch
                 applied (a no-op once the fix is in sf)
  sf_prefix      (optional) the same with the patch taken out: sf before the barrier fix
                 (landed in 5b303b7), for a before/after in one session.

The baselines get the SAME #SBATCH resources sf renders for that N (taken from
`sf submit --dry-run --json`), the same runtime, `ray start` flags, ports, temp dirs and
node addresses (baseline_layout.py), so what differs is the bring-up algorithm.

Measured per trial (epoch seconds, all on this one host's clock):
  batch_start   start of the job's batch script process (/proc; procstart.py), for all
  ready         sf: the all_joined phase (events.jsonl); verl_example: max(end of the
                sleep loop, all N nodes alive in the GCS); naive_batched: `ray status`
                lists N active nodes
  registrations every "Registering new node" line of the head's GCS log
  bringup_s     ready - batch_start (the comparison across methods)
  sf only: allocated_to_joined_s (sf's own phases: allocated -> all_joined) and
           barrier_lag_s = all_joined - last node's GCS registration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import log  # noqa: E402

METHODS = ("sf", "verl_example", "naive_batched")
SBATCH_SKIP = ("--job-name", "--output", "--error", "--requeue", "--signal", "--open-mode", "--no-requeue")

MAIN_PY = """# written by benchmarks: a trivial driver for sf (see benchmarks/bench_driver.py)
import runpy
runpy.run_path({driver!r}, init_globals={{"MODE": {mode!r}}}, run_name="__main__")
"""


def write_experiment(work: Path, name: str, nodes: int, *, mode: str = "exit", requeue: bool = False,
                     time_limit: str = "00:10:00") -> Path:
    """A GRPO experiment on `nodes` nodes of partition `all`, with a trivial main.py."""
    import yaml

    assets = common.REPO / "examples" / "assets"
    exp = work / "experiments" / name
    exp.mkdir(parents=True, exist_ok=True)
    config = {
        "method": "verl/grpo", "framework_version": "0.9.1", "model": str(assets / "model"),
        "data": {"train": {"files": str(assets / "data" / "train.parquet")},
                 "validation": {"files": str(assets / "data" / "test.parquet")}},
        "knobs": {"rollout_n": 5, "actor_lr": 1.0e-6},
        "overrides": [],
        "spec": {"resources": {"pools": [{"name": "train", "series": "benchall", "nodes": nodes,
                                          "gpus_per_node": 4}]}},
        "slurm": {"time": time_limit, "requeue": requeue},
    }
    (exp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (exp / "main.py").write_text(MAIN_PY.format(driver=str(common.BENCH / "bench_driver.py"), mode=mode))
    return exp


def sf_directives(exp: Path, site: Path) -> list[str]:
    """The #SBATCH resources sf renders for this experiment (for the baselines)."""
    proc = common.run([common.SF, "submit", str(exp), "--site", str(site), "--dry-run", "--json"], timeout=120)
    script = json.loads(proc.stdout[proc.stdout.index("{"):])["script"]
    out = []
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            directive = line.split(None, 1)[1]
            if not directive.startswith(SBATCH_SKIP):
                out.append(directive)
    return out


def read_times(path: Path) -> dict:
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                try:
                    out[parts[0]] = float(parts[-1])
                except ValueError:
                    pass
    return out


def read_watch(path: Path) -> list[tuple[float, int]]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            t, _, n = line.partition(" ")
            rows.append((float(t), int(n)))
    return rows


# --- one trial per method -------------------------------------------------------------------

def trial_sf(exp: Path, site: Path, nodes: int, sf_tree: Path | None = None) -> dict:
    """sf_tree: run sf from this copy of the repo instead (its rendered job then runs that
    copy's in-job code too): the `sf_patched` method."""
    t_submit = time.time()
    env = dict(os.environ, PYTHONPATH=str(sf_tree)) if sf_tree else None
    # submitted from the tree itself: the job's `python -m launcher.injob` finds `launcher` in
    # the submit directory (sys.path[0]) before the PYTHONPATH sf renders
    proc = common.run([common.SF, "submit", str(exp), "--site", str(site), "--json"], timeout=120, env=env,
                      cwd=sf_tree or common.REPO)
    info = json.loads(proc.stdout[proc.stdout.index("{"):])
    job_id, run_dir = info["job_id"], Path(info["run_dir"])
    state = common.wait_job_end(job_id, timeout=240)
    events = [e for e in _phases(run_dir) if str(e.get("job_id")) == job_id]
    by = {}
    for e in events:
        by.setdefault(e["phase"], e)
    driver = _jsonl(run_dir / "bench_driver.jsonl")
    head = (by.get("allocated", {}).get("pools") or {}).get("train", [None])[0]
    regs = common.sf_gcs_registrations(run_dir, job_id, head) if head else []
    out = {"method": "sf_patched" if sf_tree else "sf", "nodes": nodes, "job_id": job_id, "state": state, "run": info["run"],
           "submit": t_submit, "registrations": regs, "head_node": head}
    if driver:
        out["batch_start"] = driver[0].get("batch_start")
    for name in ("allocated", "head_up", "all_joined", "driver_started", "ended"):
        if name in by:
            out[name] = by[name]["time"]
    if "all_joined" in by:
        out["ready"] = by["all_joined"]["time"]
        out["barrier_s"] = by["all_joined"].get("barrier_s")
        out["ray_nodes"] = by["all_joined"].get("ray_nodes")
    if "ended" in by:
        out["reason"] = by["ended"].get("reason")
    node_started = [e["time"] for e in events if e["phase"] == "node_started"]
    if node_started:
        out["node_started_last"] = max(node_started)
    _derive(out)
    if "allocated" in out and "ready" in out:
        out["allocated_to_joined_s"] = round(out["ready"] - out["allocated"], 3)
    if "health_checked" in by:
        out["health_checked"] = by["health_checked"]["time"]
        if "ready" in out:
            out["health_check_s"] = round(out["health_checked"] - out["ready"], 3)
    if out.get("batch_start") and out.get("driver_started"):
        out["to_driver_s"] = round(out["driver_started"] - out["batch_start"], 3)
    if regs and "ready" in out:
        out["barrier_lag_s"] = round(out["ready"] - max(regs), 3)
    # a bring-up that got every node in but no driver (the health check, or the job, failed) failed too
    out["ok"] = out["ok"] and "driver_started" in out
    common.remove_temp_dirs(job_id)
    return out


def trial_baseline(method: str, nodes: int, directives: list[str], work: Path, env: dict) -> dict:
    out_dir = work / "baselines"
    out_dir.mkdir(parents=True, exist_ok=True)
    t_submit = time.time()
    job_id = common.sbatch([*directives, f"--job-name=bx-{method}", f"--output={out_dir}/slurm-%j.out",
                            "--no-requeue", str(common.BENCH / f"baseline_{method}.sbatch")], env=env)
    state = common.wait_job_end(job_id, timeout=300)
    job_dir = out_dir / job_id
    times = read_times(job_dir / "times")
    head = None
    argv_files = sorted(job_dir.glob("argv.*"))
    layout = (job_dir / "layout").read_text().split() if (job_dir / "layout").is_file() else []
    for token in layout:
        if token.startswith("HEAD_NODE="):
            head = token.split("=", 1)[1]
    regs = common.gcs_registrations(f"/tmp/sf{job_id}_{head}") if head else []
    out = {"method": method, "nodes": nodes, "job_id": job_id, "state": state, "submit": t_submit,
           "registrations": regs, "head_node": head, "batch_start": times.get("batch_start"),
           "t0": times.get("t0"), "nodes_laid_out": len(argv_files)}
    if method == "verl_example":
        watch = read_watch(job_dir / "watch")
        all_seen = next((t for t, n in watch if n >= nodes), None)
        out["loop_end"] = times.get("loop_end")
        out["all_alive_seen"] = all_seen
        if all_seen is not None and times.get("loop_end") is not None:
            out["ready"] = max(all_seen, times["loop_end"])
    else:
        out["head_ready"] = times.get("head_ready")
        if "ready" in times:
            out["ready"] = times["ready"]
    _derive(out)
    if not out["ok"]:
        log_text = (out_dir / f"slurm-{job_id}.out")
        errors = [l for l in (log_text.read_text(errors="replace").splitlines() if log_text.is_file() else [])
                  if "Error" in l or "error:" in l]
        out["error"] = errors[0][:300] if errors else "no bring-up time (see the job's output)"
    common.remove_temp_dirs(job_id)
    return out


def _derive(out: dict) -> None:
    ref = out.get("batch_start") or out.get("t0")
    if ref and out.get("ready"):
        out["bringup_s"] = round(out["ready"] - ref, 3)
    regs = out.get("registrations") or []
    if ref and regs:
        out["last_registration_s"] = round(max(regs) - ref, 3)
    out["registered_nodes"] = len(regs)
    out["ok"] = bool(out.get("bringup_s")) and len(regs) == out["nodes"]


def _phases(run_dir: Path) -> list[dict]:
    return _jsonl(run_dir / "events.jsonl")


def _jsonl(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


# --- host CPU during a trial ------------------------------------------------------------------

class CpuSampler(threading.Thread):
    """/proc/stat's first line every 0.25 s: (time, busy jiffies, idle jiffies), so a
    trial's window can be asked how much of the host's CPU was left idle."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int, int]] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
            idle = fields[3] + fields[4]  # idle + iowait
            self.samples.append((time.time(), sum(fields[:8]) - idle, idle))
            self.stop.wait(0.25)

    def idle_fraction(self, start: float, end: float) -> float | None:
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return None
        busy = inside[-1][1] - inside[0][1]
        idle = inside[-1][2] - inside[0][2]
        return round(idle / (busy + idle), 3) if busy + idle else None


def patched_tree(tree: Path, patch: Path = common.BENCH / "barrier_fix.patch", *, reverse: bool = False) -> None:
    """A copy of sf at HEAD with the barrier fix applied (`sf_patched`), or taken out
    again (`sf_prefix`: sf as it was before the fix landed, for a before/after)."""
    import shutil
    import subprocess

    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(common.REPO), "archive", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    applied = common.run(["git", "apply", "-R", "--check", "-p1", str(patch)], cwd=tree, check=False).returncode == 0
    if reverse and applied:
        common.run(["git", "apply", "-R", "-p1", str(patch)], cwd=tree)
    elif not reverse and not applied:
        common.run(["git", "apply", "-p1", str(patch)], cwd=tree)


def run_trial(method, n, rep, exps, site, directives, work, env, sampler) -> dict:
    if not common.wait_idle_nodes(n, "all", timeout=120):
        log(f"fewer than {n} idle nodes after 120 s; submitting anyway (it will queue)")
    before = {"load": common.load_average(), "other_jobs": common.other_jobs()}
    try:
        if method == "sf":
            trial = trial_sf(exps[n], site, n)
        elif method in ("sf_patched", "sf_prefix"):
            trial = trial_sf(exps[n], site, n, sf_tree=work / method.replace("_", "-"))
            trial["method"] = method
        else:
            trial = trial_baseline(method, n, directives[n], work, env)
    except Exception as exc:  # one broken trial must not lose the others
        trial = {"method": method, "nodes": n, "ok": False, "error": f"{exc.__class__.__name__}: {exc}"}
    trial.update(rep=rep, load_before=before["load"], other_jobs_before=before["other_jobs"])
    ref = trial.get("batch_start") or trial.get("t0")
    if ref and trial.get("ready"):
        trial["host_idle_fraction"] = sampler.idle_fraction(ref, trial["ready"])
    return trial


# --- the matrix ------------------------------------------------------------------------------

def baseline_env(work: Path) -> dict:
    """The environment of the baseline jobs (the BX_* settings their sbatch scripts read, from
    the dev site's Ray settings and its first series) plus the site's env, as sf's jobs
    export it. benchmarks/scale.py's Ray-alone trials use it too."""
    site = common.dev_site()
    ray, series = site["ray"], site["series"][site.get("default_series") or "fake"]
    env = dict(os.environ)
    env.update({"BX_DIR": str(work / "baselines"), "BX_PY": common.runtime_python(), "BX_REPO": str(common.REPO),
                "BX_PORT_RANGE": f"{ray['port_range'][0]}-{ray['port_range'][1]}",
                "BX_TEMP_ROOT": ray.get("temp_root", "/tmp"),
                "BX_ADDR_PREFIX": (ray.get("node_address") or {}).get("prefix", "127.0.0"),
                "BX_CPUS": str(series["cpus_per_node"]), "BX_GPUS": str(series["gpus_per_node"])})
    env.update({str(k): str(v) for k, v in (site.get("env") or {}).items()})  # as sf's jobs export them
    return env


def ratio_lines(result: dict) -> list[str]:
    """Per N, the median bring-up of each method and sf's ratio to each Ray-alone one, side by side."""
    others = [m for m in result["methods"] if m != "sf"]
    lines = [f"{result.get('slurm') or 'slurm ?'}: bring-up medians (s) and sf / Ray alone",
             "N   sf      " + "".join(f"{m:>16s} {'sf/' + m:>20s}" for m in others)]
    for n in result["sizes"]:
        med = {m: common.summary([t["bringup_s"] for t in result["trials"]
                                  if t["method"] == m and t["nodes"] == n and t.get("ok")])["median"]
               for m in result["methods"]}
        cells = [f"{n:<3d} {med.get('sf') or float('nan'):7.2f} "]
        for m in others:
            ratio = med["sf"] / med[m] if med.get("sf") and med.get(m) else float("nan")
            cells.append(f"{med.get(m) or float('nan'):16.2f} {ratio:19.2f}x")
        lines.append("".join(cells))
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--summary", type=Path, help="print the ratios of a finished run's JSON and stop")
    p.add_argument("--work", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nodes", default="1,2,4,8")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--health-check", default=None, choices=("preflight", "always"),
                   help="the site's ray.health_check for the sf trials (always: checked before every driver)")
    p.add_argument("--extra-reps", default="",
                   help="N:K - K more sf-only repetitions at N after the matrix (to count bring-up failures)")
    args = p.parse_args(argv)
    if args.summary:
        print("\n".join(ratio_lines(json.loads(args.summary.read_text()))))
        return 0
    if not (args.work and args.out):
        p.error("--work and --out are needed for a run")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    site = common.bench_site(work, health_check=args.health_check)
    sizes = [int(n) for n in args.nodes.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    site_data = common.dev_site()
    env = baseline_env(work)
    if "sf_patched" in methods:
        patched_tree(work / "sf-patched")
    if "sf_prefix" in methods:
        patched_tree(work / "sf-prefix", reverse=True)
    exps = {n: write_experiment(work, f"bringup{n}", n) for n in sizes}
    directives = {n: sf_directives(exps[n], site) for n in sizes}
    result = {"sizes": sizes, "methods": methods, "reps": args.reps, "directives": directives, "trials": [],
              "slurm": common.run(["sinfo", "--version"], check=False).stdout.strip(),
              "health_check": args.health_check or (site_data.get("ray") or {}).get("health_check", "preflight"),
              "start_retries": (site_data.get("ray") or {}).get("start_retries", 2)}
    sampler = CpuSampler()
    sampler.start()
    schedule = [(rep, n, methods[rep % len(methods):] + methods[: rep % len(methods)])
                for rep in range(args.reps) for n in sizes]
    if args.extra_reps:
        n_extra, _, k_extra = args.extra_reps.partition(":")
        schedule += [(args.reps + i, int(n_extra), ["sf"]) for i in range(int(k_extra))]
        if int(n_extra) not in exps:
            exps[int(n_extra)] = write_experiment(work, f"bringup{n_extra}", int(n_extra))
    for rep, n, order in schedule:
        for method in order:
            for attempt in (1, 2):  # a failed trial (e.g. another job's Ray on our ports) runs once more
                trial = run_trial(method, n, rep, exps, site, directives, work, env, sampler)
                trial["attempt"] = attempt
                result["trials"].append(trial)
                common.save(args.out, result)
                log(f"rep {rep} N={n} {method:14s} bringup={trial.get('bringup_s')}s "
                    f"alloc->joined={trial.get('allocated_to_joined_s')} lag={trial.get('barrier_lag_s')} "
                    f"to_driver={trial.get('to_driver_s')} health={trial.get('health_check_s')} "
                    f"regs={trial.get('registered_nodes')} state={trial.get('state')} "
                    f"idle={trial.get('host_idle_fraction')} load={trial['load_before'][0]}"
                    + ("" if trial.get("ok") else f" FAILED {str(trial.get('error') or trial.get('reason') or '')[-200:]}"))
                if trial.get("ok"):
                    break
    common.save(args.out, result)
    print("\n".join(ratio_lines(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
