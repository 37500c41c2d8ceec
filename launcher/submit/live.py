"""Checks against the live cluster: can the partitions ever give what the pools ask, and
will Slurm take the run's account and QOS?

A request that no partition can ever satisfy (`--profile fake:100x4` on a partition of 6
nodes) is accepted by sbatch and pends forever. `sf submit` (and `sf validate --live`) asks
Slurm once for its partitions and nodes (launcher.slurm.show_partitions/show_nodes) and
refuses such a pool with the partition's real size. Whether a node is up or busy does not
matter here: only what the partition could give if everything were free.

Account and QOS: when the cluster enforces associations (`AccountingStorageEnforce` in
`scontrol show config` holds associations, limits, safe, qos or wckeys), the run's account
(`--account`, else `slurm.account` of config.yaml, else the site's) must be one of the user's associations
on the cluster (for the pools' partitions), and when it enforces `qos` the run's QOS must
exist and be allowed for that account (the user's default account when none is given):
one `sacctmgr show user withassoc` and one `sacctmgr show qos`. A wrong one exits 2 naming
the field, the value and the allowed values. When the cluster enforces neither, nothing is
asked and nothing said (Slurm then takes any account or QOS).

`capacity`, `check`, `enforcement` and `check_accounts` are pure; the Slurm calls are
`verify`'s, through launcher.slurm.
"""

from __future__ import annotations

import os
import pwd
import re

from launcher import slurm, slurm_versions
from launcher.errors import SlurmError, SpecError, SpecErrors
from launcher.spec.layers import Layer

_GPU = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


def verify(plan, site, origins: dict | None = None) -> list[str]:
    """Ask Slurm (one `scontrol show partition`, one `scontrol show node`, one `scontrol show
    config`; where accounts are enforced one `sacctmgr show user withassoc` and, for a QOS,
    one `sacctmgr show qos`) and check the plan: SpecErrors (exit 2) when a pool can never
    run or Slurm would refuse the account or QOS; else the warnings. When Slurm does not
    answer, one warning says what was not checked. `origins` (the spec's: dotted key ->
    launcher.spec.layers.Origin) name the field an account error shows (`slurm.account`,
    `site.slurm.account` or the flag)."""
    try:
        cap = capacity(slurm.show_partitions(), slurm.show_nodes())
    except SlurmError as exc:
        return [f"not checked against the cluster (Slurm did not answer: {exc})"]
    if not cap:
        return ["not checked against the cluster (Slurm reported no partitions)"]
    errors, warnings = check(plan, site, cap)
    try:
        config = slurm.show_config()
        errors += verify_accounts(plan, site, origins, config)
        warnings += version_warnings(config)
    except SlurmError as exc:
        warnings.append(f"account/QOS not checked against the cluster (Slurm did not answer: {exc})")
    if errors:
        raise SpecErrors(errors)
    return warnings


def version_warnings(config: dict) -> list[str]:
    """A Slurm older or newer than sf was tested on, from `scontrol show config`'s
    SLURM_VERSION (slurm_versions); nothing when it is not there (sf doctor says so)."""
    version = slurm_versions.parse_version(config.get("SLURM_VERSION", ""))
    warning = slurm_versions.version_warning(version) if version else None
    return [warning] if warning else []


def verify_accounts(plan, site, origins: dict | None = None, config: dict | None = None) -> list[SpecError]:
    """The account/QOS part of `verify`: nothing is asked of sacctmgr (and nothing said)
    unless `scontrol show config` (`config`, else asked here) says the cluster enforces
    associations."""
    config = slurm.show_config() if config is None else config
    enforce = enforcement(config.get("AccountingStorageEnforce", ""))
    if not enforce & ENFORCE_ASSOCIATIONS:
        return []
    account, qos = run_account(plan, site)
    cluster = config.get("ClusterName") or None
    user = pwd.getpwuid(os.getuid()).pw_name  # Slurm knows the submitter by uid, not by $USER
    assocs = slurm.user_associations(user, cluster)
    names = slurm.qos_names() if qos and "qos" in enforce else []
    partitions = {p for p in (partition_of(pool, plan, site) for pool in plan.pools) if p}
    return check_accounts(account, qos, enforce=enforce, user=user, cluster=cluster, assocs=assocs,
                          qos_names=names, partitions=partitions, origins=origins)


# AccountingStorageEnforce options that make Slurm check the job's association (limits,
# safe, qos and wckeys each turn associations on: slurm.conf(5)).
ENFORCE_ASSOCIATIONS = frozenset({"associations", "limits", "safe", "qos", "wckeys"})


