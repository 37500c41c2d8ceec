"""A preflight fails on the compile-time warnings that say the real job would stop (issue 35):
launcher/injob/preflight.py's job_stoppers over plan.json's warnings."""
from __future__ import annotations

import json
from pathlib import Path

from launcher.injob import preflight

CPUS = ("verl/grpo-async's driver actors ask 23 CPUs (1 + 10 + 10 + 2, up to 10 on one node) beside verl's GPU "
        "bundles (3 CPUs a training GPU, 2 a rollout GPU), but the pools' nodes leave 12 free (at most 8 on one "
        "node): Ray would wait for CPUs forever; use nodes with more CPUs (the site's cpus_per_node) or more nodes")
HARMLESS = "no validation data: validation is off (test_freq=-1); pass --validation-data FILE to turn it on"


def test_warnings_that_stop_the_job_are_failures(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"warnings": [CPUS, HARMLESS]}))
    assert preflight.job_stoppers(str(tmp_path)) == [f"the real job would stop: {CPUS}"]


def test_no_plan_no_failures(tmp_path):
    assert preflight.job_stoppers(str(tmp_path)) == []


def test_every_phrase_is_a_warning_sf_writes():
    rules = "".join(p.read_text() for p in (Path(preflight.__file__).parents[1] / "compile" / "rules").glob("*.py"))
    for phrase in preflight.STOPS_THE_JOB:
        assert phrase in rules, phrase
