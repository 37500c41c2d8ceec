"""launcher.monitor.poll and the sf status/logs/cancel/list commands, against fake Slurm
binaries (SF_SLURM_BIN_DIR) and run records in a temp dir."""
from __future__ import annotations

import json
import os
import threading
import time

from click.testing import CliRunner
from unit_helpers import sacct_row, submitted_run

from launcher import runs, slurm, states
from launcher.cli.app import main
from launcher.monitor import poll as monitor

VERL_LOG = """\
(TaskRunner pid=1) Total training steps: 12
Training Progress:   0%|          | 0/12 [00:00<?, ?it/s]
(TaskRunner pid=1) step:1 - global_seqlen/min:100 - actor/pg_loss:0.1
Training Progress:   8%|8         | 1/12 [00:05<00:55]\r
(TaskRunner pid=1) step:2 - global_seqlen/min:100 - actor/pg_loss:0.1
"""


def test_parse_progress_from_verl_output():
    assert monitor.parse_progress(VERL_LOG) == (2, 12)
    assert monitor.parse_progress("Training Progress:  30%|###  | 3/10 [00:30<01:10]") == (3, 10)
    assert monitor.parse_progress("nothing here, timestep:3 - x") == (None, None)
    assert monitor.parse_progress("") == (None, None)


def test_poll_one_sacct_call_for_many_runs(fake_slurm):
    root = fake_slurm.runs_dir
    a = submitted_run(root, "plain", "11")
    b = submitted_run(root, "het", "18")
    c = submitted_run(root, "pend", "30")
    d = submitted_run(root, "fresh", "31")  # sacct lags: not there yet
    fake_slurm.set("sacct", sacct_row("11", "COMPLETED") + sacct_row("18+0", "RUNNING") +
                   sacct_row("18+1", "RUNNING", nodes="dev7") + sacct_row("30", "PENDING", nodes="None assigned",
                                                                reason="Resources"))
    (b.dir / "logs" / "driver.log").write_text(VERL_LOG)
    runs.record_phase(b.dir, "allocated")
    runs.record_phase(b.dir, "ray_up")
    before = slurm.CALLS["sacct"]
    statuses = {s.id: s for s in monitor.poll([a, b, c, d])}
    # one sacct for all four; one squeue only for those sacct has pending or not recorded yet
    calls = fake_slurm.calls()
    assert slurm.CALLS["sacct"] - before == 1 and len(calls) == 2 and calls[1].endswith("--jobs=30,31")
    assert statuses[a.id].state == "completed" and statuses[a.id].done
    het = statuses[b.id]
    assert het.state == "running" and het.progress == "step 2/12" and het.phase == "ray_up"
    assert set(het.jobs) == {"18", "18+0", "18+1"} and het.nodes == "dev1,dev7"
    assert statuses[c.id].progress == "queued (Resources)" and not statuses[c.id].done
    assert statuses[d.id].state == "submitted" and statuses[d.id].progress == "submitted"
    # Slurm's answer is written back into the record (once).
    assert a.record()["state"] == "completed"
    monitor.poll([a])
    assert [h["state"] for h in a.record()["history"]] == ["created", "submitted", "completed"]
    assert d.record()["state"] == "submitted"


def test_progress_from_phases_before_training(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "x", "40")
    fake_slurm.set("sacct", sacct_row("40", "RUNNING"))
    assert monitor.poll([run])[0].progress == "allocated"
    runs.record_phase(run.dir, "allocated")
    runs.record_phase(run.dir, "all_joined")
    assert monitor.poll([run])[0].progress == "ray up"
    run.update(total_steps=5)
    (run.dir / "logs" / "slurm-40.out").write_text("(TaskRunner) step:3 - a:1\n")
    assert monitor.poll([run])[0].progress == "step 3/5"


def test_total_steps_from_plan_overrides(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "x", "41")
    run.write_json("plan.json", {"overrides": ["trainer.total_epochs=1", "trainer.total_training_steps=7"]})
    (run.dir / "logs" / "slurm-41.out").write_text("step:4 - a:1\n")
    fake_slurm.set("sacct", sacct_row("41", "FAILED", exit_code="1:0"))
    status = monitor.poll([run])[0]
    assert status.state == "failed" and status.progress == "failed at step 4/7"
    assert run.record()["history"][-1]["exit_code"] == "1:0"


