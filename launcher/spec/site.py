"""The site file: what an admin says about the cluster.

Found through $SF_SITE, then /etc/sf/site.yaml, then ~/.config/sf/site.yaml, then the
dev cluster's site/dev.yaml shipped with sf. Loading is I/O; everything after is pure.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from launcher.errors import SpecError, SpecErrors, quoted_short
from launcher.plan import FIRST_STEP_TIMEOUT_S, HANG_TIMEOUT_S
from launcher.sbatch_values import LOGIN_ENV
from launcher.spec import paths
from launcher.spec.contracts import check_site
from launcher.spec.files import expand_user, nul_errors, parse_yaml_file, read_text_file, refuse_duplicate_keys

SYSTEM_SITE = Path("/etc/sf/site.yaml")
USER_SITE = Path("~/.config/sf/site.yaml").expanduser()


@dataclass(frozen=True)
class Series:
    """A GPU series: which partition holds it and what one node of it has."""

    name: str
    partition: str
    gpus_per_node: int
    gpu_directive: str = "gres"  # "gres" -> --gres=gpu:N, "gpus-per-node" -> --gpus-per-node=N
    gres_name: str = "gpu"
    constraint: str | None = None
    cpus_per_node: int = 8
    mem_per_node: str | None = None  # e.g. "64G"; None -> let Slurm decide


@dataclass(frozen=True)
class RaySettings:
    # How a node's Ray address is found: "loopback" (dev cluster: <prefix>.<10+node number>),
    # "interface" (the IPv4 address of `interface`, e.g. ib0) or "hostname".
    address_method: str = "hostname"
    address_prefix: str = "127.0.0"
    interface: str | None = None
    port_range: tuple[int, int] = (20000, 59999)
    temp_root: str = "/tmp"
    barrier_timeout_s: int = 300
    start_retries: int = 2  # a worker whose `ray start` fails before Ray runs is started again
    health_check: str = "preflight"  # or "always": the node health check before every driver
    # The site's own environment for jobs of at least this many nodes (e.g. RAY_<config> values
    # it has tuned), exported by the batch script. sf's own Ray tuning by node count needs no
    # site entry: launcher/injob/ray_tuning.py applies it in the job, under whatever is exported.
    large_cluster_min_nodes: int = 64
    large_cluster_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Site:
    name: str
    path: str  # the file it was read from
    runs_dir: str
    series: dict[str, Series]
    default_series: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    max_requeues: int = 3
    signal_lead_s: int = 300
    hang_timeout_s: int = HANG_TIMEOUT_S  # launcher/plan.py: the watchdog's defaults and why
    first_step_timeout_s: int = FIRST_STEP_TIMEOUT_S
    max_restarts_in_place: int = 0  # launcher/injob/heal.py says why 0
    ray: RaySettings = RaySettings()
    runtime_registry: str | None = None  # FORGE_RUNTIME_REGISTRY_FILE overrides it
    dataset_roots: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # exported in every job
    modules: tuple[str, ...] = ()  # `module load` in every job
    # Variables of the submitting shell that sf's sbatch calls keep: the SBATCH_* ones named
    # (all others would override the script's #SBATCH lines without a word), the login ones
    # (pass_login_env), the RAY_* ones (pass_ray_env) and, with test_hooks, SF_TEST_*
    # (launcher.slurm leaves every other SLURM_*, SRUN_*, RAY_*, SF_TEST_* out of the job)
    pass_sbatch_env: tuple[str, ...] = ()
    # RAY_* variables of the submitting shell that reach the job (all others are left out and
    # named at submit: they would silently override sf's Ray settings on every node)
    pass_ray_env: tuple[str, ...] = ()
    # A group (e.g. a project's) that may read a run's checkpoints, metrics and exports;
    # None: the job's user alone (folders 0700, files 0600)
    share_group: str | None = None
    # The SF_TEST_* hooks (a test driver, simulated failures) reach the job: the dev cluster's
    # site only, never a production one
    test_hooks: bool = False
    # The site's own batch script templates: its train.sbatch.j2 extends sf's and overrides
    # named blocks (launcher.render.sbatch_template); None: sf's templates as they are
    templates_dir: str | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)


def find_site_file(explicit: str | None = None) -> Path:
    for candidate, field_name in ((explicit, "--site"), (os.environ.get("SF_SITE"), "$SF_SITE")):
        if candidate:
            path = expand_user(candidate, field_name)
            if not path.is_file():
                if os.path.lexists(path):  # there, but a directory, a FIFO, a loop, unreadable: say which
                    read_text_file(path, "site")
                raise SpecError("site", f"site file {path} does not exist; fix $SF_SITE or --site")
            return path
    for path in (SYSTEM_SITE, USER_SITE):
        if path.is_file():
            return path
    return paths.site_dir() / "dev.yaml"


def _expand(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value))


def runs_root(runs_dir: str | None = None, site: Site | None = None, site_path: str | None = None) -> Path:
    """Where run records are, the one order every command follows: --runs-dir, then
    $SF_RUNS_DIR, then the site's runs_dir (the site file is read only when needed and
    `site` is not given). `sf submit` writes where `sf list` reads."""
    if runs_dir:
        return expand_user(runs_dir, "--runs-dir")
    if os.environ.get("SF_RUNS_DIR"):
        return expand_user(os.environ["SF_RUNS_DIR"], "$SF_RUNS_DIR")
    return Path((site or load_site(site_path)).runs_dir)


def with_runs_root(site: Site, runs_dir: str | None = None) -> Site:
    """The site with its runs_dir replaced by runs_root's answer: what the submit stage
    compiles and writes against."""
    return replace(site, runs_dir=str(runs_root(runs_dir, site)))


def load_site(explicit: str | None = None) -> Site:
    path = find_site_file(explicit)
    data = parse_yaml_file(path, "site", loader=_SiteLoader)
    if data is None:  # an empty file: no series, no partitions; every spec would fail on them instead
        raise SpecError("site", f"{path} is empty; write the site's series and runs_dir into it (see site/dev.yaml), "
                        "or point $SF_SITE at the site's file")
    nul = nul_errors(data, "site")
    if nul:
        raise SpecErrors(nul)
    return site_from_dict(data, str(path), source=path)


class _SiteLoader(yaml.SafeLoader):
    """The site file as PyYAML reads it, but a key given twice is an error (with its lines)."""

    def construct_mapping(self, node, deep=False):
        refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep)


def _whole(value, field: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(field, f"{value!r} in {path} is not a whole number >= 0")
    return value


def _sbatch_names(names, path: str) -> tuple[str, ...]:
    if isinstance(names, str) or not all(isinstance(n, str) and re.fullmatch(r"SBATCH_[A-Z0-9_]+", n) for n in names):
        raise SpecError("site.slurm.pass_sbatch_env", f"{names!r} in {path} must be a list of SBATCH_* variable names, "
                        "e.g. [SBATCH_RESERVATION]")
    return tuple(names)


def _ray_names(names, path: str) -> tuple[str, ...]:
    if isinstance(names, str) or not all(isinstance(n, str) and re.fullmatch(r"RAY_[A-Za-z0-9_]+", n) for n in names):
        raise SpecError("site.slurm.pass_ray_env", f"{names!r} in {path} must be a list of RAY_* variable names, "
                        "e.g. [RAY_DEDUP_LOGS]")
    return tuple(names)


def _flag(value, field: str, path: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"{value!r} in {path} must be true or false")
    return value


def _share_group(value, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", value):
        raise SpecError("site.share_group", f"{value!r} in {path} is not a group name (e.g. ml-proj); "
                        "leave it out to keep runs readable by their user alone")
    return value


def _templates_dir(value, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not os.path.isabs(_expand(value)):
        raise SpecError("site.templates_dir", f"{value!r} in {path} must be an absolute path: the folder of the "
                        "site's batch script templates (train.sbatch.j2)")
    folder = _expand(value)
    if not os.path.isdir(folder):
        raise SpecError("site.templates_dir", f"{folder} (in {path}) is not an existing directory; create it "
                        "with the site's train.sbatch.j2 in it, or leave templates_dir out")
    return folder


def _login_names(names, path: str) -> tuple[str, ...]:
    if isinstance(names, str) or not all(n in LOGIN_ENV for n in names):
        raise SpecError("site.slurm.pass_login_env", f"{names!r} in {path} must be a list of {', '.join(LOGIN_ENV)}")
    return tuple(names)


def _health_check(value, path: str) -> str:
    if value not in ("preflight", "always"):
        raise SpecError("site.ray.health_check", f"{value!r} in {path} must be preflight (only in --preflight) "
                        "or always (before every driver too)")
    return value


# long: one site file's fields, checked in the order of the Site dataclass
def site_from_dict(data: dict, path: str = "<memory>", source: Path | None = None) -> Site:
    """The Site of a site file's content, checked first against configs/schema/site.schema.json
    (launcher.spec.contracts; `source`, the file, gives the errors their lines)."""
    if not isinstance(data, dict):
        raise SpecError("site", f"{path} must be a mapping (name:, runs_dir:, series:, ...); fix the file")
    check_site(data, path, source)
    series = _series_of(data, path)
    slurm = data.get("slurm") or {}
    ray = data.get("ray") or {}
    _check_slurm_and_ray_numbers(slurm, ray, path)
    return Site(
        name=data.get("name", Path(path).stem),
        path=path,
        runs_dir=_expand(data.get("runs_dir", "~/sf-runs")),
        series=series,
        default_series=data.get("default_series"),
        account=slurm.get("account"),
        qos=slurm.get("qos"),
        time=str(slurm.get("time", "01:00:00")),
        max_requeues=int(slurm.get("max_requeues", 3)),
        signal_lead_s=int(slurm.get("signal_lead_s", 300)),
        hang_timeout_s=int(slurm.get("hang_timeout_s", HANG_TIMEOUT_S)),
        first_step_timeout_s=int(slurm.get("first_step_timeout_s", FIRST_STEP_TIMEOUT_S)),
        max_restarts_in_place=int(slurm.get("max_restarts_in_place", 0)),
        ray=_ray_settings(ray, path),
        runtime_registry=_expand(data["runtime_registry"]) if data.get("runtime_registry") else None,
        dataset_roots=tuple(_expand(p) for p in data.get("dataset_roots", ())),
        env=tuple((str(k), str(v)) for k, v in (data.get("env") or {}).items()),
        modules=tuple(data.get("modules", ())),
        pass_sbatch_env=_pass_sbatch_env(data, slurm, path),
        pass_ray_env=_ray_names(slurm.get("pass_ray_env") or (), path),
        test_hooks=bool(data.get("test_hooks", False)),
        share_group=_share_group(data.get("share_group"), path),
        templates_dir=_templates_dir(data.get("templates_dir"), path),
        raw=data,
    )


def _series_of(data: dict, path: str) -> dict[str, Series]:
    """The site file's series:, each entry a Series with whole GPU and CPU counts."""
    series = {}
    for name, entry in (data.get("series") or {}).items():
        if not isinstance(entry, dict):
            raise SpecError(f"site.series.{name}", f"must be a mapping (partition, gpus_per_node, ...) in {path}")
        try:
            series[name] = Series(name=name, **entry)
        except TypeError as exc:
            raise SpecError(f"site.series.{name}", f"{exc}; see site/dev.yaml for the fields") from None
        for key in ("gpus_per_node", "cpus_per_node"):
            _whole(getattr(series[name], key), f"site.series.{name}.{key}", path)
    return series


