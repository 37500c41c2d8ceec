"""Chains of runs: `--after RUN` (issue 12 item 3, first part).

`sf submit X --after RUN` (and validate, render, sweep) waits for another run's (or sweep's)
success: RUN resolves to its current job id(s) and becomes `afterok:<id>[:<id>...]` in the
job's `--dependency` (joined with --dependency and the run's own singleton by `,`). A
requeued job keeps its id, so the dependency stays right after that run is requeued. A run
that already completed needs no dependency; one that ended otherwise is an error (exit 2).
The run's state comes from Slurm (one sacct through launcher.monitor), not from a stale record.
"""

from __future__ import annotations

from launcher.errors import SpecError


def after_dependency(run_id: str, runs_dir) -> str | None:
    """`afterok:<id>[:<id>...]` for `--after RUN`, or None when RUN completed already."""
    from launcher import monitor, runs
    from launcher.states import run_ended

    try:
        run = runs.open_run(runs_dir, run_id)
    except SpecError as exc:
        raise SpecError("--after", exc.message) from None
    status = monitor.poll([run], write_back=False)[0]
    job_ids = [str(j) for j in status.job_ids]
    if status.state == "completed":
        return None
    if run_ended(status.state):
        raise SpecError("--after", f"run {run.id} ended {status.state}; it will never succeed: resubmit it "
                        "(or drop --after)")
    if not job_ids:
        raise SpecError("--after", f"run {run.id} has no job yet (state {status.state}); submit it first")
    for job in job_ids:
        if not job.replace("_", "").isdigit():
            raise SpecError("--after", f"run {run.id} has job id {job!r}, which cannot stand in a dependency")
    return "afterok:" + ":".join(job_ids)


def join(dependency: str | None, extra: str | None) -> str | None:
    """Two dependency expressions that must both hold (`,`)."""
    return ",".join(d for d in (dependency, extra) if d) or None
