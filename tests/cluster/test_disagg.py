"""Disaggregated RL on the real dev cluster (issue 24): verl/grpo-one-step-off and
verl/grpo-async as one heterogeneous job, the train pool on the `fake` series (het group 0,
Ray's head) and the rollout's pool on `fake-teach` (het group 1, dev7-8).

  - each mode's `--preflight --wait`: both pools joined one Ray cluster, verl's placement
    groups of each pool on its own nodes, each role's workers on the pool `roles:` names
    (rollout on the gen node, actor and ref on the train node), the overrides compose against
    the method's own Hydra config on the runtime's verl;
  - a requeue of the fully async hetjob: both groups back, the restarted driver resumes
    (resume_mode=auto, the run's absolute checkpoint dir, where the first attempt's
    checkpoint still is).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    REPO,
    RUNS,
    cleanup,
    phases,
    status,
    submit_preflight,
    touch_until,
    wait_state,
)

GEN_NODES = ("dev7", "dev8")  # partition teach


@pytest.mark.parametrize("method,config", [("grpo-one-step-off", "one_step_off_ppo_trainer"),
                                           ("grpo-async", "fully_async_ppo_trainer")])
def test_preflight_rollout_on_its_own_pool(method, config):
    out = submit_preflight(f"examples/{method}")
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    report = out["preflight"]
    assert report["ok"] and report["ray_nodes"] == 2, report.get("failures")
    train, gen = report["pools"]["train"], report["pools"]["gen"]
    assert train["compiled"]["het_group"] == 0 and gen["compiled"]["het_group"] == 1
    (train_node,) = train["joined"]
    (gen_node,) = gen["joined"]
    assert gen_node in GEN_NODES and train_node not in GEN_NODES
    # verl's bundles of each pool on that pool's node; the rollout pool's at verl's 2 CPUs each
    assert {b["node"] for b in report["placement"]["gen"]["bundles"]} == {gen_node}
    # the examples' GPUs per pool (sized so verl's bundles and driver actors fit the dev cluster's CPUs)
    gpus = {p["name"]: p["gpus_per_node"] for p in yaml.safe_load(
        (REPO / "examples" / method / "config.yaml").read_text())["spec"]["resources"]["pools"]}
    assert len(report["placement"]["gen"]["bundles"]) == gpus["gen"]
    assert report["placement"]["gen"]["cpus_per_bundle"] == 2
    assert not report["warnings"], report["warnings"]
    assert {b["node"] for b in report["placement"]["train"]["bundles"]} == {train_node}
    roles = {r["role"]: r for r in report["roles"]}
    assert set(roles) == {"actor", "ref", "rollout"} and all(r["ok"] for r in roles.values())
    assert roles["rollout"]["nodes"] == [gen_node] and roles["rollout"]["placed_on_pool"] == "gen"
    assert roles["actor"]["nodes"] == roles["ref"]["nodes"] == [train_node]
    # the overrides compose against the method's own config on the runtime's verl
    assert report["config_name"] == config and report["overrides"]["ok"]
    # the nccl weight sync's library, checked in the runtime (it imports without a GPU)
    assert report["capabilities"] == {"cupy": {"ok": True, "module": "cupy", "error": None}}
    plan = json.loads((RUNS / out["run"] / "plan.json").read_text())
    ov = dict(o.split("=", 1) for o in plan["overrides"])
    assert (ov["rollout.nnodes"], ov["rollout.n_gpus_per_node"]) == ("1", str(gpus["gen"]))
    assert (ov["trainer.nnodes"], ov["trainer.n_gpus_per_node"]) == ("1", str(gpus["train"]))
    assert not plan["warnings"], plan["warnings"]  # sf warns of nothing at submit


# The driver (SF_TEST_DRIVER, after the real bring-up): attempt 0 writes what verl's fully
# async trainer saves (fully_async_trainer.py:917-980: global_step_<param version>/actor,
# data.pt from the rollouter, then the tracker) and waits for the requeue; every attempt
# writes the arguments it was given.
DRIVER = r"""
n="${SLURM_RESTART_COUNT:-0}"
printf '%s\n' "$@" > "$FORGE_CLUSTER_RUN_DIR/driver-args-$n.txt"
if [ "$n" -ge 1 ]; then exit 0; fi
ck="$FORGE_CLUSTER_RUN_DIR/checkpoints"
mkdir -p "$ck/global_step_2/actor" && : > "$ck/global_step_2/data.pt"
echo 2 > "$ck/latest_checkpointed_iteration.txt"
exec sleep 600
"""


def test_async_hetjob_requeue_resumes(tmp_path):
    data = yaml.safe_load((REPO / "examples" / "grpo-async" / "config.yaml").read_text())
    assets = REPO / "examples" / "assets"
    data["model"] = str(assets / "model")
    data["data"] = {"train": {"files": str(assets / "data" / "train.parquet")},
                    "validation": {"files": str(assets / "data" / "test.parquet")}}
    data["slurm"] = {"time": "00:10:00", "max_requeues": 2}
    exp = tmp_path / "asyncrequeue"
    exp.mkdir()
    (exp / "config.yaml").write_text(yaml.safe_dump(data))
    tmp_path.chmod(0o755)
    proc = subprocess.run([str(Path(sys.executable).parent / "sf"), "submit", str(exp), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "SF_TEST_DRIVER": DRIVER})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, job = out["run"], Path(out["run_dir"]), out["job_id"]
    try:
        # the teach partition is shared with other hetjobs on the one dev cluster: wait longer
        touch_until(run_dir, "driver_started", 0, timeout=300)
        deadline = time.monotonic() + 60
        while not (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").exists():
            assert time.monotonic() < deadline, "the first attempt wrote no checkpoint"
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        touch_until(run_dir, "driver_started", 1, timeout=300)
        joined = [e for e in phases(run_dir) if e["phase"] == "all_joined"]
        assert [e.get("restart", 0) for e in joined] == [0, 1] and all(e["ray_nodes"] == 2 for e in joined)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=60) == "COMPLETED"
        assert status(run)["requeue_count"] == 1
        args = (run_dir / "driver-args-1.txt").read_text().splitlines()
        assert "trainer.resume_mode=auto" in args
        assert f"trainer.default_local_dir={run_dir}/checkpoints" in args
        assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
        assert (run_dir / "checkpoints" / "global_step_2" / "data.pt").exists()
    finally:
        cleanup(job)


@pytest.fixture(autouse=True)
def _no_test_driver_leak(monkeypatch):
    monkeypatch.delenv("SF_TEST_DRIVER", raising=False)
