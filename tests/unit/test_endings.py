"""Endings and healing decisions as they happened (issue 35): the pure parts. The dev-cluster
side is tests/cluster/test_endings.py."""
from __future__ import annotations

import time

from launcher import runs
from launcher.cli.cmd_monitor import _kind
from launcher.injob import stacks
from launcher.monitor import poll


def test_a_node_that_did_not_answer_the_dump_is_silent(tmp_path):
    stacks.write_answer(tmp_path, "dev1", [])
    stacks.write_answer(tmp_path, "dev2", [4209, 4225])
    silent = stacks.silent_nodes(tmp_path, ["dev1", "dev2", "dev3"])
    assert silent == {"dev2": "2 of the job's processes stopped (pids 4209, 4225)",
                      "dev3": "no answer to the stacks dump"}
    (tmp_path / "dev1.json").write_text("{torn")
    assert stacks.silent_nodes(tmp_path, ["dev1"]) == {"dev1": "no answer to the stacks dump"}


def test_a_requeue_by_slurm_counts_once_its_attempt_ended(tmp_path):
    run = runs.create_run(tmp_path, "exp")
    runs.record_phase(run.dir, "driver_started")
    assert run.record()["requeue_count"] == 0
    runs.record_phase(run.dir, "ended", ending="requeued", rc=0)  # scontrol requeue by hand, attempt 0
    assert run.record()["requeue_count"] == 1
    runs.record_phase(run.dir, "restarted", restart=1)  # the next attempt: still 1
    assert run.record()["requeue_count"] == 1


def test_the_newest_step_and_its_time_come_from_progress_json(tmp_path):
    run = runs.create_run(tmp_path, "exp")
    rec = {"job_ids": ["42"]}
    assert poll.step_seen(run, rec) == (None, None)
    run.write_json(runs.PROGRESS, {"step": 7, "at": 1000.5, "job_id": "42", "restart": 0})
    assert poll.step_seen(run, rec) == (7, 1000.5)
    assert poll.step_seen(run, {"job_ids": ["43"]}) == (None, None)  # another job's: not this one's
    line = poll._progress_line("running", None, None, 7, 10, rec, step_at=time.time() - 65)
    assert line in ("step 7/10 (65 s ago)", "step 7/10 (66 s ago)"), line
    assert poll.ago(400) == "6 min ago" and poll.ago(9000) == "2 h ago"


def test_one_word_for_a_line_of_sf_list():
    assert _kind({"kind": "run"}) == "run" and _kind({"kind": "sweep"}) == "sweep"
    assert _kind({"kind": "run", "sweep": {"id": "s", "index": 0}}) == "point"
    assert _kind({}) == "run"


def test_slurm_time_reads_and_writes_as_slurm_does():
    from launcher.monitor import progress

    assert [progress.elapsed_seconds(t) for t in ("00:00:04", "03:04", "1-02:03:04", "", "Unknown", "1:2:3:4")] \
        == [4, 184, 93784, None, None, None]
    assert [progress.format_elapsed(s) for s in (4, 3725, 93784, -3)] == \
        ["00:00:04", "01:02:05", "1-02:03:04", "00:00:00"]


def test_elapsed_of_a_requeued_run_counts_every_attempt():
    """Attempt 0 ran 100 s (allocated to its `ended` requeued), with a restart in place inside
    it; Slurm's Elapsed of attempt 1 is 30 s: ELAPSED 130 s. Before any requeue, or while
    attempt 0 still runs, Slurm's own figure stands."""
    from launcher.monitor import progress

    phases = [{"phase": "allocated", "time": 1000.0}, {"phase": "restarted_in_place", "time": 1040.0},
              {"phase": "ended", "ending": "requeued", "time": 1100.0},
              {"phase": "allocated", "time": 1130.0, "restart": 1}, {"phase": "driver_started", "time": 1140.0,
                                                                     "restart": 1}]
    assert progress.elapsed_over_attempts(phases, "00:00:30", 1) == "00:02:10"
    assert progress.elapsed_over_attempts(phases, "00:00:00", 1) == "00:01:40"  # pending again
    assert progress.elapsed_over_attempts(phases, "00:00:30", 0) == "00:00:30"
    assert progress.elapsed_over_attempts(phases, "", 1) == ""
    assert progress.earlier_attempts_s(phases, 2) == 110.0


def test_slurmctld_gives_the_requeue_count_and_the_reason_at_once():
    from launcher.monitor import progress

    live = {"JobState": "PENDING", "Reason": "BeginTime", "Restarts": "1"}
    assert progress.restarts(live) == 1 and progress.restarts({}) == 0
    assert progress.restarts({"Restarts": "9" * 30}) == 0  # not a count
    assert progress.pending_reason(live, "NodeFail") == "BeginTime"
    assert progress.pending_reason({"JobState": "RUNNING", "Reason": "None"}, "x") == "x"
    assert progress.controller_state(live, "node_fail") == "requeued"  # pending again after the NODE_FAIL
    assert progress.controller_state({"JobState": "NODE_FAIL"}, "node_fail") == "node_fail"
    assert progress.controller_state({}, "node_fail") == "node_fail"


def test_wait_prints_its_lines_in_time_order_with_verls_phase_named():
    """events.jsonl as two nodes append it (the worker's line written after the head's later
    one), and a Slurm state seen after both: printed oldest first, the state line last, verl's
    phase with its name and step."""
    from launcher.monitor import progress

    t = time.time()
    events = [{"phase": "head_up", "time": t + 2.0, "node": "dev1"},
              {"phase": "node_started", "time": t + 1.0, "node": "dev2"},
              {"phase": "verl_phase", "name": "first_step", "step": 1, "time": t + 3.0}]
    lines = progress.wait_lines(events, [(t + 4.0, "job 7: RUNNING")])
    assert [line.split("] ", 1)[1] for line in lines] == [
        "node_started node=dev2", "head_up node=dev1", "verl_phase first_step step=1", "job 7: RUNNING"]
    assert lines[0][1:9] == time.strftime("%H:%M:%S", time.localtime(t + 1.0))  # one clock for all lines
