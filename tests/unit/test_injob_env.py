"""The GPU environment a driver or Ray node gets inside a Slurm step."""
from __future__ import annotations

import subprocess

from launcher.injob.processes import gpu_env_wrapper


def _env_seen(env: dict) -> str:
    argv = gpu_env_wrapper(["sh", "-c", 'echo "cuda=${CUDA_VISIBLE_DEVICES:-} rocr=${ROCR_VISIBLE_DEVICES:-unset}"'])
    return subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_rocr_dropped_when_cuda_devices_are_set():
    # Slurm without Flags=nvidia_gpu_env sets both; verl's Worker refuses both.
    assert _env_seen({"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1"}) == "cuda=0,1 rocr=unset"


def test_rocr_kept_on_an_amd_only_step():
    assert _env_seen({"ROCR_VISIBLE_DEVICES": "2"}) == "cuda= rocr=2"


def test_arguments_pass_through_untouched():
    argv = gpu_env_wrapper(["printf", "%s|", "a b", "$(x)", "--k=v"])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert out == "a b|$(x)|--k=v|"
