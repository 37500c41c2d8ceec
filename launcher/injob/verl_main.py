"""verl's main_ppo (or a disaggregated trainer's main) with every verl resource pool pinned
to its Slurm pool's nodes.

Run on the head as `python -m launcher.injob.verl_main --entry MODULE <overrides>` (or
`--script main.py <overrides>`, an experiment's own driver; the supervisor puts it in place of
every Ray driver: driver_start.pinned). verl 0.9.1 builds its pools in
`verl.single_controller.ray.base.RayResourcePool.get_placement_groups`, which calls the
module-level `placement_group(bundles=..., strategy=..., name=..., lifetime=...)` once per
node. We wrap get_placement_groups to remember which verl pool (its `name_prefix`:
global_pool, teacher_pool, reward_pool, rollout_pool_teacher_0, ...) is being built, and
wrap that module's `placement_group` to add the Slurm pool's custom resource
(`sf_pool_<name>`, advertised only by that pool's nodes) to every bundle. verl's own
logic (bundle shapes, sorting, ready-wait) is untouched.

The patch must live in every process that builds pools: the TaskRunner actor, the
rollout/teacher managers it starts. Ray's workers do not inherit the driver's environment,
so ray.init is wrapped: the job's runtime_env carries `worker_process_setup_hook`
(install_in_worker) and the job itself (SF_JOB, launcher.injob.contract: its pools); the
hook patches verl's module as soon as it is imported in that worker. The driver
process is patched too.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading

from launcher.injob import topology
from launcher.injob.contract import JOB_ENV, Job

BASE = "verl.single_controller.ray.base"
_local = threading.local()


def patch_base(module) -> None:
    """Pin RayResourcePool placement groups in verl's base module (idempotent)."""
    if getattr(module, "_sf_pinned", False):
        return
    from launcher.injob import placement

    if not os.environ.get(JOB_ENV):  # not inside an sf job: verl as it is
        return
    job = Job.from_env()
    pools, verl_pools = job.pools, job.verl_pools
    original_pg = module.placement_group
    original_get = module.RayResourcePool.get_placement_groups

    def placement_group(bundles, *args, **kwargs):
        verl_pool = getattr(_local, "verl_pool", None) or kwargs.get("name") or ""
        target = placement.slurm_pool_for(verl_pool, pools, verl_pools)
        return original_pg(placement.tag_bundles(list(bundles), topology.pool_resource(target.name)), *args, **kwargs)

    def get_placement_groups(self, *args, **kwargs):
        previous = getattr(_local, "verl_pool", None)
        _local.verl_pool = getattr(self, "name_prefix", None)
        try:
            return original_get(self, *args, **kwargs)
        finally:
            _local.verl_pool = previous

    module.placement_group = placement_group
    module.RayResourcePool.get_placement_groups = get_placement_groups
    module._sf_pinned = True


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Patches verl's base module right after it is first imported in this process."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != BASE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        patch_base(module)


def install_in_worker() -> None:
    """worker_process_setup_hook: patch now if verl's base is loaded, else on import."""
    if BASE in sys.modules:
        patch_base(sys.modules[BASE])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def wrap_ray_init(ray_module) -> None:
    original = ray_module.init
    if getattr(original, "_sf_wrapped", False):
        return
    job_json = os.environ.get(JOB_ENV, "")

    def init(*args, **kwargs):
        runtime_env = dict(kwargs.get("runtime_env") or {})
        runtime_env["worker_process_setup_hook"] = "launcher.injob.verl_main.install_in_worker"
        env_vars = dict(runtime_env.get("env_vars") or {})
        env_vars[JOB_ENV] = job_json
        runtime_env["env_vars"] = env_vars
        kwargs["runtime_env"] = runtime_env
        return original(*args, **kwargs)

    init._sf_wrapped = True
    ray_module.init = init


def main(argv: list[str] | None = None) -> None:
    """`--entry MODULE ARGS` (a method's verl main) or `--script PATH ARGS` (an experiment's own
    main.py, which builds the same trainer's pools) with every pool pinned."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] not in (["--entry"], ["--script"]) or len(argv) < 2:
        raise SystemExit("sf: verl_main runs --entry MODULE or --script main.py (the Plan's entry), then its overrides")
    entry = script = None
    if argv[0] == "--entry":
        entry, argv = argv[1], argv[2:]
    else:
        script, argv = argv[1], argv[2:]
    import importlib
    import runpy

    import ray

    wrap_ray_init(ray)
    install_in_worker()  # the driver too
    if script is not None:  # as `python main.py` runs it: its folder first on sys.path (Hydra: config beside it)
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        sys.argv = [script, *argv]
        runpy.run_path(script, run_name="__main__")
        return
    module = importlib.import_module(entry)

    sys.argv = [module.__file__, *hydra_argv(module.__file__, argv)]
    module.main()  # Hydra finds the main's config beside its module, whatever argv[0] says


def hydra_argv(module_file: str, argv: list[str]) -> list[str]:
    """The main's arguments, with its config folder named by absolute path when that folder is
    no Python package. A verl main declares `@hydra.main(config_path="config")`; run as a
    module, Hydra then loads `<its package>.config` as a package, and verl 0.9.1's wheel ships
    the experimental trainers' config folders without __init__.py: "Primary config module
    'verl.experimental.one_step_off_policy.config' not found" (the H200, 2026-12-02). Named by
    path, Hydra reads the folder as files. A --config-path of the user's own is kept."""
    if any(a == "-cp" or a.startswith("--config-path") for a in argv):
        return list(argv)
    config_dir = os.path.join(os.path.dirname(os.path.abspath(module_file)), "config")
    if not os.path.isdir(config_dir) or os.path.exists(os.path.join(config_dir, "__init__.py")):
        return list(argv)
    return [f"--config-path={config_dir}", *argv]


if __name__ == "__main__":
    main()
