"""Ray's GCS and RPC settings by cluster size (launcher/injob/ray_tuning.py, issue 22 item 6):
Ray 2.60's real names, never below Ray's defaults, the render step's large-job values at 64
nodes and more, and the site's own values always winning."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from launcher.injob import node, ray_tuning

# Ray 2.60's defaults (ray_config_def.h) for what the tuning may set
RAY_DEFAULTS = {"gcs_rpc_server_connect_timeout_s": 5, "gcs_rpc_server_reconnect_timeout_s": 60,
                "worker_register_timeout_seconds": 60, "raylet_report_resources_period_milliseconds": 100,
                "health_check_period_ms": 3000, "health_check_failure_threshold": 5}
SIZES = (1, 2, 4, 8, 16, 32, 63, 64, 128, 256, 1000, 4096)


def raylet_so() -> Path | None:
    state = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev"))
    for root in (state / "runtimes" / "verl-0.9.1", Path(".venv")):
        found = sorted(root.glob("lib/python3*/site-packages/ray/_raylet.so"))
        if found:
            return found[0]
    return None


@pytest.mark.parametrize("nodes", SIZES)
def test_every_name_is_a_ray_config_and_no_value_is_below_rays_default(nodes):
    for cpus in (2, 16, 96, 256):
        env = ray_tuning.ray_env_for(nodes, cpus)
        for name, value in env.items():
            assert re.fullmatch(r"RAY_[a-z_]+", name), name
            key = name[len("RAY_"):]
            if key in RAY_DEFAULTS:
                assert int(value) >= RAY_DEFAULTS[key], (name, value)
            else:  # the two GCS thread pools: Ray's default is the head's CPUs / 4
                assert key in ("gcs_server_rpc_server_thread_num", "gcs_server_rpc_client_thread_num")
                assert int(value) >= max(1, cpus // 4)


@pytest.mark.built  # the dev runtime's Ray
def test_the_names_are_in_the_runtimes_ray():
    so = raylet_so()
    if so is None:
        pytest.skip("no Ray 2.60 _raylet.so here")
    data = so.read_bytes()
    names = {n for size in SIZES for n in ray_tuning.ray_env_for(size, 16)}
    for name in names:
        assert b"\0" + name[len("RAY_"):].encode() + b"\0" in data, name


def test_the_tiers_grow_with_the_cluster():
    small, medium, large, huge = (ray_tuning.ray_env_for(n, 2) for n in (8, 32, 64, 1000))
    assert small == {"RAY_gcs_rpc_server_connect_timeout_s": "30", "RAY_gcs_rpc_server_reconnect_timeout_s": "120"}
    assert medium["RAY_gcs_server_rpc_server_thread_num"] == "16"
    assert medium["RAY_gcs_rpc_server_connect_timeout_s"] == "60"
    assert huge["RAY_gcs_rpc_server_reconnect_timeout_s"] == "300"
    assert huge["RAY_health_check_failure_threshold"] == "10"
    for n in SIZES:  # monotone: a bigger cluster never gets a smaller value
        for name, value in ray_tuning.ray_env_for(n, 2).items():
            bigger = ray_tuning.ray_env_for(n * 2, 2)
            assert int(bigger.get(name, value)) >= int(value), (n, name)
    assert set(small) < set(medium) < set(large) < set(huge)


def test_a_head_with_many_cpus_keeps_rays_own_thread_count():
    env = ray_tuning.ray_env_for(64, 512)
    assert env["RAY_gcs_server_rpc_server_thread_num"] == "128"


def test_what_the_job_already_exports_wins():
    env = ray_tuning.apply({"RAY_health_check_period_ms": "2000", "PATH": "/bin"}, 128, 16)
    assert env["RAY_health_check_period_ms"] == "2000" and env["PATH"] == "/bin"
    assert env["RAY_gcs_server_rpc_server_thread_num"] == "64"


def test_the_node_wrapper_and_the_supervisor_apply_it():
    text = Path(node.__file__).read_text()
    assert 'ray_tuning.apply(ray_env(os.environ), len(job.nodes), os.cpu_count() or 1)' in text
    text = (Path(node.__file__).parent / "processes.py").read_text()
    assert "ray_tuning.apply(auth.unshadowed(os.environ), len(job.nodes), os.cpu_count() or 1)" in text


def test_nofile_warning_only_for_a_large_job_below_rays_guide():
    assert ray_tuning.nofile_warning(1024, 8) is None
    assert ray_tuning.nofile_warning(1 << 20, 1000) is None
    assert ray_tuning.nofile_warning(None, 1000) is None
    line = ray_tuning.nofile_warning(4096, 256)
    assert "4096" in line and "65535" in line and "256-node" in line
