"""launcher.slurm_parse: parsing of sacct/squeue/scontrol output (rows as the dev cluster's Slurm
22.05 prints them), state aggregation of hetjobs and arrays, and job_states' single call
with its squeue fallback in launcher.slurm (fake Slurm binaries through SF_SLURM_BIN_DIR)."""
from __future__ import annotations

import subprocess

import pytest

from launcher import slurm, slurm_parse
from launcher.errors import SlurmError

# Real output of the dev cluster (sacct --parsable2 --noheader --allocations --format=...).
SACCT_RUNNING = """\
18+0|mon-het|RUNNING|0:0|2026-11-29T11:26:37|Unknown|00:00:05|dev1|None|2026-11-29T11:26:36|00:02:00
18+1|mon-het|RUNNING|0:0|2026-11-29T11:26:37|Unknown|00:00:05|dev7|None|2026-11-29T11:26:36|00:02:00
20_0|mon-arr|RUNNING|0:0|2026-11-29T11:26:37|Unknown|00:00:05|dev2|None|2026-11-29T11:26:36|00:02:00
20_1|mon-arr|RUNNING|0:0|2026-11-29T11:26:37|Unknown|00:00:05|dev2|None|2026-11-29T11:26:36|00:02:00
20_[2-5%2]|mon-arr|PENDING|0:0|Unknown|Unknown|00:00:00|None assigned|JobArrayTaskLimit|2026-11-29T11:26:36|00:02:00
11|sf-plain|COMPLETED|0:0|2026-11-29T11:26:25|2026-11-29T11:26:26|00:00:01|dev1|None|2026-11-29T11:26:25|00:02:00
11.batch|batch|COMPLETED|0:0|2026-11-29T11:26:25|2026-11-29T11:26:26|00:00:01|dev1||2026-11-29T11:26:25|
"""
SQUEUE_RUNNING = """\
18+1|mon-het|RUNNING|0:01|dev7|None|2026-11-29T11:26:37|2:00|2026-11-29T11:26:36
20_[2-5%2]|mon-arr|PENDING|0:00||JobArrayTaskLimit|N/A|2:00|2026-11-29T11:26:36
18+0|mon-het|RUNNING|0:01|dev1|None|2026-11-29T11:26:37|2:00|2026-11-29T11:26:36
20_0|mon-arr|RUNNING|0:01|dev2|None|2026-11-29T11:26:37|2:00|2026-11-29T11:26:36
20_1|mon-arr|RUNNING|0:01|dev2|None|2026-11-29T11:26:37|2:00|2026-11-29T11:26:36
"""


def test_parse_sacct_rows_hetjob_array_and_steps():
    rows = slurm_parse.parse_rows(SACCT_RUNNING)
    assert set(rows) == {"18+0", "18+1", "20_0", "20_1", "20_2", "20_3", "20_4", "20_5", "11"}
    assert rows["18+1"].nodelist == "dev7" and rows["18+1"].kind == "component"
    assert rows["20_4"].state == "PENDING" and rows["20_4"].reason == "JobArrayTaskLimit"
    assert rows["20_0"].kind == "task" and rows["11"].kind == "job"
    assert rows["11"].end == "2026-11-29T11:26:26" and rows["11"].done


def test_parse_squeue_rows_same_shape():
    rows = slurm_parse.parse_rows(SQUEUE_RUNNING, slurm_parse.SQUEUE_FIELDS)
    assert rows["18+0"].state == "RUNNING" and rows["18+0"].nodelist == "dev1"
    assert sorted(k for k in rows if k.startswith("20_")) == [f"20_{i}" for i in range(6)]


def test_array_ranges_expand_with_commas_and_throttle():
    rows = slurm_parse.parse_rows("7_[1,3-4,9]|a|PENDING|0:0\n8_[0-2%1]|b|PENDING|0:0\n")
    assert sorted(rows) == ["7_1", "7_3", "7_4", "7_9", "8_0", "8_1", "8_2"]


@pytest.mark.parametrize("raw,norm", [
    ("CANCELLED by 0", "CANCELLED"), ("RUNNING", "RUNNING"), ("", "UNKNOWN"),
    ("completed", "COMPLETED"), ("REQUEUED", "REQUEUED"), ("FAILED+", "FAILED"),
])
def test_normalize_state(raw, norm):
    assert slurm_parse.normalize_state(raw) == norm


@pytest.mark.parametrize("job_id,parts", [
    ("123", ("123", None, None)), ("123_4", ("123", "4", None)), ("123+1", ("123", None, "1")),
    ("123_[2-5%2]", ("123", "[2-5%2]", None)),
])
def test_split_job_id(job_id, parts):
    assert slurm_parse.split_job_id(job_id) == parts


