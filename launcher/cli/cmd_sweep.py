"""`sf sweep`: a grid of points as one Slurm job array (or throttled hetjobs).

    sf sweep NAME [spec flags] --grid KEY=V1,V2 [--grid ...] [--max-parallel K]
             [--preflight] [--dry-run] [--json]
    sf sweep --retry-failed SWEEP [--json]

Every point is compiled (and its overrides checked against verl) before anything is
written or submitted: one bad point fails the whole sweep with exit 2, naming the point.
Then a sweep record and one run record per point (launcher.runs), a manifest, and ONE
sbatch (single pool: `--array=0-(n-1)%K`) or n sbatch calls chained with afterany
dependencies (multi-pool hetjobs, at most K at once). See launcher.submit.sweep for the layout.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import click

from launcher import ownership, runs, slurm
from launcher.cli.cmd_run import chain_line
from launcher.cli.options import say_sbatch_env_left_out, spec_flags, spec_options
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


def _compile_points(name: str, flags: dict, points: list[dict], preflight: bool):
    """(site, [(values, request)], runtime, exports): every point prepared by the same
    launcher.submit.pipeline.prepare_run as `sf submit` (load, compile once, the runtime's
    default overrides, the verl compose check) with its grid values as the sweep point, so a
    point's job is the job `sf submit` would send for it; SpecErrors naming every bad point.
    `values`: the point's grid keys with the values verl gets (sweep.point_values), which
    every label, record and manifest shows: a label never disagrees with what ran.
    `exports`: {ChainExport: its Request}, the export `--model run:RUN` queues first when RUN
    has none yet (one per RUN, shared by every point: they all name its folder as their model)."""
    prepared, found = [], []
    for index, params in enumerate(points):
        where = f"point {index} ({sweep_mod.given_label(params)})"
        try:
            request = pipeline.prepare_run(name, sweep_mod.point_flags(flags, params), preflight=preflight)
            prepared.append((sweep_mod.point_values(params, request.plan.resolved), request))
        except SpecErrors as exc:
            found += [(where, e) for e in exc.errors]
        except SpecError as exc:
            found.append((where, exc))
    if found:  # a problem of every point (a flag, a damaged --after run) is said once, not per point
        counts = Counter(str(e) for _where, e in found)
        shared = {text for text, n in counts.items() if len(points) > 1 and n == len(points)}
        errors, said = [], set()
        for where, e in found:
            if str(e) not in shared:
                errors.append(SpecError(where, str(e)))
            elif str(e) not in said:
                said.add(str(e))
                errors.append(e)
        raise SpecErrors(errors)
    errors = sweep_mod.same_jobs([(given, values, request.plan.overrides, request.plan.sources)
                                  for given, (values, request) in zip(points, prepared, strict=True)])
    if errors:
        raise SpecErrors(errors)
    first = prepared[0][1]
    for index, (params, request) in enumerate(prepared):
        if request.plan.pools != first.plan.pools:
            raise SpecError(f"point {index} ({sweep_mod.label(params)})",
                            "changes the pools (nodes, GPUs or het groups); a sweep's points must share one shape")
        if request.runtime != first.runtime:
            raise SpecError(f"point {index} ({sweep_mod.label(params)})",
                            "changes the verl runtime; a sweep's points must share one")
    exports = {}
    for _params, request in prepared:
        chain_export = request.spec.chain_export
        if chain_export is not None and chain_export not in exports:
            exports[chain_export] = request.upstream
    return first.site, prepared, first.runtime, exports


@click.command()
@click.argument("name", required=False)
@spec_options
@click.option("--grid", "grid_items", multiple=True, metavar="KEY=V1,V2",
              help="A knob or Hydra key and its values (repeatable: the points are the product).")
@click.option("--max-parallel", default=None, metavar="K",
              help="At most K points run at once (array `%K`; hetjob sweeps chain dependencies).")
@click.option("--preflight", is_flag=True, help="Every point runs the preflight instead of training.")
@click.option("--dry-run", is_flag=True, help="Compile every point and show what would be submitted; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--retry-failed", "retry", default=None, metavar="SWEEP",
              help="Submit the failed points of SWEEP again (same sweep, same run dirs, new jobs).")
def sweep(name, grid_items, max_parallel, preflight, dry_run, as_json, retry, **kwargs):
    """Submit a grid of runs: one Slurm job array (or throttled hetjobs for multi-pool methods).

    \b
    Examples:
      sf sweep my-grpo --grid actor_lr=1e-6,3e-6 --grid rollout_n=5,8 --max-parallel 2
      sf sweep my-grpo --grid actor_lr=1e-6,3e-6 --dry-run
      sf sweep --retry-failed my-grpo-k3x7q
    """
    flags = spec_flags(kwargs)
    if retry:
        if name or grid_items:
            raise SpecError("--retry-failed", "takes only the sweep id (the points are in its record); "
                            "drop NAME and --grid")
        return _retry(retry, flags.get("site"), flags.get("runs_dir"), as_json, dry_run)
    if not name:
        raise SpecError("NAME", "give the experiment to sweep (or --retry-failed SWEEP)")
    if max_parallel is not None:
        try:
            max_parallel = int(str(max_parallel))
        except ValueError:
            raise SpecError("--max-parallel", f"{max_parallel!r} must be a whole number >= 1") from None
    grid = sweep_mod.parse_grid(grid_items)
    points = sweep_mod.expand(grid)
    k = sweep_mod.check_max_parallel(max_parallel, len(points))
    site, compiled, runtime, exports = _compile_points(name, flags, points, preflight)
    hetjob = compiled[0][1].plan.is_hetjob
    mode = "hetjobs" if hetjob else "array"
    if dry_run:
        return _dry_run(compiled, points, site, runtime, k, mode, preflight, as_json, exports)
    _submit(compiled, points, site, runtime, grid, k, mode, preflight, as_json, exports)


def _array_script(request, plan, site, runtime, preflight: bool, n: int, k: int, sweep_id: str,
                  sweep_dir: str) -> str:
    """The one batch script of an array sweep (each task reads its point from the manifest)."""
    array = {"size": n, "max_parallel": k, "sweep_id": sweep_id, "sweep_dir": sweep_dir}
    return run_files(request.spec, plan, site, runtime, preflight=preflight, array=array).script


def _dry_run(compiled, points, site, runtime, k, mode, preflight, as_json, exports):
    """`points`: each point's grid text, shown beside the values verl gets ("given")."""
    first = compiled[0][1]
    n = len(compiled)
    if mode == "array":
        sweep_dir = placeholder_run_dir(site.runs_dir, first.experiment)
        script = _array_script(first, first.plan, site, runtime, preflight, n, k, Path(sweep_dir).name.lower(),
                               sweep_dir)
    else:
        script = first.script
    pts = [{"index": i, "params": params, "given": given, "overrides": list(request.plan.overrides),
            "sources": list(request.plan.sources)}
           for i, ((params, request), given) in enumerate(zip(compiled, points, strict=True))]
    if as_json:
        click.echo(json.dumps({"experiment": first.experiment, "mode": mode, "points": pts, "max_parallel": k,
                               "array": array_directive(n, k) if mode == "array" else None,
                               "preflight": preflight, "script": script,
                               "chain_exports": [{**ce.describe(), "script": req.script}
                                                 for ce, req in exports.items()],
                               "warnings": sorted({w for _, r in compiled for w in r.warnings})}, indent=2))
        return
    click.echo(script, nl=False)
    shape = f"one job array {array_directive(n, k)}" if mode == "array" else f"{n} hetjobs, at most {k} at once"
    for ce in exports:
        click.echo(chain_line(ce, None, preflight, dry_run=True, waiting="every point"), err=True)
    click.echo(f"sf: dry run: {n} points as {shape}", err=True)
    for p in pts:
        click.echo(f"sf:   point {p['index']}: {sweep_mod.label(p['params'])}", err=True)
    click.echo("sf: dry run: nothing written, nothing submitted", err=True)


