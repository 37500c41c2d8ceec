"""sf attach / sf dashboard (launcher.monitor.attach, launcher.cli.cmd_attach): which node and het group,
the printed srun command, the shell's environment (run for real, locally), no injection,
clear errors for runs that are not running; against fake Slurm binaries."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from launcher import runs
from launcher.cli.app import main
from launcher.errors import SpecError
from launcher.injob import auth
from launcher.monitor import attach
from launcher.runtime import Runtime
from launcher.spec import paths

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import sacct_row  # noqa: E402

PLAN = {"pools": [{"name": "train", "het_group": 0, "roles": ["actor", "rollout"]},
                  {"name": "teach", "het_group": 1, "roles": ["teacher"]}]}
RECORD = {"id": "distill-abcde", "state": "running", "job_ids": ["42"]}
PHASES = [
    {"phase": "allocated", "pools": {"train": ["dev1", "dev2"], "teach": ["dev7"]}},  # attempt 0
    {"phase": "head_up", "address": "127.0.0.11:20000"},
    {"phase": "restarted", "restart": 1},
    {"phase": "allocated", "pools": {"train": ["dev3", "dev4"], "teach": ["dev8"]}},  # attempt 1
    {"phase": "head_up", "address": "127.0.0.13:20100"},
]


def _venv(tmp_path) -> Runtime:
    (tmp_path / "venv" / "bin").mkdir(parents=True, exist_ok=True)
    (tmp_path / "venv" / "bin" / "activate").write_text(f"export VIRTUAL_ENV={tmp_path}/venv\n")
    return Runtime(framework="verl", version="0.9.1", kind="venv", path=str(tmp_path / "venv"),
                   env=(("RT_VAR", "rt value"),))


def test_where_is_the_current_attempt():
    w = attach.where(RECORD, PHASES, PLAN)
    assert w.job_id == "42" and w.pools == {"train": ["dev3", "dev4"], "teach": ["dev8"]}
    assert w.head_address == "127.0.0.13:20100" and w.hetjob
    # Ray not up yet in the current attempt: no address from the earlier one
    assert attach.where(RECORD, PHASES[:4], PLAN).head_address is None


def test_target_node_role_and_het_group():
    w = attach.where(RECORD, PHASES, PLAN)
    assert attach.target(w) == ("dev3", 0)
    assert attach.target(w, role="head") == ("dev3", 0)
    assert attach.target(w, role="teacher") == ("dev8", 1)
    assert attach.target(w, role="teach") == ("dev8", 1)
    assert attach.target(w, node="dev4") == ("dev4", 0)
    assert attach.target(w, node="dev8") == ("dev8", 1)
    plain = attach.where({**RECORD, "job_ids": ["7"]}, [{"phase": "allocated", "pools": {"train": ["dev1"]}}],
                         {"pools": [PLAN["pools"][0]]})
    assert attach.target(plain, node="dev1") == ("dev1", None)  # a plain job: no --het-group
    for kwargs, field in (({"node": "dev1"}, "--node"), ({"role": "critic"}, "--role"),
                          ({"node": "dev3", "role": "head"}, "--node/--role")):
        with pytest.raises(SpecError) as err:
            attach.target(w, **kwargs)
        assert err.value.field == field


def test_no_job_or_no_nodes_yet():
    with pytest.raises(SpecError, match="has no job"):
        attach.where({**RECORD, "job_ids": []}, PHASES, PLAN)
    with pytest.raises(SpecError, match="no nodes yet"):
        attach.where(RECORD, [], PLAN)


def test_printed_command(tmp_path):
    w = attach.where(RECORD, PHASES, PLAN)
    argv = attach.shell_argv("/runs/distill-abcde", w, _venv(tmp_path), "dev8", 1)
    bash = argv.index("bash")
    assert argv[:bash] == ["srun", "--het-group=1", "--nodes=1", "--ntasks=1", "--nodelist=dev8", "--overlap",
                           "--jobid=42", "--pty"]
    assert argv[bash + 1] == "-c" and argv[bash + 3:] == ["sf-attach"]
    with_cmd = attach.shell_argv("/runs/distill-abcde", w, _venv(tmp_path), "dev3", 0, ("ray", "status"))
    assert "--pty" not in with_cmd and with_cmd[-3:] == ["sf-attach", "ray", "status"]
    text = attach.printable(argv)
    assert text.startswith("srun --het-group=1 --nodes=1 --ntasks=1 --nodelist=dev8 --overlap --jobid=42 --pty "
                           "bash -c ")


def _run_setup(argv, env=None) -> dict:
    """Run the step's `bash -c SETUP sf-attach CMD` here (what srun runs on the node)."""
    inner = argv[argv.index("bash"):]
    proc = subprocess.run(inner, capture_output=True, env={"PATH": "/usr/bin:/bin", **(env or {})}, check=True)
    return dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)


