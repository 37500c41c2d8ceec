"""The rules of the verl runtime: the knob table, and one named check per rule.

Every rule is a function `rule_<name>(ctx)` over a compile context (launcher.compile.compiler.Ctx).
A rule reads the spec, the method and the overrides gathered so far, and either sets
overrides, adds warnings, or adds SpecErrors whose message says how to fix the problem.
compile.compile_plan runs the BUILD rules, then the JUDGES, and raises all errors of one pass together.

Pure: no I/O here (the catalog files are read by launcher.compile.catalog).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from launcher import verlcheck
from launcher.compile import catalog, resolve
from launcher.compile.slurm_time import time_seconds
from launcher.errors import SpecError
from launcher.spec.experiment import check_reward_function, close_knobs, split_override

# ----------------------------------------------------------------------------- values


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_HYDRA_NUMBERISH = re.compile(r"^[+-]?([\d_]+\.?[\d_]*|\.[\d_]+)([eE][+-]?[\d_]+)?$|^[+-]?(inf|nan)$", re.I)
BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


def parse_scalar(text: str) -> Any:
    """A `--set` / raw-override value as Hydra would see it (roughly): bool, int, float, null,
    a [list], or the string itself (quotes stripped). A number written with `_` (`1_000`,
    `0.5_5`) stays a string: sf never reads `_` as a digit separator (see coerce_knob)."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    low = t.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("null", "none", "~"):
        return None
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [parse_scalar(p) for p in inner.split(",")] if inner else []
    if not _NUMBER.fullmatch(t):
        return t
    try:
        return int(t)
    except ValueError:
        pass
    f = float(t)
    return f if math.isfinite(f) else t


def parse_value(text: str) -> Any:
    """A raw override's value: Hydra's own parser for dicts and lists (`{enable:false}`), so
    sf's rules see what verl will see; parse_scalar for everything else."""
    t = str(text).strip()
    if t[:1] in ("{", "["):
        parsed = _hydra_parse(t)
        if parsed is not _UNPARSED:
            return parsed
    return parse_scalar(t)


_UNPARSED = object()


@lru_cache(maxsize=None)
def _hydra_parser():
    try:
        # lazy: Hydra's parser imports in ~0.3 s, paid only for a dict/list value
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return None
    return OverridesParser.create()


def _hydra_parse(text: str) -> Any:
    parser = _hydra_parser()
    if parser is None:
        return _UNPARSED
    try:
        return parser.parse_override(f"k={text}").value()
    except Exception:
        return _UNPARSED


def flatten(key: str, value: Any):
    """('a', {'b': 1, 'c': {'d': 2}}) -> ('a.b', 1), ('a.c.d', 2): the keys a dict-valued
    override really sets (Hydra merges a dict into the node)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from flatten(f"{key}.{k}", v)
    else:
        yield key, value


_SAFE = re.compile(r"^[A-Za-z0-9_./:+@~-]+$")


def hydra_value(value: Any) -> str:
    """Format a Python value for a Hydra command-line override. A string that Hydra would
    read as something else (a number such as `0.5_5`, a bool, null) is quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if text and _SAFE.fullmatch(text) and text.lower() not in ("true", "false", "null", "none") \
            and not _HYDRA_NUMBERISH.fullmatch(text):
        return text
    # Hydra keeps a backslash in a quoted value as it is, but where backslashes precede a quote
    # (or the closing one): those it reads in pairs. Doubling every backslash reached verl doubled.
    body = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + body.replace("'", "\\'") + "'"


# ----------------------------------------------------------------------------- enums

ADV_ESTIMATORS = (
    "gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo",
    "grpo_passk", "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline",
    "tir_optimal_token_baseline", "gdpo",
)
LOSS_MODES = (
    "vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro",
    "cispo", "bypass_mode",
)
# The product doc's names for the policy_loss_mode knob -> verl's loss_mode.
POLICY_LOSS_MODES = {
    "vanilla": "vanilla", "gspo": "gspo", "cispo": "cispo", "gmpo": "geo_mean", "geo_mean": "geo_mean",
    "clip-cov": "clip_cov", "clip_cov": "clip_cov", "kl-cov": "kl_cov", "kl_cov": "kl_cov", "gpg": "gpg",
    "sapo": "sapo", "dro": "dro", "dppo_tv": "dppo_tv", "dppo_kl": "dppo_kl",
}
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_LOSS_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
ROLLOUT_IS = ("token", "sequence")
ROLLOUT_RS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
    "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)
