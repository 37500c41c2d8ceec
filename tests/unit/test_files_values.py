"""Issue 20, item 5: files and values. Each file-system failure of a spec, site, runs dir or
output path exits 2 naming the path and the cause (no traceback); duplicate YAML keys; Slurm
time values as Slurm parses them; the signal lead below the limit; NUL bytes; login-node
variables kept out of the job."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import SITE_DICT, write_exp, write_site  # noqa: E402

from launcher import gateway  # noqa: E402
from launcher.cli.app import main  # noqa: E402
from launcher.compile.slurm_time import time_seconds  # noqa: E402
from launcher.errors import SpecError  # noqa: E402
from launcher.spec.site import site_from_dict  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GOOD = """method: verl/grpo
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {files: /d/train.parquet}
  validation: {files: /d/test.parquet}
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SF_SITE", str(write_site(tmp_path)))
    return tmp_path


def _run(*args):
    return CliRunner().invoke(main, list(args))


def _refused(r, *needles):
    assert r.exit_code == 2, (r.exit_code, r.output, r.stderr)
    assert "Traceback" not in r.stderr and r.exception is None or isinstance(r.exception, SystemExit), r.exception
    for n in needles:
        assert n in r.stderr, r.stderr


# ----------------------------------------------------------------------------- duplicate keys

@pytest.mark.parametrize("text,key,lines", [
    (GOOD + "method: verl/dapo\n", "'method'", "lines 1 and 6"),
    (GOOD + "knobs: {rollout_n: 4}\nknobs: {actor_lr: 1.0e-6}\n", "'knobs'", "lines 6 and 7"),
    (GOOD + "knobs:\n  rollout_n: 4\n  rollout_n: 8\n", "'rollout_n'", "lines 7 and 8"),
])
def test_duplicate_yaml_keys_refused_with_lines(env, text, key, lines):
    write_exp(env, "exp", text)
    _refused(_run("validate", "exp"), "config.yaml", key, "given twice", lines)


def test_duplicate_key_in_the_site_file(env, monkeypatch):
    site = env / "dup-site.yaml"
    site.write_text((env / "site.yaml").read_text() + "name: other\n")
    monkeypatch.setenv("SF_SITE", str(site))
    write_exp(env, "exp", GOOD)
    _refused(_run("validate", "exp"), str(site), "'name' is given twice")


# ----------------------------------------------------------------------------- file-system failures

def _config_path(env, name="exp") -> Path:
    exp = env / "experiments" / name
    exp.mkdir(parents=True, exist_ok=True)
    return exp / "config.yaml"


def test_config_yaml_binary(env):
    _config_path(env).write_bytes(b"\x00\x01\xff\xfe" * 20)
    _refused(_run("validate", "exp"), "config.yaml", "binary")


def test_config_yaml_not_utf8(env):
    _config_path(env).write_bytes(b"method: verl/grpo\nmodel: \xff\xfe\n")
    _refused(_run("validate", "exp"), "config.yaml", "not UTF-8")


def test_config_yaml_nested_50000_deep(env):
    _config_path(env).write_text("a: " + "[" * 50000 + "]" * 50000 + "\n")
    _refused(_run("validate", "exp"), "config.yaml", "nested too deeply")


def test_config_yaml_is_a_directory(env):
    _config_path(env).mkdir()
    _refused(_run("validate", "exp"), "config.yaml", "is a directory")


def test_config_yaml_is_a_fifo(env):
    os.mkfifo(_config_path(env))
    _refused(_run("validate", "exp"), "config.yaml", "not a regular file")


def test_config_yaml_symlink_loop(env):
    path = _config_path(env)
    (path.parent / "a").symlink_to(path.parent / "b")
    (path.parent / "b").symlink_to(path.parent / "a")
    path.symlink_to(path.parent / "a")
    _refused(_run("validate", "exp"), "config.yaml", "symbolic links")


def test_config_yaml_unreadable_as_root_too(env, monkeypatch):
    # the suite runs as root, which reads every file: the refusal of an unreadable file, simulated
    path = _config_path(env)
    path.write_text(GOOD)
    real = gateway.open_read  # spec files are opened through the gateway

    def refuse(fd, name, *args, **kwargs):
        if name == "config.yaml":
            raise PermissionError(13, "Permission denied", name)
        return real(fd, name, *args, **kwargs)

    monkeypatch.setattr(gateway, "open_read", refuse)
    _refused(_run("validate", "exp"), "config.yaml", "Permission denied", "permissions")


def test_experiments_is_a_file(env):
    (env / "experiments").write_text("")
    _refused(_run("validate", "exp"), "experiments is a file")
    _refused(_run("new", "exp", "--method", "verl/grpo"), "experiments", "is a file where sf needs a folder")


def test_site_file_is_a_directory_or_fifo(env, monkeypatch):
    write_exp(env, "exp", GOOD)
    monkeypatch.setenv("SF_SITE", str(env))
    _refused(_run("validate", "exp"), "site", "is a directory")
    os.mkfifo(env / "fifo.yaml")
    monkeypatch.setenv("SF_SITE", str(env / "fifo.yaml"))
    _refused(_run("validate", "exp"), "not a regular file")


