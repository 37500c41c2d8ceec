"""Scheduler options people pass every day: reservation, mail, dependency, exclude, constraint,
and `--sbatch KEY=VALUE` for other long sbatch options from an allowlist.

Three sources, lowest first: the site file's `slurm:` section (site defaults), config.yaml's
`slurm:` keys, the flags (`--reservation`, `--mail-type`, `--mail-user`, `--dependency`,
`--exclude`, `--constraint`, `--sbatch`), merged by launcher.spec.experiment like every other layer.
`checked(values, origins)` turns the merged `slurm` mapping into checked values (a
SpecError naming the flag or key and the fix otherwise); render puts them on `#SBATCH` lines.

Hetjobs: PER_GROUP options go into every het component (each component is its own job
record: its own reservation, excluded nodes, features); JOB_WIDE ones (dependency, mail,
begin, deadline, ...) go into the first component only and apply to the whole job.
The patterns and the allowlist are launcher.sbatch_values'; the flags are
launcher.cli.options'. Pure; standard library only.
"""

from __future__ import annotations

import re

from launcher import sbatch_values
from launcher.errors import SpecError
from launcher.sbatch_values import (  # noqa: F401 (KEYS, DEPENDENCY: named here by callers and tests)
    ALLOWED,
    DEPENDENCY,
    INT,
    KEYS,
    MAIL_TYPES,
    MAIL_USER,
    NODELIST,
    RESERVATION,
    SBATCH_KEY,
    SCALARS,
    TIMEISH,
    WORDS,
)
from launcher.spec.layers import SITE, Layer

# sbatch options sf writes itself (or has its own key for): never through --sbatch
OWNED = {
    "job-name": "sf names the job after the run", "output": "the run's logs/ holds it",
    "error": "the run's logs/ holds it", "open-mode": "sf sets it for requeues",
    "requeue": "use slurm.requeue", "no-requeue": "use slurm.requeue: false", "signal": "use slurm.signal_lead_s",
    "array": "use `sf sweep`", "nodes": "use --profile", "ntasks": "sf runs one task a node",
    "ntasks-per-node": "sf runs one task a node", "gres": "use --profile", "gpus": "use --profile",
    "gpus-per-node": "use --profile", "gpus-per-task": "use --profile", "cpus-per-task": "the site's series sets it",
    "mem": "the site's series sets it (mem_per_node)", "partition": "use slurm.partition",
    "time": "use slurm.time", "account": "use slurm.account", "qos": "use slurm.qos",
    "reservation": "use --reservation", "dependency": "use --dependency", "mail-type": "use --mail-type",
    "mail-user": "use --mail-user", "exclude": "use --exclude", "constraint": "use --constraint",
    "exclusive": "use slurm.exclusive", "chdir": "sf sets the working directory", "export": "use env: in config.yaml",
    "export-file": "use env: in config.yaml", "wrap": "sf writes the script", "hetjob": "use pools",
    "packjob": "use pools", "nodelist": "use --exclude or --constraint", "clusters": "the site file names one cluster",
    "parsable": "sf reads sbatch's output", "test-only": "use `sf submit --dry-run`", "wait": "use `sf submit --wait`",
    "hold": "release it with scontrol after submitting", "input": "the job reads no stdin",
}
_TEXT = ["string", "null"]
# config.yaml's `slurm:` keys for these options (tests/unit/compiler_fixtures/genschema.py)
SCHEMA_PROPERTIES = {
    "reservation": {"type": _TEXT, "description": "Slurm reservation (every het group); --reservation"},
    "mail_type": {"type": ["string", "array", "null"], "items": {"type": "string"},
                  "description": "mail events, e.g. FAIL or END,FAIL (job-wide); --mail-type"},
    "mail_user": {"type": _TEXT, "description": "mail address or user name (job-wide); --mail-user"},
    "dependency": {"type": _TEXT, "description": "Slurm dependency, e.g. afterok:1234 (job-wide); --dependency"},
    "exclude": {"type": ["string", "array", "null"], "items": {"type": "string"},
                "description": "nodes to leave out, e.g. node[01-02] (every het group); --exclude"},
    "constraint": {"type": _TEXT,
                   "description": "node features, joined with the series' own by & (every het group); --constraint"},
    "sbatch": {"type": "object", "additionalProperties": {"type": ["string", "integer", "boolean"]},
               "description": "other long sbatch options from sf's allowlist, e.g. {mem-per-gpu: 32G, "
                              "spread-job: true}; --sbatch KEY=VALUE"},
    "exclude_bad_nodes": {"type": ["boolean", "null"],
                          "description": "check every node before training; requeue without the ones that fail "
                                         "(at most max_requeues times); --exclude-bad-nodes"},
}

