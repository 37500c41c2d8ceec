"""Keys sf owns (set from a binding, the pools or the run) and keys a spec field sets: a raw
override of one is refused with the flag or field that sets it. Legacy top-level reward keys
count as the reward.* key verl 0.9.1 reads, so no spelling dodges an owner."""

from __future__ import annotations

from launcher.compile import catalog, resolve
from launcher.compile.rules import pins
from launcher.compile.values import hydra_value
from launcher.spec.layers import Layer

TOPOLOGY_KEYS = (
    "trainer.nnodes", "trainer.n_gpus_per_node", "distillation.nnodes", "distillation.n_gpus_per_node",
    "reward.reward_model.nnodes", "reward.reward_model.n_gpus_per_node",
    "reward.reward_model.enable_resource_pool",
)
TEACHER_SWITCH = "distillation.enabled"  # sf's: on for a method with a teacher, off for the rest
_TOPOLOGY_HINT = "comes from the pools; use --profile SERIES:NxG or spec.resources.pools instead"
_MODEL_HINT = "is owned by the model binding; use --model PATH_OR_HF_ID (or `model:` in config.yaml) instead"
_TRAIN_HINT = ("is owned by the data binding; use --train-data FILE or --train-dataset OWNER/NAME@VERSION "
               "(or data.train in config.yaml) instead")
_VAL_HINT = "is owned by the data binding; use --validation-data FILE (or data.validation.files in config.yaml) instead"
# Hydra keys sf sets from a binding, the pools or the run: a raw override of one is refused
# (in any spelling: flat, dict-valued, +key, ~key, legacy alias), with the way to set it.
OWNED_KEYS: dict[str, str] = {
    **{k: _TOPOLOGY_HINT for k in TOPOLOGY_KEYS},
    TEACHER_SWITCH: ("is set by sf: on for a method that distils from a teacher ({teachers}, with a teacher: "
                     "block and the teacher's pool), off for the others; remove it, or use method: {teachers}"),
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


def effective_key(key: str) -> str:
    """The key a raw override really sets: legacy reward keys count as their reward.*
    rewrite, so a pin or a rule cannot be dodged through the old name."""
    return (legacy_rewrite(key) or key).lstrip("+") if is_legacy(key) else key


def is_legacy(key: str) -> bool:
    return key.startswith(("reward_model.", "custom_reward_function.", "sandbox_fusion.")) or key in (
        "reward_model", "custom_reward_function", "sandbox_fusion"
    )


def owned_message(ctx, key: str) -> str:
    """`KEY <who owns it and the way to set it>` for a key sf owns."""
    hint = (SFT_OWNED_KEYS if ctx.sft else OWNED_KEYS)[key]
    if "{teachers}" in hint:
        hint = hint.format(teachers=" or ".join(catalog.named(ctx.method.version, lambda m: m.teacher)))
    return f"{key} {hint}"


def refusal(ctx, conflict) -> str:
    """The message of a write that the owner of its key (a pin, a binding, the pools, the run)
    refuses (launcher.compile.resolve): the rule's own message where there is one."""
    owner, key = conflict.owner, conflict.owner.key
    if owner.layer is Layer.PIN:
        if key == pins.ESTIMATOR_KEY:
            return pins.estimator_message(ctx)
        return pins.pin_message(ctx, key, owner.value)
    owned = SFT_OWNED_KEYS if ctx.sft else OWNED_KEYS
    if key in owned:
        return owned_message(ctx, key)
    if key in FIELD_KEYS:
        return (f"{key} is set from {FIELD_KEYS[key]} ({ctx.bound.get(key, owner.origin).label}); change it there and "
                "remove this override")
    return resolve.conflict_message(conflict, hydra_value)


def rule_owned_keys(ctx) -> None:
    """Bindings, pools and the run own their keys: a raw override of one is refused with the
    flag or field that sets it, and the composed config must carry sf's value."""
    owned = SFT_OWNED_KEYS if ctx.sft else OWNED_KEYS
    raw = [w for w in ctx.user_writes() if not w.knob]  # a knob that reaches an owned key is refused where it is
    for w in raw:
        for own in owned:
            if w.key == own or own.startswith(w.key + "."):
                ctx.error(w.field, owned_message(ctx, own))
    for w in raw:
        if w.key in FIELD_KEYS and w.key in ctx.bound:
            ctx.error(w.field, f"{w.key} is set from {FIELD_KEYS[w.key]} ({ctx.bound[w.key].label}); change it there "
                      "and remove this override")
    for key in owned:
        if key in ctx.overrides and ctx.overrides[key][1] != "~":
            set_value = ctx.overrides[key][2]
            if ctx.get(key) != set_value and ctx.effective is not None:
                ctx.error(ctx.culprit(key), owned_message(ctx, key))
