"""The compiler: MergedSpec (+ site + run dir) -> Plan. Pure, apart from reading the catalog
and the installed verl's config YAML.

The overrides are gathered in a deterministic order by launcher.compile.rules.BUILD: method pins,
bindings (model, data), defaults, knobs, user raw overrides, topology, checkpoint. A key set
twice keeps the last value (at the later position). The list is then composed with verl's
own Hydra config (launcher.verlcheck.effective_config) and launcher.compile.rules.JUDGES run on the
composed values, so a dict-valued override, a `+key` or a legacy alias is judged by what it
does, not by how it is spelled. Without verl's config on this machine compile says so once
and the judges read the override list instead. All errors of one pass are raised together
as SpecErrors so `sf validate` prints one line per problem. Every override line carries its
provenance (Plan.sources).
"""

from __future__ import annotations

import os
from dataclasses import replace

from launcher import sbatch_values
from launcher.compile import catalog, resolve, rules, scheduler_options, typed, verlcache
from launcher.compile.context import Ctx
from launcher.compile.rules.owned import refusal
from launcher.compile.slurm_time import check_signal_lead, time_seconds
from launcher.compile.values import hydra_value
from launcher.errors import SpecError, SpecErrors
from launcher.plan import Plan, Pool, SlurmOptions
from launcher.spec.experiment import MergedSpec
from launcher.spec.layers import Layer
from launcher.spec.site import Site, parse_profile

DEFAULT_ROLES = ("actor", "rollout", "ref")


def build_pools(spec: MergedSpec, method: catalog.Method, site: Site,
                errors: list[SpecError]) -> tuple[list[Pool], dict]:
    """spec.resources.pools (or one pool of the site's default series), reshaped by --profile,
    each with the roles that run on it."""
    resources = ((spec.values.get("spec") or {}).get("resources") or {})
    declared = list(resources.get("pools") or []) or [{"name": "train"}]
    profile = spec.values.get("profile")
    if profile:
        try:
            series, nodes, gpn = parse_profile(profile, site)
            declared[0] = {**declared[0], "series": series, "nodes": nodes, "gpus_per_node": gpn}
        except SpecError as exc:
            errors.append(exc)
    default_series = site.default_series or (next(iter(site.series)) if len(site.series) == 1 else None)
    pools: list[Pool] = []
    seen = set()
    for i, entry in enumerate(declared):
        name = entry.get("name") or f"pool{i}"
        if name in seen:
            errors.append(SpecError(f"spec.resources.pools[{i}]", f"pool name {name!r} is used twice; give each "
                                    "pool its own name"))
        seen.add(name)
        pool = _pool(i, name, entry, entry.get("series") or default_series, site, errors)
        if pool is not None:
            pools.append(pool)
    if not pools:
        return [], dict(resources.get("roles") or {})
    roles = _roles(method, pools, dict(resources.get("roles") or {}))
    with_roles = []
    for p in pools:
        mine = tuple(r for r in ("actor", "rollout", "ref", "critic", "teacher", "reward") if roles.get(r) == p.name)
        with_roles.append(Pool(p.name, p.series, p.nodes, p.gpus_per_node, p.het_group, mine, p.spare_nodes))
    return with_roles, roles


def _pool(i: int, name: str, entry: dict, series_name: str | None, site: Site, errors: list[SpecError]) -> Pool | None:
    """One declared pool on its series (None, with the error, when the series is unknown)."""
    field = f"spec.resources.pools[{i}]"
    if not series_name:
        errors.append(SpecError(field + ".series", f"no series and site {site.name} has no default_series; "
                                f"pick one of {', '.join(site.series)} or use --profile SERIES:G"))
        return None
    series = site.series.get(series_name)
    if series is None:
        errors.append(SpecError(field + ".series", f"unknown GPU series {series_name!r} in site {site.name}; "
                                f"known: {', '.join(sorted(site.series)) or 'none'}"))
        return None
    gpn = int(entry.get("gpus_per_node") or series.gpus_per_node)
    if gpn > series.gpus_per_node:
        errors.append(SpecError(field + ".gpus_per_node", f"{series_name} nodes have {series.gpus_per_node} GPUs, "
                                f"the pool asks for {gpn}; lower gpus_per_node or add nodes"))
        gpn = series.gpus_per_node
    return Pool(name=name, series=series_name, nodes=int(entry.get("nodes") or 1), gpus_per_node=gpn, het_group=i,
                spare_nodes=int(entry.get("spare_nodes") or 0))


