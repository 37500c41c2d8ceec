"""Runtime kinds: one class each behind launcher/runtime/base.py's interface, and no kind
branch outside launcher/runtime/ (a new kind is one module and one line in its registry)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from launcher.errors import SpecError
from launcher.runtime import CONTAINER_KINDS, KINDS, REGISTRY, Runtime, RuntimeKind, kind_named
from launcher.spec.runtimes import runtime_from_entry

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "launcher"
RUNTIME_PACKAGE = LAUNCHER / "runtime"
KIND_NAMES = frozenset(KINDS)
# the names launcher.runtime exports for the kinds: a comparison with one is a kind branch too
KIND_TABLES = frozenset({"KINDS", "CONTAINER_KINDS", "REGISTRY"})


def _names_a_runtime(node: ast.expr) -> bool:
    """`rt`, `runtime`, `self.runtime`, `a.runtime`, `runtime_record`...: an object that is a runtime."""
    text = ast.unparse(node).rpartition(".")[2]
    return text == "rt" or "runtime" in text.lower()


def _is_runtime_kind(node: ast.expr) -> bool:
    """`<runtime>.kind`, `<runtime>["kind"]`, `<runtime>.get("kind")`."""
    if isinstance(node, ast.Attribute) and node.attr == "kind":
        return _names_a_runtime(node.value)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "kind":
        return _names_a_runtime(node.value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"):
        return _names_a_runtime(node.func.value)
    return False


# "module" is also a shell word (Lmod's `module`, site_checks.py reads a template's commands):
# a comparison with it is a kind branch only beside a kind (`kind == "module"`, `x.kind in ...`).
WORD_TOO = frozenset({"module"})


def _kind_names_in(node: ast.expr) -> set:
    if isinstance(node, ast.Constant):
        return {node.value} & KIND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_kind_names_in(e) for e in node.elts))
    return set()


def _branches_on_a_kind(sides: list[ast.expr]) -> bool:
    named = set().union(*(_kind_names_in(s) for s in sides))
    beside_a_kind = any("kind" in ast.unparse(s).lower() for s in sides if not _kind_names_in(s))
    tables = any(isinstance(s, ast.Name) and s.id in KIND_TABLES for s in sides)
    return bool(named - WORD_TOO) or (bool(named) and beside_a_kind) or tables or any(map(_is_runtime_kind, sides))


def kind_branches(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comparison that branches on a runtime kind: against a kind's
    name ("venv", ("pyxis", "oci"), KINDS) or of a runtime's kind (rt.kind == x); `match`
    cases on a kind's name too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and _branches_on_a_kind([node.left, *node.comparators]):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and _kind_names_in(node.value):
            found.append((node.lineno, ast.unparse(node.value)))
    return found


def test_no_runtime_kind_branch_outside_the_kinds():
    found = []
    for path in sorted(LAUNCHER.rglob("*.py")):
        if RUNTIME_PACKAGE in path.parents:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}: {text}" for line, text in kind_branches(path.read_text())]
    assert not found, ("ask the runtime's kind (launcher/runtime/<kind>.py) instead of branching on its name:\n"
                       + "\n".join(found))


@pytest.mark.parametrize("code", [
    'if rt.kind == "venv": pass',
    'x = runtime.kind in ("venv", "module")',
    'x = self.runtime.kind != other',
    'x = runtime.get("kind") == "oci"',
    'x = runtime["kind"] == k',
    'x = kind in CONTAINER_KINDS',
    'x = "pyxis" == name',
    'x = kind == "module"',
    'x = entry.get("kind") not in ("module", "ml")',
    'match k:\n    case "apptainer": pass',
])
def test_the_scan_finds_a_kind_branch(code):
    assert kind_branches(code), code


@pytest.mark.parametrize("code", [
    'x = step.kind == "node"',  # injob steps: node, barrier, health, driver
    'x = s.kind in ("barrier", "health")',
    'x = status.kind == "sweep"',  # submit/cancel.py: a run or a sweep
    'x = kind == "boolean"',  # spec/schema_fast.py: JSON Schema types
    'x = kind == WORD',  # render/site_shell.py: the lexer's tokens
    'd = {"kind": "venv", "path": p}',  # a registry entry written, not a branch
    'x = head in ("module", "ml")',  # render/site_checks.py: Lmod's shell command
])
def test_the_scan_leaves_other_kinds_alone(code):
    assert kind_branches(code) == [], code


# -- the registry -----------------------------------------------------------------------

def test_every_kind_module_is_registered_once():
    modules = {p.stem for p in RUNTIME_PACKAGE.glob("*.py")} - {"__init__", "base", "model", "registry"}
    assert modules == set(KINDS)
    for name, kind in REGISTRY.items():
        assert isinstance(kind, RuntimeKind) and kind.name == name
        assert type(kind).__module__ == f"launcher.runtime.{name}"
    assert CONTAINER_KINDS == ("pyxis", "apptainer", "oci")
    assert kind_named("docker") is None and kind_named(None) is None and kind_named(["venv"]) is None


def test_each_kinds_registry_keys_are_in_the_schema():
    schema = json.loads((ROOT / "configs" / "schema" / "runtimes.schema.json").read_text())
    entry = schema["properties"]["verl"]["additionalProperties"]
    for kind in REGISTRY.values():
        assert set(kind.reads) <= set(entry["properties"]), kind.name
        for key in kind.reads:
            assert kind.name in entry["properties"][key]["description"] or key == "python", (kind.name, key)


def _rt(kind, **fields):
    return Runtime(framework="verl", version="0.9.1", kind=kind, **fields)


VENV = _rt("venv", path="/opt/rt/verl 0.9.1", python="/opt/rt/verl 0.9.1/bin/python")
MODULE = _rt("module", modules=("cuda/12.4", "verl/#1"), python="python3.11")
PYXIS = _rt("pyxis", image="nvcr.io#verl:0.9", mounts=("/data:/data", "/models:/m:ro"))
APPTAINER = _rt("apptainer", image="/img/verl.sif", mounts=("/data",))
OCI = _rt("oci", image="/opt/sf/containers/verl", mounts=("/data",), python="/opt/sf/runtime/bin/python")


# -- what the batch script activates -----------------------------------------------------

@pytest.mark.parametrize("rt,modules,source,activate", [
    (VENV, (), ["source '/opt/rt/verl 0.9.1/bin/activate'"], ["source '/opt/rt/verl 0.9.1/bin/activate'"]),
    (MODULE, ("cuda/12.4", "verl/#1"), [], ["module load cuda/12.4 'verl/#1'"]),
    (PYXIS, (), [], []),
    (APPTAINER, (), [], []),
    (OCI, (), [], []),
])
def test_activation(rt, modules, source, activate):
    assert rt.script_modules() == modules
    assert rt.source_lines() == source
    assert rt.activate_lines() == activate


# -- how a step is launched --------------------------------------------------------------

ARGV = ["python3", "-m", "launcher.injob", "node"]


@pytest.mark.parametrize("rt,flags,wrapped,local,host_python,runtime_python", [
    (VENV, [], ARGV, ARGV, "/opt/rt/verl 0.9.1/bin/python", "/opt/rt/verl 0.9.1/bin/python"),
    (MODULE, [], ARGV, ARGV, "python3.11", "python3.11"),
    (PYXIS, ["--container-image=nvcr.io#verl:0.9", "--container-mounts=/data:/data,/models:/m:ro"], ARGV, None,
     "/sf/bin/python", "python3"),
    (APPTAINER, [], ["apptainer", "exec", "--nv", "--bind", "/data", "/img/verl.sif", *ARGV],
     ["apptainer", "exec", "--nv", "--bind", "/data", "/img/verl.sif", *ARGV], "/sf/bin/python", "python3"),
    (OCI, ["--container=/opt/sf/containers/verl"], ARGV, None, "/sf/bin/python", "/opt/sf/runtime/bin/python"),
])
def test_step_launch(rt, flags, wrapped, local, host_python, runtime_python):
    assert rt.srun_flags() == flags
    assert rt.wrap(ARGV) == wrapped
    assert rt.local_argv(ARGV) == local
    assert rt.host_python("/sf/bin/python") == host_python
    assert rt.runtime_python() == runtime_python
    assert rt.in_container == (rt.kind in CONTAINER_KINDS)


def test_without_mounts_a_container_gets_no_mount_words():
    assert _rt("pyxis", image="img").srun_flags() == ["--container-image=img"]
    assert _rt("apptainer", image="/i.sif").wrap(["x"]) == ["apptainer", "exec", "--nv", "/i.sif", "x"]


def test_a_record_of_an_unknown_kind_runs_as_a_host_runtime():
    old = Runtime.from_dict({"framework": "verl", "version": "?", "kind": "gone", "python": "python3"})
    assert (old.activate_lines(), old.srun_flags(), old.wrap(ARGV), old.local_argv(ARGV)) == ([], [], ARGV, ARGV)
    assert old.host_python("/sf") == old.runtime_python() == "python3" and not old.in_container


# -- what doctor asks on the login host ------------------------------------------------------

def test_doctor_runs_a_host_runtimes_python_on_the_login_host():
    venv, module = kind_named("venv"), kind_named("module")
    assert venv.login_argv(VENV, ["-c", "x"]) == ["/opt/rt/verl 0.9.1/bin/python", "-c", "x"]
    assert venv.login_env(VENV, {"PATH": "/usr/bin"})["PATH"] == "/opt/rt/verl 0.9.1/bin:/usr/bin"
    assert venv.login_problem(VENV) == ("/opt/rt/verl 0.9.1/bin/python is missing or not executable",
                                        "build the venv at /opt/rt/verl 0.9.1 or fix its path in the registry")
    assert module.login_argv(MODULE, ["-c", "import x; print(1)"]) == [
        "bash", "-lc", "module load cuda/12.4 'verl/#1' && python3.11 -c 'import x; print(1)'"]
    assert module.login_env(MODULE, {"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}
    assert module.login_problem(MODULE) is None
    assert (venv.where(VENV), module.where(MODULE)) == ("/opt/rt/verl 0.9.1", "cuda/12.4 verl/#1")
    for rt in (PYXIS, APPTAINER, OCI):
        assert rt.kind_object.login_argv(rt, ["-c", "x"]) is None  # checked on a node instead


class FakeProbe:
    """The cluster as doctor lends it to a kind's node checks, answering from a script."""

    def __init__(self, answers=(), has_option=True, oci_conf=None):
        self.answers, self.has_option, self.oci_conf, self.asked = list(answers), has_option, oci_conf, []

    def on_node(self, argv):
        self.asked.append(argv)
        return self.answers.pop(0)

    def srun_has_option(self, option):
        self.asked.append(option)
        return self.has_option

    def oci_conf_path(self):
        return self.oci_conf


