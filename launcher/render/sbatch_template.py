"""The training job's batch script from templates/train.sbatch.j2 (a site's own template that
extends it: launcher.render.site_template). Pure but for reading the template.

Every value in the template's context was checked (an #SBATCH value, launcher.sbatch_values) or
quoted (a shell word, `quote`) by launcher.render.script before it got here, and is marked so:
`Shell` (printed as it is) or `Sbatch` (printed as it is only by the `sbatch` filter, on an
#SBATCH line of sf's template). Anything else a template prints (a value sliced, joined,
replaced, a literal) is shell-quoted on the way out (the Environment's finalize). The
environment is Jinja's immutable sandbox (no `__class__`, no changing what sf passes), with
StrictUndefined and autoescape off.

Login-node cost: sf's own script is rendered without importing Jinja. launcher/render/
_train_sbatch.py holds Jinja's Python code for the template, which calls the few runtime
pieces in launcher/render/template_runtime.py; it is used while the template's SHA-256 is
the one it was compiled from (else Jinja compiles the template as usual). Jinja is imported
for a site's own template only. After changing templates/train.sbatch.j2, compile it again:

    python -m launcher.render.sbatch_template
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
import sys
from pathlib import Path

from launcher.errors import SpecError
from launcher.render import template_runtime
from launcher.spec import paths

TEMPLATE = "train.sbatch.j2"  # in templates/, and in a site's templates_dir
BASE = "sf/" + TEMPLATE  # the name a site's template extends
BLOCKS = ("extra_sbatch", "prologue", "module_loads", "epilogue")  # what a site may override
COMPILED = Path(__file__).with_name("_train_sbatch.py")


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


# The biggest number and the longest text a template may compute: a script is at most 4 MB
MAX_NUMBER_BITS = 4096
MAX_PRODUCT_LEN = 4 * 1024 * 1024


def check_binop(operator: str, left, right) -> None:
    """`left ** right` and `left * right` only when their result stays small (SecurityError else)."""
    from jinja2.exceptions import SecurityError  # only a site's template computes (start-up cost)

    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if operator == "**" and number(left) and number(right):
        if abs(left) > 1 and right > 0 and math.log2(abs(left)) * right > MAX_NUMBER_BITS:
            raise SecurityError(f"{left!r} ** {right!r} is larger than {MAX_NUMBER_BITS} bits")
    elif operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            if abs(left).bit_length() + abs(right).bit_length() > MAX_NUMBER_BITS:
                raise SecurityError(f"a product larger than {MAX_NUMBER_BITS} bits")
        elif isinstance(left, (str, list, tuple)) or isinstance(right, (str, list, tuple)):
            seq, times = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            if isinstance(times, int) and len(seq) * max(times, 0) > MAX_PRODUCT_LEN:
                raise SecurityError(f"a repetition longer than {MAX_PRODUCT_LEN} items")


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
        """`sf/<name>`: sf's templates/, nothing else."""

        def get_source(self, environment, template):
            if not template.startswith("sf/") or "/" in template[3:] or template[3:].startswith("."):
                raise jinja2.TemplateNotFound(template)
            path = paths.templates_dir() / template[3:]
            try:
                text = path.read_text(encoding="utf-8")
            except OSError:
                raise jinja2.TemplateNotFound(template) from None
            return text, str(path), lambda: False

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        """Jinja's immutable sandbox, and no number or text past what a batch script holds:
        `**` and `*` are checked before they run (one `{{ 10 ** 10 ** 10 }}` holds the CPU in C
        code, where no time limit can stop it, even while Jinja folds constants at compile time)."""

        intercepted_binops = frozenset(("**", "*"))

        def call_binop(self, context, operator, left, right):
            check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

    env = BoundedSandbox(
        loader=Loader(), undefined=jinja2.StrictUndefined, autoescape=False, finalize=finalize,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, auto_reload=False)
    env.context_class = SfContext
    env.filters["sbatch"] = sbatch_line
    return env


def _precompiled():
    """launcher/render/_train_sbatch.py when it was compiled from the template as it is now; else None."""
    text = (paths.templates_dir() / TEMPLATE).read_text(encoding="utf-8")
    try:
        from launcher.render import _train_sbatch as compiled  # sf's template as Python, no Jinja (start-up cost)
    except ImportError:
        return None
    return compiled if compiled.SOURCE_SHA256 == source_sha256(text) else None


def compile_base() -> str:
    """The text of launcher/render/_train_sbatch.py: Jinja's code for templates/train.sbatch.j2,
    calling launcher.render.template_runtime instead of Jinja's runtime."""
    env = environment()
    text, filename, _ = env.loader.get_source(env, BASE)
    code = env.compile(text, BASE, "templates/" + TEMPLATE, raw=True, defer_init=True)
    first, _, rest = code.partition("\n")
    names = first.removeprefix("from jinja2.runtime import ").split(", ")
    uses = {(m[0], m[1]) for m in re.findall(r"\b(context|environment)\.([a-z_]+)", rest)}
    allowed = {("context", u) for u in template_runtime.CONTEXT_USES} | \
        {("environment", u) for u in template_runtime.ENVIRONMENT_USES}
    if not first.startswith("from jinja2.runtime import ") or set(names) - set(template_runtime.__all__) \
            or uses - allowed:
        raise RuntimeError(f"Jinja's code for {TEMPLATE} needs more than launcher/render/template_runtime.py has: "
                           f"{sorted(set(names) - set(template_runtime.__all__))} {sorted(uses - allowed)}")
    # Jinja's lines stay where they are (its debug_info maps template lines to them): the
    # blank line above `def root` says why root is long, the rest goes below
    rest = rest.replace("\n\ndef root(", "\n# long: Jinja's code of the whole template\ndef root(", 1)
    return ("from launcher.render.template_runtime import " + ", ".join(names) + "\n" + rest.rstrip("\n")
            + "\n\n# ruff: noqa\n"
            f"# Generated by `python -m launcher.render.sbatch_template` from templates/{TEMPLATE}: do not edit.\n"
            f"SOURCE_SHA256 = {source_sha256(text)!r}\n")


def render(context: dict) -> str:
    """sf's batch script (templates/train.sbatch.j2) from launcher.render.script's checked
    values (Shell, Sbatch, numbers, their tuples): its precompiled code, or Jinja when the
    template has changed since. A site's own: launcher.render.site_template."""
    compiled = _precompiled()
    if compiled is None:
        return environment().get_template(BASE).render(context)
    return template_runtime.render(compiled, context, {"sbatch": sbatch_line}, finalize)


if __name__ == "__main__":
    COMPILED.write_text(compile_base())
    print(f"wrote {COMPILED}", file=sys.stderr)
