"""One request from spec to job: prepared once, shown by the dry run, sent by `submit`.

    request = prepare_run(name, flags, preflight=False)   # spec -> ONE compile -> Request
    request.script                                         # what `--dry-run` prints
    submitted = submit(request)                            # the run record, sbatch, the job id

A Request holds everything decided before Slurm is asked, rendered against a placeholder
run dir `<runs_dir>/<slug>-XXXXX` (never a real id: ids are lower case). `submit` creates
the run (or uses the run the request belongs to, for export/eval), renders the same
request with the real run dir bound in, writes its files and calls sbatch: the submitted
script is the dry run's with the run id filled in (tests/cluster/test_pipeline.py).

`sf submit`, `sf render`, `sf sweep` (one request per point), `sf export` and `sf eval`
(launcher.cli.cmd_export builds their requests) all go through here, and `submit` is the one
caller of `slurm.sbatch` (tests/unit/test_send_path.py): a sweep's array script and its
points' scripts, written before they are sent (and sent again by --retry-failed), are written
requests (request.written_request) whose send-time wait joins their Plan's own dependency.

A request may carry an `upstream` request that `submit` sends first: `--model run:RUN` for
a RUN without an export queues the export of RUN's last checkpoint (launcher.submit.chain), and
the training request is then rendered with `afterok:<that export job>` added to its
dependency, the one thing its script does not know before submit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from launcher import ownership, runs, slurm
from launcher.compile import scheduler_options
from launcher.compile.compiler import compile_plan
from launcher.compile.verlcache import checked_overrides
from launcher.errors import SlurmError, SpecError, SpecErrors
from launcher.render.script import overrides_text, plan_json, render_script
from launcher.spec.files import check_folder_path
from launcher.spec.runtimes import registry_path, resolve_runtime
from launcher.spec.site import load_site, with_runs_root
from launcher.states import COMPLETED, FAILED, RUNNING, SUBMIT_FAILED, SUBMITTED, SUBMITTING
from launcher.submit import chain
from launcher.submit.request import (  # noqa: F401 (Submitted, placeholder_run_dir: callers name them here)
    Rendered,
    Request,
    Submitted,
    absolute_runs_dir,
    placeholder_run_dir,
    run_home,
)
from launcher.submit.sweep import throttled_dependency
from launcher.verlcheck import version_note

# --- training runs ------------------------------------------------------------------------

def check_runs_folder(site) -> None:
    """What making a run under the site's runs folder would refuse, asked without writing
    anything: a file or an unwritable folder on its path, a folder of it another user owns or
    may write in without the sticky bit (ownership.trusted_chain, the check runs.create_run
    makes; runs_folder.make_runs_root), in a shared one the user's folder when it is another's,
    a share_group that does not exist here or that this user cannot give folders to."""
    check_folder_path(site.runs_dir, "runs_dir")
    real = runs.real_path(absolute_runs_dir(site.runs_dir), "runs_dir")  # another user's link: refused
    ownership.trusted_chain(real, "runs_dir")
    home = run_home(site.runs_dir)  # in a shared (1777) runs folder, the user's own folder in it
    if home != str(real) and os.path.lexists(home):
        ownership.check_own_dir(home, "runs_dir")
    gid = ownership.group_id(site.share_group)
    if gid is not None and os.getuid() != 0 and gid not in (os.getgid(), *os.getgroups()):
        raise SpecError("site.share_group", f"you are not in group {site.share_group!r}, so sf cannot give your runs "
                        "to it; fix share_group in the site file (`id -Gn` lists your groups) or ask to be added")


def _published_runtime(version: str, site):
    """(the runtime of verl `version`, None) or, when the site publishes no runtime at all (no
    registry named, no $FORGE_IMAGE_VERL), (None, why): `sf validate` then warns and `sf submit`
    refuses. A registry that is named is read and checked here, whatever the command: a file
    that is not there, a FIFO or device, an entry submit would refuse is an error for all three."""
    if not os.environ.get("FORGE_IMAGE_VERL") and not registry_path(site):
        try:
            return resolve_runtime("verl", version, site), None
        except SpecError as exc:
            return None, f"{exc.message}; `sf submit` refuses until one is published"
    return resolve_runtime("verl", version, site), None


def checked(name: str, flags: dict, run_dir: str | None = None):
    """The one checked path of `sf validate`, `sf submit --dry-run` and `sf submit` (and of
    render, sweep): the site (its runs dir resolved: launcher.spec.site.runs_root) and its runs
    folder, load_spec with --after / --model run:RUN resolved (launcher.submit.chain), the
    runtime, compile_plan, and the verl compose check (remembered when clean:
    launcher.compile.verlcache). Whatever submit would refuse before asking Slurm is refused
    here, so the three commands refuse the same things.
    Returns (spec, plan, site, runtime: None when none is published); raises SpecError(s)."""
    site = with_runs_root(load_site(flags.get("site")), flags.get("runs_dir"))
    check_runs_folder(site)
    spec = chain.load_chained(name, flags, site)
    runtime, unpublished = _published_runtime(spec.framework_version or "0.9.1", site)
    plan = compile_plan(spec, site, run_dir or placeholder_run_dir(site.runs_dir, spec.name),
                        runtime_overrides=dict(runtime.overrides) if runtime else {})
    if runtime is not None and runtime.version != plan.framework_version:
        runtime = resolve_runtime(plan.framework, plan.framework_version, site)
    errors = checked_overrides(plan.config_name, plan.overrides, plan.framework_version)
    if errors:
        raise SpecErrors(errors)
    note = version_note(plan.framework_version)
    extra = tuple(w for w in (note, unpublished) if w)
    if extra:
        plan = replace(plan, warnings=plan.warnings + extra)
    if site.templates_dir and runtime is not None:  # a site's own template, checked as it renders (no run yet)
        render_script(plan, site, runtime)
    return spec, plan, site, runtime


def check(name: str, flags: dict, run_dir: str | None = None):
    """`checked` without the runtime: (spec, plan, site) for `sf validate`."""
    spec, plan, site, _runtime = checked(name, flags, run_dir)
    return spec, plan, site


def prepare_run(name: str, flags: dict, *, preflight: bool = False) -> Request:
    """spec -> compile (once, checked against verl) -> runtime -> a Request for `sf submit`.
    SpecError(s) on any problem; nothing is written."""
    spec, plan, site, runtime = checked(name, flags)
    if runtime is None:  # none published here: the error names what to publish
        runtime = resolve_runtime(plan.framework, plan.framework_version, site)
    upstream = None
    if spec.chain_export is not None:  # --model run:RUN, RUN without an export: export it first
        upstream = chain.export_request(spec.chain_export, site, preflight=preflight)
    return run_request(spec, plan, site, runtime, preflight=preflight, upstream=upstream)


PREFLIGHT_EXCLUDES_NOTHING = ("--exclude-bad-nodes does nothing with --preflight: the preflight reports failing "
                              "nodes (preflight.json) without excluding or requeueing; submit without "
                              "--preflight to have them excluded",)


def run_request(spec, plan, site, runtime, *, preflight: bool = False, upstream: Request | None = None) -> Request:
    """The Request of a compiled plan (its run dir the placeholder of its runs dir)."""
    return Request(
        experiment=spec.name, runs_dir=absolute_runs_dir(site.runs_dir),
        render=lambda run_dir, after=None: run_files(spec, plan.with_run_dir(run_dir).with_dependency(after), site,
                                                     runtime, preflight=preflight),
        record={"preflight": preflight, "runtime": runtime.to_dict()},
        warnings=tuple(plan.warnings) + (PREFLIGHT_EXCLUDES_NOTHING if preflight and plan.slurm.exclude_bad_nodes
                                         else ()), plan=plan, spec=spec, site=site, runtime=runtime,
        pass_sbatch_env=site.pass_sbatch_env, upstream=upstream, chain=getattr(spec, "model_from", None),
    )


def run_files(spec, plan, site, runtime, *, preflight: bool = False, array: dict | None = None) -> Rendered:
    """A training run's files: spec.yaml, plan.json, overrides.txt and job.sbatch."""
    script = render_script(plan, site, runtime, preflight=preflight, array=array)
    return Rendered(files={
        "spec.yaml": yaml.safe_dump({"name": spec.name, "exp_dir": spec.exp_dir, "values": spec.values,
                                     "provenance": spec.provenance}, sort_keys=False),
        "plan.json": plan_json(plan, site, runtime),
        "overrides.txt": overrides_text(plan),
        "job.sbatch": script,
    }, script_name="job.sbatch")


