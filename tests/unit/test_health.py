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


def test_gpu_summary_names_the_node_of_a_failed_or_slow_gpu():
    gemm = {("n1", "GPU-a"): 700.0, ("n1", "GPU-b"): 690.0, ("n2", "GPU-c"): 710.0,
            ("n2", "GPU-d"): 300.0, ("n3", "gpu0"): "RayActorError: the actor died"}
    report = health.gpu_summary(gemm, 0.002, world=5)
    assert not report["ok"] and report["suspect_nodes"] == ["n2", "n3"]
    assert report["gemm_median_tflops"] == 695.0 and report["gemm_tflops"]["n2/GPU-d"] == 300.0
    assert any("n2 GPU-d: 300 TFLOP/s" in f for f in report["failed"])
    assert any("n3 gpu0: RayActorError" in f for f in report["failed"])
    # nccl-tests' bus bandwidth: 256 MiB in 2 ms over 5 ranks -> x 2*4/5
    assert report["allreduce"]["busbw_gb_s"] == round((256 << 20) / 0.002 * 1.6 / 1e9, 1)


def test_gpu_summary_all_reduce_failure_fails_without_a_suspect_and_one_gpu_skips_it():
    gemm = {("n1", "GPU-a"): 700.0, ("n2", "GPU-b"): 705.0}
    failed = health.gpu_summary(gemm, "GetTimeoutError: timed out", world=2)
    assert not failed["ok"] and failed["suspect_nodes"] == []
    assert failed["failed"] == ["NCCL all-reduce over 2 GPUs: GetTimeoutError: timed out"]
    single = health.gpu_summary({("n1", "GPU-a"): 700.0}, None, world=1)
    assert single["ok"] and single["allreduce"]["skipped"].startswith("one GPU")


def test_gpu_checks_skip_a_job_without_gpus():
    assert health.gpu_checks(ray=None, gpus_by_node={"n1": 0, "n2": 0}) is None
