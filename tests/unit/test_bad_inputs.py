"""A corpus of bad inputs, each through the real CLI (`sf validate`): exit 2 and a line that
names the field and says how to fix it. A few run `sf` as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import write_exp, write_site  # noqa: E402

from launcher.cli.app import main  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GOOD = """method: verl/grpo
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {files: /d/train.parquet}
  validation: {files: /d/test.parquet}
"""
DAPO = GOOD.replace("verl/grpo", "verl/dapo")
DIST = GOOD.replace("verl/grpo", "verl/distillation")


def cfg(base=GOOD, **sections):
    return base + "".join(f"{k}: {v}\n" for k, v in sections.items())


# (id, config.yaml text, extra CLI args, needles that must all appear on stderr)
CASES = [
    ("yaml-unclosed", "method: verl/grpo\nknobs: [unclosed\n", [], ["config.yaml", "not valid YAML", "line"]),
    ("yaml-tab", "method: verl/grpo\nknobs:\n\trollout_n: 5\n", [], ["config.yaml", "not valid YAML"]),
    ("yaml-empty", "", [], ["config.yaml", "empty"]),
    ("yaml-list", "- method\n- model\n", [], ["config.yaml", "mapping"]),
    ("method-unknown", GOOD.replace("verl/grpo", "verl/grpoo"), [], ["method", "verl/grpo"]),
    ("method-framework", GOOD.replace("verl/grpo", "nemo/grpo"), [], ["method"]),
    ("method-missing", "model: x\n", [], ["method", "required"]),
    ("version-0.8", cfg(framework_version='"0.8.0"'), [], ["framework_version", "main_ppo_sync"]),
    ("version-unknown", cfg(framework_version='"1.2.3"'), [], ["framework_version", "0.9.1"]),
    ("version-float", cfg(framework_version="0.9"), [], ["framework_version", "type"]),
    ("key-unknown", cfg(modle="x"), [], ["modle", "did you mean model"]),
    ("estimator-in-config", cfg(algorithm="{adv_estimator: rloo}"), [], ["algorithm.adv_estimator", "method"]),
    ("estimator-knob", cfg(knobs="{adv_estimator: rloo}"), [], ["knobs.adv_estimator", "pinned"]),
    ("knob-unknown", cfg(knobs="{rolout_n: 5}"), [], ["rolout_n", "rollout_n"]),
    ("knob-int-string", cfg(knobs="{rollout_n: five}"), [], ["knobs.rollout_n", "whole number"]),
    ("knob-float-bool", cfg(knobs="{actor_lr: true}"), [], ["knobs.actor_lr", "type"]),
    ("knob-bool-int", cfg(knobs="{use_kl_loss: 3}"), [], ["knobs.use_kl_loss", "type"]),
    ("knob-enum", cfg(knobs="{loss_agg_mode: mean}"), [], ["knobs.loss_agg_mode", "token-mean"]),
    ("knob-policy-loss", cfg(knobs="{policy_loss_mode: gmpo2}"), [], ["knobs.policy_loss_mode", "gmpo"]),
    ("overrides-not-list", cfg(overrides='"a.b=1"'), [], ["overrides", "type"]),
    ("override-no-equals", cfg(overrides='["trainer"]'), [], ["overrides[0]", "KEY=VALUE"]),
    ("override-estimator", cfg(overrides='["algorithm.adv_estimator=rloo"]'), [], ["overrides[0]", "pinned"]),
    ("set-estimator", GOOD, ["--set", "algorithm.adv_estimator=gae"], ["algorithm.adv_estimator", "pinned"]),
    ("set-estimator-short", GOOD, ["--set", "adv_estimator=gae"], ["pinned"]),
    ("set-unknown", GOOD, ["--set", "rolout_n=3"], ["--set rolout_n", "rollout_n"]),
    ("set-no-equals", GOOD, ["--set", "rollout_n"], ["--set", "KEY=VALUE"]),
    ("grpo-n1", GOOD, ["--set", "rollout_n=1"], ["rollout_n", ">= 2"]),
    ("remax-n4", GOOD.replace("verl/grpo", "verl/remax"), ["--set", "rollout_n=4"], ["rollout_n must be 1"]),
    ("epochs-negative", GOOD, ["--set", "total_epochs=-1"], ["total_epochs", "no step", "1 or more"]),
    ("epochs-raw-zero", cfg(overrides='["trainer.total_epochs=0"]'), [], ["trainer.total_epochs", "no step"]),
    ("steps-zero", GOOD, ["--set", "total_training_steps=0"], ["total_training_steps", "no step"]),
    ("dapo-colocated-rm", cfg(DAPO, reward="{model: /models/rm}"), [], ["reward.model", "own pool"]),
    ("dapo-no-filter", DAPO, ["--set", "filter_groups=false"], ["knobs.filter_groups", "verl/grpo"]),
    ("correction-no-logprobs", GOOD, ["--set", "rollout_is=token", "--set", "rollout_calculate_log_probs=false"],
     ["calculate_log_probs", "rollout_calculate_log_probs: true"]),
    ("correction-bad-is", GOOD, ["--set", "rollout_is=tok"], ["knobs.rollout_is", "sequence"]),
    ("correction-bad-threshold", GOOD, ["--set", "rollout_is_threshold=abc"], ["knobs.rollout_is_threshold", "IcePop"]),
    ("dist-one-pool", cfg(DIST, teacher="{model: /t}"), [], ["spec.resources.pools", "two pools"]),
    ("dist-no-teacher", cfg(DIST, spec="{resources: {pools: [{name: train}, {name: teach}]}}"), [], ["teacher.model"]),
    ("legacy-no-equivalent", cfg(DAPO, overrides='["reward_model.overlong_buffer.enable=True"]'), [], ["legacy", "reward"]),
    ("topology-override", cfg(overrides='["trainer.nnodes=2"]'), [], ["trainer.nnodes", "--profile"]),
    ("ckpt-dir-override", cfg(overrides='["trainer.default_local_dir=/tmp/c"]'), [], ["default_local_dir", "run_dir"]),
    ("missing-model", GOOD.replace("model: Qwen/Qwen2.5-0.5B-Instruct\n", ""), [], ["model", "--model"]),
    ("missing-data", "method: verl/grpo\nmodel: m\n", [], ["data.train.files", "--train-data"]),
    ("profile-bad", GOOD, ["--profile", "nope:4"], ["--profile", "unknown GPU series"]),
    ("profile-too-wide", GOOD, ["--profile", "fake:2x8"], ["--profile", "4 GPUs"]),
    ("pool-series", cfg(spec="{resources: {pools: [{name: train, series: a100}]}}"), [], ["series", "a100"]),
    ("pool-gpus", cfg(spec="{resources: {pools: [{name: train, gpus_per_node: 16}]}}"), [], ["gpus_per_node", "16"]),
    ("pool-empty", cfg(spec="{resources: {pools: []}}"), [], ["spec.resources.pools"]),
    ("role-undeclared", cfg(spec="{resources: {pools: [{name: train}], roles: {actor: big}}}"), [], ["roles.actor", "big"]),
    ("verl-key-typo", cfg(overrides='["actor_rollout_ref.rollout.nn=5"]'), [], ["actor_rollout_ref.rollout.nn", "closest real key: actor_rollout_ref.rollout.n"]),
    ("verl-key-flat-loss", cfg(overrides='["actor_rollout_ref.actor.loss_mode=gspo"]'), [], ["closest real key: actor_rollout_ref.actor.policy_loss.loss_mode"]),
    ("verl-enum-raw", cfg(overrides='["reward.reward_manager.name=fancy"]'), [], ["reward.reward_manager.name", "naive"]),
    ("verl-number-raw", cfg(overrides='["data.train_batch_size=lots"]'), [], ["data.train_batch_size", "whole number"]),
    ("slurm-time", cfg(slurm='{time: forever}'), [], ["slurm.time"]),
    ("slurm-requeues", cfg(slurm='{max_requeues: -1}'), [], ["slurm.max_requeues"]),
    ("slurm-hang", cfg(slurm='{hang_timeout_s: -1}'), [], ["slurm.hang_timeout_s", "minimum of 0"]),
    ("slurm-hang-text", cfg(slurm='{hang_timeout_s: 10m}'), [], ["slurm.hang_timeout_s"]),
    ("slurm-first-step", cfg(slurm='{first_step_timeout_s: 0}'), [], ["slurm.first_step_timeout_s"]),
    ("slurm-key", cfg(slurm='{acount: x}'), [], ["acount", "account"]),
    ("files-number", GOOD.replace("{files: /d/train.parquet}", "{files: 3}"), [], ["data.train.files"]),
    ("reward-fn-name", cfg(reward="{function: {path: r.py, name: my-func}}"), [], ["reward.function.name"]),
    ("sft-rl-knob", GOOD.replace("verl/grpo", "verl/sft"), ["--set", "rollout_n=4"], ["knobs.rollout_n", "does not apply"]),
    ("kl-type-set", GOOD, ["--set", "kl_loss_type=k9"], ["knobs.kl_loss_type", "low_var_kl"]),
    ("dataset-version", GOOD, ["--train-dataset", "alice/gsm8k@v9"], ["data.train.dataset", "versions: v1"]),
    ("dataset-unknown", GOOD, ["--train-dataset", "bob/none@v1"], ["data.train.dataset", "unknown dataset"]),
    ("dataset-form", GOOD, ["--train-dataset", "gsm8k"], ["data.train.dataset", "OWNER/NAME@VERSION"]),
]


@pytest.fixture
def env(tmp_path, monkeypatch):
    ds = tmp_path / "datasets" / "alice" / "gsm8k" / "v1"
    ds.mkdir(parents=True)
    (ds / "train.parquet").write_text("x")
    site = write_site(tmp_path, dataset_roots=[str(tmp_path / "datasets")])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SF_SITE", str(site))
    return tmp_path


def test_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("text,args,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(env, text, args, needles):
    write_exp(env, "exp", text)
    result = CliRunner().invoke(main, ["validate", "exp", *args])
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    err = result.stderr
    assert err.startswith("sf: error: "), err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


def test_good_input_is_valid(env):
    write_exp(env, "exp", GOOD)
    result = CliRunner().invoke(main, ["validate", "exp"])
    assert result.exit_code == 0, result.stderr
    assert "algorithm.adv_estimator=grpo" in result.output


def test_bad_name_and_missing_experiment(env):
    r = CliRunner().invoke(main, ["validate", "bad name!"])
    assert r.exit_code == 2 and "valid experiment name" in r.stderr
    r = CliRunner().invoke(main, ["validate", "nothere"])
    assert r.exit_code == 2 and "sf new nothere" in r.stderr


def test_sf_new_refusals(env):
    runner = CliRunner()
    assert runner.invoke(main, ["new", "ok", "--method", "verl/grpo"]).exit_code == 0
    for args, needle in ((["new", "ok", "--method", "verl/grpo"], "already exists"),
                         (["new", "b/ad", "--method", "verl/grpo"], "valid experiment name"),
                         (["new", "x", "--method", "verl/gpro"], "verl/grpo"),
                         (["new", "x", "--method", "verl/grpo", "--framework-version", "0.8"], "main_ppo_sync")):
        r = runner.invoke(main, args)
        assert r.exit_code == 2 and needle in r.stderr, (args, r.stderr)


def test_several_problems_one_line_each(env):
    text = cfg(knobs="{rollout_n: 1}", overrides='["algorithm.adv_estimator=gae", "data.train_batch_size=lots"]')
    write_exp(env, "exp", text.replace("model: Qwen/Qwen2.5-0.5B-Instruct\n", ""))
    r = CliRunner().invoke(main, ["validate", "exp"])
    assert r.exit_code == 2
    assert len([l for l in r.stderr.splitlines() if l.startswith("sf: error: ")]) >= 4, r.stderr
    # schema problems are all reported together too
    write_exp(env, "exp", cfg(knobs="{loss_agg_mode: mean, use_kl_loss: 3}", slurm="{acount: x}"))
    r = CliRunner().invoke(main, ["validate", "exp"])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) >= 3, r.stderr


SUBPROCESS_CASES = [c for c in CASES if c[0] in ("yaml-unclosed", "estimator-in-config", "set-estimator", "verl-key-typo")]


@pytest.mark.parametrize("text,args,needles", [c[1:] for c in SUBPROCESS_CASES], ids=[c[0] for c in SUBPROCESS_CASES])
def test_bad_input_subprocess(env, text, args, needles):
    write_exp(env, "exp", text)
    sf = [sys.executable, "-m", "launcher.cli.app"]
    proc = subprocess.run([*sf, "validate", "exp", *args], capture_output=True, text=True, cwd=env,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    for needle in needles:
        assert needle in proc.stderr