@pytest.mark.parametrize("states,expected", [
    (["RUNNING", "PENDING"], "RUNNING"),
    (["PENDING", "COMPLETED"], "PENDING"),
    (["COMPLETED", "COMPLETED"], "COMPLETED"),
    (["COMPLETED", "FAILED"], "FAILED"),
    (["CANCELLED by 0", "COMPLETED"], "CANCELLED"),
    (["TIMEOUT", "CANCELLED"], "TIMEOUT"),
    (["NODE_FAIL", "FAILED"], "NODE_FAIL"),
    (["REQUEUED", "COMPLETED"], "REQUEUED"),
    ([], "UNKNOWN"),
])
def test_aggregate_state(states, expected):
    assert slurm_parse.aggregate_state(states) == expected


def test_resolve_aggregates_hetjob_and_array_and_marks_missing():
    rows = slurm_parse.parse_rows(SACCT_RUNNING)
    states = slurm_parse.resolve(["18", "20", "11", "99", "18+1", "20_5"], rows)
    het = states["18"]
    assert het.kind == "hetjob" and het.state == "RUNNING" and het.parts == ["18+0", "18+1"]
    assert het.nodelist == "dev1,dev7" and not het.done
    arr = states["20"]
    assert arr.kind == "array" and arr.state == "RUNNING"
    assert arr.parts == [f"20_{i}" for i in range(6)]
    assert arr.reason == "JobArrayTaskLimit"
    assert states["11"].state == "COMPLETED" and states["11"].parts == []
    assert states["99"].missing and states["99"].state == "UNKNOWN" and not states["99"].done
    assert states["18+1"].nodelist == "dev7" and states["20_5"].state == "PENDING"


def test_resolve_finished_hetjob_reports_worst_component():
    rows = slurm_parse.parse_rows(
        "5+0|h|COMPLETED|0:0|2026-01-01T00:00:00|2026-01-01T00:01:00|00:01:00|dev1|None\n"
        "5+1|h|FAILED|1:0|2026-01-01T00:00:00|2026-01-01T00:01:05|00:01:05|dev7|None\n")
    het = slurm_parse.resolve(["5"], rows)["5"]
    assert het.state == "FAILED" and het.done and het.exit_code == "1:0"
    assert het.end == "2026-01-01T00:01:05" and het.elapsed == "00:01:05"


def test_elapsed_seconds():
    assert slurm_parse._elapsed_s("1-02:03:04") == 93784
    assert slurm_parse._elapsed_s("02:03:04") == 7384
    assert slurm_parse._elapsed_s("03:04") == 184
    assert slurm_parse._elapsed_s("") == 0 and slurm_parse._elapsed_s("INVALID") == 0


def test_show_job_parses_values_with_spaces_and_hetjob_components():
    text = ("JobId=18 HetJobId=18 HetJobOffset=0 JobName=my job JobState=RUNNING Reason=None "
            "Requeue=1 Restarts=2 Command=/tmp/a b/het.sh WorkDir=/tmp Power= \n"
            "JobId=19 HetJobId=18 HetJobOffset=1 JobName=my job JobState=RUNNING Restarts=2 "
            "NodeList=dev7\n")
    info = slurm_parse.parse_show_job(text)
    assert info["JobId"] == "18" and info["Restarts"] == "2" and info["JobName"] == "my job"
    assert info["Command"] == "/tmp/a b/het.sh" and info["Power"] == ""
    assert [c["JobId"] for c in info["Components"]] == ["18", "19"]
    assert info["Components"][1]["NodeList"] == "dev7"
    assert slurm_parse.parse_show_job("") == {}


def test_parse_sbatch_parsable():
    assert slurm_parse.parse_sbatch_parsable("123\n") == "123"
    assert slurm_parse.parse_sbatch_parsable("123;cluster\n") == "123"
    with pytest.raises(SlurmError):
        slurm_parse.parse_sbatch_parsable("")
    with pytest.raises(SlurmError):
        slurm_parse.parse_sbatch_parsable("sbatch: error: nope")


def test_srun_argv_is_a_list_with_options_before_the_command():
    argv = slurm_parse.srun_argv(["ray", "start", "--block", "; rm -rf /"], het_group=1, nodes=2,
                                 ntasks_per_node=1, nodelist=["dev1", "dev2"], overlap=True,
                           extra=["--export=ALL"])
    assert argv == ["srun", "--het-group=1", "--nodes=2", "--ntasks-per-node=1",
                    "--nodelist=dev1,dev2", "--overlap", "--kill-on-bad-exit=1", "--export=ALL",
                    "ray", "start", "--block", "; rm -rf /"]
    assert slurm_parse.srun_argv(["x"], kill_on_bad_exit=False) == ["srun", "x"]


