"""The cluster tests' shared helpers, in one place (test files never import each other): run
sf, read a run's phase record, wait for an event, build an experiment or a site file, the
test drivers that several files run (SF_TEST_DRIVER).

Every wait here polls for the event it names (a phase in the run's record, a Slurm state, a
file) and returns as soon as it is there; none sleeps a fixed time. The test files import
from here (tests/cluster/conftest.py puts this folder on sys.path).
"""
from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from launcher.states import run_ended, slurm_done

REPO = Path(__file__).resolve().parents[2]
NOBODY = pwd.getpwnam("nobody")  # the second user of the second-user tests
NOBODY_PY = "/usr/bin/python3"  # a python `nobody` can run


def nobody_argv(*argv: str) -> list[str]:
    """`argv` run as nobody: its uid and gid, no supplementary groups."""
    return ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups", "--", *argv]


def partition_nodes(partition: str) -> set[str]:
    """The nodes of one of the dev cluster's partitions, as the running cluster has them
    (scripts/dev-cluster's TRAIN_NODES / TEACH_NODES; scripts/test stops on another shape)."""
    listed = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%N"], capture_output=True, text=True,
                            check=True).stdout.strip()
    return set(subprocess.run(["scontrol", "show", "hostnames", listed], capture_output=True, text=True,
                              check=True).stdout.split())


TRAIN = partition_nodes("train")
TEACH = partition_nodes("teach")
SF = str(Path(sys.executable).parent / "sf")
# job states after which `scancel` has nothing left to do
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN")
# How long a job may pend before a wait's own timeout starts: tests run side by side
# (scripts/test -n), so a job may wait for nodes that other tests' jobs hold. Time in the
# queue is not what the tests measure; their timeouts count from the job's start.
QUEUE_WAIT_S = float(os.environ.get("SF_TEST_QUEUE_WAIT_S", "900"))


def sf(*args, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([SF, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})


def phases(run_dir) -> list[dict]:
    from launcher import runs

    return runs.read_phases(run_dir)


def phase(run_dir, name):
    return next((e for e in phases(run_dir) if e["phase"] == name), None)


def job_state(job_id: str) -> str:
    from launcher import slurm

    try:
        return slurm.show_job(job_id).get("JobState", "UNKNOWN")
    except Exception:
        return "UNKNOWN"


def last_node_starts(run_dir) -> list[dict]:
    """Each node's last node_started: a `ray start` that failed before Ray ran is started again
    (node_retry) in a new private dir, and the first one's dir and processes are gone."""
    return list({e["node"]: e for e in phases(run_dir) if e["phase"] == "node_started"}.values())


def wait_until(check, timeout: float, what, interval: float = 0.5):
    """Poll ``check()`` until it returns something truthy; return that value. After ``timeout``
    seconds raise AssertionError naming ``what`` (a string, or a function giving one, called
    then so the message shows the last state)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what() if callable(what) else what} (waited {timeout:.0f}s)")
        time.sleep(interval)


def wait_started(job: str) -> None:
    """Until the job has left the queue (QUEUE_WAIT_S at most)."""
    wait_until(lambda: job_state(job) != "PENDING", QUEUE_WAIT_S, f"job {job} still pending", interval=1)


def wait_event(run_dir: Path, name: str, timeout: float = 120, restart=None, **match) -> dict:
    """The first phase ``name`` in the run's record (of attempt ``restart`` when given, with
    the fields ``match``). ``timeout`` counts from the run's first phase (the job started)."""
    wait_until(lambda: phases(run_dir), QUEUE_WAIT_S, f"{run_dir}: its job never started", interval=1)
    def found():
        for event in phases(run_dir):
            if (event["phase"] == name and (restart is None or event.get("restart", 0) == restart)
                    and all(event.get(k) == v for k, v in match.items())):
                return event
        return None

    return wait_until(found, timeout, lambda: f"no {name} (restart {restart}, {match}) in {run_dir}:\n"
                      + "\n".join(json.dumps(e) for e in phases(run_dir)[-12:]))