def _roles(method: catalog.Method, pools: list[Pool], roles: dict) -> dict:
    """roles: with the method's defaults filled in: the actor on the first pool, rollout, ref
    (and the critic) with it, a separate trainer's rollout and a teacher on the second pool."""
    if method.separate_rollout and "rollout" not in roles and len(pools) >= 2:
        roles["rollout"] = pools[1].name  # these trainers' rollout runs on a pool of its own
    roles.setdefault("actor", pools[0].name)
    for role in DEFAULT_ROLES + (("critic",) if method.critic else ()):
        roles.setdefault(role, roles["actor"])  # verl keeps them in the actor's pool: they follow it
    if method.teacher and "teacher" not in roles and len(pools) >= 2:
        roles["teacher"] = pools[1].name
    return roles


def slurm_options(spec: MergedSpec, site: Site) -> SlurmOptions:
    s = spec.values.get("slurm") or {}
    scheduler = scheduler_options.checked(s, spec.origins)  # SpecError naming the flag or key
    for key in ("account", "qos", "partition"):  # what render writes on an #SBATCH line, refused by sf validate too
        if s.get(key) is not None:
            sbatch_values.account(s[key], f"slurm.{key}")
        elif getattr(site, key, None):
            sbatch_values.account(getattr(site, key), f"site slurm.{key}")
    time = str(s.get("time") or site.time)
    try:
        limit = time_seconds(time, "slurm.time")  # as Slurm parses it: 25:61:00, 99:99:99, 0 refused
    except SpecError as exc:
        if spec.layer_of("slurm.time") not in (None, Layer.SITE):
            raise
        # the site file's time, kept by this run: name that file (config.yaml's slurm.time overrides it)
        raise SpecError("site slurm.time", f"in the site file {site.path}: {exc.message}; or set slurm.time in "
                        "config.yaml") from None
    lead = s.get("signal_lead_s", site.signal_lead_s)
    if s.get("requeue", True):
        check_signal_lead(lead, limit)
    return SlurmOptions(
        **scheduler,
        account=s.get("account"),
        qos=s.get("qos"),
        time=time,
        partition=s.get("partition"),
        exclusive=bool(s.get("exclusive", False)),
        requeue=bool(s.get("requeue", True)),
        max_requeues=int(s.get("max_requeues", site.max_requeues)),
        signal_lead_s=int(s.get("signal_lead_s", site.signal_lead_s)),
        hang_timeout_s=int(s.get("hang_timeout_s", site.hang_timeout_s)),
        first_step_timeout_s=int(s.get("first_step_timeout_s", site.first_step_timeout_s)),
        max_restarts_in_place=int(s.get("max_restarts_in_place", site.max_restarts_in_place)),
    )


def compile_plan(spec: MergedSpec, site: Site, run_dir: str, runtime_overrides: dict | None = None) -> Plan:
    """Compile a merged spec into a Plan, or raise SpecErrors with every problem found.
    `runtime_overrides`: {verl config name: (key=value, ...)}, the runtime's defaults."""
    errors: list[SpecError] = []
    try:
        method_name = catalog.parse_method(spec.method)
        method = catalog.get_method(spec.framework_version or "0.9.1", method_name)
    except SpecError as exc:
        raise SpecErrors([exc]) from None
    if not os.path.isabs(run_dir):
        errors.append(SpecError("run_dir", f"{run_dir!r} must be absolute (checkpoints are found by absolute path on "
                                           "requeue)"))
    ctx = Ctx(spec, method, site, run_dir, runtime_overrides)
    ctx.errors[:0] = errors
    ctx.pools, ctx.roles = build_pools(spec, method, site, ctx.errors)
    # Knob defaults of configs/defaults.yaml sit below the method's defaults.
    method_defaults = {**ctx.base_knobs, **method.defaults}
    ctx.method = _with_defaults(method, method_defaults)
    for rule in rules.BUILD:
        rule(ctx)
    _resolution_errors(ctx)
    ctx.effective, why_not = verlcache.effective_config(method.config_name, ctx.override_list())
    if why_not:
        ctx.warn(why_not)
    _stop_on_unresolved(ctx)
    for rule in rules.JUDGES:
        rule(ctx)
    try:
        slurm = slurm_options(spec, site)
    except SpecError as exc:  # a bad scheduler option, reported with the rest
        ctx.errors.append(exc)
    if ctx.errors:
        raise SpecErrors(_dedupe(ctx.errors))

    return Plan(
        experiment=spec.name,
        method=method.name,
        framework=catalog.FRAMEWORK,
        framework_version=method.version,
        config_name=method.config_name,
        launcher=method.launcher,
        entry=tuple(ctx.entry),
        overrides=ctx.override_list(),
        sources=ctx.source_list(),
        resolved=resolved_values(ctx),
        pools=tuple(ctx.pools),
        run_dir=run_dir,
        checkpoint_dir=ctx.checkpoint_dir,
        slurm=slurm,
        env=(("PYTHONUNBUFFERED", "1"),),
        paths_to_check=_paths_to_check(spec), runtime_needs=runtime_needs(ctx),
        trainer=method.trainer, verl_pools=dict(method.verl_pools),
        warnings=tuple(ctx.warnings),
    )


