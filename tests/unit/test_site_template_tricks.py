"""The tricks by which a site's template undid sf's guarantees while each of its blocks passed
`bash -n` (issue 44), each refused in one line naming the file, the block, the script line
and the rule, on the whole rendered script (launcher.render.site_checks); what a careful
site writes still renders. And the bounds of a render (issue 47): a huge number, a huge
text, a NUL byte or non-UTF-8 in the file, for submit's render and doctor's check alike."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unit_helpers import EXTENDS, make_plan, render_with, site_with  # noqa: E402

from launcher.errors import SpecError  # noqa: E402
from launcher.render import site_shell, site_template  # noqa: E402


def refused(tmp_path, template: str, plan=None) -> str:
    with pytest.raises(SpecError) as err:
        render_with(tmp_path, template, plan=plan)
    assert err.value.field == "site.templates_dir"
    assert "\n" not in err.value.message
    return err.value.message


def block(name: str, body: str) -> str:
    return EXTENDS + "{% block " + name + " %}\n" + body + "\n{% endblock %}\n"


@pytest.mark.parametrize("line,option", [
    ("#SBATCH --requ", "requeue"), ("#SBATCH --out=/tmp/x.out", "output"), ("#SBATCH --err=/tmp/e", "error"),
    ("#SBATCH --dep=afterok:1", "dependency"), ("#SBATCH --job-n=x", "job-name"), ("#SBATCH --no-req", "no-requeue"),
    ("#SBATCH --sig=USR2@10", "signal"), ("#SBATCH --exp=NONE", "export"), ("#SBATCH --open=truncate", "open-mode"),
])
def test_an_sbatch_option_sf_sets_is_refused_abbreviated_too(tmp_path, line, option):
    message = refused(tmp_path, block("extra_sbatch", line))
    assert f"block extra_sbatch, {line!r}: sf sets --{option} itself" in message


@pytest.mark.parametrize("body,rule", [
    ("scontrol() { :; }", "may not define functions (scontrol)"),
    ("function wait { :; }", "may not define functions (wait)"),
    ("kill () { :; }", "may not define functions (kill)"),
    ("alias scontrol=true", "may not call alias"),
    ("shopt -s expand_aliases", "may not call shopt"),
    ("exit 0", "may not call exit"),
    ("true && exit 0", "may not call exit"),
    ("if true; then exit 0; fi", "may not call exit"),
    ("command exit 0", "may not call exit"),
    ("builtin exit 0", "may not call exit"),
    ("exec sleep 1", "may not call exec"),
    ("trap - USR1", "may not call trap"),
    ("readonly X=1", "may not call readonly"),
    ("eval 'exit 0'", "may not call eval"),
    ("enable -n kill", "may not call enable"),
    ("hash -p /tmp/x scontrol", "may not call hash"),
    ("set +u", "may set only -x/-v"), ("set +o pipefail", "may set only -x/-v"), ("set -e", "may set only -x/-v"),
    ("SF_MAX_REQUEUES=99", "sets SF_MAX_REQUEUES"),
    ("export SF_RUN_DIR=/tmp", "export SF_RUN_DIR"),
    ("unset SF_PYTHON", "unset SF_PYTHON"),
    ("declare -r Y=1", "-r/-f/-n"),
    ("declare -n ref=SF_MAX_REQUEUES", "-r/-f/-n"),
    ("read -r SLURM_JOB_ID </dev/null", "read SLURM_JOB_ID"),
    ("printf -v SF_ENTRY x", "printf SF_ENTRY"),
    ("for SF_TASK in 1; do :; done", "for SF_TASK"),
    (": ${SF_MAX_REQUEUES:=99}", "sets SF_MAX_REQUEUES"),
    ("(( SF_MAX_REQUEUES = 99 ))", "changes SF_MAX_REQUEUES in arithmetic"),
    ("source /tmp/site.sh", "source/."),
    ('source "$HOME/site.sh"', "literal absolute path"),
    (". ./env.sh", "literal absolute path"),
    ("$(echo exit) 0", "command name is an expansion"),
    # a later command of sf's (srun, scontrol, python) found in a folder another user can change
    ("export PATH=/tmp/bin:$PATH", "PATH part /tmp/bin: /tmp can be changed by another user"),
    ("PATH=$PATH:", "PATH with an empty part (the current folder)"),
    ("PATH+=:bin", "PATH part 'bin' is not a literal absolute path"),
    ('export PATH="$HOME/bin:$PATH"', "PATH part '$HOME/bin' is not a literal absolute path"),
    ("declare -x LD_LIBRARY_PATH=/tmp/lib", "LD_LIBRARY_PATH part /tmp/lib: /tmp can be changed"),
    ("export PYTHONPATH=/tmp/py", "export PYTHONPATH"),
    ("export LD_PRELOAD=/tmp/x.so", "LD_PRELOAD part /tmp/x.so: /tmp can be changed"),
    ("BASH_ENV=/dev/shm/rc", "BASH_ENV part /dev/shm/rc: /dev/shm can be changed"),
    ("export MODULEPATH=/tmp/mods", "MODULEPATH part /tmp/mods"),
    ("module use /tmp/mods", "module use /tmp/mods: /tmp can be changed by another user"),
    ("unset PATH", "it changes PATH other than by NAME=value"),
    ("read -r PATH </dev/null", "it changes PATH other than by NAME=value"),
    ("IFS=/", "IFS changes how bash reads or runs sf's lines"),
    ("export POSIXLY_CORRECT=1", "POSIXLY_CORRECT changes how bash reads"),
    ("GLOBIGNORE='*'", "GLOBIGNORE changes how bash reads"),
    # the batch shell, its job group or its jobs stopped: the job ended as if it succeeded
    ("kill $$", "kill $$: a site block may stop only a process it started"),
    ("kill -9 0", "kill 0: a site block may stop only"),
    ("kill -TERM -$$", "kill -$$: a site block may stop only"),
    ("kill -- -1", "kill -1: a site block may stop only"),
    ("kill %1", "kill %1: a site block may stop only"),
    ("kill -s KILL $PPID", "kill $PPID: a site block"),
    ("( sleep 60; builtin kill $$ ) &", "kill $$: a site block"),
    ("command kill -STOP $$", "kill $$: a site block"),
    ("env /bin/kill $$", "kill $$: a site block"),
    ("me=$$; kill $me", "kill $me: a site block"),
    ("sleep 9 & p=$!; p=$$; kill $p", "kill $p: a site block"),
    ("pkill -f launcher.injob", "may not call pkill"),
    ("killall python", "may not call killall"),
    # sf's functions and variables by other routes
    ("unset -f sf_phase", "unset sf_phase"),
    ("let SF_MAX_REQUEUES=99", "changes SF_MAX_REQUEUES in arithmetic"),
    ("declare -i n", "-r/-f/-n/-i"),
    ("export SRUN_CPUS_PER_TASK=1", "export SRUN_CPUS_PER_TASK"),
    ("export SQUEUE_FORMAT=%i", "export SQUEUE_FORMAT"),
    ("SINFO_SORT=N", "SINFO_SORT"),
    ("PS4='$(kill $$)'", "PS4 changes how bash reads"),
    # a name held in a variable: `X=SF_MAX_REQUEUES` first
    ("export $X=/tmp", "the name it sets is an expansion"),
    ('printf -v "$X" 99', "the name it sets is an expansion"),
    ("(( $X = 99 ))", "changes a variable named by an expansion in arithmetic"),
    ("[[ 1 -eq $X=99 ]]", "changes a variable named by an expansion in arithmetic"),
    ("FUNCNEST=1", "FUNCNEST changes how bash reads"),
    # sf's `python -m launcher.injob` would import from the folder a site block moved to
    ("cd /tmp", "cd in a site block changes the folder sf's own commands run in"),
    ("if true; then pushd /tmp; fi", "pushd in a site block"),
    ('export "PATH=/tmp:$PATH"', "it changes PATH other than by NAME=value"),
    ("export P\\ATH=/tmp", "it changes PATH other than by NAME=value"),
    ("time -p kill $$", "kill $$: a site block"),
    ('xargs kill <<<"$$"', "kill without a process named on its line"),
    # arithmetic bash evaluates where no (( )) is written
    ("[[ 1 -eq SF_MAX_REQUEUES=99 ]]", "changes SF_MAX_REQUEUES in arithmetic"),
    ("a[SF_MAX_REQUEUES=99]=1", "changes SF_MAX_REQUEUES in arithmetic"),
    ("echo ${a[rc=0]}", "changes rc in arithmetic"),
    ("echo $[SF_MAX_REQUEUES=99]", "changes SF_MAX_REQUEUES in arithmetic"),
    ("unset 'a[SF_MAX_REQUEUES=9]'", "changes SF_MAX_REQUEUES in arithmetic"),
    ("echo ${HOME:SF_MAX_REQUEUES=9}", "changes SF_MAX_REQUEUES in arithmetic"),
])
def test_what_a_site_block_may_not_run(tmp_path, body, rule):
    message = refused(tmp_path, block("prologue", body))
    file = tmp_path / "site-templates" / "train.sbatch.j2"
    assert message.startswith(f"{file}:2: block prologue, script line ")
    assert rule in message, message


def test_a_site_block_may_not_set_what_the_env_rule_refuses():
    # one list of the Slurm clients' variables (sbatch_values) behind both rules
    from launcher.render import site_checks
    from launcher.spec import contracts

    assert set(contracts.SF_ENV_PREFIXES) <= set(site_checks.SF_PREFIXES)
    assert all(site_checks._owned(prefix + "X", set()) for prefix in contracts.SF_ENV_PREFIXES)


def test_the_epilogue_may_not_change_the_exit_status(tmp_path):
    """sf's script ends with `exit "$rc"` after the epilogue: rc=0 there ended a failed run COMPLETED."""
    assert "it sets rc, which sf's script uses" in refused(tmp_path, block("epilogue", "rc=0"))
    assert "changes rc in arithmetic" in refused(tmp_path, block("epilogue", "(( rc = 0 ))"))


