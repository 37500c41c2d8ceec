"""verl/grpo-one-step-off and verl/grpo-async: the rollout on a pool of its own (issue 24).

Pure: compile rules (sizes filled from the pools, a raw size that disagrees refused, a
colocated rollout refused, the fully async trainer's own checks), the placement table of
verl 0.9.1's disaggregated trainers, and the compose against their own Hydra configs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # unit_helpers, run alone too
from sfc_helpers import RUN_DIR, SITE, SITE_DICT, base, compile_values, errors_of, overrides_of, spec_from_values  # noqa: E402,E501

from launcher import verlcheck  # noqa: E402
from launcher.compile import catalog  # noqa: E402
from launcher.spec.site import site_from_dict  # noqa: E402

needs_verl = pytest.mark.skipif(verlcheck.verl_config_dir() is None, reason="verl (--no-deps) is not installed")
DISAGG = ("grpo-one-step-off", "grpo-async")


def _one(errors, *needles):
    assert errors, "expected an error"
    assert any(all(n in e for n in needles) for e in errors), errors


def _pools(method, train=(1, 4), gen=(1, 4), roles=None, **extra):
    v = base(method, **extra)
    v["spec"] = {"resources": {
        "pools": [{"name": "train", "series": "fake", "nodes": train[0], "gpus_per_node": train[1]},
                  {"name": "gen", "series": "fake-teach", "nodes": gen[0], "gpus_per_node": gen[1]}],
        "roles": roles if roles is not None else {"actor": "train", "rollout": "gen"}}}
    return v


@needs_verl
@pytest.mark.parametrize("method,entry,config", [
    ("grpo-one-step-off", "verl.experimental.one_step_off_policy.main_ppo", "one_step_off_ppo_trainer"),
    ("grpo-async", "verl.experimental.fully_async_policy.fully_async_main", "fully_async_ppo_trainer")])
def test_sizes_filled_from_each_pool(method, entry, config):
    plan = compile_values(_pools(method, train=(2, 4), gen=(1, 2)))
    ov = dict(o.lstrip("+").split("=", 1) for o in plan.overrides)
    # trainer.* from the actor's pool, the top-level rollout.* (what the main copies into
    # actor_rollout_ref.rollout.*) from the rollout's pool
    assert (ov["trainer.nnodes"], ov["trainer.n_gpus_per_node"]) == ("2", "4")
    assert (ov["rollout.nnodes"], ov["rollout.n_gpus_per_node"]) == ("1", "2")
    assert "actor_rollout_ref.rollout.nnodes" not in ov
    assert plan.entry[:3] == ("python3", "-m", entry) and plan.config_name == config
    assert [(p.name, p.het_group, p.roles) for p in plan.pools] == [
        ("train", 0, ("actor", "ref")), ("gen", 1, ("rollout",))]
    assert ov["actor_rollout_ref.hybrid_engine"] == "False"  # both trainers assert it
    # requeue: resume from the run's absolute checkpoint dir, as for GRPO
    assert ov["trainer.resume_mode"] == "auto" and ov["trainer.default_local_dir"] == RUN_DIR + "/checkpoints"
    assert verlcheck.check_overrides(plan.config_name, plan.overrides) == []


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_rollout_role_defaults_to_the_second_pool(method):
    v = _pools(method, roles={})
    assert overrides_of(v)["rollout.nnodes"] == "1"
    assert [p.roles for p in compile_values(v).pools] == [("actor", "ref"), ("rollout",)]


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
@pytest.mark.parametrize("key,value,field", [
    ("rollout.nnodes", "2", "nodes"), ("rollout.n_gpus_per_node", "8", "gpus_per_node"),
    ("actor_rollout_ref.rollout.nnodes", "3", "nodes"), ("actor_rollout_ref.rollout.n_gpus_per_node", "2",
                                                         "gpus_per_node")])
def test_raw_rollout_size_that_disagrees_is_refused_naming_the_key(method, key, value, field):
    errors = errors_of(_pools(method, overrides=[f"{key}={value}"]))
    _one(errors, "overrides[0]", f"{key}={value} disagrees with pool 'gen'", f"spec.resources.pools[1].{field}")
    assert errors_of(_pools(method, overrides=["rollout.nnodes=1"])) == []  # agreeing: harmless


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_colocated_rollout_refused(method):
    _one(errors_of(_pools(method, roles={"actor": "train", "rollout": "train"})),
         "spec.resources.roles.rollout", "pool of its own", "rollout: gen")


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_one_pool_refused(method):
    v = base(method)
    v["spec"] = {"resources": {"pools": [{"name": "train"}]}}
    _one(errors_of(v), "spec.resources.pools", "declare two pools", "roles: {actor: train, rollout: gen}")


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
@pytest.mark.parametrize("role", ["ref", "critic"])
def test_ref_and_critic_stay_with_the_actor(method, role):
    # these trainers put actor, ref and critic in one trainer_pool (separation/utils.py:37-47)
    roles = {"actor": "train", "rollout": "gen", role: "gen"}
    _one(errors_of(_pools(method, roles=roles)), f"spec.resources.roles.{role}")


@needs_verl
def test_main_ppo_methods_still_refuse_a_rollout_pool():
    _one(errors_of(_pools("grpo")), "spec.resources.roles.rollout", "actor's resource pool")


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_pins_hold(method):
    _one(errors_of(_pools(method, overrides=["actor_rollout_ref.hybrid_engine=True"])),
         "actor_rollout_ref.hybrid_engine is pinned to False")
    _one(errors_of(_pools(method, overrides=["actor_rollout_ref.rollout.calculate_log_probs=False"])),
         "calculate_log_probs is pinned to True")


@needs_verl
def test_async_batch_is_the_mini_batch():
    # the rollouter asserts train_batch_size == 0 (fully_async_rollouter.py:351)
    _one(errors_of(_pools("grpo-async", knobs={"train_batch_size": 64})),
         "knobs.train_batch_size", "pinned to 0", "set ppo_mini_batch_size")
    assert errors_of(_pools("grpo-one-step-off", knobs={"train_batch_size": 64})) == []


@needs_verl
@pytest.mark.parametrize("override,needle", [
    ("async_training.staleness_threshold=-1", "a number >= 0"),
    ("async_training.trigger_parameter_sync_step=0", "a whole number >= 1"),
    ("async_training.require_batches=0", "a whole number >= 1"),
    ("trainer.test_freq=0", "divides by it"),
    ("rollout.n=8", "not read by verl 0.9.1's fully async trainer"),
])
def test_async_training_values_verl_asserts(override, needle):
    _one(errors_of(_pools("grpo-async", overrides=[override])), "overrides[0]", needle)


@needs_verl
def test_async_reward_model_needs_its_own_pool():
    _one(errors_of(_pools("grpo-async", reward={"model": "/models/rm"})), "reward.model", "pool of its own")


@needs_verl
def test_async_training_keys_are_checked_against_each_config():
    """The compose check (sf validate / submit's prepare step) against the method's own config:
    a wrong key still fails, with the closest real key of that config."""
    def check(values):
        plan = compile_values(values)
        return [str(e) for e in verlcheck.check_overrides(plan.config_name, plan.overrides)]

    _one(check(_pools("grpo-async", overrides=["async_training.staleness_threshol=1"])),
         "async_training.staleness_threshol", "closest real key: async_training.staleness_threshold")
    assert check(_pools("grpo-async", overrides=["async_training.staleness_threshold=1"])) == []
    # one-step-off's config has no async_training block; main_ppo's has no top-level rollout:
    # compile names the method that reads the key (rules.rule_other_trainers_keys)
    _one(errors_of(_pools("grpo-one-step-off", overrides=["async_training.staleness_threshold=1"])),
         "async_training.staleness_threshold is read only by verl/grpo-async", "use method: verl/grpo-async")
    _one(errors_of(base("grpo", overrides=["rollout.total_rollout_steps=5"])), "rollout.total_rollout_steps",
         "read only by verl/grpo-async", "verl/grpo never reads it")


@needs_verl
def test_async_run_length_warnings():
    plan = compile_values(_pools("grpo-async"))
    assert any("rollout.total_rollout_steps=100" in w for w in plan.warnings), plan.warnings
    plan = compile_values(_pools("grpo-async", knobs={"total_training_steps": 5}))
    assert any("total_training_steps is not read" in w for w in plan.warnings), plan.warnings
    plan = compile_values(_pools("grpo-async", overrides=["rollout.total_rollout_steps=null"]))
    assert not any("total_rollout_steps" in w for w in plan.warnings), plan.warnings
    # ppo_mini_batch_size > train_batch_size=0 is the pin, not the tutorial's pitfall
    assert not any("ppo_mini_batch_size" in w for w in plan.warnings), plan.warnings


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_rollout_pool_holds_whole_servers(method):
    _one(errors_of(_pools(method, knobs={"tensor_model_parallel_size": 3})),
         "knobs.tensor_model_parallel_size", "a rollout server takes 3 GPUs", "leaves 1 GPUs idle")
    _one(errors_of(_pools(method, gen=(1, 2), knobs={"tensor_model_parallel_size": 4})), "no server")
    _one(errors_of(_pools(method, gen=(3, 4), knobs={"tensor_model_parallel_size": 6})), "spans nodes")
    assert errors_of(_pools(method, gen=(2, 4), knobs={"tensor_model_parallel_size": 8})) == []


def test_placement_of_the_disaggregated_trainers():
    from launcher.injob import placement
    from launcher.plan import Pool

    pools = (Pool("train", "fake", 1, 4, 0, ("actor", "ref")), Pool("gen", "fake", 1, 4, 1, ("rollout",)))
    separate = catalog.get_method("0.9.1", "grpo-async").verl_pools  # the Plan's, from the recipe
    # verl's pool names -> the Slurm pool of their role (verl_main pins every bundle there)
    assert placement.slurm_pool_for("trainer_pool", pools, separate).name == "train"
    assert placement.slurm_pool_for("rollout_pool_0", pools, separate).name == "gen"
    assert placement.slurm_pool_for("rollout_pool_3", pools, separate).name == "gen"
    assert placement.slurm_pool_for("rollout_pool_teacher_0", pools, separate).name == "train"  # no teacher pool
    placed = {"train": {"nodes": ["dev1"], "ok": True}, "gen": {"nodes": ["dev7"], "ok": True}}
    report = {r["role"]: r for r in placement.role_report(pools, placed, separate)}
    assert report["rollout"]["nodes"] == ["dev7"] and report["actor"]["nodes"] == ["dev1"]
    assert all(r["ok"] for r in report.values())
    # under main_ppo the rollout is in the actor's global_pool: a rollout role on another pool
    # is reported off its pool
    colocated = catalog.get_method("0.9.1", "grpo").verl_pools
    bad = {r["role"]: r for r in placement.role_report(pools, placed, colocated)}
    assert not bad["rollout"]["ok"] and bad["rollout"]["placed_on_pool"] == "train"
    # standalone rollout servers reserve 2 CPUs a GPU bundle (replica.py:200-204), the trainer 3
    assert placement.pool_bundles(pools[1]) == [[{"CPU": 2, "GPU": 1, "sf_pool_gen": 1}] * 4]
    assert placement.fitting_cpus(pools[0], 64) == (3, None)


def test_supervisor_runs_each_ray_driver_through_the_pinning_wrapper():
    from launcher.injob import driver_start

    for name in ("grpo", "grpo-one-step-off", "grpo-async", "distillation"):
        entry = list(catalog.get_method("0.9.1", name).entry)
        assert driver_start.pinned([*entry, "a=1"]) == [entry[0], "-m", driver_start.PINNED_MAIN, "--entry",
                                                     *entry[2:], "a=1"]
    # an experiment's own main.py builds the same trainer's pools: pinned too
    assert driver_start.pinned(["/venv/bin/python", "/exp/main.py", "a=1"]) == [
        "/venv/bin/python", "-m", driver_start.PINNED_MAIN, "--script", "/exp/main.py", "a=1"]
    # a driver that is no verl main (python -c) runs as it is
    assert driver_start.pinned(["python3", "-c", "pass"]) == ["python3", "-c", "pass"]


def test_main_py_on_a_disaggregated_method_keeps_the_methods_pools(tmp_path):
    """An experiment's own main.py (the entry is `python3 main.py`) on verl/grpo-one-step-off:
    the Plan still carries the method's trainer and pools, so the job pins and checks the
    rollout on its own pool (the entry's argv once decided it: main.py got verl's colocated
    table and a rollout off its pool)."""
    from launcher.injob import placement
    from launcher.plan import Plan, Pool

    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "main.py").write_text("print('my driver')\n")
    plan = compile_values(_pools("grpo-one-step-off"), main_py=str(exp / "main.py"))
    assert plan.entry[-1].endswith("main.py") and "verl.experimental" not in " ".join(plan.entry)
    assert plan.trainer == "one-step-off"
    plan = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))  # as the job reads plan.json
    assert plan.verl_pools["rollout"] == "rollout_pool" and plan.verl_pools["actor"] == "trainer_pool"
    pools = (Pool("train", "fake", 1, 4, 0, ("actor", "ref")), Pool("gen", "fake", 1, 4, 1, ("rollout",)))
    placed = {"train": {"nodes": ["dev1"], "ok": True}, "gen": {"nodes": ["dev7"], "ok": True}}
    assert all(r["ok"] for r in placement.role_report(pools, placed, plan.verl_pools))


@needs_verl
def test_experimental_configs_compose_from_their_own_folders():
    for name in ("one_step_off_ppo_trainer", "fully_async_ppo_trainer"):
        own, trainer = verlcheck.config_dirs(name)
        assert (Path(own) / f"{name}.yaml").is_file() and trainer == verlcheck.verl_config_dir()
        assert verlcheck.check_overrides(name, ["actor_rollout_ref.rollout.name=vllm"]) == []
    assert verlcheck.config_dirs("ppo_trainer") == (verlcheck.verl_config_dir(),)


@needs_verl
def test_cpus_for_the_driver_actors_warned():
    # the unit site's series have the default 8 CPUs a node: 4 GPU bundles take 12 and 8
    plan = compile_values(_pools("grpo-async"))
    assert any("driver actors ask 23 CPUs (1 + 10 + 10 + 2" in w for w in plan.warnings), plan.warnings
    one_gpu = _pools("grpo-one-step-off", train=(1, 1), gen=(1, 1), knobs={"tensor_model_parallel_size": 1})
    plan = compile_values(one_gpu)
    assert any("driver actors ask 10 CPUs" in w and "at most 6 on one node" in w for w in plan.warnings)
    big = {**SITE_DICT, "series": {"fake": {"partition": "train", "gpus_per_node": 4, "cpus_per_node": 64},
                                   "fake-teach": {"partition": "teach", "gpus_per_node": 4, "cpus_per_node": 64}}}
    plan = compile_values(_pools("grpo-async"), site=site_from_dict(big, "big.yaml"))
    assert not any("driver actors" in w for w in plan.warnings), plan.warnings


def test_verl_main_pins_the_rollout_servers_to_the_rollout_pool(monkeypatch):
    """The patch as verl's disaggregated trainers call it (fake module, verl's pool names):
    trainer_pool on the actor's pool, every rollout_pool_<replica> on the rollout's."""
    import types

    from launcher.injob import verl_main
    from launcher.plan import Pool

    calls = []

    class RayResourcePool:
        def __init__(self, name_prefix):
            self.name_prefix = name_prefix

        def get_placement_groups(self, strategy="STRICT_PACK"):
            return mod.placement_group(bundles=[{"CPU": 2, "GPU": 1}], strategy=strategy, name=self.name_prefix + "x")

    mod = types.SimpleNamespace(RayResourcePool=RayResourcePool,
                                placement_group=lambda bundles, **kw: calls.append(bundles) or "pg")
    from unit_helpers import job_json

    monkeypatch.setenv("SF_JOB", job_json(Pool("train", "fake", 1, 1, 0, ("actor", "ref")),
                                          Pool("gen", "fake", 1, 1, 1, ("rollout",)), method="grpo-one-step-off"))
    verl_main.patch_base(mod)
    for name in ("trainer_pool", "rollout_pool_0", "rollout_pool_1"):
        RayResourcePool(name).get_placement_groups()
    assert [next(k for k in c[0] if k.startswith("sf_pool_")) for c in calls] == [
        "sf_pool_train", "sf_pool_gen", "sf_pool_gen"]


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_nccl_weight_sync_needs_cupy_from_the_composed_config(method):
    # verl 0.9.1's configs for both trainers set rollout.checkpoint_engine.backend: nccl, and
    # its nccl engine imports cupy (the H200 kit had to carry it): the plan says so
    plan = compile_values(_pools(method))
    assert "cupy" in plan.runtime_needs
    # another backend in the composed config: no cupy
    plan = compile_values(_pools(method, overrides=["actor_rollout_ref.rollout.checkpoint_engine.backend=nixl"]))
    assert "cupy" not in plan.runtime_needs
    # colocated GRPO's engine is verl's default (naive): nothing to import
    assert "cupy" not in compile_values(base("grpo")).runtime_needs


@needs_verl
@pytest.mark.parametrize("method", DISAGG)
def test_runtime_defaults_of_ppo_trainer_reach_the_experimental_configs(method):
    # the H200 run: the runtime's sdpa defaults were keyed ppo_trainer and one-step-off's config
    # is one_step_off_ppo_trainer; without them the ref model asked for flash-attention
    from launcher.compile.compiler import compile_plan

    sdpa = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
    runtime = {"ppo_trainer": (sdpa, "actor_rollout_ref.model.use_remove_padding=False")}
    plan = compile_plan(spec_from_values(_pools(method)), SITE, RUN_DIR, runtime_overrides=runtime)
    sources = dict(zip(plan.overrides, plan.sources, strict=True))
    assert sources[sdpa] == "runtime"
    assert sources["actor_rollout_ref.model.use_remove_padding=False"] == "runtime"
    # a runtime that names the experimental config itself: that list, not ppo_trainer's
    own = {**runtime, plan.config_name: ("actor_rollout_ref.model.use_remove_padding=False",)}
    plan = compile_plan(spec_from_values(_pools(method)), SITE, RUN_DIR, runtime_overrides=own)
    assert sdpa not in plan.overrides and "actor_rollout_ref.model.use_remove_padding=False" in plan.overrides