# long: the sweep record, its members and the array/hetjob submission; issue 20 moves it into submit/
def _submit(compiled, points, site, runtime, grid, k, mode, preflight, as_json, exports):
    first = compiled[0][1]
    n = len(compiled)
    # as sf submit: the pools against the partitions, the account/QOS where enforced (the
    # points differ only in knobs and overrides, so the first point's plan speaks for all);
    # exit 2 here, before any record is written
    for warning in verify(first.plan, site, getattr(first.spec, "provenance", None)):
        click.echo(f"sf: warning: {warning}", err=True)
    sweep_run = runs.create_run(first.runs_dir, first.experiment, kind="sweep", mode=mode,
                                grid=[{"key": key, "values": values} for key, values in grid],
                                points=[{"index": i, "params": params, "given": given}
                                        for i, ((params, _r), given) in enumerate(zip(compiled, points, strict=True))],
                                max_parallel=k, preflight=preflight, runtime=runtime.to_dict(), members=[],
                                submissions=[], share_group=site.share_group)
    members, plans = [], []
    try:
        for index, (params, request) in enumerate(compiled):
            member = runs.create_run(request.runs_dir, request.experiment, sweep={"id": sweep_run.id, "index": index},
                                     share_group=site.share_group, params=params, preflight=preflight,
                                     runtime=runtime.to_dict(), attempts=[],
                                     **({"model_from": dict(request.chain)} if request.chain else {}))
            members.append(member)
            plan = request.plan.with_run_dir(str(member.dir))  # compiled once, bound here
            plans.append(plan)
            files = request.rendered(str(member.dir)).files
            if mode == "array":  # the tasks share the sweep's script; each reads its point from the manifest
                files.pop("job.sbatch")
            for file_name, text in files.items():
                member.write_text(file_name, text)
        sweep_run.update(members=[m.id for m in members])
        if mode == "array":
            sweep_run.write_json("manifest.json", sweep_mod.manifest(sweep_run.id, [
                {"index": i, "run_id": m.id, "run_dir": str(m.dir), "checkpoint_dir": p.checkpoint_dir,
                 "params": compiled[i][0], "overrides": list(p.overrides), "check_paths": list(p.paths_to_check)}
                for i, (m, p) in enumerate(zip(members, plans, strict=True))]))
            script = _array_script(first, plans[0], site, runtime, preflight, n, k, sweep_run.id, str(sweep_run.dir))
            sweep_run.write_text("job.sbatch", script)
            for m in members:
                m.update(script=str(sweep_run.path("job.sbatch")))
    except Exception as exc:
        for r in [sweep_run, *members]:
            r.add_state(SUBMIT_FAILED, error=str(exc))
        raise
    for r in [sweep_run, *members]:
        r.add_state(SUBMITTING)
    say_sbatch_env_left_out(site.pass_sbatch_env)
    # --model run:RUN without an export: its export first (once), every point waits on it
    export_jobs = {}
    for ce, export in exports.items():
        try:
            export_jobs[ce] = pipeline.submit(export).job_id
        except SlurmError as exc:
            for r in [sweep_run, *members]:
                r.add_state(SUBMIT_FAILED, error=f"the export of run {ce.run_id}: {exc}")
            raise
        click.echo(chain_line(ce, export_jobs[ce], preflight), err=as_json)
    waits = []  # per point: afterok:<its export job>, or None
    for member, (_params, request) in zip(members, compiled, strict=True):
        ce = request.spec.chain_export
        waits.append(f"afterok:{export_jobs[ce]}" if ce is not None else None)
        if ce is not None:
            member.update(model_from=queued_model_from(request.chain, export_job=export_jobs[ce],
                                                       export_id=ce.export_id, export_after=ce.after))
    if export_jobs:
        sweep_run.update(chain_exports=[{**ce.describe(), "job_id": job} for ce, job in export_jobs.items()])
    if mode == "array":
        after = "afterok:" + ":".join(sorted(set(export_jobs.values()))) if export_jobs else None
        ok = _submit_array(sweep_run, members, list(range(n)), n, k, site.pass_sbatch_env, after=after)
    else:
        ok = _submit_hetjobs(sweep_run, members, k, site.pass_sbatch_env, waits=waits)
    for warning in sorted({w for p in plans for w in p.warnings}):
        click.echo(f"sf: warning: {warning}", err=True)
    _report(sweep_run, members, mode, k, as_json, retry=False)
    if not ok:
        sys.exit(1)