def test_sacct_argv_asks_base_ids_once():
    argv = slurm_parse.sacct_argv(["18", "18+1", "20_3", "20", "11"])
    assert argv[-1] == "--jobs=18,20,11"
    assert "--allocations" in argv and "--parsable2" in argv and "--noheader" in argv


# --- against the fake Slurm commands (tests/unit/conftest.py) ----------------------------


def test_job_states_one_sacct_call_for_everything(fake_slurm):
    fake_slurm.set("sacct", SACCT_RUNNING)
    before = dict(slurm.CALLS)
    states = slurm.job_states(["18", "20", "11", "18+0"])
    assert slurm.CALLS["sacct"] - before.get("sacct", 0) == 1
    assert slurm.CALLS["total"] - before.get("total", 0) == 1
    assert fake_slurm.calls() == [" ".join(slurm_parse.sacct_argv(["18", "20", "11"]))]
    assert states["18"].state == "RUNNING" and states["20"].state == "RUNNING"
    assert states["20_3"].state == "PENDING"  # every task row comes back too


def test_job_states_asks_squeue_once_for_what_sacct_has_pending(fake_slurm):
    # slurmdbd lags under load: sacct still says PENDING for 20_3 while slurmctld runs it
    fake_slurm.set("sacct", SACCT_RUNNING)
    fake_slurm.set("squeue", "20_3|mon-arr|RUNNING|0:01|dev3|None|2026-11-29T11:26:40|2:00|2026-11-29T11:26:36\n")
    before = dict(slurm.CALLS)
    states = slurm.job_states(["18", "20", "11", "20_3", "18+0"])
    assert slurm.CALLS["total"] - before.get("total", 0) == 2
    assert fake_slurm.calls() == [" ".join(slurm_parse.sacct_argv(["18", "20", "11"])),
                                  " ".join(slurm_parse.squeue_argv(["20_3"]))]
    assert states.source == "sacct" and states.accounting and states.warning is None
    assert states["20_3"].state == "RUNNING" and states["20_3"].nodelist == "dev3"
    assert states["20_2"].state == "PENDING" and states["18"].state == "RUNNING"
    assert slurm.job_states([]) == {}


def test_job_states_keeps_saccts_view_when_squeue_does_not_answer(fake_slurm, monkeypatch):
    # slurmctld down (slurmdbd up): squeue hangs for its own retries; sacct's answer stands
    fake_slurm.set("sacct", SACCT_RUNNING)
    (fake_slurm.dir / "squeue").write_text("#!/bin/sh\nsleep 5\n")
    monkeypatch.setattr(slurm, "QUEUE_LOOK_TIMEOUT_S", 0.3)
    states = slurm.job_states(["20_3", "11"])
    assert states.source == "sacct" and states["20_3"].state == "PENDING" and states["11"].state == "COMPLETED"


def test_job_states_falls_back_to_one_squeue_call(fake_slurm):
    fake_slurm.set("sacct", "", "sacct: error: Slurm accounting storage is disabled\n", 1)
    fake_slurm.set("squeue", SQUEUE_RUNNING)
    states = slurm.job_states(["18", "20", "11"])
    assert [c.split()[0] for c in fake_slurm.calls()] == ["sacct", "squeue"]
    assert states.source == "squeue" and not states.accounting
    assert "accounting" in states.warning and "disabled" in states.warning
    assert states["18"].state == "RUNNING" and states["18"].kind == "hetjob"
    assert states["11"].state == "GONE" and states["11"].done  # ended: squeue forgot it


def test_job_states_fallback_when_slurmdbd_down_and_squeue_invalid_id(fake_slurm):
    fake_slurm.set("sacct", "", "sacct: error: slurmdbd: Connection refused\n", 1)
    fake_slurm.set("squeue", "", "slurm_load_jobs error: Invalid job id specified\n", 1)
    states = slurm.job_states(["11"])
    assert states.source == "squeue" and states["11"].state == "GONE"


def test_job_states_raises_when_both_fail(fake_slurm):
    fake_slurm.set("sacct", "", "sacct: error: slurmdbd: Connection refused\n", 1)
    fake_slurm.set("squeue", "", "squeue: error: Unable to contact slurm controller\n", 1)
    with pytest.raises(SlurmError) as err:
        slurm.job_states(["11"])
    assert "squeue" in str(err.value) and "Unable to contact" in str(err.value)


