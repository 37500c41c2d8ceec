"""Where runs are: one Slurm query per poll, progress from the run directory.

poll(runs) gathers the job ids of every run (and of every point of a sweep) and asks
Slurm ONCE (launcher.slurm.job_states: one sacct, or one squeue when accounting is
down). Progress comes from the run directory, never from the cluster: the phases the job
appended to events.jsonl (allocated, ray up, driver started, ...) and verl's own log
lines in logs/ (`step:K - ...`, `Total training steps: N`, `Training Progress: ... K/N`).
A state Slurm reports that differs from the record is written back through runs (so
`sf list` shows it without asking Slurm).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from launcher import runs as runs_mod
from launcher import slurm
from launcher import states as vocabulary
from launcher.errors import SpecError
from launcher.monitor import progress
from launcher.states import (
    CANCELLED,
    CANCELLING,
    COMPLETING,
    CREATED,
    GONE,
    PENDING,
    PREEMPTED,
    REQUEUED_STATE,
    RUN_RUNNING,
    RUN_TERMINAL,
    RUNNING,
    SUBMIT_FAILED,
    SUBMITTED,
    UNKNOWN,
    run_ended,
    run_state,
)

# at most 15 digits: a longer number in a log is not a step (and int() refuses 4,300 digits)
_STEP = re.compile(r"(?:^|[\s|\]])step:(\d{1,15})\s+-\s")
_TOTAL = re.compile(r"Total training steps:\s*(\d{1,15})\b")
_TQDM = re.compile(r"Training Progress:.*?\|\s*(\d{1,15})/(\d{1,15})\b")
_TOTAL_OVERRIDE = re.compile(r"^trainer\.total_training_steps=(\d{1,15})$")
LOG_SUFFIXES = (".out", ".err", ".log", ".txt")
TAIL_BYTES = 128 * 1024
HEAD_BYTES = 64 * 1024
MAX_PROGRESS_FILES = 4

@dataclass
class RunStatus:
    id: str
    experiment: str
    kind: str  # "run" | "sweep"
    state: str  # lower case: created, submitted, pending, running, completed, failed, ...
    progress: str  # one short human line: "queued (Priority)", "ray up", "step 3/10", ...
    job_ids: list[str] = field(default_factory=list)
    slurm_state: str | None = None  # aggregated Slurm state, None when not asked
    reason: str | None = None  # Slurm's pending reason
    nodes: str = ""
    elapsed: str = ""
    exit_code: str = ""
    phase: str | None = None  # latest phase from events.jsonl
    step: int | None = None
    total_steps: int | None = None
    step_at: float | None = None  # when the newest step arrived (epoch s; the watchdog's progress.json)
    requeue_count: int = 0
    # each restart of Ray and the driver inside the allocation (launcher/injob/heal.py):
    # {"n", "job_id", "cause", "nodes", "resumed_from", "iso"}
    restarts_in_place: list[dict] = field(default_factory=list)
    exit_reason: str | None = None
    sweep: dict | None = None
    created: str = ""
    points: list[dict] = field(default_factory=list)  # sweeps: one entry per point
    jobs: dict = field(default_factory=dict)  # every job/component/task state seen
    done: bool = False
    source: str | None = None  # "sacct" | "squeue" | None (not asked)
    warning: str | None = None  # e.g. "accounting unavailable ...; states from squeue"

    def to_dict(self) -> dict:
        return asdict(self)


def restarts_in_place(phases: list[dict]) -> list[dict]:
    """The run's restarts in place, from its `restarted_in_place` phases (pure)."""
    return [{"n": e.get("restart_in_place"), "job_id": e.get("job_id"), "cause": e.get("cause"),
             "nodes": e.get("nodes"), "left_out": e.get("left_out"), "spares_used": e.get("spares_used"),
             "resumed_from": e.get("resumed_from"), "iso": e.get("iso")}
            for e in phases if e.get("phase") == vocabulary.RESTARTED_IN_PLACE]


# --- progress from files -------------------------------------------------------------------

