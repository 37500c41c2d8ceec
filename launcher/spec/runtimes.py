"""Which verl runtime a site publishes for a version: the registry file (`$FORGE_RUNTIME_REGISTRY_FILE`,
else the site's `runtime_registry`) or `$FORGE_IMAGE_VERL`, read on the login side into the
runtime's model (launcher/runtime.py). Resolution reads one small file; everything else is pure.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from launcher.errors import SpecError
from launcher.runtime import KINDS, Runtime

_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_./:@+=,%#-]+$")  # enroot refs use #


def _publish_hint(framework: str, version: str, registry: str | None) -> str:
    where = registry or "the file named by the site's runtime_registry"
    return (
        f"ask your site admin to publish it: add `{framework}: {{\"{version}\": {{kind: venv, path: ...}}}}` "
        f"(or kind module/pyxis/apptainer/oci) to {where}, or set FORGE_IMAGE_VERL to a venv or image "
        f"that has {framework} {version}"
    )


def _check_token(value: str, what: str, src: str) -> str:
    if not isinstance(value, str) or not value or not _SAFE_TOKEN.fullmatch(value):
        raise SpecError(f"runtime.{what}", f"{value!r} in {src} must be a plain path or name "
                        "(letters, digits, ./:@+=,%_-; no spaces); fix the runtime registry")
    return value


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


# What each kind of entry reads besides kind, env and overrides: a key its kind ignores is a
# mistake that would pass unseen (binds on a pyxis entry, python on a venv's: its python is
# path/bin/python), as the schema's unknown keys are refused.
READS = {"venv": ("path",), "module": ("modules", "python"), "pyxis": ("image", "mounts", "python"),
         "apptainer": ("image", "binds", "python"), "oci": ("bundle", "python", "mounts")}


def runtime_from_entry(framework: str, version: str, entry: dict, source: str) -> Runtime:
    if not isinstance(entry, dict):
        raise SpecError("runtime", f"{framework} {version} in {source} must be a mapping with `kind`")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise SpecError("runtime", f"{framework} {version} in {source} has kind {kind!r}; "
                        f"use one of {', '.join(KINDS)}")
    ignored = [key for key in entry if key not in (*READS[kind], "kind", "env", "overrides")]
    if ignored:
        raise SpecError(f"runtime.{ignored[0]}", f"{framework} {version} in {source}: a {kind} runtime does not read "
                        f"{', '.join(map(str, ignored))} (it reads {', '.join(READS[kind])}); remove it, or fix "
                        "the entry's kind; fix the runtime registry")
    mounts = tuple(str(m) for m in (entry.get("mounts") or entry.get("binds") or ()))
    for m in mounts:
        _check_token(m, "mounts", source)
        if "," in m:  # pyxis' --container-mounts and apptainer's --bind split their list at commas
            raise SpecError("runtime.mounts", f"{m!r} in {source} holds a comma, so the container would get two "
                            "mounts instead of this one; give each mount as its own list item (a path with a comma "
                            "cannot be mounted); fix the runtime registry")
    env = tuple((str(k), str(v)) for k, v in (entry.get("env") or {}).items())
    common = dict(framework=framework, version=version, kind=kind, source=source, env=env,
                  overrides=_default_overrides(framework, version, entry.get("overrides"), source))
    if kind == "venv":
        path = _check_token(str(entry.get("path") or ""), "path", source)
        return Runtime(path=path, python=str(Path(path) / "bin" / "python"), **common)
    if kind == "module":
        modules = tuple(str(m) for m in (entry.get("modules") or ()))
        if not modules:
            raise SpecError("runtime", f"{framework} {version} in {source}: kind module needs `modules: [...]`")
        for m in modules:
            _check_token(m, "modules", source)
        return Runtime(modules=modules, python=_check_token(str(entry.get("python", "python3")), "python", source),
                       **common)
    if kind == "oci":
        return _oci_runtime(entry, source, common)
    image = _check_token(str(entry.get("image") or ""), "image", source)
    return Runtime(image=image, mounts=mounts,
                   python=_check_token(str(entry.get("python", "python3")), "python", source), **common)


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


def _oci_runtime(entry: dict, source: str, common: dict) -> Runtime:
    """kind oci: `bundle` (an absolute folder with config.json and rootfs/, the same on every
    node) and `python` (the interpreter inside it, absolute: slurmstepd looks argv[0] up on
    the host's PATH otherwise)."""
    bundle = _check_token(str(entry.get("bundle") or entry.get("image") or ""), "bundle", source)
    python = _check_token(str(entry.get("python") or ""), "python", source)
    for what, value in (("bundle", bundle), ("python", python)):
        if not value.startswith("/"):
            raise SpecError(f"runtime.{what}", f"{value!r} in {source}: kind oci needs an absolute {what} "
                            "(the bundle folder every node sees; the python inside the container)")
    mounts = bundle_mounts(bundle)
    if mounts is None:
        mounts = tuple(str(m) for m in (entry.get("mounts") or ()))  # as the registry says
    return Runtime(image=bundle, mounts=tuple(mounts), python=python, **common)


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
