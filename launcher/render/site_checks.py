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
  - an assignment, unset, declare, read, ... of a variable sf's script uses (its SF_*, SLURM_*,
    rc, ... as found in sf's own lines), also in arithmetic or ${NAME:=...};
  - a value sf hands the template printed where its quoting does not hold: inside double or
    single quotes, a here-document, backquotes, arithmetic, [[ ]] or ${...}; there only
    values of plain characters (letters, digits, ._,:/=+@%-) may go.
Pure but for `os.stat` of a sourced file.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from launcher.render import site_shell
from launcher.render.site_shell import ARITH, COMMENT, CONTEXT_NAMES, DBRACKET, WORD

# The marks (NUL never reaches the script otherwise: quote() writes control characters as
# \xNN, and a template file with a NUL is refused)
BLOCK_START, BLOCK_END, VALUE_START, VALUE_END = "\x00B", "\x00E\x00", "\x00V\x00", "\x00v\x00"
_MARK = re.compile("\x00(B[a-z_]+|E|V|v)\x00")
_PLAIN = re.compile(r"[A-Za-z0-9._,:/=+@%-]*")
_VARIABLE = re.compile(r"\$\{?#?([A-Za-z_][A-Za-z0-9_]*)")
SF_PREFIXES = ("SF_", "SLURM_")

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

    names = {"rc"}
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


def _trusted_source(word) -> str | None:
    """Why `source WORD` is refused, or None: a literal absolute path no other user can write."""
    path = word.value
    if not path or not path.startswith("/") or ".." in path.split("/"):
        return "source/. may read only a literal absolute path (no $, quotes around values, globs or ..)"
    here = "/"
    for part in [p for p in path.split("/") if p]:
        here = os.path.join(here, part)
        try:
            info = os.lstat(here)
        except OSError:
            return None  # not on this node: the compute nodes' own files
        if stat.S_ISLNK(info.st_mode):
            return f"source/. of {path}: {here} is a symbolic link; name the file itself"
        # (a folder any user may write, sticky or not, lets another user plant the file where it is missing)
        if info.st_uid not in (0, os.getuid()) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"source/. of {path}: {here} can be changed by another user"
    return None


def _command_rule(cmd, names: set[str]) -> str | None:
    words = list(cmd.words)
    while words and words[0].value in ("command", "builtin", "time", "nohup", "!"):
        words = [w for w in words[1:] if not (w.value or "").startswith("-")] if words[0].value != "!" else words[1:]
    for name, _ in cmd.assigns:
        if _owned(name, names):
            return f"it sets {name}, which sf's script uses"
    if not words:
        return None
    head = words[0].value
    if head is None:
        return "its command name is an expansion; site blocks name the commands they run"
    args = [w.value if w.value is not None else w.raw for w in words[1:]]
    if head in FORBIDDEN:
        return f"site blocks may not call {head}: {FORBIDDEN[head]}"
    if head in ("source", "."):
        return _trusted_source(words[1]) if len(words) > 1 else "source/. needs a file"
    if head == "set" and any(a.startswith(("-", "+")) and a != "--" and not re.fullmatch(r"[-+][xv]+", a)
                             for a in args):
        return "site blocks may set only -x/-v: sf's script runs with -uo pipefail and relies on it"
    if head in ("declare", "typeset", "local", "export") and any(
            a.startswith("-") and set(a[1:]) & ({"r", "f"} if head == "export" else {"r", "f", "n"}) for a in args):
        return f"{head} -r/-f/-n: read-only names, functions and name references (a second name for one of " \
               "sf's variables) are not for site blocks"
    named = [a for a in args if not a.startswith("-")] if head in _NAME_ARGS else []
    if head == "printf" and "-v" in args[:-1]:
        named = [args[args.index("-v") + 1]]
    if named:
        for arg in named:
            name = arg.split("=", 1)[0].split("[", 1)[0]
            if _owned(name, names):
                return f"{head} {name}: {name} is a variable sf's script uses"
    return None


def _arith_rule(text: str, names: set[str]) -> str | None:
    for match in re.finditer(r"(\+\+|--)?\s*\b([A-Za-z_][A-Za-z0-9_]*)\b\s*(\+\+|--|[-+*/%&|^]?=(?!=)|<<=|>>=)?",
                             text):
        if (match.group(1) or match.group(3)) and _owned(match.group(2), names):
            return f"it changes {match.group(2)} in arithmetic; {match.group(2)} is a variable sf's script uses"
    return None


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

    for name, offset in lexer.functions:
        if in_site(offset):
            raise Refused(offset, f"site blocks may not define functions ({name}): one can rename a command "
                          "sf's script calls")
    for cmd in lexer.commands:
        if in_site(cmd.start):
            rule = _command_rule(cmd, names)
            if rule:
                raise Refused(cmd.start, rule)
            if cmd.words and (cmd.words[0].value or "").rsplit("/", 1)[-1] in _SHELLS and any(
                    any(s <= w.start < e for s, e in marked.values) for w in cmd.words[1:]):
                raise Refused(cmd.start, "a value sf hands the template is given to a shell as code")
    for start, end in lexer.arith:
        if in_site(start):
            rule = _arith_rule(text[start:end], names)
            if rule:
                raise Refused(start, rule)
    for start, end in marked.values:
        if in_site(start):
            rule = _value_rule(lexer, text, start, end, text)
            if rule:
                raise Refused(start, rule)
