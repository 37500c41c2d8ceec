"""verlcheck: compiled overrides composed against the installed verl's Hydra config."""
from __future__ import annotations

import importlib.util
import time

import pytest

from launcher import verlcheck, verloverrides
from launcher.verlcheck import check_overrides, closest_key

needs_verl = pytest.mark.skipif(verlcheck.verl_config_dir() is None, reason="verl (--no-deps) is not installed")

BASE = ["algorithm.adv_estimator=grpo", "data.train_files=/x/train.parquet", "actor_rollout_ref.model.path=m",
        "actor_rollout_ref.rollout.name=vllm", "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]


@needs_verl
def test_good_list_composes():
    assert check_overrides("ppo_trainer", BASE) == []


@needs_verl
@pytest.mark.parametrize("bad,closest", [
    ("actor_rollout_ref.rollout.nn=5", "actor_rollout_ref.rollout.n"),
    ("actor_rollout_ref.actor.loss_mode=gspo", "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ("trainer.n_gpu_per_node=8", "trainer.n_gpus_per_node"),
    ("algorithm.rollout_correction.rollout_is_threshold_lower=0.5", "algorithm.rollout_correction.rollout_is_threshold"),
])
def test_wrong_key_names_closest(bad, closest):
    errors = check_overrides("ppo_trainer", BASE + [bad])
    assert len(errors) == 1
    assert errors[0].field == bad.split("=")[0]
    assert f"closest real key: {closest}" in errors[0].message


@needs_verl
def test_all_wrong_keys_reported():
    errors = check_overrides("ppo_trainer", BASE + ["trainer.nnodez=1", "data.train_filez=x"])
    assert {e.field for e in errors} == {"trainer.nnodez", "data.train_filez"}


@needs_verl
def test_reward_kwargs_needs_plus():
    errors = check_overrides("ppo_trainer", BASE + ["reward.reward_kwargs.max_resp_len=10"])
    assert errors and "reward.reward_kwargs.max_resp_len" in errors[0].field
    assert check_overrides("ppo_trainer", BASE + ["+reward.reward_kwargs.max_resp_len=10"]) == []


@needs_verl
def test_missing_rollout_name_reported():
    errors = check_overrides("ppo_trainer", [o for o in BASE if "rollout.name" not in o])
    assert [e.field for e in errors] == ["actor_rollout_ref.rollout.name"]
    # The reward model's rollout.name matters only with a reward model.
    errors = check_overrides("ppo_trainer", BASE + ["reward.reward_model.enable=True"])
    assert [e.field for e in errors] == ["reward.reward_model.rollout.name"]


@needs_verl
def test_sft_config():
    ok = ["model.path=m", "data.train_files=/x", "data.messages_key=messages", "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
    assert check_overrides("sft_trainer_engine", ok) == []
    errors = check_overrides("sft_trainer_engine", ok + ["actor_rollout_ref.model.path=m"])
    assert errors and errors[0].field == "actor_rollout_ref.model.path"


@needs_verl
def test_group_override_is_a_key():
    assert check_overrides("ppo_trainer", BASE + ["model_engine=megatron"]) == []


@needs_verl
def test_closest_key_helper():
    assert closest_key("trainer.total_epoch", "ppo_trainer") == "trainer.total_epochs"


@needs_verl
def test_fast_enough():
    check_overrides("ppo_trainer", BASE)  # warm
    t = time.monotonic()
    check_overrides("ppo_trainer", BASE + ["trainer.total_epochs=3"])
    assert time.monotonic() - t < 1.5


def test_not_installed_is_an_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(verlcheck.importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a))
    verlcheck.verl_config_dir.cache_clear()
    try:
        errors = check_overrides("ppo_trainer", BASE, "0.9.1")
    finally:
        verlcheck.verl_config_dir.cache_clear()
    assert len(errors) == 1
    assert "pip install 'sf[verl-config]'" in errors[0].message and "--no-deps verl==0.9.1" in errors[0].message


def test_hydra_missing_is_an_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(verlcheck.importlib.util, "find_spec", lambda name, *a: None if name == "hydra" else real(name, *a))
    errors = check_overrides("ppo_trainer", BASE, "0.9.1")
    assert errors and "hydra-core" in errors[0].message


def test_first_compose_in_place_keeps_the_base_values(monkeypatch):
    """The first compose of a process applies the overrides to the base itself (no copy);
    the base values of the keys it touched are kept, and a later compose starts clean."""
    from launcher import verlcheck

    monkeypatch.setattr(verlcheck, "_BASE_USED", frozenset())
    verlcheck.base_config.cache_clear()
    overrides = ("actor_rollout_ref.rollout.n=3", "~trainer.save_freq", "actor_rollout_ref.actor={clip_ratio:0.3}")
    cfg, base = verlcheck._compose_fast("ppo_trainer", overrides)
    assert isinstance(base, verlcheck.BaseSnapshot)
    eff = verlcheck.Effective(cfg, base)
    assert eff.get("actor_rollout_ref.rollout.n") == 3 and eff.base("actor_rollout_ref.rollout.n") == 1
    assert eff.get("trainer.save_freq", "gone") == "gone" and eff.base("trainer.save_freq") == -1
    assert eff.get("actor_rollout_ref.actor.clip_ratio") == 0.3 and eff.base("actor_rollout_ref.actor.clip_ratio") == 0.2
    assert eff.base("actor_rollout_ref.rollout._target_") == "verl.workers.config.RolloutConfig"
    assert eff.base("trainer.nnodes") == 1  # untouched: its composed value
    cfg2, base2 = verlcheck._compose_fast("ppo_trainer", ("trainer.nnodes=2",))
    eff2 = verlcheck.Effective(cfg2, base2)
    assert eff2.get("actor_rollout_ref.rollout.n") == 1 and eff2.get("trainer.save_freq") == -1  # clean again
    assert eff2.get("trainer.nnodes") == 2 and eff2.base("trainer.nnodes") == 1


PLAIN_CASES = [
    "a.b=1", "a.b=-7", "a.b=0", "a.b=007", "a.b=1_000", "a.b=1__0", "a.b=1e-06", "a.b=1.e5", "a.b=.5", "a.b=5.",
    "a.b=1.0.0", "a.b=-1.5e+3", "a.b=1e5x", "a.b=inf", "a.b=-inf", "a.b=NaN", "a.b=Infinity", "a.b=True",
    "a.b=false", "a.b=TRUE", "a.b=true_x", "a.b=null", "a.b=NULL", "a.b=nullx", "a.b=vllm", "a.b=low_var_kl",
    "a.b=/work/x-1/model", "a.b=/data/1.5/train.parquet", "a.b=-", "a.b=/", "a.b=.", "a.b=--x", "a.b=a-b",
    "a.b=[console,file]", "a.b=[]", "a.b=[1,2.5,null,x/y]", "+a.b=1", "++a.b=x", "~a.b", "~a.b=3", "a=3", "_a.b_c=1",
    "a.b=", "a.b= 1", "a.b=x y", "a.b='q'", "a.b=${x.y}", "a.b={c:1}", "a.b=[a, b]", "a.b=1,2", "a.0.b=1",
    "a-b.c=1", "a.b=x:y", "a.b=+5", "a@p=1", "model_engine=megatron", "a/b=c", "a.b=f(1)", "a.b=\\,",
]


@pytest.mark.parametrize("text", PLAIN_CASES)
def test_plain_override_parse_is_hydras(text):
    """The fast parse of plain overrides gives Hydra's own Override, value types included;
    what it does not take, Hydra's parser does (the same list either way)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        hydra = OverridesParser.create().parse_overrides([text])[0]
    except Exception:
        hydra = None
    fast = verloverrides.plain_override(text)
    if fast is not None:
        assert hydra is not None
        assert (fast.type, fast.key_or_group, fast.value_type, fast.package, fast.input_line) == (
            hydra.type, hydra.key_or_group, hydra.value_type, hydra.package, hydra.input_line)
        assert repr(fast._value) == repr(hydra._value) and type(fast._value) is type(hydra._value)
        assert [type(v) for v in fast._value or []] == [type(v) for v in hydra._value or []] \
            if isinstance(fast._value, list) else True
    if hydra is not None:
        both = verloverrides.parse_overrides([text], OverridesParser)[0]
        assert (both.type, both.key_or_group, repr(both._value), both.value_type) == (
            hydra.type, hydra.key_or_group, repr(hydra._value), hydra.value_type)


def test_plain_override_parse_random_values():
    """Random values of the fast path's characters parse as Hydra parses them."""
    import random

    from hydra.core.override_parser.overrides_parser import OverridesParser

    rng = random.Random(20)
    parser = OverridesParser.create()
    alphabet = "0123456789._-/eEaInfNultrsTF"
    for _ in range(400):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7)))
        text = f"a.b={value}"
        fast, hydra = verloverrides.plain_override(text), parser.parse_overrides([text])[0]
        assert fast is not None
        assert (repr(fast._value), type(fast._value)) == (repr(hydra._value), type(hydra._value)), text
