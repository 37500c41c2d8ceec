"""A runs folder damaged by hand, a full disk, a crash or another tool: the read side (`sf list`,
`status`, `logs`, `metrics`, `plot`, `cancel`, `attach`) says what is damaged in one line naming
the file (exit 2), and one damaged run never stops a command about the others."""
from __future__ import annotations

import json
import os

import pytest
from unit_helpers import refused, sacct_row, sf_cli, submitted_run

from launcher import runs


def _ended(root, name, **fields):
    """A run that ended (completed), as `sf status` leaves it: the poll does not ask Slurm."""
    run = submitted_run(root, name, "101")
    run.add_state("completed")
    if fields:
        run.update(**fields)
    return run


def _listed_without(bad, good, damaged_file):
    """`sf list` and `sf status` show `good`, leave `bad` out and name its damaged file."""
    for args in (["list"], ["status"]):
        result = sf_cli(*args)
        assert result.exit_code == 0, (args, result.stderr, result.exception)
        assert good.id in result.stdout and bad.id not in result.stdout, result.stdout
        assert str(damaged_file) in result.stderr, result.stderr
    doc = json.loads(sf_cli("list", "--json").stdout)
    assert doc["damaged"] == [bad.id]


# --- record.json: the fields sf computes with ---------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("final", "done"),  # status without RUN: final.get
    ("final", [1, 2]),
    ("total_steps", "abc"),  # int("abc") in the progress line
    ("total_steps", [3]),
    ("runtime", "venv"),  # sf attach: Runtime.from_dict
    ("grid", [1]),  # sf metrics SWEEP: g.get
    ("params", [1]),  # sf metrics SWEEP: dict(params)
    ("points", "two"),  # sf status SWEEP: range(points)
])
def test_a_record_field_of_another_type_is_damage(cli_env, fake_slurm, field, value):
    root = cli_env / "runs"
    good = _ended(root, "good")
    bad = _ended(root, "bad")
    data = json.loads((bad.dir / runs.RECORD).read_text())
    data[field] = value
    (bad.dir / runs.RECORD).write_text(json.dumps(data))
    refused(sf_cli("status", bad.id), str(bad.dir / runs.RECORD), f"its {field} ")
    _listed_without(bad, good, bad.dir / runs.RECORD)


def test_a_record_total_steps_of_nan_is_damage(cli_env, fake_slurm):
    root = cli_env / "runs"
    bad = submitted_run(root, "bad", "101")
    (bad.dir / runs.RECORD).write_text((bad.dir / runs.RECORD).read_text().replace('"job_ids"',
                                                                                 '"total_steps": NaN, "job_ids"'))
    fake_slurm.set("sacct", sacct_row("101", "RUNNING"))
    refused(sf_cli("status", bad.id), str(bad.dir / runs.RECORD), "total_steps")


def test_a_job_id_that_is_not_slurms_never_reaches_sacct(cli_env, fake_slurm):
    """`sacct --jobs=abc;x,102` fails for every run of the poll: the one record is damaged."""
    root = cli_env / "runs"
    good = submitted_run(root, "good", "102")
    bad = submitted_run(root, "bad", "101")
    data = json.loads((bad.dir / runs.RECORD).read_text())
    data["job_ids"] = ["abc;x"]
    (bad.dir / runs.RECORD).write_text(json.dumps(data))
    fake_slurm.set("sacct", sacct_row("102", "RUNNING"))
    result = sf_cli("status")
    assert result.exit_code == 0 and good.id in result.stdout, (result.stderr, result.exception)
    assert not any("abc" in call for call in fake_slurm.calls()), fake_slurm.calls()
    assert "running" in result.stdout and str(bad.dir / runs.RECORD) in result.stderr
    refused(sf_cli("status", bad.id), "job_ids are not Slurm job ids")


def test_a_job_id_written_as_a_number_is_listed_as_text(cli_env, fake_slurm):
    root = cli_env / "runs"
    run = _ended(root, "good")
    data = json.loads((run.dir / runs.RECORD).read_text())
    data["job_ids"] = [101]
    (run.dir / runs.RECORD).write_text(json.dumps(data))
    result = sf_cli("list")
    assert result.exit_code == 0 and "101" in result.stdout, (result.stderr, result.exception)


def test_a_copied_run_folder_shows_its_own_id(cli_env, fake_slurm):
    """The record of a folder copied under another name still holds the old id: the folder's
    name is the run's (what `sf cancel ID` acts on), not the other run's."""
    root = cli_env / "runs"
    first = _ended(root, "first")
    copy = root / "first-copy"
    copy.mkdir()
    (copy / runs.RECORD).write_text((first.dir / runs.RECORD).read_text())
    result = sf_cli("status", "first-copy", "--json")
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert [r["id"] for r in json.loads(result.stdout)["runs"]] == ["first-copy"]
    listed = json.loads(sf_cli("list", "--json").stdout)["runs"]
    assert sorted(r["id"] for r in listed) == sorted(["first-copy", first.id])


