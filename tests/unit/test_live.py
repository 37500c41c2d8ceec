"""launcher.submit.live: pools against what the partitions can ever give (pure parts)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import SITE, base, compile_values  # noqa: E402

from launcher.spec.layers import Layer, Origin  # noqa: E402
from launcher.submit import live  # noqa: E402

PARTS = [{"PartitionName": "train"}, {"PartitionName": "teach"}, {"PartitionName": "empty"}]
NODES = [{"NodeName": f"dev{i}", "Gres": "gpu:4", "Partitions": "train,all"} for i in range(1, 7)] + \
        [{"NodeName": "dev7", "Gres": "gpu:h200:8(S:0-1)", "Partitions": "teach,all"},
         {"NodeName": "dev8", "Gres": "(null)", "Partitions": "teach,all"}]


def test_capacity_per_partition():
    cap = live.capacity(PARTS, NODES)
    assert cap["train"] == [4] * 6 and sorted(cap["teach"]) == [0, 8] and cap["empty"] == []
    assert len(cap["all"]) == 8


def _plan(nodes, gpus, **kw):
    plan = compile_values(base("grpo", **kw))
    pool = replace(plan.pools[0], nodes=nodes, gpus_per_node=gpus)
    return replace(plan, pools=(pool, *plan.pools[1:]))


def test_a_pool_the_partition_can_never_hold_names_its_real_size():
    cap = live.capacity(PARTS, NODES)
    errors, _ = live.check(_plan(100, 4), SITE, cap)
    (err,) = errors
    assert err.field == "pools.train"
    msg = str(err)
    assert "100 nodes x 4 GPUs can never run in partition" in msg and "it has 6 nodes" in msg and ":6x4" in msg
    assert live.check(_plan(6, 4), SITE, cap)[0] == []
    errors, _ = live.check(_plan(1, 8), SITE, cap)  # no train node has 8 GPUs
    assert "0 of them with >= 8 GPUs (at most 4 GPUs a node)" in str(errors[0])


def test_a_second_pool_too_big_is_resized_in_config_yaml_not_by_profile():
    # --profile reshapes only the first pool: the hint for another one names its config.yaml key
    plan = _plan(1, 4)
    teach = replace(plan.pools[0], name="teach", series="fake-teach", het_group=1, nodes=3, roles=("teacher",))
    plan = replace(plan, pools=(plan.pools[0], teach))
    site = replace(SITE, series={**SITE.series, "fake-teach": replace(next(iter(SITE.series.values())),
                                                                        partition="teach")})
    cap = live.capacity(PARTS, NODES)
    errors, _ = live.check(plan, site, cap)
    msg = " ".join(str(e) for e in errors)
    assert "spec.resources.pools[1].nodes: " in msg and "--profile" not in msg, msg


def test_a_partition_that_does_not_exist():
    plan = _plan(1, 4)
    plan = replace(plan, slurm=replace(plan.slurm, partition="nope"))
    (err,) = live.check(plan, SITE, live.capacity(PARTS, NODES))[0]
    assert "partition 'nope' does not exist on this cluster (partitions: all, empty, teach, train)" in str(err)


def test_tensor_parallel_that_does_not_divide_the_pool_warns():
    cap = live.capacity(PARTS, NODES)
    plan = _plan(1, 4, knobs={"tensor_model_parallel_size": 3})
    errors, warnings = live.check(plan, SITE, cap)
    assert errors == []
    assert any("tensor_model_parallel_size=3 does not divide pool train's 4 GPUs" in w for w in warnings)
    assert live.check(_plan(1, 4, knobs={"tensor_model_parallel_size": 2}), SITE, cap)[1] == []


def test_node_limits_from_the_probe():
    from launcher.submit.doctor import node_limit_checks

    low = {c.name: c for c in node_limit_checks("h200", "1024\n4096\n1024\n")}
    assert low["nofile h200"].status == "warn" and "hard limit 4096" in low["nofile h200"].detail
    assert low["arp cache h200"].status == "warn" and "gc_thresh3 = 1024" in low["arp cache h200"].detail
    good = {c.name: c.status for c in node_limit_checks("h200", "65535\nunlimited\n8192\n")}
    assert good == {"nofile h200": "ok", "arp cache h200": "ok"}
    assert node_limit_checks("h200", "garbage")[0].status == "fail"


# --- account and QOS where the cluster enforces them ------------------------------------------

ASSOCS = [
    {"User": "alice", "DefaultAccount": "proj", "Cluster": "c1", "Account": "proj", "Partition": "",
     "QOS": "normal,high", "DefaultQOS": "normal"},
    {"User": "alice", "DefaultAccount": "proj", "Cluster": "c1", "Account": "other", "Partition": "",
     "QOS": "normal", "DefaultQOS": ""},
    {"User": "alice", "DefaultAccount": "proj", "Cluster": "c1", "Account": "gpuonly", "Partition": "gpu",
     "QOS": "normal", "DefaultQOS": ""},
]
QOS = ["normal", "high", "low"]


def _acct(account, qos, enforce="associations,qos", origins=None, assocs=ASSOCS, partitions=("train",)):
    return live.check_accounts(account, qos, enforce=live.enforcement(enforce), user="alice", cluster="c1",
                               assocs=assocs, qos_names=QOS, partitions=set(partitions), origins=origins)


def test_enforcement_reads_scontrols_value():
    assert live.enforcement("none") == set() and live.enforcement("") == set()
    assert live.enforcement("associations,limits,qos,safe") == {"associations", "limits", "qos", "safe"}
    assert not live.enforcement("nojobs,nosteps") & live.ENFORCE_ASSOCIATIONS
    assert live.enforcement("limits") & live.ENFORCE_ASSOCIATIONS  # limits turns associations on


def test_nothing_is_said_when_the_cluster_does_not_enforce_associations():
    assert _acct("nope", "nope", enforce="none") == []
    assert _acct("nope", "nope", enforce="nojobs") == []


def test_an_account_that_is_not_an_association_names_the_field_the_value_and_the_allowed_ones():
    (err,) = _acct("nope", None)
    assert err.field == "slurm.account"
    msg = str(err)
    assert "account 'nope' is not one of user alice's associations on cluster c1 (allowed: other, proj)" in msg
    assert "set slurm.account to one of them" in msg
    assert _acct("proj", None) == [] and _acct(None, None) == []
    # an association tied to a partition counts there only
    assert _acct("gpuonly", None, partitions=("gpu",)) == []
    assert "allowed: other, proj" in str(_acct("gpuonly", None)[0])


def test_the_field_is_the_site_files_when_the_account_came_from_there():
    (err,) = _acct("nope", None, origins={"slurm.account": Origin(Layer.SITE, path="site.yaml")})
    assert err.field == "site.slurm.account" and "set site.slurm.account to" in str(err)


def test_the_field_is_the_flag_when_the_account_came_from_one():
    (err,) = _acct("nope", None, origins={"slurm.account": Origin(Layer.SET, flag="--account")})
    assert err.field == "--account" and "set --account to one of them" in str(err)


def test_a_user_without_any_association_is_told_every_job_would_be_refused():
    (err,) = _acct(None, None, assocs=[])
    assert err.field == "slurm.account" and "user alice has no Slurm association on cluster c1" in str(err)


def test_qos_must_exist_and_be_allowed_for_the_account_when_qos_is_enforced():
    (err,) = _acct("proj", "gold")
    assert err.field == "slurm.qos" and "QOS 'gold' does not exist on cluster c1 (QOS: high, low, normal)" in str(err)
    (err,) = _acct("other", "high")
    assert err.field == "slurm.qos"
    assert "QOS 'high' is not allowed for account 'other' on cluster c1 (allowed: normal)" in str(err)
    assert _acct("proj", "high") == []
    assert _acct(None, "high") == []  # the user's default account (proj) allows it
    (err,) = _acct(None, "low")
    assert "not allowed for account 'proj'" in str(err) and "allowed: high, normal" in str(err)
    # associations enforced but not qos: Slurm takes any QOS
    assert _acct("proj", "gold", enforce="associations,limits") == []


def test_validate_live_refuses_an_account_by_one_batched_sacctmgr_query(fake_slurm, tmp_path, monkeypatch):
    """Through the CLI against the fake: scontrol answers partition, node, config in turn."""
    import json

    from click.testing import CliRunner

    from launcher.cli.app import main

    _enforcing(fake_slurm)
    exp = _experiment(tmp_path, account="nope")
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    result = CliRunner().invoke(main, ["validate", str(exp), "--live", "--json"])
    assert result.exit_code == 2, result.output
    out, _ = json.JSONDecoder().raw_decode(result.output, result.output.index("{"))
    (err,) = out["errors"]
    assert err["field"] == "slurm.account" and "'nope'" in err["message"] and "allowed: other, proj" in err["message"]
    sacctmgr = fake_slurm.calls("sacctmgr")
    assert len(sacctmgr) == 1 and "withassoc" in sacctmgr[0] and "name=" in sacctmgr[0] and "cluster=c1" in sacctmgr[0]
    assert [c.split()[2] for c in fake_slurm.calls("scontrol")] == ["partition", "node", "config"]


def test_submit_and_sweep_refuse_it_before_anything_is_written_or_sent(fake_slurm, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from launcher.cli.app import main

    exp = _experiment(tmp_path, account="nope")
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    # a runtime of its own: the dev site's registry is built beside the unit tests (scripts/test)
    # and may not exist yet, and the runtime is resolved before the account is checked
    monkeypatch.setenv("FORGE_IMAGE_VERL", "/opt/verl.sif")
    for args in (["submit", str(exp), "--qos", "gold"], ["sweep", str(exp), "--grid", "rollout_n=4,8"]):
        (fake_slurm.dir.parent / "calls.log").unlink(missing_ok=True)
        _enforcing(fake_slurm)
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert "sf: error: slurm.account: account 'nope' is not one of user" in result.stderr, result.stderr
        assert not fake_slurm.calls("sbatch")
        assert not fake_slurm.runs_dir.exists() or not any(fake_slurm.runs_dir.iterdir())


def _enforcing(fake_slurm):
    """scontrol answers partition, node, config in turn (enforcing associations and qos)."""
    parts = "PartitionName=train State=UP Nodes=dev[1-6]\n"
    nodes = "".join(f"NodeName=dev{i} Gres=gpu:4 Partitions=train\n" for i in range(1, 7))
    fake_slurm.set("scontrol", out=parts)
    fake_slurm.set("scontrol", out=nodes, from_call=2)
    fake_slurm.set("scontrol", out="AccountingStorageEnforce = associations,limits,qos\nClusterName = c1\n",
                   from_call=3)
    fake_slurm.set("sacctmgr", out="".join("|".join(row[f] for f in (
        "User", "DefaultAccount", "Cluster", "Account", "Partition", "QOS", "DefaultQOS")) + "\n" for row in ASSOCS))


def _experiment(tmp_path, **slurm_keys):
    import yaml

    exp = tmp_path / "exp"
    exp.mkdir(exist_ok=True)
    src = Path(__file__).resolve().parents[2] / "examples" / "grpo" / "config.yaml"
    config = yaml.safe_load(src.read_text())
    assets = src.parents[1] / "assets"
    config.update(model=str(assets / "model"), data={"train": {"files": str(assets / "data" / "train.parquet")},
                                                     "validation": {"files": str(assets / "data" / "test.parquet")}})
    config.setdefault("slurm", {}).update(slurm_keys)
    (exp / "config.yaml").write_text(yaml.safe_dump(config))
    return exp


def test_a_hetjob_whose_groups_share_a_partition_must_fit_together():
    # issue 20: 4+4 nodes in a 6-node partition: each group fits alone, the job never runs
    from launcher.plan import Pool

    cap = live.capacity(PARTS, NODES)
    plan = _plan(4, 4)
    two = (Pool("train", "fake", 4, 4, 0, ("actor",)), Pool("teach", "fake", 4, 4, 1, ("teacher",)))
    (err,) = live.check(replace(plan, pools=two), SITE, cap)[0]
    assert "partition train" in str(err) and "8 nodes" in str(err) and "it has 6 nodes" in str(err)
    fits = (Pool("train", "fake", 4, 4, 0, ("actor",)), Pool("teach", "fake", 2, 4, 1, ("teacher",)))
    assert live.check(replace(plan, pools=fits), SITE, cap)[0] == []
    # groups on different partitions are counted apart
    apart = (Pool("train", "fake", 4, 4, 0, ("actor",)), Pool("teach", "fake-teach", 1, 4, 1, ("teacher",)))
    assert live.check(replace(plan, pools=apart), SITE, cap)[0] == []
