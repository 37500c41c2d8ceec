"""Another user (`nobody`) squatting the Ray port range of a host on the real dev cluster
(issue 44.4): one socket in each 128-port slot of the range used to block every sf job on the
host. Each test gives its jobs a site whose range is a 1024-port block of its own (RANGE,
FULL_RANGE: below the kernel's ephemeral range, away from the dev site's range that the tests
beside it use and from slurmd's ports 17001-17064; apart from each other, since pytest-xdist may
run the two tests at once and each squatter must hold its whole list):

  - nobody holds every port the old slot layout gave a node's fixed ports (the first 16 of
    each of the range's 8 slots) and a worker port of each slot: a 2-node preflight still
    starts and completes, each node on a span of free ports inside the range;
  - nobody holds every port of the range: the job fails at once, its reason naming the range
    as exhausted, the user that holds it and the fix.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    NOBODY,
    NOBODY_PY,
    RUNS,
    dev_site,
    nobody_argv,
    phases,
    requeue_experiment,
    sf,
    submit_preflight,
    wait_terminal,
)

RANGE = (18000, 19023)
FULL_RANGE = (15000, 16023)
OLD_SLOT, OLD_FIXED = 128, 16  # the old layout: 8 slots of 128 ports, 16 fixed ports first

SQUATTER = r"""
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the ports and a few files
held = []
for port in map(int, sys.argv[1:]):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port of an earlier job in TIME_WAIT too
    try:
        s.bind(("0.0.0.0", port))
        s.listen()
        held.append(s)
    except OSError:
        s.close()
print(len(held), flush=True)
sys.stdin.read()
"""


def squat(ports: list[int]) -> tuple[list[subprocess.Popen], int]:
    """nobody listening on `ports` on every address, until the test ends it: (its processes,
    how many ports they hold). 900 a process: the dev cluster's hard limit of open files is 1024."""
    procs = [subprocess.Popen(nobody_argv(NOBODY_PY, "-c", SQUATTER, *map(str, ports[i:i + 900])),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
             for i in range(0, len(ports), 900)]
    return procs, sum(int(proc.stdout.readline()) for proc in procs)


def end(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def reason_of(run_dir: Path) -> str:
    return (run_dir / "reason").read_text() if (run_dir / "reason").exists() else "(no reason)"


def test_a_socket_in_every_old_slot_of_the_range_blocks_no_job(tmp_path):
    old = [RANGE[0] + s * OLD_SLOT + k for s in range(8) for k in [*range(OLD_FIXED), 100]]
    squatter, held = squat(old)
    try:
        assert held == len(old), held
        site = dev_site(tmp_path, port_range=list(RANGE))
        out = submit_preflight("examples/grpo", "--site", site)
        run_dir = RUNS / out["run"]
        assert out["rc"] == 0 and out["preflight"]["ok"], out["stderr"] + reason_of(run_dir)
        started = [e for e in phases(run_dir) if e["phase"] == "node_started"]
        assert {e["role"] for e in started} == {"head", "worker"}, started
        for e in started:
            span = set(range(e["port_base"], e["port_last"] + 1))
            assert RANGE[0] <= e["port_base"] and e["port_last"] <= RANGE[1] and not span & set(old), e
        print(f"\nnobody held {held} ports (every old slot's fixed ports and a worker port): the preflight "
              f"completed on spans {sorted((e['node'], e['port_base']) for e in started)}")
    finally:
        end(squatter)


def test_a_range_another_user_holds_whole_is_refused_naming_the_range_and_the_holder(tmp_path):
    squatter, held = squat(list(range(FULL_RANGE[0], FULL_RANGE[1] + 1)))
    try:
        assert held == FULL_RANGE[1] - FULL_RANGE[0] + 1, held
        site = dev_site(tmp_path, port_range=list(FULL_RANGE))
        t0 = time.monotonic()
        proc = sf("submit", requeue_experiment(tmp_path, max_requeues=0), "--site", site, "--json",
                  env={"SF_TEST_DRIVER": "exit 0"})
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
        run_dir = Path(out["run_dir"])
        assert wait_terminal(out["job_id"], timeout=120) == "FAILED", reason_of(run_dir)
        reason = reason_of(run_dir)
        assert f"ray.port_range {FULL_RANGE[0]}-{FULL_RANGE[1]} is exhausted" in reason, reason
        assert f"user nobody (uid {NOBODY.pw_uid}) on {held} ports" in reason, reason
        # who holds a port: the job's user (root here) may read the squatter's /proc entries
        assert f"(pid {squatter[0].pid}, user nobody)" in reason, reason
        assert "widen or move ray.port_range" in reason and "RuntimeError" not in reason, reason
        print(f"\nnobody held all {held} ports of the range: FAILED in {time.monotonic() - t0:.1f}s: {reason.strip()}")
    finally:
        end(squatter)
