"""CPU seconds one Ray node start costs, so CPU contention and algorithm can be told apart.

    python benchmarks/cpu_cost.py --work DIR --out FILE [--reps 3]     (login side)
    python cpu_cost.py job OUT_DIR                                      (inside the job)

One 2-node job per repetition (partition `all`, sf's resources). Inside it, the batch
step starts the head, then a worker, one at a time, each in its own srun with exactly the
`ray start --block` line sf would use (baseline_layout.py). For each node it records:

  wall_to_registered_s   srun started -> the node is alive in the GCS (polled every 0.05 s)
  cpu_at_registered_s    user+system CPU of the node's whole process tree (ray start and
                         every descendant: gcs_server, raylet, agents, workers; exited
                         ones through their parents' cutime/cstime) at that moment
  cpu_after_5s_s         the same 5 s later (what a started node keeps burning)

and the cost of the two readiness checks: one `ray status` (what the naive baseline polls)
and one GCS node-table query from a fresh Python (what sf's barrier and gcs_watch.py do
once per process, then reuse the connection), both under GNU time.
On 2 cores, N nodes starting at once need about N x cpu_at_registered_s of CPU: with
2 cores the bring-up cannot be shorter than N x cpu / 2, whatever the algorithm.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HZ = os.sysconf("SC_CLK_TCK")


# --- inside the job ---------------------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def tree_cpu(root: int) -> tuple[float, int]:
    total, parts = tree_parts(root)
    return total, len(parts)


def _label(pid: int) -> str:
    """A short name for a Ray process: gcs_server, raylet, or the Python script it runs."""
    try:
        args = [a.decode(errors="replace") for a in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0") if a]
    except OSError:
        return "?"
    if not args:
        return "?"
    if "-m" in args[:3]:
        return args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else "python -m"
    for arg in args[:3]:
        base = arg.rsplit("/", 1)[-1]
        if base == "main.py" and "runtime_env" in arg:
            return "ray::RuntimeEnvAgent"  # its process title, before it sets it
        if base.endswith(".py") or base in ("gcs_server", "raylet", "ray"):
            return base + (" start" if base == "ray" and "start" in args else "")
    return args[0].rsplit("/", 1)[-1]


def tree_parts(root: int) -> tuple[float, list[tuple[str, float]]]:
    """CPU seconds of root and all its descendants (live ones' own time plus what they
    reaped), and (process label, its CPU seconds) for each of them."""
    children: dict[int, list[int]] = {}
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st:
                stats[int(entry)] = st
                children.setdefault(int(st[1]), []).append(int(entry))
    total, parts, todo = 0, [], [root]
    while todo:
        pid = todo.pop()
        st = stats.get(pid)
        if not st:
            continue
        # fields from 3 on: utime=14, stime=15, cutime=16, cstime=17 -> indexes 11..14
        ticks = int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])
        total += ticks
        parts.append((_label(pid), round(ticks / HZ, 2)))
        todo.extend(children.get(pid, []))
    return total / HZ, sorted(parts, key=lambda p: -p[1])


def find_ray_start(temp: str, timeout: float = 30) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"start" in cmd and f"--temp-dir={temp}".encode() in cmd:
                return int(entry)
        time.sleep(0.01)
    return None


def gnu_time(argv: list[str]) -> dict:
    out = subprocess.run(["/usr/bin/time", "-f", "BXTIME %e %U %S %M", *argv], capture_output=True, text=True,
                         timeout=120)
    line = [l for l in out.stderr.splitlines() if l.startswith("BXTIME ")][-1].split()
    return {"wall_s": float(line[1]), "cpu_s": round(float(line[2]) + float(line[3]), 3),
            "peak_rss_mb": round(int(line[4]) / 1024, 1), "rc": out.returncode}


def job(out_dir: Path) -> int:
    from ray._raylet import GcsClient  # imported before any node starts: not in the timings

    out_dir.mkdir(parents=True, exist_ok=True)
    nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    layout = subprocess.run([sys.executable, str(HERE / "baseline_layout.py"), str(out_dir), *nodes],
                            capture_output=True, text=True, check=True).stdout.split()
    gcs = dict(t.split("=", 1) for t in layout)["GCS"]
    result = {"nodes": {}, "job_id": os.environ.get("SLURM_JOB_ID"), "nproc": os.cpu_count()}
    steps = []
    client = None
    for want, node in enumerate(nodes, start=1):
        role = "head" if want == 1 else "worker"
        temp = (out_dir / f"temp.{node}").read_text().strip()
        t0 = time.time()
        steps.append(subprocess.Popen(["srun", "--nodes=1", "--ntasks=1", "--overlap", "-w", node,
                                       str(HERE / "baseline_node.sh"), str(out_dir)],
                                      stdin=subprocess.DEVNULL))
        root = find_ray_start(temp)
        registered = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                client = client or GcsClient(address=gcs)
                info = client.get_all_node_info(timeout=5)
                if sum(1 for n in info.values() if getattr(n, "state", 0) == 0) >= want:
                    registered = time.time()
                    break
            except Exception:
                client = None if role == "head" else client
            time.sleep(0.05)
        row = {"role": role, "node": node, "root_pid": root}
        if registered and root:
            cpu, parts = tree_parts(root)
            row.update(wall_to_registered_s=round(registered - t0, 3), cpu_at_registered_s=round(cpu, 3),
                       processes_at_registered=len(parts), by_process=parts)
            time.sleep(5)
            cpu5, nproc5 = tree_cpu(root)
            row.update(cpu_after_5s_s=round(cpu5, 3), processes_after_5s=nproc5)
        result["nodes"][role] = row
        if role == "head":
            result["ray_status"] = gnu_time([str(Path(sys.executable).parent / "ray"), "status", f"--address={gcs}"])
            result["gcs_query_fresh_python"] = gnu_time(
                [sys.executable, "-c", "import sys; from ray._raylet import GcsClient; "
                 "print(len(GcsClient(address=sys.argv[1]).get_all_node_info(timeout=5)))", gcs])
    (out_dir / "cpu.json").write_text(json.dumps(result, indent=1))
    for step in steps:
        step.terminate()
    for step in steps:
        try:
            step.wait(timeout=15)
        except subprocess.TimeoutExpired:
            step.kill()
    return 0


# --- login side -------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    if argv[:1] == ["job"]:
        return job(Path(argv[1]))
    sys.path.insert(0, str(HERE))
    import common
    from bringup import sf_directives, write_experiment
    from common import log

    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    work = args.work.resolve()
    site = common.bench_site(work)
    directives = sf_directives(write_experiment(work, "cpu2", 2), site)
    ray = common.dev_site()["ray"]
    env = dict(os.environ, PYTHONPATH=str(common.REPO), BX_PORT_RANGE=f"{ray['port_range'][0]}-{ray['port_range'][1]}",
               BX_TEMP_ROOT=ray.get("temp_root", "/tmp"),
               BX_ADDR_PREFIX=(ray.get("node_address") or {}).get("prefix", "127.0.0"))
    env.update({str(k): str(v) for k, v in (common.dev_site().get("env") or {}).items()})  # as sf's jobs
    py = common.runtime_python()
    result = {"reps": []}
    for rep in range(args.reps):
        common.wait_idle_nodes(2, "all", timeout=300)
        out_dir = work / "cpu" / f"rep{rep}"
        out_dir.mkdir(parents=True, exist_ok=True)
        job_id = common.sbatch([*directives, "--job-name=bx-cpu", f"--output={work}/cpu/slurm-%j.out",
                                f"--wrap={py} {HERE / 'cpu_cost.py'} job {out_dir}"], env=env)
        state = common.wait_job_end(job_id, timeout=240)
        row = {"rep": rep, "job_id": job_id, "state": state, "load_before": common.load_average()}
        if (out_dir / "cpu.json").is_file():
            row.update(json.loads((out_dir / "cpu.json").read_text()))
        result["reps"].append(row)
        common.remove_temp_dirs(job_id)
        common.save(args.out, result)
        nodes = row.get("nodes", {})
        log(f"cpu rep {rep}: head {nodes.get('head', {}).get('cpu_at_registered_s')} CPU s in "
            f"{nodes.get('head', {}).get('wall_to_registered_s')} s, worker "
            f"{nodes.get('worker', {}).get('cpu_at_registered_s')} CPU s in "
            f"{nodes.get('worker', {}).get('wall_to_registered_s')} s; ray status "
            f"{(row.get('ray_status') or {}).get('cpu_s')} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
