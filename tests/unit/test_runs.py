"""Run records: ids, atomic writes, locked read-modify-write, phases from the job."""
from __future__ import annotations

import json
import multiprocessing
import os
import re

import pytest

from launcher import runs
from launcher.errors import SpecError


def test_run_ids_are_short_readable_and_unique(tmp_path):
    ids = {runs.create_run(tmp_path, "My GRPO_exp!").id for _ in range(200)}
    assert len(ids) == 200
    for run_id in ids:
        assert re.fullmatch(r"my-grpo-exp-[a-z2-7]{5}", run_id), run_id
    assert re.fullmatch(r"run-[a-z2-7]{5}", runs.new_run_id("!!!"))
    assert len(runs.new_run_id("x" * 200)) <= 46


def test_create_run_collision_retries(tmp_path, monkeypatch):
    taken = runs.create_run(tmp_path, "exp").id
    suffixes = iter([taken, taken, "exp-zzzzz"])
    monkeypatch.setattr(runs, "new_run_id", lambda experiment: next(suffixes))
    assert runs.create_run(tmp_path, "exp").id == "exp-zzzzz"


def test_create_run_layout_and_record(tmp_path):
    run = runs.create_run(tmp_path / "nested" / "runs", "grpo", sweep={"id": "s-abcde", "index": 3})
    assert run.dir.is_dir() and (run.dir / "logs").is_dir() and (run.dir / "checkpoints").is_dir()
    rec = run.record()
    assert rec["id"] == run.id and rec["experiment"] == "grpo" and rec["kind"] == "run"
    assert rec["state"] == "created" and rec["history"][0]["state"] == "created"
    assert rec["job_ids"] == [] and rec["requeue_count"] == 0 and rec["exit_reason"] is None
    assert rec["sweep"] == {"id": "s-abcde", "index": 3}
    assert rec["phases"] == []
    assert rec["created"].endswith("Z")
    sweep = runs.create_run(tmp_path, "grpo", kind="sweep", members=[])
    assert sweep.record()["kind"] == "sweep" and sweep.record()["members"] == []
    with pytest.raises(ValueError):
        runs.create_run(tmp_path, "grpo", kind="bogus")


