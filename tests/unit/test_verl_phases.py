"""verl's start-up phases from its log lines (launcher/injob/verl_phases.py) and the per-attempt
timeline the login side builds from the events (launcher/monitor/timeline.py).

The fixture is cut from a real batch log of the H200 (benchmarks/gpu/results/rl-20261201*,
run tiny-heal-dhsk3: verl 0.9.1's GRPO, restarted in place twice): sf's lines, verl's phase
lines with Ray's prefixes and colours, and the noise around them, long lines cut at 400
characters."""
from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from launcher import runs, states
from launcher.cli.app import main
from launcher.injob import verl_phases
from launcher.monitor import timeline

FIXTURE = Path(__file__).parent / "fixtures" / "verl-0.9.1-restart-in-place.log"


def driver_starts(text: str) -> list[list[str]]:
    """The fixture's lines split where sf started a driver (what LogWatch.from_here marks)."""
    parts: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"\[sf [\d:]+\] phase driver_started", line):
            parts.append([])
        elif parts:
            parts[-1].append(line)
    return parts


def test_each_driver_start_of_the_recorded_log_gives_verls_phases_in_order():
    starts = driver_starts(FIXTURE.read_text(errors="replace"))
    assert len(starts) == 3
    found = [verl_phases.parse(lines) for lines in starts]
    assert [e["name"] for e in found[0]] == ["dataloader_ready", "workers_created", "actor_ready", "rollout_ready",
                                              "from_scratch", "ready_to_fit", "first_step"]
    assert found[0][-1] == {"name": "first_step", "label": "first step", "step": 1}
    # after the restarts in place verl resumes from its checkpoint: step 3, then step 6; Ray's output
    # interleaves, so the rollout servers' line comes before or after the resume line
    assert {"name": "resumed", "label": "resumed from step", "step": 3} in found[1]
    assert found[1][-1]["step"] == 4 and found[2][-1]["step"] == 7
    assert {"name": "resumed", "label": "resumed from step", "step": 6} in found[2]
    for events in found[1:]:
        assert {e["name"] for e in events} == {"dataloader_ready", "workers_created", "actor_ready", "rollout_ready",
                                               "resumed", "ready_to_fit", "first_step"}


def test_legacy_trainer_prints_match_too():
    # verl/trainer/ppo/ray_trainer.py (RayPPOTrainer) prints instead of logging
    lines = ["Size of train dataloader: 8, Size of val dataloader: 1", "Total training steps: 8",
             "Load from checkpoint folder: /r/checkpoints/global_step_5", "Setting global step to 5",
             "Resuming from /r/checkpoints/global_step_5", "step:6 - actor/pg_loss:0.1 - critic/score/mean:0.2"]
    assert [(e["name"], e.get("step")) for e in verl_phases.parse(lines)] == [
        ("dataloader_ready", None), ("resumed", 5), ("first_step", 6)]


def test_validation_before_training_is_not_the_first_step():
    # the H200's tiny-learn run (benchmarks/gpu/results/rl-20261203): val_before_train logs step 0 first
    lines = ["\x1b[36m(TaskRunnerV1 pid=6907)\x1b[0m step:0 - val-aux/sf_tiny/reward/mean@1:np.float64(0.4095) - "
             "val-core/sf_tiny/acc/mean@1:np.float64(0.4095)",
             "\x1b[36m(TaskRunnerV1 pid=6907)\x1b[0m step:1 - global_seqlen/min:6492.0 - global_seqlen/max:6492.0"]
    assert [(e["name"], e["step"]) for e in verl_phases.parse(lines)] == [("validated", 0), ("first_step", 1)]


def test_log_watch_reads_only_what_was_appended_and_waits_for_a_whole_line(tmp_path):
    log = tmp_path / "slurm-1.out"
    log.write_text("(TaskRunnerV1 pid=1) INFO:x:train and validate dataloader initialized, earlier attempt\n")
    watch = verl_phases.LogWatch(str(log), log.stat().st_size)  # as from_here, after an earlier driver
    assert watch.new_phases() == []
    with open(log, "a") as handle:
        handle.write("\x1b[36m(TaskRunnerV1 pid=2)\x1b[0m INFO:2026-12-01 22:13:54,842:train and validate data")
    assert watch.new_phases() == []  # half a line: not yet
    with open(log, "a") as handle:
        handle.write("loader initialized, train dataset size: 256\n(TaskRunnerV1 pid=2) step:4 - a:1\n")
    assert [e["name"] for e in watch.new_phases()] == ["dataloader_ready", "first_step"]
    with open(log, "a") as handle:
        handle.write("(TaskRunnerV1 pid=2) step:5 - a:1\n")
    assert watch.new_phases() == []  # each phase once per driver start
    assert verl_phases.LogWatch(None).new_phases() == []


