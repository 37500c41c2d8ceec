"""Sweeps: a grid of points over knobs or Hydra keys (pure parts; the CLI is cmd_sweep).

    sf sweep NAME --grid actor_lr=1e-6,3e-6 --grid rollout_n=5,8 --max-parallel 2

Every point is the experiment with its grid values as the sweep point, the layer above the
user's own --set (launcher.compile.resolve: the grid wins over every input but a pin or a
binding, which refuse it), compiled on its own before anything is submitted.

How points become Slurm jobs:
  one pool    ONE job array, `--array=0-(n-1)%K`. Task i is point i: the batch script
              reads its run dir from the sweep's manifest.json by SLURM_ARRAY_TASK_ID and
              the supervisor its overrides, checkpoint dir and paths.
  several     Slurm has no arrays of hetjobs: n hetjob submissions, point i depending on
              point i-K (`--dependency=afterany:<job of i-K>`), so at most K run at once
              and nothing on the login node has to stay alive. That throttle goes on
              sbatch's command line, which replaces the script's `--dependency` line, so
              it carries the point's own dependency too (its singleton, --after,
              --dependency; `throttled_dependency`).

Records (launcher.runs): the sweep is a record kind="sweep" (job_ids = [array id] for an
array sweep, [] for hetjob sweeps; `points` = [{index, params}], `members` = the point run
ids, `grid`, `max_parallel`, `mode` "array"|"hetjobs", `submissions` history); every point
is its own run (sweep={"id", "index"}) with its own run dir, checkpoints and logs, and
job_ids = ["<array id>_<i>"] or ["<hetjob leader id>"]. `sf status SWEEP` shows the
points from the member runs in one sacct call. `sf sweep --retry-failed SWEEP` submits only
the failed points again (a new array over their indices, or new hetjobs), into the same
run dirs (so verl resumes from their checkpoints), recording the earlier job ids in each
point's `attempts`.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from launcher.compile.values import hydra_value
from launcher.errors import SpecError
from launcher.spec.experiment import set_field, set_override_key
from launcher.states import RUN_FAILED

MAX_POINTS = 1000  # a dev cluster's MaxArraySize is 1001; real sites are often lower
_KEY = re.compile(r"^[+~]?[A-Za-z_][A-Za-z0-9_.\-/@]*$")



def split_values(text: str) -> list[str]:
    """`a,b,c` -> [a, b, c]; `\\,` is a literal comma. Pure."""
    values, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in ",\\":
            cur.append(text[i + 1])
            i += 2
            continue
        if c == ",":
            values.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    values.append("".join(cur))
    return values


def parse_grid(items) -> list[tuple[str, list[str]]]:
    """`--grid KEY=V1,V2` items -> [(key, [v1, v2])] in order; SpecError on bad input."""
    grid: list[tuple[str, list[str]]] = []
    seen = set()
    for item in items or ():
        item = str(item)
        if "=" not in item:
            raise SpecError("--grid", f"{item!r} is not KEY=V1,V2,... (e.g. --grid actor_lr=1e-6,3e-6)")
        key, _, rest = item.partition("=")
        key = key.strip()
        if not _KEY.fullmatch(key):
            raise SpecError("--grid", f"{key!r} is not a knob or a dotted Hydra key (letters, digits and _ . @ / -, "
                            "starting with a letter or _); write KEY=V1,V2, e.g. --grid actor_lr=1e-6,3e-6")
        if key in seen:
            raise SpecError(f"--grid {key}", "given twice; list all its values in one --grid KEY=V1,V2")
        values = [v.strip() for v in split_values(rest)]
        if not rest.strip() or any(v == "" for v in values):
            raise SpecError(f"--grid {key}", f"{rest!r} has an empty value; give V1,V2,... (\\, for a comma)")
        if any("\x00" in v or "\n" in v for v in values):
            raise SpecError(f"--grid {key}", "values cannot hold newlines or NUL characters")
        if len(set(values)) != len(values):  # two points would be one run twice
            repeated = next(v for i, v in enumerate(values) if v in values[:i])
            once = ",".join(v.replace("\\", "\\\\").replace(",", "\\,") for v in dict.fromkeys(values))
            raise SpecError(f"--grid {key}", f"{rest!r} repeats the value {repeated!r}; give each value once: "
                            f"--grid {key}={once}")
        seen.add(key)
        grid.append((key, values))
    if not grid:
        raise SpecError("--grid", "give at least one --grid KEY=V1,V2")
    return grid


def expand(grid: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """Cartesian product, last key varying fastest: [{key: value}, ...]. Pure."""
    keys = [k for k, _ in grid]
    n = 1
    for _, values in grid:
        n *= len(values)
    if n > MAX_POINTS:
        raise SpecError("--grid", f"{n} points; at most {MAX_POINTS} in one sweep (split it)")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*[v for _, v in grid])]


def point_sets(params: dict[str, str]) -> list[str]:
    """The `--set` items of a point. A raw Hydra key's value with a comma (`\\,` in the grid)
    is quoted for Hydra, which would read a bare `a,b` as an ambiguous sweep and refuse it;
    a knob reads its own text (a list knob splits it), a [list] or {dict} is Hydra's own."""
    return [f"{k}={_hydra_text(k, v)}" for k, v in params.items()]


def _hydra_text(key: str, value: str) -> str:
    if "," not in value or value[:1] in "[{'\"" or set_field(key, "sweep").startswith("knobs."):
        return value
    return hydra_value(value)


