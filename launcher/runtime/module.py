"""kind module: environment modules (Lmod, Tcl); `module load <modules...>` in the batch
script's module_loads block, and `python3` (or the entry's python) from the modules.

    "0.9.0": {kind: module, modules: [cuda/12.4, verl/0.9.0]}
"""

from __future__ import annotations

import shlex

from launcher.runtime.base import RegistryError, RuntimeKind, check_token, entry_python


class Module(RuntimeKind):
    name = "module"
    reads = ("modules", "python")

    def parse(self, entry: dict, source: str, label: str, mounts: tuple[str, ...]) -> dict:
        modules = tuple(str(m) for m in (entry.get("modules") or ()))
        if not modules:
            raise RegistryError("runtime", f"{label} in {source}: kind module needs `modules: [...]`")
        for m in modules:
            check_token(m, "modules", source)
        return {"modules": modules, "python": entry_python(entry, source)}

    def script_modules(self, rt) -> tuple[str, ...]:
        return tuple(rt.modules)

    def login_argv(self, rt, args: list[str]) -> list[str]:
        # every word quoted: a registry token may hold `#` (enroot refs), a comment to an unquoted shell
        return ["bash", "-lc", f"module load {' '.join(map(shlex.quote, rt.modules))} && "
                f"{' '.join(map(shlex.quote, [rt.python, *args]))}"]

    def where(self, rt) -> str:
        return " ".join(rt.modules)
