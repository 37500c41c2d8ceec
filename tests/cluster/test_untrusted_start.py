"""Another user (`nobody`) tries to steer root's job while it starts (issue 44: the Ray token
swapped by a link flip 0.22 s after the supervisor started; Ray's logs copied through a planted
`logs/ray` link). Each test says what the attacker gets (nothing) and what the owner sees:

  - the token: root's job is held in the queue while nobody's attack loop arms, then released;
    all through its start nobody flips links and moves folders where the job's token path goes
    (the user's folder in a shared runs folder, the run folder, its .ray-auth, the token) toward
    a token of nobody's own. Every try is refused by the file system; the job's Ray runs on its
    own token (a 0600 file of root's in a 0700 folder of the real run folder) that nobody cannot
    read, and nobody's token gets no answer from the job's GCS (the job's own does);
  - a `logs/ray` link of nobody's in the run folder (planted as nobody would where it could
    write): the job completes, writes none of its Ray logs through the link (the folder it
    points to stays empty, the link stays a link) and its node log says why.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    NOBODY,
    NOBODY_PY,
    RUNS,
    cleanup,
    experiment,
    nobody_argv,
    sf,
    wait_terminal,
    wait_until,
)

STATE = Path("/var/lib/sfdev")
RUNTIME_PY = "/var/lib/sfdev/runtimes/verl-0.9.1/bin/python"  # the job's runtime: Ray for the probe


def as_nobody(*argv: str) -> None:
    proc = subprocess.run(nobody_argv(*argv), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def shared():
    """A folder every user may write in, sticky, as docs/admins.md tells admins to make a shared runs folder."""
    root = STATE / f"untrusted-start-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


# nobody's side: its own token, then links and renames toward it until told to stop
PLANT_TOKEN = r"""
import os, sys
evil = sys.argv[1]
os.makedirs(os.path.join(evil, ".ray-auth"), 0o755)
os.chmod(evil, 0o777)
with open(os.path.join(evil, ".ray-auth", "nobody.token"), "w") as f:
    f.write("f" * 64)
"""

ATTACK = r"""
import errno, json, os, sys, time
home, run_dir, job, evil, stop = sys.argv[1:6]
token = os.path.join(evil, ".ray-auth", "nobody.token")
auth = os.path.join(run_dir, ".ray-auth")
link = os.path.join(evil, "link-to-evil")
if not os.path.lexists(link):
    os.symlink(evil, link)
def link_over_home():  # the user's folder in the shared runs folder -> nobody's
    os.rename(link, home)
def move_home():
    os.rename(home, home + ".moved")
def link_auth():  # the run's token folder -> nobody's
    os.symlink(os.path.join(evil, ".ray-auth"), auth)
def link_token():
    os.symlink(token, os.path.join(auth, job + ".token"))
def move_run():
    os.rename(run_dir, os.path.join(evil, "run"))
tries, won, errors = {}, [], {}
rounds = 0
while not os.path.exists(stop) and rounds < 200000:
    for attack in (link_over_home, move_home, link_auth, link_token, move_run):
        name = attack.__name__
        tries[name] = tries.get(name, 0) + 1
        try:
            attack()
            won.append(name)
        except OSError as exc:
            errors.setdefault(name, errno.errorcode.get(exc.errno, str(exc.errno)))
    rounds += 1
    if rounds == 1:
        open(os.path.join(evil, "armed"), "w").close()
    time.sleep(0.01)  # pacing on a shared 2-core host, not a wait for anything
with open(os.path.join(evil, "report.json"), "w") as f:
    json.dump({"tries": tries, "won": won, "errors": errors, "rounds": rounds}, f)
"""

# The driver of root's job (as root, on the head node): what its Ray runs on, and who gets in
PROBE = r"""
import json, os, stat, subprocess, sys
evil_token = sys.argv[1]
path = os.environ["RAY_AUTH_TOKEN_PATH"]
st, dst = os.lstat(path), os.lstat(os.path.dirname(path))
out = {"token_path": path, "mode": os.environ.get("RAY_AUTH_MODE"), "real": os.path.realpath(path) == path,
       "file": [st.st_uid, oct(st.st_mode & 0o7777), stat.S_ISREG(st.st_mode)],
       "folder": [dst.st_uid, oct(dst.st_mode & 0o7777), stat.S_ISDIR(dst.st_mode)],
       "nobodys_token": open(path).read() == open(evil_token).read()}
probe = ("from ray._raylet import GcsClient\n"
         "try:\n GcsClient(address=%r).get_all_node_info(timeout=5); print('OPEN')\n"
         "except Exception as e: print('REFUSED', type(e).__name__)" % os.environ["RAY_ADDRESS"])
