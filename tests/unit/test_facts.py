"""One owner for every fact (issue 36), read from the source with `ast`, so a second table
of the same facts fails here the day it appears:

  - launcher/cli parses, calls and prints: no module of it imports launcher.slurm or calls
    a writer of run records (launcher.runs) or of Slurm; submit, monitor and their stages
    do that (docs/architecture.md, "Imports follow the pipeline");
  - what a method is lives in configs/methods/ (launcher.compile.catalog reads it): no
    string in launcher/ is a method's name or its entry module, so nothing decides by a
    list of methods or by the entry's argv (the job reads Plan.trainer and Plan.verl_pools);
  - verl's checkpoint tracker has one reader, launcher/checkpoints.py;
  - Slurm's states have one table, launcher/states.py;
  - the watchdog's defaults have one statement, launcher/plan.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from launcher import checkpoints, states
from launcher.compile import catalog, knobs

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "launcher"
GENERATED = {"_train_sbatch.py"}  # precompiled from templates/train.sbatch.j2

# what writes a run record (launcher.runs)
RECORD_WRITERS = {"create_run", "make_run_dir", "add_state", "mutate", "write_text", "write_json", "record_phase"}


def _slurm_commands() -> set[str]:
    """The functions of launcher/slurm.py that run a Slurm command: those that count one
    (CALLS) and every function that calls one of them (its pure helpers, such as the
    environment it leaves out, are not)."""
    tree = ast.parse((ROOT / "launcher" / "slurm.py").read_text())
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    calls = {name: {n.func.id for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
             for name, f in functions.items()}
    running = {name for name, f in functions.items() if "CALLS" in ast.unparse(f)}
    while True:
        more = {name for name, called in calls.items() if called & running} - running
        if not more:
            return running
        running |= more


SLURM_COMMANDS = _slurm_commands()


def _modules(under: Path = LAUNCHER):
    for path in sorted(under.rglob("*.py")):
        if path.name not in GENERATED:
            yield path, ast.parse(path.read_text(), str(path))


def _where(path: Path, node) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def _strings(tree) -> list[ast.Constant]:
    """The string constants of a module that are code, not its docstrings."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_cli_neither_writes_run_records_nor_calls_slurm():
    assert {"sbatch", "scancel", "job_states", "exec_srun"} <= SLURM_COMMANDS  # slurm.py is read
    found = []
    for path, tree in _modules(LAUNCHER / "cli"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "launcher" and \
                    any(a.name == "slurm" for a in node.names):
                found.append(f"{_where(path, node)} imports launcher.slurm")
            if isinstance(node, ast.ImportFrom) and node.module == "launcher.slurm":
                found += [f"{_where(path, node)} imports slurm.{a.name}"
                          for a in node.names if a.name in SLURM_COMMANDS]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in RECORD_WRITERS | SLURM_COMMANDS:
                found.append(f"{_where(path, node)} calls .{node.func.attr}()")
    assert found == [], "launcher/cli parses, calls and prints; move these into submit or monitor: " + "; ".join(found)


def test_the_cli_check_sees_a_record_write_and_a_slurm_call():
    """The check above finds what it looks for (a CLI module written the old way)."""
    tree = ast.parse("from launcher import runs, slurm\nrun = runs.create_run('r', 'x')\nslurm.sbatch('job')\n")
    calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert calls & RECORD_WRITERS == {"create_run"} and calls & SLURM_COMMANDS == {"sbatch"}


def _method_facts() -> dict[str, str]:
    """Every method's name and entry module, from the catalog's recipes: text -> what it is."""
    facts = {}
    for version in catalog.versions():
        for name in catalog.methods(version):
            method = catalog.get_method(version, name)
            facts[name] = f"the method name {name}"
            facts[f"verl/{name}"] = f"the method name verl/{name}"
            modules = [part for part in method.entry if "." in part and "=" not in part and not part.endswith(".py")]
            facts.update({m: f"the entry module of verl/{name}" for m in modules})
    return facts


# Method names still written outside the recipes (2026-12-03), per file: they may only fall.
# Entry modules have none left, and nothing in launcher/ infers a trainer from the entry.
NAMED_METHODS_LEFT = {
    "launcher/compile/knobs.py": 4,  # verl's own enum values (estimators grpo, rloo, remax; reward manager dapo)
    "launcher/compile/rules/pools.py": 1,  # verl's `distillation` config group (a key, not the method)
    "launcher/verlcheck.py": 1,  # verl's `distillation` config group (a feature, not the method)
    "launcher/submit/export.py": 1,  # sft's checkpoints are no actor's
}


def test_method_facts_live_in_the_recipes_only():
    facts = _method_facts()
    assert "verl.trainer.main_ppo" in facts and "grpo-async" in facts  # the catalog is read
    found: dict[str, list[str]] = {}
    for path, tree in _modules():
        for node in _strings(tree):
            if node.value in facts:
                found.setdefault(str(path.relative_to(ROOT)), []).append(
                    f"{_where(path, node)}: {node.value!r} ({facts[node.value]})")
    entries = [line for lines in found.values() for line in lines if "entry module" in line]
    assert entries == [], "entry modules belong in configs/methods/; read Method.entry or Plan.entry: " \
        + "; ".join(entries)
    more = {file: lines for file, lines in found.items() if len(lines) > NAMED_METHODS_LEFT.get(file, 0)}
    assert more == {}, ("what a method is belongs in configs/methods/ (launcher.compile.catalog); read it "
                        "from the Method or the Plan (Plan.trainer, Plan.verl_pools): "
                        + "; ".join(line for lines in more.values() for line in lines))


def test_no_second_table_of_methods():
    """A literal (tuple, list, set, dict keys) naming two or more methods is a table of them,
    wherever it is (capabilities' WITHOUT_CRITIC, `sf new`'s knob blocks were): the recipes
    say it (Method.critic, .teacher, .new, .pin_hints; catalog.named). verl's own enums
    (knobs.ENUM_KEYS: an estimator may share a method's name) are verl's words."""
    facts = _method_facts()
    verl_enums = {frozenset(values) for values in knobs.ENUM_KEYS.values()}
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
                elts = node.keys if isinstance(node, ast.Dict) else node.elts
                words = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                named = [w for w in words if w in facts and "entry module" not in facts[w]]
                if len(named) >= 2 and frozenset(words) not in verl_enums:
                    found.append(f"{_where(path, node)}: {named}")
    assert found == [], "what a method is belongs in configs/methods/: " + "; ".join(found)


def test_the_table_check_sees_a_list_of_methods():
    tree = ast.parse('WITHOUT_CRITIC = ("verl/grpo", "verl/rloo")\nESTIMATORS = ("gae", "grpo", "rloo")\n')
    facts = _method_facts()
    tables = [n for n in ast.walk(tree) if isinstance(n, ast.Tuple)
              and sum(e.value in facts for e in n.elts) >= 2]
    assert len(tables) == 2  # the enum is told apart only by knobs.ENUM_KEYS, above
    assert frozenset(e.value for e in tables[1].elts) != frozenset(knobs.ADV_ESTIMATORS)


def test_verl_pool_names_live_in_the_trainers_table_only():
    """Which verl resource pool each role lands in is configs/methods/verl/<version>/_trainers.yaml's
    (the Plan carries it as verl_pools): no string in launcher/ names one of those pools
    (placement's old prefix -> role table did)."""
    names = {pool for version in catalog.versions() for pools in catalog.trainer_pools(version).values()
             for pool in pools.values()}
    assert {"global_pool", "rollout_pool"} <= names  # the table is read
    found = [f"{_where(path, node)}: {node.value!r}" for path, tree in _modules() for node in _strings(tree)
             if node.value in names]
    assert found == [], "read the role's verl pool from Plan.verl_pools (Job.verl_pools): " + "; ".join(found)


def test_one_reader_of_the_checkpoint_tracker():
    found = []
    for path, tree in _modules():
        if path == LAUNCHER / "checkpoints.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == checkpoints.TRACKER:
                found.append(f"{_where(path, node)} names {checkpoints.TRACKER}")
            if isinstance(node, (ast.Name, ast.Attribute, ast.alias)) and \
                    getattr(node, "id", getattr(node, "attr", getattr(node, "name", None))) == "TRACKER":
                found.append(f"{_where(path, node) if hasattr(node, 'lineno') else path} uses TRACKER")
    assert found == [], "read verl's tracker through launcher.checkpoints (tracked_step, read_tracker): " \
        + "; ".join(found)


SLURM_STATES = set(states.SLURM_TERMINAL) | set(states.AGGREGATE_ACTIVE_ORDER) | set(states.AGGREGATE_END_ORDER)


def test_one_table_of_slurm_states():
    """A literal (dict, tuple, list, set) naming three or more of Slurm's states is a table of
    them: launcher/states.py holds every one."""
    found = []
    for path, tree in _modules():
        if path == LAUNCHER / "states.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
                elts = node.keys if isinstance(node, ast.Dict) else node.elts
                named = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in SLURM_STATES]
                if len(named) >= 3:
                    found.append(f"{_where(path, node)}: {named}")
    assert found == [], "Slurm's states belong in launcher/states.py: " + "; ".join(found)


