"""Benchmark 2: what sf costs on the login node, against Hydra's own compose and
`sbatch --test-only`.

    python benchmarks/login_cost.py --work DIR --out FILE [--reps 7] [--no-slurm]

Each command runs as a child process; its wall time is measured around it, its CPU time
and peak memory (max RSS) come from GNU time (/usr/bin/time). The commands run
interleaved (one of each per repetition), so a change of load on the host touches all of
them alike. Commands (examples/grpo, the 2-node GRPO example):

  sf --help
  sf validate examples/grpo
  sf submit examples/grpo --dry-run          spec + compile + the verl compose check + render,
                                             with an empty compose cache (launcher.compile.verlcache)
  ... --dry-run (compose remembered)         the same, the check remembered from a run before
  hydra compose of verl's ppo_trainer        a fresh Python that only composes verl's own
                                             config with Hydra: the floor of any check
  sbatch --test-only <the same script>       (unless --no-slurm)

It prints the ratio of the dry run's median wall time to the bare compose's (issue 15's
target: at most 1.3x). sf runs as `python -m launcher.cli.app` from this checkout, so the
tree under test is what is measured whatever `sf` is on PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import log  # noqa: E402

TIME = "/usr/bin/time"  # GNU time (Debian package `time`)
SF = [sys.executable, "-m", "launcher.cli.app"]
DRY_COLD = "sf submit examples/grpo --dry-run"
DRY_WARM = "sf submit examples/grpo --dry-run (compose remembered)"
COMPOSE = "hydra compose of verl's ppo_trainer (fresh Python)"
TARGET_RATIO = 1.3

# What the verl compose check cannot do with less: start Python, import Hydra, compose.
COMPOSE_ONLY = """
import importlib.util, os
from hydra import compose, initialize_config_dir
config_dir = os.path.join(list(importlib.util.find_spec("verl").submodule_search_locations)[0], "trainer", "config")
with initialize_config_dir(config_dir=config_dir, version_base=None):
    compose(config_name="ppo_trainer")
