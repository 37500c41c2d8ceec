"""`sf doctor`: check the site file against the live cluster.

Each check says ok / warn / fail and, when not ok, what to fix. Slurm is asked through
launcher.slurm only (scontrol show partition/node, sacct, sbatch --test-only); the rest
is the local filesystem (runtimes, dataset roots, runs_dir) as seen from this login node.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher import ownership, sbatch_values, slurm, slurm_versions
from launcher import runs as runs_mod
from launcher.errors import SlurmError, SpecError, SpecErrors
from launcher.runtime import kind_named
from launcher.spec.contracts import load_registry
from launcher.spec.runtimes import registry_path, runtime_from_entry
from launcher.spec.site import load_site
from launcher.submit import container_checks

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def all_ok(checks: list[Check]) -> bool:
    return not any(c.status == FAIL for c in checks)


def format_checks(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c.status.upper():4}  {c.name}: {c.detail}")
        if c.fix and c.status != OK:
            lines.append(f"      fix: {c.fix}")
    fails = sum(c.status == FAIL for c in checks)
    warns = sum(c.status == WARN for c in checks)
    lines.append(f"{len(checks)} checks: {fails} to fix, {warns} warnings" if fails or warns
                 else f"{len(checks)} checks: all good")
    return "\n".join(lines)


# --- parsing Slurm's answers (pure) ---------------------------------------------------

def gres_gpus(gres: str, name: str = "gpu") -> int:
    """GPUs in a node's Gres string: `gpu:4`, `gpu:h100:8(S:0-1)`, `gpu:a:2,gpu:b:2` -> count."""
    total = 0
    for item in (gres or "").split(","):
        item = re.sub(r"\(.*?\)", "", item.strip())
        parts = item.split(":")
        if parts[0] != name or len(parts) < 2:
            continue
        count = parts[-1]
        if count.isdigit():
            total += int(count)
    return total


