"""What healing decides (issues 23 and 36): pure functions from the evidence the supervisor
gathers to a decision it carries out (launcher/injob/actuator.py, Actuator.apply).

  after_node_death  a node step ended while the job lives: a head whose port slot was taken
                    before Ray ran starts again on another slot; else restart in place (a spare
                    for a node that went away), else requeue a job whose node went away, else fail.
  after_hang        the watchdog saw no training step (watchdog.py) and the stacks are saved
                    (stacks.py): restart in place, the nodes that did not answer the dump left
                    out for spares; with too few spares (or past the bound) end the attempt:
                    a requeue when the job may still be requeued (without the silent nodes),
                    else fail; the reason says "hang: no training step for N s after step S".
  after_driver_failure  the driver failed: restart in place unless it never trained.

Each returns one of RedrawHeadSlot, RestartInPlace, Requeue, RequeueWithout, GiveUp, computed from a
Standing (what the job is and how often it healed) and the event's evidence: no Slurm, no
files, no clock (tests/unit/test_heal.py). A restart in place is bounded per attempt by
max_restarts_in_place (0, the default: none, as before issue 23); a requeue by max_requeues.

The watchdog runs only for a driver that writes step records (trainer.logger names `file`;
otherwise nothing would ever arrive and the first-step allowance would end a healthy run)
and not for a preflight. `hang_timeout_s: 0` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher import states
from launcher.injob import watchdog
from launcher.injob.contract import HealSettings, Job


@dataclass(frozen=True)
class Standing:
    """What a healing decision reads of the job (Actuator.standing())."""

    job: Job  # the nodes in Ray, the spares left, the head
    stage: str  # states.STAGE_*: a death before the driver runs always fails
    preflight: bool  # a preflight is never restarted
    launcher: str  # only a Ray job restarts in place
    restarts_in_place: int  # so far in this attempt
    max_restarts_in_place: int  # the bound per attempt (HealSettings)
    head_slot_redraws: int  # so far in this attempt (RedrawHeadSlot)
    restart: int  # SLURM_RESTART_COUNT: requeues so far
    may_requeue: bool  # Attempt.may_requeue(): a requeue lead and restart < max_requeues
    max_requeues: int | None
    requeue_lead: float


@dataclass(frozen=True)
class RedrawHeadSlot:
    """Bring Ray up again on the same nodes, the head on another port slot: the head's slot was
    taken between the supervisor's check and the head's start (another user's head that drew
    the same slot of the same node: users' port locks are their own, and only a port that
    already listens is seen). Not a restart in place: no driver ran, nothing resumes, and
    max_restarts_in_place is not spent; at most MAX_HEAD_SLOT_REDRAWS an attempt."""

    reason: str
    number: int  # this redraw's number in the attempt (1 for the first)
    note: str = ""


MAX_HEAD_SLOT_REDRAWS = 2


@dataclass(frozen=True)
class RestartInPlace:
    """Stop the driver and Ray, bring Ray up again on `hosts` (each pool's spares left:
    `spares`) and start the driver after the barrier (verl resumes from its checkpoint)."""

    cause: str  # "driver", "node" or "hang"
    reason: str
    number: int  # this restart's number in the attempt (1 for the first)
    bound: int  # max_restarts_in_place
    nodes: tuple[str, ...] | None  # the dead or silent nodes, when the cause names some
    hosts: dict[str, tuple[str, ...]]  # pool -> its nodes in Ray after the swap (contract.Job.hosts)
    spares: dict[str, tuple[str, ...]]  # pool -> its spares left (contract.Job.spares)
    swapped: dict[str, str]  # node left out -> the spare in its place
    note: str = ""  # a line the supervisor logs first ("" for none)


@dataclass(frozen=True)
class Requeue:
    """The whole job back to Slurm (the next attempt resumes from the last checkpoint), with
    nothing excluded."""

    reason: str
    cause: str  # "node" or "hang"
    nodes: tuple[str, ...] | None
    note: str = ""


@dataclass(frozen=True)
class RequeueWithout:
    """The job back to Slurm with `nodes` excluded (Actuator.requeue_without, which checks
    the bound and that not every node is suspect)."""

    nodes: tuple[str, ...]
    reason: str
    note: str = ""


@dataclass(frozen=True)
class GiveUp:
    """End the attempt: it fails with `reason`."""

    reason: str
    rc: int = 1
    note: str = ""


Decision = RedrawHeadSlot | RestartInPlace | Requeue | RequeueWithout | GiveUp


def new_watchdog(settings: HealSettings, overrides, path: str, now: float) -> tuple[watchdog.Watchdog | None, str]:
    """The watchdog for a driver that trains, following `path`, or None when it is off; and
    the line that says which."""
    if settings.hang_timeout_s <= 0:
        return None, "watchdog: off (hang_timeout_s is 0)"
    if not watchdog.file_logger_on(overrides):
        return None, "watchdog: off (trainer.logger has no `file` (no step records))"
    return watchdog.Watchdog(path, settings, now), (
        f"watchdog: following {path}: a hang after {settings.hang_timeout_s:g} s without a step "
        f"(or {settings.factor:g} x the median step time, when longer); "
        f"{settings.first_step_timeout_s:g} s for the first step")


def hang_reason(hang: watchdog.Hang, stacks_dir: str, silent: dict[str, str]) -> str:
    """The reason of a hang: the watchdog's, where the stacks are, who did not answer."""
    reason = hang.reason() + f"; Python stacks of every node in {stacks_dir}/ (sf logs RUN --stacks)"
    if silent:
        reason += "; did not answer: " + "; ".join(f"{n} ({why})" for n, why in silent.items())
    return reason


