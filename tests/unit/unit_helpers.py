"""What several unit test files share, in one place (tests never import each other):
the dev site and a venv runtime, Plans to render, a script's #SBATCH lines, sacct rows and
run records for the fake Slurm, shell payloads, a job's SF_JOB. Fixtures live in conftest.py."""
from __future__ import annotations

from launcher import runs
from launcher.plan import Plan, Pool, SlurmOptions
from launcher.runtime import Runtime
from launcher.spec import paths
from launcher.spec.site import load_site

SITE = load_site(str(paths.site_dir() / "dev.yaml"))
VENV = Runtime(framework="verl", version="0.9.1", kind="venv", path="/opt/rt/verl-0.9.1",
               python="/opt/rt/verl-0.9.1/bin/python")

# What must stay inert wherever a value reaches a shell or an #SBATCH line ({canary} is a
# file the payload would create if it ran).
PAYLOADS = [
    "$(touch {canary})",
    "`touch {canary}`",
    "x; touch {canary}",
    "x\n#SBATCH --partition=evil\ntouch {canary}",
    "x' ; touch {canary}; echo '",
    'x" ; touch {canary}; echo "',
    "x\r\n#SBATCH --qos=evil",
    "${{IFS}}touch${{IFS}}{canary}",
    "x && touch {canary} #",
]


def make_plan(**kw) -> Plan:
    base = dict(experiment="grpo", method="grpo", framework="verl", framework_version="0.9.1",
                config_name="ppo_trainer", launcher="ray", entry=("python3", "-m", "verl.trainer.main_ppo"),
                overrides=("algorithm.adv_estimator=grpo", "trainer.nnodes=2"),
                pools=(Pool("train", "fake", 2, 4, 0, ("actor", "rollout")),),
                run_dir="/runs/grpo-abcde", checkpoint_dir="/runs/grpo-abcde/checkpoints",
                slurm=SlurmOptions(time="00:20:00", signal_lead_s=60, max_requeues=2))
    base.update(kw)
    return Plan(**base)


def het_plan(**kw) -> Plan:
    return make_plan(pools=(Pool("train", "fake", 2, 4, 0, ("actor",)),
                            Pool("teach", "fake-teach", 1, 4, 1, ("teacher",))), **kw)


def directives(script: str) -> list[list[str]]:
    """#SBATCH lines before the first command, split into het components."""
    comps = [[]]
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            value = line[len("#SBATCH "):]
            if value == "hetjob":
                comps.append([])
            else:
                comps[-1].append(value)
    return comps


def sacct_row(job_id, state, nodes="dev1", reason="None", exit_code="0:0", elapsed="00:00:05", name="job"):
    """One line of `sacct --parsable2` in the fields launcher.slurm asks for."""
    return (f"{job_id}|{name}|{state}|{exit_code}|2026-11-29T11:00:00|Unknown|{elapsed}|{nodes}|{reason}"
            "|2026-11-29T10:59:59|00:10:00\n")


def submitted_run(root, name, *job_ids, **fields):
    """A run record as `sf submit` leaves it: state submitted, these Slurm job ids."""
    run = runs.create_run(root, name, **fields)
    run.add_state("submitted")
    run.set_job_ids(list(job_ids))
    return run


def job_json(*pools, method: str = "grpo") -> str:
    """SF_JOB of a job with these pools (one node each), as the supervisor writes it; the
    verl pools of `method`'s recipe (Plan.verl_pools) place its roles."""
    from launcher.compile import catalog
    from launcher.injob.contract import Job, RaySettings

    ray = RaySettings("loopback", "127.0.0", None, (20000, 30000), "/tmp", 60.0, 1)
    hosts = {p.name: (f"dev{i + 1}",) for i, p in enumerate(pools)}
    return Job(run_dir="/r", job_id="1", leader="1", launcher="ray", config_name="ppo_trainer", pools=tuple(pools),
               hosts=hosts, spares={p.name: () for p in pools}, head_node="dev1", head="127.0.0.11:20000",
               ray=ray, checkpoint_dir="/r/checkpoints",
               verl_pools=dict(catalog.get_method("0.9.1", method).verl_pools)).to_json()


# --- the CLI as a user runs it (click's CliRunner), for the bad-input tests ---------------
GOOD_SPEC = """method: verl/grpo
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {files: /d/train.parquet}
  validation: {files: /d/test.parquet}
"""


def sf_cli(*args):
    """`sf ARGS` through the real CLI, in this process (stderr apart: click 8.2)."""
    from click.testing import CliRunner

    from launcher.cli.app import main

    return CliRunner().invoke(main, [str(a) for a in args])


def refused(result, *needles, code=2):
    """Exit `code`, one `sf: error:` line holding every needle, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.startswith("sf: error: ")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.output
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# --- a site's own train.sbatch.j2 (test_site_templates, test_site_template_tricks) ------------
EXTENDS = '{% extends "sf/train.sbatch.j2" %}\n'


def site_with(tmp_path, template: str | None):
    """The dev site with its templates_dir in tmp_path, holding ``template`` when given."""
    from dataclasses import replace

    folder = tmp_path / "site-templates"
    folder.mkdir(exist_ok=True)
    if template is not None:
        (folder / "train.sbatch.j2").write_text(template)
    return replace(SITE, templates_dir=str(folder))


def render_with(tmp_path, template, plan=None, site=None):
    from launcher.render.script import render_script

    return render_script(plan or make_plan(), site_with(tmp_path, template) if site is None else site, VENV)
