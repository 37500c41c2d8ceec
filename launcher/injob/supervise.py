"""The supervisor: the batch step of every sf job (`python -m launcher.injob supervise`).

Runs on the batch host (the first node of het group 0) and holds every process of the
job as a Popen (processes.Step). This module is the entry and the coordinator; the work is
its parts': bringup (Ray up, the barrier), driver_start, watch (the loop), actuator (heal.py's
decisions carried out), ending, record_keeper, on the state in attempt.Attempt
(docs/architecture.md, "Inside the job", draws who calls whom). A start goes:

  allocated     the pools' Slurm hosts are known
  head          one srun step on the first node of het group 0: `ray start --head --block`
  workers       ONE srun per het group over its other nodes: `ray start --block` each
  head_up       the GCS answers (TCP connect, no CPU cost)
  barrier       one long-lived process polls the GCS until every pool's hosts and GPUs
                are there (site barrier_timeout_s); on timeout it names who never joined
  all_joined    recorded with seconds since allocated
  driver        verl on the head with FORGE_CLUSTER_* and the wall-time end exported
                (or preflight instead, or torchrun over the train pool for SFT)
  ended         with rc and reason

Requeue (the batch script's USR1 trap does the `scontrol requeue`; templates/train.sbatch.j2):
on every start the supervisor records `restarted` (restart=SLURM_RESTART_COUNT) when the
job is a requeued one, refuses to run a job restarted more than max_requeues times (plan.json)
(Slurm itself requeues --requeue jobs, e.g. on a node failure, without any bound), brings
Ray up again, and exports the wall-time end again to the driver
(MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP, verl's save-before-expiry): the job's
EndTime, less the requeue lead (plan.json) (the USR1 lead + 30 s, as the signal can come that
much early) while the job may still be requeued, so verl's forced save lands before the
requeue; recorded in the `wall_time` phase. USR1 is ignored here (it is the trap's).

Array sweeps (launcher.submit.sweep): --manifest FILE --task N make this task a point of the
sweep: its run dir, checkpoint dir, paths to check and overrides come from the manifest.

Test hook: when the job's environment has SF_TEST_DRIVER (a shell command), it runs on the
head in place of verl (or of the preflight), after the same bring-up and with the same
environment, as `sh -c "$SF_TEST_DRIVER" sf-test-driver OVERRIDES...`. Only the cluster
tests set it (tests/cluster/test_requeue.py, test_sweep.py): a harmless, long driver.

Any node srun that ends before the driver does ends the job (within a second or two):
a `reason` file naming the node(s) and the phase, every step terminated, exit non-zero.
Stdlib only (it may run with the host's python when the runtime is a container).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from launcher import ownership, runs, states
from launcher.errors import SpecError
from launcher.injob import capabilities
from launcher.injob.actuator import Actuator
from launcher.injob.attempt import Attempt
from launcher.injob.bringup import Bringup, PortsTaken
from launcher.injob.contract import Contract, UnreadableContract
from launcher.injob.driver_start import DriverStart
from launcher.injob.ending import Ending
from launcher.injob.processes import Processes
from launcher.injob.record_keeper import RecordKeeper, log
from launcher.injob.watch import Watch


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The batch script passes the run dir (and an array task's manifest) and the digest of the
    entry and overrides its arrays show; everything else, those included, is the run's
    plan.json (read_contract)."""
    p = argparse.ArgumentParser(prog="python -m launcher.injob supervise")
    p.add_argument("--run-dir", required=True, help="the run dir; its plan.json is the job's contract")
    p.add_argument("--preflight", action="store_true")
    p.add_argument("--manifest", default=None, help="sweep manifest (array task: its point)")
    p.add_argument("--task", type=int, default=None, help="the array task id (with --manifest)")
    p.add_argument("--shown", default=None,
                   help="digest of the script's SF_ENTRY and SF_OVERRIDES (contract.shown_digest)")
    # a script of an earlier sf passed the entry and overrides themselves: refused (read_contract)
    p.add_argument("--n-entry", default=None, help=argparse.SUPPRESS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def read_contract(args: argparse.Namespace) -> Contract:
    """plan.json, read once, checked against what the batch script shows, with an array task's
    point applied."""
    if args.n_entry is not None or args.rest or args.shown is None:
        raise UnreadableContract("this batch script was not written by this sf (it passes no digest of its "
                                 "entry and overrides): submit the run again with this sf")
    contract = Contract.read(args.run_dir)
    contract.check_shown(args.shown, array=bool(args.manifest))
    if not args.manifest:
        return contract
    if args.task is None:
        raise SystemExit("--manifest needs --task (SLURM_ARRAY_TASK_ID)")
    point = load_point(args.manifest, args.task)
    if os.path.realpath(point["run_dir"]) != os.path.realpath(args.run_dir):
        raise SystemExit(f"run dir {args.run_dir} is not point {args.task}'s ({point['run_dir']})")
    return contract.at_point(point)


def load_point(manifest: str, task: int) -> dict:
    """The point of an array sweep's manifest (written by launcher.submit.sweep) for array task `task`."""
    with open(manifest) as handle:
        data = json.load(handle)
    for point in data.get("points", ()):
        if int(point.get("index", -1)) == int(task):
            return point
    raise RuntimeError(f"sweep manifest {manifest} has no point {task}")


class Supervisor:
    """The coordinator: makes the attempt's state and its parts, wires them (who calls whom:
    docs/architecture.md, "The job side"), and runs the attempt in order: setup, the restart
    bound, the wall-time end, the capability check, then Ray (or torchrun) and the watch.
    Each part holds only the parts it calls."""

    def __init__(self, contract: Contract, run_dir: str, preflight: bool = False):
        self.attempt = Attempt(contract, run_dir, preflight)
        self.records = RecordKeeper(run_dir, self.attempt.job_id)
        self.procs = Processes(self.attempt)
        self.bringup = Bringup(self.attempt, self.records, self.procs)
        self.driver = DriverStart(self.attempt, self.records, self.procs)
        self.ending = Ending(self.attempt, self.records, self.procs)
        self.actuator = Actuator(self.attempt, self.records, self.procs, self.bringup, self.ending)
        self.watch = Watch(self.attempt, self.records, self.procs, self.driver, self.ending, self.actuator)

    def run(self) -> int:
        a = self.attempt
        self.bringup.setup()
        refused = self.ending.check_restarts()
        if refused is not None:
            return refused
        if a.restart > 0:
            self.records.clear_reason()
        self.records.record(states.WALL_TIME, job_end=int(a.end_ts) if a.end_ts else None,
                            expires=int(a.expires_ts) if a.expires_ts else None, may_requeue=a.may_requeue())
        if (refused := self.refuse_early()) is not None:  # before Ray: a missing flash-attn, ...
            return refused
        if a.plan.launcher == "torchrun":
            self.driver.start_torchrun()
            return self.watch.run()
        self.bringup.bring_ray_up()
        return self.watch.run()

    def refuse_early(self) -> int | None:
        """A real job whose method needs a capability the runtime lacks ends now, with the
        reason (None: go on); --preflight reports it itself, beside its other checks."""
        a = self.attempt
        if a.preflight:
            return None
        checked = capabilities.check_early(a.contract, a.runtime, self.procs.child_env(), a.job.head_node, a.hetjob)
        if checked is None:
            return None
        result, missing = checked
        self.records.record(states.CAPABILITIES_CHECKED, capabilities=result)
        if not missing:
            return None
        return self.ending.fail("; ".join(missing) + " (checked before Ray started; nothing else ran)", rc=1)

    def on_signal(self, signum: int) -> int:
        """SIGTERM or SIGINT: the exit code, once the ending is recorded (Slurm's, when Slurm
        is ending the job)."""
        if self.attempt.ended:
            return 128 + signum
        ending = self.ending.slurm_ending() if signum == signal.SIGTERM else None
        if ending:
            return self.ending.end_by_slurm(ending, signum)
        self.ending.finish(128 + signum, f"terminated by signal {signal.Signals(signum).name} during phase "
                           f"{self.attempt.stage}", signal=signal.Signals(signum).name)
        return 128 + signum


def own_run_dir(run_dir: str) -> str | None:
    """Why this job must not run in `run_dir` (another user's, a symlink, open to others, in a
    folder others may rename it out of), or None. Checked before the job writes anything."""
    try:
        ownership.check_own_dir(run_dir)
        ownership.trusted_chain(os.path.dirname(os.path.abspath(run_dir)))
    except SpecError as exc:
        return str(exc)
    return None


def refuse_contract(run_dir: str, reason: str) -> int:
    """End a job whose plan.json it cannot run from: the reason and an `ended` event in the
    run (so `sf status` says why), no traceback; nothing was started."""
    log("FAILED: " + reason)
    try:
        runs.Run(run_dir).write_text(runs.REASON, reason + "\n")
        runs.record_phase(run_dir, states.ENDED, rc=2, reason=reason, seconds=0.0)
    except (OSError, SpecError) as exc:
        log(f"warning: cannot record the ending: {exc}")
    return 2


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    unsafe = own_run_dir(args.run_dir)
    if unsafe:
        # nothing is written into it: not the reason, not an event (they would go where the other user says)
        log(f"refusing to run: {unsafe}")
        return 2
    # what the job makes (checkpoints, metrics, verl's and Ray's files) is its user's alone, or its
    # group's to read when the run is shared (ownership.run_umask), whatever umask it came with
    umask = ownership.run_umask(args.run_dir)
    os.umask(umask)
    try:  # a run dir of an older sf, or made by hand: the folders the job writes into, with sf's modes
        shared = umask == ownership.SHARED_UMASK
        runs.make_subdirs(args.run_dir, ownership.SHARED_DIR if shared else ownership.PRIVATE_DIR, exist_ok=True)
    except (OSError, SpecError) as exc:
        log(f"refusing to run: {exc}")
        return 2
    try:
        contract = read_contract(args)
    except UnreadableContract as exc:
        return refuse_contract(args.run_dir, str(exc))
    sup = Supervisor(contract, args.run_dir, preflight=args.preflight)

    def on_term(signum, _frame):
        sys.exit(sup.on_signal(signum))

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the batch script's requeue trap handles it
    try:
        return sup.run()
    except PortsTaken as exc:  # another user's or program's ports: the reason says which, no traceback
        return sup.ending.fail(str(exc), rc=1)
    except Exception as exc:  # a bug or a broken allocation: still leave a reason behind
        import traceback

        traceback.print_exc()
        return sup.ending.fail(f"supervisor error during phase {sup.attempt.stage}: {exc.__class__.__name__}: {exc}",
                               rc=1)
