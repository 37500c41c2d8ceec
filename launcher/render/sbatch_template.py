"""The training job's batch script from templates/train.sbatch.j2, or from a site's own
template that extends it (site file: `templates_dir`). Pure but for reading the templates.

sf's guarantees hold whatever a site's template does:
  - every value in the template's context was checked (an #SBATCH value, launcher.sbatch_values)
    or quoted (a shell word, `quote`) by launcher.render.script before it got here, and is marked
    so: `Shell` (printed as it is) or `Sbatch` (printed as it is only by the `sbatch` filter, on
    an #SBATCH line of sf's base template). Anything else a template prints (a value sliced,
    joined, replaced, a literal) is shell-quoted on the way out (the Environment's finalize);
  - a site's template may only `{% extends "sf/train.sbatch.j2" %}` and override the blocks
    in BLOCKS: no include, import, filter block or other block, no `sbatch` filter; it runs
    in Jinja's immutable sandbox (no `__class__`, no changing the lists sf passes);
  - its script's #SBATCH lines are checked once more: sf's own lines all there, in order,
    before the first command; the site's own extra lines long options with plain values
    (sbatch_values.WORDS) that sf does not set itself; no #SBATCH line after the header.

Login-node cost: Jinja is imported only when a script is rendered, and sf's own template is
not compiled then: launcher/render/_train_sbatch.py holds it compiled to Python (Jinja's
code, byte-compiled by Python like any module), used while the template's SHA-256 and Jinja's
version match what it was compiled from (else the template is compiled as usual).
After changing templates/train.sbatch.j2, compile it again:

    python -m launcher.render.sbatch_template
"""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from pathlib import Path

from launcher import sbatch_values
from launcher.errors import SpecError
from launcher.spec import paths

TEMPLATE = "train.sbatch.j2"  # in templates/, and in a site's templates_dir
BASE = "sf/" + TEMPLATE  # the name a site's template extends
BLOCKS = ("extra_sbatch", "prologue", "module_loads", "epilogue")  # what a site may override
COMPILED = Path(__file__).with_name("_train_sbatch.py")
# #SBATCH options sf sets or relies on: never from a site's template (the site file, the
# spec's slurm: section and the --sbatch allowlist are where the others come from)
SF_OWNED = ("job-name", "output", "error", "array", "requeue", "no-requeue", "signal", "open-mode", "dependency",
            "nodes", "ntasks", "ntasks-per-node", "het-group", "hetjob", "wrap", "parsable", "test-only")
_SITE_LINE = re.compile(r"^#SBATCH --(?P<key>[a-z][a-z0-9-]{0,40})(?:=(?P<value>.*))?$")


class Shell(str):
    """Text safe to print as it is anywhere in the script: a quoted shell word, a checked
    name, or a line sf wrote from such words."""

    __slots__ = ()


class Sbatch(str):
    """A checked #SBATCH value (launcher.sbatch_values): printed as it is only by the
    `sbatch` filter; anywhere else it is quoted like any other text."""

    __slots__ = ()


def quote(value) -> str:
    """Quote for bash; control characters (newlines, ...) never appear raw in the script."""
    text = str(value)
    if not any(ord(c) < 32 or ord(c) == 127 for c in text):
        return shlex.quote(text)
    out = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif c == "'":
            out.append("\\'")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 32 or ord(c) == 127:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def finalize(value) -> str:
    """What a `{{ ... }}` prints: a Shell value or a number as it is, anything else quoted."""
    if type(value) is Shell:
        return value
    if type(value) is int:
        return str(value)
    return quote(value)


def sbatch_line(value) -> Shell:
    """The `sbatch` filter (sf's base template only): `#SBATCH <checked value>`."""
    if type(value) is not Sbatch:
        raise SpecError("template", f"{value!r} is not a checked #SBATCH value")
    return Shell("#SBATCH " + value)


def source_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_ENV = None


def environment():
    """The one Jinja environment (built on first use: Jinja is imported then, not before)."""
    global _ENV
    if _ENV is None:
        _ENV = _make_environment()
    return _ENV