def wait_state(job: str, states: set[str], timeout: float = 90) -> str:
    """The job's state (scontrol) once it is one of ``states``; ``timeout`` counts from its start."""
    if "PENDING" not in states:
        wait_started(job)
    last = {"state": ""}

    def reached():
        last["state"] = job_state(job)
        return last["state"] if last["state"] in states else None

    return wait_until(reached, timeout, lambda: f"job {job} is {last['state']}, not {states}")


def wait_terminal(job_id: str, timeout: float = 180) -> str:
    """The job's final state, once it has one; ``timeout`` counts from its start."""
    wait_started(job_id)
    def ended():
        state = job_state(job_id)
        return state if slurm_done(state) else None

    return wait_until(ended, timeout, f"job {job_id} did not end", interval=1)


def wait_json(path: Path, timeout: float = 180, accept=lambda data: True) -> dict:
    """The JSON object in ``path`` once the file holds one that ``accept`` takes."""
    def read():
        try:
            data = json.loads(path.read_text())
            return data if accept(data) else None
        except (OSError, ValueError, KeyError):
            return None

    return wait_until(read, timeout, f"no (new) {path}", interval=0.3)


def status(run: str) -> dict:
    proc = sf("status", run, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"][0]


def cleanup(job: str) -> None:
    if job_state(job) not in ENDED:
        subprocess.run(["scancel", job], check=False)


def restarts(job: str) -> int:
    """Slurm's restart count of the job (scontrol's Restarts)."""
    from launcher import slurm

    return int(slurm.show_job(job).get("Restarts", "0"))


def wait_file(path: Path, timeout: float = 60) -> str:
    """The text of ``path`` once it exists. The supervisor records driver_started before the
    driver has run, so a file the driver writes is waited for, never read on that event."""
    return wait_until(lambda: path.read_text() if path.exists() else None, timeout,
                      f"{path} never appeared")


def touch_until(run_dir: Path, name: str, restart: int, timeout: float = 150) -> dict:
    """Wait for a phase; hetjobs start only from backfill, so touch the partitions meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in phases(run_dir):
            if event["phase"] == name and event.get("restart", 0) == restart:
                return event
        for part in ("train", "teach"):
            subprocess.run(["scontrol", "update", f"PartitionName={part}", "State=UP"], check=False)
        time.sleep(2)
    raise AssertionError(f"no {name} (restart {restart}) within {timeout}s: {phases(run_dir)[-8:]}")


# --- experiments and sites --------------------------------------------------------------------

ONE_NODE = [{"name": "train", "series": "fake", "nodes": 1, "gpus_per_node": 4}]
TRAIN_AND_TEACH = [{"name": "train", "series": "fake", "nodes": 1, "gpus_per_node": 4},
                   {"name": "teach", "series": "fake-teach", "nodes": 1, "gpus_per_node": 4}]


def experiment(tmp_path: Path, name: str, *, example: str = "grpo", nodes: int = 1, pools: list | None = None,
               roles: dict | None = None, files: dict | None = None, method: str | None = None,
               **slurm) -> str:
    """tmp_path/name: the example's config.yaml on the example assets, with these pools (one
    `train` pool of `nodes` fake nodes unless given), roles when given, `slurm:` of a 10-minute
    time limit and **slurm, and `files` (name -> text) beside it. `method` replaces the
    example's method (and drops its knobs, which belong to that method)."""
    data = yaml.safe_load((REPO / "examples" / example / "config.yaml").read_text())
    if method:
        data.update(method=method, knobs={})
    assets = REPO / "examples" / "assets"
    data["model"] = str(assets / "model")
    if "teacher" in data:
        data["teacher"] = {"model": str(assets / "teacher")}
    data["data"] = {"train": {"files": str(assets / "data" / "train.parquet")},
                    "validation": {"files": str(assets / "data" / "test.parquet")}}
    data["spec"]["resources"]["pools"] = pools or [
        {"name": "train", "series": "fake", "nodes": nodes, "gpus_per_node": 4}]
    if roles:
        data["spec"]["resources"]["roles"] = roles
    data["slurm"] = {"time": "00:10:00", **slurm}
    exp = tmp_path / name
    exp.mkdir()
    (exp / "config.yaml").write_text(yaml.safe_dump(data))
    for file, text in (files or {}).items():
        (exp / file).write_text(text)
    os.chmod(tmp_path, 0o755)  # the job runs as this user, but `nobody` tests read it too
    return str(exp)


