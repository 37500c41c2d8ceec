"""Run records: the only module that writes them.

One directory per run under the site's runs_dir, named by a short readable id
(`<experiment>-<5 base32 chars>`, e.g. `my-grpo-k3x7q`):

    <runs_dir>/<id>/
        record.json      the record (below); written only through Run.update/mutate/...
        spec.yaml        the spec as merged (all layers), written by `sf submit`
        plan.json        the compiled Plan (launcher.plan.Plan.to_dict())
        overrides.txt    the verl overrides, one per line
        job.sbatch       the rendered batch script, exactly as submitted
        events.jsonl     phase timestamps appended by the job (record_phase), one JSON a line
        reason           why the job failed, written by the job (plain text)
        preflight.json   the preflight report (--preflight)
        sweep.json       for a sweep: its points (index, overrides) when it has any
                         (a sweep has the same layout; an array sweep's task logs go to its
                         logs/ as slurm-<array id>_<task>.out or logs/<task>/...)
        logs/            slurm-%j.out and the per-node/per-role logs of the job
        checkpoints/     verl's trainer.default_local_dir
        metrics/         verl's file logger, one file per attempt

record.json holds:
    id, experiment, kind ("run" or "sweep"), created (ISO UTC), state, history
    ([{state, time, ...}], oldest first), job_ids (["123"], or ["123"] for an array /
    hetjob leader; components and tasks are found by the monitor), phases (merged from
    events.jsonl when read; never stored), requeue_count, exit_reason, sweep
    ({"id", "index"} when the run is a point of a sweep, else None), members (sweep only:
    run ids of its points when they are separate runs).

States written by the login node: created -> submitting -> submitted | submit_failed; the
monitor then records what Slurm says (pending, running, completed, failed, cancelled,
timeout, ...). The names, and which of them are final, are launcher.states'.

Concurrency: every change of record.json is a read-modify-write under an exclusive
fcntl lock on `.record.lock` in the run directory, and every file is written to a temp
file in the same directory, fsynced and renamed over the old one, so two `sf` commands
at once never corrupt a record or lose a change, and a crash leaves the old file.
Inside the job (compute nodes) nothing locks: record_phase appends one line with
O_APPEND in a single write.

Shared clusters (launcher.ownership): the runs folder must be trusted (nobody else can rename
what is in it: root's or yours, sticky if others may write it, and so every folder above it);
a run folder and what sf makes in it get explicit modes whatever the umask: 0700 (logs/ always),
or 2750 with the site's share_group for the run, checkpoints/ and metrics/; files are 0600
and never opened through a symlink. The lock is 0600 in the run's own folder, and a wait for
it is bounded (LOCK_WAIT_S): a command gives up naming the lock file instead of hanging.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from launcher import gateway, ownership, run_listing
from launcher.errors import SpecError
from launcher.run_record import (
    EVENTS_MAX,
    REASON_MAX,
    RECORD,
    RECORD_MAX,
    DamagedRecord,
    as_int,
    parse_events,
    parse_record,
    plan_damage,
    unreadable,
)
from launcher.runs_folder import make_runs_root, real_path
from launcher.states import CREATED, ENDED, REQUEUED

__all__ = ["DamagedRecord", "RECORD", "make_runs_root", "real_path"]  # re-exported: callers know them as runs.*
PLAN = "plan.json"
EVENTS = "events.jsonl"
REASON = "reason"
PROGRESS = "progress.json"  # the newest training step and when it arrived (launcher/injob/heal.py)
LOCK = ".record.lock"
SUBDIRS = ("logs", "checkpoints", "metrics")
PRIVATE_SUBDIRS = ("logs",)  # Ray's and the driver's output: never shared with a group
LOCK_WAIT_S = 10.0  # a record change takes milliseconds; longer is a stuck or hostile holder
LOCK_POLL_S = 0.05


class RecordBusy(SpecError):
    """The record's lock was not free within LOCK_WAIT_S."""

_B32 = "abcdefghijklmnopqrstuvwxyz234567"
_SUFFIX_LEN = 5


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def slug(experiment: str) -> str:
    """The experiment part of a run id: lower case letters, digits and dashes."""
    text = re.sub(r"[^a-z0-9]+", "-", experiment.lower()).strip("-")[:40].strip("-")
    return text or "run"


def new_run_id(experiment: str) -> str:
    """`<experiment slug>-<5 lowercase base32 chars>` (32**5 = 33M suffixes per name)."""
    return f"{slug(experiment)}-" + "".join(secrets.choice(_B32) for _ in range(_SUFFIX_LEN))


