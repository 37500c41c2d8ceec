"""The entry and overrides reach the job once, from plan.json (issue 46). The batch script shows
them (SF_ENTRY, SF_OVERRIDES) and passes the supervisor their digest only: a run's script edited
by hand to show another override, sent with sbatch by hand, is refused at job start with one
line (nothing started); the script as sf wrote it, sent the same way, runs plan.json's values."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import cleanup, phases, render_job, wait_file, wait_terminal  # noqa: E402

# the test hook in place of verl, after the same bring-up: it writes the overrides it was given
DRIVER = 'printf "%s\\n" "$@" > "$FORGE_CLUSTER_RUN_DIR/.driver-args.part" && ' \
         'mv "$FORGE_CLUSTER_RUN_DIR/.driver-args.part" "$FORGE_CLUSTER_RUN_DIR/driver-args.txt"'
SHOWN = "  trainer.save_freq=10\n"  # an override examples/grpo's script shows


def sbatch_by_hand(script: Path) -> str:
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SF_TEST_DRIVER": DRIVER})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def test_a_script_edited_by_hand_is_refused_and_the_one_sf_wrote_runs():
    edited, untouched = render_job("shown-edited"), render_job("shown-untouched")
    script = (edited / "job.sbatch").read_text()
    assert SHOWN in script
    (edited / "job.sbatch").write_text(script.replace(SHOWN, "  trainer.save_freq=3\n", 1))
    jobs = [sbatch_by_hand(edited / "job.sbatch"), sbatch_by_hand(untouched / "job.sbatch")]
    try:
        assert wait_terminal(jobs[0], timeout=180) == "FAILED"
        reason = wait_file(edited / "reason", timeout=60).strip()
        assert reason.startswith("the batch script's overrides differ from plan.json: edit the experiment and "
                                 "submit again"), reason
        assert "\n" not in reason
        # refused before anything started: no Ray node, no driver; one ended phase with the reason
        assert [(e["phase"], e.get("rc"), e.get("reason")) for e in phases(edited)] == [("ended", 2, reason)]
        assert not (edited / "driver-args.txt").exists()

        assert wait_terminal(jobs[1], timeout=420) == "COMPLETED", (untouched / "reason").read_text() \
            if (untouched / "reason").exists() else ""
        plan = json.loads((untouched / "plan.json").read_text())
        assert (untouched / "driver-args.txt").read_text().splitlines() == plan["overrides"]
        assert "trainer.save_freq=10" in plan["overrides"]
    finally:
        for job in jobs:
            cleanup(job)
