"""What one attempt of the job knows, in two groups: what it keeps from setup on, and what a
start renews (a restart in place or a redraw of the head's slot: launcher.injob.actuator).
The parts of the supervisor (bringup, driver_start, watch, actuator, ending) read it and
set the fields they own; heal.py reads a Standing made from it. Stdlib only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from launcher import states
from launcher.injob import ports as ports_mod
from launcher.injob import private, verl_phases
from launcher.injob import watchdog as watchdog_mod
from launcher.injob.contract import Contract, Job, RaySettings
from launcher.plan import Plan
from launcher.runtime import Runtime


@dataclass
class Attempt:
    # -- the attempt: set here or in Bringup.setup(), kept to its end ----------------------
    contract: Contract
    run_dir: str
    preflight: bool = False
    plan: Plan = field(init=False)
    ray: RaySettings = field(init=False)  # its port range narrowed to the usable part in setup
    runtime: Runtime = field(init=False)
    job_id: str = field(default_factory=lambda: os.environ.get("SLURM_JOB_ID", "0"))
    leader: str = ""  # the het leader's id (the job id otherwise): what Slurm requeues
    restart: int = 0  # SLURM_RESTART_COUNT: requeues so far (setup)
    end_ts: float | None = None  # the job's EndTime (setup)
    expires_ts: float | None = None  # the end verl is told (setup: expiration())
    head_addr: str = ""  # the head's Ray address (setup)
    token: object = None  # the Ray token of this attempt (auth.py; setup)
    ended: bool = False  # the ending was recorded (or a requeue sent): nothing more is recorded
    # -- renewed by each start (a restart in place, a redraw of the head's slot) -------------
    job: Job | None = None  # what the job's processes share: hosts, spares, the head's ports
    ports: ports_mod.NodePorts | None = None  # the head's ports (Bringup.take_head_slot)
    port_reservation: private.Reservation | None = None  # the locks on the head's ports
    stage: str = states.STAGE_ALLOCATED  # what it does now: the "during phase X" of a reason
    wall0: float = field(default_factory=time.time)  # when this start began: earlier node events are not its
    # this start's step records: the batch script's; a restart in place writes its own
    metrics_path: str | None = field(default_factory=lambda: os.environ.get("VERL_FILE_LOGGER_PATH"))
    restarts_in_place: int = 0  # in this attempt
    head_slot_redraws: int = 0  # in this attempt (heal.RedrawHeadSlot)
    # the progress watchdog of this start's driver: None until it trains (Watch.check_hang
    # makes it), False when it is off (heal.new_watchdog says why)
    watchdog: watchdog_mod.Watchdog | bool | None = None
    verl_log: verl_phases.LogWatch = field(default_factory=lambda: verl_phases.LogWatch(None))

    def __post_init__(self):
        self.plan = self.contract.plan
        self.ray = self.contract.ray
        self.runtime = Runtime.from_dict(self.contract.runtime)
        self.leader = self.leader or os.environ.get("SLURM_HET_JOB_ID") or self.job_id

    @property
    def hetjob(self) -> bool:
        return self.plan.is_hetjob

    def may_requeue(self) -> bool:
        c = self.contract
        return c.requeue_lead > 0 and (c.max_requeues is None or self.restart < c.max_requeues)

    def expiration(self) -> float | None:
        """What verl is told is the end: the job's end, or the requeue moment before it."""
        if not self.end_ts:
            return None
        if self.may_requeue():
            return self.end_ts - self.contract.requeue_lead
        return self.end_ts
