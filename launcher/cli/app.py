"""The `sf` command line.

Commands live in small modules and are imported only when used, so `sf --help` stays
fast on a busy login node. Every SpecError ends the command with one line per problem
on stderr and exit code 2; SlurmError with exit code 1. With --json, every command also
prints its errors as one JSON document on stdout, of one shape for all commands:

    {"ok": false, "errors": [{"field": "...", "message": "...", "hint": "..." or null}]}

(`sf validate --json` adds "valid": false, as it always did.)
"""

from __future__ import annotations

import importlib
import json
import sys

import click

from launcher import __version__
from launcher.errors import SlurmError, SpecError, SpecErrors

# name -> ("module:function", short help shown by `sf --help` without importing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "new": ("launcher.cli.cmd_spec:new", "Create experiments/NAME/config.yaml for a method."),
    "validate": ("launcher.cli.cmd_spec:validate", "Check an experiment and show the compiled verl command."),
    "schema": ("launcher.cli.cmd_spec:schema", "Print the JSON Schema of config.yaml (--site, --registry: theirs)."),
    "render": ("launcher.cli.cmd_run:render", "Write the sbatch script and overrides of an experiment."),
    "submit": ("launcher.cli.cmd_run:submit", "Compile, render and submit an experiment to Slurm."),
    "status": ("launcher.cli.cmd_monitor:status", "Show the state of runs and sweeps."),
    "logs": ("launcher.cli.cmd_logs:logs", "Print or follow the logs of a run."),
    "cancel": ("launcher.cli.cmd_monitor:cancel", "Cancel a run or a sweep."),
    "list": ("launcher.cli.cmd_monitor:list_runs", "List runs."),
    "sweep": ("launcher.cli.cmd_sweep:sweep", "Submit a grid of runs as one Slurm job array."),
    "export": ("launcher.cli.cmd_export:export", "Merge a verl checkpoint into a Hugging Face folder."),
    "eval": ("launcher.cli.cmd_export:eval_cmd", "Evaluate an SFT run and attach the samples to it."),
    "metrics": ("launcher.cli.cmd_metrics:metrics", "Print the key training metrics of a run."),
    "plot": ("launcher.cli.cmd_metrics:plot", "Draw the key training metrics of a run to a PNG."),
    "doctor": ("launcher.cli.cmd_doctor:doctor", "Check the site file against the live cluster."),
    "attach": ("launcher.cli.cmd_attach:attach", "A shell (or a command) inside a running job, on one of its nodes."),
    "dashboard": ("launcher.cli.cmd_attach:dashboard", "Print the ssh port-forward to a running job's Ray dashboard."),
}


def error_document(errors: list[SpecError], command: str | None = None) -> dict:
    """The JSON every command prints for its errors with --json."""
    doc = {"ok": False, "errors": [{"field": e.field, "message": e.message, "hint": _hint(e.message)}
                                   for e in errors]}
    if command == "validate":
        doc["valid"] = False
    return doc


def _hint(message: str) -> str | None:
    """The fix, where a message says it after its last `; ` (sf's messages are `what; fix`)."""
    _, sep, fix = message.rpartition("; ")
    return fix if sep else None


def os_error(exc: OSError) -> SpecError:
    """A file-system failure as one line: the path, the cause and what to do."""
    import errno
    import os

    where = exc.filename if exc.filename is not None else "path"
    other = f" ({exc.filename2})" if getattr(exc, "filename2", None) else ""
    path = str(where)
    chain, p = [], path.rstrip("/")
    while p and p not in chain:
        chain.append(p)
        p = os.path.dirname(p)
    blocker = next((p for p in chain if os.path.lexists(p) and not os.path.isdir(p)), None)
    if exc.errno in (errno.EEXIST, errno.ENOTDIR) and blocker:
        return SpecError(path, f"{blocker} is a file where sf needs a folder; move it away or use another path")
    if exc.errno == errno.ENAMETOOLONG:  # a pasted blob as a run name or path: not 5,000 characters of it again
        shown = path if len(path) <= 120 else f"{path[:100]}... ({len(path)} characters)"
        return SpecError(shown, "a name in this path is longer than the file system allows (255 bytes a name, "
                                "4096 a path); use a shorter one")
    # the path is the field: the message says only what happened to it (and to a second path)
    return SpecError(path, f"{exc.strerror or exc}{other}; fix the path or its permissions")


