"""A runtime without py-spy is named when a hang limit is set (issue 34 item 3): by the
preflight (in the runtime's python, with the job's environment) and by `sf doctor` (which
runs launcher/injob/stacks.py --find in each runtime). On the H200 the kit's pip --target
skipped py-spy's bin/ and the hang's stack file said only "py-spy is not installed"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.injob import stacks
from launcher.submit import doctor
from launcher.submit.doctor import OK, WARN


class FakeRuntime:
    def __init__(self, path, env=(), kind="venv"):
        self.kind, self.path, self.env, self.modules, self.python = kind, str(path), tuple(env), (), "python3"


def _venv(tmp_path: Path, with_py_spy: bool) -> Path:
    venv = tmp_path / ("rt-spy" if with_py_spy else "rt")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    if with_py_spy:
        spy = venv / "bin" / "py-spy"
        spy.write_text("#!/bin/sh\necho py-spy 0.4.3\n")
        spy.chmod(0o755)
    return venv


def _plan(run_dir: Path, heal: dict | None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    job = {"runtime": {}} if heal is None else {"runtime": {}, "heal": heal}
    (run_dir / "plan.json").write_text(json.dumps({"job": job}))


def test_found_beside_python_in_pythonpath_bin_or_on_path(tmp_path):
    venv = _venv(tmp_path, True)
    assert stacks.find_py_spy({"PATH": ""}, python=str(venv / "bin" / "python")) == str(venv / "bin" / "py-spy")
    # pip --target DIR: scripts in DIR/bin, DIR on PYTHONPATH (the GPU kit's bundle)
    assert stacks.find_py_spy({"PYTHONPATH": str(venv), "PATH": ""}, python="/nowhere/python") \
        == str(venv / "bin" / "py-spy")
    assert stacks.find_py_spy({"PATH": str(venv / "bin")}, python="/nowhere/python") == str(venv / "bin" / "py-spy")
    assert stacks.find_py_spy({"PATH": ""}, python="/nowhere/python") is None


def test_missing_line_only_with_a_hang_limit(tmp_path):
    env = {"PATH": str(tmp_path), "PYTHONPATH": ""}
    line = stacks.missing_line(60, env, python="/opt/rt/bin/python")
    assert line.startswith("py-spy is not in the runtime (/opt/rt/bin/python): with a hang limit of 60 s")
    assert "pip install py-spy" in line and "/opt/rt/bin" in line and str(tmp_path) in line
    assert stacks.missing_line(0, env, python="/opt/rt/bin/python") is None  # the watchdog is off
    venv = _venv(tmp_path, True)
    assert stacks.missing_line(60, env, python=str(venv / "bin" / "python")) is None


def test_preflight_warning_reads_the_jobs_hang_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setattr(stacks.sys, "executable", str(tmp_path / "nopy" / "python"))
    _plan(tmp_path / "on", {"hang_timeout_s": 600})
    _plan(tmp_path / "off", {"hang_timeout_s": 0})
    _plan(tmp_path / "default", None)
    assert "hang limit of 600 s" in stacks.preflight_warning(str(tmp_path / "on"))
    assert stacks.preflight_warning(str(tmp_path / "off")) is None
    assert "hang limit of 1800 s" in stacks.preflight_warning(str(tmp_path / "default"))
    assert stacks.hang_limit(str(tmp_path / "nothing")) == 0.0


def test_stacks_find_runs_as_a_file(tmp_path):
    """What sf doctor runs in a runtime: the file alone, no sf on the path."""
    venv = _venv(tmp_path, True)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(venv)}
    proc = subprocess.run([sys.executable, "-I", str(Path(stacks.__file__)), "--find"], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == str(venv / "bin" / "py-spy"), proc.stderr
    env["PYTHONPATH"] = ""
    proc = subprocess.run([sys.executable, "-I", str(Path(stacks.__file__)), "--find"], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout.startswith("none: looked in ")


def test_doctor_names_the_runtime_without_py_spy(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    bare = FakeRuntime(_venv(tmp_path, False))
    [check] = doctor.check_py_spy("runtime verl 0.9.1", bare, 1800)
    assert check.status == WARN and check.name == "py-spy runtime verl 0.9.1"
    assert "runtime verl 0.9.1 has no py-spy" in check.detail and "limit 1800 s" in check.detail
    assert "pip install py-spy" in check.fix
    with_spy = FakeRuntime(_venv(tmp_path, True))
    [check] = doctor.check_py_spy("runtime verl 0.9.1", with_spy, 1800)
    assert check.status == OK and check.detail.startswith(str(Path(with_spy.path) / "bin" / "py-spy"))
    # the kit's layout: py-spy in <bundle>/bin, the bundle on PYTHONPATH through the entry's env
    bundle = _venv(tmp_path / "bundle", True)
    kit = FakeRuntime(_venv(tmp_path / "kit", False), env=(("PYTHONPATH", str(bundle)),))
    [check] = doctor.check_py_spy("runtime verl 0.9.1", kit, 60)
    assert check.status == OK and str(bundle / "bin" / "py-spy") in check.detail
    assert doctor.check_py_spy("runtime verl 0.9.1", bare, 0) == []  # no hang limit: nothing to say
    assert doctor.check_py_spy("x", FakeRuntime("/img.sif", kind="apptainer"), 1800) == []
    assert os.environ["PATH"] == "/usr/bin:/bin"
