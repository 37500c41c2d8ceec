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


def model_from_run(text: str, runs_dir) -> tuple[str, str | None]:
    """`--model run:RUN` -> (the folder of RUN's newest export, `afterok:<export job>` while
    that export job is still queued or running, else None). SpecError when RUN has no export
    that is or will be a model: `sf export RUN` first (exporting the last checkpoint on the
    fly, after RUN ends, is not done yet)."""
    from pathlib import Path

    from launcher import runs, slurm
    from launcher.states import slurm_done

    run_id = text[len("run:"):]
    try:
        run = runs.open_run(runs_dir, run_id)
    except SpecError as exc:
        raise SpecError("--model", exc.message) from None
    exports = [e for e in run.record().get("exports") or [] if e.get("target")]
    if not exports:
        raise SpecError("--model", f"run {run.id} has no export; export its checkpoint first "
                        f"(`sf export {run.id} --checkpoint ...`), then pass --model run:{run.id}")
    newest = exports[-1]
    target = str(newest["target"])
    if (Path(target) / "config.json").is_file():
        return target, None
    job = str(newest.get("job_id") or "")
    state = slurm.job_states([job]).get(job) if job.isdigit() else None
    if state is None or slurm_done(state.state):
        raise SpecError("--model", f"run {run.id}'s newest export ({newest.get('id')}) holds no model in {target} "
                        f"(export job {job or 'none'}: {state.state if state else 'not submitted'}); "
                        f"export it again (`sf export {run.id} ...`)")
    return target, f"afterok:{job}"