REWARD_MANAGERS = ("naive", "dapo", "gdpo", "remote", "rate_limited")
DISTILLATION_LOSS_MODES = ("forward_kl_topk", "kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
ROLLOUT_NAMES = ("vllm", "sglang", "trtllm")
RESUME_MODES = ("auto", "disable", "resume_path")
MODEL_ENGINES = ("dp", "megatron", "torchtitan", "veomni")

# Hydra keys whose values verl checks only at run time: sf checks them before queueing.
ENUM_KEYS: dict[str, tuple[str, ...]] = {
    "algorithm.adv_estimator": ADV_ESTIMATORS,
    "actor_rollout_ref.actor.policy_loss.loss_mode": LOSS_MODES,
    "actor_rollout_ref.actor.loss_agg_mode": LOSS_AGG_MODES,
    "actor_rollout_ref.actor.kl_loss_type": KL_LOSS_TYPES,
    "algorithm.rollout_correction.rollout_is": ROLLOUT_IS,
    "reward.reward_manager.name": REWARD_MANAGERS,
    "distillation.distillation_loss.loss_mode": DISTILLATION_LOSS_MODES,
    "actor_rollout_ref.rollout.name": ROLLOUT_NAMES,
    "trainer.resume_mode": RESUME_MODES,
    "model_engine": MODEL_ENGINES,
}

# ----------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Knob:
    key: str | None  # Hydra key for the RL methods (main_ppo / ppo_trainer); None: not for RL
    type: str  # int | float | bool | str | enum | list | threshold | rs_list
    sft_key: str | None = None  # Hydra key for SFT (sft_trainer_engine); None: not for SFT
    choices: tuple[str, ...] = ()
    help: str = ""


_A = "actor_rollout_ref.actor."
_R = "actor_rollout_ref.rollout."
_OB = "+reward.reward_kwargs.overlong_buffer_cfg."
_RC = "algorithm.rollout_correction."

KNOBS: dict[str, Knob] = {
    # optimisation
    "actor_lr": Knob(_A + "optim.lr", "float", "optim.lr", help="actor learning rate"),
    "critic_lr": Knob("critic.optim.lr", "float", help="critic learning rate (ppo)"),
    "lr": Knob(_A + "optim.lr", "float", "optim.lr", help="alias of actor_lr"),
    "entropy_coeff": Knob(_A + "entropy_coeff", "float"),
    "ppo_epochs": Knob(_A + "ppo_epochs", "int"),
    # batches
    "train_batch_size": Knob("data.train_batch_size", "int", "data.train_batch_size", help="prompts per step"),
    "ppo_mini_batch_size": Knob(_A + "ppo_mini_batch_size", "int", help="prompts per actor update"),
    "ppo_micro_batch_size_per_gpu": Knob(_A + "ppo_micro_batch_size_per_gpu", "int"),
    "critic_ppo_micro_batch_size_per_gpu": Knob("critic.ppo_micro_batch_size_per_gpu", "int"),
    "log_prob_micro_batch_size_per_gpu": Knob(_R + "log_prob_micro_batch_size_per_gpu", "int"),
    "ref_log_prob_micro_batch_size_per_gpu": Knob("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "int"),
    "micro_batch_size_per_gpu": Knob(None, "int", "data.micro_batch_size_per_gpu", help="SFT micro batch"),
    "use_dynamic_bsz": Knob(_A + "use_dynamic_bsz", "bool", "data.use_dynamic_bsz"),
    # lengths
    "max_prompt_length": Knob("data.max_prompt_length", "int"),
    "max_response_length": Knob("data.max_response_length", "int"),
    "max_length": Knob(None, "int", "data.max_length", help="SFT sequence length"),
    "messages_key": Knob(None, "str", "data.messages_key"),
    # schedule
    "total_epochs": Knob("trainer.total_epochs", "int", "trainer.total_epochs"),
    "total_training_steps": Knob("trainer.total_training_steps", "int", "trainer.total_training_steps"),
    "save_freq": Knob("trainer.save_freq", "int", "trainer.save_freq"),
    "test_freq": Knob("trainer.test_freq", "int", "trainer.test_freq"),
    "val_before_train": Knob("trainer.val_before_train", "bool"),
    "critic_warmup": Knob("trainer.critic_warmup", "int"),
    "resume_mode": Knob("trainer.resume_mode", "enum", "trainer.resume_mode", RESUME_MODES),
    "max_actor_ckpt_to_keep": Knob("trainer.max_actor_ckpt_to_keep", "int", "trainer.max_ckpt_to_keep"),
    # KL
    "use_kl_loss": Knob(_A + "use_kl_loss", "bool"),
    "kl_loss_coef": Knob(_A + "kl_loss_coef", "float"),
    "kl_loss_type": Knob(_A + "kl_loss_type", "enum", choices=KL_LOSS_TYPES),
    "use_kl_in_reward": Knob("algorithm.use_kl_in_reward", "bool"),
    "kl_coef": Knob("algorithm.kl_ctrl.kl_coef", "float"),
    # policy loss
    "policy_loss_mode": Knob(_A + "policy_loss.loss_mode", "enum", choices=tuple(POLICY_LOSS_MODES)),
    "clip_ratio": Knob(_A + "clip_ratio", "float"),
    "clip_ratio_low": Knob(_A + "clip_ratio_low", "float"),
    "clip_ratio_high": Knob(_A + "clip_ratio_high", "float"),
    "clip_ratio_c": Knob(_A + "clip_ratio_c", "float"),
    "loss_agg_mode": Knob(_A + "loss_agg_mode", "enum", choices=LOSS_AGG_MODES),
    "dro_beta": Knob(_A + "policy_loss.dro_beta", "float", help="DRO's quadratic penalty (policy_loss_mode: dro)"),
    # rollout
    "rollout_n": Knob(_R + "n", "int", help="responses per prompt"),
    "rollout_name": Knob(_R + "name", "enum", choices=ROLLOUT_NAMES),
    "gpu_memory_utilization": Knob(_R + "gpu_memory_utilization", "float"),
    "tensor_model_parallel_size": Knob(_R + "tensor_model_parallel_size", "int"),
    "temperature": Knob(_R + "temperature", "float"),
    # model / engine
    "enable_gradient_checkpointing": Knob("actor_rollout_ref.model.enable_gradient_checkpointing", "bool"),
    "lora_rank": Knob("actor_rollout_ref.model.lora_rank", "int", "model.lora_rank"),
    "ref_param_offload": Knob("actor_rollout_ref.ref.fsdp_config.param_offload", "bool"),
    "model_engine": Knob("model_engine", "enum", choices=MODEL_ENGINES),
    # logging
    "logger": Knob("trainer.logger", "list", "trainer.logger"),
    "project_name": Knob("trainer.project_name", "str", "trainer.project_name"),
    "experiment_name": Knob("trainer.experiment_name", "str", "trainer.experiment_name"),
    # rollout correction (TIS / IcePop)
    "rollout_calculate_log_probs": Knob(_R + "calculate_log_probs", "bool"),
    "rollout_is": Knob(_RC + "rollout_is", "enum", choices=ROLLOUT_IS),
    "rollout_is_threshold": Knob(_RC + "rollout_is_threshold", "threshold"),
    "rollout_rs": Knob(_RC + "rollout_rs", "rs_list"),
    "rollout_rs_threshold": Knob(_RC + "rollout_rs_threshold", "rs_threshold"),
    # DAPO
    "filter_groups": Knob("algorithm.filter_groups.enable", "bool"),
    "filter_metric": Knob("algorithm.filter_groups.metric", "str"),
    "max_inflight_gen_batches": Knob("algorithm.filter_groups.max_inflight_gen_batches", "int"),
    "reward_manager": Knob("reward.reward_manager.name", "enum", choices=REWARD_MANAGERS),
    "overlong_buffer": Knob(_OB + "enable", "bool"),
    "overlong_buffer_len": Knob(_OB + "len", "int"),
    "overlong_penalty_factor": Knob(_OB + "penalty_factor", "float"),
    "overlong_buffer_log": Knob(_OB + "log", "bool"),
    # distillation
    "distillation_loss_mode": Knob("distillation.distillation_loss.loss_mode", "enum", choices=DISTILLATION_LOSS_MODES),
    "distillation_loss_coef": Knob("distillation.distillation_loss.distillation_loss_coef", "float"),
    "use_task_rewards": Knob("distillation.distillation_loss.use_task_rewards", "bool"),
    "teacher_tensor_model_parallel_size": Knob(
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size", "int"
    ),
    "teacher_gpu_memory_utilization": Knob(
        "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization", "float"
    ),
}


def knob_key(name: str, sft: bool) -> str | None:
    knob = KNOBS[name]
    return knob.sft_key if sft else knob.key


# long: one branch per knob type, read top to bottom; issue 20 types knobs from verl
def coerce_knob(name: str, value: Any) -> Any:
    """Check and convert a knob value to its type. Raises SpecError("knobs.NAME", ...).

    Typed, never guessed: `_` is never a digit separator (`0.5_5` is IcePop's LOW_HIGH pair
    for a threshold and an error for a number), booleans are true/false/yes/no/on/off only,
    an int given as a float must be whole (1024.0, 1e3), and a number is emitted in one form
    whatever its spelling (1e-6, 1e-06, 1.0e-6)."""
    knob = KNOBS[name]
    field = f"knobs.{name}"
    t = knob.type
    if isinstance(value, str) and t in ("int", "float"):
        text = value.strip()
        if "_" in text:
            raise SpecError(field, f"{value!r}: sf does not read '_' as a digit separator; write the number "
                            f"without it, e.g. {name}: {text.replace('_', '')}")
        value = parse_scalar(text)
    if isinstance(value, str) and t == "bool":
        word = value.strip().lower()
        if word in BOOL_WORDS:
            value = BOOL_WORDS[word]
        elif word in ("null", "none", "~"):
            value = None
    if value is None:
        return None
    if t == "int":
        fractional = isinstance(value, float) and not value.is_integer()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or fractional:
            raise SpecError(field, f"{value!r} is not a whole number; write e.g. {name}: 4")
        return int(value)
    if t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(field, f"{value!r} is not a number; write e.g. {name}: 1.0e-6")
        return float(value)
    if t == "bool":
        if not isinstance(value, bool):
            raise SpecError(field, f"{value!r} is not true/false; write {name}: true or {name}: false")
        return value
    if t == "enum":
        if isinstance(value, bool):
            raise SpecError(field, f"{value!r} is a boolean, not one of {', '.join(knob.choices)}")
        text = str(value)
        if text not in knob.choices:
            raise SpecError(field, f"{text!r} is not one of {', '.join(knob.choices)}")
        return text
    if t == "list":
        if isinstance(value, str):
            if "," not in value and not value.startswith("["):
                return value.strip()  # verl takes one backend name as a string too
            value = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(field, f"{value!r} is not a list of names; write e.g. {name}: [console, wandb]")
        return value
    if t == "str":
        if isinstance(value, (dict, list, bool)):
            raise SpecError(field, f"{value!r} is not a plain string; quote it, e.g. {name}: \"{value}\"")
        return str(value)
    if t == "threshold":
        return parse_threshold(value, field)
    if t == "rs_threshold":
        return parse_rs_threshold(value, field)
    if t == "rs_list":
        text = ",".join(value) if isinstance(value, list) else str(value)
        bad = [p for p in text.split(",") if p.strip() not in ROLLOUT_RS]
        if bad:
            raise SpecError(field, f"{', '.join(bad)} not in {', '.join(ROLLOUT_RS)} (comma-separated)")
        return text
    raise AssertionError(t)


def _positive(text: str) -> float | None:
    t = text.strip()
    if "_" in t or not _NUMBER.fullmatch(t):
        return None
    f = float(t)
    return f if math.isfinite(f) and f > 0 else None


def _pair(text: str) -> tuple[float, float] | None:
    """'0.5_5' -> (0.5, 5.0): split on '_' FIRST (float('0.5_5') would be 0.55); 0 < LOW < HIGH."""
    parts = str(text).strip().split("_")
    if len(parts) != 2:
        return None
    low, high = (_positive(p) for p in parts)
    if low is None or high is None or not low < high:
        return None
    return low, high


def parse_threshold(value: Any, field: str) -> float | str:
    """rollout_is_threshold: a number > 0 (TIS, emitted as a float) or LOW_HIGH with
    0 < LOW < HIGH (IcePop, emitted as the string 'LOW_HIGH' verl 0.9.1's
    _parse_rollout_is_threshold splits on '_')."""
    hint = "write a number > 0 (TIS, e.g. 2.0) or LOW_HIGH with 0 < LOW < HIGH (IcePop, e.g. 0.5_5.0)"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(field, f"{value!r} is not a threshold; {hint}")
    if isinstance(value, (int, float)):
        if not (math.isfinite(value) and value > 0):
            raise SpecError(field, f"{value!r}: a TIS threshold must be > 0; {hint}")
        return float(value)
    text = value.strip()
    if "_" in text:
        pair = _pair(text)
        if pair is None:
            raise SpecError(field, f"{text!r} is not LOW_HIGH with 0 < LOW < HIGH (IcePop, e.g. 0.5_5.0); "
                            "LOW must be below HIGH and both > 0")
        return f"{pair[0]!r}_{pair[1]!r}"
    upper = _positive(text)
    if upper is None:
        raise SpecError(field, f"{text!r} is not a number > 0 (TIS, e.g. 2.0) or LOW_HIGH (IcePop, e.g. 0.5_5.0)")
    return upper


def parse_rs_threshold(value: Any, field: str) -> float | str:
    """rollout_rs_threshold: one entry, or one per rollout_rs option (comma-separated); each a
    number > 0 or (k1 modes) LOW_HIGH with 0 < LOW < HIGH."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(field, f"{value!r} is not a threshold; write e.g. 0.01, or 0.5_2.0 for k1 modes")
    if isinstance(value, (int, float)):
        return parse_threshold(value, field)
    parts = [p.strip() for p in value.split(",")]
    out = []
    for part in parts:
        try:
            out.append(parse_threshold(part, field))
        except SpecError:
            raise SpecError(field, f"{value!r}: {part!r} is not a number > 0 or LOW_HIGH with 0 < LOW < HIGH "
                            "(comma-separated, one per rollout_rs option); e.g. 0.01, or 0.5_2.0 for k1 modes"
                            ) from None
    if len(out) == 1:
        return out[0]
    return ",".join(p if isinstance(p, str) else repr(p) for p in out)


# ----------------------------------------------------------------------------- rules

Rule = Callable[["Ctx"], None]  # noqa: F821  (launcher.compile.compiler.Ctx)

ESTIMATOR_KEY = "algorithm.adv_estimator"
TOPOLOGY_KEYS = (
    "trainer.nnodes", "trainer.n_gpus_per_node", "distillation.nnodes", "distillation.n_gpus_per_node",
    "reward.reward_model.nnodes", "reward.reward_model.n_gpus_per_node",
    "reward.reward_model.enable_resource_pool", "distillation.enabled",
)
_TOPOLOGY_HINT = "comes from the pools; use --profile SERIES:NxG or spec.resources.pools instead"
_MODEL_HINT = "is owned by the model binding; use --model PATH_OR_HF_ID (or `model:` in config.yaml) instead"
_TRAIN_HINT = ("is owned by the data binding; use --train-data FILE or --train-dataset OWNER/NAME@VERSION "
               "(or data.train in config.yaml) instead")
_VAL_HINT = "is owned by the data binding; use --validation-data FILE (or data.validation.files in config.yaml) instead"
# Hydra keys sf sets from a binding, the pools or the run: a raw override of one is refused
# (in any spelling: flat, dict-valued, +key, ~key, legacy alias), with the way to set it.
OWNED_KEYS: dict[str, str] = {
    **{k: _TOPOLOGY_HINT for k in TOPOLOGY_KEYS},
    "actor_rollout_ref.model.path": _MODEL_HINT,
    "critic.model.path": _MODEL_HINT,
    "data.train_files": _TRAIN_HINT,
    "data.val_files": _VAL_HINT,
    "trainer.default_local_dir": "is set by sf to <run_dir>/checkpoints so requeued jobs resume; remove it",
}
# Keys a spec field sets when it is given (teacher.model, reward.model, reward.function):
# then a raw override of the same key is refused (two values for one thing).
FIELD_KEYS: dict[str, str] = {
    "distillation.teacher_models.teacher_model.model_path": "teacher.model",
    "reward.reward_model.model_path": "reward.model",
    "reward.reward_model.enable": "reward.model",
    "reward.custom_reward_function.path": "reward.function.path",
    "reward.custom_reward_function.name": "reward.function.name",
}
SFT_OWNED_KEYS: dict[str, str] = {
    "trainer.nnodes": _TOPOLOGY_HINT, "trainer.n_gpus_per_node": _TOPOLOGY_HINT,
    "model.path": _MODEL_HINT, "data.train_files": _TRAIN_HINT, "data.val_files": _VAL_HINT,
    "trainer.default_local_dir": OWNED_KEYS["trainer.default_local_dir"],
}
_LEGACY_REWRITES = {
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.enable_resource_pool": "reward.reward_model.enable_resource_pool",
    "reward_model.n_gpus_per_node": "reward.reward_model.n_gpus_per_node",
    "reward_model.nnodes": "reward.reward_model.nnodes",
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.model.path": "reward.reward_model.model_path",
    "custom_reward_function.path": "reward.custom_reward_function.path",
    "custom_reward_function.name": "reward.custom_reward_function.name",
}
_LEGACY_PREFIX_REWRITES = {
    "reward_model.reward_kwargs.": "reward.reward_kwargs.",
    "reward_model.rollout.": "reward.reward_model.rollout.",
    "sandbox_fusion.": "reward.sandbox_fusion.",
}


def legacy_rewrite(key: str) -> str | None:
    """The reward.* key verl 0.9.1's main_ppo reads for a legacy top-level key, or None."""
    if key in _LEGACY_REWRITES:
        return _LEGACY_REWRITES[key]
    for old, new in _LEGACY_PREFIX_REWRITES.items():
        if key.startswith(old):
            return new + key[len(old):]
    return None


def is_legacy(key: str) -> bool:
    return key.startswith(("reward_model.", "custom_reward_function.", "sandbox_fusion.")) or key in (
        "reward_model", "custom_reward_function", "sandbox_fusion"
    )


def estimator_hint() -> str:
    return ("grpo->verl/grpo, rloo->verl/rloo, reinforce_plus_plus_baseline->verl/reinforce-baseline, "
            "remax->verl/remax, gae->verl/ppo")


def rule_estimator(ctx) -> None:
    """THE estimator rule: algorithm.adv_estimator is the method's identity (its pin in
    configs/methods/), refused wherever the user sets it (config.yaml's `algorithm:` or
    `knobs.adv_estimator`, --set adv_estimator=, a raw override flat or dict-valued), and
    checked on the composed config."""
    message = (f"algorithm.adv_estimator is pinned by the method (verl/{ctx.method.name} -> "
               f"{ctx.method.estimator or 'none'}); it is the method's identity, not a knob: remove it and "
               f"change the method instead ({estimator_hint()})")
    for source, key in ctx.user_keys():
        if key == ESTIMATOR_KEY:
            ctx.error(source, message)
    if ctx.method.estimator is not None and ctx.get(ESTIMATOR_KEY) != ctx.method.estimator:
        ctx.error(ctx.culprit(ESTIMATOR_KEY), message)


def rule_method_pins(ctx) -> None:
    """Pins of the method (estimator, DAPO's filter_groups and reward manager) come first."""
    for key, value in ctx.method.pins.items():
        ctx.set(key, value, "pin")


def _pin_message(ctx, key, value) -> str:
    hint = ""
    if ctx.method.name == "dapo" and key == "algorithm.filter_groups.enable":
        hint = ("; for 'DAPO without dynamic sampling' use verl/grpo with clip_ratio_high=0.28 and "
                "loss_agg_mode=token-mean")
    if key == "data.train_batch_size" and ctx.method.config_name == "fully_async_ppo_trainer":
        hint = ("; verl's fully async trainer takes ppo_mini_batch_size x async_training.require_batches prompts a "
                "step: set ppo_mini_batch_size")
    return f"{key} is pinned to {hydra_value(value)} by verl/{ctx.method.name}; remove it{hint}"


def rule_pins_hold(ctx) -> None:
    """Every pin but the estimator (rule_estimator) holds: a user value that differs is refused,
    in any spelling, and the composed config must carry the pinned value."""
    for key, value in ctx.method.pins.items():
        if key == ESTIMATOR_KEY:
            continue
        if ctx.get(key) != value:
            ctx.error(ctx.culprit(key), _pin_message(ctx, key, value))


def refusal(ctx, conflict) -> str:
    """The message of a write that the owner of its key (a pin, a binding, the pools, the run)
    refuses (launcher.compile.resolve): the rule's own message where there is one."""
    owner, key = conflict.owner, conflict.owner.key
    if owner.layer == "pin":
        if key == ESTIMATOR_KEY:
            return (f"algorithm.adv_estimator is pinned by the method (verl/{ctx.method.name} -> "
                    f"{ctx.method.estimator or 'none'}); it is the method's identity, not a knob: remove it and "
                    f"change the method instead ({estimator_hint()})")
        return _pin_message(ctx, key, owner.value)
    owned = SFT_OWNED_KEYS if ctx.sft else OWNED_KEYS
    if key in owned:
        return f"{key} {owned[key]}"
    if key in FIELD_KEYS:
        return (f"{key} is set from {FIELD_KEYS[key]} ({ctx.bound.get(key, owner.origin)}); change it there and "
                "remove this override")
    return resolve.conflict_message(conflict, hydra_value)


# Paths of verl 0.9.1 that reopen a pin or ask for GPUs Slurm never allocated: key -> (what it
# must be, why), read from verl's code. `None` as the value: unset (null).
PIN_PATHS_DAPO = {
    "trainer.v1.sampler.custom_sampler.path": (None, "with a custom sampler verl 0.9.1's trainer_base._build_sampler "
                                               "skips DAPO's group filtering (filter_groups is passed only to the "
                                               "built-in ReplayBuffer)"),
    "trainer.v1.sampler.custom_sampler.name": (None, "with a custom sampler verl 0.9.1's trainer_base._build_sampler "
                                               "skips DAPO's group filtering"),
    "reward.reward_manager.source": ("register", "with source=importlib verl 0.9.1's resolve_reward_manager_cls loads "
                                     "reward.reward_manager.module.path instead of the dapo reward manager"),
}


def rule_pin_paths(ctx) -> None:
    """Pins hold on every path verl 0.9.1 offers. DAPO: a custom sampler
    (trainer.v1.sampler.custom_sampler) skips group filtering; reward.reward_manager.source
    other than `register` replaces the dapo reward manager. critic.enable decides over the
    estimator whether verl trains a critic (need_critic): it must say what the method says.
    Every RL method that does not pin it: trainer.use_v1=false runs the deprecated main_ppo_v0
    trainer (main_ppo.py:183); a standalone rollout pool (actor_rollout_ref.rollout.nnodes > 0,
    trainer.v1.trainer_mode=separate_async) or a rollout n_gpus_per_node other than the pool's
    asks Ray for GPUs Slurm never allocated."""
    if ctx.sft:
        return
    if ctx.method.name == "dapo":
        for key, (want, why) in PIN_PATHS_DAPO.items():
            value = ctx.get(key)
            if value != want and not (want is None and value in ("", None)):
                ctx.error(ctx.culprit(key), f"{key}={hydra_value(value)}: {why}; verl/dapo pins it "
                          f"({'unset' if want is None else want}): remove it")
    enable = ctx.get("critic.enable")
    if enable is not None and bool(enable) != ctx.method.critic:
        # verl 0.9.1's need_critic (trainer/ppo/utils.py:96) obeys critic.enable before the estimator
        ctx.error(ctx.culprit("critic.enable"), f"critic.enable={hydra_value(enable)}: "
                  + ("verl/ppo's GAE needs its critic's values, and verl 0.9.1 would train without one"
                     if ctx.method.critic else
                     f"verl 0.9.1 would load and train a critic model that verl/{ctx.method.name} does not have and "
                     "sf's pools do not place") + "; remove it (the method decides, e.g. verl/ppo has a critic)")
    if "trainer.use_v1" not in ctx.method.pins and ctx.get("trainer.use_v1", True) is not True:
        # (a method that needs the v0 trainer pins it: verl/remax; the pin rules hold that)
        ctx.error(ctx.culprit("trainer.use_v1"), "trainer.use_v1=false makes verl 0.9.1's main_ppo run the "
                  "deprecated main_ppo_v0 trainer (main_ppo.py:183-192), which sf's pools, pins and checkpoints are "
                  "not built for: remove it")
    if ctx.method.separate_rollout:
        return  # a rollout pool of its own is the method's design: rule_separate_rollout_pool sizes it
    if ctx.effective is None and not ctx.user_sets("actor_rollout_ref.rollout"):
        return
    mode = ctx.get("trainer.v1.trainer_mode", "sync")
    if mode == "separate_async":
        ctx.error(ctx.culprit("trainer.v1.trainer_mode"), "trainer.v1.trainer_mode=separate_async puts the rollout on "
                  "a pool of its own (actor_rollout_ref.rollout.nnodes x n_gpus_per_node GPUs) that sf's Slurm job "
                  "does not allocate; use sync or colocate_async")
    nnodes = ctx.get("actor_rollout_ref.rollout.nnodes", 0)
    if nnodes not in (0, None):
        ctx.error(ctx.culprit("actor_rollout_ref.rollout.nnodes"),
                  f"actor_rollout_ref.rollout.nnodes={hydra_value(nnodes)} asks Ray for a standalone rollout pool "
                  "(verl 0.9.1's llm_server sizes it nnodes x n_gpus_per_node) that Slurm never allocated: the rollout "
                  "shares the training pool in sf; remove it (0) and size the pool with --profile")
    gpn = ctx.get("actor_rollout_ref.rollout.n_gpus_per_node")
    train = ctx.get("trainer.n_gpus_per_node")
    if ctx.user_sets("actor_rollout_ref.rollout.n_gpus_per_node") and gpn != train:
        ctx.error(ctx.culprit("actor_rollout_ref.rollout.n_gpus_per_node"),
                  f"actor_rollout_ref.rollout.n_gpus_per_node={hydra_value(gpn)} differs from the pool's {train} GPUs "
                  "per node: Ray would be asked for GPUs Slurm never allocated; remove it (it follows "
                  "trainer.n_gpus_per_node)")


def rule_owned_keys(ctx) -> None:
    """Bindings, pools and the run own their keys: a raw override of one is refused with the
    flag or field that sets it, and the composed config must carry sf's value."""
    owned = SFT_OWNED_KEYS if ctx.sft else OWNED_KEYS
    for source, key in ctx.user_keys():
        for own, hint in owned.items():
            if key == own or own.startswith(key + "."):
                if source.startswith("knobs."):
                    continue
                ctx.error(source, f"{own} {hint}")
    for source, key in ctx.user_keys():
        if key in FIELD_KEYS and key in ctx.bound and not source.startswith("knobs."):
            ctx.error(source, f"{key} is set from {FIELD_KEYS[key]} ({ctx.bound[key]}); change it there and "
                      "remove this override")
    for key in owned:
        if key in ctx.overrides and ctx.overrides[key][1] != "~":
            set_value = ctx.overrides[key][2]
            if ctx.get(key) != set_value and ctx.effective is not None:
                ctx.error(ctx.culprit(key), f"{key} {owned[key]}")


def rule_bindings(ctx) -> None:
    """--model / --train-data / --validation-data -> verl's keys; model and training data are required."""
    v = ctx.values
    model = v.get("model")
    train = ((v.get("data") or {}).get("train") or {}).get("files")
    val = ((v.get("data") or {}).get("validation") or {}).get("files")
    if not model:
        ctx.error("model", "no model: pass --model PATH_OR_HF_ID or set `model:` in config.yaml")
    if not train:
        ctx.error("data.train.files", "no training data: pass --train-data FILE (or --train-dataset "
                                      "OWNER/NAME@VERSION) or set data.train.files")
    om = ctx.layer("model")
    has_dataset = ((v.get("data") or {}).get("train") or {}).get("dataset")
    ot = ctx.layer("data.train.dataset" if has_dataset else "data.train.files")
    ov = ctx.layer("data.validation.files")
    if model:
        for key in (["model.path"] if ctx.sft else
                    ["actor_rollout_ref.model.path", *(["critic.model.path"] if ctx.method.critic else [])]):
            ctx.set(key, model, "binding", origin=om)
    if train:
        ctx.set("data.train_files", train, "binding", origin=ot)
    if val:
        ctx.set("data.val_files", val, "binding", origin=ov)
    elif train:
        # verl's default val_files points at a GSM8K path that does not exist on the cluster:
        # SFT validates nothing then, RL validates on the training data.
        ctx.set("data.val_files", None if ctx.sft else train, "binding", origin=ot)


def rule_no_validation(ctx) -> None:
    """Without validation data, validation is turned off (verl's default val_files does not exist)."""
    if not ctx.get("data.train_files") or ((ctx.values.get("data") or {}).get("validation") or {}).get("files"):
        return
    user = {key for _source, key in ctx.user_keys()}
    if "trainer.test_freq" not in user:
        ctx.set("trainer.test_freq", -1, "default")
    if not ctx.sft and "trainer.val_before_train" not in user:
        ctx.set("trainer.val_before_train", False, "default")
    ctx.warn("no validation data: validation is off (test_freq=-1); pass --validation-data FILE to turn it on")


def rule_knobs(ctx) -> None:
    """Method defaults, then the knobs of each layer (configs/defaults.yaml, site, config.yaml,
    --set, the sweep point), each translated to its Hydra key and typed; a knob and its alias
    reach one key (two of them in one layer: an error of the resolution)."""
    layers = [("default:sf", ctx.base_knobs), ("method", ctx.recipe_defaults)] + [
        (layer, knobs) for layer, knobs in ctx.knob_layers if layer != "default:sf"]
    for layer, knobs in layers:
        for name, raw in knobs.items():
            if name not in KNOBS:
                close = close_knobs(name)
                ctx.error(f"knobs.{name}", "unknown knob; "
                                           f"{('did you mean ' + ', '.join(close) + '? ') if close else ''}"
                          "see `sf schema` for the knobs, or pass a raw Hydra key with --set a.b.c=VALUE")
                continue
            key = knob_key(name, ctx.sft)
            if key is None:
                ctx.error(f"knobs.{name}", f"this knob does not apply to verl/{ctx.method.name}"
                          + ("; SFT knobs: " + ", ".join(k for k, kn in KNOBS.items() if kn.sft_key)
                             if ctx.sft else ""))
                continue
            try:
                value = coerce_knob(name, raw)
            except SpecError as exc:
                ctx.errors.append(exc)
                continue
            if name == "policy_loss_mode" and value is not None:
                value = POLICY_LOSS_MODES[value]  # gmpo -> geo_mean, clip-cov -> clip_cov, ...
            ctx.knob_values[name] = value
            if layer in ("default:sf", "method"):  # configs/defaults.yaml, then the recipe's defaults
                ctx.set(key, value, "default", source=f"method default {name}", layer=layer)
            elif value is None:  # null: verl's own default, whatever a lower layer set
                ctx.set(key, None, "knob", prefix="default", source=f"knobs.{name}", layer=layer)
            else:
                ctx.set(key, value, "knob", source=f"knobs.{name}", layer=layer)


def rule_raw_overrides(ctx) -> None:
    """Raw Hydra overrides of config.yaml, --set and the sweep point, each in its layer; legacy
    keys rewritten to the reward.* key verl 0.9.1 reads; a dict value written as its leaves
    (Hydra merges it into the node), so each reaches the key it really sets."""
    for source, prefix, key, value in ctx.raw:
        if is_legacy(key):
            new = legacy_rewrite(key)
            if new is None:
                ctx.error(source, f"{key} is a legacy top-level reward key that verl 0.9.1's main_ppo ignores and has "
                          "no reward.* equivalent; use reward.* keys or knobs (see `sf schema`), "
                          "e.g. overlong_buffer_len")
                continue
            plus = "+" if new.startswith("reward.reward_kwargs.") else ""
            ctx.warn(f"{source}: legacy {prefix}{key} is ignored by verl 0.9.1's main_ppo; sf passes it as {plus}{new}")
            key, prefix = new, plus or prefix.replace("+", "")
        if key.startswith("reward.reward_kwargs.") and "+" not in prefix:
            prefix = "+"  # reward_kwargs is not in verl's schema: it must be added
        if prefix == "~":
            ctx.set(key, None, "raw", prefix="~", raw_value=value, source=source)
            continue
        parsed = parse_value(value)
        if isinstance(parsed, dict) and parsed:
            item = ctx.next_item()
            for leaf, leaf_value in flatten(key, parsed):
                ctx.set(leaf, leaf_value, "raw", prefix=prefix, source=source, item=item)
            continue
        ctx.set(key, value, "raw", prefix=prefix, raw_value=value, source=source)


def rule_runtime_defaults(ctx) -> None:
    """The runtime's default overrides for this verl config (its registry entry's `overrides:`):
    what the image needs (no flash-attn: sdpa, no remove-padding), in the runtime layer: above
    the method's defaults, below the site, config.yaml, --set and the sweep point."""
    name = ctx.method.config_name
    table = ctx.runtime_overrides
    # an experimental trainer's config starts from ppo_trainer: the image's needs are the same
    # (the H200's one-step-off run took flash-attention without them), unless the runtime
    # names that config itself
    lines = table[name] if name in table else table.get(verlcheck.DERIVED_FROM.get(name, ""), ())
    for text in lines:
        prefix, key, value = split_override(text)
        ctx.set(key, value, "runtime", prefix=prefix, raw_value=value, source="runtime")


def rule_rollout_n(ctx) -> None:
    """grpo, rloo, reinforce-baseline and dapo need rollout n >= 2; remax needs n = 1."""
    if ctx.sft:
        return
    n = ctx.get("actor_rollout_ref.rollout.n", 1)
    if not _number(n):
        return  # a string or null: reported by launcher.compile.typed (a float is judged as a number too)
    lo, hi = ctx.method.rollout_n_min, ctx.method.rollout_n_max
    src = ctx.culprit("actor_rollout_ref.rollout.n", "knobs.rollout_n")
    if lo is not None and n < lo:
        ctx.error(src, f"verl/{ctx.method.name} compares responses within a group: rollout_n must be >= {lo} "
                  f"(got {n}); set rollout_n: {max(lo, 5)}")
    if hi is not None and n > hi:
        ctx.error(src, f"verl/{ctx.method.name} uses the greedy response as baseline: rollout_n must be {hi} "
                  f"(got {n}); set rollout_n: 1 or use verl/grpo")


def rule_dapo(ctx) -> None:
    """DAPO: overlong buffer reads max_resp_len from data.max_response_length (passed along)."""
    if ctx.get("reward.reward_kwargs.overlong_buffer_cfg.enable") is not True:
        return
    resp = ctx.get("data.max_response_length")
    if ctx.get("reward.reward_kwargs.overlong_buffer_cfg.log") is None \
            and not ctx.user_sets("reward.reward_kwargs.overlong_buffer_cfg.log"):
        ctx.set("reward.reward_kwargs.overlong_buffer_cfg.log", False, "default", prefix="+")
    if isinstance(resp, int) and not isinstance(resp, bool) and not ctx.user_sets("reward.reward_kwargs.max_resp_len"):
        ctx.set("reward.reward_kwargs.max_resp_len", resp, "default", prefix="+")


def rule_filter_metric(ctx) -> None:
    """Group filtering on (DAPO) needs the metric it filters by: verl 0.9.1's trainer_base raises
    at start when algorithm.filter_groups.metric is empty or null (`filter_metric: ""`)."""
    if ctx.get("algorithm.filter_groups.enable") is not True:
        return
    metric = ctx.get("algorithm.filter_groups.metric")
    if metric is None or not str(metric).strip():
        ctx.error(ctx.culprit("algorithm.filter_groups.metric", "knobs.filter_metric"),
                  f"algorithm.filter_groups.metric={metric!r}: group filtering is on and verl raises at start "
                  "without the metric it filters by; set filter_metric: acc (or score, seq_reward, reward), "
                  "or filter_groups: false")


def rule_overlong_buffer(ctx) -> None:
    """DAPO's overlong buffer must fit: verl asserts max_resp_len >= len > 0."""
    if ctx.get("reward.reward_kwargs.overlong_buffer_cfg.enable") is not True:
        return
    resp = ctx.get("reward.reward_kwargs.max_resp_len", ctx.get("data.max_response_length"))
    length = ctx.get("reward.reward_kwargs.overlong_buffer_cfg.len", 0)
    src = ctx.culprit("reward.reward_kwargs.overlong_buffer_cfg.len", "knobs.overlong_buffer_len")
    if _number(resp) and _number(length) and length > resp:
        ctx.error(src, f"overlong buffer ({length} tokens) is longer than max_response_length ({resp}); verl asserts "
                  f"max_resp_len >= len: raise max_response_length or lower overlong_buffer_len")
    if not (_number(length) and length > 0):
        ctx.error(src if src.startswith(("overrides[", "--set")) else "knobs.overlong_buffer_len",
                  "the overlong buffer is on but its length is not > 0; set overlong_buffer_len: 4096")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rule_dynamic_sampling_reward_model(ctx) -> None:
    """filter_groups with a reward model colocated on the training GPUs: verl asserts; refused."""
    if ctx.get("algorithm.filter_groups.enable") is True and ctx.get("reward.reward_model.enable") is True \
            and ctx.get("reward.reward_model.enable_resource_pool") is not True:
        ctx.error("reward.model", "dynamic sampling (filter_groups) needs rewards at rollout time, but the reward "
                  "model shares the training GPUs (verl asserts): use a rule-based reward function, or give the "
                  "reward model its own pool (spec.resources.pools + roles: {reward: <pool>})")


def rule_rollout_correction(ctx) -> None:
    """Rollout correction (rollout_is) spells out calculate_log_probs=True in the command."""
    if ctx.sft:
        return
    if ctx.get(_RC + "rollout_is") not in (None, "null"):  # from any input: a knob, a raw override, a dict
        # verl 0.9.1 defaults it to true; make it explicit so the compiled command says so (sf's
        # layer: any input that sets it wins).
        ctx.set("actor_rollout_ref.rollout.calculate_log_probs", True, "default")


def rule_rollout_correction_inputs(ctx) -> None:
    """Rollout correction needs rollout-side log probs, and thresholds verl 0.9.1 can parse:
    rollout_is_threshold a number > 0 (TIS) or 'LOW_HIGH' (IcePop, 0 < LOW < HIGH);
    rollout_rs_threshold one entry or one per rollout_rs option, LOW_HIGH for k1 modes only."""
    if ctx.sft:
        return
    rc = "algorithm.rollout_correction."
    is_mode = ctx.get(rc + "rollout_is")
    rs_modes = ctx.get(rc + "rollout_rs")
    is_on, rs_on = is_mode not in (None, "null"), rs_modes not in (None, "null")
    if (is_on or rs_on) and ctx.get("actor_rollout_ref.rollout.calculate_log_probs", True) is False:
        ctx.error(ctx.culprit("actor_rollout_ref.rollout.calculate_log_probs", "knobs.rollout_calculate_log_probs"),
                  "rollout correction (rollout_is/rollout_rs) compares against the rollout's own log probs, which "
                  "calculate_log_probs=false turns off; set rollout_calculate_log_probs: true or drop "
                  "rollout_is/rollout_rs")
    if is_on:
        src = ctx.culprit(rc + "rollout_is_threshold", "knobs.rollout_is_threshold")
        try:
            parse_threshold(ctx.get(rc + "rollout_is_threshold", 2.0), src)
        except SpecError as exc:
            ctx.errors.append(exc)
    if not rs_on:
        return
    threshold = ctx.get(rc + "rollout_rs_threshold")
    src = ctx.culprit(rc + "rollout_rs_threshold", "knobs.rollout_rs_threshold")
    if threshold in (None, "null"):
        ctx.error(src, "rollout_rs needs rollout_rs_threshold (verl raises without it); "
                  "e.g. rollout_rs_threshold: 0.01, or 0.5_2.0 for k1 modes")
        return
    try:
        parse_rs_threshold(threshold, src)
    except SpecError as exc:
        ctx.errors.append(exc)
        return
    modes = [m.strip() for m in str(rs_modes).split(",") if m.strip()]
    parts = [p.strip() for p in str(threshold).split(",")]
    if len(parts) not in (1, len(modes)):
        ctx.error(src, f"{len(parts)} thresholds for {len(modes)} rollout_rs options ({', '.join(modes)}); "
                  "give one shared threshold or one per option")
        return
    for mode, part in zip(modes, parts * len(modes) if len(parts) == 1 else parts, strict=True):
        if "_" in part and not mode.endswith("k1"):
            ctx.error(src, f"{mode} takes one upper bound, not LOW_HIGH {part!r} (only *_k1 modes take a pair); "
                      "e.g. rollout_rs_threshold: 0.01")


# long: one rule over every pool and role; issue 20 reworks placement by role
def rule_pools(ctx) -> None:
    """Roles -> pools: train pool fills trainer.*, teacher pool distillation.*, reward pool reward.reward_model.*."""
    pools = ctx.pools
    if not pools:
        return
    roles = ctx.roles
    by_name = {p.name: p for p in pools}
    for role, pool_name in roles.items():
        if pool_name not in by_name:
            ctx.error(f"spec.resources.roles.{role}",
                      f"pool {pool_name!r} is not declared; pools: {', '.join(by_name)}")
    train = by_name.get(roles.get("actor", pools[0].name), pools[0])
    if train.het_group != 0:
        ctx.error("spec.resources.roles.actor", "the actor must run on the first pool (het group 0, where Ray's head "
                                                "runs)")
    rule_roles_verl_can_place(ctx, train)
    ctx.set("trainer.nnodes", train.nodes, "topology")
    ctx.set("trainer.n_gpus_per_node", train.gpus_per_node, "topology")
    if ctx.sft:
        if len(pools) > 1:
            ctx.error("spec.resources.pools", "verl/sft runs under torchrun on one pool; declare a single pool")
        return
    teacher_pool = roles.get("teacher")
    if ctx.method.name == "distillation":
        if len(pools) < 2 or teacher_pool is None:
            ctx.error("spec.resources.pools", "verl/distillation needs two pools with the teacher on the second: the "
                      "teacher is placed on top of the training pool. Declare pools [{name: train, ...}, "
                      "{name: teach, ...}] and roles {actor: train, rollout: train, teacher: teach}")
        elif by_name.get(teacher_pool) is not None and by_name[teacher_pool].het_group != 1:
            ctx.error("spec.resources.roles.teacher", f"the teacher must be on the second pool, not {teacher_pool!r}")
        elif by_name.get(teacher_pool) is not None:
            tp = by_name[teacher_pool]
            ctx.set("distillation.enabled", True, "topology")
            ctx.set("distillation.nnodes", tp.nodes, "topology")
            ctx.set("distillation.n_gpus_per_node", tp.gpus_per_node, "topology")
            ttp = ctx.get("distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size", 2)
            size = tp.nodes * tp.gpus_per_node
            if isinstance(ttp, int) and ttp > 0 and size % ttp:
                ctx.error(ctx.source_of("distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size",
                                        "knobs.teacher_tensor_model_parallel_size"),
                          f"the teacher pool has {size} GPUs, not a multiple of "
                          f"teacher_tensor_model_parallel_size={ttp} "
                          "(verl refuses it); pick a TP size that divides the pool")
        teacher = (ctx.values.get("teacher") or {}).get("model")
        if not teacher:
            ctx.error("teacher.model", "verl/distillation needs a teacher: set teacher: {model: PATH_OR_HF_ID} in "
                                       "config.yaml")
        else:
            ctx.set("distillation.teacher_models.teacher_model.model_path", teacher, "binding",
                    origin=ctx.layer("teacher.model"))
    reward_model = (ctx.values.get("reward") or {}).get("model")
    reward_pool = roles.get("reward")
    if reward_pool is not None and not reward_model:
        ctx.error("reward.model", "a reward pool is declared but no reward model: set reward: {model: PATH}")
    if reward_model:
        ctx.set("reward.reward_model.enable", True, "binding", origin=ctx.layer("reward.model"))
        ctx.set("reward.reward_model.model_path", reward_model, "binding", origin=ctx.layer("reward.model"))
        ctx.set("reward.reward_model.rollout.name", ctx.get("actor_rollout_ref.rollout.name", "vllm"), "binding",
                origin=ctx.layer("reward.model"))
        if reward_pool is not None and reward_pool in by_name:
            rp = by_name[reward_pool]
            if rp.het_group == 0:
                ctx.error("spec.resources.roles.reward", "the reward pool must be a pool of its own, not the training "
                                                         "pool")
            ctx.set("reward.reward_model.enable_resource_pool", True, "topology")
            ctx.set("reward.reward_model.nnodes", rp.nodes, "topology")
            ctx.set("reward.reward_model.n_gpus_per_node", rp.gpus_per_node, "topology")
    used = {train.name} | {p for p in roles.values()}
    for p in pools:
        if p.name not in used:
            ctx.error(f"spec.resources.pools.{p.name}", "pool has no role; map a role to it in spec.resources.roles or "
                                                        "remove it")


def rule_teacher_needs_distillation(ctx) -> None:
    """A teacher (the `teacher:` block, roles.teacher, the teacher_* knobs, any distillation.*
    key) on a method without distillation: verl reads distillation.* only when
    distillation.enabled, which sf sets for verl/distillation alone, so the teacher would be
    dropped without a word. Keys sf owns (distillation.enabled, its pool sizes) are
    rule_owned_keys' to name."""
    if ctx.method.name == "distillation":
        return
    fix = f"verl/{ctx.method.name} has no teacher (only verl/distillation distils from one)"
    if (ctx.values.get("teacher") or {}).get("model"):
        ctx.error("teacher.model", f"{fix}, so this teacher would be dropped; remove the teacher: block, or use "
                  "method: verl/distillation")
    if ctx.roles.get("teacher") is not None:
        ctx.error("spec.resources.roles.teacher", f"{fix}; remove the role, or use method: verl/distillation")
    for source, key in ctx.user_keys():
        owned = any(key == own or own.startswith(key + ".") for own in OWNED_KEYS)
        if (key == "distillation" or key.startswith("distillation.")) and not owned:
            ctx.error(source, f"{fix}: verl reads {key} only when distillation is on; remove it, or use "
                      "method: verl/distillation")


# Roles verl 0.9.1's trainers keep in the actor's resource pool (main_ppo's `global_pool`:
# ActorRolloutRef is one colocated worker group, the critic shares its pool).
COLOCATED_WITH_ACTOR = ("rollout", "ref", "critic")


def rule_roles_verl_can_place(ctx, train) -> None:
    """Every role in `roles:` is one the method has, on a pool verl 0.9.1 can put it on:
    rollout, ref and critic run in the actor's resource pool, except the rollout of the
    methods whose trainers give it a pool of its own (verl/grpo-one-step-off, verl/grpo-async:
    there it must be off the actor's pool); a critic only where the method has one. Placement
    follows these roles, never a pool's name."""
    for role in COLOCATED_WITH_ACTOR:
        pool_name = ctx.roles.get(role)
        if role == "rollout" and ctx.method.separate_rollout:
            rule_rollout_not_colocated(ctx, train)  # these trainers need it off the actor's pool
        elif role == "critic" and pool_name is not None and not ctx.method.critic:
            ctx.error("spec.resources.roles.critic", f"verl/{ctx.method.name} has no critic; remove roles.critic")
        elif pool_name is not None and pool_name != train.name:
            ctx.error(f"spec.resources.roles.{role}",
                      f"verl 0.9.1's {ctx.method.entry[-1]} runs the {role} in the actor's resource pool, so it cannot "
                      f"run on pool {pool_name!r}; map {role} to {train.name!r} (the actor's pool) or remove it")


def rule_custom_reward_function(ctx) -> None:
    """reward.function {path, name} -> reward.custom_reward_function.{path,name}."""
    fn = (ctx.values.get("reward") or {}).get("function") or {}
    if fn.get("path"):
        ctx.set("reward.custom_reward_function.path", fn["path"], "binding", origin=ctx.layer("reward.function.path"))
        ctx.set("reward.custom_reward_function.name", fn.get("name") or "compute_score", "binding",
                origin=ctx.layer("reward.function.path"))
    elif fn.get("name"):
        ctx.error("reward.function.path", "a reward function name without a path; set reward.function.path: "
                                          "my_reward.py")


def rule_checkpoints(ctx) -> None:
    """Checkpoints for requeue and export: absolute dir in the run dir, resume_mode=auto."""
    ctx.set("trainer.default_local_dir", ctx.checkpoint_dir, "checkpoint")
    ctx.set("trainer.resume_mode", "auto", "default", origin="run")  # a user layer may turn it off (warned)


ASYNC_SAVE_KEY = "actor_rollout_ref.actor.checkpoint.async_save"
CRITIC_ASYNC_SAVE_KEY = "critic.checkpoint.async_save"


def rule_checkpoints_resume(ctx) -> None:
    """A requeued job resumes: save_freq > 0, resume_mode=auto, and no asynchronous save with
    auto resume (verl 0.9.1's trainer_base._save_checkpoint skips latest_checkpointed_iteration.txt
    when actor.checkpoint.async_save is true, so auto resume finds nothing and the run restarts
    from step 0 without a word: verl issue 7952)."""
    save = ctx.get("trainer.save_freq")
    if _is_int(save) and save <= 0:
        ctx.warn(f"save_freq={save}: verl saves no checkpoint, so a requeued or preempted job restarts from step 0; "
                 "set save_freq: 10")
    mode = ctx.get("trainer.resume_mode")
    if mode is None and ctx.user_sets("trainer.resume_mode"):
        ctx.error(ctx.culprit("trainer.resume_mode"),
                  "trainer.resume_mode is null or deleted: sf resumes requeued jobs with resume_mode=auto; remove the "
                  "override, or turn resuming off explicitly with resume_mode: disable")
        return
    if mode not in (None, "auto"):
        ctx.warn(f"resume_mode={mode}: a requeued job will not resume from its last checkpoint (sf expects auto)")
    if not ctx.sft and ctx.get(ASYNC_SAVE_KEY) is True and mode in (None, "auto"):
        ctx.error(ctx.culprit(ASYNC_SAVE_KEY),
                  f"{ASYNC_SAVE_KEY}=true with resume_mode=auto: verl 0.9.1 then never writes "
                  "latest_checkpointed_iteration.txt, so a requeued job restarts from step 0 (verl issue 7952); "
                  f"remove {ASYNC_SAVE_KEY}")
    # the critic's own flag does not stop the tracker file: it names a step whose critic
    # checkpoint may still be being written when the requeue comes
    if not ctx.sft and ctx.get(CRITIC_ASYNC_SAVE_KEY) is True and mode in (None, "auto"):
        ctx.warn(f"{CRITIC_ASYNC_SAVE_KEY}=true with resume_mode=auto: verl 0.9.1 writes "
                 "latest_checkpointed_iteration.txt while the critic's save may still run, so a job requeued "
                 f"right after a save can resume from an incomplete critic checkpoint; remove {CRITIC_ASYNC_SAVE_KEY}")


def rule_raw_reward_function_file(ctx) -> None:
    """A raw override of verl's reward function file gets the check reward.function gets:
    verl imports it at start-up (read here with ast, never imported)."""
    key = "reward.custom_reward_function.path"
    path = ctx.get(key)
    if ctx.sft or not ctx.user_sets(key) or not isinstance(path, str) or not path:
        return
    if not os.path.isabs(path):
        ctx.error(ctx.culprit(key), f"{path!r} is relative to wherever verl starts; give an absolute path, "
                  "or use reward.function.path (relative to the experiment folder)")
        return
    problem = check_reward_function(path, ctx.get("reward.custom_reward_function.name") or "compute_score",
                                    field_name=ctx.culprit(key))
    if problem:
        ctx.error(ctx.culprit(key) if problem.field != "reward.function.name" else
                  ctx.culprit("reward.custom_reward_function.name", ctx.culprit(key)), problem.message)


# loss mode -> (key, test, what verl does otherwise), read from verl 0.9.1's @register_policy_loss functions.
POLICY_LOSS_NEEDS: dict[str, tuple[tuple[str, Callable[[Any], bool], str], ...]] = {
    "dro": ((_A + "policy_loss.dro_beta", lambda v: _number(v) and v > 0,
             "compute_policy_loss_dro raises unless policy_loss.dro_beta > 0; set dro_beta: 0.1"),),
    "vanilla": ((_A + "clip_ratio_c", lambda v: v is None or (_number(v) and v > 1.0),
                 "compute_policy_loss_vanilla asserts clip_ratio_c > 1.0 (dual-clip); set clip_ratio_c: 3.0"),),
    "clip_cov": ((_A + "policy_loss.clip_cov_ratio", lambda v: v is None or (_number(v) and v > 0),
                  "compute_policy_loss_clip_cov asserts clip_cov_ratio > 0"),),
    "kl_cov": ((_A + "policy_loss.kl_cov_ratio", lambda v: v is None or (_number(v) and v > 0),
                "compute_policy_loss_kl_cov asserts kl_cov_ratio > 0"),),
}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def rule_policy_loss_params(ctx) -> None:
    """A policy loss mode gets the parameters its verl 0.9.1 loss function requires."""
    if ctx.sft:
        return
    mode = ctx.get(_A + "policy_loss.loss_mode", "vanilla")
    for key, ok, why in POLICY_LOSS_NEEDS.get(str(mode), ()):
        value = ctx.get(key)
        if not ok(value):
            ctx.error(ctx.culprit(key, ctx.culprit(_A + "policy_loss.loss_mode", "knobs.policy_loss_mode")),
                      f"policy_loss_mode {mode} with {key}={value!r}: {why}")


METRICS_LOGGER = "file"


def rule_logger(ctx) -> None:
    """`sf metrics` / `sf plot` read verl's file logger: warn when trainer.logger leaves it out."""
    logger = ctx.get("trainer.logger")
    names = [logger] if isinstance(logger, str) else list(logger or [])
    if METRICS_LOGGER not in names:
        ctx.warn(f"trainer.logger={names} leaves out '{METRICS_LOGGER}', the backend `sf metrics` and `sf plot` read; "
                 f"add it, e.g. logger: [console, {METRICS_LOGGER}]")


def rule_rollout_defaults(ctx) -> None:
    """What verl needs that compose does not catch: rollout.name (???) and micro batch sizes."""
    if ctx.sft:
        return
    if ctx.get("actor_rollout_ref.rollout.name") is None:
        ctx.set("actor_rollout_ref.rollout.name", "vllm", "default")


def rule_training_length(ctx) -> None:
    """verl's fit loops over range(trainer.total_epochs) whatever total_training_steps says:
    0 or less trains nothing and the job "completes" at once."""
    epochs = ctx.get("trainer.total_epochs")
    if _number(epochs) and epochs < 1:
        ctx.error(ctx.culprit("trainer.total_epochs", "knobs.total_epochs"),
                  f"trainer.total_epochs={epochs}: verl would train no step (its loop runs over the epochs); "
                  "set total_epochs: 1 or more (total_training_steps caps the steps)")
    steps = ctx.get("trainer.total_training_steps")
    if _number(steps) and steps < 1:
        ctx.error(ctx.culprit("trainer.total_training_steps", "knobs.total_training_steps"),
                  f"trainer.total_training_steps={steps}: verl would train no step; set total_training_steps: "
                  "1 or more, or null for total_epochs over the data")


_AT_LEAST_ONE = (lambda v: v >= 1, "1 or more")
_NOT_NEGATIVE = (lambda v: v >= 0, "0 or more")
_FRACTION = (lambda v: 0 < v <= 1, "above 0 and at most 1")
_TORCH, _VLLM, _VERL = "torch's optimizer", "vLLM", "verl"
# key -> (ok, the range, who refuses it at start): values that compose but fail the job when it
# starts, after it waited in the queue. Judged only where a user wrote them (a method's pin may
# hold a 0 that means "unused", verl/grpo-async's train_batch_size).
START_VALUES: dict[str, tuple] = {
    _A + "optim.lr": (*_NOT_NEGATIVE, _TORCH),
    "critic.optim.lr": (*_NOT_NEGATIVE, _TORCH),
    "optim.lr": (*_NOT_NEGATIVE, _TORCH),  # SFT
    _R + "temperature": (*_NOT_NEGATIVE, _VLLM),
    _R + "val_kwargs.temperature": (*_NOT_NEGATIVE, _VLLM),
    _R + "gpu_memory_utilization": (*_FRACTION, _VLLM),
    "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization": (*_FRACTION, _VLLM),
    _R + "tensor_model_parallel_size": (*_AT_LEAST_ONE, _VLLM),
    "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size": (*_AT_LEAST_ONE, _VLLM),
    "data.train_batch_size": (*_AT_LEAST_ONE, _VERL),
    "data.max_prompt_length": (*_AT_LEAST_ONE, _VERL),
    "data.max_response_length": (*_AT_LEAST_ONE, _VERL),
    "data.max_length": (*_AT_LEAST_ONE, _VERL),  # SFT
    "data.micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),  # SFT
    _A + "ppo_mini_batch_size": (*_AT_LEAST_ONE, _VERL),
    _A + "ppo_micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),
    _A + "ulysses_sequence_parallel_size": (*_AT_LEAST_ONE, _VERL),
    _R + "log_prob_micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),
    "critic.ppo_mini_batch_size": (*_AT_LEAST_ONE, _VERL),
    "critic.ppo_micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),
}


def rule_start_values(ctx) -> None:
    """A learning rate or temperature below 0, a GPU memory fraction outside (0, 1], a batch,
    micro batch, length or parallel size below 1 (or NaN): refused here, as torch, vLLM or verl
    would refuse them at start."""
    for key, (ok, allowed, who) in START_VALUES.items():
        if not ctx.user_sets(key):
            continue
        value = ctx.get(key)
        if not _number(value) or ok(value):
            continue
        name = next((n for n, k in KNOBS.items() if (k.sft_key if ctx.sft else k.key) == key), None)
        ctx.error(ctx.culprit(key, f"knobs.{name}" if name else key),
                  f"{key}={value}: {who} refuses it at start; set {name or key} to {allowed}")


def rule_pitfalls(ctx) -> None:
    """The tutorial's pitfalls, as warnings."""
    if ctx.sft:
        return
    g = ctx.get
    user_set = {key for _source, key in ctx.user_keys()}  # knobs (as their keys) and raw overrides
    if g("algorithm.use_kl_in_reward") is not True and "algorithm.kl_ctrl.kl_coef" in user_set \
            and (g("algorithm.kl_ctrl.kl_coef") or 0) > 0:
        ctx.warn("kl_coef is set but use_kl_in_reward is off: the coefficient does nothing; set use_kl_in_reward: true")
    if g("actor_rollout_ref.actor.use_kl_loss") is not True and "actor_rollout_ref.actor.kl_loss_coef" in user_set \
            and (g("actor_rollout_ref.actor.kl_loss_coef") or 0) > 0:
        ctx.warn("kl_loss_coef is set but use_kl_loss is off: the coefficient does nothing; set use_kl_loss: true")
    gpn = g("trainer.n_gpus_per_node")
    nodes = g("trainer.nnodes")
    tp = g("actor_rollout_ref.rollout.tensor_model_parallel_size", 2)
    if isinstance(tp, int) and isinstance(gpn, int) and tp > gpn:
        ctx.warn(f"tensor_model_parallel_size={tp} is larger than the {gpn} GPUs per node; set "
                 f"tensor_model_parallel_size: {gpn} or fewer")
    bs = g("data.train_batch_size", 1024)
    n = g("actor_rollout_ref.rollout.n", 1)
    # verl.trainer.main_ppo's validate_config refuses these at start (without dynamic batch
    # sizes; the divisibility for FSDP, Megatron's is by its data-parallel size): errors there,
    # warnings for the other entries
    checked = not ctx.method.separate_rollout and tuple(ctx.entry) == ctx.method.entry \
        and g("actor_rollout_ref.actor.use_dynamic_bsz") is not True
    say = ctx.error if checked else (lambda _field, message: ctx.warn(message))
    if all(isinstance(x, int) and not isinstance(x, bool) for x in (bs, n, gpn, nodes)) and gpn and nodes \
            and (not checked or g("actor_rollout_ref.actor.strategy") != "megatron"):
        gpus = gpn * nodes
        if (bs * n) % gpus:
            say(ctx.culprit("data.train_batch_size", "knobs.train_batch_size"),
                f"train_batch_size*rollout_n = {bs}*{n} = {bs * n} is not divisible by the {gpus} GPUs; verl "
                f"refuses it at start-up; set train_batch_size to a multiple of {gpus // math.gcd(gpus, n)}")
    mini = g("actor_rollout_ref.actor.ppo_mini_batch_size", 256)
    if isinstance(mini, int) and isinstance(bs, int) and 0 < bs < mini:  # 0: verl/grpo-async's pin
        mini_key = "actor_rollout_ref.actor.ppo_mini_batch_size"
        blame = ctx.culprit("data.train_batch_size", "knobs.train_batch_size") \
            if ctx.user_sets("data.train_batch_size") and not ctx.user_sets(mini_key) \
            else ctx.culprit(mini_key, "knobs.ppo_mini_batch_size")
        say(blame, f"ppo_mini_batch_size={mini} is larger than train_batch_size={bs} (verl refuses it at start-up); "
            f"set ppo_mini_batch_size <= {bs} or train_batch_size >= {mini}")
    if g("actor_rollout_ref.actor.use_dynamic_bsz") is not True:
        for key, knob in (("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "ppo_micro_batch_size_per_gpu"),
                          ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                           "log_prob_micro_batch_size_per_gpu"),
                          ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                           "ref_log_prob_micro_batch_size_per_gpu")):
            if g(key) is None:
                ctx.warn(f"{knob} is not set and use_dynamic_bsz is off: verl asserts at start-up; set {knob}: 4")
        if ctx.method.critic and g("critic.ppo_micro_batch_size_per_gpu") is None:
            ctx.warn("critic_ppo_micro_batch_size_per_gpu is not set: verl asserts at start-up; set it to 4")


def rule_value_types(ctx) -> None:
    """Values that compose but verl rejects at run time (enums, numbers), checked on the composed
    config; numbers Hydra would read another way than written (`0.5_5` is 0.55 to Hydra)."""
    for key, choices in ENUM_KEYS.items():
        if key not in ctx.overrides and ctx.effective is None:
            continue
        value = ctx.get(key)
        if value is None:
            continue
        if key == "actor_rollout_ref.actor.policy_loss.loss_mode" and value == "gmpo":
            ctx.error(ctx.culprit(key), "verl calls GMPO 'geo_mean'; use the knob policy_loss_mode: gmpo (sf maps it)")
            continue
        if str(value) not in choices:
            ctx.error(ctx.culprit(key),
                      f"{key}={value!r} is not valid in verl {ctx.method.version}; one of: {', '.join(choices)}")
    knob_of = {knob.key.lstrip("+"): name for name, knob in KNOBS.items()
               if knob.key and knob.type in ("int", "float", "bool", "threshold", "rs_threshold", "rs_list")}
    for source, prefix, key, text in ctx.raw:
        if prefix == "~":
            continue
        key = ctx.effective_key(key)
        bare = text.strip()
        if "${" in bare:  # an interpolation: its text is no number; its composed value is typed and judged
            continue
        if "_" in bare and _HYDRA_NUMBERISH.fullmatch(bare) and key not in knob_of:
            ctx.error(source, f"{key}={bare}: Hydra reads '_' as a digit separator ({bare} -> "
                      f"{bare.replace('_', '')}); write the number without '_', or quote a string: {key}='{bare}'")
            continue
        name = knob_of.get(key)
        if name is None or (KNOBS[name].type in ("int", "float", "bool") and "_" not in bare):
            continue  # numbers and bools: typed on the composed value (launcher.compile.typed)
        quoted = len(bare) >= 2 and bare[0] == bare[-1] and bare[0] in "'\""
        try:
            coerce_knob(name, bare[1:-1] if quoted else text)
        except SpecError as exc:
            ctx.error(source, exc.message if key in source else f"{key}: {exc.message}")
            continue
        if KNOBS[name].type in ("threshold", "rs_threshold") and "_" in bare and bare[:1] not in "'\"" \
                and _HYDRA_NUMBERISH.fullmatch(bare):
            ctx.error(source, f"{key}={bare}: Hydra reads this as the number {bare.replace('_', '')}, not LOW_HIGH; "
                      f"use the knob {name}: {bare} or quote it: {key}='{bare}'")
    ctx.check_types()
    if ctx.pools:
        for p in ctx.pools:
            if p.nodes < 1 or p.gpus_per_node < 1:
                ctx.error(f"spec.resources.pools.{p.name}", "nodes and gpus_per_node must be >= 1")


# Linux's limit on one argument of exec (MAX_ARG_STRLEN = 32 pages, the terminating NUL
# included): the job starts verl with one argument per override, so a longer one fails the
# job's exec ("Argument list too long") after it queued. And what all of them may take together
# (ARG_MAX is a quarter of the stack limit, 2 MiB by default, shared with the environment).
MAX_ARG_STRLEN = 131072
MAX_ARGS_BYTES = 1 << 20


def rule_argument_size(ctx) -> None:
    """Each override is one argument of the job's `python -m verl...` command: one longer than
    MAX_ARG_STRLEN - 1 bytes, or all of them over MAX_ARGS_BYTES, would fail exec at start."""
    total = 0
    for text in ctx.override_list():
        size = len(text.encode("utf-8", "surrogatepass"))
        total += size + 1
        if size >= MAX_ARG_STRLEN:
            key = text.partition("=")[0].lstrip("+~")
            field = ctx.culprit(key)
            ctx.error(field, f"{'' if key in field else key + ': '}the override is {size:,} bytes; Linux takes at most "
                      f"{MAX_ARG_STRLEN - 1:,} in one argument of the job's command (MAX_ARG_STRLEN), so the job "
                      "would fail to start; put the value in a file and pass its path")
    if total > MAX_ARGS_BYTES:
        ctx.error("overrides", f"the overrides take {total:,} bytes together; the job's command takes about "
                  f"{MAX_ARGS_BYTES:,} (ARG_MAX, shared with the environment); put large values in files")


def rule_entry(ctx) -> None:
    """An experiment's main.py, if present, becomes the entry (verl-recipe style)."""
    if ctx.main_py:
        if ctx.sft:
            ctx.entry = ("torchrun", ctx.main_py)
        else:
            ctx.entry = ("python3", ctx.main_py)
    else:
        ctx.entry = tuple(ctx.method.entry)


# ----------------------------------------------------------------------------- disaggregated RL
# verl/grpo-one-step-off and verl/grpo-async (catalog: rollout_pool: separate) run verl 0.9.1's
# experimental trainers, whose rollout servers get a pool of their own: the actor, ref and
# critic in `trainer_pool` sized by trainer.* (experimental/separation/utils.py:37-47), the
# rollout in one `rollout_pool_<replica>` per server (workers/rollout/replica.py:190-205),
# sized by the TOP-LEVEL rollout.nnodes / rollout.n_gpus_per_node, which both mains copy over
# actor_rollout_ref.rollout.* before anything reads it (one_step_off_policy/main_ppo.py:121-122,
# fully_async_policy/fully_async_main.py:235-236).

ROLLOUT_POOL_SIZE = {  # what the rollout pool fills -> every key verl takes it from
    "nodes": ("rollout.nnodes", "actor_rollout_ref.rollout.nnodes"),
    "gpus_per_node": ("rollout.n_gpus_per_node", "actor_rollout_ref.rollout.n_gpus_per_node"),
}


def _rollout_pool(ctx):
    """The pool roles.rollout names, when it is a pool of its own (else None)."""
    by_name = {p.name: p for p in ctx.pools}
    pool = by_name.get(ctx.roles.get("rollout"))
    actor = by_name.get(ctx.roles.get("actor")) or (ctx.pools[0] if ctx.pools else None)
    return pool if pool is not None and pool is not actor else None


def rule_rollout_not_colocated(ctx, train) -> None:
    """These trainers refuse a rollout on the actor's GPUs: they assert hybrid_engine is off
    (one_step_off_policy/ray_trainer.py:87-88, fully_async_trainer.py:75-76) and start their
    rollout servers in a resource pool of their own, which Slurm must allocate as its own het
    group; on the actor's pool they would ask Ray for GPUs the job never got."""
    if len(ctx.pools) < 2:
        return  # rule_separate_rollout_pool says what to declare
    pool_name = ctx.roles.get("rollout")
    if pool_name is None or pool_name == train.name:
        ctx.error("spec.resources.roles.rollout",
                  f"verl/{ctx.method.name} runs the rollout on a pool of its own (verl 0.9.1's "
                  f"{ctx.method.entry[2]} refuses a colocated rollout); map rollout to the second pool, e.g. "
                  f"roles: {{actor: {train.name}, rollout: {ctx.pools[1].name}}}, or use verl/grpo for a colocated "
                  "rollout")


def rule_separate_rollout_pool(ctx) -> None:
    """The rollout pool -> rollout.nnodes / rollout.n_gpus_per_node (the keys these mains read);
    the train pool filled trainer.* already (rule_pools). One pool only is refused: the
    trainers need a rollout pool of their own."""
    if ctx.sft or not ctx.method.separate_rollout or not ctx.pools:
        return
    if len(ctx.pools) < 2:
        ctx.error("spec.resources.pools",
                  f"verl/{ctx.method.name} runs the rollout on a pool of its own: declare two pools, e.g. "
                  "pools: [{name: train, nodes: 1}, {name: gen, nodes: 1}] and roles: {actor: train, rollout: gen} "
                  "(`sf new NAME --method verl/" + ctx.method.name + "` writes them)")
        return
    pool = _rollout_pool(ctx)
    if pool is None:
        return  # rule_rollout_not_colocated names roles.rollout
    ctx.set("rollout.nnodes", pool.nodes, "topology")
    ctx.set("rollout.n_gpus_per_node", pool.gpus_per_node, "topology")


def rule_separate_rollout_sizes(ctx) -> None:
    """A raw rollout pool size that disagrees with the pools is refused, naming the key: the
    top-level rollout.* would size a pool Slurm never allocated, and a raw
    actor_rollout_ref.rollout.nnodes / n_gpus_per_node is overwritten by the main from rollout.*."""
    if ctx.sft or not ctx.method.separate_rollout:
        return
    pool = _rollout_pool(ctx)
    if pool is None:
        return
    for field, keys in ROLLOUT_POOL_SIZE.items():
        want = getattr(pool, field)
        for key in keys:
            for source, ukey, value in ctx.user_values():
                if ukey == key and value != want:
                    ctx.error(source, f"{key}={hydra_value(value)} disagrees with pool {pool.name!r} "
                              f"({pool.nodes} node(s) x {pool.gpus_per_node} GPUs), where roles.rollout puts verl's "
                              f"rollout: sf fills rollout.nnodes / rollout.n_gpus_per_node from that pool; remove "
                              f"{key} and set spec.resources.pools[{pool.het_group}].{field} instead")


def rule_separate_rollout_replicas(ctx) -> None:
    """The rollout pool holds whole rollout servers: verl 0.9.1 starts (rollout GPUs) //
    (tensor x data x pipeline parallel) servers (workers/rollout/llm_server.py:441-460), each
    on min(gpus_per_node, its size) GPUs per node, a size that must divide by that
    (replica.py:108-116); what is left over idles, and no server at all fails the run."""
    if ctx.sft or not ctx.method.separate_rollout:
        return
    pool = _rollout_pool(ctx)
    if pool is None:
        return
    r = "actor_rollout_ref.rollout."
    sizes = [ctx.get(r + "tensor_model_parallel_size", 2), ctx.get(r + "data_parallel_size", 1),
             ctx.get(r + "pipeline_model_parallel_size", 1)]
    if not all(_is_int(v) and v > 0 for v in sizes):
        return  # rule_value_types reports a bad type
    server = sizes[0] * sizes[1] * sizes[2]
    gpus = pool.nodes * pool.gpus_per_node
    src = ctx.culprit(r + "tensor_model_parallel_size", "knobs.tensor_model_parallel_size")
    if gpus % server:
        none = " (no server: the run fails)" if gpus < server else ""
        ctx.error(src, f"a rollout server takes {server} GPUs (tensor x data x pipeline parallel = "
                  f"{' x '.join(map(str, sizes))}) but pool {pool.name!r} has {gpus}: verl 0.9.1 starts "
                  f"{gpus // server} server(s) and leaves {gpus % server} GPUs idle{none}; "
                  f"pick a tensor_model_parallel_size that divides {gpus}, or resize the pool")
    elif server > pool.gpus_per_node and server % pool.gpus_per_node:
        ctx.error(src, f"a rollout server of {server} GPUs spans nodes of {pool.gpus_per_node} GPUs unevenly "
                  f"(verl 0.9.1's replica.py asserts its size divides by the GPUs per node); pick a "
                  f"tensor_model_parallel_size that is a multiple of {pool.gpus_per_node} or divides it")


# The keys verl 0.9.1's disaggregated trainers' own Hydra configs add on top of ppo_trainer
# (experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml,
# experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml; a key or a subtree):
# tests/unit/test_bad_inputs_33.py holds this table to verl's YAML.
TRAINER_OWN_KEYS = {
    "one_step_off_ppo_trainer": ("rollout.nnodes", "rollout.n_gpus_per_node"),
    "fully_async_ppo_trainer": ("async_training", "rollout.nnodes", "rollout.n_gpus_per_node", "rollout.n",
                                "rollout.total_rollout_steps", "actor_rollout_ref.actor.use_rollout_log_probs",
                                "actor_rollout_ref.rollout.standalone_gpu_memory_utilization"),
}


def rule_other_trainers_keys(ctx) -> None:
    """A key only another trainer's config has (async_training.*, rollout.total_rollout_steps,
    ...): written plainly Hydra refuses it (not a key), written with `+` verl composes it and
    never reads it. Either way the fix is the method that reads it."""
    mine = ctx.method.config_name
    for source, key in ctx.user_keys():
        owners = [config for config, keys in TRAINER_OWN_KEYS.items()
                  if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys)]
        if not owners or mine in owners:
            continue
        readers = [f"verl/{m}" for m in catalog.methods(ctx.method.version)
                   if catalog.get_method(ctx.method.version, m).config_name in owners]
        use = f", or use method: {' or '.join(readers)}" if readers else ""
        ctx.error(source, f"{key} is read only by {' and '.join(readers) or 'another trainer'} (verl 0.9.1's "
                  f"{' and '.join(owners)} config); verl/{ctx.method.name} never reads it: remove it{use}")


