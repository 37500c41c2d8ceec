"""Each reader that goes through launcher.gateway refuses what a planted path would make it read:
a FIFO (at once, never blocking), a symbolic link of another user (or a link where a file
should be), a file over its size cap (named with its size), each with one line naming the path.
The tests run as root and play the other user (`nobody`) by lchown."""
from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher import checkpoints, gateway
from launcher.cli.cmd_logs import stack_files
from launcher.errors import SpecError
from launcher.injob import failure_text, private
from launcher.injob.record_keeper import RecordKeeper
from launcher.spec import contracts
from launcher.spec.files import MAX_FILE_BYTES, read_text_file

REPO = Path(__file__).resolve().parents[2]

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


# --- a checkpoint's tracker and listing (launcher.checkpoints) -----------------------------------

def test_a_tracker_that_is_a_fifo_a_link_or_huge_gives_no_step_and_a_clear_refusal(tmp_path):
    ckpt = tmp_path / "checkpoints"
    (ckpt / "global_step_5" / "actor").mkdir(parents=True)
    tracker = ckpt / checkpoints.TRACKER
    os.mkfifo(tracker)
    assert checkpoints.tracked_step(str(ckpt)) is None
    assert f"{tracker} is a FIFO" in refusal(checkpoints.find_actor_dir, ckpt)
    tracker.unlink()
    (tmp_path / "five").write_text("5")
    tracker.symlink_to(tmp_path / "five")  # a link where verl writes a file
    assert checkpoints.tracked_step(str(ckpt)) is None
    assert f"{tracker} is a symbolic link" in refusal(checkpoints.find_actor_dir, ckpt)
    tracker.unlink()
    sparse(tracker)
    assert checkpoints.tracked_step(str(ckpt)) is None
    assert f"{tracker} is {3 << 30} bytes" in refusal(checkpoints.find_actor_dir, ckpt)
    tracker.unlink()
    tracker.write_text("5")
    owned_by_nobody(tracker)  # planted in the run's own checkpoints: not the run's step
    assert checkpoints.tracked_step(str(ckpt)) is None
    os.lchown(tracker, 0, 0)
    assert checkpoints.tracked_step(str(ckpt)) == 5


def test_a_checkpoint_through_a_link_of_another_user_is_refused_naming_it(tmp_path):
    (tmp_path / "real" / "global_step_5").mkdir(parents=True)
    link = nobodys_link(tmp_path / "ckpt", tmp_path / "real")
    assert f"{link} is a symbolic link of nobody" in refusal(checkpoints.find_actor_dir, link)
    assert checkpoints.tracked_step(str(link)) is None


def test_a_step_folder_that_is_a_link_is_not_a_step(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "global_step_9").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "global_step_3").mkdir()
    assert checkpoints._step_dirs(tmp_path) == [3]


# --- the job's own files: preflight.json, the batch log, the reason (launcher.injob) ---------------

def test_the_driver_failure_reads_no_fifo_no_link_no_huge_preflight_report(tmp_path):
    report = tmp_path / "preflight.json"
    os.mkfifo(report)
    assert refusal(failure_text.driver_failure, str(tmp_path), "preflight") == "read"  # None, at once
    assert failure_text.driver_failure(str(tmp_path), "preflight") is None
    report.unlink()
    (tmp_path / "theirs.json").write_text('{"failures": ["planted"]}')
    report.symlink_to(tmp_path / "theirs.json")
    assert failure_text.driver_failure(str(tmp_path), "preflight") is None
    report.unlink()
    sparse(report)
    assert failure_text.driver_failure(str(tmp_path), "preflight") is None
    report.unlink()
    report.write_text('{"failures": ["runtime: no verl"]}')
    assert failure_text.driver_failure(str(tmp_path), "preflight") == "runtime: no verl"


