"""The dev cluster is a real Slurm: jobs, accounting, hetjobs with GRES, throttled arrays,
requeue, and submitit all behave as on a production cluster."""
from __future__ import annotations

import operator
import re
import sys

import pytest
from helpers import TEACH, TRAIN


def test_plain_job_completes_and_sacct_reports_it(slurm, tmp_path, wait_for):
    out = tmp_path / "plain.out"
    jid = slurm.sbatch("-J", "sf-plain", "-t", "2", "-o", str(out),
                       "--wrap", "echo hello from $SLURMD_NODENAME")
    slurm.wait_terminal(jid, timeout=60)
    # sacct lags squeue by about a second: poll until it reports the final state.
    states = wait_for(lambda: (s := slurm.sacct_states(jid)).get(jid) == "COMPLETED" and s,
                      timeout=20, what=f"sacct COMPLETED for {jid}")
    assert states[jid] == "COMPLETED"
    assert re.fullmatch(r"hello from dev\d+\n", out.read_text())


def test_hetjob_groups_land_on_their_partitions_with_gpus(slurm, tmp_path):
    out = tmp_path / "het.out"
    script = f"""#!/bin/bash
#SBATCH -J sf-het -t 2 -o {out}
#SBATCH -p train -N1 -n1 -c1 --gres=gpu:2
#SBATCH hetjob
#SBATCH -p teach -N1 -n1 -c1 --gres=gpu:3
srun --het-group=0 bash -c 'echo "G0 $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"'
srun --het-group=1 bash -c 'echo "G1 $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"'
"""
    jid = slurm.sbatch(script=script)
    states = slurm.wait_terminal(jid, timeout=90, count=2)
    assert states == {f"{jid}+0": "COMPLETED", f"{jid}+1": "COMPLETED"}, states
    lines = dict(line.split(" ", 1) for line in out.read_text().splitlines()
                 if line.startswith("G"))
    node0, gpus0 = lines["G0"].split()
    node1, gpus1 = lines["G1"].split()
    assert node0 in TRAIN and node1 in TEACH, lines
    assert len(gpus0.split(",")) == 2 and len(gpus1.split(",")) == 3, lines
    assert all(g in "0123" for g in gpus0.split(",") + gpus1.split(","))


def test_job_array_respects_throttle(slurm, tmp_path):
    script = f"""#!/bin/bash
#SBATCH -J sf-array -t 2 -c1 --mem=100M -o {tmp_path}/arr_%a.out
echo "start $(date +%s.%N)" > {tmp_path}/t_$SLURM_ARRAY_TASK_ID
sleep 3
echo "end $(date +%s.%N)" >> {tmp_path}/t_$SLURM_ARRAY_TASK_ID
"""
    jid = slurm.sbatch("--array=0-3%2", script=script)
    states = slurm.wait_terminal(jid, timeout=90, count=4)
    assert sorted(states) == [f"{jid}_{i}" for i in range(4)], states
    assert set(states.values()) == {"COMPLETED"}, states
    intervals = []
    for i in range(4):
        rec = dict(line.split() for line in (tmp_path / f"t_{i}").read_text().splitlines())
        intervals.append((float(rec["start"]), float(rec["end"])))
    # At no task's start were more than 2 tasks running (its own included).
    for s, _ in intervals:
        running = sum(1 for a, b in intervals if a <= s < b)
        assert running <= 2, intervals
    assert max(b for _, b in intervals) - min(a for a, _ in intervals) >= 6, intervals


def test_requeue_reruns_job_with_restart_count(slurm, tmp_path, wait_for):
    rec = tmp_path / "runs.txt"
    script = f"""#!/bin/bash
#SBATCH -J sf-requeue -t 3 -c1 --requeue -o {tmp_path}/requeue-%j.out --open-mode=append
echo "run ${{SLURM_RESTART_COUNT:-0}}" >> {rec}
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then sleep 120; fi
"""
    jid = slurm.sbatch(script=script)
    try:
        wait_for(lambda: rec.exists() and "run 0" in rec.read_text(), timeout=60,
                 what="first run to start")
        slurm.run("scontrol", "requeue", jid)
        # The requeue delay is AuthInfo=cred_expire (10 s on the dev cluster).
        wait_for(lambda: "run 1" in rec.read_text(), timeout=75, what="second run after requeue")
        states = slurm.wait_terminal(jid, timeout=30)
        assert states[jid] == "COMPLETED", states
        assert rec.read_text().splitlines() == ["run 0", "run 1"]
        assert slurm.show_job(jid).get("Restarts") == "1"
    finally:
        slurm.cancel(jid)


def test_submitit_runs_a_function_on_the_cluster(slurm, tmp_path, wait_for):
    submitit = pytest.importorskip("submitit")
    ex = submitit.SlurmExecutor(folder=tmp_path / "submitit", python=sys.executable)
    ex.update_parameters(partition="train", time=3, cpus_per_task=1, mem="500M",
                         job_name="sf-submitit")
    # A function importable on the compute node (cloudpickle pickles it by reference).
    job = ex.submit(operator.add, 2, 3)
    wait_for(lambda: job.done(force_check=True), timeout=90, interval=1,
             what=f"submitit job {job.job_id}")
    assert job.result() == 5
    nodes = slurm.run("sacct", "-j", job.job_id, "-X", "-n", "-P", "-o", "NodeList").split()
    assert nodes and nodes[0] in TRAIN, nodes
