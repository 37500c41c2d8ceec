"""sf export / sf eval: checkpoint layout checks, rendered jobs, and (with the export test
venv, tests/unit/fixtures_extra/make_export_venv.sh) a real merge with verl's own model
merger of a tiny checkpoint made here, run with --local."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher import runs
from launcher.cli.app import main
from launcher.submit.export import LayoutError, find_actor_dir

FIXTURES = Path(__file__).parent / "fixtures_extra"
EXPORT_VENV = Path(os.environ.get("SF_EXPORT_TEST_VENV",
                                  Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev")) / "export-test-venv"))
# the export test venv (its real merge, and the runtime the other tests' registry names) is
# built by scripts/test while the other unit tests run
pytestmark = pytest.mark.built


def fsdp_layout(root: Path, step: int = 5, world: int = 2, tracker: bool = True) -> Path:
    actor = root / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))
    for rank in range(world):
        (actor / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"x")
    if tracker:
        (root / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return actor


def test_layout_accepts_three_forms(tmp_path):
    actor = fsdp_layout(tmp_path / "ckpt")
    for path in (tmp_path / "ckpt", actor.parent, actor):
        ck = find_actor_dir(path, "verl-fsdp")
        assert ck.actor_dir == str(actor) and ck.step == 5 and ck.backend == "fsdp"
    assert find_actor_dir(tmp_path / "ckpt").fmt == "verl-fsdp"  # detected


def test_layout_sft_shards_in_the_step_dir(tmp_path):
    """verl's SFT trainer writes its FSDP shards straight into global_step_N/ (no actor/;
    seen on the H200): both the checkpoints dir and the step dir resolve to it."""
    actor = fsdp_layout(tmp_path / "ckpt", step=300)
    step_dir = actor.parent
    for item in actor.iterdir():
        item.rename(step_dir / item.name)
    actor.rmdir()
    for path in (tmp_path / "ckpt", step_dir):
        ck = find_actor_dir(path)
        assert ck.actor_dir == str(step_dir) and ck.step == 300 and ck.fmt == "verl-fsdp"


def test_layout_megatron(tmp_path):
    actor = tmp_path / "global_step_7" / "actor"
    (actor / "model" / "dist_ckpt").mkdir(parents=True)
    (actor / "model" / "huggingface").mkdir()
    (actor / "model" / "huggingface" / "config.json").write_text("{}")
    ck = find_actor_dir(tmp_path / "global_step_7", "verl-megatron")
    assert ck.backend == "megatron" and ck.step == 7
    with pytest.raises(LayoutError, match="use --checkpoint-format verl-megatron"):
        find_actor_dir(actor, "verl-fsdp")


@pytest.mark.parametrize("breakage, message", [
    ("no-tracker", "no latest_checkpointed_iteration.txt .*global_step_5"),
    ("bad-tracker-step", "says step 9 but global_step_9/ is missing"),
    ("missing-shard", "missing model_world_size_2_rank_1.pt"),
    ("missing-hf", "missing huggingface/config.json"),
    ("no-actor", "has no actor/"),
    ("empty", "no global_step_N/ and no actor files"),
    ("absent", "does not exist"),
])
def test_layout_errors_say_what_is_missing(tmp_path, breakage, message):
    root = tmp_path / "ckpt"
    if breakage != "absent":
        root.mkdir()
    if breakage not in ("empty", "absent"):
        actor = fsdp_layout(root, tracker=breakage != "no-tracker")
        if breakage == "bad-tracker-step":
            (root / "latest_checkpointed_iteration.txt").write_text("9")
        elif breakage == "missing-shard":
            (actor / "model_world_size_2_rank_1.pt").unlink()
        elif breakage == "missing-hf":
            (actor / "huggingface" / "config.json").unlink()
        elif breakage == "no-actor":
            for p in sorted(actor.rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
            actor.rmdir()
    with pytest.raises(LayoutError, match=message):
        find_actor_dir(root, "verl-fsdp")


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Runs dir + a runtime registry; the dev site file for partitions."""
    registry = tmp_path / "runtimes.yaml"
    venv = EXPORT_VENV if (EXPORT_VENV / "bin" / "python").exists() else tmp_path / "rt"
    registry.write_text(f'verl:\n  "0.9.1": {{kind: venv, path: {venv}}}\n')
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", str(registry))
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SF_SITE", str(Path(__file__).resolve().parents[2] / "site" / "dev.yaml"))
    monkeypatch.delenv("FORGE_IMAGE_VERL", raising=False)
    return {"root": tmp_path / "runs", "venv": venv, "tmp": tmp_path}


