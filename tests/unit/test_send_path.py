"""One send path (issue 46): every job sf sends (a run, a sweep's array or points, an export,
an eval) goes through launcher.submit.pipeline.submit, the one caller of `slurm.sbatch`; its
send-time dependency comes from the Plan (pipeline.own_dependency), never read back from a
rendered script. Read from the source with `ast`, so a second send path fails here the day it
appears."""

from __future__ import annotations

import ast
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.render.script import render_script
from launcher.submit import pipeline
from launcher.submit.request import Rendered, Request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import SITE, VENV, directives, het_plan, make_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "launcher"
THE_SEND_PATH = "launcher/submit/pipeline.py"
DEFINED_IN = "launcher/slurm.py"
# modules that call sbatch besides the pipeline, each with its reason; none today: sf export and
# sf eval build Requests (launcher/submit/export.py) that pipeline.submit sends, sf sweep sends
# written requests (launcher/submit/sweep_send.py) through it too
SENT_ELSEWHERE: dict[str, str] = {}


def sbatch_calls(tree: ast.AST) -> list[int]:
    """The lines of a module that call sbatch: `slurm.sbatch(...)`, `sbatch(...)` imported
    from launcher.slurm, or that import it by name."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "launcher.slurm" and \
                any(a.name == "sbatch" for a in node.names):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "sbatch") or
                (isinstance(node.func, ast.Name) and node.func.id == "sbatch")):
            lines.append(node.lineno)
    return lines


def test_only_the_pipeline_calls_sbatch():
    found = {}
    for path in sorted(LAUNCHER.rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name in (DEFINED_IN, THE_SEND_PATH) or name in SENT_ELSEWHERE:
            continue
        lines = sbatch_calls(ast.parse(path.read_text(), name))
        if lines:
            found[name] = lines
    assert found == {}, ("send through launcher.submit.pipeline.submit (a Request; a script written before: "
                         f"request.written_request), not slurm.sbatch: {found}")
    assert sbatch_calls(ast.parse((ROOT / THE_SEND_PATH).read_text())), "the pipeline sends"


def test_the_scan_sees_a_second_send_path():
    """The scan above finds what it looks for (sweep_send written the old way)."""
    old = ("from launcher import slurm\nfrom launcher.slurm import sbatch\n"
           "job = slurm.sbatch(path, extra_args=[dep])\nsbatch(path)\n")
    assert sbatch_calls(ast.parse(old)) == [2, 3, 4]


@pytest.mark.parametrize("dependency", [None, "afterok:5", "afterany:7,singleton"])
def test_the_dependency_read_from_the_plan_is_the_one_its_script_holds(dependency):
    """The send reads a written script's own --dependency from its Plan: for a point's
    hetjob script, a run's and an array's, it is the job-wide line render wrote."""
    array = {"size": 2, "max_parallel": 1, "sweep_dir": "/runs/s", "sweep_id": "s"}
    for plan, arr in ((het_plan(), None), (make_plan(), None), (make_plan(), array)):
        plan = replace(plan, slurm=replace(plan.slurm, dependency=dependency))
        first = directives(render_script(plan, SITE, VENV, array=arr))[0]
        lines = [d.split("=", 1)[1] for d in first if d.startswith("--dependency=")]
        assert pipeline.own_dependency(dependency, array=arr is not None) == (lines[0] if lines else None)


def _written(**kw) -> Request:
    return Request(experiment="grpo", runs_dir="/runs", written="job.sbatch",
                   render=lambda _run_dir, _after=None: Rendered(files={}, script_name="job.sbatch"), **kw)


def test_a_written_script_waits_on_its_own_dependency_and_the_send_time_one():
    """sbatch's command-line --dependency replaces the script's, so a send-time wait (a
    throttle, a chained export) carries the script's own too; without one the script's
    line stands (no --dependency on the command line)."""
    assert pipeline.sbatch_args(_written(own_dependency="afterok:5,singleton", after="afterany:10")) == [
        "--dependency=afterok:5,singleton,afterany:10"]
    assert pipeline.sbatch_args(_written(own_dependency="singleton")) == []
    assert pipeline.sbatch_args(_written(after="afterok:9", sbatch_args=("--array=1,4%2",))) == [
        "--array=1,4%2", "--dependency=afterok:9"]
    # a request rendered when sent has its wait in its script (Plan.with_dependency), not here
    rendered = Request(experiment="grpo", runs_dir="/runs", after="afterok:9",
                       render=lambda _run_dir, _after=None: Rendered(files={}, script_name="job.sbatch"))
    assert pipeline.sbatch_args(rendered) == []
