"""Ray ports of one node on its host, inside the site's range (ray.port_range, less the
kernel's ephemeral range: usable_range).

A Ray node of sf opens SPAN fixed ports, consecutive: the offsets of launcher.ray_facts
(the GCS port first; `sf dashboard` finds the dashboard from it). Ray's worker processes take
ports the kernel gives them (`--min-worker-port=0`): Ray hands out a fixed worker range
lazily, so another user could take those ports once the head is up.

Where a node's span lies: any free run of SPAN ports anywhere in the range (free_spans), not
one of a few fixed slots. With slots of 128 ports (96 in the dev site's range) one socket of
another user in each slot blocked every sf job on the host; now blocking needs a socket in
every SPAN ports of the whole range (over a thousand in the dev site's), and a range that
full is refused naming the users who hold it (range_holders_text). The head's span starts at
a random port (random_base: nobody can predict it and squat it first); the supervisor finds
it and holds its locks for the job's life; node i of the job starts its search SPAN x i ports
after the head's. Two nodes never share a port on one host: a node takes a span whose every
port no other node of this user holds (a lock per port, launcher.injob.node_ports) and no
other process uses (a bind check of every port of the span). Another user's node is seen by
the bind check once it listens; a port taken between the check and Ray's bind fails that
start as a port collision (the head's slot is drawn again, a worker retries elsewhere).
Why not bind the ports and hand them to Ray: Ray's servers take no socket, and a bound,
not listening socket keeps out only programs that bind without SO_REUSEADDR. Why not let the
kernel give the fixed ports too (Ray 2.60 takes port 0 for each): the head's GCS port must be
known before the head starts (the workers, the barrier and the driver are told it), and the
ports of every node are recorded (node_started: port_base) for the security checks. Who holds
a taken port (listeners, holder_text) is read from the kernel's socket tables.
"""

from __future__ import annotations

import os
import pwd
import secrets
from dataclasses import asdict, dataclass

from launcher import ray_facts
from launcher.injob import stacks

OFFSETS = ray_facts.HEAD_OFFSETS  # offsets in a node's span (the shared floor: sf attach reads them)
SPAN = ray_facts.SPAN
JOB_BLOCK = 1024  # the fewest ports a site's range may hold (launcher.spec.contracts.PORT_BLOCK)

# The benchmarks' "Ray alone" baseline lays ports out by job id, in blocks of SLOTS_PER_JOB
# slots of SLOT_SIZE ports (fixed ones, then a worker range): predictable, so sf never does.
SLOT_SIZE = 128
SLOTS_PER_JOB = 8
N_FIXED = 16  # fixed ports at the start of a baseline slot; the rest are worker ports
assert SLOT_SIZE * SLOTS_PER_JOB == JOB_BLOCK and SPAN <= N_FIXED


@dataclass(frozen=True)
class NodePorts:
    gcs: int
    node_manager: int
    object_manager: int
    dashboard_agent_grpc: int
    dashboard_agent_listen: int
    metrics_export: int
    runtime_env_agent: int
    client_server: int
    dashboard: int
    rdzv: int
    dashboard_metrics: int
    autoscaler_metrics: int
    min_worker: int = 0  # 0: Ray's workers take ports the kernel gives them (sf's nodes)
    max_worker: int = 0

    def fixed(self) -> list[int]:
        return [v for k, v in asdict(self).items() if k not in ("min_worker", "max_worker")]

    def all_ports(self) -> list[int]:
        workers = list(range(self.min_worker, self.max_worker + 1)) if self.min_worker else []
        return self.fixed() + workers

    @property
    def last(self) -> int:
        return max(self.all_ports())

    def to_dict(self) -> dict:
        return asdict(self)


def span_ports(base: int) -> NodePorts:
    """The ports of a node whose span starts at `base` (the GCS port, on a head)."""
    return NodePorts(**{name: int(base) + off for name, off in OFFSETS.items()})


def check_range(port_range: tuple[int, int]) -> tuple[int, int]:
    lo, hi = int(port_range[0]), int(port_range[1])
    if hi - lo + 1 < JOB_BLOCK:
        raise ValueError(f"port range {lo}-{hi} holds fewer than {JOB_BLOCK} ports; widen ray.port_range")
    return lo, hi