PAYLOAD = "x$(touch /tmp/sf-pwned)"


@pytest.mark.parametrize("body,context", [
    ('echo "{{ overrides|last }}"', "double quotes"),
    ("echo '{{ overrides|last }}'", "single quotes"),
    ("cat <<EOF\n{{ overrides|last }}\nEOF", "a here-document"),
    ("echo `echo {{ overrides|last }}`", "backquotes"),
    ("echo $(( {{ overrides|last }} ))", "arithmetic"),
    ("[[ {{ overrides|last }} == x ]]", "[["),
    ("echo ${X:-{{ overrides|last }}}", "a ${...} expansion"),
    ("echo ${{ overrides|last }}", "$'...'"),
])
def test_a_value_printed_where_its_quotes_do_not_hold_is_refused(tmp_path, body, context):
    message = refused(tmp_path, block("prologue", body), plan=make_plan(overrides=("a=1", PAYLOAD)))
    assert "is printed inside " + context in message and "print it as a word of its own" in message


def test_a_value_given_to_a_shell_as_code_is_refused(tmp_path):
    message = refused(tmp_path, block("prologue", "bash -c {{ overrides|last }}"),
                      plan=make_plan(overrides=("a=1", PAYLOAD)))
    assert "given to a shell as code" in message


ALLOWED = EXTENDS + """{% block extra_sbatch %}
#SBATCH --comment=site-{{ comp.pool }}
#SBATCH --licenses=scratch:1
{% endblock %}
{% block prologue %}
set -x
source /etc/profile
echo prologue of "{{ experiment }}" {{ overrides|last }} # {{ overrides|last }}
ulimit -n 65536
export NCCL_DEBUG=INFO
for i in 1 2; do echo "$i"; done
case "$SLURM_JOB_ID" in (1) echo one;; *) : ;; esac
if [[ -n "${SLURM_JOB_ID:-}" ]]; then echo "in job $(( SLURM_RESTART_COUNT + 1 ))"; fi
cat <<'EOF'
exit 0
EOF
{% endblock %}
{% block module_loads %}
module purge
{{ super() }}
{% endblock %}
{% block epilogue %}
echo "site: supervisor exited $rc" > "$SF_RUN_DIR/site-epilogue.txt"
{% endblock %}
"""


