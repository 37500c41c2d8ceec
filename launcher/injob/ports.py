"""Ray ports per (job, node slot) inside the site's range.

The site's range is cut into job blocks of SLOTS_PER_JOB node slots of SLOT_SIZE ports.
A job's head draws its first slot at random (random_slot: nobody can predict it); node i
of the job tries slot `i % SLOTS_PER_JOB` of that block first. Two nodes never share a port
on one host: a node takes the next slot another node of this user does not hold (a lock)
and no other process uses (a bind check of every port of the slot); a job's nodes past the
first SLOTS_PER_JOB start in the next block (`slot_first_block`). Each slot holds every port
a Ray node opens (head-only ones too) and a worker port range. Who holds a taken port
(listeners, holder_text) is read from the kernel's socket tables for the collision's reason.
"""

from __future__ import annotations

import os
import pwd
import secrets
from dataclasses import asdict, dataclass

from launcher.injob import stacks

SLOT_SIZE = 128
SLOTS_PER_JOB = 8
JOB_BLOCK = SLOT_SIZE * SLOTS_PER_JOB
N_FIXED = 16  # fixed ports at the start of a slot; the rest are worker ports

# offsets inside a slot
OFFSETS = {
    "gcs": 0,
    "node_manager": 1,
    "object_manager": 2,
    "dashboard_agent_grpc": 3,
    "dashboard_agent_listen": 4,
    "metrics_export": 5,
    "runtime_env_agent": 6,
    "client_server": 7,
    "dashboard": 8,
    "rdzv": 9,  # torchrun c10d rendezvous (SFT)
    # Ray's head fixes these two at 44227 and 44217 (env DASHBOARD_METRIC_PORT,
    # AUTOSCALER_METRIC_PORT): two heads on one host would fight over them.
    "dashboard_metrics": 10,
    "autoscaler_metrics": 11,
}


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
    min_worker: int
    max_worker: int

    def all_ports(self) -> list[int]:
        fixed = [v for k, v in asdict(self).items() if k not in ("min_worker", "max_worker")]
        return fixed + list(range(self.min_worker, self.max_worker + 1))

    def to_dict(self) -> dict:
        return asdict(self)


def n_blocks(port_range: tuple[int, int]) -> int:
    lo, hi = int(port_range[0]), int(port_range[1])
    count = (hi - lo + 1) // JOB_BLOCK
    if count < 1:
        raise ValueError(f"port range {lo}-{hi} holds fewer than {JOB_BLOCK} ports; widen ray.port_range")
    return count


def job_block(job_id: int | str, port_range: tuple[int, int]) -> int:
    """The block job `job_id` would take by its id: predictable by anyone, so only the
    benchmarks' "Ray alone" baseline uses it; sf's jobs take random_slot."""
    return int(job_id) % n_blocks(port_range)


def random_slot(port_range: tuple[int, int]) -> tuple[int, int]:
    """(block, slot) a job's head tries first, drawn at random over every slot of the range:
    another user who wants to squat the ports of a job cannot know them before it starts (the
    workers follow the head's). Over slots, not blocks: two users' heads starting on one shared
    host at once see each other only through the bind check (their port locks are their own),
    and only once the other's Ray listens; they draw the same slot 1 time in
    n_blocks x SLOTS_PER_JOB (96 in the dev site's range) instead of 1 in n_blocks (12)."""
    return divmod(secrets.randbelow(n_blocks(port_range) * SLOTS_PER_JOB), SLOTS_PER_JOB)


def job_base(job_id: int | str, port_range: tuple[int, int]) -> int:
    return int(port_range[0]) + job_block(job_id, port_range) * JOB_BLOCK


def slot_first_block(first: int, slot: int) -> int:
    """The block node slot `slot` of a job tries first: its job's block for the first
    SLOTS_PER_JOB nodes, the next block for the next SLOTS_PER_JOB, and so on. Nodes of one
    job that share a host (emulated nodes: 16 on the dev cluster) then never share a port;
    on separate hosts the block does not matter."""
    return int(first) + int(slot) // SLOTS_PER_JOB


def candidate_blocks(first: int, port_range: tuple[int, int]) -> list[int]:
    """Blocks in the order a node tries them: its job's block, then the next ones. Two
    jobs whose ids fall on the same block (ids differing by a multiple of n_blocks) on a
    shared host then still get apart instead of failing."""
    count = n_blocks(port_range)
    return [(int(first) + i) % count for i in range(count)]


def candidate_slots(first: int, slot: int, port_range: tuple[int, int]) -> list[tuple[int, int]]:
    """Every (block, slot in block) of the range in the order a node tries them: its own
    slot of its job's block first, then the other slots of that block, then the next blocks.
    Any free slot will do (the head's GCS port travels to the workers), so a host holds
    n_blocks x SLOTS_PER_JOB Ray nodes at once, not n_blocks jobs."""
    own = int(slot) % SLOTS_PER_JOB
    return [(block, (own + k) % SLOTS_PER_JOB) for block in candidate_blocks(first, port_range)
            for k in range(SLOTS_PER_JOB)]


def block_ports(block: int, slot: int, port_range: tuple[int, int]) -> NodePorts:
    base = int(port_range[0]) + int(block) * JOB_BLOCK + (int(slot) % SLOTS_PER_JOB) * SLOT_SIZE
    ports = {name: base + off for name, off in OFFSETS.items()}
    return NodePorts(**ports, min_worker=base + N_FIXED, max_worker=base + SLOT_SIZE - 1)


def node_ports(job_id: int | str, slot: int, port_range: tuple[int, int]) -> NodePorts:
    return block_ports(job_block(job_id, port_range), slot, port_range)


def head_ports(job_id: int | str, port_range: tuple[int, int]) -> NodePorts:
    """The head is node slot 0 of the job."""
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
