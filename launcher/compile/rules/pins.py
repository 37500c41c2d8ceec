"""The method's pins (configs/methods/: the estimator, DAPO's filter_groups and reward manager,
...): written first, and held on every path verl 0.9.1 offers to reopen them."""

from __future__ import annotations

from launcher.compile import catalog
from launcher.compile.values import hydra_value
from launcher.spec.layers import Layer

ESTIMATOR_KEY = "algorithm.adv_estimator"


def estimator_hint(version: str) -> str:
    """Each estimator and the plainest method that pins it (a colocated trainer, no teacher,
    the fewest pins), from the recipes: `grpo->verl/grpo, gae->verl/ppo, ...`."""
    plain = {}
    recipes = [catalog.get_method(version, name) for name in catalog.methods(version)]
    for method in sorted(recipes, key=lambda m: (len(m.pins), m.name)):
        if method.estimator and not method.separate_rollout and not method.teacher:
            plain.setdefault(method.estimator, f"verl/{method.name}")
    return ", ".join(f"{estimator}->{name}" for estimator, name in plain.items())


def estimator_message(ctx) -> str:
    return (f"algorithm.adv_estimator is pinned by the method (verl/{ctx.method.name} -> "
            f"{ctx.method.estimator or 'none'}); it is the method's identity, not a knob: remove it and "
            f"change the method instead ({estimator_hint(ctx.method.version)})")


def rule_estimator(ctx) -> None:
    """THE estimator rule: algorithm.adv_estimator is the method's identity (its pin in
    configs/methods/), refused wherever the user sets it (config.yaml's `algorithm:` or
    `knobs.adv_estimator`, --set adv_estimator=, a raw override flat or dict-valued), and
    checked on the composed config."""
    message = estimator_message(ctx)
    for source, key in ctx.user_keys():
        if key == ESTIMATOR_KEY:
            ctx.error(source, message)
    if ctx.method.estimator is not None and ctx.get(ESTIMATOR_KEY) != ctx.method.estimator:
        ctx.error(ctx.culprit(ESTIMATOR_KEY), message)


def rule_method_pins(ctx) -> None:
    """Pins of the method (estimator, DAPO's filter_groups and reward manager) come first."""
    for key, value in ctx.method.pins.items():
        ctx.set(key, value, Layer.PIN)


def pin_message(ctx, key, value) -> str:
    hint = f"; {ctx.method.pin_hints[key]}" if key in ctx.method.pin_hints else ""
    return f"{key} is pinned to {hydra_value(value)} by verl/{ctx.method.name}; remove it{hint}"


def rule_pins_hold(ctx) -> None:
    """Every pin but the estimator (rule_estimator) holds: a user value that differs is refused,
    in any spelling, and the composed config must carry the pinned value."""
    for key, value in ctx.method.pins.items():
        if key == ESTIMATOR_KEY:
            continue
        if ctx.get(key) != value:
            ctx.error(ctx.culprit(key), pin_message(ctx, key, value))


# Paths of verl 0.9.1 that reopen a pin: the pinned key -> {key on that path: (what it must
# be, why)}, read from verl's code; held for every method that pins the key. `None` as the
# value: unset (null).
PIN_PATHS = {
    "algorithm.filter_groups.enable": {
        "trainer.v1.sampler.custom_sampler.path": (None, "with a custom sampler verl 0.9.1's "
                                                   "trainer_base._build_sampler skips DAPO's group filtering "
                                                   "(filter_groups is passed only to the built-in ReplayBuffer)"),
        "trainer.v1.sampler.custom_sampler.name": (None, "with a custom sampler verl 0.9.1's "
                                                   "trainer_base._build_sampler skips DAPO's group filtering"),
    },
    "reward.reward_manager.name": {
        "reward.reward_manager.source": ("register", "with source=importlib verl 0.9.1's resolve_reward_manager_cls "
                                         "loads reward.reward_manager.module.path instead of the {pinned} reward "
                                         "manager"),
    },
}


def rule_pin_paths(ctx) -> None:
    """Pins hold on every path verl 0.9.1 offers (PIN_PATHS). Group filtering: a custom sampler
    (trainer.v1.sampler.custom_sampler) skips it; a pinned reward manager:
    reward.reward_manager.source other than `register` replaces it."""
    if ctx.sft:
        return
    for pin, paths in PIN_PATHS.items():
        if pin not in ctx.method.pins:
            continue
        for key, (want, why) in paths.items():
            value = ctx.get(key)
            if value != want and not (want is None and value in ("", None)):
                why = why.format(pinned=ctx.method.pins[pin])
                ctx.error(ctx.culprit(key), f"{key}={hydra_value(value)}: {why}; verl/{ctx.method.name} pins it "
                          f"({'unset' if want is None else want}): remove it")


def rule_critic_enable(ctx) -> None:
    """critic.enable decides over the estimator whether verl trains a critic (verl 0.9.1's
    need_critic, trainer/ppo/utils.py:96): it must say what the method's recipe says."""
    enable = ctx.get("critic.enable")
    if ctx.sft or enable is None or bool(enable) == ctx.method.critic:
        return
    with_critic = " or ".join(catalog.named(ctx.method.version, lambda m: m.critic))
    ctx.error(ctx.culprit("critic.enable"), f"critic.enable={hydra_value(enable)}: "
              + (f"verl/{ctx.method.name}'s {str(ctx.method.estimator).upper()} needs its critic's values, and verl "
                 "0.9.1 would train without one" if ctx.method.critic else
                 f"verl 0.9.1 would load and train a critic model that verl/{ctx.method.name} does not have and "
                 "sf's pools do not place") + f"; remove it (the method decides, e.g. {with_critic} has a critic)")


def rule_trainer_v1(ctx) -> None:
    """Every RL method that does not pin it: trainer.use_v1=false runs the deprecated
    main_ppo_v0 trainer (main_ppo.py:183)."""
    if ctx.sft:
        return
    if "trainer.use_v1" not in ctx.method.pins and ctx.get("trainer.use_v1", True) is not True:
        # (a method that needs the v0 trainer pins it: verl/remax; the pin rules hold that)
        ctx.error(ctx.culprit("trainer.use_v1"), "trainer.use_v1=false makes verl 0.9.1's main_ppo run the "
                  "deprecated main_ppo_v0 trainer (main_ppo.py:183-192), which sf's pools, pins and checkpoints are "
                  "not built for: remove it")


def rule_rollout_in_training_pool(ctx) -> None:
    """A colocated method's rollout shares the training pool: a standalone rollout pool
    (actor_rollout_ref.rollout.nnodes > 0, trainer.v1.trainer_mode=separate_async) or a
    rollout n_gpus_per_node other than the pool's asks Ray for GPUs Slurm never allocated."""
    if ctx.sft or ctx.method.separate_rollout:
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
