"""Health check across the job's Ray nodes (in `--preflight`): every ordered pair of nodes
moves an object through Ray's object store, the path verl's data and weight sync take, so a
node with a broken network, a full /dev/shm or a dead object manager is named before any
training starts. Up to MAX_ALL_PAIRS nodes every ordered pair is tried; above, a ring (each
node sends to the next and receives from the previous), which still touches every node
twice at O(N) cost. Runs inside the preflight's Ray driver.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from launcher.injob import topology

PAYLOAD_BYTES = 4 << 20  # above Ray's inline limit: it travels through the object store
MAX_ALL_PAIRS = 8
TIMEOUT_S = 60


def pairs(nodes: list[str]) -> list[tuple[str, str]]:
    """(sender, receiver) pairs to try."""
    if len(nodes) < 2:
        return []
    if len(nodes) <= MAX_ALL_PAIRS:
        return [(a, b) for a in nodes for b in nodes if a != b]
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def suspects(failed: list[tuple[str, str]], tried: list[tuple[str, str]]) -> list[str]:
    """Nodes in every pair they were part of that failed: the ones to exclude."""
    bad = []
    for node in {n for pair in failed for n in pair}:
        mine = [p for p in tried if node in p]
        if mine and all(p in failed for p in mine):
            bad.append(node)
    return sorted(bad)


def summary(results: dict[tuple[str, str], float | str], tried: list[tuple[str, str]]) -> dict:
    seconds = [v for v in results.values() if isinstance(v, float)]
    failed = [p for p in tried if not isinstance(results.get(p), float)]
    nodes = {n for pair in tried for n in pair}
    return {"ok": not failed, "pairs": len(tried),
            "mode": "all pairs" if len(nodes) <= MAX_ALL_PAIRS else "ring", "payload_mib": PAYLOAD_BYTES >> 20,
            "median_mib_per_s": round((PAYLOAD_BYTES >> 20) / statistics.median(seconds), 1) if seconds else None,
            "failed": [f"{a} -> {b}: {results.get((a, b), 'no answer')}" for a, b in failed],
            "suspect_nodes": suspects(failed, tried)}


def object_transfer(ray, nodes: list[str]) -> dict:
    """Every pair's transfer time (or error), summarised."""

    @ray.remote(num_cpus=0)
    def make(size: int) -> bytes:
        return bytes(size)

    @ray.remote(num_cpus=0)
    def fetch(boxed: list) -> float:
        start = time.perf_counter()
        data = ray.get(boxed[0])  # pulled to this node through the object store
        if len(data) != PAYLOAD_BYTES:
            raise ValueError(f"got {len(data)} bytes")
        return time.perf_counter() - start

    def on(node: str) -> dict:
        return {"resources": {topology.node_resource(node): 1}}

    tried = pairs(nodes)
    objects = {n: make.options(**on(n)).remote(PAYLOAD_BYTES) for n in nodes}
    refs = {(a, b): fetch.options(**on(b)).remote([objects[a]]) for a, b in tried}
    results: dict[tuple[str, str], float | str] = {}
    deadline = time.monotonic() + TIMEOUT_S
    for pair, ref in refs.items():
        try:
            results[pair] = float(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
        except Exception as exc:  # a dead node, a timeout: named in the report
            results[pair] = f"{exc.__class__.__name__}: {str(exc)[:200]}"
    return summary(results, tried)


def main() -> int:
    """`python -m launcher.injob health`: the check over the job's nodes before the driver
    (site ray.health_check: always); one JSON line, exit 0 when every transfer worked, else 3."""
    import ray

    job = topology.job_from_env()
    ray.init(address=job["head"], logging_level="ERROR", log_to_driver=False)
    result = object_transfer(ray, sorted(job["nodes"]))
    print(json.dumps(result, separators=(",", ":")), flush=True)
    os._exit(0 if result["ok"] else 3)  # no Ray client teardown: the supervisor waits for this exit
