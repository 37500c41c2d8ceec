"""Where a user's runs are: the runs folder, checked once, and the user's own part of a shared one.

The runs folder is trusted only when nobody but root and its user can rename what is in it or
above it (ownership.trusted_chain), and only as the link-free path launcher.gateway walked to
it: a symlink of another user on the way is refused, and what sf hands the job (the run dir in
the batch script, its #SBATCH --output) is the real path, so a link flipped after the check
redirects nothing.

A shared runs folder (writable by others, sticky like /tmp: 1777, as docs/admins.md tells admins
to make one) holds one folder per user, `<runs>/<user>/`, 0700 (0750 with the site's
share_group) and the user's own; sf writes runs only there. Reading, sf looks at the user's
folder and, for runs an older sf made at the top, at the top too, and only at run folders the
caller owns: another user's, planted or private, are left out without a word (root sees its
own). Standard library only.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from launcher import gateway, ownership


def user_folder_name() -> str:
    """The caller's folder in a shared runs folder: the user name (the uid when it has none)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def is_shared(st: os.stat_result) -> bool:
    """A runs folder other users may write into (sticky: trusted_chain refuses it otherwise)."""
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _existing_real(path: Path, field: str) -> tuple[str, list[str]]:
    """(the link-free path of the deepest existing folder of `path`, the names below it to make)."""
    missing: list[str] = []
    probe = path
    while True:
        try:
            return gateway.resolve(probe, field), missing
        except FileNotFoundError:
            if probe.parent == probe:
                raise
            missing.insert(0, probe.name)
            probe = probe.parent


def real_path(path, field: str = "path") -> Path:
    """`path` with every existing folder of it walked (no other user's link followed) and its
    links resolved: the path to hand a job, which no flipped link can redirect; what does not
    exist yet is kept as given."""
    real, missing = _existing_real(Path(path).expanduser().absolute(), field)
    return Path(real, *missing)


def make_runs_root(runs_dir, share_group: str | None = None, field: str = "runs_dir", *,
                   per_user: bool = True) -> Path:
    """The runs folder as its real path, made (with its missing parents, 0700 or 0750 with the
    site's share_group) when it is not there; every existing folder on the way trusted. A shared
    one gives the caller's own folder in it (`per_user`), made private when missing."""
    real, missing = _existing_real(Path(runs_dir).expanduser().absolute(), field)
    ownership.trusted_chain(real, field)
    mode = 0o750 if share_group else ownership.PRIVATE_DIR
    gid = ownership.group_id(share_group)
    for name in missing:
        try:
            real = gateway.make_dir(os.path.join(real, name), mode, gid=gid, field=field)
        except FileExistsError:  # another sf command made it a moment ago
            real = gateway.resolve(os.path.join(real, name), field)
            ownership.trusted_chain(real, field)
    if per_user and is_shared(os.stat(real)):
        real = gateway.make_dir(os.path.join(real, user_folder_name()), mode, gid=gid, exist_ok=True, field=field)
    return Path(real)


def homes(runs_dir) -> list[Path]:
    """The folders that may hold the caller's runs under `runs_dir`, as they are now (nothing is
    made): the caller's folder in a shared runs folder, then the runs folder itself."""
    root = Path(runs_dir).expanduser().absolute()
    try:
        with gateway.folder(root, "runs_dir") as fd:
            shared = is_shared(os.fstat(fd))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return [root]
    return [root / user_folder_name(), root] if shared else [root]


def own_run_names(fd: int) -> list[str]:
    """The names of the run folders in the open folder `fd` that the caller owns and that hold a
    record (not links, not another user's: those are left out)."""
    uid = os.getuid()
    names = []
    for name in os.listdir(fd):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        if st.st_uid != uid or not stat.S_ISDIR(st.st_mode) or name.startswith("."):
            continue
        try:
            os.stat(f"{name}/record.json", dir_fd=fd, follow_symlinks=False)
        except OSError:  # no record (not a run), or a private folder of root's we cannot enter
            continue
        names.append(name)
    return sorted(names)
