"""launcher.slurm_versions: the version line read, the warning for an untested Slurm, and one
test per difference of the table, each on the real output of both versions recorded on the
dev clusters (tests/unit/fixtures/slurm-22.05 and slurm-24.11, Debian's 22.05.8 and 24.11.5)."""
from __future__ import annotations

from pathlib import Path

import pytest

from launcher import slurm_versions as sv
from launcher.slurm_parse import (
    SACCT_FIELDS,
    SQUEUE_FIELDS,
    SQUEUE_FORMAT,
    parse_rows,
    parse_show_config,
    parse_show_job,
    srun_argv,
)

FIXTURES = Path(__file__).parent / "fixtures"
OLD, NEW = (22, 5), (24, 11)


def recorded(version: str, name: str) -> str:
    return (FIXTURES / f"slurm-{version}" / name).read_text()


def test_the_version_lines_of_both_releases_are_read():
    assert sv.parse_version(recorded("22.05", "version.txt")) == (22, 5, 8)
    assert sv.parse_version(recorded("24.11", "version.txt")) == (24, 11, 5)
    config = parse_show_config(recorded("24.11", "show-config.txt"))
    assert sv.parse_version(config["SLURM_VERSION"]) == (24, 11, 5)
    assert sv.parse_version("slurm 23.11.10") == (23, 11, 10)  # upstream's spelling
    assert sv.parse_version("scontrol: command not found") is None
    assert sv.version_text((22, 5, 8)) == "22.05.8" and sv.version_text(None) == "unknown"


@pytest.mark.parametrize("version,warned", [((22, 5, 8), False), ((24, 11, 5), False), ((23, 11, 1), False),
                                            ((21, 8, 8), True), ((25, 5, 0), True), (None, True)])
def test_an_older_newer_or_unread_slurm_gets_one_line(version, warned):
    warning = sv.version_warning(version)
    assert (warning is not None) == warned
    if warned:
        assert "\n" not in warning and "22.05, 24.11" in warning


def test_every_difference_says_both_behaviours_and_how_sf_takes_them():
    assert len({d.feature for d in sv.DIFFERENCES}) == len(sv.DIFFERENCES)
    for d in sv.DIFFERENCES:
        assert d.before and d.after and d.handled and OLD < d.since <= NEW
        assert not d.applies((22, 5, 8)) and d.applies((24, 11, 5)) and d.applies(None)


def test_sacct_restarts_only_on_24_11_and_sfs_fields_are_in_both():
    assert sv.difference("sacct_restarts")
    assert "Invalid field requested" in recorded("22.05", "sacct-restarts.txt")
    assert recorded("24.11", "sacct-restarts.txt").strip().split("|")[-1] == "1"
    for version in ("22.05", "24.11"):
        fields = recorded(version, "sacct-helpformat.txt").split()
        assert set(SACCT_FIELDS) <= set(fields), version
    assert "Restarts" not in SACCT_FIELDS
    # ... and the count sf reads, from scontrol, is there on both
    for version in ("22.05", "24.11"):
        assert parse_show_job(recorded(version, "show-job-requeued.txt"))["Restarts"] == "1"


def test_a_requeued_jobs_pending_row_says_partition_limit_on_24_11_read_as_unknown():
    assert sv.difference("pending_timelimit")
    new = parse_rows(recorded("24.11", "sacct-requeued.txt"))
    (row,) = new.values()
    assert row.state == "PENDING" and row.timelimit == ""
    assert "Partition_Limit" in recorded("24.11", "sacct-requeued.txt")
    old = parse_rows(recorded("22.05", "sacct-requeued.txt"))
    assert [r.timelimit for r in old.values()] == ["365-00:00:00"]


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_hetjob_and_array_rows_read_alike_on_both(version):
    rows = parse_rows(recorded(version, "sacct-hetjob.txt"))
    assert [r.kind for r in rows.values()] == ["component", "component"]
    assert {r.state for r in rows.values()} == {"COMPLETED"}
    tasks = parse_rows(recorded(version, "sacct-array.txt"))
    assert len(tasks) == 3 and {r.state for r in tasks.values()} == {"COMPLETED"}
    assert all(r.timelimit in ("UNLIMITED", "365-00:00:00") for r in tasks.values())


def test_show_job_tres_keys_differ_and_sf_reads_only_keys_of_both():
    assert sv.difference("show_job_tres")
    old = parse_show_job(recorded("22.05", "show-job-hetjob-running.txt"))
    new = parse_show_job(recorded("24.11", "show-job-hetjob-running.txt"))
    assert "TRES" in old and "ReqTRES" not in old and "TresPerTask" not in old
    assert "ReqTRES" in new and "AllocTRES" in new and new["TresPerTask"] == "cpu=2"
    read = ("JobState", "Restarts", "JobName", "UserId", "StdOut", "Reason", "EndTime", "ExcNodeList",
            "HetJobOffset")
    for shown in (old, new):
        assert all(key in shown for key in read)
        assert [c["HetJobOffset"] for c in shown["Components"]] == ["0", "1"]


def test_srun_options_sf_uses_are_in_both_and_24_11_adds_others():
    assert sv.difference("srun_options")
    old, new = recorded("22.05", "srun-help.txt"), recorded("24.11", "srun-help.txt")
    assert "--tres-per-task" in new and "--tres-per-task" not in old
    assert "--container-id" in new and "--container-id" not in old
    argv = srun_argv(["true"], het_group=1, nodes=1, ntasks=1, ntasks_per_node=1, nodelist=["dev1"],
                     exclude=["dev2"], overlap=True, extra=["--container=/b"])
    used = {a.split("=")[0] for a in argv if a.startswith("--")}
    for option in used:
        assert option in old and option in new, option