def _tail(path: Path, size: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            end = handle.tell()
            handle.seek(max(0, end - size))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def log_files(run_dir) -> list[Path]:
    """Log files under <run>/logs (recursive), oldest first."""
    logs = Path(run_dir) / "logs"
    if not logs.is_dir():
        return []
    files = [p for p in logs.rglob("*") if p.is_file() and
             (p.suffix in LOG_SUFFIXES or p.name.startswith("slurm-"))]
    files.sort(key=lambda p: (p.stat().st_mtime, p.name))
    return files


def parse_progress(text: str) -> tuple[int | None, int | None]:
    """(last step, total steps) from verl's console output."""
    step = total = None
    for match in _STEP.finditer(text):
        step = int(match.group(1))
    for match in _TOTAL.finditer(text):
        total = int(match.group(1))
    for match in _TQDM.finditer(text.replace("\r", "\n")):
        done, total_bar = int(match.group(1)), int(match.group(2))
        total = total or total_bar
        if step is None or done > step:
            step = done
    return step, total


def _total_from_plan(run: runs_mod.Run, rec: dict) -> int | None:
    if rec.get("total_steps"):
        return int(rec["total_steps"])
    try:
        plan = run.read_plan() or {}
    except ValueError:  # damaged: the total is unknown, the status still shown
        return None
    for override in plan.get("overrides", ()):
        match = _TOTAL_OVERRIDE.match(str(override))
        if match:
            return int(match.group(1))
    return None


def _progress_files(run_dir) -> list[Path]:
    """The files verl's driver output lands in: driver logs, else the batch output
    (slurm-*.out), else the newest few."""
    files = log_files(run_dir)
    preferred = [f for f in files if "driver" in f.name] or \
        [f for f in files if f.name.startswith("slurm-")]
    return (preferred or files)[-MAX_PROGRESS_FILES:]


def _head(path: Path, size: int = HEAD_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(size).decode(errors="replace")
    except OSError:
        return ""


def step_seen(run: runs_mod.Run, rec: dict) -> tuple[int | None, float | None]:
    """(step, when) from progress.json, which the supervisor replaces at each new training step
    of the current job; (None, None) when absent or from another job."""
    try:
        data = run.read_json(runs_mod.PROGRESS) or {}
    except (OSError, SpecError):
        return None, None
    if not isinstance(data, dict) or str(data.get("job_id")) not in _active_ids(rec):
        return None, None
    step, at = data.get("step"), data.get("at")
    return (step if isinstance(step, int) else None), (float(at) if isinstance(at, (int, float)) else None)


def ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def training_progress(run: runs_mod.Run, rec: dict) -> tuple[int | None, int | None]:
    """(last step, total steps): steps from the tail of the driver output, the total from
    the record, the output (tail, then head) or `trainer.total_training_steps` in plan.json."""
    step = total = None
    for path in _progress_files(run.dir):
        s, t = parse_progress(_tail(path))
        if s is not None and (step is None or s > step):
            step = s
        total = t or total
    total = total or (int(rec["total_steps"]) if rec.get("total_steps") else None)
    if total is None and step is not None:
        for path in _progress_files(run.dir):
            total = parse_progress(_head(path))[1] or total
    return step, total or _total_from_plan(run, rec)


# --- states ----------------------------------------------------------------------------

def _active_ids(rec: dict) -> list[str]:
    return [str(j) for j in rec.get("job_ids") or []]


def _progress_line(state: str, job: slurm.JobState | None, event: dict | None,
                   step: int | None, total: int | None, rec: dict, step_at: float | None = None) -> str:
    if state == CREATED:
        return "not submitted"
    if state == SUBMIT_FAILED:
        return "submit failed"
    if state == SUBMITTED and (job is None or job.missing):
        return "submitted"
    if state == PENDING:
        reason = job.reason if job and job.reason and job.reason != "None" else ""
        requeued = " after requeue" if rec.get("requeue_count") else ""
        return f"queued{requeued}" + (f" ({reason})" if reason else "")
    if state in RUN_RUNNING:
        if step is not None:
            since = f" ({ago(time.time() - step_at)})" if step_at is not None else ""
            return (f"step {step}/{total}" if total else f"step {step}") + since
        if event:
            return vocabulary.phase_detail(event)
        return vocabulary.phase_label(vocabulary.ALLOCATED)
    if state == REQUEUED_STATE:
        return vocabulary.phase_label(vocabulary.REQUEUED)
    if step is not None and state in RUN_TERMINAL:
        return f"{state} at step {step}" + (f"/{total}" if total else "")
    return state


def requeue_on(run: runs_mod.Run) -> bool:
    """Whether the job was submitted with --requeue (plan.json): Slurm then requeues it by
    itself after a node failure."""
    try:
        return bool(((run.read_plan() or {}).get("slurm") or {}).get("requeue", True))
    except SpecError:
        return True


def _jobs_of(job_ids: list[str], states: slurm.JobStates | None) -> tuple[slurm.JobState | None, dict]:
    """The run's job (its jobs aggregated when several) and every job's and part's state."""
    job, jobs = None, {}
    if states is None or not job_ids:
        return job, jobs
    if len(job_ids) == 1:
        job = states.get(job_ids[0])
    else:
        parts = [states[j] for j in job_ids if j in states]
        job = slurm.aggregate(",".join(job_ids), parts, "group") if parts else None
    for job_id in job_ids:
        js = states.get(job_id)
        if js is None:
            continue
        jobs[job_id] = js.to_dict()
        for part in js.parts:
            if part in states:
                jobs[part] = states[part].to_dict()
    return job, jobs


def _since_last_submit(rec: dict, phases: list[dict]) -> list[dict]:
    """The phases since the record's jobs were sent: a sweep point sent again (--retry-failed)
    pending is no requeue to ask slurmctld about (UTC ISO times compare as text)."""
    attempts = rec.get("attempts") or []
    since = str((attempts[-1] or {}).get("time") or "") if attempts else ""
    return [e for e in phases if str(e.get("iso") or "") >= since] if since else phases


def _status_for(run: runs_mod.Run, rec: dict, states: slurm.JobStates | None) -> RunStatus:
    job_ids = _active_ids(rec)
    job, jobs = _jobs_of(job_ids, states)
    state = rec.get("state", CREATED)
    if job is not None and not job.missing:
        state = run_state(job.state)
    elif job is not None and job.missing and states is not None and states.source == "squeue" \
            and state not in RUN_TERMINAL:
        state = GONE
    phases = rec.get("phases") or []
    live = {}  # slurmctld's view, asked only of a run that started before and may be requeued
    pends_again = state in (PENDING, REQUEUED_STATE) and bool(_since_last_submit(rec, phases))
    if job is not None and ((job.state == "NODE_FAIL" and requeue_on(run)) or pends_again):
        live = progress.controller_view(job.job_id)
        state = progress.controller_state(live, state) if job.state == "NODE_FAIL" else state
        job = replace(job, reason=progress.pending_reason(live, job.reason))
    requeues = max(int(rec.get("requeue_count") or 0), progress.restarts(live))
    rec = {**rec, "requeue_count": requeues}
    event = vocabulary.latest_event(phases)
    phase = str(event["phase"]) if event else None
    wants_progress = state in (RUNNING, COMPLETING) or (
        state in RUN_TERMINAL and states is not None)
    step, total = training_progress(run, rec) if wants_progress else (None, None)
    seen, step_at = step_seen(run, rec) if wants_progress else (None, None)
    if seen is not None and (step is None or seen >= step):
        step = seen
    else:
        step_at = None  # the console shows a newer step than the record: its time is unknown
    if state in RUN_RUNNING and rec.get("state") == CANCELLED:
        state = CANCELLING  # sf cancel was sent; sacct lags a second behind
    final = rec.get("final") if states is None and state in RUN_TERMINAL else None
    if final:  # ended before: the record holds what Slurm said then
        step, total = final.get("step"), final.get("total_steps")
    # Slurm's reason is a pending reason; sacct keeps the last one (BeginTime after a
    # requeue) on a job that is running again.
    reason = job.reason if job is not None and job.reason not in ("", "None") and state == PENDING else None
    return RunStatus(
        id=rec.get("id", run.id), experiment=rec.get("experiment", ""), kind=rec.get("kind", "run"),
        state=state, progress=_progress_line(state, job, event, step, total, rec, step_at),
        job_ids=job_ids, slurm_state=job.state if job is not None else (final or {}).get("slurm_state"),
        reason=reason,
        nodes=job.nodelist if job is not None else (final or {}).get("nodes", ""),
        elapsed=progress.elapsed_over_attempts(phases, job.elapsed, progress.attempt_of(job.state, requeues))
        if job is not None
        else (final or {}).get("elapsed", ""),
        exit_code=job.exit_code if job is not None else (final or {}).get("exit_code", ""),
        phase=phase, step=step, total_steps=total, step_at=step_at, requeue_count=requeues,
        restarts_in_place=restarts_in_place(phases),
        exit_reason=rec.get("exit_reason"), sweep=rec.get("sweep"), created=rec.get("created", ""),
        jobs=jobs, done=run_ended(state) or not job_ids,
        source=states.source if states is not None else None,
    )


def _sweep_points(rec: dict, sweep_run: runs_mod.Run, states, members: list[RunStatus]) -> list[dict]:
    """One entry per point: array tasks `<array id>_<i>` and/or member runs."""
    points = []
    npoints = rec.get("points")
    if isinstance(npoints, list):
        npoints = len(npoints)
    if states is not None and rec.get("job_ids") and not members:
        array_id = str(rec["job_ids"][0])
        seen = sorted((s for k, s in states.items() if slurm.split_job_id(k)[0] == array_id
                       and slurm.split_job_id(k)[1] is not None),
                      key=lambda s: int(slurm.split_job_id(s.job_id)[1]))
        by_index = {int(slurm.split_job_id(s.job_id)[1]): s for s in seen}
        for index in range(npoints or (max(by_index) + 1 if by_index else 0)):
            s = by_index.get(index)
            array = states.get(array_id)
            # a task between its pending range row and its own row (sacct lag) is pending
            unseen = PENDING if array is not None and not array.done else UNKNOWN
            points.append({"index": index, "job_id": f"{array_id}_{index}",
                           "state": run_state(s.state) if s else unseen,
                           "elapsed": s.elapsed if s else "", "nodes": s.nodelist if s else "",
                           "exit_code": s.exit_code if s else ""})
    for member in members:
        points.append({"index": (member.sweep or {}).get("index"), "run_id": member.id,
                       "job_id": ",".join(member.job_ids), "state": member.state,
                       "progress": member.progress, "elapsed": member.elapsed, "nodes": member.nodes,
                       "exit_code": member.exit_code})
    return points


def _write_back(run: runs_mod.Run, rec: dict, status: RunStatus) -> None:
    """Record what Slurm reported that the record does not have yet: a new state (with
    history), and once the job has ended its final facts (`final`: Slurm state, nodes,
    elapsed, exit code, last training step), so later views need not ask Slurm."""
    if status.slurm_state is None:
        return
    new_state = None
    if status.state not in (UNKNOWN, CANCELLING) and status.state != rec.get("state") \
            and rec.get("state") != CANCELLED:  # sf cancel recorded it; sacct may lag
        new_state = status.state
    ended = status.state in RUN_TERMINAL
    final = None
    if ended and not rec.get("final"):
        final = {"slurm_state": status.slurm_state, "nodes": status.nodes, "elapsed": status.elapsed,
                 "exit_code": status.exit_code, "step": status.step, "total_steps": status.total_steps}
    if new_state is None and final is None and not (rec.get("final") and not ended):
        return
    entry = {"state": new_state, "time": runs_mod.utc_now(), "source": status.source}
    if status.exit_code and status.exit_code != "0:0":
        entry["exit_code"] = status.exit_code

    def apply(r):
        # decided on a read without the lock: re-check, so two `sf status` at once
        # record a change once, and never undo a cancel recorded in between
        if new_state is not None and r.get("state") not in (new_state, CANCELLED):
            r["state"] = new_state
            r.setdefault("history", []).append(entry)
        if final is not None and not r.get("final"):
            r["final"] = final
        elif not ended:
            r.pop("final", None)  # requeued after it looked ended

    try:
        run.mutate(apply)
    except (OSError, SpecError):
        pass  # someone else's read-only runs dir, or a record locked too long: status still shows the truth


def _read_records(runs: list[runs_mod.Run], runs_dir) -> tuple[dict, dict]:
    """({run: its record} for the runs and every sweep's members, {sweep run: its members});
    a record that cannot be read is left out."""
    records = {}
    for run in runs:
        try:
            records[run] = run.record()
        except (OSError, ValueError):
            continue
    members: dict[runs_mod.Run, list[runs_mod.Run]] = {}
    for run, rec in list(records.items()):
        if rec.get("kind") == "sweep":
            root = run.dir.parent  # members are run folders beside the sweep (per-user in a shared runs folder)
            if rec.get("members"):
                members[run] = [runs_mod.Run(Path(root) / m) for m in rec["members"]
                                if (Path(root) / m / runs_mod.RECORD).is_file()]
            else:
                members[run] = runs_mod.sweep_members(root, rec["id"])
            for member in members[run]:
                if member not in records:
                    try:
                        records[member] = member.record()
                    except (OSError, ValueError):
                        pass
    return records, members


def poll(runs: list[runs_mod.Run], *, runs_dir=None, write_back: bool = True,
         skip_ended: bool = False) -> list[RunStatus]:
    """Status of every run (and every point of a sweep) from ONE job_states call.

    skip_ended: do not ask Slurm about runs whose record already says they ended (the
    record is the answer); used by the overview so old runs cost nothing."""
    records, members = _read_records(runs, runs_dir)
    ids = []
    for rec in records.values():
        state = rec.get("state")
        if skip_ended and state in RUN_TERMINAL and state != PREEMPTED:  # preempted jobs come back
            continue
        for job_id in _active_ids(rec):
            if job_id not in ids:
                ids.append(job_id)
    states = slurm.job_states(ids) if ids else None

    def status_of(run):
        rec = records[run]
        asked = states if states is not None and all(j in ids for j in _active_ids(rec)) else None
        status = _status_for(run, rec, asked)
        if write_back and asked is not None:
            _write_back(run, rec, status)
            if status.total_steps and not rec.get("total_steps") and status.state in (RUNNING, COMPLETING):
                try:
                    run.update(total_steps=status.total_steps)
                except OSError:
                    pass
        if asked is not None:
            status.warning = states.warning
        return status

    out = []
    for run in runs:
        if run not in records:
            continue
        status = status_of(run)
        if records[run].get("kind") == "sweep":
            member_status = [status_of(m) for m in members.get(run, []) if m in records]
            status.points = _sweep_points(records[run], run, states if status.source else None,
                                          member_status)
            if status.points:
                agg = slurm.aggregate_state([p["state"].upper() for p in status.points])
                if status.slurm_state is None or member_status:
                    status.state = agg.lower()
                counts = {}
                for p in status.points:
                    counts[p["state"]] = counts.get(p["state"], 0) + 1
                status.progress = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                status.done = all(run_ended(p["state"])
                                  for p in status.points)
                if write_back and member_status and status.state != records[run].get("state"):
                    try:  # a sweep of member runs has no job of its own: its state is theirs
                        run.update(state=status.state)
                    except (OSError, SpecError):
                        pass
        out.append(status)
    return out


def poll_source(statuses: list[RunStatus]) -> tuple[str | None, str | None]:
    """(source, warning) of a poll: where the states came from and what is degraded."""
    for status in statuses:
        if status.source:
            return status.source, status.warning
    return None, None


def jobs_ended(ids: list[str]) -> bool:
    """Slurm says every one of these jobs has ended (sacct; squeue's GONE while accounting
    is down): `sf logs -f` stops following then."""
    states = slurm.job_states(ids)
    return all(states[j].done for j in ids if j in states) or \
        (states.source == "squeue" and all(states[j].state == "GONE" for j in ids))


def slurm_holds(ids: list[str]) -> bool:
    """slurmctld still holds one of these jobs (its last processes may still write)."""
    return slurm.still_queued(ids)
