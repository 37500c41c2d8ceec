"""Bringing Ray up inside the allocation: the pools' hosts from Slurm (allocation), the head's
ports drawn and reserved (take_head_slot), one srun step for the head and one per het
group for the workers (start_ray), the barrier that waits for them (bring_ray_up), and the
stop and fresh start a restart in place or a redraw of the head's slot needs. Stdlib only.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from launcher import gateway, ownership, slurm, states
from launcher.injob import address as addr_mod
from launcher.injob import auth, mounts, private
from launcher.injob import ports as ports_mod
from launcher.injob.attempt import Attempt
from launcher.injob.contract import Job
from launcher.injob.node_logs import ray_step_name
from launcher.injob.node_ports import find_span
from launcher.injob.processes import STOP_GRACE_S, Processes
from launcher.injob.record_keeper import RecordKeeper, log


class PortsTaken(RuntimeError):
    """No span of the site's port range is free on the head's host (the message says which)."""


def job_end_timestamp(job_id: str) -> float | None:
    """The job's end (EndTime) as epoch seconds, for verl's save-before-expiry."""
    if os.environ.get("SLURM_JOB_END_TIME", "").isdigit():
        return float(os.environ["SLURM_JOB_END_TIME"])
    try:
        end = slurm.show_job(job_id).get("EndTime", "")
        return datetime.strptime(end, "%Y-%m-%dT%H:%M:%S").timestamp()
    except Exception:  # Unknown / not parsable / scontrol failed: verl just won't save early
        return None


def restart_count() -> int:
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


def allocation(pools, hetjob: bool) -> tuple[dict, dict]:
    """({pool: its hosts in Ray}, {pool: its spare hosts}) from Slurm's node lists: a pool's
    last `spare_nodes` hosts wait out of Ray until a restart in place swaps one in (heal.py)."""
    hosts, spares = {}, {}
    for pool in pools:
        key = f"SLURM_JOB_NODELIST_HET_GROUP_{pool.het_group}" if hetjob else "SLURM_JOB_NODELIST"
        nodelist = os.environ.get(key) or (os.environ.get("SLURM_JOB_NODELIST") if not hetjob else "")
        if not nodelist:
            raise RuntimeError(f"{key} is not set: is this a {'heterogeneous ' if hetjob else ''}Slurm job?")
        given = slurm.hostnames(nodelist)
        if len(given) != pool.nodes + pool.spare_nodes:
            log(f"warning: pool {pool.name} was compiled for {pool.nodes} nodes (+{pool.spare_nodes} spare), "
                f"Slurm gave {len(given)}")
        cut = pool.nodes if pool.spare_nodes and len(given) > pool.nodes else len(given)
        hosts[pool.name], spares[pool.name] = tuple(given[:cut]), tuple(given[cut:])
    return hosts, spares


class Bringup:
    """Ray up (and down again) on the attempt's hosts; sets the attempt's job, ports, stage."""

    def __init__(self, attempt: Attempt, records: RecordKeeper, procs: Processes):
        self.attempt = attempt
        self.records = records
        self.procs = procs

    def setup(self) -> None:
        """The attempt from the allocation: hosts, the head's address and ports, the wall-time
        end, the Job every process shares, the Ray token."""
        a = self.attempt
        a.wall0 = time.time()
        plan = a.plan
        hosts, spares = allocation(plan.pools, a.hetjob)
        head_node = hosts[plan.pools[0].name][0]
        batch_node = os.environ.get("SLURMD_NODENAME", head_node)
        if batch_node != head_node:
            log(f"warning: batch host {batch_node} is not the first node of het group 0 ({head_node})")
        self.records.record(states.ALLOCATED, pools={name: list(h) for name, h in hosts.items()},
                            nodes=sum(len(h) for h in hosts.values()), leader=a.leader)
        usable = ports_mod.usable_range(a.ray.port_range)
        if usable != tuple(a.ray.port_range):
            lo, hi = a.ray.port_range
            log(f"ports: using {usable[0]}-{usable[1]} of the site's {lo}-{hi} "
                "(the rest is the kernel's ephemeral range)")
            a.ray = replace(a.ray, port_range=usable)
        a.head_addr = addr_mod.node_address(head_node, a.ray.address_method, a.ray.address_prefix, a.ray.interface)
        a.restart = restart_count()
        a.end_ts = job_end_timestamp(a.leader)
        a.expires_ts = a.expiration()
        a.job = Job(run_dir=a.run_dir, job_id=a.job_id, leader=a.leader, launcher=plan.launcher,
                    config_name=plan.config_name, pools=plan.pools, hosts=hosts, spares=spares,
                    head_node=head_node, head="", ray=a.ray,
                    checkpoint_dir=plan.checkpoint_dir or "", paths_to_check=plan.paths_to_check,
                    host_missing=mounts.missing_here(plan.paths_to_check),
                    entry=plan.entry, overrides=plan.overrides, verl_pools=dict(plan.verl_pools))
        self.take_head_slot()
        if plan.launcher == "ray":
            # Every Ray process of the job (ray start on each node through srun's environment,
            # the barrier, the driver) carries the job's token; nothing else may use the cluster.
            a.token = auth.make_token(a.run_dir, a.leader)

    def take_head_slot(self) -> None:
        """The head's ports (free_head_slot) into the job: at the start and at each new start."""
        a = self.attempt
        a.ports = self.free_head_slot()
        a.job = replace(a.job, head=f"{a.head_addr}:{a.ports.gcs}")

    def free_head_slot(self) -> ports_mod.NodePorts:
        """The head's ports: the first free span of the range from a port drawn at random
        (ports_mod.random_base: another user cannot predict it and squat it beforehand), every
        port of it free (another user's job or program is seen by the bind check) and locked on
        the head's host for the whole job (node_ports.find_span: fcntl locks this process holds
        until it exits, so two jobs of this user starting on one host at once never share a
        port). PortsTaken, naming the range, its holders and the fix, when the range is full."""
        a = self.attempt
        locks = private.lock_dir(a.ray.temp_root)
        if locks is None:
            log(f"warning: no private lock dir under {a.ray.temp_root}: the head's ports are not reserved")
        start = ports_mod.random_base(a.ray.port_range)
        ports, reservation, why = find_span(a.head_addr, a.ray.port_range, start, locks)
        if ports is None:
            raise PortsTaken(why)
        if ports.gcs != start:
            log(f"ports: {start}-{start + ports_mod.SPAN - 1} is taken on {a.head_addr}; the head's ports start at "
                f"{ports.gcs}")
        a.port_reservation = reservation
        return ports

    def start_ray(self) -> None:
        # Each node writes its own log, logs/<job>-ray-<head|pool>-<node>.log (node.py);
        # srun's own messages (a task that died) land in the batch log.
        a = self.attempt
        node_cmd = [a.runtime.runtime_python(), "-m", "launcher.injob", "node"]
        # logs/ is made at the start (runs.make_subdirs); made again if it went, the user's alone
        gateway.make_dir(Path(a.run_dir) / "logs", ownership.PRIVATE_DIR, exist_ok=True, field="run")
        head = a.job.head_node
        first = a.plan.pools[0].name
        self.procs.srun(ray_step_name("head", first), [*node_cmd, "--role", "head"], kind="node", pool=first,
                        hosts=[head], het_group=0 if a.hetjob else None,
                        nodes=1, ntasks=1, nodelist=head, overlap=True, kill_on_bad_exit=True)
        for pool in a.plan.pools:
            workers = [h for h in a.job.hosts[pool.name] if h != head]
            if not workers:
                continue
            self.procs.srun(ray_step_name("worker", pool.name), [*node_cmd, "--role", "worker"], kind="node",
                            pool=pool.name, hosts=workers, het_group=pool.het_group if a.hetjob else None,
                            nodes=len(workers), ntasks=len(workers), ntasks_per_node=1, nodelist=workers,
                            overlap=True, kill_on_bad_exit=True)

    def bring_ray_up(self) -> None:
        """Every node's Ray step and the barrier that waits for them."""
        self.start_ray()
        self.procs.local("barrier", [self.attempt.runtime.runtime_python(), "-m", "launcher.injob", "barrier"],
                         kind="barrier", stdout=subprocess.PIPE)
        self.attempt.stage = states.STAGE_BRINGUP

    def stop_ray(self, grace_s: float = STOP_GRACE_S) -> None:
        self.procs.stop_all(grace_s)

    def new_start(self) -> None:
        """A fresh start inside the allocation: node events count from now, and the head's slot is
        drawn and reserved again (the stopped head's lock released first, so its slot may come
        back; any free one will do: the workers are told the new GCS port)."""
        self.attempt.wall0 = time.time()
        if self.attempt.port_reservation is not None:
            self.attempt.port_reservation.release()
        self.take_head_slot()
