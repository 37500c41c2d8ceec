"""Benchmark 2: what sf costs on the login node, against `sbatch --test-only`.

    python benchmarks/login_cost.py --work DIR --out FILE [--reps 5]

Each command runs as a child process; its wall time is measured around it, its CPU time
and peak memory (max RSS) come from GNU time (/usr/bin/time). Commands (examples/grpo, the 2-node GRPO example, verl 0.9.1):

  sf --help
  sf validate examples/grpo
  sf submit examples/grpo --dry-run     (compile + the verl compose check + render)
  sbatch --test-only <the same script>  (rendered once by `sf render examples/grpo -o DIR`)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import log  # noqa: E402

TIME = "/usr/bin/time"  # GNU time (Debian package `time`)


def measure(argv: list[str]) -> dict:
    """Wall time around the child; its CPU time and peak RSS from GNU time (whose own small
    process is what the child forks from, so the peak is the child's, not this Python's)."""
    fd, path = tempfile.mkstemp(prefix="bx-time-")
    os.close(fd)
    t0 = time.perf_counter()
    proc = subprocess.run([TIME, "-o", path, "-f", "%M %U %S", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, cwd=common.REPO, stdin=subprocess.DEVNULL, timeout=120)
    wall = time.perf_counter() - t0
    fields = Path(path).read_text().split()[-3:]
    os.unlink(path)
    rss_kb, user, system = int(fields[0]), float(fields[1]), float(fields[2])
    return {"wall_s": round(wall, 4), "cpu_s": round(user + system, 3), "peak_rss_mb": round(rss_kb / 1024, 1),
            "rc": proc.returncode, "stderr_tail": proc.stderr.decode(errors="replace").strip()[-300:]}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    work = args.work.resolve()
    rendered = work / "login-render"
    common.run([common.SF, "render", "examples/grpo", "-o", str(rendered)], timeout=120)
    script = rendered / "job.sbatch"
    commands = {
        "sf --help": [common.SF, "--help"],
        "sf validate examples/grpo": [common.SF, "validate", "examples/grpo"],
        "sf submit examples/grpo --dry-run": [common.SF, "submit", "examples/grpo", "--dry-run"],
        "sbatch --test-only (same script)": ["sbatch", "--test-only", str(script)],
    }
    result = {"commands": {}, "script": str(script), "reps": args.reps}
    for name, cmd in commands.items():  # one warm-up each (page cache), not counted
        measure(cmd)
    for rep in range(args.reps):
        for name, cmd in commands.items():
            row = measure(cmd)
            row["rep"] = rep
            result["commands"].setdefault(name, []).append(row)
            if row["rc"] != 0:
                log(f"{name}: exit {row['rc']}: {row['stderr_tail']}")
        common.save(args.out, result)
    for name, rows in result["commands"].items():
        wall = common.summary([r["wall_s"] for r in rows])
        rss = common.summary([r["peak_rss_mb"] for r in rows])
        log(f"{name:40s} wall median {wall['median']}s [{wall['min']}-{wall['max']}]  peak RSS {rss['median']} MB")
    common.save(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
