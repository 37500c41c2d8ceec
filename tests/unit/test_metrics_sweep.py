"""`sf metrics SWEEP` and `sf plot SWEEP` (issue 34): one row and one curve per point of a
sweep, from the points' recorded verl file-logger lines."""

from __future__ import annotations

import json
import struct

import pytest
from click.testing import CliRunner

from launcher import runs
from launcher.cli.app import main
from launcher.monitor import metrics as m


def _write(run_dir, rows, name="attempt-0.jsonl"):
    with open(run_dir / "metrics" / name, "w") as fp:
        for step, data in rows:
            fp.write(json.dumps({"step": step, "data": data}) + "\n")


def _grpo_rows(steps, start, slope, val_every=10):
    rows = []
    for step in range(1, steps + 1):
        rows.append((step, {"critic/score/mean": start + slope * step, "timing_s/step": 5.0,
                            "timing_s/gen": 2.0, "response_length/mean": 20.0, "actor/pg_loss": 0.01}))
        if step % val_every == 0:
            rows.append((step, {"val-core/sf_tiny/reward/mean@1": 0.5 + slope * step}))
    return [(0, {"val-core/sf_tiny/reward/mean@1": 0.5})] + rows


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """A sweep of three points over actor_lr: two logged 40 steps (one requeued at step 30),
    the third has logged nothing yet."""
    root = tmp_path / "runs"
    monkeypatch.setenv("SF_RUNS_DIR", str(root))
    lrs = [2e-5, 1e-4, 3e-4]
    sw = runs.create_run(root, "tiny-lr", kind="sweep", mode="array",
                         grid=[{"key": "actor_rollout_ref.actor.optim.lr", "values": lrs}],
                         points=[{"index": i, "params": {"actor_rollout_ref.actor.optim.lr": v}}
                                 for i, v in enumerate(lrs)], members=[])
    members = []
    for i, lr in enumerate(lrs):
        r = runs.create_run(root, "tiny-lr", sweep={"id": sw.id, "index": i},
                            params={"actor_rollout_ref.actor.optim.lr": lr})
        members.append(r)
    sw.update(members=[r.id for r in members])
    _write(members[0].dir, _grpo_rows(40, 0.30, 0.001))
    rows = _grpo_rows(40, 0.30, 0.005)
    _write(members[1].dir, [r for r in rows if r[0] <= 30])
    _write(members[1].dir, [r for r in rows if r[0] >= 29], name="attempt-1.jsonl")  # requeued
    members[1].add_state("completed")
    return sw, members


def test_point_summary_reward_and_validation(sweep):
    sw, members = sweep
    points = m.load_sweep_points(sw.dir, sw.raw_record())
    assert [p.index for p in points] == [0, 1, 2]
    assert points[2].metrics is None  # nothing logged yet
    row = m.point_summary(points[1])
    assert row["steps"] == 40 and row["score"] == "critic/score/mean"
    assert row["last"] == pytest.approx(0.50) and row["best"] == pytest.approx(0.50) and row["best_step"] == 40
    assert row["validation"] == "val-core/sf_tiny/reward/mean@1"
    assert (row["val_first"], row["val_first_step"]) == (pytest.approx(0.5), 0)
    assert (row["val_last"], row["val_last_step"]) == (pytest.approx(0.7), 40)
    assert row["state"] == "completed"
    empty = m.point_summary(points[2])
    assert empty["steps"] == 0 and empty["last"] is None and empty["val_last"] is None


def test_sft_sweep_scores_the_loss_lowest_best(tmp_path):
    run = runs.create_run(tmp_path, "sft")
    _write(run.dir, [(1, {"train/loss": 3.0}), (2, {"train/loss": 1.0}), (3, {"train/loss": 1.5}),
                     (3, {"val/loss": 1.2})])
    row = m.point_summary(m.SweepPoint(0, run.id, {"optim.lr": 1e-4}, "completed", m.read_metrics(run.dir)))
    assert row["score"] == "train/loss" and row["best"] == 1.0 and row["best_step"] == 2 and row["last"] == 1.5
    assert row["validation"] == "val/loss" and row["val_last"] == pytest.approx(1.2)


