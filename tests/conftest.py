"""Helpers shared by every test directory. Keep this small: fixtures of one area live in
that area's own conftest.py (tests/unit/, tests/cluster/, ...)."""
from __future__ import annotations

import os
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


@pytest.fixture(scope="session", autouse=True)
def _own_compose_cache(tmp_path_factory):
    """The tests' own cache of verl compose checks (launcher.compile.verlcache), never the user's;
    sf processes the tests start inherit it."""
    os.environ["SF_CACHE_DIR"] = str(tmp_path_factory.mktemp("sf-cache"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (CI=true, as .ci/run is run) a skipped test is a failure: scripts/test installs
    everything the suite needs, so a skip there means a missing install step."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped in CI (CI=true): {reason}"
