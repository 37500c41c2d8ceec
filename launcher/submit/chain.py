"""Chains of runs: `--after RUN` and `--model run:RUN` (issue 12 item 3).

`sf submit X --after RUN` (and validate, render, sweep) waits for another run's (or sweep's)
success: RUN resolves to its current job id(s) and becomes `afterok:<id>[:<id>...]` in the
job's `--dependency` (joined with --dependency and the run's own singleton by `,`). A
requeued job keeps its id, so the dependency stays right after that run is requeued. A run
that already completed needs no dependency; one that ended otherwise is an error (exit 2).
The run's state comes from Slurm (one sacct through launcher.monitor.poll), not from a stale record.

`--model run:RUN` takes RUN's newest export (its folder, plus `afterok:<export job>` while
that job has not ended). When RUN has no export yet (still queued or running, or completed
without one), `sf submit` exports RUN's last checkpoint on the fly: a `ChainExport` names
the export job it queues first (through launcher.submit.pipeline, the request `sf export` sends)
with `afterok:<RUN's job>`, and its output folder `<RUN>/exports/<export id>`, fixed now so
that the new run's model path is known before either job runs. The new run then waits on
`afterok:<export job>` (pipeline.submit binds it), so SFT -> GRPO -> export queue at once.
`sf sweep --model run:RUN` queues that export once and every point waits on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from launcher import runs, slurm
from launcher.errors import SpecError
from launcher.spec.experiment import MergedSpec, load_spec
from launcher.states import COMPLETED, run_ended, slurm_done


@dataclass(frozen=True)
class ChainExport:
    """The export of RUN's last checkpoint that `--model run:RUN` queues before the new run."""

    run_id: str
    run_dir: str
    export_id: str
    target: str  # <RUN>/exports/<export id>: the new run's model path; only that export writes it
    after: str | None  # afterok:<RUN's job>; None when RUN completed already
    upstream_preflight: bool  # RUN is a preflight: it saves no checkpoint (the export preflight says so)

    def describe(self) -> dict:
        return {"run": self.run_id, "export_id": self.export_id, "target": self.target, "after": self.after}


def _dependency_on(run, field: str, drop: str) -> str | None:
    """`afterok:<RUN's job ids>`, None when RUN completed; SpecError (naming `field`) when
    RUN ended otherwise or has no job."""
    from launcher.monitor import poll as monitor  # lazy: only a chain asks Slurm (a plain sf submit never does)

    try:
        run.raw_record()  # a damaged record: one line naming it (the poll would skip it)
    except runs.DamagedRecord as exc:
        raise SpecError(field, exc.message) from None
    status = monitor.poll([run], write_back=False)[0]
    job_ids = [str(j) for j in status.job_ids]
    if status.state == COMPLETED:
        return None
    if run_ended(status.state):
        raise SpecError(field, f"run {run.id} ended {status.state}; it will never succeed: resubmit it ({drop})")
    if not job_ids:
        raise SpecError(field, f"run {run.id} has no job yet (state {status.state}); submit it first")
    for job in job_ids:
        if not job.replace("_", "").isdigit():
            raise SpecError(field, f"run {run.id} has job id {job!r}, which cannot stand in a dependency")
    return "afterok:" + ":".join(job_ids)


def after_dependency(run_id: str, runs_dir) -> str | None:
    """`afterok:<id>[:<id>...]` for `--after RUN`, or None when RUN completed already."""
    try:
        run = runs.open_run(runs_dir, run_id)
    except SpecError as exc:
        raise SpecError("--after", exc.message) from None
    return _dependency_on(run, "--after", "or drop --after")


def join(dependency: str | None, extra: str | None) -> str | None:
    """Two dependency expressions that must both hold (`,`)."""
    return ",".join(d for d in (dependency, extra) if d) or None


# One chained export per RUN per command: every point of `sf sweep --model run:RUN` is
# compiled on its own, and all of them must name the same export folder as their model.
_CHAIN_EXPORT_IDS: dict[str, str] = {}


