"""Values that compose but fail the job when it starts, after it waited in the queue: ranges
torch, vLLM or verl refuse, enums and types verl checks only at run time, numbers Hydra reads
another way than written, a command line too long to exec."""

from __future__ import annotations

import difflib

from launcher.compile import typed
from launcher.compile.knobs import ACTOR, ENUM_KEYS, KNOBS, ROLLOUT, coerce_knob
from launcher.compile.rules.owned import effective_key
from launcher.compile.values import HYDRA_NUMBERISH, is_number
from launcher.errors import SpecError


def rule_training_length(ctx) -> None:
    """verl's fit loops over range(trainer.total_epochs) whatever total_training_steps says:
    0 or less trains nothing and the job "completes" at once."""
    epochs = ctx.get("trainer.total_epochs")
    if is_number(epochs) and epochs < 1:
        ctx.error(ctx.culprit("trainer.total_epochs", "knobs.total_epochs"),
                  f"trainer.total_epochs={epochs}: verl would train no step (its loop runs over the epochs); "
                  "set total_epochs: 1 or more (total_training_steps caps the steps)")
    steps = ctx.get("trainer.total_training_steps")
    if is_number(steps) and steps < 1:
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
    ACTOR + "optim.lr": (*_NOT_NEGATIVE, _TORCH),
    "critic.optim.lr": (*_NOT_NEGATIVE, _TORCH),
    "optim.lr": (*_NOT_NEGATIVE, _TORCH),  # SFT
    ROLLOUT + "temperature": (*_NOT_NEGATIVE, _VLLM),
    ROLLOUT + "val_kwargs.temperature": (*_NOT_NEGATIVE, _VLLM),
    ROLLOUT + "gpu_memory_utilization": (*_FRACTION, _VLLM),
    "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization": (*_FRACTION, _VLLM),
    ROLLOUT + "tensor_model_parallel_size": (*_AT_LEAST_ONE, _VLLM),
    "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size": (*_AT_LEAST_ONE, _VLLM),
    "data.train_batch_size": (*_AT_LEAST_ONE, _VERL),
    "data.max_prompt_length": (*_AT_LEAST_ONE, _VERL),
    "data.max_response_length": (*_AT_LEAST_ONE, _VERL),
    "data.max_length": (*_AT_LEAST_ONE, _VERL),  # SFT
    "data.micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),  # SFT
    ACTOR + "ppo_mini_batch_size": (*_AT_LEAST_ONE, _VERL),
    ACTOR + "ppo_micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),
    ACTOR + "ulysses_sequence_parallel_size": (*_AT_LEAST_ONE, _VERL),
    ROLLOUT + "log_prob_micro_batch_size_per_gpu": (*_AT_LEAST_ONE, _VERL),
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
        if not is_number(value) or ok(value):
            continue
        name = next((n for n, k in KNOBS.items() if (k.sft_key if ctx.sft else k.key) == key), None)
        ctx.error(ctx.culprit(key, f"knobs.{name}" if name else key),
                  f"{key}={value}: {who} refuses it at start; set {name or key} to {allowed}")


def rule_enum_values(ctx) -> None:
    """Enums verl checks only at run time (knobs.ENUM_KEYS), checked on the composed config."""
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
            close = difflib.get_close_matches(str(value), choices, n=1)
            ctx.error(ctx.culprit(key), f"{key}={value!r} is not valid in verl {ctx.method.version}; "
                      + (f"did you mean {close[0]}? " if close else "") + f"one of: {', '.join(choices)}")


# verl key -> the knob that types it, for the knob types a raw override's text is judged by
_TYPED_KNOB_TYPES = ("int", "float", "bool", "threshold", "rs_threshold", "rs_list")


def rule_raw_number_spelling(ctx) -> None:
    """A raw override's number as Hydra reads it: `_` is a digit separator to Hydra (`0.5_5` is
    0.55), so a number written with one, or IcePop's LOW_HIGH unquoted, is refused; a knob's
    key is typed as the knob (coerce_knob)."""
    knob_of = {knob.key.lstrip("+"): name for name, knob in KNOBS.items()
               if knob.key and knob.type in _TYPED_KNOB_TYPES}
    for source, prefix, key, text, _layer in ctx.raw:
        key, bare = effective_key(key), text.strip()
        if prefix == "~" or "${" in bare:  # an interpolation: its composed value is typed and judged
            continue
        if "_" in bare and HYDRA_NUMBERISH.fullmatch(bare) and key not in knob_of:
            ctx.error(source, f"{key}={bare}: Hydra reads '_' as a digit separator ({bare} -> "
                      f"{bare.replace('_', '')}); write the number without '_', or quote a string: {key}='{bare}'")
            continue
        name = knob_of.get(key)
        if name is None or (KNOBS[name].type in ("int", "float", "bool") and "_" not in bare):
            continue  # numbers and bools: typed on the composed value (launcher.compile.typed)
        _raw_knob_value(ctx, source, key, name, text)


def _raw_knob_value(ctx, source: str, key: str, name: str, text: str) -> None:
    bare = text.strip()
    quoted = len(bare) >= 2 and bare[0] == bare[-1] and bare[0] in "'\""
    try:
        coerce_knob(name, bare[1:-1] if quoted else text)
    except SpecError as exc:
        ctx.error(source, exc.message if key in source else f"{key}: {exc.message}")
        return
    if KNOBS[name].type in ("threshold", "rs_threshold") and "_" in bare and not quoted \
            and HYDRA_NUMBERISH.fullmatch(bare):
        ctx.error(source, f"{key}={bare}: Hydra reads this as the number {bare.replace('_', '')}, not LOW_HIGH; "
                  f"use the knob {name}: {bare} or quote it: {key}='{bare}'")


def rule_value_types(ctx) -> None:
    """A user value typed otherwise than verl reads the key (launcher.compile.typed); pool
    sizes below 1."""
    for field, message in (*typed.problems(ctx), *typed.list_problems(ctx)):
        ctx.error(field, message)
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


def rule_added_key_spelling(ctx) -> None:
    """A `+KEY` adds a key verl's config does not have, and verl never reads it: one a letter or
    two off a key verl has beside it (`+algorithm.kl_ctrl.kl_coeff` for kl_coef) composes
    without a word and the run trains with the default. Refused naming the key verl has."""
    if ctx.effective is None:
        return
    for source, prefix, key, _value, _layer in ctx.raw:
        parent, _, leaf = key.rpartition(".")
        if not prefix.startswith("+") or not parent or ctx.effective.base(key, _MISSING) is not _MISSING:
            continue
        siblings = ctx.effective.base(parent)
        if not isinstance(siblings, dict):
            continue
        close = difflib.get_close_matches(leaf, [str(k) for k in siblings if k != leaf], n=1, cutoff=0.85)
        if close:
            ctx.error(source, f"{prefix}{key} adds a key verl's {ctx.method.config_name} does not have, so verl never "
                      f"reads it; did you mean {parent}.{close[0]}? verl has that one: write "
                      f"{parent}.{close[0]}=VALUE without the {prefix}")


_MISSING = object()

