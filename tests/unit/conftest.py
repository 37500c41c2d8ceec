"""Fixtures of the unit tests. `fake_slurm`: the one fake of Slurm's commands; `site`: a site
file on it. What test files share besides fixtures is in unit_helpers.py (this folder is put
on sys.path here, so every test file can import it)."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from launcher.spec import paths

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "compiler_fixtures"))

FAKE_COMMANDS = ("sacct", "sacctmgr", "squeue", "sbatch", "scancel", "scontrol", "srun")

# A fake command: logs its argv, keeps the last script sbatch was given (and the SBATCH_*
# variables it saw), and answers from
# <cmd>.out / .err / .rc, or from <cmd>.from<K>.* once it is called for the K-th time or
# later (the largest such K wins), so a test scripts a change of state by call count
# instead of sleeping before flipping a file.
_FAKE = """#!/bin/sh
echo "{name} $*" >> "{log}"
if [ "{name}" = sbatch ]; then
  for last in "$@"; do :; done
  cp "$last" "{bindir}/sbatch.script" 2>/dev/null || true
  env | grep '^SBATCH_' | sort > "{bindir}/sbatch.env" || true
fi
n=$(grep -c "^{name} " "{log}")
prefix="{bindir}/{name}"
k=$n
while [ "$k" -gt 0 ]; do
  if [ -f "{bindir}/{name}.from$k.rc" ]; then prefix="{bindir}/{name}.from$k"; break; fi
  k=$((k - 1))
done
[ -f "$prefix.out" ] && cat "$prefix.out"
[ -f "$prefix.err" ] && cat "$prefix.err" >&2
exit $(cat "$prefix.rc" 2>/dev/null || echo 0)
"""


class FakeSlurm:
    """Slurm's commands as scripts in a folder (SF_SLURM_BIN_DIR points launcher.slurm at
    it); run records under `runs_dir` ($SF_RUNS_DIR)."""

    def __init__(self, root):
        self.dir = root / "bin"
        self.log = root / "calls.log"
        self.runs_dir = root / "runs"
        self.dir.mkdir()
        for name in FAKE_COMMANDS:
            path = self.dir / name
            path.write_text(_FAKE.format(name=name, log=self.log, bindir=self.dir))
            path.chmod(path.stat().st_mode | stat.S_IEXEC)

    def set(self, name, out="", err="", rc=0, from_call: int | None = None):
        """What `name` prints and returns (from its `from_call`-th call on, when given)."""
        prefix = f"{name}.from{from_call}" if from_call else name
        (self.dir / f"{prefix}.out").write_text(out)
        (self.dir / f"{prefix}.err").write_text(err)
        (self.dir / f"{prefix}.rc").write_text(str(rc))

    def calls(self, name=None) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if name is None or line.split()[0] == name]

    def sbatch_env(self) -> list[str]:
        """The SBATCH_* variables (NAME=value) the last sbatch call ran with."""
        return (self.dir / "sbatch.env").read_text().splitlines()

    def submitted_script(self) -> str:
        """The script of the last sbatch call, as sbatch read it."""
        return (self.dir / "sbatch.script").read_text()


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    fake = FakeSlurm(tmp_path)
    monkeypatch.setenv("SF_SLURM_BIN_DIR", str(fake.dir))
    monkeypatch.setenv("SF_RUNS_DIR", str(fake.runs_dir))
    return fake


# The shell that runs the tests may carry Slurm's, Ray's or sf's own steering variables (CI's
# scripts/test sets SF_TEST_* for the cluster tests; a developer may run inside an salloc):
# unit tests are pure, so none of them reaches a test unless the test sets it itself.
_STEERING_PREFIXES = ("SLURM_", "SRUN_", "SALLOC_", "SBATCH_", "RAY_", "SF_TEST_")


@pytest.fixture(autouse=True)
def _no_steering_variables_from_the_shell(monkeypatch):
    import os
    for name in list(os.environ):
        if name.startswith(_STEERING_PREFIXES) and name != "SLURM_CONF":
            monkeypatch.delenv(name)


@pytest.fixture
def site(tmp_path, fake_slurm, monkeypatch):
    """site(**slurm) -> the path of the dev site with these slurm: settings, its runs on fake_slurm."""
    def write(**slurm):
        data = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
        data["runs_dir"] = str(fake_slurm.runs_dir)
        data["slurm"].update(slurm)
        path = tmp_path / "site.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path)

    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")
    for name in [n for n in os.environ if n.startswith("SBATCH_")]:
        monkeypatch.delenv(name)
    return write


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """A folder to run sf in as a user would (unit_helpers.sf_cli): the current folder, with a
    site file ($SF_SITE), an empty runs dir and a cache of its own."""
    from sfc_helpers import write_site

    site = write_site(tmp_path, runs_dir=str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SF_SITE", str(site))
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SF_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "runs").mkdir()
    return tmp_path
