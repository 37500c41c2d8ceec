"""The runtime's model: one published runtime (a registry entry, read), as plan.json and the
run record carry it. What depends on how a job enters it is its kind's answer
(`kind_object`, launcher/runtime/registry.py); the methods here ask it."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.runtime.base import RuntimeKind
from launcher.runtime.registry import REGISTRY


@dataclass(frozen=True)
class Runtime:
    framework: str  # "verl"
    version: str  # "0.9.1"
    kind: str  # a name in launcher.runtime.KINDS: venv | module | pyxis | apptainer | oci
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

    @property
    def kind_object(self) -> RuntimeKind:
        """The kind's behaviour (a kind sf does not know behaves as a host runtime, whose
        defaults run the runtime's python directly; the registry refuses one on the way in)."""
        return REGISTRY.get(self.kind) or RuntimeKind()

    # -- what the batch script does --------------------------------------------------
    def activate_lines(self) -> list[str]:
        """Shell lines (already quoted) that make the runtime usable in a shell on the host."""
        return self.kind_object.activate_lines(self)

    def script_modules(self) -> tuple[str, ...]:
        """Modules the batch script's module_loads block loads for the runtime."""
        return self.kind_object.script_modules(self)

    def source_lines(self) -> list[str]:
        """Shell lines (quoted) the batch script runs after its module_loads block."""
        return self.kind_object.source_lines(self)

    @property
    def in_container(self) -> bool:
        return self.kind_object.in_container

    def host_python(self, sf_python: str) -> str:
        """The interpreter that runs the supervisor on the batch host (stdlib only there). A
        container's python lives inside the image, so there the batch step runs `sf_python`,
        the interpreter sf itself runs on (the cluster-wide install `module load sf` gives
        every node): a bare `python3` of the host has no sf, and would find one only in the
        submit directory."""
        return self.kind_object.host_python(self, sf_python)

    def runtime_python(self) -> str:
        """The interpreter inside the runtime (ray, verl)."""
        return self.kind_object.runtime_python(self)

    # -- how commands run in the job (used by the supervisor) --------------------------
    def srun_flags(self) -> list[str]:
        """Extra srun flags for a step that runs inside the runtime."""
        return self.kind_object.srun_flags(self)

    def wrap(self, argv: list[str]) -> list[str]:
        """argv as run inside an srun step of this runtime."""
        return self.kind_object.wrap(self, argv)

    def local_argv(self, argv: list[str]) -> list[str] | None:
        """argv as run directly by the supervisor on the batch host, or None when the
        runtime can only be entered through an srun step (pyxis, oci)."""
        return self.kind_object.local_argv(self, argv)

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
