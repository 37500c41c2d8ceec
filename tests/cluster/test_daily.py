"""Daily use on the real dev cluster (issue 12): scheduler options reach real sbatch; one
attempt of a run at a time (per-run job name + --dependency=singleton)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    REQUEUE_DRIVER,
    cleanup,
    experiment,
    hetjob_experiment,
    job_state,
    phases,
    requeue_experiment,
    sf,
    wait_event,
    wait_state,
    wait_until,
)

from launcher import slurm  # noqa: E402
from launcher.states import slurm_done  # noqa: E402

SLEEPER = 'echo "test driver: attempt ${SLURM_RESTART_COUNT:-0}"; exec sleep 600'


def test_scheduler_options_and_singleton_on_real_slurm(tmp_path):
    exp = requeue_experiment(tmp_path, max_requeues=1)
    proc = sf("submit", exp, "--json", "--exclude", "dev8", "--mail-type", "FAIL", "--mail-user", "sftest",
              "--sbatch", "comment=sf-daily", "--sbatch", "nice=10", env={"SF_TEST_DRIVER": SLEEPER})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, first = out["run"], Path(out["run_dir"]), out["job_id"]
    jobs = [first]
    try:
        info = slurm.show_job(first)
        # the options as Slurm understood them
        assert info["JobName"] == f"sf-{run}"
        assert info.get("ExcNodeList") == "dev8" and info.get("MailType") == "FAIL"
        assert info.get("MailUser") == "sftest" and info.get("Comment") == "sf-daily" and info.get("Nice") == "10"
        assert info.get("Dependency") in ("singleton", "(null)")  # (null) once satisfied
        wait_event(run_dir, "driver_started", restart=0, timeout=150)
        # the same run submitted again by hand (the script says how): it waits for the first
        second = subprocess.run(["sbatch", "--parsable", str(run_dir / "job.sbatch")], capture_output=True,
                                text=True, env={**os.environ, "SF_TEST_DRIVER": SLEEPER}, check=True,
                                timeout=30).stdout.strip().split(";")[0]
        jobs.append(second)
        # the scheduler's verdict on it: held by the singleton dependency
        info2 = wait_until(lambda: (lambda i: i if i.get("Reason") == "Dependency" else None)(slurm.show_job(second)),
                           60, lambda: f"second job not held by its dependency: {slurm.show_job(second)}")
        assert info2["JobState"] == "PENDING" and info2["Reason"] == "Dependency", info2
        assert info2["Dependency"].startswith("singleton") and info2["JobName"] == f"sf-{run}"
        assert job_state(first) == "RUNNING"
        # a run that must wait for another job: --dependency through sf, as Slurm sees it
        proc = sf("submit", exp, "--json", "--dependency", f"afterok:{first}", env={"SF_TEST_DRIVER": SLEEPER})
        assert proc.returncode == 0, proc.stderr
        third, third_dir = json.loads(proc.stdout)["job_id"], Path(json.loads(proc.stdout)["run_dir"])
        jobs.append(third)
        info3 = slurm.show_job(third)
        assert info3["JobState"] == "PENDING" and info3["Dependency"].startswith(f"afterok:{first}"), info3
        # (Slurm drops the singleton it already found satisfied from what it shows: no other job has its name)
        assert f"#SBATCH --dependency=afterok:{first},singleton\n" in (third_dir / "job.sbatch").read_text()
        # the first attempt ends: only then does the second start
        subprocess.run(["scancel", first], check=True)
        wait_state(second, {"RUNNING"}, timeout=120)
        print(f"\nsingleton: job {second} of run {run} waited (Reason=Dependency) until job {first} ended")
    finally:
        for job in jobs:
            cleanup(job)


# --- one logger run across restarts (issue 12 item 5) ------------------------------------------
# The driver records, in every attempt, the WANDB_* environment of each of the run's two nodes
# (an overlapping srun step on both) and, where the `wandb` package can be imported (the dev
# runtime, else the folder $SF_TEST_WANDB_PATH, e.g. `pip install --target DIR wandb`), starts
# a real offline W&B run the way verl's logger does (wandb.init with project and name) and
# writes the id it got.
WANDB_PATH = os.environ.get("SF_TEST_WANDB_PATH",
                            os.path.join(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev"), "wandb-test"))
WANDB_DRIVER = r"""
n="${SLURM_RESTART_COUNT:-0}"
srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 \
  sh -c 'echo "$SLURMD_NODENAME $(env | grep ^WANDB_ | sort | tr "\n" " ")"' \
  | sort > "$FORGE_CLUSTER_RUN_DIR/wandb-env-$n.txt"
