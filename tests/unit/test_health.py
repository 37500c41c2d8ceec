"""launcher.injob.health: which pairs are tried and who is suspected (pure parts)."""
from __future__ import annotations

from launcher.injob import health


def test_all_pairs_up_to_eight_nodes_then_a_ring():
    assert health.pairs(["a"]) == []
    assert sorted(health.pairs(["a", "b"])) == [("a", "b"), ("b", "a")]
    assert len(health.pairs([f"n{i}" for i in range(8)])) == 56
    ring = health.pairs([f"n{i}" for i in range(10)])
    assert len(ring) == 10 and ("n9", "n0") in ring


def test_a_node_failing_all_its_pairs_is_the_suspect():
    nodes = ["a", "b", "c"]
    tried = health.pairs(nodes)
    results = {p: 0.01 for p in tried}
    for p in tried:
        if "c" in p:
            results[p] = "GetTimeoutError: timed out"
    report = health.summary(results, tried)
    assert not report["ok"] and report["suspect_nodes"] == ["c"] and len(report["failed"]) == 4
    assert report["mode"] == "all pairs" and report["median_mib_per_s"] == 400.0
    assert health.summary({p: 0.02 for p in tried}, tried)["ok"]
