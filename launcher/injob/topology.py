"""The job as the supervisor sees it: pools with their Slurm hosts, resource names, and
the job description (SF_JOB, JSON in the environment) every in-job process reads.

Stdlib only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field

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


@dataclass
class PoolHosts:
    name: str
    nodes: int
    gpus_per_node: int
    het_group: int
    roles: list = field(default_factory=list)
    hosts: list = field(default_factory=list)
    spare_nodes: int = 0
    spares: list = field(default_factory=list)  # allocated, kept out of Ray until swapped in

    @property
    def resource(self) -> str:
        return pool_resource(self.name)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["resource"] = self.resource
        return data


def _required(environ, key: str, where: str) -> str:
    value = (os.environ if environ is None else environ).get(key)
    if not value:
        raise SystemExit(f"{key} is not set: {where}")
    return value


def job_from_env(environ=None) -> dict:
    return json.loads(_required(environ, "SF_JOB", "this command runs inside an sf job only"))


def pools_from_job(job: dict) -> list[PoolHosts]:
    out = []
    for p in job["pools"]:
        p = {k: v for k, v in p.items() if k != "resource"}
        out.append(PoolHosts(**p))
    return out


def gpus_by_host(pools: list[PoolHosts]) -> dict[str, int]:
    """{host: GPUs its pool asks of every node}: what the GPU identity check and the health
    check's GPU part expect on each host."""
    return {host: pool.gpus_per_node for pool in pools for host in pool.hosts}


def pool_of_node(job: dict, node: str) -> PoolHosts | None:
    for pool in pools_from_job(job):
        if node in pool.hosts:
            return pool
    return None


def node_name(environ=None) -> str:
    return _required(environ, "SLURMD_NODENAME", "run this inside a Slurm step")


def gpus_given(environ=None) -> int:
    """GPUs Slurm gave this step on this node."""
    env = os.environ if environ is None else environ
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = env.get(key)
        if value is not None and value.strip() not in ("", "NoDevFiles"):
            return len([v for v in value.split(",") if v.strip()])
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
