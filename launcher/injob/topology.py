"""What a node of the job is in Ray and in Slurm: the custom resources that tag a pool's and
a node's Ray nodes, this step's Slurm node name, CPUs and GPUs. (The job itself, pools and
hosts, is launcher.injob.contract.Job.)

Stdlib only.
"""

from __future__ import annotations

import os
import re

from launcher.injob import gpus

POOL_PREFIX = "sf_pool_"
NODE_PREFIX = "sf_node_"
TAG_AMOUNT = 1000  # what a node advertises of its pool/node resource; a bundle asks 1


def _resource_safe(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]", "_", text)
    # Ray reads `_group_` as a placement-group resource: tasks asking for it wait forever.
    while "_group_" in name:
        name = name.replace("_group_", "_grp_")
    return name


def pool_resource(pool: str) -> str:
    return POOL_PREFIX + _resource_safe(pool)


def node_resource(node: str) -> str:
    return NODE_PREFIX + _resource_safe(node)


def _required(environ, key: str, where: str) -> str:
    value = (os.environ if environ is None else environ).get(key)
    if not value:
        raise SystemExit(f"{key} is not set: {where}")
    return value


def node_name(environ=None) -> str:
    return _required(environ, "SLURMD_NODENAME", "run this inside a Slurm step")


def gpus_given(environ=None) -> int:
    """GPUs Slurm gave this step on this node."""
    env = os.environ if environ is None else environ
    entries = gpus.device_entries(env)
    if entries is not None:
        return len(entries)
    value = env.get("SLURM_GPUS_ON_NODE")
    if value and value.isdigit():
        return int(value)
    return 0


def cpus_given(environ=None) -> int:
    env = os.environ if environ is None else environ
    for key in ("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE"):
        value = env.get(key, "")
        match = re.match(r"^(\d+)", value)
        if match:
            return int(match.group(1))
    return os.cpu_count() or 1