def _make_environment():
    # Jinja is imported on first use only: its import is a cost of every dry run (start-up cost)
    import jinja2
    from jinja2.runtime import BlockReference, Context  # (start-up cost, as above)
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # (start-up cost, as above)

    class SuperReference(BlockReference):
        """`{{ super() }}`: sf's own block, already rendered by these rules: printed as it is,
        less its last newline (the line `{{ super() }}` stands on ends it)."""

        def __call__(self):
            text = super().__call__()
            return Shell(text[:-1] if text.endswith("\n") else text)

    class SfContext(Context):
        def super(self, name, current):
            ref = Context.super(self, name, current)
            return SuperReference(name, self, ref._stack, ref._depth) if isinstance(ref, BlockReference) else ref

    class Loader(jinja2.BaseLoader):
        """`sf/<name>`: sf's templates/ (train.sbatch.j2 precompiled when fresh); nothing else."""

        def get_source(self, environment, template):
            if not template.startswith("sf/") or "/" in template[3:] or template[3:].startswith("."):
                raise jinja2.TemplateNotFound(template)
            path = paths.templates_dir() / template[3:]
            try:
                text = path.read_text(encoding="utf-8")
            except OSError:
                raise jinja2.TemplateNotFound(template) from None
            return text, str(path), lambda: False

        def load(self, environment, name, globals=None):
            if name == BASE:
                text, filename, _ = self.get_source(environment, name)
                compiled = _precompiled(text, jinja2.__version__)
                if compiled is not None:
                    return environment.template_class.from_module_dict(
                        environment, vars(compiled), environment.make_globals(globals))
            return super().load(environment, name, globals)

    env = ImmutableSandboxedEnvironment(
        loader=Loader(), undefined=jinja2.StrictUndefined, autoescape=False, finalize=finalize,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, auto_reload=False)
    env.context_class = SfContext
    env.filters["sbatch"] = sbatch_line
    return env


def _precompiled(text: str, jinja_version: str):
    """launcher/render/_train_sbatch.py when it was compiled from `text` by this Jinja; else None."""
    try:
        from launcher.render import _train_sbatch as compiled  # imports Jinja's runtime (start-up cost)
    except ImportError:
        return None
    if compiled.SOURCE_SHA256 != source_sha256(text) or compiled.JINJA2_VERSION != jinja_version:
        return None
    return compiled


def compile_base() -> str:
    """The text of launcher/render/_train_sbatch.py: templates/train.sbatch.j2 as Jinja compiles it."""
    import jinja2  # Jinja on first use only (start-up cost)

    env = environment()
    text, filename, _ = env.loader.get_source(env, BASE)
    code = env.compile(text, BASE, "templates/" + TEMPLATE, raw=True, defer_init=True)
    # Jinja's lines stay where they are (its debug_info maps template lines to them): the
    # blank line above `def root` says why root is long, the rest goes below
    code = code.replace("\n\ndef root(", "\n# long: Jinja's code of the whole template\ndef root(", 1)
    return (code.rstrip("\n") + "\n\n# ruff: noqa\n"
            f"# Generated by `python -m launcher.render.sbatch_template` from templates/{TEMPLATE}: do not edit.\n"
            f"SOURCE_SHA256 = {source_sha256(text)!r}\nJINJA2_VERSION = {jinja2.__version__!r}\n")


# --- a site's template ----------------------------------------------------------------------

def _refuse(file: Path, lineno: int | None, what: str):
    where = f"{file}:{lineno}" if lineno else str(file)
    raise SpecError("site.templates_dir", f"{where}: {what}")


def _check_site_template(ast, file: Path) -> None:
    """The site's template extends sf's and overrides BLOCKS only (see the module's doc)."""
    from jinja2 import nodes  # Jinja on first use only (start-up cost)

    def blank(node) -> bool:
        return isinstance(node, nodes.Output) and all(
            isinstance(n, nodes.TemplateData) and not n.data.strip() for n in node.nodes)

    top = [n for n in ast.body if not blank(n)]
    first = top[0] if top else None
    if not (isinstance(first, nodes.Extends) and isinstance(first.template, nodes.Const)
            and first.template.value == BASE):
        _refuse(file, first.lineno if first else None,
                f'a site\'s template must start with {{% extends "{BASE}" %}} (then override blocks)')
    for node in top[1:]:
        if not isinstance(node, nodes.Block):
            _refuse(file, node.lineno, f"only {{% block %}}s may follow the extends ({', '.join(BLOCKS)})")
        if node.name not in BLOCKS:
            _refuse(file, node.lineno, f"block {node.name!r} is not one a site may override: {', '.join(BLOCKS)}")
    for node in ast.find_all((nodes.Extends, nodes.Block, nodes.Include, nodes.Import, nodes.FromImport,
                              nodes.FilterBlock, nodes.Filter)):
        if node is first or node in top:
            continue
        if isinstance(node, nodes.Filter):
            if node.name == "sbatch":
                _refuse(file, node.lineno, "the sbatch filter is sf's own (extra #SBATCH lines are written out)")
            continue
        kind = type(node).__name__.lower().replace("fromimport", "from import").replace("filterblock", "filter block")
        _refuse(file, node.lineno, f"a site's template may not use {kind} here (only the blocks {', '.join(BLOCKS)})")


