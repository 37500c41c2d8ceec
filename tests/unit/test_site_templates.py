"""A site's own batch script template (site file: templates_dir): it extends sf's
templates/train.sbatch.j2 and overrides its blocks, and sf's guarantees hold whatever it does
with the values it is given: every #SBATCH line checked, every user value one quoted shell
word (launcher.render.sbatch_template). Also: the precompiled template is the template."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_cases import GOLDEN, cases, normalized  # noqa: E402
from unit_helpers import EXTENDS, PAYLOADS, SITE, VENV, directives, het_plan, make_plan, render_with, site_with  # noqa: E402

from launcher.errors import SpecError  # noqa: E402
from launcher.render import sbatch_template  # noqa: E402
from launcher.render.script import render_script  # noqa: E402
from launcher.spec import paths  # noqa: E402
from launcher.spec.site import site_from_dict  # noqa: E402

# --- a site's blocks ------------------------------------------------------------------------

SITE_TEMPLATE = EXTENDS + """
{% block extra_sbatch %}
#SBATCH --comment=site-{{ comp.pool }}
{% if comp.het_group == 0 %}
#SBATCH --licenses=scratch:1
{% endif %}
{% endblock %}
{% block prologue %}
# site prologue
ulimit -n 65536
{% endblock %}
{% block module_loads %}
module purge
{{ super() }}
{% endblock %}
{% block epilogue %}
echo "site: supervisor exited $rc"
{% endblock %}
"""


def test_a_site_overrides_the_four_blocks(tmp_path):
    site = replace(site_with(tmp_path, SITE_TEMPLATE), modules=("cuda/12",))
    script = render_script(het_plan(), site, VENV)
    plain = render_script(het_plan(), replace(site, templates_dir=None), VENV)
    comps, sf_comps = directives(script), directives(plain)
    assert comps[0] == sf_comps[0] + ["--comment=site-train", "--licenses=scratch:1"]
    assert comps[1] == sf_comps[1] + ["--comment=site-teach"]
    assert "set -uo pipefail\n\n# site prologue\nulimit -n 65536\n" in script
    assert "module purge\ntype module >/dev/null 2>&1" in script and "module load cuda/12\n" in script
    assert script.endswith('done\necho "site: supervisor exited $rc"\nexit "$rc"\n')
    # the rest is sf's, line for line
    site_lines = {"#SBATCH --comment=site-train", "#SBATCH --licenses=scratch:1", "#SBATCH --comment=site-teach",
                  "# site prologue", "ulimit -n 65536", "module purge", 'echo "site: supervisor exited $rc"'}
    assert [line for line in script.splitlines() if line not in site_lines] == plain.splitlines()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_a_site_folder_without_the_template_and_an_empty_override_give_sfs_script(tmp_path):
    plain = render_script(make_plan(), SITE, VENV)
    assert render_with(tmp_path, None) == plain
    assert render_with(tmp_path, EXTENDS) == plain
    assert render_with(tmp_path, "{# the site's #}\n" + EXTENDS + "{% block epilogue %}{% endblock %}\n") == plain


# --- values printed by a site's template stay quoted ----------------------------------------

# Everything a site could print, in ways that would lose the quotes if the values were bare
# strings: as given, sliced, replaced, joined, concatenated, lower-cased, char by char, via set.
PRINTS = """
{% block prologue %}
# sf-test-begin
printf '%s\\n' {{ run_dir }} {{ experiment }} {{ sweep_or_none }}
printf '%s\\n' {{ overrides|join(" ") }} {{ entry|first }} {{ env_lines|last }}
printf '%s\\n' {{ overrides|last }} {{ (overrides|last)[1:-1] }} {{ (overrides|last)|replace("'", "") }}
printf '%s\\n' {{ "x" ~ overrides|last }} {{ (overrides|last)|lower }} {{ (overrides|last).strip("'") }}
printf '%s\\n' {% for c in overrides|last %}{{ c }}{% endfor %}

