"""Healing settings: spare nodes and the progress watchdog's limits (docs/healing.md)."""

from __future__ import annotations

from launcher.compile.slurm_time import time_seconds
from launcher.compile.values import is_number
from launcher.errors import SpecError
from launcher.spec.layers import Layer

# launcher/injob/heal.py: a restart in place (at most slurm.max_restarts_in_place per attempt)
# swaps a pool's spare node in for a node that died, never for the head (the first node of
# het group 0: the batch step, Ray's GCS and the driver live there); the progress watchdog
# declares a hang after hang_timeout_s without a training step (first_step_timeout_s before
# the first one).


def rule_spares(ctx) -> None:
    """Spare nodes are allocated for the whole job (render: --nodes=nodes+spares) and used only
    by a restart in place: with max_restarts_in_place 0, or on a one-node first pool (its one
    node is the head), they would sit idle for the whole run."""
    slurm = ctx.values.get("slurm") or {}
    restarts = slurm.get("max_restarts_in_place", ctx.site.max_restarts_in_place)
    whose = " (the site's value)" if ctx.spec.layer_of("slurm.max_restarts_in_place") in (Layer.SITE, Layer.DEFAULTS,
                                                                                          None) else ""
    for pool in ctx.pools:
        spares = pool.spare_nodes
        if not spares:
            continue
        field = f"spec.resources.pools[{pool.het_group}].spare_nodes"
        if restarts == 0:
            ctx.error(field, f"pool {pool.name!r} keeps {spares} spare node(s), but only a restart in place swaps a "
                      f"spare in and slurm.max_restarts_in_place is 0{whose}: the spares would sit allocated and idle; "
                      "set slurm.max_restarts_in_place: 1 (or more), or drop spare_nodes")
        elif pool.het_group == 0 and pool.nodes == 1:
            ctx.error(field, f"pool {pool.name!r} has one node, the head (the batch step, Ray's GCS and the driver "
                      f"run there), which a spare never replaces: its {spares} spare node(s) would never be used; "
                      "give the pool 2 or more nodes, or drop spare_nodes")


HANG_LIMITS = {"hang_timeout_s": ", or 0 to turn the watchdog off", "first_step_timeout_s": ""}


def rule_hang_limits(ctx) -> None:
    """A hang limit longer than the job's time limit: the watchdog never fires, and a hang
    holds the nodes until Slurm ends the job. Judged where one writer set both or the user set
    the limit: a limit the user set, or one the site file writes beyond the site's own time
    limit (every run that keeps the site's time inherits it). A short slurm.time the user
    picks under the site's limits is the user's choice (a 20-minute run on a site whose
    watchdog waits 30 minutes): not refused."""
    slurm = ctx.values.get("slurm") or {}
    time = slurm.get("time") or ctx.site.time
    try:
        limit = time_seconds(time)
    except SpecError:
        return  # slurm_options names a bad time
    if limit is None:
        return  # UNLIMITED
    for key, off in HANG_LIMITS.items():
        value = slurm.get(key)
        if ctx.spec.layer_of(f"slurm.{key}") in (Layer.SITE, Layer.DEFAULTS, None) or not is_number(value) \
                or value <= limit:
            continue
        ctx.error(f"slurm.{key}", f"{key}={value} is longer than the job's time limit (slurm.time {time} = {limit} s): "
                  f"the watchdog would never fire and a hang would hold the nodes until then; set {key} to at most "
                  f"{limit}{off}, or a longer slurm.time")
    _site_hang_limits(ctx, limit)


def _site_hang_limits(ctx, limit: int) -> None:
    """The site file's own hang limit beyond the site's own time limit (the run keeps both)."""
    written = (ctx.site.raw or {}).get("slurm") or {}
    if ctx.spec.layer_of("slurm.time") is not Layer.SITE:
        return  # the user picked the time limit
    for key, off in HANG_LIMITS.items():
        value = getattr(ctx.site, key)
        if key not in written or ctx.spec.layer_of(f"slurm.{key}") is not Layer.SITE or not is_number(value) \
                or value <= limit:
            continue
        ctx.error(f"site slurm.{key}", f"{key}={value} in the site file ({ctx.site.path}) is longer than the "
                  f"site's time limit (slurm.time {ctx.site.time} = {limit} s): the watchdog would never fire and a "
                  f"hang would hold the nodes until then; set slurm.{key}: {limit} or less{off} in config.yaml (or a "
                  "longer slurm.time), and ask the admins to fix the site file")
