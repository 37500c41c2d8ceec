"""launcher.states: the one vocabulary. A phase has a label only if something emits it, and
every phase the job emits is named there."""
from __future__ import annotations

import re

from launcher import slurm, states
from launcher.spec import paths

ROOT = paths.data_root()
# How phases are emitted: Supervisor.record(states.X, ...) or ("x", ...), runs.record_phase(dir, "x", ...),
# `sf_phase x ...` in the templates (the training job's templates/train.sbatch.j2; kind_started /
# {{ kind }}_ended in the one-node header of the export and eval jobs).
_EMIT = re.compile(r"""(?:\.record\(|record_phase\([^,]+,\s*)(?:"([a-z_]+)"|states\.([A-Z_]+)\b)"""
                   r"""|sf_phase ([a-z_]+|\{\{ kind \}\}_[a-z]+)""")


def emitted_phases() -> set[str]:
    found = set()
    sources = [*(ROOT / "launcher" / "injob").glob("*.py"), *(ROOT / "templates").glob("*.j2")]
    for path in sources:
        for match in _EMIT.finditer(path.read_text()):
            name = match.group(1) or (getattr(states, match.group(2)) if match.group(2) else match.group(3))
            if "{{ kind }}" in name:
                found |= {name.replace("{{ kind }}", kind) for kind in ("export", "eval")}
            else:
                found.add(name)
    return found


def test_every_label_is_of_an_emitted_phase():
    emitted = emitted_phases()
    assert {"allocated", "head_up", "all_joined", "driver_started", "ended", "requeued"} <= emitted
    assert {"export_started", "export_ended", "eval_started", "eval_ended"} <= emitted
    assert set(states.PHASE_LABELS) <= emitted
    assert emitted - set(states.NODE_PHASES) <= set(states.PHASE_LABELS)


def test_run_failed_is_what_retry_failed_resends():
    assert states.RUN_FAILED == {"failed", "timeout", "node_fail", "out_of_memory", "boot_fail", "deadline",
                                 "preempted", "submit_failed", "revoked", "gone"}


def test_run_terminal_is_slurm_terminal_lowered_plus_submit_failed():
    assert states.RUN_TERMINAL == {s.lower() for s in states.SLURM_TERMINAL if s != "GONE"} | {"submit_failed"}
    assert states.run_ended("gone") and not states.run_ended("running") and states.run_ended("timeout")
    assert slurm.JobState("1", "NODE_FAIL").done and not slurm.JobState("1", "REQUEUED").done


def test_latest_phase_and_labels():
    events = [{"phase": "allocated"}, {"phase": "node_started"}, {"phase": "driver_started", "what": "preflight"}]
    assert states.latest_event(events) == events[2]
    assert states.phase_label("driver_started", states.latest_event(events).get("what")) == "preflight running"
    assert states.phase_label("driver_started") == "driver started"
    assert states.latest_event(events[:2]) == events[0]
    assert states.phase_label("something_new") == "something new"


def test_states_imports_the_standard_library_only():
    """The in-job supervisor runs on the runtime's Python: the vocabulary must import there."""
    import ast
    import sys

    tree = ast.parse((ROOT / "launcher" / "states.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