python - "$n" > "$FORGE_CLUSTER_RUN_DIR/wandb-id-$n.txt" 2> "$FORGE_CLUSTER_RUN_DIR/wandb-err-$n.txt" <<'PY'
import os, sys
sys.path.append(os.environ.get("SF_TEST_WANDB_PATH", ""))
try:
    import wandb
except ImportError:
    print("no-wandb"); sys.exit(0)
run = wandb.init(project=os.environ["WANDB_PROJECT"], name=os.environ["WANDB_NAME"])
run.log({"attempt": int(sys.argv[1])})
print(run.id)
run.finish()
PY
echo "test driver: attempt $n"
if [ "$n" -ge 1 ]; then exit 0; fi
exec sleep 600
"""


def requeued_wandb_run(tmp):
    """A two-node run with trainer.logger [console, file, wandb] on a site without internet,
    requeued once by hand (scontrol requeue); -> (run id, run dir, sf submit's stderr)."""
    import yaml

    from launcher.spec import paths

    exp = Path(requeue_experiment(tmp, max_requeues=2))
    data = yaml.safe_load((exp / "config.yaml").read_text())
    data["spec"]["resources"]["pools"][0]["nodes"] = 2
    data.setdefault("knobs", {})["logger"] = ["console", "file", "wandb"]
    (exp / "config.yaml").write_text(yaml.safe_dump(data))
    site = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    site["internet"] = False
    site_file = tmp / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    proc = sf("submit", str(exp), "--site", str(site_file), "--json",
              env={"SF_TEST_DRIVER": WANDB_DRIVER, "SF_TEST_WANDB_PATH": WANDB_PATH})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, job = out["run"], Path(out["run_dir"]), out["job_id"]
    try:
        wait_event(run_dir, "driver_started", restart=0, timeout=180)
        id_file, deadline = run_dir / "wandb-id-0.txt", time.monotonic() + 60
        while not (id_file.exists() and id_file.read_text().strip()):
            assert time.monotonic() < deadline, "attempt 0 wrote no W&B id"
            time.sleep(0.5)
        subprocess.run(["scontrol", "requeue", job], check=True)
        wait_event(run_dir, "driver_started", restart=1, timeout=180)
        wait_state(job, {"COMPLETED"}, timeout=120)
    finally:
        cleanup(job)
    return run, run_dir, proc.stderr


def test_wandb_one_run_across_requeue_and_nodes(tmp_path):
    """One job for both checks (a 2-node job requeued once): the W&B environment is the same
    on both nodes and in both attempts, and the real wandb logs both attempts to one run id.
    One test, not two sharing a module fixture: side by side (worksteal) each worker that ran
    one of them ran the whole job for it."""
    run, run_dir, stderr = requeued_wandb_run(tmp_path)
    attempts = [(run_dir / f"wandb-env-{n}.txt").read_text().splitlines() for n in (0, 1)]
    expected = {f"WANDB_DIR={run_dir}", "WANDB_MODE=offline", f"WANDB_NAME={run}", "WANDB_PROJECT=requeue2",
                "WANDB_RESUME=allow", f"WANDB_RUN_ID={run}"}
    for lines in attempts:
        assert len(lines) == 2 and lines[0].split()[0] != lines[1].split()[0], lines  # two nodes
        for line in lines:
            assert set(line.split()[1:]) == expected, line
    assert [line.split()[1:] for line in attempts[0]] == [line.split()[1:] for line in attempts[1]]
    assert f"wandb sync --include-offline {run_dir}/wandb/offline-run-*" in stderr

    ids = [(run_dir / f"wandb-id-{n}.txt").read_text().strip() for n in (0, 1)]
    if ids == ["no-wandb", "no-wandb"]:
        pytest.skip(f"the wandb package is neither in the dev runtime nor in {WANDB_PATH} "
                    "(pip install --target DIR wandb; SF_TEST_WANDB_PATH=DIR)")
    assert ids == [run, run], (ids, [(run_dir / f"wandb-err-{n}.txt").read_text()[-2000:] for n in (0, 1)])
    offline_runs = sorted((run_dir / "wandb").glob(f"offline-run-*-{run}"))
    assert len(offline_runs) == 2, offline_runs  # one folder an attempt, both of the one run id
    print(f"\nW&B offline: both attempts logged to run id {ids[0]} ({', '.join(p.name for p in offline_runs)})")


# --- sf attach: a real overlapping step in a running hetjob (issue 12 item 1) -------------------

PROBE = ('echo "node=$SLURMD_NODENAME job=$SLURM_JOB_ID ray=$RAY_ADDRESS mode=$RAY_AUTH_MODE '
         'token=$RAY_AUTH_TOKEN_PATH run=$SF_RUN_DIR python=$(command -v python)"')


def test_attach_reaches_every_het_group_through_a_real_step(tmp_path):
    proc = sf("submit", hetjob_experiment(tmp_path, "attachhet"), "--json", env={"SF_TEST_DRIVER": SLEEPER})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, job = out["run"], Path(out["run_dir"]), out["job_id"]
    try:
        wait_event(run_dir, "driver_started", restart=0, timeout=180)
        allocated = [e for e in phases(run_dir) if e["phase"] == "allocated"][-1]
        train_node, teach_node = allocated["pools"]["train"][0], allocated["pools"]["teach"][0]
        head = [e for e in phases(run_dir) if e["phase"] == "head_up"][-1]["address"]
        printed = sf("attach", run, "--role", "teacher", "--print")
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.startswith(f"srun --het-group=1 --nodes=1 --ntasks=1 --nodelist={teach_node} "
                                         f"--overlap --jobid={job} --pty bash -c ")
        token = f"{run_dir}/.ray-auth/{job}.token"
        for args, node in ((["--role", "teacher"], teach_node), (["--node", train_node], train_node), ([], train_node)):
            probe = sf("attach", run, *args, "--", "sh", "-c", PROBE, timeout=120)
            assert probe.returncode == 0, probe.stderr
            line = probe.stdout.strip().splitlines()[-1]
            assert f"node={node} " in line and f"ray={head} " in line and "mode=token " in line, line
            assert f"token={token} " in line and f"run={run_dir} " in line and "/runtimes/verl-" in line, line
        # ray status through the step, with the job's token: the cluster of both het groups
        # (right after the bring-up Ray may answer "No cluster status" for a few seconds)
        deadline = time.monotonic() + 90
        while True:
            status = sf("attach", run, "--", "ray", "status", timeout=180)
            assert status.returncode == 0, status.stdout + status.stderr
            if "Active:" in status.stdout or time.monotonic() > deadline:
                break
            time.sleep(3)
        assert "Active:" in status.stdout and status.stdout.count("node_") >= 2, status.stdout
        assert job_state(job) == "RUNNING"  # the steps left the job alone
        # a hetjob of the run submitted again by hand waits too (each component its own name)
        again = subprocess.run(["sbatch", "--parsable", str(run_dir / "job.sbatch")], capture_output=True, text=True,
                               env={**os.environ, "SF_TEST_DRIVER": SLEEPER}, check=True,
                               timeout=30).stdout.strip().split(";")[0].split("+")[0]
        try:
            # once the scheduler has looked at it: pending, for its dependency (the singleton)
            info = wait_until(lambda: (i := slurm.show_job(again)).get("Reason") not in (None, "None") and i, 30,
                              f"job {again} was never looked at by the scheduler")
            assert info["JobState"] == "PENDING" and info["Reason"] == "Dependency", info
        finally:
            cleanup(again)
        print(f"\nsf attach: shells on {train_node} (het group 0) and {teach_node} (het group 1) of job {job}")
    finally:
        cleanup(job)
    wait_state(job, {"CANCELLED", "COMPLETED", "FAILED", "UNKNOWN"}, timeout=60)
    ended = sf("attach", run, "--print")
    assert ended.returncode == 2 and f"run {run} is not running" in ended.stderr, ended.stderr


# --- chains: --after RUN (issue 12 item 3, first part) ------------------------------------------

def test_after_waits_for_success_across_a_requeue(tmp_path):
    """B --after A: B waits on afterok:<A's job>; A is requeued (same job id) and B still
    waits; A then completes and B starts."""
    exp = requeue_experiment(tmp_path, max_requeues=2)
    proc = sf("submit", exp, "--json", env={"SF_TEST_DRIVER": REQUEUE_DRIVER, "SF_TEST_FINISH_AT": "1"})
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    run_a, dir_a, job_a = first["run"], Path(first["run_dir"]), first["job_id"]
    jobs = [job_a]
    try:
        wait_event(dir_a, "driver_started", restart=0, timeout=150)
        proc = sf("submit", exp, "--json", "--after", run_a, env={"SF_TEST_DRIVER": SLEEPER})
        assert proc.returncode == 0, proc.stderr
        job_b = json.loads(proc.stdout)["job_id"]
        jobs.append(job_b)
        info = slurm.show_job(job_b)
        assert info["JobState"] == "PENDING" and info["Dependency"].startswith(f"afterok:{job_a}"), info
        subprocess.run(["scontrol", "requeue", job_a], check=True)
        wait_event(dir_a, "restarted", restart=1, timeout=150)
        info = slurm.show_job(job_b)  # A is back (same id): B still waits for it
        assert info["JobState"] == "PENDING" and info["Reason"] == "Dependency", info
        assert info["Dependency"].startswith(f"afterok:{job_a}"), info
        wait_state(job_a, {"COMPLETED"}, timeout=150)
        wait_state(job_b, {"RUNNING"}, timeout=120)
        print(f"\n--after: job {job_b} waited for run {run_a} (job {job_a}) through its requeue, then started")
    finally:
        for job in jobs:
            cleanup(job)


# --- chains: SFT -> GRPO with the export made on the fly (issue 12 item 3, second part) ----------

def _sacct_times(job: str) -> tuple[str, str, str]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,Start,End"], capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()
    if not out:  # not in accounting yet
        return "PENDING", "", ""
    state, start, end = out[0].split("|")
    return state.split()[0], start, end


def _pending_sft(tmp_path) -> tuple[str, str, str]:
    """An SFT preflight held back (a begin time an hour away: surely still queued when the
    next command chains on it; _release lets it start) and a GRPO experiment to chain:
    (GRPO experiment, SFT run id, SFT job id)."""
    sft_exp = experiment(tmp_path, "chainsft", method="verl/sft")  # one node, verl/sft under torchrun
    grpo_exp = requeue_experiment(tmp_path, max_requeues=1)
    proc = sf("submit", sft_exp, "--preflight", "--json", "--sbatch", "begin=now+1hour")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return grpo_exp, out["run"], out["job_id"]


def _release(job: str) -> None:
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)