LOOKUPS = EXTENDS + """{% block prologue %}
source /etc/profile
export PATH=/usr/local/bin:/opt/site-not-here/bin:$PATH
PATH="$PATH:/usr/sbin"
PATH+=:/usr/games
export LD_LIBRARY_PATH=/opt/cuda-not-here/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH
module use /usr/share/modulefiles
module load cuda
nvidia-smi dmon -d 5 > /dev/null &
SITE_MONITOR=$!
kill -0 "$SITE_MONITOR"
( cd /usr/share && ls >/dev/null ); here=$(cd /usr && pwd)
if (( ${SLURM_PROCID:-0} == 0 && $SITE_MONITOR >= 1 )); then n=$(( $SITE_MONITOR + 1 )); fi
[ -n "${SLURM_JOB_ID:-}" ] && [[ $SLURM_PROCID = 0 || ${SF_RUN_DIR:-x} == x ]] && echo "${SLURM_JOB_ID:-}"
{% endblock %}
{% block epilogue %}
kill "$SITE_MONITOR" $! || true
kill -l
{% endblock %}
"""


def test_a_site_may_still_add_its_own_folders_load_modules_and_stop_what_it_started(tmp_path):
    """module load (the site's module files), root's folders on PATH, kill of its own $!: all still render."""
    script = render_with(tmp_path, LOOKUPS)
    assert "export PATH=/usr/local/bin:/opt/site-not-here/bin:$PATH\n" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_what_a_careful_site_writes_still_renders(tmp_path):
    script = render_with(tmp_path, ALLOWED, plan=make_plan(overrides=("a=1", PAYLOAD)))
    assert "\x00" not in script
    assert "echo prologue of \"grpo\" 'x$(touch /tmp/sf-pwned)' # 'x$(touch /tmp/sf-pwned)'\n" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_the_lexer_finds_commands_functions_and_contexts():
    text = 'A=1 cmd "q $(inner)" <<E\nbody\nE\nf() { g; }\narr=( x $(y) )\necho $((1+2)) # c\n'
    lexer = site_shell.lex(text)
    assert [[w.raw for w in c.words] for c in lexer.commands if c.words] == \
        [["cmd", '"q $(inner)"'], ["inner"], ["g"], ["y"], ["echo", "$((1+2))"]]
    assert [name for name, _ in lexer.functions] == ["f"]
    assert lexer.ctx[text.index("body")] == site_shell.HEREDOC
    assert lexer.ctx[text.index("q $")] == site_shell.DQUOTE
    assert lexer.ctx[text.index("inner")] == site_shell.WORD  # a command substitution is a new context
    assert lexer.ctx[text.index("1+2")] == site_shell.ARITH
    assert lexer.ctx[text.index(" c\n") + 1] == site_shell.COMMENT


