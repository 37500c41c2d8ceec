"""One resolution step: every input that reaches a verl key, resolved into ONE map keyed by
the verl key (pure).

Inputs are `Write`s: method defaults and pins, the runtime's default overrides, the site,
config.yaml's knobs (and their aliases) and raw overrides in every Hydra spelling (dotted
`a.b=v`, a dict value `a={b: v}` flattened to its leaves, `+a.b`, `++a.b`, `~a.b`, a legacy
top-level reward key as the reward.* key verl 0.9.1 reads), `--set` in order, the sweep
point, and sf's bindings (model, data, pools, checkpoint dir). A knob, its alias and a raw
override that reach one key are one key.

One precedence, the same for every key (lowest first):

    default:sf  <  method  <  sf  <  runtime  <  site  <  config.yaml  <  --set  <  sweep

(`default:sf` is configs/defaults.yaml, `method` the method recipe's defaults, `sf` what a
rule adds only when nothing else set the key: rollout.name, no validation data, ...). Method
pins and sf's bindings (`pin`, `binding`, `topology`, `run`) outrank all and REFUSE a
conflicting write: an error naming the key, the layer and how to fix it. Two writes of one
key (or of a key and one of its parents) in one input layer are an error. The winning write
of each key keeps the writes it overrode, so `sf validate` shows
`actor_rollout_ref.rollout.n = 6 [--set] (overrides 3 from config.yaml)`.

`emit` turns the map into the overrides verl gets, one per key: owners first, then by layer,
so a higher layer's `~a.b` comes after a lower layer's `a.b.c=...` (Hydra applies them in
order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from launcher.errors import SpecError
from launcher.spec.layers import INPUT_LAYERS, ORDER, OWNERS, Layer, Origin  # noqa: F401 (the rules read them here)

LAYERS = ORDER  # the precedence above, lowest first (launcher.spec.layers.Layer)

# ops: "=" (plain), "+" (add a key verl's config lacks), "++" (add or override), "~" (delete),
# "default" (verl's own default: nothing is emitted, lower layers are overridden)
DELETE, DEFAULT = "~", "default"


@dataclass(frozen=True)
class Write:
    key: str  # the verl key it reaches (no +/~ prefix)
    value: Any  # the typed value (None for a delete)
    layer: Layer  # its place in the precedence (one of LAYERS or OWNERS)
    field: str  # what an error about it names: knobs.rollout_n, overrides[2], --set a.b, --model
    origin: Origin  # where the value came from; its label is the override line's provenance (Plan.sources)
    op: str = "="
    text: str | None = None  # the Hydra value as written (raw overrides); None: formatted from value
    seq: int = 0  # order of arrival (ties inside a layer; emission order)
    item: int = -1  # the input item it came from (the leaves of one dict value share it)
    knob: bool = False  # written by a knob (not a raw override or a rule)

    def __post_init__(self) -> None:
        # typed, never a label: nothing downstream reads a layer back out of a text
        if not isinstance(self.layer, Layer) or not isinstance(self.origin, Origin):
            raise TypeError(f"a Write takes a Layer and an Origin, not {self.layer!r} and {self.origin!r}")

    @property
    def rank(self) -> int:
        return self.layer.rank

    @property
    def owner(self) -> bool:
        return self.layer.owner

    def replaces_subtree(self) -> bool:
        """A delete, or a value that is not a dict, replaces everything below the key."""
        return self.op == DELETE or not isinstance(self.value, dict)


@dataclass
class Entry:
    """One verl key: the write that wins and the lower writes it overrides."""

    key: str
    write: Write
    overridden: list[Write] = field(default_factory=list)

    @property
    def value(self) -> Any:
        return self.write.value

    @property
    def layer(self) -> Layer:
        return self.write.layer

    @property
    def origin(self) -> Origin:
        return self.write.origin

    def override(self, format_value: Callable[[Any], str]) -> str | None:
        """The one Hydra override of this key, or None (verl's own default)."""
        w = self.write
        if w.op == DEFAULT:
            return None
        if w.op == DELETE:
            return f"~{w.key}" if w.text in (None, "") else f"~{w.key}={w.text}"
        prefix = "" if w.op == "=" else w.op
        return f"{prefix}{w.key}={w.text if w.text is not None else format_value(w.value)}"


@dataclass
class Conflict:
    """A write the owner of its key refuses: `write` tried to change `owner`'s key."""

    write: Write
    owner: Write


@dataclass
class Resolution:
    entries: dict[str, Entry]  # verl key -> Entry, in emission order
    errors: list[SpecError]
    conflicts: list[Conflict]

    def get(self, key: str, default: Any = None) -> Any:
        entry = self.entries.get(key)
        if entry is None or entry.write.op in (DELETE, DEFAULT):
            return default
        return entry.write.value

    def overrides(self, format_value: Callable[[Any], str]) -> list[tuple[str, str]]:
        """(override text, provenance) per key, in emission order."""
        out = []
        for entry in self.entries.values():
            text = entry.override(format_value)
            if text is not None:
                out.append((text, entry.origin.label))
        return out


def _parents(key: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]: the keys a write of `key` lies below."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def twice_in_a_layer(writes: list[Write]) -> list[SpecError]:
    """Two writes of one key (or of a key and its parent) by different items of one input layer."""
    errors: list[SpecError] = []
    # for each write, the earliest related write of another item, found through the key's
    # parents and children (linear in the writes, not pairwise: a spec of thousands of
    # overrides must not tie up the login node)
    by_key: dict[tuple[str, str], list[tuple[int, Write]]] = {}
    below: dict[tuple[str, str], list[tuple[int, Write]]] = {}
    for index, w in enumerate(writes):
        if not w.layer.user_input:
            continue
        parents = _parents(w.key)
        candidates = [*by_key.get((w.layer, w.key), ()), *below.get((w.layer, w.key), ()),
                      *(hit for p in parents for hit in by_key.get((w.layer, p), ()))]
        other = min(((i, o) for i, o in candidates if o.item != w.item), key=lambda pair: pair[0], default=None)
        if other is not None:
            other = other[1]
            where = w.key if w.key == other.key else f"{other.key} and {w.key}"
            errors.append(SpecError(w.field, f"{where} is written twice in {w.layer.label} "
                                    f"({other.field} and {w.field}); keep one of them"))
        by_key.setdefault((w.layer, w.key), []).append((index, w))
        for p in parents:
            below.setdefault((w.layer, p), []).append((index, w))
    return errors


def resolve(writes: list[Write]) -> Resolution:
    """Resolve `writes` into one entry per verl key (see the module docstring)."""
    conflicts: list[Conflict] = []
    owners: dict[str, Write] = {}
    for w in writes:
        if w.owner:
            owners[w.key] = w  # the last owner write of a key stands (sf's own order)
    errors: list[SpecError] = twice_in_a_layer(writes)
    # owners refuse a conflicting write: the same key with another value, or a parent replaced
    kept: list[Write] = []
    for w in writes:
        if not w.owner:
            hit = None
            for key, owner in owners.items():
                if w.key == key:
                    if w.op in (DELETE, DEFAULT) or w.value != owner.value:
                        hit = owner
                elif key.startswith(w.key + ".") and w.replaces_subtree():
                    hit = owner
                if hit is not None:
                    break
            if hit is not None:
                conflicts.append(Conflict(w, hit))
                continue
        kept.append(w)
    # the highest layer wins each key (a later write wins inside a layer: sf's own rule defaults)
    entries: dict[str, Entry] = {}
    for w in sorted(kept, key=lambda w: (w.rank, w.seq)):
        entry = entries.get(w.key)
        if entry is None:
            entries[w.key] = Entry(w.key, w)
        else:
            entry.overridden.append(entry.write)
            entry.write = w
    # a delete (or a non-dict value) replaces the lower writes below its key
    children: dict[str, list[str]] = {}
    for key in entries:
        for p in _parents(key):
            children.setdefault(p, []).append(key)
    for entry in list(entries.values()):
        w = entry.write
        if not w.replaces_subtree():
            continue
        for key in [k for k in children.get(w.key, ()) if k in entries]:
            under = entries[key]
            if under.write.rank < w.rank:
                entry.overridden.extend([*under.overridden, under.write])
                del entries[key]
    ordered = sorted(entries.values(), key=lambda e: (0 if e.write.owner else 1, e.write.rank, e.write.seq))
    return Resolution({e.key: e for e in ordered}, errors, conflicts)


def conflict_message(conflict: Conflict, format_value: Callable[[Any], str]) -> str:
    """The generic refusal: the key, the layer that wrote it, the owner and how to fix it."""
    w, owner = conflict.write, conflict.owner
    what = {Layer.PIN: f"pinned to {format_value(owner.value)} by verl/{owner.origin.method}",
            Layer.BINDING: f"set by {owner.origin.label}", Layer.TOPOLOGY: "set from the pools",
            Layer.RUN: "set by sf for the run"}[owner.layer]
    fix = {Layer.PIN: "remove it, or pick the method that runs what you want",
           Layer.BINDING: f"change {owner.origin.label} instead",
           Layer.TOPOLOGY: "use --profile or spec.resources.pools instead", Layer.RUN: "remove it"}[owner.layer]
    return f"{owner.key} is {what}; {w.layer.label} ({w.field}) cannot change it: {fix}"


def as_dict(entry: Entry, format_value: Callable[[Any], str]) -> dict:
    """An entry for JSON (sf validate --json, plan.json)."""
    def one(w: Write) -> dict:
        return {"value": None if w.op in (DELETE, DEFAULT) else _plain(w.value), "op": w.op, "layer": w.layer.label,
                "source": w.origin.label, "field": w.field}

    return {**one(entry.write), "overrides": [one(w) for w in reversed(entry.overridden)]}


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def shown_dict(item: dict, hydra_value: Callable[[Any], str]) -> str:
    """`6    [--set] (overrides 3 from config.yaml)` from an entry of Plan.resolved (as_dict),
    values formatted by `hydra_value` (launcher.compile.values.hydra_value)."""
    def text(one: dict) -> str:
        if one["op"] == DELETE:
            return "<deleted>"
        if one["op"] == DEFAULT:  # compile fills in the value verl's default has, where it composed
            return "<verl's default>" if one["value"] is None else f"{hydra_value(one['value'])} (verl's default)"
        return hydra_value(one["value"])

    out = f"{text(item)}    [{item['source']}]"
    lower = next((o for o in item.get("overrides") or () if o["source"] != item["source"]), None)  # a layer once
    if lower:
        out += f" (overrides {text(lower)} from {lower['source']})"
    return out
