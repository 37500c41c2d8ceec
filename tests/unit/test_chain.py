"""--after RUN (launcher.chain): afterok on the run's current job, from Slurm's state; clear
errors for runs that cannot succeed; through `sf submit --dry-run` and `sf sweep`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher import chain, paths
from launcher.cli import main
from launcher.errors import SpecError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli_contract import site  # noqa: E402,F401  (the fixture: site(**slurm) -> a site file)
from test_monitor import _row, _submitted  # noqa: E402
from test_render import directives  # noqa: E402

GRPO = str(paths.data_root() / "examples" / "grpo")


@pytest.mark.parametrize("state,expected", [("RUNNING", "afterok:501"), ("PENDING", "afterok:501"),
                                            ("REQUEUED", "afterok:501"), ("COMPLETED", None)])
def test_after_dependency(state, expected, fake_slurm):
    run = _submitted(fake_slurm.runs_dir, "sft", "501")
    fake_slurm.set("sacct", _row("501", state))
    assert chain.after_dependency(run.id, fake_slurm.runs_dir) == expected


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "TIMEOUT"])
def test_after_a_run_that_cannot_succeed(state, fake_slurm):
    run = _submitted(fake_slurm.runs_dir, "sft", "502")
    fake_slurm.set("sacct", _row("502", state))
    with pytest.raises(SpecError) as err:
        chain.after_dependency(run.id, fake_slurm.runs_dir)
    assert err.value.field == "--after" and f"ended {state.lower()}" in err.value.message


def test_after_unknown_run(fake_slurm):
    with pytest.raises(SpecError) as err:
        chain.after_dependency("nope", fake_slurm.runs_dir)
    assert err.value.field == "--after"


def test_submit_after_renders_afterok_with_singleton(fake_slurm, site):  # noqa: F811 (the imported fixture)
    run = _submitted(fake_slurm.runs_dir, "sft", "503")
    fake_slurm.set("sacct", _row("503", "RUNNING"))
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--dry-run", "--after", run.id,
                                       "--dependency", "afterany:7"])
    assert result.exit_code == 0, result.output
    (comp,) = directives(result.stdout)
    assert "--dependency=afterany:7,afterok:503,singleton" in comp
    result = CliRunner().invoke(main, ["sweep", GRPO, "--site", site(), "--dry-run", "--grid", "rollout_n=4,8",
                                       "--after", run.id])
    assert result.exit_code == 0, result.output
    assert "#SBATCH --dependency=afterok:503\n" in result.stdout  # an array: no singleton


def test_submit_after_a_failed_run_is_refused(fake_slurm, site):  # noqa: F811 (the imported fixture)
    run = _submitted(fake_slurm.runs_dir, "sft", "504")
    fake_slurm.set("sacct", _row("504", "FAILED"))
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--after", run.id])
    assert result.exit_code == 2 and result.stderr.startswith("sf: error: --after: run ")
    assert not fake_slurm.calls("sbatch")


def _with_export(fake_slurm, tmp_path, job_id="601", done=False):
    run = _submitted(fake_slurm.runs_dir, "sft", "600")
    target = tmp_path / "exports" / "global_step_4"
    target.mkdir(parents=True)
    if done:
        (target / "config.json").write_text("{}")
    run.update(exports=[{"id": "export-1", "target": str(target), "job_id": job_id, "state": "submitted"}])
    return run, str(target)


def test_model_from_a_finished_export(fake_slurm, tmp_path):
    run, target = _with_export(fake_slurm, tmp_path, done=True)
    assert chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir) == (target, None)
    assert not fake_slurm.calls("sacct")  # the model is there: nothing to ask Slurm


def test_model_from_an_export_still_running(fake_slurm, tmp_path, site):  # noqa: F811 (the imported fixture)
    run, target = _with_export(fake_slurm, tmp_path)
    fake_slurm.set("sacct", _row("601", "RUNNING"))
    assert chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir) == (target, "afterok:601")
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--dry-run", "--model", f"run:{run.id}"])
    assert result.exit_code == 0, result.output
    assert f"actor_rollout_ref.model.path={target}" in result.stdout
    assert "--dependency=afterok:601,singleton" in directives(result.stdout)[0]


@pytest.mark.parametrize("state", ["FAILED", "COMPLETED", "CANCELLED"])
def test_model_from_an_export_that_made_no_model(state, fake_slurm, tmp_path):
    run, _ = _with_export(fake_slurm, tmp_path)
    fake_slurm.set("sacct", _row("601", state))
    with pytest.raises(SpecError) as err:
        chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir)
    assert err.value.field == "--model" and "holds no model" in err.value.message


def test_model_from_a_run_without_export(fake_slurm):
    run = _submitted(fake_slurm.runs_dir, "sft", "602")
    with pytest.raises(SpecError) as err:
        chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir)
    assert err.value.field == "--model" and f"sf export {run.id}" in err.value.message
