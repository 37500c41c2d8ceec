"""Account and QOS against the live cluster (sf submit, sf validate --live), on the dev cluster.

The dev cluster runs slurmdbd with associations (cluster sfdev, accounts root and dev, user
root in both, QOS normal) but does not enforce them (`AccountingStorageEnforce = none`):
switching enforcement on would change slurm.conf for every other test on this shared
cluster. So:

  - as it is, sf says nothing about accounts (Slurm takes any account there);
  - the sacctmgr queries run against the real slurmdbd, with a test account and a test QOS
    added for the test and removed after it (enforcement stays off, root's default account
    stays, so no other test sees a difference);
  - `sf validate --live` and `sf submit` are run with `scontrol show config` answering
    `AccountingStorageEnforce = associations,qos` (a wrapper in SF_SLURM_BIN_DIR; every
    other Slurm command is the real one), so the whole path is the real one but for that
    line: a wrong account or QOS exits 2 naming the field, the value and the allowed
    values, and nothing is submitted.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher import slurm
from launcher.submit import live

REPO = Path(__file__).resolve().parents[2]
SF = str(Path(sys.executable).parent / "sf")
# One account and QOS per xdist worker: worksteal may run this module's tests on two workers,
# each with its own copy of the module fixture, and one's teardown must not delete what the
# other still uses.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
ACCT, QOS = f"sftest_acct_{_WORKER}", f"sftest_gold_{_WORKER}"


def sacctmgr(*args: str) -> None:
    subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def test_account():
    """A test account (root may use it, with QOS normal only) and a test QOS nobody may use."""
    user = pwd.getpwuid(os.getuid()).pw_name
    sacctmgr("add", "qos", QOS)
    sacctmgr("add", "account", ACCT, "cluster=sfdev", "Description=sf-test", "Organization=sf")
    sacctmgr("add", "user", user, f"account={ACCT}", "cluster=sfdev", "qos=normal")
    try:
        yield user
    finally:
        sacctmgr("delete", "user", user, "where", f"account={ACCT}", "cluster=sfdev")
        sacctmgr("delete", "account", ACCT, "cluster=sfdev")
        sacctmgr("delete", "qos", QOS)


@pytest.fixture
def enforcing(tmp_path):
    """SF_SLURM_BIN_DIR whose scontrol says the cluster enforces associations and qos."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("sacct", "sacctmgr", "sbatch", "scancel", "squeue", "srun", "sinfo"):
        real = shutil.which(name)
        if real:
            (bindir / name).symlink_to(real)
    (bindir / "scontrol").write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2" = "show config" ]; then\n'
        f'  {shutil.which("scontrol")} "$@" | sed "s/^AccountingStorageEnforce *=.*/'
        'AccountingStorageEnforce = associations,qos/"\n'
        "  exit 0\nfi\n"
        f'exec {shutil.which("scontrol")} "$@"\n')
    (bindir / "scontrol").chmod(0o755)
    return {**os.environ, "SF_SLURM_BIN_DIR": str(bindir)}


def experiment(tmp_path, **slurm_keys) -> Path:
    src = REPO / "examples" / "grpo" / "config.yaml"
    config = yaml.safe_load(src.read_text())
    assets = REPO / "examples" / "assets"
    config.update(model=str(assets / "model"), data={"train": {"files": str(assets / "data" / "train.parquet")},
                                                     "validation": {"files": str(assets / "data" / "test.parquet")}})
    config.setdefault("slurm", {}).update(slurm_keys)
    exp = tmp_path / "exp"
    exp.mkdir(exist_ok=True)
    (exp / "config.yaml").write_text(yaml.safe_dump(config))
    return exp


def sf(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([SF, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout, env=env)


def test_the_dev_cluster_does_not_enforce_accounts_and_sf_says_nothing(tmp_path):
    assert live.enforcement(slurm.show_config().get("AccountingStorageEnforce", "")) == set()
    proc = sf("validate", str(experiment(tmp_path, account="no-such-account", qos="no-such-qos")), "--live")
    assert proc.returncode == 0, proc.stderr
    assert "account" not in proc.stderr.lower() and "qos" not in proc.stderr.lower(), proc.stderr


def test_the_sacctmgr_queries_against_the_real_dbd(test_account):
    user = test_account
    rows = slurm.user_associations(user, "sfdev")
    accounts = {r["Account"] for r in rows}
    assert {"dev", ACCT} <= accounts, rows
    assert all(r["Cluster"] == "sfdev" and r["User"] == user for r in rows)
    assert next(r for r in rows if r["Account"] == ACCT)["QOS"] == "normal"
    assert {"normal", QOS} <= set(slurm.qos_names())
    # the pure comparison on the real rows, as an enforcing cluster would make it
    check = lambda account, qos: live.check_accounts(  # noqa: E731
        account, qos, enforce={"associations", "qos"}, user=user, cluster="sfdev", assocs=rows,
        qos_names=slurm.qos_names(), partitions={"train"})
    assert check("dev", "normal") == [] and check(ACCT, "normal") == []
    (err,) = check("no-such-account", None)
    assert f"allowed: {', '.join(sorted(accounts))}" in str(err)
    (err,) = check(ACCT, QOS)
    assert f"QOS '{QOS}' is not allowed for account '{ACCT}' on cluster sfdev (allowed: normal)" in str(err)


def test_with_enforcement_a_wrong_account_or_qos_exits_2_and_nothing_is_submitted(test_account, enforcing, tmp_path):
    runs_dir = tmp_path / "runs"
    env = {**enforcing, "SF_RUNS_DIR": str(runs_dir)}
    proc = sf("validate", str(experiment(tmp_path, account="no-such-account")), "--live", env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("sf: error: slurm.account: account 'no-such-account' is not one of user"), line
    assert "(allowed: " in line and ACCT in line and "dev" in line, line
    proc = sf("validate", str(experiment(tmp_path, account=ACCT, qos=QOS)), "--live", env=env)
    assert proc.returncode == 2 and f"slurm.qos: QOS '{QOS}' is not allowed for account '{ACCT}'" in proc.stderr
    proc = sf("validate", str(experiment(tmp_path, account=ACCT, qos="no-such-qos")), "--live", env=env)
    assert proc.returncode == 2 and "slurm.qos: QOS 'no-such-qos' does not exist on cluster sfdev" in proc.stderr
    assert sf("validate", str(experiment(tmp_path, account=ACCT, qos="normal")), "--live", env=env).returncode == 0
    # submit: the same refusal, before anything is written or sent
    # (its own runs folder, SF_RUNS_DIR: tests side by side write the site's shared one)
    proc = sf("submit", str(experiment(tmp_path, account="no-such-account")), env=env)
    assert proc.returncode == 2 and "slurm.account: account 'no-such-account'" in proc.stderr, proc.stderr
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
