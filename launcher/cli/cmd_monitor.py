"""`sf status`, `sf logs`, `sf cancel`, `sf list`.

Every poll is ONE Slurm query for all runs shown (launcher.monitor.poll.poll). Nothing here
holds anything on the cluster: `--watch` and `logs -f` are loops of short queries that
can be stopped with Ctrl-C (exit 130) without touching the jobs.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import click

from launcher import runs
from launcher.cli.options import complete_run_ids, finite_seconds, json_option, nonblank, print_json, runs_options
from launcher.errors import SlurmError, SpecError
from launcher.monitor import poll as monitor
from launcher.monitor import timeline as timeline_mod
from launcher.spec.site import runs_root
from launcher.states import RUN_TERMINAL
from launcher.submit import cancel as cancel_mod

EXIT_INTERRUPTED = 130


def _table(headers: list[str], rows: list[list]) -> str:
    rows = [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _short_time(iso: str) -> str:
    return iso[:19].replace("T", " ") if iso else ""


# --- status --------------------------------------------------------------------------------

def _render_status(statuses: list[monitor.RunStatus], detail: bool) -> str:
    out = []
    source, warning = monitor.poll_source(statuses)
    if warning:
        out.append(f"warning: {warning}")
    rows = [[s.id, s.state, s.progress, ",".join(s.job_ids) or "-", s.elapsed or "-",
             s.nodes or "-", s.requeue_count] for s in statuses]
    out.append(_table(["RUN", "STATE", "PROGRESS", "JOB", "ELAPSED", "NODES", "REQUEUES"], rows)
               if rows else "no runs")
    if detail and len(statuses) == 1:
        s = statuses[0]
        if s.points:
            out.append("")
            out.append(_table(["POINT", "JOB", "RUN", "STATE", "PROGRESS", "ELAPSED", "NODES"],
                              [[p.get("index"), p.get("job_id") or "-", p.get("run_id") or "-",
                                p.get("state"), p.get("progress") or "", p.get("elapsed") or "-",
                                p.get("nodes") or "-"] for p in s.points]))
        parts = [k for k in s.jobs if k not in s.job_ids]
        if parts and not s.points:
            out.append("components: " + ", ".join(f"{k} {s.jobs[k]['state'].lower()}" for k in parts))
        if s.reason and s.reason != "None" and not s.done:
            out.append(f"slurm reason: {s.reason}")
        for r in s.restarts_in_place:
            nodes = f", node {', '.join(r['nodes'])}" if r.get("nodes") else ""
            if r.get("left_out"):
                nodes += f" left out for spare {', '.join(r.get('spares_used') or [])}"
            out.append(f"restart in place {r['n']} (job {r['job_id']}, {_short_time(r.get('iso') or '')}): "
                       f"cause {r['cause']}{nodes}, resumed from step {r['resumed_from']}")
        if s.exit_reason:
            out.append(f"exit reason: {s.exit_reason}")
    if source:
        out.append(f"({'from sacct' if source == 'sacct' else 'from squeue: accounting unavailable'})")
    return "\n".join(out)


def _status_doc(statuses, runs_dir) -> dict:
    source, warning = monitor.poll_source(statuses)
    return {"runs_dir": str(runs_dir), "source": source, "accounting": source != "squeue",
            "warning": warning, "time": runs.utc_now(),
            "runs": [s.to_dict() for s in statuses]}


def _is_point(run: runs.Run) -> bool:
    try:
        return bool(run.raw_record().get("sweep"))
    except (OSError, ValueError):
        return False


@click.command()
@click.argument("target", required=False, metavar="[RUN|SWEEP]", shell_complete=complete_run_ids,
                callback=nonblank("a run or sweep id, or nothing for the newest runs"))
@click.option("--watch", "-w", is_flag=True, help="Redraw until every watched run has ended.")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(min=0.2),
              help="Seconds between polls with --watch.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (one per poll with --watch).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="Runs shown without RUN.")
@click.option("--timeline", is_flag=True,
              help="RUN's start-up per attempt: sf's phases and verl's own, with their durations.")
@runs_options
def status(target, watch, interval, as_json, limit, site_path, runs_dir, timeline):
    """Show where runs are: Slurm state, phase, training step.

    Without RUN: the newest runs (those already ended come from their record, without
    asking Slurm). With a SWEEP id: every point. One sacct call per poll however many
    runs and array tasks; falls back to squeue (and says so) without accounting.
    """
    finite_seconds(interval, "--interval")
    root = runs_root(runs_dir, site_path=site_path)
    if timeline:
        _print_timeline(root, target, as_json, watch)
        return
    if target:
        watched = [runs.open_run(root, target)]
        watched[0].record()  # a damaged record or events.jsonl: one line naming it (the poll would skip it)
    else:  # points of a sweep are shown by `sf status SWEEP`, not one line each here
        watched = [r for r in runs.list_runs(root) if not _is_point(r)][:limit]
        _say_damaged(root)
    failures = 0
    try:
        while True:
            try:
                statuses = monitor.poll(watched, runs_dir=root, skip_ended=not target)
            except SlurmError as exc:
                # --watch rides out a slurmctld/slurmdbd restart; a single status fails.
                if not watch:
                    raise
                failures += 1
                click.echo(f"sf: slurm unreachable (try {failures}), retrying in {interval:g} s: {exc}",
                           err=True)
                time.sleep(interval)
                continue
            failures = 0
            if as_json:
                click.echo(json.dumps(_status_doc(statuses, root), default=str,
                                      indent=None if watch else 2))
            else:
                if watch and sys.stdout.isatty():
                    click.echo("\033[H\033[2J", nl=False)
                click.echo(_render_status(statuses, detail=bool(target)))
            if not watch or all(s.done for s in statuses):
                return
            if not as_json and not sys.stdout.isatty():
                click.echo("")
            time.sleep(interval)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


def _print_timeline(root, target, as_json, watch) -> None:
    if not target:
        raise click.UsageError("--timeline: name the run (sf status RUN --timeline)")
    if watch:
        raise click.UsageError("--timeline: drop --watch (the timeline is printed once)")
    run = runs.open_run(root, target)
    rows = timeline_mod.attempts(runs.read_phases(run.dir))
    if as_json:
        print_json({"run": run.id, "attempts": rows})
    else:
        click.echo(timeline_mod.format_timeline(run.id, rows))


# --- logs ----------------------------------------------------------------------------------

def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[-_.]", name) if t]


RAY_LOGS = "ray"  # RUN/logs/ray/<job>-<node>/: Ray's own logs, copied by each node as it stops


def is_ray_log(path: Path, logs_dir: Path) -> bool:
    return path.relative_to(logs_dir).parts[0] == RAY_LOGS


def select_ray_logs(files: list[Path], logs_dir: Path, node: str | None) -> list[Path]:
    """--ray: the kept Ray logs; with --node N, those of the folder `<job>-N`."""
    kept = [f for f in files if is_ray_log(f, logs_dir)]
    if node:
        kept = [f for f in kept if node in _tokens(f.parent.name) or f"node{node}" in _tokens(f.parent.name)]
    return kept


def select_logs(files: list[Path], node: str | None, role: str | None) -> list[Path]:
    """--node N: files whose name has N (a Slurm node name, or an index as `N`/`nodeN`) as
    a `-`/`_`/`.` separated token. --role R: files whose name contains R. Neither: the
    driver log when there is one, else the newest slurm-*.out."""
    if node:
        return [f for f in files if node in _tokens(f.name) or f"node{node}" in _tokens(f.name)]
    if role:
        return [f for f in files if role in _tokens(f.name) or role in f.name]
    driver = [f for f in files if "driver" in f.name]
    if driver:
        return driver[-1:]
    batch = [f for f in files if f.name.startswith("slurm-")]
    return (batch or files)[-1:]


def _last_lines(path: Path, n: int | None) -> tuple[str, int]:
    """(text of the last n lines, or all of it when n is None; bytes read = new offset)."""
    data = path.read_bytes()
    size = len(data)
    if n is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-n:]) if n > 0 else b""
    return data.decode(errors="replace"), size


def _emit(text: str, prefix: str | None) -> None:
    if not text:
        return
    if prefix:
        text = "".join(f"{prefix}{line}" for line in text.splitlines(keepends=True))
    click.echo(text, nl=False)
    sys.stdout.flush()


def select_task(files: list[Path], array_id: str | None, task: int) -> list[Path]:
    """Logs of one array task: `<array id>_<task>` in the name (slurm-%A_%a.out), or a
    folder named `<task>`, `task-<task>` or `point-<task>`."""
    out = []
    for f in files:
        tokens = _tokens(f.name)
        in_name = array_id is not None and any(
            tokens[i] == array_id and tokens[i + 1] == str(task) for i in range(len(tokens) - 1))
        in_dir = f.parent.name in (str(task), f"task-{task}", f"point-{task}")
        if in_name or in_dir:
            out.append(f)
    return out


def _run_ended(run: runs.Run, only: str | None = None) -> bool:
    rec = run.record()
    ids = [only] if only else [str(j) for j in rec.get("job_ids") or []]
    if not ids:
        return rec.get("state") in RUN_TERMINAL
    return monitor.jobs_ended(ids)


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=complete_run_ids)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.option("--node", default=None, metavar="N", callback=nonblank("a node name or index"),
              help="Logs of one node (Slurm node name or index).")
@click.option("--role", default=None, metavar="ROLE", callback=nonblank("a role"),
              help="Logs of one role: driver, head, worker, teacher, ...")
@click.option("--tail", "tail_n", default=None, type=click.IntRange(min=0), metavar="N",
              help="Start with the last N lines (default: all; 50 with -f).")
@click.option("--task", type=click.IntRange(min=0), default=None, metavar="I",
              help="For a sweep: the logs of point I.")
@click.option("--ray", "ray_logs", is_flag=True,
              help="Ray's own logs (raylet, GCS, process exits), kept under RUN/logs/ray/ as each node "
                   "stopped; with --node, that node's.")
@click.option("--stacks", "stacks", is_flag=True,
              help="The Python stacks of every node saved when the watchdog found a hang (RUN/stacks/); "
                   "with --node, that node's.")
@click.option("--list", "list_only", is_flag=True, help="List the log files and exit.")
@click.option("--interval", default=0.5, show_default=True, type=click.FloatRange(min=0.05),
              help="Seconds between reads with -f.")
@click.option("--check-every", default=5.0, show_default=True, type=click.FloatRange(min=0.5),
              help="Seconds between job-state checks with -f (one sacct call each).")
@json_option
@runs_options
def logs(run_id, follow, node, role, tail_n, task, ray_logs, stacks, list_only, interval, check_every, as_json,
         site_path, runs_dir):
    """Print or follow a run's logs (files under RUN/logs/).

    With --json: one document {"run", "logs": [{"file", "text"}]} (--list: {"run", "files"};
    --stacks: {"run", "stacks"}); with -f, one JSON object {"file", "text"} per line."""
    finite_seconds(interval, "--interval")
    finite_seconds(check_every, "--check-every")
    if node and role:
        raise SpecError("--node/--role", "give one of --node and --role, not both")
    run, array_id, only = _log_target(runs_root(runs_dir, site_path=site_path), run_id, task)
    if stacks:
        return _print_stacks(run, node, as_json)
    if list_only:
        return _list_logs(run, as_json)
    tail_n = 50 if tail_n is None and follow else tail_n
    offsets: dict[Path, int] = {}
    collected: list[dict] = []  # --json without -f: printed as one document at the end
    emit = _log_emitter(as_json, follow, collected)

    def current_files():
        found = monitor.log_files(run.dir)
        if ray_logs:
            return sorted(select_ray_logs(found, run.logs_dir, node), key=lambda p: p.as_posix())
        found = [f for f in found if not is_ray_log(f, run.logs_dir)]
        if only:
            found = select_task(found, array_id, task)
        chosen = select_logs(found, node, role) if not only or node or role else found
        return sorted(chosen, key=lambda p: p.name)

    def read_new(files, first: bool, drain: bool = False):
        many = len(files) > 1 or len(offsets) > 1
        for path in files:
            name = path.relative_to(run.logs_dir).as_posix() if ray_logs else path.name
            text = _new_text(path, offsets, tail_n if first else None, drain)
            if text:
                emit(text, f"[{name}] " if many else None, name)

    files = current_files()
    if not files and not follow:
        what = f" matching --node {node}" if node else f" matching --role {role}" if role else ""
        raise SpecError("logs", no_logs_text(run, what, run.logs_dir / RAY_LOGS if ray_logs else run.logs_dir))
    read_new(files, first=True)
    if not follow:
        if as_json:
            print_json({"ok": True, "run": run.id, "logs": collected})
        return
    if not files:
        click.echo(f"sf: waiting for logs of {run.id} in {run.logs_dir} ...", err=True)
    _follow(run, only, interval, check_every, current_files, read_new)


def no_logs_text(run: runs.Run, what: str, where: Path) -> str:
    """Why `sf logs` printed nothing: "yet" only while the run may still write them (a run that
    ended with none never will: a node whose container never started wrote no log)."""
    state = run.record().get("state")
    when = f"; the run ended ({state}) without writing them" if state in RUN_TERMINAL else " yet"
    return f"no log files{what} in {where}{when}; `sf logs {run.id} --list` shows what there is"


def _new_text(path: Path, offsets: dict[Path, int], tail_n: int | None, drain: bool) -> str | None:
    """What `path` holds beyond `offsets[path]` (advanced past it): its last `tail_n` lines
    the first time; after that only whole lines, unless the job has ended (final drain).
    None when unreadable or nothing new."""
    try:
        if path not in offsets:
            text, offsets[path] = _last_lines(path, tail_n)
            return text
        with open(path, "rb") as handle:
            handle.seek(offsets[path])
            data = handle.read()
    except OSError:
        return None
    cut = len(data) if drain else data.rfind(b"\n") + 1
    if not cut:
        return None
    offsets[path] += cut
    return data[:cut].decode(errors="replace")


def _list_logs(run, as_json: bool) -> None:
    """`sf logs RUN --list`: the log files and their sizes."""
    files = [(str(f.relative_to(run.logs_dir)), f.stat().st_size) for f in monitor.log_files(run.dir)]
    if as_json:
        print_json({"ok": True, "run": run.id, "files": [{"file": name, "bytes": size} for name, size in files]})
    else:
        click.echo(_table(["FILE", "BYTES"], [list(f) for f in files]) if files else f"no logs yet in {run.logs_dir}")


def _log_emitter(as_json: bool, follow: bool, collected: list[dict]):
    """Where `sf logs` puts new text: stdout as is; with --json and -f one JSON line per
    chunk; with --json alone into `collected` (printed as one document at the end)."""
    def emit(text: str, prefix: str | None, name: str) -> None:
        if not as_json:
            _emit(text, prefix)
        elif follow:
            click.echo(json.dumps({"file": name, "text": text}))
            sys.stdout.flush()
        elif text:
            collected.append({"file": name, "text": text})
    return emit


def stack_files(run_dir: Path, node: str | None = None) -> list[Path]:
    """RUN/stacks/<job>-<restart>/<node>.txt, oldest hang first (pure but for the listing)."""
    dirs = sorted((d for d in (run_dir / "stacks").glob("*") if d.is_dir()), key=lambda d: d.stat().st_mtime)
    return [f for d in dirs for f in sorted(d.glob("*.txt"))
            if f.is_file() and (node is None or f.stem == node)]  # not a folder or a dangling link


def _print_stacks(run: runs.Run, node: str | None, as_json: bool = False) -> None:
    files = stack_files(run.dir, node)
    if not files:
        raise SpecError("--stacks", f"no stacks saved for {run.id}{' on ' + node if node else ''}: the watchdog "
                                    "saves them in RUN/stacks/ when it finds a hang")
    if as_json:
        print_json({"ok": True, "run": run.id, "stacks": [
            {"file": str(path.relative_to(run.dir)), "text": path.read_text(errors="replace")} for path in files]})
        return
    for path in files:
        click.echo(f"==> {path.relative_to(run.dir)} <==")
        click.echo(path.read_text(errors="replace").rstrip("\n"))
        click.echo("")


def _log_target(root, run_id: str, task: int | None):
    """(run, array job id, `<array>_<task>`) whose logs `sf logs RUN [--task N]` shows: a
    sweep's point N is its own run (hetjob sweeps) or one task of the sweep's array."""
    run = runs.open_run(root, run_id)
    rec = run.record()
    if task is None:
        return run, None, None
    if rec.get("kind") != "sweep":
        raise SpecError("--task", f"{run.id} is a run, not a sweep; drop --task")
    members = [m for m in runs.sweep_members(root, run.id) if (m.record().get("sweep") or {}).get("index") == task]
    if members:  # a sweep of separate runs (hetjobs): follow that point's run
        return members[0], None, None
    if rec.get("job_ids"):
        array_id = str(rec["job_ids"][0])
        return run, array_id, f"{array_id}_{task}"
    raise SpecError("--task", f"sweep {run.id} has no point {task} submitted")


LAST_LINES_WAIT_S = 90  # Slurm's KillWait (30 s by default) and an epilog: the job's last writers


def _follow(run, only, interval, check_every, current_files, read_new) -> None:
    """`sf logs -f`: new lines every `interval` s; every `check_every` s one Slurm query
    whether the job ended (then a last drain and return). Ctrl-C: exit 130."""
    try:
        next_check = time.monotonic() + check_every
        while True:
            time.sleep(interval)
            read_new(current_files(), first=False)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + check_every
                try:
                    ended = _run_ended(run, only)
                except SlurmError as exc:  # slurmctld restarting: keep following
                    click.echo(f"sf: slurm unreachable, still following: {exc}", err=True)
                    ended = False
                if ended:
                    # accounting says ended at the cancel, while the job's processes still write
                    # their last lines (the supervisor's `ended`, the nodes stopping) until
                    # slurmctld lets the job go: follow until then (bounded), then drain
                    ids = [only] if only else [str(j) for j in run.record().get("job_ids") or []]
                    deadline = time.monotonic() + LAST_LINES_WAIT_S
                    while time.monotonic() < deadline and monitor.slurm_holds(ids):
                        read_new(current_files(), first=False)
                        time.sleep(interval)
                    read_new(current_files(), first=False, drain=True)
                    return
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


# --- cancel --------------------------------------------------------------------------------

@click.command()
@click.argument("target", metavar="RUN|SWEEP", shell_complete=complete_run_ids)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@runs_options
def cancel(target, as_json, site_path, runs_dir):
    """Cancel every Slurm job of a run, or of every point of a sweep."""
    done = cancel_mod.cancel(target, site_path, runs_dir)
    run, job_ids, cancelled, already = done.target, done.job_ids, done.cancelled, done.not_running
    if as_json:
        click.echo(json.dumps({"target": run.id, "job_ids": job_ids,
                               "cancelled": [r.id for r in cancelled], "not_running": already}, indent=2))
        return
    if cancelled:
        click.echo(f"cancelled {', '.join(r.id for r in cancelled)} (jobs {', '.join(job_ids)})")
    for item in already:
        click.echo(f"{item['run']}: nothing to cancel ({item['state']})")


# --- list ----------------------------------------------------------------------------------

def _say_damaged(root: Path) -> list[str]:
    """One warning on stderr naming the damaged run files left out of a listing; their run ids."""
    damaged = _damaged_records(root)
    if damaged:
        paths = list(damaged.values())
        click.echo(f"sf: warning: left out {len(damaged)} damaged run record(s): "
                   f"{', '.join(str(p) for p in paths[:5])}{' ...' if len(paths) > 5 else ''} "
                   "(unreadable or not a run record)", err=True)
    return list(damaged)


def _damaged_records(root: Path) -> dict[str, Path]:
    """{run id: the damaged file} of the run folders under `root` whose record.json cannot be
    read as a run record (or whose events.jsonl or reason, merged into it, cannot be read)."""
    out = {}
    try:
        folders = sorted(p for p in Path(root).iterdir() if (p / runs.RECORD).is_file())
    except OSError:
        return out
    for folder in folders:
        try:
            runs.Run(folder).check()
        except runs.DamagedRecord as exc:
            out[folder.name] = exc.path or folder / runs.RECORD
        except (OSError, ValueError):
            out[folder.name] = folder / runs.RECORD
    return out


def _kind(rec: dict) -> str:
    """One word for the table and --json alike: run, sweep, or point (a run of a sweep)."""
    return "point" if rec.get("sweep") else rec.get("kind", "run")


@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1), help="Newest N runs.")
@runs_options
def list_runs(as_json, limit, site_path, runs_dir):
    """List runs and sweeps, newest first, from their records.

    Records that have not ended yet are brought up to date first with ONE Slurm query for
    all of them (as `sf status` does); ended runs cost nothing."""
    root = runs_root(runs_dir, site_path=site_path)
    listed = runs.list_runs(root)[:limit]
    try:
        monitor.poll(listed, runs_dir=root, skip_ended=True)  # writes the states it learns back
    except SlurmError as exc:
        click.echo(f"sf: warning: states as last recorded: {exc}", err=True)
    items = []
    for run in listed:
        try:
            rec = run.record()
        except (OSError, ValueError):
            continue
        items.append(rec)
    damaged = _say_damaged(root)
    if as_json:
        click.echo(json.dumps({"runs_dir": str(root), "damaged": damaged, "runs": [
            {**{k: rec.get(k) for k in ("id", "experiment", "state", "created", "job_ids",
                                        "requeue_count", "exit_reason", "sweep")}, "kind": _kind(rec)}
            for rec in items]}, indent=2, default=str))
        return
    if not items:
        click.echo(f"no runs in {root}")
        return
    click.echo(_table(["RUN", "KIND", "STATE", "JOB", "CREATED", "EXPERIMENT"],
                      [[r["id"], _kind(r), r.get("state"),
                        ",".join(r.get("job_ids") or []) or "-",
                        _short_time(r.get("created", "")), r.get("experiment", "")] for r in items]))
