"""launcher.live: pools against what the partitions can ever give (pure parts)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import SITE, base, compile_values  # noqa: E402

from launcher import live  # noqa: E402

PARTS = [{"PartitionName": "train"}, {"PartitionName": "teach"}, {"PartitionName": "empty"}]
NODES = [{"NodeName": f"dev{i}", "Gres": "gpu:4", "Partitions": "train,all"} for i in range(1, 7)] + \
        [{"NodeName": "dev7", "Gres": "gpu:h200:8(S:0-1)", "Partitions": "teach,all"},
         {"NodeName": "dev8", "Gres": "(null)", "Partitions": "teach,all"}]


def test_capacity_per_partition():
    cap = live.capacity(PARTS, NODES)
    assert cap["train"] == [4] * 6 and sorted(cap["teach"]) == [0, 8] and cap["empty"] == []
    assert len(cap["all"]) == 8


def _plan(nodes, gpus, **kw):
    plan = compile_values(base("grpo", **kw))
    pool = replace(plan.pools[0], nodes=nodes, gpus_per_node=gpus)
    return replace(plan, pools=(pool, *plan.pools[1:]))


def test_a_pool_the_partition_can_never_hold_names_its_real_size():
    cap = live.capacity(PARTS, NODES)
    errors, _ = live.check(_plan(100, 4), SITE, cap)
    (err,) = errors
    assert err.field == "pools.train"
    msg = str(err)
    assert "100 nodes x 4 GPUs can never run in partition" in msg and "it has 6 nodes" in msg and ":6x4" in msg
    assert live.check(_plan(6, 4), SITE, cap)[0] == []
    errors, _ = live.check(_plan(1, 8), SITE, cap)  # no train node has 8 GPUs
    assert "0 of them with >= 8 GPUs (at most 4 GPUs a node)" in str(errors[0])


def test_a_partition_that_does_not_exist():
    plan = _plan(1, 4)
    plan = replace(plan, slurm=replace(plan.slurm, partition="nope"))
    (err,) = live.check(plan, SITE, live.capacity(PARTS, NODES))[0]
    assert "partition 'nope' does not exist on this cluster (partitions: all, empty, teach, train)" in str(err)


def test_tensor_parallel_that_does_not_divide_the_pool_warns():
    cap = live.capacity(PARTS, NODES)
    plan = _plan(1, 4, knobs={"tensor_model_parallel_size": 3})
    errors, warnings = live.check(plan, SITE, cap)
    assert errors == []
    assert any("tensor_model_parallel_size=3 does not divide pool train's 4 GPUs" in w for w in warnings)
    assert live.check(_plan(1, 4, knobs={"tensor_model_parallel_size": 2}), SITE, cap)[1] == []


def test_node_limits_from_the_probe():
    from launcher.doctor import node_limit_checks

    low = {c.name: c for c in node_limit_checks("h200", "1024\n4096\n1024\n")}
    assert low["nofile h200"].status == "warn" and "hard limit 4096" in low["nofile h200"].detail
    assert low["arp cache h200"].status == "warn" and "gc_thresh3 = 1024" in low["arp cache h200"].detail
    good = {c.name: c.status for c in node_limit_checks("h200", "65535\nunlimited\n8192\n")}
    assert good == {"nofile h200": "ok", "arp cache h200": "ok"}
    assert node_limit_checks("h200", "garbage")[0].status == "fail"