# --- events.jsonl and reason: merged into the record --------------------------------------------

@pytest.mark.parametrize("name", [runs.EVENTS, runs.REASON])
@pytest.mark.parametrize("how", ["folder", "symlink loop"])
def test_an_unreadable_events_or_reason_file_is_one_line_naming_it(cli_env, fake_slurm, name, how):
    root = cli_env / "runs"
    good = _ended(root, "good")
    bad = _ended(root, "bad")
    path = bad.dir / name
    if how == "folder":
        path.mkdir()
    else:
        os.symlink(name, path)
    timeline = [["status", bad.id, "--timeline"]] if name == runs.EVENTS else []  # reads no reason
    for args in (["status", bad.id], ["cancel", bad.id], ["logs", bad.id], *timeline):
        refused(sf_cli(*args), str(path), "not a file sf wrote")
    _listed_without(bad, good, path)


EVENTS_OF_OTHER_TYPES = [
    {"phase": "restarted_in_place", "time": 2.0, "restart_in_place": 1, "nodes": 5, "cause": "driver"},
    {"phase": "allocated", "time": 3.0, "restart": "x"},
    {"phase": "allocated", "time": "soon"},
    {"phase": "driver_started", "time": 10 ** 400},
    {"phase": ["allocated"], "time": 4.0},
    {"phase": "barrier_waiting", "time": 5.0, "missing": 7},
]


@pytest.mark.parametrize("event", EVENTS_OF_OTHER_TYPES, ids=lambda e: "-".join(f"{k}" for k in e))
def test_an_event_of_other_types_is_skipped_like_a_torn_line(cli_env, fake_slurm, event):
    root = cli_env / "runs"
    run = _ended(root, "good")
    good = {"phase": "allocated", "time": 1.0, "iso": "2026-01-01T00:00:00Z", "job_id": "101", "restart": "1"}
    (run.dir / runs.EVENTS).write_text(json.dumps(good) + "\n" + json.dumps(event) + "\n")
    for args in (["status", run.id], ["status", run.id, "--timeline"], ["status", run.id, "--timeline", "--json"]):
        result = sf_cli(*args)
        assert result.exit_code == 0, (args, result.stderr, result.exception)
    assert runs.read_phases(run.dir) == [{**good, "restart": 1}]  # a shell's "1" is a count


# --- plan.json, metrics, stacks -----------------------------------------------------------------

@pytest.mark.parametrize("plan", ['{"overrides": 5}', '{"pools": "x"}', '{"slurm": []}', "[]"])
def test_a_plan_of_another_shape_leaves_status_its_progress(cli_env, fake_slurm, plan):
    root = cli_env / "runs"
    run = submitted_run(root, "good", "101")
    (run.dir / "plan.json").write_text(plan)
    (run.dir / "logs" / "slurm-101.out").write_text("step:3 - loss:1\n")
    fake_slurm.set("sacct", sacct_row("101", "RUNNING"))
    result = sf_cli("status", run.id)
    assert result.exit_code == 0 and "step 3" in result.stdout, (result.stderr, result.exception)
    with pytest.raises(runs.DamagedRecord, match="plan.json is damaged"):
        run.read_plan()


def test_a_step_number_of_5000_digits_in_a_log_is_not_a_step(cli_env, fake_slurm):
    root = cli_env / "runs"
    run = submitted_run(root, "good", "101")
    (run.dir / "logs" / "slurm-101.out").write_text(f"step:2 - a\nstep:{'9' * 5000} - b\n")
    fake_slurm.set("sacct", sacct_row("101", "RUNNING"))
    result = sf_cli("status", run.id)
    assert result.exit_code == 0 and "step 2" in result.stdout, (result.stderr, result.exception)


@pytest.mark.parametrize("line", [
    b'{"step": Infinity, "data": {"critic/score/mean": 1}}',
    b'{"step": 1e400, "data": {"critic/score/mean": 1}}',
    b'{"step": 1, "data": {"critic/score/mean": 1' + b"0" * 400 + b"}}",
    b"[" * 100_000 + b"]" * 100_000,
])
@pytest.mark.parametrize("command", ["metrics", "plot"])
def test_a_metrics_line_past_a_float_is_skipped(cli_env, fake_slurm, line, command):
    root = cli_env / "runs"
    run = _ended(root, "good")
    (run.dir / "metrics" / "attempt-0.jsonl").write_bytes(line + b'\n{"step": 2, "data": {"critic/score/mean": 0.5}}\n')
    if command == "plot":
        pytest.importorskip("matplotlib")
        result = sf_cli("plot", run.id, "-o", cli_env / "p.png")
    else:
        result = sf_cli("metrics", run.id, "--json")
    assert result.exit_code == 0, (result.stderr, result.exception)
    if command == "metrics":
        assert json.loads(result.stdout)["data"]["critic/score/mean"] == [[2, 0.5]]


