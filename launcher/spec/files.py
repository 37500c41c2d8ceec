"""Reading the files of a spec and a site: every failure a SpecError naming the path and the
cause (never a traceback), a key given twice in a YAML mapping refused with its lines, a NUL
byte refused in any value. I/O edge of the spec stage (launcher.spec.experiment and
launcher.spec.site read through it).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import yaml

from launcher.errors import SpecError


def read_text_file(path: Path, field_name: str) -> str:
    """A spec or site file's text, or a SpecError naming the path and the cause: not there, a
    directory, a FIFO or device (never opened: reading would block), a symlink loop,
    unreadable, not UTF-8 text."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SpecError(field_name, f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise SpecError(field_name, f"{path} is a directory, not a file; remove it or put the file there")
    if not stat.S_ISREG(mode):
        raise SpecError(field_name, f"{path} is not a regular file (a FIFO, socket or device); "
                        "replace it with the file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(field_name, f"cannot read {path}: {exc.strerror}; fix its permissions") from None
    if b"\x00" in raw:
        raise SpecError(field_name, f"{path} holds NUL bytes: it is a binary file, not YAML text; fix the file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(field_name, f"{path} is not UTF-8 text (byte {exc.start}); fix the file") from None


def parse_yaml_file(path: Path, field_name: str, loader):
    """read_text_file + YAML, every failure a SpecError with the path, the line and the cause."""
    text = read_text_file(path, field_name)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 (SafeLoader subclasses)
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
    it or one of its parents must be a folder, so a dry run refuses what its submit would.
    Reads only; an absent folder is fine (sf creates it)."""
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    for here in (p, *p.parents):
        if os.path.lexists(here):
            if not here.is_dir():
                raise SpecError(field_name, f"{here} is a file where sf needs a folder ({p}); move it away or use "
                                "another runs dir (--runs-dir, $SF_RUNS_DIR or the site's runs_dir)")
            return