def new_entry_id(kind: str) -> str:
    """`<kind>-<UTC stamp>-<4 base32 chars>` for a run's exports and evals: their script,
    log and (export) target folder are named by it, so two made in the same second, by
    two commands at once, must not share it."""
    return f"{kind}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-" + "".join(
        secrets.choice(_B32) for _ in range(4))


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` (in a folder of the caller's) via a temp file, fsync, rename."""
    gateway.write(path, data, "run")


class Run:
    """A handle on one run directory. Cheap: reading happens in record()."""

    def __init__(self, run_dir: str | os.PathLike):
        self.dir = Path(run_dir)
        self.id = self.dir.name
        self._where = str(self.dir)
        self._fd: int | None = None  # the run folder, open while a listing reads many runs (opened)

    def __repr__(self) -> str:
        return f"Run({self.id!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Run) and other.dir == self.dir

    def __hash__(self) -> int:
        return hash(self.dir)

    # paths ---------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.dir / "checkpoints"

    # reading (launcher.gateway: regular files of this user or root, never a link, capped) ----
    @contextlib.contextmanager
    def opened(self, fd: int):
        """Read through `fd`, the run folder already opened (a listing of many runs walks the
        runs folder once, not once per file)."""
        self._fd = fd
        try:
            yield self
        finally:
            self._fd = None

    def _open_file(self, name: str, limit: int) -> int:
        """A descriptor of the run's regular file `name`; FileNotFoundError when absent,
        DamagedRecord naming it when it is not a file sf wrote or cannot be opened."""
        shown = f"{self._where}/{name}"  # a string, not a Path: a listing opens thousands
        try:
            if self._fd is not None:
                return gateway.open_read(self._fd, name, shown, "run", limit=limit)
            with gateway.parent(shown, "run") as (fd, base):
                return gateway.open_read(fd, base, shown, "run", limit=limit)
        except gateway.UnsafeFile as exc:
            raise DamagedRecord(self.id, exc.message, Path(shown)) from None
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise unreadable(self.id, Path(shown), exc) from None

    def read_bytes(self, name: str, limit: int = gateway.MAX_READ) -> bytes:
        """The bytes of the run's file `name` (see _open_file)."""
        fd = self._open_file(name, limit)
        shown = f"{self._where}/{name}"
        try:
            return gateway.read_fd(fd, limit, shown, "run")
        except gateway.UnsafeFile as exc:
            raise DamagedRecord(self.id, exc.message, Path(shown)) from None
        except OSError as exc:
            raise unreadable(self.id, Path(shown), exc) from None
        finally:
            os.close(fd)

    def raw_record(self) -> dict:
        """record.json as stored (no merge of events.jsonl / reason). A record that cannot be
        read or is not a run record (binary, empty, `[]`, a link, a FIFO, oversize): DamagedRecord
        naming the file, one line (a SpecError; a ValueError too, so listings skip it)."""
        return parse_record(self.read_bytes(RECORD, RECORD_MAX), self.id, f"{self._where}/{RECORD}")

    def phases(self) -> list[dict]:
        """The events of events.jsonl in order ([] when it is absent)."""
        try:
            return parse_events(self.read_bytes(EVENTS, EVENTS_MAX).decode("utf-8", "replace"))
        except FileNotFoundError:
            return []

    def record(self) -> dict:
        """The record with phases (events.jsonl), requeue count and reason merged in."""
        rec = self.raw_record()
        rec["id"] = self.id  # the folder names the run: a copied folder's record still holds the old id
        phases = self.phases()
        rec["phases"] = phases
        restarts = [as_int(p.get("restart")) for p in phases if p.get("phase") != "requeue_refused"]
        requeued = sum(1 for p in phases if p.get("phase") == REQUEUED)
        # an attempt Slurm requeued (`scontrol requeue` by hand, a node failure) records its
        # `ended` with ending=requeued: counted from that moment, not once the next one starts
        by_slurm = [as_int(p.get("restart")) + 1 for p in phases
                    if p.get("phase") == ENDED and p.get("ending") == "requeued"]
        rec["requeue_count"] = max([int(rec.get("requeue_count") or 0), requeued, *restarts, *by_slurm])
        if not rec.get("exit_reason"):
            reason = self.read_text(REASON)
            if reason and reason.strip():
                rec["exit_reason"] = reason.strip()
        return rec

    def check(self) -> None:
        """That record() can read this run, without parsing its events (a listing checks every
        run this way): record.json as raw_record() reads it, events.jsonl and, with no exit
        reason in the record, reason: regular files within their caps; DamagedRecord if not."""
        names = ((EVENTS, EVENTS_MAX),) if self.raw_record().get("exit_reason") else (
            (EVENTS, EVENTS_MAX), (REASON, REASON_MAX))
        for name, limit in names:
            try:
                os.close(self._open_file(name, limit))
            except FileNotFoundError:
                continue

    def read_text(self, name: str, errors: str = "replace") -> str | None:
        """A text file of the run (reason, job.sbatch, ...), None when absent; bytes that are not
        UTF-8 are replaced (a job may write anything into `reason`). One that is not a regular
        file of this user's or cannot be read: DamagedRecord naming it."""
        try:
            return self.read_bytes(name, REASON_MAX if name == REASON else gateway.MAX_READ).decode("utf-8", errors)
        except FileNotFoundError:
            return None

    def read_json(self, name: str) -> Any:
        """A JSON file of the run (plan.json, ...), None when absent; DamagedRecord naming it when
        it is not JSON."""
        try:
            text = self.read_text(name, errors="strict")
            return None if text is None else json.loads(text)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise DamagedRecord(self.id, f"{self.dir / name} is damaged (not JSON); restore it from a backup or "
                                "remove the run's folder", self.dir / name) from None

    def read_plan(self) -> dict | None:
        """plan.json, None when absent; DamagedRecord naming it when it is not JSON, not an object
        or a part sf reads is of another type (a hand edit, another tool's plan.json)."""
        plan = self.read_json(PLAN)
        plan_damage(plan, self.id, self.dir / PLAN)
        return plan

    # writing -------------------------------------------------------------------------
    def write_text(self, name: str, text: str) -> Path:
        """Replace the run's file `name` atomically (launcher.gateway: only in a folder of this user's)."""
        path = self.dir / name
        for depth in range(1, len(Path(name).parts)):  # a folder of the run it needs (logs/...): private
            with contextlib.suppress(FileExistsError):
                gateway.make_dir(self.dir.joinpath(*Path(name).parts[:depth]), ownership.PRIVATE_DIR, field="run")
        gateway.write(path, text, "run")
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")

    @contextlib.contextmanager
    def locked(self, wait_s: float = LOCK_WAIT_S):
        """Exclusive lock on the record (fcntl on .record.lock, 0600, this user's, never through
        a symlink); not reentrant. RecordBusy, naming the file, after `wait_s` without it."""
        fd = gateway.open_own(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600, "run")
        try:
            os.fchmod(fd, 0o600)  # a lock file of an older sf was 0644: others could take it
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise RecordBusy("run", f"the record of {self.id} stayed locked for {wait_s:g} s "
                                         f"({self.dir / LOCK}: another sf command, or a process holding that "
                                         "file, has it); try again, or look at who holds it with "
                                         f"`fuser {self.dir / LOCK}`") from None
                    time.sleep(LOCK_POLL_S)
            yield
        finally:
            os.close(fd)  # drops the lock

    def mutate(self, fn: Callable[[dict], dict | None]) -> dict:
        """Read-modify-write record.json under the lock. `fn` edits the dict in place or
        returns a new one. Returns the record as written."""
        with self.locked():
            rec = self.raw_record()
            result = fn(rec)
            if result is not None:
                rec = result
            rec.pop("phases", None)  # merged on read, never stored
            self.write_json(RECORD, rec)
            return rec

    def update(self, **fields) -> dict:
        def apply(rec):
            rec.update(fields)

        return self.mutate(apply)

    def add_state(self, state: str, **info) -> dict:
        """Set the state and append it to history with a UTC timestamp."""
        entry = {"state": state, "time": utc_now(), **info}

        def apply(rec):
            rec["state"] = state
            rec.setdefault("history", []).append(entry)

        return self.mutate(apply)

    def set_job_ids(self, ids) -> dict:
        ids = [str(i) for i in ids]
        return self.update(job_ids=ids)


def _initial_record(run_id: str, experiment: str, kind: str, sweep: dict | None) -> dict:
    now = utc_now()
    return {
        "id": run_id,
        "experiment": experiment,
        "kind": kind,
        "created": now,
        "state": CREATED,
        "history": [{"state": CREATED, "time": now}],
        "job_ids": [],
        "requeue_count": 0,
        "exit_reason": None,
        "sweep": sweep,
    }


def create_run(runs_dir, experiment: str, *, kind: str = "run", sweep: dict | None = None,
               share_group: str | None = None, **fields) -> Run:
    """Make `<runs_dir>/<id>/` (logs/, checkpoints/, metrics/) with record state "created".

    `sweep` is {"id": SWEEP_ID, "index": i} for a point of a sweep; extra `fields` go into
    the record (e.g. members=[...] for a sweep). `share_group` (the site's): the group may
    read the run's checkpoints and metrics; else nobody but this user reads anything of it."""
    if kind not in ("run", "sweep"):
        raise ValueError(f"kind must be 'run' or 'sweep', not {kind!r}")
    root = make_runs_root(runs_dir, share_group)
    mode = ownership.SHARED_DIR if share_group else ownership.PRIVATE_DIR
    gid = ownership.group_id(share_group)
    for _ in range(100):
        run_id = new_run_id(experiment)
        try:
            gateway.make_dir(root / run_id, mode, gid=gid, field="runs_dir")
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover - 100 collisions in 33M suffixes
        raise RuntimeError(f"could not find a free run id under {root}")
    run = Run(root / run_id)
    make_subdirs(run.dir, mode, group=share_group)
    rec = _initial_record(run_id, experiment, kind, sweep)
    rec.update(fields)
    run.write_json(RECORD, rec)
    return run


def make_run_dir(path, share_group: str | None = None) -> Run:
    """`sf render -o DIR`: DIR as a run dir the job will accept (its parent trusted and reached
    through no other user's link, DIR this user's with the modes of create_run), for a job
    submitted by hand. An existing DIR must be this user's already and hold no run yet: the
    plan.json of a run is never overwritten. Its files are the caller's to write (Run.write_text)."""
    path = Path(path).absolute()
    path = make_runs_root(path.parent, share_group, field="--output", per_user=False) / path.name
    mode = ownership.SHARED_DIR if share_group else ownership.PRIVATE_DIR
    gateway.make_dir(path, mode, gid=ownership.group_id(share_group), exist_ok=True, field="--output")
    try:
        gateway.lstat(path / PLAN, "--output")
    except FileNotFoundError:
        pass
    else:
        raise SpecError("--output", f"{path} already holds a run ({PLAN}): sf render never overwrites one; "
                        "choose a new folder, or remove that run's folder first")
    make_subdirs(path, mode, group=share_group, exist_ok=True, field="--output")
    return Run(path)


def make_subdirs(run_dir, mode: int, *, group: str | None = None, exist_ok: bool = False,
                 field: str = "run") -> None:
    """A run's SUBDIRS with `mode` (the run's own: private, or shared with `group`), but the
    PRIVATE_SUBDIRS, which are its user's alone whatever the run's mode."""
    gid = ownership.group_id(group)
    for sub in SUBDIRS:
        private = sub in PRIVATE_SUBDIRS
        gateway.make_dir(Path(run_dir) / sub, ownership.PRIVATE_DIR if private else mode,
                         gid=None if private else gid, exist_ok=exist_ok, field=field)


def open_run(runs_dir, run_id: str) -> Run:
    """The caller's run `run_id` (or the only one whose id starts with it): launcher.run_listing."""
    return run_listing.open_run(runs_dir, run_id, Run)


def list_runs(runs_dir) -> list[Run]:
    """The caller's runs and sweeps under runs_dir, newest first: launcher.run_listing."""
    return run_listing.list_runs(runs_dir, Run)


def sweep_members(runs_dir, sweep_id: str) -> list[Run]:
    """The caller's runs whose record says they are points of `sweep_id`, by index."""
    return run_listing.sweep_members(runs_dir, sweep_id, Run)


def run_ids(runs_dir) -> list[str]:
    """The ids of the caller's run folders under runs_dir (no record read: shell completion)."""
    return run_listing.run_ids(runs_dir)


def damaged_runs(runs_dir) -> dict[str, Path]:
    """{run id: its damaged file} of the caller's runs under runs_dir: launcher.run_listing."""
    return run_listing.damaged_runs(runs_dir, Run)


# --- inside the job ------------------------------------------------------------------

def record_phase(run_dir, phase: str, **info) -> dict:
    """Append {"phase", "time", "iso", "node", "job_id", "restart", ...} to events.jsonl
    with one O_APPEND write (atomic for lines shorter than PIPE_BUF). No locks: safe on
    compute nodes and from several nodes at once."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    now = time.time()
    event = {"phase": phase, "time": now,
             "iso": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
             "node": node}
    if os.environ.get("SLURM_JOB_ID"):
        event["job_id"] = os.environ["SLURM_JOB_ID"]
    if os.environ.get("SLURM_RESTART_COUNT"):
        with contextlib.suppress(ValueError):
            event["restart"] = int(os.environ["SLURM_RESTART_COUNT"])
    event.update(info)
    line = (json.dumps(event, default=str, separators=(",", ":")) + "\n").encode()
    fd = gateway.open_own(Path(run_dir) / EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600, "run")
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return event


def read_phases(run_dir) -> list[dict]:
    """The events of events.jsonl in order; a torn or malformed line is skipped (run_record). An
    events.jsonl that is not a regular file of the run's user, or cannot be read: DamagedRecord."""
    return Run(run_dir).phases()
