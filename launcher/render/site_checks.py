"""What a site's blocks may run, checked on the whole rendered batch script (not block by
block: a block that passes `bash -n` alone can still define a function named like a command
sf calls later, or end the job early). The script is rendered with marks around each site
block and around each value a site block prints (launcher.render.site_template); this module
strips them, lexes the whole script (launcher.render.site_shell) and refuses, in one line
naming the site's file, the block, the script's line and the rule:
  - a function or alias defined in a site block (it could rename a command sf calls: the
    requeue trap's scontrol, the supervisor's wait);
  - exit, exec, return, logout, trap, readonly, eval, enable, hash, shopt, `set` of any shell
    option but -x/-v, `source`/`.` of anything but a literal absolute path no other user can write;
  - an assignment, unset, declare, read, let, ... of a variable sf's script uses (its SF_*,
    SLURM_*, rc, functions, ... as found in sf's own lines), also in arithmetic wherever bash
    evaluates some (subscripts, [[ -eq ]], $[ ], ${x:offset}) or ${NAME:=...}; a name set
    through another ($X = 1 in arithmetic, export $X=..., printf -v "$X"); declare -i;
  - a value sf hands the template printed where its quoting does not hold: inside double or
    single quotes, a here-document, backquotes, arithmetic, [[ ]] or ${...}; there only
    values of plain characters (letters, digits, ._,:/=+@%-) may go;
  - a folder or file another user could change put where a later command of sf's looks for its
    program, its libraries or its shell code (PATH, LD_LIBRARY_PATH, MODULEPATH, PYTHONPATH,
    `module use`, BASH_ENV, LD_PRELOAD, ...): each part must be a literal absolute path that
    only root or the user can change (as for `source`), or the name's own old value. So a
    command sf's script or its supervisor calls later (srun, scontrol, python) stays root's or
    the user's, while `module load` (the site's own module files) and `source /etc/profile.d/..`
    keep working. IFS, CDPATH, GLOBIGNORE, SHELLOPTS, POSIXLY_CORRECT, ... are not set at all;
  - kill of anything but a process the site's blocks started ($!, or a name set from $!): $$,
    0, a negative number or a %job stops sf's batch shell or supervisor, and the job ends as if
    it succeeded; pkill/killall pick processes by name, sf's own included;
  - cd/pushd/popd outside a subshell: sf's `python -m launcher.injob` imports from the current
    folder first when PYTHONSAFEPATH is not set.
Pure but for `os.lstat` of the paths named.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from launcher import sbatch_values
from launcher.render import site_shell
from launcher.render.site_shell import ARITH, COMMENT, CONTEXT_NAMES, DBRACKET, PARAM, WORD

# The marks (NUL never reaches the script otherwise: quote() writes control characters as
# \xNN, and a template file with a NUL is refused)
BLOCK_START, BLOCK_END, VALUE_START, VALUE_END = "\x00B", "\x00E\x00", "\x00V\x00", "\x00v\x00"
_MARK = re.compile("\x00(B[a-z_]+|E|V|v)\x00")
_PLAIN = re.compile(r"[A-Za-z0-9._,:/=+@%-]*")
_VARIABLE = re.compile(r"\$\{?#?([A-Za-z_][A-Za-z0-9_]*)")
# Names a site block may not set: sf's own (SF_*) and what the Slurm clients sf's script runs read
# (those cover launcher.spec.contracts.SF_ENV_PREFIXES, the `env:` rule)
SF_PREFIXES = ("SF_",) + sbatch_values.SLURM_CLIENT_PREFIXES
# Where a later command finds its program, libraries, modules or Python packages (each part a
# folder only root or the user can change, else a command sf calls later is another user's),
# the files each later bash or program loads first (the same rule), and how bash reads and
# runs sf's lines after the site's (not for a site block at all): one list each, shared with
# the `env:` check (sbatch_values.env_value)
SEARCH_PATHS, CODE_FILES, SHELL_NAMES = sbatch_values.SEARCH_PATHS, sbatch_values.CODE_FILES, sbatch_values.SHELL_NAMES
# Commands that run the rest of their words as a command (what follows them is what runs)
_WRAPPERS = ("command", "builtin", "time", "nohup", "env", "nice", "setsid", "timeout", "stdbuf", "ionice", "xargs")
_PATH_PART = re.compile(r"/[A-Za-z0-9._,+@%=/-]*")
# NAME++, --NAME, NAME = ..., NAME += ... in arithmetic (not $NAME or ${NAME...}: those read it)
_CHANGE = re.compile(r"(\+\+|--)?\s*(?<![$\w{])\b([A-Za-z_][A-Za-z0-9_]*)\b\s*(\+\+|--|[-+*/%&|^]?=(?!=)|<<=|>>=)?")
# ($X = 1 assigns to the variable X names, ++$X too)
_DYNAMIC = r"(\+\+|--){s}\$|\$(\{{[^}}]*\}}|[A-Za-z_][A-Za-z0-9_]*){s}(\+\+|--|[-+*/%&|^]?=(?!=)|<<=|>>=)"
# (in [[ ]] `$X = 1` compares strings: there only $X=1, one word, is arithmetic)
_DYNAMIC_CHANGE, _DYNAMIC_WORD = re.compile(_DYNAMIC.format(s=r"\s*")), re.compile(_DYNAMIC.format(s=""))
_PARAM_RUN = re.compile(re.escape(bytes([PARAM])) + b"+")  # over Lexer.ctx: the characters of a ${...}
_SUBSCRIPT = re.compile(r"\[([^]\n]*)\]")
_STARTED = re.compile(r"""[A-Za-z_][A-Za-z0-9_]*=("?)\$!\1""")

