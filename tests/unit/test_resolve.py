"""Issue 20: one resolution of every input into one typed map keyed by the verl key.

One section per class of the issue: precedence across layers (the same for every key),
knob aliases, dict-valued blocks, the +/++/~ spellings, the sweep point, two writes in one
layer, typed dodges (values as verl reads them), pins on every path verl 0.9.1 offers.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import SITE, base, compile_values, errors_of, overrides_of, write_exp, write_site  # noqa: E402

from launcher.cli.app import main  # noqa: E402
from launcher.compile import resolve  # noqa: E402
from launcher.compile.resolve import Write  # noqa: E402
from launcher.spec.experiment import load_spec  # noqa: E402
from launcher.spec.layers import Layer, Origin  # noqa: E402

N = "actor_rollout_ref.rollout.n"
LR = "actor_rollout_ref.actor.optim.lr"
GOOD = """method: verl/{method}
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {{files: /d/train.parquet}}
  validation: {{files: /d/test.parquet}}
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SF_SITE", str(write_site(tmp_path)))
    return tmp_path


def _validate(env, text, *args, method="grpo"):
    write_exp(env, "exp", GOOD.format(method=method) + text)
    return CliRunner().invoke(main, ["validate", "exp", *args])


def _json(env, text, *args, method="grpo"):
    r = _validate(env, text, *args, "--json", method=method)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _one(errors, *needles):
    assert errors, "expected an error"
    assert any(all(n in e for n in needles) for e in errors), errors


# ----------------------------------------------------------------------------- the pure step

def _w(key, value, layer, field=None, **kw):
    return Write(key, value, layer, field or f"{layer.label}:{key}", Origin(layer), **kw)


def test_precedence_is_one_order_for_every_key():
    layers = list(resolve.LAYERS)
    for order in (layers, list(reversed(layers))):  # arrival order does not matter, the layer does
        writes = [_w("a.b", i, layer, seq=i, item=i) for i, layer in enumerate(order)]
        res = resolve.resolve(writes)
        entry = res.entries["a.b"]
        assert entry.layer is Layer.SWEEP and not res.errors
        assert [w.layer for w in entry.overridden] == layers[:-1]  # lowest first


def test_owner_refuses_a_conflicting_write_naming_key_layer_and_fix():
    pin = Write("algorithm.adv_estimator", "grpo", Layer.PIN, "pin", Origin(Layer.PIN, method="grpo"), seq=0, item=0)
    user = Write("algorithm.adv_estimator", "rloo", Layer.SET, "--set algorithm.adv_estimator", Origin(Layer.SET),
                 seq=1, item=1)
    same = Write("algorithm.adv_estimator", "grpo", Layer.CONFIG, "overrides[0]", Origin(Layer.CONFIG), seq=2, item=2)
    res = resolve.resolve([pin, user, same])
    assert [c.write for c in res.conflicts] == [user]  # the same value does not conflict
    msg = resolve.conflict_message(res.conflicts[0], str)
    assert "algorithm.adv_estimator" in msg and "--set" in msg and "remove it" in msg
    assert res.entries["algorithm.adv_estimator"].value == "grpo"


def test_owner_refuses_a_parent_deleted_or_replaced():
    owner = Write("trainer.nnodes", 2, Layer.TOPOLOGY, "topology", Origin(Layer.TOPOLOGY), seq=0, item=0)
    for op, value in (("~", None), ("=", None), ("=", 3)):
        w = Write("trainer", value, Layer.CONFIG, "overrides[0]", Origin(Layer.CONFIG), op=op, seq=1, item=1)
        assert resolve.resolve([owner, w]).conflicts, (op, value)
    merge = Write("trainer", {"x": 1}, Layer.CONFIG, "overrides[0]", Origin(Layer.CONFIG), seq=1, item=1)
    assert not resolve.resolve([owner, merge]).conflicts


def test_two_writes_of_one_key_in_one_layer_are_an_error():
    a = _w("a.b", 1, Layer.CONFIG, "knobs.lr", item=1)
    b = _w("a.b", 2, Layer.CONFIG, "overrides[0]", item=2, seq=1)
    res = resolve.resolve([a, b])
    _one([str(e) for e in res.errors], "a.b is written twice in config.yaml", "knobs.lr", "overrides[0]")
    parent = _w("a", None, Layer.CONFIG, "overrides[1]", op="~", item=3, seq=2)
    _one([str(e) for e in resolve.resolve([a, parent]).errors], "a.b and a", "written twice")
    # two leaves of one dict value are one write
    leaves = [_w("a.b", 1, Layer.SET, "--set a", item=7), _w("a.c", 2, Layer.SET, "--set a", item=7, seq=1)]
    assert not resolve.resolve(leaves).errors


