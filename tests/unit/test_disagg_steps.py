"""benchmarks/gpu/disagg_steps.py reads what a requeue lost from verl's own lines (the H200's
fully async run of 2026-12-02: RESULTS.md part 9), since the file logger's rows cannot say it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "gpu"))
from disagg_steps import resumes  # noqa: E402

# abridged from tiny-async-gatif's slurm-1.out: attempt 0 synced version 5 and was saving
# global_step_5 when USR1 came; attempt 1 loaded global_step_4
TRAINER = "\x1b[36m(FullyAsyncTrainer pid=3242)\x1b[0m [FullyAsyncTrainer]"
CKPT = "/tmp/sfw/runs/r/checkpoints"
ASYNC_LOG = "\n".join([
    f"{TRAINER} _fit_update_weights, timing_s/param_sync: 0.3411 seconds self.current_param_version: 4",
    f"{TRAINER} _fit_update_weights, timing_s/param_sync: 0.3338 seconds self.current_param_version: 5",
    f"{TRAINER} local_global_step_folder: {CKPT}/global_step_5",
    "slurmstepd-n1: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-02T03:12:11 DUE TO JOB REQUEUE ***",
    f"{TRAINER} Found checkpoint: %s {CKPT}/global_step_4",
    f"{TRAINER} Load from checkpoint folder: {CKPT}/global_step_4",
    f"{TRAINER} _fit_update_weights, timing_s/param_sync: 0.3 seconds self.current_param_version: 5",
]) + "\n"

# one-step-off names no parameter version: only the folder it loaded
OSP_LOG = """\
\x1b[36m(OneStepTaskRunner pid=19377)\x1b[0m Found checkpoint: %s /tmp/sfw/runs/o/checkpoints/global_step_5
\x1b[36m(OneStepTaskRunner pid=19377)\x1b[0m Load from checkpoint folder: /tmp/sfw/runs/o/checkpoints/global_step_5
"""


def write_log(tmp_path, text):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "slurm-1.out").write_text(text)
    return str(tmp_path)


def test_fully_async_requeue_redid_the_version_it_was_saving(tmp_path):
    run_dir = write_log(tmp_path, ASYNC_LOG)
    assert resumes(run_dir) == [
        {"loaded": "global_step_4", "last_version_synced_before": 5, "versions_redone": 1}]


def test_one_step_off_resume_names_the_folder_only(tmp_path):
    assert resumes(write_log(tmp_path, OSP_LOG)) == [{"loaded": "global_step_5"}]


def test_a_run_never_requeued_has_no_resume(tmp_path):
    assert resumes(write_log(tmp_path, ASYNC_LOG.split("slurmstepd")[0])) == []
