"""What a process sees of the host's files, and the mount that would fix a path it cannot see.

In a container runtime (oci, pyxis, apptainer) a job's step sees only the folders its
runtime mounts: a model, a dataset, the runs folder or a reward file elsewhere exists on the
host (sf checked it at submit) and is simply absent inside. The preflight runs these checks
inside the container, on every node, and names for each such path the folder to mount and
where to say so for the runtime's kind. Also what the process runs in (`where`): its python,
and the container marker scripts/build-container writes (/etc/sf-container). Stdlib only.
"""

from __future__ import annotations

import os
import platform
import sys

MARKER = "/etc/sf-container"


def first_missing(path: str) -> str | None:
    """The shortest leading part of `path` that does not exist here (None: all of it does)."""
    parts = os.path.normpath(path).split("/")
    for i in range(2, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if not os.path.lexists(prefix):
            return prefix
    return None


def mount_hint(path: str, runtime: dict | None) -> str:
    """The sentence for `path`, absent here, in a job on `runtime` (Runtime.to_dict)."""
    runtime = runtime or {}
    kind = runtime.get("kind")
    folder = first_missing(path) or path
    mounted = ", ".join(runtime.get("mounts") or ()) or "none"
    if kind == "oci":
        return (f"{path} is not visible inside the container (OCI bundle {runtime.get('image')}): {folder} is not "
                f"mounted; rebuild the bundle with it, `scripts/build-container --mount {folder} "
                f"{runtime.get('version', 'VERSION')}`, and publish it again (the bundle mounts: {mounted})")
    if kind == "pyxis":
        return (f"{path} is not visible inside the container (pyxis image {runtime.get('image')}): add "
                f"`{folder}:{folder}` to the runtime's mounts in the registry (mounted now: {mounted})")
    if kind == "apptainer":
        return (f"{path} is not visible inside the container (apptainer image {runtime.get('image')}): add "
                f"`{folder}` to the runtime's binds in the registry (bound now: {mounted})")
    return f"{path} does not exist on this node ({folder} is missing): is that filesystem mounted on every node?"


def where() -> dict:
    """What this process runs in: its python and the bundle's marker, when in one."""
    try:
        with open(MARKER) as handle:
            container = handle.readline().strip() or "?"
    except OSError:
        container = None
    return {"python": sys.executable, "python_version": platform.python_version(), "container": container}
