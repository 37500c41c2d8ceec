"""A watch of this node's raylet, run by the node's wrapper (launcher/injob/node.py) beside
`ray start --block`.

A raylet that is stopped (SIGSTOP, a frozen cgroup, a debugger: state T in /proc/PID/stat)
answers nothing, yet Ray finds out only by its own health checks: on the dev cluster after
about 85 s, as an ActorDiedError in the driver that names no node. The wrapper sees the
state at once. Once the raylet has been stopped for min(30 s, the run's hang limit), the
watch says so in the node's log, records `node_frozen` naming this node, and ends this
node's Ray (SIGKILL to its process group): `ray start` ends, the wrapper's node_exit follows,
and the supervisor names the node as it does for any Ray node that ended.

A whole frozen node (every process, this wrapper too) is the progress watchdog's: the watch
is stopped with it. Only state T counts: `t` is a tracer's stop (py-spy's stacks dump).
Standard library only (the job side).
"""
from __future__ import annotations

import os
import signal
import threading
import time

from launcher import runs
from launcher.injob.node_logs import write_line

LIMIT_CAP_S = 30.0  # at most: Ray's own finding took ~85 s
POLL_S = 1.0
PROCESS = "raylet"
NODE_FROZEN = "node_frozen"


def limit_s(run_dir: str) -> float:
    """min(30 s, the run's hang limit: plan.json job.heal.hang_timeout_s; 0 means off)."""
    try:
        plan = runs.Run(run_dir).read_json("plan.json")  # the gateway: a regular file of the job's user
        hang = float(((plan.get("job") or {}).get("heal") or {}).get("hang_timeout_s") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        hang = 0.0
    return min(LIMIT_CAP_S, hang) if hang > 0 else LIMIT_CAP_S


def stat_of(pid: int) -> tuple[str, str, int] | None:
    """(name, state, parent pid) of a process from /proc/PID/stat; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    name = text[text.find("(") + 1:text.rfind(")")]
    rest = text[text.rfind(")") + 2:].split()
    if len(rest) < 2 or not rest[1].isdigit():
        return None
    return name, rest[0], int(rest[1])


def descendant_named(root: int, name: str) -> int | None:
    """The pid of a process called `name` among `root`'s descendants (None: none now)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := stat_of(int(entry))):
            names[int(entry)] = found[0]
            children.setdefault(found[2], []).append(int(entry))
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if names.get(pid) == name:
            return pid
        todo += children.get(pid, ())
    return None


class RayletWatch:
    """Polls the raylet under `root` (the `ray start` child, its own process group's leader);
    `frozen` holds the reason once it ended this node's Ray for it."""

    def __init__(self, root: int, limit: float, run_dir: str, node: str, pool: str):
        self.root, self.limit, self.run_dir, self.node, self.pool = root, limit, run_dir, node, pool
        self.frozen: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raylet-watch", daemon=True)

    def start(self) -> RayletWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _run(self) -> None:
        pid, stopped_since = None, None
        while not self._done.wait(POLL_S):
            found = stat_of(pid) if pid else None
            if found is None or found[0] != PROCESS:
                pid, stopped_since = descendant_named(self.root, PROCESS), None
                continue
            if found[1] != "T":
                stopped_since = None
                continue
            stopped_since = stopped_since or time.monotonic()
            if time.monotonic() - stopped_since >= self.limit and not self._done.is_set():
                self._end(pid, time.monotonic() - stopped_since)
                return

    def _end(self, pid: int, seconds: float) -> None:
        self.frozen = (f"its raylet (pid {pid}) was stopped (state T) for {seconds:.0f} s and answered nothing: "
                       f"sf ended this node's Ray (limit {self.limit:.0f} s: min(30 s, the hang limit))")
        write_line(f"[sf node {self.node}] {self.frozen}", err=True)  # the node's log: the reason quotes it
        try:
            runs.record_phase(self.run_dir, NODE_FROZEN, node=self.node, pool=self.pool, process=PROCESS, pid=pid,
                              stopped_s=round(seconds, 1), error=self.frozen)
        except OSError:
            pass  # the run dir went away: the kill below still ends the node
        for target, kill in ((self.root, os.killpg), (pid, os.kill)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def watch(root: int, run_dir: str, node: str, pool: str) -> RayletWatch:
    """Start watching the raylet of the `ray start` child `root`."""
    return RayletWatch(root, limit_s(run_dir), run_dir, node, pool).start()