def event(phase, t, **info):
    return {"phase": phase, "time": t, "iso": f"t{t}", "job_id": "7", **info}


def test_timeline_splits_attempts_at_each_start_and_times_sf_and_verl_apart():
    events = [
        event("allocated", 100.0), event("node_started", 100.5, node="n1"), event("head_up", 102.5),
        event("barrier_waiting", 103.0, missing=["n1"]), event("all_joined", 106.0),
        event("driver_started", 106.0, what="launcher.injob.verl_main"),
        event("verl_phase", 170.0, name="dataloader_ready", label="dataloader ready"),
        event("verl_phase", 290.0, name="first_step", label="first step", step=1),
        event("restarted_in_place", 300.0, restart_in_place=1, cause="driver"),
        event("all_joined", 307.0), event("driver_started", 307.0, what="launcher.injob.verl_main"),
        event("verl_phase", 400.0, name="resumed", label="resumed from step", step=3),
        event("verl_phase", 420.0, name="first_step", label="first step", step=4),
        event("requeued", 430.0),
        event("allocated", 490.0, restart=1), event("driver_started", 497.0, restart=1),
    ]
    rows = timeline.attempts(events)
    assert [(r["attempt"], r["restart"], r["restart_in_place"], r["queued_s"]) for r in rows] == [
        (1, 0, None, None), (2, 0, 1, None), (3, 1, None, 60.0)]
    first = rows[0]
    assert [e["phase"] for e in first["events"]] == ["allocated", "head_up", "all_joined", "driver_started",
                                                     "verl_phase", "verl_phase"]  # no node or waiting detail
    assert (first["sf_s"], first["verl_s"], first["to_first_step_s"]) == (6.0, 184.0, 190.0)
    assert first["events"][-1] == {"phase": "verl_phase", "name": "first_step", "label": "verl: first step (step 1)",
                                   "source": "verl", "time": 290.0, "at_s": 190.0, "took_s": 120.0}
    assert (rows[1]["sf_s"], rows[1]["verl_s"]) == (7.0, 113.0)
    assert rows[1]["events"][-3]["label"] == "verl: resumed from step 3"
    assert rows[2]["verl_s"] is None and rows[2]["sf_s"] == 7.0
    text = timeline.format_timeline("r-1", rows)
    assert "attempt 2 (job 7, restart in place 1)" in text
    assert "attempt 3 (job 7, Slurm start 2, queued 60.0 s after the requeue)" in text
    assert "sf to the driver 6.0 s; verl to its first step 184.0 s; first step at 190.0 s" in text


def test_status_timeline_json_and_text_from_the_run_events(tmp_path):
    root = tmp_path / "runs"
    run = runs.create_run(root, "exp")
    for phase, info in [(states.ALLOCATED, {}), (states.DRIVER_STARTED, {"what": "x"}),
                        (states.VERL_PHASE, {"name": "first_step", "label": "first step", "step": 1})]:
        runs.record_phase(run.dir, phase, **info)
    result = CliRunner().invoke(main, ["status", run.id, "--timeline", "--json", "--runs-dir", str(root)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["run"] == run.id and len(doc["attempts"]) == 1
    assert [e["label"] for e in doc["attempts"][0]["events"]] == ["allocated", "driver started",
                                                                  "verl: first step (step 1)"]
    result = CliRunner().invoke(main, ["status", "--timeline", "--runs-dir", str(root)])
    assert result.exit_code == 2 and "--timeline: name the run" in result.output


def test_plot_timeline_writes_a_png_with_a_bar_per_attempt(tmp_path):
    rows = timeline.attempts([event("allocated", 0.0), event("driver_started", 6.0),
                              event("verl_phase", 90.0, name="first_step", label="first step", step=1),
                              event("restarted_in_place", 100.0, restart_in_place=1),
                              event("driver_started", 108.0)])
    out = timeline.plot_timeline(rows, tmp_path / "t.png", title="r-1")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and len(rows) == 2
