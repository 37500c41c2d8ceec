"""launcher.compile.verlcache: a clean compose check is remembered; anything that could change the
answer (the overrides, verl's config files) composes again; failures are never remembered."""
from __future__ import annotations

import os
import shutil

import pytest

from launcher import verlcheck
from launcher.compile import verlcache

GOOD = ("actor_rollout_ref.rollout.name=vllm", "data.train_batch_size=16")
BAD = ("actor_rollout_ref.rollout.name=vllm", "trainer.no_such_key=1")


@pytest.fixture
def composes(monkeypatch, tmp_path):
    monkeypatch.setenv("SF_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = verlcheck.check_overrides

    def counting(config_name, overrides, version=None):
        calls.append(tuple(overrides))
        return real(config_name, overrides, version)

    monkeypatch.setattr(verlcheck, "check_overrides", counting)
    return calls


def test_clean_result_is_remembered(composes):
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == []
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == []
    assert composes == [GOOD]
    assert verlcache.checked_overrides("ppo_trainer", GOOD[::-1]) == []  # order matters to Hydra
    assert verlcache.checked_overrides("sft_trainer_engine", ()) == [] and len(composes) == 3


def test_errors_compose_every_time(composes):
    for _ in range(2):
        [error] = verlcache.checked_overrides("ppo_trainer", BAD)
        assert error.field == "trainer.no_such_key"
    assert composes == [BAD, BAD]


def test_a_changed_verl_config_composes_again(composes, tmp_path, monkeypatch):
    copy = tmp_path / "config"
    shutil.copytree(verlcheck.verl_config_dir(), copy)
    monkeypatch.setattr(verlcheck, "verl_config_dir", lambda: str(copy))
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == []
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == [] and len(composes) == 1
    target = copy / "ppo_trainer.yaml"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == [] and len(composes) == 2


def test_unusable_cache_dir_still_checks(composes, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SF_CACHE_DIR", str(blocker))  # a file: the cache folder cannot exist
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == []
    assert verlcache.checked_overrides("ppo_trainer", GOOD) == []
    assert len(composes) == 2


def test_the_composed_config_is_remembered_too(monkeypatch, tmp_path):
    monkeypatch.setenv("SF_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = verlcheck.effective_config

    def counting(config_name, overrides):
        calls.append(tuple(overrides))
        return real(config_name, overrides)

    monkeypatch.setattr(verlcheck, "effective_config", counting)
    first, why = verlcache.effective_config("ppo_trainer", GOOD)
    again, _ = verlcache.effective_config("ppo_trainer", GOOD)
    assert why is None and calls == [GOOD]  # the second came from the cache
    for key in ("data.train_batch_size", "actor_rollout_ref.rollout.name", "algorithm.adv_estimator"):
        assert again.get(key) == first.get(key) and again.base(key) == first.base(key)
    entries = list((tmp_path / "cache").rglob("*.effective"))
    assert len(entries) == 1
    for entry in entries:
        entry.write_bytes(b"torn")  # a half-written or foreign entry: composed again
    verlcache.effective_config("ppo_trainer", GOOD)
    assert calls == [GOOD, GOOD]