ASYNC = "async_training."


# The fully async trainer's own numbers: key -> (least value, what verl needs, an example).
# staleness_threshold >= 0 and trigger_parameter_sync_step >= 1 are asserted
# (fully_async_rollouter.py:353-356); an infinite staleness_threshold overflows int() when the
# rollouter sizes its queue (fully_async_rollouter.py:493-497); require_batches: the trainer
# takes ppo_mini_batch_size x require_batches samples a step (fully_async_trainer.py:158-159);
# concurrent_samples_per_replica 0 (or less) makes the rollouter wait for a free slot forever
# (`while len(active_tasks) >= max_concurrent_samples`, fully_async_rollouter.py:970).
ASYNC_NUMBERS = {
    "staleness_threshold": (0, "a number >= 0, not inf (0: no sample older than the weights of the last sync; "
                            "0.5: up to half a sync's samples more)", 0.5),
    "trigger_parameter_sync_step": (1, "a whole number >= 1 (trainer steps between two weight pushes to the "
                                    "rollouter)", 1),
    "require_batches": (1, "a whole number >= 1 (ppo mini batches a trainer step takes)", 1),
    "concurrent_samples_per_replica": (1, "a whole number >= 1 (generation requests each rollout server takes at "
                                       "once; with 0 the rollouter waits for a free slot forever)", 16),
}


