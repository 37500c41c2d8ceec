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
import difflib
import fcntl
import json
import math
import os
import re
import secrets
import socket
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from launcher import ownership
from launcher.errors import SpecError
from launcher.states import ALLOCATED, CREATED, ENDED, REQUEUED

RECORD = "record.json"
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


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` via a temp file in the same directory, fsync, os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


class DamagedRecord(SpecError, ValueError):
    """A record.json that cannot be read or is not a run record (or another file of the run:
    events.jsonl, reason, plan.json); `path` is that file."""

    def __init__(self, field: str, message: str, path: Path | None = None):
        super().__init__(field, message)
        self.path = path


_DAMAGED = object()
_TEXT, _WHOLE, _LIST, _MAP, _NONE = (str,), (int,), (list,), (dict,), (type(None),)
# the fields sf reads from every record, and what each must be (a field may be absent)
_RECORD_FIELDS = {"id": _TEXT, "experiment": _TEXT, "kind": _TEXT, "created": _TEXT, "state": _TEXT,
                  "exit_reason": _TEXT + _NONE, "requeue_count": _WHOLE + _NONE, "job_ids": _LIST,
                  "history": _LIST, "members": _LIST, "sweep": _MAP + _NONE,
                  # what `sf status`, `attach`, `metrics` and `export` compute with
                  "total_steps": _WHOLE + _NONE, "final": _MAP + _NONE, "runtime": _MAP + _NONE,
                  "params": _MAP + _NONE, "points": _LIST + _WHOLE + _NONE, "max_parallel": _WHOLE + _NONE,
                  "grid": _LIST, "exports": _LIST, "chain_exports": _LIST, "model_from": _MAP + _NONE}
_OBJECT_LISTS = ("history", "grid", "exports", "chain_exports")  # lists of objects sf calls .get on


# a job id sf records: "123", an array task "123_4" (a hetjob's components are "123+1"); anything
# else would reach sacct's --jobs, which then fails for every run of the same poll
_JOB_ID = re.compile(r"\d{1,15}(?:[_+]\d{1,9})?")


def _record_problem(rec: dict) -> str | None:
    """What makes a record.json object unusable (a field sf reads of another type), or None."""
    for name, types in _RECORD_FIELDS.items():
        value = rec.get(name)
        if name in rec and (isinstance(value, bool) or not isinstance(value, types)):
            return f"its {name} is {json.dumps(value)[:40]}, not {' or '.join(t.__name__ for t in types)}"
    if any(isinstance(j, bool) or not isinstance(j, (str, int)) or not _JOB_ID.fullmatch(str(j))
           for j in rec.get("job_ids") or ()):
        return "its job_ids are not Slurm job ids"
    for name in _OBJECT_LISTS:
        if not all(isinstance(item, dict) for item in rec.get(name) or ()):
            return f"its {name} holds something other than objects"
    if not all(isinstance(m, str) for m in rec.get("members") or ()):
        return "its members are not run ids"
    sweep = rec.get("sweep") or {}
    if not isinstance(sweep.get("id", ""), str) or isinstance(sweep.get("index", 0), bool) \
            or not isinstance(sweep.get("index", 0), int):
        return "its sweep is not {id, index}"
    return None


# the parts of plan.json sf reads on the login node (status, attach, export), and what each must be
_PLAN_FIELDS = {"overrides": _LIST, "slurm": _MAP, "pools": _LIST}


def _plan_problem(plan) -> str | None:
    """What makes a plan.json unusable (not an object, a part sf reads of another type), or None."""
    if not isinstance(plan, dict):
        return "not a JSON object"
    for name, types in _PLAN_FIELDS.items():
        if name in plan and not isinstance(plan[name], types):
            return f"its {name} is {json.dumps(plan[name])[:40]}, not {types[0].__name__}"
    if not all(isinstance(p, dict) and isinstance(p.get("name"), str) for p in plan.get("pools") or ()):
        return "its pools are not objects with a name"
    return None


class Run:
    """A handle on one run directory. Cheap: reading happens in record()."""

    def __init__(self, run_dir: str | os.PathLike):
        self.dir = Path(run_dir)
        self.id = self.dir.name

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

    # reading -------------------------------------------------------------------------
    def raw_record(self) -> dict:
        """record.json as stored (no merge of events.jsonl / reason). A record that cannot be
        read or is not a JSON object (binary, empty, `[]`, `null`): DamagedRecord naming the
        file, one line (a SpecError; a ValueError too, so listings that skip bad records skip it)."""
        path = self.dir / RECORD
        if path.is_symlink():  # sf writes its own file: a link would make commands act on another run's jobs
            raise DamagedRecord(self.id, f"{path} is a symbolic link, not the record sf wrote; remove the link "
                                "(sf reads and writes run records only as files of their own)", path)
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise DamagedRecord(self.id, f"cannot read {path}: {exc.strerror}; fix its permissions", path) from None
        except (UnicodeDecodeError, ValueError, RecursionError):
            data = _DAMAGED
        if not isinstance(data, dict):
            raise DamagedRecord(self.id, f"{path} is damaged (not a JSON object of a run record); restore it from "
                                "a backup or remove the run's folder", path)
        problem = _record_problem(data)
        if problem:
            raise DamagedRecord(self.id, f"{path} is damaged ({problem}); restore it from a backup or remove the "
                                "run's folder", path)
        if "job_ids" in data:  # a hand-written 123: text, as sf writes them (joined, compared)
            data["job_ids"] = [str(j) for j in data["job_ids"]]
        return data

    def record(self) -> dict:
        """The record with phases (events.jsonl), requeue count and reason merged in."""
        rec = self.raw_record()
        rec["id"] = self.id  # the folder names the run: a copied folder's record still holds the old id
        phases = read_phases(self.dir)
        rec["phases"] = phases
        restarts = [_int(p.get("restart")) for p in phases if p.get("phase") != "requeue_refused"]
        requeued = sum(1 for p in phases if p.get("phase") == REQUEUED)
        # an attempt Slurm requeued (`scontrol requeue` by hand, a node failure) records its
        # `ended` with ending=requeued: counted from that moment, not once the next one starts
        by_slurm = [_int(p.get("restart")) + 1 for p in phases
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
        reason in the record, reason openable; DamagedRecord naming the file if not."""
        names = (EVENTS,) if self.raw_record().get("exit_reason") else (EVENTS, REASON)
        for name in names:
            try:
                with open(self.dir / name, "rb"):
                    pass
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _unreadable(self.id, self.dir / name, exc) from None

    def read_text(self, name: str, errors: str = "replace") -> str | None:
        """A text file of the run (reason, job.sbatch, ...), None when absent; bytes that are not
        UTF-8 are replaced (a job may write anything into `reason`). One that cannot be read (a
        folder, a symlink loop, no permission): DamagedRecord naming it."""
        try:
            return (self.dir / name).read_text(errors=errors)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _unreadable(self.id, self.dir / name, exc) from None

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
        problem = None if plan is None else _plan_problem(plan)
        if problem:
            raise DamagedRecord(self.id, f"{self.dir / PLAN} is damaged ({problem}); restore it from a backup or "
                                "remove the run's folder", self.dir / PLAN)
        return plan

    # writing -------------------------------------------------------------------------
    def write_text(self, name: str, text: str) -> Path:
        path = self.dir / name
        atomic_write(path, text)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")

    @contextlib.contextmanager
    def locked(self, wait_s: float = LOCK_WAIT_S):
        """Exclusive lock on the record (fcntl on .record.lock, 0600, this user's, never through
        a symlink); not reentrant. RecordBusy, naming the file, after `wait_s` without it."""
        fd = ownership.open_own_file(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
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


def _int(value) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


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


def make_runs_root(runs_dir, share_group: str | None = None, field: str = "runs_dir") -> Path:
    """The runs folder, made (with its missing parents) when it is not there: every existing
    folder on its path must be trusted (ownership.trusted_chain), what sf makes is 0700, or
    0750 with the site's share_group so that the group reaches the runs shared with it."""
    root = Path(runs_dir).expanduser().absolute()
    ownership.trusted_chain(root, field)
    missing = [p for p in (root, *root.parents) if not p.exists()]
    for folder in reversed(missing):
        try:
            ownership.make_own_dir(folder, 0o750 if share_group else ownership.PRIVATE_DIR, group=share_group,
                                   field=field)
        except FileExistsError:  # another sf command made it a moment ago
            ownership.trusted_chain(folder, field)
    return root


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
    for _ in range(100):
        run_id = new_run_id(experiment)
        try:
            ownership.make_own_dir(root / run_id, mode, group=share_group)
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
    """`sf render -o DIR`: DIR as a run dir the job will accept (its parent trusted, DIR this
    user's with the modes of create_run; an existing DIR must be this user's already), for a
    job submitted by hand. Its files are the caller's to write (Run.write_text)."""
    path = Path(path).absolute()
    make_runs_root(path.parent, share_group, field="--output")
    mode = ownership.SHARED_DIR if share_group else ownership.PRIVATE_DIR
    ownership.make_own_dir(path, mode, group=share_group, exist_ok=True, field="--output")
    make_subdirs(path, mode, group=share_group, exist_ok=True, field="--output")
    return Run(path)


def make_subdirs(run_dir, mode: int, *, group: str | None = None, exist_ok: bool = False,
                 field: str = "run") -> None:
    """A run's SUBDIRS with `mode` (the run's own: private, or shared with `group`), but the
    PRIVATE_SUBDIRS, which are its user's alone whatever the run's mode."""
    for sub in SUBDIRS:
        private = sub in PRIVATE_SUBDIRS
        ownership.make_own_dir(Path(run_dir) / sub, ownership.PRIVATE_DIR if private else mode,
                               group=None if private else group, exist_ok=exist_ok, field=field)


def _run_ids(root: Path) -> list[str]:
    try:
        return sorted(p.name for p in root.iterdir() if (p / RECORD).is_file())
    except FileNotFoundError:
        return []


def open_run(runs_dir, run_id: str) -> Run:
    """The run `run_id` (or the only run whose id starts with it). SpecError naming the
    closest ids otherwise."""
    root = Path(runs_dir).expanduser()
    run_id = (run_id or "").strip().rstrip("/")
    if run_id and "/" not in run_id and run_id not in (".", "..") and (root / run_id / RECORD).is_file():
        return Run(root / run_id)
    ids = _run_ids(root)
    prefixed = [i for i in ids if run_id and i.startswith(run_id)]
    if len(prefixed) == 1:
        return Run(root / prefixed[0])
    close = prefixed or difflib.get_close_matches(run_id, ids, n=5, cutoff=0.5)
    if not close:
        close = [i for i in ids if run_id and run_id in i][:5]
    hint = f"; did you mean: {', '.join(close[:5])}" if close else (
        "; `sf list` shows the runs" if ids else
        " (it holds no runs); pass the runs dir the run is in (--runs-dir, $SF_RUNS_DIR or the site's runs_dir)")
    what = "several runs start with" if len(prefixed) > 1 else "no run"
    raise SpecError("run", f"{what} {run_id!r} in {root}{hint}")


def list_runs(runs_dir) -> list[Run]:
    """Every run and sweep under runs_dir, newest first (by record 'created')."""
    root = Path(runs_dir).expanduser()
    keyed = []
    for run_id in _run_ids(root):
        run = Run(root / run_id)
        try:
            created = run.raw_record().get("created", "")
        except (OSError, ValueError):
            continue
        keyed.append((created, run_id, run))
    keyed.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [run for _, _, run in keyed]


def sweep_members(runs_dir, sweep_id: str) -> list[Run]:
    """Runs whose record says they are points of `sweep_id`, by index."""
    members = []
    for run in list_runs(runs_dir):
        try:
            sweep = run.raw_record().get("sweep") or {}
        except (OSError, ValueError):
            continue
        if sweep.get("id") == sweep_id:
            members.append((sweep.get("index", 0), run))
    members.sort(key=lambda item: item[0])
    return [run for _, run in members]


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
    fd = ownership.open_own_file(Path(run_dir) / EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return event


def _unreadable(run_id: str, path: Path, exc: OSError) -> DamagedRecord:
    return DamagedRecord(run_id, f"cannot read {path}: {exc.strerror or exc}; fix or remove it (restore it from a "
                                 "backup), or remove the run's folder", path)


def read_phases(run_dir) -> list[dict]:
    """The events of events.jsonl in order; a torn or malformed line is skipped (_event). An
    events.jsonl that cannot be read (a folder, a symlink loop): DamagedRecord naming it."""
    path = Path(run_dir) / EVENTS
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _unreadable(Path(run_dir).name, path, exc) from None
    events = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            event = _event(json.loads(line))
        except (ValueError, RecursionError):
            continue
        if event is not None:
            events.append(event)
    return events


# the fields of an event that sf computes with, and what each must be (others are detail)
_EVENT_TEXTS = ("phase", "iso", "node", "name", "label", "what", "ending", "address")
_EVENT_COUNTS = ("restart", "restart_in_place", "step", "resumed_from")
_EVENT_NODE_LISTS = ("missing", "left_out", "spares_used")


def _event(event) -> dict | None:
    """An events.jsonl line's object with its time a float and its counts ints (a shell writes
    `"restart": "1"`), or None when it is not an event sf can use: no phase, or a field sf
    computes with of another type (a hand edit, another tool, NaN or 1e400 as the time)."""
    if not isinstance(event, dict) or not isinstance(event.get("phase"), str) or not event["phase"]:
        return None
    if any(name in event and not isinstance(event[name], str) for name in _EVENT_TEXTS):
        return None
    if "time" in event:
        try:
            event["time"] = float(event["time"]) if not isinstance(event["time"], (bool, str)) else math.nan
        except (TypeError, OverflowError):
            return None
        if not math.isfinite(event["time"]):
            return None
    for name in _EVENT_COUNTS:
        value = event.get(name)
        if isinstance(value, str) and value.isdigit() and len(value) < 10:
            event[name] = int(value)
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return None
    nodes = event.get("nodes")  # node names; allocated's is their count
    if nodes is not None and not _texts(nodes) and not (event["phase"] == ALLOCATED and isinstance(nodes, int)):
        return None
    if any(event.get(name) is not None and not _texts(event[name]) for name in _EVENT_NODE_LISTS):
        return None
    pools = event.get("pools", {})  # pool -> its hosts (allocated), host -> its pool (barrier_waiting)
    if not isinstance(pools, dict) or not all(isinstance(v, str) or _texts(v) for v in pools.values()):
        return None
    return event


def _texts(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