def _sacct_times_when_done(jobs: list[str], timeout: float = 420) -> dict[str, tuple[str, str, str]]:
    """{job: (state, start, end)} once every job ended (or the timeout passed); sacct, not
    scontrol: a job that ended a while ago is gone from scontrol."""
    deadline = time.monotonic() + timeout
    while True:
        times = {job: _sacct_times(job) for job in jobs}
        if all(slurm_done(t[0]) for t in times.values()) or time.monotonic() > deadline:
            return times
        time.sleep(2)


def test_chain_sft_grpo_export_preflight_queued_at_once(tmp_path):
    """sf submit SFT --preflight, then at once sf submit GRPO --preflight --model run:SFT while
    the SFT is still pending: sf queues SFT's export (a preflight: it looks for SFT's last
    checkpoint, finds verl's merger on the runtime, makes the target folder, merges nothing)
    with afterok:<SFT job>, and GRPO with afterok:<export job>, its model the export's folder.
    All three end COMPLETED, each after the one it waits for."""
    grpo_exp, sft_run, sft_job = _pending_sft(tmp_path)
    jobs = [sft_job]
    try:
        proc = sf("submit", grpo_exp, "--preflight", "--json", "--model", f"run:{sft_run}")
        assert proc.returncode == 0, proc.stderr
        grpo_out = json.loads(proc.stdout)
        grpo_run, grpo_job, export_job = grpo_out["run"], grpo_out["job_id"], grpo_out["export_job"]
        jobs += [export_job, grpo_job]
        squeue = subprocess.run(["squeue", "-j", ",".join(jobs), "-o", "%.8i %.26j %.9T %.22E %R"],
                                capture_output=True, text=True).stdout
        print(f"\n$ squeue -j {','.join(jobs)} -o '%.8i %.26j %.9T %.22E %R'\n{squeue}")
        export_info, grpo_info = slurm.show_job(export_job), slurm.show_job(grpo_job)
        assert export_info["JobState"] == "PENDING" and export_info["Dependency"].startswith(f"afterok:{sft_job}")
        assert export_info["JobName"] == f"sf-export-{sft_run}"
        assert grpo_info["JobState"] == "PENDING" and grpo_info["Dependency"].startswith(f"afterok:{export_job}")
        from launcher import runs

        sft_rec = runs.open_run(os.environ["SF_RUNS_DIR"], sft_run).record()
        [export] = sft_rec["exports"]
        grpo = runs.open_run(os.environ["SF_RUNS_DIR"], grpo_run)
        target = export["target"]
        assert target == f"{grpo.dir.parent / sft_run}/exports/{export['id']}"
        assert grpo.record()["model_from"]["export_job"] == export_job
        assert f"actor_rollout_ref.model.path={target}\n" in (grpo.dir / "overrides.txt").read_text()
        _release(sft_job)
        times = _sacct_times_when_done(jobs)
        states = {job: t[0] for job, t in times.items()}
        print("\n".join(f"{job}: {state} start {start} end {end}" for job, (state, start, end) in times.items()))
        log = Path(export["log"].replace("%j", export_job)) if export.get("log") else None
        assert states == dict.fromkeys(jobs, "COMPLETED"), (states, log.read_text()[-2000:] if log else "")
        # each started only after the one it waited for ended
        assert times[export_job][1] >= times[sft_job][2] and times[grpo_job][1] >= times[export_job][2], times
        # what the export preflight really did: no checkpoint (the SFT was a preflight), the
        # runtime's merger found, the folder made, nothing merged
        report = json.loads(Path(export["report"]).read_text())
        assert report["failures"] == [] and report["merged"] is False
        assert not report["checkpoint"]["found"] and "is a preflight" in report["checkpoint"]["note"]
        assert report["merger"].endswith("/verl/model_merger/__main__.py") and report["target"]["writable"]
        assert not (Path(target) / "config.json").exists()
        # the GRPO preflight read the export's folder (its model path) on its node
        pre = json.loads((grpo.dir / "preflight.json").read_text())
        checked = [checks[target] for checks in pre["paths"].values() if target in checks]
        assert checked and all(c["readable"] for c in checked), pre["paths"]
        print(f"chain: SFT {sft_run} (job {sft_job}) -> export preflight (job {export_job}) -> "
              f"GRPO {grpo_run} (job {grpo_job}), model {target}")
    finally:
        for job in jobs:
            cleanup(job)


