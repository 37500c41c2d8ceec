"""kind oci: Slurm's own OCI containers (oci.conf + runc). srun steps get `--container=<bundle>`;
the bundle's config.json says what is mounted (scripts/build-container builds one,
scripts/sf-oci-run is oci.conf's RunTimeRun). The batch script stays on the host; every Ray
node, the barrier, the preflight and the driver are srun steps in the container.

    "0.8.3": {kind: oci, bundle: /opt/sf/containers/verl-0.8.3, python: /opt/sf/runtime/bin/python}

sf doctor: the bundle is complete (config.json, rootfs/ a folder, the python inside, verl at
the published version in its dist-info), Slurm has an oci.conf beside slurm.conf (without
one, --container is ignored and the step runs on the host, silently), and a real container
step on a node answers with the bundle's verl.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

from launcher.runtime.base import Finding, NodeProbe, RegistryError, RuntimeKind, check_token

PROBE = "import importlib.metadata as m; print(m.version('verl'))"


def bundle_mounts(bundle: str) -> tuple[str, ...] | None:
    """The paths an OCI bundle binds from the host (its config.json), None when unreadable."""
    try:
        config = json.loads((Path(bundle) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    out = []
    for mount in config.get("mounts") or ():
        if isinstance(mount, dict) and {"bind", "rbind"} & set(mount.get("options") or ()):
            out.append(str(mount.get("destination")))
    return tuple(out)


def bundle_problem(bundle: str, python: str, version: str) -> str | None:
    """Why `bundle` cannot serve verl `version` through `python`, or None."""
    try:
        json.loads((Path(bundle) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"{bundle}/config.json: {exc.__class__.__name__}: {exc}"
    rootfs = Path(bundle) / "rootfs"
    if not rootfs.is_dir() or rootfs.is_symlink():
        return f"{rootfs} must be a folder (runc refuses a symlink)"
    if not os.path.lexists(f"{rootfs}{python}"):
        return f"{python} is not in {rootfs}"
    prefix = os.path.dirname(os.path.dirname(python))
    found = [os.path.basename(p)[len("verl-"):-len(".dist-info")]
             for p in glob.glob(f"{rootfs}{prefix}/lib/python3*/site-packages/verl-*.dist-info")]
    if found != [version]:
        return f"the bundle has verl {', '.join(found) or 'nowhere'} under {prefix}, not {version}"
    return None


class Oci(RuntimeKind):
    name = "oci"
    in_container = True
    reads = ("bundle", "python", "mounts")
    doctor_min_timeout = 60.0  # a container step starts runc and a python inside

    def parse(self, entry: dict, source: str, label: str, mounts: tuple[str, ...]) -> dict:
        """`bundle` (an absolute folder with config.json and rootfs/, the same on every node)
        and `python` (the interpreter inside it, absolute: slurmstepd looks argv[0] up on the
        host's PATH otherwise); the mounts are the bundle's own, else the entry's."""
        bundle = check_token(str(entry.get("bundle") or entry.get("image") or ""), "bundle", source)
        python = check_token(str(entry.get("python") or ""), "python", source)
        for what, value in (("bundle", bundle), ("python", python)):
            if not value.startswith("/"):
                raise RegistryError(f"runtime.{what}", f"{value!r} in {source}: kind oci needs an absolute {what} "
                                    "(the bundle folder every node sees; the python inside the container)")
        found = bundle_mounts(bundle)
        if found is None:
            found = tuple(str(m) for m in (entry.get("mounts") or ()))  # as the registry says
        return {"image": bundle, "mounts": tuple(found), "python": python}

    def host_python(self, rt, sf_python: str) -> str:
        return sf_python  # the bundle's python lives in the bundle; sbatch has no --container

    def srun_flags(self, rt) -> list[str]:
        return [f"--container={rt.image}"]

    def local_argv(self, rt, argv: list[str]) -> None:
        return None

    def node_checks(self, rt, name: str, version: str, probe: NodeProbe) -> list[Finding]:
        problem = bundle_problem(rt.image, rt.python, version)
        if problem:
            return [(name, "fail", problem, "rebuild it (scripts/build-container) or fix the registry entry")]
        conf = probe.oci_conf_path()
        if conf is not None and not conf.is_file():
            return [(f"oci {name}", "fail", f"Slurm has no {conf}: srun --container is ignored and every step "
                                            "would run on the host, silently",
                     "write oci.conf beside slurm.conf (RunTimeRun with runc; docs/admins.md: containers)")]
        out, why = probe.on_node([f"--container={rt.image}", rt.python, "-c", PROBE])
        if out is None:
            return [(name, "fail", f"a container step on a node failed: {why}",
                     "check oci.conf, runc on the nodes, and the bundle's path on every node")]
        found = (out.strip().splitlines() or ["?"])[-1]
        if found != version:
            return [(name, "fail", f"the container answers verl {found}, published as {version}",
                     "fix the registry entry's version")]
        return [(name, "ok", f"oci bundle {rt.image}: a container step on a node has verl {found} "
                             f"({rt.python}); oci.conf {conf or '?'}", "")]

    def mount_hint(self, runtime: dict, unmounted: str, folder: str, mounted: str) -> str:
        return (f"{unmounted} (OCI bundle {runtime.get('image')}): add a mount: rebuild the bundle with "
                f"`scripts/build-container --mount {folder} {runtime.get('version', 'VERSION')}` and publish it "
                f"again (the bundle mounts: {mounted})")
