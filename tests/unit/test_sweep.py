"""Sweeps, the pure parts: grid parsing and expansion, the manifest, the array directive and
rendering, the hetjob throttle, failed points; supervisor's manifest/restart handling."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import SpecError
from launcher.injob.contract import shown_digest
from launcher.render.script import array_directive, plan_json, render_script
from launcher.submit import pipeline, sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import SITE, VENV, het_plan, make_plan  # noqa: E402

# --- grid -----------------------------------------------------------------------------------

def test_parse_and_expand_grid_last_key_fastest():
    grid = sweep.parse_grid(["actor_lr=1e-6,3e-6", "rollout_n=5,8,16"])
    assert grid == [("actor_lr", ["1e-6", "3e-6"]), ("rollout_n", ["5", "8", "16"])]
    points = sweep.expand(grid)
    assert len(points) == 6
    assert points[0] == {"actor_lr": "1e-6", "rollout_n": "5"}
    assert points[1] == {"actor_lr": "1e-6", "rollout_n": "8"}
    assert points[3] == {"actor_lr": "3e-6", "rollout_n": "5"}


def test_grid_values_escape_commas_and_hydra_keys():
    grid = sweep.parse_grid([r"data.prompt_key=a\,b,c", "+trainer.x=1"])
    assert grid == [("data.prompt_key", ["a,b", "c"]), ("+trainer.x", ["1"])]
    assert sweep.split_values(r"x\\,y") == ["x\\", "y"]


@pytest.mark.parametrize("items,field", [
    ([], "--grid"),
    (["rollout_n"], "--grid"),
    (["rollout_n="], "--grid rollout_n"),
    (["rollout_n=5,,8"], "--grid rollout_n"),
    (["rollout_n=5,5"], "--grid rollout_n"),
    (["rollout_n=5", "rollout_n=8"], "--grid rollout_n"),
    (["bad key=1"], "--grid"),
    (["a.b=x\ny"], "--grid a.b"),
])
def test_bad_grids_name_the_field(items, field):
    with pytest.raises(SpecError) as err:
        sweep.parse_grid(items)
    assert err.value.field == field


def test_too_many_points_refused():
    with pytest.raises(SpecError, match="at most"):
        sweep.expand([("a", [str(i) for i in range(100)]), ("b", [str(i) for i in range(11)])])


def test_point_flags_append_grid_after_user_sets():
    flags = {"set": ["rollout_n=4", "a.b=1"], "model": "/m"}
    out = sweep.point_flags(flags, {"rollout_n": "8"})
    assert out["set"] == ["rollout_n=4", "a.b=1"] and out["point"] == ["rollout_n=8"] and out["model"] == "/m"
    assert flags["set"] == ["rollout_n=4", "a.b=1"]  # not changed in place


def test_max_parallel():
    assert sweep.check_max_parallel(None, 6) == 6
    assert sweep.check_max_parallel(2, 6) == 2
    assert sweep.check_max_parallel(10, 6) == 6
    for bad in (0, -1, True, "2"):
        with pytest.raises(SpecError):
            sweep.check_max_parallel(bad, 6)


# --- array directive, throttle ---------------------------------------------------------------

def test_array_directive():
    assert array_directive(6, 2) == "--array=0-5%2"
    assert array_directive(1, None) == "--array=0"
    assert array_directive(6, None) == "--array=0-5"
    assert array_directive(6, 2, indices=[4, 1, 1]) == "--array=1,4%2"
    with pytest.raises(SpecError):
        array_directive(6, 2, indices=[6])
    with pytest.raises(SpecError):
        array_directive(0, 2)
    with pytest.raises(SpecError):
        array_directive(6, 0)


def test_hetjob_throttle_point_i_waits_for_i_minus_k():
    ids = ["10", "11", None, "13", "14"]
    deps = [sweep.dependency_for(i, ids[:i], 2) for i in range(5)]
    # 2 was never submitted: 4 waits for the one before it in its chain (0), not for nobody
    assert deps == [None, None, "afterany:10", "afterany:11", "afterany:10"]
    assert [sweep.dependency_for(i, ids[:i], 1) for i in range(3)] == [None, "afterany:10", "afterany:11"]


def test_throttle_joins_the_points_own_dependency():
    """sbatch's command-line --dependency replaces the script's: the throttle of a hetjob
    point carries the point's singleton / --after / --dependency too, read from its Plan
    (pipeline.own_dependency: singleton for a run's own job, none for an array's tasks)."""
    assert pipeline.own_dependency("afterok:5", array=False) == "afterok:5,singleton"
    assert pipeline.own_dependency("afterok:5,singleton", array=False) == "afterok:5,singleton"
    assert pipeline.own_dependency(None, array=False) == "singleton"
    assert pipeline.own_dependency(None, array=True) is None
    assert pipeline.own_dependency("afterok:5", array=True) == "afterok:5"
    assert sweep.throttled_dependency("afterok:5,singleton", "afterany:10") == "afterok:5,singleton,afterany:10"
    assert sweep.throttled_dependency(None, "afterany:10") == "afterany:10"
    assert sweep.throttled_dependency("singleton", None) is None  # no throttle: the script's line stands
    with pytest.raises(SpecError):
        sweep.throttled_dependency("afterok:1?afterok:2", "afterany:10")


def test_failed_points():
    points = [{"index": 0, "state": "completed"}, {"index": 1, "state": "failed"},
              {"index": 2, "state": "running"}, {"index": 3, "state": "timeout"},
              {"index": 4, "state": "cancelled"}, {"index": 5, "state": "submit_failed"},
              {"index": 6, "state": "NODE_FAIL"}]
    assert sweep.failed_points(points) == [1, 3, 5, 6]


# --- manifest ---------------------------------------------------------------------------------

def _points(n=3):
    return [{"index": i, "run_id": f"g-{i}", "run_dir": f"/runs/g-{i}", "checkpoint_dir": f"/runs/g-{i}/checkpoints",
             "params": {"rollout_n": str(i + 2)}, "overrides": [f"actor_rollout_ref.rollout.n={i + 2}", "x='a b'"],
             "check_paths": ["/m"]} for i in range(n)]


def test_manifest_orders_points_and_keeps_everything_a_task_needs():
    pts = _points()
    m = sweep.manifest("g-sweep", list(reversed(pts)))
    assert m["sweep"] == "g-sweep" and [p["index"] for p in m["points"]] == [0, 1, 2]
    assert m["points"][1] == pts[1]
    json.dumps(m)


def test_manifest_refuses_gaps_and_nul():
    pts = _points()
    with pytest.raises(ValueError):
        sweep.manifest("s", pts[1:])
    pts[0]["overrides"] = ["a=\x00"]
    with pytest.raises(SpecError):
        sweep.manifest("s", pts)


def write_plan(run_dir, **kw) -> None:
    """The run dir's plan.json, as the pipeline writes it (the job reads its settings there)."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "plan.json").write_text(plan_json(make_plan(run_dir=str(run_dir), **kw), SITE, VENV))


