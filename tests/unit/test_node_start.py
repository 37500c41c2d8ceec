"""A starting Ray node whose raylet aborted is a failed try at once (launcher/injob/node.py
raylet_fatal, wait_for_start): `ray start` would otherwise wait out raylet_start_wait_time_s
for a raylet that is gone, and the start retry would come after the barrier gave up."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from launcher.injob import node

# raylet.out of a head that 16 simultaneous Ray starts on the 2-core dev host starved
SEEN = ("[2026-12-01 20:29:11,258 I 10683 10856] (raylet) agent_manager.cc:81: Monitor agent process with name "
        "runtime_env_agent\n"
        "[2026-12-01 20:29:27,181 C 10683 10683] (raylet) node_manager.cc:3588:  An unexpected system state has "
        "occurred. Check failed: statussetor3588.has_value() Timed out waiting for file /tmp/sf1/r/session_x/"
        "dashboard_agent_listen_port_be36\n*** StackTrace Information ***\n")


def logs(tmp_path: Path, text: str) -> str:
    d = tmp_path / "session_latest" / "logs"
    d.mkdir(parents=True)
    (d / "raylet.out").write_text(text)
    return str(tmp_path)


def test_the_raylets_fatal_line_is_found_and_named(tmp_path):
    fatal = node.raylet_fatal(logs(tmp_path, SEEN))
    assert fatal.startswith("raylet aborted: node_manager.cc:3588: Check failed: statussetor3588.has_value() Timed out")
    assert "dashboard_agent_listen_port" in fatal


def test_info_lines_and_no_logs_are_not_fatal(tmp_path):
    assert node.raylet_fatal(str(tmp_path)) is None
    assert node.raylet_fatal(logs(tmp_path, SEEN.splitlines(keepends=True)[0])) is None


class NotStarted:
    started = False


def test_a_start_whose_raylet_aborted_ends_at_once(tmp_path):
    temp = logs(tmp_path, SEEN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    t0 = time.monotonic()
    rc, fatal = node.wait_for_start(child, NotStarted(), temp)
    assert rc == 1 and fatal.startswith("raylet aborted") and time.monotonic() - t0 < 5
    assert child.poll() is not None  # the whole `ray start` group is gone


def test_a_start_that_ends_by_itself_keeps_its_exit_code(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert node.wait_for_start(child, NotStarted(), str(tmp_path)) == (3, None)


def test_ray_start_refusing_its_arguments_is_not_load():
    """The line Ray 2.60 printed for a --ray-client-server-port of 0 (seen on the dev cluster):
    the same on every try, so the node neither retries nor says submitting again helps."""
    seen = ('File ".../ray/_private/parameter.py", line 409, in _check_usage |     raise ValueError( | '
            "ValueError: ray_client_server_port must be an integer between 1024 and 65535.")
    assert node.arguments_refused(seen)
    assert node.arguments_refused("Usage: ray start [OPTIONS] | Error: No such option: --no-such-flag")
    assert node.arguments_refused("Error: Invalid value for '--num-cpus': 'x' is not a valid integer.")
    assert not node.arguments_refused("Timed out waiting for file /tmp/x/dashboard_agent_listen_port")
    assert not node.arguments_refused("ConnectionError: GCS at 127.0.0.11:20000 did not answer")


def test_a_failed_tries_processes_are_gone_when_kill_group_returns():
    """kill_group waits until `ray start`'s group no longer runs: a retry must not meet its
    own killed processes on its ports."""
    child = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & echo up; wait"], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    assert child.stdout.readline().strip() == "up"  # both children run
    assert node.group_running(child.pid)
    t0 = time.monotonic()
    assert node.kill_group(child) is True
    assert not node.group_running(child.pid) and child.returncode is not None
    assert time.monotonic() - t0 < 5
    child.stdout.close()


def test_zombies_and_other_groups_do_not_count_as_running(tmp_path):
    def proc(pid, stat):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat)

    proc(10, "10 (ray::Dash (a) b) Z 1 77 77 0 -1")  # a zombie whose name holds ") "
    proc(11, "11 (raylet) S 1 78 78 0 -1")            # another group
    (tmp_path / "self").mkdir()
    assert not node.group_running(77, str(tmp_path))
    proc(12, "12 (gcs_server) R 1 77 77 0 -1")
    assert node.group_running(77, str(tmp_path))
