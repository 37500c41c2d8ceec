"""Ray token authentication for one sf job.

Ray (2.52 and newer) refuses every GCS, raylet and dashboard request that does not carry
the cluster's token when `RAY_AUTH_MODE=token`; the token is read from the file named by
`RAY_AUTH_TOKEN_PATH`. Without it anyone who can reach a node's ports (another user's
process on a shared node) can submit work that runs as you.

The supervisor makes one token per attempt of the job, in a file only the job's user can
read (a 0700 folder in the run dir, which every node reaches), and hands the two variables
to every srun step (ray start on each node) and to the driver. Stdlib only.

Nothing in the user's HOME or environment can change which token a job's Ray uses. Ray 2.60
(src/ray/rpc/authentication/authentication_token_loader.cc) reads the token from, in order:
RAY_AUTH_TOKEN (the token itself), RAY_AUTH_TOKEN_PATH, the Kubernetes service-account token
(RAY_ENABLE_K8S_TOKEN_AUTH only), ~/.ray/auth_token. sf sets RAY_AUTH_TOKEN_PATH, so a
~/.ray/auth_token (Ray 2.59+ `ray start --head` turns token auth on whenever that file exists
and RAY_AUTH_MODE is unset; sf always sets it) is never read; and it removes a RAY_AUTH_TOKEN
the user exported (sbatch passes the submit shell's environment on), which would otherwise win
over sf's file for every Ray process of the job while `sf attach` used the file.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from launcher import gateway, ownership, ray_facts

# Where the token lies and what Ray's processes need to use it: shared with `sf attach`
# (launcher.ray_facts, the shared floor).
MODE = ray_facts.TOKEN_MODE
FOLDER = ray_facts.TOKEN_FOLDER
SHADOWING = ray_facts.TOKEN_SHADOWING
token_path = ray_facts.token_path
env_for = ray_facts.token_env
MIN_RAY = (2, 52)  # the first Ray with token authentication


def make_token(run_dir: str, job_id: str) -> Path:
    """Write a fresh random token, readable by this user only, into a token folder this very
    call makes (an earlier attempt's goes first: a folder that is not this user's own, or a
    symlink, is refused, never reused: its owner could swap the token); returns its path.
    Everything through launcher.gateway: the run folder is reached through no other user's
    link, and the token is written through the descriptor of the folder just made."""
    path = token_path(run_dir, job_id)
    folder = path.parent
    try:
        st = gateway.lstat(folder, "run")
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise ownership.UnsafePath("run", f"{folder} is not a folder sf made ({ownership.user_name(st.st_uid)}'s"
                                       f"{', a symlink' if stat.S_ISLNK(st.st_mode) else ''}): the job's Ray token is "
                                       "never written there; remove it and submit again")
        gateway.remove_tree(folder, "run")  # an earlier attempt's (a requeue): a new folder, a new token
    gateway.make_dir(folder, 0o700, field="run")  # exclusive: fails if anything appeared meanwhile
    with gateway.folder(folder, "run", own=True) as folder_fd:
        fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=folder_fd)
    try:
        os.write(fd, secrets.token_hex(32).encode())
    finally:
        os.close(fd)
    return path


def unshadowed(environ) -> dict:
    """A copy of `environ` without the token sources Ray would read before the job's file."""
    return {k: v for k, v in environ.items() if k not in SHADOWING}


def pin(env: dict, path: Path) -> dict:
    """`env` with the job's token as the only source Ray reads (env_for, minus SHADOWING)."""
    for name in SHADOWING:
        env.pop(name, None)
    env.update(env_for(path))
    return env


def remove_token(path: Path) -> None:
    gateway.unlink(path, "run")


def ray_supports_tokens(version: str) -> bool:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= MIN_RAY
