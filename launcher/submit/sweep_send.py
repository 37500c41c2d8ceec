"""`sf sweep`'s prepare and send: what launcher/cli/cmd_sweep.py calls (it parses and prints).

    prepare_sweep(name, flags, grid_items, max_parallel, preflight) -> Sweep
        every point prepared by pipeline.prepare_run, as `sf submit` prepares one run; one bad
        point fails the whole sweep (SpecErrors naming the point), before anything is written
    send(sweep, say) -> Sent
        the sweep record and one run record per point (launcher.runs), a manifest, then the
        sending: ONE job (an array) or n jobs chained with afterany dependencies (hetjobs, at
        most K at once), each a written request (request.written_request) sent by
        pipeline.submit, the one send path (sbatch, the job's records, the dependency: the
        Plan's own joined with the throttle or the chained export's job)
    failed(sweep_id, ...) / resend(...)  `sf sweep --retry-failed`: the failed points again,
        through the same pipeline.submit

`say(line)` is the caller's: the lines a send has to tell as it goes (warnings, Slurm's
errors, a chained export queued). The layout of records and jobs: launcher.submit.sweep.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from launcher import runs
from launcher.errors import SlurmError, SpecError, SpecErrors
from launcher.monitor import poll as monitor
from launcher.render.script import array_directive
from launcher.spec.site import load_site, runs_root
from launcher.states import RETRYING, SUBMIT_FAILED, SUBMITTED, SUBMITTING
from launcher.submit import pipeline
from launcher.submit import sweep as sweep_mod
from launcher.submit.chain import join, queued_model_from
from launcher.submit.live import verify
from launcher.submit.pipeline import placeholder_run_dir, run_files
from launcher.submit.request import written_request

Say = Callable[[str], None]


@dataclass
class Sweep:
    """A prepared sweep: what its dry run shows and its send sends."""

    grid: list  # [(key, [values])]
    given: list[dict]  # each point's grid text
    points: list  # [(values verl gets, Request)] (sweep.point_values)
    site: object
    runtime: object
    exports: dict  # {ChainExport: its Request}: the export `--model run:RUN` queues first
    max_parallel: int
    preflight: bool

    @property
    def first(self):
        return self.points[0][1]

    @property
    def mode(self) -> str:
        return "hetjobs" if self.first.plan.is_hetjob else "array"

    def script(self) -> str:
        """The batch script the dry run shows: the array's one script (placeholder sweep dir),
        or the first point's hetjob script."""
        if self.mode != "array":
            return self.first.script
        sweep_dir = placeholder_run_dir(self.site.runs_dir, self.first.experiment)
        return _array_script(self.first, self.first.plan, self, Path(sweep_dir).name.lower(), sweep_dir)


@dataclass
class Sent:
    sweep_run: runs.Run
    members: list
    mode: str
    max_parallel: int
    ok: bool
    warnings: list[str] = field(default_factory=list)  # the points' compile warnings


def prepare_sweep(name: str, flags: dict, grid_items, max_parallel, preflight: bool) -> Sweep:
    """Parse the grid, prepare every point (pipeline.prepare_run with its grid values as the
    sweep point, so a point's job is the job `sf submit` would send for it); SpecErrors
    naming every bad point, a problem of every point said once."""
    if max_parallel is not None:
        try:
            max_parallel = int(str(max_parallel))
        except ValueError:
            raise SpecError("--max-parallel", f"{max_parallel!r} must be a whole number >= 1") from None
    grid = sweep_mod.parse_grid(grid_items)
    given = sweep_mod.expand(grid)
    k = sweep_mod.check_max_parallel(max_parallel, len(given))
    prepared, found = [], []
    for index, params in enumerate(given):
        where = f"point {index} ({sweep_mod.given_label(params)})"
        try:
            request = pipeline.prepare_run(name, sweep_mod.point_flags(flags, params), preflight=preflight)
            prepared.append((sweep_mod.point_values(params, request.plan.resolved), request))
        except SpecErrors as exc:
            found += [(where, e) for e in exc.errors]
        except SpecError as exc:
            found.append((where, exc))
    if found:
        raise SpecErrors(_said_once(found, len(given)))
    errors = sweep_mod.same_jobs([(params, values, request.plan.overrides, request.plan.sources)
                                  for params, (values, request) in zip(given, prepared, strict=True)])
    if errors:
        raise SpecErrors(errors)
    first = prepared[0][1]
    for index, (values, request) in enumerate(prepared):
        if request.plan.pools != first.plan.pools:
            raise SpecError(f"point {index} ({sweep_mod.label(values)})",
                            "changes the pools (nodes, GPUs or het groups); a sweep's points must share one shape")
        if request.runtime != first.runtime:
            raise SpecError(f"point {index} ({sweep_mod.label(values)})",
                            "changes the verl runtime; a sweep's points must share one")
    exports = {}
    for _values, request in prepared:
        chain_export = request.spec.chain_export
        if chain_export is not None and chain_export not in exports:
            exports[chain_export] = request.upstream
    return Sweep(grid=grid, given=given, points=prepared, site=first.site, runtime=first.runtime,
                 exports=exports, max_parallel=k, preflight=preflight)


