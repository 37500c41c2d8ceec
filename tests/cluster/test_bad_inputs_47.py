"""Issue 47 on the real dev cluster: what `sf submit` refuses (a runs folder others may write
or another user owns, a share_group the host does not have, a dependency Slurm refuses, a
runtime registry that is a FIFO) `sf validate` and `sf submit --dry-run` refuse too, with the
same one line and exit 2; nothing is written and nothing reaches Slurm."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO, experiment, sf


def _site(tmp: Path, **extra) -> dict:
    data = yaml.safe_load((REPO / "site" / "dev.yaml").read_text())
    data.update(extra)
    (tmp / "site.yaml").write_text(yaml.safe_dump(data))
    return {"SF_SITE": str(tmp / "site.yaml")}


def _fifo(tmp: Path) -> dict:
    os.mkfifo(tmp / "runtimes.fifo")
    return {"FORGE_RUNTIME_REGISTRY_FILE": str(tmp / "runtimes.fifo")}


# (id, setup(tmp, runs) -> environment, extra args, what the error line holds)
CASES = [
    ("runs-0777", lambda tmp, runs: os.chmod(runs, 0o777) or {}, (), "is writable by other users without the sticky"),
    ("runs-of-nobody", lambda tmp, runs: os.chown(runs, 65534, 65534) or {}, (), "belongs to nobody"),
    ("share-group-missing", lambda tmp, runs: _site(tmp, share_group="no-such-group-47"), (),
     "site.share_group: no group 'no-such-group-47'"),
    ("dependency-job-0", lambda tmp, runs: {}, ("--dependency", "afterok:0"), "--dependency: 'afterok:0'"),
    ("dependency-past-32-bits", lambda tmp, runs: {}, ("--dependency", "afterok:99999999999"),
     "past Slurm's largest"),
    ("registry-fifo", lambda tmp, runs: _fifo(tmp), (), "is a FIFO, not a regular file"),
]


@pytest.mark.parametrize("setup, args, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate_and_dry_run_refuse_what_submit_refuses(tmp_path, setup, args, needle):
    exp = experiment(tmp_path, "bad47")
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    env = setup(tmp_path, runs)
    lines = []
    for command in (["validate"], ["submit", "--dry-run"], ["submit"]):
        proc = sf(*command, exp, "--runs-dir", str(runs), *args, env=env, timeout=120)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("sf: error: ")]
        assert len(errors) == 1 and needle in errors[0], (command, proc.stderr)
        assert "Traceback" not in proc.stderr
        lines.append(errors[0])
    assert lines[0] == lines[1] == lines[2]  # one checked path: the same words from all three
    assert list(runs.iterdir()) == []  # nothing written, so nothing was sent to Slurm


def test_slurm_itself_refuses_the_dependency_sf_refuses():
    """The dependency case is Slurm's own refusal, said before anything is written."""
    proc = subprocess.run(["sbatch", "--test-only", "--dependency=afterok:0", "-p", "train", "--wrap", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "dependency" in proc.stderr.lower(), proc.stderr
