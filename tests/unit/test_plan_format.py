"""The job side reads only a plan.json of this sf's plan format (launcher.plan.PLAN_FORMAT), and
a plan.json it cannot run from ends the job with one line in the run's reason and events,
never a traceback: a run requeued after sf was upgraded in place, a damaged file."""
from __future__ import annotations

import dataclasses
import json

import pytest
from unit_helpers import make_plan

from launcher import runs, states
from launcher.injob import supervise
from launcher.injob.contract import Contract, UnreadableContract, shown_digest
from launcher.plan import PLAN_FORMAT
from launcher.render.script import plan_json
from launcher.runtime import Runtime
from launcher.spec import paths
from launcher.spec.site import load_site

RUNTIME = Runtime(framework="verl", version="0.9.1", kind="venv", path="/opt/verl-0.9.1",
                  python="/opt/verl-0.9.1/bin/python")


def new_run(tmp_path) -> runs.Run:
    return runs.create_run(tmp_path / "runs", "fmt")


def written_plan(run: runs.Run) -> dict:
    plan = dataclasses.replace(make_plan(), run_dir=str(run.dir))
    text = plan_json(plan, load_site(str(paths.site_dir() / "dev.yaml")), RUNTIME)
    return json.loads(text)


def test_render_states_the_plan_format_and_the_job_reads_it(tmp_path):
    run = new_run(tmp_path)
    data = written_plan(run)
    assert data["plan_format"] == PLAN_FORMAT
    run.write_json("plan.json", data)
    assert Contract.read(str(run.dir)).plan.run_dir == str(run.dir)


@pytest.mark.parametrize("found", [None, PLAN_FORMAT - 1, PLAN_FORMAT + 1, "2"])
def test_a_plan_of_another_format_is_refused_naming_both_formats(tmp_path, found):
    run = new_run(tmp_path)
    data = written_plan(run)
    if found is None:
        del data["plan_format"]  # written by an sf from before the format was stated
    else:
        data["plan_format"] = found
    run.write_json("plan.json", data)
    with pytest.raises(UnreadableContract) as caught:
        Contract.read(str(run.dir))
    message = str(caught.value)
    assert "\n" not in message
    shown = 1 if found is None else found
    for part in (str(run.dir / "plan.json"), f"plan format {shown} ", f"reads format {PLAN_FORMAT}",
                 "submit the run again"):
        assert part in message


@pytest.mark.parametrize("text, why", [
    ("{not json", "JSONDecodeError"),
    ("[]", "AttributeError"),
    (json.dumps({"plan_format": PLAN_FORMAT}), "no key 'job'"),
])
def test_a_damaged_plan_is_refused_naming_the_file(tmp_path, text, why):
    run = new_run(tmp_path)
    run.write_text("plan.json", text)
    with pytest.raises(UnreadableContract) as caught:
        Contract.read(str(run.dir))
    message = str(caught.value)
    assert "\n" not in message
    for part in (str(run.dir / "plan.json"), why, "damaged", "submit the run again"):
        assert part in message


def test_a_missing_plan_is_refused(tmp_path):
    run = new_run(tmp_path)
    with pytest.raises(UnreadableContract, match="FileNotFoundError"):
        Contract.read(str(run.dir))


def test_the_supervisor_ends_the_job_with_the_reason_and_no_traceback(tmp_path, capsys):
    run = new_run(tmp_path)
    data = written_plan(run)
    del data["plan_format"]
    run.write_json("plan.json", data)
    rc = supervise.main(["--run-dir", str(run.dir), "--shown", shown_digest(data["entry"], data["overrides"])])
    assert rc == 2
    reason = (run.dir / runs.REASON).read_text()
    assert "plan format 1" in reason and "submit the run again" in reason
    [ended] = [e for e in runs.read_phases(run.dir) if e["phase"] == states.ENDED]
    assert ended["rc"] == 2 and ended["reason"] == reason.strip()
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
