"""A runtime's default overrides (registry entry `overrides:` per verl config name): what the
image needs (no flash-attn -> sdpa, no remove-padding) sits below everything the experiment
says, composes with verl's config, and is labelled `runtime` in the provenance."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import RUN_DIR, SITE, base, spec_from_values  # noqa: E402

from launcher.compile.compiler import compile_plan  # noqa: E402
from launcher.errors import SpecError  # noqa: E402
from launcher.runtime import Runtime  # noqa: E402
from launcher.spec.runtimes import resolve_runtime  # noqa: E402
from launcher.spec.site import site_from_dict  # noqa: E402

NO_FLASH_ATTN = {
    "ppo_trainer": ("actor_rollout_ref.model.use_remove_padding=False",
                    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"),
    "sft_trainer_engine": ("model.use_remove_padding=False",),
}
REG = """verl:
  "0.9.1":
    kind: venv
    path: /opt/rt
    env: {PYTHONPATH: /opt/bundle, VLLM_USE_FLASHINFER_SAMPLER: "0"}
    overrides:
      ppo_trainer:
        - actor_rollout_ref.model.use_remove_padding=False
        - +actor_rollout_ref.model.override_config.attn_implementation=sdpa
      sft_trainer_engine: [model.use_remove_padding=False]
"""


def compiled(values):
    plan = compile_plan(spec_from_values(values), SITE, RUN_DIR, runtime_overrides=NO_FLASH_ATTN)
    return dict(zip(plan.overrides, plan.sources, strict=True)), plan


def test_registry_entry_carries_env_and_default_overrides(tmp_path):
    path = tmp_path / "runtimes.yaml"
    path.write_text(REG)
    site = site_from_dict({"name": "s", "runs_dir": "/r", "series": {}, "runtime_registry": str(path)})
    rt = resolve_runtime("verl", "0.9.1", site, environ={})
    assert dict(rt.env) == {"PYTHONPATH": "/opt/bundle", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    assert dict(rt.overrides) == NO_FLASH_ATTN
    assert Runtime.from_dict(rt.to_dict()) == rt  # travels in the run record


@pytest.mark.parametrize("bad", ["[a=1]", "{ppo_trainer: a=1}", "{ppo_trainer: ['a b=1']}", "{ppo_trainer: [novalue]}"])
def test_bad_default_overrides_refused(tmp_path, bad):
    path = tmp_path / "runtimes.yaml"
    path.write_text(f'verl:\n  "0.9.1": {{kind: venv, path: /opt/rt, overrides: {bad}}}\n')
    site = site_from_dict({"name": "s", "runs_dir": "/r", "series": {}, "runtime_registry": str(path)})
    with pytest.raises(SpecError) as exc:
        resolve_runtime("verl", "0.9.1", site, environ={})
    assert exc.value.field == "runtime.overrides" and "fix the runtime registry" in str(exc.value)


def test_defaults_apply_and_are_labelled_runtime():
    lines, _ = compiled(base("grpo"))
    assert lines["actor_rollout_ref.model.use_remove_padding=False"] == "runtime"
    assert lines["+actor_rollout_ref.model.override_config.attn_implementation=sdpa"] == "runtime"


def test_the_experiment_wins_over_the_runtime():
    values = base("grpo", overrides=["actor_rollout_ref.model.use_remove_padding=True",
                                     "+actor_rollout_ref.model.override_config.attn_implementation=eager"])
    lines, plan = compiled(values)
    assert "actor_rollout_ref.model.use_remove_padding=True" in lines
    assert "+actor_rollout_ref.model.override_config.attn_implementation=eager" in lines
    assert not [o for o in plan.overrides if o.endswith("=sdpa") or o.endswith("use_remove_padding=False")]


def test_sft_gets_its_own_config_defaults_only():
    values = {"method": "verl/sft", "model": "/models/m", "data": {"train": {"files": "/d/train.parquet"}}}
    lines, plan = compiled(values)
    assert lines.get("model.use_remove_padding=False") == "runtime"
    assert not [o for o in plan.overrides if "actor_rollout_ref" in o]