def after(restarts_in_place: int, bound: int) -> str:
    """What a failing attempt's reason adds when it had restarted in place."""
    n = restarts_in_place
    return f"; after {n} restart{'s' if n > 1 else ''} in place (max_restarts_in_place={bound})" if n else ""


def _after(st: Standing) -> str:
    return after(st.restarts_in_place, st.max_restarts_in_place)


def after_node_death(st: Standing, reason: str, nodes: list[str], lost: bool,
                     head_slot_taken: bool = False) -> Decision:
    """A Ray node's step ended while the job lives (Slurm is not ending it).

    `head_slot_taken`: the head ended before Ray ran because its port slot was taken after the
    supervisor had checked it (its node_exit says port_collision): another slot is drawn and
    Ray brought up again, at most MAX_HEAD_SLOT_REDRAWS times an attempt.

    `lost`: the node's wrapper never recorded its node_exit, so the node (or the job's
    processes on it) went away, not just Ray. Starting Ray on such a node again is a gamble
    a spare avoids; without a spare the job goes back to Slurm (a requeue: another
    allocation, verl resumes from its checkpoint), bounded by max_requeues. Before the
    driver runs, every node has not yet proved itself, so a death then fails as always: a
    setup that cannot start a node fails the same way on every requeue."""
    if head_slot_taken and st.stage != states.STAGE_DRIVER and st.launcher == "ray":
        if st.head_slot_redraws < MAX_HEAD_SLOT_REDRAWS:
            n = st.head_slot_redraws + 1
            return RedrawHeadSlot(reason, n, note=f"the head's port slot was taken before Ray ran: bringing Ray up "
                                  f"again on another slot ({n} of at most {MAX_HEAD_SLOT_REDRAWS})")
        reason += f"; the head's slot was drawn again {MAX_HEAD_SLOT_REDRAWS} times and taken each time"
    if st.stage != states.STAGE_DRIVER:
        return GiveUp(reason + _after(st))
    if lost:
        reason += "; its wrapper recorded no exit: the node, or the job's processes on it, went away"
    if lost and not spares_cover(st.job, nodes):
        note = f"not restarting in place: {', '.join(nodes)} went away (no node_exit) and no spare can take its place"
    else:
        restart = restart_in_place(st, "node", reason, nodes)
        if isinstance(restart, RestartInPlace):
            return restart
        note = restart
    if lost:
        return replace(requeue_or_fail(st, reason, "node", nodes), note=note)
    return GiveUp(reason + _after(st), note=note)


