"""The supervisor's records: the phases it appends to the run's events.jsonl, the reason and
progress files, the batch log's lines, and what the nodes' own events of this start say
(node_exit, node_started, the trap's requeued). The one reader of events.jsonl here is
runs.read_phases. Stdlib only.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

from launcher import gateway, runs, states
from launcher.errors import SpecError
from launcher.injob import failure_text
from launcher.injob.node_logs import write_line


def log(msg: str) -> None:
    """A line of the batch log (one write: the driver writes there too)."""
    write_line(f"[sf {datetime.now().strftime('%H:%M:%S')}] {msg}")


class RecordKeeper:
    """Writes the run's records and reads back the events of this start (since `wall0`, the
    wall clock when the start began, which the caller passes)."""

    def __init__(self, run_dir: str, job_id: str):
        self.run_dir = run_dir
        self.job_id = job_id
        self.t0 = time.monotonic()  # for the `seconds` of every event

    def record(self, phase: str, **info) -> None:
        """Append a phase (a launcher.states constant) to the run's events."""
        try:
            runs.record_phase(self.run_dir, phase, **info)
        except (OSError, SpecError) as exc:
            log(f"warning: cannot record phase {phase}: {exc}")
        log(f"phase {phase} " + " ".join(f"{k}={v}" for k, v in info.items() if v is not None))

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def write_reason(self, text: str) -> None:
        try:
            runs.Run(self.run_dir).write_text(runs.REASON, text.rstrip() + "\n")
        except OSError as exc:
            log(f"warning: cannot write reason: {exc}")

    def clear_reason(self) -> None:
        """An earlier attempt's reason (the requeue, a failure before it) is not this one's."""
        try:  # through the run folder's descriptor: a link there is removed, never followed
            gateway.unlink(Path(self.run_dir, runs.REASON), "run")
        except (OSError, SpecError) as exc:
            log(f"warning: cannot clear the earlier attempt's reason: {exc}")

    def write_progress(self, step: int | None, restart: int) -> None:
        """<run>/progress.json: the newest training step and when it arrived (wall clock), which
        `sf status` shows as "step 12 (40 s ago)"; replaced at each new step number."""
        try:
            runs.Run(self.run_dir).write_json(runs.PROGRESS, {"step": step, "at": round(time.time(), 1),
                                                             "job_id": self.job_id, "restart": restart})
        except OSError as exc:
            log(f"warning: cannot write {runs.PROGRESS}: {exc}")

    # -- what the nodes and the trap recorded in this start ----------------------------------
    def events(self) -> list[dict]:
        return runs.read_phases(self.run_dir)

    def node_exits(self, wall0: float) -> list[dict]:
        """The node_exit phases of this start (this attempt, since wall0)."""
        restart = os.environ.get("SLURM_RESTART_COUNT")
        return [event for event in self.events()
                if event.get("phase") == states.NODE_EXIT and str(event.get("job_id")) == self.job_id
                and str(event.get("restart", "")) == str(restart or "") and event.get("time", 0) >= wall0]

    def exited_nodes(self, wall0: float) -> list[str]:
        """Nodes whose Ray ended in this start (from the node_exit phases)."""
        return list(dict.fromkeys(event.get("node") for event in self.node_exits(wall0)))

    def head_slot_taken(self, head_node: str, wall0: float) -> bool:
        """Whether the head ended before Ray ran because its port slot was taken (node.py)."""
        return any(event.get("node") == head_node and event.get("port_collision")
                   and not event.get("started") for event in self.node_exits(wall0))

    def gpus_seen(self, nodes: list[str], wall0: float) -> dict[str, list[str]]:
        """{node: GPU ids} from this start's node_started phases (each node reports what its
        step sees before it starts Ray, so every joined node has reported)."""
        seen = {}
        for event in self.events():
            if event.get("phase") == states.NODE_STARTED and event.get("time", 0) >= wall0 \
                    and event.get("node") in nodes:
                seen[event["node"]] = list(event.get("gpu_ids") or [])
        return seen

    def requeued_by_trap(self, wall0: float) -> bool:
        """The batch script's USR1 trap recorded `requeued` in this attempt."""
        return any(e.get("phase") == states.REQUEUED and e.get("time", 0) >= wall0 for e in self.events())

    def exit_hint(self, nodes: list[str], wall0: float) -> str:
        """What the nodes' node_exit said, and whether submitting again is likely to help."""
        return failure_text.exit_hint(self.events(), nodes, wall0)
