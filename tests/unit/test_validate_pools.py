"""`sf validate` shows every pool as the job allocates it: its spare nodes too, in the table
and in --json (issue 35: a pool with spares was printed without them)."""
from __future__ import annotations

import json
import shutil

import yaml
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.spec import paths


def spare_experiment(tmp_path, spares: int) -> str:
    """examples/grpo with `spares` spare nodes on its pool (and restarts in place to use them)."""
    examples = paths.data_root() / "examples"
    shutil.copytree(examples / "assets", tmp_path / "assets")
    data = yaml.safe_load((examples / "grpo" / "config.yaml").read_text())
    data["spec"]["resources"]["pools"][0]["spare_nodes"] = spares
    data["slurm"]["max_restarts_in_place"] = 1
    exp = tmp_path / "spares"
    exp.mkdir()
    (exp / "config.yaml").write_text(yaml.safe_dump(data))
    return str(exp)


def test_validate_prints_a_pools_spare_nodes(site, tmp_path):
    path = site()
    exp = spare_experiment(tmp_path, 2)
    result = CliRunner().invoke(main, ["validate", exp, "--site", path])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    pools = lines[lines.index("pools:") + 1]
    assert pools == "  het group 0: train 2x4 fake + 2 spare nodes roles=actor,rollout,ref", pools
    doc = json.loads(CliRunner().invoke(main, ["validate", exp, "--site", path, "--json"]).stdout)
    assert [(p["name"], p["nodes"], p["spare_nodes"]) for p in doc["pools"]] == [("train", 2, 2)]


def test_validate_prints_no_spares_where_there_are_none(site):
    result = CliRunner().invoke(main, ["validate", str(paths.data_root() / "examples" / "grpo"), "--site", site()])
    assert result.exit_code == 0, result.output
    assert "  het group 0: train 2x4 fake roles=actor,rollout,ref" in result.stdout.splitlines()


def test_the_batch_script_header_counts_a_pools_spare_nodes(site, tmp_path):
    """The script's comment for a het group said "2 x 4 GPUs" above #SBATCH --nodes=3."""
    result = CliRunner().invoke(main, ["submit", spare_experiment(tmp_path, 1), "--site", site(), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "# -- het group 0: pool train (2 x 4 GPUs + 1 spare node, series fake)" in lines, lines[:3]
    assert "#SBATCH --nodes=3" in lines