def requeue_experiment(tmp_path: Path, max_requeues: int) -> str:
    """A one-node GRPO experiment with its own max_requeues."""
    return experiment(tmp_path, f"requeue{max_requeues}", max_requeues=max_requeues)


def hetjob_experiment(tmp_path: Path, name: str, **slurm) -> str:
    """A 1+1 node distillation hetjob (train on `train`, teacher on `teach`)."""
    return experiment(tmp_path, name, example="distill", pools=TRAIN_AND_TEACH, **slurm)


def dev_site(tmp_path, *, series: dict | None = None, **ray) -> str:
    """tmp_path/site.yaml: a copy of the dev site with `series` added and its `ray:` settings
    updated with **ray (tmp_path readable by the job)."""
    data = yaml.safe_load((REPO / "site" / "dev.yaml").read_text())
    data["series"].update(series or {})
    data["ray"].update(ray)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    os.chmod(tmp_path, 0o755)
    return str(path)


def shared_series_site(tmp_path, **ray) -> str:
    """A copy of the dev site with a `shared` series: 2 CPUs + 2 GPUs of the teach nodes,
    so two 2-node jobs must share dev7 and dev8; `ray:` settings updated with **ray."""
    shared = {"partition": "teach", "gpus_per_node": 4, "gpu_directive": "gres", "cpus_per_node": 2,
              "mem_per_node": "1G"}
    return dev_site(tmp_path, series={"shared": shared}, **ray)


# --- submitting -------------------------------------------------------------------------------

def submit_preflight(*args, env=None) -> dict:
    """`sf submit ARGS --preflight --wait --json`: its JSON, with rc and stderr added."""
    proc = sf("submit", *args, "--preflight", "--wait", "--json", env=env)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    out["rc"], out["stderr"] = proc.returncode, proc.stderr
    return out


def submit_driver(exp: str, driver: str, **env) -> tuple[str, Path, str]:
    """`sf submit EXP` with SF_TEST_DRIVER=driver (and env): run id, run dir, job id."""
    proc = sf("submit", exp, "--json", env={"SF_TEST_DRIVER": driver, **env})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return out["run"], Path(out["run_dir"]), out["job_id"]


RUNS = Path(os.environ["SF_RUNS_DIR"])  # the tests' own runs folder (conftest.py sets it)


def render_job(tmp_name: str, *, site: str | None = None, nodes: str | None = None, entry: str | None = None,
               extra_env: str = "") -> Path:
    """`sf render examples/grpo`, then edited as a user could: the nodes pinned (only where a
    test needs them by name: side by side, a pinned job waits until those two nodes are free,
    up to 143 s in a pass, while any two would do), the verl command replaced by
    `python3 -c entry` (in plan.json too: the job refuses a script that shows another entry),
    extra_env lines after `set -uo pipefail`."""
    out = RUNS / f"test-{tmp_name}-{os.getpid()}-{int(time.time())}"
    args = [SF, "render", "examples/grpo", "-o", str(out)] + (["--site", site] if site else [])
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    script = (out / "job.sbatch").read_text()
    if nodes:
        script = script.replace("#SBATCH --nodes=2\n", f"#SBATCH --nodes=2\n#SBATCH --nodelist={nodes}\n", 1)
    if entry:  # in plan.json, which the job runs, and in the script's SF_ENTRY, which must show the same
        start = script.index("SF_ENTRY=(\n")
        end = script.index(")\n", start)
        script = script[:start] + f"SF_ENTRY=(\n  python3 -c {shlex.quote(entry)}\n" + script[end:]
        plan = json.loads((out / "plan.json").read_text())
        (out / "plan.json").write_text(json.dumps({**plan, "entry": ["python3", "-c", entry]}, indent=2))
    if extra_env:
        script = script.replace("set -uo pipefail\n", f"set -uo pipefail\n{extra_env}\n", 1)
    (out / "job.sbatch").write_text(script)
    return out


