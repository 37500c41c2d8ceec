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

Resolution reads one small file; everything else is pure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import SpecError

KINDS = ("venv", "module", "pyxis", "apptainer", "oci")
CONTAINER_KINDS = ("pyxis", "apptainer", "oci")
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_./:@+=,%#-]+$")  # enroot refs use #


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


def runtime_from_entry(framework: str, version: str, entry: dict, source: str) -> Runtime:
    if not isinstance(entry, dict):
        raise SpecError("runtime", f"{framework} {version} in {source} must be a mapping with `kind`")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise SpecError("runtime", f"{framework} {version} in {source} has kind {kind!r}; "
                        f"use one of {', '.join(KINDS)}")
    mounts = tuple(str(m) for m in (entry.get("mounts") or entry.get("binds") or ()))
    for m in mounts:
        _check_token(m, "mounts", source)
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
