"""GPU identity (launcher.injob.gpus) and the per-job Ray token (launcher.injob.auth): pure parts."""
from __future__ import annotations

import os
import stat
import sys

from launcher.injob import auth, gpus
from launcher.injob.node import ray_command, ray_start_argv
from launcher.injob.ports import block_ports

SMI = "0, GPU-aaaa\n1, GPU-bbbb\n"


def test_visible_entries_prefers_cuda_and_skips_nodevfiles():
    assert gpus.visible_entries({"CUDA_VISIBLE_DEVICES": "1,0", "SLURM_STEP_GPUS": "0,1"}) == ["1", "0"]
    assert gpus.visible_entries({"CUDA_VISIBLE_DEVICES": "NoDevFiles", "SLURM_JOB_GPUS": "2"}) == ["2"]
    assert gpus.visible_entries({}) == []


def test_parse_smi_skips_noise():
    assert gpus.parse_smi(SMI + "No devices were found\n\n") == {"0": "GPU-aaaa", "1": "GPU-bbbb"}


def test_resolve_maps_indices_and_keeps_uuids():
    table = gpus.parse_smi(SMI)
    assert gpus.resolve(["1"], table, "n2") == (["GPU-bbbb"], "nvidia-smi")
    assert gpus.resolve(["GPU-aaaa"], table, "n2") == (["GPU-aaaa"], "nvidia-smi")
    # without nvidia-smi: what Slurm handed the step, per Slurm node
    assert gpus.resolve(["0", "1"], {}, "dev3") == (["dev3:0", "dev3:1"], "slurm")


def test_identify_with_a_fake_nvidia_smi(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '0, GPU-aaaa\\n1, GPU-bbbb\\n'\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "1"}
    assert gpus.identify("n2", env) == {"ids": ["GPU-bbbb"], "source": "nvidia-smi"}
    broken = tmp_path / "b"
    broken.mkdir()
    (broken / "nvidia-smi").write_text("#!/bin/sh\necho 'NVML: driver not loaded' >&2; exit 9\n")
    (broken / "nvidia-smi").chmod(0o755)
    env["PATH"] = f"{broken}:{os.environ['PATH']}"
    out = gpus.identify("n2", env)
    assert out["ids"] == ["n2:1"] and out["source"] == "slurm" and "driver not loaded" in out["error"]
    assert gpus.identify("n2", {"PATH": env["PATH"]}) == {"ids": [], "source": "none"}


def test_conflicts_name_every_node_that_shares_a_gpu_and_the_short_ones():
    seen = {"n1": ["GPU-a"], "n2": ["GPU-a"], "n3": ["GPU-c"]}
    problems = gpus.conflicts(seen, {"n1": 1, "n2": 1, "n3": 2})
    assert any("GPU-a" in p and "n1, n2" in p for p in problems)
    assert any(p.startswith("node n3 sees 1 GPUs") and "asked for 2" in p for p in problems)
    assert gpus.conflicts({"n1": ["n1:0"], "n2": ["n2:0"]}, {"n1": 1, "n2": 1}) == []
    # a node that never reported is the barrier's business, not a GPU conflict
    assert gpus.conflicts({"n1": ["GPU-a"]}, {"n1": 1, "n2": 1}) == []


def test_token_file_is_private_and_fresh_per_attempt(tmp_path):
    path = auth.make_token(str(tmp_path), "77")
    first = path.read_text()
    assert len(first) == 64 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = auth.make_token(str(tmp_path), "77")
    assert again == path and again.read_text() != first
    assert auth.env_for(path) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
    auth.remove_token(path)
    assert not path.exists()


def test_the_jobs_token_file_is_the_only_source_ray_reads(tmp_path):
    """Ray 2.60 reads RAY_AUTH_TOKEN before RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token after it:
    a token the user exported is dropped, the job's file named (so HOME's is never read)."""
    path = auth.make_token(str(tmp_path), "78")
    env = auth.pin({"RAY_AUTH_TOKEN": "the user's", "RAY_AUTH_MODE": "disabled", "HOME": "/home/u"}, path)
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path), "HOME": "/home/u"}
    assert auth.SHADOWING == ("RAY_AUTH_TOKEN",)


def test_ray_versions_with_tokens():
    assert auth.ray_supports_tokens("2.60.0") and auth.ray_supports_tokens("2.52.0")
    assert not auth.ray_supports_tokens("2.51.1") and not auth.ray_supports_tokens("2.9.3")
    assert auth.ray_supports_tokens("3.0.0rc1")


def test_ray_starts_through_this_interpreter_never_a_ray_on_path():
    assert ray_command() == [sys.executable, "-m", "launcher.injob.ray_start"]
    ports = block_ports(0, 0, (20000, 59999))
    argv = ray_start_argv(role="worker", node="n1", pool="train", address="127.0.0.11", head="127.0.0.10:1",
                          ports=ports, temp="/tmp/x", cpus=2, gpus=1)
    assert argv[:4] == [sys.executable, "-m", "launcher.injob.ray_start", "start"] and "--block" in argv
