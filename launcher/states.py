"""One vocabulary of states and phases, shared by the monitor, `sf submit --wait`, the
run records and (later) the in-job supervisor. Standard library only, so the job side
can import it on any runtime's Python.

Three kinds of names:
  - Slurm job states (upper case, as sacct/squeue print them), plus GONE: sf's own name
    for a job that squeue no longer lists while accounting is down;
  - run states (lower case), the state a run record holds: the login side's own
    (created, submitting, submitted, submit_failed) and Slurm's state lowered;
  - phases, the events the job appends to events.jsonl (launcher.runs.record_phase).
    Only phases something emits are listed here; `status` labels them.
"""

from __future__ import annotations

# --- Slurm job states -------------------------------------------------------------------

SLURM_PENDING, SLURM_RUNNING, SLURM_COMPLETED = "PENDING", "RUNNING", "COMPLETED"
SLURM_TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                  "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED",
                  "GONE")
# Aggregating a hetjob's components or an array's tasks into one state: the first state
# any part has wins (running before pending; the worst end first).
AGGREGATE_ACTIVE_ORDER = ("RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING",
                          "SUSPENDED", "STOPPED", "RESIZING", "REQUEUED", "REQUEUE_FED",
                          "REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD", "PENDING", "UNKNOWN")
AGGREGATE_END_ORDER = ("NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "FAILED", "TIMEOUT", "DEADLINE",
                       "PREEMPTED", "REVOKED", "CANCELLED", "GONE", "COMPLETED")

# Slurm's state when Slurm itself ends a running job -> the ending the supervisor records
# (launcher/injob/ending.py). Only the states in which Slurm ends a running job appear;
# anything else is the job's own failure.
SLURM_ENDINGS = {
    "CANCELLED": "cancelled", "REQUEUED": "requeued", "REQUEUE_HOLD": "requeued", "REQUEUE_FED": "requeued",
    "PENDING": "requeued", "TIMEOUT": "time limit", "DEADLINE": "time limit", "PREEMPTED": "preempted",
    "NODE_FAIL": "node failure",
}
# a job Slurm has put back in its queue (a requeue; PENDING once it was running)
SLURM_REQUEUED = frozenset(state for state, ending in SLURM_ENDINGS.items() if ending == "requeued")
# accounting's row of an attempt that Slurm ended to run the job again: its Elapsed is that
# attempt's, which the run's record already counts once the job pends again
OLD_ATTEMPT_ROWS = ("NODE_FAIL", "REQUEUED", "PREEMPTED")


def slurm_done(state: str) -> bool:
    """True once Slurm says the job has ended (GONE included)."""
    return state in SLURM_TERMINAL


# --- run states -------------------------------------------------------------------------

# Written by the login side before Slurm knows the job (RETRYING: `sf sweep --retry-failed`
# is about to submit the point again; CANCELLED, a Slurm state too, is also what `sf cancel`
# records at once).
CREATED, SUBMITTING, SUBMITTED, SUBMIT_FAILED = "created", "submitting", "submitted", "submit_failed"
RETRYING, CANCELLED = "retrying", "cancelled"
# A job squeue no longer lists while accounting is down: ended, but how is unknown. Kept
# out of RUN_TERMINAL so the overview still asks about it once accounting is back.
GONE = "gone"
# `sf cancel` was sent and Slurm still reports the job running (sacct lags a second).
CANCELLING = "cancelling"

# Slurm's states lowered that the login side names itself (sf submit --wait, chains, sweeps,
# a --local export/eval's entry).
PENDING, RUNNING, COMPLETING, COMPLETED, FAILED = "pending", "running", "completing", "completed", "failed"
PREEMPTED = "preempted"  # Slurm may start a preempted job again
REQUEUED_STATE = "requeued"  # Slurm's REQUEUED lowered (the phase of the same name is REQUEUED)
UNKNOWN = "unknown"  # an array task or hetjob part Slurm has not reported

RUN_TERMINAL = frozenset(s.lower() for s in SLURM_TERMINAL if s != "GONE") | {SUBMIT_FAILED}
# Ended without success and not on purpose (cancelled is): what `sf sweep --retry-failed` resends.
RUN_FAILED = (RUN_TERMINAL - {COMPLETED, CANCELLED}) | {GONE}
RUN_RUNNING = (RUNNING, COMPLETING, "configuring")


def run_state(slurm_state: str) -> str:
    """The run state for a Slurm state: Slurm's name, lower case."""
    return slurm_state.lower()


def run_ended(state: str) -> bool:
    """True when a run in `state` will not change by itself any more (gone included)."""
    return state in RUN_TERMINAL or state == GONE


# --- phases the job emits ---------------------------------------------------------------

