"""verl_main.hydra_argv: a verl main whose config folder is no Python package still finds its
config (verl 0.9.1's experimental trainers; the H200 run of 2026-12-02 failed on it)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from launcher import verlcheck
from launcher.injob.verl_main import hydra_argv

REPO = Path(__file__).resolve().parents[2]
# run the main the way verl_main.main does: import the module, set argv, call main()
RUN = ("import importlib, sys; from launcher.injob.verl_main import hydra_argv; "
       "m = importlib.import_module('fakeverl.exp.main'); args = sys.argv[2:]; "
       "sys.argv = [m.__file__, *(hydra_argv(m.__file__, args) if sys.argv[1] == 'sf' else args)]; m.main()")


def fake_main(root: Path) -> None:
    """A package laid out like verl's experimental trainers: config/ without __init__.py."""
    (root / "fakeverl" / "exp" / "config").mkdir(parents=True)
    (root / "fakeverl" / "__init__.py").write_text("")
    (root / "fakeverl" / "exp" / "__init__.py").write_text("")
    (root / "fakeverl" / "exp" / "config" / "trainer.yaml").write_text("x: 1\ny: a\n")
    (root / "fakeverl" / "exp" / "main.py").write_text(textwrap.dedent("""\
        import hydra

        @hydra.main(config_path="config", config_name="trainer", version_base=None)
        def main(cfg):
            print("COMPOSED", cfg.x, cfg.y)
        """))


def run(root: Path, how: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}
    return subprocess.run([sys.executable, "-c", RUN, how, *args], capture_output=True, text=True, env=env,
                          cwd=root, timeout=120)


def test_hydra_loads_a_config_folder_without_init_only_when_named_by_path(tmp_path):
    fake_main(tmp_path)
    bare = run(tmp_path, "bare", "y=b")
    assert bare.returncode != 0 and "Primary config module 'fakeverl.exp.config' not found" in bare.stderr, bare
    named = run(tmp_path, "sf", "y=b")
    assert named.returncode == 0, named.stderr
    assert "COMPOSED 1 b" in named.stdout


def test_argv_unchanged_for_a_package_config_or_a_config_path_of_the_users(tmp_path):
    fake_main(tmp_path)
    main_file = str(tmp_path / "fakeverl" / "exp" / "main.py")
    config_dir = str(tmp_path / "fakeverl" / "exp" / "config")
    assert hydra_argv(main_file, ["a=1"]) == [f"--config-path={config_dir}", "a=1"]
    assert hydra_argv(main_file, ["--config-path=/mine", "a=1"]) == ["--config-path=/mine", "a=1"]
    assert hydra_argv(main_file, ["-cp", "/mine"]) == ["-cp", "/mine"]
    (tmp_path / "fakeverl" / "exp" / "config" / "__init__.py").write_text("")
    assert hydra_argv(main_file, ["a=1"]) == ["a=1"]


def test_the_installed_verls_experimental_mains_get_their_config_by_path():
    base = verlcheck.verl_config_dir()  # verl/trainer/config
    verl_root = os.path.dirname(os.path.dirname(base))
    for sub, name in (("one_step_off_policy", "main_ppo.py"), ("fully_async_policy", "fully_async_main.py")):
        main_file = os.path.join(verl_root, "experimental", sub, name)
        assert os.path.exists(main_file), main_file
        argv = hydra_argv(main_file, ["trainer.nnodes=1"])
        config_dir = os.path.join(verl_root, "experimental", sub, "config")
        if os.path.exists(os.path.join(config_dir, "__init__.py")):  # a verl that ships it: nothing to do
            assert argv == ["trainer.nnodes=1"]
        else:
            assert argv == [f"--config-path={config_dir}", "trainer.nnodes=1"]
    # main_ppo's config is a package: Hydra loads it as verl ships it
    assert hydra_argv(os.path.join(verl_root, "trainer", "main_ppo.py"), ["x=1"]) == ["x=1"]