def enforcement(value: str) -> set[str]:
    """`associations,limits,qos` -> {"associations", "limits", "qos"}; `none`/empty -> set()."""
    return {v.strip().lower() for v in (value or "").split(",") if v.strip() and v.strip().lower() not in ("none", "0")}


def run_account(plan, site) -> tuple[str | None, str | None]:
    """The account and QOS the run's #SBATCH lines carry (launcher.render.script: the spec's
    slurm.account/qos, else the site's)."""
    return plan.slurm.account or site.account, plan.slurm.qos or site.qos


def _slurm_field(key: str, origins: dict | None) -> str:
    """The field an error about slurm.KEY names: the flag that set it, the site file's key, or
    the spec's."""
    origin = (origins or {}).get(f"slurm.{key}")
    if origin is not None and origin.flag:
        return origin.flag
    return f"site.slurm.{key}" if origin is not None and origin.layer is Layer.SITE else f"slurm.{key}"


def check_accounts(account: str | None, qos: str | None, *, enforce: set[str], user: str, cluster: str | None,
                   assocs: list[dict], qos_names: list[str], partitions: set[str] = frozenset(),
                   origins: dict | None = None) -> list[SpecError]:
    """Errors for an account that is not one of `user`'s associations (`assocs`: rows of
    launcher.slurm.user_associations) and, when `qos` is enforced, for a QOS that does not
    exist (`qos_names`) or that the account's associations do not allow. An association
    tied to a partition counts only for that partition. Pure."""
    if not enforce & ENFORCE_ASSOCIATIONS:
        return []
    where = f"on cluster {cluster}" if cluster else "on this cluster"
    rows = [a for a in assocs if a.get("Account") and (not a.get("Partition") or a["Partition"] in partitions)]
    accounts = sorted({a["Account"] for a in rows})
    acct_field, qos_field = _slurm_field("account", origins), _slurm_field("qos", origins)
    enforced = f"(the cluster enforces {','.join(sorted(enforce))})"
    if not accounts:
        return [SpecError(acct_field, f"user {user} has no Slurm association {where}, so Slurm refuses every job "
                          f"{enforced}; ask the cluster's admins to add one (sacctmgr add user {user} account=...)")]
    if account and account not in accounts:
        return [SpecError(acct_field, f"account {account!r} is not one of user {user}'s associations {where} "
                          f"(allowed: {', '.join(accounts)}) {enforced}; set {acct_field} to one of them")]
    if not qos or "qos" not in enforce:
        return []
    if qos not in qos_names:
        known = ", ".join(sorted(qos_names)) or "none"
        return [SpecError(qos_field, f"QOS {qos!r} does not exist {where} (QOS: {known}); set {qos_field} to an "
                          "allowed one")]
    effective = account or next((a.get("DefaultAccount") for a in rows if a.get("DefaultAccount")), None)
    mine = [a for a in rows if a["Account"] == effective] if effective else rows
    allowed = sorted({q.strip() for a in mine for q in (a.get("QOS") or "").split(",") if q.strip()})
    if qos not in allowed:
        whose = f"account {effective!r}" if effective else f"user {user}"
        return [SpecError(qos_field, f"QOS {qos!r} is not allowed for {whose} {where} (allowed: "
                          f"{', '.join(allowed) or 'none'}) {enforced}; set {qos_field} to one of them")]
    return []


def gpus_of(gres: str) -> int:
    """GPUs in a node's Gres string: `gpu:4`, `gpu:h200:8(S:0-1)`, `gpu:a:2,gpu:b:2` -> 4."""
    return sum(int(n) for n in _GPU.findall(gres or ""))


def capacity(partitions: list[dict], nodes: list[dict]) -> dict[str, list[int]]:
    """{partition: [GPUs of each of its nodes]} from `scontrol show partition/node -o`."""
    gpus = {n.get("NodeName"): gpus_of(n.get("Gres", "")) for n in nodes}
    out: dict[str, list[int]] = {}
    for node in nodes:
        for part in (node.get("Partitions") or "").split(","):
            if part:
                out.setdefault(part, []).append(gpus.get(node.get("NodeName"), 0))
    for part in partitions:
        out.setdefault(part.get("PartitionName", ""), [])
    return out


def partition_of(pool, plan, site) -> str | None:
    if plan.slurm.partition:
        return plan.slurm.partition
    series = site.series.get(pool.series)
    return series.partition if series else None


