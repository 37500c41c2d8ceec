"""The progress watchdog's decision (launcher/injob/watchdog.py): pure functions of the step
records seen and the clock, plus the tail that reads verl's file logger."""
from __future__ import annotations

import json

import pytest

from launcher.injob import watchdog as wd
from launcher.injob.contract import STEP_FACTOR, HealSettings
from launcher.injob.watchdog import Progress

TRAIN = {"step": 1, "data": {"actor/pg_loss": 0.1, "timing_s/step": 3.0}}
VAL = {"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.2}}


def steps(progress: Progress, times: list[float], first: int = 1) -> Progress:
    for i, t in enumerate(times):
        wd.observe(progress, {"step": first + i, "data": {"actor/pg_loss": 0.0}}, t)
    return progress


def test_no_hang_before_the_first_step_allowance_runs_out():
    limits = HealSettings(hang_timeout_s=60, first_step_timeout_s=600)
    p = Progress(started=100.0)
    assert wd.decide(limits, p, 100.0 + 600) is None
    hang = wd.decide(limits, p, 100.0 + 601)
    assert hang and hang.first_step and hang.last_step is None and hang.limit_s == 600
    assert hang.reason().startswith("hang: no training step for 601 s after the driver started")


def test_validation_before_training_is_not_the_first_step():
    limits = HealSettings(hang_timeout_s=60, first_step_timeout_s=600)
    p = Progress(started=0.0)
    wd.observe(p, VAL, 50.0)
    assert p.training_steps == 0 and p.last_record == 50.0
    assert wd.decide(limits, p, 500.0) is None  # 450 s after the val record: still in the allowance
    assert wd.decide(limits, p, 601.0).first_step


def test_hang_after_the_limit_names_the_last_step():
    limits = HealSettings(hang_timeout_s=60, first_step_timeout_s=600)
    p = steps(Progress(started=0.0), [100.0, 102.0, 104.0], first=7)
    assert p.last_step == 9 and p.intervals == [2.0, 2.0]
    assert wd.decide(limits, p, 164.0) is None
    hang = wd.decide(limits, p, 164.5)
    assert hang and not hang.first_step and hang.last_step == 9 and hang.limit_s == 60
    assert hang.reason().startswith("hang: no training step for 60 s after step 9")


def test_slow_steps_stretch_the_limit_to_k_times_the_median():
    limits = HealSettings(hang_timeout_s=60, first_step_timeout_s=600, factor=5)
    p = steps(Progress(started=0.0), [100.0, 130.0, 160.0, 250.0])  # median of 30, 30, 90: 30
    assert wd.limit_s(limits, p.intervals) == 150
    assert wd.decide(limits, p, 250.0 + 149) is None
    assert wd.decide(limits, p, 250.0 + 151).limit_s == 150
    assert wd.limit_s(limits, []) == 60  # no interval yet: the floor


def test_the_median_follows_the_newest_steps():
    p = steps(Progress(started=0.0), [float(i) for i in range(0, 200)])
    assert len(p.intervals) == wd.MAX_INTERVALS


def test_only_a_higher_step_number_resets_the_idle_clock():
    limits = HealSettings(hang_timeout_s=60, first_step_timeout_s=600)
    p = steps(Progress(started=0.0), [10.0], first=4)
    assert wd.observe(p, VAL, 30.0) is False  # validation only (a loop in validation): no progress
    assert wd.observe(p, {"step": 4, "data": {"actor/pg_loss": 0.0}}, 50.0) is False  # step 4 again
    assert wd.observe(p, {"step": 3, "data": {"actor/pg_loss": 0.0}}, 55.0) is False  # an older step
    hang = wd.decide(limits, p, 71.0)
    assert hang and hang.last_step == 4 and hang.idle_s == 61.0
    assert p.training_steps == 1 and p.intervals == []  # repeats are no steps and no intervals
    assert wd.observe(p, {"step": 5, "data": {"actor/pg_loss": 0.0}}, 70.0) is True
    assert wd.decide(limits, p, 100.0) is None and p.last_step == 5


def test_a_record_without_a_step_number_is_progress():
    p = steps(Progress(started=0.0), [10.0])
    assert wd.observe(p, {"data": {"actor/pg_loss": 0.0}}, 20.0) is True and p.last_step == 1


@pytest.mark.parametrize("record, training", [
    (TRAIN, True), (VAL, False), ({"step": 3, "data": {}}, False), ({"step": 3}, False),
    ({"step": 3, "data": {"val-core/x": 1, "timing_s/testing": 2}}, True),
])
def test_training_records(record, training):
    assert wd.is_training_record(record) is training


@pytest.mark.parametrize("overrides, on", [
    (["trainer.logger=[console,file]"], True),
    (['trainer.logger=["console","file"]'], True),
    (["trainer.logger=[console,wandb]"], False),
    ([], False),  # verl's default logger list has no file logger
    (["trainer.logger=[console,file]", "trainer.logger=[console]"], False),  # the last one wins
    (["+trainer.logger=file"], True),
    (["trainer.logger=[console,filesystem]"], False),
])
def test_file_logger_on(overrides, on):
    assert wd.file_logger_on(overrides) is on


def test_limits_from_the_job_contract():
    limits = HealSettings.from_dict({"hang_timeout_s": 20, "first_step_timeout_s": 90})
    assert (limits.hang_timeout_s, limits.first_step_timeout_s, limits.factor) == (20, 90, STEP_FACTOR)
    assert HealSettings.from_dict({}) == HealSettings()


def test_follower_reads_whole_lines_once_and_survives_a_rewrite(tmp_path):
    path = tmp_path / "attempt-0.jsonl"
    f = wd.Follower(str(path))
    assert f.new_records() == []  # not there yet
    path.write_text(json.dumps(TRAIN) + "\n" + '{"step": 2, "da')
    assert [r["step"] for r in f.new_records()] == [1]
    with open(path, "a") as handle:
        handle.write('ta": {"a": 1}}\nnot json\n')
    assert [r["step"] for r in f.new_records()] == [2]
    assert f.new_records() == []
    path.write_text(json.dumps(VAL) + "\n")  # verl opens its file with "wb" when it starts again
    assert [r["step"] for r in f.new_records()] == [0]


def test_watchdog_polls_at_most_once_a_second(tmp_path):
    path = tmp_path / "m.jsonl"
    dog = wd.Watchdog(str(path), HealSettings(hang_timeout_s=5, first_step_timeout_s=10), now=0.0)
    path.write_text(json.dumps(TRAIN) + "\n")
    assert dog.poll(1.0) is None and dog.progress.training_steps == 1
    assert dog.poll(7.0) is not None  # 6 s after step 1
    assert dog.poll(7.5) is None  # within a second of the last look: not looked again


def test_a_failed_driver_is_read_to_its_end(tmp_path):
    """The driver's failure is judged by all it logged (heal.after_driver_failure: no restart
    in place before the first training step), not by what the last poll, up to a second ago, saw."""
    path = tmp_path / "m.jsonl"
    dog = wd.Watchdog(str(path), HealSettings(hang_timeout_s=5, first_step_timeout_s=10), now=0.0)
    assert dog.poll(1.0) is None and dog.progress.training_steps == 0
    path.write_text(json.dumps(TRAIN) + "\n")
    assert dog.poll(1.5) is None and dog.progress.training_steps == 0  # not looked again yet
    assert dog.catch_up(1.6).training_steps == 1


@pytest.mark.parametrize("argv, dumped", [
    (["ray::TaskRunner.run"], True),
    (["ray::WorkerDict.actor_rollout_generate_sequences"], True),
    (["ray::IDLE"], False),
    (["ray::DashboardAgent"], False),
    (["/rt/bin/python", "-m", "launcher.injob.verl_main", "trainer.total_epochs=1"], True),  # the driver
    (["/rt/bin/python", "-m", "launcher.injob", "supervise", "--run-dir", "x"], False),
    (["/rt/bin/python", "-m", "launcher.injob", "node", "--role", "head"], False),
    (["/rt/bin/python", "-m", "ray.scripts.scripts", "start", "--block"], False),
    (["/rt/bin/python", "-m", "launcher.injob.ray_start", "start", "--block"], False),
    (["/rt/bin/python", "-m", "ray.util.client.server", "--address=x"], False),
    (["/rt/bin/python", "/rt/lib/python3.11/site-packages/ray/_private/log_monitor.py"], False),
    (["python3", "/exp/main.py"], True),
    ([], False),
])
def test_which_processes_are_dumped(argv, dumped):
    from launcher.injob import stacks

    assert stacks.wanted(argv) is dumped


def test_restarts_in_place_for_sf_status():
    from launcher.monitor.poll import restarts_in_place

    phases = [{"phase": "driver_started", "job_id": "7"},
              {"phase": "restarted_in_place", "job_id": "7", "cause": "hang", "restart_in_place": 1,
               "resumed_from": 20, "nodes": None, "iso": "2026-12-01T16:31:38.1Z"},
              {"phase": "restarted_in_place", "job_id": "7", "cause": "node", "restart_in_place": 2,
               "resumed_from": 30, "nodes": ["dev4"], "iso": "2026-12-01T16:40:00.0Z"}]
    assert [(r["n"], r["cause"], r["resumed_from"], r["nodes"]) for r in restarts_in_place(phases)] == \
        [(1, "hang", 20, None), (2, "node", 30, ["dev4"])]


def test_metrics_of_a_restart_in_place_come_after_their_attempt(tmp_path):
    from launcher.monitor.metrics import metrics_files

    folder = tmp_path / "metrics"
    folder.mkdir()
    for name in ("attempt-1.jsonl", "attempt-0.2.jsonl", "attempt-0.jsonl", "attempt-0.1.jsonl", "attempt-10.jsonl"):
        (folder / name).write_text("")
    assert [p.name for p in metrics_files(tmp_path)] == [
        "attempt-0.jsonl", "attempt-0.1.jsonl", "attempt-0.2.jsonl", "attempt-1.jsonl", "attempt-10.jsonl"]


def test_py_spy_is_found_beside_python_in_a_pythonpath_bin_or_on_path(tmp_path):
    """The H200 kit carries py-spy with `pip install --target DIR` (DIR/bin/py-spy, DIR on
    PYTHONPATH) and its runtime's python is a wrapper script, so neither "beside
    sys.executable" nor (there, for a reason not found) PATH gave it: the stacks said
    "py-spy is not in the runtime"."""
    from launcher.injob import stacks

    def tool(folder):
        folder.mkdir(parents=True)
        path = folder / "py-spy"
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return str(path)

    carried = tool(tmp_path / "site" / "bin")
    on_path = tool(tmp_path / "tools")
    env = {"PYTHONPATH": f"/nowhere:{tmp_path / 'site'}", "PATH": str(tmp_path / "tools")}
    assert stacks.find_py_spy(env) == carried
    assert stacks.find_py_spy({"PYTHONPATH": "", "PATH": f"/nowhere:{tmp_path / 'tools'}"}) == on_path
    (tmp_path / "tools" / "py-spy").chmod(0o644)  # not executable: not a py-spy
    assert stacks.find_py_spy({"PATH": str(tmp_path / "tools")}) in (None, str(stacks.py_spy_places({})[0] / "py-spy"))