def test_export_bad_checkpoint_is_one_line_exit_2(env):
    res = CliRunner().invoke(main, ["export", "my-grpo", "--checkpoint", str(env["tmp"]),
                                    "--checkpoint-format", "verl-fsdp", "--dry-run"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sf: error: --checkpoint:") and "a valid --checkpoint is" in lines[0]


def test_export_render(env):
    actor = fsdp_layout(env["tmp"] / "ckpt", step=5, world=2)
    res = CliRunner().invoke(main, ["export", "my-grpo", "--checkpoint", str(env["tmp"] / "ckpt"),
                                    "--checkpoint-format", "verl-fsdp", "--dry-run",
                                    "--target", str(env["tmp"] / "hf")])
    assert res.exit_code == 0, res.output
    script = res.output
    assert script.startswith("#!/bin/bash\n")
    assert "#SBATCH --partition=train\n" in script and "#SBATCH --nodes=1\n" in script
    assert "--gres" not in script  # FSDP merge needs no GPU
    assert f"source {env['venv']}/bin/activate" in script
    merge = (f"{env['venv']}/bin/python -m verl.model_merger merge --backend fsdp "
             f"--local_dir {actor} --target_dir {env['tmp'] / 'hf'}")
    assert merge in script.splitlines()
    # phases recorded the way the training job records them
    assert "sf_injob phase" in script and "-m launcher.injob" in script and "export_started" in script
    assert "trap sf_ended EXIT" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert not env["root"].exists() or not any(env["root"].iterdir())  # dry run records nothing


@pytest.mark.parametrize("option,value", [
    ("--partition", "train\n#SBATCH --qos=evil"),
    ("--partition", "train --qos=evil"),
    ("--time", "01:00:00\n#SBATCH --account=evil"),
])
def test_export_header_injection_refused(env, option, value):
    fsdp_layout(env["tmp"] / "ckpt", step=5, world=2)
    res = CliRunner().invoke(main, ["export", "my-grpo", "--checkpoint", str(env["tmp"] / "ckpt"),
                                    "--checkpoint-format", "verl-fsdp", "--dry-run", option, value])
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"sf: error: {option}:") and "#SBATCH --" not in res.output.split(":", 2)[1]
    # and without --dry-run: refused before any run record is made
    res = CliRunner().invoke(main, ["export", "my-grpo", "--checkpoint", str(env["tmp"] / "ckpt"),
                                    "--checkpoint-format", "verl-fsdp", option, value])
    assert res.exit_code == 2 and not (env["root"].exists() and any(env["root"].iterdir())), res.output


def test_export_target_with_shell_metacharacters_is_inert(env):
    fsdp_layout(env["tmp"] / "ckpt", step=5, world=2)
    target = env["tmp"] / "hf $(touch pwned); `id`"
    res = CliRunner().invoke(main, ["export", "my-grpo", "--checkpoint", str(env["tmp"] / "ckpt"),
                                    "--checkpoint-format", "verl-fsdp", "--dry-run", "--target", str(target)])
    assert res.exit_code == 0, res.output
    assert "'" + str(target) + "'" in res.output  # shell-quoted as one word
    subprocess.run(["bash", "-n"], input=res.output, text=True, check=True)
    # the script's messages name the target: running them runs nothing
    echoes = "\n".join(line for line in res.output.splitlines() if line.startswith("echo "))
    assert echoes
    out = subprocess.run(["bash", "-c", echoes], cwd=env["tmp"], capture_output=True, text=True, check=True)
    assert str(target) in out.stdout and not (env["tmp"] / "pwned").exists()


def test_export_line_break_in_a_path_refused(env):
    fsdp_layout(env["tmp"] / "ckpt", step=5, world=2)
    res = CliRunner().invoke(main, ["export", "my-grpo", "--checkpoint", str(env["tmp"] / "ckpt"),
                                    "--checkpoint-format", "verl-fsdp", "--dry-run",
                                    "--target", str(env["tmp"] / "hf\n#SBATCH --qos=evil")])
    assert res.exit_code == 2 and res.output.startswith("sf: error: target:"), res.output


def test_export_render_megatron_asks_a_gpu(env):
    actor = env["tmp"] / "global_step_2" / "actor"
    (actor / "model" / "dist_ckpt").mkdir(parents=True)
    (actor / "model" / "huggingface").mkdir()
    (actor / "model" / "huggingface" / "config.json").write_text("{}")
    res = CliRunner().invoke(main, ["export", "x", "--checkpoint", str(actor), "--checkpoint-format",
                                    "verl-megatron", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "#SBATCH --gres=gpu:1\n" in res.output and "--backend megatron" in res.output
    assert "/x-XXXXX/exports/global_step_2" in res.output


@pytest.mark.parametrize("merger_rc", [0, 3])
def test_export_job_records_started_and_ended_phases(tmp_path, merger_rc):
    """The rendered export script, run by bash with a stand-in merger: its phases land in
    the run's events.jsonl (through `python -m launcher.injob phase`), the ended one with
    the script's exit code, on success and on failure."""
    import sys

    from launcher.spec.site import load_site
    from launcher.submit import export as ex

    actor = fsdp_layout(tmp_path / "ckpt", step=5, world=1)
    run = runs.create_run(tmp_path / "runs", "x")
    target = run.dir / "exports" / "global_step_5"
    stand_in = ("import pathlib, sys; t = pathlib.Path(sys.argv[1]); t.mkdir(parents=True, exist_ok=True); "
                "(t / 'config.json').write_text('{}'); sys.exit(int(sys.argv[2]))")
    res = ex.resources_for(load_site(str(Path(__file__).resolve().parents[2] / "site" / "dev.yaml")),
                           job_name="sf-export-x", log_path=f"{run.dir}/logs/e-%j.out", gpus=0)
    script = ex.render_export(res=res, setup=[], env={}, ckpt=find_actor_dir(actor), target_dir=str(target),
                              sf_python=sys.executable, run_dir=str(run.dir), export_id="export-1",
                              wrap=lambda argv: [sys.executable, "-c", stand_in, str(target), str(merger_rc)])
    path = run.write_text("export-1.sbatch", script)
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=run.dir)
    assert proc.returncode == merger_rc, proc.stderr
    events = runs.read_phases(run.dir)
    assert [e["phase"] for e in events] == ["export_started", "export_ended"]
    assert events[0]["export_id"] == "export-1" and events[0]["target"] == str(target)
    assert events[1]["rc"] == str(merger_rc) and events[1]["export_id"] == "export-1"


def _sft_run(root: Path, val: Path) -> runs.Run:
    run = runs.create_run(root, "my-sft")
    run.write_json("plan.json", {"method": "sft", "framework_version": "0.9.1",
                                 "overrides": [f"data.val_files={val}", "data.messages_key=messages"]})
    return run


def test_eval_render(env):
    val = env["tmp"] / "val.jsonl"
    sample = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    val.write_text(json.dumps(sample) + "\n")
    run = _sft_run(env["root"], val)
    fsdp_layout(run.checkpoints_dir, step=3, world=1)
    res = CliRunner().invoke(main, ["eval", "my-sft", "--run-id", run.id, "--dry-run"])
    assert res.exit_code == 0, res.output
    script = res.output
    assert "#SBATCH --gres=gpu:1\n" in script
    assert f"--local_dir {run.checkpoints_dir}/global_step_3/actor" in script
    assert f"--data {val}" in script and "--messages-key messages" in script and " evaluate " in script
    assert f"{run.dir}/evals/eval-" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # an RL run is refused
    rl = runs.create_run(env["root"], "my-grpo")
    rl.write_json("plan.json", {"method": "grpo", "config_name": "ppo_trainer", "overrides": []})
    res = CliRunner().invoke(main, ["eval", rl.id, "--validation-data", str(val), "--dry-run"])
    assert res.exit_code == 2 and "sf eval is for SFT runs" in res.output


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    if not (EXPORT_VENV / "bin" / "python").exists():
        pytest.skip(f"no export test venv at {EXPORT_VENV}: run {FIXTURES}/make_export_venv.sh")
    out = tmp_path_factory.mktemp("tiny") / "ckpt"
    subprocess.run([str(EXPORT_VENV / "bin" / "python"), str(FIXTURES / "make_checkpoint.py"), str(out), "2"],
                   check=True, capture_output=True)
    return out


def test_export_and_eval_local_for_real(env, tiny_checkpoint):
    """verl's merger on a tiny Qwen2 FSDP checkpoint, loaded back with transformers; then
    sf eval on the merged model attaches samples to an SFT run."""
    res = CliRunner().invoke(main, ["export", "tiny", "--checkpoint", str(tiny_checkpoint),
                                    "--checkpoint-format", "verl-fsdp", "--local"])
    assert res.exit_code == 0, res.output
    run = runs.list_runs(env["root"])[0]
    rec = run.record()
    [exp] = rec["exports"]
    assert exp["state"] == "completed" and exp["target"] == f"{run.dir}/exports/global_step_2"
    assert {p["phase"] for p in rec["phases"]} >= {"export_started", "export_ended"}
    check = subprocess.run([str(EXPORT_VENV / "bin" / "python"), str(FIXTURES / "check_merged.py"),
                            exp["target"], str(tiny_checkpoint / "reference.pt")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr[-2000:]
    assert "ok 27 tensors Qwen2ForCausalLM" in check.stdout

    val = env["tmp"] / "val.jsonl"
    rows = [{"messages": [{"role": "user", "content": "what is one plus two ?"},
                          {"role": "assistant", "content": "three"}]},
            {"messages": [{"role": "user", "content": "what is two plus two ?"},
                          {"role": "assistant", "content": "the answer is four"}]}]
    val.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sft = _sft_run(env["root"], val)
    res = CliRunner().invoke(main, ["eval", sft.id, "--model", exp["target"], "--max-new-tokens", "4", "--local"])
    assert res.exit_code == 0, res.output
    [ev] = sft.record()["evals"]
    assert ev["state"] == "completed"
    samples = [json.loads(line) for line in Path(ev["samples"]).read_text().splitlines()]
    assert [s["reference"] for s in samples] == ["three", "the answer is four"]
    assert all(s["tokens"] > 0 and s["nll"] > 0 for s in samples)
    summary = json.loads(Path(ev["summary"]).read_text())
    assert summary["samples"] == 2 and summary["val_loss"] > 0


def test_export_local_runs_the_request_and_records_it(env, monkeypatch):
    """`sf export --local` with a stand-in runtime whose python plays verl's merger: the
    script runs here, the export is listed (completed) in a new run, its phases recorded."""
    fake = env["tmp"] / "fake-rt"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "activate").write_text("")
    merger = fake / "bin" / "python"
    merger.write_text('#!/bin/sh\n# verl.model_merger merge ... --target_dir DIR\n'
                      'while [ $# -gt 0 ]; do [ "$1" = --target_dir ] && t="$2"; shift; done\n'
                      'mkdir -p "$t" && echo "{}" > "$t/config.json"\n')
    merger.chmod(0o755)
    registry = env["tmp"] / "fake-runtimes.yaml"
    registry.write_text(f'verl:\n  "0.9.1": {{kind: venv, path: {fake}}}\n')
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", str(registry))
    fsdp_layout(env["tmp"] / "ckpt", step=4, world=1)
    res = CliRunner().invoke(main, ["export", "tiny", "--checkpoint", str(env["tmp"] / "ckpt"),
                                    "--checkpoint-format", "verl-fsdp", "--framework-version", "0.9.1", "--local"])
    assert res.exit_code == 0, res.output
    [run] = runs.list_runs(env["root"])
    rec = run.record()
    [exp] = rec["exports"]
    assert exp["state"] == "completed" and exp["rc"] == 0 and exp["target"] == f"{run.dir}/exports/global_step_4"
    assert f"exported {env['tmp'] / 'ckpt'}/global_step_4/actor -> {exp['target']}" in res.output
    assert (Path(exp["target"]) / "config.json").is_file() and Path(exp["log"]).is_file()
    assert [p["phase"] for p in rec["phases"]] == ["export_started", "export_ended"]
    assert rec["task"] == "export" and rec["phases"][-1]["rc"] == "0"


def _later_script(tmp_path, run, target, **kw):
    """An export of `run`'s last checkpoint looked up by the job (a chained export), its
    merger a stand-in that records its argv."""
    import sys

    from launcher.spec.site import load_site
    from launcher.submit import export as ex

    record = ("import pathlib, sys; t = pathlib.Path(sys.argv[sys.argv.index('--target_dir') + 1]); "
              "t.mkdir(parents=True, exist_ok=True); (t / 'argv.txt').write_text(' '.join(sys.argv[1:])); "
              "(t / 'config.json').write_text('{}')")

    def wrap(argv):
        if argv[:2] == ["python", "-c"]:  # the merger lookup of the preflight
            return [sys.executable, "-c", "print('/rt/verl/model_merger/__main__.py')"]
        return [sys.executable, "-c", record, *argv[1:]]

    res = ex.resources_for(load_site(str(Path(__file__).resolve().parents[2] / "site" / "dev.yaml")),
                           job_name="sf-export-x", log_path=f"{run.dir}/logs/e-%j.out", gpus=0,
                           dependency="afterok:77")
    return ex.render_export(res=res, setup=[], env={}, ckpt=ex.LaterCheckpoint(str(run.checkpoints_dir)),
                            target_dir=str(target), sf_python=sys.executable, run_dir=str(run.dir),
                            export_id="export-1", wrap=wrap, **kw)


def test_chained_export_looks_the_checkpoint_up_when_it_runs(tmp_path):
    """Rendered before any checkpoint exists (sf submit --model run:RUN); run by bash after
    RUN saved step 5: the merger gets that step's actor dir and the fixed target."""
    run = runs.create_run(tmp_path / "runs", "sft")
    target = run.dir / "exports" / "export-1"
    script = _later_script(tmp_path, run, target)
    assert "#SBATCH --dependency=afterok:77\n" in script
    path = run.write_text("export-1.sbatch", script)
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=run.dir)
    assert proc.returncode == 2 and "no checkpoint to export" in proc.stderr  # nothing saved yet
    actor = fsdp_layout(run.checkpoints_dir, step=5, world=1)
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=run.dir)
    assert proc.returncode == 0, proc.stderr
    assert (target / "argv.txt").read_text() == (f"-m verl.model_merger merge --backend fsdp --local_dir {actor} "
                                                 f"--target_dir {target}")


@pytest.mark.parametrize("upstream_preflight", [True, False])
def test_export_preflight_checks_and_merges_nothing(tmp_path, upstream_preflight):
    run = runs.create_run(tmp_path / "runs", "sft")
    target = run.dir / "exports" / "export-1"
    report = run.dir / "exports" / "export-1.preflight.json"
    script = _later_script(tmp_path, run, target, preflight=True, report=str(report),
                           upstream_preflight=upstream_preflight)
    path = run.write_text("export-1.sbatch", script)
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=run.dir)
    data = json.loads(report.read_text())
    assert data["merger"] == "/rt/verl/model_merger/__main__.py" and data["merged"] is False
    assert data["target"] == {"dir": str(target), "writable": True} and not (target / "config.json").exists()
    assert not data["checkpoint"]["found"]
    if upstream_preflight:  # nothing was trained: said, not failed
        assert proc.returncode == 0 and data["failures"] == [], proc.stderr
        assert "is a preflight" in data["checkpoint"]["note"]
    else:
        assert proc.returncode == 1 and data["failures"][0].startswith("checkpoint: ")
    phases = runs.read_phases(run.dir)
    assert phases[0]["phase"] == "export_started" and phases[0]["preflight"] == "1"
    assert phases[-1]["rc"] == str(proc.returncode)
