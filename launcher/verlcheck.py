"""Check compiled overrides against the INSTALLED verl's own Hydra config.

verl is found with importlib.util.find_spec and never imported (its __init__ pulls torch);
only its YAML under verl/trainer/config/ is read, by Hydra's compose. A key that does not
exist fails with its name and the closest real key; mandatory values still `???` that
verl needs are reported too. Without verl or Hydra installed this says so (never a silent
pass).
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import os
import pickle
import warnings
from functools import lru_cache

from launcher.errors import SpecError
from launcher.verlfields import dataclass_fields, field_annotations
from launcher.verlinstall import DERIVED_FROM, INSTALL_HINT, config_dirs, installed_verl_version, verl_config_dir
from launcher.verloverrides import grammar_errors, parse_overrides, split_override

# `???` values that matter, per config, and when they matter (key -> override that makes it matter).
_MANDATORY = {
    "ppo_trainer": {
        "actor_rollout_ref.rollout.name": None,
        "reward.reward_model.rollout.name": "reward.reward_model.enable",
    },
}


def _missing_tools(version: str) -> SpecError | None:
    hint = INSTALL_HINT.format(version=version)
    if importlib.util.find_spec("hydra") is None or importlib.util.find_spec("omegaconf") is None:
        return SpecError("verl-config", f"hydra-core/omegaconf are not installed, so sf cannot check the overrides "
                         f"against verl's config: {hint}")
    if verl_config_dir() is None:
        return SpecError("verl-config", "verl is not installed, so sf cannot check the overrides against its config: "
                                        f"{hint}")
    return None


def _compose(config_name: str, overrides: tuple[str, ...]):
    from hydra import compose, initialize_config_dir  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    primary, *rest = config_dirs(config_name)
    search = [f"hydra.searchpath=[{','.join('file://' + d for d in rest)}]"] if rest else []
    with warnings.catch_warnings():
        # the experimental YAML's own searchpath (relative, or a package that imports torch)
        # is not available here, and Hydra warns about it: the absolute path replaces it
        warnings.filterwarnings("ignore", message=r".*hydra\.searchpath.*is not available")
        with initialize_config_dir(config_dir=primary, version_base=None):
            return compose(config_name=config_name, overrides=[*search, *overrides])


@lru_cache(maxsize=None)
def base_config(config_name: str):
    return _compose(config_name, ())


def _compose_fast(config_name: str, overrides: tuple[str, ...]):
    """(config, base): Hydra's compose of `overrides`, reusing the composed base config: the overrides are
    parsed by Hydra's own parser and applied by Hydra's own code (as compose does after the
    defaults list). An override of a config group (model_engine=megatron) changes the
    defaults list itself, so that case, or a Hydra without these internals, composes afresh."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl  # lazy: Hydra/OmegaConf import cost (~0.3 s)

        # lazy: Hydra/OmegaConf import cost (~0.3 s)
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:  # pragma: no cover
        return _compose(config_name, overrides), base_config(config_name)
    apply = getattr(ConfigLoaderImpl, "_apply_overrides_to_config", None)
    parsed = parse_overrides(overrides, OverridesParser)
    groups = _groups(config_name)
    if apply is None or any(o.package is not None or o.key_or_group in groups or "/" in o.key_or_group
                            or o.is_sweep_override() for o in parsed):
        return _compose(config_name, overrides), base_config(config_name)
    global _BASE_USED
    if config_name not in _BASE_USED:
        # The first compose of this config in the process applies the overrides to the base
        # itself (no copy: a dry run composes once), keeping the base values of the keys they
        # touch; a later one composes the base again once and works on copies of it.
        _BASE_USED = _BASE_USED | {config_name}
        cfg = base_config(config_name)
        base_config.cache_clear()
        base = BaseSnapshot.of(cfg, [o.key_or_group for o in parsed],
                               [o.key_or_group for o in parsed if o.is_add() or o.is_force_add()])
    else:
        base = base_config(config_name)
        cfg = _copy_of(config_name, base)
    try:
        apply(parsed, cfg)
    except TypeError:  # another Hydra's private signature: compose the documented way
        return _compose(config_name, overrides), base_config(config_name)
    return cfg, base


_BASE_USED: frozenset = frozenset()
_BASE_PICKLES: dict = {}  # config name -> (the base, its pickle)


