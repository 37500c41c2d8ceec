"""No module of launcher/ opens a run's path by string on its own (issue 44: one gateway).

Every call that reads, writes, lists or removes a file (open(), os.open/replace/unlink/...,
shutil.*, tempfile.*, Path.read_text/write_text/open/unlink/glob/...) whose arguments or
receiver name a run's path (run_dir, run.dir, runs_dir, logs_dir, a record's file name, ...)
must go through launcher.gateway, or be listed below with why it may not. A listed entry that
no longer has such a call fails too: the list says what is true now, not what once was.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"

# module:function -> why it may touch a run's path without launcher.gateway
ALLOWED = {
    "launcher.cli.cmd_attach:attach": "only asks whether a file exists, to word a message",
    "launcher.injob.node_ports:take_head_slot_once": "a test hook's marker, made O_EXCL|O_NOFOLLOW, mode 0600",
    "launcher.injob.preflight:job_plan": "the job's own plan.json, in the run folder the supervisor checked",
    "launcher.injob.preflight:job_stoppers": "the job's own file, in the run folder the supervisor checked",
    "launcher.injob.stacks:hang_limit": "the job's own file, in the run folder the supervisor checked",
    "launcher.monitor.poll:_read_records": "only asks whether a member's record exists",
}

PATH_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "open", "touch", "mkdir", "unlink",
                "iterdir", "glob", "rglob", "rmdir", "rename", "symlink_to", "chmod", "stat", "exists", "is_file",
                "is_dir"}
OS_CALLS = {"open", "replace", "rename", "remove", "unlink", "mkdir", "makedirs", "listdir", "scandir", "rmdir",
            "chmod", "symlink", "truncate"}
# what names a run's path in the source of a call
RUN_PATH = re.compile(r"run_dir|run\.dir|runs_dir|logs_dir|checkpoints_dir|\b(RECORD|EVENTS|REASON|PLAN|LOCK)\b|"
                      r"record\.json|events\.jsonl|plan\.json|sweep_dir|\brun\b|"
                      # a checkpoint's files, a job's stacks and preflight, a node's private folders
                      r"checkpoint|TRACKER|actor|stacks|preflight\.json|temp_root|private|\bMARK\b")
# receivers that are a runs.Run (its methods are the gateway's) or a module, not a path
NOT_PATHS = {"self", "run", "sweep_run", "member", "first", "gateway", "re", "json", "fcntl", "subprocess", "runs",
             "zipfile", "tarfile", "webbrowser"}


def _calls(path: Path, package: Path = LAUNCHER):
    """(module:function, what) of each file call naming a run's path in the module at `path`."""
    src = path.read_text()
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    found, where = [], []

    class Visit(ast.NodeVisitor):
        def scope(self, node):
            where.append(node.name)
            self.generic_visit(node)
            where.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = scope

        def visit_Call(self, node):
            what = _what(node.func)
            if what and RUN_PATH.search(ast.get_source_segment(src, node) or ""):
                found.append((f"{module}:{'.'.join(where) or '<module>'}", what))
            self.generic_visit(node)

    Visit().visit(ast.parse(src))
    return found


def _what(func) -> str | None:
    if isinstance(func, ast.Name) and func.id == "open":
        return "open()"
    if not isinstance(func, ast.Attribute):
        return None
    base = func.value
    if isinstance(base, ast.Name) and base.id in ("shutil", "tempfile"):
        return f"{base.id}.{func.attr}"
    if isinstance(base, ast.Name) and base.id == "os":
        return f"os.{func.attr}" if func.attr in OS_CALLS else None
    if func.attr in PATH_METHODS and not (isinstance(base, ast.Name) and base.id in NOT_PATHS) \
            and not _is_run(base):
        return f".{func.attr}()"
    return None


def _is_run(node) -> bool:
    """`runs.Run(...)` or `Run(...)`: a run handle, whose reads and writes are the gateway's."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "Run") or (isinstance(func, ast.Attribute) and func.attr == "Run")


def _all_calls(package: Path = LAUNCHER):
    calls = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == "gateway.py":
            continue
        for where, what in _calls(path, package):
            calls.setdefault(where, []).append(what)
    return calls


def test_no_module_opens_a_runs_path_outside_the_gateway():
    calls = _all_calls()
    unlisted = {where: whats for where, whats in calls.items() if where not in ALLOWED}
    assert not unlisted, ("these open a run's path by string, not through launcher.gateway (use it, or add "
                          f"module:function with the reason to ALLOWED): {unlisted}")


def test_every_allowed_entry_still_has_such_a_call_and_a_reason():
    calls = _all_calls()
    stale = sorted(where for where in ALLOWED if where not in calls)
    assert not stale, f"no longer open a run's path on their own: remove them from ALLOWED: {stale}"
    assert all(len(reason) > 20 for reason in ALLOWED.values())


def test_the_scan_sees_what_it_must(tmp_path):
    """The scan itself: an open of a run's file by string is found, a gateway call is not."""
    sample = tmp_path / "launcher" / "sample.py"
    sample.parent.mkdir()
    sample.write_text("from pathlib import Path\nimport os\nfrom launcher import gateway\n"
                      "def bad(run_dir):\n    return (Path(run_dir) / 'record.json').read_text()\n"
                      "def worse(run_dir):\n    return os.open(run_dir, 0)\n"
                      "def good(run_dir):\n    return gateway.read_text(Path(run_dir) / 'record.json')\n")
    found = _calls(sample, tmp_path / "launcher")
    assert found == [("launcher.sample:bad", ".read_text()"), ("launcher.sample:worse", "os.open")], found
