"""Bad inputs the hunt of test_bad_inputs_hunt.py left (each through the real CLI, nothing
submitted): every one must end with exit 2 and one `sf: error:` line that names the field and
the fix, leaving no run folder behind."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import write_exp, write_site  # noqa: E402
from unit_helpers import GOOD_SPEC as GOOD  # noqa: E402
from unit_helpers import refused  # noqa: E402
from unit_helpers import sf_cli as sf  # noqa: E402

# --- a reward function path that is a directory or a device: it read "does not exist" ------

def test_reward_function_directory_is_named(cli_env):
    write_exp(cli_env, "exp", GOOD + f"reward: {{function: {{path: {cli_env}, name: f}}}}\n")
    refused(sf("validate", "exp"), f"reward.function.path: {cli_env} is a directory, not a Python file",
            f"set reward.function.path to the reward file in it (e.g. {cli_env}/reward.py)")


def test_reward_function_device_is_named(cli_env):
    write_exp(cli_env, "exp", GOOD + "reward: {function: {path: /dev/null, name: f}}\n")
    refused(sf("validate", "exp"), "reward.function.path: /dev/null is not a regular file (a FIFO, socket or device)",
            "set reward.function.path to your reward file")


def test_raw_reward_function_directory_is_named(cli_env):
    write_exp(cli_env, "exp", GOOD)
    refused(sf("validate", "exp", "--set", f"reward.custom_reward_function.path={cli_env}"),
            f"--set reward.custom_reward_function.path: {cli_env} is a directory")


def test_reward_function_missing_still_does_not_exist(cli_env):
    write_exp(cli_env, "exp", GOOD + "reward: {function: {path: /nonexistent/r.py, name: f}}\n")
    refused(sf("validate", "exp"), "reward.function.path: /nonexistent/r.py does not exist")


# --- a sweep grid that repeats a value: the line said so without the fix ------------------

@pytest.mark.parametrize("grid, shown, fix", [
    ("rollout_n=4,4", "'4,4' repeats the value '4'", "give each value once: --grid rollout_n=4"),
    ("actor_lr=1e-6,3e-6,1e-6", "repeats the value '1e-6'", "--grid actor_lr=1e-6,3e-6"),
    ("trainer.project_name=a\\,b,c,a\\,b", "repeats the value 'a,b'", "--grid trainer.project_name=a\\,b,c"),
])
def test_sweep_grid_repeat_says_the_fix(cli_env, grid, shown, fix):
    write_exp(cli_env, "exp", GOOD)
    refused(sf("sweep", "exp", "--grid", grid, "--dry-run"), "--grid ", shown, fix)
    assert not list((cli_env / "runs").iterdir())


# --- a time limit longer than Slurm can hold: sbatch wraps it into another one -------------

# sbatch --test-only -v on Slurm 22.05: --time=9999999-00:00:00 asks for 8234-19:19:00,
# 24855-03:13:09 for 2957761 days; 24855-03:13:08 (2**31 - 1 - 59 s) is the longest it keeps
@pytest.mark.parametrize("time", ["9999999-00:00:00", "24855-03:13:09", "35791394", "596524:00:00", "1" * 5000])
def test_time_past_slurm_is_refused(cli_env, time):
    write_exp(cli_env, "exp", GOOD + f'slurm: {{time: "{time}"}}\n')
    line = refused(sf("submit", "exp", "--dry-run"), "slurm.time: ", "is longer than Slurm can hold (24855-03:13:08",
                   "write a shorter time or UNLIMITED")
    assert len(line) < 400
    assert not list((cli_env / "runs").iterdir())


@pytest.mark.parametrize("time", ["24855-03:13:08", "35791393", "UNLIMITED", "INFINITE"])
def test_time_slurm_keeps_passes(cli_env, time):
    write_exp(cli_env, "exp", GOOD + f'slurm: {{time: "{time}"}}\n')
    result = sf("validate", "exp")
    assert result.exit_code == 0, result.stderr


def test_site_time_past_slurm_names_the_site(cli_env):
    site = write_site(cli_env, runs_dir=str(cli_env / "runs"), slurm={"time": "9999999-00:00:00"})
    write_exp(cli_env, "exp", GOOD)
    refused(sf("validate", "exp"), f"site slurm.time: in the site file {site}: '9999999-00:00:00' is longer than "
            "Slurm can hold", "write a shorter time or UNLIMITED; or set slurm.time in config.yaml")
    write_exp(cli_env, "exp", GOOD + "slurm: {time: '04:00:00'}\n")  # config.yaml's time overrides it
    assert sf("validate", "exp").exit_code == 0


# --- a pool of more nodes than any cluster: 1e99 nodes was blamed on train_batch_size ------

@pytest.mark.parametrize("field, value, maximum", [("nodes", "1e99", 65536), ("nodes", "1" + "0" * 29, 65536),
                                                   ("nodes", "65537", 65536), ("spare_nodes", "1e99", 65536),
                                                   ("gpus_per_node", "1e99", 1024)])
def test_pool_counts_past_any_cluster_are_refused(cli_env, field, value, maximum):
    # the batch-size rule divided by a 100-digit GPU count: 'not divisible by the 39999...' GPUs
    write_exp(cli_env, "exp", GOOD + f"spec: {{resources: {{pools: [{{name: train, {field}: {value}}}]}}}}\n")
    line = refused(sf("submit", "exp", "--dry-run"), f"spec.resources.pools[0].{field}: ",
                   f"is greater than the maximum of {maximum}", "fix the value")
    assert "train_batch_size" not in line
    assert not list((cli_env / "runs").iterdir())


def test_pool_nodes_bound_is_the_profiles():
    from launcher.spec.experiment import schema
    from launcher.spec.site import MAX_POOL_NODES
    pool = schema()["properties"]["spec"]["properties"]["resources"]["properties"]["pools"]["items"]
    assert pool["properties"]["nodes"]["maximum"] == MAX_POOL_NODES


@pytest.mark.parametrize("profile, needles", [
    ("fake:99999999999999999999x4", ["'fake:99999999999999999999x4' asks for more than 65536 nodes",
                                     "ask for fewer (e.g. fake:2x4)"]),
    ("fake:65537x4", ["asks for more than 65536 nodes"]),
    ("fake:262148", ["'fake:262148' asks for more than 65536 nodes"]),
    ("fake:" + "1" * 5000, ["(5005 characters) asks for more than 65536 nodes"]),
    ("fake:2x" + "1" * 5000, ["fake nodes have 4 GPUs", "(5007 characters) asks for more per node",
                              "ask for at most 4"]),
])
def test_profile_past_any_cluster_is_refused(cli_env, profile, needles):
    # int() of 5,000 digits raised ValueError: an internal error, exit 1
    write_exp(cli_env, "exp", GOOD)
    line = refused(sf("submit", "exp", "--dry-run", "--profile", profile), "--profile: ", *needles)
    assert len(line) < 400 and "train_batch_size" not in line


# --- an experiment folder the user may not enter: "no experiments/e/config.yaml" -----------

def lock(monkeypatch, folder: Path):
    """`folder` as another user's chmod 000 folder looks to this one (the tests may run as
    root, whom no mode stops): everything in it is EACCES, and it cannot be entered."""
    import errno
    import os
    folder = os.path.abspath(folder)
    real_stat, real_lstat, real_access = os.stat, os.lstat, os.access

    def inside(path) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.path.abspath(path).startswith(folder + os.sep)

    def guarded(real):
        def call(path, *args, **kwargs):
            if inside(path):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "stat", guarded(real_stat))
    monkeypatch.setattr(os, "lstat", guarded(real_lstat))
    monkeypatch.setattr(os, "access", lambda path, mode, *args, **kwargs: (
        (os.path.abspath(path) != folder or not mode & os.X_OK) and real_access(path, mode, *args, **kwargs)))


@pytest.mark.parametrize("arg, shown", [("e", "e/config.yaml"), ("./e", "e/config.yaml")])
def test_folder_here_that_cannot_be_entered_names_the_permission(cli_env, monkeypatch, arg, shown):
    # `e` read 'no experiments/e/config.yaml; create it with sf new': lexists said no config.yaml
    # here, so the name was looked up under experiments/
    write_exp(cli_env, "x", GOOD)
    (cli_env / "experiments" / "x").rename(cli_env / "e")
    lock(monkeypatch, cli_env / "e")
    refused(sf("validate", arg), f"{arg}: cannot read {shown}: you may not enter e (permission denied)",
            "ask its owner for access (chmod a+rx) or copy the experiment to a folder of yours")


def test_experiments_folder_that_cannot_be_entered_names_the_permission(cli_env, monkeypatch):
    write_exp(cli_env, "e", GOOD)
    lock(monkeypatch, cli_env / "experiments" / "e")
    refused(sf("validate", "e"), "e: cannot read experiments/e/config.yaml: you may not enter experiments/e "
                                 "(permission denied)")


def test_unentered_cwd_is_named(cli_env, monkeypatch):
    # sudo -u from a folder of root's: every relative path is EACCES
    here = cli_env / "here"
    write_exp(here, "e", GOOD)
    monkeypatch.chdir(here)
    lock(monkeypatch, here)
    refused(sf("validate", "e"), f"e: cannot read e/config.yaml: you may not enter the current folder {here} "
                                 "(permission denied)")


def test_missing_experiment_still_says_sf_new(cli_env):
    refused(sf("validate", "nosuch"), "no experiments/nosuch/config.yaml; create it with `sf new nosuch")


# --- a runs dir the user may not write in: the dry run said it would submit ----------------

def deny_writes(monkeypatch, folder: Path):
    """`folder` as another user's folder looks to this one (the tests may run as root)."""
    import os
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *args, **kwargs: (
        (os.path.abspath(path) != str(folder) or not mode & os.W_OK) and real_access(path, mode, *args, **kwargs)))


