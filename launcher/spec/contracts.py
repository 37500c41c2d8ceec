"""The site file and the runtime registry as checked contracts: each against its JSON Schema
(configs/schema/site.schema.json, runtimes.schema.json; `sf schema --site`, `--registry`)
and the few rules a schema cannot say (a Ray port range wide enough for many nodes' ports,
paths absolute once ~ and $VAR are expanded, a default series that is one of the series, a
key YAML read as a number). Every problem is one SpecError: the field, the file and line,
what is wrong and the fix; an unknown key comes with the closest valid ones.

A valid file (the common case) is judged by launcher.spec.schema_fast alone, without
importing jsonschema; a file with a problem is explained by jsonschema, and read once more
to find the lines. config.yaml's explanations (launcher.spec.experiment) come from here too.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import yaml

from launcher.errors import SpecError, SpecErrors
from launcher.spec import paths
from launcher.spec.files import parse_yaml_file, refuse_duplicate_keys
from launcher.spec.schema_fast import surely_valid

SITE_SCHEMA = "site.schema.json"
REGISTRY_SCHEMA = "runtimes.schema.json"
# The fewest ports a site's Ray range may hold (launcher/injob/ports.py JOB_BLOCK: room for
# many nodes' 12-port spans beside what other users hold; spec cannot import injob, so
# tests/unit/test_site_schema.py holds the two equal).
PORT_BLOCK = 1024
# Site keys that name paths: absolute after ~ and $VAR expansion (launcher.spec.site._expand)
PATH_PATTERN = "^[/~$]"  # the schemas' pattern of such a path, before expansion
SITE_PATHS = (("runs_dir",), ("runtime_registry",), ("ray", "temp_root"), ("dataset_roots",), ("templates_dir",))


@lru_cache(maxsize=None)
def schema(name: str) -> dict:
    return json.loads((paths.configs_dir() / "schema" / name).read_text())


@lru_cache(maxsize=None)
def _validator(name: str):
    import jsonschema  # noqa: PLC0415 - start-up cost (~0.04 s): only for a file that has a problem

    return jsonschema.Draft202012Validator(schema(name))


def explain(err, command: str = "sf schema") -> str:
    """One jsonschema error as `what; fix` (config.yaml's wording; `command` prints the schema)."""
    v = err.validator
    if v == "additionalProperties":
        allowed = sorted((err.schema.get("properties") or {}).keys())
        # the extra keys from the mapping itself: jsonschema's message quotes only text keys,
        # and YAML reads `1:`, `true:` or `null:` as keys of other types
        extra = [key for key in err.instance if key not in allowed] if isinstance(err.instance, dict) else []
        parts = []
        for key in extra:
            close = difflib.get_close_matches(str(key), allowed, n=3, cutoff=0.5)
            shown = repr(key) if isinstance(key, str) else _yaml_text(key)
            parts.append(f"unknown key {shown}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        where = "; allowed: " + ", ".join(allowed) if len(allowed) <= 12 else f"; see `{command}` for the allowed keys"
        if list(err.absolute_path) == ["knobs"]:
            where += "; or pass a raw Hydra key in overrides: [\"a.b.c=VALUE\"]"
        return "; ".join(parts) + where
    if v == "required":
        return f"{err.message}; add it (see `{command}`)"
    if v == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        if err.instance is None:  # `key:` with nothing after it is YAML's null
            return f"is empty (null), expected {want}; give it a value or remove the key"
        if want == "string" and isinstance(err.instance, (int, float)) and not isinstance(err.instance, bool):
            return f"{err.instance!r} has the wrong type (a number, expected a string); quote it: \"{err.instance}\""
        return f"{err.instance!r} has the wrong type: expected {want}; write a value of that type (see `{command}`)"
    if v == "enum":
        allowed = ", ".join(str(c) for c in err.validator_value if c is not None)
        return f"{err.instance!r} is not one of {allowed}; use one of these"
    if v == "pattern":
        desc = err.schema.get("description", "")
        return (f"{err.instance!r} has the wrong form (expected {err.validator_value})" + (f": {desc}" if desc else "")
                + "; write it in that form")
    if v in ("minimum", "minItems", "minLength", "maxItems", "maximum"):
        return f"{err.message}; fix the value"
    if v == "oneOf":
        return f"{err.instance!r} must be a file path or a list of file paths"
    return err.message


def _yaml_text(value) -> str:
    """A key YAML read as another type than text, as it was written: 1, true, null."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)  # a date


# ----------------------------------------------------------------------------- files


def _field(root: str, parts) -> str:
    out = root
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _typed_list(value) -> str:
    return f"[{value}]"


def _file_explain(err, command: str) -> str:
    """explain(), with the type errors a hand-written YAML file makes said in its terms."""
    want, inst = err.validator_value, err.instance
    if err.validator == "type" and inst is not None:
        kinds = want if isinstance(want, list) else [want]
        if "array" in kinds and "object" not in kinds and not isinstance(inst, dict):
            items = err.schema.get("items") or {}
            if items.get("type") == "string" and isinstance(inst, str):
                return f"{inst!r} is a single value, not a list; write a list: {_typed_list(inst)}"
            return f"{inst!r} is a single value, not a list; write a list (see `{command}`)"
        if "object" in kinds and "array" not in kinds and isinstance(inst, list):
            return f"{inst!r} is a list, not a mapping; write KEY: VALUE lines (see `{command}`)"
        if "boolean" in kinds and isinstance(inst, str):
            return f"{inst!r} is text, not true or false; write true or false, unquoted"
    if "propertyNames" in err.schema_path:  # a key of the wrong form (its pattern's error)
        return f"key {inst!r} has the wrong form: {_key_rule(err.schema)}; rename it"
    if (err.validator == "type" and "string" in (want if isinstance(want, list) else [want])
            and not {"integer", "number"} & set(want if isinstance(want, list) else [want])
            and isinstance(inst, (int, float)) and not isinstance(inst, bool)):
        if list(err.absolute_path)[-1:] == ["time"]:  # YAML 1.1 reads 4:00:00 in base 60
            return f"{inst!r} is read as a number, expected text; quote the time: \"4:00:00\", not 4:00:00 (14400)"
        return f"{inst!r} is read as a number, expected text; quote it: \"{inst}\""
    if err.validator == "pattern" and want == PATH_PATTERN:
        return f"{inst!r} is not an absolute path; write a path from / (~ and $VAR may start it)"
    return explain(err, command)


def _key_rule(name_schema: dict) -> str:
    pattern = name_schema.get("pattern", "")
    if pattern == r"^[A-Za-z_][A-Za-z0-9_]*$":
        return "an environment variable name is letters, digits and _, not starting with a digit"
    return f"expected {pattern}"


def _schema_problems(data, name: str, command: str) -> list[tuple[list, str]]:
    """(path of the key to point at, message) for each schema error; unknown keys one each."""
    out = []
    for err in sorted(_validator(name).iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        where = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = sorted((err.schema.get("properties") or {}).keys())
            hint = ("allowed: " + ", ".join(allowed) if len(allowed) <= 12
                    else f"see `{command}` for the allowed keys")
            for key in err.instance:
                if key in allowed or not isinstance(key, str):
                    continue
                close = difflib.get_close_matches(key, allowed, n=3, cutoff=0.5)
                out.append((where + [key], f"unknown key {key!r}"
                            + (f" (did you mean {', '.join(close)}?)" if close else "") + f"; {hint}"))
            continue
        if "propertyNames" in err.schema_path:
            out.append((where + [err.instance], _file_explain(err, command)))
            continue
        if err.validator == "required" and isinstance(err.instance, dict):
            missing = re.findall(r"'([^']+)' is a required", err.message)
            if any(difflib.get_close_matches(m, [k for k in err.instance if isinstance(k, str)], n=1, cutoff=0.8)
                   for m in missing):
                continue  # a misspelling of it: its unknown-key line says so
        out.append((where, _file_explain(err, command)))
    return out


def _number_keys(data, where: list) -> list[tuple[list, str]]:
    """Keys YAML read as something else than text (`0.10:` is the number 0.1, `yes:` true)."""
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                kind = {bool: "true/false", int: "number", float: "number"}.get(type(key), type(key).__name__)
                out.append((where + [key], f"key {key!r} is read as a {kind}, not text; quote it as written "
                            "(\"0.10\": unquoted, 0.10 is the number 0.1)"))
            else:
                out += _number_keys(value, where + [key])
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _number_keys(value, where + [i])
    return out


# Environment names sf's batch script sets or reads for itself (templates/train.sbatch.j2: its
# SF_* variables, Slurm's SLURM_* and the client variables of the srun steps it starts, the
# supervisor's PYTHONSAFEPATH and verl's file logger path): never from a site's or a registry's env
SF_ENV_PREFIXES = ("SF_", "SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
SF_ENV_NAMES = ("PYTHONSAFEPATH", "VERL_FILE_LOGGER_PATH")


def sf_owned_env(name) -> str | None:
    """Why an `env:` entry may not set `name`, or None."""
    if isinstance(name, str) and (name.startswith(SF_ENV_PREFIXES) or name in SF_ENV_NAMES):
        return (f"{name} is a variable sf's batch script sets or reads itself (SF_*, SLURM_*, SBATCH_*, SRUN_*, "
                f"SALLOC_*, {', '.join(SF_ENV_NAMES)}); remove it from env (sf's own settings are in the site "
                "file's and the spec's slurm: sections)")
    return None


def _env_rules(env, where: list) -> list[tuple[list, str]]:
    return [(where + [name], why) for name in (env if isinstance(env, dict) else {}) if (why := sf_owned_env(name))]


def _registry_rules(data: dict) -> list[tuple[list, str]]:
    """What runtimes.schema.json cannot say: no entry's env sets sf's own variables."""
    out = []
    for framework, versions in (data.items() if isinstance(data, dict) else ()):
        for version, entry in (versions.items() if isinstance(versions, dict) else ()):
            if isinstance(entry, dict):
                out += _env_rules(entry.get("env"), [framework, version, "env"])
    return out


def _expand(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value))


def _site_rules(data: dict) -> list[tuple[list, str]]:
    """What site.schema.json cannot say; `data` already has the schema's shape."""
    out = _env_rules(data.get("env"), ["env"])
    out += _env_rules(((data.get("ray") or {}).get("large_cluster") or {}).get("env"), ["ray", "large_cluster", "env"])
    for key_path in SITE_PATHS:
        node = data
        for part in key_path:
            node = node.get(part) if isinstance(node, dict) else None
        for i, value in enumerate(node if isinstance(node, list) else [node]):
            if not isinstance(value, str):
                continue
            expanded = _expand(value)
            if not os.path.isabs(expanded):
                unset = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
                why = f" (${', $'.join(unset)} not set)" if unset else ""
                out.append(([*key_path] + ([i] if isinstance(node, list) else []),
                            f"{value!r} is {expanded!r} once ~ and $VAR are expanded{why}, not an absolute path; "
                            "write a path from / (~ and $VAR may start it)"))
    ports = (data.get("ray") or {}).get("port_range")
    if isinstance(ports, list) and len(ports) == 2:
        lo, hi = ports
        if hi - lo + 1 < PORT_BLOCK:
            out.append((["ray", "port_range"], f"{ports!r} holds {max(hi - lo + 1, 0)} ports, fewer than the "
                        f"{PORT_BLOCK} sf needs (LOW must be below HIGH); widen it, e.g. [20000, 32767]"))
    series, default = data.get("series") or {}, data.get("default_series")
    if default is not None and default not in series:
        known = ", ".join(sorted(series)) or "none"
        out.append((["default_series"], f"{default!r} is not one of the site's series ({known}); "
                    "name one of them or add it under series:"))
    address = (data.get("ray") or {}).get("node_address") or {}
    if address.get("method") == "interface" and not address.get("interface"):
        out.append((["ray", "node_address"], "method interface names no interface; "
                    "add interface: (e.g. ib0) or use method: hostname"))
    return out


def _same_key(key, part) -> bool:
    if isinstance(part, str):
        return key.value == part and key.tag == "tag:yaml.org,2002:str"
    try:  # a key YAML read as a number or true/false: compare as read
        return yaml.safe_load(key.value) == part and type(yaml.safe_load(key.value)) is type(part)
    except yaml.YAMLError:
        return False


def _line(node, parts: list) -> int | None:
    """The line (1-based) of the deepest key of `parts` in a composed YAML document."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and _same_key(key, part):
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _site_error(where: list, at: str, message: str) -> SpecError:
    return SpecError(_field("site", where), f"{at}: {message}")


def _registry_error(where: list, at: str, message: str) -> SpecError:
    """A registry problem as the runtime's own errors name it (launcher.runtime): the
    field is runtime.<the entry's key>, the message names the framework and version."""
    field = "runtime" + (f".{where[2]}" if len(where) > 2 else "")
    label = ".".join(str(p) for p in where)
    what, sep, fix = message.rpartition("; ")
    message = f"{what}; fix the runtime registry: {fix}" if sep else f"{message}; fix the runtime registry"
    return SpecError(field, f"{at}: {label + ': ' if label else ''}{message}")


def _errors(problems, path: str, source: Path | None, make) -> list[SpecError]:
    document = None
    if source is not None:
        try:
            document = yaml.compose(source.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except (OSError, ValueError, yaml.YAMLError):
            document = None
    out = []
    for where, message in problems:
        line = _line(document, where) if document is not None else None
        at = f"{path}:{line}" if line else path
        parent = where[:-1] if message.startswith(("unknown key", "key ")) else where
        out.append(make(parent, at, message))
    return out


def _check(data, name: str, path: str, source: Path | None, rules, command: str, make) -> list[SpecError]:
    problems = _number_keys(data, [])
    if not problems and not surely_valid(data, schema(name)):
        problems = _schema_problems(data, name, command)
    if not problems and rules is not None:
        problems = rules(data)
    return _errors(problems, path, source, make) if problems else []


def check_site(data: dict, path: str, source: Path | None = None) -> None:
    """The site file's content against site.schema.json and the site's rules: SpecError (one
    problem) or SpecErrors, each naming `path` and, when `source` is the file, the line."""
    errors = _check(data, SITE_SCHEMA, path, source, _site_rules, "sf schema --site", _site_error)
    if errors:
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)


def check_registry(data, path: str, source: Path | None = None, every: bool = False) -> None:
    """A runtime registry's content against runtimes.schema.json: one SpecError, as the
    runtime's other errors (its first problem, with how many more `sf doctor` lists), or with
    `every` SpecErrors of them all."""
    errors = _check(data, REGISTRY_SCHEMA, path, source, _registry_rules, "sf schema --registry", _registry_error)
    if errors and every and len(errors) > 1:
        raise SpecErrors(errors)
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more in the file: `sf doctor` lists them)" if len(errors) > 1 else ""
        raise SpecError(first.field, first.message + more)


class _RegistryLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep)


def load_registry(path: Path, every: bool = False) -> dict:
    """The runtime registry at `path`, checked (FileNotFoundError when it is not there; every
    other failure a SpecError with the path and, for a bad entry, the line; `every`: see
    check_registry)."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(str(path))
    data = parse_yaml_file(path, "runtime", loader=_RegistryLoader)
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SpecError("runtime", f"{path}: the runtime registry must be a mapping (verl: {{VERSION: ...}}); "
                        "fix the file (see `sf schema --registry`)")
    check_registry(data, str(path), path, every)
    return data
