"""What a cluster admin gives sf (the site file, its own batch script template, the runtime
registry) and gets wrong: every mistake one line naming the field, exit 2, nothing written;
nothing the admin's template does drops sf's own script."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from launcher.compile import scheduler_options  # noqa: E402
from launcher.errors import SpecError  # noqa: E402


# --- the scheduler options: one error line, whatever the key ----------------------------------

@pytest.mark.parametrize("provenance,field", [({"slurm.sbatch": "site"}, "site.slurm.sbatch"),
                                              ({}, "slurm.sbatch")])
def test_an_sbatch_key_with_a_newline_is_one_error_line(provenance, field):
    """`sbatch: {"comment\\n#SBATCH --x": y}` (site file or config.yaml): the field named the raw
    key, so the error printed as two lines, the second starting with #SBATCH."""
    with pytest.raises(SpecError) as err:
        scheduler_options.checked({"sbatch": {"comment\n#SBATCH --x": "y"}}, provenance)
    assert err.value.field == field
    assert "\n" not in str(err.value) and "'comment\\n#SBATCH --x'" in str(err.value)
    with pytest.raises(SpecError) as err:  # a printable key keeps its own field
        scheduler_options.checked({"sbatch": {"wrap": "x"}}, provenance)
    assert err.value.field == field + ".wrap"
