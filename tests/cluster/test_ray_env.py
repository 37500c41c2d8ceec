"""What a job's Ray processes really run with (issue 22, item 6), read from /proc on the dev
cluster while the job runs:

  - a `~/.ray/auth_token` in the job's HOME (a wrong token) and a RAY_AUTH_TOKEN exported in
    the submit environment change nothing: the job runs and completes, its driver's Ray task
    included; the raylet and GCS read the job's own token file (RAY_AUTH_TOKEN_PATH), with
    RAY_AUTH_MODE=token and no RAY_AUTH_TOKEN (Ray reads that one first);
  - the GCS/RPC tuning of launcher/injob/ray_tuning.py for the job's size is in the raylet's
    and the GCS's environment, and their open-files limit is raised to the hard limit.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import last_node_starts, render_job, sbatch_file, wait_event, wait_terminal  # noqa: E402

from launcher.injob import auth, ray_tuning  # noqa: E402

WRONG = "wrong-token-planted-in-home-0123456789abcdef"


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def ray_processes(ray_start_pid: int) -> dict[str, int]:
    """{comm: pid} of what `ray start` started (raylet, gcs_server, ...)."""
    found, todo = {}, [ray_start_pid]
    while todo:
        for child in children(todo.pop()):
            try:
                found.setdefault(Path(f"/proc/{child}/comm").read_text().strip(), child)
            except OSError:
                continue
            todo.append(child)
    return found


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def open_files_limit(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError(f"no open-files line in /proc/{pid}/limits")


def test_a_token_in_home_and_in_the_environment_cannot_change_the_jobs_ray(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(WRONG + "\n")
    checked = tmp_path / "checked"  # the driver keeps Ray up until the test has looked at it
    driver = ("import os, ray, time; ray.init(); assert ray.get(ray.remote(lambda: 7).remote()) == 7; "
              "print('SF_TEST driver task ran', flush=True); "
              f"[time.sleep(0.2) for _ in iter(lambda: os.path.exists('{checked}'), True)]")
    run_dir = render_job("rayenv", entry=driver,
                         extra_env=f"export HOME={home}\nexport RAY_AUTH_TOKEN={WRONG}")
    job = sbatch_file(run_dir / "job.sbatch")
    try:
        wait_event(run_dir, "driver_started", timeout=120)
        token = str(auth.token_path(str(run_dir), job))
        tuned = ray_tuning.ray_env_for(2, os.cpu_count() or 1)
        for event in last_node_starts(run_dir):
            procs = ray_processes(event["pid"])
            wanted = ["raylet"] + (["gcs_server"] if event["role"] == "head" else [])
            assert set(wanted) <= set(procs), (event["node"], procs)
            for name in wanted:
                env = environ(procs[name])
                assert env.get("HOME") == str(home)  # the planted file is where Ray would look
                assert "RAY_AUTH_TOKEN" not in env, (event["node"], name)
                assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == token
                for key, value in tuned.items():
                    assert env.get(key) == value, (event["node"], name, key)
                soft, hard = open_files_limit(procs[name])
                assert soft == hard, (event["node"], name, soft, hard)
        checked.touch()
        # the driver's ray.init and task ran with the job's token: a wrong one anywhere would have failed it
        assert wait_terminal(job, timeout=120) == "COMPLETED"
    finally:
        subprocess.run(["scancel", job], capture_output=True)