_ENDS = "ends the batch shell before sf's supervisor has run or reported (the job would end as if it succeeded)"
FORBIDDEN = {
    "exit": _ENDS, "exec": _ENDS, "return": _ENDS, "logout": _ENDS, "suspend": _ENDS,
    "trap": "the batch shell's traps are sf's (the requeue on USR1, waiting out TERM)",
    "readonly": "a read-only name can stop sf's script from setting it",
    "eval": "eval runs text as shell, past every quote",
    "alias": "an alias can rename a command sf's script calls", "unalias": "sf's script defines no aliases",
    "enable": "enable can turn off a builtin sf's script calls",
    "hash": "hash can point a command sf's script calls elsewhere",
    "shopt": "shopt changes the shell options sf's script runs with",
}
_NAME_ARGS = ("declare", "typeset", "local", "export", "unset", "read", "mapfile", "readarray", "getopts")
_SHELLS = ("bash", "sh", "dash", "zsh", "ksh")


class Refused(Exception):
    """(offset in the script, the rule): site_template turns it into the one-line refusal."""

    def __init__(self, offset: int, rule: str):
        super().__init__(rule)
        self.offset, self.rule = offset, rule


@dataclass
class Marked:
    text: str  # the script without marks
    blocks: list[tuple[str, int, int]]  # (block, start, end) of each site block's text
    values: list[tuple[int, int]]  # (start, end) of each value a site block printed


def strip_marks(marked: str) -> Marked:
    parts, blocks, values, stack, size = [], [], [], [], 0
    pos = 0
    for match in _MARK.finditer(marked):
        parts.append(marked[pos:match.start()])
        size += match.start() - pos
        pos = match.end()
        kind = match.group(1)
        if kind[0] in "BV":
            stack.append((kind, size))
            continue
        if not stack or stack[-1][0][0] != {"E": "B", "v": "V"}[kind]:
            raise ValueError("unbalanced marks in the rendered script")
        opened, start = stack.pop()
        (blocks.append((opened[1:], start, size)) if kind == "E" else values.append((start, size)))
    parts.append(marked[pos:])
    text = "".join(parts)
    if stack or "\x00" in text:
        raise ValueError("a NUL in the rendered script")
    return Marked(text, blocks, values)


def sf_names(text: str, lexer, blocks) -> set[str]:
    """The variables sf's own lines (the script less the site's blocks) set or read."""
    def sf_line(offset):
        return not any(start <= offset < end for _, start, end in blocks)

    names = {"rc"} | {name for name, at in lexer.functions if sf_line(at)}  # (unset -f sf_phase)
    for cmd in lexer.commands:
        if sf_line(cmd.start):
            names.update(name for name, at in cmd.assigns)
            if cmd.words and cmd.words[0].value in ("export", "local", "declare"):
                names.update(w.raw.split("=", 1)[0] for w in cmd.words[1:] if not w.raw.startswith("-"))
    own, pos = [], 0
    for _, start, end in sorted(blocks, key=lambda b: b[1]):
        own.append(text[pos:start])
        pos = max(pos, end)
    own.append(text[pos:])
    names.update(_VARIABLE.findall("".join(own)))
    return {n for n in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)}


