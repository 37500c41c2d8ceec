"""Bring-up on the real dev cluster: real sbatch, real Ray inside netns sfdev.

  - a 2-node GRPO preflight passes;
  - a distillation hetjob (2 train nodes + 1 teacher node) is ONE Ray cluster of 3 nodes,
    with the teacher's placement on the teach node, and its preflight's health check moved
    an object between every ordered pair of its nodes;
  - two jobs at once on shared nodes bring up two Ray clusters without a port clash.
Bring-up seconds (allocated -> all_joined) are printed (pytest -s shows them).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402, F401
    QUEUE_WAIT_S,
    REPO,
    RUNS,
    SF,
    job_state,
    phase,
    phases,
    sf,
    shared_series_site,
    submit_preflight,
    wait_terminal,
)


def bringup_seconds(run_dir) -> float:
    return phase(run_dir, "all_joined")["seconds"]


def test_grpo_preflight_two_nodes():
    out = submit_preflight("examples/grpo")
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    report = out["preflight"]
    assert report["ok"] and report["ray_nodes"] == 2
    pool = report["pools"]["train"]
    assert len(pool["joined"]) == 2 and all(j["gpus"] == 4 for j in pool["joined"].values())
    assert report["overrides"]["ok"] and len(report["paths"]) == 2
    assert {b["node"] for b in report["placement"]["train"]["bundles"]} == set(pool["joined"])
    run_dir = Path(json.loads((RUNS / out["run"] / "record.json").read_text())["id"]).name
    names = [e["phase"] for e in phases(RUNS / run_dir)]
    for p in ("allocated", "head_up", "all_joined", "driver_started", "ended"):
        assert p in names
    print(f"\nbring-up 2 nodes: {bringup_seconds(RUNS / run_dir):.1f}s")
    # one Ray log per node, named by the Slurm node name: `sf logs --node` finds it
    head, worker = sorted(pool["joined"])
    logs = sf("logs", out["run"], "--node", worker)
    assert logs.returncode == 0 and f"[sf node {worker}]" in logs.stdout, logs.stderr
    assert f"[sf node {head}]" not in logs.stdout


def test_distillation_hetjob_one_ray_cluster_teacher_pinned():
    out = submit_preflight("examples/distill")
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    report = out["preflight"]
    assert report["ok"] and report["ray_nodes"] == 3
    train, teach = report["pools"]["train"], report["pools"]["teach"]
    assert len(train["joined"]) == 2 and len(teach["joined"]) == 1
    assert train["compiled"]["het_group"] == 0 and teach["compiled"]["het_group"] == 1
    (teach_node,) = teach["joined"]
    assert teach_node in ("dev7", "dev8")  # the teach partition
    teach_bundles = report["placement"]["teach"]["bundles"]
    assert len(teach_bundles) == 4 and {b["node"] for b in teach_bundles} == {teach_node}
    assert {b["node"] for b in report["placement"]["train"]["bundles"]} == set(train["joined"])
    # the health check of the same preflight (one job for both: it was a second, identical one)
    health = report["health"]
    assert health["ok"] and health["pairs"] == 6 and health["mode"] == "all pairs"  # 3 nodes, ordered pairs
    assert health["median_mib_per_s"] > 0 and health["failed"] == [] and health["suspect_nodes"] == []
    print(f"\nbring-up 3 nodes (hetjob): {bringup_seconds(RUNS / out['run']):.1f}s")


def test_placement_follows_roles_not_pool_names(tmp_path):
    """The distillation hetjob with its pools' names swapped: the training pool is called
    `teach` (fake series, dev1-6) and the teacher's pool `train` (fake-teach, dev7-8). verl's
    workers follow `roles:`: the actor's bundles on the pool called teach, the teacher's on
    the pool called train; the preflight reports each role's nodes."""
    assets = REPO / "examples" / "assets"
    data = yaml.safe_load((REPO / "examples" / "distill" / "config.yaml").read_text())
    data["model"], data["teacher"] = str(assets / "model"), {"model": str(assets / "teacher")}
    data["data"] = {"train": {"files": str(assets / "data" / "train.parquet")},
                    "validation": {"files": str(assets / "data" / "test.parquet")}}
    data["spec"]["resources"] = {
        "pools": [{"name": "teach", "series": "fake", "nodes": 1, "gpus_per_node": 4},
                  {"name": "train", "series": "fake-teach", "nodes": 1, "gpus_per_node": 4}],
        "roles": {"actor": "teach", "rollout": "teach", "teacher": "train"}}
    exp = tmp_path / "swapped"
    exp.mkdir()
    (exp / "config.yaml").write_text(yaml.safe_dump(data))
    os.chmod(tmp_path, 0o755)
    out = submit_preflight(str(exp))
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    report = out["preflight"]
    (actor_node,) = report["pools"]["teach"]["joined"]
    (teacher_node,) = report["pools"]["train"]["joined"]
    assert teacher_node in ("dev7", "dev8") and actor_node not in ("dev7", "dev8")
    roles = {r["role"]: r for r in report["roles"]}
    assert set(roles) == {"actor", "rollout", "ref", "teacher"}
    assert roles["actor"]["nodes"] == roles["rollout"]["nodes"] == [actor_node]
    assert roles["teacher"]["nodes"] == [teacher_node] and roles["teacher"]["placed_on_pool"] == "train"
    assert all(r["ok"] for r in roles.values())


