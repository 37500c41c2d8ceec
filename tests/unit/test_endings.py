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
