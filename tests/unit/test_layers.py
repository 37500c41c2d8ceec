"""Provenance travels as typed layers (launcher.spec.layers): made where a value enters, read
by the resolution, the rules and the messages; the text people see is made in one place and
never read back into a layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from launcher.compile import resolve
from launcher.spec import layers
from launcher.spec.layers import Layer, Origin

ROOT = Path(__file__).resolve().parents[2]
# where values enter and resolve: the spec loader, the CLI's flags, compile and its rules; and
# the live check, whose account errors name the field a value came from
SCANNED = [*sorted((ROOT / "launcher" / "compile").rglob("*.py")), *sorted((ROOT / "launcher" / "spec").glob("*.py")),
           ROOT / "launcher" / "cli" / "options.py", ROOT / "launcher" / "submit" / "live.py"]
TEXT_METHODS = {"startswith", "endswith", "removeprefix", "removesuffix", "split", "rsplit", "partition",
                "rpartition", "lstrip", "rstrip", "strip", "find", "index"}
# names that hold provenance (or, as `source` did, the field label a layer was read from)
PROVENANCE_WORDS = ("provenance", "origin", "label", "source", "src", "layer")
LABEL_TEXTS = {"defaults", "default:sf", "method", "sf", "runtime", "site", "config.yaml", "values", "cli", "--set",
               "sweep", "pin", "binding", "topology", "run"}


def _names(node: ast.AST) -> str:
    """The variable and attribute names an expression reads, lower case, joined."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
    return " ".join(out).lower()


def _is_provenance(node: ast.AST) -> bool:
    names = _names(node)
    return any(word in names for word in PROVENANCE_WORDS)


def label_reads(path: Path) -> list[str]:
    """Each place in `path` that reads a provenance label as text: a text method on it, a
    comparison of it with a layer's label, or a lookup in MergedSpec.provenance (the labels)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in TEXT_METHODS and _is_provenance(node.func.value):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            found.append(f"{where}: .{node.func.attr}() on {ast.unparse(node.func.value)}")
        elif isinstance(node, ast.Compare) and _is_provenance(node.left):
            constants = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in LABEL_TEXTS]
            if constants:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Attribute) and node.attr == "provenance" and isinstance(node.ctx, ast.Load) \
                and "compile" in path.parts:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: compile reads the labels ({ast.unparse(node)})")
    return found


def test_no_code_reads_a_provenance_label_back():
    found = [hit for path in SCANNED for hit in label_reads(path)]
    assert not found, "provenance is typed (launcher.spec.layers); read the Origin/Layer, not its label:\n" \
        + "\n".join(found)


def test_the_scan_finds_the_label_parsing_it_forbids(tmp_path):
    """The scan is not blind: each way compile once read a label back is found."""
    sample = tmp_path / "compile" / "old.py"
    sample.parent.mkdir()
    sample.write_text(
        "def raw_layer(source):\n"
        "    if source.startswith('--set'):\n"
        "        return '--set'\n"
        "def layer(self, dotted):\n"
        "    label = self.spec.provenance.get(dotted, 'config.yaml')\n"
        "def site(ctx):\n"
        "    return ctx.origin_label(1) == 'site'\n"
        "def pin(owner):\n"
        "    return owner.origin.removeprefix('pin:')\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        hits = label_reads(sample)
    finally:
        ROOT = saved
    assert len(hits) == 4, hits


def test_resolve_takes_typed_layers_only():
    with pytest.raises(TypeError):
        resolve.Write("a.b", 1, "config.yaml", "overrides[0]", layers.CONFIG)
    with pytest.raises(TypeError):
        resolve.Write("a.b", 1, Layer.CONFIG, "overrides[0]", "config.yaml")
    with pytest.raises(TypeError):
        Origin("--set")


def test_every_label_is_made_from_the_typed_layer():
    """The texts people see (Plan.sources, `sf validate`'s [..], the resolved map) come from
    Origin.label / spec_label / Layer.label, unchanged."""
    assert [layer.label for layer in resolve.LAYERS] == ["default:sf", "method", "sf", "runtime", "site",
                                                         "config.yaml", "--set", "sweep"]
    assert Origin(Layer.PIN, method="grpo").label == "pin:verl/grpo"
    assert Origin(Layer.METHOD, method="dapo").label == "default:verl/dapo"
    assert Origin(Layer.SF).label == Origin(Layer.DEFAULTS).label == "default:sf"
    assert layers.from_flag("--model").label == layers.from_flag("--model").spec_label == "--model"
    assert layers.DEFAULTS.spec_label == "defaults" and Origin(Layer.SET).spec_label == "cli"
    assert Origin(Layer.CONFIG, path="/e/config.yaml").label == "config.yaml"
    assert layers.overrides_label([Layer.CONFIG, Layer.SWEEP]) == "--set+config.yaml"
    assert [layer.rank for layer in resolve.LAYERS] == sorted(layer.rank for layer in resolve.LAYERS)
    assert all(layer.rank > Layer.SWEEP.rank for layer in layers.OWNERS)