def rule_async_training(ctx) -> None:
    """verl/grpo-async: the fully async trainer's own checks, before anything queues: its
    numbers (ASYNC_NUMBERS); a reward model needs its own pool (asserted,
    fully_async_rollouter.py:361-365: the rollouter never pauses); test_freq 0 divides by
    zero at the end (fully_async_trainer.py:529). The run's length is
    rollout.total_rollout_steps prompts (verl's default 100), not trainer.total_training_steps
    (fully_async_rollouter.py:405-407, :493-500): rule_async_run_length."""
    if ctx.sft or ctx.method.config_name != "fully_async_ppo_trainer":
        return
    for key, (low, kind, example) in ASYNC_NUMBERS.items():
        value = ctx.get(ASYNC + key)
        whole = kind.startswith("a whole")
        if not (_is_int(value) if whole else _number(value)):
            continue  # None (verl's default), or a type rule_value_types names
        if not (math.isfinite(value) and value >= low):
            ctx.error(ctx.culprit(ASYNC + key), f"{ASYNC}{key}={hydra_value(value)}: verl 0.9.1's fully async "
                      f"trainer needs {kind}; e.g. {ASYNC}{key}={example}")
    rm = "reward.reward_model."
    if ctx.get(rm + "enable") is True and ctx.get(rm + "enable_resource_pool") is not True:
        ctx.error("reward.model", "verl/grpo-async needs the reward model on a pool of its own (verl 0.9.1's "
                  "rollouter asserts it: it never pauses to free GPUs); add a pool and roles: {reward: <pool>}, or "
                  "use a rule-based reward function")
    for source, key, _value in ctx.user_values():
        if key == "rollout.n":  # fully_async_ppo_trainer.yaml:60-61 has it; no code reads it
            ctx.error(source, "rollout.n is not read by verl 0.9.1's fully async trainer (responses per prompt are "
                      "actor_rollout_ref.rollout.n); remove it and set the knob rollout_n")
    if ctx.get("trainer.test_freq") == 0:
        ctx.error(ctx.culprit("trainer.test_freq", "knobs.test_freq"), "test_freq=0: verl 0.9.1's fully async "
                  "trainer divides by it at the end of the run; set test_freq: -1 (no validation) or a step count")
    user = {key for _source, key in ctx.user_keys()}  # raw overrides and knobs, as verl keys
    if "trainer.total_training_steps" in user:
        ctx.warn("trainer.total_training_steps is not read by verl 0.9.1's fully async trainer: the run ends "
                 "after rollout.total_rollout_steps prompts (and total_epochs); set rollout.total_rollout_steps")
    elif not ctx.user_sets("rollout.total_rollout_steps") and _is_int(ctx.get("rollout.total_rollout_steps")):
        default, step = ctx.get("rollout.total_rollout_steps"), _async_step_prompts(ctx)
        none = (f", fewer than the {step} a trainer step takes (ppo_mini_batch_size x require_batches): the run "
                "would end without a trainer step") if default < step else ""
        ctx.warn(f"verl/grpo-async ends after rollout.total_rollout_steps={default} prompts (verl 0.9.1's "
                 f"default){none}; set rollout.total_rollout_steps=N, or =null for total_epochs over the whole dataset")