def test_runs_dir_that_is_a_file(env, monkeypatch):
    (env / "runs").write_text("")
    monkeypatch.setenv("SF_RUNS_DIR", str(env / "runs"))
    _refused(_run("list"), str(env / "runs"), "is a file where sf needs a folder")


def test_config_yaml_dangling_symlink_named_as_such(env):
    (env / "exp").mkdir()
    os.symlink(env / "gone.yaml", env / "exp" / "config.yaml")
    _refused(_run("validate", "exp"), "exp/config.yaml is a symlink to", "which does not exist", "fix or remove")
    _refused(_run("validate", "./exp"), "is a symlink to", "fix or remove")


def test_site_file_empty_or_not_a_mapping(env, monkeypatch):
    write_exp(env, "exp", GOOD)
    (env / "empty.yaml").write_text("")
    monkeypatch.setenv("SF_SITE", str(env / "empty.yaml"))
    _refused(_run("validate", "exp"), "site", "empty.yaml is empty", "see site/dev.yaml")
    (env / "list.yaml").write_text("- a\n")
    monkeypatch.setenv("SF_SITE", str(env / "list.yaml"))
    _refused(_run("validate", "exp"), "list.yaml must be a mapping", "fix the file")


def test_dry_run_refuses_a_runs_dir_under_a_file(env):
    """The dry run says what its submit would trip on: a file where the runs dir must be a folder."""
    write_exp(env, "exp", GOOD)
    (env / "blocker").write_text("")
    r = _run("submit", "exp", "--dry-run", "--runs-dir", str(env / "blocker" / "runs"))
    _refused(r, "runs_dir", f"{env / 'blocker'} is a file where sf needs a folder", "--runs-dir")
    assert (env / "blocker").is_file()


def test_output_path_under_a_file(env):
    write_exp(env, "exp", GOOD)
    venv = env / "verl-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    (env / "out").write_text("")
    r = CliRunner(env={"FORGE_IMAGE_VERL": str(venv)}).invoke(main, ["render", "exp", "-o", str(env / "out" / "x")])
    _refused(r, str(env / "out"), "is a file where sf needs a folder")


def test_no_traceback_through_the_real_command(env):
    (env / "experiments").write_text("")
    r = subprocess.run([str(REPO / ".venv" / "bin" / "sf"), "new", "exp", "--method", "verl/grpo"],
                       capture_output=True, text=True, cwd=env, env={**os.environ, "SF_SITE": str(env / "site.yaml")})
    assert r.returncode == 2 and "Traceback" not in r.stderr and "experiments" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- Slurm time values

@pytest.mark.parametrize("text,seconds", [
    ("90", 5400), ("04:00:00", 14400), ("25:00:00", 90000), ("10:30", 630), ("1-12:00:00", 129600),
    ("2-0", 172800), ("1-2:30", 95400), ("UNLIMITED", None),
])
def test_time_values_slurm_takes(text, seconds):
    assert time_seconds(text) == seconds


@pytest.mark.parametrize("text,needle", [
    ("25:61:00", "minutes must be below 60"), ("99:99:99", "minutes must be below 60"),
    ("0", "no time at all"), ("00:00:00", "no time at all"), ("10:70", "seconds must be below 60"),
    ("1-24:00:00", "below 24"), ("4h", "not a Slurm time limit"), ("-5", "not a Slurm time limit"),
])
def test_time_values_slurm_refuses(text, needle):
    with pytest.raises(SpecError) as exc:
        time_seconds(text)
    assert needle in str(exc.value) and "HH:MM:SS" in str(exc.value)


@pytest.mark.parametrize("time", ["UNLIMITED", "2-0", "1-12:30", "90:30"])
def test_every_form_slurm_takes_passes_validate(env, time):
    # the schema leaves the forms to launcher.compile.slurm_time, which reads them as Slurm does
    write_exp(env, "exp", GOOD + f'slurm: {{time: "{time}"}}\n')
    r = _run("validate", "exp")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("time", ["25:61:00", "99:99:99", "0"])
def test_time_refused_through_validate(env, time):
    write_exp(env, "exp", GOOD + f'slurm: {{time: "{time}"}}\n')
    _refused(_run("validate", "exp"), "slurm.time", "D-HH:MM:SS")


@pytest.mark.parametrize("key,value", [("partition", "train\\n#SBATCH --x"), ("account", "a b"), ("qos", "q;rm")])
def test_validate_refuses_what_cannot_go_on_an_sbatch_line(env, key, value):
    # sf validate refuses what the render of sf submit would (it compiles, it renders nothing)
    write_exp(env, "exp", GOOD + f'slurm: {{{key}: "{value}"}}\n')
    _refused(_run("validate", "exp"), f"slurm.{key}", "cannot go into the batch script")


