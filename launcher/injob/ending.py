"""How an attempt ends: the `ended` event first (Slurm may kill this step soon after), then the
node steps asked to stop and the rest terminated; an ending Slurm causes (a cancel, a requeue,
the time limit) recorded as what it is, never as a failure of the job's own; a requeue sent
with SIGTERM ignored; a restart past max_requeues refused. Stdlib only.
"""

from __future__ import annotations

import signal
import time

from launcher import slurm, states
from launcher.injob import auth
from launcher.injob.attempt import Attempt
from launcher.injob.failure_text import ENDING_TEXT
from launcher.injob.processes import Processes
from launcher.injob.record_keeper import RecordKeeper, log

SLURM_ENDINGS = states.SLURM_ENDINGS  # Slurm's state when Slurm ends the job -> the ending recorded
SACCT_WAIT_S = 2.0  # sacct lags scontrol by about a second
SIGNAL_WAIT_S = 1.5  # a node step ended: Slurm's own SIGTERM to this step may be on its way


class Ending:
    """Ends the attempt once (attempt.ended), with its reason and exit code."""

    def __init__(self, attempt: Attempt, records: RecordKeeper, procs: Processes):
        self.attempt = attempt
        self.records = records
        self.procs = procs

    def slurm_ending(self) -> str | None:
        """How Slurm is ending this job (cancelled, requeued, time limit, ...), or None while
        Slurm still runs it (then an ended step is the job's own failure). While Slurm kills
        a job scontrol says only COMPLETING; sacct (a moment behind) then says why."""
        leader = self.attempt.leader
        if self.records.requeued_by_trap(self.attempt.wall0):
            return "requeued"
        try:
            state = slurm.show_job(leader).get("JobState", "")
        except Exception as exc:  # scontrol did not answer: no claim either way
            log(f"warning: cannot ask Slurm how the job stands: {exc}")
            return None
        if state in SLURM_ENDINGS:
            return SLURM_ENDINGS[state]
        if state != "COMPLETING":
            return None
        deadline = time.monotonic() + SACCT_WAIT_S
        while True:
            try:
                job = slurm.job_states([leader]).get(leader)
                state = job.state if job is not None else ""
            except Exception:
                state = ""
            if state in SLURM_ENDINGS or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        log(f"Slurm: job {leader} is ending ({state or 'sacct has no state yet'})")
        return SLURM_ENDINGS.get(state, "ended by Slurm")

    def ending_by_slurm(self) -> str | None:
        """A step ended: ask Slurm whether it is ending the job (on a cancel or a requeue
        Slurm signals every step, the node steps often first, and SIGKILLs what is left
        KillWait seconds later: this answer must come fast); when Slurm still says RUNNING,
        ask once more a moment later (its own SIGTERM to this step may be on its way)."""
        ending = self.slurm_ending()
        if ending is None:
            time.sleep(SIGNAL_WAIT_S)
            ending = self.slurm_ending()
        return ending

    def end_by_slurm(self, ending: str, signum: int | None = None) -> int:
        """Record an ending Slurm caused as what it is. A cancel or a requeue ends with 0 (the
        batch step is then no FAILED step of a cleanly cancelled job); a requeue leaves no
        reason behind (the job runs again)."""
        reason = ENDING_TEXT[ending].format(phase=self.attempt.stage)
        rc = 0 if ending in ("cancelled", "requeued") else 128 + (signum or signal.SIGTERM)
        log(f"{ending}: {reason}")
        if ending != "requeued":
            self.records.write_reason(reason)
        self.finish(rc, reason, ending=ending, signal=signal.Signals(signum).name if signum else None)
        return rc

    def fail(self, reason: str, rc: int = 1) -> int:
        log("FAILED: " + reason)
        self.records.write_reason(reason)
        self.finish(rc, reason)
        return rc

    def finish(self, rc: int, reason: str, **info) -> None:
        a = self.attempt
        if a.ended:
            return
        a.ended = True
        # recorded first: when Slurm ends the job, it kills this step KillWait seconds after
        # its SIGTERM, maybe before the nodes have stopped
        self.records.record(states.ENDED, rc=rc, reason=reason, seconds=self.records.elapsed(), **info)
        self.procs.stop_nodes()
        self.procs.terminate()
        if a.token:
            auth.remove_token(a.token)

    def requeue_now(self, call, failed: str) -> int:
        """Run `call` (a Slurm requeue of this job) with SIGTERM ignored: the requeue sends this
        job SIGTERM and this process must still get the call out. A failed requeue fails the
        job with both causes named (`failed`: the first)."""
        a = self.attempt
        a.ended = True
        on_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            call()
        except Exception as exc:
            signal.signal(signal.SIGTERM, on_term)
            a.ended = False
            return self.fail(f"{failed}: {exc}", rc=1)
        if a.token:
            auth.remove_token(a.token)
        return 0

    def check_restarts(self) -> int | None:
        """Record a restart; refuse one past the bound. None to go on, else the exit code."""
        restart = self.attempt.restart
        if restart <= 0:
            return None
        bound = self.attempt.contract.max_requeues
        self.records.record(states.RESTARTED, restart=restart, max_requeues=bound)
        if bound is not None and restart > bound:
            return self.fail(f"restart {restart} exceeds max_requeues={bound}: the job was requeued "
                             f"{restart} times; not running it again (see events.jsonl for each restart)",
                             rc=3)
        return None