def test_state_history_and_job_ids(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    run.add_state("submitted", job_id="12")
    run.set_job_ids([12])
    run.update(total_steps=10)
    rec = run.record()
    assert rec["state"] == "submitted"
    assert [h["state"] for h in rec["history"]] == ["created", "submitted"]
    assert rec["history"][1]["job_id"] == "12" and rec["history"][1]["time"].endswith("Z")
    assert rec["job_ids"] == ["12"] and rec["total_steps"] == 10
    assert "phases" not in json.loads((run.dir / "record.json").read_text())


def test_mutate_returns_new_dict_or_edits_in_place(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    run.mutate(lambda r: r.update(a=1))
    run.mutate(lambda r: {**r, "b": 2})
    rec = run.record()
    assert rec["a"] == 1 and rec["b"] == 2


def test_open_run_exact_prefix_and_close_ids(tmp_path):
    a = runs.create_run(tmp_path, "alpha")
    b = runs.create_run(tmp_path, "beta")
    assert runs.open_run(tmp_path, a.id) == a
    assert runs.open_run(tmp_path, "bet") == b  # unique prefix
    with pytest.raises(SpecError) as err:
        runs.open_run(tmp_path, a.id[:-1] + ("x" if a.id[-1] != "x" else "y"))
    assert a.id in str(err.value) and err.value.exit_code == 2
    with pytest.raises(SpecError) as err:
        runs.open_run(tmp_path, "zzzzzz-qqqqq")
    assert "sf list" in str(err.value)
    with pytest.raises(SpecError):
        runs.open_run(tmp_path, "../" + a.id)
    with pytest.raises(SpecError) as err:
        runs.open_run(tmp_path / "empty", "x")
    assert "no runs" in str(err.value)


def test_open_run_ambiguous_prefix_names_candidates(tmp_path):
    a = runs.create_run(tmp_path, "same")
    b = runs.create_run(tmp_path, "same")
    with pytest.raises(SpecError) as err:
        runs.open_run(tmp_path, "same-")
    assert "several" in str(err.value) and a.id in str(err.value) and b.id in str(err.value)


def test_list_runs_newest_first_and_skips_junk(tmp_path):
    made = [runs.create_run(tmp_path, f"e{i}") for i in range(5)]
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    broken = tmp_path / "broken-aaaaa"
    broken.mkdir()
    (broken / "record.json").write_text("{not json")
    assert runs.list_runs(tmp_path) == list(reversed(made))
    assert runs.list_runs(tmp_path / "missing") == []


def test_sweep_members_by_index(tmp_path):
    sweep = runs.create_run(tmp_path, "sw", kind="sweep")
    p1 = runs.create_run(tmp_path, "sw", sweep={"id": sweep.id, "index": 1})
    p0 = runs.create_run(tmp_path, "sw", sweep={"id": sweep.id, "index": 0})
    runs.create_run(tmp_path, "other")
    assert runs.sweep_members(tmp_path, sweep.id) == [p0, p1]


def test_write_text_is_atomic_and_leaves_no_temp(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    run.write_text("job.sbatch", "#!/bin/bash\necho hi\n")
    run.write_json("plan.json", {"a": [1, 2]})
    run.write_text("logs/sub/x.txt", "deep")
    assert run.read_text("job.sbatch") == "#!/bin/bash\necho hi\n"
    assert run.read_json("plan.json") == {"a": [1, 2]}
    assert run.read_text("logs/sub/x.txt") == "deep"
    assert run.read_text("nope") is None
    assert not [p for p in run.dir.rglob("*.tmp")]


def test_crash_mid_write_leaves_old_record(tmp_path, monkeypatch):
    run = runs.create_run(tmp_path, "grpo")
    run.update(value="old")

    def boom(fd):
        raise OSError("disk gone")

    monkeypatch.setattr(runs.os, "fsync", boom)
    with pytest.raises(OSError):
        run.update(value="new")
    monkeypatch.undo()
    assert run.record()["value"] == "old"
    assert not list(run.dir.glob(".record.json.*.tmp"))


def _die_mid_write(run_dir):
    run = runs.Run(run_dir)
    real_fsync = os.fsync

    def die(fd):
        real_fsync(fd)
        os._exit(9)  # killed after the temp file is written, before the rename

    os.fsync = die
    run.update(value="new", pad="x" * 100000)


def test_process_killed_mid_write_leaves_old_record(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    run.update(value="old")
    proc = multiprocessing.get_context("fork").Process(target=_die_mid_write, args=(str(run.dir),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 9
    rec = run.record()
    assert rec["value"] == "old" and "pad" not in rec
    run.update(value="after")  # the lock was released with the dead process
    assert run.record()["value"] == "after"


def _hammer(run_dir, key, n):
    run = runs.Run(run_dir)
    for i in range(n):
        def apply(rec, i=i):
            rec.setdefault("counts", {}).setdefault(key, 0)
            rec["counts"][key] += 1
            rec.setdefault("seen", []).append(f"{key}{i}")
        run.mutate(apply)
        if i % 50 == 0:
            run.add_state(f"s-{key}")


def test_concurrent_updates_from_processes_lose_nothing(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(str(run.dir), key, 200)) for key in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    rec = run.record()
    assert rec["counts"] == {"a": 200, "b": 200}
    assert len(rec["seen"]) == 400 and len(set(rec["seen"])) == 400
    assert len(rec["history"]) == 1 + 8


def test_record_phase_and_read_phases(tmp_path, monkeypatch):
    run = runs.create_run(tmp_path, "grpo")
    monkeypatch.setenv("SLURMD_NODENAME", "dev3")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    event = runs.record_phase(run.dir, "allocated", nodes=2)
    assert event["node"] == "dev3" and event["job_id"] == "42" and event["restart"] == 1
    with open(run.dir / "events.jsonl", "a") as f:
        f.write('{"phase": "torn", "ti')  # a torn line (no newline), then more events
        f.write("\nnot json\n")
    runs.record_phase(run.dir, "ray_up")
    phases = runs.read_phases(run.dir)
    assert [p["phase"] for p in phases] == ["allocated", "ray_up"]
    assert phases[0]["nodes"] == 2 and isinstance(phases[0]["time"], float)
    assert phases[0]["iso"].endswith("Z")
    rec = run.record()
    assert [p["phase"] for p in rec["phases"]] == ["allocated", "ray_up"]
    assert rec["requeue_count"] == 1  # from SLURM_RESTART_COUNT of the events
    assert runs.read_phases(tmp_path / "nope") == []


def _append_phases(run_dir, node, n):
    os.environ["SLURMD_NODENAME"] = node
    for i in range(n):
        runs.record_phase(run_dir, "tick", i=i, pad="y" * 200)


def test_record_phase_from_many_processes_keeps_every_line(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_phases, args=(str(run.dir), f"dev{k}", 100)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    phases = runs.read_phases(run.dir)
    assert len(phases) == 400
    assert {p["node"] for p in phases} == {"dev0", "dev1", "dev2", "dev3"}


def test_reason_file_and_requeued_phases_merge_into_record(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    run.write_text("reason", "worker dev4 died during phase ray_up\n")
    runs.record_phase(run.dir, "requeued")
    runs.record_phase(run.dir, "requeued")
    rec = run.record()
    assert rec["exit_reason"] == "worker dev4 died during phase ray_up"
    assert rec["requeue_count"] == 2
    run.update(exit_reason="explicit")
    assert run.record()["exit_reason"] == "explicit"


def test_restart_strings_from_the_batch_script_trap(tmp_path):
    run = runs.create_run(tmp_path, "grpo")
    runs.record_phase(run.dir, "requeued", restart="1", signal="USR1")  # sf_phase passes strings
    runs.record_phase(run.dir, "odd", restart="not-a-number")
    runs.record_phase(run.dir, "requeue_refused", restarts="3", max_requeues="3")
    assert run.record()["requeue_count"] == 1


def test_run_ids_for_completion_are_the_callers_own_in_a_shared_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    mine = runs.create_run(shared, "grpo")
    (shared / "grpo-planted").mkdir()
    (shared / "grpo-planted" / runs.RECORD).write_text("{}")
    os.chown(shared / "grpo-planted", 65534, 65534)
    assert runs.run_ids(shared) == [mine.id]