def _copy_of(config_name: str, base):
    """A copy of the composed base to apply overrides to: unpickled from the base's pickle,
    made once per base (9 ms a copy against 26 ms for copy.deepcopy of verl's ppo_trainer,
    which a process that checks many override lists, such as the unit tests, did hundreds of
    times). A base composed again (base_config.cache_clear) gets its own pickle."""
    held = _BASE_PICKLES.get(config_name)
    if held is None or held[0] is not base:
        try:
            held = (base, pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL))
        except (pickle.PicklingError, TypeError, AttributeError):
            return copy.deepcopy(base)  # a value OmegaConf cannot pickle: copy it the slow way
        _BASE_PICKLES[config_name] = held
    return pickle.loads(held[1])

class BaseSnapshot:
    """verl's base values of the keys an override list touches (and of their parents'
    `_target_`), taken before the overrides were applied in place; any other key's base value
    is its composed value (the overrides did not touch it). Plain values: it pickles."""

    def __init__(self, values: dict, absent: set, present: set | None = None):
        self.values, self.absent, self.present = values, absent, present or set()

    @classmethod
    def of(cls, cfg, keys, added=()) -> "BaseSnapshot":
        """`added`: the keys of `+`/`++` overrides, whose parents' presence is kept too (see existed)."""
        values, absent, present = {}, set(), set()
        for key in keys:
            for k in (key, f"{key.rpartition('.')[0]}._target_" if "." in key else None):
                if k is None or k in values or k in absent:
                    continue
                value = Effective._select(cfg, k, _ABSENT)
                if value is _ABSENT:
                    absent.add(k)
                else:
                    values[k] = value
        for key in added:
            parts = key.split(".")
            for i in range(1, len(parts)):
                k = ".".join(parts[:i])
                if k not in present and k not in absent:
                    (present if _exists(cfg, k) else absent).add(k)
        return cls(values, absent, present)

    def existed(self, cfg, key: str) -> bool:
        """Whether `key` was in the config before the overrides (a `???` value counts as absent)."""
        if key in self.absent:
            return False
        if key in self.values or key in self.present:
            return True
        if any(key.startswith(k + ".") for k in self.absent):
            return False
        return _exists(cfg, key)

    def select(self, cfg, key: str, default):
        if key in self.absent:
            return default
        if key in self.values:
            return self.values[key]
        for k, value in self.values.items():  # below a key that was overridden as a whole
            if key.startswith(k + "."):
                for part in key[len(k) + 1:].split("."):
                    if not isinstance(value, dict) or part not in value:
                        return default
                    value = value[part]
                return value
        if any(key.startswith(k + ".") for k in self.absent):
            return default
        return Effective._select(cfg, key, default)


@lru_cache(maxsize=64)
def _composed(config_name: str, overrides: tuple[str, ...]):
    """(config, None) or (None, the exception); one compose per distinct override list."""
    from hydra.errors import HydraException  # lazy: Hydra/OmegaConf import cost (~0.3 s)
    from omegaconf.errors import OmegaConfBaseException  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    try:
        return _compose_fast(config_name, overrides), None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        return (None, None), exc


_ABSENT = object()


def _exists(cfg, key: str) -> bool:
    """Whether `key` is in `cfg` (??? included; an interpolation that does not resolve included)."""
    from omegaconf import OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    try:
        return OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False) is not _ABSENT
    except Exception:
        return True


class Effective:
    """The composed config as the rules read it: plain Python values, `???` as absent."""

    def __init__(self, cfg, base):
        self.cfg, self.base_cfg = cfg, base

    @staticmethod
    def _select(cfg, key: str, default):
        from omegaconf import OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)

        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=True)
        except Exception:  # ??? (MissingMandatoryValue) or an interpolation that does not resolve
            return default
        if value is _ABSENT:
            return default
        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
        return value

    def get(self, key: str, default=None):
        return self._select(self.cfg, key, default)

    def unresolved(self, key: str) -> str | None:
        """Why verl could not read `key`: an interpolation in it that does not resolve (OmegaConf's
        first line); None when it reads, is absent or is ???."""
        from omegaconf import OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)
        from omegaconf.errors import InterpolationResolutionError  # lazy: as above

        try:
            value = OmegaConf.select(self.cfg, key, throw_on_missing=False)
            if OmegaConf.is_config(value):
                OmegaConf.to_container(value, resolve=True)
        except InterpolationResolutionError as exc:
            return str(exc).splitlines()[0]
        except Exception:  # another failure is not an interpolation's: the rules and the type check say it
            return None
        return None

    def base(self, key: str, default=None):
        if isinstance(self.base_cfg, BaseSnapshot):
            return self.base_cfg.select(self.cfg, key, default)
        return self._select(self.base_cfg, key, default)


