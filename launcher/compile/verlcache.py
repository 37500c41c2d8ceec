"""Remembered verl composes: overrides that composed cleanly once against a verl config are
not composed again (Hydra's compose is most of what a dry run costs).

    errors = checked_overrides(config_name, overrides, version)   # as verlcheck.check_overrides
    effective, why = effective_config(config_name, overrides)     # as verlcheck.effective_config

The key is everything that decides the outcome: the config name, the exact overrides in
order, and a fingerprint of verl's config folder (each YAML file's name, size and mtime),
of the hydra-core and omegaconf installs and of the Python version. Only a clean result is
remembered: a failing check composes again, so its message names the bad keys. Entries are
empty files named by the key's hash under $SF_CACHE_DIR/verl-compose (default
~/.cache/sf/verl-compose); the composed config the rules judge (compile) is kept beside
them as a pickle of the OmegaConf objects (loading it takes about a sixth of a compose).
When that folder cannot be used, every check composes. The folder is the user's own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import sys
from pathlib import Path

from launcher import verlcheck


def cache_dir() -> Path:
    root = os.environ.get("SF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sf")
    return Path(root) / "verl-compose"


def _install_fingerprint(module: str) -> str:
    """Where a package is installed and when its __init__ last changed (no import)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return f"{module}:absent"
    stat = os.stat(spec.origin)
    return f"{module}:{spec.origin}:{stat.st_size}:{stat.st_mtime_ns}"


def fingerprint(config_dir: str) -> str:
    """What the compose depends on besides the overrides."""
    parts = [sys.version, _install_fingerprint("hydra"), _install_fingerprint("omegaconf"), config_dir]
    for folder, dirs, files in os.walk(config_dir):
        dirs.sort()
        for name in sorted(files):
            stat = os.stat(os.path.join(folder, name))
            parts.append(f"{os.path.relpath(os.path.join(folder, name), config_dir)}:{stat.st_size}:{stat.st_mtime_ns}")
    return "\n".join(parts)


def _entry(config_name: str, overrides: tuple[str, ...], config_dir: str) -> Path:
    # an experimental trainer's config folder counts too (verlcheck.config_dirs)
    prints = [fingerprint(d) for d in verlcheck.config_dirs(config_name) if d != config_dir]
    # the checks' revision: a list a newer sf refuses is not answered from an older sf's clean entry
    digest = hashlib.sha256("\0".join([fingerprint(config_dir), *prints, verlcheck.CHECKS_REVISION, config_name,
                                        *overrides]).encode()).hexdigest()
    return cache_dir() / digest


def checked_overrides(config_name: str, overrides, version: str | None = None) -> list:
    """verlcheck.check_overrides, answered from the cache when these overrides composed
    cleanly before against the same verl config and the same Hydra."""
    overrides = tuple(overrides)
    config_dir = verlcheck.verl_config_dir()
    if config_dir is None:  # no verl: let verlcheck say so
        return verlcheck.check_overrides(config_name, overrides, version)
    try:
        entry = _entry(config_name, overrides, config_dir)
        if entry.is_file():
            return []
    except OSError:
        entry = None
    errors = verlcheck.check_overrides(config_name, overrides, version)
    if not errors and entry is not None:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            entry.touch()
        except OSError:
            pass  # a read-only home: no cache, same answers
    return errors


def effective_config(config_name: str, overrides):
    """verlcheck.effective_config, loaded from the cache when these overrides composed before
    against the same verl config, Hydra, OmegaConf and Python (the key of checked_overrides)."""
    overrides = tuple(overrides)
    config_dir = verlcheck.verl_config_dir()
    if config_dir is None:
        return verlcheck.effective_config(config_name, overrides)
    try:
        path = _entry(config_name, overrides, config_dir).with_suffix(".effective")
        cached = path.is_file()  # raises when the cache is in a home the user may not enter ($HOME of another)
    except OSError:  # verl's config folder or the cache unreadable: compose
        path, cached = None, False
    if cached:
        try:
            cfg, base = pickle.loads(path.read_bytes())
            return verlcheck.Effective(cfg, base), None
        except Exception:  # torn, or from another install: compose and write it again
            pass
    effective, why = verlcheck.effective_config(config_name, overrides)
    if effective is not None and path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(pickle.dumps((effective.cfg, effective.base_cfg)))
            os.replace(tmp, path)  # two commands at once never read half a file
        except (OSError, pickle.PicklingError):
            pass
    return effective, why
