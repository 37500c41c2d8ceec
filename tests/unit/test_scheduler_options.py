"""Scheduler options (launcher.compile.scheduler_options): flags, config.yaml `slurm:` keys and site
defaults -> checked `#SBATCH` lines; per het group vs job-wide; every bad value refused."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.compile import scheduler_options
from launcher.errors import SpecError, SpecErrors
from launcher.plan import Plan, SlurmOptions
from launcher.render.script import render_script
from launcher.spec import layers, paths
from launcher.spec.experiment import schema_errors
from launcher.spec.site import site_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "compiler_fixtures"))
from sfc_helpers import SITE_DICT, base, spec_from_values  # noqa: E402
from unit_helpers import SITE, VENV, directives, het_plan, make_plan  # noqa: E402

from launcher.compile.compiler import compile_plan  # noqa: E402

GRPO = str(paths.data_root() / "examples" / "grpo")
FULL = SlurmOptions(time="00:20:00", reservation="maint", mail_type="END,FAIL", mail_user="alice@example.org",
                    dependency="afterok:123", exclude="node[01-02],node07", constraint="ib",
                    sbatch=(("begin", "now+1hour"), ("mem-per-gpu", "32G"), ("spread-job", None)))


def test_plain_job_gets_every_option():
    (comp,) = directives(render_script(make_plan(slurm=FULL), SITE, VENV))
    for line in ("--reservation=maint", "--mail-type=END,FAIL", "--mail-user=alice@example.org",
                 "--dependency=afterok:123,singleton", "--exclude=node[01-02],node07", "--constraint=ib",
                 "--begin=now+1hour", "--mem-per-gpu=32G", "--spread-job"):
        assert comp.count(line) == 1, line


def test_hetjob_per_group_and_job_wide():
    comps = directives(render_script(het_plan(slurm=FULL), SITE, VENV))
    assert len(comps) == 2
    job_wide = ("--dependency=", "--mail-type=", "--mail-user=", "--begin=")
    per_group = ("--reservation=maint", "--exclude=node[01-02],node07", "--constraint=ib", "--mem-per-gpu=32G",
                 "--spread-job")
    for line in per_group:
        assert line in comps[0] and line in comps[1], line
    for prefix in job_wide:
        assert sum(d.startswith(prefix) for d in comps[0]) == 1, prefix
        assert not any(d.startswith(prefix) for d in comps[1]), prefix


def test_constraint_joins_the_series_own():
    h200 = site_from_dict({**SITE_DICT, "series": {"fake": {"partition": "train", "gpus_per_node": 4,
                                                             "constraint": "h200"}}})
    plan = make_plan(slurm=SlurmOptions(constraint="ib|roce"))
    assert "--constraint=(h200)&(ib|roce)" in directives(render_script(plan, h200, VENV))[0]
    assert "--constraint=h200" in directives(render_script(make_plan(), h200, VENV))[0]


def test_user_singleton_not_doubled_and_any_of_refused():
    (comp,) = directives(render_script(make_plan(slurm=SlurmOptions(dependency="singleton")), SITE, VENV))
    assert [d for d in comp if d.startswith("--dependency")] == ["--dependency=singleton"]
    with pytest.raises(SpecError) as err:
        render_script(make_plan(slurm=SlurmOptions(dependency="afterok:1?afterok:2")), SITE, VENV)
    assert err.value.field == "--dependency" and "join the dependencies with ," in err.value.message


def test_run_job_name_and_singleton():
    """Item 4: the job is named after the run and waits for any other job of that name."""
    (comp,) = directives(render_script(make_plan(), SITE, VENV))
    assert "--job-name=sf-grpo-abcde" in comp and "--dependency=singleton" in comp
    comps = directives(render_script(het_plan(), SITE, VENV))
    assert "--dependency=singleton" in comps[0] and not any(d.startswith("--dependency") for d in comps[1])
    # Slurm carries both over to component 1: there it must not wait for component 0 (same name)
    assert "--job-name=sf-grpo-abcde" in comps[0] and "--job-name=sf-grpo-abcde.g1" in comps[1]
    # an array sweep: one job, many tasks; no singleton (tasks would wait for each other)
    script = render_script(make_plan(), SITE, VENV, array={"size": 2, "sweep_dir": "/runs/sw-abcde", "sweep_id": "sw"})
    (comp,) = directives(script)
    assert "--job-name=sf-grpo" in comp and not any(d.startswith("--dependency") for d in comp)


@pytest.mark.parametrize("expr", ["afterok:123", "afterany:1:2,afternotok:3", "after:5+10", "afterok:7_3",
                                  "afterok:1?afterany:2", "singleton"])
def test_dependency_expressions_accepted(expr):
    assert scheduler_options.checked({"dependency": expr})["dependency"] == expr


def test_mail_type_list_and_case():
    assert scheduler_options.checked({"mail_type": ["end", "FAIL"]})["mail_type"] == "END,FAIL"


def _sf(*args):
    return CliRunner().invoke(main, list(args))


def test_flags_reach_the_script(fake_slurm, site):  # noqa: F811 (the imported fixture)
    result = _sf("submit", GRPO, "--site", site(), "--dry-run", "--reservation", "maint", "--mail-type", "FAIL",
                 "--mail-user", "bob", "--dependency", "afterok:42", "--exclude", "n[1-2]", "--constraint", "a&b",
                 "--sbatch", "nice=10", "--sbatch", "contiguous")
    assert result.exit_code == 0, result.output
    (comp,) = directives(result.stdout)
    for line in ("--reservation=maint", "--mail-type=FAIL", "--mail-user=bob", "--dependency=afterok:42,singleton",
                 "--exclude=n[1-2]", "--constraint=a&b", "--nice=10", "--contiguous"):
        assert line in comp, line


def test_site_defaults_below_config_below_flags(fake_slurm, site):  # noqa: F811 (the imported fixture)
    unit_site = site_from_dict({**SITE_DICT, "slurm": {**SITE_DICT["slurm"], "reservation": "site-res",
                                                  "mail_type": "FAIL", "sbatch": {"comment": "site"}}})
    values = base("grpo", slurm={"reservation": "cfg-res", "sbatch": {"nice": 5}})
    spec = spec_from_values(values)
    from launcher.spec.experiment import _deep_merge, _site_layer

    spec.values = _deep_merge(_deep_merge(spec.values, _site_layer(unit_site)), values)
    plan = compile_plan(spec, unit_site, "/runs/x-abcde")
    assert plan.slurm.reservation == "cfg-res" and plan.slurm.mail_type == "FAIL"
    assert dict(plan.slurm.sbatch) == {"comment": "site", "nice": "5"}
    # and through the CLI: the site's default, overridden by the flag
    path = site(reservation="site-res", mail_user="ops")
    (comp,) = directives(_sf("submit", GRPO, "--site", path, "--dry-run").stdout)
    assert "--reservation=site-res" in comp and "--mail-user=ops" in comp
    (comp,) = directives(_sf("submit", GRPO, "--site", path, "--dry-run", "--reservation", "mine").stdout)
    assert "--reservation=mine" in comp and "--reservation=site-res" not in comp


def test_plan_json_round_trip():
    plan = make_plan(slurm=FULL)
    again = Plan.from_dict(__import__("json").loads(__import__("json").dumps(plan.to_dict())))
    assert again == plan


def test_config_yaml_keys_in_schema():
    assert schema_errors({"method": "verl/grpo", "slurm": {"reservation": "r", "mail_type": ["FAIL"],
                                                           "sbatch": {"mem-per-gpu": "32G", "spread-job": True}}}) == []
    errs = schema_errors({"method": "verl/grpo", "slurm": {"reservaton": "r"}})
    assert errs and "did you mean reservation" in errs[0].message


# --- bad values: one line naming the field and the fix, exit 2, nothing submitted -----------

BAD = [
    ("--reservation", "a b"), ("--reservation", "r\n#SBATCH --qos=evil"), ("--reservation", "$(id)"),
    ("--mail-type", "FAIL,SOMETIMES"), ("--mail-type", "FAIL\n#SBATCH --x"),
    ("--mail-user", "a@b;id"), ("--mail-user", "a b@c"), ("--mail-user", "`id`@x"),
    ("--dependency", "afterok:abc"), ("--dependency", "afterok:1 --qos=x"),
    ("--dependency", "afterok:1,afterok:2?afterok:3"),
    ("--dependency", "afterok:1\n#SBATCH --qos=evil"),
    ("--exclude", "node 1"), ("--exclude", "n1;touch x"), ("--exclude", "n'1"),
    ("--constraint", "a b"), ("--constraint", "a#b"), ("--constraint", "a\nb"),
    ("--sbatch", "nice=1 --qos=evil"), ("--sbatch", "begin=now\n#SBATCH --x"), ("--sbatch", "comment=a b"),
    ("--sbatch", "comment=$(id)"),
    ("--account", "a b"), ("--account", "p\n#SBATCH --qos=evil"), ("--qos", "$(id)"),
]


def test_account_and_qos_flags_over_the_sites(fake_slurm, site):  # noqa: F811 (the imported fixture)
    path = site(account="site-acct", qos="site-qos")
    (comp,) = directives(_sf("submit", GRPO, "--site", path, "--dry-run").stdout)
    assert "--account=site-acct" in comp and "--qos=site-qos" in comp
    (comp,) = directives(_sf("submit", GRPO, "--site", path, "--dry-run", "--account", "mine", "--qos", "high").stdout)
    assert "--account=mine" in comp and "--qos=high" in comp and "site-acct" not in comp
    out = _sf("validate", GRPO, "--site", path, "--account", "mine").stdout
    assert "slurm.account = 'mine'    [--account]" in out and "slurm.qos = 'site-qos'    [site]" in out


@pytest.mark.parametrize("flag,value", BAD)
def test_bad_flag_refused(flag, value, fake_slurm, site):  # noqa: F811 (the imported fixture)
    result = _sf("submit", GRPO, "--site", site(), flag, value)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sf: error: {flag}: "), lines
    assert not fake_slurm.calls("sbatch")


@pytest.mark.parametrize("item,words", [
    ("job-name=x", "sf names the job"), ("output=/tmp/x", "logs"), ("partition=x", "slurm.partition"),
    ("qos=x", "slurm.qos"), ("dependency=afterok:1", "use --dependency"), ("wrap=id", "sf writes the script"),
    ("uid=0", "not in sf's allowlist"), ("clusters=other", "one cluster"), ("mem-per-gpu", "needs a value"),
    ("spread-job=yes", "a flag"), ("Nice=1", "long sbatch option name"), ("nice", "needs a value"),
])
def test_sbatch_allowlist(item, words, fake_slurm, site):  # noqa: F811 (the imported fixture)
    result = _sf("submit", GRPO, "--site", site(), "--sbatch", item)
    assert result.exit_code == 2 and words in result.stderr, result.stderr
    assert result.stderr.startswith("sf: error: --sbatch: ")


def test_bad_config_and_site_values_name_their_key():
    unit_site = site_from_dict({**SITE_DICT, "slurm": {**SITE_DICT["slurm"], "exclude": "n 1"}})
    spec = spec_from_values(base("grpo"))
    from launcher.spec.experiment import _deep_merge, _site_layer

    spec.values = _deep_merge(spec.values, _site_layer(unit_site))
    spec.origins.update({"slurm.exclude": layers.SITE})
    with pytest.raises(SpecErrors) as err:
        compile_plan(spec, unit_site, "/runs/x-abcde")
    assert [e.field for e in err.value.errors] == ["site.slurm.exclude"]
    spec = spec_from_values(base("grpo", slurm={"sbatch": {"comment": "a;b"}}))
    spec.origins["slurm.sbatch.comment"] = layers.CONFIG
    with pytest.raises(SpecErrors) as err:
        compile_plan(spec, SITE, "/runs/x-abcde")
    assert [e.field for e in err.value.errors] == ["slurm.sbatch.comment"]


@pytest.mark.parametrize("field", ["reservation", "mail_user", "dependency", "exclude", "constraint"])
@pytest.mark.parametrize("payload", ["x\n#SBATCH --partition=evil", "x --qos=evil", "x;touch /tmp/p", "$(id)",
                                     "x'y", "x\ry"])
def test_render_refuses_injection_in_any_plan(field, payload):
    """render checks again: a plan built by anything (plan.json, a test) cannot inject."""
    with pytest.raises(SpecError):
        render_script(make_plan(slurm=SlurmOptions(**{field: payload})), SITE, VENV)
    with pytest.raises(SpecError):
        render_script(make_plan(slurm=SlurmOptions(sbatch=(("comment", payload),))), SITE, VENV)


def test_rendered_script_parses():
    script = render_script(het_plan(slurm=FULL), SITE, VENV)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_exclude_bad_nodes_with_preflight_warns(fake_slurm, site):  # noqa: F811 (the imported fixture)
    warned = _sf("submit", GRPO, "--site", site(), "--dry-run", "--preflight", "--exclude-bad-nodes")
    assert warned.exit_code == 0, warned.output
    assert "--exclude-bad-nodes does nothing with --preflight" in warned.output
    quiet = _sf("submit", GRPO, "--site", site(), "--dry-run", "--exclude-bad-nodes")
    assert quiet.exit_code == 0 and "does nothing with --preflight" not in quiet.output