def site_origins() -> dict:
    """Every scheduler option from the site file (sf doctor checks the site's own defaults)."""
    return {f"slurm.{key}": SITE for key in (*KEYS, "sbatch")}


def _field(key: str, origins: dict, flag: str | None = None) -> str:
    """The name an error shows: the flag, the site file's key or config.yaml's key."""
    origin = origins.get(f"slurm.{key}")
    if origin is not None and origin.flag:
        return flag or origin.flag
    return f"site.slurm.{key}" if origin is not None and origin.layer is Layer.SITE else f"slurm.{key}"


def _mail_type(value, field: str) -> str:
    text = ",".join(value) if isinstance(value, (list, tuple)) else str(value)
    parts = text.split(",")
    bad = [p for p in parts if p.upper() not in MAIL_TYPES]
    if bad or not text:
        raise SpecError(field, f"{text!r} is not a mail type; use one or more of {','.join(MAIL_TYPES)} joined by ,")
    return ",".join(p.upper() for p in parts)


def check_sbatch(key: str, value, field: str) -> tuple[str, str | None]:
    """One `--sbatch KEY=VALUE`: (key, checked value or None for a flag), else a SpecError."""
    key = str(key).strip().removeprefix("--")
    if not SBATCH_KEY.fullmatch(key):
        raise SpecError(field, f"{key!r} is not a long sbatch option name; write it like mem-per-gpu=32G")
    if key in OWNED:
        raise SpecError(field, f"--{key} cannot be passed through: {OWNED[key]}")
    if key not in ALLOWED:
        raise SpecError(field, f"--{key} is not in sf's allowlist; allowed: {', '.join(sorted(ALLOWED))}")
    pattern, what, _ = ALLOWED[key]
    if pattern is None:
        if value not in (None, True, "", "true"):
            raise SpecError(field, f"--{key} is {what}; write --sbatch {key}")
        return key, None
    if value is None or value is True or value == "" or isinstance(value, (dict, list)):
        raise SpecError(field, f"--{key} needs a value: {what}; write --sbatch {key}=VALUE")
    return key, sbatch_values.check(pattern, value, field, what)


def parse_sbatch_flags(items) -> dict:
    """`--sbatch KEY=VALUE` / `--sbatch FLAG` (repeatable) -> {key: value or True}, keys checked."""
    out: dict = {}
    for item in items or ():
        key, eq, value = str(item).partition("=")
        key = key.strip().removeprefix("--")
        checked_key, checked_value = check_sbatch(key, value if eq else None, "--sbatch")
        out[checked_key] = True if checked_value is None else checked_value
    return out


# Slurm's job ids are 32-bit (0xFFFFFFFE and 0xFFFFFFFF mean no value and infinite): sbatch
# takes a larger one in a dependency and waits on it wrapped (afterok:99999999999 became
# afterok:1215752191, another job, on the dev cluster's 22.05)
MAX_JOB_ID = 0xFFFFFFFD


def _job_ids_fit(dependency: str, field: str) -> None:
    for job in re.findall(r":([0-9]+)", dependency):
        if int(job) > MAX_JOB_ID:
            raise SpecError(field, f"job id {job} in {dependency!r} is past Slurm's largest ({MAX_JOB_ID}): sbatch "
                            "would wait on another job (it wraps the number); give the job id as squeue shows it")


