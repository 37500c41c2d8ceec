"""Sweeps on the real dev cluster: `sf sweep` -> one job array, or throttled hetjobs.

  - 6 points, --max-parallel 2: ONE job array `--array=0-5%2`; at most 2 tasks ran at
    once (sacct's start/end times); every poll of `sf status SWEEP` is one sacct call
    (slurm.CALLS; plus one squeue for ids slurmdbd has not recorded yet); every point ran
    in its own run dir with its own overrides and checkpoint dir; `sf sweep --retry-failed`
    resubmits only the failed points (a new array over their indices), keeping each point's
    earlier attempt in its record;
  - a multi-pool (hetjob) method: 2 points are 2 hetjobs, the second waiting on the first
    (afterany, --max-parallel 1), and `sf status SWEEP --json` shows both.
The driver is the SF_TEST_DRIVER test hook (see launcher/injob/supervise.py), SWEEP_DRIVER in helpers.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import ONE_NODE, TRAIN_AND_TEACH, experiment, poll_until_done, sf, sweep  # noqa: E402


def status_json(sweep_id: str) -> dict:
    proc = sf("status", sweep_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"][0]




def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best


def test_six_point_array_two_at_a_time_one_sacct_per_poll_and_retry_failed(tmp_path):
    from launcher import slurm

    exp = experiment(tmp_path, "sweep6", pools=ONE_NODE)
    out = sweep(exp, "--grid", "rollout_n=2,3,4,5,6,7", "--max-parallel", "2",
                env={"SF_TEST_FAIL_ONCE": "3 6", "SF_TEST_SLEEP": "4"})
    sweep_id, (array_id,) = out["sweep"], out["job_ids"]
    try:
        assert out["mode"] == "array" and len(out["points"]) == 6
        assert [p["job_id"] for p in out["points"]] == [f"{array_id}_{i}" for i in range(6)]
        script = (Path(out["sweep_dir"]) / "job.sbatch").read_text()
        assert "#SBATCH --array=0-5%2\n" in script
        info = slurm.show_job(f"{array_id}_0")
        assert info.get("ArrayTaskThrottle") == "2", info
        t0 = time.monotonic()
        status, polls = poll_until_done(sweep_id, timeout=400)
        took = time.monotonic() - t0
        states = {p["index"]: p["state"] for p in status.points}
        assert states == {0: "completed", 1: "failed", 2: "completed", 3: "completed", 4: "failed",
                          5: "completed"}, states
        # at most 2 at once, from the tasks' recorded start and end times
        tasks = slurm.job_states([array_id])
        spans = [(_ts(tasks[f"{array_id}_{i}"].start), _ts(tasks[f"{array_id}_{i}"].end)) for i in range(6)]
        assert max_overlap(spans) <= 2, spans
        # each point: its own run dir, checkpoint dir and grid value
        manifest = json.loads((Path(out["sweep_dir"]) / "manifest.json").read_text())
        dirs = [Path(p["run_dir"]) for p in manifest["points"]]
        assert len(set(dirs)) == 6
        for i, run_dir in enumerate(dirs):
            args = (run_dir / "driver-args.txt").read_text().splitlines()
            assert f"actor_rollout_ref.rollout.n={i + 2}" in args
            assert f"trainer.default_local_dir={run_dir}/checkpoints" in args
            assert (run_dir / "logs" / f"slurm-{array_id}_{i}.out").is_file()
        print(f"\n6-point array %2: done in {took:.0f}s, {polls} polls of one sacct call each; "
              f"max {max_overlap(spans)} tasks at once")

        retry = sweep("--retry-failed", sweep_id)
        assert [p["index"] for p in retry["points"]] == [1, 4]
        new_array = retry["job_ids"][0]
        assert new_array != array_id and retry["job_ids"][1:] == [array_id]
        assert [p["job_id"] for p in retry["points"]] == [f"{new_array}_1", f"{new_array}_4"]
        status, _ = poll_until_done(sweep_id, timeout=200)
        assert all(p["state"] == "completed" for p in status.points), status.points
        shown = status_json(sweep_id)
        assert len(shown["points"]) == 6 and shown["state"] == "completed", shown
        from launcher import runs

        point1 = runs.Run(dirs[1]).record()
        assert point1["attempts"][0]["job_ids"] == [f"{array_id}_1"] and point1["job_ids"] == [f"{new_array}_1"]
        assert point1["state"] == "completed" and not point1["exit_reason"], point1
        assert "exited with 1" in point1["attempts"][0]["reason"], point1["attempts"]
        print(f"retry-failed: points 1 and 4 as array {new_array} ({retry['points'][0]['job_id']}, ...)")
    finally:
        subprocess.run(["scancel", array_id], check=False)


def test_hetjob_sweep_two_points_throttled_status_shows_both(tmp_path):
    from launcher import slurm

    exp = experiment(tmp_path, "hetsweep", example="distill", pools=TRAIN_AND_TEACH,
                     roles={"actor": "train", "rollout": "train", "teacher": "teach"})
    # the points' own --dependency: a held job, so Slurm still shows it unfulfilled below
    held = subprocess.run(["sbatch", "--parsable", "--hold", "-p", "train", "-o", "/dev/null", "--wrap", "true"],
                          capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    # 4.0: a float for verl's int key; the point runs rollout.n=4, and its label and record say 4
    out = sweep(exp, "--grid", "rollout_n=4.0,8", "--max-parallel", "1", "--dependency", f"afterany:{held}",
                env={"SF_TEST_SLEEP": "2"})
    jobs = [p["job_id"] for p in out["points"]]
    try:
        assert out["mode"] == "hetjobs" and len(jobs) == 2 and out["job_ids"] == []
        assert [p["params"] for p in out["points"]] == [{"rollout_n": 4}, {"rollout_n": 8}], out["points"]
        # the throttled point keeps its own dependency (sbatch's --dependency replaces the script's)
        second = slurm.show_job(jobs[1]).get("Dependency", "")
        assert "afterany:" + jobs[0] in second and f"afterany:{held}" in second, second
        assert f"afterany:{held}" in slurm.show_job(jobs[0]).get("Dependency", "")
        subprocess.run(["scontrol", "release", held], check=True)
        shown = status_json(out["sweep"])
        assert [p["index"] for p in shown["points"]] == [0, 1]
        assert [p["job_id"] for p in shown["points"]] == jobs
        assert all(p["run_id"] for p in shown["points"])
        status, _ = poll_until_done(out["sweep"], timeout=300, touch=True)
        assert [p["state"] for p in status.points] == ["completed", "completed"], status.points
        rows = slurm.job_states(jobs)
        assert _ts(rows[jobs[1]].start) >= _ts(rows[jobs[0]].end)  # one at a time
        shown = status_json(out["sweep"])
        assert [p["state"] for p in shown["points"]] == ["completed", "completed"]
        assert shown["state"] == "completed"
        for point, n in zip(out["points"], (4, 8), strict=True):  # what ran is what the label said
            args = (Path(out["sweep_dir"]).parent / point["run"] / "driver-args.txt").read_text().splitlines()
            assert f"actor_rollout_ref.rollout.n={n}" in args, args
    finally:
        subprocess.run(["scancel", *jobs, held], check=False)