def mem_mb(text: str | None) -> int | None:
    """`4G` / `4096M` / `4096` (MB) / `1T` -> MB."""
    if not text:
        return None
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", str(text).strip().upper())
    if not match:
        return None
    n, unit = int(match.group(1)), match.group(2) or "M"
    return {"K": n // 1024, "M": n, "G": n * 1024, "T": n * 1024 * 1024}[unit]


def check_series(site, partitions: list[dict], nodes: list[dict]) -> list[Check]:
    """Partitions exist and are up; each series' nodes have its GPUs, CPUs, memory, feature."""
    checks = []
    by_name = {p.get("PartitionName"): p for p in partitions}
    for series in site.series.values():
        what = f"series {series.name}"
        part = by_name.get(series.partition)
        if part is None:
            checks.append(Check(what, FAIL, f"partition {series.partition!r} does not exist "
                                f"(partitions: {', '.join(sorted(p for p in by_name if p)) or 'none'})",
                                f"set series.{series.name}.partition in {site.path} to one of them"))
            continue
        if part.get("State", "UP") != "UP":
            checks.append(Check(what, FAIL, f"partition {series.partition} is {part.get('State')}",
                                f"ask the Slurm admin: scontrol update PartitionName={series.partition} State=UP"))
            continue
        members = [n for n in nodes if series.partition in (n.get("Partitions") or "").split(",")]
        if not members:
            checks.append(Check(what, FAIL, f"partition {series.partition} has no nodes",
                                "fix slurm.conf or the series"))
            continue
        problems: dict[str, list[str]] = {}
        want_mem = mem_mb(series.mem_per_node)
        for node in members:
            name = node.get("NodeName", "?")
            gpus = gres_gpus(node.get("Gres", ""), series.gres_name)
            if gpus != series.gpus_per_node:
                problem = f"has {gpus} {series.gres_name} GRES, the series says {series.gpus_per_node}"
                problems.setdefault(problem, []).append(name)
            cpus = int(node.get("CPUTot") or 0)
            if cpus and cpus < series.cpus_per_node:
                problems.setdefault(f"has {cpus} CPUs, the series asks {series.cpus_per_node}", []).append(name)
            real = int(node.get("RealMemory") or 0)
            if want_mem and real and real < want_mem:
                problems.setdefault(f"has {real} MB memory, the series asks {series.mem_per_node}", []).append(name)
            if series.constraint:
                features = set(re.split(r"[,&|]", node.get("AvailableFeatures") or ""))
                wanted = set(re.split(r"[,&|]", series.constraint))
                if not wanted <= features:
                    problems.setdefault(f"lacks feature {series.constraint}", []).append(name)
            state = (node.get("State") or "").upper()
            if any(s in state for s in ("DOWN", "DRAIN", "FAIL", "INVAL")):
                problems.setdefault(f"is {state}", []).append(name)
        if problems:
            detail = "; ".join(f"{','.join(names)} {msg}" for msg, names in problems.items())
            down_only = all(msg.startswith("is ") for msg in problems)
            checks.append(Check(what, WARN if down_only else FAIL,
                                f"partition {series.partition}: {detail}",
                                "ask the Slurm admin about those nodes" if down_only else
                                f"make series.{series.name} (gpus_per_node, cpus_per_node, mem_per_node, "
                                f"gres_name, constraint) in {site.path} match the nodes, or fix gres.conf/slurm.conf"))
        else:
            checks.append(Check(what, OK, f"partition {series.partition}: {len(members)} nodes with "
                                f"{series.gpus_per_node} {series.gres_name} each"))
    if site.default_series and site.default_series not in site.series:
        checks.append(Check("default_series", FAIL, f"{site.default_series!r} is not a series of the site",
                            f"set default_series in {site.path} to one of {', '.join(site.series)}"))
    return checks


def _test_script(site, series) -> str:
    """A one-node batch script for `sbatch --test-only`. Its values are checked like the
    training job's header (launcher.sbatch_values): a bad site value is a SpecError, not a line."""
    where = f"site.series.{series.name}"
    sbatch_values.account(series.partition, f"{where}.partition")
    sbatch_values.gres_name(series.gres_name, f"{where}.gres_name")
    sbatch_values.whole(series.cpus_per_node, f"{where}.cpus_per_node", minimum=1)
    sbatch_values.whole(series.gpus_per_node, f"{where}.gpus_per_node", minimum=0)
    if series.mem_per_node:
        sbatch_values.mem(series.mem_per_node, f"{where}.mem_per_node")
    if series.constraint:
        sbatch_values.constraint(series.constraint, f"{where}.constraint")
    for field, value in (("site.slurm.account", site.account), ("site.slurm.qos", site.qos)):
        if value:
            sbatch_values.account(value, field)
    lines = ["#!/bin/bash", f"#SBATCH --partition={series.partition}", "#SBATCH --nodes=1",
             "#SBATCH --time=00:01:00", f"#SBATCH --cpus-per-task={series.cpus_per_node}"]
    if series.gpu_directive == "gpus-per-node":
        lines.append(f"#SBATCH --gpus-per-node={series.gpus_per_node}")
    else:
        lines.append(f"#SBATCH --gres={series.gres_name}:{series.gpus_per_node}")
    if series.constraint:
        lines.append(f"#SBATCH --constraint={series.constraint}")
    if series.mem_per_node:  # as sf's jobs ask it (without, Slurm's per-CPU default may exceed a node)
        lines.append(f"#SBATCH --mem={series.mem_per_node}")
    if site.account:
        lines.append(f"#SBATCH --account={site.account}")
    if site.qos:
        lines.append(f"#SBATCH --qos={site.qos}")
    return "\n".join(lines + ["true", ""])


def check_sbatch(site) -> list[Check]:
    """`sbatch --test-only` a whole node of every series, with the site's account and qos."""
    checks = []
    for series in site.series.values():
        try:
            script = _test_script(site, series)
        except SpecError as exc:
            checks.append(Check(f"sbatch {series.name}", FAIL, str(exc), f"fix {exc.field} in {site.path}"))
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as handle:
            handle.write(script)
        try:
            answer = slurm.sbatch_test_only(handle.name)
            checks.append(Check(f"sbatch {series.name}", OK, answer.splitlines()[-1] if answer else "accepted"))
        except SlurmError as exc:
            checks.append(Check(f"sbatch {series.name}", FAIL, str(exc),
                                "check the series' partition/GPUs and slurm.account/qos of the site against "
                                "sinfo and sacctmgr show assoc"))
        finally:
            os.unlink(handle.name)
    return checks


# What a node needs for Ray at scale: Ray's large-cluster guide asks nofile >= 65535 (a raylet
# holds a socket per worker and peer); Ray's 2000-node benchmark raised the ARP cache's
# gc_thresh3 to 8192 (an overflowing ARP table hangs the head).
NOFILE_MIN = 65535
# The limit is per process, and the one that needs most is the head's GCS: one connection from
# every raylet and every worker (at most a worker per CPU) of the job, two ways (it calls back),
# on top of what any Ray process opens by itself (logs, pipes, the object store: NOFILE_FLOOR).
# So a cluster of N nodes and C CPUs needs NOFILE_FLOOR + 2 (N + C), capped at Ray's 65535: the
# dev cluster (12 nodes, 192 CPUs) 4,504, well under its 20,000; 256 nodes of 224 CPUs, the cap.
NOFILE_FLOOR = 4096


def nofile_needed(nodes: int, cpus: int) -> int:
    """The hard nofile limit a job of the partitions' `nodes` nodes and `cpus` CPUs needs."""
    return min(NOFILE_MIN, NOFILE_FLOOR + 2 * (nodes + cpus))
ARP_GC_THRESH3_MIN = 8192
_LIMITS_PROBE = "ulimit -Sn; ulimit -Hn; cat /proc/sys/net/ipv4/neigh/default/gc_thresh3 2>/dev/null || echo -"


def node_limit_checks(series: str, text: str, needed: int = NOFILE_MIN) -> list[Check]:
    """The probe's three lines (soft nofile, hard nofile, gc_thresh3) as checks; `needed`: the
    hard nofile limit the cluster's size asks for (nofile_needed)."""
    lines = (text.split() + ["-", "-", "-"])[:3]
    soft, hard, arp = (int(v) if v.isdigit() else (float("inf") if v == "unlimited" else None) for v in lines)
    checks = []
    if hard is None:
        return [Check(f"node limits {series}", FAIL, f"could not read the limits: {text.strip()!r}", "")]
    if hard < needed:
        checks.append(Check(f"nofile {series}", WARN, f"hard limit {lines[1]} (soft {lines[0]}) < {needed}, what "
                            "Ray's processes of a job on these partitions may open",
                            "raise it in /etc/security/limits.conf or slurmd's LimitNOFILE; sf's node wrapper "
                            "raises the soft limit to the hard one, not past it"))
    else:
        checks.append(Check(f"nofile {series}", OK, f"hard {lines[1]} >= {needed} needed, soft {lines[0]} "
                            "(sf raises soft to hard)"))
    if arp is not None and arp < ARP_GC_THRESH3_MIN:
        checks.append(Check(f"arp cache {series}", WARN, f"net.ipv4.neigh.default.gc_thresh3 = {arp} < "
                            f"{ARP_GC_THRESH3_MIN}", "for jobs of hundreds of nodes raise gc_thresh1/2/3 (e.g. "
                            "2048/4096/8192, as Ray's 2000-node benchmark did)"))
    elif arp is not None:
        checks.append(Check(f"arp cache {series}", OK, f"gc_thresh3 = {arp}"))
    return checks


def check_node_limits(site) -> list[Check]:
    """One task on a node of every series' partition reads its nofile limits and ARP cache size."""
    checks, seen = [], set()
    needed = _nofile_needed_by(site)
    for series in site.series.values():
        if series.partition in seen:
            continue
        seen.add(series.partition)
        try:
            probe = slurm.run_on_a_node(series.partition, ["sh", "-c", _LIMITS_PROBE])
            checks += node_limit_checks(series.name, probe, needed)
        except SlurmError as exc:
            checks.append(Check(f"node limits {series.name}", WARN, f"could not run a task there: {exc}",
                                "is the partition up and a node free?"))
    return checks


def _nofile_needed_by(site) -> int:
    """nofile_needed for a job over every partition of the site's series (a hetjob spans them);
    Ray's 65535 when Slurm does not say their size."""
    partitions = {series.partition for series in site.series.values()}
    try:
        shown = [p for p in slurm.show_partitions() if p.get("PartitionName") in partitions]
        nodes = sum(int(p["TotalNodes"]) for p in shown)
        cpus = sum(int(p["TotalCPUs"]) for p in shown)
    except (SlurmError, KeyError, ValueError):
        return NOFILE_MIN
    return nofile_needed(nodes, cpus) if shown else NOFILE_MIN


def check_runtimes(site, timeout: float = 30) -> list[Check]:
    path = registry_path(site)
    if not path:
        return [Check("runtimes", FAIL, "the site names no runtime_registry",
                      f"set runtime_registry in {site.path} and publish runtimes with scripts/publish-runtime")]
    try:
        data = load_registry(Path(path), every=True)  # against configs/schema/runtimes.schema.json
    except FileNotFoundError:
        return [Check("runtimes", FAIL, f"registry {path} does not exist",
                      f"publish a runtime: scripts/publish-runtime --registry {path} VERSION venv PATH")]
    except (SpecError, SpecErrors) as exc:
        problems = exc.errors if isinstance(exc, SpecErrors) else [exc]
        return [Check("runtime registry", FAIL, str(e), f"fix {path} (`sf schema --registry`)") for e in problems]
    table = data.get("verl") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not table:
        return [Check("runtimes", FAIL, f"registry {path} publishes no verl runtime",
                      f"scripts/publish-runtime --registry {path} VERSION venv PATH")]
    checks = []
    for version, entry in table.items():
        name = f"runtime verl {version}"
        try:
            rt = runtime_from_entry("verl", str(version), entry, path)
        except Exception as exc:  # SpecError: a bad entry
            checks.append(Check(name, FAIL, str(exc), f"fix the entry in {path}"))
            continue
        if rt.in_container:  # pyxis, apptainer, oci: the plugin or binary, the image, a probe on a node
            checks += [Check(*found) for found in container_checks.check(name, rt, str(version), site, timeout)]
        else:
            checks.append(_probe_runtime(name, rt, str(version), timeout))
        checks += check_py_spy(name, rt, site.hang_timeout_s, timeout)
    return checks


def _probe_runtime(name, rt, version: str, timeout: float) -> Check:
    """A host runtime (venv, module) on this login node: its python answers verl's version.
    (Container kinds are checked on a node: launcher.submit.container_checks.)"""
    kind = kind_named(rt.kind)
    problem = kind.login_problem(rt)
    if problem:
        return Check(name, FAIL, *problem)
    argv = kind.login_argv(rt, ["-c", "import importlib.metadata as m; print(m.version('verl'))"])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, FAIL, f"probe failed ({exc.__class__.__name__})", "check the runtime by hand")
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        return Check(name, FAIL, f"verl does not import there: {err[-1] if err else proc.returncode}",
                     "install verl into the runtime or fix the registry entry")
    found = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "?"
    if found != version:
        return Check(name, FAIL, f"has verl {found}, published as {version}", "fix the registry entry's version")
    return Check(name, OK, f"{rt.kind} {kind.where(rt)} has verl {found}")


