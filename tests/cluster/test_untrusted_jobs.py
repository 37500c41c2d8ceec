"""Another user (`nobody`), or the shell, against this user's Slurm jobs, processes and ports on
the real dev cluster (issue 44, deliverables 2-5):

  - a run record that names another run's job (planted in a shared runs folder): `sf cancel`
    refuses it naming both, by Slurm's own view of the job, and the job runs on;
  - SCANCEL_STATE=PENDING in the shell: `sf cancel` still cancels the running job, and says
    "cancelled" only once Slurm says so;
  - a stopped process of `nobody` whose environment claims the job and a worker node
    (SLURM_JOB_ID, SLURMD_NODENAME) during a hang: neither the hang's evidence nor the stacks
    pick it (processes come from the job's cgroup);
  - every port of the head's old worker range taken by `nobody` once the head is up: the job's
    new Ray workers start anyway (their ports are the kernel's) and the job completes (a whole
    range squatted before the start: tests/cluster/test_port_squat.py).
"""
from __future__ import annotations

import pwd
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    RUNS,
    cleanup,
    experiment,
    job_state,
    phases,
    sf,
    submit_driver,
    wait_event,
    wait_state,
    wait_terminal,
    wait_until,
    watchdog_experiment,
)

from launcher import runs  # noqa: E402

NOBODY = pwd.getpwnam("nobody")
PY = "/usr/bin/python3"  # a python `nobody` can run


def as_nobody_popen(*argv: str, env=None) -> subprocess.Popen:
    return subprocess.Popen(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                             "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or {"PATH": "/usr/bin:/bin"})


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def running_job(tmp_path, name: str) -> tuple[str, Path, str]:
    """A one-node job whose driver sleeps until cancelled; once its driver runs."""
    run, run_dir, job = submit_driver(experiment(tmp_path, name, max_requeues=0), "exec sleep 600")
    wait_event(run_dir, "driver_started", timeout=180)
    return run, run_dir, job


def test_a_record_naming_another_runs_job_is_refused_and_scancel_state_cannot_keep_a_job(tmp_path):
    run, run_dir, job = running_job(tmp_path, "victim")
    try:
        # a run planted beside it whose record names the victim's job
        planted = runs.create_run(RUNS, "planted")
        planted.add_state("submitted")
        planted.set_job_ids([job])
        refused = sf("cancel", planted.id)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        line = refused.stderr.strip()
        assert planted.id in line and f"Slurm job {job}" in line and f"sf-{run}" in line, line
        assert len(line.splitlines()) == 1 and "cancelled" not in refused.stdout
        assert wait_state(job, {"RUNNING"}) == "RUNNING"  # untouched
        assert planted.record()["state"] == "submitted"
        # with the victim's events and plan planted too, `sf attach` would enter the victim's job
        for name in ("events.jsonl", "plan.json"):
            shutil.copyfile(run_dir / name, planted.dir / name)
        entered = sf("attach", planted.id, "--", "true")
        assert entered.returncode == 2 and f"Slurm job {job}" in entered.stderr, entered.stdout + entered.stderr
        # the shell's SCANCEL_STATE=PENDING would make scancel skip a running job
        done = sf("cancel", run, env={"SCANCEL_STATE": "PENDING", "SCANCEL_VERBOSE": "1"})
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"cancelled {run}" in done.stdout
        assert wait_terminal(job, timeout=60) == "CANCELLED"
        assert runs.open_run(RUNS, run).record()["state"] == "cancelled"
        print(f"\nplanted record naming job {job}: refused ({line[:160]}...); SCANCEL_STATE=PENDING: cancelled")
    finally:
        cleanup(job)


def test_a_record_naming_another_users_job_is_refused(tmp_path):
    theirs = subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                             "--", "sbatch", "--parsable", "-p", "train", "-t", "5", "-J", "sf-theirs", "-o",
                             "/dev/null", "--wrap", "sleep 300"], capture_output=True, text=True, cwd="/tmp")
    assert theirs.returncode == 0, theirs.stderr
    job = theirs.stdout.strip().split(";")[0]
    try:
        planted = runs.create_run(RUNS, "theirs")
        planted.add_state("submitted")
        planted.set_job_ids([job])
        refused = sf("cancel", planted.id)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        line = refused.stderr.strip()
        assert planted.id in line and f"Slurm job {job}" in line and "nobody(" in line, line
        assert job_state(job) in ("PENDING", "RUNNING")  # sf ran no scancel: it is still nobody's to end
        assert planted.record()["state"] == "submitted"
        print(f"\nplanted record naming nobody's job {job}: refused ({line[:150]}...)")
    finally:
        subprocess.run(["scancel", job])