def _said_once(found: list, n: int) -> list[SpecError]:
    """The points' errors, each naming its point; one every point has (a flag, a damaged
    --after run) said once, without a point."""
    counts = Counter(str(e) for _where, e in found)
    shared = {text for text, count in counts.items() if n > 1 and count == n}
    errors, said = [], set()
    for where, e in found:
        if str(e) not in shared:
            errors.append(SpecError(where, str(e)))
        elif str(e) not in said:
            said.add(str(e))
            errors.append(e)
    return errors


def _array_script(request, plan, sweep: Sweep, sweep_id: str, sweep_dir: str) -> str:
    """The one batch script of an array sweep (each task reads its point from the manifest)."""
    array = {"size": len(sweep.points), "max_parallel": sweep.max_parallel, "sweep_id": sweep_id,
             "sweep_dir": sweep_dir}
    return run_files(request.spec, plan, sweep.site, sweep.runtime, preflight=sweep.preflight, array=array).script


def send(sweep: Sweep, say: Say, queued: Callable[[object, str], None]) -> Sent:
    """Write the sweep's records and files, then send: the chained exports first (each point
    waits on its own; `queued(chain_export, job_id)` as each is queued), then the array or
    the throttled hetjobs."""
    n, site, mode, k = len(sweep.points), sweep.site, sweep.mode, sweep.max_parallel
    # as sf submit: the pools against the partitions, the account/QOS where enforced (the
    # points differ only in knobs and overrides, so the first point's plan speaks for all);
    # exit 2 here, before any record is written
    for warning in verify(sweep.first.plan, site, getattr(sweep.first.spec, "origins", None)):
        say(f"sf: warning: {warning}")
    sweep_run = _create_sweep_record(sweep)
    members, plans = _write_members(sweep, sweep_run)
    for r in [sweep_run, *members]:
        r.add_state(SUBMITTING)
    export_jobs, waits = _send_chained_exports(sweep, sweep_run, members, queued)
    if mode == "array":
        after = "afterok:" + ":".join(sorted(set(export_jobs.values()))) if export_jobs else None
        ok = _send_array(sweep_run, members, list(range(n)), n, k, site.pass_sbatch_env, say, after=after,
                         own_dependency=pipeline.own_dependency(plans[0].slurm.dependency, array=True))
    else:
        ok = _send_hetjobs(sweep_run, members, k, site.pass_sbatch_env, say, waits=waits)
    return Sent(sweep_run, members, mode, k, ok, sorted({w for p in plans for w in p.warnings}))


def _create_sweep_record(sweep: Sweep):
    """The sweep's own run record: its grid, its points and how they are sent (no members yet)."""
    first = sweep.first
    return runs.create_run(first.runs_dir, first.experiment, kind="sweep", mode=sweep.mode,
                           grid=[{"key": key, "values": values} for key, values in sweep.grid],
                           points=[{"index": i, "params": values, "given": given} for i, ((values, _r), given)
                                   in enumerate(zip(sweep.points, sweep.given, strict=True))],
                           max_parallel=sweep.max_parallel, preflight=sweep.preflight,
                           runtime=sweep.runtime.to_dict(), members=[], submissions=[],
                           share_group=sweep.site.share_group)