def test_cli_metrics_sweep_table(sweep):
    sw, members = sweep
    res = CliRunner().invoke(main, ["metrics", sw.id])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"sweep {sw.id}: 3 points; last/best: critic/score/mean; validation: val-core/")
    assert "actor_rollout_ref.actor.optim.lr" in lines[1] and "best (step)" in lines[1]
    row0 = next(line for line in lines if line.startswith("0 "))
    row1 = next(line for line in lines if line.startswith("1 "))
    assert members[0].id in row0 and " 2e-05 " in row0 and " 40 " in row0
    assert "0.0001" in row1 and " 40 " in row1 and "0.5 (40)" in row1 and "0.5 -> 0.7 (0 -> 40)" in row1
    row2 = next(line for line in lines if line.startswith("2 "))
    assert row2.split()[-1] == "-" and " 0 " in row2
    assert lines[-1] == "(no step logged yet by point 2)"


def test_cli_metrics_sweep_json(sweep):
    sw, members = sweep
    res = CliRunner().invoke(main, ["metrics", sw.id, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["sweep"] == sw.id and data["grid_keys"] == ["actor_rollout_ref.actor.optim.lr"]
    first, second, third = data["points"]
    assert first["run"] == members[0].id and first["params"] == {"actor_rollout_ref.actor.optim.lr": 2e-5}
    assert second["data"]["critic/score/mean"][-1] == [40, pytest.approx(0.5)]
    assert second["data"]["critic/score/mean"][29] == [30, pytest.approx(0.45)]  # the requeue's redo wins once
    assert len(second["data"]["critic/score/mean"]) == 40
    assert third["steps"] == 0 and third["data"] == {}


def test_plain_run_metrics_unchanged(sweep):
    sw, members = sweep
    res = CliRunner().invoke(main, ["metrics", members[0].id])
    assert res.exit_code == 0 and res.output.startswith(f"run {members[0].id}: 40 steps")


def test_cli_plot_sweep_one_png(sweep, tmp_path):
    pytest.importorskip("matplotlib")
    sw, _ = sweep
    out = tmp_path / "sweep.png"
    res = CliRunner().invoke(main, ["plot", sw.id, "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["sweep"] == sw.id and [p["steps"] for p in data["points"]] == [40, 40, 0]
    raw = out.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    assert width == 800 and height == 4 * 300  # four panels: reward, time, length, loss


def test_plot_sweep_nothing_logged(tmp_path):
    pytest.importorskip("matplotlib")
    point = m.SweepPoint(0, "r", {}, "pending", None)
    with pytest.raises(Exception, match="no point of the sweep has logged"):
        m.plot_sweep([point], [], tmp_path / "x.png")


# the first line verl 0.9.1 logged on the H200 (tiny-learn, val_before_train): its validation
# core variable is acc (the reward loop returns it), the reward itself sits in val-aux
H200_STEP0 = ('{"step":0,"data":{"val-aux/sf_tiny/reward/mean@1":0.40951874444726855,'
              '"val-core/sf_tiny/acc/mean@1":0.4095187364718615,"val-aux/sf_tiny/acc_success_only/mean@1":'
              '0.4095187364718615,"val-aux/num_turns/min":2,"val-aux/num_turns/max":2,"val-aux/num_turns/mean":2.0}}')


def test_verl_091_validation_is_val_core_acc(tmp_path, monkeypatch):
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path))
    run = runs.create_run(tmp_path, "tiny-learn")
    with open(run.dir / "metrics" / "attempt-0.jsonl", "w") as fp:
        fp.write(H200_STEP0 + "\n")
        fp.write(json.dumps({"step": 1, "data": {"critic/score/mean": 0.3188}}) + "\n")
        fp.write(json.dumps({"step": 10, "data": {"critic/score/mean": 0.70,
                                                  "val-core/sf_tiny/acc/mean@1": 0.4373}}) + "\n")
    data = m.read_metrics(run.dir)
    assert data.key_series() == ["critic/score/mean", "val-core/sf_tiny/acc/mean@1"]
    row = m.point_summary(m.SweepPoint(0, run.id, {}, "completed", data))
    assert row["validation"] == "val-core/sf_tiny/acc/mean@1"
    assert (row["val_first"], row["val_last"]) == (pytest.approx(0.4095, abs=1e-4), pytest.approx(0.4373))
    res = CliRunner().invoke(main, ["metrics", run.id])
    assert res.exit_code == 0 and "val-core/sf_tiny/acc/mean@1" in res.output
