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
    return subprocess.run([sys.executable, "-m", "launcher.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=os.environ.copy())


def test_submitted_script_is_the_dry_run_modulo_run_id(slurm):
    from launcher import pipeline, runs
    from launcher.site import load_site

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
        placeholder = pipeline.placeholder_run_dir(load_site(None).runs_dir, "grpo")
        assert placeholder in dry.stdout and out["run"] in stored
        assert stored == dry.stdout.replace(placeholder, out["run_dir"])
        run = runs.open_run(Path(out["run_dir"]).parent, out["run"])
        assert run.read_text("job.sbatch") == stored
