"""The installed verl as sf sees it without importing it (its __init__ pulls torch): where its
Hydra config folders are and which version it is. launcher.verlcheck composes against them."""

from __future__ import annotations

import os
from functools import lru_cache

from launcher.verlfields import verl_root

INSTALL_HINT = "pip install 'sf[verl-config]' && pip install --no-deps verl=={version}"

# The Hydra configs of verl 0.9.1's disaggregated trainers live beside their mains, and start
# with `defaults: [ppo_trainer, _self_]`. Their YAML finds ppo_trainer through a searchpath
# relative to the working directory (`file://verl/trainer/config`, one-step-off) or as a
# package (`pkg://verl.trainer.config`, fully async: importing it imports verl, hence torch);
# neither works on a login node, so sf composes them with the trainer config folder on the
# searchpath by absolute path. The job's entry passes the package path (the method recipe).
EXPERIMENTAL_CONFIGS = {
    "one_step_off_ppo_trainer": ("experimental", "one_step_off_policy", "config"),
    "fully_async_ppo_trainer": ("experimental", "fully_async_policy", "config"),
}
# the config each experimental trainer's starts from (its defaults list: `- ppo_trainer`)
DERIVED_FROM = {name: "ppo_trainer" for name in EXPERIMENTAL_CONFIGS}


@lru_cache(maxsize=None)
def verl_config_dir() -> str | None:
    root = verl_root()
    path = os.path.join(root, "trainer", "config") if root else None
    return path if path and os.path.isdir(path) else None


@lru_cache(maxsize=None)
def installed_verl_version() -> str | None:
    root = verl_root()
    if root is None:
        return None
    version_file = os.path.join(root, "version", "version")
    try:
        with open(version_file) as fh:
            return fh.read().strip()
    except OSError:
        try:
            from importlib.metadata import version  # lazy: importlib.metadata costs ~9 ms of every dry run

            return version("verl")
        except Exception:
            return None


def config_dirs(config_name: str) -> tuple[str, ...]:
    """The folders a config is composed from: its own (an experimental trainer's), then
    verl/trainer/config (every config's defaults reach it)."""
    base = verl_config_dir()
    if base is None:
        return ()
    sub = EXPERIMENTAL_CONFIGS.get(config_name)
    return (os.path.join(os.path.dirname(os.path.dirname(base)), *sub), base) if sub else (base,)
