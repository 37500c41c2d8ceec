"""Values typed as verl reads them: each resolved key a user layer wrote is compared with
the composed config (launcher.verlcheck.Effective). verl's YAML is untyped, so a
spelling that composes may still reach verl as another type than the key's: `rollout.n=1.0`
(a float where verl counts), `null` where verl has a number, `use_kl_loss=no` (a truthy
string), `~trainer.save_freq` (a key verl reads, deleted). Each is refused naming the key.

The type of a key is verl's own default's type; where verl's default is null or the key is
not in verl's config (`+reward.reward_kwargs.*`), the type of the knob that sets it.
"""

from __future__ import annotations

from launcher import verlfields
from launcher.compile import resolve
from launcher.compile.knobs import KNOBS
from launcher.compile.values import hydra_value

_NAMES = {bool: "true/false", int: "a whole number", float: "a number", str: "a string"}
_KNOB_TYPES = {"int": int, "float": float, "bool": bool}
_ABSENT = object()
# Keys whose null verl 0.9.1's code reads as a choice, not a missing number:
# fully_async_rollouter.py:406 (null: run total_epochs over the data, no prompt cap).
NULL_IS_A_CHOICE = frozenset({"rollout.total_rollout_steps"})


def _knob_type(key: str):
    for knob in KNOBS.values():
        for k in (knob.key, knob.sft_key):
            if k and k.lstrip("+") == key and knob.type in _KNOB_TYPES:
                return _KNOB_TYPES[knob.type]
    return None


def _stringy() -> set[str]:
    """Keys checked by their own rules: a number or a 'LOW_HIGH' string (IcePop), resume_mode."""
    return {k.key.lstrip("+") for k in KNOBS.values() if k.key and k.type in ("threshold", "rs_threshold")} | {
        "trainer.resume_mode"}


def _annotation(ctx, key: str) -> str | None:
    """The annotation of `key`'s field in the dataclass its parent node targets (`_target_`)."""
    parent, _, leaf = key.rpartition(".")
    target = ctx.effective.base(f"{parent}._target_") if parent else None
    annotations = verlfields.field_annotations(target) if isinstance(target, str) else None
    return (annotations or {}).get(leaf)


def expected_type(ctx, key: str):
    """(type, default text) verl reads `key` as, or (None, None) when unknown."""
    base = ctx.effective.base(key) if ctx.effective is not None else None
    kind = _knob_type(key)
    if isinstance(base, (bool, int, float, str)):
        if kind is float and type(base) is int:  # verl's YAML says 0 where its dataclass says float
            return float, hydra_value(base)
        return type(base), hydra_value(base)
    return (kind, None) if kind is not None else (None, None)


