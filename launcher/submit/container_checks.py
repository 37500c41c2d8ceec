"""`sf doctor` for container runtimes: is what the runtime's kind needs there?

What each kind checks is the kind's own (launcher/runtime/<kind>.py, `node_checks`): pyxis
its plugin and enroot, apptainer its image and binary, oci its bundle, oci.conf and a real
container step. This module lends them the cluster (`NodeProbe`): `srun --help`, Slurm's
config, and one `srun -N1 -n1` on the first series' partition per node probe, all through
launcher/slurm.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from launcher import slurm
from launcher.errors import SlurmError
from launcher.runtime import kind_named
from launcher.runtime.oci import bundle_problem  # noqa: F401  (where callers of sf doctor's checks found it)


class Finding(NamedTuple):
    """One line of `sf doctor` (doctor.Check takes it as it is)."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


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


def oci_conf_path() -> Path | None:
    """oci.conf beside the slurm.conf Slurm reads (SLURM_CONF, else scontrol's answer)."""
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        try:
            conf = slurm.show_config().get("SLURM_CONF")
        except SlurmError:
            return None
    return Path(conf).parent / "oci.conf" if conf else None


class SiteProbe:
    """The cluster as a kind's node_checks see it (launcher.runtime.base.NodeProbe)."""

    def __init__(self, site, timeout: float):
        self.site, self.timeout = site, timeout

    def on_node(self, argv: list[str]) -> tuple[str | None, str | None]:
        return _on_node(self.site, argv, self.timeout)

    def srun_has_option(self, option: str) -> bool | None:
        return srun_has_option(option, self.timeout)

    def oci_conf_path(self) -> Path | None:
        return oci_conf_path()


def check(name, rt, version: str, site, timeout: float = 30) -> list[Finding]:
    """The checks of a container runtime (kind pyxis, apptainer, oci): its kind's node checks."""
    kind = kind_named(rt.kind)
    probe = SiteProbe(site, max(timeout, kind.doctor_min_timeout))
    return [Finding(*found) for found in kind.node_checks(rt, name, version, probe)]
