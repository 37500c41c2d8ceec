"""Private run-time dirs and port reservations on a node (standard library only).

Ray's temp dir: Ray makes the directory it is given, and everything under it, 0777 (it
chmods it, following a symlink planted at that path). So sf never hands Ray a path anyone
else could have chosen: each node makes a fresh directory under the site's `ray.temp_root`
with a random name (gateway.make_unique_dir, as mkdtemp: 0700, never an existing path,
never through a symlink) and gives Ray `<that>/r`: Ray may open up `r`, nobody else can
reach it through the 0700 parent. The node removes it when its Ray ends (after copying the
logs sf keeps); `sweep_stale` removes what a killed node could not.

Ports: a node reserves each port it will give Ray on its host by holding an fcntl lock on a
file per port in a 0700 directory of the job's user under the temp root, from before it
checks the ports until it exits (the kernel drops the lock when the process dies, so no
reservation outlives its holder). Two jobs of one user starting on one host at once
therefore never pick the same port; a job of another user, or any other program, that
holds a port is still seen by the bind check and the port skipped; a collision that
still happens is reported as one (node.py, bringup.py).

Start turns: the same directory holds `start<i>` lock files, one per turn; a Ray node holds
one from `ray start` until Ray says it runs. Ray 2.60 gives a starting node two fixed 30 s
windows (the raylet waits for its dashboard agent's port file, `ray start` for the raylet to
register); when more Ray nodes start on one host at once than its CPUs can start in 30 s
(several jobs of a user on a shared node, or emulated nodes), starts miss them and start
again. On the 16-core GPU machine 64 nodes at once needed 78-105 retries and 89-95 s, and
Ray alone (no retries) never came up. Turns make them start in waves instead. One node a
host (a real cluster) always finds a free turn at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import stat
import time

from launcher import gateway, ownership

PREFIX = "sf"  # <root>/sfXXXXXXXX: short, for Ray's 107-byte unix socket paths
RAY_SUBDIR = "r"
MARK = ".sf-owner"  # inside a private dir: "<job id> <node> <pid>", for sweep_stale
MARK_BYTES = 4096  # a mark is one short line


class UnsafeDir(RuntimeError):
    """A directory sf would use is not safe (a symlink, another user's, open to others)."""


def _check_root_stat(st: os.stat_result, root: str) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDir(f"ray.temp_root {root} is not a directory (a symlink?); set ray.temp_root "
                        "to a real directory such as /tmp")
    if not ownership.trusted_owner(st.st_uid, root):
        raise UnsafeDir(f"ray.temp_root {root} belongs to uid {st.st_uid}, not to root or to you")
    if ownership.open_to_others(st):
        raise UnsafeDir(f"ray.temp_root {root} is writable by others without the sticky bit")


def check_root(root: str) -> None:
    """The temp root must be a real directory (not a symlink), owned by root or by this
    user, and not writable by others unless sticky (like /tmp); its folders are walked by
    launcher.gateway (no other user's link on the way)."""
    try:
        _check_root_stat(gateway.lstat(root, "ray.temp_root"), root)
    except gateway.UnsafeFile as exc:
        raise UnsafeDir(str(exc)) from None
    except OSError as exc:
        raise UnsafeDir(f"ray.temp_root {root} is not usable: {exc.strerror}") from None


@contextlib.contextmanager
def _root_folder(root: str):
    """The temp root's descriptor, checked as check_root checks it (on the descriptor: what sf
    makes in it is made in the folder it checked, whatever is renamed meanwhile)."""
    check_root(root)
    try:
        with gateway.folder(root, "ray.temp_root") as fd:
            _check_root_stat(os.fstat(fd), root)
            yield fd
    except gateway.UnsafeFile as exc:
        raise UnsafeDir(str(exc)) from None


def make_private_dir(root: str, job_id: str = "", node: str = "") -> str:
    """A new directory under `root`, 0700, owned by this user, its name random (made through
    the root's descriptor: never an existing path, never through a link)."""
    with _root_folder(root) as fd:
        name = gateway.make_unique_dir(fd, PREFIX, 0o700)
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise UnsafeDir(f"{root}/{name} did not come out private")  # pragma: no cover - mkdir's contract
        with gateway.folder(os.path.join(root, name), "ray.temp_root") as sub:
            gateway.write_at(sub, MARK, f"{job_id} {node} {os.getpid()}\n")
    return os.path.join(root, name)


def ray_temp_dir(private: str) -> str:
    return os.path.join(private, RAY_SUBDIR)


def remove_private_dir(path: str) -> bool:
    """Remove a private dir through descriptors (never follows a symlink inside). Only a
    directory of this user that carries sf's mark; True when it is gone."""
    try:
        with gateway.parent(path, "ray.temp_root") as (fd, name):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                return False
            with gateway.folder(path, "ray.temp_root") as sub:
                os.stat(MARK, dir_fd=sub, follow_symlinks=False)  # FileNotFoundError: not sf's
            gateway.remove_at(fd, name)
            return True
    except FileNotFoundError:
        return not os.path.lexists(path)
    except (OSError, gateway.UnsafeFile):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
    return True


def sweep_stale(root: str, min_age_s: float = 60.0) -> list[str]:
    """Remove this user's private dirs under `root` whose creating process is gone (a node
    killed before it could clean up). Returns what was removed."""
    removed = []
    try:
        found = gateway.entries(root, "ray.temp_root")
    except (OSError, gateway.UnsafeFile):
        return removed
    now = time.time()
    for name, st in found:
        if not name.startswith(PREFIX) or len(name) != len(PREFIX) + 8:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or now - st.st_mtime < min_age_s:
            continue
        path = os.path.join(root, name)
        try:
            pid = int(gateway.read_bytes(os.path.join(path, MARK), "ray.temp_root", limit=MARK_BYTES).split()[2])
        except (OSError, ValueError, IndexError, gateway.UnsafeFile):
            continue
        if not _alive(pid) and remove_private_dir(path):
            removed.append(path)
    return removed


# --- port reservations ------------------------------------------------------------------

def lock_dir(root: str) -> str | None:
    """This user's lock directory on this host, <root>/.sf-ports-<uid>, 0700; None when it
    cannot be made safe (another user planted that name: sf goes on without reservations
    and relies on the bind check, and says so)."""
    name = f".sf-ports-{os.getuid()}"
    try:
        with _root_folder(root) as fd:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=fd)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (OSError, UnsafeDir):
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return os.path.join(root, name)