def _exc_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def crash_dir() -> str:
    """Where crash reports go: $SF_CACHE_DIR, else $XDG_CACHE_HOME/sf, else ~/.cache/sf; crashes/."""
    import os

    root = os.environ.get("SF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sf")
    return os.path.join(root, "crashes")


def save_crash_report(exc: BaseException) -> str | None:
    """The traceback and the command line of an unexpected exception, in a file of its own in
    crash_dir() (mode 0600: a command line may hold paths the user would not share); its path,
    or None when it cannot be written."""
    import os
    import tempfile
    import time
    import traceback

    try:
        folder = crash_dir()
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, path = tempfile.mkstemp(dir=folder, prefix=time.strftime("crash-%Y%m%d-%H%M%S-", time.gmtime()),
                                    suffix=".txt")
        with os.fdopen(fd, "w") as handle:
            handle.write(f"sf {__version__}\ncommand: {sys.argv!r}\ncwd: {os.getcwd()}\n\n")
            handle.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return path
    except Exception:  # noqa: BLE001 - the report is best effort; the one line still goes out
        return None


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module_name, _, attr = COMMANDS[name][0].partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx, formatter):
        # Short help from the table above: listing commands imports nothing.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        # whether the command was asked for JSON, known even when its own parsing fails
        ctx.meta["sf.json"] = "--json" in (args[: args.index("--")] if "--" in args else args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (SpecErrors, SpecError) as exc:
            errors = exc.errors if isinstance(exc, SpecErrors) else [exc]
            self._fail(ctx, errors, exc.exit_code, "sf: error: ")
        except SlurmError as exc:
            self._fail(ctx, [SpecError("slurm", str(exc))], exc.exit_code, "sf: slurm error: ", from_slurm=True)
        except OSError as exc:  # a spec, site, runs dir or output path the file system refuses: no traceback
            self._fail(ctx, [os_error(exc)], 2, "sf: error: ")
        except RecursionError:
            self._fail(ctx, [SpecError("input", "an input is nested too deeply (a YAML or JSON file?); fix it")], 2,
                       "sf: error: ")
        except click.UsageError as exc:
            if not ctx.meta.get("sf.json"):
                raise  # click prints the usage and exits 2
            param = getattr(exc, "param", None)
            field = param.opts[0] if param is not None and getattr(param, "opts", None) else "usage"
            self._fail(ctx, [SpecError(field, exc.format_message())], 2, "sf: error: ")
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own endings (--help, exit codes, Ctrl-C at a prompt)
        except Exception as exc:  # a bug in sf: one line and a saved report, never a traceback
            report = save_crash_report(exc)
            where = f"; report saved in {report}" if report else " (no report: the cache dir is not writable)"
            self._fail(ctx, [SpecError("internal", f"sf failed unexpectedly ({_exc_line(exc)}){where}; "
                                       "please send the report to sf's maintainers")], 1, "sf: error: ")

    @staticmethod
    def _fail(ctx, errors: list[SpecError], exit_code: int, prefix: str, from_slurm: bool = False):
        if ctx.meta.get("sf.json"):
            click.echo(json.dumps(error_document(errors, ctx.invoked_subcommand), indent=2))
        for error in errors:
            # Slurm's own message already says what failed; a spec error always names its field,
            # `slurm` (config.yaml's `slurm: null`) included
            shown = error.message if from_slurm else str(error)
            click.echo(f"{prefix}{shown}", err=True)
        sys.exit(exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sf")
def main():
    """sf: launch verl post-training runs on Slurm.

    \b
    Typical use:
      sf new my-grpo --method verl/grpo
      sf validate my-grpo --model /models/Qwen2.5-0.5B --train-data data/train.parquet
      sf submit my-grpo --profile h200:8 --model ... --train-data ...
      sf status; sf logs RUN -f; sf cancel RUN

    Shell completion: eval "$(_SF_COMPLETE=bash_source sf)" (zsh_source, fish_source).
    """


if __name__ == "__main__":
    main()
