"""Every runtime kind sf knows, by the name a registry entry's `kind` gives. A new kind is
one module beside this one (a RuntimeKind subclass, launcher/runtime/base.py) and one line
here; its keys also go into configs/schema/runtimes.schema.json (a unit test compares them).
"""

from __future__ import annotations

from launcher.runtime.apptainer import Apptainer
from launcher.runtime.base import RuntimeKind
from launcher.runtime.module import Module
from launcher.runtime.oci import Oci
from launcher.runtime.pyxis import Pyxis
from launcher.runtime.venv import Venv

REGISTRY: dict[str, RuntimeKind] = {kind.name: kind for kind in (Venv(), Module(), Pyxis(), Apptainer(), Oci())}

KINDS = tuple(REGISTRY)
CONTAINER_KINDS = tuple(name for name, kind in REGISTRY.items() if kind.in_container)


def kind_named(name) -> RuntimeKind | None:
    """The kind a registry entry or a run record names; None for a name sf does not know."""
    return REGISTRY.get(name) if isinstance(name, str) else None
