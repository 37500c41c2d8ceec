"""Golden tests: the tutorial's PPO and GRPO commands (reference/003_9983a8e07697f0b1.txt,
steps 4 and 7) come out of short sf specs.

Every key=value of the tutorial's command must be in the compiled overrides with the same
value, except what sf deliberately decides itself (asserted below with the reason).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import RUN_DIR, compile_values  # noqa: E402

from launcher.compile.values import parse_scalar  # noqa: E402
from launcher.verlcheck import check_overrides  # noqa: E402

HOME = "/home/user"

# Step 4 of the tutorial (PPO), verbatim but for $HOME.
TUTORIAL_PPO = """
data.train_files=$HOME/data/gsm8k/train.parquet
data.val_files=$HOME/data/gsm8k/test.parquet
data.train_batch_size=256
data.max_prompt_length=512
data.max_response_length=512
actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct
actor_rollout_ref.actor.optim.lr=1e-6
actor_rollout_ref.actor.ppo_mini_batch_size=64
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
actor_rollout_ref.rollout.tensor_model_parallel_size=1
actor_rollout_ref.rollout.gpu_memory_utilization=0.4
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4
critic.optim.lr=1e-5
critic.model.path=Qwen/Qwen2.5-0.5B-Instruct
critic.ppo_micro_batch_size_per_gpu=4
algorithm.use_kl_in_reward=True
algorithm.kl_ctrl.kl_coef=0.001
trainer.logger=console
trainer.val_before_train=False
trainer.n_gpus_per_node=1
trainer.nnodes=1
trainer.save_freq=10
trainer.test_freq=10
trainer.total_epochs=15
"""

# Step 7 (GRPO).
TUTORIAL_GRPO = """
algorithm.adv_estimator=grpo
algorithm.use_kl_in_reward=False
data.train_files=$HOME/data/gsm8k/train.parquet
data.val_files=$HOME/data/gsm8k/test.parquet
data.train_batch_size=256
data.max_prompt_length=512
data.max_response_length=1024
actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct
actor_rollout_ref.actor.optim.lr=1e-6
actor_rollout_ref.actor.ppo_mini_batch_size=64
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
actor_rollout_ref.actor.use_kl_loss=True
actor_rollout_ref.actor.kl_loss_coef=0.001
actor_rollout_ref.actor.kl_loss_type=low_var_kl
actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.n=5
actor_rollout_ref.rollout.tensor_model_parallel_size=1
actor_rollout_ref.rollout.gpu_memory_utilization=0.4
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
trainer.logger=console
trainer.val_before_train=False
trainer.n_gpus_per_node=1
trainer.nnodes=1
trainer.save_freq=10
trainer.test_freq=10
trainer.total_epochs=15
"""

# The short specs a user writes (everything else comes from the method's defaults).
PPO_SPEC = f"""
method: verl/ppo
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {{files: {HOME}/data/gsm8k/train.parquet}}
  validation: {{files: {HOME}/data/gsm8k/test.parquet}}
knobs:
  train_batch_size: 256
  max_prompt_length: 512
  max_response_length: 512
  actor_lr: 1e-6
  ppo_mini_batch_size: 64
  tensor_model_parallel_size: 1
  gpu_memory_utilization: 0.4
  ref_log_prob_micro_batch_size_per_gpu: 4
  val_before_train: false
  total_epochs: 15
"""

GRPO_SPEC = f"""
method: verl/grpo
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {{files: {HOME}/data/gsm8k/train.parquet}}
  validation: {{files: {HOME}/data/gsm8k/test.parquet}}
knobs:
  train_batch_size: 256
  max_prompt_length: 512
  max_response_length: 1024
  actor_lr: 1e-6
  ppo_mini_batch_size: 64
  tensor_model_parallel_size: 1
  gpu_memory_utilization: 0.4
  val_before_train: false
  total_epochs: 15
"""

# Overrides sf adds on top of the tutorial, and why.
SF_ADDS = {
    # Checkpoints live in the run directory (absolute) so a requeued job resumes.
    "trainer.default_local_dir": RUN_DIR + "/checkpoints",
    "trainer.resume_mode": "auto",
}

# Tutorial values sf deliberately changes, and why.
SF_CHANGES = {
    # verl's file logger beside the console one: `sf metrics` / `sf plot` read its output.
    "trainer.logger": ["console", "file"],
}


def _pairs(text: str) -> dict:
    out = {}
    for line in text.strip().splitlines():
        k, _, v = line.partition("=")
        out[k] = parse_scalar(v.replace("$HOME", HOME))
    return out


def _compiled(spec_text: str, profile: str = "fake:1"):
    values = yaml.safe_load(spec_text)
    values["profile"] = profile
    plan = compile_values(values)
    got = {}
    for ov in plan.overrides:
        k, _, v = ov.partition("=")
        got[k] = parse_scalar(v)
    return plan, got


@pytest.mark.parametrize("spec_text,tutorial,extras", [
    # PPO: sf names the estimator (gae, verl's default) and the rollout n (1, verl's default).
    (PPO_SPEC, TUTORIAL_PPO, {"algorithm.adv_estimator": "gae", "actor_rollout_ref.rollout.n": 1}),
    (GRPO_SPEC, TUTORIAL_GRPO, {}),
], ids=["ppo", "grpo"])
def test_tutorial_command_comes_out_of_a_short_spec(spec_text, tutorial, extras):
    plan, got = _compiled(spec_text)
    want = _pairs(tutorial)
    for key, value in want.items():
        assert key in got, f"{key} missing from the compiled overrides"
        value = SF_CHANGES.get(key, value)
        assert got[key] == value, f"{key}: tutorial {value!r}, sf {got[key]!r}"
    # Everything else sf adds is either the checkpoint setup or named above.
    for key in set(got) - set(want):
        expected = {**SF_ADDS, **extras}
        assert key in expected, f"sf adds {key}={got[key]!r} that the tutorial does not have"
        assert got[key] == parse_scalar(str(expected[key])), key
    assert plan.entry == ("python3", "-m", "verl.trainer.main_ppo")
    assert [(p.nodes, p.gpus_per_node) for p in plan.pools] == [(1, 1)]
    assert len(spec_text.strip().splitlines()) < len(want)  # the spec is shorter than the command


def test_tutorial_specs_compose_against_verl():
    for spec_text in (PPO_SPEC, GRPO_SPEC):
        plan, _ = _compiled(spec_text)
        assert check_overrides(plan.config_name, plan.overrides) == []


def test_tutorial_multi_node_is_a_profile_change():
    """Step 8: 2 nodes of 8 GPUs is --profile h200:2x8; nothing else changes."""
    plan, got = _compiled(GRPO_SPEC, profile="h200:2x8")
    assert got["trainer.nnodes"] == 2 and got["trainer.n_gpus_per_node"] == 8
    assert plan.pools[0].series == "h200"


def test_tutorial_custom_reward_function(tmp_path):
    """Step 6: reward.custom_reward_function.path/name (new reward.* keys) from the spec."""
    values = yaml.safe_load(GRPO_SPEC)
    values["reward"] = {"function": {"path": str(tmp_path / "my_reward.py")}}
    _, got = _compiled(yaml.safe_dump(values))
    assert got["reward.custom_reward_function.path"] == str(tmp_path / "my_reward.py")
    assert got["reward.custom_reward_function.name"] == "compute_score"
