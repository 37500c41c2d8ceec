"""Only launcher/slurm.py runs Slurm's commands, with an environment the shell cannot steer; what
sf reads of a job (its owner, its processes) comes from Slurm's facts, never a record or an
environment variable another user could set (issue 44)."""

from __future__ import annotations

import ast
from pathlib import Path

from launcher import runs, slurm
from launcher.injob import stacks
from launcher.monitor import job_owner

ROOT = Path(__file__).resolve().parents[2]
SLURM_COMMANDS = {"squeue", "sacct", "scontrol", "sbatch", "scancel", "srun", "salloc", "sacctmgr", "sinfo",
                  "sstat", "sattach", "strigger", "sprio", "sshare"}
RUNNERS = ("launcher/slurm.py", "launcher/slurm_parse.py")
# file:function -> why a Slurm command's argv stands there (an entry that no longer matches fails)
ALLOWED = {
    "launcher/injob/stacks.py:listed_pids": "the job side's `scontrol listpids` on its own node: stacks.py "
                                            "runs alone in a runtime, without sf to import",
    "launcher/submit/export.py:wrap": "an argv written into the export job's script (srun inside the job), "
                                      "not run by sf",
    "launcher/sbatch_values.py:<module>": "the site keys `sbatch` and `exclude_bad_nodes`, not an argv",
}


def slurm_argvs() -> dict[str, int]:
    """{file:function: line} of every list or tuple whose first item names a Slurm command
    (an argv), outside the modules that run or build Slurm's commands."""
    found = {}
    for path in sorted((ROOT / "launcher").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in RUNNERS:
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant)
                    and isinstance(node.elts[0].value, str)):
                continue
            if Path(node.elts[0].value.split(" ")[0]).name not in SLURM_COMMANDS:
                continue
            where = node
            while where in parents and not isinstance(where, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = parents[where]
            found.setdefault(f"{rel}:{getattr(where, 'name', '<module>')}", node.lineno)
    return found


def test_slurm_commands_run_only_in_launcher_slurm():
    found = slurm_argvs()
    outside = {where: line for where, line in found.items() if where not in ALLOWED}
    assert not outside, f"Slurm commands outside launcher/slurm.py (move them there): {outside}"
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED entries that match nothing any more (drop them): {stale}"


def test_the_scan_finds_an_argv_in_a_function():
    tree = ast.parse("import subprocess\ndef f(j):\n    subprocess.run(['scancel', j])\n")
    lists = [n for n in ast.walk(tree) if isinstance(n, ast.List)]
    assert lists and lists[0].elts[0].value in SLURM_COMMANDS


def test_the_shells_slurm_client_variables_never_reach_sfs_calls():
    shell = {"SCANCEL_STATE": "PENDING", "SQUEUE_STATES": "PD", "SACCT_FEDERATION": "1", "SLURM_TIME_FORMAT": "%s",
             "SLURM_JOB_ID": "7", "SRUN_EXPORT_ENV": "NONE", "SALLOC_PARTITION": "x", "SBATCH_TIMELIMIT": "1",
             "SCONTROL_ALL": "1", "SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/bin", "HOME": "/root"}
    assert slurm.client_env(shell) == {"SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/bin", "HOME": "/root"}


def _shown(user="root(0)", name="sf-grpo-abcde", stdout="/runs/grpo-abcde/logs/slurm-5.out") -> dict:
    return {"JobId": "5", "UserId": user, "JobName": name, "StdOut": stdout}


def test_a_job_is_the_runs_only_by_slurms_own_record(tmp_path):
    run = runs.Run(tmp_path / "grpo-abcde")
    names, logs = job_owner.expected(run, {"kind": "run"})
    out = str(tmp_path / "grpo-abcde" / "logs" / "slurm-5.out")
    assert job_owner.mismatch(_shown(stdout=out), 0, names, logs) is None
    assert job_owner.mismatch(_shown(name="sf-grpo-abcde.g1", stdout=out), 0, names, logs) is None
    assert "its user is nobody(65534), not uid 0" in job_owner.mismatch(_shown(user="nobody(65534)", stdout=out),
                                                                         0, names, logs)
    assert "its name is 'sf-other-x1y2z'" in job_owner.mismatch(_shown(name="sf-other-x1y2z", stdout=out), 0,
                                                                names, logs)
    elsewhere = str(tmp_path / "other" / "logs" / "slurm-5.out")
    assert "its output goes to" in job_owner.mismatch(_shown(stdout=elsewhere), 0, names, logs)


def test_an_array_point_is_the_sweeps_job(tmp_path):
    point = runs.Run(tmp_path / "grpo-p0001")
    record = {"kind": "run", "experiment": "grpo", "sweep": {"id": "grpo-swp01", "index": 1}}
    names, logs = job_owner.expected(point, record)
    out = str(tmp_path / "grpo-swp01" / "logs" / "slurm-5_1.out")
    assert job_owner.mismatch(_shown(name="sf-grpo", stdout=out), 0, names, logs) is None


def test_a_process_belongs_to_the_job_whose_cgroup_holds_it():
    v1 = "9:name=systemd:/\n6:freezer:/slurm_dev10/uid_0/job_40/step_0\n4:memory:/x\n0::/\n"
    assert stacks.cgroup_job(v1) == ("dev10", "40")
    v2 = "0::/system.slice/slurmstepd.scope/job_41/step_batch/user/task_0\n"
    assert stacks.cgroup_job(v2) == (None, "41")
    assert stacks.cgroup_job("0::/system.slice/slurmstepd_n3.scope/job_42/step_0\n") == ("n3", "42")
    assert stacks.cgroup_job("0::/user.slice/user-0.slice/session-1.scope\n") == (None, None)
    assert stacks.cgroup_job("0::/user.slice/job_x/jobs\n") == (None, None)


def test_scontrol_listpids_is_read_by_its_pid_column():
    text = ("PID      JOBID    STEPID   LOCALID GLOBALID\n4242     40       0        0       0\n"
            "4243     40       batch    -       -\n")
    assert stacks.parse_listpids(text) == [4242, 4243]
    assert stacks.parse_listpids("") == []
