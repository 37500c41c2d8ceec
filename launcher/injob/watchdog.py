"""The progress watchdog: is training still making steps? (issue 23, item 1)

verl's file logger appends one JSON line per step to $VERL_FILE_LOGGER_PATH
(<run>/metrics/attempt-N.jsonl, the file `sf metrics` reads): `{"step": S, "data": {...}}`.
The supervisor follows that file while the driver runs (Follower: a tail, no parsing of
anything but new complete lines) and asks `decide` once a second whether the driver hangs.

The decision (pure, unit-tested in tests/unit/test_watchdog.py):

  - before the first training step: a hang when nothing trained for first_step_timeout_s
    since the driver started (model load, vLLM start, validation before training: minutes);
  - after it: a hang when no NEW training step arrived for limit_s = max(hang_timeout_s,
    factor x the median time between steps of this attempt): a run whose steps take 20 min
    is not declared hung after the 10 min a run of 1 min steps is allowed.

Progress is a training step number above the last one (issue 35). A record that repeats a
step number (a trainer stuck re-logging its step) and a validation-only record (verl's
val_before_train logs `val-core/...` keys at the resume step; a loop in validation logs
nothing else) do not reset the clock. verl validates inside a step (the step's record
carries its `val-core/` keys), so a long validation counts in that step's time: the
hang limit must cover a step with its validation. A record without a step number is
progress (nothing to compare it with).

Time is the supervisor's monotonic clock at the moment a line was first seen, not verl's
`timing_s/step`: what matters is what reaches the file (validation and checkpoint saves
included), and the poll is once a second, so arrival times are good to about a second.

Standard library only (the job side).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field

# the watchdog's settings are plan.json's job "heal" (contract.HealSettings: the timeouts, the factor)
from launcher.injob.contract import HealSettings

MAX_INTERVALS = 50  # the median over the newest steps (a run's step time drifts)
VALIDATION_PREFIXES = ("val-core/", "val-aux/", "val/", "val_")


@dataclass
class Progress:
    """What the step records of this attempt showed, on the supervisor's clock."""

    started: float  # the driver's start
    last_record: float | None = None  # when the newest record (any) was seen
    last_step: int | None = None  # the newest training step
    last_step_at: float | None = None
    training_steps: int = 0
    intervals: list[float] = field(default_factory=list)  # seconds between training steps


@dataclass(frozen=True)
class Hang:
    """A verdict: no progress for idle_s, more than limit_s allows."""

    idle_s: float
    limit_s: float
    last_step: int | None
    first_step: bool  # True: no training step yet (the first-step allowance ran out)

    def reason(self) -> str:
        if self.first_step:
            return (f"hang: no training step for {self.idle_s:.0f} s after the driver started "
                    f"(first_step_timeout_s={self.limit_s:g})")
        return (f"hang: no training step for {self.idle_s:.0f} s after step {self.last_step} "
                f"(limit {self.limit_s:g} s)")


def is_training_record(record: dict) -> bool:
    """A step record with training metrics (not only validation ones)."""
    data = record.get("data")
    if not isinstance(data, dict) or not data:
        return False
    return any(not str(key).startswith(VALIDATION_PREFIXES) for key in data)


def step_number(record: dict) -> int | None:
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def observe(progress: Progress, record: dict, now: float) -> bool:
    """Fold one new record seen at `now` into `progress`; True when it is progress (a
    training step numbered above the last one)."""
    progress.last_record = now
    if not is_training_record(record):
        return False
    step = step_number(record)
    if step is not None and progress.last_step is not None and step <= progress.last_step:
        return False  # the same step again (or an older one): no progress
    if progress.last_step_at is not None:
        progress.intervals.append(max(0.0, now - progress.last_step_at))
        del progress.intervals[:-MAX_INTERVALS]
    progress.last_step = step if step is not None else progress.last_step
    progress.last_step_at = now
    progress.training_steps += 1
    return True


def limit_s(limits: HealSettings, intervals: list[float]) -> float:
    """How long a step may take: hang_timeout_s, or factor x the median step time when longer."""
    if not intervals:
        return limits.hang_timeout_s
    return max(limits.hang_timeout_s, limits.factor * statistics.median(intervals))


def decide(limits: HealSettings, progress: Progress, now: float) -> Hang | None:
    """A Hang when training made no progress for longer than allowed, else None."""
    if progress.training_steps == 0:
        idle = now - progress.started
        if idle > limits.first_step_timeout_s:
            return Hang(round(idle, 1), limits.first_step_timeout_s, None, True)
        return None
    limit = limit_s(limits, progress.intervals)
    idle = now - (progress.last_step_at or progress.started)
    if idle > limit:
        return Hang(round(idle, 1), round(limit, 1), progress.last_step, False)
    return None


def file_logger_on(overrides: list[str] | tuple[str, ...]) -> bool:
    """Whether the driver writes step records: the last trainer.logger override names `file`
    (verl's own default logger list has no file logger; sf's defaults add it)."""
    value = None
    for item in overrides:
        key, _, rest = str(item).partition("=")
        if key.lstrip("+") == "trainer.logger":
            value = rest
    return value is not None and "file" in re.findall(r"[A-Za-z_]+", value)


class Follower:
    """Tails one step-record file: new complete lines since the last call, parsed."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.inode = None

    def new_records(self) -> list[dict]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset):
            self.offset, self.partial = 0, b""  # verl opened it again ("wb"): read it from the start
        self.inode = st.st_ino
        if st.st_size == self.offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        self.offset += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


class Watchdog:
    """The supervisor's handle: follow the file, say when it hangs."""

    def __init__(self, path: str, limits: HealSettings, now: float):
        self.follower = Follower(path)
        self.limits = limits
        self.progress = Progress(started=now)
        self.checked = 0.0
        self.stepped = False  # the last poll saw a new training step

    def poll(self, now: float) -> Hang | None:
        if now - self.checked < 1.0:  # a stat a second is plenty for limits of minutes
            return None
        self.checked = now
        self.stepped = False
        for record in self.follower.new_records():
            self.stepped = observe(self.progress, record, now) or self.stepped
        return decide(self.limits, self.progress, now)

    def catch_up(self, now: float) -> Progress:
        """Read what the driver logged up to now (not up to a second ago): its progress at its end."""
        self.checked = 0.0
        self.poll(now)
        return self.progress
