"""`ray start` as Ray's own CLI runs it (`python -m launcher.injob.ray_start start ...`, same
arguments), less two head processes that a job sf starts never uses:

  - the Ray Client server (`ray.util.client.server`): it serves `ray://` drivers from outside
    the cluster; sf's drivers, the preflight, the barrier and `sf attach` all join through the
    GCS address inside the job. Ray 2.60 starts it whenever grpc is installed and refuses
    --ray-client-server-port=0, so no argument turns it off. Without it the head has one
    listener less on the node's address.
  - the dashboard head process when the dashboard is off (--include-dashboard=false, sf's
    default): Ray 2.60 still starts it, loading only its usage-stats module (sf turns usage
    stats off), so it serves nothing.

Each costs about 1.2 CPU-s at every start of a head (and about 100 MiB while it runs); on a
busy login-node-sized host that is a good part of what a small job's bring-up costs.
Everything else (the GCS, the raylet, the agents, the log monitor, the autoscaler monitor
that `ray status` reads) starts as Ray starts it. Where a Ray version lacks the methods
replaced here, Ray starts as it always does.
"""

from __future__ import annotations

import sys

MODULE = "launcher.injob.ray_start"  # what `python -m` runs (here __name__ is "__main__")
DASHBOARD_OFF = "--include-dashboard=false"  # launcher.injob.node passes it unless the site wants the dashboard


def skip_unused_head_processes(node_class, argv: list[str]) -> list[str]:
    """Replace, on Ray's Node class, the start of the processes above that `argv` leaves
    unused; returns what was skipped (names of the replaced methods)."""
    skipped = []
    if hasattr(node_class, "start_ray_client_server"):
        node_class.start_ray_client_server = lambda self: None
        skipped.append("start_ray_client_server")
    if DASHBOARD_OFF in argv and hasattr(node_class, "start_api_server"):
        node_class.start_api_server = lambda self, **_: None
        skipped.append("start_api_server")
    return skipped


def main() -> int:
    from ray._private import node as ray_node  # the runtime's Ray, on the job's nodes
    from ray.scripts import scripts

    skip_unused_head_processes(ray_node.Node, sys.argv)
    sys.argv[0] = "ray"
    return scripts.main()


if __name__ == "__main__":
    sys.exit(main())
