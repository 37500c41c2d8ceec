"""Write benchmarks/RESULTS.md from one run's raw results (a folder of JSON files).

    python benchmarks/report.py RESULTS_DIR [--md benchmarks/RESULTS.md]

RESULTS_DIR holds meta.json, bringup.json, cpu.json, login.json, monitor.json and
requeue.json as written by benchmarks/suite.py; whatever is missing is reported missing.
Targets are checked here exactly as issue 7 states them; nothing is loosened.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, summary  # noqa: E402

METHOD_NAMES = {"sf": "sf", "verl_example": "verl example (sleep 10 + 5/worker)",
                "naive_batched": "naive batched (`ray status` poll)"}
ISSUE_REFERENCE = {"verl_example": {1: 10.8, 2: 15.8, 4: 26.0}, "naive_batched": {1: 4.3, 2: 5.5, 4: 10.0}}


def load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def stat_cells(values: list[float]) -> list[str]:
    s = summary(values)
    return [str(s["n"]), fmt(s["median"]), f"{fmt(s['min'])}-{fmt(s['max'])}", fmt(s["spread"])]


def _last_line(text) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[-1][:200] if lines else ""


def table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def verdict(ok: bool | None) -> str:
    return "**met**" if ok else ("**MISSED**" if ok is not None else "not measured")


# --- static check: sleeps in sf's in-job code --------------------------------------------------

def sleeps_in_sf() -> list[dict]:
    """Every sleep in the in-job code and the job template: a poll interval (inside a loop
    that waits for a condition) or a fixed sleep (anything else)."""
    found = []
    for path in sorted((REPO / "launcher" / "injob").glob("*.py")):
        tree = ast.parse(path.read_text())
        parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        lines = path.read_text().splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "sleep":
                up, in_loop = parents.get(node), False
                while up is not None:
                    if isinstance(up, (ast.While, ast.For)):
                        in_loop = True
                        break
                    if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        break
                    up = parents.get(up)
                text = lines[node.lineno - 1].strip()
                arg = node.args[0] if node.args else None
                named_poll = isinstance(arg, ast.Name) and "poll" in arg.id.lower()
                kind = "poll interval" if (in_loop or named_poll) and "let the" not in text else "fixed sleep"
                found.append({"where": f"{path.relative_to(REPO)}:{node.lineno}", "kind": kind, "line": text})
    for path in sorted((REPO / "templates").glob("*.j2")):
        for i, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\bsleep\b", line) and not line.lstrip().startswith("#"):
                found.append({"where": f"{path.relative_to(REPO)}:{i}", "kind": "fixed sleep", "line": line.strip()})
    return found


# --- sections ---------------------------------------------------------------------------------

def section_meta(meta: dict | None) -> list[str]:
    if not meta:
        return ["(meta.json missing)"]
    load = meta.get("load_samples") or []
    loads = [s[1] for s in load]
    out = [
        f"- Date: {meta.get('started_utc')} to {meta.get('finished_utc')} (UTC); command: `{meta.get('command')}`",
        f"- Machine: {meta.get('nproc')} CPUs ({meta.get('cpu_model')}), {meta.get('mem_total_gb')} GiB memory, "
        f"kernel {meta.get('kernel')}",
        f"- Slurm {meta.get('slurm_version')}; Ray {meta.get('ray_version')} and verl {meta.get('verl_version')} "
        f"(runtime {meta.get('runtime')}); sf at commit {meta.get('sf_commit')}"
        + (" (working tree had uncommitted changes to sf's code)" if meta.get("sf_dirty") else ""),
        f"- Dev cluster: {meta.get('cluster_nodes') or 8} emulated nodes dev1..dev{meta.get('cluster_nodes') or 8} "
        f"({meta.get('node_cpus', '?')} CPUs, 4 fake GPUs each as Slurm and Ray see them) on this one "
        f"host, in network namespace `sfdev`; every Ray process of every node shares the host's "
        f"{meta.get('nproc')} cores.",
    ]
    if loads:
        out.append(f"- Load average (1 min) during the run, sampled every 10 s: median {statistics.median(loads):.2f}, "
                   f"min {min(loads):.2f}, max {max(loads):.2f} (before the run: {meta.get('load_before')}). "
                   f"Other users' jobs seen at trial starts: {meta.get('other_jobs_seen', 'see bringup.json')}.")
    return out


def section_bringup(data: dict | None, cpu: dict | None, targets: list) -> list[str]:
    if not data:
        targets += [("sf <= 0.3 x verl example at N=4 and N=8", None, "bring-up not run"),
                    ("sf faster than naive batched at every N", None, "bring-up not run"),
                    ("barrier passes within 0.5 s of the last node registering", None, "bring-up not run")]
        return ["(bringup.json missing)"]
    trials = data["trials"]
    sizes, methods = data["sizes"], data["methods"]
    ok = lambda t: t.get("ok") and t.get("bringup_s") is not None  # noqa: E731
    vals = {(m, n): [t["bringup_s"] for t in trials if t["method"] == m and t["nodes"] == n and ok(t)]
            for m in methods for n in sizes}
    med = {k: (statistics.median(v) if v else None) for k, v in vals.items()}
    out = ["Seconds from the start of the job's batch script (its process start, from /proc, same for every "
           "method) until all N nodes are in the Ray cluster: sf's `all_joined` phase; for the verl example "
           "the later of the end of its sleep loop and all N nodes alive in the GCS; for the naive script "
           "`ray status` listing N active nodes. Medians over the repetitions; spread = max - min.", ""]
    rows = []
    for n in sizes:
        for m in methods:
            ref = ISSUE_REFERENCE.get(m, {}).get(n)
            idle = [t["host_idle_fraction"] for t in trials if t["method"] == m and t["nodes"] == n and ok(t)
                    and t.get("host_idle_fraction") is not None]
            rows.append([n, METHOD_NAMES.get(m, m), *stat_cells(vals[(m, n)]),
                         " ".join(fmt(v) for v in vals[(m, n)]), fmt(ref, 1) if ref else "-",
                         f"{100 * statistics.median(idle):.0f}%" if idle else "-"])
    out.append(table(["N", "method", "runs", "median s", "min-max", "spread", "raw", "issue's reference",
                      "host CPU idle during it"], rows))
    out += ["", "(\"host CPU idle during it\": share of the host's 2 cores left idle between the batch start and "
            "readiness, from /proc/stat every 0.25 s, median over the runs: near 0% means the bring-up was "
            "CPU-bound, by its own processes and anything else running on the host.)"]
    failed = [t for t in trials if not ok(t)]
    if failed:
        out += ["", "Trials that did not produce a bring-up time (left out of the medians):", ""]
        out += [f"- rep {t.get('rep')} N={t.get('nodes')} {t.get('method')}: job {t.get('job_id')} "
                f"state {t.get('state')}, {t.get('registered_nodes')} nodes registered, "
                f"{_last_line(t.get('error') or t.get('reason'))}" for t in failed]
    # sf's own phases
    sf_alloc = {n: [t["allocated_to_joined_s"] for t in trials if t["method"] == "sf" and t["nodes"] == n
                    and t.get("allocated_to_joined_s") is not None] for n in sizes}
    out += ["", "sf's own phases (`allocated` -> `all_joined` in events.jsonl; `allocated` is recorded by the "
            "supervisor once Python is up and the hosts are known, so this leaves out the batch script's first "
            "fraction of a second):", ""]
    out.append(table(["N", "runs", "median s", "min-max", "spread", "raw"],
                     [[n, *stat_cells(sf_alloc[n]), " ".join(fmt(v) for v in sf_alloc[n])] for n in sizes]))
    # ratios
    out += ["", "Ratios of medians:", ""]
    rows = []
    for n in sizes:
        s, v, nb = med.get(("sf", n)), med.get(("verl_example", n)), med.get(("naive_batched", n))
        rows.append([n, fmt(s), fmt(v), fmt(nb), fmt(s / v if s and v else None, 3),
                     fmt(s / nb if s and nb else None, 3)])
    out.append(table(["N", "sf s", "verl example s", "naive s", "sf / verl example", "sf / naive"], rows))
    if med.get(("sf", 1)) and med.get(("sf", max(sizes))):
        big = max(sizes)
        a1 = statistics.median(sf_alloc[1]) if sf_alloc.get(1) else None
        ab = statistics.median(sf_alloc[big]) if sf_alloc.get(big) else None
        out += ["", f"sf(N={big}) / sf(N=1) = {med[('sf', big)] / med[('sf', 1)]:.2f} from the batch start "
                f"({fmt(med[('sf', big)])} s / {fmt(med[('sf', 1)])} s)"
                + (f"; {ab / a1:.2f} on sf's own allocated -> all_joined ({fmt(ab)} s / {fmt(a1)} s)" if a1 and ab else "")
                + "."]
    # CPU floor
    floors: dict[int, float] = {}
    if cpu and cpu.get("reps"):
        head = [r["nodes"]["head"].get("cpu_at_registered_s") for r in cpu["reps"] if r.get("nodes", {}).get("head")]
        work = [r["nodes"]["worker"].get("cpu_at_registered_s") for r in cpu["reps"] if r.get("nodes", {}).get("worker")]
        head = [h for h in head if h is not None]
        work = [w for w in work if w is not None]
        nproc = cpu["reps"][0].get("nproc") or 2
        if head and work:
            hm, wm = statistics.median(head), statistics.median(work)
            out += ["", f"CPU floor: a head costs {hm:.2f} CPU s and a worker {wm:.2f} CPU s until registered "
                    f"(see CPU cost below); N nodes need about {hm:.2f} + (N-1) x {wm:.2f} CPU s, i.e. at least "
                    f"that / {nproc} s of wall time on {nproc} cores even with perfect parallelism (and nothing "
                    "else running), whatever the algorithm:", ""]
            rows = []
            for n in sizes:
                floor = (hm + (n - 1) * wm) / nproc
                floors[n] = floor
                s = med.get(("sf", n))
                sf_trials = [t for t in trials if t["method"] == "sf" and t["nodes"] == n]
                drv = [t["to_driver_s"] for t in sf_trials if ok(t) and t.get("to_driver_s") is not None]
                d = statistics.median(drv) if drv else None
                rows.append([n, fmt(hm + (n - 1) * wm), fmt(floor), fmt(s), fmt(s - floor if s else None),
                             fmt(s / floor if s else None), fmt(d), fmt(d / floor if d else None),
                             f"{sum(1 for t in sf_trials if not ok(t))} of {len(sf_trials)}"])
            out.append(table(["N", "CPU s to start N nodes", f"floor on {nproc} cores, s", "sf median s",
                              "sf above the floor, s", "sf / floor", "sf to driver s (health check incl.)",
                              "to driver / floor", "sf bring-up failures"], rows))
            walls = [r["nodes"]["head"].get("wall_to_registered_s") for r in cpu["reps"]
                     if r.get("nodes", {}).get("head")]
            walls = [w for w in walls if w is not None]
            if walls:
                hw = statistics.median(walls)
                # Ray's head starts its processes partly one after another (CLI, GCS, then the
                # head's services, raylet, agents): its own wall time bounds N=1 from below
                out += ["", f"A Ray head alone (cpu_cost.py: the same `ray start` line in a Slurm step, no sf, nothing else "
                        f"starting) takes {fmt(hw)} s from exec to registered (median, raw "
                        f"{' '.join(fmt(w) for w in walls)}) = {hw / (hm / nproc):.2f} x its own CPU floor of "
                        f"{fmt(hm / nproc)} s: at N=1 no launcher gets nearer the floor than that on this host"
                        + (f"; sf's N=1 median against the head alone: {med[('sf', 1)] - hw:+.2f} s"
                           if med.get(("sf", 1)) else "") + "."]
            out += ["", f"(sf trials ran with ray.health_check={data.get('health_check', 'preflight')} and "
                    f"ray.start_retries={data.get('start_retries', 2)}; a failure is a trial whose job did not reach "
                    "its driver with every node joined.)"]
    # barrier lag
    lags = [t["barrier_lag_s"] for t in trials if t["method"] == "sf" and t.get("barrier_lag_s") is not None]
    out += ["", "Barrier: `all_joined` (the supervisor acting on the barrier's pass) minus the last "
            "\"Registering new node\" line in the head's GCS log (gcs_server.out), per sf trial:", ""]
    if lags:
        ls = summary(lags)
        out.append(f"median {fmt(ls['median'])} s, min {fmt(ls['min'])} s, max {fmt(ls['max'])} s over {ls['n']} "
                   f"trials; raw: {' '.join(fmt(v) for v in lags)}")
        over = [v for v in lags if v > 0.5]
        barrier_ok = not over
        poll = re.search(r"^POLL_S = ([0-9.]+)", (REPO / "launcher/injob/barrier.py").read_text(), re.M)
        woken = "select" in (REPO / "launcher/injob/supervise.py").read_text()
        why = (f"{len(over)} of {len(lags)} trials over 0.5 s (barrier polls the GCS every "
               f"{poll.group(1) if poll else '?'} s; the supervisor "
               + ("wakes on the barrier's result" if woken else "notices the barrier's exit on a 0.5 s tick")
               + "); the rest is scheduling delay: the barrier, the GCS and the supervisor wait for a core "
               "while every node's Ray processes start on the same 2 cores" if over else "")
        targets.append(("barrier passes within 0.5 s of the last node registering", barrier_ok,
                        why or f"max {fmt(ls['max'])} s"))
    else:
        targets.append(("barrier passes within 0.5 s of the last node registering", None, "no GCS log read"))
    # targets
    for n in (4, 8):
        s, v = med.get(("sf", n)), med.get(("verl_example", n))
        if s and v:
            met = s <= 0.3 * v
            why = f"sf {fmt(s)} s vs 0.3 x {fmt(v)} s = {fmt(0.3 * v)} s (ratio {s / v:.3f})"
            if not met:
                idle = [t["host_idle_fraction"] for t in trials if t["method"] == "sf" and t["nodes"] == n
                        and ok(t) and t.get("host_idle_fraction") is not None]
                nproc = (cpu or {}).get("reps", [{}])[0].get("nproc") or 2
                parts = []
                if n in floors:
                    parts.append(f"starting {n} Ray nodes costs about {fmt(floors[n] * nproc)} CPU s, i.e. at least "
                                 f"{fmt(floors[n])} s on {nproc} idle cores")
                if idle:
                    busy = statistics.median(idle) < 0.25
                    parts.append(f"the host's CPU was {100 * statistics.median(idle):.0f}% idle during sf's trials"
                                 + (" (CPU-bound: sf's own processes plus anything else on the host)" if busy else ""))
                lags = [t["barrier_lag_s"] for t in trials if t["method"] == "sf" and t["nodes"] == n
                        and t.get("barrier_lag_s") is not None]
                if lags:
                    parts.append(f"the barrier added {fmt(statistics.median(lags))} s after the last registration")
                parts.append(f"the verl example spreads the same CPU over its {10 + 5 * (n - 1)} s of sleeps")
                why += ". Why: " + "; ".join(parts)
            targets.append((f"sf <= 0.3 x verl example at N={n}", met, why))
        else:
            targets.append((f"sf <= 0.3 x verl example at N={n}", None, "missing trials"))
    losses = []
    for n in sizes:
        s, nb = med.get(("sf", n)), med.get(("naive_batched", n))
        if s is None or nb is None:
            losses.append(f"N={n}: missing")
        elif not s < nb:
            losses.append(f"N={n}: sf {fmt(s)} s vs naive {fmt(nb)} s")
    detail = "; ".join(f"N={n}: {fmt(med.get(('sf', n)))} vs {fmt(med.get(('naive_batched', n)))} s" for n in sizes)
    targets.append(("sf faster than the naive batched script at every N", not losses,
                    ("slower or missing at " + "; ".join(losses) + ". " if losses else "") + detail))
    return out


def section_fix(data: dict | None) -> list[str]:
    if not data:
        return ["(fix.json missing: not run)"]
    trials = [t for t in data["trials"] if t.get("ok") and t.get("bringup_s") is not None]
    rows = []
    for n in data["sizes"]:
        these = [t for t in trials if t["nodes"] == n]
        lags = [t["barrier_lag_s"] for t in these if t.get("barrier_lag_s") is not None]
        rows.append([n, *stat_cells([t["bringup_s"] for t in these]),
                     " ".join(fmt(t["bringup_s"]) for t in these), " ".join(fmt(v) for v in lags)])
    if "sf_prefix" in data.get("methods", []):
        intro = ("Not a target, for a before/after: sf as it was before the barrier fix (the same commit with "
                 "`benchmarks/barrier_fix.patch` taken out again: barrier polling every 0.5 s, the supervisor "
                 "noticing its exit on a 0.5 s tick), same trial as above, run after the main matrix:")
    else:
        intro = ("Not a target: sf run from a copy of the same commit with `benchmarks/barrier_fix.patch` applied "
                 "(barrier polls every 0.1 s and exits right after its result; the supervisor waits on the "
                 "barrier's stdout), same trial as above, after the main matrix:")
    return [intro, "", table(["N", "runs", "median s", "min-max", "spread", "raw", "barrier lag s (raw)"], rows)]


def section_cpu(cpu: dict | None) -> list[str]:
    if not cpu or not cpu.get("reps"):
        return ["(cpu.json missing)"]
    rows = []
    for r in cpu["reps"]:
        for role in ("head", "worker"):
            n = (r.get("nodes") or {}).get(role) or {}
            rows.append([r["rep"], role, fmt(n.get("cpu_at_registered_s")), fmt(n.get("wall_to_registered_s")),
                         fmt(n.get("cpu_after_5s_s")), n.get("processes_at_registered", "-")])
    out = ["One 2-node job per repetition starts a head, then a worker, each alone, with sf's exact `ray start` "
           "line; CPU = user+system seconds of the node's whole process tree (/proc).", "",
           table(["rep", "node", "CPU s until registered", "wall s until registered", "CPU s 5 s later",
                  "processes"], rows)]
    first = cpu["reps"][0].get("nodes") or {}
    for role in ("head", "worker"):
        parts = (first.get(role) or {}).get("by_process")
        if parts:
            out += ["", f"Where a {role}'s CPU goes until it registers (rep 0, CPU s per process, including what "
                    "each reaped): " + ", ".join(f"{name} {sec:.2f}" for name, sec in parts) + "."]
    rs = [r.get("ray_status", {}).get("cpu_s") for r in cpu["reps"] if r.get("ray_status")]
    gq = [r.get("gcs_query_fresh_python", {}).get("cpu_s") for r in cpu["reps"] if r.get("gcs_query_fresh_python")]
    if rs:
        out += ["", f"One `ray status` (the naive script's poll): median {fmt(statistics.median(rs))} CPU s per call. "
                f"One GCS node-table query from a fresh Python (sf's barrier pays this once, then reuses its "
                f"connection; a query on a live connection is a single RPC): median "
                f"{fmt(statistics.median(gq)) if gq else '-'} CPU s."]
    return out


def section_login(data: dict | None, targets: list) -> list[str]:
    if not data:
        targets += [("`sf --help` < 0.3 s", None, "not run"), ("`sf submit --dry-run` < 1.5 s", None, "not run")]
        return ["(login.json missing)"]
    rows = []
    meds = {}
    for name, runs in data["commands"].items():
        wall = [r["wall_s"] for r in runs]
        rss = [r["peak_rss_mb"] for r in runs]
        cpu = [r["cpu_s"] for r in runs]
        meds[name] = statistics.median(wall)
        rows.append([f"`{name}`", *stat_cells(wall), fmt(statistics.median(cpu)), fmt(statistics.median(rss), 1),
                     " ".join(fmt(w) for w in wall), ",".join(sorted({str(r["rc"]) for r in runs}))])
    out = ["Wall time around each command (child process, warm page cache); CPU and peak RSS from GNU time. "
           "`sbatch --test-only` gets the very script `sf render examples/grpo` writes.", "",
           table(["command", "runs", "median wall s", "min-max", "spread", "median CPU s", "peak RSS MB", "raw",
                  "exit"], rows)]
    help_med = meds.get("sf --help")
    dry_med = meds.get("sf submit examples/grpo --dry-run")
    test_med = meds.get("sbatch --test-only (same script)")
    targets.append(("`sf --help` < 0.3 s", help_med is not None and help_med < 0.3, f"median {fmt(help_med, 3)} s"))
    targets.append(("`sf submit --dry-run` < 1.5 s", dry_med is not None and dry_med < 1.5,
                    f"median {fmt(dry_med, 3)} s (sbatch --test-only of the same script: {fmt(test_med, 3)} s)"))
    return out


def section_monitor(data: dict | None, targets: list) -> list[str]:
    if not data:
        targets.append(("one sacct call per poll at 100 tasks", None, "not run"))
        return ["(monitor.json missing)"]
    rows = []
    for size in data["sizes"]:
        cli = data["cli"].get(str(size), [])
        inproc = data["inproc"].get(str(size), [])
        calls = sorted({r["slurm_calls"] for r in cli})
        sacct = sorted({r["sacct_calls"] for r in cli})
        commands = sorted({c for r in cli for c in r["commands"]})
        rows.append([size, len(cli), ",".join(map(str, calls)), ",".join(map(str, sacct)), ",".join(commands),
                     fmt(statistics.median([r["wall_s"] for r in cli]), 3) if cli else "-",
                     f"{fmt(min(r['wall_s'] for r in cli), 3)}-{fmt(max(r['wall_s'] for r in cli), 3)}" if cli else "-",
                     ",".join(map(str, sorted({r["slurm_calls"] for r in inproc}))),
                     fmt(statistics.median([r["wall_s"] for r in inproc]), 3) if inproc else "-",
                     "; ".join(" ".join(f"{k}:{v}" for k, v in sorted(r["point_states"].items())) for r in cli[:1])])
    over = data.get("overview") or []
    out = [f"Real job arrays of 1, 10 and 100 `sleep {data.get('sleep_s')}` tasks (4 CPUs each, so at most "
           "32 run at once on the 8 nodes: the 100-task array has tasks pending and running at once), each followed "
           "by a sweep run record. `cli` = `sf status SWEEP --json` as a process, Slurm commands counted by "
           "wrappers in SF_SLURM_BIN_DIR; `in-process` = launcher.monitor.poll.poll with launcher.slurm.CALLS.", "",
           table(["array tasks", "polls", "Slurm cmds / poll (cli)", "sacct / poll", "commands",
                  "median wall s (cli)", "min-max", "Slurm cmds / poll (in-process)", "median wall s (in-process)",
                  "task states at first poll"], rows)]
    if over:
        out += ["", f"Overview `sf status` over all {len(data['sizes'])} sweeps ({sum(data['sizes'])} tasks) in one "
                f"poll: Slurm commands per poll {sorted({r['slurm_calls'] for r in over})}, median wall "
                f"{fmt(statistics.median([r['wall_s'] for r in over]), 3)} s."]
    cli100 = data["cli"].get("100", [])
    in100 = data["inproc"].get("100", [])
    # one sacct for everything; since 2026-12-01 one squeue besides for the ids slurmdbd has
    # not recorded or still holds as PENDING (it lags the controller): O(1) calls either way
    ok = bool(cli100) and all(r["sacct_calls"] == 1 and r["slurm_calls"] <= 2
                              and set(r["commands"]) <= {"sacct", "squeue"} for r in cli100) and \
        all(r["sacct_calls"] == 1 and r["slurm_calls"] <= 2 and set(r["calls"]) <= {"total", "sacct", "squeue"}
            for r in in100)
    targets.append(("one sacct call per poll at 100 tasks (plus at most one squeue)", ok,
                    f"{len(cli100)} CLI polls and {len(in100)} in-process polls, Slurm commands per poll: "
                    f"{sorted({r['slurm_calls'] for r in cli100 + in100})}"))
    return out


def section_requeue(data: dict | None) -> list[str]:
    if not data:
        return ["(requeue.json missing)"]
    reps = data.get("reps") or []
    keys = [("requeued_phase_s", "trap's `requeued` phase"), ("left_running_s", "job leaves RUNNING"),
            ("running_again_s", "RUNNING again"), ("allocated_s", "`allocated` again"),
            ("last_registration_s", "last node registered in the GCS again"),
            ("all_joined_s", "`all_joined` again"), ("driver_started_s", "driver started again")]
    rows = []
    for key, label in keys:
        vals = [r.get(key) for r in reps if r.get(key) is not None]
        rows.append([label, *stat_cells(vals), " ".join(fmt(v) for v in vals)])
    lags = [r.get("barrier_lag_s") for r in reps if r.get("barrier_lag_s") is not None]
    out = [f"sf job {data.get('job_id')} ({data.get('nodes')} nodes, requeue on, at most "
           f"{data.get('max_requeues')} requeues), driver = a trivial long-running command (the experiment's "
           "main.py). Each repetition: `scancel --signal=USR1 --batch JOB` once the driver runs, then seconds "
           "from the signal to:", "", table(["event", "runs", "median s", "min-max", "spread", "raw"], rows), "",
           "The dev cluster's requeue delay is the credential lifetime (`AuthInfo=cred_expire=10` in slurm.conf): "
           "Slurm holds a requeued job's nodes for about that long, so \"running again\" cannot be much under "
           "10-12 s here; the rest is the new attempt's bring-up."]
    if lags:
        out += ["", f"Barrier lag in the requeued attempts (`all_joined` minus the last GCS registration): "
                f"{' '.join(fmt(v) for v in lags)} s."]
    if data.get("error"):
        out += ["", f"Error: {data['error']}"]
    return out


def write(folder: Path, md: Path) -> None:
    meta = load(folder, "meta")
    targets: list[tuple[str, bool | None, str]] = []
    where = folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder
    top = ["# Benchmark results", "",
           "Written by `benchmarks/report.py` from the raw results of one run of `benchmarks/run_all` "
           f"(raw JSON: `{where}`). How each number is measured: benchmarks/README.md.", "",
           "## Machine and run", ""]
    top += section_meta(meta)
    bring = load(folder, "bringup")
    cpu = load(folder, "cpu")
    body = ["", "## 1. Ray bring-up against node count", ""]
    body += section_bringup(bring, cpu, targets)
    body += ["", "### Before/after: sf without its barrier fix", ""]
    body += section_fix(load(folder, "fix"))
    body += ["", "### CPU cost of one node start", ""]
    body += section_cpu(cpu)
    body += ["", "## 2. Login-node cost", ""]
    body += section_login(load(folder, "login"), targets)
    body += ["", "## 3. Monitoring cost", ""]
    body += section_monitor(load(folder, "monitor"), targets)
    body += ["", "## 4. Requeue turnaround", ""]
    body += section_requeue(load(folder, "requeue"))
    sleeps = sleeps_in_sf()
    fixed = [s for s in sleeps if s["kind"] == "fixed sleep"]
    targets.append(("no fixed sleeps in sf", not fixed,
                    ("fixed: " + "; ".join(f"{s['where']} `{s['line']}`" for s in fixed)) if fixed
                    else f"{len(sleeps)} sleeps, all poll intervals inside wait loops"))
    body += ["", "## Sleeps in sf's in-job code and job template (static check)", "",
             table(["where", "kind", "line"], [[s["where"], s["kind"], f"`{s['line']}`"] for s in sleeps])
             if sleeps else "none"]
    fix = load(folder, "fix")
    fix_lags = [t["barrier_lag_s"] for t in (fix or {}).get("trials", []) if t.get("barrier_lag_s") is not None]
    if fix_lags:
        label = ("before the fix (barrier_fix.patch, in sf since 5b303b7) it was"
                 if "sf_prefix" in (fix or {}).get("methods", []) else "with benchmarks/barrier_fix.patch applied it was")
        targets = [(t, ok, why + (f"; {label} {' '.join(fmt(v) for v in fix_lags)} s (section 1)"
                                  if t.startswith("barrier") else ""))
                   for t, ok, why in targets]
    head = ["", "## Targets (issue 7)", "", table(["target", "result", "numbers / why"],
                                                   [[t, verdict(ok), why] for t, ok, why in targets])]
    notes = folder / "notes.md"
    if notes.is_file():
        head += ["", notes.read_text().strip()]
    md.write_text("\n".join(top + head + body) + "\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--md", type=Path, default=REPO / "benchmarks" / "RESULTS.md")
    args = p.parse_args(argv)
    write(args.folder.resolve(), args.md)
    print(args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
