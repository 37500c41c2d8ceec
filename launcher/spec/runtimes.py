"""Which verl runtime a site publishes for a version: the registry file (`$FORGE_RUNTIME_REGISTRY_FILE`,
else the site's `runtime_registry`) or `$FORGE_IMAGE_VERL`, read on the login side into the
runtime's model (launcher/runtime/). Resolution reads one small file; everything else is pure.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from launcher.errors import SpecError
from launcher.runtime import KINDS, RegistryError, Runtime, kind_named
from launcher.runtime.base import check_token


def _publish_hint(framework: str, version: str, registry: str | None) -> str:
    where = registry or "the file named by the site's runtime_registry"
    return (
        f"ask your site admin to publish it: add `{framework}: {{\"{version}\": {{kind: venv, path: ...}}}}` "
        f"(or kind module/pyxis/apptainer/oci) to {where}, or set FORGE_IMAGE_VERL to a venv or image "
        f"that has {framework} {version}"
    )


_OVERRIDE = re.compile(r"^\+?[A-Za-z_][A-Za-z0-9_.]*=\S+$")


def _default_overrides(framework: str, version: str, table, source: str) -> tuple:
    """`overrides: {ppo_trainer: [key=value, ...], sft_trainer_engine: [...]}` of an entry."""
    if table is None:
        return ()
    where = f"runtime.{framework}.{version}.overrides in {source}"
    if not isinstance(table, dict):
        raise SpecError("runtime.overrides", f"{where} must map a verl config name (ppo_trainer, "
                        "sft_trainer_engine) to a list of key=value overrides; fix the runtime registry")
    out = []
    for name, lines in table.items():
        if not isinstance(lines, list) or not all(isinstance(x, str) and _OVERRIDE.fullmatch(x) for x in lines):
            raise SpecError("runtime.overrides", f"{where}: {name} must be a list of key=value overrides without "
                            f"spaces (e.g. actor_rollout_ref.model.use_remove_padding=False), got {lines!r}; "
                            "fix the runtime registry")
        out.append((str(name), tuple(lines)))
    return tuple(out)


def runtime_from_entry(framework: str, version: str, entry: dict, source: str) -> Runtime:
    """The Runtime a registry entry publishes; SpecError naming the entry's bad key."""
    try:
        return _from_entry(framework, version, entry, source)
    except RegistryError as exc:  # a kind's own check (launcher/runtime/), stdlib-only there
        raise SpecError(exc.field, exc.message) from None


def _from_entry(framework: str, version: str, entry: dict, source: str) -> Runtime:
    if not isinstance(entry, dict):
        raise SpecError("runtime", f"{framework} {version} in {source} must be a mapping with `kind`")
    kind = kind_named(entry.get("kind"))
    if kind is None:
        raise SpecError("runtime", f"{framework} {version} in {source} has kind {entry.get('kind')!r}; "
                        f"use one of {', '.join(KINDS)}")
    # A key its kind ignores is a mistake that would pass unseen (binds on a pyxis entry, python
    # on a venv's: its python is path/bin/python), as the schema's unknown keys are refused.
    ignored = [key for key in entry if key not in (*kind.reads, "kind", "env", "overrides")]
    if ignored:
        raise SpecError(f"runtime.{ignored[0]}", f"{framework} {version} in {source}: a {kind.name} runtime does "
                        f"not read {', '.join(map(str, ignored))} (it reads {', '.join(kind.reads)}); remove it, "
                        "or fix the entry's kind; fix the runtime registry")
    mounts = tuple(str(m) for m in (entry.get("mounts") or entry.get("binds") or ()))
    for m in mounts:
        check_token(m, "mounts", source)
        if "," in m:  # pyxis' --container-mounts and apptainer's --bind split their list at commas
            raise SpecError("runtime.mounts", f"{m!r} in {source} holds a comma, so the container would get two "
                            "mounts instead of this one; give each mount as its own list item (a path with a comma "
                            "cannot be mounted); fix the runtime registry")
    env = tuple((str(k), str(v)) for k, v in (entry.get("env") or {}).items())
    common = dict(framework=framework, version=version, kind=kind.name, source=source, env=env,
                  overrides=_default_overrides(framework, version, entry.get("overrides"), source))
    return Runtime(**common, **kind.parse(entry, source, f"{framework} {version}", mounts))


def runtime_from_image(framework: str, version: str, value: str) -> Runtime:
    """FORGE_IMAGE_VERL: a venv directory, an apptainer .sif, or a pyxis image."""
    source = "$FORGE_IMAGE_VERL"
    if os.path.isdir(value) and os.path.exists(os.path.join(value, "bin", "activate")):
        return runtime_from_entry(framework, version, {"kind": "venv", "path": value}, source)
    if value.endswith(".sif"):
        return runtime_from_entry(framework, version, {"kind": "apptainer", "image": value}, source)
    return runtime_from_entry(framework, version, {"kind": "pyxis", "image": value}, source)


def registry_path(site) -> str | None:
    return os.environ.get("FORGE_RUNTIME_REGISTRY_FILE") or getattr(site, "runtime_registry", None)


def resolve_runtime(framework: str, version: str, site, environ: dict | None = None) -> Runtime:
    """The runtime for `framework` `version`; SpecError naming the missing runtime otherwise."""
    env = os.environ if environ is None else environ
    image = env.get(f"FORGE_IMAGE_{framework.upper()}")
    if image:
        return runtime_from_image(framework, version, image)
    registry = env.get("FORGE_RUNTIME_REGISTRY_FILE") or getattr(site, "runtime_registry", None)
    missing = f"no runtime for {framework} {version} on site {getattr(site, 'name', '?')}"
    if not registry:
        raise SpecError("runtime", f"{missing} (the site names no runtime registry); "
                        + _publish_hint(framework, version, None))
    # login side only (YAML, the registry's JSON Schema): the job side (Runtime.from_dict) is stdlib-only
    from launcher.spec.contracts import load_registry  # noqa: PLC0415

    path = Path(registry)
    try:
        data = load_registry(path)  # checked against configs/schema/runtimes.schema.json, errors with lines
    except FileNotFoundError:
        raise SpecError("runtime", f"{missing}: the runtime registry {path} does not exist; "
                        + _publish_hint(framework, version, str(path))) from None
    table = (data.get(framework) or {}) if isinstance(data, dict) else {}
    entry = table.get(version) if isinstance(table, dict) else None
    if entry is None:
        known = ", ".join(sorted(str(v) for v in table)) if isinstance(table, dict) and table else "none"
        raise SpecError("runtime", f"{missing} (published in {path}: {known}); "
                        + _publish_hint(framework, version, str(path)))
    return runtime_from_entry(framework, version, entry, str(path))
