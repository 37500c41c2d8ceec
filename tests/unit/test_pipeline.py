"""launcher.submit.pipeline: one prepared request, compiled once; the dry run is what is sent.
Against the fake Slurm commands of tests/unit/conftest.py."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from launcher import runs
from launcher.cli import cmd_run
from launcher.cli.app import main
from launcher.spec import paths
from launcher.submit import pipeline

GRPO = str(paths.data_root() / "examples" / "grpo")
RUN_ID = re.compile(r"grpo-[a-z2-7]{5}")


@pytest.fixture
def site(tmp_path, fake_slurm, monkeypatch):
    data = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    data["runs_dir"] = str(fake_slurm.runs_dir)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")
    return str(path)


def _sf(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_submitted_script_is_the_dry_runs_but_for_the_run_id(site, fake_slurm):
    fake_slurm.set("sbatch", "4242\n")
    for extra in ([], ["--preflight"], ["--set", "rollout_n=8"]):
        dry = _sf("submit", GRPO, "--site", site, "--dry-run", *extra).stdout
        placeholder = pipeline.placeholder_run_dir(str(fake_slurm.runs_dir), "grpo")
        assert placeholder in dry and not RUN_ID.search(dry)
        out = json.loads(_sf("submit", GRPO, "--site", site, "--json", *extra).stdout)
        sent = fake_slurm.submitted_script()
        assert out["job_id"] == "4242" and out["run"] in sent
        # the job is named after the run: sf-<run id> (--dependency=singleton)
        assert f"--job-name=sf-{out['run']}" in sent and "--dependency=singleton" in sent
        assert sent == dry.replace(placeholder, out["run_dir"]).replace(Path(placeholder).name, out["run"])
        run = runs.open_run(fake_slurm.runs_dir, out["run"])
        assert run.read_text("job.sbatch") == sent
        plan = run.read_json("plan.json")
        assert plan["run_dir"] == out["run_dir"] and plan["checkpoint_dir"] == f"{out['run_dir']}/checkpoints"
        assert f"trainer.default_local_dir={out['run_dir']}/checkpoints" in plan["overrides"]
        assert [h["state"] for h in run.record()["history"]] == ["created", "submitting", "submitted"]


def test_one_compile_per_command(site, fake_slurm, monkeypatch):
    from launcher.compile import compiler as compile_mod

    calls = []
    real = compile_mod.compile_plan

    def counting(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "compile_plan", counting)  # its one caller (sf sweep's points too)
    fake_slurm.set("sbatch", "77\n")
    _sf("submit", GRPO, "--site", site)
    assert len(calls) == 1 and calls[0].endswith("-XXXXX")
    calls.clear()
    _sf("sweep", GRPO, "--site", site, "--grid", "rollout_n=4,8")
    assert len(calls) == 2  # one per point


def test_render_writes_the_request_bound_to_the_folder(site, tmp_path):
    out = tmp_path / "out"
    _sf("render", GRPO, "--site", site, "-o", str(out))
    script = (out / "job.sbatch").read_text()
    assert f"--output={out}/logs/slurm-%j.out" in script and "XXXXX" not in script
    assert json.loads((out / "plan.json").read_text())["run_dir"] == str(out)


def test_failed_sbatch_records_submit_failed(site, fake_slurm):
    fake_slurm.set("sbatch", "", "sbatch: error: invalid partition\n", 1)
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site])
    assert result.exit_code == 1 and "invalid partition" in result.output
    [run] = runs.list_runs(fake_slurm.runs_dir)
    rec = run.record()
    assert rec["state"] == "submit_failed" and "invalid partition" in rec["history"][-1]["error"]


def test_bad_spec_leaves_nothing_behind(site, fake_slurm):
    result = CliRunner().invoke(main, ["submit", GRPO, "--site", site, "--set", "rollout_n=0"])
    assert result.exit_code == 2 and "rollout_n" in result.output
    assert not fake_slurm.runs_dir.exists() or runs.list_runs(fake_slurm.runs_dir) == []
    assert fake_slurm.calls("sbatch") == []


# --- sf submit --wait: the monitor's poll, spaced out -----------------------------------------

def test_poll_delay_grows_while_nothing_changes_and_resets_on_change():
    delay, seen = cmd_run.POLL_FIRST_S, []
    for _ in range(12):
        delay = cmd_run.next_poll_delay(delay, changed=False)
        seen.append(delay)
    assert seen[0] == cmd_run.POLL_FIRST_S * cmd_run.POLL_GROWTH
    assert seen == sorted(seen) and seen[-1] == cmd_run.POLL_MAX_S
    assert cmd_run.next_poll_delay(cmd_run.POLL_MAX_S, changed=True) == cmd_run.POLL_FIRST_S


def _sacct_row(job_id, state):
    return f"{job_id}|sf-grpo|{state}|0:0|2026-11-30T10:00:00|Unknown|00:00:05|dev1|None|2026-11-30T09:59:59|00:30:00\n"


def test_wait_follows_with_one_sacct_per_poll_and_backs_off(fake_slurm):
    run = runs.create_run(fake_slurm.runs_dir, "grpo")
    run.set_job_ids(["55"])
    run.add_state("submitted", job_id="55")
    fake_slurm.set("sacct", _sacct_row("55", "PENDING"))
    fake_slurm.set("sacct", _sacct_row("55", "RUNNING"), from_call=2)
    fake_slurm.set("sacct", _sacct_row("55", "COMPLETED"), from_call=6)
    slept, lines = [], []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 2:
            runs.record_phase(run.dir, "all_joined", seconds=1.5)

    rc = cmd_run.wait_for_job(run, "55", preflight=False, as_json=False, echo=lines.append, sleep=sleep)
    assert rc == 0
    assert len(fake_slurm.calls("sacct")) == 6 and fake_slurm.calls("scontrol") == []
    assert [line.split()[-1] for line in lines if "job 55:" in line] == ["PENDING", "RUNNING", "COMPLETED"]
    assert any("all_joined" in line and "seconds=1.5" in line for line in lines)
    # a change (new state, new phase) polls again soon; quiet polls back off
    assert slept == [1.0, 1.0, 1.0, 1.5, 2.25]
    assert run.record()["state"] == "completed"  # the monitor wrote what it saw


def test_wait_rides_out_a_record_it_cannot_read(fake_slurm):
    """A poll that cannot read the run's record leaves the run out (seen on the GPU machine:
    `sf submit --wait` died with IndexError after the job had completed); the wait polls
    again instead."""
    run = runs.create_run(fake_slurm.runs_dir, "grpo")
    run.set_job_ids(["56"])
    run.add_state("submitted", job_id="56")
    fake_slurm.set("sacct", _sacct_row("56", "COMPLETED"))
    good = run.path("record.json").read_text()
    run.path("record.json").write_text("{torn")
    slept, lines = [], []

    def sleep(seconds):
        slept.append(seconds)
        run.path("record.json").write_text(good)

    rc = cmd_run.wait_for_job(run, "56", preflight=False, as_json=False, echo=lines.append, sleep=sleep)
    assert rc == 0 and slept[0] == cmd_run.POLL_FIRST_S
    assert [line.split()[-1] for line in lines if "job 56:" in line] == ["COMPLETED"]


def test_hetjob_sweep_sends_what_its_dry_run_shows(site, fake_slurm):
    """A multi-pool sweep is one hetjob per point: point 0's submitted script is the dry
    run's but for the run id, --preflight included."""
    distill = str(paths.data_root() / "examples" / "distill")
    args = ["sweep", distill, "--site", site, "--grid", "rollout_n=4,8", "--max-parallel", "1", "--preflight"]
    dry = _sf(*args, "--dry-run").stdout
    assert "--preflight" in dry
    fake_slurm.set("sbatch", "600\n")
    out = json.loads(_sf(*args, "--json").stdout)
    assert out["mode"] == "hetjobs" and len(out["points"]) == 2
    point0 = runs.open_run(fake_slurm.runs_dir, out["points"][0]["run"])
    placeholder = pipeline.placeholder_run_dir(str(fake_slurm.runs_dir), "distill")
    assert point0.read_text("job.sbatch") == dry.replace(placeholder, str(point0.dir)).replace(
        Path(placeholder).name, point0.id)
    assert len(fake_slurm.calls("sbatch")) == 2


