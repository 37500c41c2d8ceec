"""Another user (`nobody`) plants links, FIFOs and records where this user's sf reads and writes
(issue 44: one gateway for every file). Each test says what the attacker gets (nothing) and what
the owner sees (a clear reason, or their own runs as before):

  - a runs folder reached through another user's link: `sf submit` refuses it naming the link,
    nothing is written where it points; through a link of the user's own, the job gets the real
    path, so flipping the link after the submit redirects nothing the job writes;
  - planted runs in a shared runs folder (a record naming the owner's job id, a FIFO as
    events.jsonl, a sparse 3 GB record, a link to the owner's run, 3,000 runs): `sf list` and
    `sf status` show the owner's runs only, fast, without hanging; `sf cancel` of a planted run
    acts on nothing;
  - `sf render -o` through another user's link is refused, writing nothing where it points, and
    onto an existing run folder it never overwrites the run's plan.json.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import REPO, SF, requeue_experiment, sf  # noqa: E402
from helpers import wait_terminal as wait_done  # noqa: E402

NOBODY = pwd.getpwnam("nobody")
STATE = Path("/var/lib/sfdev")
PY = "/usr/bin/python3"  # a python `nobody` can run


def as_nobody(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                           "--", *argv], capture_output=True, text=True, timeout=300)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def shared():
    """A folder every user may write in, sticky, as README tells admins to make a shared runs folder."""
    root = STATE / f"untrusted-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def victim():
    """A folder of root's that the attacker would like root's sf to write into."""
    root = STATE / f"victim-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    root.mkdir(mode=0o700)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_runs_folder_through_another_users_link_is_refused(tmp_path, shared, victim):
    link = shared / "runs"
    as_nobody("ln", "-s", str(victim), str(link))
    proc = sf("submit", requeue_experiment(tmp_path, 0), "--runs-dir", str(link))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"{link} is a symbolic link of nobody" in proc.stderr, proc.stderr
    assert list(victim.iterdir()) == []  # the attacker got nothing written where the link points
    print(f"\nruns folder through nobody's link: refused ({proc.stderr.strip().splitlines()[-1][:120]})")


def test_the_job_gets_the_real_path_so_a_link_flipped_after_submit_redirects_nothing(tmp_path, victim):
    real = victim / "runs"
    real.mkdir(mode=0o700)
    other = victim / "other"
    other.mkdir(mode=0o700)
    link = victim / "runs-link"
    link.symlink_to(real)
    proc = subprocess.run([SF, "submit", requeue_experiment(tmp_path, 0), "--runs-dir", str(link), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=240,
                          env={**os.environ, "SF_TEST_DRIVER": "exit 0"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    run_dir, job = Path(out["run_dir"]), out["job_id"]
    assert run_dir.parent == real, run_dir
    script = (run_dir / "job.sbatch").read_text()
    assert str(link) not in script and str(real) in script
    link.unlink()
    link.symlink_to(other)  # flipped: a job that re-resolved the typed path would write there
    assert wait_done(job) == "COMPLETED", (run_dir / "reason").read_text() if (run_dir / "reason").exists() else ""
    assert list(other.iterdir()) == []
    assert (run_dir / "logs" / f"slurm-{job}.out").is_file() and (run_dir / "events.jsonl").is_file()
    print(f"\nlink flipped after submit: job {job} wrote only into {real}")


PLANT = r"""
import json, os, sys
root, victim_job, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
def record(name, job):
    os.mkdir(os.path.join(root, name))
    with open(os.path.join(root, name, "record.json"), "w") as f:
        json.dump({"id": name, "experiment": "x", "kind": "run", "state": "running",
                   "created": "2999-01-01T00:00:00Z", "job_ids": [job]}, f)
record("grpo-stole", victim_job)  # names the owner's job id, newer than every run of the owner
record("grpo-fifo", "9999991")
os.mkfifo(os.path.join(root, "grpo-fifo", "events.jsonl"))
record("grpo-sparse", "9999992")
with open(os.path.join(root, "grpo-sparse", "record.json"), "r+b") as f:
    f.truncate(3 << 30)
os.mkdir(os.path.join(root, "grpo-private"), 0o700)
for i in range(count):
    record(f"flood-{i:05d}", "9999993")
"""


def test_planted_runs_in_a_shared_runs_folder_change_nothing_for_the_owner(tmp_path, shared):
    from launcher import runs  # noqa: PLC0415

    mine = runs.create_run(shared, "grpo")  # the owner's run, in <shared>/root/ (ended: no Slurm asked)
    mine.update(job_ids=["4242"], state="completed")
    as_nobody(PY, "-c", PLANT, str(shared), "4242", "3000")
    as_nobody("ln", "-s", str(mine.dir), str(shared / "grpo-link"))
    started = time.monotonic()
    listed = sf("list", "--runs-dir", str(shared), "--json", timeout=120)
    took = time.monotonic() - started
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert [r["id"] for r in doc["runs"]] == [mine.id] and doc["damaged"] == [], doc
    assert took < 30, took  # ~1 s measured with 3,000 planted runs on the dev cluster
    status = sf("status", "--runs-dir", str(shared), "--json", timeout=120)
    assert status.returncode == 0 and mine.id in status.stdout and "grpo-stole" not in status.stdout, status.stderr
    for planted in ("grpo-stole", "grpo-fifo", "grpo-link"):
        cancel = sf("cancel", planted, "--runs-dir", str(shared), timeout=60)
        assert cancel.returncode == 2 and "no run of yours" in cancel.stderr, (planted, cancel.stderr)
    assert runs.Run(mine.dir).raw_record()["state"] == "completed"
    # and nothing of root's was written into the planted folders
    assert sorted(os.listdir(shared / "grpo-stole")) == ["record.json"]
    print(f"\n3,000 planted runs + a stolen job id, a FIFO, a sparse record, a link: sf list {took:.2f} s, "
          "shows the owner's run only; cancel of a planted run refused")


def test_render_output_through_another_users_link_or_onto_a_run_is_refused(tmp_path, shared, victim):
    exp = requeue_experiment(tmp_path, 0)
    link = shared / "out"
    as_nobody("ln", "-s", str(victim), str(link))
    proc = sf("render", exp, "-o", str(link / "run1"))
    assert proc.returncode == 2 and f"{link} is a symbolic link of nobody" in proc.stderr, proc.stderr
    assert list(victim.iterdir()) == []
    mine = victim / "mine"
    first = sf("render", exp, "-o", str(mine))
    assert first.returncode == 0, first.stderr
    plan = (mine / "plan.json").read_text()
    again = sf("render", exp, "-o", str(mine))
    assert again.returncode == 2 and "already holds a run" in again.stderr, again.stderr
    assert (mine / "plan.json").read_text() == plan
    print("\nrender -o through nobody's link: refused; onto a run folder: refused, plan.json kept")
