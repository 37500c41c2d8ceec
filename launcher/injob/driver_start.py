"""Starting the job's driver once Ray is up (or at once, for torchrun): verl's main pinned to
its Slurm groups (pinned), the preflight in its place (--preflight), torchrun over the train
pool for SFT, or the SF_TEST_DRIVER test hook (see launcher/injob/supervise.py). Each records
driver_started and sets the attempt's stage. Stdlib only.
"""

from __future__ import annotations

import os
from dataclasses import replace

from launcher import states
from launcher.injob import verl_phases
from launcher.injob.attempt import Attempt
from launcher.injob.processes import Processes, gpu_env_wrapper
from launcher.injob.record_keeper import RecordKeeper, log

PINNED_MAIN = "launcher.injob.verl_main"


def pinned(argv: list[str]) -> list[str]:
    """A Ray driver's argv run through verl_main, so every verl resource pool it builds is
    pinned to its Slurm group: `python -m MODULE` (the method's verl main) and `python
    main.py` (an experiment's own driver of the same trainer) alike; anything else (`-c`,
    a test's driver) as it is."""
    if len(argv) >= 3 and argv[1] == "-m":
        return [argv[0], "-m", PINNED_MAIN, "--entry", *argv[2:]]
    if len(argv) >= 2 and argv[1].endswith(".py"):
        return [argv[0], "-m", PINNED_MAIN, "--script", *argv[1:]]
    return argv


def hook_argv(overrides) -> list[str] | None:
    """The SF_TEST_DRIVER test hook (see launcher/injob/supervise.py), or None."""
    hook = os.environ.get("SF_TEST_DRIVER", "")
    if not hook.strip():
        return None
    return ["/bin/sh", "-c", hook, "sf-test-driver", *overrides]


class DriverStart:
    """Starts the driver (or the preflight) as a step of `procs`."""

    def __init__(self, attempt: Attempt, records: RecordKeeper, procs: Processes):
        self.attempt = attempt
        self.records = records
        self.procs = procs

    def started(self, what: str, stage: str) -> None:
        self.records.record(states.DRIVER_STARTED, what=what, seconds=self.records.elapsed())
        self.attempt.stage = stage

    def driver_argv(self) -> list[str]:
        a = self.attempt
        argv = a.plan.argv()
        if argv[:1] and argv[0] in ("python", "python3"):
            argv[0] = a.runtime.runtime_python()
        return pinned(argv) if a.plan.launcher == "ray" else argv

    def start_preflight(self, env: dict) -> None:
        py = self.attempt.runtime.runtime_python()
        self.procs.local("preflight", [py, "-m", "launcher.injob", "preflight"], kind="driver", env=env)
        self.started("preflight", states.STAGE_PREFLIGHT)

    def start_driver(self) -> None:
        """The Ray job's driver, once every node joined (and the health check passed)."""
        a = self.attempt
        hook = hook_argv(a.plan.overrides)
        if hook is not None:
            log("driver (SF_TEST_DRIVER test hook): " + " ".join(hook[:3]))
            a.verl_log = verl_phases.LogWatch.from_here()  # the driver's lines, not sf's line naming it
            if a.runtime.local_argv(hook) is None:  # a container (oci, pyxis): where verl's driver runs
                self.procs.local("driver", hook, kind="driver", env=self.procs.child_env(driver=True))
            else:
                self.procs.here("driver", hook, kind="driver", env=self.procs.child_env(driver=True))
            self.started("SF_TEST_DRIVER", states.STAGE_DRIVER)
            return
        if a.preflight:
            self.start_preflight(self.procs.child_env(driver=True))
            return
        argv = self.driver_argv()
        log("driver: " + " ".join(argv))
        a.verl_log = verl_phases.LogWatch.from_here()
        self.procs.local("driver", argv, kind="driver", env=self.procs.child_env(driver=True))
        what = argv[2] if argv[1:2] == ["-m"] and len(argv) > 2 else (argv[1] if len(argv) > 1 else argv[0])
        self.started(what, states.STAGE_DRIVER)

    def start_torchrun(self) -> None:
        """SFT: torchrun on every node of the train pool, its rendezvous on the head's port."""
        a = self.attempt
        train = a.plan.pools[0]
        argv = a.plan.argv()
        rdzv = [f"--nnodes={train.nodes}", f"--nproc_per_node={train.gpus_per_node}",
                "--rdzv_backend=c10d", f"--rdzv_endpoint={a.head_addr}:{a.ports.rdzv}",
                f"--rdzv_id=sf{a.job_id}"]
        argv = [argv[0], *rdzv, *argv[1:]]
        if a.preflight:  # the preflight reports the torchrun argv it would run
            self.start_preflight(self.procs.child_env(driver=True, job=replace(a.job, entry=tuple(argv))))
            return
        log("driver: " + " ".join(argv))
        a.verl_log = verl_phases.LogWatch.from_here()
        self.procs.srun("torchrun", gpu_env_wrapper(argv), kind="driver", env=self.procs.child_env(driver=True),
                        het_group=0 if a.hetjob else None, nodes=train.nodes, ntasks=train.nodes,
                        ntasks_per_node=1, nodelist=list(a.job.hosts[train.name]), kill_on_bad_exit=True)
        self.started("torchrun", states.STAGE_DRIVER)
