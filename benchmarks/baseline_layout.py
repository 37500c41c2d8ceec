"""Per-node `ray start` command lines for the baseline scripts, built by sf's own code.

    python baseline_layout.py OUT_DIR NODE1 NODE2 ...      (inside a Slurm job)

So that a baseline differs from sf in its bring-up ALGORITHM only, every Ray node of a
baseline job gets exactly what sf's node wrapper would give it: the same port block per
(job, node slot) inside the site's range (minus the kernel's ephemeral range), the same
short temp dir per (job, Slurm node name), the same loopback address per node, the same
`ray start --block` flags (launcher.injob.node.ray_start_argv: no dashboard, pool and node
tags, CPUs and GPUs Slurm gave the job). Writes OUT_DIR/argv.<node> (one argument per
line) for baseline_node.sh, and prints `HEAD_NODE=... GCS=addr:port` for the script to eval.

Settings come from the environment set by benchmarks/bringup.py from the site file:
BX_PORT_RANGE (lo-hi), BX_TEMP_ROOT, BX_ADDR_PREFIX, BX_CPUS, BX_GPUS. Stdlib + sf only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launcher.injob import address as addr_mod
from launcher.injob import ports as ports_mod
from launcher.injob.node import ray_start_argv


def main(argv: list[str]) -> int:
    out_dir, nodes = Path(argv[0]), argv[1:]
    job_id = os.environ["SLURM_JOB_ID"]
    lo, _, hi = os.environ.get("BX_PORT_RANGE", "20000-59999").partition("-")
    port_range = ports_mod.usable_range((int(lo), int(hi)))
    temp_root = os.environ.get("BX_TEMP_ROOT", "/tmp")
    prefix = os.environ.get("BX_ADDR_PREFIX", "127.0.0")
    cpus = int(os.environ.get("BX_CPUS", "4"))
    gpus = int(os.environ.get("BX_GPUS", "4"))
    head_node = nodes[0]
    head_ports = ports_mod.head_ports(job_id, port_range)
    gcs = f"{addr_mod.loopback_address(head_node, prefix)}:{head_ports.gcs}"
    out_dir.mkdir(parents=True, exist_ok=True)
    for slot, node in enumerate(nodes):
        role = "head" if slot == 0 else "worker"
        address = addr_mod.loopback_address(node, prefix)
        args = ray_start_argv(role=role, node=node, pool="train", address=address, head=gcs,
                              ports=ports_mod.block_ports(ports_mod.slot_first_block(
                                  ports_mod.job_block(job_id, port_range), slot) % ports_mod.n_blocks(port_range),
                                  slot, port_range),
                              temp=ports_mod.temp_dir(temp_root, job_id, node), cpus=cpus, gpus=gpus)
        (out_dir / f"argv.{node}").write_text("\n".join(args) + "\n")
        (out_dir / f"temp.{node}").write_text(ports_mod.temp_dir(temp_root, job_id, node) + "\n")
    print(f"HEAD_NODE={head_node} GCS={gcs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
