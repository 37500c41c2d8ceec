"""The ports of one Ray node on its host: whether a port is free (a bind check), which span
of the range a node takes (ports.free_spans: a span no other node of this user holds, a lock
per port, and no other process uses; the head's span found and held by the supervisor), and
the reason, naming the range, its holders and what to do, when none is free."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from launcher.injob import ports as ports_mod
from launcher.injob import private

HEAD_PORTS_WAIT_S = 15.0  # a retrying head waits this long for its span's ports to free
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


def busy_ports(address: str, ports) -> list[int]:
    """The fixed ports of a node that something on this host already holds (Ray's worker
    processes take the kernel's ports: there is no worker range to check)."""
    return [p for p in ports.fixed() if not port_free(address, p)]


class SpanReservation:
    """The locks on every port of a node's span, held together (the Reservation interface:
    held, release)."""

    def __init__(self, held: list):
        self._held = held

    @property
    def held(self) -> bool:
        return bool(self._held) and all(r.held for r in self._held)

    def release(self) -> None:
        for reservation in self._held:
            reservation.release()
        self._held = []


def find_span(address: str, port_range, start: int, locks: str | None):
    """(ports, reservation, None) for the first free span from `start` over the whole range,
    its every port locked for this user; (None, None, why) when the range holds none."""
    locked: dict[int, private.Reservation] = {}
    taken: set[int] = set()

    def busy(port: int) -> bool:
        if port in locked:
            return False
        if port in taken or not port_free(address, port):
            taken.add(port)
            return True
        reservation = private.reserve(locks, port)  # this user's lock on the port (port<N>)
        if reservation is None:  # another node of this user, starting or running here
            taken.add(port)
            return True
        locked[port] = reservation
        return False

    base = next(ports_mod.free_spans(start, port_range, busy), None)
    span = set(range(base, base + ports_mod.SPAN)) if base is not None else set()
    for port, reservation in locked.items():
        if port not in span:
            reservation.release()
    if base is None:
        return None, None, ports_taken_text(address, port_range, sorted(taken))
    return ports_mod.span_ports(base), SpanReservation([locked[p] for p in sorted(span)]), None


def ports_taken_text(address: str, port_range, busy: list[int]) -> str:
    """The reason when no span of the range is free on a host: the range exhausted, by whom
    (the users whose sockets listen in it), the ports seen taken, the fix."""
    lo, hi = port_range[0], port_range[1]
    return (f"port collision: ray.port_range {lo}-{hi} is exhausted on {address}: no {ports_mod.SPAN} consecutive "
            f"ports of it are free ({ports_mod.range_holders_text(port_range)}; {taken_text(busy)}); "
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


def pick_ports(*, role, slot, port_range, head_base, locks, address, wait_s: float = 0.0):
    """(ports, reservation, None) for this node's free, reserved span, or (None, None, why
    not); a head's reservation is None (the supervisor holds its span). `head_base`: the
    head's GCS port (the first of its span); `wait_s`: how long a head's span may stay busy
    before that is a collision (a retry's)."""
    if role == "head":
        # The supervisor (on this host) found and holds the head's span for the whole job.
        ports = ports_mod.span_ports(head_base)
        busy = busy_ports(address, ports)
        until = time.monotonic() + wait_s
        while busy and time.monotonic() < until:
            # A retry's head waits for its span: the failed try's Ray processes, killed, may
            # still hold its ports for a moment (on a loaded host the retry then read them as
            # another program's and failed the job: a port collision with itself).
            time.sleep(HEAD_PORTS_POLL_S)
            busy = busy_ports(address, ports)
        if busy:
            # Another user's head whose span met this one and started between the supervisor's
            # check and this one (users' port locks are their own), or another program.
            return None, None, (f"port collision: the head's slot on {address} was taken after the supervisor "
                                f"checked it ({taken_text(busy)}); submit again, or move ray.port_range in the "
                                "site file")
        return ports, None, None
    # A worker's ports only have to be free on its own host: the first span from its start
    # there that no other node of this user holds (the locks) and no other program uses.
    return find_span(address, port_range, ports_mod.worker_start(head_base, slot, port_range), locks)


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