def test_skip_ended_asks_nothing_about_finished_runs(fake_slurm):
    done = submitted_run(fake_slurm.runs_dir, "done", "50")
    done.add_state("completed")
    statuses = monitor.poll([done], skip_ended=True)
    assert statuses[0].state == "completed" and fake_slurm.calls() == []


def test_squeue_fallback_is_reported(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "x", "60")
    gone = submitted_run(fake_slurm.runs_dir, "y", "61")
    fake_slurm.set("sacct", "", "sacct: error: Slurm accounting storage is disabled\n", 1)
    fake_slurm.set("squeue", "60|job|RUNNING|0:05|dev2|None|2026-11-29T11:00:00|10:00|2026-11-29T10:59:59\n")
    statuses = {s.id: s for s in monitor.poll([run, gone])}
    assert statuses[run.id].state == "running" and statuses[run.id].source == "squeue"
    assert statuses[gone.id].state == "gone" and statuses[gone.id].done
    assert "accounting unavailable" in statuses[run.id].warning
    result = CliRunner().invoke(main, ["status", "--json"])
    doc = json.loads(result.stdout)
    assert doc["source"] == "squeue" and doc["accounting"] is False and "accounting" in doc["warning"]


def test_array_sweep_points_from_one_call(fake_slurm):
    root = fake_slurm.runs_dir
    sweep = runs.create_run(root, "sw", kind="sweep", points=[{"i": i} for i in range(6)])
    sweep.add_state("submitted")
    sweep.set_job_ids(["70"])
    fake_slurm.set("sacct", sacct_row("70_0", "COMPLETED") + sacct_row("70_1", "RUNNING") +
                   sacct_row("70_2", "RUNNING")
                   + "70_[3-5%2]|job|PENDING|0:0|Unknown|Unknown|00:00:00|None assigned|JobArrayTaskLimit||\n")
    status = monitor.poll([sweep])[0]
    assert len(fake_slurm.calls("sacct")) == 1
    assert [p["state"] for p in status.points] == ["completed", "running", "running", "pending", "pending", "pending"]
    assert [p["job_id"] for p in status.points] == [f"70_{i}" for i in range(6)]
    assert status.state == "running" and status.progress == "1 completed, 3 pending, 2 running"
    assert not status.done


def test_hetjob_sweep_members_in_one_call(fake_slurm):
    root = fake_slurm.runs_dir
    sweep = runs.create_run(root, "hs", kind="sweep")
    p0 = submitted_run(root, "hs", "80", sweep={"id": sweep.id, "index": 0})
    p1 = submitted_run(root, "hs", "82", sweep={"id": sweep.id, "index": 1})
    fake_slurm.set("sacct", sacct_row("80+0", "COMPLETED") + sacct_row("80+1", "COMPLETED") +
                   sacct_row("82+0", "RUNNING") + sacct_row("82+1", "RUNNING", nodes="dev8"))
    status = monitor.poll([sweep])[0]
    assert len(fake_slurm.calls("sacct")) == 1
    assert [(p["run_id"], p["state"]) for p in status.points] == [(p0.id, "completed"), (p1.id, "running")]
    assert status.state == "running" and not status.done
    result = CliRunner().invoke(main, ["status", sweep.id])
    assert result.exit_code == 0, result.output
    assert p0.id in result.output and p1.id in result.output and "POINT" in result.output


def test_status_cli_table_json_and_unknown_run(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "90")
    fake_slurm.set("sacct", sacct_row("90", "RUNNING", nodes="dev3"))
    runner = CliRunner()
    result = runner.invoke(main, ["status"])
    assert result.exit_code == 0 and run.id in result.output and "running" in result.output
    result = runner.invoke(main, ["status", run.id, "--json"])
    doc = json.loads(result.stdout)
    assert doc["runs"][0]["id"] == run.id and doc["runs"][0]["state"] == "running"
    assert doc["runs"][0]["nodes"] == "dev3" and doc["source"] == "sacct"
    result = runner.invoke(main, ["status", run.id[:-1] + "9"])
    assert result.exit_code == 2 and run.id in result.output


