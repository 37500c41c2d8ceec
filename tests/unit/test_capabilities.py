"""What a method needs from the runtime (issue 22, item 5): the catalog names it, the Plan
carries it, the job checks it in the runtime's python before Ray starts (a real job) or
beside the other checks (--preflight), and the reason names the capability, the method
and the fix."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import base, compile_values  # noqa: E402

from launcher import verlcheck  # noqa: E402
from launcher.compile import catalog  # noqa: E402
from launcher.injob import capabilities  # noqa: E402
from launcher.plan import Plan  # noqa: E402

MISSING_MODULE = "sf_test_no_such_module_9f3"


@pytest.fixture
def flash_attn_missing(monkeypatch):
    """flash_attn checked as a module no Python has (the test venv may or may not have flash-attn)."""
    cap = capabilities.CAPABILITIES["flash_attn"]
    monkeypatch.setitem(capabilities.CAPABILITIES, "flash_attn",
                        capabilities.Capability(module=MISSING_MODULE, package=cap.package, why=cap.why,
                                                    instead=cap.instead))


@pytest.mark.parametrize("version", ["0.9.1", "0.9.0"])
def test_every_critic_method_needs_flash_attn_and_no_other_method_does(version):
    for name in catalog.methods(version):
        method = catalog.get_method(version, name)
        assert ("flash_attn" in method.needs) == method.critic, name
        assert set(method.needs) <= set(capabilities.CAPABILITIES), f"{name}: unknown capability in needs"
    assert catalog.get_method(version, "ppo").needs == ("flash_attn",)


def test_the_way_out_names_no_method_the_recipes_say_which_have_a_critic():
    """The job names no method list of its own (configs/methods/ says which have a critic)."""
    text = capabilities.CAPABILITIES["flash_attn"].instead
    assert "critic: true" in text
    assert [m for m in catalog.all_methods() if f"verl/{m}" in text] == []


def test_the_plan_carries_the_needs_through_plan_json():
    ppo = compile_values(base("ppo"))
    assert ppo.runtime_needs == ("flash_attn",)
    assert Plan.from_dict(json.loads(json.dumps(ppo.to_dict()))) == ppo
    assert compile_values(base("grpo", overrides=[SDPA])).runtime_needs == ()
    # a plan.json written before the field existed reads as needing nothing
    old = {k: v for k, v in ppo.to_dict().items() if k != "runtime_needs"}
    assert Plan.from_dict(old).runtime_needs == ()


SDPA = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"


def test_the_models_attention_in_the_composed_config_decides_the_flash_attn_need():
    # verl 0.9.1 builds the model with flash_attention_2 unless override_config names another
    # attention: the H200's one-step-off run failed on it minutes in (no flash-attn there)
    assert compile_values(base("grpo")).runtime_needs == ("flash_attention_2",)
    assert compile_values(base("grpo", overrides=[SDPA])).runtime_needs == ()
    explicit = "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    assert compile_values(base("grpo", overrides=[explicit])).runtime_needs == ("flash_attention_2",)
    # PPO's critic needs flash-attn whatever: one need, not two lines for one module
    assert compile_values(base("ppo")).runtime_needs == ("flash_attn",)
    sft = {"method": "verl/sft", "model": "/models/m", "data": {"train": {"files": "/d/train.parquet"}}}
    assert compile_values(sft).runtime_needs == ("flash_attention_2",)
    sft_sdpa = {**sft, "overrides": ["+model.override_config.attn_implementation=sdpa"]}
    assert compile_values(sft_sdpa).runtime_needs == ()


TEACHER = "distillation.teacher_models.teacher_model"


def test_the_distillation_teacher_adds_no_flash_attn_need():
    """verl 0.9.1 serves the teacher with the inference engine (vLLM/SGLang), never as an HF
    model: experimental/teacher_loop/teacher_model.py:82 gives its server a model config of
    `path` alone, and the server starts `vllm serve PATH` (workers/rollout/vllm_rollout/
    vllm_async_server.py:456; SGLang: async_sglang_server.py:315), whose attention is the
    engine's own. So the teacher has no attention key to read and needs no flash-attn: the
    distillation job's need is the student's alone, gone with the student's sdpa."""
    assert compile_values(base("distillation")).runtime_needs == ("flash_attention_2",)
    plan = compile_values(base("distillation", overrides=[SDPA]))
    assert plan.runtime_needs == ()
    # the composed teacher entry has no model config, so no override_config or attention key
    effective, _ = verlcheck.effective_config(plan.config_name, plan.overrides)
    if effective is not None:  # verl's config installed (the unit venv has it)
        teacher = effective.get(TEACHER)
        assert teacher["model_path"] == "/models/teacher"
        assert set(teacher) == {"_target_", "key", "model_path", "num_replicas", "inference"}
        assert not {"override_config", "attn_implementation"} & set(teacher["inference"])
    # the teacher's own engine settings (its vLLM attention backend too) add none
    for teacher_override in (f"+{TEACHER}.inference.engine_kwargs.vllm.attention_backend=FLASH_ATTN",
                             f"{TEACHER}.inference.enforce_eager=false"):
        assert compile_values(base("distillation", overrides=[SDPA, teacher_override])).runtime_needs == ()
    # a flash-attn need on a distillation plan names the student's key, the one that fixes it
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in \
        capabilities.CAPABILITIES["flash_attention_2"].instead


