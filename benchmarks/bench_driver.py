"""The driver of the benchmarks' sf jobs: a trivial stand-in for verl.

sf runs an experiment's main.py as the driver (`python3 main.py <overrides>`) on the head
once its barrier has passed. bringup.py and requeue.py write a main.py that sets MODE and
execs this file:

  MODE = "exit"    record and exit 0 (bring-up: the job ends as soon as Ray is up)
  MODE = "block"   record, then wait for a signal (requeue: a driver that keeps running)

"Record" appends one JSON line to <run dir>/bench_driver.jsonl: when the job's batch
script started (from /proc: the reference every bring-up is timed from), when this
driver started, the job id and restart count.
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procstart  # noqa: E402

MODE = globals().get("MODE", "exit")
now = time.time()
entry = {"driver_start": now, "batch_start": procstart.batch_start_epoch(),
         "job_id": os.environ.get("SLURM_JOB_ID"), "restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
         "nnodes": os.environ.get("FORGE_CLUSTER_TOTAL_NODES"), "mode": MODE, "pid": os.getpid(),
         "in_place": int(os.environ.get("SF_RESTART_IN_PLACE") or 0)}
run_dir = os.environ.get("FORGE_CLUSTER_RUN_DIR") or os.environ.get("SF_RUN_DIR") or "."
with open(os.path.join(run_dir, "bench_driver.jsonl"), "a") as handle:
    handle.write(json.dumps(entry) + "\n")
print(f"bench driver ({MODE}) started on {os.environ.get('SLURMD_NODENAME')}: {entry}", flush=True)
if MODE == "block" and os.environ.get("VERL_FILE_LOGGER_PATH"):
    # one training step record, as verl's file logger writes it: a driver that has trained
    # (sf restarts in place only a driver that failed after its first step)
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as handle:
        handle.write(json.dumps({"step": 1, "data": {"actor/pg_loss": 0.0}}) + "\n")
if MODE == "block":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:  # bounded: the job's time limit ends it sooner
        time.sleep(1)
