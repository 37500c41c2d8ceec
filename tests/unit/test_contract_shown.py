"""The entry and overrides reach the job once, from plan.json (issue 46). The batch script
shows them (SF_ENTRY, SF_OVERRIDES) for people and for `sbatch` by hand, and passes the
supervisor only their digest: a script whose arrays differ from plan.json (edited by hand) is
refused at job start with one line, never run with values the job would silently ignore."""
from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
from unit_helpers import SITE, VENV, make_plan

from launcher import runs, states
from launcher.injob import supervise
from launcher.injob.contract import Contract, UnreadableContract, shown_digest
from launcher.render.script import plan_json, render_script

ODD = ("a=1", "b='two words'", "c=\"x y\"", "d=$(touch /tmp/nope)", "e=line\nbreak", "f=tab\there",
       "g=ünïcode ✓", "h=back\\slash", "i= lead and trail ", "j=")


def bash_digest(script: str) -> str:
    """What the rendered script passes as --shown: its own lines that set SF_ENTRY,
    SF_OVERRIDES and SF_SHOWN, run by bash."""
    lines = script.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("SF_ENTRY=("))
    end = next(i for i, line in enumerate(lines) if line.startswith("sf_phase()"))
    shown = next(line for line in lines if line.startswith("SF_SHOWN="))
    text = "set -uo pipefail\n" + "".join(lines[start:end]) + shown + 'printf "%s" "${SF_SHOWN%% *}"\n'
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def run_with_plan(tmp_path, plan) -> runs.Run:
    run = runs.create_run(tmp_path / "runs", "shown")
    plan = dataclasses.replace(plan, run_dir=str(run.dir))
    run.write_text("plan.json", plan_json(plan, SITE, VENV))
    return run


def test_the_scripts_digest_is_the_one_of_plan_jsons_words():
    plan = make_plan(overrides=ODD)
    assert bash_digest(render_script(plan, SITE, VENV)) == shown_digest(plan.entry, plan.overrides)


def test_the_digest_counts_words_not_their_quoting_and_tells_entry_from_overrides():
    assert shown_digest(("python3", "-m", "x"), ("a=1",)) != shown_digest(("python3", "-m"), ("x", "a=1"))
    assert shown_digest(("p",), ("a=1 b=2",)) != shown_digest(("p",), ("a=1", "b=2"))
    assert shown_digest(("p",), ()) != shown_digest(("p",), ("",))
    script = render_script(make_plan(), SITE, VENV)
    # the same words laid out otherwise (spaces, one line, other quotes): the same digest
    respaced = script.replace("SF_ENTRY=(\n  python3\n", "SF_ENTRY=(   'python3'  ").replace("  -m\n", ' "-m" ', 1)
    assert respaced != script and bash_digest(respaced) == bash_digest(script)


def test_an_array_tasks_script_shows_the_entry_only(tmp_path):
    plan = make_plan()
    array = {"size": 2, "sweep_dir": str(tmp_path / "sweep"), "sweep_id": "s1"}
    digest = bash_digest(render_script(plan, SITE, VENV, array=array))
    assert digest == shown_digest(plan.entry, ())
    contract = Contract.from_dict(json.loads(plan_json(plan, SITE, VENV)))
    contract.check_shown(digest, array=True)
    with pytest.raises(UnreadableContract):
        contract.check_shown(digest)


def test_a_script_whose_overrides_differ_from_plan_json_is_refused(tmp_path):
    plan = make_plan()
    contract = Contract.read(str(run_with_plan(tmp_path, plan).dir))
    contract.check_shown(shown_digest(plan.entry, plan.overrides))  # as sf wrote it: runs
    edited = (*plan.overrides[:-1], "trainer.nnodes=3")
    for entry, overrides in ((plan.entry, edited), (("python3", "other.py"), plan.overrides),
                             (plan.entry, plan.overrides[:-1])):
        with pytest.raises(UnreadableContract) as caught:
            contract.check_shown(shown_digest(entry, overrides))
        message = str(caught.value)
        assert message.startswith("the batch script's overrides differ from plan.json: edit the experiment")
        assert "\n" not in message
    with pytest.raises(UnreadableContract, match="sha256sum"):
        contract.check_shown("")


def test_the_supervisor_reads_entry_and_overrides_from_plan_json_only(tmp_path):
    plan = make_plan(overrides=ODD)
    run = run_with_plan(tmp_path, plan)
    args = supervise.parse_args(["--run-dir", str(run.dir), "--shown", shown_digest(plan.entry, plan.overrides)])
    contract = supervise.read_contract(args)
    assert contract.plan.entry == plan.entry and contract.plan.overrides == ODD


@pytest.mark.parametrize("argv", [
    ["--shown", "0" * 64],  # another digest: the script's arrays were edited
    ["--n-entry", "1", "--", "python3", "a=1"],  # a script of an earlier sf: values on the command line
    [],  # no digest at all
])
def test_the_job_ends_with_one_line_and_nothing_runs(tmp_path, argv, capsys):
    run = run_with_plan(tmp_path, make_plan())
    assert supervise.main(["--run-dir", str(run.dir), *argv]) == 2
    reason = (run.dir / runs.REASON).read_text().strip()
    assert "\n" not in reason and ("differ from plan.json" in reason or "submit the run again" in reason)
    [ended] = [e for e in runs.read_phases(run.dir) if e["phase"] == states.ENDED]
    assert ended["rc"] == 2 and ended["reason"] == reason
    assert "Traceback" not in capsys.readouterr().err