def _async_step_prompts(ctx) -> int:
    """The prompts one fully async trainer step takes: ppo_mini_batch_size x require_batches
    (fully_async_trainer.py:159); 1 when either is no positive whole number (other rules say so)."""
    mini, batches = ctx.get(_A + "ppo_mini_batch_size"), ctx.get(ASYNC + "require_batches", 1)
    return mini * batches if _is_int(mini) and _is_int(batches) and mini > 0 and batches > 0 else 1


def rule_async_run_length(ctx) -> None:
    """verl/grpo-async: rollout.total_rollout_steps is the number of prompts the rollouter
    feeds (fully_async_rollouter.py:405-407, :876-884; at least one, whatever the value), and
    a trainer step waits for ppo_mini_batch_size x require_batches of them
    (fully_async_trainer.py:159, :428-430): fewer, and the run ends without a trainer step
    (zero or a negative value included). null: every prompt of total_epochs."""
    if ctx.sft or ctx.method.config_name != "fully_async_ppo_trainer":
        return
    key = "rollout.total_rollout_steps"
    value = ctx.get(key)
    if not _is_int(value) or not ctx.user_sets(key):
        return  # None: every prompt; another type: rule_value_types names it; verl's default: rule_async_training warns
    step = _async_step_prompts(ctx)
    mini, batches = ctx.get(_A + "ppo_mini_batch_size"), ctx.get(ASYNC + "require_batches", 1)
    if value < step:
        per_step = (f"a trainer step takes ppo_mini_batch_size x require_batches = {mini} x {batches} = {step} "
                    "prompts") if step > 1 else "a trainer step takes at least 1 prompt"
        ctx.error(ctx.culprit(key), f"{key}={hydra_value(value)}: verl 0.9.1's fully async rollouter feeds that many "
                  f"prompts and {per_step}, so the run would end without a trainer step; set {key} to at least "
                  f"{step} (e.g. {key}={max(step, 100)}), or {key}=null for every prompt of total_epochs")


