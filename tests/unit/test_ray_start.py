"""launcher.injob.ray_start: which of Ray's head processes are left out, on a stand-in for
Ray's Node class (the real one is exercised by every cluster test's `ray start`)."""
from launcher.injob.ray_start import skip_unused_head_processes


def node_class():
    class Node:
        def start_ray_client_server(self):
            return "client server started"

        def start_api_server(self, *, include_dashboard, raise_on_failure):
            return "dashboard started"

    return Node


def test_dashboard_off_skips_the_client_server_and_the_dashboard_head():
    node = node_class()
    skipped = skip_unused_head_processes(node, ["ray", "start", "--head", "--include-dashboard=false"])
    assert skipped == ["start_ray_client_server", "start_api_server"]
    assert node().start_ray_client_server() is None
    assert node().start_api_server(include_dashboard=False, raise_on_failure=False) is None


def test_a_site_dashboard_still_starts():
    node = node_class()
    argv = ["ray", "start", "--head", "--include-dashboard=true", "--dashboard-port=8265"]
    assert skip_unused_head_processes(node, argv) == ["start_ray_client_server"]
    assert node().start_api_server(include_dashboard=True, raise_on_failure=True) == "dashboard started"


def test_a_ray_without_those_methods_starts_as_it_is():
    class Node:
        pass

    assert skip_unused_head_processes(Node, ["ray", "start", "--include-dashboard=false"]) == []
    assert not hasattr(Node, "start_api_server")


def test_the_module_name_is_one_fact():
    """node.py runs `python -m ray_start.MODULE`; the stacks dump (a file run alone, without sf)
    writes the same name out to leave that process out."""
    from launcher.injob import ray_start, stacks

    assert ray_start.MODULE == ray_start.__name__
    assert ray_start.MODULE in stacks.RAY_OWN_ARGS
