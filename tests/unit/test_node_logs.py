"""A Ray node step's ending names only the logs that exist (issue 35): a node whose container
or srun failed before sf's wrapper ran wrote none, and the reason then names the Slurm job's
output file, where srun's error is; `sf logs` of such a run does not promise them "yet"."""
from __future__ import annotations

import os
import time

from click.testing import CliRunner
from unit_helpers import submitted_run

from launcher.cli.app import main
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


def test_sf_logs_says_yet_only_while_the_run_may_still_write_them(fake_slurm):
    """`sf logs RUN --node dev2` of a run that ended without that node's log said "... yet"."""
    run = submitted_run(fake_slurm.runs_dir, "grpo", "140")
    (run.dir / "logs" / "slurm-140.out").write_text("srun: error: dev2: task 0: Exited with exit code 1\n")
    result = CliRunner().invoke(main, ["logs", run.id, "--node", "dev2"])
    assert result.exit_code == 2 and f"matching --node dev2 in {run.logs_dir} yet;" in result.stderr, result.output
    run.add_state("failed")
    result = CliRunner().invoke(main, ["logs", run.id, "--node", "dev2"])
    assert result.exit_code == 2, result.output
    assert f"no log files matching --node dev2 in {run.logs_dir}; the run ended (failed) without writing them;" \
        in result.stderr, result.stderr
    result = CliRunner().invoke(main, ["logs", run.id, "--ray"])
    assert f"no log files in {run.logs_dir / 'ray'}; the run ended (failed)" in result.stderr, result.stderr
