"""launcher/'s imports follow the pipeline (scripts/import-graph holds the stage order and the
ast parse): no import circle, no import of a stage above the importer's, every module in a
stage, docs/architecture.md's drawing equal to the script's, and an import inside a function
only with a comment that says why (start-up cost), outside the job side and the CLI's lazy
command table."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_graph():
    loader = importlib.machinery.SourceFileLoader("import_graph", str(ROOT / "scripts" / "import-graph"))
    spec = importlib.util.spec_from_loader("import_graph", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


graph = _load_graph()


def test_no_import_circles():
    assert graph.cycles(graph.imports()) == []


def test_no_upward_imports():
    assert graph.upward(graph.imports()) == []


def test_every_module_has_a_stage():
    assert graph.unplaced() == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "launcher" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_an_upward_import_inside_a_function_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "spec/__init__.py": "",
        "spec/experiment.py": "def load():\n    from launcher.submit import chain\n",
        "submit/__init__.py": "",
        "submit/chain.py": "from launcher.spec import experiment\n",
    })
    found = graph.imports(root)
    assert ("launcher.spec.experiment", "launcher.submit.chain", 2, True) in found
    assert graph.upward(found) == [("launcher.spec.experiment", "launcher.submit.chain", 2)]
    assert graph.cycles(found) == [["launcher.spec.experiment", "launcher.submit.chain"]]


def test_a_circle_inside_one_stage_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "cli/__init__.py": "",
        "cli/options.py": "from . import cmd_monitor\n",  # relative imports count too
        "cli/cmd_monitor.py": "import launcher.cli.options\n",
    })
    found = graph.imports(root)
    assert graph.upward(found) == []
    assert graph.cycles(found) == [["launcher.cli.cmd_monitor", "launcher.cli.options"]]


def test_a_module_outside_every_stage_is_named(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "newstage/__init__.py": "", "newstage/x.py": ""})
    assert graph.unplaced(root) == ["launcher.newstage", "launcher.newstage.x"]


def test_the_architecture_doc_draws_the_real_graph():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- import-graph -->\n```\n(.*?)```\n<!-- /import-graph -->", doc, re.S)
    assert block, "docs/architecture.md lost its <!-- import-graph --> block"
    assert block.group(1) == graph.drawing(graph.imports()), "run scripts/import-graph and paste its output"


# The job side (issue 22's branch owns it) and the CLI's lazy command table are left out.
_LAZY_OK = ("launcher/injob/", "launcher/cli/app.py", "launcher/cli/__init__.py")


@pytest.mark.parametrize("where", [w for w in graph.inner_imports() if not w.startswith(_LAZY_OK)])
def test_an_import_inside_a_function_says_why(where):
    path, line = where.rsplit(":", 1)
    lines = (ROOT / path).read_text().splitlines()
    here, above = lines[int(line) - 1], lines[int(line) - 2]
    assert "#" in here or above.strip().startswith("#"), f"{where}: move it to the top, or say why (start-up cost)"


@pytest.mark.parametrize("where", [w for _n, w in graph.long_functions()])
def test_a_function_over_60_lines_says_why(where):
    path, rest = where.split(":", 1)
    line = int(rest.split()[0])
    lines = (ROOT / path).read_text().splitlines()
    above = line - 2
    while above >= 0 and lines[above].lstrip().startswith("@"):  # decorators
        above -= 1
    assert lines[above].lstrip().startswith("# long:"), f"{where}: split it, or say why above it (# long: ...)"


TEST_FILE_IMPORT = re.compile(r"\s*(from test_\w+ import|import test_\w+)")


def test_no_test_file_imports_another():
    """What tests share lives in tests/cluster/helpers.py, tests/unit/unit_helpers.py,
    golden_cases.py and the conftest files: a test file imported as a library runs its
    module-level code twice and hides the shared helpers among tests."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if TEST_FILE_IMPORT.match(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_an_import_of_a_test_file_would_be_found():
    assert TEST_FILE_IMPORT.match("    from test_render import make_plan")
    assert TEST_FILE_IMPORT.match("import test_bringup")
    assert not TEST_FILE_IMPORT.match("from unit_helpers import make_plan")
