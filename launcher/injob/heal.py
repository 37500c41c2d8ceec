"""What the supervisor does about a hung driver (issue 23): the glue between its watch
loop (launcher/injob/supervise.py, two calls) and the watchdog's pure decision
(watchdog.py) and the stack dump (stacks.py).

  check(sup)        once per watch-loop turn while the driver trains: a watchdog.Hang or None
  on_hang(sup, h)   record `hang` (last step, seconds since, the limit), save every node's
                    Python stacks under <run>/stacks/<job>-<restart>/ (`stacks_saved`, with
                    the worker nodes whose processes did not answer: stopped, or no answer
                    at all), then restart in place, those nodes left out for spares; with
                    too few spares (or past the bound) end the attempt: a requeue when the
                    job may still be requeued (without the silent nodes), else fail; the
                    reason says "hang: no training step for N s after step S".
  on_node_death     a node step ended: restart in place (a spare for a node that went away),
                    else requeue a job whose node went away, else fail.

The watchdog runs only for a driver that writes step records (trainer.logger names `file`;
otherwise nothing would ever arrive and the first-step allowance would end a healthy run)
and not for a preflight. `hang_timeout_s: 0` turns it off.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path

from launcher import runs, slurm, states
from launcher.checkpoints import tracked_step
from launcher.injob import stacks, watchdog


def log(msg: str) -> None:
    print(f"[sf {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _limits(sup) -> watchdog.Limits | None:
    heal = sup.contract.heal
    if heal.hang_timeout_s <= 0:
        return None
    return watchdog.Limits(hang_timeout_s=heal.hang_timeout_s, first_step_timeout_s=heal.first_step_timeout_s)


def metrics_path(sup) -> str:
    """The step records of this attempt (the batch script exports VERL_FILE_LOGGER_PATH; a
    restart in place sets its own in the driver's environment)."""
    return sup.metrics_path or str(Path(sup.run_dir) / "metrics" / f"attempt-{sup.restart}.jsonl")


def check(sup) -> watchdog.Hang | None:
    if sup.stage != states.STAGE_DRIVER or sup.preflight:  # verl trains
        return None
    dog = getattr(sup, "watchdog", None)
    if dog is None:
        limits = _limits(sup)
        if limits is None or not watchdog.file_logger_on(sup.plan.overrides):
            why = "hang_timeout_s is 0" if limits is None else "trainer.logger has no `file` (no step records)"
            log(f"watchdog: off ({why})")
            sup.watchdog = dog = False
        else:
            path = metrics_path(sup)
            sup.watchdog = dog = watchdog.Watchdog(path, limits, time.monotonic())
            log(f"watchdog: following {path}: a hang after {limits.hang_timeout_s:g} s without a step "
                         f"(or {limits.factor:g} x the median step time, when longer); "
                         f"{limits.first_step_timeout_s:g} s for the first step")
    if not dog:
        return None
    hang = dog.poll(time.monotonic())
    if dog.stepped:
        write_progress(sup, dog.progress.last_step)
    return hang


def write_progress(sup, step: int | None) -> None:
    """<run>/progress.json: the newest training step and when it arrived (wall clock), which
    `sf status` shows as "step 12 (40 s ago)"; replaced at each new step number."""
    try:
        runs.Run(sup.run_dir).write_json(runs.PROGRESS, {"step": step, "at": round(time.time(), 1),
                                                        "job_id": sup.job_id, "restart": sup.restart})
    except OSError as exc:
        log(f"warning: cannot write {runs.PROGRESS}: {exc}")


def on_hang(sup, hang: watchdog.Hang) -> int | None:
    """Record the hang, save the stacks, kill the driver; restart in place (None: the watch
    goes on) or end the attempt (its exit code)."""
    reason = hang.reason()
    rel = f"{stacks.STACKS_DIR}/{sup.job_id}-{sup.restart}" + (f".{in_place(sup)}" if in_place(sup) else "")
    sup.record(states.HANG, last_step=hang.last_step, seconds_since=hang.idle_s, limit_s=hang.limit_s,
               first_step=hang.first_step, stacks=rel, seconds=sup.elapsed())
    t0 = time.monotonic()
    saved = stacks.save(sup, Path(sup.run_dir) / rel)
    # The head is never left out (the batch step, the GCS and the hung driver, killed below,
    # live there); a worker node whose processes did not answer the dump is the evidence.
    silent = {n: why for n, why in saved["silent"].items() if n != sup.job.head_node}
    sup.record(states.STACKS_SAVED, dir=rel, nodes=saved["nodes"], silent=silent or None,
               seconds=round(time.monotonic() - t0, 1))
    reason += f"; Python stacks of every node in {rel}/ (sf logs RUN --stacks)"
    if silent:
        reason += "; did not answer: " + "; ".join(f"{n} ({why})" for n, why in silent.items())
    # A hung driver saves nothing and may not heed SIGTERM (frozen, or stuck holding the GIL):
    # kill it now, so ending the attempt does not wait out the grace times for it.
    for step in sup.steps:
        if step["kind"] == "driver" and step["popen"].poll() is None:
            step["popen"].kill()
    return heal_hang(sup, reason, list(silent))


def heal_hang(sup, reason: str, silent: list[str]) -> int | None:
    """Follow the evidence: nodes that answered the dump get Ray and the driver again in place;
    nodes that did not are left out for spares, or, with too few spares, the job goes back to
    Slurm without them (a restart on a frozen node would hang again)."""
    if not silent or spares_cover(sup.job, silent):
        if restart_in_place(sup, "hang", reason, silent or None):
            return None
        if not silent:
            return requeue_or_fail(sup, reason, "hang")
    else:
        log(f"not restarting in place: {', '.join(silent)} did not answer and no spare can take "
            f"{'its' if len(silent) == 1 else 'their'} place")
    if sup.may_requeue():
        return sup.requeue_without(silent, reason)
    return requeue_or_fail(sup, reason, "hang", silent)


def on_node_death(sup, reason: str, nodes: list[str], lost: bool) -> int | None:
    """A Ray node's step ended while the job lives (Slurm is not ending it). None: restarted
    in place (the watch goes on); else the attempt's exit code.

    `lost`: the node's wrapper never recorded its node_exit, so the node (or the job's
    processes on it) went away, not just Ray. Starting Ray on such a node again is a gamble
    a spare avoids; without a spare the job goes back to Slurm (a requeue: another
    allocation, verl resumes from its checkpoint), bounded by max_requeues. Before the
    driver runs, every node has not yet proved itself, so a death then fails as always: a
    setup that cannot start a node fails the same way on every requeue."""
    if sup.stage != states.STAGE_DRIVER:
        return sup.fail(reason + after(sup), rc=1)
    if lost:
        reason += "; its wrapper recorded no exit: the node, or the job's processes on it, went away"
    if lost and not spares_cover(sup.job, nodes):
        log(f"not restarting in place: {', '.join(nodes)} went away (no node_exit) and no spare can take its place")
    elif restart_in_place(sup, "node", reason, nodes):
        return None
    if lost:
        return requeue_or_fail(sup, reason, "node", nodes)
    return sup.fail(reason + after(sup), rc=1)


def requeue_or_fail(sup, reason: str, cause: str, nodes: list[str] | None = None) -> int:
    """Today's path once a restart in place cannot help: the job back to Slurm while it may
    still be requeued, else the attempt fails naming the bound that stopped it."""
    if sup.may_requeue():
        return requeue(sup, reason, cause, nodes)
    reason += after(sup)
    bound_ = sup.contract.max_requeues
    if bound_ is not None and sup.restart >= bound_ and sup.contract.requeue_lead:
        reason += f"; not requeued: already requeued {sup.restart} times (max_requeues={bound_})"
    return sup.fail(reason, rc=1)


# --- restart in place (issue 23, item 2) ----------------------------------------------------

def in_place(sup) -> int:
    """Restarts in place so far in this attempt."""
    return sup.restarts_in_place


def bound(sup) -> int:
    return sup.contract.heal.max_restarts_in_place


def after(sup) -> str:
    """What a failing attempt's reason adds when it had restarted in place."""
    n = in_place(sup)
    return f"; after {n} restart{'s' if n > 1 else ''} in place (max_restarts_in_place={bound(sup)})" if n else ""


def checkpoint_step(checkpoint_dir: str) -> int:
    """The step verl resumes from (resume_mode=auto): its tracker file, else 0."""
    return tracked_step(checkpoint_dir) or 0


STEPS_GONE_S = 30


def wait_steps_gone(job_id: str) -> None:
    """Until slurmctld holds none of the job's old srun steps (bounded): their memory is
    released only then, and the new node steps need it (seen on the dev cluster: a restart
    1.8 s after the stop failed with "Memory required by task is not available")."""
    deadline = time.monotonic() + STEPS_GONE_S
    while time.monotonic() < deadline:
        try:
            left = slurm.numbered_steps(job_id)
        except Exception as exc:  # no squeue: go on, the new steps say what is wrong
            log(f"cannot list the job's steps ({exc}); starting Ray again anyway")
            return
        if not left:
            return
        time.sleep(0.2)
    log(f"steps {', '.join(left)} still listed after {STEPS_GONE_S} s; starting Ray again anyway")


def spares_cover(job, dead: list[str]) -> bool:
    """Whether swap_in_spares would leave every dead node out (none is the head, each
    one's pool has a spare per dead node)."""
    needed: dict[str, int] = {}
    for node in dead:
        pool = job.pool_of(node)
        if pool is None or node == job.head_node:
            return False
        needed[pool.name] = needed.get(pool.name, 0) + 1
    return bool(needed) and all(len(job.spares.get(name, ())) >= n for name, n in needed.items())


def swap_in_spares(job, dead: list[str]) -> tuple[dict, dict, dict[str, str]]:
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


def restart_in_place(sup, cause: str, reason: str, nodes: list[str] | None = None) -> bool:
    """Stop the driver and Ray, bring Ray up again on the same nodes and let the watch loop
    start the driver again (verl resumes from its last checkpoint), while the bound allows.
    False: not restarted (the caller ends the attempt as before).

    A driver that failed before its first training step is not restarted: such a failure
    (a config error, a missing file) repeats, and each try costs a whole verl start."""
    if in_place(sup) >= bound(sup) or sup.preflight or sup.plan.launcher != "ray":
        if bound(sup) and in_place(sup) >= bound(sup):
            log(f"not restarting in place: {in_place(sup)} restarts in place already (max_restarts_in_place="
                f"{bound(sup)})")
        return False
    dog = getattr(sup, "watchdog", None)
    if cause == "driver" and dog:
        dog.checked = 0.0  # read what the driver logged up to its end, not a second ago
        dog.poll(time.monotonic())
    if cause == "driver" and dog and dog.progress.training_steps == 0:
        log("not restarting in place: the driver failed before its first training step")
        return False
    n = in_place(sup) + 1
    t0 = time.monotonic()
    log(f"restarting in place ({n} of at most {bound(sup)}): {reason}")
    for step in sup.steps:
        if step["kind"] == "driver" and step["popen"].poll() is None:
            step["popen"].kill()
    sup.stop_nodes()  # each node stops Ray and keeps its logs, as at the end of a job
    sup.terminate()
    sup.steps = []
    wait_steps_gone(sup.leader)
    sup.restarts_in_place = n
    swapped = {}
    if cause in ("node", "hang") and nodes:  # a dead node, or one that did not answer a hang's dump
        hosts, spares, swapped = swap_in_spares(sup.job, nodes)
        sup.job = replace(sup.job, hosts=hosts, spares=spares)
    if swapped:
        log("left out for a spare: " + ", ".join(f"{dead} -> {spare}" for dead, spare in swapped.items()))
    # a fresh start: node events from here on, the head's ports free again (or the next block)
    sup.wall0 = time.time()
    # the head's slot reserved again (the stopped head's lock released first, so the same slot
    # is taken back unless another job holds it now: launcher.injob.private.reserve)
    if getattr(sup, "port_reservation", None) is not None:
        sup.port_reservation.release()
    sup.take_head_slot()
    # verl's file logger opens its file with "wb": the restarted driver writes its own
    sup.metrics_path = str(Path(sup.run_dir) / "metrics" / f"attempt-{sup.restart}.{n}.jsonl")
    sup.watchdog = None
    sup.record(states.RESTARTED_IN_PLACE, cause=cause, restart_in_place=n, max_restarts_in_place=bound(sup),
               nodes=nodes or None, left_out=list(swapped) or None, spares_used=list(swapped.values()) or None,
               resumed_from=checkpoint_step(sup.plan.checkpoint_dir), reason=reason[:300],
               stop_s=round(time.monotonic() - t0, 1))
    sup.start_ray()
    sup.local("barrier", [sup.runtime.runtime_python(), "-m", "launcher.injob", "barrier"], kind="barrier",
              stdout=subprocess.PIPE)
    sup.stage = states.STAGE_BRINGUP
    return True


def requeue(sup, reason: str, cause: str, nodes: list[str] | None = None) -> int:
    """The whole job back to the queue (the next attempt resumes from the last checkpoint),
    as the supervisor's --exclude-bad-nodes requeue does, with nothing excluded."""
    nxt = sup.restart + 1
    log(f"requeueing (restart {nxt} of at most {sup.contract.max_requeues}): {reason}")
    sup.write_reason(f"{reason}; requeued (restart {nxt} of at most {sup.contract.max_requeues})")
    sup.record(states.REQUEUED, restart=nxt, cause=cause, nodes=nodes, reason=reason)
    return sup.requeue_now(lambda: slurm.requeue(sup.leader), f"{reason}; the requeue failed")
