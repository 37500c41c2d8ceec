"""The interface every runtime kind implements, and what the kinds share.

A kind answers, for one `Runtime` (launcher/runtime/model.py), every question whose answer
depends on how a job enters the software: what the batch script loads and activates, how a
step's command runs (srun flags, a wrapper, or directly on the batch host), which python
runs there, what `sf doctor` checks, which mount would make a path visible, and which keys
a registry entry of this kind may hold (`reads`) and how they are read (`parse`).

Standard library only: the job side imports this package. The kinds take the runtime as an
argument (any object with its fields), so a kind holds no state; one instance each sits in
launcher/runtime/registry.py.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Protocol

SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_./:@+=,%#-]+$")  # enroot refs use #


class RegistryError(ValueError):
    """A registry entry's problem: `field` (runtime.<key>) and the message; the login side
    raises it as its SpecError (launcher/spec/runtimes.py)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_token(value, what: str, src: str) -> str:
    """`value` when it is a plain path or name (it reaches shell lines and srun flags)."""
    if not isinstance(value, str) or not value or not SAFE_TOKEN.fullmatch(value):
        raise RegistryError(f"runtime.{what}", f"{value!r} in {src} must be a plain path or name "
                            "(letters, digits, ./:@+=,%_-; no spaces); fix the runtime registry")
    return value


def entry_python(entry: dict, source: str) -> str:
    """The `python` of an entry whose interpreter is found on PATH inside (default python3)."""
    return check_token(str(entry.get("python", "python3")), "python", source)


class NodeProbe(Protocol):
    """What `sf doctor` lends a kind's checks to look at the cluster
    (launcher/submit/container_checks.py runs them through launcher/slurm.py)."""

    def on_node(self, argv: list[str]) -> tuple[str | None, str | None]:
        """(stdout, None) of one task on a compute node, or (None, why not)."""

    def srun_has_option(self, option: str) -> bool | None:
        """Whether `srun --help` lists `option`; None when srun does not answer."""

    def oci_conf_path(self) -> Path | None:
        """oci.conf beside the slurm.conf Slurm reads; None when unknown."""


# (name, status, detail, fix): one line of `sf doctor`
Finding = tuple[str, str, str, str]


class RuntimeKind:
    """One way into a runtime. The defaults are a host runtime's: nothing to load, the
    runtime's python runs every command directly."""

    name = ""
    in_container = False
    reads: tuple[str, ...] = ()  # the registry keys besides kind, env and overrides
    doctor_min_timeout = 0.0  # seconds a node check of this kind needs at least

    # -- the registry entry ---------------------------------------------------------
    def parse(self, entry: dict, source: str, label: str, mounts: tuple[str, ...]) -> dict:
        """The Runtime fields this kind reads from a registry `entry` of `source` (checked
        already for unknown keys; `label`: "verl 0.9.1"; `mounts`: its mounts or binds, each
        checked); RegistryError for a bad value."""
        raise NotImplementedError

    # -- what the batch script does -------------------------------------------------
    def script_modules(self, rt) -> tuple[str, ...]:
        """Modules the batch script's module_loads block loads for this runtime."""
        return ()

    def source_lines(self, rt) -> list[str]:
        """Shell lines (quoted) that activate the runtime once its modules are loaded."""
        return []

    def activate_lines(self, rt) -> list[str]:
        """Shell lines (quoted) that make the runtime usable in a shell on the host."""
        modules = self.script_modules(rt)
        load = [f"module load {' '.join(shlex.quote(m) for m in modules)}"] if modules else []
        return load + self.source_lines(rt)

    # -- which python, and how a command runs ---------------------------------------
    def runtime_python(self, rt) -> str:
        """The interpreter inside the runtime (ray, verl)."""
        return rt.python

    def host_python(self, rt, sf_python: str) -> str:
        """The interpreter that runs the supervisor on the batch host (stdlib only there)."""
        return self.runtime_python(rt)

    def srun_flags(self, rt) -> list[str]:
        """Extra srun flags for a step that runs inside the runtime."""
        return []

    def wrap(self, rt, argv: list[str]) -> list[str]:
        """argv as run inside an srun step of this runtime."""
        return list(argv)

    def local_argv(self, rt, argv: list[str]) -> list[str] | None:
        """argv as run directly on the batch host, or None when only an srun step enters."""
        return self.wrap(rt, argv)

    # -- what doctor checks ---------------------------------------------------------
    def login_argv(self, rt, args: list[str]) -> list[str] | None:
        """The runtime's python with `args`, run on the login host by `sf doctor`; None for
        a kind checked on a compute node instead (node_checks)."""
        return None

    def login_env(self, rt, env: dict) -> dict:
        """`env` as the runtime's activation would change it for login_argv."""
        return env

    def login_problem(self, rt) -> tuple[str, str] | None:
        """(detail, fix) when the runtime is visibly absent on the login host."""
        return None

    def where(self, rt) -> str:
        """The runtime's location in a doctor line."""
        return rt.image or ""

    def node_checks(self, rt, name: str, version: str, probe: NodeProbe) -> list[Finding]:
        """A container kind's checks: the plugin or binary, the image, a probe on a node."""
        return []

    # -- what the preflight says about a path the runtime cannot see ---------------
    def mount_hint(self, runtime: dict, unmounted: str, folder: str, mounted: str) -> str | None:
        """The sentence for a path the host has but a step of this runtime does not see
        (`runtime`: Runtime.to_dict); None: not a matter of mounts (a host runtime)."""
        return None


class ImageKind(RuntimeKind):
    """A kind whose runtime is an image a plugin or binary enters (pyxis, apptainer): the
    entry names the image and the python inside it; the batch host keeps sf's python."""
    in_container = True

    def parse(self, entry: dict, source: str, label: str, mounts: tuple[str, ...]) -> dict:
        return {"image": check_token(str(entry.get("image") or ""), "image", source), "mounts": mounts,
                "python": entry_python(entry, source)}

    def host_python(self, rt, sf_python: str) -> str:
        return sf_python  # the image's python lives in the image
