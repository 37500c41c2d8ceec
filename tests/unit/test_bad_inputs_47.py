"""Issue 47's bad inputs: what `sf submit` refuses, `sf validate` and `sf submit --dry-run`
refuse too, with the same line (one checked path: launcher.submit.pipeline.checked), and
values that would change meaning on their way to verl or Slurm are refused or made right.
Each refusal: exit 2, one `sf: error:` line naming the field and the fix, nothing submitted
and no run folder left behind."""
from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import (  # noqa: E402
    RUN_DIR,
    SITE,
    base,
    compile_values,
    errors_of,
    overrides_of,
    spec_from_values,
    write_exp,
    write_site,
)
from unit_helpers import GOOD_SPEC as GOOD  # noqa: E402
from unit_helpers import refused  # noqa: E402
from unit_helpers import sf_cli as sf  # noqa: E402

from launcher import sbatch_values  # noqa: E402
from launcher.compile.compiler import compile_plan  # noqa: E402
from launcher.compile.slurm_time import time_seconds  # noqa: E402
from launcher.compile.values import parse_scalar  # noqa: E402
from launcher.errors import SpecError, SpecErrors  # noqa: E402
from launcher.spec.runtimes import runtime_from_entry  # noqa: E402
from launcher.submit import sweep  # noqa: E402

VENV_ENTRY = "verl:\n  \"0.9.1\": {kind: venv, path: /opt/verl}\n"

# --- 1. validate, submit --dry-run and submit refuse the same things -----------------------


def _registry(tmp: Path, text: str) -> dict:
    path = tmp / "runtimes.yaml"
    path.write_text(text)
    return {"FORGE_RUNTIME_REGISTRY_FILE": str(path)}


def _fifo(tmp: Path) -> dict:
    os.mkfifo(tmp / "runtimes.fifo")
    return {"FORGE_RUNTIME_REGISTRY_FILE": str(tmp / "runtimes.fifo")}


def _runs_mode(tmp: Path, mode: int) -> dict:
    os.chmod(tmp / "runs", mode)
    return {}


def _runs_owner(tmp: Path) -> dict:
    os.chown(tmp / "runs", 65534, -1)
    return {}


def _shared_runs_user_folder_of_another(tmp: Path) -> dict:
    os.chmod(tmp / "runs", 0o1777)  # a shared runs folder, as docs/admins.md says to make one
    theirs = tmp / "runs" / pwd.getpwuid(os.getuid()).pw_name
    theirs.mkdir()
    os.chown(theirs, 65534, -1)
    return {}


def _runs_link_of_another(tmp: Path) -> dict:
    (tmp / "elsewhere").mkdir()
    os.rmdir(tmp / "runs")
    os.symlink(tmp / "elsewhere", tmp / "runs")
    os.lchown(tmp / "runs", 65534, -1)
    return {}


def _share_group(tmp: Path) -> dict:
    write_site(tmp, runs_dir=str(tmp / "runs"), share_group="no-such-group-47")
    return {}


