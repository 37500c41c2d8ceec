"""load_spec: layers, provenance, schema, datasets, relative paths, main.py; sf new / schema / validate --json."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import SITE, write_exp, write_site  # noqa: E402
import genschema  # noqa: E402

from launcher.compile import catalog  # noqa: E402
from launcher.cli.app import main  # noqa: E402
from launcher.errors import SpecError  # noqa: E402
from launcher.spec.experiment import load_spec, schema, schema_errors  # noqa: E402
from launcher.spec.layers import Layer, Origin  # noqa: E402

CONFIG = {"method": "verl/grpo", "model": "Qwen/Qwen2.5-0.5B-Instruct", "knobs": {"rollout_n": 5, "actor_lr": "1e-6"},
          "data": {"train": {"files": "data/train.parquet"}}, "slurm": {"time": "02:00:00"}}


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_layers_and_provenance(root):
    write_exp(root, "e", CONFIG)
    spec = load_spec("e", {"set": ["rollout_n=8", "trainer.critic_warmup=1"], "validation_data": ["v.parquet"]}, SITE)
    p = spec.provenance
    assert p["method"] == "config.yaml" and p["knobs.rollout_n"] == "--set" and p["knobs.save_freq"] == "defaults"
    assert p["slurm.account"] == "site" and p["slurm.time"] == "config.yaml" and p["data.validation.files"] == "--validation-data"
    assert spec.values["slurm"]["account"] == "acct" and spec.values["slurm"]["time"] == "02:00:00"
    assert spec.values["knobs"]["rollout_n"] == "8"
    assert spec.values["overrides"] == ["trainer.critic_warmup=1"] and spec.override_sources == ["--set trainer.critic_warmup"]
    assert spec.override_layers == [Layer.SET] and spec.origins["knobs.rollout_n"] == Origin(Layer.SET, flag="--set")
    # config.yaml paths are relative to the experiment folder, CLI paths to the cwd
    assert spec.values["data"]["train"]["files"] == str(root / "experiments/e/data/train.parquet")
    assert spec.values["data"]["validation"]["files"] == str(root / "v.parquet")
    assert spec.name == "e" and spec.exp_dir == str(root / "experiments/e") and spec.main_py is None


def test_cli_model_and_train_data_override(root):
    write_exp(root, "e", CONFIG)
    (root / "models" / "m").mkdir(parents=True)
    spec = load_spec("e", {"model": "./models/m", "train_data": ["/abs/t.parquet", "/abs/u.parquet"]}, SITE)
    assert spec.values["model"] == str(root / "models/m") and spec.provenance["model"] == "--model"
    assert spec.values["data"]["train"]["files"] == ["/abs/t.parquet", "/abs/u.parquet"]


def test_directory_path_and_main_py(root):
    exp = write_exp(root, "x", CONFIG, main_py=True)
    spec = load_spec(str(exp), {}, SITE)
    assert spec.name == "x" and spec.main_py == str(exp / "main.py")


def test_experiment_folder_name_must_be_a_valid_name(root):
    exp = root / "odd" / "my exp"
    exp.mkdir(parents=True)
    (exp / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    with pytest.raises(SpecError) as err:
        load_spec(str(exp), {}, SITE)
    assert err.value.field == "NAME" and "rename the folder" in err.value.message
    # a trailing newline is no valid name either (patterns must match the whole text)
    res = CliRunner().invoke(main, ["new", "a\n", "--method", "verl/grpo"])
    assert res.exit_code == 2 and "NAME" in res.output and not (root / "experiments").exists()


def test_dataset_resolution(root):
    ds = root / "ds" / "alice" / "gsm8k-zh"
    (ds / "v1").mkdir(parents=True)
    (ds / "v2").mkdir()
    (ds / "v2" / "train.parquet").write_text("x")
    (ds / "v2" / "other.parquet").write_text("x")
    from launcher.spec.site import site_from_dict
    from sfc_helpers import SITE_DICT

    site = site_from_dict({**SITE_DICT, "dataset_roots": [str(root / "ds")]})
    write_exp(root, "e", {**CONFIG, "data": {"train": {"dataset": "alice/gsm8k-zh@v2"}}})
    spec = load_spec("e", {}, site)
    assert spec.values["data"]["train"]["files"] == str(ds / "v2" / "train.parquet") and spec.dataset_dir == str(ds / "v2")
    spec = load_spec("e", {"train_data": ["other.parquet"]}, site)
    assert spec.values["data"]["train"]["files"] == str(ds / "v2" / "other.parquet")
    with pytest.raises(SpecError, match="versions: v1, v2"):
        load_spec("e", {"train_dataset": "alice/gsm8k-zh@v3"}, site)
    with pytest.raises(SpecError, match="no data files"):
        load_spec("e", {"train_dataset": "alice/gsm8k-zh@v1"}, site)


def test_schema_errors_name_the_path():
    errs = schema_errors({"method": "verl/grpo", "spec": {"resources": {"pools": [{"name": "train", "nodes": 0}]}}})
    assert errs[0].field == "spec.resources.pools[0].nodes"


def test_schema_matches_knob_table():
    """configs/schema/config.schema.json is generated from launcher.compile.knobs.KNOBS (genschema.py)."""
    assert schema() == json.loads(json.dumps(genschema.build()))


def test_sf_schema_prints_it(root):
    r = CliRunner().invoke(main, ["schema"])
    assert r.exit_code == 0 and json.loads(r.stdout)["properties"]["knobs"]["properties"]["rollout_n"]


@pytest.mark.parametrize("method", catalog.all_methods())
def test_sf_new_writes_a_valid_commented_config(root, method):
    r = CliRunner().invoke(main, ["new", f"e-{method}", "--method", f"verl/{method}", "--framework-version", "0.9.0"])
    assert r.exit_code == 0, r.stderr
    text = (root / "experiments" / f"e-{method}" / "config.yaml").read_text()
    data = yaml.safe_load(text)
    assert data["method"] == f"verl/{method}" and data["framework_version"] == "0.9.0"
    assert schema_errors(data) == [] and text.count("#") >= 5 and len(text.splitlines()) < 45
    assert not list((root / "experiments" / f"e-{method}").glob(".config.*"))  # no temp file left


def test_sf_new_then_validate_json(root, monkeypatch):
    monkeypatch.setenv("SF_SITE", str(write_site(root)))
    runner = CliRunner()
    assert runner.invoke(main, ["new", "g", "--method", "verl/grpo"]).exit_code == 0
    r = runner.invoke(main, ["validate", "g", "--json", "--model", "m", "--train-data", "/d/t.parquet", "--profile", "fake:2x4"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["valid"] and out["entry"] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert out["pools"] == [{"name": "train", "series": "fake", "nodes": 2, "gpus_per_node": 4, "het_group": 0,
                             "roles": ["actor", "rollout", "ref"], "spare_nodes": 0}]
    assert "trainer.default_local_dir=/tmp/sf-unit-runs/g-XXXXX/checkpoints" in out["overrides"]
    assert out["provenance"]["model"] == "--model"
    r = runner.invoke(main, ["validate", "g", "--json"])
    assert r.exit_code == 2 and json.loads(r.stdout)["valid"] is False


def test_validate_text_shows_provenance(root, monkeypatch):
    monkeypatch.setenv("SF_SITE", str(write_site(root)))
    write_exp(root, "e", CONFIG)
    r = CliRunner().invoke(main, ["validate", "e", "--set", "rollout_n=6"])
    assert r.exit_code == 0, r.stderr
    # issue 20: the values table is keyed by the verl key, typed as verl reads it, with what it overrides
    assert "actor_rollout_ref.rollout.n = 6    [--set] (overrides 5 from config.yaml)" in r.output, r.output
    assert "actor_rollout_ref.rollout.n=6" in r.output


def test_spec_options_reusable():
    import click

    from launcher.cli.options import spec_flags, spec_options

    seen = {}

    @click.command()
    @spec_options
    def cmd(**kwargs):
        seen.update(spec_flags(kwargs))
        assert kwargs == {}

    r = CliRunner().invoke(cmd, ["--model", "m", "--set", "a.b=1", "--set", "rollout_n=3", "--profile", "fake:4"])
    assert r.exit_code == 0, r.output
    assert seen["model"] == "m" and seen["set"] == ["a.b=1", "rollout_n=3"] and seen["profile"] == "fake:4"
    assert seen["train_data"] is None and seen["site"] is None


def test_custom_reward_function_alias(root):
    write_exp(root, "e", {**CONFIG, "custom_reward_function": {"path": "my_reward.py"}})
    (root / "experiments/e/my_reward.py").write_text("def compute_score(*a, **k):\n    return 0.0\n")
    spec = load_spec("e", {}, SITE)
    assert spec.values["reward"]["function"]["path"] == str(root / "experiments/e/my_reward.py")
    assert spec.provenance["reward.function.path"] == "config.yaml"
