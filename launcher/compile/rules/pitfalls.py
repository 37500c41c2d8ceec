"""The tutorial's pitfalls and the logger `sf metrics` reads: warnings, and the batch sizes
verl's main_ppo refuses at start-up (errors where sf knows verl checks them)."""

from __future__ import annotations

import math

METRICS_LOGGER = "file"


def rule_logger(ctx) -> None:
    """`sf metrics` / `sf plot` read verl's file logger: warn when trainer.logger leaves it out."""
    logger = ctx.get("trainer.logger")
    names = [logger] if isinstance(logger, str) else list(logger or [])
    if METRICS_LOGGER not in names:
        ctx.warn(f"trainer.logger={names} leaves out '{METRICS_LOGGER}', the backend `sf metrics` and `sf plot` read; "
                 f"add it, e.g. logger: [console, {METRICS_LOGGER}]")


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
    tp = g("actor_rollout_ref.rollout.tensor_model_parallel_size", 2)
    if isinstance(tp, int) and isinstance(gpn, int) and tp > gpn:
        ctx.warn(f"tensor_model_parallel_size={tp} is larger than the {gpn} GPUs per node; set "
                 f"tensor_model_parallel_size: {gpn} or fewer")


def rule_batch_sizes(ctx) -> None:
    """The batch sizes verl.trainer.main_ppo's validate_config refuses at start (without
    dynamic batch sizes; the divisibility for FSDP, Megatron's is by its data-parallel size):
    errors where verl's own main_ppo runs, warnings for the other entries."""
    if ctx.sft:
        return
    g = ctx.get
    gpn, nodes = g("trainer.n_gpus_per_node"), g("trainer.nnodes")
    bs = g("data.train_batch_size", 1024)
    n = g("actor_rollout_ref.rollout.n", 1)
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


def rule_micro_batch_sizes(ctx) -> None:
    """Without dynamic batch sizes verl asserts each micro batch size is set: warned."""
    if ctx.sft:
        return
    g = ctx.get
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