# (id, setup(tmp) -> environment, extra CLI args, what the one error line holds)
REFUSALS = [
    ("runs-0777", lambda t: _runs_mode(t, 0o777), (), ("runs_dir:", "writable by other users", "chmod 1777")),
    ("runs-other-owner", _runs_owner, (), ("runs_dir:", "belongs to", "use a folder of yours")),
    ("shared-runs-user-folder-of-another", _shared_runs_user_folder_of_another, (),
     ("runs_dir:", "belongs to nobody", "remove it or choose another path")),
    ("runs-link-of-another", _runs_link_of_another, (), ("runs_dir:", "symbolic link of nobody", "use the real path")),
    ("share-group-missing", _share_group, (), ("site.share_group:", "no-such-group-47", "fix share_group")),
    ("dependency-job-0", lambda t: {}, ("--dependency", "afterok:0"), ("--dependency:", "afterok:123")),
    ("dependency-past-32-bits", lambda t: {}, ("--dependency", "afterok:99999999999"),
     ("--dependency:", "job id 99999999999", "past Slurm's largest (4294967293)")),
    ("dependency-arabic-digits", lambda t: {}, ("--dependency", "afterok:\u0661\u0662"), ("--dependency:",)),
    ("registry-fifo", _fifo, (), ("runtime:", "not a regular file", "replace it")),
    ("registry-dev-zero", lambda t: {"FORGE_RUNTIME_REGISTRY_FILE": "/dev/zero"}, (), ("not a regular file",)),
    ("registry-missing", lambda t: {"FORGE_RUNTIME_REGISTRY_FILE": str(t / "none.yaml")}, (), ("does not exist",)),
    ("registry-entry-path", lambda t: _registry(t, 'verl:\n  "0.9.1": {kind: venv, path: "/opt/v e"}\n'), (),
     ("runtime.path:", "fix the runtime registry")),
    ("registry-entry-ignored-key", lambda t: _registry(t, 'verl:\n  "0.9.1": {kind: venv, path: /v, binds: [/a]}\n'),
     (), ("runtime.binds:", "does not read")),
    ("registry-version-unpublished", lambda t: _registry(t, 'verl:\n  "0.7.0": {kind: venv, path: /v}\n'), (),
     ("runtime:", "no runtime for verl 0.9.1", "publish")),
    ("registry-mount-comma", lambda t: _registry(t, 'verl:\n  "0.9.1": {kind: pyxis, image: nvcr/v, '
                                                  'mounts: ["/a:/a,/b:/b"]}\n'), (),
     ("runtime.mounts:", "two mounts", "own list item")),
    ("registry-overrides-misspelt", lambda t: _registry(t, 'verl:\n  "0.9.1": {kind: venv, path: /v, overrides: '
                                                         '{ppo_trainr: [a.b=1]}}\n'), (),
     ("runtime.overrides:", "'ppo_trainr'", "did you mean ppo_trainer?")),
    ("typed-enum", lambda t: {}, ("--set", "algorithm.kl_ctrl.type=fixd"), ("did you mean fixed?",)),
]


