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


def fake_ray(root, scripts_py: str):
    """A stand-in `ray` package under root: its CLI module (scripts_py) and one CLI group."""
    for package in ("ray", "ray/scripts", "ray/util", "ray/util/state"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "ray/util/state/state_cli.py").write_text("ray_list = 'the list group'\n")
    (root / "ray/scripts/scripts.py").write_text(scripts_py)


def cli_groups(root) -> tuple[list, bool]:
    """(the groups the stand-in CLI took, whether the group's module was imported), in a fresh
    interpreter as `python -m launcher.injob.ray_start` has it."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from launcher.injob.ray_start import import_ray_cli; "
            "cli = import_ray_cli(); "
            "print(json.dumps([cli.groups, sys.modules.get('ray.util.state.state_cli') is not None]))")
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return tuple(json.loads(proc.stdout))


def test_the_cli_groups_ray_imports_optionally_are_left_out(tmp_path):
    fake_ray(tmp_path, "groups = []\ntry:\n    from ray.util.state.state_cli import ray_list\n"
                       "    groups.append(ray_list)\nexcept ImportError:\n    pass\n")
    assert cli_groups(tmp_path) == ([], False)


def test_a_ray_cli_that_needs_a_group_is_imported_in_full(tmp_path):
    fake_ray(tmp_path, "from ray.util.state.state_cli import ray_list\ngroups = [ray_list]\n")
    assert cli_groups(tmp_path) == (["the list group"], True)


def dashboard_deps(root, optional_deps_py: str, installed: tuple[str, ...]):
    """(dashboard_deps_found's answer, Ray's own test's answer, which packages got imported) in a
    fresh interpreter, over a stand-in Ray whose ray.dashboard.optional_deps is
    optional_deps_py and with the stand-in packages `installed` (each records its import)."""
    import json
    import subprocess
    import sys

    for package in ("ray", "ray/dashboard"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "ray/dashboard/optional_deps.py").write_text(optional_deps_py)
    for name in installed:
        (root / name).mkdir()
        (root / name / "__init__.py").write_text("import sys\nsys.imported_deps = getattr(sys, 'imported_deps', []) + "
                                                 f"[{name!r}]\n")
        (root / name / "web.py").write_text("")
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from launcher.injob.ray_start import dashboard_deps_found, _ray_dependency_test; "
            "found = dashboard_deps_found(); imported = list(getattr(sys, 'imported_deps', [])); "
            "ray_own = _ray_dependency_test(); "
            "print(json.dumps([found and str(found), ray_own and str(ray_own), imported]))")
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return tuple(json.loads(proc.stdout))


DEPS_PY = "import depa  # noqa\nimport depa.web  # noqa\nfrom depb import x  # noqa\n"


def test_the_dashboard_packages_are_looked_for_not_imported(tmp_path):
    found, ray_own, imported = dashboard_deps(tmp_path, DEPS_PY.replace("from depb import x", "import depb"),
                                              ("depa", "depb"))
    assert found is None and ray_own is None  # the same answer as Ray's: installed
    assert imported == []  # and none of them imported to give it


def test_a_missing_dashboard_package_gives_rays_answer(tmp_path):
    found, ray_own, _ = dashboard_deps(tmp_path, DEPS_PY, ("depa",))
    assert found == "No module named 'depb'" and ray_own == "No module named 'depb'"


def test_rays_test_is_replaced_where_it_exists():
    from types import SimpleNamespace

    from launcher.injob.ray_start import dashboard_deps_found, look_for_dashboard_deps

    utils = SimpleNamespace(get_dashboard_dependency_error=lambda: "imports everything")
    assert look_for_dashboard_deps(utils) is True and utils.get_dashboard_dependency_error is dashboard_deps_found
    assert look_for_dashboard_deps(SimpleNamespace()) is False
