"""Python stacks of every process of the job, node by node, with py-spy (issue 23, item 1).

Why py-spy: it reads a live (or frozen) process's Python frames from outside, needing no
hook in verl, Ray or the process, and it is what Ray itself uses (`ray stack` and the
dashboard's traceback view shell out to it; `ray[default]` installs it). Ray 2.60 offers
nothing that works without it: `ray stack` is a py-spy loop over `ray::` processes of the
local machine (any job's), and the dashboard's /worker/traceback needs the dashboard,
which sf jobs do not run by default. faulthandler needs a signal handler registered in
the process beforehand and a process that can still run it: a SIGSTOPped or a
GIL-deadlocked process never does. The dev runtime (verl-0.9.1) ships py-spy 0.4.3.

`python -m launcher.injob stacks --out DIR` runs on one node (one srun task per node,
--overlap, beside the Ray node step) and writes DIR/<node>.txt: for every Python process
of this job on this node (by Slurm's facts, never by environment variables, which any
user can set in a process of their own: the job's cgroup, `job_<id>` under this node's
`slurm[_<node>]` in /proc/PID/cgroup, else `scontrol listpids`; and owned by this job's user.
On a shared host, or with several emulated nodes on one machine, other jobs, other users
and other nodes are left out) except sf's own `launcher.injob` helpers and Ray's
daemons, a header line and `py-spy dump`. py-spy first pauses the process for a
consistent dump; a process that cannot be paused (SIGSTOPped: "Failed to suspend
process") is read without pausing (--nonblocking). The Ray workers of the node and,
on the head node, the driver are among them.

The supervisor side (save) starts one such srun per het group and waits a bounded time.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DUMP_TIMEOUT_S = 20  # one process; py-spy takes well under a second per process
SAVE_TIMEOUT_S = 90  # the whole dump, every node (srun start included)
STACKS_DIR = "stacks"
# Ray's own Python processes: no user frames in them, and several a node (`ray start
# --block` itself, the dashboard and its agent, the log monitor, the client server, the
# runtime-env agent, idle pool workers). Left out so the file shows verl's processes.
# (launcher.injob.ray_start is ray_start.MODULE, written out: sf doctor runs this file alone
# in a runtime, with no sf to import)
RAY_OWN_ARGS = ("ray.scripts.scripts", "launcher.injob.ray_start", "ray.util.client", "/ray/dashboard/",
                "/ray/_private/", "/ray/autoscaler/", "/ray/util/client/")
RAY_OWN_WORKERS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def py_spy_places(environ=None, python: str | None = None) -> list[Path]:
    """Where py-spy may be, in order: beside this Python (a venv's or conda env's bin/), in
    <entry>/bin of each PYTHONPATH entry (`pip install --target DIR` puts scripts in DIR/bin:
    sites that carry packages on PYTHONPATH), then every PATH directory."""
    environ = os.environ if environ is None else environ
    places = [Path(python or sys.executable).parent]
    places += [Path(entry) / "bin" for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    places += [Path(entry) for entry in environ.get("PATH", "").split(os.pathsep) if entry]
    return places


def find_py_spy(environ=None, python: str | None = None) -> str | None:
    for place in py_spy_places(environ, python):
        candidate = place / "py-spy"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def hang_limit(run_dir: str) -> float:
    """The job's hang limit from its plan.json (0: the watchdog is off). Read here with json
    alone: this file also runs as a script in a runtime without sf (`--find`)."""
    try:
        heal = json.loads((Path(run_dir) / "plan.json").read_text())["job"].get("heal") or {}
        from launcher.plan import HANG_TIMEOUT_S  # here: `--find` runs this file where sf is not installed

        return float(heal.get("hang_timeout_s", HANG_TIMEOUT_S))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0.0


def missing_line(hang_limit_s: float, environ=None, python: str | None = None) -> str | None:
    """One line naming a runtime without py-spy when a hang limit is set (None: found, or no
    limit): the watchdog still finds the hang, but the stacks it saves hold no frames."""
    if not hang_limit_s or hang_limit_s <= 0 or find_py_spy(environ, python):
        return None
    looked = ", ".join(str(p) for p in dict.fromkeys(py_spy_places(environ, python)))[:400]
    return (f"py-spy is not in the runtime ({python or sys.executable}): with a hang limit of "
            f"{hang_limit_s:g} s a hang's stacks (sf logs RUN --stacks) would hold no Python frames. "
            f"Fix: pip install py-spy into the runtime (or ray[default]); looked in: {looked}")


def preflight_warning(run_dir: str) -> str | None:
    """The preflight's line (it runs in the runtime's python, with the job's environment)."""
    return missing_line(hang_limit(run_dir))


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def _is_python(pid: int, argv: list[str]) -> bool:
    if argv and argv[0].startswith("ray::"):  # a Ray worker (setproctitle renamed it)
        return True
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.startswith("python")


