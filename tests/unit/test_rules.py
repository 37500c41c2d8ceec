"""One test (or a few) per rule of launcher.compile.rules (its modules, by theme)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import RUN_DIR, base, compile_values, errors_of, overrides_of  # noqa: E402

from launcher.compile.knobs import KNOBS  # noqa: E402


def _one(errors, *needles):
    assert errors, "expected an error"
    assert any(all(n in e for n in needles) for e in errors), errors


# rule_bindings
def test_bindings_model_and_data():
    ov = overrides_of(base("grpo"))
    assert ov["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert ov["data.train_files"] == "/data/gsm8k/train.parquet"
    assert ov["data.val_files"] == "/data/gsm8k/test.parquet"
    assert "critic.model.path" not in ov  # no critic for grpo
    assert overrides_of(base("ppo"))["critic.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_bindings_missing_model_and_data():
    v = base("grpo")
    del v["model"]
    v["data"] = {}
    errs = errors_of(v)
    _one(errs, "model", "--model")
    _one(errs, "data.train.files", "--train-data")


def test_bindings_sft_keys():
    ov = overrides_of(base("sft"))
    assert ov["model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert ov["data.train_files"] == "/data/gsm8k/train.parquet" and ov["data.val_files"] == "/data/gsm8k/test.parquet"
    assert "actor_rollout_ref.model.path" not in ov


def test_no_validation_turns_validation_off():
    v = base("grpo")
    v["data"] = {"train": {"files": "/d/t.parquet"}}
    plan = compile_values(v)
    ov = dict(o.split("=", 1) for o in plan.overrides)
    assert ov["trainer.test_freq"] == "-1" and ov["trainer.val_before_train"] == "False"
    assert any("no validation data" in w for w in plan.warnings)


# rule_estimator_pinned / rule_method_pins
@pytest.mark.parametrize("method,estimator", [("grpo", "grpo"), ("rloo", "rloo"), ("reinforce-baseline", "reinforce_plus_plus_baseline"),
                                              ("remax", "remax"), ("ppo", "gae"), ("dapo", "grpo")])
def test_method_pins_estimator(method, estimator):
    plan = compile_values(base(method))
    assert plan.overrides[0] == f"algorithm.adv_estimator={estimator}"


@pytest.mark.parametrize("override", ["algorithm.adv_estimator=rloo", "+algorithm.adv_estimator=rloo", "algorithm.adv_estimator=grpo"])
def test_estimator_refused_in_overrides(override):
    _one(errors_of(base("grpo", overrides=[override])), "pinned", "change the method")


def test_dapo_pins_filter_groups_and_reward_manager():
    ov = overrides_of(base("dapo"))
    assert ov["algorithm.filter_groups.enable"] == "True"
    assert ov["reward.reward_manager.name"] == "dapo"
    _one(errors_of(base("dapo", knobs={"filter_groups": False})), "pinned", "verl/grpo")
    _one(errors_of(base("dapo", overrides=["reward.reward_manager.name=naive"])), "pinned")
    # the legacy key is rewritten to the same reward.* key: the pin holds there too
    _one(errors_of(base("dapo", overrides=["reward_model.reward_manager=naive"])), "pinned", "dapo")


# rule_rollout_n
@pytest.mark.parametrize("method", ["grpo", "rloo", "reinforce-baseline", "dapo"])
def test_group_methods_need_n_ge_2(method):
    _one(errors_of(base(method, knobs={"rollout_n": 1})), "rollout_n must be >= 2")
    _one(errors_of(base(method, overrides=["actor_rollout_ref.rollout.n=1"])), ">= 2")


def test_remax_needs_n_1():
    _one(errors_of(base("remax", knobs={"rollout_n": 4})), "rollout_n must be 1")
    assert overrides_of(base("remax"))["actor_rollout_ref.rollout.n"] == "1"


# policy_loss_mode
@pytest.mark.parametrize("knob,verl", [("vanilla", "vanilla"), ("gspo", "gspo"), ("cispo", "cispo"), ("gmpo", "geo_mean"),
                                        ("clip-cov", "clip_cov"), ("kl-cov", "kl_cov"), ("gpg", "gpg")])
def test_policy_loss_mode_mapping(knob, verl):
    ov = overrides_of(base("grpo", knobs={"policy_loss_mode": knob}))
    assert ov["actor_rollout_ref.actor.policy_loss.loss_mode"] == verl


def test_policy_loss_mode_unknown():
    _one(errors_of(base("grpo", knobs={"policy_loss_mode": "ppo2"})), "knobs.policy_loss_mode", "gspo")
    _one(errors_of(base("grpo", overrides=["actor_rollout_ref.actor.policy_loss.loss_mode=gmpo"])), "geo_mean")


# rule_dapo
def test_dapo_defaults_on_reward_keys():
    plan = compile_values(base("dapo"))
    ov = set(plan.overrides)
    for item in ("+reward.reward_kwargs.overlong_buffer_cfg.enable=True", "+reward.reward_kwargs.overlong_buffer_cfg.len=4096",
                 "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0", "+reward.reward_kwargs.overlong_buffer_cfg.log=False",
                 "+reward.reward_kwargs.max_resp_len=8192", "actor_rollout_ref.actor.clip_ratio_low=0.2",
                 "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
                 "actor_rollout_ref.rollout.n=16", "algorithm.use_kl_in_reward=False", "actor_rollout_ref.actor.use_kl_loss=False",
                 "algorithm.kl_ctrl.kl_coef=0.0", "actor_rollout_ref.actor.kl_loss_coef=0.0"):
        assert item in ov, item
    assert not any(o.startswith("reward_model.") for o in plan.overrides)


def test_dapo_max_resp_len_follows_max_response_length():
    ov = overrides_of(base("dapo", knobs={"max_response_length": 6000, "overlong_buffer_len": 1000}))
    assert ov["reward.reward_kwargs.max_resp_len"] == "6000"
    assert ov["reward.reward_kwargs.overlong_buffer_cfg.len"] == "1000"


def test_dapo_overlong_buffer_longer_than_response_refused():
    _one(errors_of(base("dapo", knobs={"max_response_length": 1024})), "overlong buffer", "max_response_length")


def test_dapo_colocated_reward_model_refused():
    _one(errors_of(base("dapo", reward={"model": "/models/rm"})), "dynamic sampling", "own pool")


def test_dapo_reward_model_on_its_own_pool_ok():
    v = base("dapo", reward={"model": "/models/rm"})
    v["spec"] = {"resources": {"pools": [{"name": "train"}, {"name": "reward", "nodes": 1, "gpus_per_node": 2}],
                               "roles": {"reward": "reward"}}}
    ov = overrides_of(v)
    assert ov["reward.reward_model.enable"] == "True" and ov["reward.reward_model.enable_resource_pool"] == "True"
    assert ov["reward.reward_model.nnodes"] == "1" and ov["reward.reward_model.n_gpus_per_node"] == "2"


def _two_pools(method, roles, second="gen"):
    v = base(method)
    v["spec"] = {"resources": {"pools": [{"name": "train"}, {"name": second, "nodes": 1, "gpus_per_node": 2}],
                               "roles": roles}}
    return v


@pytest.mark.parametrize("role", ["rollout", "ref"])
def test_role_verl_cannot_put_on_its_own_pool_refused(role):
    # verl 0.9.1's main_ppo colocates actor, rollout and ref in one resource pool
    _one(errors_of(_two_pools("grpo", {"actor": "train", role: "gen"})), f"roles.{role}", "actor's resource pool")


def test_critic_role_on_a_method_without_critic_refused():
    _one(errors_of(_two_pools("grpo", {"critic": "gen"})), "roles.critic", "has no critic")


def test_unnamed_colocated_roles_follow_the_actor_not_the_first_pool():
    # the actor on the second pool is the error: ref and rollout follow it (no error of their own)
    errors = errors_of(_two_pools("grpo", {"actor": "gen"}))
    _one(errors, "roles.actor", "first pool")
    assert not any("roles.ref" in e or "roles.rollout" in e for e in errors), errors


def test_an_empty_roles_key_is_one_error_naming_the_fix():
    from launcher.spec.experiment import schema_errors

    errors = schema_errors({"method": "verl/grpo", "spec": {"resources": {"roles": None}}})
    assert [e.field for e in errors] == ["spec.resources.roles"]
    assert "is empty (null), expected object; give it a value or remove the key" in errors[0].message


def test_pool_named_reward_without_a_role_is_not_a_reward_pool():
    # placement by roles, never by name: a pool called `reward` with no role is refused
    v = base("dapo", reward={"model": "/models/rm"})
    v["spec"] = {"resources": {"pools": [{"name": "train"}, {"name": "reward"}]}}
    errors = [str(e) for e in errors_of(v)]
    assert any("pools.reward" in e and "no role" in e for e in errors), errors


# rule_rollout_correction
def test_rollout_correction_tis_and_icepop():
    ov = overrides_of(base("grpo", knobs={"rollout_is": "sequence", "rollout_is_threshold": 2.0}))
    assert ov["algorithm.rollout_correction.rollout_is"] == "sequence"
    assert ov["algorithm.rollout_correction.rollout_is_threshold"] == "2.0"
    assert ov["actor_rollout_ref.rollout.calculate_log_probs"] == "True"
    ov = overrides_of(base("grpo", knobs={"rollout_is": "token", "rollout_is_threshold": "0.5_5.0", "rollout_calculate_log_probs": True}))
    assert ov["algorithm.rollout_correction.rollout_is_threshold"] == "0.5_5.0"


def test_rollout_correction_without_log_probs_refused():
    _one(errors_of(base("grpo", knobs={"rollout_is": "token", "rollout_calculate_log_probs": False})), "calculate_log_probs")


def test_rollout_rs_needs_threshold():
    _one(errors_of(base("grpo", knobs={"rollout_rs": "seq_mean_k3"})), "rollout_rs_threshold")
    assert overrides_of(base("grpo", knobs={"rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01}))


def test_rollout_is_threshold_bad():
    _one(errors_of(base("grpo", knobs={"rollout_is": "token", "rollout_is_threshold": "5.0_0.5"})), "LOW must be below HIGH")


# distillation
def test_distillation_two_pools():
    plan = compile_values(base("distillation"))
    ov = dict(o.split("=", 1) for o in plan.overrides)
    assert ov["distillation.enabled"] == "True" and ov["distillation.nnodes"] == "1" and ov["distillation.n_gpus_per_node"] == "4"
    assert ov["trainer.nnodes"] == "1"
    assert ov["distillation.teacher_models.teacher_model.model_path"] == "/models/teacher"
    assert [p.het_group for p in plan.pools] == [0, 1] and plan.pools[1].roles == ("teacher",)


def test_distillation_one_pool_refused():
    v = base("distillation")
    v["spec"] = {"resources": {"pools": [{"name": "train"}]}}
    _one(errors_of(v), "two pools")


def test_distillation_teacher_on_first_pool_refused():
    v = base("distillation")
    v["spec"]["resources"]["roles"] = {"actor": "train", "teacher": "train"}
    _one(errors_of(v), "teacher")


def test_distillation_needs_teacher_model():
    v = base("distillation")
    del v["teacher"]
    _one(errors_of(v), "teacher.model")


# reward pool
def test_reward_pool_without_model_refused():
    v = base("grpo")
    v["spec"] = {"resources": {"pools": [{"name": "train"}, {"name": "reward"}], "roles": {"reward": "reward"}}}
    _one(errors_of(v), "reward.model")


def test_colocated_reward_model_grpo_ok():
    ov = overrides_of(base("grpo", reward={"model": "/models/rm"}))
    assert ov["reward.reward_model.enable"] == "True" and ov["reward.reward_model.rollout.name"] == "vllm"
    assert "reward.reward_model.enable_resource_pool" not in ov


# legacy reward keys
def test_legacy_reward_keys_rewritten(tmp_path):
    reward = tmp_path / "r.py"  # the file is checked like reward.function's
    reward.write_text("def compute_score(x):\n    return 1\n")
    plan = compile_values(base("grpo", overrides=[f"custom_reward_function.path={reward}",
                                                   "reward_model.reward_manager=naive",
                                                   "+reward_model.reward_kwargs.foo=1"]))
    assert f"reward.custom_reward_function.path={reward}" in plan.overrides
    assert "reward.reward_manager.name=naive" in plan.overrides
    assert "+reward.reward_kwargs.foo=1" in plan.overrides
    assert sum("legacy" in w for w in plan.warnings) == 3


def test_legacy_without_equivalent_refused():
    _one(errors_of(base("dapo", overrides=["reward_model.overlong_buffer.enable=True"])), "legacy", "no reward.* equivalent")


# checkpoints
def test_checkpoint_defaults():
    ov = overrides_of(base("grpo"))
    assert ov["trainer.default_local_dir"] == RUN_DIR + "/checkpoints"
    assert ov["trainer.resume_mode"] == "auto" and int(ov["trainer.save_freq"]) > 0


def test_checkpoint_dir_owned_by_sf():
    _one(errors_of(base("grpo", overrides=["trainer.default_local_dir=/tmp/x"])), "run_dir")


def test_save_freq_off_warns():
    plan = compile_values(base("grpo", knobs={"save_freq": -1}))
    assert any("save_freq=-1" in w for w in plan.warnings)


def test_topology_keys_refused():
    _one(errors_of(base("grpo", overrides=["trainer.nnodes=4"])), "--profile")


# pitfalls
@pytest.mark.parametrize("knobs,needle", [
    ({"kl_coef": 0.01, "use_kl_in_reward": False}, "use_kl_in_reward is off"),
    ({"kl_loss_coef": 0.01, "use_kl_loss": False}, "use_kl_loss is off"),
    ({"tensor_model_parallel_size": 8}, "larger than the 4 GPUs per node"),
    ({"ppo_micro_batch_size_per_gpu": None}, "ppo_micro_batch_size_per_gpu is not set"),
])
def test_pitfall_warnings(knobs, needle):
    plan = compile_values(base("grpo", knobs=knobs))
    assert any(needle in w for w in plan.warnings), plan.warnings


@pytest.mark.parametrize("knobs,needles", [
    ({"train_batch_size": 3, "rollout_n": 5}, ["knobs.train_batch_size", "not divisible", "multiple of 4"]),
    ({"train_batch_size": 32, "ppo_mini_batch_size": 64}, ["knobs.ppo_mini_batch_size", "larger than train_batch_size"]),
])
def test_batch_sizes_main_ppo_refuses_at_start_are_errors(knobs, needles):
    """verl.trainer.main_ppo's validate_config refuses them at start (issue 33): errors, not warnings;
    with dynamic batch sizes verl does not check them: a warning."""
    _one(errors_of(base("grpo", knobs=knobs)), *needles)
    plan = compile_values(base("grpo", knobs={**knobs, "use_dynamic_bsz": True}))
    assert any(needles[1] in w for w in plan.warnings), plan.warnings


def test_kl_pitfall_through_raw_overrides_too():
    plan = compile_values(base("grpo", overrides=["algorithm.kl_ctrl.kl_coef=0.01"]))
    assert any("use_kl_in_reward is off" in w for w in plan.warnings), plan.warnings
    plan = compile_values(base("grpo", overrides=["algorithm.kl_ctrl.kl_coef=0.01", "algorithm.use_kl_in_reward=True"]))
    assert not any("use_kl_in_reward is off" in w for w in plan.warnings), plan.warnings


# entry
def test_main_py_becomes_entry():
    plan = compile_values(base("grpo"), main_py="/exp/main.py")
    assert plan.entry == ("python3", "/exp/main.py")
    assert "/exp/main.py" in plan.paths_to_check


def test_sft_entry_torchrun():
    plan = compile_values(base("sft"))
    assert plan.entry == ("torchrun", "-m", "verl.trainer.sft_trainer") and plan.launcher == "torchrun"
    assert plan.config_name == "sft_trainer_engine"


# defaults verl needs
def test_rollout_name_and_micro_batches_default():
    ov = overrides_of(base("grpo"))
    assert ov["actor_rollout_ref.rollout.name"] == "vllm"
    assert ov["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"
    assert ov["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == "8"


# value types / enums
@pytest.mark.parametrize("override,needle", [
    ("actor_rollout_ref.actor.loss_agg_mode=mean", "token-mean"),
    ("algorithm.rollout_correction.rollout_is=seq", "sequence"),
    ("reward.reward_manager.name=fancy", "naive"),
    ("actor_rollout_ref.actor.kl_loss_type=k9", "low_var_kl"),
    ("distillation.distillation_loss.loss_mode=js", "forward_kl_topk"),
    ("data.train_batch_size=lots", "whole number"),
    ("actor_rollout_ref.actor.optim.lr=fast", "not a number"),
])
def test_enum_and_type_checks_on_raw(override, needle):
    _one(errors_of(base("grpo", overrides=[override])), needle)


@pytest.mark.parametrize("knobs,needle", [
    ({"rollout_n": "many"}, "whole number"), ({"actor_lr": "x"}, "not a number"), ({"use_kl_loss": "yes please"}, "true/false"),
    ({"loss_agg_mode": "mean"}, "token-mean"), ({"kl_loss_type": "k9"}, "low_var_kl"),
])
def test_knob_types(knobs, needle):
    _one(errors_of(base("grpo", knobs=knobs)), needle)


def test_unknown_knob_suggests():
    _one(errors_of(base("grpo", knobs={"rollout_nn": 4})), "rollout_n")


def test_sft_knob_not_for_rl_and_back():
    _one(errors_of(base("sft", knobs={"rollout_n": 4})), "does not apply")
    _one(errors_of(base("grpo", knobs={"max_length": 4})), "does not apply")


def test_knob_table_covers_doc_and_tutorial():
    for name in ("rollout_n", "actor_lr", "critic_lr", "policy_loss_mode", "clip_ratio_low", "clip_ratio_high", "loss_agg_mode",
                 "rollout_calculate_log_probs", "rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold",
                 "train_batch_size", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "max_prompt_length",
                 "max_response_length", "total_epochs", "save_freq", "test_freq", "use_kl_loss", "kl_loss_coef",
                 "kl_loss_type", "use_kl_in_reward", "kl_coef", "gpu_memory_utilization", "tensor_model_parallel_size",
                 "entropy_coeff", "val_before_train", "logger", "project_name", "experiment_name", "rollout_name"):
        assert name in KNOBS


def test_all_errors_of_one_pass():
    errs = errors_of(base("grpo", knobs={"rollout_n": 1, "loss_agg_mode": "x"}, overrides=["algorithm.adv_estimator=gae"]))
    assert len(errs) >= 3


def test_override_order_is_deterministic():
    a = compile_values(base("dapo", knobs={"rollout_n": 8})).overrides
    b = compile_values(base("dapo", knobs={"rollout_n": 8})).overrides
    assert a == b
    assert a[0].startswith("algorithm.adv_estimator=")
    # owners first (pins, bindings, topology, the run), then the layers lowest first
    assert f"trainer.default_local_dir={RUN_DIR}/checkpoints" in a and "trainer.resume_mode=auto" in a
    assert a.index(f"trainer.default_local_dir={RUN_DIR}/checkpoints") < a.index("actor_rollout_ref.rollout.n=8")


def test_distillation_teacher_tp_must_divide_pool():
    _one(errors_of(base("distillation", knobs={"teacher_tensor_model_parallel_size": 3})), "teacher_tensor_model_parallel_size")


# --- issue 35's messages and the rules' one order (launcher/compile/rules/__init__.py)
def test_a_role_off_the_actors_pool_names_the_entry_module_not_a_hydra_argument():
    """roles: {ref: gen} on verl/grpo-one-step-off: the message names the module the entry runs
    (its recipe's entry ends with hydra.searchpath=[...]) and the verl pool the ref lands in."""
    values = base("grpo-one-step-off")
    values["spec"]["resources"]["roles"]["ref"] = "gen"
    errs = errors_of(values)
    _one(errs, "spec.resources.roles.ref", "verl.experimental.one_step_off_policy.main_ppo", "(trainer_pool)",
         "map ref to 'train'")
    assert not any("hydra.searchpath" in e for e in errs), errs


@pytest.mark.parametrize("method", ["grpo", "ppo", "dapo"])
def test_distillation_enabled_says_sf_owns_it_and_which_method_turns_it_on(method):
    errs = errors_of(base(method, overrides=["distillation.enabled=true"]))
    _one(errs, "distillation.enabled is set by sf", "use method: verl/distillation")
    assert not any("comes from the pools" in e for e in errs), errs


def test_distillation_enabled_false_on_distillation_is_sfs_too():
    _one(errors_of(base("distillation", overrides=["distillation.enabled=false"])), "distillation.enabled is set by sf")


def test_estimator_hint_comes_from_the_recipes():
    from launcher.compile.rules import pins

    # each estimator with the plainest method that pins it: not dapo (more pins), distillation
    # (a teacher) or grpo-one-step-off (its own trainer)
    pairs = dict(part.split("->") for part in pins.estimator_hint("0.9.1").split(", "))
    assert pairs == {"grpo": "verl/grpo", "gae": "verl/ppo", "reinforce_plus_plus_baseline": "verl/reinforce-baseline",
                     "remax": "verl/remax", "rloo": "verl/rloo"}


def test_rules_run_in_one_order_and_each_lives_in_its_theme():
    from launcher.compile import rules

    names = [f"{r.__module__.rsplit('.', 1)[-1]}.{r.__name__}" for r in rules.BUILD + rules.JUDGES]
    assert len(names) == len(set(names))
    assert names[0] == "pins.rule_method_pins" and names[len(rules.BUILD)] == "pins.rule_estimator"
    assert all(r.__module__.startswith("launcher.compile.rules.") and r.__name__.startswith("rule_")
               for r in rules.BUILD + rules.JUDGES)


def test_every_knob_type_has_its_checker():
    """coerce_knob dispatches on the knob's type (knobs._COERCE): a type without a checker
    would fail at the first value of that knob."""
    from launcher.compile import knobs

    assert {knob.type for knob in KNOBS.values()} <= set(knobs._COERCE)
    assert knobs.coerce_knob("rollout_n", "8") == 8 and knobs.coerce_knob("use_kl_loss", "off") is False
    assert knobs.coerce_knob("logger", "console,file") == ["console", "file"]