def _owned(name: str, names: set[str]) -> bool:
    return name in names or name.startswith(SF_PREFIXES)


def _changeable(path: str, what: str) -> str | None:
    """Why `path` (a literal absolute path) is not one only root or the user can change, or None."""
    if not path.startswith("/") or ".." in path.split("/") or not _PATH_PART.fullmatch(path):
        return (f"{what} {path!r} is not a literal absolute path (no $, quotes around values, globs, .. or "
                "relative parts)")
    here = "/"
    for part in [p for p in path.split("/") if p]:
        here = os.path.join(here, part)
        try:
            info = os.lstat(here)
        except OSError:
            return None  # not on this node: the compute nodes' own files
        if stat.S_ISLNK(info.st_mode):
            return f"{what} {path}: {here} is a symbolic link; name the file itself"
        # (a folder any user may write, sticky or not, lets another user plant the file where it is missing)
        if info.st_uid not in (0, os.getuid()) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{what} {path}: {here} can be changed by another user"
    return None


def _trusted_source(word) -> str | None:
    """Why `source WORD` is refused, or None: a literal absolute path no other user can write."""
    if not word.value or not word.value.startswith("/"):
        return "source/. may read only a literal absolute path (no $, quotes around values, globs or ..)"
    return _changeable(word.value, "source/. of")


def _lookup_value_rule(name: str, raw: str | None) -> str | None:
    """Why setting a SEARCH_PATHS or CODE_FILES name to `raw` (the value as written) is refused, or None."""
    fix = f"name literal absolute paths only root or you can change, and ${name} for its old value"
    if raw is None:
        return f"it changes {name} other than by NAME=value; {fix}"
    value = raw[1:-1] if len(raw) > 1 and raw[0] == raw[-1] == '"' else raw
    for old in (f"${{{name}:+:${name}}}", f"${{{name}:+:${{{name}}}}}", f"${{{name}:-}}", f"${{{name}}}"):
        value = value.replace(old, f":${name}" if ":+" in old else f"${name}")
    for part in sbatch_values.lookup_parts(name, value):
        if part == f"${name}":
            continue
        why = _changeable(part, f"{name} part") if part else f"{name} with an empty part (the current folder)"
        if why:
            return f"{why}: a command sf's script runs later would find its code there; {fix}"
    return None


def _write_rule(name: str, raw: str | None, names: set[str], how: str) -> str | None:
    """Why a site block may not give `name` the value `raw` (None: unset, read, ...), or None."""
    if _owned(name, names):
        return f"it sets {name}, which sf's script uses" if how == "it sets" else \
            f"{how} {name}: {name} is a variable sf's script uses"
    if name in SHELL_NAMES:
        return f"{how} {name}: {name} changes how bash reads or runs sf's lines after the site's; leave it to sf"
    if name in SEARCH_PATHS or name in CODE_FILES:
        return _lookup_value_rule(name, raw)
    return None


def _kill_rule(args: list, started: set[str]) -> str | None:
    """kill may stop only what a site block started: $!, or a name a site block set from $!."""
    rest = [w.raw for w in args]
    if rest[:1] in (["-l"], ["-L"]):
        return None  # lists signal names
    if rest[:1] in (["-s"], ["-n"]):
        rest = rest[2:]
    elif rest and rest[0].startswith("-") and rest[0] != "--":
        rest = rest[1:]  # -SIGNAL; a later word with a - is a process group
    targets = rest[1:] if rest[:1] == ["--"] else rest
    if not targets:
        return "kill without a process named on its line (xargs kill, kill from a file) may stop sf's own; name $!"
    for target in targets:
        name = re.fullmatch(r'"?\$\{?([A-Za-z_][A-Za-z0-9_]*|!)\}?"?', target)
        if not name or (name.group(1) != "!" and name.group(1) not in started):
            return (f"kill {target}: a site block may stop only a process it started ($!, or a name it set from $!); "
                    "$$, 0, a negative number or a %job stops sf's batch shell or supervisor and the job ends as if it "
                    "succeeded")
    return None


