"""The fields of the dataclass a verl config node's `_target_` names, read from verl's source.

verl 0.9.1 builds most config nodes that carry a `_target_` (HFModelConfig, RolloutConfig, the
distillation teacher's config, ...) with `hydra.utils.instantiate(node, _convert_="partial")`
(verl/utils/config.py omega_conf_to_dataclass), so a key of such a node that is no field of the
class fails there ("unexpected keyword argument"). verl is never imported here (verl.workers.config
pulls torch and ray): the class is found with `ast` in the installed verl's .py files, its annotated
fields collected (ClassVar and field(init=False) left out) with those of its base classes.

    dataclass_fields("verl.workers.config.HFModelConfig")  # frozenset({'path', 'override_config', ...})

Anything that cannot be resolved statically (a class outside verl, a base class not found, a class
that is not a dataclass, a name defined twice in a package) answers None: no field list, no refusal.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from functools import lru_cache

# bases from these modules add no dataclass fields (collections.abc.Mapping of BaseConfig, ABC, Generic)
_NO_FIELDS_MODULES = frozenset({"abc", "collections", "collections.abc", "typing", "typing_extensions", "enum",
                                "builtins"})
_NO_FIELDS_NAMES = frozenset({"object", "ABC", "Generic", "Protocol", "Mapping", "MutableMapping"})


class _Unresolved(Exception):
    pass


def verl_root() -> str | None:
    """The installed verl package's folder, found without importing it."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


@lru_cache(maxsize=None)
def _tree(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _module_path(module: str) -> tuple[str, str | None] | None:
    """(the module's .py file, its package folder or None) for a dotted verl module."""
    root = verl_root()
    parts = module.split(".")
    if root is None or parts[0] != "verl":
        return None
    base = os.path.join(root, *parts[1:])
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py"), base
    if os.path.isfile(base + ".py"):
        return base + ".py", None
    return None


def _module_of(path: str) -> str:
    """The dotted module name of a .py file under verl's root."""
    rel = os.path.relpath(path, os.path.dirname(verl_root() or ""))
    rel = rel[:-3] if rel.endswith(".py") else rel
    parts = rel.split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _top_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


@lru_cache(maxsize=None)
def _find_class(module: str, name: str) -> tuple[str, ast.ClassDef] | None:
    """(file, class) of `module.name`: defined in the module, imported into it by name from another
    verl module, or (a package re-exporting with `*`) defined once among the package's files."""
    where = _module_path(module)
    if where is None:
        return None
    path, package = where
    tree = _tree(path)
    if tree is None:
        return None
    found = _top_class(tree, name)
    if found is not None:
        return path, found
    imported = _imported(path, tree, name)
    if imported is not None and imported[0].startswith("verl"):
        return _find_class(*imported)
    if package is None:
        return None
    hits = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        for file in sorted(files):
            if file.endswith(".py"):
                sub = _tree(os.path.join(folder, file))
                cls = _top_class(sub, name) if sub is not None else None
                if cls is not None:
                    hits.append((os.path.join(folder, file), cls))
    return hits[0] if len(hits) == 1 else None


def _imported(path: str, tree: ast.Module, name: str) -> tuple[str, str] | None:
    """(module, original name) a top-level `from M import X [as name]` in `tree` binds `name` to."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _absolute(path, node), alias.name
    return None


def _absolute(path: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = _module_of(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(target, ast.Name) and target.id == "dataclass") or \
                (isinstance(target, ast.Attribute) and target.attr == "dataclass"):
            return True
    return False


def _is_classvar(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split("[")[0].rsplit(".", 1)[-1] in ("ClassVar", "KW_ONLY")
    name = annotation.id if isinstance(annotation, ast.Name) else getattr(annotation, "attr", "")
    return name in ("ClassVar", "KW_ONLY")


def _init_false(value: ast.expr | None) -> bool:
    """Whether `value` is `field(..., init=False)` (a field its __init__ does not take)."""
    return isinstance(value, ast.Call) and any(
        kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False for kw in value.keywords)


def _fields_of(path: str, cls: ast.ClassDef, depth: int = 0) -> dict[str, tuple[bool, str]]:
    """{field: (taken by __init__, its annotation's text)} of a class, its dataclass bases' first."""
    if depth > 20:
        raise _Unresolved
    fields: dict[str, tuple[bool, str]] = {}
    tree = _tree(path)
    for base in reversed(cls.bases):
        base_fields = _base_fields(path, tree, base, depth)
        fields.update(base_fields)
    if _is_dataclass(cls):
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and not _is_classvar(stmt.annotation):
                fields[stmt.target.id] = (not _init_false(stmt.value), ast.unparse(stmt.annotation))
    return fields


def _base_fields(path: str, tree: ast.Module | None, base: ast.expr, depth: int) -> dict[str, tuple[bool, str]]:
    if isinstance(base, ast.Subscript):  # Generic[T], Mapping[str, Any]
        base = base.value
    if isinstance(base, ast.Attribute):  # collections.abc.Mapping
        dotted = ast.unparse(base.value)
        if dotted in _NO_FIELDS_MODULES:
            return {}
        raise _Unresolved
    if not isinstance(base, ast.Name) or tree is None:
        raise _Unresolved
    name = base.id
    local = _top_class(tree, name)
    if local is not None:
        return _fields_of(path, local, depth + 1)
    imported = _imported(path, tree, name)
    if imported is not None:
        module, original = imported
        if module in _NO_FIELDS_MODULES:
            return {}
        if module.split(".")[0] == "verl":
            found = _find_class(module, original)
            if found is not None:
                return _fields_of(*found, depth + 1)
        raise _Unresolved
    if name in _NO_FIELDS_NAMES:
        return {}
    raise _Unresolved


@lru_cache(maxsize=None)
def field_annotations(target: str) -> dict[str, str] | None:
    """{keyword argument: its annotation's text} of verl's dataclass `target`
    ('verl.pkg.mod.ClassName'), inherited ones and `_target_` (BaseConfig's) included; None when
    that cannot be told from the source."""
    module, _, name = target.rpartition(".")
    if not module.startswith("verl.") or not name:
        return None
    found = _find_class(module, name)
    if found is None or not _is_dataclass(found[1]):
        return None
    try:
        fields = _fields_of(*found)
    except _Unresolved:
        return None
    return {k: annotation for k, (init, annotation) in fields.items() if init}


def dataclass_fields(target: str) -> frozenset[str] | None:
    """The keyword arguments verl's dataclass `target` takes (field_annotations' keys)."""
    annotations = field_annotations(target)
    return None if annotations is None else frozenset(annotations)
