"""Monitoring on the real dev cluster: launcher.slurm submits small batch scripts, run
records point at them, and launcher.monitor.poll / `sf status|logs|cancel` follow them with one
sacct call per poll. Fails (never skips) when the cluster does not answer (conftest)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from click.testing import CliRunner
from helpers import TEACH, TRAIN

from launcher import runs
from launcher import slurm as sfslurm
from launcher.cli.app import main
from launcher.monitor import poll as monitor


def _run_with_job(root, name, script_text, *, extra_args=()):
    """A run record whose job.sbatch is submitted through launcher.slurm.sbatch."""
    run = runs.create_run(root, name)
    script = run.write_text("job.sbatch", script_text.replace("@LOGS@", str(run.logs_dir)).replace("@RUN@", run.id))
    job_id = sfslurm.sbatch(script, extra_args=extra_args, cwd=run.dir)
    run.set_job_ids([job_id])
    run.add_state("submitted", job_id=job_id)
    return run, job_id


def _poll_once(watched, root):
    """One poll; asserts it cost exactly one sacct call, and at most one squeue (only for ids
    slurmdbd has not recorded yet), nothing else."""
    before = dict(sfslurm.CALLS)
    statuses = monitor.poll(watched, runs_dir=root)
    assert sfslurm.CALLS["sacct"] - before.get("sacct", 0) == 1
    squeue = sfslurm.CALLS["squeue"] - before.get("squeue", 0)
    assert squeue in (0, 1) and sfslurm.CALLS["total"] - before.get("total", 0) == 1 + squeue
    assert all(s.source == "sacct" for s in statuses if s.job_ids)
    return statuses


def test_plain_job_and_throttled_array_one_sacct_call_per_poll(tmp_path):
    root = tmp_path / "runs"
    plain, plain_id = _run_with_job(root, "plain", """#!/bin/bash
#SBATCH -J sfmon-plain -t 2 -o @LOGS@/slurm-%j.out
echo hello from $SLURMD_NODENAME
sleep 2
""")
    sweep = runs.create_run(root, "arr", kind="sweep", points=[{"i": i} for i in range(6)])
    script = sweep.write_text("job.sbatch", f"""#!/bin/bash
#SBATCH -J sfmon-array -t 2 -o {tmp_path}/arr-%A_%a.out --array=0-5%2
echo task $SLURM_ARRAY_TASK_ID on $SLURMD_NODENAME
sleep 2
""")
    array_id = sfslurm.sbatch(script)
    sweep.set_job_ids([array_id])
    sweep.add_state("submitted", job_id=array_id)

    deadline = time.monotonic() + 120
    max_running = 0
    polls = 0
    while True:
        plain_status, sweep_status = _poll_once([plain, sweep], root)
        polls += 1
        running = [p for p in sweep_status.points if p["state"] == "running"]
        max_running = max(max_running, len(running))
        if plain_status.done and sweep_status.done:
            break
        assert time.monotonic() < deadline, f"not done after 120 s: {plain_status}, {sweep_status.points}"
        time.sleep(1)
    assert polls >= 2
    assert plain_status.state == "completed" and plain_status.nodes in TRAIN
    assert [p["job_id"] for p in sweep_status.points] == [f"{array_id}_{i}" for i in range(6)]
    assert all(p["state"] == "completed" for p in sweep_status.points), sweep_status.points
    assert sweep_status.state == "completed"
    assert 1 <= max_running <= 2  # the %2 throttle, seen through sacct
    assert plain.record()["state"] == "completed" and sweep.record()["state"] == "completed"
    assert "hello from dev" in (plain.logs_dir / f"slurm-{plain_id}.out").read_text()


def test_hetjob_components_reported_and_aggregated(tmp_path, wait_for):
    root = tmp_path / "runs"
    run, job_id = _run_with_job(root, "het", """#!/bin/bash
#SBATCH -J sfmon-het -t 2 -o @LOGS@/slurm-%j.out
#SBATCH -p train -N1
#SBATCH hetjob
#SBATCH -p teach -N1
sleep 15
""")

    def running_with_both():
        status = _poll_once([run], root)[0]
        parts = {k: v for k, v in status.jobs.items() if k.startswith(f"{job_id}+")}
        if status.state == "running" and len(parts) == 2:
            return status, parts
        return None

    # hetjobs start from the backfill scheduler only, and slurmdbd learns the components
    # a few seconds after squeue: the job runs 15 s so sacct shows it running.
    status, parts = wait_for(running_with_both, timeout=120, interval=1,
                             what=f"hetjob {job_id} running with 2 components in sacct")
    assert set(parts) == {f"{job_id}+0", f"{job_id}+1"}
    assert parts[f"{job_id}+0"]["nodelist"] in TRAIN and parts[f"{job_id}+1"]["nodelist"] in TEACH
    assert status.jobs[job_id]["kind"] == "hetjob" and status.jobs[job_id]["parts"] == sorted(parts)
    # The plain id that submitit's watcher never finds is followed to its end.
    final = wait_for(lambda: (s := _poll_once([run], root)[0]).done and s, timeout=90, interval=1,
                     what=f"hetjob {job_id} done")
    assert final.state == "completed" and final.slurm_state == "COMPLETED"
    states = sfslurm.job_states([job_id, f"{job_id}+1"])
    assert states[job_id].state == "COMPLETED" and states[f"{job_id}+1"].state == "COMPLETED"


def _wait_running(run, root, wait_for, timeout=90):
    return wait_for(lambda: (s := monitor.poll([run], runs_dir=root)[0]).state == "running" and s,
                    timeout=timeout, interval=0.5, what=f"{run.id} running")


def test_status_json_and_cancel_of_a_running_job(tmp_path, wait_for):
    root = tmp_path / "runs"
    run, job_id = _run_with_job(root, "long", """#!/bin/bash