def _submit_array(sweep_run, members, indices, n, k, pass_env, after: str | None = None) -> bool:
    """One sbatch of the sweep's array script (for `indices`); `after`: a dependency the
    whole array waits on besides the script's own (the chained export's job)."""
    chosen = [m for m in members if (m.raw_record().get("sweep") or {}).get("index") in indices]
    extra = [] if len(indices) == n else [array_directive(n, min(k, len(indices)), indices=indices)]
    if after:  # the command line replaces the script's --dependency: join the two
        own = sweep_mod.script_dependency(sweep_run.read_text("job.sbatch") or "")
        extra.append(f"--dependency={sweep_mod.throttled_dependency(own, after)}")
    try:
        array_id = slurm.sbatch(sweep_run.path("job.sbatch"), extra_args=extra, pass_env=pass_env,
                                umask=ownership.run_umask(sweep_run.dir))
    except SlurmError as exc:
        for r in [sweep_run, *chosen]:
            r.add_state(SUBMIT_FAILED, error=str(exc))
        click.echo(f"sf: slurm error: {exc}", err=True)
        return False

    def add_array(rec):
        rec["job_ids"] = [array_id] + [j for j in rec.get("job_ids") or [] if j != array_id]
        rec.setdefault("submissions", []).append({"time": runs.utc_now(), "job_id": array_id, "indices": indices})

    sweep_run.mutate(add_array)
    sweep_run.add_state(SUBMITTED, job_id=array_id, indices=indices)
    for m in chosen:
        index = m.raw_record()["sweep"]["index"]
        _point_submitted(m, f"{array_id}_{index}")
    return True


