"""A site's own batch script template on the real dev cluster: a 1+1 node hetjob submitted
through a site file whose templates_dir holds a train.sbatch.j2 that extends sf's. Slurm
reads the site's extra #SBATCH line of each het group, the prologue runs before sf's lines
and the epilogue after the supervisor (with its exit status), and the job (one Ray cluster
over both groups, the test driver on the head) completes as sf's own script does."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    cleanup,
    hetjob_experiment,
    sf,
    wait_event,
    wait_terminal,
)

from launcher.spec import paths  # noqa: E402

SITE_TEMPLATE = """{% extends "sf/train.sbatch.j2" %}
{% block extra_sbatch %}
#SBATCH --comment=sf-site-g{{ comp.het_group }}
{% endblock %}
{% block prologue %}
echo "prologue of {{ experiment }}" > {{ run_dir }}/site-prologue.txt
{% endblock %}
{% block epilogue %}
echo "rc=$rc" > "$SF_RUN_DIR/site-epilogue.txt"
{% endblock %}
"""


def test_a_site_template_runs_on_real_slurm(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "train.sbatch.j2").write_text(SITE_TEMPLATE)
    site = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    site["templates_dir"] = str(templates)
    site_file = tmp_path / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    exp = hetjob_experiment(tmp_path, "sitetpl")
    proc = sf("submit", exp, "--site", str(site_file), "--json",
              env={"SF_TEST_DRIVER": 'echo "test driver ran"; exit 0'})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run_dir, job = Path(out["run_dir"]), out["job_id"]
    try:
        script = (run_dir / "job.sbatch").read_text()
        assert "#SBATCH --comment=sf-site-g0\n" in script and "#SBATCH --comment=sf-site-g1\n" in script
        # each het group as Slurm holds it carries the site's line
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                               timeout=30).stdout
        comments = sorted(tok.split("=", 1)[1] for tok in shown.split() if tok.startswith("Comment="))
        assert comments == ["sf-site-g0", "sf-site-g1"], shown
        wait_event(run_dir, "all_joined", timeout=180)
        assert wait_terminal(job, timeout=240) == "COMPLETED"
        assert (run_dir / "site-prologue.txt").read_text() == "prologue of sitetpl\n"
        assert (run_dir / "site-epilogue.txt").read_text() == "rc=0\n"
    finally:
        cleanup(job)