def check(plan, site, cap: dict[str, list[int]]) -> tuple[list[SpecError], list[str]]:
    """(errors, warnings): a pool its partition can never hold is an error naming the
    partition's real size; a rollout tensor-parallel size that does not divide the pool's
    GPUs is a warning."""
    errors, warnings = [], []
    for pool in plan.pools:
        part = partition_of(pool, plan, site)
        if part is None:
            continue
        field = f"pools.{pool.name}"
        if part not in cap:
            known = ", ".join(sorted(p for p in cap if p)) or "none"
            errors.append(SpecError(field, f"partition {part!r} does not exist on this cluster (partitions: {known}); "
                                    "fix the series' partition in the site file or set slurm.partition "
                                    "(sf export/eval: --partition)"))
            continue
        fitting = sum(1 for g in cap[part] if g >= pool.gpus_per_node)
        if fitting < _allocated(pool):
            most = max(cap[part], default=0)
            spares = f" + {pool.spare_nodes} spare" if pool.spare_nodes else ""
            room = fitting - pool.spare_nodes
            fewer = (f"nodes and spare_nodes together must be at most {fitting} (spare nodes are allocated too; "
                     + (f"{_resize_hint(pool, room)}, or " if room >= 1 else "") + "fewer spare_nodes)"
                     if pool.spare_nodes else f"ask for at most {fitting} nodes ({_resize_hint(pool, fitting)})")
            errors.append(SpecError(field, f"{pool.nodes}{spares} nodes x {pool.gpus_per_node} GPUs can never run in "
                                    f"partition {part}: it has {len(cap[part])} nodes, {fitting} of them with >= "
                                    f"{pool.gpus_per_node} GPUs (at most {most} GPUs a node); {fewer}"))
    errors += _whole_job(plan, site, cap, errors)
    tp = _rollout_tp(plan)
    train = plan.pools[0] if plan.pools else None
    if tp and train and (train.nodes * train.gpus_per_node) % tp:
        warnings.append(f"rollout tensor_model_parallel_size={tp} does not divide pool {train.name}'s "
                        f"{train.nodes * train.gpus_per_node} GPUs: verl leaves some GPUs without a rollout engine")
    return errors, warnings


def _allocated(pool) -> int:
    """The nodes Slurm allocates for a pool: its nodes and its spares (render: --nodes=N+spares)."""
    return pool.nodes + pool.spare_nodes


def _resize_hint(pool, nodes: int) -> str:
    """How to give `pool` `nodes` nodes: --profile reshapes only the first pool (het group 0)."""
    if pool.het_group == 0:
        return f"e.g. --profile {pool.series}:{nodes}x{pool.gpus_per_node}"
    return f"spec.resources.pools[{pool.het_group}].nodes: {nodes} in config.yaml"


def _whole_job(plan, site, cap: dict[str, list[int]], errors: list) -> list[SpecError]:
    """The pools of one job that share a partition must fit in it together: a 4+4-node hetjob
    in a 6-node partition pends forever though each group fits alone. Pools are given nodes
    from the widest GPU demand down (exact for nested demands). Pure."""
    if errors:
        return []  # a pool that can never fit alone is reported already
    by_part: dict[str, list] = {}
    for pool in plan.pools:
        part = partition_of(pool, plan, site)
        if part in cap:
            by_part.setdefault(part, []).append(pool)
    out = []
    for part, pools in by_part.items():
        if len(pools) < 2:
            continue
        need = 0
        for pool in sorted(pools, key=lambda p: -p.gpus_per_node):
            need += _allocated(pool)
            have = sum(1 for g in cap[part] if g >= pool.gpus_per_node)
            if need > have:
                names = " + ".join(f"{p.name} {p.nodes}x{p.gpus_per_node}"
                                   + (f" (+{p.spare_nodes} spare)" if p.spare_nodes else "") for p in pools)
                out.append(SpecError(f"pools.{pools[0].name}", f"the job's pools on partition {part} ({names}: "
                                     f"{sum(_allocated(p) for p in pools)} nodes) can never run at once: it has "
                                     f"{len(cap[part])} nodes, {have} with >= {pool.gpus_per_node} GPUs, and a "
                                     "heterogeneous job needs all its groups together; shrink the pools or put "
                                     "one on another partition (its series' partition in the site file)"))
                break
    return out


def _rollout_tp(plan) -> int | None:
    resolved = (getattr(plan, "resolved", None) or {}).get("actor_rollout_ref.rollout.tensor_model_parallel_size")
    if resolved is not None:
        value = resolved.get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    for line in plan.overrides:
        key, _, value = line.lstrip("+").partition("=")
        if key == "actor_rollout_ref.rollout.tensor_model_parallel_size" and value.isdigit():
            return int(value)
    return None
