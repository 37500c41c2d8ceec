"""Which physical GPUs a node's step really sees, and the checks across nodes.

Slurm hands each step device indices (CUDA_VISIBLE_DEVICES) that are local to the node as
Slurm knows it. Where two Slurm nodes share a host (emulated nodes, a node split by a
badly written gres.conf, `task/none` with no device cgroup), both may be told `0` and
train on the same card without any error. So every node reports the UUIDs behind its
indices (`nvidia-smi --query-gpu=index,uuid`), and the supervisor refuses to start the
driver when two nodes of one job name the same UUID, or a node has fewer than its pool
asked for.

Without nvidia-smi (CPU nodes, the dev cluster's fake GPUs) a GPU's identity is what
Slurm handed the step, `<slurm node>:<index>`: nothing to compare across hosts, but the
count still holds. Stdlib only.
"""

from __future__ import annotations

import os
import subprocess

QUERY = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]


# where a step's devices are named, first found wins (topology.gpus_given counts them)
DEVICE_ENV_ORDER = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def device_entries(environ=None) -> list[str] | None:
    """The step's device entries (indices or UUIDs), in order, from the first variable of
    DEVICE_ENV_ORDER that is set; None when none is."""
    env = os.environ if environ is None else environ
    for key in DEVICE_ENV_ORDER:
        value = env.get(key)
        if value is not None and value.strip() not in ("", "NoDevFiles"):
            return [v.strip() for v in value.split(",") if v.strip()]
    return None


def visible_entries(environ=None) -> list[str]:
    """The step's device entries (indices or UUIDs), in order; [] when none are set."""
    return device_entries(environ) or []


def parse_smi(text: str) -> dict[str, str]:
    """`index, uuid` lines -> {index: uuid}; lines that are not that shape are skipped."""
    table = {}
    for line in text.splitlines():
        index, sep, uuid = line.partition(",")
        if sep and index.strip().isdigit() and uuid.strip():
            table[index.strip()] = uuid.strip()
    return table


def resolve(entries: list[str], table: dict[str, str], node: str) -> tuple[list[str], str]:
    """(identities, source): UUIDs from the nvidia-smi table where it knows the entry,
    else `<node>:<entry>` (source "slurm")."""
    if table:
        uuids = set(table.values())
        ids = [e if e in uuids else table.get(e, f"{node}:{e}") for e in entries]
        return ids, "nvidia-smi"
    return [f"{node}:{e}" for e in entries], "slurm"


def identify(node: str, environ=None, timeout: float = 10.0) -> dict:
    """{"ids": [...], "source": "nvidia-smi"|"slurm"|"none", "error"?} for this step."""
    entries = visible_entries(environ)
    if not entries:
        return {"ids": [], "source": "none"}
    env = dict(os.environ if environ is None else environ)
    # nvidia-smi lists every card of the host in PCI order whatever CUDA_VISIBLE_DEVICES says;
    # Slurm's indices are in that order too (gres.conf File= lines sorted by device number).
    error = None
    try:
        out = subprocess.run(QUERY, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        table = parse_smi(out.stdout) if out.returncode == 0 else {}
        if out.returncode != 0:
            error = (out.stderr.strip() or f"exit {out.returncode}")[:200]
    except FileNotFoundError:  # no NVIDIA driver tools here: Slurm's word is all there is
        table = {}
    except (OSError, subprocess.TimeoutExpired) as exc:
        table, error = {}, f"nvidia-smi: {exc.__class__.__name__}: {exc}"[:200]
    ids, source = resolve(entries, table, node)
    result = {"ids": ids, "source": source}
    if error:
        result["error"] = error
    return result


def conflicts(seen: dict[str, list[str]], wanted: dict[str, int]) -> list[str]:
    """Problems with the GPUs the nodes reported: one line per shared GPU (naming every
    node that sees it) and per node short of its pool's GPUs. `seen`: {node: ids};
    `wanted`: {node: GPUs its pool asked for}."""
    owners: dict[str, list[str]] = {}
    for node, ids in seen.items():
        for gpu in dict.fromkeys(ids):
            owners.setdefault(gpu, []).append(node)
    problems = [f"GPU {gpu} is seen by nodes {', '.join(nodes)}: they would share one card "
                "(check gres.conf File= lines and the step's CUDA_VISIBLE_DEVICES on each node)"
                for gpu, nodes in owners.items() if len(nodes) > 1]
    for node, want in wanted.items():
        have = len(seen.get(node, []))
        if node in seen and have < want:
            problems.append(f"node {node} sees {have} GPUs, its pool asked for {want}")
    return problems