def test_pyxis_node_checks():
    pyxis = kind_named("pyxis")
    [(name, status, detail, fix)] = pyxis.node_checks(PYXIS, "rt", "0.9.1", FakeProbe(has_option=None))
    assert (name, status, fix) == ("pyxis rt", "warn", "") and "pyxis plugin is not checked" in detail
    probe = FakeProbe([("/usr/bin/enroot\n", None)])
    [found] = pyxis.node_checks(PYXIS, "rt", "0.9.1", probe)
    assert found[:2] == ("rt", "ok") and "enroot at /usr/bin/enroot" in found[2]
    assert probe.asked == ["--container-image", ["sh", "-c", "command -v enroot || true"]]
    missing = _rt("pyxis", image="/no/such.sqsh")
    checks = pyxis.node_checks(missing, "rt", "0.9.1", FakeProbe([(None, "srun: down")]))
    assert [c[:2] for c in checks] == [("rt", "fail"), ("pyxis rt", "warn")]
    assert checks[0][2] == "image /no/such.sqsh does not exist" and checks[1][2].endswith("not checked: srun: down")


def test_apptainer_and_oci_node_checks(tmp_path):
    image = tmp_path / "verl.sif"
    image.write_text("x")
    app = _rt("apptainer", image=str(image))
    [found] = kind_named("apptainer").node_checks(app, "rt", "0.9.1", FakeProbe([("\n", None)]))
    assert found[1] == "fail" and "neither apptainer nor singularity" in found[2]
    oci = kind_named("oci")
    [found] = oci.node_checks(_rt("oci", image=str(tmp_path / "none"), python="/p"), "rt", "0.9.1", FakeProbe())
    assert found[1] == "fail" and found[2].startswith(f"{tmp_path / 'none'}/config.json: FileNotFoundError")
    assert oci.doctor_min_timeout == 60 and kind_named("pyxis").doctor_min_timeout == 0