# The CPUs verl 0.9.1's disaggregated trainers ask for beside their GPU bundles: actors placed
# anywhere in the cluster, each on one node. one-step-off: OneStepTaskRunner 10
# (one_step_off_policy/main_ppo.py:33). fully async: FullyAsyncTaskRunner 1, FullyAsyncTrainer
# 10, FullyAsyncRollouter 10, MessageQueue 2 (fully_async_main.py:35, fully_async_trainer.py:53,
# fully_async_rollouter.py:329, message_queue.py:26). Bundles: 3 CPUs a training GPU, 2 a
# standalone rollout GPU (ResourcePoolManager, replica.py:200-204).
DRIVER_ACTOR_CPUS = {"one_step_off_ppo_trainer": (10,), "fully_async_ppo_trainer": (1, 10, 10, 2)}


def rule_separate_cpus(ctx) -> None:
    """A warning when the pools' nodes (the site's cpus_per_node) cannot hold verl's bundles and
    these trainers' driver actors: Ray then waits for CPUs forever, without an error."""
    asks = DRIVER_ACTOR_CPUS.get(ctx.method.config_name)
    pool = _rollout_pool(ctx) if asks else None
    if pool is None:
        return
    free = []
    for p in ctx.pools:
        series = ctx.site.series.get(p.series)
        if series is None:
            return
        per_gpu = 2 if p is pool else 3
        free += [series.cpus_per_node - per_gpu * p.gpus_per_node] * p.nodes
    if sum(free) < sum(asks) or max(free, default=0) < max(asks):
        ctx.warn(f"verl/{ctx.method.name}'s driver actors ask {sum(asks)} CPUs ({' + '.join(map(str, asks))}, "
                 f"up to {max(asks)} on one node) beside verl's GPU bundles (3 CPUs a training GPU, 2 a rollout "
                 f"GPU), but the pools' nodes leave {sum(free)} free (at most {max(free, default=0)} on one node): "
                 "Ray would wait for CPUs forever; use nodes with more CPUs (the site's cpus_per_node) or more nodes")


