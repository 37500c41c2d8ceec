"""The caller's runs under a runs folder: listed, found by id, checked for damage.

Only run folders the caller owns are looked at (runs_folder.own_run_names): in a shared runs
folder another user's runs, planted or private, are left out without an error, so a planted
record naming one of your job ids, 3,000 planted runs or a private folder you cannot enter
change nothing in your `sf list`, `status` or `cancel`. Each runs folder is walked once
(launcher.gateway) and each run read through its own folder's descriptor: a FIFO, a link, a
device or an oversize file in a run is damage named in one line, never read (and never waited on).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from launcher import gateway
from launcher.errors import SpecError, quoted_short
from launcher.run_record import RECORD, DamagedRecord, is_run_id
from launcher.runs_folder import homes, own_run_names

# `make_run` below is launcher.runs.Run (passed in: runs imports this module, never the reverse)


def _own_homes(runs_dir):
    """(folder, its fd) of each folder that may hold the caller's runs (runs_folder.homes) and is
    there; the caller closes nothing (a generator: each fd is closed when the next is opened)."""
    for home in homes(runs_dir):
        try:
            with gateway.folder(home, "runs_dir") as fd:
                st = os.fstat(fd)
                if home != Path(runs_dir).expanduser().absolute() and st.st_uid != os.getuid():
                    continue  # a folder named like the caller in a shared runs folder: not theirs
                yield home, fd
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue


def _scan(runs_dir, make_run, check: bool) -> tuple[list, dict[str, Path]]:
    """([(created, id, run)] of the readable runs, newest first, {id: damaged file}) of the caller's runs."""
    found, damaged = [], {}
    for home, fd in _own_homes(runs_dir):
        for name in own_run_names(fd):
            run = make_run(home / name)
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue  # replaced meanwhile
            try:
                with run.opened(sub):
                    created = run.raw_record().get("created", "")
                    if check:
                        run.check()
                found.append((created, name, run))
            except DamagedRecord as exc:
                damaged[name] = exc.path or run.dir / RECORD
            except (OSError, ValueError):
                damaged[name] = run.dir / RECORD
            finally:
                os.close(sub)
    found.sort(key=lambda item: (str(item[0]), item[1]), reverse=True)
    return found, damaged


def list_runs(runs_dir, make_run) -> list:
    """The caller's runs and sweeps under runs_dir, newest first (by record 'created'); a run
    whose record cannot be read is left out (damaged_runs names it)."""
    return [run for _, _, run in _scan(runs_dir, make_run, check=False)[0]]


def damaged_runs(runs_dir, make_run) -> dict[str, Path]:
    """{run id: the damaged file} of the caller's runs whose record.json cannot be read as a run
    record, or whose events.jsonl or reason (merged into it) is not a readable file of theirs."""
    return _scan(runs_dir, make_run, check=True)[1]


def run_ids(runs_dir) -> list[str]:
    ids = set()
    for _, fd in _own_homes(runs_dir):
        ids.update(own_run_names(fd))
    return sorted(ids)


def open_run(runs_dir, run_id: str, make_run):
    """The caller's run `run_id` (or the only one whose id starts with it). SpecError naming the
    closest ids otherwise; another user's run is not found (sf acts on the caller's runs only)."""
    root = Path(runs_dir).expanduser()
    run_id = (run_id or "").strip().rstrip("/")
    if len(run_id.encode()) > 255:  # a pasted blob: not a name any file system has, nor shown again whole
        raise SpecError("run", f"{quoted_short(run_id)} is longer than the file system allows for a name (255 "
                        "bytes); use a shorter one (`sf list` shows the run ids)")
    ids = run_ids(root)
    if is_run_id(run_id) and run_id in ids:
        return _run_of(root, run_id, make_run)
    prefixed = [i for i in ids if run_id and i.startswith(run_id)]
    if len(prefixed) == 1:
        return _run_of(root, prefixed[0], make_run)
    close = prefixed or difflib.get_close_matches(run_id, ids, n=5, cutoff=0.5)
    if not close:
        close = [i for i in ids if run_id and run_id in i][:5]
    hint = f"; did you mean: {', '.join(close[:5])}" if close else (
        "; `sf list` shows the runs" if ids else
        " (it holds no runs of yours); pass the runs dir the run is in (--runs-dir, $SF_RUNS_DIR or the site's "
        "runs_dir)")
    what = "several runs start with" if len(prefixed) > 1 else "no run of yours"
    raise SpecError("run", f"{what} {quoted_short(run_id)} in {root}{hint}")


def _run_of(root: Path, run_id: str, make_run):
    for home, fd in _own_homes(root):
        if run_id in own_run_names(fd):
            return make_run(home / run_id)
    raise SpecError("run", f"run {run_id!r} in {root} went away meanwhile")  # pragma: no cover - a race


def sweep_members(runs_dir, sweep_id: str, make_run) -> list:
    """The caller's runs whose record says they are points of `sweep_id`, by index."""
    members = []
    for run in list_runs(runs_dir, make_run):
        try:
            sweep = run.raw_record().get("sweep") or {}
        except (OSError, ValueError):
            continue
        if sweep.get("id") == sweep_id:
            members.append((sweep.get("index", 0), run))
    members.sort(key=lambda item: item[0])
    return [run for _, run in members]
