"""verl's own start-up phases, read from the driver's log lines (standard library only).

The driver's output is the batch log (the supervisor's stdout, which the driver inherits).
While the driver runs, the supervisor reads what was appended since the driver started and
records each phase below once per driver start, as a `verl_phase` event (name, label and,
for a resume or a step, the step): `sf status RUN --timeline` lists them beside sf's own
phases, `sf plot RUN --timeline` draws them.

The lines are verl 0.9.1's: its v1 trainer (verl/trainer/ppo/v1/trainer_base.py, the
TaskRunnerV1 that main_ppo runs) logs "INFO:<time>:<message>", the older RayPPOTrainer
(verl/trainer/ppo/ray_trainer.py) prints; the rollout servers' addresses come from
verl/workers/rollout/llm_server.py in both. Ray prefixes every line of an actor with
"(TaskRunnerV1 pid=N)" and colours, so a pattern matches anywhere in a line. An event's time
is when the supervisor read the line: at most its poll interval (0.5 s) after verl wrote it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

# name, label, pattern: the one table of verl's start-up phases, in the order a start goes through them.
# A pattern's group 1, where it has one, is the step the phase names.
PHASES = (
    ("dataloader_ready", "dataloader ready",
     re.compile(r"train and validate dataloader initialized|Size of train dataloader: ")),
    ("workers_created", "worker groups created", re.compile(r"create worker group ")),
    ("actor_ready", "actor and reference ready", re.compile(r"actor and ref model engine initialized")),
    ("rollout_ready", "rollout servers ready", re.compile(r"LLMServerManager: \[")),
    ("from_scratch", "training from scratch", re.compile(r"Training from scratch")),
    ("resumed", "resumed from step", re.compile(r"Resuming from \S*?global_step_(\d+)")),
    ("ready_to_fit", "ready to train", re.compile(r"all initialize finished, ready to fit")),
    # verl's console logger prints each logged step as "step:N - key:value - ...": validation alone
    # (val_before_train, before the first step) logs only val-* keys, a training step its own first
    ("validated", "validation before training", re.compile(r"(?:^|\s)step:(\d+) - val-")),
    ("first_step", "first step", re.compile(r"(?:^|\s)step:(\d+) - (?!val-)")),
)
LABELS = {name: label for name, label, _ in PHASES}

# a long line (a config dump, a progress bar) is read in pieces no longer than this
MAX_READ = 4 * 1024 * 1024


def match(line: str) -> dict | None:
    """The phase a log line marks ({"name", "label", "step"?}), or None."""
    for name, label, pattern in PHASES:
        found = pattern.search(line)
        if found:
            event = {"name": name, "label": label}
            if found.groups():
                event["step"] = int(found.group(1))
            return event
    return None


def parse(lines) -> list[dict]:
    """The phases of one driver start in these lines: each phase once, its first line."""
    seen, events = set(), []
    for line in lines:
        event = match(line)
        if event and event["name"] not in seen:
            seen.add(event["name"])
            events.append(event)
    return events


@dataclass
class LogWatch:
    """The batch log from where one driver start began; `new_phases` returns the phases of
    the lines appended since the last call (each phase once per driver start)."""
    path: str | None
    offset: int = 0
    partial: bytes = b""
    seen: frozenset = frozenset()

    @classmethod
    def from_here(cls) -> LogWatch:
        """From the end of the batch log as it is now (this process's stdout, when a file)."""
        try:
            path = os.readlink("/proc/self/fd/1")
            return cls(path, os.stat(path).st_size)
        except OSError:  # stdout is no file (a terminal, a pipe): nothing to read
            return cls(None)

    def new_phases(self) -> list[dict]:
        if self.path is None or len(self.seen) == len(PHASES):
            return []
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(MAX_READ)
        except OSError:
            return []
        self.offset += len(chunk)
        text = self.partial + chunk
        lines = text.split(b"\n")
        self.partial = lines.pop()[-MAX_READ:]  # an unfinished line waits for its end
        events = [e for e in parse(line.decode(errors="replace") for line in lines) if e["name"] not in self.seen]
        self.seen = self.seen | {e["name"] for e in events}
        return events
