"""Bring-up that survives a loaded host, on the real dev cluster (netns sfdev).

  - a worker whose `ray start` fails before Ray runs is started again (SF_TEST_FAIL_STARTS
    makes the first starts fail as a registration timeout does) and the job passes;
  - when the retries run out, the reason names the node and says submitting again is likely
    to help;
  - a head whose port slot was taken before Ray ran comes up again on another slot;
  - Ray's own logs (raylet, GCS) are kept in the run dir; the node wrapper raised `ulimit -n`;
  - CPU burners oversubscribing the host's cores 3x (bounded, stopping by themselves) while
    a plain and a hetjob preflight run: both pass (with the barrier deadline of a real site).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import RUNS, dev_site

from launcher import runs

REPO = Path(__file__).resolve().parents[2]
SF = str(Path(sys.executable).parent / "sf")


def submit(*args, env=None, timeout=400) -> dict:
    proc = subprocess.run([SF, "submit", *args, "--preflight", "--wait", "--json"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    out["rc"], out["stderr"] = proc.returncode, proc.stderr
    return out


def events(run: str, phase: str) -> list[dict]:
    return [e for e in runs.read_phases(RUNS / run) if e["phase"] == phase]


def test_a_failed_worker_start_is_retried_and_the_job_passes():
    out = submit("examples/grpo", env={"SF_TEST_FAIL_STARTS": "1"})
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    retries = events(out["run"], "node_retry")
    assert len(retries) == 1 and "Deadline Exceeded" in retries[0]["error"]
    worker = retries[0]["node"]
    started = [e for e in events(out["run"], "node_started") if e["node"] == worker]
    assert [e["attempt"] for e in started] == [0, 1]
    assert out["preflight"]["ok"] and out["preflight"]["ray_nodes"] == 2
    # Ray's own logs outlive the node-local temp dir; ulimit -n was raised to the hard limit
    kept = list((RUNS / out["run"] / "logs" / "ray").glob("*/raylet.out"))
    assert len(kept) == 2, kept
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = {e["nofile"] for e in events(out["run"], "node_started")}
    assert nofile == {hard if hard != resource.RLIM_INFINITY else max(nofile)}


def test_retries_run_out_the_reason_says_retrying_helps():
    out = submit("examples/grpo", env={"SF_TEST_FAIL_STARTS": "5"})
    assert out["rc"] != 0
    reason = (RUNS / out["run"] / "reason").read_text()
    (exit_event,) = [e for e in events(out["run"], "node_exit") if e.get("retry_helps")]
    assert f"Ray node {exit_event['node']}" in reason and "submitting again is likely to help" in reason, reason
    assert len(events(out["run"], "node_retry")) == 2  # ray.start_retries (site default 2)


def test_a_head_whose_slot_was_taken_comes_up_again_on_another_slot():
    """SF_TEST_TAKE_HEAD_SLOT: the first head finds its GCS port listened on after the
    supervisor checked the slot (as when another user's head drew the same slot of the node
    and started first). The head ends naming the holder; the supervisor stops Ray, draws
    another slot and brings Ray up again, and the preflight passes."""
    out = submit("examples/grpo", env={"SF_TEST_TAKE_HEAD_SLOT": "1"})
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    (redrawn,) = events(out["run"], "head_slot_redrawn")
    assert redrawn["number"] == 1  # (the new slot is drawn at random: it may be the freed one)
    taken_port = redrawn["taken"].rpartition(":")[2]
    (collision,) = [e for e in events(out["run"], "node_exit") if e.get("port_collision")]
    assert f"port {taken_port} taken, listened on by python" in collision["error"], collision
    assert "Slurm job " in collision["error"]  # the squatter is a process of this job's step: named by its job
    heads = [e for e in events(out["run"], "node_started") if e["role"] == "head"]
    assert len(heads) == 1 and heads[0]["gcs_port"] == int(redrawn["head"].rpartition(":")[2])
    assert out["preflight"]["ok"] and out["preflight"]["ray_nodes"] == 2


def usable_cores() -> float:
    """The CPUs this process may use: its affinity, capped by a cgroup CPU quota (v2 cpu.max,
    v1 cfs_quota_us). os.cpu_count() counts the host's cores, and in a container with a quota
    3x that many burners oversubscribe the quota far more than 3x."""
    cores = float(len(os.sched_getaffinity(0)))
    quotas = [("/sys/fs/cgroup/cpu.max", None),
              ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")]
    for quota_file, period_file in quotas:
        try:
            fields = Path(quota_file).read_text().split()
            quota, period = fields[0], (fields[1] if period_file is None else Path(period_file).read_text().strip())
        except (OSError, IndexError):
            continue
        if quota not in ("max", "-1"):
            cores = min(cores, int(quota) / int(period))
    return max(cores, 1.0)


def bringup_story(run: str) -> str:
    """What a failed bring-up did: its phases with seconds from allocation, and the last lines
    of the logs of the nodes the barrier still missed (for a CI failure that cannot be rerun)."""
    phases = runs.read_phases(RUNS / run)
    t0 = phases[0]["time"] if phases else 0
    lines = [f"{e['time'] - t0:7.1f}s {e['phase']} {e.get('node', '')} "
             f"{ {k: e[k] for k in ('missing', 'attempt', 'error', 'turn_wait_s', 'reason') if k in e} }"
             for e in phases]
    missing = next((e["missing"] for e in reversed(phases) if e["phase"] == "barrier_waiting"), [])
    for log in sorted((RUNS / run / "logs").glob("*.log")):
        if any(node in log.name for node in missing):
            lines += [f"--- {log.name}"] + log.read_text(errors="replace").splitlines()[-15:]
    return "\n".join(lines)


# It keeps every core busy on purpose: beside other tests it would starve them too, so
# scripts/test runs it alone (-m serial). One job of each shape (two pools in one job, one
# pool), both at once: five in a row took 281 s of CI's time and found nothing two did not
# (the suite's 4-worker pass loads the host as much, for every test). What it checks is that load alone
# fails nothing (Ray's own 30 s windows are retried, turns spread the starts); the barrier's
# deadline is the site's choice, so the jobs get 300 s (example-site.yaml's value) and not the
# dev site's 120 s, which a CI host's stolen time once used up (stop 38: a worker never joined).
@pytest.mark.serial
def test_preflights_pass_on_a_host_oversubscribed_3x(tmp_path):
    site = dev_site(tmp_path, barrier_timeout_s=300)
    burn = "import time\nend = time.time() + 400\nwhile time.time() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(round(3 * usable_cores()))]
    try:
        time.sleep(1)
        # both at once: the load is no smaller, and the serial pass waits for one job, not two
        examples = ("examples/distill", "examples/grpo")
        with ThreadPoolExecutor(len(examples)) as pool:
            outs = list(pool.map(lambda example: submit(example, "--site", site, timeout=400), examples))
        results = [(example, out["rc"], out.get("reason"), out["run"])
                   for example, out in zip(examples, outs, strict=True)]
    finally:
        for proc in burners:
            proc.kill()
    for example, rc, reason, run in results:
        barrier = events(run, "all_joined")
        print(f"\n{example}: rc {rc} {reason or ''} barrier {barrier[0]['barrier_s'] if barrier else '-'} s")
    failed = [f"{example}: {reason}\n{bringup_story(run)}" for example, rc, reason, run in results if rc != 0]
    assert not failed, "\n".join(failed)


def test_the_reason_carries_the_first_failing_line():
    """A failed preflight names its first failing check, a failed driver its last error line,
    in the reason that `sf status` prints (not just "exited with 1")."""
    # one node is enough for what the reason says (each node would start Ray for nothing)
    out = submit("examples/grpo", "--profile", "fake:1x4", "--validation-data", "/var/lib/sfdev/no-such-val.parquet")
    assert out["rc"] != 0
    reason = (RUNS / out["run"] / "reason").read_text()
    assert "preflight exited with 1 during phase driver: paths" in reason and "no-such-val.parquet" in reason, reason
    status = subprocess.run([SF, "status", out["run"]], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "no-such-val.parquet" in status.stdout, status.stdout
    driver = "echo 'Traceback (most recent call last):'; echo 'ValueError: reward function returned None'; exit 1"
    proc = subprocess.run([SF, "submit", "examples/grpo", "--profile", "fake:1x4", "--wait", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "SF_TEST_DRIVER": driver})
    run = json.loads(proc.stdout[proc.stdout.index("{"):])["run"]
    reason = (RUNS / run / "reason").read_text()
    assert "exited with 1 during phase driver: ValueError: reward function returned None" in reason, reason


# a batch verl accepts on 400 GPUs (train_batch_size * rollout_n divisible by them), so that
# the partition's size is the one thing wrong
BATCH_400 = ("--set", "train_batch_size=320")


def test_a_request_the_partition_can_never_give_is_refused_with_its_real_size(tmp_path):
    for args in (["submit", "examples/grpo", "--profile", "fake:100x4", *BATCH_400],
                 ["validate", "examples/grpo", "--profile", "fake:100x4", *BATCH_400, "--live"]):
        proc = subprocess.run([SF, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "100 nodes x 4 GPUs can never run in partition train: it has 10 nodes" in proc.stderr, proc.stderr
    # nothing written: a runs folder of its own (the shared one fills with other tests' runs meanwhile)
    own_runs = tmp_path / "runs"
    own_runs.mkdir(mode=0o700)
    proc = subprocess.run([SF, "submit", "examples/grpo", "--profile", "fake:100x4", *BATCH_400], capture_output=True,
                          text=True, cwd=REPO, timeout=120, env={**os.environ, "SF_RUNS_DIR": str(own_runs)})
    assert proc.returncode == 2 and "can never run in partition train" in proc.stderr, proc.stderr
    assert list(own_runs.iterdir()) == []


def test_site_health_check_always_runs_before_the_driver(tmp_path):
    site = dev_site(tmp_path, health_check="always")
    proc = subprocess.run([SF, "submit", "examples/grpo", "--site", site, "--wait", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "SF_TEST_DRIVER": "exit 0"})
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout[proc.stdout.index("{"):])["run"]
    names = [e["phase"] for e in runs.read_phases(RUNS / run)]
    assert names.index("all_joined") < names.index("health_checked") < names.index("driver_started")
    (checked,) = events(run, "health_checked")
    assert checked["pairs"] == 2 and checked["median_mib_per_s"] > 0


def run_with_bad_node(example: str, *args: str) -> tuple[dict, str]:
    """A real job (test driver) with --exclude-bad-nodes whose last node fails the health
    check in attempt 0 (SF_TEST_HEALTH_FAIL_ON_RESTART): requeued without it. Three nodes at
    least: with two, every transfer involves both and neither can be told apart."""
    proc = subprocess.run([SF, "submit", example, *args, "--exclude-bad-nodes", "--wait", "--json"],
                          capture_output=True,
                          text=True, timeout=400, cwd=REPO,
                          env={**os.environ, "SF_TEST_DRIVER": "exit 0", "SF_TEST_HEALTH_FAIL_ON_RESTART": "0"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    (requeued,) = [e for e in events(out["run"], "requeued") if e.get("cause") == "bad nodes"]
    (bad,) = requeued["excluded"]
    assert "suspect nodes: " + bad in requeued["reason"]
    return out, bad


def joined_nodes(run: str) -> list[set[str]]:
    return [{h for hosts in e["pools"].values() for h in hosts} for e in events(run, "all_joined")]


def test_exclude_bad_nodes_requeues_without_the_node_that_failed_the_health_check():
    # 3 x 4 GPUs: a batch verl accepts on 12 (train_batch_size * rollout_n divisible by 12)
    out, bad = run_with_bad_node("examples/grpo", "--profile", "fake:3x4", "--set", "train_batch_size=1200")
    first, second = joined_nodes(out["run"])
    assert bad in first and bad not in second and len(second) == 3
    assert [e["phase"] for e in runs.read_phases(RUNS / out["run"])].count("health_checked") == 1
    job = out["job_id"]
    shown = subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True, text=True).stdout
    assert f"ExcNodeList={bad}" in shown and "JobState=COMPLETED" in shown and "Restarts=1" in shown


def test_exclude_bad_nodes_in_a_hetjob_excludes_the_node_from_its_own_het_group():
    out, bad = run_with_bad_node("examples/distill")
    first, second = joined_nodes(out["run"])
    assert bad in first and bad not in second
    shown = subprocess.run(["scontrol", "show", "job", "-o", str(out["job_id"])], capture_output=True,
                           text=True).stdout.splitlines()
    # the node is the job's last (sorted); its component excludes it, the other does not
    mine = [line for line in shown if f"ExcNodeList={bad}" in line]
    assert len(mine) == 1 and len(shown) == 2, shown


def test_exclude_bad_nodes_does_not_exclude_every_node_of_a_two_node_job():
    proc = subprocess.run([SF, "submit", "examples/grpo", "--exclude-bad-nodes", "--wait", "--json"],
                          capture_output=True, text=True, timeout=400, cwd=REPO,
                          env={**os.environ, "SF_TEST_DRIVER": "exit 0", "SF_TEST_HEALTH_FAIL_ON_RESTART": "0"})
    assert proc.returncode != 0
    run = json.loads(proc.stdout[proc.stdout.index("{"):])["run"]
    reason = (RUNS / run / "reason").read_text()
    assert "every node of the job is suspect" in reason and "RuntimeError" in reason
    assert not [e for e in events(run, "requeued")]
