"""What runs inside the Slurm job: the supervisor on the batch host, the per-node Ray
wrapper, the barrier, preflight and the verl entry that pins pools to Slurm groups.

Everything here except barrier/preflight/placement/verl_main is stdlib-only, so the
supervisor can run with the host's python when the runtime is a container.
"""
