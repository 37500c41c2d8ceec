"""render_script: plain and heterogeneous jobs, directives, standalone script."""
from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from unit_helpers import SITE, VENV, directives, het_plan, make_plan  # noqa: E402,F401  (test files import them)

from launcher.errors import SpecError
from launcher.plan import Pool, SlurmOptions
from launcher.render.script import overrides_text, plan_json, quote, render_script
from launcher.runtime import Runtime


def test_plain_job_directives():
    script = render_script(make_plan(), SITE, VENV)
    (comp,) = directives(script)
    assert "--job-name=sf-grpo-abcde" in comp and "--dependency=singleton" in comp  # the run's name, one at a time
    assert "--partition=train" in comp and "--nodes=2" in comp and "--ntasks-per-node=1" in comp
    assert "--gres=gpu:4" in comp and "--cpus-per-task=16" in comp and "--mem=4G" in comp
    assert "--time=00:20:00" in comp
    assert "--output=/runs/grpo-abcde/logs/slurm-%j.out" in comp
    assert "--requeue" in comp and "--signal=B:USR1@60" in comp
    assert "hetjob" not in script.split("set -uo")[0].replace("#SBATCH hetjob", "")
    assert "SF_MAX_REQUEUES=2" in script and "trap sf_on_usr1 USR1" in script
    assert "scontrol requeue" in script
    assert "source /opt/rt/verl-0.9.1/bin/activate" in script
    assert '--run-dir "$SF_RUN_DIR"' in script and "--pool" not in script  # pools: plan.json
    pools = json.loads(plan_json(make_plan(), SITE, VENV))["pools"]
    assert [(p["name"], p["nodes"], p["gpus_per_node"], p["het_group"], p["roles"]) for p in pools] == \
        [("train", 2, 4, 0, ["actor", "rollout"])]
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_hetjob_one_component_per_pool():
    script = render_script(het_plan(), SITE, VENV)
    comps = directives(script)
    assert len(comps) == 2
    assert "--partition=train" in comps[0] and "--nodes=2" in comps[0]
    assert "--partition=teach" in comps[1] and "--nodes=1" in comps[1] and "--gres=gpu:4" in comps[1]
    assert not any(d.startswith("--output") for d in comps[1])
    # its own name: Slurm carries the name and the singleton over to later components
    assert [d for d in comps[1] if d.startswith("--job-name")] == ["--job-name=sf-grpo-abcde.g1"]
    teach = json.loads(plan_json(het_plan(), SITE, VENV))["pools"][1]
    assert (teach["name"], teach["het_group"], teach["roles"]) == ("teach", 1, ["teacher"])
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_options_account_qos_exclusive_partition_gpus_per_node():
    site = replace(SITE, series={**SITE.series, "fake": replace(SITE.series["fake"], gpu_directive="gpus-per-node",
                                                                constraint="h200&ib")})
    plan = make_plan(slurm=SlurmOptions(account="proj1", qos="high", partition="all", exclusive=True, requeue=False))
    (comp,) = directives(render_script(plan, site, VENV))
    for d in ("--account=proj1", "--qos=high", "--partition=all", "--exclusive", "--gpus-per-node=4",
              "--constraint=h200&ib", "--no-requeue"):
        assert d in comp
    assert not any(d.startswith("--signal") for d in comp)


def test_preflight_flag_and_standalone_arrays():
    script = render_script(make_plan(), SITE, VENV, preflight=True)
    assert "  --preflight \\" in script
    out = subprocess.run(["bash", "-c", script.split("sf_phase()")[0].split("set -uo pipefail")[1]
                          + '\nprintf "%s\\n" "${SF_ENTRY[@]}" "${SF_OVERRIDES[@]}"'],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    lines = out.stdout.splitlines()
    assert lines == ["python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo", "trainer.nnodes=2"]


def test_runtime_kinds_in_script():
    mod = Runtime(framework="verl", version="0.9.1", kind="module", modules=("cuda/12", "verl/0.9.1"))
    script = render_script(make_plan(), SITE, mod)
    assert "module load cuda/12 verl/0.9.1" in script
    pyx = Runtime(framework="verl", version="0.9.1", kind="pyxis", image="/img/verl.sqsh", mounts=("/data:/data",))
    script = render_script(make_plan(), SITE, pyx)
    assert "SF_RUNTIME" not in script
    runtime = json.loads(plan_json(make_plan(), SITE, pyx))["job"]["runtime"]
    assert runtime["kind"] == "pyxis" and runtime["image"] == "/img/verl.sqsh"
    assert Runtime.from_dict(runtime).srun_flags() == ["--container-image=/img/verl.sqsh",
                                                       "--container-mounts=/data:/data"]
    app = Runtime(framework="verl", version="0.9.1", kind="apptainer", image="/img/v.sif", mounts=("/data",))
    assert app.wrap(["python3", "-V"]) == ["apptainer", "exec", "--nv", "--bind", "/data", "/img/v.sif",
                                           "python3", "-V"]


def test_unknown_series_and_bad_groups():
    with pytest.raises(SpecError, match="series"):
        render_script(make_plan(pools=(Pool("train", "h100", 1, 8, 0),)), SITE, VENV)
    with pytest.raises(SpecError, match="het groups"):
        render_script(make_plan(pools=(Pool("train", "fake", 1, 4, 1),)), SITE, VENV)


def test_overrides_text_one_per_line():
    assert overrides_text(make_plan(overrides=("a=1", "b=x\ny"))) == "a=1\nb=x\\ny\n"


def test_quote_control_characters():
    assert "\n" not in quote("a\nb")
    out = subprocess.run(["bash", "-c", f"printf %s {quote(chr(10).join(['x', '#SBATCH --y']))}"],
                         capture_output=True, text=True)
    assert out.stdout == "x\n#SBATCH --y"


def test_sf_exports_no_ray_tuning_a_sites_large_cluster_env_goes_to_big_jobs_and_its_env_wins():
    """sf's Ray tuning by node count lives in the job (launcher/injob/ray_tuning.py, under
    whatever the script exports): the script exports none of it, so a 256-node job gets the
    256-node tier (the 64-node values exported here used to beat it)."""
    from launcher.injob import ray_tuning

    big_plan = make_plan()
    over_min = render_script(big_plan, replace(SITE, ray=replace(SITE.ray, large_cluster_min_nodes=1)), VENV)
    for name in ray_tuning.ray_env_for(256, 16):
        assert f"export {name}=" not in over_min, name
    exported = {}  # what ray_tuning.apply sees when the script exported nothing of its own
    assert ray_tuning.apply(exported, 256, 16)["RAY_gcs_rpc_server_reconnect_timeout_s"] == "300"
    small_site = replace(SITE, ray=replace(SITE.ray, large_cluster_env=(("RAY_health_check_period_ms", "20000"),)))
    assert "RAY_health_check_period_ms" not in render_script(big_plan, small_site, VENV)  # under min_nodes
    big_site = replace(SITE, ray=replace(SITE.ray, large_cluster_min_nodes=2,
                                         large_cluster_env=(("RAY_worker_register_timeout_seconds", "120"),)),
                       env=(("RAY_worker_register_timeout_seconds", "300"),))
    big = render_script(big_plan, big_site, VENV)
    # the site's own value comes later, so it is the one the job sees
    assert big.index("export RAY_worker_register_timeout_seconds=120") < \
        big.index("export RAY_worker_register_timeout_seconds=300")