def test_default_priority_and_reconfigure_are_recorded():
    # the dev clusters set priority/basic on both (24.11's default is multifactor)
    for version in ("22.05", "24.11"):
        assert parse_show_config(recorded(version, "show-config.txt"))["PriorityType"] == "priority/basic"
    assert "multifactor" in sv.difference("default_priority").after
    assert "slurmctld-wlm" in sv.difference("reconfigure_pid").after


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_squeue_rows_of_sfs_format_read_alike_on_both(version):
    rows = parse_rows(recorded(version, "squeue-mixed.txt"), SQUEUE_FIELDS)
    kinds = sorted(r.kind for r in rows.values())
    assert kinds == ["component", "component", "job", "task", "task", "task"]
    assert {r.state for r in rows.values()} <= {"RUNNING", "PENDING", "COMPLETED"}
    # every code of sf's format is one 24.11 lists (22.05's squeue has no --helpformat)
    codes = set(recorded("24.11", "squeue-helpformat.txt").split())
    assert {"%" + c for c in SQUEUE_FORMAT.replace("%", "").split("|")} <= codes
    assert "unrecognized option" in recorded("22.05", "squeue-helpformat.txt")


def test_doctor_and_validate_warn_on_an_untested_slurm_in_one_line():
    from launcher.submit import doctor, live

    assert doctor.version_check((24, 11, 5)).status == doctor.OK
    assert "24.11.5" in doctor.version_check((24, 11, 5)).detail
    for version in ((21, 8, 8), None):
        check = doctor.version_check(version)
        assert check.status == doctor.WARN and "\n" not in check.detail
    config = parse_show_config(recorded("22.05", "show-config.txt"))
    assert live.version_warnings(config) == []
    assert live.version_warnings({"SLURM_VERSION": "21.08.8"})[0].startswith("Slurm 21.08.8 is older")
    assert live.version_warnings({}) == []  # not said at submit: sf doctor names an unreadable version


def sf_oci_run():
    """scripts/sf-oci-run (a script, no .py) loaded as a module."""
    import importlib.machinery
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "sf-oci-run"
    loader = importlib.machinery.SourceFileLoader("sf_oci_run_versions", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def oci_step(version: str) -> tuple[dict, dict]:
    """oci-step.txt: {node: sf-oci-run's argv after its own path}, {node: the env line's values} and PATHs."""
    runs, envs = {}, {}
    for line in recorded(version, "oci-step.txt").splitlines():
        if line.startswith("runtimerun: "):
            argv = line.split()[1:]
            args = argv[argv.index("/var/lib/sfdev/etc/sf-oci-run") + 1:]
            runs[args[1]] = args
        elif line.startswith("env: SLURMD_NODENAME="):
            values = dict(item.split("=", 1) for item in line[5:].split())
            envs[values["SLURMD_NODENAME"]] = values
        elif line.startswith("env: PATH="):
            envs.setdefault("PATH", set()).add(line[len("env: PATH="):])
    return runs, envs


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_runtimeruns_bundle_is_the_generated_one_per_node_on_22_05_per_task_on_24_11(version):
    d = sv.difference("oci_bundle_arg")
    runs, _ = oci_step(version)
    assert len(runs) == 2
    for node, args in runs.items():
        bundle, runtime = args[0], args[4:]
        assert args[2] == "JOBID" and args[3] == "--"  # sf-oci-run BUNDLE NODE JOB_ID -- RUNTIME...
        assert f"/spool/{node}/oci-job" in bundle and bundle.endswith("/")
        # the runtime reads the generated config.json, the one sf-oci-run rewrote in place
        assert bundle in (runtime[runtime.index("-b") + 1] if "-b" in runtime else "",
                          *(a.split("=", 1)[1] for a in runtime if a.startswith("--bundle=")))
        assert sf_oci_run().state_dir(runtime) == "/run/sfdev-runc/root"
        per_task = bundle.endswith("/task-0/")
        assert per_task == d.applies(sv.parse_version(recorded(version, "version.txt")))


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_a_container_steps_path_keeps_the_jobs_only_on_22_05_and_sf_puts_the_bundles_first(version):
    d = sv.difference("oci_step_env")
    runs, envs = oci_step(version)
    (path,) = envs.pop("PATH")
    assert path.startswith("/opt/sf/runtime/bin:")  # the bundle's python first, on both
    assert path.endswith(":/root/x/bin") != d.applies(sv.parse_version(recorded(version, "version.txt")))
    nodes = sorted(runs, key=lambda name: int(name[3:]))  # Slurm's order: dev9, dev10
    for node, values in envs.items():  # sf-oci-run gave each node its own name and index
        assert values["SLURM_NODEID"] == str(nodes.index(node))
    # what sf-oci-run makes of each version's config.json env: the recorded PATH, each node its identity
    bundle_path = "/opt/sf/runtime/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    job_path = "/opt/sf-venv/bin:/usr/local/bin:/usr/bin:/bin:/root/x/bin"
    merged = d.applies(sv.parse_version(recorded(version, "version.txt")))  # one PATH, the bundle's
    given = [f"PATH={bundle_path}"] + ([] if merged else [f"PATH={job_path}"])
    given += [f"SLURM_STEP_NODELIST={','.join(nodes)}", f"SLURMD_NODENAME={nodes[0]}"]
    out = sf_oci_run().rewrite({"process": {"env": given}}, nodes[1], "7", gpus_of=lambda *a: None)
    env = dict(e.split("=", 1) for e in out["process"]["env"])
    assert env["PATH"] == path and env["SLURMD_NODENAME"] == nodes[1] and env["SLURM_NODEID"] == "1"
