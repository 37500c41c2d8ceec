"""A Ray node step's ending names only the logs that exist (issue 35): a node whose container
or srun failed before sf's wrapper ran wrote none, and the reason then names the Slurm job's
output file, where srun's error is."""
from __future__ import annotations

import os
import time

from launcher.injob.node_logs import job_output_name, node_log_name, node_logs_text


def test_a_node_log_is_named_as_the_node_wrapper_writes_it():
    assert node_log_name("41", "head", "train", "dev1") == "41-ray-head-dev1.log"
    assert node_log_name("41", "worker", "teach", "dev7") == "41-ray-teach-dev7.log"


def test_the_job_output_file_of_a_job_and_of_an_array_task():
    assert job_output_name("41", {}) == "slurm-41.out"
    assert job_output_name("57", {"SLURM_ARRAY_JOB_ID": "50", "SLURM_ARRAY_TASK_ID": "3"}) == "slurm-50_3.out"


def test_no_node_log_names_the_job_output_file_instead(tmp_path):
    (tmp_path / "logs").mkdir()
    text = node_logs_text(str(tmp_path), "41", "ray-train", ["dev2", "dev3"], since=time.time() - 5, environ={})
    assert text == ("dev2, dev3 wrote no node log: sf's node wrapper never started there (the step's container "
                    "or srun failed before it ran); srun's own error is in logs/slurm-41.out")
    assert "ray-*" not in text and ".log" not in text


def test_only_the_logs_written_in_this_start_are_named(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    start = time.time()
    (logs / "41-ray-train-dev2.log").write_text("ray start ...\n")
    old = logs / "41-ray-train-dev3.log"  # an earlier attempt's (a requeue keeps the job id)
    old.write_text("attempt 0\n")
    os.utime(old, (start - 600, start - 600))
    text = node_logs_text(str(tmp_path), "41", "ray-train", ["dev2", "dev3"], since=start - 1, environ={})
    assert text == ("see logs/41-ray-train-dev2.log; dev3 wrote no node log: sf's node wrapper never started "
                    "there (the step's container or srun failed before it ran); srun's own error is in "
                    "logs/slurm-41.out")
    both = node_logs_text(str(tmp_path), "41", "ray-train", ["dev2", "dev3"], since=start - 3600, environ={})
    assert both == "see logs/41-ray-train-dev2.log, logs/41-ray-train-dev3.log"
