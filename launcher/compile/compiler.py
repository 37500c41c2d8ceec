"""The compiler: MergedSpec (+ site + run dir) -> Plan. Pure, apart from reading the catalog
and the installed verl's config YAML.

The overrides are gathered in a deterministic order by launcher.compile.rules.BUILD: method pins,
bindings (model, data), defaults, knobs, user raw overrides, topology, checkpoint. A key set
twice keeps the last value (at the later position). The list is then composed with verl's
own Hydra config (launcher.compile.verlcheck.effective_config) and launcher.compile.rules.JUDGES run on the
composed values, so a dict-valued override, a `+key` or a legacy alias is judged by what it
does, not by how it is spelled. Without verl's config on this machine compile says so once
and the judges read the override list instead. All errors of one pass are raised together
as SpecErrors so `sf validate` prints one line per problem. Every override line carries its
provenance (Plan.sources).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from launcher.compile import catalog, rules, scheduler_options, verlcache
from launcher.errors import SpecError, SpecErrors
from launcher.plan import Plan, Pool, SlurmOptions
from launcher.spec.experiment import MergedSpec
from launcher.spec.site import Site, parse_profile

DEFAULT_ROLES = ("actor", "rollout", "ref")


class Ctx:
    """What the rules read and write while one spec compiles."""

    def __init__(self, spec: MergedSpec, method: catalog.Method, site: Site, run_dir: str,
                 runtime_overrides: dict | None = None):
        self.spec = spec
        self.runtime_overrides = runtime_overrides or {}  # config name -> the runtime's defaults
        self.values = spec.values
        self.method = method
        self.site = site
        self.sft = method.sft
        self.run_dir = run_dir
        self.checkpoint_dir = os.path.join(run_dir, "checkpoints")
        self.main_py = spec.main_py
        self.errors: list[SpecError] = []
        self.warnings: list[str] = []
        # bare key -> (stage, prefix, python value, text passed to Hydra)
        self.overrides: dict[str, tuple[str, str, Any, str]] = {}
        self.sources: dict[str, str] = {}  # key -> the field an error about it names
        self.origins: dict[str, str] = {}  # key -> provenance label (Plan.sources)
        self.bound: dict[str, str] = {}  # key -> origin, for keys a binding set
        self.effective = None  # verlcheck.Effective once composed
        self.knob_values: dict[str, Any] = {}
        self.entry: tuple[str, ...] = tuple(method.entry)
        self.pools: list[Pool] = []
        self.roles: dict[str, str] = {}
        knobs = dict(self.values.get("knobs") or {})
        prov = spec.provenance
        # Knobs from configs/defaults.yaml count as defaults (below the method's), not user values.
        self.base_knobs = {k: v for k, v in knobs.items() if prov.get(f"knobs.{k}") == "defaults"}
        self.user_knobs = {k: v for k, v in knobs.items() if k not in self.base_knobs}
        self.raw: list[tuple[str, str, str, str]] = []
        labels = list(spec.override_sources)
        for i, text in enumerate(self.values.get("overrides") or []):
            source = labels[i] if i < len(labels) else f"overrides[{i}]"
            try:
                prefix, key, value = rules.split_override(str(text))
            except ValueError:
                if str(text).startswith("~") and "=" not in str(text):
                    self.raw.append((source, "~", str(text).lstrip("~"), ""))
                    continue
                self.error(source, f"{text!r} is not a Hydra override KEY=VALUE (e.g. trainer.val_before_train=False)")
                continue
            self.raw.append((source, prefix, key, value))
        # What the raw overrides really set, dict values flattened: (source, key, value).
        self.user_flat: list[tuple[str, str, Any]] = []
        for source, prefix, key, value in self.raw:
            key = self.effective_key(key)
            parsed = None if prefix == "~" else rules.parse_value(value)
            for leaf, leaf_value in rules.flatten(key, parsed):
                self.user_flat.append((source, leaf, leaf_value))

    # --- recording
    def error(self, field: str, message: str) -> None:
        self.errors.append(SpecError(field, message))

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def set(self, key: str, value: Any, stage: str, prefix: str = "", raw_value: str | None = None,
            source: str | None = None, origin: str | None = None) -> None:
        if key.startswith("+"):
            prefix, key = "+", key[1:]
        text = raw_value if raw_value is not None else rules.hydra_value(value)
        parsed = rules.parse_value(raw_value) if raw_value is not None else value
        self.overrides.pop(key, None)
        self.overrides[key] = (stage, prefix, parsed, text)
        self.sources[key] = source or stage
        self.origins[key] = origin or self._origin(stage, source)
        if stage == "binding":
            self.bound[key] = self.origins[key]

    def _origin(self, stage: str, source: str | None) -> str:
        """Provenance label of an override line: pin:verl/M, default:verl/M, default:sf, the
        layer of a knob (config.yaml, --set, site), a binding's flag, topology, run."""
        method = f"verl/{self.method.name}"
        if stage == "pin":
            return f"pin:{method}"
        if stage == "default":
            name = (source or "").removeprefix("method default ")
            if source and source.startswith("method default ") and name not in self.base_knobs:
                return f"default:{method}"
            return self.layer(f"knobs.{name}") if name in self.base_knobs else "default:sf"
        if stage == "knob":
            return self.layer((source or "").strip())
        if stage == "raw":
            return "--set" if (source or "").startswith("--set") else "config.yaml"
        if stage == "checkpoint":
            return "run"
        return stage  # topology, binding (callers pass the flag)

    def layer(self, dotted: str) -> str:
        """The spec layer a value came from: config.yaml, --set, --model, site, default:sf."""
        label = self.spec.provenance.get(dotted, "config.yaml")
        return {"defaults": "default:sf", "values": "config.yaml", "cli": "--set"}.get(label, label)
    def unset(self, key: str) -> None:
        self.overrides.pop(key, None)

    def get(self, key: str, default: Any = None) -> Any:
        """The value verl will see: from the composed config once compile has it, else from
        the override list gathered so far."""
        if self.effective is not None:
            return self.effective.get(key.lstrip("+"), default)
        entry = self.overrides.get(key.lstrip("+"))
        if entry is None or entry[1] == "~":
            return default
        return entry[2]

    def source_of(self, key: str, fallback: str | None = None) -> str:
        src = self.sources.get(key.lstrip("+"))
        if src in (None, "default", "pin", "binding", "topology", "checkpoint") \
                or (src or "").startswith("method default"):
            return fallback or key
        return src

    def culprit(self, key: str, fallback: str | None = None) -> str:
        """The field to blame for `key`'s value: the last user override that sets it, one of
        its parents (a dict value, a ~delete) or one of its children; else the knob/default."""
        key = key.lstrip("+")
        for source, ukey, _value in reversed(self.user_flat):
            if ukey == key or key.startswith(ukey + ".") or ukey.startswith(key + "."):
                return source
        for name in reversed(list(self.user_knobs)):
            knob = rules.KNOBS.get(name)
            if knob and knob.key and knob.key.lstrip("+") == key:
                return f"knobs.{name}"
        return self.source_of(key, fallback)

    def user_sets(self, key: str) -> bool:
        """Whether a user override sets `key` in any spelling (flat, in a dict value, ~, legacy)."""
        key = key.lstrip("+")
        return any(k == key or key.startswith(k + ".") for _s, k, _v in self.user_flat)

    def check_types(self) -> None:
        """A user value of another type than verl's own default on the composed config: verl's
        YAML is untyped, so `use_kl_loss=no` would reach verl as the (truthy) string 'no'."""
        if self.effective is None:
            return
        names = {bool: "true/false", int: "a whole number", float: "a number"}
        stringy = {k.key.lstrip("+") for k in rules.KNOBS.values() if k.key and k.type in ("threshold", "rs_threshold")}
        for source, key, _value in self.user_flat:
            if key in stringy:  # IcePop's 'LOW_HIGH' is a string where verl's default is a float
                continue
            base = self.effective.base(key)
            value = self.effective.get(key)
            if base is None or value is None or not isinstance(value, str) or type(base) not in names:
                continue
            self.error(source, f"{key}={value!r} is a string, but verl's {key} is {names[type(base)]} "
                       f"(default {rules.hydra_value(base)}); write e.g. {key}={rules.hydra_value(base)}")

    # --- what the user set, for the pinning rules
    @staticmethod
    def effective_key(key: str) -> str:
        """The key a raw override really sets: legacy reward keys count as their reward.*
        rewrite, so a pin or a rule cannot be dodged through the old name."""
        return (rules.legacy_rewrite(key) or key).lstrip("+") if rules.is_legacy(key) else key

    def user_keys(self):
        for source, key, _value in self.user_flat:
            yield source, key
        for name in self.user_knobs:
            if name in rules.KNOBS and rules.KNOBS[name].key:
                yield f"knobs.{name}", rules.KNOBS[name].key.lstrip("+")

    def user_values(self):
        yield from self.user_flat
        for name, raw in self.user_knobs.items():
            knob = rules.KNOBS.get(name)
            if knob and knob.key:
                try:
                    yield f"knobs.{name}", knob.key.lstrip("+"), rules.coerce_knob(name, raw)
                except SpecError:
                    pass

    def source_list(self) -> tuple[str, ...]:
        return tuple(self.origins.get(key, stage) for key, (stage, *_rest) in self.overrides.items())

    def override_list(self) -> tuple[str, ...]:
        out = []
        for key, (_stage, prefix, _value, text) in self.overrides.items():
            if prefix == "~" and text == "":
                out.append(f"~{key}")
            else:
                out.append(f"{prefix}{key}={text}")
        return tuple(out)


