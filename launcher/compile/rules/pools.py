"""Roles -> pools: the train pool fills trainer.*, the teacher's distillation.*, the reward
model's reward.reward_model.*; every role on a pool verl 0.9.1 can put it on."""

from __future__ import annotations

from launcher.compile import catalog
from launcher.compile.rules.disaggregated import rule_rollout_not_colocated
from launcher.compile.rules.owned import OWNED_KEYS
from launcher.spec.layers import Layer


def _by_name(ctx) -> dict:
    return {p.name: p for p in ctx.pools}


def _train_pool(ctx):
    """The actor's pool (roles.actor, else the first)."""
    return _by_name(ctx).get(ctx.roles.get("actor", ctx.pools[0].name), ctx.pools[0])


def rule_pools(ctx) -> None:
    """Roles -> pools: every role on a declared pool, the actor on the first (het group 0);
    the train pool fills trainer.*. SFT runs on one pool."""
    pools = ctx.pools
    if not pools:
        return
    by_name = _by_name(ctx)
    for role, pool_name in ctx.roles.items():
        if pool_name not in by_name:
            ctx.error(f"spec.resources.roles.{role}",
                      f"pool {pool_name!r} is not declared; pools: {', '.join(by_name)}")
    train = _train_pool(ctx)
    if train.het_group != 0:
        ctx.error("spec.resources.roles.actor", "the actor must run on the first pool (het group 0, where Ray's head "
                                                "runs)")
    rule_roles_verl_can_place(ctx, train)
    ctx.set("trainer.nnodes", train.nodes, Layer.TOPOLOGY)
    ctx.set("trainer.n_gpus_per_node", train.gpus_per_node, Layer.TOPOLOGY)
    if ctx.sft and len(pools) > 1:
        ctx.error("spec.resources.pools", f"verl/{ctx.method.name} runs under {ctx.method.launcher} on one pool; "
                  "declare a single pool")


def rule_teacher_pool(ctx) -> None:
    """A method with a teacher (its recipe's `teacher: true`): the teacher on the second pool
    fills distillation.* (sf turns distillation.enabled on), its model from teacher.model."""
    if not ctx.pools or ctx.sft or not ctx.method.teacher:
        return
    by_name, teacher_pool = _by_name(ctx), ctx.roles.get("teacher")
    if len(ctx.pools) < 2 or teacher_pool is None:
        ctx.error("spec.resources.pools", f"verl/{ctx.method.name} needs two pools with the teacher on the second: "
                  "the teacher is placed on top of the training pool. Declare pools [{name: train, ...}, "
                  "{name: teach, ...}] and roles {actor: train, rollout: train, teacher: teach}")
    elif by_name.get(teacher_pool) is not None and by_name[teacher_pool].het_group != 1:
        ctx.error("spec.resources.roles.teacher", f"the teacher must be on the second pool, not {teacher_pool!r}")
    elif by_name.get(teacher_pool) is not None:
        tp = by_name[teacher_pool]
        ctx.set("distillation.enabled", True, Layer.TOPOLOGY)
        ctx.set("distillation.nnodes", tp.nodes, Layer.TOPOLOGY)
        ctx.set("distillation.n_gpus_per_node", tp.gpus_per_node, Layer.TOPOLOGY)
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
        ctx.error("teacher.model", f"verl/{ctx.method.name} needs a teacher: set teacher: {{model: PATH_OR_HF_ID}} "
                  "in config.yaml")
    else:
        ctx.set("distillation.teacher_models.teacher_model.model_path", teacher, Layer.BINDING,
                origin=ctx.origin_of("teacher.model"))


def rule_reward_pool(ctx) -> None:
    """reward.model -> reward.reward_model.*; with roles.reward on a pool of its own, that pool
    fills reward.reward_model.nnodes / n_gpus_per_node."""
    if not ctx.pools or ctx.sft:
        return
    by_name = _by_name(ctx)
    reward_model = (ctx.values.get("reward") or {}).get("model")
    reward_pool = ctx.roles.get("reward")
    if reward_pool is not None and not reward_model:
        ctx.error("reward.model", "a reward pool is declared but no reward model: set reward: {model: PATH}")
    if not reward_model:
        return
    ctx.set("reward.reward_model.enable", True, Layer.BINDING, origin=ctx.origin_of("reward.model"))
    ctx.set("reward.reward_model.model_path", reward_model, Layer.BINDING, origin=ctx.origin_of("reward.model"))
    ctx.set("reward.reward_model.rollout.name", ctx.get("actor_rollout_ref.rollout.name", "vllm"), Layer.BINDING,
            origin=ctx.origin_of("reward.model"))
    if reward_pool is not None and reward_pool in by_name:
        rp = by_name[reward_pool]
        if rp.het_group == 0:
            ctx.error("spec.resources.roles.reward", "the reward pool must be a pool of its own, not the training "
                                                     "pool")
        ctx.set("reward.reward_model.enable_resource_pool", True, Layer.TOPOLOGY)
        ctx.set("reward.reward_model.nnodes", rp.nodes, Layer.TOPOLOGY)
        ctx.set("reward.reward_model.n_gpus_per_node", rp.gpus_per_node, Layer.TOPOLOGY)


def rule_every_pool_has_a_role(ctx) -> None:
    """A pool no role runs on would be allocated and idle."""
    if not ctx.pools or ctx.sft:
        return
    used = {_train_pool(ctx).name} | set(ctx.roles.values())
    for p in ctx.pools:
        if p.name not in used:
            ctx.error(f"spec.resources.pools.{p.name}", "pool has no role; map a role to it in spec.resources.roles or "
                                                        "remove it")


def rule_teacher_needs_distillation(ctx) -> None:
    """A teacher (the `teacher:` block, roles.teacher, the teacher_* knobs, any distillation.*
    key) on a method without one: verl reads distillation.* only when distillation.enabled,
    which sf sets for the methods whose recipe has a teacher alone, so the teacher would be
    dropped without a word. Keys sf owns (distillation.enabled, its pool sizes) are
    rule_owned_keys' to name."""
    if ctx.method.teacher:
        return
    use = " or ".join(catalog.named(ctx.method.version, lambda m: m.teacher))
    fix = f"verl/{ctx.method.name} has no teacher (only {use} distils from one)"
    if (ctx.values.get("teacher") or {}).get("model"):
        ctx.error("teacher.model", f"{fix}, so this teacher would be dropped; remove the teacher: block, or use "
                  f"method: {use}")
    if ctx.roles.get("teacher") is not None:
        ctx.error("spec.resources.roles.teacher", f"{fix}; remove the role, or use method: {use}")
    for source, key in ctx.user_keys():
        owned = any(key == own or own.startswith(key + ".") for own in OWNED_KEYS)
        if (key == "distillation" or key.startswith("distillation.")) and not owned:
            ctx.error(source, f"{fix}: verl reads {key} only when distillation is on; remove it, or use "
                      f"method: {use}")


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
            verl_pool = ctx.method.verl_pools.get(role)
            ctx.error(f"spec.resources.roles.{role}",
                      f"verl 0.9.1's {ctx.method.entry_module} runs the {role} in the actor's resource pool"
                      f"{f' ({verl_pool})' if verl_pool else ''}, so it cannot run on pool {pool_name!r}; map {role} "
                      f"to {train.name!r} (the actor's pool) or remove it")
