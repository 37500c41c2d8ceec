"""Try to inject a directive or a command through every user-controlled field.

Each attempt is either refused (SpecError, exit 2) or rendered inert: the script's
#SBATCH lines are exactly the expected ones, `bash -n` accepts it, and the quoted parts,
when executed, give back the exact text without running anything.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import SpecError
from launcher.plan import Plan, Pool, SlurmOptions
from launcher.render.script import plan_json, render_script
from launcher.spec.runtimes import runtime_from_entry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import PAYLOADS, SITE, VENV, directives, make_plan


def expected_directives(script_plan, site=SITE, runtime=VENV):
    return directives(render_script(script_plan, site, runtime))


def _check_inert(script: str, tmp_path, expected_comps):
    assert directives(script) == expected_comps  # no injected #SBATCH line
    # sbatch reads directives only until the first command; no other line starts with #SBATCH either
    body = script.split("set -uo pipefail", 1)[1]
    assert not any(line.startswith("#SBATCH") for line in body.splitlines())
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # Execute the assignments part (env, arrays) for real: nothing may run.
    head = body.split("sf_phase()")[0].replace("source ", ": source ")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", head + '\nprintf "%s\\0" "${SF_ENTRY[@]}" "${SF_OVERRIDES[@]}"'],
                          capture_output=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_overrides_are_inert(payload, tmp_path):
    canary = tmp_path / "pwned"
    value = "trainer.experiment_name=" + payload.format(canary=canary)
    plan = make_plan(overrides=("a=1", value))
    values = _check_inert(render_script(plan, SITE, VENV), tmp_path, expected_directives(make_plan()))
    assert values[-1] == value and not canary.exists()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_entry_and_paths_are_inert(payload, tmp_path):
    canary = tmp_path / "pwned"
    text = payload.format(canary=canary)
    plan = make_plan(entry=("python3", "-m", "x" + text), paths_to_check=("/data/" + text,),
                     checkpoint_dir="/runs/grpo-abcde/" + text)
    script = render_script(plan, SITE, VENV)
    values = _check_inert(script, tmp_path, expected_directives(make_plan()))
    assert values[2] == "x" + text and not canary.exists()
    # the paths never reach the shell: the supervise command line carries only the run dir,
    # and the job reads them back exactly from plan.json (JSON, not shell)
    cmd = script.split('"$SF_PYTHON" -m launcher.injob supervise \\\n', 1)[1].split(" &\n")[0]
    proc = subprocess.run(["bash", "-c", 'SF_RUN_DIR=/r\nf() { printf "%s\\0" "$@"; }\nf ' + cmd],
                          capture_output=True, cwd=tmp_path)
    args = proc.stdout.decode().split("\0")
    assert args[:2] == ["--run-dir", "/r"] and args[2] == "--shown" and not canary.exists()
    back = Plan.from_dict(json.loads(plan_json(plan, SITE, VENV)))
    assert back.paths_to_check == ("/data/" + text,) and back.checkpoint_dir == "/runs/grpo-abcde/" + text


@pytest.mark.parametrize("payload", PAYLOADS)
def test_env_values_are_inert(payload, tmp_path):
    canary = tmp_path / "pwned"
    text = payload.format(canary=canary)
    plan = make_plan(env=(("MY_VAR", text),))
    script = render_script(plan, SITE, VENV)
    _check_inert(script, tmp_path, expected_directives(make_plan()))
    head = script.split("set -uo pipefail", 1)[1].split("# -- runtime")[0]
    proc = subprocess.run(["bash", "-c", head + '\nprintf %s "$MY_VAR"'], capture_output=True, cwd=tmp_path)
    assert proc.stdout.decode() == text and not canary.exists()


@pytest.mark.parametrize("key", ["A B", "A;touch x", "1A", "A\nB", "A=B"])
def test_env_keys_refused(key):
    with pytest.raises(SpecError) as err:
        render_script(make_plan(env=((key, "v"),)), SITE, VENV)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("key,value,said", [
    ("PATH", "bin:/usr/bin", "the relative part 'bin'"),
    ("LD_LIBRARY_PATH", "/opt/cuda/lib64::/usr/lib", "an empty part (the current folder)"),
    ("PYTHONPATH", "", "an empty part (the current folder)"),
    ("LD_PRELOAD", "/opt/a.so evil.so", "the relative part 'evil.so'"),
    ("IFS", "/", "IFS changes how bash reads or runs sf's batch script"),
    ("PS4", "+ ", "PS4 changes how bash reads or runs sf's batch script"),
])
def test_env_that_would_choose_sfs_later_commands_is_refused(key, value, said):
    """A relative or empty search-path part is the job's current folder (another user may write
    there): sf's later srun or python would be theirs; IFS or PS4 change how bash runs sf's lines."""
    with pytest.raises(SpecError) as err:
        render_script(make_plan(env=((key, value),)), SITE, VENV)
    assert err.value.exit_code == 2 and said in str(err.value) and f"env.{key}" in str(err.value)


def test_env_with_absolute_search_paths_renders():
    script = render_script(make_plan(env=(("PATH", "/opt/tools/bin:/usr/bin"), ("LD_PRELOAD", "/opt/a.so /opt/b.so"))),
                           SITE, VENV)
    assert "export PATH=/opt/tools/bin:/usr/bin" in script and "export LD_PRELOAD='/opt/a.so /opt/b.so'" in script


BAD_SBATCH = ["x y", "x\n#SBATCH --x", "x#y", "x;y", "$(id)", "`id`", "x'y", "-x", "x\ty"]


@pytest.mark.parametrize("field", ["account", "qos", "partition", "time"])
@pytest.mark.parametrize("value", BAD_SBATCH)
def test_slurm_fields_refused(field, value):
    with pytest.raises(SpecError) as err:
        render_script(make_plan(slurm=SlurmOptions(**{field: value})), SITE, VENV)
    assert err.value.field == f"slurm.{field}"
    assert err.value.exit_code == 2


@pytest.mark.parametrize("value", ["grpo x", "grpo\n#SBATCH --x", "gr#po", "grpo;id", "$(id)", "a/b", "a'b"])
def test_experiment_name_refused(value):
    with pytest.raises(SpecError) as err:
        render_script(make_plan(experiment=value), SITE, VENV)
    assert err.value.field == "experiment"


@pytest.mark.parametrize("value", ["/runs/a b", "/runs/a\n#SBATCH --x", "/runs/a#b", "/runs/a%b", "/runs/$(id)",
                                   "/runs/`id`", "/runs/a;b", "/runs/a'b", "relative/dir"])
def test_run_dir_refused(value):
    with pytest.raises(SpecError) as err:
        render_script(make_plan(run_dir=value), SITE, VENV)
    assert err.value.field == "run_dir"


@pytest.mark.parametrize("value", ["a b", "a\nb", "a;b", "$(id)"])
def test_pool_and_role_names_refused(value):
    with pytest.raises(SpecError):
        render_script(make_plan(pools=(Pool(value, "fake", 1, 4, 0),)), SITE, VENV)
    with pytest.raises(SpecError):
        render_script(make_plan(pools=(Pool("train", "fake", 1, 4, 0, (value,)),)), SITE, VENV)


@pytest.mark.parametrize("field,value", [("constraint", "a b"), ("constraint", "a\n#SBATCH --x"),
                                         ("mem_per_node", "4G;id"),
                                         ("gres_name", "gpu 1"), ("partition", "train\n#SBATCH --x")])
def test_site_series_fields_refused(field, value):
    series = replace(SITE.series["fake"], **{field: value})
    site = replace(SITE, series={**SITE.series, "fake": series})
    with pytest.raises(SpecError):
        render_script(make_plan(), site, VENV)


def test_site_temp_root_and_runtime_paths_quoted(tmp_path):
    canary = tmp_path / "pwned"
    site = replace(SITE, ray=replace(SITE.ray, temp_root=f"/tmp/$(touch {canary})"))
    script = render_script(make_plan(), site, VENV)
    _check_inert(script, tmp_path, expected_directives(make_plan()))
    assert "temp-root" not in script  # the site's Ray settings travel in plan.json, never the shell
    assert json.loads(plan_json(make_plan(), site, VENV))["job"]["ray"]["temp_root"] == f"/tmp/$(touch {canary})"
    with pytest.raises(SpecError):
        runtime_from_entry("verl", "0.9.1", {"kind": "venv", "path": "/opt/x; touch /tmp/y"}, "reg")
    with pytest.raises(SpecError):
        runtime_from_entry("verl", "0.9.1", {"kind": "module", "modules": ["verl\nid"]}, "reg")


def test_cli_refuses_with_exit_2_and_quotes_set(tmp_path):
    """Through `sf submit --dry-run`: a site account with a newline is refused (exit 2); a
    --set value with $(...) is rendered inert."""
    import yaml

    from launcher.spec import paths

    data = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    data["runs_dir"] = str(tmp_path / "runs")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(data))
    data["slurm"]["account"] = "proj\n#SBATCH --qos=evil"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    env = {**os.environ, "FORGE_IMAGE_VERL": "/opt/verl.sif"}
    sf = [os.path.join(os.path.dirname(__import__("sys").executable), "sf")]
    exp = str(paths.data_root() / "examples" / "grpo")
    proc = subprocess.run([*sf, "submit", exp, "--dry-run", "--site", str(bad)], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 2 and "slurm.account" in proc.stderr, proc.stderr
    canary = tmp_path / "pwned"
    proc = subprocess.run([*sf, "submit", exp, "--dry-run", "--site", str(good),
                           "--set", f"trainer.experiment_name='$(touch {canary})'"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    values = _check_inert(proc.stdout, tmp_path, directives(proc.stdout))
    assert f"trainer.experiment_name='$(touch {canary})'" in values
    assert not canary.exists() and not (tmp_path / "runs").exists()
