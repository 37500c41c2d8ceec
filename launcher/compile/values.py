"""Hydra override values as text and as Python: how sf reads a `--set` or raw override's
value (parse_scalar, parse_value: Hydra's own parser for dicts and lists) and how it writes
one back (hydra_value). Pure."""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
HYDRA_NUMBERISH = re.compile(r"^[+-]?([0-9_]+\.?[0-9_]*|\.[0-9_]+)([eE][+-]?[0-9_]+)?$|^[+-]?(inf|nan)$", re.I)
BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


def parse_scalar(text: str) -> Any:
    """A `--set` / raw-override value as Hydra would see it (roughly): bool, int, float, null,
    a [list], or the string itself (quotes stripped). A number written with `_` (`1_000`,
    `0.5_5`) stays a string: sf never reads `_` as a digit separator (see coerce_knob)."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    low = t.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("null", "none", "~"):
        return None
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [parse_scalar(p) for p in inner.split(",")] if inner else []
    if not NUMBER.fullmatch(t):
        return t
    try:
        return int(t)
    except ValueError:
        pass
    f = float(t)
    return f if math.isfinite(f) else t


def parse_value(text: str) -> Any:
    """A raw override's value: Hydra's own parser for dicts and lists (`{enable:false}`), so
    sf's rules see what verl will see; parse_scalar for everything else."""
    t = str(text).strip()
    if t[:1] in ("{", "["):
        parsed = _hydra_parse(t)
        if parsed is not _UNPARSED:
            return parsed
    return parse_scalar(t)


_UNPARSED = object()


@lru_cache(maxsize=None)
def _hydra_parser():
    try:
        # lazy: Hydra's parser imports in ~0.3 s, paid only for a dict/list value
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return None
    return OverridesParser.create()


def _hydra_parse(text: str) -> Any:
    parser = _hydra_parser()
    if parser is None:
        return _UNPARSED
    try:
        return parser.parse_override(f"k={text}").value()
    except Exception:
        return _UNPARSED


def flatten(key: str, value: Any):
    """('a', {'b': 1, 'c': {'d': 2}}) -> ('a.b', 1), ('a.c.d', 2): the keys a dict-valued
    override really sets (Hydra merges a dict into the node)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from flatten(f"{key}.{k}", v)
    else:
        yield key, value


_SAFE = re.compile(r"^[A-Za-z0-9_./:+@~-]+$")


def hydra_value(value: Any) -> str:
    """Format a Python value for a Hydra command-line override. A string that Hydra would
    read as something else (a number such as `0.5_5`, a bool, null) is quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if text and _SAFE.fullmatch(text) and text.lower() not in ("true", "false", "null", "none") \
            and not HYDRA_NUMBERISH.fullmatch(text):
        return text
    # Hydra keeps a backslash in a quoted value as it is, but where backslashes precede a quote
    # (or the closing one): those it reads in pairs. Doubling every backslash reached verl doubled.
    body = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + body.replace("'", "\\'") + "'"


def is_number(v) -> bool:
    """An int or float, not a bool (True is an int to Python, never a number to verl)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