def _point_submitted(member, job_id: str) -> None:
    old_reason = (member.read_text(runs.REASON) or "").strip() or None

    def apply(rec):
        if rec.get("job_ids"):
            rec.setdefault("attempts", []).append({"job_ids": rec["job_ids"], "state": rec.get("state"),
                                                   "reason": rec.get("exit_reason") or old_reason,
                                                   "time": runs.utc_now()})
        rec["job_ids"] = [job_id]
        rec.pop("final", None)  # the monitor's facts of the ended attempt
        rec["exit_reason"] = None

    member.mutate(apply)
    if old_reason:  # the ended attempt's reason is kept in `attempts`; the new one starts clean
        member.write_text(runs.REASON, "")
    member.add_state(SUBMITTED, job_id=job_id)


def _submit_hetjobs(sweep_run, members, k, pass_env, waits: list[str | None] | None = None) -> bool:
    """One sbatch per point, at most k at once (afterany chains); `waits[i]`: a dependency
    point i waits on besides (its chained export's job)."""
    submitted: list[str | None] = []
    ok = True
    for i, m in enumerate(members):
        # the throttle on sbatch's command line replaces the script's --dependency: join them
        dep = sweep_mod.throttled_dependency(sweep_mod.script_dependency(m.read_text("job.sbatch") or ""),
                                             join(sweep_mod.dependency_for(i, submitted, k),
                                                  (waits or [None] * len(members))[i]))
        try:
            job_id = slurm.sbatch(m.path("job.sbatch"), extra_args=[f"--dependency={dep}"] if dep else [],
                                  pass_env=pass_env, umask=ownership.run_umask(m.dir))
        except SlurmError as exc:
            m.add_state(SUBMIT_FAILED, error=str(exc))
            click.echo(f"sf: slurm error: point {m.raw_record()['sweep']['index']}: {exc}", err=True)
            submitted.append(None)
            ok = False
            continue
        submitted.append(job_id)
        _point_submitted(m, job_id)
    indices = [m.raw_record()["sweep"]["index"] for m in members]

    def add(rec):
        rec.setdefault("submissions", []).append({"time": runs.utc_now(), "job_ids": submitted, "indices": indices})

    sweep_run.mutate(add)
    sweep_run.add_state(SUBMITTED if any(submitted) else SUBMIT_FAILED, job_ids=[j for j in submitted if j])
    return ok


