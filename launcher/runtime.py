"""The verl runtime: which software runs inside the job, and how commands enter it.

A runtime is a site artifact, published by an admin in a registry file
(`$FORGE_RUNTIME_REGISTRY_FILE`, else the site's `runtime_registry`):

    verl:
      "0.9.1": {kind: venv, path: /opt/sf/runtimes/verl-0.9.1}
      "0.9.0": {kind: module, modules: [cuda/12.4, verl/0.9.0]}
      "0.8.5": {kind: pyxis, image: /images/verl-0.8.5.sqsh, mounts: [/data:/data]}
      "0.8.4": {kind: apptainer, image: /images/verl-0.8.4.sif, binds: [/data]}
      "0.8.3": {kind: oci, bundle: /opt/sf/containers/verl-0.8.3, python: /opt/sf/runtime/bin/python}

or named for every version at once by `$FORGE_IMAGE_VERL` (a venv directory, a .sif
image for apptainer, anything else is a pyxis/enroot image).

How a kind runs commands:
  venv       `source <path>/bin/activate`; its python runs everything
  module     `module load <modules...>`; `python3` from the modules
  pyxis      srun steps get `--container-image=<image> --container-mounts=<mounts>`
  apptainer  commands run as `apptainer exec --nv --bind <binds> <image> ...`
  oci        Slurm's own OCI containers (oci.conf + runc): srun steps get
             `--container=<bundle>`; the bundle's config.json says what is mounted
             (scripts/build-container builds one, scripts/sf-oci-run is oci.conf's
             RunTimeRun). The batch script stays on the host; every Ray node, the barrier,
             the preflight and the driver are srun steps in the container.

This module is the runtime's model, shared by the login side and the job (standard library
only); which runtime a site publishes for a verl version is looked up on the login side
(launcher/spec/runtimes.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("venv", "module", "pyxis", "apptainer", "oci")
CONTAINER_KINDS = ("pyxis", "apptainer", "oci")


@dataclass(frozen=True)
class Runtime:
    framework: str  # "verl"
    version: str  # "0.9.1"
    kind: str  # venv | module | pyxis | apptainer
    path: str | None = None  # venv
    modules: tuple[str, ...] = ()  # module
    image: str | None = None  # pyxis, apptainer; oci: the bundle folder
    mounts: tuple[str, ...] = ()  # pyxis: "src:dst[:flags]"; apptainer binds; oci: the bundle's bind mounts
    python: str = "python3"  # interpreter inside the runtime
    source: str = ""  # where it was found (for messages)
    env: tuple[tuple[str, str], ...] = field(default=())
    # Default verl overrides per verl config name, for what this image lacks (no flash-attn:
    # use_remove_padding=False and sdpa attention). Below everything the experiment says.
    overrides: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    def default_overrides(self, config_name: str) -> tuple[str, ...]:
        return dict(self.overrides).get(config_name, ())

    # -- what the batch script does --------------------------------------------------
    def activate_lines(self) -> list[str]:
        """Shell lines (already quoted) that make the runtime usable in the batch step."""
        if self.kind == "venv":
            return [f"source {shlex.quote(str(Path(self.path) / 'bin' / 'activate'))}"]
        if self.kind == "module":
            return [f"module load {' '.join(shlex.quote(m) for m in self.modules)}"]
        return []

    @property
    def in_container(self) -> bool:
        return self.kind in CONTAINER_KINDS

    def host_python(self, sf_python: str) -> str:
        """The interpreter that runs the supervisor on the batch host (stdlib only there). A
        container's python lives inside the image, so there the batch step runs `sf_python`,
        the interpreter sf itself runs on (the cluster-wide install `module load sf` gives
        every node): a bare `python3` of the host has no sf, and would find one only in the
        submit directory."""
        if self.kind == "venv":
            return str(Path(self.path) / "bin" / "python")
        return sf_python if self.in_container else self.python

    def runtime_python(self) -> str:
        """The interpreter inside the runtime (ray, verl)."""
        if self.kind == "venv":
            return str(Path(self.path) / "bin" / "python")
        return self.python

    # -- how commands run in the job (used by the supervisor) --------------------------
    def srun_flags(self) -> list[str]:
        """Extra srun flags for a step that runs inside the runtime."""
        if self.kind == "pyxis":
            flags = [f"--container-image={self.image}"]
            if self.mounts:
                flags.append("--container-mounts=" + ",".join(self.mounts))
            return flags
        if self.kind == "oci":
            return [f"--container={self.image}"]
        return []

    def wrap(self, argv: list[str]) -> list[str]:
        """argv as run inside an srun step of this runtime."""
        if self.kind == "apptainer":
            prefix = ["apptainer", "exec", "--nv"]
            if self.mounts:
                prefix += ["--bind", ",".join(self.mounts)]
            return [*prefix, self.image, *argv]
        return list(argv)

    def local_argv(self, argv: list[str]) -> list[str] | None:
        """argv as run directly by the supervisor on the batch host, or None when the
        runtime can only be entered through an srun step (pyxis, oci)."""
        if self.kind in ("pyxis", "oci"):
            return None
        return self.wrap(argv)

    def to_dict(self) -> dict:
        return {
            "framework": self.framework, "version": self.version, "kind": self.kind,
            "path": self.path, "modules": list(self.modules), "image": self.image,
            "mounts": list(self.mounts), "python": self.python, "source": self.source,
            "env": [list(kv) for kv in self.env],
            "overrides": {name: list(lines) for name, lines in self.overrides},
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Runtime":
        data = dict(data)
        data["modules"] = tuple(data.get("modules") or ())
        data["mounts"] = tuple(data.get("mounts") or ())
        data["env"] = tuple(tuple(kv) for kv in data.get("env") or ())
        data["overrides"] = tuple((name, tuple(lines)) for name, lines in (data.get("overrides") or {}).items())
        return cls(**data)