def random_base(port_range: tuple[int, int]) -> int:
    """Where the head's span search starts: a port drawn at random over the whole range, so
    that another user who wants to squat a job's ports cannot know them before it starts."""
    lo, hi = check_range(port_range)
    return lo + secrets.randbelow(hi - SPAN + 2 - lo)


def worker_start(head_base: int, slot: int, port_range: tuple[int, int]) -> int:
    """Where node `slot` of a job starts its span search: SPAN x slot ports after the head's
    span, wrapped into the range. Nodes of one job on one host (emulated nodes: 16 on the dev
    cluster) then find their spans at the first try."""
    lo, hi = check_range(port_range)
    count = hi - SPAN + 2 - lo  # bases a span may start at
    return lo + (int(head_base) - lo + SPAN * int(slot)) % count


def free_spans(start: int, port_range: tuple[int, int], busy):
    """Every base whose SPAN ports pass `busy` (port -> bool: taken), over the whole range in
    the order a node tries them: from `start` up, then from the range's low end. A taken port
    skips every span that holds it. Pure but for what `busy` does."""
    lo, hi = check_range(port_range)
    last = hi - SPAN + 1
    start = min(max(int(start), lo), last)
    for first, end in ((start, last), (lo, start - 1)):
        base = first
        while base <= end:
            taken = next((p for p in range(base, base + SPAN) if busy(p)), None)
            if taken is None:
                yield base
                base += 1
            else:
                base = taken + 1


# --- the benchmarks' "Ray alone" baseline layout ---------------------------------------------

def n_blocks(port_range: tuple[int, int]) -> int:
    lo, hi = check_range(port_range)
    return (hi - lo + 1) // JOB_BLOCK


def job_block(job_id: int | str, port_range: tuple[int, int]) -> int:
    """The block job `job_id` would take by its id: predictable by anyone, so only the
    benchmarks' "Ray alone" baseline uses it."""
    return int(job_id) % n_blocks(port_range)


def slot_first_block(first: int, slot: int) -> int:
    """The block node slot `slot` of a baseline job takes: its job's block for the first
    SLOTS_PER_JOB nodes, the next block for the next SLOTS_PER_JOB, and so on."""
    return int(first) + int(slot) // SLOTS_PER_JOB


def block_ports(block: int, slot: int, port_range: tuple[int, int]) -> NodePorts:
    base = int(port_range[0]) + int(block) * JOB_BLOCK + (int(slot) % SLOTS_PER_JOB) * SLOT_SIZE
    ports = {name: base + off for name, off in OFFSETS.items()}
    return NodePorts(**ports, min_worker=base + N_FIXED, max_worker=base + SLOT_SIZE - 1)


def node_ports(job_id: int | str, slot: int, port_range: tuple[int, int]) -> NodePorts:
    return block_ports(job_block(job_id, port_range), slot, port_range)


def head_ports(job_id: int | str, port_range: tuple[int, int]) -> NodePorts:
    """The baseline's head is node slot 0 of the job."""
    return node_ports(job_id, 0, port_range)


# --- temp dirs ----------------------------------------------------------------------

UNIX_PATH_MAX = 107
# What Ray appends under --temp-dir for its sockets:
#   /session_2026-11-29_11-23-22_123456_4194304/sockets/plasma_store
RAY_SOCKET_SUFFIX = len("/session_2026-11-29_11-23-22_123456_4194304/sockets/plasma_store") + 8


def temp_dir(temp_root: str, job_id: int | str, node: str) -> str:
    """A predictable Ray temp dir per (job, Slurm node name), <root>/sf<job>_<node>: only for
    the benchmarks' "Ray alone" baseline. sf's jobs never use it (another user could plant
    it); they get private ones (launcher/injob/private.py)."""
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in node)[:24]
    path = f"{temp_root.rstrip('/') or ''}/sf{job_id}_{safe}"
    check_temp_dir(path)
    return path


def check_temp_dir(path: str) -> None:
    longest = len(path.encode()) + RAY_SOCKET_SUFFIX
    if longest > UNIX_PATH_MAX:
        raise ValueError(
            f"Ray temp dir {path} is too long: its unix sockets would need {longest} bytes, over the "
            f"{UNIX_PATH_MAX}-byte limit; set a shorter ray.temp_root in the site file (e.g. /tmp)"
        )


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int] | None:
    try:
        lo, hi = (int(x) for x in open(path).read().split())
        return lo, hi
    except (OSError, ValueError):
        return None


