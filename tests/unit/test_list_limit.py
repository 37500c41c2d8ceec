"""`sf list` shows the newest --limit runs and says when there are more: after the test suite a
user saw only its runs and no word that theirs were further down."""
from unit_helpers import sacct_row, sf_cli, submitted_run


def test_list_says_how_many_runs_it_left_out(fake_slurm):
    for n in range(3):
        submitted_run(fake_slurm.runs_dir, f"exp{n}", str(100 + n))
    fake_slurm.set("sacct", out="".join(sacct_row(100 + n, "COMPLETED") for n in range(3)))
    shown = sf_cli("list", "--limit", "2")
    assert shown.exit_code == 0, shown.output
    assert "(the newest 2 of 3 runs; --limit 3 shows them all)" in shown.output
    whole = sf_cli("list")
    assert whole.exit_code == 0 and "newest" not in whole.output and whole.output.count("completed") == 3
