"""A runs folder damaged by hand, a full disk, a crash or another tool: the read side (`sf list`,
`status`, `logs`, `metrics`, `plot`, `cancel`, `attach`) says what is damaged in one line naming
the file (exit 2), and one damaged run never stops a command about the others."""
from __future__ import annotations

import json

import pytest
from unit_helpers import sf_cli, submitted_run


def _ended(root, name, **fields):
    """A run that ended (completed), as `sf status` leaves it: the poll does not ask Slurm."""
    run = submitted_run(root, name, "101")
    run.add_state("completed")
    if fields:
        run.update(**fields)
    return run


# --- metrics ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    b'{"step": Infinity, "data": {"critic/score/mean": 1}}',
    b'{"step": 1e400, "data": {"critic/score/mean": 1}}',
    b'{"step": 1, "data": {"critic/score/mean": 1' + b"0" * 400 + b"}}",
    b"[" * 100_000 + b"]" * 100_000,
])
@pytest.mark.parametrize("command", ["metrics", "plot"])
def test_a_metrics_line_past_a_float_is_skipped(cli_env, fake_slurm, line, command):
    root = cli_env / "runs"
    run = _ended(root, "good")
    (run.dir / "metrics" / "attempt-0.jsonl").write_bytes(line + b'\n{"step": 2, "data": {"critic/score/mean": 0.5}}\n')
    if command == "plot":
        pytest.importorskip("matplotlib")
        result = sf_cli("plot", run.id, "-o", cli_env / "p.png")
    else:
        result = sf_cli("metrics", run.id, "--json")
    assert result.exit_code == 0, (result.stderr, result.exception)
    if command == "metrics":
        assert json.loads(result.stdout)["data"]["critic/score/mean"] == [[2, 0.5]]