def test_a_higher_delete_replaces_the_lower_children():
    low = _w("a.b.c", 1, Layer.METHOD, item=1)
    delete = _w("a.b", None, Layer.SET, op="~", item=2, seq=1)
    res = resolve.resolve([low, delete])
    assert list(res.entries) == ["a.b"] and res.entries["a.b"].overridden == [low]
    assert res.overrides(str) == [("~a.b", "--set")]


# ----------------------------------------------------------------------------- precedence through the CLI

def test_set_knob_beats_raw_override_of_config_yaml(env):
    # the first example: raw rollout.n=3 in config.yaml, --set rollout_n=6
    out = _json(env, f'overrides: ["{N}=3"]\n', "--set", "rollout_n=6")
    assert f"{N}=6" in out["overrides"] and f"{N}=3" not in out["overrides"]
    entry = out["resolved"][N]
    assert entry["value"] == 6 and entry["source"] == "--set"
    assert entry["overrides"][0]["value"] == 3 and entry["overrides"][0]["source"] == "config.yaml"
    r = _validate(env, f'overrides: ["{N}=3"]\n', "--set", "rollout_n=6")
    assert f"{N} = 6    [--set] (overrides 3 from config.yaml)" in r.output, r.output


def test_set_raw_beats_config_knob_and_method_default(env):
    out = _json(env, "knobs: {rollout_n: 8}\n", "--set", f"{N}=4", method="dapo")
    assert out["resolved"][N]["value"] == 4
    assert [o["source"] for o in out["resolved"][N]["overrides"]] == ["config.yaml", "default:verl/dapo"]


def test_config_yaml_beats_runtime_beats_method():
    from sfc_helpers import spec_from_values

    from launcher.compile.compiler import compile_plan

    key = "actor_rollout_ref.model.use_remove_padding"
    runtime = {"ppo_trainer": (f"{key}=False",)}
    plan = compile_plan(spec_from_values(base("grpo")), SITE, "/runs/x", runtime_overrides=runtime)
    assert f"{key}=False" in plan.overrides and plan.resolved[key]["source"] == "runtime"
    plan = compile_plan(spec_from_values(base("grpo", overrides=[f"{key}=True"])), SITE, "/runs/x",
                        runtime_overrides=runtime)
    assert f"{key}=True" in plan.overrides and f"{key}=False" not in plan.overrides
    assert plan.resolved[key]["overrides"][0]["source"] == "runtime"


def test_sweep_point_beats_set_and_config_yaml(env):
    write_exp(env, "exp", GOOD.format(method="grpo") + f'overrides: ["{N}=3"]\n')
    spec = load_spec("exp", {"set": ["rollout_n=5"], "point": ["rollout_n=2"]}, SITE)
    plan = compile_values_spec(spec)
    assert f"{N}=2" in plan.overrides and plan.resolved[N]["source"] == "sweep"
    assert [o["source"] for o in plan.resolved[N]["overrides"]] == ["--set", "config.yaml", "default:verl/grpo"]
    spec = load_spec("exp", {"point": [f"{N}=4"]}, SITE)
    assert f"{N}=4" in compile_values_spec(spec).overrides


def test_sweep_point_cannot_reopen_a_pin(env):
    from launcher.errors import SpecErrors

    write_exp(env, "exp", GOOD.format(method="dapo"))
    spec = load_spec("exp", {"point": ["filter_groups=false"]}, SITE)
    with pytest.raises(SpecErrors) as exc:
        compile_values_spec(spec)
    _one([str(e) for e in exc.value.errors], "knobs.filter_groups", "pinned")


def compile_values_spec(spec):
    from launcher.compile.compiler import compile_plan

    return compile_plan(spec, SITE, "/runs/exp-0001")


# ----------------------------------------------------------------------------- aliases, dicts, spellings

def test_knob_and_its_alias_in_one_layer_refused(env):
    r = _validate(env, "knobs: {actor_lr: 1.0e-6, lr: 2.0e-6}\n")
    assert r.exit_code == 2 and "written twice in config.yaml" in r.stderr and "knobs.lr" in r.stderr, r.stderr


def test_knob_and_alias_in_two_layers_resolve_by_layer(env):
    out = _json(env, "knobs: {lr: 2.0e-6}\n", "--set", "actor_lr=1e-6")
    assert f"{LR}=1e-06" in out["overrides"] and out["resolved"][LR]["overrides"][0]["value"] == 2e-6