# ----------------------------------------------------------------------------- healing settings
# launcher/injob/heal.py: a restart in place (at most slurm.max_restarts_in_place per attempt)
# swaps a pool's spare node in for a node that died, never for the head (the first node of
# het group 0: the batch step, Ray's GCS and the driver live there); the progress watchdog
# declares a hang after hang_timeout_s without a training step (first_step_timeout_s before
# the first one).


def rule_spares(ctx) -> None:
    """Spare nodes are allocated for the whole job (render: --nodes=nodes+spares) and used only
    by a restart in place: with max_restarts_in_place 0, or on a one-node first pool (its one
    node is the head), they would sit idle for the whole run."""
    slurm = ctx.values.get("slurm") or {}
    restarts = slurm.get("max_restarts_in_place", ctx.site.max_restarts_in_place)
    whose = " (the site's value)" if ctx.spec.provenance.get("slurm.max_restarts_in_place") in ("site", "defaults",
                                                                                               None) else ""
    for pool in ctx.pools:
        spares = pool.spare_nodes
        if not spares:
            continue
        field = f"spec.resources.pools[{pool.het_group}].spare_nodes"
        if restarts == 0:
            ctx.error(field, f"pool {pool.name!r} keeps {spares} spare node(s), but only a restart in place swaps a "
                      f"spare in and slurm.max_restarts_in_place is 0{whose}: the spares would sit allocated and idle; "
                      "set slurm.max_restarts_in_place: 1 (or more), or drop spare_nodes")
        elif pool.het_group == 0 and pool.nodes == 1:
            ctx.error(field, f"pool {pool.name!r} has one node, the head (the batch step, Ray's GCS and the driver "
                      f"run there), which a spare never replaces: its {spares} spare node(s) would never be used; "
                      "give the pool 2 or more nodes, or drop spare_nodes")


