"""Health check across the job's Ray nodes (in `--preflight`, and before every driver with
site `ray.health_check: always` or `--exclude-bad-nodes`).

Objects: every ordered pair of nodes moves an object through Ray's object store, the path
verl's data and weight sync take, so a node with a broken network, a full /dev/shm or a dead
object manager is named before any training starts. Up to MAX_ALL_PAIRS nodes every ordered
pair is tried; above, a ring (each node sends to the next and receives from the previous),
which still touches every node twice at O(N) cost.

GPUs (where the job has GPUs and its runtime has torch): a bf16 GEMM on every GPU (a card far
below the others' rate, or one that fails, names its node) and one NCCL all-reduce over all
of the job's GPUs (the collective verl's FSDP and weight sync use), with bus bandwidth. On the
dev cluster's fake GPUs (no torch, no nvidia-smi) this part says why it was skipped.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from launcher.injob import topology
from launcher.injob.contract import Job

PAYLOAD_BYTES = 4 << 20  # above Ray's inline limit: it travels through the object store
MAX_ALL_PAIRS = 8
TIMEOUT_S = 60
GEMM_SIZE = 8192  # bf16 8192^3: ~1.1 TFLOP a product, a few ms on an H100/H200
GEMM_REPEATS = 20
SLOW_GEMM_FRACTION = 0.5  # a GPU under half the job's median GEMM rate is named
ALLREDUCE_BYTES = 256 << 20
ALLREDUCE_REPEATS = 5
# test hook (cluster tests only): the job's last node (sorted) fails every transfer in this
# attempt (SLURM_RESTART_COUNT); exercises --exclude-bad-nodes without breaking a real node
TEST_FAIL_ENV = "SF_TEST_HEALTH_FAIL_ON_RESTART"


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


class NodeProbe:
    """One per node (a Ray actor pinned to it, no CPU reserved). One actor a node means one
    Ray worker process a node: a task per pair made Ray start a worker per task, and at N=8
    the 56 pairs' worker start-ups cost 24-25 s on the 2-core dev host. The preflight's path
    check runs on it too (`run`): as a task of its own it started a second worker on every
    node, which Ray kept idle beside the actor's (about 1 CPU-s a node)."""

    def __init__(self, fail: bool):
        self.fail = fail  # the test hook's node: every transfer through it fails

    def run(self, fn, *args):
        """`fn(*args)` here (a module-level function: Ray sends it by reference)."""
        return fn(*args)

    def make(self, size: int) -> bytes:
        if self.fail:
            raise RuntimeError(f"{TEST_FAIL_ENV}: this node plays broken")
        return bytes(size)

    def fetch(self, boxed: list) -> float:
        import ray

        if self.fail:
            raise RuntimeError(f"{TEST_FAIL_ENV}: this node plays broken")
        start = time.perf_counter()
        data = ray.get(boxed[0])  # pulled to this node through the object store
        if len(data) != PAYLOAD_BYTES:
            raise ValueError(f"got {len(data)} bytes")
        return time.perf_counter() - start


def probe_nodes(job: Job) -> list[str]:
    """The nodes the health check probes: every node of the job in Ray."""
    return sorted(job.gpus_by_host())


def broken_node(nodes: list[str]) -> str | None:
    """The test hook's node (TEST_FAIL_ENV in this attempt): the last one, else None."""
    if nodes and os.environ.get(TEST_FAIL_ENV, "") == os.environ.get("SLURM_RESTART_COUNT", "0"):
        return nodes[-1]
    return None


def node_probes(ray, nodes: list[str]) -> dict:
    """A NodeProbe on each of `nodes` (the test hook's node plays broken); the caller kills them."""
    probe = ray.remote(num_cpus=0)(NodeProbe)
    broken = broken_node(nodes)
    return {n: probe.options(resources={topology.node_resource(n): 1}).remote(n == broken) for n in nodes}


