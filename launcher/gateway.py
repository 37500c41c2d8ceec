"""The one way sf reaches a file of a run, a sweep, a lock, a log or a render output.

Other users share the runs folder, the nodes and their /tmp. A path is a string anyone who owns
a folder on it can re-point between sf's check and its use (a symlink flipped after the check, a
FIFO where a record was, a 3 GB sparse file, a planted link under logs/). So every access here:

- walks the path from `/` one component at a time with openat-style calls (dir_fd,
  O_NOFOLLOW, O_DIRECTORY): a symlink on the way is followed only when root or the caller owns
  it (the site's /home -> /export/home); another user's link is refused, naming it;
- reads only regular files, checked with fstat on the descriptor it opened (O_NONBLOCK, so a
  FIFO never blocks the open), up to a size cap the refusal names;
- checks who owns what already exists (the caller, or root) and never writes into a folder the
  caller does not own;
- writes a temp file through the folder's descriptor (O_CREAT|O_EXCL|O_NOFOLLOW, 0600), fsyncs
  it and renames it into place with os.replace(src_dir_fd, dst_dir_fd): a crash leaves the old
  file, a reader never sees half of one.

Readers: `read_bytes`/`read_text` (a cap, `tail=` for a log's end, `follow=` for a last name the
user linked: a spec or site file), `open_file` (the descriptor, for a caller that reads it itself),
`entries` (a folder's names with lstat, nothing followed). Writers: `write`, `open_own`, `make_dir`,
`make_unique_dir`, `unlink`, `remove_tree`/`remove_at`.

`resolve` gives the link-free path it walked: what sf hands a job or an #SBATCH line is that
path, never the one the user typed (a link in it could be flipped after the check).

A refusal is an UnsafeFile (a SpecError: one line naming the path and the fix, exit 2). Standard
library only: the job side (launcher/injob) uses it too, on a bare Python 3.8 or newer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat

from launcher.errors import SpecError

MAX_READ = 64 << 20  # no file sf reads as text or JSON comes near this; a planted sparse file may
MAX_LINKS = 40  # as the kernel's own limit for one path (ELOOP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(SpecError):
    """A path sf will not read or write (a link of another user, not a regular file, too large,
    another user's); `path` is the path refused."""

    def __init__(self, field: str, message: str, path: str | os.PathLike | None = None, kind: str = ""):
        super().__init__(field, message)
        self.path = None if path is None else os.fspath(path)
        self.kind = kind  # what stood there ("a FIFO", "a folder", ...), "too large", or "" for the rest
        self.size: int | None = None  # a file too large: its size


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    return uid in (0, os.getuid())


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover - a door (Solaris) or an unknown kind


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _follow(fd: int, name: str, shown: str, field: str) -> str:
    """The target of the link `name` in folder `fd` when root or the caller owns it, else UnsafeFile."""
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not _trusted(st.st_uid):
        raise UnsafeFile(field, f"{shown} is a symbolic link of {user_name(st.st_uid)}, who could point it "
                         "elsewhere after sf checked it; use the real path, or a folder of yours", shown)
    return os.readlink(name, dir_fd=fd)


def _walk(path: str, field: str) -> tuple[int, str]:
    """Open the folder `path` and each folder above it from `/`; returns its fd (the caller
    closes it) and its link-free path."""
    todo = _parts(os.path.abspath(os.fspath(path)))
    fd, real, links = os.open("/", _DIR_FLAGS), [], 0
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                real = real[:-1]
                os.close(fd)
                fd = _reopen(real)
                continue
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                shown = "/" + "/".join([*real, name])
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    raise UnsafeFile(field, f"{shown} is {_kind(st.st_mode)} where sf needs a folder; fix {field}",
                                     shown, _kind(st.st_mode)) from None
                links += 1
                if links > MAX_LINKS:
                    raise UnsafeFile(field, f"{shown}: too many symbolic links; fix {field}", shown) from None
                target = _follow(fd, name, shown, field)
                todo = _parts(target) + todo
                if target.startswith("/"):
                    real = []
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                continue
            os.close(fd)
            fd, real = nxt, [*real, name]
        return fd, "/" + "/".join(real)
    except BaseException:
        os.close(fd)
        raise


def _reopen(real: list[str]) -> int:
    fd = os.open("/", _DIR_FLAGS)
    for name in real:
        nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


def resolve(path: str | os.PathLike, field: str = "path") -> str:
    """The link-free absolute path of the folder `path` (it must exist), walked as _walk does: the
    path to put into a job, which a flipped link can no longer redirect."""
    fd, real = _walk(os.fspath(path), field)
    os.close(fd)
    return real


@contextlib.contextmanager
def folder(path: str | os.PathLike, field: str = "path", *, own: bool = False, sticky_ok: bool = False):
    """The folder `path` opened safely (a descriptor); `own`: it must be the caller's and closed
    to others (`sticky_ok`: or root's or the caller's with the sticky bit, like /tmp, where nobody
    can rename or remove what the caller makes in it)."""
    fd, real = _walk(os.fspath(path), field)
    try:
        if own:
            _check_own_folder(os.fstat(fd), real, field, sticky_ok)
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def parent(path: str | os.PathLike, field: str = "path", *, own: bool = False, sticky_ok: bool = False):
    """(fd of the folder of `path`, the last name of `path`): the folder opened as `folder` does."""
    path = os.path.abspath(os.fspath(path))
    name = os.path.basename(path)
    if not name or name in (".", ".."):
        raise UnsafeFile(field, f"{path} names no file; fix {field}", path)
    with folder(os.path.dirname(path), field, own=own, sticky_ok=sticky_ok) as fd:
        yield fd, name


def _check_own_folder(st: os.stat_result, shown: str, field: str, sticky_ok: bool = False) -> None:
    if sticky_ok and _trusted(st.st_uid) and st.st_mode & stat.S_ISVTX:
        return
    if st.st_uid != os.getuid():
        raise UnsafeFile(field, f"{shown} belongs to {user_name(st.st_uid)}, not to you: sf never writes into "
                         "another user's folder (someone may have put it there); remove it or choose another path",
                         shown)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFile(field, f"{shown} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}); "
                         f"`chmod go-w {shown}` and check what is in it", shown)


def _check_file(st: os.stat_result, shown: str, field: str, limit: int | None, any_owner: bool) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(field, f"{shown} is {_kind(st.st_mode)}, not a file sf wrote: sf reads only regular "
                         "files; remove it", shown, _kind(st.st_mode))
    if not any_owner and not _trusted(st.st_uid):
        raise UnsafeFile(field, f"{shown} belongs to {user_name(st.st_uid)}, not to you: someone else put it "
                         "there; sf does not use it (remove it)", shown)
    if limit is not None and st.st_size > limit:
        refusal = UnsafeFile(field, f"{shown} is {st.st_size} bytes, over the {limit} bytes sf reads from such "
                             "a file: not a file sf wrote; remove it", shown, "too large")
        refusal.size = st.st_size
        raise refusal


def open_read(fd: int, name: str, shown: str, field: str = "path", *, limit: int | None = MAX_READ,
              any_owner: bool = False) -> int:
    """A descriptor of the regular file `name` in folder `fd` (never a link, FIFO or device, at most
    `limit` bytes, root's or the caller's unless `any_owner`). FileNotFoundError when absent."""
    try:
        file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EOPNOTSUPP):
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            raise UnsafeFile(field, f"{shown} is {_kind(mode)}, not a file sf wrote: sf reads only regular "
                             "files; remove it", shown, _kind(mode)) from None
        raise
    try:
        _check_file(os.fstat(file_fd), shown, field, limit, any_owner)
    except BaseException:
        os.close(file_fd)
        raise
    return file_fd


