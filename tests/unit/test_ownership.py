"""What sf makes in a run is its user's alone (launcher.ownership, runs, auth, ports, slurm's env).

The attacks themselves, as a second user against real jobs, are tests/cluster/test_multiuser.py;
these pin the rules one by one on local folders.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import ownership, runs, slurm
from launcher.errors import SpecError
from launcher.injob import auth, ports
from launcher.injob.node import busy_ports
from launcher.spec.site import site_from_dict

NOBODY = pwd.getpwnam("nobody")


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask_000():
    old = os.umask(0)
    yield
    os.umask(old)


def test_a_run_made_under_umask_000_is_its_users_alone(tmp_path, umask_000):
    run = runs.create_run(tmp_path / "runs", "grpo")
    assert mode(tmp_path / "runs") == 0o700  # made by sf: explicit mode, not the umask's 0777
    assert mode(run.dir) == 0o700
    for sub in ("logs", "checkpoints", "metrics"):
        assert mode(run.dir / sub) == 0o700, sub
    assert mode(run.dir / runs.RECORD) == 0o600
    run.add_state("submitting")
    assert mode(run.dir / runs.LOCK) == 0o600
    runs.record_phase(run.dir, "allocated")
    assert mode(run.dir / runs.EVENTS) == 0o600


def test_a_run_shared_with_a_group_lets_it_read_checkpoints_not_logs(tmp_path, umask_000):
    group = grp.getgrgid(NOBODY.pw_gid).gr_name
    run = runs.create_run(tmp_path / "runs", "grpo", share_group=group)
    for path in (run.dir, run.dir / "checkpoints", run.dir / "metrics"):
        assert mode(path) == 0o2750 and os.lstat(path).st_gid == NOBODY.pw_gid, path
    assert mode(run.dir / "logs") == 0o700
    assert ownership.run_umask(run.dir) == ownership.SHARED_UMASK
    assert ownership.run_umask(runs.create_run(tmp_path / "runs", "solo").dir) == ownership.PRIVATE_UMASK


def test_an_unknown_share_group_is_named(tmp_path):
    with pytest.raises(ownership.UnsafePath, match="no group 'no-such-group-x'"):
        runs.create_run(tmp_path, "grpo", share_group="no-such-group-x")


@pytest.mark.parametrize("folder_mode", [0o777, 0o775, 0o770])
def test_a_runs_folder_others_may_write_without_the_sticky_bit_is_refused(tmp_path, folder_mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, folder_mode)
    with pytest.raises(ownership.UnsafePath, match=f"{shared} is writable by other users without the sticky bit"):
        runs.create_run(shared, "grpo")
    with pytest.raises(ownership.UnsafePath, match="sticky"):  # a folder below it is no better: it can be renamed
        runs.create_run(shared / "alice", "grpo")
    assert list(shared.iterdir()) == []  # nothing half-made
    os.chmod(shared, 0o1777)  # like /tmp: allowed, and the run goes into the caller's own folder in it
    assert runs.create_run(shared, "grpo").dir.parent == shared / pwd.getpwuid(os.getuid()).pw_name
    assert mode(shared / pwd.getpwuid(os.getuid()).pw_name) == 0o700


def test_a_runs_folder_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(ownership.UnsafePath, match="belongs to nobody"):
        runs.create_run(theirs / "mine", "grpo")


def test_a_run_dir_that_is_a_symlink_or_another_users_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ownership.UnsafePath, match="is a symlink"):
        ownership.check_own_dir(tmp_path / "link")
    os.chown(real, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(ownership.UnsafePath, match="belongs to nobody"):
        ownership.check_own_dir(real)


def test_events_are_never_appended_through_a_symlink(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    target = tmp_path / "their-file"
    target.write_text("theirs\n")
    os.chmod(target, 0o644)
    (run.dir / runs.EVENTS).symlink_to(target)
    with pytest.raises(ownership.UnsafePath, match="symbolic link"):
        runs.record_phase(run.dir, "allocated")
    assert target.read_text() == "theirs\n" and mode(target) == 0o644


def test_a_held_lock_makes_a_command_give_up_naming_the_file(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(run.dir / runs.LOCK)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(runs.RecordBusy, match=str(run.dir / runs.LOCK)), run.locked(wait_s=0.5):
            pass
        assert 0.5 <= time.monotonic() - t0 < 3
    finally:
        holder.kill()
        holder.wait()
    run.add_state("submitting")  # free again: the change goes through


def test_an_old_lock_file_open_to_others_is_closed_on_use(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    fd = os.open(run.dir / runs.LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    os.fchmod(fd, 0o644)
    os.close(fd)
    run.add_state("submitting")
    assert mode(run.dir / runs.LOCK) == 0o600


def test_the_token_goes_only_into_a_folder_the_job_made(tmp_path):
    run_dir = str(runs.create_run(tmp_path, "grpo").dir)
    folder = Path(run_dir) / auth.FOLDER
    folder.mkdir(mode=0o777)  # another user's, planted before the job started
    os.chown(folder, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(ownership.UnsafePath, match="never written there"):
        auth.make_token(run_dir, "42")
    assert list(folder.iterdir()) == []
    folder.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.symlink_to(elsewhere)
    with pytest.raises(ownership.UnsafePath, match="a symlink"):
        auth.make_token(run_dir, "42")
    assert list(elsewhere.iterdir()) == []
    folder.unlink()
    first = auth.make_token(run_dir, "42")
    (first.parent / "planted").write_text("x")
    second = auth.make_token(run_dir, "42")  # a requeue: a fresh folder, nothing of the earlier one kept
    assert second == first and not (second.parent / "planted").exists()
    assert mode(second.parent) == 0o700 and mode(second) == 0o600
    assert sorted(p.name for p in second.parent.iterdir()) == ["42.token"]


def test_the_submit_shells_steering_variables_stay_out_of_the_job(monkeypatch):
    for name, value in {"SLURM_TIMELIMIT": "1", "SLURM_EXPORT_ENV": "NONE", "SRUN_CPUS_PER_TASK": "1",
                        "RAY_ADDRESS": "10.0.0.1:6379", "RAY_DEDUP_LOGS": "0", "SF_TEST_DRIVER": "exit 7",
                        "SLURM_CONF": "/etc/slurm/slurm.conf", "SBATCH_TIMELIMIT": "1", "HOME": "/root"}.items():
        monkeypatch.setenv(name, value)
    assert slurm.steering_variables() == ["RAY_ADDRESS", "RAY_DEDUP_LOGS", "SF_TEST_DRIVER", "SLURM_EXPORT_ENV",
                                          "SLURM_TIMELIMIT", "SRUN_CPUS_PER_TASK"]
    env = slurm._sbatch_env(())
    for gone in ("SLURM_TIMELIMIT", "SLURM_EXPORT_ENV", "SRUN_CPUS_PER_TASK", "RAY_ADDRESS", "RAY_DEDUP_LOGS",
                 "SF_TEST_DRIVER", "SBATCH_TIMELIMIT"):
        assert gone not in env, gone
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf" and env["HOME"] == "/root"
    assert env["SLURM_UMASK"] == "0077"  # the user's own umask (000?) never reaches the job
    passed = slurm._sbatch_env(("RAY_DEDUP_LOGS", "SF_TEST_*"), umask=0o027)
    assert passed["RAY_DEDUP_LOGS"] == "0" and passed["SF_TEST_DRIVER"] == "exit 7" and "RAY_ADDRESS" not in passed
    assert passed["SLURM_UMASK"] == "0027"


def test_the_site_says_which_ray_variables_and_test_hooks_pass():
    base = {"runs_dir": "/tmp/runs", "series": {}}
    site = site_from_dict({**base, "slurm": {"pass_ray_env": ["RAY_DEDUP_LOGS"]}})
    assert site.pass_ray_env == ("RAY_DEDUP_LOGS",) and "RAY_DEDUP_LOGS" in site.pass_sbatch_env
    assert "SF_TEST_*" not in site.pass_sbatch_env and not site.test_hooks
    assert "SF_TEST_*" in site_from_dict({**base, "test_hooks": True}).pass_sbatch_env
    with pytest.raises(Exception, match="pass_ray_env"):
        site_from_dict({**base, "slurm": {"pass_ray_env": ["SLURM_TIMELIMIT"]}})


def test_the_heads_ports_cannot_be_predicted():
    rng = (20000, 59999)
    draws = {ports.random_base(rng) for _ in range(400)}
    assert all(rng[0] <= d <= rng[1] - ports.SPAN + 1 for d in draws)
    assert len(draws) > 350  # over every port of the range: two users' heads on one host rarely meet


def test_a_squatted_fixed_port_makes_the_span_busy_and_an_old_worker_port_does_not():
    span = ports.span_ports(30000)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", span.node_manager))
        squatter.listen()
        assert busy_ports("127.0.0.1", span) == [span.node_manager]
    with socket.socket() as squatter:  # Ray's workers take the kernel's ports: nothing there to squat
        squatter.bind(("127.0.0.1", 30000 + 50))
        squatter.listen()
        assert busy_ports("127.0.0.1", span) == []


def _planted_run(root, name, job_id="101"):
    """A run folder of `nobody` in a shared runs folder, its record naming `job_id`."""
    folder = root / name
    folder.mkdir()
    (folder / runs.RECORD).write_text(json.dumps({"id": name, "experiment": "x", "kind": "run", "state": "running",
                                                  "created": "2999-01-01T00:00:00Z", "job_ids": [job_id]}))
    for path in (folder / runs.RECORD, folder):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    return folder


def test_in_a_shared_runs_folder_only_the_callers_runs_are_listed_or_opened(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    mine = runs.create_run(shared, "grpo")
    mine.update(job_ids=["101"])
    _planted_run(shared, "grpo-aaaaa")  # names my job id, and is newer than mine
    private = shared / "private-bbbbb"
    private.mkdir(mode=0o700)
    os.chown(private, NOBODY.pw_uid, NOBODY.pw_gid)
    (shared / "link-ccccc").symlink_to(mine.dir)
    assert runs.list_runs(shared) == [mine]
    assert runs.damaged_runs(shared) == {}
    assert runs.open_run(shared, mine.id) == mine
    for theirs in ("grpo-aaaaa", "link-ccccc", "private-bbbbb"):
        with pytest.raises(SpecError, match="no run of yours"):
            runs.open_run(shared, theirs)


def test_a_runs_folder_through_another_users_link_is_refused_and_the_real_path_used(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "runs-link"
    link.symlink_to(real)
    assert runs.create_run(link, "grpo").dir.parent == real  # my own link: the real path goes into the job
    theirs = tmp_path / "their-link"
    theirs.symlink_to(real)
    os.lchown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(ownership.UnsafePath, match="their-link is a symbolic link of nobody"):
        runs.create_run(theirs, "grpo")
    with pytest.raises(ownership.UnsafePath, match="symbolic link of nobody"):
        runs.make_run_dir(theirs / "out")
    assert len(list(real.iterdir())) == 1


def test_render_output_never_overwrites_a_runs_plan(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    run.write_json("plan.json", {"mine": True})
    with pytest.raises(SpecError, match="already holds a run"):
        runs.make_run_dir(run.dir)
    assert json.loads((run.dir / "plan.json").read_text()) == {"mine": True}
    assert runs.make_run_dir(tmp_path / "fresh").dir == tmp_path / "fresh"


def test_ray_logs_are_never_copied_through_a_planted_logs_ray_link(tmp_path):
    from launcher.injob import node_logs

    temp = tmp_path / "temp"
    (temp / "session_latest" / "logs").mkdir(parents=True)
    (temp / "session_latest" / "logs" / "raylet.out").write_text("raylet says\n")
    run = runs.create_run(tmp_path / "runs", "grpo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run.dir / "logs" / "ray").symlink_to(elsewhere)
    os.lchown(run.dir / "logs" / "ray", NOBODY.pw_uid, NOBODY.pw_gid)
    node_logs.keep_ray_logs(str(temp), str(run.dir), "7", "dev1")
    assert list(elsewhere.iterdir()) == []
    (run.dir / "logs" / "ray").unlink()
    node_logs.keep_ray_logs(str(temp), str(run.dir), "7", "dev1")
    assert (run.dir / "logs" / "ray" / "7-dev1" / "raylet.out").read_text() == "raylet says\n"
    assert mode(run.dir / "logs" / "ray" / "7-dev1") == 0o700


def test_render_output_through_another_users_link_is_refused_and_own_links_resolved(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    mine = tmp_path / "mine"
    mine.symlink_to(real)
    assert runs.real_path(mine / "new" / "run1", "--output") == real / "new" / "run1"
    theirs = tmp_path / "theirs"
    theirs.symlink_to(real)
    os.lchown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(ownership.UnsafePath, match="--output: .*theirs is a symbolic link of nobody"):
        runs.real_path(theirs / "run1", "--output")


def test_the_jobs_run_dir_check_refuses_a_path_through_another_users_link(tmp_path):
    """What the supervisor checks before the job writes anything (check_own_dir, trusted_chain):
    a run dir reached through another user's link is refused, though the folder itself is fine."""
    run = runs.create_run(tmp_path / "runs", "grpo")
    link = tmp_path / "flip"
    link.symlink_to(tmp_path / "runs")
    os.lchown(link, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(ownership.UnsafePath, match="flip is a symbolic link of nobody"):
        ownership.check_own_dir(link / run.id)
    with pytest.raises(ownership.UnsafePath, match="flip is a symbolic link of nobody"):
        ownership.trusted_chain(link / run.id / "absent")
    ownership.check_own_dir(run.dir)
    ownership.trusted_chain(run.dir / "absent")
