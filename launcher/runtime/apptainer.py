"""kind apptainer: a .sif image; every command runs as `apptainer exec --nv --bind <binds>
<image> ...`, inside an srun step or directly on the batch host.

    "0.8.4": {kind: apptainer, image: /images/verl-0.8.4.sif, binds: [/data]}

sf doctor: the image exists, and `apptainer` (or `singularity`) is on a compute node.
"""

from __future__ import annotations

from pathlib import Path

from launcher.runtime.base import Finding, ImageKind, NodeProbe


class Apptainer(ImageKind):
    name = "apptainer"
    reads = ("image", "binds", "python")

    def wrap(self, rt, argv: list[str]) -> list[str]:
        prefix = ["apptainer", "exec", "--nv"]
        if rt.mounts:
            prefix += ["--bind", ",".join(rt.mounts)]
        return [*prefix, rt.image, *argv]

    def node_checks(self, rt, name: str, version: str, probe: NodeProbe) -> list[Finding]:
        if not Path(rt.image).is_file():
            return [(name, "fail", f"image {rt.image} does not exist", "fix the image path in the registry")]
        found, why = probe.on_node(["sh", "-c", "command -v apptainer || command -v singularity || true"])
        if found is None:
            return [(name, "warn", f"apptainer image {rt.image} present; apptainer on a node not checked: {why}", "")]
        if not found.strip():
            return [(name, "fail", f"a compute node has neither apptainer nor singularity on PATH: "
                                   f"this runtime's commands (apptainer exec ... {rt.image}) cannot start",
                     "install apptainer on every compute node, or publish a venv/oci runtime instead")]
        return [(name, "ok", f"apptainer image {rt.image} present; {found.strip()} on a node", "")]

    def mount_hint(self, runtime: dict, unmounted: str, folder: str, mounted: str) -> str:
        return (f"{unmounted} (apptainer image {runtime.get('image')}): add a bind: `{folder}` to the "
                f"runtime's binds in the registry (bound now: {mounted})")
