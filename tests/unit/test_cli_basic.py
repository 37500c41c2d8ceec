"""`sf --version` and `sf --help` work from the installed console script."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import launcher


def _sf() -> str:
    exe = Path(sys.executable).parent / "sf"
    found = str(exe) if exe.exists() else shutil.which("sf")
    assert found, "the sf console script is not installed (run scripts/install)"
    return found


def test_version():
    p = subprocess.run([_sf(), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert launcher.__version__ in p.stdout


def test_help():
    p = subprocess.run([_sf(), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "Usage" in p.stdout and "submit" in p.stdout