def effective_config(config_name: str, overrides) -> tuple[Effective | None, str | None]:
    """The overrides composed with the installed verl's `config_name`: (Effective, None); or
    (None, why) when verl's config is not on this machine (said once, as a warning); or
    (None, None) when they do not compose (check_overrides reports why)."""
    if _missing_tools("0.9.1") is not None:
        return None, ("verl's Hydra config is not installed on this machine, so the rules judged the override "
                      "list, not the composed config (dict-valued overrides are judged by their keys only); "
                      + INSTALL_HINT.format(version="0.9.1"))
    (cfg, base), _exc = _composed(config_name, tuple(overrides))
    if cfg is None:
        return None, None
    return Effective(cfg, base), None


@lru_cache(maxsize=None)
def base_keys(config_name: str) -> frozenset[str]:
    from omegaconf import DictConfig, ListConfig, OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    cfg = base_config(config_name)
    keys: set[str] = set()

    def walk(node, prefix: str) -> None:
        if isinstance(node, DictConfig):
            for k in node.keys():
                dotted = f"{prefix}.{k}" if prefix else str(k)
                keys.add(dotted)
                try:
                    child = node._get_node(k)
                except Exception:
                    continue
                if isinstance(child, (DictConfig, ListConfig)) and not OmegaConf.is_missing(node, k):
                    walk(child, dotted)

    walk(cfg, "")
    groups = _groups(config_name)
    return frozenset(keys | groups)


@lru_cache(maxsize=None)
def _groups(config_name: str) -> frozenset[str]:
    """Config groups that take `group=option` overrides (model_engine, engine, ...)."""
    root = verl_config_dir()
    out = set()
    for name in os.listdir(root):
        if os.path.isdir(os.path.join(root, name)) and not name.startswith("_"):
            out.add(name)
    return frozenset(out)


def closest_key(key: str, config_name: str) -> str | None:
    keys = base_keys(config_name)
    # Prefer keys sharing the parent; then any key; compare on the full dotted path.
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    siblings = [k for k in keys if k.startswith(parent + ".")] if parent else []
    leaf = key.rsplit(".", 1)[-1]
    nested = sorted((k for k in siblings if k.endswith("." + leaf)), key=len)
    if nested:
        return nested[0]  # actor.loss_mode -> actor.policy_loss.loss_mode
    for pool, cutoff in ((siblings, 0.6), (list(keys), 0.6), (list(keys), 0.4)):
        match = difflib.get_close_matches(key, pool, n=1, cutoff=cutoff)
        if match:
            return match[0]
    same_leaf = sorted(k for k in keys if k.rsplit(".", 1)[-1] == leaf)
    return same_leaf[0] if same_leaf else None


MAX_SUGGESTIONS = 20


def _bad_keys(config_name: str, overrides: tuple[str, ...]) -> list[SpecError]:
    keys = base_keys(config_name)
    errors = []
    for ov in overrides:
        prefix, key, _ = split_override(ov)
        if "+" in prefix:
            if key in keys and "+" == prefix:
                errors.append(SpecError(ov.split("=")[0], f"{key} already exists in verl's {config_name} config; drop "
                                                          "the '+'"))
            continue
        if key in keys:
            continue
        # the closest key is a fuzzy search of verl's keys: for the first few only (bounded work
        # on the login node whatever the number of overrides)
        close = closest_key(key, config_name) if len(errors) < MAX_SUGGESTIONS else None
        errors.append(SpecError(key, f"not a key of verl {installed_verl_version() or ''}'s {config_name} config"
                                + (f"; closest real key: {close}" if close else "")))
    return errors