def test_array_sweep_sends_what_its_dry_run_shows(site, fake_slurm):
    args = ["sweep", GRPO, "--site", site, "--grid", "rollout_n=4,8", "--max-parallel", "1"]
    dry = _sf(*args, "--dry-run").stdout
    fake_slurm.set("sbatch", "700\n")
    out = json.loads(_sf(*args, "--json").stdout)
    assert out["mode"] == "array"
    placeholder = pipeline.placeholder_run_dir(str(fake_slurm.runs_dir), "grpo")
    expected = dry.replace(placeholder, out["sweep_dir"]).replace(Path(placeholder).name.lower(), out["sweep"])
    assert fake_slurm.submitted_script() == expected


def test_every_command_finds_runs_in_one_order(site, fake_slurm, tmp_path, monkeypatch):
    """--runs-dir, then $SF_RUNS_DIR, then the site's runs_dir: where `sf submit` writes is
    where `sf list` and `sf status` read (the site's runs_dir is not fake_slurm's here)."""
    data = yaml.safe_load(Path(site).read_text())
    data["runs_dir"] = str(tmp_path / "site-runs")
    Path(site).write_text(yaml.safe_dump(data))
    fake_slurm.set("sbatch", "91\n")
    _sf("submit", GRPO, "--site", site)  # $SF_RUNS_DIR (fake_slurm.runs_dir) over the site's
    [run] = runs.list_runs(fake_slurm.runs_dir)
    assert not (tmp_path / "site-runs").exists()
    listed = json.loads(_sf("list", "--json", "--site", site).output)
    assert listed["runs_dir"] == str(fake_slurm.runs_dir) and [r["id"] for r in listed["runs"]] == [run.id]
    flag_dir = tmp_path / "flag-runs"
    _sf("submit", GRPO, "--site", site, "--runs-dir", str(flag_dir))  # --runs-dir over both
    [flagged] = runs.list_runs(flag_dir)
    assert [r.id for r in runs.list_runs(fake_slurm.runs_dir)] == [run.id]
    monkeypatch.delenv("SF_RUNS_DIR")
    _sf("submit", GRPO, "--site", site)  # neither: the site's runs_dir
    [sited] = runs.list_runs(tmp_path / "site-runs")
    assert _sf("status", sited.id, "--site", site).exit_code == 0
    assert flagged.id in _sf("status", flagged.id, "--runs-dir", str(flag_dir)).output