def test_supervisor_takes_its_point_from_the_manifest(tmp_path):
    from launcher.injob import supervise

    pts = _points()
    for p in pts:
        p["run_dir"] = str(tmp_path / p["run_id"])
        write_plan(p["run_dir"])
    (tmp_path / "manifest.json").write_text(json.dumps(sweep.manifest("s", pts)))
    shown = shown_digest(make_plan().entry, ())  # an array task's script shows the entry only
    plan = supervise.read_contract(supervise.parse_args([
        "--run-dir", pts[2]["run_dir"], "--manifest", str(tmp_path / "manifest.json"), "--task", "2",
        "--shown", shown])).plan
    assert list(plan.overrides) == pts[2]["overrides"] and plan.checkpoint_dir == pts[2]["checkpoint_dir"]
    assert plan.paths_to_check == ("/m",) and plan.entry == make_plan().entry
    with pytest.raises(SystemExit):  # a run dir that is not the task's point
        supervise.read_contract(supervise.parse_args(["--run-dir", pts[1]["run_dir"], "--manifest",
                                                      str(tmp_path / "manifest.json"), "--task", "2",
                                                      "--shown", shown]))
    out = subprocess.run([sys.executable, "-m", "launcher.injob", "point", str(tmp_path / "manifest.json"), "1"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == pts[1]["run_dir"]
    out = subprocess.run([sys.executable, "-m", "launcher.injob", "point", str(tmp_path / "manifest.json"), "7"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "no point 7" in out.stderr


# --- rendering --------------------------------------------------------------------------------

def test_array_script_directives_and_per_task_run_dir():
    script = render_script(make_plan(), SITE, VENV, array={"size": 6, "max_parallel": 2, "sweep_dir": "/runs/g-sweep",
                                                           "sweep_id": "g-sweep"})
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "#SBATCH --array=0-5%2\n" in script
    assert "#SBATCH --output=/runs/g-sweep/logs/slurm-%A_%a.out\n" in script
    assert "SF_RUN_DIR=/runs/grpo-abcde" not in script  # no single run dir: each task reads its own
    assert 'SF_RUN_DIR="$("$SF_PYTHON" -m launcher.injob point "$SF_MANIFEST" "$SF_TASK")" || exit 2' in script
    assert '--manifest "$SF_MANIFEST"' in script and '--task "$SF_TASK"' in script
    assert "trainer.nnodes=2" not in script  # from the manifest
    assert "--max-requeues" not in script  # the requeue bounds are in each point's plan.json
    # the task id is checked before it is used in any path
    assert script.index('[[ ! "$SF_TASK" =~ ^[0-9]+$ ]]') < script.index('SF_RUN_DIR="$(')


def test_array_of_hetjobs_refused_and_bad_sweep_dir_refused():
    with pytest.raises(SpecError, match="no arrays of heterogeneous jobs"):
        render_script(het_plan(), SITE, VENV, array={"size": 2, "max_parallel": 1, "sweep_dir": "/runs/s",
                                                    "sweep_id": "s"})
    with pytest.raises(SpecError) as err:
        render_script(make_plan(), SITE, VENV, array={"size": 2, "max_parallel": 1, "sweep_dir": "/runs/a b",
                                                      "sweep_id": "s"})
    assert err.value.field == "sweep_dir"
    with pytest.raises(SpecError):
        render_script(make_plan(), SITE, VENV, array={"size": 2, "max_parallel": 1, "sweep_dir": "/runs/s",
                                                      "sweep_id": "s;rm -rf /"})


def test_plain_job_gets_the_requeue_bound_and_lead_from_plan_json():
    script = render_script(make_plan(), SITE, VENV)
    assert "#SBATCH --array" not in script and "SF_MANIFEST" not in script
    job = json.loads(plan_json(make_plan(), SITE, VENV))["job"]
    assert job["max_requeues"] == 2 and job["requeue_lead"] == 90  # the USR1 lead (60 s) + 30 s
    from dataclasses import replace

    from launcher.plan import SlurmOptions

    plan = replace(make_plan(), slurm=SlurmOptions(requeue=False, max_requeues=0))
    off = json.loads(plan_json(plan, SITE, VENV))["job"]
    assert off["requeue_lead"] == 0 and off["max_requeues"] == 0
    assert "trap sf_on_usr1" not in render_script(plan, SITE, VENV)


def test_requeue_trap_bound_in_bash(tmp_path):
    """The trap, run by bash with a fake scontrol and phase recorder: below the bound it
    requeues the job (the het leader when there is one), at the bound it refuses and writes
    the reason."""
    script = render_script(het_plan(), SITE, VENV)
    trap = script[script.index("sf_on_usr1() {"):script.index("trap sf_on_usr1 USR1")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"scontrol $*\" >> {tmp_path}/calls\n")
    (bin_dir / "scontrol").chmod(0o755)
    prog = (f'SF_MAX_REQUEUES=2; SF_RUN_DIR={tmp_path}; SF_PYTHON=:\n'
            f'sf_phase() {{ echo "phase $*" >> {tmp_path}/calls; }}\n{trap}\nsf_on_usr1\n')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "41", "SLURM_HET_JOB_ID": "40"}
    subprocess.run(["bash", "-c", prog], env={**env, "SLURM_RESTART_COUNT": "1"}, check=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["phase requeued restart=2 signal=USR1", "scontrol requeue 40"]
    (tmp_path / "calls").unlink()
    subprocess.run(["bash", "-c", prog], env={**env, "SLURM_RESTART_COUNT": "2"}, check=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["phase requeue_refused restarts=2 max_requeues=2 signal=USR1"]


def test_wall_time_export_leaves_room_for_the_requeue(monkeypatch, tmp_path):
    from launcher.injob import bringup, supervise
    from launcher.plan import SlurmOptions

    write_plan(tmp_path, slurm=SlurmOptions(time="00:20:00", signal_lead_s=60, max_requeues=1))
    shown = shown_digest(make_plan().entry, make_plan().overrides)
    contract = supervise.read_contract(supervise.parse_args(["--run-dir", str(tmp_path), "--shown", shown]))
    assert contract.requeue_lead == 90 and contract.max_requeues == 1
    attempt = supervise.Supervisor(contract, str(tmp_path)).attempt
    attempt.end_ts = 10_000.0
    attempt.restart = 0
    assert attempt.expiration() == 10_000.0 - 90  # verl saves before the USR1 requeue
    attempt.restart = 1
    assert attempt.expiration() == 10_000.0  # at the bound: it runs to the end
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert bringup.restart_count() == 2


def test_cli_bad_point_fails_whole_sweep_before_anything(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from launcher.cli.app import main

    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site.yaml"
    text = (repo / "site" / "dev.yaml").read_text().replace("/var/lib/sfdev/runs", str(tmp_path / "runs"))
    site.write_text(text)
    monkeypatch.chdir(repo)
    res = CliRunner().invoke(main, ["sweep", "examples/grpo", "--site", str(site),
                                    "--grid", "actor_lr=1e-6,abc", "--max-parallel", "1"])
    assert res.exit_code == 2
    assert "point 1 (actor_lr=abc)" in res.output and "knobs.actor_lr" in res.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    res = CliRunner().invoke(main, ["sweep", "examples/grpo", "--site", str(site), "--grid", "rollout_n=4",
                                    "--max-parallel", "x"])
    assert res.exit_code == 2 and "--max-parallel" in res.output


RUNTIME_REGISTRY = """verl:
  "0.9.1":
    kind: venv
    path: {path}
    overrides:
      ppo_trainer:
        - actor_rollout_ref.model.use_remove_padding=False
        - +actor_rollout_ref.model.override_config.attn_implementation=sdpa
"""


@pytest.mark.parametrize("experiment, grid, point_set", [
    ("examples/grpo", "rollout_n=3,4", "rollout_n=4"),        # a job array
    ("examples/distill", "actor_lr=1e-6,2e-6", "actor_lr=2e-6"),  # hetjobs: one script per point
])
def test_sweep_point_is_what_sf_submit_sends(tmp_path, monkeypatch, experiment, grid, point_set):
    """One path: a sweep point is prepared by the same pipeline as `sf submit --set` of its
    grid values: the same overrides (the runtime's default overrides included), the same
    provenance, and for a hetjob sweep the same batch script."""
    from click.testing import CliRunner

    from launcher.cli.app import main

    repo = Path(__file__).resolve().parents[2]
    registry = tmp_path / "runtimes.yaml"
    registry.write_text(RUNTIME_REGISTRY.format(path=tmp_path / "rt"))
    site = tmp_path / "site.yaml"
    text = (repo / "site" / "dev.yaml").read_text().replace("/var/lib/sfdev/runs", str(tmp_path / "runs"))
    site.write_text(text.replace("runtime_registry: /var/lib/sfdev/runtimes.yaml", f"runtime_registry: {registry}"))
    monkeypatch.delenv("FORGE_RUNTIME_REGISTRY_FILE", raising=False)
    monkeypatch.delenv("FORGE_IMAGE_VERL", raising=False)
    monkeypatch.chdir(repo)
    swept = CliRunner().invoke(main, ["sweep", experiment, "--site", str(site), "--grid", grid,
                                      "--dry-run", "--json"])
    assert swept.exit_code == 0, swept.output
    point = json.loads(swept.stdout)["points"][1]
    sent = CliRunner().invoke(main, ["submit", experiment, "--site", str(site), "--set", point_set,
                                     "--dry-run", "--json"])
    assert sent.exit_code == 0, sent.output
    submitted = json.loads(sent.stdout)
    assert "actor_rollout_ref.model.use_remove_padding=False" in point["overrides"]
    assert point["overrides"] == submitted["overrides"]
    # the same provenance, but the grid's key: the sweep point is its own layer (above --set)
    key = next(o.split("=", 1)[0] for o in submitted["overrides"]
               if submitted["sources"][submitted["overrides"].index(o)] == "--set")
    at = submitted["overrides"].index(next(o for o in submitted["overrides"] if o.startswith(key + "=")))
    assert point["sources"][at] == "sweep" and submitted["sources"][at] == "--set"
    rest = submitted["sources"][:at] + submitted["sources"][at + 1:]
    assert point["sources"][:at] + point["sources"][at + 1:] == rest
    if experiment == "examples/distill":
        first = CliRunner().invoke(main, ["submit", experiment, "--site", str(site), "--set", "actor_lr=1e-6",
                                          "--dry-run", "--json"])
        assert json.loads(swept.stdout)["script"] == json.loads(first.stdout)["script"]


def test_point_values_read_the_resolved_map():
    """A point's values are what its resolved map holds for the grid's keys (the composed
    config, typed), never the grid's text: a knob, a raw key, a dict value's leaves, a delete."""
    resolved = {
        "actor_rollout_ref.rollout.n": {
            "value": 2, "op": "=", "layer": "sweep", "field": "knobs.rollout_n",
            "overrides": [{"value": 5, "layer": "config.yaml", "field": "knobs.rollout_n"}]},
        "actor_rollout_ref.actor.optim.lr": {"value": 1e-06, "op": "=", "layer": "sweep",
                                             "field": "sweep actor_rollout_ref.actor.optim", "overrides": []},
        "actor_rollout_ref.actor.optim.weight_decay": {"value": 0.1, "op": "=", "layer": "sweep",
                                                       "field": "sweep actor_rollout_ref.actor.optim", "overrides": []},
        "trainer.val_before_train": {"value": None, "op": "~", "layer": "sweep",
                                     "field": "sweep ~trainer.val_before_train", "overrides": []},
        "algorithm.adv_estimator": {"value": "grpo", "op": "=", "layer": "pin", "field": "method",
                                    "overrides": [{"value": "grpo", "layer": "sweep",
                                                   "field": "sweep algorithm.adv_estimator"}]},
    }
    params = {"rollout_n": "2.0", "actor_rollout_ref.actor.optim": "{lr:1e-6,weight_decay:0.1}",
              "~trainer.val_before_train": "x", "estimator": "grpo"}
    values = sweep.point_values(params, resolved)
    assert values == {"rollout_n": 2, "actor_rollout_ref.actor.optim": {"lr": 1e-06, "weight_decay": 0.1},
                      "~trainer.val_before_train": None, "estimator": "grpo"}
    assert type(values["rollout_n"]) is int
    assert sweep.label(values) == ("rollout_n=2, actor_rollout_ref.actor.optim={lr: 1e-06, weight_decay: 0.1}, "
                                   "~trainer.val_before_train=null, estimator=grpo")
    assert sweep.label({"x": True, "y": "0.5", "z": 1e-6}) == "x=True, y='0.5', z=1e-06"


def test_cli_sweep_labels_are_the_values_verl_gets(tmp_path, monkeypatch):
    """`--grid rollout_n=2.0,4` runs rollout.n=2 and 4 and says so: the dry run's labels,
    its JSON params and (beside them) the grid text as given."""
    from click.testing import CliRunner

    from launcher.cli.app import main

    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site.yaml"
    site.write_text((repo / "site" / "dev.yaml").read_text().replace("/var/lib/sfdev/runs", str(tmp_path / "runs")))
    monkeypatch.chdir(repo)
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")  # the dev registry may not be built yet
    args = ["sweep", "examples/grpo", "--site", str(site), "--grid", "rollout_n=2.0,4",
            "--grid", "actor_rollout_ref.actor.optim.lr=1e-6", "--grid", "save_freq=null", "--dry-run"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "point 0: rollout_n=2, actor_rollout_ref.actor.optim.lr=1e-06, save_freq=-1" in res.stderr, res.stderr
    assert "rollout_n=2.0" not in res.stderr
    res = CliRunner().invoke(main, [*args, "--json"])
    points = json.loads(res.stdout)["points"]
    assert [p["params"]["rollout_n"] for p in points] == [2, 4]
    assert all(type(p["params"]["rollout_n"]) is int for p in points)
    assert points[0]["given"] == {"rollout_n": "2.0", "actor_rollout_ref.actor.optim.lr": "1e-6", "save_freq": "null"}
    assert "actor_rollout_ref.rollout.n=2" in points[0]["overrides"]


def test_points_that_resolve_to_one_job_are_refused():
    errors = sweep.same_jobs([({"rollout_n": "4"}, {"rollout_n": 4}, ("a.n=4",)),
                              ({"rollout_n": "5"}, {"rollout_n": 5}, ("a.n=5",)),
                              ({"rollout_n": "4.0"}, {"rollout_n": 4}, ("a.n=4",))])
    assert [e.field for e in errors] == ["point 2 (rollout_n=4.0)"]
    assert "same job as point 0 (verl gets rollout_n=4 in both)" in errors[0].message


@pytest.mark.parametrize("grid", ["rollout_n=4,4.0", "actor_lr=1e-6,0.000001", "save_freq=null,~"])
def test_cli_sweep_of_one_job_twice_is_refused_before_anything(tmp_path, monkeypatch, grid):
    from click.testing import CliRunner

    from launcher.cli.app import main

    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site.yaml"
    site.write_text((repo / "site" / "dev.yaml").read_text().replace("/var/lib/sfdev/runs", str(tmp_path / "runs")))
    monkeypatch.chdir(repo)
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")  # the dev registry may not be built yet
    res = CliRunner().invoke(main, ["sweep", "examples/grpo", "--site", str(site), "--grid", grid])
    assert res.exit_code == 2 and "runs the same job as point 0" in res.stderr, res.output
    assert not (tmp_path / "runs").exists()
