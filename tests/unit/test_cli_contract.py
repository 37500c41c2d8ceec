"""What every command promises: SBATCH_* input variables never silently override a
script (issue 11 item 6), and --json means errors as JSON too, one shape for all (item 7).
Against the fake Slurm commands of tests/unit/conftest.py."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.spec import paths

GRPO = str(paths.data_root() / "examples" / "grpo")


def sf(*args):
    return CliRunner().invoke(main, list(args))


# --- SBATCH_* input variables ---------------------------------------------------------------

def test_validate_names_every_sbatch_variable(site, monkeypatch):
    path = site()
    monkeypatch.setenv("SBATCH_PARTITION", "teach")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "5")
    result = sf("validate", GRPO, "--site", path)
    assert result.exit_code == 0
    warned = [line for line in result.stderr.splitlines() if "SBATCH_" in line]
    assert len(warned) == 2 and "SBATCH_PARTITION=teach" in warned[0] and "SBATCH_TIMELIMIT=5" in warned[1]
    assert all("override the script's #SBATCH lines" in line for line in warned)
    doc = json.loads(sf("validate", GRPO, "--site", path, "--json").stdout)
    assert [v["name"] for v in doc["sbatch_env"]] == ["SBATCH_PARTITION", "SBATCH_TIMELIMIT"]
    assert not any(v["passed"] for v in doc["sbatch_env"])
    monkeypatch.delenv("SBATCH_PARTITION")
    monkeypatch.delenv("SBATCH_TIMELIMIT")
    assert "SBATCH_" not in sf("validate", GRPO, "--site", path).stderr


def test_submit_leaves_sbatch_variables_out_and_says_so_once(site, fake_slurm, monkeypatch):
    fake_slurm.set("sbatch", "31\n")
    monkeypatch.setenv("SBATCH_PARTITION", "teach")
    monkeypatch.setenv("SBATCH_ACCOUNT", "other")
    monkeypatch.setenv("SBATCH_RESERVATION", "maint")
    result = sf("submit", GRPO, "--site", site())
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "SBATCH_" in line]
    assert said == ["sf: left out of sbatch's environment: SBATCH_ACCOUNT, SBATCH_PARTITION, SBATCH_RESERVATION "
                    "(they would override the script's #SBATCH lines; the site's slurm.pass_sbatch_env lets "
                    "named ones through)"]
    assert fake_slurm.sbatch_env() == []
    # the dry run says it too: how sbatch runs is part of what it shows
    dry = sf("submit", GRPO, "--site", site(), "--dry-run")
    assert [line for line in dry.stderr.splitlines() if "SBATCH_" in line] == said
    # the site lets a named one through, and only that one
    result = sf("submit", GRPO, "--site", site(pass_sbatch_env=["SBATCH_RESERVATION"]))
    assert result.exit_code == 0, result.output
    assert fake_slurm.sbatch_env() == ["SBATCH_RESERVATION=maint"]
    assert "SBATCH_ACCOUNT, SBATCH_PARTITION (" in result.stderr


def test_sweep_leaves_sbatch_variables_out(site, fake_slurm, monkeypatch):
    fake_slurm.set("sbatch", "32\n")
    monkeypatch.setenv("SBATCH_QOS", "high")
    result = sf("sweep", GRPO, "--site", site(), "--grid", "rollout_n=4,8")
    assert result.exit_code == 0, result.output
    assert "left out of sbatch's environment: SBATCH_QOS" in result.stderr
    assert fake_slurm.sbatch_env() == []


def test_bad_pass_sbatch_env_is_one_line(site):
    result = sf("validate", GRPO, "--site", site(pass_sbatch_env="SBATCH_QOS"))
    assert result.exit_code == 2 and result.stderr.startswith("sf: error: site.slurm.pass_sbatch_env:")


# --- --json: errors as JSON, one shape ------------------------------------------------------

def _error_doc(result, exit_code=2):
    assert result.exit_code == exit_code, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["errors"]
    for error in doc["errors"]:
        assert set(error) == {"field", "message", "hint"} and error["field"] and error["message"]
    return doc


def test_json_errors_one_shape_for_every_command(site, fake_slurm):
    path = site()
    # a bad spec value
    doc = _error_doc(sf("submit", GRPO, "--site", path, "--set", "rollout_n=0", "--json"))
    assert any("rollout_n" in e["field"] + e["message"] for e in doc["errors"])
    doc = _error_doc(sf("sweep", GRPO, "--site", path, "--grid", "rollout_n", "--json"))
    assert doc["errors"][0]["field"] == "--grid"
    # an unknown run
    doc = _error_doc(sf("status", "nope-abcde", "--json"))
    assert doc["errors"][0]["field"] == "run"
    _error_doc(sf("cancel", "nope-abcde", "--json"))
    _error_doc(sf("metrics", "nope-abcde", "--json"))
    # click's own usage errors: a missing argument, a bad value
    doc = _error_doc(sf("submit", "--json"))
    assert "NAME" in doc["errors"][0]["message"]
    doc = _error_doc(sf("status", "--json", "--limit", "zero"))
    assert doc["errors"][0]["field"] == "--limit"
    # validate keeps its `valid` key, in the same shape
    doc = _error_doc(sf("validate", GRPO, "--site", path, "--set", "rollout_n=0", "--json"))
    assert doc["valid"] is False


def test_json_slurm_error_exit_1(site, fake_slurm):
    fake_slurm.set("sbatch", "", "sbatch: error: Invalid account\n", 1)
    doc = _error_doc(sf("submit", GRPO, "--site", site(), "--json"), exit_code=1)
    assert doc["errors"][0]["field"] == "slurm" and "Invalid account" in doc["errors"][0]["message"]


def test_hint_is_the_fix_after_the_last_semicolon():
    from launcher.cli.app import error_document
    from launcher.errors import SpecError

    doc = error_document([SpecError("a", "x is wrong; use y"), SpecError("b", "no fix here")])
    assert [e["hint"] for e in doc["errors"]] == ["use y", None]


def test_without_json_errors_stay_lines_on_stderr(site):
    result = sf("submit", GRPO, "--site", site(), "--set", "rollout_n=0")
    assert result.exit_code == 2 and result.stdout == "" and result.stderr.startswith("sf: error: ")


# --- --json on every command --------------------------------------------------------------

def test_every_command_takes_json():
    from launcher.cli.app import COMMANDS

    missing = [name for name in COMMANDS if "--json" not in sf(name, "--help").output]
    assert missing == []


def test_json_success_documents(site, fake_slurm, tmp_path, monkeypatch):
    """new, schema, render, logs (--list and text) and plot print one JSON document."""
    from launcher import runs

    path = site()
    monkeypatch.chdir(tmp_path)
    doc = json.loads(sf("new", "exp1", "--method", "verl/grpo", "--json").stdout)
    assert doc["ok"] and doc["created"] == "experiments/exp1/config.yaml" and doc["method"] == "verl/grpo"
    assert (tmp_path / doc["created"]).is_file()
    assert json.loads(sf("schema", "--json").stdout)["type"] == "object"
    out = tmp_path / "rendered"
    doc = json.loads(sf("render", GRPO, "--site", path, "-o", str(out), "--json").stdout)
    assert doc["ok"] and doc["files"][0] == str(out / "job.sbatch") and (out / "job.sbatch").is_file()
    assert doc["submit"] == f"sbatch {out / 'job.sbatch'}"

    run = runs.create_run(fake_slurm.runs_dir, "grpo")
    run.logs_dir.mkdir(parents=True, exist_ok=True)
    (run.logs_dir / "slurm-7.out").write_text("line one\nline two\n")
    doc = json.loads(sf("logs", run.id, "--runs-dir", str(fake_slurm.runs_dir), "--list", "--json").stdout)
    assert doc["files"] == [{"file": "slurm-7.out", "bytes": 18}]
    doc = json.loads(sf("logs", run.id, "--runs-dir", str(fake_slurm.runs_dir), "--json").stdout)
    assert doc["logs"] == [{"file": "slurm-7.out", "text": "line one\nline two\n"}]

    run.path("metrics").mkdir(exist_ok=True)
    run.path("metrics/attempt-0.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.1 * s}}) + "\n" for s in (1, 2)))
    png = tmp_path / "m.png"
    result = sf("plot", run.id, "--runs-dir", str(fake_slurm.runs_dir), "-o", str(png), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["png"] == str(png) and doc["steps"] == 2 and png.stat().st_size > 0


def test_an_unknown_run_in_an_empty_runs_dir_says_where_to_look(tmp_path):
    from launcher import runs
    from launcher.errors import SpecError

    with pytest.raises(SpecError) as exc:
        runs.open_run(tmp_path, "nosuch-abcde")
    assert exc.value.field == "run" and "it holds no runs" in exc.value.message
    assert exc.value.message.endswith("pass the runs dir the run is in "
                                      "(--runs-dir, $SF_RUNS_DIR or the site's runs_dir)")