# launcher/injob/stacks.py run as a file (no import: it runs in the runtime's python, with
# the runtime's environment, and looks where a hang's stack dump looks)
STACKS_SCRIPT = Path(__file__).resolve().parent.parent / "injob" / "stacks.py"


def check_py_spy(name: str, rt, hang_limit_s: float, timeout: float = 30) -> list[Check]:
    """With a hang limit set, the watchdog's stacks need py-spy in the runtime: warn, naming
    the runtime, when the job's dump would not find it (venv and module runtimes; a
    container's is checked by the preflight, inside it)."""
    kind = kind_named(rt.kind)
    argv = kind.login_argv(rt, ["-I", str(STACKS_SCRIPT), "--find"]) if kind else None
    if not hang_limit_s or hang_limit_s <= 0 or argv is None:
        return []
    env = kind.login_env(rt, {**os.environ, **dict(rt.env)})
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check(f"py-spy {name}", WARN, f"could not look for py-spy there ({exc.__class__.__name__})", "")]
    where = (proc.stdout.strip().splitlines() or ["?"])[-1]
    if proc.returncode == 0:
        return [Check(f"py-spy {name}", OK, f"{where} (a hang's stacks: sf logs RUN --stacks)")]
    return [Check(f"py-spy {name}", WARN,
                  f"runtime {name} has no py-spy: a hang (limit {hang_limit_s:g} s) is still found, but its "
                  f"stacks would hold no Python frames; {where[:300]}",
                  "pip install py-spy into the runtime (or ray[default]), or set slurm.hang_timeout_s: 0")]


