"""Issue 11: the job does what the user asked and what sf reports.

One section per class: rules judged on the composed (effective) config, typed knob values,
bindings owning their keys, provenance of every override line, failing locally what verl
would fail at start. Each class is tested with several spellings of the same mistake.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import base, compile_values, errors_of, overrides_of, write_exp, write_site  # noqa: E402

from launcher import verlcheck  # noqa: E402
from launcher.cli.app import main  # noqa: E402
from launcher.compile.values import hydra_value  # noqa: E402
from launcher.errors import SpecError  # noqa: E402

ICEPOP = "algorithm.rollout_correction.rollout_is_threshold"


def _one(errors, *needles):
    assert errors, "expected an error"
    assert any(all(n in e for n in needles) for e in errors), errors


def _ok(values):
    """Compiles without an error (and returns the overrides)."""
    assert errors_of(values) == []
    return overrides_of(values)


@pytest.fixture
def env(tmp_path, monkeypatch):
    site = write_site(tmp_path)
    venv = tmp_path / "verl-venv"  # a runtime for the dry run (FORGE_IMAGE_VERL: one for every version)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    monkeypatch.setenv("FORGE_IMAGE_VERL", str(venv))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SF_SITE", str(site))
    return tmp_path


GOOD = """method: verl/{method}
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {{files: /d/train.parquet}}
  validation: {{files: /d/test.parquet}}
