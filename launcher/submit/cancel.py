"""`sf cancel`: scancel every job of a run, or of every point of a sweep, and record it.

One poll (launcher.monitor) says which are still running; one scancel (launcher.slurm)
ends them; each cancelled run's record gets `cancelled` at once (sacct lags a second).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher import runs, slurm
from launcher.monitor import poll as monitor
from launcher.spec.site import runs_root
from launcher.states import CANCELLED, run_ended


@dataclass
class Cancelled:
    target: runs.Run
    job_ids: list[str] = field(default_factory=list)
    cancelled: list = field(default_factory=list)  # the runs whose jobs were cancelled
    not_running: list[dict] = field(default_factory=list)  # {run, state}: nothing to cancel


def cancel(target: str, site_path: str | None, runs_dir: str | None) -> Cancelled:
    root = runs_root(runs_dir, site_path=site_path)
    run = runs.open_run(root, target)
    run.record()  # a damaged record or events.jsonl: one line naming it (the poll would skip it)
    status = monitor.poll([run], runs_dir=root, write_back=False)[0]
    targets = [(run, status)]
    if status.kind == "sweep":
        targets += [(runs.open_run(root, p["run_id"]), None) for p in status.points if p.get("run_id")]
    out = Cancelled(run)
    member_states = {p.get("run_id"): p.get("state") for p in status.points if p.get("run_id")}
    for r, st in targets:
        rec = r.record()
        state = st.state if st is not None else member_states.get(r.id, rec.get("state"))
        ids = [str(j) for j in rec.get("job_ids") or []]
        if not ids or run_ended(state):
            if r is run and status.kind == "sweep" and not ids:
                continue
            out.not_running.append({"run": r.id, "state": state})
            continue
        out.job_ids.extend(ids)
        out.cancelled.append(r)
    if out.job_ids:
        slurm.scancel(out.job_ids)
    for r in out.cancelled:
        r.add_state(CANCELLED, by="sf cancel", job_ids=[str(j) for j in r.record().get("job_ids") or []])
    return out
