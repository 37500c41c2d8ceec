"""The knob table: each knob sf takes (config.yaml's `knobs:`, `--set NAME=VALUE`), the verl
key it reaches for the RL methods and for SFT, its type, and the enums verl checks only at
run time. coerce_knob types a value as the knob says, never guessing. Pure."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from launcher.compile.values import BOOL_WORDS, NUMBER, parse_scalar
from launcher.errors import SpecError

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
KL_CTRL_TYPES = ("fixed", "adaptive")  # verl 0.9.1 core_algos.get_kl_controller raises on any other

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
    "algorithm.kl_ctrl.type": KL_CTRL_TYPES,
}

# ----------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Knob:
    key: str | None  # Hydra key for the RL methods (main_ppo / ppo_trainer); None: not for RL
    type: str  # int | float | bool | str | enum | list | threshold | rs_list
    sft_key: str | None = None  # Hydra key for SFT (sft_trainer_engine); None: not for SFT
    choices: tuple[str, ...] = ()
    help: str = ""


ACTOR = "actor_rollout_ref.actor."
ROLLOUT = "actor_rollout_ref.rollout."
OVERLONG = "+reward.reward_kwargs.overlong_buffer_cfg."
CORRECTION = "algorithm.rollout_correction."


KNOBS: dict[str, Knob] = {
    # optimisation
    "actor_lr": Knob(ACTOR + "optim.lr", "float", "optim.lr", help="actor learning rate"),
    "critic_lr": Knob("critic.optim.lr", "float", help="critic learning rate (ppo)"),
    "lr": Knob(ACTOR + "optim.lr", "float", "optim.lr", help="alias of actor_lr"),
    "entropy_coeff": Knob(ACTOR + "entropy_coeff", "float"),
    "ppo_epochs": Knob(ACTOR + "ppo_epochs", "int"),
    # batches
    "train_batch_size": Knob("data.train_batch_size", "int", "data.train_batch_size", help="prompts per step"),
    "ppo_mini_batch_size": Knob(ACTOR + "ppo_mini_batch_size", "int", help="prompts per actor update"),
    "ppo_micro_batch_size_per_gpu": Knob(ACTOR + "ppo_micro_batch_size_per_gpu", "int"),
    "critic_ppo_micro_batch_size_per_gpu": Knob("critic.ppo_micro_batch_size_per_gpu", "int"),
    "log_prob_micro_batch_size_per_gpu": Knob(ROLLOUT + "log_prob_micro_batch_size_per_gpu", "int"),
    "ref_log_prob_micro_batch_size_per_gpu": Knob("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "int"),
    "micro_batch_size_per_gpu": Knob(None, "int", "data.micro_batch_size_per_gpu", help="SFT micro batch"),
    "use_dynamic_bsz": Knob(ACTOR + "use_dynamic_bsz", "bool", "data.use_dynamic_bsz"),
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
    "use_kl_loss": Knob(ACTOR + "use_kl_loss", "bool"),
    "kl_loss_coef": Knob(ACTOR + "kl_loss_coef", "float"),
    "kl_loss_type": Knob(ACTOR + "kl_loss_type", "enum", choices=KL_LOSS_TYPES),
    "use_kl_in_reward": Knob("algorithm.use_kl_in_reward", "bool"),
    "kl_coef": Knob("algorithm.kl_ctrl.kl_coef", "float"),
    # policy loss
    "policy_loss_mode": Knob(ACTOR + "policy_loss.loss_mode", "enum", choices=tuple(POLICY_LOSS_MODES)),
    "clip_ratio": Knob(ACTOR + "clip_ratio", "float"),
    "clip_ratio_low": Knob(ACTOR + "clip_ratio_low", "float"),
    "clip_ratio_high": Knob(ACTOR + "clip_ratio_high", "float"),
    "clip_ratio_c": Knob(ACTOR + "clip_ratio_c", "float"),
    "loss_agg_mode": Knob(ACTOR + "loss_agg_mode", "enum", choices=LOSS_AGG_MODES),
    "dro_beta": Knob(ACTOR + "policy_loss.dro_beta", "float", help="DRO's quadratic penalty (policy_loss_mode: dro)"),
    # rollout
    "rollout_n": Knob(ROLLOUT + "n", "int", help="responses per prompt"),
    "rollout_name": Knob(ROLLOUT + "name", "enum", choices=ROLLOUT_NAMES),
    "gpu_memory_utilization": Knob(ROLLOUT + "gpu_memory_utilization", "float"),
    "tensor_model_parallel_size": Knob(ROLLOUT + "tensor_model_parallel_size", "int"),
    "temperature": Knob(ROLLOUT + "temperature", "float"),
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
    "rollout_calculate_log_probs": Knob(ROLLOUT + "calculate_log_probs", "bool"),
    "rollout_is": Knob(CORRECTION + "rollout_is", "enum", choices=ROLLOUT_IS),
    "rollout_is_threshold": Knob(CORRECTION + "rollout_is_threshold", "threshold"),
    "rollout_rs": Knob(CORRECTION + "rollout_rs", "rs_list"),
    "rollout_rs_threshold": Knob(CORRECTION + "rollout_rs_threshold", "rs_threshold"),
    # DAPO
    "filter_groups": Knob("algorithm.filter_groups.enable", "bool"),
    "filter_metric": Knob("algorithm.filter_groups.metric", "str",
                          help="the metric DAPO's group filter reads (acc, score, seq_reward, reward); null: verl's "
                               "default, reward"),
    "max_inflight_gen_batches": Knob("algorithm.filter_groups.max_inflight_gen_batches", "int"),
    "reward_manager": Knob("reward.reward_manager.name", "enum", choices=REWARD_MANAGERS),
    "overlong_buffer": Knob(OVERLONG + "enable", "bool"),
    "overlong_buffer_len": Knob(OVERLONG + "len", "int"),
    "overlong_penalty_factor": Knob(OVERLONG + "penalty_factor", "float"),
    "overlong_buffer_log": Knob(OVERLONG + "log", "bool"),
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


def coerce_knob(name: str, value: Any) -> Any:
    """Check and convert a knob value to its type. Raises SpecError("knobs.NAME", ...).

    Typed, never guessed: `_` is never a digit separator (`0.5_5` is IcePop's LOW_HIGH pair
    for a threshold and an error for a number), booleans are true/false/yes/no/on/off only,
    an int given as a float must be whole (1024.0, 1e3), and a number is emitted in one form
    whatever its spelling (1e-6, 1e-06, 1.0e-6). One function per knob type (_COERCE)."""
    knob = KNOBS[name]
    field = f"knobs.{name}"
    t = knob.type
    if isinstance(value, str) and t in ("int", "float"):
        text = value.strip()
        if "_" in text:
            raise SpecError(field, f"{value!r}: sf does not read '_' as a digit separator; write the number "
                            f"without it, e.g. {name}: {text.replace('_', '')}")
        value = parse_scalar(text)
    if isinstance(value, str) and t in ("bool", "str"):
        word = value.strip().lower()
        if t == "bool" and word in BOOL_WORDS:
            value = BOOL_WORDS[word]
        elif word in ("null", "none", "~"):  # --set filter_metric=null: verl's default, as `filter_metric: null`
            value = None
    if value is None:
        return None
    return _COERCE[t](value, knob, name, field)


def _as_int(value, _knob, name, field):
    fractional = isinstance(value, float) and not value.is_integer()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or fractional:
        raise SpecError(field, f"{value!r} is not a whole number; write e.g. {name}: 4")
    return int(value)


def _as_float(value, _knob, name, field):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(field, f"{value!r} is not a number; write e.g. {name}: 1.0e-6")
    return float(value)


def _as_bool(value, _knob, name, field):
    if not isinstance(value, bool):
        raise SpecError(field, f"{value!r} is not true/false; write {name}: true or {name}: false")
    return value


def _as_enum(value, knob, _name, field):
    if isinstance(value, bool):
        raise SpecError(field, f"{value!r} is a boolean, not one of {', '.join(knob.choices)}")
    text = str(value)
    if text not in knob.choices:
        close = difflib.get_close_matches(text.lower(), knob.choices, n=1)
        raise SpecError(field, f"{text!r} is not one of {', '.join(knob.choices)}"
                        + (f"; did you mean {close[0]}?" if close else ""))
    return text


def _as_list(value, _knob, name, field):
    if isinstance(value, str):
        if "," not in value and not value.startswith("["):
            return value.strip()  # verl takes one backend name as a string too
        value = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(field, f"{value!r} is not a list of names; write e.g. {name}: [console, wandb]")
    return value


def _as_str(value, _knob, name, field):
    if isinstance(value, (dict, list, bool)):
        raise SpecError(field, f"{value!r} is not a plain string; quote it, e.g. {name}: \"{value}\"")
    return str(value)


def _as_rs_list(value, _knob, name, field):
    if isinstance(value, list) and not all(isinstance(v, str) for v in value) or isinstance(value, (dict, bool)):
        raise SpecError(field, f"{value!r} is not a list of rollout_rs options; write e.g. {name}: token_k1,seq_sum_k2 "
                        f"(one of {', '.join(ROLLOUT_RS)} each)")
    text = ",".join(value) if isinstance(value, list) else str(value)
    bad = [p for p in text.split(",") if p.strip() not in ROLLOUT_RS]
    if bad:
        raise SpecError(field, f"{', '.join(bad)} not in {', '.join(ROLLOUT_RS)} (comma-separated)")
    return text


def _positive(text: str) -> float | None:
    t = text.strip()
    if "_" in t or not NUMBER.fullmatch(t):
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


# knob type -> its checker (value, knob, name, field) -> the typed value
_COERCE = {
    "int": _as_int, "float": _as_float, "bool": _as_bool, "enum": _as_enum, "list": _as_list, "str": _as_str,
    "threshold": lambda value, _knob, _name, field: parse_threshold(value, field),
    "rs_threshold": lambda value, _knob, _name, field: parse_rs_threshold(value, field),
    "rs_list": _as_rs_list,
}