env = {"PATH": "/usr/bin:/bin", "HOME": "/", "RAY_AUTH_MODE": "token"}
for who, argv, token in (("job", [], path), ("nobody", ["runuser", "-u", "nobody", "--"], evil_token)):
    p = subprocess.run(argv + ["env", "-i", *[f"{k}={v}" for k, v in {**env, "RAY_AUTH_TOKEN_PATH": token}.items()],
                               sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    out[who] = (p.stdout.strip().splitlines() or ["? " + p.stderr[-300:]])[-1]
out["nobody_reads_token"] = subprocess.run(["runuser", "-u", "nobody", "--", "cat", path],
                                           capture_output=True).returncode == 0
json.dump(out, open(os.path.join(os.environ["FORGE_CLUSTER_RUN_DIR"], "start-probe.json"), "w"))
"""


def test_nobody_cannot_swap_the_jobs_ray_token_during_its_start(tmp_path, shared):
    evil = shared / "evil"
    as_nobody(NOBODY_PY, "-c", PLANT_TOKEN, str(evil))
    evil_token = evil / ".ray-auth" / "nobody.token"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    exp = experiment(tmp_path, "tokenswap")  # (tmp_path 0755: the job reads the probe)
    probe.chmod(0o644)
    # held until nobody's loop runs, so the whole start happens under attack
    proc = sf("submit", exp, "--runs-dir", str(shared), "--sbatch", "begin=now+1hour", "--json",
              env={"SF_TEST_DRIVER": f"exec {RUNTIME_PY} {probe} {evil_token}"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    run_dir, job = Path(out["run_dir"]), out["job_id"]
    home = shared / "root"
    assert run_dir.parent == home, run_dir
    stop = shared / "stop"
    attack = nobody_argv(NOBODY_PY, "-c", ATTACK, str(home), str(run_dir), job, str(evil), str(stop))
    attacker = subprocess.Popen(attack, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (evil / "armed").exists() or attacker.poll() is not None, 60, "nobody's loop never armed")
        assert attacker.poll() is None, attacker.communicate()
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True, timeout=30)
        state = wait_terminal(job, timeout=300)
    finally:
        stop.touch()
        _, err = attacker.communicate(timeout=120)
        cleanup(job)
    report = json.loads((evil / "report.json").read_text())
    assert attacker.returncode == 0, err
    assert report["won"] == [] and all(n > 1 for n in report["tries"].values()), report
    reason = (run_dir / "reason").read_text() if (run_dir / "reason").exists() else ""
    assert state == "COMPLETED", (state, reason)
    result = json.loads((run_dir / "start-probe.json").read_text())
    assert result["token_path"] == str(run_dir / ".ray-auth" / f"{job}.token") and result["real"], result
    assert result["mode"] == "token" and not result["nobodys_token"], result
    assert result["file"] == [0, "0o600", True] and result["folder"] == [0, "0o700", True], result
    assert result["job"] == "OPEN", result  # the probe gets in with the job's own token
    assert result["nobody"] == "REFUSED AuthenticationError", result
    assert not result["nobody_reads_token"], result
    assert sorted(os.listdir(evil)) == [".ray-auth", "armed", "link-to-evil", "report.json"]
    print(f"\ntoken swap during the start: {report['rounds']} rounds of 5 tries by nobody, none got through "
          f"({report['errors']}); the job ran on its own token, nobody's refused by its GCS")


def test_a_planted_logs_ray_link_is_never_written_through(tmp_path, shared):
    loot = shared / "loot"
    as_nobody("mkdir", "-m", "0777", str(loot))
    go = tmp_path / "go"
    # the driver holds the job (Ray up on its node) until the link is planted
    driver = f"for i in $(seq 1200); do [ -e {go} ] && exit 0; sleep 0.25; done; exit 3"
    exp = experiment(tmp_path, "raylogslink")
    proc = sf("submit", exp, "--json", env={"SF_TEST_DRIVER": driver})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    run_dir, job = RUNS / out["run"], out["job_id"]
    try:
        link = run_dir / "logs" / "ray"
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)  # root's own (a start tried again under load keeps its logs there)
        link.symlink_to(loot)
        os.lchown(link, NOBODY.pw_uid, NOBODY.pw_gid)  # nobody's, as if nobody could write in logs/
        go.touch()
        state = wait_terminal(job, timeout=300)
    finally:
        go.touch()
        cleanup(job)
    assert state == "COMPLETED", state
    assert link.is_symlink() and os.readlink(link) == str(loot)
    assert list(loot.iterdir()) == []  # nobody got none of root's Ray logs
    said = wait_until(lambda: [line for p in (run_dir / "logs").glob("*") if p.is_file()
                               for line in p.read_text(errors="replace").splitlines()
                               if "cannot keep Ray's logs" in line], 60, "no node log says why it kept no Ray logs")
    assert str(link) in said[0] or "logs/ray" in said[0], said
    print(f"\nplanted logs/ray link: job {job} completed, nothing written through it ({said[0].strip()[:160]})")
