"""Shell completion: command names, methods, versions and run ids."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SF = str(Path(sys.executable).parent / "sf")


def complete(words: str, tmp_path=None, **env) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    proc = subprocess.run([SF], env={**os.environ, "_SF_COMPLETE": "bash_complete", "COMP_WORDS": words,
                                     "COMP_CWORD": str(cword), **env},
                          capture_output=True, text=True, check=True)
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


def test_command_names():
    assert complete("sf st") == ["status"]
    assert {"submit", "sweep", "schema"} <= set(complete("sf s"))


def test_methods_and_versions():
    assert complete("sf new x --method verl/r") == ["verl/reinforce-baseline", "verl/remax", "verl/rloo"]
    assert complete("sf new x --framework-version ") == ["0.9.0", "0.9.1"]


def test_run_ids_from_the_runs_folder(tmp_path):
    from launcher import runs

    run = runs.create_run(tmp_path, "my-grpo")
    runs.create_run(tmp_path, "other")
    assert complete("sf logs my-", SF_RUNS_DIR=str(tmp_path)) == [run.id]
    assert complete("sf status zz", SF_RUNS_DIR=str(tmp_path)) == []


def test_daily_use_flags_and_commands(tmp_path):
    from launcher import runs

    run = runs.create_run(tmp_path, "my-grpo")
    assert complete("sf submit x --mail", SF_RUNS_DIR=str(tmp_path)) == ["--mail-type", "--mail-user"]
    assert {"--reservation", "--dependency", "--exclude", "--constraint", "--sbatch"} <= set(complete("sf sweep x --"))
    assert complete("sf attach my-", SF_RUNS_DIR=str(tmp_path)) == [run.id]
    assert complete("sf dashboard my-", SF_RUNS_DIR=str(tmp_path)) == [run.id]
    assert complete("sf attach x --r") == ["--role", "--runs-dir"]


def test_chain_flags(tmp_path):
    """--after and --model run:RUN complete run ids; sf export RUN too; --model else files."""
    from launcher import runs

    run = runs.create_run(tmp_path, "my-sft")
    assert complete("sf submit x --after my-", SF_RUNS_DIR=str(tmp_path)) == [run.id]
    assert complete("sf submit x --model run:my", SF_RUNS_DIR=str(tmp_path)) == [f"run:{run.id}"]
    assert complete("sf submit x --model ru", SF_RUNS_DIR=str(tmp_path)) == [f"run:{run.id}"]
    assert complete("sf export my-", SF_RUNS_DIR=str(tmp_path)) == [run.id]
    assert "--preflight" in complete("sf export x --pre")