def test_sweep_on_a_pending_run_queues_its_export_once(tmp_path):
    """sf submit SFT --preflight (held back until released), then at once sf sweep GRPO --preflight
    --model run:SFT --grid rollout_n=2,4: ONE export of SFT (afterok:<SFT job>) and the
    sweep's array waiting on afterok:<export job>; every point completes after the export."""
    grpo_exp, sft_run, sft_job = _pending_sft(tmp_path)
    jobs = [sft_job]
    try:
        proc = sf("sweep", grpo_exp, "--preflight", "--json", "--model", f"run:{sft_run}",
                  "--grid", "rollout_n=2,4")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        [export] = out["chain_exports"]
        export_job, (array_job,) = export["job_id"], out["job_ids"]
        jobs += [export_job, array_job]
        export_info, array_info = slurm.show_job(export_job), slurm.show_job(array_job)
        assert export_info["Dependency"].startswith(f"afterok:{sft_job}"), export_info
        assert array_info["Dependency"].startswith(f"afterok:{export_job}"), array_info
        from launcher import runs

        assert len(runs.open_run(os.environ["SF_RUNS_DIR"], sft_run).record()["exports"]) == 1
        tasks = [f"{array_job}_0", f"{array_job}_1"]
        _release(sft_job)
        times = _sacct_times_when_done([sft_job, export_job, *tasks])
        print("\n".join(f"{job}: {state} start {start} end {end}" for job, (state, start, end) in times.items()))
        assert {job: t[0] for job, t in times.items()} == dict.fromkeys(times, "COMPLETED"), times
        assert all(times[task][1] >= times[export_job][2] for task in tasks), times
        for point in out["points"]:
            member = runs.open_run(os.environ["SF_RUNS_DIR"], point["run"])
            assert member.record()["model_from"]["export_job"] == export_job
            assert f"actor_rollout_ref.model.path={export['target']}\n" in (member.dir / "overrides.txt").read_text()
    finally:
        for job in jobs:
            cleanup(job)