# the supervisor (launcher/injob/supervise.py and its parts), in the order a start goes through them.
ALLOCATED = "allocated"
RESTARTED = "restarted"  # a start after a requeue
WALL_TIME = "wall_time"  # the job's end time exported to verl
HEAD_UP = "head_up"
BARRIER_WAITING = "barrier_waiting"  # launcher/injob/barrier.py: hosts not joined yet (missing=[...])
ALL_JOINED = "all_joined"  # the barrier passed
DRIVER_STARTED = "driver_started"  # what=preflight | torchrun | main_ppo | ...
ENDED = "ended"
# launcher/injob/verl_phases.py: verl's own start-up phase read from the driver's log (name, label, step)
VERL_PHASE = "verl_phase"
HEALTH_CHECKED = "health_checked"  # site ray.health_check: always, before the driver
# launcher/injob/capabilities.py: what the method needs from the runtime, before Ray starts
CAPABILITIES_CHECKED = "capabilities_checked"
# launcher/injob/heal.py: the progress watchdog found no training step within its limit
HANG = "hang"  # last_step, seconds_since, limit_s, stacks (the dir under the run)
STACKS_SAVED = "stacks_saved"  # every node's Python stacks written (dir, nodes)
# Ray and the driver started again inside the allocation (cause: hang | node | driver)
RESTARTED_IN_PLACE = "restarted_in_place"
# Ray brought up again, the head on another port slot: its slot was taken before Ray ran
# (launcher/injob/heal.py RedrawHeadSlot)
HEAD_SLOT_REDRAWN = "head_slot_redrawn"
# the batch script's USR1 trap (templates/train.sbatch.j2)
REQUEUED = "requeued"
REQUEUE_REFUSED = "requeue_refused"
# launcher/injob/node.py: per node, detail rather than progress
NODE_STARTED, NODE_EXIT, NODE_SKIPPED = "node_started", "node_exit", "node_skipped"
NODE_STOPPED = "node_stopped"  # the job is done: the supervisor asked the node to stop Ray
NODE_RETRY = "node_retry"  # a worker's start failed before Ray ran: started again
NODE_PHASES = (NODE_STARTED, NODE_EXIT, NODE_SKIPPED, NODE_STOPPED, NODE_RETRY)
# What the supervisor is doing now (Attempt.stage): the "during phase X" of a failure's
# reason. Not events: the phases above are what the job records in events.jsonl.
STAGE_ALLOCATED, STAGE_BRINGUP, STAGE_BARRIER, STAGE_HEALTH, STAGE_DRIVER, STAGE_PREFLIGHT = (
    "allocated", "bringup", "barrier", "health", "driver", "preflight")
# templates/export.sbatch.j2 and templates/eval.sbatch.j2
EXPORT_STARTED, EXPORT_ENDED = "export_started", "export_ended"
EVAL_STARTED, EVAL_ENDED = "eval_started", "eval_ended"

PHASE_LABELS = {
    ALLOCATED: "allocated",
    RESTARTED: "restarted after requeue",
    WALL_TIME: "starting ray",
    HEAD_UP: "ray head up",
    BARRIER_WAITING: "waiting for nodes",
    ALL_JOINED: "ray up",
    HEALTH_CHECKED: "nodes checked",
    CAPABILITIES_CHECKED: "runtime checked",
    HANG: "hung (no training step)",
    STACKS_SAVED: "hung: stacks saved",
    RESTARTED_IN_PLACE: "restarting in place",
    HEAD_SLOT_REDRAWN: "starting ray again (head's ports taken)",
    DRIVER_STARTED: "driver started",
    VERL_PHASE: "verl",
    ENDED: "ended",
    REQUEUED: "requeued",
    REQUEUE_REFUSED: "requeue refused (bound reached)",
    EXPORT_STARTED: "exporting",
    EXPORT_ENDED: "export ended",
    EVAL_STARTED: "evaluating",
    EVAL_ENDED: "eval ended",
}


def phase_label(phase: str, what: str | None = None) -> str:
    """`sf status`'s words for a phase (driver_started of a preflight: "preflight running")."""
    if phase == DRIVER_STARTED and what == "preflight":
        return "preflight running"
    return PHASE_LABELS.get(phase, phase.replace("_", " "))


def phase_detail(event: dict) -> str:
    """`sf status`'s words for a job-level event: its phase's label, and for the barrier's
    wait the hosts it still waits for ("waiting for nodes: dev4 (train)")."""
    phase = str(event["phase"])
    label = phase_label(phase, event.get("what"))
    if phase == VERL_PHASE:
        return f"{label}: {event.get('label') or event.get('name')}"
    if phase != BARRIER_WAITING:
        return label
    pools = event.get("pools") or {}
    hosts = ", ".join(f"{h} ({pools[h]})" if h in pools else str(h) for h in event.get("missing") or [])
    return f"{label}: {hosts}" if hosts else label


def latest_event(events: list[dict]) -> dict | None:
    """The newest job-level event of events.jsonl (per-node events are detail)."""
    for event in reversed(events):
        name = str(event.get("phase", ""))
        if name and name not in NODE_PHASES and not name.startswith("node_"):
            return event
    return None
