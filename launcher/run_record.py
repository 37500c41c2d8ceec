"""What a run's files must be to be read as a run: record.json, events.jsonl, plan.json (pure).

A run folder is data anyone with a bug, a full disk, another tool or (in a shared runs folder)
bad intent may have written. A record is used only when every field sf computes with has the
type sf wrote; an event only when its fields do and its counts are ones a job can reach (a
restart count of 10**30 is damage, not 10**30 requeues); a sweep's members only when they name
run folders beside it (never `../..` or an absolute path). What fails is a DamagedRecord naming
the file, one line; launcher.runs reads the files (through launcher.gateway) and writes them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from launcher.errors import SpecError
from launcher.states import ALLOCATED

RECORD = "record.json"
# the most bytes sf reads of each file of a run (a planted sparse file is refused, not read)
RECORD_MAX = 16 << 20  # a sweep of thousands of points is a few MB
EVENTS_MAX = 64 << 20  # months of restarts and heals, one short line each
REASON_MAX = 1 << 20
MAX_COUNT = 10**6  # no job is requeued, restarted or trained for more steps than this

class DamagedRecord(SpecError, ValueError):
    """A record.json that cannot be read or is not a run record (or another file of the run:
    events.jsonl, reason, plan.json); `path` is that file."""

    def __init__(self, field: str, message: str, path: Path | None = None):
        super().__init__(field, message)
        self.path = path


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
    if not all(isinstance(m, str) and is_run_id(m) for m in rec.get("members") or ()):
        return "its members are not run ids of folders beside it"
    if not 0 <= int(rec.get("requeue_count") or 0) < MAX_COUNT:
        return f"its requeue_count {rec['requeue_count']} is not a count a job reaches"
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


def is_run_id(name: str) -> bool:
    """A name sf could have given a run folder: one path component, not `.`/`..`, no NUL."""
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..") and len(name) < 256


def parse_record(data: bytes, run_id: str, path: str | Path) -> dict:
    """record.json's bytes as a record (job ids as text); DamagedRecord naming `path` if not one."""
    try:
        rec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        rec = None
    if not isinstance(rec, dict):
        raise DamagedRecord(run_id, f"{path} is damaged (not a JSON object of a run record); restore it from "
                            "a backup or remove the run's folder", Path(path))
    problem = _record_problem(rec)
    if problem:
        raise DamagedRecord(run_id, f"{path} is damaged ({problem}); restore it from a backup or remove the "
                            "run's folder", Path(path))
    if "job_ids" in rec:  # a hand-written 123: text, as sf writes them (joined, compared)
        rec["job_ids"] = [str(j) for j in rec["job_ids"]]
    return rec


def plan_damage(plan, run_id: str, path: Path) -> None:
    """DamagedRecord naming `path` when the plan.json object is not one sf can read."""
    problem = None if plan is None else _plan_problem(plan)
    if problem:
        raise DamagedRecord(run_id, f"{path} is damaged ({problem}); restore it from a backup or remove the "
                            "run's folder", path)


def parse_events(text: str) -> list[dict]:
    """The events of an events.jsonl text in order; a torn or malformed line is skipped (_event)."""
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


def as_int(value) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def unreadable(run_id: str, path: Path, exc: OSError) -> DamagedRecord:
    return DamagedRecord(run_id, f"cannot read {path}: {exc.strerror or exc}; fix or remove it (restore it from a "
                                 "backup), or remove the run's folder", path)


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
            event[name] = value = int(value)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value < MAX_COUNT):
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
