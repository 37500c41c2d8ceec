"""`sf status`, `sf cancel`, `sf list` (`sf logs`: launcher.cli.cmd_logs).

Every poll is ONE Slurm query for all runs shown (launcher.monitor.poll.poll). Nothing here
holds anything on the cluster: `--watch` and `logs -f` are loops of short queries that
can be stopped with Ctrl-C (exit 130) without touching the jobs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from launcher import runs
from launcher.cli.options import complete_run_ids, finite_seconds, nonblank, print_json, runs_options
from launcher.errors import SlurmError
from launcher.monitor import poll as monitor
from launcher.monitor import timeline as timeline_mod
from launcher.spec.site import runs_root
from launcher.submit import cancel as cancel_mod

EXIT_INTERRUPTED = 130


def table(headers: list[str], rows: list[list]) -> str:
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
    out.append(table(["RUN", "STATE", "PROGRESS", "JOB", "ELAPSED", "NODES", "REQUEUES"], rows)
               if rows else "no runs")
    if detail and len(statuses) == 1:
        s = statuses[0]
        if s.points:
            out.append("")
            out.append(table(["POINT", "JOB", "RUN", "STATE", "PROGRESS", "ELAPSED", "NODES"],
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
    """{run id: the damaged file} of the caller's run folders under `root` whose record.json cannot
    be read as a run record (or whose events.jsonl or reason, merged into it, cannot be read)."""
    return runs.damaged_runs(root)


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
    every = runs.list_runs(root)
    listed = every[:limit]
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
    click.echo(table(["RUN", "KIND", "STATE", "JOB", "CREATED", "EXPERIMENT"],
                      [[r["id"], _kind(r), r.get("state"),
                        ",".join(r.get("job_ids") or []) or "-",
                        _short_time(r.get("created", "")), r.get("experiment", "")] for r in items]))
    if len(every) > len(listed):
        click.echo(f"(the newest {len(listed)} of {len(every)} runs; --limit {len(every)} shows them all)")
