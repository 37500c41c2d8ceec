"""The training job's batch script, byte for byte: every example under examples/ and the
fixtures of test_render.py (and its neighbours: sweeps, scheduler options, loggers, runtimes)
rendered and compared with the scripts saved in golden/train_scripts/.

The goldens were saved from the plain-Python builder (launcher/render/batch_text.py) before
the script moved to templates/train.sbatch.j2: the template renders the same bytes. Saved
with the checkout's path and sf's version written as <SF_ROOT> and <SF_VERSION>, so they
hold on any checkout. After a deliberate change of the script, save them again:

    python tests/unit/test_train_golden.py --save
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script (--save) too
from golden_cases import EXAMPLES, GOLDEN, all_rendered, cases, normalized  # noqa: E402

NAMES = [*cases(), "plain-installed"]


@pytest.fixture(scope="module")
def rendered():
    return dict(all_rendered())


@pytest.mark.parametrize("name", NAMES)
def test_script_is_byte_identical_to_the_saved_one(name, rendered):
    assert normalized(rendered[name]) == (GOLDEN / f"{name}.sbatch").read_text()


def test_every_example_has_a_golden():
    assert {f"example-{name}" for name in EXAMPLES} <= {p.stem for p in GOLDEN.glob("*.sbatch")}
    assert len(EXAMPLES) >= 5


if __name__ == "__main__" and sys.argv[1:] == ["--save"]:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, text in all_rendered():
        (GOLDEN / f"{name}.sbatch").write_text(normalized(text))
        print(name)
