"""Hydra's override grammar as sf reads it, with no verl needed: the split of one override,
the fast parse of the plain ones (Hydra's ANTLR parser for the rest), and the overrides the
grammar cannot read, each with how to quote it. launcher.verlcheck composes with these."""

from __future__ import annotations

import re
from functools import lru_cache

from launcher.errors import SpecError

# Hydra's override grammar (hydra/grammar/OverrideLexer.g4, hydra-core 1.3) for the plain
# overrides sf writes: a dotted identifier key, no whitespace, and a value of the characters
# [A-Za-z0-9_./-] (or a flat list of such values). Such a value is one INT, FLOAT, BOOL or
# NULL token when it is that token whole, else a string of its own text (Hydra concatenates
# a primitive of several tokens); anything else goes to Hydra's ANTLR parser, whose first
# parse in a process costs ~15 ms of every cold dry run. tests/unit/test_verlcheck.py holds
# the two parsers equal.
_PLAIN_KEY = re.compile(r"(\+\+|\+|~)?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./-]+")
_PLAIN_LIST = re.compile(r"\[(?:[A-Za-z0-9_./-]+(?:,[A-Za-z0-9_./-]+)*)?\]")
_INT_UNSIGNED = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT_FLOAT = rf"(?:{_INT_UNSIGNED}\.|{_INT_UNSIGNED}?\.[0-9](?:_?[0-9])*)"
_HYDRA_INT = re.compile(rf"[+-]?{_INT_UNSIGNED}")
_HYDRA_FLOAT = re.compile(rf"[+-]?(?:(?:{_INT_UNSIGNED}|{_POINT_FLOAT})[eE][+-]?[0-9](?:_?[0-9])*|{_POINT_FLOAT}"
                          r"|[Ii][Nn][Ff]|[Nn][Aa][Nn])")


def _plain_primitive(text: str):
    """The value Hydra's parser gives a value of [A-Za-z0-9_./-] characters."""
    if _HYDRA_INT.fullmatch(text):
        return int(text)
    if _HYDRA_FLOAT.fullmatch(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "null":
        return None
    return text


def plain_override(text: str):
    """Hydra's Override of `text` when it is a plain override (see above), else None."""
    from hydra.core.override_parser.types import Override, OverrideType, ValueType  # lazy: Hydra import cost

    key_text, eq, value = text.partition("=")
    key = _PLAIN_KEY.fullmatch(key_text)
    if key is None:
        return None
    prefix, dotted = key.group(1) or "", key.group(2)
    kind = {"": OverrideType.CHANGE, "+": OverrideType.ADD, "++": OverrideType.FORCE_ADD, "~": OverrideType.DEL}[prefix]
    if not eq:
        if kind is not OverrideType.DEL:
            return None
        parsed, value_type = None, None
    elif _PLAIN_VALUE.fullmatch(value):
        parsed, value_type = _plain_primitive(value), ValueType.ELEMENT
    elif _PLAIN_LIST.fullmatch(value):
        items = value[1:-1]
        parsed, value_type = [_plain_primitive(v) for v in items.split(",")] if items else [], ValueType.ELEMENT
    else:
        return None
    override = Override(type=kind, key_or_group=dotted, _value=parsed, value_type=value_type, package=None)
    override.input_line = text
    override.validate()
    return override


@lru_cache(maxsize=None)
def _grammar_is_known() -> bool:
    """Whether the installed Hydra's override grammar is the one plain_override follows (1.3)."""
    import hydra  # lazy: Hydra import cost (imported by the compose already when this runs)

    return str(getattr(hydra, "__version__", "")).startswith("1.3.")


def parse_overrides(overrides, parser_class) -> list:
    """Hydra's parse of `overrides`: the plain ones here (with the Hydra whose grammar that
    follows), the rest by `parser_class` (Hydra's OverridesParser), in order."""
    parsed, hydra_parser = [], None
    known = _grammar_is_known()
    for text in overrides:
        override = plain_override(text) if known else None
        if override is None:
            hydra_parser = hydra_parser or parser_class.create()
            override = hydra_parser.parse_overrides([text])[0]
        parsed.append(override)
    return parsed


def split_override(override: str) -> tuple[str, str, str]:
    """'++a.b=1' -> ('++', 'a.b', '1'): the prefix, the key and the value as written."""
    key, _, value = override.partition("=")
    prefix = ""
    while key[:1] in "+~":
        prefix += key[0]
        key = key[1:]
    return prefix, key, value


def grammar_errors(overrides) -> list[SpecError]:
    """Overrides Hydra's grammar cannot read, each under the key the user wrote, with how to
    quote the value (a space, `;`, brackets or quotes in a --set value)."""
    try:
        # lazy: Hydra/OmegaConf import cost (~0.3 s)
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:  # pragma: no cover (the compose check needs Hydra anyway)
        return []
    parser = OverridesParser.create()
    errors = []
    for text in overrides:
        try:
            parser.parse_override(text)
        except Exception:
            prefix, key, value = split_override(text)
            if any(ord(c) < 32 or ord(c) == 127 for c in value):  # quoting it would print the break in the hint
                errors.append(SpecError(key or text, f"value {value!r} holds a line break or another control "
                                        "character; write the value on one line without it"))
                continue
            quoted = value.replace("\\", "\\\\").replace('"', '\\"')
            errors.append(SpecError(key or text, f"value {value!r} is not valid Hydra override syntax (spaces, ;, ( ), "
                                    f"[ ], {{ }}, quotes and commas must be quoted); quote it: "
                                    f"--set '{prefix}{key}=\"{quoted}\"' (in config.yaml: - "
                                    f"'{prefix}{key}=\"{quoted}\"')"))
    return errors