def test_shell_environment(tmp_path):
    w = attach.where(RECORD, PHASES, PLAN)
    run_dir = str(tmp_path / "distill-abcde")
    argv = attach.shell_argv(run_dir, w, _venv(tmp_path), "dev3", 0, ("env", "-0"), site_env=(("SITE_VAR", "s"),))
    env = _run_setup(argv, {"RAY_AUTH_TOKEN": "the user's own"})
    assert "RAY_AUTH_TOKEN" not in env  # Ray would read it before the job's token file
    assert env["RAY_ADDRESS"] == "127.0.0.13:20100" and env["SF_RUN_DIR"] == run_dir
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(auth.token_path(run_dir, "42"))
    assert env["RAY_AUTH_TOKEN_PATH"].endswith("/.ray-auth/42.token")
    assert env["VIRTUAL_ENV"] == f"{tmp_path}/venv" and env["RT_VAR"] == "rt value" and env["SITE_VAR"] == "s"
    no_token = _run_setup(attach.shell_argv(run_dir, w, _venv(tmp_path), "dev3", 0, ("env", "-0"),
                                            token_exists=False))
    assert "RAY_AUTH_MODE" not in no_token and "RAY_ADDRESS" in no_token


@pytest.mark.parametrize("payload", ["$(touch {c})", "`touch {c}`", "x; touch {c}", "x' ; touch {c}; echo '",
                                     "x\ntouch {c}"])
def test_setup_is_inert(payload, tmp_path):
    canary = tmp_path / "pwned"
    text = payload.format(c=canary)
    w = attach.Where(job_id="42", pools={"train": ["dev1"]}, het_groups={"train": 0}, roles={"train": []},
                     head_address=text)
    env = _run_setup(attach.shell_argv("/runs/" + text, w, _venv(tmp_path), "dev1", None, ("env", "-0"),
                                       site_env=(("SITE_VAR", text),)))
    assert env["RAY_ADDRESS"] == text and env["SF_RUN_DIR"] == "/runs/" + text and env["SITE_VAR"] == text
    assert not canary.exists()


def test_dashboard_line():
    w = attach.where(RECORD, PHASES, PLAN)
    assert attach.dashboard_line(w, "login1.example.org", "alice") == \
        "ssh -N -L 8265:127.0.0.13:20108 alice@login1.example.org"
    with pytest.raises(SpecError, match="Ray is not up yet"):
        attach.dashboard_line(attach.where(RECORD, PHASES[:4], PLAN), "login1", "alice")


# --- the commands, against fake Slurm ----------------------------------------------------------

def _site(tmp_path, fake_slurm, dashboard=False) -> str:
    data = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    data["runs_dir"] = str(fake_slurm.runs_dir)
    data["ray"]["dashboard"] = dashboard
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _running_run(fake_slurm, state="RUNNING"):
    run = runs.create_run(fake_slurm.runs_dir, "distill")
    run.add_state("submitted")
    run.set_job_ids(["42"])
    run.write_json("plan.json", PLAN)
    run.update(runtime=Runtime(framework="verl", version="0.9.1", kind="venv", path="/opt/rt").to_dict())
    for event in PHASES:
        runs.record_phase(run.dir, event["phase"], **{k: v for k, v in event.items() if k != "phase"})
    fake_slurm.set("sacct", sacct_row("42+0", state) + sacct_row("42+1", state))
    return run


