"""Issue 33 on the real dev cluster: spare nodes count in what a partition can ever give (the
train partition has 10 nodes). A pool of 4 nodes with 7 spares is 11 nodes: sbatch would take it
and it would pend forever; sf submit (and sf validate --live) refuse it with the partition's
real size, and nothing is written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SF = str(Path(sys.executable).parent / "sf")
ASSETS = REPO / "examples" / "assets"


def spares_experiment(root: Path, nodes: int, spares: int) -> Path:
    exp = root / "spares"
    exp.mkdir()
    (exp / "config.yaml").write_text(
        f"method: verl/grpo\nmodel: {ASSETS / 'model'}\n"
        f"data:\n  train: {{files: {ASSETS / 'data' / 'train.parquet'}}}\n"
        f"  validation: {{files: {ASSETS / 'data' / 'test.parquet'}}}\n"
        "spec:\n  resources:\n"
        f"    pools: [{{name: train, series: fake, nodes: {nodes}, gpus_per_node: 4, spare_nodes: {spares}}}]\n"
        "slurm: {time: '00:20:00', max_restarts_in_place: 1}\n")
    return exp


def test_spares_beyond_the_partition_are_refused_with_its_size(tmp_path):
    exp = spares_experiment(tmp_path, nodes=4, spares=7)
    runs = tmp_path / "runs"  # its own runs folder: tests side by side write the shared one
    for args in (["submit", str(exp), "--runs-dir", str(runs)], ["validate", str(exp), "--live"]):
        proc = subprocess.run([SF, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("sf: error: ")]
        assert lines == ["sf: error: pools.train: 4 + 7 spare nodes x 4 GPUs can never run in partition train: it "
                         "has 10 nodes, 10 of them with >= 4 GPUs (at most 4 GPUs a node); nodes and spare_nodes "
                         "together must be at most 10 (spare nodes are allocated too; e.g. --profile fake:3x4, or "
                         "fewer spare_nodes)"], proc.stderr
    assert not runs.exists() or not any(runs.iterdir())  # nothing written, nothing queued


def test_spares_within_the_partition_pass_the_live_check(tmp_path):
    proc = subprocess.run([SF, "validate", str(spares_experiment(tmp_path, nodes=4, spares=6)), "--live"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
