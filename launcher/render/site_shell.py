"""A small bash lexer, enough to find what a site's blocks run in a rendered batch script:
the simple commands (their words and where each starts), the variables they assign, the
functions they define, and the quoting context of every character (so that a value printed
inside double quotes, a here-document or arithmetic can be told from one printed as its own
word). It follows bash's rules for quotes ('', "", $''), backslashes, comments,
here-documents (<<, <<-, quoted delimiters), command substitution ($( ), ``), process
substitution, ${ }, arithmetic ($(( )), (( ))), [[ ]] and `case` patterns. It does not judge
syntax: `bash -n` does (launcher.render.site_checks). Pure; standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The context a character is printed in (Lexer.ctx holds one per character)
WORD, SQUOTE, DQUOTE, ANSI, HEREDOC, COMMENT, BACKTICK, ARITH, PARAM, DBRACKET = range(10)
CONTEXT_NAMES = {WORD: "a plain word", SQUOTE: "single quotes", DQUOTE: "double quotes", ANSI: "$'...' quotes",
                 HEREDOC: "a here-document", COMMENT: "a comment", BACKTICK: "backquotes `...`",
                 ARITH: "arithmetic", PARAM: "a ${...} expansion", DBRACKET: "[[ ... ]]"}
_META = set(" \t\n;&|<>()")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=")
_ORDINARY = re.compile(r"[^\s;&|<>()\\'\"$`@!?*+]+")
_SPECIAL = re.compile(r"[\\'\"$`*?\[{~]")
_BLANKS = re.compile(r"[ \t]*")
_OPERATOR = re.compile(r";;&|;;|;&|&&|\|\||\|&|[;&|()]")
_REDIRECT = re.compile(r"(\d+|\{[A-Za-z_][A-Za-z0-9_]*\})?(<<<|<<-|<<|<>|<&|>&|>>|>\||&>>|&>|<|>)")
# words after which the next word is in command position again
_RESERVED_LEAD = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "coproc"}
_RESERVED_END = {"fi", "done", "}", "esac"}


@dataclass
class Word:
    raw: str  # as written
    start: int
    value: str | None  # quotes removed when it has no expansion in it, else None


@dataclass
class Command:
    """One simple command: its assignments, then its words (words[0] is the command)."""
    start: int
    assigns: list[tuple[str, int]] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    values: dict[int, str] = field(default_factory=dict)  # offset of an assignment -> its word as written


@dataclass
class _State:
    """Where _list is in its commands."""
    cmd: Command | None = None
    command_position: bool = True
    cases: int = 0  # open `case`s
    pattern: bool = False  # reading a case pattern


class _Characters:
    """The characters' side of the lexer: where the reading is (i), the quoting context of
    every character (ctx), quotes, arithmetic, words, blanks, comments and here-document
    bodies. An expansion that may hold commands ($( ), ``, ${ }) is the Lexer's to read."""

    def __init__(self, text: str):
        self.t = text
        self.n = len(text)
        self.i = 0
        self.ctx = bytearray(len(text))  # WORD everywhere unless set
        self.arith: list[tuple[int, int]] = []  # (start, end) of each arithmetic text
        self._heredocs: list[tuple[str, bool]] = []  # pending (delimiter, strip tabs)

    def _dollar_or_backtick(self, kind: int) -> None:
        """At $ or `: the Lexer reads the expansion (its inner text may be commands)."""
        raise NotImplementedError

    # -- characters ---------------------------------------------------------------------
    def _mark(self, start: int, end: int, kind: int) -> None:
        end = min(end, self.n)
        if start < end:
            self.ctx[start:end] = bytes([kind]) * (end - start)

    def _single(self, kind: int) -> None:  # at the opening '
        start = self.i
        end = self.t.find("'", self.i + 1)
        end = self.n if end < 0 else end + 1
        self._mark(start + 1, end, kind)
        self.i = end

    def _ansi(self) -> None:  # at $'
        j = self.i + 2
        while j < self.n and self.t[j] != "'":
            j += 2 if self.t[j] == "\\" else 1
        self._mark(self.i + 1, min(j + 1, self.n), ANSI)
        self.i = min(j + 1, self.n)

    def _double(self) -> None:  # at the opening "
        self.i += 1
        while self.i < self.n and self.t[self.i] != '"':
            self._mark(self.i, self.i + 1, DQUOTE)
            c = self.t[self.i]
            if c == "\\":
                self._mark(self.i, self.i + 2, DQUOTE)
                self.i += 2
            elif c == "$" or c == "`":
                self._dollar_or_backtick(DQUOTE)
            else:
                self.i += 1
        self.i = min(self.i + 1, self.n)

    def _arith(self, start: int, close: str) -> None:
        depth, j = 0, start
        while j < self.n:
            if self.t[j] == "(":
                depth += 1
            elif self.t[j] == ")":
                if depth == 0 and self.t.startswith(close, j):
                    break
                depth -= 1
            j += 1
        self._mark(start, j, ARITH)
        self.arith.append((start, j))
        self.i = min(j + len(close), self.n)

    # -- words --------------------------------------------------------------------------
    def _word(self) -> Word:
        start, t = self.i, self.t
        while self.i < self.n and t[self.i] not in _META:
            plain = _ORDINARY.match(t, self.i)  # a run of characters with no meaning of their own
            if plain:
                self.i = plain.end()
                continue
            c = t[self.i]
            if c == "\\":
                self.i += 2
            elif c == "'":
                self._single(SQUOTE)
            elif c == '"':
                self._double()
            elif c in "$`":
                self._dollar_or_backtick(WORD)
            elif c in "<>" or (c in "@!?*+" and t.startswith("(", self.i + 1)):  # extglob @(...)
                self.i += 1
            else:
                self.i += 1
        self.i = min(self.i, self.n)
        raw = t[start:self.i]
        return Word(raw, start, _literal(raw))

    def _skip_blanks(self) -> None:
        self.i = _BLANKS.match(self.t, self.i).end()
        while self.i < self.n:
            c = self.t[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self.t.startswith("\n", self.i + 1):
                self.i += 2
            else:
                return

    def _comment(self) -> None:
        end = self.t.find("\n", self.i)
        end = self.n if end < 0 else end
        self._mark(self.i, end, COMMENT)
        self.i = end

    def _newline(self) -> None:
        self.i += 1
        for delimiter, strip in self._heredocs:
            while self.i < self.n:
                end = self.t.find("\n", self.i)
                end = self.n if end < 0 else end
                line = self.t[self.i:end]
                done = (line.lstrip("\t") if strip else line) == delimiter
                if not done:
                    self._mark(self.i, end, HEREDOC)
                self.i = min(end + 1, self.n)
                if done:
                    break
        self._heredocs = []


class Lexer(_Characters):
    """The commands' side: simple commands, the variables they assign, the functions they
    define, and the expansions that hold commands of their own."""

    def __init__(self, text: str):
        super().__init__(text)
        self.commands: list[Command] = []
        self.functions: list[tuple[str, int]] = []  # (name, offset)
        self.subshells: list[tuple[int, int]] = []  # (start, end) of each ( ), $( ), <( ) and ` `

    # -- expansions ---------------------------------------------------------------------
    def _dollar_or_backtick(self, kind: int) -> None:
        """At $ or `: an expansion (its inner text lexed as commands where it holds some)."""
        t, i = self.t, self.i
        if t[i] == "`":
            self._backtick()
        elif t.startswith("$((", i):
            self._arith(i + 3, "))")
        elif t.startswith("$(", i):
            self.i = i + 2
            self._subshell(i)
        elif t.startswith("${", i):
            self._param()
        elif t.startswith("$'", i) and kind == WORD:
            self._ansi()
        else:
            self.i = i + 1

    def _backtick(self) -> None:
        start = self.i
        j = start + 1
        while j < self.n and self.t[j] != "`":
            j += 2 if self.t[j] == "\\" else 1
        self._mark(start + 1, j, BACKTICK)
        inner = Lexer(self.t[start + 1:j].replace("\\`", "`").replace("\\\\", "\\"))
        inner._list(None)
        for cmd in inner.commands:  # offsets within the backquotes: the opening one is close enough
            self.commands.append(Command(start, [(name, start + at) for name, at in cmd.assigns],
                                         [Word(w.raw, start, w.value) for w in cmd.words],
                                         {start + at: raw for at, raw in cmd.values.items()}))
        self.functions += [(name, start) for name, _ in inner.functions]
        self.i = min(j + 1, self.n)
        self.subshells.append((start, self.i))

    def _subshell(self, start: int) -> None:
        """After the ( of ( ... ), $( ... ) or <( ... ): its commands, up to and past the )."""
        self._list(")")
        self.i = min(self.i + 1, self.n)
        self.subshells.append((start, self.i))

    def _param(self) -> None:  # at ${
        start, depth, j = self.i, 0, self.i + 2
        while j < self.n:
            c = self.t[j]
            if c == "\\":
                j += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        self._mark(start + 2, j, PARAM)
        assign = re.match(r"([A-Za-z_][A-Za-z0-9_]*):?=", self.t[start + 2:j])
        if assign:  # ${NAME:=value} assigns NAME
            self.commands.append(Command(start, [(assign.group(1), start)]))
        self.i = min(j + 1, self.n)

    # -- commands -----------------------------------------------------------------------
    def _list(self, close: str | None) -> None:
        """Commands up to `close` (`)` or None: the end of the text)."""
        st = _State()
        while True:
            self._skip_blanks()
            if self.i >= self.n:
                return
            t, c = self.t, self.t[self.i]
            if close and t.startswith(close, self.i) and not st.pattern:
                return
            if c == "#" and (self.i == 0 or t[self.i - 1] in " \t\n;&|()"):
                self._comment()
            elif c == "\n":
                self._newline()
                st.cmd, st.command_position = None, not st.pattern
            elif _REDIRECT.match(t, self.i):
                self._redirect(_REDIRECT.match(t, self.i))
            elif c in ";&|()":
                self._operator(st)
            else:
                word = self._word()
                if not word.raw:  # a lone character the word rules skip
                    self.i += 1
                else:
                    self._take_word(st, word)

    def _redirect(self, match) -> None:
        op = match.group(2)
        if op in "<>" and not match.group(1) and self.t.startswith("(", match.end()):
            self.i = match.end() + 1  # process substitution <( ... )
            self._subshell(match.start())
            return
        self.i = match.end()
        self._skip_blanks()
        target = self._word()
        if op in ("<<", "<<-"):
            quoted = any(q in target.raw for q in "'\"\\")
            delimiter = (_literal(target.raw) or target.raw.strip("'\"")) if quoted else target.raw
            self._heredocs.append((delimiter, op == "<<-"))

    def _operator(self, st: _State) -> None:
        op = _OPERATOR.match(self.t, self.i).group(0)
        self.i += len(op)
        cmd = st.cmd
        if op == "(" and st.pattern:  # case (pattern)
            return
        if op == "(" and cmd is not None and len(cmd.words) == 1 and not cmd.assigns:
            self.functions.append((cmd.words[0].raw, cmd.words[0].start))  # name ( ) ...
            self.commands.remove(cmd)
            st.cmd, st.command_position = None, True
        elif op == "(" and st.command_position and self.t.startswith("(", self.i):
            self._arith(self.i + 1, "))")  # (( ... ))
            st.cmd, st.command_position = None, False
        elif op == "(":
            self._subshell(self.i - 1)
            st.cmd, st.command_position = None, False
        elif op == ")" and st.pattern:
            st.pattern, st.cmd, st.command_position = False, None, True
        else:
            if op in (";;", ";&", ";;&") and st.cases:
                st.pattern = True
            st.cmd, st.command_position = None, not st.pattern

    def _take_word(self, st: _State, word: Word) -> None:
        if st.pattern:  # a case pattern (or the esac that ends the case)
            if word.raw == "esac" and st.cases:
                st.cases -= 1
                st.pattern, st.command_position = False, False
            return
        if st.command_position and (st.cmd is None or not st.cmd.words):
            if self._leading_word(st, word):
                return
        if st.cmd is None:
            st.cmd = Command(word.start)
        if not st.cmd.words and not st.cmd.assigns:
            self.commands.append(st.cmd)
        st.cmd.words.append(word)
        st.command_position = False

    def _leading_word(self, st: _State, word: Word) -> bool:
        """A word where a command may start: an assignment, a reserved word, or (False) the command."""
        assign = _ASSIGN.match(word.raw)
        if assign:
            st.cmd = st.cmd or Command(word.start)
            if not st.cmd.assigns and not st.cmd.words:
                self.commands.append(st.cmd)
            st.cmd.assigns.append((assign.group(1), word.start))
            st.cmd.values[word.start] = word.raw
            if self.t.startswith("(", self.i) and self.i == word.start + assign.end():
                self._array()
            return True
        if st.cmd is not None:
            return False
        raw = word.raw
        if raw in _RESERVED_LEAD or raw in _RESERVED_END:
            return True
        if raw == "function":
            self._skip_blanks()
            name = self._word()
            self.functions.append((name.raw, name.start))
        elif raw == "case":
            self._skip_blanks()
            self._word()
            self._skip_blanks()
            self._word()  # in
            st.cases += 1
            st.pattern = True
        elif raw in ("for", "select"):
            self._skip_blanks()
            if self.t.startswith("((", self.i):
                self._arith(self.i + 2, "))")
            else:
                name = self._word()
                st.cmd = Command(word.start, [(name.raw, name.start)], [Word(raw, word.start, raw)])
                self.commands.append(st.cmd)  # its `in` words follow as its arguments
            st.command_position = False
        elif raw == "[[":
            self._dbracket()
            st.command_position = False
        else:
            return False
        return True

    def _array(self) -> None:
        """At the ( of NAME=( ... ): words (not commands) up to the )."""
        self.i += 1
        while self.i < self.n:
            self._skip_blanks()
            if self.i >= self.n or self.t[self.i] == ")":
                break
            if self.t[self.i] == "\n":
                self._newline()
            elif self.t[self.i] == "#":
                self._comment()
            elif not self._word().raw:
                self.i += 1
        self.i = min(self.i + 1, self.n)

    def _dbracket(self) -> None:
        """After `[[`: words up to `]]`, in their own context (their operators end nothing)."""
        while self.i < self.n:
            self._skip_blanks()
            if self.t.startswith("]]", self.i):
                self.i += 2
                return
            if self.i >= self.n:
                return
            if self.t[self.i] == "\n":
                self._newline()
                continue
            start = self.i
            if self.t[self.i] in _META:
                self.i += 1
            else:
                self._word()
            for j in range(start, self.i):
                if self.ctx[j] == WORD:
                    self.ctx[j] = DBRACKET

def _literal(raw: str) -> str | None:
    """The word's value once quotes and backslashes are removed; None when it expands
    something ($, `, a glob) and so has no value before it runs."""
    if not _SPECIAL.search(raw) or raw == "[":  # (`[ -n "$X" ]`: a lone [ is the test command, not a glob)
        return raw
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            out.append(raw[i + 1:i + 2])
            i += 2
        elif c == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                return None
            out.append(raw[i + 1:end])
            i = end + 1
        elif c == '"':
            end = raw.find('"', i + 1)
            inner = raw[i + 1:end] if end >= 0 else None
            if inner is None or any(x in inner for x in "$`\\"):
                return None
            out.append(inner)
            i = end + 1
        elif c in "$`*?[{~":
            return None
        else:
            out.append(c)
            i += 1
    return "".join(out)


def lex(text: str) -> Lexer:
    lexer = Lexer(text)
    lexer._list(None)
    return lexer
