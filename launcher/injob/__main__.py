"""`python -m launcher.injob COMMAND ...`: the in-job commands.

  supervise ...            the batch step (see supervise.py)
  node --role head|worker  one Ray node (inside a node srun)
  barrier                  wait for every pool's nodes and GPUs (runtime python)
  preflight                the preflight checks (runtime python)
  health                   object transfers between every pair of nodes (runtime python)
  stacks --out DIR         py-spy dumps of this job's Python processes on this node (a hang)
  phase RUN_DIR NAME [k=v ...]   append a phase to the run's events (the requeue trap)
  reason RUN_DIR TEXT      write the run's reason file (the requeue trap, at the bound)
  point MANIFEST TASK      print the run dir of an array sweep's point TASK (the batch script)
  checkpoint DIR FMT|-     print "<backend>\t<actor dir>" of DIR's last checkpoint (a chained export)
  export-preflight CKPT TARGET REPORT MERGER FMT|- [upstream-preflight]
                           an export job's preflight: report JSON, exit 1 on a failure
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
    if cmd == "stacks":
        from launcher.injob import stacks

        return stacks.main(rest)
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
    if cmd in ("checkpoint", "export-preflight"):
        return _export(cmd, rest)
    print(f"unknown command {cmd!r}\n{__doc__}", file=sys.stderr)
    return 2


def _export(cmd: str, rest: list[str]) -> int:
    import json

    from launcher.checkpoints import FORMATS, LayoutError, find_actor_dir, preflight_report

    if cmd == "checkpoint":
        directory, fmt = rest[0], (rest[1] if len(rest) > 1 and rest[1] != "-" else None)
        try:
            ckpt = find_actor_dir(directory, fmt)
        except LayoutError as exc:
            print(f"sf: no checkpoint to export: {exc}", file=sys.stderr)
            return 2
        print(f"{FORMATS[ckpt.fmt]}\t{ckpt.actor_dir}")
        return 0
    checkpoint, target, report_path, merger, fmt = rest[:5]
    report = preflight_report(checkpoint, None if fmt == "-" else fmt, target, merger,
                              upstream_preflight="upstream-preflight" in rest[5:])
    import os

    os.makedirs(os.path.dirname(report_path) or ".", exist_ok=True)
    with open(report_path, "w") as handle:
        json.dump(report, handle, indent=2)
    ck = report["checkpoint"]
    print(f"[sf] export preflight: checkpoint: {ck.get('actor_dir') or ck.get('note')}")
    print(f"[sf] export preflight: merger: {report['merger'] or 'missing'}; target {target} "
          f"writable: {report['target'].get('writable')}; merged: no (preflight)")
    for failure in report["failures"]:
        print(f"[sf] export preflight FAILED: {failure}", file=sys.stderr)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
