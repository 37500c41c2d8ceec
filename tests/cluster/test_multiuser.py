"""Another user (`nobody`) against this user's jobs on the real dev cluster (issue 31).

Each attack of the issue, tried for real; what holds it off:
  - a runs folder others may write without the sticky bit: `sf submit` refuses it (exit 2,
    nothing written) and `sf doctor` says so;
  - in a shared 1777 runs folder: the run folder cannot be renamed or replaced, nor anything
    planted in it; a submit under umask 000 still makes every folder 0700 and every file the
    job writes (a checkpoint, metrics) its user's alone; the record's lock cannot be opened;
  - a run folder replaced before the job starts (a runs folder an admin left open, an older
    sf): the job refuses to run and writes nothing into the other user's folder (not its
    events, not a token, not a chmod);
  - ports squatted by another user: tests/cluster/test_port_squat.py;
  - the submitting shell's SLURM_TIMELIMIT / SLURM_EXPORT_ENV / RAY_* do not reach the job (it
    completes; sf names what it left out), and the SF_TEST_* hooks are read only where the
    site allows them.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    REPO,
    SF,
    phases,
    requeue_experiment,
    sf,
)
from helpers import wait_terminal as wait_done  # noqa: E402

NOBODY = pwd.getpwnam("nobody")
STATE = Path("/var/lib/sfdev")
PY = "/usr/bin/python3"  # a python `nobody` can run (the repo's venv may sit in a folder it cannot read)
def as_nobody(*argv: str, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                           "--", *argv], capture_output=True, text=True, check=check, **kwargs)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def shared_runs():
    """A runs folder shared by every user the way README tells admins to make one: 1777."""
    root = STATE / f"mu-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    root.mkdir()
    os.chmod(root, 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def experiment(tmp_path: Path) -> str:
    """A one-node GRPO experiment of the example's assets that is never requeued."""
    return requeue_experiment(tmp_path, max_requeues=0)


def site_file(tmp_path: Path, **top) -> str:
    data = yaml.safe_load((REPO / "site" / "dev.yaml").read_text())
    ray = top.pop("ray", {})
    data["ray"].update(ray)
    data.update(top)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def why(run_dir: Path) -> str:
    """The reason and the batch log's end: what a failed assertion on a job's ending shows."""
    reason = (run_dir / "reason").read_text() if (run_dir / "reason").exists() else "(no reason)"
    logs = sorted((run_dir / "logs").glob("slurm-*.out"))
    return reason + "\n" + ("\n".join(logs[-1].read_text().splitlines()[-15:]) if logs else "(no batch log)")