def test_a_critic_cannot_be_switched_on_by_an_override():
    """critic.enable=true on a method without a critic is refused at compile time, so a
    method's own `needs` are all the job must check."""
    with pytest.raises(Exception, match="critic"):
        compile_values(base("grpo", overrides=["critic.enable=true"]))


def write_plan(tmp_path: Path, method="ppo", needs=("flash_attn",)) -> str:
    """A real plan.json (render's plan_json), as the job reads it through its Contract."""
    from launcher.render.script import plan_json
    from launcher.runtime import Runtime
    from launcher.spec import paths
    from launcher.spec.site import load_site

    plan = dataclasses.replace(compile_values(base(method)), runtime_needs=tuple(needs), run_dir=str(tmp_path))
    runtime = Runtime(framework="verl", version="0.9.1", kind="venv", path="/opt/verl-0.9.1",
                      python="/opt/verl-0.9.1/bin/python")
    (tmp_path / "plan.json").write_text(plan_json(plan, load_site(str(paths.site_dir() / "dev.yaml")), runtime))
    return str(tmp_path)


def test_a_missing_capability_is_one_line_naming_it_the_method_and_the_fix(tmp_path, flash_attn_missing):
    result, failures = capabilities.preflight(write_plan(tmp_path), sys.executable)
    assert result["flash_attn"]["ok"] is False
    assert "ModuleNotFoundError" in result["flash_attn"]["error"]
    [line] = failures
    assert "\n" not in line
    for part in ("runtime capability flash_attn missing", "verl/ppo", "/opt/verl-0.9.1", "ModuleNotFoundError",
                 "load_valuehead_model", "install flash-attn in the runtime", "pick a method without a critic",
                 "critic: true"):
        assert part in line, part
    assert capabilities.summary(result) == "capabilities: flash_attn MISSING"


def test_an_importable_capability_passes(tmp_path, monkeypatch):
    monkeypatch.setitem(capabilities.CAPABILITIES, "flash_attn",
                        capabilities.Capability(module="json", package="flash-attn", why="test", instead="-"))
    result, failures = capabilities.preflight(write_plan(tmp_path), sys.executable)
    assert failures == [] and result == {"flash_attn": {"ok": True, "module": "json", "error": None}}
    assert capabilities.summary(result) == "capabilities: flash_attn ok"


def test_a_method_without_needs_runs_nothing(tmp_path):
    def no_popen(*_a, **_k):
        raise AssertionError("no probe for a method without needs")

    assert capabilities.check([sys.executable], [], popen=no_popen) == {}
    result, failures = capabilities.preflight(write_plan(tmp_path, "grpo", ()), sys.executable)
    assert result == {} and failures == [] and capabilities.summary(result) == "capabilities: none needed"