def checked(slurm: dict, origins: dict | None = None) -> dict:
    """The merged `slurm` mapping's scheduler options, every value checked: {key: text}
    for the scalars (left out when unset) and "sbatch": ((key, value or None), ...).
    `origins`: dotted key -> where it came from (launcher.spec.layers.Origin), for the field
    an error names."""
    origins = origins or {}
    out: dict = {}
    for flag, key, pattern, what, _job_wide in SCALARS:
        value = slurm.get(key)
        if value is None or value == "":
            continue
        field = _field(key, origins, flag)
        if key == "mail_type":
            out[key] = _mail_type(value, field)
        elif key == "exclude" and isinstance(value, (list, tuple)):
            out[key] = ",".join(sbatch_values.check(pattern, v, field, what) for v in value)
            sbatch_values.check(pattern, out[key], field, what)
        else:
            if not isinstance(value, str):
                raise SpecError(field, f"{value!r} must be text: {what}")
            out[key] = sbatch_values.check(pattern, value, field, what)
            if key == "constraint":
                sbatch_values.features(value, field)
            if key == "dependency":
                _job_ids_fit(value, field)
    extra = slurm.get("sbatch") or {}
    if not isinstance(extra, dict):
        raise SpecError(_field("sbatch", origins), f"{extra!r} must be a mapping of sbatch option -> value, "
                        "e.g. {mem-per-gpu: 32G}")
    pairs = []
    for key, value in extra.items():
        if value is False:  # `spread-job: false`: left out
            continue
        origin = origins.get(f"slurm.sbatch.{key}", origins.get("slurm.sbatch"))
        # a key with a newline (any unprintable character) is named by its mapping: the error's
        # message quotes it, and in the field it would split the one error line in two
        shown = f".{key}" if str(key).isprintable() else ""
        field = origin.flag if origin is not None and origin.flag else \
            ("site." if origin is not None and origin.layer is Layer.SITE else "") + f"slurm.sbatch{shown}"
        pairs.append(check_sbatch(key, value, field))
    if pairs:
        out["sbatch"] = tuple(pairs)
    bad_nodes = slurm.get("exclude_bad_nodes")
    if bad_nodes is not None:
        if not isinstance(bad_nodes, bool):
            raise SpecError(_field("exclude_bad_nodes", origins, "--exclude-bad-nodes"),
                            f"{bad_nodes!r} must be true or false")
        out["exclude_bad_nodes"] = bad_nodes
    return out


def job_dependency(dependency: str | None, *, singleton: bool) -> str | None:
    """The job-wide `--dependency` of a job whose own is `dependency` (checked): with singleton
    added for a run's own job (`singleton`), which joins only with , (all of). The submit stage
    reads it here too, for the wait it adds on sbatch's command line (which replaces it)."""
    if singleton:
        if dependency and "?" in dependency:
            raise SpecError("--dependency", f"{dependency!r} joins with ? (any of): sf adds singleton, which "
                            "needs all of (,); join the dependencies with , instead")
        if not dependency or "singleton" not in dependency.split(","):
            dependency = f"{dependency},singleton" if dependency else "singleton"
    return dependency or None


def directives(options, *, first: bool, singleton: bool = False, series_constraint: str | None = None) -> list[str]:
    """The `#SBATCH` values of the scheduler options for one het component (`first`: the
    job-wide ones too). `options` is a launcher.plan.SlurmOptions; every value is checked
    again here, so nothing unchecked reaches a line whatever built the plan."""
    d: list[str] = []
    values = checked({key: getattr(options, key, None) for _flag, key, *_ in SCALARS}
                     | {"sbatch": dict(getattr(options, "sbatch", ()) or ())})
    if values.get("reservation"):
        d.append("--reservation=" + values["reservation"])
    if values.get("exclude"):
        d.append("--exclude=" + values["exclude"])
    if values.get("constraint") and series_constraint:
        d.append(f"--constraint=({series_constraint})&({values['constraint']})")
    elif values.get("constraint"):
        d.append("--constraint=" + values["constraint"])
    if first:
        dependency = job_dependency(values.get("dependency"), singleton=singleton)
        if dependency:
            d.append("--dependency=" + dependency)
        if values.get("mail_type"):
            d.append("--mail-type=" + values["mail_type"])
        if values.get("mail_user"):
            d.append("--mail-user=" + values["mail_user"])
    for key, value in values.get("sbatch", ()):
        if ALLOWED[key][2] and not first:
            continue
        d.append(f"--{key}" if value is None else f"--{key}={value}")
    return d