# --- sf attach on a point of an array sweep -------------------------------------------------------

def test_attach_reaches_an_array_sweep_point_through_a_real_step(tmp_path):
    """A one-pool sweep is one job array; its point's record says `<array>_<task>`. sf attach
    runs a real overlapping step in that task (srun --jobid=<the task's own job id>), with
    the task's Ray address and token."""
    proc = sf("sweep", requeue_experiment(tmp_path, max_requeues=1), "--grid", "rollout_n=4,8", "--max-parallel", "1",
              "--json", env={"SF_TEST_DRIVER": SLEEPER})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    array = out["job_ids"][0]
    point = out["points"][0]
    run, task = point["run"], point["job_id"]
    assert task == f"{array}_0"
    from launcher import runs

    run_dir = runs.open_run(os.environ["SF_RUNS_DIR"], run).dir
    try:
        wait_event(run_dir, "driver_started", restart=0, timeout=180)
        allocated = [e for e in phases(run_dir) if e["phase"] == "allocated"][-1]
        node, own = allocated["pools"]["train"][0], str(allocated["leader"])
        info = slurm.show_job(own)
        assert (info["ArrayJobId"], info["ArrayTaskId"]) == (array, "0"), info  # the task's own id
        head = [e for e in phases(run_dir) if e["phase"] == "head_up"][-1]["address"]
        printed = sf("attach", run, "--print")
        assert printed.returncode == 0 and f" --jobid={own} " in printed.stdout, printed.stdout + printed.stderr
        probe = sf("attach", run, "--", "sh", "-c", PROBE, timeout=120)
        assert probe.returncode == 0, probe.stderr
        line = probe.stdout.strip().splitlines()[-1]
        assert f"node={node} " in line and f"job={own} " in line and f"ray={head} " in line, line
        assert f"token={run_dir}/.ray-auth/{own}.token " in line and f"run={run_dir} " in line, line
        status = sf("attach", run, "--", "ray", "status", timeout=180)
        deadline = time.monotonic() + 90
        while "Active:" not in status.stdout and time.monotonic() < deadline:
            time.sleep(3)
            status = sf("attach", run, "--", "ray", "status", timeout=180)
        assert "Active:" in status.stdout, status.stdout + status.stderr
        assert job_state(own) == "RUNNING"  # the step left the task alone
        print(f"\nsf attach: point {run} of array {array} (task job {own}) on {node}: {line}")
    finally:
        subprocess.run(["scancel", array], check=False)
