"""kind venv: a Python virtual environment every node sees; `source <path>/bin/activate`,
and its bin/python runs everything (the supervisor on the batch host included).

    "0.9.1": {kind: venv, path: /opt/sf/runtimes/verl-0.9.1}
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from launcher.runtime.base import RuntimeKind, check_token


class Venv(RuntimeKind):
    name = "venv"
    reads = ("path",)

    def parse(self, entry: dict, source: str, label: str, mounts: tuple[str, ...]) -> dict:
        path = check_token(str(entry.get("path") or ""), "path", source)
        return {"path": path, "python": str(Path(path) / "bin" / "python")}

    def source_lines(self, rt) -> list[str]:
        return [f"source {shlex.quote(str(Path(rt.path) / 'bin' / 'activate'))}"]

    def runtime_python(self, rt) -> str:
        return str(Path(rt.path) / "bin" / "python")

    def login_argv(self, rt, args: list[str]) -> list[str]:
        return [self.runtime_python(rt), *args]

    def login_env(self, rt, env: dict) -> dict:
        return {**env, "PATH": f"{Path(rt.path) / 'bin'}{os.pathsep}{env.get('PATH', '')}"}  # as bin/activate does

    def login_problem(self, rt) -> tuple[str, str] | None:
        python = Path(rt.path) / "bin" / "python"
        if os.access(python, os.X_OK):
            return None
        return f"{python} is missing or not executable", f"build the venv at {rt.path} or fix its path in the registry"

    def where(self, rt) -> str:
        return rt.path
