"""What may go on an `#SBATCH` line: one checker per kind of value.

Every value the training job, the export and eval jobs and `sf doctor`'s test script put
on an `#SBATCH` line passes one of these. A value that could break out of its line (a
space, a newline, `#`, a quote) is refused with a SpecError naming the field and what is
allowed, never written. Pure; standard library only.
"""

from __future__ import annotations

import re

from launcher.errors import SpecError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # account, qos, partition
TIME = re.compile(r"^(?:\d+-\d{1,2}(?::\d{2}){0,2}|\d{1,6}(?::\d{2}){0,2}|UNLIMITED|INFINITE)$")
MEM = re.compile(r"^\d+[KMGT]?$")
CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|()\[\]*:!,-]{1,200}$")
GRES = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")  # no spaces, %, #, quotes
LOG_PATH = re.compile(r"^/[A-Za-z0-9._/+%-]*$")  # a PATH that may hold %j / %A / %a
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check(pattern: re.Pattern, value, field: str, what: str) -> str:
    """`value` as text when it matches `pattern` in full; else a SpecError naming `field`."""
    text = str(value)
    if not pattern.fullmatch(text):
        raise SpecError(field, f"{text!r} cannot go into the batch script: {what}")
    return text


def whole(value, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, f"{value!r} must be a whole number >= {minimum}")
    return value


def _checker(pattern: re.Pattern, what: str):
    """check(pattern, value, field, what) as a function of (value, field)."""
    def checker(value, field: str) -> str:
        return check(pattern, value, field, what)

    return checker


name = _checker(NAME, "use letters, digits and ._- only (at most 100 characters)")
account = _checker(ACCOUNT, "letters, digits and ._- only")  # an account, a qos or a partition
time_limit = _checker(TIME, "use minutes, HH:MM:SS or D-HH:MM:SS")
mem = _checker(MEM, "a size such as 64G (a number with K, M, G or T)")
gres_name = _checker(GRES, "letters, digits, _ and - only")
constraint = _checker(CONSTRAINT, "features joined by & | , only; no spaces")
path = _checker(PATH, "an absolute path of letters, digits and ._/+- only (no spaces, %, # or quotes); "
                "choose another runs_dir")
log_path = _checker(LOG_PATH, "an absolute path of letters, digits and ._/+-% only; choose another runs_dir")
env_key = _checker(ENV_KEY, "environment names are letters, digits and _, not starting with a digit")