def submitted(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_a_runs_folder_open_to_others_is_refused_and_doctor_says_so(tmp_path):
    open_root = STATE / f"mu-open-{os.getpid()}"
    open_root.mkdir()
    os.chmod(open_root, 0o777)  # "writable by every user", as README said before
    try:
        proc = sf("submit", experiment(tmp_path), "--runs-dir", str(open_root), "--json",
                  env={"SF_TEST_DRIVER": "exit 0"})
        assert proc.returncode == 2, proc.stdout + proc.stderr
        error = json.loads(proc.stdout)
        assert error["ok"] is False and "without the sticky bit" in proc.stderr and str(open_root) in proc.stderr
        assert "chmod 1777" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert list(open_root.iterdir()) == []  # nothing submitted, nothing half-written
        doctor = sf("doctor", "--site", site_file(tmp_path, runs_dir=str(open_root)), "--json")
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert doctor.returncode == 1 and checks["runs_dir"]["status"] == "fail", doctor.stdout
        assert "sticky" in checks["runs_dir"]["detail"]
    finally:
        shutil.rmtree(open_root, ignore_errors=True)


WRITER = r"""
umask > "$FORGE_CLUSTER_RUN_DIR/checkpoints/umask"
mkdir -p "$FORGE_CLUSTER_RUN_DIR/checkpoints/global_step_1"
echo weights > "$FORGE_CLUSTER_RUN_DIR/checkpoints/global_step_1/model.pt"
echo '{"step": 1}' >> "$VERL_FILE_LOGGER_PATH"
sleep "${SF_TEST_SLEEP:-1}"
"""


def test_in_a_shared_runs_folder_another_user_can_neither_take_nor_read_a_run(tmp_path, shared_runs):
    proc = subprocess.run([SF, "submit", experiment(tmp_path), "--runs-dir", str(shared_runs), "--json"],
                          capture_output=True, text=True, cwd=REPO, preexec_fn=lambda: os.umask(0),
                          env={**os.environ, "SF_TEST_DRIVER": WRITER, "SF_TEST_SLEEP": "8"})
    out = submitted(proc)
    run_dir, job = Path(out["run_dir"]), out["job_id"]
    deadline = time.monotonic() + 90
    while not any(e["phase"] == "driver_started" for e in phases(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    # while it runs, as the other user: rename it, replace it, plant in it, read it, take its lock
    assert as_nobody("mv", str(run_dir), str(shared_runs / "mine")).returncode != 0
    assert as_nobody("mkdir", str(run_dir / ".ray-auth-x")).returncode != 0
    assert as_nobody("ln", "-s", "/etc/passwd", str(run_dir / "events.jsonl.x")).returncode != 0
    assert as_nobody("cat", str(run_dir / "record.json")).returncode != 0
    assert as_nobody("ls", str(run_dir / "checkpoints")).returncode != 0
    lock = as_nobody(PY, "-c", f"import fcntl; f = open({str(run_dir / '.record.lock')!r}); "
                     "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)")
    assert lock.returncode != 0 and "Permission denied" in lock.stderr
    assert wait_done(job) == "COMPLETED", why(run_dir)
    # made under umask 000, yet every folder is 0700 and every file the job wrote 0600
    for folder in (run_dir, run_dir / "logs", run_dir / "checkpoints", run_dir / "metrics",
                   run_dir / "checkpoints" / "global_step_1"):
        assert mode(folder) == 0o700, folder
    for name in ("record.json", "events.jsonl", ".record.lock", "checkpoints/global_step_1/model.pt",
                 "metrics/attempt-0.jsonl"):
        assert mode(run_dir / name) == 0o600, name
    assert (run_dir / "checkpoints" / "umask").read_text().strip() == "0077"
    print("\nin a 1777 runs folder, as nobody: rename, plant, read, lock all refused; umask 000 -> job umask 0077")


def test_a_run_folder_replaced_before_the_job_starts_is_refused(tmp_path, shared_runs):
    run_dir = shared_runs / "replaced"
    proc = sf("render", experiment(tmp_path), "-o", str(run_dir), "--site", site_file(tmp_path))
    assert proc.returncode == 0, proc.stderr
    job = subprocess.run(["sbatch", "--parsable", "--hold", str(run_dir / "job.sbatch")], capture_output=True,
                         text=True, check=True, env={**os.environ, "SF_TEST_DRIVER": "exit 0"}).stdout.strip()
    try:
        # an open runs folder (an admin's mistake, an older sf's): the other user swaps the run folder
        # for their own, with a token folder, an events file and a logs folder of theirs in it
        os.chmod(shared_runs, 0o777)
        assert as_nobody("mv", str(run_dir), str(shared_runs / "original"), check=True)
        theirs = [["mkdir", "-m", "0777", str(run_dir)], ["mkdir", "-m", "0777", str(run_dir / "logs")],
                  ["mkdir", "-m", "0777", str(run_dir / ".ray-auth")],
                  ["sh", "-c", f"echo theirs > {run_dir}/.ray-auth/{job}.token; echo theirs > {run_dir}/events.jsonl; "
                               f"chmod 0644 {run_dir}/events.jsonl"]]
        for argv in theirs:
            as_nobody(*argv, check=True)
        watched = (run_dir, run_dir / "events.jsonl", run_dir / ".ray-auth", run_dir / ".ray-auth" / f"{job}.token")
        before = {p: (mode(p), p.read_text() if p.is_file() else None) for p in watched}
        subprocess.run(["scontrol", "release", job], check=True)
        assert wait_done(job, timeout=90) == "FAILED"
        after = {p: (mode(p), p.read_text() if p.is_file() else None) for p in before}
        assert after == before  # not appended to, not chmodded, no token of the job's written
        assert sorted(p.name for p in (run_dir / ".ray-auth").iterdir()) == [f"{job}.token"]
        # Slurm's own output file (its path was fixed at sbatch): the one thing written there
        log = (run_dir / "logs" / f"slurm-{job}.out").read_text()
        assert "refusing to run" in log and "belongs to nobody" in log, log
    finally:
        subprocess.run(["scancel", job])


PROBE = r"""env > "$FORGE_CLUSTER_RUN_DIR/driver-env"; exit 0"""


def test_the_submit_shells_slurm_and_ray_variables_do_not_steer_the_job(tmp_path):
    exp = experiment(tmp_path)
    hostile = {"SLURM_TIMELIMIT": "1", "SLURM_EXPORT_ENV": "NONE", "RAY_ADDRESS": "127.0.0.99:1",
               "RAY_num_heartbeats_timeout": "1", "SF_TEST_DRIVER": PROBE}
    proc = sf("submit", exp, "--json", env=hostile)
    out = submitted(proc)
    for name in ("SLURM_EXPORT_ENV", "SLURM_TIMELIMIT", "RAY_ADDRESS", "RAY_num_heartbeats_timeout"):
        assert name in proc.stderr, proc.stderr  # named at submit as left out
    assert wait_done(out["job_id"]) == "COMPLETED", why(Path(out["run_dir"]))
    env = (Path(out["run_dir"]) / "driver-env").read_text()
    for name in ("SLURM_TIMELIMIT=", "SLURM_EXPORT_ENV=", "RAY_ADDRESS=127.0.0.99", "RAY_num_heartbeats_timeout="):
        assert name not in env, name
    # a site without test_hooks: the SF_TEST_DRIVER of the shell is never run, the real preflight is
    no_hooks = site_file(tmp_path, test_hooks=False)
    proc = sf("submit", exp, "--site", no_hooks, "--preflight", "--wait", "--json",
              env={"SF_TEST_DRIVER": "exit 7"}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    run_dir = Path(os.environ["SF_RUNS_DIR"]) / out["run"]
    started = [e for e in phases(run_dir) if e["phase"] == "driver_started"]
    assert started and started[0]["what"] == "preflight", started
