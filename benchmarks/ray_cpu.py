"""CPU seconds of one 2-node `sf submit examples/grpo --preflight` job, two versions of sf side by
side (issue 36.5: the cluster tests are CPU-bound on 2 cores; most of a job's CPU is Ray's own).

    scripts/dev-cluster exec -- .venv/bin/python benchmarks/ray_cpu.py [--base REV] [--reps 3]

`base` is sf at REV (default HEAD) extracted with `git archive`; `work` is this checkout as it is
(uncommitted edits included). Each repetition submits one preflight job from each, the order
swapped every repetition so drift in the host's load falls on both. While a job runs, every
process of it (the pids in its Slurm freezer cgroups: batch step, node steps, the preflight
driver, every Ray process) is sampled every SAMPLE_S: a process's CPU is the largest
utime+stime seen of it. What a process spends after its last sample, and processes that live
shorter than SAMPLE_S, are missed, the same in both versions. Printed: per job its state, CPU-s,
wall (first to last process seen) and the CPU by process kind; then the medians and work/base.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from cpu_cost import _label  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.05
WORK = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev")) / "bench" / "ray_cpu"


def job_pids(job_id: str) -> set[int]:
    pids = set()
    for procs in glob.glob(f"/sys/fs/cgroup/freezer/slurm_*/uid_*/job_{job_id}/step_*/cgroup.procs"):
        try:
            pids.update(int(p) for p in Path(procs).read_text().split())
        except OSError:
            pass
    return pids


def cpu_ticks(pid: int) -> tuple[str, int] | None:
    """(start time, utime+stime) of a live process: the start time tells a reused pid apart."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[19], int(fields[11]) + int(fields[12])


def kind(pid: int) -> str | None:
    """What a process is: `launcher.injob node`, raylet, Ray's agents, a Ray worker by its
    title (ray::IDLE: prestarted and never used), None when it is gone."""
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
    except OSError:
        return None
    if args[0].startswith("ray::"):
        return args[0].split()[0]
    if "launcher.injob" in args:
        return " ".join(args[args.index("launcher.injob"):][:2])
    for i, arg in enumerate(args[:3]):
        if arg.rsplit("/", 1)[-1] == "sf":  # the CLI, by its subcommand
            return " ".join(["sf", *args[i + 1:i + 2]])
    if args[0].startswith("slurmstepd"):
        return "slurmstepd"
    label = _label(pid)
    return None if label == "?" else label


def measure(job_id: str, timeout: float = 300) -> dict:
    """Sample the job's processes until it ends: CPU-s in all, by process kind, and wall."""
    seen: dict[tuple[int, str], list] = {}  # (pid, start) -> [label, ticks]
    first = last = None
    deadline = time.monotonic() + timeout
    next_state = 0.0
    state = "PENDING"
    while time.monotonic() < deadline:
        pids = job_pids(job_id)
        for pid in pids:
            got = cpu_ticks(pid)
            if got:
                key = (pid, got[0])
                row = seen.setdefault(key, ["?", 0])
                row[0] = kind(pid) or row[0]  # the last name: a fork before its exec, a worker's title
                row[1] = max(row[1], got[1])
        if pids:
            first = first or time.monotonic()
            last = time.monotonic()
        if time.monotonic() >= next_state:
            state = common.job_state(job_id)
            next_state = time.monotonic() + 0.5
            if state in common.TERMINAL or state == "GONE":
                break
        time.sleep(SAMPLE_S)
    else:
        common.scancel(job_id)
    by_kind: dict[str, float] = {}
    for label, ticks in seen.values():
        by_kind[label] = by_kind.get(label, 0) + ticks / HZ
    return {"state": state, "cpu_s": round(sum(t for _, t in seen.values()) / HZ, 2),
            "wall_s": round((last - first) if first else 0, 1), "processes": len(seen),
            "by_kind": {k: round(v, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])}}