def _write_members(sweep: Sweep, sweep_run) -> tuple[list, list]:
    """One run record and its files per point, plus (array mode) the manifest and the shared
    script; any failure marks the sweep and the members written so far SUBMIT_FAILED."""
    members, plans = [], []
    try:
        for index, (values, request) in enumerate(sweep.points):
            member = runs.create_run(request.runs_dir, request.experiment, sweep={"id": sweep_run.id, "index": index},
                                     share_group=sweep.site.share_group, params=values, preflight=sweep.preflight,
                                     runtime=sweep.runtime.to_dict(), attempts=[],
                                     **({"model_from": dict(request.chain)} if request.chain else {}))
            members.append(member)
            plan = request.plan.with_run_dir(str(member.dir))  # compiled once, bound here
            plans.append(plan)
            files = request.rendered(str(member.dir)).files
            if sweep.mode == "array":  # the tasks share the sweep's script; each reads its point from the manifest
                files.pop("job.sbatch")
            for file_name, text in files.items():
                member.write_text(file_name, text)
        sweep_run.update(members=[m.id for m in members])
        if sweep.mode == "array":
            _write_array_files(sweep, sweep_run, members, plans)
    except Exception as exc:
        for r in [sweep_run, *members]:
            r.add_state(SUBMIT_FAILED, error=str(exc))
        raise
    return members, plans


def _write_array_files(sweep: Sweep, sweep_run, members: list, plans: list) -> None:
    """An array sweep's manifest (each task's point) and its one script, which every member names."""
    sweep_run.write_json("manifest.json", sweep_mod.manifest(sweep_run.id, [
        {"index": i, "run_id": m.id, "run_dir": str(m.dir), "checkpoint_dir": p.checkpoint_dir,
         "params": sweep.points[i][0], "overrides": list(p.overrides), "check_paths": list(p.paths_to_check)}
        for i, (m, p) in enumerate(zip(members, plans, strict=True))]))
    sweep_run.write_text("job.sbatch", _array_script(sweep.first, plans[0], sweep, sweep_run.id, str(sweep_run.dir)))
    for m in members:
        m.update(script=str(sweep_run.path("job.sbatch")))


def _send_chained_exports(sweep: Sweep, sweep_run, members: list,
                          queued: Callable[[object, str], None]) -> tuple[dict, list]:
    """--model run:RUN without an export: its export first (once), every point waits on it.
    Returns the export jobs by chained export and, per point, afterok:<its export job> or None."""
    export_jobs = {}
    for ce, export in sweep.exports.items():
        try:
            export_jobs[ce] = pipeline.submit(export).job_id
        except SlurmError as exc:
            for r in [sweep_run, *members]:
                r.add_state(SUBMIT_FAILED, error=f"the export of run {ce.run_id}: {exc}")
            raise
        queued(ce, export_jobs[ce])
    waits = []
    for member, (_values, request) in zip(members, sweep.points, strict=True):
        ce = request.spec.chain_export
        waits.append(f"afterok:{export_jobs[ce]}" if ce is not None else None)
        if ce is not None:
            member.update(model_from=queued_model_from(request.chain, export_job=export_jobs[ce],
                                                       export_id=ce.export_id, export_after=ce.after))
    if export_jobs:
        sweep_run.update(chain_exports=[{**ce.describe(), "job_id": job} for ce, job in export_jobs.items()])
    return export_jobs, waits

def _send_array(sweep_run, members, indices, n, k, pass_env, say: Say, *, own_dependency: str | None = None,
                after: str | None = None) -> bool:
    """The sweep's array script (for `indices`) through pipeline.submit; `after`: a wait the
    whole array has besides its Plan's own dependency (the chained export's job)."""
    chosen = [m for m in members if (m.raw_record().get("sweep") or {}).get("index") in indices]
    extra = [] if len(indices) == n else [array_directive(n, min(k, len(indices)), indices=indices)]
    request = written_request(sweep_run, "job.sbatch", pass_sbatch_env=pass_env, own_dependency=own_dependency,
                              after=after, sbatch_args=extra,
                              tasks=[(m, f"_{m.raw_record()['sweep']['index']}") for m in chosen])
    try:
        array_id = pipeline.submit(request).job_id
    except SlurmError as exc:
        sweep_run.add_state(SUBMIT_FAILED, error=str(exc))
        say(f"sf: slurm error: {exc}")
        return False

    def add_array(rec):
        rec["job_ids"] = [array_id] + [j for j in rec.get("job_ids") or [] if j != array_id]
        rec.setdefault("submissions", []).append({"time": runs.utc_now(), "job_id": array_id, "indices": indices})

    sweep_run.mutate(add_array)
    sweep_run.add_state(SUBMITTED, job_id=array_id, indices=indices)
    return True