{% set v = (overrides|last)[1:-1] %}
printf '%s\\n' {{ v }} {{ "%s"|format(v) }} {{ env_lines }}
# sf-test-end
{% endblock %}
"""


def _run_block(script: str, tmp_path) -> subprocess.CompletedProcess:
    block = script.split("# sf-test-begin\n", 1)[1].split("# sf-test-end\n", 1)[0]
    return subprocess.run(["bash", "-c", block], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})


@pytest.mark.parametrize("payload", PAYLOADS)
def test_values_a_site_prints_stay_quoted(payload, tmp_path):
    canary = tmp_path / "pwned"
    text = payload.format(canary=canary)
    plan = make_plan(overrides=("a=1", text), env=(("SF_X", text),))
    template = EXTENDS + PRINTS.replace("{{ sweep_or_none }}", "{{ array }}")
    script = render_with(tmp_path, template, plan=plan)
    assert directives(script) == directives(render_script(plan, SITE, VENV))  # no #SBATCH line got in
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    out = _run_block(script, tmp_path)
    assert not canary.exists(), script
    assert out.returncode == 0, out.stderr
    assert text in out.stdout.split("\n") or "\n" in text or "\r" in text  # printed as one word, as given
    assert "#SBATCH" not in script.split("set -uo pipefail", 1)[1].replace(text, "").split("# sf-test-begin")[0]


def test_values_a_site_prints_in_extra_sbatch_are_checked(tmp_path):
    """A value printed onto an #SBATCH line of its own passes only as a plain word; a quoted
    one (a user's override with a space, a newline, a $) is refused, never written."""
    ok = render_with(tmp_path, EXTENDS + "{% block extra_sbatch %}\n#SBATCH --comment={{ experiment }}\n"
                     "{% endblock %}\n")
    assert "--comment=grpo" in directives(ok)[0]
    for payload in PAYLOADS:
        plan = make_plan(overrides=(payload.format(canary=tmp_path / "pwned"),))
        with pytest.raises(SpecError) as err:
            render_with(tmp_path, EXTENDS + "{% block extra_sbatch %}\n#SBATCH --comment={{ overrides|last }}\n"
                        "{% endblock %}\n", plan=plan)
        assert err.value.field == "site.templates_dir"


@pytest.mark.parametrize("body,says", [
    ("#SBATCH --time=99:00:00", "sets --time itself"),
    ("#SBATCH --job-name=other", "sets --job-name itself"),
    ("#SBATCH --dependency=afterok:1", "sets --dependency itself"),
    ("#SBATCH --partition=big", "sets --partition itself"),
    ("#SBATCH hetjob", "not an #SBATCH line sf can pass on"),
    ("#SBATCH -A acct", "not an #SBATCH line sf can pass on"),
    ("#SBATCH --comment=a b", "not an #SBATCH line sf can pass on"),
    ("#SBATCH --comment={{ comp.directives|join(' ') }}", "not an #SBATCH line sf can pass on"),
    ("echo hi", "#SBATCH lines and comments only"),
    ("", "#SBATCH lines and comments only"),
])
def test_bad_extra_sbatch_lines_refused(tmp_path, body, says):
    with pytest.raises(SpecError, match="site.templates_dir") as err:
        render_with(tmp_path, EXTENDS + "{% block extra_sbatch %}\n" + body + "\n{% endblock %}\n")
    assert says in str(err.value)


def test_an_sbatch_line_after_the_header_refused(tmp_path):
    with pytest.raises(SpecError, match="after the first command"):
        render_with(tmp_path, EXTENDS + "{% block prologue %}\n#SBATCH --comment=x\n{% endblock %}\n")


# --- what a site's template may not do --------------------------------------------------------

@pytest.mark.parametrize("template,says", [
    ("#!/bin/bash\necho mine\n", "must start with"),
    ('{% extends "sf/export.sbatch.j2" %}\n', "must start with"),
    ('{% extends "site/train.sbatch.j2" %}\n', "must start with"),
    ('{% extends name %}\n', "must start with"),
    ('echo first\n{% extends "sf/train.sbatch.j2" %}\n', "must start with"),
    (EXTENDS + "{% set x = 1 %}\n", "only {% block %}s may follow"),
    (EXTENDS + "echo outside\n", "only {% block %}s may follow"),
    (EXTENDS + "{% block header %}x{% endblock %}\n", "'header' is not one a site may override"),
    (EXTENDS + "{% block prologue %}{% include 'sf/export.sbatch.j2' %}{% endblock %}\n", "include"),
    (EXTENDS + "{% block prologue %}{% import 'sf/_one_node_job.j2' as x %}{% endblock %}\n", "import"),
    (EXTENDS + "{% block prologue %}{% from 'sf/x.j2' import y %}{% endblock %}\n", "from import"),
    (EXTENDS + "{% block prologue %}{% block inner %}{% endblock %}{% endblock %}\n", "block"),
    (EXTENDS + "{% block prologue %}{% filter replace(\"'\", '') %}{{ run_dir }}{% endfilter %}{% endblock %}\n",
     "filter block"),
    (EXTENDS + "{% block extra_sbatch %}{{ comp.directives[0]|sbatch }}\n{% endblock %}\n", "sbatch filter"),
    (EXTENDS + "{% block prologue %}{% autoescape true %}{{ run_dir }}{% endautoescape %}{% endblock %}\n",
     "autoescape"),
    (EXTENDS + "{% block prologue %}{{ run_dir.__class__('x') }}{% endblock %}\n", "SecurityError"),
    (EXTENDS + "{% block prologue %}{{ overrides.__len__() }}{% endblock %}\n", "SecurityError"),
    (EXTENDS + "{% block prologue %}{{ comp.pool }}{% endblock %}\n", "UndefinedError"),
    (EXTENDS + "{% block prologue %}{{ no_such_value }}{% endblock %}\n", "UndefinedError"),
    (EXTENDS + "{% block prologue %}{% if %}{% endblock %}\n", ":2: "),
])
def test_what_a_site_template_may_not_do(tmp_path, template, says):
    with pytest.raises(SpecError, match="site.templates_dir") as err:
        render_with(tmp_path, template)
    assert says in str(err.value)
    assert str(tmp_path) in str(err.value)  # names the site's file


def test_a_site_template_cannot_change_what_sf_renders_after_it(tmp_path):
    """Tuples, and the immutable sandbox: what sf passes cannot be changed from a block
    rendered before sf's own lines."""
    with pytest.raises(SpecError, match="no attribute 'append'"):
        render_with(tmp_path, EXTENDS + "{% block prologue %}{{ env_lines.append('x') }}{% endblock %}\n")
    with pytest.raises(SpecError, match="SecurityError"):
        render_with(tmp_path, EXTENDS + "{% block prologue %}{{ components[0].update(pool='x') }}{% endblock %}\n")


# --- the site file ----------------------------------------------------------------------------

def _site_dict(**extra) -> dict:
    import yaml

    data = yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())
    return {**data, **extra}