def object_transfer(ray, nodes: list[str], probes: dict | None = None) -> dict:
    """Every pair's transfer time (or error), summarised; through `probes` (node_probes of
    `nodes`, kept) or probes of its own (killed after)."""
    tried = pairs(nodes)
    if not tried:
        return summary({}, tried)
    actors = probes if probes is not None else node_probes(ray, nodes)
    try:
        objects = {n: actor.make.remote(PAYLOAD_BYTES) for n, actor in actors.items()}
        # boxed in a list so the receiving actor, not Ray's argument resolution, pulls the object
        refs = {(a, b): actors[b].fetch.remote([objects[a]]) for a, b in tried}
        results: dict[tuple[str, str], float | str] = {}
        deadline = time.monotonic() + TIMEOUT_S
        for pair, ref in refs.items():
            try:
                results[pair] = float(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
            except Exception as exc:  # a dead node, a timeout: named in the report
                results[pair] = _error(exc)
        return summary(results, tried)
    finally:
        if probes is None:
            kill_probes(ray, actors)


def kill_probes(ray, probes: dict) -> None:
    for actor in probes.values():
        ray.kill(actor)


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    # a task's error repeats the remote traceback: its last line is the cause
    return f"{exc.__class__.__name__}: {(text[-1] if text else '')[:200]}"


# -- GPUs -------------------------------------------------------------------------------

def gpu_runtime_missing() -> str | None:
    """Why the GPU part cannot run here (the driver's runtime is the workers'), or None."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("torch") is None:
        return "torch is not in the job's runtime"
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on the head node (fake or no GPUs)"
    return None


class GpuProbe:
    """One per GPU (a Ray actor with num_gpus=1, pinned to its node)."""

    def where(self) -> dict:
        import socket

        import ray
        import torch

        with socket.socket() as sock:  # a free port for the NCCL rendezvous, if rank 0
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        props = torch.cuda.get_device_properties(0)
        uuid = getattr(props, "uuid", None)
        return {"ip": ray.util.get_node_ip_address(), "port": port, "name": props.name,
                "uuid": f"GPU-{uuid}" if uuid else ",".join(str(g) for g in ray.get_gpu_ids())}

    def gemm(self, size: int, repeats: int) -> float:
        """bf16 TFLOP/s of `repeats` size^3 products, timed with CUDA events."""
        import torch

        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(repeats):
            a @ b
        end.record()
        torch.cuda.synchronize()
        return 2 * size ** 3 * repeats / (begin.elapsed_time(end) / 1000) / 1e12

    def all_reduce(self, rank: int, world: int, address: str, nbytes: int, repeats: int) -> float:
        """Seconds per all-reduce of nbytes over the world, after checking one's sum."""
        import datetime

        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl", init_method=f"tcp://{address}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        try:
            x = torch.full((nbytes // 4,), float(rank + 1), device="cuda")
            dist.all_reduce(x)
            torch.cuda.synchronize()
            want = world * (world + 1) / 2
            if x[0].item() != want or x[-1].item() != want:
                raise ValueError(f"all-reduce gave {x[0].item()}, want {want}")
            x.fill_(1.0)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(repeats):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            return (time.perf_counter() - start) / repeats
        finally:
            dist.destroy_process_group()


def gpu_summary(gemm: dict[tuple[str, str], float | str], reduce_s: float | str | None, world: int) -> dict:
    """The GPU part of the report. `gemm`: {(node, gpu): TFLOP/s or error}; `reduce_s`: the
    slowest rank's seconds per all-reduce, an error, or None (one GPU: nothing to reduce)."""
    rates = [v for v in gemm.values() if isinstance(v, float)]
    median = statistics.median(rates) if rates else None
    failed, suspects = [], set()
    for (node, gpu), value in sorted(gemm.items()):
        if not isinstance(value, float):
            failed.append(f"GEMM on {node} {gpu}: {value}")
            suspects.add(node)
        elif median and value < SLOW_GEMM_FRACTION * median:
            failed.append(f"GEMM on {node} {gpu}: {value:.0f} TFLOP/s, under {SLOW_GEMM_FRACTION:g}x the "
                          f"job's median {median:.0f}")
            suspects.add(node)
    allreduce: dict = {"gpus": world, "mib": ALLREDUCE_BYTES >> 20}
    if reduce_s is None:
        allreduce["skipped"] = "one GPU: nothing to reduce"
    elif isinstance(reduce_s, float):
        # nccl-tests' bus bandwidth: what each link carried, comparable across world sizes
        allreduce["busbw_gb_s"] = round(ALLREDUCE_BYTES / reduce_s * 2 * (world - 1) / world / 1e9, 1)
        allreduce["ms"] = round(reduce_s * 1000, 2)
    else:
        failed.append(f"NCCL all-reduce over {world} GPUs: {reduce_s}")
    return {"ok": not failed, "gpus": world,
            "gemm_tflops": {f"{node}/{gpu}": (round(v, 1) if isinstance(v, float) else v)
                            for (node, gpu), v in sorted(gemm.items())},
            "gemm_median_tflops": round(median, 1) if median else None,
            "allreduce": allreduce, "failed": failed, "suspect_nodes": sorted(suspects)}


def gpu_checks(ray, gpus_by_node: dict[str, int]) -> dict | None:
    """A GEMM on every GPU and one NCCL all-reduce over all of them; None without GPUs."""
    world = sum(gpus_by_node.values())
    if not world:
        return None
    why = gpu_runtime_missing()
    if why:
        return {"ok": True, "skipped": why}
    probe = ray.remote(num_cpus=0, num_gpus=1)(GpuProbe)
    slots = [(node, i) for node in sorted(gpus_by_node) for i in range(gpus_by_node[node])]
    actors = [probe.options(resources={topology.node_resource(node): 1}).remote() for node, _ in slots]
    deadline = time.monotonic() + 2 * TIMEOUT_S

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    names, gemm = {}, {}
    try:
        asked = {slot: actor.where.remote() for slot, actor in zip(slots, actors, strict=True)}
        for slot, ref in asked.items():  # the actors start (and import torch) side by side
            try:
                names[slot] = ray.get(ref, timeout=left())
            except Exception as exc:
                gemm[(slot[0], f"gpu{slot[1]}")] = _error(exc)
        label = {slot: names[slot]["uuid"] if slot in names else f"gpu{slot[1]}" for slot in slots}
        refs = {slot: actor.gemm.remote(GEMM_SIZE, GEMM_REPEATS) for slot, actor in zip(slots, actors, strict=True)
                if slot in names}
        for slot, ref in refs.items():
            try:
                gemm[(slot[0], label[slot])] = float(ray.get(ref, timeout=left()))
            except Exception as exc:
                gemm[(slot[0], label[slot])] = _error(exc)
        reduce_s: float | str | None = None
        if world > 1 and len(names) == world:
            first = names[slots[0]]
            address = f"{first['ip']}:{first['port']}"
            refs = [actor.all_reduce.remote(rank, world, address, ALLREDUCE_BYTES, ALLREDUCE_REPEATS)
                    for rank, actor in enumerate(actors)]
            try:
                reduce_s = max(float(t) for t in ray.get(refs, timeout=left()))
            except Exception as exc:
                reduce_s = _error(exc)
        elif world > 1:
            reduce_s = "not tried: not every GPU answered"
        report = gpu_summary(gemm, reduce_s, world)
        report["device"] = sorted({n["name"] for n in names.values()})
        return report
    finally:
        for actor in actors:  # free the GPUs before the driver asks for them
            ray.kill(actor)


def check(ray, job: Job, probes: dict | None = None) -> dict:
    """Objects between the job's nodes, then its GPUs: one report, `ok` only if both are.
    `probes`: node_probes of probe_nodes(job) that the caller made (and kills)."""
    gpus_by_node = job.gpus_by_host()
    result = object_transfer(ray, probe_nodes(job), probes)
    gpu = gpu_checks(ray, gpus_by_node)
    if gpu is not None:
        result["gpu"] = gpu
        result["ok"] = result["ok"] and gpu["ok"]
        result["failed"] = result["failed"] + gpu.get("failed", [])
        result["suspect_nodes"] = sorted(set(result["suspect_nodes"]) | set(gpu.get("suspect_nodes", [])))
    return result


def main() -> int:
    """`python -m launcher.injob health`: the check over the job's nodes before the driver
    (site ray.health_check: always, --exclude-bad-nodes); one JSON line, exit 0 when every
    check passed, else 3."""
    import ray

    job = Job.from_env()
    ray.init(address=job.head, logging_level="ERROR", log_to_driver=False)
    result = check(ray, job)
    print(json.dumps(result, separators=(",", ":")), flush=True)
    os._exit(0 if result["ok"] else 3)  # no Ray client teardown: the supervisor waits for this exit
