"""The port slot of one Ray node on its host: whether every port Ray will open is free
(a bind check), which slot a node takes (a worker: the first slot of the range no other node
of this user holds and no other process uses; a head: the slot the supervisor chose), and the
reason, naming the ports and who holds them, when none is free."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from launcher.injob import ports as ports_mod
from launcher.injob import private

HEAD_PORTS_WAIT_S = 15.0  # a retrying head waits this long for its slot's ports to free
HEAD_PORTS_POLL_S = 0.5


def port_free(host: str, port: int) -> bool:
    """Whether a listener could bind host:port. SO_REUSEADDR as Ray's gRPC servers set it: a
    port whose last connections are in TIME_WAIT (the head's own earlier try) counts as free,
    a port something listens on (on this address or on 0.0.0.0) does not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def busy_ports(address: str, ports, *, head: bool) -> list[int]:
    """The ports of a node slot that something on this host already holds: every port Ray
    will open (its fixed ones, the head's too when `head`) and the whole worker range, so a
    port another user squats anywhere in the slot skips the slot before Ray starts instead of
    failing a worker after it ran."""
    fixed = [ports.node_manager, ports.object_manager, ports.dashboard_agent_grpc,
             ports.dashboard_agent_listen, ports.metrics_export, ports.runtime_env_agent]
    if head:
        fixed += [ports.gcs, ports.client_server, ports.dashboard, ports.rdzv, ports.dashboard_metrics,
                  ports.autoscaler_metrics]
    wanted = fixed + list(range(ports.min_worker, ports.max_worker + 1))
    return [p for p in wanted if not port_free(address, p)]


def ports_taken_text(address: str, port_range, busy: list[int]) -> str:
    """The reason when no slot of the range is free on a host: the ports seen taken, the fix."""
    return (f"port collision: no port slot of ray.port_range {port_range[0]}-{port_range[1]} is free on {address} "
            f"(every slot tried; {ports_mod.range_holders_text(port_range)}; last slot tried: {taken_text(busy)}); "
            "widen or move ray.port_range in the site file, ask the users named to free their ports, "
            "or exclude the node")


def taken_text(busy: list[int]) -> str:
    """"port 20001, 20005 taken, port 20001 listened on by gcs_server (pid 4242, ...)": the
    ports seen taken and who holds the first (ports.holder_text)."""
    if not busy:
        return "no port seen taken"
    shown = ", ".join(str(p) for p in busy[:8]) + (f" and {len(busy) - 8} more" if len(busy) > 8 else "")
    first = f"port {busy[0]} " if len(busy) > 1 else ""
    return f"port {shown} taken, {first}{ports_mod.holder_text(busy[0])}"


def pick_ports(*, role, slot, port_range, first_block, head_slot, locks, address, wait_s: float = 0.0):
    """(ports, reservation, None) for a free, reserved (block, slot) of this node, or (None, None,
    why not); a head's reservation is None (the supervisor holds its slot). `wait_s`: how long
    a head's slot may stay busy before that is a collision (a retry's)."""
    if role == "head":
        # The supervisor (on this host) chose and holds the head's slot for the whole job.
        ports = ports_mod.block_ports(first_block, head_slot, port_range)
        busy = busy_ports(address, ports, head=True)
        until = time.monotonic() + wait_s
        while busy and time.monotonic() < until:
            # A retry's head waits for its slot: the failed try's Ray processes, killed, may
            # still hold its ports for a moment (on a loaded host the retry then read them as
            # another program's and failed the job: a port collision with itself).
            time.sleep(HEAD_PORTS_POLL_S)
            busy = busy_ports(address, ports, head=True)
        if busy:
            # Another user's head that drew the same slot and started between the supervisor's
            # check and this one (users' port locks are their own), or another program.
            return None, None, (f"port collision: the head's slot on {address} was taken after the supervisor "
                                f"checked it ({taken_text(busy)}); submit again, or move ray.port_range in the "
                                "site file")
        return ports, None, None
    # A worker's ports only have to be free on its own host: it takes the first slot there that
    # no other job of this user holds (the lock) and no other program uses (the bind check).
    # Slots past SLOTS_PER_JOB start one block further on.
    busy = []
    for block, pslot in ports_mod.candidate_slots(ports_mod.slot_first_block(first_block, slot), slot, port_range):
        reservation = private.reserve(locks, block, pslot)
        if reservation is None:
            continue  # another node of this user is starting or running on this slot here
        ports = ports_mod.block_ports(block, pslot, port_range)
        busy = busy_ports(address, ports, head=False)
        if not busy:
            return ports, reservation, None
        reservation.release()
    return None, None, ports_taken_text(address, port_range, busy)


def take_head_slot_once(run_dir: str, ports) -> None:
    """Test hook SF_TEST_TAKE_HEAD_SLOT: the first head of the run finds its GCS port listened on,
    as when another user's head drew the same slot and started first. The listener is a child
    of this step: it goes when the head's step ends."""
    try:  # the first head of the run only: the marker made once, 0600, never through a link
        os.close(os.open(Path(run_dir) / ".sf-test-head-slot-taken",
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        return
    squatter = subprocess.Popen([sys.executable, "-c", "import socket, sys, time\n"
                                 "s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
                                 "print('held', flush=True); time.sleep(120)", str(ports.gcs)],
                                stdout=subprocess.PIPE, text=True)
    squatter.stdout.readline()