def wanted(argv: list[str]) -> bool:
    """Pure: a process whose stacks matter (not sf's helpers, not Ray's daemons)."""
    if not argv:
        return False
    if argv[0].startswith("ray::"):  # a Ray worker, named after its actor or task
        return argv[0].split()[0] not in RAY_OWN_WORKERS
    if len(argv) > 2 and argv[1] == "-m" and argv[2] == "launcher.injob":
        return False  # the supervisor, node wrappers, barrier, this dump
    joined = " ".join(argv)
    return not any(d in joined for d in RAY_OWN_ARGS)


def _state(pid: int) -> str:
    """The process's state letter from /proc/PID/stat ('T': stopped, '' when gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0] if ")" in stat else ""


def cgroup_job(text: str) -> tuple[str | None, str | None]:
    """(node, job id) of a process from its /proc/PID/cgroup text (pure): the `job_<id>`
    component of a Slurm cgroup path and the node of the `slurm_<node>` (v1, several slurmd
    on one host) or `slurmstepd_<node>.scope` component above it (None: one slurmd a host).
    (None, None) outside every Slurm job. Only root and slurmd move a process between these
    cgroups: no user can put one of theirs into another's job."""
    for line in text.splitlines():
        parts = line.split(":", 2)[-1].split("/")
        jobs = [k for k, part in enumerate(parts) if part.startswith("job_") and part[4:].isdigit()]
        if not jobs:
            continue
        node = None
        for part in parts[:jobs[0]]:
            if part.startswith("slurm_"):
                node = part[len("slurm_"):]
            elif part.startswith("slurmstepd_") and part.endswith(".scope"):
                node = part[len("slurmstepd_"):-len(".scope")]
        return node, parts[jobs[0]][4:]
    return None, None


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def job_pids(job_id: str, node: str, skip: set[int], uid: int | None = None) -> list[int]:
    """The pids of job `job_id` on `node` (this host), by Slurm's facts: those whose cgroup is
    the job's on this node; where no process here is in a Slurm cgroup (proctrack/linuxproc),
    those `scontrol listpids` names. Only processes of `uid` (default: ours, the job's user).
    Never by a process's environment (SLURM_JOB_ID, SLURMD_NODENAME can be forged)."""
    uid = os.getuid() if uid is None else uid
    found, cgroups_seen = [], False
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            text = Path(f"/proc/{entry}/cgroup").read_text()
        except OSError:
            continue
        where, job = cgroup_job(text)
        cgroups_seen = cgroups_seen or job is not None
        if job == job_id and where in (None, node) and _owner(int(entry)) == uid:
            found.append(int(entry))
    if not cgroups_seen:
        found = [pid for pid in listed_pids(job_id) if pid not in skip and _owner(pid) == uid]
    return sorted(found)


