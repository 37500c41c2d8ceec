"""The dry run is what is submitted: `sf submit --dry-run` of examples/grpo, then a real
submission, whose script as Slurm stored it (`scontrol write batch_script`) must be the dry
run's with the run id filled in. The job is cancelled at once: only the script matters."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sf(*args) -> subprocess.CompletedProcess:
    # this interpreter's launcher (PYTHONPATH may point at a worktree), not a console script's
    return subprocess.run([sys.executable, "-m", "launcher.cli.app", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=os.environ.copy())


def test_submitted_script_is_the_dry_run_modulo_run_id(slurm):
    from launcher import runs
    from launcher.submit import pipeline

    for extra in ([], ["--preflight", "--set", "rollout_n=4"]):
        dry = sf("submit", "examples/grpo", "--dry-run", *extra)
        assert dry.returncode == 0, dry.stderr
        real = sf("submit", "examples/grpo", "--json", *extra)
        assert real.returncode == 0, real.stderr
        out = json.loads(real.stdout)
        try:
            stored = slurm.run("scontrol", "write", "batch_script", out["job_id"], "-")
        finally:
            slurm.cancel(out["job_id"])
        placeholder = pipeline.placeholder_run_dir(os.environ["SF_RUNS_DIR"], "grpo")
        assert placeholder in dry.stdout and out["run"] in stored
        # modulo the run id: in the run dir and in the job's name (sf-<run id>, its singleton)
        placeholder_id = Path(placeholder).name
        assert stored == dry.stdout.replace(placeholder_id, out["run"])
        run = runs.open_run(Path(out["run_dir"]).parent, out["run"])
        assert run.read_text("job.sbatch") == stored


def test_sbatch_variables_do_not_override_the_script(slurm, monkeypatch):
    """SBATCH_PARTITION in the user's environment would move the job to another partition;
    sf's sbatch call leaves it out, so the job lands where its #SBATCH line says."""
    monkeypatch.setenv("SBATCH_PARTITION", "teach")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "7")
    real = sf("submit", "examples/grpo", "--json")
    assert real.returncode == 0, real.stderr
    assert "left out of sbatch's environment: SBATCH_PARTITION, SBATCH_TIMELIMIT" in real.stderr
    out = json.loads(real.stdout)
    try:
        job = slurm.show_job(out["job_id"])
    finally:
        slurm.cancel(out["job_id"])
    script = (Path(out["run_dir"]) / "job.sbatch").read_text()
    limit = next(line.split("=", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH --time="))
    assert "#SBATCH --partition=train" in script and limit != "7"
    assert job["Partition"] == "train" and job["TimeLimit"] == limit, job


def test_login_paths_reach_sbatch_but_not_the_job():
    """sbatch runs with the login node's LD_LIBRARY_PATH (a module-loaded or unpacked Slurm
    needs it to start at all); the job's script unsets the login paths before anything runs,
    so the driver sees the runtime's Python and libraries, not the login node's."""
    driver = 'echo "LD=${LD_LIBRARY_PATH:-} PP=${PYTHONPATH:-} VE=${VIRTUAL_ENV:-}" >"$SF_RUN_DIR/env-seen.txt"'
    login = {"LD_LIBRARY_PATH": "/login-only/lib", "VIRTUAL_ENV": "/login-only/venv",
             "PYTHONPATH": f"{os.environ.get('PYTHONPATH', str(REPO))}:/login-only/py"}
    real = subprocess.run([sys.executable, "-m", "launcher.cli.app", "submit", "examples/grpo", "--profile", "fake:1x4",
                           "--wait", "--json"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **login, "SF_TEST_DRIVER": driver})
    assert real.returncode == 0, real.stderr
    assert "left out of the job's environment: PYTHONPATH, LD_LIBRARY_PATH, VIRTUAL_ENV" in real.stderr
    run = json.loads(real.stdout[real.stdout.index("{"):])["run"]
    seen = (Path(os.environ["SF_RUNS_DIR"]) / run / "env-seen.txt").read_text()
    assert seen.startswith("LD=") and "/login-only" not in seen, seen
