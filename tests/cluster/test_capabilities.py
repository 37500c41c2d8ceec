"""What a method needs from the runtime, checked in the job (issue 22, item 5), on the dev
cluster. The dev runtime has no flash-attn, and verl/ppo's critic needs it (verl 0.9.1
loads the value-head model with flash_attention_2 whatever the overrides say):

  - `sf submit examples/ppo --preflight` fails, its reason naming the capability, the
    method and the fix, preflight.json saying which check;
  - the real job refuses before Ray starts: no node started, no driver, the same reason;
  - on a runtime published without the sdpa defaults, a GRPO job (whose model verl builds
    with flash_attention_2 when override_config names no attention) refuses the same way,
    naming the override that fixes it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    RUNS,
    phases,
    sf,
    submit_preflight,
)

FIX = ("runtime capability flash_attn missing", "verl/ppo", "install flash-attn in the runtime",
       "pick a method without a critic")


def test_ppo_preflight_fails_naming_flash_attn_the_method_and_the_fix():
    out = submit_preflight("examples/ppo")
    assert out["rc"] != 0, out
    report = out["preflight"]
    assert report["ok"] is False and report["ray_nodes"] == 2  # every other check ran too
    assert report["capabilities"]["flash_attn"]["ok"] is False
    assert "No module named 'flash_attn'" in report["capabilities"]["flash_attn"]["error"]
    failing = [f for f in report["failures"] if "flash_attn" in f]
    assert len(failing) == 1 and all(part in failing[0] for part in FIX), failing
    assert all(part in str(out.get("reason")) for part in FIX), out.get("reason")


def test_ppo_real_job_refuses_before_ray_starts():
    proc = sf("submit", "examples/ppo", "--wait", "--json", timeout=240)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert proc.returncode != 0, out
    reason = str(out.get("reason"))
    assert all(part in reason for part in FIX) and "checked before Ray started" in reason, reason
    names = [e["phase"] for e in phases(RUNS / out["run"])]
    assert "capabilities_checked" in names and "ended" in names, names
    assert not {"node_started", "head_up", "all_joined", "driver_started"} & set(names), names


def test_grpo_on_a_runtime_without_sdpa_defaults_refuses_naming_the_attention_override(tmp_path):
    import yaml

    registry = yaml.safe_load(Path("/var/lib/sfdev/runtimes.yaml").read_text())
    for entry in registry["verl"].values():
        entry.pop("overrides", None)  # as a site that has not set sdpa for its flash-attn-less image
    path = tmp_path / "runtimes.yaml"
    path.write_text(yaml.safe_dump(registry))
    proc = sf("submit", "examples/grpo", "--wait", "--json", env={"FORGE_RUNTIME_REGISTRY_FILE": str(path)})
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert proc.returncode != 0, out
    reason = str(out.get("reason"))
    for part in ("runtime capability flash_attention_2 missing", "verl/grpo",
                 "+actor_rollout_ref.model.override_config.attn_implementation=sdpa", "checked before Ray started"):
        assert part in reason, reason
    names = [e["phase"] for e in phases(RUNS / out["run"])]
    assert "capabilities_checked" in names and not {"node_started", "driver_started"} & set(names), names