def check_paths(site) -> list[Check]:
    checks = []
    for root in site.dataset_roots:
        p = Path(root)
        if p.is_dir() and os.access(p, os.R_OK | os.X_OK):
            checks.append(Check(f"dataset root {root}", OK, "readable"))
        else:
            checks.append(Check(f"dataset root {root}", FAIL, "missing" if not p.exists() else "not readable",
                                f"create it or remove it from dataset_roots in {site.path}"))
    if not site.dataset_roots:
        checks.append(Check("dataset roots", WARN,
                            "the site lists none (platform datasets OWNER/NAME@VERSION will not resolve)",
                            f"add dataset_roots to {site.path}"))
    runs = Path(site.runs_dir)
    try:
        # a folder others may write without the sticky bit (or an ancestor of it) lets them
        # rename a run and put their own in its place: sf refuses to write there
        ownership.trusted_chain(runs)
    except ownership.UnsafePath as exc:
        checks.append(Check("runs_dir", FAIL, exc.message, f"or set runs_dir in {site.path} to a safe folder"))
        return checks + [port_range_check(site)]
    try:
        runs_mod.make_runs_root(runs, site.share_group)
        with tempfile.NamedTemporaryFile(dir=runs, prefix=".sf-doctor-"):
            pass
        shared = f"; checkpoints and metrics readable by group {site.share_group}" if site.share_group else \
            "; each run readable by its user alone"
        checks.append(Check("runs_dir", OK, f"{runs} writable, safe from other users{shared}"))
    except OSError as exc:
        checks.append(Check("runs_dir", FAIL, f"{runs} not writable ({exc.strerror or exc})",
                            f"set runs_dir in {site.path} to a folder of yours, or a shared one with mode 1777"))
    return checks + [port_range_check(site)]


