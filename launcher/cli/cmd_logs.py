"""`sf logs`: print or follow a run's logs, Ray's logs (--ray) and the stack dumps (--stacks).

Nothing here holds anything on the cluster: `logs -f` is a loop of short reads and queries
that can be stopped with Ctrl-C (exit 130) without touching the job.
"""

from __future__ import annotations

import json
import re
import stat
import sys
import time
from pathlib import Path

import click

from launcher import gateway, runs
from launcher.cli.cmd_monitor import EXIT_INTERRUPTED, table
from launcher.cli.options import complete_run_ids, finite_seconds, json_option, nonblank, print_json, runs_options
from launcher.errors import SlurmError, SpecError
from launcher.monitor import poll as monitor
from launcher.spec.site import runs_root
from launcher.states import RUN_TERMINAL


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
        click.echo(table(["FILE", "BYTES"], [list(f) for f in files]) if files else f"no logs yet in {run.logs_dir}")


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
    """RUN/stacks/<job>-<restart>/<node>.txt, oldest hang first: listed through launcher.gateway
    (folders and regular files only: a link or FIFO planted there is left out, never followed)."""
    stacks = Path(run_dir) / "stacks"
    dirs = sorted((e for e in gateway.entries(stacks, "--stacks") if stat.S_ISDIR(e[1].st_mode)),
                  key=lambda e: e[1].st_mtime)
    return [stacks / folder / name for folder, _ in dirs
            for name, st in sorted(gateway.entries(stacks / folder, "--stacks"), key=lambda e: e[0])
            if name.endswith(".txt") and stat.S_ISREG(st.st_mode) and (node is None or name[:-4] == node)]


def _print_stacks(run: runs.Run, node: str | None, as_json: bool = False) -> None:
    files = stack_files(run.dir, node)
    if not files:
        raise SpecError("--stacks", f"no stacks saved for {run.id}{' on ' + node if node else ''}: the watchdog "
                                    "saves them in RUN/stacks/ when it finds a hang")
    if as_json:
        print_json({"ok": True, "run": run.id, "stacks": [
            {"file": str(path.relative_to(run.dir)), "text": gateway.read_text(path, "--stacks", errors="replace")}
            for path in files]})
        return
    for path in files:
        click.echo(f"==> {path.relative_to(run.dir)} <==")
        click.echo(gateway.read_text(path, "--stacks", errors="replace").rstrip("\n"))
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