# --- sending ------------------------------------------------------------------------------

RENDER_FILES = ("job.sbatch", "overrides.txt", "plan.json")


def write_render(request: Request, out: Path) -> list[Path]:
    """`sf render -o DIR`: the request bound to DIR (the job's run dir when it is sent by
    hand), its script, overrides and plan written there; nothing is submitted."""
    files = request.rendered(str(out)).files
    run = runs.make_run_dir(out, share_group=request.site.share_group if request.site else None)
    for file_name in RENDER_FILES:
        run.write_text(file_name, files[file_name])
    return [out / f for f in RENDER_FILES]

def bind(request: Request, after: str | None = None, record: dict | None = None) -> tuple[runs.Run, bool, Rendered]:
    """The run of the request (created now unless it exists, with `record` added to its
    fields) and the request rendered for it, its files written. A failure to render records
    submit_failed on a new run."""
    new = request.run is None
    run = request.run or runs.create_run(request.runs_dir, request.experiment, **request.record, **(record or {}),
                                         share_group=getattr(request.site, "share_group", None))
    try:
        rendered = request.rendered(str(run.dir), after=after)
    except Exception as exc:
        if new:
            run.add_state(SUBMIT_FAILED, error=str(exc))
        raise
    for name, text in rendered.files.items():
        run.write_text(name, text)
    return run, new, rendered


