"""Where sf's data folders (templates/, configs/, site/) live.

A source checkout keeps them beside the package; an installed sf finds them under
<prefix>/share/sf/ (setup.cfg installs them there as data files).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

_CHECKOUT_ROOT = Path(__file__).resolve().parents[2]  # launcher/spec/paths.py -> the checkout


@lru_cache(maxsize=None)
def data_root() -> Path:
    """The folder that holds templates/, configs/ and site/."""
    if (_CHECKOUT_ROOT / "templates").is_dir() and (_CHECKOUT_ROOT / "configs").is_dir():
        return _CHECKOUT_ROOT
    for prefix in (sys.prefix, sys.base_prefix, "/usr/local", "/usr"):
        candidate = Path(prefix) / "share" / "sf"
        if (candidate / "templates").is_dir():
            return candidate
    raise RuntimeError(
        "sf cannot find its data files (templates/, configs/, site/): reinstall sf with pip"
    )


def templates_dir() -> Path:
    return data_root() / "templates"


def configs_dir() -> Path:
    return data_root() / "configs"


def site_dir() -> Path:
    return data_root() / "site"