# The config nodes verl 0.9.1's RL trainers build as dataclasses, whole (omega_conf_to_dataclass ->
# hydra.utils.instantiate(node, _convert_="partial"), recursive: the `_target_` nodes inside are
# built too), and when. Other `_target_` nodes are read as dicts (reward, algorithm,
# global_profiler: verl's own YAML there holds keys that are no fields), so a key added there
# is verl's business, not a crash.
_BUILT_NODES = {
    "actor_rollout_ref.model": None,  # engine_workers, agent_loop, the rollout servers
    "actor_rollout_ref.actor": None,  # utils/config.py validate_config, engine_workers
    "actor_rollout_ref.rollout": None,  # engine_workers, rollout replicas, agent_loop
    "critic": lambda get, _config: get("critic.enable") if get("critic.enable") is not None
    else get("algorithm.adv_estimator") == "gae",  # trainer/ppo/utils.py need_critic
    "distillation": lambda get, _config: bool(get("distillation.enabled")),  # the teacher manager, engine_workers
    # the reference policy, when one is needed (trainer/ppo/utils.py need_reference_policy):
    # engine_workers.py:553 builds it after renaming its log_prob_* keys (_RENAMED_BEFORE_BUILD)
    "actor_rollout_ref.ref": lambda get, _config: bool(get("algorithm.use_kl_in_reward")
                                                       or get("actor_rollout_ref.actor.use_kl_loss")),
    # SkipManager.init (utils/skip/skip_manager.py:40) at the start of main_ppo's fit
    # (ray_trainer.py:1434, v1/trainer_base.py:421) and the fully async rollouter's
    # (fully_async_rollouter.py:747); the one-step-off trainer never builds it
    "skip": lambda _get, config: config != "one_step_off_ppo_trainer",
}
# Built nodes verl converts with omega_conf_to_dataclass(node, dataclass_type=...): OmegaConf's
# structured merge types every nested node by its field's annotation too (an unknown key
# anywhere below fails), so a node there without `_target_` is checked against the class its
# parent's field names (utils/config.py:54-64).
_STRUCTURED_NODES = ("skip",)
# Keys of a built node that verl pops (and renames to fields) before it builds the node: they
# are no fields, yet the node is built (engine_workers.py:545-551, the reference policy).
_RENAMED_BEFORE_BUILD = {
    "actor_rollout_ref.ref": frozenset({"log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu",
                                        "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"}),
}
# what the checks judge beyond verl's YAML; a change here makes verlcache compose again
CHECKS_REVISION = "added-key-not-a-field/3"
# keys hydra.utils.instantiate takes itself, not passed to the class
_INSTANTIATE_KEYS = frozenset({"_target_", "_recursive_", "_convert_", "_partial_", "_args_"})


def added_field_errors(config_name: str, overrides: tuple[str, ...], cfg, base) -> list[SpecError]:
    """Rule added-key-not-a-field: a `+`/`++` override adding a key under a config node verl
    builds as a dataclass (its `_target_`) that is no field of that dataclass. Hydra composes it,
    and verl then fails minutes into the job, after Ray started, with "unexpected keyword
    argument". The key is walked down to its deepest node that existed before the overrides; the
    next segment must be a field of that node's class (inherited ones and _target_ included). A
    key inside a free-form dict field (model.override_config.*, rollout.engine_kwargs.*) or under
    a node without `_target_` passes; a class sf cannot read from verl's source passes."""
    from omegaconf import DictConfig, OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    if config_name != "ppo_trainer" and DERIVED_FROM.get(config_name) != "ppo_trainer":
        return []
    added = [(text.split("=")[0], key) for text in overrides
             for prefix, key, _ in [split_override(text)] if "+" in prefix]
    if not added:
        return []

    def existed(key: str) -> bool:
        return base.existed(cfg, key) if isinstance(base, BaseSnapshot) else _exists(base, key)

    def get(key: str):
        return Effective._select(cfg, key, None)

    errors = []
    for written, key in added:
        parts = key.split(".")
        if len(parts) < 2 or existed(key):
            continue
        depth = max((i for i in range(1, len(parts)) if existed(".".join(parts[:i]))), default=0)
        path, field = ".".join(parts[:depth]), parts[depth]
        roots = [r for r in _BUILT_NODES if path == r or path.startswith(r + ".")]
        if not path or not roots or not all(_BUILT_NODES[r] is None or _BUILT_NODES[r](get, config_name)
                                            for r in roots):
            continue
        try:
            node = OmegaConf.select(cfg, path, throw_on_missing=False)
            target = node.get("_target_") if isinstance(node, DictConfig) else None
            if target is None and isinstance(node, DictConfig):
                target = _structured_target(cfg, path)
        except Exception:
            continue
        fields = dataclass_fields(target) if isinstance(target, str) else None
        if fields is None or field in fields or field in _INSTANTIATE_KEYS:
            continue
        ours = {k.split(".")[depth] for _, k in added if k.startswith(path + ".") and not existed(
            ".".join(k.split(".")[:depth + 1]))}
        if set(node.keys()) - fields - _INSTANTIATE_KEYS - ours - _RENAMED_BEFORE_BUILD.get(path, frozenset()):
            continue  # verl's own YAML there holds keys that are no fields: verl does not build it as it is
        cls = target.rpartition(".")[2]
        shown = sorted(f for f in fields if f != "_target_")
        listed = ", ".join(shown[:12]) + (f", ... ({len(shown)} in all)" if len(shown) > 12 else "")
        close = difflib.get_close_matches(field, shown, n=1, cutoff=0.6)
        errors.append(SpecError(written, f"verl {installed_verl_version() or '0.9.1'} builds {path} as {cls}, which "
                                         f"has no field '{field}' (fields: {listed}); verl would fail with "
                                         f"\"unexpected keyword argument\" when it builds it. Drop the override"
                                + (f" (closest field: {path}.{close[0]})" if close else "")))
    return errors


