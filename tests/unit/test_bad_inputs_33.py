"""Issue 33: no input and no damaged file breaks sf. Each bad input goes through the real CLI
(click's CliRunner) and must end with exit 2 and one `sf: error:` line naming the option or
file and the fix; with --json, errors are one `{"ok": false, ...}` document, never a traceback."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import SITE_DICT, write_exp, write_site  # noqa: E402
from unit_helpers import GOOD_SPEC as GOOD  # noqa: E402
from unit_helpers import refused  # noqa: E402
from unit_helpers import sf_cli as sf  # noqa: E402

from launcher.cli import app  # noqa: E402
from launcher.cli.app import COMMANDS  # noqa: E402


def json_refused(result, *needles, code=2):
    """--json: the error document on stdout (and the one line on stderr)."""
    line = refused(result, *needles, code=code)
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["errors"], doc
    text = json.dumps(doc)
    for needle in needles:
        assert needle in text, (needle, doc)
    return line, doc


# --- 1. an unexpected exception: one line and a saved report, JSON with --json ------------

def _args_for(name: str) -> list[str]:
    """The least each command needs to get past click's parsing into its body."""
    command = app.LazyGroup().get_command(None, name)
    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        if isinstance(param, click.Argument):
            args.append("x")
        else:
            args += [param.opts[0], "x"]
    return args


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_crash_in_any_command_is_one_line_and_a_report(cli_env, monkeypatch, name):
    def boom(self, ctx):
        raise ZeroDivisionError("boom in " + self.name)

    monkeypatch.setattr(click.Command, "invoke", boom)
    line = refused(sf(name, *_args_for(name)), "ZeroDivisionError", "boom in", "report saved in", code=1)
    report = Path(line.split("report saved in ", 1)[1].split(";")[0])
    assert report.is_file() and report.parent == cli_env / "cache" / "crashes", report
    text = report.read_text()
    assert "Traceback" in text and "ZeroDivisionError: boom in" in text and "command:" in text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_crash_with_json_is_an_error_document(cli_env, monkeypatch, name):
    monkeypatch.setattr(click.Command, "invoke", lambda self, ctx: {}["missing"])
    line, doc = json_refused(sf(name, *_args_for(name), "--json"), "KeyError", code=1)
    assert doc["errors"][0]["field"] == "internal"


def test_crash_report_unwritable_still_one_line(cli_env, monkeypatch):
    (cli_env / "cache").write_text("a file where the cache folder should be")
    monkeypatch.setattr(click.Command, "invoke", lambda self, ctx: 1 / 0)
    refused(sf("list"), "ZeroDivisionError", "no report", code=1)


# --- 2. command values --------------------------------------------------------------------

@pytest.fixture
def exp(cli_env):
    write_exp(cli_env, "exp", GOOD)
    return cli_env


@pytest.mark.parametrize("args, needles", [
    (["validate", "exp", "--model", ""], ["--model", "is empty", "leave --model out"]),
    (["validate", "exp", "--model", "  "], ["--model", "is empty"]),
    (["validate", "exp", "--train-data", ""], ["--train-data", "is empty", "training file"]),
    (["validate", "exp", "--train-data", "/d/a.parquet", "--train-data", ""], ["--train-data", "is empty"]),
    (["validate", "exp", "--validation-data", ""], ["--validation-data", "is empty"]),
    (["validate", "exp", "--profile", ""], ["--profile", "is empty"]),
    (["validate", "exp", "--runs-dir", ""], ["--runs-dir", "is empty"]),
    (["render", "exp", "-o", ""], ["--output", "is empty", "pass a folder"]),
    (["validate", "exp", "--constraint", "&&"], ["--constraint", "'&&'", "feature", "a100&ib"]),
    (["validate", "exp", "--constraint", "a100&"], ["--constraint", "ends with an operator"]),
    (["validate", "exp", "--constraint", "(a100|h200"], ["--constraint", "never closed"]),
    (["validate", "exp", "--constraint", "a100**2"], ["--constraint", "node count"]),
    (["status", "--watch", "--interval", "nan"], ["--interval", "nan", "number of seconds"]),
    (["status", "--watch", "--interval", "inf"], ["--interval", "inf"]),
    (["logs", "x", "--interval", "nan"], ["--interval", "nan"]),
    (["logs", "x", "--check-every", "inf"], ["--check-every", "inf"]),
    (["list", "--runs-dir", " "], ["--runs-dir", "is empty"]),
    (["validate", "exp", "--exclude", ""], ["--exclude", "is empty"]),
    (["validate", "exp", "--dependency", ""], ["--dependency", "is empty"]),
    (["validate", "exp", "--mail-type", ""], ["--mail-type", "is empty"]),
    (["validate", "exp", "--reservation", ""], ["--reservation", "is empty"]),
    (["validate", "exp", "--account", ""], ["--account", "is empty"]),
    (["validate", "exp", "--constraint", ""], ["--constraint", "is empty"]),
    (["submit", "exp", "--dry-run", "--after", ""], ["--after", "is empty"]),
    (["status", ""], ["RUN|SWEEP", "is empty"]),
    (["logs", "x", "--node", ""], ["--node", "is empty"]),
    (["logs", "x", "--role", ""], ["--role", "is empty"]),
    (["attach", "x", "--node", ""], ["--node", "is empty"]),  # '' attached to the head
    (["attach", "x", "--role", ""], ["--role", "is empty"]),
    (["doctor", "--site", ""], ["--site", "is empty", "pass a site file"]),  # it fell back to the default site
    (["plot", "x", "-o", ""], ["--output", "is empty", "FILE.png"]),  # it said "-o: . must end in .png"
])
def test_command_value_refused(exp, args, needles):
    refused(sf(*args), *needles)