def _unwrapped(words: list) -> list:
    """The words of the command that runs: past command/builtin/env/nohup/timeout ... and their options."""
    if words and words[0].raw == "-p":
        words = words[1:]  # `time -p CMD` (the lexer reads time as a reserved word)
    while words and (words[0].value in _WRAPPERS or words[0].value == "!"):
        words = words[1:]
        while words and re.fullmatch(r"-.*|[A-Za-z_][A-Za-z0-9_]*=.*|\d+(\.\d+)?[smhd]?", words[0].raw):
            words = words[1:]
    return words


def _command_rule(cmd, names: set[str], started: set[str]) -> str | None:
    for name, at in cmd.assigns:
        rule = _write_rule(name, _assigned(cmd.values.get(at)), names, "it sets")
        if rule:
            return rule
    words = _unwrapped(list(cmd.words))
    if not words:
        return None
    head = words[0].value
    if head is None:
        return "its command name is an expansion; site blocks name the commands they run"
    args = [w.value if w.value is not None else w.raw for w in words[1:]]
    program = head.rsplit("/", 1)[-1]
    if head in FORBIDDEN:
        return f"site blocks may not call {head}: {FORBIDDEN[head]}"
    if head in ("source", "."):
        return _trusted_source(words[1]) if len(words) > 1 else "source/. needs a file"
    if program == "kill":
        return _kill_rule(words[1:], started)
    if program in ("pkill", "killall", "skill"):
        return f"site blocks may not call {program}: it picks processes by name, sf's own included"
    if head in ("module", "ml") and args[:1] == ["use"]:
        for arg in [a for a in args[1:] if not a.startswith("-")]:
            why = _changeable(arg, "module use")
            if why:
                return f"{why}: a later `module load` would read another user's module file"
    if head == "set" and any(a.startswith(("-", "+")) and a != "--" and not re.fullmatch(r"[-+][xv]+", a)
                             for a in args):
        return "site blocks may set only -x/-v: sf's script runs with -uo pipefail and relies on it"
    return _name_args_rule(head, words[1:], args, names)


def _folder_rule(cmd, subshells) -> str | None:
    """cd/pushd/popd only in a subshell: sf's `python -m launcher.injob` after the site's lines puts
    the current folder first on its import path (without PYTHONSAFEPATH), so a `launcher` package
    another user left in that folder would run as the job's user."""
    words = _unwrapped(list(cmd.words))
    head = words[0].value if words else None
    if head in ("cd", "pushd", "popd") and not any(s <= cmd.start < e for s, e in subshells):
        return (f"{head} in a site block changes the folder sf's own commands run in (another user's folder "
                f"could hold a package they import); run it in a subshell: ( {head} DIR && ... )")
    return None


def _assigned(raw: str | None) -> str | None:
    """The value an assignment word as written (NAME=value, NAME+=value, NAME[i]=value) gives."""
    if raw is None:
        return None
    left, _, value = raw.partition("=")
    return f"${left[:-1].split('[', 1)[0]}{value}" if left.endswith("+") else value


def _name_args_rule(head: str, words: list, args: list[str], names: set[str]) -> str | None:
    """declare/export/unset/read/printf -v/let ...: the names they set, and how."""
    if head in ("declare", "typeset", "local", "export") and any(
            a.startswith("-") and set(a[1:]) & ({"r", "f"} if head == "export" else {"r", "f", "n", "i"})
            for a in args):
        return f"{head} -r/-f/-n/-i: read-only names, functions, name references (a second name for one of " \
               "sf's variables) and integers (arithmetic on what they are given) are not for site blocks"
    if head == "let":
        return _arith_rule(" ".join(args), names)
    if head == "printf" and "-v" in args[:-1]:
        named = [(args[args.index("-v") + 1], None, True)]
    elif head in _NAME_ARGS:
        setting = head in ("declare", "typeset", "local", "export")
        named = []
        for arg, word in zip(args, words, strict=True):
            left, equals, _ = word.raw.partition("=")
            name = re.sub(r"[\"'\\]", "", left)  # (export "PATH=..." and P\ATH=... set PATH too)
            if not arg.startswith("-"):
                named.append((name, _assigned(word.raw) if setting and equals and name == left else None, bool(equals)))
    else:
        return None
    for arg, value, sets in named:
        name = arg.split("[", 1)[0].rstrip("+")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            return f"{head} {name}: the name it sets is an expansion (it could be one of sf's); name it literally"
        if not sets and head == "export" and name in SEARCH_PATHS + CODE_FILES:
            continue  # `export PATH`: its value as it is
        rule = _write_rule(name, value, names, head)
        if rule:
            return rule
    return None


