"""The rules of the verl runtime: one named check per rule, in one visible order.

Every rule is a function `rule_<name>(ctx)` over a compile context (launcher.compile.context.Ctx).
A rule reads the spec, the method and the overrides gathered so far, and either sets
overrides, adds warnings, or adds SpecErrors whose message says how to fix the problem.
compile.compile_plan runs the BUILD rules, then the JUDGES, and raises all errors of one pass
together. The rules live by what they check:

    pins.py           the method's pins (the estimator first) and the paths that reopen them
    owned.py          keys a binding, the pools or the run own; legacy reward keys; refusal()
    inputs.py         bindings, knobs, raw overrides, runtime defaults, reward function, entry
    algorithm.py      rollout n, DAPO, rollout correction, policy loss parameters
    pools.py          roles -> pools (trainer.*, distillation.*, reward.reward_model.*)
    disaggregated.py  verl/grpo-one-step-off and verl/grpo-async (a rollout pool of its own)
    resume.py         checkpoints and resuming a requeued job
    start_values.py   values torch, vLLM or verl refuse at start; enums and types; argv size
    pitfalls.py       the tutorial's pitfalls and the file logger
    healing.py        spare nodes and the watchdog's limits

The knob table is launcher.compile.knobs; Hydra value text is launcher.compile.values.
Pure: no I/O here (the catalog files are read by launcher.compile.catalog).
"""

from __future__ import annotations

from typing import Callable

from launcher.compile.rules import (
    algorithm,
    disaggregated,
    healing,
    inputs,
    owned,
    pins,
    pitfalls,
    pools,
    resume,
    start_values,
)

Rule = Callable[["Ctx"], None]  # noqa: F821  (launcher.compile.context.Ctx)

# Rules that build the overrides, in order; then compile composes them with verl's config
# and the JUDGES run on the composed (effective) values.
BUILD: tuple[Rule, ...] = (
    pins.rule_method_pins,
    inputs.rule_bindings,
    inputs.rule_knobs,
    inputs.rule_rollout_defaults,
    inputs.rule_runtime_defaults,
    inputs.rule_raw_overrides,
    inputs.rule_no_validation,
    inputs.rule_custom_reward_function,
    algorithm.rule_dapo,
    algorithm.rule_rollout_correction,
    pools.rule_pools,
    pools.rule_teacher_pool,
    pools.rule_reward_pool,
    pools.rule_every_pool_has_a_role,
    pools.rule_teacher_needs_distillation,
    disaggregated.rule_separate_rollout_pool,
    resume.rule_checkpoints,
    inputs.rule_entry,
)
JUDGES: tuple[Rule, ...] = (
    pins.rule_estimator,
    pins.rule_pins_hold,
    pins.rule_pin_paths,
    pins.rule_critic_enable,
    pins.rule_trainer_v1,
    pins.rule_rollout_in_training_pool,
    owned.rule_owned_keys,
    algorithm.rule_rollout_n,
    start_values.rule_training_length,
    start_values.rule_argument_size,
    algorithm.rule_filter_metric,
    start_values.rule_start_values,
    algorithm.rule_overlong_buffer,
    algorithm.rule_rollout_correction_inputs,
    algorithm.rule_rollout_rs_threshold,
    algorithm.rule_dynamic_sampling_reward_model,
    resume.rule_checkpoints_resume,
    inputs.rule_raw_reward_function_file,
    algorithm.rule_policy_loss_params,
    start_values.rule_enum_values,
    start_values.rule_raw_number_spelling,
    start_values.rule_value_types,
    start_values.rule_added_key_spelling,
    pitfalls.rule_pitfalls,
    pitfalls.rule_batch_sizes,
    pitfalls.rule_micro_batch_sizes,
    pitfalls.rule_logger,
    disaggregated.rule_separate_rollout_sizes,
    disaggregated.rule_separate_rollout_replicas,
    disaggregated.rule_other_trainers_keys,
    disaggregated.rule_async_numbers,
    disaggregated.rule_async_training,
    disaggregated.rule_async_run_length,
    disaggregated.rule_separate_cpus,
    healing.rule_spares,
    healing.rule_hang_limits,
)
