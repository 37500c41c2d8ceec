"""`python -m launcher.injob COMMAND ...`: the in-job commands.

  supervise ...            the batch step (see supervise.py)
  node --role head|worker  one Ray node (inside a node srun)
  barrier                  wait for every pool's nodes and GPUs (runtime python)
  preflight                the preflight checks (runtime python)
  health                   object transfers between every pair of nodes (runtime python)
  phase RUN_DIR NAME [k=v ...]   append a phase to the run's events (the requeue trap)
  reason RUN_DIR TEXT      write the run's reason file (the requeue trap, at the bound)
  point MANIFEST TASK      print the run dir of an array sweep's point TASK (the batch script)
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "supervise":
        from launcher.injob import supervise

        return supervise.main(rest)
    if cmd == "node":
        from launcher.injob import node

        role = rest[rest.index("--role") + 1] if "--role" in rest else "worker"
        return node.main(role)
    if cmd == "barrier":
        from launcher.injob import barrier

        return barrier.main()
    if cmd == "health":
        from launcher.injob import health

        return health.main()
    if cmd == "preflight":
        from launcher.injob import preflight

        return preflight.main()
    if cmd == "phase":
        from launcher import runs

        run_dir, name, *pairs = rest
        info = dict(p.split("=", 1) for p in pairs if "=" in p)
        runs.record_phase(run_dir, name, **info)
        return 0
    if cmd == "reason":
        from launcher import runs

        run_dir, text = rest[0], " ".join(rest[1:])
        runs.Run(run_dir).write_text(runs.REASON, text.rstrip() + "\n")
        return 0
    if cmd == "point":
        from launcher.injob.supervise import load_point

        try:
            point = load_point(rest[0], int(rest[1]))
        except (OSError, ValueError, RuntimeError, IndexError) as exc:
            print(f"sf: no sweep point: {exc}", file=sys.stderr)
            return 2
        print(point["run_dir"])
        return 0
    print(f"unknown command {cmd!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