def _check_slurm_and_ray_numbers(slurm: dict, ray: dict, path: str) -> None:
    """Refuse a slurm: or ray: count, timeout or port range that is not a usable whole number."""
    for name, value in (("slurm.max_requeues", slurm.get("max_requeues", 3)),
                        ("slurm.signal_lead_s", slurm.get("signal_lead_s", 300)),
                        ("slurm.hang_timeout_s", slurm.get("hang_timeout_s", HANG_TIMEOUT_S)),
                        ("slurm.first_step_timeout_s", slurm.get("first_step_timeout_s", FIRST_STEP_TIMEOUT_S)),
                        ("slurm.max_restarts_in_place", slurm.get("max_restarts_in_place", 0)),
                        ("ray.barrier_timeout_s", ray.get("barrier_timeout_s", 300)),
                        ("ray.start_retries", ray.get("start_retries", 2)),
                        ("ray.large_cluster.min_nodes", (ray.get("large_cluster") or {}).get("min_nodes", 64))):
        _whole(value, f"site.{name}", path)
    if slurm.get("first_step_timeout_s", FIRST_STEP_TIMEOUT_S) < 1:
        raise SpecError("site.slurm.first_step_timeout_s", f"0 in {path}: the first step needs at least a second "
                        "(hang_timeout_s: 0 turns the watchdog off)")
    large = ray.get("large_cluster") or {}
    if not isinstance(large, dict) or not isinstance(large.get("env") or {}, dict):
        raise SpecError("site.ray.large_cluster", f"must be {{min_nodes: N, env: {{RAY_...: value}}}} in {path}")
    port_range = ray.get("port_range", (20000, 59999))
    if not (isinstance(port_range, (list, tuple)) and len(port_range) == 2
            and all(isinstance(p, int) and not isinstance(p, bool) for p in port_range)
            and port_range[0] < port_range[1]):
        raise SpecError("site.ray.port_range",
                        f"{port_range!r} in {path} is not [LOW, HIGH] ports, e.g. [20000, 32767]")