HANG_LIMITS = {"hang_timeout_s": ", or 0 to turn the watchdog off", "first_step_timeout_s": ""}


def rule_hang_limits(ctx) -> None:
    """A hang limit the user set longer than the job's time limit: the watchdog never fires,
    and a hang holds the nodes until Slurm ends the job. (The site's own defaults are the
    admins' choice: not judged per run.)"""
    slurm = ctx.values.get("slurm") or {}
    time = slurm.get("time") or ctx.site.time
    try:
        limit = time_seconds(time)
    except SpecError:
        return  # slurm_options names a bad time
    if limit is None:
        return  # UNLIMITED
    for key, off in HANG_LIMITS.items():
        value = slurm.get(key)
        source = ctx.spec.provenance.get(f"slurm.{key}")
        if source in ("site", "defaults", None) or not _number(value) or value <= limit:
            continue
        ctx.error(f"slurm.{key}", f"{key}={value} is longer than the job's time limit (slurm.time {time} = {limit} s): "
                  f"the watchdog would never fire and a hang would hold the nodes until then; set {key} to at most "
                  f"{limit}{off}, or a longer slurm.time")


# Rules that build the overrides, in order; then compile composes them with verl's config
# and the JUDGES run on the composed (effective) values.
BUILD: tuple[Rule, ...] = (
    rule_method_pins,
    rule_bindings,
    rule_knobs,
    rule_rollout_defaults,
    rule_runtime_defaults,
    rule_raw_overrides,
    rule_no_validation,
    rule_custom_reward_function,
    rule_dapo,
    rule_rollout_correction,
    rule_pools,
    rule_teacher_needs_distillation,
    rule_separate_rollout_pool,
    rule_checkpoints,
    rule_entry,
)
JUDGES: tuple[Rule, ...] = (
    rule_estimator,
    rule_pins_hold,
    rule_pin_paths,
    rule_owned_keys,
    rule_rollout_n,
    rule_training_length,
    rule_argument_size,
    rule_filter_metric,
    rule_start_values,
    rule_overlong_buffer,
    rule_rollout_correction_inputs,
    rule_dynamic_sampling_reward_model,
    rule_checkpoints_resume,
    rule_raw_reward_function_file,
    rule_policy_loss_params,
    rule_value_types,
    rule_pitfalls,
    rule_logger,
    rule_separate_rollout_sizes,
    rule_separate_rollout_replicas,
    rule_other_trainers_keys,
    rule_async_training,
    rule_async_run_length,
    rule_separate_cpus,
    rule_spares,
    rule_hang_limits,
)
