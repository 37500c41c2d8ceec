"""Bad inputs an adversarial new user tried (a hunt through the CLI, nothing submitted): each
goes through the real CLI (click's CliRunner) and must end with exit 2 and one `sf: error:`
line that names the field and the fix, leaving no run folder behind."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import write_exp, write_site  # noqa: E402
from unit_helpers import GOOD_SPEC as GOOD  # noqa: E402
from unit_helpers import refused  # noqa: E402
from unit_helpers import sf_cli as sf  # noqa: E402

# --- a spec error of the field `slurm` printed its message without the field --------------

@pytest.mark.parametrize("value, needle", [("null", "is empty (null)"), ("[]", "has the wrong type"),
                                           ("{spare_nodes: 1}", "unknown key 'spare_nodes'")])
def test_slurm_block_errors_name_slurm(cli_env, value, needle):
    # The CLI printed a SpecError whose field is `slurm` as a Slurm failure: without its field
    write_exp(cli_env, "exp", GOOD + f"slurm: {value}\n")
    line = refused(sf("validate", "exp"), needle)
    assert line.startswith("sf: error: slurm: "), line
    doc = json.loads(sf("validate", "exp", "--json").stdout)
    assert doc["errors"][0]["field"] == "slurm"


# --- counts Slurm cannot hold: max_requeues and signal_lead_s above 65535 -----------------

@pytest.mark.parametrize("key, value", [("max_requeues", "1e99"), ("max_requeues", "70000"),
                                        ("signal_lead_s", "99999999999")])
def test_slurm_counts_beyond_slurm_are_refused(cli_env, key, value):
    # max_requeues 1e99 reached the batch script as a 100-digit SF_MAX_REQUEUES that bash's
    # 64-bit arithmetic wraps (the first requeue was refused); a lead above 65535 is refused
    # by sbatch (exit 1 after sf said the spec was valid)
    write_exp(cli_env, "exp", GOOD + f"slurm: {{time: UNLIMITED, {key}: {value}}}\n")
    refused(sf("submit", "exp", "--dry-run"), f"slurm.{key}:", "maximum of 65535")
    assert not list((cli_env / "runs").iterdir())


def test_site_max_requeues_beyond_slurm_is_refused(cli_env):
    write_site(cli_env, runs_dir=str(cli_env / "runs"), slurm={"time": "00:30:00", "max_requeues": 70000})
    write_exp(cli_env, "exp", GOOD)
    refused(sf("validate", "exp"), "site.slurm.max_requeues", "site.yaml:", "maximum of 65535")


# --- a key YAML reads as a number, true or null: the line named no key ---------------------

@pytest.mark.parametrize("block, field, shown", [("1: 2\n", "config.yaml", "unknown key 1;"),
                                                 ("null: 2\n", "config.yaml", "unknown key null;"),
                                                 ("knobs: {true: 2}\n", "knobs", "unknown key true;"),
                                                 ("spec: {resources: {pools: [{name: t, 5: 1}]}}\n",
                                                  "spec.resources.pools[0]", "unknown key 5;")])
def test_non_text_keys_are_named(cli_env, block, field, shown):
    # jsonschema's message quotes only text keys: the line read `config.yaml: ; allowed: ...`
    write_exp(cli_env, "exp", GOOD + block)
    refused(sf("validate", "exp"), f"{field}: {shown}")


# --- a list or a mapping where verl reads a number or a switch -----------------------------

@pytest.mark.parametrize("override, got", [("trainer.total_epochs=[1,2]", "is a list"),
                                           ("actor_rollout_ref.rollout.n=[]", "is a list"),
                                           ("actor_rollout_ref.actor.optim.lr=[1]", "is a list"),
                                           ("trainer.val_before_train=[true]", "is a list"),
                                           ("trainer.total_epochs={}", "is a mapping")])
def test_list_for_a_scalar_key_is_refused(cli_env, override, got):
    # typed.problems skipped every list and mapping: these reached verl, which fails on them
    # after Ray started
    key = override.partition("=")[0]
    write_exp(cli_env, "exp", GOOD)
    refused(sf("submit", "exp", "--dry-run", "--set", override), f"--set {key}:", got, "write one value")


def test_list_for_a_string_key_still_passes(cli_env):
    write_exp(cli_env, "exp", GOOD)
    result = sf("validate", "exp", "--set", "trainer.project_name=[a]")
    assert result.exit_code == 0, result.stderr


# --- a --set whose key is no key: the line said `bad key` and no fix ----------------------

@pytest.mark.parametrize("item, key", [("=5", "''"), ("a b=1", "'a b'"), (".trainer=1", "'.trainer'"),
                                       ("tráiner.x=1", "'tráiner.x'")])
def test_set_bad_key_says_the_form(cli_env, item, key):
    write_exp(cli_env, "exp", GOOD)
    refused(sf("validate", "exp", "--set", item), "--set:", f"{key} is not a knob or a Hydra key",
            "write KEY=VALUE, e.g. --set rollout_n=8")


# --- a line break in an override's value --------------------------------------------------

@pytest.mark.parametrize("value", ["a\nb", "a\rb"])
def test_line_break_in_a_set_value_is_one_line(cli_env, value):
    # the hint quoted the value with its break: the error ran over two lines (a CR hid half of it)
    write_exp(cli_env, "exp", GOOD)
    result = sf("validate", "exp", "--set", f"trainer.project_name={value}")
    refused(result, "trainer.project_name:", "holds a line break", "on one line")
    assert result.stderr.count("\n") == 1 and "\r" not in result.stderr


def test_line_break_in_a_config_override_names_it(cli_env):
    # the schema's pattern did not match past a line break: 'has the wrong form', for a
    # key=value that has the right one
    write_exp(cli_env, "exp", GOOD + 'overrides: ["trainer.project_name=a\\nb"]\n')
    refused(sf("validate", "exp"), "trainer.project_name:", "holds a line break")


# --- Hydra's own message, when no rule of sf explains a failed compose, is one line --------

def test_hydra_sweep_value_is_one_line(cli_env):
    # Hydra's "Ambiguous value ... 1. To use it as a list, ..." ran over four lines
    write_exp(cli_env, "exp", GOOD)
    result = sf("validate", "exp", "--set", "trainer.project_name=sort(a,b)")
    refused(result, "overrides:", "Ambiguous value", "To use it as string, quote the value")
    assert result.stderr.count("\n") == 1, result.stderr


# --- a path that starts with ~USER for a user this machine does not know ------------------

@pytest.mark.parametrize("args, field", [
    (["validate", "exp", "--model", "~nosuchuser9/m"], "--model"),
    (["validate", "exp", "--train-data", "~nosuchuser9/t.parquet"], "--train-data"),
    (["validate", "exp", "--validation-data", "~nosuchuser9/t.parquet"], "--validation-data"),
    (["validate", "~nosuchuser9/exp"], "NAME"),
    (["validate", "exp", "--site", "~nosuchuser9/site.yaml"], "--site"),
    (["submit", "exp", "--dry-run", "--runs-dir", "~nosuchuser9/runs"], "--runs-dir"),
    (["list", "--runs-dir", "~nosuchuser9/runs"], "--runs-dir"),
    (["render", "exp", "-o", "~nosuchuser9/out"], "--output"),
    (["export", "exp", "--checkpoint", "~nosuchuser9/ckpt", "--checkpoint-format", "verl-fsdp"], "--checkpoint"),
])
def test_unknown_user_home_is_named(cli_env, monkeypatch, args, field):
    # pathlib's expanduser raised RuntimeError: an internal error, exit 1
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")  # a runtime, for render to reach -o
    write_exp(cli_env, "exp", GOOD)
    refused(sf(*args), f"{field}:", "no user 'nosuchuser9'", "write the path in full")
    assert not list((cli_env / "runs").iterdir())


@pytest.mark.parametrize("block, field", [("model: ~nosuchuser9/m\n", "model"),
                                          ("reward: {function: {path: ~nosuchuser9/r.py, name: f}}\n",
                                           "reward.function.path")])
def test_unknown_user_home_in_config_is_named(cli_env, block, field):
    write_exp(cli_env, "exp", GOOD.replace("model: Qwen/Qwen2.5-0.5B-Instruct\n", "") + block)
    refused(sf("validate", "exp"), f"{field}:", "no user 'nosuchuser9'")


def test_unknown_user_home_in_sf_runs_dir_is_named(cli_env, monkeypatch):
    monkeypatch.setenv("SF_RUNS_DIR", "~nosuchuser9/runs")
    write_exp(cli_env, "exp", GOOD)
    refused(sf("submit", "exp", "--dry-run"), "$SF_RUNS_DIR:", "no user 'nosuchuser9'")


# --- a name past the file system's limit (a pasted blob as a run name or a path) ----------

def test_overlong_model_names_the_flag(cli_env):
    # the line's field was the 5,000-character path itself
    write_exp(cli_env, "exp", GOOD)
    line = refused(sf("validate", "exp", "--model", "x" * 5000), "--model:", "(5000 characters)", "pass a model path")
    assert len(line) < 400


def test_overlong_run_name_is_a_short_line(cli_env):
    line = refused(sf("logs", "x" * 5000), "longer than the file system allows", "use a shorter one")
    assert len(line) < 400
