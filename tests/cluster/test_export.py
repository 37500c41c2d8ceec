"""sf export and sf eval as real Slurm jobs on the dev cluster: verl's merger on a tiny
FSDP checkpoint made here, then an eval of the merged model attached to an SFT run.
The runtime is the export test venv (torch + transformers + verl), published in a
registry of the test's own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
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


def _sf_from_source_folder(tmp_path: Path) -> Path:
    """A Python that has sf's dependencies but not sf: sf runs from its source folder through
    PYTHONPATH, as the GPU kit runs it (the test venv's own sf is an editable install, which
    a job would find whatever PYTHONPATH says)."""
    venv = tmp_path / "src-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = venv.glob("lib/python3*/site-packages")
    # a path line of a .pth adds the folder, not the .pth files in it (sf's editable finder)
    (site / "sf-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = venv / "bin" / "python"
    alone = subprocess.run([str(python), "-c", "import launcher"], capture_output=True, cwd=tmp_path)
    assert alone.returncode != 0, "the source-folder python must not find sf without PYTHONPATH"
    return python


def test_export_and_eval_record_their_events_from_a_source_folder(slurm, tmp_path):
    """sf from a source folder (PYTHONPATH) and a runtime whose env resets PYTHONPATH: the
    export and eval jobs still record their phases (they printed "No module named 'launcher'"
    twice and recorded none), and the export's preflight report is written by sf's job side."""
    from launcher import runs

    python = _sf_from_source_folder(tmp_path)
    runs_dir = Path("/var/lib/sfdev/runs") / f"test-export-src-{os.getpid()}"  # seen by every node
    registry = tmp_path / "runtimes.yaml"
    registry.write_text('verl:\n  "0.9.1": {kind: venv, path: /var/lib/sfdev/runtimes/verl-0.9.1, '
                        'env: {PYTHONPATH: /var/lib/sfdev/runtimes/verl-0.9.1/none}}\n')
    e = {**os.environ, "SF_RUNS_DIR": str(runs_dir), "FORGE_RUNTIME_REGISTRY_FILE": str(registry),
         "SF_SITE": str(REPO / "site" / "dev.yaml"), "PYTHONPATH": str(REPO)}
    e.pop("FORGE_IMAGE_VERL", None)

    def sf_src(*args):  # cwd outside the source folder: only PYTHONPATH finds sf
        return subprocess.run([str(python), "-m", "launcher.cli.app", *args], capture_output=True, text=True,
                              env=e, timeout=240, cwd=tmp_path)

    def log_of(entry):
        path = Path(entry["log"])
        return path.read_text() if path.exists() else ""

    try:
        actor = runs_dir / "ckpt" / "global_step_4" / "actor"
        (actor / "huggingface").mkdir(parents=True)
        (actor / "huggingface" / "config.json").write_text("{}")
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": 1}))
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"x")
        (runs_dir / "ckpt" / "latest_checkpointed_iteration.txt").write_text("4\n")
        proc = sf_src("export", "tiny", "--checkpoint", str(runs_dir / "ckpt"), "--checkpoint-format", "verl-fsdp",
                      "--preflight")
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split("submitted export preflight job ")[1].split()[0]
        states = slurm.wait_terminal(job_id, timeout=900)
        [run] = [r for r in runs.list_runs(runs_dir) if r.raw_record().get("task") == "export"]
        [exp] = run.record()["exports"]
        log = log_of(exp)
        assert "No module named 'launcher'" not in log, log[-3000:]
        assert states[job_id] == "COMPLETED", log[-3000:]
        assert json.loads(Path(exp["report"]).read_text())["failures"] == []
        ended = [p for p in run.record()["phases"] if p["phase"] in ("export_started", "export_ended")]
        assert [p["phase"] for p in ended] == ["export_started", "export_ended"] and ended[-1]["rc"] == "0", log

        val = runs_dir / "val.jsonl"
        val.write_text(json.dumps({"messages": [{"role": "user", "content": "one plus two?"},
                                                {"role": "assistant", "content": "three"}]}) + "\n")
        model = runs_dir / "model"
        model.mkdir()
        (model / "config.json").write_text("{}")  # no weights: the eval itself fails, its events do not
        sft = runs.create_run(runs_dir, "tiny-sft")
        sft.write_json("plan.json", {"method": "sft", "framework_version": "0.9.1",
                                     "overrides": [f"data.val_files={val}"]})
        proc = sf_src("eval", "tiny-sft", "--run-id", sft.id, "--model", str(model), "--max-new-tokens", "3")
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split("submitted eval job ")[1].split()[0]
        slurm.wait_terminal(job_id, timeout=900)
        [ev] = sft.record()["evals"]
        log = log_of(ev)
        assert "No module named 'launcher'" not in log, log[-3000:]
        phases = [p for p in sft.record()["phases"] if p["phase"] in ("eval_started", "eval_ended")]
        assert [p["phase"] for p in phases] == ["eval_started", "eval_ended"], log[-3000:]
        assert phases[0]["eval_id"] == ev["id"] and phases[-1]["eval_id"] == ev["id"]
    finally:
        import shutil

        shutil.rmtree(runs_dir, ignore_errors=True)