def submit(request: Request) -> Submitted:
    """The one send path of sf (runs, sweeps, exports, evals): create/bind the run, write its
    files, sbatch the script; the record says submitting -> submitted (job id) or submit_failed
    (the error, re-raised).

    With an upstream request: that one is submitted first, and this run waits on
    afterok:<its job>; the record's `model_from` names that job (`export_job`). If this
    sbatch then fails, the upstream job stays queued (it is recorded in its own run, and
    the next `--model run:RUN` waits on it instead of exporting again).

    A written request (a sweep's array or point script, launcher.submit.sweep_send) is sent as
    it stands: its send-time wait goes on sbatch's command line, joined with the script's own
    dependency from its Plan (the command line replaces the script's line), and its job is
    recorded on its tasks' runs."""
    after, record = _send_upstream(request)
    if request.written is not None:
        run, new, rendered = request.run, False, request.rendered()
    else:
        run, new, rendered = bind(request, after=chain.join(request.after, after), record=record)
    if new:
        run.add_state(SUBMITTING)
    try:
        job_id = slurm.sbatch(run.path(rendered.script_name), extra_args=sbatch_args(request),
                              pass_env=request.pass_sbatch_env,
                              cwd=str(run.dir) if request.sbatch_in_run_dir else None,
                              umask=ownership.run_umask(run.dir))
    except SlurmError as exc:
        _record_failed(request, run, new, rendered, str(exc))
        raise
    _record_submitted(request, run, new, rendered, job_id)
    return Submitted(run=run, job_id=job_id, rendered=rendered)


def _send_upstream(request: Request) -> tuple[str | None, dict]:
    """The upstream job sent first (after this request's own checks: a bad one sends nothing
    upstream): (afterok:<its job> or None, the new run's `model_from` record)."""
    after, record = None, {}
    if request.chain is not None:
        record["model_from"] = dict(request.chain)
    if request.upstream is not None:
        request.rendered()
        up = submit(request.upstream)
        after = f"afterok:{up.job_id}"
        entry = up.rendered.entry or {}
        record["model_from"] = chain.queued_model_from(record.get("model_from"), export_job=up.job_id,
                                                       export_id=entry.get("id"),
                                                       export_after=entry.get("after"))
    return after, record


