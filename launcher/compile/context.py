"""What the rules read and write while one spec compiles (Ctx), and the spec's inputs in their
typed layers: raw overrides and knobs (launcher.spec.layers: made where each value entered,
never read back out of a label)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, NamedTuple

from launcher.compile import catalog, resolve
from launcher.compile.values import hydra_value, parse_value
from launcher.errors import SpecError
from launcher.spec.experiment import MergedSpec, split_override
from launcher.spec.layers import CONFIG, ORDER, Layer, Origin
from launcher.spec.site import Site


class RawOverride(NamedTuple):
    """One raw Hydra override of config.yaml, --set or the sweep point."""

    field: str  # what an error names: overrides[2], --set a.b, sweep a.b
    prefix: str  # "", "+", "++", "~"
    key: str
    value: str
    layer: Layer  # the layer it entered in (MergedSpec.override_layers)


class Ctx:
    """What the rules read and write while one spec compiles. Every value that reaches a verl
    key is a resolve.Write in its layer; `resolution` is the one map they resolve into."""

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
        self.writes: list[resolve.Write] = []
        self._resolution: resolve.Resolution | None = None
        self._item = 0
        self.effective = None  # verlcheck.Effective once composed
        self.entry: tuple[str, ...] = tuple(method.entry)
        self.pools: list = []
        self.roles: dict[str, str] = {}
        self.knob_layers = knob_layers(spec)
        self.recipe_defaults: dict = dict(method.defaults)
        # Knobs from configs/defaults.yaml count as defaults (below the method's), not user values.
        self.base_knobs = dict(next((k for layer, k in self.knob_layers if layer is Layer.DEFAULTS), {}))
        # each raw override of config.yaml, --set and the sweep point, in its layer
        self.raw: list[RawOverride] = raw_overrides(spec, self.errors)

    # --- recording
    def error(self, field: str, message: str) -> None:
        self.errors.append(SpecError(field, message))

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def next_item(self) -> int:
        self._item += 1
        return self._item

    def write(self, w: resolve.Write) -> None:
        self.writes.append(replace(w, seq=len(self.writes), item=w.item if w.item >= 0 else self.next_item()))
        self._resolution = None

    def set(self, key: str, value: Any, layer: Layer, prefix: str = "", raw_value: str | None = None,
            field: str | None = None, origin: Origin | None = None, item: int = -1, knob: bool = False) -> None:
        """Write `key` in `layer`; `origin` (where the value came from) defaults to the layer's
        own (a pin's and a recipe default's name the method)."""
        if key.startswith("+"):
            prefix, key = "+", key[1:]
        op = prefix or "="
        if prefix == "~":
            value = None
        elif raw_value is not None:
            value = parse_value(raw_value)
        if origin is None:
            origin = Origin(layer, method=self.method.name) if layer in (Layer.PIN, Layer.METHOD) else Origin(layer)
        self.write(resolve.Write(key, value, layer, field or key, origin, op,
                                 raw_value if prefix == "~" or raw_value is not None else None, item=item, knob=knob))

    def origin_of(self, dotted: str) -> Origin:
        """Where a spec value came from (config.yaml, a flag, the site, configs/defaults.yaml)."""
        return self.spec.origins.get(dotted, CONFIG)

    # --- the one map
    @property
    def resolution(self) -> resolve.Resolution:
        if self._resolution is None:
            self._resolution = resolve.resolve(self.writes)
        return self._resolution

    @property
    def overrides(self) -> dict[str, tuple[Layer, str, Any, str]]:
        """key -> (layer, prefix, value, text) of each resolved key (verl's own default left out)."""
        out = {}
        for key, entry in self.resolution.entries.items():
            w = entry.write
            if w.op == resolve.DEFAULT:
                continue
            prefix = "" if w.op == "=" else w.op
            out[key] = (w.layer, prefix, w.value, w.text if w.text is not None else hydra_value(w.value))
        return out

    @property
    def bound(self) -> dict[str, Origin]:
        """key -> where its value came from, for keys a binding set."""
        return {w.key: w.origin for w in self.writes if w.layer is Layer.BINDING}

    def get(self, key: str, default: Any = None) -> Any:
        """The value verl will see: from the composed config once compile has it, else from
        the resolved map so far."""
        if self.effective is not None:
            return self.effective.get(key.lstrip("+"), default)
        return self.resolution.get(key.lstrip("+"), default)

    def user_writes(self) -> list[resolve.Write]:
        """The writes of the input layers (site, config.yaml, --set, sweep), lowest first."""
        return [w for w in sorted(self.writes, key=lambda w: (w.rank, w.seq)) if w.layer.user_input]

    def source_of(self, key: str, fallback: str | None = None) -> str:
        entry = self.resolution.entries.get(key.lstrip("+"))
        if entry is None or not entry.layer.user_input:
            return fallback or key
        return entry.write.field

    def culprit_write(self, key: str) -> resolve.Write | None:
        """The highest user write that sets `key`, one of its parents (a dict value, a
        ~delete) or one of its children; else the input write that won `key`; else None."""
        key = key.lstrip("+")
        for w in reversed(self.user_writes()):
            if w.key == key or key.startswith(w.key + ".") or w.key.startswith(key + "."):
                return w
        entry = self.resolution.entries.get(key)
        return entry.write if entry is not None and entry.layer.user_input else None

    def culprit(self, key: str, fallback: str | None = None) -> str:
        """The field to blame for `key`'s value (culprit_write's), else the knob/default."""
        w = self.culprit_write(key)
        return w.field if w is not None else fallback or key.lstrip("+")

    def user_sets(self, key: str) -> bool:
        """Whether a user write sets `key` in any spelling (knob, flat, dict value, ~, legacy)."""
        key = key.lstrip("+")
        return any(w.key == key or key.startswith(w.key + ".") for w in self.user_writes())

    # --- what the user set, for the pinning rules
    def user_keys(self):
        for w in self.user_writes():
            yield w.field, w.key

    def user_values(self):
        for w in self.user_writes():
            yield w.field, w.key, w.value

    def source_list(self) -> tuple[str, ...]:
        return tuple(origin for _text, origin in self.resolution.overrides(hydra_value))

    def override_list(self) -> tuple[str, ...]:
        return tuple(text for text, _origin in self.resolution.overrides(hydra_value))


def raw_overrides(spec: MergedSpec, errors: list[SpecError]) -> list[RawOverride]:
    """Each raw override (config.yaml's, --set's, the sweep point's) with its field and the
    layer it entered in; `~key` deletes; one that is no KEY=VALUE is an error."""
    raw = []
    fields, layers = list(spec.override_sources), list(spec.override_layers)
    for i, text in enumerate(spec.values.get("overrides") or []):
        source = fields[i] if i < len(fields) else f"overrides[{i}]"
        layer = layers[i] if i < len(layers) else Layer.CONFIG
        try:
            prefix, key, value = split_override(str(text))
        except ValueError:
            if str(text).startswith("~") and "=" not in str(text):
                raw.append(RawOverride(source, "~", str(text).lstrip("~"), "", layer))
                continue
            errors.append(SpecError(source, f"{text!r} is not a Hydra override KEY=VALUE "
                                    "(e.g. trainer.val_before_train=False)"))
            continue
        raw.append(RawOverride(source, prefix, key, value, layer))
    return raw


def knob_layers(spec: MergedSpec) -> list[tuple[Layer, dict]]:
    """[(layer, {knob: value})], lowest first: from load_spec's layers, else from the merged
    knobs and the layer each came from."""
    if getattr(spec, "knob_layers", None):
        return [(layer, dict(knobs)) for layer, knobs in spec.knob_layers]
    by_layer: dict[Layer, dict] = {}
    for name, value in (spec.values.get("knobs") or {}).items():
        layer = spec.origins.get(f"knobs.{name}", CONFIG).layer
        by_layer.setdefault(layer if layer in ORDER else Layer.CONFIG, {})[name] = value
    return sorted(by_layer.items(), key=lambda kv: kv[0].rank)
