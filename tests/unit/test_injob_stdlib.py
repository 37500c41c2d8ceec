"""The job side runs on a bare Python: launcher/injob and everything it imports use the
standard library only (the supervisor may run on the host's python when the runtime is a
container). Each module is imported by a Python started with -S (no site packages: no yaml,
jinja2, click, jsonschema) and the test fails naming the first third-party import."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = ["supervise", "node", "barrier", "preflight", "health", "placement", "private", "ports", "auth",
           "gpus", "topology", "address", "verl_main", "evaluate", "contract", "heal", "ray_tuning",
           "capabilities", "attempt", "record_keeper", "processes", "bringup", "driver_start", "ending", "actuator",
           "watch", "failure_text", "json_lines", "__main__"]


@pytest.mark.parametrize("module", MODULES)
def test_injob_module_imports_without_site_packages(module):
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); import launcher.injob.{module}; "
            "bad = sorted(m for m in ('yaml', 'jinja2', 'click', 'jsonschema', 'hydra', 'omegaconf') "
            "if m in sys.modules); print(bad); raise SystemExit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_bare_python_really_has_no_yaml():
    proc = subprocess.run([sys.executable, "-S", "-c", "import yaml"], capture_output=True, text=True, cwd="/")
    assert proc.returncode != 0 and "yaml" in proc.stderr
