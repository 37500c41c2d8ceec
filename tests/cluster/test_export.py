"""sf export and sf eval as real Slurm jobs on the dev cluster: verl's merger on a tiny
FSDP checkpoint made here, then an eval of the merged model attached to an SFT run.
The runtime is the export test venv (torch + transformers + verl), published in a
registry of the test's own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "unit" / "fixtures_extra"
VENV = Path(os.environ.get("SF_EXPORT_TEST_VENV", "/var/lib/sfdev/export-test-venv"))


def sf(*args, env):
    return subprocess.run([sys.executable, "-m", "launcher.cli.app", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)


@pytest.fixture
def env(slurm, tmp_path):
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no export test venv at {VENV}: run {FIXTURES}/make_export_venv.sh (needs the registries)")
    runs_dir = Path("/var/lib/sfdev/runs") / f"test-export-{os.getpid()}"  # seen by every node
    registry = tmp_path / "runtimes.yaml"
    registry.write_text(f'verl:\n  "0.9.1": {{kind: venv, path: {VENV}}}\n')
    e = {**os.environ, "SF_RUNS_DIR": str(runs_dir), "FORGE_RUNTIME_REGISTRY_FILE": str(registry),
         "SF_SITE": str(REPO / "site" / "dev.yaml")}
    e.pop("FORGE_IMAGE_VERL", None)
    yield e, runs_dir
    import shutil

    shutil.rmtree(runs_dir, ignore_errors=True)


def test_export_then_eval_as_slurm_jobs(env, slurm, tmp_path):
    e, runs_dir = env
    ckpt = runs_dir / "ckpt-src"
    subprocess.run([str(VENV / "bin" / "python"), str(FIXTURES / "make_checkpoint.py"), str(ckpt), "4"],
                   check=True, capture_output=True)
    proc = sf("export", "tiny", "--checkpoint", str(ckpt), "--checkpoint-format", "verl-fsdp", env=e)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split("submitted export job ")[1].split()[0]
    states = slurm.wait_terminal(job_id, timeout=300)
    from launcher import runs

    run = [r for r in runs.list_runs(runs_dir) if r.raw_record().get("task") == "export"][0]
    [exp] = run.record()["exports"]
    log = Path(exp["log"]).read_text() if Path(exp["log"]).exists() else ""
    assert states[job_id] == "COMPLETED", log[-3000:]
    assert run.raw_record()["job_ids"] == [job_id]
    check = subprocess.run([str(VENV / "bin" / "python"), str(FIXTURES / "check_merged.py"), exp["target"],
                            str(ckpt / "reference.pt")], capture_output=True, text=True)
    assert "ok 27 tensors" in check.stdout, check.stderr[-2000:]
    assert {p["phase"] for p in run.record()["phases"]} >= {"export_started", "export_ended"}

    val = runs_dir / "val.jsonl"
    val.write_text(json.dumps({"messages": [{"role": "user", "content": "what is one plus two ?"},
                                            {"role": "assistant", "content": "three"}]}) + "\n")
    sft = runs.create_run(runs_dir, "tiny-sft")
    sft.write_json("plan.json", {"method": "sft", "framework_version": "0.9.1",
                                 "overrides": [f"data.val_files={val}"]})
    proc = sf("eval", "tiny-sft", "--run-id", sft.id, "--model", exp["target"], "--max-new-tokens", "3", env=e)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split("submitted eval job ")[1].split()[0]
    states = slurm.wait_terminal(job_id, timeout=300)
    [ev] = sft.record()["evals"]
    assert states[job_id] == "COMPLETED", Path(ev["log"]).read_text()[-3000:]
    summary = json.loads(Path(ev["summary"]).read_text())
    assert summary["samples"] == 1 and summary["val_loss"] > 0
    phases = [p for p in sft.record()["phases"] if p["phase"] in ("eval_started", "eval_ended")]
    assert [p["phase"] for p in phases] == ["eval_started", "eval_ended"] and phases[-1]["rc"] == "0"


def test_chained_export_merges_the_checkpoint_its_run_saves_later(env, slurm, monkeypatch):
    """The export `sf submit --model run:RUN` queues for a RUN that has saved nothing yet
    (chain.export_request sent by pipeline.submit, as sf submit sends it): it waits on
    afterok:<RUN's job>, then looks up the checkpoint RUN saved meanwhile and merges it
    with verl's merger into the folder fixed at submit time."""
    from launcher import runs
    from launcher.spec.site import load_site
    from launcher.submit import chain, pipeline

    e, runs_dir = env
    for key in ("SF_RUNS_DIR", "FORGE_RUNTIME_REGISTRY_FILE", "SF_SITE"):
        monkeypatch.setenv(key, e[key])
    monkeypatch.delenv("FORGE_IMAGE_VERL", raising=False)
    train = runs.create_run(runs_dir, "tiny-sft")
    train.write_json("plan.json", {"method": "sft", "framework_version": "0.9.1", "overrides": []})
    # the training job: a real job that saves a verl FSDP checkpoint into the run's checkpoints/
    save = f"sleep 8; {VENV}/bin/python {FIXTURES}/make_checkpoint.py {train.checkpoints_dir} 3"
    job = slurm.sbatch("-p", "train", "-t", "5", "-o", f"{train.dir}/logs/train-%j.out", "--wrap", save)
    train.set_job_ids([job])
    train.add_state("submitted", job_id=job)
    try:
        model, dependency, export = chain.model_from_run(f"run:{train.id}", runs_dir)
        assert dependency is None and export.after == f"afterok:{job}" and model == export.target
        assert not (train.checkpoints_dir / "latest_checkpointed_iteration.txt").exists()  # nothing saved yet
        sent = pipeline.submit(chain.export_request(export, load_site(None), preflight=False))
        info = slurm.show_job(sent.job_id)
        assert info["JobState"] == "PENDING" and info["Dependency"].startswith(f"afterok:{job}"), info
        assert slurm.wait_terminal(job, timeout=180)[job] == "COMPLETED"
        states = slurm.wait_terminal(sent.job_id, timeout=300)
        [entry] = train.record()["exports"]
        log = Path(entry["log"]).read_text() if Path(entry["log"]).exists() else ""
        assert states[sent.job_id] == "COMPLETED", log[-3000:]
        assert entry["target"] == export.target and entry["checkpoint_at_run_time"]
        assert f"global_step_3/actor -> {export.target}" in log.replace('"', "")
        check = subprocess.run([str(VENV / "bin" / "python"), str(FIXTURES / "check_merged.py"), export.target,
                                str(train.checkpoints_dir / "reference.pt")], capture_output=True, text=True)
        assert "ok 27 tensors" in check.stdout, check.stderr[-2000:]
        # the next --model run:RUN takes that model, no new export
        assert chain.model_from_run(f"run:{train.id}", runs_dir) == (export.target, None, None)
    finally:
        slurm.cancel(job)
