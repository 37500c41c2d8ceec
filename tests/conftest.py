"""Helpers shared by every test directory. Keep this small: fixtures of one area live in
that area's own conftest.py (tests/unit/, tests/cluster/, ...)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):
    """Poll ``predicate()`` until it returns something truthy; return that value.

    Fails the test (with ``what`` in the message) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)
        time.sleep(interval)


@pytest.fixture(name="wait_for")
def wait_for_fixture():
    """The ``wait_for(predicate, timeout, interval=0.5, what=...)`` helper as a fixture."""
    return wait_for


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