def _structured_target(cfg, path: str) -> str | None:
    """The class a node below a _STRUCTURED_NODES root is built as: the root's `_target_`, then
    each segment's field annotation (a plain class name, looked up beside its parent's class);
    None for anything else (a dict, a union, a generic)."""
    from omegaconf import OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    root = next((r for r in _STRUCTURED_NODES if path.startswith(r + ".")), None)
    if root is None:
        return None
    target = OmegaConf.select(cfg, root + "._target_", throw_on_missing=False)
    for segment in path[len(root) + 1:].split("."):
        annotation = (field_annotations(target) or {}).get(segment) if isinstance(target, str) else None
        if not annotation or not annotation.isidentifier():
            return None
        target = target.rpartition(".")[0] + "." + annotation
    return target


def check_overrides(config_name: str, overrides, version: str | None = None) -> list[SpecError]:
    """Compose `overrides` against the installed verl's `config_name`; [] when they compose."""
    overrides = tuple(overrides)
    version = version or "0.9.1"
    missing = _missing_tools(version)
    if missing:
        return [missing]
    errors: list[SpecError] = []
    (cfg, _base), exc = _composed(config_name, overrides)
    if cfg is None:
        errors = grammar_errors(overrides) or _bad_keys(config_name, overrides)
        if not errors:
            cause = f" ({exc.__cause__})" if exc.__cause__ else ""
            # Hydra's messages run over lines (a sweep's "Ambiguous value ... 1. To use it as a list"): one line
            said = " ".join(f"{exc}{cause}".split())
            errors = [SpecError("overrides", f"verl's {config_name} config rejects the overrides: {said}")]
        return errors

    errors += added_field_errors(config_name, overrides, cfg, _base)
    set_keys = {split_override(o)[1]: split_override(o)[2] for o in overrides}
    for key, condition in _MANDATORY.get(config_name, {}).items():
        if _is_missing(cfg, key) and (condition is None or str(set_keys.get(condition, "")).lower() == "true"):
            errors.append(SpecError(key, f"verl needs a value (it is ??? in {config_name}); set it, e.g. {key}=vllm"))
    # Composed against the installed verl even when the spec names another version: the
    # caller warns about the difference (version_note).
    return errors


def _is_missing(cfg, key: str) -> bool:
    """Whether `key` is ??? in the composed config: asks the two mandatory keys directly
    (OmegaConf.missing_keys walks the whole config: most of a compose's cost on the login node)."""
    from omegaconf import OmegaConf  # lazy: Hydra/OmegaConf import cost (~0.3 s)

    parent, _, leaf = key.rpartition(".")
    try:
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return node is not None and OmegaConf.is_missing(node, leaf)
    except Exception:  # pragma: no cover (an interpolation that cannot resolve: not missing)
        return False


def version_note(version: str) -> str | None:
    """A warning when the installed verl differs from the spec's framework_version."""
    installed = installed_verl_version()
    if installed and installed != version:
        return f"overrides were checked against the installed verl {installed}, not {version}"
    return None