def test_sbatch_scancel_requeue_show_job_commands(fake_slurm, tmp_path):
    fake_slurm.set("sbatch", "77;sfdev\n")
    assert slurm.sbatch(tmp_path / "job.sbatch", extra_args=["--hold"]) == "77"
    slurm.scancel(["77", "78"], signal="USR1", batch=True)
    slurm.scancel([])
    slurm.requeue("77")
    fake_slurm.set("scontrol", "JobId=77 JobState=RUNNING Restarts=1\n")
    assert slurm.show_job("77")["Restarts"] == "1"
    fake_slurm.set("scontrol", "dev1\ndev2\n")
    assert slurm.hostnames("dev[1-2]") == ["dev1", "dev2"]
    assert fake_slurm.calls() == [
        f"sbatch --parsable --hold {tmp_path / 'job.sbatch'}",
        "scancel --signal=USR1 --batch 77 78",
        "scontrol requeue 77",
        "scontrol show job -o 77",
        "scontrol show hostnames dev[1-2]",
    ]


def test_failures_carry_command_and_stderr(fake_slurm, tmp_path):
    fake_slurm.set("sbatch", "", "sbatch: error: invalid partition specified: nope\n", 1)
    with pytest.raises(SlurmError) as err:
        slurm.sbatch(tmp_path / "job.sbatch")
    assert "sbatch --parsable" in str(err.value) and "invalid partition" in str(err.value)
    assert err.value.exit_code == 1


def test_sbatch_test_only_returns_message(fake_slurm, tmp_path):
    fake_slurm.set("sbatch", "", "sbatch: Job 12 to start at 2026-11-29T11:00:00 using 4 processors "
                   "on nodes dev1 in partition train\n")
    assert slurm.sbatch_test_only(tmp_path / "x").startswith("Job 12 to start")


def test_missing_binary_and_timeout(monkeypatch, tmp_path, fake_slurm):
    monkeypatch.setenv("SF_SLURM_BIN_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(SlurmError) as err:
        slurm.requeue("1")
    assert "not found" in str(err.value)
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "scontrol").write_text("#!/bin/sh\nsleep 5\n")
    (slow / "scontrol").chmod(0o755)
    monkeypatch.setenv("SF_SLURM_BIN_DIR", str(slow))
    with pytest.raises(SlurmError) as err:
        slurm._run(["scontrol", "ping"], timeout=0.3)
    assert "did not answer" in str(err.value)


def test_srun_popen_runs_without_shell(fake_slurm):
    proc = slurm.srun_popen(["echo", "$HOME; true"], het_group=0, stdout=subprocess.PIPE)
    proc.wait(10)
    assert fake_slurm.calls() == ["srun --het-group=0 --kill-on-bad-exit=1 echo $HOME; true"]


def test_show_config_and_sacctmgr_parsable_rows():
    cfg = slurm_parse.parse_show_config("Configuration data as of 2026-11-30T21:00:00\n"
                                        "AccountingStorageEnforce = associations,qos\nClusterName             = sfdev\n"
                                        "SLURM_VERSION           = 22.05.8\n")
    assert cfg["AccountingStorageEnforce"] == "associations,qos" and cfg["ClusterName"] == "sfdev"
    rows = slurm_parse.parse_parsable("root|root|sfdev|dev||normal,high|\n\n", slurm_parse.ASSOC_FIELDS)
    assert rows == [{"User": "root", "DefaultAccount": "root", "Cluster": "sfdev", "Account": "dev", "Partition": "",
                     "QOS": "normal,high", "DefaultQOS": ""}]


def test_ids_sacct_has_not_recorded_yet_take_squeues_answer():
    # slurmdbd lags the controller under load: a running array task is not in sacct yet
    states = slurm_parse.resolve(["70_0", "71"], {"71": slurm_parse.JobState(job_id="71", state="COMPLETED")})
    assert states["70_0"].missing and states["70_0"].state == "UNKNOWN"
    queued = slurm_parse.resolve(["70_0"], {"70_0": slurm_parse.JobState(job_id="70_0", state="RUNNING"),
                                            "70_1": slurm_parse.JobState(job_id="70_1", state="PENDING")})
    slurm_parse.prefer_queue(states, queued)
    assert states["70_0"].state == "RUNNING" and not states["70_0"].missing
    assert states["71"].state == "COMPLETED"
    slurm_parse.prefer_queue(states, slurm_parse.resolve(["71"], {}))  # squeue forgot it: sacct's answer stays
    assert states["71"].state == "COMPLETED"
    # sacct's PENDING gives way to squeue's RUNNING; a finished job's sacct answer never does
    states = slurm_parse.resolve(["72", "71"], {"72": slurm_parse.JobState(job_id="72", state="PENDING"),
                                                "71": slurm_parse.JobState(job_id="71", state="COMPLETED")})
    slurm_parse.prefer_queue(states, {"72": slurm_parse.JobState(job_id="72", state="RUNNING"),
                                      "71": slurm_parse.JobState(job_id="71", state="RUNNING")})
    assert states["72"].state == "RUNNING" and states["71"].state == "COMPLETED"
