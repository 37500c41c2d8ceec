"""The method catalog: which verl versions and methods sf runs, read from
configs/methods/verl/<version>/<method>.yaml. A version whose recipes are the same as
another's is named in configs/methods/verl/aliases.yaml instead of copying the folder.

Each recipe pins what makes the method itself (the advantage estimator, DAPO's dynamic
sampling and reward manager), carries overridable knob defaults, the Hydra config name,
the entry command and the launcher (ray or torchrun), its trainer family (`trainer`:
colocated, one-step-off or fully-async; the version's _trainers.yaml says which verl
resource pool each role lands in under each), and names what it needs from the runtime
(`needs`: capabilities such as flash_attn, checked in the job). This folder is the one place
that says what a method is: the compiled Plan carries what the job needs of it (trainer,
verl_pools), and nothing else lists methods, their entries or their pools
(tests/unit/test_facts.py). Only versions with a folder here exist: older runtimes are
refused with the reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from launcher.errors import SpecError
from launcher.spec import paths

FRAMEWORK = "verl"
# verl's trainer families: main_ppo's hybrid engine, and the disaggregated trainers whose
# rollout runs on a pool of its own
COLOCATED = "colocated"
TRAINERS = (COLOCATED, "one-step-off", "fully-async")
# verl's config of its SFT trainer: a method (and a run's plan.json) with it is supervised
# fine-tuning, whatever the method is called
SFT_CONFIG_NAME = "sft_trainer_engine"
TABLES = "_trainers.yaml"  # files starting with `_` in a version's folder are the catalog's own tables
REFUSED_VERSIONS = {
    "0.8": "verl 0.8's main_ppo_sync was removed upstream; the catalog keeps no old runtimes. Use 0.9.0 or 0.9.1",
}


@dataclass(frozen=True)
class Method:
    name: str  # "grpo"
    version: str  # "0.9.1"
    description: str
    config_name: str  # "ppo_trainer" | "sft_trainer_engine"
    launcher: str  # "ray" | "torchrun"
    entry: tuple[str, ...]
    pins: dict = field(default_factory=dict)  # Hydra key -> value, owned by the method
    defaults: dict = field(default_factory=dict)  # knob -> value, overridable
    critic: bool = False
    # what the method needs from the runtime beyond verl itself, by capability name
    # (launcher/injob/capabilities.py says how each is checked): the preflight checks them,
    # and a real job refuses before Ray starts when one is missing
    needs: tuple[str, ...] = ()
    rollout_n_min: int | None = None
    rollout_n_max: int | None = None
    # colocated: verl's main_ppo runs the rollout inside the actor's resource pool (hybrid
    # engine); one-step-off, fully-async: the method's trainer runs it on a pool of its own
    # (roles.rollout), sized by the top-level rollout.nnodes / rollout.n_gpus_per_node its main reads.
    trainer: str = COLOCATED
    # role -> the verl resource pool its workers land in under this trainer (_trainers.yaml)
    verl_pools: dict = field(default_factory=dict)
    # the method distils from a teacher on a pool of its own (distillation.* on, roles.teacher)
    teacher: bool = False
    # pinned key -> what to say besides "remove it" when a user sets it (the way out)
    pin_hints: dict = field(default_factory=dict)
    # what `sf new` writes for the method: `knobs` (commented YAML lines under knobs:) and
    # `overrides` (raw override lines, each quoted with its comment)
    new: dict = field(default_factory=dict)

    @property
    def estimator(self) -> str | None:
        """The pinned algorithm.adv_estimator (None for sft): one pin among the others."""
        return self.pins.get("algorithm.adv_estimator")

    @property
    def entry_module(self) -> str:
        """What the entry runs: the module after `-m`, else the first script (for messages)."""
        entry = list(self.entry)
        if "-m" in entry[:-1]:
            return entry[entry.index("-m") + 1]
        return next((part for part in entry if part.endswith(".py")), entry[-1])

    @property
    def separate_rollout(self) -> bool:
        return self.trainer != COLOCATED

    @property
    def sft(self) -> bool:
        return self.config_name == SFT_CONFIG_NAME


@lru_cache(maxsize=None)
def aliases() -> dict[str, str]:
    """VERSION -> the version whose recipes it shares (configs/methods/verl/aliases.yaml)."""
    path = paths.configs_dir() / "methods" / FRAMEWORK / "aliases.yaml"
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    return {str(k): str(v) for k, v in (data or {}).items()}


def methods_dir(version: str | None = None) -> Path:
    base = paths.configs_dir() / "methods" / FRAMEWORK
    return base / aliases().get(version, version) if version else base


@lru_cache(maxsize=None)
def versions() -> tuple[str, ...]:
    base = methods_dir()
    if not base.is_dir():
        return ()
    folders = {p.name for p in base.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
    return tuple(sorted(folders | {v for v, same in aliases().items() if same in folders}))


@lru_cache(maxsize=None)
def methods(version: str) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in methods_dir(version).glob("*.yaml") if not p.name.startswith("_")))


@lru_cache(maxsize=None)
def all_methods() -> tuple[str, ...]:
    """Every method of any version in the catalog, in the order `sf` lists them."""
    return tuple(sorted({m for v in versions() for m in methods(v)}))


@lru_cache(maxsize=None)
def config_names(version: str) -> tuple[str, ...]:
    """The verl config names the methods of `version` compose (ppo_trainer, sft_trainer_engine, ...)."""
    return tuple(sorted({get_method(version, m).config_name for m in methods(version)}))


@lru_cache(maxsize=None)
def trainer_pools(version: str) -> dict[str, dict[str, str]]:
    """trainer family -> {role: the verl resource pool its workers land in} (_trainers.yaml)."""
    data = yaml.safe_load((methods_dir(version) / TABLES).read_text()) or {}
    return {str(family): {str(r): str(p) for r, p in (pools or {}).items()} for family, pools in data.items()}


def named(version: str, test) -> list[str]:
    """`verl/NAME` of every method of `version` whose recipe passes `test` (a Method -> bool):
    messages name the methods that have a feature from their recipes, never from a list."""
    return [f"verl/{m}" for m in methods(version) if test(get_method(version, m))]


def check_version(version: str) -> str:
    version = str(version)
    if version in versions():
        return version
    for prefix, reason in REFUSED_VERSIONS.items():
        if version == prefix or version.startswith(prefix + "."):
            raise SpecError("framework_version", f"{version} is not in the catalog: {reason}")
    raise SpecError("framework_version", f"verl {version} is not in the catalog; available: {', '.join(versions())}")


def parse_method(text: str) -> str:
    """'verl/grpo' -> 'grpo'. Raises SpecError for another framework or an unknown method."""
    framework, _, name = str(text).partition("/")
    if not name:
        raise SpecError("method", f"{text!r} is not FRAMEWORK/METHOD; write e.g. method: verl/grpo "
                                  f"({', '.join(all_methods())})")
    if framework != FRAMEWORK:
        raise SpecError("method", f"framework {framework!r} is not supported; sf runs verl: method: verl/{name}")
    known = all_methods()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=2, cutoff=0.4)
        hint = f"did you mean verl/{close[0]}? " if close else ""
        raise SpecError("method", f"unknown method verl/{name}; {hint}methods: "
                                  f"{', '.join('verl/' + m for m in known)}")
    return name


@lru_cache(maxsize=None)
def get_method(version: str, name: str) -> Method:
    version = check_version(version)
    path = methods_dir(version) / f"{name}.yaml"
    if not path.is_file():
        raise SpecError("method", f"verl/{name} is not in the catalog for verl {version}; methods: "
                        f"{', '.join('verl/' + m for m in methods(version))}")
    data = yaml.safe_load(path.read_text()) or {}
    n = data.get("rollout_n") or {}
    trainer = str(data.get("trainer", COLOCATED))
    if trainer not in TRAINERS:
        raise SpecError("method", f"{path}: trainer {trainer!r} is not one of {', '.join(TRAINERS)}; fix the recipe")
    return Method(
        name=name,
        version=version,
        description=data.get("description", ""),
        config_name=data["config_name"],
        launcher=data.get("launcher", "ray"),
        entry=tuple(data["entry"]),
        pins=dict(data.get("pins") or {}),
        defaults=dict(data.get("defaults") or {}),
        critic=bool(data.get("critic", False)),
        needs=tuple(str(n) for n in data.get("needs") or ()),
        rollout_n_min=n.get("min"),
        rollout_n_max=n.get("max"),
        trainer=trainer,
        verl_pools=dict(trainer_pools(version).get(trainer) or {}),
        teacher=bool(data.get("teacher", False)),
        pin_hints={str(k): str(v) for k, v in (data.get("pin_hints") or {}).items()},
        new=dict(data.get("new") or {}),
    )