def build_pools(spec: MergedSpec, method: catalog.Method, site: Site,
                errors: list[SpecError]) -> tuple[list[Pool], dict]:
    """spec.resources.pools (or one pool of the site's default series), reshaped by --profile."""
    resources = ((spec.values.get("spec") or {}).get("resources") or {})
    declared = list(resources.get("pools") or [])
    roles = dict(resources.get("roles") or {})
    default_series = site.default_series or (next(iter(site.series)) if len(site.series) == 1 else None)
    if not declared:
        declared = [{"name": "train"}]
    profile = spec.values.get("profile")
    if profile:
        try:
            series, nodes, gpn = parse_profile(profile, site)
            declared[0] = {**declared[0], "series": series, "nodes": nodes, "gpus_per_node": gpn}
        except SpecError as exc:
            errors.append(exc)
    pools: list[Pool] = []
    seen = set()
    for i, entry in enumerate(declared):
        name = entry.get("name") or f"pool{i}"
        field = f"spec.resources.pools[{i}]"
        if name in seen:
            errors.append(SpecError(field, f"pool name {name!r} is used twice; give each pool its own name"))
        seen.add(name)
        series_name = entry.get("series") or default_series
        if not series_name:
            errors.append(SpecError(field + ".series", f"no series and site {site.name} has no default_series; "
                                    f"pick one of {', '.join(site.series)} or use --profile SERIES:G"))
            continue
        series = site.series.get(series_name)
        if series is None:
            errors.append(SpecError(field + ".series", f"unknown GPU series {series_name!r} in site {site.name}; "
                                    f"known: {', '.join(sorted(site.series)) or 'none'}"))
            continue
        gpn = int(entry.get("gpus_per_node") or series.gpus_per_node)
        nodes = int(entry.get("nodes") or 1)
        if gpn > series.gpus_per_node:
            errors.append(SpecError(field + ".gpus_per_node", f"{series_name} nodes have {series.gpus_per_node} GPUs, "
                                    f"the pool asks for {gpn}; lower gpus_per_node or add nodes"))
            gpn = series.gpus_per_node
        pools.append(Pool(name=name, series=series_name, nodes=nodes, gpus_per_node=gpn, het_group=i,
                          spare_nodes=int(entry.get("spare_nodes") or 0)))
    if not pools:
        return [], roles
    first = pools[0].name
    for role in DEFAULT_ROLES + (("critic",) if method.critic else ()):
        roles.setdefault(role, first)
    if method.name == "distillation" and "teacher" not in roles and len(pools) >= 2:
        roles["teacher"] = pools[1].name
    with_roles = []
    for p in pools:
        mine = tuple(r for r in ("actor", "rollout", "ref", "critic", "teacher", "reward") if roles.get(r) == p.name)
        with_roles.append(Pool(p.name, p.series, p.nodes, p.gpus_per_node, p.het_group, mine, p.spare_nodes))
    return with_roles, roles


