"""A site's own batch script template (site file: `templates_dir`, its train.sbatch.j2): it
extends sf's templates/train.sbatch.j2 and overrides named blocks, and sf's guarantees hold
whatever it does (tests/unit/test_site_templates.py tries):
  - it gets the values sf's template gets, checked and quoted first, printed by the same rules
    (launcher.render.sbatch_template: Shell/Sbatch marks, anything else quoted, the sandbox);
  - it may only `{% extends "sf/train.sbatch.j2" %}` and override the blocks in BLOCKS: no
    include, import, filter block, autoescape or other block, no `sbatch` filter (checked on its syntax
    tree before it is compiled);
  - its script's #SBATCH lines are checked once more: sf's own lines all there, in order,
    before the first command; the site's extra lines long options with plain values
    (sbatch_values.WORDS) that sf does not set itself; no #SBATCH line after the header;
  - its #SBATCH lines name no option sf sets, nor a prefix of one (sbatch takes --requ for --requeue);
  - it is a regular UTF-8 file without NUL of at most 256 KiB, its script at most sbatch's
    4 MB, compiled and rendered in a child within site_bounds' time and memory limits;
  - what its shell blocks run is checked on the whole script (launcher.render.site_checks):
    no functions, aliases, exit/exec/trap/..., sf's variables left alone, values printed
    only where their quotes hold;
  - each shell block it overrides is whole shell on its own (`bash -n`), so none swallows
    sf's lines after it (an unclosed quote or here-document, a trailing backslash).
Imported only for a site that names a templates_dir.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from launcher import sbatch_values
from launcher.errors import SpecError
from launcher.render import sbatch_template, site_bounds, site_checks
from launcher.render.sbatch_template import BASE, BLOCKS, TEMPLATE, environment

# #SBATCH options sf sets or relies on: never from a site's template (the site file, the
# spec's slurm: section and the --sbatch allowlist are where the others come from)
SF_OWNED = ("job-name", "output", "error", "array", "requeue", "no-requeue", "signal", "open-mode", "dependency",
            "nodes", "ntasks", "ntasks-per-node", "tasks-per-node", "het-group", "hetjob", "packjob", "pack-group",
            "wrap", "parsable", "test-only", "export", "export-file", "get-user-env", "wait", "kill-on-invalid-dep",
            "chdir", "input", "uid", "gid")
_SITE_LINE = re.compile(r"^#SBATCH --(?P<key>[a-z][a-z0-9-]{0,40})(?:=(?P<value>.*))?$")
# A site's template is a few blocks of shell: one past sf's bound for its YAML files is a
# mistake (a log, an image) and is refused unread. The script it renders is bounded by
# sbatch's own default (slurm.conf max_script_size: 4 MB), checked while it renders, so a
# loop that prints without end stops there instead of filling the login node's memory.
MAX_TEMPLATE_BYTES = 256 * 1024
MAX_SCRIPT_CHARS = 4 * 1024 * 1024
# A site's few blocks render in milliseconds (forking the child included): one still at it
# after this long loops without end (or computes a huge number) and is stopped
MAX_RENDER_S = 10.0
# The blocks that hold shell lines (extra_sbatch holds #SBATCH lines and comments only)
SHELL_BLOCKS = ("prologue", "module_loads", "epilogue")


def _refuse(file: Path, lineno: int | None, what: str):
    where = f"{file}:{lineno}" if lineno else str(file)
    raise SpecError("site.templates_dir", f"{where}: {what}")


def _check_site_template(ast, file: Path) -> dict[str, int]:
    """The site's template extends sf's and overrides BLOCKS only (see the module's doc);
    {block: its line} of the blocks it overrides."""
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
    # (an autoescape block would HTML-escape sf's quotes: ' -> &#39;)
    for node in ast.find_all((nodes.Extends, nodes.Block, nodes.Include, nodes.Import, nodes.FromImport,
                              nodes.FilterBlock, nodes.EvalContextModifier, nodes.Filter)):
        if any(node is t for t in top):  # the extends and the blocks checked above
            continue
        if isinstance(node, nodes.Filter):
            if node.name == "sbatch":
                _refuse(file, node.lineno, "the sbatch filter is sf's own (extra #SBATCH lines are written out)")
            continue
        kind = {"FromImport": "from import", "FilterBlock": "filter block", "ScopedEvalContextModifier": "autoescape",
                "EvalContextModifier": "autoescape"}.get(type(node).__name__, type(node).__name__.lower())
        _refuse(file, node.lineno, f"a site's template may not use {kind} here (only the blocks {', '.join(BLOCKS)})")
    return {node.name: node.lineno for node in top[1:]}


def _mark_blocks(ast, env) -> None:
    """Marks around the text of each block the site overrides and around each value it prints
    (site_checks strips them and checks what is between)."""
    from jinja2 import nodes  # Jinja on first use only (start-up cost)

    for block in ast.body:
        if not isinstance(block, nodes.Block):
            continue
        for out in block.find_all(nodes.Output):
            marked = []
            for child in out.nodes:
                if isinstance(child, nodes.TemplateData):
                    marked.append(child)
                else:
                    marked += [nodes.TemplateData(site_checks.VALUE_START, lineno=child.lineno), child,
                               nodes.TemplateData(site_checks.VALUE_END, lineno=child.lineno)]
            out.nodes = marked
        begin = nodes.TemplateData(site_checks.BLOCK_START + block.name + "\x00", lineno=block.lineno)
        end = nodes.TemplateData(site_checks.BLOCK_END, lineno=block.lineno)
        block.body = [nodes.Output([begin], lineno=block.lineno), *block.body, nodes.Output([end], lineno=block.lineno)]
    ast.set_environment(env)


def _site_template(env, file: Path):
    """The site's template compiled, and {block: its line} of the blocks it overrides."""
    import jinja2  # Jinja on first use only (start-up cost)

    if not file.is_file():  # a folder, a FIFO (reading it would wait forever), a dangling symlink
        _refuse(file, None, "is not a regular file; put the site's template there, or remove it to use sf's")
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        _refuse(file, None, f"cannot be read: {exc}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        _refuse(file, data.count(b"\n", 0, exc.start) + 1, f"is not UTF-8 text (byte {exc.start}); "
                "save it as UTF-8")
    if "\x00" in text:
        _refuse(file, text.count("\n", 0, text.index("\x00")) + 1, "holds a NUL byte; a template is text: "
                "remove it (is it the right file?)")
    if len(data) > MAX_TEMPLATE_BYTES:
        _refuse(file, None, f"is larger than {MAX_TEMPLATE_BYTES // 1024} KiB; a site's template is a few blocks "
                "of shell lines (is it the right file?)")
    name = "site/" + TEMPLATE
    try:
        ast = env.parse(text, name, str(file))
        block_lines = _check_site_template(ast, file)
        _mark_blocks(ast, env)
        code = env.compile(ast, name, str(file))
    except jinja2.TemplateSyntaxError as exc:
        _refuse(file, exc.lineno, exc.message or str(exc))
    return env.template_class.from_code(env, code, env.make_globals(None)), block_lines


def check_template_file(file: Path) -> None:
    """The site's template read, parsed and its structure checked (extends sf's, overrides its
    blocks only), without a plan to render it with, within site_bounds' limits: `sf doctor`'s
    check. SpecError if not."""
    environment()  # Jinja imported here, not in the child (see render)
    site_bounds.run(lambda: _site_template(environment(), file) and None, str(file), MAX_RENDER_S)


def _render_bounded(template, context: dict, file: Path) -> str:
    """The template's script (with site_checks' marks), refused once it grows past MAX_SCRIPT_CHARS."""
    parts, size = [], 0
    for part in template.generate(context):
        size += len(part)
        if size > MAX_SCRIPT_CHARS:
            _refuse(file, None, f"renders a batch script larger than {MAX_SCRIPT_CHARS // (1024 * 1024)} MiB, "
                    "sbatch's default limit (max_script_size); print less (a loop without end?)")
        parts.append(part)
    return "".join(parts)


def _template_line(exc: BaseException, file: Path) -> int | None:
    """The line of the site's template an error was raised at: Jinja rewrites a render's
    traceback so that its frames carry the template's file and lines."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(file):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _check_blocks_whole_shell(marked, block_lines: dict, file: Path) -> None:
    """Each shell block the site overrides is whole shell on its own: an unclosed quote,
    here-document or bracket, or a last line ending in a backslash or `&&`, would swallow sf's lines
    after it (a prologue's `<<EOF` ended in the epilogue turns sf's environment, requeue trap and
    supervisor into text, and the script still parses). Checked with `bash -n` on the block
    inside a `{ ...; }` group, which such a block leaves unclosed."""
    for name, start, end in marked.blocks:
        if name not in SHELL_BLOCKS:
            continue
        text = marked.text[start:end]
        try:
            # `}` right on the line after the block's last, as sf's next line is in the script
            group = "{\n:\n" + text + ("" if text.endswith("\n") else "\n") + "}\n"
            proc = subprocess.run(["bash", "-n"], input=group, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue  # no bash on this node to ask: sbatch's nodes run the script with it anyway
        if proc.returncode != 0:
            # bash's first error, less its line number (one of the wrapped text, not the file's)
            said = [re.sub(r"^bash: (line \d+: )?", "", line) for line in proc.stderr.splitlines()
                    if "warning" not in line] or [f"exit {proc.returncode}"]
            _refuse(file, block_lines.get(name), f"its {name} block is not whole shell on its own (bash -n: "
                    f"{said[0]}); close every quote, here-document, bracket and if/for/case in the block it "
                    "opens, or sf's lines after it would not run")


def _check_whole_script(marked, block_lines: dict, file: Path) -> None:
    """What the site's blocks run, on the whole script (launcher.render.site_checks)."""
    try:
        site_checks.check(marked, SHELL_BLOCKS)
    except site_checks.Refused as refused:
        at = refused.offset
        block = next((name for name, start, end in marked.blocks if start <= at < end), "?")
        line_no = marked.text.count("\n", 0, at) + 1
        line = marked.text.split("\n")[line_no - 1].strip()
        _refuse(file, block_lines.get(block), f"block {block}, script line {line_no} ({line[:60]!r}): "
                f"{refused.rule}")


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
        # sbatch takes any unique prefix of a long option (--requ is --requeue, --out --output)
        taken = sorted(option for option in owned if option.startswith(match["key"]))
        if taken:
            short = "" if taken[0] == match["key"] else f" (sbatch reads --{match['key']} as a prefix of it)"
            _refuse(file, None, f"block extra_sbatch, {line!r}: sf sets --{taken[0]} itself{short}; the site "
                    "file and the spec's slurm: section set it")
    if at != len(expected):
        _refuse(file, None, f"sf's own line {expected[at]!r} is missing from the script's header")
    for line in lines[end:]:
        if line.startswith("#SBATCH"):
            _refuse(file, None, f"{line!r} comes after the first command, where sbatch would not read it; "
                    "write #SBATCH lines in the extra_sbatch block")


def _render_checked(context: dict, site_file: Path) -> str:
    """In site_bounds' child: the site's template compiled, rendered and checked."""
    import jinja2  # Jinja on first use only (start-up cost)

    env = environment()
    template, block_lines = _site_template(env, site_file)
    try:
        marked = site_checks.strip_marks(_render_bounded(template, context, site_file))
    except (SpecError, MemoryError, RecursionError):
        raise  # (the last two: site_bounds says what they mean)
    except Exception as exc:  # undefined names, the sandbox's refusals, a failing expression
        line = getattr(exc, "lineno", None) if isinstance(exc, jinja2.TemplateError) else None
        _refuse(site_file, line or _template_line(exc, site_file), f"{type(exc).__name__}: {exc}")
    site_chars = sum(end - start for _name, start, end in marked.blocks)
    if site_chars > MAX_TEMPLATE_BYTES:
        _refuse(site_file, None, f"its blocks render {site_chars // 1024} KiB of lines, more than the "
                f"{MAX_TEMPLATE_BYTES // 1024} KiB a site's template may hold; print less (a loop over too much?)")
    _check_blocks_whole_shell(marked, block_lines, site_file)
    _check_site_header(marked.text, context["components"], site_file)
    _check_whole_script(marked, block_lines, site_file)
    return marked.text


def render(context: dict, templates_dir: str) -> str:
    """The batch script: the site's train.sbatch.j2 when `templates_dir` holds one, else sf's.
    `context`: launcher.render.script's checked values (Shell, Sbatch, numbers, their tuples).
    Compiled, rendered and checked in a child process within site_bounds' limits."""
    site_file = Path(templates_dir) / TEMPLATE
    if not site_file.exists() and not site_file.is_symlink():  # no template of its own: sf's
        return sbatch_template.render(context)
    # Jinja imported and sf's own template compiled here, not in the child (an import lock held
    # by a thread at the fork; and a compile in the child is lost with it, each time)
    environment().get_template(BASE)
    return site_bounds.run(lambda: _render_checked(context, site_file), str(site_file), MAX_RENDER_S)