def own_dependency(plan_dependency: str | None, *, array: bool) -> str | None:
    """The --dependency a training script holds for its Plan's `slurm.dependency` (as
    launcher.render.script writes it: singleton added for a run's own job, not for an array's
    tasks). Read from the Plan, never from the script."""
    checked = scheduler_options.checked({"dependency": plan_dependency}).get("dependency")
    return scheduler_options.job_dependency(checked, singleton=not array)


def sbatch_args(request: Request) -> list[str]:
    """sbatch's options of this send: the request's own, and for a written script its send-time
    wait joined with the script's own dependency (the command line's replaces the script's)."""
    args = list(request.sbatch_args)
    if request.written is not None:
        dependency = throttled_dependency(request.own_dependency, request.after)
        if dependency:
            args.append(f"--dependency={dependency}")
    return args


def _record_failed(request: Request, run: runs.Run, new: bool, rendered: Rendered, error: str) -> None:
    if rendered.entry is not None:
        list_entry(run, request.entry_key, {**rendered.entry, "job_id": None, "state": SUBMIT_FAILED, "error": error})
    if new:
        run.add_state(SUBMIT_FAILED, error=error)
    for task, _suffix in request.tasks:
        task.add_state(SUBMIT_FAILED, error=error)


def _record_submitted(request: Request, run: runs.Run, new: bool, rendered: Rendered, job_id: str) -> None:
    if rendered.entry is not None:
        list_entry(run, request.entry_key, {**rendered.entry, "job_id": job_id, "state": SUBMITTED,
                                            "log": (rendered.log_path or "").replace("%j", job_id)})
    if new:
        run.set_job_ids([job_id])
        run.add_state(SUBMITTED, job_id=job_id)
    for task, suffix in request.tasks:
        record_job(task, job_id + suffix)


def record_job(run: runs.Run, job_id: str) -> None:
    """A run that existed before its job (a sweep's point) is now `job_id`: an earlier job's
    ending is kept in `attempts`, the monitor's facts and reason of that attempt cleared."""
    old_reason = (run.read_text(runs.REASON) or "").strip() or None

    def apply(rec):
        if rec.get("job_ids"):
            rec.setdefault("attempts", []).append({"job_ids": rec["job_ids"], "state": rec.get("state"),
                                                   "reason": rec.get("exit_reason") or old_reason,
                                                   "time": runs.utc_now()})
        rec["job_ids"] = [job_id]
        rec.pop("final", None)  # the monitor's facts of the ended attempt
        rec["exit_reason"] = None

    run.mutate(apply)
    if old_reason:  # the ended attempt's reason is kept in `attempts`; the new one starts clean
        run.write_text(runs.REASON, "")
    run.add_state(SUBMITTED, job_id=job_id)


def run_here(request: Request) -> tuple[runs.Run, Rendered, int, Path]:
    """--local: bind the request and run its script here with bash (#SBATCH lines are
    comments to bash), listed in the record like a submitted job.
    (run, what was rendered for it, exit code, log)."""
    run, _new, rendered = bind(request)
    entry = rendered.entry or {"id": Path(rendered.script_name).stem}
    log = run.logs_dir / f"{entry['id']}-local.out"
    list_entry(run, request.entry_key, {**entry, "job_id": None, "state": RUNNING, "log": str(log)})
    rc = _stream(run.path(rendered.script_name), log)
    list_entry(run, request.entry_key, {}, match=entry["id"], state=COMPLETED if rc == 0 else FAILED, rc=rc)
    return run, rendered, rc, log


def _stream(script: Path, log: Path) -> int:
    """Run `bash script` in its folder; its output goes to `log` and to our stdout."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as handle:
        proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=str(script.parent))
        for chunk in iter(proc.stdout.readline, b""):
            handle.write(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return proc.wait()


def list_entry(run: runs.Run, key: str | None, entry: dict, match: str | None = None, **update) -> None:
    """Add `entry` to record[key] (a list), or update the item whose id is `match`."""
    if key is None:
        return

    def apply(rec):
        items = rec.setdefault(key, [])
        if match is None:
            items.append(entry)
            return
        for item in items:
            if item.get("id") == match:
                item.update(update)

    run.mutate(apply)
