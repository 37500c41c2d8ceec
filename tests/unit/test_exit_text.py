"""A driver's ending named as it happened (launcher/injob/failure_text.py exit_text, oom_kills)."""
from __future__ import annotations

from pathlib import Path

from launcher.injob import failure_text


def test_an_exit_code_is_an_exit_code():
    assert failure_text.exit_text(3) == "exited with 3"


def test_a_signal_is_named_and_sigkill_points_at_memory():
    assert failure_text.exit_text(-15) == "was killed by SIGTERM"
    assert failure_text.exit_text(-9).startswith("was killed by SIGKILL (out of memory? ")
    assert "the kernel's OOM killer killed a process of this job" in failure_text.exit_text(-9, oom_killed=2)
    assert failure_text.exit_text(-200) == "was killed by signal 200"


def test_128_plus_a_signal_is_named_too():
    """What a shell or srun reports for a child killed by signal N (issue 35)."""
    assert failure_text.exit_text(143) == "exited with 143 = 128 + SIGTERM"
    assert failure_text.exit_text(137).startswith("exited with 137 = 128 + SIGKILL (out of memory? ")
    assert failure_text.exit_text(255) == "exited with 255" and failure_text.exit_text(128) == "exited with 128"


def test_oom_kills_are_read_from_this_process_cgroup(tmp_path, monkeypatch):
    real_read = Path.read_text

    def fake_read(self, *args, **kwargs):
        if str(self) == "/proc/self/cgroup":
            return "0::/job_7/step_batch\n"
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", fake_read)
    events = tmp_path / "job_7" / "step_batch"
    events.mkdir(parents=True)
    (events / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    assert failure_text.oom_kills(str(tmp_path)) == 1
    (events / "memory.events").write_text("low 0\noom_kill 0\n")
    assert failure_text.oom_kills(str(tmp_path)) == 0
    assert failure_text.oom_kills(str(tmp_path / "nowhere")) is None