# -- the preflight's sentence for a path a step does not see ----------------------------------

@pytest.mark.parametrize("kind,says", [
    ("oci", "(OCI bundle /b): add a mount: rebuild the bundle with `scripts/build-container --mount /data 0.9.1`"),
    ("pyxis", "(pyxis image /b): add a mount: `/data:/data` to the runtime's mounts in the registry (mounted now: m)"),
    ("apptainer", "(apptainer image /b): add a bind: `/data` to the runtime's binds in the registry (bound now: m)"),
])
def test_mount_hints(kind, says):
    hint = kind_named(kind).mount_hint({"kind": kind, "image": "/b", "version": "0.9.1"}, "U", "/data", "m")
    assert hint.startswith("U " + says)


def test_a_host_runtime_has_no_mount_hint():
    assert kind_named("venv").mount_hint({}, "U", "/data", "m") is None
    assert kind_named("module").mount_hint({}, "U", "/data", "m") is None


# -- what a registry entry may hold, and the errors its parse gives -------------------------

@pytest.mark.parametrize("entry,field,message", [
    ({"kind": "docker"}, "runtime", "verl 0.9.1 in reg.yaml has kind 'docker'; use one of venv, module, pyxis, "
                                    "apptainer, oci"),
    ({"kind": "module"}, "runtime", "verl 0.9.1 in reg.yaml: kind module needs `modules: [...]`"),
    ({"kind": "venv", "path": "/a b"}, "runtime.path", "'/a b' in reg.yaml must be a plain path or name (letters, "
                                                        "digits, ./:@+=,%_-; no spaces); fix the runtime registry"),
    ({"kind": "oci", "bundle": "rel/b", "python": "/p"}, "runtime.bundle",
     "'rel/b' in reg.yaml: kind oci needs an absolute bundle (the bundle folder every node sees; the python inside "
     "the container)"),
    ({"kind": "oci", "bundle": "/b", "python": "python3"}, "runtime.python",
     "'python3' in reg.yaml: kind oci needs an absolute python (the bundle folder every node sees; the python "
     "inside the container)"),
    ({"kind": "pyxis", "image": "img", "binds": ["/d"]}, "runtime.binds",
     "verl 0.9.1 in reg.yaml: a pyxis runtime does not read binds (it reads image, mounts, python); remove it, or "
     "fix the entry's kind; fix the runtime registry"),
    ({"kind": "apptainer", "image": "/i.sif", "binds": ["/a,/b"]}, "runtime.mounts",
     "'/a,/b' in reg.yaml holds a comma, so the container would get two mounts instead of this one; give each mount "
     "as its own list item (a path with a comma cannot be mounted); fix the runtime registry"),
    ({"kind": "pyxis", "image": "img", "python": "py thon"}, "runtime.python",
     "'py thon' in reg.yaml must be a plain path or name (letters, digits, ./:@+=,%_-; no spaces); fix the runtime "
     "registry"),
])
def test_registry_parse_errors_keep_their_messages(entry, field, message):
    with pytest.raises(SpecError) as err:
        runtime_from_entry("verl", "0.9.1", entry, "reg.yaml")
    assert (err.value.field, err.value.message) == (field, message)


def test_registry_parse_per_kind(tmp_path):
    def parse(entry):
        return runtime_from_entry("verl", "0.9.1", entry, "reg.yaml")

    assert parse({"kind": "venv", "path": "/rt"}).python == "/rt/bin/python"
    assert parse({"kind": "module", "modules": ["verl"]}).python == "python3"
    assert parse({"kind": "apptainer", "image": "/i.sif", "binds": ["/d"]}).mounts == ("/d",)
    assert parse({"kind": "pyxis", "image": "i", "mounts": ["/d:/d"], "python": "py3"}).python == "py3"
    entry = {"kind": "oci", "bundle": str(tmp_path), "python": "/p", "mounts": ["/from/registry"]}
    assert parse(entry).mounts == ("/from/registry",)  # no config.json: as the registry says
    (tmp_path / "config.json").write_text(json.dumps({"mounts": [
        {"destination": "/data", "options": ["rbind"]}, {"destination": "/proc", "type": "proc"}]}))
    rt = parse(entry)
    assert (rt.image, rt.mounts, rt.python) == (str(tmp_path), ("/data",), "/p")  # the bundle's own binds
    assert Runtime.from_dict(rt.to_dict()) == rt