def slurm_options(spec: MergedSpec, site: Site) -> SlurmOptions:
    s = spec.values.get("slurm") or {}
    scheduler = scheduler_options.checked(s, spec.provenance)  # SpecError naming the flag or key
    return SlurmOptions(
        **scheduler,
        account=s.get("account"),
        qos=s.get("qos"),
        time=str(s.get("time") or site.time),
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
    ctx.effective, why_not = verlcache.effective_config(method.config_name, ctx.override_list())
    if why_not:
        ctx.warn(why_not)
    for rule in rules.JUDGES:
        rule(ctx)
    try:
        slurm = slurm_options(spec, site)
    except SpecError as exc:  # a bad scheduler option, reported with the rest
        ctx.errors.append(exc)
    if ctx.errors:
        raise SpecErrors(_dedupe(ctx.errors))

    paths = []
    model = spec.values.get("model")
    for p in [model, *_files(((spec.values.get("data") or {}).get("train") or {}).get("files")),
              *_files(((spec.values.get("data") or {}).get("validation") or {}).get("files")),
              (spec.values.get("teacher") or {}).get("model"), (spec.values.get("reward") or {}).get("model"),
              ((spec.values.get("reward") or {}).get("function") or {}).get("path"), spec.main_py]:
        if p and os.path.isabs(str(p)) and str(p) not in paths:
            paths.append(str(p))
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
        pools=tuple(ctx.pools),
        run_dir=run_dir,
        checkpoint_dir=ctx.checkpoint_dir,
        slurm=slurm,
        env=(("PYTHONUNBUFFERED", "1"),),
        paths_to_check=tuple(paths),
        warnings=tuple(ctx.warnings),
    )


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
