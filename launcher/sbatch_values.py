"""What may go on an `#SBATCH` line: one checker per kind of value.

Every value the training job, the export and eval jobs and `sf doctor`'s test script put
on an `#SBATCH` line passes one of these. A value that could break out of its line (a
space, a newline, `#`, a quote) is refused with a SpecError naming the field and what is
allowed, never written. Every pattern for such a value lives here: the checkers'
(NAME, ACCOUNT, TIME, ...), the daily scheduler options' (RESERVATION, DEPENDENCY, ...,
SCALARS, and KEYS, their config keys, which the spec stage reads) and the --sbatch
allowlist (ALLOWED); launcher.compile.scheduler_options checks and places them. Pure;
standard library only.
"""

from __future__ import annotations

import re

from launcher.errors import SpecError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # account, qos, partition
TIME = re.compile(r"^(?:[0-9]+-[0-9]{1,2}(?::[0-9]{2}){0,2}|[0-9]{1,6}(?::[0-9]{2}){0,2}|UNLIMITED|INFINITE)$")
MEM = re.compile(r"^[0-9]+[KMGT]?$")
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

# Environment names that decide what a later command of the batch script runs (launcher.render.
# site_checks holds a site block to the same names): where programs, libraries, modules and
# Python packages are found; files each later bash or program loads first; how bash reads and
# runs sf's lines (PS4 is expanded before each traced line; FUNCNEST=1 stops the requeue trap)
SEARCH_PATHS = ("PATH", "LD_LIBRARY_PATH", "MODULEPATH", "PYTHONPATH")
CODE_FILES = ("BASH_ENV", "ENV", "LD_PRELOAD", "LD_AUDIT")
SHELL_NAMES = ("IFS", "CDPATH", "GLOBIGNORE", "SHELLOPTS", "BASHOPTS", "POSIXLY_CORRECT", "EXECIGNORE",
               "BASH_LOADABLES_PATH", "BASH_XTRACEFD", "BASH_COMPAT", "PS4", "FUNCNEST", "PYTHONHOME",
               "PYTHONSAFEPATH", "PYTHONUSERBASE")


def lookup_parts(key: str, value: str) -> list[str]:
    """The parts of a SEARCH_PATHS value (split at ':') or of a CODE_FILES value (at ':' or a
    space, as the dynamic loader reads LD_PRELOAD)."""
    return re.split("[: ]" if key in CODE_FILES else ":", value)


def env_value(key: str, value, field: str) -> str:
    """An `env:` value the batch script exports (shell-quoted later), checked where its name
    decides what sf's later commands run: SHELL_NAMES never; SEARCH_PATHS and CODE_FILES only
    absolute paths (an empty or relative part is the job's current folder, which another user
    may write to, and a later srun or python would be theirs)."""
    text = str(value)
    if key in SHELL_NAMES:
        raise SpecError(field, f"{key} changes how bash reads or runs sf's batch script; remove it from env")
    if key in SEARCH_PATHS or key in CODE_FILES:
        bad = next((p for p in lookup_parts(key, text) if not p.startswith("/")), None)
        if bad is not None:
            what = "an empty part (the current folder)" if bad == "" else f"the relative part {bad!r}"
            raise SpecError(field, f"{text!r} has {what}; {key} in env takes absolute folders only "
                                   f"(joined by {':' if key in SEARCH_PATHS else 'spaces or :'})")
    return text


_FEATURE = re.compile(r"!?[A-Za-z0-9_.:-]+")


