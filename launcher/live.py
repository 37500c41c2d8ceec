"""Checks against the live cluster: can the partitions ever give what the pools ask?

A request that no partition can ever satisfy (`--profile fake:100x4` on a partition of 6
nodes) is accepted by sbatch and pends forever. `sf submit` (and `sf validate --live`) asks
Slurm once for its partitions and nodes (launcher.slurm.show_partitions/show_nodes) and
refuses such a pool with the partition's real size. Whether a node is up or busy does not
matter here: only what the partition could give if everything were free.

`capacity` and `check` are pure; the Slurm calls are the caller's.
"""

from __future__ import annotations

import re

from launcher.errors import SpecError

_GPU = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


def verify(plan, site) -> list[str]:
    """Ask Slurm (one `scontrol show partition` and one `scontrol show node`) and check the
    plan: SpecErrors (exit 2) when a pool can never run; else the warnings. When Slurm does
    not answer, one warning says the check was skipped."""
    from launcher import slurm
    from launcher.errors import SlurmError, SpecErrors

    try:
        cap = capacity(slurm.show_partitions(), slurm.show_nodes())
    except SlurmError as exc:
        return [f"not checked against the cluster (Slurm did not answer: {exc})"]
    if not cap:
        return ["not checked against the cluster (Slurm reported no partitions)"]
    errors, warnings = check(plan, site, cap)
    if errors:
        raise SpecErrors(errors)
    return warnings


def gpus_of(gres: str) -> int:
    """GPUs in a node's Gres string: `gpu:4`, `gpu:h200:8(S:0-1)`, `gpu:a:2,gpu:b:2` -> 4."""
    return sum(int(n) for n in _GPU.findall(gres or ""))


def capacity(partitions: list[dict], nodes: list[dict]) -> dict[str, list[int]]:
    """{partition: [GPUs of each of its nodes]} from `scontrol show partition/node -o`."""
    gpus = {n.get("NodeName"): gpus_of(n.get("Gres", "")) for n in nodes}
    out: dict[str, list[int]] = {}
    for node in nodes:
        for part in (node.get("Partitions") or "").split(","):
            if part:
                out.setdefault(part, []).append(gpus.get(node.get("NodeName"), 0))
    for part in partitions:
        out.setdefault(part.get("PartitionName", ""), [])
    return out


def partition_of(pool, plan, site) -> str | None:
    if plan.slurm.partition:
        return plan.slurm.partition
    series = site.series.get(pool.series)
    return series.partition if series else None


def check(plan, site, cap: dict[str, list[int]]) -> tuple[list[SpecError], list[str]]:
    """(errors, warnings): a pool its partition can never hold is an error naming the
    partition's real size; a rollout tensor-parallel size that does not divide the pool's
    GPUs is a warning."""
    errors, warnings = [], []
    for pool in plan.pools:
        part = partition_of(pool, plan, site)
        if part is None:
            continue
        field = f"pools.{pool.name}"
        if part not in cap:
            known = ", ".join(sorted(p for p in cap if p)) or "none"
            errors.append(SpecError(field, f"partition {part!r} does not exist on this cluster (partitions: {known}); "
                                    "fix the series' partition in the site file or pass --partition"))
            continue
        fitting = sum(1 for g in cap[part] if g >= pool.gpus_per_node)
        if fitting < pool.nodes:
            most = max(cap[part], default=0)
            errors.append(SpecError(field, f"{pool.nodes} nodes x {pool.gpus_per_node} GPUs can never run in partition "
                                    f"{part}: it has {len(cap[part])} nodes, {fitting} of them with >= "
                                    f"{pool.gpus_per_node} GPUs (at most {most} GPUs a node); ask for at most "
                                    f"{fitting} nodes (e.g. --profile {pool.series}:{fitting}x{pool.gpus_per_node})"))
    tp = _rollout_tp(plan.overrides)
    train = plan.pools[0] if plan.pools else None
    if tp and train and (train.nodes * train.gpus_per_node) % tp:
        warnings.append(f"rollout tensor_model_parallel_size={tp} does not divide pool {train.name}'s "
                        f"{train.nodes * train.gpus_per_node} GPUs: verl leaves some GPUs without a rollout engine")
    return errors, warnings


def _rollout_tp(overrides) -> int | None:
    for line in overrides:
        key, _, value = line.lstrip("+").partition("=")
        if key == "actor_rollout_ref.rollout.tensor_model_parallel_size" and value.isdigit():
            return int(value)
    return None
