"""The Ray facts both wings read (launcher.ray_facts): one home, the job side's names are
the same objects, and the monitor and the CLI take them from there, never from launcher.injob."""
from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

from launcher import ray_facts
from launcher.injob import auth, ports

ROOT = Path(__file__).resolve().parents[2]


def _import_graph():
    loader = importlib.machinery.SourceFileLoader("import_graph", str(ROOT / "scripts" / "import-graph"))
    spec = importlib.util.spec_from_loader("import_graph", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_job_side_uses_the_shared_facts_themselves():
    assert auth.token_path is ray_facts.token_path and auth.env_for is ray_facts.token_env
    assert auth.SHADOWING is ray_facts.TOKEN_SHADOWING and auth.FOLDER == ray_facts.TOKEN_FOLDER
    assert ports.OFFSETS is ray_facts.HEAD_OFFSETS and ports.SPAN == ray_facts.SPAN
    assert sorted(ray_facts.HEAD_OFFSETS.values()) == list(range(ray_facts.SPAN))  # one run of ports
    path = ray_facts.token_path("/runs/r1", "42")
    assert path == Path("/runs/r1/.ray-auth/42.token")
    assert ray_facts.token_env(path) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/runs/r1/.ray-auth/42.token"}


def test_the_monitor_and_the_cli_import_no_ray_fact_from_the_job_side():
    graph = _import_graph()
    into_injob = sorted({(src, dst) for src, dst, *_ in graph.imports()
                         if dst.startswith("launcher.injob") and graph.stage(src) in ("monitor", "cli")})
    # the one left: `sf run --preflight`'s summary of the job's own report (not a Ray fact)
    assert into_injob == [("launcher.cli.cmd_run", "launcher.injob.preflight")], into_injob