def port_range_check(site) -> Check:
    lo, hi = (tuple(site.ray.port_range) + (0, 0))[:2]
    if not (1024 <= int(lo) < int(hi) <= 65535) or int(hi) - int(lo) < 100:
        return Check("ray.port_range", FAIL,
                     f"{list(site.ray.port_range)} is not a range of >= 100 ports in 1024-65535",
                     f"fix ray.port_range in {site.path}")
    return Check("ray.port_range", OK, f"{lo}-{hi}")


def check_site_values(site) -> list[Check]:
    """What the site file holds that only a submit reads (its time limit, scheduler defaults and
    batch script template): checked here, so an admin learns of a mistake before every user's
    submit fails on it."""
    from launcher.compile import scheduler_options  # noqa: PLC0415 - doctor only (start-up cost)
    from launcher.compile.slurm_time import time_seconds  # noqa: PLC0415 - as above

    checks = []
    slurm_section = (site.raw or {}).get("slurm") or {}
    for name, check in (
            ("slurm.time", lambda: time_seconds(site.time, "site slurm.time")),
            ("scheduler defaults", lambda: scheduler_options.checked(
                slurm_section, scheduler_options.site_origins()))):
        try:
            check()
            checks.append(Check(f"site {name}", OK, "as Slurm reads it" if name == "slurm.time" else "checked"))
        except SpecError as exc:
            checks.append(Check(exc.field, FAIL, exc.message, f"fix it in {site.path}"))
    if site.templates_dir:
        from launcher.render import site_template  # noqa: PLC0415 - a site with its own templates only

        file = Path(site.templates_dir) / site_template.TEMPLATE
        if not file.exists() and not file.is_symlink():
            checks.append(Check("site template", OK, f"{site.templates_dir} holds no {file.name}: sf's own"))
        else:
            try:  # read, parsed, and its structure checked (extends sf's, overrides its blocks only)
                site_template.check_template_file(file)
                checks.append(Check("site template", OK, f"{file} extends sf's"))
            except SpecError as exc:
                checks.append(Check("site template", FAIL, exc.message, f"fix {file} (docs/admins.md, "
                                    "'The batch script, and a site's own template')"))
    return checks


def version_check(version) -> Check:
    """Slurm's release, and a warning when sf was not tested on it (slurm_versions)."""
    warning = slurm_versions.version_warning(version)
    if warning:
        return Check("slurm version", WARN, warning, "docs/admins.md, 'Supported versions'")
    return Check("slurm version", OK, f"Slurm {slurm_versions.version_text(version)}")


def run_checks(site_path: str | None = None) -> list[Check]:
    """Every check, the site file's own first: a site that cannot be read or breaks its schema
    (configs/schema/site.schema.json) raises its SpecError(s), one line each, exit 2, and
    nothing is asked of the cluster."""
    site = load_site(site_path)
    checks = [Check("site file", OK, f"{site.path} (site {site.name}, {len(site.series)} GPU series)")]
    checks += check_site_values(site)
    if not site.series:
        checks.append(Check("series", FAIL, "the site defines no GPU series", f"add series: to {site.path}"))
    try:
        partitions, nodes = slurm.show_partitions(), slurm.show_nodes()
        checks.append(Check("slurmctld", OK, f"{len(partitions)} partitions, {len(nodes)} nodes"))
        checks.append(version_check(slurm.version()))
        checks += check_series(site, partitions, nodes)
        checks += check_sbatch(site)
        checks += check_node_limits(site)
    except SlurmError as exc:
        checks.append(Check("slurmctld", FAIL, str(exc), "is Slurm installed, SLURM_CONF set and slurmctld up?"))
    try:
        why = slurm.accounting_check()
        checks.append(Check("sacct", OK, "accounting answers") if why is None else
                      Check("sacct", FAIL, why, "start slurmdbd / set AccountingStorageType; sf status needs sacct "
                            "to see finished jobs"))
    except SlurmError as exc:
        checks.append(Check("sacct", FAIL, str(exc), "install Slurm's client tools on this node"))
    checks += check_runtimes(site)
    checks += check_paths(site)
    return checks