def usable_range(port_range: tuple[int, int], ephemeral: tuple[int, int] | None = None) -> tuple[int, int]:
    """The site's range minus the kernel's ephemeral range (outgoing connections take
    ports from it at any time, so a Ray port there can be stolen between check and bind).
    Keeps the larger side that still holds at least one job block; else the site's range."""
    lo, hi = int(port_range[0]), int(port_range[1])
    eph = ephemeral if ephemeral is not None else ephemeral_range()
    if not eph:
        return lo, hi
    below = (lo, min(hi, eph[0] - 1))
    above = (max(lo, eph[1] + 1), hi)
    sides = [s for s in (below, above) if s[1] - s[0] + 1 >= JOB_BLOCK]
    return max(sides, key=lambda s: s[1] - s[0]) if sides else (lo, hi)


# --- who holds a port ---------------------------------------------------------------
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def listeners(port: int, proc: str = "/proc") -> list[dict]:
    """Who listens on TCP `port` on this host, on any address, from the kernel's socket tables
    of this network namespace: [{"uid", "inode", "pid", "command", "slurm_job"}]. pid, command
    and Slurm job only where this process may read the holder's /proc entries (its own user's:
    another user's open files are not readable, and need not be); the Slurm job is the one
    whose cgroup holds the process (its environment could name any job)."""
    found: dict[str, int] = {}  # socket inode -> uid
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = open(f"{proc}/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found[fields[9]] = int(fields[7])
    holders = {inode: {"uid": uid, "inode": inode, "pid": None, "command": None, "slurm_job": None}
               for inode, uid in found.items()}
    wanted = {f"socket:[{inode}]": inode for inode in holders}
    pids = [p for p in _listdir(proc) if p.isdigit()] if wanted else []
    for pid in pids:
        for fd in _listdir(f"{proc}/{pid}/fd"):
            try:
                inode = wanted.get(os.readlink(f"{proc}/{pid}/fd/{fd}"))
            except OSError:
                continue
            if inode and holders[inode]["pid"] is None:
                holders[inode].update(pid=int(pid), command=_read(f"{proc}/{pid}/comm").strip() or None,
                                      slurm_job=stacks.cgroup_job(_read(f"{proc}/{pid}/cgroup"))[1])
    return list(holders.values())


def holder_text(port: int, proc: str = "/proc") -> str:
    """Who holds `port`, for a port-collision reason: "gcs_server (pid 4242, Slurm job 51, user
    alice)", "a process of user bob (uid 1001)", or what it means that nobody listens on it."""
    held = listeners(port, proc)
    if not held:
        return "no process listens on it (a socket bound without listening, an outgoing connection's, or one closing)"
    parts = []
    for h in held:
        user = _user_name(h["uid"])
        if h["pid"] is None:
            parts.append(f"a process of user {user} (uid {h['uid']})")
        else:
            job = f", Slurm job {h['slurm_job']}" if h["slurm_job"] else ""
            parts.append(f"{h['command'] or 'a process'} (pid {h['pid']}{job}, user {user})")
    return "listened on by " + "; ".join(parts)


def range_listeners(port_range, proc: str = "/proc") -> dict[int, int]:
    """{uid: how many ports of `port_range` that user's sockets listen on} on this host, from
    the kernel's socket tables (one read, however wide the range)."""
    lo, hi = int(port_range[0]), int(port_range[1])
    seen: dict[int, set[int]] = {}
    for table in ("net/tcp", "net/tcp6"):
        for line in _read(f"{proc}/{table}").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN:
                port = int(fields[1].rsplit(":", 1)[1], 16)
                if lo <= port <= hi:
                    seen.setdefault(int(fields[7]), set()).add(port)
    return {uid: len(ports) for uid, ports in seen.items()}


def range_holders_text(port_range, proc: str = "/proc") -> str:
    """"listening in the range: user nobody (uid 65534) on 96 ports, user alice (uid 1001) on
    12": who took the range, most ports first, for the reason when no slot is free."""
    held = sorted(range_listeners(port_range, proc).items(), key=lambda item: -item[1])
    if not held:
        return "nothing listens in the range (the ports are bound without listening, or closing)"
    return "listening in the range: " + ", ".join(
        f"user {_user_name(uid)} (uid {uid}) on {count} port{'s' if count > 1 else ''}" for uid, count in held[:5])


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
