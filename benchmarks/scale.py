"""Scale benchmark (issue 22, item 6): sf's Ray bring-up against Ray alone, at N emulated
nodes, and a model that predicts 256 and 1000 nodes.

    python benchmarks/scale.py --work DIR --out FILE [--nodes 1,4,8,16,32,64] [--reps 3]
                               [--methods sf,ray] [--site FILE] [--sf PATH] [--budget-s S]
    python benchmarks/scale.py --fit FILE          # the tables and the model again, from FILE

Run inside the dev cluster's namespace (`scripts/dev-cluster exec -- .venv/bin/python ...`)
on a cluster with at least max(N) nodes in partition `all` (`SFDEV_NODES=64
scripts/dev-cluster up`, see docs/scale.md); sizes the cluster cannot hold are skipped and
said so. Elsewhere (the GPU machine: benchmarks/gpu/rl.sh stage `scale`, its Slurm from
slurm_n_up.sh) `--site` names the site to start from instead of site/dev.yaml (its default
series' CPUs and GPUs, Ray settings, runtime registry and env) and `--sf` the sf to submit
with; `--budget-s` starts no trial after that many seconds (what ran is kept), so a run on
lent device time ends when planned. Every repetition runs, for each N, the methods one after another (the order
rotating between repetitions), each one a real Slurm job on N nodes:

  sf    `sf submit` of a GRPO experiment on N nodes whose main.py is a trivial driver
        (bringup.write_experiment): the real sbatch script, supervisor, node sruns, node
        wrapper, barrier; done when the driver starts
  ray   baseline_ray_alone.sbatch: the same resources, the same `ray start` lines, the same
        Ray environment for N nodes (ray_tuning) and token auth, head and workers started
        together, ready when the GCS lists N alive nodes; no supervisor, barrier or retries:
        the floor sf's bring-up can reach on this host

Measured per trial, from the start of the batch script (/proc, procstart.py): bring-up
(sf: all_joined; ray: N alive in the GCS), the head's GCS registration (head start) and
every node's ("Registering new node" lines of the head's gcs_server.out: sf keeps it in
<run>/logs/ray/, the baseline's is in its temp dir). A trial that does not reach all N
nodes is a failure (counted, not retried).

The model (stdlib least squares over every successful trial of a method):
  bring-up(N) = a + b * (N - 1)
    a  head start (batch start -> head registered, measured) + fixed cost (fitted rest)
    b  per-node cost on this host (the emulated nodes share its CPUs, so node starts queue)
  GCS registration rate R: the most worker registrations per second the head took in any
    window of REG_WINDOW consecutive ones, in the Ray-alone trials only: there every node
    starts at once, so the GCS is what paces them. In sf's trials the nodes start in sf's own
    turns, so their rate (`own_registrations_per_s`, reported beside it) measures sf's pacing,
    not the GCS: reading it as the GCS's limit made sf's 256-node `gcs` prediction an artifact.
Predictions at PREDICT nodes, each fitting one limit: `host` = a + b (N - 1) fits this host's
CPUs, shared by every emulated node (an upper bound for real nodes); `gcs` = a + (N - 1) / R
fits the GCS's registration rate measured with Ray alone, nodes starting in parallel on their
own CPUs so that only the GCS serialises them (a lower bound while R holds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bringup  # noqa: E402
import common  # noqa: E402
from common import log  # noqa: E402

METHODS = ("sf", "ray")
SIZES = (1, 4, 8, 16, 32, 64)
PREDICT = (256, 1000)
REG_WINDOW = 8


# --- trials ---------------------------------------------------------------------------------

def registrations(path: Path) -> list[float]:
    """Epoch times of the "Registering new node" lines of one gcs_server.out."""
    from datetime import datetime

    times = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            if common.GCS_REGISTER in line and line.startswith("["):
                times.append(datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return sorted(times)


def trial_sf(exp: Path, site: Path, nodes: int) -> dict:
    proc = common.run([common.SF, "submit", str(exp), "--site", str(site), "--json"], timeout=120)
    info = json.loads(proc.stdout[proc.stdout.index("{"):])
    job_id, run_dir = info["job_id"], Path(info["run_dir"])
    state = common.wait_job_end(job_id, timeout=240 + 5 * nodes)
    by, retries = {}, 0
    for event in bringup._jsonl(run_dir / "events.jsonl"):
        if str(event.get("job_id")) == job_id:
            by.setdefault(event["phase"], event)
            retries += event["phase"] == "node_retry"  # a node's `ray start` failed and went again
    head = ((by.get("allocated") or {}).get("pools") or {}).get("train", [None])[0]
    driver = bringup._jsonl(run_dir / "bench_driver.jsonl")
    out = {"method": "sf", "nodes": nodes, "job_id": job_id, "state": state, "run": info["run"],
           "batch_start": driver[0].get("batch_start") if driver else None,
           "ready": (by.get("all_joined") or {}).get("time"),
           "registrations": registrations(run_dir / "logs" / "ray" / f"{job_id}-{head}" / "gcs_server.out"),
           "reason": (by.get("ended") or {}).get("reason"), "node_retries": retries}
    return derive(out)


def trial_ray(nodes: int, directives: list[str], work: Path, env: dict) -> dict:
    out_dir = work / "baselines"
    out_dir.mkdir(parents=True, exist_ok=True)
    job_id = common.sbatch([*directives, "--job-name=bx-ray", f"--output={out_dir}/slurm-%j.out", "--no-requeue",
                            str(common.BENCH / "baseline_ray_alone.sbatch")], env=env)
    state = common.wait_job_end(job_id, timeout=240 + 5 * nodes)
    job_dir = out_dir / job_id
    times = bringup.read_times(job_dir / "times")
    head = next((t.split("=", 1)[1] for t in (job_dir / "layout").read_text().split() if t.startswith("HEAD_NODE=")),
                None) if (job_dir / "layout").is_file() else None
    temp = (job_dir / f"temp.{head}").read_text().strip() if head and (job_dir / f"temp.{head}").is_file() else ""
    logs = Path(temp).glob("session_2*/logs/gcs_server.out") if temp else ()
    regs = [t for path in logs for t in registrations(path)]
    out = {"method": "ray", "nodes": nodes, "job_id": job_id, "state": state, "batch_start": times.get("batch_start"),
           "ready": times.get("ready"), "registrations": sorted(regs)}
    # exactly the temp dirs its layout gave (a glob on the job id would also take those of
    # another cluster's job of that id on this host: the dev box runs two)
    for path in job_dir.glob("temp.*"):
        shutil.rmtree(path.read_text().strip(), ignore_errors=True)
    return derive(out)


def derive(out: dict) -> dict:
    start, regs = out.get("batch_start"), out.get("registrations") or []
    if start and out.get("ready"):
        out["bringup_s"] = round(out["ready"] - start, 3)
    if start and regs:
        out["head_start_s"] = round(regs[0] - start, 3)
        out["registration_span_s"] = round(regs[-1] - regs[0], 3)
    out["registered_nodes"] = len(regs)
    out["ok"] = bool(out.get("bringup_s")) and len(regs) >= out["nodes"]
    return out


# --- the model (standard library only) ------------------------------------------------------

def least_squares(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(intercept, slope) of y = a + b x through `points`; None with fewer than two x values."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def peak_rate(regs: list[float], window: int = REG_WINDOW) -> float | None:
    """The most worker registrations per second in any `window` consecutive ones (fewer when
    the cluster has fewer workers, at least 3); the head's own registration comes first,
    a worker-start time earlier, and is left out."""
    workers = regs[1:]
    window = min(window, len(workers))
    if window < 3:
        return None
    spans = [workers[i + window - 1] - workers[i] for i in range(len(workers) - window + 1)]
    shortest = min(spans)
    return (window - 1) / shortest if shortest > 0 else None


def gcs_rate(trials: list[dict]) -> float | None:
    """R: the GCS's peak registration rate, from the successful Ray-alone trials only (the
    method whose nodes all start at once, so that the GCS alone paces them)."""
    rates = [r for r in (peak_rate(t["registrations"]) for t in trials
                         if t.get("method") == "ray" and t.get("ok") and not t.get("node_retries")) if r]
    return max(rates) if rates else None


def fit(trials: list[dict], method: str) -> dict:
    """The model over the successful trials in which no node's `ray start` had to go again:
    a trial with node retries is in another regime (nodes missed Ray's fixed 30 s start
    windows and started over, 64 nodes on 16 cores: 78-105 retries, 89-95 s), which a line
    through the clean trials does not describe; they are counted (`retried_trials`)."""
    ok = [t for t in trials if t.get("method") == method and t.get("ok")]
    retried = [t for t in ok if t.get("node_retries")]
    ok = [t for t in ok if not t.get("node_retries")]
    line = least_squares([(t["nodes"] - 1, t["bringup_s"]) for t in ok])
    heads = [t["head_start_s"] for t in ok if t.get("head_start_s") is not None]
    own = [r for r in (peak_rate(t["registrations"]) for t in ok) if r]
    rate = gcs_rate(trials)
    model = {"method": method, "trials": len(ok), "retried_trials": len(retried),
             "head_start_s": round(statistics.median(heads), 2) if heads else None,
             "gcs_registrations_per_s": round(rate, 1) if rate else None, "gcs_rate_from": "ray alone",
             "own_registrations_per_s": round(max(own), 1) if own else None,
             "limits": {"host": "this host's CPUs (a + b (N - 1))",
                        "gcs": "the GCS's registration rate with Ray alone (a + (N - 1) / R)"}}
    if line is None:
        return model
    a, b = line
    model.update(intercept_s=round(a, 2), per_node_s=round(b, 3))
    if model["head_start_s"] is not None:
        model["fixed_s"] = round(a - model["head_start_s"], 2)
    model["predict"] = {str(n): {"host": round(a + b * (n - 1), 1),
                                 "gcs": round(a + (n - 1) / rate, 1) if rate else None} for n in PREDICT}
    return model


def table(result: dict) -> str:
    trials, lines = result["trials"], []
    lines.append("| N | sf median s | Ray alone median s | sf / Ray | sf failures | Ray failures | sf head start s |")
    lines.append("|---|---|---|---|---|---|---|")
    for n in result["sizes"]:
        row = {}
        for m in METHODS:
            mine = [t for t in trials if t.get("method") == m and t["nodes"] == n]
            good = [t["bringup_s"] for t in mine if t.get("ok")]
            row[m] = (statistics.median(good) if good else None, len(mine) - len(good), len(mine))
        heads = [t["head_start_s"] for t in trials if t.get("method") == "sf" and t["nodes"] == n and t.get("ok")
                 and t.get("head_start_s") is not None]
        sf_s, ray_s = row["sf"][0], row["ray"][0]
        ratio = f"{sf_s / ray_s:.2f}x" if sf_s and ray_s else "-"
        lines.append(f"| {n} | {fmt(sf_s)} | {fmt(ray_s)} | {ratio} | {row['sf'][1]}/{row['sf'][2]} | "
                     f"{row['ray'][1]}/{row['ray'][2]} | {fmt(statistics.median(heads) if heads else None)} |")
    lines.append("")
    lines.append("| method | trials (+ left out: node retries) | head start s | intercept a s | per node b s | "
                 "own peak reg/s | " + " | ".join(f"{n} nodes: host / gcs s" for n in PREDICT) + " |")
    lines.append("|---|---|---|---|---|---|" + "---|" * len(PREDICT))
    for m in METHODS:
        f = fit(trials, m)
        pred = f.get("predict") or {}
        lines.append(f"| {m} | {f['trials']} (+{f['retried_trials']}) | {fmt(f['head_start_s'])} | "
                     f"{fmt(f.get('intercept_s'))} | "
                     f"{fmt(f.get('per_node_s'), 3)} | {fmt(f['own_registrations_per_s'])} | "
                     + " | ".join(f"{fmt((pred.get(str(n)) or {}).get('host'))} / "
                                  f"{fmt((pred.get(str(n)) or {}).get('gcs'))}" for n in PREDICT) + " |")
    rate = gcs_rate(trials)
    lines.append("")
    lines.append(f"host: fits this host's CPUs, shared by every emulated node (an upper bound); gcs: fits the GCS's "
                 f"registration rate R = {fmt(rate)}/s, measured in the Ray-alone trials only (sf starts its nodes "
                 "in turns, so its own rate is sf's pacing, not the GCS's limit)")
    return "\n".join(lines)


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# --- the run --------------------------------------------------------------------------------

def cluster_nodes() -> int:
    proc = common.run(["sinfo", "-h", "-N", "-p", "all", "-o", "%N"], check=False)
    return len(set(proc.stdout.split())) if proc.returncode == 0 else 0


def scale_site(work: Path, largest: int) -> Path:
    """The benchmarks' site, with a barrier timeout that a host starting `largest` nodes on
    shared CPUs can meet (a bring-up slower than that is still a failure, just a later one)."""
    import yaml

    path = common.bench_site(work)
    data = yaml.safe_load(path.read_text())
    data["ray"]["barrier_timeout_s"] = max(int(data["ray"].get("barrier_timeout_s", 120)), 60 + 4 * largest)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--nodes", default=",".join(map(str, SIZES)))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--site", type=Path, help="the site to start from (default: site/dev.yaml)")
    p.add_argument("--sf", help="the sf command to submit with (default: the one beside this python)")
    p.add_argument("--budget-s", type=float, help="start no trial after this many seconds")
    p.add_argument("--once", default="", help="METHOD:N,... run in the first repetition only (e.g. ray:64, "
                                              "which cannot come up on one host: its failure is known)")
    p.add_argument("--fit", type=Path, help="print the tables and model of an earlier result file, run nothing")
    args = p.parse_args(argv)
    if args.fit:
        print(table(json.loads(args.fit.read_text())))
        return 0
    if not (args.work and args.out):
        p.error("--work and --out are needed to run (or --fit FILE)")
    if args.site:
        common.BASE_SITE = args.site.resolve()
    if args.sf:
        common.SF = args.sf
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    have = cluster_nodes()
    wanted = [int(n) for n in args.nodes.split(",")]
    sizes = [n for n in wanted if n <= have]
    if sizes != wanted:
        log(f"the cluster has {have} nodes in partition all: skipping N={[n for n in wanted if n > have]} "
            f"(SFDEV_NODES=64 scripts/dev-cluster up, see docs/scale.md)")
    methods = [m for m in args.methods.split(",") if m]
    site, env = scale_site(work, max(sizes)), bringup.baseline_env(work)
    exps = {n: bringup.write_experiment(work, f"scale{n}", n) for n in sizes}
    directives = {n: bringup.sf_directives(exps[n], site) for n in sizes}
    once = {tuple(x.split(":")) for x in args.once.split(",") if x}
    result = {"sizes": sizes, "skipped": [n for n in wanted if n > have], "methods": methods, "reps": args.reps,
              "host": {"cpus": os.cpu_count(), "load": common.load_average(), "cluster_nodes": have},
              "site": str(common.BASE_SITE), "budget_s": args.budget_s, "once": sorted(":".join(x) for x in once),
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "trials": []}
    # every repetition runs each N, the methods' order rotating between repetitions
    planned = [(rep, n, method) for rep in range(args.reps) for n in sizes
               for method in methods[rep % len(methods):] + methods[: rep % len(methods)]
               if rep == 0 or (method, str(n)) not in once]
    t0 = time.monotonic()
    for rep, n, method in planned:
        if args.budget_s is not None and time.monotonic() - t0 > args.budget_s:
            result["stopped"] = f"budget of {args.budget_s:.0f} s spent before rep {rep} N={n} {method}"
            log(result["stopped"] + ": the trials that ran are kept")
            break
        if not common.wait_idle_nodes(n, "all", timeout=180):
            log(f"fewer than {n} idle nodes after 180 s; submitting anyway (it will queue)")
        load = common.load_average()
        try:
            trial = trial_sf(exps[n], site, n) if method == "sf" else trial_ray(n, directives[n], work, env)
        except Exception as exc:  # one broken trial must not lose the others
            trial = {"method": method, "nodes": n, "ok": False, "error": f"{exc.__class__.__name__}: {exc}"}
        trial.update(rep=rep, load_before=load)
        result["trials"].append(trial)
        common.save(args.out, result)
        log(f"rep {rep} N={n} {method:3s} bringup={trial.get('bringup_s')}s head={trial.get('head_start_s')}s "
            f"regs={trial.get('registered_nodes')} state={trial.get('state')} load={load[0]}"
            + (f" node_retries={trial['node_retries']}" if trial.get("node_retries") else "")
            + ("" if trial.get("ok") else f" FAILED {str(trial.get('error') or trial.get('reason'))[-200:]}"))
    result["models"] = {m: fit(result["trials"], m) for m in methods}
    common.save(args.out, result)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