def sbatch_file(path: Path) -> str:
    """Submit a batch script through launcher.slurm; its job id."""
    from launcher import slurm

    return slurm.sbatch(path)


# --- test drivers (SF_TEST_DRIVER) and what they leave ----------------------------------------

# Records its arguments and attempt; completes from attempt SF_TEST_FINISH_AT on, else sleeps.
REQUEUE_DRIVER = r"""
n="${SLURM_RESTART_COUNT:-0}"
printf '%s\n' "$@" > "$FORGE_CLUSTER_RUN_DIR/driver-args-$n.txt"
# a side name renamed into place: a test that sees expires-N sees it whole, and after driver-args
echo "${MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP:-}" > "$FORGE_CLUSTER_RUN_DIR/.expires-$n.part"
mv "$FORGE_CLUSTER_RUN_DIR/.expires-$n.part" "$FORGE_CLUSTER_RUN_DIR/expires-$n"
echo "test driver: attempt $n"
if [ "$n" -ge "${SF_TEST_FINISH_AT:-99}" ]; then exit 0; fi
exec sleep 600
"""

# A trainer as verl's file logger and checkpoint tracker see it: resumes from the tracker,
# logs two steps (one a second), writes driver-<restart in place>.json, then sleeps unless
# SF_TEST_FINISH_IN_PLACE says this restart in place completes.
TRAINER = r'''
import json, os, sys, time

k = int(os.environ.get("SF_RESTART_IN_PLACE") or 0)
ckpt = next(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("trainer.default_local_dir="))
os.makedirs(ckpt, exist_ok=True)
tracker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
resumed = int(open(tracker).read()) if os.path.exists(tracker) else 0
run_dir = os.environ["FORGE_CLUSTER_RUN_DIR"]
with open(os.path.join(run_dir, f"driver-{k}.json"), "w") as f:
    json.dump({"pid": os.getpid(), "resumed": resumed, "time": time.time()}, f)
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:
    for step in (resumed + 1, resumed + 2):
        time.sleep(1)
        log.write(json.dumps({"step": step, "data": {"actor/pg_loss": 0.1}}) + "\n")
        log.flush()
        with open(tracker, "w") as t:
            t.write(str(step))
if k >= int(os.environ.get("SF_TEST_FINISH_IN_PLACE", "99")):
    sys.exit(0)
time.sleep(600)
'''


def submit_trainer(exp: str, finish_in_place: int) -> tuple[str, Path, str]:
    """Submit EXP with TRAINER as its driver; it completes at restart in place `finish_in_place`."""
    Path(exp, "trainer.py").write_text(TRAINER)
    return submit_driver(exp, f'exec python3 {exp}/trainer.py "$@"', SF_TEST_FINISH_IN_PLACE=str(finish_in_place))


def steps_logged(run_dir: Path, name: str) -> list[int]:
    """The step numbers in metrics/NAME (verl's file logger records)."""
    path = run_dir / "metrics" / name
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def wait_steps(run_dir: Path, name: str, count: int, timeout: float = 60) -> None:
    wait_until(lambda: len(steps_logged(run_dir, name)) >= count, timeout,
               lambda: f"{name}: {steps_logged(run_dir, name)}, not {count} steps yet", interval=0.3)


