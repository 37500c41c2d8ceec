"""What a process sees of the host's files, and the mount that would fix a path it cannot see.

In a container runtime (oci, pyxis, apptainer) a job's step sees only the folders its
runtime mounts: a model, a dataset, the runs folder or a reward file elsewhere may exist on
the host and simply be absent inside. The preflight runs these checks inside the container, on
every node; the supervisor, on the batch host outside any container, has already looked for
the same paths there (`missing_here`: Job.host_missing). A path absent inside is then one of
  - absent on the host too: a wrong path, fixed in the field that names it (no mount helps);
  - there on the host: not mounted; the folder to mount, and where to say so for the kind.
Also what the process runs in (`where`): its python, and the container marker
scripts/build-container writes (/etc/sf-container). Stdlib only, besides the runtime's kinds
(launcher/runtime/: each says where its mounts are given).
"""

from __future__ import annotations

import os
import platform
import sys

from launcher.runtime import kind_named

MARKER = "/etc/sf-container"


def first_missing(path: str) -> str | None:
    """The shortest leading part of `path` that does not exist here (None: all of it does).
    A symbolic link on the way whose target is not here (a link under a mounted folder to a
    folder that is not mounted) gives its target: that is the folder to mount, not the link."""
    parts = os.path.normpath(path).split("/")
    for i in range(2, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if os.path.islink(prefix) and not os.path.exists(prefix):
            return link_target(prefix)
        if not os.path.lexists(prefix):
            return prefix
    return None


def link_target(link: str) -> str:
    """Where the link `link` points, as an absolute path (a relative target is read from the
    link's folder)."""
    try:
        target = os.readlink(link)
    except OSError:
        return link
    return os.path.normpath(os.path.join(os.path.dirname(link), target))


def missing_here(paths) -> dict[str, str]:
    """{path: the shortest leading part of it that is missing} for each of `paths` absent here."""
    return {path: first_missing(path) or path for path in paths if not os.path.exists(path)}


def mount_hint(path: str, runtime: dict | None, host_missing: str | None = None, field: str = "") -> str:
    """The sentence for `path`, absent here, in a job on `runtime` (Runtime.to_dict).
    `host_missing`: the part of the path missing on the batch host (None: the host has it);
    `field`: where the path was given (path_field)."""
    runtime = runtime or {}
    if host_missing:
        gap = f" ({host_missing} is missing there)" if host_missing != path else ""
        return f"{path} does not exist on the host{gap}: fix the path in {field or 'the experiment'}"
    folder = first_missing(path) or path
    mounted = ", ".join(runtime.get("mounts") or ()) or "none"
    unmounted = f"{path} exists on the host but is not mounted in the container"
    kind = kind_named(runtime.get("kind"))
    hint = kind.mount_hint(runtime, unmounted, folder, mounted) if kind else None
    return hint or (f"{path} does not exist on this node ({folder} is missing), though the batch host has it: "
                    "is that filesystem mounted on every node?")


def path_field(path: str, plan: dict) -> str:
    """Where the experiment gives `path` (plan.json: the verl key whose value it is, and the
    source that set it), e.g. "--model (actor_rollout_ref.model.path)"; "" when none says."""
    for key, item in (plan.get("resolved") or {}).items():
        value = item.get("value") if isinstance(item, dict) else None
        if value == path or (isinstance(value, list) and path in value):
            return f"{item.get('source') or 'config.yaml'} ({key})"
    if path in (plan.get("entry") or ()):
        return "the experiment's main.py (its entry)"
    return ""


def where() -> dict:
    """What this process runs in: its python and the bundle's marker, when in one."""
    try:
        with open(MARKER) as handle:
            container = handle.readline().strip() or "?"
    except OSError:
        container = None
    return {"python": sys.executable, "python_version": platform.python_version(), "container": container}
