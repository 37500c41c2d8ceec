"""The cluster pass's order (tests/cluster/durations.py): every xdist worker's first share
starts with its longest tests, and no test is lost or doubled."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "cluster_durations", Path(__file__).resolve().parents[1] / "cluster" / "durations.py")
durations = importlib.util.module_from_spec(spec)
spec.loader.exec_module(durations)


def test_share_sizes_are_worksteals():
    assert durations.worksteal_share_sizes(103, 4) == [25, 26, 26, 26]
    assert durations.worksteal_share_sizes(5, 6) == [0, 1, 1, 1, 1, 1]


def test_each_worker_starts_with_one_of_the_longest():
    seconds = {f"t{i}": float(i) for i in range(23)}
    for workers in (2, 4, 6):
        order = durations.longest_first_on_every_worker(list(seconds), seconds.get, workers)
        assert sorted(order) == sorted(seconds)
        starts, at = [], 0
        for size in durations.worksteal_share_sizes(len(order), workers):
            share = order[at:at + size]
            assert [seconds[t] for t in share] == sorted((seconds[t] for t in share), reverse=True)
            starts.append(share[0])
            at += size
        longest = sorted(seconds, key=seconds.get, reverse=True)[:workers]
        assert sorted(starts) == sorted(longest), (workers, starts)


def test_durations_from_a_junit_report(tmp_path):
    report = tmp_path / "cluster.xml"
    report.write_text('<testsuites><testsuite><testcase classname="tests.cluster.test_a" name="test_x[1]" '
                      'time="12.34"/><testcase classname="tests.cluster.test_b" name="test_y" time="0.5"/>'
                      '</testsuite></testsuites>')
    assert durations.from_junit(report) == {"tests/cluster/test_a.py::test_x[1]": 12.3,
                                            "tests/cluster/test_b.py::test_y": 0.5}


def test_the_committed_durations_name_cluster_tests_that_exist():
    root = Path(__file__).resolve().parents[2]
    for node_id in durations.load():
        assert (root / node_id.split("::")[0]).is_file(), node_id