def test_dict_block_against_set_knob(env):
    # the issue: a dict-valued optim block vs --set actor_lr; sf showed one lr, verl got the other
    out = _json(env, 'overrides: ["actor_rollout_ref.actor.optim={lr: 3.0e-6, weight_decay: 0.1}"]\n',
                "--set", "actor_lr=1e-6")
    assert f"{LR}=1e-06" in out["overrides"]
    assert "actor_rollout_ref.actor.optim.weight_decay=0.1" in out["overrides"]  # its other leaf stays
    assert not any(o.startswith("actor_rollout_ref.actor.optim=") for o in out["overrides"])
    r = _validate(env, 'overrides: ["actor_rollout_ref.actor.optim={lr: 3.0e-6}"]\nknobs: {actor_lr: 1.0e-6}\n')
    assert r.exit_code == 2 and "written twice in config.yaml" in r.stderr, r.stderr


@pytest.mark.parametrize("spelling", [f"{N}=3", f"++{N}=3", f"+{N}=3", "actor_rollout_ref.rollout={n:3}",
                                      "actor_rollout_ref={rollout:{n:3}}"])
def test_every_spelling_is_one_key_under_the_set_flag(env, spelling):
    out = _json(env, f'overrides: ["{spelling}"]\n', "--set", "rollout_n=6")
    ns = [o for o in out["overrides"] if o.lstrip("+").startswith(f"{N}=")]
    assert ns == [f"{N}=6"], out["overrides"]


def test_delete_in_a_higher_layer_wins_and_is_shown(env):
    out = _json(env, "knobs: {filter_metric: acc}\n", "--set", "~algorithm.filter_groups")
    assert "~algorithm.filter_groups" in out["overrides"]
    assert not any(o.startswith("algorithm.filter_groups.metric") for o in out["overrides"])
    assert out["resolved"]["algorithm.filter_groups"]["op"] == "~"


def test_a_top_level_delete_is_a_delete_the_owners_judge(env):
    # `--set ~algorithm` (no dot) is Hydra's delete of a whole section, refused by the pin it would drop
    r = _validate(env, "", "--set", "~algorithm")
    assert r.exit_code == 2 and "--set ~algorithm: algorithm.adv_estimator is pinned" in r.stderr, r.stderr


def test_knob_null_is_verls_default(env):
    out = _json(env, "knobs: {save_freq: null}\n")
    assert not any(o.startswith("trainer.save_freq=") for o in out["overrides"])
    assert out["resolved"]["trainer.save_freq"]["op"] == "default"


def test_set_given_twice_refused(env):
    r = _validate(env, "", "--set", "rollout_n=4", "--set", "rollout_n=5")
    assert r.exit_code == 2 and "--set rollout_n" in r.stderr and "twice" in r.stderr, r.stderr
    r = _validate(env, "", "--set", "rollout_n=4", "--set", f"{N}=5")
    assert r.exit_code == 2 and "written twice in --set" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- typed as verl reads them

@pytest.mark.parametrize("method,override,needles", [
    ("grpo", f"{N}=1.0", ["is a float", "whole number"]),
    ("grpo", f"{N}=1.0", ["rollout_n must be >= 2"]),  # and the rule still reads it as a number
    ("grpo", f"{N}=null", ["null", "whole number"]),
    ("grpo", f"{N}=4.0", ["is a float", f"write {N}=4"]),
    ("grpo", "data.train_batch_size=1024.0", ["data.train_batch_size=1024.0 is a float"]),
    ("dapo", "+reward.reward_kwargs.overlong_buffer_cfg.len=1024.0", ["is a float", "whole number"]),
    ("dapo", "+reward.reward_kwargs.overlong_buffer_cfg.len=9000.0", ["longer than max_response_length"]),
    ("grpo", "trainer.resume_mode=null", ["resume_mode", "auto"]),
    ("grpo", "~trainer.resume_mode", ["resume_mode", "auto"]),
    ("grpo", "actor_rollout_ref.actor.use_kl_loss=1", ["true/false"]),
    ("grpo", "~trainer.save_freq", ["deletes a key verl reads"]),
    ("grpo", "trainer.save_freq=null", ["null", "whole number"]),
])
def test_spelling_cannot_dodge_a_rule(method, override, needles):
    _one(errors_of(base(method, overrides=[override])), "overrides[0]", *needles)


def test_an_interpolation_is_judged_by_what_it_resolves_to():
    """`${...}` is read as verl reads it: its composed value meets the rules and the type
    check (never the '_' digit-separator rule on its text), and one that does not resolve is
    refused alone (the rules would judge a value verl never gets)."""
    errors = errors_of(base("grpo", overrides=[f"{N}=${{trainer.critic_warmup}}"]))
    assert len(errors) == 1 and "rollout_n must be >= 2 (got 0)" in errors[0], errors
    gpus = "${trainer.n_gpus_per_node}"
    assert overrides_of(base("grpo", overrides=[f"{N}={gpus}"]))[N] == gpus
    errors = errors_of(base("grpo", overrides=[f"{N}=${{trainer.no_such_key}}"]))
    assert len(errors) == 1, errors
    _one(errors, "overrides[0]", "does not resolve", "trainer.no_such_key", "write the value")
    errors = errors_of(base("grpo", overrides=["actor_rollout_ref.actor={clip_ratio:${nope.x}}"]))
    assert len(errors) == 1 and "actor_rollout_ref.actor.clip_ratio=" in errors[0], errors