def _site_template(env, file: Path):
    import jinja2  # Jinja on first use only (start-up cost)

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _refuse(file, None, f"cannot be read: {exc}")
    name = "site/" + TEMPLATE
    try:
        ast = env.parse(text, name, str(file))
        _check_site_template(ast, file)
        code = env.compile(ast, name, str(file))
    except jinja2.TemplateSyntaxError as exc:
        _refuse(file, exc.lineno, exc.message or str(exc))
    return env.template_class.from_code(env, code, env.make_globals(None))


def _check_site_header(text: str, components, file: Path) -> None:
    """sf's #SBATCH lines all there, in order, before the first command; the site's own lines
    plain long options sf does not set; no #SBATCH line anywhere else."""
    lines = text.split("\n")
    end = next((i for i, line in enumerate(lines) if i and not line.startswith("#")), len(lines))
    if end >= len(lines) or lines[end] != "set -uo pipefail":
        _refuse(file, None, f"its extra_sbatch block may write #SBATCH lines and comments only, not {lines[end]!r}")
    expected = []
    for index, comp in enumerate(components):
        expected += (["#SBATCH hetjob"] if index else []) + ["#SBATCH " + d for d in comp["directives"]]
    owned = set(SF_OWNED) | {d.split("=", 1)[0][2:] for comp in components for d in comp["directives"]}
    at = 0
    for line in lines[1:end]:
        if at < len(expected) and line == expected[at]:
            at += 1
            continue
        if not line.startswith("#SBATCH"):
            continue
        match = _SITE_LINE.fullmatch(line)
        if not match or (match["value"] is not None and not sbatch_values.WORDS.fullmatch(match["value"])):
            _refuse(file, None, f"{line!r} is not an #SBATCH line sf can pass on: --option or --option=VALUE "
                    "(letters, digits and ._:=,@/+- in the value)")
        if match["key"] in owned:
            _refuse(file, None, f"{line!r}: sf sets --{match['key']} itself (the site file and the spec's "
                    "slurm: section set it)")
    if at != len(expected):
        _refuse(file, None, f"sf's own line {expected[at]!r} is missing from the script's header")
    for line in lines[end:]:
        if line.startswith("#SBATCH"):
            _refuse(file, None, f"{line!r} comes after the first command, where sbatch would not read it; "
                    "write #SBATCH lines in the extra_sbatch block")


def render(context: dict, templates_dir: str | None = None) -> str:
    """The batch script: the site's train.sbatch.j2 when its templates_dir holds one, else sf's.
    `context`: launcher.render.script's checked values (Shell, Sbatch, numbers, their tuples)."""
    import jinja2  # Jinja on first use only (start-up cost)

    env = environment()
    site_file = Path(templates_dir) / TEMPLATE if templates_dir else None
    if site_file is None or not site_file.is_file():
        return env.get_template(BASE).render(context)
    template = _site_template(env, site_file)
    try:
        text = template.render(context)
    except SpecError:
        raise
    except Exception as exc:  # undefined names, the sandbox's refusals, a failing expression
        _refuse(site_file, getattr(exc, "lineno", None) if isinstance(exc, jinja2.TemplateError) else None,
                f"{type(exc).__name__}: {exc}")
    _check_site_header(text, context["components"], site_file)
    return text


if __name__ == "__main__":
    COMPILED.write_text(compile_base())
    print(f"wrote {COMPILED}", file=sys.stderr)
