"""Wait until the expected Ray nodes and GPUs of every pool are registered.

Runs with the runtime's python as ONE long-lived process started by the supervisor. It
asks the GCS for the node table every POLL_S seconds through Ray's GCS client (a single
cheap RPC, no driver, no `ray status` subprocess), bounded by the site's barrier
timeout. Result: one JSON line on stdout ({"ok", "seconds", "pools": {...}, "missing"}),
exit 0 when everyone joined, 3 on timeout (naming the hosts that never joined).
"""

from __future__ import annotations

import json
import os
import time

from launcher import runs, states
from launcher.injob import topology
from launcher.injob.contract import Job

POLL_S = 0.1  # one cheap GCS RPC; the barrier passes within this of the last node
WAITING_AFTER_S = 5.0  # a normal bring-up joins within this: only a longer wait is recorded


class NodeTable:
    """Reads the alive nodes' total resources from the GCS."""

    def __init__(self, gcs_address: str):
        self.address = gcs_address
        self._client = None
        self._fallback = False

    def _connect(self):
        from ray._raylet import GcsClient  # noqa: PLC0415 (runtime-only import)

        self._client = GcsClient(address=self.address)

    def nodes(self) -> list[dict]:
        """[{"node_id", "address", "resources"}] for alive nodes."""
        if not self._fallback:
            try:
                if self._client is None:
                    self._connect()
                info = self._client.get_all_node_info(timeout=5)
                out = []
                for node_id, node in info.items():
                    if getattr(node, "state", 0) != 0:  # GcsNodeInfo.ALIVE == 0
                        continue
                    out.append({"node_id": str(node_id), "address": node.node_manager_address,
                                "resources": dict(node.resources_total)})
                return out
            except (ImportError, AttributeError, TypeError):
                self._fallback = True
            except Exception:
                # a GCS that is not up yet, or one that came up again (the head's start was
                # retried: a new cluster id): connect afresh on the next poll
                self._client = None
                raise
        import ray  # noqa: PLC0415

        if not ray.is_initialized():
            ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
        return [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "resources": n["Resources"]}
                for n in ray.nodes() if n.get("Alive")]


def summarize(nodes: list[dict], job: Job) -> dict:
    """Per pool: which expected hosts joined (with their GPUs), which are missing."""
    by_host = {}
    for node in nodes:
        for key in node["resources"]:
            if key.startswith(topology.NODE_PREFIX):
                by_host[key] = node
    report = {}
    for pool in job.pools:
        joined, missing, short = {}, [], []
        for host in job.hosts.get(pool.name, ()):
            node = by_host.get(topology.node_resource(host))
            if node is None or topology.pool_resource(pool.name) not in node["resources"]:
                missing.append(host)
                continue
            gpus = int(node["resources"].get("GPU", 0))
            joined[host] = {"address": node["address"], "gpus": gpus,
                            "cpus": int(node["resources"].get("CPU", 0)), "node_id": node["node_id"]}
            if gpus < pool.gpus_per_node:
                short.append(host)
        report[pool.name] = {"expected_nodes": pool.nodes, "gpus_per_node": pool.gpus_per_node,
                             "joined": joined, "missing": missing, "short_of_gpus": short,
                             "gpus": sum(j["gpus"] for j in joined.values())}
    return report


def complete(report: dict) -> bool:
    return all(not p["missing"] and not p["short_of_gpus"] for p in report.values())


def wait(job: Job, poll: float = POLL_S, on_waiting=None) -> dict:
    """Poll until complete or `timeout`; `on_waiting(missing hosts)` is called whenever the set
    of hosts not yet joined changes, from WAITING_AFTER_S on (what `sf status` shows)."""
    start, timeout = time.monotonic(), job.ray.barrier_timeout_s
    table = NodeTable(job.head)
    report, error = {}, None
    told = None
    while True:
        try:
            report = summarize(table.nodes(), job)
            error = None
            missing = sorted(h for p in report.values() for h in p["missing"] + p["short_of_gpus"])
            if on_waiting and missing and missing != told and time.monotonic() - start >= WAITING_AFTER_S:
                told = missing
                on_waiting(missing)
            if complete(report):
                return {"ok": True, "seconds": round(time.monotonic() - start, 2), "pools": report,
                        "ray_nodes": sum(len(p["joined"]) for p in report.values())}
        except Exception as exc:  # GCS not answering yet: keep polling until the deadline
            error = f"{exc.__class__.__name__}: {exc}"
        if time.monotonic() - start > timeout:
            missing = [h for p in report.values() for h in p["missing"]] if report else \
                job.nodes
            short = [h for p in report.values() for h in p["short_of_gpus"]]
            return {"ok": False, "seconds": round(time.monotonic() - start, 2), "pools": report,
                    "missing": missing, "short_of_gpus": short, "error": error}
        time.sleep(poll)


def main() -> int:
    job = Job.from_env()

    def waiting(missing: list[str]) -> None:
        pools = {h: pool.name if (pool := job.pool_of(h)) else "?" for h in missing}
        try:
            runs.record_phase(job.run_dir, states.BARRIER_WAITING, missing=missing, pools=pools)
        except OSError:
            pass

    result = wait(job, on_waiting=waiting)
    print(json.dumps(result, separators=(",", ":")), flush=True)
    # Skip Ray's client teardown (0.1-0.2 s): the supervisor waits for this exit.
    os._exit(0 if result["ok"] else 3)
