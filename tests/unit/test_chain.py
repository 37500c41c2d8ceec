"""--after RUN (launcher.submit.chain): afterok on the run's current job, from Slurm's state; clear
errors for runs that cannot succeed; through `sf submit --dry-run` and `sf sweep`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.errors import SpecError
from launcher.spec import paths
from launcher.submit import chain

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import directives, sacct_row, submitted_run  # noqa: E402

GRPO = str(paths.data_root() / "examples" / "grpo")


@pytest.mark.parametrize("state,expected", [("RUNNING", "afterok:501"), ("PENDING", "afterok:501"),
                                            ("REQUEUED", "afterok:501"), ("COMPLETED", None)])
def test_after_dependency(state, expected, fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "sft", "501")
    fake_slurm.set("sacct", sacct_row("501", state))
    assert chain.after_dependency(run.id, fake_slurm.runs_dir) == expected


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "TIMEOUT"])
def test_after_a_run_that_cannot_succeed(state, fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "sft", "502")
    fake_slurm.set("sacct", sacct_row("502", state))
    with pytest.raises(SpecError) as err:
        chain.after_dependency(run.id, fake_slurm.runs_dir)
    assert err.value.field == "--after" and f"ended {state.lower()}" in err.value.message


def test_after_unknown_run(fake_slurm):
    with pytest.raises(SpecError) as err:
        chain.after_dependency("nope", fake_slurm.runs_dir)
    assert err.value.field == "--after"


def test_submit_after_renders_afterok_with_singleton(fake_slurm, site):  # noqa: F811 (the imported fixture)
    run = submitted_run(fake_slurm.runs_dir, "sft", "503")
    fake_slurm.set("sacct", sacct_row("503", "RUNNING"))
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
    run = submitted_run(fake_slurm.runs_dir, "sft", "504")
    fake_slurm.set("sacct", sacct_row("504", "FAILED"))
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--after", run.id])
    assert result.exit_code == 2 and result.stderr.startswith("sf: error: --after: run ")
    assert not fake_slurm.calls("sbatch")


def _with_export(fake_slurm, tmp_path, job_id="601", done=False):
    run = submitted_run(fake_slurm.runs_dir, "sft", "600")
    target = tmp_path / "exports" / "global_step_4"
    target.mkdir(parents=True)
    if done:
        (target / "config.json").write_text("{}")
    run.update(exports=[{"id": "export-1", "target": str(target), "job_id": job_id, "state": "submitted"}])
    return run, str(target)


def test_model_from_a_finished_export(fake_slurm, tmp_path):
    run, target = _with_export(fake_slurm, tmp_path, done=True)
    assert chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir) == (target, None, None)
    assert not fake_slurm.calls("sacct")  # the model is there: nothing to ask Slurm


def test_model_from_an_export_still_running(fake_slurm, tmp_path, site):  # noqa: F811 (the imported fixture)
    run, target = _with_export(fake_slurm, tmp_path)
    fake_slurm.set("sacct", sacct_row("601", "RUNNING"))
    assert chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir) == (target, "afterok:601", None)
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--dry-run", "--model", f"run:{run.id}"])
    assert result.exit_code == 0, result.output
    assert f"actor_rollout_ref.model.path={target}" in result.stdout
    assert "--dependency=afterok:601,singleton" in directives(result.stdout)[0]


@pytest.mark.parametrize("state", ["FAILED", "COMPLETED", "CANCELLED"])
def test_model_from_an_export_that_made_no_model(state, fake_slurm, tmp_path):
    run, _ = _with_export(fake_slurm, tmp_path)
    fake_slurm.set("sacct", sacct_row("601", state))
    with pytest.raises(SpecError) as err:
        chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir)
    assert err.value.field == "--model" and "holds no model" in err.value.message


# --- --model run:RUN, RUN without an export: the chain exports its last checkpoint ----------------

@pytest.mark.parametrize("state,after", [("RUNNING", "afterok:602"), ("PENDING", "afterok:602"),
                                         ("COMPLETED", None)])
def test_model_from_a_run_without_export_queues_one(state, after, fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "sft", "602", preflight=True)
    fake_slurm.set("sacct", sacct_row("602", state))
    path, dependency, export = chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir)
    assert dependency is None  # the export job's id comes at submit time (pipeline.submit)
    assert export.run_id == run.id and export.after == after and export.upstream_preflight
    assert export.export_id.startswith("export-") and path == export.target == f"{run.dir}/exports/{export.export_id}"


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "NODE_FAIL"])
def test_model_from_a_run_that_cannot_succeed(state, fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "sft", "603")
    fake_slurm.set("sacct", sacct_row("603", state))
    with pytest.raises(SpecError) as err:
        chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir)
    assert err.value.field == "--model" and f"ended {state.lower()}" in err.value.message


def test_model_from_an_unknown_run(fake_slurm):
    with pytest.raises(SpecError) as err:
        chain.model_from_run("run:sft-nope0", fake_slurm.runs_dir)
    assert err.value.field == "--model"


def _export_env(monkeypatch, tmp_path):
    """The export job's runtime: a venv path in a registry of the test's own."""
    registry = tmp_path / "runtimes.yaml"
    registry.write_text(f'verl:\n  "0.9.1": {{kind: venv, path: {tmp_path / "rt"}}}\n')
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", str(registry))
    monkeypatch.delenv("FORGE_IMAGE_VERL", raising=False)


def test_submit_model_from_a_running_run_queues_its_export_first(fake_slurm, site, monkeypatch,  # noqa: F811
                                                                 tmp_path):
    """sf submit GRPO --model run:SFT while SFT runs: sbatch 1 is SFT's export (afterok on
    SFT's job), sbatch 2 the GRPO run, waiting on afterok:<export job>; both recorded."""
    from launcher import runs

    _export_env(monkeypatch, tmp_path)
    sft = submitted_run(fake_slurm.runs_dir, "sft", "610")
    fake_slurm.set("sacct", sacct_row("610", "RUNNING"))
    fake_slurm.set("sbatch", "611\n")
    fake_slurm.set("sbatch", "612\n", from_call=2)
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--model", f"run:{sft.id}", "--json"])
    assert result.exit_code == 0, result.output
    out = __import__("json").loads(result.stdout)
    assert out["job_id"] == "612" and out["export_job"] == "611"
    [export] = sft.record()["exports"]
    assert export["job_id"] == "611" and export["after"] == "afterok:610" and export["checkpoint_at_run_time"]
    script = (sft.dir / f"{export['id']}.sbatch").read_text()
    assert "#SBATCH --dependency=afterok:610\n" in script
    assert f"sf_injob checkpoint {sft.dir}/checkpoints -" in script
    assert f'--local_dir "$SF_ACTOR_DIR" --target_dir {export["target"]}' in script
    grpo = runs.open_run(fake_slurm.runs_dir, out["run"])
    assert "#SBATCH --dependency=afterok:611,singleton\n" in (grpo.dir / "job.sbatch").read_text()
    assert f"actor_rollout_ref.model.path={export['target']}" in (grpo.dir / "overrides.txt").read_text()
    model_from = grpo.record()["model_from"]
    assert model_from["run"] == sft.id and model_from["export_job"] == "611"
    assert model_from["target"] == export["target"] and model_from["exported_by_chain"]
    assert [c.split()[0] for c in fake_slurm.calls("sbatch")] == ["sbatch", "sbatch"]


