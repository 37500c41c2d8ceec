"""What a cluster admin gives sf (the site file, its own batch script template, the runtime
registry) and gets wrong: every mistake one line naming the field, exit 2, nothing written;
nothing the admin's template does drops sf's own script."""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import SITE, VENV, make_plan  # noqa: E402

from launcher.compile import scheduler_options  # noqa: E402
from launcher.errors import SpecError  # noqa: E402
from launcher.render import site_template  # noqa: E402
from launcher.render.script import render_script  # noqa: E402
from launcher.spec import layers  # noqa: E402

# --- the scheduler options: one error line, whatever the key ----------------------------------

@pytest.mark.parametrize("provenance,field", [({"slurm.sbatch": layers.SITE}, "site.slurm.sbatch"),
                                              ({}, "slurm.sbatch")])
def test_an_sbatch_key_with_a_newline_is_one_error_line(provenance, field):
    """`sbatch: {"comment\\n#SBATCH --x": y}` (site file or config.yaml): the field named the raw
    key, so the error printed as two lines, the second starting with #SBATCH."""
    with pytest.raises(SpecError) as err:
        scheduler_options.checked({"sbatch": {"comment\n#SBATCH --x": "y"}}, provenance)
    assert err.value.field == field
    assert "\n" not in str(err.value) and "'comment\\n#SBATCH --x'" in str(err.value)
    with pytest.raises(SpecError) as err:  # a printable key keeps its own field
        scheduler_options.checked({"sbatch": {"wrap": "x"}}, provenance)
    assert err.value.field == field + ".wrap"


# --- a site's own template (site file: templates_dir) -----------------------------------------
EXTENDS = '{% extends "sf/train.sbatch.j2" %}\n'


def _site(tmp_path):
    folder = tmp_path / "site-templates"
    folder.mkdir(exist_ok=True)
    return replace(SITE, templates_dir=str(folder)), folder / "train.sbatch.j2"


def _refused(site) -> str:
    with pytest.raises(SpecError) as err:
        render_script(make_plan(), site, VENV)
    assert err.value.field == "site.templates_dir" and "\n" not in str(err.value)
    return err.value.message


@pytest.mark.parametrize("make", ["folder", "dangling symlink", "fifo"])
def test_a_template_that_is_no_regular_file_is_refused_not_skipped(tmp_path, make):
    """A train.sbatch.j2 that is a folder, a dangling symlink or a FIFO was taken for no
    template at all: sf's script rendered, the site's silently left out (and a FIFO's read would
    have waited forever had it been tried)."""
    site, file = _site(tmp_path)
    {"folder": file.mkdir, "dangling symlink": lambda: file.symlink_to(tmp_path / "gone"),
     "fifo": lambda: os.mkfifo(file)}[make]()
    assert _refused(site) == f"{file}: is not a regular file; put the site's template there, or remove it to use sf's"


def test_a_symlinked_template_is_the_file_it_names(tmp_path):
    site, file = _site(tmp_path)
    (tmp_path / "real.j2").write_text(EXTENDS + "{% block prologue %}\nulimit -n 65536\n{% endblock %}\n")
    file.symlink_to(tmp_path / "real.j2")
    assert "\nulimit -n 65536\n" in render_script(make_plan(), site, VENV)


def test_a_huge_template_is_refused_unread(tmp_path):
    """A 48 MB template rendered a 48 MB script in 3.5 s (sbatch refuses over 4 MB)."""
    site, file = _site(tmp_path)
    file.write_text(EXTENDS + "{% block prologue %}\n" + "# pad\n" * 50_000 + "{% endblock %}\n")
    assert _refused(site) == f"{file}: is larger than 256 KiB; a site's template is a few blocks of shell lines " \
                             "(is it the right file?)"


def test_a_template_that_prints_without_end_stops_at_sbatchs_limit(tmp_path, monkeypatch):
    """`{{ "x" * 100000000 }}` took 9 s and 500 MB before; a loop printing 10^10 lines never ended."""
    monkeypatch.setattr(site_template, "MAX_SCRIPT_CHARS", 100_000)  # the same rule, a smaller bound
    site, file = _site(tmp_path)
    file.write_text(EXTENDS + "{% block prologue %}\n{% for i in range(100000) %}{% for j in range(100000) %}"
                    "# {{ i }} {{ j }}\n{% endfor %}{% endfor %}\n{% endblock %}\n")
    assert "renders a batch script larger than 0 MiB, sbatch's default limit" in _refused(site)
    monkeypatch.undo()
    assert site_template.MAX_SCRIPT_CHARS == 4 * 1024 * 1024


def test_a_template_that_loops_without_printing_stops_at_the_time_budget(tmp_path, monkeypatch):
    """A loop that prints nothing never reaches the size bound: 10^10 empty turns ran without end."""
    monkeypatch.setattr(site_template, "MAX_RENDER_S", 0.5)  # the same rule, a shorter budget
    site, file = _site(tmp_path)
    file.write_text(EXTENDS + "{% block prologue %}\n{% for i in range(100000) %}{% for j in range(100000) %}"
                    "{% endfor %}{% endfor %}\n{% endblock %}\n")
    t0 = time.monotonic()
    assert _refused(site) == f"{file}: was still rendering after 0.5 s (a site's blocks take milliseconds): " \
                             "a loop without end? Loop over less"
    assert time.monotonic() - t0 < 5
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler, None)  # restored


