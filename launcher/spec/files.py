"""Reading the files of a spec and a site: every failure a SpecError naming the path and the
cause (never a traceback), a key given twice in a YAML mapping refused with its lines, a NUL
byte refused in any value. I/O edge of the spec stage (launcher.spec.experiment and
launcher.spec.site read through it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import yaml

from launcher import gateway
from launcher.errors import SpecError


def expand_user(path, field_name: str) -> Path:
    """`~` and `~USER` at the start of a path, as the shell expands them, or a SpecError naming
    the field when this machine knows no such user (pathlib's expanduser raises RuntimeError)."""
    text = str(path)
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        user = text[1:].partition("/")[0]
        who = f"no user {user!r}" if user else "no home directory for you ($HOME is unset)"
        raise SpecError(field_name, f"{text!r} starts with ~{user}, but this machine knows {who}; "
                        "write the path in full")
    return Path(expanded)


def read_text_file(path: Path, field_name: str) -> str:
    """A spec, site or registry file's text, or a SpecError naming the path and the cause: not
    there, a directory, a FIFO or device (never read: checked on the descriptor it opened, without
    blocking), over MAX_FILE_BYTES (refused unread), a symbolic link of another user on the way
    (launcher.gateway: the user's own links and root's are followed), unreadable, not UTF-8 text.
    The text is read from the one descriptor that was checked: a swap after the check changes nothing."""
    try:
        fd = gateway.open_file(path, field_name, limit=MAX_FILE_BYTES, any_owner=True, follow=True)
        try:
            raw = gateway.read_fd(fd, MAX_FILE_BYTES, str(path), field_name)
        finally:
            os.close(fd)
    except gateway.UnsafeFile as exc:
        raise _refusal(exc, path, field_name) from None
    except OSError as exc:
        fix = "; fix its permissions" if exc.errno in (errno.EACCES, errno.EPERM) else ""
        raise SpecError(field_name, f"cannot read {path}: {exc.strerror}{fix}") from None
    if b"\x00" in raw:
        raise SpecError(field_name, f"{path} holds NUL bytes: it is a binary file, not YAML text; fix the file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(field_name, f"{path} is not UTF-8 text (byte {exc.start}); fix the file") from None


def _refusal(exc: gateway.UnsafeFile, path: Path, field_name: str) -> SpecError:
    """The gateway's refusal of a spec or site file, in the words of one."""
    if exc.kind == "too large":
        size = f"{exc.size} bytes, " if exc.size is not None else ""
        return SpecError(field_name, f"{path} is {size}over {MAX_FILE_BYTES >> 10} KiB: too big to be a spec or "
                         "site file; fix the file")
    if exc.kind == "a folder":
        return SpecError(field_name, f"{path} is a directory, not a file; remove it or put the file there")
    if exc.kind:
        return SpecError(field_name, f"{path} is {exc.kind}, not a regular file (a FIFO, socket or device is never "
                         "read); replace it with the file")
    return SpecError(field_name, exc.message)


# Bounded work on the login node: a spec or site file is refused, before any parsing, over
# MAX_FILE_BYTES, and after composing (which shares an anchor's node among its aliases: linear
# in the text) when its aliases and merge keys would expand it to more than MAX_EXPANDED_NODES
# values or MAX_EXPANDED_CHARS characters of scalars (a "billion laughs" of 10 lines would
# otherwise tie the login node up for minutes in the checks that walk the data).
MAX_FILE_BYTES = 256 << 10
MAX_EXPANDED_NODES = 20_000
MAX_EXPANDED_CHARS = 2 << 20
MERGE_TAG = "tag:yaml.org,2002:merge"


def _key_id(node):
    """What makes two mapping keys the same key (scalars: tag and text; others: the node)."""
    return (node.tag, node.value) if isinstance(node, yaml.ScalarNode) else ("node", id(node))


def resolve_merges(root) -> None:
    """Merge keys (`<<: *base`, `<<: [*a, *b]`) resolved on the composed nodes by YAML's merge
    rule, once per mapping, before anything is constructed: the mapping's own keys win, then
    the merged mappings in the order given (the first that has a key wins), each of them
    already resolved. PyYAML's own flattening mutates shared anchored nodes as it constructs
    them, which depends on construction order: a mapping merging another that itself merges got
    a key's merged value instead of its own, or a false "given twice". A `<<` given twice in
    one mapping, a merge of something that is not a mapping, or a mapping that merges itself,
    is a ConstructorError with its line."""
    done: set[int] = set()
    active: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if isinstance(node, yaml.ScalarNode) or id(node) in done:
            continue
        if leaving:
            active.discard(id(node))
            done.add(id(node))
            if isinstance(node, yaml.MappingNode):
                _merge_one(node)
            continue
        if id(node) in active:
            raise yaml.constructor.ConstructorError(
                None, None, "an alias refers to a collection that holds it (a recursive structure); "
                "write the values out", node.start_mark)
        active.add(id(node))
        stack.append((node, True))
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        stack.extend((child, False) for child in reversed(children))


def _merge_one(node) -> None:
    own, sources, merge_line = [], [], None
    for key_node, value_node in node.value:
        if key_node.tag != MERGE_TAG:
            own.append((key_node, value_node))
            continue
        if merge_line is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"the merge key << is given twice (lines {merge_line} and "
                f"{key_node.start_mark.line + 1}); merge several mappings with one `<<: [*a, *b]`",
                key_node.start_mark)
        merge_line = key_node.start_mark.line + 1
        items = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for item in items:
            if not isinstance(item, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "<< merges mappings only (`<<: *base` or `<<: [*a, *b]`)", item.start_mark)
            sources.append(item)
    if merge_line is None:
        return
    seen = {_key_id(k) for k, _ in own}
    merged = []
    for source in sources:  # already resolved: post-order
        for key_node, value_node in source.value:
            ident = _key_id(key_node)
            if ident not in seen:
                seen.add(ident)
                merged.append((key_node, value_node))
    node.value = merged + own


def check_expansion(root, path, field_name: str) -> None:
    """A SpecError when the composed document, its aliases expanded, would exceed
    MAX_EXPANDED_NODES values or MAX_EXPANDED_CHARS characters (counted on the shared nodes,
    without expanding: linear in the text). resolve_merges has refused cycles."""
    sizes: dict[int, tuple[int, int]] = {}
    stack = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = (1, len(node.value))
            continue
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        if not leaving:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        count, chars = 1, 0
        for child in children:
            c, n = sizes[id(child)]
            count, chars = count + c, chars + n
        sizes[id(node)] = (count, chars)
        if count > MAX_EXPANDED_NODES or chars > MAX_EXPANDED_CHARS:
            raise SpecError(field_name, f"{path}: its anchors and aliases expand it to more than "
                            f"{MAX_EXPANDED_NODES:,} values or {MAX_EXPANDED_CHARS >> 20} MiB of text (from line "
                            f"{node.start_mark.line + 1}; a YAML alias bomb?); write the values out or use fewer "
                            "aliases")


def load_bounded(text: str, loader, path, field_name: str):
    """yaml.load(text, Loader=loader) with merges resolved by YAML's rule and the expansion bounded."""
    instance = loader(text)
    try:
        node = instance.get_single_node()
        if node is None:
            return None
        resolve_merges(node)
        check_expansion(node, path, field_name)
        return instance.construct_document(node)
    finally:
        instance.dispose()


def parse_yaml_file(path: Path, field_name: str, loader):
    """read_text_file + YAML, every failure a SpecError with the path, the line and the cause;
    bounded work: the file's size and its expansion through aliases (load_bounded)."""
    text = read_text_file(path, field_name)
    try:
        return load_bounded(text, loader, path, field_name)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise SpecError(field_name, f"{path} is not valid YAML{where} ({problem}); fix the file") from None
    except RecursionError:
        raise SpecError(field_name, f"{path} is nested too deeply to be a spec; fix the file") from None


def refuse_duplicate_keys(loader, node) -> None:
    """A key given twice in one YAML mapping: a ConstructorError naming both lines."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: PyYAML reports it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1}); keep one",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1


def nul_errors(data, where: str) -> list[SpecError]:
    """A NUL byte in any value or key (bash cuts a string there; Slurm and verl would see
    another value than sf checked): one SpecError per place, naming it."""
    out: list[SpecError] = []
    if isinstance(data, str):
        if "\x00" in data:
            out.append(SpecError(where, f"{data.split(chr(0))[0]!r}... holds a NUL byte (\\0), which bash cuts the "
                                 "value at; remove it"))
    elif isinstance(data, dict):
        for key, value in data.items():
            out += nul_errors(str(key), where) if "\x00" in str(key) else []
            out += nul_errors(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            out += nul_errors(value, f"{where}[{i}]")
    return out



def blocked_path(path: Path, field_name: str) -> None:
    """Why `path` cannot be read when something is in its way (a directory, a FIFO, a symlink
    loop, a parent that is a file): a SpecError naming it; None when it is simply absent."""
    try:
        os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link: `sf new` would write through it
            raise SpecError(field_name, f"{path} is a symlink to {os.readlink(path)}, which does not exist; "
                            "fix or remove the link") from None
        return
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            parent = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
            raise SpecError(field_name, f"{parent} is a file, not a folder, so {path} cannot exist; "
                            "move it away") from None
        raise SpecError(field_name, f"cannot read {path}: {exc.strerror}") from None
    read_text_file(path, field_name)  # a directory, a FIFO: says which


def check_folder_path(path: str, field_name: str) -> None:
    """A folder sf will create or write in (the runs dir): a SpecError when a file stands where
    it or one of its parents must be a folder, or when the user may not write in it (or, while
    it is absent, in the folder it would be created in), so a dry run refuses what its submit
    would. Reads only; an absent folder is fine (sf creates it)."""
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    for here in (p, *p.parents):
        if os.path.lexists(here):  # False too behind a folder the user may not enter: its parent is judged
            if not here.is_dir():
                raise SpecError(field_name, f"{here} is a file where sf needs a folder ({p}); move it away or use "
                                "another runs dir (--runs-dir, $SF_RUNS_DIR or the site's runs_dir)")
            if not os.access(here, os.W_OK | os.X_OK):  # a run's folder is created in it
                made = "" if here == p else f", so sf cannot create {p}"
                raise SpecError(field_name, f"you may not write in {here} (permission denied){made}; use another "
                                "runs dir (--runs-dir, $SF_RUNS_DIR or the site's runs_dir) or fix its permissions")
            return
