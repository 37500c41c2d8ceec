"""A whole containerised job submitted by a user other than root (issue 32): `nobody` runs
its own sf (a venv of the host's python3 with sf installed from this checkout, built by
scripts/test as $SF_DEV_STATE/user-venv) and submits examples/grpo --preflight on the OCI
runtime. runc then runs as that user, rootless (scripts/sf-oci-run: a user namespace; the
host's PIDs stay visible, so a driver step finds its node's raylet): the batch step runs sf's
own python on the host, the Ray nodes, the barrier and the preflight run in the container,
where the host's root shows as the overflow uid and only the paths the host checked
(SF_HOST_CHECKED_PATHS) count as root's (ray.temp_root /tmp)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import REPO

STATE = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev"))
REGISTRY = STATE / "runtimes-container.yaml"
USER_SF = STATE / "user-venv" / "bin" / "sf"
NOBODY = pwd.getpwnam("nobody")
CT_PYTHON = "/opt/sf/runtime/bin/python"


def as_nobody(argv: list[str], home: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SLURM_CONF": os.environ.get("SLURM_CONF", ""),
           "FORGE_RUNTIME_REGISTRY_FILE": str(REGISTRY), "LANG": "C.UTF-8"}
    return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                           *argv], env=env, cwd=home, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def nobody_home():
    """A folder of nobody's own in /tmp (which the container mounts) with the example and its assets."""
    home = Path(tempfile.mkdtemp(prefix="sf-nobody-", dir="/tmp"))
    shutil.copytree(REPO / "examples" / "grpo", home / "grpo")
    shutil.copytree(REPO / "examples" / "assets", home / "assets")
    for path in [home, *home.rglob("*")]:
        os.lchown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_a_user_other_than_root_runs_a_whole_job_in_a_container(nobody_home):
    if not USER_SF.exists():
        pytest.fail(f"{USER_SF} is missing: scripts/test builds it (a venv nobody can run, sf from this checkout)",
                    pytrace=False)
    readable = as_nobody(["test", "-r", str(REPO / "launcher" / "__init__.py")], nobody_home, 10)
    assert readable.returncode == 0, (f"{REPO} must be readable by other users: the container's sf is this "
                                      "checkout, mounted (scripts/build-container)")
    proc = as_nobody([str(USER_SF), "submit", str(nobody_home / "grpo"), "--preflight", "--wait", "--json",
                      "--runs-dir", str(nobody_home / "runs")], nobody_home, 420)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert "run" in out, (proc.stdout[-2000:], proc.stderr[-2000:])
    run_dir = nobody_home / "runs" / out["run"]
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:], (run_dir / "reason").read_text()
                                  if (run_dir / "reason").exists() else "")
    report = json.loads((run_dir / "preflight.json").read_text())
    assert report["ok"], report["failures"]
    where = report["runtime"]
    for name, w in [("driver", where["driver"]), *where["nodes"].items()]:
        assert w["container"] == "sf container: verl 0.9.1" and w["python"] == CT_PYTHON, (name, w)
    assert report["ray_nodes"] == 2 == len(where["nodes"])
    # everything the job wrote is nobody's, with sf's modes
    for path in [run_dir, run_dir / "events.jsonl", run_dir / "preflight.json", run_dir / "logs"]:
        assert path.stat().st_uid == NOBODY.pw_uid, path
    assert run_dir.stat().st_mode & 0o777 == 0o700
    # read as plain JSON lines: sf's own reader refuses, rightly, a record of another user (nobody's)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    joined = next(e for e in events if e["phase"] == "all_joined")
    print(f"\nas nobody, in rootless containers: Ray up on 2 nodes in {joined['seconds']:.1f}s, "
          f"preflight PASSED in {report['seconds']}s")