@pytest.mark.parametrize("setup, args, needles", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
@pytest.mark.parametrize("command", [("validate",), ("submit", "--dry-run"), ("submit",)],
                         ids=["validate", "dry-run", "submit"])
def test_validate_and_dry_run_refuse_what_submit_refuses(cli_env, fake_slurm, monkeypatch, command, setup,
                                                         args, needles):
    write_exp(cli_env, "exp", GOOD)
    env = {**_registry(cli_env, VENV_ENTRY), **setup(cli_env)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = sorted(p for p in (cli_env / "runs").rglob("*"))
    refused(sf(*command, "exp", *args), *needles)
    assert fake_slurm.calls("sbatch") == []
    assert sorted(p for p in (cli_env / "runs").rglob("*")) == before  # nothing written


@pytest.mark.parametrize("command", [("validate",), ("submit", "--dry-run")], ids=["validate", "dry-run"])
def test_the_good_spec_passes_the_shared_checks(cli_env, monkeypatch, command):
    """The refusals above are the inputs' own: the same spec with a good registry passes."""
    write_exp(cli_env, "exp", GOOD)
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", _registry(cli_env, VENV_ENTRY)["FORGE_RUNTIME_REGISTRY_FILE"])
    result = sf(*command, "exp")
    assert result.exit_code == 0, result.stderr


def test_validate_without_any_runtime_warns_that_submit_refuses(cli_env):
    """A site that publishes no runtime at all: validate checks the spec and says submit refuses."""
    write_exp(cli_env, "exp", GOOD)
    result = sf("validate", "exp")
    assert result.exit_code == 0, result.stderr
    assert "no runtime for verl 0.9.1" in result.stderr and "`sf submit` refuses" in result.stderr
    refused(sf("submit", "exp", "--dry-run"), "runtime:", "no runtime for verl 0.9.1")


# --- 2. registry values that would change meaning -----------------------------------------

@pytest.mark.parametrize("kind, key", [("pyxis", "mounts"), ("apptainer", "binds")])
def test_a_mount_with_a_comma_is_refused(kind, key):
    entry = {"kind": kind, "image": "img.sif" if kind == "apptainer" else "nvcr/verl", key: ["/d,x:/d"]}
    with pytest.raises(SpecError, match=r"runtime.mounts: '/d,x:/d' .* two mounts"):
        runtime_from_entry("verl", "0.9.1", entry, "reg.yaml")
    assert runtime_from_entry("verl", "0.9.1", {**entry, key: ["/d:/d", "/e:/e"]}, "reg.yaml").mounts == ("/d:/d",
                                                                                                          "/e:/e")


def test_registry_overrides_under_an_unknown_config_name_are_refused():
    spec = spec_from_values(base("grpo"))
    with pytest.raises(SpecErrors) as info:
        compile_plan(spec, SITE, RUN_DIR, runtime_overrides={"sft_trainer": ("a.b=1",)})
    assert "did you mean sft_trainer_engine?" in str(info.value.errors[0])
    plan = compile_plan(spec, SITE, RUN_DIR, runtime_overrides={"ppo_trainer": ("trainer.critic_warmup=0",)})
    assert "trainer.critic_warmup=0" in plan.overrides


# --- 3. typed values ----------------------------------------------------------------------

@pytest.mark.parametrize("text", ["\u0661", "\u0664\u0662", "\u0967.5", "1e\u0666", "\uff11"])
def test_digits_of_other_scripts_are_not_numbers(text):
    assert parse_scalar(text) == text  # a string: verl and Hydra read it as one
    for pattern in (sbatch_values.TIME, sbatch_values.INT, sbatch_values.MEM, sbatch_values.DEPENDENCY):
        assert not pattern.fullmatch(text) and not pattern.fullmatch(f"afterok:{text}")
    with pytest.raises(SpecError):
        time_seconds(text, "slurm.time")


@pytest.mark.parametrize("knob, text", [("rollout_n", "\u0664"), ("actor_lr", "\u0661e-6"),
                                        ("train_batch_size", "\uff16\uff14")])
def test_digits_of_other_scripts_are_not_knob_numbers(knob, text):
    errors = errors_of(base("grpo", knobs={knob: text}))
    assert any(f"knobs.{knob}: {text!r} is not a" in e for e in errors), errors


@pytest.mark.parametrize("line, needle", [
    ('actor_lr: "1e-6"', "knobs.actor_lr: '1e-6' is quoted, so YAML reads text, not a number; write it without "
                         "quotes: actor_lr: 1e-6"),
    ("ppo_epochs: '2'", "write it without quotes: ppo_epochs: 2"),
])
def test_a_number_knob_quoted_in_config_yaml_is_refused(cli_env, line, needle):
    write_exp(cli_env, "exp", GOOD + f"knobs:\n  {line}\n")
    refused(sf("validate", "exp"), needle)
    write_exp(cli_env, "exp", GOOD + f"knobs:\n  {line.replace(chr(34), '').replace(chr(39), '')}\n")
    assert sf("validate", "exp").exit_code == 0


@pytest.mark.parametrize("override, needle", [
    ("trainer.logger=[console,1]", "1 is not a string"),
    ("actor_rollout_ref.actor.optim.betas=[0.9]", "has 1 element, but verl's actor_rollout_ref.actor.optim.betas "
                                                  "takes 2"),
    ("actor_rollout_ref.actor.optim.betas=[0.9,fast]", "fast is not a number"),
    ("trainer.total_epochs=\u0662", "is a string, not a whole number"),
])
def test_lists_and_numbers_keep_verls_shape(override, needle):
    errors = errors_of(base("grpo", overrides=[override]))
    assert any(needle in e for e in errors), errors
    assert not errors_of(base("grpo", overrides=["actor_rollout_ref.actor.optim.betas=[0.8,0.99]"]))


@pytest.mark.parametrize("override, needle", [
    ("algorithm.kl_ctrl.type=adaptve", "did you mean adaptive?"),
    ("+algorithm.kl_ctrl.kl_coeff=0.1", "did you mean algorithm.kl_ctrl.kl_coef?"),
    ("++actor_rollout_ref.actor.entropy_coef=0.1", "did you mean actor_rollout_ref.actor.entropy_coeff?"),
])
def test_misspelt_enums_and_added_keys_name_verls(override, needle):
    errors = errors_of(base("grpo", overrides=[override]))
    assert len(errors) == 1 and needle in errors[0], errors


def test_added_keys_verl_lacks_and_nothing_resembles_still_pass():
    assert not errors_of(base("grpo", overrides=["+actor_rollout_ref.model.override_config.attention_dropout=0.0",
                                                 "+reward.reward_kwargs.max_resp_len=512"]))


def test_dapo_filter_metric_null_means_verls_default_and_says_so():
    plan = compile_values(base("dapo", knobs={"filter_metric": None}))
    assert not [o for o in plan.overrides if o.startswith("algorithm.filter_groups.metric")]
    assert any("null means verl's default metric, reward" in w for w in plan.warnings)
    assert "algorithm.filter_groups.metric" not in overrides_of(base("dapo", knobs={"filter_metric": "null"}))


@pytest.mark.parametrize("knobs, threshold, switch", [
    ({"rollout_is_threshold": 2.0}, "rollout_is_threshold", {"rollout_is": "token"}),
    ({"rollout_rs_threshold": 0.5}, "rollout_rs_threshold", {"rollout_rs": "token_k2"})])
def test_a_rollout_correction_threshold_without_its_switch_warns(knobs, threshold, switch):
    plan = compile_values(base("grpo", knobs=knobs))
    assert [w for w in plan.warnings if f"{threshold} is set but" in w and "verl ignores it" in w]
    switched = compile_values(base("grpo", knobs={**knobs, **switch}))
    assert not [w for w in switched.warnings if "verl ignores it" in w]


@pytest.mark.parametrize("grid, point", [
    ("trainer.project_name=a\\,b,c", "trainer.project_name='a,b'"),
    ("trainer.project_name=it's\\,x,y", "trainer.project_name='it\\'s,x'"),
    ("logger=console\\,file,console", "logger=console,file"),
    ("+x.y=[1\\,2],[3]", "+x.y=[1,2]"),
])
def test_a_grid_value_with_an_escaped_comma_reaches_hydra_quoted(grid, point):
    [(key, values)] = sweep.parse_grid([grid])
    assert sweep.point_sets({key: values[0]}) == [point]


def test_a_grid_value_with_an_escaped_comma_compiles(cli_env, monkeypatch):
    write_exp(cli_env, "exp", GOOD)
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", _registry(cli_env, VENV_ENTRY)["FORGE_RUNTIME_REGISTRY_FILE"])
    result = sf("sweep", "exp", "--grid", "trainer.project_name=a\\,b,c", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "trainer.project_name='a,b'" in result.output + result.stderr


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared-1777"])
def test_the_dry_run_shows_the_run_dir_submit_makes(cli_env, fake_slurm, monkeypatch, shared):
    """In a shared runs folder submit makes the run in the user's own folder in it: the dry run's
    script names that folder, and submit's script is the dry run's but for the run id."""
    write_exp(cli_env, "exp", GOOD)
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", _registry(cli_env, VENV_ENTRY)["FORGE_RUNTIME_REGISTRY_FILE"])
    if shared:
        os.chmod(cli_env / "runs", 0o1777)
    fake_slurm.set("sbatch", "4242\n")
    dry = sf("submit", "exp", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    home = cli_env / "runs" / pwd.getpwuid(os.getuid()).pw_name if shared else cli_env / "runs"
    placeholder = f"{home.resolve()}/exp-XXXXX"
    assert placeholder in dry.stdout
    sent = sf("submit", "exp")
    assert sent.exit_code == 0, sent.stderr
    [run_dir] = [p for p in home.iterdir() if p.name.startswith("exp-")]
    script = (run_dir / "job.sbatch").read_text()
    assert script == dry.stdout.replace(placeholder, str(run_dir.resolve())).replace("exp-XXXXX", run_dir.name)


@pytest.mark.parametrize("knobs, needle", [
    ({"rollout_rs": ["token_k1", 5]}, "is not a list of rollout_rs options"),
    ({"rollout_rs": [["token_k1"]]}, "is not a list of rollout_rs options"),
    ({"logger": ["console", 5]}, "is not a list of names"),
    ({"resume_mode": "Auto"}, "did you mean auto?"),
    ({"kl_loss_type": "low_var_k1"}, "did you mean low_var_kl?"),
])
def test_list_and_enum_knobs_of_the_wrong_kind_are_named(knobs, needle):
    errors = errors_of(base("grpo", knobs=knobs))
    assert len(errors) == 1 and needle in errors[0], errors