def read_fd(file_fd: int, limit: int | None = MAX_READ, shown: str = "", field: str = "path") -> bytes:
    chunks, total = [], 0
    while True:
        chunk = os.read(file_fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if limit is not None and total > limit:  # it grew after the fstat
            raise UnsafeFile(field, f"{shown} grew past the {limit} bytes sf reads from such a file; remove it",
                             shown, "too large")


def open_file(path: str | os.PathLike, field: str = "path", *, limit: int | None = MAX_READ,
              any_owner: bool = False, follow: bool = False) -> int:
    """A descriptor of the regular file `path`, checked as open_read does (read what it says from it,
    never the path again: a swap after the check changes nothing). `follow`: a last name that is a
    link of root or the caller (a spec file the user linked) is followed, its target walked as every
    folder is; without it a link there is refused. FileNotFoundError when absent."""
    shown = where = os.path.abspath(os.fspath(path))
    for _ in range(MAX_LINKS + 1):
        with parent(where, field) as (fd, name):
            try:
                return open_read(fd, name, shown, field, limit=limit, any_owner=any_owner)
            except UnsafeFile as exc:
                if not (follow and exc.kind == "a symbolic link"):
                    raise
                target = _follow(fd, name, where, field)
        where = os.path.join(os.path.dirname(where), target)  # `..` in it: _walk goes up the real path
    raise UnsafeFile(field, f"{shown}: too many symbolic links; fix {field}", shown)


def read_bytes(path: str | os.PathLike, field: str = "path", *, limit: int | None = MAX_READ,
               any_owner: bool = False, follow: bool = False, tail: int | None = None) -> bytes:
    """The bytes of the regular file `path` (see open_file); `tail`: only its last `tail` bytes, however
    large it is (a log). FileNotFoundError when it is absent."""
    shown = os.path.abspath(os.fspath(path))
    file_fd = open_file(path, field, limit=None if tail is not None else limit, any_owner=any_owner, follow=follow)
    try:
        if tail is not None:
            os.lseek(file_fd, max(0, os.fstat(file_fd).st_size - tail), os.SEEK_SET)
            return os.read(file_fd, tail)
        return read_fd(file_fd, limit, shown, field)
    finally:
        os.close(file_fd)


def read_text(path: str | os.PathLike, field: str = "path", *, errors: str = "strict",
              limit: int | None = MAX_READ, any_owner: bool = False, follow: bool = False) -> str:
    return read_bytes(path, field, limit=limit, any_owner=any_owner, follow=follow).decode("utf-8", errors)


def write_at(fd: int, name: str, data: bytes | str, mode: int = 0o600) -> None:
    """Atomically replace `name` in folder `fd` by `data`: temp file (O_EXCL, O_NOFOLLOW), fsync,
    rename, fsync of the folder."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    file_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        try:
            os.fchmod(file_fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(file_fd, view):]
            os.fsync(file_fd)
        finally:
            os.close(file_fd)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(fd)


def write(path: str | os.PathLike, data: bytes | str, field: str = "path", mode: int = 0o600) -> None:
    """Atomically write `path` in a folder of the caller's own (write_at)."""
    with parent(path, field, own=True) as (fd, name):
        write_at(fd, name, data, mode)


def open_own(path: str | os.PathLike, flags: int, mode: int = 0o600, field: str = "path") -> int:
    """os.open of `path` in a folder of the caller's, never through a link; what it opens must be the
    caller's regular file (a lock, events.jsonl appended to). Returns the descriptor."""
    with parent(path, field, own=True) as (fd, name):
        shown = os.path.abspath(os.fspath(path))
        try:
            file_fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EOPNOTSUPP):
                raise
            kind = _kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            raise UnsafeFile(field, f"{shown} is {kind}: sf does not write through it (remove it)", shown) from None
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(file_fd)
        raise UnsafeFile(field, f"{shown} belongs to {user_name(st.st_uid)} or is {_kind(st.st_mode)}; sf does "
                         "not use it (remove it)", shown)
    os.set_blocking(file_fd, True)
    return file_fd