def test_command_value_refused_json(exp):
    line, doc = json_refused(sf("status", "--interval", "nan", "--json"), "--interval")
    assert doc["errors"][0]["field"] == "--interval"


def test_good_constraint_still_passes(exp):
    r = sf("validate", "exp", "--constraint", "[rack1|rack2]&a100*2")
    assert r.exit_code == 0, r.stderr


@pytest.fixture
def ckpt_env(cli_env, monkeypatch):
    """A runtime registry (export and eval need one) and a good FSDP checkpoint in `ckpt`."""
    registry = cli_env / "runtimes.yaml"
    registry.write_text(f'verl:\n  "0.9.1": {{kind: venv, path: {cli_env / "rt"}}}\n')
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", str(registry))
    monkeypatch.delenv("FORGE_IMAGE_VERL", raising=False)
    fsdp_layout(cli_env / "ckpt", step=5, world=2)
    return cli_env


def fsdp_layout(root: Path, step: int = 5, world: int = 2) -> Path:
    actor = root / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))
    for rank in range(world):
        (actor / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"x")
    (root / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return actor


def export(cli_env, *args):
    return sf("export", "my-grpo", "--checkpoint", cli_env / "ckpt", "--checkpoint-format", "verl-fsdp", "--dry-run",
              "--target", cli_env / "hf", *args)


def sft_run(cli_env):
    from launcher import runs

    val = cli_env / "val.jsonl"
    val.write_text('{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n')
    run = runs.create_run(cli_env / "runs", "my-sft")
    run.write_json("plan.json", {"method": "sft", "framework_version": "0.9.1",
                                 "overrides": [f"data.val_files={val}", "data.messages_key=messages"]})
    fsdp_layout(run.checkpoints_dir, step=3, world=1)
    return run


def test_export_good_is_accepted(ckpt_env):
    r = export(ckpt_env, "--time", "01:00:00")
    assert r.exit_code == 0, r.output
    assert "#SBATCH --time=01:00:00" in r.output


@pytest.mark.parametrize("args, needles", [
    (["--time", "0"], ["--time", "'0'", "no time at all"]),
    (["--time", "99:99:99"], ["--time", "minutes must be below 60"]),
    (["--time", ""], ["--time", "is empty"]),
    (["--target", ""], ["--target", "is empty"]),
    (["--checkpoint", ""], ["--checkpoint", "is empty"]),
])
def test_export_value_refused(ckpt_env, args, needles):
    refused(export(ckpt_env, *args), *needles)


def test_export_target_dev_null_refused(ckpt_env):
    r = sf("export", "my-grpo", "--checkpoint", ckpt_env / "ckpt", "--checkpoint-format", "verl-fsdp", "--dry-run",
           "--target", "/dev/null")
    refused(r, "--target", "/dev/null", "not a folder", "new or empty folder")
    (ckpt_env / "afile").write_text("x")
    r = sf("export", "my-grpo", "--checkpoint", ckpt_env / "ckpt", "--dry-run", "--target", ckpt_env / "afile" / "hf")
    refused(r, "--target", "afile is a file")


def test_eval_good_is_accepted(ckpt_env):
    run = sft_run(ckpt_env)
    r = sf("eval", run.id, "--dry-run", "--max-samples", "1", "--max-new-tokens", "1", "--time", "10")
    assert r.exit_code == 0, r.output
    assert "--max-samples 1" in r.output


@pytest.mark.parametrize("args, needles", [
    (["--time", "0"], ["--time", "no time at all"]),
    (["--time", "99:99:99"], ["--time", "below 60"]),
    (["--max-samples", "0"], ["--max-samples", "evaluate nothing", "1 or more"]),
    (["--max-samples", "-3"], ["--max-samples", "1 or more"]),
    (["--max-new-tokens", "0"], ["--max-new-tokens", "1 or more"]),
    (["--gpus", "-1"], ["--gpus", "0 or more"]),
    (["--model", ""], ["--model", "is empty"]),
    (["--validation-data", ""], ["--validation-data", "is empty"]),
])
def test_eval_value_refused(ckpt_env, args, needles):
    run = sft_run(ckpt_env)
    refused(sf("eval", run.id, "--dry-run", *args), *needles)


# --- 3. checkpoints read by export and eval -----------------------------------------------

@pytest.mark.parametrize("tracker, needles", [
    ("\u0663", ["latest_checkpointed_iteration.txt", "not a step number"]),  # ARABIC-INDIC THREE
    ("\u00b2", ["latest_checkpointed_iteration.txt", "not a step number"]),  # superscript two: isdigit, not int
    ("7" * 5000, ["latest_checkpointed_iteration.txt", "not a step number", "..."]),
    ("-1", ["latest_checkpointed_iteration.txt", "not a step number"]),
    (b"\xff\xfe\x00", ["latest_checkpointed_iteration.txt", "not text"]),
    ("1" * 70000, ["latest_checkpointed_iteration.txt", "damaged"]),
])
def test_damaged_tracker_refused(ckpt_env, tracker, needles):
    path = ckpt_env / "ckpt" / "latest_checkpointed_iteration.txt"
    path.write_bytes(tracker if isinstance(tracker, bytes) else tracker.encode())
    line = refused(export(ckpt_env), "--checkpoint", *needles)
    assert len(line) < 600, line
    run = sft_run(ckpt_env)
    (run.checkpoints_dir / "latest_checkpointed_iteration.txt").write_bytes(path.read_bytes())
    refused(sf("eval", run.id, "--dry-run"), "--checkpoint", *needles)


@pytest.mark.parametrize("config, needles", [
    ({"world_size": 10**12}, ["fsdp_config.json", "world_size 1000000000000", "from 1 to"]),
    ({"world_size": -1}, ["fsdp_config.json", "world_size -1"]),
    ({"world_size": 0}, ["fsdp_config.json", "world_size 0"]),
    ({"world_size": True}, ["fsdp_config.json", "world_size True"]),
    ({"world_size": "2"}, ["fsdp_config.json", "world_size '2'"]),
    ({"FSDP_version": 1}, ["fsdp_config.json", "world_size None"]),
    ([2], ["fsdp_config.json", "world_size None"]),
    ("{not json", ["fsdp_config.json", "not JSON"]),
    ("[" * 60000, ["fsdp_config.json", "not JSON"]),
    (b"\x00\xff", ["fsdp_config.json", "not text"]),
])
def test_damaged_fsdp_config_refused_quickly(ckpt_env, config, needles):
    import time

    path = ckpt_env / "ckpt" / "global_step_5" / "actor" / "fsdp_config.json"
    path.write_bytes(config if isinstance(config, bytes) else
                     (config if isinstance(config, str) else json.dumps(config)).encode())
    start = time.monotonic()
    refused(export(ckpt_env), "--checkpoint", *needles)
    run = sft_run(ckpt_env)
    (run.checkpoints_dir / "global_step_3" / "actor" / "fsdp_config.json").write_bytes(path.read_bytes())
    refused(sf("eval", run.id, "--dry-run"), "--checkpoint", *needles)
    assert time.monotonic() - start < 10


def test_missing_shards_listed_briefly(ckpt_env):
    actor = ckpt_env / "ckpt" / "global_step_5" / "actor"
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": 64}))
    line = refused(export(ckpt_env), "--checkpoint", "model_world_size_64_rank_0.pt", "59 more shards")
    assert "rank_63" not in line


# --- 4. YAML: alias bombs, merge keys --------------------------------------------------------

BOMB = GOOD + """a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def _timed(*args):
    import time

    start = time.monotonic()
    result = sf(*args)
    return result, time.monotonic() - start


def test_alias_bomb_in_config_refused_fast(exp):
    write_exp(exp, "exp", BOMB)
    result, took = _timed("validate", "exp")
    refused(result, "config.yaml", "anchors and aliases", "alias bomb", "fewer aliases")
    assert took < 1.0, took


def test_alias_bomb_in_site_file_refused_fast(exp):
    site = exp / "site.yaml"
    site.write_text(site.read_text() + BOMB.replace(GOOD, "").replace("a: &a", "x-a: &a"))
    result, took = _timed("validate", "exp")
    refused(result, "site", "site.yaml", "alias bomb")
    assert took < 1.0, took


def test_big_alias_string_refused(exp):
    aliases = ", ".join(["*d"] * 23)
    write_exp(exp, "exp", GOOD + f"description: &d {'v' * 100_000}\nknobs: {{x: [{aliases}]}}\n")
    refused(sf("validate", "exp"), "config.yaml", "MiB of text")


def test_oversized_spec_file_refused(exp):
    write_exp(exp, "exp", GOOD + "overrides:\n" + "".join(f"  - a.b{i}=v\n" for i in range(30_000)))
    result, took = _timed("validate", "exp")
    refused(result, "config.yaml", "over 256 KiB")
    assert took < 1.0, took


def test_recursive_alias_refused(exp):
    write_exp(exp, "exp", GOOD + "knobs: &k {x: [1, *k]}\n")
    refused(sf("validate", "exp"), "config.yaml", "not valid YAML", "recursive")


def test_merge_key_twice_refused(exp):
    write_exp(exp, "exp", GOOD.replace("  validation: {files: /d/test.parquet}\n",
                                       "  validation:\n    <<: {files: /d/a.parquet}\n    <<: {files: /d/b.parquet}\n"))
    refused(sf("validate", "exp"), "config.yaml", "lines 6 and 7", "<< is given twice", "<<: [*a, *b]")


def test_merge_of_a_scalar_refused(exp):
    write_exp(exp, "exp", GOOD + "knobs: {<<: 3}\n")
    refused(sf("validate", "exp"), "config.yaml", "<< merges mappings only")


def test_merges_follow_yamls_rule(tmp_path):
    """A mapping's own keys win over merged ones, the first merged mapping over later ones, and
    a mapping merged after it merged another keeps its own value (PyYAML's flattening, order
    dependent, gave a false 'given twice' here)."""
    from launcher.spec.experiment import read_config

    path = tmp_path / "config.yaml"
    path.write_text("method: verl/grpo\n"
                    "knobs: &a {rollout_n: 3, total_epochs: 2}\n"
                    "data:\n"
                    "  validation: &b {<<: *a, rollout_n: 5}\n"
                    "  train: {<<: [{rollout_n: 7}, *b], total_epochs: 9}\n"
                    "teacher: {<<: *b}\n")
    data = read_config(path)
    assert data["data"]["validation"] == {"rollout_n": 5, "total_epochs": 2}
    assert data["data"]["train"] == {"rollout_n": 7, "total_epochs": 9}
    assert data["teacher"] == {"rollout_n": 5, "total_epochs": 2}
    assert data["knobs"] == {"rollout_n": 3, "total_epochs": 2}


# --- 5. values ---------------------------------------------------------------------------------

def test_value_over_the_kernels_argument_limit_refused(exp):
    write_exp(exp, "exp", GOOD + f'overrides: ["trainer.experiment_name={"x" * 200_000}"]\n')
    line = refused(sf("validate", "exp"), "overrides[0]", "trainer.experiment_name", "200,024 bytes",
                   "131,071", "MAX_ARG_STRLEN", "in a file")
    assert len(line) < 500
    write_exp(exp, "exp", GOOD)
    line = refused(sf("validate", "exp", "--set", f"trainer.project_name={'y' * 131_072}"),
                   "--set trainer.project_name: the override is 131,093 bytes", "MAX_ARG_STRLEN")


def test_value_just_under_the_argument_limit_passes(exp):
    value = "x" * (131_071 - len("trainer.experiment_name="))
    write_exp(exp, "exp", GOOD + f'overrides: ["trainer.experiment_name={value}"]\n')
    r = sf("validate", "exp")
    assert r.exit_code == 0, r.stderr[-500:]


@pytest.mark.parametrize("value", ['""', '"  "'])
def test_empty_filter_metric_refused(exp, value):
    write_exp(exp, "exp", GOOD.replace("verl/grpo", "verl/dapo") + f"knobs: {{filter_metric: {value}}}\n")
    r = sf("validate", "exp")
    assert r.exit_code == 2, r.stderr
    assert any(line.startswith("sf: error: knobs.filter_metric: algorithm.filter_groups.metric=")
               and "filter_metric: acc" in line for line in r.stderr.splitlines()), r.stderr


def test_filter_metric_empty_is_fine_without_filtering(exp):
    write_exp(exp, "exp", GOOD.replace("verl/grpo", "verl/dapo") + "knobs: {filter_metric: acc}\n")
    assert sf("validate", "exp").exit_code == 0


def test_grid_points_resolving_to_one_job_refused(ckpt_env):
    write_exp(ckpt_env, "exp", GOOD)
    r = sf("sweep", "exp", "--grid", "trainer.total_epochs=${trainer.nnodes},1", "--dry-run")
    line = refused(r, "point 1 (trainer.total_epochs=1)", "same job as point 0", "drop one of the values")
    assert "trainer.total_epochs=1" in line
    r = sf("sweep", "exp", "--grid", "trainer.total_epochs=${trainer.nnodes},2", "--dry-run")
    assert r.exit_code == 0, r.stderr


# --- 6. damaged run records ----------------------------------------------------------------------

DAMAGE = {"binary": b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "empty": b"", "list": b"[]", "null": b"null",
          "truncated": b'{"id": "bad-aaaaa", "state": "runn', "unreadable": b"{}",
          "job_ids": b'{"id": "bad-aaaaa", "state": "running", "job_ids": 5}',
          "created": b'{"id": "bad-aaaaa", "created": 5, "state": "completed"}',
          "sweep": b'{"id": "bad-aaaaa", "state": "running", "sweep": {"id": "x", "index": "0"}}',
          "history": b'{"id": "bad-aaaaa", "state": "running", "history": ["x"]}'}
BAD = "bad-aaaaa"


@pytest.fixture(params=sorted(DAMAGE))
def damaged(request, ckpt_env, monkeypatch):
    """A runs dir with one good run and one damaged record (BAD); the experiment `exp`."""
    from launcher import runs

    write_exp(ckpt_env, "exp", GOOD)
    good = runs.create_run(ckpt_env / "runs", "good")
    folder = ckpt_env / "runs" / BAD
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "slurm-1.out").write_text("hello\n")
    record = folder / "record.json"
    record.write_bytes(DAMAGE[request.param])
    if request.param == "unreadable":  # the suite runs as root, which reads every file: simulated
        from launcher import gateway
        real = gateway.open_read

        def refuse(fd, name, shown, *args, **kwargs):
            if shown == str(record):
                raise PermissionError(13, "Permission denied", shown)
            return real(fd, name, shown, *args, **kwargs)

        monkeypatch.setattr(gateway, "open_read", refuse)
    return {"cli_env": ckpt_env, "record": record, "good": good, "kind": request.param}


@pytest.mark.parametrize("args", [
    ["logs", BAD],
    ["logs", BAD, "--json"],
    ["cancel", BAD, "--json"],
    ["cancel", BAD],
    ["attach", BAD, "--print"],
    ["status", BAD],
    ["status", BAD, "--json"],
    ["metrics", BAD],
    ["sweep", "--retry-failed", BAD],
    ["submit", "exp", "--dry-run", "--after", BAD],
    ["sweep", "exp", "--grid", "rollout_n=2,3", "--dry-run", "--after", BAD],
    ["validate", "exp", "--model", f"run:{BAD}"],
    ["submit", "exp", "--dry-run", "--model", f"run:{BAD}"],
])
def test_damaged_record_is_one_line_naming_it(damaged, args):
    result = sf(*args)
    line = refused(result, str(damaged["record"]))
    assert ("cannot read" in line and "Permission denied" in line) if damaged["kind"] == "unreadable" \
        else "is damaged" in line, line
    if "--json" in args:
        doc = json.loads(result.stdout)
        assert doc["ok"] is False and str(damaged["record"]) in doc["errors"][0]["message"]


def test_list_leaves_out_and_names_a_damaged_record(damaged):
    r = sf("list")
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert damaged["good"].id in r.stdout and BAD not in r.stdout
    assert "damaged run record" in r.stderr and str(damaged["record"]) in r.stderr
    r = sf("list", "--json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["damaged"] == [BAD] and [x["id"] for x in doc["runs"]] == [damaged["good"].id]
    r = sf("status")  # the newest runs: the damaged one left out and named, no crash
    assert r.exit_code == 0 and damaged["good"].id in r.stdout, (r.stderr, r.exception)
    assert BAD not in r.stdout and str(damaged["record"]) in r.stderr


def test_damaged_plan_is_one_line_naming_it(ckpt_env):
    run = sft_run(ckpt_env)
    for text in ("[]", "{not json"):
        (run.dir / "plan.json").write_text(text)
        refused(sf("eval", run.id, "--dry-run"), str(run.dir / "plan.json"), "damaged")
        refused(sf("export", run.id, "--dry-run"), str(run.dir / "plan.json"), "damaged")


# --- what torch, vLLM or verl would refuse at start (launcher.compile.rules.start_values) ----

@pytest.mark.parametrize("setting, needles", [
    ("actor_lr=-1e-6", ["knobs.actor_lr", "optim.lr=-1e-06", "torch", "actor_lr to 0 or more"]),
    ("critic_lr=-1", ["critic.optim.lr=-1", "0 or more"]),
    ("temperature=-0.5", ["knobs.temperature", "rollout.temperature=-0.5", "vLLM", "0 or more"]),
    ("actor_rollout_ref.rollout.val_kwargs.temperature=-1", ["val_kwargs.temperature=-1", "vLLM"]),
    ("gpu_memory_utilization=0", ["knobs.gpu_memory_utilization", "above 0 and at most 1"]),
    ("gpu_memory_utilization=1.5", ["gpu_memory_utilization=1.5", "above 0 and at most 1"]),
    ("train_batch_size=0", ["knobs.train_batch_size", "data.train_batch_size=0", "1 or more"]),
    ("ppo_mini_batch_size=0", ["ppo_mini_batch_size=0", "1 or more"]),
    ("ppo_micro_batch_size_per_gpu=0", ["ppo_micro_batch_size_per_gpu=0", "1 or more"]),
    ("log_prob_micro_batch_size_per_gpu=-2", ["log_prob_micro_batch_size_per_gpu=-2", "1 or more"]),
    ("max_prompt_length=0", ["data.max_prompt_length=0", "1 or more"]),
    ("max_response_length=0", ["data.max_response_length=0", "1 or more"]),
    ("tensor_model_parallel_size=0", ["tensor_model_parallel_size=0", "vLLM", "1 or more"]),
])
def test_start_up_failures_refused(exp, setting, needles):
    base = GOOD.replace("verl/grpo", "verl/ppo") if setting.startswith("critic") else GOOD
    write_exp(exp, "exp", base)
    r = sf("validate", "exp", "--set", setting)
    assert r.exit_code == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if "refuses it at start" in line]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("setting", ["actor_lr=0", "temperature=0", "gpu_memory_utilization=1.0",
                                     "train_batch_size=256", "gpu_memory_utilization=0.05"])
def test_start_up_edges_pass(exp, setting):
    r = sf("validate", "exp", "--set", setting)
    assert r.exit_code == 0 and "refuses it at start" not in r.stderr, r.stderr


def test_binary_reason_file_is_read_not_a_crash(cli_env):
    from launcher import runs

    run = runs.create_run(cli_env / "runs", "good")
    run.update(state="failed")
    (run.dir / "reason").write_bytes(b"OOM on node\xff\xfe\n")
    r = sf("list")
    assert r.exit_code == 0 and run.id in r.stdout, (r.stderr, r.exception)
    assert "OOM on node" in runs.Run(run.dir).record()["exit_reason"]


@pytest.mark.parametrize("text", ["a\\b", "C:\\runs\\x", "ends\\", "it's\\", "two\\\\slashes"])
def test_backslash_reaches_verl_as_written(exp, text):
    """Hydra reads backslashes in a quoted value literally but before a quote: sf's override
    must compose to the text given, not to it with every backslash doubled."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    r = sf("validate", "exp", "--set", f"experiment_name={text}", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    override = next(o for o in doc["overrides"] if o.startswith("trainer.experiment_name="))
    assert OverridesParser.create().parse_override(override).value() == text, override
    assert doc["resolved"]["trainer.experiment_name"]["value"] == text


def test_train_batch_below_the_default_mini_batch_blames_the_knob_set(exp):
    line = refused(sf("validate", "exp", "--set", "train_batch_size=64"), "knobs.train_batch_size",
                   "ppo_mini_batch_size=256 is larger than train_batch_size=64", "train_batch_size >= 256")
    assert "refuses it at start-up" in line


# --- bounded work: resolving thousands of writes is linear, not pairwise -----------------------

def test_resolve_of_many_writes_is_linear_and_still_finds_twice_written_keys():
    import time

    from launcher.compile.resolve import Write, resolve
    from launcher.spec.layers import Layer, Origin

    n = 20_000
    writes = [Write(f"t.k{i}.x", i, Layer.CONFIG, f"overrides[{i}]", Origin(Layer.CONFIG), seq=i, item=i)
              for i in range(n)]
    writes += [Write("t.k7", 1, Layer.CONFIG, "overrides[a]", Origin(Layer.CONFIG), seq=n, item=n),  # a parent, later
               Write("t.k9.x", 2, Layer.CONFIG, "overrides[b]", Origin(Layer.CONFIG), seq=n + 1, item=n + 1),
               Write("t.k11.x.y", 3, Layer.SET, "--set t.k11.x.y", Origin(Layer.SET), seq=n + 2, item=n + 2),
               Write("t.k11", 4, Layer.SET, "--set t.k11", Origin(Layer.SET), seq=n + 3, item=n + 3)]
    start = time.process_time()  # CPU time: a loaded CI host's waits are not the resolver's
    res = resolve(writes)
    took = time.process_time() - start
    assert took < 5, took  # pairwise it took minutes; linear, ~0.4 s
    messages = [str(e) for e in res.errors]
    keep = "; keep one of them"
    assert messages == [
        "overrides[a]: t.k7.x and t.k7 is written twice in config.yaml (overrides[7] and overrides[a])" + keep,
        "overrides[b]: t.k9.x is written twice in config.yaml (overrides[9] and overrides[b])" + keep,
        "--set t.k11: t.k11.x.y and t.k11 is written twice in --set (--set t.k11.x.y and --set t.k11)" + keep,
    ], messages
    # t.k11 (a value, --set) replaces t.k11.x (config.yaml) below it; t.k11.x.y stays in its own layer's rank
    assert "t.k11.x" not in res.entries and "t.k11" in res.entries


# --- the disaggregated methods (launcher.compile.rules.disaggregated: rule_async_training, rule_async_run_length,
# rule_other_trainers_keys; pools.rule_teacher_needs_distillation) ------------------------------------

ASYNC = GOOD.replace("verl/grpo", "verl/grpo-async") + """knobs: {ppo_mini_batch_size: 32}
spec:
  resources:
    pools: [{name: train, nodes: 1}, {name: gen, nodes: 1, series: fake-teach}]
    roles: {actor: train, rollout: gen}
"""
ONE_STEP_OFF = ASYNC.replace("verl/grpo-async", "verl/grpo-one-step-off")


def validate_line(cli_env, text, *args):
    write_exp(cli_env, "exp", text)
    return sf("validate", "exp", *args)


@pytest.mark.parametrize("setting, needles", [
    ("async_training.staleness_threshold=inf", ["--set async_training.staleness_threshold",
                                                "staleness_threshold=inf", "not inf", "staleness_threshold=0.5"]),
    ("async_training.staleness_threshold=-inf", ["staleness_threshold=-inf", "a number >= 0"]),
    ("async_training.staleness_threshold=nan", ["staleness_threshold=nan", "not inf"]),
    ("rollout.total_rollout_steps=0", ["--set rollout.total_rollout_steps", "total_rollout_steps=0",
                                       "32 x 1 = 32 prompts", "without a trainer step", "at least 32",
                                       "total_rollout_steps=null"]),
    ("rollout.total_rollout_steps=-5", ["total_rollout_steps=-5", "without a trainer step"]),
    ("rollout.total_rollout_steps=31", ["total_rollout_steps=31", "at least 32"]),
    ("async_training.concurrent_samples_per_replica=0", ["concurrent_samples_per_replica=0", "waits for a free "
                                                         "slot forever", "concurrent_samples_per_replica=16"]),
    ("async_training.concurrent_samples_per_replica=-2", ["concurrent_samples_per_replica=-2", "whole number >= 1"]),
])
def test_async_values_verl_cannot_run_refused(exp, setting, needles):
    refused(validate_line(exp, ASYNC, "--set", setting), *needles)


@pytest.mark.parametrize("setting", ["async_training.staleness_threshold=0", "async_training.staleness_threshold=3",
                                     "rollout.total_rollout_steps=32", "rollout.total_rollout_steps=null",
                                     "async_training.concurrent_samples_per_replica=1"])
def test_async_edges_pass(exp, setting):
    r = validate_line(exp, ASYNC, "--set", setting)
    assert r.exit_code == 0, r.stderr


def test_async_require_batches_raise_the_run_length_floor(exp):
    refused(validate_line(exp, ASYNC, "--set", "rollout.total_rollout_steps=63", "--set",
                          "async_training.require_batches=2"), "32 x 2 = 64 prompts", "at least 64")


def test_async_default_run_length_below_one_step_warns(exp):
    r = validate_line(exp, ASYNC.replace("{ppo_mini_batch_size: 32}", "{ppo_mini_batch_size: 256}"))
    assert r.exit_code == 0, r.stderr
    assert "rollout.total_rollout_steps=100 prompts (verl 0.9.1's default), fewer than the 256" in r.stderr


@pytest.mark.parametrize("text, setting, needles", [
    (GOOD, "async_training.staleness_threshold=0.5", ["--set async_training.staleness_threshold",
                                                      "read only by verl/grpo-async", "verl/grpo never reads it",
                                                      "use method: verl/grpo-async"]),
    (GOOD, "+async_training.trigger_parameter_sync_step=2", ["--set +async_training.trigger_parameter_sync_step",
                                                             "read only by verl/grpo-async"]),
    (GOOD, "rollout.total_rollout_steps=5", ["rollout.total_rollout_steps", "read only by verl/grpo-async"]),
    (ONE_STEP_OFF, "+rollout.total_rollout_steps=5", ["read only by verl/grpo-async",
                                                      "verl/grpo-one-step-off never reads it"]),
    (ONE_STEP_OFF, "async_training.require_batches=2", ["read only by verl/grpo-async"]),
    (GOOD, "rollout.nnodes=1", ["read only by verl/grpo-async and verl/grpo-one-step-off"]),
])
def test_async_only_keys_on_other_methods_refused(exp, text, setting, needles):
    refused(validate_line(exp, text, "--set", setting), *needles)


def test_trainer_own_keys_are_verls(exp):
    """rules.disaggregated.TRAINER_OWN_KEYS is what each disaggregated trainer's own YAML adds to ppo_trainer."""
    from launcher import verlcheck
    from launcher.compile.rules import disaggregated

    base = verlcheck.base_keys("ppo_trainer")
    for config, own in disaggregated.TRAINER_OWN_KEYS.items():
        added = verlcheck.base_keys(config) - base
        leaves = {k for k in added if not any(other.startswith(k + ".") for other in added)}
        assert all(k in added for k in own), (config, own)
        assert all(any(k == o or k.startswith(o + ".") for o in own) for k in leaves), (config, leaves, own)


@pytest.mark.parametrize("extra, args, needles", [
    ("teacher: {model: /models/teacher}\n", [], ["teacher.model", "verl/grpo has no teacher",
                                                 "remove the teacher: block", "verl/distillation"]),
    ("", ["--set", "teacher_tensor_model_parallel_size=2"],
     ["knobs.teacher_tensor_model_parallel_size", "verl/grpo has no teacher", "only when distillation is on"]),
    ("", ["--set", "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.3"],
     ["--set distillation.teacher_models", "verl/grpo has no teacher"]),
    ("spec:\n  resources:\n    pools: [{name: train}, {name: t, series: fake-teach}]\n"
     "    roles: {actor: train, teacher: t}\n", [], ["spec.resources.roles.teacher", "verl/grpo has no teacher"]),
])
def test_teacher_without_distillation_refused(exp, extra, args, needles):
    refused(validate_line(exp, GOOD + extra, *args), *needles)


def test_teacher_on_the_async_method_refused(exp):
    refused(validate_line(exp, ASYNC + "teacher: {model: /models/teacher}\n"), "verl/grpo-async has no teacher")


# --- healing settings (rules.healing: rule_spares, rule_hang_limits; the partition's capacity:
# launcher.submit.live.check, on the dev cluster in tests/cluster/test_bad_inputs_33.py) ----------

@pytest.mark.parametrize("extra, needles", [
    ("spec:\n  resources:\n    pools: [{name: train, nodes: 2, spare_nodes: 1}]\n",
     ["spec.resources.pools[0].spare_nodes", "max_restarts_in_place is 0 (the site's value)",
      "set slurm.max_restarts_in_place: 1"]),
    ("spec:\n  resources:\n    pools: [{name: train, nodes: 2, spare_nodes: 1}]\nslurm: {max_restarts_in_place: 0}\n",
     ["max_restarts_in_place is 0:", "sit allocated and idle"]),
    ("spec:\n  resources:\n    pools: [{name: train, nodes: 1, spare_nodes: 1}]\nslurm: {max_restarts_in_place: 1}\n",
     ["spec.resources.pools[0].spare_nodes", "one node, the head", "would never be used", "2 or more nodes"]),
    ("slurm: {time: '00:30:00', hang_timeout_s: 7200}\n",
     ["slurm.hang_timeout_s", "hang_timeout_s=7200 is longer than the job's time limit", "1800 s",
      "to at most 1800, or 0 to turn the watchdog off"]),
    ("slurm: {time: '00:30:00', hang_timeout_s: 1e9}\n", ["hang_timeout_s=1000000000.0 is longer"]),
    ("slurm: {time: '1-00:00:00', first_step_timeout_s: 90000}\n",
     ["slurm.first_step_timeout_s", "first_step_timeout_s=90000", "86400 s"]),
])
def test_healing_settings_refused(exp, extra, needles):
    refused(validate_line(exp, GOOD + extra), *needles)


@pytest.mark.parametrize("extra", [
    "spec:\n  resources:\n    pools: [{name: train, nodes: 2, spare_nodes: 1}]\nslurm: {max_restarts_in_place: 1}\n",
    # a one-node second pool's node is no head: its spare can take its place
    ASYNC.replace(GOOD.replace("verl/grpo", "verl/grpo-async"), "").replace(
        "{name: gen, nodes: 1, series: fake-teach}", "{name: gen, nodes: 1, series: fake-teach, spare_nodes: 1}")
    + "slurm: {max_restarts_in_place: 1}\n",
    "slurm: {time: '00:30:00', hang_timeout_s: 1800, first_step_timeout_s: 1800}\n",
    "slurm: {time: UNLIMITED, hang_timeout_s: 99999}\n",
    "slurm: {time: '00:10:00'}\n",  # the site's hang limits (1800/3600 s) are not the user's: not judged
])
def test_healing_settings_that_work_pass(exp, extra):
    text = (GOOD.replace("verl/grpo", "verl/grpo-async") if "gen" in extra else GOOD) + extra
    r = validate_line(exp, text)
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("extra, code", [
    ("", 2),  # the site's own time limit (00:30:00) under the site's own hang limit: refused
    ("slurm: {time: '04:00:00'}\n", 0),  # a longer time limit: the watchdog can fire
    ("slurm: {time: '00:20:00'}\n", 0),  # a short run the user picked: the user's choice
    ("slurm: {hang_timeout_s: 1200}\n", 0),  # the user's own limit, within the site's time
])
def test_a_site_hang_limit_beyond_the_sites_own_time_limit(exp, extra, code):
    """A site file whose hang_timeout_s outlasts its own slurm.time: every run that keeps the
    site's time would have a watchdog that never fires."""
    write_site(exp, runs_dir=str(exp / "runs"), slurm=dict(SITE_DICT["slurm"], hang_timeout_s=7200))
    result = validate_line(exp, GOOD + extra)
    if code:
        refused(result, "site slurm.hang_timeout_s", "hang_timeout_s=7200 in the site file", "1800 s",
                "set slurm.hang_timeout_s: 1800 or less, or 0 to turn the watchdog off", "ask the admins")
    else:
        assert result.exit_code == 0, (result.output, result.stderr)


def test_spares_count_in_the_partitions_capacity():
    from types import SimpleNamespace

    from launcher.plan import Pool
    from launcher.submit import live

    site = SimpleNamespace(series={"fake": SimpleNamespace(partition="train")})
    cap = {"train": [4] * 6}

    def plan(*pools):
        return SimpleNamespace(pools=list(pools), slurm=SimpleNamespace(partition=None), overrides=())

    errors, _ = live.check(plan(Pool("train", "fake", 5, 4, 0, ("actor",), 2)), site, cap)
    assert [str(e) for e in errors] == [
        "pools.train: 5 + 2 spare nodes x 4 GPUs can never run in partition train: it has 6 nodes, 6 of them with "
        ">= 4 GPUs (at most 4 GPUs a node); nodes and spare_nodes together must be at most 6 (spare nodes are "
        "allocated too; e.g. --profile fake:4x4, or fewer spare_nodes)"]
    errors, _ = live.check(plan(Pool("train", "fake", 4, 4, 0, ("actor",), 1),
                                Pool("gen", "fake", 1, 4, 1, ("rollout",), 1)), site, cap)
    assert len(errors) == 1 and "(+1 spare)" in str(errors[0]) and "7 nodes) can never run at once" in str(errors[0])
    assert live.check(plan(Pool("train", "fake", 5, 4, 0, ("actor",), 1)), site, cap)[0] == []


# --- `+` keys on nodes verl builds as dataclasses (launcher.verlcheck.added_field_errors) -

@pytest.mark.parametrize("setting, needles", [
    ("+actor_rollout_ref.ref.foo=1", ["+actor_rollout_ref.ref.foo", "builds actor_rollout_ref.ref as FSDPActorConfig",
                                      "no field 'foo'", "Drop the override"]),
    ("+actor_rollout_ref.ref.fsdp_config.foo=1", ["builds actor_rollout_ref.ref.fsdp_config as FSDPEngineConfig"]),
    ("+skip.foo=1", ["+skip.foo", "builds skip as SkipManagerConfig", "fields: async_rollout, rollout, rollout_tq"]),
    ("+skip.rollout.foo=1", ["builds skip.rollout as RolloutSkipConfig", "fields: action, dump_dir, enable, steps"]),
])
def test_plus_keys_verl_cannot_build_refused(exp, setting, needles):
    refused(validate_line(exp, GOOD, "--set", setting), *needles)


@pytest.mark.parametrize("args", [
    ["--set", "+actor_rollout_ref.ref.foo=1", "--set", "actor_rollout_ref.actor.use_kl_loss=false"],  # no ref built
    ["--set", "skip.rollout.enable=true"],
    ["--set", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2"],  # renamed by verl before it builds
])
def test_plus_keys_verl_builds_or_ignores_pass(exp, args):
    r = validate_line(exp, GOOD, *args)
    assert r.exit_code == 0, r.stderr


def test_plus_skip_on_one_step_off_passes(exp):
    """verl 0.9.1's one-step-off trainer never builds `skip` (no SkipManager.init)."""
    r = validate_line(exp, ONE_STEP_OFF, "--set", "+skip.foo=1")
    assert r.exit_code == 0, r.stderr
