"""A site's own batch script template on the real dev cluster: a 1+1 node hetjob submitted
through a site file whose templates_dir holds a train.sbatch.j2 that extends sf's. Slurm
reads the site's extra #SBATCH line of each het group, the prologue runs before sf's lines
and the epilogue after the supervisor (with its exit status), and the job (one Ray cluster
over both groups, the test driver on the head) completes as sf's own script does."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    RUNS,
    cleanup,
    experiment,
    hetjob_experiment,
    sf,
    submit_preflight,
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


def site_with_template(tmp_path, template: str, **values) -> tuple[Path, Path]:
    """tmp_path/site.yaml: the dev site with templates_dir holding `template` (and **values
    set); (the site file, the template file)."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "train.sbatch.j2").write_text(template)
    site = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    site.update(templates_dir=str(templates), **values)
    site_file = tmp_path / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    return site_file, templates / "train.sbatch.j2"


def test_a_site_template_runs_on_real_slurm(tmp_path):
    site_file, _ = site_with_template(tmp_path, SITE_TEMPLATE)
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


# What a careful site writes: values as words of their own (or plain ones in quotes), a loop,
# a quoted here-document, sf's module lines kept, the epilogue reading sf's $rc
CAREFUL = """{% extends "sf/train.sbatch.j2" %}
{% block extra_sbatch %}
#SBATCH --comment=sf-site-{{ comp.pool }}
{% endblock %}
{% block prologue %}
ulimit -n 4096
for part in prologue of; do printf '%s ' "$part"; done > {{ run_dir }}/site-prologue.txt
cat >> {{ run_dir }}/site-prologue.txt <<'SITE'
{{ experiment }}
SITE
{% endblock %}
{% block module_loads %}
{{ super() }}
echo "site modules loaded for job ${SLURM_JOB_ID:-none}"
{% endblock %}
{% block epilogue %}
echo "rc=$rc" > "$SF_RUN_DIR/site-epilogue.txt"
{% endblock %}
"""


def test_a_careful_site_template_runs_a_real_preflight(tmp_path):
    site_file, _ = site_with_template(tmp_path, CAREFUL)
    exp = experiment(tmp_path, "sitecareful")
    out = submit_preflight(exp, "--site", str(site_file))  # --wait: the job has ended
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    assert out["preflight"]["ok"]
    run_dir = RUNS / out["run"]
    assert (run_dir / "site-prologue.txt").read_text() == "prologue of sitecareful\n"
    assert (run_dir / "site-epilogue.txt").read_text() == "rc=0\n"


EXTENDS = '{% extends "sf/train.sbatch.j2" %}\n'
# The tricks a site's template played on sf's guarantees while each block passed `bash -n`
# (issue 44): each as a site file someone wrote, with what sf says about it
TRICKS = {
    "abbreviated": ("extra_sbatch", "#SBATCH --requ", "sf sets --requeue itself (sbatch reads --requ as a prefix"),
    "function": ("prologue", "scontrol() { :; }", "may not define functions (scontrol)"),
    "alias": ("prologue", "alias wait=true", "may not call alias"),
    "exit": ("prologue", "exit 0", "may not call exit"),
    "exec": ("epilogue", "exec true", "may not call exec"),
    "quotes": ("prologue", "echo \"{{ overrides|join(' ') }}\"", "is printed inside double quotes"),
    "path": ("prologue", "export PATH=/tmp/bin:$PATH", "PATH part /tmp/bin: /tmp can be changed by another user"),
    "kill": ("prologue", "kill -9 0", "kill 0: a site block may stop only a process it started"),
}


def _leftovers(name: str) -> list[str]:
    """Runs under the tests' runs folder and jobs in Slurm whose names carry `name`."""
    runs = [str(p) for pattern in (f"{name}-*", f"*/{name}-*") for p in RUNS.glob(pattern)]
    queued = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, timeout=30).stdout
    return runs + [job for job in queued.split() if name in job]


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_site_template_trick_is_refused_and_nothing_submitted(tmp_path, trick):
    block, body, rule = TRICKS[trick]
    site_file, template = site_with_template(
        tmp_path, EXTENDS + "{% block " + block + " %}\n" + body + "\n{% endblock %}\n")
    name = f"sitetrick{trick}{uuid.uuid4().hex[:8]}"  # no run of an earlier pass shares it
    exp = experiment(tmp_path, name)
    for args in (("validate", exp), ("submit", exp, "--dry-run"), ("submit", exp, "--json")):
        proc = sf(*args, "--site", str(site_file))
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        said = [line for line in proc.stderr.splitlines() if str(template) in line]
        assert len(said) == 1 and rule in said[0], (args, proc.stderr)
        assert f"block {block}" in said[0] or trick == "abbreviated"
    assert _leftovers(name) == []


def test_a_site_env_setting_sfs_variables_is_refused(tmp_path):
    """env: {SF_MAX_REQUEUES: ...} in the site file changed how often the job requeued."""
    site_file, _ = site_with_template(tmp_path, EXTENDS, env={"SF_MAX_REQUEUES": "99"})
    name = f"siteenvsf{uuid.uuid4().hex[:8]}"
    exp = experiment(tmp_path, name)
    proc = sf("submit", exp, "--site", str(site_file), "--json")
    assert proc.returncode == 2 and "SF_MAX_REQUEUES is a variable sf's batch script sets" in proc.stderr
    assert _leftovers(name) == []