def test_attach_print(fake_slurm, tmp_path):
    run = _running_run(fake_slurm)
    result = CliRunner().invoke(main, ["attach", run.id, "--role", "teacher", "--print",
                                       "--site", _site(tmp_path, fake_slurm)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("srun --het-group=1 --nodes=1 --ntasks=1 --nodelist=dev8 --overlap --jobid=42 "
                                    "--pty bash -c ")
    assert "RAY_ADDRESS=127.0.0.13:20100" in result.stdout and "source /opt/rt/bin/activate" in result.stdout
    assert not fake_slurm.calls("srun")  # printed, not run


def test_attach_runs_srun_with_the_command(fake_slurm, tmp_path):
    """Without --print sf becomes srun (exec): a subprocess here, the fake srun records its argv."""
    run = _running_run(fake_slurm)
    proc = subprocess.run([sys.executable, "-m", "launcher.cli.app", "attach", run.id, "--node", "dev4",
                           "--site", _site(tmp_path, fake_slurm), "--", "ray", "status"],
                          capture_output=True, text=True, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    (call,) = fake_slurm.calls("srun")  # the first line of its argv (the setup script has newlines)
    assert call.startswith("srun --het-group=0 --nodes=1 --ntasks=1 --nodelist=dev4 --overlap --jobid=42 bash -c ")
    assert fake_slurm.log.read_text().endswith(" sf-attach ray status\n")


@pytest.mark.parametrize("state", ["PENDING", "COMPLETED", "FAILED"])
def test_not_running_is_a_clear_error(state, fake_slurm, tmp_path):
    run = _running_run(fake_slurm, state)
    for args in (["attach", run.id], ["attach", run.id, "--print"]):
        result = CliRunner().invoke(main, [*args, "--site", _site(tmp_path, fake_slurm)])
        assert result.exit_code == 2
        assert result.stderr.startswith(f"sf: error: run: run {run.id} is not running (state ")
        assert f"Slurm {state}" in result.stderr
    assert not fake_slurm.calls("srun")


def test_dashboard_command(fake_slurm, tmp_path):
    run = _running_run(fake_slurm)
    result = CliRunner().invoke(main, ["dashboard", run.id, "--site", _site(tmp_path, fake_slurm)])
    assert result.exit_code == 2 and "site.ray.dashboard" in result.stderr and "dashboard: true" in result.stderr
    result = CliRunner().invoke(main, ["dashboard", run.id, "--site", _site(tmp_path, fake_slurm, dashboard=True),
                                       "--local-port", "9000"])
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first.startswith("ssh -N -L 9000:127.0.0.13:20108 ")
    assert second.endswith(f"cat {run.dir}/.ray-auth/42.token)")
    assert json.dumps(first)  # one line


def test_an_array_point_is_reached_through_its_own_job_id():
    """A sweep point in a job array: the record says `<array>_<task>`; srun --jobid and the
    Ray token take the task's own job id, which the supervisor recorded as `leader`."""
    rec = {"id": "grpo-abcde", "state": "running", "job_ids": ["120_1"]}
    phases = [{"phase": "allocated", "pools": {"train": ["dev2"]}, "leader": "122"},
              {"phase": "head_up", "address": "127.0.0.12:20001"}]
    w = attach.where(rec, phases, {"pools": [{"name": "train", "het_group": 0, "roles": ["actor"]}]})
    assert w.job_id == "122"
    argv = attach.shell_argv("/runs/grpo-abcde", w, Runtime(framework="verl", version="0.9.1", kind="venv",
                                                            path="/rt"), "dev2", None, ("true",))
    assert "--jobid=122" in argv and "--het-group" not in " ".join(argv)
    assert "RAY_AUTH_TOKEN_PATH=/runs/grpo-abcde/.ray-auth/122.token" in argv[argv.index("-c") + 1]
    # a plain job keeps its id, whatever `leader` says
    plain = attach.where({**rec, "job_ids": ["7"]}, phases, None)
    assert plain.job_id == "7"


def test_interactive_shell_puts_the_runtime_first_whatever_the_rc_files_do(tmp_path):
    """~/.bashrc puts a pyenv-like shim dir first; the attach shell still finds the runtime's python."""
    runtime = _venv(tmp_path)
    py = Path(runtime.path) / "bin" / "python"
    py.write_text("#!/bin/sh\necho runtime\n")
    py.chmod(0o755)
    home, shims = tmp_path / "home", tmp_path / "shims"
    home.mkdir()
    shims.mkdir()
    (shims / "python").write_text("#!/bin/sh\necho shim\n")
    (shims / "python").chmod(0o755)
    (home / ".bashrc").write_text(f'export PATH="{shims}:$PATH"\nexport FROM_RC=yes\n')
    w = attach.where(RECORD, PHASES, PLAN)
    script = attach.setup_script(str(tmp_path / "run"), w, runtime)
    proc = subprocess.run(["bash", "-c", script, "sf-attach"], input='echo "rc=$FROM_RC"; python; exit\n',
                          capture_output=True, text=True, timeout=30,
                          env={"HOME": str(home), "PATH": "/usr/bin:/bin", "TERM": "dumb"})
    assert "rc=yes" in proc.stdout and "runtime" in proc.stdout and "shim" not in proc.stdout, proc.stdout + proc.stderr
