"""Slurm time limits as Slurm reads them (src/common/parse_time.c, time_str2mins): one of
MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES,
DAYS-HOURS:MINUTES:SECONDS, or UNLIMITED/INFINITE; minutes and seconds below 60 and hours
below 24 after a day count. A limit of 0 (Slurm: none at all) is refused too: sf's requeue
signal is timed from the end of the job. A limit past MAX_SECONDS is refused: Slurm wraps it
into another limit without a word. Pure.
"""

from __future__ import annotations

import re

from launcher.errors import SpecError, quoted_short

FORMS = "MINUTES, MINUTES:SECONDS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 04:00:00 or 1-12:00:00)"
_TIME = re.compile(r"^(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?$")
# Slurm (22.05, time_str2secs/time_str2mins) adds a limit up in seconds in a signed 32-bit int
# and rounds it up to minutes with +59 in the same int: anything longer wraps, silently, into
# another limit (sbatch --time=9999999-00:00:00 asks for 8234-19:19:00, 24855-03:13:09 for
# 2957761 days). 2**31 - 1 - 59 s is the longest limit it keeps: 24855-03:13:08, 68 years.
MAX_SECONDS = 2**31 - 1 - 59
MAX_TEXT = "24855-03:13:08"


def time_seconds(value, field: str = "slurm.time") -> int | None:
    """The limit in seconds (None for UNLIMITED/INFINITE), or a SpecError naming the field and
    the forms Slurm accepts."""
    text = str(value).strip()
    shown = quoted_short(text)
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.fullmatch(text)
    if isinstance(value, bool) or m is None:
        raise SpecError(field, f"{shown} is not a Slurm time limit; write {FORMS}")
    too_long = SpecError(field, f"{shown} is longer than Slurm can hold ({MAX_TEXT}, 68 years: a longer limit "
                         "wraps into another one); write a shorter time or UNLIMITED")
    if any(len(part.lstrip("0")) > 10 for part in m.groups() if part):  # past 2**31 s; int() refuses 4,300 digits
        raise too_long
    days, first, second, third = m.groups()
    if days is not None:
        hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
        if hours > 23:
            raise SpecError(field, f"{shown}: hours after a day count must be below 24; write {FORMS}")
    elif third is not None:
        hours, minutes, seconds = int(first), int(second), int(third)
    else:
        hours, minutes, seconds = 0, int(first), int(second or 0)
    if (third is not None or days is not None) and minutes > 59:
        raise SpecError(field, f"{shown}: minutes must be below 60; write {FORMS}")
    if seconds > 59:
        raise SpecError(field, f"{shown}: seconds must be below 60; write {FORMS}")
    total = ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise SpecError(field, f"{shown} is no time at all (Slurm reads 0 as no limit); write {FORMS}")
    if total > MAX_SECONDS:
        raise too_long
    return total


def check_signal_lead(lead_s, limit_s: int | None, field: str = "slurm.signal_lead_s") -> None:
    """The requeue signal must come after the job starts: its lead below the time limit."""
    if limit_s is not None and isinstance(lead_s, int) and lead_s >= limit_s:
        raise SpecError(field, f"{lead_s} s is not below the time limit ({limit_s} s): Slurm would send USR1 as the "
                        "job starts and the job would requeue itself in a loop; lower signal_lead_s or raise "
                        "slurm.time")