def test_status_watch_redraws_until_done(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "91")
    fake_slurm.set("sacct", sacct_row("91", "RUNNING"))
    fake_slurm.set("sacct", sacct_row("91", "COMPLETED"), from_call=3)
    result = CliRunner().invoke(main, ["status", run.id, "--watch", "--interval", "0.2", "--json"])
    assert result.exit_code == 0
    docs = [json.loads(line) for line in result.output.splitlines()]
    assert docs[0]["runs"][0]["state"] == "running" and docs[-1]["runs"][0]["state"] == "completed"
    assert len(fake_slurm.calls("sacct")) == len(docs)


def test_status_watch_ctrl_c_exits_130_without_cancelling(fake_slurm, monkeypatch):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "92")
    fake_slurm.set("sacct", sacct_row("92", "RUNNING"))

    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr("launcher.cli.cmd_monitor.time.sleep", interrupt)
    result = CliRunner().invoke(main, ["status", run.id, "--watch"])
    assert result.exit_code == 130
    assert fake_slurm.calls("scancel") == []


def slurm_shows(fake, run, job_id):
    """scontrol's next `show job` answer: the job is this user's and this run's (job_owner)."""
    fake.set("scontrol", f"JobId={job_id} JobName=sf-{run.id} UserId=me({os.getuid()}) "
             f"StdOut={run.dir}/logs/slurm-{job_id}.out\n", from_call=len(fake.calls("scontrol")) + 1)


def cancelled_after_scancel(fake, rows):
    """sacct's answer after sf cancel's poll (its next call): Slurm says the jobs ended."""
    fake.set("sacct", rows, from_call=len(fake.calls("sacct")) + 2)