def make_dir(path: str | os.PathLike, mode: int = 0o700, *, gid: int | None = None, exist_ok: bool = False,
             field: str = "path") -> str:
    """mkdir `path` in a folder of the caller's, with exactly `mode` (and group `gid`) whatever the
    umask; an existing one (exist_ok) must be the caller's real folder, not open to others, and is
    given the mode too. Returns its link-free path."""
    with parent(path, field, own=True, sticky_ok=True) as (fd, name):
        real_parent = _real_of(fd)
        shown = os.path.join(real_parent, name)
        try:
            os.mkdir(name, mode & 0o777, dir_fd=fd)
            made = True
        except FileExistsError:
            if not exist_ok:
                raise
            made = False
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            kind = _kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            raise UnsafeFile(field, f"{shown} is {kind}, not a folder sf made: someone may have put it there; "
                             "remove it or choose another path", shown) from None
    try:
        st = os.fstat(sub)
        if made and st.st_uid != os.getuid():  # pragma: no cover - swapped between mkdir and open
            raise UnsafeFile(field, f"{shown} changed owner while sf made it; try again", shown)
        if not made:
            _check_own_folder(st, shown, field)
        if gid is not None and st.st_gid != gid:
            os.fchown(sub, -1, gid)
        os.fchmod(sub, mode)
    finally:
        os.close(sub)
    return shown


def make_unique_dir(fd: int, prefix: str, mode: int = 0o700, tries: int = 100) -> str:
    """A new folder `prefix` + 8 random characters in folder `fd`, as mkdtemp makes one (never an
    existing name, never through a link), exactly `mode`; returns its name."""
    for _ in range(tries):
        name = prefix + "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except FileExistsError:
            continue
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        try:
            os.fchmod(sub, mode)
        finally:
            os.close(sub)
        return name
    raise FileExistsError(errno.EEXIST, f"no free name {prefix}XXXXXXXX after {tries} tries")


def _real_of(fd: int) -> str:
    """The path the kernel has for an open folder (the walk followed no untrusted link to reach it)."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}")
    return "?"


def entries(path: str | os.PathLike, field: str = "path") -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of the folder `path`, links not followed; [] when it is absent."""
    try:
        with folder(path, field) as fd:
            out = []
            for name in os.listdir(fd):
                with contextlib.suppress(FileNotFoundError):
                    out.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
            return out
    except FileNotFoundError:
        return []


def lstat(path: str | os.PathLike, field: str = "path") -> os.stat_result:
    """lstat of `path`, its folders walked as everywhere here. FileNotFoundError when absent."""
    with parent(path, field) as (fd, name):
        return os.stat(name, dir_fd=fd, follow_symlinks=False)


def unlink(path: str | os.PathLike, field: str = "path", *, missing_ok: bool = True) -> None:
    """Remove the file (or link itself) `path` from a folder of the caller's."""
    with parent(path, field, own=True) as (fd, name):
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            if not missing_ok:
                raise


def remove_tree(path: str | os.PathLike, field: str = "path") -> None:
    """Remove the caller's folder `path` and all in it, through descriptors (a link inside is removed,
    never followed); a missing one is fine."""
    with parent(path, field, own=True) as (fd, name):
        remove_at(fd, name)


def remove_at(fd: int, name: str) -> None:
    """Remove `name` from folder `fd`, and all in it when it is a folder (links removed, not followed)."""
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=fd)
        return
    try:
        for child in os.listdir(sub):
            remove_at(sub, child)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=fd)
