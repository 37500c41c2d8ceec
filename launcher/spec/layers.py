"""Where a value came from, typed: the layer it entered in (and the flag, method or file that
carried it), made where the value enters (load_spec, the CLI flags, the sweep point, compile's
rules) and read by the resolution, the rules and the messages. The text people see (`sf
validate`'s `[--set]`, Plan.sources' `pin:verl/grpo`) is made here alone, by `label` and
`spec_label`; nothing reads a label back into a layer (tests/unit/test_layers.py holds
launcher/spec and launcher/compile to that).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Layer(Enum):
    """The layers of one resolution, lowest first; the owners (pin, binding, topology, run)
    outrank all and refuse a conflicting write."""

    DEFAULTS = "default:sf"  # configs/defaults.yaml
    METHOD = "method"  # the method recipe's defaults
    SF = "sf"  # what a rule adds only when nothing else set the key
    RUNTIME = "runtime"  # the runtime registry's overrides for the verl config
    SITE = "site"  # the site file
    CONFIG = "config.yaml"  # experiments/NAME/config.yaml
    SET = "--set"  # the command line: --set and the other spec flags (--model, --account, ...)
    SWEEP = "sweep"  # the sweep point (above --set)
    PIN = "pin"  # the method's pins
    BINDING = "binding"  # model, data, reward function, teacher: a spec field or flag bound to verl keys
    TOPOLOGY = "topology"  # the pools
    RUN = "run"  # the run itself (checkpoint dir)

    @property
    def label(self) -> str:
        """The layer's name in messages and in the resolved map (`written twice in --set`)."""
        return self.value

    # set below, once per member (resolve reads them for every write: no lookups)
    rank: int  # the place in ORDER; an owner outranks all
    owner: bool  # pin, binding, topology, run
    user_input: bool  # an input layer: a key written twice in one of these is an error


ORDER = (Layer.DEFAULTS, Layer.METHOD, Layer.SF, Layer.RUNTIME, Layer.SITE, Layer.CONFIG, Layer.SET, Layer.SWEEP)
OWNERS = (Layer.PIN, Layer.BINDING, Layer.TOPOLOGY, Layer.RUN)
INPUT_LAYERS = (Layer.SITE, Layer.CONFIG, Layer.SET, Layer.SWEEP)
for _layer in Layer:
    _layer.owner = _layer in OWNERS
    _layer.rank = 100 if _layer.owner else ORDER.index(_layer)
    _layer.user_input = _layer in INPUT_LAYERS


@dataclass(frozen=True)
class Origin:
    """Where one value entered: its layer and, where it matters, what carried it."""

    layer: Layer
    flag: str | None = None  # the command-line flag that carried it (--model, --account, --set)
    method: str | None = None  # a pin's or a recipe default's method (grpo)
    path: str | None = None  # the file it was read from (config.yaml, the site file)

    def __post_init__(self) -> None:
        if not isinstance(self.layer, Layer):
            raise TypeError(f"Origin.layer must be a Layer, not {self.layer!r}")

    @property
    def label(self) -> str:
        """Plan.sources and the resolved map's `source`: pin:verl/M, default:verl/M, default:sf,
        the flag, else the layer."""
        if self.flag:
            return self.flag
        if self.layer is Layer.PIN:
            return f"pin:verl/{self.method}"
        if self.layer is Layer.METHOD:
            return f"default:verl/{self.method}"
        if self.layer is Layer.SF:
            return "default:sf"
        return self.layer.label

    @property
    def spec_label(self) -> str:
        """A spec value's layer as `sf validate` shows it (MergedSpec.provenance): defaults,
        site, config.yaml, the flag, sweep; `cli` for a command-line value no flag names."""
        if self.flag:
            return self.flag
        return {Layer.DEFAULTS: "defaults", Layer.SET: "cli"}.get(self.layer, self.layer.label)


DEFAULTS = Origin(Layer.DEFAULTS)
SITE = Origin(Layer.SITE)
CONFIG = Origin(Layer.CONFIG)
SWEEP = Origin(Layer.SWEEP)


def from_flag(name: str) -> Origin:
    """A value a command-line flag carried (--model, --account, --set)."""
    return Origin(Layer.SET, flag=name)


def overrides_label(layers) -> str:
    """The `overrides` list's layer in MergedSpec.provenance: config.yaml, --set or both."""
    names = {"config.yaml" if layer is Layer.CONFIG else "--set" for layer in layers
             if layer in (Layer.CONFIG, Layer.SET, Layer.SWEEP)}
    return "+".join(sorted(names))
