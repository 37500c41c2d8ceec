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
    return subprocess.run([sys.executable, "-m", "launcher.cli", *args], capture_output=True, text=True,
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
