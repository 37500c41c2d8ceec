"""Loading an experiment: layers merged into one spec, validated with the JSON Schema.

Layers, lowest first: configs/defaults.yaml < the site file (account, qos, time, requeues,
signal lead) < experiments/NAME/config.yaml < CLI flags. The MergedSpec keeps the merged
`values` and, for every dotted key, where it came from, typed (`origins`: a
launcher.spec.layers.Origin made here, where the value enters), so `sf validate` shows where
each value came from (`provenance`, the labels) and compile reads the layer, never a label.

This is the I/O edge of the compiler: it reads files, resolves relative paths and
datasets, and checks whether the experiment has its own main.py. compile_plan is pure.
"""

from __future__ import annotations

import copy
import difflib
import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from launcher.errors import SpecError, SpecErrors
from launcher.sbatch_values import KEYS as SCHEDULER_KEYS
from launcher.spec import paths
from launcher.spec.contracts import explain
from launcher.spec.files import blocked_path, expand_user, nul_errors, parse_yaml_file, refuse_duplicate_keys
from launcher.spec.input_files import abs_files, as_list, check_reward_function, data_files, model_path
from launcher.spec.layers import DEFAULTS, SITE, SWEEP, Layer, Origin, from_flag, overrides_label
from launcher.spec.schema_fast import surely_valid
from launcher.spec.site import Site

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CONFIG_FILE = "config.yaml"


@dataclass
class MergedSpec:
    name: str  # experiment name (the folder's name)
    exp_dir: str  # absolute path of the experiment folder
    values: dict  # merged values (schema shape, plus `profile` from --profile)
    origins: dict  # dotted key -> where it came from (launcher.spec.layers.Origin)
    override_sources: list = field(default_factory=list)  # the field an error names, per values["overrides"] item
    override_layers: list = field(default_factory=list)  # the Layer of each values["overrides"] item
    main_py: str | None = None  # absolute path of experiments/NAME/main.py when it exists
    dataset_dir: str | None = None  # resolved data.train.dataset folder
    # --model run:RUN: {"run", "target", "export_job"} (the export it waits for, when queued)
    model_from: dict | None = None
    chain_export: object = None  # launcher.submit.chain.ChainExport: RUN has no export, sf submit queues one first
    # the knobs of each layer, lowest first: [(Layer.DEFAULTS, {...}), (Layer.CONFIG, {...}),
    # (Layer.SET, {...}), (Layer.SWEEP, {...})] (launcher.compile.resolve resolves them by verl key)
    knob_layers: list = field(default_factory=list)

    @property
    def provenance(self) -> dict:
        """dotted key -> the label `sf validate` shows (defaults, site, config.yaml, --model,
        --set, sweep, ...), made from `origins`; `overrides`: the layers of the raw overrides."""
        out = {dotted: origin.spec_label for dotted, origin in self.origins.items()}
        if self.values.get("overrides") and self.override_layers:
            out["overrides"] = overrides_label(self.override_layers)
        return out

    def layer_of(self, dotted: str) -> Layer | None:
        """The layer a spec value came from (None: nothing set it)."""
        origin = self.origins.get(dotted)
        return origin.layer if origin is not None else None

    @property
    def method(self) -> str:
        return str(self.values.get("method", ""))

    @property
    def framework_version(self) -> str:
        return str(self.values.get("framework_version", ""))


# ----------------------------------------------------------------------------- schema


@lru_cache(maxsize=None)
def schema() -> dict:
    return json.loads((paths.configs_dir() / "schema" / "config.schema.json").read_text())


@lru_cache(maxsize=None)
def builtin_defaults() -> dict:
    path = paths.configs_dir() / "defaults.yaml"
    return yaml.safe_load(path.read_text()) or {} if path.is_file() else {}


