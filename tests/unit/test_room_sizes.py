"""Room sizes in launcher/ (rules.md, issue 46): a file of at most 500 lines, a class of at
most 250, a function of at most 60 (the generated launcher/render/_train_sbatch.py aside for
function length: jinja2 compiles the whole template into one function). Measured as
scripts/import-graph --stats measures functions: from the `def` line to the last line."""
from __future__ import annotations

import ast
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"
MAX_FILE, MAX_CLASS, MAX_FUNCTION = 500, 250, 60
GENERATED = {"render/_train_sbatch.py"}  # templates/train.sbatch.j2 compiled (scripts/build...): one function

# Rooms over a limit while they are being split, each with who splits it (other helpers commit
# their splits while this list is written): the lead empties it at integration.
BEING_SPLIT = {
}


def rooms() -> dict[str, int]:
    """'path' (a file), 'path:Class' and 'path:function' -> its lines, for every one over its limit."""
    over = {}
    for path in sorted(LAUNCHER.rglob("*.py")):
        rel = path.relative_to(LAUNCHER).as_posix()
        text = path.read_text()
        if len(text.splitlines()) > MAX_FILE:
            over[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
            if isinstance(node, ast.ClassDef) and length > MAX_CLASS:
                over[f"{rel}:{node.name}"] = length
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and length > MAX_FUNCTION \
                    and rel not in GENERATED:
                over[f"{rel}:{node.name}"] = length
    return over


def test_no_room_in_launcher_is_over_its_limit():
    over = {room: lines for room, lines in rooms().items() if room not in BEING_SPLIT}
    assert over == {}, (f"files <= {MAX_FILE} lines, classes <= {MAX_CLASS}, functions <= {MAX_FUNCTION}: "
                        "split the room (one job each), do not add it to BEING_SPLIT")