def _ray_settings(ray: dict, path: str) -> RaySettings:
    """The site file's ray: section (already checked by _check_slurm_and_ray_numbers)."""
    address = ray.get("node_address") or {}
    large = ray.get("large_cluster") or {}
    return RaySettings(
        address_method=address.get("method", "hostname"),
        address_prefix=address.get("prefix", "127.0.0"),
        interface=address.get("interface"),
        port_range=tuple(ray.get("port_range", (20000, 59999))),
        temp_root=ray.get("temp_root", "/tmp"),
        barrier_timeout_s=int(ray.get("barrier_timeout_s", 300)),
        start_retries=int(ray.get("start_retries", 2)),
        health_check=_health_check(ray.get("health_check", "preflight"), path),
        large_cluster_min_nodes=int(large.get("min_nodes", 64)),
        large_cluster_env=tuple((str(k), str(v)) for k, v in (large.get("env") or {}).items()),
    )


def _pass_sbatch_env(data: dict, slurm: dict, path: str) -> tuple[str, ...]:
    """SBATCH_* variables, and login-node variables (PYTHONPATH, ...) let into sbatch's environment."""
    return (_sbatch_names(slurm.get("pass_sbatch_env") or (), path)
            + _login_names(slurm.get("pass_login_env") or (), path)
            + _ray_names(slurm.get("pass_ray_env") or (), path)
            + (("SF_TEST_*",) if _flag(data.get("test_hooks", False), "site.test_hooks", path) else ()))


