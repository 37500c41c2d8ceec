"""compile_plan: every method compiles for 1 and 2 nodes and composes against the installed verl."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import RUN_DIR, SITE, base, compile_values, errors_of  # noqa: E402

from launcher.compile import catalog  # noqa: E402
from launcher.plan import Plan  # noqa: E402
from launcher.verlcheck import check_overrides, verl_config_dir  # noqa: E402

needs_verl = pytest.mark.skipif(verl_config_dir() is None, reason="verl (--no-deps) is not installed")


def _values(method, nodes, version):
    v = base(method, framework_version=version)
    if method == "distillation":
        v["spec"]["resources"]["pools"][0]["nodes"] = nodes
        v["spec"]["resources"]["pools"][1]["nodes"] = nodes
    else:
        v["profile"] = f"fake:{nodes}x4"
    return v


@needs_verl
@pytest.mark.parametrize("version", ["0.9.1", "0.9.0"])
@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("method", catalog.all_methods())
def test_every_method_compiles_and_composes(method, nodes, version):
    plan = compile_values(_values(method, nodes, version))
    assert plan.method == method and plan.framework_version == version
    ov = dict(o.lstrip("+").split("=", 1) for o in plan.overrides)
    assert ov["trainer.nnodes"] == str(nodes) and ov["trainer.n_gpus_per_node"] == "4"
    assert ov["trainer.default_local_dir"] == RUN_DIR + "/checkpoints"
    assert plan.checkpoint_dir == RUN_DIR + "/checkpoints"
    assert check_overrides(plan.config_name, plan.overrides) == [], plan.overrides
    if method == "distillation":
        assert ov["distillation.nnodes"] == str(nodes)
    assert len(plan.overrides) == len(set(o.split("=")[0].lstrip("+") for o in plan.overrides))  # no duplicates


@needs_verl
def test_method_knob_defaults_compose_with_every_knob():
    """Each RL knob set at once (with valid values) composes against verl's ppo_trainer."""
    knobs = {"policy_loss_mode": "gspo", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0,
             "loss_agg_mode": "seq-mean-token-mean", "entropy_coeff": 0.0, "ppo_epochs": 1, "train_batch_size": 64,
             "ppo_mini_batch_size": 16, "critic_ppo_micro_batch_size_per_gpu": 2, "use_dynamic_bsz": False,
             "max_prompt_length": 256, "max_response_length": 256, "total_epochs": 1, "total_training_steps": 10,
             "critic_warmup": 0, "max_actor_ckpt_to_keep": 2, "temperature": 1.0, "enable_gradient_checkpointing": True,
             "lora_rank": 0, "ref_param_offload": True, "model_engine": "dp", "project_name": "p", "experiment_name": "e",
             "logger": ["console", "tensorboard"], "rollout_calculate_log_probs": True, "rollout_is": "token",
             "rollout_is_threshold": "0.5_5.0", "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01,
             "max_inflight_gen_batches": 1, "filter_metric": "acc", "critic_lr": 1e-5, "lr": 1e-6,
             "gpu_memory_utilization": 0.5, "tensor_model_parallel_size": 2}
    plan = compile_values(base("ppo", knobs=knobs))
    assert check_overrides(plan.config_name, plan.overrides) == []
    plan = compile_values(base("distillation", knobs={"distillation_loss_coef": 1.0, "use_task_rewards": False,
                                                      "teacher_gpu_memory_utilization": 0.4}))
    assert check_overrides(plan.config_name, plan.overrides) == []
    plan = compile_values(base("sft", knobs={"max_length": 2048, "messages_key": "messages", "lora_rank": 8,
                                             "use_dynamic_bsz": True, "micro_batch_size_per_gpu": 2, "resume_mode": "auto",
                                             "max_actor_ckpt_to_keep": 1, "total_training_steps": 5}))
    assert check_overrides(plan.config_name, plan.overrides) == []


def test_plan_round_trips_through_json():
    plan = compile_values(base("distillation"))
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan


def test_plan_fields():
    v = base("grpo", slurm={"partition": "big", "time": "02:00:00", "exclusive": True})
    v["profile"] = "h200:16"
    plan = compile_values(v)
    assert plan.experiment == "test" and plan.framework == "verl" and plan.config_name == "ppo_trainer"
    assert plan.pools[0].nodes == 2 and plan.pools[0].gpus_per_node == 8 and plan.pools[0].series == "h200"
    assert plan.pools[0].roles == ("actor", "rollout", "ref")
    assert plan.slurm.partition == "big" and plan.slurm.time == "02:00:00" and plan.slurm.exclusive
    assert plan.paths_to_check == ("/data/gsm8k/train.parquet", "/data/gsm8k/test.parquet")
    assert plan.env == (("PYTHONUNBUFFERED", "1"),)
    assert plan.argv()[:3] == ["python3", "-m", "verl.trainer.main_ppo"]


def test_default_pool_is_one_node_of_default_series():
    plan = compile_values(base("grpo"))
    assert [(p.name, p.series, p.nodes, p.gpus_per_node, p.het_group) for p in plan.pools] == [("train", "fake", 1, 4, 0)]


def test_profile_reshapes_first_pool_only():
    v = base("distillation")
    v["profile"] = "fake:2x2"
    plan = compile_values(v)
    assert (plan.pools[0].nodes, plan.pools[0].gpus_per_node) == (2, 2)
    assert (plan.pools[1].nodes, plan.pools[1].gpus_per_node, plan.pools[1].series) == (1, 4, "fake-teach")
    assert plan.is_hetjob


def test_compile_is_pure_and_deterministic():
    v = base("dapo")
    assert compile_values(v) == compile_values(v)


def test_knob_and_raw_override_of_one_key_in_one_layer_refused():
    # issue 20: a knob and a raw override that reach one key in config.yaml are two writes of one key
    errors = errors_of(base("dapo", knobs={"overlong_buffer_len": 100},
                            overrides=["reward.reward_kwargs.overlong_buffer_cfg.len=200", "trainer.critic_warmup=0"]))
    assert any("overrides[0]" in e and "written twice in config.yaml" in e and "knobs.overlong_buffer_len" in e
               for e in errors), errors


def test_raw_override_keeps_plus():
    plan = compile_values(base("dapo", overrides=["reward.reward_kwargs.overlong_buffer_cfg.len=200",
                                                  "trainer.critic_warmup=0"]))
    assert "+reward.reward_kwargs.overlong_buffer_cfg.len=200" in plan.overrides
    assert not any(o.endswith("len=4096") for o in plan.overrides)  # the method's default is overridden


def test_relative_run_dir_refused():
    from launcher.errors import SpecErrors
    from launcher.compile.compiler import compile_plan
    from sfc_helpers import spec_from_values

    with pytest.raises(SpecErrors) as exc:
        compile_plan(spec_from_values(base("grpo")), SITE, "runs/x")
    assert "absolute" in str(exc.value)


def test_catalog_versions_and_refusal():
    from launcher.errors import SpecError

    assert catalog.versions() == ("0.9.0", "0.9.1")
    for version in ("0.9.0", "0.9.1"):
        assert catalog.methods(version) == tuple(sorted(catalog.all_methods()))
    with pytest.raises(SpecError, match="main_ppo_sync"):
        catalog.check_version("0.8")
    with pytest.raises(SpecError, match="0.9.1"):
        catalog.check_version("0.7.0")
    m = catalog.get_method("0.9.1", "sft")
    assert m.launcher == "torchrun" and m.entry == ("torchrun", "-m", "verl.trainer.sft_trainer")