def features(value, field: str) -> str:
    """A node-feature expression as sbatch's --constraint reads it: features (`!` may negate
    one, `*N` counts nodes) joined by & | , and grouped by ( ) or [ ]; `&&`, a trailing `|`,
    `()` or an unclosed bracket are refused here, not by sbatch at submit (or never: some
    Slurm versions drop what they cannot parse)."""
    text = check(CONSTRAINT, value, field, "features joined by & | , only; no spaces")
    pos, stack, want_term = 0, [], True
    problem = None
    while pos < len(text) and problem is None:
        ch = text[pos]
        if want_term:
            if ch in "([":
                stack.append(")" if ch == "(" else "]")
                pos += 1
                continue
            m = _FEATURE.match(text, pos)
            if not m:
                problem = f"a feature name is missing at position {pos + 1}"
                break
            pos, want_term = m.end(), False
        elif ch in "&|,":
            pos, want_term = pos + 1, True
        elif ch in ")]":
            if not stack or stack.pop() != ch:
                problem = f"{ch!r} at position {pos + 1} closes nothing"
            pos += 1
        elif ch == "*":
            m = re.compile(r"\*[0-9]{1,6}").match(text, pos)
            if not m:
                problem = f"'*' at position {pos + 1} needs a node count (feature*2)"
            else:
                pos = m.end()
        else:
            problem = f"{ch!r} at position {pos + 1} cannot follow a feature"
    if problem is None and want_term:
        problem = "it ends with an operator"
    if problem is None and stack:
        problem = f"a {'(' if stack[-1] == ')' else '['} is never closed"
    if problem:
        raise SpecError(field, f"{text!r} is not a node-feature expression ({problem}); write features joined by "
                        "& (and), | (or) or , such as a100&ib or [rack1|rack2]")
    return text


# --- the scheduler options (launcher.compile.scheduler_options checks and places them) ------
# value patterns: no spaces, quotes, `#`, `$`, `;` or newlines in any of them
RESERVATION = re.compile(r"^[A-Za-z0-9_.-]{1,64}(?:,[A-Za-z0-9_.-]{1,64}){0,7}$")
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
MAIL_USER = re.compile(r"^[A-Za-z0-9._+-]{1,64}(?:@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*)?$")
_DEP_ONE = (r"(?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)"
            r"(?::[1-9][0-9]{0,11}(?:_[0-9]{1,9})?(?:\+[0-9]{1,6})?)+)")
DEPENDENCY = re.compile(rf"^{_DEP_ONE}(?:(?:,{_DEP_ONE})*|(?:\?{_DEP_ONE})*)$")
_HOSTS = r"[A-Za-z0-9._-]+(?:\[[0-9,-]+\][A-Za-z0-9._-]*)*"  # node07, node[01-03], gpu[1,3]x
NODELIST = re.compile(rf"^{_HOSTS}(?:,{_HOSTS})*$")
SBATCH_KEY = re.compile(r"^[a-z][a-z-]{1,40}$")

TIMEISH = re.compile(r"^[A-Za-z0-9:+_-]{1,32}$")  # now+1hour, 2026-12-01T10:00, 16:00, midnight
WORDS = re.compile(r"^[A-Za-z0-9._:=,@/+-]{1,200}$")  # a comment, a network spec: one word
INT = re.compile(r"^-?[0-9]{1,9}$")

# the scalar keys (flag, config key, pattern, what, job-wide?)
SCALARS = (
    ("--reservation", "reservation", RESERVATION, "a reservation name (letters, digits, ._-; several joined by ,)",
     False),
    ("--mail-type", "mail_type", None, "one or more of " + ",".join(MAIL_TYPES) + " joined by ,", True),
    ("--mail-user", "mail_user", MAIL_USER, "a user name or an address like alice@example.org", True),
    ("--dependency", "dependency", DEPENDENCY,
     "a Slurm dependency like afterok:123 or afterany:123:124,singleton (no spaces; all , or all ?)", True),
    ("--exclude", "exclude", NODELIST, "node names like node[01-03],node07", False),
    ("--constraint", "constraint", CONSTRAINT, "features joined by & | , only; no spaces", False),
)
KEYS = tuple(key for _f, key, *_ in SCALARS) + ("sbatch", "exclude_bad_nodes")

