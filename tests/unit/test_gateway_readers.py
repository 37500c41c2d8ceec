"""Each reader that goes through launcher.gateway refuses what a planted path would make it read:
a FIFO (at once, never blocking), a symbolic link of another user (or a link where a file
should be), a file over its size cap (named with its size), each with one line naming the path.
The tests run as root and play the other user (`nobody`) by lchown."""
from __future__ import annotations

import os
import pwd
import threading
from pathlib import Path

import pytest

from launcher import gateway
from launcher.errors import SpecError
from launcher.spec import contracts
from launcher.spec.files import MAX_FILE_BYTES, read_text_file

NOBODY = pwd.getpwnam("nobody")
pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="plays another user by chown: runs as root")


def owned_by_nobody(path) -> None:
    os.lchown(path, NOBODY.pw_uid, NOBODY.pw_gid)


def refusal(call, *args, **kwargs) -> str:
    """The one-line refusal `call` raises (within 10 s: a FIFO must not block it), or 'read'."""
    outcome = []

    def run():
        try:
            call(*args, **kwargs)
            outcome.append("read")
        except (SpecError, ValueError, OSError) as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, f"{call.__name__} blocked"
    assert "\n" not in outcome[0], outcome[0]
    return outcome[0]


def sparse(path: Path, size: int = 3 << 30) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def nobodys_link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    owned_by_nobody(link)
    return link


# --- spec, site and registry files (launcher.spec.files.read_text_file) ---------------------------

def test_a_spec_file_that_is_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "config.yaml")
    text = refusal(read_text_file, tmp_path / "config.yaml", "config.yaml")
    assert text.startswith("config.yaml: ") and f"{tmp_path / 'config.yaml'} is a FIFO" in text
    assert "not a regular file" in text and "replace it" in text


def test_a_spec_file_through_a_link_of_another_user_is_refused_naming_the_link(tmp_path):
    (tmp_path / "mine.yaml").write_text("method: verl/grpo\n")
    link = nobodys_link(tmp_path / "site.yaml", tmp_path / "mine.yaml")
    text = refusal(read_text_file, link, "site")
    assert text.startswith("site: ") and f"{link} is a symbolic link of nobody" in text
    folder_link = nobodys_link(tmp_path / "shared", tmp_path)  # a link of theirs as a folder on the way
    assert f"{folder_link} is a symbolic link of nobody" in refusal(read_text_file, folder_link / "mine.yaml", "site")


def test_a_spec_file_the_user_linked_is_read_and_another_users_file_too(tmp_path):
    (tmp_path / "real.yaml").write_text("a: 1\n")
    (tmp_path / "config.yaml").symlink_to("real.yaml")  # the caller's own link: followed
    assert read_text_file(tmp_path / "config.yaml", "config.yaml") == "a: 1\n"
    owned_by_nobody(tmp_path / "real.yaml")  # an admin's site file: read, not written
    assert read_text_file(tmp_path / "real.yaml", "site") == "a: 1\n"


def test_an_oversize_spec_file_is_refused_unread_naming_its_size(tmp_path):
    text = refusal(read_text_file, sparse(tmp_path / "runtimes.yaml"), "runtime")
    assert text.startswith("runtime: ") and f"{tmp_path / 'runtimes.yaml'} is {3 << 30} bytes" in text
    assert f"over {MAX_FILE_BYTES >> 10} KiB" in text


def test_the_registry_is_read_from_the_descriptor_it_checked(tmp_path, monkeypatch):
    """A swap of the registry file between the check and the read (a FIFO put in its place) changes
    nothing: load_registry reads the one descriptor read_text_file opened and checked."""
    registry = tmp_path / "runtimes.yaml"
    registry.write_text("{}\n")
    real_read = gateway.read_fd

    def swap_then_read(fd, *args, **kwargs):
        registry.unlink()
        os.mkfifo(registry)
        return real_read(fd, *args, **kwargs)

    monkeypatch.setattr(gateway, "read_fd", swap_then_read)
    assert refusal(contracts.load_registry, registry) == "read"
    assert registry.is_fifo()
