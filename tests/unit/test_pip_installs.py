"""Every Python package install of the set-up scripts (scripts/) and of the tests' builds
(tests/) goes through scripts/lib/pip.sh: its pip_install/py_install drop pip's "is ignored"
noise, and pip_install_target its resolver ERROR about an environment it does not install into.
Two installs that called pip directly put 46 warnings and an ERROR block into a fresh `.ci/run`
log. benchmarks/gpu is left out: the GPU kit installs offline wheels on a machine of its own."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PIP_SH = REPO / "scripts" / "lib" / "pip.sh"
# pip or uv's pip called to install, however the command is spelt: `pip install`, `pip3 install`,
# `"$VENV/bin/pip" install`, `python -m pip install`, `uv pip install`
DIRECT = re.compile(r"""\bpip3?["']?\s+install\b""")


def shell_scripts() -> list[Path]:
    found = []
    for root in ("scripts", "tests", "benchmarks"):
        for path in (REPO / root).rglob("*"):
            if not path.is_file() or root == "benchmarks" and path.relative_to(REPO / root).parts[0] == "gpu":
                continue
            if path.suffix in (".sh", ".bash") or path.suffix == "" and _shebang(path):
                found.append(path)
    return found


def _shebang(path: Path) -> bool:
    with path.open("rb") as handle:
        first = handle.readline(200)
    return first.startswith(b"#!") and b"sh" in first.split(b"/")[-1]


def direct_installs(text: str) -> list[str]:
    """The lines of a shell script that install with pip themselves (comments and echoed advice aside)."""
    lines = []
    for line in text.splitlines():
        code = "" if line.lstrip().startswith("#") else re.sub(r"\b(echo|log|die|printf|note)\b.*", "", line)
        if DIRECT.search(code):
            lines.append(line.strip())
    return lines


def test_the_pattern_sees_every_spelling():
    for line in ('"$DIR/bin/pip" install -q torch', "  python -m pip install x", "uv pip install y",
                 "pip3 install z"):
        assert direct_installs(line), line
    for line in ("# pip install is how", '[[ -x sf ]] || die "pip install sf first"', 'pip_install "$PY" uv'):
        assert not direct_installs(line), line


def test_no_script_installs_around_pip_sh():
    scripts = shell_scripts()
    assert REPO / "scripts" / "install" in scripts and REPO / "scripts" / "test" in scripts
    bypass = {str(p.relative_to(REPO)): direct_installs(p.read_text(errors="replace"))
              for p in scripts if p != PIP_SH}
    assert {path: lines for path, lines in bypass.items() if lines} == {}