# A pool's nodes, at most: Slurm is validated for clusters of up to 65,536 nodes (its large
# cluster guide) and sbatch wraps a node count past 32 bits silently. config.yaml's schema
# bounds spec.resources.pools[i].nodes alike (tests/unit/compiler_fixtures/genschema.py).
MAX_POOL_NODES = 65536
_PROFILE = re.compile(r"^(?P<series>[A-Za-z0-9_.-]+):(?:(?P<nodes>[0-9]+)x)?(?P<gpus>[0-9]+)$")


def parse_profile(text: str, site: Site) -> tuple[str, int, int]:
    """`SERIES:G` (G GPUs in all) or `SERIES:NxG` (N nodes of G GPUs) -> (series, nodes, gpus_per_node)."""
    match = _PROFILE.fullmatch(text or "")
    if not match:
        raise SpecError("--profile", f"{text!r} is not SERIES:G or SERIES:NxG (e.g. h200:8 or h200:2x8)")
    name = match["series"]
    if name not in site.series:
        known = ", ".join(sorted(site.series)) or "none"
        raise SpecError("--profile", f"unknown GPU series {name!r} in site {site.name}; known: {known}")
    series = site.series[name]
    shown = quoted_short(text)
    too_many = SpecError("--profile", f"{shown} asks for more than {MAX_POOL_NODES} nodes, the largest cluster Slurm "
                         f"is validated for; ask for fewer (e.g. {name}:2x{series.gpus_per_node})")
    gpus = _count(match["gpus"])
    if gpus < 1:
        raise SpecError("--profile", f"{text!r} asks for no GPUs; use at least 1")
    if match["nodes"]:
        nodes = _count(match["nodes"])
        if nodes < 1:
            raise SpecError("--profile", f"{text!r} asks for no nodes; use at least 1")
        if gpus > series.gpus_per_node:
            raise SpecError("--profile", f"{name} nodes have {series.gpus_per_node} GPUs, {shown} asks for more per "
                            f"node; ask for at most {series.gpus_per_node} (e.g. {name}:2x{series.gpus_per_node})")
        if nodes > MAX_POOL_NODES:
            raise too_many
        return name, nodes, gpus
    if gpus <= series.gpus_per_node:
        return name, 1, gpus
    if gpus // series.gpus_per_node > MAX_POOL_NODES:
        raise too_many
    if gpus % series.gpus_per_node:
        raise SpecError(
            "--profile",
            f"{gpus} GPUs do not fill whole {name} nodes of {series.gpus_per_node}; "
            f"ask for a multiple of {series.gpus_per_node} or use {name}:NxG",
        )
    return name, gpus // series.gpus_per_node, series.gpus_per_node


def _count(digits: str) -> int:
    """A count of --profile; one of more than 9 digits, past any node and any cluster, is read
    as 10**9 (int() refuses 4,300 digits; the caller refuses the count)."""
    digits = digits.lstrip("0")
    return int(digits or 0) if len(digits) <= 9 else 10**9