def _send_hetjobs(sweep_run, members, k, pass_env, say: Say, waits: list[str | None] | None = None) -> bool:
    """One pipeline.submit per point, at most k at once (afterany chains); `waits[i]`: a
    dependency point i waits on besides (its chained export's job)."""
    submitted: list[str | None] = []
    ok = True
    for i, m in enumerate(members):
        after = join(sweep_mod.dependency_for(i, submitted, k), (waits or [None] * len(members))[i])
        request = written_request(m, "job.sbatch", tasks=[(m, "")], pass_sbatch_env=pass_env, after=after,
                                  own_dependency=_point_dependency(m) if after else None)
        try:
            submitted.append(pipeline.submit(request).job_id)
        except SlurmError as exc:
            say(f"sf: slurm error: point {m.raw_record()['sweep']['index']}: {exc}")
            submitted.append(None)
            ok = False
    indices = [m.raw_record()["sweep"]["index"] for m in members]

    def add(rec):
        rec.setdefault("submissions", []).append({"time": runs.utc_now(), "job_ids": submitted, "indices": indices})

    sweep_run.mutate(add)
    sweep_run.add_state(SUBMITTED if any(submitted) else SUBMIT_FAILED, job_ids=[j for j in submitted if j])
    return ok


def _point_dependency(member) -> str | None:
    """A hetjob point's own --dependency, from its plan.json (the Plan its script was rendered
    from): the throttle on sbatch's command line carries it."""
    plan = member.read_plan() or {}
    return pipeline.own_dependency((plan.get("slurm") or {}).get("dependency"), array=False)


@dataclass
class Failed:
    """A sweep's failed points, found by one poll (`sf sweep --retry-failed`)."""

    sweep_run: runs.Run
    mode: str
    members: dict  # index -> its run
    failed: list[int]
    points: list[dict]  # the monitor's status.points
    max_parallel: int
    pass_env: tuple  # the site's slurm.pass_sbatch_env


def failed(sweep_id: str, site_path: str | None, runs_dir: str | None) -> Failed:
    """The sweep's record and its failed points (one sacct call through the monitor)."""
    root = runs_root(runs_dir, site_path=site_path)
    sweep_run = runs.open_run(root, sweep_id)
    rec = sweep_run.record()
    if rec.get("kind") != "sweep":
        raise SpecError("--retry-failed", f"{sweep_run.id} is a run, not a sweep; resubmit it with sf submit")
    mode = rec.get("mode")
    if mode not in ("array", "hetjobs") or not rec.get("members"):
        raise SpecError("--retry-failed", f"sweep {sweep_run.id} has no points recorded by sf sweep")
    status = monitor.poll([sweep_run], runs_dir=root)[0]
    points = sweep_mod.failed_points(status.points)
    members = {(r.raw_record().get("sweep") or {}).get("index"): r
               for r in (runs.Run(root / m) for m in rec["members"])}
    return Failed(sweep_run, mode, members, points, status.points, int(rec.get("max_parallel") or len(points) or 1),
                  tuple(load_site(site_path).pass_sbatch_env))


def resend(found: Failed, say: Say) -> Sent:
    """The failed points again: the same run dirs (verl resumes from their checkpoints), new
    jobs (a new array over their indices, or new hetjobs)."""
    chosen = [found.members[i] for i in found.failed]
    for m in chosen:
        m.add_state(RETRYING, by="sf sweep --retry-failed")
    pass_env = found.pass_env
    if found.mode == "array":
        ok = _send_array(found.sweep_run, [found.members[i] for i in sorted(found.members)], found.failed,
                         len(found.members), found.max_parallel, pass_env, say)
    else:
        ok = _send_hetjobs(found.sweep_run, chosen, found.max_parallel, pass_env, say)
    return Sent(found.sweep_run, chosen, found.mode, found.max_parallel, ok)