@pytest.mark.parametrize("command", [["submit", "exp", "--dry-run"], ["submit", "exp"],
                                     ["sweep", "exp", "--grid", "rollout_n=4,8", "--dry-run"]])
@pytest.mark.parametrize("under, made", [("", ""), ("new/runs", ", so sf cannot create {runs}/new/runs")])
def test_runs_dir_without_write_access_is_refused(cli_env, monkeypatch, command, under, made):
    # as nobody, `sf submit --dry-run --runs-dir /root/x` printed the script and 'nothing
    # submitted' (exit 0); the submit then failed on mkdir: '/root/x: /root/x: Permission denied'
    runs = cli_env / "theirs"
    runs.mkdir()
    deny_writes(monkeypatch, runs)
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")  # a runtime: the dry run gets past it
    write_exp(cli_env, "exp", GOOD)
    target = runs / under if under else runs
    refused(sf(*command, "--runs-dir", target),
            f"runs_dir: you may not write in {runs} (permission denied){made.format(runs=runs)}; "
            "use another runs dir (--runs-dir, $SF_RUNS_DIR or the site's runs_dir) or fix its permissions")
    assert not list(runs.iterdir())


def test_writable_runs_dir_still_dry_runs(cli_env, monkeypatch):
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")
    write_exp(cli_env, "exp", GOOD)
    result = sf("submit", "exp", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "nothing written, nothing submitted" in result.stderr


# --- a cache in a home the user may not enter ($HOME of another user: setpriv, sudo -u) ----

def test_unreadable_cache_is_no_error(cli_env, monkeypatch):
    # verlcache.effective_config's is_file raised EACCES: the dry run failed naming a file of
    # ~/.cache/sf/verl-compose; a cache it cannot use is no cache, with the same answers
    cache = cli_env / "their-cache"
    cache.mkdir()
    monkeypatch.setenv("SF_CACHE_DIR", str(cache))
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")
    lock(monkeypatch, cache)
    write_exp(cli_env, "exp", GOOD)
    result = sf("submit", "exp", "--dry-run")
    assert result.exit_code == 0, result.stderr


def test_a_file_system_failure_names_its_path_once():
    """The path is the line's field: the message does not print it again ('X: X: Permission denied')."""
    from launcher.cli.app import os_error

    line = str(os_error(PermissionError(13, "Permission denied", "/root/x")))
    assert line == "/root/x: Permission denied; fix the path or its permissions"
    assert line.count("/root/x") == 1
