"""Rule added-key-not-a-field (verlcheck.added_field_errors): a `+`/`++` key added under a config
node verl 0.9.1 builds as a dataclass must be a field of that dataclass, whose fields are read
from verl's source (verlfields) without importing verl."""
from __future__ import annotations

import pytest

from launcher import verlcheck, verlfields
from launcher.verlcheck import check_overrides

needs_verl = pytest.mark.skipif(verlcheck.verl_config_dir() is None, reason="verl (--no-deps) is not installed")

BASE = ["algorithm.adv_estimator=grpo", "data.train_files=/x/train.parquet", "actor_rollout_ref.model.path=m",
        "actor_rollout_ref.rollout.name=vllm", "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]
DISTILL = ["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=t"]
TEACHER_SDPA = "+distillation.teacher_models.teacher_model.override_config.attn_implementation=sdpa"


@needs_verl
def test_teacher_override_config_is_refused_naming_the_field_and_the_class():
    errors = check_overrides("ppo_trainer", BASE + DISTILL + [TEACHER_SDPA])
    assert len(errors) == 1
    error = errors[0]
    assert error.field == TEACHER_SDPA.split("=")[0]
    assert "DistillationTeacherModelConfig" in error.message and "no field 'override_config'" in error.message
    assert "fields: inference, key, model_path, num_replicas" in error.message
    assert "unexpected keyword argument" in error.message and "Drop the override" in error.message
    assert "\n" not in str(error)


@needs_verl
@pytest.mark.parametrize("config_name", ["one_step_off_ppo_trainer", "fully_async_ppo_trainer"])
def test_teacher_case_in_the_disaggregated_trainers(config_name):
    errors = check_overrides(config_name, BASE + DISTILL + [TEACHER_SDPA])
    assert [e.field for e in errors] == [TEACHER_SDPA.split("=")[0]]


@needs_verl
def test_teacher_node_is_not_judged_when_distillation_is_off():
    """verl builds distillation's dataclasses only with distillation.enabled: nothing fails then."""
    assert check_overrides("ppo_trainer", BASE + [TEACHER_SDPA]) == []


@needs_verl
@pytest.mark.parametrize("override", [
    # a key inside a free-form dict field of HFModelConfig / RolloutConfig
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs=8",
    # a field of RolloutConfig that verl's YAML does not list
    "+actor_rollout_ref.rollout.repetition_penalty=1.05",
    "++actor_rollout_ref.rollout.repetition_penalty=1.05",
    # nodes without _target_, and RewardConfig, which verl 0.9.1 reads as a dict (sf's DAPO binding)
    "+ray_kwargs.ray_init.num_cpus=4",
    "+trainer.tag=x",
    "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
])
def test_legit_additions_pass(override):
    assert check_overrides("ppo_trainer", BASE + DISTILL + [override]) == []


@needs_verl
def test_megatron_actor_fields_follow_the_composed_target():
    ok = "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full"
    assert check_overrides("ppo_trainer", BASE + ["model_engine=megatron", ok]) == []
    errors = check_overrides("ppo_trainer", BASE + ["model_engine=megatron", "+actor_rollout_ref.actor.megatronn.x=1"])
    assert len(errors) == 1 and "McoreActorConfig" in errors[0].message
    assert "closest field: actor_rollout_ref.actor.megatron)" in errors[0].message


@needs_verl
def test_force_add_of_an_unknown_rollout_key_is_refused_with_the_closest_field():
    errors = check_overrides("ppo_trainer", BASE + ["++actor_rollout_ref.rollout.repetition_penalti=1.05"])
    assert len(errors) == 1
    assert errors[0].field == "++actor_rollout_ref.rollout.repetition_penalti"
    assert "RolloutConfig" in errors[0].message
    assert "closest field: actor_rollout_ref.rollout.repetition_penalty" in errors[0].message


@needs_verl
def test_first_compose_snapshot_path(monkeypatch):
    """The first compose of a process applies the overrides in place (BaseSnapshot): the parents
    of an added key that existed before are kept there, so the rule sees the same nodes."""
    monkeypatch.setattr(verlcheck, "_BASE_USED", frozenset())
    verlcheck.base_config.cache_clear()
    sdpa = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
    overrides = tuple(BASE + DISTILL + [TEACHER_SDPA, sdpa])
    cfg, base = verlcheck._compose_fast("ppo_trainer", overrides)
    assert isinstance(base, verlcheck.BaseSnapshot)
    assert base.existed(cfg, "distillation.teacher_models.teacher_model")
    assert not base.existed(cfg, "distillation.teacher_models.teacher_model.override_config")
    errors = verlcheck.added_field_errors("ppo_trainer", overrides, cfg, base)
    assert [e.field for e in errors] == [TEACHER_SDPA.split("=")[0]]


@needs_verl
def test_no_refusal_when_the_class_cannot_be_read(monkeypatch):
    monkeypatch.setattr(verlcheck, "dataclass_fields", lambda target: None)
    assert check_overrides("ppo_trainer", BASE + DISTILL + [TEACHER_SDPA + "x"]) == []


@needs_verl
def test_fields_are_read_from_source_with_inherited_ones():
    assert verlfields.dataclass_fields("verl.workers.config.DistillationTeacherModelConfig") == frozenset(
        {"_target_", "key", "model_path", "inference", "num_replicas"})  # _target_: BaseConfig's
    model = verlfields.dataclass_fields("verl.workers.config.HFModelConfig")
    assert {"override_config", "path", "_target_"} <= model
    # ProfilerConfig is re-exported by verl.utils.profiler from its config module
    assert "tool" in verlfields.dataclass_fields("verl.utils.profiler.ProfilerConfig")
    assert verlfields.dataclass_fields("verl.workers.config.NoSuchConfig") is None
    assert verlfields.dataclass_fields("torch.optim.AdamW") is None


def test_unresolvable_sources(tmp_path, monkeypatch):
    """A base class outside verl's source, or a class that is not a dataclass: no field list."""
    root = tmp_path / "verl"
    (root / "cfg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "cfg" / "__init__.py").write_text("from .a import *\n")
    (root / "cfg" / "a.py").write_text(
        "from dataclasses import dataclass, field\nfrom typing import ClassVar\nfrom thirdparty import Base\n"
        "from collections.abc import Mapping\n"
        "@dataclass\nclass Root(Mapping):\n    _target_: str = ''\n    skip: ClassVar[int] = 1\n"
        "    hidden: int = field(default=0, init=False)\n"
        "@dataclass\nclass Good(Root):\n    a: int = 1\n    b = 2\n"
        "@dataclass\nclass Foreign(Base):\n    a: int = 1\n"
        "class Plain:\n    a: int = 1\n")
    monkeypatch.setattr(verlfields, "verl_root", lambda: str(root))
    for cached in (verlfields._find_class, verlfields._tree, verlfields.field_annotations):
        cached.cache_clear()
    try:
        assert verlfields.dataclass_fields("verl.cfg.Good") == frozenset({"_target_", "a"})
        assert verlfields.dataclass_fields("verl.cfg.Foreign") is None
        assert verlfields.dataclass_fields("verl.cfg.Plain") is None
    finally:
        for cached in (verlfields._find_class, verlfields._tree, verlfields.field_annotations):
            cached.cache_clear()
