"""Facts about a job's Ray that both wings read: the job side (launcher/injob) makes the
cluster by them, the monitor and the CLI (`sf attach`, `sf dashboard`) find their way into it
by them. One home, so the two cannot drift apart. Standard library only.

  - the head's fixed ports: HEAD_OFFSETS from its GCS port on (the GCS port travels in the
    `head_up` phase as the head's address; the dashboard sits at its offset);
  - the job's Ray token: where its file lies in the run dir and what a Ray process needs in
    its environment to use it (and nothing else).
"""

from __future__ import annotations

from pathlib import Path

# The fixed ports of one Ray node of sf: SPAN consecutive ports, the offsets from its first
# (the GCS port on the head). Workers open only node_manager .. runtime_env_agent; Ray's worker
# processes take ports the kernel gives them (launcher/injob/ray_process.py).
HEAD_OFFSETS = {
    "gcs": 0,
    "node_manager": 1,
    "object_manager": 2,
    "dashboard_agent_grpc": 3,
    "dashboard_agent_listen": 4,
    "metrics_export": 5,
    "runtime_env_agent": 6,
    "client_server": 7,
    "dashboard": 8,
    "rdzv": 9,  # torchrun c10d rendezvous (SFT)
    # Ray's head fixes these two at 44227 and 44217 (env DASHBOARD_METRIC_PORT,
    # AUTOSCALER_METRIC_PORT): two heads on one host would fight over them.
    "dashboard_metrics": 10,
    "autoscaler_metrics": 11,
}
SPAN = len(HEAD_OFFSETS)


def dashboard_port(gcs_port: int) -> int:
    """The head's Ray dashboard port, from its GCS port."""
    return int(gcs_port) - HEAD_OFFSETS["gcs"] + HEAD_OFFSETS["dashboard"]


TOKEN_MODE = "token"  # RAY_AUTH_MODE
TOKEN_FOLDER = ".ray-auth"  # in the run dir, 0700
# Token sources Ray reads before RAY_AUTH_TOKEN_PATH: never passed on to the job's Ray.
TOKEN_SHADOWING = ("RAY_AUTH_TOKEN",)


def token_path(run_dir: str, job_id: str) -> Path:
    """The file of job `job_id`'s Ray token (one per attempt: the attempt's job id)."""
    return Path(run_dir) / TOKEN_FOLDER / f"{job_id}.token"


def token_env(path: Path) -> dict[str, str]:
    """What every Ray process of the job (and `sf attach`'s shell) needs in its environment."""
    return {"RAY_AUTH_MODE": TOKEN_MODE, "RAY_AUTH_TOKEN_PATH": str(path)}