# --sbatch KEY=VALUE: key -> (pattern, what is allowed, job-wide?) ; pattern None: a flag without a value
ALLOWED: dict[str, tuple[re.Pattern | None, str, bool]] = {
    "begin": (TIMEISH, "a time such as now+1hour, 16:00 or 2026-12-01T10:00", True),
    "deadline": (TIMEISH, "a time such as 2026-12-01T10:00", True),
    "comment": (WORDS, "one word of letters, digits and ._:=,@/+- (no spaces)", True),
    "nice": (INT, "a whole number", True),
    "priority": (re.compile(r"^(?:[0-9]{1,9}|TOP)$"), "a whole number or TOP", True),
    "kill-on-invalid-dep": (re.compile(r"^(?:yes|no)$"), "yes or no", True),
    "wckey": (ACCOUNT, "letters, digits and ._- only", True),
    "acctg-freq": (re.compile(r"^[A-Za-z0-9=,]{1,64}$"), "like task=30,energy=60", True),
    "profile": (re.compile(r"^[A-Za-z,]{1,64}$"), "like all or energy,task", True),
    "delay-boot": (TIME, "minutes or HH:MM:SS", True),
    "mcs-label": (NAME, "letters, digits and ._- only", True),
    "licenses": (re.compile(r"^[A-Za-z0-9_.@-]{1,64}(?::[0-9]{1,6})?"
                            r"(?:[,|][A-Za-z0-9_.@-]{1,64}(?::[0-9]{1,6})?){0,15}$"),
                 "like matlab:2,fluent", False),
    "gres-flags": (re.compile(r"^[a-z-]{1,40}(?:,[a-z-]{1,40}){0,3}$"), "like enforce-binding", False),
    "mem-per-gpu": (MEM, "a size such as 32G", False),
    "mem-per-cpu": (MEM, "a size such as 4G", False),
    "cpus-per-gpu": (re.compile(r"^[0-9]{1,4}$"), "a whole number", False),
    "tmp": (MEM, "a size such as 100G", False),
    "hint": (re.compile(r"^(?:compute_bound|memory_bound|multithread|nomultithread)$"),
             "compute_bound, memory_bound, multithread or nomultithread", False),
    "network": (WORDS, "one word of letters, digits and ._:=,@/+-", False),
    "switches": (re.compile(r"^[0-9]{1,4}(?:@[0-9:-]{1,16})?$"), "like 1 or 1@10:00", False),
    "prefer": (CONSTRAINT, "features joined by & | , only; no spaces", False),
    "cpu-freq": (re.compile(r"^[A-Za-z0-9:-]{1,40}$"), "like high or 2400000-3000000:performance", False),
    "core-spec": (re.compile(r"^[0-9]{1,4}$"), "a whole number", False),
    "thread-spec": (re.compile(r"^[0-9]{1,4}$"), "a whole number", False),
    "gpu-bind": (re.compile(r"^[A-Za-z0-9_:,.-]{1,64}$"), "like closest or map_gpu:0,1", False),
    "gpu-freq": (re.compile(r"^[A-Za-z0-9_=:,.-]{1,64}$"), "like high or memory=high", False),
    "distribution": (re.compile(r"^[A-Za-z0-9:,*]{1,40}$"), "like block:cyclic", False),
    "mem-bind": (re.compile(r"^[A-Za-z0-9_:,.-]{1,64}$"), "like local", False),
    "contiguous": (None, "a flag (no value)", False),
    "spread-job": (None, "a flag (no value)", False),
    "use-min-nodes": (None, "a flag (no value)", False),
    "overcommit": (None, "a flag (no value)", False),
}


# What Slurm's clients read from their environment as options: SCANCEL_STATE=PENDING makes
# scancel skip a running job, SQUEUE_*/SACCT_* change what the state reads see, SLURM_TIME_FORMAT
# their dates, SLURM_JOB_ID/SRUN_* the target of an srun. sf's login-side Slurm commands run
# without them (launcher.slurm.client_env), and a site block may not set them in the job's
# script (launcher.render.site_checks).
SLURM_CLIENT_PREFIXES = ("SCANCEL_", "SQUEUE_", "SACCT_", "SACCTMGR_", "SCONTROL_", "SINFO_", "SBATCH_",
                         "SRUN_", "SALLOC_", "SLURM_")


# Login-node variables that would carry another Python, verl or libraries into the job than the
# runtime sf checked (sbatch exports the whole environment by default). sbatch itself runs with
# them (a module-loaded or unpacked Slurm finds libslurmfull.so through LD_LIBRARY_PATH); the
# job's scripts unset them first thing (login_env_unset), but those the site lets through
# (slurm.pass_login_env).
LOGIN_ENV = ("PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONHOME")


def login_env_unset(passed=()) -> str | None:
    """The scripts' line that keeps the login node's LOGIN_ENV out of the job, or None when
    the site passes them all."""
    names = [name for name in LOGIN_ENV if name not in passed]
    return f"unset {' '.join(names)}" if names else None