def after_hang(st: Standing, reason: str, silent: list[str]) -> Decision:
    """Follow the evidence: nodes that answered the stack dump get Ray and the driver again
    in place; nodes that did not (`silent`) are left out for spares, or, with too few
    spares, the job goes back to Slurm without them (a restart on a frozen node would hang
    again)."""
    if not silent or spares_cover(st.job, silent):
        restart = restart_in_place(st, "hang", reason, silent or None)
        if isinstance(restart, RestartInPlace):
            return restart
        note = restart
        if not silent:
            return replace(requeue_or_fail(st, reason, "hang"), note=note)
    else:
        note = (f"not restarting in place: {', '.join(silent)} did not answer and no spare can take "
                f"{'its' if len(silent) == 1 else 'their'} place")
    if st.may_requeue:
        return RequeueWithout(tuple(silent), reason, note=note)
    return replace(requeue_or_fail(st, reason, "hang", silent), note=note)


def after_driver_failure(st: Standing, reason: str, training_steps: int | None) -> Decision:
    """The driver failed (`training_steps`: how many it logged, None without a watchdog):
    restart in place, else give up with the restarts so far named."""
    restart = restart_in_place(st, "driver", reason, training_steps=training_steps)
    if isinstance(restart, RestartInPlace):
        return restart
    return GiveUp(reason + _after(st), note=restart)


def requeue_or_fail(st: Standing, reason: str, cause: str, nodes: list[str] | None = None) -> Requeue | GiveUp:
    """Once a restart in place cannot help: the job back to Slurm while it may still be
    requeued, else the attempt fails naming the bound that stopped it."""
    if st.may_requeue:
        return Requeue(reason, cause, tuple(nodes) if nodes is not None else None)
    reason += _after(st)
    if st.max_requeues is not None and st.restart >= st.max_requeues and st.requeue_lead:
        reason += f"; not requeued: already requeued {st.restart} times (max_requeues={st.max_requeues})"
    return GiveUp(reason)


def restart_in_place(st: Standing, cause: str, reason: str, nodes: list[str] | None = None,
                     training_steps: int | None = None) -> RestartInPlace | str:
    """Ray and the driver again on the same nodes (a spare in place of each dead or silent
    node that has one), while the bound allows; else why not (a line to log, or "").

    A driver that failed before its first training step is not restarted: such a failure
    (a config error, a missing file) repeats, and each try costs a whole verl start."""
    bound = st.max_restarts_in_place
    if st.restarts_in_place >= bound or st.preflight or st.launcher != "ray":
        if bound and st.restarts_in_place >= bound:
            return f"not restarting in place: {st.restarts_in_place} restarts in place already " \
                   f"(max_restarts_in_place={bound})"
        return ""
    if cause == "driver" and training_steps == 0:
        return "not restarting in place: the driver failed before its first training step"
    hosts, spares, swapped = dict(st.job.hosts), dict(st.job.spares), {}
    if cause in ("node", "hang") and nodes:  # a dead node, or one that did not answer a hang's dump
        hosts, spares, swapped = swap_in_spares(st.job, nodes)
    return RestartInPlace(cause=cause, reason=reason, number=st.restarts_in_place + 1, bound=bound,
                          nodes=tuple(nodes) if nodes else None, hosts=hosts, spares=spares, swapped=swapped)


def spares_cover(job: Job, dead: list[str]) -> bool:
    """Whether swap_in_spares would leave every dead node out (none is the head, each
    one's pool has a spare per dead node)."""
    needed: dict[str, int] = {}
    for node in dead:
        pool = job.pool_of(node)
        if pool is None or node == job.head_node:
            return False
        needed[pool.name] = needed.get(pool.name, 0) + 1
    return bool(needed) and all(len(job.spares.get(name, ())) >= n for name, n in needed.items())


def swap_in_spares(job: Job, dead: list[str]) -> tuple[dict, dict, dict[str, str]]:
    """Pure: each dead node of a pool with a spare left is replaced, in its place (its port
    slot), by the pool's next spare. (hosts, spares, {dead: spare}), the first two as
    contract.Job holds them. The head stays: the batch step, the driver and the GCS live there."""
    hosts = {name: list(h) for name, h in job.hosts.items()}
    spares = {name: list(s) for name, s in job.spares.items()}
    swapped = {}
    for node in dead:
        pool = job.pool_of(node)
        if pool is None or node == job.head_node or not spares.get(pool.name):
            continue
        spare = spares[pool.name].pop(0)
        hosts[pool.name][hosts[pool.name].index(node)] = spare
        swapped[node] = spare
    return ({n: tuple(h) for n, h in hosts.items()}, {n: tuple(s) for n, s in spares.items()}, swapped)
