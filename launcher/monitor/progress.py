"""What `sf status` says of a run Slurm requeued: the requeue count and the pending reason
as slurmctld has them, and ELAPSED over all attempts; and the lines `sf submit --wait`
prints, in time order.

After a requeue (a node failure, `scontrol requeue`, sf's own on a signal) accounting shows
the old attempt's row (NODE_FAIL) or a new one whose Elapsed starts again at 0, and sf's
record counts the requeue only once the job side records it (a failed node records nothing
until the next attempt starts). slurmctld knows at once: `scontrol show job` has Restarts
and the current pending reason. Only a run that has started before and pends again is asked
(one call each), so a fresh queue costs nothing more.
"""
from __future__ import annotations

import time

from launcher import slurm
from launcher.states import OLD_ATTEMPT_ROWS, REQUEUED_STATE, SLURM_REQUEUED, VERL_PHASE, run_state


def controller_view(job_id: str) -> dict:
    """slurmctld's fields of the job (JobState, Reason, Restarts, ...); {} when it cannot be
    asked or no longer knows the job (accounting's answer stands then)."""
    try:
        return slurm.show_job(job_id) or {}
    except Exception:  # noqa: BLE001 - any failure to ask leaves accounting's view
        return {}


def controller_state(live: dict, state: str) -> str:
    """A NODE_FAIL of a job Slurm may requeue is final only when slurmctld says so: accounting
    shows it for seconds before the requeue (the dev cluster: about 4 s), and a `--wait` must
    not end on it. The controller's own state, lowered; `state` when it no longer knows the job."""
    current = live.get("JobState")
    if not current or current == "NODE_FAIL":
        return state
    return REQUEUED_STATE if current in SLURM_REQUEUED else run_state(current)


def restarts(live: dict) -> int:
    """Slurm's count of the job's requeues (Restarts=N); 0 when not known."""
    value = str(live.get("Restarts") or "")
    return int(value) if value.isdigit() and len(value) <= 6 else 0


def pending_reason(live: dict, reason: str) -> str:
    """The controller's pending reason: accounting keeps the old attempt's for seconds."""
    current = live.get("Reason")
    return current if current and live.get("JobState") in ("PENDING", *SLURM_REQUEUED) else reason


def elapsed_seconds(text: str) -> int | None:
    """Slurm's `[D-]HH:MM:SS` / `MM:SS` -> seconds; None when it is not one."""
    days, _, rest = (text or "").strip().rpartition("-")
    parts = rest.split(":")
    if not rest or not all(p.isdigit() and len(p) <= 2 for p in parts) or len(parts) > 3 \
            or (days and not (days.isdigit() and len(days) <= 5)):
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


def format_elapsed(seconds: float) -> str:
    """Seconds as Slurm writes Elapsed: `HH:MM:SS`, `D-HH:MM:SS` from a day on."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _restart_of(event: dict) -> int:
    value = event.get("restart")
    return value if isinstance(value, int) and not isinstance(value, bool) else \
        int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 6 else 0


def earlier_attempts_s(phases: list[dict], current: int) -> float:
    """Seconds the attempts before Slurm start `current` (0-based, its restart count) ran:
    each from its `allocated` to its last event (the `ended` its batch script records when
    Slurm requeues it); restarts in place are inside their attempt."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for event in phases:
        when = event.get("time")
        if not isinstance(when, (int, float)) or isinstance(when, bool):
            continue
        attempt = _restart_of(event)
        if attempt >= current:
            continue
        if event.get("phase") == "allocated" and attempt not in first:
            first[attempt] = when
        last[attempt] = max(last.get(attempt, when), when)
    return sum(max(0.0, last[a] - first[a]) for a in first)




def attempt_of(row_state: str, requeues: int) -> int:
    """The attempt (its restart count) accounting's row is of: the one before the current
    when the row is still the requeued attempt's."""
    return requeues - 1 if requeues and row_state in OLD_ATTEMPT_ROWS else requeues


def elapsed_over_attempts(phases: list[dict], elapsed: str, current: int) -> str:
    """ELAPSED of a run Slurm started `current` + 1 times: the earlier attempts' time (from
    the record) plus Slurm's Elapsed of this one, which restarts at 0 on each requeue."""
    now = elapsed_seconds(elapsed)
    if current <= 0 or now is None:
        return elapsed
    before = earlier_attempts_s(phases, current)
    return format_elapsed(before + now) if before else elapsed


# --- `sf submit --wait`: its lines, in time order ------------------------------------------

_SHOWN = ("name", "step", "seconds", "node", "rc", "reason", "ray_nodes", "what")


def event_line(event: dict) -> str:
    """One phase of events.jsonl as `--wait` prints it: the time (local, as the state lines),
    the phase, and for verl's phases their name (`verl_phase first_step step=3`)."""
    when = event.get("time")
    clock = time.strftime("%H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) \
        and not isinstance(when, bool) and 0 <= when < 1e11 else str(event.get("iso", ""))[11:19]
    words = [str(event["name"])] if event.get("phase") == VERL_PHASE and event.get("name") is not None else []
    words += [f"{k}={event[k]}" for k in _SHOWN[1:] if event.get(k) is not None]
    return " ".join([f"[{clock}]", str(event.get("phase")), *words])


def wait_lines(events: list[dict], states: list[tuple[float, str]] = ()) -> list[str]:
    """The lines of one `--wait` poll in time order: the new phases (several nodes append to
    events.jsonl, each its own, so the file is not in time order) and the Slurm state lines
    ((time seen, text)), which a poll sees after the phases that came before them."""
    timed = [(when, event_line(event)) for event in events
             for when in [event.get("time") if isinstance(event.get("time"), (int, float)) else 0.0]]
    timed += [(when, f"[{time.strftime('%H:%M:%S', time.localtime(when))}] {text}") for when, text in states]
    return [line for _, line in sorted(timed, key=lambda pair: pair[0])]
