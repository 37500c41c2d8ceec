"""A site's template is compiled and rendered in a forked child with a wall-clock limit
(site_template.MAX_RENDER_S) and a memory limit (MAX_RENDER_BYTES more than the login process already
maps, RLIMIT_AS): Jinja's sandbox stops the known ways to compute without end
(sbatch_template.check_binop, its bounded range), and this stops the rest, wherever they run
(Jinja folds constant expressions while it compiles, in C code no signal handler can stop).
Used for every use of a site's template: `sf render`, validate, submit (through
launcher.render.script) and `sf doctor` (site_template.check_template_file). Standard library only.
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import time

from launcher.errors import SpecError

# A script is at most 4 MB; Jinja and the checks need a few times that. 1 GiB past what the
# process maps already is far more than a template needs and far less than a login node has
MAX_RENDER_BYTES = 1024 * 1024 * 1024


def _mapped_bytes() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _child(write_fd: int, work, where: str, seconds: float) -> None:
    """In the forked child: `work()`'s result (or its SpecError) pickled to `write_fd`."""
    try:
        limit = _mapped_bytes() + MAX_RENDER_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        signal.alarm(int(seconds) + 5)  # the parent kills it first; this is the backstop
        try:
            result = ("ok", work())
        except SpecError as exc:
            result = ("spec", exc.field, exc.message)
        except MemoryError:
            result = ("spec", "site.templates_dir", f"{where}: needs more than {MAX_RENDER_BYTES >> 30} GiB of memory "
                      "to render (a template prints a few KB of shell): compute less")
        except RecursionError:
            result = ("spec", "site.templates_dir", f"{where}: recurses without end while it renders")
        except Exception as exc:  # noqa: BLE001 - one line naming the file, never a traceback from the child
            result = ("spec", "site.templates_dir", f"{where}: {type(exc).__name__}: {exc}")
        data = pickle.dumps(result)
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    finally:
        os._exit(0)


def run(work, where: str, seconds: float):
    """`work()` in a forked child within `seconds` and MAX_RENDER_BYTES: its result, its
    SpecError raised again here, or a SpecError naming `where` (the template's file) when it
    ran past a limit."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, work, where, seconds)
    os.close(write_fd)
    chunks, deadline, status, ended = [], time.monotonic() + seconds, None, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([read_fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                ended = True
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if not ended or not data:
        if not ended:
            raise SpecError("site.templates_dir", f"{where}: was still rendering after {seconds:g} s (a site's "
                            "blocks take milliseconds): a loop without end? Loop over less")
        raise SpecError("site.templates_dir", f"{where}: rendering it ended without a result ("
                        f"{_status(status)}); it may need more than {MAX_RENDER_BYTES >> 30} GiB: compute less")
    result = pickle.loads(data)
    if result[0] == "spec":
        raise SpecError(result[1], result[2])
    return result[1]


def _status(status: int | None) -> str:
    if status is not None and os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status) if status is not None else '?'}"