def test_time_given_as_a_number_says_to_quote_it(env):
    write_exp(env, "exp", GOOD + "slurm: {time: 30}\n")
    _refused(_run("validate", "exp"), "slurm.time", 'quote it: "30"')


def test_signal_lead_must_be_below_the_time_limit(env):
    write_exp(env, "exp", GOOD + 'slurm: {time: "5", signal_lead_s: 300}\n')
    _refused(_run("validate", "exp"), "slurm.signal_lead_s", "300 s is not below the time limit (300 s)")
    write_exp(env, "exp", GOOD + 'slurm: {time: "6", signal_lead_s: 300}\n')
    assert _run("validate", "exp").exit_code == 0
    write_exp(env, "exp", GOOD + 'slurm: {time: "5", signal_lead_s: 300, requeue: false}\n')
    assert _run("validate", "exp").exit_code == 0  # no requeue signal at all


# ----------------------------------------------------------------------------- NUL bytes

def test_nul_in_config_yaml_value(env):
    write_exp(env, "exp", GOOD.replace("Qwen/Qwen2.5-0.5B-Instruct", '"Qwen\\0evil"'))
    _refused(_run("validate", "exp"), "model", "NUL")


@pytest.mark.parametrize("args,field", [
    (["--set", "trainer.project_name=a\x00b"], "--set"),
    (["--model", "/m\x00x"], "--model"),
    (["--train-data", "/t\x00.parquet"], "--train-data"),
])
def test_nul_in_flags(env, args, field):
    write_exp(env, "exp", GOOD)
    _refused(_run("validate", "exp", *args), field, "NUL")


def test_nul_in_site_file(env, monkeypatch):
    import yaml

    site = env / "nul-site.yaml"
    site.write_text(yaml.safe_dump(dict(SITE_DICT, name="a\x00b")))
    monkeypatch.setenv("SF_SITE", str(site))
    write_exp(env, "exp", GOOD)
    _refused(_run("validate", "exp"), "site.name", "NUL")


# ----------------------------------------------------------------------------- login-node environment

def test_sbatch_runs_with_the_login_env_and_the_job_unsets_it(monkeypatch):
    # sbatch itself may need LD_LIBRARY_PATH (a module-loaded or unpacked Slurm: on the GPU kit
    # sbatch failed "libslurmfull.so: cannot open shared object file" when sf removed it)
    from launcher import slurm
    from launcher.sbatch_values import login_env_unset

    monkeypatch.setenv("PYTHONPATH", "/home/me/verl-dev")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/home/me/lib")
    monkeypatch.setenv("SBATCH_PARTITION", "other")
    env = slurm._sbatch_env(())
    assert env["LD_LIBRARY_PATH"] == "/home/me/lib" and env["PYTHONPATH"] == "/home/me/verl-dev"
    assert "SBATCH_PARTITION" not in env
    assert login_env_unset(()) == "unset PYTHONPATH LD_LIBRARY_PATH VIRTUAL_ENV PYTHONHOME"
    assert login_env_unset(("LD_LIBRARY_PATH",)) == "unset PYTHONPATH VIRTUAL_ENV PYTHONHOME"
    with pytest.raises(SpecError):
        site_from_dict(dict(SITE_DICT, slurm={**SITE_DICT["slurm"], "pass_login_env": ["HOME"]}), "s.yaml")


@pytest.mark.parametrize("passed, line", [
    ((), "unset PYTHONPATH LD_LIBRARY_PATH VIRTUAL_ENV PYTHONHOME"),
    (("LD_LIBRARY_PATH", "PYTHONPATH"), "unset VIRTUAL_ENV PYTHONHOME"),
])
def test_the_job_script_unsets_the_login_env_before_anything_runs(tmp_path, monkeypatch, passed, line):
    monkeypatch.chdir(tmp_path)
    slurm_block = {**SITE_DICT["slurm"], "pass_login_env": list(passed)} if passed else SITE_DICT["slurm"]
    monkeypatch.setenv("SF_SITE", str(write_site(tmp_path, slurm=slurm_block)))
    venv = tmp_path / "verl-venv"  # a runtime for the dry run
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    monkeypatch.setenv("FORGE_IMAGE_VERL", str(venv))
    write_exp(tmp_path, "exp", GOOD)
    r = _run("submit", "exp", "--dry-run")
    assert r.exit_code == 0, r.stderr
    lines = r.output.splitlines()
    unsets = [i for i, x in enumerate(lines) if x.startswith("unset ")]
    assert [lines[i] for i in unsets] == [line]
    first_command = next(i for i, x in enumerate(lines) if x.startswith(("export ", "source ", "module ", "SF_")))
    assert unsets[0] < first_command  # before the site's env, the runtime and sf's own PYTHONPATH


def test_login_env_named_in_a_warning(env, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/home/me/verl-dev")
    write_exp(env, "exp", GOOD)
    r = _run("validate", "exp")
    assert r.exit_code == 0 and "PYTHONPATH=/home/me/verl-dev is set on this login node" in r.stderr, r.stderr