# The driver of each job: mark this job as up, then wait (120 s at most) for the other job's
# mark. Both jobs then hold dev7 and dev8 with their Ray clusters up at the same time, however
# the queue (other tests' jobs on the teach nodes) lets them start; unmet, the job fails.
MEET_DRIVER = ('touch "$SF_TEST_MEET/$SLURM_JOB_ID"; for _ in $(seq 240); do '
               '[ "$(ls "$SF_TEST_MEET" | wc -l)" -ge 2 ] && exit 0; sleep 0.5; done; '
               'echo "the other job never started beside this one" >&2; exit 1')


# serial: both jobs must hold dev7 and dev8 at once; beside other tests' jobs on the teach
# nodes the queue started them one after the other, which proved nothing (and their random
# port blocks then met one time in 12)
@pytest.mark.serial
def test_two_jobs_on_shared_nodes_no_port_clash(tmp_path):
    site = shared_series_site(tmp_path)
    meet = tmp_path / "meet"
    meet.mkdir()
    env = {**os.environ, "SF_TEST_DRIVER": MEET_DRIVER, "SF_TEST_MEET": str(meet)}
    procs = [subprocess.Popen([SF, "submit", "examples/grpo", "--site", site, "--profile", "shared:2x2",
                               "--wait", "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=240 + QUEUE_WAIT_S)
        out = json.loads(stdout[stdout.index("{"):])
        assert proc.returncode == 0, stderr + str(out.get("reason"))
        outs.append(out)
    assert len(list(meet.iterdir())) == 2  # both drivers ran, each while the other's job was up
    starts = [[e for e in phases(RUNS / o["run"]) if e["phase"] == "node_started"] for o in outs]
    hosts = [{e["node"] for e in s} for s in starts]
    assert hosts[0] == hosts[1] == {"dev7", "dev8"}  # the same two nodes, at the same time
    assert all(phase(RUNS / o["run"], "all_joined") for o in outs)
    heads = [[e for e in s if e["role"] == "head"][-1] for s in starts]
    assert heads[0]["gcs_port"] != heads[1]["gcs_port"], heads
    # on one host the two jobs' port ranges (each node's last try) do not overlap at all
    spans = sorted({o["run"]: (e["port_base"], e["port_last"]) for o, s in zip(outs, starts, strict=True)
                    for e in s if e["node"] == "dev7"}.values())
    assert len(spans) == 2 and spans[0][1] < spans[1][0], spans
    # every try of `ray start` (a loaded host retries some) had a temp dir of its own, and the
    # last tries were 4: 2 jobs x 2 nodes
    temp_dirs = [e["temp_dir"] for s in starts for e in s]
    assert len(set(temp_dirs)) == len(temp_dirs), temp_dirs
    last_tries = {(o["run"], e["node"]): e["temp_dir"] for o, s in zip(outs, starts, strict=True) for e in s}
    assert len(last_tries) == 4, last_tries
