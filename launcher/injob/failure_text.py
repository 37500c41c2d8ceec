"""How a job's failures read: the first cause of a driver's traceback chain (first_cause), a
process's ending by exit code or signal (exit_text, with the OOM killer's count), the line of
Slurm's ending (ENDING_TEXT), and what the nodes' node_exit events say (exit_hint). Pure text
over what the caller read, but for oom_kills and driver_failure, which read the cgroup's memory
events and the run's files. Stdlib only.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from launcher import gateway, states
from launcher.errors import SpecError

# The last line of a Python traceback ("ValueError: ...", "ray.exceptions.RayTaskError(...): ..."),
# possibly behind Ray's "(TaskRunner pid=..)" prefix.
ERROR_LINE = re.compile(r"^(\(\S+ pid=\d+[^)]*\)\s*)?[A-Za-z_][\w.]*(Error|Exception)(\([^)]*\))?: \S")
# Slurm's ending (launcher.states.SLURM_ENDINGS) -> the reason's text
ENDING_TEXT = {
    "cancelled": "cancelled (scancel or sf cancel) during phase {phase}",
    "requeued": "requeued during phase {phase}: the job runs again",
    "time limit": "reached its time limit during phase {phase}",
    "preempted": "preempted by Slurm during phase {phase}",
    "node failure": "Slurm marked a node of the job failed (NODE_FAIL) during phase {phase}",
    "ended by Slurm": "ended by Slurm (cancelled, requeued or out of time) during phase {phase}",
}


RAY_PREFIX = re.compile(r"^\(\S+ pid=\d+[^)]*\)\s?")
# Ray colours its errors ("\x1b[36mray::TaskRunnerV1.run()\x1b[39m"): a reason is plain text
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TRACEBACK = "Traceback (most recent call last):"
# Ray's wrapper of a remote task's exception: "ray.exceptions.RayTaskError(ImportError): ray::X.run() (...)"
RAY_WRAPPER = re.compile(r"^(?:ray\.exceptions\.)?\w+Error\((\w+)\): ray::")
RAY_TASK = re.compile(r"(ray::[\w.]+\(\))")
CHAIN_MARKS = ("During handling of the above exception, another exception occurred:",
               "The above exception was the direct cause of the following exception:")


PREFLIGHT_BYTES = 1 << 20  # preflight.json: a few KiB; a bigger one was not written by the preflight
LOG_TAIL_BYTES = 256 * 1024  # the end of the batch log a driver's traceback is looked for in

# a preflight failure's line kept whole in the reason: the longest, a missing capability with its
# fix and a long runtime path, is about 400 characters
PREFLIGHT_REASON_CHARS = 600


def first_cause(lines: list[str], limit: int = 400) -> str | None:
    """The exception that started the driver's failure: Python prints a chain of tracebacks,
    the first cause first, joined by "During handling of the above exception..." or "The
    above exception was the direct cause..."; the last line of the log is only the last link
    (verl 0.9.1's critic: "is not a value head model, please install trl" caused by the
    ImportError of flash_attn). Returns the first exception line of the LAST chain in
    `lines`, with the last one after it when they differ; else the last error line; None
    when there is none. Ray's "(Actor pid=..)" prefixes are ignored. Pure."""
    clean = [RAY_PREFIX.sub("", ANSI_ESCAPE.sub("", line).rstrip()) for line in lines]
    chains: list[list[str]] = []  # each: the exception lines of one chain, in order
    linked = False
    i = 0
    while i < len(clean):
        text = clean[i].strip()
        if text in CHAIN_MARKS:
            linked = True
        elif text == TRACEBACK:
            exc = None
            j = i + 1
            while j < len(clean):
                line = clean[j]
                if line.strip() in CHAIN_MARKS or line.strip() == TRACEBACK:
                    break
                if line and not line[0].isspace() and _exception_line(line.strip()):
                    exc = line.strip()
                    break
                j += 1
            if exc and RAY_WRAPPER.match(exc):
                exc, j = _ray_cause(clean, j, exc)
            if exc:
                if linked and chains:
                    chains[-1].append(exc)
                else:
                    chains.append([exc])
            linked = False
            i = j
            continue
        i += 1
    if chains:
        chain = chains[-1]
        first, last = chain[0], chain[-1]
        text = first if first == last else f"{first} (then: {last})"
        return text[:limit]
    errors = [line.strip() for line in clean if ERROR_LINE.match(line.strip())]
    return errors[-1][:limit] if errors else None


