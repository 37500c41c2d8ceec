"""One W&B run across restarts (launcher.render.logger_env): the script's environment, offline mode
from the site, the `wandb sync` line, and no injection through the project or run name."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.errors import SpecError
from launcher.render import logger_env
from launcher.render.script import render_script
from launcher.spec import paths
from launcher.spec.site import site_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "compiler_fixtures"))
from sfc_helpers import SITE_DICT  # noqa: E402
from unit_helpers import SITE, VENV, make_plan  # noqa: E402

WANDB = ("algorithm.adv_estimator=grpo", "trainer.logger=[console,file,wandb]")
OFFLINE = site_from_dict({**SITE_DICT, "internet": False})


def _env(script: str, run_dir: str = "/runs/grpo-abcde") -> dict:
    """Run the script's W&B lines with SF_RUN_DIR set; the WANDB_* variables they export."""
    block = script.split("# -- one logger run across restarts", 1)[1].split("\n\n", 1)[0]
    proc = subprocess.run(["bash", "-c", f"SF_RUN_DIR={run_dir}\n{block}\nenv -0"], capture_output=True,
                          env={"PATH": "/usr/bin:/bin"}, check=True)
    pairs = (item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in pairs if k.startswith("WANDB_")}


def test_wandb_env_from_the_run_id():
    script = render_script(make_plan(overrides=WANDB + ("trainer.project_name=proj",)), SITE, VENV)
    assert _env(script) == {"WANDB_RUN_ID": "grpo-abcde", "WANDB_RESUME": "allow", "WANDB_DIR": "/runs/grpo-abcde",
                            "WANDB_PROJECT": "proj", "WANDB_NAME": "grpo-abcde"}
    assert "WANDB_MODE" not in script
    # the lines come before the supervisor starts (every node's srun inherits them)
    assert script.index("export WANDB_RUN_ID") < script.index("launcher.injob supervise")


def test_defaults_and_experiment_name():
    script = render_script(make_plan(overrides=WANDB + ("trainer.experiment_name=try-3",)), SITE, VENV)
    env = _env(script, "/runs/grpo-zzzzz")
    assert env["WANDB_PROJECT"] == "grpo" and env["WANDB_NAME"] == "try-3" and env["WANDB_RUN_ID"] == "grpo-zzzzz"


def test_no_wandb_no_lines():
    script = render_script(make_plan(overrides=("trainer.logger=[console,file]",)), SITE, VENV)
    assert "WANDB" not in script
    assert logger_env.loggers(["trainer.logger=['console', 'wandb']"]) == ["console", "wandb"]
    assert logger_env.loggers(["+trainer.logger=[wandb]", "trainer.logger=[file]"]) == ["file"]


def test_offline_site_and_its_check():
    script = render_script(make_plan(overrides=WANDB), OFFLINE, VENV)
    assert _env(script)["WANDB_MODE"] == "offline"
    with pytest.raises(SpecError) as err:
        render_script(make_plan(overrides=WANDB), site_from_dict({**SITE_DICT, "internet": "no"}), VENV)
    assert err.value.field == "site.internet"


def test_array_task_gets_its_own_point_id():
    script = render_script(make_plan(overrides=WANDB), SITE, VENV,
                           array={"size": 2, "sweep_dir": "/runs/sw-abcde", "sweep_id": "sw"})
    point = script.index('SF_RUN_DIR="$("$SF_PYTHON" -m launcher.injob point')
    assert point < script.index("export WANDB_RUN_ID")


@pytest.mark.parametrize("payload", ["$(touch {c})", "`touch {c}`", "x; touch {c}", "x' ; touch {c}; echo '",
                                     "x\n#SBATCH --qos=evil\ntouch {c}"])
def test_names_are_inert(payload, tmp_path):
    canary = tmp_path / "pwned"
    text = payload.format(c=canary)
    plan = make_plan(overrides=WANDB + (f"trainer.project_name={text}", f"trainer.experiment_name={text}"))
    try:
        script = render_script(plan, SITE, VENV)
    except SpecError as exc:
        assert exc.field == "trainer.project_name" and "\n" in text  # a newline: refused
        return
    env = _env(script)
    assert env["WANDB_PROJECT"] == text and env["WANDB_NAME"] == text and not canary.exists()


def test_submit_prints_the_sync_line(fake_slurm, site, tmp_path):  # noqa: F811 (the imported fixture)
    import yaml

    path = site()
    data = yaml.safe_load(Path(path).read_text())
    data["internet"] = False
    Path(path).write_text(yaml.safe_dump(data))
    fake_slurm.set("sbatch", "77\n")
    grpo = str(paths.data_root() / "examples" / "grpo")
    wandb = ["--set", "logger=[console,file,wandb]"]
    result = CliRunner().invoke(main, ["submit", grpo, "--site", path, "--json", *wandb])
    assert result.exit_code == 0, result.output
    run_dir = json.loads(result.stdout)["run_dir"]
    assert f"wandb sync --include-offline {run_dir}/wandb/offline-run-*" in result.stderr
    assert "export WANDB_MODE=offline" in fake_slurm.submitted_script()
    # a site with internet: no sync line
    result = CliRunner().invoke(main, ["submit", grpo, "--site", site(), *wandb])
    assert result.exit_code == 0 and "wandb sync" not in result.stderr
