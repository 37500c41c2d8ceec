"""What sf creates in a run is its user's alone: safe folders and files on a shared cluster.

Many users share the runs folder, the nodes and their /tmp. Another user who can rename a
run's folder, plant a symlink where sf writes, pre-create a folder sf reuses or open a lock
file sf waits on can take over a job (swap in their own Ray token), redirect what it writes,
or block its commands. So, on the login node and in the job alike (standard library only):

- a folder sf writes into must be trusted all the way up: every folder from `/` down to it
  owned by root or by this user, and not writable by others unless sticky (like /tmp), so
  nobody else can rename it or an ancestor and put their own in its place (trusted_chain);
- a run folder (and each folder sf reuses in it) is a real directory, not a symlink, this
  user's, not writable by others (check_own_dir); folders sf makes get an explicit mode,
  whatever the umask (make_own_dir);
- files are opened without following a symlink, and a file that already exists must be this
  user's regular file (open_own_file).
An UnsafePath names the path, what is wrong with it and how to fix it.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat

from launcher import gateway

# who may read a run: its folders and files, for the job's user alone or with a group
PRIVATE_DIR, SHARED_DIR = 0o700, 0o2750  # setgid: what the job makes inherits the group
PRIVATE_UMASK, SHARED_UMASK = 0o077, 0o027


# A path sf would use is not safe on a shared cluster (exit 2, one line): the gateway's refusal.
UnsafePath = gateway.UnsafeFile


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


# In a rootless container (scripts/sf-oci-run: a user namespace that maps only this user, as
# uid 0) every file of another host user, root included, shows the kernel's overflow uid:
# who owns it cannot be told from inside. The host side of the step, which can tell, names
# the container paths it checked (root's or the user's, not open to others) in this variable;
# only those count as root's. Inside no user namespace it means nothing.
HOST_CHECKED_ENV = "SF_HOST_CHECKED_PATHS"


def _overflow_uid() -> int:
    try:
        with open("/proc/sys/kernel/overflowuid") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 65534


def _host_root_unmapped() -> bool:
    """This process runs in a user namespace where the host's root has no uid."""
    try:
        with open("/proc/self/uid_map") as handle:
            rows = [line.split() for line in handle if line.strip()]
    except OSError:
        return False
    return not any(len(r) == 3 and int(r[1]) <= 0 < int(r[1]) + int(r[2]) for r in rows)


def trusted_owner(uid: int, path: str | os.PathLike | None = None) -> bool:
    """root or this user: who may rename what is in a folder they own (in a rootless container,
    also a path the host side checked, whose owner shows as the overflow uid)."""
    if uid in (0, os.getuid()):
        return True
    if path is None or uid != _overflow_uid() or not _host_root_unmapped():
        return False
    checked = os.environ.get(HOST_CHECKED_ENV, "")
    return os.path.normpath(os.fspath(path)) in {p for p in checked.split(":") if p}


def open_to_others(st: os.stat_result) -> bool:
    """Writable by group or others without the sticky bit: anyone of them may rename what is in it."""
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) and not st.st_mode & stat.S_ISVTX


def walked_path(path: str | os.PathLike, field: str = "path") -> str:
    """`path` with its existing folders walked by launcher.gateway (a link of another user on the
    way: UnsafePath naming it) and its links resolved; the part that does not exist yet as given."""
    probe, tail = os.path.abspath(os.fspath(path)), []
    while True:
        try:
            return os.path.join(gateway.resolve(probe, field), *tail)
        except FileNotFoundError:
            if probe == os.sep:
                raise
            tail.insert(0, os.path.basename(probe))
            probe = os.path.dirname(probe)


def trusted_chain(path: str | os.PathLike, field: str = "runs_dir") -> None:
    """Every existing folder from `/` down to `path` (walked: no other user's link followed) is
    root's or this user's and not writable by others unless sticky; UnsafePath names the first
    that is not."""
    real = walked_path(path, field)
    parts = real.split(os.sep)
    for depth in range(1, len(parts) + 1):
        folder = os.sep.join(parts[:depth]) or os.sep
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            return  # the rest does not exist yet: sf makes it, with its own modes
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(field, f"{folder} is a file where sf needs a folder; fix {field}")
        if not trusted_owner(st.st_uid, folder):
            raise UnsafePath(field, f"{folder} belongs to {user_name(st.st_uid)}, who could rename your runs and put "
                             f"their own in their place; use a folder of yours, or a shared one owned by root "
                             f"with mode 1777 like /tmp")
        if open_to_others(st):
            raise UnsafePath(field, f"{folder} is writable by other users without the sticky bit (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}): any of them could rename a run and put their own in "
                             f"its place; ask the admin to `chmod 1777 {folder}` (like /tmp), or use a folder of yours")


def check_own_dir(path: str | os.PathLike, field: str = "run") -> os.stat_result:
    """`path` is a real directory (not a symlink) of this user that others cannot write."""
    path = os.fspath(path)
    try:
        st = gateway.lstat(path, field)  # its folders walked: no other user's link on the way
    except (FileNotFoundError, NotADirectoryError):
        raise UnsafePath(field, f"{path} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(field, f"{path} is a symlink, not a folder sf made: someone may have replaced it; "
                         "sf does not write through it (remove it, or submit again)")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(field, f"{path} is not a folder; remove it or choose another path")
    if st.st_uid != os.getuid():
        raise UnsafePath(field, f"{path} belongs to {user_name(st.st_uid)}, not to you: sf does not write into "
                         "another user's folder (someone may have put it there); remove it or choose another path")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePath(field, f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}); "
                         f"`chmod go-w {path}` and check what is in it")
    return st


def group_id(group: str | None) -> int | None:
    if not group:
        return None
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise UnsafePath("site.share_group", f"no group {group!r} on this host; fix share_group in the site file "
                         "(`getent group` lists them)") from None


def make_own_dir(path: str | os.PathLike, mode: int = PRIVATE_DIR, *, group: str | None = None,
                 exist_ok: bool = False, field: str = "run") -> None:
    """mkdir with exactly `mode` (chmod after: the umask only narrows it, and the setgid bit of
    a shared run needs it) and, for a shared run, the group. An existing folder must pass
    check_own_dir (exist_ok), and is given the mode too."""
    path = os.fspath(path)
    try:
        os.mkdir(path, mode & 0o777)
    except FileExistsError:
        if not exist_ok:
            raise
        check_own_dir(path, field)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():  # pragma: no cover - swapped between mkdir and open
            raise UnsafePath(field, f"{path} changed owner while sf made it; submit again")
        gid = group_id(group)
        if gid is not None and st.st_gid != gid:
            os.fchown(fd, -1, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def open_own_file(path: str | os.PathLike, flags: int, mode: int = 0o600, field: str = "run") -> int:
    """os.open without following a symlink; an existing file must be this user's regular file.
    Returns the fd."""
    path = os.fspath(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: the last component is a symlink
            raise UnsafePath(field, f"{path} is a symlink: sf does not write through one (remove it)") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(field, f"{path} belongs to {user_name(st.st_uid)} or is not a plain file; sf does not use "
                         "it (remove it)")
    return fd


def run_umask(run_dir: str | os.PathLike) -> int:
    """The umask for what a job writes in its run: the group may read only when the run
    folder is shared with one (SHARED_DIR: group r-x), else nobody but the user."""
    try:
        st = os.lstat(run_dir)
    except OSError:
        return PRIVATE_UMASK
    return SHARED_UMASK if st.st_mode & stat.S_IRGRP else PRIVATE_UMASK
