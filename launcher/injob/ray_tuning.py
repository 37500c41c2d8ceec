"""Ray's GCS and RPC settings by cluster size (issue 22, item 6): a pure function of the
job's node count and the node's CPUs, applied by the supervisor to the job's environment
(the barrier's and the driver's Ray clients connect to the GCS too) and by the node wrapper
to every `ray start` of the job, through Ray's own environment convention: a `RAY_<name>`
variable sets the `<name>` entry of ray_config_def.h in every Ray process (GCS, raylet,
workers, agents) that inherits it.
Every name below is in Ray 2.60's ray_config_def.h (and in the runtime's _raylet.so).

Ray's defaults (2.60) and why sf raises them as the cluster grows:
  gcs_rpc_server_connect_timeout_s       5   a worker's first GCS connection; Ray's
      large-cluster advice calls 5 s "extremely tight": a head busy registering hundreds
      of raylets (or a loaded host) misses it and the worker's `ray start` gives up
  gcs_rpc_server_reconnect_timeout_s    60   how long a raylet keeps retrying a GCS it lost
  gcs_server_rpc_server_thread_num     cpus/4  the GCS's gRPC polling threads: the
  gcs_server_rpc_client_thread_num     cpus/4  registration burst of N raylets lands on them
  worker_register_timeout_seconds       60   a worker process's registration with its raylet
  raylet_report_resources_period_milliseconds 100  every raylet reports to the GCS this often:
      N nodes are N reports per period
  health_check_period_ms              3000   the GCS probes every raylet this often, and
  health_check_failure_threshold         5   declares it dead after this many misses
      (sf finds a dead node by its srun step ending, in seconds, whatever these say)
  (not settable: `ray start` gives its raylet 30 s to appear in the GCS, a constant in Ray
  2.60's ray/_private/node.py; a start that misses it fails and sf's start retries,
  site ray.start_retries, are the remedy: on the 2-core dev host 16 nodes starting at once
  missed it on 10 of 15 workers)

The values for 64 nodes and more are the ones NeMo-RL ships for runs of hundreds of nodes
(its PRs 3089/3158). They are defaults only (`setdefault`): whatever the batch script
exported (the site's `env:`, its `ray.large_cluster.env`) wins. So sf's tuning lives only
here: a copy exported by the render step would beat the 256-node tier. Open files:
node.raise_nofile lifts the soft limit to the hard one (Ray's large-cluster guide: at least
65535); nofile_warning says when the hard limit is lower on a large job. Standard library only.
"""

from __future__ import annotations

NOFILE_WANTED = 65535  # Ray's large-cluster guide
MEDIUM, LARGE, HUGE = 32, 64, 256  # node counts where the tiers start


def ray_env_for(nodes: int, cpus: int) -> dict[str, str]:
    """RAY_<config> -> value for a Ray cluster of `nodes` nodes whose head has `cpus` CPUs.
    Never below Ray's own default (its thread counts scale with the head's CPUs)."""
    ray_threads = max(1, cpus // 4)  # Ray's default for both GCS thread pools
    env = {
        "RAY_gcs_rpc_server_connect_timeout_s": "30",  # a loaded host at any size
        "RAY_gcs_rpc_server_reconnect_timeout_s": "120",
    }
    if nodes >= MEDIUM:
        env.update({
            "RAY_gcs_rpc_server_connect_timeout_s": "60",
            "RAY_gcs_server_rpc_server_thread_num": str(max(ray_threads, 16)),
            "RAY_gcs_server_rpc_client_thread_num": str(max(ray_threads, 8)),
            "RAY_worker_register_timeout_seconds": "120",
        })
    if nodes >= LARGE:
        env.update({
            "RAY_gcs_rpc_server_connect_timeout_s": "120",
            "RAY_gcs_server_rpc_server_thread_num": str(max(ray_threads, 64)),
            "RAY_gcs_server_rpc_client_thread_num": str(max(ray_threads, 32)),
            "RAY_raylet_report_resources_period_milliseconds": "500",
            "RAY_health_check_period_ms": "10000",
        })
    if nodes >= HUGE:
        # a GCS that answers late under a 1000-raylet load is not a dead node
        env.update({
            "RAY_gcs_rpc_server_reconnect_timeout_s": "300",
            "RAY_worker_register_timeout_seconds": "300",
            "RAY_raylet_report_resources_period_milliseconds": "1000",
            "RAY_health_check_failure_threshold": "10",
        })
    return env


def apply(env: dict, nodes: int, cpus: int) -> dict:
    """`env` with the tuning filled in where it sets nothing itself (the site's values win)."""
    for name, value in ray_env_for(nodes, cpus).items():
        env.setdefault(name, value)
    return env


def nofile_warning(soft: int | None, nodes: int) -> str | None:
    """A line for the node's log when a large job runs with fewer open files than Ray's guide
    asks for (the GCS holds a connection per raylet and per worker process)."""
    if soft is None or nodes < LARGE or soft >= NOFILE_WANTED:
        return None
    return (f"warning: open files limited to {soft} (hard limit) on a {nodes}-node job; Ray's large-cluster "
            f"guide asks for at least {NOFILE_WANTED}: ask the site admin to raise nofile for Slurm jobs")