class Reservation:
    """An fcntl lock on a file of the lock dir (a port's port<N>, a start turn's
    start<i>), held until release() or process exit. Where sf goes on without a lock (no lock
    dir, no start turn in time) it hands out a lock-less one (Reservation.lockless()), so that
    callers release what they got and never test for None."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path

    @classmethod
    def lockless(cls) -> Reservation:
        return cls(-1, "")

    @property
    def held(self) -> bool:
        """Whether this holds a lock now (not lock-less, not released)."""
        return self.fd >= 0

    def release(self) -> None:
        """Drop the lock; harmless when lock-less or already released."""
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = -1


def reserve(directory: str | None, port: int) -> Reservation | None:
    """Try to reserve `port` on this host without waiting: the Reservation, or None when
    another process of this user holds it. With no lock directory every port counts as
    reserved-by-us (the bind check is then all there is)."""
    if directory is None:
        return Reservation.lockless()
    return _try_lock(os.path.join(directory, f"port{int(port)}"))


def _try_lock(path: str) -> Reservation | None:
    try:  # the lock dir walked, the file the caller's regular file, never a link
        fd = gateway.open_own(path, os.O_RDWR | os.O_CREAT, 0o600, "ray.temp_root")
    except gateway.UnsafeFile as exc:
        raise UnsafeDir(str(exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return Reservation(fd, path)


def start_turns(cpus: int) -> int:
    """How many Ray nodes of this user may start at once on a host of `cpus` CPUs: one a CPU
    (a start takes about 2.5 CPU-seconds over 3-4 s), at least START_TURNS_MIN."""
    return max(START_TURNS_MIN, int(cpus))


START_TURNS_MIN = 4
TURN_POLL_S = 0.2


def start_turn(directory: str | None, turns: int, wait_s: float, *, sleep=time.sleep,
               clock=time.monotonic) -> tuple[Reservation, float]:
    """One of `turns` turns to start Ray on this host, waiting at most `wait_s` for one:
    (the turn to release once Ray runs, lock-less when there is no lock directory or none
    came free in time: start anyway as before; seconds waited)."""
    if directory is None:
        return Reservation.lockless(), 0.0
    t0 = clock()
    while True:
        for i in random.sample(range(turns), turns):  # spread: no turn is everyone's first try
            turn = _try_lock(os.path.join(directory, f"start{i}"))
            if turn:
                return turn, clock() - t0
        if clock() - t0 >= wait_s:
            return Reservation.lockless(), clock() - t0
        sleep(TURN_POLL_S * random.uniform(0.5, 1.5))
