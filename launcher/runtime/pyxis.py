"""kind pyxis: an enroot image through NVIDIA's pyxis SPANK plugin; every srun step gets
`--container-image=<image> --container-mounts=<mounts>`, so a runtime process never runs on
the batch host directly (the supervisor does, on sf's own python).

    "0.8.5": {kind: pyxis, image: /images/verl-0.8.5.sqsh, mounts: [/data:/data]}

sf doctor: the image (a path) exists, `srun --help` offers --container-image (srun reads the
same plugstack.conf as the nodes), and enroot is on a compute node.
"""

from __future__ import annotations

from pathlib import Path

from launcher.runtime.base import Finding, ImageKind, NodeProbe


class Pyxis(ImageKind):
    name = "pyxis"
    reads = ("image", "mounts", "python")

    def srun_flags(self, rt) -> list[str]:
        flags = [f"--container-image={rt.image}"]
        if rt.mounts:
            flags.append("--container-mounts=" + ",".join(rt.mounts))
        return flags

    def local_argv(self, rt, argv: list[str]) -> None:
        return None

    def node_checks(self, rt, name: str, version: str, probe: NodeProbe) -> list[Finding]:
        out = []
        if rt.image.startswith("/") and not Path(rt.image).exists():
            out.append((name, "fail", f"image {rt.image} does not exist", "fix the image path in the registry"))
        has = probe.srun_has_option("--container-image")
        if has is None:
            return [*out, (f"pyxis {name}", "warn", "srun --help did not answer: the pyxis plugin is not checked", "")]
        if not has:
            return [*out, (f"pyxis {name}", "fail",
                           "srun has no --container-image: the pyxis SPANK plugin is not loaded, so this "
                           "runtime's steps cannot start",
                           "install pyxis and enroot on every node and name pyxis in plugstack.conf "
                           "(https://github.com/NVIDIA/pyxis), or publish a venv/oci runtime instead")]
        found, why = probe.on_node(["sh", "-c", "command -v enroot || true"])
        if found is None:
            return [*out, (f"pyxis {name}", "warn", f"pyxis is loaded; enroot on a node not checked: {why}", "")]
        if not found.strip():
            return [*out, (f"pyxis {name}", "fail", "pyxis is loaded but a compute node has no enroot",
                           "install enroot on every compute node")]
        return [*out, (name, "ok", f"pyxis loaded (srun --container-image), enroot at {found.strip()} "
                                   f"on a node; image {rt.image}", "")]

    def mount_hint(self, runtime: dict, unmounted: str, folder: str, mounted: str) -> str:
        return (f"{unmounted} (pyxis image {runtime.get('image')}): add a mount: `{folder}:{folder}` to the "
                f"runtime's mounts in the registry (mounted now: {mounted})")
