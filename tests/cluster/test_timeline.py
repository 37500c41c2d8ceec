"""The startup timeline on the dev cluster: verl's phases read from the driver's log, per attempt.

The driver is the SF_TEST_DRIVER hook printing verl 0.9.1's own lines as a Ray driver shows
them (Ray's actor prefix and colours, the v1 trainer's "INFO:<time>:" logger, the rollout
servers' print, the step line): the first attempt trains from scratch, is requeued by the
USR1 trap, and the second resumes from step 2. `sf status RUN --timeline --json` lists both
attempts with sf's phases and verl's, and `sf plot RUN --timeline` draws them.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import cleanup, phases, requeue_experiment, sf, wait_event, wait_state  # noqa: E402

DRIVER = r"""
n="${SLURM_RESTART_COUNT:-0}"
p='\033[36m(TaskRunnerV1 pid=4242)\033[0m '
say() { printf "$p%s\n" "$1"; sleep 0.6; }
say "INFO:2026-12-01 22:07:59,800:train and validate dataloader initialized, train dataset size: 256"
say "INFO:2026-12-01 22:08:03,603:create worker group dict_keys(['actor_rollout_ref'])"
say "INFO:2026-12-01 22:08:44,799:actor and ref model engine initialized"
say "LLMServerManager: ['127.0.0.1:43655']"
if [ "$n" -ge 1 ]; then
  say "INFO:2026-12-01 22:15:34,864:Resuming from $FORGE_CLUSTER_RUN_DIR/checkpoints/global_step_2, setting global step"
  say "INFO:2026-12-01 22:15:35,209:all initialize finished, ready to fit"
  say "step:3 - global_seqlen/min:1560.0 - critic/score/mean:0.25"
  exit 0
fi
say "INFO:2026-12-01 22:12:04,372:Training from scratch"
say "INFO:2026-12-01 22:12:04,372:all initialize finished, ready to fit"
say "step:1 - global_seqlen/min:1485.0 - critic/score/mean:0.02"
exec sleep 600
"""

VERL_FIRST = ["dataloader_ready", "workers_created", "actor_ready", "rollout_ready", "from_scratch", "ready_to_fit",
              "first_step"]
VERL_RESUMED = ["dataloader_ready", "workers_created", "actor_ready", "rollout_ready", "resumed", "ready_to_fit",
                "first_step"]


def test_timeline_lists_verls_phases_per_attempt_across_a_requeue(tmp_path):
    exp = requeue_experiment(tmp_path, max_requeues=2)
    proc = sf("submit", exp, "--json", env={"SF_TEST_DRIVER": DRIVER})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run, run_dir, job = out["run"], Path(out["run_dir"]), out["job_id"]
    try:
        wait_event(run_dir, "driver_started", restart=0, timeout=150)
        deadline = time.monotonic() + 60
        while not [e for e in phases(run_dir) if e.get("name") == "first_step"] and time.monotonic() < deadline:
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        wait_event(run_dir, "driver_started", restart=1, timeout=150)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=90) == "COMPLETED"

        proc = sf("status", run, "--timeline", "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["run"] == run and len(doc["attempts"]) == 2, doc
        first, second = doc["attempts"]
        assert (first["restart"], second["restart"]) == (0, 1)
        sf_names = [e["phase"] for e in first["events"] if e["source"] == "sf"]
        assert sf_names[:1] == ["allocated"]
        assert {"head_up", "all_joined", "driver_started", "requeued"} <= set(sf_names), sf_names
        assert [e["name"] for e in first["events"] if e["source"] == "verl"] == VERL_FIRST
        assert [e["name"] for e in second["events"] if e["source"] == "verl"] == VERL_RESUMED
        resumed = next(e for e in second["events"] if e["name"] == "resumed")
        assert resumed["label"] == "verl: resumed from step 2", resumed
        assert next(e for e in second["events"] if e["name"] == "first_step")["label"] == "verl: first step (step 3)"
        for attempt in (first, second):
            # the driver sleeps 0.6 s after each of its 7 lines: verl's part spans at least 6 of them
            assert attempt["sf_s"] > 0 and attempt["verl_s"] >= 3.0, attempt
            assert all(e["took_s"] >= 0 for e in attempt["events"])
        assert second["queued_s"] is not None and second["queued_s"] >= 0

        text = sf("status", run, "--timeline")
        assert text.returncode == 0 and "attempt 2 (job" in text.stdout and "verl: resumed from step 2" in text.stdout
        png = tmp_path / "timeline.png"
        drawn = sf("plot", run, "--timeline", "-o", str(png), "--json")
        assert drawn.returncode == 0, drawn.stderr
        assert json.loads(drawn.stdout)["attempts"] == 2 and png.read_bytes()[:4] == b"\x89PNG"
        print("\n" + text.stdout)
    finally:
        cleanup(job)