def host_ticks() -> int:
    """Every CPU's busy time since boot (/proc/stat: user, nice, system, irq, softirq, steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[i] for i in (0, 1, 2, 5, 6, 7))


def watch(argv: list[str], sample_s: float = 0.1) -> int:
    """Run argv (e.g. one pytest file) and sample every process of the host while it runs:
    CPU-s by process kind, and the host's own busy time over the same span (which also counts
    what lived shorter than a sample, and this sampler)."""
    seen: dict[tuple[int, str], list] = {}
    t0, host0 = time.monotonic(), host_ticks()
    child = subprocess.Popen(argv)
    rounds = 0
    while child.poll() is None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            got = cpu_ticks(int(entry))
            if got:
                # a process already running at the start counts from there on
                row = seen.setdefault((int(entry), got[0]), [None, 0, got[1] if rounds == 0 else 0])
                if row[0] is None or rounds % 10 == 0:  # a worker's title changes; cmdlines cost
                    row[0] = kind(int(entry)) or row[0] or "?"
                row[1] = max(row[1], got[1])
        rounds += 1
        time.sleep(sample_s)
    wall, host = time.monotonic() - t0, (host_ticks() - host0) / HZ
    by_kind: dict[str, float] = {}
    for label, ticks, before in seen.values():
        by_kind[label or "?"] = by_kind.get(label or "?", 0) + (ticks - before) / HZ
    print(f"\n{' '.join(argv)}: rc {child.returncode}, {wall:.0f} s wall, host busy {host:.0f} CPU-s "
          f"({host / wall / (os.cpu_count() or 1):.0%} of {os.cpu_count()} CPUs); sampled processes' CPU by kind "
          f"(sampled: {sum(by_kind.values()):.0f} CPU-s):")
    for name, cpu in sorted(by_kind.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {cpu:8.1f}  {name}")
    return child.returncode


def trial(tree: Path | None, driver: str | None = None) -> dict:
    """One preflight job submitted from `tree` (None: this checkout); with `driver`, a job
    whose driver is that shell command instead (SF_TEST_DRIVER: what a Ray left idle costs)."""
    env = dict(os.environ, **({"PYTHONPATH": str(tree)} if tree else {}),
               **({"SF_TEST_DRIVER": driver} if driver else {}))
    # from the tree itself: the job's `python -m launcher.injob` finds `launcher` in the
    # submit directory before the PYTHONPATH sf renders
    proc = common.run([common.SF, "submit", str(common.REPO / "examples" / "grpo"),
                       *([] if driver else ["--preflight"]), "--json"],
                      timeout=120, env=env, cwd=tree or common.REPO)
    info = json.loads(proc.stdout[proc.stdout.index("{"):])
    out = {"job_id": info["job_id"], **measure(info["job_id"])}
    common.remove_temp_dirs(info["job_id"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the git revision to compare this checkout with")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--driver", help="a shell command run as the driver instead of the preflight, e.g. 'sleep 60'")
    parser.add_argument("--watch", nargs=argparse.REMAINDER,
                        help="instead: run this command and print the host's CPU by process kind while it runs")
    args = parser.parse_args()
    if args.watch:
        return watch(args.watch)
    base = WORK / "base"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(common.REPO), "archive", args.base], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
    os.chmod(WORK, 0o755)
    results: dict[str, list[dict]] = {"base": [], "work": []}
    for rep in range(args.reps):
        for name in (("base", "work") if rep % 2 == 0 else ("work", "base")):
            common.wait_idle_nodes(2, "train", timeout=120)
            row = trial(base if name == "base" else None, args.driver)
            results[name].append(row)
            print(json.dumps({"version": name, "rep": rep, **row}), flush=True)
    print(f"\nmedians over {args.reps} repetition(s), base = {args.base}, work = this checkout:")
    for key in ("cpu_s", "wall_s"):
        a = statistics.median(r[key] for r in results["base"])
        b = statistics.median(r[key] for r in results["work"])
        print(f"  {key:7} base {a:7.2f}  work {b:7.2f}  work/base {b / a:.2f}")
    failed = [r for rows in results.values() for r in rows if r["state"] != "COMPLETED"]
    for r in failed:
        print(f"  job {r['job_id']} ended {r['state']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