def test_dry_run_and_render_with_a_chain_export_submit_nothing(fake_slurm, site, monkeypatch, tmp_path):  # noqa: F811
    _export_env(monkeypatch, tmp_path)
    sft = submitted_run(fake_slurm.runs_dir, "sft", "620")
    fake_slurm.set("sacct", sacct_row("620", "PENDING"))
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--model", f"run:{sft.id}", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"would first queue an export of run {sft.id}'s last checkpoint, after afterok:620" in result.stderr
    result = CliRunner().invoke(main, ["render", GRPO, "--site", site(), "--model", f"run:{sft.id}",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.stderr.startswith("sf: error: --model: ")
    result = CliRunner().invoke(main, ["sweep", GRPO, "--site", site(), "--model", f"run:{sft.id}", "--dry-run",
                                       "--grid", "rollout_n=4,8"])
    assert result.exit_code == 0, result.output
    assert (f"would first queue an export of run {sft.id}'s last checkpoint, after afterok:620" in result.stderr
            and "every point would wait on afterok:<that export job>" in result.stderr)
    assert not fake_slurm.calls("sbatch") and not (tmp_path / "out").exists()
    assert not sft.record().get("exports")


def test_sweep_model_from_a_running_run_queues_one_export_every_point_waits_on(fake_slurm, site,  # noqa: F811
                                                                                monkeypatch, tmp_path):
    """sf sweep GRPO --model run:SFT while SFT runs: sbatch 1 is SFT's export (afterok on
    SFT's job), sbatch 2 the sweep's array with afterok:<export job> on its command line
    (joined with the script's own dependency); every point's model is the export's folder."""
    import json

    from launcher import runs

    _export_env(monkeypatch, tmp_path)
    sft = submitted_run(fake_slurm.runs_dir, "sft", "640")
    fake_slurm.set("sacct", sacct_row("640", "RUNNING"))
    fake_slurm.set("sbatch", "641\n")
    fake_slurm.set("sbatch", "642\n", from_call=2)
    result = CliRunner().invoke(main, ["sweep", GRPO, "--site", site(), "--model", f"run:{sft.id}", "--json",
                                       "--grid", "rollout_n=4,8", "--dependency", "afterany:7"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    [export] = sft.record()["exports"]
    assert export["job_id"] == "641" and export["after"] == "afterok:640"
    assert out["chain_exports"] == [{"run": sft.id, "export_id": export["id"], "target": export["target"],
                                     "after": "afterok:640", "job_id": "641"}]
    first, second = fake_slurm.calls("sbatch")
    assert first.endswith(f"{export['id']}.sbatch")
    assert " --dependency=afterany:7,afterok:641 " in f" {second} " and out["job_ids"] == ["642"]
    for point in out["points"]:
        member = runs.open_run(fake_slurm.runs_dir, point["run"])
        assert member.record()["model_from"]["export_job"] == "641"
        assert f"actor_rollout_ref.model.path={export['target']}" in (member.dir / "overrides.txt").read_text()
    sweep_dir = Path(out["sweep_dir"])
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert all(f"actor_rollout_ref.model.path={export['target']}" in p["overrides"] for p in manifest["points"])


def test_chain_refuses_what_would_never_export(fake_slurm, site, monkeypatch, tmp_path):  # noqa: F811
    """A completed run without a checkpoint, and a preflight run under a training run: one
    line naming --model, exit 2, nothing submitted."""
    _export_env(monkeypatch, tmp_path)
    done = submitted_run(fake_slurm.runs_dir, "sft", "630")
    fake_slurm.set("sacct", sacct_row("630", "COMPLETED"))
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--model", f"run:{done.id}"])
    assert result.exit_code == 2 and "completed without a checkpoint to export" in result.stderr, result.output
    pre = submitted_run(fake_slurm.runs_dir, "sft", "630", preflight=True)
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site(), "--model", f"run:{pre.id}"])
    assert result.exit_code == 2 and f"run {pre.id} is a preflight" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert not fake_slurm.calls("sbatch")


def test_hetjob_sweep_throttle_keeps_the_points_own_dependency(fake_slurm, site):  # noqa: F811
    """A hetjob sweep point held back by the throttle still waits for its --dependency and
    carries its singleton: sbatch's command line replaces the script's line, so sf joins them."""
    distill = str(paths.data_root() / "examples" / "distill")
    fake_slurm.set("sbatch", "700\n")
    fake_slurm.set("sbatch", "701\n", from_call=2)
    result = CliRunner().invoke(main, ["sweep", distill, "--site", site(), "--grid", "rollout_n=4,8",
                                       "--max-parallel", "1", "--dependency", "afterany:7"])
    assert result.exit_code == 0, result.output
    first, second = fake_slurm.calls("sbatch")
    assert "--dependency" not in first  # no throttle: the script's own line stands
    assert "--dependency=afterany:7,singleton,afterany:700 " in second, second


def test_a_preflight_export_is_never_the_model(fake_slurm, tmp_path):
    """RUN's newest export is a preflight (it merged nothing): --model run:RUN takes the real
    export before it."""
    run, target = _with_export(fake_slurm, tmp_path, done=True)
    run.update(exports=[*run.record()["exports"], {"id": "export-2", "target": str(tmp_path / "pre"), "job_id": "605",
                                                   "preflight": True}])
    assert chain.model_from_run(f"run:{run.id}", fake_slurm.runs_dir) == (target, None, None)


def test_hetjob_sweep_points_each_wait_on_the_export_and_the_throttle(fake_slurm, site, monkeypatch,  # noqa: F811
                                                                       tmp_path):
    """A two-pool (hetjob) sweep: sbatch 1 the export, then one sbatch per point, each with
    afterok:<export job> joined to its throttle (point 1 waits on point 0 with k=1)."""
    import json

    _export_env(monkeypatch, tmp_path)
    sft = submitted_run(fake_slurm.runs_dir, "sft", "650")
    fake_slurm.set("sacct", sacct_row("650", "RUNNING"))
    fake_slurm.set("sbatch", "651\n")
    fake_slurm.set("sbatch", "652\n", from_call=2)
    fake_slurm.set("sbatch", "653\n", from_call=3)
    distill = str(paths.data_root() / "examples" / "distill")
    result = CliRunner().invoke(main, ["sweep", distill, "--site", site(), "--model", f"run:{sft.id}", "--json",
                                       "--grid", "rollout_n=2,4", "--max-parallel", "1"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["mode"] == "hetjobs" and out["chain_exports"][0]["job_id"] == "651"
    export, first, second = fake_slurm.calls("sbatch")
    assert export.endswith(".sbatch") and "/exports/" not in export
    assert " --dependency=singleton,afterok:651 " in f" {first} "  # the script's own singleton kept
    assert " --dependency=singleton,afterany:652,afterok:651 " in f" {second} ", second
