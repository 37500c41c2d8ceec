"""Where a run's start-up time goes, per attempt: sf's phases and verl's own (pure).

An attempt begins where the job starts (`allocated`: the first start and each start after a
requeue) or where sf restarts Ray and the driver inside the allocation (`restarted_in_place`).
Its events are the job-level phases of events.jsonl in order: sf's own (allocated, Ray's
head up, all joined, driver started, ended, requeued, ...) and verl's (`verl_phase`, read
from the driver's log by launcher/injob/verl_phases.py). Per event: seconds since the attempt
began (`at_s`) and since the event before (`took_s`). Per attempt: sf's part (to the driver
started), verl's part (driver started to its first step) and, after a requeue, the time the
job waited in the queue (`queued_s`, from the requeue to the next allocation).
"""
from __future__ import annotations

from launcher import states

SKIPPED = (*states.NODE_PHASES, states.BARRIER_WAITING)  # per node, or repeated while waiting: detail
STARTS = (states.ALLOCATED, states.RESTARTED_IN_PLACE)


def _label(event: dict) -> str:
    label = states.phase_detail(event)
    if event.get("phase") == states.VERL_PHASE and event.get("step") is not None:
        label += f" {event['step']}" if event.get("name") == "resumed" else f" (step {event['step']})"
    return label


def attempts(events: list[dict]) -> list[dict]:
    """The run's attempts, oldest first (see the module's docstring for the fields)."""
    out: list[dict] = []
    last_time = None  # of the event before this attempt: a requeue's end
    for event in events:
        phase = str(event.get("phase", ""))
        if phase in SKIPPED or phase.startswith("node_") or not isinstance(event.get("time"), (int, float)):
            continue
        if phase in STARTS or not out:
            in_place = phase == states.RESTARTED_IN_PLACE
            queued = round(event["time"] - last_time, 2) if last_time is not None and phase == states.ALLOCATED \
                else None
            out.append({"attempt": len(out) + 1, "job_id": event.get("job_id"), "restart": event.get("restart", 0),
                        "restart_in_place": event.get("restart_in_place") if in_place else None,
                        "start": event.get("iso"), "queued_s": queued, "t0": event["time"], "events": []})
        current = out[-1]
        previous = current["events"][-1]["time"] if current["events"] else current["t0"]
        current["events"].append({
            "phase": phase, "name": event.get("name"), "label": _label(event),
            "source": "verl" if phase == states.VERL_PHASE else "sf", "time": event["time"],
            "at_s": round(event["time"] - current["t0"], 2), "took_s": round(event["time"] - previous, 2)})
        last_time = event["time"]
    for attempt in out:
        attempt["sf_s"] = _at(attempt, states.DRIVER_STARTED)
        first = _at(attempt, states.VERL_PHASE, "first_step")
        attempt["verl_s"] = round(first - attempt["sf_s"], 2) if first is not None and attempt["sf_s"] is not None \
            else None
        attempt["to_first_step_s"] = first
        del attempt["t0"]
    return out


def _at(attempt: dict, phase: str, name: str | None = None) -> float | None:
    for event in attempt["events"]:
        if event["phase"] == phase and (name is None or event["name"] == name):
            return event["at_s"]
    return None


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def format_timeline(run_id: str, rows: list[dict]) -> str:
    """`sf status RUN --timeline`: per attempt, its events with their times."""
    if not rows:
        return f"{run_id}: no events yet (the job has not started)"
    lines = [f"{run_id}: {len(rows)} attempt{'s' if len(rows) != 1 else ''}"]
    for attempt in rows:
        how = f"restart in place {attempt['restart_in_place']}" if attempt["restart_in_place"] \
            else f"Slurm start {int(attempt['restart'] or 0) + 1}"
        queued = "" if attempt["queued_s"] is None else f", queued {_seconds(attempt['queued_s'])} after the requeue"
        lines.append(f"\nattempt {attempt['attempt']} (job {attempt['job_id']}, {how}{queued}), "
                     f"from {attempt['start']}")
        lines.append(f"  {'at':>9}  {'took':>9}  {'by':<4}  event")
        for event in attempt["events"]:
            lines.append(f"  {event['at_s']:>7.1f} s  {event['took_s']:>7.1f} s  {event['source']:<4}  "
                         f"{event['label']}")
        lines.append(f"  sf to the driver {_seconds(attempt['sf_s'])}; verl to its first step "
                     f"{_seconds(attempt['verl_s'])}; first step at {_seconds(attempt['to_first_step_s'])}")
    return "\n".join(lines)


def plot_timeline(rows: list[dict], out, title: str = ""):
    """One bar per attempt, a segment per event (from the event before it): sf's in blues,
    verl's in oranges, each labelled; a PNG like `sf plot`'s."""
    from launcher.monitor.metrics import _png, _pyplot, _save  # lazy: matplotlib is an extra (sf[plots])

    plt = _pyplot()
    out = _png(out)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.9 * max(1, len(rows))))
    colours = {"sf": plt.get_cmap("Blues"), "verl": plt.get_cmap("Oranges")}
    for y, attempt in enumerate(rows):
        for i, event in enumerate(attempt["events"]):
            start = event["at_s"] - event["took_s"]
            colour = colours[event["source"]](0.35 + 0.5 * ((i % 4) / 3))
            ax.barh(y, event["took_s"], left=start, color=colour, edgecolor="white", height=0.6)
            if event["took_s"] > 0:
                ax.text(event["at_s"], y + 0.32 * (1 if i % 2 else -1), event["label"], fontsize=6,
                        ha="right", va="center", rotation=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"attempt {a['attempt']}" + (" (in place)" if a["restart_in_place"] else "") for a in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the attempt began (blue: sf, orange: verl)")
    ax.grid(True, axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    return _save(plt, fig, out)