def _report(sweep_run, members, mode, k, as_json, retry: bool) -> None:
    rec = sweep_run.raw_record()
    pts = []
    for m in members:
        r = m.raw_record()
        pts.append({"index": r["sweep"]["index"], "run": m.id, "job_id": ",".join(r.get("job_ids") or []),
                    "state": r.get("state"), "params": r.get("params")})
    if as_json:
        click.echo(json.dumps({"sweep": sweep_run.id, "sweep_dir": str(sweep_run.dir), "mode": mode,
                               "max_parallel": k, "job_ids": rec.get("job_ids") or [], "retry": retry,
                               "chain_exports": rec.get("chain_exports") or [], "points": pts}, indent=2))
        return
    what = "resubmitted" if retry else "submitted"
    if mode == "array":
        click.echo(f"{what} sweep {sweep_run.id}: {len(pts)} point{'s' if len(pts) != 1 else ''} as job array "
                   f"{(rec.get('job_ids') or ['-'])[0]} (at most {k} at once); sweep dir {sweep_run.dir}")
    else:
        click.echo(f"{what} sweep {sweep_run.id}: {len(pts)} hetjob{'s' if len(pts) != 1 else ''} "
                   f"(at most {k} at once, afterany dependencies); sweep dir {sweep_run.dir}")
    for p in pts:
        click.echo(f"  point {p['index']}  {p['run']}  job {p['job_id'] or '-'}  {sweep_mod.label(p['params'] or {})}")
    click.echo(f"follow it with: sf status {sweep_run.id}")


def _retry(sweep_id, site_path, runs_dir, as_json, dry_run):
    root = runs_root(runs_dir, site_path=site_path)
    sweep_run = runs.open_run(root, sweep_id)
    rec = sweep_run.record()
    if rec.get("kind") != "sweep":
        raise SpecError("--retry-failed", f"{sweep_run.id} is a run, not a sweep; resubmit it with sf submit")
    mode = rec.get("mode")
    if mode not in ("array", "hetjobs") or not rec.get("members"):
        raise SpecError("--retry-failed", f"sweep {sweep_run.id} has no points recorded by sf sweep")
    status = monitor.poll([sweep_run], runs_dir=root)[0]  # one sacct call
    failed = sweep_mod.failed_points(status.points)
    members = {(r.raw_record().get("sweep") or {}).get("index"): r
               for r in (runs.Run(root / m) for m in rec["members"])}
    if not failed:
        states = ", ".join(f"{p['index']}: {p['state']}" for p in status.points)
        if as_json:
            click.echo(json.dumps({"sweep": sweep_run.id, "retried": [], "points": status.points},
                                  default=str, indent=2))
        else:
            click.echo(f"sweep {sweep_run.id}: no failed points ({states})")
        return
    k = int(rec.get("max_parallel") or len(failed))
    if dry_run:
        click.echo(f"sf: dry run: would resubmit points {', '.join(map(str, failed))} of sweep {sweep_run.id}; "
                   "nothing submitted", err=True)
        return
    chosen = [members[i] for i in failed]
    for m in chosen:
        m.add_state(RETRYING, by="sf sweep --retry-failed")
    pass_env = load_site(site_path).pass_sbatch_env
    say_sbatch_env_left_out(pass_env)
    if mode == "array":
        ok = _submit_array(sweep_run, [members[i] for i in sorted(members)], failed, len(members), k, pass_env)
    else:
        ok = _submit_hetjobs(sweep_run, chosen, k, pass_env)
    _report(sweep_run, chosen, mode, k, as_json, retry=True)
    if not ok:
        sys.exit(1)