"""


def _validate(env, text, *args, method="grpo"):
    write_exp(env, "exp", GOOD.format(method=method) + text)
    return CliRunner().invoke(main, ["validate", "exp", *args])


# ----------------------------------------------------------------------------- 1. effective config

@pytest.mark.parametrize("override", [
    "algorithm.filter_groups={enable:false}",            # the example
    "algorithm={filter_groups:{enable:false}}",          # one level up
    "algorithm.filter_groups={enable:false,metric:acc}",  # with a harmless neighbour
    "~algorithm.filter_groups",                          # deleted
    "algorithm.filter_groups.enable=false",              # the flat form, for comparison
    "+algorithm.filter_groups.enable=false",             # '+' on an existing key
])
def test_dapo_dynamic_sampling_cannot_be_turned_off(override):
    _one(errors_of(base("dapo", overrides=[override])), "algorithm.filter_groups.enable is pinned", "verl/grpo")


@pytest.mark.parametrize("override", [
    "reward.reward_manager={name:naive}", "reward={reward_manager:{name:naive}}", "reward_model.reward_manager=naive",
])
def test_dapo_reward_manager_pin_in_any_spelling(override):
    _one(errors_of(base("dapo", overrides=[override])), "reward.reward_manager.name is pinned")


@pytest.mark.parametrize("override", [
    "algorithm={adv_estimator:rloo}", "algorithm={adv_estimator:grpo}", "~algorithm.adv_estimator",
    "algorithm.adv_estimator=rloo",
])
def test_estimator_in_any_spelling(override):
    _one(errors_of(base("grpo", overrides=[override])), "pinned by the method", "change the method")


@pytest.mark.parametrize("method,override,needle", [
    ("grpo", "actor_rollout_ref.rollout={n:1}", "rollout_n must be >= 2"),
    ("rloo", "actor_rollout_ref={rollout:{n:1}}", "rollout_n must be >= 2"),
    ("remax", "actor_rollout_ref.rollout={n:4}", "rollout_n must be 1"),
])
def test_rollout_n_rule_reads_dict_values(method, override, needle):
    _one(errors_of(base(method, overrides=[override])), "overrides[0]", needle)


def test_forbidden_combination_built_by_dict_values():
    # filter_groups switched on by a dict on grpo, with a reward model on the training GPUs
    v = base("grpo", reward={"model": "/models/rm"}, overrides=["algorithm.filter_groups={enable:true}"])
    _one(errors_of(v), "dynamic sampling")
    # rollout correction with the rollout's log probs turned off through a dict
    v = base("grpo", knobs={"rollout_is": "token"}, overrides=["actor_rollout_ref.rollout={calculate_log_probs:false}"])
    _one(errors_of(v), "overrides[0]", "calculate_log_probs")


def test_enum_checked_on_the_composed_value():
    _one(errors_of(base("grpo", overrides=["actor_rollout_ref.actor.policy_loss={loss_mode:bogus}"])),
         "overrides[0]", "policy_loss.loss_mode", "geo_mean")


def test_dict_override_with_allowed_values_compiles():
    ov = _ok(base("dapo", overrides=["algorithm.filter_groups={metric:score}", "trainer.critic_warmup=0"]))
    # one override per key: the dict is passed as the leaf it sets, over the method's filter_metric
    assert ov["algorithm.filter_groups.metric"] == "score" and "algorithm.filter_groups" not in ov


def test_set_dict_value_refused_through_the_cli(env):
    r = _validate(env, "", "--set", "algorithm.filter_groups={enable:false}", method="dapo")
    assert r.exit_code == 2 and "--set algorithm.filter_groups" in r.stderr and "pinned" in r.stderr, r.stderr


def test_without_verl_config_says_so_once_and_keeps_string_checks(monkeypatch):
    monkeypatch.setattr(verlcheck, "_missing_tools", lambda version: SpecError("verl-config", "not installed"))
    plan = compile_values(base("grpo", knobs={"rollout_n": 8}))
    notes = [w for w in plan.warnings if "not installed on this machine" in w]
    assert len(notes) == 1, plan.warnings
    # the flat and the dict form of a pinned key are still refused (by their keys)
    _one(errors_of(base("dapo", overrides=["algorithm.filter_groups={enable:false}"])), "pinned")
    _one(errors_of(base("grpo", overrides=["trainer={nnodes:9}"])), "comes from the pools")


@pytest.mark.parametrize("overrides", [
    ("algorithm.filter_groups={enable:true,metric:acc}", "trainer.critic_warmup=3"),
    ("~algorithm.filter_groups", "+reward.reward_kwargs.x=1", "data.max_prompt_length=512"),
    ("algorithm={gamma:0.9}", "actor_rollout_ref.rollout={n:4,temperature:0.7}"),
])
def test_fast_compose_equals_hydra_compose(overrides):
    from omegaconf import OmegaConf

    fast, _base = verlcheck._compose_fast("ppo_trainer", overrides)
    full = verlcheck._compose("ppo_trainer", overrides)
    assert OmegaConf.to_container(fast) == OmegaConf.to_container(full)


def test_group_override_composes_afresh():
    eff, why = verlcheck.effective_config("ppo_trainer", ("model_engine=megatron",))
    assert why is None and eff.get("actor_rollout_ref.actor.strategy") == "megatron"


# ----------------------------------------------------------------------------- 2. typed knob values

@pytest.mark.parametrize("given,emitted", [
    ("0.5_5", "0.5_5.0"), ("0.5_5.0", "0.5_5.0"), ("1e-1_1e1", "0.1_10.0"), (" 0.25_4 ", "0.25_4.0"),
    (2, "2.0"), ("3", "3.0"), (1.5, "1.5"),
])
def test_rollout_is_threshold_typed(given, emitted):
    ov = _ok(base("grpo", knobs={"rollout_is": "token", "rollout_is_threshold": given}))
    assert ov[ICEPOP] == emitted
    # verl 0.9.1 receives what Hydra parses: a LOW_HIGH pair stays a string, TIS a float
    from hydra.core.override_parser.overrides_parser import OverridesParser

    value = OverridesParser.create().parse_override(f"{ICEPOP}={ov[ICEPOP]}").value()
    assert (isinstance(value, str) and "_" in value) if "_" in emitted else isinstance(value, float)


@pytest.mark.parametrize("given", ["5_0.5", "0_5", "-1_5", "0.5_0.5", "0.5_5_6", "0.5_", "_5", "abc", 0, -2.0, "0",
                                   True, [1, 2]])
def test_rollout_is_threshold_refused(given):
    _one(errors_of(base("grpo", knobs={"rollout_is": "token", "rollout_is_threshold": given})), "knobs.rollout_is_threshold")


def test_icepop_in_config_yaml_and_set_is_a_pair(env):
    # PyYAML's YAML 1.1 would read 0.5_5 as 0.55 (silently TIS); sf reads config.yaml as YAML 1.2
    r = _validate(env, "knobs: {rollout_is: token, rollout_is_threshold: 0.5_5}\n", "--json")
    assert r.exit_code == 0, r.stderr
    assert f"{ICEPOP}=0.5_5.0" in json.loads(r.stdout)["overrides"]
    r = _validate(env, "knobs: {rollout_is: token}\n", "--set", "rollout_is_threshold=0.5_5", "--json")
    assert f"{ICEPOP}=0.5_5.0" in json.loads(r.stdout)["overrides"], r.stderr


@pytest.mark.parametrize("override,ok", [
    (f"{ICEPOP}=0.5_5", False),        # Hydra reads 0.55
    (f"{ICEPOP}=1_2", False),          # Hydra reads 12
    (f"{ICEPOP}='0.5_5.0'", True),     # quoted: a string
    (f"{ICEPOP}=0.5_5.0", True),       # two dots: Hydra keeps the string
    (f"{ICEPOP}=5.0_0.5", False),      # LOW above HIGH
    (f"{ICEPOP}=-1", False),           # TIS must be > 0
])
def test_rollout_is_threshold_raw_override(override, ok):
    v = base("grpo", overrides=["algorithm.rollout_correction.rollout_is=token", override])
    if ok:
        _ok(v)
    else:
        _one(errors_of(v), "overrides[1]")


@pytest.mark.parametrize("rs,threshold,ok", [
    ("token_k1", "0.5_2.0", True), ("seq_mean_k3", 0.01, True), ("seq_mean_k3", "0.5_2.0", False),
    ("token_k1,seq_max_k2", "0.5_2.0,0.02", True), ("token_k1,seq_max_k2", "0.02,0.5_2.0", False),
    ("token_k1,seq_max_k2", "1,2,3", False), ("token_k2", "0", False), ("token_k1", "2_0.5", False),
])
def test_rollout_rs_threshold(rs, threshold, ok):
    v = base("grpo", knobs={"rollout_rs": rs, "rollout_rs_threshold": threshold})
    if ok:
        _ok(v)
    else:
        _one(errors_of(v), "rollout_rs_threshold")


@pytest.mark.parametrize("name,given", [("train_batch_size", "1_024"), ("actor_lr", "1_0e-6"), ("clip_ratio_high", "0.2_8")])
def test_underscores_are_not_digit_separators(name, given):
    _one(errors_of(base("grpo", knobs={name: given})), f"knobs.{name}", "'_'")


@pytest.mark.parametrize("override", ["data.train_batch_size=1_024", "trainer.critic_warmup=1_0",
                                      "actor_rollout_ref.actor.clip_ratio_high=0.2_8"])
def test_underscores_in_raw_overrides(override):
    _one(errors_of(base("grpo", overrides=[override])), "overrides[0]", "'_'")


@pytest.mark.parametrize("word,value", [("yes", "True"), ("no", "False"), ("on", "True"), ("off", "False"),
                                        ("TRUE", "True"), ("False", "False"), (True, "True")])
def test_bool_words(word, value):
    assert _ok(base("grpo", knobs={"use_kl_loss": word}))["actor_rollout_ref.actor.use_kl_loss"] == value


@pytest.mark.parametrize("word", ["maybe", "1", 1, "y"])
def test_bool_refused(word):
    _one(errors_of(base("grpo", knobs={"use_kl_loss": word})), "knobs.use_kl_loss", "true/false")


@pytest.mark.parametrize("override", ["actor_rollout_ref.actor.use_kl_loss=no", "trainer.val_before_train=off",
                                      "actor_rollout_ref.actor={use_kl_loss:yes}", "data.train_batch_size=many"])
def test_raw_override_strings_where_verl_has_bools_or_numbers(override):
    _one(errors_of(base("grpo", overrides=[override])), "overrides[0]")


def test_yaml_words_stay_words(env):
    r = _validate(env, "knobs: {use_kl_loss: no, project_name: no, experiment_name: on}\n", "--json")
    assert r.exit_code == 0, r.stderr
    ov = json.loads(r.stdout)["overrides"]
    assert "actor_rollout_ref.actor.use_kl_loss=False" in ov
    assert "trainer.project_name=no" in ov and "trainer.experiment_name=on" in ov  # names, not False/True


@pytest.mark.parametrize("given", [1e-6, "1e-6", "1e-06", "1.0e-6", "0.000001", "1E-6"])
def test_one_form_per_number(given):
    assert _ok(base("grpo", knobs={"actor_lr": given}))["actor_rollout_ref.actor.optim.lr"] == "1e-06"


@pytest.mark.parametrize("text", ["1e-6", "1.0e-6", "1e-06", "0.000001"])
def test_one_form_per_number_in_config_yaml(env, text):
    r = _validate(env, f"knobs: {{actor_lr: {text}}}\n", "--json")
    assert "actor_rollout_ref.actor.optim.lr=1e-06" in json.loads(r.stdout)["overrides"], r.stderr


@pytest.mark.parametrize("given,emitted", [(1024.0, "1024"), ("1024.0", "1024"), (1e3, "1000"), ("1e3", "1000"), ("0512", "512")])
def test_whole_floats_are_ints(given, emitted):
    assert _ok(base("grpo", knobs={"train_batch_size": given}))["data.train_batch_size"] == emitted


@pytest.mark.parametrize("given", [10.5, "10.5", "ten", True])
def test_int_refused(given):
    _one(errors_of(base("grpo", knobs={"train_batch_size": given})), "knobs.train_batch_size", "whole number")


def test_config_yaml_loader_is_yaml_12(tmp_path):
    from launcher.spec.experiment import read_config

    (tmp_path / "config.yaml").write_text("a: 0.5_5\nb: yes\nc: 1e-6\nd: 1_000\ne: 012\nf: true\ng: .5\nh: off\n")
    data = read_config(tmp_path / "config.yaml")
    assert data == {"a": "0.5_5", "b": "yes", "c": 1e-6, "d": "1_000", "e": 12, "f": True, "g": 0.5, "h": "off"}


def test_hydra_value_quotes_strings_hydra_would_read_as_numbers():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in ("0.5_5", "1_000", "12", "1e-6", "true", "null", "inf", "a b", "x'y"):
        assert parser.parse_override(f"k={hydra_value(text)}").value() == text, text


# ----------------------------------------------------------------------------- 3. bindings own their keys

@pytest.mark.parametrize("method,override,needle", [
    ("ppo", "actor_rollout_ref.model.path=/b", "--model"),           # the example
    ("grpo", "actor_rollout_ref.model={path:/b}", "--model"),
    ("grpo", "actor_rollout_ref={model:{path:/b}}", "--model"),
    ("ppo", "critic.model.path=/b", "--model"),
    ("grpo", "~actor_rollout_ref.model.path", "--model"),
    ("grpo", "data.train_files=/x.parquet", "--train-data"),
    ("grpo", "data={train_files:/x.parquet}", "--train-data"),
    ("grpo", "+data.val_files=/x.parquet", "--validation-data"),
    ("sft", "model.path=/b", "--model"),
    ("sft", "data.train_files=/x.parquet", "--train-data"),
    ("grpo", "trainer={nnodes:3}", "--profile"),
    ("grpo", "trainer={default_local_dir:/tmp/x}", "run_dir"),
])
def test_bindings_own_their_keys(method, override, needle):
    _one(errors_of(base(method, overrides=[override])), "overrides[0]", needle)


def test_model_override_with_model_flag_through_the_cli(env):
    r = _validate(env, 'overrides: ["actor_rollout_ref.model.path=/b"]\n', "--model", "/a", method="ppo")
    assert r.exit_code == 2 and "overrides[0]" in r.stderr and "--model" in r.stderr, r.stderr
    r = _validate(env, "", "--model", "/a", "--set", "critic.model.path=/b", method="ppo")
    assert r.exit_code == 2 and "--set critic.model.path" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- 4. provenance

def test_sources_parallel_to_overrides_with_labels():
    plan = compile_values(base("dapo", knobs={"rollout_n": 8}, overrides=["trainer.critic_warmup=0"]))
    assert len(plan.sources) == len(plan.overrides)
    src = dict(zip((o.split("=", 1)[0].lstrip("+") for o in plan.overrides), plan.sources))
    assert src["algorithm.adv_estimator"] == "pin:verl/dapo"
    assert src["algorithm.filter_groups.enable"] == "pin:verl/dapo"
    assert src["actor_rollout_ref.actor.clip_ratio_high"] == "default:verl/dapo"
    assert src["trainer.save_freq"] == "default:sf"  # configs/defaults.yaml
    assert src["trainer.critic_warmup"] == "config.yaml"
    assert src["trainer.nnodes"] == "topology"
    assert src["trainer.default_local_dir"] == "run" and src["trainer.resume_mode"] == "run"
    assert src["reward.reward_kwargs.max_resp_len"] == "default:sf"


def test_sources_through_validate_and_dry_run(env):
    write_exp(env, "exp", GOOD.format(method="grpo") + 'overrides: ["trainer.critic_warmup=0"]\nknobs: {actor_lr: 2.0e-6}\n')
    args = ["exp", "--model", "/m", "--train-data", "/t.parquet", "--set", "rollout_n=6", "--set", "trainer.val_before_train=false"]
    r = CliRunner().invoke(main, ["validate", *args, "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    src = dict(zip((o.split("=", 1)[0] for o in out["overrides"]), out["sources"]))
    assert len(out["sources"]) == len(out["overrides"])
    assert src["actor_rollout_ref.model.path"] == "--model" and src["data.train_files"] == "--train-data"
    assert src["data.val_files"] == "config.yaml" and src["actor_rollout_ref.rollout.n"] == "--set"
    assert src["trainer.val_before_train"] == "--set" and src["trainer.critic_warmup"] == "config.yaml"
    assert src["actor_rollout_ref.actor.optim.lr"] == "config.yaml"
    r = CliRunner().invoke(main, ["submit", *args, "--dry-run", "--json"])
    assert r.exit_code == 0, r.stderr
    dry = json.loads(r.stdout)
    assert dry["sources"] == out["sources"] and len(dry["sources"]) == len(dry["overrides"])
    r = CliRunner().invoke(main, ["validate", *args])
    assert "actor_rollout_ref.model.path=/m    [--model]" in r.output
    assert "algorithm.adv_estimator=grpo    [pin:verl/grpo]" in r.output


def test_plan_json_round_trips_sources():
    from launcher.plan import Plan

    plan = compile_values(base("grpo"))
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.sources == plan.sources and len(again.sources) == len(again.overrides)


# ----------------------------------------------------------------------------- 5. fail locally

def test_reward_function_file(env):
    reward = env / "experiments" / "exp" / "r.py"
    r = _validate(env, "reward: {function: {path: r.py}}\n")
    assert r.exit_code == 2 and "reward.function.path" in r.stderr and "does not exist" in r.stderr, r.stderr
    reward.write_text("def other(x):\n    return 1\n")
    r = _validate(env, "reward: {function: {path: r.py}}\n")
    assert r.exit_code == 2 and "reward.function.name" in r.stderr and "compute_score" in r.stderr and "other" in r.stderr
    r = _validate(env, "reward: {function: {path: r.py, name: other}}\n")
    assert r.exit_code == 0, r.stderr
    reward.write_text("import nonexistent_module_xyz\nif True:\n    def compute_score(x):\n        return 1\n")
    r = _validate(env, "reward: {function: {path: r.py}}\n")  # not top level: not found; never imported
    assert r.exit_code == 2 and "defines no function" in r.stderr, r.stderr
    reward.write_text("def compute_score(x:\n")
    r = _validate(env, "reward: {function: {path: r.py}}\n")
    assert r.exit_code == 2 and "does not parse" in r.stderr, r.stderr
    reward.write_text("from mylib import score as compute_score\n")
    assert _validate(env, "reward: {function: {path: r.py}}\n").exit_code == 0


@pytest.mark.parametrize("knobs,overrides,ok", [
    ({"policy_loss_mode": "dro"}, [], False),
    ({"policy_loss_mode": "dro", "dro_beta": 0.1}, [], True),
    ({"policy_loss_mode": "dro", "dro_beta": 0}, [], False),
    ({}, ["actor_rollout_ref.actor.policy_loss={loss_mode:dro}"], False),
    ({}, ["actor_rollout_ref.actor.policy_loss={loss_mode:dro,dro_beta:0.05}"], True),
    ({"policy_loss_mode": "clip-cov"}, ["actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0"], False),
    ({"policy_loss_mode": "kl-cov"}, ["actor_rollout_ref.actor.policy_loss.kl_cov_ratio=-1"], False),
    ({"policy_loss_mode": "vanilla", "clip_ratio_c": 1.0}, [], False),
    ({"policy_loss_mode": "gspo", "clip_ratio_c": 1.0}, [], True),  # only vanilla asserts it
])
def test_policy_loss_parameters(knobs, overrides, ok):
    v = base("grpo", knobs=knobs, overrides=overrides)
    if ok:
        _ok(v)
    else:
        _one(errors_of(v), "policy_loss_mode")


@pytest.mark.parametrize("override,ok", [
    ("actor_rollout_ref.actor.checkpoint.async_save=true", False),
    ("actor_rollout_ref.actor.checkpoint={async_save:true}", False),
    ("actor_rollout_ref.actor.checkpoint.async_save=True", False),
    ("actor_rollout_ref.actor.checkpoint.async_save=false", True),
])
def test_async_save_with_auto_resume_refused(override, ok):
    v = base("grpo", overrides=[override])
    if ok:
        _ok(v)
    else:
        _one(errors_of(v), "overrides[0]", "async_save", "7952")


def test_async_save_allowed_without_auto_resume():
    v = base("grpo", knobs={"resume_mode": "disable"}, overrides=["actor_rollout_ref.actor.checkpoint.async_save=true"])
    assert errors_of(v) == []


@pytest.mark.parametrize("logger,warned", [(["console", "wandb"], True), ("console", True), (["console", "file"], False),
                                           ("file", False)])
def test_logger_without_file_backend_warns(logger, warned):
    plan = compile_values(base("grpo", knobs={"logger": logger}))
    assert any("sf metrics" in w for w in plan.warnings) == warned, plan.warnings


def test_logger_warning_from_a_raw_override():
    plan = compile_values(base("grpo", overrides=["trainer.logger=[console,wandb]"]))
    assert any("sf metrics" in w for w in plan.warnings), plan.warnings


@pytest.mark.parametrize("method,override,key,value", [
    ("grpo", "trainer={resume_mode:disable}", "trainer.resume_mode", "disable"),
    ("dapo", "+reward.reward_kwargs={overlong_buffer_cfg:{log:true}}", "reward.reward_kwargs.overlong_buffer_cfg.log", True),
    ("dapo", "+reward.reward_kwargs={max_resp_len:9000}", "reward.reward_kwargs.max_resp_len", 9000),
])
def test_sf_defaults_never_override_a_dict_valued_user_value(method, override, key, value):
    plan = compile_values(base(method, overrides=[override]))
    eff, _ = verlcheck.effective_config(plan.config_name, plan.overrides)
    assert eff.get(key) == value, plan.overrides


@pytest.mark.parametrize("method", ["grpo", "dapo", "ppo", "remax", "distillation", "sft"])
def test_fast_compose_equals_hydra_compose_on_compiled_plans(method):
    from omegaconf import OmegaConf

    plan = compile_values(base(method, knobs={"rollout_is": "token", "rollout_is_threshold": "0.5_5"} if method == "grpo" else {}))
    fast, _base = verlcheck._compose_fast(plan.config_name, plan.overrides)
    full = verlcheck._compose(plan.config_name, plan.overrides)
    assert OmegaConf.to_container(fast) == OmegaConf.to_container(full)


@pytest.mark.parametrize("text,args", [
    ("algorithm: {adv_estimator: rloo}\n", []),
    ('"algorithm.adv_estimator": gae\n', []),
    ("knobs: {estimator: gae}\n", []),
    ("knobs: {adv_estimator: grpo}\n", []),
    ("", ["--set", "estimator=gae"]),
    ("", ["--set", "adv_estimator=rloo"]),
    ("", ["--set", "algorithm={adv_estimator:rloo}"]),
])
def test_every_estimator_spelling_meets_the_one_rule(env, text, args):
    r = _validate(env, text, *args)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if "pinned by the method" in line]
    assert len(lines) == 1 and "change the method instead" in lines[0], r.stderr


def test_catalog_estimator_is_the_pin_and_versions_share_recipes():
    from launcher.compile import catalog

    for version in catalog.versions():
        for name in catalog.methods(version):
            m = catalog.get_method(version, name)
            assert m.estimator == m.pins.get("algorithm.adv_estimator") and m.version == version
    assert catalog.aliases() == {"0.9.0": "0.9.1"}
    assert catalog.get_method("0.9.0", "dapo").pins == catalog.get_method("0.9.1", "dapo").pins
    assert catalog.get_method("0.9.1", "sft").estimator is None


@pytest.mark.parametrize("extra,override,needle", [
    ({"teacher": {"model": "/models/t2"}}, "distillation.teacher_models.teacher_model.model_path=/x", "teacher.model"),
    ({"reward": {"model": "/models/rm"}}, "reward.reward_model={model_path:/x}", "reward.model"),
    ({"reward": {"function": {"path": "/r.py"}}}, "custom_reward_function.path=/other.py", "reward.function.path"),
    ({"reward": {"function": {"path": "/r.py"}}}, "reward.custom_reward_function.name=other", "reward.function.name"),
])
def test_spec_fields_own_their_keys_when_given(extra, override, needle):
    method = "distillation" if "teacher" in extra else "grpo"
    _one(errors_of(base(method, overrides=[override], **extra)), needle, "remove this override")


def test_raw_reward_keys_without_the_field_are_allowed(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(x):\n    return 1\n")
    ov = _ok(base("grpo", overrides=[f"custom_reward_function.path={reward}", "reward.reward_model.model_path=/rm"]))
    assert ov["reward.custom_reward_function.path"] == str(reward) and ov["reward.reward_model.model_path"] == "/rm"


def test_a_raw_reward_function_file_is_checked_like_reward_function(tmp_path):
    reward = tmp_path / "r.py"
    _one(errors_of(base("grpo", overrides=[f"reward.custom_reward_function.path={reward}"])),
         "overrides[0]", "does not exist")
    reward.write_text("def other(x):\n    return 1\n")
    _one(errors_of(base("grpo", overrides=[f"reward.custom_reward_function={{path:{reward}}}"])),
         "overrides[0]", "defines no function 'compute_score'", "other")
    _ok(base("grpo", overrides=[f"reward.custom_reward_function.path={reward}",
                                "reward.custom_reward_function.name=other"]))
    _one(errors_of(base("grpo", overrides=["reward.custom_reward_function.path=rewards/r.py"])),
         "overrides[0]", "absolute path")


def test_critic_async_save_with_auto_resume_warns():
    plan = compile_values(base("ppo", overrides=["critic.checkpoint.async_save=true"]))
    assert any("critic.checkpoint.async_save=true" in w and "incomplete critic" in w for w in plan.warnings)
    assert not any("critic.checkpoint" in w for w in compile_values(base("ppo")).warnings)