def model_from_run(text: str, runs_dir) -> tuple[str, str | None, ChainExport | None]:
    """`--model run:RUN` -> (the model folder, a dependency or None, the export to queue first
    or None).

    RUN has an export: its newest one's folder, with `afterok:<export job>` while that job is
    queued or running (an export that ended without a model is an error). RUN has none: the
    folder of a ChainExport of its last checkpoint, which `sf submit` queues after RUN's job;
    a RUN that failed or was cancelled (no checkpoint will come) is an error."""
    run_id = text[len("run:"):]
    try:
        run = runs.open_run(runs_dir, run_id)
    except SpecError as exc:
        raise SpecError("--model", exc.message) from None
    record = run.record()
    if record.get("kind") == "sweep":
        raise SpecError("--model", f"{run.id} is a sweep; pass one of its runs (`sf status {run.id}`)")
    # a preflight export merges nothing: never a model (another preflight chain makes its own)
    exports = [e for e in record.get("exports") or [] if e.get("target") and not e.get("preflight")]
    if not exports:
        after = _dependency_on(run, "--model", f"or pass another --model than run:{run.id}")
        export_id = _CHAIN_EXPORT_IDS.setdefault(run.id, runs.new_entry_id("export"))
        return (f"{run.dir}/exports/{export_id}", None,
                ChainExport(run_id=run.id, run_dir=str(run.dir), export_id=export_id,
                            target=f"{run.dir}/exports/{export_id}", after=after,
                            upstream_preflight=bool(record.get("preflight"))))
    newest = exports[-1]
    target = str(newest["target"])
    if (Path(target) / "config.json").is_file():
        return target, None, None
    job = str(newest.get("job_id") or "")
    state = slurm.job_states([job]).get(job) if job.isdigit() else None
    if state is None or slurm_done(state.state):
        raise SpecError("--model", f"run {run.id}'s newest export ({newest.get('id')}) holds no model in {target} "
                        f"(export job {job or 'none'}: {state.state if state else 'not submitted'}); "
                        f"export it again (`sf export {run.id} ...`)")
    return target, f"afterok:{job}", None


def queued_model_from(chain: dict | None, *, export_job: str, export_id: str | None,
                      export_after: str | None) -> dict:
    """A new run's record `model_from` once the export it waits on is queued: what
    `--model run:RUN` named (run, target) plus that export's job, id and own dependency."""
    return {**(chain or {}), "export_job": export_job, "export_id": export_id, "exported_by_chain": True,
            "export_after": export_after}


def export_request(export: ChainExport, site, *, preflight: bool):
    """The pipeline Request of a ChainExport: `sf export`'s request for RUN's last
    checkpoint, looked up by the job when it runs, with `afterok:<RUN's job>`, writing
    `export.target`. `preflight` (the new run is a preflight): the export job checks what a
    merge needs and merges nothing. SpecError (--model) when no checkpoint can come."""
    from launcher.submit import export as export_jobs  # lazy: only --model run:RUN exports (start-up cost)

    run = runs.Run(export.run_dir)
    if export.upstream_preflight and not preflight:
        raise SpecError("--model", f"run {export.run_id} is a preflight: it saves no checkpoint to export; "
                        "submit this run with --preflight too (a preflight chain), or chain on a training run")
    if export.after is None and not preflight:  # RUN completed: its checkpoint must be there now
        try:
            export_jobs.find_actor_dir(run.checkpoints_dir)
        except export_jobs.LayoutError as exc:
            raise SpecError("--model", f"run {export.run_id} completed without a checkpoint to export ({exc}); "
                            f"pass --model PATH or export it by hand (`sf export {export.run_id} --checkpoint ...`)"
                            ) from None
    try:
        return export_jobs.export_request(site, Path(export.run_dir).parent, export.run_id, run,
                                          target=export.target, export_id=export.export_id, later=True,
                                          after=export.after, preflight=preflight,
                                          upstream_preflight=export.upstream_preflight)
    except SpecError as exc:
        raise SpecError("--model", f"the export of run {export.run_id}: {exc.field}: {exc.message}") from None


def load_chained(name: str, flags: dict, site) -> MergedSpec:
    """load_spec with `--model run:RUN` and `--after RUN` resolved first (they ask other runs
    and Slurm, which the spec stage knows nothing of): the model becomes RUN's export folder,
    their dependencies join --dependency (provenance --after / --model), and the spec carries
    `model_from` (what the new run's record says) and `chain_export` (the export sf submit
    queues first). RUN is looked up in the site's runs dir (resolved: spec.site.runs_root)."""
    flags = dict(flags or {})
    model_from = chain_export = chained = None
    model = str(flags.get("model") or "")
    if model.startswith("run:"):
        flags["model"], chained, chain_export = model_from_run(model, site.runs_dir)
        model_from = {"run": model[len("run:"):], "target": flags["model"],
                      "export_job": chained.split(":", 1)[1] if chained else None}
    if flags.get("after"):
        chained = join(chained, after_dependency(flags["after"], site.runs_dir))
    if chained:  # --after RUN, and/or --model run:RUN whose export job has not ended
        slurm_flags = dict(flags.get("slurm") or {})
        slurm_flags["dependency"] = join(slurm_flags.get("dependency"), chained)
        provenance = dict(flags.get("slurm_provenance") or {})
        provenance.setdefault("slurm.dependency", "--after" if flags.get("after") else "--model")
        flags["slurm"], flags["slurm_provenance"] = slurm_flags, provenance
    return replace(load_spec(name, flags, site), model_from=model_from, chain_export=chain_export)
