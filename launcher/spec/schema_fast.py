"""A fast, conservative check of config.yaml against its JSON Schema: `surely_valid(data,
schema)` is True only when jsonschema would find no error too (every keyword the schema uses
is checked at least as strictly: an int is not a bool, an enum matches by type and value, a
oneOf branch counts as failing only on a type no instance of its kind can have). A valid spec
then needs no `import jsonschema` (about 40 ms of a cold `sf submit --dry-run`); anything
else is judged, and explained, by jsonschema itself (launcher.spec.experiment.schema_errors).
Pure; standard library only.
"""

from __future__ import annotations

import re
from functools import lru_cache

_KNOWN = {"$id", "$schema", "title", "description", "type", "properties", "additionalProperties", "required",
          "enum", "items", "minItems", "maxItems", "minLength", "minimum", "maximum", "oneOf", "pattern",
          "propertyNames"}
_EXACT = {"string": str, "object": dict, "array": list, "boolean": bool}


def _is(instance, kind: str) -> bool:
    """Whether `instance` is of JSON type `kind` (strict: never looser than jsonschema)."""
    if kind == "null":
        return instance is None
    if kind == "boolean":
        return isinstance(instance, bool)
    if kind == "integer":
        return isinstance(instance, int) and not isinstance(instance, bool)
    if kind == "number":
        return isinstance(instance, (int, float)) and not isinstance(instance, bool)
    cls = _EXACT.get(kind)
    return cls is not None and isinstance(instance, cls) and not isinstance(instance, bool)


def _surely_not_of(instance, kinds) -> bool:
    """True only when jsonschema's own type check fails too (numbers: never claimed)."""
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        return not any(k in ("integer", "number") for k in kinds)
    return not any(_is(instance, k) for k in kinds)


@lru_cache(maxsize=None)
def _pattern(text: str):
    return re.compile(text)


def surely_valid(instance, schema) -> bool:
    if not isinstance(schema, dict):
        return schema is True
    if set(schema) - _KNOWN:
        return False  # a keyword this check does not know: ask jsonschema
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(instance, k) for k in kinds):
            return False
    if "enum" in schema and not any(type(instance) is type(v) and instance == v for v in schema["enum"]):
        return False
    if isinstance(instance, str):
        if len(instance) < schema.get("minLength", 0):
            return False
        if "pattern" in schema and not _pattern(schema["pattern"]).search(instance):
            return False
    is_number = isinstance(instance, (int, float)) and not isinstance(instance, bool)
    if "minimum" in schema and is_number and instance < schema["minimum"]:
        return False
    if "maximum" in schema and is_number and instance > schema["maximum"]:
        return False
    if isinstance(instance, list):
        if len(instance) < schema.get("minItems", 0) or len(instance) > schema.get("maxItems", len(instance)):
            return False
        if "items" in schema and not all(surely_valid(v, schema["items"]) for v in instance):
            return False
    if isinstance(instance, dict):
        if any(k not in instance for k in schema.get("required", ())):
            return False
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in instance.items():
            if not isinstance(key, str):
                return False
            if "propertyNames" in schema and not surely_valid(key, schema["propertyNames"]):
                return False
            if key in props:
                if not surely_valid(value, props[key]):
                    return False
            elif extra is False or (extra is not True and not surely_valid(value, extra)):
                return False
    if "oneOf" in schema:
        branches = schema["oneOf"]
        matching = [b for b in branches if surely_valid(instance, b)]
        if len(matching) != 1:
            return False
        for b in branches:
            if b is matching[0]:
                continue
            other = b.get("type") if isinstance(b, dict) else None
            if other is None or not _surely_not_of(instance, [other] if isinstance(other, str) else other):
                return False  # another branch might match too: jsonschema decides
    return True