def test_an_undefined_name_is_named_with_its_line(tmp_path):
    """An undefined name fails while the template renders: its line comes from the traceback,
    as a syntax error's from the parser."""
    site, file = _site(tmp_path)
    file.write_text(EXTENDS + "{% block prologue %}\necho hi\n{{ no_such_value }}\n{% endblock %}\n")
    assert _refused(site) == f"{file}:4: UndefinedError: 'no_such_value' is undefined"


@pytest.mark.parametrize("blocks,block,line", [
    # a here-document opened in the prologue and ended in the epilogue: sf's environment, requeue
    # trap and supervisor became its text; the script parsed (bash -n) and was submitted
    ("{% block prologue %}\ncat >/dev/null <<'SITE'\n{% endblock %}\n{% block epilogue %}\nSITE\n{% endblock %}\n",
     "prologue", 2),
    ("{% block prologue %}\n: '\n{% endblock %}\n", "prologue", 2),  # the script did not even parse
    ("{% block prologue %}\nulimit -n 65536 \\\n{% endblock %}\n", "prologue", 2),  # joined sf's next line
    ("{% block prologue %}\ntrue &&\n{% endblock %}\n", "prologue", 2),
    ("{% block module_loads %}\n{{ super() }}\nif true; then\n{% endblock %}\n", "module_loads", 2),
    ("{% block prologue %}\n{% endblock %}\n{% block epilogue %}\n{\n{% endblock %}\n", "epilogue", 4),
])
def test_a_block_that_swallows_sfs_lines_is_refused(tmp_path, blocks, block, line):
    site, file = _site(tmp_path)
    file.write_text(EXTENDS + blocks)
    message = _refused(site)
    assert message.startswith(f"{file}:{line}: its {block} block is not whole shell on its own (bash -n: ")
    assert message.endswith("); close every quote, here-document, bracket and if/for/case in the block it opens, "
                            "or sf's lines after it would not run")


def test_whole_shell_blocks_pass(tmp_path):
    site, file = _site(tmp_path)
    file.write_text(EXTENDS + "{% block prologue %}\n# a comment ending in \\\nulimit -n 65536\n"
                    "cat <<'EOF'\nhello\nEOF\nif true; then echo ok; fi\n{% endblock %}\n"
                    "{% block module_loads %}\nmodule purge\n{{ super() }}\n{% endblock %}\n"
                    "{% block epilogue %}{% endblock %}\n")
    script = render_script(make_plan(), replace(site, modules=("cuda/12",)), VENV)
    assert "module purge\ntype module" in script and "\nmodule load cuda/12\n" in script


# --- sf doctor: what only a submit read of the site file --------------------------------------

def test_doctor_checks_the_sites_time_scheduler_defaults_and_template(tmp_path):
    """A site slurm.time of 99:99:99, an sbatch default sf refuses, a template that does not
    parse: doctor said nothing of them, and every user's submit failed on them."""
    from launcher.submit import doctor  # noqa: PLC0415

    site, file = _site(tmp_path)
    file.write_text(EXTENDS + "{% block prologue %}{% if %}{% endblock %}\n")
    bad = replace(site, time="99:99:99", raw={"slurm": {"dependency": "afterok:1;x", "sbatch": {"wrap": "x"}}})
    checks = {c.name: c for c in doctor.check_site_values(bad)}
    time = checks["site slurm.time"]
    assert time.status == doctor.FAIL and "minutes must be below 60" in time.detail
    assert checks["site.slurm.dependency"].status == doctor.FAIL
    assert checks["site template"].status == doctor.FAIL and checks["site template"].detail.startswith(f"{file}:2: ")
    good = doctor.check_site_values(replace(bad, time="04:00:00", raw={}, templates_dir=None))
    assert [(c.name, c.status) for c in good] == [("site slurm.time", doctor.OK),
                                                  ("site scheduler defaults", doctor.OK)]


def test_doctor_quotes_a_module_runtimes_probe(monkeypatch):
    """A module runtime's probe is a bash line: its module `#1` (the registry allows `#`) made
    the rest of the line a comment, and sf's folder with a space split the stacks script's path."""
    import subprocess  # noqa: PLC0415

    from launcher.runtime import Runtime  # noqa: PLC0415
    from launcher.submit import doctor  # noqa: PLC0415

    lines = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: lines.append(argv[-1]) or
                        subprocess.CompletedProcess(argv, 0, "0.9.1\n", ""))
    monkeypatch.setattr(doctor, "STACKS_SCRIPT", Path("/opt/my sf/launcher/injob/stacks.py"))
    rt = Runtime(framework="verl", version="0.9.1", kind="module", modules=("verl/0.9.1", "#1"), python="python3")
    assert doctor._probe_runtime("runtime verl 0.9.1", rt, "0.9.1", 5).status == doctor.OK
    doctor.check_py_spy("runtime verl 0.9.1", rt, 600)
    assert lines[0].startswith("module load verl/0.9.1 '#1' && python3 -c 'import importlib.metadata")
    assert lines[1] == "module load verl/0.9.1 '#1' && python3 -I '/opt/my sf/launcher/injob/stacks.py' --find"