"""


def measure(argv: list[str], env: dict | None = None, cwd: Path | None = None) -> dict:
    """Wall time around the child; its CPU time and peak RSS from GNU time (whose own small
    process is what the child forks from, so the peak is the child's, not this Python's)."""
    fd, path = tempfile.mkstemp(prefix="bx-time-")
    os.close(fd)
    t0 = time.perf_counter()
    proc = subprocess.run([TIME, "-o", path, "-f", "%M %U %S", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, cwd=cwd or common.REPO, stdin=subprocess.DEVNULL, timeout=120,
                          env=env)
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
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--no-slurm", action="store_true", help="skip sbatch --test-only (no cluster needed)")
    p.add_argument("--against", metavar="REF", help="compare two trees instead: commit REF, and REF with --files "
                   "taken from HEAD (what one change costs, nothing else that landed between)")
    p.add_argument("--files", nargs="*", default=[], help="with --against: the paths of the change")
    args = p.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.against:
        return compare_trees(work, args.out, args.against, args.files, args.reps)
    rendered = work / "login-render"
    common.run([*SF, "render", "examples/grpo", "-o", str(rendered)], timeout=120)
    script = rendered / "job.sbatch"
    warm_cache, cold_cache = work / "compose-cache-warm", work / "compose-cache-cold"
    # sf's own modules byte-compiled, as an installed sf has them (pip compiles what it
    # installs; the floor's hydra and omegaconf come compiled from site-packages): with
    # PYTHONDONTWRITEBYTECODE set (as on the dev host), every sf run would compile launcher/
    # again and the ratio would measure the compiler (1.50x against 1.25x, one host, 10:25-10:27)
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    common.run([sys.executable, "-m", "compileall", "-q", str(common.REPO / "launcher")], timeout=120, env=base_env)
    env_with = {**base_env, "SF_CACHE_DIR": str(warm_cache)}
    env_without = {**base_env, "SF_CACHE_DIR": str(cold_cache)}
    commands = {
        "sf --help": ([*SF, "--help"], base_env),
        "sf validate examples/grpo": ([*SF, "validate", "examples/grpo"], env_without),
        DRY_COLD: ([*SF, "submit", "examples/grpo", "--dry-run"], env_without),
        COMPOSE: ([sys.executable, "-c", COMPOSE_ONLY], base_env),
        DRY_WARM: ([*SF, "submit", "examples/grpo", "--dry-run"], env_with),
    }
    if not args.no_slurm:
        commands["sbatch --test-only (same script)"] = (["sbatch", "--test-only", str(script)], None)
    result = {"commands": {}, "script": str(script), "reps": args.reps, "interleaved": True}
    for cmd, env in commands.values():  # one warm-up each (page cache; fills the warm cache), not counted
        measure(cmd, env)
    for rep in range(args.reps):
        for name, (cmd, env) in commands.items():
            shutil.rmtree(cold_cache, ignore_errors=True)  # the cold runs never find a remembered check
            row = measure(cmd, env)
            row["rep"] = rep
            result["commands"].setdefault(name, []).append(row)
            if row["rc"] != 0:
                log(f"{name}: exit {row['rc']}: {row['stderr_tail']}")
        common.save(args.out, result)
    medians = {name: statistics.median(r["wall_s"] for r in rows) for name, rows in result["commands"].items()}
    for name, rows in result["commands"].items():
        wall = common.summary([r["wall_s"] for r in rows])
        rss = common.summary([r["peak_rss_mb"] for r in rows])
        log(f"{name:55s} wall median {wall['median']}s [{wall['min']}-{wall['max']}]  peak RSS {rss['median']} MB")
    result["ratios"] = {
        "dry_run_vs_compose": round(medians[DRY_COLD] / medians[COMPOSE], 3),
        "dry_run_remembered_vs_compose": round(medians[DRY_WARM] / medians[COMPOSE], 3),
        "target": TARGET_RATIO,
        "load_average": common.load_average(),
    }
    common.save(args.out, result)
    for key in ("dry_run_vs_compose", "dry_run_remembered_vs_compose"):
        ratio = result["ratios"][key]
        print(f"{key}: {ratio:.2f}x (target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'})")
    return 0


def _tree(work: Path, name: str, ref: str, files: list[str]) -> Path:
    """A clean copy of commit `ref` (git archive: no one's uncommitted work), with `files` as HEAD has them."""
    tree = work / name
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=common.REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for path in files:
        (tree / path).write_bytes(subprocess.run(["git", "show", f"HEAD:{path}"], cwd=common.REPO,
                                                 capture_output=True, check=True).stdout)
    return tree


def compare_trees(work: Path, out: Path, ref: str, files: list[str], reps: int) -> int:
    """`sf validate` and `sf submit --dry-run` (compose remembered: sf's own work, not Hydra's) of
    examples/grpo from two trees, interleaved; prints after/before of the median CPU and wall."""
    trees = {"before": _tree(work, "before", ref, []), "after": _tree(work, "after", ref, files)}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env = {**env, "SF_CACHE_DIR": str(work / "compose-cache")}
    for tree in trees.values():
        common.run([sys.executable, "-m", "compileall", "-q", str(tree / "launcher")], timeout=120, env=env)
    commands = {"sf validate examples/grpo": [*SF, "validate", "examples/grpo"],
                "sf submit examples/grpo --dry-run (compose remembered)": [*SF, "submit", "examples/grpo", "--dry-run"]}
    rows: dict = {}
    for rep in range(-1, reps):  # rep -1: warm-up (page cache, the compose cache), not counted
        for name, argv in commands.items():
            for side, tree in trees.items():
                row = measure(argv, env, cwd=tree)
                if row["rc"] != 0:
                    log(f"{side} {name}: exit {row['rc']}: {row['stderr_tail']}")
                if rep >= 0:
                    rows.setdefault(f"{name} [{side}]", []).append(row)
    result = {"against": ref, "files": files, "reps": reps, "interleaved": True, "commands": rows,
              "load_average": common.load_average(), "ratios": {}}
    for name in commands:
        before, after = rows[f"{name} [before]"], rows[f"{name} [after]"]
        for key in ("cpu_s", "wall_s"):
            b, a = statistics.median(r[key] for r in before), statistics.median(r[key] for r in after)
            result["ratios"][f"{name} {key}"] = {"before": b, "after": a, "ratio": round(a / b, 3)}
            print(f"{name:55s} {key}: before {b:.3f} after {a:.3f} -> {a / b:.3f}x")
    common.save(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