def point_values(params: dict[str, str], resolved: dict) -> dict[str, Any]:
    """{grid key: the value verl gets for it} of one compiled point, read from its resolved
    map (Plan.resolved: the composed config, typed as verl reads it), never from the grid's
    text: `rollout_n=2.0` is 2, `actor_lr=1e-6` is 1e-06, `x=True` is true. A dict value
    gives {its leaves: value}; a delete gives None."""
    out: dict[str, Any] = {}
    for key, text in params.items():
        field = set_field(key, "sweep")
        hits = {verl_key: item for verl_key, item in resolved.items()
                if any(w.get("layer") == "sweep" and w.get("field") == field
                       for w in (item, *(item.get("overrides") or ())))}
        values = {verl_key: None if item.get("op") == "~" else item.get("value") for verl_key, item in hits.items()}
        below = set_override_key(key).lstrip("+~") + "."  # a dict value's leaves, named below its key
        if len(values) == 1 and not next(iter(values)).startswith(below):
            out[key] = next(iter(values.values()))
        else:  # a dict value reaches its leaves; nothing found (cannot happen once compiled): the text
            out[key] = {k.removeprefix(below): v for k, v in values.items()} or text
    return out


def shown(value: Any) -> str:
    """A point's value as a label shows it: as a Hydra override writes it (2, 1e-06, True,
    a string that reads as a number quoted)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return hydra_value(value)


def label(values: dict[str, Any]) -> str:
    """`rollout_n=2, actor_lr=1e-06`: a point by the values verl gets (point_values)."""
    return ", ".join(f"{k}={shown(v)}" for k, v in values.items())


def given_label(params: dict[str, str]) -> str:
    """A point by its grid text, for a point that did not compile (no resolved values)."""
    return ", ".join(f"{k}={v}" for k, v in params.items())


def point_flags(flags: dict, params: dict[str, str]) -> dict:
    """The spec flags of one point: the user's flags, and the grid's values as the sweep
    point (the layer above --set: launcher.compile.resolve)."""
    out = dict(flags)
    out["point"] = point_sets(params)
    return out


def same_jobs(points: list[tuple]) -> list[SpecError]:
    """[(grid text, values, overrides[, sources])] of the compiled points: a SpecError for each
    point whose job (its overrides, as verl gets them) is an earlier point's: `rollout_n=4,4.0`,
    `actor_lr=1e-6,0.000001` or `save_freq=null,-1` spend GPU hours twice on one job. With the
    overrides' sources, also a point whose grid values resolve to an earlier point's while the
    rest of its overrides are the same: an interpolation (`total_epochs=${trainer.nnodes},1`
    with one node) is other text for the same value. Pure."""
    first: dict[tuple[str, ...], int] = {}
    first_resolved: dict[tuple, int] = {}
    errors = []
    for index, (given, values, overrides, *rest) in enumerate(points):
        earlier = first.setdefault(tuple(overrides), index)
        if rest:
            others = tuple(o for o, src in zip(overrides, rest[0], strict=True)
                           if src != "sweep" and not str(src).startswith("sweep "))
            key = (others, json.dumps(values, sort_keys=True, default=repr))
            earlier = min(earlier, first_resolved.setdefault(key, index))
        if earlier != index:
            errors.append(SpecError(f"point {index} ({given_label(given)})",
                                    f"runs the same job as point {earlier} (verl gets {label(values)} in both); "
                                    "drop one of the values from --grid"))
    return errors


def check_max_parallel(value, n: int) -> int:
    if value is None:
        return n
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError("--max-parallel", f"{value!r} must be a whole number >= 1")
    return min(value, n)


def dependency_for(i: int, submitted: list[str | None], max_parallel: int) -> str | None:
    """For hetjob sweeps: the `--dependency` of submission i given the job ids of
    submissions 0..i-1, so at most K run at once: i waits for i-K to end (afterany). The K
    chains i, i-K, i-2K, ... keep the bound; when i-K failed to submit, i waits for the
    one before it in its chain. Pure."""
    j = i - max_parallel
    while j >= 0:
        if submitted[j]:
            return f"afterany:{submitted[j]}"
        j -= max_parallel
    return None


def throttled_dependency(own: str | None, throttle: str | None) -> str | None:
    """The `--dependency` for sbatch's command line of a throttled point: the command line
    replaces the script's own (singleton, --after, --dependency), so both are joined and
    must all hold. None when there is no throttle (the script's own line stands). Pure."""
    if not throttle:
        return None
    if own and "?" in own:  # any-of cannot be joined with an all-of throttle (sf refuses it for runs)
        raise SpecError("--dependency", f"{own!r} joins with ? (any of); a throttled sweep point needs , (all of)")
    return ",".join(d for d in (own, throttle) if d)


def manifest(sweep_id: str, points: list[dict]) -> dict:
    """manifest.json of an array sweep: what task i needs. `points` items carry index,
    run_id, run_dir, checkpoint_dir, params, overrides, check_paths. Pure."""
    out = []
    for expected, point in enumerate(sorted(points, key=lambda p: p["index"])):
        if point["index"] != expected:
            raise ValueError(f"sweep points must be numbered 0..n-1, got index {point['index']}")
        for o in point["overrides"]:
            if "\x00" in str(o):
                raise SpecError(f"point {expected}", "an override holds a NUL character")
        out.append({"index": point["index"], "run_id": point["run_id"], "run_dir": point["run_dir"],
                    "checkpoint_dir": point["checkpoint_dir"], "params": dict(point["params"]),
                    "overrides": [str(o) for o in point["overrides"]],
                    "check_paths": [str(p) for p in point.get("check_paths", ())]})
    return {"sweep": sweep_id, "points": out}


def failed_points(points: list[dict]) -> list[int]:
    """Indices of points (from monitor's status.points) whose state counts as failed."""
    return sorted(int(p["index"]) for p in points
                  if p.get("index") is not None and str(p.get("state", "")).lower() in RUN_FAILED)
