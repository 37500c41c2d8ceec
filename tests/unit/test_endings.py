"""Endings and healing decisions as they happened (issue 35): the pure parts. The dev-cluster
side is tests/cluster/test_endings.py."""
from __future__ import annotations

import os
import time
from pathlib import Path

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
    # accounting still shows attempt 0's NODE_FAIL row (its Elapsed 100 s) while Slurm counts
    # the requeue: attempt 0 is counted once
    assert progress.elapsed_over_attempts(phases, "00:01:40", progress.attempt_of("NODE_FAIL", 1)) == "00:01:40"
    assert progress.attempt_of("RUNNING", 1) == 1 and progress.attempt_of("NODE_FAIL", 0) == 0


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


OCI_RUN = Path(__file__).resolve().parents[2] / "scripts" / "sf-oci-run"


def _oci_run():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("sf_oci_run_47", str(OCI_RUN))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("sf_oci_run_47", loader))
    loader.exec_module(module)
    return module


def test_a_container_process_runs_with_the_jobs_umask():
    config = {"process": {"env": ["PATH=/opt/rt/bin", "SLURM_UMASK=0077"]}, "mounts": [], "root": {"path": "/nope"}}
    out = _oci_run().rewrite(config, "dev1", "5", gpus_of=lambda *a: None)
    assert out["process"]["user"]["umask"] == 0o077
    assert _oci_run().job_umask({"SLURM_UMASK": "22"}) == 0o022 and _oci_run().job_umask({"SLURM_UMASK": "9x"}) >= 0


def test_a_container_step_ends_by_the_signal_that_ended_its_process(tmp_path):
    """The wrapper passes SIGTERM to the runtime (here a stand-in that exits as runc does:
    128+15 when its process died of it) and then dies of SIGTERM itself, as a venv step's
    process does (slurmstepd: CANCELLED 0:15, not FAILED 15:0); a status it was not signalled
    for is passed on as it is."""
    import signal
    import subprocess
    import sys

    started = tmp_path / "started"
    runc = ("import pathlib, signal, sys, time; "
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(128 + 15)); "
            f"pathlib.Path({str(started)!r}).touch(); time.sleep(60); sys.exit(3)")
    driver = ("import importlib.machinery as m, importlib.util as u, sys; "
              f"l = m.SourceFileLoader('w', {str(OCI_RUN)!r}); "
              "w = u.module_from_spec(u.spec_from_loader('w', l)); l.exec_module(w); "
              "sys.exit(w.end_as_the_container_did(w.run_runtime(sys.argv[1:])))")
    proc = subprocess.Popen([sys.executable, "-c", driver, sys.executable, "-c", runc])
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    plain = subprocess.run([sys.executable, "-c", driver, sys.executable, "-c", "import sys; sys.exit(143)"],
                           timeout=60)
    assert plain.returncode == 143  # never signalled: an exit status like any other


def test_a_link_to_a_folder_not_here_gets_the_mount_of_its_target(tmp_path):
    """A model under a mounted folder through a link whose target this container lacks: the
    folder to mount is the link's target (absolute or relative), not the path through it."""
    from launcher.injob import mounts

    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "models").symlink_to(tmp_path / "elsewhere" / "models")
    (mounted / "rel").symlink_to("../away/data")
    assert mounts.first_missing(str(mounted / "models" / "llama")) == str(tmp_path / "elsewhere" / "models")
    assert mounts.first_missing(str(mounted / "rel" / "x.parquet")) == str(tmp_path / "away" / "data")
    assert mounts.first_missing(str(mounted / "plain" / "x")) == str(mounted / "plain")
    hint = mounts.mount_hint(str(mounted / "models" / "llama"), {"kind": "pyxis", "image": "img", "mounts": []})
    assert f"`{tmp_path / 'elsewhere' / 'models'}:{tmp_path / 'elsewhere' / 'models'}`" in hint, hint


def test_a_stopped_raylet_is_named_and_its_ray_ended(tmp_path):
    """A `ray start` stand-in (its own process group) whose child is called raylet: stopped
    (SIGSTOP), the watch records node_frozen naming the node after its limit and kills the
    group; running, it is left alone. The limit is min(30 s, the run's hang limit)."""
    import shutil
    import signal
    import subprocess

    from launcher.injob import raylet_watch

    run = runs.create_run(tmp_path / "runs", "x")
    assert raylet_watch.limit_s(str(run.dir)) == 30.0  # no plan: the cap
    run.write_json("plan.json", {"job": {"heal": {"hang_timeout_s": 8}}})
    assert raylet_watch.limit_s(str(run.dir)) == 8.0
    raylet = tmp_path / "raylet"
    shutil.copy(shutil.which("sleep"), raylet)
    ray_start = subprocess.Popen(["sh", "-c", f"{raylet} 60 & wait"], start_new_session=True)
    try:
        pid = None
        deadline = time.monotonic() + 30
        while pid is None and time.monotonic() < deadline:  # until sh has started it
            pid = raylet_watch.descendant_named(ray_start.pid, "raylet") or time.sleep(0.05)
        assert pid and raylet_watch.stat_of(pid)[0] == "raylet" and raylet_watch.stat_of(pid)[1] != "T"
        watch = raylet_watch.RayletWatch(ray_start.pid, 1.0, str(run.dir), "dev3", "train").start()
        os.kill(pid, signal.SIGSTOP)
        ray_start.wait(timeout=60)  # the watch killed the group
        assert watch.frozen and f"raylet (pid {pid}) was stopped" in watch.frozen
        [event] = [e for e in runs.read_phases(run.dir) if e["phase"] == "node_frozen"]
        assert event["node"] == "dev3" and event["pid"] == pid and event["stopped_s"] >= 1.0
    finally:
        if ray_start.poll() is None:
            os.killpg(ray_start.pid, signal.SIGKILL)
