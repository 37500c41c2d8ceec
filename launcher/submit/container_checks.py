"""`sf doctor` for container runtimes: is what the runtime's kind needs there?

  pyxis      the pyxis SPANK plugin is loaded: `srun --help` offers --container-image (srun
             reads the same plugstack.conf as the nodes), and enroot is on a compute node
  apptainer  the image exists, and `apptainer` (or `singularity`) is on a compute node
  oci        the bundle is complete (config.json, rootfs/ a folder, the python inside, verl
             at the published version in its dist-info), Slurm has an oci.conf beside
             slurm.conf (without one, --container is ignored and the step runs on the host,
             silently), and a real container step on a node answers with the bundle's verl

The node probes are one `srun -N1 -n1` each on the first series' partition.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import NamedTuple

from launcher import slurm
from launcher.errors import SlurmError

PROBE = "import importlib.metadata as m; print(m.version('verl'))"


class Finding(NamedTuple):
    """One line of `sf doctor` (doctor.Check takes it as it is)."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _check(name, status, detail, fix="") -> Finding:
    return Finding(name, status, detail, fix)


def _partition(site) -> str | None:
    series = getattr(site, "series", {}) or {}
    default = series.get(getattr(site, "default_series", None)) or next(iter(series.values()), None)
    return getattr(default, "partition", None)


def _on_node(site, argv: list[str], timeout: float) -> tuple[str | None, str | None]:
    """(stdout, None) of one task on a node of the site's first partition, or (None, why not)."""
    partition = _partition(site)
    if not partition:
        return None, "the site has no series (no partition to run a probe on)"
    try:
        return slurm.run_on_a_node(partition, argv, timeout=timeout), None
    except SlurmError as exc:
        return None, str(exc)


def srun_has_option(option: str, timeout: float = 30) -> bool | None:
    """Whether `srun --help` lists `option` (a SPANK plugin's), None when srun does not answer."""
    text = slurm.srun_help(timeout)
    return None if text is None else option in text


def check_pyxis(name, rt, site, timeout: float = 30) -> list:
    out = []
    if rt.image.startswith("/") and not Path(rt.image).exists():
        out.append(_check(name, "fail", f"image {rt.image} does not exist", "fix the image path in the registry"))
    has = srun_has_option("--container-image", timeout)
    if has is None:
        out.append(_check(f"pyxis {name}", "warn", "srun --help did not answer: the pyxis plugin is not checked"))
    elif not has:
        out.append(_check(f"pyxis {name}", "fail",
                          "srun has no --container-image: the pyxis SPANK plugin is not loaded, so this "
                          "runtime's steps cannot start",
                          "install pyxis and enroot on every node and name pyxis in plugstack.conf "
                          "(https://github.com/NVIDIA/pyxis), or publish a venv/oci runtime instead"))
    else:
        found, why = _on_node(site, ["sh", "-c", "command -v enroot || true"], timeout)
        if found is None:
            out.append(_check(f"pyxis {name}", "warn", f"pyxis is loaded; enroot on a node not checked: {why}"))
        elif not found.strip():
            out.append(_check(f"pyxis {name}", "fail", "pyxis is loaded but a compute node has no enroot",
                              "install enroot on every compute node"))
        else:
            out.append(_check(name, "ok", f"pyxis loaded (srun --container-image), enroot at {found.strip()} "
                                          f"on a node; image {rt.image}"))
    return out


def check_apptainer(name, rt, site, timeout: float = 30) -> list:
    if not Path(rt.image).is_file():
        return [_check(name, "fail", f"image {rt.image} does not exist", "fix the image path in the registry")]
    found, why = _on_node(site, ["sh", "-c", "command -v apptainer || command -v singularity || true"], timeout)
    if found is None:
        return [_check(name, "warn", f"apptainer image {rt.image} present; apptainer on a node not checked: {why}")]
    if not found.strip():
        return [_check(name, "fail", f"a compute node has neither apptainer nor singularity on PATH: "
                                     f"this runtime's commands (apptainer exec ... {rt.image}) cannot start",
                       "install apptainer on every compute node, or publish a venv/oci runtime instead")]
    return [_check(name, "ok", f"apptainer image {rt.image} present; {found.strip()} on a node")]


def oci_conf_path() -> Path | None:
    """oci.conf beside the slurm.conf Slurm reads (SLURM_CONF, else scontrol's answer)."""
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        try:
            conf = slurm.show_config().get("SLURM_CONF")
        except SlurmError:
            return None
    return Path(conf).parent / "oci.conf" if conf else None


def bundle_problem(bundle: str, python: str, version: str) -> str | None:
    """Why `bundle` cannot serve verl `version` through `python`, or None."""
    try:
        json.loads((Path(bundle) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"{bundle}/config.json: {exc.__class__.__name__}: {exc}"
    rootfs = Path(bundle) / "rootfs"
    if not rootfs.is_dir() or rootfs.is_symlink():
        return f"{rootfs} must be a folder (runc refuses a symlink)"
    if not os.path.lexists(f"{rootfs}{python}"):
        return f"{python} is not in {rootfs}"
    prefix = os.path.dirname(os.path.dirname(python))
    found = [os.path.basename(p)[len("verl-"):-len(".dist-info")]
             for p in glob.glob(f"{rootfs}{prefix}/lib/python3*/site-packages/verl-*.dist-info")]
    if found != [version]:
        return f"the bundle has verl {', '.join(found) or 'nowhere'} under {prefix}, not {version}"
    return None


def check_oci(name, rt, version: str, site, timeout: float = 60) -> list:
    problem = bundle_problem(rt.image, rt.python, version)
    if problem:
        return [_check(name, "fail", problem, "rebuild it (scripts/build-container) or fix the registry entry")]
    conf = oci_conf_path()
    if conf is not None and not conf.is_file():
        return [_check(f"oci {name}", "fail", f"Slurm has no {conf}: srun --container is ignored and every step "
                                              "would run on the host, silently",
                       "write oci.conf beside slurm.conf (RunTimeRun with runc; docs/admins.md: containers)")]
    out, why = _on_node(site, [f"--container={rt.image}", rt.python, "-c", PROBE], timeout)
    if out is None:
        return [_check(name, "fail", f"a container step on a node failed: {why}",
                       "check oci.conf, runc on the nodes, and the bundle's path on every node")]
    found = (out.strip().splitlines() or ["?"])[-1]
    if found != version:
        return [_check(name, "fail", f"the container answers verl {found}, published as {version}",
                       "fix the registry entry's version")]
    return [_check(name, "ok", f"oci bundle {rt.image}: a container step on a node has verl {found} "
                               f"({rt.python}); oci.conf {conf or '?'}")]


def check(name, rt, version: str, site, timeout: float = 30) -> list:
    """The checks of a container runtime (kind pyxis, apptainer, oci)."""
    if rt.kind == "pyxis":
        return check_pyxis(name, rt, site, timeout)
    if rt.kind == "apptainer":
        return check_apptainer(name, rt, site, timeout)
    return check_oci(name, rt, version, site, max(timeout, 60))