def test_site_templates_dir_checked(tmp_path, monkeypatch):
    assert site_from_dict(_site_dict()).templates_dir is None
    assert site_from_dict(_site_dict(templates_dir=str(tmp_path))).templates_dir == str(tmp_path)
    monkeypatch.setenv("SF_TEST_TPL", str(tmp_path))
    assert site_from_dict(_site_dict(templates_dir="$SF_TEST_TPL")).templates_dir == str(tmp_path)
    with pytest.raises(SpecError, match="templates_dir"):
        site_from_dict(_site_dict(templates_dir="relative/dir"))
    with pytest.raises(SpecError, match="not an existing directory"):
        site_from_dict(_site_dict(templates_dir=str(tmp_path / "missing")))
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match="templates_dir"):
        site_from_dict(_site_dict(templates_dir=str(tmp_path / "file")))


# --- the precompiled template -------------------------------------------------------------------

def test_the_precompiled_template_is_the_template():
    """launcher/render/_train_sbatch.py is templates/train.sbatch.j2 compiled by this Jinja:
    after a change of the template, `python -m launcher.render.sbatch_template`."""
    assert sbatch_template.COMPILED.read_text() == sbatch_template.compile_base(), \
        "run: python -m launcher.render.sbatch_template"


def test_compiled_from_source_when_stale_the_same_script(monkeypatch):
    monkeypatch.setattr(sbatch_template, "_precompiled", lambda: None)
    monkeypatch.setattr(sbatch_template, "_ENV", None)  # a fresh environment: nothing cached
    for name, (plan, site, runtime, kwargs) in cases().items():  # Jinja's rendering, every golden
        assert normalized(render_script(plan, site, runtime, **kwargs)) == (GOLDEN / f"{name}.sbatch").read_text()


def test_rendering_sfs_script_imports_no_jinja(tmp_path):
    """sf submit's path: the precompiled template on launcher.render.template_runtime. A site's
    own template is what brings Jinja in."""
    folder = site_with(tmp_path, EXTENDS).templates_dir
    code = ("import sys; sys.path.insert(0, 'tests/unit'); from unit_helpers import SITE, VENV, het_plan; "
            "from launcher.render.script import render_script; from dataclasses import replace; "
            "render_script(het_plan(), SITE, VENV); print('jinja2' in sys.modules); "
            f"render_script(het_plan(), replace(SITE, templates_dir={folder!r}), VENV); "
            "print('jinja2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=paths.data_root())
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_the_template_runtime_refuses_an_undefined_name():
    from launcher.render import _train_sbatch, template_runtime

    with pytest.raises(template_runtime.UndefinedError, match="'run_dir' is undefined"):
        context = {"components": (), "sf_version": "1", "experiment": "x", "method": "m", "framework": "f",
                   "framework_version": "v", "array": None, "script_name": "job.sbatch", "login_env_unset": None}
        template_runtime.render(_train_sbatch, context, {"sbatch": sbatch_template.sbatch_line},
                                sbatch_template.finalize)