def test_a_float_where_verl_takes_a_float_is_fine():
    # verl's YAML writes entropy_coeff: 0, its dataclass says float
    ov = overrides_of(base("grpo", overrides=["actor_rollout_ref.actor.entropy_coeff=0.01",
                                              "actor_rollout_ref.actor.clip_ratio=1"]))
    assert ov["actor_rollout_ref.actor.entropy_coeff"] == "0.01"


def test_resolved_values_are_typed_as_verl_reads_them():
    knobs = {"train_batch_size": "64", "ppo_mini_batch_size": "64", "use_kl_loss": "no"}  # mini <= train (verl)
    plan = compile_values(base("grpo", knobs=knobs, overrides=["trainer.critic_warmup=2"]))
    assert plan.resolved["data.train_batch_size"]["value"] == 64
    assert plan.resolved["trainer.critic_warmup"]["value"] == 2
    assert plan.resolved["actor_rollout_ref.actor.use_kl_loss"]["value"] is False


def test_plan_json_carries_the_map(env):
    from launcher.plan import Plan

    plan = compile_values(base("grpo"))
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.resolved == plan.resolved and again.resolved["algorithm.adv_estimator"]["source"] == "pin:verl/grpo"
    moved = plan.with_run_dir("/runs/other-1")
    assert moved.resolved["trainer.default_local_dir"]["value"] == "/runs/other-1/checkpoints"


# ----------------------------------------------------------------------------- pins on every path

@pytest.mark.parametrize("method,override,needle", [
    ("dapo", "trainer.v1.sampler.custom_sampler={path:/x.py,name:S}", "skips DAPO's group filtering"),
    ("dapo", "trainer.v1.sampler.custom_sampler.path=/x.py", "custom_sampler.path"),
    ("dapo", "reward.reward_manager.source=importlib", "dapo reward manager"),
    ("dapo", "reward.reward_manager={source:importlib,module:{path:/x.py}}", "reward_manager.source"),
    ("dapo", "~algorithm.filter_groups", "pinned"),
    ("dapo", "algorithm={filter_groups:{enable:false}}", "pinned"),
    ("dapo", "reward_model.reward_manager=naive", "pinned"),
    ("grpo", "trainer.use_v1=false", "main_ppo_v0"),
    ("ppo", "trainer={use_v1:false}", "main_ppo_v0"),
    ("grpo", "actor_rollout_ref.rollout.nnodes=1", "standalone rollout pool"),
    ("grpo", "actor_rollout_ref.rollout={nnodes:2,n_gpus_per_node:8}", "Slurm never allocated"),
    ("grpo", "actor_rollout_ref.rollout.n_gpus_per_node=8", "GPUs Slurm never allocated"),
    ("grpo", "trainer.v1.trainer_mode=separate_async", "pool of its own"),
    ("grpo", "algorithm={adv_estimator:gae}", "pinned by the method"),
    ("ppo", "critic.enable=false", "GAE needs its critic's values"),  # need_critic obeys critic.enable first
    ("grpo", "critic={enable:true}", "critic model that verl/grpo does not have"),
])
def test_pins_hold_on_every_path(method, override, needle):
    _one(errors_of(base(method, overrides=[override])), "overrides[0]", needle)


def test_rollout_sizing_equal_to_the_pool_is_fine():
    ov = overrides_of(base("grpo", overrides=["actor_rollout_ref.rollout.n_gpus_per_node=4",
                                              "actor_rollout_ref.rollout.nnodes=0"]))
    assert ov["actor_rollout_ref.rollout.n_gpus_per_node"] == "4"


def test_dry_run_json_carries_the_map(env):
    venv = env / "verl-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    write_exp(env, "exp", GOOD.format(method="grpo") + f'overrides: ["{N}=3"]\n')
    r = CliRunner(env={"FORGE_IMAGE_VERL": str(venv)}).invoke(main, ["submit", "exp", "--dry-run", "--json",
                                                                    "--set", "rollout_n=6"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["resolved"][N]["value"] == 6 and out["resolved"][N]["overrides"][0]["source"] == "config.yaml"
    assert f"{N}=6" in out["overrides"]
