"""Placement groups per pool, as verl asks for them, pinned to the pool's Slurm nodes.

verl 0.9.1 (`verl/single_controller/ray/base.py`, RayResourcePool.get_placement_groups)
makes, for a resource pool of `[n_gpus_per_node] * nnodes`, one STRICT_PACK placement
group per node of n_gpus_per_node bundles `{"CPU": max_colocate_count, "GPU": 1}`
(ResourcePoolManager's max_colocate_count is 3). It checks only the cluster's total GPU
count, so nothing keeps `teacher_pool` on the teacher group's nodes. Adding the pool's
custom resource (every node of the pool advertises `sf_pool_<name>`) to every bundle
does. verl_main uses tag_bundles() on verl's own bundles; preflight uses pool_bundles()
and pin_report() to prove where each pool lands.
"""

from __future__ import annotations

import time

from launcher.injob import topology
from launcher.plan import Pool

VERL_MAX_COLOCATE = 3

# Which verl resource pool each role's workers are in is the method's (its recipe's trainer
# family, configs/methods/verl/<version>/_trainers.yaml): the job reads it from the Plan
# (Job.verl_pools), never from the entry, so an experiment's own main.py is pinned the same.

# CPUs verl 0.9.1 asks per GPU bundle of a standalone rollout server's pool (replica.py:200-204)
VERL_ROLLOUT_COLOCATE = 2
# verl's name for the pool of a model's own rollout servers: `rollout_pool_<replica>`
# (workers/rollout/replica.py:198), the teacher's and the reward model's named after their
# role (`rollout_pool_teacher_0`), whatever the trainer family.
SERVER_POOL = "rollout_pool_"


def role_of(verl_pool: str, verl_pools: dict) -> str:
    """The role whose workers a verl resource pool holds, by the Plan's `verl_pools` (role ->
    the pool's name prefix, from the method's recipe): a role's own servers first, then the
    longest prefix that names the pool (roles sharing one, as main_ppo's global_pool: the
    first, the actor); the actor when none does."""
    name = verl_pool or ""
    for role in verl_pools:
        if name.startswith(SERVER_POOL + role):
            return role
    named = [(len(prefix), -i, role) for i, (role, prefix) in enumerate(verl_pools.items())
             if prefix and name.startswith(prefix)]
    return max(named)[2] if named else "actor"


def slurm_pool_for(verl_pool: str, pools: tuple[Pool, ...], verl_pools: dict) -> Pool:
    """The Slurm pool a verl resource pool must land on:
    the pool that `roles:` gives its role, never a pool picked by its name (a training pool
    named `teach` stays a training pool). Roles without a pool of their own run with the
    actor, on het group 0."""
    role = role_of(verl_pool, verl_pools)
    target = next((p for p in pools if role in p.roles), None)
    return target or next((p for p in pools if p.het_group == 0), pools[0])


def role_report(pools: tuple[Pool, ...], placed: dict, verl_pools: dict) -> list[dict]:
    """Per role of every pool: the Slurm pool its verl resource pool (`verl_pools`, the
    Plan's: role -> verl pool) is pinned to and the nodes that pool's bundles landed on
    (`placed`: pool name -> pin_report); ok when that is the pool `roles:` names. A role the
    method does not name runs with the actor."""
    out = []
    for pool in pools:
        for role in pool.roles:
            target = slurm_pool_for(verl_pools.get(role) or verl_pools.get("actor", ""), pools, verl_pools)
            place = placed.get(target.name) or {}
            out.append({"role": role, "pool": pool.name, "placed_on_pool": target.name,
                        "nodes": list(place.get("nodes") or []),
                        "ok": target.name == pool.name and bool(place.get("ok", True))})
    return out


def tag_bundles(bundles: list[dict], resource: str) -> list[dict]:
    tagged = []
    for bundle in bundles:
        bundle = dict(bundle)
        bundle[resource] = 1
        tagged.append(bundle)
    return tagged


def pool_bundles(pool: Pool, cpus_per_bundle: float | None = None) -> list[list[dict]]:
    """verl's placement-group scheme for this pool (one PG per node), tagged."""
    bundle = {"CPU": verl_cpus(pool) if cpus_per_bundle is None else cpus_per_bundle, "GPU": 1}
    return [tag_bundles([bundle] * pool.gpus_per_node, topology.pool_resource(pool.name))
            for _ in range(pool.nodes)]


def verl_cpus(pool: Pool) -> int:
    """CPUs verl asks per GPU bundle on this pool: 3 (ResourcePoolManager's max_colocate_count),
    2 on a pool that holds only standalone rollout servers (replica.py:200-204)."""
    return VERL_ROLLOUT_COLOCATE if tuple(pool.roles) == ("rollout",) else VERL_MAX_COLOCATE


def fitting_cpus(pool: Pool, node_cpus: int) -> tuple[float, str | None]:
    """CPUs per bundle: verl's (verl_cpus) when the nodes hold them, else what fits (with a warning)."""
    per_bundle = verl_cpus(pool)
    need = per_bundle * pool.gpus_per_node
    if node_cpus >= need:
        return per_bundle, None
    per = max(0.01, round(node_cpus / max(1, pool.gpus_per_node), 2))
    return per, (f"pool {pool.name}: verl reserves {per_bundle} CPUs per GPU bundle "
                 f"({need} per node) but its nodes have {node_cpus}; verl's placement groups would not fit "
                 f"(placement checked with {per} CPUs per bundle)")


def pin_report(pool: Pool, hosts: tuple[str, ...], node_cpus: int, timeout: float = 30) -> dict:
    """Create the pool's tagged placement groups, report the node of every bundle (on `hosts`,
    the pool's nodes, or not), remove them."""
    import ray  # noqa: PLC0415
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    cpus, warning = fitting_cpus(pool, node_cpus)
    node_names = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for key in node["Resources"]:
            if key.startswith(topology.NODE_PREFIX):
                node_names[node["NodeID"]] = key[len(topology.NODE_PREFIX):]
    pgs = [placement_group(bundles, strategy="STRICT_PACK", name=f"sf_preflight_{pool.name}_{i}")
           for i, bundles in enumerate(pool_bundles(pool, cpus))]
    bundles, ok, error = [], True, None
    try:
        ready = [pg.wait(timeout_seconds=timeout) for pg in pgs]
        if not all(ready):
            ok, error = False, f"placement groups of pool {pool.name} not placed within {timeout:g}s"
        for i, pg in enumerate(pgs):
            table = placement_group_table(pg)
            for index, node_id in sorted((table.get("bundles_to_node_id") or {}).items()):
                node = node_names.get(node_id, node_id)
                on_pool = node in hosts
                ok = ok and on_pool
                bundles.append({"pg": i, "bundle": index, "node": node, "on_pool_nodes": on_pool})
    finally:
        for pg in pgs:
            remove_placement_group(pg)
    if len(bundles) != pool.nodes * pool.gpus_per_node:
        ok = False
        error = error or "not every bundle was placed"
    return {"pool": pool.name, "resource": topology.pool_resource(pool.name), "cpus_per_bundle": cpus,
            "bundles": bundles, "nodes": sorted({b["node"] for b in bundles}), "ok": ok,
            "error": error, "warning": warning, "time": time.time()}