#SBATCH -J sf-@RUN@ -t 3 -o @LOGS@/slurm-%j.out
echo started
sleep 300
""")
    try:
        _wait_running(run, root, wait_for)
        runs.record_phase(run.dir, "allocated")
        runner = CliRunner()
        result = runner.invoke(main, ["status", run.id, "--json", "--runs-dir", str(root)])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        entry = doc["runs"][0]
        assert doc["source"] == "sacct" and doc["accounting"] is True
        assert entry["id"] == run.id and entry["state"] == "running" and entry["job_ids"] == [job_id]
        assert entry["nodes"] in TRAIN and entry["progress"] == "allocated"
        table = runner.invoke(main, ["status", "--runs-dir", str(root)])
        assert table.exit_code == 0 and run.id in table.output and "running" in table.output

        result = runner.invoke(main, ["cancel", run.id, "--json", "--runs-dir", str(root)])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["cancelled"] == [run.id]
        assert run.record()["state"] == "cancelled"
        wait_for(lambda: sfslurm.job_states([job_id])[job_id].state == "CANCELLED", timeout=60,
                 what=f"sacct CANCELLED for {job_id}")
        final = monitor.poll([run], runs_dir=root)[0]
        assert final.state == "cancelled" and final.done
        again = runner.invoke(main, ["cancel", run.id, "--runs-dir", str(root)])
        assert again.exit_code == 0 and "nothing to cancel" in again.output
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


def test_status_of_unknown_run_names_close_ids(tmp_path):
    root = tmp_path / "runs"
    run = runs.create_run(root, "grpo")
    result = CliRunner().invoke(main, ["status", run.id[:-1] + "!", "--runs-dir", str(root)])
    assert result.exit_code == 2 and run.id in result.output


def test_logs_follow_a_running_job_until_it_ends(tmp_path, wait_for):
    root = tmp_path / "runs"
    run, job_id = _run_with_job(root, "chatty", """#!/bin/bash
#SBATCH -J sfmon-logs -t 2 -o @LOGS@/slurm-%j.out
for i in $(seq 1 8); do echo "tick $i"; sleep 0.5; done
echo "done on $SLURMD_NODENAME"
""")
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "launcher.cli.app", "logs", run.id, "-f", "--runs-dir", str(root),
             "--interval", "0.2", "--check-every", "1"],
            capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert [line for line in lines if line.startswith("tick")] == [f"tick {i}" for i in range(1, 9)]
        assert lines[-1].startswith("done on dev")
        state = sfslurm.job_states([job_id])[job_id].state
        assert state in ("COMPLETED", "COMPLETING") or state == "RUNNING" and took < 120
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


def test_show_job_restarts_and_hostnames(tmp_path, wait_for):
    root = tmp_path / "runs"
    run, job_id = _run_with_job(root, "show", """#!/bin/bash
#SBATCH -J sfmon-show -t 2 -N2 -o @LOGS@/slurm-%j.out
sleep 30
""")
    try:
        _wait_running(run, root, wait_for)
        info = sfslurm.show_job(job_id)
        assert info["JobId"] == job_id and info["Restarts"] == "0" and info["JobState"] == "RUNNING"
        hosts = sfslurm.hostnames(info["NodeList"])
        assert len(hosts) == 2 and set(hosts) <= TRAIN
    finally:
        sfslurm.scancel([job_id])


def test_squeue_fallback_on_the_real_cluster_says_so(tmp_path, monkeypatch, wait_for):
    """sacct that answers like a cluster without accounting; the real squeue behind it."""
    import shutil

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("squeue", "sbatch", "scancel", "scontrol"):
        (bindir / name).symlink_to(shutil.which(name))
    (bindir / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n")
    (bindir / "sacct").chmod(0o755)
    monkeypatch.setenv("SF_SLURM_BIN_DIR", str(bindir))
    root = tmp_path / "runs"
    run, job_id = _run_with_job(root, "noacct", """#!/bin/bash
#SBATCH -J sfmon-noacct -t 2 -o @LOGS@/slurm-%j.out
sleep 20
""")
    try:
        before = dict(sfslurm.CALLS)
        status = wait_for(lambda: (s := monitor.poll([run], runs_dir=root)[0]).state == "running" and s,
                          timeout=60, what="running via squeue")
        assert status.source == "squeue" and "accounting unavailable" in status.warning
        assert sfslurm.CALLS["squeue"] > before.get("squeue", 0)
        result = CliRunner().invoke(main, ["status", run.id, "--runs-dir", str(root)])
        assert result.exit_code == 0 and "accounting unavailable" in result.output
        assert "from squeue" in result.output
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