def test_cancel_run_and_sweep(fake_slurm):
    root = fake_slurm.runs_dir
    run = submitted_run(root, "grpo", "100")
    ended = submitted_run(root, "old", "101")
    fake_slurm.set("sacct", sacct_row("100+0", "RUNNING") + sacct_row("100+1", "RUNNING")
                   + sacct_row("101", "COMPLETED"))
    slurm_shows(fake_slurm, run, "100")
    cancelled_after_scancel(fake_slurm, sacct_row("100+0", "CANCELLED") + sacct_row("100+1", "CANCELLED")
                            + sacct_row("101", "COMPLETED"))
    runner = CliRunner()
    result = runner.invoke(main, ["cancel", run.id, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["job_ids"] == ["100"] and doc["cancelled"] == [run.id]
    assert fake_slurm.calls("scancel") == ["scancel 100"]
    assert run.record()["state"] == "cancelled"
    result = runner.invoke(main, ["cancel", ended.id])
    assert result.exit_code == 0 and "nothing to cancel (completed)" in result.output
    assert len(fake_slurm.calls("scancel")) == 1

    sweep = runs.create_run(root, "hs", kind="sweep")
    p0 = submitted_run(root, "hs", "110", sweep={"id": sweep.id, "index": 0})
    p1 = submitted_run(root, "hs", "112", sweep={"id": sweep.id, "index": 1})
    running = sacct_row("110+0", "RUNNING") + sacct_row("110+1", "RUNNING") + sacct_row("112", "PENDING")
    fake_slurm.set("sacct", running, from_call=len(fake_slurm.calls("sacct")) + 1)
    slurm_shows(fake_slurm, p0, "110")
    fake_slurm.set("scontrol", f"JobId=112 JobName=sf-{p1.id} UserId=me({os.getuid()}) "
                   f"StdOut={p1.dir}/logs/slurm-112.out\n", from_call=len(fake_slurm.calls("scontrol")) + 2)
    cancelled_after_scancel(fake_slurm, running.replace("RUNNING", "CANCELLED").replace("PENDING", "CANCELLED"))
    result = runner.invoke(main, ["cancel", sweep.id, "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["cancelled"]) == sorted([p0.id, p1.id])
    assert fake_slurm.calls("scancel")[-1] == "scancel 110 112"


def test_cancel_slurm_failure_exits_1(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "120")
    fake_slurm.set("sacct", sacct_row("120", "RUNNING"))
    slurm_shows(fake_slurm, run, "120")
    fake_slurm.set("scancel", "", "scancel: error: Unable to contact slurm controller\n", 1)
    result = CliRunner().invoke(main, ["cancel", run.id])
    assert result.exit_code == 1 and "Unable to contact" in result.output
    assert run.record()["state"] != "cancelled"


def test_list_cli(fake_slurm):
    root = fake_slurm.runs_dir
    runner = CliRunner()
    assert "no runs" in runner.invoke(main, ["list"]).output
    a = runs.create_run(root, "first")
    b = submitted_run(root, "second", "130")
    result = runner.invoke(main, ["list"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("RUN") and b.id in lines[1] and a.id in lines[2]
    assert len(fake_slurm.calls("sacct")) == 1  # the one submitted run, one batched query
    fake_slurm.set("sacct", sacct_row("130", "COMPLETED"))
    doc = json.loads(runner.invoke(main, ["list", "--json", "--limit", "1"]).output)
    assert [r["id"] for r in doc["runs"]] == [b.id] and doc["runs"][0]["job_ids"] == ["130"]
    assert doc["runs"][0]["state"] == "completed" and b.record()["state"] == "completed"  # written back
    before = len(fake_slurm.calls())
    runner.invoke(main, ["list"])
    assert len(fake_slurm.calls()) == before  # nothing left to ask: every listed run has ended or never ran


def test_select_logs():
    from pathlib import Path

    from launcher.cli.cmd_logs import select_logs

    files = [Path(n) for n in ("slurm-5.out", "ray-head-dev1.log", "ray-worker-dev2.log",
                               "ray-worker-dev12.log", "driver.log", "teacher-node1.log")]
    assert select_logs(files, None, None) == [Path("driver.log")]
    assert select_logs(files, "dev2", None) == [Path("ray-worker-dev2.log")]
    assert select_logs(files, "1", None) == [Path("teacher-node1.log")]
    assert select_logs(files, None, "worker") == [Path("ray-worker-dev2.log"), Path("ray-worker-dev12.log")]
    assert select_logs(files[:1], None, None) == [Path("slurm-5.out")]


def test_logs_print_tail_list_and_errors(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "140")
    runner = CliRunner()
    result = runner.invoke(main, ["logs", run.id])
    assert result.exit_code == 2 and "no log files" in result.output
    (run.dir / "logs" / "slurm-140.out").write_text("".join(f"line {i}\n" for i in range(10)))
    (run.dir / "logs" / "ray-worker-dev2.log").write_text("worker says hi\n")
    result = runner.invoke(main, ["logs", run.id])
    assert result.output == "".join(f"line {i}\n" for i in range(10))
    assert runner.invoke(main, ["logs", run.id, "--tail", "2"]).output == "line 8\nline 9\n"
    assert runner.invoke(main, ["logs", run.id, "--node", "dev2"]).output == "worker says hi\n"
    assert "ray-worker-dev2.log" in runner.invoke(main, ["logs", run.id, "--list"]).output
    assert runner.invoke(main, ["logs", run.id, "--node", "1", "--role", "x"]).exit_code == 2
    assert fake_slurm.calls() == []


def test_logs_ray_shows_the_kept_ray_logs_only_when_asked(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "141")
    logs = run.dir / "logs"
    (logs / "slurm-141.out").write_text("batch\n")
    (logs / "141-ray-head-dev1.log").write_text("node wrapper dev1\n")
    for node, name, text in (("dev1", "raylet.out", "raylet of dev1\n"), ("dev2", "gcs_server.out", "gcs of dev2\n")):
        (logs / "ray" / f"141-{node}").mkdir(parents=True, exist_ok=True)
        (logs / "ray" / f"141-{node}" / name).write_text(text)
    runner = CliRunner()
    assert runner.invoke(main, ["logs", run.id, "--node", "dev1"]).output == "node wrapper dev1\n"
    assert runner.invoke(main, ["logs", run.id]).output == "batch\n"
    assert runner.invoke(main, ["logs", run.id, "--ray", "--node", "dev2"]).output == "gcs of dev2\n"
    both = runner.invoke(main, ["logs", run.id, "--ray"]).output
    assert "[ray/141-dev1/raylet.out] raylet of dev1" in both and "[ray/141-dev2/gcs_server.out] gcs of dev2" in both


def test_logs_follow_until_job_ends(fake_slurm, wait_for):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "150")
    log = run.dir / "logs" / "slurm-150.out"
    fake_slurm.set("sacct", sacct_row("150", "RUNNING"))

    def job():
        # written while `sf logs -f` follows: after its first job-state check
        wait_for(lambda: fake_slurm.calls("sacct"), timeout=10, interval=0.05, what="the first sacct call")
        with open(log, "a") as f:
            for i in range(5):
                f.write(f"tick {i}\n")
                f.flush()
            f.write("last words without newline")
        fake_slurm.set("sacct", sacct_row("150", "COMPLETED"))

    thread = threading.Thread(target=job)
    thread.start()
    started = time.monotonic()
    result = CliRunner().invoke(main, ["logs", run.id, "-f", "--interval", "0.05", "--check-every", "0.5"])
    thread.join()
    assert result.exit_code == 0, result.output
    assert "tick 0\ntick 1\ntick 2\ntick 3\ntick 4\nlast words without newline" in result.output
    assert time.monotonic() - started < 10


def test_cancelled_record_is_not_overwritten_by_lagging_sacct(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "160")
    run.add_state("cancelled", by="sf cancel")
    fake_slurm.set("sacct", sacct_row("160", "RUNNING"))
    status = monitor.poll([run])[0]
    assert status.state == "cancelling" and not status.done
    fake_slurm.set("sacct", sacct_row("160", "CANCELLED by 0"))
    assert monitor.poll([run])[0].state == "cancelled"
    assert [h["state"] for h in run.record()["history"]] == ["created", "submitted", "cancelled"]


def test_watch_rides_out_an_unreachable_controller(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "170")
    fake_slurm.set("sacct", "", "sacct: error: slurmdbd: Connection refused\n", 1)
    fake_slurm.set("squeue", "", "squeue: error: Unable to contact slurm controller\n", 1)
    fake_slurm.set("sacct", sacct_row("170", "COMPLETED"), from_call=3)  # back on the third poll
    result = CliRunner().invoke(main, ["status", run.id, "--watch", "--interval", "0.2"])
    assert result.exit_code == 0, result.output
    assert "slurm unreachable" in result.output and "completed" in result.output
    assert len(fake_slurm.calls("sacct")) == 3  # two failed polls, then the answer
    # without --watch the same failure is exit 1
    fake_slurm.set("sacct", "", "sacct: error: slurmdbd: Connection refused\n", 1, from_call=4)
    assert CliRunner().invoke(main, ["status", run.id]).exit_code == 1


def test_total_steps_found_once_is_kept_in_the_record(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "180")
    fake_slurm.set("sacct", sacct_row("180", "RUNNING"))
    log = run.dir / "logs" / "slurm-180.out"
    log.write_text("Total training steps: 9\n" + "x" * (monitor.TAIL_BYTES + 10) + "\nstep:4 - a:1\n")
    assert monitor.poll([run])[0].progress == "step 4/9"  # total from the head of the file
    assert run.record()["total_steps"] == 9


def test_sweep_members_listed_in_the_record(fake_slurm):
    root = fake_slurm.runs_dir
    p0 = submitted_run(root, "hs", "190")
    sweep = runs.create_run(root, "hs", kind="sweep", members=[p0.id, "hs-gone0"])
    p0.update(sweep={"id": sweep.id, "index": 0})
    fake_slurm.set("sacct", sacct_row("190+0", "PENDING", reason="Resources") + sacct_row("190+1", "PENDING"))
    status = monitor.poll([sweep])[0]
    assert [(p["run_id"], p["state"]) for p in status.points] == [(p0.id, "pending")]


def test_latest_event_ignores_per_node_events():
    phases = [{"phase": "allocated"}, {"phase": "node_started", "node": "dev2"}, {"phase": "head_up"},
              {"phase": "all_joined"}, {"phase": "node_started", "node": "dev3"}]
    assert states.latest_event(phases) == {"phase": "all_joined"}
    driver = {"phase": "driver_started", "what": "preflight"}
    assert states.latest_event(phases + [driver]) == driver
    assert states.latest_event([{"phase": "node_exit"}]) is None


def test_ended_runs_keep_their_final_facts_in_the_record(fake_slurm):
    run = submitted_run(fake_slurm.runs_dir, "grpo", "200")
    (run.dir / "logs" / "slurm-200.out").write_text("Total training steps: 5\nstep:3 - a:1\n")
    fake_slurm.set("sacct", sacct_row("200", "TIMEOUT", nodes="dev[1-2]", elapsed="00:10:00"))
    assert monitor.poll([run])[0].progress == "timeout at step 3/5"
    final = run.record()["final"]
    assert final["slurm_state"] == "TIMEOUT" and final["nodes"] == "dev[1-2]" and final["step"] == 3
    # the overview does not ask Slurm about it again, and still shows the facts
    calls = len(fake_slurm.calls())
    status = monitor.poll([run], skip_ended=True)[0]
    assert len(fake_slurm.calls()) == calls
    assert (status.state, status.progress, status.nodes, status.elapsed) == \
        ("timeout", "timeout at step 3/5", "dev[1-2]", "00:10:00")
    # requeued after all: final facts are dropped
    fake_slurm.set("sacct", sacct_row("200", "PENDING", reason="BeginTime"))
    status = monitor.poll([run])[0]
    assert status.state == "pending" and status.reason == "BeginTime"
    assert "final" not in run.record() and run.record()["state"] == "pending"
    # running again: sacct still carries the old pending reason, which is not shown
    fake_slurm.set("sacct", sacct_row("200", "RUNNING", reason="BeginTime"))
    assert monitor.poll([run])[0].reason is None


def test_logs_of_one_sweep_point(fake_slurm):
    root = fake_slurm.runs_dir
    sweep = runs.create_run(root, "sw", kind="sweep", points=3)
    sweep.set_job_ids(["210"])
    for i in range(3):
        (sweep.dir / "logs" / f"slurm-210_{i}.out").write_text(f"point {i}\n")
    runner = CliRunner()
    assert runner.invoke(main, ["logs", sweep.id, "--task", "1"]).output == "point 1\n"
    fake_slurm.set("sacct", sacct_row("210_2", "COMPLETED"))
    result = runner.invoke(main, ["logs", sweep.id, "--task", "2", "-f", "--check-every", "0.5", "--interval", "0.05"])
    assert result.exit_code == 0 and result.output.endswith("point 2\n")
    assert fake_slurm.calls("sacct")[-1].endswith("--jobs=210")
    het = runs.create_run(root, "hs", kind="sweep")
    member = submitted_run(root, "hs", "220", sweep={"id": het.id, "index": 0})
    (member.dir / "logs" / "slurm-220.out").write_text("member out\n")
    assert runner.invoke(main, ["logs", het.id, "--task", "0"]).output == "member out\n"
    assert runner.invoke(main, ["logs", member.id, "--task", "0"]).exit_code == 2


def test_overview_hides_sweep_points_and_list_marks_them(fake_slurm):
    root = fake_slurm.runs_dir
    sweep = runs.create_run(root, "hs", kind="sweep")
    point = submitted_run(root, "hs", "230", sweep={"id": sweep.id, "index": 0})
    fake_slurm.set("sacct", sacct_row("230", "RUNNING"))
    result = CliRunner().invoke(main, ["status"])
    assert sweep.id in result.output and point.id not in result.output
    listed = CliRunner().invoke(main, ["list"]).output
    assert any(point.id in line and " point " in line for line in listed.splitlines())


def _status_loop(run_dir, n):
    from launcher import runs as r
    from launcher.monitor import poll as m
    for _ in range(n):
        m.poll([r.Run(run_dir)])


def test_concurrent_status_commands_record_a_change_once(fake_slurm):
    import multiprocessing
    run = submitted_run(fake_slurm.runs_dir, "grpo", "240")
    fake_slurm.set("sacct", sacct_row("240", "RUNNING"))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_status_loop, args=(str(run.dir), 5)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert [h["state"] for h in run.record()["history"]] == ["created", "submitted", "running"]
