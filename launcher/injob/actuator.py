"""The healing actuator: carries out what heal.py decided. heal.py reads a Standing (standing())
and returns a decision; apply() finds its handler in HANDLERS, one per decision type: a
decision type without one raises (tests/unit/test_supervise_parts.py fails on it first), it
never ends the job silently. A handler returns None when the job goes on (restarted in place,
Ray up again) and the attempt's exit code when it ends. Stdlib only.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from launcher import slurm, states
from launcher.checkpoints import tracked_step
from launcher.injob import heal
from launcher.injob.attempt import Attempt
from launcher.injob.bringup import Bringup
from launcher.injob.ending import Ending
from launcher.injob.processes import Processes
from launcher.injob.record_keeper import RecordKeeper, log

REDRAW_STOP_GRACE_S = 3  # a redraw of the head's slot: no Ray cluster came up (a worker's start hangs on)

# decision type -> the Actuator method that carries it out
HANDLERS = {
    heal.RedrawHeadSlot: "redraw_head_slot",
    heal.RestartInPlace: "restart_in_place",
    heal.Requeue: "requeue",
    heal.RequeueWithout: "requeue_without",
    heal.GiveUp: "give_up",
}


class Actuator:
    """Applies healing decisions to the attempt: Ray restarted through `bringup`, the job
    ended or requeued through `ending`."""

    def __init__(self, attempt: Attempt, records: RecordKeeper, procs: Processes, bringup: Bringup,
                 ending: Ending):
        self.attempt = attempt
        self.records = records
        self.procs = procs
        self.bringup = bringup
        self.ending = ending

    def standing(self) -> heal.Standing:
        """What a healing decision reads of the job now."""
        a = self.attempt
        c = a.contract
        return heal.Standing(job=a.job, stage=a.stage, preflight=a.preflight, launcher=a.plan.launcher,
                             restarts_in_place=a.restarts_in_place,
                             max_restarts_in_place=c.heal.max_restarts_in_place,
                             head_slot_redraws=a.head_slot_redraws,
                             restart=a.restart, may_requeue=a.may_requeue(),
                             max_requeues=c.max_requeues, requeue_lead=c.requeue_lead)

    def apply(self, decision: heal.Decision) -> int | None:
        """Carry out what healing decided: None when the job goes on (the watch polls the new
        steps), else the attempt's exit code. TypeError for a decision without a handler."""
        name = HANDLERS.get(type(decision))
        if name is None:
            raise TypeError(f"no handler for the healing decision {type(decision).__name__}: add it to "
                            "launcher.injob.actuator.HANDLERS")
        if decision.note:
            log(decision.note)
        return getattr(self, name)(decision)

    def give_up(self, decision: heal.GiveUp) -> int:
        return self.ending.fail(decision.reason, rc=decision.rc)

    def restart_in_place(self, decision: heal.RestartInPlace) -> None:
        """Stop the driver and Ray, bring Ray up again on the decision's hosts and let the watch
        loop start the driver again (verl resumes from its last checkpoint): every field of the
        attempt's second group renewed."""
        a = self.attempt
        n = decision.number
        t0 = time.monotonic()
        log(f"restarting in place ({n} of at most {decision.bound}): {decision.reason}")
        self.procs.kill_driver()
        self.bringup.stop_ray()
        a.restarts_in_place = n
        a.job = replace(a.job, hosts=decision.hosts, spares=decision.spares)
        if decision.swapped:
            log("left out for a spare: " + ", ".join(f"{dead} -> {spare}" for dead, spare in decision.swapped.items()))
        self.bringup.new_start()
        # verl's file logger opens its file with "wb": the restarted driver writes its own
        a.metrics_path = str(Path(a.run_dir) / "metrics" / f"attempt-{a.restart}.{n}.jsonl")
        a.watchdog = None
        self.records.record(states.RESTARTED_IN_PLACE, cause=decision.cause, restart_in_place=n,
                            max_restarts_in_place=decision.bound,
                            nodes=list(decision.nodes) if decision.nodes else None,
                            left_out=list(decision.swapped) or None,
                            spares_used=list(decision.swapped.values()) or None,
                            resumed_from=tracked_step(a.plan.checkpoint_dir) or 0, reason=decision.reason[:300],
                            stop_s=round(time.monotonic() - t0, 1))
        self.bringup.bring_ray_up()

    def redraw_head_slot(self, decision: heal.RedrawHeadSlot) -> None:
        """Stop Ray and bring it up again on the same nodes with the head on a slot drawn anew."""
        a = self.attempt
        t0 = time.monotonic()
        taken = a.job.head
        # no Ray cluster came up: the workers wait for a GCS that is not theirs, nothing to stop with care
        self.bringup.stop_ray(grace_s=REDRAW_STOP_GRACE_S)
        a.head_slot_redraws = decision.number
        self.bringup.new_start()
        self.records.record(states.HEAD_SLOT_REDRAWN, number=decision.number, max_redraws=heal.MAX_HEAD_SLOT_REDRAWS,
                            taken=taken, head=a.job.head, reason=decision.reason[:300],
                            stop_s=round(time.monotonic() - t0, 1))
        self.bringup.bring_ray_up()

    def requeue(self, decision: heal.Requeue) -> int:
        """The whole job back to the queue (the next attempt resumes from the last checkpoint),
        as requeue_without does, with nothing excluded."""
        a = self.attempt
        nxt = a.restart + 1
        bound, reason = a.contract.max_requeues, decision.reason
        log(f"requeueing (restart {nxt} of at most {bound}): {reason}")
        self.records.write_reason(f"{reason}; requeued (restart {nxt} of at most {bound})")
        self.records.record(states.REQUEUED, restart=nxt, cause=decision.cause,
                            nodes=list(decision.nodes) if decision.nodes is not None else None, reason=reason)
        return self.ending.requeue_now(lambda: slurm.requeue(a.leader), f"{reason}; the requeue failed")

    def requeue_without(self, decision: heal.RequeueWithout) -> int:
        """--exclude-bad-nodes: requeue the job with the decision's nodes added to its excluded
        nodes (each het component its own), within max_requeues; the next attempt starts elsewhere."""
        a = self.attempt
        bad, reason = list(decision.nodes), decision.reason
        restarts = a.restart
        if restarts >= int(a.contract.max_requeues or 0):
            return self.ending.fail(f"{reason}; not requeued without them: already requeued {restarts} times "
                                    f"(max_requeues={a.contract.max_requeues})", rc=1)
        if set(bad) >= set(a.job.nodes):
            return self.ending.fail(f"{reason}; not requeued: every node of the job is suspect (a shared cause, "
                                    "such as the network or the runtime, is more likely than bad nodes)", rc=1)
        het = len({p.het_group for p in a.plan.pools}) > 1
        components: dict[str, list[str]] = {}
        for pool in a.plan.pools:
            mine = [h for h in a.job.hosts[pool.name] if h in bad]
            if mine:
                key = f"{a.leader}+{pool.het_group}" if het else a.job_id
                components.setdefault(key, []).extend(mine)
        log(f"excluding {', '.join(bad)} and requeueing: {reason}")
        self.records.record(states.REQUEUED, restart=restarts + 1, cause="bad nodes", excluded=bad, reason=reason)
        # the exclusion after the requeue (Slurm takes ExcNodeList only while a job is
        # pending) must still be written, by children that ignore SIGTERM too
        return self.ending.requeue_now(lambda: slurm.requeue_excluding(a.leader, components),
                                       f"{reason}; requeue without them failed")