def _path_str(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "config.yaml"


def schema_errors(data: dict) -> list[SpecError]:
    """Validate config.yaml's content; one SpecError per problem, naming the field and the fix."""
    sch = schema()
    if surely_valid(data, sch):  # the common case, without importing jsonschema (launcher.spec.schema_fast)
        return []
    import jsonschema  # lazy: jsonschema (~0.04 s of a dry run) only for a spec that may have a problem

    validator = jsonschema.Draft202012Validator(sch)
    errors: list[SpecError] = []
    for err in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        field_name = _path_str(err.absolute_path)
        errors.append(SpecError(field_name, explain(err)))  # launcher.spec.contracts: one wording for every file
    return errors


# ----------------------------------------------------------------------------- layers


def _deep_merge(base: dict, top: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def leaves(data: dict, prefix: str = ""):
    """(dotted key, value) of every leaf of a nested dict."""
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            yield from leaves(value, dotted)
        else:
            yield dotted, value


def _site_layer(site: Site) -> dict:
    slurm = {
        "account": site.account,
        "qos": site.qos,
        "time": site.time,
        "max_requeues": site.max_requeues,
        "signal_lead_s": site.signal_lead_s,
        "hang_timeout_s": site.hang_timeout_s,
        "first_step_timeout_s": site.first_step_timeout_s,
        "max_restarts_in_place": site.max_restarts_in_place,
    }
    # scheduler options as site defaults (launcher.compile.scheduler_options checks them when compiled)
    site_slurm = (site.raw or {}).get("slurm") or {}
    slurm.update({k: site_slurm.get(k) for k in SCHEDULER_KEYS})
    return {"slurm": {k: v for k, v in slurm.items() if v is not None}}


def find_experiment(name_or_dir: str, experiments_root: str = "experiments") -> tuple[str, Path]:
    """NAME -> experiments/NAME; a path to a folder holding config.yaml is taken as is."""
    candidate = expand_user(name_or_dir, "NAME")
    looks_like_path = os.sep in name_or_dir or name_or_dir.startswith(".")
    here = _may_hold_config(candidate)  # a folder here holds one (even a broken or unreadable one: say why)
    if looks_like_path or here and not os.path.isdir(Path(experiments_root) / name_or_dir):
        if not _is_config_file(candidate / CONFIG_FILE, name_or_dir):
            blocked_path(candidate / CONFIG_FILE, name_or_dir)  # a directory, a FIFO, a loop: say which
            raise SpecError(name_or_dir, f"no {CONFIG_FILE} in {candidate}; create one with `sf new NAME --method "
                                         "verl/grpo`")
        name = candidate.resolve().name
        if not NAME_RE.fullmatch(name):  # the folder's name names the job and its runs
            raise SpecError("NAME", f"the experiment folder's name {name!r} is not a valid experiment name (letters, "
                            "digits, _ . -; at most 64; starting with a letter or digit): rename the folder")
        return name, candidate.resolve()
    if not NAME_RE.fullmatch(name_or_dir):
        raise SpecError("NAME", f"{name_or_dir!r} is not a valid experiment name (letters, digits, _ . -; at most 64; "
                        "starting with a letter or digit)")
    exp = Path(experiments_root) / name_or_dir
    if not _is_config_file(exp / CONFIG_FILE, name_or_dir):
        blocked_path(exp / CONFIG_FILE, name_or_dir)  # a directory, a FIFO, a loop, experiments a file: say which
        raise SpecError(name_or_dir, f"no {exp / CONFIG_FILE}; create it with "
                        f"`sf new {name_or_dir} --method verl/grpo`")
    try:
        return name_or_dir, exp.resolve()
    except (OSError, RuntimeError) as exc:
        raise SpecError(name_or_dir, f"cannot resolve {exp}: {getattr(exc, 'strerror', None) or exc}") from None


def _may_hold_config(folder: Path) -> bool:
    """Whether `folder` has a config.yaml, or may have one the user is not allowed to see (a
    folder they cannot enter: its permissions are the error, not a missing file)."""
    try:
        os.lstat(folder / CONFIG_FILE)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _is_config_file(path: Path, field_name: str) -> bool:
    """Whether `path` is a regular file; a SpecError naming the folder the user cannot enter
    when a permission stands in the way (pathlib's is_file raises it: an error naming only the
    path, or, for NAME, a wrong "no experiments/NAME/config.yaml")."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except PermissionError:
        folder = next((p for p in reversed(path.parents) if not os.access(p, os.X_OK)), path.parent)
        folder = f"the current folder {os.getcwd()}" if str(folder) == "." else folder
        raise SpecError(field_name, f"cannot read {path}: you may not enter {folder} (permission denied); ask its "
                        "owner for access (chmod a+rx) or copy the experiment to a folder of yours") from None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # blocked_path says which
            return False
        raise  # a name too long: the CLI's os_error shortens it


class ConfigLoader(yaml.SafeLoader):
    """config.yaml's scalars as YAML 1.2 reads them, not PyYAML's YAML 1.1: `yes/no/on/off`
    stay strings (a knob types them), `1_000` and `0.5_5` stay strings (no '_' digit
    separators: `0.5_5` is IcePop's LOW_HIGH pair, not 0.55), `1e-6` is a float, `012` is
    twelve. Only true/false are booleans. A key given twice in one mapping (`method:` twice,
    two `knobs:` blocks) is an error with both lines, never a silent last-wins."""

    def construct_mapping(self, node, deep=False):
        refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep)


ConfigLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                                                            "tag:yaml.org,2002:float")]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                   list("tTfF"))
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))


def _yaml_float(loader, node) -> float:
    text = loader.construct_scalar(node).lower()
    return float(text.replace(".inf", "inf").replace(".nan", "nan"))


ConfigLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node)))
ConfigLoader.add_constructor("tag:yaml.org,2002:float", _yaml_float)


def read_config(path: Path) -> dict:
    data = parse_yaml_file(path, CONFIG_FILE, ConfigLoader)
    if data is None:
        raise SpecError(CONFIG_FILE, f"{path} is empty; it needs at least `method: verl/grpo`")
    if not isinstance(data, dict):
        raise SpecError(CONFIG_FILE, f"{path} must be a mapping of keys (method:, model:, ...), not a "
                                     f"{type(data).__name__}")
    return data


def _estimator_overrides(data: dict) -> list[tuple[str, str]]:
    """config.yaml's spellings of the advantage estimator (`algorithm: {adv_estimator: X}`,
    `algorithm.adv_estimator: X`, `knobs: {adv_estimator: X}`) are taken out of the file and
    passed on as the override they mean, labelled with the field, so the one estimator rule
    (launcher.compile.rules.pins.rule_estimator) refuses them with its message."""
    found = []
    algo = data.get("algorithm")
    if isinstance(algo, dict) and "adv_estimator" in algo:
        found.append(("algorithm.adv_estimator", algo.pop("adv_estimator")))
        if not algo:
            data.pop("algorithm")
    if "algorithm.adv_estimator" in data:
        found.append(("algorithm.adv_estimator", data.pop("algorithm.adv_estimator")))
    knobs = data.get("knobs")
    if isinstance(knobs, dict):
        for key in ("adv_estimator", "estimator"):
            if key in knobs:
                found.append((f"knobs.{key}", knobs.pop(key)))
    return [(field_name, f"algorithm.adv_estimator={value}") for field_name, value in found]


# ----------------------------------------------------------------------------- flags


def split_override(text: str) -> tuple[str, str, str]:
    """'+a.b=1' -> ('+', 'a.b', '1'). Raises ValueError when there is no '=' or no key."""
    if "=" not in text:
        raise ValueError("no '='")
    key, _, value = text.partition("=")
    key = key.strip()
    prefix = ""
    while key[:1] in ("+", "~"):
        prefix += key[0]
        key = key[1:]
    if not key or not re.fullmatch(r"^[A-Za-z_][A-Za-z0-9_.@/\-]*$", key):
        raise ValueError(f"bad key {key!r}")
    return prefix, key, value.strip()


def knob_names() -> tuple[str, ...]:
    """The knobs config.yaml and --set take: the schema's (generated from
    launcher.compile.knobs.KNOBS, which tests/unit/test_spec.py holds it to)."""
    return tuple(schema()["properties"]["knobs"]["properties"])


def close_knobs(name: str, n: int = 3) -> list[str]:
    return difflib.get_close_matches(name, knob_names(), n=n, cutoff=0.5)


def set_override_key(key: str) -> str:
    """The Hydra key a --set (or sweep point) KEY stands for: the estimator's short names
    (`adv_estimator`, `estimator`, with any +/~) are algorithm.adv_estimator."""
    return "algorithm.adv_estimator" if key.lstrip("+~") in ("adv_estimator", "estimator") else key


def set_field(key: str, flag: str = "--set") -> str:
    """The field that names a --set (flag "sweep": a sweep point's) KEY=VALUE item in
    errors and in the resolved map: `knobs.KEY` for a knob, else `FLAG KEY`."""
    return f"knobs.{key}" if key in knob_names() else f"{flag} {set_override_key(key)}"


def _parse_set(items, knobs: dict, overrides: list, sources: list, flag: str = "--set") -> list[SpecError]:
    """--set items (or a sweep point's, flag="sweep") into knobs and raw overrides, in order."""
    KNOBS = knob_names()  # the knob table's name where it is defined (compile.knobs)
    errors = []
    for item in items or ():
        if "=" not in item and item.strip().startswith("~") and len(item.strip()) > 1:  # Hydra's delete: ~a.b, ~a
            overrides.append(item.strip())
            sources.append(f"{flag} {item.strip()}")
            continue
        if "=" not in item:
            errors.append(SpecError(flag, f"{item!r} is not KEY=VALUE (e.g. --set rollout_n=8)"))
            continue
        key, _, value = item.partition("=")
        key = key.strip()
        if key in KNOBS:
            if key in knobs:
                errors.append(SpecError(f"{flag} {key}", f"given twice ({key}={knobs[key]} and {key}={value.strip()}); "
                                        "keep one"))
            knobs[key] = value.strip()
            continue
        if set_override_key(key) != key:
            key = set_override_key(key)
            item = f"{key}={value}"
        try:
            split_override(item)
        except ValueError:
            errors.append(SpecError(flag, f"{item!r}: {key.strip()!r} is not a knob or a Hydra key (letters, digits "
                                    "and _ . @ / -, starting with a letter or _, optionally after + ++ or ~); write "
                                    "KEY=VALUE, e.g. --set rollout_n=8 or --set trainer.total_epochs=2"))
            continue
        bare = key.lstrip("+~")
        if "." in bare or key[:1] in "+~" or bare in ("model_engine",) or value.strip().startswith("{"):
            overrides.append(item.strip())
            sources.append(f"{flag} {key}")
            continue
        close = close_knobs(key)
        errors.append(SpecError(f"{flag} {key}", "neither a knob nor a dotted Hydra key"
                                + (f"; did you mean {', '.join(close)}?" if close
                                   else "; see `sf schema` for the knobs")))
    return errors


def _flag_layer(flags: dict, cwd: Path) -> tuple[dict, dict]:
    """The CLI flags but --set as a layer: (values, {dotted key: Origin of the flag that set it})."""
    cli: dict = {}
    cli_prov: dict = {}
    if flags.get("model"):  # `--model run:RUN` arrives resolved (launcher.submit.chain.load_chained)
        cli["model"] = model_path(flags["model"], cwd, "--model")
        cli_prov["model"] = from_flag("--model")
    if flags.get("train_dataset"):
        cli.setdefault("data", {}).setdefault("train", {})["dataset"] = flags["train_dataset"]
        cli_prov["data.train.dataset"] = from_flag("--train-dataset")
    if flags.get("train_data"):
        cli.setdefault("data", {}).setdefault("train", {})["files"] = list(as_list(flags["train_data"]))
        cli_prov["data.train.files"] = from_flag("--train-data")
    if flags.get("validation_data"):
        cli.setdefault("data", {}).setdefault("validation", {})["files"] = abs_files(flags["validation_data"], cwd,
                                                                                          "--validation-data")
        cli_prov["data.validation.files"] = from_flag("--validation-data")
    if flags.get("profile"):
        cli["profile"] = flags["profile"]
        cli_prov["profile"] = from_flag("--profile")
    if flags.get("slurm"):  # --reservation, --mail-type, ..., --sbatch, --after's dependency (cli.options)
        cli["slurm"] = dict(flags["slurm"])
        # {dotted: the flag's name} (launcher.cli.options, launcher.submit.chain): the flag itself, typed here
        cli_prov.update({dotted: from_flag(name) for dotted, name in (flags.get("slurm_provenance") or {}).items()})
    return cli, cli_prov


def _config_paths(config: dict, exp_dir: Path, errors: list) -> dict:
    """config.yaml's relative paths made absolute against the experiment folder (compute
    nodes have another cwd); custom_reward_function (the product doc's name) read as
    reward.function, whose file is checked now (a problem is added to `errors`)."""
    for where, holder in (("", config), ("teacher.", config.get("teacher") or {}),
                          ("reward.", config.get("reward") or {})):
        if holder.get("model"):
            holder["model"] = model_path(holder["model"], exp_dir, f"{where}model")
    if "custom_reward_function" in config:
        alias = config.pop("custom_reward_function") or {}
        if ((config.get("reward") or {}).get("function")):
            raise SpecError("custom_reward_function", "set either custom_reward_function or reward.function, not both")
        config.setdefault("reward", {})["function"] = alias
    fn = (config.get("reward") or {}).get("function") or {}
    if fn.get("path"):
        fn["path"] = abs_files(fn["path"], exp_dir, "reward.function.path")
        problem = check_reward_function(str(fn["path"]), fn.get("name") or "compute_score")
        if problem:
            errors.append(problem)
    return config


def _refuse_nul(data, what: str) -> None:
    """A NUL byte in a flag or a config.yaml value: bash would cut the value there."""
    where = (lambda key: {"set": "--set", "point": "sweep"}.get(key, "--" + key.replace("_", "-"))) \
        if what == "flags" else (lambda key: key)
    nul = [e for key, value in data.items() if key != "slurm_provenance" for e in nul_errors(value, where(str(key)))]
    if nul:
        raise SpecErrors(nul)


def _set_layers(flags: dict, cli: dict, cli_prov: dict, errors: list):
    """--set and the sweep point (launcher.submit.sweep.point_flags, the layer above --set):
    (set knobs, point knobs, raw overrides, their fields, their layers); knobs merged into `cli`."""
    set_knobs: dict = {}
    point_knobs: dict = {}
    overrides: list = []
    sources: list = []
    errors += _parse_set(flags.get("set"), set_knobs, overrides, sources)
    from_set = len(overrides)
    errors += _parse_set(flags.get("point"), point_knobs, overrides, sources, flag="sweep")
    if errors:
        raise SpecErrors(errors)
    layers = [Layer.SET] * from_set + [Layer.SWEEP] * (len(overrides) - from_set)
    if set_knobs or point_knobs:
        cli["knobs"] = {**set_knobs, **point_knobs}
        cli_prov.update({f"knobs.{k}": from_flag("--set") for k in set_knobs})
        cli_prov.update({f"knobs.{k}": SWEEP for k in point_knobs})
    return set_knobs, point_knobs, overrides, sources, layers


def load_spec(name_or_dir: str, flags: dict | None, site: Site, experiments_root: str = "experiments") -> MergedSpec:
    flags = dict(flags or {})
    _refuse_nul(flags, "flags")
    name, exp_dir = find_experiment(name_or_dir, experiments_root)
    config = read_config(exp_dir / CONFIG_FILE)
    _refuse_nul(config, "config.yaml")
    estimator_overrides = _estimator_overrides(config)
    errors = schema_errors(config)
    if errors:
        raise SpecErrors(errors)

    cwd = Path.cwd()
    config = _config_paths(copy.deepcopy(config), exp_dir, errors)
    cli, cli_prov = _flag_layer(flags, cwd)
    set_knobs, point_knobs, set_overrides, set_sources, set_layers = _set_layers(flags, cli, cli_prov, errors)
    knob_layers = [(Layer.DEFAULTS, dict(builtin_defaults().get("knobs") or {})),
                   (Layer.CONFIG, dict(config.get("knobs") or {})), (Layer.SET, set_knobs), (Layer.SWEEP, point_knobs)]

    config_file = Origin(Layer.CONFIG, path=str(exp_dir / CONFIG_FILE))
    layers = [(DEFAULTS, builtin_defaults()), (Origin(Layer.SITE, path=site.path) if site.path else SITE,
                                               _site_layer(site)), (config_file, config)]
    values: dict = {}
    origins: dict = {}
    for origin, layer in layers:
        values = _deep_merge(values, {k: v for k, v in layer.items() if k != "overrides"})
        for dotted, _ in leaves({k: v for k, v in layer.items() if k != "overrides"}):
            origins[dotted] = origin
    values = _deep_merge(values, cli)
    for dotted, _ in leaves(cli):
        origins[dotted] = cli_prov.get(dotted, Origin(Layer.SET))  # a command-line value no flag names

    # Raw overrides: config.yaml's list, then --set's, in that order.
    config_overrides = list(config.get("overrides") or [])
    values["overrides"] = config_overrides + [o for _f, o in estimator_overrides] + set_overrides
    override_sources = ([f"overrides[{i}]" for i in range(len(config_overrides))]
                        + [f for f, _o in estimator_overrides] + set_sources)
    override_layers = [Layer.CONFIG] * (len(config_overrides) + len(estimator_overrides)) + set_layers

    dataset_dir = data_files(values, origins, site, exp_dir, cwd)
    main_py = exp_dir / "main.py"
    return MergedSpec(
        name=name,
        exp_dir=str(exp_dir),
        values=values,
        origins=origins,
        override_sources=override_sources,
        override_layers=override_layers,
        main_py=str(main_py) if main_py.is_file() else None,
        dataset_dir=dataset_dir,
        knob_layers=[(layer, knobs) for layer, knobs in knob_layers if knobs],
    )