WATCHDOG_KEYS = {"hang_timeout_s", "first_step_timeout_s"}


@pytest.mark.parametrize("check", ["field", "get"])
def test_one_statement_of_the_watchdog_defaults(check):
    """A number given as hang_timeout_s's or first_step_timeout_s's default (a dataclass
    field's, a `.get(key, N)`'s) anywhere but launcher/plan.py is a second statement."""
    found = []
    for path, tree in _modules():
        if path == LAUNCHER / "plan.py":
            continue
        for node in ast.walk(tree):
            if check == "field" and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id in WATCHDOG_KEYS and isinstance(node.value, ast.Constant):
                found.append(f"{_where(path, node)}: {node.target.id} = {node.value.value}")
            if check == "get" and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "get" and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value in WATCHDOG_KEYS and isinstance(node.args[1], ast.Constant):
                found.append(f"{_where(path, node)}: .get({node.args[0].value!r}, {node.args[1].value})")
    assert found == [], "the watchdog's defaults are launcher.plan's (HANG_TIMEOUT_S, FIRST_STEP_TIMEOUT_S): " \
        + "; ".join(found)


def test_the_schemas_do_not_restate_the_watchdog_defaults():
    """The JSON Schemas' words for hang_timeout_s / first_step_timeout_s name no number of
    launcher/plan.py's (they said "default 1800"): a changed default would leave them wrong."""
    import json

    from launcher import plan

    numbers = {str(plan.HANG_TIMEOUT_S), str(plan.FIRST_STEP_TIMEOUT_S)}
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in WATCHDOG_KEYS and isinstance(value, dict):
                    said = json.dumps(value)
                    found.extend(f"{where}: {key} says {n}" for n in numbers if n in said)
                walk(value, where)
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for path in sorted((ROOT / "configs" / "schema").glob("*.json")):
        walk(json.loads(path.read_text()), path.name)
    assert found == [], "say 'sf's default' and let launcher/plan.py hold the number: " + "; ".join(found)
