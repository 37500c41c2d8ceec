"""Where a Ray node's output goes, and which logs a reason may send the user to.

Each Ray node's wrapper (launcher.injob.node) writes logs/<job>-ray-<head|pool>-<node>.log in
the run dir, as its first act. A node step that failed before that (a container that did not
start, an srun that could not launch the wrapper, a runtime python that does not run) leaves
no such log: srun's own error lines are then in the Slurm job's output file. A reason names
only the logs that are there, and the job's output file where a node wrote none. Stdlib only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launcher import gateway

# Ray's own logs a node keeps in the run (their last RAY_LOG_MAX_BYTES each, at most RAY_LOG_MAX_FILES)
RAY_LOG_FILES = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err", "monitor.log",
                 "ray_process_exit.log", "dashboard.log", "runtime_env_agent.log")
RAY_LOG_MAX_BYTES = 1 << 20
RAY_LOG_MAX_FILES = 20


def write_line(text: str, *, err: bool = False) -> None:
    """`text` and its newline as one write to stdout (stderr with `err`): the job runs with
    PYTHONUNBUFFERED, where print() writes the text and the newline apart, and its logs are
    shared (the driver writes the batch log too, `ray start`'s processes a node's log): once a
    driver's "ValueError: ..." landed between them ("...for the first stepValueError: ..."), so
    its error was not a line of its own and driver_failure missed it."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def ray_step_name(role: str, pool_name: str) -> str:
    """The srun step that starts Ray nodes: "ray-head", or "ray-<pool>" for a pool's workers."""
    return "ray-head" if role == "head" else f"ray-{pool_name}"


def step_log_name(job_id: str, step_name: str, node: str) -> str:
    """The file name of the log a node of Ray node step `step_name` writes (under <run>/logs)."""
    return f"{job_id}-{step_name}-{node}.log"


def node_log_name(job_id: str, role: str, pool_name: str, node: str) -> str:
    """The file name of one node's log (under <run>/logs): the head's, or a worker's of its pool."""
    return step_log_name(job_id, ray_step_name(role, pool_name), node)


def job_output_name(job_id: str, environ=None) -> str:
    """The Slurm job's output file under <run>/logs, as the batch script has it: slurm-<job>.out
    (--output), or slurm-<array job>_<task>.out for a task of an array sweep (the script sends
    its output to the point's own run dir)."""
    env = os.environ if environ is None else environ
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return f"slurm-{array}_{task}.out" if array and task else f"slurm-{job_id}.out"


def node_logs_text(run_dir: str, job_id: str, step_name: str, nodes: list[str], since: float,
                   environ=None) -> str:
    """What a reason says about the logs of the Ray node step `step_name` ("ray-head" or
    "ray-<pool>") on `nodes`: "see" the node logs written since `since` (this start; a log of an
    earlier attempt of the job has the same name), and for the nodes that wrote none, that their
    wrapper never started and where srun's error is."""
    logs = Path(run_dir) / "logs"
    written, silent = [], []
    for node in nodes:
        name = step_log_name(job_id, step_name, node)
        try:
            fresh = (logs / name).stat().st_mtime >= since
        except OSError:
            fresh = False
        (written if fresh else silent).append(name if fresh else node)
    text = "; ".join([f"see {', '.join('logs/' + n for n in written)}"] if written else [])
    if silent:
        output = "logs/" + job_output_name(job_id, environ)
        none = (f"{', '.join(silent)} wrote no node log: sf's node wrapper never started there (the step's "
                f"container or srun failed before it ran); srun's own error is in {output}")
        text = f"{text}; {none}" if text else none
    return text


def _tail(folder_fd: int, name: str, max_bytes: int) -> bytes | None:
    """The last `max_bytes` of the regular file `name` (not a link, FIFO or device), None if not one."""
    try:
        fd = gateway.open_read(folder_fd, name, name, "ray logs", limit=None, any_owner=False)
    except (OSError, gateway.UnsafeFile):
        return None
    try:
        os.lseek(fd, max(0, os.fstat(fd).st_size - max_bytes), os.SEEK_SET)
        chunks, left = [], max_bytes  # Ray may still be writing it: read what was there, no more
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def keep_ray_logs(temp: str, run_dir: str, job_id: str, node: str, failed_try: int | None = None,
                  names=RAY_LOG_FILES, max_bytes: int = RAY_LOG_MAX_BYTES) -> None:
    """Ray's own logs of this node (raylet, GCS, process exits) into the run dir before the
    node-local temp dir goes: the last `max_bytes` of each, logs/ray/<job>-<node>/ (a start that
    failed and is tried again: <job>-<node>-try<N>/, its raylet's own error). Through
    launcher.gateway: logs/ray and the node's folder must be this user's real folders (a planted
    `logs/ray` link is refused, never written through), each file is written into the folder's
    descriptor. A copy that fails is said, never a reason to fail."""
    dest = Path(run_dir) / "logs" / "ray" / (f"{job_id}-{node}" + (f"-try{failed_try}" if failed_try else ""))
    try:
        with gateway.folder(Path(temp) / "session_latest" / "logs", "ray logs") as src:
            wanted = sorted(n for n in os.listdir(src) if n in names or n.startswith("python-core-driver"))
            tails = [(n, _tail(src, n, max_bytes)) for n in wanted[:RAY_LOG_MAX_FILES]]
    except (FileNotFoundError, NotADirectoryError):
        return
    except (OSError, gateway.UnsafeFile) as exc:
        write_line(f"[sf node {node}] cannot read Ray's logs: {exc}")
        return
    try:
        for folder in (dest.parent, dest):  # an existing one must be a real folder of this user's
            gateway.make_dir(folder, 0o700, exist_ok=True, field="run")
        with gateway.folder(dest, "run", own=True) as fd:
            for name, data in tails:
                if data is not None:
                    gateway.write_at(fd, name, data)
    except (OSError, gateway.UnsafeFile) as exc:  # a log copy is never a reason to fail
        write_line(f"[sf node {node}] cannot keep Ray's logs: {exc}")