# Joins the job's Ray cluster, starts one actor on every node (each blocked in
# `generate_sequences`, as verl's rollout workers would be), writes two step records as verl's
# file logger does, then stops itself with SIGSTOP in `freeze_in_rollout`: a driver that no
# longer makes steps (unless this attempt or restart in place should complete).
FROZEN = r'''
import json, os, signal, sys, time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

attempt = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
in_place = int(os.environ.get("SF_RESTART_IN_PLACE") or 0)


@ray.remote(num_cpus=0)
class Rollout:
    def ready(self):
        return os.environ.get("SLURMD_NODENAME", "?")

    def generate_sequences(self):
        time.sleep(3600)


def freeze_in_rollout():
    os.kill(os.getpid(), signal.SIGSTOP)


ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
actors = [Rollout.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
          for n in alive]
print("test driver: actors on", sorted(ray.get([a.ready.remote() for a in actors])), flush=True)
pending = [a.generate_sequences.remote() for a in actors]
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:
    for step in (1, 2):
        time.sleep(1)
        log.write(json.dumps({"step": step, "data": {"actor/pg_loss": 0.1, "sf_test/time": time.time()}}) + "\n")
        log.flush()
if attempt >= int(os.environ.get("SF_TEST_FINISH_AT", "99")) or in_place >= 1:
    sys.exit(0)
freeze_in_rollout()
'''


def watchdog_experiment(tmp_path: Path, name: str, nodes: int, **slurm) -> str:
    """A GRPO experiment of `nodes` nodes with FROZEN beside it as frozen.py."""
    return experiment(tmp_path, name, nodes=nodes, files={"frozen.py": FROZEN}, **slurm)


# --- sweeps --------------------------------------------------------------------------------------

# A sweep point's driver: writes its overrides into the point's run dir; fails once where
# SF_TEST_FAIL_ONCE names its rollout.n; sleeps SF_TEST_SLEEP (4) seconds, or waits until the
# file SF_TEST_UNTIL exists when that is set.
SWEEP_DRIVER = r"""
printf '%s\n' "$@" > "$FORGE_CLUSTER_RUN_DIR/driver-args.txt"
for a in "$@"; do
  case "$a" in
    actor_rollout_ref.rollout.n=*) n="${a#*=}" ;;
  esac
done
case " ${SF_TEST_FAIL_ONCE:-} " in
  *" $n "*) if [ ! -e "$FORGE_CLUSTER_RUN_DIR/failed-once" ]; then
              touch "$FORGE_CLUSTER_RUN_DIR/failed-once"; echo "test driver: failing once"; exit 1; fi ;;
esac
if [ -n "${SF_TEST_UNTIL:-}" ]; then  # until the test creates this file (at most 120 s)
  i=0; while [ ! -e "$SF_TEST_UNTIL" ] && [ "$i" -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
else
  sleep "${SF_TEST_SLEEP:-4}"
fi
echo "test driver: done (rollout.n=$n)"
"""


def sweep(*args, env=None) -> dict:
    """`sf sweep ARGS --json` with SWEEP_DRIVER: its JSON."""
    proc = sf("sweep", *args, "--json", env={"SF_TEST_DRIVER": SWEEP_DRIVER, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def poll_until_done(sweep_id: str, timeout: float, touch: bool = False) -> list:
    """Poll the sweep in-process (monitor.poll) until every point ended; assert that each
    poll is ONE sacct call and nothing else. Returns the last statuses."""
    from launcher import runs, slurm
    from launcher.monitor import poll as monitor

    root = RUNS
    run = runs.open_run(root, sweep_id)
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        slurm.CALLS.clear()
        (status,) = monitor.poll([run], runs_dir=root)
        polls += 1
        # one sacct; one squeue more only for ids slurmdbd has not recorded yet
        assert slurm.CALLS["sacct"] == 1 and slurm.CALLS["squeue"] <= 1, dict(slurm.CALLS)
        assert slurm.CALLS["total"] == 1 + slurm.CALLS["squeue"], dict(slurm.CALLS)
        if status.points and all(run_ended(p["state"]) for p in status.points):
            return status, polls
        if touch and any(p["state"] == "pending" for p in status.points):
            # hetjobs start only from the backfill scheduler; touching the partition wakes it
            for part in ("train", "teach"):
                subprocess.run(["scontrol", "update", f"PartitionName={part}", "State=UP"], check=False)
        assert time.monotonic() < deadline, f"sweep {sweep_id} not done after {timeout}s: {status.points}"
        time.sleep(2)