# What the composed config needs from the runtime beyond the method's own `needs`, each found
# minutes into a job otherwise: verl 0.9.1 imports a weight-sync backend's library when the
# trainer builds its checkpoint engine (checkpoint_engine/nccl_checkpoint_engine.py: `import
# cupy`), and builds the trained model with the attention its override_config names,
# flash_attention_2 when it names none (workers/config/model.py), which needs flash-attn
# (the H200: one-step-off's ref model, and SFT before the kit set sdpa). Distillation's teacher
# adds none: verl serves it with the inference engine, not as an HF model (teacher_loop/
# teacher_model.py gives its vLLM/SGLang server a model config of `path` alone and the server
# runs `vllm serve PATH` with the engine's own attention), so it has no attention key to read.
CHECKPOINT_ENGINE_NEEDS = {"nccl": "cupy"}
MODEL_ATTENTION_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
SFT_MODEL_ATTENTION_KEY = "model.override_config.attn_implementation"
VERL_DEFAULT_ATTENTION = "flash_attention_2"


def runtime_needs(ctx: Ctx) -> tuple[str, ...]:
    """The capabilities the job's runtime must import (launcher/injob/capabilities.py): the
    method's, then those the composed config asks for (the model's attention, the rollout's
    checkpoint engine)."""
    needs = list(ctx.method.needs)
    attention = ctx.get(SFT_MODEL_ATTENTION_KEY if ctx.sft else MODEL_ATTENTION_KEY) or VERL_DEFAULT_ATTENTION
    if attention == VERL_DEFAULT_ATTENTION and "flash_attn" not in needs:
        needs.append("flash_attention_2")
    if not ctx.sft:
        need = CHECKPOINT_ENGINE_NEEDS.get(str(ctx.get("actor_rollout_ref.rollout.checkpoint_engine.backend")))
        if need and need not in needs:
            needs.append(need)
    return tuple(needs)


def resolved_values(ctx: Ctx) -> dict:
    """The one map for plan.json and `sf validate --json`: verl key -> its value as verl reads
    it (from the composed config when there is one), the layer and source that set it and
    the lower writes it overrides."""
    out = {}
    for key, entry in ctx.resolution.entries.items():
        item = resolve.as_dict(entry, hydra_value)
        if ctx.effective is not None and entry.write.op != resolve.DELETE:  # verl's default: the value it has
            item["value"] = resolve._plain(ctx.effective.get(key, entry.write.value))
        out[key] = item
    return out


def _paths_to_check(spec: MergedSpec) -> tuple[str, ...]:
    """The model, data, teacher, reward and main.py paths preflight reads on the nodes."""
    paths: list[str] = []
    values = spec.values
    for p in [values.get("model"), *_files(((values.get("data") or {}).get("train") or {}).get("files")),
              *_files(((values.get("data") or {}).get("validation") or {}).get("files")),
              (values.get("teacher") or {}).get("model"), (values.get("reward") or {}).get("model"),
              ((values.get("reward") or {}).get("function") or {}).get("path"), spec.main_py]:
        if p and os.path.isabs(str(p)) and str(p) not in paths:
            paths.append(str(p))
    return tuple(paths)


def _stop_on_unresolved(ctx: Ctx) -> None:
    """An interpolation of a user value that does not resolve in the composed config
    (launcher.compile.typed.unresolved) ends the compile: every rule reading that key would
    judge a fallback value verl never gets."""
    broken = typed.unresolved(ctx)
    if broken:
        raise SpecErrors(_dedupe(ctx.errors + [SpecError(field, message) for field, message in broken]))


def _resolution_errors(ctx: Ctx) -> None:
    """The one map's own problems: two writes of one key in one layer, and each write a pin or
    a binding refuses (with the rule's message: rules.owned.refusal)."""
    resolution = ctx.resolution
    ctx.errors.extend(resolution.errors)
    for conflict in resolution.conflicts:
        ctx.error(conflict.write.field, refusal(ctx, conflict))


def _files(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _with_defaults(method: catalog.Method, defaults: dict) -> catalog.Method:
    return replace(method, defaults=defaults)


def _dedupe(errors: list[SpecError]) -> list[SpecError]:
    seen, out = set(), []
    for e in errors:
        if str(e) not in seen:
            seen.add(str(e))
            out.append(e)
    return out