def _arith_rule(text: str, names: set[str], dynamic=_DYNAMIC_CHANGE) -> str | None:
    for match in _CHANGE.finditer(text):
        if (match.group(1) or match.group(3)) and _owned(match.group(2), names):
            return f"it changes {match.group(2)} in arithmetic; {match.group(2)} is a variable sf's script uses"
    dynamic = dynamic.search(text)
    if dynamic:
        return (f"it changes a variable named by an expansion in arithmetic ({dynamic.group(0).strip()}...): "
                "it could be one of sf's; name it literally")
    return None


def _hidden_arith(text: str, lexer, shell) -> list[tuple[int, int]]:
    """The other texts bash evaluates as arithmetic in the site's blocks: subscripts (a[i]=,
    ${a[i]}, unset 'a[i]', $[...], and [[ ]] whose -eq operands are arithmetic) and the rest of
    a ${...} (${x:offset:length}). Comments aside."""
    out = []
    for start, end in shell:
        out += [(m.start(1), m.end(1)) for m in _SUBSCRIPT.finditer(text, start, end)
                if lexer.ctx[m.start()] != COMMENT]
        out += [m.span() for m in _PARAM_RUN.finditer(lexer.ctx, start, end)]
    return out


def _value_rule(lexer, text: str, start: int, end: int, script_text: str) -> str | None:
    if start >= end or start >= len(lexer.ctx):
        return None
    where = lexer.ctx[start]
    value = script_text[start:end]
    if where == WORD or (where not in (ARITH, DBRACKET) and _PLAIN.fullmatch(value)) or value.isdigit():
        return None
    if where == COMMENT and "\n" not in value:
        return None
    return (f"a value sf hands the template ({value[:40]!r}) is printed inside {CONTEXT_NAMES[where]}, where its "
            "quotes do not hold; print it as a word of its own (echo {{ run_dir }}, not echo \"{{ run_dir }}\")")


def check(marked: Marked, shell_blocks) -> None:
    """Refused (offset, rule) for the first thing a site block may not do (module doc)."""
    text = marked.text
    lexer = site_shell.lex(text)
    names = sf_names(text, lexer, marked.blocks)
    shell = [(s, e) for name, s, e in marked.blocks if name in shell_blocks]

    def in_site(offset: int) -> bool:
        return any(s <= offset < e for s, e in shell)

    # the names a site block set from $! (kill may stop those)
    site_assigns = [(name, cmd.values.get(at) or "") for cmd in lexer.commands if in_site(cmd.start)
                    for name, at in cmd.assigns]
    started = {n for n, raw in site_assigns if _STARTED.fullmatch(raw)} - \
        {n for n, raw in site_assigns if not _STARTED.fullmatch(raw)}  # (P=$!; P=$$; kill $P)
    for name, offset in lexer.functions:
        if in_site(offset):
            raise Refused(offset, f"site blocks may not define functions ({name}): one can rename a command "
                          "sf's script calls")
    for cmd in lexer.commands:
        if in_site(cmd.start):
            rule = _command_rule(cmd, names, started) or _folder_rule(cmd, lexer.subshells)
            if rule:
                raise Refused(cmd.start, rule)
            if cmd.words and (cmd.words[0].value or "").rsplit("/", 1)[-1] in _SHELLS and any(
                    any(s <= w.start < e for s, e in marked.values) for w in cmd.words[1:]):
                raise Refused(cmd.start, "a value sf hands the template is given to a shell as code")
    written = [(start, end, _DYNAMIC_CHANGE) for start, end in lexer.arith]
    for start, end, dynamic in written + [(s, e, _DYNAMIC_WORD) for s, e in _hidden_arith(text, lexer, shell)]:
        if in_site(start):
            rule = _arith_rule(text[start:end], names, dynamic)
            if rule:
                raise Refused(start, rule)
    for start, end in marked.values:
        if in_site(start):
            rule = _value_rule(lexer, text, start, end, text)
            if rule:
                raise Refused(start, rule)
