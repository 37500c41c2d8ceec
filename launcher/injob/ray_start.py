"""`ray start` as Ray's own CLI runs it (`python -m launcher.injob.ray_start start ...`, same
arguments), less two head processes that a job sf starts never uses:

  - the Ray Client server (`ray.util.client.server`): it serves `ray://` drivers from outside
    the cluster; sf's drivers, the preflight, the barrier and `sf attach` all join through the
    GCS address inside the job. Ray 2.60 starts it whenever grpc is installed and refuses
    --ray-client-server-port=0, so no argument turns it off. Without it the head has one
    listener less on the node's address.
  - the dashboard head process when the dashboard is off (--include-dashboard=false, sf's
    default): Ray 2.60 still starts it, loading only its usage-stats module (sf turns usage
    stats off), so it serves nothing.

Each costs about 1.2 CPU-s at every start of a head (and about 100 MiB while it runs); on a
busy login-node-sized host that is a good part of what a small job's bring-up costs.

On every node, Ray's test of whether the dashboard's optional packages are installed (`ray`
against `ray[default]`: the dashboard agent then runs with `--minimal` or not) looks for
them instead of importing them all: Ray imports `ray.dashboard.optional_deps` (aiohttp, grpc,
opentelemetry, prometheus_client, pydantic, ...) in `ray start` only to decide that one flag,
about 0.6 CPU-s of every node's start, and the agent imports them again itself. The packages
are those that module imports (read from its source, so a Ray version's own list counts); a
package present but broken at import would now reach the agent, which fails on it by name.

On every node it also leaves out the import of Ray's CLI groups that `ray start` never runs
(`ray list/get/summary/logs`, `ray job`, `ray serve`): Ray's CLI imports each inside a
try/except, as a minimal Ray install lacks them, so an import that a None in sys.modules
refuses leaves the group out the way Ray itself does. It saves about 0.35 CPU-s of every
`ray start` (aiohttp and the state API are not loaded: 0.66 against 1.0 CPU-s to import the
CLI, Ray 2.60). A Ray whose CLI needs one of them at import is imported again in full.
Everything else (the GCS, the raylet, the agents, the log monitor, the autoscaler monitor
that `ray status` reads) starts as Ray starts it. Where a Ray version lacks the methods
replaced here, Ray starts as it always does.
"""

from __future__ import annotations

import sys

MODULE = "launcher.injob.ray_start"  # what `python -m` runs (here __name__ is "__main__")
DASHBOARD_OFF = "--include-dashboard=false"  # launcher.injob.node passes it unless the site wants the dashboard


def skip_unused_head_processes(node_class, argv: list[str]) -> list[str]:
    """Replace, on Ray's Node class, the start of the processes above that `argv` leaves
    unused; returns what was skipped (names of the replaced methods)."""
    skipped = []
    if hasattr(node_class, "start_ray_client_server"):
        node_class.start_ray_client_server = lambda self: None
        skipped.append("start_ray_client_server")
    if DASHBOARD_OFF in argv and hasattr(node_class, "start_api_server"):
        node_class.start_api_server = lambda self, **_: None
        skipped.append("start_api_server")
    return skipped


def dashboard_deps_found() -> ImportError | None:
    """Ray's get_dashboard_dependency_error by presence: an ImportError naming the first
    top-level package that `ray.dashboard.optional_deps` imports and this python cannot find,
    else None. Ray's own test (importing the module) when its source cannot be read."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("ray.dashboard.optional_deps")
    try:
        tree = ast.parse(open(spec.origin).read())  # type: ignore[union-attr]
    except (AttributeError, OSError, SyntaxError, TypeError):
        return _ray_dependency_test()
    names = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    missing = sorted(name for name in names if importlib.util.find_spec(name) is None)
    return ImportError(f"No module named '{missing[0]}'") if missing else None


def _ray_dependency_test() -> ImportError | None:
    try:
        import ray.dashboard.optional_deps  # noqa: F401, PLC0415 (the runtime's Ray)
    except ImportError as exc:
        return exc
    return None


def look_for_dashboard_deps(utils_module) -> bool:
    """Put dashboard_deps_found in place of Ray's test on `utils_module` (ray._private.utils,
    where Ray's start looks it up); False where a Ray version has no such test."""
    if not hasattr(utils_module, "get_dashboard_dependency_error"):
        return False
    utils_module.get_dashboard_dependency_error = dashboard_deps_found
    return True


# the modules of the CLI groups above; Ray's CLI catches the ImportError of each
UNUSED_CLI_GROUPS = ("ray.util.state.state_cli", "ray.dashboard.modules.job.cli", "ray.serve.scripts")


def import_ray_cli():
    """Ray's CLI module (ray.scripts.scripts) without UNUSED_CLI_GROUPS; in full when that fails."""
    blocked = [name for name in UNUSED_CLI_GROUPS if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # `import name` raises ImportError
    try:
        from ray.scripts import scripts  # noqa: PLC0415 (the runtime's Ray, on the job's nodes)

        return scripts
    except ImportError:
        sys.modules.pop("ray.scripts.scripts", None)  # half imported
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    from ray.scripts import scripts  # noqa: PLC0415 (in full: fails only as Ray's own CLI would)

    return scripts


def main() -> int:
    from ray._private import node as ray_node  # the runtime's Ray, on the job's nodes
    from ray._private import utils as ray_utils

    scripts = import_ray_cli()
    skip_unused_head_processes(ray_node.Node, sys.argv)
    look_for_dashboard_deps(ray_utils)
    sys.argv[0] = "ray"
    return scripts.main()


if __name__ == "__main__":
    sys.exit(main())
