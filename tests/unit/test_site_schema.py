"""The site file and the runtime registry as checked contracts (issue 32, item 2): every class
of mistake refused with one line that names the field, the file and line, and the fix
(launcher.spec.contracts against configs/schema/site.schema.json, runtimes.schema.json);
every site sf ships, and every key the code reads, fits the schema."""
from __future__ import annotations

import ast
import copy
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.errors import SpecError, SpecErrors
from launcher.runtime import KINDS
from launcher.sbatch_values import KEYS as SCHEDULER_KEYS
from launcher.spec import contracts, paths
from launcher.spec.runtimes import resolve_runtime
from launcher.spec.schema_fast import surely_valid
from launcher.spec.site import Series, load_site, site_from_dict

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "site" / "dev.yaml"
SITE_SCHEMA = contracts.schema(contracts.SITE_SCHEMA)
REGISTRY_SCHEMA = contracts.schema(contracts.REGISTRY_SCHEMA)


def _write(tmp_path: Path, text: str, name: str = "site.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _dev_with(tmp_path: Path, old: str, new: str) -> Path:
    text = DEV.read_text()
    assert old in text, old
    return _write(tmp_path, text.replace(old, new, 1))


def _refused(path: Path) -> list[SpecError]:
    with pytest.raises((SpecError, SpecErrors)) as err:
        load_site(str(path))
    return err.value.errors if isinstance(err.value, SpecErrors) else [err.value]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# --- what sf ships passes ---------------------------------------------------------------------

def _bench_sites():
    for path in sorted((REPO / "benchmarks").rglob("*site*.yaml")):
        yield path


@pytest.mark.parametrize("path", [DEV, REPO / "site" / "example-site.yaml", *_bench_sites()],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_sites_pass(path, tmp_path):
    # the benchmarks' templates are filled by their scripts (rl.sh, run.sh) as here
    text = path.read_text()
    for field, value in (("@RUNS@", "/tmp/runs"), ("@CPUS@", "16"), ("@REG@", "/tmp/runtimes.yaml"),
                         ("@TEMP@", "/tmp")):
        text = text.replace(field, value)
    site = load_site(str(_write(tmp_path, text)))
    assert site.series
    data = yaml.safe_load(text)
    assert not list(jsonschema.Draft202012Validator(SITE_SCHEMA).iter_errors(data))
    assert surely_valid(data, SITE_SCHEMA)  # the fast path: no jsonschema import for a good site


def test_a_good_site_never_imports_jsonschema():
    code = ("import sys; from launcher.spec.site import load_site; load_site(sys.argv[1]); "
            "print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(DEV)], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


# --- misspelt keys, anywhere -------------------------------------------------------------------

@pytest.mark.parametrize("old,new,field,bad,want", [
    ("  signal_lead_s: 60\n", "  signal_lead_s: 60\n  max_restart_in_place: 2\n", "site.slurm",
     "max_restart_in_place", "max_restarts_in_place"),
    ("name: dev\n", "name: dev\nrun_dir: /x\n", "site", "run_dir", "runs_dir"),
    ("    gpus_per_node: 4\n", "    gpu_per_node: 4\n", "site.series.fake", "gpu_per_node", "gpus_per_node"),
    ("  barrier_timeout_s: 120\n", "  barrier_timeout: 120\n", "site.ray", "barrier_timeout", "barrier_timeout_s"),
    ("{method: loopback, prefix: \"127.0.0\"}", "{method: loopback, prefx: \"127.0.0\"}",
     "site.ray.node_address", "prefx", "prefix"),
    ("  barrier_timeout_s: 120\n", "  barrier_timeout_s: 120\n  large_cluster: {min_node: 8}\n",
     "site.ray.large_cluster", "min_node", "min_nodes"),
])
def test_misspelt_key_anywhere_names_the_closest_and_the_line(tmp_path, old, new, field, bad, want):
    path = _dev_with(tmp_path, old, new)
    [err] = _refused(path)
    assert err.field == field
    assert f"unknown key {bad!r}" in err.message and f"did you mean {want}" in err.message
    assert err.message.startswith(f"{path}:{_line_of(path, bad)}: ")
    assert "\n" not in str(err)


def test_two_problems_two_lines_each_with_its_own_line(tmp_path):
    path = _dev_with(tmp_path, "name: dev\n", "name: dev\nnmae: x\ncolour: red\n")
    errs = _refused(path)
    assert [e.field for e in errs] == ["site", "site"]
    assert errs[0].message.startswith(f"{path}:{_line_of(path, 'nmae')}: unknown key 'nmae' (did you mean name?)")
    assert errs[1].message.startswith(f"{path}:{_line_of(path, 'colour')}: unknown key 'colour'")


# --- types and ranges --------------------------------------------------------------------------

def test_modules_as_a_string_must_be_a_list(tmp_path):
    path = _dev_with(tmp_path, "modules: []", "modules: cuda/12.4")
    [err] = _refused(path)
    assert err.field == "site.modules" and "not a list" in err.message and "[cuda/12.4]" in err.message
    assert err.message.startswith(f"{path}:{_line_of(path, 'modules:')}: ")


@pytest.mark.parametrize("ports,field,words", [
    ("[70000, 80000]", "site.ray.port_range[0]", "65535"),
    ("[0, 2000]", "site.ray.port_range[0]", "minimum of 1024"),
    ("[20000, 20500]", "site.ray.port_range", f"fewer than the {contracts.PORT_BLOCK} sf needs"),
    ("[30000, 20000]", "site.ray.port_range", "LOW must be below HIGH"),
    ("[20000]", "site.ray.port_range", "too short"),
    ("20000-30000", "site.ray.port_range", "not a list"),
])
def test_port_range_within_ports_and_holding_a_block(tmp_path, ports, field, words):
    path = _dev_with(tmp_path, "port_range: [20000, 59999]", f"port_range: {ports}")
    errs = _refused(path)
    assert errs[0].field == field and words in errs[0].message, errs
    assert errs[0].message.startswith(f"{path}:{_line_of(path, 'port_range')}: ")


def test_the_block_size_is_the_job_sides():
    from launcher.injob.ports import JOB_BLOCK

    assert contracts.PORT_BLOCK == JOB_BLOCK


@pytest.mark.parametrize("key", ["gpus_per_node", "cpus_per_node"])
def test_gpu_and_cpu_counts_at_least_one(tmp_path, key):
    value = {"gpus_per_node": 4, "cpus_per_node": 16}[key]
    path = _dev_with(tmp_path, f"    {key}: {value}\n", f"    {key}: 0\n")
    [err] = _refused(path)
    assert err.field == f"site.series.fake.{key}" and "less than the minimum of 1" in err.message
    assert err.message.startswith(f"{path}:{_line_of(path, f'{key}: 0')}: ")


def test_a_gpu_count_past_any_node_is_refused(tmp_path):
    """1e99 GPUs a node (a typo) would reach every GPU count sf derives from it, as config.yaml's
    pools would: both stop at 1024."""
    path = _dev_with(tmp_path, "    gpus_per_node: 4\n", "    gpus_per_node: 4000000000\n")
    [err] = _refused(path)
    assert err.field == "site.series.fake.gpus_per_node" and "greater than the maximum of 1024" in err.message


@pytest.mark.parametrize("env,field,words", [
    ("[A, B]", "site.env", "a list, not a mapping"),
    ("{THREADS: 8}", "site.env.THREADS", 'quote it: "8"'),
    ("{FLAG: true}", "site.env.FLAG", "wrong type"),
    ("{1A: x}", "site.env", "an environment variable name"),
])
def test_env_a_mapping_of_strings(tmp_path, env, field, words):
    path = _dev_with(tmp_path, "env:\n", f"env: {env}\nold_env:\n")
    errs = [e for e in _refused(path) if "old_env" not in e.message]
    assert errs[0].field == field and words in errs[0].message, errs


def test_large_cluster_env_too(tmp_path):
    path = _dev_with(tmp_path, "  barrier_timeout_s: 120\n", "  barrier_timeout_s: 120\n  large_cluster: {env: [A]}\n")
    [err] = _refused(path)
    assert err.field == "site.ray.large_cluster.env" and "a list, not a mapping" in err.message


@pytest.mark.parametrize("name", ["SF_RUN_DIR", "SF_MAX_REQUEUES", "SLURM_RESTART_COUNT", "SRUN_CPUS_PER_TASK",
                                  "SBATCH_REQUEUE", "VERL_FILE_LOGGER_PATH"])
def test_env_may_not_set_sfs_own_variables(tmp_path, name):
    """A site's env exporting SF_RUN_DIR or SF_MAX_REQUEUES changed where the job wrote and how often it requeued."""
    first = '  RAY_prestart_worker_first_driver: "0"\n'
    path = _dev_with(tmp_path, first, f"{first}  {name}: x\n")
    [err] = _refused(path)
    assert err.field == f"site.env.{name}", err
    assert err.message.startswith(f"{path}:{_line_of(path, name + ':')}: {name} is a variable sf's batch script "
                                  "sets or reads itself")
    path = _dev_with(tmp_path, "  barrier_timeout_s: 120\n",
                     f"  barrier_timeout_s: 120\n  large_cluster: {{env: {{{name}: x}}}}\n")
    [err] = _refused(path)
    assert err.field == f"site.ray.large_cluster.env.{name}" and "sf's batch script" in err.message
    _reg, site = _site_with_registry(tmp_path, f'verl:\n  "0.9.1": {{kind: venv, path: /opt/rt, env: {{{name}: x}}}}\n')
    with pytest.raises(SpecError) as err:
        resolve_runtime("verl", "0.9.1", site, environ={})
    assert err.value.field == "runtime.env" and f"{name} is a variable sf's batch script" in err.value.message


def test_gpu_directive_enumerated_and_refused_by_validate(tmp_path, monkeypatch):
    path = _dev_with(tmp_path, "    gpu_directive: gres\n", "    gpu_directive: magic\n")
    [err] = _refused(path)
    assert err.field == "site.series.fake.gpu_directive" and "not one of gres, gpus-per-node" in err.message
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")
    result = CliRunner().invoke(main, ["validate", str(REPO / "examples" / "grpo"), "--site", str(path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"sf: error: {err}"]


@pytest.mark.parametrize("old,new,field", [
    ("runs_dir: /var/lib/sfdev/runs", "runs_dir: runs", "site.runs_dir"),
    ("runtime_registry: /var/lib/sfdev/runtimes.yaml", "runtime_registry: reg.yaml", "site.runtime_registry"),
    ("dataset_roots: [/var/lib/sfdev/datasets]", "dataset_roots: [/d, data]", "site.dataset_roots[1]"),
    ("  temp_root: /tmp", "  temp_root: tmp", "site.ray.temp_root"),
    ("runs_dir: /var/lib/sfdev/runs", "runs_dir: $SF_TEST_UNSET_ROOT/runs", "site.runs_dir"),
])
def test_paths_absolute_after_expansion(tmp_path, monkeypatch, old, new, field):
    monkeypatch.delenv("SF_TEST_UNSET_ROOT", raising=False)
    path = _dev_with(tmp_path, old, new)
    [err] = _refused(path)
    assert err.field == field and "absolute path" in err.message
    if "$" in new:
        assert "$SF_TEST_UNSET_ROOT not set" in err.message


def test_tilde_and_variables_are_expanded_first(tmp_path, monkeypatch):
    monkeypatch.setenv("SF_TEST_ROOT", "/scratch")
    path = _dev_with(tmp_path, "runs_dir: /var/lib/sfdev/runs", "runs_dir: $SF_TEST_ROOT/runs")
    assert load_site(str(path)).runs_dir == "/scratch/runs"
    path = _dev_with(tmp_path, "dataset_roots: [/var/lib/sfdev/datasets]", "dataset_roots: [~/datasets]")
    assert load_site(str(path)).dataset_roots == (str(Path("~/datasets").expanduser()),)


@pytest.mark.parametrize("old,new,field,words", [
    ("  time: \"00:30:00\"", "  time: 4:00:00", "site.slurm.time", "14400 is read as a number"),  # YAML 1.1
    ("internet: true", "internet: \"no\"", "site.internet", "not true or false"),
    ("  account: null", "  account: 1234", "site.slurm.account", 'quote it: "1234"'),
    ("default_series: fake", "default_series: h100", "site.default_series", "not one of the site's series"),
    ("{method: loopback, prefix: \"127.0.0\"}", "{method: interface}", "site.ray.node_address", "names no interface"),
    ("{method: loopback, prefix: \"127.0.0\"}", "{method: dns}", "site.ray.node_address.method", "not one of"),
    ("  fake:\n", "  1.5:\n", "site.series", "key 1.5 is read as a number, not text; quote it as written"),
    ("  health_check: preflight", "  health_check: never", "site.ray.health_check", "not one of"),
])
def test_other_values(tmp_path, old, new, field, words):
    text = DEV.read_text()
    if old not in text:  # keys the dev site leaves out
        text = text.replace("  barrier_timeout_s: 120\n", "  barrier_timeout_s: 120\n" + old.rstrip("\n") + "\n")
    path = _write(tmp_path, text.replace(old, new, 1))
    errs = _refused(path)
    assert errs[0].field == field and words in errs[0].message, errs


def test_an_empty_section_is_an_empty_mapping(tmp_path):
    # `slurm:` with every line under it commented out is YAML's null: the code reads it as {}
    path = _write(tmp_path, "name: s\nruns_dir: /r\nseries:\nslurm:\nray:\n  node_address:\nenv:\n")
    site = load_site(str(path))
    assert site.series == {} and site.env == () and site.ray.address_method == "hostname"
    [err] = _refused(_write(tmp_path, "name: s\nruns_dir: /r\nmodules:\n"))  # a list is never null
    assert err.field == "site.modules" and "is empty (null)" in err.message


def test_one_problem_is_one_spec_error_in_memory_too():
    data = yaml.safe_load(DEV.read_text())
    data["series"]["fake"]["gpus_per_node"] = 0
    with pytest.raises(SpecError) as err:
        site_from_dict(data, "dev.yaml")
    assert err.value.field == "site.series.fake.gpus_per_node" and err.value.message.startswith("dev.yaml: ")


# --- sf doctor and sf schema -------------------------------------------------------------------

def test_doctor_refuses_a_bad_site_before_asking_the_cluster(tmp_path, monkeypatch):
    from launcher import slurm

    def never(*_a, **_k):
        raise AssertionError("doctor asked Slurm about a site that breaks its schema")

    monkeypatch.setattr(slurm, "show_partitions", never)
    monkeypatch.setattr(slurm, "accounting_check", never)
    path = _dev_with(tmp_path, "  signal_lead_s: 60\n", "  signal_lead_s: 60\n  max_restart_in_place: 2\n")
    result = CliRunner().invoke(main, ["doctor", "--site", str(path)])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"sf: error: site.slurm: {path}:") and "did you mean max_restarts_in_place" in line


@pytest.mark.parametrize("flag,name", [("--site", contracts.SITE_SCHEMA), ("--registry", contracts.REGISTRY_SCHEMA)])
def test_sf_schema_prints_them(flag, name):
    result = CliRunner().invoke(main, ["schema", flag])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json.loads((paths.configs_dir() / "schema" / name).read_text())
    assert json.loads(CliRunner().invoke(main, ["schema"]).stdout)["title"] != json.loads(result.stdout)["title"]


@pytest.mark.parametrize("name", [contracts.SITE_SCHEMA, contracts.REGISTRY_SCHEMA])
def test_the_schemas_are_valid_json_schemas(name):
    jsonschema.Draft202012Validator.check_schema(contracts.schema(name))


# --- every key the code reads is in the schema -------------------------------------------------

def _properties(schema: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, sub in (schema.get("properties") or {}).items():
        out.add(prefix + key)
        out |= _properties(sub, f"{prefix}{key}.")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out |= _properties(extra, f"{prefix}*.")
    return out


SITE_KEYS = _properties(SITE_SCHEMA)


def _read_keys(source: str) -> set[str]:
    """String keys read in `source` by .get("k"...) or ["k"] (the site's dicts)."""
    keys = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            keys.add(node.args[0].value)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            keys.add(node.slice.value)
    return keys


def test_every_key_site_from_dict_reads_is_in_the_schema():
    tree = ast.parse((REPO / "launcher" / "spec" / "site.py").read_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "site_from_dict")
    leaf_names = {k.rsplit(".", 1)[-1] for k in SITE_KEYS}
    missing = sorted(_read_keys(ast.unparse(func)) - leaf_names)
    assert not missing, f"site_from_dict reads {missing}: add them to configs/schema/site.schema.json"


def test_keys_read_elsewhere_are_in_the_schema():
    want = {"internet", "container_runtime", "share_group", "ray.dashboard", "ray.node_address.interface",
            "ray.large_cluster.min_nodes", "ray.large_cluster.env", "slurm.pass_ray_env", "slurm.pass_sbatch_env",
            "slurm.pass_login_env", *(f"slurm.{k}" for k in SCHEDULER_KEYS)}
    assert want <= SITE_KEYS, sorted(want - SITE_KEYS)
    # raw reads outside site.py: site.raw.get("K") / (site.raw.get("ray") or {}).get("K")
    found = set()
    for path in (REPO / "launcher").rglob("*.py"):
        for top, key in re.findall(r'raw(?:\s*or\s*\{\}\))?\.get\("(\w+)"\)(?:\s*or\s*\{\}\)\.get\("(\w+)"\))?',
                                   path.read_text()):
            found.add(f"{top}.{key}" if key else top)
            assert (f"{top}.{key}" if key else top) in SITE_KEYS, f"{path}: {top}.{key}"
    assert "ray.dashboard" in found  # the pattern still finds the reads


def test_series_fields_are_the_schemas():
    fields = set(Series.__dataclass_fields__) - {"name"}
    assert fields == set(SITE_SCHEMA["properties"]["series"]["additionalProperties"]["properties"])


def test_site_scheduler_options_are_config_yamls():
    config = json.loads((paths.configs_dir() / "schema" / "config.schema.json").read_text())
    site_slurm = SITE_SCHEMA["properties"]["slurm"]["properties"]
    for key in SCHEDULER_KEYS:
        mine = {k: v for k, v in site_slurm[key].items() if k != "description"}
        theirs = {k: v for k, v in config["properties"]["slurm"]["properties"][key].items() if k != "description"}
        assert mine == theirs, key


# --- the fast path agrees with jsonschema ------------------------------------------------------

ODD = [None, True, False, 0, 1, -1, 8, 70000, 2.5, "", "x", "/abs", "rel/path", "gres", "magic", [], ["a"], [1],
       [20000, 59999], [20000], {}, {"a": "b"}, {"A": 1}, "00:30:00"]


def test_fast_valid_implies_jsonschema_valid_for_sites():
    validator = jsonschema.Draft202012Validator(SITE_SCHEMA)
    rng = random.Random(32)
    base = yaml.safe_load((REPO / "site" / "example-site.yaml").read_text())
    spots = []

    def walk(node, where):
        if isinstance(node, dict):
            for k, v in node.items():
                spots.append(where + [k])
                walk(v, where + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                spots.append(where + [i])
                walk(v, where + [i])

    walk(base, [])
    fast_yes = 0
    for _ in range(600):
        doc = copy.deepcopy(base)
        where = rng.choice(spots)
        node = doc
        for p in where[:-1]:
            node = node[p]
        if rng.random() < 0.15 and isinstance(node, dict):
            node[rng.choice(["bogus", "env", "modules", "ray", "name"])] = rng.choice(ODD)
        else:
            node[where[-1]] = rng.choice(ODD)
        if surely_valid(doc, SITE_SCHEMA):
            fast_yes += 1
            assert not list(validator.iter_errors(doc)), doc
    assert fast_yes > 50


# --- the runtime registry ----------------------------------------------------------------------

def test_registry_kinds_are_the_runtimes():
    kinds = REGISTRY_SCHEMA["properties"]["verl"]["additionalProperties"]["properties"]["kind"]["enum"]
    assert tuple(kinds) == KINDS


def _site_with_registry(tmp_path, text: str):
    reg = _write(tmp_path, text, "runtimes.yaml")
    return reg, site_from_dict({"name": "s", "runs_dir": "/r", "series": {}, "runtime_registry": str(reg)})


def test_registry_misspelt_key_with_its_line(tmp_path):
    reg, site = _site_with_registry(tmp_path, 'verl:\n  "0.9.1":\n    kind: venv\n    pth: /opt/rt\n')
    with pytest.raises(SpecError) as err:
        resolve_runtime("verl", "0.9.1", site, environ={})
    assert err.value.field == "runtime"
    assert err.value.message.startswith(f"{reg}:4: verl.0.9.1: unknown key 'pth' (did you mean path")
    assert "fix the runtime registry" in err.value.message


@pytest.mark.parametrize("text,field,words", [
    ('verl:\n  "0.9.1": {kind: docker, image: x}\n', "runtime.kind", "not one of"),
    ("verl:\n  0.10: {kind: venv, path: /opt/rt}\n", "runtime", "key 0.1 is read as a number"),
    ('verl:\n  "0.9.1": {kind: module, modules: cuda/12.4}\n', "runtime.modules", "not a list"),
    ('verl:\n  "0.9.1": {kind: venv, path: /opt/rt, env: [A]}\n', "runtime.env", "a list, not a mapping"),
    ('verl:\n  "0.9.1": {kind: venv, path: opt/rt}\n', "runtime.path", "wrong form"),
    ('verI:\n  "0.9.1": {kind: venv, path: /opt/rt}\n', "runtime", "did you mean verl"),
])
def test_registry_classes(tmp_path, text, field, words):
    _reg, site = _site_with_registry(tmp_path, text)
    with pytest.raises(SpecError) as err:
        resolve_runtime("verl", "0.9.1", site, environ={})
    assert err.value.field == field and words in err.value.message, err.value


def test_doctor_lists_every_registry_problem(tmp_path):
    from launcher.submit.doctor import check_runtimes

    reg, site = _site_with_registry(tmp_path, 'verl:\n  "0.9.1": {kind: venv, pth: /a}\n  "0.9.0": {kind: nope}\n')
    checks = check_runtimes(site)
    assert [c.status for c in checks] == ["fail", "fail"]
    assert all(c.name == "runtime registry" and str(reg) in c.detail for c in checks)


# --- the admins' page's examples fit ------------------------------------------------------------------

def _readme_block(after: str, starts: str) -> str:
    """The first 4-space indented block after the heading `after` of docs/admins.md (the admins'
    page) whose first line starts with `starts`."""
    text = (REPO / "docs" / "admins.md").read_text()
    lines = text[text.index(after):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    " + starts))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block)


def test_the_readmes_site_example_fits(tmp_path):
    text = _readme_block("## The site file", "name:")
    site = load_site(str(_write(tmp_path, text)))
    assert site.series["h200"].gpus_per_node == 8 and site.ray.interface == "ib0"


def test_the_readmes_registry_example_fits(tmp_path):
    text = _readme_block("### 3. Publish verl runtimes", "verl:")
    reg = _write(tmp_path, text, "runtimes.yaml")
    assert "0.9.1" in contracts.load_registry(reg)["verl"]


@pytest.mark.parametrize("prefix", ["999.999.999", "10.0.0", "127.0.256", "127.0"])
def test_a_loopback_prefix_outside_127_or_past_255_is_refused(tmp_path, prefix):
    path = _dev_with(tmp_path, 'prefix: "127.0.0"', f'prefix: "{prefix}"')
    [err] = _refused(path)
    assert err.field == "site.ray.node_address.prefix" and "127.X.Y, each 0-255" in err.message


def test_another_loopback_prefix_is_taken(tmp_path):
    from launcher.spec.site import load_site

    path = _dev_with(tmp_path, 'prefix: "127.0.0"', 'prefix: "127.1.250"')
    assert load_site(str(path)).ray.address_prefix == "127.1.250"