# --- the bounds of a render -------------------------------------------------------------------

@pytest.mark.parametrize("expression,says", [
    ("10 ** (10 ** 10)", "larger than 4096 bits"),
    ("10 ** 10 ** 10 ** 10 ** 10", "larger than 4096 bits"),  # (Jinja's ** binds left to right)
    ("(2 ** 3000) * (2 ** 3000)", "a product larger than 4096 bits"),
    ("'x' * 1000000000", "a repetition longer than"),
    ("[1] * 1000000000", "a repetition longer than"),
])
def test_a_huge_number_or_text_is_refused_at_once(tmp_path, expression, says):
    """`{{ 10 ** (10 ** 10) }}` held the CPU in C code past the time limit (Jinja even folds it while it compiles)."""
    t0 = time.monotonic()
    assert says in refused(tmp_path, block("prologue", "# {{ " + expression + " }}"))
    assert time.monotonic() - t0 < 8
    # doctor compiles the same template (Jinja folds constants then; it hung on this before)
    t0 = time.monotonic()
    site_template.check_template_file(tmp_path / "site-templates" / "train.sbatch.j2")
    assert time.monotonic() - t0 < 8


def test_a_render_past_the_memory_limit_is_refused(tmp_path):
    message = refused(tmp_path, block("prologue", "# {{ 'x'|center(1500000000) }}"))
    assert "needs more than 1 GiB of memory to render" in message or "ended without a result" in message


@pytest.mark.parametrize("data,says", [
    (EXTENDS.encode() + b"{% block prologue %}\necho a\x00b\n{% endblock %}\n", ":3: holds a NUL byte"),
    (EXTENDS.encode() + b"{% block prologue %}\necho \xff\n{% endblock %}\n", ":3: is not UTF-8 text"),
])
def test_a_nul_or_non_utf8_template_is_refused_naming_the_file(tmp_path, data, says):
    site = site_with(tmp_path, None)
    file = Path(site.templates_dir) / "train.sbatch.j2"
    file.write_bytes(data)
    for check in (lambda: render_with(tmp_path, None, site=site), lambda: site_template.check_template_file(file)):
        with pytest.raises(SpecError) as err:
            check()
        assert err.value.message.startswith(f"{file}{says}")


def test_blocks_that_render_more_than_a_template_may_hold_are_refused(tmp_path):
    """The whole script is lexed in Python: its site part is bounded as the template file is (256 KiB)."""
    message = refused(tmp_path, block("prologue", "{% for i in range(40000) %}echo {{ i }}\n{% endfor %}"))
    assert "KiB of lines, more than the 256 KiB a site's template may hold" in message


def test_the_lexer_never_fails_on_shell_fragments():
    import random

    fragments = ["'", '"', "$(", ")", "`", "<<EOF\n", "EOF\n", "\n", "case x in a) b;; esac", "((", "))", "${", "}",
                 "[[", "]]", "#", "\\", "f() {", ";", "&&", "|", "a=(", "for i in", "do", "done", "$((", "<(",
                 "echo ", "x", " ", "<<-'E'\n", "\tE\n", "$'", "function "]
    rng = random.Random(44)
    for _ in range(3000):
        text = "".join(rng.choice(fragments) for _ in range(rng.randint(1, 30)))
        lexer = site_shell.lex(text)
        assert len(lexer.ctx) == len(text)
