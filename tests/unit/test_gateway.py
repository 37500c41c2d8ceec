"""launcher.gateway on local folders: links of another user, FIFOs, devices, size caps, owners,
atomic writes. The tests run as root and play the other user (`nobody`) by lchown."""
from __future__ import annotations

import os
import pwd
import stat
import threading

import pytest

from launcher import gateway
from launcher.gateway import UnsafeFile

NOBODY = pwd.getpwnam("nobody")
pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="plays another user by chown: runs as root")


def owned_by_nobody(path) -> None:
    os.lchown(path, NOBODY.pw_uid, NOBODY.pw_gid)


def test_a_link_of_another_user_on_the_path_is_refused_naming_it(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "record.json").write_text("{}")
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "real")
    owned_by_nobody(link)
    with pytest.raises(UnsafeFile, match=r"runs is a symbolic link of nobody") as err:
        gateway.read_bytes(link / "record.json", "runs_dir")
    assert err.value.path == str(link)
    with pytest.raises(UnsafeFile):
        gateway.resolve(link)


def test_a_link_of_the_caller_is_followed_and_resolve_gives_the_real_path(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("hello")
    (tmp_path / "rel").symlink_to("a/b")
    (tmp_path / "a" / "up").symlink_to("../a/b")
    assert gateway.read_text(tmp_path / "rel" / "f") == "hello"
    assert gateway.read_text(tmp_path / "a" / "up" / "f") == "hello"
    assert gateway.resolve(tmp_path / "rel") == os.path.realpath(tmp_path / "a" / "b")
    assert gateway.resolve(tmp_path / "a" / "up") == os.path.realpath(tmp_path / "a" / "b")


def test_a_link_loop_is_refused_not_walked_forever(tmp_path):
    (tmp_path / "x").symlink_to("y")
    (tmp_path / "y").symlink_to("x")
    with pytest.raises(UnsafeFile, match="too many symbolic links"):
        gateway.resolve(tmp_path / "x" / "z")


def test_a_fifo_is_refused_at_once_without_blocking(tmp_path):
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert outcome and "is a FIFO" in outcome[0] and "remove it" in outcome[0]


def _refusal(path) -> str:
    try:
        gateway.read_bytes(path)
    except UnsafeFile as exc:
        return str(exc)
    return "read"


def test_a_device_a_folder_and_a_final_link_are_not_read(tmp_path):
    assert "is a device" in _refusal("/dev/zero")
    (tmp_path / "dir").mkdir()
    assert "is a folder" in _refusal(tmp_path / "dir")
    (tmp_path / "secret").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    assert "is a symbolic link" in _refusal(tmp_path / "link")


def test_a_sparse_file_over_the_cap_is_refused_naming_the_cap(tmp_path):
    big = tmp_path / "record.json"
    with open(big, "wb") as handle:
        handle.truncate(3 << 30)
    with pytest.raises(UnsafeFile, match=r"3221225472 bytes, over the 1000 bytes"):
        gateway.read_bytes(big, limit=1000)
    with pytest.raises(UnsafeFile, match=f"over the {gateway.MAX_READ} bytes"):
        gateway.read_bytes(big)


def test_a_file_of_another_user_is_refused_unless_any_owner(tmp_path):
    planted = tmp_path / "reason"
    planted.write_text("planted")
    owned_by_nobody(planted)
    with pytest.raises(UnsafeFile, match="belongs to nobody"):
        gateway.read_text(planted)
    assert gateway.read_text(planted, any_owner=True) == "planted"


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        gateway.read_bytes(tmp_path / "absent")
    assert gateway.entries(tmp_path / "absent") == []


def test_write_is_atomic_private_and_replaces_a_planted_link_not_its_target(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "plan.json").symlink_to(target)
    gateway.write(tmp_path / "run" / "plan.json", "{}")
    assert target.read_text() == "keep"
    written = tmp_path / "run" / "plan.json"
    assert not written.is_symlink() and written.read_text() == "{}"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path / "run")) == ["plan.json"]  # no temp file left


def test_write_into_a_folder_of_another_user_or_open_to_others_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    owned_by_nobody(theirs)
    with pytest.raises(UnsafeFile, match="belongs to nobody"):
        gateway.write(theirs / "x", "data")
    open_one = tmp_path / "open"
    open_one.mkdir()
    open_one.chmod(0o777)
    with pytest.raises(UnsafeFile, match="writable by other users"):
        gateway.write(open_one / "x", "data")
    assert os.listdir(theirs) == [] and os.listdir(open_one) == []


def test_open_own_refuses_a_fifo_and_a_link_and_appends_to_the_callers_file(tmp_path):
    (tmp_path / "run").mkdir(mode=0o700)
    os.mkfifo(tmp_path / "run" / "fifo")
    with pytest.raises(UnsafeFile, match="FIFO"):
        gateway.open_own(tmp_path / "run" / "fifo", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    (tmp_path / "run" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeFile, match="symbolic link"):
        gateway.open_own(tmp_path / "run" / "link", os.O_WRONLY | os.O_CREAT)
    assert not (tmp_path / "elsewhere").exists()
    for line in (b"a\n", b"b\n"):
        fd = gateway.open_own(tmp_path / "run" / "events", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line)
        os.close(fd)
    assert (tmp_path / "run" / "events").read_bytes() == b"a\nb\n"


def test_make_dir_sets_the_mode_whatever_the_umask_and_refuses_a_planted_one(tmp_path):
    old = os.umask(0)
    try:
        made = gateway.make_dir(tmp_path / "run", 0o700)
    finally:
        os.umask(old)
    assert made == os.path.realpath(tmp_path / "run")
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700
    with pytest.raises(FileExistsError):
        gateway.make_dir(tmp_path / "run")
    gateway.make_dir(tmp_path / "run", exist_ok=True)
    (tmp_path / "planted").symlink_to(tmp_path / "run")
    with pytest.raises(UnsafeFile, match="not a folder sf made"):
        gateway.make_dir(tmp_path / "planted", exist_ok=True)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    owned_by_nobody(theirs)
    with pytest.raises(UnsafeFile, match="belongs to nobody"):
        gateway.make_dir(theirs, exist_ok=True)


def test_remove_tree_removes_links_inside_never_their_targets(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    doomed = tmp_path / "doomed"
    (doomed / "sub").mkdir(parents=True)
    (doomed / "sub" / "f").write_text("y")
    (doomed / "link").symlink_to(keep)
    gateway.remove_tree(doomed)
    assert not doomed.exists() and (keep / "precious").read_text() == "x"
    gateway.remove_tree(doomed)  # already gone: fine


def test_the_refusal_is_one_line_with_exit_code_2(tmp_path):
    os.mkfifo(tmp_path / "reason")
    with pytest.raises(UnsafeFile) as err:
        gateway.read_text(tmp_path / "reason", "run")
    assert err.value.exit_code == 2 and "\n" not in str(err.value) and str(err.value).startswith("run: ")