def problems(ctx) -> list[tuple[str, str]]:
    """(field, message) for each user-written key whose value verl would read as another type."""
    out: list[tuple[str, str]] = []
    stringy = _stringy()
    for key, entry in ctx.resolution.entries.items():
        w = entry.write
        if w.layer not in resolve.INPUT_LAYERS or w.op == resolve.DEFAULT or key in stringy:
            continue
        kind, default = expected_type(ctx, key)
        if kind is None:
            continue
        want = _NAMES[kind]
        dflt = f" (default {default})" if default is not None else ""
        example = default if default is not None else {bool: "true", int: "4", float: "1.0", str: "NAME"}[kind]
        if w.op == resolve.DELETE:
            if default is not None:
                out.append((w.field, f"~{key} deletes a key verl reads ({want}{dflt}); verl 0.9.1 would fail or "
                                     f"fall back to another behaviour: give it a value instead, e.g. {key}={example}"))
            continue
        value = ctx.effective.get(key, _ABSENT) if ctx.effective is not None else w.value
        if value is _ABSENT:
            continue
        if isinstance(value, (dict, list)):
            # a count, a rate or a switch is never a list or a mapping (verl fails on it after Ray
            # started); a string key may be (data files take a list of paths)
            if kind is not str:
                got = "a mapping" if isinstance(value, dict) else "a list"
                out.append((w.field, f"{key}={hydra_value(value)} is {got}, but verl's {key} is {want}{dflt}; "
                                     f"write one value, e.g. {key}={example}"))
            continue
        if value is None:
            if default is not None and key not in NULL_IS_A_CHOICE:
                out.append((w.field, f"{key}=null, but verl's {key} is {want}{dflt}; a null reaches verl's code as "
                                     f"None: give a value, e.g. {key}={example}"))
            continue
        if kind is str or isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if isinstance(value, str):
            out.append((w.field, f"{key}={value!r} is a string, not {want}: verl's {key} is {want}{dflt}; "
                                 f"write e.g. {key}={example}"))
        elif kind is int and isinstance(value, float):
            if "float" in (_annotation(ctx, key) or ""):  # verl's dataclass takes a float here
                continue
            fix = f"{key}={int(value)}" if value.is_integer() else f"a whole number, e.g. {key}={example}"
            out.append((w.field, f"{key}={hydra_value(value)} is a float, but verl's {key} is {want}{dflt}; "
                                 f"write {fix}"))
        else:
            got = _NAMES.get(type(value), type(value).__name__)
            out.append((w.field, f"{key}={hydra_value(value)} is {got}, "
                                 f"but verl's {key} is {want}{dflt}; write e.g. {key}={example}"))
    return out


def unresolved(ctx) -> list[tuple[str, str]]:
    """(field, message) for each user-written key whose `${...}` interpolation does not resolve in
    the composed config: verl fails reading it, and every rule would judge a value that never runs."""
    out: list[tuple[str, str]] = []
    if ctx.effective is None:
        return out
    for key, entry in ctx.resolution.entries.items():
        w = entry.write
        if w.layer not in resolve.INPUT_LAYERS or w.op in (resolve.DELETE, resolve.DEFAULT):
            continue
        text = w.text if w.text is not None else hydra_value(w.value)
        if "${" not in str(text):
            continue
        why = ctx.effective.unresolved(key)
        if why:
            out.append((w.field, f"{key}={text} does not resolve in verl's config ({why}); verl would fail reading it: "
                                 "point the interpolation at a key verl has, or write the value"))
    return out


def _element_kind(items: list):
    """The one type of a list's elements (float for numbers), or None when mixed or not scalar."""
    kinds = {float if type(v) in (int, float) else type(v) for v in items}
    return kinds.pop() if len(kinds) == 1 and kinds <= {bool, float, str} else None


def list_problems(ctx) -> list[tuple[str, str]]:
    """(field, message) for each user-written list verl's own default fixes the shape of: a list
    of numbers keeps its length (`optim.betas`, `profile_interval`: verl and torch unpack it),
    and every element keeps the default's element type (`trainer.logger=[console,1]`)."""
    out: list[tuple[str, str]] = []
    if ctx.effective is None:
        return out
    for key, entry in ctx.resolution.entries.items():
        w = entry.write
        if w.layer not in resolve.INPUT_LAYERS or w.op in (resolve.DEFAULT, resolve.DELETE):
            continue
        base, value = ctx.effective.base(key), ctx.effective.get(key, _ABSENT)
        if not (isinstance(base, list) and base and isinstance(value, list)):
            continue
        kind = _element_kind(base)
        if kind is None:
            continue
        shown, example = f"{key}={hydra_value(value)}", f"{key}={hydra_value(base)}"
        wrong = [v for v in value if (float if type(v) in (int, float) else type(v)) is not kind]
        if wrong:
            out.append((w.field, f"{shown}: {hydra_value(wrong[0])} is not {_NAMES[kind]}, but every element of "
                                 f"verl's {key} is (default {hydra_value(base)}); write e.g. {example}"))
        elif kind is float and len(value) != len(base):
            out.append((w.field, f"{shown} has {len(value)} element{'s' if len(value) != 1 else ''}, but verl's {key} "
                                 f"takes {len(base)} (default {hydra_value(base)}); write e.g. {example}"))
    return out