def listed_pids(job_id: str) -> list[int]:
    """`scontrol listpids JOB` on this node: the pids slurmd's process tracking holds for the
    job (the job side's one scontrol call outside launcher/slurm.py: this file runs alone in a
    runtime, without sf)."""
    try:
        proc = subprocess.run(["scontrol", "listpids", str(job_id)], capture_output=True, text=True,
                              timeout=DUMP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_listpids(proc.stdout)


def parse_listpids(text: str) -> list[int]:
    """Pure: the PID column of `scontrol listpids` ("PID JOBID STEPID LOCALID GLOBALID")."""
    pids = []
    for line in text.splitlines():
        first = line.split()[0] if line.split() else ""
        if first.isdigit():
            pids.append(int(first))
    return pids


def stopped_processes(job_id: str, node: str, skip: set[int]) -> list[int]:
    """Every process of this job on this node (Python or not: raylet, GCS, NCCL helpers) that
    is stopped (SIGSTOP, or held by a tracer): the evidence that the node did not answer."""
    return [pid for pid in job_pids(job_id, node, skip) if _state(pid) in ("T", "t")]


def job_processes(job_id: str, node: str, skip: set[int]) -> list[tuple[int, list[str]]]:
    """(pid, argv) of this job's Python processes on this node, oldest first."""
    found = []
    for pid in job_pids(job_id, node, skip):
        argv = _cmdline(pid)
        if wanted(argv) and _is_python(pid, argv):
            found.append((pid, argv))
    return found


def dump(py_spy: str, pid: int) -> str:
    """py-spy's dump of one process: paused first, else (a stopped process) without pausing."""
    text = ""
    for extra in ([], ["--nonblocking"]):
        try:
            proc = subprocess.run([py_spy, "dump", *extra, "--pid", str(pid)], capture_output=True,
                                  text=True, timeout=DUMP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            text = f"py-spy dump {' '.join(extra)} timed out after {DUMP_TIMEOUT_S} s"
            continue
        if proc.returncode == 0:
            return (f"(could not pause it ({text or 'no reason given'}): read without pausing)\n"
                    if extra else "") + proc.stdout
        text = (proc.stderr or proc.stdout).strip().splitlines()[0:1]
        text = text[0] if text else f"py-spy exited {proc.returncode}"
    return f"no stacks: {text}\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m launcher.injob stacks")
    p.add_argument("--out", help="the directory for <node>.txt")
    p.add_argument("--find", action="store_true",
                   help="only print where py-spy is (exit 0) or where it was looked for (exit 1): "
                        "sf doctor runs this file in each runtime")
    args = p.parse_args(argv)
    if args.find:
        found = find_py_spy()
        print(found or "none: looked in " + ", ".join(str(p) for p in dict.fromkeys(py_spy_places())))
        return 0 if found else 1
    if not args.out:
        p.error("--out is required")
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    job_id = os.environ.get("SLURM_JOB_ID", "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = {os.getpid(), os.getppid()}
    # the answer first (before any dump, which may be slow): which of the job's processes here
    # are stopped; the supervisor leaves such a node out for a spare (launcher/injob/heal.py)
    stopped = stopped_processes(job_id, node, skip)
    write_answer(out, node, stopped)
    py_spy = find_py_spy()
    procs = job_processes(job_id, node, skip)
    lines = [f"# Python stacks on {node} (job {job_id}), {time.strftime('%Y-%m-%d %H:%M:%S')}, "
             f"{len(procs)} processes, by {py_spy or 'nothing: py-spy is not in the runtime'}"]
    if py_spy:
        with ThreadPoolExecutor(max_workers=4) as pool:
            dumps = list(pool.map(lambda item: dump(py_spy, item[0]), procs))
    else:
        # where it looked: on the H200 the kit's py-spy was not found and the reason stayed unknown
        looked = ", ".join(str(p) for p in dict.fromkeys(py_spy_places()))[:600]
        lines.append(f"# py-spy looked for in: {looked}")
        missing = "no stacks: py-spy is not installed in the runtime (pip install py-spy, or ray[default])\n"
        dumps = [missing] * len(procs)
    for (pid, cmd), text in zip(procs, dumps, strict=True):
        lines.append(f"\n=== pid {pid}: {' '.join(cmd)[:300]}")
        lines.append(text.rstrip())
    (out / f"{node}.txt").write_text("\n".join(lines) + "\n")
    print(f"[sf] stacks of {len(procs)} processes on {node} -> {out / (node + '.txt')}", flush=True)
    return 0


def write_answer(out: Path, node: str, stopped: list[int]) -> None:
    tmp = out / f".{node}.json.tmp"
    tmp.write_text(json.dumps({"node": node, "stopped": stopped}))
    os.replace(tmp, out / f"{node}.json")


def silent_nodes(out_dir: Path, nodes: list[str]) -> dict[str, str]:
    """{node: why} for the nodes that did not answer the dump: no answer file (the task never
    ran or never got that far) or stopped processes of the job there (pure but for the reads)."""
    silent = {}
    for node in nodes:
        try:
            stopped = json.loads((out_dir / f"{node}.json").read_text())["stopped"]
        except (OSError, ValueError, KeyError, TypeError):
            silent[node] = "no answer to the stacks dump"
            continue
        if stopped:
            silent[node] = f"{len(stopped)} of the job's processes stopped (pids {', '.join(map(str, stopped[:5]))})"
    return silent


def save(procs, out_dir: Path) -> dict:
    """Supervisor side (`procs`: the Processes part): one srun per het group over all its nodes, each task writing its
    node's file; waits at most SAVE_TIMEOUT_S. Returns {"dir", "nodes" (files written),
    "silent" ({node: why} for the nodes that did not answer)}."""
    from launcher import slurm

    out_dir.mkdir(parents=True, exist_ok=True)
    py = procs.runtime.runtime_python()
    env = procs.child_env()
    env.pop("SLURM_CPU_BIND", None)
    steps = []
    for pool in procs.plan.pools:
        hosts = list(procs.job.hosts[pool.name])
        if not hosts:
            continue
        argv = procs.runtime.wrap([py, "-m", "launcher.injob", "stacks", "--out", str(out_dir)])
        try:
            steps.append(slurm.srun_popen(argv, het_group=pool.het_group if procs.hetjob else None,
                                          nodes=len(hosts), ntasks=len(hosts), ntasks_per_node=1,
                                          nodelist=hosts, overlap=True, kill_on_bad_exit=False,
                                          extra=procs.runtime.srun_flags(), env=env))
        except Exception as exc:  # no srun: the reason still says what happened
            print(f"[sf] stacks: cannot start the dump on pool {pool.name}: {exc}", flush=True)
    deadline = time.monotonic() + SAVE_TIMEOUT_S
    for step in steps:
        try:
            step.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            step.kill()
    written = sorted(p.stem for p in out_dir.glob("*.txt"))
    return {"dir": str(out_dir), "nodes": written, "silent": silent_nodes(out_dir, list(procs.job.nodes))}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