def test_the_driver_failure_reads_the_tail_of_the_batch_log_its_stdout_is(tmp_path):
    log = tmp_path / "batch.log"
    code = ("import sys; from launcher.injob import failure_text\n"
            "print('x' * 300000); print('Traceback (most recent call last):'); print('  File \"a\", line 1')\n"
            "print('ValueError: bad'); sys.stdout.flush()\n"
            "sys.stderr.write(str(failure_text.driver_failure('/nonexistent', 'driver')))\n")
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.PIPE, text=True,
                              cwd=REPO, timeout=60)
    assert done.stderr == "ValueError: bad"
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert piped.stderr == "None"  # stdout a pipe: no log to read, and no hang


def test_clear_reason_removes_a_planted_link_not_its_target(tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (tmp_path / "victim").write_text("keep")
    (run / "reason").symlink_to(tmp_path / "victim")
    RecordKeeper(str(run), "1").clear_reason()
    assert not os.path.lexists(run / "reason") and (tmp_path / "victim").read_text() == "keep"
    RecordKeeper(str(run), "1").clear_reason()  # nothing there: fine


# --- the stacks `sf logs --stacks` lists (launcher.cli.cmd_logs.stack_files) ------------------------

def test_stack_files_lists_only_real_folders_and_files(tmp_path):
    hang = tmp_path / "stacks" / "7-0"
    hang.mkdir(parents=True)
    (hang / "n1.txt").write_text("stack")
    os.mkfifo(hang / "n2.txt")
    (hang / "n3.txt").symlink_to(tmp_path / "secret")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "n4.txt").write_text("planted")
    (tmp_path / "stacks" / "8-0").symlink_to(tmp_path / "elsewhere")
    assert stack_files(tmp_path) == [hang / "n1.txt"]
    assert stack_files(tmp_path, "n2") == []
    big = sparse(hang / "n5.txt")
    assert stack_files(tmp_path, "n5") == [big]  # listed; its read is capped:
    assert f"{big} is {3 << 30} bytes" in refusal(gateway.read_text, big, "--stacks")
    link = nobodys_link(tmp_path / "run", tmp_path)
    assert f"{link} is a symbolic link of nobody" in refusal(stack_files, link)


# --- a node's private folders and port locks (launcher.injob.private) -------------------------------

def test_private_dirs_are_made_and_removed_through_descriptors(tmp_path):
    root = tmp_path / "tmp"
    root.mkdir(mode=0o1777)
    root.chmod(0o1777)
    made = private.make_private_dir(str(root), "7", "n1")
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700 and os.path.dirname(made) == str(root)
    assert (Path(made) / private.MARK).read_text() == f"7 n1 {os.getpid()}\n"
    keep = tmp_path / "keep"
    keep.mkdir()
    (Path(made) / "link").symlink_to(keep)
    assert private.remove_private_dir(made) and not os.path.lexists(made) and keep.is_dir()
    theirs = root / "sfabcdefgh"  # not sf's: no mark
    theirs.mkdir()
    assert not private.remove_private_dir(str(theirs)) and theirs.is_dir()


def test_a_planted_mark_or_temp_root_link_is_refused(tmp_path):
    root = tmp_path / "tmp"
    root.mkdir()
    stale = root / "sfzzzzzzzz"
    stale.mkdir()
    os.mkfifo(stale / private.MARK)  # a FIFO as the mark: skipped at once
    os.utime(stale, (0, 0))
    assert refusal(private.sweep_stale, str(root)) == "read" and stale.is_dir()
    link = nobodys_link(tmp_path / "temp", tmp_path)  # a link of theirs on the way to the temp root
    with pytest.raises(private.UnsafeDir, match=f"{link} is a symbolic link of nobody"):
        private.make_private_dir(str(link / "tmp"))
    assert private.lock_dir(str(link / "tmp")) is None
    with pytest.raises(private.UnsafeDir, match="is not a directory"):
        private.make_private_dir(str(nobodys_link(tmp_path / "tmp2", root)))  # the root itself a link