def test_no_plan_json_means_nothing_is_known_to_be_needed(tmp_path):
    assert capabilities.preflight(str(tmp_path), sys.executable) == ({}, [])


def test_the_missing_flash_attn_line_is_kept_whole_in_the_reason():
    """On the H200 the reason ended in "Why:": the supervisor kept 300 characters of the line."""
    from launcher.injob import failure_text

    runtime = "/gpfs/projects/some-lab/envs/verl-0.9.1-cu128-torch2.9/" + "x" * 40
    error = "ModuleNotFoundError: No module named 'flash_attn'"
    line = capabilities.reasons({"flash_attn": {"ok": False, "module": "flash_attn", "error": error}},
                                "verl/ppo", runtime)[0]
    assert len(line) <= failure_text.PREFLIGHT_REASON_CHARS
    assert line.endswith(capabilities.CAPABILITIES['flash_attn'].why)
    assert error in line
    assert "flash_attention_2" in line and "Fix: install flash-attn" in line and runtime in line


def test_an_unknown_capability_and_a_silent_interpreter_fail_with_their_cause(tmp_path):
    line = capabilities.reasons(capabilities.report(["warp_drive"], {}), "verl/x", "rt")[0]
    assert "unknown capability 'warp_drive'" in line
    result = capabilities.check(["/bin/sh", "-c", "echo broken runtime; exit 3", "sh"], ["flash_attn"])
    assert result["flash_attn"]["ok"] is False
    assert "did not answer the import check" in result["flash_attn"]["error"]
    assert "broken runtime" in result["flash_attn"]["error"]
    result = capabilities.check(["/nonexistent/python"], ["flash_attn"])
    assert "FileNotFoundError" in result["flash_attn"]["error"]


FAKE_RUNTIME = SimpleNamespace(runtime_python=lambda: sys.executable, local_argv=lambda argv: argv)


class FakeRecords:
    def __init__(self):
        self.recorded = []

    def record(self, phase, **info):
        self.recorded.append((phase, info))


class FakeEnding:
    def __init__(self):
        self.failed = []

    def fail(self, reason, rc=1):
        self.failed.append(reason)
        return rc


def supervisor(run_dir, preflight=False):
    """A Supervisor whose records, ending and runtime are fakes: refuse_early alone."""
    from launcher.injob.contract import Contract
    from launcher.injob.supervise import Supervisor

    sup = Supervisor(Contract.read(run_dir), run_dir, preflight=preflight)
    sup.attempt.runtime = FAKE_RUNTIME
    sup.attempt.job = SimpleNamespace(head_node="dev1")
    sup.procs = SimpleNamespace(child_env=lambda: None)
    sup.records, sup.ending = FakeRecords(), FakeEnding()
    return sup


def test_a_real_job_refuses_before_ray_with_the_reason(tmp_path, flash_attn_missing):
    sup = supervisor(write_plan(tmp_path))
    assert sup.refuse_early() == 1
    assert sup.records.recorded[0][0] == capabilities.CHECKED == "capabilities_checked"
    [reason] = sup.ending.failed
    assert reason.startswith("runtime capability flash_attn missing: verl/ppo needs it. Fix: install flash-attn")
    assert "checked before Ray started" in reason


def test_preflight_and_methods_without_needs_are_not_refused_early(tmp_path, flash_attn_missing):
    assert supervisor(write_plan(tmp_path), preflight=True).refuse_early() is None
    other = tmp_path / "grpo"
    other.mkdir()
    plain = supervisor(write_plan(other, "grpo", ()))
    assert plain.refuse_early() is None and plain.records.recorded == []
    from launcher.injob.contract import Contract

    assert capabilities.check_early(Contract.read(str(other)), FAKE_RUNTIME, None, "dev1", False) is None
