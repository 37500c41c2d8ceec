"""Ray token authentication and GPU identity on the real dev cluster (netns sfdev).

  - every sf Ray cluster runs with a per-job token: the driver (which has it) reaches the
    GCS and runs a task; a client without it, or with a wrong one, is refused; the token
    file is readable by the job's user only (another user cannot read it) and is gone after;
  - a completed job's node steps end by themselves: no "CANCELLED" or "Killed" in its logs;
  - GPU identity: with an nvidia-smi that reports the same UUIDs on every node (two Slurm
    nodes on one host, the trap seen on the H200 pair), the job fails at the barrier naming
    the nodes; with per-node UUIDs the preflight passes and lists them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import RUNS

from launcher import runs

REPO = Path(__file__).resolve().parents[2]
SF = str(Path(sys.executable).parent / "sf")

PROBE = r"""
import json, os, subprocess, sys
from ray._raylet import GcsClient
addr = os.environ["RAY_ADDRESS"]
out = {"token_path": os.environ.get("RAY_AUTH_TOKEN_PATH"), "mode": os.environ.get("RAY_AUTH_MODE")}
st = os.stat(out["token_path"]); out["file_mode"] = oct(st.st_mode & 0o777)
out["dir_mode"] = oct(os.stat(os.path.dirname(out["token_path"])).st_mode & 0o777)
import ray
ray.init(address=addr, logging_level="ERROR", log_to_driver=False)
out["task"] = ray.get(ray.remote(lambda: "ran").remote(), timeout=60)
ray.shutdown()
probe = ("from ray._raylet import GcsClient\n"
         "try:\n GcsClient(address=%r).get_all_node_info(timeout=5); print('OPEN')\n"
         "except Exception as e: print('REFUSED', type(e).__name__)" % addr)
bad = os.path.join(os.path.dirname(os.environ["FORGE_CLUSTER_RUN_DIR"]), "wrong-token-" + os.environ["SLURM_JOB_ID"])
open(bad, "w").write("0" * 64)
for name, env in (("no_token", {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}),
                  ("wrong_token", {**os.environ, "RAY_AUTH_TOKEN_PATH": bad})):
    p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    out[name] = (p.stdout.strip().splitlines() or ["?"])[-1]
os.unlink(bad)
p = subprocess.run(["runuser", "-u", "nobody", "--", "cat", out["token_path"]], capture_output=True, text=True)
out["other_user_read_rc"] = p.returncode
json.dump(out, open(os.path.join(os.environ["FORGE_CLUSTER_RUN_DIR"], "auth-probe.json"), "w"))
"""


def sf(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([SF, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})


def submit(*args, env=None) -> dict:
    proc = sf("submit", *args, "--wait", "--json", env=env)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    out["rc"], out["stderr"] = proc.returncode, proc.stderr
    return out


def test_every_ray_cluster_needs_the_jobs_token(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    os.chmod(tmp_path, 0o755)
    probe.chmod(0o644)
    runtime_python = "/var/lib/sfdev/runtimes/verl-0.9.1/bin/python"
    out = submit("examples/grpo", env={"SF_TEST_DRIVER": f"exec {runtime_python} {probe}"})
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    run_dir = RUNS / out["run"]
    result = json.loads((run_dir / "auth-probe.json").read_text())
    assert result["mode"] == "token" and result["task"] == "ran"
    assert result["no_token"] == "REFUSED AuthenticationError"
    assert result["wrong_token"] == "REFUSED AuthenticationError"
    assert result["file_mode"] == "0o600" and result["dir_mode"] == "0o700"
    assert result["other_user_read_rc"] != 0  # user nobody cannot read it
    assert not Path(result["token_path"]).exists()  # removed when the job ended
    # the job completed and its node steps stopped by themselves: no Slurm cancel noise
    logs = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("*") if p.is_file())
    assert "CANCELLED" not in logs and "Killed" not in logs, logs[-2000:]
    stopped = [e for e in runs.read_phases(run_dir) if e["phase"] == "node_stopped"]
    # Ray was stopped by its wrapper (SIGTERM), not killed by the SIGUSR2 srun hands every process
    assert len(stopped) == 2 and all(e["ray_exit"] is not None and e["ray_exit"] >= 0 for e in stopped)
    assert all("rc" not in e for e in stopped)  # `sf submit --wait` printed Ray's 1 as the node's rc


def fake_smi(folder: Path, per_node: bool) -> dict:
    folder.mkdir()
    uuid = "GPU-$SLURMD_NODENAME-$i" if per_node else "GPU-shared-$i"
    script = folder / "nvidia-smi"
    script.write_text(f'#!/bin/sh\nfor i in 0 1 2 3; do echo "$i, {uuid}"; done\n')
    script.chmod(0o755)
    os.chmod(folder.parent, 0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def test_two_nodes_that_share_a_gpu_fail_the_barrier_by_name(tmp_path):
    out = submit("examples/grpo", "--preflight", env=fake_smi(tmp_path / "shared", per_node=False))
    assert out["rc"] != 0
    reason = (RUNS / out["run"] / "reason").read_text()
    assert "GPU check failed during phase barrier" in reason and "GPU-shared-0 is seen by nodes" in reason
    record = json.loads((RUNS / out["run"] / "record.json").read_text())
    nodes = sorted({e["node"] for e in runs.read_phases(RUNS / out["run"]) if e["phase"] == "node_started"})
    # both nodes named, whichever two Slurm gave (sf lists them in the job's order: dev9, dev10)
    named = reason.split("is seen by nodes ", 1)[1].split(":", 1)[0].split(", ")
    assert len(nodes) == 2 and sorted(named) == nodes, (reason, record)


def test_distinct_gpus_pass_and_the_report_lists_them(tmp_path):
    out = submit("examples/grpo", "--preflight", env=fake_smi(tmp_path / "own", per_node=True))
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    ids = out["preflight"]["gpu_ids"]
    assert len(ids) == 2 and all(v == [f"GPU-{n}-{i}" for i in range(4)] for n, v in ids.items())


def test_a_token_in_home_does_not_change_the_jobs_cluster(tmp_path):
    """Ray 2.59+ turns token auth on for `ray start --head` whenever ~/.ray/auth_token exists
    (a shared HOME), while workers started with --address do not: sf hands every node the
    same explicit RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH, so a stray token in HOME changes
    nothing: the 2-node preflight joins and passes, with the job's own token."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("f" * 64)
    os.chmod(tmp_path, 0o755)
    out = submit("examples/grpo", "--preflight", env={"HOME": str(home)})
    assert out["rc"] == 0, out["stderr"] + str(out.get("reason"))
    assert out["preflight"]["ray_nodes"] == 2
    started = [e for e in runs.read_phases(RUNS / out["run"]) if e["phase"] == "node_started"]
    # two nodes (a `ray start` that failed before Ray ran is started again: a second event)
    assert len({e["node"] for e in started}) == 2 and (home / ".ray" / "auth_token").read_text() == "f" * 64
