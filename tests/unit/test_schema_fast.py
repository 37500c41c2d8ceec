"""launcher.spec.schema_fast: a spec it calls valid is valid to jsonschema too (it only saves
jsonschema's import on the common path)."""
from __future__ import annotations

import copy
import random
from pathlib import Path

import jsonschema
import pytest
import yaml

from launcher.spec.experiment import read_config, schema, schema_errors
from launcher.spec.schema_fast import surely_valid

REPO = Path(__file__).resolve().parents[2]


def _corpus():
    docs = [read_config(REPO / "examples" / name / "config.yaml") for name in ("grpo", "distill")]
    from launcher.cli.cmd_spec import config_text

    for method in ("grpo", "dapo", "ppo", "rloo", "reinforce-baseline", "remax", "distillation", "sft"):
        docs.append(yaml.safe_load(config_text("x", method, "0.9.1")))
    return docs


ODD = [None, True, False, 0, 1, -1, 1.0, 2.5, "", "x", "00:10:00", "verl/grpo", [], ["a"], [1], {}, {"a": 1},
       {"name": "train"}, "0.9.1", 0.9, "h200", [{"name": "t"}], {"files": "/a"}, {"files": ["/a", "/b"]}]


def _mutations(doc, rng, n=300):
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + [k])
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append(path + [i])
                walk(v, path + [i])

    walk(doc, [])
    for _ in range(n):
        out = copy.deepcopy(doc)
        path = rng.choice(paths)
        node = out
        for p in path[:-1]:
            node = node[p]
        if rng.random() < 0.15 and isinstance(node, dict):
            node[rng.choice(["bogus", "knobs", "slurm", "spec", "name"])] = rng.choice(ODD)
        else:
            node[path[-1]] = rng.choice(ODD)
        yield out


def test_fast_valid_implies_jsonschema_valid():
    sch = schema()
    validator = jsonschema.Draft202012Validator(sch)
    rng = random.Random(20)
    fast_yes = 0
    for doc in _corpus():
        assert surely_valid(doc, sch), doc  # the common case takes the fast path
        for mutated in _mutations(doc, rng):
            if surely_valid(mutated, sch):
                fast_yes += 1
                assert not list(validator.iter_errors(mutated)), mutated
    assert fast_yes > 50  # the corpus exercised the fast path, not only the fallback


@pytest.mark.parametrize("doc", [{"method": "verl/grpo", "knobs": {"rollout_n": True}},
                                 {"method": "verl/grpo", "slurm": {"time": "1 day"}},
                                 {"method": "verl/grpo", "modle": "x"}])
def test_problems_still_come_from_jsonschema(doc):
    assert schema_errors(doc)  # the fallback explains them
