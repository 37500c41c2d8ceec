"""`sf cancel`: scancel every job of a run, or of every point of a sweep, and record it.

One poll (launcher.monitor) says which are still running; each job's own record in Slurm
must show it is the run's (launcher.monitor.job_owner: the caller's, named after the run,
writing into its logs/), else nothing is cancelled; one scancel (launcher.slurm) ends them,
and sf reads Slurm's state until Slurm says each has ended: only then does a run's record get
`cancelled` and sf say so. A job still not ended after slurm.CANCEL_CONFIRM_S is a SlurmError
naming it and its state (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher import runs, slurm
from launcher.errors import SlurmError
from launcher.monitor import job_owner
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
        if ids and not run_ended(state):
            ids = job_owner.check_jobs(r, rec, ids)  # Slurm's view: the caller's job, this run's
        if not ids or run_ended(state):
            if r is run and status.kind == "sweep" and not ids:
                continue
            out.not_running.append({"run": r.id, "state": state})
            continue
        out.job_ids.extend(ids)
        out.cancelled.append(r)
    if out.job_ids:
        left = slurm.scancel_confirmed(out.job_ids)
        if left:
            raise SlurmError("scancel " + " ".join(out.job_ids) + ": Slurm still shows "
                             + ", ".join(f"job {j} {state}" for j, state in left.items())
                             + f" {slurm.CANCEL_CONFIRM_S:g} s later; not recorded as cancelled "
                             "(see `squeue -j " + ",".join(left) + "`, and try `sf cancel` again)")
    for r in out.cancelled:
        r.add_state(CANCELLED, by="sf cancel", job_ids=[str(j) for j in r.record().get("job_ids") or []])
    return out
