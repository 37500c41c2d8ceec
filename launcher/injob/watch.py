"""The watch: the supervisor's one loop that decides, in this order of precedence, on a step
that ended (a node, the barrier, the health check, the driver), verl's start-up phases, the
progress watchdog (a hang: the stacks saved, then what heal.after_hang decides) and the head
coming up. Healing decisions go to the actuator; endings to `ending`. Stdlib only.
"""

from __future__ import annotations

import select
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from launcher import states
from launcher.injob import failure_text, heal, stacks
from launcher.injob import gpus as gpus_mod
from launcher.injob import watchdog as watchdog_mod
from launcher.injob.actuator import Actuator
from launcher.injob.attempt import Attempt
from launcher.injob.driver_start import DriverStart
from launcher.injob.ending import Ending
from launcher.injob.node_logs import node_logs_text
from launcher.injob.processes import Processes, Step, last_json, tcp_open
from launcher.injob.record_keeper import RecordKeeper, log

POLL_S = 0.5
RESTARTED = object()  # on_step_end after a restart in place: the watch polls the new start's steps
NODE_EXIT_WAIT_S = 1.0  # a node's wrapper writes its node_exit line as it ends


class Watch:
    """Polls the steps of `procs` until the attempt ends; returns its exit code."""

    def __init__(self, attempt: Attempt, records: RecordKeeper, procs: Processes, driver: DriverStart,
                 ending: Ending, actuator: Actuator):
        self.attempt = attempt
        self.records = records
        self.procs = procs
        self.driver = driver
        self.ending = ending
        self.actuator = actuator

    def run(self) -> int:
        a = self.attempt
        head_up = a.plan.launcher != "ray"
        while True:
            for step in self.procs.steps:
                rc = step.popen.poll()
                if rc is None:
                    continue
                ended = self.on_step_end(step, rc)
                if ended is RESTARTED:
                    break  # restarted in place: the steps are the new start's
                if ended is not None:
                    return ended
            for found in a.verl_log.new_phases():  # verl's own start-up phases, as its driver logs them
                self.records.record(states.VERL_PHASE, seconds=self.records.elapsed(), **found)
            hang = self.check_hang()  # the progress watchdog, while the driver trains
            if hang and (ended := self.on_hang(hang)) is not None:
                return ended
            if not head_up and tcp_open(a.head_addr, a.ports.gcs):
                head_up = True
                self.records.record(states.HEAD_UP, seconds=self.records.elapsed(), address=a.job.head)
                if a.stage == states.STAGE_BRINGUP:
                    a.stage = states.STAGE_BARRIER
            self.wait_a_little()

    def on_step_end(self, step: Step, rc: int):
        """What a step's end means: the attempt's exit code (the job ends), RESTARTED (healed in
        place: the watch polls the new steps), or None (the watch goes on: the next phase started,
        or a result already read)."""
        if step.kind == "node":
            return self.on_node_end(step, rc)
        if step.kind in ("barrier", "health") and not step.seen:
            step.seen = True
            result = last_json(step.popen, rc)
            return self.on_barrier(result, rc) if step.kind == "barrier" else self.on_health(result, rc)
        if step.kind == "driver":
            return self.on_driver_end(step, rc)
        return None

    def on_node_end(self, step: Step, rc: int):
        a = self.attempt
        named = []
        deadline = time.monotonic() + NODE_EXIT_WAIT_S
        while not named and time.monotonic() < deadline:
            named = [n for n in self.records.exited_nodes(a.wall0) if n in step.hosts]
            if not named:
                time.sleep(0.05)
        lost = not named  # no node_exit: the node's processes went away, not just Ray
        named = named or step.hosts
        ending = self.ending.ending_by_slurm()
        if ending:
            return self.ending.end_by_slurm(ending)
        reason = (f"Ray node {', '.join(named)} (pool {step.pool}) ended during phase "
                  f"{a.stage} (srun {step.name} {failure_text.exit_text(rc)}); "
                  + node_logs_text(a.run_dir, a.job_id, step.name, named, a.wall0)
                  + self.records.exit_hint(named, a.wall0))
        taken = self.records.head_slot_taken(a.job.head_node, a.wall0)
        decision = heal.after_node_death(self.actuator.standing(), reason, named, lost, head_slot_taken=taken)
        ended = self.actuator.apply(decision)
        return RESTARTED if ended is None else ended

    def wants_health_check(self) -> bool:
        """The node health check before the driver: site ray.health_check: always or
        --exclude-bad-nodes (the preflight runs its own), on Ray jobs of more than one node
        or with GPUs."""
        a = self.attempt
        gpus = any(p.gpus_per_node for p in a.plan.pools)
        return a.ray.health_check == "always" and not a.preflight and (len(a.job.nodes) > 1 or gpus)

    def on_barrier(self, result: dict, rc: int) -> int | None:
        """Every node joined: the health check or the driver next; else the job fails naming who is missing."""
        a = self.attempt
        if rc == 0 and result.get("ok"):
            seen = self.records.gpus_seen(a.job.nodes, a.wall0)
            a.job = replace(a.job, gpu_ids=seen)  # the preflight reports them
            problems = gpus_mod.conflicts(seen, a.job.gpus_by_host())
            if problems:
                return self.ending.fail("GPU check failed during phase barrier: " + "; ".join(problems), rc=1)
            self.records.record(states.ALL_JOINED, seconds=self.records.elapsed(), barrier_s=result.get("seconds"),
                                ray_nodes=result.get("ray_nodes"),
                                pools={k: sorted(v["joined"]) for k, v in result["pools"].items()},
                                gpu_ids=seen)
            if self.wants_health_check():
                self.procs.local("health", [a.runtime.runtime_python(), "-m", "launcher.injob", "health"],
                                 kind="health", stdout=subprocess.PIPE)
                a.stage = states.STAGE_HEALTH
            else:
                self.driver.start_driver()
            return None
        return self.ending.fail(barrier_failure(result, a), rc=1)

    def on_health(self, result: dict, rc: int) -> int | None:
        """Every pair of nodes healthy: the driver next; else fail, or requeue without the suspects."""
        if rc == 0 and result.get("ok"):
            self.records.record(states.HEALTH_CHECKED, seconds=self.records.elapsed(), pairs=result.get("pairs"),
                                median_mib_per_s=result.get("median_mib_per_s"), gpu=result.get("gpu"))
            self.driver.start_driver()
            return None
        bad = list(result.get("suspect_nodes") or [])
        reason = (f"node health check failed during phase health (suspect nodes: "
                  f"{', '.join(bad) or 'none named'}): "
                  + "; ".join((result.get("failed") or [str(result.get("error"))])[:3]))
        if self.attempt.ray.exclude_bad_nodes and bad:
            return self.actuator.apply(heal.RequeueWithout(nodes=tuple(bad), reason=reason))
        return self.ending.fail(reason, rc=1)

    def on_driver_end(self, step: Step, rc: int):
        a = self.attempt
        what = step.name
        # a driver in a container is an srun step: Slurm's cancel or requeue may end it
        # before this batch step hears of it (a local driver dies with this step)
        if rc != 0 and a.runtime.local_argv([]) is None and (ending := self.ending.ending_by_slurm()):
            return self.ending.end_by_slurm(ending)
        reason = "completed" if rc == 0 else \
            f"{what} {failure_text.exit_text(rc, failure_text.oom_kills() if rc < 0 else None)} during phase driver"
        cause = failure_text.driver_failure(a.run_dir, what) if rc != 0 else None
        if cause:
            reason += f": {cause}"
        if rc != 0:
            decision = heal.after_driver_failure(self.actuator.standing(), reason, self.training_steps())
            if isinstance(decision, heal.RestartInPlace):
                self.actuator.apply(decision)
                return RESTARTED
            if decision.note:
                log(decision.note)
            reason = decision.reason
            self.records.write_reason(reason)
        self.ending.finish(rc, reason)
        return rc

    # -- the progress watchdog -----------------------------------------------------------
    def check_hang(self) -> watchdog_mod.Hang | None:
        """Once per watch-loop turn while the driver trains: the watchdog's Hang or None. The
        watchdog is made at the driver's first turn (heal.new_watchdog: off without step records)."""
        a = self.attempt
        if a.stage != states.STAGE_DRIVER or a.preflight:  # verl trains
            return None
        if a.watchdog is None:
            # the batch script exports VERL_FILE_LOGGER_PATH; a restart in place sets its own
            path = a.metrics_path or str(Path(a.run_dir) / "metrics" / f"attempt-{a.restart}.jsonl")
            dog, line = heal.new_watchdog(a.contract.heal, a.plan.overrides, path, time.monotonic())
            log(line)
            a.watchdog = dog or False
        if not a.watchdog:
            return None
        hang = a.watchdog.poll(time.monotonic())
        if a.watchdog.stepped:
            self.records.write_progress(a.watchdog.progress.last_step, a.restart)
        return hang

    def training_steps(self) -> int | None:
        """The training steps the driver logged, read up to its end (not a second ago); None
        without a watchdog."""
        if not self.attempt.watchdog:
            return None
        return self.attempt.watchdog.catch_up(time.monotonic()).training_steps

    def on_hang(self, hang: watchdog_mod.Hang) -> int | None:
        """Record the hang, save every node's Python stacks under <run>/stacks/<job>-<restart>/
        (the worker nodes whose processes did not answer are the evidence), kill the driver,
        then carry out what heal.after_hang decides."""
        a = self.attempt
        rel = f"{stacks.STACKS_DIR}/{a.job_id}-{a.restart}" + (f".{a.restarts_in_place}" if a.restarts_in_place else "")
        self.records.record(states.HANG, last_step=hang.last_step, seconds_since=hang.idle_s, limit_s=hang.limit_s,
                            first_step=hang.first_step, stacks=rel, seconds=self.records.elapsed())
        t0 = time.monotonic()
        saved = stacks.save(self.procs, Path(a.run_dir) / rel)
        # The head is never left out (the batch step, the GCS and the hung driver, killed below,
        # live there); a worker node whose processes did not answer the dump is the evidence.
        silent = {n: why for n, why in saved["silent"].items() if n != a.job.head_node}
        self.records.record(states.STACKS_SAVED, dir=rel, nodes=saved["nodes"], silent=silent or None,
                            seconds=round(time.monotonic() - t0, 1))
        # A hung driver saves nothing and may not heed SIGTERM (frozen, or stuck holding the GIL):
        # kill it now, so ending the attempt does not wait out the grace times for it.
        self.procs.kill_driver()
        return self.actuator.apply(heal.after_hang(self.actuator.standing(), heal.hang_reason(hang, rel, silent),
                                                   list(silent)))

    def wait_a_little(self) -> None:
        """POLL_S, but wake at once when the barrier (or health check) prints its result (it exits right
        after), so the driver starts within a moment of the last node joining."""
        live = next((s for s in self.procs.steps if s.kind in ("barrier", "health") and not s.seen), None)
        if live is None or live.popen.stdout is None:
            time.sleep(POLL_S)
            return
        ready, _, _ = select.select([live.popen.stdout], [], [], POLL_S)
        if ready:
            try:
                live.popen.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass


def barrier_failure(result: dict, attempt: Attempt) -> str:
    """The reason of a barrier that did not see every node join, naming who is missing."""
    job, timeout = attempt.job, attempt.ray.barrier_timeout_s
    missing = result.get("missing") or []
    named = ", ".join(f"{h} (pool {pool.name if (pool := job.pool_of(h)) else '?'})" for h in missing)
    if missing and not result.get("pools"):
        # The head's GCS never answered a node listing: who joined is unknown,
        # so name the head rather than call every host absent.
        return (f"barrier timed out after {timeout:g}s during phase barrier: "
                f"the Ray head on {job.head_node} never answered a node listing "
                f"({result.get('error') or 'no answer'})")
    if missing:
        return (f"barrier timed out after {timeout:g}s during phase barrier: "
                f"hosts never joined the Ray cluster: {named}")
    if result.get("short_of_gpus"):
        return ("barrier timed out during phase barrier: hosts joined with fewer GPUs than "
                f"compiled: {', '.join(result['short_of_gpus'])}")
    return f"barrier failed during phase barrier: {result.get('error')}"