def test_stacks_skip_a_folder_or_a_dangling_link_named_txt(cli_env, fake_slurm):
    root = cli_env / "runs"
    run = _ended(root, "good")
    hang = run.dir / "stacks" / "101-0"
    hang.mkdir(parents=True)
    (hang / "dev1.txt").write_text("Thread 1\n")
    (hang / "dev2.txt").mkdir()
    os.symlink("/nonexistent", hang / "dev3.txt")
    result = sf_cli("logs", run.id, "--stacks")
    assert result.exit_code == 0 and "Thread 1" in result.stdout, (result.stderr, result.exception)


def test_a_record_that_is_a_symlink_to_another_runs_is_refused(cli_env, fake_slurm):
    """A run whose record.json links to another run's: read through the link, `sf cancel` there
    would act on the other run's jobs. sf reads a record only as a file of its own."""
    root = cli_env / "runs"
    other = _ended(root, "other")
    good = _ended(root, "good")
    bad = _ended(root, "bad")
    (bad.dir / runs.RECORD).unlink()
    (bad.dir / runs.RECORD).symlink_to(other.dir / runs.RECORD)
    for command in ("status", "cancel"):
        refused(sf_cli(command, bad.id), f"{bad.dir / runs.RECORD} is a symbolic link, not a file sf wrote")
    assert fake_slurm.calls("scancel") == []  # the other run's jobs untouched
    _listed_without(bad, good, bad.dir / runs.RECORD)


# --- damaged run data and run identity (issue 44, 47) -------------------------------------------

def test_a_fifo_or_sparse_record_events_or_reason_is_damage_never_read(cli_env, fake_slurm):
    """A FIFO would hang every `sf list`; a sparse 3 GB file would cost seconds and 3 GB: both are
    refused on the open descriptor, named in one line, and the other runs listed."""
    root = cli_env / "runs"
    good = _ended(root, "good")
    fifo_events, sparse_record, fifo_reason = (_ended(root, n) for n in ("fifo", "sparse", "reason"))
    os.mkfifo(fifo_events.dir / runs.EVENTS)
    with open(sparse_record.dir / runs.RECORD, "r+b") as handle:
        handle.truncate(3 << 30)
    os.mkfifo(fifo_reason.dir / runs.REASON)
    result = sf_cli("list", "--json")
    assert result.exit_code == 0, (result.stderr, result.exception)
    doc = json.loads(result.stdout)
    assert [r["id"] for r in doc["runs"]] == [good.id]
    assert sorted(doc["damaged"]) == sorted([fifo_events.id, sparse_record.id, fifo_reason.id])
    refused(sf_cli("status", fifo_events.id), str(fifo_events.dir / runs.EVENTS), "is a FIFO")
    refused(sf_cli("status", sparse_record.id), str(sparse_record.dir / runs.RECORD), "3221225472 bytes")


def test_an_absurd_restart_count_is_not_shown_as_requeues(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    with open(run.dir / runs.EVENTS, "a") as handle:
        handle.write(json.dumps({"phase": "allocated", "time": 1.0, "restart": 10**30}) + "\n")
        handle.write(json.dumps({"phase": "ended", "time": 2.0, "ending": "requeued", "restart": 10**30}) + "\n")
        handle.write(json.dumps({"phase": "allocated", "time": 3.0, "restart": 1}) + "\n")
    rec = run.record()
    assert rec["requeue_count"] == 1 and [p["time"] for p in rec["phases"]] == [3.0]


def test_a_record_requeue_count_no_job_reaches_is_damage(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    data = json.loads((run.dir / runs.RECORD).read_text())
    (run.dir / runs.RECORD).write_text(json.dumps({**data, "requeue_count": 10**30}))
    with pytest.raises(runs.DamagedRecord, match="requeue_count"):
        run.record()


@pytest.mark.parametrize("member", ["../../etc", "/etc", "..", "a/b"])
def test_a_sweep_whose_members_point_outside_the_runs_folder_is_damage(tmp_path, member):
    sweep = runs.create_run(tmp_path, "grid", kind="sweep", members=[member])
    with pytest.raises(runs.DamagedRecord, match="members are not run ids"):
        sweep.record()
    assert runs.list_runs(tmp_path) == [] and list(runs.damaged_runs(tmp_path)) == [sweep.id]