def _ray_cause(clean: list[str], j: int, header: str) -> tuple[str, int]:
    """A Ray task error prints, inside the one traceback block, the remote task's traceback
    after its header ("ray.exceptions.RayTaskError(ImportError): ray::TaskRunner.run() (pid=..)"),
    nested once per task hop, ending with the original exception ("ImportError: ..."; verl
    0.9.1's one-step-off trainer on the H200: flash-attn missing in ray::WorkerDict.ref_init_model).
    Returns that exception with the innermost task named, and the index where the block ends;
    the header itself when the original is not there."""
    wanted = RAY_WRAPPER.match(header).group(1)
    cause, task = None, RAY_TASK.search(header)
    k = j + 1
    while k < len(clean):
        line = clean[k]
        text = line.strip()
        if text in CHAIN_MARKS or text == TRACEBACK:
            break
        if line and not line[0].isspace():
            if RAY_WRAPPER.match(text):
                task = RAY_TASK.search(text) or task
            elif re.match(rf"^([\w.]*\.)?{re.escape(wanted)}(:|$)", text):
                cause = text
            else:
                break  # the block is over: a log line of another kind
        k += 1
    if cause is None:
        return header, j
    return (f"{cause} (in {task.group(1)})" if task else cause), k


def _exception_line(text: str) -> bool:
    """`Name: message` or a bare `Name` of an exception class (dotted names included)."""
    return bool(ERROR_LINE.match(text) or re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)$", text))


def oom_kills(cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """How many processes the kernel's OOM killer took in this process's memory cgroup (v2
    memory.events, v1 memory.oom_control), None when it cannot be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            where, name = Path(cgroup_root, path.lstrip("/")), "memory.events"
        elif "memory" in controllers.split(","):
            where, name = Path(cgroup_root, "memory", path.lstrip("/")), "memory.oom_control"
        else:
            continue
        try:
            for field in (where / name).read_text().splitlines():
                key, _, value = field.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def exit_text(rc: int, oom_killed: int | None = None) -> str:
    """How a process ended, as a person reads it: `exited with 3`, or the signal that killed it
    by name (a Popen's negative return code); SIGKILL with the likely cause: the kernel's OOM
    killer when the cgroup counted a kill, else "out of memory?" as the first thing to check."""
    signum = -rc if rc < 0 else rc - 128 if rc > 128 else 0  # 128 + N: a shell's or srun's word for signal N
    try:
        name = signal.Signals(signum).name if signum else ""
    except ValueError:
        name = f"signal {signum}" if rc < 0 else ""
    if not name:
        return f"exited with {rc}"
    text = f"was killed by {name}" if rc < 0 else f"exited with {rc} = 128 + {name}"
    if signum == signal.SIGKILL:
        text += (" (out of memory: the kernel's OOM killer killed a process of this job)" if oom_killed
                 else " (out of memory? the kernel's OOM killer kills this way; else another user or process did)")
    return text


def driver_failure(run_dir: str, what: str) -> str | None:
    """The first failing check of the preflight (preflight.json), or the first exception
    of the driver's last traceback chain (first_cause over the batch log, which is this
    process's stdout): the line a user would otherwise dig out of the logs."""
    if what == "preflight":
        try:
            report = json.loads(gateway.read_bytes(Path(run_dir) / "preflight.json", "run", limit=PREFLIGHT_BYTES))
            failures = (report.get("failures") if isinstance(report, dict) else None) or []
        except (OSError, ValueError, SpecError):  # absent, damaged, planted: no line to quote
            return None
        return str(failures[0])[:PREFLIGHT_REASON_CHARS] if failures else None
    try:  # the file this process's stdout is: its link walked, its last bytes read from the checked descriptor
        tail = gateway.read_bytes("/proc/self/fd/1", "batch log", follow=True, tail=LOG_TAIL_BYTES)
    except (OSError, SpecError):  # a pipe, a terminal, a removed file: no log to read
        return None
    return first_cause(tail.decode(errors="replace").splitlines())


def exit_hint(events: list[dict], nodes: list[str], since: float) -> str:
    """What the nodes' node_exit events (since `since`, wall clock) said, and whether
    submitting again is likely to help."""
    last = {}
    for event in events:
        if event.get("phase") == states.NODE_EXIT and event.get("node") in nodes \
                and event.get("time", 0) >= since:
            last[event["node"]] = event
    if not last:
        return ""
    errors = "; ".join(f"{n}: {e['error']}" for n, e in last.items() if e.get("error"))
    hint = f": {errors}" if errors else ""
    if any(e.get("retry_helps") for e in last.values()):
        return (hint + ". Ray never came up there, after its retries: a loaded node or a slow GCS; "
                "submitting again is likely to help (or raise RAY_gcs_rpc_server_connect_timeout_s "
                "or ray.start_retries in the site file)")
    if any(e.get("started") for e in last.values()):
        return hint + ". Ray ran and then ended: a node or process died; resubmitting only helps once that is fixed"
    return hint + ". Submitting again will not help until that is fixed"