FORGER = "import os, signal, sys; print('ready', flush=True); os.kill(os.getpid(), signal.SIGSTOP)"


def test_a_forged_job_environment_is_not_the_jobs_process_during_a_hang(tmp_path):
    exp = watchdog_experiment(tmp_path, "forged", nodes=2, hang_timeout_s=15, first_step_timeout_s=180,
                              requeue=False)
    run, run_dir, job = submit_driver(exp, f"exec python3 {exp}/frozen.py")
    forger = None
    try:
        started = wait_event(run_dir, "driver_started", timeout=180)
        hosts = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"]
        worker = hosts[1]
        forger = as_nobody_popen(PY, "-c", FORGER, env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": job,
                                                        "SLURMD_NODENAME": worker, "SLURM_JOBID": job})
        assert forger.stdout.readline().strip() == "ready"
        wait_until(lambda: proc_state(forger.pid) == "T", 30, f"nobody's process {forger.pid} did not stop")
        saved = wait_event(run_dir, "stacks_saved", timeout=240)
        assert not saved.get("silent"), saved  # the healthy worker is not left out
        text = (run_dir / saved["dir"] / f"{worker}.txt").read_text()
        assert f"pid {forger.pid}:" not in text, text
        assert proc_state(forger.pid) == "T"  # not touched either
        assert wait_terminal(job, timeout=120) in ("FAILED", "CANCELLED", "COMPLETED")
        print(f"\nforged SLURM_JOB_ID={job} SLURMD_NODENAME={worker} (pid {forger.pid}, nobody, stopped): not picked; "
              f"hang {saved['time'] - started['time']:.1f} s after the driver started")
    finally:
        if forger is not None:
            forger.kill()
            forger.wait()
        cleanup(job)


SQUATTER = r"""
import socket, sys
held = []
for port in range(int(sys.argv[2]), int(sys.argv[3]) + 1):
    s = socket.socket()
    try:
        s.bind((sys.argv[1], port))
        s.listen()
        held.append(s)
    except OSError:
        s.close()
print(len(held), flush=True)
sys.stdin.read()
"""

# Waits for the test's file, then needs new Ray workers on every node (fresh actors, each its own
# worker process) and uses them: with Ray's fixed worker range taken each start would fail.
GRABBED_DRIVER = r"""
import os, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

flag = os.path.join(os.environ["FORGE_CLUSTER_RUN_DIR"], "ports-taken")
until = time.monotonic() + 240
while not os.path.exists(flag) and time.monotonic() < until:
    time.sleep(0.2)
assert os.path.exists(flag), "the test never took the ports"
ray.init()


@ray.remote(num_cpus=0)
class Fresh:
    def where(self):
        return os.environ.get("SLURMD_NODENAME", "?")


nodes = [n for n in ray.nodes() if n["Alive"]]
actors = [Fresh.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
          for n in nodes for _ in range(2)]
print("fresh workers on", sorted(ray.get([a.where.remote() for a in actors], timeout=120)), flush=True)
"""


def test_worker_ports_taken_after_the_head_is_up_do_not_end_the_job(tmp_path):
    exp = experiment(tmp_path, "grabbed", nodes=2, max_requeues=0, files={"grabbed.py": GRABBED_DRIVER})
    run, run_dir, job = submit_driver(exp, f"exec python3 {exp}/grabbed.py")
    squatter = None
    try:
        head = wait_event(run_dir, "head_up", timeout=180)
        address, _, gcs = head["address"].rpartition(":")
        # where the old layout put the head's worker range (16-127 past its GCS port): Ray's
        # workers take the kernel's ports now, so the job's new workers cannot be stopped here
        first, last = int(gcs) + 16, int(gcs) + 127
        squatter = subprocess.Popen(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                                     "--clear-groups", "--", PY, "-c", SQUATTER, "0.0.0.0", str(first), str(last)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        held = int(squatter.stdout.readline())
        assert held >= (last - first + 1) // 2, held  # most of the range: Ray's own may hold a few
        (run_dir / "ports-taken").write_text("")  # written as the job's user: the driver goes on
        assert wait_terminal(job, timeout=240) == "COMPLETED", (run_dir / "reason").read_text() \
            if (run_dir / "reason").exists() else "no reason"
        print(f"\nnobody held {held} ports of {first}-{last} on every address after the head was up: "
              "the job's new workers started on kernel-given ports and it completed")
    finally:
        if squatter is not None:
            squatter.kill()
            squatter.wait()
        cleanup(job)
