"""sf doctor's open-files check asks for what a cluster of the partitions' size needs
(doctor.nofile_needed), not Ray's 65535 for every cluster: the dev cluster's 20000 is plenty."""
from launcher.submit.doctor import NOFILE_MIN, node_limit_checks, nofile_needed


def test_the_need_grows_with_nodes_and_cpus_up_to_rays_figure():
    dev = nofile_needed(12, 192)  # the dev cluster: 12 nodes, 16 CPUs each
    assert dev == 4096 + 2 * (12 + 192) < 20000
    assert nofile_needed(64, 64 * 64) > dev
    assert nofile_needed(256, 256 * 224) == NOFILE_MIN


def test_a_limit_under_the_need_warns_and_names_it():
    needed = nofile_needed(12, 192)
    [ok] = [c for c in node_limit_checks("fake", "20000\n20000\n-\n", needed) if c.name == "nofile fake"]
    assert ok.status == "ok" and f">= {needed} needed" in ok.detail
    [low] = [c for c in node_limit_checks("fake", "1024\n4096\n-\n", needed) if c.name == "nofile fake"]
    assert low.status == "warn" and f"< {needed}" in low.detail
    [unknown] = [c for c in node_limit_checks("fake", "20000\n20000\n-\n") if c.name == "nofile fake"]
    assert unknown.status == "warn"  # the size unknown: Ray's large-cluster figure
